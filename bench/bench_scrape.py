"""What ``/metrics`` scraped back to back costs the speaker's event loop (not a test; no root).

    .venv/bin/python bench/bench_scrape.py [--services 10000] [--seconds 10] [--profile FILE]

It builds the speaker's own objects in this process as bench_pass.py does (source,
reconciler, Decider, driver, metrics, status listener on 127.0.0.1) with, instead of
ExaBGP, a task on the driver's socket that answers ``done`` to every command and reports
each announced or withdrawn prefix as sent to an established session (so the speaker's
advertised routes are what they are beside a router: every route). Then, for
``--seconds`` unscraped and ``--seconds`` while a process of its own GETs ``/metrics``
back to back on one kept-alive connection (bench_footprint.py's scraper), it changes one
Service's endpoint every 10-30 ms and reports:

* the change's latency in process (the informer's handler -> every command accepted),
  p50 and p99;
* the event loop's wake-up lag: how late a 1 ms timer fires, p50 and p99;
* the event loop thread's CPU time (``time.thread_time`` in the loop) per second, and
  the rest of the process (the worker threads), and the difference per scrape.

``--profile FILE`` keeps cProfile's statistics of the event loop's thread over the
scraped window (the loop's thread only: cProfile follows the thread that enables it).
The interpreter's switch interval is the speaker's own (``bgpd.speaker.app``), so a
PYTHONPATH with another ``bgpd`` compares that code, constant included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from bench_pass import flip, speaker_at

from bgpd.speaker import app as speaker_app
from kbgpd_lab.kit.measure import pct

_PREFIX = re.compile(rb"(\d+\.\d+\.\d+\.\d+/\d+)")
#: Its ``--scraper`` mode GETs a URL back to back on one kept-alive connection.
_SCRAPER = Path(__file__).resolve().parent / "bench_footprint.py"


def _report(peer: str, announced: list[str], withdrawn: list[str]) -> bytes:
    update: dict[str, object] = {}
    if announced:
        update["announce"] = {"ipv4 unicast": {"127.0.0.1": [{"nlri": p} for p in announced]}}
    if withdrawn:
        update["withdraw"] = {"ipv4 unicast": [{"nlri": p} for p in withdrawn]}
    doc = {
        "type": "update",
        "neighbor": {
            "address": {"peer": peer},
            "direction": "send",
            "message": {"update": update},
        },
    }
    return json.dumps(doc).encode() + b"\n"


async def established_helper(path: Path, peer: str) -> None:
    """Stands in for ExaBGP and its helper with the session to ``peer`` up: every
    command is answered ``done``, and its prefixes reported as sent in an UPDATE."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(json.dumps({"generation": 0, "pid": 0}).encode() + b"\n")
        state = {"type": "state", "neighbor": {"address": {"peer": peer}, "state": "up"}}
        up = False
        while line := await reader.readline():
            if not up:  # the speaker has configured its sessions: the first command came
                writer.write(json.dumps(state).encode() + b"\n")
                up = True
            writer.write(b"done\n")
            prefixes = [p.decode() for p in _PREFIX.findall(line.split(b" nlri ", 1)[-1])]
            if b" announce attributes " in line:
                writer.write(_report(peer, prefixes, []))
            elif b" withdraw attributes " in line:
                writer.write(_report(peer, [], prefixes))
    finally:
        writer.close()


@dataclass
class Window:
    """What one window measured."""

    changes: list[float]
    lags: list[float]
    loop_cpu: float
    process_cpu: float
    #: Of process_cpu, the kernel's (os.times: system time): the socket writes and, on
    #: loopback, much of the receiving side's TCP work.
    system_cpu: float
    seconds: float
    scrapes: int

    def line(self, name: str) -> str:
        def ms(values: list[float]) -> str:
            return (
                f"p50 {statistics.median(values) * 1e3:.2f} / p99 {pct(values, 0.99) * 1e3:.2f} ms"
            )

        return (
            f"{name}: {len(self.changes)} changes {ms(self.changes)}; timer lag {ms(self.lags)}; "
            f"loop CPU {self.loop_cpu / self.seconds * 1e3:.0f} ms/s, other threads "
            f"{(self.process_cpu - self.loop_cpu) / self.seconds * 1e3:.0f} ms/s, of all "
            f"threads' the kernel's {self.system_cpu / self.seconds * 1e3:.0f} ms/s; "
            f"{self.scrapes} scrapes ({self.scrapes / self.seconds:.1f}/s)"
        )


async def window(speaker: speaker_app.Speaker, source: object, seconds: float) -> Window:
    """Changes every 10-30 ms and a 1 ms timer for ``seconds``."""
    driver = speaker.driver
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds
    lags: list[float] = []

    async def timer() -> None:
        while loop.time() < stop:
            due = loop.time() + 0.001
            await asyncio.sleep(0.001)
            lags.append(loop.time() - due)

    changes: list[float] = []
    rng = random.Random(18)
    probe = asyncio.create_task(timer())
    loop_cpu, process_cpu, start = time.thread_time(), time.process_time(), loop.time()
    system_cpu = os.times().system
    k = 0
    while loop.time() < stop:
        await asyncio.sleep(rng.uniform(0.01, 0.03))
        begin = time.perf_counter()
        flip(source, k)  # type: ignore[arg-type]
        first = await speaker.source.wait_changed()
        speaker.reconcile_once(first)
        await driver.wait_converged(10)
        changes.append(time.perf_counter() - begin)
        k += 1
    await probe
    return Window(
        changes,
        lags,
        time.thread_time() - loop_cpu,
        time.process_time() - process_cpu,
        os.times().system - system_cpu,
        loop.time() - start,
        0,
    )


async def run(services: int, seconds: float, work: Path, profile: Path | None) -> None:
    speaker, source = speaker_at(services, work)
    scrapes = [0]
    warm = asyncio.Event()

    async def count(_request: web.Request, _response: web.StreamResponse) -> None:
        scrapes[0] += 1
        if scrapes[0] >= 3:  # the first scrape encodes every row
            warm.set()

    speaker.status_server.app.on_response_prepare.append(count)
    driver = speaker.driver
    await driver.start()
    await speaker.status_server.start()
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(speaker_app.SWITCH_INTERVAL)
    tasks = [
        asyncio.create_task(driver.run()),
        asyncio.create_task(established_helper(driver.socket_path, "127.0.0.2")),
    ]
    scraper: asyncio.subprocess.Process | None = None
    try:
        speaker.reconcile_once(time.monotonic())
        assert await driver.wait_converged(300)
        advertised = sum(len(r) for r in driver.advertised().values())
        print(
            f"{services} Services, {advertised} routes advertised; switch interval "
            f"{sys.getswitchinterval() * 1e3:g} ms; bgpd from {speaker_app.__file__}",
            flush=True,
        )
        gc.collect()
        gc.freeze()  # as the speaker does after its first decision
        quiet = await window(speaker, source, seconds)
        print(quiet.line("unscraped"), flush=True)
        url = f"http://127.0.0.1:{speaker.status_server.port}/metrics"
        scraper = await asyncio.create_subprocess_exec(
            sys.executable,
            str(_SCRAPER),
            "--scraper",
            url,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        await warm.wait()
        before = scrapes[0]
        # CPU time of this thread: what the loop spends, not its waits for the interpreter.
        profiler = cProfile.Profile(time.thread_time) if profile is not None else None
        if profiler is not None:
            profiler.enable()
        loud = await window(speaker, source, seconds)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)  # type: ignore[arg-type]
        loud.scrapes = scrapes[0] - before
        print(loud.line("scraped"), flush=True)
        if loud.scrapes:
            extra = (loud.loop_cpu / loud.seconds - quiet.loop_cpu / quiet.seconds) * loud.seconds
            kernel = loud.system_cpu - quiet.system_cpu / quiet.seconds * loud.seconds
            print(
                f"loop CPU per scrape (scraped minus unscraped): "
                f"{extra / loud.scrapes * 1e3:.2f} ms; other threads per scrape "
                f"{(loud.process_cpu - loud.loop_cpu) / loud.scrapes * 1e3:.2f} ms; the "
                f"kernel's per scrape {kernel / loud.scrapes * 1e3:.2f} ms",
                flush=True,
            )
    finally:
        if scraper is not None:
            assert scraper.stdin is not None
            scraper.stdin.close()
            await scraper.communicate()  # its last GET needs this loop
        sys.setswitchinterval(previous_interval)
        for task in reversed(tasks):  # the stand-in first: the driver sees its EOF
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.sleep(0.1)
        await speaker.status_server.stop()
        await driver.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--profile", type=Path, help="cProfile of the loop's thread, scraped")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as work:
        asyncio.run(run(args.services, args.seconds, Path(work), args.profile))


if __name__ == "__main__":
    main()
