"""Events for every announce change, drains included, against the API simulator:

* the real speaker process, drained by its Node's annotation: Events on the Node
  (DrainStarted, Drained, Undrained) and on the Service ("stopped announcing: draining",
  then announcing again), read back with the real kubectl;
* 10,000 Services changing at once through the real EventRecorder: a bounded number of
  Events, the rest counted in aggregated Events on the Node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from apisim_helpers import KUBECTL
from k8s_kit import (
    client_for,
    endpoint_slice,
    explain_from_speaker,
    free_port,
    kube_bgpd,
    lb_service,
    node,
    running,
    simulator,
)

from bgpd.config import load_config
from bgpd.decision import decide
from bgpd.model import ClusterSnapshot, Config, NodeName
from bgpd.objects import parse_cluster_dump
from k8s_watcher.event_budget import DEFAULT_LIMIT, EventBudget
from k8s_watcher.writer import AnnouncementEvents, EventRecorder
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit import manifests, scale
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(240)]


def kubectl_events(kubeconfig: Path) -> list[dict[str, Any]]:
    """Every Event, as the real kubectl lists them."""
    proc = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "events", "-A", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    items: list[dict[str, Any]] = json.loads(proc.stdout)["items"]
    return items


def on(sim: ApiSimulator, kind: str, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in sim.store.list("events")
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def inspect_n1(kubeconfig: Path, config: Path) -> dict[str, Any]:
    """Node n1's part of `kubectl bgpd inspect default/web` (the plugin found on PATH;
    the speaker is configured by files, so the same files are given)."""
    bin_dir = Path(sys.executable).parent
    proc = subprocess.run(
        [
            KUBECTL,
            "bgpd",
            "inspect",
            "default/web",
            "--config",
            str(config),
            "-o",
            "json",
            "--kubeconfig",
            str(kubeconfig),
        ],
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (node,) = [n for n in json.loads(proc.stdout)["nodes"] if n["node"] == "n1"]
    result: dict[str, Any] = node
    return result


def counts(sim: ApiSimulator, service: str) -> list[tuple[str, int]]:
    return [
        (e["reason"], e["count"])
        for e in sim.store.list("events")
        if e["involvedObject"]["kind"] == "Service" and e["involvedObject"]["name"] == service
    ]


def config_text(work: Path) -> str:
    speaker = manifests.speaker_config(workDir=str(work), drainWindow="1s", exposeStatus=True)
    return yaml.safe_dump_all(
        [
            manifests.pool("svc", ["10.99.5.0/24"]),
            manifests.bgp_peer(
                "tor",
                my_asn=64513,
                peer_asn=64512,
                address="127.0.0.2",
                peerPort=free_port(),
                holdTime="9s",
            ),
            manifests.advertisement("svc", ipAddressPools=["svc"]),
            speaker,
        ]
    )


@contextlib.asynccontextmanager
async def speaker(
    tmp_path: Path, kubeconfig: Path, status_port: int
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The speaker of node n1, configured by a file, watching the simulator."""
    config = tmp_path / "config.yaml"
    config.write_text(config_text(tmp_path / "work"))
    args = ("--config", str(config), "--node-name", "n1", "--kubeconfig", str(kubeconfig))
    address = f"127.0.0.1:{status_port}"
    log = tmp_path / "speaker.log"
    async with kube_bgpd(tmp_path, log, "speaker", *args, "--metrics-address", address) as proc:
        yield proc


async def test_a_drain_is_told_on_the_node_and_the_service(tmp_path: Path) -> None:
    async with simulator(tmp_path) as (sim, kubeconfig):
        sim.store.create(node("n1"))
        sim.store.create(lb_service("web", ips=("10.99.5.7",)))
        sim.store.create(endpoint_slice("web-a", "web", (("10.1.0.1", "n1", True),)))
        port = free_port()
        async with speaker(tmp_path, kubeconfig, port) as proc:
            await wait_until_async(
                lambda: [r for r, _ in on(sim, "Service", "web")] == ["nodeAssigned"],
                within=60,
                what="nodeAssigned Event",
            )
            # `kubectl bgpd inspect` computes what the running speaker decided.
            inspected, live = await asyncio.gather(
                asyncio.to_thread(inspect_n1, kubeconfig, tmp_path / "config.yaml"),
                asyncio.to_thread(explain_from_speaker, port, "default/web"),
            )
            assert inspected["routes"] == [
                {"prefix": r["prefix"], "peer": r["peer"], "advertised": None}
                for r in live["routes"]
            ]
            assert inspected["routes"], "n1 announces web"
            assert inspected["skipped"] == live["skipped"] == []
            sim.store.patch(
                "nodes", "n1", {"metadata": {"annotations": {"kube-bgpd.io/drain": "true"}}}
            )
            await wait_until_async(
                lambda: [r for r, _ in on(sim, "Node", "n1")] == ["DrainStarted", "Drained"],
                within=60,
                what="the drain's Node Events",
            )
            await wait_until_async(
                lambda: (
                    ("nodeUnassigned", "node 'n1' stopped announcing: draining")
                    in on(sim, "Service", "web")
                ),
                within=30,
                what="the Service's Event",
            )
            sim.store.patch("nodes", "n1", {"metadata": {"annotations": None}})
            await wait_until_async(
                lambda: [r for r, _ in on(sim, "Node", "n1")][-1:] == ["Undrained"],
                within=30,
                what="Undrained",
            )
            # Announcing again is the first Event once more: folded into it (count 2).
            await wait_until_async(
                lambda: counts(sim, "web") == [("nodeAssigned", 2), ("nodeUnassigned", 1)],
                within=30,
                what="announcing again",
            )
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        # kubectl shows them, the Node's with the kubelet's convention (uid = name).
        events = await asyncio.to_thread(kubectl_events, kubeconfig)
        node_events = [e for e in events if e["involvedObject"]["kind"] == "Node"]
        assert [e["reason"] for e in node_events] == ["DrainStarted", "Drained", "Undrained"]
        assert {e["involvedObject"]["uid"] for e in node_events} == {"n1"}
        assert "drain" in node_events[0]["message"]


def ten_thousand(tmp_path: Path, count: int) -> tuple[Config, ClusterSnapshot]:
    """`count` Local Services (kbgpd_lab.kit.scale: the benchmarks' shape), each with a
    ready endpoint on node1, and one peer: every one announced by node1."""
    objects: list[dict[str, Any]] = [manifests.node("node1", addresses=("172.31.250.11",))]
    for i in range(count):
        name = f"s{i}"
        objects.append(scale.local_service(name, f"10.98.{i // 250}.{i % 250 + 1}"))
        objects.append(scale.node1_slice(name, True))
    snapshot = parse_cluster_dump(json.dumps({"kind": "List", "items": objects}))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump_all(
            [
                manifests.pool("svc", ["10.98.0.0/16"]),
                manifests.bgp_peer("tor", my_asn=64513, peer_asn=64512, address="172.31.250.1"),
                manifests.advertisement("svc", ipAddressPools=["svc"]),
            ]
        )
    )
    loaded = load_config([str(config)])
    assert loaded.config is not None, loaded.errors
    return loaded.config, snapshot


async def test_ten_thousand_services_make_a_bounded_number_of_events(tmp_path: Path) -> None:
    count = 10_000
    cfg, snapshot = ten_thousand(tmp_path, count)
    decision = decide(cfg, snapshot, NodeName("node1"))
    assert len(decision.routes) == count
    async with (
        simulator(tmp_path) as (sim, kubeconfig),
        client_for(kubeconfig) as client,
    ):
        recorder = EventRecorder(client, component="kube-bgpd-speaker", host="node1")
        events = AnnouncementEvents(
            recorder, NodeName("node1"), budget=EventBudget(limit=DEFAULT_LIMIT, window=60.0)
        )
        async with running(recorder.run(), "events"):
            events.observe(None, decision, snapshot.services)
            events.set_withdrawn(True)
            await asyncio.wait_for(recorder.flush(), 60)
        # What a user sees: the real kubectl lists the same, bounded, Events.
        written = await asyncio.to_thread(kubectl_events, kubeconfig)
        assert len(written) == len(sim.store.list("events"))
        assert recorder.written == len(written)
        assert recorder.rate_limited == 0
        assert recorder.dropped == 0
    on_services = [e for e in written if e["involvedObject"]["kind"] == "Service"]
    on_node = [e for e in written if e["involvedObject"]["kind"] == "Node"]
    # The budget: 100 Services one by one, then one aggregated Event per group.
    assert len(on_services) == DEFAULT_LIMIT
    assert len(on_node) == 2
    counted = {
        e["reason"]: int(re.findall(r"(\d+) more Services", e["message"])[0]) for e in on_node
    }
    # No change lost: 10,000 announced then 10,000 withdrawn, told or counted.
    assert counted["nodeAssigned"] + DEFAULT_LIMIT == count
    assert counted["nodeUnassigned"] == count
