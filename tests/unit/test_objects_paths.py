"""The conversion's refusals, path by path, after it was made cheaper for a first list
(issue 18's cold start: checks inline, the field's path written only into a message):
each bad field still gives the one line naming it that it gave before, and the IPv4
shortcut of ``bgpd.objects.ip_address`` reads exactly what ``ipaddress`` reads."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bgpd.model import ServicePort
from bgpd.objects import (
    ObjectError,
    endpoint_slice_from_api,
    ip_address,
    namespace_from_api,
    node_from_api,
    service_from_api,
)


def _service(spec: dict[str, Any] | None = None, **rest: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "shop"}, "spec": spec or {}, **rest}


def _ingress(*entries: Any) -> dict[str, Any]:
    return {"loadBalancer": {"ingress": list(entries)}}


def _slice(*endpoints: Any, **rest: Any) -> dict[str, Any]:
    meta = {"name": "web-a", "namespace": "shop", **rest}
    return {"metadata": meta, "endpoints": list(endpoints)}


W = "Service shop/web"
E = "EndpointSlice shop/web-a"

REFUSED = [
    (service_from_api, {"metadata": "x"}, "Service.metadata: expected an object, got str"),
    (
        service_from_api,
        {"metadata": {"name": 1}},
        "Service.metadata.name: expected a string, got int",
    ),
    (
        service_from_api,
        {"metadata": {"name": "w", "namespace": 2}},
        "Service w.metadata.namespace: expected a string, got int",
    ),
    (service_from_api, _service(status=[]), f"{W}.status: expected an object, got list"),
    (
        service_from_api,
        _service(status={"loadBalancer": 1}),
        f"{W}.status.loadBalancer: expected an object, got int",
    ),
    (
        service_from_api,
        _service(status={"loadBalancer": {"ingress": {}}}),
        f"{W}.status.loadBalancer.ingress: expected a list, got dict",
    ),
    (
        service_from_api,
        _service(status=_ingress("1.2.3.4")),
        f"{W}.status.loadBalancer.ingress[0]: expected an object",
    ),
    (
        service_from_api,
        _service(status=_ingress({"ip": 1})),
        f"{W}.status.loadBalancer.ingress[0].ip: expected a string, got int",
    ),
    (
        service_from_api,
        _service(status=_ingress({"ip": "1.2.3.4"}, {"ip": "01.2.3.4"})),
        f"{W}.status.loadBalancer.ingress[1].ip: '01.2.3.4' is not an IP address",
    ),
    (
        service_from_api,
        _service({"externalTrafficPolicy": 3}),
        f"{W}.spec.externalTrafficPolicy: expected a string, got int",
    ),
    (
        service_from_api,
        _service({"externalTrafficPolicy": "local"}),
        f"{W}.spec.externalTrafficPolicy: 'local' is not Cluster or Local",
    ),
    (service_from_api, _service({"ports": [80]}), f"{W}.spec.ports[0]: expected an object"),
    (
        service_from_api,
        _service({"ports": [{"port": True}]}),
        f"{W}.spec.ports[0].port: expected an integer, got True",
    ),
    (
        service_from_api,
        _service({"ports": [{"port": 8.0}]}),
        f"{W}.spec.ports[0].port: expected an integer, got 8.0",
    ),
    (
        service_from_api,
        _service({"ports": [{"port": 80}, {"port": 81, "protocol": 6}]}),
        f"{W}.spec.ports[1].protocol: expected a string, got int",
    ),
    (
        service_from_api,
        _service({"ports": [{"port": 80, "protocol": 0}]}),
        f"{W}.spec.ports[0].protocol: expected a string, got int",
    ),
    (
        service_from_api,
        _service({"ports": [{"port": 80, "name": []}]}),
        f"{W}.spec.ports[0].name: expected a string, got list",
    ),
    (
        service_from_api,
        _service({"ports": [{"port": 80, "protocol": 6, "name": []}]}),
        f"{W}.spec.ports[0].protocol: expected a string, got int",
    ),
    (
        service_from_api,
        _service({"ipFamilies": ["IPv4", 6]}),
        f"{W}.spec.ipFamilies: expected a list of strings",
    ),
    (
        service_from_api,
        _service({"healthCheckNodePort": True}),
        f"{W}.spec.healthCheckNodePort: True is not a port 1-65535",
    ),
    (
        service_from_api,
        _service({"healthCheckNodePort": 65536}),
        f"{W}.spec.healthCheckNodePort: 65536 is not a port 1-65535",
    ),
    (service_from_api, _service({"type": 1}), f"{W}.spec.type: expected a string, got int"),
    (
        service_from_api,
        _service({"loadBalancerClass": {}}),
        f"{W}.spec.loadBalancerClass: expected a string, got dict",
    ),
    (
        service_from_api,
        _service({"ipFamilyPolicy": 1}),
        f"{W}.spec.ipFamilyPolicy: expected a string, got int",
    ),
    (
        service_from_api,
        _service({"selector": {"a": 1}}),
        f"{W}.spec.selector: 'a' must map a string to a string",
    ),
    (
        service_from_api,
        {"metadata": {"name": "web", "namespace": "shop", "uid": 5}},
        f"{W}.metadata.uid: expected a string, got int",
    ),
    (
        service_from_api,
        {"metadata": {"name": "web", "namespace": "shop", "labels": []}},
        f"{W}.metadata.labels: expected an object, got list",
    ),
    (
        service_from_api,
        {"metadata": {"name": "web", "namespace": "shop", "annotations": {"x": 1}}},
        f"{W}.metadata.annotations: 'x' must map a string to a string",
    ),
    (
        endpoint_slice_from_api,
        _slice(labels={"kubernetes.io/service-name": 1}),
        f"{E}.metadata.labels: 'kubernetes.io/service-name' must map a string to a string",
    ),
    (endpoint_slice_from_api, _slice("x"), f"{E}.endpoints[0]: expected an object"),
    (
        endpoint_slice_from_api,
        _slice({}, {"addresses": "10.0.0.1"}),
        f"{E}.endpoints[1].addresses: expected a list, got str",
    ),
    (
        endpoint_slice_from_api,
        _slice({"addresses": [1]}),
        f"{E}.endpoints[0].addresses: expected a list of strings",
    ),
    (
        endpoint_slice_from_api,
        _slice({"conditions": []}),
        f"{E}.endpoints[0].conditions: expected an object, got list",
    ),
    (
        endpoint_slice_from_api,
        _slice({"nodeName": 1}),
        f"{E}.endpoints[0].nodeName: expected a string, got int",
    ),
    (
        endpoint_slice_from_api,
        _slice({"conditions": {"serving": "yes"}}),
        f"{E}.endpoints[0].conditions.serving: expected true or false, got 'yes'",
    ),
    (
        endpoint_slice_from_api,
        {**_slice(), "addressType": 4},
        f"{E}.addressType: expected a string, got int",
    ),
    (
        node_from_api,
        {"metadata": {"name": "n1"}, "status": {"conditions": [1]}},
        "Node n1.status.conditions[0]: expected an object",
    ),
    (
        node_from_api,
        {
            "metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "NetworkUnavailable", "status": 1}]},
        },
        "Node n1.status.conditions[0].status: expected a string, got int",
    ),
    (
        node_from_api,
        {"metadata": {"name": "n1"}, "status": {"addresses": [{"type": "InternalIP"}]}},
        "Node n1.status.addresses[0].address: required",
    ),
    (
        node_from_api,
        {"metadata": {"name": "n1", "annotations": []}},
        "Node n1.metadata.annotations: expected an object, got list",
    ),
    (
        namespace_from_api,
        {"metadata": {"name": "ns", "labels": {"a": None}}},
        "Namespace ns.metadata.labels: 'a' must map a string to a string",
    ),
]


@pytest.mark.parametrize(("convert", "obj", "message"), REFUSED)
def test_a_bad_field_is_named_in_one_line(convert: Any, obj: Any, message: str) -> None:
    with pytest.raises(ObjectError) as err:
        convert(obj)
    assert str(err.value) == message


def test_ports_default_and_are_shared_between_services() -> None:
    spec = {"ports": [{"port": 80}, {"port": 443, "protocol": "UDP", "name": "q"}]}
    one, two = service_from_api(_service(spec)), service_from_api(_service(dict(spec)))
    assert one.ports == (ServicePort(80, "TCP", ""), ServicePort(443, "UDP", "q"))
    assert one.ports is two.ports


def _reference(text: str) -> object:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return ValueError


def _ours(text: str) -> object:
    try:
        return ip_address(text)
    except ValueError:
        return ValueError


octet = st.one_of(
    st.integers(0, 300).map(str),
    st.text("0123456789", min_size=0, max_size=4),
    st.sampled_from(["٣", "²", " 1", "+1", "-1", "0x1", "1_0"]),
)


@settings(max_examples=2000, deadline=None)
@given(text=st.one_of(st.lists(octet, min_size=1, max_size=6).map(".".join), st.text(max_size=12)))
@example(text="0.0.0.0")
@example(text="255.255.255.255")
@example(text="256.1.1.1")
@example(text="1.2.3.04")
@example(text="1.2.3.4\n")
@example(text="::ffff:1.2.3.4")
@example(text="fe80::1%eth0")
def test_ip_address_reads_what_ipaddress_reads(text: str) -> None:
    ours = _ours(text)
    assert ours == _reference(text)
    assert type(ours) is type(_reference(text))
