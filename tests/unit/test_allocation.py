"""allocate(): one named case per MetalLB allocation rule."""

from __future__ import annotations

import pytest
from clusterkit import Expected, config, namespace, pool, selector, summary, svc

from bgpd.allocation import (
    ANNOTATION_ADDRESS_POOL,
    ANNOTATION_ALLOW_SHARED_IP,
    ANNOTATION_LOAD_BALANCER_IPS,
    FailureReason,
    allocate,
    pool_size,
    pool_usage,
)
from bgpd.model import Config, Namespace, Service, ServiceAllocation, SpeakerConfig

P = pool("p", "198.51.100.0/30")
V6 = pool("v6", "2001:db8:100::/126")
DUAL = pool("dual", "198.51.100.0/30", "2001:db8:100::/126")
MANUAL = pool("manual", "203.0.113.0/30", auto_assign=False)


def shared(key: str, **extra: str) -> dict[str, str]:
    return {ANNOTATION_ALLOW_SHARED_IP: key, **extra}


def alloc_pool(name: str, cidr: str, **kw: object) -> object:
    return pool(name, cidr, allocation=ServiceAllocation(**kw))


CASES = [
    # --- auto-assignment ---
    pytest.param(
        [P],
        [svc("ns/b"), svc("ns/a")],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": ("p", "198.51.100.1")},
        id="lowest-free-address-first-in-key-order",
    ),
    pytest.param(
        [pool("p", "198.51.100.255-198.51.101.1", avoid_buggy_ips=True)],
        [svc("ns/a")],
        {},
        {"ns/a": ("p", "198.51.101.1")},
        id="avoidBuggyIPs-skips-255-and-0",
    ),
    pytest.param(
        [MANUAL, P],
        [svc("ns/a")],
        {},
        {"ns/a": ("p", "198.51.100.0")},
        id="autoAssign-false-pool-skipped",
    ),
    pytest.param(
        [MANUAL],
        [svc("ns/a")],
        {},
        {"ns/a": FailureReason.NO_POOL_MATCHES},
        id="only-manual-pools-is-noPoolMatches",
    ),
    pytest.param(
        [],
        [svc("ns/a")],
        {},
        {"ns/a": FailureReason.NO_POOL_MATCHES},
        id="no-pools",
    ),
    pytest.param(
        [pool("p", "198.51.100.7/32")],
        [svc("ns/a"), svc("ns/b")],
        {},
        {"ns/a": ("p", "198.51.100.7"), "ns/b": FailureReason.POOL_EXHAUSTED},
        id="pool-exhausted",
    ),
    pytest.param(
        [P],
        [svc("ns/x", type="ClusterIP"), svc("ns/y", lb_class="other.io/lb")],
        {},
        {},
        id="not-ours-in-neither-map",
    ),
    # --- stability ---
    pytest.param(
        [P],
        [svc("ns/a"), svc("ns/z", "198.51.100.0")],
        {},
        {"ns/z": ("p", "198.51.100.0"), "ns/a": ("p", "198.51.100.1")},
        id="holder-keeps-ip-against-earlier-key",
    ),
    pytest.param(
        [P],
        [svc("ns/a", "192.0.2.1")],
        {},
        {"ns/a": ("p", "198.51.100.0")},
        id="ip-no-longer-in-any-pool-reallocated",
    ),
    pytest.param(
        [pool("p", "198.51.100.0/30", avoid_buggy_ips=True)],
        [svc("ns/a", "198.51.100.0")],
        {},
        {"ns/a": ("p", "198.51.100.1")},
        id="ip-now-avoided-reallocated",
    ),
    pytest.param(
        [P],
        [svc("ns/a", "198.51.100.2"), svc("ns/b", "198.51.100.2")],
        {},
        {"ns/a": ("p", "198.51.100.2"), "ns/b": ("p", "198.51.100.0")},
        id="two-holders-without-sharing-second-reallocated",
    ),
    pytest.param(
        [P, pool("q", "198.51.100.8/30")],
        [svc("ns/a", "198.51.100.1", annotations={ANNOTATION_ADDRESS_POOL: "q"})],
        {},
        {"ns/a": ("q", "198.51.100.8")},
        id="pool-annotation-changed-reallocated",
    ),
    pytest.param(
        [P],
        [svc("ns/a", "198.51.100.1", load_balancer_ip="198.51.100.3")],
        {},
        {"ns/a": ("p", "198.51.100.3")},
        id="requested-ip-changed-reallocated",
    ),
    pytest.param(
        [MANUAL],
        [svc("ns/a", "203.0.113.1")],
        {},
        {"ns/a": ("manual", "203.0.113.1")},
        id="held-ip-in-manual-pool-kept",
    ),
    pytest.param(
        [DUAL],
        [svc("ns/a", "198.51.100.3", families=["IPv4", "IPv6"], family_policy="PreferDualStack")],
        {},
        {"ns/a": ("dual", "198.51.100.3", "2001:db8:100::")},
        id="prefer-dual-stack-holder-gains-other-family",
    ),
    pytest.param(
        [pool("d", "203.0.113.0/31", "2001:db8:100::/127")],
        [
            svc(
                "ns/a", "2001:db8:100::", families=["IPv4", "IPv6"], family_policy="PreferDualStack"
            ),
            svc("ns/b", "203.0.113.0"),
        ],
        {},
        {"ns/a": ("d", "203.0.113.1", "2001:db8:100::"), "ns/b": ("d", "203.0.113.0")},
        id="second-family-never-taken-from-a-later-holder",
    ),
    pytest.param(
        [DUAL],
        [
            svc(
                "ns/a",
                "2001:db8:100::1",
                families=["IPv4", "IPv6"],
                family_policy="PreferDualStack",
                load_balancer_ip="2001:db8:100::1",
            )
        ],
        {},
        {"ns/a": ("dual", "2001:db8:100::1")},
        id="prefer-dual-stack-requested-one-family-kept-as-requested",
    ),
    pytest.param(
        [P],
        [svc("ns/a", "198.51.100.3", families=["IPv6"])],
        {},
        {"ns/a": FailureReason.NO_POOL_MATCHES},
        id="held-ip-of-wrong-family-dropped",
    ),
    # --- requested IPs ---
    pytest.param(
        [P],
        [svc("ns/a", load_balancer_ip="198.51.100.2")],
        {},
        {"ns/a": ("p", "198.51.100.2")},
        id="spec-loadBalancerIP",
    ),
    pytest.param(
        [DUAL],
        [
            svc(
                "ns/a",
                families=["IPv6", "IPv4"],
                family_policy="RequireDualStack",
                annotations={ANNOTATION_LOAD_BALANCER_IPS: "198.51.100.2, 2001:db8:100::3"},
            )
        ],
        {},
        # MetalLB writes a dual-stack ingress IPv4 first, whatever spec.ipFamilies says.
        {"ns/a": ("dual", "198.51.100.2", "2001:db8:100::3")},
        id="annotation-dual-stack-ipv4-first",
    ),
    pytest.param(
        [P],
        [svc("ns/a", annotations={"metallb.universe.tf/loadBalancerIPs": "198.51.100.3"})],
        {},
        {"ns/a": ("p", "198.51.100.3")},
        id="deprecated-annotation",
    ),
    pytest.param(
        [P],
        [
            svc(
                "ns/a",
                load_balancer_ip="198.51.100.1",
                annotations={ANNOTATION_LOAD_BALANCER_IPS: "198.51.100.2"},
            )
        ],
        {},
        {"ns/a": FailureReason.INVALID_ANNOTATION},
        id="annotation-and-spec-both-set",
    ),
    pytest.param(
        [P],
        [svc("ns/a", annotations={ANNOTATION_LOAD_BALANCER_IPS: "198.51.100.300"})],
        {},
        {"ns/a": FailureReason.INVALID_ANNOTATION},
        id="requested-ip-not-an-ip",
    ),
    pytest.param(
        [P],
        [svc("ns/a", annotations={ANNOTATION_LOAD_BALANCER_IPS: "198.51.100.1,198.51.100.2"})],
        {},
        {"ns/a": FailureReason.INVALID_ANNOTATION},
        id="two-requested-ips-of-one-family",
    ),
    pytest.param(
        [P],
        [svc("ns/a", load_balancer_ip="192.0.2.1")],
        {},
        {"ns/a": FailureReason.REQUESTED_IP_NOT_IN_POOL},
        id="requested-ip-outside-pools",
    ),
    pytest.param(
        [pool("p", "198.51.100.0/24", avoid_buggy_ips=True)],
        [svc("ns/a", load_balancer_ip="198.51.100.255")],
        {},
        {"ns/a": FailureReason.REQUESTED_IP_NOT_IN_POOL},
        id="requested-buggy-ip-in-avoiding-pool",
    ),
    pytest.param(
        [P],
        [svc("ns/a", "198.51.100.1"), svc("ns/b", load_balancer_ip="198.51.100.1")],
        {},
        {"ns/a": ("p", "198.51.100.1"), "ns/b": FailureReason.REQUESTED_IP_IN_USE},
        id="requested-ip-in-use",
    ),
    pytest.param(
        [MANUAL],
        [svc("ns/a", load_balancer_ip="203.0.113.2")],
        {},
        {"ns/a": ("manual", "203.0.113.2")},
        id="requested-ip-from-manual-pool",
    ),
    pytest.param(
        [P, MANUAL],
        [
            svc(
                "ns/a",
                load_balancer_ip="198.51.100.1",
                annotations={ANNOTATION_ADDRESS_POOL: "manual"},
            )
        ],
        {},
        {"ns/a": FailureReason.REQUESTED_IP_NOT_IN_REQUESTED_POOL},
        id="requested-ip-and-pool-disagree",
    ),
    pytest.param(
        [P],
        [svc("ns/a", families=["IPv6"], load_balancer_ip="198.51.100.1")],
        {},
        {"ns/a": FailureReason.IP_FAMILY_MISMATCH},
        id="requested-ip-family-differs-from-service",
    ),
    # --- requested pool ---
    pytest.param(
        [P, MANUAL],
        [svc("ns/a", annotations={ANNOTATION_ADDRESS_POOL: "manual"})],
        {},
        {"ns/a": ("manual", "203.0.113.0")},
        id="address-pool-annotation-even-if-not-auto-assign",
    ),
    pytest.param(
        [P, MANUAL],
        [svc("ns/a", annotations={"metallb.universe.tf/address-pool": "manual"})],
        {},
        {"ns/a": ("manual", "203.0.113.0")},
        id="deprecated-address-pool-annotation",
    ),
    pytest.param(
        [P],
        [svc("ns/a", annotations={ANNOTATION_ADDRESS_POOL: "nope"})],
        {},
        {"ns/a": FailureReason.UNKNOWN_POOL},
        id="unknown-pool",
    ),
    pytest.param(
        [P, V6],
        [svc("ns/a", annotations={ANNOTATION_ADDRESS_POOL: "v6"})],
        {},
        {"ns/a": FailureReason.IP_FAMILY_MISMATCH},
        id="requested-pool-lacks-family",
    ),
    pytest.param(
        [alloc_pool("team", "198.51.100.0/30", namespaces=("team",))],
        [svc("ns/a", annotations={ANNOTATION_ADDRESS_POOL: "team"})],
        {},
        {"ns/a": FailureReason.POOL_NOT_ALLOWED},
        id="requested-pool-does-not-admit-namespace",
    ),
    # --- sharing ---
    pytest.param(
        [P],
        [
            svc("ns/a", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("k"), ports=[443]),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": ("p", "198.51.100.0")},
        id="same-key-disjoint-ports-share",
    ),
    pytest.param(
        # P (four addresses) fills up, and stays full for the rest of the run; a Service
        # with the key of an address in it still shares that address, before pool q.
        [P, pool("q", "203.0.113.0/30")],
        [
            svc("ns/a", annotations=shared("k"), ports=[80]),
            svc("ns/b"),
            svc("ns/c"),
            svc("ns/d"),
            svc("ns/e"),
            svc("ns/f", annotations=shared("k"), ports=[443]),
        ],
        {},
        {
            "ns/a": ("p", "198.51.100.0"),
            "ns/b": ("p", "198.51.100.1"),
            "ns/c": ("p", "198.51.100.2"),
            "ns/d": ("p", "198.51.100.3"),
            "ns/e": ("q", "203.0.113.0"),
            "ns/f": ("p", "198.51.100.0"),
        },
        id="full-pool-still-shares-under-the-key",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", annotations=shared("k"), ports=[53]),
            svc("ns/b", annotations=shared("k"), ports=[(53, "UDP")]),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": ("p", "198.51.100.0")},
        id="same-port-other-protocol-share",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("k"), ports=[80]),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": ("p", "198.51.100.1")},
        id="same-key-same-port-gets-own-ip",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", "198.51.100.0", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("k", **{"metallb.io/loadBalancerIPs": "198.51.100.0"})),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": FailureReason.CONFLICTING_SHARING_KEY},
        id="requested-shared-ip-port-clash",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", "198.51.100.0", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("j"), ports=[443], load_balancer_ip="198.51.100.0"),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": FailureReason.REQUESTED_IP_IN_USE},
        id="different-keys-do-not-share",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", annotations=shared("k"), ports=[80], local=True, selector={"app": "a"}),
            svc("ns/b", annotations=shared("k"), ports=[443], local=True, selector={"app": "a"}),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": ("p", "198.51.100.0")},
        id="local-same-selector-share",
    ),
    pytest.param(
        [P],
        [
            svc(
                "ns/a",
                "198.51.100.0",
                annotations=shared("k"),
                ports=[80],
                local=True,
                selector={"app": "a"},
            ),
            svc(
                "ns/b",
                annotations=shared("k"),
                ports=[443],
                local=True,
                selector={"app": "b"},
                load_balancer_ip="198.51.100.0",
            ),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": FailureReason.CONFLICTING_SHARING_KEY},
        id="local-different-selectors-conflict",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("k"), ports=[443], local=True, selector={"app": "a"}),
        ],
        {},
        {"ns/a": ("p", "198.51.100.0"), "ns/b": ("p", "198.51.100.1")},
        id="cluster-and-local-do-not-share",
    ),
    pytest.param(
        [P],
        [
            svc("ns/a", "198.51.100.2", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("k"), ports=[443]),
        ],
        {},
        {"ns/a": ("p", "198.51.100.2"), "ns/b": ("p", "198.51.100.0")},
        id="free-lower-address-beats-shared-higher-one",
    ),
    # --- families ---
    pytest.param(
        [DUAL],
        [svc("ns/a", families=["IPv4", "IPv6"], family_policy="RequireDualStack")],
        {},
        {"ns/a": ("dual", "198.51.100.0", "2001:db8:100::")},
        id="require-dual-stack-from-dual-pool",
    ),
    pytest.param(
        [P, V6],
        [svc("ns/a", families=["IPv4", "IPv6"], family_policy="RequireDualStack")],
        {},
        {"ns/a": FailureReason.NO_POOL_MATCHES},
        id="require-dual-stack-needs-one-pool-with-both",
    ),
    pytest.param(
        [P],
        [svc("ns/a", families=["IPv4", "IPv6"], family_policy="PreferDualStack")],
        {},
        {"ns/a": ("p", "198.51.100.0")},
        id="prefer-dual-stack-falls-back-to-one-family",
    ),
    pytest.param(
        [P, V6],
        [svc("ns/a", families=["IPv6", "IPv4"], family_policy="PreferDualStack")],
        {},
        {"ns/a": ("v6", "2001:db8:100::")},
        id="prefer-dual-stack-primary-family-wins",
    ),
    pytest.param(
        [DUAL],
        [svc("ns/a", families=["IPv6"], family_policy="SingleStack")],
        {},
        {"ns/a": ("dual", "2001:db8:100::")},
        id="single-stack-ipv6",
    ),
    pytest.param(
        [P, V6],
        [svc("ns/a", families=["IPv6"])],
        {},
        {"ns/a": ("v6", "2001:db8:100::")},
        id="ipv6-service-skips-ipv4-pool",
    ),
    # --- serviceAllocation ---
    pytest.param(
        [
            P,
            alloc_pool("low", "198.51.100.8/30", priority=20),
            alloc_pool("high", "198.51.100.16/30", priority=10),
            alloc_pool("none", "198.51.100.24/30"),
        ],
        [svc("ns/a")],
        {},
        {"ns/a": ("high", "198.51.100.16")},
        id="priority-lower-number-first-pinned-before-general",
    ),
    pytest.param(
        [
            alloc_pool("none", "198.51.100.24/30"),
            alloc_pool("low", "198.51.100.8/30", priority=20),
        ],
        [svc("ns/a")],
        {},
        {"ns/a": ("low", "198.51.100.8")},
        id="explicit-priority-before-unset",
    ),
    pytest.param(
        [P, alloc_pool("team", "198.51.100.8/30", namespaces=("team",))],
        [svc("team/a"), svc("other/b")],
        {},
        {"team/a": ("team", "198.51.100.8"), "other/b": ("p", "198.51.100.0")},
        id="namespaces-pin-pool",
    ),
    pytest.param(
        [P, alloc_pool("gold", "198.51.100.8/30", namespace_selectors=(selector(tier="gold"),))],
        [svc("shop/a"), svc("lab/b")],
        {"shop": namespace("shop", tier="gold"), "lab": namespace("lab")},
        {"shop/a": ("gold", "198.51.100.8"), "lab/b": ("p", "198.51.100.0")},
        id="namespaceSelectors",
    ),
    pytest.param(
        [
            P,
            alloc_pool(
                "shop",
                "198.51.100.8/30",
                namespace_selectors=(selector(**{"kubernetes.io/metadata.name": "shop"}),),
            ),
        ],
        [svc("shop/a")],
        {},
        {"shop/a": ("shop", "198.51.100.8")},
        id="namespace-name-label-implicit",
    ),
    pytest.param(
        [P, alloc_pool("web", "198.51.100.8/30", service_selectors=(selector(app="web"),))],
        [svc("ns/a", labels={"app": "web"}), svc("ns/b", labels={"app": "db"})],
        {},
        {"ns/a": ("web", "198.51.100.8"), "ns/b": ("p", "198.51.100.0")},
        id="serviceSelectors",
    ),
    pytest.param(
        [P, alloc_pool("tiny", "198.51.100.8/32", namespaces=("ns",))],
        [svc("ns/a"), svc("ns/b")],
        {},
        {"ns/a": ("tiny", "198.51.100.8"), "ns/b": ("p", "198.51.100.0")},
        id="pinned-pool-full-falls-back-to-general",
    ),
    pytest.param(
        [alloc_pool("team", "198.51.100.8/30", namespaces=("team",))],
        [svc("ns/a")],
        {},
        {"ns/a": FailureReason.NO_POOL_MATCHES},
        id="pool-reserved-for-other-namespace",
    ),
]


@pytest.mark.parametrize(("pools", "services", "namespaces", "expected"), CASES)
def test_allocate(
    pools: list[object],
    services: list[Service],
    namespaces: dict[str, Namespace],
    expected: Expected,
) -> None:
    cfg = config(pools=pools)
    result = allocate(cfg, services, namespaces)
    assert summary(result) == expected
    for key, a in result.assignments.items():
        assert a.service == key
    for key, f in result.failures.items():
        assert f.service == key
        assert f.message


def test_input_order_does_not_matter() -> None:
    services = [svc(f"ns/s{i}", annotations=shared("k"), ports=[i]) for i in range(5)]
    services += [svc("ns/held", "198.51.100.3"), svc("ns/x")]
    cfg = config(pools=[P])
    assert summary(allocate(cfg, services, {})) == summary(allocate(cfg, services[::-1], {}))


def test_configured_class_is_served() -> None:
    cfg = Config(pools=(P,), speaker=SpeakerConfig(load_balancer_class="kube-bgpd.io/bgp"))
    result = allocate(
        cfg,
        [svc("ns/a", lb_class="kube-bgpd.io/bgp"), svc("ns/b"), svc("ns/c", lb_class="x")],
        {},
    )
    # MetalLB --lb-class: a class-less Service is the default implementation's.
    assert sorted(result.assignments) == ["ns/a"]
    assert not result.failures


@pytest.mark.parametrize(
    ("service", "message"),
    [
        pytest.param(
            svc("ns/b", load_balancer_ip="198.51.100.0"),
            "198.51.100.0 is used by ns/a, and the two do not share an "
            "metallb.io/allow-shared-ip key",
            id="in-use",
        ),
        pytest.param(
            svc("ns/b", annotations=shared("k"), load_balancer_ip="198.51.100.0"),
            "198.51.100.0 is shared with ns/a under key 'k', and port TCP/80 is used by both",
            id="port-clash",
        ),
        pytest.param(
            svc("ns/b", annotations={ANNOTATION_ADDRESS_POOL: "x"}),
            "no IPAddressPool named 'x'",
            id="unknown-pool",
        ),
    ],
)
def test_failure_messages_say_why(service: Service, message: str) -> None:
    holder = svc("ns/a", "198.51.100.0", annotations=shared("k"))
    result = allocate(config(pools=[P]), [holder, service], {})
    assert result.failures["ns/b"].message == message


@pytest.mark.parametrize(
    ("the_pool", "size"),
    [
        pytest.param(pool("p", "198.51.100.0/24"), 256, id="cidr"),
        pytest.param(pool("p", "198.51.100.0/24", avoid_buggy_ips=True), 254, id="avoid-buggy"),
        pytest.param(pool("p", "198.51.100.0/23", avoid_buggy_ips=True), 508, id="avoid-buggy-23"),
        pytest.param(
            pool("p", "198.51.100.250-198.51.101.5", avoid_buggy_ips=True), 10, id="range-across"
        ),
        pytest.param(pool("p", "2001:db8::/120", avoid_buggy_ips=True), 256, id="v6-unaffected"),
        pytest.param(pool("p", "198.51.100.0/30", "2001:db8::/126"), 8, id="dual"),
    ],
)
def test_pool_size(the_pool: object, size: int) -> None:
    assert pool_size(the_pool) == size


def test_pool_usage_counts_shared_ip_once() -> None:
    cfg = config(pools=[P, MANUAL])
    result = allocate(
        cfg,
        [
            svc("ns/a", annotations=shared("k"), ports=[80]),
            svc("ns/b", annotations=shared("k"), ports=[443]),
            svc("ns/c"),
        ],
        {},
    )
    assert dict(pool_usage(cfg, result)) == {"p": (4, 2), "manual": (4, 0)}
