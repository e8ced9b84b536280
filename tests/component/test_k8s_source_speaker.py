"""`kube-bgpd speaker --with-controller` against the API simulator: the Kubernetes source
and the in-process controller wired into the real speaker process.

The speaker runs in the root namespace with a BGP peer on a loopback address where
nothing listens (the session stays down; routes at a real peer are the lab and e2e tests'
job). What is checked here is the wiring: the controller allocates the Service's IP, the
speaker's decision from the watched cluster shows up as Events on the Service, an
endpoint change flips them, `/status` reports the source, and SIGTERM releases the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from k8s_kit import endpoint_slice, free_port, lb_service, node, simulator

from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.processes import fast_lease_argv
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))


def config_text(peer_port: int, work: Path, exabgp_binary: str | None = None) -> str:
    # /status on the network listener too (SpeakerConfig exposeStatus): read over TCP here.
    speaker = manifests.speaker_config(workDir=str(work), drainWindow="1s", exposeStatus=True)
    if exabgp_binary is not None:
        speaker["spec"]["exabgpBinary"] = exabgp_binary
    docs = [
        manifests.pool("svc", ["10.99.5.0/24"]),
        manifests.bgp_peer(
            "tor",
            my_asn=64513,
            peer_asn=64512,
            address="127.0.0.2",
            peerPort=peer_port,
            holdTime="9s",
        ),
        manifests.advertisement("svc", ipAddressPools=["svc"]),
        speaker,
    ]
    return yaml.safe_dump_all(docs)


def speaker_events(sim: ApiSimulator, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in sim.store.list("events")
        if e["involvedObject"]["name"] == name
        and e.get("source", {}).get("component") == "kube-bgpd-speaker"
    ]


def ingress(sim: ApiSimulator, name: str) -> list[str]:
    obj = sim.store.get("services", name, "default")
    assert obj is not None
    entries = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [e["ip"] for e in entries]


async def get_text(port: int, path: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        assert response.status == 200
        return await response.text()


async def get_status(port: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(await get_text(port, "/status"))
    return doc


@contextlib.asynccontextmanager
async def speaker(
    tmp_path: Path, kubeconfig: Path, status_port: int, exabgp_binary: str | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    config = tmp_path / "config.yaml"
    config.write_text(config_text(free_port(), tmp_path / "work", exabgp_binary))
    log = tmp_path / "speaker.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            KUBE_BGPD,
            "speaker",
            "--config",
            str(config),
            "--node-name",
            "n1",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-address",
            f"127.0.0.1:{status_port}",
            "--with-controller",
            "--lease-namespace",
            "default",
            *fast_lease_argv(),
            stdout=out,
            stderr=out,
            env={**os.environ, "HOME": str(tmp_path)},
        )
        try:
            yield proc
        except BaseException:
            print(log.read_text())
            raise
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def test_speaker_with_controller_from_the_api(tmp_path: Path) -> None:
    async with simulator(tmp_path) as (sim, kubeconfig):
        sim.store.create(node("n1"))
        sim.store.create(lb_service("web"))
        sim.store.create(endpoint_slice("web-a", "web", (("10.1.0.1", "n1", True),)))
        port = free_port()
        async with speaker(tmp_path, kubeconfig, port) as proc:
            # The in-process controller allocates; the speaker's decision follows.
            await wait_until_async(
                lambda: ingress(sim, "web") == ["10.99.5.0"], within=30, what="IP"
            )
            await wait_until_async(
                lambda: [r for r, _ in speaker_events(sim, "web")] == ["nodeAssigned"],
                within=30,
                what="nodeAssigned Event",
            )
            status = await get_status(port)
            assert status["source"] == {"synced": True, "stale": False}
            metrics = await get_text(port, "/metrics")
            # The in-process controller's pool usage sits beside the speaker's metrics.
            assert 'kube_bgpd_pool_addresses_in_use{pool="svc"} 1.0' in metrics
            assert 'kube_bgpd_watch_relists_total{kind="EndpointSlice"} 1.0' in metrics

            sim.store.patch(
                "endpointslices",
                "web-a",
                {
                    "endpoints": [
                        {
                            "addresses": ["10.1.0.1"],
                            "nodeName": "n1",
                            "conditions": {"ready": False},
                        }
                    ]
                },
                namespace="default",
            )
            await wait_until_async(
                lambda: len(speaker_events(sim, "web")) == 2, within=30, what="second Event"
            )
            reason, message = speaker_events(sim, "web")[1]
            assert reason == "nodeUnassigned"
            assert message.startswith("node 'n1' stopped announcing: noEndpoints")
            lease = sim.store.get("leases", "kube-bgpd-controller", "default")
            assert lease is not None
            assert lease["spec"].get("holderIdentity")

            # The Node's drain annotation, through the Node watch: the speaker drains;
            # removing the annotation ends the drain.
            def mode_is(mode: str, source: str | None) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    status = await get_status(port)
                    return (status["mode"], status["drain"]["source"]) == (mode, source)

                return check

            drain = {"metadata": {"annotations": {"kube-bgpd.io/drain": "true"}}}
            sim.store.patch("nodes", "n1", drain)
            await wait_until_async(
                mode_is("draining", "annotation"), within=30, what="drain from the annotation"
            )
            sim.store.patch("nodes", "n1", {"metadata": {"annotations": None}})
            await wait_until_async(mode_is("normal", None), within=30, what="annotation removed")

            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        lease = sim.store.get("leases", "kube-bgpd-controller", "default")
        assert lease is not None
        assert not lease["spec"].get("holderIdentity"), "released on SIGTERM"


@pytest.mark.parametrize(
    "binary",
    [
        pytest.param("/nonexistent/exabgp", id="missing"),
        pytest.param("/bin/false", id="exits-at-once"),
    ],
)
async def test_failing_exabgp_with_controller_exits_with_one_clear_line(
    tmp_path: Path, binary: str
) -> None:
    """ExaBGP that cannot start, with the in-process controller beside it: the process
    does not hang (it used to, ignoring SIGTERM); it ends by itself with exit 1 and one
    critical line saying why, or at once on SIGTERM if it is still retrying."""
    async with simulator(tmp_path) as (sim, kubeconfig):
        sim.store.create(node("n1"))
        async with speaker(tmp_path, kubeconfig, free_port(), exabgp_binary=binary) as proc:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 60)
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 20)
    out = (tmp_path / "speaker.log").read_text()
    assert proc.returncode == 1, out
    critical = [line for line in out.splitlines() if "CRITICAL" in line or "critical" in line]
    assert len(critical) == 1, out
    assert "Traceback" not in out
