"""KubernetesSource (the speaker's SnapshotSource) against the API simulator.

What the reconciler relies on: no wake-up before every kind synced; snapshots that group
EndpointSlices by Service; wake-ups only for relevant changes (heartbeats are not); and
above all, a watch cut, a 410 re-list or an API outage never makes a snapshot lose an
object that still exists, while `stale` says the view may be old.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from k8s_kit import (
    FAST,
    client_for,
    endpoint_slice,
    lb_service,
    node,
    running,
    simulator,
)

from bgpd.config import load_config_or_raise
from bgpd.model import (
    ClusterSnapshot,
    Decision,
    NodeName,
    PeerName,
    Route,
    RouteAttributes,
    ServiceKey,
    Skip,
    SkipReason,
)
from k8s_watcher.cache import KubernetesSource, SpeakerSource
from k8s_watcher.client import KubeClient
from k8s_watcher.writer import EventRecorder, EventType, ObjectRef
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

Env = tuple[ApiSimulator, KubeClient]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with simulator(tmp_path) as (sim, kubeconfig), client_for(kubeconfig) as client:
        yield sim, client


def seed(sim: ApiSimulator) -> None:
    sim.store.create(lb_service("web", ips=("10.99.0.1",)))
    sim.store.create(lb_service("db", ips=("10.99.0.2",), policy="Local"))
    sim.store.create(lb_service("internal", svc_type="ClusterIP"))
    sim.store.create(endpoint_slice("web-a", "web", (("10.1.0.1", "n1", True),)))
    sim.store.create(endpoint_slice("web-b", "web", (("10.1.0.2", "n2", True),)))
    sim.store.create(endpoint_slice("db-a", "db", (("10.1.0.3", "n1", False),)))
    sim.store.create(node("n1", labels={"zone": "a"}))
    sim.store.create(node("n2", labels={"zone": "b"}))


def content(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """Everything a decision reads, in a comparable form."""
    return {
        "services": {k: (s.type, s.ingress_ips) for k, s in snapshot.services.items()},
        "slices": {
            k: tuple((s.name, s.endpoints) for s in v) for k, v in snapshot.endpoint_slices.items()
        },
        "nodes": {k: dict(n.labels) for k, n in snapshot.nodes.items()},
    }


@contextlib.asynccontextmanager
async def synced_source(env: Env) -> AsyncIterator[KubernetesSource]:
    """The seeded cluster, a source that delivered its first wake-up with every watch open."""
    sim, client = env
    seed(sim)
    source = KubernetesSource(client, timing=FAST)
    async with running(source.run(), "source"):
        await next_change(source)
        await sim.wait_for_watches(3)
        yield source


async def next_change(source: KubernetesSource, within: float = 10.0) -> float:
    async with asyncio.timeout(within):
        return await source.wait_changed()


async def no_change(source: KubernetesSource, within: float = 0.5) -> bool:
    """True if wait_changed() stays quiet for `within` seconds."""
    try:
        async with asyncio.timeout(within):
            await source.wait_changed()
    except TimeoutError:
        return True
    return False


async def test_first_wake_up_only_after_every_kind_synced(env: Env) -> None:
    sim, client = env
    seed(sim)
    sim.fail_next(5, 500)  # some of the first lists fail and are retried
    source = KubernetesSource(client, timing=FAST)
    assert not source.synced
    async with running(source.run(), "source"):
        await next_change(source)
        assert source.synced
        assert not source.stale
        snap = content(source.snapshot())
    assert snap == {
        "services": {
            "default/db": ("LoadBalancer", (ipaddress.ip_address("10.99.0.2"),)),
            "default/internal": ("ClusterIP", ()),
            "default/web": ("LoadBalancer", (ipaddress.ip_address("10.99.0.1"),)),
        },
        "slices": {
            "default/db": (("db-a", snap["slices"]["default/db"][0][1]),),
            "default/web": (
                ("web-a", snap["slices"]["default/web"][0][1]),
                ("web-b", snap["slices"]["default/web"][1][1]),
            ),
        },
        "nodes": {"n1": {"zone": "a"}, "n2": {"zone": "b"}},
    }
    web = source.snapshot().endpoints_of(ServiceKey("default/web"))
    assert [(e.addresses, e.node_name, e.ready) for e in web] == [
        (("10.1.0.1",), "n1", True),
        (("10.1.0.2",), "n2", True),
    ]
    assert sum(i.stats.errors for i in source.group.informers) == 5


async def test_relevant_changes_wake_and_irrelevant_ones_do_not(env: Env) -> None:
    sim = env[0]
    async with synced_source(env) as source:
        first = source.snapshot()
        assert source.snapshot() is first, "unchanged: the same snapshot object"

        # A heartbeat and a ClusterIP Service change are not news.
        obj = sim.store.get("nodes", "n1")
        assert obj is not None
        obj["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:01:00Z"
        sim.store.update_status(obj)
        sim.store.patch(
            "services", "internal", {"metadata": {"labels": {"a": "b"}}}, namespace="default"
        )
        assert await no_change(source)

        # An endpoint becoming ready is; so is the slice moving to another Service.
        loop_time = asyncio.get_running_loop().time
        before = loop_time()
        sim.store.patch(
            "endpointslices",
            "db-a",
            {
                "endpoints": [
                    {"addresses": ["10.1.0.3"], "nodeName": "n1", "conditions": {"ready": True}}
                ]
            },
            namespace="default",
        )
        stamp = await next_change(source)
        assert stamp >= before - 1.0
        db = source.snapshot().endpoints_of(ServiceKey("default/db"))
        assert [e.ready for e in db] == [True]
        assert source.snapshot() is not first
        # A snapshot handed out never changes afterwards.
        assert [e.ready for e in first.endpoints_of(ServiceKey("default/db"))] == [False]
        before_move = source.snapshot()

        sim.store.patch(
            "endpointslices",
            "web-b",
            {"metadata": {"labels": {"kubernetes.io/service-name": "db"}}},
            namespace="default",
        )
        await next_change(source)
        snap = source.snapshot()
        assert [s.name for s in snap.endpoint_slices[ServiceKey("default/web")]] == ["web-a"]
        assert [s.name for s in snap.endpoint_slices[ServiceKey("default/db")]] == [
            "db-a",
            "web-b",
        ]
        # Only the slices changed: the Services and Nodes indexes are shared, not copied.
        assert snap.services is before_move.services
        assert snap.nodes is before_move.nodes
        assert snap.endpoint_slices is not before_move.endpoint_slices
        assert [s.name for s in before_move.endpoint_slices[ServiceKey("default/web")]] == [
            "web-a",
            "web-b",
        ]


async def test_bursts_are_coalesced_into_one_wake_up(env: Env) -> None:
    sim = env[0]
    async with synced_source(env) as source:
        for i in range(50):
            sim.store.create(lb_service(f"burst{i}"))
        await wait_until_async(lambda: len(source.services.cache) == 53, what="burst seen")
        await next_change(source)
        assert await no_change(source, 0.3), "one wake-up for the whole burst"
        assert len(source.snapshot().services) == 53


@pytest.mark.parametrize(
    "disruption",
    [
        pytest.param("cut", id="watch-cut"),
        pytest.param("expired", id="410-relist"),
        pytest.param("outage", id="api-outage"),
    ],
)
async def test_disruptions_never_lose_objects(env: Env, disruption: str) -> None:
    """The snapshot is sampled continuously through the disruption: every sample must
    still hold every object, because nothing was deleted in the cluster."""
    sim = env[0]
    async with synced_source(env) as source:
        reference = content(source.snapshot())
        episodes = source.stale_episodes
        lists = sum(i.stats.lists for i in source.group.informers)

        if disruption == "outage":
            sim.fail_next(12, 503)
        if disruption == "expired":
            # A write to another kind moves the RV on; compaction makes every resume 410.
            sim.store.create(lb_service("unrelated", svc_type="ClusterIP"))
            sim.compact()
        sim.cut_watches()

        samples = []
        while source.stale_episodes == episodes or source.stale:
            samples.append(content(source.snapshot()))
            await asyncio.sleep(0.005)
            assert len(samples) < 2000, "never recovered"
        await wait_until_async(lambda: sim.active_watches >= 3, what="watches back")
        samples.append(content(source.snapshot()))

    for sample in samples:
        sample["services"].pop("default/unrelated", None)
        assert sample == reference
    assert source.stale_episodes == episodes + 1
    relisted = sum(i.stats.lists for i in source.group.informers) - lists
    assert relisted == (3 if disruption == "expired" else 0)


async def test_reload_relists_without_waking(env: Env) -> None:
    async with synced_source(env) as source:
        source.reload()
        await wait_until_async(
            lambda: all(i.stats.lists == 2 for i in source.group.informers), what="re-lists"
        )
        assert await no_change(source, 0.3)


# --------------------------------------------------------------------------- speaker extras

PEER_CONFIG = """
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: 172.31.250.1
  passwordSecret: {name: tor-md5}
"""


def decision(
    announced: tuple[str, ...], skipped: tuple[tuple[str, SkipReason], ...] = ()
) -> Decision:
    attrs = RouteAttributes()
    routes = tuple(
        Route(PeerName("tor"), ipaddress.ip_network(f"10.99.0.{i + 1}/32"), attrs, (ServiceKey(k),))
        for i, k in enumerate(announced)
    )
    skips = tuple(Skip(ServiceKey(k), reason) for k, reason in skipped)
    return Decision(NodeName("n1"), routes, skips)


def speaker_events(sim: ApiSimulator) -> list[tuple[str, str, str, int, str]]:
    return [
        (
            e["involvedObject"]["name"],
            e["reason"],
            e["message"],
            e["count"],
            e["involvedObject"]["uid"],
        )
        for e in sim.store.list("events")
    ]


async def test_speaker_source_reads_peer_secret_and_records_announcements(
    env: Env, tmp_path: Path
) -> None:
    sim, client = env
    seed(sim)
    sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/basic-auth",
            "metadata": {"name": "tor-md5", "namespace": "kube-system"},
            "data": {"password": base64.b64encode(b"s3cret").decode()},
        }
    )
    path = tmp_path / "peer.yaml"
    path.write_text(PEER_CONFIG)
    config, _ = load_config_or_raise([path])
    source = SpeakerSource(
        client, config=config, node=NodeName("n1"), secret_namespace="kube-system", timing=FAST
    )
    async with running(source.run(), "speaker-source"):
        await next_change(source)
        assert source.synced
        assert dict(source.secret_passwords()) == {"tor": "s3cret"}
        source.snapshot()

        source.observe_decision(decision(("default/web",)))
        source.observe_decision(decision((), (("default/web", SkipReason.NO_ENDPOINTS),)))
        source.observe_decision(decision(("default/web",)))
        assert source.recorder is not None
        await source.recorder.flush()

    web_uid = sim.store.get("services", "web", "default")["metadata"]["uid"]
    assert speaker_events(sim) == [
        ("web", "nodeAssigned", "announcing from node 'n1' to peers tor", 2, web_uid),
        ("web", "nodeUnassigned", "node 'n1' stopped announcing: noEndpoints", 1, web_uid),
    ]


async def test_event_recorder_rate_limits_per_object(env: Env) -> None:
    sim, client = env
    sim.store.create(lb_service("flappy"))
    sim.store.create(lb_service("calm"))
    recorder = EventRecorder(client, component="test", burst=2, refill_seconds=3600)
    flappy = ObjectRef("Service", "default", "flappy", "uid-1")
    calm = ObjectRef("Service", "default", "calm", "uid-2")
    async with running(recorder.run(), "recorder"):
        accepted = [
            recorder.record(flappy, EventType.NORMAL, "Flap", f"flap {i}") for i in range(5)
        ]
        assert recorder.record(calm, EventType.WARNING, "Other", "its own bucket")
        await recorder.flush()
    assert accepted == [True, True, False, False, False]
    assert recorder.rate_limited == 3
    names = sorted((e["involvedObject"]["name"], e["message"]) for e in sim.store.list("events"))
    assert names == [("calm", "its own bucket"), ("flappy", "flap 0"), ("flappy", "flap 1")]
