"""What the informers' caches (and a dump's snapshot) hold per object: the model's
slotted types with only what the decision, the allocator and the drain read, shared
strings and one shared empty map; never the API's JSON (docs/benchmarks.md, "Memory")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bgpd import allocation, decision
from bgpd.model import EMPTY_LABELS, EndpointSlice, Node, Service
from bgpd.objects import (
    KEPT_ANNOTATION_PREFIXES,
    endpoint_slice_from_api,
    node_from_api,
    service_from_api,
)
from bgpd.speaker import drain
from k8s_watcher.informer import ENDPOINT_SLICES, NAMESPACES, NODES, SERVICES

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _service(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a", **meta},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
    }


def _fresh(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a watch event decodes it: new string objects every time."""
    decoded: dict[str, Any] = json.loads(json.dumps(obj))
    return decoded


def test_only_the_annotations_the_product_reads_are_kept() -> None:
    big = _fresh(_service("a"))
    big["metadata"]["annotations"] = {
        LAST_APPLIED: json.dumps(big) * 20,
        "metallb.io/address-pool": "pool-a",
        "metallb.universe.tf/allow-shared-ip": "k",
        "kube-bgpd.io/communities": "65000:1",
        "example.com/owner": "team-a",
    }
    service = service_from_api(big)
    assert dict(service.annotations) == {
        "metallb.io/address-pool": "pool-a",
        "metallb.universe.tf/allow-shared-ip": "k",
        "kube-bgpd.io/communities": "65000:1",
    }


def test_every_annotation_read_has_a_kept_prefix() -> None:
    read = [
        decision.ANNOTATION_COMMUNITIES,
        decision.ANNOTATION_LOCAL_PREF,
        decision.ANNOTATION_MED,
        drain.ANNOTATION_DRAIN,
        allocation.ANNOTATION_LOAD_BALANCER_IPS,
        allocation.ANNOTATION_ADDRESS_POOL,
        allocation.ANNOTATION_ALLOW_SHARED_IP,
        allocation.ANNOTATION_IP_ALLOCATED_FROM_POOL,
        allocation.DEPRECATED_PREFIX + "address-pool",
    ]
    assert all(name.startswith(KEPT_ANNOTATION_PREFIXES) for name in read)


def test_a_node_keeps_its_labels_and_only_our_annotations() -> None:
    node = node_from_api(
        {
            "metadata": {
                "name": "n1",
                "labels": {"zone": "a"},
                "annotations": {"kube-bgpd.io/drain": "true", "flannel.alpha.coreos.com/x": "y"},
            }
        }
    )
    assert dict(node.labels) == {"zone": "a"}
    assert dict(node.annotations) == {"kube-bgpd.io/drain": "true"}


def test_repeated_values_are_shared_not_copied_per_object() -> None:
    one, two = (service_from_api(_fresh(_service(n))) for n in ("a", "b"))
    assert one.namespace is two.namespace
    assert one.type is two.type
    assert one.ports[0].protocol is two.ports[0].protocol
    # No labels, no annotations: the one shared empty map, not a new one per object.
    assert one.labels is EMPTY_LABELS
    assert one.annotations is EMPTY_LABELS
    slice_json = {
        "metadata": {
            "name": "a-1",
            "namespace": "team-a",
            "labels": {"kubernetes.io/service-name": "a"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.1"], "nodeName": "node1"}],
    }
    s1, s2 = (endpoint_slice_from_api(_fresh(slice_json)) for _ in range(2))
    assert s1.endpoints[0].node_name is s2.endpoints[0].node_name
    assert s1.namespace is one.namespace


@pytest.mark.parametrize(
    ("kind", "obj", "model"),
    [
        pytest.param(SERVICES, _service("a"), Service, id="Service"),
        pytest.param(
            ENDPOINT_SLICES,
            {"metadata": {"name": "a-1", "namespace": "ns"}, "endpoints": []},
            EndpointSlice,
            id="EndpointSlice",
        ),
        pytest.param(NODES, {"metadata": {"name": "n1"}}, Node, id="Node"),
    ],
)
def test_informers_cache_the_slotted_model_type(kind: Any, obj: Any, model: type) -> None:
    cached = kind.convert(_fresh(obj))
    assert type(cached) is model
    assert not hasattr(cached, "__dict__")  # slotted: no per-object dictionary
    assert NAMESPACES.convert({"metadata": {"name": "x"}}).labels is EMPTY_LABELS
