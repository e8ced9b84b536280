"""`kube-bgpd validate FILE...`: check config files offline, without a cluster or webhooks.

MetalLB users lose time to admission webhooks that fail or are disabled (metallb#1597,
#1598); this command gives the same verdict the speaker and controller will reach, before
anything is deployed. It prints every warning, then either a one-line summary (exit 0) or
every error with its place, one per line (exit 1), all on stdout like other linters. An
unreadable file is an error with its place (exit 1); exit 2 is for usage errors (no file).

It only reads files and prints: no cluster, no network, no ExaBGP.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

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


def summary(pools: int, peers: int, advertisements: int, communities: int, bfd: int) -> str:
    """The one line printed for a valid config (tests and scripts match on it)."""
    parts = [f"{pools} pools", f"{peers} peers", f"{advertisements} advertisements"]
    if communities:
        parts.append(f"{communities} communities")
    if bfd:
        parts.append(f"{bfd} BFD profiles")
    return "valid: " + ", ".join(parts)


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from bgpd.config import load_config
    from bgpd.config.emptying import emptying_refusal

    out = out or sys.stdout
    err = err or sys.stderr
    files: list[str] = [*getattr(args, "config", []), *getattr(args, "files", [])]
    if not files:
        print("kube-bgpd validate: no config file given (FILE... or --config FILE)", file=err)
        return EXIT_USAGE
    result = load_config(files)
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
