"""BGP follows BFD: a pure state machine, the one owner of the rules between the two.

Inputs: which peers are BFD-enabled and SpeakerConfig ``bfdStrict`` (``configure``),
every reading of their BFD sessions (``observe``, a BfdPeerState per peer, as the bfdd
adapter reads them back) and the speaker's lifecycle (``stop``). Outputs: per peer
whether routes may be announced to it, or why not (``held``, a ``HoldReason``), and the
actions the speaker carries out (``Teardown``: ``neighbor A teardown 10`` through the
ExaBGP driver). ``goodbye(on_sigterm)`` is the order of a stop. No I/O, no clock, no
logging: the speaker (bgpd.speaker.app) turns the outputs into driver calls, log lines,
metrics and MQTT events.

The rules:

* **Teardown** (RFC 5882 section 4.1, FRR's and BIRD's behaviour): a BFD session that was
  Up and is seen Down tears its BGP session down at once, instead of waiting for the
  hold timer; exactly once per Up -> Down (it is armed again only by the next Up).
  Readings in between that say nothing (UNKNOWN: bfdd starting, restarting or not
  answering) neither arm nor fire: Up, Unknown, Down still tears down once; Up, Unknown,
  Up does nothing. The teardown is sent whatever the BGP session's state is believed to
  be: ExaBGP tears down only an established session (answering ``done`` either way), and
  the state the speaker holds may lag ExaBGP's.
* **The router's own Down is the router's to act on**: a Down whose diagnostic is
  "neighbor signaled session down" means the router's BFD went down while its packets
  still reach the node; the router's BGP follows its own BFD (FRR and BIRD tear the
  session down themselves, with Cease 10). Measured at FRR 8.4: right after the start,
  the router re-registers the node's BFD session while their BGP session comes up and
  signals Down once (1.4 s after Up in the lab): a teardown of the speaker's own then
  only added a false ``bfd.teardown`` to every start. Such a Down neither fires nor
  disarms: a Down that follows it with another diagnostic (the path then failed:
  "control detection time expired") still tears down once. Strict holds the routes for
  it as for any Down.
* **AdminDown is not a failure** (RFC 5882 section 3.2): a session administratively down
  at either end means "BFD is not in use", not "the path failed": no teardown (and a
  Down that follows an AdminDown is not one after Up), and routes are not held for it.
* **Strict** (SpeakerConfig bfdStrict, on by default; FRR's ``neighbor X bfd strict``):
  routes go to a BFD-enabled peer only while its BFD session is Up (or AdminDown, see
  above): never over a path BFD has not confirmed. Without strict, BFD only tears down.
* **One peer is not another**: every rule reads and changes only the peer concerned.
* **Stopping**: once the speaker stops, nothing is torn down any more: its own goodbye
  (BFD AdminDown after the BGP withdrawal, ``goodbye``) must not look like a failure.

A drain (bgpd.speaker.drain) is not an input: it changes which routes are wanted, not
whether a path works, so a draining node's sessions keep following BFD, and its BFD
sessions stay up (an undrain needs them); only the stop after it says goodbye.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.model import HoldReason, PeerName

#: bfdd's diagnostic for a Down the other end signalled (RFC 5880 section 4.1, code 3):
#: packets from the router arrive, so the path towards the node works (see the rules).
NEIGHBOR_SIGNALED_DOWN = "neighbor signaled session down"

#: The Cease subcode of the BGP teardown (RFC 9384, "BFD Down"): the router's log says
#: why the session ended. ExaBGP 5.0.15 sends any subcode it is given.
CEASE_BFD_DOWN = 10


@dataclass(frozen=True, slots=True)
class Teardown:
    """Tear this peer's BGP session down now: its BFD session went from Up to Down."""

    peer: PeerName
    #: The BFD diagnostic read with the Down (e.g. "control detection time expired").
    diagnostic: str = ""


@dataclass(frozen=True, slots=True)
class GateState:
    """What the gate knows. The mappings are never changed in place (copied on change)."""

    strict: bool = True
    #: The BFD-enabled peers (BGPPeer bfdProfile set, with a session from this node).
    enabled: frozenset[PeerName] = frozenset()
    #: The last BFD state read per enabled peer (absent: none read yet).
    states: Mapping[PeerName, BfdState] = field(default_factory=dict)
    #: Peers whose BFD session was Up since their last teardown: a Down fires.
    armed: frozenset[PeerName] = frozenset()
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class Transition:
    state: GateState
    teardowns: tuple[Teardown, ...] = ()


def _announceable(state: BfdState) -> bool:
    """A BFD state under which strict mode lets routes through: Up, or AdminDown
    (administratively down = BFD not in use, RFC 5882 section 3.2)."""
    return state is BfdState.UP or state is BfdState.ADMIN_DOWN


def held(state: GateState) -> dict[PeerName, HoldReason]:
    """The peers routes must not be announced to now, with the reason; every other peer
    gets its routes."""
    if not state.strict:
        return {}
    return {
        peer: HoldReason.BFD_NOT_UP
        for peer in sorted(state.enabled)
        if not _announceable(state.states.get(peer, BfdState.UNKNOWN))
    }


def configure(state: GateState, *, enabled: Iterable[PeerName], strict: bool) -> Transition:
    """The BFD-enabled peers and the strict setting (at start and on every new config).
    A peer no longer BFD-enabled is forgotten; a new one starts with nothing read."""
    peers = frozenset(enabled)
    states = {p: s for p, s in state.states.items() if p in peers}
    return Transition(
        replace(state, strict=strict, enabled=peers, states=states, armed=state.armed & peers)
    )


def _step(
    state: GateState, reading: BfdPeerState, armed: set[PeerName], out: list[Teardown]
) -> BfdState:
    """One peer's reading: its new remembered state; a teardown appended when due."""
    peer, new = reading.peer, reading.state
    if new is BfdState.UNKNOWN:
        # Says nothing about the path: keep what was known (and whether it was Up).
        return state.states.get(peer, BfdState.UNKNOWN)
    if new is BfdState.UP:
        armed.add(peer)
    elif new is BfdState.ADMIN_DOWN:
        armed.discard(peer)
    elif new is BfdState.DOWN and peer in armed and reading.diagnostic != NEIGHBOR_SIGNALED_DOWN:
        armed.discard(peer)
        if not state.stopping:
            out.append(Teardown(peer, reading.diagnostic))
    # INIT: the handshake of a session coming up; it neither arms nor fires.
    return new


def observe(state: GateState, readings: Mapping[PeerName, BfdPeerState]) -> Transition:
    """A new reading of the BFD sessions (any subset of the peers; readings of peers
    that are not BFD-enabled are ignored)."""
    states = dict(state.states)
    armed = set(state.armed)
    teardowns: list[Teardown] = []
    for peer in sorted(readings):
        if peer in state.enabled:
            states[peer] = _step(state, readings[peer], armed, teardowns)
    return Transition(replace(state, states=states, armed=frozenset(armed)), tuple(teardowns))


def stop(state: GateState) -> Transition:
    """The speaker is stopping: no more teardowns (see the module docstring)."""
    return Transition(replace(state, stopping=True))


class GoodbyeStep(StrEnum):
    """One step of a stop, in ``goodbye()``'s order."""

    #: Withdraw every route from every peer, wait for ExaBGP's acks and the flush.
    WITHDRAW = "withdraw"
    #: onSigterm retain: withdraw only from peers without graceful restart; the others
    #: keep the routes as stale when ExaBGP's session closes (RFC 4724).
    RETAIN = "retain"
    #: Stop ExaBGP (TCP FIN: graceful-restart routers enter helper mode).
    STOP_EXABGP = "stopExabgp"
    #: Every BFD session AdminDown (RFC 5880 6.8.16), so routers learn at once that this
    #: is no path failure, then bfdd stopped.
    BFD_ADMIN_DOWN = "bfdAdminDown"
    STOP_BFD = "stopBfd"


def goodbye(*, retain: bool) -> tuple[GoodbyeStep, ...]:
    """The order of a stop: BGP first (withdraw, or retain at graceful-restart peers,
    then ExaBGP stopped), BFD last (AdminDown, then bfdd stopped), never the reverse: a
    BFD session that went down first would have the routers drop the node's routes
    before the withdrawals reach them, and would defeat graceful restart. ``retain``: the
    stop keeps the routes (onSigterm retain, and no drain asked for). The BFD part is
    the same either way: bfdd cannot outlive the speaker (it stops with it), so the
    routers lose BFD anyway; AdminDown tells them at once that no path failed (see
    docs/bfd.md for what the routers must be told so graceful restart survives it)."""
    first = GoodbyeStep.RETAIN if retain else GoodbyeStep.WITHDRAW
    return (first, GoodbyeStep.STOP_EXABGP, GoodbyeStep.BFD_ADMIN_DOWN, GoodbyeStep.STOP_BFD)
