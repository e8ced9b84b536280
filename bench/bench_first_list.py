"""The speaker's CPU for its first LIST, per object (not a test; no root needed).

    .venv/bin/python bench/bench_first_list.py [--services 10000] [--rounds 5]
        [--managed-fields]

Issue 18's cold start spends most of its LIST in the daemon's CPU. This measures that CPU
on this machine, in CPU time (``time.process_time`` / ``time.thread_time``: the figures
hold on a shared machine where wall times do not), with ``--services`` Services and as
many EndpointSlices (kbgpd_lab.kit.scale: the objects of bench_footprint.py) stored in
the API simulator, on a thread of this process, on 127.0.0.1:

* the LIST pages of 500 as the simulator serves them (fetched once): ``json.loads`` of
  the pages (and ``orjson.loads`` when orjson can be imported: it is not a dependency),
  then ``service_from_api`` and ``endpoint_slice_from_api`` of their items, per object.
  With ``--managed-fields`` each item of these pages also carries what kube-apiserver
  returns and the simulator does not store: ``metadata.managedFields`` (kubectl's
  client-side apply and the status writer for a Service, the EndpointSlice controller for
  a slice) and a Service's ``kubectl.kubernetes.io/last-applied-configuration``;
* the whole first list as the speaker makes it: a Kubernetes source (Services and
  EndpointSlices; no Nodes) with a real client over HTTP to the simulator, from its start
  until it has synced and built its snapshot: the CPU of this thread (client, JSON,
  conversion, informers, indexes), not the simulator's thread, per Service with its slice.

Garbage collection is off throughout, as in the speaker until its first sync is settled
(bgpd.heap). Each figure is the minimum over ``--rounds`` rounds. The load
average and UTC time are printed beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from functools import partial
from typing import Any

from bgpd.objects import endpoint_slice_from_api, service_from_api
from k8s_watcher.cache import KubernetesSource
from k8s_watcher.client import KubeClient
from k8s_watcher.credentials import Credentials
from kbgpd_lab.apisim.threaded import ApiSimulatorThread
from kbgpd_lab.kit.measure import address
from kbgpd_lab.kit.scale import local_service, node1_slice

PAGE = 500
PATHS = {
    "Service": "/api/v1/services",
    "EndpointSlice": "/apis/discovery.k8s.io/v1/endpointslices",
}


def seed(sim: ApiSimulatorThread, services: int) -> None:
    """The objects, each encoded for lists when stored (as bench_k8s.seed does)."""

    def create_all() -> None:
        store = sim.sim.store
        for i in range(services):
            store.create(local_service(f"s{i}", address(i)))
            store.create(node1_slice(f"s{i}", True))
        for rd in store.table.resources:
            if not rd.crd:
                for record in store.records(rd).values():
                    record.item_json()

    sim.call(create_all, timeout=600)


def pages(url: str, path: str) -> list[bytes]:
    """Every page of one LIST, as the server sent it."""
    out: list[bytes] = []
    token = ""
    while True:
        query = {"limit": str(PAGE)} | ({"continue": token} if token else {})
        with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(query)}") as r:  # noqa: S310
            body = r.read()
        out.append(body)
        token = json.loads(body)["metadata"].get("continue", "")
        if not token:
            return out


def with_managed_fields(body: bytes, kind: str) -> bytes:
    """A page whose items carry the managedFields kube-apiserver would send with them."""
    doc = json.loads(body)
    for item in doc["items"]:
        meta = item["metadata"]
        if kind == "Service":
            meta["annotations"] = {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(item["spec"])
            }
            meta["managedFields"] = [
                _managed("kubectl-client-side-apply", ["spec", "metadata"]),
                _managed("kube-bgpd-controller", ["status"], subresource="status"),
            ]
        else:
            meta["managedFields"] = [
                _managed("endpointslice-controller.k8s.io", ["addressType", "endpoints"])
            ]
    return json.dumps(doc, separators=(",", ":")).encode()


def _managed(manager: str, fields: list[str], **extra: str) -> dict[str, Any]:
    """One managedFields entry: a FieldsV1 set of a few nested fields per top field."""
    owned: dict[str, Any] = {
        f"f:{f}": {".": {}, "f:a": {}, "f:b": {"f:c": {}, 'k:{"port":80}': {}}} for f in fields
    }
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-02T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": owned,
        **extra,
    }


def decode_all(decode: Callable[[bytes], Any], body: list[bytes]) -> list[Any]:
    return [decode(p) for p in body]


def least(rounds: int, fn: Callable[[], Any], clock: Callable[[], float]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = clock()
        fn()
        best = min(best, clock() - started)
    return best


async def first_list(url: str) -> None:
    """One source from its start to its first snapshot, through the real client."""
    client = KubeClient(Credentials(source="bench", server=url))
    source = KubernetesSource(client, nodes=False)
    task = asyncio.create_task(source.run())
    try:
        while not source.synced:
            await source.wait_changed()  # set once every kind has synced
        source.snapshot()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--managed-fields", action="store_true")
    args = parser.parse_args()
    try:
        import orjson  # type: ignore[import-not-found]  # not a dependency: measured when present

        decoders: dict[str, Callable[[bytes], Any]] = {"json.loads": json.loads}
        decoders["orjson.loads"] = orjson.loads
    except ImportError:
        decoders = {"json.loads": json.loads}
    n = args.services
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load}, {n:,} Services")
    with ApiSimulatorThread() as sim:
        seed(sim, n)
        raw = {kind: pages(sim.url, path) for kind, path in PATHS.items()}
        if args.managed_fields:
            raw = {k: [with_managed_fields(p, k) for p in b] for k, b in raw.items()}
        size = {k: sum(map(len, b)) / n for k, b in raw.items()}
        print(
            "bytes per object in the pages: " + ", ".join(f"{k} {v:.0f}" for k, v in size.items())
        )
        gc.collect()
        gc.disable()
        try:
            per_object: dict[str, float] = {}
            for kind, body in raw.items():
                for name, decode in decoders.items():
                    per_object[f"{name}, {kind}"] = least(
                        args.rounds, partial(decode_all, decode, body), time.process_time
                    )
            items = {k: [o for p in b for o in json.loads(p)["items"]] for k, b in raw.items()}
            per_object["service_from_api"] = least(
                args.rounds,
                lambda: [service_from_api(o) for o in items["Service"]],
                time.process_time,
            )
            per_object["endpoint_slice_from_api"] = least(
                args.rounds,
                lambda: [endpoint_slice_from_api(o) for o in items["EndpointSlice"]],
                time.process_time,
            )
            for what, seconds in per_object.items():
                print(f"{what:28s} {seconds / n * 1e6:6.2f} us per object")
            whole = least(args.rounds, lambda: asyncio.run(first_list(sim.url)), time.thread_time)
        finally:
            gc.enable()
    print(
        f"{'the whole first list':28s} {whole / n * 1e6:6.2f} us per Service and its slice "
        f"({whole:.3f} s of this thread's CPU)"
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load}")


if __name__ == "__main__":
    main()
