"""The HTTP face of the simulator: kube-apiserver's REST protocol over aiohttp.

`ApiSimulator` serves the `Store` at `/api/v1/...` and `/apis/G/V/...` (namespaced and
cluster-wide paths, `/status` subresources, legacy `/watch/` paths), discovery, `/version`
and health endpoints; LIST with label/field selectors and limit/continue paging; WATCH
as a chunked stream of one JSON event per line (replay from a resourceVersion, 410 in the
stream when it is compacted, bookmarks, timeoutSeconds, selector transitions); POST,
PUT, PATCH (merge, JSON, strategic merge, a subset of server-side apply), DELETE and
DELETE on a collection; errors as Status objects with `Warning` headers; Tables for
`kubectl get`; `/openapi/v2` and `/openapi/v3`; custom resources of the CRDs in the store,
served in every version (the store validates them). Every event is serialized once and
the same bytes go to every watcher.

Test hooks, by name (other helpers rely on them):

* ``sim.url``, ``sim.write_kubeconfig(path)``, ``sim.store`` (direct, synchronous access
  that bypasses HTTP: ``create``, ``update``, ``update_status``, ``patch``, ``delete``,
  ``get``, ``list``, ``apply``),
* ``sim.compact()``: raise the watermark to the current resourceVersion (resumes get 410),
* ``sim.cut_watches()``: abort every watch connection (no terminating chunk),
* ``sim.fail_next(n, code=500)``: the next n resource requests get a Status error
  (429 also carries Retry-After),
* ``sim.request_log``: `RequestRecord(method, path, query, status)` per request (a
  watch is logged when it ends),
* ``sim.active_watches`` and ``await sim.wait_for_watches(n, exact=False)``,
* ``ApiSimulator(tls=True, token=...)``: HTTPS with a throw-away certificate
  (``sim.ca_cert``) and a required bearer token.

It must not be used for anything but tests, the lab and demos: there is no
authorization, admission, validation of built-in kinds, or persistence.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import contextlib
import json
import logging
import shutil
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from bgpd.logs import log
from bgpd.model import LabelSelector
from kbgpd_lab.apisim import discovery, openapi, tables
from kbgpd_lab.apisim.errors import ApiError, bad_request, expired, status_object
from kbgpd_lab.apisim.protobuf import ProtobufError, decode_object
from kbgpd_lab.apisim.resources import ResourceDef, ResourceTable
from kbgpd_lab.apisim.selectors import (
    FieldSelector,
    parse_field_selector,
    parse_label_selector,
)
from kbgpd_lab.apisim.store import (
    CRD_KEY,
    FieldValidation,
    Key,
    PatchType,
    Record,
    Store,
    WatchEvent,
    encode,
)
from kbgpd_lab.apisim.tls import SelfSigned, make_self_signed

_LOG = logging.getLogger("kbgpd_lab.apisim")
_JSON = "application/json"
_PATCH_TYPES: dict[str, PatchType] = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
}
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or "
    "deleted between the time the first chunk was returned and now may show up in the list."
)
#: Initial-event lines are written in batches of this many objects.
_WRITE_BATCH = 2000


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One served request, for tests that assert what a client asked."""

    method: str
    path: str
    query: str
    status: int


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool, which the apiserver uses for `watch=` and friends."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{text}": invalid syntax')


@dataclass(frozen=True, slots=True)
class _Target:
    """A parsed resource URL."""

    rd: ResourceDef
    namespace: str | None
    name: str | None
    subresource: str | None
    legacy_watch: bool


class _WatchResponse(web.StreamResponse):
    """The streamed answer to a watch (told apart for the request log)."""


class _Watch:
    """One open watch: a queue of committed events plus the connection to cut."""

    def __init__(
        self,
        target: _Target,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        request: web.Request,
    ) -> None:
        self.rd = target.rd
        self.namespace = target.namespace
        self.labels = labels
        self.fields = fields
        self.request = request
        self.pending: deque[WatchEvent] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.cut = False
        #: stall_watches(): send nothing more, not even the end (a dead load balancer).
        self.stalled = False
        # kubectl get --watch asks for Tables; then each event is printed for it alone.
        self.as_table = tables.wants_table(request.headers.get("Accept", ""))

    def on_event(self, event: WatchEvent) -> None:
        if event.resource.key != self.rd.key:
            if self.rd.crd and event.resource.key == CRD_KEY and event.type == "DELETED":
                self.wake.set()  # perhaps this watch's CRD: the stream checks and ends
            return
        if self.namespace is not None and event.key[0] != self.namespace:
            return
        self.pending.append(event)
        self.wake.set()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.labels is not None and not self.labels.matches(
            obj.get("metadata", {}).get("labels") or {}
        ):
            return False
        return self.fields is None or self.fields.matches(obj)

    def line(self, event: WatchEvent) -> bytes | None:
        """The line this watcher sees for `event`, with selector transitions."""
        event_type: str
        if self.labels is None and self.fields is None:
            event_type = event.type
        else:
            now = event.type != "DELETED" and self.matches(event.new.obj)
            before = event.old is not None and self.matches(event.old.obj)
            if now:
                event_type = "MODIFIED" if before else "ADDED"
            elif before:
                event_type = "DELETED"
            else:
                return None
        if not self.as_table:
            return self.rd.served_as(event.line(event_type))
        obj = json.loads(self.rd.served_as(event.line(event_type)))["object"]
        return self.table_line(event_type, obj)

    def initial_line(self, record: Record) -> bytes:
        if self.as_table:
            return self.table_line("ADDED", record.obj)
        return b'{"type":"ADDED","object":' + self.rd.served_as(record.json()) + b"}\n"

    def table_line(self, event_type: str, obj: Mapping[str, Any]) -> bytes:
        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
        doc = {"type": event_type, "object": tables.table(self.rd, [obj], meta)}
        return encode(doc) + b"\n"


class ApiSimulator:
    """An in-process kube-apiserver simulator; an async context manager.

    ``async with ApiSimulator(port=0) as sim:`` starts it on an ephemeral port;
    ``sim.url`` is where it listens.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        store: Store | None = None,
        table: ResourceTable | None = None,
        bookmark_interval: float = 60.0,
        token: str | None = None,
        tls: bool = False,
        history_size: int = 20_000,
        request_log_size: int = 100_000,
    ) -> None:
        self.host = host
        self.port = port
        self.store = store or Store(table, history_size=history_size)
        self.table = self.store.table
        self.bookmark_interval = bookmark_interval
        self.token = token
        self.tls = tls
        self._cert: SelfSigned | None = None
        self.request_log: deque[RequestRecord] = deque(maxlen=request_log_size)
        self._failures: deque[tuple[int, str]] = deque()
        self._watches: set[_Watch] = set()
        self._watch_change = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ApiSimulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a watch whose client went away ends at once (its task
        # is cancelled) instead of lingering until its next write fails.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=1.0,
            handler_cancellation=True,
        )
        await self._runner.setup()
        context = None
        if self.tls:
            # Valid for the address it listens on too (a lab's API address).
            self._cert = await asyncio.to_thread(make_self_signed, [self.host])
            context = self._cert.server_context()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context)
        await site.start()
        address = self._runner.addresses[0]
        self.port = int(address[1])
        log(_LOG, logging.INFO, "apisim.listening", url=self.url)

    async def stop(self) -> None:
        for watch in list(self._watches):
            watch.closed = True
            watch.wake.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._cert is not None:
            shutil.rmtree(self._cert.directory, ignore_errors=True)
            self._cert = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def ca_cert(self) -> Path | None:
        """With `tls=True`, the self-signed certificate to trust (also a CA)."""
        return None if self._cert is None else self._cert.cert

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig whose current context points at this simulator."""
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        cluster: dict[str, Any] = {"server": self.url}
        if self._cert is not None:
            ca = base64.b64encode(self._cert.cert.read_bytes()).decode()
            cluster["certificate-authority-data"] = ca
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "apisim", "cluster": cluster}],
            "users": [{"name": "apisim", "user": user}],
            "contexts": [
                {
                    "name": "apisim",
                    "context": {"cluster": "apisim", "user": "apisim", "namespace": namespace},
                }
            ],
            "current-context": "apisim",
            "preferences": {},
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    # ------------------------------------------------------------------ test hooks

    def compact(self) -> None:
        """Forget all history: a watch or paged list from any earlier RV gets 410."""
        self.store.compact()

    def cut_watches(self) -> int:
        """Abort every open watch connection, without a clean end; returns how many."""
        cut = 0
        for watch in list(self._watches):
            watch.closed = True
            watch.cut = True
            transport = watch.request.transport
            if transport is not None:
                transport.abort()
            watch.wake.set()
            cut += 1
        return cut

    def stall_watches(self) -> int:
        """Silence every open watch, as a dead load balancer or a dropped NAT entry does:
        the connection stays open but carries nothing more (no event, no BOOKMARK, no
        end) until the client gives up on it. Watches opened later are served normally.
        Returns how many were stalled."""
        for watch in self._watches:
            watch.stalled = True
        return len(self._watches)

    def fail_next(self, count: int, code: int = 500, *, message: str = "simulated failure") -> None:
        """The next `count` resource requests get a Status error with `code`."""
        self._failures.extend((code, message) for _ in range(count))

    def clear_failures(self) -> None:
        """Forget the failures fail_next() queued and not yet served."""
        self._failures.clear()

    @property
    def active_watches(self) -> int:
        return len(self._watches)

    async def wait_for_watches(
        self, count: int, within: float = 10.0, *, exact: bool = False
    ) -> None:
        """Wait until at least (`exact`: exactly) `count` watches are open.

        A test waits for the client's watch before writing, so the write is seen live;
        `wait_for_watches(0, exact=True)` waits until every watch has ended.
        """
        async with asyncio.timeout(within):
            while not (len(self._watches) == count if exact else len(self._watches) >= count):
                await self._watch_change.wait()

    # ------------------------------------------------------------------ dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            response = await self._dispatch(request)
        except ApiError as exc:
            response = _status_response(exc)
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log(_LOG, logging.ERROR, "apisim.handler_failed", path=request.path, error=repr(exc))
            response = _status_response(ApiError(500, f"simulator error: {exc!r}"))
        if not isinstance(response, _WatchResponse):  # a watch logs itself when it ends
            self._log_request(request, response.status)
        return response

    def _log_request(self, request: web.Request, status: int) -> None:
        self.request_log.append(
            RequestRecord(request.method, request.path, request.query_string, status)
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if self.token is not None and not _bearer_ok(request, self.token):
            raise ApiError(401, "Unauthorized")
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json(
                {
                    "paths": [
                        "/api",
                        "/api/v1",
                        "/apis",
                        "/healthz",
                        "/openapi/v2",
                        "/openapi/v3",
                        "/version",
                    ]
                }
            )
        if parts[0] == "openapi":
            return self._openapi(request, parts)
        if parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok", content_type="text/plain")
        if parts == ["version"]:
            return _json(discovery.VERSION_INFO)
        if parts[0] not in ("api", "apis"):
            raise ApiError(404, "the server could not find the requested resource")
        doc = self._discovery(parts)
        if doc is not None:
            if request.method != "GET":
                raise ApiError(405, f"{request.method} is not allowed on discovery documents")
            return _json(doc)
        target = self._target(parts)
        if self._failures:
            code, message = self._failures.popleft()
            headers = {"Retry-After": "1"} if code == 429 else None
            return _status_response(ApiError(code, message), headers=headers)
        return await self._resource(request, target)

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts == ["openapi", "v2"]:
            accept = request.headers.get("Accept", "")
            if openapi.V2_PROTOBUF in accept:
                # What client-go asks for: a document without definitions (see there).
                body = openapi.v2_protobuf()
                return web.Response(body=body, headers={"Content-Type": openapi.V2_PROTOBUF_SERVED})
            if not openapi.wants_json(accept):
                raise ApiError(406, "only JSON and protobuf are served for /openapi/v2")
            return _json(openapi.v2_document(self.table))
        if parts == ["openapi", "v3"]:
            return _json(openapi.v3_index(self.table))
        doc = openapi.v3_document(self.table, "/".join(parts[2:])) if len(parts) > 2 else None
        if doc is None:
            raise ApiError(404, "the server could not find the requested resource")
        return _json(doc)

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        if parts == ["api"]:
            return discovery.core_versions(f"{self.host}:{self.port}")
        if parts == ["apis"]:
            return discovery.group_list(self.table)
        if parts[0] == "api" and len(parts) == 2:
            doc = discovery.resource_list(self.table, "", parts[1])
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource")
            return doc
        if parts[0] == "apis" and len(parts) == 2:
            doc = discovery.group(self.table, parts[1])
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource")
            return doc
        if parts[0] == "apis" and len(parts) == 3:
            doc = discovery.resource_list(self.table, parts[1], parts[2])
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource")
            return doc
        return None

    def _target(self, parts: list[str]) -> _Target:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        legacy_watch = bool(rest) and rest[0] == "watch"
        if legacy_watch:
            rest = rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource")
        rd = self.table.by_path(group, version, rest[0])
        if rd is None or (namespace is not None and not rd.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (sub == "status" and rd.status_subresource):
            raise ApiError(404, "the server could not find the requested resource")
        return _Target(rd, namespace, name, sub, legacy_watch)

    async def _resource(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method = request.method
        q = request.query
        dry_run = "All" in q.getall("dryRun", [])
        validation = _field_validation(q.get("fieldValidation", ""))
        warnings: list[str] = []
        if t.name is None:
            if method == "GET":
                if t.legacy_watch or parse_bool(q.get("watch", "false") or "false"):
                    return await self._watch(request, t)
                return self._list(request, t)
            if method == "POST" and (not t.rd.namespaced or t.namespace is not None):
                body = await _body(request)
                created = self.store.create_record(
                    body,
                    namespace=t.namespace,
                    resource=t.rd,
                    reset_status=t.rd.create_resets_status,
                    dry_run=dry_run,
                    field_validation=validation,
                    warnings=warnings,
                )
                return _warned(_raw(t.rd.served_as(created.json()), status=201), warnings)
            if method == "DELETE":
                return self._delete_collection(request, t, dry_run=dry_run)
            raise ApiError(405, f"{method} is not supported on a collection")
        if t.legacy_watch and method == "GET":
            return await self._watch(request, t)
        if t.subresource is not None and method not in ("GET", "PUT", "PATCH"):
            raise ApiError(405, f"{method} is not supported on {t.rd.plural}/{t.subresource}")
        if method == "GET":
            record = self.store.get_record(t.rd, t.name, t.namespace)
            if tables.wants_table(request.headers.get("Accept", "")):
                meta = {"resourceVersion": str(record.rv)}
                return _json(tables.table(t.rd, [record.obj], meta))
            return _raw(t.rd.served_as(record.json()))
        if method == "PUT":
            body = await _body(request)
            updated = self.store.update_record(
                body,
                namespace=t.namespace,
                name=t.name,
                resource=t.rd,
                subresource=t.subresource,
                dry_run=dry_run,
                field_validation=validation,
                warnings=warnings,
            )
            return _warned(_raw(t.rd.served_as(updated.json())), warnings)
        if method == "PATCH":
            response = await self._patch(
                request, t, dry_run=dry_run, validation=validation, warnings=warnings
            )
            return _warned(response, warnings)
        if method == "DELETE":
            return await self._delete(request, t, dry_run=dry_run)
        raise ApiError(405, f"{method} is not supported")

    # ------------------------------------------------------------------ writes

    async def _patch(
        self,
        request: web.Request,
        t: _Target,
        *,
        dry_run: bool,
        validation: FieldValidation,
        warnings: list[str],
    ) -> web.Response:
        assert t.name is not None
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(_PATCH_TYPES)}",
            )
        if patch_type == "strategic" and t.rd.crd:
            # As for CRDs: they have no Go struct to carry the patch strategy.
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        text = await request.text()
        try:
            patch = yaml.safe_load(text) if patch_type == "apply" else json.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the patch is not valid {content_type}: {exc}") from exc
        if patch_type == "apply" and not request.query.get("fieldManager"):
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                "required for apply patch",
            )
        existed = self.store.get_record_or_none(t.rd, t.name, t.namespace) is not None
        patched = self.store.patch_record(
            t.rd,
            t.name,
            patch,
            namespace=t.namespace,
            patch_type=patch_type,
            subresource=t.subresource,
            dry_run=dry_run,
            field_validation=validation,
            warnings=warnings,
        )
        return _raw(t.rd.served_as(patched.json()), status=200 if existed else 201)

    async def _delete(self, request: web.Request, t: _Target, *, dry_run: bool) -> web.Response:
        assert t.name is not None
        options = await _body(request, required=False)
        pre = options.get("preconditions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        record, gone = self.store.delete_record(
            t.rd,
            t.name,
            t.namespace,
            precondition_rv=pre.get("resourceVersion"),
            precondition_uid=pre.get("uid"),
            dry_run=dry_run,
        )
        if gone and not t.rd.return_deleted_object:
            details = {
                "name": t.name,
                "group": t.rd.group,
                "kind": t.rd.plural,
                "uid": record.obj["metadata"]["uid"],
            }
            return _json(status_object(200, "", "", details))
        return _raw(t.rd.served_as(record.json()))

    def _delete_collection(
        self, request: web.Request, t: _Target, *, dry_run: bool
    ) -> web.Response:
        labels, fields = self._selectors(request, t.rd)
        records = self.store.records(t.rd)
        keys = [k for k in sorted(records) if t.namespace is None or k[0] == t.namespace]
        deleted: list[bytes] = []
        for key in keys:
            record = records.get(key)
            if record is None or not _selected(record.obj, labels, fields):
                continue
            gone, _ = self.store.delete_record(t.rd, key[1], key[0] or None, dry_run=dry_run)
            deleted.append(t.rd.served_as(gone.json()) if t.rd.crd else gone.item_json())
        return _raw(self._list_body(t.rd, str(self.store.resource_version), "", None, deleted))

    # ------------------------------------------------------------------ list

    def _selectors(
        self, request: web.Request, rd: ResourceDef
    ) -> tuple[LabelSelector | None, FieldSelector | None]:
        label_text = request.query.get("labelSelector", "")
        field_text = request.query.get("fieldSelector", "")
        labels = parse_label_selector(label_text) if label_text.strip() else None
        fields = (
            parse_field_selector(field_text, rd.selectable_fields) if field_text.strip() else None
        )
        return labels, fields

    def _list(self, request: web.Request, t: _Target) -> web.Response:
        q = request.query
        labels, fields = self._selectors(request, t.rd)
        limit = _int_param(q, "limit")
        start_after: Key | None = None
        token = q.get("continue", "")
        if token:
            list_rv, start_after = _decode_continue(token)
            try:
                records = self.store.snapshot_at(t.rd, list_rv)
            except ApiError as exc:
                raise expired(_CONTINUE_EXPIRED) from exc
        else:
            rv_text = q.get("resourceVersion", "")
            if rv_text and rv_text != "0" and q.get("resourceVersionMatch") == "Exact":
                list_rv = _int_text(rv_text, "resourceVersion")
                records = self.store.snapshot_at(t.rd, list_rv)
            else:
                list_rv = self.store.resource_version
                records = self.store.records(t.rd)
        # At the current resourceVersion the store's kept order serves every page;
        # an older snapshot (a page after a write) is sorted for itself.
        at_current = list_rv >= self.store.resource_version
        keys = self.store.sorted_keys(t.rd) if at_current else sorted(records)
        first = 0 if start_after is None else bisect.bisect_right(keys, start_after)
        if t.namespace is not None:
            keys = [k for k in keys[first:] if k[0] == t.namespace]
            first = 0
        selected: list[Record] = []
        next_key: Key | None = None
        last_key: Key | None = None
        remaining: int | None = None
        for i in range(first, len(keys)):
            key = keys[i]
            record = records[key]
            if not _selected(record.obj, labels, fields):
                continue
            if limit and len(selected) == limit:
                next_key = last_key
                if labels is None and fields is None:
                    remaining = len(keys) - i
                break
            selected.append(record)
            last_key = key
        cont = ""
        if next_key is not None:
            cont = _encode_continue(list_rv, next_key)
        if tables.wants_table(request.headers.get("Accept", "")):
            meta = _list_meta(str(list_rv), cont, remaining)
            return _json(tables.table(t.rd, [r.obj for r in selected], meta))
        items = [t.rd.served_as(r.json()) if t.rd.crd else r.item_json() for r in selected]
        return _raw(self._list_body(t.rd, str(list_rv), cont, remaining, items))

    @staticmethod
    def _list_body(
        rd: ResourceDef, rv: str, cont: str, remaining: int | None, items: list[bytes]
    ) -> bytes:
        meta = _list_meta(rv, cont, remaining)
        head = encode({"kind": rd.list_kind, "apiVersion": rd.api_version, "metadata": meta})
        return head[:-1] + b',"items":[' + b",".join(items) + b"]}"

    # ------------------------------------------------------------------ watch

    async def _watch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        q = request.query
        labels, fields = self._selectors(request, t.rd)
        if t.name is not None:
            # Legacy /watch/.../NAME paths watch one object.
            name_sel = parse_field_selector(f"metadata.name={t.name}", t.rd.selectable_fields)
            fields = FieldSelector((fields.requirements if fields else ()) + name_sel.requirements)
        timeout = _int_param(q, "timeoutSeconds")
        bookmarks = parse_bool(q.get("allowWatchBookmarks", "false") or "false")
        initial_events = parse_bool(q.get("sendInitialEvents", "false") or "false")
        rv_text = q.get("resourceVersion", "")
        watch = _Watch(t, labels, fields, request)

        # Everything from here to subscribe() is synchronous, so no write can slip
        # between the snapshot or replay and the live stream.
        initial: list[bytes] = []
        error: ApiError | None = None
        if not rv_text or rv_text == "0" or initial_events:
            records = self.store.records(t.rd)
            for key in sorted(records):
                if t.namespace is not None and key[0] != t.namespace:
                    continue
                record = records[key]
                if watch.matches(record.obj):
                    initial.append(watch.initial_line(record))
            if initial_events and bookmarks:
                initial.append(
                    self._bookmark(t.rd, self.store.resource_version, initial_events_end=True)
                )
        else:
            since = _int_text(rv_text, "resourceVersion")
            try:
                watch.pending.extend(
                    e for e in self.store.history_after(since) if e.resource.key == t.rd.key
                )
            except ApiError as exc:
                error = exc
        seen_rv = self.store.resource_version
        if error is None:
            self.store.subscribe(watch.on_event)
            self._watches.add(watch)
            self._notify_watch_change()

        response = _WatchResponse(status=200, headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if error is not None:
                await response.write(b'{"type":"ERROR","object":' + encode(error.status()) + b"}\n")
                await response.write_eof()
                return response
            for i in range(0, len(initial), _WRITE_BATCH):
                await response.write(b"".join(initial[i : i + _WRITE_BATCH]))
            await self._stream(watch, response, timeout, bookmarks, seen_rv)
        except (ConnectionResetError, ConnectionError):
            watch.closed = True
        finally:
            # A watch is logged when it ends, also when it ends by cancellation
            # (client gone); tests cut a watch to read its query from the log.
            self._log_request(request, response.status)
            self.store.unsubscribe(watch.on_event)
            self._watches.discard(watch)
            self._notify_watch_change()
        return response

    async def _stream(
        self,
        watch: _Watch,
        response: web.StreamResponse,
        timeout_seconds: int,
        bookmarks: bool,
        seen_rv: int,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds if timeout_seconds else None
        next_bookmark = self._next_bookmark(loop.time(), deadline) if bookmarks else None
        while not watch.closed:
            if watch.stalled:
                # Silent until the client closes the connection (checked twice a second:
                # nothing is written that would tell us sooner).
                transport = watch.request.transport
                if transport is None or transport.is_closing():
                    watch.cut = True
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await watch.wake.wait()
                watch.wake.clear()
                continue
            if watch.pending:
                lines: list[bytes] = []
                while watch.pending:
                    line = watch.line(watch.pending.popleft())
                    if line is not None:
                        lines.append(line)
                # All events up to here were handed to this watch synchronously.
                seen_rv = self.store.resource_version
                watch.wake.clear()
                if lines:
                    await response.write(b"".join(lines))
                continue
            if self._unserved(watch.rd):
                break  # its CRD was deleted: the apiserver ends these watches
            now = loop.time()
            if deadline is not None and now >= deadline:
                break
            if next_bookmark is not None and now >= next_bookmark:
                await response.write(self._bookmark(watch.rd, seen_rv))
                next_bookmark = self._next_bookmark(now, deadline)
                continue
            waits = [t for t in (deadline, next_bookmark) if t is not None]
            wait = min(waits) - now if waits else None
            watch.wake.clear()
            if watch.pending or watch.closed:
                continue
            try:
                async with asyncio.timeout(wait):
                    await watch.wake.wait()
            except TimeoutError:
                pass
            if not watch.pending:
                seen_rv = self.store.resource_version
        if watch.cut:
            return
        await response.write_eof()

    def _unserved(self, rd: ResourceDef) -> bool:
        return rd.crd and self.table.by_path(rd.group, rd.version, rd.plural) is None

    def _next_bookmark(self, now: float, deadline: float | None) -> float | None:
        """When to send the next bookmark, as the apiserver's cacheWatcher schedules it.

        Every `bookmark_interval`, and also 2 s before the watch's timeout so the client
        resumes from a fresh resourceVersion; none if that moment has already passed.
        """
        when = now + self.bookmark_interval
        if deadline is not None:
            when = min(when, deadline - 2.0)
        return when if when > now else None

    @staticmethod
    def _bookmark(rd: ResourceDef, rv: int, *, initial_events_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": rd.kind, "apiVersion": rd.api_version, "metadata": meta}
        return b'{"type":"BOOKMARK","object":' + encode(obj) + b"}\n"

    def _notify_watch_change(self) -> None:
        # Wake every waiter, then arm a fresh event for the next change.
        self._watch_change.set()
        self._watch_change = asyncio.Event()


# ---------------------------------------------------------------------- helpers


def _selected(
    obj: Mapping[str, Any], labels: LabelSelector | None, fields: FieldSelector | None
) -> bool:
    if labels is not None and not labels.matches(obj.get("metadata", {}).get("labels") or {}):
        return False
    return fields is None or fields.matches(obj)


def _field_validation(text: str) -> FieldValidation:
    """The `fieldValidation` query parameter (default Warn, as kube-apiserver's)."""
    if text in ("", "Warn"):
        return "Warn"
    if text == "Strict":
        return "Strict"
    if text == "Ignore":
        return "Ignore"
    raise bad_request(
        f'fieldValidation: Unsupported value: "{text}": supported values: "Ignore", "Strict", '
        '"Warn"'
    )


def _warned(response: web.Response, warnings: list[str]) -> web.Response:
    """Add one `Warning: 299 - "text"` header per warning (RFC 7234, as the apiserver)."""
    for text in warnings:
        response.headers.add("Warning", "299 - " + json.dumps(text, ensure_ascii=False))
    return response


def _bearer_ok(request: web.Request, token: str) -> bool:
    # The scheme is case-insensitive (the in-cluster loader sends "bearer ").
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and value.strip() == token


def _list_meta(rv: str, cont: str, remaining: int | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return meta


def _json(doc: Any, status: int = 200) -> web.Response:
    return _raw(encode(doc), status)


def _raw(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=_JSON)


def _status_response(exc: ApiError, headers: Mapping[str, str] | None = None) -> web.Response:
    response = _json(exc.status(), status=exc.code)
    if headers:
        response.headers.update(headers)
    return response


async def _body(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    content_type = request.headers.get("Content-Type", _JSON).split(";")[0].strip()
    if content_type == "application/vnd.kubernetes.protobuf":
        # kubectl's `create namespace|configmap|secret` generators encode protobuf.
        try:
            return decode_object(await request.read())
        except ProtobufError as exc:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json, application/yaml ({exc})",
            ) from exc
    if "protobuf" in content_type or "cbor" in content_type:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types "
            f"include: application/json, application/yaml (got {content_type})",
        )
    text = await request.text()
    if not text.strip():
        if required:
            raise bad_request("the request has no body")
        return {}
    try:
        doc = yaml.safe_load(text) if "yaml" in content_type else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"the body of the request is not valid {content_type}: {exc}") from exc
    if not isinstance(doc, dict):
        raise bad_request("the body of the request was not a JSON object")
    return doc


def _int_text(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise bad_request(f"invalid {name}: {text!r}") from exc
    if value < 0:
        raise bad_request(f"invalid {name}: {text!r}")
    return value


def _int_param(q: Mapping[str, str], name: str) -> int:
    text = q.get(name, "")
    return _int_text(text, name) if text else 0


def _encode_continue(rv: int, after: Key) -> str:
    raw = json.dumps({"v": "apisim/1", "rv": rv, "start": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, Key]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv = int(doc["rv"])
        ns, name = doc["start"]
        return rv, (str(ns), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc


__all__ = ["ApiSimulator", "RequestRecord", "parse_bool"]
