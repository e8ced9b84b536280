"""Shared helpers for the API simulator tests: object builders and a raw watch reader."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp


def service(
    name: str,
    namespace: str = "default",
    *,
    labels: dict[str, str] | None = None,
    ports: tuple[int, ...] = (80,),
    svc_type: str = "ClusterIP",
    **extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"type": svc_type, "ports": [{"port": p} for p in ports], **extra},
    }


def endpoint_slice(
    name: str, service_name: str, ips: tuple[str, ...], namespace: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
        "ports": [{"port": 8080}],
    }


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class WatchReader:
    """Reads a raw watch stream line by line (one JSON event per line)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self, within: float = 5.0) -> dict[str, Any] | None:
        """The next event, or None at a clean end of stream."""
        async with asyncio.timeout(within):
            line = await self.response.content.readline()
        if not line:
            return None
        doc: dict[str, Any] = json.loads(line)
        return doc

    async def take(self, count: int, within: float = 5.0) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):
            event = await self.next(within)
            assert event is not None, f"stream ended after {out}"
            out.append(event)
        return out

    async def rest(self, within: float = 5.0) -> list[dict[str, Any]]:
        """Every event until the server ends the stream."""
        out = []
        while (event := await self.next(within)) is not None:
            out.append(event)
        return out


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(type, name) per event; bookmarks have no name."""
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]
