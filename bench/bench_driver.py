"""Benchmark of the ExaBGP driver against bare ExaBGP on the same GoBGP peer (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_driver.py [--samples 50] [--routes 10000]
    .venv/bin/python bench/bench_driver.py --bulk-peer bird [--routes 10000] [--repeat 5]
        [--shapes 4x100,8x100] [--launcher-only]

It builds a one-node lab (router namespace with GoBGP, node1 namespace for ExaBGP) and
measures, in one run:

1. one route's latency, p50/p90 over ``--samples`` announces: from the call (``apply()``
   for the driver; the write of ``announce route ...`` for bare ExaBGP) to the route's
   arrival at GoBGP, seen by ``gobgp monitor global rib -j`` (a push stream, so no
   polling granularity);
2. ``--routes`` /32s from an established, empty session to all of them at GoBGP: the
   driver (batches of 100 prefixes, 4 in flight, and other settings) and bare ExaBGP
   with single-route commands and at most 200 in flight (the lab notes' reference);
3. RSS of a real ``kube-bgpd speaker`` (daemon + ExaBGP + helper) announcing 0, 1,000
   and 10,000 Service IPs from a cluster dump.

With ``--bulk-peer bird`` only the bulk part runs, against BIRD, ``--repeat`` times per
variant: bare ExaBGP, the driver (ExaBGP through bgpd/exabgp/launch.py, the default) and
the driver with ExaBGP's own entry point ("stock"), each with ExaBGP's CPU per run; the
driver through the launcher once per window x batch of ``--shapes``, and with
``--launcher-only`` nothing else.

"Bare ExaBGP" is ExaBGP with a minimal API process (``cat`` of a FIFO opened read-write
for commands, acks drained to a file) and the same neighbour configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bgpd.exabgp.render import render
from bgpd.exabgp.runtime import ExaBGPRuntime, helper_argv
from bgpd.model import BGPPeer, Config, Node, NodeName, PeerName, RouteAttributes
from kbgpd_lab.kit.measure import children_rss_kb, pct, prefixes, rss_kb
from kbgpd_lab.kit.processes import FedExaBGP, ProcessGroup, speaker_argv
from kbgpd_lab.lab.lab import fed_exabgp
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN, Router, make_router
from kbgpd_lab.lab.speakerfiles import node1_cluster_dump, one_peer_config
from kbgpd_lab.lab.topology import Topology

PEER = PeerName("tor")


class Monitor:
    """``gobgp monitor global rib -j`` in the router namespace: arrival times per prefix."""

    def __init__(self, topo: Topology) -> None:
        self.proc = topo.router.popen(
            ["gobgp", "monitor", "global", "rib", "-j"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.arrived: dict[str, float] = {}
        self.withdrawn: dict[str, float] = {}
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            for path in doc if isinstance(doc, list) else [doc]:
                prefix = path.get("nlri", {}).get("prefix")
                if prefix is None:
                    continue
                with self.lock:
                    if path.get("withdrawal"):
                        self.withdrawn[prefix] = now
                        self.arrived.pop(prefix, None)
                    else:
                        self.arrived.setdefault(prefix, now)

    def count(self) -> int:
        with self.lock:
            return len(self.arrived)

    def reset(self) -> None:
        with self.lock:
            self.arrived.clear()
            self.withdrawn.clear()

    async def wait(self, prefix: str, within: float = 10) -> float:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self.lock:
                if prefix in self.arrived:
                    return self.arrived[prefix]
            await asyncio.sleep(0.0002)
        raise TimeoutError(prefix)

    async def wait_count(self, n: int, within: float = 60) -> float:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.arrived) >= n:
                    return max(self.arrived.values())
            await asyncio.sleep(0.005)
        raise TimeoutError(f"{self.count()} of {n}")

    async def wait_empty(self, within: float = 60) -> None:
        deadline = time.monotonic() + within
        # Polled: the reader is a thread, and the bench wants no extra machinery.
        while self.count() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Counter:
    """Polls ``gobgp global rib summary`` (every 20 ms) for the number of IPv4 prefixes.

    Used for the bulk runs instead of the monitor stream: 10,000 JSON lines parsed in the
    benchmark's own process would compete with the driver for the GIL and the CPU."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo

    def count(self) -> int:
        out = self.topo.router.run(["gobgp", "global", "rib", "summary", "-a", "ipv4"], check=False)
        for word in out.stdout.replace(",", " ").split():
            if word.isdigit():
                return int(word)
        return 0

    async def wait_count(self, n: int, within: float = 120) -> float:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await asyncio.to_thread(self.count) >= n:
                return time.monotonic()
            await asyncio.sleep(0.02)
        raise TimeoutError(f"{self.count()} of {n}")

    async def wait_empty(self, within: float = 120) -> None:
        deadline = time.monotonic() + within
        while await asyncio.to_thread(self.count) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


class BirdCounter(Counter):
    """Polls ``birdc show route count`` (every 20 ms): BIRD answers from its table without
    printing routes, so polling costs far less CPU than asking GoBGP for a summary."""

    def __init__(self, topo: Topology, ctl: Path) -> None:
        super().__init__(topo)
        self.ctl = ctl

    #: BGP routes only: the table also holds the LAN's direct route, which would keep the
    #: count above zero after every withdrawal.
    QUERY = ("show", "route", "count", "where", "source", "=", "RTS_BGP")

    def count(self) -> int:
        out = self.topo.router.run(["birdc", "-s", str(self.ctl), *self.QUERY], check=False)
        # "10000 of 10000 routes for 10000 networks in table master4"
        for line in out.stdout.splitlines():
            words = line.split()
            if len(words) > 2 and words[0].isdigit() and words[1] == "of":
                return int(words[0])
        return 0


def peer(topo: Topology) -> BGPPeer:
    return BGPPeer(
        name=PEER,
        my_asn=NODE_ASN,
        peer_asn=ROUTER_ASN,
        peer_address=topo.router_address(4),
        hold_time=9,
    )


def node(topo: Topology) -> Node:
    return Node(name=NodeName("node1"), addresses=(("InternalIP", str(topo.node_address(1))),))


@contextlib.asynccontextmanager
async def driver_runtime(topo: Topology, work: Path, **opts: Any) -> AsyncIterator[ExaBGPRuntime]:
    rt = ExaBGPRuntime(
        node=NodeName("node1"), work_dir=work, prefix=topo.nodes[0].exec_prefix(), **opts
    )
    rt.configure(
        render(
            Config(peers=(peer(topo),)),
            node(topo),
            kernel_choices={},
            passwords={},
            helper_argv=helper_argv(),
        )
    )
    task = asyncio.create_task(rt.run())
    try:
        yield rt
    finally:
        await rt.stop(withdraw=False)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def report(key: str, v: list[float]) -> None:
    p50, p90 = statistics.median(v) * 1000, pct(v, 0.9) * 1000
    print(f"{key}: p50 {p50:.2f} ms  p90 {p90:.2f} ms  (n={len(v)})", flush=True)


async def latency_driver(rt: ExaBGPRuntime, mon: Monitor, samples: int) -> list[float]:
    out = []
    desired: dict[Any, RouteAttributes] = {}
    for i in range(samples):
        p = f"10.98.0.{i + 1}/32"
        desired[ipaddress.ip_network(p)] = RouteAttributes()
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        rt.driver.apply({PEER: dict(desired)})
        out.append((await mon.wait(p)) - t0)
    rt.driver.apply({})
    await mon.wait_empty()
    return out


async def latency_bare(bare: FedExaBGP, mon: Monitor, samples: int) -> list[float]:
    out = []
    for i in range(samples):
        p = f"10.98.1.{i + 1}/32"
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        bare.feed.send([f"announce route {p} next-hop self"])
        out.append((await mon.wait(p)) - t0)
    return out


async def bulk_driver(rt: ExaBGPRuntime, mon: Counter, n: int) -> tuple[float, float]:
    """Seconds from apply() of n routes to all of them at the peer, and ExaBGP's CPU
    seconds meanwhile; then everything withdrawn again."""
    pid = rt.supervisor.pid
    assert pid is not None
    before = cpu_seconds(pid)
    t0 = time.monotonic()
    rt.driver.apply({PEER: {ipaddress.ip_network(p): RouteAttributes() for p in prefixes(n)}})
    last = await mon.wait_count(n)
    cpu = cpu_seconds(pid) - before
    rt.driver.apply({})
    await rt.driver.wait_converged(60)
    await mon.wait_empty()
    return last - t0, cpu


async def bulk_bare(bare: FedExaBGP, mon: Counter, n: int, window: int = 200) -> float:
    cmds = [f"announce route {p} next-hop self" for p in prefixes(n, base=20000)]
    t0 = time.monotonic()
    await asyncio.to_thread(bare.feed.send_windowed, cmds, window)
    last = await mon.wait_count(n)
    return last - t0


def speaker_rss(
    topo: Topology, work: Path, mon: Counter, counts: list[int]
) -> list[tuple[int, int, int, int]]:
    out = []
    for n in counts:
        d = work / f"speaker-{n}"
        d.mkdir()
        (d / "config.yaml").write_text(
            one_peer_config(
                addresses=("10.99.0.0/16",),
                communities=("65000:1",),
                speaker={"drainWindow": "2s", "onSigterm": "withdraw", "exposeStatus": True},
            )
        )
        ips = [p.split("/")[0] for p in prefixes(n)]
        (d / "cluster.yaml").write_text(node1_cluster_dump(ips))
        argv = speaker_argv(
            config=d / "config.yaml",
            node="node1",
            cluster_file=d / "cluster.yaml",
            work_dir=d / "work",
            metrics_address="127.0.0.1:7473",
        )
        with ProcessGroup(d) as group:
            speaker = group.start("speaker", argv, spawner=topo.nodes[0])
            deadline = time.monotonic() + 120
            while mon.count() < n and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(2 if n else 4)
            status = json.loads(
                topo.nodes[0]
                .run(["curl", "-sf", "http://127.0.0.1:7473/status"], check=True)
                .stdout
            )
            exa = status["exabgp"]["pid"]
            out.append((n, rss_kb(speaker.pid), rss_kb(exa), children_rss_kb(exa)))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(label: str, runs: list[tuple[float, float]]) -> None:
    """One line per variant: every run's time (and ExaBGP's CPU), then the median."""
    each = ", ".join(f"{t:.2f} s (ExaBGP CPU {c:.2f} s)" for t, c in runs)
    median = statistics.median(t for t, _ in runs)
    print(f"BIRD peer: {label}: median {median:.2f} s; runs: {each}", flush=True)


async def bulk_against_bird(
    topo: Topology,
    work: Path,
    routes: int,
    repeat: int,
    shapes: list[tuple[int, int]],
    launcher_only: bool,
) -> None:
    """Bare ExaBGP (single routes, 200 in flight), the driver (4 x 100) and the driver with
    ExaBGP's own entry point, to a BIRD peer (the peer bare ExaBGP was first
    measured against); each ``repeat`` times on the same session: all routes in, all out, again.
    The launcher runs once per window x batch in ``shapes``; ``launcher_only`` skips bare
    and stock ExaBGP (their figures do not move with the driver's changes)."""
    print(f"load average at start: {os.getloadavg()}", flush=True)
    router = make_router("bird", topo.router, work / "bird")
    router.start()
    try:
        counter = BirdCounter(topo, work / "bird" / "bird.ctl")
        if not launcher_only:
            await bare_against_bird(topo, router, work, counter, routes, repeat)
        # The driver through launch.py (the default), then with ExaBGP's own entry point
        # (a path runs as it is) to show what the launcher's changes are worth.
        stock = str(Path(sys.executable).with_name("exabgp"))
        variants = [("launcher", "exabgp", w, b) for w, b in shapes]
        if not launcher_only:
            variants.append(("stock ExaBGP", stock, 4, 100))
        for label, binary, window, batch in variants:
            await asyncio.sleep(1)
            drv = work / f"drv-{binary.replace('/', '_')}-{window}x{batch}"
            async with driver_runtime(
                topo, drv, exabgp_binary=binary, window=window, batch=batch
            ) as rt:
                await asyncio.to_thread(router.wait_established, 1, 30)
                await asyncio.sleep(1)
                runs = [await bulk_driver(rt, counter, routes) for _ in range(repeat)]
                summary(f"driver, {window} x {batch} prefixes in flight, {label}", runs)
    finally:
        router.close()
    print(f"load average at end: {os.getloadavg()}", flush=True)


async def bare_against_bird(
    topo: Topology, router: Router, work: Path, counter: BirdCounter, routes: int, repeat: int
) -> None:
    """Bare ExaBGP's bulk runs against BIRD (see bulk_against_bird)."""
    bare = fed_exabgp(topo, work / "bare")
    await asyncio.to_thread(router.wait_established, 1, 30)
    await asyncio.sleep(1)
    runs = []
    for _ in range(repeat):
        before = cpu_seconds(bare.pid)
        took = await bulk_bare(bare, counter, routes)
        runs.append((took, cpu_seconds(bare.pid) - before))
        bare.feed.send([f"withdraw route {p}" for p in prefixes(routes, base=20000)])
        await counter.wait_empty()
    summary(f"bare ExaBGP, {routes} single-route commands, 200 in flight", runs)
    bare.close()
    await counter.wait_empty()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--routes", type=int, default=10000)
    ap.add_argument(
        "--bulk-peer",
        choices=("gobgp", "bird"),
        default="gobgp",
        help="bird: measure only the bulk runs, against BIRD (cheaper to poll than GoBGP)",
    )
    ap.add_argument(
        "--repeat", type=int, default=5, help="bulk runs per variant (--bulk-peer bird)"
    )
    ap.add_argument(
        "--shapes",
        default="4x100",
        help="--bulk-peer bird: the driver's window x batch shapes, e.g. 4x100,8x100,2x500",
    )
    ap.add_argument(
        "--launcher-only",
        action="store_true",
        help="--bulk-peer bird: only the driver through the launcher (no bare, no stock)",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kube-bgpd-bench-"))
    topo = Topology.create(nodes=1, ipv6=False, client=False)
    if args.bulk_peer == "bird":
        try:
            shapes = [(int(w), int(b)) for w, b in (s.split("x") for s in args.shapes.split(","))]
            await bulk_against_bird(
                topo, work, args.routes, args.repeat, shapes, args.launcher_only
            )
        finally:
            topo.destroy()
        return
    router = make_router("gobgp", topo.router, work / "gobgp")
    router.start()
    mon = Monitor(topo)
    try:
        results: dict[str, Any] = {}
        bare = fed_exabgp(topo, work / "bare")
        await asyncio.to_thread(router.wait_established, 1, 30)
        await asyncio.sleep(1)
        print("bare ExaBGP: latency", file=sys.stderr)
        results["bare_latency"] = await latency_bare(bare, mon, args.samples)
        report("bare_latency", results["bare_latency"])
        print("bare ExaBGP: bulk", file=sys.stderr)
        mon.close()  # the monitor's stream would load the CPU during the bulk runs
        counter = Counter(topo)
        results["bare_bulk"] = await bulk_bare(bare, counter, args.routes)
        print(
            f"bare bulk {args.routes} (single routes, 200 in flight): {results['bare_bulk']:.2f} s",
            flush=True,
        )
        bare.close()
        await counter.wait_empty()
        mon = Monitor(topo)
        await asyncio.sleep(1)
        for window, batch in ((4, 100), (8, 100), (8, 50)):
            print(f"driver {window}x{batch}", file=sys.stderr)
            async with driver_runtime(
                topo, work / f"drv-{window}-{batch}", window=window, batch=batch
            ) as rt:
                await asyncio.to_thread(router.wait_established, 1, 30)
                await asyncio.sleep(1)
                if (window, batch) == (4, 100):
                    results["driver_latency"] = await latency_driver(rt, mon, args.samples)
                    report("driver_latency", results["driver_latency"])
                    mon.close()
                took, _ = await bulk_driver(rt, counter, args.routes)
                results[f"driver_bulk_{window}x{batch}"] = took
                print(
                    f"driver bulk {args.routes} ({batch} prefixes a command, "
                    f"{window} in flight): {took:.2f} s",
                    flush=True,
                )
            await asyncio.sleep(1)
        print("speaker RSS", file=sys.stderr)
        results["rss"] = await asyncio.to_thread(
            speaker_rss, topo, work, counter, [0, 1000, args.routes]
        )
        for n, daemon, exa, helper in results["rss"]:
            print(
                f"RSS at {n} routes: daemon {daemon / 1024:.1f} MiB, "
                f"ExaBGP {exa / 1024:.1f} MiB, helper {helper / 1024:.1f} MiB, "
                f"total {(daemon + exa + helper) / 1024:.1f} MiB"
            )
    finally:
        mon.close()
        router.close()
        topo.destroy()


if __name__ == "__main__":
    asyncio.run(main())
