"""The ``kube-bgpd-lab`` command: the lab's actions and the API simulator, for tests,
the demo and benchmarks (never shipped: the product's ``kube-bgpd`` has none of them).

``kube-bgpd-lab up|down|status|client|demo`` is the network-namespace lab
(kbgpd_lab.cli.lab); ``kube-bgpd-lab apiserver-sim`` runs the simulator as a process
(kbgpd_lab.cli.apisim). This module only wires the two parsers and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kbgpd_lab.cli import apisim, lab


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kube-bgpd-lab",
        description="kube-bgpd's test tools: the network-namespace lab and the API simulator.",
    )
    sub = lab.configure(parser)
    sim = sub.add_parser(
        "apiserver-sim",
        help="run the Kubernetes API simulator (tests, demo, lab)",
        description="run the Kubernetes API simulator (tests, demo, lab)",
    )
    apisim.configure(sim)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.lab_action == "apiserver-sim":
        return apisim.run(args)
    return lab.run(args)


if __name__ == "__main__":
    sys.exit(main())
