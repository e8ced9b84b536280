"""A throw-away self-signed certificate for the simulator's optional TLS listener.

Made with the `openssl` binary (no Python crypto dependency): an EC P-256 key and a
one-day certificate for 127.0.0.1, ::1, localhost and any other address the caller names
(a lab's API address) that is its own CA, so a kubeconfig or an in-cluster `ca.crt` can
trust exactly it. Files live in a private temporary
directory that the caller removes.
"""

from __future__ import annotations

import ipaddress
import ssl
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SelfSigned:
    directory: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def _san(hosts: Iterable[str]) -> str:
    """subjectAltName for the loopback names and ``hosts`` (IP addresses or DNS names)."""
    names = ["IP:127.0.0.1", "IP:::1", "DNS:localhost"]
    for host in hosts:
        try:
            name = f"IP:{ipaddress.ip_address(host)}"
        except ValueError:
            name = f"DNS:{host}"
        if name not in names:
            names.append(name)
    return "subjectAltName=" + ",".join(names)


def make_self_signed(hosts: Iterable[str] = ()) -> SelfSigned:
    directory = Path(tempfile.mkdtemp(prefix="apisim-tls-"))
    cert, key = directory / "ca.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=apisim",
            "-addext",
            _san(hosts),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return SelfSigned(directory, cert, key)
