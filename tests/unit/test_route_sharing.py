"""What the speaker holds per Service and per route after a decision: equal values are
one object across Services, routes and layers, and no per-route or per-Service container
is kept where a tuple does (docs/benchmarks.md, "Memory"). Structure, not a benchmark:
each test guards one memory cut that would otherwise regress silently."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd import decision as decision_module
from bgpd.decision import Decider, aggregate, decide
from bgpd.model import NodeName, ServiceKey
from bgpd.objects import service_from_api
from bgpd.speaker import attribute_state
from k8s_watcher.cache import KubernetesSource
from k8s_watcher.client import KubeClient

N1 = NodeName("n1")
CFG = config(
    pools=[pool("p", "10.99.0.0/24")],
    peers=[peer("tor", "172.31.250.1")],
    advertisements=[adv("all", communities=["65000:1"])],
)


def _cluster(count: int) -> Any:
    keys = [f"default/s{i}" for i in range(count)]
    return cluster(
        [svc(k, f"10.99.0.{i + 1}") for i, k in enumerate(keys)],
        [eps(k, ep("n1")) for k in keys],
        [node("n1")],
    )


def test_a_host_route_prefix_is_the_service_ip_without_a_closure() -> None:
    ip = ipaddress.ip_address("10.99.0.7")
    prefix = aggregate(ip, 32)
    assert prefix == ipaddress.ip_network("10.99.0.7/32")
    assert hash(prefix) == hash(ipaddress.ip_network("10.99.0.7/32"))
    assert prefix.network_address is ip
    # ipaddress gives every /32 its own hosts() closure (~190 bytes).
    assert "hosts" not in vars(prefix)
    v6 = ipaddress.ip_address("fd00::7")
    assert "hosts" not in vars(aggregate(v6, 128))
    assert aggregate(v6, 128).network_address is v6
    # Memoised by the IP in a plain dictionary, not an lru_cache (a key tuple and a list
    # per route).
    assert aggregate(ip, 32) is prefix
    assert decision_module._HOST_ROUTES[ip] is prefix
    # A zoned address keeps its own (zone-less) network address: the text is unchanged.
    zoned = ipaddress.ip_address("fe80::1%eth0")
    assert str(aggregate(zoned, 128)) == "fe80::1/128"


def test_routes_share_their_attributes_and_hold_no_per_route_dict() -> None:
    decider = Decider()
    decision = decider.decide(CFG, _cluster(3), N1)
    assert len(decision.routes) == 3
    assert len({id(r.attributes) for r in decision.routes}) == 1
    desired = decider.desired_view()["tor"]  # type: ignore[index]
    assert all(a is decision.routes[0].attributes for a in desired.values())
    # One Service's route: a (Service, contributions) pair, no dict or list per route.
    for group in decider._groups.values():
        assert isinstance(group, tuple)
        assert isinstance(group[1], tuple)
    # A full pass keeps no set naming every route once it is over.
    assert decider._changes == {}


def test_an_aggregate_route_goes_back_to_a_pair_when_one_service_is_left() -> None:
    aggregated = config(
        pools=CFG.pools, peers=CFG.peers, advertisements=[adv("all", aggregation_length=24)]
    )
    decider = Decider()
    decision = decider.decide(aggregated, _cluster(2), N1)
    assert [r.services for r in decision.routes] == [
        (ServiceKey("default/s0"), ServiceKey("default/s1"))
    ]
    (group,) = decider._groups.values()
    assert isinstance(group, dict)
    one = _cluster(1)
    decision = decider.decide(aggregated, one, N1, changed={ServiceKey("default/s1")})
    assert [r.services for r in decision.routes] == [(ServiceKey("default/s0"),)]
    (group,) = decider._groups.values()
    assert isinstance(group, tuple)


def _api_service(name: str) -> dict[str, Any]:
    obj = {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"port": 80, "protocol": "TCP"}],
            "ipFamilies": ["IPv4"],
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
    }
    # New objects every time, as each watch event decodes them.
    decoded: dict[str, Any] = json.loads(json.dumps(obj))
    return decoded


def test_services_with_equal_ports_and_families_share_them() -> None:
    a = service_from_api(_api_service("a"))
    b = service_from_api(_api_service("b"))
    assert a.ports is b.ports
    assert a.ip_families is b.ip_families


def test_saved_attributes_are_shared_between_services() -> None:
    text = attribute_state.dumps(
        {
            ServiceKey(f"default/s{i}"): got.routes[0].attributes
            for i, got in enumerate([Decider().decide(CFG, _cluster(1), N1)] * 3)
        }
    )
    loaded = attribute_state.loads(text)
    assert len(loaded) == 3
    assert len({id(a) for a in loaded.values()}) == 1


def test_the_source_keeps_one_tuple_of_slices_per_service() -> None:
    source = KubernetesSource(KubeClient.lazy(None))
    key = ServiceKey("default/web")
    web = svc("default/web", "10.99.0.1")
    source._services[key] = web  # what the Service informer stores, then reports
    source._on_service("default/web", None, web)
    b = eps("default/web", ep("n1"), name="web-b")
    a = eps("default/web", ep("n1"), name="web-a")
    source._on_slice("default/web-b", None, b)
    source._on_slice("default/web-a", None, a)
    held = source._slices[key]
    assert held == (a, b)  # by name, whatever the order of arrival
    assert source.snapshot().endpoint_slices[key] is held
    a2 = eps("default/web", ep("n2"), name="web-a")
    source._on_slice("default/web-a", a, a2)
    assert source._slices[key] == (a2, b)
    source._on_slice("default/web-a", a2, None)
    source._on_slice("default/web-b", b, None)
    assert key not in source._slices


def test_many_new_routes_at_once_are_ordered_as_decide_orders_them() -> None:
    # More new routes than max(16, sqrt(n)) are put in place by one sort, not one by one.
    wide = config(
        pools=[pool("p", "10.99.0.0/22")],
        peers=CFG.peers,
        advertisements=CFG.advertisements,
    )
    keys = [f"default/s{i}" for i in range(300)]
    services = [svc(k, f"10.99.{i % 3}.{i // 3 + 1}") for i, k in enumerate(keys)]
    slices = [eps(k, ep("n1")) for k in keys]
    decider = Decider()
    few = cluster(services[:40], slices[:40], [node("n1")])
    assert decider.decide(wide, few, N1) == decide(wide, few, N1)
    everything = cluster(services, slices, [node("n1")])
    got = decider.decide(wide, everything, N1, changed={ServiceKey(k) for k in keys[40:]})
    assert got == decide(wide, everything, N1)
    assert len(got.routes) == 300
