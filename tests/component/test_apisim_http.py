"""The API simulator over HTTP on loopback: every semantic of docs/apisim.md, by name.

Raw HTTP through aiohttp, so what is checked is the wire format real clients see.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from apisim_helpers import WatchReader, endpoint_slice, node, service, summary

from kbgpd_lab.apisim import ApiSimulator

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

SVC = "/api/v1/namespaces/default/services"
ALL_SVC = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"


@pytest.fixture
async def sim() -> AsyncIterator[ApiSimulator]:
    async with ApiSimulator(bookmark_interval=0.2) as s:
        yield s


@pytest.fixture
async def http(sim: ApiSimulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=sim.url) as session:
        yield session


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
    headers = {"Content-Type": content_type} if data is not None else {}
    async with http.request(method, path, data=data, headers=headers, params=params) as r:
        return r.status, await r.json(content_type=None)


async def open_watch(
    http: aiohttp.ClientSession, path: str, **params: str
) -> tuple[aiohttp.ClientResponse, WatchReader]:
    response = await http.get(path, params={"watch": "true", **params})
    assert response.status == 200
    return response, WatchReader(response)


# ---------------------------------------------------------------- resourceVersion, stamping


async def test_every_write_bumps_one_global_resource_version(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    start = sim.store.resource_version
    assert start > 0
    _, a = await call(http, "POST", SVC, service("a"))
    _, b = await call(http, "POST", SLICES, endpoint_slice("a-1", "a", ("10.0.0.1",)))
    _, c = await call(http, "POST", "/api/v1/nodes", node("n1"))
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, b, c)]
    assert rvs == [start + 1, start + 2, start + 3]
    assert sim.store.resource_version == start + 3


async def test_create_stamps_uid_timestamp_and_generation_only_where_kubernetes_does(
    http: aiohttp.ClientSession,
) -> None:
    _, svc = await call(http, "POST", SVC, service("a"))
    _, eps = await call(http, "POST", SLICES, endpoint_slice("a-1", "a", ("10.0.0.1",)))
    for obj in (svc, eps):
        assert len(obj["metadata"]["uid"]) == 36
        assert obj["metadata"]["creationTimestamp"].endswith("Z")
    assert "generation" not in svc["metadata"]
    assert eps["metadata"]["generation"] == 1


async def test_generation_bumps_on_spec_change_only(http: aiohttp.ClientSession) -> None:
    _, eps = await call(http, "POST", SLICES, endpoint_slice("a-1", "a", ("10.0.0.1",)))
    path = f"{SLICES}/a-1"
    _, labelled = await call(
        http,
        "PATCH",
        path,
        {"metadata": {"labels": {"x": "y"}}},
        content_type="application/merge-patch+json",
    )
    assert labelled["metadata"]["generation"] == 1
    _, changed = await call(
        http,
        "PATCH",
        path,
        {"endpoints": [{"addresses": ["10.0.0.2"]}]},
        content_type="application/merge-patch+json",
    )
    assert changed["metadata"]["generation"] == 2
    assert eps["metadata"]["uid"] == changed["metadata"]["uid"]


async def test_service_gets_the_defaults_and_allocations_of_the_apiserver(
    http: aiohttp.ClientSession,
) -> None:
    status, svc = await call(http, "POST", SVC, service("lb", svc_type="LoadBalancer"))
    assert status == 201
    spec = svc["spec"]
    assert spec["clusterIP"].startswith("10.96.")
    assert spec["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30000}
    assert spec["externalTrafficPolicy"] == "Cluster"
    assert svc["status"] == {"loadBalancer": {}}


# ---------------------------------------------------------------- LIST


async def test_list_has_the_list_kind_and_items_without_kind(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    status, doc = await call(http, "GET", SVC)
    assert status == 200
    assert doc["kind"] == "ServiceList"
    assert doc["apiVersion"] == "v1"
    assert doc["metadata"]["resourceVersion"] == str(sim.store.resource_version)
    assert [i["metadata"]["name"] for i in doc["items"]] == ["a"]
    assert "kind" not in doc["items"][0]
    assert "apiVersion" not in doc["items"][0]


async def test_list_namespaced_and_cluster_wide(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a", "default"))
    sim.store.create(service("b", "other"))
    _, ns = await call(http, "GET", SVC)
    _, every = await call(http, "GET", ALL_SVC)
    _, other = await call(http, "GET", "/api/v1/namespaces/other/services")
    assert [i["metadata"]["name"] for i in ns["items"]] == ["a"]
    assert [i["metadata"]["name"] for i in every["items"]] == ["a", "b"]
    assert [i["metadata"]["name"] for i in other["items"]] == ["b"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("app=web", ["web1", "web2"], id="equals"),
        pytest.param("app==web", ["web1", "web2"], id="double-equals"),
        pytest.param("app!=web", ["db", "plain"], id="not-equals-includes-missing-key"),
        pytest.param("app in (web,db)", ["db", "web1", "web2"], id="in"),
        pytest.param("app notin (web)", ["db", "plain"], id="notin"),
        pytest.param("tier", ["web1"], id="exists"),
        pytest.param("!tier", ["db", "plain", "web2"], id="does-not-exist"),
        pytest.param("app=web,tier=front", ["web1"], id="and"),
        pytest.param("app=web, !tier", ["web2"], id="and-with-space"),
    ],
)
async def test_list_label_selector(
    sim: ApiSimulator, http: aiohttp.ClientSession, selector: str, expected: list[str]
) -> None:
    sim.store.create(service("web1", labels={"app": "web", "tier": "front"}))
    sim.store.create(service("web2", labels={"app": "web"}))
    sim.store.create(service("db", labels={"app": "db"}))
    sim.store.create(service("plain"))
    status, doc = await call(http, "GET", SVC, params={"labelSelector": selector})
    assert status == 200, doc
    assert [i["metadata"]["name"] for i in doc["items"]] == expected


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param("app in web", id="in-without-parens"),
        pytest.param("app=(", id="bad-token"),
        pytest.param("a b", id="missing-comma"),
    ],
)
async def test_list_bad_label_selector_is_400(http: aiohttp.ClientSession, selector: str) -> None:
    status, doc = await call(http, "GET", SVC, params={"labelSelector": selector})
    assert (status, doc["kind"], doc["reason"]) == (400, "Status", "BadRequest")


@pytest.mark.parametrize(
    ("path", "selector", "expected"),
    [
        pytest.param(ALL_SVC, "metadata.name=a", ["a"], id="name"),
        pytest.param(ALL_SVC, "metadata.name!=a", ["b", "c"], id="name-not"),
        pytest.param(ALL_SVC, "metadata.namespace=other", ["c"], id="namespace"),
        pytest.param(ALL_SVC, "spec.type=LoadBalancer", ["b"], id="service-spec-type"),
        pytest.param(ALL_SVC, "metadata.namespace=default,metadata.name!=b", ["a"], id="and"),
    ],
)
async def test_list_field_selector(
    sim: ApiSimulator,
    http: aiohttp.ClientSession,
    path: str,
    selector: str,
    expected: list[str],
) -> None:
    sim.store.create(service("a"))
    sim.store.create(service("b", svc_type="LoadBalancer"))
    sim.store.create(service("c", "other"))
    status, doc = await call(http, "GET", path, params={"fieldSelector": selector})
    assert status == 200, doc
    assert [i["metadata"]["name"] for i in doc["items"]] == expected


async def test_list_unsupported_field_selector_is_400(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "GET", ALL_SVC, params={"fieldSelector": "spec.nodeName=n1"})
    assert status == 400
    assert doc["message"] == "field label not supported: spec.nodeName"


async def test_list_limit_and_continue_pages_a_consistent_snapshot(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    for i in range(5):
        sim.store.create(service(f"s{i}"))
    _, first = await call(http, "GET", SVC, params={"limit": "2"})
    assert [i["metadata"]["name"] for i in first["items"]] == ["s0", "s1"]
    assert first["metadata"]["remainingItemCount"] == 3
    # Writes between pages are not seen: the pages are a snapshot at the first list's RV.
    sim.store.delete("services", "s3", "default")
    sim.store.create(service("s9"))
    names: list[str] = []
    token = first["metadata"]["continue"]
    while token:
        _, page = await call(http, "GET", SVC, params={"limit": "2", "continue": token})
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
    assert names == ["s2", "s3", "s4"]


async def test_list_expired_continue_is_410(sim: ApiSimulator, http: aiohttp.ClientSession) -> None:
    for i in range(3):
        sim.store.create(service(f"s{i}"))
    _, first = await call(http, "GET", SVC, params={"limit": "1"})
    sim.store.create(service("later"))
    sim.compact()
    status, doc = await call(
        http, "GET", SVC, params={"limit": "1", "continue": first["metadata"]["continue"]}
    )
    assert (status, doc["reason"]) == (410, "Expired")


# ---------------------------------------------------------------- WATCH


@pytest.mark.parametrize("value", ["true", "True", "1", "t", "TRUE"])
async def test_watch_flag_is_parsed_like_go_parsebool(
    sim: ApiSimulator, http: aiohttp.ClientSession, value: str
) -> None:
    sim.store.create(service("a"))
    async with http.get(SVC, params={"watch": value}) as r:
        assert r.status == 200
        assert r.headers["Transfer-Encoding"] == "chunked"
        events = await WatchReader(r).take(1)
    assert summary(events) == [("ADDED", "a")]


async def test_watch_flag_false_is_a_list(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "GET", SVC, params={"watch": "0"})
    assert (status, doc["kind"]) == (200, "ServiceList")


async def test_watch_flag_invalid_is_400(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "GET", SVC, params={"watch": "yes"})
    assert (status, doc["reason"]) == (400, "BadRequest")


@pytest.mark.parametrize("rv", [None, "0"])
async def test_watch_without_rv_sends_synthetic_added_then_live(
    sim: ApiSimulator, http: aiohttp.ClientSession, rv: str | None
) -> None:
    sim.store.create(service("a"))
    sim.store.create(service("b"))
    params = {} if rv is None else {"resourceVersion": rv}
    response, reader = await open_watch(http, SVC, **params)
    async with response:
        assert summary(await reader.take(2)) == [("ADDED", "a"), ("ADDED", "b")]
        sim.store.create(service("c"))
        sim.store.delete("services", "a", "default")
        events = await reader.take(2)
    assert summary(events) == [("ADDED", "c"), ("DELETED", "a")]
    assert events[0]["object"]["kind"] == "Service"
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) == sim.store.resource_version


async def test_watch_from_rv_replays_only_later_events(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    rv = sim.store.resource_version
    sim.store.create(service("b"))
    sim.store.create(endpoint_slice("b-1", "b", ("10.0.0.1",)))  # another kind: not replayed
    sim.store.patch("services", "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    response, reader = await open_watch(http, SVC, resourceVersion=str(rv))
    async with response:
        events = await reader.take(2)
    assert summary(events) == [("ADDED", "b"), ("MODIFIED", "a")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)
    assert rvs[0] > rv


async def test_watch_from_compacted_rv_gets_410_error_event_then_close(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    rv = sim.store.resource_version
    sim.store.create(service("b"))
    sim.compact()
    response, reader = await open_watch(http, SVC, resourceVersion=str(rv))
    async with response:
        events = await reader.rest()
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")


async def test_watch_from_current_rv_after_compaction_is_fine(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    sim.compact()
    rv = sim.store.resource_version
    response, reader = await open_watch(http, SVC, resourceVersion=str(rv))
    async with response:
        await sim.wait_for_watches(1)
        sim.store.create(service("b"))
        assert summary(await reader.take(1)) == [("ADDED", "b")]


async def test_watch_bookmarks_carry_only_the_resource_version(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    rv = str(sim.store.resource_version)
    sim.store.create(node("n1"))  # another kind moves the RV; the bookmark follows it
    response, reader = await open_watch(http, SVC, resourceVersion=rv, allowWatchBookmarks="true")
    async with response:
        event = await reader.next()
    assert event is not None
    assert event["type"] == "BOOKMARK"
    obj = event["object"]
    assert (obj["kind"], obj["apiVersion"]) == ("Service", "v1")
    assert obj["metadata"]["resourceVersion"] == str(sim.store.resource_version)
    assert set(obj["metadata"]) <= {"resourceVersion", "creationTimestamp"}


async def test_watch_without_bookmarks_sends_none(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    rv = str(sim.store.resource_version)
    async with http.get(
        SVC, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
    ) as r:
        events = await WatchReader(r).rest()
    assert events == []


async def test_watch_timeout_seconds_ends_cleanly(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with http.get(SVC, params={"watch": "1", "timeoutSeconds": "1"}) as r:
        assert await WatchReader(r).rest() == []
    assert 0.9 <= loop.time() - started < 5
    assert sim.active_watches == 0


async def test_watch_label_selector_transitions_become_added_and_deleted(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a", labels={"app": "web"}))
    rv = str(sim.store.resource_version)
    response, reader = await open_watch(http, SVC, resourceVersion=rv, labelSelector="app=web")
    async with response:
        await sim.wait_for_watches(1)
        patch = {"metadata": {"labels": {"app": "db"}}}
        sim.store.patch("services", "a", patch, namespace="default")  # leaves
        sim.store.create(service("b", labels={"app": "db"}))  # never matches
        sim.store.patch(
            "services", "a", {"metadata": {"labels": {"app": "web"}}}, namespace="default"
        )
        sim.store.patch("services", "a", {"spec": {"ports": [{"port": 81}]}}, namespace="default")
        events = await reader.take(3)
    assert summary(events) == [("DELETED", "a"), ("ADDED", "a"), ("MODIFIED", "a")]
    # The DELETED carries the last matching content at the event's resourceVersion.
    assert events[0]["object"]["metadata"]["labels"] == {"app": "web"}
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) == int(rv) + 1


async def test_watch_field_selector_on_one_name(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    response, reader = await open_watch(http, SVC, fieldSelector="metadata.name=b")
    async with response:
        await sim.wait_for_watches(1)
        sim.store.create(service("a"))
        sim.store.create(service("b"))
        assert summary(await reader.take(1)) == [("ADDED", "b")]


async def test_watch_namespaced_path_sees_only_its_namespace(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    response, reader = await open_watch(http, SVC)
    async with response:
        await sim.wait_for_watches(1)
        sim.store.create(service("x", "other"))
        sim.store.create(service("y", "default"))
        assert summary(await reader.take(1)) == [("ADDED", "y")]


async def test_watch_fans_out_the_same_bytes_to_many_watchers(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    streams = [await open_watch(http, ALL_SVC) for _ in range(5)]
    await sim.wait_for_watches(5)
    sim.store.create(service("a"))
    lines = []
    for response, reader in streams:
        async with response:
            lines.append(await reader.take(1))
    assert all(line == lines[0] for line in lines)


async def test_watch_no_op_write_emits_nothing(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    created = sim.store.create(service("a"))
    rv = sim.store.resource_version
    assert sim.store.update(created) == created  # same content: no write
    patch = {"spec": {"type": "ClusterIP"}}
    sim.store.patch("services", "a", patch, namespace="default")
    assert sim.store.resource_version == rv
    async with http.get(
        SVC, params={"watch": "1", "resourceVersion": str(rv), "timeoutSeconds": "1"}
    ) as r:
        assert await WatchReader(r).rest() == []


# ---------------------------------------------------------------- writes


async def test_post_201_then_409_already_exists(http: aiohttp.ClientSession) -> None:
    status, _ = await call(http, "POST", SVC, service("a"))
    assert status == 201
    status, doc = await call(http, "POST", SVC, service("a"))
    assert (status, doc["reason"]) == (409, "AlreadyExists")
    assert doc["details"] == {"name": "a", "group": "", "kind": "services"}
    assert doc["message"] == 'services "a" already exists'


async def test_post_generate_name(http: aiohttp.ClientSession) -> None:
    body = service("")
    body["metadata"] = {"generateName": "web-"}
    status, doc = await call(http, "POST", SVC, body)
    assert status == 201
    name = doc["metadata"]["name"]
    assert name.startswith("web-")
    assert len(name) == len("web-") + 5


async def test_post_namespace_mismatch_is_400(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "POST", SVC, service("a", "other"))
    assert (status, doc["reason"]) == (400, "BadRequest")


async def test_get_missing_is_404_status(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "GET", f"{SVC}/nope")
    assert status == 404
    assert doc == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'services "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "", "kind": "services"},
        "code": 404,
    }


async def test_get_missing_group_resource_names_the_group(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "GET", f"{SLICES}/nope")
    assert status == 404
    assert doc["message"] == 'endpointslices.discovery.k8s.io "nope" not found'


async def test_put_with_stale_rv_is_409_conflict(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    old = sim.store.create(service("a"))
    sim.store.patch("services", "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    old["metadata"]["labels"] = {"y": "2"}
    status, doc = await call(http, "PUT", f"{SVC}/a", old)
    assert (status, doc["reason"]) == (409, "Conflict")
    assert "the object has been modified" in doc["message"]


async def test_put_without_rv_is_unconditional(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    old = sim.store.create(service("a"))
    sim.store.patch("services", "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    del old["metadata"]["resourceVersion"]
    old["metadata"]["labels"] = {"y": "2"}
    status, doc = await call(http, "PUT", f"{SVC}/a", old)
    assert status == 200
    assert doc["metadata"]["labels"] == {"y": "2"}


async def test_put_missing_is_404(http: aiohttp.ClientSession) -> None:
    status, _ = await call(http, "PUT", f"{SVC}/a", service("a"))
    assert status == 404


async def test_put_no_op_keeps_the_resource_version(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    created = sim.store.create(service("a"))
    status, doc = await call(http, "PUT", f"{SVC}/a", created)
    assert status == 200
    assert doc["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_delete_without_finalizers_removes_and_returns_object(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    status, doc = await call(http, "DELETE", f"{SVC}/a")
    assert (status, doc["kind"], doc["metadata"]["name"]) == (200, "Service", "a")
    assert sim.store.get("services", "a", "default") is None
    status, doc = await call(http, "DELETE", f"{SVC}/a")
    assert status == 404


async def test_delete_kind_without_deleted_object_returns_success_status(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(endpoint_slice("a-1", "a", ("10.0.0.1",)))
    status, doc = await call(http, "DELETE", f"{SLICES}/a-1")
    assert (status, doc["kind"], doc["status"]) == (200, "Status", "Success")
    assert doc["details"]["name"] == "a-1"


async def test_delete_honours_finalizers(sim: ApiSimulator, http: aiohttp.ClientSession) -> None:
    body = service("a")
    body["metadata"]["finalizers"] = ["example.com/keep", "example.com/other"]
    sim.store.create(body)
    response, reader = await open_watch(http, SVC)
    async with response:
        await reader.take(1)
        status, doc = await call(http, "DELETE", f"{SVC}/a")
        assert status == 200
        assert doc["metadata"]["deletionTimestamp"]
        assert sim.store.get("services", "a", "default") is not None
        # No new finalizers on an object being deleted.
        add = [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/new"}]
        status, doc = await call(
            http, "PATCH", f"{SVC}/a", add, content_type="application/json-patch+json"
        )
        assert (status, doc["reason"]) == (422, "Invalid")
        drop_one = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/keep"]}}
        status, doc = await call(
            http,
            "PATCH",
            f"{SVC}/a",
            drop_one,
            content_type="application/strategic-merge-patch+json",
        )
        assert doc["metadata"]["finalizers"] == ["example.com/other"]
        status, _ = await call(
            http,
            "PATCH",
            f"{SVC}/a",
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
        assert status == 200
        events = await reader.take(3)
    assert summary(events) == [("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert sim.store.get("services", "a", "default") is None


async def test_delete_precondition_rv_mismatch_is_409(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    options = {"kind": "DeleteOptions", "preconditions": {"resourceVersion": "1"}}
    status, doc = await call(http, "DELETE", f"{SVC}/a", options)
    assert (status, doc["reason"]) == (409, "Conflict")


async def test_delete_collection_with_selector(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a", labels={"app": "web"}))
    sim.store.create(service("b"))
    status, doc = await call(http, "DELETE", SVC, params={"labelSelector": "app=web"})
    assert (status, doc["kind"]) == (200, "ServiceList")
    assert [s["metadata"]["name"] for s in sim.store.list("services", "default")] == ["b"]


async def test_dry_run_create_changes_nothing(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    rv = sim.store.resource_version
    status, doc = await call(http, "POST", SVC, service("a"), params={"dryRun": "All"})
    assert (status, doc["metadata"]["name"]) == (201, "a")
    assert sim.store.get("services", "a", "default") is None
    assert sim.store.resource_version == rv


# ---------------------------------------------------------------- status subresource


async def test_main_resource_writes_keep_status(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a", svc_type="LoadBalancer"))
    ingress = {"loadBalancer": {"ingress": [{"ip": "10.99.0.1"}]}}
    sim.store.patch("services", "a", {"status": ingress}, namespace="default", subresource="status")
    current = sim.store.get("services", "a", "default")
    assert current is not None
    current["status"] = {"loadBalancer": {}}
    current["spec"]["ports"] = [{"port": 443}]
    status, doc = await call(http, "PUT", f"{SVC}/a", current)
    assert status == 200
    assert doc["status"] == ingress
    assert doc["spec"]["ports"][0]["port"] == 443


async def test_status_writes_change_only_status(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a", svc_type="LoadBalancer"))
    current = sim.store.get("services", "a", "default")
    assert current is not None
    current["spec"]["ports"] = [{"port": 443}]
    current["metadata"]["labels"] = {"sneaky": "yes"}
    current["status"] = {"loadBalancer": {"ingress": [{"ip": "10.99.0.7"}]}}
    status, doc = await call(http, "PUT", f"{SVC}/a/status", current)
    assert status == 200
    assert doc["status"]["loadBalancer"]["ingress"] == [{"ip": "10.99.0.7"}]
    assert doc["spec"]["ports"][0]["port"] == 80
    assert "labels" not in doc["metadata"]


async def test_post_drops_service_status(http: aiohttp.ClientSession) -> None:
    body = service("a", svc_type="LoadBalancer")
    body["status"] = {"loadBalancer": {"ingress": [{"ip": "10.99.0.1"}]}}
    _, doc = await call(http, "POST", SVC, body)
    assert doc["status"] == {"loadBalancer": {}}


async def test_delete_on_status_subresource_is_405(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    status, doc = await call(http, "DELETE", f"{SVC}/a/status")
    assert (status, doc["reason"]) == (405, "MethodNotAllowed")
    assert sim.store.get("services", "a", "default") is not None


async def test_status_of_a_kind_without_it_is_404(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(endpoint_slice("a-1", "a", ("10.0.0.1",)))
    status, _ = await call(http, "GET", f"{SLICES}/a-1/status")
    assert status == 404


# ---------------------------------------------------------------- PATCH


async def test_strategic_merge_merges_ports_by_port_and_conditions_by_type(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a", ports=(80, 443)))
    patch = {"spec": {"ports": [{"port": 443, "name": "https"}, {"port": 8443}]}}
    status, doc = await call(
        http, "PATCH", f"{SVC}/a", patch, content_type="application/strategic-merge-patch+json"
    )
    assert status == 200
    assert [(p["port"], p.get("name")) for p in doc["spec"]["ports"]] == [
        (80, None),
        (443, "https"),
        (8443, None),
    ]
    sim.store.create(node("n1"))
    cond = {"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]}}
    status, doc = await call(
        http,
        "PATCH",
        "/api/v1/nodes/n1/status",
        cond,
        content_type="application/strategic-merge-patch+json",
    )
    assert [c["type"] for c in doc["status"]["conditions"]] == ["Ready", "NetworkUnavailable"]


async def test_merge_patch_replaces_lists(sim: ApiSimulator, http: aiohttp.ClientSession) -> None:
    sim.store.create(service("a", ports=(80, 443)))
    status, doc = await call(
        http,
        "PATCH",
        f"{SVC}/a",
        {"spec": {"ports": [{"port": 8443}]}},
        content_type="application/merge-patch+json",
    )
    assert status == 200
    assert [p["port"] for p in doc["spec"]["ports"]] == [8443]


async def test_json_patch_and_failed_test_op(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    ops = [
        {"op": "add", "path": "/metadata/labels", "value": {"a/b": "1"}},
        {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
    ]
    status, doc = await call(
        http, "PATCH", f"{SVC}/a", ops, content_type="application/json-patch+json"
    )
    assert (status, doc["metadata"]["labels"]) == (200, {"a/b": "2"})
    failing = [{"op": "test", "path": "/spec/type", "value": "NodePort"}]
    status, doc = await call(
        http, "PATCH", f"{SVC}/a", failing, content_type="application/json-patch+json"
    )
    assert status == 422


async def test_patch_with_stale_rv_is_409(sim: ApiSimulator, http: aiohttp.ClientSession) -> None:
    sim.store.create(service("a"))
    patch = {"metadata": {"resourceVersion": "1", "labels": {"x": "1"}}}
    status, doc = await call(
        http, "PATCH", f"{SVC}/a", patch, content_type="application/merge-patch+json"
    )
    assert (status, doc["reason"]) == (409, "Conflict")


async def test_patch_unknown_content_type_is_415(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    status, doc = await call(http, "PATCH", f"{SVC}/a", {}, content_type="application/json")
    assert (status, doc["reason"]) == (415, "UnsupportedMediaType")


async def test_apply_patch_creates_then_merges_and_needs_a_field_manager(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    manifest = (
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  ports:\n  - port: 80\n"
    )
    status, doc = await call(
        http, "PATCH", f"{SVC}/a", manifest, content_type="application/apply-patch+yaml"
    )
    assert (status, doc["reason"]) == (422, "Invalid")
    params = {"fieldManager": "test"}
    status, doc = await call(
        http,
        "PATCH",
        f"{SVC}/a",
        manifest,
        content_type="application/apply-patch+yaml",
        params=params,
    )
    assert (status, doc["metadata"]["name"]) == (201, "a")
    again = manifest.replace("port: 80", "port: 80\n    name: http")
    status, doc = await call(
        http, "PATCH", f"{SVC}/a", again, content_type="application/apply-patch+yaml", params=params
    )
    assert (status, doc["spec"]["ports"][0]["name"]) == (200, "http")


# ---------------------------------------------------------------- discovery


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        pytest.param("/api", "APIVersions", id="api"),
        pytest.param("/apis", "APIGroupList", id="apis"),
        pytest.param("/api/v1", "APIResourceList", id="core-v1"),
        pytest.param("/apis/discovery.k8s.io", "APIGroup", id="group"),
        pytest.param("/apis/discovery.k8s.io/v1", "APIResourceList", id="group-version"),
        pytest.param("/apis/coordination.k8s.io/v1", "APIResourceList", id="leases"),
        pytest.param("/apis/events.k8s.io/v1", "APIResourceList", id="events"),
    ],
)
async def test_discovery_documents(http: aiohttp.ClientSession, path: str, kind: str) -> None:
    status, doc = await call(http, "GET", path)
    assert (status, doc["kind"]) == (200, kind)


async def test_discovery_lists_services_with_short_name_and_status(
    http: aiohttp.ClientSession,
) -> None:
    _, doc = await call(http, "GET", "/api/v1")
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["services"]["shortNames"] == ["svc"]
    assert "watch" in by_name["services"]["verbs"]
    assert by_name["services/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["nodes"]["namespaced"] is False


async def test_version_and_unknown_paths(http: aiohttp.ClientSession) -> None:
    status, doc = await call(http, "GET", "/version")
    assert (status, doc["major"], doc["minor"]) == (200, "1", "32")
    status, doc = await call(http, "GET", "/apis/example.com/v1")
    assert (status, doc["kind"]) == (404, "Status")
    status, doc = await call(http, "GET", "/api/v1/widgets")
    assert status == 404


# ---------------------------------------------------------------- hooks


async def test_fail_next_fails_exactly_n_resource_requests(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.fail_next(2, code=500)
    codes = [(await call(http, "GET", SVC))[0] for _ in range(3)]
    assert codes == [500, 500, 200]


async def test_fail_next_429_carries_retry_after(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.fail_next(1, code=429)
    async with http.get(SVC) as r:
        doc = await r.json()
        assert (r.status, r.headers["Retry-After"], doc["reason"]) == (429, "1", "TooManyRequests")


async def test_cut_watches_aborts_without_clean_end(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    response, reader = await open_watch(http, SVC)
    async with response:
        await sim.wait_for_watches(1)
        assert sim.cut_watches() == 1
        with pytest.raises(aiohttp.ClientPayloadError):
            await reader.next()
    await sim.wait_for_watches(0, 5, exact=True)
    assert sim.active_watches == 0


async def test_watch_of_a_client_that_went_away_is_dropped(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    response, _ = await open_watch(http, SVC)
    await sim.wait_for_watches(1)
    response.close()
    await sim.wait_for_watches(0, 5, exact=True)
    # A watch is in the request log once it has ended, however it ended.
    assert (sim.request_log[-1].path, sim.request_log[-1].query) == (SVC, "watch=true")


async def test_request_log_records_method_path_query_status(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    await call(http, "GET", f"{SVC}/nope")
    await call(http, "GET", SVC, params={"labelSelector": "a=b"})
    last = list(sim.request_log)[-2:]
    assert [(r.method, r.path, r.status) for r in last] == [
        ("GET", f"{SVC}/nope", 404),
        ("GET", SVC, 200),
    ]
    assert last[1].query == "labelSelector=a%3Db"


async def test_bearer_token_is_required_when_set() -> None:
    async with (
        ApiSimulator(token="s3cret") as sim,
        aiohttp.ClientSession(base_url=sim.url) as http,
    ):
        status, doc = await call(http, "GET", SVC)
        assert (status, doc["reason"]) == (401, "Unauthorized")
        async with http.get(SVC, headers={"Authorization": "Bearer s3cret"}) as r:
            assert r.status == 200


# ---------------------------------------------------------------- less common parameters


async def test_list_resource_version_match_exact_reads_the_past(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    rv = str(sim.store.resource_version)
    sim.store.create(service("b"))
    sim.store.delete("services", "a", "default")
    params = {"resourceVersion": rv, "resourceVersionMatch": "Exact"}
    _, past = await call(http, "GET", SVC, params=params)
    assert [i["metadata"]["name"] for i in past["items"]] == ["a"]
    assert past["metadata"]["resourceVersion"] == rv
    sim.compact()
    status, doc = await call(http, "GET", SVC, params=params)
    assert (status, doc["reason"]) == (410, "Expired")


async def test_watch_send_initial_events_ends_with_marked_bookmark(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    response, reader = await open_watch(
        http,
        SVC,
        sendInitialEvents="true",
        allowWatchBookmarks="true",
        resourceVersionMatch="NotOlderThan",
    )
    async with response:
        events = await reader.take(2)
    assert summary(events) == [("ADDED", "a"), ("BOOKMARK", "")]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


async def test_legacy_watch_path_on_one_object(
    sim: ApiSimulator, http: aiohttp.ClientSession
) -> None:
    sim.store.create(service("a"))
    sim.store.create(service("b"))
    async with http.get(
        "/api/v1/watch/namespaces/default/services/b", params={"timeoutSeconds": "1"}
    ) as r:
        events = await WatchReader(r).rest()
    assert summary(events) == [("ADDED", "b")]


async def test_table_output_for_kubectl(sim: ApiSimulator, http: aiohttp.ClientSession) -> None:
    sim.store.create(service("a", svc_type="LoadBalancer"))
    sim.store.patch(
        "services",
        "a",
        {"status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.3"}]}}},
        namespace="default",
        subresource="status",
    )
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with http.get(SVC, headers={"Accept": accept}) as r:
        doc = await r.json()
    assert doc["kind"] == "Table"
    assert [c["name"] for c in doc["columnDefinitions"]][:5] == [
        "Name",
        "Type",
        "Cluster-IP",
        "External-IP",
        "Port(s)",
    ]
    cells = doc["rows"][0]["cells"]
    assert (cells[0], cells[1], cells[3], cells[4]) == (
        "a",
        "LoadBalancer",
        "10.99.0.3",
        "80:30000/TCP",
    )
    assert doc["rows"][0]["object"]["metadata"]["namespace"] == "default"


async def test_watch_bookmark_comes_two_seconds_before_the_timeout() -> None:
    # bookmark_interval is 0.2 s here; a long one shows the pre-timeout bookmark alone.
    async with (
        ApiSimulator(bookmark_interval=3600) as sim,
        aiohttp.ClientSession(base_url=sim.url) as session,
    ):
        sim.store.create(service("a"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        params = {
            "watch": "1",
            "resourceVersion": str(sim.store.resource_version),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "3",
        }
        async with session.get(SVC, params=params) as r:
            first = await WatchReader(r).next()
            at = loop.time() - started
    assert first is not None
    assert first["type"] == "BOOKMARK"
    assert 0.5 <= at < 2.5
