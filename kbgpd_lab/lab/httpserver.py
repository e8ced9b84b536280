"""A tiny HTTP/1.1 keep-alive server that answers every request with the node's name.

Role: the lab's "pod": one runs in each node namespace, bound to the wildcard addresses
so it answers on every service IP the lab puts on the node's ``lo``. The client counts
answers per node to show how the router's ECMP spreads connections. ``python -m
http.server`` does not fit (HTTP/1.0, listen backlog 5), so this is a few
lines of asyncio: keep-alive by default, ``Connection: close`` honoured, a large backlog.

Run: ``python -m kbgpd_lab.lab.httpserver --name node1 [--port 80] [--address 0.0.0.0 ...]``;
it prints ``ready`` once listening and stops on SIGTERM/SIGINT.

What it must not do: serve anything but the name (it is not a web server), or bind
outside the namespace it is started in (it is only ever started through ``ip netns exec``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Sequence

#: Largest request head we read; anything bigger is not our client.
MAX_HEAD = 16 * 1024


async def _handle(name: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            version = lines[0].rsplit(" ", 1)[-1] if lines[0] else "HTTP/1.1"
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            length = int(headers.get("content-length", "0") or 0)
            if length:
                await reader.readexactly(length)
            conn = headers.get("connection", "").lower()
            close = conn == "close" or (version == "HTTP/1.0" and conn != "keep-alive")
            body = name + b"\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                + b"Content-Length: %d\r\n" % len(body)
                + (b"Connection: close\r\n" if close else b"")
                + b"\r\n"
                + body
            )
            await writer.drain()
            if close:
                return
    except ConnectionError:
        return
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def serve(name: str, addresses: Sequence[str], port: int, *, ready: bool = True) -> None:
    """Serve until SIGTERM or SIGINT."""
    encoded = name.encode()
    servers = []
    for addr in addresses:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # Separate v4 and v6 sockets: a dual-stack one would clash with the v4 bind.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((addr, port))
        servers.append(
            await asyncio.start_server(
                lambda r, w: _handle(encoded, r, w), sock=sock, backlog=4096, limit=MAX_HEAD
            )
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready:
        print("ready", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--name", required=True, help="what every answer says (the node name)")
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument(
        "--address",
        action="append",
        default=None,
        help="address to bind (repeatable; default 0.0.0.0 and ::)",
    )
    args = parser.parse_args(argv)
    asyncio.run(serve(args.name, args.address or ["0.0.0.0", "::"], args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
