"""The lab's keep-alive HTTP server and traffic client, over static ECMP routes.

No BGP here: the router gets a static multipath route, so these tests pin down the
traffic tools themselves (spread counted per node, keep-alive, failures counted) before
the e2e tests use them to judge the speakers.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kbgpd_lab.lab.client import Result
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

SERVICE4 = "10.99.100.1"
SERVICE6 = "fd00:99:100::1"


@pytest.fixture
def servers(topology: Topology) -> list[subprocess.Popen[bytes]]:
    """An HTTP server per node answering with its name, the service IPs on every lo, and
    a static ECMP route for them on the router."""
    procs = []
    for i, node in enumerate(topology.nodes, start=1):
        node.ip("addr", "add", f"{SERVICE4}/32", "dev", "lo")
        node.ip("addr", "add", f"{SERVICE6}/128", "dev", "lo")
        proc = node.popen(
            [sys.executable, "-m", "kbgpd_lab.lab.httpserver", "--name", f"node{i}"],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        procs.append(proc)
    for fam, ip in ((4, SERVICE4), (6, SERVICE6)):
        hops = []
        for i in range(1, len(topology.nodes) + 1):
            hops += ["nexthop", "via", str(topology.node_address(i, fam))]
        topology.router.ip(f"-{fam}", "route", "add", ip, *hops)
    return procs  # stopped, with their pipes closed, when the topology is destroyed


def run_client(topology: Topology, *args: str) -> Result:
    assert topology.client is not None
    out = topology.client.run([sys.executable, "-m", "kbgpd_lab.lab.client", *args], timeout=60)
    return Result.from_json(out.stdout)


@pytest.mark.parametrize(
    "target", [pytest.param(SERVICE4, id="v4"), pytest.param(SERVICE6, id="v6")]
)
def test_burst_spreads_over_every_node(
    topology: Topology, servers: list[subprocess.Popen[bytes]], target: str
) -> None:
    result = run_client(topology, "--target", target, "--connections", "300")
    assert result.failures == 0, result
    assert result.requests == 300
    assert result.connections == 300
    assert set(result.per_node) == {"node1", "node2", "node3"}
    # Hash policy 1 spreads new flows; 300 over 3 never leaves a node near empty.
    assert min(result.per_node.values()) > 40, result.per_node


def test_steady_keepalive_counts_requests_per_connection(
    topology: Topology, servers: list[subprocess.Popen[bytes]]
) -> None:
    result = run_client(
        topology,
        "--target", SERVICE4, "--steady", "--duration", "1", "--concurrency", "4",
        "--requests-per-connection", "10", "--interval", "0.005",
    )  # fmt: skip
    assert result.failures == 0, result
    assert result.requests >= 40
    # Keep-alive: several requests per TCP connection.
    assert result.requests >= 5 * result.connections
    assert sum(result.per_node.values()) == result.requests


def test_failures_are_counted_not_hidden(
    topology: Topology, servers: list[subprocess.Popen[bytes]]
) -> None:
    """node2's server dies: its share of new connections fails, the rest still answer."""
    servers[1].kill()
    servers[1].wait()
    result = run_client(topology, "--target", SERVICE4, "--connections", "90", "--timeout", "1")
    assert "node2" not in result.per_node
    assert result.failures > 0
    assert result.errors.get("ConnectionRefusedError", 0) == result.failures
    assert result.failures + sum(result.per_node.values()) == 90
