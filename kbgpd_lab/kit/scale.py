"""The cluster the benchmarks grow: Local LoadBalancer Services, each with one endpoint on
node1 whose readiness a benchmark flips (every flip is a route change for node1).

Role: one shape for bench_k8s.py (through a real API and a real peer) and bench_pass.py
(in process), so their figures are about the same objects.

What it must not do: anything but build API JSON (kbgpd_lab.kit.manifests does the work).
"""

from __future__ import annotations

from typing import Any

from kbgpd_lab.kit import manifests

NAMESPACE = "default"


def local_service(name: str, ip: str) -> dict[str, Any]:
    """A Local LoadBalancer Service whose IP the controller already allocated."""
    return manifests.service(
        name,
        NAMESPACE,
        policy="Local",
        families=(4,),
        family_policy="SingleStack",
        ports=(80,),
        protocol="TCP",
        target_port=True,
        ips=(ip,),
    )


def node1_endpoints(ready: bool) -> list[dict[str, Any]]:
    """The one endpoint (on node1), ready and serving or neither."""
    return [
        manifests.endpoint("10.244.1.10", "node1", ready=ready, serving=ready, terminating=False)
    ]


def node1_slice(service: str, ready: bool) -> dict[str, Any]:
    """Service ``service``'s EndpointSlice, named SERVICE-a."""
    return manifests.endpoint_slice(
        f"{service}-a",
        service,
        node1_endpoints(ready),
        NAMESPACE,
        ports=(80,),
        protocol="TCP",
    )
