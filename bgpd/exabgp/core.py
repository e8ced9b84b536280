"""The ExaBGP driver's state, without I/O: desired routes in, commands out, answers back.

Role: everything the driver knows and decides between "the reconciler wants these
routes" and "this line goes to ExaBGP": the desired set and the mode, what was sent and
what ExaBGP accepted (answered ``done``) and what it advertised (sent to a router in
UPDATEs on an established session), the commands queued and in flight (the window),
refused prefixes to retry, End-of-RIB due after a session came up, session states and
counters.
The transport (driver.py) owns the socket, the helper's hello, asyncio and the clock; it
feeds this core and writes what ``next_commands()`` returns.

What it must not do: touch a socket, a task, an event loop or a clock (every time is a
parameter), or block. It logs, and hands events to the ``emit`` callable it was given.

Inputs:

* ``configure(neighbors)``: the sessions of the ExaBGP being started;
* ``reload(neighbors, forgotten)``: the running ExaBGP re-reads its configuration in
  place (bgpd.exabgp.reload): a ``reload`` command goes first, alone; once answered,
  the ``forgotten`` peers (new to ExaBGP, or removed) hold nothing, and after
  ``reload_settle`` the routes are planned again, so a new or re-keyed neighbour gets
  all its routes and every other session is left alone;
* ``apply(desired)`` / ``apply_changes(desired, changed)`` / ``set_mode(mode)``;
* ``reset(at)``: a new ExaBGP starts with nothing (every route is replayed);
* ``connect()`` / ``disconnect()``: a helper connection came or went (what was in flight
  on it is unknown: plan again from what ExaBGP accepted);
* ``on_ack(done, at)``: ExaBGP's ``done`` / ``error`` answer to the oldest command in
  flight; ``on_event(doc, at)``: one of ExaBGP's JSON messages (session states, and the
  UPDATEs it sent: bgpd.exabgp.sent);
* ``flush_events()``: hand out what the UPDATE reports read so far changed in the
  advertised routes (one RouteEvents per peer; the transport calls it once it has read
  the lines at hand, and any other event flushes them first, keeping the order);
* ``next_commands(now)``: the commands to write now (recorded as in flight from ``now``);
  ``ack_timed_out(now)``: True once when the oldest command waited past ``ack_timeout``.

``at`` is wall-clock time stamped on events and peer states; ``now`` is a monotonic clock
for the ack timeout. Outputs: the commands, ``converged``, ``accepted()``,
``advertised()``, ``peer_status()``, ``stats`` and the events given to ``emit``.

Incremental planning: after a plan, everything that differed is queued; until the next
plan only apply_changes() (its prefixes are remembered as touched), sending and refused
commands change either side, so the next plan compares only those prefixes
(``_plan_keys``) and costs the changes, not the whole set. Anything else (apply, mode,
neighbours, connection) plans everything.
"""

from __future__ import annotations

import collections
import ipaddress
import itertools
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bgpd.exabgp.advertised import AdvertisedRoutes
from bgpd.exabgp.flap import FlapPolicy, FlapState, held, on_down, release_at
from bgpd.exabgp.plan import (
    DEFAULT_BATCH,
    DEFAULT_WINDOW,
    Command,
    CommandKind,
    delta,
    drained,
    eor_command,
    plan,
    probe_command,
    reload_command,
    restrict,
    teardown_command,
)
from bgpd.exabgp.render import Neighbor
from bgpd.exabgp.sent import sent_update
from bgpd.logs import LogLimiter, log, log_limited
from bgpd.model import (
    DesiredRoutes,
    DriverEvent,
    IPNetwork,
    NodeName,
    PeerEvent,
    PeerName,
    PeerStatus,
    RouteAttributes,
    RouteEvents,
    RoutesAccepted,
    SessionState,
)

# The driver's logger: the core is the driver's state, its log events keep their names.
_logger = logging.getLogger("bgpd.exabgp.driver")

Routes = dict[PeerName, dict[IPNetwork, RouteAttributes]]

#: More time than this between two ack_timed_out() checks (the driver's sender checks
#: every 0.5 s) means the speaker itself did not run: see ack_timed_out().
STALL_GAP = 2.0

#: An ExaBGP with nothing in flight for this long gets a probe (plan.probe_command()):
#: a hung but idle ExaBGP is then noticed within this plus the ack timeout, instead of
#: when a router's hold timer drops the node.
PROBE_INTERVAL = 5.0

#: When a session is flapping and how long it is held down: bgpd.exabgp.flap.
FLAP_POLICY = FlapPolicy()
FLAP_DOWNS = FLAP_POLICY.downs
FLAP_WINDOW = FLAP_POLICY.window
#: What a flapping session most likely means, said in its log line: measured with two
#: speakers using one source address (the router keeps one session per address and
#: drops the other, again and again; with graceful restart ~20 times a second at BIRD).
FLAP_HINT = "another speaker with the same source address or router-id?"


class DriverMode(StrEnum):
    NORMAL = "normal"
    #: RFC 8326: every route re-announced with GRACEFUL_SHUTDOWN.
    DRAINING = "draining"
    #: Nothing announced (after a drain window, or on graceful stop).
    WITHDRAWN = "withdrawn"
    #: Stopping with the routes retained (SpeakerConfig onSigterm: retain): withdrawn from
    #: peers without graceful restart; kept for graceful-restart peers, which hold them as
    #: stale after ExaBGP's FIN until the next speaker replays them and sends End-of-RIB.
    RETAINED = "retained"


@dataclass(slots=True)
class DriverStats:
    """Counters read by metrics and status (mutable on purpose: the driver owns them)."""

    commands_sent: collections.Counter[str] = field(default_factory=collections.Counter)
    command_errors: int = 0
    ack_timeouts: int = 0
    helper_connections: int = 0
    events_dropped: int = 0
    #: Prefixes of the other family handed to a session's peer (never sent).
    wrong_family: int = 0
    last_error: str = ""


@dataclass(slots=True)
class _InFlight:
    command: Command
    sent_at: float


@dataclass(slots=True)
class _Session:
    state: SessionState = SessionState.DOWN
    since: float | None = None
    reason: str = ""


def _all_of_family(routes: Mapping[IPNetwork, object], family: int) -> bool:
    """Every prefix is of this IP version; a C-speed scan (the version property is
    Python), which matters at 10,000 routes per change."""
    cls = ipaddress.IPv4Network if family == 4 else ipaddress.IPv6Network
    return all(map(isinstance, routes, itertools.repeat(cls)))


def _copy(routes: DesiredRoutes) -> Routes:
    return {peer: dict(r) for peer, r in routes.items()}


def _versions(routes: Mapping[IPNetwork, object]) -> dict[int, int]:
    """How many prefixes of each IP version (C-speed when all are of one)."""
    for family in (4, 6):
        if _all_of_family(routes, family):
            return {family: len(routes), 10 - family: 0}
    counts = collections.Counter(p.version for p in routes)
    return {4: counts[4], 6: counts[6]}


def _ignore(event: DriverEvent) -> None:
    """The default ``emit``: nobody listens."""


#: The attributes an uncertain prefix counts as sent with (see DriverCore._reloaded):
#: a MED no configuration can give (0 to 2^32-1), so no desired route equals it. Never
#: written into a command: a plan withdraws such a prefix or announces the desired one.
_UNCERTAIN = RouteAttributes(med=-1)

#: Seconds between ExaBGP's answer to ``reload`` and the next command. ExaBGP answers at
#: once and reloads at the top of its next reactor turn; a command read in the same turn
#: as ``reload`` would still meet the old configuration (a new neighbour's announce would
#: be refused). A turn takes milliseconds when idle.
RELOAD_SETTLE = 0.1


class DriverCore:
    """See the module docstring: the driver's state machine, fed by its transport."""

    def __init__(
        self,
        *,
        node: NodeName,
        window: int = DEFAULT_WINDOW,
        batch: int = DEFAULT_BATCH,
        ack_timeout: float = 10.0,
        stall_gap: float = STALL_GAP,
        probe_interval: float | None = PROBE_INTERVAL,
        emit: Callable[[DriverEvent], None] = _ignore,
        reload_settle: float = RELOAD_SETTLE,
        flap_policy: FlapPolicy = FLAP_POLICY,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.node = node
        self.flap_policy = flap_policy
        #: A random number in [0, 1) per hold-down (its jitter); tests pass their own.
        self._rand = rand
        self.window = window
        self.batch = batch
        self.ack_timeout = ack_timeout
        self.stall_gap = stall_gap
        self.probe_interval = probe_interval
        self.emit = emit
        self.reload_settle = reload_settle
        self.stats = DriverStats()
        self.mode = DriverMode.NORMAL
        #: A helper connection is there to write commands to.
        self.connected = False
        #: ExaBGP accepted exactly the effective desired set and nothing is in flight
        #: (set by next_commands(), cleared by anything that may change what is wanted).
        self.converged = False
        self._neighbors: dict[PeerName, Neighbor] = {}
        self._desired: Routes = {}
        self._accepted: Routes = {}
        self._sent: Routes = {}
        #: Per peer, the accepted routes sent to the router in UPDATEs on its established
        #: session since it came up, not withdrawn since (ExaBGP's reports: on_event);
        #: emptied when the session goes down or ExaBGP restarts.
        self._advertised = AdvertisedRoutes()
        #: Per peer, what UPDATE reports changed in its advertised set since the last
        #: flush_events(), in order; the time of the last of them.
        self._reported: dict[PeerName, list[tuple[IPNetwork, RouteAttributes | None]]] = {}
        self._reported_at = 0.0
        self._queue: collections.deque[Command] = collections.deque()
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._sessions: dict[PeerName, _Session] = {}
        self._eor_due: set[PeerName] = set()
        self._dirty = True
        #: Prefixes per peer whose desired value changed since the last plan, when only
        #: those did (apply_changes); None when anything may have (apply, mode, neighbors,
        #: connection): the next plan then compares everything.
        self._touched: dict[PeerName, set[IPNetwork]] | None = None
        #: Prefixes whose command ExaBGP refused, since the last plan: planned again.
        self._retry: dict[PeerName, set[IPNetwork]] = {}
        #: The last plan compared everything (so the convergence check does too).
        self._planned_all = True
        #: Per peer, how many desired prefixes of each IP version (effective() needs
        #: to know whether a peer's set is all of its session's family).
        self._version_counts: dict[PeerName, dict[int, int]] = {}
        self._dead_reported = False
        #: When ack_timed_out() was last asked (the transport asks on every tick).
        self._last_check: float | None = None
        #: The last check found an answer overdue; the next one confirms it.
        self._overdue_seen = False
        #: When the last command was written (monotonic), for the idle probe.
        self._last_sent: float | None = None
        #: Per peer, its flap history and hold-down (bgpd.exabgp.flap).
        self._flaps: dict[PeerName, FlapState] = {}
        #: Session lines per peer: a flapping session must not flood the log.
        self._log_limiter = LogLimiter()
        #: One flapping warning per peer and FLAP_WINDOW.
        self._flap_limiter = LogLimiter(burst=1, period=FLAP_WINDOW)
        #: Peers forgotten by the reload not sent yet (None: no reload due).
        self._reload_due: set[PeerName] | None = None
        #: Peers forgotten by the reload in flight (None: none in flight).
        self._reload_sent: set[PeerName] | None = None
        #: Per peer, prefixes ExaBGP may or may not hold after a reload (see _reloaded);
        #: a prefix leaves the set when a command about it is answered.
        self._uncertain: dict[PeerName, set[IPNetwork]] = {}
        #: A reload was answered: hold commands for reload_settle from the next send.
        self._settle_due = False
        self._hold_until = 0.0
        #: Peers whose routes are held back (bgpd.bfd.gate): effective() gives them none.
        self._held: frozenset[PeerName] = frozenset()
        #: Peers whose session is to be torn down, with the Cease subcode, in order.
        self._teardown_due: dict[PeerName, int] = {}
        #: Peers whose established session this speaker tore down (BFD went down) and
        #: whose down has not been seen yet: that down is not a flap (see _set_state).
        self._own_teardowns: set[PeerName] = set()
        #: The desired set was given at least once (apply, apply_changes). ExaBGP may be
        #: started before the first decision (its configuration needs only the peers and
        #: the Node): until then no End-of-RIB is sent (a graceful-restart router would
        #: flush the routes it kept for us), and what is wanted is not known, so nothing
        #: counts as converged unless the mode wants nothing of the decision's.
        self.desired_known = False

    # ------------------------------------------------------------------ inputs: ExaBGP

    def configure(self, neighbors: Sequence[Neighbor]) -> None:
        """The sessions of the ExaBGP being started (call before reset() of that start)."""
        self._neighbors = {n.name: n for n in neighbors}
        self._sessions = {n.name: self._sessions.get(n.name, _Session()) for n in neighbors}
        self._mark_dirty()

    def reload(self, neighbors: Sequence[Neighbor], forgotten: AbstractSet[PeerName]) -> None:
        """The running ExaBGP re-reads its configuration file (already written) with these
        sessions: ``reload`` is sent first, alone; once answered, the ``forgotten`` peers
        (new to ExaBGP, or gone from it) hold nothing and everything is planned again.
        Peers kept or reset by ExaBGP keep what it accepted (bgpd.exabgp.reload)."""
        self._neighbors = {n.name: n for n in neighbors}
        self._sessions = {n.name: self._sessions.get(n.name, _Session()) for n in neighbors}
        self._eor_due &= set(self._neighbors)
        self._reload_due = (self._reload_due or set()) | set(forgotten)
        log(
            _logger,
            logging.INFO,
            "driver.reload_due",
            neighbors=len(neighbors),
            forgotten=",".join(sorted(forgotten)),
        )
        self._mark_dirty()

    def reset(self, at: float) -> None:
        """A new ExaBGP is starting: it holds no route and no session, and no helper of
        the old one is connected."""
        self.connected = False
        # It reads the configuration file as it is now: no reload is owed.
        self._reload_due, self._reload_sent, self._settle_due = None, None, False
        self._uncertain = {}
        self._sent = {}
        # A new ExaBGP has no session to tear down.
        self._teardown_due.clear()
        # Nothing is advertised by a new ExaBGP: the subscribers are told (the route
        # topics cleared), as for every other end of an advertisement.
        for peer in sorted(self._advertised.peers()):
            self._advertise(peer, self._advertised.drop(peer), at)
        held = sorted(p for p, r in self._accepted.items() if r)
        self._accepted = {}
        for peer in held:
            self._emit(RoutesAccepted(self.node, peer, at))
        self._queue.clear()
        self._in_flight.clear()
        self._eor_due.clear()
        self._dead_reported = False
        self._overdue_seen = False
        for name, s in self._sessions.items():
            if s.state is not SessionState.DOWN:
                self._set_state(name, SessionState.DOWN, "exabgp restarted", at)
        self._mark_dirty()

    def connect(self) -> None:
        """A helper connected. Whatever was in flight on another connection is unknown:
        plan again from what ExaBGP accepted (announces and withdraws are idempotent
        in ExaBGP)."""
        self.connected = True
        self._in_flight.clear()
        self._queue.clear()
        if self._reload_sent is not None:
            # Its answer is lost with the connection: reloading again is harmless.
            self._reload_due = (self._reload_due or set()) | self._reload_sent
            self._reload_sent = None
        self._sent = _copy(self._accepted)
        self._sent_with_uncertain()
        self._mark_dirty()

    def disconnect(self) -> None:
        """The helper connection closed: its commands in flight will never be answered."""
        self.connected = False
        self._in_flight.clear()

    def on_ack(self, done: bool, at: float) -> None:
        """ExaBGP answered the oldest command in flight (acks come in order)."""
        if not self._in_flight:
            log(_logger, logging.WARNING, "driver.unexpected_ack", done=done)
            return
        self._overdue_seen = False  # an answer: ExaBGP is alive
        cmd = self._in_flight.popleft().command
        if cmd.kind is CommandKind.RELOAD:
            self._reloaded(done, at)
            return
        if cmd.kind is CommandKind.PROBE:
            return
        if cmd.kind is CommandKind.TEARDOWN:
            log(_logger, logging.INFO, "driver.teardown", peer=cmd.peer, done=done)
            return
        if done:
            if cmd.kind is CommandKind.EOR and cmd.peer is not None:
                self._eor_due.discard(cmd.peer)
                self._log_eor(True, cmd.peer, at)
            if cmd.peer is not None:
                self._accepted_changes(cmd, at)
        elif cmd.kind is CommandKind.EOR and cmd.peer is not None:
            # Not established any more: the next "up" event asks for it again.
            self._eor_due.discard(cmd.peer)
            self._log_eor(False, cmd.peer, at)
        else:
            # Its routes fall back to what ExaBGP accepted before and are planned
            # again on the next apply (not at once: a deterministic error would loop).
            self.stats.command_errors += 1
            self.stats.last_error = cmd.text
            log(_logger, logging.ERROR, "driver.command_error", command=cmd.text)
            if cmd.peer is not None:
                sent = self._sent.setdefault(cmd.peer, {})
                have = self._accepted.get(cmd.peer, {})
                self._retry.setdefault(cmd.peer, set()).update(p for p, _ in cmd.changes)
                unsure = self._uncertain.get(cmd.peer, set())
                for prefix, _ in cmd.changes:
                    if prefix in have:
                        sent[prefix] = have[prefix]
                    elif prefix in unsure:
                        sent[prefix] = _UNCERTAIN
                    else:
                        sent.pop(prefix, None)

    def _accepted_changes(self, cmd: Command, at: float) -> None:
        """ExaBGP answered ``done`` to this route command: its changes are accepted, in
        one pass per answer (a first sync of 30,000 routes is 300 answers; per route
        work here is the speaker's share of the time to the last route at the peer).
        The subscribers get one RoutesAccepted if it changed what ExaBGP holds, and one
        RouteEvents of what it changed in the advertised set (a route whose prefix is on
        the wire: a withdraw, or new attributes for an advertised prefix)."""
        peer, changes = cmd.peer, cmd.changes
        assert peer is not None
        if peer in self._uncertain:
            self._uncertain[peer].difference_update(p for p, _ in changes)
        acked = self._accepted.setdefault(peer, {})
        self._advertise(peer, self._advertised.accept_all(peer, changes), at)
        held = False
        for prefix, attrs in changes:
            if attrs is not None:
                acked[prefix] = attrs
                held = True
            elif acked.pop(prefix, None) is not None:
                # A withdraw changes only the prefixes ExaBGP held.
                held = True
        if held:
            self._emit(RoutesAccepted(self.node, peer, at))

    def _advertise(
        self,
        peer: PeerName,
        changes: Sequence[tuple[IPNetwork, RouteAttributes | None]],
        at: float,
        *,
        reported: bool = False,
    ) -> None:
        """The one place route events come from: what a rule of AdvertisedRoutes
        (accept_all, sent, down, forget, drop) changed in the peer's advertised set, as
        one RouteEvents (none if nothing changed). So MQTT's route topics say what
        ``advertised()`` and the metric say, change by change. The changes of UPDATE
        reports (``reported``) are held and go out together (flush_events())."""
        if not changes:
            return
        if reported:
            self._reported.setdefault(peer, []).extend(changes)
            self._reported_at = at
            return
        self._emit(RouteEvents(self.node, peer, tuple(changes), at))

    def _emit(self, event: DriverEvent) -> None:
        """Every event goes out here, after the UPDATE reports' changes held so far
        (flush_events()): the subscribers see the changes in the order they happened."""
        if self._reported:
            self.flush_events()
        self.emit(event)

    @property
    def events_held(self) -> bool:
        """Changes from UPDATE reports wait for flush_events()."""
        return bool(self._reported)

    def flush_events(self) -> None:
        """Hand out the advertised changes of the UPDATE reports read since the last
        flush, one RouteEvents per peer. The transport calls it once it has read the
        lines at hand: ExaBGP sends each IPv6 /128 in an UPDATE of its own (one report
        line each), so one event per report would be one per route."""
        reported, self._reported = self._reported, {}
        for peer, changes in reported.items():
            self.emit(RouteEvents(self.node, peer, tuple(changes), self._reported_at))

    def _reloaded(self, done: bool, at: float) -> None:
        """ExaBGP answered ``reload`` (nothing else was in flight: it goes alone) and
        reloads at the top of its next turn, from the file as it is then: the newest one,
        possibly newer than the one this reload was sent for. So: a peer no longer
        configured holds nothing; a forgotten peer that is configured (new to ExaBGP, or
        re-keyed) may hold nothing or, had a newer file put its old neighbour back, what
        it held: its prefixes become uncertain (announced again if wanted, withdrawn if
        not). The same holds for the peers a reload not sent yet forgets: the newest file,
        which that reload is for, may be the one ExaBGP just loaded (found by the reload
        state machine: a peer re-keyed by a second reconfiguration while the first reload
        was in flight was reported accepted, and ExaBGP held nothing for it). Everything
        is planned again after the settle."""
        forgotten, self._reload_sent = self._reload_sent or set(), None
        if not done:
            # ExaBGP 5.0.15 always answers done; should one refuse, ask again.
            log(_logger, logging.ERROR, "driver.reload_refused")
            self._reload_due = (self._reload_due or set()) | forgotten
            return
        maybe = forgotten | (self._reload_due or set())
        for peer in sorted(
            set(self._accepted) | set(self._uncertain) | self._advertised.peers() | maybe
        ):
            if peer not in self._neighbors:
                self._uncertain.pop(peer, None)
                self._advertise(peer, self._advertised.drop(peer), at)
                self._forget(peer, at)
            elif peer in maybe:
                held = self._forget(peer, at)
                self._uncertain.setdefault(peer, set()).update(held)
        self._sent_with_uncertain()
        self._settle_due = True
        log(_logger, logging.INFO, "driver.reloaded", forgotten=",".join(sorted(forgotten)))
        self._mark_dirty()

    def _forget(self, peer: PeerName, at: float) -> list[IPNetwork]:
        """This peer's routes are no longer known to be in ExaBGP's adj-rib-out (its
        session closed, or is a new one): returns the prefixes it had accepted."""
        self._sent.pop(peer, None)
        held = list(self._accepted.pop(peer, {}))
        self._advertise(peer, self._advertised.forget(peer), at)
        if held:
            self._emit(RoutesAccepted(self.node, peer, at))
        return held

    def _sent_with_uncertain(self) -> None:
        """Uncertain prefixes count as sent with attributes nothing equals (_UNCERTAIN):
        the plan announces them again if wanted and withdraws them if not."""
        for peer, prefixes in self._uncertain.items():
            sent = self._sent.setdefault(peer, {})
            for p in prefixes:
                sent.setdefault(p, _UNCERTAIN)

    def _log_eor(self, sent: bool, peer: PeerName, at: float) -> None:
        """One End-of-RIB line per session that came up: limited per peer like the
        session lines (a session replaced ~20 times a second logged as many)."""
        limiter, key = self._log_limiter, f"eor {peer}"
        if sent:
            log_limited(limiter, key, at, _logger, logging.INFO, "driver.eor_sent", peer=peer)
        else:
            log_limited(limiter, key, at, _logger, logging.INFO, "driver.eor_refused", peer=peer)

    def on_event(self, doc: Mapping[str, Any], at: float) -> None:
        """One of ExaBGP's JSON messages: session states matter (an established
        graceful-restart session is due an End-of-RIB once its routes are accepted), and so do the
        UPDATEs ExaBGP reports it sent (what is advertised)."""
        kind = doc.get("type")
        if kind == "update":
            self._on_sent(doc, at)
            return
        if kind != "state":
            return
        name = self._peer_of(doc)
        if name is None:
            return
        neighbor = doc["neighbor"]
        try:
            state = SessionState(str(neighbor.get("state", "")))
        except ValueError:
            return
        self._set_state(name, state, str(neighbor.get("reason", "")), at)
        if state is SessionState.UP and self._neighbors[name].graceful_restart:
            self._eor_due.add(name)

    def _on_sent(self, doc: Mapping[str, Any], at: float) -> None:
        """An UPDATE ExaBGP reports it wrote to a router (bgpd.exabgp.sent): its
        prefixes are on the wire, or withdrawn from it. Only an established session
        sends UPDATEs, and its going down empties the set (_set_state)."""
        update = sent_update(doc)
        if update is None:
            return
        name = self._peer_of(doc)
        if name is None:
            return
        changes = self._advertised.sent(name, update.announced, update.withdrawn)
        self._advertise(name, changes, at, reported=True)

    def _peer_of(self, doc: Mapping[str, Any]) -> PeerName | None:
        neighbor = doc.get("neighbor")
        if not isinstance(neighbor, dict):
            return None
        address = neighbor.get("address", {})
        peer_ip, local_ip = str(address.get("peer", "")), str(address.get("local", ""))
        for name, n in self._neighbors.items():
            if str(n.peer.peer_address) == peer_ip and (
                not local_ip or local_ip == "None" or str(n.local_address) == local_ip
            ):
                return name
        return None

    def _set_state(self, name: PeerName, state: SessionState, reason: str, at: float) -> None:
        s = self._sessions.setdefault(name, _Session())
        if s.state is state and not reason:
            return
        was = s.state
        s.state, s.since = state, at
        if state is not SessionState.UP:
            # Not established: the router dropped what it was sent (RFC 4271 9.2: a
            # closed session's routes are removed; graceful restart keeps them stale
            # only until End-of-RIB). ExaBGP re-sends them after re-establishment.
            self._advertise(name, self._advertised.down(name), at)
        if reason or state is not SessionState.UP:
            s.reason = reason
        limiter = self._log_limiter
        log_limited(
            limiter,
            f"peer {name}",
            at,
            _logger,
            logging.INFO,
            f"peer.{state}",
            peer=name,
            reason=reason,
        )
        if state is SessionState.UP:
            self._own_teardowns.discard(name)
        if (
            state is SessionState.DOWN
            and was is not SessionState.DOWN
            # The flap rule is about two speakers taking turns; a session this speaker
            # closed itself because BFD went down is not one (issue 17).
            and not self._own_teardown(name)
        ):
            history = self._flaps.get(name, FlapState())
            verdict = on_down(self.flap_policy, history, at, self._rand())
            self._flaps[name] = verdict.state
            if verdict.hold_down is not None:
                log_limited(
                    self._flap_limiter,
                    f"flapping {name}",
                    at,
                    _logger,
                    logging.WARNING,
                    "peer.flapping",
                    peer=name,
                    downs=self.flap_policy.downs,
                    seconds=self.flap_policy.window,
                    hold_down=round(verdict.hold_down, 1),
                    hint=f"session to {name} flapping: {FLAP_HINT}",
                )
        self._emit(
            PeerEvent(
                self.node,
                name,
                state,
                reason,
                at,
                desired=self._desired_count(name),
                accepted=len(self._accepted.get(name, {})),
                advertised=self._advertised_count(name),
            )
        )

    # ------------------------------------------------------------------ inputs: desired

    def apply(self, desired: DesiredRoutes) -> None:
        """Take the whole desired route set."""
        self.desired_known = True
        self._desired = _copy(desired)
        self._version_counts = {peer: _versions(r) for peer, r in self._desired.items()}
        for peer, routes in self._desired.items():
            n = self._neighbors.get(peer)
            if n is not None and self._version_counts[peer][10 - n.peer.family]:
                self._wrong_family(peer, [p for p in routes if p.version != n.peer.family])
        self._unknown_peers(self._desired)
        self._mark_dirty()

    def apply_changes(
        self, desired: DesiredRoutes, changed: Mapping[PeerName, AbstractSet[IPNetwork]]
    ) -> None:
        """apply(desired) when only the prefixes in ``changed`` may differ from the
        previous apply: updates the held set and plans only those prefixes (and what is
        still queued or was refused), so one change costs about one prefix at any size.
        ``desired`` is read now, not kept (the caller may change it afterwards)."""
        self.desired_known = True
        for peer, prefixes in changed.items():
            want = desired.get(peer, {})
            mine = self._desired.setdefault(peer, {})
            counts = self._version_counts.setdefault(peer, {4: 0, 6: 0})
            for p in prefixes:
                attrs = want.get(p)
                if attrs is not None:
                    if p not in mine:
                        counts[p.version] += 1
                    mine[p] = attrs
                elif mine.pop(p, None) is not None:
                    counts[p.version] -= 1
            if not mine:
                del self._desired[peer]
                del self._version_counts[peer]
            n = self._neighbors.get(peer)
            if n is not None:
                wrong = [p for p in prefixes if p in mine and p.version != n.peer.family]
                if wrong:
                    self._wrong_family(peer, wrong)
        self._unknown_peers(changed)
        if self._touched is not None:
            for peer, prefixes in changed.items():
                self._touched.setdefault(peer, set()).update(prefixes)
        self._dirty = True
        self.converged = False

    def set_mode(self, mode: DriverMode) -> None:
        if mode is not self.mode:
            log(_logger, logging.INFO, "driver.mode", mode=str(mode))
            self.mode = mode
            self._mark_dirty()

    def set_held(self, peers: AbstractSet[PeerName]) -> None:
        """Hold back every route from these peers (bgpd.bfd.gate: their BFD session is not
        Up under bfdStrict): what ExaBGP holds for them is withdrawn, and nothing is sent
        until they are released. Their desired routes are kept (held_routes())."""
        held = frozenset(peers)
        if held != self._held:
            log(_logger, logging.INFO, "driver.held", peers=",".join(sorted(held)))
            self._held = held
            self._mark_dirty()

    def teardown(self, peer: PeerName, subcode: int) -> None:
        """Close this peer's BGP session now (its BFD session went down). Sent before any
        route command not yet written, once the commands in flight are answered (acks
        are matched in order); a peer ExaBGP does not have is ignored."""
        if peer in self._neighbors:
            self._teardown_due.setdefault(peer, subcode)
            self._dirty = True

    def _own_teardown(self, peer: PeerName) -> bool:
        """This down is the one the speaker's own teardown caused (counted once)."""
        if peer in self._own_teardowns:
            self._own_teardowns.discard(peer)
            return True
        return False

    def held_routes(self) -> dict[PeerName, int]:
        """Per held peer, how many desired routes are held back from it (0 included)."""
        return {p: len(self._desired.get(p, {})) for p in sorted(self._held)}

    def _wrong_family(self, peer: PeerName, wrong: Sequence[IPNetwork]) -> None:
        self.stats.wrong_family += len(wrong)
        log(
            _logger,
            logging.ERROR,
            "driver.wrong_family",
            peer=peer,
            prefixes=",".join(str(p) for p in wrong[:5]),
            count=len(wrong),
        )

    def _unknown_peers(self, peers: Mapping[PeerName, object]) -> None:
        unknown = sorted(set(peers) - set(self._neighbors))
        if unknown:
            log(_logger, logging.DEBUG, "driver.unknown_peers", peers=",".join(unknown))

    def _mark_dirty(self) -> None:
        """Anything may have changed: the next plan compares every prefix."""
        self._touched = None
        self._dirty = True
        self.converged = False

    # ------------------------------------------------------------------ outputs

    def effective(self) -> Routes:
        """What ExaBGP should hold now: the desired set of configured peers, transformed
        by the mode."""
        base: Routes = {}
        for peer, routes in self._desired.items():
            n = self._neighbors.get(peer)
            if n is None or peer in self._held:
                continue
            # One family per session: an IPv6 prefix sent on an IPv4 session in an
            # `announce attributes ... nlri` makes ExaBGP send an UPDATE the router
            # rejects, resetting the session (seen with GoBGP). Never send one.
            # Shared, not copied, when all are of the family (the usual case): callers
            # only read it.
            family = n.peer.family
            base[peer] = (
                routes
                if not self._version_counts[peer][10 - family]
                else {p: a for p, a in routes.items() if p.version == family}
            )
        if self.mode is DriverMode.WITHDRAWN:
            return {}
        if self.mode is DriverMode.RETAINED:
            return {p: r for p, r in base.items() if self._neighbors[p].graceful_restart}
        if self.mode is DriverMode.DRAINING:
            ibgp = [n.name for n in self._neighbors.values() if n.peer.is_ibgp]
            return drained(base, ibgp)
        return base

    def ack_timed_out(self, now: float) -> bool:
        """True once (until the next reset) when the oldest command in flight waited more
        than ``ack_timeout``: ExaBGP is hung, and the caller has it killed (the restart
        replays everything). The transport asks on every tick of its sender.

        Answers that are already waiting to be read are not a hang: after the speaker
        itself stalled (SIGSTOP, a long GC pause, an overloaded node), the first tick
        comes before its reader has read the acks ExaBGP wrote meanwhile. Two rules keep
        a healthy ExaBGP alive then (a kill flaps every route):

        * time the caller was not looking (more than ``stall_gap`` between two checks)
          is not ExaBGP's: the commands in flight get it back;
        * an answer found overdue is judged at the next check, not this one, so the
          reader gets at least one turn to deliver what is pending (any answer clears
          the suspicion)."""
        last, self._last_check = self._last_check, now
        if last is not None and now - last > self.stall_gap:
            gap = now - last
            for item in self._in_flight:
                item.sent_at += gap
            self._overdue_seen = False
            if self._in_flight:
                log(_logger, logging.WARNING, "driver.stalled", seconds=round(gap, 3))
            return False
        if not self._overdue(now) or self._dead_reported:
            self._overdue_seen = False
            return False
        if not self._overdue_seen:
            self._overdue_seen = True
            return False
        self._dead_reported = True
        self.stats.ack_timeouts += 1
        log(
            _logger,
            logging.ERROR,
            "driver.ack_timeout",
            command=self._in_flight[0].command.text[:200],
            seconds=self.ack_timeout,
        )
        return True

    def unanswered_for(self, now: float) -> float:
        """Seconds the oldest command in flight has waited for ExaBGP's answer (0: none
        in flight): the BFD watchdog's view of a hung ExaBGP (bgpd.bfd.watchdog)."""
        return now - self._in_flight[0].sent_at if self._in_flight else 0.0

    def answer_overdue(self, now: float) -> bool:
        """ExaBGP owes an answer older than ``ack_timeout`` (a route command or the idle
        probe): it is hung, whether or not the restart was asked for yet."""
        return self._overdue(now)

    def hold_remaining(self, now: float) -> float:
        """Seconds until commands may follow an answered reload (0: none held)."""
        if self._settle_due:
            return self.reload_settle
        return max(0.0, self._hold_until - now)

    def _overdue(self, now: float) -> bool:
        return bool(self._in_flight) and now - self._in_flight[0].sent_at > self.ack_timeout

    def next_commands(self, now: float) -> list[Command]:
        """The commands to write now, within the window: at most ``window`` in flight, and
        a synchronous command (answered at once by ExaBGP, overtaking queued ones) only
        when nothing else is in flight, with nothing after it until its answer (acks are
        matched in order). Nothing while disconnected or while an answer is overdue."""
        out: list[Command] = []
        if not self.connected or self._overdue(now):
            return out
        if self._reload_due is not None or self._reload_sent is not None:
            if not self._in_flight and self._reload_due is not None:
                cmd = reload_command()
                self._reload_sent, self._reload_due = self._reload_due, None
                self._record_sent(cmd, now)
                out.append(cmd)
            return out
        if self._settle_due:
            self._settle_due = False
            self._hold_until = now + self.reload_settle
        if now < self._hold_until:
            return out
        if self._teardown_due:
            # Alone, like reload: synchronous, so only with nothing else in flight.
            if not self._in_flight:
                peer = next(iter(self._teardown_due))
                n = self._neighbors.get(peer)
                subcode = self._teardown_due.pop(peer)
                if n is not None:
                    if self._sessions.get(peer, _Session()).state is not SessionState.DOWN:
                        self._own_teardowns.add(peer)
                    cmd = teardown_command(peer, n.selector, subcode)
                    self._record_sent(cmd, now)
                    out.append(cmd)
                    return out
            else:
                return out
        eff: Routes | None = None
        if self._dirty:
            eff = self.effective()
            selectors = {name: n.selector for name, n in self._neighbors.items()}
            keys = self._plan_keys()
            self._planned_all = keys is None
            if keys is None:
                commands = plan(self._sent, eff, selectors, batch=self.batch)
            else:
                # Only these prefixes can differ (see _plan_keys): the same commands as
                # the plan of everything, at the cost of the changes.
                sent, want = restrict(self._sent, keys), restrict(eff, keys)
                commands = plan(sent, want, selectors, batch=self.batch)
            self._queue = collections.deque(commands)
            self._touched, self._retry = {}, {}
            self._dirty = False
        queue, in_flight = self._queue, self._in_flight
        while queue and len(in_flight) < self.window:
            if in_flight and in_flight[-1].command.sync:
                return out
            cmd = queue[0]
            if cmd.sync and in_flight:
                return out
            queue.popleft()
            self._record_sent(cmd, now)
            out.append(cmd)
        if not queue and not in_flight:
            eff = eff if eff is not None else self.effective()
            eors = self._eor_ready(eff)
            if eors:
                # One at a time: each is synchronous; the rest wait in the queue.
                queue.extend(eors)
                cmd = queue.popleft()
                self._record_sent(cmd, now)
                out.append(cmd)
                return out
            if self._awaits_decision():
                self.converged = False
            elif self._planned_all:
                self.converged = {p: r for p, r in self._accepted.items() if r} == {
                    p: r for p, r in eff.items() if r
                }
            else:
                # Since a plan of only the changes, ExaBGP holds what was sent, and that
                # is what is wanted, except where a command was refused.
                self.converged = all(
                    self._accepted.get(peer, {}).get(p) == eff.get(peer, {}).get(p)
                    for peer, prefixes in self._retry.items()
                    for p in prefixes
                )
            if self.probe_interval is not None and (
                self._last_sent is None or now - self._last_sent >= self.probe_interval
            ):
                # Idle: ask ExaBGP for an answer; none within ack_timeout is a hang.
                probe = probe_command()
                self._record_sent(probe, now)
                out.append(probe)
        return out

    def _record_sent(self, cmd: Command, now: float) -> None:
        self._last_sent = now
        self.stats.commands_sent[cmd.kind.value] += 1
        self._in_flight.append(_InFlight(cmd, now))
        if cmd.peer is not None:
            sent = self._sent.setdefault(cmd.peer, {})
            for prefix, attrs in cmd.changes:
                if attrs is None:
                    sent.pop(prefix, None)
                else:
                    sent[prefix] = attrs

    def _awaits_decision(self) -> bool:
        """What is wanted depends on a decision not made yet. Not in the stop's modes:
        WITHDRAWN wants nothing, and RETAINED keeps what ExaBGP holds for graceful-restart
        peers (nothing before a decision), so a stop before the first decision is not held
        up waiting for one."""
        return not self.desired_known and self.mode in (DriverMode.NORMAL, DriverMode.DRAINING)

    def _eor_ready(self, eff: Routes) -> list[Command]:
        if not self.desired_known:
            # Not before the first decision: see desired_known.
            return []
        out = []
        for name in sorted(self._eor_due):
            n = self._neighbors.get(name)
            if n is None:
                self._eor_due.discard(name)
                continue
            if name in self._held:
                # Not before its routes: an End-of-RIB with none would have a router in
                # graceful restart flush the routes it kept for us (RFC 4724), e.g. while
                # a restarted speaker waits for BFD (bgpd.bfd.gate). It follows them.
                continue
            if self._accepted.get(name, {}) == eff.get(name, {}):
                out.append(eor_command(name, n.selector, n.family))
        return out

    def _plan_keys(self) -> dict[PeerName, set[IPNetwork]] | None:
        """The prefixes that can differ between what ExaBGP was sent and what is wanted,
        or None when any can. After a plan, everything that differed is queued; since,
        only apply_changes() changed the wanted set (its prefixes are in _touched) and
        only sending or a refused command changed the sent one: so the difference lies
        within the touched, queued and refused prefixes."""
        if self._touched is None:
            return None
        keys = {peer: set(prefixes) for peer, prefixes in self._touched.items()}
        for cmd in self._queue:
            if cmd.peer is not None and cmd.changes:
                keys.setdefault(cmd.peer, set()).update(p for p, _ in cmd.changes)
        for peer, prefixes in self._retry.items():
            keys.setdefault(peer, set()).update(prefixes)
        return keys

    # ------------------------------------------------------------------ observers

    @property
    def in_flight(self) -> int:
        """Commands written and not answered yet."""
        return len(self._in_flight)

    def accepted(self) -> DesiredRoutes:
        """The routes ExaBGP accepted (answered ``done``), per peer: in its adj-rib-out,
        whether or not the session is up."""
        return {p: dict(r) for p, r in self._accepted.items() if r}

    def advertised(self) -> DesiredRoutes:
        """The accepted routes a router was sent: prefixes announced in UPDATEs on the
        peer's established session since it came up and not withdrawn since (empty while
        it is down). With the accepted attributes, and a subset of accepted() by
        definition: a prefix whose withdraw ExaBGP accepted is no longer counted, though
        its withdrawing UPDATE may leave a few milliseconds later."""
        return self._advertised.routes()

    def _desired_count(self, peer: PeerName) -> int:
        """len(effective()[peer]) without building it: the peer's desired prefixes of its
        session's family, none in WITHDRAWN mode, nor in RETAINED for a peer without
        graceful restart (DRAINING changes attributes, not prefixes)."""
        n = self._neighbors.get(peer)
        if n is None or self.mode is DriverMode.WITHDRAWN:
            return 0
        if self.mode is DriverMode.RETAINED and not n.graceful_restart:
            return 0
        return self._version_counts.get(peer, {}).get(n.peer.family, 0)

    def _advertised_count(self, peer: PeerName) -> int:
        return self._advertised.count(peer)

    def held_down(self, now: float) -> set[PeerName]:
        """The sessions being held down at ``now`` (flapping: bgpd.exabgp.flap)."""
        return {name for name, f in self._flaps.items() if held(f, now)}

    def hold_down_ends(self, now: float) -> float | None:
        """When the next hold-down held at ``now`` ends (None: none is held)."""
        return release_at(self._flaps.values(), now)

    def neighbors(self) -> Mapping[PeerName, Neighbor]:
        return dict(self._neighbors)

    def peer_status(self) -> Mapping[PeerName, PeerStatus]:
        eff = self.effective()
        # What ExaBGP accepted differs from what is wanted only where a plan may
        # (_plan_keys) or a command is in flight: count there, not over every route.
        keys = self._plan_keys()
        if keys is not None:
            for item in self._in_flight:
                if item.command.peer is not None and item.command.changes:
                    ps = keys.setdefault(item.command.peer, set())
                    ps.update(p for p, _ in item.command.changes)
        out: dict[PeerName, PeerStatus] = {}
        for name, n in sorted(self._neighbors.items()):
            s = self._sessions.get(name, _Session())
            have = self._accepted.get(name, {})
            want = eff.get(name, {})
            if keys is None:
                todo, gone = delta(have, want)
            else:
                ks = {name: keys.get(name, set())}
                todo, gone = delta(
                    restrict({name: have}, ks).get(name, {}),
                    restrict({name: want}, ks).get(name, {}),
                )
            out[name] = PeerStatus(
                peer=name,
                address=n.peer.peer_address,
                state=s.state,
                since=s.since,
                reason=s.reason,
                accepted=len(have),
                pending=len(todo) + len(gone),
                desired=self._desired_count(name),
                advertised=self._advertised_count(name),
            )
        return out
