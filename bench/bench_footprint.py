"""The speaker's footprint on a node, in one table (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_footprint.py [--sizes 0,1000,10000,30000]
        [--sources api,json,yaml] [--bare/--no-bare] [--scrape-at 10000]
        [--changes 50] [--credentials in-cluster|kubeconfig] [--profile] [--keep]

It builds the one-node lab of bench/bench_k8s.py (BIRD 2 in the router namespace, the API
simulator on a thread inside it with kube-bgpd's CRDs installed, so the speaker's status
objects are written as in a cluster, node1's namespace for the speaker) and, for each size in
``--sizes`` (Local LoadBalancer Services, each with an allocated ingress IP and a ready
endpoint on node1, so each is one /32 at BIRD) and each source in ``--sources``:

* starts ``kube-bgpd speaker`` reading the simulator (``api``) or a dump of the same
  objects (``json``: ``kubectl get -o json``'s List; ``yaml``: the same as
  YAML), and times from its start to the first and to the last route at BIRD (BIRD's
  control socket, ``show route where source = RTS_BGP count`` every 20 ms), and prints
  when each phase of its start ended, from its log (START_EVENTS);
* once all routes are there and 3 s later, reads the RSS of the daemon, its ExaBGP and
  ExaBGP's children (the helper, "-" when there is none: a patched ExaBGP runs the
  relay as a thread of its own, bgpd/exabgp/bridge.py) from /proc, and the peak RSS
  (VmHWM) of the daemon and ExaBGP since they started, summed: what a memory limit on
  the tree must leave room for (the daemon's read before /status is asked).

From the API, ``--credentials in-cluster`` (the default: the DaemonSet's case) runs the
speaker as in a pod: the simulator serves HTTPS and wants a token, and the speaker finds
the service account's files and $KUBERNETES_SERVICE_HOST/PORT (kbgpd_lab.kit.incluster);
``kubeconfig`` gives it ``--kubeconfig`` (plain HTTP; its credentials child runs first).

With ``--bare`` (the default) a bare ExaBGP, fed the same routes by a trivial API process
(at most 200 unacknowledged commands), gets the same measurements beside it. At the
``--scrape-at`` size, from the API, one change's latency (an HTTP merge PATCH of one
Service's EndpointSlice to the route appearing at/leaving BIRD) over ``--changes``
changes (p50 and p99), first unscraped, then while a process of its own in node1's
namespace GETs ``/metrics`` back to back on one kept-alive connection; beside them the
speaker's own ``kube_bgpd_convergence_seconds`` means (decide, accept) over each phase,
and the CPU the speaker's process and the scraper's used (per scrape: the scraper runs
on the same cores).

It prints each row as it is measured, then the whole table (Markdown) with the machine's
load average at the start and the end. Everything it creates is removed at the end.
"""

from __future__ import annotations

import argparse
import calendar
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_driver import cpu_seconds
from bench_k8s import (
    API_HOST,
    API_PORT,
    LATENCY_IP,
    STATUS,
    BirdCtl,
    HttpWriter,
    Speaker,
    compile_product,
    lab,
    latency_speaker,
    seed,
)

from kbgpd_lab.kit.crds import product_crds
from kbgpd_lab.kit.incluster import ServiceAccount
from kbgpd_lab.kit.measure import (
    address,
    children_rss_kb,
    pct,
    peak_rss_kb,
    prefixes,
    rss_kb,
    tree_pss_kb,
)
from kbgpd_lab.kit.scale import local_service, node1_slice
from kbgpd_lab.lab.apicluster import NetnsApiSimulator, node_object
from kbgpd_lab.lab.lab import fed_exabgp
from kbgpd_lab.lab.routers import BirdRouter
from kbgpd_lab.lab.topology import Topology

_T = TypeVar("_T")
#: The service account's token the simulator requires with --credentials in-cluster.
POD_TOKEN = "bench-footprint-pod-token"  # noqa: S105 - the lab's own, not a secret


@dataclass
class Row:
    what: str
    services: int
    start_to_all: float
    first_to_last: float
    daemon_kb: int
    exabgp_kb: int
    helper_kb: int
    #: PSS of the same processes together (what they take of the node's memory, shared
    #: library pages counted once: kbgpd_lab.kit.measure.pss_kb).
    tree_pss_kb: int
    #: The daemon's peak RSS plus ExaBGP's plus the helper's RSS (KiB): VmHWM, the most
    #: each process held since it started (the first sync's LIST, decision and ExaBGP's
    #: intake), summed whether or not the peaks came together, so what a memory limit
    #: on the tree must leave room for.
    peak_kb: int
    #: How the speaker got its API credentials ("" for a dump or the bare ExaBGP).
    credentials: str = ""

    def cells(self) -> list[str]:
        total = self.daemon_kb + self.exabgp_kb + self.helper_kb
        daemon = "-" if self.what == "bare ExaBGP" else f"{self.daemon_kb / 1024:.1f}"
        return [
            self.what,
            f"{self.services:,}",
            f"{total / 1024:.1f}",
            f"{self.peak_kb / 1024:.1f}",
            f"{self.tree_pss_kb / 1024:.1f}",
            daemon,
            f"{self.exabgp_kb / 1024:.1f}",
            # No child: the launcher runs the relay as a thread of ExaBGP (bridge.py).
            f"{self.helper_kb / 1024:.1f}" if self.helper_kb else "-",
            f"{self.start_to_all:.2f}",
            f"{self.first_to_last:.2f}",
            self.credentials or "-",
        ]


HEADER = [
    "source",
    "Services",
    "RSS total MiB",
    "peak RSS total MiB",
    "PSS total MiB",
    "daemon",
    "ExaBGP",
    "helper / API process",
    "start to all routes at BIRD, s",
    "first to last route, s",
    "credentials",
]


def services(lo: int, hi: int) -> list[dict[str, Any]]:
    """Services number lo..hi-1 and their (ready) EndpointSlices."""
    out: list[dict[str, Any]] = []
    for i in range(lo, hi):
        out += [local_service(f"s{i}", address(i)), node1_slice(f"s{i}", True)]
    return out


def write_dumps(objects: list[dict[str, Any]], work: Path) -> dict[str, Path]:
    """The objects as ``kubectl get -o json`` and ``-o yaml`` print them (a List)."""
    doc = {"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {}}
    json_path, yaml_path = work / "cluster.json", work / "cluster.yaml"
    json_path.write_text(json.dumps(doc, indent=4))
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    with yaml_path.open("w") as f:
        yaml.dump(doc, f, Dumper=dumper, default_flow_style=False)
    return {"json": json_path, "yaml": yaml_path}


def first_and_all(bird: BirdCtl, n: int, within: float) -> tuple[float, float]:
    """Monotonic times the first and the n-th route were seen at BIRD (20 ms polls)."""
    first = bird.wait_count(1, within=within)
    return first, bird.wait_count(n, within=within)


#: The speaker's log events that mark its start's phases, in the order they usually come
#: (bgpd/logs.py's text format: "2026-12-02T05:28:01.234Z INFO    event k=v ...").
START_EVENTS = (
    "speaker.started",
    "informer.listed",
    "source.state",
    "reconcile.applied",
    "exabgp.started",
    "driver.helper_connected",
)


def start_phases(log_text: str, started: float) -> list[tuple[str, float]]:
    """Each START_EVENTS event's first line in ``log_text`` (``informer.listed``: one per
    kind; ``source.state``: the one that says synced), as (label, seconds after
    ``started``, a wall-clock time), in the log's order; the first line of any kind
    labelled "first log line" (the interpreter and the imports)."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for line in log_text.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 3 or not parts[0].endswith("Z") or "T" not in parts[0]:
            continue
        stamp = parts[0][:-1]
        try:
            when = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
            when += float("0" + stamp[19:])
        except ValueError:
            continue
        if not out:
            out.append(("first log line", when - started))
        event, rest = parts[2], parts[3] if len(parts) > 3 else ""
        if event not in START_EVENTS:
            continue
        label = event
        if event == "informer.listed":
            label = f"listed {rest.split('kind=', 1)[-1].split()[0]}"
        elif event == "source.state" and "synced=True" not in rest:
            continue
        if label not in seen:
            seen.add(label)
            out.append((label, when - started))
    return out


def wait_empty(bird: BirdCtl) -> None:
    deadline = time.monotonic() + 120
    while bird.count() and time.monotonic() < deadline:
        time.sleep(0.1)


def measure_speaker(
    topo: Topology,
    bird: BirdCtl,
    work: Path,
    n: int,
    *,
    kubeconfig: Path | None = None,
    cluster_file: Path | None = None,
    account: ServiceAccount | None = None,
    profile: bool = False,
) -> tuple[Row, Speaker]:
    """A speaker started and measured; the caller stops it. From the API with
    ``kubeconfig`` or, as in a pod, the service ``account``; else from ``cluster_file``.
    With ``profile``, the daemon runs under cProfile (WORK/speaker.prof once it stopped;
    its times are then not comparable)."""
    wall, mono = time.time(), time.monotonic()
    prefix = [sys.executable, "-m", "cProfile", "-o", str(work / "speaker.prof")]
    speaker = Speaker(topo, work, kubeconfig, cluster_file, account, prefix if profile else ())
    # The log's clock is the wall clock: the start in it, from the monotonic start.
    wall_started = wall + (speaker.started - mono)
    if cluster_file is not None:
        what, credentials = f"{cluster_file.suffix[1:].upper()} dump", ""
    else:
        what, credentials = "API", "kubeconfig" if account is None else "in-cluster"
    try:
        if n:
            first, last = first_and_all(bird, n, within=300)
        else:
            # Nothing to announce: "started" is the /status listener answering.
            deadline = time.monotonic() + 60
            while True:
                try:
                    speaker.get("/healthz")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            first = last = time.monotonic()
        time.sleep(3)
        mem = speaker.memory()
    except BaseException:
        speaker.stop()
        raise
    row = Row(
        what,
        n,
        last - speaker.started,
        last - first,
        mem.daemon,
        mem.exabgp,
        mem.helper,
        mem.pss,
        mem.daemon_peak + mem.exabgp_peak + mem.helper,
        credentials,
    )
    phases = start_phases(speaker.log.read_text(errors="replace"), wall_started)
    phases += [("first route at BIRD", first - speaker.started)]
    phases += [("last route at BIRD", last - speaker.started)]
    print(
        f"  {what} {n:,} start, s after the speaker's start: "
        + ", ".join(f"{label} {t:.2f}" for label, t in sorted(phases, key=lambda p: p[1])),
        flush=True,
    )
    return row, speaker


def measure_bare(topo: Topology, bird: BirdCtl, work: Path, n: int) -> Row:
    started = time.monotonic()
    bare = fed_exabgp(topo, work)
    try:
        # Fed once its API process is connected (fed_exabgp returns then); the session
        # comes up on its own and ExaBGP sends what it holds.
        if n:
            bare.feed.send_windowed([f"announce route {p} next-hop self" for p in prefixes(n)], 200)
            first, last = first_and_all(bird, n, within=300)
        else:
            first = last = time.monotonic()
        time.sleep(3)
        row = Row(
            "bare ExaBGP",
            n,
            last - started,
            last - first,
            0,
            rss_kb(bare.pid),
            children_rss_kb(bare.pid),
            tree_pss_kb(bare.pid),
            peak_rss_kb(bare.pid) + children_rss_kb(bare.pid),
        )
    finally:
        bare.close()
    wait_empty(bird)
    return row


@dataclass(frozen=True)
class Scraped:
    """One change's latency (ms) unscraped and with /metrics GET back to back."""

    quiet: list[float]
    loud: list[float]
    scrapes: int
    #: The speaker's own kube_bgpd_convergence_seconds means per phase (ms), unscraped
    #: and scraped: its share of the change (event -> decision -> ExaBGP's done).
    own: tuple[dict[str, float], dict[str, float]] = ({}, {})
    #: CPU seconds: the speaker's process unscraped and scraped, the scraper's process.
    cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def line(self, services: int) -> str:
        def ms(values: list[float]) -> str:
            return (
                f"p50 {statistics.median(values) * 1000:.2f} / "
                f"p99 {pct(values, 0.99) * 1000:.2f} ms"
            )

        def own(means: dict[str, float]) -> str:
            return "/".join(f"{means.get(phase, float('nan')):.2f}" for phase in _PHASES)

        return (
            f"one change at {services:,} Services (HTTP PATCH -> BIRD, {len(self.quiet)} "
            f"changes): unscraped {ms(self.quiet)}; with /metrics scraped back to back "
            f"{ms(self.loud)} ({self.scrapes} scrapes); the speaker's own means "
            f"({'/'.join(_PHASES)}, ms) unscraped {own(self.own[0])}, scraped {own(self.own[1])}; "
            f"CPU: the speaker {self.cpu[0]:.2f} s unscraped, {self.cpu[1]:.2f} s scraped "
            f"({(self.cpu[1] - self.cpu[0]) / max(1, self.scrapes) * 1000:.2f} ms a scrape), "
            f"the scraper {self.cpu[2]:.2f} s ({self.cpu[2] / max(1, self.scrapes) * 1000:.2f} ms "
            "a scrape)"
        )


#: The speaker's convergence phases the scraped line shows (bgpd.metrics.ConvergencePhase).
_PHASES = ("decide", "accept")


def own_means(speaker: Speaker, fn: Callable[[], _T]) -> tuple[_T, dict[str, float]]:
    """``fn()``, and the speaker's mean per phase (ms) over what it did meanwhile."""
    before = speaker.convergence()
    result = fn()
    after = speaker.convergence()
    means = {
        phase: (after[phase][0] - before[phase][0]) / n * 1000
        for phase in after
        if (n := after[phase][1] - before[phase][1])
    }
    return result, means


def scrape_back_to_back(url: str) -> None:
    """The ``--scraper`` process: GET ``url`` back to back on one kept-alive connection,
    as Prometheus does, until stdin closes; then print how many GETs completed and the
    CPU seconds this process used (it runs on the same cores as the speaker)."""
    stop = threading.Event()

    def wait_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=30)
    done = 0
    while not stop.is_set():
        conn.request("GET", parts.path)
        with conn.getresponse() as resp:
            if resp.status != 200:
                raise RuntimeError(f"GET {url}: {resp.status}")
            resp.read()
        done += 1
    print(done, time.process_time(), flush=True)


def while_scraped(topo: Topology, fn: Callable[[], _T]) -> tuple[_T, int, float]:
    """``fn()`` while a process of its own in node1's namespace GETs the speaker's
    ``/metrics`` back to back; its result, the number of scrapes meanwhile and the
    scraper's CPU seconds. A process,
    not a thread of this one: reading 1.5 MB bodies in a thread here took the interpreter
    from the API simulator's thread, which then served the watch events late."""
    proc = topo.nodes[0].popen(
        [sys.executable, str(Path(__file__).resolve()), "--scraper", f"http://{STATUS}/metrics"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        result = fn()
    finally:
        proc.stdin.close()
    out = proc.stdout.read()
    if proc.wait(30) != 0:
        raise RuntimeError(f"the scraper exited {proc.returncode}")
    done, cpu = out.split()
    return result, int(done), float(cpu)


def scrape_latency(
    sim: NetnsApiSimulator,
    topo: Topology,
    bird: BirdCtl,
    writer: HttpWriter,
    changes: int,
    speaker: Speaker,
) -> Scraped:
    """One change's latency unscraped, then with /metrics GET back to back."""
    pid = speaker.child.pid
    cpu = cpu_seconds(pid)
    quiet, own_quiet = own_means(speaker, lambda: latency_speaker(sim, bird, changes, writer))
    cpu_quiet, cpu = cpu_seconds(pid) - cpu, cpu_seconds(pid)
    (loud, scrapes, scraper_cpu), own_loud = own_means(
        speaker,
        lambda: while_scraped(topo, lambda: latency_speaker(sim, bird, changes, writer)),
    )
    cpus = (cpu_quiet, cpu_seconds(pid) - cpu, scraper_cpu)
    return Scraped(quiet, loud, scrapes, (own_quiet, own_loud), cpus)


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def run(args: argparse.Namespace, work: Path) -> None:
    load_before = os.getloadavg()
    rows: list[Row] = []
    scraped: list[str] = []
    in_pod = args.credentials == "in-cluster"
    # In a pod the API is HTTPS and wants the service account's token.
    with lab(work, token=POD_TOKEN if in_pod else None) as (topo, router, sim):
        assert isinstance(router, BirdRouter)
        kubeconfig, account = sim.write_kubeconfig(work / "kubeconfig"), None
        ca_cert = sim.sim.ca_cert
        if in_pod:
            assert ca_cert is not None
            account = ServiceAccount.write(
                work / "account",
                token=POD_TOKEN,
                ca_cert=ca_cert,
                namespace="kube-bgpd",
                host=API_HOST,
                port=API_PORT,
            )
        bird = BirdCtl(router)
        writer = HttpWriter(topo.router.name, ca_cert=ca_cert, token=sim.sim.token)
        node = node_object("node1", [str(topo.node_address(1))])
        # The shipped CRDs, as in a cluster kube-bgpd is deployed in: without them the
        # speaker's ServiceBGPStatus and BGPNodeStatus writes fail and stay due.
        seed(sim, product_crds())
        seed(sim, [node, local_service("lat", LATENCY_IP), node1_slice("lat", False)])
        have = 0
        try:
            for n in args.sizes:
                if args.bare:
                    rows.append(measure_bare(topo, bird, work / f"bare-{n}", n))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)
                objects = services(have, n)
                if "api" in args.sources:
                    seed(sim, objects)
                    have = n
                dumps = {}
                if {"json", "yaml"} & set(args.sources):
                    dumps = write_dumps([node, *services(0, n)], work)
                for source in args.sources:
                    if source == "api":
                        row, speaker = measure_speaker(
                            topo,
                            bird,
                            work / f"api-{n}",
                            n,
                            kubeconfig=None if in_pod else kubeconfig,
                            account=account,
                            profile=args.profile,
                        )
                    else:
                        row, speaker = measure_speaker(
                            topo,
                            bird,
                            work / f"{source}-{n}",
                            n,
                            cluster_file=dumps[source],
                            profile=args.profile,
                        )
                    try:
                        rows.append(row)
                        print(table(rows[-1:]).splitlines()[-1], flush=True)
                        if source == "api" and n == args.scrape_at:
                            scraped.append(
                                scrape_latency(sim, topo, bird, writer, args.changes, speaker).line(
                                    n + 1
                                )
                            )
                            print(scraped[-1], flush=True)
                    finally:
                        speaker.stop()
                    wait_empty(bird)
        finally:
            writer.close()
            bird.close()
    load_after = os.getloadavg()
    print()
    print(table(rows))
    for line in scraped:
        print(f"\n{line}")
    print(
        "\nload average (1, 5, 15 min): "
        f"start {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"end {' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes",
        type=lambda s: sorted(int(x) for x in s.split(",")),
        default=[0, 1_000, 10_000, 30_000],
        help="Service counts, comma-separated (default 0,1000,10000,30000)",
    )
    ap.add_argument(
        "--sources",
        type=lambda s: s.split(","),
        default=["api", "json", "yaml"],
        help="where the speaker reads the cluster: api, json, yaml (comma-separated)",
    )
    ap.add_argument("--bare", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--scrape-at",
        type=int,
        default=10_000,
        help="size at which to time one change unscraped and scraped (-1: never)",
    )
    ap.add_argument("--changes", type=int, default=50, help="changes per latency figure")
    ap.add_argument(
        "--credentials",
        choices=["in-cluster", "kubeconfig"],
        default="in-cluster",
        help="how the speaker reads the API: as in a pod (the DaemonSet's case: a service "
        "account, HTTPS) or with a kubeconfig (its credentials child); default in-cluster",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="run each speaker under cProfile (SOURCE-SIZE/speaker.prof in the kept work "
        "directory; implies --keep; its times are not comparable)",
    )
    ap.add_argument("--scraper", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scraper:
        scrape_back_to_back(args.scraper)
        return
    bad = set(args.sources) - {"api", "json", "yaml"}
    if bad:
        ap.error(f"--sources: unknown {', '.join(sorted(bad))} (api, json, yaml)")
    args.keep = args.keep or args.profile
    # The simulator thread and the poller share this interpreter: switch often.
    sys.setswitchinterval(0.0005)
    compile_product()
    # Not under /tmp/kube-bgpd-*: other runs on this machine clean those up by pattern.
    work = Path(tempfile.mkdtemp(prefix="bench-footprint-", dir="/var/tmp"))
    try:
        run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
