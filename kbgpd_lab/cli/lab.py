"""`kube-bgpd-lab up|down|status|client`: the network-namespace lab (root only).

``up`` builds the lab (kbgpd_lab.lab.lab) and returns, leaving it running: a ToR router
(FRR, or BIRD with ``--router bird``), three nodes each running the real speaker and a
keep-alive HTTP server, and a client namespace; one Service ``demo/web`` on
10.99.100.1 and fd00:99:100::1 with pods on node1 and node2. ``status`` shows sessions,
the router's ECMP next hops per service IP and the processes; ``client`` sends traffic
from the client namespace and prints the spread; ``down`` removes the lab and any leftover
of an earlier crashed run (only what was recorded); ``demo`` is `make demo`
(kbgpd_lab.lab.demo). This module only parses arguments and
prints; the lab is kbgpd_lab.lab's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_FAIL = 1
EXIT_INTERRUPTED = 130


ECMP_HELP = (
    "pinned (default): the router keeps each open connection on the node it started on, as "
    "a stateful router does, so withdrawals fail no request; stateless: its FIB alone "
    "(hash-threshold), where a next hop leaving or joining resets connections open then"
)


def configure(parser: argparse.ArgumentParser) -> Any:
    """Add the lab's flags and actions to ``parser``; returns the sub-parsers (the
    command adds ``apiserver-sim`` beside them)."""
    parser.add_argument(
        "--state-dir",
        default=None,
        metavar="DIR",
        help="where the lab records what it started (default /run/kube-bgpd-lab)",
    )
    sub = parser.add_subparsers(dest="lab_action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="build the lab and leave it running")
    up.add_argument("--router", choices=("frr", "bird"), default="frr")
    up.add_argument("--ecmp", choices=("pinned", "stateless"), default="pinned", help=ECMP_HELP)
    up.add_argument(
        "--graceful-restart", action="store_true", help="BGP graceful restart on all sessions"
    )
    up.add_argument("--no-ipv6", action="store_true", help="IPv4 only")
    up.add_argument(
        "--cluster",
        choices=("api", "file"),
        default="api",
        help="api: API simulator + controller in the router namespace, Services written to the API "
        "(default); file: the speakers read a cluster dump the lab writes",
    )
    up.add_argument("--json", action="store_true", help="print the status as JSON when up")
    st = sub.add_parser("status", help="sessions, routes and processes of the running lab")
    st.add_argument("--json", action="store_true")
    sub.add_parser("down", help="tear the lab (and leftovers of crashed runs) down")
    demo = sub.add_parser(
        "demo",
        help="bring the lab up, narrate six steps, tear it down (DEMO_NONINTERACTIVE=1: no pauses)",
    )
    demo.add_argument("--router", choices=("frr", "bird"), default="frr")
    demo.add_argument("--ecmp", choices=("pinned", "stateless"), default="pinned", help=ECMP_HELP)
    cl = sub.add_parser("client", help="connections from the client namespace, spread per node")
    cl.add_argument("target", nargs="?", default="10.99.100.1", help="service IP")
    cl.add_argument("--connections", type=int, default=300)
    cl.add_argument("--json", action="store_true")
    return sub


def _print_status(doc: dict[str, Any], services_table: str | None) -> None:
    print(
        f"lab {doc['prefix']}  router {doc['router']} ({doc['ecmp']} ECMP)  "
        f"cluster {doc['cluster']}  "
        f"files {doc['directory']}"
    )
    if services_table:
        print(services_table.rstrip())
    print("sessions at the router:")
    for addr, state in doc["sessions"].items():
        print(f"  {addr:<22} {state}")
    print("routes at the router (kernel FIB next hops):")
    for ip, nodes in doc["routes"].items():
        print(f"  {ip:<22} {', '.join(nodes) or '(no route)'}")
    for svc in doc["services"]:
        pods = ", ".join(f"node{n}" for n in svc["pod_nodes"])
        print(f"service {svc['namespace']}/{svc['name']}: {svc['policy']}, pods on {pods}")
    if doc["cluster"] == "api":
        print(f"controller: {doc['controller'] or 'stopped'}")
    for kind in ("speakers", "http_servers"):
        procs = ", ".join(f"{n} {pid or 'stopped'}" for n, pid in doc[kind].items())
        print(f"{kind.replace('_', ' ')}: {procs}")


def run(args: argparse.Namespace) -> int:
    from kbgpd_lab.lab.lab import Lab, LabError, LabService, lab_down
    from kbgpd_lab.lab.netns import NetnsError
    from kbgpd_lab.lab.routers import RouterError

    if os.geteuid() != 0:
        print("kube-bgpd-lab: needs root (network namespaces, FRR)", file=sys.stderr)
        return EXIT_FAIL
    try:
        if args.lab_action == "demo":
            from kbgpd_lab.lab.demo import interactive_default, run_demo

            return run_demo(
                router=args.router,
                ecmp=args.ecmp,
                interactive=interactive_default(),
                state_dir=Path(args.state_dir) if args.state_dir else None,
            )
        if args.lab_action == "down":
            removed = lab_down(args.state_dir)
            print(
                f"removed {len(removed)} namespaces" + (": " + " ".join(removed) if removed else "")
            )
            return 0
        if args.lab_action == "up":
            print(f"bringing the lab up (router: {args.router}, {args.ecmp}) ...", flush=True)
            lab = Lab.up(
                router=args.router,
                ecmp=args.ecmp,
                ipv6=not args.no_ipv6,
                graceful_restart=args.graceful_restart,
                state_dir=args.state_dir,
                cluster=args.cluster,
                apisim_in_process=False,  # this process exits; the simulator must not
                services=[
                    LabService(
                        "web",
                        # api: the controller allocates; file: the lab picks the IPs.
                        ()
                        if args.cluster == "api"
                        else ("10.99.100.1",)
                        if args.no_ipv6
                        else ("10.99.100.1", "fd00:99:100::1"),
                        pod_nodes=(1, 2),
                    )
                ],
            )
            # This process exits now; `lab down` owns the lab from here on.
            lab.topology.detach()
        else:
            lab = Lab.attach(args.state_dir)
        if args.lab_action == "client":
            result = lab.client(args.target, connections=args.connections)
            if args.json:
                print(result.to_json())
            else:
                spread = ", ".join(f"{n} {c}" for n, c in result.per_node.items())
                print(
                    f"{result.requests} requests to {args.target}: {spread}; "
                    f"{result.failures} failed"
                )
            return 0 if result.failures == 0 else EXIT_FAIL
        doc = lab.status()
        if args.json:
            print(json.dumps(doc, indent=1))
        else:
            _print_status(doc, lab.get_services_table() if doc["cluster"] == "api" else None)
        return 0
    except (LabError, NetnsError, RouterError) as exc:
        print(f"kube-bgpd-lab {args.lab_action}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        # The lab tore itself down on the way out (Lab.up and the demo's `with`).
        print(f"kube-bgpd-lab {args.lab_action}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
