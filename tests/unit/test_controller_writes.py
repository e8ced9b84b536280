"""controller.cluster_writes(): the writes and Events that turn an allocation result into
cluster state.

Pure and table-driven: a Service as the cache shows it, the allocator's verdict for it,
and the write (status IPs, pool annotation) and Event reasons that must follow.
"""

from __future__ import annotations

import ipaddress
from types import MappingProxyType

import pytest

from bgpd.allocation import (
    ANNOTATION_IP_ALLOCATED_FROM_POOL as POOL,
)
from bgpd.allocation import (
    AllocationFailure,
    AllocationResult,
    Assignment,
    FailureReason,
)
from bgpd.controller import Write, cluster_writes
from bgpd.model import PoolName, Service, ServiceKey, frozen_map

KEY = ServiceKey("default/web")


def svc(
    *,
    ips: tuple[str, ...] = (),
    pool: str | None = None,
    type_: str = "LoadBalancer",
    lb_class: str | None = None,
) -> Service:
    return Service(
        namespace="default",
        name="web",
        type=type_,
        uid="uid-web",
        load_balancer_class=lb_class,
        ingress_ips=tuple(ipaddress.ip_address(i) for i in ips),
        annotations=frozen_map({POOL: pool} if pool else {}),
    )


def assigned(*ips: str, pool: str = "p") -> AllocationResult:
    a = Assignment(KEY, tuple(ipaddress.ip_address(i) for i in ips), PoolName(pool))
    return AllocationResult(assignments=MappingProxyType({KEY: a}))


def failed(message: str = "no available IPs") -> AllocationResult:
    f = AllocationFailure(KEY, FailureReason.POOL_EXHAUSTED, message)
    return AllocationResult(failures=MappingProxyType({KEY: f}))


NOTHING = AllocationResult()


def summary(writes: list[Write]) -> list[tuple[object, object, bool, list[str]]]:
    return [
        (
            None if w.ips is None else [str(i) for i in w.ips],
            w.pool,
            w.set_pool,
            [e.reason for e in w.events],
        )
        for w in writes
    ]


@pytest.mark.parametrize(
    ("service", "result", "expected"),
    [
        pytest.param(
            svc(),
            assigned("10.99.0.1"),
            [(["10.99.0.1"], "p", True, ["IPAllocated"])],
            id="new-assignment",
        ),
        pytest.param(
            svc(ips=("10.99.0.1",), pool="p"), assigned("10.99.0.1"), [], id="converged-no-write"
        ),
        pytest.param(
            svc(ips=("10.99.0.1",)),
            assigned("10.99.0.1"),
            [(None, "p", True, [])],
            id="annotation-missing-only",
        ),
        pytest.param(
            svc(ips=("10.99.0.2",), pool="p"),
            assigned("10.99.0.1"),
            [(["10.99.0.1"], "p", False, ["ClearAssignment", "IPAllocated"])],
            id="ip-no-longer-allowed",
        ),
        pytest.param(
            svc(ips=("10.99.0.1",), pool="old"),
            assigned("10.99.0.1", pool="new"),
            [(None, "new", True, [])],
            id="pool-renamed",
        ),
        pytest.param(
            svc(), failed(), [(None, None, False, ["AllocationFailed"])], id="failure-event-only"
        ),
        pytest.param(
            svc(ips=("10.99.0.1",), pool="p"),
            failed(),
            [([], None, True, ["ClearAssignment", "AllocationFailed"])],
            id="failure-clears-held-ip",
        ),
        pytest.param(
            svc(type_="ClusterIP", ips=("10.99.0.1",), pool="p"),
            NOTHING,
            [([], None, True, ["ClearAssignment"])],
            id="type-changed-release",
        ),
        pytest.param(
            svc(lb_class="other", ips=("10.99.0.1",), pool="p"),
            NOTHING,
            [([], None, True, ["ClearAssignment"])],
            id="class-changed-release",
        ),
        pytest.param(
            svc(type_="ClusterIP", pool="p"),
            NOTHING,
            [(None, None, True, [])],
            id="stale-annotation-removed",
        ),
        pytest.param(
            svc(lb_class="other", ips=("10.99.0.1",)),
            NOTHING,
            [],
            id="other-implementation-untouched",
        ),
        pytest.param(svc(type_="ClusterIP"), NOTHING, [], id="never-ours"),
    ],
)
def test_cluster_writes(service: Service, result: AllocationResult, expected: list[object]) -> None:
    writes, _ = cluster_writes([service], result, None, {})
    assert summary(writes) == expected


def test_failure_is_reported_once_until_something_changes() -> None:
    service = svc()
    writes, reported = cluster_writes([service], failed(), None, {})
    assert summary(writes) == [(None, None, False, ["AllocationFailed"])]
    writes, reported = cluster_writes([service], failed(), None, reported)
    assert writes == [], "same Service, same reason: no new Event"
    writes, reported = cluster_writes([service], failed("pool p is full"), None, reported)
    assert summary(writes) == [(None, None, False, ["AllocationFailed"])]
    writes, reported = cluster_writes([service], assigned("10.99.0.1"), None, reported)
    assert reported == {}
    writes, _ = cluster_writes([service], failed("pool p is full"), None, reported)
    assert summary(writes) == [(None, None, False, ["AllocationFailed"])], "fails again later"


@pytest.mark.parametrize(
    ("service", "result", "releases"),
    [
        pytest.param(svc(ips=("10.99.0.2",)), assigned("10.99.0.1"), True, id="moved"),
        pytest.param(svc(), assigned("10.99.0.1"), False, id="new"),
        pytest.param(
            svc(ips=("10.99.0.1",)),
            assigned("10.99.0.1", "fd00:99::1"),
            False,
            id="grown-to-dual-stack",
        ),
        pytest.param(svc(ips=("10.99.0.1",), pool="p"), failed(), True, id="cleared"),
    ],
)
def test_releases_are_recognised(
    service: Service, result: AllocationResult, releases: bool
) -> None:
    (write,) = cluster_writes([service], result, None, {})[0]
    assert write.releases is releases


def test_event_messages_name_the_ips_and_reason() -> None:
    (write,) = cluster_writes([svc(ips=("10.99.0.2",), pool="p")], assigned("10.99.0.1"), None, {})[
        0
    ]
    messages = [e.message for e in write.events]
    assert messages[1] == 'Assigned IP ["10.99.0.1"]'
    assert '"10.99.0.2"' in messages[0]
    (write,) = cluster_writes([svc()], failed("no available IPs in pool p"), None, {})[0]
    assert (
        write.events[0].message
        == "Failed to allocate IP for 'default/web': no available IPs in pool p"
    )
    assert write.events[0].type == "Warning"
