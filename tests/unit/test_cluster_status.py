"""bgpd.speaker.cluster_status: what the ServiceBGPStatus and BGPNodeStatus objects hold,
rendered from the speaker's state (tables, no I/O)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

import pytest

from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.model import (
    Decision,
    DesiredRoutes,
    NodeName,
    PeerName,
    PeerStatus,
    Route,
    RouteAttributes,
    ServiceKey,
    SessionState,
)
from bgpd.speaker.cluster_status import (
    ConfigOrigin,
    NodeInputs,
    node_status,
    routes_on_the_wire,
    service_peers,
)

A = RouteAttributes()
P1 = ipaddress.ip_network("10.0.0.1/32")
P2 = ipaddress.ip_network("10.0.0.2/32")
P6 = ipaddress.ip_network("2001:db8::1/128")
T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z


def route(peer: str, prefix: Any, *services: str) -> Route:
    return Route(PeerName(peer), prefix, A, tuple(ServiceKey(s) for s in services))


DECISION = Decision(
    node=NodeName("n1"),
    routes=(
        route("frr", P1, "default/web"),
        route("frr", P2, "default/shared-a", "default/shared-b"),
        route("frr", P6, "default/web"),
        route("bird", P1, "default/web"),
        route("bird", P2, "default/shared-a", "default/shared-b"),
    ),
)


def peer(
    name: str,
    state: SessionState,
    acked: int = 0,
    since: float | None = None,
    *,
    desired: int = 0,
    advertised: int = 0,
) -> PeerStatus:
    return PeerStatus(
        peer=PeerName(name),
        address=ipaddress.ip_address("192.0.2.1" if name == "frr" else "192.0.2.2"),
        state=state,
        since=since,
        reason="" if state is SessionState.UP else "connection refused",
        accepted=acked,
        desired=desired,
        advertised=advertised,
    )


class View:
    """The driver as the status reads it: advertised() already holds only what was sent
    on established sessions (bgpd.exabgp.advertised), so a stopped router's peer has none."""

    def __init__(self, peers: Mapping[PeerName, PeerStatus], advertised: DesiredRoutes) -> None:
        self._peers = peers
        self._advertised = advertised

    def peer_status(self) -> Mapping[PeerName, PeerStatus]:
        return self._peers

    def advertised(self) -> DesiredRoutes:
        return self._advertised


ALL = {PeerName("frr"): {P1: A, P2: A, P6: A}, PeerName("bird"): {P1: A, P2: A}}


@pytest.mark.parametrize(
    ("states", "advertised", "expected"),
    [
        pytest.param(
            {"frr": SessionState.UP, "bird": SessionState.UP},
            ALL,
            {
                "default/web": ("bird", "frr"),
                "default/shared-a": ("bird", "frr"),
                "default/shared-b": ("bird", "frr"),
            },
            id="both-up",
        ),
        pytest.param(
            {"frr": SessionState.UP, "bird": SessionState.DOWN},
            {PeerName("frr"): ALL[PeerName("frr")]},
            {"default/web": ("frr",), "default/shared-a": ("frr",), "default/shared-b": ("frr",)},
            id="router-stopped-loses-the-peer",
        ),
        pytest.param(
            {"frr": SessionState.CONNECTED, "bird": SessionState.DOWN},
            {},
            {},
            id="no-session-established-no-object",
        ),
        pytest.param(
            {"frr": SessionState.UP, "bird": SessionState.UP},
            {PeerName("frr"): {P6: A}},
            {"default/web": ("frr",)},
            id="one-route-of-a-dual-stack-service-is-enough",
        ),
    ],
)
def test_service_peers(
    states: dict[str, SessionState], advertised: DesiredRoutes, expected: dict[str, tuple[str, ...]]
) -> None:
    view = View({PeerName(n): peer(n, s) for n, s in states.items()}, advertised)
    assert service_peers(DECISION, routes_on_the_wire(view)) == expected


def test_no_decision_no_service_objects() -> None:
    assert service_peers(None, ALL) == {}


def inputs(**over: Any) -> NodeInputs:
    base: dict[str, Any] = {
        "node": NodeName("n1"),
        "peers": {
            PeerName("frr"): peer("frr", SessionState.UP, 3, since=T0, desired=3, advertised=3),
            PeerName("bird"): peer("bird", SessionState.DOWN, 2, since=T0 + 5, desired=2),
        },
    }
    base.update(over)
    return NodeInputs(**base)


def test_node_status_shape() -> None:
    assert node_status(inputs()) == {
        "node": "n1",
        "summary": {"sessions": 2, "sessionsUp": 1, "advertised": 3},
        "sessions": [
            {
                "peer": "bird",
                "address": "192.0.2.2",
                "state": "down",
                "lastError": "connection refused",
                "desired": 2,
                "accepted": 2,
                "advertised": 0,
            },
            {
                "peer": "frr",
                "address": "192.0.2.1",
                "state": "up",
                "establishedAt": "2026-09-21T14:13:20Z",
                "lastError": "",
                "desired": 3,
                "accepted": 3,
                "advertised": 3,
            },
        ],
        "config": {"source": "file", "stale": False, "errors": []},
        "drain": {"state": "normal", "since": None},
    }


def test_node_status_with_bfd_drain_and_config_errors() -> None:
    bfd = BfdPeerState(
        peer=PeerName("frr"),
        address=ipaddress.ip_address("192.0.2.1"),
        local_address=ipaddress.ip_address("192.0.2.10"),
        state=BfdState.UP,
        since=T0 + 1,
        flaps=2,
        detect_ms=900,
    )
    got = node_status(
        inputs(
            bfd={PeerName("frr"): bfd},
            drain_state="draining",
            drain_since=T0 + 60,
            config_origin=ConfigOrigin.CLUSTER,
            config_errors=("BGPPeer[0]: bad", "", "disk full"),
            config_stale=True,
        )
    )
    assert got["sessions"][1]["bfd"] == {
        "state": "up",
        "since": "2026-09-21T14:13:21Z",
        "flaps": 2,
        "detectMs": 900,
    }
    assert "bfd" not in got["sessions"][0]
    assert got["drain"] == {"state": "draining", "since": "2026-09-21T14:14:20Z"}
    assert got["config"] == {
        "source": "cluster",
        "stale": True,
        "errors": ["BGPPeer[0]: bad", "disk full"],
    }


def test_an_idle_node_renders_the_same_status() -> None:
    """Nothing in the status changes by itself (no uptime, no "updated at")."""
    assert node_status(inputs()) == node_status(inputs())
