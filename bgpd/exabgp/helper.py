"""The relay between ExaBGP's API and the daemon: ExaBGP's API process, or a thread of it.

ExaBGP 5.0 has no socket API: it talks to processes it spawns, over their stdin/stdout.
Where it runs: when the launcher patches ExaBGP (bgpd/exabgp/launch.py, the verified
path), ExaBGP starts no process for it and :func:`serve` runs in a thread of ExaBGP's own
process over two socketpairs (bgpd/exabgp/bridge.py, which says how the hazards below
hold there); otherwise (ExaBGP unmodified, or any other ExaBGP binary) ExaBGP spawns it as
``python -I -S .../bgpd/exabgp/helper.py``, its own process.

It relays ExaBGP's output (acks and JSON events) to the daemon's unix socket (path in
$KUBE_BGPD_HELPER_SOCKET) and the daemon's commands to ExaBGP. It exists only
because of three measured hazards (shared lab notes):

* ExaBGP's writes to this process are blocking: if we stop reading stdin, the whole
  ExaBGP reactor freezes after 64 KiB, keepalives stop and every session dies. So stdin
  is ALWAYS drained, whatever happens to the daemon or to stdout.
* More than 5 helper deaths in ~64 s make ExaBGP drop all sessions and exit. So this
  program never exits on a recoverable error: a missing or closed daemon socket means
  "buffer and reconnect" (back-off 50 ms doubling to 1 s). It exits only when ExaBGP is
  gone (EOF on stdin, broken stdout).
* Acks are FIFO per process, not per connection. The helper counts the commands it
  forwarded per daemon connection and drops an ack whose command came from an earlier
  connection (or from a previous helper), so the daemon never matches a stale ack.

Buffering while the daemon is away: events are kept, oldest dropped first, up to
``MAX_BUFFER`` bytes (8 MiB, ~40,000 events); the number dropped is reported in the hello
line sent first on each connection::

    {"type": "kube-bgpd-helper", "pid": 123, "generation": 4, "dropped": 0}

Commands from the daemon are read only while fewer than ``MAX_PENDING_TO_EXABGP`` bytes
wait for ExaBGP (back-pressure lands on the asyncio daemon, never on ExaBGP).

Standard library only, and no import of the rest of kube-bgpd: every node runs one, so
it must start fast and stay small. ExaBGP runs it as a script with ``-I -S``
(bgpd.exabgp.runtime.helper_argv: no site-packages, no .pth file, no PYTHON* variable)
and it imports only what it uses; measured on Python 3.11: 12.2 MiB RSS started with
``-m`` and importing json, 10.0 MiB now (a bare ``python -I -S`` is 8.5 MiB;
docs/benchmarks.md, "Memory"). tests/unit/test_helper_imports.py holds it to the
standard library.
"""

from __future__ import annotations

import collections
import os
import selectors
import socket
import sys
import time
from collections.abc import Mapping  # loaded with collections: costs nothing

SOCKET_ENV = "KUBE_BGPD_HELPER_SOCKET"
GENERATION_ENV = "KUBE_BGPD_HELPER_GENERATION"
MAX_BUFFER = 8 * 1024 * 1024
MAX_PENDING_TO_EXABGP = 1024 * 1024
_ACKS = (b"done", b"error")


def hello_line(pid: int, generation: int, dropped: int) -> bytes:
    """The first line on each connection (see the module docstring): JSON written by
    hand, its values being integers, so that the json module is not imported for it."""
    return (
        f'{{"type": "kube-bgpd-helper", "pid": {pid:d}, "generation": {generation:d}, '
        f'"dropped": {dropped:d}}}\n'
    ).encode()


class Relay:
    """The relay's state; ``run()`` is a single-threaded, non-blocking select loop."""

    def __init__(self, socket_path: str, generation: int, stdin: int = 0, stdout: int = 1):
        self.path = socket_path
        self.generation = generation
        self.stdin = stdin
        self.stdout = stdout
        self.sel = selectors.DefaultSelector()
        self.sock: socket.socket | None = None
        self.conn_id = 0
        self.backoff = 0.05
        self.next_connect = 0.0
        self.stdin_partial = b""
        self.sock_partial = b""
        # (connection id the line belongs to, or 0 for an event; the line with "\n")
        self.to_daemon: collections.deque[tuple[int, bytes]] = collections.deque()
        self.to_daemon_bytes = 0
        self.out_sock = bytearray()
        self.to_exabgp = bytearray()
        # connection id of every command forwarded to ExaBGP and not yet answered
        self.pending_acks: collections.deque[int] = collections.deque()
        self.dropped = 0

    # ----------------------------------------------------------------- ExaBGP side

    def on_stdin(self) -> bool:
        try:
            data = os.read(self.stdin, 65536)
        except BlockingIOError:
            return True
        if not data:
            return False  # ExaBGP is gone
        lines = (self.stdin_partial + data).split(b"\n")
        self.stdin_partial = lines.pop()
        for line in lines:
            stripped = line.strip()
            if not stripped:
                continue
            if stripped in _ACKS:
                owner = self.pending_acks.popleft() if self.pending_acks else -1
                if owner != self.conn_id or self.sock is None:
                    continue  # the command came from an earlier connection: stale
                self._queue(owner, stripped)
            else:
                self._queue(0, stripped)
        return True

    def _queue(self, owner: int, line: bytes) -> None:
        self.to_daemon.append((owner, line + b"\n"))
        self.to_daemon_bytes += len(line) + 1
        while self.to_daemon_bytes > MAX_BUFFER and self.to_daemon:
            _, old = self.to_daemon.popleft()
            self.to_daemon_bytes -= len(old)
            self.dropped += 1

    def write_exabgp(self) -> bool:
        if not self.to_exabgp:
            return True
        try:
            n = os.write(self.stdout, self.to_exabgp)
        except BlockingIOError:
            return True
        except BrokenPipeError:
            return False
        del self.to_exabgp[:n]
        return True

    # ----------------------------------------------------------------- daemon side

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            # A unix stream connect completes at once or fails (EAGAIN: backlog full).
            sock.connect(self.path)
        except OSError:
            sock.close()
            self.next_connect = time.monotonic() + self.backoff
            self.backoff = min(1.0, self.backoff * 2)
            return
        self.sock = sock
        self.conn_id += 1
        self.backoff = 0.05
        self.sock_partial = b""
        self.out_sock = bytearray(hello_line(os.getpid(), self.generation, self.dropped))
        self.dropped = 0

    def disconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.out_sock.clear()
        self.next_connect = time.monotonic() + self.backoff

    def on_sock_readable(self) -> None:
        assert self.sock is not None
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self.disconnect()
            return
        if not data:
            self.disconnect()
            return
        lines = (self.sock_partial + data).split(b"\n")
        self.sock_partial = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            self.to_exabgp += line + b"\n"
            self.pending_acks.append(self.conn_id)

    def write_daemon(self) -> None:
        assert self.sock is not None
        while self.to_daemon and len(self.out_sock) < 65536:
            owner, line = self.to_daemon.popleft()
            self.to_daemon_bytes -= len(line)
            if owner and owner != self.conn_id:
                continue
            self.out_sock += line
        if not self.out_sock:
            return
        try:
            n = self.sock.send(self.out_sock)
        except BlockingIOError:
            return
        except OSError:
            self.disconnect()
            return
        del self.out_sock[:n]

    # ----------------------------------------------------------------- loop

    def run(self) -> int:
        os.set_blocking(self.stdin, False)
        os.set_blocking(self.stdout, False)
        while True:
            if self.sock is None and time.monotonic() >= self.next_connect:
                self.connect()
            self.sel = selectors.DefaultSelector()
            self.sel.register(self.stdin, selectors.EVENT_READ, "stdin")
            if self.to_exabgp:
                self.sel.register(self.stdout, selectors.EVENT_WRITE, "stdout")
            if self.sock is not None:
                events = 0
                if len(self.to_exabgp) < MAX_PENDING_TO_EXABGP:
                    events |= selectors.EVENT_READ
                if self.out_sock or self.to_daemon:
                    events |= selectors.EVENT_WRITE
                if events:
                    self.sel.register(self.sock, events, "sock")
            timeout = (
                None if self.sock is not None else max(0.0, self.next_connect - time.monotonic())
            )
            try:
                ready = self.sel.select(timeout)
            finally:
                self.sel.close()
            for key, mask in ready:
                if key.data == "stdin":
                    if not self.on_stdin():
                        return 0
                elif key.data == "stdout":
                    if not self.write_exabgp():
                        return 0
                elif key.data == "sock" and self.sock is not None:
                    if mask & selectors.EVENT_READ:
                        self.on_sock_readable()
                    if self.sock is not None and mask & selectors.EVENT_WRITE:
                        self.write_daemon()


def serve(environ: Mapping[str, str], stdin: int = 0, stdout: int = 1) -> int:
    """Relay between ExaBGP's side (``stdin``/``stdout``) and the daemon's socket named in
    ``environ``: a process's main(), or the relay thread inside ExaBGP (bgpd.exabgp.bridge)."""
    path = environ.get(SOCKET_ENV)
    if not path:
        # Not recoverable, but exiting would make ExaBGP respawn us in a loop and then
        # exit: drain stdin until ExaBGP goes away instead, and say why on stderr.
        sys.stderr.write(f"kube-bgpd helper: ${SOCKET_ENV} is not set; discarding input\n")
        sys.stderr.flush()
        while os.read(stdin, 65536):
            pass
        return 1
    generation = int(environ.get(GENERATION_ENV, "0") or 0)
    relay = Relay(path, generation, stdin, stdout)
    try:
        return relay.run()
    finally:
        # A process's exit would close it; a thread's end must.
        relay.disconnect()


def main() -> int:
    return serve(os.environ)


if __name__ == "__main__":
    sys.exit(main())
