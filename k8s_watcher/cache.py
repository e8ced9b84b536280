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

Snapshots share one copy of the Service and EndpointSlice indexes plus a small overlay of
the keys changed since (no 10,000-entry copy per change), and `snapshot_changes()` also
returns the Service keys the events touched since its previous call, so the speaker's
incremental Decider looks at those Services only.

No snapshot is meaningful before every kind finished its first list (`synced`): a
half-filled cache would withdraw live routes. A re-list keeps the old cache until the
new list is complete and emits only real differences; a watch cut or an API outage keeps
the last known state and sets `stale` for status and metrics. Nothing here ever empties
the cache because the API is unreachable.

SpeakerSource adds what the speaker needs besides the snapshot: BGPPeer passwords from
Secrets and the announcement Events. This module must not decide routes; its only
writes are those Events, through k8s_watcher.writer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import (
    Callable,
    ItemsView,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    ValuesView,
)
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast, overload

from bgpd.logs import log
from bgpd.model import (
    ClusterSnapshot,
    Config,
    Decision,
    EndpointSlice,
    IPNetwork,
    Namespace,
    Node,
    NodeName,
    PeerName,
    SecretRef,
    Service,
    ServiceKey,
)
from bgpd.objects import secret_password
from k8s_watcher.client import KubeClient, default_namespace, object_path
from k8s_watcher.errors import KubernetesError, NotFound, Outcome, RequestRejected
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
    NamespacedStore,
)
from k8s_watcher.status_writer import StatusLimits, StatusWriter
from k8s_watcher.writer import AnnouncementEvents, EventRecorder, ObjectRef, drain_event_text

logger = logging.getLogger(__name__)


def _is_lb(service: Service | None) -> bool:
    return service is not None and service.type == "LoadBalancer"


K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class _Gone:
    """Marks a key deleted since the base, in a _Layered overlay."""


_GONE = _Gone()
#: What a dictionary's get() returns for an absent key, told apart from any value.
_ABSENT: Any = object()


def _layered_get(base: dict[K, V], overlay: dict[K, V | _Gone], key: K) -> V:
    """`key`'s value in `base` under `overlay` (_GONE: deleted since); KeyError if none."""
    if key in overlay:
        value = overlay[key]
        if isinstance(value, _Gone):
            raise KeyError(key)
        return value
    return base[key]


def _layered_get_or(base: dict[K, V], overlay: dict[K, V | _Gone], key: K, default: D) -> V | D:
    """`key`'s value in `base` under `overlay`, else `default`: Mapping.get without the
    KeyError it raises and catches for every absent key (a Service without slices, every
    key of a first list)."""
    value = overlay.get(key, _ABSENT)
    if value is _ABSENT:
        return base.get(key, default)
    if isinstance(value, _Gone):
        return default
    return cast("V", value)


def _layered_contains(base: dict[K, V], overlay: dict[K, V | _Gone], key: object) -> bool:
    if key in overlay:
        return not isinstance(overlay[key], _Gone)
    return key in base


class _Lookups(Generic[K, V]):
    """The look-ups of a base dictionary under an overlay of the keys changed since
    (_GONE: deleted), which _Layered and _Index share."""

    __slots__ = ()
    _base: dict[K, V]
    _overlay: dict[K, V | _Gone]

    def __getitem__(self, key: K) -> V:
        return _layered_get(self._base, self._overlay, key)

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, /, default: V | D) -> V | D: ...

    def get(self, key: K, /, default: object = None) -> object:
        return _layered_get_or(self._base, self._overlay, key, default)

    def __contains__(self, key: object) -> bool:
        return _layered_contains(self._base, self._overlay, key)


class _Layered(_Lookups[K, V], Mapping[K, V]):
    """A read-only mapping: a frozen base dictionary (shared by many snapshots, never
    changed) with a small overlay of the keys changed since (_GONE: deleted). Look-ups
    cost two dictionary look-ups; iterating builds the merged dictionary once."""

    __slots__ = ("_base", "_len", "_merged", "_overlay")

    def __init__(self, base: dict[K, V], overlay: dict[K, V | _Gone]) -> None:
        self._base = base
        self._overlay = overlay
        size = len(base)
        for key, value in overlay.items():
            size += (value is not _GONE) - (key in base)
        self._len = size
        self._merged: dict[K, V] | None = None if overlay else base

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        return iter(self._full())

    def _full(self) -> dict[K, V]:
        if self._merged is None:
            merged = dict(self._base)
            for key, value in self._overlay.items():
                if isinstance(value, _Gone):
                    merged.pop(key, None)
                else:
                    merged[key] = value
            self._merged = merged
        return self._merged

    def keys(self) -> KeysView[K]:
        return self._full().keys()

    def items(self) -> ItemsView[K, V]:
        return self._full().items()

    def values(self) -> ValuesView[V]:
        return self._full().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Layered):
            return self._full() == other._full()
        if isinstance(other, Mapping):
            return self._full() == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_Layered({self._full()!r})"


class _Index(_Lookups[K, V], MutableMapping[K, V]):
    """The live objects of one index, and the read-only mappings snapshots get of it.

    The objects are held once: a frozen dictionary (`_base`, shared with every snapshot
    taken since it was built, never changed) and the keys changed since (`_overlay`,
    _GONE: deleted). A snapshot's mapping is the base and a copy of the few pending
    keys; once those outnumber about the square root of the size, the next mapping
    folds them into a new base. So a snapshot after one change costs about that change
    (amortised), not a copy of 10,000 entries, a snapshot never changes after it was
    handed out, and at rest the index is one dictionary (a live dictionary beside the
    snapshots' copy was a second one: ~1.3 MiB at 30,000 Services per index).

    It is also an informer's store (k8s_watcher.informer: `store=`), so the Services
    the informer holds are these, not a copy."""

    __slots__ = ("_base", "_compact_after", "_len", "_mapping", "_overlay")

    def __init__(self, *, compact_after: int = 64) -> None:
        self._base: dict[K, V] = {}
        self._overlay: dict[K, V | _Gone] = {}
        self._len = 0
        self._mapping: _Layered[K, V] | None = None
        self._compact_after = compact_after

    def __setitem__(self, key: K, value: V) -> None:
        self._len += key not in self
        self._overlay[key] = value
        self._mapping = None

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self._len -= 1
        if key in self._base:
            self._overlay[key] = _GONE
        else:
            del self._overlay[key]
        self._mapping = None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        pending = self._overlay
        for key in self._base:
            if key not in pending:
                yield key
        for key, value in pending.items():
            if not isinstance(value, _Gone):
                yield key

    def mapping(self) -> Mapping[K, V]:
        """The index now, read-only, never changed afterwards."""
        if self._mapping is None:
            pending = self._overlay
            if len(pending) > max(self._compact_after, math.isqrt(self._len)):
                base = dict(self._base)
                for key, value in pending.items():
                    if isinstance(value, _Gone):
                        del base[key]
                    else:
                        base[key] = value
                self._base, pending = base, {}
                self._overlay = pending
            self._mapping = _Layered(self._base, dict(pending))
        return self._mapping


def _slice_name(s: EndpointSlice) -> str:
    return s.name


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
        #: Services and, per Service, its EndpointSlices sorted by name: the two big
        #: indexes, which snapshots share rather than copy (see _Index). The Service
        #: index is also the Service informer's store: each Service is held once.
        self._services: _Index[ServiceKey, Service] = _Index()
        #: Per Service, its EndpointSlices ordered by name (so a snapshot does not depend
        #: on the order objects arrived in): the tuple snapshots hand out, kept as it is
        #: rather than rebuilt from a dict per Service (a dict per Service costs ~180
        #: bytes, 1.8 MiB at 10,000 Services; a Service has one slice or a few).
        self._slices: _Index[ServiceKey, tuple[EndpointSlice, ...]] = _Index()
        self._nodes: dict[NodeName, Node] = {}
        self._namespaces: dict[str, Namespace] = {}
        self._dirty: set[ServiceKey] = set()
        #: Service keys touched since snapshot_changes() last handed out a snapshot; None
        #: until its first call (a source nobody asks, the controller's, keeps no set).
        self._touched: set[ServiceKey] | None = None
        self._snapshot: ClusterSnapshot | None = None
        #: The last snapshot built, whose unchanged indexes the next one reuses, and which
        #: small indexes changed since ("nodes", "namespaces").
        self._built: ClusterSnapshot | None = None
        self._changed_parts: set[str] = set()
        #: The snapshot last handed out (what the last decision was made from).
        self.last_snapshot: ClusterSnapshot | None = None
        self._changed = asyncio.Event()
        self._first_change: float | None = None
        self._last_state = (False, True)
        #: When the source last became stale (monotonic), None while fresh; and how many
        #: stale episodes there were since the first sync (status, metrics, tests).
        self.stale_since: float | None = clock()
        self.stale_episodes = 0

        self.group = InformerGroup()

        def add(
            kind: Kind[Any], handler: Handler[Any], store: MutableMapping[str, Any] | None = None
        ) -> Informer[Any]:
            informer: Informer[Any] = Informer(
                client,
                kind,
                handler,
                timing=timing,
                on_state=self._on_state,
                observer=observer,
                store=store,
            )
            self.group.informers.append(informer)
            return informer

        # A Service's informer key ("namespace/name") is its ServiceKey.
        self.services: Informer[Service] = add(
            SERVICES, self._on_service, cast("MutableMapping[str, Service]", self._services)
        )
        self.endpoint_slices: Informer[EndpointSlice] | None = (
            add(ENDPOINT_SLICES, self._on_slice, NamespacedStore(_slice_name))
            if endpoint_slices
            else None
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
        is returned); otherwise the big indexes are handed out as layers over a shared
        copy (_Index: an endpoint change copies neither 10,000 Services nor 10,000 slice
        groups) and only the small ones that changed are copied, so a snapshot never
        changes after it was handed out."""
        if self._snapshot is not None and not self._dirty:
            self.last_snapshot = self._snapshot
            return self._snapshot
        self._dirty.clear()
        built, parts = self._built, self._changed_parts

        def index(field: str, part: str, current: Mapping[Any, Any]) -> Any:
            """A read-only copy if this index changed, else the previous snapshot's."""
            if built is None or part in parts:
                return MappingProxyType(dict(current))
            return getattr(built, field)

        self._snapshot = self._built = ClusterSnapshot(
            services=self._services.mapping(),
            endpoint_slices=self._slices.mapping(),
            nodes=index("nodes", "nodes", self._nodes),
            namespaces=index("namespaces", "namespaces", self._namespaces),
        )
        parts.clear()
        self.last_snapshot = self._snapshot
        return self._snapshot

    def snapshot_changes(self) -> tuple[ClusterSnapshot, AbstractSet[ServiceKey] | None]:
        """snapshot(), and the keys of the Services whose Service object or EndpointSlices
        may differ from those in the snapshot the previous call returned: every key the
        events touched since, a superset (None on the first call: compare everything).
        Node and Namespace changes add no key: they change no Service's own objects, and
        the decision compares the Node itself. The reconciler's incremental Decider looks
        at these keys only, so a change costs about the Services it touched, not all."""
        snapshot = self.snapshot()
        touched, self._touched = self._touched, set()
        return snapshot, touched

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

    def reload(self) -> None:
        """SIGHUP: re-list every kind now. Only real differences come out of a re-list,
        so this repairs drift without churn."""
        for informer in self.group.informers:
            informer.request_resync()

    # ------------------------------------------------------------------ handlers

    def _mark(self) -> None:
        """Something relevant changed: wake wait_changed (only once synced, so a
        10,000-object first list is one wake-up, not 10,000)."""
        # Any change also invalidates the cached snapshot, relevant or not.
        self._snapshot = None
        # `synced` as _on_state last saw it: every change of it goes through _on_state,
        # and asking every informer again cost each object of a first list ~1 us.
        if not self._last_state[0]:
            return
        if self._first_change is None:
            self._first_change = self._clock()
        self._changed.set()

    def _on_state(self) -> None:
        state = (self.synced, self.stale)
        if state == self._last_state:
            return
        was_synced, was_stale = self._last_state
        self._last_state = state
        if state[1] and not was_stale:
            self.stale_since = self._clock()
            if state[0]:
                self.stale_episodes += 1
        elif not state[1]:
            self.stale_since = None
        log(logger, logging.INFO, "source.state", synced=state[0], stale=state[1])
        if state[0] and not was_synced:
            self._snapshot = None
        # Synced or stale flipping is news for the reconciler (first decision; status).
        if state[0]:
            if self._first_change is None:
                self._first_change = self._clock()
            self._changed.set()

    def _on_service(self, key: str, old: Service | None, new: Service | None) -> None:
        """The Service informer has already stored `new` (or dropped `key`) in
        self._services, its store."""
        skey = ServiceKey(key)
        if self._touched is not None:
            self._touched.add(skey)
        self._snapshot = None
        if _is_lb(old) or _is_lb(new):
            self._dirty.add(skey)
            self._mark()

    def _on_slice(self, key: str, old: EndpointSlice | None, new: EndpointSlice | None) -> None:
        touched: set[ServiceKey] = set()
        slices = self._slices
        if old is not None and (skey := old.service_key) is not None:
            rest = tuple(s for s in slices.get(skey, ()) if s.name != old.name)
            if rest:
                slices[skey] = rest
            else:
                slices.pop(skey, None)
            touched.add(skey)
        if new is not None and (skey := new.service_key) is not None:
            current = slices.get(skey)
            if current is None:  # the Service's first slice (every slice of a first list)
                slices[skey] = (new,)
            else:
                rest = tuple(s for s in current if s.name != new.name)
                slices[skey] = tuple(sorted((*rest, new), key=_slice_name))
            touched.add(skey)
        if not touched:
            return
        self._dirty.update(touched)
        if self._touched is not None:
            self._touched.update(touched)
        self._snapshot = None
        if any(_is_lb(self._services.get(k)) for k in touched):
            self._mark()

    def _on_node(self, key: str, old: Node | None, new: Node | None) -> None:
        if new is None:
            self._nodes.pop(NodeName(key), None)
        else:
            self._nodes[NodeName(key)] = new
        self._changed_parts.add("nodes")
        self._mark()

    def _on_namespace(self, key: str, old: Namespace | None, new: Namespace | None) -> None:
        if new is None:
            self._namespaces.pop(key, None)
        else:
            self._namespaces[key] = new
        self._changed_parts.add("namespaces")
        self._mark()

    # ------------------------------------------------------------------ introspection

    def stats(self) -> dict[str, Any]:
        """Per-kind informer counters, for logs, metrics and tests."""
        return {i.kind.resource: i.stats for i in self.group.informers}

    def kinds_synced(self) -> Mapping[str, bool]:
        """Kind name -> whether its informer finished its first list (for the metrics)."""
        return {i.kind.name: i.has_synced for i in self.group.informers}


# --------------------------------------------------------------------------- speaker


class SpeakerSource(KubernetesSource):
    """The speaker's view of the cluster, plus the two other things it needs from the API:

    * the BGP MD5 passwords of BGPPeers that name a `passwordSecret` (read at start, on
      SIGHUP and when the config changes; not watched: they rarely change, and a change
      needs an ExaBGP restart anyway, which a SIGHUP gives);
    * Events on Services when this node starts or stops announcing them
      (`observe_decision`, called by the speaker after each decision; never blocks).

    `synced` also waits for the first attempt to read the secrets, so ExaBGP is never
    rendered without a password that exists.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        config: Config,
        node: NodeName,
        owns_client: bool = False,
        secret_namespace: str | None = None,
        events: bool = True,
        timing: InformerTiming | None = None,
        observer: InformerObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        status: StatusLimits | None = None,
    ) -> None:
        super().__init__(client, timing=timing, observer=observer, clock=clock)
        self._client = client
        self._owns_client = owns_client
        self._secret_namespace = secret_namespace
        self._config = config
        self._passwords: dict[PeerName, str] = {}
        self._secrets_loaded = not self._secret_refs()
        self._secrets_wanted = asyncio.Event()
        self._secrets_wanted.set()
        self._previous: Decision | None = None
        self._node = node
        self._budget_wanted = asyncio.Event()
        #: Set once the Nodes are listed and the passwords read (node_known).
        self._node_known = asyncio.Event()
        self.recorder: EventRecorder | None = None
        self.announcements: AnnouncementEvents | None = None
        if events:
            self.recorder = EventRecorder(client, component="kube-bgpd-speaker", host=node)
            self.announcements = AnnouncementEvents(self.recorder, node, clock=clock)
        #: This node's status objects (SpeakerConfig clusterStatus), in our namespace.
        self.status_writer: StatusWriter | None = None
        if status is not None:
            self.status_writer = StatusWriter(
                client, node=node, namespace=default_namespace(), limits=status
            )

    @classmethod
    def connect(
        cls, kubeconfig: str | None, *, config: Config, node: NodeName, **kwargs: Any
    ) -> SpeakerSource:
        """A source whose client loads its credentials when `run()` starts (the speaker
        builds its source synchronously); the client is closed when `run()` ends."""
        return cls(
            KubeClient.lazy(kubeconfig), config=config, node=node, owns_client=True, **kwargs
        )

    @property
    def synced(self) -> bool:
        return self._secrets_loaded and super().synced

    async def node_known(self) -> Node | None:
        """This Node once the Nodes' first list is in and the passwordSecrets were read
        (None: no such Node): all ExaBGP's configuration needs from the cluster, known
        while the Services and EndpointSlices are still listed (bgpd.speaker.source)."""
        await self._node_known.wait()
        return self._nodes.get(self._node)

    def _on_state(self) -> None:
        nodes = self.nodes
        if nodes is not None and nodes.has_synced and self._secrets_loaded:
            self._node_known.set()
        super()._on_state()

    def secret_passwords(self) -> Mapping[PeerName, str]:
        """Peer -> password from its passwordSecret, for rendering ExaBGP's config."""
        return MappingProxyType(dict(self._passwords))

    def set_config(self, config: Config) -> None:
        """A reloaded config may name other Secrets: read them again."""
        self._config = config
        self._secrets_wanted.set()

    def reload(self) -> None:
        super().reload()
        self._secrets_wanted.set()

    def observe_decision(
        self,
        decision: Decision,
        changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None = None,
    ) -> None:
        """Record Events for Services this node started or stopped announcing.
        `changes`: the (peer, prefix) whose route may differ from the previous decision's
        (the reconciler's last_changes), None when unknown."""
        if self.announcements is not None:
            snap = self.last_snapshot
            services = snap.services if snap is not None else {}
            self.announcements.observe(self._previous, decision, services, changes)
            self._budget_wanted.set()
        self._previous = decision

    def hold_events(self) -> None:
        """Queue this speaker's Events without writing them until release_events()."""
        if self.recorder is not None:
            self.recorder.hold()

    def release_events(self) -> None:
        """Write the Events held since hold_events(), and those to come."""
        if self.recorder is not None:
            self.recorder.release()

    def observe_drain(self, event: str, fields: Mapping[str, object], *, withdrawn: bool) -> None:
        """A drain transition (`event`: the drain's log event name, bgpd.speaker.drain):
        an Event on the Node, and, when the drain withdrew or gave back the node's
        routes (`withdrawn`), one per Service it announces (within the Event budget)."""
        if self.recorder is None or self.announcements is None:
            return
        found = drain_event_text(event, fields, self._node)
        if found is not None:
            self.recorder.record(ObjectRef.node(self._node), *found)
        self.announcements.set_withdrawn(withdrawn)
        self._budget_wanted.set()

    async def _budget_loop(self, announcements: AnnouncementEvents) -> None:
        """Record the aggregated announce Events when their window ends."""
        while True:
            wake = announcements.wake_at
            if wake is None:
                await self._budget_wanted.wait()
                self._budget_wanted.clear()
                continue
            await asyncio.sleep(max(0.0, wake - self._clock()))
            announcements.flush()

    def publish_status(
        self,
        services: Mapping[ServiceKey, tuple[PeerName, ...]],
        node_status: Mapping[str, Any] | None,
        node_uid: str,
    ) -> None:
        """This node's status objects as they should be (never blocks)."""
        if self.status_writer is not None:
            self.status_writer.publish(services, node_status, node_uid)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(super().run(), name="speaker-informers")
                tg.create_task(self._secrets_loop(), name="speaker-secrets")
                if self.recorder is not None:
                    tg.create_task(self.recorder.run(), name="speaker-events")
                if self.announcements is not None:
                    tg.create_task(
                        self._budget_loop(self.announcements), name="speaker-event-budget"
                    )
                if self.status_writer is not None:
                    tg.create_task(self.status_writer.run(), name="speaker-status")
        finally:
            if self._owns_client:
                await self._client.close()

    def _secret_refs(self) -> dict[PeerName, SecretRef]:
        return {p.name: ref for p in self._config.peers if (ref := p.secret_ref) is not None}

    async def _secrets_loop(self) -> None:
        delay = 0.5
        while True:
            await self._secrets_wanted.wait()
            self._secrets_wanted.clear()
            try:
                self._passwords = await self._read_secrets()
            except KubernetesError as exc:
                if exc.outcome != Outcome.RETRY:
                    raise
                log(logger, logging.WARNING, "secrets.retry", error=exc.message, delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                self._secrets_wanted.set()
                continue
            delay = 0.5
            if not self._secrets_loaded:
                self._secrets_loaded = True
                self._on_state()
            else:
                self._mark()

    async def _read_secrets(self) -> dict[PeerName, str]:
        out: dict[PeerName, str] = {}
        default_ns = self._secret_namespace or default_namespace()
        for peer, ref in self._secret_refs().items():
            name, ns = ref.name, ref.namespace or default_ns
            try:
                secret = await self._client.request(
                    "GET",
                    object_path("v1", "secrets", namespace=ns, name=name),
                    what=f"get secret {ns}/{name}",
                )
            except (NotFound, RequestRejected) as exc:
                # Missing or forbidden: the session comes up without MD5 and the router
                # refuses it, which the peer status shows; say why here.
                log(logger, logging.ERROR, "secrets.unreadable", peer=peer, error=exc.message)
                continue
            password = secret_password(secret)
            if password is None:
                log(logger, logging.ERROR, "secrets.no_password", peer=peer, secret=f"{ns}/{name}")
                continue
            out[peer] = password
        return out
