"""The fan-out cap: the rendezvous choice (bgpd.fanout) and BGPAdvertisement maxNodes in
decide() and the incremental Decider."""

from __future__ import annotations

import ipaddress
import random

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, selector, svc
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd import fanout
from bgpd.decision import EXCLUDE_LB_LABEL, Decider, decide
from bgpd.model import (
    ClusterSnapshot,
    Config,
    Node,
    NodeName,
    PeerName,
    Skip,
    SkipReason,
)

# --------------------------------------------------------------------------- rendezvous

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=12)
node_sets = st.lists(names, min_size=0, max_size=12, unique=True).map(
    lambda ns: [NodeName(n) for n in ns]
)
keys = st.lists(
    st.ip_addresses(v=4).map(lambda ip: f"{ip}/32"), min_size=1, max_size=20, unique=True
)


def test_weights_are_the_same_in_every_process() -> None:
    """Pinned values: every speaker (any host, any Python) must compute these, or nodes
    would disagree on the chosen set. Python's hash() would fail this across processes."""
    assert fanout.weight("10.99.100.1/32", NodeName("node1")) == 0x237E783CCBA97ECB
    assert fanout.weight("10.99.100.1/32", NodeName("node2")) == 0xF34C316DF8D09B5E


def test_the_separator_keeps_key_and_node_apart() -> None:
    assert fanout.weight("a", NodeName("bc")) != fanout.weight("ab", NodeName("c"))


@settings(max_examples=200, deadline=None)
@given(key=names, nodes=node_sets, limit=st.integers(1, 15), seed=st.integers())
def test_choice_is_deterministic_order_free_and_exactly_min_k_n(
    key: str, nodes: list[NodeName], limit: int, seed: int
) -> None:
    first = fanout.chosen(key, nodes, limit)
    shuffled = random.Random(seed).sample(nodes, len(nodes))
    assert fanout.chosen(key, shuffled, limit) == first
    assert fanout.chosen(key, nodes + nodes, limit) == first
    assert len(first) == min(limit, len(nodes))
    assert first <= set(nodes)


@settings(max_examples=200, deadline=None)
@given(key=names, nodes=node_sets)
def test_rank_is_the_place_in_the_ranking(key: str, nodes: list[NodeName]) -> None:
    order = fanout.ranked(key, nodes)
    for place, n in enumerate(order, start=1):
        assert fanout.rank(key, nodes, n) == place
        assert fanout.rank(key, reversed(nodes), n) == place


@settings(max_examples=200, deadline=None)
@given(keys=keys, nodes=node_sets.filter(bool), limit=st.integers(1, 6), data=st.data())
def test_a_node_leaving_moves_only_the_keys_it_had_won(
    keys: list[str], nodes: list[NodeName], limit: int, data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(nodes), label="gone")
    rest = [n for n in nodes if n != gone]
    for key in keys:
        before = fanout.chosen(key, nodes, limit)
        after = fanout.chosen(key, rest, limit)
        if gone not in before:
            assert after == before
        else:
            # The others keep their place; at most one node takes over the freed one.
            assert before - {gone} <= after
            assert len(after - before) == (1 if len(rest) >= limit else 0)


@settings(max_examples=200, deadline=None)
@given(keys=keys, nodes=node_sets, limit=st.integers(1, 6), new=names)
def test_a_node_joining_moves_keys_only_to_itself(
    keys: list[str], nodes: list[NodeName], limit: int, new: str
) -> None:
    joined = NodeName(new)
    grown = [*nodes, joined]
    for key in keys:
        before = fanout.chosen(key, nodes, limit)
        after = fanout.chosen(key, grown, limit)
        assert after - before <= {joined}
        if joined not in after:
            assert after == before
        else:
            assert len(before - after) <= 1


# --------------------------------------------------------------------------- decide()

V4 = pool("v4", "198.51.100.0/24")
TOR = peer("tor-a", "172.31.250.1")
TOR_B = peer("tor-b", "172.31.250.2")
NODES = [node("n1"), node("n2"), node("n3")]
S = "default/web"
IP = "198.51.100.1"
PREFIX = f"{IP}/32"


def capped(limit: int, **kwargs: object) -> Config:
    return config(pools=[V4], peers=[TOR], advertisements=[adv(max_nodes=limit, **kwargs)])  # type: ignore[arg-type]


def announcers(cfg: Config, snapshot: ClusterSnapshot) -> set[str]:
    """The nodes that announce anything, each deciding for itself."""
    return {n for n in snapshot.nodes if decide(cfg, snapshot, NodeName(n)).routes}


def ranked_names(key: str, names_: list[str]) -> list[str]:
    return list(fanout.ranked(key, [NodeName(n) for n in names_]))


def test_cluster_cap_two_of_three_announces_from_the_rendezvous_winners() -> None:
    snapshot = cluster([svc(S, IP)], [eps(S, ep("n1"))], NODES)
    order = ranked_names(PREFIX, ["n1", "n2", "n3"])
    assert announcers(capped(2), snapshot) == set(order[:2])
    loser = decide(capped(2), snapshot, NodeName(order[2]))
    assert loser.skipped == (
        Skip(
            S,  # type: ignore[arg-type]
            SkipReason.NOT_SELECTED_FOR_FANOUT,
            ip=ipaddress.ip_address(IP),
            detail="rank 3 of 3, cap 2 (BGPAdvertisement all)",
        ),
    )


def test_a_cap_at_or_above_the_candidates_changes_nothing() -> None:
    snapshot = cluster([svc(S, IP)], [eps(S, ep("n1"))], NODES)
    uncapped = config(pools=[V4], peers=[TOR], advertisements=[adv()])
    for n in ("n1", "n2", "n3"):
        assert decide(capped(3), snapshot, NodeName(n)) == decide(uncapped, snapshot, NodeName(n))


@pytest.mark.parametrize(
    ("nodes", "candidates"),
    [
        pytest.param(
            [node("n1"), node("n2"), node("n3", **{EXCLUDE_LB_LABEL: ""})],
            ["n1", "n2"],
            id="excluded-node-is-no-candidate",
        ),
        pytest.param(
            [node("n1"), node("n2", unavailable=True), node("n3")],
            ["n1", "n3"],
            id="unavailable-node-is-no-candidate",
        ),
        pytest.param(
            [node("n1"), node("n2"), node("n3", addresses=())],
            ["n1", "n2"],
            id="node-without-a-session-is-no-candidate",
        ),
    ],
)
def test_only_nodes_that_could_announce_are_candidates(
    nodes: list[Node], candidates: list[str]
) -> None:
    snapshot = cluster([svc(S, IP)], [eps(S, ep("n1"))], nodes)
    assert announcers(capped(1), snapshot) == {ranked_names(PREFIX, candidates)[0]}
    assert announcers(capped(2), snapshot) == set(candidates)


def test_advertisement_node_selectors_limit_the_candidates() -> None:
    nodes = [node("n1", rack="a"), node("n2", rack="a"), node("n3", rack="b")]
    snapshot = cluster([svc(S, IP)], [eps(S, ep("n1"))], nodes)
    cfg = capped(1, nodes=[selector(rack="a")])
    assert announcers(cfg, snapshot) == {ranked_names(PREFIX, ["n1", "n2"])[0]}


def test_local_candidates_are_the_nodes_with_a_serving_endpoint() -> None:
    endpoints = eps(S, ep("n1"), ep("n2"), ep("n3", ready=False))
    snapshot = cluster([svc(S, IP, local=True)], [endpoints], NODES)
    winner = ranked_names(PREFIX, ["n1", "n2"])[0]
    assert announcers(capped(1), snapshot) == {winner}
    other = ({"n1", "n2"} - {winner}).pop()
    (skip,) = decide(capped(1), snapshot, NodeName(other)).skipped
    assert (skip.reason, skip.detail) == (
        SkipReason.NOT_SELECTED_FOR_FANOUT,
        "rank 2 of 2, cap 1 (BGPAdvertisement all)",
    )
    # n3's endpoint does not serve: its own reason, not the cap.
    (skip,) = decide(capped(1), snapshot, NodeName("n3")).skipped
    assert skip.reason is SkipReason.NO_LOCAL_ENDPOINTS


def test_an_uncapped_advertisement_still_announces_to_its_peers() -> None:
    cfg = config(
        pools=[V4],
        peers=[TOR, TOR_B],
        advertisements=[adv("few", peers=["tor-a"], max_nodes=1), adv("all", peers=["tor-b"])],
    )
    snapshot = cluster([svc(S, IP)], [eps(S, ep("n1"))], NODES)
    winner = ranked_names(PREFIX, ["n1", "n2", "n3"])[0]
    for n in ("n1", "n2", "n3"):
        decision = decide(cfg, snapshot, NodeName(n))
        want = {PeerName("tor-a"), PeerName("tor-b")} if n == winner else {PeerName("tor-b")}
        assert {r.peer for r in decision.routes} == want
        assert decision.skipped == ()


def test_aggregated_ips_share_one_choice() -> None:
    """The key is the announced prefix: IPs aggregated into one /24 pick the same nodes,
    so the router sees at most maxNodes next hops for that /24."""
    ips = [f"198.51.100.{i}" for i in range(1, 30)]
    snapshot = cluster([svc(f"default/s{i}", ip) for i, ip in enumerate(ips)], [], NODES)
    snapshot = cluster(
        snapshot.services.values(),
        [eps(k, ep("n1")) for k in snapshot.services],
        NODES,
    )
    cfg = capped(2, aggregation_length=24)
    assert announcers(cfg, snapshot) == set(ranked_names("198.51.100.0/24", ["n1", "n2", "n3"])[:2])


def test_not_a_candidate_by_the_cluster_visible_rule() -> None:
    """A node whose only session comes from its kernel's route (no InternalIP) is not a
    candidate: the other nodes cannot see that route, so they do not count it."""
    bare = node("n3", addresses=())
    snapshot = cluster([svc(S, IP)], [eps(S, ep("n1"))], [node("n1"), node("n2"), bare])
    kernel = {PeerName("tor-a"): ipaddress.ip_address("172.31.250.13")}
    decision = decide(capped(1), snapshot, NodeName("n3"), kernel_choices=kernel)
    assert decision.routes == ()
    (skip,) = decision.skipped
    assert skip.reason is SkipReason.NOT_SELECTED_FOR_FANOUT
    assert skip.detail == (
        "node n3 is not one of the 2 candidates, cap 1 (BGPAdvertisement all): no session "
        "to a peer it names by sourceAddress or InternalIP"
    )


def test_decider_follows_nodes_joining_and_leaving() -> None:
    """With a cap, every Node is an input: a Node leaving or joining re-decides the
    Services whose candidates it changes, incrementally equal to decide()."""
    services = [svc(f"default/s{i}", f"198.51.100.{i}") for i in range(1, 40)]
    slices = [eps(s.key, ep("n1")) for s in services]
    cfg = capped(2)
    more = [*NODES, node("n4")]
    for at in ("n1", "n2", "n4"):
        decider = Decider()
        for nodes in (NODES, NODES[1:], more, NODES[:2], more):
            snapshot = cluster(services, slices, nodes)
            expected = decide(cfg, snapshot, NodeName(at))
            assert decider.decide(cfg, snapshot, NodeName(at), changed=()) == expected
            assert decider.desired() == expected.by_peer()


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Config, Config, ClusterSnapshot]:
    """A capped and the same uncapped config (one advertisement, maybe with
    nodeSelectors and named peers), and a cluster of up to 6 Nodes (some excluded,
    unavailable, without an InternalIP, in either rack) and up to 4 Services (Cluster or
    Local, endpoints anywhere)."""
    names_ = [f"n{i}" for i in range(1, draw(st.integers(1, 6)) + 1)]
    nodes = [
        node(
            n,
            unavailable=draw(st.integers(0, 5)) == 0,
            addresses=() if draw(st.integers(0, 5)) == 0 else (("InternalIP", "172.31.250.9"),),
            rack=draw(st.sampled_from(["a", "b"])),
            **({EXCLUDE_LB_LABEL: ""} if draw(st.integers(0, 5)) == 0 else {}),
        )
        for n in names_
    ]
    peers = [TOR, peer("tor-b", "172.31.250.2", nodes=[selector(rack="b")])]
    spec = {
        "nodes": [selector(rack="a")] if draw(st.integers(0, 3)) == 0 else [],
        "peers": draw(st.sampled_from([[], ["tor-a"], ["tor-b"]])),
        "aggregation_length": draw(st.sampled_from([24, 32])),
    }
    limit = draw(st.integers(1, 4))
    with_cap = config(pools=[V4], peers=peers, advertisements=[adv(max_nodes=limit, **spec)])  # type: ignore[arg-type]
    without = config(pools=[V4], peers=peers, advertisements=[adv(**spec)])  # type: ignore[arg-type]
    services, slices = [], []
    for i in range(draw(st.integers(1, 4))):
        key = f"default/s{i}"
        services.append(svc(key, f"198.51.100.{i + 1}", local=draw(st.booleans())))
        where = draw(st.lists(st.sampled_from(names_), max_size=3))
        slices.append(eps(key, *(ep(n, ready=draw(st.booleans())) for n in where)))
    return with_cap, without, cluster(services, slices, nodes)


@settings(max_examples=200, deadline=None)
@given(case=clusters())
def test_exactly_min_k_n_of_the_nodes_that_would_announce_do(
    case: tuple[Config, Config, ClusterSnapshot],
) -> None:
    """Every node deciding for itself, without talking to the others: each Service's
    prefix is announced by exactly min(K, N) of the N nodes that announce it without the
    cap, and those are the rendezvous winners among them, so the candidates every node
    computes are exactly the nodes that would announce."""
    with_cap, without, snapshot = case
    (limit,) = (a.max_nodes for a in with_cap.advertisements)
    assert limit is not None

    def announcing(cfg: Config) -> dict[tuple[str, str], set[NodeName]]:
        """(prefix, Service) -> the nodes whose route for the prefix carries the Service
        (an aggregate carries several Services, each with its own candidates)."""
        out: dict[tuple[str, str], set[NodeName]] = {}
        for n in snapshot.nodes:
            for route in decide(cfg, snapshot, NodeName(n)).routes:
                for key in route.services:
                    out.setdefault((str(route.prefix), key), set()).add(NodeName(n))
        return out

    capped_, free = announcing(with_cap), announcing(without)
    for (prefix, key), would in free.items():
        got = capped_.get((prefix, key), set())
        assert got == set(fanout.chosen(prefix, would, limit)), (prefix, key)
    assert capped_.keys() <= free.keys()
