"""What `kubectl bgpd inspect` and `kubectl bgpd peers` share: the flags kubectl users
expect (--kubeconfig from the common flags, --context, -n/--namespace), the output flag,
and running one read against the API with every failure said on one line.

The commands read the cluster only through k8s_watcher (the one package that talks to the
API); this module imports it inside the functions, so `--help` does not load the client.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TextIO, TypeVar

if TYPE_CHECKING:
    from k8s_watcher.client import KubeClient

from k8s_watcher.namespaces import DEFAULT_CONFIG_NAMESPACE

T = TypeVar("T")

EXIT_OK = 0
#: The API could not be read, or what it holds cannot be read.
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--context",
        default=None,
        metavar="NAME",
        help="kubeconfig context to use (default: its current context)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        metavar="NAMESPACE",
        help="the Service's namespace when not written NAMESPACE/SERVICE "
        "(default: the context's namespace, else default)",
    )
    parser.add_argument(
        "--config-namespace",
        default=DEFAULT_CONFIG_NAMESPACE,
        metavar="NAMESPACE",
        help=f"where the configuration objects are (default {DEFAULT_CONFIG_NAMESPACE}, "
        "as the speaker's --config-from-cluster)",
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "json"),
        default="table",
        help="table for people (default) or json (a stable contract, see docs/cli.md)",
    )


class Unanswerable(Exception):
    """A reader's one-line reason why the cluster's objects give no answer."""


def read(
    args: argparse.Namespace,
    prog: str,
    reader: Callable[[KubeClient], Awaitable[T]],
    err: TextIO | None = None,
) -> T | None:
    """Connect with the user's credentials and run `reader`; None (after one line on
    stderr) when the credentials or the API fail, or the reader raises Unanswerable."""
    from k8s_watcher.client import KubeClient
    from k8s_watcher.errors import KubernetesError

    err = err or sys.stderr

    async def main() -> T:
        client = await KubeClient.connect(args.kubeconfig, context=args.context)
        async with client:
            return await reader(client)

    try:
        return asyncio.run(main())
    except KubernetesError as exc:
        print(f"{prog}: {' '.join(exc.message.split())}", file=err)
    except Unanswerable as exc:
        print(f"{prog}: {exc}", file=err)
    return None


def namespace(args: argparse.Namespace) -> str:
    """-n, else the kubeconfig context's namespace (in a pod: the service account's),
    else "default" (kubectl's order)."""
    if args.namespace:
        return str(args.namespace)
    from k8s_watcher.reader import context_namespace

    return context_namespace(args.kubeconfig, args.context) or "default"
