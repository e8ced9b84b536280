"""The BFD watchdog: a small separate process that kills bfdd when the speaker hangs.

A speaker whose event loop stalls, or whose ExaBGP stopped answering, still has a
healthy bfdd child answering BFD for it: the routers keep sending traffic to a node that
no longer follows the cluster, until the BGP hold timer expires (90 s with common
defaults). So bfdd must stop answering within a bound, and whatever watches for that
must not need the speaker to run: a SIGSTOPped speaker (every thread stopped) must still
be dropped. Hence a process of its own, fed by the speaker's event loop over a pipe
(its stdin), one line at a time:

* ``pid P S``: bfdd's PID and its start time (field 22 of /proc/P/stat), to kill;
  ``pid 0 0``: no bfdd to watch (stopped by the speaker);
* ``exabgp P S``: ExaBGP's PID and start time, to freeze (below);
* ``beat``: the loop is alive and ExaBGP answers;
* ``stuck``: ExaBGP owes an answer for longer than the bound (kill now).

No ``beat`` for ``--timeout`` seconds, or a ``stuck``, SIGKILLs bfdd (once per PID; the
speaker's BFD runtime starts a new one when its loop runs again, and says so with a new
``pid`` line). The speaker gone (EOF on stdin, or SIGTERM from PR_SET_PDEATHSIG) also
SIGKILLs the bfdd it named, then the watchdog exits. One line on stderr per kill says why.

A stalled loop (no ``beat``) also SIGSTOPs ExaBGP when bfdd was killed, and the next
``beat`` SIGCONTs it. Measured (tests/e2e/test_lab_bfd.py, FRR 8.4, about one run in six
under load): ExaBGP does not need the speaker to keep its session, so after the router
tore the session down on BFD Down, ExaBGP connected again, re-sent its routes, and FRR
8.4 (which does not wait for BFD before a session comes up) put the hung node back into
its ECMP set: the node stayed there, BFD already being Down. A stopped ExaBGP neither
reconnects nor closes its TCP session (a close before the BFD Down would start a
graceful restart at the router, keeping the routes). A frozen ExaBGP is continued when
the speaker is gone too, so that the signal its own PR_SET_PDEATHSIG sends is acted on.

Hazards, and what this does about them:

* **bfdd outlives a killed speaker**: bfdd starts as root and switches to user frr, and
  the kernel clears PR_SET_PDEATHSIG when a process changes its user (prctl(2)). Measured
  (tests/component/test_bfd_watchdog.py): after a SIGKILL of the speaker, its bfdd ran on,
  answering BFD for a node with no speaker, and holding the BFD port a new speaker's bfdd
  needs. The watchdog does not change user, so it keeps its own PR_SET_PDEATHSIG (SIGTERM,
  so it can act on it) and kills bfdd when the speaker is gone.
* **PID reuse**: bfdd may have died and its PID been given to another process by the time
  the watchdog fires. The kill happens only if /proc/P/stat still shows the start time
  the speaker sent with the PID.
* **Start-up and size**: standard library only, run as a file with ``-I -S`` (no site,
  no user site, no environment): 10 MB of RSS (measured), instead of
  the speaker's interpreter with its packages.
* **Its own signals**: the watchdog runs in a session of its own, so a terminal's Ctrl-Z
  or a SIGSTOP of the speaker's process group does not stop it with the speaker.
* **A watchdog that is itself starved** of CPU fires late, never early: it measures with
  CLOCK_MONOTONIC from the last beat it read, and a stalled speaker writes none.
* **Two ways to learn the speaker is gone, at once**: its death closes the pipe (EOF) and
  sends PR_SET_PDEATHSIG's SIGTERM together. The EOF path took bfdd's PID from its state
  and the SIGTERM handler, run between two steps of that path, found none and exited
  before the kill: bfdd ran on (tests/component/test_bfd_watchdog.py, about one run in
  ten with a CPU-bound process beside it). Each kill or continue (``fire``, ``thaw``)
  therefore runs with SIGTERM blocked (:func:`_sigterm_held`): the handler runs after it,
  never inside it, and finds the work done.

Role: only this. It knows nothing of BGP, ExaBGP or bfdd's configuration.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or
    None when there is no such process. The command name (field 2) may hold spaces and
    parentheses: fields are counted after its last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2 :].split()
    # rest[0] is field 3 (state): field 22 is rest[19].
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def _signal(process: tuple[int, int], signum: int) -> bool:
    """Send ``signum`` to (PID, start time) if that PID is still that process."""
    pid, started = process
    if start_time(pid) != started:
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


class _sigterm_held:  # used as a function: `with _sigterm_held():`
    """SIGTERM blocked inside, delivered (to the handler _follow_parent sets) after. A
    class, not contextlib's decorator: this program imports as little as it can."""

    def __enter__(self) -> None:
        self.held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def __exit__(self, *_exc: object) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.held)


def _say(line: str) -> None:
    """One line to the speaker (it logs each as an event of that name)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class Watchdog:
    """The watchdog's state; ``run()`` is its loop (select on stdin, with the time left
    until the next beat is due as its timeout)."""

    def __init__(self, timeout: float, stdin: int = 0) -> None:
        self.timeout = timeout
        self.stdin = stdin
        self.target: tuple[int, int] | None = None
        #: ExaBGP (PID, start time), and the one this watchdog stopped, if any.
        self.exabgp: tuple[int, int] | None = None
        self.frozen: tuple[int, int] | None = None
        self.last_beat = time.monotonic()
        self.partial = b""
        self.kills = 0

    def fire(self, reason: str) -> None:
        """SIGKILL bfdd if it is still the process the speaker named; on a stalled loop,
        stop ExaBGP too (see the module docstring). SIGTERM held meanwhile."""
        with _sigterm_held():
            if self.target is None:
                return
            target, self.target = self.target, None
            if not _signal(target, signal.SIGKILL):
                return
            self.kills += 1
            _say(f"bfd.watchdog_killed pid={target[0]} reason={reason}")
            stalled = reason == "loopStalled" and self.frozen is None
            if stalled and self.exabgp is not None and _signal(self.exabgp, signal.SIGSTOP):
                self.frozen = self.exabgp
                _say(f"bfd.watchdog_stopped_exabgp pid={self.exabgp[0]}")

    def thaw(self) -> None:
        """SIGCONT the ExaBGP this watchdog stopped, if any. SIGTERM held meanwhile."""
        with _sigterm_held():
            frozen, self.frozen = self.frozen, None
            if frozen is not None and _signal(frozen, signal.SIGCONT):
                _say(f"bfd.watchdog_continued_exabgp pid={frozen[0]}")

    def on_line(self, line: bytes) -> None:
        words = line.split()
        if not words:
            return
        if words[0] == b"beat":
            self.last_beat = time.monotonic()
            self.thaw()
        elif words[0] == b"stuck":
            self.fire("exabgpNotAnswering")
        elif words[0] == b"exabgp" and len(words) == 3:
            pid, started = int(words[1]), int(words[2])
            if self.frozen is not None and self.frozen != (pid, started):
                self.thaw()
            self.exabgp = (pid, started) if pid > 0 else None
        elif words[0] == b"pid" and len(words) == 3:
            pid, started = int(words[1]), int(words[2])
            self.target = (pid, started) if pid > 0 else None
            # A new bfdd is watched from now: the loop that started it is running.
            self.last_beat = time.monotonic()

    def run(self) -> int:
        while True:
            wait = max(0.0, self.last_beat + self.timeout - time.monotonic())
            ready, _, _ = select.select([self.stdin], [], [], wait)
            if not ready:
                self.fire("loopStalled")
                # Wait for the next beat (or a new PID) before judging again.
                self.last_beat = time.monotonic()
                continue
            data = os.read(self.stdin, 4096)
            if not data:
                self.fire("speakerGone")
                self.thaw()
                return 0
            *lines, self.partial = (self.partial + data).split(b"\n")
            for line in lines:
                self.on_line(line)


def _follow_parent(dog: Watchdog, parent: int) -> None:
    """PR_SET_PDEATHSIG (SIGTERM, handled: bfdd is killed first), set by the watchdog
    itself after exec (no pre-exec hook in the speaker, whose other threads make work
    between fork and exec unsafe), then checked: the speaker may have died before."""

    def gone(_signum: int, _frame: object) -> None:
        dog.fire("speakerGone")
        dog.thaw()
        sys.exit(0)

    signal.signal(signal.SIGTERM, gone)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:
        sys.exit(0)


def main(argv: list[str]) -> int:
    """``watchdog.py TIMEOUT PARENT_PID``."""
    timeout, parent = float(argv[1]), int(argv[2])
    dog = Watchdog(timeout)
    _follow_parent(dog, parent)
    return dog.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
