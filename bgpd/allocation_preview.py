"""The offline allocation preview (`kube-bgpd explain --allocation`): what the controller
would write to each LoadBalancer Service of a cluster dump, and why not, before it runs.

A migration from MetalLB hands the IPs in `status.loadBalancer.ingress` to our
controller; the question before switching is "which Service keeps its IP, which gets a
new one, and which fails?". This module answers it with the controller's own
`allocate()` over the dump, so the preview and the controller cannot disagree, and
renders it like `explain`: a table for people and a JSON contract (docs/cli.md).

Pure: a Config and a snapshot in, values and strings out; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from bgpd.allocation import AllocationResult, allocate
from bgpd.explain import JSONValue, table_lines
from bgpd.model import ClusterSnapshot, Config, IPAddress, ServiceKey, SkipReason
from bgpd.objects import is_our_load_balancer


class Outcome(StrEnum):
    """What the controller would do to one Service's status."""

    #: The IPs in the status stay, unchanged.
    KEPT = "kept"
    #: No IP yet; these would be written.
    ASSIGNED = "assigned"
    #: The IPs in the status are not valid for this configuration (or a second family is
    #: added): the controller records ClearAssignment and writes these instead.
    CHANGED = "changed"
    #: No IP: AllocationFailed, with the allocator's reason; an IP in the status is cleared.
    FAILED = "failed"
    #: Another implementation's Service (loadBalancerClass): left alone.
    NOT_OURS = SkipReason.NOT_OUR_CLASS.value


@dataclass(frozen=True, slots=True)
class ServicePreview:
    service: ServiceKey
    outcome: Outcome
    #: status.loadBalancer.ingress as in the dump.
    current: tuple[IPAddress, ...]
    #: What the controller would write (empty when failed; the current IPs when not ours).
    ips: tuple[IPAddress, ...]
    pool: str | None = None
    #: FailureReason value when failed.
    reason: str | None = None
    detail: str = ""


def preview(config: Config, snapshot: ClusterSnapshot) -> list[ServicePreview]:
    """One entry per LoadBalancer Service of the snapshot, by namespace/name."""
    services = [s for s in snapshot.services.values() if s.type == "LoadBalancer"]
    result: AllocationResult = allocate(config, services, snapshot.namespaces)
    ours = config.speaker.load_balancer_class
    out: list[ServicePreview] = []
    for svc in sorted(services, key=lambda s: s.key):
        key = svc.key
        current = svc.ingress_ips
        assignment = result.assignments.get(key)
        failure = result.failures.get(key)
        if assignment is not None:
            if assignment.ips == current:
                outcome = Outcome.KEPT
            else:
                outcome = Outcome.CHANGED if current else Outcome.ASSIGNED
            out.append(
                ServicePreview(
                    key,
                    outcome,
                    current,
                    assignment.ips,
                    assignment.pool,
                    detail=result.released.get(key, ""),
                )
            )
        elif failure is not None:
            out.append(
                ServicePreview(
                    key,
                    Outcome.FAILED,
                    current,
                    (),
                    reason=failure.reason.value,
                    detail="; ".join(filter(None, (result.released.get(key), failure.message))),
                )
            )
        elif not is_our_load_balancer(svc, ours):
            theirs = svc.load_balancer_class
            out.append(
                ServicePreview(
                    key,
                    Outcome.NOT_OURS,
                    current,
                    current,
                    detail=f"loadBalancerClass {theirs if theirs is not None else '(none)'}; "
                    f"the controller serves "
                    + (f"class {ours}" if ours is not None else "Services without a class"),
                )
            )
    return out


def preview_json(entries: Sequence[ServicePreview], service: ServiceKey | None = None) -> JSONValue:
    """A list of {"service", "outcome", "current", "ips", "pool", and "reason"/"detail"
    when there is something to say}; only `service`'s entry when given."""
    out: list[JSONValue] = []
    for e in entries:
        if service is not None and e.service != service:
            continue
        entry: dict[str, JSONValue] = {
            "service": e.service,
            "outcome": e.outcome.value,
            "current": [str(ip) for ip in e.current],
            "ips": [str(ip) for ip in e.ips],
            "pool": e.pool,
        }
        if e.reason is not None:
            entry["reason"] = e.reason
        if e.detail:
            entry["detail"] = e.detail
        out.append(entry)
    return out


def _ips(ips: Sequence[IPAddress]) -> str:
    return ",".join(map(str, ips)) or "-"


def preview_table(entries: Sequence[ServicePreview], service: ServiceKey | None = None) -> str:
    """A summary line (how many of each outcome), then one row per Service."""
    rows = [e for e in entries if service is None or e.service == service]
    counts = {o: sum(1 for e in rows if e.outcome is o) for o in Outcome}
    summary = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n)
    lines = [f"{len(rows)} LoadBalancer Service{'' if len(rows) == 1 else 's'}: {summary or '-'}"]
    if rows:
        lines += table_lines(
            ("SERVICE", "OUTCOME", "CURRENT", "WOULD-BE", "POOL", "REASON", "DETAIL"),
            [
                [
                    e.service,
                    e.outcome.value,
                    _ips(e.current),
                    _ips(e.ips),
                    e.pool or "-",
                    e.reason or "-",
                    e.detail,
                ]
                for e in rows
            ],
            "  ",
        )
    return "\n".join(lines) + "\n"
