"""`kube-bgpd status`: print a running speaker's peers and routes (GET /status).

Two tables, peers then routes, from the speaker's listener (``--metrics-address``,
default 127.0.0.1:7473); ``--json`` prints the document as is. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

DEFAULT_ADDRESS = "127.0.0.1:7473"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the raw JSON document")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the speaker"
    )


def fetch(address: str, timeout: float) -> Mapping[str, Any]:
    with urllib.request.urlopen(f"http://{address}/status", timeout=timeout) as resp:
        doc = json.loads(resp.read())
    if not isinstance(doc, dict):
        raise ValueError("status is not a JSON object")
    return doc


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _ago(when: float | None, now: float) -> str | None:
    return None if when is None else f"{int(now - when)}s"


def render(doc: Mapping[str, Any], now: float) -> str:
    exa = doc.get("exabgp", {})
    head = (
        f"node {doc.get('node')}  mode {doc.get('mode')}  exabgp pid {exa.get('pid')} "
        f"restarts {exa.get('restarts')}"
    )
    peers = table(
        ("PEER", "ADDRESS", "STATE", "SINCE", "ROUTES", "PENDING", "REASON"),
        [
            (
                p["name"],
                p["address"],
                p["state"],
                _ago(p.get("since"), now),
                p["acknowledged"],
                p["pending"],
                p.get("reason") or "",
            )
            for p in doc.get("peers", [])
        ],
    )
    routes = table(
        ("PEER", "PREFIX", "COMMUNITIES", "LARGE", "LOCAL-PREF", "MED"),
        [
            (
                r["peer"],
                r["prefix"],
                ",".join(r["communities"]),
                ",".join(r["large_communities"]),
                r["local_pref"],
                r["med"],
            )
            for r in doc.get("routes", [])
        ],
    )
    return f"{head}\n\n{peers}\n\n{routes}\n"


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    address = args.metrics_address or DEFAULT_ADDRESS
    try:
        doc = fetch(address, args.timeout)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"kube-bgpd status: cannot reach the speaker at {address}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        out.write(render(doc, time.time()))
    return 0
