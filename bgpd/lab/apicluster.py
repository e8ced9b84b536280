"""The lab's Kubernetes side: the API simulator inside the router namespace, and kubectl.

Role: give the lab a cluster the way a user has one. The API simulator (bgpd.apisim)
listens on a second router address on the node LAN (172.31.250.2:6443), so the nodes'
speakers and the controller reach it over the lab network and nothing listens in the
host's namespace.
Objects are written with the real ``kubectl`` run inside the router namespace, and the
same ``kubectl get svc`` shows the user what the controller allocated.

Two ways to run the simulator there:

* :class:`NetnsApiSimulator` - in this process, on a thread that entered the router
  namespace (``setns`` is per thread for network namespaces), so tests keep the
  simulator's fault hooks (``cut_watches``, ``compact``, ``fail_next``, ``store``);
* ``kube-bgpd apiserver-sim`` as a process in the namespace (``kube-bgpd lab up``, which
  exits and leaves the lab running).

Public interface: ``enter_netns(name)``, ``NetnsApiSimulator(netns_name, host, port)``,
``Kubectl(netns, kubeconfig)`` with ``apply(objects)``, ``delete(kind, name, namespace)``,
``get_json(*args)``, ``text(*args)``; object builders ``namespace_object``,
``node_object``, ``service_object``, ``endpoint_slices``.

What it must not do: listen or connect outside the lab's namespaces.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bgpd.apisim.threaded import ApiSimulatorThread
from bgpd.lab.netns import NETNS_DIR, Netns, NetnsError

CLONE_NEWNET = 0x40000000
API_PORT = 6443


def enter_netns(name: str) -> None:
    """Move the *calling thread* into network namespace ``name`` (``setns(2)``).

    Sockets created afterwards by this thread live in that namespace; other threads of
    the process stay where they are. Python 3.11 has no os.setns, hence ctypes.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


class NetnsApiSimulator(ApiSimulatorThread):
    """:class:`ApiSimulatorThread` whose loop thread runs inside a network namespace."""

    def __init__(self, netns_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.netns_name = netns_name

    def _main(self) -> None:
        # The simulator's thread enters the namespace before its loop binds anything.
        enter_netns(self.netns_name)
        super()._main()


class Kubectl:
    """The real kubectl, run inside a lab namespace against the lab's kubeconfig."""

    def __init__(self, netns: Netns, kubeconfig: Path) -> None:
        self.netns = netns
        self.kubeconfig = kubeconfig
        self.binary = shutil.which("kubectl") or "/usr/bin/kubectl"

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(self.kubeconfig.parent),
        }
        proc = self.netns.run([self.binary, *args], input=stdin, env=env, check=False, timeout=60)
        if check and proc.returncode != 0:
            raise NetnsError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        if objects:
            self.run(
                "apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump_all(list(objects))
            )

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        ns = ["-n", namespace] if namespace else []
        self.run("delete", kind, name, *ns, "--ignore-not-found", "--wait=false")

    def get_json(self, *args: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("get", *args, "-o", "json"))
        return doc

    def text(self, *args: str) -> str:
        return self.run(*args)


# --------------------------------------------------------------------------- objects


def namespace_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def node_object(name: str, addresses: Sequence[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": a} for a in addresses],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def service_object(
    name: str,
    namespace: str,
    *,
    policy: str,
    families: Sequence[int],
    port: int = 80,
    requested_ips: Sequence[str] = (),
) -> dict[str, Any]:
    """A LoadBalancer Service as a user writes it; the controller fills its status."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if requested_ips:
        meta["annotations"] = {"metallb.io/loadBalancerIPs": ",".join(requested_ips)}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": policy,
            "ipFamilyPolicy": "RequireDualStack" if len(families) > 1 else "SingleStack",
            "ipFamilies": [f"IPv{f}" for f in families],
            "selector": {"app": name},
            "ports": [{"port": port, "protocol": "TCP", "targetPort": port}],
        },
    }


def endpoint_slices(
    name: str, namespace: str, *, families: Sequence[int], pod_nodes: Sequence[int], port: int = 80
) -> list[dict[str, Any]]:
    """What the EndpointSlice controller would write for pods on ``pod_nodes``."""
    return [
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-v{fam}",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": f"IPv{fam}",
            "endpoints": [
                {
                    "addresses": [f"10.244.{n}.10" if fam == 4 else f"fd00:244:{n}::10"],
                    "nodeName": f"node{n}",
                    "conditions": {"ready": True, "serving": True, "terminating": False},
                }
                for n in pod_nodes
            ],
            "ports": [{"port": port, "protocol": "TCP"}],
        }
        for fam in families
    ]
