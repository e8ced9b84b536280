"""The simulator's object store: etcd plus the generic registry of kube-apiserver, in memory.

One global, monotonically increasing resourceVersion (as etcd's revision) is stamped on
every write together with uid, creationTimestamp and generation; every write appends a
`WatchEvent` to a history list that watches replay from. History below the compaction
watermark is gone: a watch or a paged list asking for it gets 410 Expired, as after an
etcd compaction. No-op writes neither bump the resourceVersion nor emit an event.
Deletes honour finalizers (deletionTimestamp first; the object goes when the last
finalizer is removed). Writes to the main resource keep `.status` for kinds with a status
subresource; status writes change only `.status`.

It is also apiextensions-apiserver: writing a CustomResourceDefinition registers the
resources it serves in the table (deleting it deletes their objects first), and every
write of a custom resource is pruned, defaulted and validated against its version's
structural schema (`kbgpd_lab.apisim.schema`); objects are stored in the storage version.

The store is synchronous and single-threaded: it must be used from the event loop that
runs the simulator (the threaded helper marshals calls into it), and subscribers are
called synchronously inside the write. It knows nothing about HTTP.

Public names other helpers use: `Store.create`, `update`, `update_status`, `patch`,
`delete`, `get`, `list`, `apply`, `compact`, `subscribe`, `resource_version`,
`watermark` (dicts in, copies out). The server uses the `*_record` variants, which answer
with the stored `Record` so its cached encoding goes out as is.
"""

from __future__ import annotations

import bisect
import json
import random
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from kbgpd_lab.apisim import crds, defaults, schema
from kbgpd_lab.apisim.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    invalid_fields,
    not_found,
)
from kbgpd_lab.apisim.patch import PatchError, clone, json_patch, merge_patch, strategic_merge
from kbgpd_lab.apisim.resources import ResourceDef, ResourceTable

Obj = dict[str, Any]
Key = tuple[str, str]
PatchType = Literal["merge", "strategic", "json", "apply"]
#: The `fieldValidation` query parameter: what to do with fields the schema does not
#: know (they are pruned either way): nothing, a warning, or refuse the write (400).
FieldValidation = Literal["Ignore", "Warn", "Strict"]
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
#: A custom resource's name is a DNS subdomain (apimachinery's IsDNS1123Subdomain).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
#: Where a write appends the warnings it has for the client (the Warning headers).
Warnings = list[str]

_ENC = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# Names from generateName use the apiserver's alphabet (no vowels, no confusable digits).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def encode(doc: Any) -> bytes:
    return _ENC.encode(doc).encode()


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class Record:
    """One stored version of an object. `obj` is never mutated once stored.

    The JSON encodings are computed once and shared by every list and watch that sends
    this version, so fan-out to many watchers costs one serialization per event.
    """

    obj: Obj
    rv: int
    _json: bytes | None = None
    _item_json: bytes | None = None

    def json(self) -> bytes:
        if self._json is None:
            self._json = encode(self.obj)
        return self._json

    def item_json(self) -> bytes:
        """The encoding inside a list: kube-apiserver omits kind/apiVersion in items."""
        if self._item_json is None:
            self._item_json = encode(
                {k: v for k, v in self.obj.items() if k not in ("kind", "apiVersion")}
            )
        return self._item_json

    def copy(self) -> Obj:
        return json.loads(self.json())  # type: ignore[no-any-return]


@dataclass(slots=True)
class WatchEvent:
    """One committed change; `old` is the previous version (None when created)."""

    rv: int
    resource: ResourceDef
    key: Key
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    new: Record
    old: Record | None
    _prior: bytes | None = None

    def line(self, event_type: str) -> bytes:
        """The watch-stream line for this event as seen with `event_type`.

        The object's encoding is the record's, made once for all watchers (and the
        write's HTTP answer); only the framing is added per watcher. A watcher whose
        selector the object leaves sees DELETED with the previous content at this
        event's resourceVersion (as the apiserver's watch cache does).
        """
        if event_type == "DELETED" and self.type != "DELETED" and self.old is not None:
            if self._prior is None:
                prior = clone(self.old.obj)
                prior["metadata"]["resourceVersion"] = str(self.rv)
                self._prior = encode(prior)
            body = self._prior
        else:
            body = self.new.json()
        return _EVENT_PREFIX[event_type] + body + b"}\n"


_EVENT_PREFIX = {
    t: b'{"type":"' + t.encode() + b'","object":' for t in ("ADDED", "MODIFIED", "DELETED")
}

Subscriber = Callable[[WatchEvent], None]


class Store:
    """All objects of all served kinds, their history, and the subscribers to changes."""

    def __init__(
        self,
        table: ResourceTable | None = None,
        *,
        start_resource_version: int = 1000,
        history_size: int = 20_000,
        seed_namespaces: tuple[str, ...] = (
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
        ),
    ) -> None:
        if start_resource_version < 1:
            raise ValueError("the resourceVersion must start above 0")
        self.table = table or ResourceTable()
        self._rv = start_resource_version
        self._watermark = start_resource_version
        self._history: list[WatchEvent] = []
        self._history_size = history_size
        self._objects: dict[str, dict[Key, Record]] = {r.key: {} for r in self.table.resources}
        #: Each kind's keys in order, kept until a key is added or removed (sorted_keys).
        self._sorted_keys: dict[str, list[Key]] = {}
        self._subscribers: list[Subscriber] = []
        #: The garbage collector's graph: owner uid -> its dependents (_collect_garbage).
        self._dependents: dict[str, set[tuple[str, Key]]] = {}
        #: The uid of every stored object (owners looked up by uid).
        self._uids: set[str] = set()
        self._allocator = defaults.Allocator()
        namespaces = self.table.by_name("namespaces")
        if namespaces is not None:
            for ns in seed_namespaces:
                self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ------------------------------------------------------------------ state

    @property
    def resource_version(self) -> int:
        """The resourceVersion of the last write (etcd's current revision)."""
        return self._rv

    @property
    def watermark(self) -> int:
        """Watches and paged lists from a resourceVersion below this get 410 Expired."""
        return self._watermark

    def compact(self, resource_version: int | None = None) -> None:
        """Forget history up to `resource_version` (default: everything so far)."""
        target = self._rv if resource_version is None else min(resource_version, self._rv)
        if target <= self._watermark:
            return
        self._watermark = target
        cut = bisect.bisect_right(self._history, target, key=lambda e: e.rv)
        del self._history[:cut]

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def resolve(self, resource: str | ResourceDef) -> ResourceDef:
        if isinstance(resource, ResourceDef):
            return resource
        rd = self.table.by_name(resource)
        if rd is None:
            raise ApiError(404, f"the server doesn't have a resource type {resource!r}")
        return rd

    def records(self, rd: ResourceDef) -> dict[Key, Record]:
        """The live records of one kind (read-only view for the server)."""
        return self._objects.setdefault(rd.key, {})

    def sorted_keys(self, rd: ResourceDef) -> list[Key]:
        """The live records' keys of one kind in order (read-only: the server pages
        through it). Kept until an object of the kind is created or deleted, as the
        apiserver's watch cache keeps its index, so a paged LIST of N objects does not
        sort N keys for every page."""
        keys = self._sorted_keys.get(rd.key)
        if keys is None:
            keys = self._sorted_keys[rd.key] = sorted(self.records(rd))
        return keys

    def history_after(self, resource_version: int) -> Iterator[WatchEvent]:
        """Events with a resourceVersion above `resource_version`; 410 if compacted."""
        if resource_version < self._watermark:
            raise too_old(resource_version, self._watermark)
        start = bisect.bisect_right(self._history, resource_version, key=lambda e: e.rv)
        return iter(self._history[start:])

    def snapshot_at(self, rd: ResourceDef, resource_version: int) -> dict[Key, Record]:
        """The records of one kind as they were at `resource_version` (410 if compacted)."""
        state = dict(self._objects[rd.key])
        if resource_version >= self._rv:
            return state
        if resource_version < self._watermark:
            raise too_old(resource_version, self._watermark)
        start = bisect.bisect_right(self._history, resource_version, key=lambda e: e.rv)
        for event in reversed(self._history[start:]):
            if event.resource.key != rd.key:
                continue
            if event.old is None:
                state.pop(event.key, None)
            else:
                state[event.key] = event.old
        return state

    # ------------------------------------------------------------------ reads

    def get(
        self, resource: str | ResourceDef, name: str, namespace: str | None = None
    ) -> Obj | None:
        """A copy of the object, or None."""
        rd = self.resolve(resource)
        record = self._objects[rd.key].get(self._key(rd, name, namespace))
        return None if record is None else record.copy()

    def get_record_or_none(
        self, rd: ResourceDef, name: str, namespace: str | None
    ) -> Record | None:
        return self._objects[rd.key].get(self._key(rd, name, namespace))

    def get_record(self, rd: ResourceDef, name: str, namespace: str | None) -> Record:
        record = self._objects[rd.key].get(self._key(rd, name, namespace))
        if record is None:
            raise not_found(rd.plural, rd.group, name)
        return record

    def list(self, resource: str | ResourceDef, namespace: str | None = None) -> list[Obj]:
        """Copies of all objects of a kind (of one namespace if given), in key order."""
        rd = self.resolve(resource)
        records = self._objects[rd.key]
        return [
            records[k].copy() for k in sorted(records) if namespace is None or k[0] == namespace
        ]

    # ------------------------------------------------------------------ writes

    def create(
        self,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        resource: ResourceDef | None = None,
        reset_status: bool = False,
        dry_run: bool = False,
    ) -> Obj:
        """Create an object; its apiVersion/kind pick the resource unless given."""
        return self.create_record(
            obj, namespace=namespace, resource=resource, reset_status=reset_status, dry_run=dry_run
        ).copy()

    def create_record(
        self,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        resource: ResourceDef | None = None,
        reset_status: bool = False,
        dry_run: bool = False,
        field_validation: FieldValidation = "Warn",
        warnings: Warnings | None = None,
    ) -> Record:
        """`create`, answering with the stored record (the server sends its cached JSON).

        Unknown fields of a custom resource are pruned; with `field_validation` "Warn"
        their names are appended to `warnings`, with "Strict" the write is refused.
        """
        rd = resource or self._resource_of(obj)
        new = self._checked_body(rd, obj, namespace)
        meta = new["metadata"]
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(
                    rd.kind,
                    rd.group,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                )
            meta["name"] = prefix + "".join(random.choices(_NAME_ALPHABET, k=5))  # noqa: S311
        key = self._key(rd, meta["name"], meta.get("namespace"))
        if key in self._objects[rd.key]:
            raise already_exists(rd.plural, rd.group, meta["name"])
        if rd.status_subresource and reset_status:
            new.pop("status", None)
        for server_owned in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(server_owned, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rd.has_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        defaults.apply(rd, new, None, self._allocator)
        self._admit(rd, new, None, field_validation, warnings, verb="create")
        record = self._commit(rd, key, new, None, dry_run=dry_run)
        if rd.key == CRD_KEY and not dry_run:
            self._serve_crd(record.obj)
        return record

    def update(
        self,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        resource: ResourceDef | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Replace an object (PUT). A set resourceVersion must match (else 409)."""
        return self.update_record(
            obj,
            namespace=namespace,
            name=name,
            resource=resource,
            subresource=subresource,
            dry_run=dry_run,
        ).copy()

    def update_record(
        self,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        resource: ResourceDef | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation = "Warn",
        warnings: Warnings | None = None,
    ) -> Record:
        """`update`, answering with the stored record."""
        rd = resource or self._resource_of(obj)
        body = self._checked_body(rd, obj, namespace)
        meta = body["metadata"]
        if name is not None and meta.get("name") and meta["name"] != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the "
                f"URL ({name})"
            )
        name = name or meta.get("name")
        if not name:
            raise invalid(rd.kind, rd.group, "", "metadata.name: Required value: name is required")
        key = self._key(rd, name, meta.get("namespace"))
        old = self._objects[rd.key].get(key)
        if old is None:
            raise not_found(rd.plural, rd.group, name)
        rv = meta.get("resourceVersion")
        if rv and rv != str(old.rv):
            raise conflict(rd.plural, rd.group, name)
        uid = meta.get("uid")
        if uid and uid != old.obj["metadata"]["uid"]:
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {old.obj['metadata']['uid']}, "
                f"UID in object meta: {uid}",
                reason="Conflict",
                name=name,
                group=rd.group,
                kind=rd.plural,
            )
        return self._replace(
            rd,
            key,
            old,
            body,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
            warnings=warnings,
        )

    def update_status(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> Obj:
        """PUT on the status subresource: only `.status` changes."""
        return self.update(obj, namespace=namespace, subresource="status")

    def patch(
        self,
        resource: str | ResourceDef,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Apply a merge, strategic-merge, JSON or apply patch to the stored object.

        `apply` is a subset of server-side apply: the applied configuration is merged
        strategically into the object (created if absent); there is no field ownership,
        so nothing is removed and there are no conflicts.
        """
        return self.patch_record(
            resource,
            name,
            patch,
            namespace=namespace,
            patch_type=patch_type,
            subresource=subresource,
            dry_run=dry_run,
        ).copy()

    def patch_record(
        self,
        resource: str | ResourceDef,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation = "Warn",
        warnings: Warnings | None = None,
    ) -> Record:
        """`patch`, answering with the stored record."""
        rd = self.resolve(resource)
        key = self._key(rd, name, namespace)
        old = self._objects[rd.key].get(key)
        if old is None:
            if patch_type != "apply":
                raise not_found(rd.plural, rd.group, name)
            if not isinstance(patch, dict):
                raise bad_request("apply patch must be an object")
            body = dict(patch)
            body.setdefault("metadata", {})
            if body["metadata"].get("name", name) != name:
                raise bad_request("the name of the object does not match the name on the URL")
            body["metadata"] = {**body["metadata"], "name": name}
            return self.create_record(
                body,
                namespace=namespace,
                resource=rd,
                dry_run=dry_run,
                field_validation=field_validation,
                warnings=warnings,
            )
        base = old.copy()
        # The patch applies to the object as the requested version serves it.
        base["apiVersion"] = rd.api_version
        try:
            if patch_type == "merge":
                patched = merge_patch(base, patch)
            elif patch_type == "json":
                patched = json_patch(base, patch)
            else:
                patched = strategic_merge(base, patch, rd.merge_keys)
        except PatchError as exc:
            raise ApiError(exc.code, str(exc)) from exc
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise ApiError(422, "the patch result is not an object with metadata")
        patched_meta = patched["metadata"]
        if patched_meta.get("name") != name:
            raise bad_request("the patch may not change metadata.name")
        if patched_meta.get("resourceVersion", str(old.rv)) != str(old.rv):
            # A patch that carries a resourceVersion is a precondition (kubectl uses it).
            raise conflict(rd.plural, rd.group, name)
        body = self._checked_body(rd, patched, namespace, owned=True)
        return self._replace(
            rd,
            key,
            old,
            body,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
            warnings=warnings,
        )

    def apply(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> Obj:
        """Create the object, or replace it unconditionally if it exists (for seeding)."""
        rd = self._resource_of(obj)
        meta = obj.get("metadata") or {}
        key = self._key(rd, str(meta.get("name", "")), namespace or meta.get("namespace"))
        if key in self._objects[rd.key]:
            body = clone(obj)
            body["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
            updated = self.update(body, namespace=namespace)
            if rd.status_subresource and "status" in obj:
                updated["status"] = obj["status"]
                updated = self.update_status(updated, namespace=namespace)
            return updated
        return self.create(obj, namespace=namespace)

    def delete(
        self,
        resource: str | ResourceDef,
        name: str,
        namespace: str | None = None,
        *,
        precondition_rv: str | None = None,
        precondition_uid: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete; returns (object, gone). With finalizers only deletionTimestamp is set."""
        record, gone = self.delete_record(
            resource,
            name,
            namespace,
            precondition_rv=precondition_rv,
            precondition_uid=precondition_uid,
            dry_run=dry_run,
        )
        return record.copy(), gone

    def delete_record(
        self,
        resource: str | ResourceDef,
        name: str,
        namespace: str | None = None,
        *,
        precondition_rv: str | None = None,
        precondition_uid: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Record, bool]:
        """`delete`, answering with the last record."""
        rd = self.resolve(resource)
        key = self._key(rd, name, namespace)
        old = self._objects[rd.key].get(key)
        if old is None:
            raise not_found(rd.plural, rd.group, name)
        if precondition_rv and precondition_rv != str(old.rv):
            raise conflict(rd.plural, rd.group, name)
        if precondition_uid and precondition_uid != old.obj["metadata"]["uid"]:
            raise conflict(rd.plural, rd.group, name)
        meta = old.obj["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old, False
            new = old.copy()
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if rd.has_generation:
                new["metadata"]["generation"] = meta.get("generation", 1) + 1
            return self._commit(rd, key, new, old, dry_run=dry_run), False
        if rd.key == CRD_KEY and not dry_run:
            self._unserve_crd(old.obj)
        record = self._commit(rd, key, None, old, dry_run=dry_run)
        if rd.plural == "namespaces" and not rd.group and not dry_run:
            self._delete_namespace_contents(name)
        return record, True

    # ------------------------------------------------------------------ internals

    def _admit(
        self,
        rd: ResourceDef,
        new: Obj,
        old: Obj | None,
        field_validation: FieldValidation,
        warnings: Warnings | None,
        *,
        verb: str,
    ) -> None:
        """What the apiextensions-apiserver does to a body before storing it.

        A CRD gets its defaults, checks and status; a custom resource with a schema is
        pruned (unknown fields: a warning or, Strict, 400), defaulted and validated
        (422 with one cause per field error).
        """
        name = str(new["metadata"].get("name", ""))
        if rd.key == CRD_KEY:
            crds.prepare(new)
            errors = crds.check(new)
            if errors:
                raise invalid_fields(rd.kind, rd.group, name, errors)
            new["status"] = crds.status(new, (old or {}).get("status"), now_rfc3339())
            return
        if rd.crd and not _DNS_SUBDOMAIN.fullmatch(name):
            raise invalid_fields(
                rd.kind,
                rd.group,
                name,
                [schema.FieldError("Invalid value", "metadata.name", name, _DNS_SUBDOMAIN_MESSAGE)],
            )
        if rd.schema is None:
            return
        schema.drop_nulls(new, rd.schema)
        unknown = schema.prune(new, rd.schema)
        if unknown and field_validation == "Strict":
            text = ", ".join(f'unknown field "{path}"' for path in unknown)
            prefix = (
                f'{rd.kind} in version "{rd.version}" cannot be handled as a {rd.kind}: '
                if verb == "create"
                else ""
            )
            raise bad_request(f"{prefix}strict decoding error: {text}")
        if unknown and field_validation == "Warn" and warnings is not None:
            warnings.extend(f'unknown field "{path}"' for path in unknown)
        schema.apply_defaults(new, rd.schema)
        errors = schema.validate(new, rd.schema)
        if errors:
            raise invalid_fields(rd.kind, rd.group, name, errors)

    def _serve_crd(self, crd: Mapping[str, Any]) -> None:
        """Register (or re-register) the resources a stored CRD serves.

        The apiserver applies schema defaults when it reads an object from etcd, so an
        object stored before its CRD gained a default is read with it. Here the stored
        objects get the storage version's defaults when the CRD is written (same
        resourceVersion, no event: nothing was written), which reads the same.
        """
        defs = crds.resource_defs(crd)
        if not defs:
            return
        self.table.register(defs)
        records = self._objects.setdefault(defs[0].key, {})
        storage = crds.storage_schema(crd)
        for key, record in list(records.items()):
            obj = record.copy()
            schema.apply_defaults(obj, storage)
            if obj != record.obj:
                records[key] = Record(_ordered(obj), record.rv)

    def _unserve_crd(self, crd: Mapping[str, Any]) -> None:
        """Delete every object of a CRD's resource (DELETED events), then stop serving it.

        The apiserver's CRD finalizer does the same before the CRD goes.
        """
        spec = crd.get("spec") or {}
        key = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        rd = next((r for r in self.table.resources if r.crd and r.key == key), None)
        if rd is not None:
            for obj_key in sorted(self._objects.get(key, {})):
                # The garbage collector may have taken it with an owner already.
                if (record := self._objects[key].get(obj_key)) is not None:
                    self._commit(rd, obj_key, None, record)
        self.table.unregister(key)
        self._objects.pop(key, None)
        self._sorted_keys.pop(key, None)

    def _delete_namespace_contents(self, namespace: str) -> None:
        # The namespace controller's job, done at once: nothing lives in a deleted namespace.
        for rd in self.table.resources:
            if not rd.namespaced:
                continue
            for key in [k for k in self._objects[rd.key] if k[0] == namespace]:
                # The garbage collector may have taken it with an owner already.
                if (record := self._objects[rd.key].get(key)) is not None:
                    self._commit(rd, key, None, record)

    def _replace(
        self,
        rd: ResourceDef,
        key: Key,
        old: Record,
        body: Obj,
        *,
        subresource: str | None,
        dry_run: bool,
        field_validation: FieldValidation = "Warn",
        warnings: Warnings | None = None,
    ) -> Record:
        old_obj = old.obj
        if subresource == "status":
            if not rd.status_subresource:
                raise not_found(f"{rd.plural}/status", rd.group, key[1])
            new = clone(old_obj)
            if "status" in body:
                new["status"] = body["status"]
            else:
                new.pop("status", None)
        elif subresource is not None:
            raise not_found(f"{rd.plural}/{subresource}", rd.group, key[1])
        else:
            new = body
            if rd.status_subresource:
                if "status" in old_obj:
                    new["status"] = clone(old_obj["status"])
                else:
                    new.pop("status", None)
            meta = new["metadata"]
            old_meta = old_obj["metadata"]
            for owned in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if owned in old_meta:
                    meta[owned] = old_meta[owned]
                else:
                    meta.pop(owned, None)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    raise invalid(
                        rd.kind,
                        rd.group,
                        key[1],
                        "metadata.finalizers: Forbidden: no new finalizers can be added if "
                        "the object is being deleted",
                    )
            defaults.apply(rd, new, old_obj, self._allocator)
        self._admit(rd, new, old_obj, field_validation, warnings, verb="update")
        spec_changed = _spec_part(rd, new) != _spec_part(rd, old_obj)
        if subresource is None and rd.has_generation and spec_changed:
            new["metadata"]["generation"] = old_obj["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = str(old.rv)
        if new == old_obj:
            return old
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(rd, key, new, old, delete=True, dry_run=dry_run)
        record = self._commit(rd, key, new, old, dry_run=dry_run)
        if rd.key == CRD_KEY and not dry_run:
            self._serve_crd(record.obj)
        return record

    def _commit(
        self,
        rd: ResourceDef,
        key: Key,
        new: Obj | None,
        old: Record | None,
        *,
        delete: bool = False,
        dry_run: bool = False,
    ) -> Record:
        """Write one change: bump the resourceVersion, record history, notify.

        A delete passes `new=None` (the object goes as it was) or its final content
        (an update that removed the last finalizer).
        """
        rv = self._rv + 1
        if new is None or delete:
            assert old is not None
            gone = clone(old.obj) if new is None else new
            gone["metadata"]["resourceVersion"] = str(rv)
            record = Record(_ordered(gone), rv)
            kind: Literal["ADDED", "MODIFIED", "DELETED"] = "DELETED"
        else:
            new["metadata"]["resourceVersion"] = str(rv)
            record = Record(_ordered(new), rv)
            kind = "ADDED" if old is None else "MODIFIED"
        if dry_run:
            record.obj["metadata"]["resourceVersion"] = "" if old is None else str(old.rv)
            return record
        self._rv = rv
        if kind != "MODIFIED":
            self._sorted_keys.pop(rd.key, None)
        if kind == "DELETED":
            del self._objects[rd.key][key]
        else:
            self._objects[rd.key][key] = record
        self._track_owners(
            rd, key, None if old is None else old.obj, None if kind == "DELETED" else record.obj
        )
        event = WatchEvent(rv, rd, key, kind, record, old)
        self._history.append(event)
        if len(self._history) > self._history_size + max(1, self._history_size // 10):
            # Full: the oldest events go, as an etcd compaction would take them. Trimmed
            # in batches so a busy store does not shift the whole list on every write.
            drop = len(self._history) - self._history_size
            self._watermark = max(self._watermark, self._history[drop - 1].rv)
            del self._history[:drop]
        for subscriber in list(self._subscribers):
            subscriber(event)
        uid = str(record.obj["metadata"].get("uid", ""))
        if kind == "DELETED":
            self._uids.discard(uid)
            self._collect_garbage(uid)
        elif kind == "ADDED":
            self._uids.add(uid)
            refs = record.obj["metadata"].get("ownerReferences") or ()
            if refs and not any(self._owner_exists(r) for r in refs):
                # Created with owners that are all gone: the collector deletes it.
                namespace, name = key
                self.delete_record(rd, name, namespace or None)
        return record

    def _track_owners(self, rd: ResourceDef, key: Key, old: Obj | None, new: Obj | None) -> None:
        """Keep the owner -> dependents index of metadata.ownerReferences up to date."""
        for obj, add in ((old, False), (new, True)):
            for ref in (obj or {}).get("metadata", {}).get("ownerReferences") or ():
                uid = ref.get("uid") if isinstance(ref, dict) else None
                if not isinstance(uid, str) or not uid:
                    continue
                if add:
                    self._dependents.setdefault(uid, set()).add((rd.key, key))
                elif uid in self._dependents:
                    self._dependents[uid].discard((rd.key, key))
                    if not self._dependents[uid]:
                        del self._dependents[uid]

    def _collect_garbage(self, uid: str) -> None:
        """The garbage collector's background cascade, done at once: an object whose
        owners (by uid) are all gone is deleted (finalizers honoured, as a DELETE)."""
        for rd_key, key in sorted(self._dependents.pop(uid, ())):
            record = self._objects.get(rd_key, {}).get(key)
            if record is None:
                continue
            refs = record.obj["metadata"].get("ownerReferences") or ()
            if any(self._owner_exists(r) for r in refs if r.get("uid") != uid):
                continue
            rd = next(r for r in self.table.resources if r.key == rd_key)
            namespace, name = key
            self.delete_record(rd, name, namespace or None)

    def _owner_exists(self, ref: Mapping[str, Any]) -> bool:
        return ref.get("uid") in self._uids

    def _resource_of(self, obj: Mapping[str, Any]) -> ResourceDef:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            raise bad_request("Object 'Kind' is missing or apiVersion is not set")
        rd = self.table.by_kind(api_version, kind)
        if rd is None:
            raise ApiError(404, f'no matches for kind "{kind}" in version "{api_version}"')
        return rd

    def _checked_body(
        self, rd: ResourceDef, obj: Mapping[str, Any], namespace: str | None, *, owned: bool = False
    ) -> Obj:
        """A checked copy of a request body (`owned`: the caller's dict may be kept)."""
        if not isinstance(obj, Mapping):
            raise bad_request("the body of the request was not a JSON object")
        body: Obj = obj if owned and isinstance(obj, dict) else clone(obj)
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if (api_version and api_version != rd.api_version) or (kind and kind != rd.kind):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rd.api_version})"
                if api_version != rd.api_version
                else f"the kind in the data ({kind}) does not match the expected kind ({rd.kind})"
            )
        body["apiVersion"] = rd.storage_api_version
        body["kind"] = rd.kind
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rd.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        meta.pop("managedFields", None)
        return body

    def _key(self, rd: ResourceDef, name: str, namespace: str | None) -> Key:
        return ((namespace or "default") if rd.namespaced else "", name)


def too_old(asked: int, watermark: int) -> ApiError:
    return expired(f"too old resource version: {asked} ({watermark})")


def _spec_part(rd: ResourceDef, obj: Mapping[str, Any]) -> dict[str, Any]:
    skip = {"metadata", "kind", "apiVersion"}
    if rd.status_subresource:
        skip.add("status")
    return {k: v for k, v in obj.items() if k not in skip}


_FIRST_KEYS = ("kind", "apiVersion", "metadata")


def _ordered(obj: Obj) -> Obj:
    """Keys in the apiserver's order (kind, apiVersion, metadata, ...) for readable output."""
    out = {k: obj[k] for k in _FIRST_KEYS if k in obj}
    out.update((k, v) for k, v in obj.items() if k not in out)
    return out


__all__ = [
    "CRD_KEY",
    "ApiError",
    "FieldValidation",
    "Key",
    "Obj",
    "PatchType",
    "Record",
    "Store",
    "WatchEvent",
    "encode",
    "now_rfc3339",
    "too_old",
]
