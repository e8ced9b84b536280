"""The bfdd adapter against real bfdd processes in two network namespaces.

The product's BfdRuntime runs bfdd in node1's namespace (as the speaker would, with
``ip netns exec`` as its argv prefix); a plain bfdd started by the test runs in the
router's namespace with the other end of each session. Checked: sessions come Up and
are read back with their detect time; a change applied in place leaves an unrelated
session alone (same bfdd, same session id, uptime still counting) and a changed
session Up; the peer's bfdd stopped takes the session Down within the detect time with
bfdd's diagnostic; a killed bfdd is restarted and the sessions come back; stop() leaves
no process in the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from bgpd.bfd.render import BfdPeerConfig, render
from bgpd.bfd.runtime import BFDD_BINARY, CONFIG_NAME, BfdRuntime, Vty, bfdd_argv
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.model import IPAddress, PeerName
from kbgpd_lab.kit.waiting import wait_until_async
from kbgpd_lab.lab.netns import process_alive, processes_in
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

V4, V6 = PeerName("router-v4"), PeerName("router-v6")


@pytest.fixture
def topo() -> Iterator[Topology]:
    """The router and one node on the LAN, nothing else."""
    topology = Topology.create(prefix=f"kbfd{os.getpid()}", nodes=1, client=False)
    try:
        yield topology
    finally:
        topology.destroy()


def session(topo: Topology, family: int, name: PeerName, **values: int) -> BfdPeerConfig:
    """node1 -> router, as the speaker would configure it."""
    return BfdPeerConfig(
        peer=name,
        address=topo.router_address(family),
        local_address=topo.node_address(1, family),
        profile="fast",
        **values,
    )


class PeerBfdd:
    """A plain bfdd in the router's namespace: the other end of node1's sessions."""

    def __init__(self, topo: Topology, work: Path, peers: list[BfdPeerConfig]) -> None:
        self.dir = work
        os.chmod(work, 0o700)
        frr = pwd.getpwnam("frr")
        os.chown(self.dir, frr.pw_uid, frr.pw_gid)
        (self.dir / CONFIG_NAME).write_text(render(peers))
        os.chmod(self.dir / "bfdd.conf", 0o644)
        self.proc = topo.router.popen(
            bfdd_argv(BFDD_BINARY, self.dir, bfdctl=True),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def mirrored(topo: Topology, *peers: BfdPeerConfig) -> list[BfdPeerConfig]:
    """The router's side of node1's sessions."""
    return [replace(p, address=p.local_address, local_address=p.address) for p in peers]


class Recorder:
    """What the runtime reported: every states mapping and every bfdd PID."""

    def __init__(self) -> None:
        self.states: Mapping[PeerName, BfdPeerState] = {}
        self.history: list[tuple[float, Mapping[PeerName, BfdPeerState]]] = []
        self.pids: list[int] = []

    def on_states(self, states: Mapping[PeerName, BfdPeerState]) -> None:
        self.states = states
        self.history.append((time.monotonic(), states))

    def on_started(self, pid: int) -> None:
        self.pids.append(pid)

    def state(self, peer: PeerName) -> BfdState:
        s = self.states.get(peer)
        return BfdState.UNKNOWN if s is None else s.state


@contextlib.asynccontextmanager
async def running(
    topo: Topology, work: Path, peers: list[BfdPeerConfig]
) -> AsyncIterator[tuple[BfdRuntime, Recorder]]:
    rec = Recorder()
    runtime = BfdRuntime(
        work_dir=work,
        on_states=rec.on_states,
        on_started=rec.on_started,
        prefix=topo.nodes[0].exec_prefix(),
    )
    await runtime.configure(peers)
    task = asyncio.create_task(runtime.run(), name="bfdd-runtime")
    try:
        yield runtime, rec
    finally:
        await runtime.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def sessions(runtime: BfdRuntime) -> dict[IPAddress, Mapping[str, object]]:
    """bfdd's own view, by peer address (a connection of the test's own)."""
    import ipaddress

    vty = await Vty.connect(runtime.vty_path)
    try:
        rows = json.loads(await vty.run("show bfd peers json"))
    finally:
        vty.close()
    return {ipaddress.ip_address(r["peer"]): r for r in rows}


async def all_up(rec: Recorder, *peers: PeerName, within: float = 20.0) -> None:
    await wait_until_async(
        lambda: all(rec.state(p) is BfdState.UP for p in peers),
        within=within,
        what=f"BFD Up for {', '.join(peers)}",
        details=lambda: repr(rec.states),
    )


def temporary_directory() -> Iterator[Path]:
    """Under /tmp: bfdd (as frr) must reach it, and pytest's tmp_path is under a 0700
    directory (the runtime refuses that with a clear error)."""
    path = Path(tempfile.mkdtemp(prefix="kbfd-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


#: The speaker's work directory (0700, as the speaker makes it).
work = pytest.fixture(temporary_directory, name="work")
#: The router's bfdd's directory.
router_dir = pytest.fixture(temporary_directory, name="router_dir")


async def test_sessions_come_up_and_go_down_within_the_detect_time(
    topo: Topology, work: Path, router_dir: Path
) -> None:
    v4 = session(topo, 4, V4)
    peer = PeerBfdd(topo, router_dir, mirrored(topo, v4))
    async with running(topo, work, [v4]) as (runtime, rec):
        await all_up(rec, V4)
        up = rec.states[V4]
        assert up.detect_ms == 900  # 3 x max(300, 300)
        assert up.flaps == 0
        assert up.diagnostic == ""
        assert rec.pids == [runtime.pid]
        # The other end dies (no AdminDown): detection time expires.
        killed = time.monotonic()
        os.kill(peer.proc.pid, signal.SIGKILL)
        await wait_until_async(lambda: rec.state(V4) is BfdState.DOWN, within=10.0, what="BFD Down")
        seen = next(t for t, s in rec.history if t >= killed and s[V4].state is BfdState.DOWN)
        # Detect time 0.9 s plus one poll (0.225 s) plus bfdd's timer jitter; the bound
        # is generous (a loaded machine), the figure is printed for the record.
        print(f"down seen {seen - killed:.3f} s after the peer's bfdd was killed")
        assert seen - killed < 3.0
        down = rec.states[V4]
        assert down.flaps == 1
        assert down.detect_ms is None
        assert down.diagnostic == "control detection time expired"
        topo.router.stop(peer.proc.pid)
    assert runtime.pid is None


async def test_a_change_in_place_keeps_an_unrelated_session(
    topo: Topology, work: Path, router_dir: Path
) -> None:
    v4, v6 = session(topo, 4, V4), session(topo, 6, V6)
    PeerBfdd(topo, router_dir, mirrored(topo, v4, v6))
    async with running(topo, work, [v4, v6]) as (runtime, rec):
        await all_up(rec, V4, V6)
        pid = runtime.pid
        before = await sessions(runtime)
        # Let the v4 session's uptime reach whole seconds, to see it keep counting.
        await wait_until_async(
            lambda: sessions_uptime(runtime, v4.address, 2), within=10.0, what="uptime 2 s"
        )
        since = rec.states[V4].since
        # v6's intervals change and a new session (nobody answers) is added.
        other = replace(
            session(topo, 4, PeerName("nobody")), address=topo.node_lan(4)[99], profile="slow"
        )
        await runtime.configure([v4, replace(v6, transmit_interval=200), other])
        after = await sessions(runtime)
        assert runtime.pid == pid
        assert after[v4.address]["id"] == before[v4.address]["id"]
        assert int(str(after[v4.address]["uptime"])) >= 2
        assert after[v6.address]["id"] == before[v6.address]["id"]
        assert after[v6.address]["transmit-interval"] == 200
        assert after[other.address]["status"] == "down"
        # Both sessions stay Up: no flap, v4's since unchanged.
        await wait_until_async(lambda: PeerName("nobody") in rec.states, what="new session")
        assert rec.states[V4].since == since
        assert rec.state(V4) is BfdState.UP
        assert rec.state(V6) is BfdState.UP
        assert rec.states[V4].flaps == 0
        assert rec.states[V6].flaps == 0
        # Removing a session leaves the others too.
        await runtime.configure([v4, replace(v6, transmit_interval=200)])
        final = await sessions(runtime)
        assert set(final) == {v4.address, v6.address}
        assert final[v4.address]["id"] == before[v4.address]["id"]
        assert rec.states[V4].flaps == 0
        assert rec.states[V6].flaps == 0


async def sessions_uptime(runtime: BfdRuntime, address: IPAddress, seconds: int) -> bool:
    row = (await sessions(runtime)).get(address, {})
    return int(str(row.get("uptime", 0))) >= seconds


async def test_a_killed_bfdd_is_restarted_and_stop_leaves_nothing(
    topo: Topology, work: Path, router_dir: Path
) -> None:
    v4 = session(topo, 4, V4)
    PeerBfdd(topo, router_dir, mirrored(topo, v4))
    async with running(topo, work, [v4]) as (runtime, rec):
        await all_up(rec, V4)
        first = runtime.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_until_async(lambda: len(rec.pids) == 2, what="bfdd started again")
        assert rec.pids[1] != first
        assert runtime.pid == rec.pids[1]
        await all_up(rec, V4)
        assert rec.states[V4].flaps == 1
        # The goodbye: AdminDown reaches the router's bfdd.
        await runtime.admin_down()
        assert (await sessions(runtime))[v4.address]["status"] == "shutdown"
        await wait_until_async(
            lambda: rec.state(V4) is BfdState.ADMIN_DOWN, what="AdminDown read back"
        )
        second = runtime.pid
        assert second is not None
    assert runtime.pid is None
    assert not process_alive(first)
    assert not process_alive(second)
    # Only the router's bfdd is left in the lab, none in node1's namespace.
    assert processes_in(topo.nodes[0].name) == []
