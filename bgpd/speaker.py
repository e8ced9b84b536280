"""The speaker's composition root: config, cluster source, reconciler, one ExaBGP, status.

``Speaker.run()`` owns one asyncio.TaskGroup with named tasks:

* ``source``      the SnapshotSource's own loop (file polling, or the Kubernetes watch),
* ``reconciler``  snapshot -> decide -> driver.apply,
* ``exabgp``      started after the first rendering: driver socket + sender + supervisor,
* ``lifecycle``   waits for SIGTERM/SIGINT, then stops gracefully as SpeakerConfig
  onSigterm says (withdraw; drain first; or retain at graceful-restart peers), then ends
  the group,
* ``convergence`` times "decision applied -> ExaBGP acknowledged" for the metrics,
* ``heap-freeze`` once the first decision's routes are acknowledged, collects and
  freezes the heap (``_freeze_heap``: later full collections skip the first sync's
  objects),
* ``mqtt``, ``mqtt-events`` (only with SpeakerConfig.mqtt) the MQTT publisher and the
  pump from the driver's event queue into it (bgpd.mqtt: never blocks BGP).

The status listener also serves ``/metrics`` (bgpd.metrics, read from the driver,
supervisor, reconciler and source at scrape time; docs/observability.md).

Signals: SIGTERM/SIGINT = graceful stop (withdraw, wait for the acks and the flush, stop
ExaBGP, SIGKILL after a bound; with onSigterm retain, graceful-restart peers are not
withdrawn from, unless the node asked for a drain); SIGHUP = re-read the config files (a
bad file keeps the running config) and the cluster source. Cleanup runs in ``finally``;
CancelledError is never swallowed.

Rendering ExaBGP's configuration needs I/O the pure renderer must not do, so it is done
here before each render: the address the kernel picks to reach each peer (a connected UDP
socket's getsockname(), which sends no packet) and passwords from passwordFile. Secret
passwords come from the source if it offers ``secret_passwords()`` (the Kubernetes
watcher). The rendering is redone on every decision (the Node's labels and addresses
select peers); ExaBGP restarts only if the text changed.

To add a cluster source, change ``make_source`` only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from bgpd.config import ConfigError, load_config_or_raise
from bgpd.decision import ANNOTATION_DRAIN, drain_requested, prefix_text
from bgpd.exabgp.driver import DriverMode
from bgpd.exabgp.errors import CrashLoopError, ExaBGPError
from bgpd.exabgp.render import Rendering, render
from bgpd.exabgp.runtime import ExaBGPRuntime, helper_argv
from bgpd.explain import decision_json
from bgpd.logs import log
from bgpd.metrics import (
    ConvergencePhase,
    SpeakerMetrics,
    SpeakerProbes,
    WatchMetrics,
    metrics_routes,
)
from bgpd.model import (
    BGPPeer,
    ClusterSnapshot,
    Config,
    Decision,
    DesiredRoutes,
    IPAddress,
    NodeName,
    PeerName,
    SigtermAction,
)
from bgpd.mqtt import MQTTPublisher
from bgpd.reconciler import Reconciler, SnapshotSource
from bgpd.status import Deferred, StatusServer

_logger = logging.getLogger("bgpd.speaker")

#: sys.setswitchinterval() while the speaker runs (see Speaker.run).
SWITCH_INTERVAL = 0.0005
#: The heap is collected and frozen (_freeze_heap) once the first decision's routes are
#: all acknowledged, or this many seconds after the first decision at the latest.
GC_FREEZE_WITHIN = 60.0


def _freeze_heap() -> None:
    """Collect, then move every object alive now (the first sync's Services, slices and
    routes: 300,000 objects at 10,000 Services) to the permanent generation. Python's
    full collections then no longer walk them: measured at 10,000 Services, a full
    collection took 80-110 ms, holding the event loop (and every route change) that
    long whenever allocations triggered one, e.g. during a /metrics scrape; after the
    freeze 3-18 ms. Frozen objects are still freed by reference counting; only a
    reference cycle among them would stay (our model objects are frozen and acyclic).
    Done once, when the first decision's routes are all acknowledged, so neither the
    cold start nor a later route change waits for the collection."""
    gc.collect()
    gc.freeze()


class RunnableSource(SnapshotSource, Protocol):
    """A SnapshotSource the speaker runs: ``run()`` is its long-lived task and ``reload()``
    re-reads on SIGHUP."""

    async def run(self) -> None: ...

    def reload(self) -> None: ...


def make_source(
    args: argparse.Namespace, config: Config, *, observer: WatchMetrics | None = None
) -> RunnableSource:
    """The one place that picks the cluster source from the command line. `observer`
    counts watch events and relists (the Kubernetes source's informers take it as their
    InformerObserver); the file source has no watch to count."""
    from bgpd.clusterfile import ClusterFileSource

    cluster_file = getattr(args, "cluster_file", None)
    if cluster_file:
        from k8s_watcher.client import default_namespace

        # passwordSecrets without a namespace: where the Kubernetes source looks.
        return ClusterFileSource(
            Path(cluster_file),
            config=config,
            namespace=default_namespace(),
        )
    from k8s_watcher.cache import SpeakerSource

    # --kubeconfig, $KUBECONFIG, ~/.kube/config, then in-cluster; loaded when run() starts.
    return SpeakerSource.connect(
        getattr(args, "kubeconfig", None),
        config=config,
        node=NodeName(args.node_name),
        observer=observer,
    )


def kernel_choice(peer: IPAddress) -> IPAddress | None:
    """The source address the kernel would use to reach ``peer`` (no packet is sent)."""
    family = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((str(peer), 9))
            return ipaddress.ip_address(s.getsockname()[0])
    except OSError:
        return None


def peer_passwords(
    peers: Sequence[BGPPeer], secrets: Mapping[PeerName, str]
) -> dict[PeerName, str | None]:
    """Each peer's MD5 key: password, else passwordFile (trailing newline stripped), else
    the resolved Secret. Never logged; an unreadable file is logged without its content."""
    out: dict[PeerName, str | None] = {}
    for p in peers:
        if p.password:
            out[p.name] = p.password
        elif p.password_file is not None:
            try:
                out[p.name] = p.password_file.read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as exc:
                log(
                    _logger,
                    logging.ERROR,
                    "peer.password_file_unreadable",
                    peer=p.name,
                    error=exc.strerror,
                )
                out[p.name] = None
        else:
            out[p.name] = secrets.get(p.name)
    return out


def _route_rows(acknowledged: DesiredRoutes) -> list[dict[str, Any]]:
    """/status "routes": what ExaBGP acknowledged, by peer and prefix (from a copy)."""
    return [
        {
            "peer": peer,
            "prefix": prefix_text(prefix),
            "communities": list(a.communities),
            "large_communities": list(a.large_communities),
            "local_pref": a.local_pref,
            "med": a.med,
        }
        for peer, per in sorted(acknowledged.items())
        for prefix, a in sorted(
            per.items(), key=lambda kv: (kv[0].version, int(kv[0].network_address))
        )
    ]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions inside (nested) TaskGroup exception groups."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out


class _Stop(Exception):
    """Raised by the lifecycle task to end the TaskGroup after a graceful stop."""


class Speaker:
    def __init__(
        self,
        *,
        config: Config,
        config_paths: Sequence[str],
        node: NodeName,
        source: RunnableSource,
        work_dir: Path,
        status_address: str,
        exabgp_prefix: Sequence[str] = (),
        registry: CollectorRegistry | None = None,
        watch: WatchMetrics | None = None,
    ) -> None:
        self.config = config
        self.config_paths = list(config_paths)
        self.node = node
        self.source = source
        sc = config.speaker
        self.runtime = ExaBGPRuntime(
            node=node,
            work_dir=work_dir,
            exabgp_binary=sc.exabgp_binary,
            prefix=exabgp_prefix,
            listen=sc.listen,
        )
        self.driver = self.runtime.driver
        #: The last kernel_choices() answer, which render_now() reuses.
        self._kernel: Mapping[PeerName, IPAddress | None] | None = None
        self.reconciler = Reconciler(
            config=config,
            node=node,
            source=source,
            sink=self.driver,
            debounce=sc.debounce,
            before_apply=self._before_apply,
            on_reconciled=self._on_reconciled,
            kernel_choices=self.kernel_choices,
        )
        self.status_server = StatusServer(status_address, self)
        # Observability reads live state at scrape time (bgpd.metrics); MQTT is fed from
        # the driver's event queue and never blocks it (bgpd.mqtt).
        self.config_stale = False
        self.mqtt = MQTTPublisher(sc.mqtt, node=node) if sc.mqtt is not None else None
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = SpeakerMetrics(
            self.registry, self._probes(), node=node, mqtt=self.mqtt, watch=watch
        )
        self.status_server.add_routes(metrics_routes(self.registry))
        #: (first unacknowledged change, last apply), monotonic; see _convergence().
        self._unconverged: tuple[float, float] | None = None
        self._applied = asyncio.Event()
        self._first_decision = asyncio.Event()
        self.rendered = asyncio.Event()
        self.stop_requested = asyncio.Event()
        self.drain_started: float | None = None
        self.drain_window = sc.drain_window
        self.render_warnings: tuple[str, ...] = ()
        self.render_error = ""
        self._drain_task: asyncio.Task[None] | None = None
        #: Who started the drain: "request" (`kube-bgpd drain`, onSigterm drain) or
        #: "annotation" (the Node's kube-bgpd.io/drain). Only an annotation's drain ends
        #: when its annotation does; a requested one lasts until the process stops.
        self.drain_source: str | None = None
        #: The last drain annotation value that was not understood (reported once).
        self._bad_drain_annotation: str | None = None

    # ------------------------------------------------------------------ rendering

    def kernel_choices(self, config: Config) -> Mapping[PeerName, IPAddress | None]:
        """The kernel's source address per peer, asked once per reconciler pass so that
        decide() and the rendering of the same pass see the same answer."""
        self._kernel = {p.name: kernel_choice(p.peer_address) for p in config.peers}
        return self._kernel

    def render_now(self, snapshot: ClusterSnapshot) -> Rendering:
        node = snapshot.nodes.get(self.node)
        kernel = self._kernel if self._kernel is not None else self.kernel_choices(self.config)
        secrets_of = getattr(self.source, "secret_passwords", None)
        secrets: Mapping[PeerName, str] = secrets_of() if callable(secrets_of) else {}
        return render(
            self.config,
            node,
            kernel_choices=kernel,
            passwords=peer_passwords(self.config.peers, secrets),
            helper_argv=helper_argv(),
        )

    def _before_apply(self, config: Config, snapshot: ClusterSnapshot, decision: Decision) -> None:
        del config
        # The Kubernetes source records "started/stopped announcing" Events (never blocks).
        observe = getattr(self.source, "observe_decision", None)
        if callable(observe):
            observe(decision, changes=self.reconciler.last_changes)
        try:
            rendering = self.render_now(snapshot)
        except (ExaBGPError, ValueError) as exc:
            # Keep the running ExaBGP and its configuration; say why.
            self.render_error = str(exc)
            log(_logger, logging.ERROR, "exabgp.render_failed", error=str(exc))
            return
        self.render_error = ""
        if rendering.warnings != self.render_warnings:
            for w in rendering.warnings:
                log(_logger, logging.WARNING, "exabgp.render_warning", warning=w)
            self.render_warnings = rendering.warnings
        if self.runtime.configure(rendering):
            log(_logger, logging.INFO, "exabgp.reconfigured", neighbors=len(rendering.neighbors))
        self.rendered.set()

    # ------------------------------------------------------------------ signals

    def reload(self) -> None:
        """SIGHUP: re-read the config files and the cluster source."""
        try:
            config, warnings = load_config_or_raise(self.config_paths)
        except ConfigError as exc:
            self.config_stale = True
            log(
                _logger,
                logging.ERROR,
                "config.reload_failed",
                error=str(exc),
                keeping="running config",
            )
        else:
            self.config_stale = False
            for w in warnings:
                log(_logger, logging.WARNING, "config.warning", warning=str(w))
            self.config = config
            self.reconciler.set_config(config)
            # The Kubernetes source reads the BGPPeers' passwordSecrets the config names.
            set_config = getattr(self.source, "set_config", None)
            if callable(set_config):
                set_config(config)
            log(_logger, logging.INFO, "config.reloaded")
        self.source.reload()

    # ------------------------------------------------------------------ drain

    async def drain(self) -> Mapping[str, Any]:
        """RFC 8326: re-announce everything with GRACEFUL_SHUTDOWN, hold, then withdraw."""
        self.start_drain("request")
        return self._drain_status()

    def start_drain(self, source: str) -> None:
        if source == "request" and self.drain_source == "annotation":
            # An operator's drain outlasts the annotation's: removing it must not undo this.
            self.drain_source = source
            log(_logger, logging.INFO, "speaker.draining", window=self.drain_window, source=source)
        if self._drain_task is None:
            self.drain_started = time.time()
            self.drain_source = source
            log(_logger, logging.INFO, "speaker.draining", window=self.drain_window, source=source)
            self.driver.set_mode(DriverMode.DRAINING)
            self._drain_task = asyncio.create_task(self._drain(), name="drain")

    def end_drain(self) -> None:
        """Announce normally again: the annotation that asked for the drain is gone."""
        task, self._drain_task = self._drain_task, None
        if task is not None:
            task.cancel()
        self.drain_started = None
        self.drain_source = None
        self.driver.set_mode(DriverMode.NORMAL)
        log(_logger, logging.INFO, "speaker.undrained")

    def _follow_drain_annotation(self, snapshot: ClusterSnapshot | None) -> None:
        """Start or end a drain as this node's kube-bgpd.io/drain annotation says."""
        if snapshot is None or self.stop_requested.is_set():
            return  # stopping: _lifecycle owns the driver's mode now
        node = snapshot.nodes.get(self.node)
        wanted = drain_requested(node)
        if wanted is None:
            value = None if node is None else node.annotations.get(ANNOTATION_DRAIN)
            if value != self._bad_drain_annotation:
                log(
                    _logger,
                    logging.WARNING,
                    "speaker.drain_annotation_invalid",
                    annotation=ANNOTATION_DRAIN,
                    value=value,
                    expected="true or false",
                    kept="draining" if self._drain_task is not None else "announcing",
                )
            self._bad_drain_annotation = value
            return
        self._bad_drain_annotation = None
        if wanted and self._drain_task is None:
            self.start_drain("annotation")
        elif not wanted and self.drain_source == "annotation":
            self.end_drain()

    async def _drain(self) -> None:
        await asyncio.sleep(self.drain_window)
        self.driver.set_mode(DriverMode.WITHDRAWN)
        log(_logger, logging.INFO, "speaker.drained")

    def _drain_status(self) -> dict[str, Any]:
        return {
            "mode": str(self.driver.mode),
            "started": self.drain_started,
            "source": self.drain_source,
            "window": self.drain_window,
            "withdraw_at": None
            if self.drain_started is None
            else self.drain_started + self.drain_window,
        }

    # ------------------------------------------------------------------ observability

    def _probes(self) -> SpeakerProbes:
        sup = self.runtime.supervisor
        return SpeakerProbes(
            peers=self.driver.peer_status,
            routes=self.driver.acknowledged,
            decision=lambda: self.reconciler.last_decision,
            snapshot=lambda: self.reconciler.last_snapshot,
            running=lambda: sup.pid is not None,
            restarts=lambda: sup.restarts,
            commands=lambda: self.driver.stats.commands_sent,
            # A Speaker only exists with a valid config; a rejected reload keeps it.
            loaded=lambda: True,
            stale=lambda: self.config_stale,
            kinds_synced=self._kinds_synced,
            source_stale=lambda: self.source.stale,
        )

    def _kinds_synced(self) -> Mapping[str, bool]:
        """Per kind when the source has informers (Kubernetes), else the source as one."""
        group = getattr(self.source, "group", None)
        informers = getattr(group, "informers", None)
        if informers:
            return {i.kind.name: i.has_synced for i in informers}
        return {"cluster": self.source.synced}

    def _on_reconciled(self, decision: Decision, latency: float) -> None:
        """Record the decide phase now; _convergence() times the acknowledge phase, only
        when the desired routes changed (a pass that changes nothing sends nothing)."""
        self.metrics.observe_convergence(ConvergencePhase.DECIDE, latency)
        self._follow_drain_annotation(self.reconciler.last_snapshot)
        self._first_decision.set()
        if self.reconciler.last_duration is not None:
            self.metrics.observe_reconcile(self.reconciler.last_duration)
        # The Decider says whether the desired set changed (no second by_peer() and
        # comparison of every route per pass).
        if not self.reconciler.desired_changed:
            return
        now = time.monotonic()
        first = now - latency
        # Keep the oldest change not acknowledged yet: "total" is what an operator waits.
        if self._unconverged is not None:
            first = min(first, self._unconverged[0])
        self._unconverged = (first, now)
        self._applied.set()

    async def _freeze_heap_once(self) -> None:
        """See _freeze_heap: once the first decision's routes reached ExaBGP."""
        await self._first_decision.wait()
        await self.driver.wait_converged(within=GC_FREEZE_WITHIN)
        started = time.monotonic()
        _freeze_heap()
        log(
            _logger,
            logging.INFO,
            "speaker.heap_frozen",
            objects=gc.get_freeze_count(),
            seconds=round(time.monotonic() - started, 3),
        )

    async def _convergence(self) -> None:
        """Time "decision applied -> ExaBGP acknowledged everything", and the total."""
        while True:
            await self._applied.wait()
            self._applied.clear()
            if not await self.driver.wait_converged(within=600.0):
                continue
            if self._unconverged is None or self._applied.is_set():
                continue  # a newer decision is pending: measure when that one converges
            first, applied = self._unconverged
            self._unconverged = None
            now = time.monotonic()
            self.metrics.observe_convergence(ConvergencePhase.ACKNOWLEDGE, now - applied)
            self.metrics.observe_convergence(ConvergencePhase.TOTAL, now - first)

    # ------------------------------------------------------------------ status provider

    def health(self) -> tuple[bool, str]:
        sup = self.runtime.supervisor
        if self.rendered.is_set() and sup.pid is None and not sup.stopping:
            return False, "exabgp is not running"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        if not self.source.synced:
            return False, "cluster source not synced"
        if not self.rendered.is_set():
            return False, "exabgp not configured yet"
        if not self.driver.connected:
            return False, "exabgp helper not connected"
        if self.reconciler.last_decision is None:
            return False, "no decision applied yet"
        return True, "ok"

    def status(self) -> Mapping[str, Any]:
        peers = [
            {
                "name": s.peer,
                "address": str(s.address),
                "state": str(s.state),
                "since": s.since,
                "reason": s.reason,
                "acknowledged": s.acknowledged,
                "pending": s.pending,
            }
            for s in self.driver.peer_status().values()
        ]
        sup = self.runtime.supervisor
        decision = self.reconciler.last_decision
        return {
            "node": self.node,
            "mode": str(self.driver.mode),
            "drain": self._drain_status(),
            "source": {"synced": self.source.synced, "stale": self.source.stale},
            "exabgp": {
                "pid": sup.pid,
                "generation": sup.generation,
                "restarts": sup.restarts,
                "connected": self.driver.connected,
                "render_error": self.render_error,
                "render_warnings": list(self.render_warnings),
            },
            "driver": {
                "commands_sent": dict(self.driver.stats.commands_sent),
                "command_errors": self.driver.stats.command_errors,
                "ack_timeouts": self.driver.stats.ack_timeouts,
                "last_error": self.driver.stats.last_error,
            },
            "decision": {
                "routes": 0 if decision is None else len(decision.routes),
                "skipped": 0 if decision is None else len(decision.skipped),
                "latency": self.reconciler.last_latency,
            },
            # The last decision in explain's JSON contract, for `explain --from-speaker`.
            # Built off the event loop (StatusServer), like the routes.
            "explain": None if decision is None else Deferred(partial(decision_json, decision)),
            "config": {"stale": self.config_stale},
            "mqtt": None
            if self.mqtt is None
            else {
                "connected": self.mqtt.connected,
                "queued": self.mqtt.queued,
                "dropped": self.mqtt.dropped,
            },
            "peers": peers,
            "routes": Deferred(partial(_route_rows, self.driver.acknowledged())),
        }

    # ------------------------------------------------------------------ run

    async def _run_exabgp(self) -> None:
        await self.rendered.wait()
        await self.runtime.run()

    async def _lifecycle(self) -> None:
        await self.stop_requested.wait()
        action = self.config.speaker.on_sigterm
        log(_logger, logging.INFO, "speaker.stopping", on_sigterm=str(action))
        if action is SigtermAction.DRAIN and self._drain_task is None:
            await self.drain()
        if self._drain_task is not None and not self._drain_task.done():
            await self._drain_task
        # A node that is draining (`kube-bgpd drain`, its annotation, onSigterm drain) asked
        # to leave the routers: then the stop leaves nothing there, whatever onSigterm says.
        retain = action is SigtermAction.RETAIN and self._drain_task is None
        if action is SigtermAction.RETAIN and not retain:
            log(_logger, logging.INFO, "speaker.retain_skipped", reason="drain requested")
        held = self.driver.acknowledged()
        ok = await self.runtime.stop(withdraw=True, retain_graceful=retain, within=10.0)
        # What each peer was left with: retained (stale at a graceful-restart router until
        # the next speaker refreshes it, or its restart time ends) or withdrawn.
        for name, n in sorted(self.driver.neighbors().items()):
            kept = retain and n.graceful_restart
            log(
                _logger,
                logging.INFO,
                "speaker.stop_peer",
                peer=name,
                action="retained" if kept else "withdrawn",
                routes=len(held.get(name, {})),
                graceful_restart=n.graceful_restart,
            )
        log(_logger, logging.INFO, "speaker.stopped", withdrawn=ok, retained=retain)
        raise _Stop

    def request_stop(self) -> None:
        self.stop_requested.set()

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the exit code."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        await self.status_server.start()
        log(
            _logger,
            logging.INFO,
            "speaker.started",
            node=self.node,
            status=f"{self.status_server.host}:{self.status_server.port}",
        )
        # /metrics and /status build their large parts in worker threads (bgpd.metrics,
        # bgpd.status). Under the GIL such a thread runs up to the switch interval (5 ms
        # by default) before the event loop gets its turn back, and the loop needs a turn
        # after every socket call of a route change: 0.5 ms keeps a scrape from adding
        # more than a few milliseconds to a change (docs/observability.md); with no
        # worker thread running, the interval costs nothing.
        previous_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        code = 0
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.source.run(), name="source")
                tg.create_task(self.reconciler.run(), name="reconciler")
                tg.create_task(self._run_exabgp(), name="exabgp")
                tg.create_task(self._lifecycle(), name="lifecycle")
                tg.create_task(self._convergence(), name="convergence")
                tg.create_task(self._freeze_heap_once(), name="heap-freeze")
                if self.mqtt is not None:
                    tg.create_task(self.mqtt.run(), name="mqtt")
                    events = self.driver.subscribe()
                    tg.create_task(self.mqtt.follow(events), name="mqtt-events")
        except* _Stop:
            code = 0
        except* CrashLoopError as group:
            for exc in _leaves(group):
                log(_logger, logging.CRITICAL, "exabgp.crash_loop", error=str(exc))
            code = 1
        finally:
            sys.setswitchinterval(previous_interval)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            with contextlib.suppress(Exception):
                await self.runtime.supervisor.stop()
            await self.status_server.stop()
        return code
