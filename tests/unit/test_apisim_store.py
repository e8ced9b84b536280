"""The simulator's store without HTTP: history ring, snapshots, defaults, allocations."""

from __future__ import annotations

from typing import Any

import pytest

from kbgpd_lab.apisim import ApiError, Store, WatchEvent
from kbgpd_lab.apisim.defaults import Allocator


def svc(name: str, svc_type: str = "ClusterIP", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": svc_type, "ports": [{"port": 80}], **spec},
    }


def test_history_ring_overflow_raises_the_watermark() -> None:
    store = Store(history_size=3)
    start = store.resource_version
    for i in range(5):
        store.create(svc(f"s{i}"))
    assert store.watermark == start + 2
    assert [e.rv for e in store.history_after(start + 2)] == [start + 3, start + 4, start + 5]
    with pytest.raises(ApiError) as err:
        store.history_after(start + 1)
    assert (err.value.code, err.value.reason) == (410, "Expired")


def test_snapshot_at_undoes_later_writes() -> None:
    store = Store()
    store.create(svc("a"))
    store.create(svc("b"))
    rv = store.resource_version
    store.delete("services", "a", "default")
    store.patch("services", "b", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    store.create(svc("c"))
    rd = store.resolve("services")
    past = store.snapshot_at(rd, rv)
    assert sorted(k[1] for k in past) == ["a", "b"]
    assert "labels" not in past[("default", "b")].obj["metadata"]


def test_sorted_keys_follow_creates_and_deletes_and_survive_updates() -> None:
    store = Store()
    rd = store.resolve("services")
    for name in ("b", "a"):
        store.create(svc(name))
    keys = store.sorted_keys(rd)
    assert keys == [("default", "a"), ("default", "b")]
    store.patch("services", "b", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    assert store.sorted_keys(rd) is keys  # an update keeps the set of keys: kept
    store.create(svc("c"))
    assert store.sorted_keys(rd) == [("default", "a"), ("default", "b"), ("default", "c")]
    store.delete("services", "a", "default")
    assert store.sorted_keys(rd) == [("default", "b"), ("default", "c")]
    assert store.sorted_keys(rd) == sorted(store.records(rd))


def test_subscribers_see_every_commit_synchronously() -> None:
    store = Store()
    seen: list[WatchEvent] = []
    store.subscribe(seen.append)
    store.create(svc("a"))
    store.patch("services", "a", {"spec": {"sessionAffinity": "ClientIP"}}, namespace="default")
    store.patch("services", "a", {"spec": {"sessionAffinity": "ClientIP"}}, namespace="default")
    store.delete("services", "a", "default")
    store.unsubscribe(seen.append)
    store.create(svc("b"))
    assert [(e.type, e.key) for e in seen] == [
        ("ADDED", ("default", "a")),
        ("MODIFIED", ("default", "a")),
        ("DELETED", ("default", "a")),
    ]
    assert [e.rv for e in seen] == sorted(e.rv for e in seen)


def test_store_returns_copies() -> None:
    store = Store()
    created = store.create(svc("a"))
    created["spec"]["type"] = "NodePort"
    got = store.get("services", "a", "default")
    assert got is not None
    assert got["spec"]["type"] == "ClusterIP"


@pytest.mark.parametrize(
    ("create", "change", "expect"),
    [
        pytest.param(
            svc("a", "LoadBalancer"),
            {"spec": {"type": "ClusterIP"}},
            {"nodePort": None, "externalTrafficPolicy": None},
            id="type-change-drops-node-ports",
        ),
        pytest.param(
            svc("a", "LoadBalancer"),
            {"spec": {"externalTrafficPolicy": "Local"}},
            {"healthCheckNodePort": "set"},
            id="local-gets-health-check-port",
        ),
        pytest.param(
            svc("a", "ExternalName", externalName="db.example.com"),
            {"metadata": {"labels": {"x": "1"}}},
            {"clusterIP": None},
            id="external-name-has-no-cluster-ip",
        ),
        pytest.param(
            svc("a", clusterIP="None"),
            {"metadata": {"labels": {"x": "1"}}},
            {"clusterIP": "None"},
            id="headless-stays-headless",
        ),
    ],
)
def test_service_defaults_follow_the_type(
    create: dict[str, Any], change: dict[str, Any], expect: dict[str, Any]
) -> None:
    store = Store()
    store.create(create)
    out = store.patch("services", "a", change, namespace="default")
    spec = out["spec"]
    for field, want in expect.items():
        value = spec["ports"][0].get(field) if field == "nodePort" else spec.get(field)
        if want is None:
            assert value is None, field
        elif want == "set":
            assert isinstance(value, int), field
        else:
            assert value == want, field


def test_update_keeps_allocations_the_client_omitted() -> None:
    store = Store()
    first = store.create(svc("a", "LoadBalancer"))
    body = svc("a", "LoadBalancer")
    body["metadata"]["labels"] = {"x": "1"}
    second = store.update(body)
    assert second["spec"]["clusterIP"] == first["spec"]["clusterIP"]
    assert second["spec"]["ports"][0]["nodePort"] == first["spec"]["ports"][0]["nodePort"]


def test_node_ports_stay_in_range_when_wrapping() -> None:
    alloc = Allocator()
    ports = [alloc.node_port() for _ in range(2768 + 5)]
    assert min(ports) == 30000
    assert max(ports) == 32767
    assert ports[2768:] == [30000, 30001, 30002, 30003, 30004]


def test_unknown_kind_and_resource() -> None:
    store = Store()
    with pytest.raises(ApiError) as err:
        store.create({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {}})
    assert err.value.code == 404
    with pytest.raises(ApiError):
        store.get("widgets", "a")


def owned(name: str, *owners: dict[str, Any], finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "ownerReferences": list(owners)}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


def node_ref(store: Store, name: str) -> dict[str, Any]:
    node = store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}


def test_garbage_collection_follows_owner_references() -> None:
    """Deleting an owner deletes its dependents (the garbage collector's background
    cascade, done at once); a dependent with another owner alive stays; a dependent
    with a finalizer gets its deletionTimestamp."""
    store = Store()
    n1, n2 = node_ref(store, "n1"), node_ref(store, "n2")
    store.create(owned("only-n1", n1))
    store.create(owned("both", n1, n2))
    store.create(owned("held", n1, finalizers=("example.com/keep",)))
    store.create(owned("other", n2))
    store.delete("nodes", "n1")
    names = {o["metadata"]["name"] for o in store.list("configmaps", "default")}
    assert names == {"both", "held", "other"}
    held = store.get("configmaps", "held", "default")
    assert held is not None
    assert held["metadata"].get("deletionTimestamp")
    store.delete("nodes", "n2")
    names = {o["metadata"]["name"] for o in store.list("configmaps", "default")}
    assert names == {"held"}


def test_a_dependent_whose_owner_reference_was_removed_stays() -> None:
    store = Store()
    n1 = node_ref(store, "n1")
    store.create(owned("cm", n1))
    store.patch("configmaps", "cm", {"metadata": {"ownerReferences": None}}, namespace="default")
    store.delete("nodes", "n1")
    assert store.get("configmaps", "cm", "default") is not None


def test_an_object_created_with_its_owners_gone_is_collected() -> None:
    store = Store()
    n1 = node_ref(store, "n1")
    store.delete("nodes", "n1")
    store.create(owned("late", n1))
    assert store.get("configmaps", "late", "default") is None
