"""Failed requests per node leaving the ECMP set, pinned vs stateless router (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_ecmp.py [--router frr] [--cycles 5] [--requests-per-connection 5]

For each router mode (``pinned``: the lab's default, open connections stay on their node;
``stateless``: the FIB alone) it brings a lab up once and runs ``--cycles`` times each of:

* drain: ``kube-bgpd drain`` of node3 (GRACEFUL_SHUTDOWN, then the withdrawal after the
  2 s drain window), then node3's speaker restarted so it announces again;
* stop: node3's speaker stopped with SIGTERM (withdraw, then exit) and started again;

under a steady client in the client namespace (``--concurrency`` keep-alive connections
of ``--requests-per-connection`` requests ``--interval`` s apart, opened again and again).
Each cycle prints the requests, the failed ones and their kinds; the summary gives the
failures per cycle. The two modes differ only in the router's nftables table (see
kbgpd_lab.lab.topology.pin_ruleset); the speakers and their configuration are the same.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kbgpd_lab.lab.client import Result
from kbgpd_lab.lab.lab import Lab, LabService

IP = "10.99.100.1"
WEB = LabService("web", (IP,), pod_nodes=(1, 2))


def cycle(lab: Lab, scenario: str, client_args: list[str]) -> Result:
    """One node3 departure (and return) under the steady client."""
    all_nodes = {lab.topology.node_address(i) for i in (1, 2, 3)}
    others = all_nodes - {lab.topology.node_address(3)}
    client = lab.start_steady_client(IP, *client_args)
    try:
        time.sleep(0.5)
        if scenario == "drain":
            lab.drain(3)
            lab.router.wait_fib(IP, others, timeout=15)
            time.sleep(2.5)  # the drain window, then the withdrawal
            lab.stop_speaker(3, signal.SIGTERM)
        else:
            lab.stop_speaker(3, signal.SIGTERM)
            lab.router.wait_fib(IP, others, timeout=15)
            time.sleep(0.5)
        lab.start_speaker(3)
        lab.router.wait_fib(IP, all_nodes, timeout=30)
        time.sleep(0.5)
    finally:
        result = lab.finish_client(client)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--router", choices=("frr", "bird"), default="frr")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests-per-connection", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args()
    client_args = [
        "--concurrency",
        str(args.concurrency),
        "--requests-per-connection",
        str(args.requests_per_connection),
        "--interval",
        str(args.interval),
    ]
    summary: dict[tuple[str, str], list[int]] = {}
    for ecmp in ("stateless", "pinned"):
        top = Path(tempfile.mkdtemp(prefix="kb-bench-ecmp-"))
        with Lab.up(
            router=args.router,
            ecmp=ecmp,
            ipv6=False,
            services=[WEB],
            drain_window=2.0,
            state_dir=top / "state",
            directory=top / "lab",
        ) as lab:
            for scenario in ("drain", "stop"):
                for n in range(args.cycles):
                    result = cycle(lab, scenario, client_args)
                    summary.setdefault((ecmp, scenario), []).append(result.failures)
                    print(
                        f"{ecmp:9} {scenario:5} #{n + 1}: {result.requests} requests, "
                        f"{result.failures} failed {result.errors or ''}",
                        flush=True,
                    )
    print(
        f"\nrouter {args.router}; client: {args.concurrency} keep-alive connections x "
        f"{args.requests_per_connection} requests, {args.interval} s apart"
    )
    print(f"{'ECMP':9} {'event':5} {'failed per cycle':28} mean")
    for (ecmp, scenario), fails in summary.items():
        print(f"{ecmp:9} {scenario:5} {fails!s:28} {statistics.mean(fails):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
