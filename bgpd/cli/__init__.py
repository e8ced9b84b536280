"""The `kube-bgpd` command line: one entry point, one sub-command per job.

Each sub-command lives in its own module of this package with two functions,
``configure(parser)`` and ``run(args) -> int``; this module only wires the common flags
and dispatches, so adding a command never touches another command's code. Command modules
import heavy libraries inside ``run``: `kube-bgpd validate` must not pay for importing the
Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Protocol, cast

from bgpd import __version__

#: (command, module under bgpd.cli, one-line help). The order is the order of --help.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("validate", "validate", "check config files; print every error with its place"),
    ("explain", "explain", "which routes go to which peer, and why the rest are not announced"),
    ("speaker", "speaker", "run the per-node speaker (drives one ExaBGP)"),
    ("controller", "controller", "run the IP allocator (leader-elected)"),
    ("status", "status", "show a running speaker's peers and routes"),
    ("drain", "drain", "gracefully shut a running speaker's routes down (RFC 8326)"),
    ("inspect", "inspect", "one Service from the cluster: allocation, decisions, advertised"),
    ("peers", "peers", "every node's BGP sessions, from the cluster's BGPNodeStatus"),
)

#: The kubectl plugin's name: kubectl runs `kubectl-bgpd` from PATH for `kubectl bgpd`.
KUBECTL_PROG = "kubectl bgpd"


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Flags every command that touches config, the cluster or the daemon accepts."""
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="config file (repeatable); YAML documents of MetalLB and kube-bgpd kinds",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="PATH",
        help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        metavar="NAME",
        help="this node's name (default: $NODE_NAME)",
    )
    parser.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help="metrics, health and status listener (default from SpeakerConfig: 127.0.0.1:7473)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=None,
        help="log format (default from SpeakerConfig: text)",
    )


def build_parser(prog: str = "kube-bgpd", only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``only``, the other commands' modules are neither
    imported nor asked for their flags (they are listed in --help all the same): the
    long-running speaker then does not hold the client commands' modules."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Announce Kubernetes LoadBalancer Service IPs to routers over BGP.",
    )
    parser.add_argument("--version", action="version", version=f"kube-bgpd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_common_flags(p)
        if only is not None and name != only:
            continue
        mod = _load(module)
        if mod is not None:
            mod.configure(p)
        p.set_defaults(_module=module, prog_name=prog)
    return parser


class CommandModule(Protocol):
    """What a sub-command module provides."""

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _load(module: str) -> CommandModule | None:
    try:
        mod: ModuleType = importlib.import_module(f"bgpd.cli.{module}")
        return cast(CommandModule, mod)
    except ModuleNotFoundError as exc:
        if exc.name == f"bgpd.cli.{module}":
            return None
        raise


def main(argv: Sequence[str] | None = None, *, prog: str = "kube-bgpd") -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # The command is the first word that is not an option (the top level has only -h
    # and --version); anything else parses with every command, for argparse's message.
    chosen = next((w for w in words if not w.startswith("-")), None)
    known = {name for name, _, _ in COMMANDS}
    parser = build_parser(prog, only=chosen if chosen in known else None)
    args = parser.parse_args(words)
    mod = _load(args._module)
    if mod is None:
        parser.error(f"{args.command}: not available in this build")
    return mod.run(args)


def kubectl_main() -> int:
    """The `kubectl-bgpd` executable: the same commands, named as kubectl users type them
    (`kubectl bgpd inspect ...`)."""
    return main(prog=KUBECTL_PROG)


if __name__ == "__main__":
    sys.exit(main())
