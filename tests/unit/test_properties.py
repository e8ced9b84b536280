"""Hypothesis properties of decide(): deterministic (also under any input order) and never
announcing an IP that no advertisement selects (pool, node, Service) for that peer on that
node."""

from __future__ import annotations

import ipaddress
import random

import pytest
from clusterkit import adv, changed_keys, config, ep, eps, node, peer, pool, selector, svc
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.bandwidth import serving_endpoints
from bgpd.decision import (
    ANNOTATION_COMMUNITIES,
    ANNOTATION_LOCAL_PREF,
    ANNOTATION_MED,
    EXCLUDE_LB_LABEL,
    Decider,
    decide,
    remember_attributes,
)
from bgpd.model import (
    AnnotationPolicy,
    BGPAdvertisement,
    ClusterSnapshot,
    Config,
    Decision,
    EndpointSlice,
    IPNetwork,
    Node,
    NodeName,
    PeerName,
    RouteAttributes,
    Service,
    ServiceKey,
    SkipReason,
    SpeakerConfig,
    TrafficPolicy,
    selectors_match,
)
from bgpd.objects import build_snapshot
from k8s_watcher.writer import (
    REASON_ANNOUNCING,
    REASON_NOT_ANNOUNCING,
    AnnouncementEvents,
    EventRecorder,
    EventType,
    ObjectRef,
)

#: The walks decide hundreds of times per example: a minute alone on a loaded machine, more
#: beside other test workers; the timeout only catches a hang.
pytestmark = pytest.mark.timeout(900)

POOLS = [
    pool("a", "198.51.100.0/28", labels={"tier": "web"}),
    pool("b", "203.0.113.0/28"),
    pool("c6", "2001:db8:100::/124", labels={"tier": "web"}),
]
#: Addresses to draw from: inside each pool, and outside every pool.
ADDRESSES = [
    "198.51.100.1",
    "198.51.100.2",
    "198.51.100.14",
    "203.0.113.5",
    "203.0.113.6",
    "2001:db8:100::1",
    "2001:db8:100::2",
    "192.0.2.1",
    "2001:db8:999::1",
]
PEERS = [
    ("tor-a", "172.31.250.1"),
    ("tor-b", "172.31.250.2"),
    ("tor-a-v6", "fd00:99::1"),
    ("isp", "172.31.250.9"),
]
NODE_NAMES = ["n1", "n2", "n3"]
racks = st.sampled_from([None, None, "r1", "r2"])
#: A Service's app label (None: no label) and an advertisement's serviceSelectors.
apps = st.sampled_from([None, "web", "web", "api"])
service_selectors = st.sampled_from(
    [(), (), (selector(app="web"),), (selector(app="web"), selector(app="api"))]
)


def rack_selectors(rack: str | None) -> tuple[object, ...]:
    return () if rack is None else (selector(rack=rack),)


@st.composite
def configs(draw: st.DrawFn) -> Config:
    peers = [
        peer(
            name,
            address,
            peer_asn=65001 if name == "isp" else 64512,
            nodes=rack_selectors(draw(racks)),
        )
        for name, address in draw(st.lists(st.sampled_from(PEERS), min_size=1, unique=True))
    ]
    advertisements = [
        adv(
            f"adv{i}",
            pools=draw(
                st.lists(st.sampled_from(["a", "b", "c6"]), max_size=2, unique=True) | st.just([])
            ),
            pool_selectors=[selector(tier="web")] if draw(st.booleans()) else [],
            peers=draw(
                st.lists(st.sampled_from([p.name for p in peers]), max_size=2, unique=True)
                | st.just([])
            ),
            nodes=rack_selectors(draw(racks)),
            aggregation_length=draw(st.sampled_from([24, 28, 30, 32])),
            aggregation_length_v6=draw(st.sampled_from([64, 124, 128])),
            communities=draw(st.lists(st.sampled_from(["65000:1", "65000:2"]), unique=True)),
            local_pref=draw(st.none() | st.integers(0, 500)),
            link_bandwidth=draw(st.none() | st.sampled_from([1, 125_000])),
            max_nodes=draw(st.none() | st.integers(1, 3)),
            services=draw(service_selectors),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    return config(
        pools=POOLS,
        peers=peers,
        advertisements=advertisements,
        communities={"gold": "65000:900"},
        speaker=SpeakerConfig(annotation_policy=draw(annotation_policies)),
    )


#: SpeakerConfig annotationPolicy: none, or trusting some of the namespaces (ns0, ns1)
#: and allowing some well-known communities.
annotation_policies = st.none() | st.builds(
    AnnotationPolicy,
    namespaces=st.none() | st.frozensets(st.sampled_from(["ns0", "ns1"])),
    allowed_well_known_communities=st.none()
    | st.frozensets(st.sampled_from(["no-export", "no-peer"])),
)


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[list[Service], list[EndpointSlice], list[Node]]:
    nodes = [
        node(
            n,
            unavailable=draw(st.integers(0, 7)) == 0,
            **{
                k: v
                for k, v in (
                    ("rack", draw(racks)),
                    (EXCLUDE_LB_LABEL, "" if draw(st.integers(0, 7)) == 0 else None),
                )
                if v is not None
            },
        )
        # Sometimes a Node is missing: joining and leaving nodes move fan-out choices.
        for n in NODE_NAMES
        if draw(st.integers(0, 5)) > 0
    ]
    services: list[Service] = []
    slices: list[EndpointSlice] = []
    for i in range(draw(st.integers(1, 6))):
        key = f"ns{i % 2}/s{i}"
        annotations = {}
        if draw(st.integers(0, 2)) == 0:
            annotations[ANNOTATION_COMMUNITIES] = draw(
                st.sampled_from(
                    ["gold", "65000:7,large:1:2:3", "no-export", "gold,no-peer", "bogus"]
                )
            )
        if draw(st.integers(0, 3)) == 0:
            annotations[ANNOTATION_MED] = draw(st.sampled_from(["0", "10", "20", "x"]))
        if draw(st.integers(0, 3)) == 0:
            # "high": the typo that must keep a Service's last valid attributes.
            annotations[ANNOTATION_LOCAL_PREF] = draw(st.sampled_from(["150", "high"]))
        services.append(
            svc(
                key,
                *draw(
                    st.lists(
                        st.sampled_from(ADDRESSES),
                        min_size=int(draw(st.integers(0, 7)) > 0),
                        max_size=2,
                        unique=True,
                    )
                ),
                local=draw(st.booleans()),
                type="ClusterIP" if draw(st.integers(0, 7)) == 0 else "LoadBalancer",
                lb_class="other.io/lb" if draw(st.integers(0, 7)) == 0 else None,
                annotations=annotations,
                labels={} if (app := draw(apps)) is None else {"app": app},
            )
        )
        for j in range(draw(st.integers(1, 2))):
            endpoints = [
                ep(
                    draw(st.sampled_from([*NODE_NAMES, None])),
                    ready=draw(st.sampled_from([True, True, False, None])),
                    serving=draw(st.sampled_from([True, False, None])),
                    terminating=draw(st.sampled_from([True, False, None])),
                )
                for _ in range(draw(st.integers(1, 3)))
            ]
            family = draw(st.sampled_from(["IPv4", "IPv6"]))
            slices.append(eps(key, *endpoints, name=f"s{i}-{j}", address_type=family))
    return services, slices, nodes


def _snapshot(parts: tuple[list[Service], list[EndpointSlice], list[Node]]) -> ClusterSnapshot:
    return build_snapshot(*parts)


@settings(max_examples=300, deadline=None)
@given(cfg=configs(), parts=snapshots(), at=st.sampled_from(NODE_NAMES), seed=st.integers())
def test_decide_is_deterministic_and_order_free(
    cfg: Config,
    parts: tuple[list[Service], list[EndpointSlice], list[Node]],
    at: str,
    seed: int,
) -> None:
    first = decide(cfg, _snapshot(parts), NodeName(at))
    assert decide(cfg, _snapshot(parts), NodeName(at)) == first
    rng = random.Random(seed)
    shuffled = tuple(rng.sample(p, len(p)) for p in parts)
    reordered = Config(
        pools=tuple(rng.sample(cfg.pools, len(cfg.pools))),
        peers=tuple(rng.sample(cfg.peers, len(cfg.peers))),
        advertisements=tuple(rng.sample(cfg.advertisements, len(cfg.advertisements))),
        communities=cfg.communities,
        speaker=cfg.speaker,
    )
    again = decide(reordered, _snapshot(shuffled), NodeName(at))
    assert again.routes == first.routes
    assert [(s.service, s.reason, s.ip) for s in again.skipped] == [
        (s.service, s.reason, s.ip) for s in first.skipped
    ]


def _allowed(advertisement: BGPAdvertisement, ip_pool_name: str, labels: object) -> bool:
    chosen = next(p for p in POOLS if p.name == ip_pool_name)
    return advertisement.selects_pool(chosen) and selectors_match(
        advertisement.node_selectors,
        labels,
    )


@settings(max_examples=300, deadline=None)
@given(cfg=configs(), parts=snapshots(), at=st.sampled_from(NODE_NAMES))
def test_every_route_is_backed_by_an_advertisement(
    cfg: Config,
    parts: tuple[list[Service], list[EndpointSlice], list[Node]],
    at: str,
) -> None:
    snapshot = _snapshot(parts)
    decision = decide(cfg, snapshot, NodeName(at))
    here = snapshot.nodes.get(NodeName(at))
    if here is None:
        assert decision.routes == ()
        return
    for route in decision.routes:
        the_peer = cfg.peer(route.peer)
        assert the_peer is not None
        assert selectors_match(the_peer.node_selectors, here.labels)
        assert the_peer.family == route.prefix.version
        assert not here.network_unavailable
        assert EXCLUDE_LB_LABEL not in here.labels
        for key in route.services:
            service = snapshot.services[key]
            assert service.type == "LoadBalancer"
            assert service.load_balancer_class is None
            backing = [
                (ip, a)
                for ip in service.ingress_ips
                if (p := cfg.pool_of(ip)) is not None
                for a in cfg.advertisements
                if _allowed(a, p.name, here.labels)
                and selectors_match(a.service_selectors, service.labels)
                and (not a.peers or route.peer in a.peers)
                and ipaddress.ip_network(
                    (
                        ip,
                        a.aggregation_length if ip.version == 4 else a.aggregation_length_v6,
                    ),
                    strict=False,
                )
                == route.prefix
            ]
            assert backing, f"{key} on {route.peer} {route.prefix} has no advertisement"
        if not the_peer.is_ibgp:
            assert route.attributes.local_pref is None
        if route.attributes.link_bandwidth is not None:
            # Weighted ECMP only for Local Services, each with a serving endpoint here.
            for key in route.services:
                service = snapshot.services[key]
                assert service.external_traffic_policy is TrafficPolicy.LOCAL
                assert serving_endpoints(snapshot.endpoint_slices.get(key, ()), at) > 0


Parts = tuple[list[Service], list[EndpointSlice], list[Node]]


@st.composite
def walks(
    draw: st.DrawFn,
) -> tuple[list[Config], list[Parts], list[tuple[int, str, tuple[int, ...]]]]:
    """Configs, cluster states, and steps that each pick a config, a node and a mix of
    the states' Services and EndpointSlices (later states override objects of the same
    name), so a step shares frozen objects with earlier ones, as the watcher's snapshots
    do."""
    cfgs = draw(st.lists(configs(), min_size=1, max_size=2))
    states = draw(st.lists(snapshots(), min_size=1, max_size=3))
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(cfgs) - 1),
                st.sampled_from([NODE_NAMES[0]] * 3 + [NODE_NAMES[1]]),
                st.lists(st.integers(0, len(states) - 1), min_size=1, max_size=3).map(tuple),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return cfgs, states, steps


def _mixed(states: list[Parts], mix: tuple[int, ...]) -> ClusterSnapshot:
    """The Services and EndpointSlices of the states in `mix` (later ones override), with
    the Nodes of the first state in `mix`, the same objects: Nodes join, leave and change
    between steps too (a fan-out cap makes every Node an input of the decision)."""
    services: dict[str, Service] = {}
    slices: dict[tuple[str | None, str], EndpointSlice] = {}
    for index in mix:
        svcs, eps_, _ = states[index]
        services.update((s.key, s) for s in svcs)
        slices.update(((e.service_key, e.name), e) for e in eps_)
    return build_snapshot(services.values(), slices.values(), states[mix[0]][2])


@settings(max_examples=300, deadline=None)
@given(walk=walks())
def test_incremental_decider_equals_decide_at_every_step(
    walk: tuple[list[Config], list[Parts], list[tuple[int, str, tuple[int, ...]]]],
) -> None:
    cfgs, states, steps = walk
    decider = Decider()
    built: dict[tuple[int, ...], ClusterSnapshot] = {}
    last_valid: dict[ServiceKey, RouteAttributes] = {}
    for cfg_index, at, mix in steps:
        if mix not in built:
            built[mix] = _mixed(states, mix)
        # The same snapshot object again where a step repeats a mix: identity hits.
        snapshot = built[mix]
        cfg = cfgs[cfg_index]
        expected = decide(cfg, snapshot, NodeName(at), last_valid=last_valid)
        assert decider.decide(cfg, snapshot, NodeName(at)) == expected
        assert decider.desired() == expected.by_peer()
        last_valid = remember_attributes(cfg, snapshot, last_valid)


def _route_changes(old: Decision | None, new: Decision) -> dict[PeerName, set[IPNetwork]]:
    """(peer, prefix) whose Route differs (attributes or Services), appeared or left."""
    before = {(r.peer, r.prefix): r for r in old.routes} if old is not None else {}
    after = {(r.peer, r.prefix): r for r in new.routes}
    out: dict[PeerName, set[IPNetwork]] = {}
    for peer_name, prefix in before.keys() | after.keys():
        if before.get((peer_name, prefix)) != after.get((peer_name, prefix)):
            out.setdefault(peer_name, set()).add(prefix)
    return out


#: Service keys to add to a step's changed set (a source may mark more than changed,
#: e.g. a Service whose update changed nothing the decision reads), some of no Service.
EXTRA_KEYS = [f"ns{i % 2}/s{i}" for i in range(6)] + ["ns9/gone"]


@settings(max_examples=300, deadline=None)
@given(walk=walks(), data=st.data())
def test_dirty_key_decider_equals_decide_at_every_step(
    walk: tuple[list[Config], list[Parts], list[tuple[int, str, tuple[int, ...]]]],
    data: st.DataObject,
) -> None:
    """Told only the Service keys that changed since its previous decide() (plus any
    extra keys), the Decider still gives decide()'s Decision, desired set and, in
    `last_changes` and `desired_changed`, exactly what changed since the previous step.
    Fresh snapshot objects each step: only the keys say what to look at."""
    cfgs, states, steps = walk
    decider = Decider()
    previous: tuple[ClusterSnapshot, Decision, Config, str] | None = None
    last_valid: dict[ServiceKey, RouteAttributes] = {}
    for cfg_index, at, mix in steps:
        snapshot = _mixed(states, mix)
        cfg = cfgs[cfg_index]
        extra = data.draw(st.lists(st.sampled_from(EXTRA_KEYS), max_size=3), label="extra")
        changed = changed_keys(previous[0] if previous else None, snapshot) | {
            ServiceKey(k) for k in extra
        }
        if previous is None:
            # The first decide() walks everything whatever it is told.
            changed = {ServiceKey(k) for k in extra}
        expected = decide(cfg, snapshot, NodeName(at), last_valid=last_valid)
        last_valid = remember_attributes(cfg, snapshot, last_valid)
        got = decider.decide(cfg, snapshot, NodeName(at), changed=changed)
        assert got == expected
        assert decider.desired() == expected.by_peer()
        assert decider.desired_view() == expected.by_peer()
        old = previous[1] if previous is not None else None
        same_context = (
            previous is not None
            and previous[2] == cfg
            and previous[3] == at
            and previous[0].nodes.get(NodeName(at)) == snapshot.nodes.get(NodeName(at))
            and (
                not any(a.max_nodes for a in cfg.advertisements)
                or previous[0].nodes == snapshot.nodes
            )
        )
        if same_context:
            assert decider.last_changes == _route_changes(old, expected)
        else:
            assert decider.last_changes is None
        was = old.by_peer() if old is not None else {}
        assert decider.desired_changed == (was != expected.by_peer())
        previous = (snapshot, expected, cfg, at)


class _Collector(EventRecorder):
    """Keeps what AnnouncementEvents records, instead of queueing it for the API."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def record(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool:
        self.seen.append((ref.name, reason, message))
        return True


def _expected_events(old: Decision | None, new: Decision) -> list[tuple[str, str, str]]:
    """The Events by their definition: Services announced to some peer now and not
    before, then those announced before and not now, each sorted."""

    def announced(d: Decision | None) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for r in d.routes if d is not None else ():
            for key in r.services:
                out.setdefault(key, set()).add(r.peer)
        return out

    before, after = announced(old), announced(new)
    events = [
        ("s" + key.split("/s")[1], "nodeAssigned", ", ".join(sorted(after[key])))
        for key in sorted(after.keys() - before.keys())
    ]
    events += [
        ("s" + key.split("/s")[1], "nodeUnassigned", "")
        for key in sorted(before.keys() - after.keys())
    ]
    return events


@settings(max_examples=200, deadline=None)
@given(walk=walks())
def test_announcement_events_follow_the_decisions(
    walk: tuple[list[Config], list[Parts], list[tuple[int, str, tuple[int, ...]]]],
) -> None:
    """Fed the Decider's decisions (routes shared between steps) one after another, the
    incremental AnnouncementEvents records exactly the transitions of announced
    Services; so does one fed plain decide()'s (all routes new objects)."""
    cfgs, states, steps = walk
    decider = Decider()
    collectors = (_Collector(), _Collector())
    events = tuple(AnnouncementEvents(c, NodeName("n1")) for c in collectors)
    previous: list[Decision | None] = [None, None]
    everything = {s.key: s for parts in states for s in parts[0]}
    for cfg_index, _, mix in steps:
        snapshot = _mixed(states, mix)
        cfg = cfgs[cfg_index]
        made = (
            decider.decide(cfg, snapshot, NodeName("n1")),
            decide(cfg, snapshot, NodeName("n1")),
        )
        for i in range(2):
            before = len(collectors[i].seen)
            events[i].observe(previous[i], made[i], everything)
            seen = collectors[i].seen[before:]
            got = [
                (name, reason, message.split("to peers ")[1] if "to peers" in message else "")
                for name, reason, message in seen
                if reason in _MOVES
            ]
            assert got == _expected_events(previous[i], made[i])
            warned = [(name, reason) for name, reason, _ in seen if reason not in _MOVES]
            assert warned == _expected_warnings(previous[i], made[i])
            previous[i] = made[i]


_MOVES = (REASON_ANNOUNCING, REASON_NOT_ANNOUNCING)


def _expected_warnings(old: Decision | None, new: Decision) -> list[tuple[str, str]]:
    """Warning Events by their definition: the notices and invalidAnnotation skips of
    `new` that `old` did not have (same Service, reason and detail), sorted."""

    def warnings(d: Decision | None) -> set[tuple[str, str, str]]:
        if d is None:
            return set()
        out = {(n.service, n.reason.value, n.detail) for n in d.notices}
        out |= {
            (s.service, s.reason.value, s.detail)
            for s in d.skipped
            if s.reason is SkipReason.INVALID_ANNOTATION
        }
        return out

    return [
        ("s" + key.split("/s")[1], reason)
        for key, reason, _ in sorted(warnings(new) - warnings(old))
    ]
