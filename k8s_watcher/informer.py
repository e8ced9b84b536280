"""A small informer: list, then watch one kind, keeping a cache of converted model objects.

Why not the client's own helpers: `kubernetes.aio.watch.Watch` retries a 410 once with the
same stale resourceVersion and then raises, and builds a generated model for every event;
`kubernetes.informer.SharedInformer` is thread-based, cannot ask for bookmarks and fires
MODIFIED for every object after a re-list. What we need is small:

* LIST (paged) -> remember the list's resourceVersion -> WATCH from it with
  allowWatchBookmarks and timeoutSeconds, the client's total timeout a little longer so a
  dead TCP connection is noticed (the server ends the stream cleanly at timeoutSeconds);
* a watch that carries nothing (no event, no BOOKMARK) for ``idle_timeout`` is presumed
  dead and restarted, the kind reported stale meanwhile: the apiserver sends a watch that
  allows bookmarks one about every minute (its cacher's bookmark frequency), so silence
  means a connection that died without a FIN or RST (a dead load balancer, a dropped NAT
  entry), which otherwise went unnoticed until the total timeout (~390 s, issue 15);
* keep the resourceVersion of every event, BOOKMARKs included, so a resume after a clean
  end or a disconnect replays nothing and loses nothing;
* 410 Gone (in the stream or on a list) -> list again, keep the old cache until the new
  list is complete, then diff: emit deletions for keys missing from the new list and
  changes for objects that differ. Objects that did not change are NOT re-emitted, so a
  re-list never causes churn downstream;
* any other failure -> jittered, capped exponential back-off (Retry-After honoured), then
  resume from the last resourceVersion; the cache is kept meanwhile (stale, not empty);
* a periodic full re-list with the same diff, to repair anything a bug or a lost event
  left behind;
* `has_synced` once the first list is in.

Objects are converted with bgpd.objects at this boundary; events whose converted object
equals the cached one (a Node heartbeat, a status field we do not model) are dropped here.
The handler is called synchronously on the event loop and must be cheap (mark keys dirty).
This module must not make decisions or write to the API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Generic, Protocol, TypeVar, overload

from bgpd.logs import log
from bgpd.model import EndpointSlice, Namespace, Node, Service
from bgpd.objects import (
    SERVICE_NAME_LABEL,
    endpoint_slice_from_api,
    is_mapping,
    namespace_from_api,
    node_from_api,
    service_from_api,
)
from k8s_watcher.client import KubeClient, object_path
from k8s_watcher.errors import (
    ApiUnavailable,
    CredentialsError,
    KubernetesError,
    MalformedResponse,
    ResourceExpired,
    error_from_status,
)

#: What a refusal of our credentials most likely means, for the retry line.
_REFUSAL_HINTS: Final = {
    401: "credentials rejected: check the token or kubeconfig user",
    403: "forbidden: check the speaker's RBAC (ClusterRole and binding)",
}

logger = logging.getLogger(__name__)

T = TypeVar("T")
D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """One watched resource and how its objects become model objects."""

    #: The API kind, for logs ("Service").
    name: str
    group_version: str
    #: Plural resource name in the URL ("services").
    resource: str
    namespaced: bool
    convert: Callable[[Mapping[str, Any]], T]
    #: Server-side label selector; a slice without the service-name label belongs to no
    #: Service, so the API server need not send it at all.
    label_selector: str | None = None
    #: Watch one namespace only (the configuration objects); None: all namespaces.
    namespace: str | None = None

    @property
    def path(self) -> str:
        """The collection path: cluster-wide (all namespaces), or `namespace`'s."""
        return object_path(self.group_version, self.resource, namespace=self.namespace)


SERVICES: Kind[Service] = Kind("Service", "v1", "services", True, service_from_api)
ENDPOINT_SLICES: Kind[EndpointSlice] = Kind(
    "EndpointSlice",
    "discovery.k8s.io/v1",
    "endpointslices",
    True,
    endpoint_slice_from_api,
    label_selector=SERVICE_NAME_LABEL,
)
NODES: Kind[Node] = Kind("Node", "v1", "nodes", False, node_from_api)
NAMESPACES: Kind[Namespace] = Kind("Namespace", "v1", "namespaces", False, namespace_from_api)


@dataclass(frozen=True, slots=True)
class InformerTiming:
    """Knobs with production defaults; tests shrink them."""

    #: Server-side timeoutSeconds of one watch; each watch adds up to 25% at random so
    #: the informers of a fleet do not reconnect in lockstep.
    watch_timeout: int = 300
    #: Extra seconds on the client side before an open watch is presumed dead.
    read_grace: float = 15.0
    #: Seconds without any line (event or BOOKMARK) before an open watch is presumed dead
    #: and restarted: the apiserver's bookmark frequency (one minute) plus a margin. On
    #: an apiserver that sends no periodic bookmarks, a quiet kind's watch is restarted
    #: this often, which replays nothing (it resumes from the last resourceVersion).
    idle_timeout: float = 75.0
    #: Seconds between full re-lists; None disables them.
    resync_period: float | None = 900.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    #: Items per LIST page (limit/continue), so a 10,000-object list is not one huge body.
    page_size: int = 500
    list_timeout: float = 60.0


@dataclass(slots=True)
class InformerStats:
    """Counters for tests, logs and metrics (read only outside the informer)."""

    lists: int = 0
    relists_expired: int = 0
    resyncs: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    dropped_unchanged: int = 0
    errors: int = 0
    invalid_objects: int = 0
    last_error: str = ""


#: handler(key, old, new): old None = added, new None = deleted.
Handler = Callable[[str, T | None, T | None], None]


class InformerObserver(Protocol):
    """Receives counts for metrics (bgpd.metrics.WatchMetrics has this shape)."""

    def watch_event(self, kind: str, event_type: str) -> None: ...

    def relist(self, kind: str) -> None: ...


class NamespacedStore(MutableMapping[str, T]):
    """An informer's store with no key string per object: {namespace: {name: object}},
    each name the object's own string (`name_of`), under keys "namespace/name" (or
    "name") like any store. A dictionary keyed by "namespace/name" holds one more string
    per object (~64 bytes: 1.9 MiB at 30,000 EndpointSlices) for a key nothing else
    reads (the EndpointSlices' keys name no Service)."""

    __slots__ = ("_by_namespace", "_len", "_name_of")

    def __init__(self, name_of: Callable[[T], str]) -> None:
        self._by_namespace: dict[str, dict[str, T]] = {}
        self._len = 0
        self._name_of = name_of

    def __getitem__(self, key: str) -> T:
        namespace, _, name = key.rpartition("/")
        return self._by_namespace[namespace][name]

    @overload
    def get(self, key: str, /) -> T | None: ...

    @overload
    def get(self, key: str, /, default: T | D) -> T | D: ...

    def get(self, key: str, /, default: object = None) -> object:
        """Mapping.get without the KeyError it raises and catches for an absent key (every
        key of a first list)."""
        namespace, _, name = key.rpartition("/")
        inner = self._by_namespace.get(namespace)
        return default if inner is None else inner.get(name, default)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        namespace, _, name = key.rpartition("/")
        inner = self._by_namespace.get(namespace)
        return inner is not None and name in inner

    def __setitem__(self, key: str, value: T) -> None:
        namespace, _, name = key.rpartition("/")
        inner = self._by_namespace.get(namespace)
        if inner is None:
            inner = self._by_namespace[sys.intern(namespace)] = {}
        if name in inner:
            # A dictionary keeps the first key object of an entry: drop the entry, so
            # the key is the new object's own name, not the old object's (kept alive).
            del inner[name]
        else:
            self._len += 1
        own = self._name_of(value)
        inner[own if own == name else name] = value

    def __delitem__(self, key: str) -> None:
        namespace, _, name = key.rpartition("/")
        inner = self._by_namespace[namespace]
        del inner[name]
        self._len -= 1
        if not inner:
            del self._by_namespace[namespace]

    def __iter__(self) -> Iterator[str]:
        for namespace, inner in self._by_namespace.items():
            for name in inner:
                yield f"{namespace}/{name}" if namespace else name

    def __len__(self) -> int:
        return self._len


def object_key(obj: Mapping[str, Any]) -> str | None:
    """ "namespace/name" or "name" from an API object's metadata; None if it has no name."""
    meta = obj.get("metadata")
    if not is_mapping(meta):
        return None
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


def _resource_version(obj: Any) -> str | None:
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    rv = meta.get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None


class Informer(Generic[T]):
    """List and watch one kind forever; see the module docstring for the rules."""

    def __init__(
        self,
        client: KubeClient,
        kind: Kind[T],
        handler: Handler[T],
        *,
        timing: InformerTiming | None = None,
        on_state: Callable[[], None] | None = None,
        observer: InformerObserver | None = None,
        rng: random.Random | None = None,
        store: MutableMapping[str, T] | None = None,
    ) -> None:
        """`store`: where the informer keeps its objects by key (default: a dictionary of
        its own). A caller that indexes the objects by the same key passes its index, so
        each object is held by one mapping, not by the informer's and the caller's
        (k8s_watcher.cache: the Services)."""
        self._client = client
        self.kind = kind
        self._handler = handler
        self._timing = timing or InformerTiming()
        self._on_state = on_state
        self._observer = observer
        # Jitter only spreads reconnects; it needs no cryptographic randomness.
        self._rng = rng or random.Random()  # noqa: S311
        self._cache: MutableMapping[str, T] = {} if store is None else store
        self.resource_version: str | None = None
        self._synced = False
        self._connected = False
        self._attempt = 0
        self._resync_requested = False
        self._expired_streak = 0
        #: After a paged list's continue token expired, list in one piece next time
        #: (client-go does the same): a huge list must not chase its own tail forever.
        self._unpaged_next = False
        self._scope: asyncio.Timeout | None = None
        self.stats = InformerStats()

    # ------------------------------------------------------------------ state

    @property
    def cache(self) -> Mapping[str, T]:
        """Read-only view of the current objects by key."""
        return MappingProxyType(self._cache)

    @property
    def has_synced(self) -> bool:
        """True once the first full list has been applied (and forever after)."""
        return self._synced

    @property
    def connected(self) -> bool:
        """False while the last request failed and we are backing off; the cache is then
        the last known state, not the current one."""
        return self._connected

    def _set_state(self, *, synced: bool | None = None, connected: bool | None = None) -> None:
        changed = False
        if synced is not None and synced != self._synced:
            self._synced = synced
            changed = True
        if connected is not None and connected != self._connected:
            self._connected = connected
            changed = True
        if changed and self._on_state is not None:
            self._on_state()

    def request_resync(self) -> None:
        """List again soon (SIGHUP): ends the current watch at once; the re-list diffs
        against the cache like any other, so nothing that did not change is re-emitted."""
        self._resync_requested = True
        if self._scope is not None and not self._scope.expired():
            self._scope.reschedule(asyncio.get_running_loop().time())

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Run until cancelled. Every API failure is retried; only CredentialsError (no
        kubeconfig, no service account) ends it."""
        need_list = True
        resync_at = self._next_resync()
        while True:
            try:
                due = resync_at is not None and time.monotonic() >= resync_at
                if need_list or due or self._resync_requested:
                    if not need_list:
                        self.stats.resyncs += 1
                    await self._list()
                    # A requested re-list stays requested until one succeeds (a caller
                    # waits for a list after it asked, e.g. to confirm a deletion).
                    self._resync_requested = False
                    need_list = False
                    resync_at = self._next_resync()
                await self._watch(resync_at)
            except ResourceExpired as exc:
                # Our resourceVersion was compacted away: only a fresh list can tell us
                # what happened meanwhile. No back-off the first time (not an outage);
                # if it keeps happening before a watch stays open, back off like any error.
                self.stats.relists_expired += 1
                self._expired_streak += 1
                log(
                    logger, logging.INFO, "informer.expired", kind=self.kind.name, error=exc.message
                )
                need_list = True
                if self._expired_streak > 1:
                    await asyncio.sleep(self._backoff(None))
            except CredentialsError:
                # No credentials will not fix itself; let the daemon exit and say why.
                raise
            except KubernetesError as exc:
                self.stats.errors += 1
                self.stats.last_error = exc.message
                self._set_state(connected=False)
                delay = self._backoff(exc.retry_after)
                # Every API error is retried here, a 401/403 too (RBAC or a token can be
                # fixed while we wait), so the line says retry, never the error class's
                # giveUp, and names the likely cause of a refusal.
                log(
                    logger,
                    logging.WARNING,
                    "informer.retry",
                    kind=self.kind.name,
                    error=exc.message,
                    outcome="retry",
                    delay=round(delay, 3),
                    resource_version=self.resource_version,
                    **(
                        {"hint": _REFUSAL_HINTS[exc.status]} if exc.status in _REFUSAL_HINTS else {}
                    ),
                )
                await asyncio.sleep(delay)

    def _next_resync(self) -> float | None:
        period = self._timing.resync_period
        return None if period is None else time.monotonic() + period

    def _backoff(self, retry_after: float | None) -> float:
        """Capped exponential back-off with jitter; never shorter than Retry-After."""
        t = self._timing
        ceiling = min(t.backoff_max, t.backoff_initial * (2**self._attempt))
        self._attempt = min(self._attempt + 1, 32)
        delay = self._rng.uniform(ceiling / 2, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, t.backoff_max * 4))
        return delay

    # ------------------------------------------------------------------ list

    async def _list(self) -> None:
        """List every object (paged), then replace the cache by diffing against it."""
        kind = self.kind
        started = time.monotonic()
        fresh: dict[str, T] = {}
        list_rv: str | None = None
        token: str | None = None
        while True:
            query: list[tuple[str, str]] = []
            if not self._unpaged_next:
                query.append(("limit", str(self._timing.page_size)))
            if token:
                query.append(("continue", token))
            if kind.label_selector:
                query.append(("labelSelector", kind.label_selector))
            try:
                doc = await self._client.request(
                    "GET",
                    kind.path,
                    query=query,
                    request_timeout=self._timing.list_timeout,
                    what=f"list {kind.resource}",
                )
            except ResourceExpired:
                if token is not None:
                    self._unpaged_next = True
                raise
            items = doc.get("items") or []
            meta = doc.get("metadata") or {}
            if not isinstance(items, list) or not isinstance(meta, Mapping):
                raise MalformedResponse(f"list {kind.resource}: not a list object")
            for raw in items:
                self._convert_into(fresh, raw)
            if list_rv is None:
                rv = meta.get("resourceVersion")
                list_rv = rv if isinstance(rv, str) and rv else None
            cont = meta.get("continue")
            token = cont if isinstance(cont, str) and cont else None
            if token is None:
                break
        if list_rv is None:
            raise MalformedResponse(f"list {kind.resource}: no resourceVersion")
        self.stats.lists += 1
        self._unpaged_next = False
        if self._observer is not None:
            self._observer.relist(kind.name)
        self._replace(fresh)
        self.resource_version = list_rv
        self._attempt = 0
        self._set_state(synced=True, connected=True)
        # INFO: once per kind at start and per resync; where a start's time goes.
        log(
            logger,
            logging.INFO,
            "informer.listed",
            kind=kind.name,
            objects=len(fresh),
            resource_version=list_rv,
            seconds=round(time.monotonic() - started, 3),
        )

    def _convert_into(self, into: dict[str, T], raw: Any) -> None:
        if not is_mapping(raw):
            self.stats.invalid_objects += 1
            return
        key = object_key(raw)
        if key is None:
            self.stats.invalid_objects += 1
            return
        try:
            into[key] = self.kind.convert(raw)
        except ValueError as exc:
            # A malformed object must not make us forget what we knew about it.
            self.stats.invalid_objects += 1
            log(
                logger, logging.WARNING, "informer.invalid", kind=self.kind.name, key=key, error=exc
            )
            old = self._cache.get(key)
            if old is not None:
                into[key] = old

    def _replace(self, fresh: dict[str, T]) -> None:
        """Bring the store to a complete new list, emitting only real differences. In
        place (the store may be the caller's index); an object equal to the stored one
        is not replaced, and nothing reads the store between two of these steps (they
        run without an await)."""
        cache = self._cache
        handler = self._handler
        if not cache:  # a first list: every object is new
            for key, new in fresh.items():
                cache[key] = new
                handler(key, None, new)
            return
        for key in [key for key in cache if key not in fresh]:
            handler(key, cache.pop(key), None)
        for key, new in fresh.items():
            old = cache.get(key)
            if old is None or old != new:
                cache[key] = new
                handler(key, old, new)

    # ------------------------------------------------------------------ watch

    async def _watch(self, resync_at: float | None) -> None:
        """One watch from the current resourceVersion, until the server ends it or the
        next periodic re-list is due. Raises our errors."""
        kind = self.kind
        timeout = int(self._timing.watch_timeout * self._rng.uniform(1.0, 1.25))
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout)),
        ]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        if kind.label_selector:
            query.append(("labelSelector", kind.label_selector))
        deadline = None
        if resync_at is not None:
            deadline = asyncio.get_running_loop().time() + max(0.0, resync_at - time.monotonic())
        try:
            async with (
                asyncio.timeout_at(deadline) as scope,
                self._client.stream_lines(
                    kind.path,
                    query=query,
                    total_timeout=timeout + self._timing.read_grace,
                    what=f"watch {kind.resource}",
                ) as lines,
            ):
                self._scope = scope
                self.stats.watches += 1
                self._attempt = 0
                self._expired_streak = 0
                self._set_state(connected=True)
                if self._resync_requested:
                    return
                await self._read(lines)
        except TimeoutError:
            # Only our resync deadline raises a bare TimeoutError here: network
            # timeouts are ApiUnavailable by the time they leave the client.
            return
        finally:
            self._scope = None

    async def _read(self, lines: AsyncIterator[bytes]) -> None:
        """Apply every line until the stream ends; raise ApiUnavailable after
        idle_timeout seconds without one (the caller backs off, reports the kind stale
        and watches again from the last resourceVersion)."""
        idle = self._timing.idle_timeout
        while True:
            try:
                async with asyncio.timeout(idle) as quiet:
                    line = await anext(lines)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if not quiet.expired():
                    raise  # the resync deadline around the watch
                raise ApiUnavailable(
                    f"watch {self.kind.resource}: nothing (no event, no bookmark) for "
                    f"{idle:g} s: connection presumed dead, watching again"
                ) from None
            self._apply_line(line)

    def _apply_line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise MalformedResponse(f"watch {self.kind.resource}: event is not JSON") from exc
        if not isinstance(event, Mapping):
            raise MalformedResponse(f"watch {self.kind.resource}: event is not an object")
        etype = event.get("type")
        obj = event.get("object")
        if etype == "ERROR":
            raise error_from_status(0, obj, what=f"watch {self.kind.resource}")
        rv = _resource_version(obj)
        if etype == "BOOKMARK":
            self.stats.bookmarks += 1
            if rv is not None:
                self.resource_version = rv
            return
        if not isinstance(obj, Mapping) or etype not in ("ADDED", "MODIFIED", "DELETED"):
            raise MalformedResponse(f"watch {self.kind.resource}: unexpected event {etype!r}")
        self.stats.events += 1
        if self._observer is not None:
            self._observer.watch_event(self.kind.name, etype)
        key = object_key(obj)
        if key is None:
            self.stats.invalid_objects += 1
        elif etype == "DELETED":
            old = self._cache.pop(key, None)
            if old is not None:
                self._handler(key, old, None)
        else:
            self._apply_object(key, obj)
        if rv is not None:
            self.resource_version = rv

    def _apply_object(self, key: str, obj: Mapping[str, Any]) -> None:
        try:
            new = self.kind.convert(obj)
        except ValueError as exc:
            self.stats.invalid_objects += 1
            log(
                logger, logging.WARNING, "informer.invalid", kind=self.kind.name, key=key, error=exc
            )
            return
        old = self._cache.get(key)
        if old is not None and old == new:
            self.stats.dropped_unchanged += 1
            return
        self._cache[key] = new
        self._handler(key, old, new)


@dataclass(slots=True)
class InformerGroup:
    """Several informers whose combined state a source reports (synced, stale)."""

    informers: list[Informer[Any]] = field(default_factory=list)

    @property
    def synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    @property
    def stale(self) -> bool:
        return any(not i.connected for i in self.informers)
