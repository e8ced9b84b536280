"""The watchdog program's own rules (bgpd.bfd.watchdog), on a `sleep` child standing in for
bfdd: it kills only the process the speaker named (PID and start time), once, and reads
the speaker's lines whole across reads."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from bgpd.bfd.watchdog import Watchdog, start_time


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_start_time_of_a_process_and_of_none() -> None:
    assert start_time(os.getpid()) is not None
    assert start_time(2**22 + 1) is None  # above pid_max's default: no such process


def test_fire_kills_the_named_process_once(child: subprocess.Popen[bytes]) -> None:
    dog = Watchdog(5.0)
    dog.on_line(f"pid {child.pid} {start_time(child.pid)}".encode())
    dog.fire("loopStalled")
    assert child.wait(timeout=10) == -9
    dog.fire("loopStalled")
    assert dog.kills == 1


def test_fire_spares_a_process_with_another_start_time(child: subprocess.Popen[bytes]) -> None:
    """The PID was reused: not bfdd any more."""
    dog = Watchdog(5.0)
    started = start_time(child.pid)
    assert started is not None
    dog.on_line(f"pid {child.pid} {started + 1}".encode())
    dog.fire("loopStalled")
    assert child.poll() is None
    assert dog.kills == 0


def test_pid_zero_watches_nothing(child: subprocess.Popen[bytes]) -> None:
    dog = Watchdog(5.0)
    dog.on_line(f"pid {child.pid} {start_time(child.pid)}".encode())
    dog.on_line(b"pid 0 0")
    dog.fire("speakerGone")
    assert child.poll() is None


def test_stuck_kills_at_once(
    child: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    r, w = os.pipe()
    dog = Watchdog(60.0, stdin=r)
    line = f"pid {child.pid} {start_time(child.pid)}\nbeat\nstu".encode()
    os.write(w, line)
    os.write(w, b"ck\n")
    os.close(w)
    assert dog.run() == 0  # EOF: the speaker is gone
    assert child.wait(timeout=10) == -9
    assert dog.kills == 1
    assert (
        capsys.readouterr().err
        == f"bfd.watchdog_killed pid={child.pid} reason=exabgpNotAnswering\n"
    )
    os.close(r)
