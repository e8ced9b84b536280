"""The informer against the API simulator over real HTTP on loopback.

Each test drives the simulator's hooks (compaction, abrupt watch cuts, injected errors)
and checks what the informer's handler saw and what requests it made: resume from the
last resourceVersion, re-list with deletions after 410, bookmarks moving the
resourceVersion, back-off with Retry-After, and the cache kept through outages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from k8s_kit import (
    FAST,
    client_for,
    lb_service,
    node,
    running,
    simulator,
)

from bgpd.model import Node, Service
from k8s_watcher.client import KubeClient, load_credentials
from k8s_watcher.credentials import Credentials
from k8s_watcher.informer import NODES, SERVICES, Informer, InformerTiming
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

Event = tuple[str, str]  # (ADDED|MODIFIED|DELETED, key)


class Recorder:
    """The informer's handler: remembers every call as (type, key)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, key: str, old: object, new: object) -> None:
        kind = "ADDED" if old is None else "DELETED" if new is None else "MODIFIED"
        self.events.append((kind, key))

    def since(self, mark: int) -> list[Event]:
        return self.events[mark:]


def watch_queries(sim: ApiSimulator, resource: str) -> list[dict[str, list[str]]]:
    return [
        parse_qs(r.query)
        for r in sim.request_log
        if r.path.endswith(f"/{resource}") and "watch=true" in r.query
    ]


def list_queries(sim: ApiSimulator, resource: str) -> list[dict[str, list[str]]]:
    return [
        parse_qs(r.query)
        for r in sim.request_log
        if r.path.endswith(f"/{resource}") and "watch=" not in r.query
    ]


Env = tuple[ApiSimulator, KubeClient]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with simulator(tmp_path) as (sim, kubeconfig), client_for(kubeconfig) as client:
        yield sim, client


def service_informer(
    client: KubeClient, timing: InformerTiming = FAST
) -> tuple[Informer[Service], Recorder]:
    rec = Recorder()
    return Informer(client, SERVICES, rec, timing=timing), rec


@contextlib.asynccontextmanager
async def watching(env: Env) -> AsyncIterator[tuple[Informer[Service], Recorder]]:
    """A Service informer that has listed and has its watch open, for the block."""
    sim, client = env
    informer, rec = service_informer(client)
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="first list")
        await sim.wait_for_watches(1)
        yield informer, rec


async def test_list_then_watch_sees_adds_updates_deletes(env: Env) -> None:
    sim, client = env
    for i in range(5):  # page_size 2: the first list takes three pages
        sim.store.create(lb_service(f"svc{i}"))
    informer, rec = service_informer(client)
    assert not informer.has_synced
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="first list")
        assert sorted(informer.cache) == [f"default/svc{i}" for i in range(5)]
        assert len(list_queries(sim, "services")) == 3, "paged with limit/continue"
        await sim.wait_for_watches(1)
        mark = len(rec.events)
        sim.store.create(lb_service("new"))
        sim.store.patch(
            "services", "svc0", {"spec": {"externalTrafficPolicy": "Local"}}, namespace="default"
        )
        sim.store.delete("services", "svc1", "default")
        await wait_until_async(lambda: len(rec.events) >= mark + 3, what="three watch events")
        assert rec.since(mark) == [
            ("ADDED", "default/new"),
            ("MODIFIED", "default/svc0"),
            ("DELETED", "default/svc1"),
        ]
        assert informer.cache["default/svc0"].external_traffic_policy == "Local"
        assert informer.resource_version == str(sim.store.resource_version)
    assert informer.stats.lists == 1


async def test_bookmarks_advance_the_resource_version(env: Env) -> None:
    """Writes to another kind move the global resourceVersion; only BOOKMARKs tell the
    Service watch about it. With the bookmark's RV, a resume after compaction needs no
    re-list, which is the point of bookmarks."""
    sim, client = env
    sim.store.create(lb_service("a"))
    informer, _ = service_informer(client)
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="first list")
        listed_rv = int(informer.resource_version or 0)
        for i in range(3):
            sim.store.create(node(f"n{i}"))
        target = str(sim.store.resource_version)
        assert int(target) > listed_rv
        await wait_until_async(lambda: informer.resource_version == target, what="bookmark RV")
        assert informer.stats.bookmarks >= 1
        assert informer.stats.events == 0, "no Service changed"
        sim.compact()
        sim.cut_watches()
        await wait_until_async(lambda: informer.stats.watches == 2, what="resumed watch")
        # The simulator logs a watch when it ends: cut the resumed one to read its query.
        sim.cut_watches()
        await wait_until_async(lambda: len(watch_queries(sim, "services")) == 2, what="log")
        resume = watch_queries(sim, "services")[-1]
        assert resume["resourceVersion"] == [target]
        assert resume["allowWatchBookmarks"] == ["true"]
        assert "timeoutSeconds" in resume
    assert informer.stats.relists_expired == 0
    assert informer.stats.lists == 1


async def test_abrupt_disconnect_resumes_from_last_rv(env: Env) -> None:
    sim = env[0]
    sim.store.create(lb_service("a"))
    async with watching(env) as (informer, rec):
        last_rv = informer.resource_version
        mark = len(rec.events)
        # Cut and write in one step: the write happens while no watch is open.
        assert sim.cut_watches() == 1
        sim.store.create(lb_service("during-cut"))
        await wait_until_async(
            lambda: "default/during-cut" in informer.cache, what="replayed event"
        )
        assert rec.since(mark) == [("ADDED", "default/during-cut")]
        await wait_until_async(lambda: informer.stats.watches == 2, what="resumed watch")
        # The simulator logs a watch when it ends: cut the resumed one to read its query.
        sim.cut_watches()
        await wait_until_async(lambda: len(watch_queries(sim, "services")) == 2, what="log")
        assert watch_queries(sim, "services")[-1]["resourceVersion"] == [last_rv]
        assert informer.stats.errors == 2
        assert "stream broken" in informer.stats.last_error
        await wait_until_async(lambda: informer.connected, what="reconnected")
    assert informer.stats.lists == 1, "a cut is resumed, not re-listed"


async def test_410_relists_and_emits_only_real_differences(env: Env) -> None:
    sim, client = env
    for name in ("keep", "change", "gone"):
        sim.store.create(lb_service(name))
    informer, rec = service_informer(client)
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="first list")
        await sim.wait_for_watches(1)
        mark = len(rec.events)
        sim.cut_watches()
        sim.store.delete("services", "gone", "default")
        sim.store.patch(
            "services", "change", {"metadata": {"labels": {"x": "y"}}}, namespace="default"
        )
        sim.store.create(lb_service("born"))
        sim.compact()  # the events above are no longer replayable: 410 on resume
        await wait_until_async(lambda: informer.stats.lists == 2, what="re-list after 410")
        assert informer.stats.relists_expired == 1
        assert sorted(rec.since(mark)) == [
            ("ADDED", "default/born"),
            ("DELETED", "default/gone"),
            ("MODIFIED", "default/change"),
        ], "unchanged 'keep' is not re-emitted; 'gone' is deleted"
        assert sorted(informer.cache) == ["default/born", "default/change", "default/keep"]
        assert informer.resource_version == str(sim.store.resource_version)


@pytest.mark.parametrize(
    ("code", "count"),
    [pytest.param(500, 3, id="500"), pytest.param(503, 2, id="503")],
)
async def test_server_errors_back_off_keep_cache_and_flag_stale(
    env: Env, code: int, count: int
) -> None:
    sim = env[0]
    sim.store.create(lb_service("a"))
    async with watching(env) as (informer, _):
        sim.fail_next(count, code)
        sim.cut_watches()
        sim.store.create(lb_service("b"))
        # While the errors last, the cache is the last known state (never emptied).
        await wait_until_async(lambda: not informer.connected, what="disconnected")
        assert "default/a" in informer.cache
        await wait_until_async(lambda: "default/b" in informer.cache, what="recovered")
        assert informer.connected
        assert informer.stats.errors == count + 1  # the cut plus each failed request
        assert f"HTTP {code}" in informer.stats.last_error or code == 0
    assert informer.stats.lists == 1


async def test_429_honours_retry_after(env: Env) -> None:
    """The simulator answers 429 with Retry-After: 1; the informer's own back-off is
    50 ms, so waiting at least a second shows the header was obeyed."""
    sim, client = env
    sim.store.create(lb_service("a"))
    sim.fail_next(1, 429)
    informer, _ = service_informer(client)
    start = time.monotonic()
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="list after 429")
    took = time.monotonic() - start
    assert took >= 0.95
    assert informer.stats.errors == 1
    assert "HTTP 429" in informer.stats.last_error
    statuses = [r.status for r in sim.request_log if r.path.endswith("/services")]
    assert statuses[:2] == [429, 200]


async def test_back_off_grows_between_failures(env: Env) -> None:
    sim, client = env
    timing = InformerTiming(
        watch_timeout=5, backoff_initial=0.1, backoff_max=0.8, resync_period=None
    )
    informer, _ = service_informer(client, timing)
    sim.fail_next(4, 500)
    start = time.monotonic()
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="list after 4 failures")
    took = time.monotonic() - start
    # Delays are uniform in [c/2, c] for c = 0.1, 0.2, 0.4, 0.8: at least 0.75 s in all.
    assert took >= 0.75
    assert informer.stats.errors == 4


async def test_node_heartbeats_are_dropped(env: Env) -> None:
    sim, client = env
    sim.store.create(node("n1"))
    rec = Recorder()
    informer: Informer[Node] = Informer(client, NODES, rec, timing=FAST)
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="first list")
        await sim.wait_for_watches(1)
        mark = len(rec.events)
        for beat in ("2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"):
            obj = sim.store.get("nodes", "n1")
            assert obj is not None
            obj["status"]["conditions"][0]["lastHeartbeatTime"] = beat
            sim.store.update_status(obj)
        await wait_until_async(lambda: informer.stats.dropped_unchanged == 2, what="heartbeats")
        assert rec.since(mark) == []
        sim.store.patch("nodes", "n1", {"metadata": {"labels": {"zone": "b"}}})
        await wait_until_async(lambda: len(rec.events) > mark, what="label change")
        assert rec.since(mark) == [("MODIFIED", "n1")]


async def test_periodic_resync_relists_without_churn(env: Env) -> None:
    sim, client = env
    sim.store.create(lb_service("a"))
    timing = InformerTiming(watch_timeout=5, resync_period=0.3, backoff_initial=0.05)
    informer, rec = service_informer(client, timing)
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.stats.resyncs >= 2, what="two resyncs")
    assert rec.events == [("ADDED", "default/a")]
    assert informer.stats.errors == 0


class PagingHook(KubeClient):
    """The real client, with a hook run after each LIST page (not after watches): lets a
    test act between pages of one paged list, which no timing can hit reliably."""

    def __init__(self, credentials: Credentials, hook: Callable[[int], None]) -> None:
        super().__init__(credentials)
        self.pages = 0
        self._hook = hook

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        doc = await super().request(method, path, **kwargs)
        if method == "GET" and "items" in doc:
            self.pages += 1
            self._hook(self.pages)
        return doc


async def test_410_inside_a_paged_relist_restarts_it_and_keeps_the_old_cache(
    tmp_path: Path,
) -> None:
    """Re-list after a 410 with 2 objects per page; between its first and second page the
    continue token is compacted away (410 again). The informer must start that list over
    (in one piece, as client-go does), and until a list completes the cache must still
    hold everything it knew, including the object deleted meanwhile, and nothing may be
    emitted."""
    seen_mid_list: list[tuple[list[str], int]] = []
    async with simulator(tmp_path) as (sim, kubeconfig):
        for i in range(5):
            sim.store.create(lb_service(f"svc{i}"))
        rec = Recorder()
        informer: Informer[Service]

        def hook(page: int) -> None:
            # Pages 1-3: the first list. Page 4: first page of the re-list after 410.
            if page == 4:
                seen_mid_list.append((sorted(informer.cache), len(rec.events)))
                # Move the RV past the list's, then compact: the continue token expires.
                sim.store.create(node("unrelated"))
                sim.compact()

        credentials = await load_credentials(str(kubeconfig))
        async with PagingHook(credentials, hook) as client:
            informer = Informer(client, SERVICES, rec, timing=FAST)
            async with running(informer.run(), "informer"):
                await wait_until_async(lambda: informer.has_synced, what="first list")
                await sim.wait_for_watches(1)
                mark = len(rec.events)
                sim.cut_watches()
                sim.store.delete("services", "svc0", "default")
                sim.compact()
                await wait_until_async(lambda: informer.stats.lists == 2, what="completed re-list")
                # 3 pages, then 1 page + a 410, then (like client-go) one unpaged list.
                assert client.pages == 3 + 1 + 1, "the interrupted list was started over"
                assert informer.stats.lists == 2
                assert "limit" not in list_queries(sim, "services")[-1]
    assert seen_mid_list == [([f"default/svc{i}" for i in range(5)], mark)]
    assert rec.since(mark) == [("DELETED", "default/svc0")]
    assert informer.stats.relists_expired == 2


async def test_bearer_token_from_kubeconfig(tmp_path: Path) -> None:
    """The simulator demands a token; the kubeconfig carries it; a wrong one is a 401 that
    the informer keeps retrying (credentials can be fixed without a restart)."""
    async with simulator(tmp_path, token="s3cret") as (sim, kubeconfig):
        sim.store.create(lb_service("a"))
        async with client_for(kubeconfig) as client:
            informer, _ = service_informer(client)
            async with running(informer.run(), "informer"):
                await wait_until_async(lambda: informer.has_synced, what="list with token")
        wrong = tmp_path / "wrong"
        wrong.write_text(kubeconfig.read_text().replace("s3cret", "nope"))
        async with client_for(wrong) as client:
            informer, _ = service_informer(client)
            async with running(informer.run(), "informer"):
                await wait_until_async(lambda: informer.stats.errors >= 2, what="401s")
                assert not informer.has_synced
    assert "HTTP 401" in informer.stats.last_error


async def test_a_silent_watch_is_restarted_and_reported_stale_meanwhile(env: Env) -> None:
    """Issue 15: a watch that goes silent (no bytes, no close: a dead load balancer) went
    unnoticed for ~390 s. With bookmarks as liveness it is restarted after idle_timeout,
    the kind is reported stale in between, and it resumes without a re-list. The
    watch's own timeouts are long here, so only the idle rule can catch it."""
    sim, client = env
    timing = replace(FAST, watch_timeout=300, read_grace=15.0, idle_timeout=1.0)
    rec = Recorder()
    states: list[bool] = []
    informer: Informer[Service] = Informer(
        client, SERVICES, rec, timing=timing, on_state=lambda: states.append(informer.connected)
    )
    sim.store.create(lb_service("a"))
    async with running(informer.run(), "informer"):
        await wait_until_async(lambda: informer.has_synced, what="first list")
        await sim.wait_for_watches(1)
        # Bookmarks (every 0.2 s here) keep a quiet but live watch open.
        await wait_until_async(lambda: informer.stats.bookmarks >= 10, what="bookmarks")
        assert (informer.stats.watches, informer.stats.errors) == (1, 0)

        assert sim.stall_watches() == 1
        stalled_at = time.monotonic()
        sim.store.create(lb_service("during-stall"))
        await wait_until_async(
            lambda: "default/during-stall" in informer.cache, within=20, what="restarted watch"
        )
        # Generous: only catches a watch left hanging until its total timeout.
        assert time.monotonic() - stalled_at < 10
        assert informer.stats.errors == 1
        assert "no event, no bookmark" in informer.stats.last_error
        assert False in states, "the kind was reported stale while its watch was dead"
        await wait_until_async(lambda: informer.connected, what="reconnected")
        assert informer.stats.watches == 2
    assert informer.stats.lists == 1, "a dead watch is resumed, not re-listed"
