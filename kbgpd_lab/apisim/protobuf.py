"""Decoding the protobuf bodies `kubectl create namespace|configmap|secret` send.

kubectl's generators encode typed objects as `application/vnd.kubernetes.protobuf`: the
magic `k8s\\x00`, then a runtime.Unknown message (typeMeta = 1, raw = 2) whose raw bytes
are the object's message from k8s.io/api's generated.proto. Only Namespace, ConfigMap
and Secret (with ObjectMeta's name, generateName, namespace, labels, annotations and
finalizers) are understood; any other body raises `ProtobufError` and the server answers
415. The field numbers below are those of k8s.io/api core/v1 and apimachinery meta/v1
generated.proto. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """The body is not a protobuf object this decoder knows."""


# Field kinds: "string", "bytes" (base64 in JSON), "int", "bool", "strings" (repeated),
# "map" (string -> string), "bytesmap" (string -> bytes, base64), or a message name.
_SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        14: ("finalizers", "strings"),
    },
    "Namespace": {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "NamespaceSpec"),
        3: ("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", "strings")},
    "NamespaceStatus": {1: ("phase", "string")},
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map"),
        3: ("binaryData", "bytesmap"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "bytesmap"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
}

#: (apiVersion, kind) of the objects this module decodes.
KINDS = frozenset({("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "Secret")})


def decode_object(body: bytes) -> dict[str, Any]:
    """A kubectl protobuf body as the JSON object it stands for."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s\\0 magic)")
    envelope = dict(_fields(body[len(MAGIC) :]))  # runtime.Unknown
    type_meta, raw = envelope.get(1, b""), envelope.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise ProtobufError("malformed runtime.Unknown envelope")
    meta = _message(type_meta, "TypeMeta")
    api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
    if (api_version, kind) not in KINDS:
        raise ProtobufError(f"protobuf bodies of {api_version} {kind} are not understood")
    obj = _message(raw, kind)
    return {"apiVersion": api_version, "kind": kind, **obj}


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one message; lengths-delimited values as bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ProtobufError("truncated field")
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((number, value))
    return out


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ProtobufError("bad varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _message(buf: bytes, name: str) -> dict[str, Any]:
    schema = _SCHEMAS[name]
    out: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number not in schema:
            continue  # fields we do not map (uid, timestamps, ...) are server-owned anyway
        field, kind = schema[number]
        if kind in ("int", "bool"):
            if not isinstance(value, int):
                raise ProtobufError(f"{name}.{field}: expected a varint")
            out[field] = bool(value) if kind == "bool" else value
            continue
        if not isinstance(value, bytes):
            raise ProtobufError(f"{name}.{field}: expected length-delimited bytes")
        if kind == "string":
            # gogo-protobuf writes empty strings; Go's JSON (omitempty) leaves them out.
            if value:
                out[field] = value.decode()
        elif kind == "bytes":
            out[field] = base64.b64encode(value).decode()
        elif kind == "strings":
            out.setdefault(field, []).append(value.decode())
        elif kind in ("map", "bytesmap"):
            entry = dict(_fields(value))
            key, item = entry.get(1, b""), entry.get(2, b"")
            if not isinstance(key, bytes) or not isinstance(item, bytes):
                raise ProtobufError(f"{name}.{field}: bad map entry")
            text = base64.b64encode(item).decode() if kind == "bytesmap" else item.decode()
            out.setdefault(field, {})[key.decode()] = text
        else:
            out[field] = _message(value, kind)
    return out
