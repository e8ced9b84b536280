"""A stand-in for kube-proxy's health answers, per lab node: a lab component, not kube-proxy.

Role: the speaker's SpeakerConfig dataPlaneCheck asks kube-proxy whether the node's data
plane works; the lab has no kube-proxy, so each node namespace runs this server, which
answers exactly as kube-proxy does (pkg/proxy/healthcheck):

* ``/healthz`` (any path) on the healthz port (10256): 200 when healthy, 503 when not,
  ``{"lastUpdated": "...", "currentTime": "...", "nodeEligible": true}``;
* each Service's healthCheckNodePort, any path: 200 when the node has local endpoints of
  that Service and the proxy is healthy, 503 otherwise, ``{"service": {"namespace":
  "...", "name": "..."}, "localEndpoints": N, "serviceProxyHealthy": true}``.

Both with ``Content-Type: application/json`` and ``X-Content-Type-Options: nosniff``, as
kube-proxy sends them. What it answers comes from the ``--state`` file (``write_state``),
read at every request: ``{"healthy": bool, "services": {"ns/name": {"port": P,
"localEndpoints": N}}}`` (absent file: healthy, no Service). The Services' ports follow
the file within ``RESCAN`` seconds, as kube-proxy opens a healthCheckNodePort when a Local
Service appears. The lab writes it (``Lab.set_services``, ``Lab.set_proxy_health``).

Run: ``python -m kbgpd_lab.lab.healthserver --state FILE [--port 10256] [--address
127.0.0.1]``; prints ``ready`` once listening, stops on SIGTERM/SIGINT. What it must not
do: bind outside the namespace it is started in (the lab starts it through ``ip netns
exec``), or judge anything itself: the state file says.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

#: kube-proxy's default --healthz-bind-address port.
HEALTHZ_PORT = 10256

_HEADERS = {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}


def read_state(path: Path) -> dict[str, Any]:
    """The state file's answer (absent or unreadable mid-write: healthy, the default)."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def write_state(path: Path, *, healthy: bool, services: Mapping[str, tuple[int, int]]) -> None:
    """Write the state atomically: `services` maps namespace/name to (healthCheckNodePort,
    local endpoint count)."""
    doc = {
        "healthy": healthy,
        "services": {k: {"port": p, "localEndpoints": n} for k, (p, n) in services.items()},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def service_ports(state: Mapping[str, Any]) -> dict[int, str]:
    """healthCheckNodePort -> namespace/name, from the state."""
    services = state.get("services", {})
    if not isinstance(services, dict):
        return {}
    return {int(v["port"]): k for k, v in services.items() if isinstance(v, dict) and "port" in v}


def _go_time(at: datetime) -> str:
    """A time as kube-proxy prints it (Go's time.Time String())."""
    return at.strftime("%Y-%m-%d %H:%M:%S.%f000 +0000 UTC")


def healthz_answer(state: Mapping[str, Any], started: datetime) -> tuple[int, str]:
    """kube-proxy's /healthz: status and body."""
    healthy = state.get("healthy", True) is not False
    now = datetime.now(UTC)
    body = (
        f'{{"lastUpdated": {json.dumps(_go_time(now if healthy else started))},'
        f'"currentTime": {json.dumps(_go_time(now))}, "nodeEligible": true}}'
    )
    return (200 if healthy else 503), body


def service_answer(state: Mapping[str, Any], key: str) -> tuple[int, str]:
    """kube-proxy's healthCheckNodePort answer for Service `key` (namespace/name)."""
    namespace, _, name = key.partition("/")
    entry = state.get("services", {}).get(key, {})
    count = entry.get("localEndpoints", 0) if isinstance(entry, dict) else 0
    healthy = state.get("healthy", True) is not False
    body = json.dumps(
        {
            "service": {"namespace": namespace, "name": name},
            "localEndpoints": count,
            "serviceProxyHealthy": healthy,
        }
    )
    return (200 if count > 0 and healthy else 503), body


#: Seconds between two looks at the state file for Services' ports to open or close.
RESCAN = 0.1


async def _site(handler: Any, address: str, port: int) -> web.AppRunner:
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner


async def serve(state_path: Path, address: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    started = datetime.now(UTC)

    async def healthz(request: web.Request) -> web.Response:
        status, body = healthz_answer(read_state(state_path), started)
        return web.Response(status=status, text=body, headers=_HEADERS)

    def for_service(key: str) -> Any:
        async def answer(request: web.Request) -> web.Response:
            status, body = service_answer(read_state(state_path), key)
            return web.Response(status=status, text=body, headers=_HEADERS)

        return answer

    main_site = await _site(healthz, address, port)
    open_ports: dict[int, tuple[str, web.AppRunner]] = {}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def rescan() -> None:
        wanted = service_ports(read_state(state_path))
        for p, (key, runner) in list(open_ports.items()):
            if wanted.get(p) != key:
                await runner.cleanup()
                del open_ports[p]
        for p, key in wanted.items():
            if p not in open_ports:
                open_ports[p] = (key, await _site(for_service(key), address, p))

    await rescan()
    print("ready", flush=True)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RESCAN)
        await rescan()
    for _, runner in open_ports.values():
        await runner.cleanup()
    await main_site.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--state", required=True, type=Path, help="the state file to answer from")
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=HEALTHZ_PORT)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.state, args.address, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
