"""BFD where people look: metrics (BfdCollector), MQTT (BfdEvent), /status rows and the
`status` table, all from the same states."""

from __future__ import annotations

import ipaddress
import json

from prometheus_client import CollectorRegistry, generate_latest

from bgpd.bfd.readback import status_rows
from bgpd.bfd.render import BfdPeerConfig
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.cli.status import bfd_table
from bgpd.metrics import BfdCollector, BfdSession
from bgpd.model import BfdEvent, NodeName, PeerName
from bgpd.mqtt import Message, messages

A, B = PeerName("tor-a"), PeerName("tor-b")
STATES = tuple(s.value for s in BfdState)


def scrape(sessions: list[BfdSession]) -> list[str]:
    registry = CollectorRegistry()
    registry.register(BfdCollector(lambda: sessions, STATES))
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_metrics_per_peer() -> None:
    lines = scrape(
        [
            BfdSession(peer=A, state="up", flaps=2, detect_ms=900),
            BfdSession(peer=B, state="down", flaps=0, detect_ms=None),
        ]
    )
    assert 'kube_bgpd_bfd_session_up{peer="tor-a"} 1.0' in lines
    assert 'kube_bgpd_bfd_session_up{peer="tor-b"} 0.0' in lines
    assert 'kube_bgpd_bfd_session_state{peer="tor-a",state="up"} 1.0' in lines
    assert 'kube_bgpd_bfd_session_state{peer="tor-a",state="down"} 0.0' in lines
    assert 'kube_bgpd_bfd_session_state{peer="tor-b",state="down"} 1.0' in lines
    assert 'kube_bgpd_bfd_session_flaps_total{peer="tor-a"} 2.0' in lines
    assert 'kube_bgpd_bfd_detect_time_seconds{peer="tor-a"} 0.9' in lines
    assert not [line for line in lines if 'detect_time_seconds{peer="tor-b"}' in line]
    assert len([line for line in lines if line.startswith("kube_bgpd_bfd_session_state")]) == 10


def test_no_bfd_peer_no_series() -> None:
    assert scrape([]) == []


def test_mqtt_bfd_event_is_a_retained_topic_per_peer() -> None:
    event = BfdEvent(
        node=NodeName("node1"),
        peer=A,
        state="down",
        diagnostic="control detection time expired",
        at=12.5,
    )
    (m,) = messages("kube-bgpd", event)
    assert m == Message(
        "kube-bgpd/node1/bfd/tor-a",
        json.dumps(
            {
                "at": 12.5,
                "diagnostic": "control detection time expired",
                "node": "node1",
                "peer": "tor-a",
                "state": "down",
            },
            separators=(",", ":"),
        ).encode(),
        True,
    )


def test_status_rows_and_table() -> None:
    peers = [
        BfdPeerConfig(
            peer=B,
            address=ipaddress.ip_address("192.0.2.2"),
            local_address=ipaddress.ip_address("192.0.2.10"),
            profile="fast",
        ),
        BfdPeerConfig(
            peer=A,
            address=ipaddress.ip_address("192.0.2.1"),
            local_address=ipaddress.ip_address("192.0.2.10"),
            profile="fast",
        ),
    ]
    states = {
        A: BfdPeerState(
            peer=A,
            address=peers[1].address,
            local_address=peers[1].local_address,
            state=BfdState.UP,
            since=100.0,
            flaps=1,
            detect_ms=900,
        )
    }
    rows = status_rows(peers, states)
    assert rows == [
        {
            "name": "tor-a",
            "address": "192.0.2.1",
            "local_address": "192.0.2.10",
            "profile": "fast",
            "state": "up",
            "since": 100.0,
            "flaps": 1,
            "detect_ms": 900,
            "diagnostic": "",
        },
        {
            "name": "tor-b",
            "address": "192.0.2.2",
            "local_address": "192.0.2.10",
            "profile": "fast",
            "state": "unknown",
            "since": None,
            "flaps": 0,
            "detect_ms": None,
            "diagnostic": "",
        },
    ]
    assert bfd_table({"bfd": {"pid": 7, "peers": rows}}, 130.0) == (
        "BFD PEER  ADDRESS    LOCAL       STATE    SINCE  FLAPS  DETECT-MS  DIAGNOSTIC\n"
        "tor-a     192.0.2.1  192.0.2.10  up       30s    1      900\n"
        "tor-b     192.0.2.2  192.0.2.10  unknown  -      0      -"
    )
    assert bfd_table({"bfd": None}, 0.0) is None
