"""The BFD watchdog against real processes: two FRR bfdd (FRR 8.4, standalone, 100 ms x 3)
in two network namespaces, one of them run by a stand-in for the speaker (its asyncio
loop beats the watchdog, bgpd.bfd.heartbeat, and runs the product's bfdd runtime,
bgpd.bfd.runtime, which starts bfdd again when it dies). SIGSTOP of that process (every
thread stopped): the far bfdd sees the session Down within the watchdog's bound plus the
detect time; SIGCONT: bfdd is started again and the session comes back Up. A SIGKILL of
the stand-in: the watchdog kills bfdd (which lost PR_SET_PDEATHSIG when it switched to
user frr) and leaves."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.netns import process_alive, processes_in
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

TIMEOUT = 1.0  # the watchdog's bound (s)
DETECT = 0.3  # 100 ms x 3

#: The stand-in: the speaker's BFD wiring without BGP: the product's bfdd runtime
#: (bgpd.bfd.runtime) and watchdog (bgpd.bfd.heartbeat), each started bfdd handed to the
#: watchdog. argv: work directory, peer address, local address, bound.
STAND_IN = textwrap.dedent(
    """
    import asyncio, ipaddress, sys
    from pathlib import Path
    from bgpd.bfd.heartbeat import BfdWatchdog
    from bgpd.bfd.render import BfdPeerConfig
    from bgpd.bfd.runtime import BfdRuntime
    from bgpd.model import PeerName

    async def main() -> None:
        work, peer, local, timeout = sys.argv[1:5]
        wd = BfdWatchdog(timeout=float(timeout), unanswered=lambda: 0.0)

        def started(pid: int) -> None:
            wd.watch(pid)
            print(f"bfdd {pid}", flush=True)

        rt = BfdRuntime(work_dir=Path(work), on_states=lambda _: None, on_started=started)
        session = BfdPeerConfig(
            peer=PeerName("router"),
            address=ipaddress.ip_address(peer),
            local_address=ipaddress.ip_address(local),
            profile="fast",
            receive_interval=100,
            transmit_interval=100,
        )
        await rt.configure([session])
        async with asyncio.TaskGroup() as tg:
            tg.create_task(wd.run())
            tg.create_task(rt.run())

    asyncio.run(main())
    """
)


@dataclass
class Bfdd:
    """One standalone bfdd's files (FRR drops to user frr: a directory of its own)."""

    rundir: Path

    @classmethod
    def create(cls, peer: str, local: str) -> Bfdd:
        d = Path(tempfile.mkdtemp(prefix="kube-bgpd-bfdd-"))
        (d / "bfdd.conf").write_text(
            f"bfd\n peer {peer} local-address {local}\n"
            "  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n !\n!\n"
        )
        shutil.chown(d, "frr", "frr")
        shutil.chown(d / "bfdd.conf", "frr", "frr")
        return cls(d)

    def argv(self) -> list[str]:
        d = self.rundir
        return [
            "/usr/lib/frr/bfdd",
            "-i", str(d / "bfdd.pid"),
            "-z", str(d / "zserv.api"),
            "--vty_socket", str(d),
            "-f", str(d / "bfdd.conf"),
            "-P", "0",
            "--log", f"file:{d / 'bfdd.log'}",
            "--bfdctl", str(d / "bfdd.sock"),
        ]  # fmt: skip

    def status(self) -> str:
        """The one session's status ("up", "down", ...) or "" when bfdd does not answer."""
        proc = subprocess.run(
            ["vtysh", "--vty_socket", str(self.rundir), "-d", "bfdd", "-c", "show bfd peers json"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        try:
            rows = json.loads(proc.stdout)
        except ValueError:
            return ""
        return str(rows[0]["status"]) if rows else ""

    def close(self) -> None:
        shutil.rmtree(self.rundir, ignore_errors=True)


@pytest.fixture
def far(topology: Topology) -> Iterator[Bfdd]:
    """The router's bfdd files, removed after the test."""
    bfdd = Bfdd.create(str(topology.node_address(1)), str(topology.router_address()))
    try:
        yield bfdd
    finally:
        bfdd.close()


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """The stand-in's work directory, under /tmp: bfdd (as frr) must reach it."""
    d = Path(tempfile.mkdtemp(prefix="kube-bgpd-bfdw-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_stopped_speaker_is_dropped_and_comes_back(
    topology: Topology, far: Bfdd, work_dir: Path
) -> None:
    topology.router.popen(far.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node, router = str(topology.node_address(1)), str(topology.router_address())
    stand_in = topology.nodes[0].popen(
        [sys.executable, "-c", STAND_IN, str(work_dir), router, node, str(TIMEOUT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert stand_in.stdout is not None
    first = int(stand_in.stdout.readline().split()[1])
    wait_until(lambda: far.status() == "up", within=20, what="BFD up at the far end")

    os.kill(stand_in.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_until(lambda: far.status() == "down", within=20, what="BFD down at the far end")
        took = time.monotonic() - stopped
        # The bound plus the detect time, plus the polling of vtysh (generous: a hang
        # would take the whole wait).
        assert took < TIMEOUT + DETECT + 2.0, took
        assert not process_alive(first)
    finally:
        os.kill(stand_in.pid, signal.SIGCONT)
    # The runtime starts bfdd again (its supervisor's back-off) and BFD comes back.
    second = int(stand_in.stdout.readline().split()[1])
    assert second != first
    wait_until(lambda: far.status() == "up", within=20, what="BFD up again after SIGCONT")

    (watchdog,) = [p for p in processes_in(topology.nodes[0].name) if _is_watchdog(p)]
    stand_in.kill()
    stand_in.wait(timeout=10)
    # The watchdog follows its speaker (pipe EOF, PR_SET_PDEATHSIG) and takes bfdd with
    # it: bfdd's own PR_SET_PDEATHSIG is cleared by its switch to user frr.
    wait_until(lambda: not process_alive(watchdog), within=10, what="the watchdog gone")
    wait_until(lambda: not process_alive(second), within=10, what="bfdd gone")


def _is_watchdog(pid: int) -> bool:
    try:
        return b"bgpd/bfd/watchdog.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
