"""Structure, not numbers: what a speaker reading the API holds per Service beside the
objects themselves (issue 18; docs/benchmarks.md, "Memory: session 9"). A Service is
in one dictionary (the Service informer's store is the source's index, which snapshots
share), an EndpointSlice's informer keeps no key string of its own, and the status
writer's per-Service state is the ServiceKey and one shared tuple of peers."""

from __future__ import annotations

import gc
import ipaddress
import json
from typing import Any

from bgpd.model import (
    Decision,
    EndpointSlice,
    IPNetwork,
    NodeName,
    PeerName,
    Route,
    RouteAttributes,
    Service,
    ServiceKey,
)
from bgpd.speaker.cluster_status import service_peers
from k8s_watcher.cache import KubernetesSource
from k8s_watcher.client import KubeClient
from k8s_watcher.status_writer import StatusWriter

#: More than the index folds into its shared dictionary at once (_Index compact_after).
COUNT = 100


def _added(obj: dict[str, Any]) -> bytes:
    """A watch event's line: the objects decode to new strings, as from the API."""
    return json.dumps({"type": "ADDED", "object": obj}).encode()


def _service(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"s{i}", "namespace": "team-a", "uid": f"uid-{i}"},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"},
        "status": {"loadBalancer": {"ingress": [{"ip": f"10.0.{i // 250}.{i % 250 + 1}"}]}},
    }


def _slice(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"s{i}-abcde",
            "namespace": "team-a",
            "labels": {"kubernetes.io/service-name": f"s{i}"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [f"10.244.0.{i % 250 + 1}"], "nodeName": "node1"}],
    }


def _fed_source() -> KubernetesSource:
    """A source whose Service and EndpointSlice informers took COUNT watch events each,
    the way every event reaches them (converted, stored, handed to the source)."""
    source = KubernetesSource(KubeClient.lazy(None), nodes=False)
    slices = source.endpoint_slices
    assert slices is not None
    for i in range(COUNT):
        source.services._apply_line(_added(_service(i)))
        slices._apply_line(_added(_slice(i)))
    return source


def _dicts_holding(obj: object) -> list[dict[Any, Any]]:
    return [r for r in gc.get_referrers(obj) if isinstance(r, dict)]


def test_a_service_is_in_one_dictionary_shared_by_the_informer_source_and_snapshot() -> None:
    source = _fed_source()
    snapshot = source.snapshot()
    for i in range(COUNT):
        key = ServiceKey(f"team-a/s{i}")
        service = source.services.cache[key]
        assert type(service) is Service
        assert snapshot.services[key] is service
        # Not the informer's cache, the source's live index and the snapshots' copy.
        assert len(_dicts_holding(service)) == 1


def test_an_endpoint_slice_is_stored_under_its_own_name_string() -> None:
    source = _fed_source()
    snapshot = source.snapshot()
    slices = source.endpoint_slices
    assert slices is not None
    for i in range(COUNT):
        stored = slices.cache[f"team-a/s{i}-abcde"]
        assert type(stored) is EndpointSlice
        assert snapshot.endpoint_slices[ServiceKey(f"team-a/s{i}")] == (stored,)
        [store] = _dicts_holding(stored)
        [name] = [k for k, v in store.items() if v is stored]
        assert name is stored.name  # no "namespace/name" string of its own


def test_the_status_writer_keeps_the_service_key_and_one_shared_tuple_of_peers() -> None:
    peers = [PeerName("tor-a"), PeerName("tor-b")]
    keys = [ServiceKey(f"team-a/s{i}") for i in range(COUNT)]
    routes: list[Route] = []
    on_wire: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {p: {} for p in peers}
    for i, key in enumerate(keys):
        prefix = ipaddress.ip_network(f"10.0.{i // 250}.{i % 250 + 1}/32")
        for peer in peers:
            routes.append(Route(peer, prefix, RouteAttributes(), (key,)))
            on_wire[peer][prefix] = RouteAttributes()
    services = service_peers(Decision(node=NodeName("node1"), routes=tuple(routes)), on_wire)
    writer = StatusWriter(KubeClient.lazy(None), node=NodeName("node1"), namespace="kube-bgpd")
    writer.publish(services, {"peers": []}, "node-uid")
    desired = writer.coalescer._desired
    assert set(desired) == {*keys, "node1"}
    # Strings only (the node's object under its name), so the map is a str-keyed one.
    assert all(type(k) is str for k in desired)
    held = [k for k in desired if k != "node1"]
    assert all(any(k is key for key in keys) for k in held)  # the ServiceKeys themselves
    assert len({id(desired[k]) for k in held}) == 1  # one tuple for equal peers
    assert desired[keys[0]] == tuple(peers)
