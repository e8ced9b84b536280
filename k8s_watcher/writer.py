"""Writes to the API: Service status and annotations, and rate-limited Events.

* Service status goes through the status subresource (PATCH .../services/NAME/status,
  JSON merge patch, RFC 7386), the only way `status.loadBalancer.ingress` can be set; the
  pool annotation goes through an ordinary PATCH of metadata, like MetalLB.
* Events are best effort and must never hold up BGP or the allocator: `record()` is
  synchronous and never blocks; a background task writes them. Like client-go's event
  recorder, each involved object has a token bucket (a flapping Service cannot flood
  etcd), and an Event identical to a recent one (same object, type, reason, message)
  is folded into it by bumping `count` and `lastTimestamp` instead of creating a new one.

Also here: `AnnouncementEvents`, which turns a speaker's successive Decisions into
"this node started / stopped announcing this Service" Events with the SkipReason.
This module must not decide anything; it only writes what it is told to.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from bgpd.decision import route_key, route_sort_key
from bgpd.logs import log
from bgpd.model import (
    Decision,
    IPAddress,
    IPNetwork,
    NodeName,
    PeerName,
    Route,
    Service,
    ServiceKey,
    Skip,
    SkipReason,
)
from k8s_watcher.client import MERGE_PATCH, KubeClient, object_path
from k8s_watcher.errors import KubernetesError, NotFound
from k8s_watcher.event_budget import Aggregate, Change, EventBudget, Released

logger = logging.getLogger(__name__)

#: Longest Event message we send; events.k8s.io/v1 caps `note` at 1 kB.
MAX_MESSAGE = 1024


def micro_time(when: float | None = None) -> str:
    """metav1.MicroTime text (RFC 3339 with microseconds, UTC)."""
    dt = datetime.fromtimestamp(time.time() if when is None else when, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(when: float | None = None) -> str:
    """metav1.Time text (RFC 3339, seconds)."""
    dt = datetime.fromtimestamp(time.time() if when is None else when, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- Services


async def patch_service_status(
    client: KubeClient,
    namespace: str,
    name: str,
    ingress_ips: Sequence[IPAddress],
) -> dict[str, Any]:
    """Set status.loadBalancer.ingress to exactly `ingress_ips` (empty clears it).

    A merge patch replaces lists whole, so the result is the given IPs in the given
    order; `null` deletes the field (RFC 7386), which is how an assignment is cleared.
    Returns the updated Service as the API server answered it.
    """
    ingress: list[dict[str, str]] | None = [{"ip": str(ip)} for ip in ingress_ips] or None
    return await client.request(
        "PATCH",
        object_path("v1", "services", namespace=namespace, name=name) + "/status",
        body={"status": {"loadBalancer": {"ingress": ingress}}},
        content_type=MERGE_PATCH,
        what=f"patch status of service {namespace}/{name}",
    )


async def patch_service_annotations(
    client: KubeClient,
    namespace: str,
    name: str,
    annotations: Mapping[str, str | None],
) -> dict[str, Any]:
    """Set (or, with None, remove) annotations with a merge patch of metadata only."""
    return await client.request(
        "PATCH",
        object_path("v1", "services", namespace=namespace, name=name),
        body={"metadata": {"annotations": dict(annotations)}},
        content_type=MERGE_PATCH,
        what=f"patch annotations of service {namespace}/{name}",
    )


# --------------------------------------------------------------------------- Events


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involvedObject of an Event. `uid` matters: `kubectl describe` selects a
    Service's Events by uid, so an Event without it is invisible there."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def service(cls, service: Service) -> ObjectRef:
        return cls("Service", service.namespace, service.name, service.uid)

    @classmethod
    def node(cls, node: NodeName) -> ObjectRef:
        """A Node, as the kubelet names it in its own Events: the uid is the node's name
        (`kubectl describe node` selects Events by that uid)."""
        return cls("Node", "", node, node)


@dataclass(frozen=True, slots=True)
class _Pending:
    ref: ObjectRef
    type: EventType
    reason: str
    message: str
    at: float


@dataclass(slots=True)
class _Written:
    name: str
    namespace: str
    count: int
    first: float
    last: float


class _TokenBucket:
    """`burst` tokens, one more every `refill` seconds (client-go's spam filter uses
    25 and 300 s per involved object)."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens = burst
        self.stamp = now

    def take(self, burst: float, refill: float, now: float) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.stamp) / refill)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class EventRecorder:
    """Non-blocking Event recorder with per-object rate limiting and aggregation."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        host: str = "",
        burst: int = 25,
        refill_seconds: float = 300.0,
        aggregate_window: float = 600.0,
        queue_size: int = 1000,
        request_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._component = component
        self._host = host
        self._burst = float(burst)
        self._refill = refill_seconds
        self._window = aggregate_window
        self._timeout = request_timeout
        self._clock = clock
        self._wall = wall
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._buckets: dict[tuple[str, str, str], _TokenBucket] = {}
        self._written: dict[tuple[ObjectRef, EventType, str, str], _Written] = {}
        self._serial = 0
        #: Cleared while the writes are held (hold()): Events are queued, not written.
        self._open = asyncio.Event()
        self._open.set()
        #: Counters for tests and metrics.
        self.recorded = 0
        self.rate_limited = 0
        self.dropped = 0
        self.written = 0
        self.aggregated = 0
        self.failed = 0

    def record(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool:
        """Queue an Event; False if rate-limited or the queue is full. Never blocks."""
        now = self._clock()
        bucket_key = (ref.kind, ref.namespace, ref.name)
        bucket = self._buckets.get(bucket_key)
        if bucket is None:
            bucket = self._buckets[bucket_key] = _TokenBucket(self._burst, now)
        if not bucket.take(self._burst, self._refill, now):
            self.rate_limited += 1
            return False
        try:
            self._queue.put_nowait(
                _Pending(ref, type_, reason, message[:MAX_MESSAGE], self._wall())
            )
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        self.recorded += 1
        return True

    def hold(self) -> None:
        """Queue Events without writing them until release(): the speaker holds them
        through its first sync, when the daemon's time is ExaBGP's first routes'."""
        self._open.clear()

    def release(self) -> None:
        """Write the queued Events and those to come (hold() undone)."""
        self._open.set()

    async def flush(self) -> None:
        """Wait until every queued Event was written or given up (tests, shutdown)."""
        await self._queue.join()

    async def run(self) -> None:
        """Write queued Events until cancelled; failures are logged, never raised."""
        while True:
            pending = await self._queue.get()
            await self._open.wait()
            try:
                await self._write(pending)
            except KubernetesError as exc:
                self.failed += 1
                log(
                    logger,
                    logging.WARNING,
                    "event.write_failed",
                    reason=pending.reason,
                    object=f"{pending.ref.namespace}/{pending.ref.name}",
                    error=exc.message,
                )
            finally:
                self._queue.task_done()

    async def _write(self, p: _Pending) -> None:
        self._expire(p.at)
        key = (p.ref, p.type, p.reason, p.message)
        seen = self._written.get(key)
        if seen is not None:
            try:
                await self._client.request(
                    "PATCH",
                    object_path("v1", "events", namespace=seen.namespace, name=seen.name),
                    body={"count": seen.count + 1, "lastTimestamp": rfc3339(p.at)},
                    content_type=MERGE_PATCH,
                    request_timeout=self._timeout,
                    what=f"patch event {seen.namespace}/{seen.name}",
                )
            except NotFound:
                # Expired by the API server's event TTL; start a new one.
                del self._written[key]
            else:
                seen.count += 1
                seen.last = p.at
                self.aggregated += 1
                return
        namespace = p.ref.namespace or "default"
        self._serial += 1
        # client-go names Events "<object>.<hex nanoseconds>"; the serial keeps two
        # Events recorded within one clock tick apart.
        name = f"{p.ref.name}.{time.time_ns() + self._serial:x}"
        stamp = rfc3339(p.at)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": p.ref.api_version,
                "kind": p.ref.kind,
                "namespace": p.ref.namespace,
                "name": p.ref.name,
                "uid": p.ref.uid,
            },
            "reason": p.reason,
            "message": p.message,
            "type": str(p.type),
            "source": {"component": self._component, "host": self._host},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self._component,
            "reportingInstance": self._host or self._component,
        }
        await self._client.request(
            "POST",
            object_path("v1", "events", namespace=namespace),
            body=body,
            request_timeout=self._timeout,
            what=f"create event {p.reason} for {p.ref.namespace}/{p.ref.name}",
        )
        self.written += 1
        self._written[key] = _Written(name, namespace, 1, p.at, p.at)

    def _expire(self, now: float) -> None:
        """Forget Events older than the aggregation window (bounded memory)."""
        if len(self._written) < 256:
            return
        cutoff = now - self._window
        for k in [k for k, w in self._written.items() if w.last < cutoff]:
            del self._written[k]


# --------------------------------------------------------------------------- speaker

#: MetalLB's speaker records "nodeAssigned" when a node starts announcing a Service;
#: we keep its name so existing alerts and dashboards match, and add the inverse.
REASON_ANNOUNCING = "nodeAssigned"
REASON_NOT_ANNOUNCING = "nodeUnassigned"

_EMPTY_SERVICES: Mapping[ServiceKey, Service] = MappingProxyType({})


#: A Warning Event: (Service, reason, detail).
_Warning = tuple[ServiceKey, str, str]


def _warnings(decision: Decision | None) -> set[_Warning]:
    """What deserves a Warning Event on a Service: every notice (a kept annotation, an
    attribute a peer cannot get) and every Service not announced for an invalid
    annotation, the mistakes its owner can fix."""
    if decision is None:
        return set()
    out = {(n.service, n.reason.value, n.detail) for n in decision.notices}
    out.update(
        (s.service, s.reason.value, s.detail)
        for s in decision.skipped
        if s.reason is SkipReason.INVALID_ANNOTATION
    )
    return out


#: Per Service, (peer, how many routes carry it to that peer) pairs sorted by peer.
PeerCounts = tuple[tuple[str, int], ...]


@functools.lru_cache(maxsize=4096)
def _shared_counts(counts: PeerCounts) -> PeerCounts:
    """One object for equal counts: nearly every Service has the same (one route to each
    of the node's peers), and the announce Events keep a Service's counts for every
    Service announced (a dict each cost ~190 bytes: ~2 MiB at 10,000 Services; a shared
    tuple costs the map's entry only). Bounded: past 4,096 distinct values the least
    recently seen are copies again, which is only memory."""
    return counts


def _counts_plus(counts: dict[ServiceKey, PeerCounts], key: ServiceKey, peer: str, n: int) -> None:
    """Add `n` (1 or -1) routes of `key` to `peer`; a Service with none left is removed."""
    pairs = dict(counts.get(key, ()))
    left = pairs.get(peer, 0) + n
    if left:
        pairs[peer] = left
    else:
        pairs.pop(peer, None)
    if pairs:
        counts[key] = _shared_counts(tuple(sorted(pairs.items())))
    else:
        counts.pop(key, None)


def _route_counts(decision: Decision | None) -> dict[ServiceKey, PeerCounts]:
    """Service -> its PeerCounts."""
    out: dict[ServiceKey, dict[str, int]] = {}
    for route in decision.routes if decision is not None else ():
        for key in route.services:
            peers = out.setdefault(key, {})
            peers[route.peer] = peers.get(route.peer, 0) + 1
    return {key: _shared_counts(tuple(sorted(p.items()))) for key, p in out.items()}


def _routes_at(
    decision: Decision, changes: Mapping[PeerName, AbstractSet[IPNetwork]]
) -> list[Route]:
    """The routes of `decision` at these (peer, prefix), found by bisection (a Decision's
    routes are sorted by route_sort_key)."""
    routes = decision.routes
    out: list[Route] = []
    for peer, prefixes in changes.items():
        for prefix in prefixes:
            target = route_key(peer, prefix)
            at = bisect.bisect_left(routes, target, key=route_sort_key)
            if at < len(routes) and route_sort_key(routes[at]) == target:
                out.append(routes[at])
    return out


def _changed_routes(
    old: Decision | None,
    new: Decision,
    changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None = None,
) -> tuple[list[Route], list[Route]]:
    """(routes only in old, routes only in new), by object identity: the speaker's
    incremental decider hands the same Route objects on for routes that did not change,
    so this is C-speed set work on ids; equal routes that are different objects count as
    removed and added, which nets out in the counts. With `changes` (the (peer, prefix)
    outside which the two decisions hold the same routes) only those are looked at."""
    before = old.routes if old is not None else ()
    after = new.routes
    if before is after:
        return [], []
    if changes is not None and old is not None:
        before, after = tuple(_routes_at(old, changes)), tuple(_routes_at(new, changes))
    old_ids = dict(zip(map(id, before), before, strict=True))
    new_ids = dict(zip(map(id, after), after, strict=True))
    return (
        [old_ids[i] for i in old_ids.keys() - new_ids.keys()],
        [new_ids[i] for i in new_ids.keys() - old_ids.keys()],
    )


def skip_reason(decision: Decision, key: ServiceKey) -> tuple[SkipReason | None, str]:
    """The first reason (and detail) `decide` gave for not announcing a Service (found by
    bisection: a Decision's skips are sorted by skip_sort_key, Service first)."""
    skipped = decision.skipped
    at = bisect.bisect_left(skipped, key, key=_skip_service)
    if at < len(skipped) and skipped[at].service == key:
        return skipped[at].reason, skipped[at].detail
    return None, ""


def _skip_service(skip: Skip) -> ServiceKey:
    return skip.service


#: Node Events of a drain, by the drain's log event name (bgpd.speaker.drain):
#: (type, reason, message template over the event's fields and "node").
DRAIN_EVENTS: Mapping[str, tuple[EventType, str, str]] = MappingProxyType(
    {
        "speaker.draining": (
            EventType.NORMAL,
            "DrainStarted",
            "node {node!r} is draining (asked by {source}): its routes carry "
            "GRACEFUL_SHUTDOWN and are withdrawn in {window}s",
        ),
        "speaker.drained": (
            EventType.NORMAL,
            "Drained",
            "node {node!r} withdrew its routes: the drain window ended",
        ),
        "speaker.drain_cancelled": (
            EventType.NORMAL,
            "DrainCancelled",
            "node {node!r}: the operator's drain was cancelled",
        ),
        "speaker.undrained": (
            EventType.NORMAL,
            "Undrained",
            "node {node!r} announces its routes normally again",
        ),
        "speaker.drain_annotation_invalid": (
            EventType.WARNING,
            "InvalidDrainAnnotation",
            "node {node!r}: {annotation}={value!r} is not {expected}; kept {kept}",
        ),
    }
)

#: The cause of the per-Service Events while a drain has withdrawn the node's routes.
CAUSE_DRAINING = "draining"
#: The cause group of "started announcing" Events.
CAUSE_ANNOUNCING = "announcing"


def drain_event_text(
    name: str, fields: Mapping[str, object], node: NodeName
) -> tuple[EventType, str, str] | None:
    """The Node Event for a drain log event: (type, reason, message); None for an
    event that is no news on the Node."""
    found = DRAIN_EVENTS.get(name)
    if found is None:
        return None
    type_, reason, template = found
    try:
        message = template.format(node=node, **fields)
    except (KeyError, IndexError, ValueError):
        message = f"node {node!r}: {name}"
    return type_, reason, message


#: An announce change waiting for the budget: (the Service, the Event's message).
_Item = tuple[Service, str]


class AnnouncementEvents:
    """Records an Event when this node starts or stops announcing a Service, and a
    Warning Event when a notice or an invalidAnnotation appears for one (once: again only
    after it went away or its text changed).

    The speaker calls `observe(previous, current, snapshot.services)` after each decision
    (previous is None for the first). Only whole-Service transitions are recorded (one IP
    of a dual-stack Service changing peers is a route detail, not news), and never for a
    Service that no longer exists (an Event about a deleted object is noise). Cheap and
    synchronous: the recorder queues and rate-limits.

    A drain that withdraws the node's routes does not change the decision (the driver's
    mode withdraws them), so the speaker says so with `set_withdrawn`: every Service the
    node announced gets "stopped announcing: draining", and "announcing" again when the
    drain ends; while withdrawn, decisions change what is announced later, not now.

    Announce changes go through an EventBudget (k8s_watcher.event_budget): a burst over
    many Services records a bounded number of Events, the rest counted in one aggregated
    Event on the Node; `flush()` reports what waited for the window's end (`wake_at`).
    """

    def __init__(
        self,
        recorder: EventRecorder,
        node: NodeName,
        *,
        budget: EventBudget[_Item] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recorder = recorder
        self._node = node
        self._budget: EventBudget[_Item] = budget if budget is not None else EventBudget()
        self._clock = clock
        #: A drain withdrew the node's routes (set_withdrawn).
        self._withdrawn = False
        self._services: Mapping[ServiceKey, Service] = _EMPTY_SERVICES
        #: The last `new` observed and, for it, Service -> peer -> routes announced: the
        #: next call starting from that decision only looks at the routes that changed.
        self._last: Decision | None = None
        self._counts: dict[ServiceKey, PeerCounts] = {}
        #: _warnings() of `_last`.
        self._warned: set[_Warning] = set()

    def _warn(
        self, old: Decision | None, new: Decision, services: Mapping[ServiceKey, Service]
    ) -> None:
        if old is not None and old.notices is new.notices and old.skipped is new.skipped:
            return
        now = _warnings(new)
        for key, reason, detail in sorted(now - self._warned):
            service = services.get(key)
            if service is None:
                continue
            text = detail
            if reason == SkipReason.INVALID_ANNOTATION:
                text = f"not announced: {detail}"
            self._recorder.record(
                ObjectRef.service(service),
                EventType.WARNING,
                reason,
                f"node {self._node!r}: {text}",
            )
        self._warned = now

    def observe(
        self,
        old: Decision | None,
        new: Decision,
        services: Mapping[ServiceKey, Service] = _EMPTY_SERVICES,
        changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None = None,
    ) -> None:
        """`changes`, when known: the (peer, prefix) outside which `old` and `new` hold
        the same Route objects (the reconciler's last_changes); then only those routes
        are looked at, instead of every route of both decisions."""
        if old is None or old is not self._last:
            self._counts = _route_counts(old)
            self._warned = _warnings(old)
        self._warn(old, new, services)
        counts = self._counts
        removed, added = _changed_routes(old, new, changes)
        was: dict[ServiceKey, bool] = {}
        for route in removed:
            for key in route.services:
                was.setdefault(key, True)
                _counts_plus(counts, key, route.peer, -1)
        for route in added:
            for key in route.services:
                was.setdefault(key, key in counts)
                _counts_plus(counts, key, route.peer, 1)
        self._last = new
        self._services = services
        if self._withdrawn:
            # The routes are withdrawn whatever the decision says: nothing changes now.
            return
        news = [
            self._announcing(services[key])
            for key in sorted(k for k, present in was.items() if not present and k in counts)
            if key in services
        ]
        for key in sorted(k for k, present in was.items() if present and k not in counts):
            service = services.get(key)
            if service is None:
                continue
            reason, detail = skip_reason(new, key)
            cause = str(reason) if reason is not None else "no route selected"
            why = f"{cause} ({detail})" if detail else cause
            news.append(self._stopped(service, cause, why))
        self._release(self._budget.offer(self._clock(), news))

    def _announcing(self, service: Service) -> Change[_Item]:
        peers_text = ", ".join(peer for peer, _ in self._counts[service.key])
        message = f"announcing from node {self._node!r} to peers {peers_text}"
        return Change(REASON_ANNOUNCING, CAUSE_ANNOUNCING, (service, message))

    def _stopped(self, service: Service, cause: str, why: str) -> Change[_Item]:
        message = f"node {self._node!r} stopped announcing: {why}"
        return Change(REASON_NOT_ANNOUNCING, cause, (service, message))

    def set_withdrawn(self, withdrawn: bool) -> None:
        """A drain withdrew (True) or gave back (False) every route of the node: one
        announce change per Service the last decision announces (through the budget)."""
        if withdrawn == self._withdrawn:
            return
        self._withdrawn = withdrawn
        services = self._services
        keys = sorted(k for k in self._counts if k in services)
        if withdrawn:
            changes = [self._stopped(services[k], CAUSE_DRAINING, CAUSE_DRAINING) for k in keys]
        else:
            changes = [self._announcing(services[k]) for k in keys]
        self._release(self._budget.offer(self._clock(), changes))

    @property
    def wake_at(self) -> float | None:
        """When `flush` has an aggregated Event to record (None: nothing waits)."""
        return self._budget.wake_at

    def flush(self) -> None:
        """Record the aggregated Events whose window has ended."""
        self._release(self._budget.flush(self._clock()))

    def _release(self, released: Released[_Item]) -> None:
        for change in released.single:
            service, message = change.item
            self._recorder.record(
                ObjectRef.service(service), EventType.NORMAL, change.reason, message
            )
        for agg in released.aggregates:
            self._recorder.record(
                ObjectRef.node(self._node),
                EventType.NORMAL,
                agg.reason,
                self._aggregate_message(agg),
            )

    def _aggregate_message(self, agg: Aggregate) -> str:
        """client-go marks its aggregate "(combined from similar events)"; ours names the
        count, since the Services it stands for have no Event of their own."""
        noun = "Service" if agg.count == 1 else "Services"
        if agg.reason == REASON_ANNOUNCING:
            what = f"node {self._node!r} started announcing {agg.count} more {noun}"
        else:
            what = f"node {self._node!r} stopped announcing {agg.count} more {noun}: {agg.cause}"
        return f"(combined from similar events): {what} (over the Event budget: no Event each)"
