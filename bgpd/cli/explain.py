"""`kube-bgpd explain`: which routes each node announces to which peer, and why every
other LoadBalancer Service is not announced, computed offline from config files and a
cluster dump (`kubectl get services,endpointslices,nodes -A -o yaml` or `-o json`).

With ``--from-speaker`` it answers from the running speaker instead (its last applied
decision, read from GET /status on --metrics-address), through the same rendering, plus
what became of each route: ``state`` ``advertised`` (on the wire to the router),
``accepted`` (ExaBGP holds it, the session does not carry it) or ``pending``, and each
peer's session with its desired / accepted / advertised counts (live_peers()).

With ``--allocation`` it previews the controller instead: what allocate() would write to
each LoadBalancer Service of the dump (kept, assigned, changed, failed and why), so a
migration can be checked before the controllers are switched (bgpd.allocation_preview).

Only reads files (or the speaker's status) and prints; no cluster access, no ExaBGP.
stdout carries the answer (the table, or the JSON contract in docs/cli.md); warnings and
errors go to stderr so a script can pipe the JSON. Exit codes: 0 answered, 1 bad config
or unreadable/invalid dump (or no answer from the speaker), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from bgpd.explain import JSONValue
    from bgpd.model import ClusterSnapshot, Config, Decision, ServiceKey

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def configure(parser: argparse.ArgumentParser) -> None:
    from bgpd.cli import control

    control.add_flags(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--cluster",
        metavar="DUMP",
        help="cluster dump: kubectl get services,endpointslices,nodes -A -o yaml|json "
        "('-' reads stdin)",
    )
    source.add_argument(
        "--from-speaker",
        action="store_true",
        help="ask the running speaker on this host (its control socket in --work-dir, or "
        "--metrics-address with SpeakerConfig exposeStatus) for its last decision instead "
        "of computing one from a dump",
    )
    parser.add_argument(
        "--allocation",
        action="store_true",
        help="preview the controller: the IPs it would write to each LoadBalancer Service "
        "of the dump, and why not (needs --config and --cluster; Services and Namespaces "
        "suffice)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="with --from-speaker: seconds to wait for the speaker (default 5)",
    )
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME",
        help="node to explain (repeatable; default: every node in the dump)",
    )
    parser.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table for people (default) or json (a stable contract, see docs/cli.md)",
    )
    parser.add_argument(
        "service",
        nargs="?",
        metavar="NAMESPACE/SERVICE",
        help="only this Service's routes and reasons",
    )


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from bgpd.config import load_config
    from bgpd.explain import explain, explain_json, explain_table
    from bgpd.model import NodeName, ServiceKey
    from bgpd.objects import DumpError, parse_cluster_dump

    out = out or sys.stdout
    err = err or sys.stderr
    prog = "kube-bgpd explain"

    service: ServiceKey | None = None
    if args.service is not None:
        parts = args.service.split("/")
        if len(parts) != 2 or not all(parts):
            print(f"{prog}: {args.service!r} is not NAMESPACE/SERVICE", file=err)
            return EXIT_USAGE
        service = ServiceKey(args.service)
    if args.from_speaker:
        if args.allocation:
            print(f"{prog}: --allocation previews from a dump, not --from-speaker", file=err)
            return EXIT_USAGE
        return _from_speaker(args, service, out, err)
    if not args.config:
        print(f"{prog}: no config file given (--config FILE)", file=err)
        return EXIT_USAGE

    result = load_config(args.config)
    for warning in result.warnings:
        print(f"warning: {warning}", file=err)
    if result.config is None:
        for error in result.errors:
            print(f"error: {error}", file=err)
        noun = "error" if len(result.errors) == 1 else "errors"
        print(f"invalid: {len(result.errors)} {noun}", file=err)
        return EXIT_INVALID

    try:
        snapshot = parse_cluster_dump(_read(args.cluster))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"{prog}: cannot read {args.cluster}: {reason}", file=err)
        return EXIT_INVALID
    except DumpError as exc:
        print(f"{prog}: {args.cluster}: {exc}", file=err)
        return EXIT_INVALID

    if service is not None:
        found = snapshot.services.get(service)
        if found is None:
            print(f"warning: Service {service} is not in {args.cluster}", file=err)
        elif found.type != "LoadBalancer":
            print(f"warning: Service {service} is of type {found.type}, not LoadBalancer", file=err)
    if args.allocation:
        return _allocation(args, result.config, snapshot, service, out, err)

    nodes = [NodeName(n) for n in dict.fromkeys(args.node)] or sorted(snapshot.nodes)
    if not nodes:
        print(f"{prog}: {args.cluster} holds no Node; name one with --node", file=err)
        return EXIT_INVALID
    # Not errors: the answer (nodeUnknown, or nothing for the Service) is still the
    # speaker's answer, but a typo deserves a hint.
    for n in nodes:
        if n not in snapshot.nodes:
            print(f"warning: node {n} is not in {args.cluster}", file=err)
    if snapshot.services and not snapshot.endpoint_slices:
        print(
            f"warning: {args.cluster} holds no EndpointSlice; every Service will show "
            "noEndpoints (dump with: kubectl get services,endpointslices,nodes -A -o yaml)",
            file=err,
        )

    decisions = explain(result.config, snapshot, nodes)
    if args.output == "json":
        value = explain_json(decisions, service, single=len(args.node) == 1)
        out.write(json.dumps(value, indent=2) + "\n")
    else:
        out.write(explain_table(decisions, service))
    return EXIT_OK


def _allocation(
    args: argparse.Namespace,
    config: Config,
    snapshot: ClusterSnapshot,
    service: ServiceKey | None,
    out: TextIO,
    err: TextIO,
) -> int:
    """The controller's answer for the dump, through bgpd.allocation_preview."""
    from bgpd.allocation_preview import preview, preview_json, preview_table

    if args.node:
        print(
            "warning: --node has no meaning with --allocation (allocation is cluster-wide)",
            file=err,
        )
    entries = preview(config, snapshot)
    if args.output == "json":
        out.write(json.dumps(preview_json(entries, service), indent=2) + "\n")
    else:
        out.write(preview_table(entries, service))
    return EXIT_OK


def _from_speaker(
    args: argparse.Namespace, service: ServiceKey | None, out: TextIO, err: TextIO
) -> int:
    """The live answer: the speaker's last applied decision, from GET /status (key
    "explain", the JSON contract), rendered by the same functions as the offline one."""
    from bgpd.cli import control
    from bgpd.cli.status import bfd_table, fetch
    from bgpd.explain import decision_from_json, explain_json, explain_table

    prog = "kube-bgpd explain"
    address = control.target(args)
    try:
        doc = fetch(address, args.timeout)
    except (control.SpeakerUnreachable, control.RefusedHere) as exc:
        print(f"{prog}: cannot read the speaker's status: {exc}", file=err)
        return EXIT_INVALID
    answer = doc.get("explain")
    if answer is None:
        print(f"{prog}: the speaker at {address} has made no decision yet", file=err)
        return EXIT_INVALID
    try:
        decision = decision_from_json(answer)
    except ValueError as exc:
        print(f"{prog}: {address}: {exc}", file=err)
        return EXIT_INVALID
    asked = list(dict.fromkeys(args.node))
    if asked and asked != [decision.node]:
        print(f"{prog}: the speaker at {address} runs on node {decision.node}", file=err)
        return EXIT_USAGE
    states = route_states(doc.get("routes", ()))
    peers = live_peers(doc.get("peers", ()))
    if args.output == "json":
        value = explain_json([decision], service, single=len(asked) == 1)
        for node in value if isinstance(value, list) else [value]:
            assert isinstance(node, dict)
            routes = node["routes"]
            assert isinstance(routes, list)
            for entry in routes:
                assert isinstance(entry, dict)
                entry["state"] = states.get((str(entry["peer"]), str(entry["prefix"])), "pending")
            node["peers"] = [dict(p) for p in peers]
        out.write(json.dumps(value, indent=2) + "\n")
    else:
        out.write(explain_table([decision], service))
        out.write(live_table(decision, service, states, peers))
        # A route reaches a BFD-enabled peer only over a confirmed path: show the sessions.
        bfd = bfd_table(doc, time.time())
        if bfd is not None:
            out.write(f"\n{bfd}\n")
    return EXIT_OK


def route_states(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(peer, prefix) -> "advertised" or "accepted", from /status "routes" (the routes
    ExaBGP accepted, each with whether it is advertised); a route absent is pending."""
    return {
        (str(r["peer"]), str(r["prefix"])): "advertised" if r.get("advertised") else "accepted"
        for r in rows
    }


def live_peers(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, JSONValue]]:
    """Each peer's session and the three route counts, from /status "peers"."""
    return [
        {
            "peer": str(p["name"]),
            "state": str(p["state"]),
            "desired": int(p.get("desired", 0)),
            "accepted": int(p.get("accepted", 0)),
            "advertised": int(p.get("advertised", 0)),
        }
        for p in rows
    ]


def live_table(
    decision: Decision,
    service: ServiceKey | None,
    states: Mapping[tuple[str, str], str],
    peers: Sequence[Mapping[str, JSONValue]],
) -> str:
    """What became of the decision's routes at the routers, then the sessions."""
    from bgpd.decision import prefix_text
    from bgpd.explain import route_entries, table_lines

    lines = ["  at the routers:"]
    rows = [
        [key, prefix_text(r.prefix), r.peer, states.get((r.peer, prefix_text(r.prefix)), "pending")]
        for key, r in route_entries(decision, service)
    ]
    if rows:
        lines += table_lines(("SERVICE", "PREFIX", "PEER", "STATE"), rows, "  ")
    lines.append("  sessions:")
    lines += table_lines(
        ("PEER", "STATE", "DESIRED", "ACCEPTED", "ADVERTISED"),
        [
            [
                str(p["peer"]),
                str(p["state"]),
                str(p["desired"]),
                str(p["accepted"]),
                str(p["advertised"]),
            ]
            for p in peers
        ],
        "  ",
    )
    return "\n".join(lines) + "\n"
