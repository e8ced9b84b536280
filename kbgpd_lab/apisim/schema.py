"""Structural-schema handling of custom resources, as kube-apiserver does it for CRDs.

Three pure functions over a JSON value and a CRD version's `openAPIV3Schema`, applied in
the apiserver's order on every write: `prune` drops fields the schema does not know
(unless `x-kubernetes-preserve-unknown-fields`), returning their paths for
`fieldValidation` (Strict refuses them, Warn reports them); `apply_defaults` fills
`default` values into objects that lack them (and replaces non-nullable nulls);
`validate` returns the field errors worded as k8s.io/kube-openapi's validator and
k8s.io/apimachinery's field errors print them, e.g.
``spec.holdTime: Invalid value: "integer": spec.holdTime in body must be of type string:
"integer"``. Not covered: CEL rules (`x-kubernetes-validations`), `allOf`/`anyOf`/
`oneOf`/`not`, list-type uniqueness (`x-kubernetes-list-type: set|map`), formats the
apiserver does not check. No I/O, no state.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

Schema = Mapping[str, Any]

#: The root fields every object has; the schema neither prunes nor needs to list them.
_ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata"})


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field error as k8s.io/apimachinery's `field.Error` (type, path, value, detail)."""

    type: str
    field: str
    value: Any
    detail: str = ""

    @property
    def reason(self) -> str:
        """The StatusCause reason (`FieldValueInvalid`, `FieldValueRequired`, ...)."""
        return _CAUSE_REASONS[self.type]

    def body(self) -> str:
        """`ErrorBody()`: the message without the field path (a StatusCause message)."""
        shown = "Invalid value" if self.type == _TYPE_INVALID else self.type
        if self.type in ("Required value", "Forbidden", "Too long", "Internal error"):
            text = shown
        else:
            text = f"{shown}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


#: field.TypeInvalid: printed as "Invalid value", reported as FieldValueTypeInvalid.
_TYPE_INVALID = "Invalid type"

_CAUSE_REASONS = {
    _TYPE_INVALID: "FieldValueTypeInvalid",
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Forbidden": "FieldValueForbidden",
    "Duplicate value": "FieldValueDuplicate",
    "Internal error": "InternalError",
}


def go_value(value: Any) -> str:
    """A value as field.Error prints it: strings quoted, numbers and booleans bare."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return go_number(value)
    return json.dumps(value, separators=(",", ":"))


def go_number(value: float) -> str:
    """Go's %v of an int64 or float64 (an integral float prints without `.0`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def json_type(value: Any) -> str:
    """The OpenAPI type name of a JSON value, as the validator reports it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---------------------------------------------------------------------- pruning


def prune(value: Any, schema: Schema | None, *, root: bool = True) -> list[str]:
    """Drop unknown fields from `value` in place; return their paths in document order.

    A field is unknown when its object's schema has `properties` (or nothing) and does
    not list it, neither has `additionalProperties` nor `x-kubernetes-preserve-unknown-
    fields: true`. `apiVersion`, `kind` and `metadata` at the root are always kept.
    """
    dropped: list[str] = []
    _prune(value, schema or {}, "", dropped, root=root)
    return dropped


def _prune(value: Any, schema: Schema, path: str, dropped: list[str], *, root: bool) -> None:
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or (
            additional is True
        )
        for key in list(value):
            if root and key in _ROOT_FIELDS:
                continue
            sub = path + "." + key if path else key
            if key in props:
                _prune(value[key], props[key], sub, dropped, root=False)
            elif isinstance(additional, Mapping):
                _prune(value[key], additional, sub, dropped, root=False)
            elif not keep_unknown:
                dropped.append(sub)
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _prune(item, items, f"{path}[{i}]", dropped, root=False)


# ---------------------------------------------------------------------- defaulting


def apply_defaults(value: Any, schema: Schema | None) -> None:
    """Fill `default`s in place where a property is absent (or a non-nullable null).

    As the apiserver's structural defaulting: only inside objects that exist (a default
    never creates its parent), recursing into array items and additionalProperties.
    """
    if schema is None:
        return
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties") or {}
        for key, sub in props.items():
            if "default" in sub and (
                key not in value or (value[key] is None and not sub.get("nullable"))
            ):
                value[key] = json.loads(json.dumps(sub["default"]))
            if key in value:
                apply_defaults(value[key], sub)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key in value:
                if key not in props:
                    apply_defaults(value[key], additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                apply_defaults(item, items)


def drop_nulls(value: Any, schema: Schema | None) -> None:
    """Remove object properties that are null where the schema does not allow null.

    The apiserver prunes such nulls before validating (structural defaulting's
    PruneNonNullableNullsWithoutDefaults); nulls inside arrays are left to `validate`.
    """
    if schema is None:
        return
    if isinstance(value, dict):
        props: Mapping[str, Schema] = schema.get("properties") or {}
        for key in list(value):
            sub = props.get(key)
            if sub is None:
                continue
            if value[key] is None and not sub.get("nullable"):
                del value[key]
            else:
                drop_nulls(value[key], sub)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                drop_nulls(item, items)


# ---------------------------------------------------------------------- validation


def validate(value: Any, schema: Schema | None) -> list[FieldError]:
    """Every field error of `value` against `schema`, in kube-openapi's order."""
    errors: list[FieldError] = []
    if schema is not None:
        _validate(value, schema, "", errors, root=True)
    return errors


def _validate(
    value: Any, schema: Schema, path: str, errors: list[FieldError], *, root: bool = False
) -> None:
    if value is None:
        if schema.get("nullable"):
            return
        if schema.get("type") or schema.get("x-kubernetes-int-or-string"):
            wanted = "integer,string" if schema.get("x-kubernetes-int-or-string") else None
            errors.append(_type_error(path, wanted or str(schema["type"]), "null"))
        return
    if not _type_ok(value, schema, path, errors):
        return
    if "enum" in schema and value not in schema["enum"]:
        values = [v if isinstance(v, str) else json.dumps(v) for v in schema["enum"]]
        detail = "supported values: " + ", ".join(json.dumps(v) for v in values)
        errors.append(FieldError("Unsupported value", path, value, detail))
    if isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, list):
        _validate_array(value, schema, path, errors)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errors, root=root)


def _type_error(path: str, wanted: str, actual: str) -> FieldError:
    detail = f"{path} in body must be of type {wanted}: {json.dumps(actual)}"
    return FieldError(_TYPE_INVALID, path, actual, detail)


def _type_ok(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> bool:
    actual = json_type(value)
    if schema.get("x-kubernetes-int-or-string"):
        if actual in ("integer", "string"):
            return True
        errors.append(_type_error(path, "integer,string", actual))
        return False
    wanted = schema.get("type")
    if not wanted:
        return True
    if wanted == actual or (wanted == "number" and actual == "integer"):
        return True
    errors.append(_type_error(path, str(wanted), actual))
    return False


def _validate_string(value: str, schema: Schema, path: str, errors: list[FieldError]) -> None:
    max_length = schema.get("maxLength")
    if max_length is not None and len(value) > max_length:
        errors.append(
            FieldError("Too long", path, value, f"may not be more than {max_length} bytes")
        )
    min_length = schema.get("minLength")
    if min_length is not None and len(value) < min_length:
        detail = f"{path} in body should be at least {min_length} chars long"
        errors.append(FieldError("Invalid value", path, value, detail))
    pattern = schema.get("pattern")
    if pattern is not None and re.search(pattern, value) is None:
        detail = f"{path} in body should match '{pattern}'"
        errors.append(FieldError("Invalid value", path, value, detail))
    fmt = schema.get("format")
    if fmt and fmt in FORMATS and not FORMATS[fmt](value):
        errors.append(_format_error(path, fmt, value))


def _format_error(path: str, fmt: str, value: str) -> FieldError:
    # A format failure is an InvalidType error in kube-openapi, hence TypeInvalid.
    detail = f"{path} in body must be of type {fmt}: {json.dumps(value)}"
    return FieldError(_TYPE_INVALID, path, value, detail)


def _validate_number(value: float, schema: Schema, path: str, errors: list[FieldError]) -> None:
    maximum = schema.get("maximum")
    if maximum is not None:
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > maximum or (exclusive and value == maximum):
            words = "less than" if exclusive else "less than or equal to"
            detail = f"{path} in body should be {words} {go_number(maximum)}"
            errors.append(FieldError("Invalid value", path, value, detail))
    minimum = schema.get("minimum")
    if minimum is not None:
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < minimum or (exclusive and value == minimum):
            words = "greater than" if exclusive else "greater than or equal to"
            detail = f"{path} in body should be {words} {go_number(minimum)}"
            errors.append(FieldError("Invalid value", path, value, detail))
    multiple = schema.get("multipleOf")
    if multiple and (value / multiple) != int(value / multiple):
        detail = f"{path} in body should be a multiple of {go_number(multiple)}"
        errors.append(FieldError("Invalid value", path, value, detail))


def _validate_array(value: list[Any], schema: Schema, path: str, errors: list[FieldError]) -> None:
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            _validate(item, items, f"{path}[{i}]", errors)
    min_items = schema.get("minItems")
    if min_items is not None and len(value) < min_items:
        detail = f"{path} in body should have at least {min_items} items"
        errors.append(FieldError("Invalid value", path, len(value), detail))
    max_items = schema.get("maxItems")
    if max_items is not None and len(value) > max_items:
        errors.append(
            FieldError("Too many", path, len(value), f"must have at most {max_items} items")
        )
    if schema.get("uniqueItems"):
        seen = [json.dumps(v, sort_keys=True) for v in value]
        if len(set(seen)) != len(seen):
            detail = f"{path} in body shouldn't contain duplicates"
            errors.append(FieldError("Invalid value", path, "", detail))


def _validate_object(
    value: dict[str, Any], schema: Schema, path: str, errors: list[FieldError], *, root: bool
) -> None:
    props: Mapping[str, Schema] = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(FieldError("Required value", _child(path, name), ""))
    for key, item in value.items():
        if root and key in _ROOT_FIELDS and key not in props:
            continue
        sub = props.get(key)
        if sub is None:
            additional = schema.get("additionalProperties")
            if isinstance(additional, Mapping):
                sub = additional
        if sub is not None:
            _validate(item, sub, _child(path, key), errors)
    max_props = schema.get("maxProperties")
    if max_props is not None and len(value) > max_props:
        errors.append(
            FieldError("Too many", path, len(value), f"must have at most {max_props} items")
        )
    min_props = schema.get("minProperties")
    if min_props is not None and len(value) < min_props:
        detail = f"{path} in body should have at least {min_props} properties"
        errors.append(FieldError("Invalid value", path, len(value), detail))


# ---------------------------------------------------------------------- formats


def _parses(check: Any) -> Any:
    def ok(text: str) -> bool:
        try:
            check(text)
        except (ValueError, binascii.Error):
            return False
        return True

    return ok


_HOSTNAME = re.compile(
    r"^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
)


def _datetime(text: str) -> None:
    datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))


#: The string formats kube-apiserver checks for CRDs (a subset of its list); other
#: formats are accepted as any string, as the apiserver does for unknown ones.
FORMATS: Mapping[str, Any] = {
    "ipv4": _parses(ipaddress.IPv4Address),
    "ipv6": _parses(ipaddress.IPv6Address),
    "cidr": _parses(lambda t: ipaddress.ip_network(t, strict=False)),
    "uuid": _parses(uuid.UUID),
    "byte": _parses(lambda t: base64.b64decode(t, validate=True)),
    "date": _parses(date.fromisoformat),
    "date-time": _parses(_datetime),
    "datetime": _parses(_datetime),
    "hostname": lambda t: len(t) <= 255 and _HOSTNAME.match(t) is not None,
}


__all__ = [
    "FORMATS",
    "FieldError",
    "apply_defaults",
    "drop_nulls",
    "go_value",
    "json_type",
    "prune",
    "validate",
]
