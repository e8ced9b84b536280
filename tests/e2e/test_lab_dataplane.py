"""End to end: SpeakerConfig dataPlaneCheck with FRR. Each node runs the lab's kube-proxy
stand-in (kbgpd_lab.lab.healthserver); turning node3's /healthz to 503 drains node3 out of
the router's ECMP set (GRACEFUL_SHUTDOWN seen at the router first, then the withdrawal)
under traffic, and turning it back to 200 brings it back. A Local Service's
healthCheckNodePort answering "0 local endpoints" on node2 does the same for that
Service on node2 only."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

import pytest

from kbgpd_lab.lab.lab import Lab, LabService

pytestmark = [pytest.mark.e2e, pytest.mark.root]

IP4 = "10.99.100.1"
STEADY = ("--requests-per-connection", "5", "--concurrency", "8", "--interval", "0.01")


def test_failing_proxy_health_drains_the_node_then_it_comes_back(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab("frr", drain_window=2.0, data_plane_check=True)
    net = ipaddress.ip_network(f"{IP4}/32")
    every = {lab.topology.node_address(n) for n in (1, 2, 3)}
    node3 = lab.topology.node_address(3)
    lab.router.wait_fib(IP4, every, timeout=30)
    client = lab.start_steady_client(IP4, *STEADY)
    try:
        time.sleep(0.3)
        lab.set_proxy_health(3, healthy=False)
        # First GRACEFUL_SHUTDOWN on node3's path (RFC 8326), node3 out of the FIB ...
        rib = lab.router.wait_rib(
            lambda r: any("65535:0" in p.communities for p in r.get(net, [])), timeout=15
        )
        [drained] = [p for p in rib[net] if "65535:0" in p.communities]
        assert drained.next_hop == node3
        lab.router.wait_fib(IP4, every - {node3}, timeout=15)
        assert node3 in {p.next_hop for p in lab.router.rib()[net]}, "withdrawn too early"
        # ... then, when the drain window ends, the withdrawal.
        lab.router.wait_rib(lambda r: node3 not in {p.next_hop for p in r[net]}, timeout=15)
        status = lab.speaker_status(3)
        assert status["mode"] == "withdrawn"
        assert status["drain"]["source"] == "dataPlane"
        assert status["data_plane"]["node_ready"] is False
        skipped = status["explain"]["skipped"]
        assert {s["reason"] for s in skipped} == {"dataPlaneNotReady"}, skipped
        assert lab.router.fib(IP4) == every - {node3}
        # Healthy again: back after successThreshold answers, without GRACEFUL_SHUTDOWN.
        lab.set_proxy_health(3, healthy=True)
        rib = lab.router.wait_rib(
            lambda r: node3 in {p.next_hop for p in r.get(net, [])}, timeout=15
        )
        assert not any("65535:0" in p.communities for p in rib[net])
        lab.router.wait_fib(IP4, every, timeout=15)
        assert lab.speaker_status(3)["mode"] == "normal"
        time.sleep(0.5)  # traffic after the return, too
    finally:
        result = lab.finish_client(client)
    # The router pins open connections (the lab's default ECMP): none fails.
    assert result.failures == 0, result
    assert set(result.per_node) == {"node1", "node2", "node3"}


def test_failing_health_check_node_port_drains_that_service_there(
    make_lab: Callable[..., Lab],
) -> None:
    web = LabService("web", (IP4,), pod_nodes=(1, 2), policy="Local")
    lab = make_lab("frr", drain_window=2.0, data_plane_check=True, services=[web])
    net = ipaddress.ip_network(f"{IP4}/32")
    node1, node2 = lab.topology.node_address(1), lab.topology.node_address(2)
    lab.router.wait_fib(IP4, {node1, node2}, timeout=30)
    [allocated] = lab.services
    assert allocated.health_check_node_port is not None  # the API allocated one
    # kube-proxy on node2 reports no local endpoint of demo/web (the EndpointSlice says one).
    lab.set_proxy_health(2, local_endpoints={"demo/web": 0})
    rib = lab.router.wait_rib(
        lambda r: any("65535:0" in p.communities for p in r.get(net, [])), timeout=15
    )
    [drained] = [p for p in rib[net] if "65535:0" in p.communities]
    assert drained.next_hop == node2
    lab.router.wait_fib(IP4, {node1}, timeout=15)
    lab.router.wait_rib(lambda r: {p.next_hop for p in r[net]} == {node1}, timeout=15)
    status = lab.speaker_status(2)
    assert status["mode"] == "normal"  # the node itself is fine
    assert status["data_plane"]["services_not_ready"] == ["demo/web"]
    [skip] = status["explain"]["skipped"]
    assert skip["reason"] == "dataPlaneNotReady"
    assert f"healthCheckNodePort {allocated.health_check_node_port}" in skip["detail"]
    lab.set_proxy_health(2)
    lab.router.wait_fib(IP4, {node1, node2}, timeout=15)
    rib = lab.router.rib()
    assert not any("65535:0" in p.communities for p in rib[net])
