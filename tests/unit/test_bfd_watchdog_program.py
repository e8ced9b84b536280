"""The watchdog program's own rules (bgpd.bfd.watchdog), on a `sleep` child standing in for
bfdd: it kills only the process the speaker named (PID and start time), once, and reads
the speaker's lines whole across reads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bgpd.bfd.watchdog import Watchdog, start_time
from kbgpd_lab.kit.waiting import wait_until


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


def state(pid: int) -> str:
    """The process state letter of /proc/PID/stat (T: stopped)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


#: A second `sleep` child, standing in for ExaBGP.
exabgp = child


def test_a_stalled_loop_stops_exabgp_until_the_next_beat(
    child: subprocess.Popen[bytes],
    exabgp: subprocess.Popen[bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bfdd killed, ExaBGP stopped (it would reconnect and re-send the hung node's routes),
    and continued by the first beat of the loop that runs again."""
    dog = Watchdog(5.0)
    dog.on_line(f"pid {child.pid} {start_time(child.pid)}".encode())
    dog.on_line(f"exabgp {exabgp.pid} {start_time(exabgp.pid)}".encode())
    dog.fire("loopStalled")
    assert child.wait(timeout=10) == -9
    wait_until(lambda: state(exabgp.pid) == "T", what="ExaBGP stopped")
    dog.on_line(b"beat")
    wait_until(lambda: state(exabgp.pid) != "T", what="ExaBGP continued")
    assert capsys.readouterr().err.splitlines() == [
        f"bfd.watchdog_killed pid={child.pid} reason=loopStalled",
        f"bfd.watchdog_stopped_exabgp pid={exabgp.pid}",
        f"bfd.watchdog_continued_exabgp pid={exabgp.pid}",
    ]


def test_exabgp_not_answering_kills_bfdd_and_leaves_exabgp_running(
    child: subprocess.Popen[bytes], exabgp: subprocess.Popen[bytes]
) -> None:
    """The loop runs (it sent "stuck"): it handles ExaBGP itself."""
    dog = Watchdog(5.0)
    dog.on_line(f"pid {child.pid} {start_time(child.pid)}".encode())
    dog.on_line(f"exabgp {exabgp.pid} {start_time(exabgp.pid)}".encode())
    dog.on_line(b"stuck")
    assert child.wait(timeout=10) == -9
    assert state(exabgp.pid) != "T"


def test_no_bfdd_no_stop(exabgp: subprocess.Popen[bytes]) -> None:
    """Without a bfdd to kill (no BFD peer), a stall stops nothing: the hold timer is the
    router's only signal then, and a stopped ExaBGP would only add a restart."""
    dog = Watchdog(5.0)
    dog.on_line(f"exabgp {exabgp.pid} {start_time(exabgp.pid)}".encode())
    dog.fire("loopStalled")
    assert state(exabgp.pid) != "T"


def test_the_speaker_gone_continues_a_stopped_exabgp(
    child: subprocess.Popen[bytes], exabgp: subprocess.Popen[bytes]
) -> None:
    """A stopped ExaBGP would not act on its own PR_SET_PDEATHSIG: continued at EOF."""
    r, w = os.pipe()
    dog = Watchdog(60.0, stdin=r)
    dog.on_line(f"pid {child.pid} {start_time(child.pid)}".encode())
    dog.on_line(f"exabgp {exabgp.pid} {start_time(exabgp.pid)}".encode())
    dog.fire("loopStalled")
    wait_until(lambda: state(exabgp.pid) == "T", what="ExaBGP stopped")
    os.close(w)  # the speaker is gone
    assert dog.run() == 0
    wait_until(lambda: state(exabgp.pid) != "T", what="ExaBGP continued")
    assert dog.frozen is None
    os.close(r)


#: The speaker's death as the watchdog sees it, both ways at once: the EOF path's kill is
#: under way when PR_SET_PDEATHSIG's SIGTERM arrives (sent here from inside the kill, the
#: widest window), and the handler _follow_parent installs runs. argv: bfdd's stand-in PID.
SPEAKER_GONE_TWICE = r"""
import os, signal, sys
from bgpd.bfd import watchdog

pid = int(sys.argv[1])
real = watchdog._signal

def signal_with_sigterm_arriving(process, signum):
    os.kill(os.getpid(), signal.SIGTERM)  # the handler may run at the next step
    return real(process, signum)

watchdog._signal = signal_with_sigterm_arriving
dog = watchdog.Watchdog(5.0)
watchdog._follow_parent(dog, os.getppid())
dog.on_line(f"pid {pid} {watchdog.start_time(pid)}".encode())
dog.fire("speakerGone")  # the EOF path
dog.thaw()
"""


def test_a_sigterm_during_the_eof_paths_kill_still_kills_bfdd(
    child: subprocess.Popen[bytes],
) -> None:
    """EOF and PR_SET_PDEATHSIG's SIGTERM come together when the speaker dies; without
    SIGTERM held during the kill, the handler ran inside it, found the target taken and
    exited first: bfdd ran on (seen in tests/component/test_bfd_watchdog.py)."""
    done = subprocess.run(
        [sys.executable, "-c", SPEAKER_GONE_TWICE, str(child.pid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert child.wait(timeout=10) == -9
    assert done.stderr.count("bfd.watchdog_killed") == 1, done.stderr
