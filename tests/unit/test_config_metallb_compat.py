"""MetalLB configurations that must validate (issue 16, items 6 and 7): BGPPeer timers and
ASN fields MetalLB users have in their files, and the localPref cross-check that refuses
only what no node set can make valid. Each row states the MetalLB rule it follows."""

from __future__ import annotations

from typing import Any

import pytest
from clusterkit import cluster, ep, eps, node, svc
from configkit import adv, messages, parse, peer, pool

from bgpd.decision import decide
from bgpd.model import NodeName

# --------------------------------------------------------------------------- keepaliveTime

KEEPALIVE = [
    # MetalLB's own sample (configsamples): hold 9m, keepalive 0s. ExaBGP sends every 180 s.
    pytest.param(
        {"holdTime": "9m0s", "keepaliveTime": "0s"},
        540,
        0,
        [
            "BGPPeer tor-a: spec.keepaliveTime: 0s is not what ExaBGP does: it sends "
            "keepalives every holdTime/3 (180s), which is the interval in force"
        ],
        id="metallb-sample-keepalive-zero",
    ),
    pytest.param(
        {"holdTime": "90s", "keepaliveTime": "10s"},
        90,
        10,
        [
            "BGPPeer tor-a: spec.keepaliveTime: 10s is not what ExaBGP does: it sends "
            "keepalives every holdTime/3 (30s), which is the interval in force"
        ],
        id="keepalive-not-third-warns",
    ),
    pytest.param({"holdTime": "90s", "keepaliveTime": "30s"}, 90, 30, [], id="keepalive-third"),
    # Hold time 0: no keepalives on either side (RFC 4271 4.4), whatever keepaliveTime says.
    pytest.param({"holdTime": "0s", "keepaliveTime": "0s"}, 0, 0, [], id="no-keepalives"),
]


@pytest.mark.parametrize(("spec", "hold", "keepalive", "warnings"), KEEPALIVE)
def test_keepalive_time_is_accepted_with_the_interval_in_force(
    spec: dict[str, str], hold: int, keepalive: int, warnings: list[str]
) -> None:
    result = parse(peer(**spec))
    assert result.config is not None, messages(result.errors)
    p = result.config.peers[0]
    assert (p.hold_time, p.keepalive_time) == (hold, keepalive)
    assert messages(result.warnings) == warnings


# --------------------------------------------------------------------------- connectTime


def test_connect_time_is_accepted_with_the_retry_in_force() -> None:
    result = parse(peer(connectTime="10s"))
    assert result.config is not None, messages(result.errors)
    assert result.config.peers[0].connect_time == 10
    assert messages(result.warnings) == [
        "BGPPeer tor-a: spec.connectTime: 10s is not used: ExaBGP retries a down session "
        "after 0, 1, 2, ... up to 60 s (its fixed back-off); SpeakerConfig spec.listen: true "
        "lets the router reconnect at once"
    ]


# --------------------------------------------------------------------------- ASN fields

ASN_ERRORS = [
    pytest.param(
        {"dynamicASN": "internal"},
        ["BGPPeer tor-a: spec: peerASN and dynamicASN are mutually exclusive: set one"],
        id="dynamic-and-peer-asn",
    ),
    pytest.param(
        {"peerASN": None, "dynamicASN": "auto"},
        ["BGPPeer tor-a: spec.dynamicASN: 'auto' must be internal or external"],
        id="dynamic-unknown-mode",
    ),
    pytest.param(
        {"peerASN": None},
        ["BGPPeer tor-a: spec.peerASN: is required"],
        id="neither-peer-asn-nor-dynamic",
    ),
    # MetalLB: "invalid ebgp-multihop parameter set for an ibgp peer"; internal is iBGP.
    pytest.param(
        {"peerASN": None, "dynamicASN": "internal", "ebgpMultiHop": True},
        ["BGPPeer tor-a: spec.ebgpMultiHop: must not be set for an iBGP peer (myASN == peerASN)"],
        id="dynamic-internal-multihop",
    ),
    pytest.param(
        {"vrf": "a-vrf-name-too-long"},
        [
            "BGPPeer tor-a: spec.vrf: 'a-vrf-name-too-long' is not a VRF device name (1-15 of "
            "A-Z a-z 0-9 _ . -)"
        ],
        id="vrf-name-too-long",
    ),
    pytest.param(
        {"vrf": "red blue"},
        [
            "BGPPeer tor-a: spec.vrf: 'red blue' is not a VRF device name "
            "(1-15 of A-Z a-z 0-9 _ . -)"
        ],
        id="vrf-name-with-space",
    ),
    pytest.param(
        {"vrf": ".."},
        ["BGPPeer tor-a: spec.vrf: '..' is not a VRF device name (1-15 of A-Z a-z 0-9 _ . -)"],
        id="vrf-name-dots",
    ),
    pytest.param(
        {"peerAddress": None, "interface": "eth0"},
        [
            "BGPPeer tor-a: spec.interface: not supported: ExaBGP has no BGP unnumbered (it "
            "cannot learn the router's link-local address from an interface); set peerAddress "
            "to an address of the router",
            "BGPPeer tor-a: spec.peerAddress: is required",
        ],
        id="interface",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), ASN_ERRORS)
def test_peer_fields_exabgp_cannot_carry_are_refused_with_why(
    spec: dict[str, Any], expected: list[str]
) -> None:
    result = parse(peer(**spec))
    assert result.config is None
    assert messages(result.errors) == expected


def test_dynamic_asn_internal_peers_with_my_asn() -> None:
    """MetalLB: internal denies a neighbour whose ASN is not myASN; rendering peer-as = myASN
    makes ExaBGP refuse such an OPEN in the same way."""
    result = parse(peer(peerASN=None, dynamicASN="internal"))
    assert result.config is not None, messages(result.errors)
    p = result.config.peers[0]
    assert (p.my_asn, p.peer_asn, p.is_ibgp) == (64512, 64512, True)
    assert p.dynamic_asn == "internal"


def test_dynamic_asn_external_learns_the_routers_asn() -> None:
    """MetalLB: external accepts the neighbour's ASN from its OPEN (FRR `remote-as
    external`); ExaBGP's `peer-as auto` does the same, and the session is eBGP."""
    result = parse(peer(peerASN=None, dynamicASN="external"))
    assert result.config is not None, messages(result.errors)
    p = result.config.peers[0]
    assert (p.peer_asn, p.dynamic_asn, p.is_ibgp) == (0, "external", False)
    assert messages(result.warnings) == []


def test_vrf_names_the_device_the_session_runs_in() -> None:
    """MetalLB: the session runs in the named VRF; kube-bgpd binds ExaBGP's socket to it."""
    result = parse(peer(vrf="red"))
    assert result.config is not None, messages(result.errors)
    assert result.config.peers[0].vrf == "red"


# --------------------------------------------------------------------------- localPref

R1 = [{"matchLabels": {"rack": "r1"}}]
Z1 = [{"matchLabels": {"zone": "z1"}}]


LOCAL_PREF_WARNINGS = [
    # MetalLB's BGPAdvertisementsHaveCompatibleLocalPref, restricted to what is invalid for
    # every node set: a nodeSelector that may match no node (or not both) leaves it valid.
    pytest.param(
        [adv("a", localPref=100, nodeSelectors=R1), adv("b", localPref=200, nodeSelectors=Z1)],
        "BGPAdvertisement b: spec.localPref: 200 conflicts with localPref 100 of "
        "BGPAdvertisement a for pool pool-a on a node both nodeSelectors match; there the "
        "higher localPref is sent",
        id="both-selected",
    ),
    pytest.param(
        [adv("a", localPref=100), adv("b", nodeSelectors=Z1)],
        "BGPAdvertisement b: spec.localPref: unset conflicts with localPref 100 of "
        "BGPAdvertisement a for pool pool-a on a node both nodeSelectors match; there the "
        "higher localPref is sent",
        id="one-selected-one-unset",
    ),
]


@pytest.mark.parametrize(("advs", "warning"), LOCAL_PREF_WARNINGS)
def test_local_pref_conflict_that_depends_on_nodes_validates_with_a_warning(
    advs: list[dict[str, Any]], warning: str
) -> None:
    result = parse(pool(), *advs)
    assert result.config is not None, messages(result.errors)
    assert warning in messages(result.warnings)


def test_local_pref_conflict_is_resolved_per_node_by_the_higher_value() -> None:
    """The rule the warning names, in decide(): on a node only `a` selects, its localPref;
    on a node both select, the higher one (deterministic, whatever the order)."""
    result = parse(
        pool(addresses=["198.51.100.0/24"]),
        peer(peerASN=64512),
        adv("a", localPref=100, nodeSelectors=R1),
        adv("b", localPref=200, nodeSelectors=Z1),
    )
    assert result.config is not None, messages(result.errors)
    s = "default/web"
    snapshot = cluster(
        [svc(s, "198.51.100.1")],
        [eps(s, ep("n1"), ep("n2"))],
        [node("n1", rack="r1"), node("n2", rack="r1", zone="z1")],
    )
    config = result.config
    prefs = {
        name: [r.attributes.local_pref for r in decide(config, snapshot, NodeName(name)).routes]
        for name in ("n1", "n2")
    }
    assert prefs == {"n1": [100], "n2": [200]}
