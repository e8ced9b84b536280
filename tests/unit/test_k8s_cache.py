"""The Kubernetes source's snapshot bookkeeping, driven through the handlers its informers
call: snapshots share one copy of the big indexes (and never change once handed out),
and snapshot_changes() names at least every Service whose objects changed, which is
what lets the speaker's Decider look at those Services only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from clusterkit import changed_keys, ep, eps, node, svc
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.model import ClusterSnapshot, EndpointSlice, Service
from bgpd.objects import build_snapshot
from k8s_watcher.cache import KubernetesSource, _Index
from k8s_watcher.client import KubeClient

T = TypeVar("T")
KEYS = ["a", "b", "c", "d", "e"]

index_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(KEYS), st.integers(0, 3)),
        st.tuples(st.just("del"), st.sampled_from(KEYS), st.just(0)),
        st.tuples(st.just("snap"), st.just(""), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=index_ops, compact_after=st.integers(0, 4))
def test_index_mappings_equal_the_dictionary_when_taken_and_never_change(
    ops: list[tuple[str, str, int]], compact_after: int
) -> None:
    index: _Index[str, int] = _Index(compact_after=compact_after)
    live: dict[str, int] = {}
    taken: list[tuple[Any, dict[str, int]]] = []
    for op, key, value in ops:
        if op == "set":
            index[key] = value
            live[key] = value
        elif op == "del":
            assert index.pop(key, None) == live.pop(key, None)
        else:
            taken.append((index.mapping(), dict(live)))
        assert dict(index.items()) == live
        assert len(index) == len(live)
        for k in KEYS:
            assert (k in index) == (k in live)
            assert index.get(k) == live.get(k)
            assert index.get(k, -1) == live.get(k, -1)
    taken.append((index.mapping(), dict(live)))
    for mapping, expected in taken:
        assert len(mapping) == len(expected)
        assert dict(mapping.items()) == expected
        assert set(mapping) == set(expected) == set(mapping.keys())
        assert sorted(mapping.values()) == sorted(expected.values())
        assert mapping == expected
        for key in KEYS:
            assert (key in mapping) == (key in expected)
            assert mapping.get(key) == expected.get(key)
            assert mapping.get(key, -1) == expected.get(key, -1)


SERVICES = [f"default/s{i}" for i in range(4)]

service_ops = st.one_of(
    st.tuples(
        st.just("service"),
        st.sampled_from(SERVICES),
        st.sampled_from(["lb", "lb-other-ip", "local", "clusterip", "gone"]),
    ),
    st.tuples(
        st.just("slice"),
        st.sampled_from(SERVICES),
        st.sampled_from(["ready", "not-ready", "elsewhere", "moved", "gone"]),
    ),
    st.tuples(st.just("node"), st.just(""), st.sampled_from(["plain", "labelled"])),
    st.tuples(st.just("snap"), st.just(""), st.just("")),
)


def _service(key: str, variant: str) -> Service:
    if variant == "clusterip":
        return svc(key, type="ClusterIP")
    ip = "10.99.0.2" if variant == "lb-other-ip" else "10.99.0.1"
    return svc(key, ip, local=variant == "local")


def _slice(key: str, variant: str) -> EndpointSlice:
    owner = SERVICES[(SERVICES.index(key) + 1) % len(SERVICES)] if variant == "moved" else key
    where = "n2" if variant == "elsewhere" else "n1"
    return eps(owner, ep(where, ready=variant != "not-ready"), name=key.split("/")[1] + "-a")


def _event(
    store: dict[str, T], key: str, new: T | None, handler: Callable[[str, T | None, T | None], None]
) -> None:
    """What an informer does: update its store and call the handler with (old, new)."""
    old = store.get(key)
    if new is None:
        store.pop(key, None)
    else:
        store[key] = new
    if old is not None or new is not None:
        handler(key, old, new)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(service_ops, max_size=30))
async def test_snapshot_changes_name_every_changed_service(
    ops: list[tuple[str, str, str]],
) -> None:
    """Every snapshot equals the objects handled so far (and still does after later
    events), and the keys snapshot_changes() returns cover every Service whose Service
    or EndpointSlices differ from the previous snapshot's (None the first time)."""
    source = KubernetesSource(KubeClient.lazy(None))
    services: dict[str, Service] = {}
    slices: dict[str, EndpointSlice] = {}
    nodes = {"n1": node("n1")}
    source._on_node("n1", None, nodes["n1"])
    taken: list[tuple[ClusterSnapshot, ClusterSnapshot]] = []
    previous: ClusterSnapshot | None = None
    first = True

    def check() -> None:
        nonlocal previous, first
        snapshot, keys = source.snapshot_changes()
        expected = build_snapshot(services.values(), slices.values(), nodes.values())
        if first:
            assert keys is None
            first = False
        else:
            assert keys is not None
            assert changed_keys(previous, expected) <= keys
        taken.append((snapshot, expected))
        previous = expected

    for kind, key, variant in ops:
        if kind == "service":
            new = None if variant == "gone" else _service(key, variant)
            # The Service informer's store is the source's Service index.
            _event(source._services, key, new, source._on_service)  # type: ignore[arg-type]
            if new is None:
                services.pop(key, None)
            else:
                services[key] = new
        elif kind == "slice":
            new_slice = None if variant == "gone" else _slice(key, variant)
            _event(slices, f"default/{key.split('/')[1]}-a", new_slice, source._on_slice)
        elif kind == "node":
            old_node = nodes["n1"]
            nodes["n1"] = node("n1", rack="r1") if variant == "labelled" else node("n1")
            source._on_node("n1", old_node, nodes["n1"])
        else:
            check()
    check()
    for snapshot, expected in taken:
        assert dict(snapshot.services.items()) == dict(expected.services.items())
        assert dict(snapshot.endpoint_slices.items()) == dict(expected.endpoint_slices.items())
        assert dict(snapshot.nodes.items()) == dict(expected.nodes.items())
