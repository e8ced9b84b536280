"""How `kube-bgpd status`, `drain` and `explain --from-speaker` reach the speaker on this
host: its control socket (``control.sock`` in the work directory, bgpd.status), or its
network listener when ``--metrics-address`` is given (which serves ``/status`` only with
SpeakerConfig ``exposeStatus``, and never ``/drain``).

The work directory is ``--work-dir``, else SpeakerConfig ``workDir`` of ``--config``, else
the default ``/run/kube-bgpd``. Standard library only: it must work from a minimal debug
shell.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: SpeakerConfig workDir's default (bgpd.model.SpeakerConfig; kept here so the clients
#: import nothing heavy).
DEFAULT_WORK_DIR = Path("/run/kube-bgpd")
#: The control socket's name in the work directory (bgpd.status.CONTROL_SOCKET).
CONTROL_SOCKET = "control.sock"


class SpeakerUnreachable(Exception):
    """The speaker did not answer (no socket, refused, timed out, not JSON)."""


class RefusedHere(Exception):
    """The speaker answered, but does not serve this request where it was asked."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--work-dir",
        metavar="DIR",
        default=None,
        help="the speaker's work directory, which holds its control socket (default: "
        f"SpeakerConfig workDir of --config, else {DEFAULT_WORK_DIR})",
    )


@dataclass(frozen=True, slots=True)
class Target:
    """Where the speaker is asked: a unix socket path, or HOST:PORT."""

    socket: Path | None
    address: str | None

    def __str__(self) -> str:
        return str(self.socket) if self.socket is not None else f"http://{self.address}"


def target(args: argparse.Namespace) -> Target:
    """The control socket unless ``--metrics-address`` was given."""
    if args.metrics_address:
        return Target(socket=None, address=args.metrics_address)
    if args.work_dir:
        return Target(socket=Path(args.work_dir) / CONTROL_SOCKET, address=None)
    work_dir = DEFAULT_WORK_DIR
    if args.config:
        from bgpd.config import ConfigError, load_config_or_raise

        try:
            config, _ = load_config_or_raise(args.config)
        except ConfigError:
            pass  # the default; `kube-bgpd validate` says what is wrong with the file
        else:
            work_dir = config.speaker.work_dir
    return Target(socket=work_dir / CONTROL_SOCKET, address=None)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def call(where: Target, method: str, path: str, timeout: float) -> Mapping[str, Any]:
    """One request; the JSON object answered. Raises SpeakerUnreachable, or RefusedHere
    for a 404/405 (a path the network listener does not serve)."""
    conn: http.client.HTTPConnection
    if where.socket is not None:
        conn = _UnixConnection(where.socket, timeout)
    else:
        assert where.address is not None
        host, _, port = where.address.rpartition(":")
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        conn.request(method, path, body=b"" if method != "GET" else None)
        resp = conn.getresponse()
        body = resp.read()
    except OSError as exc:
        raise SpeakerUnreachable(f"cannot reach the speaker at {where}: {exc}") from exc
    finally:
        conn.close()
    if resp.status in (404, 405):
        raise RefusedHere(f"{where} does not serve {method} {path}")
    if resp.status >= 400:
        raise SpeakerUnreachable(f"{where} answered {resp.status} to {method} {path}")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise SpeakerUnreachable(f"{where}: {method} {path} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SpeakerUnreachable(f"{where}: {method} {path} is not a JSON object")
    return doc
