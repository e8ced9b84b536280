"""Kubernetes objects and kube-bgpd config documents as API JSON dicts (what kubectl sends).

Role: the one place tests, benchmarks and the lab build a Service, an EndpointSlice, a
Node, a Namespace or a config document (IPAddressPool, BGPPeer, BGPAdvertisement,
SpeakerConfig), so a suite states only what its case changes. Every optional field is
left out unless asked for: an object carries exactly what its caller wrote, as a user's
manifest would.

Public interface: ``service``, ``endpoint``, ``endpoint_slice``, ``node``, ``namespace``;
``config_object``, ``pool``, ``bgp_peer``, ``advertisement``, ``speaker_config``;
``SERVICE_NAME_LABEL``.

What it must not do: talk to an API, start processes or hold logic under test; it only
builds dicts (a fresh one per call, so a caller may change what it gets).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The label that ties an EndpointSlice to its Service (Kubernetes' EndpointSlice docs).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

METALLB_V1BETA1 = "metallb.io/v1beta1"
METALLB_V1BETA2 = "metallb.io/v1beta2"
KUBE_BGPD_V1ALPHA1 = "kube-bgpd.io/v1alpha1"


def _ports(ports: Iterable[int], protocol: str | None, target_port: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for port in ports:
        entry: dict[str, Any] = {"port": port}
        if protocol is not None:
            entry["protocol"] = protocol
        if target_port:
            entry["targetPort"] = port
        out.append(entry)
    return out


def service(
    name: str,
    namespace: str = "default",
    *,
    type: str = "LoadBalancer",
    policy: str | None = None,
    ports: Iterable[int] = (80,),
    protocol: str | None = None,
    target_port: bool = False,
    selector: Mapping[str, str] | None = None,
    families: Sequence[int] = (),
    family_policy: str | None = None,
    load_balancer_ip: str | None = None,
    lb_class: str | None = None,
    ips: Iterable[str] = (),
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    uid: str | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Service; ``policy`` is spec.externalTrafficPolicy, ``families`` (4, 6) spec.ipFamilies,
    ``ips`` the status' ingress IPs (an allocation already made), ``spec`` extra spec fields;
    each port gets ``protocol`` and a targetPort equal to it when asked."""
    body: dict[str, Any] = {"type": type, "ports": _ports(ports, protocol, target_port)}
    if selector is not None:
        body["selector"] = dict(selector)
    if policy is not None:
        body["externalTrafficPolicy"] = policy
    if families:
        body["ipFamilies"] = [f"IPv{f}" for f in families]
    if family_policy is not None:
        body["ipFamilyPolicy"] = family_policy
    if load_balancer_ip is not None:
        body["loadBalancerIP"] = load_balancer_ip
    if lb_class is not None:
        body["loadBalancerClass"] = lb_class
    body.update(spec or {})
    meta = _metadata(name, namespace, labels=labels, annotations=annotations)
    if uid is not None:
        meta["uid"] = uid
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": body}
    ingress = [{"ip": ip} for ip in ips]
    if ingress:
        obj["status"] = {"loadBalancer": {"ingress": ingress}}
    return obj


def endpoint(
    address: str,
    node: str | None = None,
    *,
    ready: bool = True,
    serving: bool | None = None,
    terminating: bool | None = None,
) -> dict[str, Any]:
    """One endpoint of an EndpointSlice: its address, the node of its pod (if any) and its
    conditions (serving and terminating only when given)."""
    conditions: dict[str, bool] = {"ready": ready}
    if serving is not None:
        conditions["serving"] = serving
    if terminating is not None:
        conditions["terminating"] = terminating
    out: dict[str, Any] = {"addresses": [address]}
    if node is not None:
        out["nodeName"] = node
    out["conditions"] = conditions
    return out


def endpoint_slice(
    name: str,
    service: str | None,
    endpoints: Iterable[Mapping[str, Any]],
    namespace: str = "default",
    *,
    address_type: str = "IPv4",
    ports: Iterable[int] = (),
    protocol: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An EndpointSlice of ``service`` (the service-name label, plus ``labels``; None: no
    Service, a slice another controller manages) holding ``endpoints`` (see
    :func:`endpoint`, or a literal mapping); a ``ports`` list only when ports are given."""
    owner = {} if service is None else {SERVICE_NAME_LABEL: service}
    obj: dict[str, Any] = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**owner, **(labels or {})},
        },
        "addressType": address_type,
        "endpoints": [dict(e) for e in endpoints],
    }
    port_list = _ports(ports, protocol, target_port=False)
    if port_list:
        obj["ports"] = port_list
    return obj


def node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    addresses: Iterable[str] = (),
    ready: bool | None = None,
    heartbeat: str | None = None,
    spec: bool = False,
) -> dict[str, Any]:
    """A Node with InternalIP ``addresses``; a Ready condition when ``ready`` is given (with
    lastHeartbeatTime ``heartbeat`` and a fixed transition time when that is given); an
    empty spec when asked (what the API returns for a Node nobody configured)."""
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
    if spec:
        obj["spec"] = {}
    status: dict[str, Any] = {}
    if ready is not None:
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        if heartbeat is not None:
            condition["lastHeartbeatTime"] = heartbeat
            condition["lastTransitionTime"] = "2026-01-01T00:00:00Z"
        status["conditions"] = [condition]
    address_list = [{"type": "InternalIP", "address": a} for a in addresses]
    if address_list:
        status["addresses"] = address_list
    if status:
        obj["status"] = status
    return obj


def namespace(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(name, labels=labels)}


def _metadata(
    name: str,
    namespace: str | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return meta


# --------------------------------------------------------------------------- config documents


def config_object(api: str, kind: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A config document as kube-bgpd reads it from a file or the API."""
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": dict(spec)}


def pool(name: str, addresses: Iterable[str], **spec: Any) -> dict[str, Any]:
    """An IPAddressPool of ``addresses`` (CIDRs or ranges); ``spec`` adds fields."""
    return config_object(
        METALLB_V1BETA1, "IPAddressPool", name, {"addresses": list(addresses), **spec}
    )


def bgp_peer(name: str, *, my_asn: int, peer_asn: int, address: str, **spec: Any) -> dict[str, Any]:
    """A BGPPeer; ``spec`` adds fields (holdTime, enableGracefulRestart, ...)."""
    base = {"myASN": my_asn, "peerASN": peer_asn, "peerAddress": address}
    return config_object(METALLB_V1BETA2, "BGPPeer", name, {**base, **spec})


def advertisement(name: str, **spec: Any) -> dict[str, Any]:
    """A BGPAdvertisement (ipAddressPools, communities, ... in ``spec``)."""
    return config_object(METALLB_V1BETA1, "BGPAdvertisement", name, spec)


def speaker_config(name: str = "speaker", **spec: Any) -> dict[str, Any]:
    """kube-bgpd's own SpeakerConfig (drainWindow, onSigterm, ... in ``spec``)."""
    return config_object(KUBE_BGPD_V1ALPHA1, "SpeakerConfig", name, spec)
