"""`kubectl bgpd` against the API simulator fed by a real speaker: `kube-bgpd speaker
--config-from-cluster` with two passive BGP peers on loopback writes its status objects,
and the plugin (through the real kubectl) shows the speaker's own decision (the same as
`kube-bgpd explain --from-speaker`) with each route advertised, then not advertised to
the peer whose session went down; `kubectl bgpd peers` shows the sessions."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from apisim_helpers import KUBECTL
from k8s_kit import (
    endpoint_slice,
    explain_from_speaker,
    free_port,
    kube_bgpd,
    lb_service,
    simulator,
)

from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.bgp_peer import PassivePeer
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(180)]

NS = "metallb-system"
BIN = Path(sys.executable).parent


def seed(sim: ApiSimulator, work: Path, peers: dict[str, PassivePeer]) -> None:
    objs = [
        manifests.pool("svc", ["10.99.5.0/24"]),
        manifests.advertisement("svc", ipAddressPools=["svc"]),
        manifests.speaker_config(workDir=str(work), statusInterval="0.2s", exposeStatus=True),
    ]
    objs += [
        manifests.bgp_peer(name, my_asn=64513, peer_asn=64512, address=p.host, peerPort=p.port)
        for name, p in peers.items()
    ]
    for obj in objs:
        sim.store.create(obj, namespace=NS)
    sim.store.create(manifests.node("n1", addresses=["127.0.0.1"]))
    sim.store.create(lb_service("web", ips=("10.99.5.1",)))
    sim.store.create(endpoint_slice("web-a", "web", (("10.1.0.1", "n1", True),)))


def plugin(kubeconfig: Path, *args: str) -> dict[str, Any]:
    """`kubectl bgpd ARGS -o json` through the real kubectl, the plugin found on PATH."""
    proc = subprocess.run(
        [KUBECTL, "bgpd", *args, "-o", "json", "--kubeconfig", str(kubeconfig)],
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


async def advertised(kubeconfig: Path) -> dict[str, bool | None]:
    doc = await asyncio.to_thread(plugin, kubeconfig, "inspect", "default/web")
    (n1,) = doc["nodes"]
    return {r["peer"]: r["advertised"] for r in n1["routes"]}


async def test_inspect_and_peers_follow_a_real_speaker(tmp_path: Path) -> None:
    with (
        PassivePeer(host="127.0.0.1", port=free_port(below=16385)) as tor,
        PassivePeer(host="127.0.0.2", port=free_port("127.0.0.2", below=16385)) as tor2,
    ):
        async with simulator(tmp_path, crds=True) as (sim, kubeconfig):
            seed(sim, tmp_path / "work", {"tor": tor, "tor2": tor2})
            port = free_port()
            argv = ["speaker", "--config-from-cluster", "--node-name", "n1"]
            argv += ["--kubeconfig", str(kubeconfig), "--metrics-address", f"127.0.0.1:{port}"]
            async with kube_bgpd(tmp_path, tmp_path / "speaker.log", *argv) as proc:
                want = {"tor": True, "tor2": True}
                await _until(kubeconfig, want, "advertised to both peers")
                # The plugin's decision is the running speaker's.
                doc = await asyncio.to_thread(plugin, kubeconfig, "inspect", "default/web")
                live = await asyncio.to_thread(explain_from_speaker, port, "default/web")
                (n1,) = doc["nodes"]
                assert [(r["prefix"], r["peer"]) for r in n1["routes"]] == [
                    (r["prefix"], r["peer"]) for r in live["routes"]
                ]
                assert n1["skipped"] == live["skipped"] == []
                assert doc["allocation"]["ips"] == ["10.99.5.1"]
                peers = await asyncio.to_thread(plugin, kubeconfig, "peers")
                (node,) = peers["nodes"]
                assert [(s["peer"], s["state"], s["advertised"]) for s in node["sessions"]] == [
                    ("tor", "up", 1),
                    ("tor2", "up", 1),
                ]

                # A router goes away: inspect shows the route not advertised there.
                tor2.close()
                await _until(kubeconfig, {"tor": True, "tor2": False}, "tor2 not advertised")
                peers = await asyncio.to_thread(plugin, kubeconfig, "peers")
                states = {s["peer"]: s["state"] for s in peers["nodes"][0]["sessions"]}
                assert states["tor"] == "up"
                assert states["tor2"] != "up"
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 30) == 0


async def _until(kubeconfig: Path, want: dict[str, bool | None], what: str) -> None:
    async def check() -> bool:
        return await advertised(kubeconfig) == want

    await wait_until_async(check, within=60, what=f"inspect: {what}")
