"""Start ExaBGP in this interpreter with two verified hot spots made cheaper.

``python -m bgpd.exabgp.launch server CONF`` is ``python -m exabgp server CONF`` after
two changes. First, ExaBGP 5.0's ``Neighbor.remove_self`` deep-copies every route it puts in a
neighbour's adj-rib-out (about 60 objects per route), which profiling showed to be about
half of ExaBGP's CPU time when it takes 10,000 routes from the API (docs/benchmarks.md).
The copy exists so the per-neighbour next-hop rewrite ("next-hop self") cannot leak into
the shared parsed route or into another neighbour's copy. The replacement keeps exactly
that guarantee with shallow copies of the three objects the rest of ExaBGP ever assigns
to (the Change, its NLRI and its attribute set): the attribute and NLRI field objects are
never mutated in place after parsing. Second, the reactor may run :data:`ASYNC_STEPS`
queued route steps per loop turn instead of 50 (see there).

Both are applied only when ExaBGP's ``remove_self`` is byte-for-byte the source they were
checked against (:data:`VERIFIED_SOURCE_SHA256`, ExaBGP 5.0.15) and its step limit is the
known 50; any other ExaBGP runs unmodified and says so on stderr, which the supervisor
logs. Figures in docs/benchmarks.md. This module must not import anything from kube-bgpd:
it runs inside ExaBGP's process.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from typing import Any

#: sha256 of ``inspect.getsource(exabgp.bgp.neighbor.Neighbor.remove_self)`` in the
#: ExaBGP release the replacement was verified against (5.0.15).
VERIFIED_SOURCE_SHA256 = "cbd04747e6f3e8345b2591aea898be36c58c4a3fa26c2aecef1909d05ef517a2"


#: Route steps ExaBGP's reactor runs per loop turn (ExaBGP 5.0: 50, one per prefix of a
#: command). When queued work remains at the end of a turn and no new command arrived,
#: the reactor waits in poll() for up to 10 ms before the next turn; with 50 steps a
#: 100-prefix command always leaves work behind, and each turn also sets up a new asyncio
#: event loop (10,000 routes: ~200 turns instead of ~25). The driver keeps at most
#: ``window * (batch + 1)`` steps queued (a command is one step per prefix plus its
#: answer): the runtime checks that this fits in one turn.
ASYNC_STEPS = 1000


def source_digest() -> str:
    """The digest of the installed ExaBGP's ``Neighbor.remove_self`` source."""
    from exabgp.bgp.neighbor import Neighbor

    return hashlib.sha256(inspect.getsource(Neighbor.remove_self).encode()).hexdigest()


@functools.cache
def _exabgp_types() -> tuple[Any, Any, Any]:
    """ExaBGP's Change, the NEXT_HOP attribute code and NextHop, imported once (lazily:
    the daemon imports this module for :data:`ASYNC_STEPS` without loading ExaBGP)."""
    from exabgp.bgp.message.update.attribute import Attribute, NextHop
    from exabgp.rib.change import Change

    return Change, Attribute.CODE.NEXT_HOP, NextHop


def _shallow(obj: Any) -> Any:
    """A new instance of ``obj``'s class sharing its field values (what ``copy.copy``
    does for these plain classes, at a fraction of the cost)."""
    cls: Any = type(obj)
    new = cls.__new__(cls)
    new.__dict__.update(obj.__dict__)
    return new


def remove_self(self: Any, changes: Any) -> Any:
    """``Neighbor.remove_self`` without the deep copy: a new Change over a copied NLRI
    and a copied attribute set, so the next-hop rewrite below touches only this
    neighbour's copy (the original's contract), and nothing else is shared mutably."""
    change_type, next_hop_code, next_hop_type = _exabgp_types()
    nlri = _shallow(changes.nlri)
    attributes = _shallow(changes.attributes)
    dict.update(attributes, changes.attributes)
    # The instance dict's values are shared now; the one mutable cache gets its own.
    attributes._dict = dict(attributes._dict)
    change = change_type(nlri, attributes)
    if not nlri.nexthop.SELF:
        return change
    neighbor_self = self.ip_self(nlri.afi)
    nlri.nexthop = neighbor_self
    if next_hop_code in attributes:
        attributes[next_hop_code] = next_hop_type(str(neighbor_self), neighbor_self.pack())
    return change


def patch() -> bool:
    """Install :func:`remove_self` if the installed ExaBGP is the verified one."""
    from exabgp.bgp.neighbor import Neighbor
    from exabgp.reactor.asynchronous import ASYNC

    if source_digest() != VERIFIED_SOURCE_SHA256 or getattr(ASYNC, "LIMIT", None) != 50:
        print(
            # "warning" makes the supervisor relay the line at WARNING level.
            "kube-bgpd launcher warning: this ExaBGP is not the verified 5.0.15 "
            "(Neighbor.remove_self, ASYNC.LIMIT); running it unmodified (slower with many "
            "routes)",
            file=sys.stderr,
            flush=True,
        )
        return False
    Neighbor.remove_self = remove_self
    ASYNC.LIMIT = ASYNC_STEPS
    return True


def main() -> None:
    patch()
    from exabgp.application.main import main as exabgp_main

    sys.argv[0] = "exabgp"
    exabgp_main()


if __name__ == "__main__":
    main()
