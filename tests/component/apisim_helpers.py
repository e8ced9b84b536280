"""Shared helpers for the API simulator tests: this suite's object defaults (built by
kbgpd_lab.kit.manifests) and a raw watch reader."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

from kbgpd_lab.kit import manifests

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


class Kubectl:
    """The real kubectl against one kubeconfig, with a discovery cache of its own."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def argv(self, *args: str) -> list[str]:
        cache = self.kubeconfig.parent / "kubectl-cache"
        return [
            KUBECTL,
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(cache),
            "--request-timeout=20s",
            *args,
        ]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), input=stdin, capture_output=True, text=True, timeout=60, check=False
        )

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        proc = self.run(*args, stdin=stdin)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def fails(self, *args: str, stdin: str | None = None) -> str:
        proc = self.run(*args, stdin=stdin)
        assert proc.returncode != 0
        return proc.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))


def service(
    name: str,
    namespace: str = "default",
    *,
    labels: dict[str, str] | None = None,
    ports: tuple[int, ...] = (80,),
    svc_type: str = "ClusterIP",
    **extra: Any,
) -> dict[str, Any]:
    """A Service with bare ports; `extra` are more spec fields."""
    return manifests.service(
        name, namespace, type=svc_type, ports=ports, labels=labels or None, spec=extra
    )


def endpoint_slice(
    name: str, service_name: str, ips: tuple[str, ...], namespace: str = "default"
) -> dict[str, Any]:
    """A slice of ready endpoints on no node, one bare port 8080."""
    endpoints = [manifests.endpoint(ip) for ip in ips]
    return manifests.endpoint_slice(name, service_name, endpoints, namespace, ports=(8080,))


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return manifests.node(name, labels=labels or {}, ready=True, spec=True)


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
