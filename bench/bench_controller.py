"""Benchmark of the controller (the IP allocator) at scale: its RSS and one full
allocation pass over 1,000 / 10,000 / 30,000 Services in 100 pools (issue 18; not a test).

Run from the repository root (no root needed: everything is on loopback):

    .venv/bin/python bench/bench_controller.py [--sizes 1000,10000,30000] [--pools 100]

For each size, the API simulator (a thread of this process, 127.0.0.1) holds that many
LoadBalancer Services spread over ``--pools`` IPAddressPools (Service i asks for pool
i mod pools with ``metallb.io/address-pool``), each already holding the IP a previous
controller gave it (status and ``metallb.io/ip-allocated-from-pool``), as after a
controller restart, plus one Service without an IP. A real ``kube-bgpd controller
--kubeconfig`` (file configuration: the pools) is started; its first round allocates
over every Service and writes the new one's IP; then one more Service is created and a
second round does the same. Printed per size:

* ``start to first round``: from the controller's start to the end of its first round
  (imports, the Lease, the first LIST of Services and Namespaces, the round);
* ``round 1``, ``round 2``: the controller's own ``controller.round seconds`` (the
  overlay of its writes, allocate() over every Service, the writes to make: one
  Service's status, annotation and Event);
* ``allocate() in process``: allocate() alone over the same Services, in this process
  (the median of 3), the pure pass without the API;
* the controller's RSS after the second round (MiB).

A superlinear step shows as per-Service figures that grow with the size.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kbgpd_lab.apisim import ApiSimulatorThread
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.measure import rss_kb
from kbgpd_lab.kit.processes import Child, ProcessGroup, venv_script

NAMESPACE = "default"
#: The round the controller logs (bgpd.controller: at INFO when it writes something).
ROUND = re.compile(r"controller\.round services=(\d+) .*seconds=([0-9.]+)")


def pool_name(k: int) -> str:
    return f"pool{k}"


def pool_network(k: int) -> ipaddress.IPv4Network:
    """Pool k: 10.k.0.0/17 (32,768 addresses: room for 30,000 Services in one pool)."""
    return ipaddress.IPv4Network(f"10.{k}.0.0/17")


def config_text(pools: int) -> str:
    return yaml.safe_dump_all(
        [manifests.pool(pool_name(k), [str(pool_network(k))]) for k in range(pools)]
    )


def allocated(i: int, pools: int) -> dict[str, Any]:
    """Service i with the IP a previous controller gave it from pool i mod pools."""
    k = i % pools
    ip = str(pool_network(k).network_address + 1 + i // pools)
    annotations = {
        "metallb.io/address-pool": pool_name(k),
        "metallb.io/ip-allocated-from-pool": pool_name(k),
    }
    return manifests.service(f"s{i}", NAMESPACE, ips=[ip], annotations=annotations)


def new_service(name: str, pools: int) -> dict[str, Any]:
    return manifests.service(
        name, NAMESPACE, annotations={"metallb.io/address-pool": pool_name(pools - 1)}
    )


def in_process_pass(n: int, pools: int, config_path: Path) -> float:
    """allocate() over the Services as the controller converts them, in a fresh
    interpreter (this one's heap, the simulator's objects, would make the collector's
    passes the figure), median of 3, s."""
    probe = (
        "import statistics, sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from bench_controller import allocated, new_service\n"
        "from bgpd.allocation import allocate\n"
        "from bgpd.config import load_config_or_raise\n"
        "from bgpd.objects import service_from_api\n"
        f"n, pools = {n}, {pools}\n"
        f"config, _ = load_config_or_raise([{str(config_path)!r}])\n"
        "objects = [*(allocated(i, pools) for i in range(n)), new_service('new1', pools)]\n"
        "services = [service_from_api(o) for o in objects]\n"
        "times = []\n"
        "for _ in range(3):\n"
        "    t = time.perf_counter()\n"
        "    allocate(config, services, {}, None)\n"
        "    times.append(time.perf_counter() - t)\n"
        "print(statistics.median(times))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=1800
    )
    return float(out.stdout.split()[-1])


def rounds(log: str) -> list[tuple[int, float]]:
    return [(int(m.group(1)), float(m.group(2))) for m in ROUND.finditer(log)]


def wait_rounds(child: Child, n: int, within: float) -> None:
    deadline = time.monotonic() + within
    while len(rounds(child.log_text())) < n:
        if child.exited() or time.monotonic() > deadline:
            raise SystemExit(f"no round {n} ({child.exited() or 'timed out'}); see {child.log}")
        time.sleep(0.05)


def run_size(n: int, pools: int, work: Path) -> dict[str, str]:
    objects = [allocated(i, pools) for i in range(n)]
    config = work / "config.yaml"
    config.write_text(config_text(pools))
    with ApiSimulatorThread() as sim:

        def seed() -> None:
            for obj in objects:
                sim.sim.store.create(obj)
            sim.sim.store.create(new_service("new1", pools))

        sim.call(seed, timeout=1800)
        kubeconfig = sim.write_kubeconfig(work / "kubeconfig")
        argv = [venv_script("kube-bgpd"), "controller", "--config", str(config)]
        argv += ["--kubeconfig", str(kubeconfig), "--lease-namespace", NAMESPACE]
        argv += ["--metrics-address", "127.0.0.1:0"]
        with ProcessGroup(work / f"logs-{n}") as group:
            started = time.monotonic()
            child = group.start("controller", argv)
            wait_rounds(child, 1, within=600)
            first = time.monotonic() - started
            sim.call(lambda: sim.sim.store.create(new_service("new2", pools)))
            wait_rounds(child, 2, within=600)
            (_, r1), (s2, r2) = rounds(child.log_text())[:2]
            rss = rss_kb(child.pid) / 1024
    pure = in_process_pass(n, pools, config)
    return {
        "Services": f"{n:,}",
        "controller RSS MiB": f"{rss:.1f}",
        "start to first round, s": f"{first:.2f}",
        "round 1, s": f"{r1:.3f}",
        "round 2, s": f"{r2:.3f}",
        "round 2 per Service, us": f"{r2 / s2 * 1e6:.1f}",
        "allocate() in process, s": f"{pure:.3f}",
        "allocate() per Service, us": f"{pure / (n + 1) * 1e6:.1f}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,30000")
    ap.add_argument("--pools", type=int, default=100)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-controller-", dir="/var/tmp"))
    load = os.getloadavg()
    rows = []
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(run_size(n, args.pools, work))
            print(" | ".join(rows[-1].values()), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    keys = list(rows[0])
    print()
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row.values()) + " |")
    end = os.getloadavg()
    print(
        f"\n{args.pools} pools; load average (1, 5, 15 min): start "
        f"{' '.join(f'{x:.2f}' for x in load)}, end {' '.join(f'{x:.2f}' for x in end)}; "
        f"{os.cpu_count()} CPUs",
        file=sys.stdout,
    )


if __name__ == "__main__":
    main()
