"""bgpd.inspection: `kubectl bgpd inspect` and `peers` as pure functions: the decision is
explain's, the advertised state comes from the status objects, and a node that wrote no
status is "unknown", never "not advertised"."""

from __future__ import annotations

from typing import Any

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.explain import decision_json, explain
from bgpd.inspection import (
    advertised_peers,
    inspect_json,
    inspect_service,
    inspect_table,
    node_status_from_json,
    peers_json,
    peers_table,
)
from bgpd.model import NodeName, PeerName, ServiceKey

WEB = ServiceKey("shop/web")
CFG = config(
    pools=[pool("v4", "198.51.100.0/24")],
    peers=[peer("tor-a", "172.31.250.1"), peer("tor-b", "172.31.250.2")],
    advertisements=[adv()],
)
SNAPSHOT = cluster(
    [
        svc(
            WEB,
            "198.51.100.10",
            local=True,
            annotations={"metallb.io/allow-shared-ip": "k"},
        )
    ],
    [eps(WEB, ep("n1"), ep("n2", ready=False))],
    [node("n1"), node("n2"), node("n3")],
)


def _node_status(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"node": name, **status}}


def test_each_node_gets_explains_decision_and_the_advertised_state() -> None:
    n1 = node_status_from_json(
        _node_status(
            "n1",
            sessions=[
                {"peer": "tor-a", "address": "172.31.250.1", "state": "up", "advertised": 1},
                {"peer": "tor-b", "address": "172.31.250.2", "state": "down"},
            ],
        )
    )
    n2 = node_status_from_json(_node_status("n2", sessions=[]))
    sbs = [
        {
            "status": {
                "node": "n1",
                "serviceNamespace": "shop",
                "serviceName": "web",
                "peers": ["tor-a"],
            }
        },
        {
            "status": {
                "node": "n1",
                "serviceNamespace": "shop",
                "serviceName": "db",
                "peers": ["tor-b"],
            }
        },
        {
            "status": {
                "node": "n2",
                "serviceNamespace": "shop",
                "serviceName": "web",
                "peers": ["tor-b"],
            }
        },
    ]
    result = inspect_service(
        CFG,
        SNAPSHOT,
        WEB,
        node_statuses={n1.node: n1, n2.node: n2},
        advertised=advertised_peers(sbs, WEB),
    )
    doc = inspect_json(result)
    assert doc["allocation"] == {
        "outcome": "kept",
        "pool": "v4",
        "ips": ["198.51.100.10"],
        "sharingKey": "k",
    }
    nodes = {n["node"]: n for n in doc["nodes"]}  # type: ignore[union-attr,index]
    assert nodes["n1"]["routes"] == [
        {"prefix": "198.51.100.10/32", "peer": "tor-a", "advertised": True},
        {"prefix": "198.51.100.10/32", "peer": "tor-b", "advertised": False},
    ]
    # n2 has no serving endpoint; its status still names tor-b (a withdrawal on its way).
    assert nodes["n2"]["announced"] is False
    assert nodes["n2"]["advertisedNotDesired"] == ["tor-b"]
    assert nodes["n2"]["endpoints"] == {"serving": 0, "total": 1}
    # The skips are explain's, entry for entry.
    for decision in explain(CFG, SNAPSHOT, [NodeName("n2"), NodeName("n3")]):
        expected = decision_json(decision, WEB)["skipped"]
        got = nodes[decision.node]["skipped"]
        assert got == [{k: v for k, v in e.items() if k != "service"} for e in expected]  # type: ignore[union-attr]
    # n3 wrote no BGPNodeStatus: unknown, not "no".
    assert nodes["n3"]["routes"] == []
    table = inspect_table(result)
    assert "sharing key k" in table
    assert "advertised, not desired" in table


def test_unknown_when_the_node_wrote_no_status() -> None:
    snapshot = cluster([svc(WEB, "198.51.100.10")], [eps(WEB, ep("n1"))], [node("n1")])
    result = inspect_service(CFG, snapshot, WEB, node_statuses={}, advertised={})
    assert {r.advertised for v in result.nodes for r in v.routes} == {None}
    assert "unknown" in inspect_table(result)


def test_a_missing_service() -> None:
    result = inspect_service(
        CFG, SNAPSHOT, ServiceKey("shop/nothing"), node_statuses={}, advertised={}
    )
    doc = inspect_json(result)
    assert (doc["found"], doc["type"], doc["allocation"]) == (False, None, None)
    assert inspect_table(result).splitlines()[1] == "  not found"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            {"metadata": {"name": "n1"}}, "BGPNodeStatus n1: has no status", id="no-status"
        ),
        pytest.param(
            _node_status("n1", sessions={"peer": "x"}),
            "status.sessions is not a list",
            id="sessions",
        ),
        pytest.param(_node_status("n1", sessions=[{}]), "sessions[0]: has no peer", id="no-peer"),
        pytest.param(
            _node_status("n1", sessions=[{"peer": "a", "advertised": "3"}]),
            "sessions[0].advertised: not an integer",
            id="count",
        ),
    ],
)
def test_malformed_node_status_is_one_message(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        node_status_from_json(doc)


def test_peers_table_and_json() -> None:
    statuses = [
        node_status_from_json(
            _node_status(
                "n2",
                sessions=[
                    {"peer": "tor-a", "state": "up", "establishedAt": "2026-12-02T01:00:00Z"}
                ],
                drain={"state": "draining"},
                config={"source": "cluster", "stale": True, "errors": ["BGPPeer x: bad"]},
            )
        ),
        node_status_from_json(
            _node_status(
                "n1",
                sessions=[
                    {
                        "peer": "tor-b",
                        "state": "down",
                        "lastError": "refused",
                        "bfd": {"state": "down"},
                    }
                ],
            )
        ),
    ]
    doc = peers_json(statuses)
    assert [n["node"] for n in doc["nodes"]] == ["n1", "n2"]  # type: ignore[index,union-attr]
    assert doc["nodes"][0]["sessions"][0]["bfd"] == "down"  # type: ignore[index,call-overload]
    table = peers_table(statuses).splitlines()
    assert table[1].split()[:4] == ["n1", "tor-b", "-", "down"]
    assert "node n2: drain draining; configuration stale: BGPPeer x: bad" in table
    assert peers_table([]).startswith("no BGP session reported")
    assert PeerName("tor-a") in {s.peer for s in statuses[0].sessions}


@pytest.mark.parametrize(
    "advertisement",
    [
        pytest.param(adv(), id="host-routes"),
        pytest.param(adv(aggregation_length=24, max_nodes=1), id="aggregate-fanout"),
        pytest.param(adv(link_bandwidth=1000), id="link-bandwidth"),
    ],
)
def test_one_services_routes_do_not_depend_on_the_others(advertisement: Any) -> None:
    """inspect decides each node for the asked Service alone; its routes (prefix, peer)
    and skips are what explain finds with every Service of the cluster, whether the
    others share its IP, its aggregate or nothing."""
    cfg = config(
        pools=[pool("v4", "198.51.100.0/24")],
        peers=[peer("tor-a", "172.31.250.1")],
        advertisements=[advertisement],
    )
    others = [
        svc("shop/shared", "198.51.100.10", annotations={"metallb.io/allow-shared-ip": "k"}),
        svc("shop/near", "198.51.100.11", local=True),
        svc("shop/idle", "198.51.100.12"),
    ]
    web = svc(WEB, "198.51.100.10", local=True, annotations={"metallb.io/allow-shared-ip": "k"})
    snapshot = cluster(
        [web, *others],
        [
            eps(WEB, ep("n1"), ep("n2")),
            eps("shop/shared", ep("n3")),
            eps("shop/near", ep("n3")),
        ],
        [node("n1"), node("n2"), node("n3")],
    )
    result = inspect_service(cfg, snapshot, WEB, node_statuses={}, advertised={})
    full = {d.node: d for d in explain(cfg, snapshot, sorted(snapshot.nodes))}
    for verdict in result.nodes:
        expected = decision_json(full[verdict.node], WEB)
        assert [(r.prefix, r.peer) for r in verdict.routes] == [
            (e["prefix"], e["peer"])  # type: ignore[index,call-overload]
            for e in expected["routes"]  # type: ignore[union-attr]
        ]
        assert [s.reason.value for s in verdict.skipped] == [
            e["reason"]  # type: ignore[index,call-overload]
            for e in expected["skipped"]  # type: ignore[union-attr]
        ]
    assert any(v.routes for v in result.nodes)
