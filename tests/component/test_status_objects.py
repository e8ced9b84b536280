"""The speaker's status objects in the cluster, against the API simulator with the real
`kube-bgpd speaker` (the kubernetes client inside) and two passive BGP peers on loopback:
MetalLB's ServiceBGPStatus appears with the peers that have the Service's routes, loses a
peer whose session goes down, disappears with the Service; the node's BGPNodeStatus
follows its sessions and goes with the Node (garbage collection through its owner
reference).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from k8s_kit import endpoint_slice, free_port, kube_bgpd, lb_service, simulator

from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.bgp_peer import PassivePeer
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

NS = "metallb-system"
#: Where the speaker writes (its own namespace: no POD_NAMESPACE here).
OWN = "default"


def seed(sim: ApiSimulator, work: Path, peers: dict[str, PassivePeer]) -> None:
    objs = [
        manifests.pool("svc", ["10.99.5.0/24"]),
        manifests.advertisement("svc", ipAddressPools=["svc"]),
        manifests.speaker_config(workDir=str(work), drainWindow="1s", statusInterval="0.2s"),
    ]
    for name, peer in peers.items():
        objs.append(
            manifests.bgp_peer(
                name, my_asn=64513, peer_asn=64512, address=peer.host, peerPort=peer.port
            )
        )
    for obj in objs:
        sim.store.create(obj, namespace=NS)
    sim.store.create(manifests.node("n1", addresses=["127.0.0.1"]))
    sim.store.create(lb_service("web", ips=("10.99.5.1",)))
    sim.store.create(endpoint_slice("web-a", "web", (("10.1.0.1", "n1", True),)))


def service_objects(sim: ApiSimulator) -> list[dict[str, Any]]:
    return sim.store.list("servicebgpstatuses", OWN)


def peers_of_web(sim: ApiSimulator) -> list[list[str]]:
    return [o.get("status", {}).get("peers", []) for o in service_objects(sim)]


def node_status(sim: ApiSimulator) -> dict[str, Any] | None:
    obj = sim.store.get("bgpnodestatuses", "n1", OWN)
    return None if obj is None else obj.get("status")


def sessions_up(sim: ApiSimulator) -> int | None:
    status = node_status(sim)
    return None if status is None else status.get("summary", {}).get("sessionsUp")


async def test_status_objects_follow_sessions_services_and_the_node(tmp_path: Path) -> None:
    with (
        PassivePeer(host="127.0.0.1", port=free_port(below=16385)) as tor,
        PassivePeer(host="127.0.0.2", port=free_port("127.0.0.2", below=16385)) as tor2,
    ):
        async with simulator(tmp_path, crds=True) as (sim, kubeconfig):
            seed(sim, tmp_path / "work", {"tor": tor, "tor2": tor2})
            argv = ["speaker", "--config-from-cluster", "--node-name", "n1"]
            argv += [
                "--kubeconfig",
                str(kubeconfig),
                "--metrics-address",
                f"127.0.0.1:{free_port()}",
            ]
            async with kube_bgpd(tmp_path, tmp_path / "speaker.log", *argv) as proc:
                # Both sessions up: one ServiceBGPStatus, MetalLB's shape.
                await wait_until_async(
                    lambda: peers_of_web(sim) == [["tor", "tor2"]],
                    within=60,
                    what="the ServiceBGPStatus with both peers",
                )
                [obj] = service_objects(sim)
                node = sim.store.get("nodes", "n1")
                assert node is not None
                assert obj["metadata"]["name"].startswith("bgp-")
                assert obj["metadata"]["labels"] == {
                    "metallb.io/node": "n1",
                    "metallb.io/service-name": "web",
                    "metallb.io/service-namespace": "default",
                }
                assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [
                    node["metadata"]["uid"]
                ]
                assert obj["status"] == {
                    "node": "n1",
                    "serviceName": "web",
                    "serviceNamespace": "default",
                    "peers": ["tor", "tor2"],
                }
                await wait_until_async(
                    lambda: (
                        (node_status(sim) or {}).get("summary")
                        == {"sessions": 2, "sessionsUp": 2, "advertised": 2}
                    ),
                    within=30,
                    what="BGPNodeStatus: 2 sessions up, 2 routes advertised",
                )
                status = node_status(sim)
                assert status is not None
                assert [s["peer"] for s in status["sessions"]] == ["tor", "tor2"]
                first = status["sessions"][0]
                assert first["state"] == "up"
                assert "establishedAt" in first
                assert (first["desired"], first["accepted"], first["advertised"]) == (1, 1, 1)
                assert status["config"] == {"source": "cluster", "stale": False, "errors": []}
                assert status["drain"] == {"state": "normal"}

                # A router goes away: the Service's object loses that peer.
                tor2.close()
                await wait_until_async(
                    lambda: peers_of_web(sim) == [["tor"]], within=30, what="tor2 dropped"
                )
                await wait_until_async(
                    lambda: sessions_up(sim) == 1, within=30, what="BGPNodeStatus, 1 up"
                )

                # The Service goes: so does its object.
                sim.store.delete("services", "web", "default")
                await wait_until_async(
                    lambda: not service_objects(sim), within=30, what="ServiceBGPStatus deleted"
                )

                # The Node goes: the garbage collector takes its BGPNodeStatus (and one
                # a write in flight creates again, owned by the Node that is gone).
                sim.store.delete("nodes", "n1")
                assert node_status(sim) is None
                await wait_until_async(
                    lambda: any(
                        "speaker.node_missing" in line
                        for line in (tmp_path / "speaker.log").read_text().splitlines()
                    ),
                    within=30,
                    what="the speaker seeing the Node gone",
                )
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 30) == 0
            assert node_status(sim) is None
