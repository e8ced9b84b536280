"""Data-plane checks (SpeakerConfig dataPlaneCheck), the one owner of their rules: pure state.

kube-proxy answers on /healthz (port 10256) whether it programs the node's rules, and on a
Local Service's healthCheckNodePort how many endpoints of it the node has (503 when
none). A node whose proxy is broken, or still starting after a reboot, drops the
traffic its routes attract (cilium#17547, kube-vip#1498), so with the check on, the
speaker announces only where those answers pass. The speaker (bgpd.speaker.app) polls
them (bgpd.speaker.probe) and feeds each round's results here; this module turns them
into verdicts with hysteresis and into the `DataPlane` value decide() takes. No I/O, no
clock: the time is a parameter.

The rules:

* a check's verdict changes only after `failure_threshold` failing (or
  `success_threshold` passing) results in a row, so one lost answer neither withdraws
  nor a single good one brings back;
* a check starts "not ready" and never announced (an unreachable endpoint at start is
  not ready, not ignored); a Service not checked yet (new, or its first pod on this
  node) is not ready either, until its check has passed `success_threshold` times;
* a Service whose check goes from ready to not ready is drained (RFC 8326): its routes
  carry GRACEFUL_SHUTDOWN for the drain window, then are skipped (`dataPlaneNotReady`);
  passing again ends that at once. The window's end is noticed at the next round, so it
  lasts up to one interval longer;
* the node's verdict goes to the drain state machine (bgpd.speaker.drain.data_plane),
  which drains the whole node through the driver's modes like any other drain;
* only Services this node would announce for their endpoints are checked:
  LoadBalancer Services of ours with externalTrafficPolicy Local, a healthCheckNodePort
  and an endpoint on this node that can serve (kube-proxy answers 503 for the others,
  which are skipped for `noLocalEndpoints` anyway). A Service no longer checked is
  forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from bgpd.decision import gated_by_health_check, has_serving_endpoint
from bgpd.model import (
    ClusterSnapshot,
    Config,
    DataPlane,
    NodeName,
    ServiceKey,
)
from bgpd.objects import is_our_load_balancer


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Results in a row needed to change a verdict (SpeakerConfig dataPlaneCheck)."""

    failures: int
    successes: int


@dataclass(frozen=True, slots=True)
class Check:
    """One check's verdict and the results in a row that disagree with it."""

    ready: bool = False
    streak: int = 0
    #: When the verdict last went from ready to not ready (the drain window's start).
    failed_at: float | None = None


def observe(check: Check, ok: bool, now: float, thresholds: Thresholds) -> Check:
    """One result: the verdict flips after enough opposite results in a row."""
    if ok is check.ready:
        return replace(check, streak=0) if check.streak else check
    streak = check.streak + 1
    if streak < (thresholds.successes if ok else thresholds.failures):
        return replace(check, streak=streak)
    return Check(ready=ok, streak=0, failed_at=None if ok else now)


def draining(check: Check, now: float, window: float) -> bool:
    """Not ready, but in the drain window that began when it stopped being ready."""
    return not check.ready and check.failed_at is not None and now < check.failed_at + window


@dataclass(frozen=True, slots=True)
class DataPlaneState:
    """Every check's verdict: the node's (kube-proxy /healthz) and each checked Service's."""

    node: Check = field(default_factory=Check)
    services: Mapping[ServiceKey, Check] = field(default_factory=dict)


def observe_round(
    state: DataPlaneState,
    *,
    node_ok: bool,
    services_ok: Mapping[ServiceKey, bool],
    now: float,
    thresholds: Thresholds,
) -> DataPlaneState:
    """One round of results: the node's, and one per checked Service (those missing are
    no longer checked and are forgotten; a Service checked again starts not ready)."""
    held = state.services
    return DataPlaneState(
        node=observe(state.node, node_ok, now, thresholds),
        services={
            key: observe(held.get(key, Check()), ok, now, thresholds)
            for key, ok in services_ok.items()
        },
    )


def data_plane(
    state: DataPlaneState,
    *,
    node_withdrawn: bool,
    services_checked: bool,
    now: float,
    window: float,
) -> DataPlane:
    """The value decide() takes. `node_withdrawn`: the drain state machine withdrew the
    node for its data plane (DrainState.data_plane_withdrawn; before that its routes are
    announced with GRACEFUL_SHUTDOWN by the driver's DRAINING mode)."""
    if not services_checked:
        return DataPlane(node_ready=not node_withdrawn)
    checks = state.services.items()
    return DataPlane(
        node_ready=not node_withdrawn,
        services_checked=True,
        ready=frozenset(k for k, c in checks if c.ready),
        draining=frozenset(k for k, c in checks if draining(c, now, window)),
    )


def checked_services(
    config: Config, snapshot: ClusterSnapshot, node: NodeName
) -> dict[ServiceKey, int]:
    """The Services whose healthCheckNodePort gates them on this node, with the port."""
    ours = config.speaker.load_balancer_class
    out: dict[ServiceKey, int] = {}
    for key, svc in snapshot.services.items():
        if (
            svc.health_check_node_port is not None
            and gated_by_health_check(svc)
            and svc.type == "LoadBalancer"
            and is_our_load_balancer(svc, ours)
            and has_serving_endpoint(snapshot, svc, node)
        ):
            out[key] = svc.health_check_node_port
    return out
