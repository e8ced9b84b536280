"""What the routers were sent: DriverCore's ``advertised`` set, fed by the UPDATEs ExaBGP
reports it wrote (bgpd.exabgp.sent), beside ``accepted`` (ExaBGP answered ``done``) and
``desired``; tables of ExaBGP's report lines, a scenario of a session's life, and a
Hypothesis state machine with a simulated ExaBGP that writes UPDATEs to its established
sessions: advertised is always within accepted, empty for a session that is down, and
equal to accepted once a re-established session was sent everything again; the route
events (MQTT's route topics) replayed give advertised() after every step, each one a
change."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_driver_core import (
    BY_NAME,
    GR,
    IBGP,
    NEIGHBORS,
    PLAIN,
    TAGGED,
    V6,
    answer_all,
    core,
    hold,
    net,
    state_doc,
)

from bgpd.exabgp.core import DriverCore
from bgpd.exabgp.driver import repair_event
from bgpd.exabgp.plan import Command, CommandKind
from bgpd.exabgp.sent import SentUpdate, sent_update
from bgpd.model import (
    DriverEvent,
    IPNetwork,
    MQTTConfig,
    NodeName,
    PeerEvent,
    PeerName,
    RouteAttributes,
    RouteChange,
    RouteEvent,
    RouteEvents,
    RoutesAccepted,
    SessionState,
)
from bgpd.mqtt import MQTTPublisher, event_payload, route_topic

#: The node of test_driver_core.core().
NODE = NodeName("n1")


def update_doc(
    peer: PeerName,
    announced: Sequence[IPNetwork] = (),
    withdrawn: Sequence[IPNetwork] = (),
    *,
    compact: bool = False,
    direction: str = "send",
) -> dict[str, object]:
    """An UPDATE report in ExaBGP 5.0.15's JSON shape (reactor/api/response/json.py)."""
    n = BY_NAME[peer]
    family = "ipv4 unicast" if n.peer.family == 4 else "ipv6 unicast"

    def nlri(p: IPNetwork) -> object:
        return str(p) if compact else {"nlri": str(p)}

    update: dict[str, object] = {"attribute": {"origin": "igp"}}
    if announced:
        update["announce"] = {family: {str(n.local_address): [nlri(p) for p in announced]}}
    if withdrawn:
        update["withdraw"] = {family: [nlri(p) for p in withdrawn]}
    return {
        "type": "update",
        "neighbor": {
            "address": {"local": str(n.local_address), "peer": str(n.peer.peer_address)},
            "asn": {"local": 65000, "peer": 65001},
            "direction": direction,
            "message": {"update": update},
        },
    }


# What ExaBGP 5.0.15 (it calls itself 5.0.0) wrote to the helper for one UPDATE to the
# lab's BIRD router (api send { parsed; update; }), captured by
# bench/bench_sent_updates.py --routes 3 (its "first UPDATE report" line).
CAPTURED = (
    '{ "exabgp": "5.0.0", "time": 1796175261.8989468, "host" : "vm", "pid" : 32015, '
    '"ppid" : 31818, "counter": 4, "type": "update", "neighbor": { "address": { "local": '
    '"172.31.250.11", "peer": "172.31.250.1" }, "asn": { "local": 64513, "peer": 64512 }, '
    '"router-id": "172.31.250.11" , "direction": "send", "message": { "update": { '
    '"attribute": { "origin": "igp", "as-path": {"0": {"element": "as-sequence", "value": '
    '[64513]}} }, "announce": { "ipv4 unicast": { "172.31.250.11": [ { "nlri": '
    '"10.99.0.1/32" }, { "nlri": "10.99.0.2/32" }, { "nlri": "10.99.0.3/32" } ] } } } } } }'
)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            json.loads(repair_event(CAPTURED)),
            SentUpdate(
                "172.31.250.1",
                "172.31.250.11",
                ("10.99.0.1/32", "10.99.0.2/32", "10.99.0.3/32"),
                (),
            ),
            id="captured-announce",
        ),
        pytest.param(
            update_doc(IBGP, [net("10.0.0.1/32")], [net("10.0.0.2/32")], compact=True),
            SentUpdate("192.0.2.2", "192.0.2.10", ("10.0.0.1/32",), ("10.0.0.2/32",)),
            id="compact-announce-and-withdraw",
        ),
        pytest.param(
            {
                "type": "update",
                "neighbor": {
                    "address": {"peer": "2001:db8::1", "local": "2001:db8::10"},
                    "direction": "send",
                    "message": {
                        "update": {
                            "announce": {"ipv6 unicast": {"x": ["2001:DB8:0:0::5/128"]}},
                            "withdraw": {"ipv6 unicast": [{"nlri": "::ffff:1.2.3.4/128"}]},
                        }
                    },
                },
            },
            SentUpdate(
                "2001:db8::1",
                "2001:db8::10",
                (str(net("2001:db8::5/128")),),
                (str(net("::ffff:1.2.3.4/128")),),
            ),
            id="ipv6-text-normalised-as-python-writes-it",
        ),
        pytest.param(
            update_doc(IBGP, [net("10.0.0.1/32")], direction="receive"), None, id="received"
        ),
        pytest.param(state_doc(IBGP, SessionState.UP), None, id="a-state-event"),
        pytest.param(
            {
                "type": "update",
                "neighbor": {
                    "address": {"peer": "192.0.2.2"},
                    "direction": "send",
                    "message": {"eor": {"afi": "ipv4", "safi": "unicast"}},
                },
            },
            None,
            id="end-of-rib",
        ),
        pytest.param(
            {
                "type": "update",
                "neighbor": {
                    "address": "odd",
                    "direction": "send",
                    "message": {
                        "update": {
                            "announce": {"ipv6 unicast": {"x": [{"nlri": "not:a:prefix"}, 7]}},
                            "withdraw": {"ipv4 unicast": "odd"},
                        }
                    },
                },
            },
            SentUpdate("", "", (), ()),
            id="malformed-items-skipped",
        ),
    ],
)
def test_sent_update_reads_the_prefixes(
    doc: dict[str, object], expected: SentUpdate | None
) -> None:
    assert sent_update(doc) == expected


def test_a_session_life_desired_accepted_advertised() -> None:
    """Accepted while the session is down (ExaBGP answers done), advertised only once
    sent on the established session; down empties it; re-sent after re-establishment."""
    c = core()
    routes = {GR: {net("10.0.0.1/32"): PLAIN, net("10.0.0.2/32"): TAGGED}}
    c.apply(routes)
    answer_all(c)
    counts = c.peer_status()[GR]
    assert (counts.desired, counts.accepted, counts.advertised) == (2, 2, 0)
    assert c.advertised() == {}

    c.on_event(state_doc(GR, SessionState.UP), 1.0)
    c.on_event(update_doc(GR, [net("10.0.0.1/32")]), 1.0)
    assert c.advertised() == {GR: {net("10.0.0.1/32"): PLAIN}}
    c.on_event(update_doc(GR, [net("10.0.0.2/32")]), 1.0)
    assert c.advertised() == routes
    assert c.peer_status()[GR].advertised == 2

    c.on_event(state_doc(GR, SessionState.DOWN), 2.0)
    counts = c.peer_status()[GR]
    assert (counts.desired, counts.accepted, counts.advertised) == (2, 2, 0)

    c.on_event(state_doc(GR, SessionState.UP), 3.0)
    assert c.peer_status()[GR].advertised == 0
    c.on_event(update_doc(GR, list(routes[GR])), 3.0)
    assert c.advertised() == routes

    # A withdraw: no longer accepted, then no longer on the wire either.
    del routes[GR][net("10.0.0.1/32")]
    c.apply(routes)
    answer_all(c)
    assert c.advertised() == routes  # accepted without it: not counted any more
    c.on_event(update_doc(GR, withdrawn=[net("10.0.0.1/32")]), 4.0)
    assert c.advertised() == routes
    assert c.peer_status()[GR].advertised == 1


def test_session_events_carry_the_three_counts() -> None:
    """A PeerEvent (MQTT's peer document) says what the peer has at that moment: at a
    session's going down, nothing advertised; at its coming up, nothing sent yet."""
    events: list[DriverEvent] = []
    c = core(events=events)
    c.apply({IBGP: {net("10.0.0.1/32"): PLAIN, net("10.0.0.2/32"): PLAIN}})
    answer_all(c)
    c.on_event(state_doc(IBGP, SessionState.UP), 1.0)
    c.on_event(update_doc(IBGP, [net("10.0.0.1/32"), net("10.0.0.2/32")]), 1.0)
    c.on_event(state_doc(IBGP, SessionState.DOWN), 2.0)
    sessions = [e for e in events if isinstance(e, PeerEvent)]
    assert [(e.state, e.desired, e.accepted, e.advertised) for e in sessions] == [
        (SessionState.UP, 2, 2, 0),
        (SessionState.DOWN, 2, 2, 0),
    ]


def test_an_exabgp_restart_advertises_nothing_until_sent_again() -> None:
    c = core()
    c.apply({IBGP: {net("10.0.0.1/32"): PLAIN}})
    answer_all(c)
    c.on_event(state_doc(IBGP, SessionState.UP), 1.0)
    c.on_event(update_doc(IBGP, [net("10.0.0.1/32")]), 1.0)
    assert c.peer_status()[IBGP].advertised == 1
    c.reset(2.0)
    c.connect()
    assert c.advertised() == {}
    assert c.peer_status()[IBGP].advertised == 0


def test_a_reload_that_removes_a_peer_or_forgets_its_routes() -> None:
    """A peer gone from ExaBGP's configuration advertises nothing; a peer ExaBGP forgot
    (re-keyed: its accepted routes are no longer known) advertises nothing until ExaBGP
    accepted them again, and then what is still on the wire."""
    c = core()
    routes = {GR: {net("10.0.0.1/32"): PLAIN}, IBGP: {net("10.0.0.2/32"): PLAIN}}
    c.apply(routes)
    answer_all(c)
    for peer in (GR, IBGP):
        c.on_event(state_doc(peer, SessionState.UP), 1.0)
        c.on_event(update_doc(peer, list(routes[peer])), 1.0)
    assert c.advertised() == routes
    kept = [n for n in NEIGHBORS if n.name != GR]
    c.reload(kept, {GR, IBGP})
    answer_all(c)
    assert c.advertised() == {}
    c.apply({IBGP: routes[IBGP]})
    answer_all(c, now=1.0)
    assert c.advertised() == {IBGP: routes[IBGP]}
    assert GR not in c.peer_status()


def test_an_update_for_an_unknown_session_is_ignored() -> None:
    c = core()
    c.apply({IBGP: {net("10.0.0.1/32"): PLAIN}})
    answer_all(c)
    doc = update_doc(IBGP, [net("10.0.0.1/32")])
    neighbor = doc["neighbor"]
    assert isinstance(neighbor, dict)
    neighbor["address"] = {"local": "192.0.2.10", "peer": "192.0.2.99"}
    c.on_event(doc, 1.0)
    assert c.advertised() == {}


def test_route_events_come_per_batch_not_per_route() -> None:
    """The subscribers get one RouteEvents per batch of changes of a peer's advertised
    set (the UPDATE reports read together: an IPv6 /128 is an UPDATE of its own; an
    answer; a session down), holding its routes in order: a first sync of 30,000 routes
    was 30,000 events to each. ExaBGP's answers alone advertise nothing (one
    RoutesAccepted each): the UPDATE reports do."""
    events: list[DriverEvent] = []
    c = core(window=4, batch=100, events=events)
    prefixes = [net(f"10.1.{i // 256}.{i % 256}/32") for i in range(250)]
    c.apply({GR: dict.fromkeys(prefixes, PLAIN)})
    c.on_event(state_doc(GR, SessionState.UP), 1.0)
    answer_all(c)
    assert [type(e) for e in events] == [PeerEvent] + [RoutesAccepted] * 3
    events.clear()
    c.on_event(update_doc(GR, prefixes[:200]), 2.0)
    c.on_event(update_doc(GR, prefixes[200:]), 2.0)
    assert events == []
    assert c.events_held
    c.flush_events()
    assert not c.events_held
    batches = [e for e in events if isinstance(e, RouteEvents)]
    assert [len(e.changes) for e in batches] == [250]
    routes = [r for e in batches for r in e.events()]
    assert [r.prefix for r in routes] == prefixes
    assert {(r.peer, r.change, r.attributes, r.at) for r in routes} == {
        (GR, RouteChange.ANNOUNCED, PLAIN, 2.0)
    }
    # Reported again (ExaBGP re-sends after a route refresh): nothing changed.
    events.clear()
    c.on_event(update_doc(GR, prefixes), 2.5)
    c.flush_events()
    assert events == []
    # An accepted withdraw ends the advertisement at once (as the metric counts it):
    # one batch per answer; its UPDATE report then changes nothing.
    c.apply({GR: dict.fromkeys(prefixes[:10], PLAIN)})
    answer_all(c, now=3.0)
    batches = [e for e in events if isinstance(e, RouteEvents)]
    assert [len(e.changes) for e in batches] == [100, 100, 40]
    assert [ch for e in batches for ch in e.changes] == [(p, None) for p in sorted(prefixes[10:])]
    events.clear()
    c.on_event(update_doc(GR, withdrawn=prefixes[10:]), 3.5)
    c.flush_events()
    assert events == []
    # The session goes down: the router dropped the rest (RFC 4271), in one batch.
    c.on_event(state_doc(GR, SessionState.DOWN), 4.0)
    (gone,) = [e for e in events if isinstance(e, RouteEvents)]
    assert gone.changes == tuple((p, None) for p in prefixes[:10])


def test_held_report_changes_go_out_before_any_other_event() -> None:
    """An event after UPDATE reports not flushed yet (a session down read in the same
    chunk) hands the reports' changes out first: replayed in order, the events still
    give advertised()."""
    events: list[DriverEvent] = []
    c = core(events=events)
    routes = {GR: {net("10.0.0.1/32"): PLAIN}, IBGP: {net("10.0.0.2/32"): PLAIN}}
    c.apply(routes)
    answer_all(c)
    events.clear()
    for peer in (GR, IBGP):
        c.on_event(state_doc(peer, SessionState.UP), 1.0)
        c.on_event(update_doc(peer, list(routes[peer])), 1.0)
    c.on_event(state_doc(GR, SessionState.DOWN), 2.0)
    got = [
        (type(e).__name__, e.peer, [a is not None for _, a in getattr(e, "changes", ())])
        for e in events
    ]
    assert got == [
        ("PeerEvent", GR, []),
        ("RouteEvents", GR, [True]),  # held until the next event
        ("PeerEvent", IBGP, []),
        ("RouteEvents", IBGP, [True]),
        ("RouteEvents", GR, [False]),
        ("PeerEvent", GR, []),
    ]
    assert c.advertised() == {IBGP: routes[IBGP]}


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        pytest.param(
            lambda c: c.on_event(state_doc(GR, SessionState.DOWN), 5.0),
            [(GR, "10.0.0.1/32", None), (GR, "10.0.0.2/32", None)],
            id="session-down",
        ),
        pytest.param(
            lambda c: c.on_event(state_doc(GR, SessionState.CONNECTED), 5.0),
            [(GR, "10.0.0.1/32", None), (GR, "10.0.0.2/32", None)],
            id="session-not-established",
        ),
        pytest.param(
            lambda c: c.on_event(update_doc(GR, withdrawn=[net("10.0.0.2/32")]), 5.0),
            [(GR, "10.0.0.2/32", None)],
            id="withdrawn-on-the-wire",
        ),
        pytest.param(
            lambda c: (c.apply({GR: {net("10.0.0.1/32"): TAGGED}}), answer_all(c, now=5.0)),
            [(GR, "10.0.0.1/32", TAGGED), (GR, "10.0.0.2/32", None)],
            id="new-attributes-and-a-withdraw-accepted",
        ),
        pytest.param(
            lambda c: (c.reset(5.0), c.connect()),
            [(GR, "10.0.0.1/32", None), (GR, "10.0.0.2/32", None)],
            id="exabgp-restarted",
        ),
        pytest.param(
            lambda c: (c.reload([n for n in NEIGHBORS if n.name != GR], {GR}), answer_all(c)),
            [(GR, "10.0.0.1/32", None), (GR, "10.0.0.2/32", None)],
            id="peer-removed",
        ),
        pytest.param(
            lambda c: (c.reload(NEIGHBORS, {GR}), c.next_commands(5.0), c.on_ack(True, 5.0)),
            [(GR, "10.0.0.1/32", None), (GR, "10.0.0.2/32", None)],
            id="routes-forgotten-by-a-reload",
        ),
        pytest.param(
            lambda c: c.on_event(state_doc(IBGP, SessionState.DOWN), 5.0),
            [],
            id="another-peer-down",
        ),
    ],
)
def test_what_ends_or_changes_an_advertisement(
    after: Callable[[DriverCore], object],
    expected: list[tuple[PeerName, str, RouteAttributes | None]],
) -> None:
    """Each way a route stops being advertised (or changes attributes) is a route event,
    as it is a change of advertised() and of the metric."""
    events: list[DriverEvent] = []
    c = core(events=events)
    routes = {GR: {net("10.0.0.1/32"): PLAIN, net("10.0.0.2/32"): PLAIN}}
    c.apply(routes)
    answer_all(c)
    c.on_event(state_doc(GR, SessionState.UP), 1.0)
    c.on_event(update_doc(GR, list(routes[GR])), 1.0)
    c.flush_events()
    assert c.advertised() == routes
    events.clear()
    after(c)
    c.flush_events()
    got = [(e.peer, str(p), a) for e in events if isinstance(e, RouteEvents) for p, a in e.changes]
    assert got == expected
    # Replayed on what was advertised, they give what is advertised now.
    for peer, text, a in got:
        if a is None:
            del routes[peer][net(text)]
        else:
            routes[peer][net(text)] = a
    assert c.advertised() == {p: r for p, r in routes.items() if r}


# ---------------------------------------------------------------------- interleavings

PREFIXES = [net(f"10.0.0.{i}/32") for i in range(1, 5)] + [
    net(f"2001:db8:1::{i}/128") for i in range(1, 3)
]
PEERS = [GR, IBGP, V6]
attrs = st.sampled_from([PLAIN, TAGGED])
route_sets = st.dictionaries(
    st.sampled_from(PEERS),
    st.dictionaries(st.sampled_from(PREFIXES), attrs, min_size=1, max_size=5),
)


class Wire(RuleBasedStateMachine):
    """A simulated ExaBGP holds the routes of every command it answered ``done`` (its
    adj-rib-out) and, for an established session, writes UPDATEs that bring the router
    to that set, reporting each to the core; a session going down empties the router's
    view, and its re-establishment makes ExaBGP send everything again."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[DriverEvent] = []
        self.core = core(window=3, batch=2, events=self.events)
        #: What a subscriber knows from the route events: rebuilt from self.events.
        self.heard: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
        #: MQTT's publisher fed the same events (no broker: its retained state).
        self.mqtt = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NODE)
        self.now = 0.0
        self.rib: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
        self.router: dict[PeerName, set[IPNetwork]] = {}
        self.up: set[PeerName] = set()
        self.outstanding: list[Command] = []
        self.desired: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}

    @rule(desired=route_sets)
    def apply(self, desired: dict[PeerName, dict[IPNetwork, RouteAttributes]]) -> None:
        self.desired = desired
        self.core.apply(desired)

    @rule()
    def send(self) -> None:
        self.outstanding += self.core.next_commands(self.now)

    @precondition(lambda self: bool(self.outstanding))
    @rule(done=st.booleans())
    def answer(self, done: bool) -> None:
        cmd = self.outstanding.pop(0)
        if cmd.kind is CommandKind.EOR:
            done = cmd.peer in self.up
        elif done:
            hold(self.rib, cmd)
        self.core.on_ack(done, self.now)

    @rule(peer=st.sampled_from(PEERS), up=st.booleans())
    def session(self, peer: PeerName, up: bool) -> None:
        if up:
            self.up.add(peer)
        else:
            self.up.discard(peer)
            self.router.pop(peer, None)  # RFC 4271: a closed session's routes are gone
        self.core.on_event(state_doc(peer, SessionState.UP if up else SessionState.DOWN), self.now)

    @precondition(lambda self: bool(self.up))
    @rule(data=st.data())
    def write_updates(self, data: st.DataObject) -> None:
        """ExaBGP's reactor writes (part of) what its adj-rib-out holds and the router
        lacks, and withdraws what it no longer holds, in one UPDATE; it may send again
        what the router has (a route refresh)."""
        peer = data.draw(st.sampled_from(sorted(self.up)))
        have = self.router.setdefault(peer, set())
        rib = self.rib.get(peer, {})
        new = sorted(set(rib) - have, key=str)
        gone = sorted(have - set(rib), key=str)
        again = sorted(have & set(rib), key=str)
        announced = data.draw(st.lists(st.sampled_from(new), unique=True)) if new else []
        if again:
            announced += data.draw(st.lists(st.sampled_from(again), unique=True))
        withdrawn = data.draw(st.lists(st.sampled_from(gone), unique=True)) if gone else []
        if not announced and not withdrawn:
            return
        have.update(announced)
        have.difference_update(withdrawn)
        self.core.on_event(update_doc(peer, announced, withdrawn), self.now)

    @rule()
    def exabgp_restarts(self) -> None:
        self.rib.clear()
        self.router.clear()
        self.up.clear()
        self.outstanding.clear()
        self.core.reset(self.now)
        self.core.connect()

    @rule()
    def quiet(self) -> None:
        """The reconciler applies again (retrying refused routes), everything is answered
        ``done`` and every established session sent everything: what is advertised to an
        established peer is what ExaBGP accepted for it, which is what is desired."""
        self.core.apply(self.desired)
        for _ in range(1000):
            self.send()
            if not self.outstanding:
                break
            while self.outstanding:
                self.answer(True)
        else:
            raise AssertionError("the core never went quiet")
        for peer in sorted(self.up):
            have = self.router.setdefault(peer, set())
            rib = self.rib.get(peer, {})
            self.core.on_event(
                update_doc(
                    peer, sorted(set(rib) - have, key=str), sorted(have - set(rib), key=str)
                ),
                self.now,
            )
            have.clear()
            have.update(rib)
        accepted = self.core.accepted()
        assert self.core.advertised() == {p: r for p, r in accepted.items() if p in self.up}
        for name, s in self.core.peer_status().items():
            assert s.advertised == (s.accepted if name in self.up else 0)
            # Quiet: ExaBGP accepted exactly what is desired.
            assert s.desired == s.accepted

    # -------------------------------------------------------------- always

    def hear(self) -> None:
        """Replay the events since the last check into ``heard`` and MQTT's publisher
        (each invariant calls it first: Hypothesis runs them in no given order), after
        the transport's flush of the UPDATE reports' changes."""
        self.core.flush_events()
        for event in self.events:
            if isinstance(event, RouteEvents):
                assert event.node == NODE
                assert event.changes, "an empty batch"
                heard = self.heard.setdefault(event.peer, {})
                for route in event.events():
                    if route.attributes is None:
                        assert heard.pop(route.prefix, None) is not None, route
                    else:
                        assert heard.get(route.prefix) != route.attributes, route
                        heard[route.prefix] = route.attributes
                    self.mqtt.publish(route)
        self.events.clear()

    @invariant()
    def route_events_say_what_was_advertised(self) -> None:
        """Replayed in order, the route events give advertised() (what the metric
        counts), and every route in them is a change: a prefix newly advertised or with
        other attributes, or one that was advertised and no longer is (hear())."""
        self.hear()
        assert {p: r for p, r in self.heard.items() if r} == self.core.advertised()

    @invariant()
    def mqtt_retains_exactly_the_advertised_routes(self) -> None:
        """MQTT's retained route topics (one per prefix) are the prefixes advertised to
        any peer, each holding the document of a peer that has it, with its attributes."""
        self.hear()
        advertised = self.core.advertised()
        retained = {t: json.loads(b) for t, b in self.mqtt.retained().items() if "/routes/" in t}
        assert set(retained) == {
            route_topic("kube-bgpd", NODE, p) for routes in advertised.values() for p in routes
        }
        for doc in retained.values():
            peer, prefix = PeerName(str(doc["peer"])), ipaddress.ip_network(str(doc["prefix"]))
            attrs = advertised[peer][prefix]
            at = float(doc["at"])  # type: ignore[arg-type]
            expected = RouteEvent(NODE, peer, prefix, RouteChange.ANNOUNCED, attrs, at)
            assert doc == event_payload(expected)

    @invariant()
    def advertised_within_accepted(self) -> None:
        accepted = self.core.accepted()
        for peer, routes in self.core.advertised().items():
            assert routes.items() <= accepted[peer].items()

    @invariant()
    def advertised_is_what_the_router_has_of_accepted(self) -> None:
        accepted = self.core.accepted()
        want = {
            peer: {p: accepted[peer][p] for p in have if p in accepted.get(peer, {})}
            for peer, have in self.router.items()
        }
        assert self.core.advertised() == {p: r for p, r in want.items() if r}

    @invariant()
    def a_session_down_advertises_nothing(self) -> None:
        status = self.core.peer_status()
        for peer in PEERS:
            if peer not in self.up:
                assert peer not in self.core.advertised()
                assert status[peer].advertised == 0
            assert status[peer].advertised <= status[peer].accepted


TestWire = Wire.TestCase
TestWire.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_three_counts_name_the_same_peer() -> None:
    """desired counts what the decision wants for the peer (its session's family only),
    accepted what ExaBGP answered done, advertised what was sent."""
    c = core()
    c.apply({V6: {net("2001:db8:1::1/128"): PLAIN, net("10.0.0.1/32"): PLAIN}})
    answer_all(c)
    s = c.peer_status()[V6]
    assert (s.desired, s.accepted, s.advertised) == (1, 1, 0)
    assert ipaddress.ip_network("2001:db8:1::1/128") in c.accepted()[V6]
