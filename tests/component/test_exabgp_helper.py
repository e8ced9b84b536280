"""The API relay helper as a real process: stdin always drained, buffering while the
daemon is away, hello line, reconnects, stale acks dropped. No ExaBGP needed: the test
plays ExaBGP's side (the helper's stdin/stdout) and the daemon's (the unix socket)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bgpd.exabgp.helper import GENERATION_ENV, SOCKET_ENV
from bgpd.exabgp.runtime import helper_argv
from kbgpd_lab.kit.waiting import recv_lines

pytestmark = [pytest.mark.component]


@pytest.fixture
def helper(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    path = tmp_path / "api.sock"
    env = dict(os.environ, **{SOCKET_ENV: str(path), GENERATION_ENV: "7"})
    proc = subprocess.Popen(
        helper_argv(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    yield proc, path
    if proc.poll() is None:
        proc.kill()
    proc.wait(5)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            pipe.close()


def lines(conn: socket.socket, count: int) -> list[str]:
    return [line.decode() for line in recv_lines(conn, count)]


def test_drains_while_away_then_delivers_with_hello(
    helper: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, path = helper
    assert proc.stdin is not None
    # 1 MiB of events with nobody listening: more than a pipe holds (64 KiB), so a helper
    # that stopped reading would block this write (and, in real life, ExaBGP).
    event = json.dumps({"type": "state", "pad": "x" * 1000}).encode() + b"\n"
    started = time.monotonic()
    proc.stdin.write(event * 1000)
    proc.stdin.flush()
    assert time.monotonic() - started < 10
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(10)
    conn, _ = server.accept()
    got = lines(conn, 1001)
    hello = json.loads(got[0])
    assert hello["type"] == "kube-bgpd-helper"
    assert hello["generation"] == 7
    assert hello["dropped"] == 0
    assert len(got) == 1001

    # Commands relay to ExaBGP's side, and its acks come back for this connection.
    conn.sendall(b"announce route 10.99.0.1/32 next-hop self\n")
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"announce route 10.99.0.1/32 next-hop self\n"
    proc.stdin.write(b"done\n")
    proc.stdin.flush()
    assert lines(conn, 1) == ["done"]

    # The daemon goes away with a command unanswered; its late ack must not reach the
    # next connection, which gets a new hello instead.
    conn.sendall(b"withdraw route 10.99.0.1/32\n")
    assert proc.stdout.readline() == b"withdraw route 10.99.0.1/32\n"
    conn.close()
    time.sleep(0.2)
    proc.stdin.write(b"done\n")
    proc.stdin.write(event)
    proc.stdin.flush()
    conn2, _ = server.accept()
    got = lines(conn2, 2)
    assert json.loads(got[0])["type"] == "kube-bgpd-helper"
    assert json.loads(got[1])["type"] == "state"
    conn2.sendall(b"version\n")
    assert proc.stdout.readline() == b"version\n"
    proc.stdin.write(b"error\n")
    proc.stdin.flush()
    assert lines(conn2, 1) == ["error"]

    # ExaBGP gone (EOF on stdin): the helper exits, and only then.
    assert proc.poll() is None
    proc.stdin.close()
    assert proc.wait(10) == 0
    for s in (conn, conn2, server):
        s.close()


def test_no_socket_variable_still_drains(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    proc = subprocess.Popen(
        helper_argv(),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    _, err = proc.communicate(b"x" * 200_000, timeout=10)
    assert proc.returncode == 1
    assert SOCKET_ENV.encode() in err
