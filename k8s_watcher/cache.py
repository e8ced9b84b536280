"""KubernetesSource: the live cluster as the speaker's (and the controller's) SnapshotSource.

It runs one informer per kind and keeps indexes the snapshot is built from. Events only
mark Service keys dirty and wake the reconciler (level-triggered, coalesced: a burst of
events becomes one wake-up); `snapshot()` rebuilds what the dirty keys touched:

* a Service event marks its key; changes to Services that are not, and were not, of type
  LoadBalancer wake nobody (they cannot change a route or an allocation);
* an EndpointSlice maps to its Service through the `kubernetes.io/service-name` label
  (both the old and the new Service, if the label moved);
* a Node or Namespace change marks everything; Node heartbeats never get here because
  the informer drops events whose converted Node did not change.

No snapshot is meaningful before every kind finished its first list (`synced`): a
half-filled cache would withdraw live routes. A re-list keeps the old cache until the
new list is complete and emits only real differences; a watch cut or an API outage keeps
the last known state and sets `stale` for status and metrics. Nothing here ever empties
the cache because the API is unreachable.

This module must not decide routes or write to the API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from bgpd.logs import log
from bgpd.model import (
    ClusterSnapshot,
    EndpointSlice,
    Namespace,
    Node,
    NodeName,
    Service,
    ServiceKey,
)
from k8s_watcher.client import KubeClient
from k8s_watcher.informer import (
    ENDPOINT_SLICES,
    NAMESPACES,
    NODES,
    SERVICES,
    Handler,
    Informer,
    InformerGroup,
    InformerObserver,
    InformerTiming,
    Kind,
)

logger = logging.getLogger(__name__)


def _is_lb(service: Service | None) -> bool:
    return service is not None and service.type == "LoadBalancer"


class KubernetesSource:
    """Implements bgpd.reconciler.SnapshotSource on informers.

    Speaker: Services, EndpointSlices, Nodes. Controller: Services and Namespaces (for
    serviceAllocation.namespaceSelectors). Run `run()` as a task; read the rest from the
    same event loop.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        endpoint_slices: bool = True,
        nodes: bool = True,
        namespaces: bool = False,
        timing: InformerTiming | None = None,
        observer: InformerObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._services: dict[ServiceKey, Service] = {}
        #: service key -> slice key -> slice
        self._slices: dict[ServiceKey, dict[str, EndpointSlice]] = {}
        self._slice_tuples: dict[ServiceKey, tuple[EndpointSlice, ...]] = {}
        self._nodes: dict[NodeName, Node] = {}
        self._namespaces: dict[str, Namespace] = {}
        self._dirty: set[ServiceKey] = set()
        self._snapshot: ClusterSnapshot | None = None
        self._changed = asyncio.Event()
        self._first_change: float | None = None
        self._last_state = (False, True)

        self.group = InformerGroup()

        def add(kind: Kind[Any], handler: Handler[Any]) -> Informer[Any]:
            informer: Informer[Any] = Informer(
                client, kind, handler, timing=timing, on_state=self._on_state, observer=observer
            )
            self.group.informers.append(informer)
            return informer

        self.services: Informer[Service] = add(SERVICES, self._on_service)
        self.endpoint_slices: Informer[EndpointSlice] | None = (
            add(ENDPOINT_SLICES, self._on_slice) if endpoint_slices else None
        )
        self.nodes: Informer[Node] | None = add(NODES, self._on_node) if nodes else None
        self.namespaces: Informer[Namespace] | None = (
            add(NAMESPACES, self._on_namespace) if namespaces else None
        )

    # ------------------------------------------------------------------ SnapshotSource

    @property
    def synced(self) -> bool:
        """Every kind finished its first list; no decision before."""
        return self.group.synced

    @property
    def stale(self) -> bool:
        """Some informer lost its watch or cannot reach the API: the snapshot is the last
        known state (kept on purpose, never emptied)."""
        return self.group.stale

    def snapshot(self) -> ClusterSnapshot:
        """The cluster now, as far as we know. Cheap when nothing changed (the same object
        is returned); otherwise the dirty Services' slice groups are rebuilt and the
        indexes copied, so a snapshot never changes after it was handed out."""
        if self._snapshot is not None and not self._dirty:
            return self._snapshot
        for key in self._dirty:
            by_name = self._slices.get(key)
            if by_name:
                self._slice_tuples[key] = tuple(sorted(by_name.values(), key=lambda s: s.name))
            else:
                self._slice_tuples.pop(key, None)
        self._dirty.clear()
        self._snapshot = ClusterSnapshot(
            services=MappingProxyType(dict(self._services)),
            endpoint_slices=MappingProxyType(dict(self._slice_tuples)),
            nodes=MappingProxyType(dict(self._nodes)),
            namespaces=MappingProxyType(dict(self._namespaces)),
        )
        return self._snapshot

    async def wait_changed(self) -> float:
        """Return once something relevant changed since the last call (after sync).

        The value is time.monotonic() of the first change of this batch, so callers can
        measure event-to-route latency; every event until the call returns is coalesced.
        """
        await self._changed.wait()
        self._changed.clear()
        first = self._first_change
        self._first_change = None
        return first if first is not None else self._clock()

    async def run(self) -> None:
        """Run every informer until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for informer in self.group.informers:
                tg.create_task(informer.run(), name=f"informer-{informer.kind.resource}")

    # ------------------------------------------------------------------ handlers

    def _mark(self) -> None:
        """Something relevant changed: wake wait_changed (only once synced, so a
        10,000-object first list is one wake-up, not 10,000)."""
        # Any change also invalidates the cached snapshot, relevant or not.
        self._snapshot = None
        if not self.synced:
            return
        if self._first_change is None:
            self._first_change = self._clock()
        self._changed.set()

    def _on_state(self) -> None:
        state = (self.synced, self.stale)
        if state == self._last_state:
            return
        was_synced = self._last_state[0]
        self._last_state = state
        log(logger, logging.INFO, "source.state", synced=state[0], stale=state[1])
        if state[0] and not was_synced:
            self._snapshot = None
        # Synced or stale flipping is news for the reconciler (first decision; status).
        if state[0]:
            if self._first_change is None:
                self._first_change = self._clock()
            self._changed.set()

    def _on_service(self, key: str, old: Service | None, new: Service | None) -> None:
        skey = ServiceKey(key)
        if new is None:
            self._services.pop(skey, None)
        else:
            self._services[skey] = new
        self._snapshot = None
        if _is_lb(old) or _is_lb(new):
            self._dirty.add(skey)
            self._mark()

    def _on_slice(self, key: str, old: EndpointSlice | None, new: EndpointSlice | None) -> None:
        touched: set[ServiceKey] = set()
        if old is not None and old.service_key is not None:
            group = self._slices.get(old.service_key)
            if group is not None:
                group.pop(key, None)
                if not group:
                    del self._slices[old.service_key]
            touched.add(old.service_key)
        if new is not None and new.service_key is not None:
            self._slices.setdefault(new.service_key, {})[key] = new
            touched.add(new.service_key)
        if not touched:
            return
        self._dirty.update(touched)
        self._snapshot = None
        if any(_is_lb(self._services.get(k)) for k in touched):
            self._mark()

    def _on_node(self, key: str, old: Node | None, new: Node | None) -> None:
        if new is None:
            self._nodes.pop(NodeName(key), None)
        else:
            self._nodes[NodeName(key)] = new
        self._mark()

    def _on_namespace(self, key: str, old: Namespace | None, new: Namespace | None) -> None:
        if new is None:
            self._namespaces.pop(key, None)
        else:
            self._namespaces[key] = new
        self._mark()

    # ------------------------------------------------------------------ introspection

    def stats(self) -> dict[str, Any]:
        """Per-kind informer counters, for logs, metrics and tests."""
        return {i.kind.resource: i.stats for i in self.group.informers}
