"""Discovery documents (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/G`, `/apis/G/V`).

These are the legacy (unaggregated) discovery documents built from the resource table;
kubectl 1.32 asks for aggregated discovery first and falls back to these when the answer
is plain `application/json`, as the apiserver's own negotiation allows. Pure functions.
"""

from __future__ import annotations

from typing import Any

from kbgpd_lab.apisim.resources import VERBS, ResourceTable

#: The version we claim; kubectl 1.32 warns on a skew larger than one minor version.
VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-apisim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(table: ResourceTable, name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in table.group_versions()[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list(table: ResourceTable) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(table, g) for g in table.group_versions() if g],
    }


def group(table: ResourceTable, name: str) -> dict[str, Any] | None:
    if not name or name not in table.group_versions():
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(table, name)}


def resource_list(table: ResourceTable, group_name: str, version: str) -> dict[str, Any] | None:
    defs = table.in_group_version(group_name, version)
    if not defs:
        return None
    resources: list[dict[str, Any]] = []
    for r in defs:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(VERBS),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        if r.status_subresource:
            resources.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": resources,
    }
