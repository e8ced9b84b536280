"""The lab routers' BFD and the blackhole tool, without the speaker: real FRR 8.4 and
BIRD 2 routers with BFD (RouterConfig.bfd), bare ExaBGPs announcing one route from node1
and node2, and a plain FRR bfdd on each node (kbgpd_lab.lab.nodebfd).

* a blackholed node (every packet dropped in its namespace, its link up) leaves the
  router's FIB within the BFD detect time plus a margin, its BGP session torn down by
  BFD while the other node's session and BFD stay Up; undone, it comes back;
* BIRD's ``bfd graceful`` (measured here): with graceful restart negotiated, BFD down
  starts a graceful restart instead of a teardown, so the dead node's route stays in the
  FIB as stale: it defeats BFD's fast failover for a node that really died.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bgpd.model import IPAddress
from kbgpd_lab.lab.blackhole import BFD6, blackhole, blackholed, is_blackholed, restore, ruleset
from kbgpd_lab.lab.nodebfd import NodeBfdd
from kbgpd_lab.lab.routers import Router, RouterBfd
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(120)]

ROUTE = "10.99.100.1/32"
KERNEL_ROUTERS = [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")]
#: 100 ms x 3: detect time 300 ms; the bound only catches a hold-timer failover (9 s).
FAST = RouterBfd(receive_interval=100, transmit_interval=100, detect_multiplier=3)
BOUND = 3.0


@pytest.fixture
def node_bfdd(topology: Topology) -> Iterator[Callable[..., NodeBfdd]]:
    started: list[NodeBfdd] = []

    def factory(node: int) -> NodeBfdd:
        bfdd = NodeBfdd.for_node(topology, node, FAST)
        started.append(bfdd)
        bfdd.start()
        return bfdd

    try:
        yield factory
    finally:
        for bfdd in started:
            bfdd.close()


def graceful_restart_node(
    router: Router,
    start_exabgp: Callable[..., Any],
    node_bfdd: Callable[..., NodeBfdd],
    topology: Topology,
) -> IPAddress:
    """node1 announcing ROUTE with graceful restart (60 s) and BFD Up at ``router``."""
    n1 = topology.node_address(1)
    start_exabgp(1, extra="  capability { graceful-restart 60; }\n")
    node_bfdd(1)
    router.wait_fib(ROUTE, {n1}, timeout=30)
    router.wait_bfd(lambda s: s.get(n1) == "up", timeout=10)
    return n1


def test_the_ruleset_drops_both_ways_on_every_link() -> None:
    text = ruleset(["eth0", "eth1"])
    for link in ("eth0", "eth1"):
        for hook in ("ingress", "egress"):
            assert f'type filter hook {hook} device "{link}" priority -500; policy drop;' in text
    only_bfd6 = ruleset(["eth0"], BFD6)
    assert "policy accept;" in only_bfd6
    assert only_bfd6.count("meta protocol ip6 udp dport 3784 drop") == 2


@pytest.mark.parametrize("kind", KERNEL_ROUTERS)
def test_a_blackholed_node_leaves_the_fib_within_the_bfd_detect_time(
    kind: str,
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    node_bfdd: Callable[..., NodeBfdd],
    topology: Topology,
) -> None:
    # BIRD waits 60 s by default before a session that went down with an error may
    # come back: the lab shortens it.
    router = make_router(kind, bfd=FAST, error_wait_time=(1, 2))
    n1, n2 = topology.node_address(1), topology.node_address(2)
    for i in (1, 2):
        start_exabgp(i)
        node_bfdd(i)
    router.wait_fib(ROUTE, {n1, n2}, timeout=30)
    router.wait_bfd(lambda s: s.get(n1) == s.get(n2) == "up", timeout=10)

    node1 = topology.nodes[0]
    with blackholed(node1):
        assert is_blackholed(node1)
        start = time.monotonic()
        router.wait_fib(ROUTE, {n2}, timeout=BOUND)
        took = time.monotonic() - start
        print(f"{kind}: node1 out of the FIB {took * 1000:.0f} ms after the blackhole")
        assert router.neighbors()[n2] == "Established"
        assert router.neighbors().get(n1) != "Established"
        sessions = router.bfd_sessions()
        # Down, or gone: FRR deletes a dynamic neighbour, and its BFD session, with its
        # BGP session (the lab's static neighbours keep theirs, Down).
        assert sessions.get(n1, "gone") in ("down", "gone")
        assert sessions[n2] == "up"
        blackhole(node1)  # idempotent
    assert not is_blackholed(node1)
    restore(node1)  # a namespace not blackholed is left alone
    router.wait_fib(ROUTE, {n1, n2}, timeout=30)
    router.wait_bfd(lambda s: s.get(n1) == "up", timeout=10)


def test_bird_bfd_graceful_keeps_a_dead_node_as_stale(
    make_router: Callable[..., Router],
    start_exabgp: Callable[..., Any],
    node_bfdd: Callable[..., NodeBfdd],
    topology: Topology,
) -> None:
    graceful = RouterBfd(100, 100, 3, graceful=True)
    router = make_router("bird", bfd=graceful, graceful_restart=True, restart_time=60)
    n1 = graceful_restart_node(router, start_exabgp, node_bfdd, topology)
    with blackholed(topology.nodes[0]):
        router.wait_bfd(lambda s: s.get(n1) == "down", timeout=BOUND)
        router.wait_neighbors(lambda n: n.get(n1) != "Established", timeout=BOUND)
        assert n1 in router.restarting_peers()
        # bfd on would have removed it by now (the other test); graceful keeps it.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert router.fib(ROUTE) == {n1}
            time.sleep(0.05)
