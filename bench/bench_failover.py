"""Failover time when a node goes silent: BFD against the hold timer alone (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_failover.py [--routers frr,bird] [--modes bfd,hold]
        [--trials 20] [--interval 300] [--multiplier 3] [--hold-time 9]
        [--node-bfd speaker|bfdd]

For each router (FRR 8.4, BIRD 2) and mode it brings a lab up once (two nodes running
the real speaker, one Cluster Service on both, IPv4, a stateless router) and runs
``--trials`` times: node1 is blackholed (every packet dropped inside its namespace, its
link still up: kbgpd_lab.lab.blackhole), the clock runs until the router's kernel FIB
no longer has node1 as a next hop of the Service IP (kbgpd_lab.lab.failover), then the
blackhole is undone and the next trial waits until node1 is back in the FIB (and its BFD
session Up). Each trial prints its time and the router's BGP/BFD state with node1 at
that moment; the summary gives median, p90 and max per router and mode.

Modes: ``hold``: no BFD; the router notices when its hold timer (``--hold-time``)
expires. ``bfd``: the router runs BFD with the nodes at ``--interval`` ms x
``--multiplier``; the node side is the speaker itself (``--node-bfd speaker``: the
BGPPeers name a BFDProfile of those timers) or a plain FRR bfdd beside each speaker
(``--node-bfd bfdd``, kbgpd_lab.lab.nodebfd), which says what BFD gives without the
speaker's part. The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from kbgpd_lab.kit.measure import pct
from kbgpd_lab.lab.failover import Failover, blackhole_and_time, restore_and_wait
from kbgpd_lab.lab.lab import Lab, LabService
from kbgpd_lab.lab.nodebfd import NodeBfdd
from kbgpd_lab.lab.routers import RouterBfd, RouterError

IP = "10.99.100.1"
WEB = LabService("web", (IP,), pod_nodes=(1, 2))


def run(router: str, mode: str, args: argparse.Namespace) -> list[Failover]:
    """One lab, ``args.trials`` blackholes of node1."""
    bfd = RouterBfd(args.interval, args.interval, args.multiplier) if mode == "bfd" else None
    top = Path(tempfile.mkdtemp(prefix="kb-bench-failover-"))
    out: list[Failover] = []
    with ExitStack() as stack:
        lab = stack.enter_context(
            Lab.up(
                router=router,
                nodes=2,
                ipv6=False,
                ecmp="stateless",
                cluster="file",
                services=[WEB],
                hold_time=args.hold_time,
                bfd=bfd,
                # BIRD would wait 60 s before node1 may peer again after each trial.
                error_wait_time=(1, 2),
                # Each trial ends a session or two: after 5 in 60 s the speaker holds
                # its peer down (it only listens) and the router must connect to it.
                connect_retry=1,
                speaker_bfd=bfd is not None and args.node_bfd == "speaker",
                state_dir=top / "state",
                directory=top / "lab",
            )
        )
        topo = lab.topology
        both = {topo.node_address(1), topo.node_address(2)}
        if bfd is not None and args.node_bfd == "bfdd":
            for i in (1, 2):
                node_bfd = NodeBfdd.for_node(topo, i, bfd)
                stack.callback(node_bfd.close)
                node_bfd.start()
        # Ready as a trial ends: both next hops in the FIB and BFD Up.
        restore_and_wait(lab, 1, IP, both)
        for n in range(args.trials):
            result = blackhole_and_time(lab, 1, IP, timeout=args.hold_time * 3 + 30)
            out.append(result)
            print(
                f"{router:4} {mode:4} #{n + 1:2}: {result.seconds * 1000:7.0f} ms  "
                f"router: BGP {result.session}, BFD {result.bfd or '-'}",
                flush=True,
            )
            try:
                restore_and_wait(lab, 1, IP, both, timeout=120)
            except RouterError:
                print(
                    f"node1 did not come back: router BGP {lab.router.neighbors()}, BFD "
                    f"{lab.router.bfd_sessions()}\n{lab.router.log_tail(15)}\n"
                    f"{(lab.dir / 'node1' / 'speaker.log').read_text()[-3000:]}"
                )
                raise
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--routers", default="frr,bird")
    parser.add_argument("--modes", default="bfd,hold")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--interval", type=int, default=300, help="BFD ms (tx = rx)")
    parser.add_argument("--multiplier", type=int, default=3)
    parser.add_argument("--hold-time", type=int, default=9)
    parser.add_argument("--node-bfd", choices=("speaker", "bfdd"), default="speaker")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    started = time.monotonic()
    summary: dict[tuple[str, str], list[float]] = {}
    for router in args.routers.split(","):
        for mode in args.modes.split(","):
            summary[(router, mode)] = [r.seconds for r in run(router, mode, args)]
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    node_side = "the speaker" if args.node_bfd == "speaker" else "a plain FRR bfdd"
    bfd = f"BFD {args.interval} ms x {args.multiplier} (node side: {node_side}); "
    print(
        f"\n{args.trials} trials each, {time.monotonic() - started:.0f} s; "
        f"{bfd if 'bfd' in args.modes else ''}hold time {args.hold_time} s"
    )
    print(f"{'router':6} {'mode':4} {'min':>8} {'median':>8} {'p90':>8} {'max':>8}  (ms)")
    for (router, mode), times in summary.items():
        ms = [t * 1000 for t in times]
        print(
            f"{router:6} {mode:4} {min(ms):8.0f} {statistics.median(ms):8.0f} "
            f"{pct(ms, 0.9):8.0f} {max(ms):8.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
