"""The speaker's composition root: config, cluster source, reconciler, one ExaBGP, status.

It wires; it does not decide. ``Speaker.run()`` owns one asyncio.TaskGroup with named
tasks:

* ``source``      the SnapshotSource's own loop (file polling, or the Kubernetes watch),
* ``reconciler``  each batch of changes: decide, render, apply, then the pass's records
  (``_reconcile_pass``),
* ``exabgp``      started after the first rendering: driver socket + sender + supervisor,
* ``exabgp-early`` renders ExaBGP's configuration once this Node and the peers' passwords
  are known (the Kubernetes source: before the Services are listed), so ExaBGP starts
  beside the first list and decision; it ends after that one rendering,
* ``lifecycle``   waits for SIGTERM/SIGINT, then stops gracefully as SpeakerConfig
  onSigterm says (withdraw; drain first; or retain at graceful-restart peers), then ends
  the group,
* ``convergence`` times "decision applied -> ExaBGP accepted" for the metrics,
* ``events-start`` (only when the source holds its Events: the Kubernetes API) lets
  the source write its Events once the first decision's routes are accepted,
* ``heap-freeze`` once the first decision's routes are accepted, collects and
  freezes the heap and hands the freed memory back (``bgpd.heap``: later full
  collections skip the first sync's objects); later, hands freed memory back whenever
  the RSS grew,
* ``data-plane`` (only with SpeakerConfig.dataPlaneCheck) polls kube-proxy's health
  answers (bgpd.speaker.probe) into the verdicts (bgpd.speaker.dataplane): the node's goes
  to the drain, the whole to decide() as a DataPlane,
* ``mqtt``, ``mqtt-events`` (only with SpeakerConfig.mqtt) the MQTT publisher and the
  pump from the driver's event queue into it (bgpd.mqtt: never blocks BGP),
* ``cluster-status``, ``cluster-status-events`` (only when the source writes status
  objects: the Kubernetes API with SpeakerConfig clusterStatus) hand this node's
  ServiceBGPStatus and BGPNodeStatus contents (bgpd.speaker.cluster_status) to the
  source after a pass, a session or route event, a drain step or a new configuration,
  at most once per statusInterval; the source coalesces and rate-limits the writes,
* the ``companions`` given at construction (``--with-controller``: ``controller``).

A companion that raises, or an ExaBGP that cannot be started at all (missing binary),
ends the process with exit 1 and one ``speaker.task_failed`` line (``task``, ``error``);
an ExaBGP that keeps dying, with one ``exabgp.crash_loop`` line.

The status listener also serves ``/metrics`` (bgpd.metrics, read from the driver,
supervisor, reconciler and source at scrape time; docs/observability.md).

Signals: SIGTERM/SIGINT = graceful stop (withdraw, wait for the acks and the flush, stop
ExaBGP, SIGKILL after a bound; with onSigterm retain, graceful-restart peers are not
withdrawn from, unless the node asked for a drain); SIGHUP = re-read the config files (a
bad file keeps the running config) and the cluster source. Cleanup runs in ``finally``;
CancelledError is never swallowed.

Each pass is consumed from what the reconciler returns (bgpd.reconciler.Pass before the
apply, PassResult after it), never by reading the reconciler back. ExaBGP's work comes
first: ExaBGP's configuration is rendered from RenderInputs (bgpd.speaker.render_inputs)
for this Node (its labels and addresses select peers; a changed text is reloaded in
place, or restarts ExaBGP when it cannot be: bgpd.exabgp.reload), the routes go to the
driver and the drain annotation (bgpd.speaker.drain, the one owner of the drain rules)
sets its mode; then the reconciler task yields, so the driver's sender writes the first
commands, and only then does the rest of the pass run: the source observes the decision
(Events), the metrics, the last valid attributes saved and the convergence timing.
Optional abilities of the source are Protocols tested once here (bgpd.speaker.source).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bgpd import heap
from bgpd.aiohttp_import import aiohttp
from bgpd.bandwidth import bytes_per_second
from bgpd.bfd.heartbeat import BfdWatchdog
from bgpd.bfd.readback import status_rows
from bgpd.bfd.render import BfdPeerConfig, bfd_peers
from bgpd.bfd.runtime import BfdError, BfdRuntime
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.config.reload import reload_config
from bgpd.config.speaker_config import restart_needed
from bgpd.decision import prefix_text
from bgpd.exabgp.driver import DriverMode
from bgpd.exabgp.errors import CrashLoopError, ExaBGPError
from bgpd.exabgp.reload import ConfigAction
from bgpd.exabgp.render import Rendering, render
from bgpd.exabgp.runtime import ExaBGPRuntime, helper_argv
from bgpd.explain import decision_json
from bgpd.logs import log
from bgpd.metrics import (
    BfdCollector,
    BfdGateCollector,
    BfdSession,
    ConvergencePhase,
    SpeakerMetrics,
    SpeakerProbes,
    WatchMetrics,
    metrics_routes,
)
from bgpd.model import (
    DATA_PLANE_UNCHECKED,
    BfdEvent,
    ClusterSnapshot,
    Config,
    DataPlaneCheck,
    DesiredRoutes,
    IPAddress,
    Node,
    NodeName,
    PeerName,
    ServiceKey,
    SessionState,
    SigtermAction,
)
from bgpd.mqtt import MQTTPublisher, backoff_delay
from bgpd.reconciler import PassResult, Reconciler
from bgpd.speaker import attribute_state, cluster_status, drain
from bgpd.speaker.bfd_follow import BfdFollow, say_goodbye
from bgpd.speaker.dataplane import (
    DataPlaneState,
    Thresholds,
    checked_services,
    data_plane,
    observe_round,
)
from bgpd.speaker.drain import DrainEvent, DrainState, Transition
from bgpd.speaker.health import (
    HealthInputs,
    ReadinessInputs,
    health,
    node_missing_reason,
    readiness,
)
from bgpd.speaker.probe import Round, ask_round
from bgpd.speaker.render_inputs import HostRenderInputs, RenderInputs
from bgpd.speaker.source import (
    ConfigFollower,
    ConfigSource,
    DecisionObserver,
    DrainObserver,
    HeldEvents,
    KindsSynced,
    NodeFirst,
    RunnableSource,
    SecretPasswords,
    StatusPublisher,
)
from bgpd.status import CONTROL_SOCKET, Deferred, StatusServer

_logger = logging.getLogger("bgpd.speaker")

#: sys.setswitchinterval() while the speaker runs (see Speaker.run).
SWITCH_INTERVAL = 0.0005
#: The heap is settled (bgpd.heap.settle) once the first decision's routes are
#: all accepted, or this many seconds after the first decision at the latest.
GC_FREEZE_WITHIN = 60.0
#: No automatic collection from the start until the heap is settled, for at most this
#: many seconds (heap.collection_paused; a first sync that takes longer, e.g. an API
#: that fails and is retried, is collected as usual from then on).
FIRST_SYNC_GC_PAUSE = 60.0
#: The source's Events (HeldEvents) are first written once the first decision's routes
#: are accepted, or this many seconds after the first decision at the latest.
EVENTS_START_WITHIN = 30.0
#: The status objects are first written once the first decision's routes are
#: acknowledged and every session is up, or this many seconds after the first decision
#: at the latest (a session that needs longer is down, and the objects say so).
STATUS_START_WITHIN = 30.0


def _route_rows(accepted: DesiredRoutes, advertised: DesiredRoutes) -> list[dict[str, Any]]:
    """/status "routes": what ExaBGP accepted, by peer and prefix, each with whether it
    is advertised (on the wire to the router); from copies."""
    return [
        {
            "peer": peer,
            "prefix": prefix_text(prefix),
            "advertised": prefix in advertised.get(peer, {}),
            "communities": list(a.communities),
            "large_communities": list(a.large_communities),
            "local_pref": a.local_pref,
            "med": a.med,
            "link_bandwidth": bytes_per_second(a.link_bandwidth),
        }
        for peer, per in sorted(accepted.items())
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


def _log_drain_event(event: DrainEvent) -> None:
    """Write what the drain state machine reports (event names spelled out: they are a
    contract, docs/observability.md)."""
    f = event.fields
    match event.name:
        case "speaker.draining":
            log(_logger, logging.INFO, "speaker.draining", **f)
        case "speaker.drained":
            log(_logger, logging.INFO, "speaker.drained", **f)
        case "speaker.undrained":
            log(_logger, logging.INFO, "speaker.undrained", **f)
        case "speaker.drain_cancelled":
            log(_logger, logging.INFO, "speaker.drain_cancelled", **f)
        case "speaker.drain_annotation_invalid":
            log(_logger, logging.WARNING, "speaker.drain_annotation_invalid", **f)
        case other:
            raise AssertionError(f"unknown drain event {other}")


class _Stop(Exception):
    """Raised by the lifecycle task to end the TaskGroup after a graceful stop."""


class TaskFailed(Exception):
    """A task that must not fail did (ExaBGP could not be started, a companion such as
    the in-process controller raised): the process ends with one line saying which."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"{name}: {error}")
        self.name = name


class StartupError(Exception):
    """The speaker cannot start (its listener's port is taken): `kube-bgpd speaker` prints
    the message as one line and exits 1 (docs/operations.md, exit codes)."""


#: A long-lived coroutine run in the speaker's TaskGroup, by task name.
Companion = Callable[[], Awaitable[None]]


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
        render_inputs: RenderInputs | None = None,
        companions: Mapping[str, Companion] | None = None,
        config_source: ConfigSource | None = None,
    ) -> None:
        self.config = config
        self.config_paths = list(config_paths)
        #: The configuration's source when not files (--config-from-cluster).
        self.config_source = config_source
        self.node = node
        self.source = source
        # The source's optional abilities, found once (bgpd.speaker.source).
        self._secrets = source if isinstance(source, SecretPasswords) else None
        self._observer = source if isinstance(source, DecisionObserver) else None
        self._drain_observer = source if isinstance(source, DrainObserver) else None
        self._follower = source if isinstance(source, ConfigFollower) else None
        self._kinds = source if isinstance(source, KindsSynced) else None
        self._publisher = source if isinstance(source, StatusPublisher) else None
        self._node_first = source if isinstance(source, NodeFirst) else None
        self._held_events = source if isinstance(source, HeldEvents) else None
        if self._held_events is not None:
            # Written once the first decision's routes are accepted (_release_events).
            self._held_events.hold_events()
        #: Set when something the cluster's status objects show may have changed.
        self._status_wake = asyncio.Event()
        self.render_inputs = (
            render_inputs if render_inputs is not None else HostRenderInputs(config)
        )
        self.companions = dict(companions or {})
        sc = config.speaker
        self.runtime = ExaBGPRuntime(
            node=node,
            work_dir=work_dir,
            exabgp_binary=sc.exabgp_binary,
            prefix=exabgp_prefix,
            listen=sc.listen,
        )
        self.driver = self.runtime.driver
        #: The Services' last valid attributes, kept across restarts (attribute_state).
        self._last_valid_file = work_dir / attribute_state.FILE_NAME
        self._last_valid_saved = attribute_state.load(self._last_valid_file)
        self.reconciler = Reconciler(
            config=config,
            node=node,
            source=source,
            sink=self.driver,
            debounce=sc.debounce,
            kernel_choices=self.kernel_choices,
            last_valid=self._last_valid_saved,
        )
        # State changes (drain) only on the control socket; /status on the network port
        # only if the operator opts in (bgpd.status).
        self.status_server = StatusServer(
            status_address,
            self,
            control_socket=work_dir / CONTROL_SOCKET,
            expose_status=sc.expose_status,
        )
        # Observability reads live state at scrape time (bgpd.metrics); MQTT is fed from
        # the driver's event queue and never blocks it (bgpd.mqtt).
        self.config_stale = False
        #: What the parts built here were built with (apply_config: restart_needed).
        self._started_speaker = sc
        #: The synced cluster held no Node named self.node at the last pass (_check_node).
        self._node_missing = False
        self.mqtt = MQTTPublisher(sc.mqtt, node=node) if sc.mqtt is not None else None
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = SpeakerMetrics(
            self.registry,
            self._probes(),
            node=node,
            mqtt=self.mqtt,
            watch=watch,
            bfd=BfdCollector(self._bfd_sessions, (s.value for s in BfdState)),
        )
        self.status_server.add_routes(metrics_routes(self.registry))
        #: BGP follows BFD (bgpd.bfd.gate decides; BfdFollow carries it out).
        self.bfd_follow = BfdFollow(
            node=node, driver=self.driver, publish=None if self.mqtt is None else self.mqtt.publish
        )
        self.registry.register(BfdGateCollector(self.bfd_follow))
        #: Kills bfdd when this speaker hangs (bgpd.bfd.watchdog); runs beside bfdd.
        self.bfd_watchdog = BfdWatchdog(
            timeout=sc.bfd_watchdog,
            unanswered=lambda: self.driver.core.unanswered_for(time.monotonic()),
            # A kill by our own watchdog is no crash of bfdd's (bgpd.supervision).
            on_kill=lambda pid: self.bfd.supervisor.excuse(pid),
        )
        # Stopped by the watchdog while this loop stalls (bgpd.bfd.watchdog says why).
        self.runtime.supervisor.on_spawned = self.bfd_watchdog.watch_exabgp
        #: (first change not accepted yet, last apply), monotonic; see _convergence().
        self._unconverged: tuple[float, float] | None = None
        self._applied = asyncio.Event()
        self._first_decision = asyncio.Event()
        self.rendered = asyncio.Event()
        self.stop_requested = asyncio.Event()
        self.render_warnings: tuple[str, ...] = ()
        self.render_error = ""
        #: Why ExaBGP's configuration file could not be written ("" once it was), the
        #: failures in a row and the retry's timer (_install).
        self.write_error = ""
        self._write_failures = 0
        self._write_retry: asyncio.TimerHandle | None = None
        #: The last pass's inputs, rendered again when a hold-down starts or ends, and
        #: the peers held down in the last rendering installed (_hold_downs).
        self._rendered_from: (
            tuple[ClusterSnapshot, Mapping[PeerName, IPAddress | None] | None] | None
        ) = None
        self._held_rendered: set[PeerName] = set()
        #: The drain (bgpd.speaker.drain owns its rules; this only carries them out).
        self.drain_state = DrainState(window=sc.drain_window)
        self._drain_timer: asyncio.TimerHandle | None = None
        #: Set once a drain's window has ended (its routes withdrawn).
        self._drained = asyncio.Event()
        #: The data-plane checks' verdicts (bgpd.speaker.dataplane owns their rules).
        self.data_plane_state = DataPlaneState()
        #: Whether the data-plane task runs (SpeakerConfig dataPlaneCheck at start).
        self._data_plane_checked = sc.data_plane_check is not None
        self._drain_step(drain.initial(sc.drain_window, data_plane_check=self._data_plane_checked))
        #: BFD (bgpd.bfd): bfdd runs from the first rendering with a BFD-enabled peer on
        #: (none: no bfdd), fed the sessions of each rendering (_install); its states
        #: arrive in on_bfd_states.
        self.bfd = BfdRuntime(
            work_dir=work_dir,
            on_states=self.on_bfd_states,
            on_started=self._on_bfd_started,
            prefix=exabgp_prefix,
        )
        self._bfd_peers: tuple[BfdPeerConfig, ...] = ()
        self._bfd_changed = asyncio.Event()
        #: The BFD-enabled peers' states as last read back from bfdd (metrics, status).
        self.bfd_states: Mapping[PeerName, BfdPeerState] = {}

    # ------------------------------------------------------------------ passes

    def reconcile_once(self, first_change: float) -> PassResult | None:
        """One reconciler pass with the speaker's work around the apply, without yielding
        in between (the reconciler task's passes yield: _reconcile_pass); None: gated.
        The first pass that decides runs without automatic collections
        (heap.collection_paused)."""
        with self._first_pass_paused():
            result = self._pass_to_driver(first_change)
            if result is not None:
                self._after_apply(result)
            return result

    async def _reconcile_pass(self, first_change: float) -> PassResult | None:
        """reconcile_once(), with one turn of the event loop between the routes handed to
        the driver and the rest of the pass: the driver's sender plans and writes its
        first commands to ExaBGP, which is idle and waiting, before the speaker records
        the pass (Events, metrics, the last valid attributes written to the work
        directory), none of which ExaBGP needs. At 10,000 Services that work is
        ~0.05-0.08 s of the first pass, and ExaBGP takes the first window meanwhile."""
        with self._first_pass_paused():
            result = self._pass_to_driver(first_change)
            if result is None:
                return None
            await asyncio.sleep(0)
            self._after_apply(result)
            return result

    def _first_pass_paused(self) -> contextlib.AbstractContextManager[None]:
        """No automatic collection in the first pass that decides (heap.collection_paused)."""
        if self.reconciler.decisions == 0:
            return heap.collection_paused()
        return contextlib.nullcontext()

    def _pass_to_driver(self, first_change: float) -> PassResult | None:
        """Decide, render, hand the routes to the driver: what ExaBGP's next commands
        depend on. The drain annotation is followed here too: a node annotated to drain
        has its first routes sent with GRACEFUL_SHUTDOWN, never without it first."""
        decided = self.reconciler.decide(first_change)
        if decided is None:
            return None
        self._check_node(decided.snapshot)
        # Rendered before the apply: a changed configuration (a reload, a new peer)
        # reaches the driver before the routes that may be meant for it.
        self._rendered_from = (decided.snapshot, decided.kernel_choices)
        self._render(*self._rendered_from)
        result = self.reconciler.apply(decided)
        node = result.snapshot.nodes.get(self.node)
        self._drain_step(
            drain.annotate(self.drain_state, drain.annotation_value(node), time.time())
        )
        return result

    def _check_node(self, snapshot: ClusterSnapshot) -> None:
        """Warn once (and once more when it comes back) when the synced cluster holds no
        Node named --node-name: a placeholder or typo would otherwise run silently ready
        and announce nothing. /readyz says the same while it lasts."""
        missing = self.node not in snapshot.nodes
        if missing and not self._node_missing:
            log(
                _logger,
                logging.WARNING,
                "speaker.node_missing",
                flag="--node-name",
                node=self.node,
                reason=node_missing_reason(self.node),
            )
        elif self._node_missing and not missing:
            log(_logger, logging.INFO, "speaker.node_found", node=self.node)
        self._node_missing = missing

    async def _hold_downs(self) -> None:
        """Carry out the driver core's hold-downs (bgpd.exabgp.flap decides which peers
        and until when): re-render when a session starts being held down (it is rendered
        ``passive``) and when a hold-down ends (it connects again; ExaBGP re-sends the
        routes it holds for it). Woken by the driver's events and the next end; the
        events queued meanwhile are taken together (a first sync of 30,000 routes queues
        ~300 RoutesAccepted, one per answered command, and its RouteEvents)."""
        events = self.driver.subscribe()
        try:
            while True:
                end = self.driver.core.hold_down_ends(time.time())
                timeout = None if end is None else max(0.0, end - time.time()) + 0.01
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(events.get(), timeout)
                    while not events.empty():
                        events.get_nowait()
                held = self.driver.core.held_down(time.time())
                if self._rendered_from is not None and held != self._held_rendered:
                    self._render(*self._rendered_from)
        finally:
            self.driver.unsubscribe(events)

    async def _reconcile(self) -> None:
        async with contextlib.aclosing(self.reconciler.changes()) as batches:
            async for first_change in batches:
                await self._reconcile_pass(first_change)

    def kernel_choices(
        self, config: Config, node: Node | None
    ) -> Mapping[PeerName, IPAddress | None]:
        """The kernel's source address per peer (render_inputs caches it), asked once per
        reconciler pass; the pass carries the answer to its rendering, so decide() and
        render see the same addresses."""
        del config  # render_inputs holds the config in force (set_config on reload)
        return self.render_inputs.kernel_choices(node)

    def render_now(
        self,
        snapshot: ClusterSnapshot,
        kernel_choices: Mapping[PeerName, IPAddress | None] | None = None,
    ) -> Rendering:
        """ExaBGP's configuration for this Node; ``kernel_choices``: the answer the pass
        decided with (None: ask render_inputs now)."""
        node = snapshot.nodes.get(self.node)
        secrets: Mapping[PeerName, str] = (
            self._secrets.secret_passwords() if self._secrets is not None else {}
        )
        return render(
            self.config,
            node,
            kernel_choices=self.render_inputs.kernel_choices(node)
            if kernel_choices is None
            else kernel_choices,
            passwords=self.render_inputs.passwords(secrets),
            helper_argv=helper_argv(),
            held=self.driver.core.held_down(time.time()),
        )

    def _render(
        self,
        snapshot: ClusterSnapshot,
        kernel_choices: Mapping[PeerName, IPAddress | None] | None,
    ) -> None:
        """Render and install; a rendering that fails keeps the running configuration."""
        try:
            rendering = self.render_now(snapshot, kernel_choices)
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
        self._install(rendering)

    def _install(self, rendering: Rendering) -> None:
        """Hand a rendering to the runtime. A file that cannot be written (OSError: a
        full work directory, ENOSPC) keeps the running ExaBGP with what it has; it is
        reported (log, metric, /readyz) and retried with back-off until it is written or
        a newer rendering replaces it."""
        if self._write_retry is not None:
            self._write_retry.cancel()
            self._write_retry = None
        try:
            verdict = self.runtime.configure(rendering)
        except OSError as exc:
            delay = backoff_delay(self._write_failures, base=1.0, cap=60.0)
            self._write_failures += 1
            self.write_error = f"{self.runtime.config_path}: {exc.strerror or exc}"
            self.metrics.config_write_failed()
            log(
                _logger,
                logging.ERROR,
                "exabgp.config_write_failed",
                error=self.write_error,
                retry_in=round(delay, 1),
            )
            self._write_retry = asyncio.get_running_loop().call_later(
                delay, self._install, rendering
            )
            return
        if self._write_failures:
            log(_logger, logging.INFO, "exabgp.config_written", after=self._write_failures)
        self._held_rendered = self.driver.core.held_down(time.time())
        self._set_bfd_peers(rendering)
        # BGP follows BFD for the sessions bfdd runs (none: nothing is held back).
        self.bfd_follow.configure(self.config, [p.peer for p in self._bfd_peers])
        self._write_failures = 0
        self.write_error = ""
        if verdict.action is not ConfigAction.NONE:
            # What the change does to each session (bgpd.exabgp.reload); a restart
            # resets all of them, and says why it could not be a reload.
            log(
                _logger,
                logging.WARNING if verdict.action is ConfigAction.RESTART else logging.INFO,
                "exabgp.reconfigured",
                action=str(verdict.action),
                reason=str(verdict.reason or ""),
                neighbors=len(rendering.neighbors),
                added=",".join(sorted(verdict.added)),
                removed=",".join(sorted(verdict.removed)),
                reset=",".join(sorted(verdict.reset)),
                kept=",".join(sorted(verdict.kept)),
            )
        self.rendered.set()

    def _set_bfd_peers(self, rendering: Rendering) -> None:
        """The BFD sessions of a rendering's peers (their local addresses resolved)."""
        peers = bfd_peers(
            ((n.peer, n.local_address) for n in rendering.neighbors), self.config.bfd_profiles
        )
        if peers != self._bfd_peers:
            self._bfd_peers = peers
            self._bfd_changed.set()

    def on_bfd_states(self, states: Mapping[PeerName, BfdPeerState]) -> None:
        """bfdd's sessions read back (each time one changed): BGP follows them
        (bgpd.speaker.bfd_follow: routes held back, sessions torn down); kept for metrics
        and status; a changed state is logged and published (MQTT)."""
        self.bfd_follow.on_states(states)
        before, self.bfd_states = self.bfd_states, states
        for name, s in sorted(states.items()):
            was = before.get(name)
            if was is not None and was.state is s.state:
                continue
            self._status_wake.set()  # BGPNodeStatus shows each session's BFD state
            log(
                _logger,
                logging.INFO,
                "bfd.state",
                peer=name,
                state=s.state.value,
                diagnostic=s.diagnostic,
                flaps=s.flaps,
            )
            if self.mqtt is not None:
                self.mqtt.publish(
                    BfdEvent(
                        node=self.node,
                        peer=name,
                        state=s.state.value,
                        diagnostic=s.diagnostic,
                        at=time.time(),
                    )
                )

    def _bfd_status(self) -> dict[str, Any] | None:
        sup = self.bfd.supervisor
        if not self._bfd_peers and sup.pid is None:
            return None
        return {
            "pid": sup.pid,
            "restarts": sup.restarts,
            "peers": status_rows(self._bfd_peers, self.bfd_states),
        }

    def _bfd_sessions(self) -> list[BfdSession]:
        """The BFD-enabled peers' sessions for the metrics (bgpd.metrics.BfdCollector)."""
        return [
            BfdSession(peer=p, state=s.state.value, flaps=s.flaps, detect_ms=s.detect_ms)
            for p, s in sorted(self.bfd_states.items())
        ]

    def _on_bfd_started(self, pid: int) -> None:
        log(_logger, logging.INFO, "bfd.started", pid=pid, peers=len(self._bfd_peers))
        # The watchdog kills this bfdd when the speaker hangs (bgpd.bfd.watchdog).
        self.bfd_watchdog.watch(pid)

    def _after_apply(self, result: PassResult) -> None:
        """What follows the routes handed to the driver (_pass_to_driver): the Kubernetes
        source records its "started/stopped announcing" Events (never blocks), the
        decide phase is recorded now; _convergence() times the accept phase, only when
        the desired routes changed (a pass that changes nothing sends nothing)."""
        if self._observer is not None:
            self._observer.observe_decision(result.decision, changes=result.changes)
        self.metrics.observe_convergence(ConvergencePhase.DECIDE, result.latency)
        self._first_decision.set()
        self._status_wake.set()
        self.metrics.observe_reconcile(result.duration)
        self._save_last_valid()
        # The Decider says whether the desired set changed (no second by_peer() and
        # comparison of every route per pass).
        if not result.desired_changed:
            return
        first = result.applied - result.latency
        # Keep the oldest change not accepted yet: "total" is what an operator waits.
        if self._unconverged is not None:
            first = min(first, self._unconverged[0])
        self._unconverged = (first, result.applied)
        self._applied.set()

    def _save_last_valid(self) -> None:
        """Write the last valid attributes when a pass changed them (seldom: an
        annotation edited, a Service added or removed), so a restart keeps them."""
        current = self.reconciler.last_valid
        if current != self._last_valid_saved:
            snapshot = dict(current)
            if attribute_state.save(self._last_valid_file, snapshot):
                self._last_valid_saved = snapshot

    # ------------------------------------------------------------------ signals

    def reload(self) -> None:
        """SIGHUP: re-read the configuration (files, or the cluster's objects, which then
        come back through apply_config) and the cluster source."""
        if self.config_source is not None:
            self.config_source.reload()
        else:
            self._reload_files()
        self.source.reload()

    def _reload_files(self) -> None:
        outcome = reload_config(self.config_paths, self.config)
        if outcome.config is None:
            # Any failure, a refusal included, keeps the running config and says so.
            self.config_stale = True
            log(
                _logger,
                logging.ERROR,
                "config.reload_failed",
                error=outcome.error,
                keeping="running config",
            )
        else:
            self.apply_config(outcome.config, outcome.warnings)

    def apply_config(self, config: Config, warnings: Sequence[object] = ()) -> None:
        """Put a new valid configuration in force: the one path of a SIGHUP reload and of a
        change in the cluster's objects. The cluster's source hands on only a Config that
        differs from the one in force (so a status-only or metadata-only change restarts
        nothing); a SIGHUP applies even an equal one, as an operator's "look again" (the
        kernel's source addresses and the password files are read anew)."""
        self.config_stale = False
        for w in warnings:
            log(_logger, logging.WARNING, "config.warning", warning=str(w))
        waiting = restart_needed(self._started_speaker, config.speaker)
        if waiting:
            log(
                _logger,
                logging.WARNING,
                "config.restart_needed",
                fields=", ".join(waiting),
                hint="read when the speaker starts: the running speaker keeps their values "
                "until it is restarted; the rest of the new config is in force",
            )
        self.config = config
        self.render_inputs.set_config(config)
        self.reconciler.set_config(config)
        # The Kubernetes source reads the BGPPeers' passwordSecrets the config names.
        if self._follower is not None:
            self._follower.set_config(config)
        self._status_wake.set()
        log(_logger, logging.INFO, "config.reloaded")

    def config_stale_reason(self) -> str:
        """Why the configuration in force is not what its source holds ("" if it is)."""
        if self.config_stale:
            return "the config files have errors; keeping the running config"
        return "" if self.config_source is None else self.config_source.stale_reason()

    # ------------------------------------------------------------------ drain

    async def drain(self) -> Mapping[str, Any]:
        """POST /drain: RFC 8326 (re-announce with GRACEFUL_SHUTDOWN, hold, withdraw)."""
        self._drain_step(drain.request(self.drain_state, time.time()))
        return self._drain_status()

    async def cancel_drain(self) -> Mapping[str, Any]:
        """DELETE /drain: take the operator's drain back (bgpd.speaker.drain.cancel)."""
        self._drain_step(drain.cancel(self.drain_state, time.time()))
        return self._drain_status()

    def _drain_step(self, t: Transition) -> None:
        """Carry out what the drain state machine says: mode, log lines, timer."""
        self.drain_state = t.state
        withdrawn = t.state.draining and t.state.mode is DriverMode.WITHDRAWN
        for event in t.events:
            _log_drain_event(event)
            if self._drain_observer is not None:
                self._drain_observer.observe_drain(event.name, event.fields, withdrawn=withdrawn)
        if t.mode is not None:
            self.driver.set_mode(t.mode)
        if self._drain_timer is not None and (t.wake_at is not None or not t.state.draining):
            self._drain_timer.cancel()
            self._drain_timer = None
        if t.wake_at is not None:
            delay = max(0.0, t.wake_at - time.time())
            self._drain_timer = asyncio.get_running_loop().call_later(delay, self._drain_tick)
        if t.state.mode is DriverMode.WITHDRAWN:
            self._drained.set()
        else:
            self._drained.clear()
        self._status_wake.set()
        self._publish_data_plane()

    def _drain_tick(self) -> None:
        self._drain_timer = None
        self._drain_step(drain.tick(self.drain_state, time.time()))

    def _drain_status(self) -> dict[str, Any]:
        # The driver's mode: a stop (withdraw, retain) sets it beyond the drain's.
        return {**self.drain_state.status(), "mode": str(self.driver.mode)}

    # ------------------------------------------------------------------ data plane

    async def _data_plane(self) -> None:
        """SpeakerConfig dataPlaneCheck: one round of kube-proxy's health answers per
        interval (bgpd.speaker.probe asks, bgpd.speaker.dataplane decides). A reload that
        removes the check ends the gating (adding one takes a restart)."""
        async with aiohttp.ClientSession() as session:
            while (check := self.config.speaker.data_plane_check) is not None:
                started = time.monotonic()
                last = self.reconciler.last
                services = (
                    checked_services(self.config, last.snapshot, self.node)
                    if last is not None and check.services
                    else {}
                )
                self._data_plane_round(check, await ask_round(session, check, services))
                await asyncio.sleep(max(0.0, check.interval - (time.monotonic() - started)))
        self._data_plane_checked = False
        self._drain_step(drain.data_plane(self.drain_state, True, time.time()))
        log(_logger, logging.INFO, "dataplane.check_removed")

    def _data_plane_round(self, check: DataPlaneCheck, answers: Round) -> None:
        """Feed one round's answers to the verdicts; log each verdict that changed; hand
        the node's to the drain and the whole to the reconciler."""
        before = self.data_plane_state
        after = observe_round(
            before,
            node_ok=answers.node.ok,
            services_ok={key: a.ok for key, a in answers.services.items()},
            now=time.monotonic(),
            thresholds=Thresholds(check.failure_threshold, check.success_threshold),
        )
        self.data_plane_state = after
        if after.node.ready is not before.node.ready:
            state = "ready" if after.node.ready else "not_ready"
            log(
                _logger,
                logging.INFO if after.node.ready else logging.WARNING,
                f"dataplane.node_{state}",
                url=check.node_url,
                answer=answers.node.detail,
            )
        for key, c in after.services.items():
            held = before.services.get(key)
            if c.ready is not (held is not None and held.ready):
                state = "ready" if c.ready else "not_ready"
                log(
                    _logger,
                    logging.INFO if c.ready else logging.WARNING,
                    f"dataplane.service_{state}",
                    service=key,
                    answer=answers.services[key].detail,
                )
        self._drain_step(drain.data_plane(self.drain_state, after.node.ready, time.time()))

    def _publish_data_plane(self) -> None:
        """Hand decide() what the checks say now (the reconciler decides again when it
        changed); nothing is gated without the check."""
        if not self._data_plane_checked:
            self.reconciler.set_data_plane(DATA_PLANE_UNCHECKED)
            return
        check = self.config.speaker.data_plane_check
        self.reconciler.set_data_plane(
            data_plane(
                self.data_plane_state,
                node_withdrawn=self.drain_state.data_plane_withdrawn,
                services_checked=check is not None and check.services,
                now=time.monotonic(),
                window=self.config.speaker.drain_window,
            )
        )

    def _data_plane_status(self) -> dict[str, Any] | None:
        """/status "data_plane" (None without the check): the verdicts as they stand."""
        if not self._data_plane_checked:
            return None
        services = self.data_plane_state.services
        return {
            "node_ready": self.data_plane_state.node.ready,
            "services_ready": sorted(k for k, c in services.items() if c.ready),
            "services_not_ready": sorted(k for k, c in services.items() if not c.ready),
        }

    # ------------------------------------------------------------------ observability

    def _probes(self) -> SpeakerProbes:
        sup = self.runtime.supervisor
        return SpeakerProbes(
            peers=self.driver.peer_status,
            accepted_routes=self.driver.accepted,
            decision=lambda: (
                None if self.reconciler.last is None else self.reconciler.last.decision
            ),
            snapshot=lambda: (
                None if self.reconciler.last is None else self.reconciler.last.snapshot
            ),
            running=lambda: sup.pid is not None,
            restarts=lambda: sup.restarts,
            commands=lambda: self.driver.stats.commands_sent,
            # A Speaker only exists with a valid config; a rejected reload keeps it.
            loaded=lambda: True,
            stale=lambda: self.config_stale_reason() != "",
            kinds_synced=self._kinds_synced,
            source_stale=lambda: self.source.stale,
            advertised_routes=self.driver.advertised,
        )

    def _kinds_synced(self) -> Mapping[str, bool]:
        """Per kind when the source has informers (Kubernetes), else the source as one."""
        if self._kinds is not None:
            return self._kinds.kinds_synced()
        return {"cluster": self.source.synced}

    async def _settle_heap(self) -> None:
        """See bgpd.heap.settle: once the first decision's routes reached ExaBGP;
        then, every heap.RELEASE_INTERVAL, heap.release_if_grown().

        Until then (FIRST_SYNC_GC_PAUSE at most) automatic collection is paused: the
        first sync builds the objects that live on (the caches, the decision, the
        desired and accepted routes) and leaves no reference cycles behind, yet
        CPython's thresholds ran full collections over the growing heap all along it
        (measured at 10,000 Services from the API: three in the LIST, 0.04-0.08 s each,
        two in the first decision, two while ExaBGP took the routes, 0.07-0.12 s each,
        holding the acknowledgements and so ExaBGP's window). settle() collects once."""
        decided_at: float | None = None
        with heap.collection_paused(), contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_SYNC_GC_PAUSE):
                await self._first_decision.wait()
                decided_at = time.monotonic()
                await self.driver.wait_converged(within=GC_FREEZE_WITHIN)
        if decided_at is None:
            await self._first_decision.wait()
            decided_at = time.monotonic()
        await self.driver.wait_converged(
            within=max(0.0, decided_at + GC_FREEZE_WITHIN - time.monotonic())
        )
        done = heap.settle()
        log(_logger, logging.INFO, "speaker.heap_frozen", **done.log_context())
        # Later bursts (a /status answer, a re-list, a big change) leave freed memory
        # behind too: hand it back when the RSS grew.
        since = done.rss_after
        while True:
            await asyncio.sleep(heap.RELEASE_INTERVAL)
            got = heap.release_if_grown(since)
            if got is not None:
                before, since = got
                log(
                    _logger,
                    logging.DEBUG,
                    "speaker.heap_released",
                    rss_mib=round(since / 2**20, 1),
                    released_mib=round((before - since) / 2**20, 1),
                )

    async def _convergence(self) -> None:
        """Time "decision applied -> ExaBGP accepted everything", and the total."""
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
            self.metrics.observe_convergence(ConvergencePhase.ACCEPT, now - applied)
            self.metrics.observe_convergence(ConvergencePhase.TOTAL, now - first)

    # ------------------------------------------------------------------ cluster status

    def cluster_status_now(
        self,
    ) -> tuple[dict[ServiceKey, tuple[PeerName, ...]], dict[str, Any] | None, str]:
        """What this node's status objects should hold now: Service -> the peers that
        have its routes, the BGPNodeStatus status (None while the Node is missing) and
        the Node's uid (their owner)."""
        last = self.reconciler.last
        decision = None if last is None else last.decision
        on_wire = cluster_status.routes_on_the_wire(self.driver)
        services = cluster_status.service_peers(decision, on_wire)
        node = None if last is None else last.snapshot.nodes.get(self.node)
        if node is None:
            return services, None, ""
        stale = self.config_stale_reason()
        body = cluster_status.node_status(
            cluster_status.NodeInputs(
                node=self.node,
                peers=self.driver.peer_status(),
                config_origin=cluster_status.ConfigOrigin.FILE
                if self.config_source is None
                else cluster_status.ConfigOrigin.CLUSTER,
                config_errors=(stale, self.render_error, self.write_error),
                config_stale=stale != "",
                drain_state=str(self.driver.mode),
                drain_since=self.drain_state.started,
                bfd=self.bfd_states,
            )
        )
        return services, body, node.uid

    async def _cluster_status(self, publisher: StatusPublisher) -> None:
        """Hand the status objects' contents to the source when something changed, at
        most once per statusInterval (the source then writes only what differs).

        Not before the first decision's routes had their chance to reach the routers
        (_status_start): at start nothing is on the wire yet, and publishing then would
        delete every object the previous run left and create it again moments later."""
        await self._status_start()
        while True:
            if self._status_unsettled():
                # While a session's advertised routes still climb towards the accepted
                # ones (a session just re-established), look again after an interval
                # too, should a wake-up be lost (a full subscription queue drops events;
                # the driver's RouteEvents otherwise wake this task as they climb).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._status_wake.wait(), self.config.speaker.status_interval
                    )
            else:
                await self._status_wake.wait()
            self._status_wake.clear()
            publisher.publish_status(*self.cluster_status_now())
            await asyncio.sleep(self.config.speaker.status_interval)

    def _status_unsettled(self) -> bool:
        """Some established session has fewer or more routes advertised than accepted."""
        return any(
            s.state is SessionState.UP and s.advertised != s.accepted
            for s in self.driver.peer_status().values()
        )

    async def _status_start(self) -> None:
        """Return once the first decision's routes are acknowledged and every session
        is up, or STATUS_START_WITHIN seconds after the first decision at the latest."""
        await self._first_decision.wait()
        deadline = time.monotonic() + STATUS_START_WITHIN
        events = self.driver.subscribe()  # session changes wake the wait below
        try:
            # No session known yet (ExaBGP not started) counts as not up.
            while not (statuses := self.driver.peer_status()) or any(
                s.state is not SessionState.UP for s in statuses.values()
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(events.get(), remaining)
            await self.driver.wait_converged(within=max(0.0, deadline - time.monotonic()))
        finally:
            self.driver.unsubscribe(events)

    async def _cluster_status_events(self) -> None:
        """The driver's events wake the status task: session changes, RouteEvents (the
        routes on the wire changed: ServiceBGPStatus) and RoutesAccepted (the accepted
        counts of BGPNodeStatus changed, also while a session is down)."""
        events = self.driver.subscribe()
        try:
            while True:
                await events.get()
                while not events.empty():
                    events.get_nowait()
                self._status_wake.set()
        finally:
            self.driver.unsubscribe(events)

    # ------------------------------------------------------------------ status provider

    def health(self) -> tuple[bool, str]:
        sup = self.runtime.supervisor
        return health(
            HealthInputs(
                rendered=self.rendered.is_set(),
                running=sup.pid is not None,
                stopping=sup.stopping,
                answering=self.driver.answering,
            )
        )

    def readiness(self) -> tuple[bool, str]:
        return readiness(
            ReadinessInputs(
                synced=self.source.synced,
                rendered=self.rendered.is_set(),
                connected=self.driver.connected,
                decided=self.reconciler.last is not None,
                node_missing=self.node if self._node_missing and self.source.synced else "",
                source_stale=self.source.stale,
                config_stale=self.config_stale_reason(),
                write_error=self.write_error,
            )
        )

    def status(self) -> Mapping[str, Any]:
        peers = [
            {
                "name": s.peer,
                "address": str(s.address),
                "state": str(s.state),
                "since": s.since,
                "reason": s.reason,
                "accepted": s.accepted,
                "pending": s.pending,
                "desired": s.desired,
                "advertised": s.advertised,
            }
            for s in self.driver.peer_status().values()
        ]
        sup = self.runtime.supervisor
        last = self.reconciler.last
        decision = None if last is None else last.decision
        return {
            "node": self.node,
            "mode": str(self.driver.mode),
            "drain": self._drain_status(),
            "data_plane": self._data_plane_status(),
            "source": {"synced": self.source.synced, "stale": self.source.stale},
            "exabgp": {
                "pid": sup.pid,
                "generation": sup.generation,
                "restarts": sup.restarts,
                "connected": self.driver.connected,
                "render_error": self.render_error,
                "write_error": self.write_error,
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
                "latency": None if last is None else last.latency,
            },
            # The last decision in explain's JSON contract, for `explain --from-speaker`.
            # Built off the event loop (StatusServer), like the routes.
            "explain": None
            if decision is None
            else Deferred(
                partial(decision_json, replace(decision, peers_held=self.bfd_follow.held()))
            ),
            "config": {
                "stale": self.config_stale_reason() != "",
                "stale_reason": self.config_stale_reason(),
            },
            "mqtt": None
            if self.mqtt is None
            else {
                "connected": self.mqtt.connected,
                "queued": self.mqtt.queued,
                "dropped": self.mqtt.dropped,
            },
            "peers": peers,
            "routes": Deferred(
                partial(_route_rows, self.driver.accepted(), self.driver.advertised())
            ),
            # None while no peer has a bfdProfile and no bfdd runs.
            "bfd": self._bfd_status(),
            "bfd_gate": self.bfd_follow.status(),
        }

    # ------------------------------------------------------------------ run

    async def _render_early(self) -> None:
        """Render ExaBGP's configuration as soon as what it needs from the cluster is known
        (this Node and the peers' passwords: NodeFirst), so ExaBGP starts and its
        sessions come up while the Services and EndpointSlices are still listed and
        decided, instead of after the first decision (at 10,000 Services, ExaBGP's start
        and its helper's connection overlap the first list and decision). The first
        decision renders the same text again (no reload). Before it the driver core sends
        no route and no End-of-RIB, and nothing is accepted (DriverCore.desired_known);
        readiness still waits for the first decision."""
        if self._node_first is None:
            return
        node = await self._node_first.node_known()
        if self.rendered.is_set():
            return  # the first decision came first
        log(_logger, logging.INFO, "speaker.node_known", node=self.node, found=node is not None)
        # Kept as the last pass's inputs are: a hold-down before the first decision
        # renders from them (_hold_downs).
        self._rendered_from = (
            ClusterSnapshot(nodes={} if node is None else {self.node: node}),
            None,
        )
        self._render(*self._rendered_from)

    async def _release_events(self, held: HeldEvents) -> None:
        """The source's Events are held from the start (hold_events) and written once the
        first decision's routes are accepted, or EVENTS_START_WITHIN seconds after it: at
        10,000 Services the first decision records an Event for each of the first 100
        Services and one aggregated Event (k8s_watcher.event_budget), and writing them
        took ~75 ms of the daemon's CPU while ExaBGP took the routes (measured, CPU time
        from the sync to the routes accepted: 0.36-0.39 s with them, 0.29-0.30 s
        without). A stop releases them too (request_stop)."""
        await self._first_decision.wait()
        await self.driver.wait_converged(within=EVENTS_START_WITHIN)
        held.release_events()

    async def _run_exabgp(self) -> None:
        await self.rendered.wait()
        try:
            await self.runtime.run()
        except* OSError as group:  # the binary is missing or not executable
            first = _leaves(group)[0]
            raise TaskFailed("exabgp", first) from first

    async def _run_bfd(self) -> None:
        """bfdd once a rendering has a BFD-enabled peer (until then, none runs); each
        later rendering's sessions are applied in place. bfdd that cannot run here ends
        the process like an ExaBGP that cannot start (speaker.task_failed)."""
        while not self._bfd_peers:
            self._bfd_changed.clear()
            await self._bfd_changed.wait()
        await self.bfd.configure(self._bfd_peers)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.bfd.run(), name="bfdd")
                tg.create_task(self.bfd_watchdog.run(), name="bfd-watchdog")
                while True:
                    self._bfd_changed.clear()
                    await self.bfd.configure(self._bfd_peers)
                    await self._bfd_changed.wait()
        except* (BfdError, OSError) as group:  # cannot run here; its files cannot be written
            first = _leaves(group)[0]
            raise TaskFailed("bfd", first) from first

    async def _lifecycle(self) -> None:
        await self.stop_requested.wait()
        action = self.config.speaker.on_sigterm
        log(_logger, logging.INFO, "speaker.stopping", on_sigterm=str(action))
        if action is SigtermAction.DRAIN and not self.drain_state.draining:
            await self.drain()
        if self.drain_state.mode is DriverMode.DRAINING:
            await self._drained.wait()
        # A node that is draining (`kube-bgpd drain`, its annotation, onSigterm drain) asked
        # to leave the routers: then the stop leaves nothing there, whatever onSigterm says.
        retain = action is SigtermAction.RETAIN and not self.drain_state.draining
        if action is SigtermAction.RETAIN and not retain:
            log(_logger, logging.INFO, "speaker.retain_skipped", reason="drain requested")
        held = self.driver.accepted()
        ok = await self._goodbye(retain)
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

    async def _goodbye(self, retain: bool) -> bool:
        """The stop: BGP first, BFD last (bgpd.speaker.bfd_follow.say_goodbye)."""

        async def withdraw(retain: bool) -> bool:
            if self.runtime.supervisor.pid is None or not self.driver.connected:
                return True
            return await self.driver.withdraw_all(10.0, retain_graceful=retain)

        ok = await say_goodbye(
            retain=retain,
            withdraw=withdraw,
            stop_exabgp=partial(self.runtime.stop, withdraw=False),
            bfd=self.bfd,
        )
        self.bfd_watchdog.watch(None)
        return ok

    def request_stop(self) -> None:
        if self._held_events is not None:
            self._held_events.release_events()
        self._drain_step(drain.stop(self.drain_state))
        self.bfd_follow.stop()
        self.stop_requested.set()

    async def _companion(self, name: str, companion: Companion) -> None:
        """Run a companion; its failure ends the group as TaskFailed."""
        try:
            await companion()
        except Exception as exc:
            raise TaskFailed(name, exc) from exc

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the exit code."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        try:
            await self.status_server.start()
        except OSError as err:
            where = f"{self.status_server.host}:{self.status_server.port}"
            raise StartupError(
                f"cannot listen on {where} (metrics, health, status): {err.strerror or err}"
            ) from err
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
                tg.create_task(self._reconcile(), name="reconciler")
                tg.create_task(self._run_exabgp(), name="exabgp")
                tg.create_task(self._render_early(), name="exabgp-early")
                tg.create_task(self._run_bfd(), name="bfd")
                tg.create_task(self._lifecycle(), name="lifecycle")
                tg.create_task(self._convergence(), name="convergence")
                tg.create_task(self._hold_downs(), name="hold-downs")
                tg.create_task(self._settle_heap(), name="heap-freeze")
                if self._held_events is not None:
                    tg.create_task(self._release_events(self._held_events), name="events-start")
                if self._data_plane_checked:
                    tg.create_task(self._data_plane(), name="data-plane")
                if self._publisher is not None:
                    tg.create_task(self._cluster_status(self._publisher), name="cluster-status")
                    tg.create_task(self._cluster_status_events(), name="cluster-status-events")
                if self.mqtt is not None:
                    tg.create_task(self.mqtt.run(), name="mqtt")
                    events = self.driver.subscribe()
                    tg.create_task(self.mqtt.follow(events), name="mqtt-events")
                    tg.create_task(
                        self.mqtt.follow_peers(self.driver.peer_status), name="mqtt-peers"
                    )
                for name, companion in self.companions.items():
                    tg.create_task(self._companion(name, companion), name=name)
        except* _Stop:
            code = 0
        except* CrashLoopError as group:
            for exc in _leaves(group):
                log(_logger, logging.CRITICAL, "exabgp.crash_loop", error=str(exc))
            code = 1
        except* TaskFailed as group:
            for exc in _leaves(group):
                assert isinstance(exc, TaskFailed)
                log(
                    _logger,
                    logging.CRITICAL,
                    "speaker.task_failed",
                    task=exc.name,
                    error=str(exc.__cause__),
                )
            code = 1
        finally:
            sys.setswitchinterval(previous_interval)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            with contextlib.suppress(Exception):
                await self.runtime.supervisor.stop()
            with contextlib.suppress(Exception):
                await self.bfd.stop()
            await self.status_server.stop()
        return code
