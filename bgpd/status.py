"""The speaker's HTTP listeners: the network port (``--metrics-address``, default
127.0.0.1:7473) and the control socket (``control.sock`` in the work directory, mode 0600).

Routes: ``GET /healthz`` (the process and its ExaBGP are alive), ``GET /readyz`` (synced,
ExaBGP's helper connected, routes applied), ``GET /status`` (JSON: peers, routes, mode,
counters; what ``kube-bgpd status`` prints), ``POST /drain`` (RFC 8326 drain, what
``kube-bgpd drain`` sends) and ``DELETE /drain`` (``kube-bgpd drain --cancel``). Other
modules mount more routes before start() with ``add_routes()`` (the metrics helper adds
``/metrics``).

Where each route is served is the one rule of exposure here (``NETWORK_ROUTES``): the
network port serves what probes and Prometheus need (``/metrics``, ``/healthz``,
``/readyz``) and ``/status`` only when the operator opts in (SpeakerConfig
``exposeStatus``), because it names peers, routes and annotations; a state change
(``/drain``) is never served there, only on the control socket, which a local user with
access to the work directory reaches (a DaemonSet runs with hostNetwork: its port is open
to every pod). The control socket serves every route.

It only serves what a ``StatusProvider`` (the speaker) gives it: it holds no state and
knows nothing of ExaBGP or Kubernetes. The large parts of ``/status`` (10,000s of routes)
come as ``Deferred`` values, built with the JSON text in a worker thread, so a request
holds the speaker's event loop only for the copies ``status()`` makes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bgpd.aiohttp_import import web


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

    async def cancel_drain(self) -> Mapping[str, Any]:
        """Take the operator's drain back; return the status of the drain after it."""
        ...


#: The control socket's name in the work directory (`kube-bgpd drain` and `status` use it).
CONTROL_SOCKET = "control.sock"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def network_routes(*, expose_status: bool) -> frozenset[str]:
    """The paths the network port serves (the control socket serves every path)."""
    base = {"/healthz", "/readyz", "/metrics"}
    return frozenset(base | {"/status"} if expose_status else base)


class StatusServer:
    """The network listener and the control socket, one aiohttp application each."""

    def __init__(
        self,
        address: str,
        provider: StatusProvider,
        *,
        control_socket: Path | None = None,
        expose_status: bool = False,
    ) -> None:
        self.host, self.port = parse_address(address)
        self.provider = provider
        self.control_socket = control_socket
        self.expose_status = expose_status
        self.app = web.Application()
        self.control = web.Application()
        self.add_routes(
            [
                web.get("/healthz", self._healthz),
                web.get("/readyz", self._readyz),
                web.get("/status", self._status),
                web.post("/drain", self._drain),
                web.delete("/drain", self._cancel_drain),
            ]
        )
        self._runners: list[web.AppRunner] = []

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Mount more routes (before start(): aiohttp freezes the router then): all on
        the control socket, those network_routes() names on the network port."""
        routes = list(routes)
        exposed = network_routes(expose_status=self.expose_status)
        self.control.add_routes(routes)
        self.app.add_routes(
            [r for r in routes if isinstance(r, web.RouteDef) and r.path in exposed]
        )

    async def start(self) -> None:
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        await web.TCPSite(runner, self.host, self.port).start()
        if self.port == 0:  # tests ask for any free port
            self.port = int(runner.addresses[0][1])
        if self.control_socket is not None:
            control = web.AppRunner(self.control, access_log=None)
            await control.setup()
            self._runners.append(control)
            # A socket left by an earlier run of this speaker (the work directory is
            # locked, so no other speaker owns it).
            if self.control_socket.is_socket():
                self.control_socket.unlink()
            # Created 0600 from the start (no window in which others could connect).
            previous = os.umask(0o177)
            try:
                await web.UnixSite(control, str(self.control_socket)).start()
            finally:
                os.umask(previous)

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners = []

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

    async def _cancel_drain(self, _request: web.Request) -> web.Response:
        return web.json_response(dict(await self.provider.cancel_drain()))
