"""Parsing routers' output into RibPath and session states (kbgpd_lab.lab.routers), and the
lab's cluster dump (kbgpd_lab.lab.lab): pure functions, on output captured from FRR 8.4,
BIRD 2.0.12 and GoBGP 3.10 on this kind of machine."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from bgpd.objects import parse_cluster_dump
from kbgpd_lab.lab.lab import LabService, cluster_dump
from kbgpd_lab.lab.routers import (
    RibPath,
    bird_session_marks,
    count_bird_ups,
    parse_bird_changes,
    parse_bird_protocols,
    parse_bird_restarting,
    parse_bird_routes,
    parse_frr_path,
    parse_frr_restarting,
    parse_frr_since,
    parse_gobgp_path,
    router_config,
)

BIRD_ROUTES = """\
BIRD 2.0.12 ready.
Table master4:
10.99.100.1/32       unicast [dyn4_0_1 15:57:00.936] * (100) [AS64513i]
\tvia 172.31.250.11 on br0
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 64513
\tBGP.next_hop: 172.31.250.11
\tBGP.med: 5
\tBGP.local_pref: 100
\tBGP.community: (1,2) (65535,0)
\tBGP.large_community: (1, 2, 3)
                     unicast [dyn4_0_2 15:57:00.962] (100) [AS64513i]
\tvia 172.31.250.12 on br0
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 64513
\tBGP.next_hop: 172.31.250.12
\tBGP.local_pref: 100
10.99.100.2/32       unicast [static1 15:57:00.936] * (200)
\tvia 172.31.250.13 on br0
\tType: static univ
fd00:99:100::1/128   unicast [dyn6_0_1 15:57:00.983] * (100) [AS64513i]
\tvia fd00:99:250::13 on br0
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path:
\tBGP.next_hop: fd00:99:250::13 fe80::1
\tBGP.local_pref: 250
"""

BIRD_PROTOCOLS = """\
BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
kernel4    Kernel     master4    up     15:57:00.211
  Channel ipv4
    Route change stats:     received   rejected   filtered    ignored   accepted
      Import updates:              0          0          0          0          0
nodes4_0   BGP        ---        start  15:57:00.211  Passive
  BGP state:          Passive
    Neighbor range:   172.31.250.0/24
dyn4_0_1   BGP        ---        up     15:57:00.931  Established
  BGP state:          Established
    Neighbor address: 172.31.250.11
    Neighbor AS:      64513
  Channel ipv4
    Route change stats:     received   rejected   filtered    ignored   accepted
      Import updates:              3          0          0          0          3
      Import withdraws:            2          0        ---          0          2
      Export updates:              1          1          0        ---          0
static6_0  BGP        ---        start  15:57:00.211  Active
  BGP state:          Active
    Neighbor address: fd00:99:250::12
"""

#: BIRD's log with ``debug protocols { states }``: a session of dyn4_0_1 replaced 2 ms
#: after it went down (as fast as the duplicate-speaker test saw).
BIRD_LOG = """\
2026-12-02 04:41:36.171 <TRACE> kernel4: Starting
2026-12-02 04:41:36.171 <TRACE> kernel4: State changed to up
2026-12-02 04:41:36.171 <INFO> Started
2026-12-02 04:41:37.846 <TRACE> dyn4_0_1: State changed to up
2026-12-02 04:41:39.653 <TRACE> dyn4_0_1: State changed to start
2026-12-02 04:41:39.655 <TRACE> dyn4_0_1: State changed to up
2026-12-02 04:41:39.700 <RMT> dyn4_0_1: Received: State changed to up
"""


def net(text: str) -> Any:
    return ipaddress.ip_network(text)


def ip(text: str) -> Any:
    return ipaddress.ip_address(text)


def test_bird_routes_every_path_with_attributes() -> None:
    rib = parse_bird_routes(BIRD_ROUTES)
    assert rib == {
        net("10.99.100.1/32"): [
            RibPath(ip("172.31.250.11"), ("1:2", "65535:0"), ("1:2:3",), 100, 5, (64513,)),
            RibPath(ip("172.31.250.12"), (), (), 100, None, (64513,)),
        ],
        # Not BGP (no BGP.next_hop): not in the BGP RIB view.
        net("fd00:99:100::1/128"): [RibPath(ip("fd00:99:250::13"), local_pref=250)],
    }


def test_bird_changes_received_count_updates_and_withdrawals() -> None:
    assert parse_bird_changes(BIRD_PROTOCOLS) == {
        ip("172.31.250.11"): 5,
        ip("fd00:99:250::12"): 0,
    }


def test_sessions_since_marks_established_sessions_only() -> None:
    assert bird_session_marks(BIRD_PROTOCOLS, BIRD_LOG) == {ip("172.31.250.11"): "dyn4_0_1#2"}
    frr = {
        "172.31.250.11": {
            "bgpState": "Established",
            "connectionsEstablished": 2,
            "bgpTimerUpEstablishedEpoch": 1764621000,
        },
        "fd00:99:250::11": {"bgpState": "Active", "connectionsEstablished": 1},
        "NODES": {"bgpState": "Established"},
    }
    assert parse_frr_since(frr) == {ip("172.31.250.11"): "2"}


def test_bird_protocols_states_by_neighbor() -> None:
    assert parse_bird_protocols(BIRD_PROTOCOLS) == {
        ip("172.31.250.11"): "Established",
        ip("fd00:99:250::12"): "Active",
    }


#: ``show protocols all`` (trimmed): node1's IPv4 session down within its restart time,
#: node2's back and waiting for End-of-RIB, node3's over.
BIRD_RESTARTING = """\
BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
static4_0  BGP        ---        start  18:27:24.202  Active        Socket: Connection closed
  BGP state:          Active
    Neighbor address: 172.31.250.11
    Neighbor AS:      64513
    Neighbor graceful restart active
    Restart timer:    119.613/-
  Channel ipv4
    State:          START
    Neighbor GR:    Regular
static4_1  BGP        ---        up     18:27:25.444  Established
  BGP state:          Established
    Neighbor address: 172.31.250.12
    Neighbor graceful restart active
    Neighbor ID:      172.31.250.12
  Channel ipv4
    Neighbor GR:    Regular
static4_2  BGP        ---        up     18:27:25.444  Established
  BGP state:          Established
    Neighbor address: 172.31.250.13
    Neighbor ID:      172.31.250.13
"""


def test_bird_restarting_peers() -> None:
    assert parse_bird_restarting(BIRD_RESTARTING) == {ip("172.31.250.11"), ip("172.31.250.12")}
    assert parse_bird_restarting(BIRD_PROTOCOLS) == set()


def _frr_neighbor(state: str, gr: dict[str, Any]) -> dict[str, Any]:
    return {"bgpState": state, "gracefulRestartInfo": gr}


def _frr_eor(received: bool) -> dict[str, Any]:
    return {"fBit": True, "endOfRibStatus": {"endOfRibSend": True, "endOfRibRecv": received}}


@pytest.mark.parametrize(
    ("neighbors", "expected"),
    [
        pytest.param(
            {"172.31.250.11": _frr_neighbor("Idle", {"gracefulRestartTimerMsecs": 119000})},
            {"172.31.250.11"},
            id="down-restart-timer-runs",
        ),
        pytest.param(
            {"172.31.250.11": _frr_neighbor("Active", {"endOfRibRecv": {}})},
            set(),
            id="down-no-graceful-restart",
        ),
        pytest.param(
            {"172.31.250.11": _frr_neighbor("Established", {"ipv4Unicast": _frr_eor(False)})},
            {"172.31.250.11"},
            id="up-waiting-for-eor",
        ),
        pytest.param(
            {
                "172.31.250.11": _frr_neighbor(
                    "Established",
                    {"gracefulStalepathTimerMsecs": 349000, "ipv4Unicast": _frr_eor(True)},
                ),
                "NODES4": {"peerGroupMembers": {}},
            },
            set(),
            id="up-eor-received",
        ),
    ],
)
def test_frr_restarting_peers(neighbors: dict[str, Any], expected: set[str]) -> None:
    assert parse_frr_restarting(neighbors) == {ip(a) for a in expected}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            {
                "aspath": {"string": "64513 64600"},
                "metric": 5,
                "locPrf": 100,
                "community": {"string": "1:2 graceful-shutdown no-export"},
                "largeCommunity": {"string": "1:2:3"},
                "nexthops": [{"ip": "172.31.250.12", "afi": "ipv4", "used": True}],
            },
            RibPath(
                ip("172.31.250.12"),
                ("1:2", "65535:0", "65535:65281"),
                ("1:2:3",),
                100,
                5,
                (64513, 64600),
            ),
            id="ebgp-attributes",
        ),
        pytest.param(
            {
                "aspath": {"string": ""},
                "locPrf": 250,
                "stale": True,
                "nexthops": [
                    {"ip": "fe80::1", "scope": "link-local"},
                    {"ip": "fd00:99:250::11", "scope": "global"},
                ],
            },
            RibPath(ip("fd00:99:250::11"), local_pref=250, stale=True),
            id="ipv6-global-next-hop-stale",
        ),
    ],
)
def test_frr_paths(path: dict[str, Any], expected: RibPath) -> None:
    assert parse_frr_path(path) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            {
                "attrs": [
                    {"type": 1, "value": 0},
                    {"type": 2, "as_paths": [{"segment_type": 2, "num": 1, "asns": [64513]}]},
                    {"type": 3, "nexthop": "172.31.250.11"},
                    {"type": 4, "metric": 5},
                    {"type": 8, "communities": [65538, 4294901760]},
                    {"type": 32, "value": [{"ASN": 1, "LocalData1": 2, "LocalData2": 3}]},
                ],
            },
            RibPath(ip("172.31.250.11"), ("1:2", "65535:0"), ("1:2:3",), None, 5, (64513,)),
            id="ipv4",
        ),
        pytest.param(
            {
                "stale": True,
                "attrs": [
                    {"type": 5, "value": 200},
                    {"type": 14, "nexthop": "fd00:99:250::13", "afi": 2, "safi": 1},
                ],
            },
            RibPath(ip("fd00:99:250::13"), local_pref=200, stale=True),
            id="ipv6-mp-reach",
        ),
    ],
)
def test_gobgp_paths(path: dict[str, Any], expected: RibPath) -> None:
    assert parse_gobgp_path(path) == expected


@pytest.mark.parametrize(
    "password",
    [
        pytest.param("a b", id="space"),
        pytest.param('a"b', id="quote"),
        pytest.param("", id="empty"),
    ],
)
def test_router_md5_password_that_cannot_be_written_is_refused(password: str) -> None:
    with pytest.raises(ValueError, match="MD5 password"):
        router_config(md5_password=password)


def test_router_config_converts_strings() -> None:
    cfg = router_config(static_neighbors=["172.31.250.11"], neighbor_ranges=["10.0.0.0/8"])
    assert cfg.static_neighbors == (ip("172.31.250.11"),)
    assert cfg.neighbor_ranges == (net("10.0.0.0/8"),)
    assert not cfg.ibgp
    assert router_config(peer_asn=64512).ibgp


def test_lab_cluster_dump_reads_back_with_the_products_parser() -> None:
    services = [
        LabService("web", ("10.99.100.1", "fd00:99:100::1"), pod_nodes=(1, 2)),
        LabService("api", ("10.99.100.2",), pod_nodes=(3,), policy="Local", namespace="shop"),
    ]
    nodes = {f"node{i}": [f"172.31.250.{10 + i}", f"fd00:99:250::{10 + i}"] for i in (1, 2, 3)}
    snap = parse_cluster_dump(cluster_dump(services, nodes))
    by_name = {s.name: s for s in snap.services.values()}
    assert by_name["web"].ingress_ips == (ip("10.99.100.1"), ip("fd00:99:100::1"))
    assert by_name["api"].ingress_ips == (ip("10.99.100.2"),)
    assert str(by_name["api"].external_traffic_policy) == "Local"
    assert set(snap.nodes) == {"node1", "node2", "node3"}
    pods = {
        key: sorted({str(ep.node_name) for ep in snap.endpoints_of(key)}) for key in snap.services
    }
    assert sorted(pods.values()) == [["node1", "node2"], ["node3"]]


def test_bird_ups_count_each_protocols_up_lines_only() -> None:
    assert count_bird_ups(BIRD_LOG) == {"kernel4": 1, "dyn4_0_1": 2}


def test_bird_session_mark_changes_with_a_new_session_only() -> None:
    first = bird_session_marks(BIRD_PROTOCOLS, BIRD_LOG)
    again = bird_session_marks(
        BIRD_PROTOCOLS,
        BIRD_LOG + "2026-12-02 04:41:40.900 <TRACE> static4_0: State changed to up\n",
    )
    replaced = bird_session_marks(
        BIRD_PROTOCOLS,
        BIRD_LOG
        + "2026-12-02 04:41:40.706 <TRACE> dyn4_0_1: State changed to start\n"
        + "2026-12-02 04:41:40.708 <TRACE> dyn4_0_1: State changed to up\n",
    )
    assert first == again
    assert first != replaced
