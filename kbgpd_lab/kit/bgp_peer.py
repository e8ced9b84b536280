"""A passive BGP peer on a loopback address, for tests that need an Established session
without a router namespace (the speaker's status objects against the API simulator).

It accepts one session at a time, answers the speaker's OPEN with its own (version 4,
its ASN, hold time 90 s, the multiprotocol capability for IPv4 unicast as routers send
it: without it ExaBGP 5.0 sends this peer no UPDATE at all, measured), sends
KEEPALIVEs and counts the UPDATEs it receives. With `md5` it sets the TCP MD5 signature
option (RFC 2385) for the speaker's address on its listening socket, as a router with
a password does. `close()` (or leaving the context) drops the session and stops
listening: the speaker sees the session go down.

It listens on 127.0.0.0/8 only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import threading
from types import TracebackType

#: linux/tcp.h
TCP_MD5SIG = 14
_MARKER = b"\xff" * 16
_OPEN, _UPDATE, _KEEPALIVE = 1, 2, 4


def _message(kind: int, body: bytes = b"") -> bytes:
    return _MARKER + struct.pack("!HB", 19 + len(body), kind) + body


def _md5sig(address: str, key: str) -> bytes:
    """struct tcp_md5sig for an IPv4 peer: sockaddr_storage, flags, prefixlen, keylen,
    ifindex, key[80]."""
    sockaddr = struct.pack("=H", socket.AF_INET) + struct.pack("!H4s", 0, socket.inet_aton(address))
    raw = key.encode()
    return (
        sockaddr.ljust(128, b"\0") + struct.pack("=BBHI", 0, 0, len(raw), 0) + raw.ljust(80, b"\0")
    )


class PassivePeer:
    """See the module docstring."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        asn: int = 64512,
        router_id: str = "127.0.0.2",
        md5: str | None = None,
        speaker: str = "127.0.0.1",
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"{host}: a PassivePeer listens on loopback only")
        self.host = host
        self.asn = asn
        self.router_id = router_id
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if md5 is not None:
            self._listener.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, _md5sig(speaker, md5))
        self._listener.bind((host, port))
        self._listener.listen(4)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._session: socket.socket | None = None
        self.sessions = 0
        self.updates = 0
        self._thread = threading.Thread(target=self._serve, name="passive-peer", daemon=True)
        self._thread.start()

    @property
    def established(self) -> bool:
        with self._lock:
            return self._session is not None

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            try:
                self._run_session(conn)
            except OSError:
                pass
            finally:
                with self._lock:
                    self._session = None
                conn.close()

    def _read(self, conn: socket.socket) -> tuple[int, bytes]:
        head = self._exactly(conn, 19)
        length, kind = struct.unpack("!HB", head[16:19])
        return kind, self._exactly(conn, length - 19)

    @staticmethod
    def _exactly(conn: socket.socket, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise OSError("closed")
            out += chunk
        return out

    def _run_session(self, conn: socket.socket) -> None:
        conn.settimeout(3.0)
        kind, _ = self._read(conn)
        if kind != _OPEN:
            return
        as2 = self.asn if self.asn < 65536 else 23456
        # Optional parameter 2 (capabilities): multiprotocol (1), AFI 1 / SAFI 1 (RFC 4760).
        params = struct.pack("!BBBBHBB", 2, 6, 1, 4, 1, 0, 1)
        body = struct.pack("!BHH4sB", 4, as2, 90, socket.inet_aton(self.router_id), len(params))
        body += params
        conn.sendall(_message(_OPEN, body) + _message(_KEEPALIVE))
        with self._lock:
            self._session = conn
            self.sessions += 1
        while not self._closed.is_set():
            try:
                kind, _ = self._read(conn)
            except TimeoutError:
                conn.sendall(_message(_KEEPALIVE))
                continue
            if kind == _UPDATE:
                with self._lock:
                    self.updates += 1

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            session = self._session
        if session is not None:
            with contextlib.suppress(OSError):
                session.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)

    def __enter__(self) -> PassivePeer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
