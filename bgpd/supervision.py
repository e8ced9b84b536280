"""A supervised child process (ExaBGP, bfdd): start, relay its log, restart with back-off,
stop. One implementation for every child the speaker runs; ``name`` names its log events
(``exabgp.started``, ``bfdd.started``) and ``crash_error`` the error a crash loop raises.

Why each piece:

* ``PR_SET_PDEATHSIG`` (prctl, set in the child between fork and exec): if the daemon
  dies, however it dies, the kernel kills the child, whose sessions then close at once;
  an orphaned ExaBGP would keep announcing routes nobody manages. SIGKILL, because
  SIGTERM is ignored while ExaBGP is blocked writing to its helper. The flag survives
  ``exec``, so it also holds through an argv prefix such as ``ip netns exec NS`` (which
  execs); the kernel clears it when the child changes its user (prctl(2)), so a child
  that switches users itself (bfdd, to frr) needs another guard (bgpd.bfd.runtime).
* A new session (``start_new_session``): a Ctrl-C in a terminal must reach only the
  daemon, which withdraws routes before stopping ExaBGP itself.
* Restarts back off (base doubling to a cap, jittered by 50-100 % so a fleet does not
  restart in step) and give up with ``CrashLoopError`` after ``max_crashes`` unrequested
  exits within ``crash_window`` seconds: a config ExaBGP rejects would otherwise loop
  forever, and the orchestrator shows the error better than a log line every second.
* ExaBGP's stdout/stderr are always read (its log goes there; a full pipe would block it)
  and relayed to our log at DEBUG, lines with an error or warning at WARNING.

The environment comes from a callable of the start generation, because the generation
travels to the helper in the environment (see render.render_env). This module knows
nothing of BGP, BFD or the children's APIs; their runtimes do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bgpd.logs import log

_logger = logging.getLogger("bgpd.supervision")
PR_SET_PDEATHSIG = 1
#: prctl(2), looked up once in the parent at import (see :func:`_pdeathsig_preexec`).
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_prctl.restype = ctypes.c_int


def _pdeathsig_preexec(parent: int) -> Callable[[], None]:
    """The child-side half of PR_SET_PDEATHSIG, run after fork and before exec.

    The hazard it avoids: the daemon has other threads (asyncio.to_thread, the
    Kubernetes client, the API simulator in tests) when it forks, and after fork the
    child holds only the forking thread while every lock another thread held stays
    locked forever. Loading libc there (``ctypes.CDLL`` is dlopen, which takes the
    dynamic loader's lock and allocates; looking up ``prctl`` is dlsym) could hang the
    child before exec, an ExaBGP that never starts and a supervisor waiting on it. So
    libc and its ``prctl`` are resolved once in the parent at import, and the child
    only calls through that handle: one system call, no dynamic loader in the child."""

    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # The parent may have died between fork and prctl: then nobody will signal us.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Supervisor:
    """Runs one child at a time; ``run()`` is the long-lived task.

    ``on_start(generation)`` is called before each start so the driver resets what it
    believes the child holds (ExaBGP keeps nothing across a restart); ``on_spawned(pid)``
    after it, with the new process's PID (bfdd's watchdog needs it)."""

    def __init__(
        self,
        *,
        argv: Sequence[str],
        name: str = "exabgp",
        crash_error: Callable[[str], Exception] = RuntimeError,
        on_spawned: Callable[[int], None] | None = None,
        env: Callable[[int], Mapping[str, str]],
        cwd: Path,
        prefix: Sequence[str] = (),
        on_start: Callable[[int], None] | None = None,
        on_output: Callable[[str], None] | None = None,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
        max_crashes: int = 5,
        crash_window: float = 60.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.crash_error = crash_error
        self.on_spawned = on_spawned
        self.env = env
        self.cwd = cwd
        self.prefix = list(prefix)
        self.on_start = on_start
        #: Sees each line ExaBGP prints (after it is logged): the runtime looks for the
        #: launcher's "unmodified" line.
        self.on_output = on_output
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_crashes = max_crashes
        self.crash_window = crash_window
        self.stop_timeout = stop_timeout
        #: Number of ExaBGP starts so far (the first start is generation 1).
        self.generation = 0
        #: Starts after the first one, whatever the cause (crash, kill, reconfigure).
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        #: Unrequested exits within the crash window: (when, PID).
        self._crashes: list[tuple[float, int]] = []
        #: PIDs whose exit our own watchdog caused, told before the exit was seen.
        self._excused: set[int] = set()
        self._consecutive = 0
        self._stopping = False
        self._requested = False
        self._wake = asyncio.Event()
        self.started = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def pid(self) -> int | None:
        return None if self._proc is None or self._proc.returncode is not None else self._proc.pid

    async def _start(self) -> asyncio.subprocess.Process:
        self.generation += 1
        if self.generation > 1:
            self.restarts += 1
        if self.on_start is not None:
            self.on_start(self.generation)
        env = dict(os.environ)
        env.update(self.env(self.generation))
        proc = await asyncio.create_subprocess_exec(
            *self.prefix,
            *self.argv,
            cwd=self.cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_pdeathsig_preexec(os.getpid()),
        )
        log(_logger, logging.INFO, f"{self.name}.started", pid=proc.pid, generation=self.generation)
        if self.on_spawned is not None:
            self.on_spawned(proc.pid)
        self.started.set()
        return proc

    async def _relay_output(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            lowered = text.lower()
            level = logging.DEBUG
            if " error" in lowered or " err " in lowered or "warning" in lowered:
                level = logging.WARNING
            log(_logger, level, f"{self.name}.log", pid=proc.pid, line=text)
            if self.on_output is not None:
                self.on_output(text)

    def _backoff(self) -> float:
        delay = min(self.backoff_cap, self.backoff_base * 2.0 ** max(0, self._consecutive - 1))
        return delay * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not crypto

    async def run(self) -> None:
        """Start the child and keep it running until stop(); raise ``crash_error`` on a loop."""
        try:
            while not self._stopping:
                started_at = time.monotonic()
                proc = self._proc = await self._start()
                relay = asyncio.create_task(self._relay_output(proc), name=f"{self.name}-log")
                try:
                    rc = await proc.wait()
                finally:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(1.0):
                            await asyncio.shield(relay)
                    relay.cancel()
                if self.stopping:
                    log(_logger, logging.INFO, f"{self.name}.stopped", pid=proc.pid, returncode=rc)
                    return
                now = time.monotonic()
                if self._requested:
                    self._requested = False
                    log(
                        _logger,
                        logging.INFO,
                        f"{self.name}.restarting",
                        pid=proc.pid,
                        returncode=rc,
                    )
                    continue
                uptime = now - started_at
                excused = proc.pid in self._excused
                self._excused.discard(proc.pid)
                if not excused:
                    self._consecutive = 1 if uptime > self.crash_window else self._consecutive + 1
                    self._crashes = [c for c in self._crashes if now - c[0] < self.crash_window]
                    self._crashes.append((now, proc.pid))
                log(
                    _logger,
                    logging.WARNING if excused else logging.ERROR,
                    f"{self.name}.exited",
                    pid=proc.pid,
                    returncode=rc,
                    uptime=round(uptime, 3),
                    crashes=len(self._crashes),
                    excused=excused,
                )
                if len(self._crashes) > self.max_crashes:
                    raise self.crash_error(
                        f"{self.name} exited {len(self._crashes)} times within "
                        f"{self.crash_window:.0f}s (last return code {rc}); giving up. "
                        "Check its configuration and log above."
                    )
                delay = self._backoff()
                self._wake.clear()
                # asyncio.timeout, not wait_for (3.11's can swallow a cancellation).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
        finally:
            await self._kill_now()

    def kill(self) -> None:
        """SIGKILL the current child (hung: ExaBGP owes an ack past its timeout); run()
        restarts it after the usual back-off and counts it as a crash."""
        if self.pid is not None:
            log(_logger, logging.WARNING, f"{self.name}.killing", pid=self.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def excuse(self, pid: int) -> None:
        """This child's exit, seen or still to come, is no crash: our own watchdog
        (bgpd.bfd.watchdog) killed it because the speaker hung. Its kill and the exit
        arrive on different pipes, in either order; neither counts towards the crash
        loop, so a speaker whose ExaBGP is stuck for a while does not end over it. The
        back-off still applies (the watchdog kills each new child while the hang lasts)."""
        before = len(self._crashes)
        self._crashes = [c for c in self._crashes if c[1] != pid]
        if len(self._crashes) == before:
            self._excused.add(pid)
            # Only children still to exit wait here; a PID is seldom told twice.
            if len(self._excused) > 64:
                self._excused.clear()

    def restart(self) -> None:
        """Restart at once, not as a crash (a new configuration)."""
        if self.pid is not None:
            self._requested = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._wake.set()

    async def stop(self) -> int | None:
        """SIGTERM the child, SIGKILL after ``stop_timeout``; return its exit code."""
        self._stopping = True
        self._wake.set()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return None if proc is None else proc.returncode
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(self.stop_timeout):
                return await proc.wait()
        except TimeoutError:
            log(_logger, logging.WARNING, f"{self.name}.stop_timeout", pid=proc.pid)
            await self._kill_now()
            return proc.returncode

    async def _kill_now(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
