"""The speaker's HTTP listener (``--metrics-address``, default 127.0.0.1:7473).

Routes: ``GET /healthz`` (the process and its ExaBGP are alive), ``GET /readyz`` (synced,
ExaBGP's helper connected, routes applied), ``GET /status`` (JSON: peers, routes, mode,
counters; what ``kube-bgpd status`` prints), ``POST /drain`` (RFC 8326 drain, what
``kube-bgpd drain`` sends). Other modules mount more routes before start() with
``add_routes()`` (the metrics helper adds ``/metrics``).

It only serves what a ``StatusProvider`` (the speaker) gives it: it holds no state and
knows nothing of ExaBGP or Kubernetes. The large parts of ``/status`` (10,000s of routes)
come as ``Deferred`` values, built with the JSON text in a worker thread, so a request
holds the speaker's event loop only for the copies ``status()`` makes.

It listens on loopback by default because ``POST /drain`` withdraws the node's routes:
exposing it is the operator's choice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web


@dataclass(frozen=True, slots=True)
class Deferred:
    """A value of the status document built later, off the event loop, by `build`:
    `build` must read only data that cannot change (a Decision, a copy made when
    status() ran)."""

    build: Callable[[], Any]


def materialise(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document with every Deferred value built."""
    return {k: v.build() if isinstance(v, Deferred) else v for k, v in doc.items()}


class StatusProvider(Protocol):
    def status(self) -> Mapping[str, Any]:
        """The JSON document of GET /status (values may be Deferred)."""
        ...

    def health(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, str]: ...

    async def drain(self) -> Mapping[str, Any]:
        """Start a drain (idempotent); return the status of it."""
        ...


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class StatusServer:
    def __init__(self, address: str, provider: StatusProvider) -> None:
        self.host, self.port = parse_address(address)
        self.provider = provider
        self.app = web.Application()
        self.app.add_routes(
            [
                web.get("/healthz", self._healthz),
                web.get("/readyz", self._readyz),
                web.get("/status", self._status),
                web.post("/drain", self._drain),
            ]
        )
        self._runner: web.AppRunner | None = None

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Mount more routes (before start(): aiohttp freezes the router then)."""
        self.app.add_routes(list(routes))

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:  # tests ask for any free port
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        ok, why = self.provider.health()
        return web.Response(text=why + "\n", status=200 if ok else 503)

    async def _readyz(self, _request: web.Request) -> web.Response:
        ok, why = self.provider.readiness()
        return web.Response(text=why + "\n", status=200 if ok else 503)

    async def _status(self, _request: web.Request) -> web.Response:
        doc = self.provider.status()
        body = await asyncio.to_thread(lambda: json.dumps(materialise(doc)).encode())
        return web.Response(body=body, content_type="application/json")

    async def _drain(self, _request: web.Request) -> web.Response:
        return web.json_response(dict(await self.provider.drain()), status=202)
