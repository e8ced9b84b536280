"""`kube-bgpd speaker --config-from-cluster --with-controller` against the API simulator:
the configuration comes from the cluster's objects, a live change reaches the decision,
an invalid edit is reported (Warning Event, `kube_bgpd_config_stale` 1, the reason in
/status) and changes nothing in force.

The BGP peer is a loopback address where nothing listens (the session stays down; routes
at real routers are the lab's job); the decision in /status is what is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from k8s_kit import endpoint_slice, free_port, kube_bgpd, lb_service, node, simulator

from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit import manifests, scale
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
NS = "metallb-system"


def seed(sim: ApiSimulator, work: Path) -> None:
    for obj in (
        manifests.pool("svc", ["10.99.5.0/24"]),
        manifests.bgp_peer(
            "tor",
            my_asn=64513,
            peer_asn=64512,
            address="127.0.0.2",
            peerPort=free_port(below=16385),
        ),
        manifests.advertisement("svc", ipAddressPools=["svc"]),
        # exposeStatus: the test reads /status over TCP (off by default: issue 15).
        manifests.speaker_config(workDir=str(work), drainWindow="1s", exposeStatus=True),
    ):
        sim.store.create(obj, namespace=NS)
    sim.store.create(node("n1"))
    sim.store.create(lb_service("web"))
    sim.store.create(endpoint_slice("web-a", "web", (("10.1.0.1", "n1", True),)))


async def fetch(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def status(port: int) -> dict[str, Any]:
    """/status; empty while the listener is not up yet."""
    try:
        doc: dict[str, Any] = json.loads((await fetch(port, "/status"))[1])
    except aiohttp.ClientConnectorError:
        return {}
    return doc


def explained_communities(doc: dict[str, Any]) -> list[list[str]]:
    explain = doc.get("explain") or {}
    return [list(r.get("communities", [])) for r in explain.get("routes", [])]


@contextlib.asynccontextmanager
async def speaker(
    tmp_path: Path,
    kubeconfig: Path,
    port: int,
    *,
    with_controller: bool = True,
    node_name: str = "n1",
) -> AsyncIterator[asyncio.subprocess.Process]:
    controller = (
        ["--with-controller", "--lease-namespace", "default", "--retry-period", "0.25"]
        if with_controller
        else []
    )
    argv = ["speaker", "--config-from-cluster", "--node-name", node_name]
    argv += ["--kubeconfig", str(kubeconfig), "--metrics-address", f"127.0.0.1:{port}"]
    async with kube_bgpd(tmp_path, tmp_path / "speaker.log", *argv, *controller) as proc:
        yield proc


def ingress(sim: ApiSimulator) -> list[str]:
    obj = sim.store.get("services", "web", "default")
    assert obj is not None
    entries = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [e["ip"] for e in entries]


async def test_speaker_follows_the_clusters_configuration(tmp_path: Path) -> None:
    async with simulator(tmp_path, crds=True) as (sim, kubeconfig):
        seed(sim, tmp_path / "work")
        port = free_port()
        async with speaker(tmp_path, kubeconfig, port) as proc:
            # The in-process controller allocates from the cluster's pool; the speaker
            # decides with the cluster's peer.
            await wait_until_async(lambda: ingress(sim) == ["10.99.5.0"], within=30, what="IP")

            async def routes() -> list[list[str]]:
                return explained_communities(await status(port))

            await wait_until_async(routes, within=30, what="a route decided")
            assert await routes() == [[]]

            # A live change: a community added to the advertisement.
            sim.store.apply(
                {
                    **manifests.advertisement(
                        "svc", ipAddressPools=["svc"], communities=["65000:7"]
                    ),
                    "metadata": {"name": "svc", "namespace": NS},
                }
            )

            async def has_community() -> bool:
                return await routes() == [["65000:7"]]

            await wait_until_async(has_community, within=30, what="community in force")

            # An invalid edit: reported, nothing in force changes.
            bad = manifests.bgp_peer(
                "tor", my_asn=64513, peer_asn=64512, address="127.0.0.2", holdTime="banana"
            )
            sim.store.apply({**bad, "metadata": {"name": "tor", "namespace": NS}})

            async def stale() -> bool:
                text = (await fetch(port, "/metrics"))[1]
                return "kube_bgpd_config_stale 1.0" in text

            await wait_until_async(stale, within=30, what="config_stale 1")
            # /readyz gives the same reason once ExaBGP's helper is connected, which
            # needs a peer (tests/unit/test_health.py checks the answer).
            config = (await status(port))["config"]
            assert config["stale"] is True
            assert "BGPPeer metallb-system/tor: spec.holdTime" in config["stale_reason"]
            assert await routes() == [["65000:7"]]
            events = [
                e
                for e in sim.store.list("events", NS)
                if e["involvedObject"]["name"] == "tor" and e["type"] == "Warning"
            ]
            assert events, "a Warning Event on the BGPPeer"
            assert events[0]["reason"] == "InvalidConfiguration"

            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0


#: The churn of the test below: endpoint changes per second, for how long.
RATE = 1000
CHURN_SECONDS = 4.0
SERVICES = 40


async def test_a_config_change_under_endpoint_churn_is_not_lost(tmp_path: Path) -> None:
    """1,000 EndpointSlice changes a second stream in while a community is added to the
    advertisement: every route ends up with it, and with the endpoints' last state."""
    async with simulator(tmp_path, crds=True) as (sim, kubeconfig):
        seed(sim, tmp_path / "work")
        sim.store.create(node("node1"))  # where kbgpd_lab.kit.scale puts the endpoints
        for k in range(SERVICES):
            sim.store.create(scale.local_service(f"load{k}", f"10.99.5.{100 + k}"))
            sim.store.create(scale.node1_slice(f"load{k}", True))
        port = free_port()
        async with speaker(
            tmp_path, kubeconfig, port, with_controller=False, node_name="node1"
        ) as proc:

            async def routes() -> list[list[str]]:
                return explained_communities(await status(port))

            async def all_routes() -> bool:
                return len(await routes()) == SERVICES

            await wait_until_async(all_routes, within=30, what="every load Service routed")
            ready = [True] * SERVICES
            written = 0
            start = time.monotonic()
            applied_at = None
            while (elapsed := time.monotonic() - start) < CHURN_SECONDS:
                while written < int(elapsed * RATE):
                    k = written % SERVICES
                    ready[k] = not ready[k]
                    sim.store.patch(
                        "endpointslices",
                        f"load{k}-a",
                        {"endpoints": scale.node1_endpoints(ready[k])},
                        namespace="default",
                    )
                    written += 1
                if applied_at is None and elapsed > CHURN_SECONDS / 2:
                    applied_at = elapsed
                    sim.store.apply(
                        {
                            **manifests.advertisement(
                                "svc", ipAddressPools=["svc"], communities=["65000:9"]
                            ),
                            "metadata": {"name": "svc", "namespace": NS},
                        }
                    )
                await asyncio.sleep(0.002)
            rate = written / (time.monotonic() - start)
            print(f"{written} endpoint changes at {rate:.0f}/s")
            # The writer aims at RATE; on a loaded machine the simulator's own work (it
            # serves the speaker's watch on this loop) can slow it. A generous floor:
            # the change went in while a stream of endpoint changes did.
            assert written > CHURN_SECONDS * RATE / 4
            want = sum(ready)

            async def settled() -> bool:
                got = await routes()
                return len(got) == want and all(c == ["65000:9"] for c in got)

            await wait_until_async(settled, within=30, what="the community on every route")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
