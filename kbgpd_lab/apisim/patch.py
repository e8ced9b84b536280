"""The three PATCH flavours kube-apiserver accepts, as pure functions on JSON values.

* JSON merge patch (RFC 7386): maps merge, `null` deletes, lists are replaced.
* JSON patch (RFC 6902): add, remove, replace, move, copy, test with JSON pointers
  (RFC 6901, `-` appends).
* Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch): a merge patch
  where the lists a kind declares (`ResourceDef.merge_keys`) merge element-wise by key
  (Service ports by `port`, conditions by `type`, containers by `name`) or as sets of
  scalars (finalizers), with the directives kubectl's three-way apply emits:
  `$patch: replace|delete|merge`, `$retainKeys`, `$setElementOrder/<list>` and
  `$deleteFromPrimitiveList/<list>`.

Inputs are never mutated. Errors raise `PatchError`, which the server turns into a 422
(a patch that does not apply) or a 400 (a patch that is not well formed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Json = Any


class PatchError(Exception):
    """The patch cannot be applied; `code` is the HTTP status to answer with."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def clone(value: Json) -> Json:
    """A deep copy of a JSON value; several times cheaper than copy.deepcopy."""
    if isinstance(value, Mapping):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


# ------------------------------------------------------------------ RFC 7386 merge patch


def merge_patch(target: Json, patch: Json) -> Json:
    """Apply a JSON merge patch (RFC 7386 section 2) and return the new document."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ------------------------------------------------------------------ RFC 6902 JSON patch


def json_patch(doc: Json, ops: Json) -> Json:
    """Apply a JSON patch (RFC 6902) to a copy of `doc`; all operations or none."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations", 400)
    result = clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid json patch operation: {json.dumps(op)}", 400)
        kind = op["op"]
        path = _pointer(op["path"])
        if kind == "add":
            result = _add(result, path, clone(_value(op)))
        elif kind == "remove":
            result, _ = _remove(result, path)
        elif kind == "replace":
            result, _ = _remove(result, path)
            result = _add(result, path, clone(_value(op)))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            if kind == "move":
                result, moved = _remove(result, source)
            else:
                moved = clone(_get(result, source))
            result = _add(result, path, moved)
        elif kind == "test":
            if _get(result, path) != _value(op):
                raise PatchError(f"testing value {op['path']} failed")
        else:
            raise PatchError(f"unexpected json patch operation {kind!r}", 400)
    return result


def _value(op: Mapping[str, Any]) -> Json:
    if "value" not in op:
        raise PatchError(f"json patch {op['op']} operation has no value", 400)
    return op["value"]


def _pointer(text: object) -> list[str]:
    if not isinstance(text, str) or (text and not text.startswith("/")):
        raise PatchError(f"invalid JSON pointer {text!r}", 400)
    if not text:
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]


def _index(container: list[Any], ref: str, *, for_add: bool) -> int:
    if ref == "-" and for_add:
        return len(container)
    if not ref.isdigit() or (ref.startswith("0") and ref != "0"):
        raise PatchError(f"invalid array index {ref!r}")
    idx = int(ref)
    if idx > len(container) or (idx == len(container) and not for_add):
        raise PatchError(f"array index {idx} out of range")
    return idx


def _get(doc: Json, path: list[str]) -> Json:
    cur = doc
    for token in path:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(f"path /{'/'.join(path)} not found")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, for_add=False)]
        else:
            raise PatchError(f"path /{'/'.join(path)} not found")
    return cur


def _add(doc: Json, path: list[str], value: Json) -> Json:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_add=True), value)
    else:
        raise PatchError(f"cannot add at /{'/'.join(path)}")
    return doc


def _remove(doc: Json, path: list[str]) -> tuple[Json, Json]:
    if not path:
        raise PatchError("cannot remove the whole document")
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"path /{'/'.join(path)} not found")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, token, for_add=False))
    raise PatchError(f"path /{'/'.join(path)} not found")


# ------------------------------------------------------------------ strategic merge patch

_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def strategic_merge(original: Json, patch: Json, merge_keys: Mapping[tuple[str, ...], str]) -> Json:
    """Apply a strategic merge patch; `merge_keys` is the kind's list-strategy table."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", 400)
    result = _smp_map(original if isinstance(original, dict) else {}, patch, (), merge_keys)
    if result is None:
        raise PatchError("a strategic merge patch cannot delete the whole object")
    return result


def _smp_map(
    original: dict[str, Any],
    patch: Mapping[str, Any],
    path: tuple[str, ...],
    keys: Mapping[tuple[str, ...], str],
) -> dict[str, Any] | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        replaced: dict[str, Any] = _strip(patch)
        return replaced
    if directive not in (None, "merge"):
        raise PatchError(f"unknown patch directive {directive!r}")
    result = dict(original)
    retain = patch.get(_RETAIN)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError(f"{_RETAIN} must be a list", 400)
        result = {k: v for k, v in result.items() if k in retain}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN):
            continue
        if key.startswith(_ORDER):
            orders[key[len(_ORDER) :]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            name = key[len(_DELETE_PRIMITIVE) :]
            drop = value if isinstance(value, list) else []
            kept = [v for v in result.get(name) or [] if v not in drop]
            result[name] = kept
            continue
        sub = (*path, key)
        current = result.get(key)
        if value is None or (isinstance(value, dict) and value.get(_DIRECTIVE) == "delete"):
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(current, dict):
            merged = _smp_map(current, value, sub, keys)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and sub in keys:
            result[key] = _smp_list(current if isinstance(current, list) else [], value, sub, keys)
        else:
            result[key] = _strip(value)
    for name, order in orders.items():
        if isinstance(result.get(name), list) and isinstance(order, list):
            result[name] = _reorder(result[name], order, keys.get((*path, name), ""))
    return result


def _smp_list(
    original: list[Any],
    patch: list[Any],
    path: tuple[str, ...],
    keys: Mapping[tuple[str, ...], str],
) -> list[Any]:
    merge_key = keys[path]
    if any(isinstance(p, dict) and p.get(_DIRECTIVE) == "replace" for p in patch):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and _DIRECTIVE in p)]
    if not merge_key:
        # A set of scalars (finalizers): union, original order first.
        return original + [v for v in patch if v not in original]
    result = list(original)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"list element at {'.'.join(path)} lacks merge key {merge_key!r}")
        idx = next(
            (
                i
                for i, o in enumerate(result)
                if isinstance(o, dict) and o.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if idx is not None:
                del result[idx]
            continue
        if idx is None:
            result.append(_strip(item))
        else:
            merged = _smp_map(result[idx], item, path, keys)
            if merged is None:
                del result[idx]
            else:
                result[idx] = merged
    return result


def _reorder(items: list[Any], order: list[Any], merge_key: str) -> list[Any]:
    def ident(v: Any) -> Any:
        return v.get(merge_key) if merge_key and isinstance(v, dict) else v

    wanted = [ident(o) for o in order]
    ranked = {json.dumps(w, sort_keys=True): i for i, w in enumerate(wanted)}
    indexed = list(enumerate(items))
    indexed.sort(
        key=lambda iv: (ranked.get(json.dumps(ident(iv[1]), sort_keys=True), len(ranked)), iv[0])
    )
    return [v for _, v in indexed]


def _strip(value: Json) -> Json:
    """A copy of a patch value without strategic-merge directives."""
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in (_DIRECTIVE, _RETAIN)
            and not k.startswith(_ORDER)
            and not k.startswith(_DELETE_PRIMITIVE)
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value
