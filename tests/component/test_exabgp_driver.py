"""The ExaBGP adapter (render + supervisor + helper + driver) against real routers.

ExaBGP runs inside node namespaces of the lab topology (argv prefix ``ip netns exec``);
the driver runs in the test's event loop. Router queries are blocking subprocess calls,
so they run in a thread (``in_thread``): blocking the loop would stall the driver.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bgpd.bfd.gate import CEASE_BFD_DOWN
from bgpd.exabgp import launch
from bgpd.exabgp.core import PROBE_INTERVAL
from bgpd.exabgp.plan import Command, delta
from bgpd.exabgp.render import render
from bgpd.exabgp.runtime import ExaBGPRuntime, helper_argv
from bgpd.model import (
    BGPPeer,
    Config,
    DesiredRoutes,
    IPNetwork,
    Node,
    NodeName,
    PeerEvent,
    PeerName,
    RouteAttributes,
    RouteEvents,
    SessionState,
)
from bgpd.speaker.bfd_follow import say_goodbye
from kbgpd_lab.kit.measure import OPENSSL_LIBRARIES, mapped_libraries
from kbgpd_lab.kit.processes import exabgp_runtime
from kbgpd_lab.kit.waiting import wait_until, wait_until_async
from kbgpd_lab.lab.netns import process_alive
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN, Router
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

PLAIN = RouteAttributes()


def net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


def node_of(topology: Topology, i: int) -> Node:
    return Node(
        name=NodeName(f"node{i}"),
        addresses=(
            ("InternalIP", str(topology.node_address(i, 4))),
            ("InternalIP", str(topology.node_address(i, 6))),
        ),
    )


def router_peer(topology: Topology, name: str = "tor", family: int = 4, **kw: Any) -> BGPPeer:
    fields: dict[str, Any] = {"my_asn": NODE_ASN, "peer_asn": ROUTER_ASN, "hold_time": 9}
    fields.update(kw)
    return BGPPeer(name=PeerName(name), peer_address=topology.router_address(family), **fields)


async def in_thread(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kw)


@contextlib.asynccontextmanager
async def running(
    topology: Topology,
    tmp_path: Path,
    peers: tuple[BGPPeer, ...],
    *,
    node: int = 1,
    passwords: dict[PeerName, str | None] | None = None,
    **opts: Any,
) -> AsyncIterator[ExaBGPRuntime]:
    """An ExaBGPRuntime for node N, running until the block ends (then killed, no
    graceful stop: tests of the graceful stop call rt.stop() themselves)."""
    rendering = render(
        Config(peers=peers),
        node_of(topology, node),
        kernel_choices={},
        passwords=passwords or {},
        helper_argv=helper_argv(),
    )
    async with exabgp_runtime(
        rendering,
        node=NodeName(f"node{node}"),
        work_dir=tmp_path / f"node{node}",
        prefix=topology.nodes[node - 1].exec_prefix(),
        **opts,
    ) as rt:
        yield rt


async def stays(cond: Callable[[], Any], seconds: float, what: str) -> None:
    """``cond`` (run in a thread: it may query a router) holds at every check for
    ``seconds``: how a test shows that something does not happen, failing at the first
    check where it did."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert await in_thread(cond), what
        await asyncio.sleep(0.1)


def routes(peer: str, prefixes: list[str], attrs: RouteAttributes = PLAIN) -> DesiredRoutes:
    return {PeerName(peer): {net(p): attrs for p in prefixes}}


async def test_routes_reach_gobgp_with_next_hop_and_attributes(
    topology: Topology, tmp_path: Path, gobgp_router: Router
) -> None:
    attrs = RouteAttributes(communities=("65000:1",), large_communities=("64512:1:2",), med=30)
    async with running(topology, tmp_path, (router_peer(topology),)) as rt:
        events = rt.driver.subscribe()
        rt.driver.apply(routes("tor", ["10.99.100.1/32", "10.99.100.2/32"], attrs))
        assert await rt.driver.wait_converged(20)
        rib = await in_thread(
            gobgp_router.wait_rib,
            lambda r: net("10.99.100.2/32") in r and net("10.99.100.1/32") in r,
            20,
        )
        (path,) = rib[net("10.99.100.1/32")]
        assert path.next_hop == topology.node_address(1)
        assert path.communities == ("65000:1",)
        assert path.large_communities == ("64512:1:2",)
        assert path.med == 30
        await wait_until_async(
            lambda: rt.driver.peer_status()[PeerName("tor")].state is SessionState.UP,
            what="up",
            within=20,
        )
        # Advertised once ExaBGP reports the UPDATE it wrote (communities, large
        # communities and MED in its JSON): the accepted routes, with their attributes.
        await wait_until_async(
            lambda: rt.driver.peer_status()[PeerName("tor")].advertised == 2,
            what="2 advertised",
            within=20,
        )
        status = rt.driver.peer_status()[PeerName("tor")]
        assert (status.desired, status.accepted, status.pending) == (2, 2, 0)
        assert rt.driver.advertised() == rt.driver.accepted()
        seen = [events.get_nowait() for _ in range(events.qsize())]
        announced = {r.prefix for e in seen if isinstance(e, RouteEvents) for r in e.events()}
        assert announced == {net("10.99.100.1/32"), net("10.99.100.2/32")}
        assert any(isinstance(e, PeerEvent) and e.state is SessionState.UP for e in seen)
        # Declarative: a smaller set withdraws the rest.
        rt.driver.apply(routes("tor", ["10.99.100.2/32"], attrs))
        await in_thread(
            gobgp_router.wait_rib,
            lambda r: net("10.99.100.1/32") not in r and net("10.99.100.2/32") in r,
            20,
        )
        assert rt.driver.stats.commands_sent["withdraw"] == 1
        await wait_until_async(
            lambda: rt.driver.advertised() == routes("tor", ["10.99.100.2/32"], attrs),
            what="the withdrawn route no longer advertised",
            within=20,
        )


def exabgp_children(rt: ExaBGPRuntime) -> list[int]:
    """PIDs of the helper processes ExaBGP spawned (children of the ExaBGP pid)."""
    pid = rt.supervisor.pid
    assert pid is not None
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        out += [int(c) for c in children]
    # runtime.helper_argv(): the helper runs as a script (python -I -S .../helper.py).
    return [c for c in out if b"bgpd/exabgp/helper.py" in Path(f"/proc/{c}/cmdline").read_bytes()]


def openssl_mapped(rt: ExaBGPRuntime) -> set[str]:
    """OpenSSL's libraries the running ExaBGP maps: none, the launcher keeps them out
    (bgpd/exabgp/launch.py)."""
    pid = rt.supervisor.pid
    assert pid is not None
    return mapped_libraries(pid, OPENSSL_LIBRARIES)


async def test_bird_ipv4_and_ipv6_sessions_and_node_selectors(
    topology: Topology, tmp_path: Path, make_router: Callable[..., Router]
) -> None:
    bird = make_router("bird")
    from bgpd.model import LabelSelector, frozen_map

    r1 = (LabelSelector(match_labels=(("rack", "r1"),)),)
    r2 = (LabelSelector(match_labels=(("rack", "r2"),)),)
    peers = (
        router_peer(topology, "v4", 4, node_selectors=r1),
        router_peer(topology, "v6", 6, node_selectors=r1),
        router_peer(topology, "v4-other-rack", 4, node_selectors=r2, peer_port=1790),
    )
    rt = ExaBGPRuntime(
        node=NodeName("node1"), work_dir=tmp_path / "n1", prefix=topology.nodes[0].exec_prefix()
    )
    node = node_of(topology, 1)
    node = Node(name=node.name, labels=frozen_map({"rack": "r1"}), addresses=node.addresses)
    rendering = render(
        Config(peers=peers), node, kernel_choices={}, passwords={}, helper_argv=helper_argv()
    )
    assert [n.name for n in rendering.neighbors] == ["v4", "v6"]
    rt.configure(rendering)
    task = asyncio.create_task(rt.run())
    try:
        rt.driver.apply(
            {
                PeerName("v4"): {net("10.99.100.1/32"): PLAIN},
                PeerName("v6"): {
                    net("fd00:99:100::1/128"): PLAIN,
                    net("fd00:99:100::2/128"): PLAIN,
                },
                PeerName("v4-other-rack"): {net("10.99.100.9/32"): PLAIN},
            }
        )
        rib4 = await in_thread(bird.wait_rib, lambda r: net("10.99.100.1/32") in r, 20)
        assert [p.next_hop for p in rib4[net("10.99.100.1/32")]] == [topology.node_address(1)]
        rib6 = await in_thread(bird.wait_rib, lambda r: len(r) == 2, 20, family=6)
        assert {p.next_hop for paths in rib6.values() for p in paths} == {
            topology.node_address(1, 6)
        }
        assert net("10.99.100.9/32") not in await in_thread(bird.rib, 4)
        assert set(rt.driver.peer_status()) == {PeerName("v4"), PeerName("v6")}
    finally:
        await rt.stop(withdraw=False)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_ibgp_local_pref_and_drain_modes(
    topology: Topology, tmp_path: Path, make_router: Callable[..., Router]
) -> None:
    from bgpd.exabgp.driver import DriverMode

    bird = make_router("gobgp", peer_asn=ROUTER_ASN)
    peer = router_peer(topology, my_asn=ROUTER_ASN)
    attrs = RouteAttributes(communities=("65000:7",), local_pref=250)
    async with running(topology, tmp_path, (peer,)) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32"], attrs))
        rib = await in_thread(bird.wait_rib, lambda r: net("10.99.100.1/32") in r, 20)
        assert rib[net("10.99.100.1/32")][0].local_pref == 250
        rt.driver.set_mode(DriverMode.DRAINING)
        rib = await in_thread(
            bird.wait_rib,
            lambda r: any("65535:0" in p.communities for p in r.get(net("10.99.100.1/32"), [])),
            20,
        )
        (path,) = rib[net("10.99.100.1/32")]
        assert path.communities == ("65000:7", "65535:0")
        assert path.local_pref == 0
        rt.driver.set_mode(DriverMode.WITHDRAWN)
        await in_thread(bird.wait_rib, lambda r: not r, 20)


@pytest.mark.parametrize(
    ("key", "up"),
    [
        pytest.param("s3cret-key", True, id="right-key"),
        pytest.param("wrong-key", False, id="wrong-key"),
    ],
)
async def test_md5(
    topology: Topology,
    tmp_path: Path,
    make_router: Callable[..., Router],
    key: str,
    up: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # everything we and ExaBGP log, relayed
    router = make_router("bird", md5_password="s3cret-key")
    peer = router_peer(topology)
    async with running(topology, tmp_path, (peer,), passwords={peer.name: key}) as rt:
        assert key not in repr(rt.rendering)
        rt.driver.apply(routes("tor", ["10.99.100.1/32"]))
        if up:
            await in_thread(router.wait_rib, lambda r: net("10.99.100.1/32") in r, 20)
            await wait_until_async(
                lambda: rt.driver.peer_status()[peer.name].state is SessionState.UP,
                what="up",
                within=20,
            )
        else:
            # A wrong key keeps the session down silently while commands answer done.
            assert await rt.driver.wait_converged(20)

            def still_down() -> bool:
                return (
                    rt.driver.peer_status()[peer.name].state is not SessionState.UP
                    and not router.rib(4)
                    and all(s != "Established" for s in router.neighbors().values())
                )

            await stays(still_down, 3, "a session with the wrong MD5 key came up")
        # TCP-MD5 is the kernel's (setsockopt): ExaBGP's process needs no OpenSSL for it.
        assert openssl_mapped(rt) == set()
        assert oct(rt.config_path.stat().st_mode & 0o777) == "0o600"
    # The key never reaches a log, in clear or in the base64 form of the config file.
    assert "exabgp.started" in caplog.text
    assert key not in caplog.text
    assert base64.b64encode(key.encode()).decode() not in caplog.text


async def test_ten_thousand_routes(topology: Topology, tmp_path: Path, bird_router: Router) -> None:
    prefixes = [f"10.99.{i // 250}.{i % 250 + 1}/32" for i in range(10_000)]
    async with running(topology, tmp_path, (router_peer(topology),)) as rt:
        rt.driver.apply(routes("tor", prefixes))
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 10_000, 60)
        # The launcher patched ExaBGP: the relay is a thread of it, no helper process.
        assert exabgp_children(rt) == []
        assert openssl_mapped(rt) == set()
        assert rt.driver.stats.commands_sent["announce"] == 100
        rt.driver.apply({})
        await in_thread(bird_router.wait_rib, lambda r: not r, 60)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in (1, 2)])
async def test_changes_path_reaches_the_same_rib_as_whole_sets(
    topology: Topology, tmp_path: Path, bird_router: Router, seed: int
) -> None:
    """apply_changes() (the reconciler's incremental path) plans only the changed, queued
    and refused prefixes. Bursts of changes land while earlier commands are still queued
    (one prefix a command, one in flight), re-announce with other attributes, withdraw
    and bring back: BIRD ends with exactly the last desired set, and the driver says so."""
    import random

    rng = random.Random(seed)
    pool = [net(f"10.99.{i // 250}.{i % 250 + 1}/32") for i in range(400)]
    tagged = RouteAttributes(communities=("65000:9",))
    tor = PeerName("tor")
    want: dict[IPNetwork, RouteAttributes] = dict.fromkeys(pool[:300], PLAIN)
    async with running(topology, tmp_path, (router_peer(topology),), window=1, batch=1) as rt:
        rt.driver.apply({tor: dict(want)})
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 300, 60)
        for _ in range(40):
            changed = set(rng.sample(pool, rng.randint(1, 12)))
            for p in changed:
                roll = rng.random()
                if roll < 0.4:
                    want.pop(p, None)
                else:
                    want[p] = tagged if roll < 0.7 else PLAIN
            rt.driver.apply_changes({tor: want}, {tor: changed})
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            # peer_status() counts only where a difference can be: the same count as
            # comparing everything ExaBGP accepted with everything wanted.
            todo, gone = delta(rt.driver.accepted().get(tor, {}), want)
            assert rt.driver.peer_status()[tor].pending == len(todo) + len(gone)
        assert await rt.driver.wait_converged(60)
        assert rt.driver.accepted() == ({tor: want} if want else {})
        assert rt.driver.peer_status()[tor].pending == 0

        def same(rib: dict[IPNetwork, Any]) -> bool:
            return set(rib) == set(want) and all(
                paths[0].communities == want[p].communities for p, paths in rib.items()
            )

        await in_thread(bird_router.wait_rib, same, 60)


async def test_helper_killed_no_route_lost(
    topology: Topology, tmp_path: Path, bird_router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper process (ExaBGP unmodified: the only setting with one; a patched ExaBGP's
    relay thread ending is tests/unit/test_exabgp_bridge.py) killed: ExaBGP respawns it,
    nothing is restarted and no route is lost."""
    # The supervisor starts ExaBGP with this process's environment (plus its own).
    monkeypatch.setenv(launch.UNMODIFIED_ENV, "1")
    async with running(topology, tmp_path, (router_peer(topology),)) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32"]))
        await in_thread(bird_router.wait_rib, lambda r: net("10.99.100.1/32") in r, 20)
        connections = rt.driver.stats.helper_connections
        (helper,) = exabgp_children(rt)
        os.kill(helper, signal.SIGKILL)
        exabgp_pid = rt.supervisor.pid
        await wait_until_async(
            lambda: rt.driver.stats.helper_connections > connections,
            what="helper reconnect",
            within=20,
        )
        # The route stays at the peer and new routes still flow through the new helper.
        rt.driver.apply(routes("tor", ["10.99.100.1/32", "10.99.100.2/32"]))
        rib = await in_thread(bird_router.wait_rib, lambda r: net("10.99.100.2/32") in r, 20)
        assert net("10.99.100.1/32") in rib
        assert rt.supervisor.pid == exabgp_pid
        assert rt.supervisor.restarts == 0


async def watch_rib(router: Router, stop: asyncio.Event, sizes: list[int], family: int = 4) -> None:
    """Appends the size of the router's RIB to ``sizes`` until stop is set (to prove
    nothing was lost)."""
    while not stop.is_set():
        sizes.append(len(await in_thread(router.rib, family)))
        await asyncio.sleep(0.01)


def wait_no_restarting(router: Router, within: float = 30.0) -> None:
    """Blocks until the router holds no peer's routes for graceful restart any more."""
    wait_until(
        lambda: not router.restarting_peers(),
        within=within,
        poll=0.05,
        what=f"{router.kind}: graceful restart to end",
    )


@pytest.mark.parametrize(
    "graceful", [pytest.param(False, id="no-gr"), pytest.param(True, id="graceful-restart")]
)
async def test_exabgp_killed_routes_back(
    topology: Topology, tmp_path: Path, make_router: Callable[..., Router], graceful: bool
) -> None:
    router = make_router("bird", graceful_restart=graceful)
    peer = router_peer(topology, enable_graceful_restart=graceful)
    prefixes = [f"10.99.100.{i}/32" for i in range(1, 51)]
    async with running(topology, tmp_path, (peer,)) as rt:
        rt.driver.apply(routes("tor", prefixes))
        await in_thread(router.wait_rib, lambda r: len(r) == 50, 20)
        if graceful:
            await wait_until_async(
                lambda: rt.driver.stats.commands_sent["eor"] >= 1, what="first EOR", within=20
            )
        stop = asyncio.Event()
        sizes: list[int] = []
        watcher = asyncio.create_task(watch_rib(router, stop, sizes))
        await wait_until_async(
            lambda: len(sizes) >= 2, what="the watcher's first samples", within=20
        )
        old = rt.supervisor.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        await wait_until_async(
            lambda: rt.supervisor.pid not in (None, old), what="restart", within=20
        )
        await wait_until_async(
            lambda: rt.driver.peer_status()[peer.name].state is SessionState.UP,
            within=30,
            what="session up",
        )
        await in_thread(router.wait_rib, lambda r: len(r) == 50, 30)
        if graceful:
            await wait_until_async(
                lambda: rt.driver.stats.commands_sent["eor"] >= 2,
                what="EOR after replay",
                within=20,
            )
            # BIRD took the End-of-RIB: the restart is over and its stale routes (none
            # here) flushed; the watcher saw every moment up to then.
            await in_thread(wait_no_restarting, router)
        stop.set()
        await watcher
        assert rt.supervisor.restarts == 1
        if graceful:
            assert min(sizes) == 50, sizes
        else:
            assert min(sizes) == 0, "without graceful restart the router drops the routes"
        # (the watcher's last sample may predate the replay: ask once more)
        assert len(await in_thread(router.rib, 4)) == 50


async def test_peer_restarted_routes_back(
    topology: Topology, tmp_path: Path, gobgp_router: Router
) -> None:
    async with running(topology, tmp_path, (router_peer(topology),)) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32", "10.99.100.2/32"]))
        await in_thread(gobgp_router.wait_rib, lambda r: len(r) == 2, 20)
        sent = sum(rt.driver.stats.commands_sent.values())
        await in_thread(gobgp_router.restart)
        await in_thread(gobgp_router.wait_rib, lambda r: len(r) == 2, 30)
        assert sum(rt.driver.stats.commands_sent.values()) == sent, "ExaBGP re-sent by itself"


async def test_graceful_stop_routes_gone_before_exit(
    topology: Topology, tmp_path: Path, bird_router: Router
) -> None:
    prefixes = [f"10.99.100.{i}/32" for i in range(1, 201)]
    async with running(
        topology, tmp_path, (router_peer(topology, enable_graceful_restart=True),)
    ) as rt:
        rt.driver.apply(routes("tor", prefixes))
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 200, 20)
        pid = rt.supervisor.pid
        assert await rt.stop(withdraw=True, within=10)
        assert rt.supervisor.pid is None
        assert pid is not None
        assert not process_alive(pid)
        # Right after the stop returned: the peer has nothing, not even stale routes.
        assert await in_thread(bird_router.rib, 4) == {}


async def test_ack_timeout_restarts_and_replays(
    topology: Topology, tmp_path: Path, gobgp_router: Router
) -> None:
    async with running(topology, tmp_path, (router_peer(topology),), ack_timeout=1.0) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32"]))
        await in_thread(gobgp_router.wait_rib, lambda r: len(r) == 1, 20)
        old = rt.supervisor.pid
        assert old is not None
        os.kill(old, signal.SIGSTOP)  # hung: no ack will come
        rt.driver.apply(routes("tor", ["10.99.100.1/32", "10.99.100.2/32"]))
        await wait_until_async(
            lambda: rt.driver.stats.ack_timeouts == 1, within=10, what="ack timeout"
        )
        await wait_until_async(
            lambda: rt.supervisor.pid not in (None, old), within=10, what="restart"
        )
        await in_thread(gobgp_router.wait_rib, lambda r: len(r) == 2, 30)


async def test_error_ack_is_surfaced_and_the_rest_flows(
    topology: Topology, tmp_path: Path, gobgp_router: Router
) -> None:
    """A community ExaBGP refuses (70000 is not 16-bit) gets an `error` ack: counted with
    its command, the route not accepted, and acks stay matched: the routes around it
    arrive. An IPv6 prefix handed to the IPv4 session is never sent (it would reset the
    session) and is counted."""
    bad = RouteAttributes(communities=("70000:1",))
    async with running(topology, tmp_path, (router_peer(topology),)) as rt:
        desired = {
            PeerName("tor"): {
                net("10.99.100.1/32"): PLAIN,
                net("10.99.100.9/32"): bad,
                net("fd00:99:100::1/128"): PLAIN,
                net("10.99.100.2/32"): PLAIN,
            }
        }
        rt.driver.apply(desired)
        await in_thread(gobgp_router.wait_rib, lambda r: len(r) == 2, 20)
        await wait_until_async(
            lambda: rt.driver.stats.command_errors == 1, what="error ack", within=20
        )
        assert "70000:1" in rt.driver.stats.last_error
        assert rt.driver.stats.wrong_family == 1
        acked = rt.driver.accepted()[PeerName("tor")]
        assert set(acked) == {net("10.99.100.1/32"), net("10.99.100.2/32")}
        assert rt.driver.peer_status()[PeerName("tor")].pending == 1
        # Later commands still match their acks, and the session never dropped.
        rt.driver.apply(routes("tor", ["10.99.100.3/32"]))
        await in_thread(gobgp_router.wait_rib, lambda r: set(r) == {net("10.99.100.3/32")}, 20)
        assert rt.driver.peer_status()[PeerName("tor")].state is SessionState.UP


async def test_frr_kernel_fib_next_hops(
    topology: Topology, tmp_path: Path, frr_router: Router
) -> None:
    """Two nodes announce the same /32: FRR installs one kernel route with both next hops
    (ECMP), and a withdrawal from one node leaves the other."""
    prefix = "10.99.100.1/32"
    async with (
        running(topology, tmp_path, (router_peer(topology),), node=1) as rt1,
        running(topology, tmp_path, (router_peer(topology),), node=2) as rt2,
    ):
        rt1.driver.apply(routes("tor", [prefix]))
        rt2.driver.apply(routes("tor", [prefix]))
        both = {topology.node_address(1), topology.node_address(2)}
        await in_thread(frr_router.wait_fib, prefix, both, 30)
        rt1.driver.apply({})
        await in_thread(frr_router.wait_fib, prefix, {topology.node_address(2)}, 30)


def stall_this_process(seconds: float) -> None:
    """SIGSTOP this very process (the speaker's event loop, the driver with it) for
    ``seconds``: a child sends the SIGCONT. ExaBGP, a process of its own, runs on."""
    waker = subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -CONT {os.getpid()}"])
    os.kill(os.getpid(), signal.SIGSTOP)
    waker.wait(timeout=30)


async def test_speaker_stall_with_commands_in_flight_keeps_exabgp(
    topology: Topology, tmp_path: Path, bird_router: Router
) -> None:
    """Issue 15 item 8: the speaker stops (SIGSTOP) for longer than the ack timeout with
    commands in flight; ExaBGP answers them meanwhile. After SIGCONT the driver reads
    those answers before it judges: the same ExaBGP keeps running, no session flaps at
    the router, every route arrives. Stalls past the stall gap (credited) and between
    the ack timeout and the gap (judged at the next tick) alternate over five cycles."""
    async with running(topology, tmp_path, (router_peer(topology),), ack_timeout=1.0) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32"]))
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 1, 20)
        pid = rt.supervisor.pid
        sessions = await in_thread(bird_router.sessions_since)
        assert len(sessions) == 1
        core = rt.driver.core
        send = core.next_commands
        stalls: list[float] = []
        desired: DesiredRoutes = {}
        in_flight_at_stall: list[int] = []

        def stall_after_sending() -> None:
            in_flight_at_stall.append(core.in_flight)
            stall_this_process(stalls.pop())
            # Right after SIGCONT the reconciler applies again (events arrived in the
            # stall), so the sender runs before the reader has read ExaBGP's answers:
            # the order that killed a healthy ExaBGP.
            rt.driver.apply(desired)

        def sending(now: float) -> list[Command]:
            # The sender writes what this returns right after; the stall comes in the
            # loop's next turn, with those commands in flight.
            commands = send(now)
            if commands and stalls:
                asyncio.get_running_loop().call_soon(stall_after_sending)
            return commands

        core.next_commands = sending  # type: ignore[method-assign]
        for cycle, stall in enumerate([3.0, 1.6, 3.0, 1.6, 3.0], start=2):
            prefixes = [f"10.99.100.{i}/32" for i in range(1, cycle * 20)]
            stalls.append(stall)
            desired = routes("tor", prefixes)
            rt.driver.apply(desired)
            count = len(prefixes)
            await in_thread(bird_router.wait_rib, lambda r, n=count: len(r) == n, 20)
            assert await rt.driver.wait_converged(10)
            assert not stalls
            assert rt.driver.stats.ack_timeouts == 0
            assert rt.supervisor.pid == pid
            assert await in_thread(bird_router.sessions_since) == sessions
        assert all(in_flight_at_stall), in_flight_at_stall


async def test_hung_idle_exabgp_is_restarted_within_the_probe_bound(
    topology: Topology, tmp_path: Path, bird_router: Router
) -> None:
    """Issue 15 item 14: an ExaBGP with nothing to do hangs (SIGSTOP). The idle probe goes
    unanswered; within probe interval + ack timeout (+ two sender ticks) the supervisor
    restarts it and the routes are replayed."""
    async with running(topology, tmp_path, (router_peer(topology),), ack_timeout=1.0) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32"]))
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 1, 20)
        assert await rt.driver.wait_converged(10)
        old = rt.supervisor.pid
        assert old is not None
        probes = rt.driver.stats.commands_sent["probe"]
        os.kill(old, signal.SIGSTOP)
        stopped = time.monotonic()
        await wait_until_async(
            lambda: rt.supervisor.pid not in (None, old), within=30, what="restart"
        )
        took = time.monotonic() - stopped
        assert took <= PROBE_INTERVAL + 1.0 + 2.0, took
        assert rt.driver.stats.ack_timeouts == 1
        assert rt.driver.stats.commands_sent["probe"] > probes
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 1, 30)
        assert rt.driver.answering


async def test_held_peer_then_teardown_for_bfd(
    topology: Topology, tmp_path: Path, bird_router: Router
) -> None:
    """BGP follows BFD at the driver (bgpd.bfd.gate decides): a held peer's routes leave
    the router while its session stays up, and come back when released; a teardown
    (ExaBGP 5.0.15 ``teardown 10``) closes the session at once, ExaBGP reconnects and
    sends the routes again by itself."""
    tor = PeerName("tor")
    async with running(topology, tmp_path, (router_peer(topology),)) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32", "10.99.100.2/32"]))
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 2, 20)
        since = await in_thread(bird_router.sessions_since)
        rt.driver.set_held({tor})
        await in_thread(bird_router.wait_rib, lambda r: not r, 20)
        assert await in_thread(bird_router.sessions_since) == since, "the session was reset"
        rt.driver.set_held(set())
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 2, 20)
        sent = sum(rt.driver.stats.commands_sent.values())
        rt.driver.teardown(tor, CEASE_BFD_DOWN)
        await wait_until_async(
            lambda: rt.driver.stats.commands_sent["teardown"] == 1, what="teardown sent"
        )
        await in_thread(
            wait_until,
            lambda: bird_router.sessions_since() not in ({}, since),
            within=30,
            what="a new session at BIRD",
        )
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 2, 30)
        # ExaBGP re-sent its adj-rib-out by itself: only the teardown was written.
        assert sum(rt.driver.stats.commands_sent.values()) - sent <= 2  # teardown (+ probe)


class _RecordingBfd:
    """A BFD runtime stand-in for the goodbye: what the router held, and whether ExaBGP
    still ran, at the moment BFD was told AdminDown."""

    def __init__(self, router: Router, rt: ExaBGPRuntime) -> None:
        self.router, self.rt = router, rt
        self.calls: list[str] = []
        self.rib_at_admin_down: dict[IPNetwork, Any] | None = None
        self.exabgp_at_admin_down: int | None = -1

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def admin_down(self) -> None:
        self.calls.append("admin_down")
        self.exabgp_at_admin_down = self.rt.supervisor.pid
        self.rib_at_admin_down = dict(await in_thread(self.router.rib, 4))

    async def stop(self) -> None:
        self.calls.append("stop")

    @property
    def pid(self) -> int | None:
        return None


@pytest.mark.parametrize("retain", [False, True], ids=["withdraw", "retain"])
async def test_goodbye_bgp_first_then_bfd(
    topology: Topology, tmp_path: Path, bird_router: Router, retain: bool
) -> None:
    """The stop's order (bgpd.speaker.bfd_follow.say_goodbye) against BIRD: when BFD is
    told AdminDown, ExaBGP has exited and the router has either nothing (withdraw) or the
    routes kept as stale for graceful restart (retain)."""
    async with running(
        topology, tmp_path, (router_peer(topology, enable_graceful_restart=True),)
    ) as rt:
        rt.driver.apply(routes("tor", ["10.99.100.1/32", "10.99.100.2/32"]))
        await in_thread(bird_router.wait_rib, lambda r: len(r) == 2, 20)
        bfd = _RecordingBfd(bird_router, rt)

        async def withdraw(keep: bool) -> bool:
            return await rt.driver.withdraw_all(10.0, retain_graceful=keep)

        ok = await say_goodbye(
            retain=retain,
            withdraw=withdraw,
            stop_exabgp=partial(rt.stop, withdraw=False),
            bfd=bfd,
        )
        assert ok
        assert bfd.calls == ["admin_down", "stop"]
        assert bfd.exabgp_at_admin_down is None
        assert bfd.rib_at_admin_down is not None
        if retain:
            assert set(bfd.rib_at_admin_down) == {net("10.99.100.1/32"), net("10.99.100.2/32")}
        else:
            assert bfd.rib_at_admin_down == {}
