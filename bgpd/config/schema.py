"""config/schema.json, generated from the field table (bgpd.config.fields and the kind
modules), so the loader and the schema accept the same fields.

Regenerate the committed file after changing a field:

    python -m bgpd.config.schema > config/schema.json

(a unit test fails while the committed file differs from `generate()`). Pure: `generate`
returns a JSON-ready dict; only `main` writes, to stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from bgpd.config.documents import KINDS
from bgpd.config.fields import DEFINITIONS, METADATA_FIELDS, NO_DEFAULT, Field, KindTable

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID: Final = "urn:kube-bgpd:config:schema"
DESCRIPTION: Final = (
    "One YAML document of a kube-bgpd config file. This schema checks shapes and ranges "
    "only; `kube-bgpd validate` also runs the cross-checks (unknown pools and peers, "
    "overlapping pools, aggregation shorter than a pool, timers, community aliases). See "
    "docs/configuration.md."
)
_STATUS: Final = {"description": "Written by controllers; ignored."}


def field_schema(f: Field) -> dict[str, Any]:
    """The JSON Schema of one Field (its name aside)."""
    out: dict[str, Any] = {}
    if f.ref is not None:
        out["$ref"] = f"#/$defs/{f.ref}"
    if f.type is not None:
        out["type"] = [f.type, "null"] if f.nullable else f.type
    if f.format is not None:
        out["format"] = f.format
    for key, value in (
        ("minimum", f.minimum),
        ("maximum", f.maximum),
        ("minLength", f.min_length),
        ("maxLength", f.max_length),
    ):
        if value is not None:
            out[key] = value
    if f.any_of:
        out["anyOf"] = [field_schema(branch) for branch in f.any_of]
    if f.pattern is not None:
        out["pattern"] = f.pattern
    if f.enum is not None:
        out["enum"] = list(f.enum)
    if f.const is not None:
        out["const"] = f.const
    if f.min_items is not None:
        out["minItems"] = f.min_items
    if f.unique_items:
        out["uniqueItems"] = True
    if f.items is not None:
        out["items"] = field_schema(f.items)
    if f.values is not None:
        out["additionalProperties"] = field_schema(f.values)
    if f.fields is not None:
        out.update(_object(f.fields))
    if f.default is not NO_DEFAULT:
        out["default"] = f.default
    if f.max_seconds is not None:
        out["x-kube-bgpd-max-seconds"] = f.max_seconds
    if f.description:
        out["description"] = f.description
    return out


def _object(fields: tuple[Field, ...]) -> dict[str, Any]:
    """A closed object's keywords: no key outside `fields`."""
    out: dict[str, Any] = {"additionalProperties": False}
    required = [f.name for f in fields if f.required]
    if required:
        out["required"] = required
    out["properties"] = {f.name: field_schema(f) for f in fields}
    return out


def kind_schema(table: KindTable) -> dict[str, Any]:
    spec = Field(type="object", nullable=not table.spec_required, fields=table.spec)
    required = ["apiVersion", "kind", "metadata"] + (["spec"] if table.spec_required else [])
    return {
        "type": "object",
        "description": table.description,
        "additionalProperties": False,
        "required": required,
        "properties": {
            "apiVersion": {"const": table.api_version},
            "kind": {"const": table.kind},
            "metadata": {"$ref": "#/$defs/metadata"},
            "spec": field_schema(spec),
            "status": dict(_STATUS),
        },
    }


def _list_schema() -> dict[str, Any]:
    """A v1 List whose items are documents of this schema (`kubectl get -o yaml`)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind"],
        "properties": {
            "apiVersion": {"const": "v1"},
            "kind": {"const": "List"},
            "metadata": {"type": "object"},
            "items": {"type": ["array", "null"], "items": {"$ref": "#"}},
        },
    }


def generate() -> dict[str, Any]:
    """The JSON Schema of one config document, from the field table."""
    defs: dict[str, Any] = {d.name: field_schema(d) for d in DEFINITIONS}
    # A dump's ObjectMeta may hold the server-side fields: accepted, any value.
    defs["metadata"]["properties"] = {
        f.name: {} if f.ignored else field_schema(f) for f in METADATA_FIELDS
    }
    defs.update({k.definition: kind_schema(k) for k in KINDS})
    defs["List"] = _list_schema()
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        "title": "kube-bgpd configuration document",
        "description": DESCRIPTION,
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in (*(k.definition for k in KINDS), "List")],
        "$defs": defs,
    }


def render() -> str:
    """generate() as the text of config/schema.json."""
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
