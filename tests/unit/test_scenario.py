"""A cluster walked through a sequence of states; after each step the complete route set
of every node (and every reason for not announcing) is checked, as MetalLB's speaker
tests do. Each step changes one thing an operator or Kubernetes changes in real life."""

from __future__ import annotations

import dataclasses

from clusterkit import adv, changed_keys, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.decision import EXCLUDE_LB_LABEL, Decider, decide
from bgpd.model import ClusterSnapshot, EndpointSlice, NodeName, Service, TrafficPolicy

CFG = config(
    pools=[pool("v4", "198.51.100.0/24"), pool("v6", "2001:db8:100::/120")],
    peers=[peer("tor-a", "172.31.250.1"), peer("tor-a-v6", "fd00:99::1")],
    advertisements=[adv(communities=["65000:100"])],
)
NODES = ("n1", "n2", "n3")
WEB = "shop/web"
API = "shop/api"

#: One incremental Decider per node, carried through the walk: after every step it must
#: give exactly the Decision plain decide() gives; so must a second one per node that is
#: told only the Service keys that changed since the previous step (as the Kubernetes
#: source tells the speaker's), with that previous step's snapshot.
DECIDERS: dict[str, Decider] = {}
DIRTY_DECIDERS: dict[str, tuple[Decider, list[ClusterSnapshot]]] = {}

RouteSet = set[tuple[str, str, str, tuple[str, ...]]]
SkipSet = set[tuple[str, str, str]]


def state(snapshot: ClusterSnapshot) -> tuple[RouteSet, SkipSet]:
    """(node, peer, prefix, services) for every route of every node, and
    (node, service, reason) for every skip."""
    routes: RouteSet = set()
    skips: SkipSet = set()
    for n in NODES:
        d = decide(CFG, snapshot, NodeName(n))
        decider = DECIDERS.setdefault(n, Decider())
        assert decider.decide(CFG, snapshot, NodeName(n)) == d
        assert decider.desired() == d.by_peer()
        dirty, seen = DIRTY_DECIDERS.setdefault(n, (Decider(), []))
        keys = changed_keys(seen[-1] if seen else None, snapshot)
        assert dirty.decide(CFG, snapshot, NodeName(n), changed=keys) == d
        assert dirty.desired_view() == d.by_peer()
        seen[:] = [snapshot]
        for r in d.routes:
            assert r.attributes.communities == ("65000:100",)
            routes.add((n, r.peer, str(r.prefix), r.services))
        skips.update((n, s.service, s.reason.value) for s in d.skipped)
    return routes, skips


def web_routes(*nodes: str) -> RouteSet:
    return {(n, "tor-a", "198.51.100.10/32", (WEB,)) for n in nodes} | {
        (n, "tor-a-v6", "2001:db8:100::10/128", (WEB,)) for n in nodes
    }


def api_routes(*nodes: str) -> RouteSet:
    return {(n, "tor-a", "198.51.100.20/32", (API,)) for n in nodes}


def test_cluster_walkthrough() -> None:
    web = svc(WEB, "198.51.100.10", "2001:db8:100::10")
    api = svc(API, "198.51.100.20", local=True)
    nodes = {n: node(n) for n in NODES}
    web_eps = eps(WEB, ep("n1"), ep("n2"))
    api_eps = eps(API, ep("n1"))

    def snap(*services: Service, slices: tuple[EndpointSlice, ...] = ()) -> ClusterSnapshot:
        return cluster(services, slices, nodes.values())

    # 1. Start: web (Cluster) from every node, api (Local) only where its pod runs.
    routes, skips = state(snap(web, api, slices=(web_eps, api_eps)))
    assert routes == web_routes("n1", "n2", "n3") | api_routes("n1")
    assert skips == {("n2", API, "noLocalEndpoints"), ("n3", API, "noLocalEndpoints")}

    # 2. The api pod moves from n1 to n2 (new pod ready on n2, old one gone).
    api_eps = eps(API, ep("n2"))
    routes, skips = state(snap(web, api, slices=(web_eps, api_eps)))
    assert routes == web_routes("n1", "n2", "n3") | api_routes("n2")
    assert skips == {("n1", API, "noLocalEndpoints"), ("n3", API, "noLocalEndpoints")}

    # 3. web flips Cluster -> Local: only nodes with a web pod (n1, n2) keep it.
    web = dataclasses.replace(web, external_traffic_policy=TrafficPolicy.LOCAL)
    routes, skips = state(snap(web, api, slices=(web_eps, api_eps)))
    assert routes == web_routes("n1", "n2") | api_routes("n2")
    assert skips == {
        ("n1", API, "noLocalEndpoints"),
        ("n3", API, "noLocalEndpoints"),
        ("n3", WEB, "noLocalEndpoints"),
    }

    # 4. n2 is labelled exclude-from-external-load-balancers: it announces nothing.
    nodes["n2"] = node("n2", **{EXCLUDE_LB_LABEL: ""})
    routes, skips = state(snap(web, api, slices=(web_eps, api_eps)))
    assert routes == web_routes("n1")
    assert skips == {
        ("n1", API, "noLocalEndpoints"),
        ("n2", API, "nodeLabeledExcludeBalancers"),
        ("n2", WEB, "nodeLabeledExcludeBalancers"),
        ("n3", API, "noLocalEndpoints"),
        ("n3", WEB, "noLocalEndpoints"),
    }

    # 5. api moves to n3; then its pod terminates but still serves: the route stays.
    api_eps = eps(API, ep("n3", ready=False, serving=True, terminating=True))
    routes, skips = state(snap(web, api, slices=(web_eps, api_eps)))
    assert routes == web_routes("n1") | api_routes("n3")
    assert ("n3", API, "noLocalEndpoints") not in skips

    # 6. The terminating pod stops serving: api is withdrawn everywhere.
    api_eps = eps(API, ep("n3", ready=False, serving=False, terminating=True))
    routes, skips = state(snap(web, api, slices=(web_eps, api_eps)))
    assert routes == web_routes("n1")
    assert {s for s in skips if s[1] == API} == {
        ("n1", API, "noLocalEndpoints"),
        ("n2", API, "nodeLabeledExcludeBalancers"),
        ("n3", API, "noLocalEndpoints"),
    }

    # 7. web is deleted (its slices go with it): no route and no reason mentions it.
    routes, skips = state(snap(api, slices=(api_eps,)))
    assert routes == set()
    assert skips == {
        ("n1", API, "noLocalEndpoints"),
        ("n2", API, "nodeLabeledExcludeBalancers"),
        ("n3", API, "noLocalEndpoints"),
    }
