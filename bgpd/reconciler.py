"""The speaker's one control loop: cluster snapshot in, desired routes out.

    wait_changed -> (debounce) -> snapshot -> decide -> sink.apply

Level-triggered: a change only says "look again"; every pass decides from the whole
snapshot (bgpd.decision.Decider recomputes only the Services whose objects changed and
gives exactly decide()'s answer), so missed or coalesced events cannot leave a wrong
route behind. A source that knows which Service keys its events touched
(``snapshot_changes()``, the Kubernetes watcher) lets the Decider look at those only, and
a sink that takes changes (``apply_changes()``, the ExaBGP driver) is handed only the
(peer, prefix) whose route changed: one EndpointSlice change then costs about one
Service, not all of them. Any doubt (first pass, new config or Node, a pass that did not
finish) falls back to the whole set.

Gated on sync: no decision before the source finished its first list, and none while
it is stale (watch broken, API unreachable, bad cluster file), because a half-filled or
outdated cache would withdraw live routes; the last applied set stays in place
meanwhile (MetalLB's initial-load rule, kopf's LISTED marker).

Public API (the Kubernetes watcher implements SnapshotSource against it):

* ``SnapshotSource``: ``synced``, ``stale``, ``snapshot()``, ``await wait_changed()``
  (returns time.monotonic() of the first change of the batch, for convergence metrics);
  optionally ``snapshot_changes() -> (snapshot, keys | None)`` (``ChangeSource``): the
  Service keys whose Service or EndpointSlices may differ from the snapshot its previous
  call returned (None: anything may have). Only the reconciler may call it.
* ``RouteSink``: ``apply(desired)`` (the ExaBGP driver); optionally
  ``apply_changes(desired, changed)`` (``ChangeSink``): only the prefixes in ``changed``
  (per peer) may differ from the previous apply; ``desired`` is read, never kept.
* ``Reconciler(config=..., node=..., source=..., sink=..., debounce=0.0,
  before_apply=None, on_reconciled=None, kernel_choices=None)``; ``await run()``;
  ``kick()`` (decide again, e.g. after a config reload); ``set_config(config)``;
  ``reconcile_once(first_change)``;
  read-only ``last_decision``, ``last_snapshot``, ``last_latency`` (seconds from the
  first change to apply), ``last_duration`` (seconds the pass took), ``last_changes``
  (peer -> prefixes whose route changed in the last pass, None: unknown, maybe all),
  ``desired_changed`` (the last pass changed the desired route set), ``decisions``
  (count), ``skipped_unsynced``, ``skipped_stale``.

This module decides nothing itself (bgpd.decision does) and knows no ExaBGP text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol, runtime_checkable

from bgpd.decision import Decider
from bgpd.logs import log
from bgpd.model import (
    ClusterSnapshot,
    Config,
    Decision,
    DesiredRoutes,
    IPAddress,
    IPNetwork,
    NodeName,
    PeerName,
    ServiceKey,
)
from bgpd.peers import NO_KERNEL_CHOICES

_logger = logging.getLogger("bgpd.reconciler")


class SnapshotSource(Protocol):
    @property
    def synced(self) -> bool:
        """Every kind finished its first list; no decision before."""
        ...

    @property
    def stale(self) -> bool:
        """Watch broken / API unreachable: the snapshot is the last known one."""
        ...

    def snapshot(self) -> ClusterSnapshot: ...

    async def wait_changed(self) -> float:
        """Return when something relevant changed since the last call; the value is the
        time.monotonic() of the first change in this batch."""
        ...


@runtime_checkable
class ChangeSource(Protocol):
    def snapshot_changes(self) -> tuple[ClusterSnapshot, AbstractSet[ServiceKey] | None]:
        """snapshot(), and the keys of the Services whose Service or EndpointSlices may
        differ from the snapshot the previous call returned (None: any may)."""
        ...


class RouteSink(Protocol):
    def apply(self, desired: DesiredRoutes) -> None: ...


@runtime_checkable
class ChangeSink(Protocol):
    def apply_changes(
        self, desired: DesiredRoutes, changed: Mapping[PeerName, AbstractSet[IPNetwork]]
    ) -> None:
        """apply(desired) when only the prefixes in `changed` may differ from the
        previous apply; `desired` is read during the call, not kept."""
        ...


class Reconciler:
    def __init__(
        self,
        *,
        config: Config,
        node: NodeName,
        source: SnapshotSource,
        sink: RouteSink,
        debounce: float = 0.0,
        before_apply: Callable[[Config, ClusterSnapshot, Decision], None] | None = None,
        on_reconciled: Callable[[Decision, float], None] | None = None,
        kernel_choices: Callable[[Config], Mapping[PeerName, IPAddress | None]] | None = None,
    ) -> None:
        self.config = config
        #: Asked once per pass: the source address the kernel picks to reach each peer
        #: (decide() routes only to peers with a local address, bgpd.peers). None: no
        #: kernel at hand, the rule uses sourceAddress and the Node's InternalIP.
        self.kernel_choices = kernel_choices
        self.node = node
        self.source = source
        self.sink = sink
        self.debounce = debounce
        #: Called with each new decision before it is applied (the speaker re-renders
        #: ExaBGP's configuration here when the Node's labels or addresses changed).
        self.before_apply = before_apply
        #: Called after each apply with the decision and the seconds since the change.
        self.on_reconciled = on_reconciled
        self.last_decision: Decision | None = None
        self.last_snapshot: ClusterSnapshot | None = None
        self.last_latency: float | None = None
        #: Seconds the last pass took (snapshot, decide, render, apply): a metric.
        self.last_duration: float | None = None
        self.last_changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None = None
        self.desired_changed = False
        self.decisions = 0
        self.skipped_unsynced = 0
        self.skipped_stale = 0
        self._kicked = asyncio.Event()
        self._kicked_at: float | None = None
        #: decide() made incremental: a pass costs about the Services that changed.
        self._decider = Decider()
        #: The source's changed keys and the sink's changes path, when they offer them.
        self._changes_of = source.snapshot_changes if isinstance(source, ChangeSource) else None
        self._apply_changes = sink.apply_changes if isinstance(sink, ChangeSink) else None
        #: Whether the Decider decided from the source's previous snapshot_changes(), and
        #: whether the sink got the Decider's previous result: only then are the keys
        #: and changes relative to what they hold (a pass that raised breaks the chain).
        self._decider_current = False
        self._sink_current = False

    def set_config(self, config: Config) -> None:
        self.config = config
        self.kick()

    def kick(self) -> None:
        """Decide again soon, without a change from the source (config reload)."""
        if self._kicked_at is None:
            self._kicked_at = time.monotonic()
        self._kicked.set()

    def reconcile_once(self, first_change: float) -> Decision | None:
        """One pass; returns the applied decision, or None when gated."""
        if not self.source.synced:
            self.skipped_unsynced += 1
            log(_logger, logging.INFO, "reconcile.waiting_for_sync")
            return None
        if self.source.stale:
            self.skipped_stale += 1
            log(_logger, logging.WARNING, "reconcile.source_stale", keeping="last applied routes")
            return None
        started = time.monotonic()
        decider = self._decider
        changed: AbstractSet[ServiceKey] | None = None
        if self._changes_of is not None:
            snapshot, changed = self._changes_of()
            if not self._decider_current:
                changed = None
        else:
            snapshot = self.source.snapshot()
        self._decider_current = False
        kernel = (
            NO_KERNEL_CHOICES if self.kernel_choices is None else self.kernel_choices(self.config)
        )
        decision = decider.decide(
            self.config, snapshot, self.node, changed=changed, kernel_choices=kernel
        )
        self._decider_current = self._changes_of is not None
        sink_current, self._sink_current = self._sink_current, False
        self.last_changes = decider.last_changes
        self.desired_changed = decider.desired_changed
        if self.before_apply is not None:
            self.before_apply(self.config, snapshot, decision)
        if self._apply_changes is not None and sink_current and self.last_changes is not None:
            self._apply_changes(decider.desired_view(), self.last_changes)
        else:
            self.sink.apply(decider.desired())
        self._sink_current = True
        self.last_snapshot = snapshot
        self.last_decision = decision
        self.decisions += 1
        self.last_duration = time.monotonic() - started
        self.last_latency = time.monotonic() - first_change
        log(
            _logger,
            logging.INFO,
            "reconcile.applied",
            routes=len(decision.routes),
            skipped=len(decision.skipped),
            seconds=round(self.last_latency, 4),
        )
        if self.on_reconciled is not None:
            self.on_reconciled(decision, self.last_latency)
        return decision

    async def run(self) -> None:
        changed: asyncio.Task[float] | None = None
        kicked: asyncio.Task[bool] | None = None
        try:
            while True:
                if changed is None:
                    changed = asyncio.create_task(self.source.wait_changed(), name="source-changed")
                if kicked is None:
                    kicked = asyncio.create_task(self._kicked.wait(), name="reconcile-kicked")
                await asyncio.wait({changed, kicked}, return_when=asyncio.FIRST_COMPLETED)
                firsts: list[float] = []
                if changed.done():
                    firsts.append(changed.result())
                    changed = None
                if kicked.done():
                    self._kicked.clear()
                    kicked = None
                    if self._kicked_at is not None:
                        firsts.append(self._kicked_at)
                        self._kicked_at = None
                if self.debounce > 0:
                    await asyncio.sleep(self.debounce)
                self.reconcile_once(min(firsts) if firsts else time.monotonic())
        finally:
            for task in (changed, kicked):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
