"""The ECMP fan-out cap: which K of the nodes that could announce a route do, chosen by
rendezvous (highest-random-weight) hashing. Pure: no I/O, no logging, no clock.

Routers install at most so many ECMP next hops per route (often 8-128) and drop the
rest in a way nobody controls. A BGPAdvertisement with `maxNodes: K` makes the route
leave only the K candidate nodes with the highest weight `weight(key, node)`, where the
key is the announced prefix. Every speaker computes the same weights from the same
names, so all nodes agree on the chosen set without talking to each other, and a node
joining or leaving the candidates moves only the routes it wins or loses (Thaler and
Ravishankar, "Using name-based mappings to increase hit rates", IEEE/ACM ToN 1998).

The weight is an unkeyed BLAKE2b of the key and the node name: stable across
processes, machines and Python versions (Python's hash() of a str is salted per process
and would make every speaker choose differently).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from bgpd.model import NodeName


def weight(key: str, node: NodeName) -> int:
    """The rendezvous weight of `node` for `key`: 64 bits of BLAKE2b over both names,
    separated by a NUL byte (no name holds one), so ("a", "bc") and ("ab", "c") differ."""
    return _weigher(key)(node)


def _weigher(key: str) -> Callable[[NodeName], int]:
    """weight(key, .) with the key's part of the hash done once: a copy of the hashed
    prefix costs less than hashing it again for each of hundreds of nodes."""
    base = hashlib.blake2b(key.encode() + b"\x00", digest_size=8)

    def weigh(node: NodeName) -> int:
        h = base.copy()
        h.update(node.encode())
        return int.from_bytes(h.digest(), "big")

    return weigh


def ranked(key: str, nodes: Iterable[NodeName]) -> tuple[NodeName, ...]:
    """`nodes` (duplicates ignored) from the highest weight for `key` to the lowest; equal
    weights (a 64-bit collision) fall back to the node name, so the order is total."""
    weigh = _weigher(key)
    return tuple(sorted(set(nodes), key=lambda n: (-weigh(n), n)))


def chosen(key: str, nodes: Iterable[NodeName], limit: int) -> frozenset[NodeName]:
    """The at most `limit` nodes among `nodes` that announce `key`."""
    return frozenset(ranked(key, nodes)[:limit])


def rank(key: str, nodes: Iterable[NodeName], node: NodeName) -> int:
    """`node`'s place (1 = highest weight) among `nodes` for `key`: 1 + the number of
    other candidates that outrank it. `node` need not be among `nodes`. One hash per
    candidate and no sort, because a node deciding for itself needs only its own place."""
    weigh = _weigher(key)
    mine = weigh(node)
    above = 0
    for n in set(nodes):
        w = weigh(n)
        if w > mine or (w == mine and n < node):
            above += 1
    return 1 + above
