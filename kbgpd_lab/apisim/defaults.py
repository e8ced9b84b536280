"""Server-side defaults and allocations the real apiserver applies to the kinds we serve.

Only what consumers of the simulator read: a Service gets its type, sessionAffinity,
port protocol and targetPort, a clusterIP (from 10.96.0.0/12, kept across updates), IP
family fields, traffic policies and node ports (kept across updates, cleared when the
type stops needing them), as pkg/apis/core/v1/defaults.go and the Service REST storage
do; a Namespace gets its `kubernetes` finalizer, phase and name label; a Secret its
`Opaque` type; EndpointSlice ports default to TCP. No validation beyond that. Pure
apart from the `Allocator` state, which the store owns.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from kbgpd_lab.apisim.resources import ResourceDef

_NODE_PORTS = range(30000, 32768)
_SERVICE_CIDR = ipaddress.IPv4Network("10.96.0.0/12")


class Allocator:
    """Hands out cluster IPs (never reused) and node ports (sequential, wrapping)."""

    def __init__(self) -> None:
        self._next_ip = int(_SERVICE_CIDR.network_address) + 10
        self._next_port = _NODE_PORTS.start

    def cluster_ip(self) -> str:
        ip = ipaddress.IPv4Address(self._next_ip)
        self._next_ip += 1
        if ip not in _SERVICE_CIDR:
            raise RuntimeError("the simulator ran out of cluster IPs")
        return str(ip)

    def node_port(self) -> int:
        # Wraps around: the simulator does not track released ports (30,000+ per cycle).
        if self._next_port not in _NODE_PORTS:
            self._next_port = _NODE_PORTS.start
        port = self._next_port
        self._next_port += 1
        return port


def apply(
    rd: ResourceDef, new: dict[str, Any], old: dict[str, Any] | None, alloc: Allocator
) -> None:
    """Fill defaults into `new` (in place); `old` is the stored version on update."""
    if rd.group:
        if rd.group == "discovery.k8s.io" and rd.kind == "EndpointSlice":
            for port in new.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
        return
    if rd.kind == "Service":
        _service(new, old, alloc)
    elif rd.kind == "Secret":
        new.setdefault("type", "Opaque")
    elif rd.kind == "Namespace":
        meta = new["metadata"]
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        new.setdefault("status", {}).setdefault("phase", "Active")


def _service(new: dict[str, Any], old: dict[str, Any] | None, alloc: Allocator) -> None:
    spec = new.setdefault("spec", {})
    old_spec: dict[str, Any] = (old or {}).get("spec") or {}
    svc_type = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    old_ports = {
        (p.get("port"), p.get("protocol", "TCP")): p
        for p in old_spec.get("ports") or []
        if isinstance(p, dict)
    }
    wants_node_ports = svc_type == "NodePort" or (
        svc_type == "LoadBalancer" and spec.setdefault("allocateLoadBalancerNodePorts", True)
    )
    for port in spec.get("ports") or []:
        if not isinstance(port, dict):
            continue
        port.setdefault("protocol", "TCP")
        if "port" in port:
            port.setdefault("targetPort", port["port"])
        if svc_type not in ("NodePort", "LoadBalancer"):
            port.pop("nodePort", None)
        elif "nodePort" not in port:
            previous = old_ports.get((port.get("port"), port["protocol"]), {}).get("nodePort")
            if previous is not None:
                port["nodePort"] = previous
            elif wants_node_ports:
                port["nodePort"] = alloc.node_port()
    if svc_type == "ExternalName":
        for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            spec.pop(field, None)
    else:
        if not spec.get("clusterIP"):
            spec["clusterIP"] = old_spec.get("clusterIP") or alloc.cluster_ip()
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", old_spec.get("ipFamilies", ["IPv4"]))
        spec.setdefault("ipFamilyPolicy", old_spec.get("ipFamilyPolicy", "SingleStack"))
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if svc_type in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    else:
        spec.pop("externalTrafficPolicy", None)
    if svc_type == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local":
        if "healthCheckNodePort" not in spec:
            spec["healthCheckNodePort"] = old_spec.get("healthCheckNodePort") or alloc.node_port()
    else:
        spec.pop("healthCheckNodePort", None)
    new.setdefault("status", {"loadBalancer": {}})
