"""The speaker's side of the BFD watchdog (bgpd.bfd.watchdog): start it, feed it.

``BfdWatchdog(timeout=..., unanswered=...)``: ``run()`` (a task of the speaker's
TaskGroup) starts the watchdog process and, every ``period`` seconds, writes ``beat``, or
``stuck`` once two beats in a row found ExaBGP owing an answer for longer than
``timeout`` (``unanswered()``: seconds the oldest command in flight has waited,
DriverCore.unanswered_for). A loop that
stalls writes nothing, which is the point. ``watch(pid)``: bfdd's PID to kill (None: no
bfdd); ``watch_exabgp(pid)``: ExaBGP's, to stop while the loop stalls. The watchdog's
lines come back as log lines of their event names (``bfd.watchdog_killed``, counted in
``kills``; ``bfd.watchdog_stopped_exabgp``, ``bfd.watchdog_continued_exabgp``).

It only writes to a pipe: nothing here can block the event loop (a full pipe drops
beats, which errs towards killing bfdd, never towards keeping a hung node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from bgpd.bfd import watchdog
from bgpd.logs import log

_logger = logging.getLogger("bgpd.bfd.watchdog")

#: The program, run by path with ``-I -S`` (standard library only: see its docstring).
PROGRAM = Path(watchdog.__file__)


def period(timeout: float) -> float:
    """How often the loop beats: four beats a bound, so one late turn of the loop (a
    scrape, a collection) never looks like a stall; at most once a second."""
    return min(1.0, max(0.05, timeout / 4))


def watchdog_argv(timeout: float, parent: int) -> list[str]:
    return [sys.executable, "-I", "-S", str(PROGRAM), f"{timeout:g}", str(parent)]


class BfdWatchdog:
    """See the module docstring."""

    def __init__(
        self,
        *,
        timeout: float,
        unanswered: Callable[[], float],
        on_kill: Callable[[int], None] | None = None,
    ) -> None:
        self.timeout = timeout
        self.unanswered = unanswered
        #: Told the PID of each bfdd the watchdog killed (its supervisor excuses it).
        self.on_kill = on_kill
        self.kills = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._pid: int | None = None
        self._exabgp: int | None = None

    @property
    def pid(self) -> int | None:
        """The watchdog process's PID while it runs."""
        return None if self._proc is None else self._proc.pid

    def watch(self, pid: int | None) -> None:
        """bfdd's PID (a new bfdd started) or None (bfdd stopped on purpose)."""
        self._pid = pid
        self._send_target()

    def watch_exabgp(self, pid: int | None) -> None:
        """ExaBGP's PID (a new ExaBGP started), or None."""
        self._exabgp = pid
        self._send_target()

    def _send_target(self) -> None:
        for word, pid in (("pid", self._pid or 0), ("exabgp", self._exabgp or 0)):
            started = (watchdog.start_time(pid) if pid else None) or 0
            self._write(f"{word} {pid if started else 0} {started}\n")

    def _write(self, line: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            proc.stdin.write(line.encode())

    async def run(self) -> None:
        """Start the watchdog and beat until cancelled, then close its pipe (it exits).
        A watchdog that dies is started again after a second (and said so)."""
        while True:
            self._proc = await asyncio.create_subprocess_exec(
                *watchdog_argv(self.timeout, os.getpid()),
                stdin=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # A SIGSTOP or Ctrl-Z of the speaker's process group must not stop it.
                start_new_session=True,
            )
            log(
                _logger,
                logging.INFO,
                "bfd.watchdog_started",
                pid=self._proc.pid,
                timeout=self.timeout,
            )
            self._send_target()
            beat = asyncio.create_task(self._beat(), name="bfd-watchdog-beat")
            try:
                code = await self._read()
            finally:
                beat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beat
                await self._close()
            log(_logger, logging.ERROR, "bfd.watchdog_exited", code=code)
            await asyncio.sleep(1.0)

    async def _beat(self) -> None:
        """Beat every period; "stuck" only when two beats in a row found ExaBGP's answer
        overdue: after the loop itself stalled, answers ExaBGP wrote meanwhile wait
        unread, and the reader gets a turn between two beats (DriverCore.ack_timed_out
        has the same rule)."""
        every = period(self.timeout)
        overdue = False
        while True:
            late = self.unanswered() > self.timeout
            self._write("stuck\n" if late and overdue else "beat\n")
            overdue = late
            await asyncio.sleep(every)

    async def _read(self) -> int:
        """Log the watchdog's lines until it exits; its exit code."""
        proc = self._proc
        assert proc is not None
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            words = line.decode(errors="replace").split() or [""]
            fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            if words[0] == "bfd.watchdog_stopped_exabgp":
                log(_logger, logging.WARNING, "bfd.watchdog_stopped_exabgp", **fields)
            elif words[0] == "bfd.watchdog_continued_exabgp":
                log(_logger, logging.INFO, "bfd.watchdog_continued_exabgp", **fields)
            elif words[0] == "bfd.watchdog_killed":
                log(_logger, logging.WARNING, "bfd.watchdog_killed", **fields)
                self.kills += 1
                if self.on_kill is not None and fields.get("pid", "").isdigit():
                    self.on_kill(int(fields["pid"]))
        return await proc.wait()

    async def _close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(2.0):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
