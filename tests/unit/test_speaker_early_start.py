"""The speaker renders ExaBGP's configuration (and so starts ExaBGP) once its source knows
this Node (bgpd.speaker.source.NodeFirst), before the cluster is synced and decided; it is
not ready meanwhile, and the driver core has no desired set. Without processes: the
rendering is what starts ExaBGP (Speaker._run_exabgp waits for it)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
from sourcekit import StillSource

from bgpd import heap
from bgpd.model import BGPPeer, Config, Node, NodeName, PeerName, SpeakerConfig
from bgpd.speaker import app
from bgpd.speaker.app import Speaker

NODE = NodeName("n1")


class DumpLike(StillSource):
    """A cluster source that is never synced, without NodeFirst (as the cluster-dump
    source: it has everything at once)."""

    def __init__(self, node: Node | None) -> None:
        super().__init__()
        self.node = node
        self.listed = asyncio.Event()


class ListingSource(DumpLike):
    """A cluster source whose Nodes are listed (once ``listed`` is set) and whose
    Services never are."""

    async def node_known(self) -> Node | None:
        await self.listed.wait()
        return self.node


def speaker(tmp_path: Path, source: DumpLike) -> Speaker:
    peer = BGPPeer(
        name=PeerName("tor"),
        my_asn=64512,
        peer_asn=64500,
        peer_address=ipaddress.ip_address("192.0.2.1"),
        source_address=ipaddress.ip_address("192.0.2.10"),
    )
    return Speaker(
        config=Config(peers=(peer,), speaker=SpeakerConfig(work_dir=tmp_path)),
        config_paths=[],
        node=NODE,
        source=source,
        work_dir=tmp_path,
        status_address="127.0.0.1:0",
    )


async def test_rendered_once_the_node_is_known_and_not_ready(tmp_path: Path) -> None:
    source = ListingSource(Node(name=NODE, addresses=(("InternalIP", "192.0.2.10"),)))
    s = speaker(tmp_path, source)
    early = asyncio.create_task(s._render_early())
    await asyncio.sleep(0)
    assert not s.rendered.is_set()  # the Nodes are not listed yet
    source.listed.set()
    async with asyncio.timeout(10):
        await early
    assert s.rendered.is_set()
    assert "neighbor 192.0.2.1" in s.runtime.config_path.read_text()
    assert [n.name for n in s.driver.neighbors().values()] == [PeerName("tor")]
    ready, why = s.readiness()
    assert not ready, why
    assert not s.driver.core.desired_known


async def test_a_first_decision_that_came_first_is_not_rendered_over(tmp_path: Path) -> None:
    source = ListingSource(None)
    source.listed.set()
    s = speaker(tmp_path, source)
    s.rendered.set()  # as the first decision's rendering sets it
    async with asyncio.timeout(10):
        await s._render_early()
    assert not s.runtime.config_path.exists()


async def test_a_source_without_the_ability_renders_at_the_first_decision(
    tmp_path: Path,
) -> None:
    source = DumpLike(None)
    s = speaker(tmp_path, source)
    async with asyncio.timeout(10):
        await s._render_early()
    assert not s.rendered.is_set()


def pause_ended(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set when heap.collection_paused() exits (automatic collection back)."""
    ended = asyncio.Event()
    paused = heap.collection_paused

    @contextlib.contextmanager
    def watched() -> Iterator[None]:
        try:
            with paused():
                yield
        finally:
            ended.set()

    monkeypatch.setattr(heap, "collection_paused", watched)
    return ended


async def test_no_automatic_collection_until_the_heap_is_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first sync runs without CPython's automatic collections (their full passes
    over the growing heap held the LIST, the first decision and the acknowledgements);
    the heap is collected and frozen once the first decision's routes are accepted, and
    collection is automatic again from then on."""
    ended = pause_ended(monkeypatch)
    settled = asyncio.Event()
    settle = heap.settle

    def settling() -> heap.Settled:
        done = settle()
        settled.set()
        return done

    monkeypatch.setattr(heap, "settle", settling)
    s = speaker(tmp_path, DumpLike(None))
    assert gc.isenabled()
    task = asyncio.create_task(s._settle_heap())
    try:
        await asyncio.sleep(0)
        assert not gc.isenabled()  # listing, deciding
        s._first_decision.set()
        await asyncio.sleep(0)
        assert not gc.isenabled()  # ExaBGP takes the routes
        s.driver._converged.set()
        async with asyncio.timeout(10):
            await ended.wait()
            await settled.wait()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.unfreeze()
    assert gc.isenabled()


async def test_a_first_sync_that_takes_long_is_collected_after_the_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended = pause_ended(monkeypatch)
    monkeypatch.setattr(app, "FIRST_SYNC_GC_PAUSE", 0.05)
    s = speaker(tmp_path, DumpLike(None))
    task = asyncio.create_task(s._settle_heap())
    try:
        await asyncio.sleep(0)
        assert not gc.isenabled()
        async with asyncio.timeout(10):
            await ended.wait()
        assert gc.isenabled()
        assert not s._first_decision.is_set()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert gc.isenabled()


def test_the_first_decision_runs_without_automatic_collection(tmp_path: Path) -> None:
    """Also when the first sync outlasted the pause above (a slow API)."""
    s = speaker(tmp_path, DumpLike(None))
    seen: list[bool] = []

    def decide(first_change: float) -> None:
        seen.append(gc.isenabled())

    s.reconciler.decide = decide  # type: ignore[method-assign,assignment]
    assert s.reconcile_once(0.0) is None
    assert seen == [False]
    assert gc.isenabled()
    s.reconciler.decisions = 1
    s.reconcile_once(0.0)
    assert seen == [False, True]
