"""Benchmark of the Kubernetes side of the speaker (not a test): the watch path from a
write at the API to a wake-up of the reconciler, against the API simulator.

Run from the repository root (no root needed, loopback only):

    .venv/bin/python bench/bench_watch.py [--services 10000] [--changes 200]
        [--rate 1000] [--seconds 60]

The simulator runs as its own process (``kube-bgpd-lab apiserver-sim``), so the CPU figures
below are the watcher's alone. It measures, in one run:

1. cold start: LIST of ``--services`` Services, as many EndpointSlices and 100 Nodes
   until the source is synced, the first snapshot, and the process's RSS after it;
2. one change's latency, p50/p99 over ``--changes`` EndpointSlice updates: from just
   before the PATCH is sent to ``wait_changed()`` returning (the API's own write and
   fan-out included; the decision and the ExaBGP side are bench_driver.py's);
3. sustained load: ``--rate`` EndpointSlice updates per second for ``--seconds`` from a
   separate writer process, the events applied each second (a backlog would show as a
   shortfall that grows), whether all were applied soon after the last write, and the
   watcher's CPU per event (conversion, cache, snapshot rebuild on each wake-up).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bgpd.model import ServiceKey
from k8s_watcher.cache import KubernetesSource
from k8s_watcher.client import MERGE_PATCH, KubeClient, object_path
from k8s_watcher.informer import InformerTiming
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.measure import pct
from kbgpd_lab.kit.processes import ProcessGroup, venv_script
from kbgpd_lab.kit.waiting import wait_until

HOT = "hot"  # the Service whose slices the latency and load phases change


def service(name: str, i: int) -> dict[str, Any]:
    ip = f"10.99.{i // 250}.{i % 250}"
    return manifests.service(name, policy="Local", ips=(ip,))


def endpoint_slice(name: str, svc: str, seq: int, ready: bool = True) -> dict[str, Any]:
    endpoint = manifests.endpoint(f"10.1.{seq % 250}.1", f"n{seq % 100}", ready=ready)
    return manifests.endpoint_slice(name, svc, [endpoint], labels={"seq": str(seq)})


def node(i: int) -> dict[str, Any]:
    address = f"172.31.250.{10 + i}"
    return manifests.node(f"n{i}", labels={"zone": f"z{i % 3}"}, addresses=(address,))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def slice_patch(seq: int) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"seq": str(seq)}},
        "endpoints": [
            {"addresses": ["10.1.0.1"], "nodeName": "n1", "conditions": {"ready": seq % 2 == 0}}
        ],
    }


async def write_load(server: str, rate: int, seconds: int, lanes: int = 8) -> None:
    """The load writer, run as its own process (``--writer URL``) with plain aiohttp, so
    neither its CPU nor the official client's per-request cost lands on the watcher.
    Prints the number of writes done at the end."""
    import aiohttp

    done = 0
    stop = time.monotonic() + seconds

    async def lane(session: aiohttp.ClientSession, k: int) -> None:
        nonlocal done
        url = server + object_path(
            "discovery.k8s.io/v1", "endpointslices", namespace="default", name=f"{HOT}-{k}"
        )
        next_at = time.monotonic()
        seq = 0
        while time.monotonic() < stop:
            seq += 1
            async with session.patch(
                url, json=slice_patch(10_000 + seq), headers={"Content-Type": MERGE_PATCH}
            ) as response:
                await response.read()
            done += 1
            next_at += lanes / rate
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(lane(session, k) for k in range(lanes)))
    print(done, flush=True)


async def patch_slice(client: KubeClient, name: str, seq: int) -> None:
    await client.request(
        "PATCH",
        object_path("discovery.k8s.io/v1", "endpointslices", namespace="default", name=name),
        body=slice_patch(seq),
        content_type=MERGE_PATCH,
    )


def seed_file(args: argparse.Namespace, work: Path) -> Path:
    docs: list[dict[str, Any]] = [node(i) for i in range(100)]
    for i in range(args.services):
        docs.append(service(f"s{i}", i))
        docs.append(endpoint_slice(f"s{i}-a", f"s{i}", i))
    docs.append(service(HOT, args.services))
    docs.extend(endpoint_slice(f"{HOT}-{k}", HOT, 0) for k in range(8))
    seed = work / "seed.yaml"
    seed.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return seed


async def run(args: argparse.Namespace, kubeconfig: Path) -> None:
    async with (
        await KubeClient.connect(str(kubeconfig)) as reader,
        await KubeClient.connect(str(kubeconfig)) as writer,
    ):
        await bench(args, reader, writer)


async def bench(args: argparse.Namespace, reader: KubeClient, writer: KubeClient) -> None:
    source = KubernetesSource(reader, timing=InformerTiming(watch_timeout=600))
    rss0 = rss_mb()
    t0, cpu0 = time.monotonic(), time.process_time()
    task = asyncio.create_task(source.run())
    await source.wait_changed()
    synced = time.monotonic() - t0
    s0 = time.monotonic()
    snap = source.snapshot()
    snap_s = time.monotonic() - s0
    print(
        f"cold start: {len(snap.services)} Services, "
        f"{sum(len(v) for v in snap.endpoint_slices.values())} slices, {len(snap.nodes)} Nodes "
        f"synced in {synced:.2f} s (CPU {time.process_time() - cpu0:.2f} s), "
        f"first snapshot {snap_s * 1000:.1f} ms, RSS {rss0:.0f} -> {rss_mb():.0f} MB"
    )

    slices = source.endpoint_slices
    assert slices is not None
    hot = ServiceKey(f"default/{HOT}")
    latencies = []
    for seq in range(1, args.changes + 1):
        start = time.monotonic()
        await patch_slice(writer, f"{HOT}-0", seq)
        while True:
            await source.wait_changed()
            group = source.snapshot().endpoint_slices.get(hot, ())
            if any(s.name == f"{HOT}-0" and s.endpoints[0].ready == (seq % 2 == 0) for s in group):
                break
        latencies.append(time.monotonic() - start)
    print(
        f"change -> wake-up over {len(latencies)} changes: "
        f"p50 {statistics.median(latencies) * 1000:.2f} ms, "
        f"p99 {pct(latencies, 0.99) * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms"
    )

    # Sustained load: a separate writer process at --rate, spread over the hot slices.
    seen_before = slices.stats.events
    cpu_before = time.process_time()

    async def drain() -> None:
        while True:
            await source.wait_changed()
            source.snapshot()

    drainer = asyncio.create_task(drain())
    writer_proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--writer",
        writer.host,
        "--rate",
        str(args.rate),
        "--seconds",
        str(args.seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    seen = []
    while writer_proc.returncode is None:
        try:
            await asyncio.wait_for(writer_proc.wait(), 1.0)
        except TimeoutError:
            seen.append(slices.stats.events - seen_before)
    assert writer_proc.stdout is not None
    written = int((await writer_proc.stdout.read()).decode().strip() or 0)
    deadline = time.monotonic() + 30
    while slices.stats.events - seen_before < written and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    events = slices.stats.events - seen_before
    cpu = time.process_time() - cpu_before
    per_second = [b - a for a, b in zip([0, *seen], seen, strict=False)]
    print(
        f"load: {written} writes in {args.seconds} s ({written / args.seconds:.0f}/s, target "
        f"{args.rate}); events applied per second {per_second}; all {events} applied "
        f"{'' if events >= written else 'NOT '}within 30 s of the last write; "
        f"watcher CPU {cpu / max(events, 1) * 1e6:.0f} us per event "
        f"({cpu / args.seconds * 100:.0f}% of one core)"
    )
    drainer.cancel()
    task.cancel()
    await asyncio.gather(drainer, task, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--writer", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        asyncio.run(write_load(args.writer, args.rate, args.seconds))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    kubeconfig = work / "kubeconfig"
    argv = [
        venv_script("kube-bgpd-lab"),
        "apiserver-sim",
        "--listen",
        "127.0.0.1:0",
        "--seed",
        str(seed_file(args, work)),
        "--kubeconfig-out",
        str(kubeconfig),
        "--bookmark-interval",
        "5",
    ]
    with ProcessGroup(work) as group:
        sim = group.start("apiserver-sim", argv)
        wait_until(
            lambda: kubeconfig.exists() and kubeconfig.stat().st_size,
            within=120,
            poll=0.1,
            what="the simulator's kubeconfig",
            give_up=sim.exited,
            details=sim.log_text,
        )
        asyncio.run(run(args, kubeconfig))


if __name__ == "__main__":
    main()
