"""ExaBGP's own CPU per route, in one process, with and without the launcher (not a test).

Run from the repository root (no root, no lab, no network):

    .venv/bin/python bench/bench_exabgp_cpu.py [--routes 30000] [--repeat 5]

What a speaker's ExaBGP spends per route, without the network and the scheduler: the
time from the first to the last route at a peer is ExaBGP's CPU once the session is up
(docs/benchmarks.md, "30,000 Services: first to last route at the peer"), and on a
loaded machine the wall clock says more about the load than about ExaBGP. CPU time
(``time.process_time``) of two parts of that path, each in a fresh interpreter per
variant, best of ``--repeat``:

* intake: the driver's commands (``announce attributes next-hop self nlri`` with 100
  prefixes, the default batch) parsed by ExaBGP's API parser and put in a neighbour's
  adj-rib-out (``Neighbor.remove_self``, ``OutgoingRIB.add_to_rib``: what
  ``inject_change`` does);
* report: the NLRI of the UPDATEs it sends parsed back (``NLRI.unpack_nlri`` over
  packed /32s: what it does to report every UPDATE it sends to the speaker).

Variants: ``stock`` (ExaBGP as published), ``launcher`` (bgpd/exabgp/launch.py's
patches, OpenSSL kept out) and ``launcher-2026-11`` (the launcher without ``Family.family`` and
``NLRI.unpack_nlri``, added 2026-12-02).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbgpd_lab.kit.exabgp_conf import NEIGHBORS
from kbgpd_lab.kit.measure import prefixes

VARIANTS = ("stock", "launcher-2026-11", "launcher")


def apply_variant(variant: str) -> None:
    """Patch this interpreter's ExaBGP as the variant says; a launcher variant keeps
    OpenSSL out first, before ExaBGP is imported, as the launcher does."""
    if variant == "stock":
        return
    from bgpd.exabgp import launch

    launch.keep_out()
    from exabgp.bgp.message.update.nlri.nlri import NLRI
    from exabgp.protocol.family import Family

    unpack, family = NLRI.__dict__["unpack_nlri"], Family.__dict__["family"]
    if launch.patch({}) is not None:
        raise SystemExit("the launcher did not patch this ExaBGP")
    if variant == "launcher-2026-11":
        NLRI.unpack_nlri = unpack
        Family.family = family


def intake(routes: int) -> float:
    """CPU seconds to parse and store ``routes`` routes, 100 a command."""
    from exabgp.bgp.message import Action
    from exabgp.configuration.configuration import Configuration
    from exabgp.environment import getenv
    from exabgp.logger import log

    log.init(getenv())
    conf = Configuration([NEIGHBORS], text=True)
    if not conf.reload():
        raise SystemExit(conf.error)
    # The first (IPv4, eBGP) neighbour: one adj-rib-out, as with one router.
    neighbor = next(iter(conf.neighbors.values()))
    all_prefixes = prefixes(routes)
    start = time.process_time()
    for i in range(0, routes, 100):
        conf.static.clear()
        line = "attributes next-hop self nlri " + " ".join(all_prefixes[i : i + 100])
        if not conf.partial("static", line):
            raise SystemExit(conf.error)
        conf.scope.to_context()
        for change in conf.scope.pop_routes():
            change.nlri.action = Action.ANNOUNCE
            neighbor.rib.outgoing.add_to_rib(neighbor.remove_self(change))
    took = time.process_time() - start
    stored = len(neighbor.rib.outgoing._new_nlri)
    if stored != routes:
        raise SystemExit(f"{stored} routes stored, not {routes}")
    return took


def report(routes: int) -> float:
    """CPU seconds to parse the NLRI of ``routes`` sent /32s back, as UPDATEs of ~800."""
    from exabgp.bgp.message import Action
    from exabgp.bgp.message.update.nlri.nlri import NLRI

    packed = [bytes([32, *(int(x) for x in p[:-3].split("."))]) for p in prefixes(routes)]
    updates = [b"".join(packed[i : i + 800]) for i in range(0, routes, 800)]
    parsed = 0
    start = time.process_time()
    for data in updates:
        rest: Any = data
        while rest:
            _, rest = NLRI.unpack_nlri(1, 1, rest, Action.ANNOUNCE, False)
            parsed += 1
    took = time.process_time() - start
    if parsed != routes:
        raise SystemExit(f"{parsed} NLRI parsed, not {routes}")
    return took


def child(variant: str, routes: int) -> None:
    apply_variant(variant)
    print(f"{intake(routes)} {report(routes)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routes", type=int, default=30000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.routes)
        return
    best: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for variant in VARIANTS:
            out = subprocess.run(
                [sys.executable, __file__, "--child", variant, "--routes", str(args.routes)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            times = [float(x) for x in out]
            have = best.setdefault(variant, times)
            best[variant] = [min(a, b) for a, b in zip(have, times, strict=True)]
    print(f"{args.routes} routes, CPU seconds, best of {args.repeat}:")
    for variant, (taken, parsed) in best.items():
        print(
            f"  {variant:17} intake {taken:.3f} s ({taken / args.routes * 1e6:.1f} us a route)"
            f", report {parsed:.3f} s ({parsed / args.routes * 1e6:.1f} us a route)"
        )


if __name__ == "__main__":
    main()
