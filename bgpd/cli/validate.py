"""`kube-bgpd validate FILE...`: check config files offline, without a cluster or webhooks;
`kube-bgpd validate --kubeconfig KC [--namespace NS]`: check what is deployed.

MetalLB users lose time to admission webhooks that fail or are disabled (metallb#1597,
#1598); this command gives the same verdict the speaker and controller will reach, before
anything is deployed. It prints every warning, then either a one-line summary (exit 0) or
every error with its place, one per line (exit 1), all on stdout like other linters. An
unreadable file is an error with its place (exit 1); exit 2 is for usage errors (no file).

With files it only reads them and prints: no cluster, no network, no ExaBGP. With
--kubeconfig and no file it lists the configuration objects of one namespace (what
`--config-from-cluster` reads) and gives the verdict the speaker would reach on them as
one set; a kind that cannot be listed (its CRD missing) is an error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from bgpd.config import LoadResult

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="config files (YAML documents of MetalLB and kube-bgpd kinds); same as --config",
    )
    from k8s_watcher.namespaces import DEFAULT_CONFIG_NAMESPACE

    parser.add_argument(
        "--namespace",
        default=DEFAULT_CONFIG_NAMESPACE,
        metavar="NS",
        help="with --kubeconfig and no FILE: the namespace whose objects are checked "
        f"(default {DEFAULT_CONFIG_NAMESPACE})",
    )


def summary(pools: int, peers: int, advertisements: int, communities: int, bfd: int) -> str:
    """The one line printed for a valid config (tests and scripts match on it)."""
    parts = [f"{pools} pools", f"{peers} peers", f"{advertisements} advertisements"]
    if communities:
        parts.append(f"{communities} communities")
    if bfd:
        parts.append(f"{bfd} BFD profiles")
    return "valid: " + ", ".join(parts)


def _from_cluster(kubeconfig: str, namespace: str) -> tuple[LoadResult, list[str]]:
    """The namespace's configuration objects, parsed as one set (bgpd.config.cluster)."""
    import asyncio

    from bgpd.config import LoadResult
    from bgpd.config.cluster import parse_objects
    from k8s_watcher.client import KubeClient
    from k8s_watcher.config_source import list_config_objects
    from k8s_watcher.errors import KubernetesError

    async def fetch() -> tuple[LoadResult, list[str]]:
        try:
            async with await KubeClient.connect(kubeconfig) as client:
                objects, problems = await list_config_objects(client, namespace)
        except KubernetesError as exc:
            return LoadResult(None, (), ()), [exc.message]
        return parse_objects(objects), problems

    return asyncio.run(fetch())


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from bgpd.config import load_config
    from bgpd.config.emptying import emptying_refusal

    out = out or sys.stdout
    err = err or sys.stderr
    files: list[str] = [*getattr(args, "config", []), *getattr(args, "files", [])]
    problems: list[str] = []
    if files:
        result = load_config(files)
    elif getattr(args, "kubeconfig", None):
        result, problems = _from_cluster(args.kubeconfig, args.namespace)
    else:
        print(
            "kube-bgpd validate: no config file given (FILE..., --config FILE, "
            "or --kubeconfig KC for the cluster's objects)",
            file=err,
        )
        return EXIT_USAGE
    for problem in problems:
        print(f"error: {problem}", file=out)
    if problems:
        print(f"invalid: {len(problems)} could not be read", file=out)
        return EXIT_INVALID
    for warning in result.warnings:
        print(f"warning: {warning}", file=out)
    if result.config is None:
        for error in result.errors:
            print(f"error: {error}", file=out)
        noun = "error" if len(result.errors) == 1 else "errors"
        print(f"invalid: {len(result.errors)} {noun}", file=out)
        return EXIT_INVALID
    c = result.config
    refusal = emptying_refusal(None, c)
    if refusal is not None:
        print(f"warning: a running speaker refuses to reload to this config: {refusal}", file=out)
    print(
        summary(
            len(c.pools),
            len(c.peers),
            len(c.advertisements),
            len(c.communities),
            len(c.bfd_profiles),
        ),
        file=out,
    )
    return EXIT_VALID
