"""BGP follows BFD in the speaker (bgpd.speaker.bfd_follow) with a recording driver: what
reaches the driver, MQTT, metrics and the speaker's explain answer."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from prometheus_client import CollectorRegistry

from bgpd.bfd.gate import CEASE_BFD_DOWN
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.explain import decision_from_json, decision_json, explain_table
from bgpd.metrics import BfdGateCollector
from bgpd.model import (
    BfdTeardownEvent,
    BGPPeer,
    Config,
    Decision,
    HoldReason,
    NodeName,
    PeerHold,
    PeerName,
    SpeakerConfig,
    SpeakerEvent,
)
from bgpd.mqtt import messages
from bgpd.speaker.bfd_follow import BfdFollow

FAST, PLAIN = PeerName("fast"), PeerName("plain")
NODE = NodeName("n1")


class Driver:
    def __init__(self) -> None:
        self.held: list[frozenset[PeerName]] = []
        self.torn: list[tuple[PeerName, int]] = []

    def set_held(self, peers: AbstractSet[PeerName]) -> None:
        self.held.append(frozenset(peers))

    def teardown(self, peer: PeerName, subcode: int) -> None:
        self.torn.append((peer, subcode))

    def held_routes(self) -> Mapping[PeerName, int]:
        return dict.fromkeys(self.held[-1] if self.held else (), 3)


def config(*, strict: bool = True) -> Config:
    def peer(name: PeerName, address: str, bfd: str | None) -> BGPPeer:
        return BGPPeer(
            name=name,
            my_asn=64512,
            peer_asn=64500,
            peer_address=ipaddress.ip_address(address),
            bfd_profile=bfd,
        )

    return Config(
        peers=(peer(FAST, "192.0.2.1", "fast"), peer(PLAIN, "192.0.2.2", None)),
        speaker=SpeakerConfig(bfd_strict=strict),
    )


def reading(state: BfdState, diagnostic: str = "") -> dict[PeerName, BfdPeerState]:
    return {
        FAST: BfdPeerState(
            peer=FAST,
            address=ipaddress.ip_address("192.0.2.1"),
            local_address=ipaddress.ip_address("192.0.2.10"),
            state=state,
            diagnostic=diagnostic,
        )
    }


def follow() -> tuple[BfdFollow, Driver, list[SpeakerEvent]]:
    driver, events = Driver(), []
    f = BfdFollow(node=NODE, driver=driver, publish=events.append)
    f.configure(config(), [FAST, PLAIN])
    return f, driver, events


def test_strict_holds_until_up_then_tears_down_on_down() -> None:
    f, driver, events = follow()
    assert driver.held[-1] == {FAST}
    assert f.held() == (PeerHold(FAST, HoldReason.BFD_NOT_UP, 3),)
    f.on_states(reading(BfdState.UP))
    assert driver.held[-1] == frozenset()
    assert f.held() == ()
    f.on_states(reading(BfdState.DOWN, "control detection time expired"))
    assert driver.torn == [(FAST, CEASE_BFD_DOWN)]
    assert driver.held[-1] == {FAST}
    (event,) = events
    assert isinstance(event, BfdTeardownEvent)
    assert (event.peer, event.diagnostic) == (FAST, "control detection time expired")
    assert f.teardowns() == {FAST: 1}


def test_not_strict_holds_nothing() -> None:
    driver = Driver()
    f = BfdFollow(node=NODE, driver=driver)
    f.configure(config(strict=False), [FAST, PLAIN])
    assert f.held() == ()
    assert driver.held == []  # nothing changed: the driver is not bothered


def test_a_peer_without_a_session_is_not_enabled() -> None:
    driver = Driver()
    f = BfdFollow(node=NODE, driver=driver)
    f.configure(config(), [PLAIN])
    assert f.held() == ()


def test_stopping_tears_nothing_down() -> None:
    f, driver, events = follow()
    f.on_states(reading(BfdState.UP))
    f.stop()
    f.on_states(reading(BfdState.DOWN))
    assert driver.torn == []
    assert events == []


def test_mqtt_teardown_message() -> None:
    (m,) = messages("kb", BfdTeardownEvent(NODE, FAST, "control detection time expired", 1.5))
    assert m.topic == "kb/n1/bfd/fast/teardown"
    assert not m.retain
    assert json.loads(m.payload) == {
        "node": "n1",
        "peer": "fast",
        "event": "bfdTeardown",
        "diagnostic": "control detection time expired",
        "at": 1.5,
    }


def test_metrics() -> None:
    f, _, _ = follow()
    registry = CollectorRegistry()
    registry.register(BfdGateCollector(f))
    assert (
        registry.get_sample_value(
            "kube_bgpd_bfd_routes_held", {"peer": "fast", "reason": "bfdNotUp"}
        )
        == 3
    )
    f.on_states(reading(BfdState.UP))
    f.on_states(reading(BfdState.DOWN))
    assert registry.get_sample_value("kube_bgpd_bfd_teardowns_total", {"peer": "fast"}) == 1
    f.on_states(reading(BfdState.UP))
    assert (
        registry.get_sample_value(
            "kube_bgpd_bfd_routes_held", {"peer": "fast", "reason": "bfdNotUp"}
        )
        is None
    )


def test_explain_shows_and_reads_back_held_peers() -> None:
    decision = Decision(node=NODE, peers_held=(PeerHold(FAST, HoldReason.BFD_NOT_UP, 3),))
    doc = decision_json(decision)
    assert doc["peersHeld"] == [{"peer": "fast", "reason": "bfdNotUp", "routes": 3}]
    assert decision_from_json(json.loads(json.dumps(doc))) == decision
    assert "held back" in explain_table([decision])
    assert "peersHeld" not in decision_json(Decision(node=NODE))
