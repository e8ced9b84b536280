"""`kube-bgpd status`: print a running speaker's peers and routes (GET /status).

Two tables, peers (with the three route counts: DESIRED by the decision, ACCEPTED by
ExaBGP, ADVERTISED on the established session) then routes (each accepted route, and
whether it is advertised), from the speaker's control socket in its work directory,
or its network listener with ``--metrics-address`` (which serves ``/status`` only with
SpeakerConfig ``exposeStatus``): bgpd.cli.control. ``--json`` prints the document as is.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from bgpd.cli import control


def configure(parser: argparse.ArgumentParser) -> None:
    control.add_flags(parser)
    parser.add_argument("--json", action="store_true", help="print the raw JSON document")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the speaker"
    )


def fetch(where: control.Target, timeout: float) -> Mapping[str, Any]:
    """GET /status; raises control.SpeakerUnreachable, or control.RefusedHere when the
    network listener does not serve it (no SpeakerConfig exposeStatus)."""
    try:
        return control.call(where, "GET", "/status", timeout)
    except control.RefusedHere as exc:
        raise control.RefusedHere(
            f"{exc}: /status is served on the control socket (run this on the node), and "
            "on metricsAddress only with SpeakerConfig exposeStatus: true"
        ) from exc


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
        (
            "PEER",
            "ADDRESS",
            "STATE",
            "SINCE",
            "DESIRED",
            "ACCEPTED",
            "ADVERTISED",
            "PENDING",
            "REASON",
        ),
        [
            (
                p["name"],
                p["address"],
                p["state"],
                _ago(p.get("since"), now),
                p["desired"],
                p["accepted"],
                p["advertised"],
                p["pending"],
                p.get("reason") or "",
            )
            for p in doc.get("peers", [])
        ],
    )
    routes = table(
        ("PEER", "PREFIX", "ADVERTISED", "COMMUNITIES", "LARGE", "LOCAL-PREF", "MED"),
        [
            (
                r["peer"],
                r["prefix"],
                "yes" if r["advertised"] else "no",
                ",".join(r["communities"]),
                ",".join(r["large_communities"]),
                r["local_pref"],
                r["med"],
            )
            for r in doc.get("routes", [])
        ],
    )
    held = (doc.get("bfd_gate") or {}).get("held") or []
    if held:
        # bfdStrict: routes these peers should get are held back (docs/bfd.md).
        rows = [(h["peer"], h["reason"], h["routes"]) for h in held]
        peers += "\n\nheld back:\n" + table(("PEER", "REASON", "ROUTES"), rows)
    bfd = bfd_table(doc, now)
    return f"{head}\n\n{peers}\n\n{routes}\n" + ("" if bfd is None else f"\n{bfd}\n")


def bfd_table(doc: Mapping[str, Any], now: float) -> str | None:
    """The BFD sessions of a /status document (None: no peer has a bfdProfile)."""
    bfd = doc.get("bfd")
    if not bfd:
        return None
    return table(
        ("BFD PEER", "ADDRESS", "LOCAL", "STATE", "SINCE", "FLAPS", "DETECT-MS", "DIAGNOSTIC"),
        [
            (
                p["name"],
                p["address"],
                p["local_address"],
                p["state"],
                _ago(p.get("since"), now),
                p["flaps"],
                p.get("detect_ms"),
                p.get("diagnostic") or "",
            )
            for p in bfd.get("peers", [])
        ],
    )


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        doc = fetch(control.target(args), args.timeout)
    except (control.SpeakerUnreachable, control.RefusedHere) as exc:
        print(f"kube-bgpd status: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        out.write(render(doc, time.time()))
    return 0
