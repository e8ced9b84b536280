"""Conversion of API JSON into model types, and cluster-dump parsing."""

from __future__ import annotations

import base64
import ipaddress
import json
from typing import Any

import pytest

from bgpd.model import Endpoint, Service, ServicePort, TrafficPolicy
from bgpd.objects import (
    DumpError,
    ObjectError,
    build_snapshot,
    endpoint_slice_from_api,
    is_our_load_balancer,
    namespace_from_api,
    node_from_api,
    parse_cluster_dump,
    parse_dump,
    secret_password,
    service_from_api,
)
from kbgpd_lab.kit import manifests


def api_service(**spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": spec,
        "status": status,
    }


def api_node(name: str = "n1", conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"rack": "r1"}, "resourceVersion": "17"},
        "status": {
            "conditions": conditions or [],
            "addresses": [{"type": "InternalIP", "address": "172.31.250.11"}],
        },
    }


def api_slice(
    name: str, service: str | None, endpoints: list[dict[str, Any]], namespace: str = "shop"
) -> dict[str, Any]:
    """A slice around literal ``endpoints``: the cases here are about endpoint shapes the
    kit's :func:`~kbgpd_lab.kit.manifests.endpoint` would not write (no conditions, a
    non-bool condition)."""
    return manifests.endpoint_slice(name, service, endpoints, namespace)


@pytest.mark.parametrize(
    ("obj", "check"),
    [
        pytest.param(
            api_service(
                type="LoadBalancer",
                externalTrafficPolicy="Local",
                loadBalancerClass="kube-bgpd.io/bgp",
                loadBalancerIP="198.51.100.9",
                ipFamilies=["IPv4", "IPv6"],
                ipFamilyPolicy="PreferDualStack",
                ports=[{"port": 443, "protocol": "UDP", "name": "q"}, {"port": 80}],
                selector={"app": "web"},
                status={
                    "loadBalancer": {"ingress": [{"ip": "198.51.100.9"}, {"ip": "2001:db8::9"}]}
                },
            ),
            Service(
                namespace="shop",
                name="web",
                type="LoadBalancer",
                uid="u-1",
                load_balancer_class="kube-bgpd.io/bgp",
                external_traffic_policy=TrafficPolicy.LOCAL,
                ingress_ips=(
                    ipaddress.ip_address("198.51.100.9"),
                    ipaddress.ip_address("2001:db8::9"),
                ),
                load_balancer_ip="198.51.100.9",
                ip_families=("IPv4", "IPv6"),
                ip_family_policy="PreferDualStack",
                ports=(ServicePort(443, "UDP", "q"), ServicePort(80, "TCP", "")),
                selector={"app": "web"},
            ),
            id="full-loadbalancer",
        ),
        pytest.param(
            api_service(),
            Service(namespace="shop", name="web", type="ClusterIP", uid="u-1"),
            id="defaults-as-the-api-server",
        ),
        pytest.param(
            api_service(
                type="LoadBalancer",
                status={"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}},
            ),
            Service(namespace="shop", name="web", type="LoadBalancer", uid="u-1"),
            id="hostname-only-ingress-skipped",
        ),
    ],
)
def test_service_from_api(obj: dict[str, Any], check: Service) -> None:
    assert service_from_api(obj) == check


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(
            {"metadata": {"namespace": "x"}}, "Service.metadata.name: required", id="no-name"
        ),
        pytest.param(
            {"metadata": {"name": "web"}}, "Service web.metadata.namespace: required", id="no-ns"
        ),
        pytest.param(
            api_service(externalTrafficPolicy="Global"),
            "Service shop/web.spec.externalTrafficPolicy: 'Global' is not Cluster or Local",
            id="bad-policy",
        ),
        pytest.param(
            api_service(status={"loadBalancer": {"ingress": [{"ip": "300.1.1.1"}]}}),
            "Service shop/web.status.loadBalancer.ingress[0].ip: '300.1.1.1' is not an IP address",
            id="bad-ingress-ip",
        ),
        pytest.param(
            api_service(ports=[{"port": "80"}]),
            "Service shop/web.spec.ports[0].port: expected an integer, got '80'",
            id="port-not-int",
        ),
        pytest.param(
            api_service(ports={"port": 80}),
            "Service shop/web.spec.ports: expected a list, got dict",
            id="ports-not-list",
        ),
        pytest.param("svc", "Service: expected an object, got str", id="not-an-object"),
    ],
)
def test_service_errors_name_the_field(obj: Any, message: str) -> None:
    with pytest.raises(ObjectError) as err:
        service_from_api(obj)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("conditions", "endpoint"),
    [
        pytest.param({"ready": True}, Endpoint(("10.0.0.1",), "n1", True, None, None), id="ready"),
        pytest.param({}, Endpoint(("10.0.0.1",), "n1", None, None, None), id="unset-stays-none"),
        pytest.param(
            {"ready": False, "serving": True, "terminating": True},
            Endpoint(("10.0.0.1",), "n1", False, True, True),
            id="terminating-serving",
        ),
    ],
)
def test_endpoint_conditions_keep_tristate(conditions: dict[str, Any], endpoint: Endpoint) -> None:
    s = endpoint_slice_from_api(
        api_slice(
            "web-x",
            "web",
            [{"addresses": ["10.0.0.1"], "nodeName": "n1", "conditions": conditions}],
        )
    )
    assert s.service_name == "web"
    assert s.service_key == "shop/web"
    assert s.endpoints == (endpoint,)


def test_endpoint_condition_must_be_bool() -> None:
    with pytest.raises(ObjectError, match=r"endpoints\[0\]\.conditions\.ready"):
        endpoint_slice_from_api(
            api_slice("web-x", "web", [{"addresses": [], "conditions": {"ready": "yes"}}])
        )


@pytest.mark.parametrize(
    ("conditions", "unavailable"),
    [
        pytest.param([], False, id="no-conditions"),
        pytest.param(
            [{"type": "NetworkUnavailable", "status": "True"}], True, id="network-unavailable"
        ),
        pytest.param(
            [{"type": "NetworkUnavailable", "status": "False"}], False, id="network-available"
        ),
        pytest.param([{"type": "Ready", "status": "False"}], False, id="not-ready-is-not-it"),
    ],
)
def test_node_network_unavailable(conditions: list[dict[str, Any]], unavailable: bool) -> None:
    n = node_from_api(api_node(conditions=conditions))
    assert n.network_unavailable is unavailable
    assert n.labels == {"rack": "r1"}
    assert n.addresses == (("InternalIP", "172.31.250.11"),)


def test_node_heartbeat_converts_equal() -> None:
    """The kubelet rewrites condition heartbeats every few seconds; the model drops them so
    the watcher can ignore such updates by comparing converted Nodes."""
    before = api_node(
        conditions=[
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": "2026-11-30T10:00:00Z",
            }
        ]
    )
    after = json.loads(json.dumps(before))
    after["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-30T10:00:40Z"
    after["metadata"]["resourceVersion"] = "18"
    assert node_from_api(before) == node_from_api(after)


def test_namespace_from_api() -> None:
    ns = namespace_from_api({"metadata": {"name": "shop", "labels": {"team": "a"}}})
    assert (ns.name, dict(ns.labels)) == ("shop", {"team": "a"})


def test_build_snapshot_groups_slices_by_service_label() -> None:
    snap = build_snapshot(
        [service_from_api(api_service(type="LoadBalancer"))],
        [
            endpoint_slice_from_api(api_slice("web-b", "web", [{"addresses": ["10.0.0.2"]}])),
            endpoint_slice_from_api(api_slice("web-a", "web", [{"addresses": ["10.0.0.1"]}])),
            endpoint_slice_from_api(api_slice("orphan", None, [{"addresses": ["10.0.0.3"]}])),
            endpoint_slice_from_api(
                api_slice("web-c", "web", [{"addresses": ["10.0.0.4"]}], namespace="other")
            ),
        ],
        [node_from_api(api_node())],
    )
    assert [s.name for s in snap.endpoint_slices["shop/web"]] == ["web-a", "web-b"]
    assert sorted(snap.endpoint_slices) == ["other/web", "shop/web"]
    assert [e.addresses for e in snap.endpoints_of("shop/web")] == [("10.0.0.1",), ("10.0.0.2",)]
    assert list(snap.nodes) == ["n1"]


@pytest.mark.parametrize(
    ("service", "served_class", "ours"),
    [
        pytest.param(Service("a", "b"), None, True, id="unset-class-no-config"),
        pytest.param(Service("a", "b", load_balancer_class="x"), None, False, id="class-no-config"),
        pytest.param(Service("a", "b", load_balancer_class="x"), "x", True, id="same-class"),
        pytest.param(Service("a", "b", load_balancer_class="y"), "x", False, id="other-class"),
        # MetalLB --lb-class: "handle only services whose spec.loadBalancerClass
        # matches"; a class-less Service belongs to the default implementation.
        pytest.param(Service("a", "b"), "x", False, id="unset-class-with-config"),
        pytest.param(Service("a", "b", type="NodePort"), None, False, id="not-loadbalancer"),
    ],
)
def test_is_our_load_balancer(service: Service, served_class: str | None, ours: bool) -> None:
    assert is_our_load_balancer(service, served_class) is ours


DUMP_OBJECTS = [
    api_service(
        type="LoadBalancer", status={"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}}
    ),
    api_slice("web-a", "web", [{"addresses": ["10.0.0.1"], "nodeName": "n1"}]),
    api_node("n1"),
    api_node("n2"),
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"}},
]


def as_yaml(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": DUMP_OBJECTS}), id="json-list"
        ),
        pytest.param(
            as_yaml({"apiVersion": "v1", "kind": "List", "items": DUMP_OBJECTS}), id="yaml-list"
        ),
        pytest.param(
            "---\n".join(as_yaml(o) for o in DUMP_OBJECTS), id="yaml-one-object-per-document"
        ),
        pytest.param(
            as_yaml({"kind": "List", "items": DUMP_OBJECTS[:2]})
            + "---\n"
            + as_yaml(
                {
                    "kind": "NodeList",
                    "items": [
                        {k: v for k, v in n.items() if k != "kind"} for n in DUMP_OBJECTS[2:4]
                    ],
                }
            ),
            id="yaml-typed-list-items-without-kind",
        ),
    ],
)
def test_parse_cluster_dump(text: str) -> None:
    snap = parse_cluster_dump(text)
    assert list(snap.services) == ["shop/web"]
    assert [str(i) for i in snap.services["shop/web"].ingress_ips] == ["198.51.100.1"]
    assert sorted(snap.nodes) == ["n1", "n2"]
    assert [e.node_name for e in snap.endpoints_of("shop/web")] == ["n1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{not json", "not valid JSON", id="bad-json"),
        pytest.param("kind: List\nitems: [\n", "not valid YAML", id="bad-yaml"),
        pytest.param("- 1\n- 2\n", "dump item 0: expected an object, got int", id="list-of-ints"),
        pytest.param(
            "just text\n", "dump: expected a kind: List or an object, got str", id="scalar"
        ),
        pytest.param(
            json.dumps({"kind": "List", "items": {"a": 1}}),
            "dump: items must be a list",
            id="items",
        ),
        pytest.param(
            json.dumps({"kind": "List", "items": [{"metadata": {"name": "x"}}]}),
            "dump item 0: has no kind",
            id="item-without-kind",
        ),
        pytest.param(
            json.dumps({"kind": "List", "items": [api_node(), api_service(ports="80")]}),
            "dump item 1 (Service): Service shop/web.spec.ports: expected a list, got str",
            id="bad-item-named-by-index-and-kind",
        ),
        pytest.param(
            as_yaml(api_node()) + "---\n" + as_yaml({"kind": "Service", "metadata": {}}),
            "document 2 (Service): Service.metadata.name: required",
            id="second-document-named",
        ),
    ],
)
def test_parse_cluster_dump_errors(text: str, message: str) -> None:
    with pytest.raises(DumpError) as err:
        parse_cluster_dump(text)
    assert message in str(err.value)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("secret", "password"),
    [
        pytest.param({"data": {"password": b64("s3cret")}}, "s3cret", id="data-base64"),
        pytest.param({"stringData": {"password": "plain"}}, "plain", id="stringData"),
        pytest.param(
            {"data": {"password": b64("wins")}, "stringData": {"password": "loses"}},
            "wins",
            id="data-first",
        ),
        pytest.param({"data": {"password": "not base64!"}}, None, id="bad-base64"),
        pytest.param({"data": {"password": "/w=="}}, None, id="not-utf8"),  # byte 0xff
        pytest.param({"data": {"username": b64("u")}}, None, id="no-password-key"),
        pytest.param({"type": "Opaque"}, None, id="no-data"),
    ],
)
def test_secret_password(secret: dict[str, Any], password: str | None) -> None:
    assert secret_password(secret) == password


def test_parse_dump_keeps_secrets_by_namespace_and_name() -> None:
    secrets = [
        {
            "kind": "Secret",
            "metadata": {"name": "tor-md5", "namespace": "kube-bgpd-system"},
            "type": "kubernetes.io/basic-auth",
            "data": {"password": b64("s3cret")},
        },
        {"kind": "Secret", "metadata": {"name": "no-ns"}, "stringData": {"password": "p"}},
        {"kind": "Secret", "metadata": {"name": "empty", "namespace": "x"}},
    ]
    dump = parse_dump(as_yaml({"kind": "List", "items": [*DUMP_OBJECTS, *secrets]}))
    assert dict(dump.secret_passwords) == {
        ("kube-bgpd-system", "tor-md5"): "s3cret",
        ("default", "no-ns"): "p",
        ("x", "empty"): None,
    }
    assert list(dump.snapshot.services) == ["shop/web"]  # the rest is parsed as before
    with pytest.raises(DumpError, match=r"dump item 0 \(Secret\): has no metadata.name"):
        parse_dump(as_yaml({"kind": "List", "items": [{"kind": "Secret", "metadata": {}}]}))
