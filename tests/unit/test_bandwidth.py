"""Weighted ECMP for Local (bgpd.bandwidth): the link-bandwidth value decide() puts on each
route, the ExaBGP text plan() writes for it (checked against ExaBGP's own parser), the
config field, and how explain shows it."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc
from configkit import adv as adv_doc
from configkit import messages, parse
from configkit import peer as peer_doc
from configkit import pool as pool_doc
from exabgp.configuration.static.parser import _extended_community

from bgpd.bandwidth import AS_TRANS, MAX_BYTES_PER_SECOND, MBIT_PER_SECOND, exabgp_text
from bgpd.decision import decide
from bgpd.exabgp.plan import attribute_text, drained, plan
from bgpd.explain import decision_from_json, decision_json, explain_table
from bgpd.model import (
    ClusterSnapshot,
    Config,
    LinkBandwidth,
    NodeName,
    PeerName,
    RouteAttributes,
)

V4 = pool("v4", "198.51.100.0/24")
V6 = pool("v6", "2001:db8:100::/120")
TOR = peer("tor-a", "172.31.250.1")
TOR6 = peer("tor-a-v6", "fd00:99::1")
UNIT = MBIT_PER_SECOND
WEIGHTED = config(pools=[V4, V6], peers=[TOR, TOR6], advertisements=[adv(link_bandwidth=UNIT)])
N1, N2 = node("n1"), node("n2")
S, T = "default/web", "default/api"


def on(*nodes: str, **conditions: bool | None) -> tuple:
    return tuple(ep(n, **conditions) for n in nodes)


def bandwidths(cfg: Config, snapshot: ClusterSnapshot) -> dict[tuple[str, str], int | None]:
    """(peer, prefix) -> bytes/s of node n1's routes (None: no community)."""
    out: dict[tuple[str, str], int | None] = {}
    for r in decide(cfg, snapshot, NodeName("n1")).routes:
        lb = r.attributes.link_bandwidth
        out[(r.peer, str(r.prefix))] = None if lb is None else lb.bytes_per_second
    return out


ONE = ("tor-a", "198.51.100.1/32")
#: Two Services' /32s in one /24 to one peer.
AGGREGATED = config(
    pools=[V4], peers=[TOR], advertisements=[adv(aggregation_length=24, link_bandwidth=UNIT)]
)

CASES = [
    pytest.param(
        WEIGHTED,
        cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1", "n1", "n2"))]),
        {ONE: 3 * UNIT},
        id="local-counts-this-nodes-endpoints",
    ),
    pytest.param(
        WEIGHTED,
        cluster(
            [svc(S, "198.51.100.1", local=True)],
            [
                eps(
                    S,
                    *on("n1", "n1"),
                    ep("n1", ready=False, serving=False),
                    ep("n1", ready=False, serving=True, terminating=True),
                )
            ],
        ),
        {ONE: 3 * UNIT},
        id="only-endpoints-that-can-serve-count",
    ),
    pytest.param(
        WEIGHTED,
        cluster([svc(S, "198.51.100.1")], [eps(S, *on("n1", "n1", "n2"))]),
        {ONE: None},
        id="cluster-policy-carries-none",
    ),
    pytest.param(
        config(pools=[V4], peers=[TOR], advertisements=[adv()]),
        cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1"))]),
        {ONE: None},
        id="off-by-default",
    ),
    pytest.param(
        WEIGHTED,
        cluster(
            [svc(S, "198.51.100.1", "2001:db8:100::1", local=True)],
            [
                eps(S, *on("n1", "n1"), name="web-v4"),
                eps(S, *on("n1", "n1"), name="web-v6", address_type="IPv6"),
            ],
        ),
        {ONE: 2 * UNIT, ("tor-a-v6", "2001:db8:100::1/128"): 2 * UNIT},
        id="dual-stack-pod-counts-once",
    ),
    pytest.param(
        WEIGHTED,
        cluster(
            [svc(S, "198.51.100.1", local=True)],
            [eps(S, *on("n1"), name="web-a"), eps(S, *on("n1", "n2"), name="web-b")],
        ),
        {ONE: 2 * UNIT},
        id="slices-of-one-family-add-up",
    ),
    pytest.param(
        AGGREGATED,
        cluster(
            [svc(S, "198.51.100.1", local=True), svc(T, "198.51.100.2", local=True)],
            [eps(S, *on("n1", "n1")), eps(T, *on("n1"))],
        ),
        {("tor-a", "198.51.100.0/24"): 3 * UNIT},
        id="aggregate-of-local-services-is-the-sum",
    ),
    pytest.param(
        AGGREGATED,
        cluster(
            [svc(S, "198.51.100.1", local=True), svc(T, "198.51.100.2")],
            [eps(S, *on("n1", "n1")), eps(T, *on("n1"))],
        ),
        {("tor-a", "198.51.100.0/24"): None},
        id="aggregate-with-a-cluster-service-carries-none",
    ),
    pytest.param(
        config(
            pools=[V4],
            peers=[TOR],
            advertisements=[adv("a", link_bandwidth=UNIT), adv("b", link_bandwidth=2 * UNIT)],
        ),
        cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1"))]),
        {ONE: 4 * UNIT},
        id="one-service-two-advertisements-counts-once-larger-value",
    ),
    pytest.param(
        config(pools=[V4], peers=[TOR], advertisements=[adv("a", link_bandwidth=UNIT), adv("b")]),
        cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1"))]),
        {ONE: None},
        id="an-advertisement-without-it-on-the-same-route-leaves-none",
    ),
    pytest.param(
        config(pools=[V4], peers=[TOR], advertisements=[adv(link_bandwidth=MAX_BYTES_PER_SECOND)]),
        cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1"))]),
        {ONE: MAX_BYTES_PER_SECOND},
        id="clamped-to-32-bits",
    ),
]


@pytest.mark.parametrize(("cfg", "snapshot", "expected"), CASES)
def test_decide_link_bandwidth(
    cfg: Config, snapshot: ClusterSnapshot, expected: dict[tuple[str, str], int | None]
) -> None:
    snap = cluster(snapshot.services.values(), _slices(snapshot), [N1, N2])
    assert bandwidths(cfg, snap) == expected


def _slices(snapshot: ClusterSnapshot) -> list:
    return [s for group in snapshot.endpoint_slices.values() for s in group]


def test_community_as_is_the_speakers_or_as_trans() -> None:
    four_octet = config(
        pools=[V4],
        peers=[peer("tor-a", "172.31.250.1", my_asn=4200000001)],
        advertisements=[adv(link_bandwidth=UNIT)],
    )
    snap = cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1"))], [N1])
    [route] = decide(WEIGHTED, snap, NodeName("n1")).routes
    assert route.attributes.link_bandwidth == LinkBandwidth(64512, UNIT)
    [route] = decide(four_octet, snap, NodeName("n1")).routes
    assert route.attributes.link_bandwidth == LinkBandwidth(AS_TRANS, UNIT)


def test_endpoint_count_change_is_a_reannounce_without_withdraw() -> None:
    """3 -> 4 pods: the driver's plan is one announce with the new value (BGP implicit
    withdraw), no withdraw in between, so the router never loses the next hop."""
    before = cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1", "n1"))], [N1])
    after = cluster(
        [svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1", "n1", "n1"))], [N1]
    )
    have = decide(WEIGHTED, before, NodeName("n1")).by_peer()
    want = decide(WEIGHTED, after, NodeName("n1")).by_peer()
    sel = {PeerName("tor-a"): "neighbor 172.31.250.1"}
    commands = plan(have, want, sel)
    assert [c.text for c in commands] == [
        "neighbor 172.31.250.1 announce attributes next-hop self "
        "extended-community [ bandwidth:64512:500000 ] nlri 198.51.100.1/32"
    ]


def test_attribute_text_and_exabgp_encodes_the_drafts_community() -> None:
    attrs = RouteAttributes(communities=("65000:1",), link_bandwidth=LinkBandwidth(64512, 375000))
    assert attribute_text(attrs) == (
        "next-hop self community [ 65000:1 ] extended-community [ bandwidth:64512:375000 ]"
    )
    # ExaBGP 5.0's own parser: type 0x40 (non-transitive two-octet AS), subtype 0x04, the
    # AS and the value as an IEEE float, bytes per second.
    packed = _extended_community(exabgp_text(LinkBandwidth(64512, 375000))).community
    assert packed[:2] == bytes([0x40, 0x04])
    assert struct.unpack("!Hf", packed[2:8]) == (64512, 375000.0)


def test_drain_keeps_the_bandwidth() -> None:
    lb = LinkBandwidth(64512, UNIT)
    prefix = ipaddress.ip_network("198.51.100.1/32")
    out = drained({PeerName("tor-a"): {prefix: RouteAttributes(link_bandwidth=lb)}}, [])
    assert out[PeerName("tor-a")][prefix] == RouteAttributes(
        communities=("65535:0",), link_bandwidth=lb
    )


def test_explain_shows_it_and_reads_it_back() -> None:
    snap = cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1"))], [N1])
    decision = decide(WEIGHTED, snap, NodeName("n1"))
    doc = decision_json(decision)
    [entry] = doc["routes"]  # type: ignore[misc]
    assert entry["linkBandwidth"] == {"asn": 64512, "bytesPerSecond": 2 * UNIT}
    assert decision_from_json(doc) == decision
    assert "bandwidth:64512:250000" in explain_table([decision])


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param(
            0,
            "BGPAdvertisement adv: spec.linkBandwidthPerEndpoint: 0 is out of range (1-4294967295)",
            id="zero",
        ),
        pytest.param(
            "1Mbps",
            "BGPAdvertisement adv: spec.linkBandwidthPerEndpoint: must be an integer, not a string",
            id="text",
        ),
        pytest.param(
            True,
            "BGPAdvertisement adv: spec.linkBandwidthPerEndpoint: must be an integer, not a "
            "boolean",
            id="boolean",
        ),
    ],
)
def test_config_field_errors(value: object, error: str) -> None:
    result = parse(pool_doc(), peer_doc(), adv_doc(linkBandwidthPerEndpoint=value))
    assert not result.ok
    assert messages(result.errors) == [error]


def test_config_field_parses() -> None:
    result = parse(pool_doc(), peer_doc(), adv_doc(linkBandwidthPerEndpoint=125000))
    assert result.config is not None
    [a] = result.config.advertisements
    assert a.link_bandwidth_per_endpoint == 125000
    result = parse(pool_doc(), peer_doc(), adv_doc())
    assert result.config is not None
    assert result.config.advertisements[0].link_bandwidth_per_endpoint is None


def test_endpoints_are_counted_twice_only_when_an_advertisement_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether a Local Service serves on this node counts its endpoints once; counting
    them again for a link bandwidth happens only for an advertisement that asks for one
    (a first decision at 10,000 Services counted 10,000 times for nothing)."""
    import bgpd.bandwidth
    import bgpd.decision

    calls: list[str] = []

    def counting(slices: object, node: str) -> int:
        calls.append(node)
        return bgpd.bandwidth.serving_endpoints(slices, node)  # type: ignore[arg-type]

    monkeypatch.setattr(bgpd.decision, "serving_endpoints", counting)
    snapshot = cluster([svc(S, "198.51.100.1", local=True)], [eps(S, *on("n1", "n1"))], [N1])
    plain = config(pools=[V4], peers=[TOR], advertisements=[adv()])
    assert bandwidths(plain, snapshot) == {ONE: None}
    assert len(calls) == 1
    calls.clear()
    assert bandwidths(WEIGHTED, snapshot) == {ONE: 2 * UNIT}
    assert len(calls) == 2
