"""allocate() against MetalLB's rules for what a migrating user relies on: the order of
a dual-stack ingress, requested IPs before automatic ones, loadBalancerClass, and the
stability of shared IPs across edits (the incumbent keeps its IP). Each row names the
MetalLB rule it follows."""

from __future__ import annotations

import dataclasses

import pytest
from clusterkit import Expected, config, pool, summary, svc
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.allocation import (
    ANNOTATION_ALLOW_SHARED_IP,
    ANNOTATION_LOAD_BALANCER_IPS,
    AllocationResult,
    FailureReason,
    allocate,
)
from bgpd.model import IPAddressPool, Service, SpeakerConfig

P = pool("p", "198.51.100.0/30")
ONE = pool("one", "198.51.100.5/32")
DUAL = pool("dual", "198.51.100.0/30", "2001:db8:100::/126")
V6_FIRST = pool("v6first", "2001:db8:100::/126", "198.51.100.0/30")
WIDE = pool("wide", "198.51.100.0/28")


def shared(key: str) -> dict[str, str]:
    return {ANNOTATION_ALLOW_SHARED_IP: key}


def dual(
    key: str,
    *ips: str,
    policy: str = "RequireDualStack",
    annotations: dict[str, str] | None = None,
) -> Service:
    """A dual-stack Service whose primary family is IPv6."""
    return svc(key, *ips, families=["IPv6", "IPv4"], family_policy=policy, annotations=annotations)


CASES = [
    # --- requested IPs first (issue 16 item 3) ---
    pytest.param(
        [P],
        [svc("ns/a"), svc("ns/b", load_balancer_ip="198.51.100.0")],
        {"ns/a": ("p", "198.51.100.1"), "ns/b": ("p", "198.51.100.0")},
        id="request-wins-over-an-automatic-service-sorted-before-it",
    ),
    pytest.param(
        [P],
        [svc("ns/a"), svc("ns/b", annotations={ANNOTATION_LOAD_BALANCER_IPS: "198.51.100.0"})],
        {"ns/a": ("p", "198.51.100.1"), "ns/b": ("p", "198.51.100.0")},
        id="request-by-annotation-wins-too",
    ),
    pytest.param(
        [ONE],
        [svc("ns/a"), svc("ns/b", load_balancer_ip="198.51.100.5")],
        {"ns/a": FailureReason.POOL_EXHAUSTED, "ns/b": ("one", "198.51.100.5")},
        id="request-wins-the-last-address",
    ),
    pytest.param(
        [DUAL],
        [
            dual("ns/a", "198.51.100.3", policy="PreferDualStack"),
            svc("ns/b", families=["IPv6"], load_balancer_ip="2001:db8:100::"),
        ],
        {
            "ns/a": ("dual", "198.51.100.3", "2001:db8:100::1"),
            "ns/b": ("dual", "2001:db8:100::"),
        },
        id="request-wins-over-a-holder-growing-its-second-family",
    ),
    pytest.param(
        [P],
        [svc("ns/a", "198.51.100.0"), svc("ns/b", load_balancer_ip="198.51.100.0")],
        {"ns/a": ("p", "198.51.100.0"), "ns/b": FailureReason.REQUESTED_IP_IN_USE},
        id="request-never-takes-an-address-held-in-status",
    ),
    # --- dual-stack ingress order (item 4): IPv4 first, status order kept ---
    pytest.param(
        [DUAL],
        [dual("ns/a")],
        {"ns/a": ("dual", "198.51.100.0", "2001:db8:100::")},
        id="automatic-dual-stack-ipv4-first-whatever-ipFamilies",
    ),
    pytest.param(
        [V6_FIRST],
        [dual("ns/a")],
        {"ns/a": ("v6first", "198.51.100.0", "2001:db8:100::")},
        id="ipv4-first-even-from-a-pool-listing-ipv6-first",
    ),
    pytest.param(
        [DUAL],
        [dual("ns/a", annotations={ANNOTATION_LOAD_BALANCER_IPS: "2001:db8:100::3,198.51.100.2"})],
        {"ns/a": ("dual", "198.51.100.2", "2001:db8:100::3")},
        id="requested-dual-stack-ipv4-first",
    ),
    pytest.param(
        [DUAL],
        [dual("ns/a", "2001:db8:100::", policy="PreferDualStack")],
        {"ns/a": ("dual", "198.51.100.0", "2001:db8:100::")},
        id="second-family-added-ipv4-first",
    ),
    pytest.param(
        [DUAL],
        [dual("ns/a", "2001:db8:100::2", "198.51.100.2")],
        {"ns/a": ("dual", "2001:db8:100::2", "198.51.100.2")},
        id="valid-status-keeps-its-order-never-rewritten",
    ),
]


@pytest.mark.parametrize(("pools", "services", "expected"), CASES)
def test_metallb_rule(
    pools: list[IPAddressPool], services: list[Service], expected: Expected
) -> None:
    assert summary(allocate(config(pools=pools), services, {})) == expected


# --------------------------------------------------------------------------- loadBalancerClass


@pytest.mark.parametrize(
    ("served", "service_class", "ours"),
    [
        pytest.param(None, None, True, id="no-class-configured-serves-class-less"),
        pytest.param(None, "x.io/lb", False, id="no-class-configured-ignores-classes"),
        pytest.param("x.io/lb", "x.io/lb", True, id="configured-class-served"),
        pytest.param("x.io/lb", "y.io/lb", False, id="other-class-ignored"),
        # MetalLB --lb-class: "handle only services whose spec.loadBalancerClass
        # matches"; KEP-1959: a class-less Service is the default implementation's.
        pytest.param("x.io/lb", None, False, id="class-configured-class-less-not-ours"),
    ],
)
def test_load_balancer_class(served: str | None, service_class: str | None, ours: bool) -> None:
    cfg = config(pools=[P], speaker=SpeakerConfig(load_balancer_class=served))
    result = allocate(cfg, [svc("ns/a", "198.51.100.1", lb_class=service_class)], {})
    assert ("ns/a" in result.assignments) is ours
    assert not result.failures


# --------------------------------------------------------------------------- stability


def settle(
    specs: list[Service], before: list[Service], previous: AllocationResult | None
) -> tuple[list[Service], AllocationResult]:
    """One controller round: `specs` are the Services as the users left them, with the
    status the previous round wrote (from `before`); returns them with the new status."""
    status = {s.key: s.ingress_ips for s in before}
    services = [dataclasses.replace(s, ingress_ips=status.get(s.key, ())) for s in specs]
    result = allocate(config(pools=[WIDE]), services, {}, previous)
    written = [
        dataclasses.replace(
            s, ingress_ips=a.ips if (a := result.assignments.get(s.key)) is not None else ()
        )
        for s in services
    ]
    return written, result


def run_edits(steps: list[list[Service]]) -> list[Expected]:
    services: list[Service] = []
    result: AllocationResult | None = None
    seen = []
    for specs in steps:
        services, result = settle(specs, services, result)
        # A round fed its own result back changes nothing.
        again, same = settle(specs, services, result)
        assert summary(same) == summary(result)
        assert again == services
        seen.append(summary(result))
    return seen


A80 = svc("ns/a", annotations=shared("k"), ports=[80])
B443 = svc("ns/b", annotations=shared("k"), ports=[443])
BOTH = {"ns/a": ("wide", "198.51.100.0"), "ns/b": ("wide", "198.51.100.0")}


@pytest.mark.parametrize(
    ("edit", "after"),
    [
        pytest.param(
            svc("ns/a", annotations=shared("other"), ports=[80]),
            {"ns/a": ("wide", "198.51.100.1"), "ns/b": ("wide", "198.51.100.0")},
            id="sharing-key-changed-the-editor-moves",
        ),
        pytest.param(
            svc("ns/a", ports=[80]),
            {"ns/a": ("wide", "198.51.100.1"), "ns/b": ("wide", "198.51.100.0")},
            id="sharing-key-removed-the-editor-moves",
        ),
        pytest.param(
            svc("ns/a", annotations=shared("k"), ports=[443]),
            {"ns/a": ("wide", "198.51.100.1"), "ns/b": ("wide", "198.51.100.0")},
            id="port-clash-the-editor-moves",
        ),
        pytest.param(
            svc("ns/a", annotations=shared("k"), ports=[80], local=True, selector={"app": "a"}),
            {"ns/a": ("wide", "198.51.100.1"), "ns/b": ("wide", "198.51.100.0")},
            id="backend-changed-the-editor-moves",
        ),
        pytest.param(
            svc("ns/a", annotations=shared("other"), ports=[80], load_balancer_ip="198.51.100.0"),
            {"ns/a": FailureReason.REQUESTED_IP_IN_USE, "ns/b": ("wide", "198.51.100.0")},
            id="editor-requesting-the-shared-ip-is-refused",
        ),
        pytest.param(
            svc("ns/a", annotations=shared("k"), ports=[80, 8080]),
            BOTH,
            id="compatible-edit-keeps-both",
        ),
    ],
)
def test_edit_of_the_first_sharer_never_moves_the_other(edit: Service, after: Expected) -> None:
    """MetalLB re-checks only the edited Service (its Assign fails, ClearAssignment) and
    the untouched one keeps the IP. ns/a sorts first, so namespace/name order alone
    would have cut off ns/b."""
    assert run_edits([[A80, B443], [edit, B443]]) == [BOTH, after]


def test_edit_of_the_second_sharer_moves_it() -> None:
    edit = svc("ns/b", annotations=shared("other"), ports=[443])
    assert run_edits([[A80, B443], [A80, edit]]) == [
        BOTH,
        {"ns/a": ("wide", "198.51.100.0"), "ns/b": ("wide", "198.51.100.1")},
    ]


def test_edits_in_sequence() -> None:
    """A walk of edits; after each the complete allocation."""
    c = svc("ns/c", annotations=shared("k"), ports=[53])
    a_moved = svc("ns/a", annotations=shared("j"), ports=[80])
    b_to_j = svc("ns/b", annotations=shared("j"), ports=[443])
    assert run_edits(
        [
            [A80, B443, c],
            [a_moved, B443, c],  # a leaves: b and c keep .0
            [a_moved, b_to_j, c],  # b leaves .0 and joins a under j (the lowest j IP)
            [a_moved, b_to_j, c, svc("ns/d", load_balancer_ip="198.51.100.2")],
        ]
    ) == [
        {
            "ns/a": ("wide", "198.51.100.0"),
            "ns/b": ("wide", "198.51.100.0"),
            "ns/c": ("wide", "198.51.100.0"),
        },
        {
            "ns/a": ("wide", "198.51.100.1"),
            "ns/b": ("wide", "198.51.100.0"),
            "ns/c": ("wide", "198.51.100.0"),
        },
        {
            "ns/a": ("wide", "198.51.100.1"),
            "ns/b": ("wide", "198.51.100.1"),
            "ns/c": ("wide", "198.51.100.0"),
        },
        {
            "ns/a": ("wide", "198.51.100.1"),
            "ns/b": ("wide", "198.51.100.1"),
            "ns/c": ("wide", "198.51.100.0"),
            "ns/d": ("wide", "198.51.100.2"),
        },
    ]


_terms = st.tuples(
    st.sampled_from(["", "k", "j"]),
    st.sets(st.sampled_from([80, 443, 53]), min_size=1, max_size=2),
    st.sampled_from([None, "a", "b"]),
)


def _service(index: int, terms: tuple[str, set[int], str | None]) -> Service:
    key, ports, local_selector = terms
    return svc(
        f"ns/s{index}",
        annotations=shared(key) if key else None,
        ports=sorted(ports),
        local=local_selector is not None,
        selector=None if local_selector is None else {"app": local_selector},
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_terms, min_size=2, max_size=6),
    st.data(),
)
def test_an_unchanged_service_never_loses_or_changes_its_ip(
    initial: list[tuple[str, set[int], str | None]], data: st.DataObject
) -> None:
    """Property: edit one Service's sharing terms after another; every Service that was
    not edited keeps exactly the IPs it had."""
    specs = [_service(i, t) for i, t in enumerate(initial)]
    services, result = settle(specs, [], None)
    for _ in range(3):
        edited = data.draw(st.integers(0, len(specs) - 1))
        specs[edited] = _service(edited, data.draw(_terms))
        before = {s.key: s.ingress_ips for s in services}
        services, result = settle(specs, services, result)
        for s in services:
            if s.key != specs[edited].key and before[s.key]:
                assert s.ingress_ips == before[s.key], s.key
