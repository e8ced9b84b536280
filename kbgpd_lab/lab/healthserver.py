"""A stand-in for kube-proxy's health answers, per lab node: a lab component, not kube-proxy.

Role: the speaker's SpeakerConfig dataPlaneCheck asks kube-proxy whether the node's data
plane works; the lab has no kube-proxy, so each node namespace runs this server, which
answers exactly as kube-proxy does (pkg/proxy/healthcheck):

* ``/healthz`` (any path) on the healthz port (10256): 200 when healthy, 503 when not,
  ``{"lastUpdated": "...", "currentTime": "...", "nodeEligible": true}``;
* each ``--service NAMESPACE/NAME=PORT`` (a healthCheckNodePort), any path: 200 when the
  node has local endpoints of that Service and the proxy is healthy, 503 otherwise,
  ``{"service": {"namespace": "...", "name": "..."}, "localEndpoints": N,
  "serviceProxyHealthy": true}``.

Both with ``Content-Type: application/json`` and ``X-Content-Type-Options: nosniff``, as
kube-proxy sends them. What it answers is read from the ``--state`` file at every
request, so a test turns a node unhealthy by writing that file (``Lab.set_proxy_health``):
``{"healthy": false}``, and ``{"localEndpoints": {"ns/name": 0}}`` for a Service (absent
file: healthy, one local endpoint per Service).

Run: ``python -m kbgpd_lab.lab.healthserver --state FILE [--port 10256] [--address
127.0.0.1] [--service ns/name=30101 ...]``; prints ``ready`` once listening, stops on
SIGTERM/SIGINT. What it must not do: bind outside the namespace it is started in (the
lab starts it through ``ip netns exec``), or judge anything itself: the state file says.
"""

from __future__ import annotations

import argparse
import asyncio
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


def write_state(path: Path, *, healthy: bool, local_endpoints: Mapping[str, int]) -> None:
    """Write the state atomically (the server reads it at every request)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"healthy": healthy, "localEndpoints": dict(local_endpoints)}))
    tmp.replace(path)


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
    counts = state.get("localEndpoints", {})
    count = counts.get(key, 1) if isinstance(counts, dict) else 1
    healthy = state.get("healthy", True) is not False
    body = json.dumps(
        {
            "service": {"namespace": namespace, "name": name},
            "localEndpoints": count,
            "serviceProxyHealthy": healthy,
        }
    )
    return (200 if count > 0 and healthy else 503), body


async def serve(state_path: Path, address: str, port: int, services: Mapping[str, int]) -> None:
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

    runners: list[web.AppRunner] = []
    for handler, at in [(healthz, port), *((for_service(k), p) for k, p in services.items())]:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, address, at).start()
        runners.append(runner)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    await stop.wait()
    for runner in runners:
        await runner.cleanup()


def _service(text: str) -> tuple[str, int]:
    key, sep, port = text.rpartition("=")
    if not sep or "/" not in key or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAMESPACE/NAME=PORT")
    return key, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--state", required=True, type=Path, help="the state file to answer from")
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=HEALTHZ_PORT)
    parser.add_argument("--service", type=_service, action="append", default=[])
    args = parser.parse_args(argv)
    asyncio.run(serve(args.state, args.address, args.port, dict(args.service)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
