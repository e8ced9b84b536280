"""The protobuf decoder for kubectl's create generators, on hand-built messages."""

from __future__ import annotations

import pytest

from kbgpd_lab.apisim.protobuf import MAGIC, ProtobufError, decode_object


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def entry(key: str, value: bytes) -> bytes:
    return field(1, key.encode()) + field(2, value)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return MAGIC + field(1, type_meta) + field(2, raw)


def test_secret_with_metadata_maps_and_bytes() -> None:
    meta = (
        field(1, b"bgp-pass")
        + field(2, b"")
        + field(3, b"metallb-system")
        + field(11, entry("app", b"bgp"))
        + field(14, b"example.com/keep")
    )
    raw = field(1, meta) + field(2, entry("password", b"\x00secret")) + field(3, b"") + field(5, 1)
    assert decode_object(envelope("v1", "Secret", raw)) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "bgp-pass",
            "namespace": "metallb-system",
            "labels": {"app": "bgp"},
            "finalizers": ["example.com/keep"],
        },
        "data": {"password": "AHNlY3JldA=="},
        "immutable": True,
    }


def test_namespace_skips_unmapped_fields() -> None:
    meta = field(1, b"team-a") + field(5, b"some-uid") + field(7, 3)
    raw = field(1, meta) + field(2, field(1, b"kubernetes"))
    assert decode_object(envelope("v1", "Namespace", raw)) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a"},
        "spec": {"finalizers": ["kubernetes"]},
    }


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"{}", id="no-magic"),
        pytest.param(envelope("v1", "Service", b""), id="unknown-kind"),
        pytest.param(MAGIC + b"\x0a\x05ab", id="truncated"),
        pytest.param(MAGIC + b"\x0b", id="bad-wire-type"),
        pytest.param(envelope("v1", "ConfigMap", field(4, b"x")), id="bool-as-bytes"),
    ],
)
def test_bodies_that_are_refused(body: bytes) -> None:
    with pytest.raises(ProtobufError):
        decode_object(body)
