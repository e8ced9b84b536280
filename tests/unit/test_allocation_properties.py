"""Hypothesis properties of allocate(): no IP held by two Services unless they may share
it, no IP outside its pool, order-free, and stable when its own result is fed back."""

from __future__ import annotations

import dataclasses
import random

from clusterkit import config, namespace, pool, selector, svc
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.allocation import (
    ANNOTATION_ADDRESS_POOL,
    ANNOTATION_ALLOW_SHARED_IP,
    ANNOTATION_LOAD_BALANCER_IPS,
    AllocationResult,
    allocate,
    pool_admits,
)
from bgpd.model import (
    Config,
    IPAddress,
    Service,
    ServiceAllocation,
    ServiceKey,
    TrafficPolicy,
)

POOLS = [
    pool("a", "198.51.100.0/30", avoid_buggy_ips=True),
    pool("b", "198.51.100.254-198.51.101.1"),
    pool("d", "203.0.113.0/31", "2001:db8:100::/127"),
    pool("m", "192.0.2.0/31", auto_assign=False),
    pool(
        "t",
        "198.51.100.8/31",
        allocation=ServiceAllocation(priority=5, namespace_selectors=(selector(team="x"),)),
    ),
    pool("s", "198.51.100.16/31", allocation=ServiceAllocation(service_selectors=(selector(),))),
]
NAMESPACES = {"ns1": namespace("ns1", team="x"), "ns2": namespace("ns2")}
REQUESTABLE = ["198.51.100.1", "198.51.101.0", "203.0.113.1", "2001:db8:100::1", "192.0.2.1"]


@st.composite
def services(draw: st.DrawFn) -> list[Service]:
    out = []
    for i in range(draw(st.integers(1, 12))):
        annotations: dict[str, str] = {}
        if draw(st.booleans()):
            annotations[ANNOTATION_ALLOW_SHARED_IP] = draw(st.sampled_from(["k", "j"]))
        if draw(st.integers(0, 5)) == 0:
            annotations[ANNOTATION_ADDRESS_POOL] = draw(st.sampled_from(["a", "d", "m", "zz"]))
        if draw(st.integers(0, 5)) == 0:
            annotations[ANNOTATION_LOAD_BALANCER_IPS] = draw(st.sampled_from(REQUESTABLE))
        families, policy = draw(
            st.sampled_from(
                [
                    ((), None),
                    (("IPv4",), "SingleStack"),
                    (("IPv6",), "SingleStack"),
                    (("IPv4", "IPv6"), "PreferDualStack"),
                    (("IPv6", "IPv4"), "RequireDualStack"),
                ]
            )
        )
        out.append(
            svc(
                f"ns{draw(st.integers(1, 2))}/s{i}",
                *draw(st.lists(st.sampled_from(REQUESTABLE), max_size=1)),
                local=draw(st.integers(0, 3)) == 0,
                selector={"app": draw(st.sampled_from(["a", "b"]))},
                ports=draw(st.lists(st.integers(80, 89), min_size=1, max_size=2, unique=True)),
                annotations=annotations,
                families=families,
                family_policy=policy,
                labels={"app": "web"},
            )
        )
    return out


CFG = config(pools=POOLS)


def _check_invariants(cfg: Config, items: list[Service], result: AllocationResult) -> None:
    by_key = {s.key: s for s in items}
    holders: dict[IPAddress, list[ServiceKey]] = {}
    for key, a in result.assignments.items():
        the_pool = cfg.pool(a.pool)
        assert the_pool is not None
        assert pool_admits(the_pool, by_key[key], NAMESPACES)
        assert 1 <= len(a.ips) <= 2
        assert len({ip.version for ip in a.ips}) == len(a.ips)
        for ip in a.ips:
            assert the_pool.contains(ip), f"{ip} outside pool {the_pool.name}"
            if the_pool.avoid_buggy_ips and ip.version == 4:
                assert int(ip) & 0xFF not in (0, 255)
            holders.setdefault(ip, []).append(key)
    for ip, keys in holders.items():
        for i, first in enumerate(keys):
            for second in keys[i + 1 :]:
                x, y = by_key[first], by_key[second]
                kx = x.annotations.get(ANNOTATION_ALLOW_SHARED_IP)
                ky = y.annotations.get(ANNOTATION_ALLOW_SHARED_IP)
                assert kx, f"{ip} held by {first} and {second}, {first} has no sharing key"
                assert kx == ky, f"{ip} held by {first} and {second} with other keys"
                assert x.external_traffic_policy == y.external_traffic_policy
                if x.external_traffic_policy is TrafficPolicy.LOCAL:
                    assert x.selector == y.selector
                ports_x = {(p.protocol, p.port) for p in x.ports}
                assert not ports_x & {(p.protocol, p.port) for p in y.ports}


@settings(max_examples=300, deadline=None)
@given(items=services(), seed=st.integers())
def test_allocation_invariants(items: list[Service], seed: int) -> None:
    result = allocate(CFG, items, NAMESPACES)
    assert set(result.assignments).isdisjoint(result.failures)
    assert set(result.assignments) | set(result.failures) == {s.key for s in items}
    _check_invariants(CFG, items, result)

    shuffled = random.Random(seed).sample(items, len(items))
    assert allocate(CFG, shuffled, NAMESPACES) == result


@settings(max_examples=200, deadline=None)
@given(items=services())
def test_allocation_is_stable_when_fed_back(items: list[Service]) -> None:
    """The controller writes assignments to status; the next run reads them back as
    ingress IPs and must keep every one of them."""
    first = allocate(CFG, items, NAMESPACES)
    written = [
        dataclasses.replace(
            s,
            ingress_ips=first.assignments[s.key].ips if s.key in first.assignments else (),
        )
        for s in items
    ]
    second = allocate(CFG, written, NAMESPACES)
    for key, a in first.assignments.items():
        assert second.assignments[key] == a
    _check_invariants(CFG, written, second)
