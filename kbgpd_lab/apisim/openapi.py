"""The `/openapi/v3` and `/openapi/v2` documents, built from the resource table.

kubectl 1.32 reads OpenAPI v3 before it writes: `kubectl apply`/`create` ask the group
version's document whether the PATCH operation of the kind takes the `fieldValidation`
query parameter and, if so, leave validation to the server (`fieldValidation=Strict`)
instead of downloading the v2 document for client-side validation; `kubectl explain`
reads the kind's schema from `components.schemas`. Every served kind gets its operations
(with `x-kubernetes-group-version-kind` and `x-kubernetes-action`, as the apiserver
publishes them); custom resources also get their schema (the CRD's openAPIV3Schema with
apiVersion, kind and metadata added). The built-in kinds have no schema here, so kubectl
computes their strategic merge patches from its compiled-in types, as it does when a
server publishes none. Pure functions.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kbgpd_lab.apisim.discovery import VERSION_INFO
from kbgpd_lab.apisim.resources import ResourceDef, ResourceTable

_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"

_META_SCHEMAS: dict[str, Any] = {
    _OBJECT_META: {
        "description": "ObjectMeta is metadata that all persisted resources must have.",
        "type": "object",
        "properties": {
            "name": {"description": "Name must be unique within a namespace.", "type": "string"},
            "namespace": {
                "description": "Namespace defines the space within which each name must be unique.",
                "type": "string",
            },
            "generateName": {"description": "A prefix for a generated name.", "type": "string"},
            "labels": {
                "description": "Map of string keys and values to organize and categorize objects.",
                "type": "object",
                "additionalProperties": {"type": "string", "default": ""},
            },
            "annotations": {
                "description": "Unstructured key value map stored with a resource.",
                "type": "object",
                "additionalProperties": {"type": "string", "default": ""},
            },
            "finalizers": {
                "description": "Must be empty before the object is deleted from the registry.",
                "type": "array",
                "items": {"type": "string", "default": ""},
            },
            "uid": {
                "description": "UID is the unique in time and space value for this object.",
                "type": "string",
            },
            "resourceVersion": {
                "description": "The internal version of this object.",
                "type": "string",
            },
            "generation": {
                "description": "The generation of the desired state.",
                "type": "integer",
                "format": "int64",
            },
            "creationTimestamp": {
                "description": "The time this object was created.",
                "type": "string",
                "format": "date-time",
            },
            "deletionTimestamp": {
                "description": "The time at which this resource will be deleted.",
                "type": "string",
                "format": "date-time",
            },
        },
    },
    _LIST_META: {
        "description": "ListMeta describes metadata that synthetic resources must have.",
        "type": "object",
        "properties": {
            "resourceVersion": {"type": "string"},
            "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"},
        },
    },
}

_QUERY = ("dryRun", "fieldManager", "fieldValidation")
_ACTIONS = {"get": "get", "put": "put", "patch": "patch", "delete": "delete"}


def schema_name(rd: ResourceDef) -> str:
    """The component name the apiserver gives a kind (reversed group, version, kind)."""
    group = ".".join(reversed(rd.group.split("."))) if rd.group else "io.k8s.api.core"
    return f"{group}.{rd.version}.{rd.kind}"


def _gvk(rd: ResourceDef) -> dict[str, str]:
    return {"group": rd.group, "version": rd.version, "kind": rd.kind}


def _operation(rd: ResourceDef, action: str, ref: str, *, v3: bool) -> dict[str, Any]:
    params = [_param(name, v3=v3) for name in _QUERY] if action in ("put", "patch", "post") else []
    op: dict[str, Any] = {
        "operationId": f"{action}{rd.kind}",
        "parameters": params,
        "responses": {"200": _response(ref, v3=v3)},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rd),
    }
    return op


def _param(name: str, *, v3: bool, where: str = "query") -> dict[str, Any]:
    if v3:
        return {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True}}
    return {"name": name, "in": where, "type": "string", "uniqueItems": True}


def _response(ref: str, *, v3: bool) -> dict[str, Any]:
    if v3:
        return {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}
    return {"description": "OK", "schema": {"$ref": ref}}


def _paths(rds: list[ResourceDef], *, v3: bool, prefix: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rd in rds:
        ref = f"{prefix}{schema_name(rd)}"
        base = f"/api/{rd.version}" if not rd.group else f"/apis/{rd.group}/{rd.version}"
        scope = f"{base}/namespaces/{{namespace}}" if rd.namespaced else base
        path_params = [_param("name", v3=v3, where="path")]
        if rd.namespaced:
            path_params.append(_param("namespace", v3=v3, where="path"))
        item = {verb: _operation(rd, action, ref, v3=v3) for verb, action in _ACTIONS.items()}
        paths[f"{scope}/{rd.plural}/{{name}}"] = {**item, "parameters": path_params}
        paths[f"{scope}/{rd.plural}"] = {
            "get": _operation(rd, "list", ref + "List", v3=v3),
            "post": _operation(rd, "post", ref, v3=v3),
            "parameters": path_params[1:],
        }
        if rd.status_subresource:
            paths[f"{scope}/{rd.plural}/{{name}}/status"] = {
                **{
                    verb: _operation(rd, action, ref, v3=v3)
                    for verb, action in _ACTIONS.items()
                    if verb != "delete"
                },
                "parameters": path_params,
            }
    return paths


def _kind_schema(rd: ResourceDef, *, v3: bool, prefix: str) -> dict[str, Any]:
    """A custom resource's published schema: its openAPIV3Schema plus the object fields."""
    schema: dict[str, Any] = json.loads(json.dumps(rd.schema or {"type": "object"}))
    if not v3:
        _v2_compatible(schema)
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {
        "description": "The versioned schema of this representation of an object.",
        "type": "string",
    }
    props["kind"] = {
        "description": "The REST resource this object represents.",
        "type": "string",
    }
    meta_ref = {"$ref": prefix + _OBJECT_META}
    props["metadata"] = (
        {"description": "Standard object's metadata.", "allOf": [meta_ref]} if v3 else meta_ref
    )
    schema["x-kubernetes-group-version-kind"] = [_gvk(rd)]
    return schema


def _list_schema(rd: ResourceDef, *, prefix: str) -> dict[str, Any]:
    return {
        "description": f"{rd.list_kind} is a list of {rd.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"$ref": prefix + _LIST_META},
            "items": {"type": "array", "items": {"$ref": prefix + schema_name(rd)}},
        },
        "x-kubernetes-group-version-kind": [{**_gvk(rd), "kind": rd.list_kind}],
    }


def _v2_compatible(schema: dict[str, Any]) -> None:
    # OpenAPI v2 has no `nullable`; the apiserver drops it (and int-or-string keeps its
    # vendor extension only).
    schema.pop("nullable", None)
    for sub in (schema.get("properties") or {}).values():
        if isinstance(sub, dict):
            _v2_compatible(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _v2_compatible(schema[key])


def _schemas(rds: list[ResourceDef], *, v3: bool, prefix: str) -> dict[str, Any]:
    schemas: dict[str, Any] = dict(_META_SCHEMAS)
    for rd in rds:
        if rd.crd:
            schemas[schema_name(rd)] = _kind_schema(rd, v3=v3, prefix=prefix)
            schemas[schema_name(rd) + "List"] = _list_schema(rd, prefix=prefix)
    return schemas


def group_version_path(rd: ResourceDef) -> str:
    """`api/v1` or `apis/G/V`: the key of a group version in the v3 index."""
    return f"api/{rd.version}" if not rd.group else f"apis/{rd.group}/{rd.version}"


def v3_document(table: ResourceTable, path: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group version (`api/v1`, `apis/G/V`), or None."""
    rds = [r for r in table.resources if group_version_path(r) == path]
    if not rds:
        return None
    prefix = "#/components/schemas/"
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION_INFO["gitVersion"]},
        "paths": _paths(rds, v3=True, prefix=prefix),
        "components": {"schemas": _schemas(rds, v3=True, prefix=prefix)},
    }


def v3_index(table: ResourceTable) -> dict[str, Any]:
    """`/openapi/v3`: each group version with a URL whose hash changes with its content."""
    paths: dict[str, Any] = {}
    for rd in table.resources:
        key = group_version_path(rd)
        if key in paths:
            continue
        doc = v3_document(table, key)
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def v2_document(table: ResourceTable) -> dict[str, Any]:
    """`/openapi/v2` (JSON): every served kind's operations, custom resources' schemas."""
    rds = list(table.resources)
    prefix = "#/definitions/"
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": VERSION_INFO["gitVersion"]},
        "paths": _paths(rds, v3=False, prefix=prefix),
        "definitions": _schemas(rds, v3=False, prefix=prefix),
    }


#: The media type client-go asks `/openapi/v2` in (gnostic's OpenAPIv2 Document).
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
#: The Content-Type it is answered with: Go's mime parser refuses the "@" (kube-openapi's
#: handler sends this spelling).
V2_PROTOBUF_SERVED = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _length_delimited(field_number: int, payload: bytes) -> bytes:
    size, length = b"", len(payload)
    while True:
        byte = length & 0x7F
        length >>= 7
        size += bytes([byte | (0x80 if length else 0)])
        if not length:
            break
    return bytes([field_number << 3 | 2]) + size + payload


def v2_protobuf() -> bytes:
    """`/openapi/v2` in protobuf: a Document with swagger and info only, no definitions.

    kubectl downloads it only to validate kinds the v3 documents do not cover (a kind
    whose CRD is not installed); with no definition for the kind, it skips client-side
    validation and reports the missing kind itself, as against a real server. Encoding
    the schemas in gnostic's protobuf is not done (`Document.swagger` = 1, `info` = 2;
    `Info.title` = 1, `version` = 2).
    """
    info = _length_delimited(1, b"Kubernetes") + _length_delimited(
        2, str(VERSION_INFO["gitVersion"]).encode()
    )
    return _length_delimited(1, b"2.0") + _length_delimited(2, info)


def wants_json(accept: str) -> bool:
    """Whether an Accept header takes JSON (client-go asks v2 in protobuf only)."""
    return not accept or any(
        part.split(";")[0].strip() in ("application/json", "*/*", "application/*")
        for part in accept.split(",")
    )


__all__ = [
    "V2_PROTOBUF",
    "V2_PROTOBUF_SERVED",
    "group_version_path",
    "schema_name",
    "v2_document",
    "v2_protobuf",
    "v3_document",
    "v3_index",
    "wants_json",
]
