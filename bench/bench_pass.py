"""In-process cost of one EndpointSlice change at N Services (not a test; no root needed).

    .venv/bin/python bench/bench_pass.py [--services 10000] [--changes 60]

It builds the speaker's own objects in this process: a ``SpeakerSource`` fed through the
handlers its informers call (no API server), a ``Speaker`` (reconciler, Decider, driver,
metrics, status) and, instead of ExaBGP, a task on the driver's socket that answers
``done`` to every command (ExaBGP's own time is what bench_k8s.py measures). Then it
flips one Service's endpoint ``--changes`` times and reports, per change: the reconcile
pass (source handler, snapshot, decide, Events, render, apply), the driver's steps
(plan and send) and the time until the driver saw every command accepted. Last, the
time one /metrics and one /status take on the event loop and in their worker threads,
and the longest full garbage collection meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client.exposition import generate_latest

from bgpd.config import load_config_or_raise
from bgpd.metrics import _Collected
from bgpd.model import NodeName, ServiceKey
from bgpd.objects import endpoint_slice_from_api, node_from_api, service_from_api
from bgpd.speaker import Speaker
from bgpd.status import materialise
from k8s_watcher.cache import SpeakerSource
from k8s_watcher.client import KubeClient
from kbgpd_lab.kit.measure import address
from kbgpd_lab.kit.scale import local_service, node1_slice
from kbgpd_lab.lab.apicluster import node_object
from kbgpd_lab.lab.speakerfiles import one_peer_config


async def acking_helper(path: Path) -> None:
    """Stands in for ExaBGP and its helper: every command is answered ``done``."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(json.dumps({"generation": 0, "pid": 0}).encode() + b"\n")
        while await reader.readline():
            writer.write(b"done\n")
    finally:
        writer.close()


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1e3:.2f} ms, max {max(values) * 1e3:.2f} ms"


def speaker_at(services: int, work: Path) -> tuple[Speaker, SpeakerSource]:
    """A Speaker whose source holds ``services`` Local Services with a ready endpoint on
    node1, fed as its informers would (nothing decided yet; the driver not started)."""
    (work / "config.yaml").write_text(
        one_peer_config(pool="bench", addresses=("10.99.0.0/16",), peer_address="127.0.0.2")
    )
    config, _ = load_config_or_raise([str(work / "config.yaml")])
    node = NodeName("node1")
    source = SpeakerSource(KubeClient.lazy(None), config=config, node=node)
    # As if every informer had listed: the handlers below are what they call.
    for informer in source.group.informers:
        informer._synced = informer._connected = True
    source._secrets_loaded = True
    source._on_node("node1", None, node_from_api(node_object("node1", ["127.0.0.1"])))
    for i in range(services):
        s = service_from_api(local_service(f"s{i}", address(i)))
        source._services[s.key] = s  # the Service informer's store, then its handler
        source._on_service(s.key, None, s)
        source._on_slice(
            f"default/s{i}-a", None, endpoint_slice_from_api(node1_slice(f"s{i}", True))
        )
    speaker = Speaker(
        config=config,
        config_paths=[str(work / "config.yaml")],
        node=node,
        source=source,
        work_dir=work / "speaker",
        status_address="127.0.0.1:0",
    )
    return speaker, source


def flip(source: SpeakerSource, k: int) -> None:
    """Change ``k``: one of the first ten Services' endpoint becomes ready or not ready
    (ten changes each way in turn), through the EndpointSlice informer's handler."""
    i = k % 10
    (previous,) = source._slices[ServiceKey(f"default/s{i}")]
    new = endpoint_slice_from_api(node1_slice(f"s{i}", k % 20 >= 10))
    source._on_slice(f"default/s{i}-a", previous, new)


async def run(services: int, changes: int, work: Path) -> None:
    speaker, source = speaker_at(services, work)
    driver = speaker.driver
    await driver.start()
    tasks = [
        asyncio.create_task(driver.run()),
        asyncio.create_task(acking_helper(driver.socket_path)),
    ]
    try:
        t0 = time.monotonic()
        speaker.reconcile_once(time.monotonic())
        assert await driver.wait_converged(300)
        print(f"{services} Services: first pass and all accepted in {time.monotonic() - t0:.2f} s")
        gc.collect()
        gc.freeze()  # as the speaker does after its first decision
        step = driver._step
        step_times: list[float] = []

        def timed_step() -> None:
            start = time.perf_counter()
            step()
            step_times.append(time.perf_counter() - start)

        driver._step = timed_step  # type: ignore[method-assign]
        passes, steps, totals = [], [], []
        for k in range(changes):
            step_times.clear()
            start = time.perf_counter()
            flip(source, k)
            first = await source.wait_changed()
            speaker.reconcile_once(first)
            passed = time.perf_counter()
            await driver.wait_converged(10)
            passes.append(passed - start)
            totals.append(time.perf_counter() - start)
            steps.append(sum(step_times))
        print(f"one change: pass {ms(passes)}; driver steps {ms(steps)}; to accepted {ms(totals)}")

        longest = [0.0, 0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                longest[1] = time.perf_counter()
            elif info["generation"] == 2:
                longest[0] = max(longest[0], time.perf_counter() - longest[1])

        gc.callbacks.append(on_gc)
        for _ in range(3):
            a = time.perf_counter()
            families = _Collected(list(speaker.registry.collect()))
            b = time.perf_counter()
            body = generate_latest(families)
            c = time.perf_counter()
            doc = speaker.status()
            d = time.perf_counter()
            text = json.dumps(materialise(doc))
            e = time.perf_counter()
            print(
                f"/metrics: loop {(b - a) * 1e3:.1f} ms, thread {(c - b) * 1e3:.0f} ms "
                f"({len(body) // 1024} KiB); /status: loop {(d - c) * 1e3:.1f} ms, thread "
                f"{(e - d) * 1e3:.0f} ms ({len(text) // 1024} KiB)"
            )
        gc.callbacks.remove(on_gc)
        print(f"longest full collection meanwhile: {longest[0] * 1e3:.1f} ms")
    finally:
        for task in reversed(tasks):  # the stand-in first: the driver sees its EOF
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.sleep(0.1)  # the driver's connection handler reads the EOF
        await driver.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--changes", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pass-") as work:
        asyncio.run(run(args.services, args.changes, Path(work)))


if __name__ == "__main__":
    main()
