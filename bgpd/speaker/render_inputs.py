"""The inputs of ExaBGP's rendering that need I/O the pure renderer must not do.

* The source address the kernel picks to reach each peer (a connected UDP socket's
  getsockname(), which sends no packet); for a peer with a ``vrf`` the socket is first
  bound to the VRF device (SO_BINDTODEVICE, as ExaBGP's session socket is), so the
  answer comes from the VRF's routing table, as ``ip route get ADDR vrf NAME`` would.
  Cached per peer address and VRF; the refresh rule: a
  peer's choice is asked again when the config is (re)loaded, when this node's Node
  object changes its addresses, and when the cached answer is older than
  ``KERNEL_CHOICE_TTL`` seconds (an address added to an interface, or a route change,
  shows up within that bound; the next pass after it re-renders, and ExaBGP restarts
  only if the text changed).
* Each peer's MD5 key: ``password``, else ``passwordFile`` (trailing newline stripped),
  else the resolved Secret (from the source, when it offers them). A passwordFile is
  read when the config is (re)loaded and again only when the file changes (its inode,
  size or modification time: a Kubernetes Secret volume swaps a symlink), not on every
  pass. Keys are never logged; an unreadable file is logged without its content.

The speaker renders through the ``RenderInputs`` Protocol, so tests hand it fixed inputs.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from bgpd.logs import log
from bgpd.model import Config, IPAddress, Node, PeerName

_logger = logging.getLogger("bgpd.speaker")

#: Seconds a cached kernel source-address choice is trusted (see the module docstring).
KERNEL_CHOICE_TTL = 30.0


class RenderInputs(Protocol):
    def set_config(self, config: Config) -> None:
        """The config was (re)loaded: forget what depends on its peers."""
        ...

    def kernel_choices(self, node: Node | None) -> Mapping[PeerName, IPAddress | None]:
        """Per peer, the source address the kernel would use to reach it."""
        ...

    def passwords(self, secrets: Mapping[PeerName, str]) -> Mapping[PeerName, str | None]:
        """Per peer, its MD5 key (None: none, or its file is unreadable)."""
        ...


def kernel_choice(peer: IPAddress, vrf: str | None = None) -> IPAddress | None:
    """The source address the kernel would use to reach ``peer`` (no packet is sent), in
    the routing table of the VRF device ``vrf`` when one is given. None: no route, or no
    such device (or no CAP_NET_RAW to bind to it: ExaBGP would fail the same way)."""
    family = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            if vrf is not None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, vrf.encode() + b"\0")
            s.connect((str(peer), 9))
            return ipaddress.ip_address(s.getsockname()[0])
    except OSError:
        return None


#: What identifies a file's content without reading it (inode, size, mtime).
_FileStamp = tuple[int, int, int]


def _stamp(path: Path) -> _FileStamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class HostRenderInputs:
    """RenderInputs from this host: the kernel's routing and the password files."""

    def __init__(
        self,
        config: Config,
        *,
        ask_kernel: Callable[[IPAddress, str | None], IPAddress | None] = kernel_choice,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ask_kernel = ask_kernel
        self._clock = clock
        self._config = config
        #: (peer address, VRF) -> (choice, monotonic time asked)
        self._kernel: dict[tuple[IPAddress, str | None], tuple[IPAddress | None, float]] = {}
        self._node_addresses: tuple[tuple[str, str], ...] | None = None
        #: password file -> (stamp, key or None when unreadable)
        self._files: dict[Path, tuple[_FileStamp | None, str | None]] = {}

    def set_config(self, config: Config) -> None:
        self._config = config
        self._kernel.clear()
        self._files.clear()

    def kernel_choices(self, node: Node | None) -> Mapping[PeerName, IPAddress | None]:
        addresses = None if node is None else node.addresses
        if addresses != self._node_addresses:
            self._node_addresses = addresses
            self._kernel.clear()
        now = self._clock()
        out: dict[PeerName, IPAddress | None] = {}
        for p in self._config.peers:
            key = (p.peer_address, p.vrf)
            cached = self._kernel.get(key)
            if cached is None or now - cached[1] >= KERNEL_CHOICE_TTL:
                cached = (self._ask_kernel(*key), now)
                self._kernel[key] = cached
            out[p.name] = cached[0]
        return out

    def passwords(self, secrets: Mapping[PeerName, str]) -> Mapping[PeerName, str | None]:
        out: dict[PeerName, str | None] = {}
        for p in self._config.peers:
            if p.password:
                out[p.name] = p.password
            elif p.password_file is not None:
                out[p.name] = self._password_file(p.name, p.password_file)
            else:
                out[p.name] = secrets.get(p.name)
        return out

    def _password_file(self, peer: PeerName, path: Path) -> str | None:
        stamp = _stamp(path)
        cached = self._files.get(path)
        if cached is not None and cached[0] == stamp:  # unchanged, or still missing
            return cached[1]
        try:
            key: str | None = path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            log(
                _logger,
                logging.ERROR,
                "peer.password_file_unreadable",
                peer=peer,
                error=exc.strerror,
            )
            key = None
        self._files[path] = (stamp, key)
        return key
