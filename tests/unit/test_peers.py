"""peers_for_node(): which BGPPeers a node has a session with, and why not the others;
decide(), explain and the ExaBGP renderer all follow it."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, selector, svc

from bgpd.decision import Decider, decide
from bgpd.exabgp.render import render
from bgpd.explain import decision_from_json, decision_json, explain_table
from bgpd.model import (
    BGPPeer,
    ClusterSnapshot,
    Config,
    DesiredRoutes,
    IPAddress,
    Node,
    NodeName,
    PeerName,
    PeerSkip,
    PeerSkipReason,
    SkipReason,
)
from bgpd.peers import local_address, peers_for_node
from bgpd.reconciler import Reconciler

ip = ipaddress.ip_address

NO_ADDRESSES: tuple[tuple[str, str], ...] = ()
V4_ONLY = (("InternalIP", "172.31.250.11"),)

V4 = peer("v4", "172.31.250.1")
V6 = peer("v6", "fd00:99:250::1")
RACK2 = peer("rack2", "172.31.251.1", nodes=[selector(rack="r2")])
SOURCED = BGPPeer(
    name=PeerName("sourced"),
    my_asn=64512,
    peer_asn=64512,
    peer_address=ip("fd00:99:251::1"),
    source_address=ip("fd00:99:251::11"),
)


def _no_address(name: str, family: int) -> PeerSkip:
    return PeerSkip(
        PeerName(name),
        PeerSkipReason.NO_LOCAL_ADDRESS,
        f"no local address of IPv{family} (no sourceAddress, no route to the peer, no InternalIP)",
    )


def _selectors(name: str) -> PeerSkip:
    return PeerSkip(PeerName(name), PeerSkipReason.NODE_SELECTORS)


@pytest.mark.parametrize(
    ("peers", "node_obj", "kernel", "sessions", "skipped"),
    [
        pytest.param(
            (V4, V6), node("n1"), {}, {"v4": "172.31.250.11", "v6": "fd00:99:250::11"}, (),
            id="internal-ips",
        ),
        pytest.param(
            (V4, RACK2), node("n1", rack="r1"), {}, {"v4": "172.31.250.11"},
            (_selectors("rack2"),), id="node-selectors",
        ),
        pytest.param(
            (V4, RACK2), node("n2", rack="r2"), {},
            {"v4": "172.31.250.11", "rack2": "172.31.250.11"}, (), id="selector-matches",
        ),
        pytest.param(
            (V4, V6), node("n1", addresses=V4_ONLY), {}, {"v4": "172.31.250.11"},
            (_no_address("v6", 6),), id="no-local-address-of-the-family",
        ),
        pytest.param(
            (V4, V6), node("n1", addresses=V4_ONLY), {PeerName("v6"): ip("fd00:99:250::50")},
            {"v4": "172.31.250.11", "v6": "fd00:99:250::50"}, (), id="kernel-choice-helps",
        ),
        pytest.param(
            (V6,), node("n1", addresses=NO_ADDRESSES), {PeerName("v6"): ip("172.31.250.50")},
            {}, (_no_address("v6", 6),), id="kernel-choice-of-the-wrong-family",
        ),
        pytest.param(
            (SOURCED,), node("n1", addresses=NO_ADDRESSES), {}, {"sourced": "fd00:99:251::11"},
            (), id="source-address",
        ),
        pytest.param(
            (V4, RACK2), None, {}, {}, (_no_address("v4", 4), _selectors("rack2")),
            id="unknown-node",
        ),
    ],
)  # fmt: skip
def test_peers_for_node(
    peers: tuple[BGPPeer, ...],
    node_obj: Node | None,
    kernel: Mapping[PeerName, IPAddress | None],
    sessions: dict[str, str],
    skipped: tuple[PeerSkip, ...],
) -> None:
    got = peers_for_node(Config(peers=peers), node_obj, kernel_choices=kernel)
    assert {s.peer.name: str(s.local_address) for s in got.sessions} == sessions
    assert got.skipped == skipped


@pytest.mark.parametrize(
    ("p", "kernel", "node_obj", "expected"),
    [
        pytest.param(SOURCED, ip("fd00:99:251::50"), node("n1"), "fd00:99:251::11",
                     id="source-address-wins"),
        pytest.param(V4, ip("172.31.250.50"), node("n1"), "172.31.250.50", id="kernel-choice"),
        pytest.param(V4, ip("fd00::1"), node("n1"), "172.31.250.11",
                     id="kernel-choice-wrong-family"),
        pytest.param(V6, None, node("n1"), "fd00:99:250::11", id="internal-ip-v6"),
        pytest.param(V4, None, None, None, id="nothing"),
    ],
)  # fmt: skip
def test_local_address(
    p: BGPPeer, kernel: IPAddress | None, node_obj: Node | None, expected: str | None
) -> None:
    got = local_address(p, kernel_choice=kernel, node=node_obj)
    assert (None if got is None else str(got)) == expected


# --------------------------------------------------------------------------- decide, explain

#: One pool of both families announced to every peer; the node has only an IPv4
#: InternalIP, so the IPv6 peer has no session (render leaves it out).
CFG = config(
    pools=[pool("p", "198.51.100.0/24", "2001:db8::/64")],
    peers=[V4, V6],
    advertisements=[adv()],
)
SNAPSHOT = cluster(
    [svc("default/web", "198.51.100.7", "2001:db8::7")],
    [eps("default/web", ep("n1"))],
    [node("n1", addresses=V4_ONLY)],
)
N1 = NodeName("n1")


def test_no_route_to_a_peer_without_local_address_and_explain_says_why() -> None:
    decision = decide(CFG, SNAPSHOT, N1)
    assert {(r.peer, str(r.prefix)) for r in decision.routes} == {("v4", "198.51.100.7/32")}
    (skip,) = decision.skipped
    assert (skip.reason, str(skip.ip)) == (SkipReason.NO_PEER_OF_FAMILY, "2001:db8::7")
    assert decision.peers_skipped == (_no_address("v6", 6),)
    table = explain_table([decision])
    assert "no session" in table
    assert "v6    noLocalAddress" in table
    answer = decision_json(decision)
    assert answer["peersSkipped"] == [
        {"peer": "v6", "reason": "noLocalAddress", "detail": _no_address("v6", 6).detail}
    ]
    # The live speaker's answer reads back the same.
    assert decision_from_json(json.loads(json.dumps(answer))) == decision


def test_the_only_peer_without_session_names_the_reason() -> None:
    cfg = config(pools=[pool("p", "2001:db8::/64")], peers=[V6], advertisements=[adv()])
    snapshot = cluster(
        [svc("default/web", "2001:db8::7")],
        [eps("default/web", ep("n1"))],
        [node("n1", addresses=V4_ONLY)],
    )
    (skip,) = decide(cfg, snapshot, N1).skipped
    assert skip.reason is SkipReason.NO_MATCHING_PEER
    assert skip.detail == "no BGPPeer has a session from node n1 (v6: noLocalAddress)"


def test_kernel_choice_gives_the_session_and_the_route() -> None:
    kernel = {PeerName("v6"): ip("2001:db8:ffff::11")}
    decision = decide(CFG, SNAPSHOT, N1, kernel_choices=kernel)
    assert {r.peer for r in decision.routes} == {"v4", "v6"}
    assert decision.peers_skipped == ()


@pytest.mark.parametrize(
    "kernel",
    [{}, {PeerName("v6"): ip("2001:db8:ffff::11")}, {PeerName("v6"): None}],
    ids=["none", "v6-route", "v6-no-route"],
)
def test_decide_routes_only_to_the_neighbors_render_writes(
    kernel: Mapping[PeerName, IPAddress | None],
) -> None:
    rendering = render(
        CFG, SNAPSHOT.nodes[N1], kernel_choices=kernel, passwords={}, helper_argv=("helper",)
    )
    decision = decide(CFG, SNAPSHOT, N1, kernel_choices=kernel)
    assert {r.peer for r in decision.routes} == {n.name for n in rendering.neighbors}


def test_decider_follows_a_change_of_kernel_choice() -> None:
    decider = Decider()
    for kernel in ({}, {PeerName("v6"): ip("2001:db8:ffff::11")}, {}):
        got = decider.decide(CFG, SNAPSHOT, N1, kernel_choices=kernel)
        assert got == decide(CFG, SNAPSHOT, N1, kernel_choices=kernel)


class _Source:
    """A synced source that always has SNAPSHOT (reconcile_once reads nothing else)."""

    synced = True
    stale = False

    def snapshot(self) -> ClusterSnapshot:
        return SNAPSHOT

    async def wait_changed(self) -> float:
        raise AssertionError("not called by reconcile_once")


class _Sink:
    def __init__(self) -> None:
        self.desired: DesiredRoutes = {}

    def apply(self, desired: DesiredRoutes) -> None:
        self.desired = desired


@pytest.mark.parametrize(
    ("kernel", "peers"),
    [
        pytest.param(None, {"v4"}, id="no-kernel-at-hand"),
        pytest.param({PeerName("v6"): ip("2001:db8:ffff::11")}, {"v4", "v6"}, id="kernel-route"),
    ],
)
def test_the_reconciler_asks_the_kernel_choices_each_pass(
    kernel: Mapping[PeerName, IPAddress | None] | None, peers: set[str]
) -> None:
    asked: list[tuple[Config, Node | None]] = []

    def kernel_choices(cfg: Config, node: Node | None) -> Mapping[PeerName, IPAddress | None]:
        asked.append((cfg, node))
        return kernel or {}

    sink = _Sink()
    reconciler = Reconciler(
        config=CFG,
        node=N1,
        source=_Source(),
        sink=sink,
        kernel_choices=None if kernel is None else kernel_choices,
    )
    reconciler.reconcile_once(0.0)
    decided = reconciler.decide(0.0)
    assert decided is not None
    reconciler.apply(decided)
    # The pass carries the answer it decided with: the speaker renders with the same one.
    assert decided.kernel_choices == (kernel or {})
    assert set(sink.desired) == peers
    assert asked == ([] if kernel is None else [(CFG, SNAPSHOT.nodes[N1])] * 2)
