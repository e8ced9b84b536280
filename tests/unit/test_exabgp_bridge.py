"""The relay as a thread of ExaBGP's process (bgpd/exabgp/bridge.py), and the launcher's
patch that puts it there (both ways: verified, and the helper process as before).

The daemon's side is a unix socket server of the test's own; ExaBGP's side is either the
test writing and reading the Popen-like object's files, or ExaBGP's own ``Processes``."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exabgp.environment import getenv
from exabgp.logger import log
from exabgp.reactor.api import processes as exabgp_processes
from exabgp.reactor.api.processes import Processes

from bgpd.exabgp import bridge, helper, launch
from bgpd.exabgp.runtime import helper_argv
from kbgpd_lab.kit.waiting import recv_lines

#: Bound for conditions that happen at once on an idle machine: only catches hangs.
WITHIN = 30.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[socket.socket, Path]]:
    """The daemon's listening socket (unix, short path) and its path."""
    path = tmp_path / "api.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(WITHIN)
    yield server, path
    server.close()


def relay_env(path: Path, generation: int = 5) -> dict[str, str]:
    return {helper.SOCKET_ENV: str(path), helper.GENERATION_ENV: str(generation)}


def read_fd(fd: int, want: bytes) -> bytes:
    """Read ``fd`` (blocking, bounded) until ``want`` has arrived."""
    got = b""
    while len(got) < len(want):
        ready = select.select([fd], [], [], WITHIN)[0]
        assert ready, f"nothing more after {got!r}"
        chunk = os.read(fd, 65536)
        assert chunk, f"end after {got!r}"
        got += chunk
    return got


@pytest.fixture
def relay(daemon: tuple[socket.socket, Path]) -> Iterator[bridge.RelayProcess]:
    proc = bridge.RelayProcess(helper_argv(), relay_env(daemon[1]))
    yield proc
    proc.terminate()
    proc.wait(WITHIN)
    proc.stdin.close()
    proc.stdout.close()


@pytest.mark.parametrize(
    ("run", "want"),
    [
        (helper_argv(), True),
        ([sys.executable, str(bridge.HELPER_FILE)], True),
        ([sys.executable, "-I", "-S", "/elsewhere/helper.py"], False),
        (["/bin/cat"], False),
        ([], False),
        ("python helper.py", False),
    ],
)
def test_only_the_helpers_file_is_the_relay(run: Any, want: bool) -> None:
    assert bridge.is_relay(run) is want


def test_relays_both_ways_and_says_exabgps_pid(
    relay: bridge.RelayProcess, daemon: tuple[socket.socket, Path]
) -> None:
    assert relay.pid == os.getpid()
    assert relay.poll() is None
    conn, _ = daemon[0].accept()
    with conn:
        hello = json.loads(recv_lines(conn, 1, within=WITHIN)[0])
        assert hello == {
            "type": "kube-bgpd-helper",
            "pid": os.getpid(),
            "generation": 5,
            "dropped": 0,
        }
        # A command to ExaBGP's side, its ack and an event back to the daemon.
        conn.sendall(b"announce route 10.99.0.1/32 next-hop self\n")
        want = b"announce route 10.99.0.1/32 next-hop self\n"
        assert read_fd(relay.stdout.fileno(), want) == want
        relay.stdin.write(b"done\n" + b'{"type": "state"}\n')
        relay.stdin.flush()
        assert recv_lines(conn, 2, within=WITHIN) == [b"done", b'{"type": "state"}']


def test_terminate_ends_the_thread_and_both_sides_see_the_end(
    relay: bridge.RelayProcess, daemon: tuple[socket.socket, Path]
) -> None:
    conn, _ = daemon[0].accept()
    with conn:
        recv_lines(conn, 1, within=WITHIN)
        relay.terminate()
        assert relay.wait(WITHIN) == 0
        assert relay.poll() == 0
        conn.settimeout(WITHIN)
        assert conn.recv(10) == b""  # the relay's connection to the daemon closed
    assert os.read(relay.stdout.fileno(), 10) == b""  # ExaBGP reads the end: a death
    relay.kill()  # again, after the end: nothing to do, no error


def test_exabgps_blocking_writes_complete_while_the_daemon_is_away(
    relay: bridge.RelayProcess,
) -> None:
    """4 MiB written the way ExaBGP writes (blocking) with no daemon: more than a
    socketpair holds, so a relay that stopped reading would block the writer for good."""
    event = json.dumps({"type": "state", "pad": "x" * 1000}).encode() + b"\n"

    def write() -> None:
        for _ in range(4):
            relay.stdin.write(event * 1000)
            relay.stdin.flush()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    writer.join(WITHIN)
    assert not writer.is_alive()
    assert relay.poll() is None


def test_wait_times_out_while_the_relay_runs(relay: bridge.RelayProcess) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        relay.wait(0.01)


def test_without_the_socket_variable_it_drains_until_the_end(
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc = bridge.RelayProcess(helper_argv(), {})
    proc.stdin.write(b"x" * 1_000_000)
    proc.stdin.flush()
    assert proc.poll() is None
    proc.terminate()
    assert proc.wait(WITHIN) == 1
    proc.stdin.close()
    proc.stdout.close()
    assert f"${helper.SOCKET_ENV} is not set" in capsys.readouterr().err


def test_a_relay_that_raises_ends_like_a_dead_helper(
    monkeypatch: pytest.MonkeyPatch,
    daemon: tuple[socket.socket, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken(self: helper.Relay) -> int:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(helper.Relay, "run", broken)
    proc = bridge.RelayProcess(helper_argv(), relay_env(daemon[1]))
    assert proc.wait(WITHIN) == 1
    assert proc.poll() == 1
    # ExaBGP sees its stdout end, as for a child that died, and respawns it.
    assert os.read(proc.stdout.fileno(), 10) == b""
    proc.stdin.close()
    proc.stdout.close()
    [line] = capsys.readouterr().err.splitlines()
    assert line == "kube-bgpd relay thread failed: RuntimeError: a bug over two lines"


def test_any_other_process_is_a_process() -> None:
    facade = bridge.SubprocessFacade(subprocess)
    proc = facade.Popen([sys.executable, "-c", "print('hi')"], stdout=subprocess.PIPE)
    assert isinstance(proc, subprocess.Popen)
    out, _ = proc.communicate(timeout=WITHIN)
    assert out == b"hi\n"
    assert facade.PIPE is subprocess.PIPE
    assert facade.TimeoutExpired is subprocess.TimeoutExpired


@pytest.fixture
def processes_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exabgp_processes, "subprocess", subprocess)


def test_the_installed_processes_is_the_verified_one() -> None:
    """A changed ExaBGP must be re-verified: this fails when the dependency moves."""
    assert {t: launch.source_digest(t) for t in launch.BRIDGE_RELIED_ON} == (
        launch.BRIDGE_RELIED_ON
    )


def test_patched_exabgp_runs_the_relay_as_a_thread(
    processes_restored: None, daemon: tuple[socket.socket, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ExaBGP's own Processes, once patched, starts the relay in this process, writes to
    it and reads the daemon's commands from it, and ends it on terminate."""
    log.init(getenv())  # what ExaBGP's main does before its reactor starts
    assert launch.bridge_helper() == ""
    assert isinstance(exabgp_processes.subprocess, bridge.SubprocessFacade)
    for name, value in relay_env(daemon[1]).items():
        monkeypatch.setenv(name, value)
    processes = Processes()
    processes.start({"api-kube-bgpd": {"run": helper_argv(), "encoder": "json", "respawn": True}})
    proc = processes._process["api-kube-bgpd"]
    assert isinstance(proc, bridge.RelayProcess)
    try:
        conn, _ = daemon[0].accept()
        with conn:
            assert json.loads(recv_lines(conn, 1, within=WITHIN)[0])["pid"] == os.getpid()
            processes.write("api-kube-bgpd", '{"type": "state"}')
            assert recv_lines(conn, 1, within=WITHIN) == [b'{"type": "state"}']
            conn.sendall(b"announce route 10.99.0.1/32 next-hop self\n")
            got: list[Any] = []
            deadline = time.monotonic() + WITHIN
            while not got and time.monotonic() < deadline:
                select.select([proc.stdout.fileno()], [], [], 1.0)
                got = list(processes.received())
            assert got == [("api-kube-bgpd", "announce route 10.99.0.1/32 next-hop self")]
    finally:
        processes.terminate()
    assert proc.poll() == 0
    proc.stdin.close()  # ExaBGP leaves a child's pipes to the garbage collector
    proc.stdout.close()


def test_a_relay_thread_that_ended_is_respawned_by_exabgp(
    processes_restored: None,
    daemon: tuple[socket.socket, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The helper's death, in a patched ExaBGP: ExaBGP's own Processes sees the relay's
    end on its stdout and starts a new relay thread, which dials the daemon again."""
    log.init(getenv())
    assert launch.bridge_helper() == ""
    for name, value in relay_env(daemon[1]).items():
        monkeypatch.setenv(name, value)
    processes = Processes()
    processes.respawn_number = 5  # ExaBGP's default (api.respawn)
    processes.start({"api-kube-bgpd": {"run": helper_argv(), "encoder": "json", "respawn": True}})
    first = processes._process["api-kube-bgpd"]
    try:
        conn, _ = daemon[0].accept()
        conn.close()
        first.terminate()  # the relay ends as if it had died
        assert first.wait(WITHIN) == 0
        assert list(processes.received()) == []
        second = processes._process["api-kube-bgpd"]
        assert isinstance(second, bridge.RelayProcess)
        assert second is not first
        conn, _ = daemon[0].accept()
        with conn:
            assert json.loads(recv_lines(conn, 1, within=WITHIN)[0])["type"] == "kube-bgpd-helper"
    finally:
        processes.terminate()
    for proc in (first, second):
        proc.stdin.close()
        proc.stdout.close()
    capsys.readouterr()


def test_a_changed_processes_keeps_the_helper_a_process(
    processes_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = "exabgp.reactor.api.processes:Processes"
    monkeypatch.setattr(launch, "BRIDGE_RELIED_ON", {target: "0" * 64})
    note = launch.bridge_helper()
    assert note == (
        f"the API helper runs as its own process (source-changed: not the verified "
        f"5.0.15: {target})"
    )
    assert exabgp_processes.subprocess is subprocess


def test_a_failure_while_patching_keeps_the_helper_a_process(
    processes_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exabgp_processes, "subprocess", object())
    note = launch.bridge_helper()
    assert note.startswith("the API helper runs as its own process (failed: RuntimeError: ")


def test_unmodified_exabgp_keeps_the_helper_a_process(
    processes_restored: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from exabgp.bgp.neighbor import Neighbor

    monkeypatch.setattr(Neighbor, "remove_self", Neighbor.__dict__["remove_self"])
    assert launch.patch({launch.UNMODIFIED_ENV: "1"}) is launch.Unmodified.REQUESTED
    assert exabgp_processes.subprocess is subprocess
    [line] = capsys.readouterr().err.splitlines()
    assert "API helper" not in line
