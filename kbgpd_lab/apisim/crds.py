"""CustomResourceDefinitions: what a CRD object serves, checked and defaulted as the real one.

kube-apiserver's apiextensions-apiserver turns an `apiextensions.k8s.io/v1`
CustomResourceDefinition into REST resources, one per served version; the store calls
`resource_defs` when a CRD is written and registers the result in the resource table.
`prepare` applies the CRD defaults the apiserver applies (names.singular, listKind,
conversion None), `check` returns the validation errors it words (a subset: names, scope,
versions, one storage version, a structural schema per version), and `status` the status
its controllers write (acceptedNames, NamesAccepted and Established conditions,
storedVersions), here at once rather than a moment later. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kbgpd_lab.apisim.resources import ResourceDef, version_priority
from kbgpd_lab.apisim.schema import FieldError

Obj = dict[str, Any]

CRD_GROUP = "apiextensions.k8s.io"


def prepare(crd: Obj) -> None:
    """Apply the apiserver's defaults to a CRD body in place."""
    spec = crd.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec.setdefault("conversion", {"strategy": "None"})


def check(crd: Mapping[str, Any]) -> list[FieldError]:
    """The validation errors of a CRD, as kube-apiserver words them (a subset)."""
    errors: list[FieldError] = []
    spec = crd.get("spec")
    if not isinstance(spec, Mapping):
        return [FieldError("Required value", "spec", "")]
    group = spec.get("group")
    names = spec.get("names") if isinstance(spec.get("names"), Mapping) else {}
    assert isinstance(names, Mapping)
    plural, kind = names.get("plural"), names.get("kind")
    if not group:
        errors.append(FieldError("Required value", "spec.group", ""))
    elif "." not in str(group):
        errors.append(
            FieldError(
                "Invalid value", "spec.group", group, "should be a domain with at least one dot"
            )
        )
    if not plural:
        errors.append(FieldError("Required value", "spec.names.plural", ""))
    if not kind:
        errors.append(FieldError("Required value", "spec.names.kind", ""))
    name = (crd.get("metadata") or {}).get("name", "")
    if group and plural and name != f"{plural}.{group}":
        errors.append(
            FieldError(
                "Invalid value", "metadata.name", name, 'must be spec.names.plural+"."+spec.group'
            )
        )
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        detail = 'supported values: "Cluster", "Namespaced"'
        if scope is None:
            errors.append(FieldError("Required value", "spec.scope", ""))
        else:
            errors.append(FieldError("Unsupported value", "spec.scope", scope, detail))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errors.append(
            FieldError(
                "Invalid value",
                "spec.versions",
                [],
                "must have exactly one version marked as storage version",
            )
        )
        return errors
    storage = [v for v in versions if isinstance(v, Mapping) and v.get("storage")]
    if len(storage) != 1:
        errors.append(
            FieldError(
                "Invalid value",
                "spec.versions",
                versions,
                "must have exactly one version marked as storage version",
            )
        )
    for i, version in enumerate(versions):
        path = f"spec.versions[{i}]"
        if not isinstance(version, Mapping) or not version.get("name"):
            errors.append(FieldError("Required value", f"{path}.name", ""))
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, Mapping):
            errors.append(
                FieldError(
                    "Required value", f"{path}.schema.openAPIV3Schema", "", "schemas are required"
                )
            )
            continue
        errors.extend(_structural(schema, f"{path}.schema.openAPIV3Schema"))
    strategy = (spec.get("conversion") or {}).get("strategy", "None")
    if strategy != "None":
        errors.append(
            FieldError(
                "Unsupported value",
                "spec.conversion.strategy",
                strategy,
                'supported values: "None" (the simulator has no conversion webhooks)',
            )
        )
    return errors


def _structural(schema: Mapping[str, Any], path: str) -> list[FieldError]:
    """A structural schema names a type everywhere (NonStructuralSchema conditions)."""
    errors: list[FieldError] = []
    if (
        not schema.get("type")
        and not schema.get("x-kubernetes-int-or-string")
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        errors.append(
            FieldError(
                "Required value",
                f"{path}.type",
                "",
                "must not be empty for specified object fields",
            )
        )
    pattern = schema.get("pattern")
    if pattern is not None:
        try:
            re.compile(str(pattern))
        except re.error as exc:
            detail = f"must be a valid regular expression, but isn't: {exc}"
            errors.append(FieldError("Invalid value", f"{path}.pattern", pattern, detail))
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            errors.extend(_structural(sub, f"{path}.properties[{key}]"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        errors.extend(_structural(items, f"{path}.items"))
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        errors.extend(_structural(additional, f"{path}.additionalProperties"))
    return errors


def status(crd: Mapping[str, Any], old: Mapping[str, Any] | None, now: str) -> Obj:
    """The status the apiextensions controllers write: names accepted, Established.

    Condition transition times are kept from `old` (the previous status) while the
    condition's status does not change; storedVersions accumulates storage versions.
    """
    spec = crd["spec"]
    names = spec["names"]
    accepted = {
        k: names[k]
        for k in ("plural", "singular", "shortNames", "kind", "listKind", "categories")
        if k in names
    }
    old_conditions = {c.get("type"): c for c in (old or {}).get("conditions") or []}

    def condition(kind: str, reason: str, message: str) -> Obj:
        before = old_conditions.get(kind)
        since = (
            before.get("lastTransitionTime", now)
            if before is not None and before.get("status") == "True"
            else now
        )
        return {
            "type": kind,
            "status": "True",
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }

    stored = list((old or {}).get("storedVersions") or [])
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    if storage not in stored:
        stored.append(storage)
    return {
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition(
                "Established", "InitialNamesAccepted", "the initial names have been accepted"
            ),
        ],
        "acceptedNames": accepted,
        "storedVersions": stored,
    }


def storage_schema(crd: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The openAPIV3Schema of the version objects are stored in."""
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    found: Mapping[str, Any] | None = (version.get("schema") or {}).get("openAPIV3Schema")
    return found


def resource_defs(crd: Mapping[str, Any]) -> tuple[ResourceDef, ...]:
    """One `ResourceDef` per served version, the preferred version first."""
    spec = crd["spec"]
    names = spec["names"]
    versions = [v for v in spec["versions"] if v.get("served", True)]
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    defs = []
    for version in versions:
        subresources = version.get("subresources") or {}
        defs.append(
            ResourceDef(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec["scope"] == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                status_subresource="status" in subresources,
                has_generation=True,
                # With a status subresource, create ignores the body's status.
                create_resets_status="status" in subresources,
                categories=tuple(names.get("categories") or ()),
                crd=True,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                storage_version=storage,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                list_kind_name=names.get("listKind") or "",
            )
        )
    defs.sort(key=lambda r: version_priority(r.version))
    return tuple(defs)


__all__ = ["CRD_GROUP", "check", "prepare", "resource_defs", "status", "storage_schema"]
