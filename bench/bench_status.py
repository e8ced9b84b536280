"""Benchmark of the status objects in the cluster: API writes per second and the
speaker's CPU for them, at 10,000 Services during 1,000 endpoint changes a second (not
a test).

Run from the repository root (no root needed: everything is on loopback):

    .venv/bin/python bench/bench_status.py [--services 10000] [--load-services 1000]
        [--rate 1000] [--seconds 30] [--writes-per-second 20] [--interval 1]

It runs the API simulator in this process (a thread, 127.0.0.1), a passive BGP peer on
127.0.0.1 (kbgpd_lab.kit.bgp_peer: the session is Established, so the routes are on
the wire) and a real `kube-bgpd speaker --kubeconfig` (file configuration: one pool, the
peer, one advertisement). The cluster holds ``--services`` Local Services with their
endpoint on node1 (kbgpd_lab.kit.scale), and, as after a speaker restart, the
ServiceBGPStatus objects of node1 that they should have: the speaker takes them over
(none is written again). Twice, with SpeakerConfig clusterStatus on and off:

1. start the speaker and wait until every Service is routed (its /metrics:
   ``kube_bgpd_bgp_prefixes_accepted``), counting the status writes of the start;
2. ``--rate`` EndpointSlice changes a second for ``--seconds`` seconds, each flipping the
   readiness of one of the first ``--load-services`` Services (every change withdraws
   or re-announces a route, so the Service's ServiceBGPStatus is deleted or created);
   the speaker's CPU (utime + stime of its own process, not ExaBGP's) and the status
   requests the simulator logged (POST, PATCH, DELETE on servicebgpstatuses and
   bgpnodestatuses) over that window;
3. with the status on: the time after the load until the objects are the final state
   (every load Service's object present or absent as its last change says), and the
   status writes per second from the start of the load until then.

The status's CPU is the difference between the two runs' CPU during the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kbgpd_lab.apisim import ApiSimulatorThread
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.bgp_peer import PassivePeer
from kbgpd_lab.kit.crds import product_crds
from kbgpd_lab.kit.measure import address
from kbgpd_lab.kit.processes import speaker_argv
from kbgpd_lab.kit.scale import NAMESPACE, local_service, node1_slice

NODE = "node1"
STATUS_RESOURCES = ("servicebgpstatuses", "bgpnodestatuses")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_text(peer_port: int, cluster_status: bool, args: argparse.Namespace) -> str:
    docs = [
        manifests.pool("bench", ["10.99.0.0/16"]),
        manifests.bgp_peer(
            "tor", my_asn=64513, peer_asn=64512, address="127.0.0.1", peerPort=peer_port
        ),
        manifests.advertisement("bench", ipAddressPools=["bench"]),
        manifests.speaker_config(
            clusterStatus=cluster_status,
            statusInterval=f"{args.interval}s",
            statusWritesPerSecond=args.writes_per_second,
        ),
    ]
    return yaml.safe_dump_all(docs)


def service_status(i: int, node_uid: str) -> dict[str, Any]:
    """The ServiceBGPStatus node1's speaker writes for Service svc{i}, as if it had
    written it before a restart."""
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "ServiceBGPStatus",
        "metadata": {
            "name": f"bgp-bench{i}",
            "namespace": NAMESPACE,
            "labels": {
                "metallb.io/node": NODE,
                "metallb.io/service-name": f"svc{i}",
                "metallb.io/service-namespace": NAMESPACE,
            },
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}
            ],
        },
        "spec": {},
    }


def seed(sim: ApiSimulatorThread, services: int) -> None:
    store = sim.sim.store

    def create_all() -> None:
        for crd in product_crds():
            store.create(crd)
        node = store.create(manifests.node(NODE, addresses=["127.0.0.1"]))
        uid = node["metadata"]["uid"]
        for i in range(services):
            store.create(local_service(f"svc{i}", address(i)))
            store.create(node1_slice(f"svc{i}", True))
            obj = store.create(service_status(i, uid))
            obj["status"] = {
                "node": NODE,
                "serviceName": f"svc{i}",
                "serviceNamespace": NAMESPACE,
                "peers": ["tor"],
            }
            store.update_status(obj)

    sim.call(create_all, timeout=900)


def served(sim: ApiSimulatorThread) -> set[str]:
    """The Services whose ServiceBGPStatus lists a peer, read in the simulator's loop
    without copying the 10,000 objects (a copy per poll would load the simulator the
    speaker writes to)."""
    store = sim.sim.store

    def read() -> set[str]:
        records = store.records(store.resolve("servicebgpstatuses"))
        return {
            r.obj["metadata"]["labels"]["metallb.io/service-name"]
            for r in records.values()
            if r.obj.get("status", {}).get("peers")
        }

    return sim.call(read)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def accepted(metrics_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return -1
    total = 0
    for line in text.splitlines():
        if line.startswith("kube_bgpd_bgp_prefixes_accepted{"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def status_writes(sim: ApiSimulatorThread, since: int) -> int:
    return sum(
        1
        for r in sim.request_log[since:]
        if r.method in ("POST", "PATCH", "DELETE") and any(x in r.path for x in STATUS_RESOURCES)
    )


def load(sim: ApiSimulatorThread, rate: int, seconds: float, services: int) -> list[bool]:
    """`rate` readiness flips a second, in batches every 10 ms; the final readiness."""
    ready = [True] * services
    store = sim.sim.store
    done = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        target = int(elapsed * rate)
        batch = []
        while done < target:
            k = done % services
            ready[k] = not ready[k]
            batch.append((k, ready[k]))
            done += 1

        def write(batch: list[tuple[int, bool]] = batch) -> None:
            for k, r in batch:
                store.apply(node1_slice(f"svc{k}", r))

        sim.call(write)
        time.sleep(0.01)
    return ready


def run_once(
    args: argparse.Namespace, work: Path, cluster_status: bool
) -> dict[str, float | int | str]:
    with ApiSimulatorThread(bookmark_interval=5.0) as sim, PassivePeer(port=free_port()) as peer:
        t0 = time.monotonic()
        seed(sim, args.services)
        seeded = time.monotonic() - t0
        kubeconfig = sim.write_kubeconfig(work / "kubeconfig")
        config = work / "config.yaml"
        config.write_text(config_text(peer.port, cluster_status, args))
        metrics_port = free_port()
        log = work / f"speaker-{'on' if cluster_status else 'off'}.log"
        start_log = len(sim.request_log)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                speaker_argv(
                    config=config,
                    node=NODE,
                    work_dir=work / "run",
                    kubeconfig=kubeconfig,
                    metrics_address=f"127.0.0.1:{metrics_port}",
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, POD_NAMESPACE=NAMESPACE),
            )
        try:
            t1 = time.monotonic()
            while accepted(metrics_port) < args.services:
                if proc.poll() is not None or time.monotonic() - t1 > 600:
                    raise SystemExit(f"speaker did not converge; see {log}")
                time.sleep(0.5)
            converged = time.monotonic() - t1
            # Let the first status round (the node's object) settle.
            time.sleep(3 * args.interval + 1)
            start_writes = status_writes(sim, start_log)
            before_log = len(sim.request_log)
            cpu0, w0 = cpu_seconds(proc.pid), time.monotonic()
            final = load(sim, args.rate, args.seconds, args.load_services)
            cpu1, w1 = cpu_seconds(proc.pid), time.monotonic()
            writes = status_writes(sim, before_log)
            settle = through_settle = float("nan")
            if cluster_status:
                t2 = time.monotonic()
                want = {f"svc{k}" for k, r in enumerate(final) if r}
                want |= {f"svc{k}" for k in range(args.load_services, args.services)}
                while True:
                    if served(sim) == want:
                        break
                    if time.monotonic() - t2 > 900:
                        raise SystemExit("status objects never settled")
                    time.sleep(1.0)
                settle = time.monotonic() - t2
                through_settle = status_writes(sim, before_log) / (time.monotonic() - w0)
            return {
                "clusterStatus": "on" if cluster_status else "off",
                "seed_s": round(seeded, 1),
                "converged_s": round(converged, 1),
                "status_writes_at_start": start_writes,
                "load_changes_per_s": round(args.rate, 0),
                "status_writes_per_s": round(writes / (w1 - w0), 1),
                "speaker_cpu_per_s": round((cpu1 - cpu0) / (w1 - w0), 3),
                "settled_after_load_s": round(settle, 1),
                "status_writes_per_s_until_settled": round(through_settle, 1),
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--load-services", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--writes-per-second", type=int, default=20)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    sys.setswitchinterval(0.0005)
    work = Path(tempfile.mkdtemp(prefix="bench-status-", dir="/var/tmp"))
    try:
        rows = [run_once(args, work, on) for on in (True, False)]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    keys = list(rows[0])
    width = max(map(len, keys))
    for k in keys:
        print(f"{k:<{width}}  " + "  ".join(f"{r[k]!s:>10}" for r in rows))
    on, off = rows
    extra = float(on["speaker_cpu_per_s"]) - float(off["speaker_cpu_per_s"])
    print(f"status CPU (on - off): {extra:.3f} s per second")


if __name__ == "__main__":
    main()
