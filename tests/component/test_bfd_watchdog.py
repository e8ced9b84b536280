"""The BFD watchdog against real processes: two FRR bfdd (FRR 8.4, standalone, 100 ms x 3)
in two network namespaces, one of them run by a stand-in for the speaker (its asyncio
loop beats the watchdog, bgpd.bfd.heartbeat, and starts bfdd again when it dies, as the
speaker's BFD runtime does). SIGSTOP of that process (every thread stopped): the far
bfdd sees the session Down within the watchdog's bound plus the detect time; SIGCONT:
bfdd is started again and the session comes back Up. The watchdog is killed with the
stand-in's death (pipe EOF)."""

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

#: The stand-in: the speaker's watchdog wiring, without BGP. argv: bfdd argv (JSON), bound.
STAND_IN = textwrap.dedent(
    """
    import asyncio, json, sys
    from bgpd.bfd.heartbeat import BfdWatchdog

    async def main() -> None:
        argv, timeout = json.loads(sys.argv[1]), float(sys.argv[2])
        wd = BfdWatchdog(timeout=timeout, unanswered=lambda: 0.0)

        async def keep_bfdd() -> None:
            while True:
                proc = await asyncio.create_subprocess_exec(*argv)
                wd.watch(proc.pid)
                print(f"bfdd {proc.pid}", flush=True)
                await proc.wait()
                wd.watch(None)
                await asyncio.sleep(0.1)

        async with asyncio.TaskGroup() as tg:
            tg.create_task(wd.run())
            tg.create_task(keep_bfdd())

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
def pair(topology: Topology) -> Iterator[tuple[Bfdd, Bfdd]]:
    """(node1's bfdd files, the router's bfdd files), removed after the test."""
    node, router = str(topology.node_address(1)), str(topology.router_address())
    near, far = Bfdd.create(router, node), Bfdd.create(node, router)
    try:
        yield near, far
    finally:
        near.close()
        far.close()


def test_stopped_speaker_is_dropped_and_comes_back(
    topology: Topology, pair: tuple[Bfdd, Bfdd]
) -> None:
    near, far = pair
    topology.router.popen(far.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stand_in = topology.nodes[0].popen(
        [sys.executable, "-c", STAND_IN, json.dumps(near.argv()), str(TIMEOUT)],
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
    second = int(stand_in.stdout.readline().split()[1])
    assert second != first
    wait_until(lambda: far.status() == "up", within=20, what="BFD up again after SIGCONT")

    (watchdog,) = [p for p in processes_in(topology.nodes[0].name) if _is_watchdog(p)]
    stand_in.kill()
    stand_in.wait(timeout=10)
    # The watchdog follows its speaker (pipe EOF, PR_SET_PDEATHSIG); bfdd is the test's
    # to stop here (the speaker's BFD runtime does it in the product).
    os.kill(second, signal.SIGKILL)
    wait_until(lambda: not process_alive(watchdog), within=10, what="the watchdog gone")


def _is_watchdog(pid: int) -> bool:
    try:
        return b"bgpd/bfd/watchdog.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
