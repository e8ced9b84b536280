"""Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for with `as=Table`.

kubectl renders `get` output from the columns the server sends. Services, EndpointSlices
and Nodes get the columns kube-apiserver prints for them (pkg/printers/internalversion);
a custom resource gets its CRD's additionalPrinterColumns (as apiextensions-apiserver's
table convertor: a simple JSONPath per cell, `date` columns as an age); every other kind
gets Name and Age. Pure functions of the objects and the current time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kbgpd_lab.apisim.resources import ResourceDef

Obj = Mapping[str, Any]

_NAME = {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}


def _col(name: str, priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": "string", "format": "", "description": name, "priority": priority}


def human_age(created: str | None, now: datetime | None = None) -> str:
    """kubectl's short duration ("42s", "3m12s", "5h", "12d") since `created`."""
    if not created:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < 0:
        return "<invalid>"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def _service_row(obj: Obj) -> list[Any]:
    spec = obj.get("spec") or {}
    svc_type = spec.get("type", "ClusterIP")
    external: str
    if svc_type == "ExternalName":
        external = spec.get("externalName", "<none>")
    elif svc_type == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        ips = [i.get("ip") or i.get("hostname") or "" for i in ingress]
        ips += spec.get("externalIPs") or []
        external = ",".join(ips) if ips else "<pending>"
    else:
        external = ",".join(spec.get("externalIPs") or []) or "<none>"
    ports = []
    for p in spec.get("ports") or []:
        text = str(p.get("port"))
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        ports.append(f"{text}/{p.get('protocol', 'TCP')}")
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        svc_type,
        spec.get("clusterIP") or "<none>",
        external,
        ",".join(ports) or "<none>",
        human_age(obj["metadata"].get("creationTimestamp")),
        selector or "<none>",
    ]


def _slice_row(obj: Obj) -> list[Any]:
    ports = [str(p.get("port", "<unset>")) for p in obj.get("ports") or []]
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3])
    if len(addresses) > 3:
        shown += f" + {len(addresses) - 3} more..."
    return [
        obj.get("addressType", ""),
        ",".join(ports) or "<unset>",
        shown or "<none>",
        human_age(obj["metadata"].get("creationTimestamp")),
    ]


def _node_row(obj: Obj) -> list[Any]:
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = (
        "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    )
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        state,
        ",".join(r for r in roles if r) or "<none>",
        human_age(obj["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _namespace_row(obj: Obj) -> list[Any]:
    return [
        (obj.get("status") or {}).get("phase", ""),
        human_age(obj["metadata"].get("creationTimestamp")),
    ]


def _event_row(obj: Obj) -> list[Any]:
    # Core v1 Events and events.k8s.io Events: same columns, different field names.
    about = obj.get("involvedObject") or obj.get("regarding") or {}
    when = (
        obj.get("lastTimestamp")
        or obj.get("eventTime")
        or (obj.get("series") or {}).get("lastObservedTime")
        or obj["metadata"].get("creationTimestamp")
    )
    return [
        human_age(when),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(about.get('kind', '')).lower()}/{about.get('name', '')}",
        obj.get("message") or obj.get("note") or "",
    ]


def _age_row(obj: Obj) -> list[Any]:
    return [human_age(obj["metadata"].get("creationTimestamp"))]


_EVENT_COLUMNS = [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")]

_PRINTERS: dict[str, tuple[list[dict[str, Any]], Any]] = {
    "services": (
        [
            _col("Type"),
            _col("Cluster-IP"),
            _col("External-IP"),
            _col("Port(s)"),
            _col("Age"),
            _col("Selector", 1),
        ],
        _service_row,
    ),
    "endpointslices.discovery.k8s.io": (
        [_col("AddressType"), _col("Ports"), _col("Endpoints"), _col("Age")],
        _slice_row,
    ),
    "nodes": (
        [
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
            _col("Internal-IP", 1),
            _col("External-IP", 1),
            _col("OS-Image", 1),
            _col("Kernel-Version", 1),
            _col("Container-Runtime", 1),
        ],
        _node_row,
    ),
    "namespaces": ([_col("Status"), _col("Age")], _namespace_row),
    "customresourcedefinitions.apiextensions.k8s.io": (
        [{**_col("Created At"), "type": "date"}],
        lambda obj: [obj["metadata"].get("creationTimestamp", "")],
    ),
    "events": (_EVENT_COLUMNS, _event_row),
    "events.events.k8s.io": (_EVENT_COLUMNS, _event_row),
}


def _json_path(obj: Any, path: str) -> Any:
    """The value at a CRD column's JSONPath (`.spec.x`, `.status.conditions[0].type`)."""
    value = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path.strip("{}")):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def _custom_printer(rd: ResourceDef) -> tuple[list[dict[str, Any]], Any]:
    columns = [
        {
            "name": c.get("name", ""),
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": c.get("priority", 0),
        }
        for c in rd.printer_columns
    ]

    def row(obj: Obj) -> list[Any]:
        cells: list[Any] = []
        for column in rd.printer_columns:
            value = _json_path(obj, str(column.get("jsonPath", "")))
            if value is None:
                cells.append(None)
            elif column.get("type") == "date" and isinstance(value, str):
                cells.append(human_age(value))
            elif isinstance(value, dict | list):
                cells.append(json.dumps(value, separators=(",", ":")))
            else:
                cells.append(value)
        return cells

    return columns, row


def table(rd: ResourceDef, objects: Iterable[Obj], meta: Mapping[str, Any]) -> dict[str, Any]:
    """A Table of `objects` with PartialObjectMetadata rows, as kubectl expects."""
    if rd.printer_columns:
        columns, row = _custom_printer(rd)
    else:
        columns, row = _PRINTERS.get(rd.key, ([_col("Age")], _age_row))
    # Events show their name only with -o wide, last (as the apiserver prints them).
    name_last = rd.key in ("events", "events.events.k8s.io")
    rows = []
    for obj in objects:
        name = obj["metadata"]["name"]
        rows.append(
            {
                "cells": [*row(obj), name] if name_last else [name, *row(obj)],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(meta),
        "columnDefinitions": [*columns, {**_NAME, "priority": 1}]
        if name_last
        else [_NAME, *columns],
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    """kubectl's Accept header asks for `as=Table;g=meta.k8s.io` first."""
    first = accept.split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first
