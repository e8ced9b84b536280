"""The lab's traffic client: many HTTP connections to a service IP, answers counted per node.

Role: show (and let tests assert) how the router spreads connections over the nodes, and
count every failed request while speakers restart, drain or die. It runs inside the
client namespace (``python -m kbgpd_lab.lab.client ...`` through ``ip netns exec``) and prints
one JSON object (:class:`Result`) at the end.

Three modes:

* burst (default): ``--connections N`` fresh TCP connections, ``--concurrency`` at a
  time, one request each: the ECMP spread of new flows.
* steady: ``--duration S`` (or until SIGTERM/SIGINT): ``--concurrency`` workers each open
  a connection, send ``--requests-per-connection`` keep-alive requests ``--interval`` s
  apart, close, and start over: "the client keeps connecting" during a rolling restart.
  SIGUSR1 marks a moment (say, a route just changed): answers after it are also counted
  per node (``per_node_after_mark``).
* hold (``--hold [NODE]``): one keep-alive connection (answered by NODE) held open while
  the test changes routes; stdin lines ask again on it (``again``) or on a fresh
  connection (``new``), one printed answer or error type each.

A request fails when connecting, sending or reading the answer errors or takes longer
than ``--timeout``; failures are counted by kind, never retried (a retry would hide
exactly what the tests look for).

What it must not do: connect anywhere but the target given (the lab's service IPs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Result:
    """What a client run saw. ``per_node`` counts answers by the name the node gave."""

    requests: int = 0
    failures: int = 0
    per_node: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    seconds: float = 0.0
    #: (CLOCK_MONOTONIC when the failed connection was opened, when it failed, error):
    #: the clock is system-wide, so a test can line failures up with route changes.
    failure_log: list[tuple[float, float, str]] = field(default_factory=list)
    #: Answers per node after the (last) SIGUSR1 to a steady client: sent once the
    #: router's route changed, it shows which nodes still answered on open connections.
    per_node_after_mark: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Result:
        data: dict[str, Any] = json.loads(text)
        data["failure_log"] = [tuple(f) for f in data.get("failure_log", [])]
        return cls(**data)


class _Tally:
    def __init__(self) -> None:
        self.nodes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.requests = 0
        self.connections = 0
        self.failure_log: list[tuple[float, float, str]] = []
        self.marked = False
        self.after_mark: Counter[str] = Counter()

    def fail(self, exc: BaseException, opened: float) -> None:
        self.requests += 1
        self.errors[type(exc).__name__] += 1
        self.failure_log.append((opened, time.monotonic(), type(exc).__name__))

    def result(self, seconds: float) -> Result:
        return Result(
            requests=self.requests,
            failures=sum(self.errors.values()),
            per_node=dict(sorted(self.nodes.items())),
            errors=dict(sorted(self.errors.items())),
            connections=self.connections,
            seconds=round(seconds, 3),
            failure_log=self.failure_log,
            per_node_after_mark=dict(sorted(self.after_mark.items())),
        )

    def mark(self) -> None:
        """From now on also count answers in ``after_mark`` (a fresh count each time)."""
        self.marked = True
        self.after_mark.clear()


def _request(host: str, close: bool) -> bytes:
    conn = b"close" if close else b"keep-alive"
    return b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: %s\r\n\r\n" % (host.encode(), conn)


async def _read_answer(reader: asyncio.StreamReader) -> str:
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise ConnectionError(f"bad status {status!r}")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length)
    return body.decode().strip()


async def _session(
    tally: _Tally, target: str, port: int, requests: int, interval: float, request_timeout: float
) -> None:
    """One connection carrying ``requests`` requests; every failure is counted once."""
    writer: asyncio.StreamWriter | None = None
    opened = time.monotonic()
    try:
        async with asyncio.timeout(request_timeout):
            reader, writer = await asyncio.open_connection(target, port)
        tally.connections += 1
        for n in range(requests):
            if n:
                await asyncio.sleep(interval)
            async with asyncio.timeout(request_timeout):
                writer.write(_request(target, close=n == requests - 1))
                await writer.drain()
                node = await _read_answer(reader)
            tally.requests += 1
            tally.nodes[node] += 1
            if tally.marked:
                tally.after_mark[node] += 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        tally.fail(exc, opened)
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def burst(
    target: str,
    *,
    port: int = 80,
    connections: int = 300,
    concurrency: int = 50,
    request_timeout: float = 3,
) -> Result:
    """``connections`` fresh connections with one request each."""
    tally = _Tally()
    sem = asyncio.Semaphore(concurrency)
    start = time.monotonic()

    async def one() -> None:
        async with sem:
            await _session(tally, target, port, 1, 0.0, request_timeout)

    async with asyncio.TaskGroup() as tg:
        for _ in range(connections):
            tg.create_task(one())
    return tally.result(time.monotonic() - start)


async def steady(
    target: str,
    *,
    port: int = 80,
    duration: float | None = 10.0,
    concurrency: int = 10,
    requests_per_connection: int = 5,
    interval: float = 0.02,
    request_timeout: float = 3,
    stop: asyncio.Event | None = None,
    on_start: Callable[[Callable[[], None]], None] | None = None,
) -> Result:
    """Keep connecting until ``duration`` passes or ``stop`` is set. ``on_start`` gets
    the function that marks the moment from which answers are also counted per node in
    ``per_node_after_mark`` (the command line wires it to SIGUSR1)."""
    tally = _Tally()
    if on_start is not None:
        on_start(tally.mark)
    stop = stop or asyncio.Event()
    start = time.monotonic()

    async def worker(n: int) -> None:
        # Staggered starts: the workers' connections open and close at spread-out moments
        # (not all together), so some are open whenever a route changes.
        await asyncio.sleep(n / concurrency * requests_per_connection * interval)
        while not stop.is_set():
            await _session(tally, target, port, requests_per_connection, interval, request_timeout)
            await asyncio.sleep(interval)

    async def timer() -> None:
        if duration is not None:
            await asyncio.sleep(duration)
            stop.set()

    clock = asyncio.create_task(timer(), name="client-timer")
    try:
        async with asyncio.TaskGroup() as tg:
            for n in range(concurrency):
                tg.create_task(worker(n), name=f"client-worker-{n}")
    finally:
        clock.cancel()
    return tally.result(time.monotonic() - start)


async def hold(
    target: str,
    *,
    port: int = 80,
    node: str | None = None,
    tries: int = 200,
    request_timeout: float = 3,
    commands: asyncio.StreamReader,
    out: Callable[[str], None],
) -> int:
    """One connection held open across whatever happens meanwhile (a drain, a stop).

    Opens connections until one is answered by ``node`` (any node when None; at most
    ``tries``), prints that answer, then for each line read from ``commands``: ``again``
    asks on the held connection, ``new`` on a fresh one; each prints the answering node
    or the error's type. Returns 1 when no connection reached ``node``.
    """
    answer = ""
    held: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    for _ in range(tries):
        async with asyncio.timeout(request_timeout):
            reader, writer = await asyncio.open_connection(target, port)
            writer.write(_request(target, close=False))
            answer = await _read_answer(reader)
        if node is None or answer == node:
            held = reader, writer
            break
        writer.close()
    if held is None:
        out(f"no connection reached {node} in {tries} tries")
        return 1
    out(answer)
    while line := (await commands.readline()).decode().strip():
        try:
            async with asyncio.timeout(request_timeout):
                if line == "again":
                    held[1].write(_request(target, close=False))
                    out(await _read_answer(held[0]))
                else:  # "new"
                    reader, writer = await asyncio.open_connection(target, port)
                    writer.write(_request(target, close=True))
                    out(await _read_answer(reader))
                    writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            out(type(exc).__name__)
    held[1].close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--target", required=True, help="service IP to connect to")
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument("--connections", type=int, default=300, help="burst: how many")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--steady", action="store_true", help="keep connecting (see --duration)")
    parser.add_argument(
        "--duration", type=float, default=None, help="steady: seconds (default: until SIGTERM)"
    )
    parser.add_argument("--requests-per-connection", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument(
        "--hold",
        nargs="?",
        const="",
        default=None,
        metavar="NODE",
        help="hold one connection (answered by NODE, if given); stdin lines 'again' ask on "
        "it, 'new' on a fresh connection; one answer (or error) printed per line",
    )
    args = parser.parse_args(argv)

    if args.hold is not None:

        async def run_hold() -> int:
            loop = asyncio.get_running_loop()
            commands = asyncio.StreamReader()
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(commands), sys.stdin.buffer
            )
            return await hold(
                args.target,
                port=args.port,
                node=args.hold or None,
                request_timeout=args.timeout,
                commands=commands,
                out=lambda text: print(text, flush=True),
            )

        return asyncio.run(run_hold())

    async def run() -> Result:
        if not args.steady:
            return await burst(
                args.target,
                port=args.port,
                connections=args.connections,
                concurrency=args.concurrency or 50,
                request_timeout=args.timeout,
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def on_start(mark: Callable[[], None]) -> None:
            loop.add_signal_handler(signal.SIGUSR1, mark)
            print("started", file=sys.stderr, flush=True)

        return await steady(
            args.target,
            port=args.port,
            duration=args.duration,
            concurrency=args.concurrency or 10,
            requests_per_connection=args.requests_per_connection,
            interval=args.interval,
            request_timeout=args.timeout,
            stop=stop,
            on_start=on_start,
        )

    print(asyncio.run(run()).to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
