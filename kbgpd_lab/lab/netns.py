"""Network namespaces we create, and the processes we start inside them.

Role: the lowest layer of the lab harness. A :class:`Netns` is one namespace this process
created; it runs commands in it (``ip netns exec``), starts long-lived processes in it and
remembers their PIDs so they can be stopped *by PID* (never by name: other runs and other
people's daemons share this machine). :func:`processes_in` lists every process the kernel
says lives in one of our namespaces, so teardown also catches children that our own
processes forked (ExaBGP's helper, daemonised routers).

Public interface (other modules and tests code against these names):

* ``Netns(name, on_spawn=None)`` - ``name``; ``run(argv, check=True, timeout=30, **kw)``;
  ``ip(*args)``; ``popen(argv, **kw)``; ``exec_prefix()``; ``track(pid)``; ``adopt(pid)``;
  ``stop(pid)``; ``wait_child(pid, timeout)``; ``pids``; ``kill_all()``.
* ``create_netns(name)`` / ``delete_netns(name)`` / ``netns_exists(name)``.
* ``process_alive(pid)`` - true unless the PID is gone or a zombie (measured: a daemon
  orphaned in a netns can sit as a zombie for ~2 s, so ``kill -0`` is not an answer).
* ``stop_pid(pid, timeout)`` - SIGTERM, then SIGKILL after ``timeout``.

What it must not do: touch any namespace or process it did not create or find inside a
namespace it created; send traffic anywhere.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: Where ``ip netns add`` puts its bind mounts.
NETNS_DIR = Path("/run/netns")


class NetnsError(RuntimeError):
    """A namespace operation failed; the message carries the command and its stderr."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def create_netns(name: str) -> None:
    """Create a namespace; fails if the name exists (we never adopt someone else's)."""
    if netns_exists(name):
        raise NetnsError(f"network namespace {name} already exists")
    _ip("netns", "add", name)


def delete_netns(name: str) -> None:
    """Delete one namespace; a missing one is fine (teardown is idempotent)."""
    if netns_exists(name):
        _ip("netns", "delete", name, check=False)


def processes_in(name: str) -> list[int]:
    """PIDs of every process whose network namespace is ``name`` (``ip netns pids``)."""
    if not netns_exists(name):
        return []
    proc = _ip("netns", "pids", name, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def process_state(pid: int) -> str | None:
    """The State letter from /proc/PID/status (``R``, ``S``, ``Z``...), None if gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in text.splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return None


def process_alive(pid: int) -> bool:
    """True if PID runs; a zombie counts as dead (it holds no socket and no route)."""
    state = process_state(pid)
    return state is not None and state not in ("Z", "X")


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a recorded PID from a reused one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    """Reap PID if it is our child; harmless otherwise."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_pid(pid: int, timeout: float = 3.0) -> None:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL and wait until it is gone."""
    if not process_alive(pid):
        _reap(pid)
        return
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not process_alive(pid):
            return
        time.sleep(0.01)
    _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        _reap(pid)
        if not process_alive(pid):
            return
        time.sleep(0.01)


class Netns:
    """One network namespace this process created (or adopted from our own state file).

    ``on_spawn`` is called with each PID started through :meth:`popen` or passed to
    :meth:`track`, so the owner (a Topology) can write it to its state file before
    anything else can go wrong.
    """

    __slots__ = ("_children", "_on_spawn", "_pids", "name")

    def __init__(self, name: str, *, on_spawn: Callable[[int], None] | None = None) -> None:
        self.name = name
        self._on_spawn = on_spawn
        self._pids: list[int] = []
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def __repr__(self) -> str:
        return f"Netns({self.name!r})"

    def exec_prefix(self) -> list[str]:
        """The argv prefix that runs a command inside this namespace."""
        return ["ip", "netns", "exec", self.name]

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 30,
        **kw: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run a short command inside the namespace and capture its text output.

        Raises :class:`NetnsError` with stderr when ``check`` and the command fails.
        """
        kw.setdefault("capture_output", True)
        proc: subprocess.CompletedProcess[str] = subprocess.run(
            [*self.exec_prefix(), *argv], text=True, timeout=timeout, check=False, **kw
        )
        if check and proc.returncode != 0:
            raise NetnsError(
                f"[{self.name}] {' '.join(argv)} exited {proc.returncode}: "
                f"{(proc.stderr or '').strip()}"
            )
        return proc

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ip -n NAME ARGS``: cheaper than ``ip netns exec`` (no mount namespace work)."""
        return _ip("-n", self.name, *args, check=check)

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Start a long-lived process in the namespace; its PID is tracked for cleanup.

        ``ip netns exec`` execs the command in place, so the Popen's PID is the
        process itself (signals reach it directly).
        """
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc: subprocess.Popen[bytes] = subprocess.Popen([*self.exec_prefix(), *argv], **kw)
        self._children[proc.pid] = proc
        self.track(proc.pid)
        return proc

    def track(self, pid: int) -> None:
        """Remember a PID (e.g. a daemon's from its pid file) for :meth:`kill_all`."""
        if pid not in self._pids:
            self._pids.append(pid)
            if self._on_spawn is not None:
                self._on_spawn(pid)

    def adopt(self, pid: int) -> None:
        """Track a PID found in our state file without reporting it as a new spawn."""
        if pid not in self._pids:
            self._pids.append(pid)

    def wait_child(self, pid: int, timeout: float) -> int | None:
        """Wait for a process started by :meth:`popen` in this process; its exit status,
        or None if it is not our child (then poll :func:`process_alive`)."""
        child = self._children.get(pid)
        if child is None:
            return None
        try:
            status = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            status = child.wait(timeout=5)
        self.stop(pid)  # forget it, close its pipes
        return status

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(self._pids)

    def stop(self, pid: int, timeout: float = 3.0) -> None:
        """Stop one tracked process by PID and reap it."""
        child = self._children.pop(pid, None)
        if child is None:
            stop_pid(pid, timeout)
        elif child.poll() is None:
            # Through Popen, not waitpid: the caller may want the real exit status.
            child.terminate()
            try:
                child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=5)
        if child is not None:
            for stream in (child.stdin, child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
        if pid in self._pids:
            self._pids.remove(pid)

    def kill_all(self, timeout: float = 3.0) -> None:
        """Stop every tracked PID, then anything else the kernel finds in the namespace.

        The second pass catches grandchildren (ExaBGP's API helper, forked daemons); a
        process inside a namespace we created is ours by construction.
        """
        for pid in reversed(self._pids):
            self.stop(pid, timeout)
        for _ in range(3):
            rest = [p for p in processes_in(self.name) if p != os.getpid()]
            if not rest:
                break
            for pid in rest:
                _signal(pid, signal.SIGKILL)
            for pid in rest:
                deadline = time.monotonic() + 5.0
                while process_alive(pid) and time.monotonic() < deadline:
                    _reap(pid)
                    time.sleep(0.01)
