"""The controller: bgpd.allocation.allocate() applied to the live cluster, while leader.

One loop, level-triggered like the speaker's: Service and Namespace events only wake it;
each round takes the whole current snapshot, runs the pure allocate() over every Service
(existing assignments are read from status.loadBalancer.ingress, so a restarted or newly
elected controller reaches the same answer) and writes the differences:

* status.loadBalancer.ingress through the status subresource, and the annotation
  metallb.io/ip-allocated-from-pool through an ordinary metadata patch, like MetalLB;
* Events as MetalLB records them: IPAllocated (Normal), AllocationFailed (Warning, with
  the allocator's message), ClearAssignment (Normal) when an IP is taken back;
* a Service that is deleted simply drops out of the next round, so its IPs are free; a
  Service that stops being a LoadBalancer of our class gets its status cleared, but
  only if we set it (it carries our pool annotation): another implementation's Services
  are not ours to touch.

The API may lag our own writes (the watch event arrives after the PATCH returns), and an
allocation round must not hand out an IP we just gave away: the IPs we wrote are laid
over the cache until the cache shows them. Releases are written before assignments, so
an IP moving from one Service to another is never on both at once.

Leader election (k8s_watcher.leader) guarantees a single writer; this module runs one
leadership term per `run()` and starts from a fresh list each time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from bgpd import heap
from bgpd.allocation import (
    ANNOTATION_IP_ALLOCATED_FROM_POOL,
    AllocationResult,
    allocate,
    pool_usage,
)
from bgpd.logs import log
from bgpd.metrics import ControllerMetrics, PoolCollector
from bgpd.model import (
    ClusterSnapshot,
    Config,
    IPAddress,
    PoolName,
    Service,
    ServiceKey,
    frozen_map,
)
from bgpd.objects import is_our_load_balancer
from k8s_watcher.cache import KubernetesSource
from k8s_watcher.client import KubeClient
from k8s_watcher.errors import KubernetesError, Outcome
from k8s_watcher.informer import InformerObserver, InformerTiming
from k8s_watcher.leader import LeaderElector, LeaderTiming
from k8s_watcher.writer import (
    EventRecorder,
    EventType,
    ObjectRef,
    patch_service_annotations,
    patch_service_status,
)

logger = logging.getLogger(__name__)

REASON_ALLOCATED = "IPAllocated"
REASON_FAILED = "AllocationFailed"
REASON_CLEARED = "ClearAssignment"


@dataclass(frozen=True, slots=True)
class EventSpec:
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Write:
    """What one Service must be made to look like, and the Events that say why."""

    service: Service
    #: Desired status.loadBalancer.ingress IPs; empty clears the status. None: leave it.
    ips: tuple[IPAddress, ...] | None
    #: Desired pool annotation; None removes it. Ignored when `set_pool` is False.
    pool: PoolName | None
    set_pool: bool
    events: tuple[EventSpec, ...] = ()

    @property
    def releases(self) -> bool:
        """True if this write takes IPs away (written first, see the module docstring)."""
        return self.ips is not None and not set(self.service.ingress_ips) <= set(self.ips)


def _ips_text(ips: Iterable[IPAddress]) -> str:
    return "[" + ", ".join(f'"{ip}"' for ip in ips) + "]"


def cluster_writes(
    services: Iterable[Service],
    result: AllocationResult,
    load_balancer_class: str | None,
    reported: Mapping[ServiceKey, tuple[Service, str]],
) -> tuple[list[Write], dict[ServiceKey, tuple[Service, str]]]:
    """The writes that make the cluster match `result`: pure, so it is tested by tables.

    `reported` is the failure Event we last recorded per Service (with the Service as it
    was then): an unchanged failure of an unchanged Service is not recorded again on
    every round. Returns the writes and the new `reported`.
    """
    writes: list[Write] = []
    new_reported: dict[ServiceKey, tuple[Service, str]] = {}
    for service in services:
        key = service.key
        current_pool = service.annotations.get(ANNOTATION_IP_ALLOCATED_FROM_POOL)
        assignment = result.assignments.get(key)
        failure = result.failures.get(key)
        if assignment is not None:
            events: list[EventSpec] = []
            status_ok = service.ingress_ips == assignment.ips
            if not status_ok:
                if service.ingress_ips:
                    events.append(
                        EventSpec(
                            EventType.NORMAL,
                            REASON_CLEARED,
                            f"current IP {_ips_text(service.ingress_ips)} for {key!r} not "
                            "allowed by config, will attempt for new IP assignment",
                        )
                    )
                events.append(
                    EventSpec(
                        EventType.NORMAL,
                        REASON_ALLOCATED,
                        f"Assigned IP {_ips_text(assignment.ips)}",
                    )
                )
            if status_ok and current_pool == assignment.pool:
                continue
            writes.append(
                Write(
                    service,
                    None if status_ok else assignment.ips,
                    assignment.pool,
                    current_pool != assignment.pool,
                    tuple(events),
                )
            )
        elif failure is not None:
            message = f"Failed to allocate IP for {key!r}: {failure.message}"
            previous = reported.get(key)
            events = []
            if previous is None or previous != (service, message):
                events.append(EventSpec(EventType.WARNING, REASON_FAILED, message))
            new_reported[key] = (service, message)
            if service.ingress_ips:
                events.insert(
                    0,
                    EventSpec(
                        EventType.NORMAL,
                        REASON_CLEARED,
                        f"current IP {_ips_text(service.ingress_ips)} for {key!r} not "
                        f"allowed by config: {failure.message}",
                    ),
                )
            if service.ingress_ips or current_pool is not None or events:
                writes.append(
                    Write(
                        service,
                        () if service.ingress_ips else None,
                        None,
                        current_pool is not None,
                        tuple(events),
                    )
                )
        elif current_pool is not None and not is_our_load_balancer(service, load_balancer_class):
            # We set this status once (our annotation says so); the Service is no longer
            # a LoadBalancer of our class, so its IPs go back to the pool.
            writes.append(
                Write(
                    service,
                    () if service.ingress_ips else None,
                    None,
                    True,
                    (
                        EventSpec(
                            EventType.NORMAL,
                            REASON_CLEARED,
                            f"{key!r} is no longer a LoadBalancer of class "
                            f"{load_balancer_class or '(none)'}; released "
                            f"{_ips_text(service.ingress_ips)}",
                        ),
                    )
                    if service.ingress_ips
                    else (),
                )
            )
    return writes, new_reported


@dataclass(slots=True)
class _Written:
    """What we wrote to one Service and the watch has not shown us yet."""

    uid: str
    ips: tuple[IPAddress, ...] | None = None
    #: (pool,) once the annotation was written; (None,) once it was removed.
    pool: tuple[PoolName | None] | None = None

    def seen_in(self, service: Service) -> bool:
        ips_ok = self.ips is None or service.ingress_ips == self.ips
        current = service.annotations.get(ANNOTATION_IP_ALLOCATED_FROM_POOL)
        return ips_ok and (self.pool is None or current == self.pool[0])

    def applied_to(self, service: Service) -> Service:
        if self.ips is not None:
            service = dataclasses.replace(service, ingress_ips=self.ips)
        if self.pool is not None:
            annotations = dict(service.annotations)
            if self.pool[0] is None:
                annotations.pop(ANNOTATION_IP_ALLOCATED_FROM_POOL, None)
            else:
                annotations[ANNOTATION_IP_ALLOCATED_FROM_POOL] = self.pool[0]
            service = dataclasses.replace(service, annotations=frozen_map(annotations))
        return service


@dataclass(frozen=True, slots=True)
class ControllerTiming:
    #: Back-off after a round whose writes failed with a retryable error.
    retry_initial: float = 0.5
    retry_max: float = 30.0
    #: Concurrent PATCHes while converging (10,000 Services cold start).
    write_concurrency: int = 16


class Controller:
    """Allocates LoadBalancer IPs on the live cluster; `run()` is one leadership term."""

    def __init__(
        self,
        config: Config,
        client: KubeClient,
        recorder: EventRecorder,
        *,
        informer_timing: InformerTiming | None = None,
        timing: ControllerTiming | None = None,
        observer: InformerObserver | None = None,
        settle_heap: bool = False,
    ) -> None:
        self.config = config
        self._client = client
        self._recorder = recorder
        self._informer_timing = informer_timing
        self._timing = timing or ControllerTiming()
        self._observer = observer
        #: What we wrote per Service key, until the cache shows it.
        self._written: dict[ServiceKey, _Written] = {}
        self._reported: dict[ServiceKey, tuple[Service, str]] = {}
        self.last_result: AllocationResult = AllocationResult()
        #: Rounds run and writes made, for tests and logs.
        self.rounds = 0
        self.writes = 0
        self.source: KubernetesSource | None = None
        self._kick = asyncio.Event()
        #: Settle the heap after the first round that succeeds (see _settle), once.
        self._settle_heap = settle_heap

    def usage(self) -> Mapping[PoolName, tuple[int, int]]:
        """Pool -> (size, in use) from the last round, for ControllerMetrics."""
        return pool_usage(self.config, self.last_result)

    async def run(self) -> None:
        """Watch Services and Namespaces and converge them until cancelled."""
        self._written.clear()
        self._reported.clear()
        source = KubernetesSource(
            self._client,
            endpoint_slices=False,
            nodes=False,
            namespaces=True,
            timing=self._informer_timing,
            observer=self._observer,
        )
        self.source = source
        async with asyncio.TaskGroup() as tg:
            tg.create_task(source.run(), name="controller-informers")
            tg.create_task(self._loop(source), name="controller-loop")

    def set_config(self, config: Config) -> None:
        """A reloaded config (SIGHUP): the next round allocates with it, right away."""
        self.config = config
        self._kick.set()

    async def _wait(self, source: KubernetesSource, within: float | None) -> None:
        """Until the cluster changed, the config changed, or `within` seconds passed."""
        changed = asyncio.ensure_future(source.wait_changed())
        kicked = asyncio.ensure_future(self._kick.wait())
        try:
            await asyncio.wait(
                {changed, kicked}, timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (changed, kicked):
                task.cancel()
            await asyncio.wait({changed, kicked})
        self._kick.clear()

    async def _loop(self, source: KubernetesSource) -> None:
        failures = 0
        retry: float | None = None
        while True:
            # A failed round is retried after a back-off, or sooner if news arrives.
            await self._wait(source, retry)
            if not source.synced:
                continue
            ok = await self.reconcile(source.snapshot())
            if ok:
                failures = 0
                retry = None
                if self._settle_heap:
                    self._settle_heap = False
                    self._settle()
            else:
                t = self._timing
                retry = min(t.retry_max, t.retry_initial * 2**failures)
                failures = min(failures + 1, 16)

    @staticmethod
    def _settle() -> None:
        """bgpd.heap.settle once the first round is done, as the speaker does after its
        first sync: the informers' Services and Namespaces and the round's result live on
        without reference cycles, and every later round's full collections walked them
        all (measured with bench/bench_controller.py at 30,000 Services: a later round
        0.78-0.84 s, 0.61-0.63 s with the heap frozen; docs/benchmarks.md "The
        controller's heap frozen after its first round"). Only in a process of
        its own (`kube-bgpd controller`): inside a speaker (`--with-controller`), the
        speaker settles its heap after its own first sync."""
        log(logger, logging.INFO, "controller.heap_frozen", **heap.settle().log_context())

    def _overlay(self, snapshot: ClusterSnapshot) -> list[Service]:
        """The Services with what we wrote laid over what the cache still shows."""
        out: list[Service] = []
        for key, service in snapshot.services.items():
            written = self._written.get(key)
            if written is not None:
                if written.uid != service.uid or written.seen_in(service):
                    del self._written[key]  # caught up, or a new object of that name
                else:
                    service = written.applied_to(service)
            out.append(service)
        for key in self._written.keys() - snapshot.services.keys():
            del self._written[key]
        return out

    async def reconcile(self, snapshot: ClusterSnapshot) -> bool:
        """One round; False if some write failed in a way worth retrying."""
        started = time.monotonic()
        services = self._overlay(snapshot)
        # The last result tells allocate() which Services are the incumbents of a shared
        # IP when sharing breaks. A new leader has none in its first round: every holder
        # of an IP in the status keeps it under its current terms, and that round's result
        # is the memory for later edits; only an edit made while no controller ran falls
        # back to name order (nothing in the cluster says which side changed).
        result = allocate(self.config, services, snapshot.namespaces, self.last_result)
        self.last_result = result
        writes, self._reported = cluster_writes(
            services, result, self.config.speaker.load_balancer_class, self._reported
        )
        self.rounds += 1
        ok = True
        # Releases first: an IP moving between Services is never on two at once.
        for batch in ([w for w in writes if w.releases], [w for w in writes if not w.releases]):
            ok = await self._apply_batch(batch) and ok
        log(
            logger,
            logging.DEBUG if not writes else logging.INFO,
            "controller.round",
            services=len(services),
            assigned=len(result.assignments),
            failed=len(result.failures),
            writes=len(writes),
            ok=ok,
            seconds=round(time.monotonic() - started, 4),
        )
        return ok

    async def _apply_batch(self, writes: list[Write]) -> bool:
        if not writes:
            return True
        limit = asyncio.Semaphore(self._timing.write_concurrency)
        results: list[bool] = []

        async def one(w: Write) -> None:
            async with limit:
                results.append(await self._apply(w))

        async with asyncio.TaskGroup() as tg:
            for w in writes:
                tg.create_task(one(w), name=f"write-{w.service.key}")
        return all(results)

    async def _apply(self, w: Write) -> bool:
        svc = w.service
        try:
            written = self._written.get(svc.key)
            if written is None or written.uid != svc.uid:
                written = self._written[svc.key] = _Written(svc.uid)
            if w.ips is not None:
                await patch_service_status(self._client, svc.namespace, svc.name, w.ips)
                written.ips = w.ips
                self.writes += 1
            if w.set_pool:
                await patch_service_annotations(
                    self._client,
                    svc.namespace,
                    svc.name,
                    {ANNOTATION_IP_ALLOCATED_FROM_POOL: w.pool},
                )
                written.pool = (w.pool,)
                self.writes += 1
        except KubernetesError as exc:
            log(
                logger,
                logging.WARNING,
                "controller.write_failed",
                service=svc.key,
                error=exc.message,
                outcome=exc.outcome,
            )
            # NotFound/Conflict: the watch brings the news and wakes us; no retry here.
            return exc.outcome != Outcome.RETRY or exc.status in (404, 409)
        for e in w.events:
            self._recorder.record(ObjectRef.service(svc), e.type, e.reason, e.message)
        log(
            logger,
            logging.INFO,
            "controller.service_updated",
            service=svc.key,
            ips=",".join(str(ip) for ip in w.ips) if w.ips is not None else "unchanged",
            pool=w.pool,
        )
        return True


# --------------------------------------------------------------------------- composition


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    """Everything `kube-bgpd controller` (or `speaker --with-controller`) needs besides
    the config and the client."""

    lease_namespace: str
    identity: str
    lease_name: str = "kube-bgpd-controller"
    leader: LeaderTiming = dataclasses.field(default_factory=LeaderTiming)
    informer: InformerTiming | None = None
    timing: ControllerTiming | None = None


def default_identity() -> str:
    """client-go's habit: hostname plus a random suffix, so two processes on one host
    (or a restarted pod that kept its name) never share an identity."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


async def run_controller(
    config: Config,
    client: KubeClient,
    options: ControllerOptions,
    *,
    registry: CollectorRegistry | None = None,
    observer: InformerObserver | None = None,
    elected: Callable[[LeaderElector, Controller], None] | None = None,
    settle_heap: bool = False,
) -> None:
    """Campaign for the Lease and allocate while leader, until cancelled.

    Cancelling stops the current term (the allocator loop first), releases the Lease so a
    standby takes over at once, and stops the Event writer. With `registry`, pool usage is
    exported there, and the watch counters too unless an `observer` (the speaker's, when
    the controller runs inside it) already counts them. `elected`, if given, receives
    the elector and controller before the campaign starts (tests and status use it).
    `settle_heap`: the controller is a process of its own (Controller._settle).
    """
    metrics: InformerObserver | None = observer
    if registry is not None and observer is None:
        metrics = ControllerMetrics(registry, lambda: controller.usage())
    elif registry is not None:
        # In the speaker's process: its watch counters exist already; add the pools.
        registry.register(PoolCollector(lambda: controller.usage()))
    recorder = EventRecorder(client, component="kube-bgpd-controller", host=options.identity)
    controller = Controller(
        config,
        client,
        recorder,
        informer_timing=options.informer,
        timing=options.timing,
        observer=metrics,
        settle_heap=settle_heap,
    )
    elector = LeaderElector(
        client,
        namespace=options.lease_namespace,
        name=options.lease_name,
        identity=options.identity,
        timing=options.leader,
    )
    if elected is not None:
        elected(elector, controller)
    log(
        logger,
        logging.INFO,
        "controller.starting",
        identity=options.identity,
        lease=f"{options.lease_namespace}/{options.lease_name}",
        pools=len(config.pools),
    )
    async with asyncio.TaskGroup() as tg:
        events = tg.create_task(recorder.run(), name="controller-events")
        try:
            await elector.run(controller.run)
        finally:
            events.cancel()
