"""The MQTT topics, payloads and retain flags are a pure function of an event."""

from __future__ import annotations

import ipaddress
import json

import pytest

from bgpd.model import (
    NodeName,
    PeerEvent,
    PeerName,
    RouteAttributes,
    RouteChange,
    RouteEvent,
    SessionState,
)
from bgpd.mqtt import Message, backoff_delay, messages, peer_topic, prefix_level

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
