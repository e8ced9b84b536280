"""Helpers for the k8s_watcher and controller tests against the API simulator.

Objects are plain API JSON from kbgpd_lab.kit.manifests with this suite's defaults (a
Service selects app=NAME, one endpoint port 8080, Ready nodes); fixtures give an in-process
simulator on loopback and a KubeClient pointed at it through a real kubeconfig file.
No logic under test lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from k8s_watcher.client import KubeClient
from k8s_watcher.informer import InformerTiming
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.crds import product_crds

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
    """A Service selecting pods app=NAME, TCP ports; the traffic policy where the type has one."""
    return manifests.service(
        name,
        namespace,
        type=svc_type,
        ports=ports,
        protocol="TCP",
        selector={"app": name},
        policy=policy if svc_type in ("LoadBalancer", "NodePort") else None,
        load_balancer_ip=load_balancer_ip or None,
        lb_class=lb_class or None,
        ips=ips,
        annotations=annotations or None,
        labels=labels or None,
    )


def endpoint_slice(
    name: str,
    service: str,
    endpoints: tuple[tuple[str, str, bool], ...],
    namespace: str = "default",
) -> dict[str, Any]:
    """endpoints: (address, node, ready); one TCP port 8080."""
    return manifests.endpoint_slice(
        name,
        service,
        [manifests.endpoint(a, n, ready=r) for a, n, r in endpoints],
        namespace,
        ports=(8080,),
        protocol="TCP",
    )


def node(
    name: str, *, labels: dict[str, str] | None = None, heartbeat: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    """A Ready node (heartbeat as given) with one InternalIP."""
    return manifests.node(
        name,
        labels=labels or {},
        addresses=("172.31.250.11",),
        ready=True,
        heartbeat=heartbeat,
        spec=True,
    )


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return manifests.namespace(name, labels or {})


def free_port(host: str = "127.0.0.1", *, below: int | None = None) -> int:
    """A TCP port nothing listens on right now (for a child process's listener). `below`:
    under that number (MetalLB's BGPPeer schema caps peerPort at 16384, under the kernel's
    ephemeral range), tried at random."""
    if below is None:
        with socket.socket() as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    for port in random.sample(range(10000, below), 200):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind((host, port))
            return port
    raise RuntimeError(f"no free TCP port in 10000-{below - 1} on {host}")


@contextlib.asynccontextmanager
async def simulator(
    tmp_path: Path, *, crds: bool = False, **kwargs: Any
) -> AsyncIterator[tuple[ApiSimulator, Path]]:
    """An in-process simulator on loopback and a kubeconfig file pointing at it; with
    `crds`, kube-bgpd's shipped CRDs installed (the metallb.io and kube-bgpd.io kinds)."""
    kwargs.setdefault("bookmark_interval", 0.2)
    async with ApiSimulator(host="127.0.0.1", port=0, **kwargs) as sim:
        for crd in product_crds() if crds else ():
            sim.store.create(crd)
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


def lease_renewals(
    sim: ApiSimulator, name: str = "kube-bgpd-controller", namespace: str = "default"
) -> Callable[[], int]:
    """A counter of the renewals of a Lease seen from now on (each distinct renewTime;
    poll it more often than the retry period): waiting for a few renewals is waiting for
    a few retry periods, as the leader lives them."""
    seen: set[str] = set()

    def count() -> int:
        obj = sim.store.get("leases", name, namespace)
        renew = None if obj is None else obj["spec"].get("renewTime")
        if renew is not None:
            seen.add(renew)
        return len(seen)

    count()
    return count


@contextlib.asynccontextmanager
async def kube_bgpd(home: Path, log: Path, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`kube-bgpd ARGS` of this venv as a process writing to `log`; its log is printed if
    the body fails, and it is killed if still running at the end."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("kube-bgpd")),
            *args,
            stdout=out,
            stderr=out,
            env={**os.environ, "HOME": str(home)},
        )
    try:
        yield proc
    except BaseException:
        print(await asyncio.to_thread(log.read_text))
        raise
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def explain_from_speaker(port: int, service: str) -> dict[str, Any]:
    """`kube-bgpd explain --from-speaker --output json SERVICE` of the speaker whose status
    listener is on `port` (SpeakerConfig exposeStatus): its own last decision."""
    address = f"127.0.0.1:{port}"
    argv = [str(Path(sys.executable).with_name("kube-bgpd")), "explain", "--from-speaker"]
    proc = subprocess.run(
        [*argv, "--metrics-address", address, "--output", "json", service],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout)[0]
    return result
