"""The reconciler's gating (sync, stale) and loop, with the real decide(), a source over
an in-memory snapshot and a sink recording what it was given; and the cluster-file
source with real files."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from clusterkit import adv, changed_keys, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.clusterfile import ClusterFileSource
from bgpd.decision import decide
from bgpd.model import (
    ClusterSnapshot,
    DesiredRoutes,
    IPNetwork,
    NodeName,
    PeerName,
    RouteAttributes,
    SecretRef,
    ServiceKey,
)
from bgpd.reconciler import Reconciler
from kbgpd_lab.kit.waiting import wait_until_async

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
    result = r.reconcile_once(time.monotonic())
    assert (result is not None) is applies
    assert len(sink.applied) == int(applies)
    if applies:
        assert sink.last() == ROUTE
        assert r.last is result


async def test_loop_walks_states() -> None:
    """Unsynced -> synced (announce) -> stale with an empty cache (kept) -> fresh empty
    (withdraw) -> config change via kick (announce again)."""
    source, sink = MemorySource(), RecordingSink()
    r = Reconciler(
        config=config(
            pools=[pool("p", "10.99.200.0/24")],
            peers=[peer("tor", "172.31.250.1")],
            advertisements=[adv()],
        ),
        node=NodeName("n1"),
        source=source,
        sink=sink,
    )
    task = asyncio.create_task(r.run())
    latencies: list[float] = []

    async def settle(count: int) -> None:
        await wait_until_async(lambda: len(sink.applied) >= count, within=5.0)
        assert r.last is not None
        latencies.append(r.last.latency)

    try:
        source.change(UP, synced=False)
        await wait_until_async(lambda: r.skipped_unsynced == 1, within=5.0)
        assert sink.applied == []
        source.change(UP)
        await settle(1)
        assert sink.last() == {}  # 10.99.100.5 is not in this config's pool
        r.set_config(CONFIG)
        await settle(2)
        assert sink.last() == ROUTE
        source.change(ClusterSnapshot(), stale=True)
        await wait_until_async(lambda: r.skipped_stale == 1, within=5.0)
        assert len(sink.applied) == 2
        source.change(cluster(nodes=[node("n1")]))
        await settle(3)
        assert sink.last() == {}
        assert r.decisions == 3
        assert r.skipped_stale == 1
        assert all(0 <= s < 5 for s in latencies)
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


def secret(name: str, namespace: str | None, password: str | None) -> dict[str, object]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    data = {"password": base64.b64encode(password.encode()).decode()} if password else {}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}


def test_cluster_file_source_resolves_password_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """passwordSecret with the file source: Secrets from the same dump, looked up in the
    ref's namespace or the speaker's; a missing Secret or password is logged by peer."""
    peers = [
        replace(peer("own-ns", "10.0.0.1"), password_secret=SecretRef("md5", None)),
        replace(peer("other-ns", "10.0.0.2"), password_secret=SecretRef("md5", "infra")),
        replace(peer("missing", "10.0.0.3"), password_secret=SecretRef("nope", None)),
        replace(peer("empty", "10.0.0.4"), password_secret=SecretRef("empty", None)),
        # An inline password wins: its Secret is not even looked up.
        replace(peer("inline", "10.0.0.5"), password="x", password_secret=SecretRef("nope", None)),
    ]
    path = tmp_path / "cluster.yaml"
    items = [
        secret("md5", "kube-bgpd-system", "own"),
        secret("md5", "infra", "other"),
        secret("empty", "kube-bgpd-system", None),
    ]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    source = ClusterFileSource(path, config=config(peers=peers), namespace="kube-bgpd-system")
    with caplog.at_level(logging.ERROR, logger="bgpd.clusterfile"):
        source.reload()
    assert source.synced
    assert dict(source.secret_passwords()) == {"own-ns": "own", "other-ns": "other"}
    logged = [(r.getMessage(), getattr(r, "kube_bgpd_context", {})) for r in caplog.records]
    assert logged == [
        (
            "secrets.unreadable",
            {"peer": "missing", "error": f"no Secret kube-bgpd-system/nope in {path}"},
        ),
        ("secrets.no_password", {"peer": "empty", "secret": "kube-bgpd-system/empty"}),
    ]

    # A reloaded config without Secrets: nothing resolved any more.
    source.set_config(config(peers=[peer("own-ns", "10.0.0.1")]))
    assert dict(source.secret_passwords()) == {}


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


class ChangingSource(MemorySource):
    """A MemorySource that also names the Service keys changed since its previous
    snapshot_changes() call, as the Kubernetes source does."""

    def __init__(self) -> None:
        super().__init__()
        self.previous: ClusterSnapshot | None = None

    def snapshot_changes(self) -> tuple[ClusterSnapshot, set[ServiceKey] | None]:
        keys = None if self.previous is None else changed_keys(self.previous, self.current)
        self.previous = self.current
        return self.current, keys


class HoldingSink(RecordingSink):
    """Holds the route set a driver would: apply() replaces it, apply_changes() patches
    the changed prefixes from `desired` (read, not kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
        self.calls: list[str] = []

    def apply(self, desired: DesiredRoutes) -> None:
        super().apply(desired)
        self.held = {peer: dict(routes) for peer, routes in desired.items()}
        self.calls.append("all")

    def apply_changes(
        self, desired: DesiredRoutes, changed: Mapping[PeerName, AbstractSet[IPNetwork]]
    ) -> None:
        self.calls.append("changes")
        for peer_name, prefixes in changed.items():
            mine = self.held.setdefault(peer_name, {})
            want = desired.get(peer_name, {})
            for p in prefixes:
                if p in want:
                    mine[p] = want[p]
                else:
                    mine.pop(p, None)
            if not mine:
                del self.held[peer_name]


def test_changes_path_holds_what_decide_says_and_falls_back_to_whole_sets() -> None:
    """With a source that names changed keys and a sink that takes changes, each pass
    hands over only the changes, and the sink's set is decide()'s at every step; the
    first pass, a new config and a pass that raised before applying hand the whole set."""
    cfg = config(
        pools=[pool("p", "10.99.100.0/24")],
        peers=[peer("tor", "172.31.250.1")],
        advertisements=[adv()],
    )
    web, api = svc("shop/web", "10.99.100.5"), svc("shop/api", "10.99.100.6", local=True)
    n1 = node("n1")
    steps = [
        cluster([web, api], [eps("shop/web", ep("n2")), eps("shop/api", ep("n1"))], [n1]),
        cluster([web, api], [eps("shop/web", ep("n2")), eps("shop/api", ep("n2"))], [n1]),
        cluster([web], [eps("shop/web", ep("n2", ready=False))], [n1]),
        cluster([web, api], [eps("shop/web", ep("n1")), eps("shop/api", ep("n1"))], [n1]),
    ]
    source, sink = ChangingSource(), HoldingSink()
    r = Reconciler(config=cfg, node=NodeName("n1"), source=source, sink=sink)
    source.synced = True

    def step(snapshot: ClusterSnapshot) -> None:
        source.current = snapshot
        r.reconcile_once(time.monotonic())
        assert sink.held == decide(r.config, snapshot, NodeName("n1")).by_peer()

    for snapshot in steps:
        step(snapshot)
    assert sink.calls == ["all", "changes", "changes", "changes"]
    # A pass decided but never applied (its caller raised in between, e.g. while
    # rendering): the next one hands the whole set again.
    source.current = steps[1]
    assert r.decide(time.monotonic()) is not None
    step(steps[2])
    assert sink.calls[-1] == "all"
    step(steps[3])
    assert sink.calls[-1] == "changes"
    # A new config starts the Decider afresh: the whole set.
    r.set_config(
        config(
            pools=[pool("p", "10.99.100.0/24")],
            peers=[peer("tor", "172.31.250.1")],
            advertisements=[adv(communities=["65000:1"])],
        )
    )
    step(steps[0])
    assert sink.calls[-1] == "all"
