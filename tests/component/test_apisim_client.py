"""The official `kubernetes` client, sync and `kubernetes.aio`, against the API simulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from apisim_helpers import endpoint_slice, node, service
from kubernetes import client as sync_client
from kubernetes import config as sync_config
from kubernetes import watch as sync_watch
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config
from kubernetes.aio import watch as aio_watch

from kbgpd_lab.apisim import ApiSimulator, ApiSimulatorThread

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]


# ---------------------------------------------------------------- sync client


@pytest.fixture
def sync_env(tmp_path: Path) -> Iterator[tuple[ApiSimulatorThread, sync_client.ApiClient]]:
    with ApiSimulatorThread() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        api = sync_config.new_client_from_config(str(kubeconfig))
        try:
            yield sim, api
        finally:
            api.close()


def test_sync_create_list_and_status_patch(
    sync_env: tuple[ApiSimulatorThread, sync_client.ApiClient],
) -> None:
    sim, api = sync_env
    core = sync_client.CoreV1Api(api)
    created = core.create_namespaced_service("default", service("web", svc_type="LoadBalancer"))
    assert created.spec.cluster_ip.startswith("10.96.")
    listed = core.list_namespaced_service("default", label_selector="")
    assert [s.metadata.name for s in listed.items] == ["web"]
    assert int(listed.metadata.resource_version) == sim.store.resource_version
    body = {"status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.1"}]}}}
    patched = core.patch_namespaced_service_status("web", "default", body)
    assert patched.status.load_balancer.ingress[0].ip == "10.99.0.1"
    # The client sends strategic merge for dict bodies: ports merge by port.
    merged = core.patch_namespaced_service("web", "default", {"spec": {"ports": [{"port": 443}]}})
    assert [p.port for p in merged.spec.ports] == [80, 443]
    assert merged.status.load_balancer.ingress[0].ip == "10.99.0.1"


def test_sync_errors_are_api_exceptions_with_status(
    sync_env: tuple[ApiSimulatorThread, sync_client.ApiClient],
) -> None:
    sim, api = sync_env
    core = sync_client.CoreV1Api(api)
    with pytest.raises(sync_client.ApiException) as missing:
        core.read_namespaced_service("nope", "default")
    assert missing.value.status == 404
    first = core.create_namespaced_service("default", service("a"))
    core.patch_namespaced_service("a", "default", {"metadata": {"labels": {"x": "1"}}})
    first.metadata.labels = {"y": "1"}
    with pytest.raises(sync_client.ApiException) as stale:
        core.replace_namespaced_service("a", "default", first)
    assert stale.value.status == 409
    sim.fail_next(1, 503)
    with pytest.raises(sync_client.ApiException) as unavailable:
        core.list_namespaced_service("default")
    assert unavailable.value.status == 503


def test_sync_other_groups_leases_events_endpointslices(
    sync_env: tuple[ApiSimulatorThread, sync_client.ApiClient],
) -> None:
    sim, api = sync_env
    sim.store.create(endpoint_slice("web-1", "web", ("10.0.0.1",)))
    slices = sync_client.DiscoveryV1Api(api).list_endpoint_slice_for_all_namespaces(
        label_selector="kubernetes.io/service-name=web"
    )
    assert slices.items[0].endpoints[0].addresses == ["10.0.0.1"]
    leases = sync_client.CoordinationV1Api(api)
    lease = leases.create_namespaced_lease(
        "kube-system",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "kube-bgpd-controller"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    lease.spec.holder_identity = "b"
    renewed = leases.replace_namespaced_lease("kube-bgpd-controller", "kube-system", lease)
    assert renewed.spec.holder_identity == "b"
    event = sync_client.EventsV1Api(api).create_namespaced_event(
        "default",
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": "web."},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reason": "IPAllocated",
            "action": "Allocate",
            "type": "Normal",
            "reportingController": "kube-bgpd",
            "reportingInstance": "kube-bgpd-1",
            "regarding": {"kind": "Service", "namespace": "default", "name": "web"},
        },
    )
    assert event.metadata.name.startswith("web.")
    core_events = sync_client.CoreV1Api(api).list_namespaced_event("default")
    assert core_events.items == []  # events.k8s.io and core events are separate here


def test_sync_watch_with_bookmarks_and_timeout(
    sync_env: tuple[ApiSimulatorThread, sync_client.ApiClient],
) -> None:
    sim, api = sync_env
    core = sync_client.CoreV1Api(api)
    sim.store.create(service("a"))
    rv = core.list_namespaced_service("default").metadata.resource_version
    sim.store.create(service("b"))
    watcher = sync_watch.Watch()
    events = [
        (e["type"], e["raw_object"]["metadata"].get("name", ""))
        for e in watcher.stream(
            core.list_namespaced_service,
            "default",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
    ]
    # bookmark_interval is 60 s in this fixture: replay only, then a clean end at 1 s.
    assert events == [("ADDED", "b")]
    assert watcher.resource_version == str(sim.store.resource_version)


# ---------------------------------------------------------------- kubernetes.aio


@pytest.fixture
async def aio_env(tmp_path: Path) -> AsyncIterator[tuple[ApiSimulator, aio_client.CoreV1Api]]:
    async with ApiSimulator(bookmark_interval=0.2) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        api = await aio_config.new_client_from_config(str(kubeconfig))
        async with api:
            yield sim, aio_client.CoreV1Api(api)


async def collect(stream: Any, count: int, within: float = 10.0) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    try:
        async with asyncio.timeout(within):
            async for event in stream:
                out.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
                if len(out) == count:
                    break
    finally:
        # Breaking out of the stream leaves its response open; release it.
        await stream.close()
    return out


async def test_aio_list_then_watch_from_list_rv_with_bookmarks(
    aio_env: tuple[ApiSimulator, aio_client.CoreV1Api],
) -> None:
    sim, core = aio_env
    sim.store.create(service("a"))
    listed = await core.list_service_for_all_namespaces()
    assert [s.metadata.name for s in listed.items] == ["a"]
    watcher = aio_watch.Watch()
    stream = watcher.stream(
        core.list_service_for_all_namespaces,
        allow_watch_bookmarks=True,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )

    async def write() -> None:
        await sim.wait_for_watches(1)
        sim.store.create(service("b"))
        sim.store.create(node("n1"))

    writer = asyncio.create_task(write())
    events = await collect(stream, 2)
    await writer
    assert events == [("ADDED", "b"), ("BOOKMARK", "")]
    # The Watch keeps the bookmark's RV, which covers the Node write too.
    assert watcher.resource_version == str(sim.store.resource_version)


async def test_aio_watch_from_compacted_rv_raises_410(
    aio_env: tuple[ApiSimulator, aio_client.CoreV1Api],
) -> None:
    sim, core = aio_env
    sim.store.create(service("a"))
    listed = await core.list_service_for_all_namespaces()
    sim.store.create(service("b"))
    sim.compact()
    stream = aio_watch.Watch().stream(
        core.list_service_for_all_namespaces,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )
    with pytest.raises(aio_client.ApiException) as gone:
        await collect(stream, 1)
    assert gone.value.status == 410


async def test_aio_watch_cut_raises_payload_error(
    aio_env: tuple[ApiSimulator, aio_client.CoreV1Api],
) -> None:
    sim, core = aio_env
    stream = aio_watch.Watch().stream(core.list_service_for_all_namespaces, timeout_seconds=30)

    async def cut() -> None:
        await sim.wait_for_watches(1)
        sim.cut_watches()

    cutter = asyncio.create_task(cut())
    with pytest.raises(aiohttp.ClientPayloadError):
        await collect(stream, 1)
    await cutter


async def test_aio_watch_timeout_ends_the_stream(
    aio_env: tuple[ApiSimulator, aio_client.CoreV1Api],
) -> None:
    sim, core = aio_env
    sim.store.create(service("a"))
    events = []
    async with asyncio.timeout(10):
        async for event in aio_watch.Watch().stream(
            core.list_namespaced_service, "default", timeout_seconds=1
        ):
            events.append((event["type"], event["object"].metadata.name))
    assert events == [("ADDED", "a")]


async def test_aio_429_is_an_api_exception(
    aio_env: tuple[ApiSimulator, aio_client.CoreV1Api],
) -> None:
    sim, core = aio_env
    sim.fail_next(1, 429)
    with pytest.raises(aio_client.ApiException) as throttled:
        await core.list_service_for_all_namespaces()
    assert throttled.value.status == 429
    assert throttled.value.headers["Retry-After"] == "1"
    assert (await core.list_service_for_all_namespaces()).items == []
