"""Prometheus metrics of the speaker and the controller, read from live state at scrape time.

Two kinds of metric live here, as prometheus_client's documentation recommends:

* State, exposed by custom collectors (`SpeakerCollector`, `PoolCollector`,
  `MQTTCollector`) that read the daemon's current state when Prometheus scrapes. A
  withdrawn route or a removed peer simply is not in the state any more, so its series
  disappears by itself; nothing has to remember to delete a label set (MetalLB has to).
  Counters that another component already keeps (ExaBGP commands sent, ExaBGP restarts,
  MQTT drops) are exposed the same way, so there is one source of truth.
* Events, recorded inline when they happen: reconcile duration, convergence latency by
  phase, watch events and relists. Callers record them through `SpeakerMetrics`,
  `WatchMetrics` and `ControllerMetrics` methods, never through prometheus_client
  objects, so names, labels and buckets stay in this file.

The collaborators are small Protocols of our own (`SpeakerView`, `MQTTView`) built from
`bgpd.model` types: tests hand in plain in-memory implementations (`StaticSpeakerView`)
and the composition root hands callables over the real driver, supervisor, reconciler
and source (`SpeakerProbes`). This module must not import the Kubernetes
client, the ExaBGP driver, the reconciler or the MQTT publisher (import-linter keeps the
adapters independent); the Kubernetes watcher reaches the watch counters through an
observer the composition root passes it (`WatchMetrics`, which matches
`k8s_watcher.informer.InformerObserver`).

Every metric takes a `registry`, so tests use a fresh `CollectorRegistry` and two
daemons in one test process never share series. The node is the scrape target, so no
metric carries a `node` label except `kube_bgpd_speaker_info`, which dashboards join on.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter as _Counts
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from bgpd import __version__
from bgpd.aiohttp_import import web
from bgpd.metric_rows import AnnouncedRows, Encoded, LineEncoder, Rows, ServingRows
from bgpd.model import (
    ClusterSnapshot,
    Decision,
    DesiredRoutes,
    NodeName,
    PeerHold,
    PeerName,
    PeerStatus,
    PoolName,
    ServiceKey,
    SessionState,
    SkipReason,
)

PREFIX = "kube_bgpd"

#: Convergence is milliseconds when healthy (~2 ms per announce, measured against a lab
#: router) and seconds under load (10,000 routes take ~1.7 s); the top buckets catch a
#: stuck pipeline.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class ConvergencePhase(StrEnum):
    """The legs of "a Kubernetes change reaches the routers", timed separately so a slow
    leg is visible: the debounce and decision, then ExaBGP accepting the commands."""

    #: A watch event was received -> the decision that reflects it was made.
    DECIDE = "decide"
    #: The decision was handed to the driver -> ExaBGP accepted every command (`done`).
    ACCEPT = "accept"
    #: A watch event was received -> ExaBGP accepted: what an operator waits for.
    TOTAL = "total"


# --------------------------------------------------------------------------- protocols


class SpeakerView(Protocol):
    """What the speaker collector reads at scrape time. Every method must be cheap and
    non-blocking (it runs in the listener's request handler) and return a consistent
    value that the caller will not mutate afterwards."""

    def peer_status(self) -> Mapping[PeerName, PeerStatus]:
        """Session state and desired/accepted/advertised/pending counts per configured
        peer."""
        ...

    def accepted(self) -> DesiredRoutes:
        """The routes ExaBGP accepted (`done`), per peer: in its adj-rib-out, also while
        the session is down."""
        ...

    def advertised(self) -> DesiredRoutes:
        """The accepted routes sent to the router on its established session, per peer
        (the routes on the wire; empty while the session is down)."""
        ...

    def last_decision(self) -> Decision | None:
        """The last decision the reconciler made; None before the first."""
        ...

    def last_snapshot(self) -> ClusterSnapshot | None:
        """The cluster snapshot that decision was made from; None before the first."""
        ...

    def exabgp_running(self) -> bool: ...

    def exabgp_restarts(self) -> int:
        """How many times the driver restarted ExaBGP after it died (not the first start)."""
        ...

    def commands_sent(self) -> Mapping[str, int]:
        """ExaBGP API commands written since start, by kind (announce, withdraw, eor, ...)."""
        ...

    def config_loaded(self) -> bool:
        """A valid configuration is in use."""
        ...

    def config_stale(self) -> bool:
        """The newest configuration was rejected; the last valid one is still in use."""
        ...

    def synced(self) -> Mapping[str, bool]:
        """Per watched kind, whether its first list completed (decisions wait for all)."""
        ...

    def cluster_stale(self) -> bool:
        """The cluster source lost its watch (or its file is bad): decisions are paused
        and the last applied routes stay."""
        ...


class MQTTView(Protocol):
    """What the MQTT publisher exposes; the counters are its own, kept where they change."""

    @property
    def connected(self) -> bool: ...

    @property
    def published(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    @property
    def queued(self) -> int: ...

    @property
    def connects(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class StaticSpeakerView:
    """A `SpeakerView` over fixed values: what a status dump holds, and what tests and
    `promtool` checks feed the collector. The live speaker adapts its driver instead."""

    peers: Mapping[PeerName, PeerStatus] = field(default_factory=dict)
    accepted_routes: DesiredRoutes = field(default_factory=dict)
    decision: Decision | None = None
    snapshot: ClusterSnapshot | None = None
    running: bool = False
    restarts: int = 0
    commands: Mapping[str, int] = field(default_factory=dict)
    loaded: bool = False
    stale: bool = False
    kinds_synced: Mapping[str, bool] = field(default_factory=dict)
    source_stale: bool = False
    advertised_routes: DesiredRoutes = field(default_factory=dict)

    def peer_status(self) -> Mapping[PeerName, PeerStatus]:
        return self.peers

    def accepted(self) -> DesiredRoutes:
        return self.accepted_routes

    def advertised(self) -> DesiredRoutes:
        return self.advertised_routes

    def last_decision(self) -> Decision | None:
        return self.decision

    def last_snapshot(self) -> ClusterSnapshot | None:
        return self.snapshot

    def exabgp_running(self) -> bool:
        return self.running

    def exabgp_restarts(self) -> int:
        return self.restarts

    def commands_sent(self) -> Mapping[str, int]:
        return self.commands

    def config_loaded(self) -> bool:
        return self.loaded

    def config_stale(self) -> bool:
        return self.stale

    def synced(self) -> Mapping[str, bool]:
        return self.kinds_synced

    def cluster_stale(self) -> bool:
        return self.source_stale


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeakerProbes:
    """A `SpeakerView` made of plain callables: how the composition root hands the live
    driver, supervisor, reconciler and source to the collector without this module
    importing any of them (each callable is read at scrape time)."""

    peers: Callable[[], Mapping[PeerName, PeerStatus]]
    accepted_routes: Callable[[], DesiredRoutes]
    decision: Callable[[], Decision | None]
    snapshot: Callable[[], ClusterSnapshot | None]
    running: Callable[[], bool]
    restarts: Callable[[], int]
    commands: Callable[[], Mapping[str, int]]
    loaded: Callable[[], bool]
    stale: Callable[[], bool]
    kinds_synced: Callable[[], Mapping[str, bool]]
    source_stale: Callable[[], bool]
    advertised_routes: Callable[[], DesiredRoutes]

    def peer_status(self) -> Mapping[PeerName, PeerStatus]:
        return self.peers()

    def accepted(self) -> DesiredRoutes:
        return self.accepted_routes()

    def advertised(self) -> DesiredRoutes:
        return self.advertised_routes()

    def last_decision(self) -> Decision | None:
        return self.decision()

    def last_snapshot(self) -> ClusterSnapshot | None:
        return self.snapshot()

    def exabgp_running(self) -> bool:
        return self.running()

    def exabgp_restarts(self) -> int:
        return self.restarts()

    def commands_sent(self) -> Mapping[str, int]:
        return self.commands()

    def config_loaded(self) -> bool:
        return self.loaded()

    def config_stale(self) -> bool:
        return self.stale()

    def synced(self) -> Mapping[str, bool]:
        return self.kinds_synced()

    def cluster_stale(self) -> bool:
        return self.source_stale()


PoolUsage = Mapping[PoolName, tuple[int, int]]
"""pool -> (addresses in the pool, addresses in use), as bgpd.allocation.pool_usage gives."""


# --------------------------------------------------------------------------- helpers


_Family = GaugeMetricFamily | CounterMetricFamily


class _RowGauge(GaugeMetricFamily):
    """A per-route gauge family whose samples are `Rows` (bgpd.metric_rows) over immutable
    data captured at collect time (a Decision's routes, a snapshot, the driver's copy of
    the advertised routes), built when first read. /metrics encodes the rows in its
    worker thread, re-encoding only the rows that changed (ExpositionCache), not in the
    speaker's event loop; any other reader (generate_latest in tests) gets every sample."""

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        self._unread: Rows | None = None
        #: The rows the samples come from; None: no samples.
        self.rows: Rows | None = None
        self.label_names = tuple(labels)
        super().__init__(name, documentation, labels=labels)

    def defer(self, rows: Rows) -> None:
        """The family's samples are ``rows``, built when first read."""
        self._unread = self.rows = rows

    @property
    def samples(self) -> list[Sample]:
        rows, self._unread = self._unread, None
        if rows is not None:
            for values, value in rows.samples():
                self.add_metric(values, value)
        return self._late_samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._late_samples = value


class _LateFamily(Metric):
    """A prometheus_client metric's family (a Counter or a Histogram: the event metrics)
    whose samples are built when first read: in /metrics' worker thread, not on the
    event loop. Building them is most of what collecting costs (a histogram's bucket
    samples: ~0.15 ms a scrape at the speaker's 4 histograms' 64 buckets, measured on the
    loop's thread); the library keeps each value behind a lock of its own, so reading it
    from another thread is what its own threaded exporter does (an observation made
    meanwhile may show in the sum before its bucket, until the next scrape)."""

    def __init__(self, described: Metric, source: Collector) -> None:
        self._source: Collector | None = source
        super().__init__(described.name, described.documentation, described.type, described.unit)

    @property
    def samples(self) -> list[Sample]:
        source, self._source = self._source, None
        if source is not None:
            self._late_samples = [s for m in source.collect() for s in m.samples]
        return self._late_samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._late_samples = value


class _ReadLate(Collector):
    """Registers a prometheus_client metric so that its samples are built late
    (`_LateFamily`). The metric is created with ``registry=None`` and this collector is
    registered in its place: same names, same order in the exposition."""

    def __init__(self, metric: Collector, registry: CollectorRegistry) -> None:
        self._metric = metric
        (self._described,) = metric.describe()  # type: ignore[attr-defined]
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        yield self._described

    def collect(self) -> Iterator[Metric]:
        yield _LateFamily(self._described, self._metric)


def _name(short: str) -> str:
    return f"{PREFIX}_{short}"


def _gauge(short: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(_name(short), doc, labels=list(labels))


def _row_gauge(short: str, doc: str, labels: Iterable[str] = ()) -> _RowGauge:
    return _RowGauge(_name(short), doc, labels=list(labels))


def _counter(short: str, doc: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
    # CounterMetricFamily appends _total itself.
    return CounterMetricFamily(_name(short), doc, labels=list(labels))


def _serving_rows(decision: Decision, snapshot: ClusterSnapshot | None) -> ServingRows:
    return ServingRows(
        decision.routes, decision.skipped, None if snapshot is None else snapshot.endpoint_slices
    )


def serving_services(decision: Decision, snapshot: ClusterSnapshot | None) -> dict[ServiceKey, int]:
    """Services this speaker is responsible for (bgpd.metric_rows.handled_services) ->
    endpoints in the cluster that can serve, as kube_bgpd_service_serving_endpoints
    exports them."""
    return {
        ServiceKey(values[0]): int(n) for values, n in _serving_rows(decision, snapshot).samples()
    }


# --------------------------------------------------------------------------- collectors


class SpeakerCollector(Collector):
    """Builds every state metric of one speaker from a `SpeakerView` at scrape time."""

    def __init__(self, view: SpeakerView, *, node: NodeName) -> None:
        self._view = view
        self._node = node

    def describe(self) -> Iterator[Metric]:
        # Returning the empty families lets the registry refuse duplicate names at
        # registration time without touching live state.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        fams = self._families()
        (
            info,
            up,
            since,
            accepted,
            pending,
            announced,
            skipped,
            serving,
            commands,
            restarts,
            running,
            loaded,
            stale,
            synced,
            cluster_stale,
            desired,
            advertised,
        ) = fams
        view = self._view
        info.add_metric([self._node, __version__], 1)

        for name, st in sorted(view.peer_status().items()):
            up.add_metric([name], 1 if st.state is SessionState.UP else 0)
            if st.since is not None:
                since.add_metric([name], st.since)
            accepted.add_metric([name], st.accepted)
            pending.add_metric([name], st.pending)
            desired.add_metric([name], st.desired)
            advertised.add_metric([name], st.advertised)

        decision = view.last_decision()
        if decision is not None:
            # Per route and per Service: built late (see _RowGauge) from the immutable
            # decision and snapshot and a copy of what the routers were sent.
            assert isinstance(announced, _RowGauge)
            assert isinstance(serving, _RowGauge)
            announced.defer(AnnouncedRows(decision.routes, view.advertised()))
            serving.defer(_serving_rows(decision, view.last_snapshot()))
            for reason, count in sorted(skipped_counts(decision).items()):
                skipped.add_metric([reason.value], count)

        for kind, n in sorted(view.commands_sent().items()):
            commands.add_metric([kind], n)
        restarts.add_metric([], view.exabgp_restarts())
        running.add_metric([], 1 if view.exabgp_running() else 0)
        loaded.add_metric([], 1 if view.config_loaded() else 0)
        stale.add_metric([], 1 if view.config_stale() else 0)
        for kind, ok in sorted(view.synced().items()):
            synced.add_metric([kind], 1 if ok else 0)
        cluster_stale.add_metric([], 1 if view.cluster_stale() else 0)
        yield from fams

    @staticmethod
    def _families() -> tuple[_Family, ...]:
        return (
            _gauge(
                "speaker_info",
                "Always 1; labels name this speaker's node and version (join on instance).",
                ["node", "version"],
            ),
            _gauge("bgp_session_up", "1 if the BGP session to the peer is established.", ["peer"]),
            _gauge(
                "bgp_session_last_change_timestamp_seconds",
                "Unix time of the peer's last session state change.",
                ["peer"],
            ),
            _gauge(
                "bgp_prefixes_accepted",
                "Prefixes ExaBGP accepted for the peer (answered done: in its adj-rib-out, "
                "also while the session is down).",
                ["peer"],
            ),
            _gauge(
                "bgp_prefixes_pending",
                "Announce or withdraw commands for the peer not yet accepted by ExaBGP.",
                ["peer"],
            ),
            _row_gauge(
                "service_announced",
                "Per Service, prefix and peer this node decided to announce: 1 while the "
                "prefix is advertised to the peer (sent in UPDATEs on its established "
                "session), 0 while not (pending, or the session down). Absent when not "
                "decided. A Service is announced when advertised to at least one peer: "
                "max over peer and node.",
                ["service", "prefix", "peer"],
            ),
            _gauge(
                "services_skipped",
                "LoadBalancer Services this node does not announce (some IP), by reason.",
                ["reason"],
            ),
            _row_gauge(
                "service_serving_endpoints",
                "Endpoints in the cluster that can serve, per Service this speaker handles.",
                ["service"],
            ),
            _counter("exabgp_commands", "ExaBGP API commands written, by kind.", ["kind"]),
            _counter("exabgp_restarts", "Times ExaBGP was restarted after it exited."),
            _gauge("exabgp_running", "1 while the ExaBGP child process runs."),
            _gauge("config_loaded", "1 once a valid configuration is in use."),
            _gauge(
                "config_stale",
                "1 while the newest configuration is rejected and the last valid one is used.",
            ),
            _gauge(
                "cache_synced",
                "1 once the first list of the watched kind completed.",
                ["kind"],
            ),
            _gauge(
                "cluster_stale",
                "1 while the cluster source is stale (watch lost): decisions are paused.",
            ),
            _gauge(
                "bgp_prefixes_desired",
                "Prefixes the decision wants the peer to have (as the drain state leaves them).",
                ["peer"],
            ),
            _gauge(
                "bgp_prefixes_advertised",
                "Prefixes sent to the peer in UPDATEs on its established session and not "
                "withdrawn since: 0 while the session is down.",
                ["peer"],
            ),
        )


class PoolCollector(Collector):
    """Allocator pool usage (controller side), read from the allocator's current result."""

    def __init__(self, usage: Callable[[], PoolUsage]) -> None:
        self._usage = usage

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        total, used = fams = self._families()
        for pool, (size, in_use) in sorted(self._usage().items()):
            total.add_metric([pool], size)
            used.add_metric([pool], in_use)
        yield from fams

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            _gauge("pool_addresses", "Addresses in the IPAddressPool.", ["pool"]),
            _gauge(
                "pool_addresses_in_use",
                "Addresses of the IPAddressPool assigned to Services.",
                ["pool"],
            ),
        )


class MQTTCollector(Collector):
    """The MQTT publisher's connection state and its own counters."""

    def __init__(self, view: MQTTView) -> None:
        self._view = view

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        connected, published, dropped, queued, connects = fams = self._families()
        v = self._view
        connected.add_metric([], 1 if v.connected else 0)
        published.add_metric([], v.published)
        dropped.add_metric([], v.dropped)
        queued.add_metric([], v.queued)
        connects.add_metric([], v.connects)
        yield from fams

    @staticmethod
    def _families() -> tuple[_Family, ...]:
        return (
            _gauge("mqtt_connected", "1 while connected to the MQTT broker."),
            _counter("mqtt_messages_published", "MQTT messages the broker accepted."),
            _counter(
                "mqtt_events_dropped",
                "Events dropped because the queue to a slow or absent broker was full.",
            ),
            _gauge("mqtt_events_queued", "Events waiting for the MQTT broker."),
            _counter("mqtt_connects", "Successful connections to the MQTT broker."),
        )


@dataclass(frozen=True, slots=True)
class BfdSession:
    """One BFD session as the metrics show it (the composition root adapts bgpd.bfd's
    BfdPeerState: this module does not import the adapter)."""

    peer: str
    #: bgpd.bfd.state.BfdState's value.
    state: str
    flaps: int
    detect_ms: int | None


class BfdCollector(Collector):
    """The BFD session of each BFD-enabled peer, read at scrape time; no series while no
    peer has a bfdProfile. ``states``: every value a session's state can take, so
    ``bfd_session_state`` has one series per state (1 for the current one)."""

    def __init__(self, sessions: Callable[[], Iterable[BfdSession]], states: Iterable[str]) -> None:
        self._sessions = sessions
        self._states = tuple(states)

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        up, state, flaps, detect = fams = self._families()
        for s in self._sessions():
            up.add_metric([s.peer], 1 if s.state == "up" else 0)
            for value in self._states:
                state.add_metric([s.peer, value], 1 if value == s.state else 0)
            flaps.add_metric([s.peer], s.flaps)
            if s.detect_ms is not None:
                detect.add_metric([s.peer], s.detect_ms / 1000.0)
        yield from fams

    @staticmethod
    def _families() -> tuple[_Family, ...]:
        return (
            _gauge("bfd_session_up", "1 while the peer's BFD session is Up.", ["peer"]),
            _gauge(
                "bfd_session_state",
                "The peer's BFD session state (admin-down, down, init, up, unknown): 1 for "
                "the current one.",
                ["peer", "state"],
            ),
            _counter(
                "bfd_session_flaps",
                "Times the peer's BFD session left Up since the speaker started.",
                ["peer"],
            ),
            _gauge(
                "bfd_detect_time_seconds",
                "The negotiated BFD detection time (only while Up).",
                ["peer"],
            ),
        )


# --------------------------------------------------------------------------- event metrics


class WatchMetrics:
    """Watch events and relists per kind. The watcher gets the bound methods as plain
    callables, so it never imports this module."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._events = Counter(
            _name("watch_events"),
            "Kubernetes watch events received, by kind and type (ADDED, MODIFIED, DELETED).",
            ["kind", "type"],
            registry=None,
        )
        self._relists = Counter(
            _name("watch_relists"),
            "Full lists of a kind (first sync, 410 Gone, reconnects).",
            ["kind"],
            registry=None,
        )
        _ReadLate(self._events, registry)
        _ReadLate(self._relists, registry)

    def watch_event(self, kind: str, event_type: str) -> None:
        self._events.labels(kind=kind, type=event_type).inc()

    def relist(self, kind: str) -> None:
        self._relists.labels(kind=kind).inc()


class SpeakerMetrics:
    """Everything one speaker exports: the state collector(s) plus the inline event
    metrics. The composition root creates one and calls its `observe_*` methods.

    The watch counters (`watch`) may be created first and handed to the cluster source
    as its observer, because the source exists before the speaker that reads it."""

    def __init__(
        self,
        registry: CollectorRegistry,
        view: SpeakerView,
        *,
        node: NodeName,
        mqtt: MQTTView | None = None,
        watch: WatchMetrics | None = None,
        bfd: BfdCollector | None = None,
    ) -> None:
        self.registry = registry
        self.watch = watch if watch is not None else WatchMetrics(registry)
        registry.register(SpeakerCollector(view, node=node))
        if mqtt is not None:
            registry.register(MQTTCollector(mqtt))
        if bfd is not None:
            registry.register(bfd)
        self._reconcile = Histogram(
            _name("reconcile_duration_seconds"),
            "Time to rebuild the snapshot, decide and hand the routes to the driver.",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self._convergence = Histogram(
            _name("convergence_seconds"),
            "Latency from a Kubernetes event to the routers, by phase (decide, accept, total).",
            ["phase"],
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        _ReadLate(self._reconcile, registry)
        _ReadLate(self._convergence, registry)
        # Pre-create each phase so dashboards see zero rather than nothing before the first.
        for phase in ConvergencePhase:
            self._convergence.labels(phase=phase.value)
        self._config_write_failures = Counter(
            _name("exabgp_config_write_failures"),
            "ExaBGP configuration files that could not be written (e.g. a full work "
            "directory); the running ExaBGP is kept and the write retried.",
            registry=None,
        )
        _ReadLate(self._config_write_failures, registry)

    def config_write_failed(self) -> None:
        self._config_write_failures.inc()

    def observe_reconcile(self, seconds: float) -> None:
        self._reconcile.observe(seconds)

    def observe_convergence(self, phase: ConvergencePhase, seconds: float) -> None:
        """Record one leg; seconds below zero (clock steps) are clamped, not dropped."""
        self._convergence.labels(phase=phase.value).observe(max(0.0, seconds))


class ControllerMetrics(WatchMetrics):
    """What the controller exports: pool usage from state plus watch counters."""

    def __init__(self, registry: CollectorRegistry, usage: Callable[[], PoolUsage]) -> None:
        super().__init__(registry)
        self.registry = registry
        registry.register(PoolCollector(usage))


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format (version 0.0.4), as /metrics serves it."""
    return generate_latest(registry)


_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}


def metric_names(registry: CollectorRegistry) -> frozenset[str]:
    """Every series name the registry exports (counters as ..._total, histograms as
    _bucket/_sum/_count), even before a labelled metric's first sample, for the tests
    that check dashboards and alert rules only use names that exist."""
    names: set[str] = set()
    for metric in registry.collect():
        suffixes = _SUFFIXES.get(metric.type, ())
        names.update(metric.name + s for s in suffixes)
        if metric.type != "counter":
            names.add(metric.name)
    return frozenset(names)


def skipped_counts(decision: Decision) -> Mapping[SkipReason, int]:
    """Distinct Services skipped per reason: what kube_bgpd_services_skipped exports."""
    return _Counts(r for r, _ in {(s.reason, s.service) for s in decision.skipped})


class _Collected:
    """Metric families already collected, shaped like a registry for the encoders."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


_Encoder = Callable[[_Collected], bytes]


class ExpositionCache:
    """/metrics' body, with the per-route families (`_RowGauge`) encoded row by row: a
    scrape re-encodes only the rows whose state changed since the last scrape
    (bgpd.metric_rows), so at 10,000s of routes a scrape after one change costs about
    that change, not every route again (the encoding thread holds the GIL while the
    event loop may have a change to send; docs/benchmarks.md). The other families are
    small and encoded whole.

    Per content type (which names the encoder: `choose_encoder` returns a new partial per
    request for OpenMetrics) and family name it keeps the `LineEncoder` and what the rows
    were encoded to (~5 MiB at 10,000 routes), for the `KEPT_FORMATS` content types
    asked for last: the Accept header chooses the content type, version included, and a
    scraper must not make the speaker keep one copy per version string it makes up. Both
    encoders write families one after another, so the pieces join to what the encoder
    gives for the whole registry. Scrapes may run in two worker threads at once (two
    scrapers): the lock keeps each family's rows to one of them."""

    #: Prometheus asks for one format; a second scraper or a manual curl may ask another.
    KEPT_FORMATS = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: content type -> family name -> its LineEncoder and rows' encoding.
        self._kept: dict[str, dict[str, tuple[LineEncoder, Encoded | None]]] = {}

    def encode(self, encoder: _Encoder, content_type: str, families: list[Metric]) -> bytes:
        trailer = encoder(_Collected([]))  # OpenMetrics' "# EOF", nothing for Prometheus

        def text(group: list[Metric]) -> bytes:
            return encoder(_Collected(group))[: -len(trailer) or None]

        parts: list[bytes] = []
        plain: list[Metric] = []
        with self._lock:
            kept_here = self._kept.pop(content_type, {})
            while len(self._kept) >= self.KEPT_FORMATS:
                del self._kept[next(iter(self._kept))]  # the one asked for longest ago
            self._kept[content_type] = kept_here
            for family in families:
                rows = family.rows if isinstance(family, _RowGauge) else None
                if rows is None:
                    plain.append(family)
                    continue
                if plain:
                    parts.append(text(plain))
                    plain = []
                kept = kept_here.pop(family.name, None)  # a failed encoding leaves none
                if kept is None:
                    assert isinstance(family, _RowGauge)
                    lines = LineEncoder(text, family.name, family.documentation, family.label_names)
                    kept = (lines, None)
                encoded = rows.encode(kept[1], kept[0])
                kept_here[family.name] = (kept[0], encoded)
                parts.append(encoded.body)
        if plain:
            parts.append(text(plain))
        parts.append(trailer)
        return b"".join(parts)


def metrics_routes(registry: CollectorRegistry) -> list[web.RouteDef]:
    """``GET /metrics`` for the speaker's (or controller's) aiohttp listener, in the
    format the scraper asks for (OpenMetrics or Prometheus text)."""
    cache = ExpositionCache()

    async def handler(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        # Reading the state must happen on the event loop that owns it; turning the
        # families into text (the larger part for 10,000s of routes) happens in a thread,
        # so a scrape stalls the driver's loop as little as possible, and only the rows
        # whose state changed are encoded again (ExpositionCache).
        families = list(registry.collect())
        body = await asyncio.to_thread(cache.encode, encoder, content_type, families)
        return web.Response(body=body, headers={"Content-Type": content_type})

    return [web.get("/metrics", handler)]


class BfdGateView(Protocol):
    """What BGP-follows-BFD exposes (bgpd.speaker.bfd_follow): read at scrape time."""

    def held(self) -> Sequence[PeerHold]: ...

    def teardowns(self) -> Mapping[PeerName, int]: ...


class BfdGateCollector(Collector):
    """Routes held back from a peer whose BFD session is not Up (bfdStrict), and BGP
    sessions torn down because BFD went down. A held peer has a series (0 routes
    included) while it is held, none otherwise."""

    def __init__(self, view: BfdGateView) -> None:
        self._view = view

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        held, teardowns = fams = self._families()
        for h in self._view.held():
            held.add_metric([h.peer, h.reason.value], h.routes)
        for peer, n in sorted(self._view.teardowns().items()):
            teardowns.add_metric([peer], n)
        yield from fams

    @staticmethod
    def _families() -> tuple[_Family, ...]:
        return (
            _gauge(
                "bfd_routes_held",
                "Routes held back from the peer: its BFD session is not Up (bfdStrict).",
                ["peer", "reason"],
            ),
            _counter(
                "bfd_teardowns",
                "BGP sessions torn down at once because their BFD session went down.",
                ["peer"],
            ),
        )


async def start_metrics_listener(
    registry: CollectorRegistry, host: str, port: int
) -> tuple[web.AppRunner, int]:
    """A listener with only ``/metrics`` and ``/healthz``, for the controller (the speaker
    mounts `metrics_routes` on its status listener instead). Returns the runner (call
    ``cleanup()`` to stop) and the bound port (useful when ``port`` is 0)."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.add_routes([*metrics_routes(registry), web.get("/healthz", healthz)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = int(runner.addresses[0][1])
    return runner, bound
