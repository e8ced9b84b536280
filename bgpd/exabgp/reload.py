"""How a new ExaBGP configuration reaches a running ExaBGP: reloaded in place, or restarted.

``reconfiguration(before, after, ...)`` compares two renderings (bgpd.exabgp.render) and
says what to do, with a reason for every restart; purely computational, table-tested in
tests/unit/test_exabgp_reload.py.

What ExaBGP 5.0.15 does on a reload (the ``reload`` API command or SIGUSR1; read in its
reactor/loop.py ``Reactor.reload``, bgp/neighbor.py and rib/__init__.py, and measured at
FRR and BIRD routers: docs/architecture.md, "Configuration changes"). ExaBGP keys a
neighbour by its peer address, local address, both ASNs and router-id
(``Neighbor.session_key`` here):

* a neighbour whose key is gone is removed: its session is closed (the router drops its
  routes) and its adj-rib-out, the routes sent through the API, is forgotten;
* a key that is new is a new neighbour with an empty adj-rib-out: it gets none of the
  routes sent earlier, so the driver sends them (``added``);
* the same key with other session parameters (hold time, password, TTL, graceful
  restart, port) is torn down and re-established; its adj-rib-out, kept in ExaBGP's RIB
  cache by key, is re-sent by ExaBGP itself on the new session (``reset``);
* the same key and the same block: nothing happens to the session (``kept``);
* the ``process`` section and ExaBGP's environment (the addresses it listens on) are not
  reloaded: a change of the process, or a new address to listen on, takes a restart.

A session key that passes from one BGPPeer name to another (a BGPPeer renamed while its
session stays the same) would leave ExaBGP holding the old name's routes under the new
one: that takes a restart too (rare, and the one case where the driver's per-peer
bookkeeping and ExaBGP's per-key one disagree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from bgpd.exabgp.render import Rendering
from bgpd.model import IPAddress, PeerName


class ConfigAction(StrEnum):
    """What a new rendering asks of the running ExaBGP."""

    #: The text is the same: nothing to do.
    NONE = "none"
    #: Reload in place: only the neighbours that changed are touched.
    RELOAD = "reload"
    #: Stop ExaBGP and start it again: every session is reset, every route replayed.
    RESTART = "restart"


class RestartReason(StrEnum):
    """Why a change cannot be reloaded in place (MetalLB-style camelCase, as SkipReason)."""

    #: The ``process`` section changed: ExaBGP does not restart its API process on a reload.
    PROCESS_CHANGED = "processChanged"
    #: ExaBGP must listen on an address it does not: read from its environment at start
    #: only.
    LISTEN_CHANGED = "listenChanged"
    #: A BGPPeer was renamed and its session stayed the same (see the module docstring).
    PEER_RENAMED = "peerRenamed"
    #: This ExaBGP's reload cannot be relied on (``reload_available`` False): not started
    #: through the launcher (spec.exabgpBinary), running unmodified (the launcher's
    #: warning: it may skip a reload while updates are queued), or switched off (the
    #: runtime's ``reload_in_place``, which the benchmark uses to compare).
    RELOAD_UNAVAILABLE = "reloadUnavailable"


@dataclass(frozen=True, slots=True)
class Reconfiguration:
    """The verdict: the action, why a restart, and per neighbour what the reload does."""

    action: ConfigAction
    reason: RestartReason | None = None
    #: New to ExaBGP (a new BGPPeer, or its key changed): an empty adj-rib-out, a new
    #: session; the driver sends all its routes.
    added: frozenset[PeerName] = frozenset()
    #: Gone: ExaBGP closes the session and forgets its routes.
    removed: frozenset[PeerName] = frozenset()
    #: Same key, other session parameters: ExaBGP re-establishes the session and
    #: re-sends the routes it holds.
    reset: frozenset[PeerName] = frozenset()
    #: Untouched: the session and its routes stay as they are.
    kept: frozenset[PeerName] = frozenset()

    @property
    def forgotten(self) -> frozenset[PeerName]:
        """The peers whose routes ExaBGP no longer holds after the reload."""
        return self.added | self.removed


def reconfiguration(
    before: Rendering,
    after: Rendering,
    *,
    listen_before: Sequence[IPAddress] = (),
    listen_after: Sequence[IPAddress] = (),
    reload_available: bool = True,
) -> Reconfiguration:
    """What to do with a running ExaBGP started from ``before`` to bring it to ``after``.

    ``listen_before``: the addresses the running ExaBGP listens on (its environment at
    start); ``listen_after``: those ``after`` wants. Only an address not listened on yet
    takes a restart: one listened on and no longer wanted is harmless (ExaBGP refuses a
    connection from a peer it has no neighbour for) and goes at the next start;
    ``reload_available``: whether this ExaBGP's reload can be relied on."""
    unbound = set(listen_after) - set(listen_before)
    if before.config == after.config and not unbound:
        return Reconfiguration(ConfigAction.NONE)
    old = {n.name: n for n in before.neighbors}
    new = {n.name: n for n in after.neighbors}
    added = frozenset(
        name for name, n in new.items() if name not in old or old[name].session_key != n.session_key
    )
    removed = frozenset(name for name in old if name not in new)
    common = set(old) & set(new) - added
    reset = frozenset(name for name in common if before.blocks.get(name) != after.blocks.get(name))
    kept = frozenset(common - reset)
    verdict = Reconfiguration(ConfigAction.RELOAD, None, added, removed, reset, kept)
    reason: RestartReason | None = None
    if not reload_available:
        reason = RestartReason.RELOAD_UNAVAILABLE
    elif before.header != after.header:
        reason = RestartReason.PROCESS_CHANGED
    elif unbound:
        reason = RestartReason.LISTEN_CHANGED
    elif _renamed(before, after):
        reason = RestartReason.PEER_RENAMED
    if reason is not None:
        return Reconfiguration(ConfigAction.RESTART, reason, added, removed, reset, kept)
    return verdict


def _renamed(before: Rendering, after: Rendering) -> bool:
    """A session key held by one BGPPeer before and by another one after."""
    old = {n.session_key: n.name for n in before.neighbors}
    return any(old.get(n.session_key, n.name) != n.name for n in after.neighbors)
