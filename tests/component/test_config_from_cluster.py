"""ClusterConfig (`--config-from-cluster`) against the API simulator with the official client.

What an operator relies on: objects applied are the configuration in force; an invalid
edit is reported (Warning Event on the object, a stale reason) and changes nothing in
force; deleting every object is applied only after a list confirms it; a watch failure
keeps the last configuration; a status-only change hands nothing on; and `kube-bgpd
validate --kubeconfig` gives the verdict on what is deployed.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from k8s_kit import FAST, client_for, kube_bgpd, lb_service, running, simulator

from bgpd.cli import build_parser
from bgpd.cli import validate as validate_cli
from bgpd.model import Config
from k8s_watcher.client import KubeClient
from k8s_watcher.config_source import ClusterConfig
from k8s_watcher.writer import EventRecorder
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

NS = "metallb-system"


def obj(
    kind: str, name: str, spec: dict[str, Any], api: str = "metallb.io/v1beta1"
) -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def pool(name: str, *addresses: str) -> dict[str, Any]:
    return obj("IPAddressPool", name, {"addresses": list(addresses)})


def peer(name: str, address: str, **spec: Any) -> dict[str, Any]:
    body = {"myASN": 64512, "peerASN": 64500, "peerAddress": address, **spec}
    return obj("BGPPeer", name, body, "metallb.io/v1beta2")


def adv(name: str, communities: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"ipAddressPools": ["web"]}
    if communities is not None:
        spec["communities"] = communities
    return obj("BGPAdvertisement", name, spec)


def seed(sim: ApiSimulator) -> None:
    sim.store.create(pool("web", "10.99.0.0/24", "10.99.1.10-10.99.1.20"))
    sim.store.create(peer("tor", "172.31.0.1"))
    sim.store.create(adv("all", ["65000:1"]))
    sim.store.create(
        obj("Community", "aliases", {"communities": [{"name": "edge", "value": "65000:7"}]})
    )
    # Another namespace is not watched.
    sim.store.create(
        {
            **pool("elsewhere", "10.50.0.0/24"),
            "metadata": {"name": "elsewhere", "namespace": "other"},
        }
    )


Env = tuple[ApiSimulator, KubeClient, ClusterConfig, list[Config]]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with (
        simulator(tmp_path, crds=True) as (sim, kubeconfig),
        client_for(kubeconfig) as client,
    ):
        seed(sim)
        recorder = EventRecorder(client, component="test")
        cluster = ClusterConfig(client, namespace=NS, timing=FAST, recorder=recorder, debounce=0.05)
        seen: list[Config] = []
        cluster.listeners.append(lambda config, _warnings: seen.append(config))
        async with running(cluster.run(), "config"):
            await wait_until_async(lambda: cluster.config is not None, what="first config")
            yield sim, client, cluster, seen


def communities(config: Config | None) -> list[tuple[str, ...]]:
    assert config is not None
    return [a.communities for a in config.advertisements]


def warning_events(sim: ApiSimulator, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in sim.store.list("events", NS)
        if e["involvedObject"]["name"] == name and e["type"] == "Warning"
    ]


async def test_objects_applied_are_the_config_in_force(env: Env) -> None:
    sim, _, cluster, seen = env
    config = cluster.config
    assert config is not None
    assert [p.name for p in config.pools] == ["web"]
    assert [p.name for p in config.peers] == ["tor"]
    assert communities(config) == [("65000:1",)]
    assert cluster.stale_reason() == ""
    # A live change: a community added to the advertisement.
    sim.store.apply(adv("all", ["65000:1", "edge"]))
    await wait_until_async(lambda: communities(cluster.config) == [("65000:1", "65000:7")])
    assert len(seen) == 2


async def test_status_and_metadata_only_changes_hand_nothing_on(env: Env) -> None:
    sim, _, cluster, seen = env
    before = cluster.applied
    body = adv("all", ["65000:1"])
    body["metadata"]["labels"] = {"touched": "yes"}
    sim.store.apply(body)
    sim.store.apply(pool("marker", "10.97.0.0/24"))  # a real change after it, to wait on
    await wait_until_async(lambda: cluster.config is not None and len(cluster.config.pools) == 2)
    assert cluster.applied == before + 1
    assert len(seen) == 2


async def test_an_invalid_edit_keeps_the_config_and_is_reported(env: Env) -> None:
    sim, _, cluster, _ = env
    before = cluster.config
    sim.store.apply(peer("tor", "172.31.0.1", holdTime="banana"))
    sim.store.apply(pool("db", "10.98.0.0/24"))  # a valid change beside it goes in
    await wait_until_async(lambda: cluster.config is not None and len(cluster.config.pools) == 2)
    assert cluster.config is not None
    assert cluster.config.peers == before.peers  # type: ignore[union-attr]
    assert "BGPPeer metallb-system/tor: spec.holdTime" in cluster.stale_reason()
    events = await wait_until_async(lambda: warning_events(sim, "tor"), what="Warning Event")
    assert events[0]["reason"] == "InvalidConfiguration"
    assert "spec.holdTime" in events[0]["message"]
    # Fixed: in force, no longer stale.
    sim.store.apply(peer("tor", "172.31.0.1", holdTime="30s"))
    await wait_until_async(lambda: cluster.stale_reason() == "")
    assert cluster.config is not None
    assert cluster.config.peers[0].hold_time == 30


async def test_deleting_every_object_waits_for_a_confirming_list(env: Env) -> None:
    sim, _, cluster, _ = env
    before = cluster.config
    # Lists fail for a while: the deletions seen on the watch are not confirmed.
    for kind, name in (
        ("bgpadvertisements", "all"),
        ("ipaddresspools", "web"),
        ("bgppeers", "tor"),
        ("communities", "aliases"),
    ):
        sim.store.delete(kind, name, NS)
    sim.fail_next(1000, 503)
    await wait_until_async(lambda: "vanished" in cluster.stale_reason(), what="unconfirmed")
    await wait_until_async(lambda: all(not i.connected for i in cluster.informers), what="failing")
    assert cluster.config == before
    sim.clear_failures()
    # Confirmed, but the emptying rule (bgpd.config.emptying) keeps the running config
    # until SpeakerConfig says an empty one is meant.
    await wait_until_async(lambda: "refused" in cluster.stale_reason(), what="refused")
    assert cluster.config == before
    sim.store.apply(obj("SpeakerConfig", "speaker", {"allowEmptyConfig": True}, SPEAKER_API))
    await wait_until_async(lambda: cluster.config is not None and not cluster.config.pools)
    assert cluster.stale_reason() == ""


async def test_a_watch_failure_keeps_the_last_config(env: Env) -> None:
    sim, _, cluster, _ = env
    before = cluster.config
    # The CRD gone: every request 404s (as after a CRD deletion), watches cut.
    sim.fail_next(10_000, 404, message="the server could not find the requested resource")
    sim.cut_watches()
    await wait_until_async(lambda: "watch of" in cluster.stale_reason(), what="stale")
    assert cluster.config == before


def test_validate_kubeconfig_checks_what_is_deployed(tmp_path: Path) -> None:
    async def check(kubeconfig: Path, sim: ApiSimulator) -> tuple[int, str, int, str]:
        seed(sim)
        good = await asyncio.to_thread(run_validate, kubeconfig)
        sim.store.apply(peer("tor", "172.31.0.1", holdTime="banana"))
        bad = await asyncio.to_thread(run_validate, kubeconfig)
        return (*good, *bad)

    async def main() -> tuple[int, str, int, str]:
        async with simulator(tmp_path, crds=True) as (sim, kubeconfig):
            return await check(kubeconfig, sim)

    code, text, bad_code, bad_text = asyncio.run(main())
    assert code == 0, text
    assert "valid: 1 pools, 1 peers, 1 advertisements, 1 communities" in text
    assert bad_code == 1
    assert "error: BGPPeer metallb-system/tor: spec.holdTime:" in bad_text


def run_validate(kubeconfig: Path) -> tuple[int, str]:
    args: argparse.Namespace = build_parser().parse_args(
        ["validate", "--kubeconfig", str(kubeconfig)]
    )
    out = io.StringIO()
    code = validate_cli.run(args, out=out, err=out)
    return code, out.getvalue()


async def test_controller_allocates_from_the_clusters_pools_and_reports_speakerconfig(
    tmp_path: Path,
) -> None:
    """`kube-bgpd controller --config-from-cluster`: allocates from the pool in the
    cluster, follows a pool added live, and writes SpeakerConfig's Accepted condition."""
    async with simulator(tmp_path, crds=True) as (sim, kubeconfig):
        seed(sim)
        sim.store.create(obj("SpeakerConfig", "speaker", {}, SPEAKER_API))
        sim.store.create(lb_service("web"))
        argv = ("controller", "--config-from-cluster", "--kubeconfig", str(kubeconfig))
        leader = ("--lease-namespace", "default", "--retry-period", "0.25")
        async with kube_bgpd(tmp_path, tmp_path / "controller.log", *argv, *leader) as proc:
            await wait_until_async(lambda: ingress(sim, "web") == ["10.99.0.0"], within=30)
            await wait_until_async(lambda: accepted(sim)[:2] == ("True", "Accepted"), within=30)
            # A pool added live: a Service asking for one of its IPs gets it.
            sim.store.create(pool("db", "10.98.0.0/24"))
            sim.store.create(lb_service("db", load_balancer_ip="10.98.0.7"))
            await wait_until_async(lambda: ingress(sim, "db") == ["10.98.0.7"], within=30)
            # An invalid SpeakerConfig: condition False, with the field.
            sim.store.apply(obj("SpeakerConfig", "speaker", {"drainWindow": "soon"}, SPEAKER_API))
            await wait_until_async(lambda: accepted(sim)[:2] == ("False", "Invalid"), within=30)
            assert "spec.drainWindow" in accepted(sim)[2]
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0


SPEAKER_API = "kube-bgpd.io/v1alpha1"


def ingress(sim: ApiSimulator, name: str) -> list[str]:
    svc = sim.store.get("services", name, "default")
    assert svc is not None
    entries = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [e["ip"] for e in entries]


def accepted(sim: ApiSimulator) -> tuple[str, str, str]:
    """SpeakerConfig speaker's Accepted condition: (status, reason, message)."""
    sc = sim.store.get("speakerconfigs", "speaker", NS)
    assert sc is not None
    for c in (sc.get("status") or {}).get("conditions") or []:
        if c["type"] == "Accepted":
            return c["status"], c["reason"], c["message"]
    return "", "", ""
