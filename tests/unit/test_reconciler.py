"""The reconciler's gating (sync, stale) and loop, with the real decide(), a source over
an in-memory snapshot and a sink recording what it was given; and the cluster-file
source with real files."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import time
from pathlib import Path

import pytest
import yaml
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.clusterfile import ClusterFileSource
from bgpd.model import ClusterSnapshot, DesiredRoutes, NodeName, PeerName
from bgpd.reconciler import Reconciler

CONFIG = config(
    pools=[pool("p", "10.99.100.0/24")], peers=[peer("tor", "172.31.250.1")], advertisements=[adv()]
)
UP = cluster(
    services=[svc("shop/web", "10.99.100.5")],
    slices=[eps("shop/web", ep("n1"))],
    nodes=[node("n1")],
)
ROUTE = {PeerName("tor"): {ipaddress.ip_network("10.99.100.5/32")}}


class MemorySource:
    """A SnapshotSource over a snapshot the test sets."""

    def __init__(self) -> None:
        self.synced = False
        self.stale = False
        self.current = ClusterSnapshot()
        self._changed = asyncio.Event()

    def snapshot(self) -> ClusterSnapshot:
        return self.current

    def change(
        self, snapshot: ClusterSnapshot | None = None, *, synced: bool = True, stale: bool = False
    ) -> None:
        if snapshot is not None:
            self.current = snapshot
        self.synced, self.stale = synced, stale
        self._changed.set()

    async def wait_changed(self) -> float:
        await self._changed.wait()
        self._changed.clear()
        return time.monotonic()


class RecordingSink:
    def __init__(self) -> None:
        self.applied: list[DesiredRoutes] = []

    def apply(self, desired: DesiredRoutes) -> None:
        self.applied.append(desired)

    def last(self) -> dict[PeerName, set[object]]:
        return {p: set(r) for p, r in self.applied[-1].items()}


@pytest.mark.parametrize(
    ("synced", "stale", "applies"),
    [
        pytest.param(False, False, False, id="unsynced-never-decides"),
        pytest.param(True, True, False, id="stale-keeps-last-applied"),
        pytest.param(True, False, True, id="synced-decides"),
    ],
)
def test_gating(synced: bool, stale: bool, applies: bool) -> None:
    source, sink = MemorySource(), RecordingSink()
    source.current, source.synced, source.stale = UP, synced, stale
    r = Reconciler(config=CONFIG, node=NodeName("n1"), source=source, sink=sink)
    decision = r.reconcile_once(time.monotonic())
    assert (decision is not None) is applies
    assert len(sink.applied) == int(applies)
    if applies:
        assert sink.last() == ROUTE
        assert r.last_decision is decision


async def test_loop_walks_states() -> None:
    """Unsynced -> synced (announce) -> stale with an empty cache (kept) -> fresh empty
    (withdraw) -> config change via kick (announce again)."""
    source, sink = MemorySource(), RecordingSink()
    seen: list[float] = []
    r = Reconciler(
        config=config(
            pools=[pool("p", "10.99.200.0/24")],
            peers=[peer("tor", "172.31.250.1")],
            advertisements=[adv()],
        ),
        node=NodeName("n1"),
        source=source,
        sink=sink,
        on_reconciled=lambda _d, latency: seen.append(latency),
    )
    task = asyncio.create_task(r.run())

    async def settle(count: int) -> None:
        async with asyncio.timeout(5):
            while len(sink.applied) < count:  # noqa: ASYNC110 - the sink is synchronous
                await asyncio.sleep(0.005)

    try:
        source.change(UP, synced=False)
        await asyncio.sleep(0.05)
        assert sink.applied == []
        source.change(UP)
        await settle(1)
        assert sink.last() == {}  # 10.99.100.5 is not in this config's pool
        r.set_config(CONFIG)
        await settle(2)
        assert sink.last() == ROUTE
        source.change(ClusterSnapshot(), stale=True)
        await asyncio.sleep(0.05)
        assert len(sink.applied) == 2
        source.change(cluster(nodes=[node("n1")]))
        await settle(3)
        assert sink.last() == {}
        assert r.decisions == 3
        assert r.skipped_stale == 1
        assert all(0 <= s < 5 for s in seen)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def dump(ip: str) -> str:
    items = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"type": "LoadBalancer"},
            "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
        },
    ]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


async def test_cluster_file_source(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    source = ClusterFileSource(path, poll_interval=0.02)
    task = asyncio.create_task(source.run())

    async def next_change() -> None:
        async with asyncio.timeout(5):
            await source.wait_changed()

    def ingress() -> list[str]:
        return [str(ip) for s in source.snapshot().services.values() for ip in s.ingress_ips]

    try:
        await next_change()  # missing file: an error, not synced
        assert not source.synced
        assert source.error
        path.write_text(dump("10.99.100.5"))
        await next_change()
        assert source.synced
        assert not source.stale
        assert ingress() == ["10.99.100.5"]
        # Replaced by a new file (new inode): noticed.
        tmp = tmp_path / "new.yaml"
        tmp.write_text(dump("10.99.100.6"))
        tmp.replace(path)
        await next_change()
        assert ingress() == ["10.99.100.6"]
        # A bad file keeps the last good snapshot and marks the source stale.
        path.write_text("kind: List\nitems: [\n")
        await next_change()
        assert source.stale
        assert ingress() == ["10.99.100.6"]
        # reload() (SIGHUP) reads at once.
        path.write_text(dump("10.99.100.7"))
        source.reload()
        await next_change()
        assert not source.stale
        assert ingress() == ["10.99.100.7"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
