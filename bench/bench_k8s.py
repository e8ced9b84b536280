"""Benchmark from a Kubernetes write to the route at a real peer (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_k8s.py [--changes 200] [--services 10000]
        [--rate 1000] [--seconds 60] [--load-services 200] [--changes-big 50]
        [--write http|store]

It builds a one-node lab (``Topology``): BIRD 2 in the router namespace, the API
simulator in this process on a thread inside the router namespace (172.31.250.2:6443,
as the lab does), and in node1's namespace first a bare ExaBGP, then a real
``kube-bgpd speaker --kubeconfig`` watching the simulator. The peer's RIB is read over
BIRD's control socket (``show route <prefix>``, no birdc fork), polled every ~1 ms, so
the figures include up to ~1 ms of polling granularity. In order, it measures:

1. bare ExaBGP: one change's latency, p50/p99 over ``--changes`` alternating
   ``announce``/``withdraw route`` commands written to its API process, to the route
   appearing at (leaving) BIRD; then ``--services`` routes announced (at most 200
   unacknowledged), the RSS of ExaBGP and of its trivial API process, and one change's
   latency again over ``--changes-big`` changes while ExaBGP holds those routes (the
   bare figure to set the speaker's at ``--services`` against);
2. the speaker with 2 Local Services, then with ``--load-services`` more: one change's
   latency over ``--changes`` changes, from just before the write that makes a
   Service's only (node1) endpoint ready or not ready to the route appearing at
   (leaving) BIRD. The write is an HTTP merge PATCH of the EndpointSlice to the
   simulator (``--write http``, the default: one kept-alive connection from a thread in
   the simulator's namespace, the clock started just before the request is written) or
   a write straight into the simulator's store (``--write store``); next to the
   speaker's own means of ``kube_bgpd_convergence_seconds`` (decide, accept, total)
   and ``kube_bgpd_reconcile_duration_seconds`` over the same changes;
3. sustained load: ``--rate`` EndpointSlice changes per second for ``--seconds``. With
   ``--write http`` they are HTTP merge PATCHes from a writer process in the simulator's
   namespace (this file with ``--load-writer``: aiohttp, 8 kept-alive connections), and
   the probes below go through the same HTTP writer as the latency phases; with ``--write
   store`` a coroutine in the simulator's own loop writes into the store. Each write
   flips the readiness of the node1 endpoint of one of the ``--load-services`` Services,
   so every write is a route change for the speaker. Every ``--sample`` seconds it
   records the writes done, the EndpointSlice watch events the speaker received
   (``kube_bgpd_watch_events_total``) and one probe change's latency to BIRD; a backlog
   shows as a received count falling further behind, or a probe latency that grows;
4. cold start: ``--services`` more Services (each with an allocated ingress IP and an
   EndpointSlice with a ready endpoint on node1) seeded into the store, a new speaker
   process, and the time from its start to all routes at BIRD
   (``show route where source = RTS_BGP count`` every 20 ms);
5. the speaker's RSS (daemon, ExaBGP, helper) at that size, the time of one GET of its
   ``/metrics`` and ``/status``, then one change's latency again over ``--changes-big``
   changes with all those Services in the cluster, and once more while another thread
   GETs ``/metrics`` back to back (what a Prometheus scrape costs a route change).

Everything it creates (namespaces, BIRD, ExaBGP, speaker) is removed at the end.
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import json
import os
import queue
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from kbgpd_lab.kit.incluster import ServiceAccount, in_cluster
from kbgpd_lab.kit.measure import (
    address,
    children_rss_kb,
    pct,
    peak_rss_kb,
    prefixes,
    pss_kb,
    rss_kb,
    tree_pss_kb,
)
from kbgpd_lab.kit.processes import Child, FedExaBGP, ProcessGroup, speaker_argv
from kbgpd_lab.kit.scale import NAMESPACE, local_service, node1_endpoints, node1_slice
from kbgpd_lab.lab.apicluster import (
    NetnsApiSimulator,
    call_in_netns,
    enter_netns,
    node_object,
)
from kbgpd_lab.lab.lab import fed_exabgp
from kbgpd_lab.lab.routers import BirdRouter, make_router
from kbgpd_lab.lab.speakerfiles import one_peer_config
from kbgpd_lab.lab.topology import Topology

API_HOST = "172.31.250.2"  # a secondary router address on br0, as kbgpd_lab/lab/lab.py uses
API_PORT = 6443
STATUS = "127.0.0.1:7473"  # the speaker's status/metrics listener, inside node1's netns
LATENCY_IP = "10.99.200.1"
_T = TypeVar("_T")
PROBE_IP = "10.99.201.1"


# --------------------------------------------------------------------------- the peer


class BirdCtl:
    """BIRD's control socket, spoken directly: one round trip per query, no birdc fork."""

    _END = re.compile(rb"^\d{4} ")

    def __init__(self, router: BirdRouter) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(router.ctl))
        self.reader = self.sock.makefile("rb")
        self._reply()  # the "0001 BIRD ... ready." banner

    def _reply(self) -> list[bytes]:
        lines = []
        while True:
            line = self.reader.readline()
            if not line:
                raise ConnectionError("BIRD closed its control socket")
            lines.append(line)
            if self._END.match(line):
                return lines

    def command(self, text: str) -> list[bytes]:
        self.sock.sendall(text.encode() + b"\n")
        return self._reply()

    def has(self, ip: str) -> bool:
        # A present route is listed in 1007 lines; an absent one ends with "8001 Network
        # not found" (or an empty 0000).
        return any(line.startswith(b"1007") for line in self.command(f"show route {ip}/32"))

    def count(self) -> int:
        # BGP routes only: protocol direct puts the connected LAN in the table too.
        for line in self.command("show route where source = RTS_BGP count"):
            m = re.search(rb"(\d+) of \d+ routes", line)
            if m:
                return int(m.group(1))
        return 0

    def wait(self, ip: str, present: bool, within: float = 30, poll: float = 0.001) -> float:
        """Poll until ``ip``/32 is (not) in BIRD's table; return the monotonic time seen."""
        deadline = time.monotonic() + within
        while True:
            if self.has(ip) == present:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{ip} {'never came' if present else 'never left'}")
            time.sleep(poll)

    def wait_count(self, n: int, within: float = 300, poll: float = 0.02) -> float:
        deadline = time.monotonic() + within
        while True:
            got = self.count()
            if got >= n:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{got} of {n} routes at BIRD")
            time.sleep(poll)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


# --------------------------------------------------------------------------- cluster objects


def speaker_config(topo: Topology) -> str:
    # /status on the network listener too: the benchmark reads it over TCP.
    return one_peer_config(
        pool="bench",
        addresses=("10.99.0.0/16",),
        peer_address=str(topo.router_address(4)),
        speaker={"exposeStatus": True},
    )


# --------------------------------------------------------------------------- processes


class Speaker:
    """``kube-bgpd speaker`` in node1's namespace, reading the simulator (``kubeconfig``)
    or a cluster dump (``cluster_file``)."""

    def __init__(
        self,
        topo: Topology,
        work: Path,
        kubeconfig: Path | None,
        cluster_file: Path | None = None,
        account: ServiceAccount | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        """``prefix``: words before the speaker's argv (e.g. a profiler running it)."""
        self.topo = topo
        work.mkdir(parents=True, exist_ok=True)
        (work / "config.yaml").write_text(speaker_config(topo))
        self.group = ProcessGroup(work)
        argv = speaker_argv(
            config=work / "config.yaml",
            node="node1",
            kubeconfig=kubeconfig,
            cluster_file=cluster_file,
            work_dir=work / "work",
            metrics_address=STATUS,
        )
        argv = [*prefix, *argv]
        kw: dict[str, Any] = {}
        if account is not None:
            # As in a pod: the service account's files, no kubeconfig (kbgpd_lab.kit.incluster).
            argv, kw["env"] = in_cluster(argv, account)
        self.child: Child = self.group.start("speaker", argv, spawner=topo.nodes[0], **kw)
        self.log = self.child.log
        self.started = time.monotonic()

    def get(self, path: str) -> str:
        def fetch() -> str:
            with urllib.request.urlopen(f"http://{STATUS}{path}", timeout=10) as r:
                return str(r.read().decode())

        return call_in_netns(self.topo.nodes[0].name, fetch)

    def slice_events(self) -> int:
        total = 0.0
        for line in self.get("/metrics").splitlines():
            if line.startswith('kube_bgpd_watch_events_total{kind="EndpointSlice"'):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def convergence(self) -> dict[str, tuple[float, int]]:
        """kube_bgpd_convergence_seconds per phase and kube_bgpd_reconcile_duration_seconds
        ("reconcile"): (sum in seconds, count)."""
        got: dict[str, list[float]] = {}
        for line in self.get("/metrics").splitlines():
            m = re.match(
                r"kube_bgpd_(?:convergence_seconds|(reconcile)_duration_seconds)_(sum|count)"
                r'(?:\{phase="(\w+)"\})? (\S+)',
                line,
            )
            if m:
                phase = m.group(1) or m.group(3)
                got.setdefault(phase, [0.0, 0.0])[m.group(2) == "count"] = float(m.group(4))
        return {k: (v[0], int(v[1])) for k, v in got.items()}

    def rss(self) -> tuple[int, int, int]:
        """RSS in KiB of the daemon, its ExaBGP and ExaBGP's children (the helper)."""
        return self.memory()[:3]

    def memory(self) -> Memory:
        """RSS in KiB of the daemon, its ExaBGP and ExaBGP's children (the helper), the
        PSS of the three together, and the daemon's and ExaBGP's peak RSS. The daemon's
        are read first: answering /status (which names ExaBGP's pid) renders every route,
        and the daemon's RSS keeps that peak (~14 MiB at 10,000 routes)."""
        pid = self.child.pid
        daemon, daemon_pss, daemon_peak = rss_kb(pid), pss_kb(pid), peak_rss_kb(pid)
        exa = int(json.loads(self.get("/status"))["exabgp"]["pid"])
        return Memory(
            daemon,
            rss_kb(exa),
            children_rss_kb(exa),
            daemon_pss + tree_pss_kb(exa),
            daemon_peak,
            peak_rss_kb(exa),
        )

    def stop(self) -> None:
        self.group.stop()


class Memory(NamedTuple):
    """A speaker's memory (Speaker.memory), in KiB."""

    daemon: int
    exabgp: int
    helper: int
    #: PSS of the three together.
    pss: int
    #: The most RSS the daemon had since it started (VmHWM), before /status was asked.
    daemon_peak: int
    exabgp_peak: int


@contextmanager
def lab(
    work: Path, *, token: str | None = None
) -> Iterator[tuple[Topology, BirdRouter, NetnsApiSimulator]]:
    """The one-node lab; with ``token``, the simulator serves HTTPS (``sim.sim.ca_cert``)
    and requires that bearer token, as an API server does for a pod's service account."""
    topo = Topology.create(nodes=1, ipv6=False, client=False)
    router = None
    try:
        router = make_router("bird", topo.router, work / "bird")
        assert isinstance(router, BirdRouter)
        router.start()
        topo.router.ip("addr", "add", f"{API_HOST}/24", "dev", "br0")
        with NetnsApiSimulator(
            topo.router.name,
            host=API_HOST,
            port=API_PORT,
            history_size=200_000,
            tls=token is not None,
            token=token,
        ) as sim:
            assert isinstance(sim, NetnsApiSimulator)
            yield topo, router, sim
    finally:
        if router is not None:
            router.close()
        topo.destroy()


# --------------------------------------------------------------------------- phases


def summary(name: str, values: list[float]) -> dict[str, float]:
    ms = {
        "p50": statistics.median(values) * 1000,
        "p99": pct(values, 0.99) * 1000,
        "max": max(values) * 1000,
    }
    print(
        f"{name}: p50 {ms['p50']:.2f} ms  p99 {ms['p99']:.2f} ms  max {ms['max']:.2f} ms "
        f"(n={len(values)})",
        flush=True,
    )
    return ms


def latency_bare(bare: FedExaBGP, bird: BirdCtl, changes: int) -> list[float]:
    out = []
    for i in range(changes):
        up = i % 2 == 0
        verb = "announce" if up else "withdraw"
        time.sleep(0.05)
        t0 = time.monotonic()
        bare.feed.send([f"{verb} route {LATENCY_IP}/32 next-hop self"])
        out.append(bird.wait(LATENCY_IP, up) - t0)
    return out


def bulk_bare(bare: FedExaBGP, bird: BirdCtl, n: int, window: int = 200) -> float:
    """Announce n routes (at most ``window`` unacknowledged); seconds to all at BIRD."""
    cmds = [f"announce route {p} next-hop self" for p in prefixes(n)]
    t0 = time.monotonic()
    bare.feed.send_windowed(cmds, window)
    return bird.wait_count(n) - t0


def flip(sim: NetnsApiSimulator, svc: str, ready: bool) -> None:
    sim.store.patch(
        "endpointslices", f"{svc}-a", {"endpoints": node1_endpoints(ready)}, namespace=NAMESPACE
    )


def slice_path(svc: str) -> str:
    """The API path of Service ``svc``'s EndpointSlice (``node1_slice()`` names it)."""
    return f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/{svc}-a"


class HttpWriter:
    """EndpointSlice merge-patches over HTTP to the simulator, from one thread inside its
    namespace on one kept-alive connection (as a controller's client keeps one). The
    clock starts in that thread just before the request is written: the HTTP request,
    the simulator's handling and its watch fan-out are all inside the measurement."""

    def __init__(
        self, netns_name: str, *, ca_cert: Path | None = None, token: str | None = None
    ) -> None:
        """``ca_cert`` and ``token``: the simulator serves HTTPS and requires the token."""
        self._jobs: queue.Queue[tuple[str, bytes, dict[str, Any], threading.Event] | None]
        self._jobs = queue.Queue()
        self._headers = {"Content-Type": "application/merge-patch+json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._ca_cert = ca_cert
        self._thread = threading.Thread(target=self._run, args=(netns_name,), daemon=True)
        self._thread.start()

    def _run(self, netns_name: str) -> None:
        enter_netns(netns_name)
        conn: http.client.HTTPConnection
        if self._ca_cert is not None:
            context = ssl.create_default_context(cafile=str(self._ca_cert))
            conn = http.client.HTTPSConnection(API_HOST, API_PORT, timeout=30, context=context)
        else:
            conn = http.client.HTTPConnection(API_HOST, API_PORT, timeout=30)
        while (job := self._jobs.get()) is not None:
            path, data, box, done = job
            try:
                box["t0"] = time.monotonic()
                conn.request(
                    "PATCH",
                    path,
                    body=data,
                    headers=self._headers,
                )
                response = conn.getresponse()
                response.read()
                box["status"] = response.status
            except (OSError, http.client.HTTPException) as exc:
                box["error"] = exc
                conn.close()
            finally:
                done.set()
        conn.close()

    def flip(self, svc: str, ready: bool) -> float:
        """Write the change; returns the monotonic time just before it was sent."""
        path = slice_path(svc)
        box: dict[str, Any] = {}
        done = threading.Event()
        data = json.dumps({"endpoints": node1_endpoints(ready)}).encode()
        self._jobs.put((path, data, box, done))
        done.wait(30)
        if "error" in box or box.get("status") != 200:
            raise RuntimeError(f"PATCH {path}: {box}")
        t0: float = box["t0"]
        return t0

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(5)


def latency_speaker(
    sim: NetnsApiSimulator, bird: BirdCtl, changes: int, writer: HttpWriter | None = None
) -> list[float]:
    """One change's latency to BIRD: written over HTTP when a ``writer`` is given, else
    straight into the simulator's store (``--write store``)."""
    out = []
    for i in range(changes):
        ready = i % 2 == 0
        time.sleep(0.05)
        if writer is not None:
            t0 = writer.flip("lat", ready)
        else:
            t0 = time.monotonic()
            flip(sim, "lat", ready)
        out.append(bird.wait(LATENCY_IP, ready) - t0)
    return out


def speaker_latency(
    sim: NetnsApiSimulator,
    speaker: Speaker,
    bird: BirdCtl,
    changes: int,
    what: str,
    writer: HttpWriter | None,
) -> None:
    before = speaker.convergence()
    what += ", HTTP PATCH" if writer is not None else ", store write"
    v = timed(f"speaker latency, {what}", lambda: latency_speaker(sim, bird, changes, writer))
    summary(f"speaker EndpointSlice write -> BIRD ({what})", v)
    after = speaker.convergence()
    print(
        "  speaker's own metrics over these changes (means): "
        + ", ".join(
            f"{phase} {(after[phase][0] - before[phase][0]) / n * 1000:.2f} ms"
            for phase in after
            if (n := after[phase][1] - before[phase][1])
        ),
        flush=True,
    )


def latency_while_scraping(
    sim: NetnsApiSimulator,
    speaker: Speaker,
    bird: BirdCtl,
    changes: int,
    what: str,
    writer: HttpWriter | None,
) -> None:
    v, scrapes = while_scraping(
        speaker,
        lambda: timed(
            f"speaker latency while scraping, {what}",
            lambda: latency_speaker(sim, bird, changes, writer),
        ),
    )
    summary(f"speaker EndpointSlice write -> BIRD ({what}, /metrics scraped back to back)", v)
    print(f"  {scrapes} scrapes of /metrics meanwhile", flush=True)


def while_scraping(speaker: Speaker, fn: Callable[[], _T]) -> tuple[_T, int]:
    """``fn()`` while another thread GETs the speaker's ``/metrics`` back to back; its
    result and the number of scrapes meanwhile."""
    stop = threading.Event()
    scrapes = [0]

    def scrape() -> None:
        while not stop.is_set():
            speaker.get("/metrics")
            scrapes[0] += 1

    thread = threading.Thread(target=scrape, name="scraper", daemon=True)
    thread.start()
    try:
        return fn(), scrapes[0]
    finally:
        stop.set()
        thread.join()


async def write_load_http(url: str, rate: int, seconds: float, services: int) -> None:
    """The ``--load-writer`` process: ``rate`` EndpointSlice merge PATCHes a second over
    HTTP (8 kept-alive connections, plain aiohttp) for ``seconds``, each flipping the next
    load Service's endpoint. Prints "<completed writes> <most behind schedule>" every
    50 ms and once at the end, for the benchmark to read (so the benchmark's "written"
    can lag the truth by up to ~50 writes)."""
    import asyncio

    import aiohttp

    done = sent = behind = 0
    start = time.monotonic()
    stop = start + seconds
    ready = [True] * services

    async def lane(session: aiohttp.ClientSession) -> None:
        nonlocal done, sent, behind
        while time.monotonic() < stop:
            due = int((time.monotonic() - start) * rate)
            behind = max(behind, due - done)
            if sent >= due:
                await asyncio.sleep(0.001)
                continue
            k = sent % services
            sent += 1
            ready[k] = not ready[k]
            path = slice_path(f"load{k}")
            body = json.dumps({"endpoints": node1_endpoints(ready[k])})
            headers = {"Content-Type": "application/merge-patch+json"}
            async with session.patch(url + path, data=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"PATCH {path}: {response.status}")
            done += 1

    async def report() -> None:
        while time.monotonic() < stop:
            print(done, behind, flush=True)
            await asyncio.sleep(0.05)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(report(), *(lane(session) for _ in range(8)))
    print(done, behind, flush=True)


class HttpLoad:
    """The ``--load-writer`` process in the simulator's namespace, and what it reported."""

    def __init__(self, topo: Topology, args: argparse.Namespace) -> None:
        self.written = 0
        self.behind_max = 0
        self.proc = topo.router.popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--load-writer",
                f"http://{API_HOST}:{API_PORT}",
                "--rate",
                str(args.rate),
                "--seconds",
                str(args.seconds),
                "--load-services",
                str(args.load_services),
            ],
            stdout=subprocess.PIPE,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            done, behind = (int(x) for x in line.split())
            self.written, self.behind_max = done, behind

    def finish(self) -> None:
        if self.proc.wait(30) != 0:
            raise RuntimeError(f"the load writer exited {self.proc.returncode}")
        self.thread.join(5)


def start_load(sim: NetnsApiSimulator, services: int, rate: int) -> dict[str, Any]:
    """Start the writer coroutine in the simulator's loop; returns its shared state."""
    import asyncio

    state: dict[str, Any] = {"written": 0, "stop": False, "behind_max": 0}
    store = sim.sim.store

    async def writer() -> None:
        start = time.monotonic()
        ready = [True] * services
        while not state["stop"]:
            due = int((time.monotonic() - start) * rate)
            state["behind_max"] = max(state["behind_max"], due - state["written"])
            while state["written"] < due:
                k = state["written"] % services
                ready[k] = not ready[k]
                store.patch(
                    "endpointslices",
                    f"load{k}-a",
                    {"endpoints": node1_endpoints(ready[k])},
                    namespace=NAMESPACE,
                )
                state["written"] += 1
            await asyncio.sleep(0.002)

    sim.call(lambda: asyncio.ensure_future(writer()))
    return state


def load(
    sim: NetnsApiSimulator,
    speaker: Speaker,
    bird: BirdCtl,
    args: argparse.Namespace,
    topo: Topology,
    writer: HttpWriter | None,
) -> list[tuple[float, int, int, float]]:
    """Rows of (seconds, written, received by the speaker, probe latency). With a
    ``writer`` (``--write http``) the load and the probes are HTTP writes, from a writer
    process and from the writer thread; else both go into the store."""
    base = speaker.slice_events()
    http = HttpLoad(topo, args) if writer is not None else None
    state = start_load(sim, args.load_services, args.rate) if http is None else {}

    def written_now() -> int:
        if http is not None:
            return http.written
        return sim.call(lambda: int(state["written"]))

    t0 = time.monotonic()
    rows: list[tuple[float, int, int, float]] = []
    probe_up = True
    try:
        while time.monotonic() - t0 < args.seconds:
            time.sleep(args.sample)
            # Received first: the written count read after it is an upper bound.
            received = speaker.slice_events() - base - len(rows)
            written = written_now()
            if writer is not None:
                start = writer.flip("probe", probe_up)
            else:
                start = time.monotonic()
                flip(sim, "probe", probe_up)
            lag = bird.wait(PROBE_IP, probe_up) - start
            probe_up = not probe_up
            rows.append((time.monotonic() - t0, written, received, lag))
            print(
                f"  t={rows[-1][0]:5.1f} s written {written} received {received} "
                f"(behind {written - received}) probe {lag * 1000:.1f} ms",
                flush=True,
            )
    finally:
        if http is None:
            sim.call(lambda: state.__setitem__("stop", True))
        else:
            http.finish()
    ended = time.monotonic()
    written = written_now()
    behind_max = http.behind_max if http is not None else state["behind_max"]
    deadline = time.monotonic() + 60
    # The probe flips are EndpointSlice events too.
    while speaker.slice_events() - base - len(rows) < written and time.monotonic() < deadline:
        time.sleep(0.1)
    caught = time.monotonic() - ended
    received = speaker.slice_events() - base - len(rows)
    print(
        f"  {written} writes in {ended - t0:.1f} s; after the last write: received "
        f"{received} of {written} ({caught:.2f} s after the load's end); the writer fell "
        f"behind its schedule by at most {behind_max} writes"
        + (" (HTTP PATCHes from a writer process)" if http is not None else " (store writes)"),
        flush=True,
    )
    for k in range(args.load_services):  # all ready again, for the cold start
        flip(sim, f"load{k}", True)
    return rows


def compile_product() -> None:
    """Write the product's bytecode (bgpd, k8s_watcher) before a speaker is timed.

    The installed wheel has it (pip compiles on install, the image's too); a checkout run
    with PYTHONDONTWRITEBYTECODE=1 (as on the benchmark machine) would compile ~90 modules
    in every speaker's start and in its ExaBGP's (~0.1-0.15 s of CPU each), which no node
    pays."""
    root = Path(__file__).resolve().parent.parent
    for package in ("bgpd", "k8s_watcher"):
        compileall.compile_dir(root / package, quiet=1)


def seed(sim: NetnsApiSimulator, objects: list[dict[str, Any]]) -> float:
    t0 = time.monotonic()
    store = sim.sim.store

    def create_all() -> None:
        for obj in objects:
            store.create(obj)
        # Encode each stored object for LISTs now: kube-apiserver encodes a LIST in Go,
        # on another machine, where the simulator would spend ~0.3 s of Python on the
        # 20,000 objects of 10,000 Services inside the speaker's first LIST, on the same
        # two CPUs. What clients receive is the same (the encoding is cached either way).
        for rd in store.table.resources:
            if not rd.crd:
                for record in store.records(rd).values():
                    record.item_json()

    sim.call(create_all, timeout=600)
    return time.monotonic() - t0


def timed(what: str, fn: Callable[[], Any]) -> Any:
    print(f"-- {what}", file=sys.stderr, flush=True)
    return fn()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--changes-big", type=int, default=50, help="changes at --services")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--load-services", type=int, default=200)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    ap.add_argument(
        "--write",
        choices=("http", "store"),
        default="http",
        help="latency changes as HTTP PATCHes to the simulator (default) or store writes",
    )
    ap.add_argument("--load-writer", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_writer:
        import asyncio

        asyncio.run(write_load_http(args.load_writer, args.rate, args.seconds, args.load_services))
        return
    # The simulator thread and the poller share this interpreter: switch often.
    sys.setswitchinterval(0.0005)
    compile_product()
    # Not under /tmp/kube-bgpd-*: other runs on this machine clean those up by pattern.
    work = Path(tempfile.mkdtemp(prefix="bench-k8s-", dir="/var/tmp"))
    try:
        run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    with lab(work) as (topo, router, sim):
        kubeconfig = sim.write_kubeconfig(work / "kubeconfig")
        bird = BirdCtl(router)
        writer = HttpWriter(topo.router.name) if args.write == "http" else None
        try:
            # Bare ExaBGP first, alone on node1.
            bare = fed_exabgp(topo, work / "bare")
            try:
                router.wait_established(1, 30)
                time.sleep(1)
                v = timed("bare latency", lambda: latency_bare(bare, bird, args.changes))
                summary("bare ExaBGP announce/withdraw -> BIRD", v)
                took = timed("bare bulk", lambda: bulk_bare(bare, bird, args.services))
                time.sleep(2)
                exa = rss_kb(bare.pid)
                helper = children_rss_kb(bare.pid)
                print(
                    f"bare ExaBGP with {args.services} routes (bulk in {took:.2f} s): "
                    f"RSS ExaBGP {exa / 1024:.1f} MiB, API process {helper / 1024:.1f} MiB",
                    flush=True,
                )
                v = timed(
                    "bare latency, routes held",
                    lambda: latency_bare(bare, bird, args.changes_big),
                )
                summary(f"bare ExaBGP announce/withdraw -> BIRD ({args.services} routes held)", v)
            finally:
                bare.close()
            deadline = time.monotonic() + 60
            while bird.count() and time.monotonic() < deadline:
                time.sleep(0.1)

            # The speaker: latency with 2 Services, then with the load Services too.
            base: list[dict[str, Any]] = [node_object("node1", [str(topo.node_address(1))])]
            base += [local_service("lat", LATENCY_IP), node1_slice("lat", False)]
            base += [local_service("probe", PROBE_IP), node1_slice("probe", False)]
            seed(sim, base)
            speaker = Speaker(topo, work / "speaker-small", kubeconfig)
            try:
                router.wait_established(1, 30)
                time.sleep(2)
                speaker_latency(sim, speaker, bird, args.changes, "2 Services", writer)
                more: list[dict[str, Any]] = []
                for k in range(args.load_services):
                    more += [local_service(f"load{k}", f"10.99.{210 + k // 250}.{k % 250 + 1}")]
                    more += [node1_slice(f"load{k}", True)]
                seed(sim, more)
                bird.wait_count(args.load_services, within=60)
                time.sleep(1)
                speaker_latency(
                    sim, speaker, bird, args.changes, f"{args.load_services + 2} Services", writer
                )
                print(f"load: {args.rate}/s for {args.seconds} s", flush=True)
                timed("load", lambda: load(sim, speaker, bird, args, topo, writer))
            finally:
                speaker.stop()
                log_tail(speaker)

            # Cold start with --services more.
            deadline = time.monotonic() + 60
            while bird.count() and time.monotonic() < deadline:
                time.sleep(0.1)
            big = []
            for i in range(args.services):
                big += [local_service(f"s{i}", address(i)), node1_slice(f"s{i}", True)]
            took = seed(sim, big)
            total = args.services + args.load_services
            print(f"seeded {args.services} Services and slices in {took:.1f} s", flush=True)
            speaker = Speaker(topo, work / "speaker-big", kubeconfig)
            try:
                seen = timed("cold start", lambda: bird.wait_count(total, within=240))
                print(
                    f"cold start: speaker start -> all {total} routes at BIRD in "
                    f"{seen - speaker.started:.2f} s",
                    flush=True,
                )
                time.sleep(3)
                daemon, exa, helper = speaker.rss()
                rss_line = (
                    f"speaker RSS at {total} routes: daemon {daemon / 1024:.1f} MiB, "
                    f"ExaBGP {exa / 1024:.1f} MiB, helper {helper / 1024:.1f} MiB, "
                    f"total {(daemon + exa + helper) / 1024:.1f} MiB"
                )
                print(rss_line, flush=True)
                for path in ("/metrics", "/status"):
                    t0 = time.monotonic()
                    size = len(speaker.get(path))
                    print(
                        f"GET {path} at {total} routes: {(time.monotonic() - t0) * 1000:.0f} ms "
                        f"({size / 1024:.0f} KiB)",
                        flush=True,
                    )
                speaker_latency(
                    sim, speaker, bird, args.changes_big, f"{total + 2} Services", writer
                )
                latency_while_scraping(
                    sim, speaker, bird, args.changes_big, f"{total + 2} Services", writer
                )
            finally:
                speaker.stop()
                log_tail(speaker)
        finally:
            if writer is not None:
                writer.close()
            bird.close()


def log_tail(speaker: Speaker) -> None:
    errors = [
        line
        for line in speaker.log.read_text(errors="replace").splitlines()
        if "ERROR" in line or "Traceback" in line
    ]
    if errors:
        print("speaker log errors:\n" + "\n".join(errors[-10:]), file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
