"""A plain FRR ``bfdd`` on a lab node, outside kube-bgpd: the node side of BFD for
baselines and for checking the lab routers' BFD without the speaker.

Role: what an operator could run beside a speaker that has no BFD of its own: FRR's
bfdd alone (no zebra, no bgpd), one static single-hop session per router address with
an explicit local address (bfdd needs no zebra then). It runs as FRR's user with its own
pid file, vty socket and control socket in a directory of its own under /tmp (as the
lab's FRR router does), inside the node's namespace. Nothing ties it to the node's BGP
session: a stopped or hung speaker leaves it Up (that is the product's job).

Public interface: ``NodeBfdd(netns, peers, *, receive_interval=300,
transmit_interval=300, detect_multiplier=3)`` with ``peers`` as (router address, local
address) pairs; ``NodeBfdd.for_node(topology, node, timers)``; ``render()``, ``start()``,
``stop()``, ``close()``, ``sessions()`` (peer -> state, as ``Router.bfd_sessions``),
``wait_up(timeout)``, ``log_tail()``; a context manager.

What it must not do: stop any process but its own (by PID); share a path with another
FRR daemon.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from bgpd.model import IPAddress
from kbgpd_lab.lab.netns import Netns, NetnsError
from kbgpd_lab.lab.routers import RouterBfd, RouterError, parse_frr_bfd
from kbgpd_lab.lab.topology import Topology


class NodeBfdd:
    """FRR's bfdd alone in a node namespace, one session per (peer, local address)."""

    def __init__(
        self,
        netns: Netns,
        peers: Sequence[tuple[IPAddress, IPAddress]],
        *,
        receive_interval: int = 300,
        transmit_interval: int = 300,
        detect_multiplier: int = 3,
    ) -> None:
        self.netns = netns
        self.peers = tuple(peers)
        self.receive_interval = receive_interval
        self.transmit_interval = transmit_interval
        self.detect_multiplier = detect_multiplier
        self.rundir = Path(tempfile.mkdtemp(prefix="kube-bgpd-nodebfd-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_node(cls, topology: Topology, node: int, timers: RouterBfd) -> NodeBfdd:
        """Node N's bfdd with one IPv4 session to the router, at the router's timers."""
        return cls(
            topology.nodes[node - 1],
            [(topology.router_address(4), topology.node_address(node))],
            receive_interval=timers.receive_interval,
            transmit_interval=timers.transmit_interval,
            detect_multiplier=timers.detect_multiplier,
        )

    def render(self) -> str:
        lines = ["hostname lab-node", "bfd"]
        for peer, local in self.peers:
            lines += [
                f" peer {peer} local-address {local}",
                f"  detect-multiplier {self.detect_multiplier}",
                f"  receive-interval {self.receive_interval}",
                f"  transmit-interval {self.transmit_interval}",
                " exit",
            ]
        return "\n".join([*lines, "exit", ""])

    def start(self) -> None:
        d = self.rundir
        (d / "bfdd.conf").write_text(self.render())
        for path in (d, *d.iterdir()):
            shutil.chown(path, "frr", "frr")
        argv = [
            "/usr/lib/frr/bfdd",
            "-i",
            str(d / "bfdd.pid"),
            # No zebra listens here: with explicit local addresses bfdd needs none.
            "-z",
            str(d / "zserv.api"),
            "--vty_socket",
            str(d),
            "-f",
            str(d / "bfdd.conf"),
            "-P",
            "0",
            "--log",
            f"file:{d / 'bfdd.log'}",
            "--bfdctl",
            str(d / "bfdd.sock"),
        ]
        with (d / "bfdd.stdout.log").open("ab") as out:
            self._proc = self.netns.popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.sessions()
                return
            except (RouterError, NetnsError) as exc:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.stop()
                    raise RouterError(f"node bfdd did not start: {exc}\n{self.log_tail()}") from exc
            time.sleep(0.02)

    def sessions(self) -> dict[IPAddress, str]:
        proc = self.netns.run(
            ["vtysh", "--vty_socket", str(self.rundir), "-c", "show bfd peers json"],
            check=False,
            timeout=10,
        )
        if proc.returncode != 0:
            raise RouterError(f"node bfdd: {proc.stderr.strip() or proc.stdout.strip()}")
        return parse_frr_bfd(json.loads(proc.stdout or "[]"))

    def wait_up(self, timeout: float = 10) -> None:
        """Until every session is Up."""
        deadline = time.monotonic() + timeout
        want = {peer for peer, _ in self.peers}
        while True:
            states = self.sessions()
            if all(states.get(p) == "up" for p in want):
                return
            if time.monotonic() > deadline:
                raise RouterError(f"node bfdd sessions not up in {timeout} s: {states}")
            time.sleep(0.02)

    def log_tail(self, lines: int = 20) -> str:
        path = self.rundir / "bfdd.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self._proc is not None:
            self.netns.stop(self._proc.pid)
            self._proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.rundir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["NodeBfdd"]
