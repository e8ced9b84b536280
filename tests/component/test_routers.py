"""The lab harness against real processes: namespaces, FRR, BIRD, GoBGP and bare ExaBGP.

These tests prove the harness that every other component and e2e test leans on: that a
topology leaves nothing behind, that each router really learns a bare ExaBGP's route with
the right next hop and attributes, and that FRR and BIRD put ECMP routes in the kernel.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kbgpd_lab.lab.lab import HeldConnection
from kbgpd_lab.lab.netns import (
    Netns,
    NetnsError,
    create_netns,
    delete_netns,
    netns_exists,
    process_alive,
)
from kbgpd_lab.lab.routers import (
    BirdRouter,
    FRRRouter,
    GoBGPRouter,
    RibPath,
    Router,
    RouterBfd,
    RouterError,
    make_router,
)
from kbgpd_lab.lab.topology import Topology, cleanup_leftovers

pytestmark = [pytest.mark.component, pytest.mark.root]

ROUTE = "10.99.100.1/32"
ROUTE6 = "fd00:99:100::1/128"
KERNEL_ROUTERS = [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")]
ALL_ROUTERS = [*KERNEL_ROUTERS, pytest.param("gobgp", id="gobgp")]


def _netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def _assert_all_gone(names: list[str], pids: list[int]) -> None:
    assert not set(names) & _netns_list()
    # /proc/PID/status, not kill -0: a process orphaned in a netns lingers as a zombie.
    assert [p for p in pids if process_alive(p)] == []


# --------------------------------------------------------------------------- topology


def test_destroy_leaves_no_namespace_and_no_process(tmp_path: Path) -> None:
    topo = Topology.create(nodes=3, state_dir=tmp_path)
    names = topo.namespaces()
    assert set(names) <= _netns_list()
    assert len(names) == 5
    # A tracked daemon and an untracked grandchild that outlives its parent shell.
    sleeper = topo.nodes[0].popen(["sleep", "300"])
    shell = topo.router.popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE)
    assert shell.stdout is not None
    grandchild = int(shell.stdout.readline())
    state = json.loads(topo.state_file.read_text())
    assert {p["pid"] for p in state["pids"]} == {sleeper.pid, shell.pid}
    assert state["namespaces"] == names

    topo.destroy()
    _assert_all_gone(names, [sleeper.pid, shell.pid, grandchild])
    assert not topo.state_file.exists()
    topo.destroy()  # idempotent
    _assert_all_gone(names, [])


def test_addresses_and_forwarding_client_to_node(topology: Topology) -> None:
    """A TCP connection from the client reaches node2 through the router, v4 and v6."""
    assert str(topology.node_address(1)) == "172.31.250.11"
    assert str(topology.node_address(3, 6)) == "fd00:99:250::13"
    assert str(topology.router_address(6)) == "fd00:99:250::1"
    server = textwrap.dedent(
        """
        import socket, sys
        socks = []
        for fam, addr in ((socket.AF_INET, sys.argv[1]), (socket.AF_INET6, sys.argv[2])):
            s = socket.socket(fam); s.bind((addr, 8080)); s.listen(); socks.append(s)
        print("ready", flush=True)
        for s in socks:
            c, _ = s.accept(); c.sendall(b"node2"); c.close()
        """
    )
    proc = topology.nodes[1].popen(
        [
            sys.executable,
            "-c",
            server,
            str(topology.node_address(2)),
            str(topology.node_address(2, 6)),
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    client = (
        "import socket,sys; print(socket.create_connection((sys.argv[1], 8080)).recv(9).decode())"
    )
    assert topology.client is not None
    for fam in (4, 6):
        out = topology.client.run(
            [sys.executable, "-c", client, str(topology.node_address(2, fam))]
        )
        assert out.stdout.strip() == "node2"
    assert proc.wait(timeout=10) == 0


def test_failed_creation_removes_only_what_it_created(tmp_path: Path) -> None:
    """A name clash midway: our namespaces go, the one that existed before stays."""
    prefix = f"kx{time.monotonic_ns() % 10**8}"
    foreign = f"{prefix}-node2"
    create_netns(foreign)
    try:
        with pytest.raises(NetnsError, match="already exists"):
            Topology.create(prefix=prefix, nodes=3, state_dir=tmp_path)
        assert netns_exists(foreign)
        assert not netns_exists(f"{prefix}-router")
        assert not netns_exists(f"{prefix}-node1")
    finally:
        delete_netns(foreign)


def test_cleanup_leftovers_of_a_crashed_run(tmp_path: Path) -> None:
    """A run that dies without destroy() leaves state; cleanup_leftovers removes it."""
    crashed = textwrap.dedent(
        """
        import os, sys
        from kbgpd_lab.lab.topology import Topology
        topo = Topology.create(nodes=2, state_dir=sys.argv[1])
        topo.nodes[0].popen(["sleep", "300"], stdout=-3, stderr=-3, start_new_session=True)
        print(topo.prefix, flush=True)
        os._exit(1)  # crash: no destroy
        """
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", crashed, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        prefix = out.stdout.strip()
        state = json.loads((tmp_path / f"{prefix}.json").read_text())
        names, pids = state["namespaces"], [p["pid"] for p in state["pids"]]
        assert set(names) <= _netns_list()
        assert all(process_alive(p) for p in pids)

        removed = cleanup_leftovers(tmp_path)
        assert sorted(removed) == sorted(names)
        _assert_all_gone(names, pids)
        assert list(tmp_path.glob("*.json")) == []
    finally:
        cleanup_leftovers(tmp_path)  # even if an assertion above failed


@pytest.mark.parametrize(
    ("ecmp", "open_connection_sees"),
    [
        # The router keeps the open connection on its node after the route moves.
        pytest.param("pinned", "same node", id="pinned"),
        # The FIB alone: its next segment goes to the other node, which resets it.
        pytest.param("stateless", "ConnectionResetError", id="stateless"),
    ],
)
def test_router_ecmp_pinning_keeps_open_connections_on_their_node(
    ecmp: str, open_connection_sees: str, tmp_path: Path
) -> None:
    """A service IP on node1 and node2, routed by the router's main table like the BGP
    routes are. A keep-alive connection is opened; then the route is moved to the other
    node alone. New connections always follow the route; the open one stays on its node
    only when the router pins (the lab's default, topology.pin_ruleset)."""
    ip = "10.99.100.7"
    with Topology.create(nodes=2, state_dir=tmp_path, ecmp=ecmp) as topo:
        ruleset = topo.router.run(["nft", "list", "ruleset"]).stdout
        assert ("kube_bgpd_lab_pin" in ruleset) == (ecmp == "pinned"), ruleset
        for i, node in enumerate(topo.nodes, start=1):
            node.ip("addr", "add", f"{ip}/32", "dev", "lo")
            server = node.popen(
                [
                    sys.executable,
                    "-m",
                    "kbgpd_lab.lab.httpserver",
                    "--name",
                    f"node{i}",
                    "--port",
                    "8080",
                    "--address",
                    ip,
                ],
                stdout=subprocess.PIPE,
            )
            assert server.stdout is not None
            assert server.stdout.readline() == b"ready\n"
        hops = [str(topo.node_address(i)) for i in (1, 2)]
        topo.router.ip("route", "add", ip, *(w for h in hops for w in ("nexthop", "via", h)))
        assert topo.client is not None
        with contextlib.closing(HeldConnection(topo.client, ip, port=8080)) as held:
            first = held.node
            assert first in ("node1", "node2")
            other = "node2" if first == "node1" else "node1"
            # The route now leads to the other node only (as a withdrawal would leave it).
            topo.router.ip("route", "replace", ip, "via", hops[int(other[-1]) - 1])
            again = held.ask("again")
            fresh = held.ask("new")
        assert again == (first if open_connection_sees == "same node" else open_connection_sees)
        assert fresh == other  # a new connection follows the route


def test_cleanup_leftovers_leaves_a_live_run_alone(topology: Topology) -> None:
    assert cleanup_leftovers(topology.state_dir) == []
    assert set(topology.namespaces()) <= _netns_list()


# --------------------------------------------------------------------------- routers


@pytest.mark.parametrize("kind", ALL_ROUTERS)
def test_route_from_exabgp_reaches_rib_with_attributes(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    topology: Topology,
) -> None:
    router = make_router(kind)
    start_exabgp(1, attributes="community [1:2 65535:0] large-community [1:2:3] med 7")
    sessions = router.wait_established(1)
    assert sessions[topology.node_address(1)] == "Established"
    [path] = router.wait_route(ROUTE)
    assert router.changes_received()[topology.node_address(1)] >= 1
    assert path == RibPath(
        next_hop=topology.node_address(1),
        communities=("1:2", "65535:0"),
        large_communities=("1:2:3",),
        local_pref=path.local_pref,  # eBGP: not sent; routers show their own default
        med=7,
        as_path=(64513,),
    )
    if router.programs_kernel:
        assert router.wait_fib(ROUTE, {topology.node_address(1)}) == {topology.node_address(1)}


@pytest.mark.parametrize("kind", ALL_ROUTERS)
def test_ibgp_carries_local_pref(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    topology: Topology,
) -> None:
    router = make_router(kind, peer_asn=64512)
    start_exabgp(2, local_as=64512, attributes="local-preference 250")
    [path] = router.wait_route(ROUTE)
    assert (path.next_hop, path.local_pref, path.as_path) == (topology.node_address(2), 250, ())


@pytest.mark.parametrize("kind", KERNEL_ROUTERS)
def test_ecmp_two_nodes_two_fib_nexthops_then_withdraw(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    topology: Topology,
) -> None:
    router = make_router(kind)
    first = start_exabgp(1)
    start_exabgp(2)
    both = {topology.node_address(1), topology.node_address(2)}
    router.wait_fib(ROUTE, both)
    routes = json.loads(topology.router.ip("-j", "route", "show", "exact", ROUTE).stdout)
    assert len(routes) == 1  # one route ...
    assert len(routes[0]["nexthops"]) == 2  # ... with two nexthops
    changes = router.changes_received()
    assert changes[topology.node_address(1)] >= 1
    assert changes[topology.node_address(2)] >= 1
    first.proc.kill()  # the kernel closes the socket: the router drops the session at once
    router.wait_fib(ROUTE, {topology.node_address(2)}, timeout=5)


@pytest.mark.parametrize("kind", ALL_ROUTERS)
def test_ipv6_route_over_ipv6_session(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    topology: Topology,
) -> None:
    router = make_router(kind)
    start_exabgp(3, routes=(ROUTE6,), family=6)
    [path] = router.wait_route(ROUTE6)
    assert path.next_hop == topology.node_address(3, 6)
    if router.programs_kernel:
        router.wait_fib(ROUTE6, {topology.node_address(3, 6)})


@pytest.mark.parametrize("kind", ALL_ROUTERS)
def test_static_neighbor_and_md5(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    topology: Topology,
) -> None:
    """Static neighbours instead of the LAN range, with an MD5 password on both sides."""
    node = topology.node_address(2)
    router = make_router(kind, neighbor_ranges=(), static_neighbors=(node,), md5_password="s3cret")
    start_exabgp(2, md5_password="s3cret")
    [path] = router.wait_route(ROUTE)
    assert path.next_hop == node
    assert router.neighbors()[node] == "Established"


def test_router_restart_relearns(
    bird_router: Router, start_exabgp: Callable[..., Any], topology: Topology
) -> None:
    start_exabgp(1)
    bird_router.wait_fib(ROUTE, {topology.node_address(1)})
    bird_router.stop()
    assert bird_router.fib(ROUTE) == set()  # BIRD removes its kernel routes on shutdown
    bird_router.start()
    # ExaBGP reconnects on its own back-off (0 s, 1 s, 2 s, ...).
    bird_router.wait_fib(ROUTE, {topology.node_address(1)}, timeout=20)
    bird_router.restart()
    bird_router.wait_fib(ROUTE, {topology.node_address(1)}, timeout=20)


def test_fib_of_absent_prefix_is_empty(frr_router: Router) -> None:
    assert frr_router.fib(ipaddress.ip_network("10.99.100.99/32")) == set()


@pytest.mark.parametrize("kind", KERNEL_ROUTERS)
def test_graceful_restart_keeps_stale_route_after_exabgp_crash(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    topology: Topology,
) -> None:
    """With GR negotiated, a SIGKILLed ExaBGP's route stays in the FIB until it is back."""
    router = make_router(kind, graceful_restart=True, restart_time=60)
    gr = "  capability { graceful-restart 60; }\n"
    node1 = {topology.node_address(1)}
    exa = start_exabgp(1, extra=gr)
    router.wait_fib(ROUTE, node1)
    exa.proc.kill()
    node = topology.node_address(1)
    router.wait_neighbors(lambda n: n.get(node) != "Established", timeout=5)
    deadline = time.monotonic() + 1.0  # without GR the route is gone within ~100 ms
    while time.monotonic() < deadline:
        assert router.fib(ROUTE) == node1
        time.sleep(0.05)
    if kind == "frr":
        assert [p.stale for p in router.rib()[ipaddress.ip_network(ROUTE)]] == [True]
    start_exabgp(1, extra=gr)
    router.wait_established(1, timeout=20)
    router.wait_fib(ROUTE, node1)


CONFIG_CASES = [
    pytest.param({}, id="defaults"),
    pytest.param({"peer_asn": None}, id="any-external-asn"),
    pytest.param({"peer_asn": 64512}, id="ibgp"),
    pytest.param({"md5_password": "pw", "graceful_restart": True, "restart_time": 30}, id="md5-gr"),
    pytest.param({"ebgp_multihop": 3, "hold_time": 30, "keepalive_time": 10}, id="multihop"),
    pytest.param({"ttl_security": True}, id="gtsm"),
    pytest.param({"graceful_shutdown_policy": True}, id="rfc8326-policy"),
    pytest.param({"bfd": True}, id="bfd"),
    pytest.param(
        {
            "bfd": RouterBfd(100, 200, 5, graceful=True, check_control_plane=True),
            "error_wait_time": (1, 2),
            "connect_retry": 1,
        },
        id="bfd-graceful",
    ),
    pytest.param(
        {"neighbor_ranges": (), "static_neighbors": ("172.31.250.11", "fd00:99:250::11")},
        id="static-only",
    ),
]


@pytest.mark.parametrize("opts", CONFIG_CASES)
@pytest.mark.parametrize("kind", ALL_ROUTERS)
def test_rendered_config_passes_the_daemons_own_check(
    kind: str, opts: dict[str, Any], tmp_path: Path
) -> None:
    """Every option combination renders a config the daemon itself accepts (dry run)."""
    if opts.get("bfd") and kind == "gobgp":
        with pytest.raises(ValueError, match="bfd"):
            make_router(kind, Netns("unused"), tmp_path, **opts)
        return
    if kind == "gobgp" and opts.get("peer_asn", 0) is None:
        with pytest.raises(RouterError, match="fixed peer_asn"):
            make_router(kind, Netns("unused"), tmp_path, **opts).start()
        return
    if kind == "gobgp" and opts.get("ttl_security"):
        opts = {}  # GTSM is not offered for GoBGP here
    router = make_router(kind, Netns("unused"), tmp_path, **opts)
    try:
        router.workdir.mkdir(parents=True, exist_ok=True)
        router.write_config()
        if isinstance(router, FRRRouter):
            argv = ["/usr/lib/frr/bgpd", "-C", "-f", str(router.rundir / "bgpd.conf")]
            if router.config.bfd is not None:
                bfdd = ["/usr/lib/frr/bfdd", "-C", "-f", str(router.rundir / "bfdd.conf")]
                out = subprocess.run(bfdd, capture_output=True, text=True, timeout=30, check=False)
                assert out.returncode == 0, out.stdout + out.stderr
                assert "[EC " not in out.stdout + out.stderr
        elif isinstance(router, BirdRouter):
            argv = ["bird", "-p", "-c", str(tmp_path / "bird.conf")]
        else:
            assert isinstance(router, GoBGPRouter)
            argv = ["gobgpd", "-d", "-f", str(tmp_path / "gobgpd.toml")]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        # bgpd -C exits 0 even on an unknown command; its errors carry an [EC ...] code.
        assert out.returncode == 0, out.stdout + out.stderr
        assert "[EC " not in out.stdout + out.stderr
    finally:
        router.close()
