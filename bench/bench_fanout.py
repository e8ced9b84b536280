"""How many routes move when one node leaves, with a fan-out cap (not a test).

Run from the repository root (no root needed, no processes, no network):

    .venv/bin/python bench/bench_fanout.py [--ips 10000] [--nodes 10,50,200] [--caps 2,8]

For every (N nodes, cap K) it chooses the announcing nodes of `--ips` /32 prefixes with
bgpd.fanout (the rule decide() uses for BGPAdvertisement maxNodes), then removes each node
in turn (`--leave` of them, spread over the list) and counts, against the choice before:

* served: the prefixes the leaving node announced (expected ~ ips * K / N);
* moved: the prefixes whose chosen set changed (rendezvous: exactly `served`);
* pairs: the (prefix, node) pairs added or removed (rendezvous: 2 * served, the leaving
  node's pair and the one node taking its place), and of those, pairs that touch neither
  the leaving node nor its replacement (rendezvous: 0);

and the same for a naive choice (node list sorted, K consecutive nodes from a hash of
the prefix modulo N), which is what a "hash mod N" scheme does. It also times
fanout.rank(), the call a node makes per prefix to know whether it announces.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import time
from collections.abc import Callable, Sequence

from bgpd import fanout
from bgpd.model import NodeName

Choice = Callable[[str, Sequence[NodeName], int], frozenset[NodeName]]


def rendezvous(key: str, nodes: Sequence[NodeName], cap: int) -> frozenset[NodeName]:
    return fanout.chosen(key, nodes, cap)


def modulo(key: str, nodes: Sequence[NodeName], cap: int) -> frozenset[NodeName]:
    ordered = sorted(nodes)
    start = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return frozenset(ordered[(start + i) % len(ordered)] for i in range(min(cap, len(ordered))))


def measure(
    choose: Choice, keys: list[str], nodes: list[NodeName], cap: int, leave: int
) -> tuple[float, float, float, float]:
    """Means over `leave` departures of served, moved, pairs and stray pairs (pairs
    beyond the leaving node's and one replacement's)."""
    before = {k: choose(k, nodes, cap) for k in keys}
    step = max(1, len(nodes) // leave)
    gone_list = nodes[::step][:leave]
    served = moved = pairs = 0
    stray = 0
    for gone in gone_list:
        rest = [n for n in nodes if n != gone]
        for k in keys:
            old, new = before[k], choose(k, rest, cap)
            served += gone in old
            if old != new:
                moved += 1
                pairs += len(old ^ new)
                # Beyond the leaving node's pair and one node taking its place.
                replaced = 1 if gone in old else 0
                stray += len(old - new - {gone}) + max(0, len(new - old) - replaced)
    n = len(gone_list)
    return served / n, moved / n, pairs / n, stray / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ips", type=int, default=10000)
    parser.add_argument("--nodes", default="10,50,200")
    parser.add_argument("--caps", default="2,8")
    parser.add_argument("--leave", type=int, default=5, help="departures measured per case")
    args = parser.parse_args()
    base = int(ipaddress.ip_address("10.99.0.0"))
    keys = [f"{ipaddress.ip_address(base + i)}/32" for i in range(args.ips)]
    print(
        f"{'N':>4} {'K':>3} {'scheme':>10} {'served':>8} {'K/N*ips':>8} {'moved':>8} "
        f"{'moved/ips':>9} {'pairs':>8} {'stray':>6}"
    )
    for n in (int(x) for x in args.nodes.split(",")):
        nodes = [NodeName(f"node{i}") for i in range(1, n + 1)]
        for cap in (int(x) for x in args.caps.split(",")):
            for name, choose in (("rendezvous", rendezvous), ("modulo", modulo)):
                served, moved, pairs, stray = measure(choose, keys, nodes, cap, args.leave)
                print(
                    f"{n:>4} {cap:>3} {name:>10} {served:>8.0f} {args.ips * cap / n:>8.0f} "
                    f"{moved:>8.0f} {moved / args.ips:>9.3f} {pairs:>8.0f} {stray:>6.0f}"
                )
    for n in (int(x) for x in args.nodes.split(",")):
        nodes = [NodeName(f"node{i}") for i in range(1, n + 1)]
        start = time.process_time()
        for k in keys:
            fanout.rank(k, nodes, nodes[0])
        took = time.process_time() - start
        print(f"fanout.rank over {n} candidates: {took / len(keys) * 1e6:.0f} us CPU per prefix")


if __name__ == "__main__":
    main()
