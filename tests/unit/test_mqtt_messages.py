"""The MQTT topics, payloads and retain flags are a pure function of an event."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json

import pytest

from bgpd.model import (
    DriverEvent,
    MQTTConfig,
    NodeName,
    PeerEvent,
    PeerName,
    PeerStatus,
    RouteAttributes,
    RouteChange,
    RouteEvent,
    RouteEvents,
    RoutesAccepted,
    SessionState,
)
from bgpd.mqtt import (
    Message,
    MQTTPublisher,
    backoff_delay,
    messages,
    peer_counts_changed,
    peer_topic,
    prefix_level,
)
from kbgpd_lab.kit.waiting import wait_until_async

NODE = NodeName("node-a")
R1 = PeerName("router-1")


@pytest.mark.parametrize(
    ("prefix", "level"),
    [
        pytest.param("10.99.100.1/32", "10.99.100.1_32", id="v4-host"),
        pytest.param("10.99.100.0/24", "10.99.100.0_24", id="v4-aggregate"),
        pytest.param("fd00:99::1/128", "fd00:99::1_128", id="v6-compressed"),
    ],
)
def test_prefix_level_is_one_topic_level(prefix: str, level: str) -> None:
    assert prefix_level(ipaddress.ip_network(prefix)) == level


def test_announce_is_one_retained_json_document() -> None:
    ev = RouteEvent(
        NODE,
        R1,
        ipaddress.ip_network("10.99.100.1/32"),
        RouteChange.ANNOUNCED,
        RouteAttributes(communities=("65000:1",), large_communities=("1:2:3",), med=5),
        12.5,
    )
    (m,) = messages("kb", ev)
    assert (m.topic, m.retain) == ("kb/node-a/routes/10.99.100.1_32", True)
    assert json.loads(m.payload) == {
        "node": "node-a",
        "peer": "router-1",
        "prefix": "10.99.100.1/32",
        "state": "announced",
        "communities": ["65000:1"],
        "large_communities": ["1:2:3"],
        "local_pref": None,
        "med": 5,
        "link_bandwidth": None,
        "at": 12.5,
    }


def test_withdraw_is_a_live_event_then_a_retained_clear() -> None:
    ev = RouteEvent(
        NODE, R1, ipaddress.ip_network("fd00:99::1/128"), RouteChange.WITHDRAWN, None, 3.0
    )
    event, clear = messages("kube-bgpd", ev)
    assert event.topic == clear.topic == "kube-bgpd/node-a/routes/fd00:99::1_128"
    assert not event.retain
    assert json.loads(event.payload)["state"] == "withdrawn"
    assert clear == Message(clear.topic, b"", True)


@pytest.mark.parametrize("state", list(SessionState), ids=str)
def test_peer_state_is_retained(state: SessionState) -> None:
    (m,) = messages("kube-bgpd", PeerEvent(NODE, R1, state, "why", 1.0))
    assert (m.topic, m.retain) == ("kube-bgpd/node-a/peers/router-1", True)
    assert json.loads(m.payload)["state"] == state.value


def test_peer_document_carries_the_three_counts() -> None:
    (m,) = messages("kube-bgpd", PeerEvent(NODE, R1, SessionState.UP, "", 2.0, 5, 4, 3))
    assert json.loads(m.payload) == {
        "node": NODE,
        "peer": R1,
        "state": "up",
        "reason": "",
        "at": 2.0,
        "desired": 5,
        "accepted": 4,
        "advertised": 3,
    }


def test_peer_counts_are_published_when_they_change_only() -> None:
    """follow_peers' sampling: a peer whose state or counts changed since the last sample
    gives one event; an unchanged one none; a peer gone is forgotten (and given again if
    it comes back)."""
    address = ipaddress.ip_address("172.31.250.1")
    last: dict[PeerName, tuple[object, ...]] = {}
    up = PeerStatus(R1, address, SessionState.UP, 1.0, "", accepted=2, desired=2, advertised=1)
    (ev,) = peer_counts_changed(NODE, {R1: up}, last, 5.0)
    assert ev == PeerEvent(NODE, R1, SessionState.UP, "", 5.0, 2, 2, 1)
    assert peer_counts_changed(NODE, {R1: up}, last, 6.0) == []
    more = dataclasses.replace(up, advertised=2)
    assert [e.advertised for e in peer_counts_changed(NODE, {R1: more}, last, 7.0)] == [2]
    assert peer_counts_changed(NODE, {}, last, 8.0) == []
    assert last == {}
    assert len(peer_counts_changed(NODE, {R1: more}, last, 9.0)) == 1


@pytest.mark.parametrize("bad", ["a/b", "a+b", "#", ""], ids=["slash", "plus", "hash", "empty"])
def test_names_that_would_change_the_topic_tree_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="MQTT topic level"):
        peer_topic("kube-bgpd", "node-a", PeerName(bad))


@pytest.mark.parametrize(
    ("attempt", "rand", "expected"),
    [
        pytest.param(0, 0.0, 0.25, id="first-low"),
        pytest.param(0, 1.0, 0.5, id="first-high"),
        pytest.param(3, 0.5, 3.0, id="grows"),
        pytest.param(10, 1.0, 30.0, id="capped"),
        pytest.param(10_000, 0.0, 15.0, id="huge-attempt-no-overflow"),
    ],
)
def test_backoff_is_capped_equal_jitter(attempt: int, rand: float, expected: float) -> None:
    assert backoff_delay(attempt, base=0.5, cap=30.0, rand=lambda: rand) == expected


async def test_follow_publishes_a_batch_of_routes_route_by_route() -> None:
    """The driver hands over one RouteEvents per change batch; MQTT still publishes one
    message per route, exactly as for single RouteEvents. RoutesAccepted (ExaBGP took a
    command) publishes nothing: the route topics say what the routers were sent."""
    pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NODE)
    one, two = ipaddress.ip_network("10.99.0.1/32"), ipaddress.ip_network("10.99.0.2/32")
    attrs = RouteAttributes(med=5)
    queue: asyncio.Queue[DriverEvent] = asyncio.Queue()
    queue.put_nowait(RoutesAccepted(NODE, R1, 0.5))
    queue.put_nowait(RouteEvents(NODE, R1, ((one, attrs), (two, attrs)), 1.0))
    queue.put_nowait(RoutesAccepted(NODE, R1, 1.5))
    queue.put_nowait(RouteEvents(NODE, R1, ((one, None),), 2.0))
    follower = asyncio.create_task(pub.follow(queue))
    try:
        await wait_until_async(
            lambda: queue.empty() and pub.queued == 3, what="3 queued", within=30
        )
    finally:
        follower.cancel()
    expected = [
        RouteEvent(NODE, R1, one, RouteChange.ANNOUNCED, attrs, 1.0),
        RouteEvent(NODE, R1, two, RouteChange.ANNOUNCED, attrs, 1.0),
        RouteEvent(NODE, R1, one, RouteChange.WITHDRAWN, None, 2.0),
    ]
    assert list(pub._queue) == [messages("kube-bgpd", e) for e in expected]
    # The withdrawn route's retained message is cleared, the other one's kept.
    topics = [messages("kube-bgpd", e)[0].topic for e in expected[:2]]
    assert [t in pub.retained() for t in topics] == [False, True]


def _route(peer: PeerName, change: RouteChange, at: float, med: int = 5) -> RouteEvent:
    attrs = RouteAttributes(med=med) if change is RouteChange.ANNOUNCED else None
    return RouteEvent(NODE, peer, ipaddress.ip_network("10.99.0.1/32"), change, attrs, at)


R2 = PeerName("router-2")
TOPIC = "kube-bgpd/node-a/routes/10.99.0.1_32"
UP, DOWN = RouteChange.ANNOUNCED, RouteChange.WITHDRAWN


@pytest.mark.parametrize(
    ("events", "retained_peer", "last_messages"),
    [
        pytest.param([(R1, UP)], R1, [(True, R1)], id="one-peer"),
        pytest.param([(R1, UP), (R1, DOWN)], None, [(False, R1), (True, None)], id="withdrawn"),
        pytest.param(
            [(R1, UP), (R2, UP), (R1, DOWN)],
            R2,
            [(False, R1), (True, R2)],
            id="one-router-down-the-other-still-has-it",
        ),
        pytest.param(
            [(R1, UP), (R2, UP), (R2, DOWN)],
            R1,
            [(False, R2), (True, R1)],
            id="the-other-way-round",
        ),
        pytest.param(
            [(R1, UP), (R2, UP), (R1, DOWN), (R2, DOWN)],
            None,
            [(False, R2), (True, None)],
            id="both-down-cleared",
        ),
        pytest.param(
            [(R1, UP), (R2, UP), (R1, UP)], R1, [(True, R1)], id="latest-announce-retained"
        ),
        pytest.param(
            [(R2, DOWN), (R1, UP), (R2, DOWN)],
            R1,
            [(False, R2), (True, R1)],
            id="withdraw-of-a-peer-without-it",
        ),
    ],
)
def test_a_route_topic_is_retained_while_any_peer_has_the_prefix(
    events: list[tuple[PeerName, RouteChange]],
    retained_peer: PeerName | None,
    last_messages: list[tuple[bool, PeerName | None]],
) -> None:
    """The topic is per prefix; each event is one peer's. One router's session going down
    must not clear the topic of a prefix the other router still has: the withdraw event
    goes out (not retained) and the remaining peer's document stays retained."""
    pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NODE)
    for i, (peer, change) in enumerate(events):
        pub.publish(_route(peer, change, float(i)))
    retained = pub.retained().get(TOPIC)
    if retained_peer is None:
        assert retained is None
    else:
        assert retained is not None
        assert json.loads(retained)["peer"] == retained_peer
    last = pub._queue[-1]
    assert all(m.topic == TOPIC for m in last)
    seen = [(m.retain, json.loads(m.payload)["peer"] if m.payload else None) for m in last]
    assert seen == last_messages


def test_one_peer_keeps_no_document_per_topic_beside_the_retained_one() -> None:
    """Footprint: with one peer per prefix (the usual case) the publisher keeps the
    peer's name per route topic, not a dict of documents (30,000 routes: 6 MiB more,
    bench/bench_route_events.py --retained-memory); a second peer makes one."""
    pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NODE)
    for i in range(3):
        prefix = ipaddress.ip_network(f"10.99.0.{i}/32")
        pub.publish(RouteEvent(NODE, R1, prefix, UP, RouteAttributes(), 1.0))
    assert {type(h) for h in pub._holders.values()} == {str}
    pub.publish(_route(R2, UP, 2.0))
    pub.publish(_route(R1, UP, 3.0))
    assert type(pub._holders[TOPIC]) is dict
    pub.publish(_route(R2, DOWN, 4.0))
    assert pub._holders[TOPIC] == R1


async def test_a_session_event_published_after_a_newer_sample_is_corrected() -> None:
    """The driver's PeerEvent carries the counts of the moment the session came up and
    reaches the publisher through a queue; a sample of follow_peers that read the newer
    counts (the session's UPDATEs reported in the same read) can be published before it.
    The retained peer document then says ``advertised: 0``, and the next sample must put
    the current counts back: it compares with what was published last, not with its own
    previous sample (which already said 2, so it never published again)."""
    pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NODE)
    address = ipaddress.ip_address("172.31.250.1")
    now = PeerStatus(R1, address, SessionState.UP, 1.0, "", accepted=2, desired=2, advertised=2)
    queue: asyncio.Queue[DriverEvent] = asyncio.Queue()
    queue.put_nowait(PeerEvent(NODE, R1, SessionState.UP, "", 1.0, 2, 2, 0))
    topic = peer_topic("kube-bgpd", NODE, R1)

    def advertised() -> object:
        doc = pub.retained().get(topic)
        return None if doc is None else json.loads(doc)["advertised"]

    # The sampler runs first (it reads 2), then the follower publishes the older event.
    sampler = asyncio.create_task(pub.follow_peers(lambda: {R1: now}, every=0.01))
    follower = asyncio.create_task(pub.follow(queue))
    try:
        await wait_until_async(lambda: queue.empty(), what="the event taken", within=30)
        await wait_until_async(
            lambda: advertised() == 2, what="the peer document saying 2 advertised", within=30
        )
    finally:
        sampler.cancel()
        follower.cancel()
    published = [json.loads(m.payload)["advertised"] for (m,) in pub._queue]
    # The sample (2), the late event (0), the correction (2); nothing after.
    assert published == [2, 0, 2]
