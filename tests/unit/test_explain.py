"""Pure rendering of explain: the JSON contract (docs/cli.md) and the golden table.

The golden table lives in tests/data/golden/explain-table.txt; regenerate with
KUBE_BGPD_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from bgpd.config import load_config
from bgpd.explain import decision_json, explain, explain_json, explain_table
from bgpd.model import (
    Decision,
    NodeName,
    PeerName,
    Route,
    RouteAttributes,
    ServiceKey,
    Skip,
    SkipReason,
)
from bgpd.objects import parse_cluster_dump

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = DATA / "golden" / "explain-table.txt"
UPDATE = os.environ.get("KUBE_BGPD_UPDATE_GOLDEN") == "1"

A = ServiceKey("shop/a")
B = ServiceKey("shop/b")
DECISION = Decision(
    node=NodeName("n1"),
    routes=(
        Route(
            peer=PeerName("tor-a"),
            prefix=ipaddress.ip_network("198.51.100.0/24"),
            attributes=RouteAttributes(
                communities=("65000:1",), large_communities=("1:2:3",), local_pref=200, med=5
            ),
            services=(A, B),
        ),
    ),
    skipped=(
        Skip(ServiceKey("shop/c"), SkipReason.NO_LOCAL_ENDPOINTS),
        Skip(
            ServiceKey("shop/d"),
            SkipReason.NO_PEER_OF_FAMILY,
            ip=ipaddress.ip_address("2001:db8::1"),
            detail="IPv6 address; peers tor-a are IPv4 sessions",
        ),
    ),
)


def test_route_with_several_services_gives_one_entry_each() -> None:
    assert decision_json(DECISION) == {
        "node": "n1",
        "routes": [
            {
                "service": "shop/a",
                "prefix": "198.51.100.0/24",
                "peer": "tor-a",
                "communities": ["65000:1"],
                "largeCommunities": ["1:2:3"],
                "localPref": 200,
                "med": 5,
                "linkBandwidth": None,
            },
            {
                "service": "shop/b",
                "prefix": "198.51.100.0/24",
                "peer": "tor-a",
                "communities": ["65000:1"],
                "largeCommunities": ["1:2:3"],
                "localPref": 200,
                "med": 5,
                "linkBandwidth": None,
            },
        ],
        "skipped": [
            {"service": "shop/c", "reason": "noLocalEndpoints"},
            {
                "service": "shop/d",
                "reason": "noPeerOfFamily",
                "ip": "2001:db8::1",
                "detail": "IPv6 address; peers tor-a are IPv4 sessions",
            },
        ],
    }


@pytest.mark.parametrize(
    ("service", "routes", "skipped"),
    [
        pytest.param("shop/b", ["shop/b"], [], id="route-shared-with-another-service"),
        pytest.param("shop/d", [], ["shop/d"], id="skipped-only"),
        pytest.param("shop/zz", [], [], id="unknown-service-empty"),
    ],
)
def test_filter_by_service(service: str, routes: list[str], skipped: list[str]) -> None:
    obj = decision_json(DECISION, ServiceKey(service))
    assert [r["service"] for r in obj["routes"]] == routes
    assert [s["service"] for s in obj["skipped"]] == skipped


def test_single_node_is_an_object_else_a_list() -> None:
    other = Decision(node=NodeName("n2"))
    assert explain_json([DECISION], single=True) == decision_json(DECISION)
    assert explain_json([DECISION], single=False) == [decision_json(DECISION)]
    assert explain_json([DECISION, other], single=False) == [
        decision_json(DECISION),
        {"node": "n2", "routes": [], "skipped": []},
    ]
    with pytest.raises(ValueError, match="exactly one"):
        explain_json([DECISION, other], single=True)


def test_table_marks_large_communities_and_blanks() -> None:
    text = explain_table([DECISION])
    lines = text.splitlines()
    assert lines[0] == "node n1: 2 routes, 2 entries not announced"
    assert lines[1].split() == ["SERVICE", "PREFIX", "PEER", "COMMUNITIES", "LOCAL-PREF", "MED"]
    assert lines[2].split() == [
        "shop/a",
        "198.51.100.0/24",
        "tor-a",
        "65000:1,large:1:2:3",
        "200",
        "5",
    ]
    assert lines[4] == "  not announced:"
    assert lines[6].split() == ["shop/c", "noLocalEndpoints", "-"]
    assert explain_table([]) == ""


def test_table_golden() -> None:
    result = load_config([DATA / "explain" / "config.yaml"])
    assert result.config is not None, result.errors
    snapshot = parse_cluster_dump((DATA / "explain" / "cluster.yaml").read_text())
    text = explain_table(explain(result.config, snapshot, sorted(snapshot.nodes)))
    if UPDATE:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
