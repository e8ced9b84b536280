"""Builders and helpers for the k8s_watcher and controller tests against the API simulator.

Objects are plain API JSON (what kubectl would send); fixtures give an in-process
simulator on loopback and a KubeClient pointed at it through a real kubeconfig file.
No logic under test lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from k8s_watcher.client import KubeClient
from k8s_watcher.informer import InformerTiming
from kbgpd_lab.apisim import ApiSimulator

#: Short timings so failures and recoveries happen within a test's patience.
FAST = InformerTiming(
    watch_timeout=5,
    read_grace=3.0,
    resync_period=None,
    backoff_initial=0.05,
    backoff_max=0.4,
    page_size=2,
    list_timeout=5.0,
)


def lb_service(
    name: str,
    namespace: str = "default",
    *,
    ips: tuple[str, ...] = (),
    load_balancer_ip: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    policy: str = "Cluster",
    svc_type: str = "LoadBalancer",
    lb_class: str | None = None,
    ports: tuple[int, ...] = (80,),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": svc_type,
        "ports": [{"port": p, "protocol": "TCP"} for p in ports],
        "selector": {"app": name},
    }
    if svc_type in ("LoadBalancer", "NodePort"):
        spec["externalTrafficPolicy"] = policy
    if load_balancer_ip:
        spec["loadBalancerIP"] = load_balancer_ip
    if lb_class:
        spec["loadBalancerClass"] = lb_class
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
    if ips:
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}}
    return obj


def endpoint_slice(
    name: str,
    service: str,
    endpoints: tuple[tuple[str, str, bool], ...],
    namespace: str = "default",
) -> dict[str, Any]:
    """endpoints: (address, node, ready)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [a], "nodeName": n, "conditions": {"ready": r}} for a, n, r in endpoints
        ],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }


def node(
    name: str, *, labels: dict[str, str] | None = None, heartbeat: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "172.31.250.11"}],
        },
    }


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}},
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for a child process's listener)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    within: float = 10.0,
    what: str = "condition",
) -> float:
    """Poll until `predicate()` (a plain or an async check); returns the seconds it took.
    Fails loudly on timeout."""
    start = time.monotonic()
    while not await _holds(predicate):
        if time.monotonic() - start > within:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def _holds(predicate: Callable[[], bool | Awaitable[bool]]) -> bool:
    result = predicate()
    return await result if inspect.isawaitable(result) else result


@contextlib.asynccontextmanager
async def simulator(tmp_path: Path, **kwargs: Any) -> AsyncIterator[tuple[ApiSimulator, Path]]:
    """An in-process simulator on loopback and a kubeconfig file pointing at it."""
    kwargs.setdefault("bookmark_interval", 0.2)
    async with ApiSimulator(host="127.0.0.1", port=0, **kwargs) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        yield sim, kubeconfig


@contextlib.asynccontextmanager
async def client_for(kubeconfig: Path) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(str(kubeconfig)) as client:
        yield client


@contextlib.asynccontextmanager
async def running(coro: Coroutine[Any, Any, Any], name: str) -> AsyncIterator[asyncio.Task[Any]]:
    """Run a never-ending coroutine as a task for the block; cancel and await it after.
    If it died on its own, its exception surfaces here instead of being lost."""
    task = asyncio.create_task(coro, name=name)
    try:
        yield task
        if task.done():
            task.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
