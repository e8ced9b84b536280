"""What ExaBGP's reports of the UPDATEs it sends cost (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_sent_updates.py [--routes 10000] [--repeat 3]

The driver counts a route as advertised only once ExaBGP reports the UPDATE that carried
it (``api { ...; send { parsed; update; } }``, bgpd.exabgp.render; bgpd.exabgp.sent).
That report is one JSON line per UPDATE, which ExaBGP builds by decoding the UPDATE it
just encoded, writes to the helper, the helper relays, and the speaker parses. This
measures it: a one-node lab with a BIRD router, the real driver and helper
(bench_driver.driver_runtime), ``--routes`` /32s announced (4 x 100 in flight) until all
are at BIRD, then withdrawn, ``--repeat`` times, with the reports on (the rendering as
shipped) and off (the same rendering with the ``send`` block removed). Per run: the time
to all routes at BIRD, the CPU seconds of ExaBGP and of the helper (/proc), the JSON
lines and bytes of UPDATE reports the driver received, and the seconds the driver spent
reading its socket's lines (``_on_line``: JSON parsing and the core's bookkeeping).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_driver import PEER, BirdCounter, cpu_seconds, node, peer

from bgpd.exabgp.render import render
from bgpd.exabgp.runtime import ExaBGPRuntime, helper_argv
from bgpd.model import Config, NodeName, RouteAttributes
from kbgpd_lab.kit.measure import prefixes
from kbgpd_lab.lab.routers import make_router
from kbgpd_lab.lab.topology import Topology

SEND_BLOCK = "        send {\n            parsed;\n            update;\n        }\n"


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


class LineMeter:
    """Wraps the driver's line handler: lines, UPDATE-report lines and bytes, seconds."""

    def __init__(self, rt: ExaBGPRuntime) -> None:
        self.updates = self.bytes = 0
        self.seconds = 0.0
        #: The first UPDATE report seen, as ExaBGP wrote it.
        self.sample = ""
        inner = rt.driver._on_line

        def on_line(line: str) -> None:
            t0 = time.perf_counter()
            inner(line)
            self.seconds += time.perf_counter() - t0
            if '"type": "update"' in line:
                self.updates += 1
                self.bytes += len(line) + 1
                if '"announce"' in line:
                    self.sample = self.sample or line

        rt.driver._on_line = on_line  # type: ignore[method-assign]


async def one_variant(topo: Topology, work: Path, reports: bool, routes: int, repeat: int) -> None:
    rendering = render(
        Config(peers=(peer(topo),)),
        node(topo),
        kernel_choices={},
        passwords={},
        helper_argv=helper_argv(),
    )
    assert SEND_BLOCK in rendering.config
    if not reports:
        rendering = dataclasses.replace(rendering, config=rendering.config.replace(SEND_BLOCK, ""))
    rt = ExaBGPRuntime(node=NodeName("node1"), work_dir=work, prefix=topo.nodes[0].exec_prefix())
    rt.configure(rendering)
    meter = LineMeter(rt)
    task = asyncio.create_task(rt.run())
    counter = BirdCounter(topo, work.parent / "bird" / "bird.ctl")
    label = "reports on " if reports else "reports off"
    try:
        while not (st := rt.driver.peer_status()) or st[PEER].state != "up":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)
        times = []
        for _ in range(repeat):
            exa = rt.supervisor.pid
            assert exa is not None
            helper = children(exa)[0]
            meter.updates = meter.bytes = 0
            meter.seconds = 0.0
            c_exa, c_helper = cpu_seconds(exa), cpu_seconds(helper)
            t0 = time.monotonic()
            want = {ipaddress.ip_network(p): RouteAttributes() for p in prefixes(routes)}
            rt.driver.apply({PEER: want})
            last = await counter.wait_count(routes)
            await rt.driver.wait_converged(60)
            if reports:
                while rt.driver.peer_status()[PEER].advertised < routes:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            advertised_at = time.monotonic()
            rt.driver.apply({})
            await rt.driver.wait_converged(60)
            await counter.wait_empty()
            await asyncio.sleep(0.5)
            times.append(last - t0)
            print(
                f"{label}: {routes} routes at BIRD in {last - t0:.2f} s "
                f"(advertised counted {advertised_at - t0:.2f} s); announce + withdraw: "
                f"ExaBGP CPU {cpu_seconds(exa) - c_exa:.2f} s, helper CPU "
                f"{cpu_seconds(helper) - c_helper:.2f} s, UPDATE reports {meter.updates} "
                f"lines / {meter.bytes / 1024:.0f} KiB, driver reading lines "
                f"{meter.seconds:.3f} s",
                flush=True,
            )
        print(f"{label}: median to BIRD {statistics.median(times):.2f} s", flush=True)
        if meter.sample:
            print(f"first UPDATE report: {meter.sample[:600]}", flush=True)
    finally:
        await rt.stop(withdraw=False)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--routes", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-sent-") as tmp:
        work = Path(tmp)
        topo = Topology.create(nodes=1, ipv6=False, client=False)
        router = make_router("bird", topo.router, work / "bird")
        try:
            router.start()
            for reports in (True, False):
                await one_variant(topo, work / f"drv-{reports}", reports, args.routes, args.repeat)
                await asyncio.sleep(1)
        finally:
            router.close()
            topo.destroy()
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
