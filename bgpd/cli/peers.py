"""`kube-bgpd peers` (also `kubectl bgpd peers`): every node's BGP sessions, as the
speakers wrote them into their BGPNodeStatus objects (state, since when, last error, the
desired, accepted and advertised route counts, BFD), with each node's drain and
configuration state; no port-forward. Reads through k8s_watcher.reader; renders with
bgpd.inspection. Exit codes: 0 answered, 1 the API or its objects could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from bgpd.cli import kubeflags

if TYPE_CHECKING:
    from bgpd.inspection import NodeStatus
    from k8s_watcher.client import KubeClient


def configure(parser: argparse.ArgumentParser) -> None:
    kubeflags.add_flags(parser)
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME",
        help="only this node's sessions (repeatable)",
    )


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    prog = f"{getattr(args, 'prog_name', 'kube-bgpd')} peers"

    async def reader(client: KubeClient) -> list[NodeStatus]:
        from bgpd.inspection import node_status_from_json
        from k8s_watcher import reader as r

        reading = r.Reading()
        objects = await r.read_status_objects(client, r.NODE_STATUS, reading)
        if reading.missing:
            raise kubeflags.Unanswerable(
                "the cluster does not serve BGPNodeStatus (its CRD is not installed)"
            )
        try:
            return [node_status_from_json(o) for o in objects]
        except ValueError as exc:
            raise kubeflags.Unanswerable(str(exc)) from exc

    result = kubeflags.read(args, prog, reader, err)
    if result is None:
        return kubeflags.EXIT_FAILED
    wanted = set(args.node)
    statuses = [s for s in result if not wanted or s.node in wanted]
    for n in sorted(wanted - {s.node for s in result}):
        print(f"warning: node {n} has no BGPNodeStatus", file=err)
    from bgpd.inspection import peers_json, peers_table

    if args.output == "json":
        out.write(json.dumps(peers_json(statuses), indent=2) + "\n")
    else:
        out.write(peers_table(statuses))
    return kubeflags.EXIT_OK
