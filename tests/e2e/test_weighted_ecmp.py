"""End to end: weighted ECMP for externalTrafficPolicy Local with a real FRR router.

The speakers announce each Local route with the link-bandwidth extended community
(linkBandwidthPerEndpoint: 1 Mbit/s a serving endpoint, bgpd.bandwidth); FRR 8.4, with
its default ``bgp bestpath bandwidth``, weighs the next hops it installs in the kernel by
it. Judged by the router's kernel route (``ip -j route``: next hop weights) and by real
connections from the lab's client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import replace

import pytest

from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.lab import Lab, LabService
from kbgpd_lab.lab.routers import FibWatch

pytestmark = [pytest.mark.e2e, pytest.mark.root]

IP4 = "10.99.100.1"
IP6 = "fd00:99:100::1"
#: 1 Mbit/s a serving endpoint, the scale docs/configuration.md shows.
PER_ENDPOINT = 125_000
CONNECTIONS = 400
#: Allowed distance of node1's share of the connections from its weight's share. With
#: 400 connections and p = 0.75 one standard deviation is 2.2 points; 10 points is > 4.
TOLERANCE = 0.10


def weights_in_ratio(
    lab: Lab, target: str, pods: dict[int, int]
) -> dict[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    """The kernel route's weights when they are those FRR computes from the pod counts,
    else None. FRR (bgp_zebra.c): weight = 100 x bandwidth / total bandwidth, rounded
    down, so 3:1 gives 75:25 and 3:4 gives 42:57."""
    family = 6 if ":" in target else 4
    got = lab.router.fib_weights(target)
    total = sum(pods.values())
    want = {lab.topology.node_address(n, family): 100 * c // total for n, c in pods.items()}
    return got if got == want else None  # type: ignore[return-value]


def wait_weights(lab: Lab, pods: dict[int, int]) -> None:
    for target in (IP4, IP6):
        wait_until(
            lambda t=target: weights_in_ratio(lab, t, pods),  # type: ignore[misc]
            within=15,
            what=f"{target} weighted {pods}",
            details=lambda t=target: f"kernel weights {lab.router.fib_weights(t)}",  # type: ignore[misc]
        )


def test_local_weights_follow_endpoint_counts_and_traffic_splits(
    make_lab: Callable[..., Lab],
) -> None:
    """3 pods on node1 and 1 on node2: weights 3:1 and ~75 % of the connections on
    node1; node2's pods scale 1 -> 4: the weights follow (1:4) without the route ever
    losing a next hop."""
    web = LabService("web", (IP4, IP6), pod_nodes=(1, 1, 1, 2), policy="Local")
    lab = make_lab("frr", services=[web], link_bandwidth_per_endpoint=PER_ENDPOINT)
    wait_weights(lab, {1: 3, 2: 1})
    weights = lab.router.fib_weights(IP4)
    result = lab.client(IP4, connections=CONNECTIONS)
    assert result.failures == 0, result
    share = result.per_node.get("node1", 0) / sum(result.per_node.values())
    expected = weights[lab.topology.node_address(1)] / sum(weights.values())
    print(f"\nweights {weights}; connections {result.per_node}; node1 share {share:.3f}")
    assert abs(share - expected) <= TOLERANCE, (result.per_node, weights)
    assert set(result.per_node) == {"node1", "node2"}

    both = {
        IP4: {lab.topology.node_address(1), lab.topology.node_address(2)},
        IP6: {lab.topology.node_address(1, 6), lab.topology.node_address(2, 6)},
    }
    with FibWatch(lab.router, both) as watch:
        for count in (2, 3, 4):
            lab.set_services([replace(web, pod_nodes=(1, 1, 1, *([2] * count)))])
            wait_weights(lab, {1: 3, 2: count})
        lab.set_services([replace(web, pod_nodes=(1, 2, 2, 2, 2))])
        wait_weights(lab, {1: 1, 2: 4})
    # Re-announced with the new value (implicit withdraw), never withdrawn in between.
    assert watch.samples > 0
    assert watch.deviations == []
    result = lab.client(IP4, connections=CONNECTIONS)
    share = result.per_node.get("node2", 0) / sum(result.per_node.values())
    print(f"after scaling: connections {result.per_node}; node2 share {share:.3f}")
    assert abs(share - 0.8) <= TOLERANCE, result.per_node


@pytest.mark.parametrize(
    ("router", "bestpath"),
    [
        pytest.param("bird", None, id="bird"),
        pytest.param("frr", "ignore", id="frr-bestpath-bandwidth-ignore"),
    ],
)
def test_routers_that_do_not_weigh_split_evenly(
    router: str, bestpath: str | None, make_lab: Callable[..., Lab]
) -> None:
    """BIRD 2 installs its ECMP next hops with equal weights whatever the community says;
    FRR told ``bgp bestpath bandwidth ignore`` does the same. The routes stay."""
    web = LabService("web", (IP4, IP6), pod_nodes=(1, 1, 1, 2), policy="Local")
    lab = make_lab(
        router,
        services=[web],
        link_bandwidth_per_endpoint=PER_ENDPOINT,
        bestpath_bandwidth=bestpath,
    )
    for target, family in ((IP4, 4), (IP6, 6)):
        even = {lab.topology.node_address(n, family): 1 for n in (1, 2)}
        wait_until(
            lambda t=target, e=even: lab.router.fib_weights(t) == e,  # type: ignore[misc]
            within=15,
            what=f"{target} on node1 and node2 with equal weights",
            details=lambda t=target: f"kernel weights {lab.router.fib_weights(t)}",  # type: ignore[misc]
        )
