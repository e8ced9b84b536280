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
  kernel_choices=None)``. A pass has
  two halves so that its caller can act between them from what the pass decided, never
  by reading the reconciler back: ``decide(first_change) -> Pass | None`` (None: gated)
  and ``apply(pass_) -> PassResult`` (decision, snapshot, changes, desired_changed,
  latency, duration, applied). ``reconcile_once(first_change)`` does both; ``async for first in
  changes()`` yields once per batch of changes (debounced), ``await run()`` reconciles
  each; ``kick()`` (decide again, e.g. after a config reload); ``set_config(config)``;
  read-only ``last`` (the last PassResult), ``decisions`` (count), ``skipped_unsynced``,
  ``skipped_stale``.

This module decides nothing itself (bgpd.decision does) and knows no ExaBGP text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bgpd.decision import NO_LAST_VALID, Decider
from bgpd.logs import log
from bgpd.model import (
    DATA_PLANE_UNCHECKED,
    ClusterSnapshot,
    Config,
    DataPlane,
    Decision,
    DesiredRoutes,
    IPAddress,
    IPNetwork,
    Node,
    NodeName,
    PeerName,
    RouteAttributes,
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


#: (config, this Node or None) -> the kernel's source address per peer (I/O, the
#: speaker's; asked once per pass).
KernelChoices = Callable[[Config, Node | None], Mapping[PeerName, IPAddress | None]]


@dataclass(frozen=True, slots=True)
class Pass:
    """A decided pass, not applied yet: what the caller needs before the apply (the
    speaker renders ExaBGP's configuration for this Node and config here)."""

    config: Config
    snapshot: ClusterSnapshot
    decision: Decision
    #: Peer -> prefixes whose route changed (None: unknown, maybe all).
    changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None
    #: Whether the desired route set differs from the previous pass's.
    desired_changed: bool
    #: time.monotonic() of the first change this pass answers, and of its start.
    first_change: float
    started: float
    #: The kernel's source address per peer this pass decided with (bgpd.peers): the
    #: rendering of the same pass uses the same answer.
    kernel_choices: Mapping[PeerName, IPAddress | None]


@dataclass(frozen=True, slots=True)
class PassResult:
    """An applied pass: what the speaker's metrics, drain and Events work from."""

    config: Config
    snapshot: ClusterSnapshot
    decision: Decision
    changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None
    desired_changed: bool
    #: Seconds from the first change to the apply.
    latency: float
    #: Seconds the pass took (snapshot, decide, render, apply).
    duration: float
    #: time.monotonic() of the apply: the speaker records the pass after the driver's
    #: sender had its turn (bgpd.speaker.app), and times convergence from here.
    applied: float


class Reconciler:
    def __init__(
        self,
        *,
        config: Config,
        node: NodeName,
        source: SnapshotSource,
        sink: RouteSink,
        debounce: float = 0.0,
        kernel_choices: KernelChoices | None = None,
        last_valid: Mapping[ServiceKey, RouteAttributes] = NO_LAST_VALID,
    ) -> None:
        """``last_valid``: the Services' last valid attributes kept from before a restart
        (bgpd.speaker.attribute_state), where the Decider starts from."""
        self.config = config
        #: Asked once per pass: the source address the kernel picks to reach each peer
        #: (decide() routes only to peers with a local address, bgpd.peers). None: no
        #: kernel at hand, the rule uses sourceAddress and the Node's InternalIP.
        self.kernel_choices = kernel_choices
        self.node = node
        #: What the data-plane checks say (set_data_plane); nothing gated by default.
        self.data_plane = DATA_PLANE_UNCHECKED
        self.source = source
        self.sink = sink
        self.debounce = debounce
        self.last: PassResult | None = None
        self.decisions = 0
        self.skipped_unsynced = 0
        self.skipped_stale = 0
        self._kicked = asyncio.Event()
        self._kicked_at: float | None = None
        #: decide() made incremental: a pass costs about the Services that changed.
        self._decider = Decider(last_valid)
        #: The source's changed keys and the sink's changes path, when they offer them.
        self._changes_of = source.snapshot_changes if isinstance(source, ChangeSource) else None
        self._apply_changes = sink.apply_changes if isinstance(sink, ChangeSink) else None
        #: Whether the Decider decided from the source's previous snapshot_changes(), and
        #: whether the sink got the Decider's previous result: only then are the keys
        #: and changes relative to what they hold (a pass that raised breaks the chain).
        self._decider_current = False
        self._sink_current = False
        #: _sink_current as decide() found it, for the apply() that follows.
        self._sink_current_at_decide = False

    @property
    def last_valid(self) -> Mapping[ServiceKey, RouteAttributes]:
        """The Services' last valid attributes after the last decide() (the Decider's)."""
        return self._decider.last_valid

    def set_config(self, config: Config) -> None:
        self.config = config
        self.kick()

    def set_data_plane(self, data_plane: DataPlane) -> None:
        """The data-plane checks changed their verdict: decide again with it."""
        if data_plane != self.data_plane:
            self.data_plane = data_plane
            self.kick()

    def kick(self) -> None:
        """Decide again soon, without a change from the source (config reload)."""
        if self._kicked_at is None:
            self._kicked_at = time.monotonic()
        self._kicked.set()

    def reconcile_once(self, first_change: float) -> PassResult | None:
        """One pass, decided and applied; None when gated."""
        decided = self.decide(first_change)
        return None if decided is None else self.apply(decided)

    def decide(self, first_change: float) -> Pass | None:
        """The first half of a pass: gated on sync, then decide; apply() must follow
        before the next decide() (the Decider's changes are relative to the last apply)."""
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
        # A decided pass that is never applied (its caller raised) breaks the chain.
        self._sink_current_at_decide, self._sink_current = self._sink_current, False
        kernel = (
            NO_KERNEL_CHOICES
            if self.kernel_choices is None
            else self.kernel_choices(self.config, snapshot.nodes.get(self.node))
        )
        decision = decider.decide(
            self.config,
            snapshot,
            self.node,
            changed=changed,
            kernel_choices=kernel,
            data_plane=self.data_plane,
        )
        self._decider_current = self._changes_of is not None
        return Pass(
            config=self.config,
            snapshot=snapshot,
            decision=decision,
            changes=decider.last_changes,
            desired_changed=decider.desired_changed,
            kernel_choices=kernel,
            first_change=first_change,
            started=started,
        )

    def apply(self, decided: Pass) -> PassResult:
        """The second half, for the Pass the last decide() returned: hand the desired
        routes to the sink (only the changes when the sink holds the previous apply)."""
        decider = self._decider
        sink_current, self._sink_current_at_decide = self._sink_current_at_decide, False
        if self._apply_changes is not None and sink_current and decided.changes is not None:
            self._apply_changes(decider.desired_view(), decided.changes)
        else:
            self.sink.apply(decider.desired())
        self._sink_current = True
        self.decisions += 1
        now = time.monotonic()
        result = PassResult(
            config=decided.config,
            snapshot=decided.snapshot,
            decision=decided.decision,
            changes=decided.changes,
            desired_changed=decided.desired_changed,
            latency=now - decided.first_change,
            duration=now - decided.started,
            applied=now,
        )
        self.last = result
        log(
            _logger,
            logging.INFO,
            "reconcile.applied",
            routes=len(result.decision.routes),
            skipped=len(result.decision.skipped),
            seconds=round(result.latency, 4),
        )
        return result

    async def changes(self) -> AsyncGenerator[float, None]:
        """Yield once per batch of changes (source or kick(), after the debounce): the
        time.monotonic() of the batch's first change. The caller reconciles in between."""
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
                yield min(firsts) if firsts else time.monotonic()
        finally:
            for task in (changed, kicked):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def run(self) -> None:
        """Reconcile after each batch of changes, until cancelled."""
        async with contextlib.aclosing(self.changes()) as batches:
            async for first_change in batches:
                self.reconcile_once(first_change)
