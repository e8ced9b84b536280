"""A Kubernetes API server simulator for tests, the lab and demos (see docs/apisim.md).

Speaks kube-apiserver's REST protocol well enough for the unmodified official Python
client (sync and `kubernetes.aio`) and kubectl: global resourceVersion, list/watch with
selectors, paging, replay, bookmarks and 410 Expired, writes with conflicts, finalizers
and status subresources, four patch types, discovery, OpenAPI v2/v3, Status errors, and
CustomResourceDefinitions (custom resources appear when their CRD is created, with
structural-schema pruning, defaulting and validation).

In-process use::

    async with ApiSimulator(host="127.0.0.1", port=0, bookmark_interval=0.2) as sim:
        sim.write_kubeconfig(tmp_path / "kubeconfig")
        sim.store.create({"apiVersion": "v1", "kind": "Service", "metadata": {...}})
        sim.compact()            # resumes from older RVs get 410 Expired
        sim.cut_watches()        # abort every watch connection
        sim.fail_next(2, 429)    # next two resource requests fail (Retry-After: 1)
        sim.request_log          # RequestRecord(method, path, query, status)

Synchronous tests use ``with ApiSimulatorThread() as sim:`` with the same names.
``ApiSimulator(tls=True, token="t")`` serves HTTPS (``sim.ca_cert``) for in-cluster tests.
This package must not import the `kubernetes` client: it is the other side of the wire.
"""

from kbgpd_lab.apisim.errors import ApiError
from kbgpd_lab.apisim.resources import RESOURCES, ResourceDef, ResourceTable
from kbgpd_lab.apisim.server import ApiSimulator, RequestRecord
from kbgpd_lab.apisim.store import Store, WatchEvent
from kbgpd_lab.apisim.threaded import ApiSimulatorThread

__all__ = [
    "RESOURCES",
    "ApiError",
    "ApiSimulator",
    "ApiSimulatorThread",
    "RequestRecord",
    "ResourceDef",
    "ResourceTable",
    "Store",
    "WatchEvent",
]
