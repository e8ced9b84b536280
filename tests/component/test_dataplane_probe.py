"""The data-plane probe (bgpd.speaker.probe) against the lab's kube-proxy stand-in
(kbgpd_lab.lab.healthserver) on 127.0.0.1, started and stopped by PID here, feeding the
verdicts (bgpd.speaker.dataplane) as the speaker does."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from bgpd.model import DataPlaneCheck, ServiceKey
from bgpd.speaker import dataplane
from bgpd.speaker.dataplane import DataPlaneState, Thresholds
from bgpd.speaker.probe import Round, ask, ask_round
from kbgpd_lab.lab.healthserver import write_state

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

WEB = ServiceKey("shop/web")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """The stand-in in a child process: healthz on one port, shop/web's
    healthCheckNodePort on another (from the state file)."""

    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "proxy-health.json"
        self.healthz_port = _free_port()
        self.service_port = _free_port()
        self.set(healthy=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbgpd_lab.lab.healthserver",
                "--state",
                str(self.state),
                "--port",
                str(self.healthz_port),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def check(self, **changes: object) -> DataPlaneCheck:
        return DataPlaneCheck(
            node_url=f"http://127.0.0.1:{self.healthz_port}/healthz",
            timeout=2.0,
            **changes,  # type: ignore[arg-type]
        )

    def set(self, *, healthy: bool, web_endpoints: int = 1) -> None:
        write_state(
            self.state, healthy=healthy, services={str(WEB): (self.service_port, web_endpoints)}
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    try:
        yield s
    finally:
        s.stop()


async def _round(check: DataPlaneCheck, services: dict[ServiceKey, int]) -> Round:
    async with aiohttp.ClientSession() as session:
        return await ask_round(session, check, services)


async def test_answers_as_kube_proxy_and_the_probe_reads_them(server: Server) -> None:
    check = server.check()
    ok = await _round(check, {WEB: server.service_port})
    assert ok.node.ok
    assert ok.services[WEB].ok
    server.set(healthy=True, web_endpoints=0)
    no_pods = await _round(check, {WEB: server.service_port})
    assert no_pods.node.ok
    assert not no_pods.services[WEB].ok
    assert no_pods.services[WEB].detail.startswith("HTTP 503 ")
    body = json.loads(no_pods.services[WEB].detail.removeprefix("HTTP 503 "))
    assert body == {
        "service": {"namespace": "shop", "name": "web"},
        "localEndpoints": 0,
        "serviceProxyHealthy": True,
    }
    server.set(healthy=False)
    broken = await _round(check, {WEB: server.service_port})
    assert not broken.node.ok
    assert not broken.services[WEB].ok
    node_body = json.loads(broken.node.detail.removeprefix("HTTP 503 "))
    assert set(node_body) == {"lastUpdated", "currentTime", "nodeEligible"}


async def test_verdicts_follow_the_answers_with_hysteresis(server: Server) -> None:
    """Healthy twice -> ready; unhealthy once -> still ready; three times -> not ready;
    then the server gone (connection refused) keeps it not ready."""
    check = server.check()
    thresholds = Thresholds(failures=3, successes=2)
    state = DataPlaneState()
    now = 0.0

    async def step() -> DataPlaneState:
        nonlocal now
        now += 1.0
        answers = await _round(check, {WEB: server.service_port})
        return dataplane.observe_round(
            state,
            node_ok=answers.node.ok,
            services_ok={k: a.ok for k, a in answers.services.items()},
            now=now,
            thresholds=thresholds,
        )

    state = await step()
    assert not state.node.ready  # not ready until proven
    state = await step()
    assert state.node.ready
    assert state.services[WEB].ready
    server.set(healthy=False)
    for _ in range(2):
        state = await step()
        assert state.node.ready
    state = await step()
    assert not state.node.ready
    assert not state.services[WEB].ready
    assert state.node.failed_at == now
    server.stop()
    refused = await _round(check, {})
    assert not refused.node.ok
    assert "ClientConnectorError" in refused.node.detail


async def test_an_endpoint_that_never_answers_fails_within_the_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        async with aiohttp.ClientSession() as session:
            loop = asyncio.get_running_loop()
            started = loop.time()
            answer = await ask(session, f"http://127.0.0.1:{port}/healthz", 0.3)
            took = loop.time() - started
    assert not answer.ok
    assert answer.detail == "no answer within 0.3s"
    assert took < 10  # bounded by the timeout, not by the server


async def test_unreachable_at_start_is_not_ready() -> None:
    check = DataPlaneCheck(node_url=f"http://127.0.0.1:{_free_port()}/healthz", timeout=2.0)
    state = DataPlaneState()
    for now in range(5):
        answers = await _round(check, {})
        state = dataplane.observe_round(
            state,
            node_ok=answers.node.ok,
            services_ok={},
            now=float(now),
            thresholds=Thresholds(failures=1, successes=1),
        )
        assert not state.node.ready
