"""A SnapshotSource that reads a static cluster dump (``kube-bgpd speaker --cluster-file``).

For debugging, for hosts without API access and for tests: the file holds what
``kubectl get services,endpointslices,nodes -A -o yaml`` prints (the format ``explain``
reads, parsed by bgpd.objects.parse_cluster_dump). It is re-read on ``reload()`` (SIGHUP)
and when it changes: its (inode, mtime, size) is polled every ``poll_interval`` seconds,
which costs one stat() and notices editors that replace the file as well as ones that
rewrite it in place.

A file that cannot be read or parsed keeps the last good snapshot and marks the source
``stale`` (the reconciler then keeps the last applied routes) until a good version
appears; before the first good read the source is not ``synced``.

BGPPeers' ``passwordSecret``: the Secrets come from the same file (append ``kubectl get
secret NAME -n NS -o yaml``), looked up in the ref's namespace or else in ``namespace``
(the speaker's own), as the Kubernetes source looks them up in the API. A Secret the
file lacks, or one without a ``password``, is logged naming the peer (the session then
comes up without MD5 and the router refuses it). The file is the operator's, like
``passwordFile``: keep it private.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from bgpd.logs import log
from bgpd.model import ClusterSnapshot, Config, PeerName
from bgpd.objects import ClusterDump, parse_dump

_logger = logging.getLogger("bgpd.clusterfile")


@dataclass(frozen=True, slots=True)
class DumpRead:
    """One read of a cluster dump: the file's (inode, mtime, size) as it was before the
    read (None: it could not be stat'ed), and what it held."""

    identity: tuple[int, int, int] | None
    dump: ClusterDump


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime, size) of ``path``, None if it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_dump(path: Path) -> DumpRead:
    """Read and parse the dump at ``path``. Raises OSError or UnicodeDecodeError (cannot
    be read) or bgpd.objects.DumpError (not a valid dump). The identity is taken first,
    so a file replaced during the read is read again at the next poll."""
    identity = file_identity(path)
    return DumpRead(identity, parse_dump(path.read_text(encoding="utf-8")))


class ClusterFileSource:
    def __init__(
        self,
        path: Path,
        *,
        poll_interval: float = 0.5,
        config: Config | None = None,
        namespace: str = "default",
        first: DumpRead | None = None,
    ) -> None:
        self.path = path
        #: A read made before the source was built (`kube-bgpd speaker` reads the dump
        #: once to refuse a bad one before starting): the first reload() takes it instead
        #: of parsing the file again (at 10,000 Services, seconds and a parse's peak).
        self._first = first
        self.poll_interval = poll_interval
        self._config = config
        self._namespace = namespace
        self._secrets: Mapping[tuple[str, str], str | None] = {}
        self._passwords: dict[PeerName, str] = {}
        self._snapshot = ClusterSnapshot()
        self._synced = False
        self._stale = False
        self._identity: tuple[int, int, int] | None = None
        self._changed = asyncio.Event()
        self._first_change: float | None = None
        #: The last read error, for status ("" when the file is good).
        self.error = ""
        self.reads = 0

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def stale(self) -> bool:
        return self._stale

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def secret_passwords(self) -> Mapping[PeerName, str]:
        """Peer -> password from its passwordSecret, for rendering ExaBGP's config."""
        return MappingProxyType(dict(self._passwords))

    def set_config(self, config: Config) -> None:
        """A reloaded config may name other Secrets: resolve them again."""
        self._config = config
        self._resolve_secrets()

    def _resolve_secrets(self) -> None:
        passwords: dict[PeerName, str] = {}
        for peer in self._config.peers if self._config is not None else ():
            ref = peer.secret_ref
            if ref is None:
                continue
            key = (ref.namespace or self._namespace, ref.name)
            where = f"{key[0]}/{key[1]}"
            if key not in self._secrets:
                log(
                    _logger,
                    logging.ERROR,
                    "secrets.unreadable",
                    peer=peer.name,
                    error=f"no Secret {where} in {self.path}",
                )
                continue
            password = self._secrets[key]
            if password is None:
                log(_logger, logging.ERROR, "secrets.no_password", peer=peer.name, secret=where)
                continue
            passwords[peer.name] = password
        self._passwords = passwords

    async def wait_changed(self) -> float:
        await self._changed.wait()
        self._changed.clear()
        first = self._first_change if self._first_change is not None else time.monotonic()
        self._first_change = None
        return first

    def _mark_changed(self) -> None:
        if self._first_change is None:
            self._first_change = time.monotonic()
        self._changed.set()

    def reload(self) -> None:
        """Read the file now (SIGHUP, start). Never raises: errors are logged and kept."""
        first, self._first = self._first, None
        self._identity = first.identity if first is not None else file_identity(self.path)
        self.reads += 1
        try:
            read = first if first is not None else read_dump(self.path)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.error = str(exc)
            self._stale = self._synced
            log(
                _logger,
                logging.ERROR,
                "clusterfile.invalid",
                path=str(self.path),
                error=self.error,
                keeping="last good snapshot" if self._synced else "nothing (not synced)",
            )
            self._mark_changed()
            return
        self.error = ""
        snapshot = read.dump.snapshot
        self._snapshot = snapshot
        self._secrets = read.dump.secret_passwords
        self._resolve_secrets()
        self._synced = True
        self._stale = False
        log(
            _logger,
            logging.INFO,
            "clusterfile.loaded",
            path=str(self.path),
            services=len(snapshot.services),
            nodes=len(snapshot.nodes),
        )
        self._mark_changed()

    async def run(self) -> None:
        """Read once, then poll for changes until cancelled."""
        self.reload()
        while True:
            await asyncio.sleep(self.poll_interval)
            identity = file_identity(self.path)
            if identity != self._identity:
                # Give a writer that is mid-write a moment, then read what is there.
                await asyncio.sleep(0.05)
                self.reload()
