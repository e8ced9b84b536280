"""The lab's Kubernetes side: the API simulator inside the router namespace, and a client.

Role: give the lab a cluster the way a user has one. The API simulator (kbgpd_lab.apisim)
listens on a second router address on the node LAN (172.31.250.2:6443), so the nodes'
speakers and the controller reach it over the lab network and nothing listens in the
host's namespace.
The lab writes and reads objects through :class:`ApiClient` (plain HTTP from a thread
inside the router namespace); a kubeconfig is written for people who want kubectl.

Two ways to run the simulator there:

* :class:`NetnsApiSimulator` - in this process, on a thread that entered the router
  namespace (``setns`` is per thread for network namespaces), so tests keep the
  simulator's fault hooks (``cut_watches``, ``compact``, ``fail_next``, ``store``);
* ``kube-bgpd-lab apiserver-sim`` as a process in the namespace (``kube-bgpd-lab up``, which
  exits and leaves the lab running).

Public interface: ``enter_netns(name)``, ``call_in_netns(name, fn)``,
``NetnsApiSimulator(netns_name, host, port)``, ``ApiClient(netns_name, url)`` with
``apply(objects)``, ``delete(kind, name, namespace)``, ``list(kind)``, ``request(...)``;
``services_table(services)``; object builders ``namespace_object``, ``node_object``,
``service_object``, ``endpoint_slices`` (the lab's defaults over kbgpd_lab.kit.manifests).

What it must not do: listen or connect outside the lab's namespaces.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kbgpd_lab.apisim.threaded import ApiSimulatorThread
from kbgpd_lab.kit import manifests
from kbgpd_lab.lab.netns import NETNS_DIR, NetnsError

T = TypeVar("T")
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


class ApiError(RuntimeError):
    """The lab's API request failed (unreachable, or an error status)."""


#: Collection paths of the kinds the lab writes.
_PATHS: dict[str, tuple[str, bool]] = {
    "Namespace": ("/api/v1/namespaces", False),
    "Node": ("/api/v1/nodes", False),
    "Service": ("/api/v1/namespaces/{ns}/services", True),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", True),
}


def call_in_netns(name: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` on a short-lived thread that entered network namespace ``name``: its
    sockets are that namespace's, the rest of the process stays where it is."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            enter_netns(name)
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


class ApiClient:
    """A few REST calls to the lab's API simulator, made from inside the router namespace.

    Deliberately tiny (the lab writes four kinds) and dependency-free: kubectl is not a
    Debian package on a fresh machine, and only k8s_watcher may use the Kubernetes client.
    """

    def __init__(self, netns_name: str, url: str, *, timeout: float = 10.0) -> None:
        self.netns_name = netns_name
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310 - our simulator
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)

        def send() -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                    return resp.status, json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read() or b"null")

        try:
            return call_in_netns(self.netns_name, send)
        except (OSError, ValueError) as exc:
            raise ApiError(f"{method} {path}: {exc}") from exc

    def _ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, doc = self.request(method, path, body, **kw)
        if status >= 400:
            raise ApiError(f"{method} {path}: {status} {(doc or {}).get('message', '')}")
        return doc

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        """Create each object, or merge-patch it if it exists (``kubectl apply``-like)."""
        for obj in objects:
            collection = self._collection(obj["kind"], obj["metadata"].get("namespace"))
            status, doc = self.request("POST", collection, obj)
            if status == 409:
                self._ok(
                    "PATCH",
                    f"{collection}/{obj['metadata']['name']}",
                    {k: v for k, v in obj.items() if k != "status"},
                    content_type="application/merge-patch+json",
                )
            elif status >= 400:
                raise ApiError(f"POST {collection}: {status} {(doc or {}).get('message', '')}")

    def annotate(
        self, kind: str, name: str, namespace: str | None, annotations: dict[str, str | None]
    ) -> None:
        """Merge-patch these annotations onto an object (None removes one)."""
        self._ok(
            "PATCH",
            f"{self._collection(kind, namespace)}/{name}",
            {"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json",
        )

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        status, doc = self.request("DELETE", f"{self._collection(kind, namespace)}/{name}")
        if status >= 400 and status != 404:
            raise ApiError(f"DELETE {kind} {name}: {status} {(doc or {}).get('message', '')}")

    def list(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind`` in every namespace, each with its kind set."""
        path, namespaced = _PATHS[kind]
        if namespaced:
            path = path.replace("/namespaces/{ns}", "")
        items: list[dict[str, Any]] = self._ok("GET", path).get("items", [])
        version = "v1" if kind != "EndpointSlice" else "discovery.k8s.io/v1"
        return [{"apiVersion": version, "kind": kind, **o} for o in items]

    @staticmethod
    def _collection(kind: str, namespace: str | None) -> str:
        path, namespaced = _PATHS[kind]
        return path.format(ns=namespace or "default") if namespaced else path


def services_table(services: Sequence[dict[str, Any]]) -> str:
    """The columns ``kubectl get svc -A`` prints (without AGE), for people."""
    rows = [("NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)")]
    for svc in services:
        spec = svc.get("spec", {})
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        ports = ",".join(
            f"{p.get('port')}"
            + (f":{p['nodePort']}" if p.get("nodePort") else "")
            + f"/{p.get('protocol', 'TCP')}"
            for p in spec.get("ports", [])
        )
        rows.append(
            (
                svc["metadata"].get("namespace", ""),
                svc["metadata"]["name"],
                spec.get("type", ""),
                spec.get("clusterIP") or "<none>",
                ",".join(i["ip"] for i in ingress if i.get("ip")) or "<pending>",
                ports or "<none>",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


# --------------------------------------------------------------------------- objects


def namespace_object(name: str) -> dict[str, Any]:
    return manifests.namespace(name)


def node_object(
    name: str, addresses: Sequence[str], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Ready Node with its hostname label and any further ``labels``."""
    return manifests.node(
        name,
        labels={"kubernetes.io/hostname": name, **(labels or {})},
        addresses=addresses,
        ready=True,
    )


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
    return manifests.service(
        name,
        namespace,
        policy=policy,
        families=families,
        family_policy="RequireDualStack" if len(families) > 1 else "SingleStack",
        selector={"app": name},
        ports=(port,),
        protocol="TCP",
        target_port=True,
        annotations=(
            {"metallb.io/loadBalancerIPs": ",".join(requested_ips)} if requested_ips else None
        ),
    )


def endpoint_slices(
    name: str, namespace: str, *, families: Sequence[int], pod_nodes: Sequence[int], port: int = 80
) -> list[dict[str, Any]]:
    """What the EndpointSlice controller would write for pods on ``pod_nodes`` (a node
    named k times runs k pods, each with an address of its own)."""
    return [
        manifests.endpoint_slice(
            f"{name}-v{fam}",
            name,
            [
                manifests.endpoint(
                    f"10.244.{n}.{10 + k}" if fam == 4 else f"fd00:244:{n}::{10 + k:x}",
                    f"node{n}",
                    ready=True,
                    serving=True,
                    terminating=False,
                )
                for i, n in enumerate(pod_nodes)
                for k in [pod_nodes[:i].count(n)]
            ],
            namespace,
            address_type=f"IPv{fam}",
            ports=(port,),
            protocol="TCP",
        )
        for fam in families
    ]
