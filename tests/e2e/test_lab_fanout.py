"""End to end: the fan-out cap (BGPAdvertisement maxNodes) at a real FRR router.

Three nodes, cap 2, six Services of one IP each (Cluster policy): the router must hold
exactly the two next hops the rendezvous rule (bgpd.fanout) names for each IP. Then one
node leaves the candidates (labelled exclude-from-external-load-balancers): the IPs it
had won move to the two others, and the router's routes for the IPs it had not won never
change while that happens; it comes back: the original sets return.

A speaker that stops (SIGTERM: withdraw, exit) while its Node stays in the cluster keeps
its place in the choice, since no other node can tell: the IPs it had won keep only
their other next hop until it is back. This is the documented limit of a choice made
without coordination.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bgpd import fanout
from bgpd.decision import EXCLUDE_LB_LABEL
from bgpd.model import IPAddress, NodeName
from kbgpd_lab.lab.lab import Lab, LabService
from kbgpd_lab.lab.routers import FibWatch

pytestmark = [pytest.mark.e2e, pytest.mark.root]

CAP = 2
IPS = [f"10.99.100.{i}" for i in range(1, 7)]
SERVICES = [LabService(f"web{i}", (ip,), pod_nodes=(1, 2)) for i, ip in enumerate(IPS, 1)]
NODE_NAMES = [NodeName(f"node{i}") for i in (1, 2, 3)]


def hops(lab: Lab, names: frozenset[NodeName]) -> set[IPAddress]:
    return {lab.topology.node_address(int(n.removeprefix("node"))) for n in names}


def choice(names: list[NodeName]) -> dict[str, frozenset[NodeName]]:
    """The rendezvous rule for every IP: the key is the announced prefix (a /32)."""
    return {ip: fanout.chosen(f"{ip}/32", names, CAP) for ip in IPS}


def test_cap_two_of_three_and_a_leaving_node_moves_only_its_routes(
    make_lab: Callable[..., Lab],
) -> None:
    lab = make_lab("frr", cluster="file", ipv6=False, services=[], max_nodes=CAP)
    lab.set_services(SERVICES)
    before = choice(NODE_NAMES)
    for ip, names in before.items():
        assert len(names) == CAP
        assert lab.router.wait_fib(ip, hops(lab, names), timeout=30) == hops(lab, names)

    # The node that won some IPs but not all, so both kinds of IP are watched.
    leaving = next(n for n in NODE_NAMES if 0 < sum(n in c for c in before.values()) < len(IPS))
    stay = [n for n in NODE_NAMES if n != leaving]
    after = choice(stay)
    won = {ip for ip, names in before.items() if leaving in names}
    untouched = {ip: hops(lab, before[ip]) for ip in IPS if ip not in won}
    assert all(after[ip] == before[ip] for ip in untouched)

    index = int(leaving.removeprefix("node"))
    with FibWatch(lab.router, untouched) as watch:
        lab.set_node_labels(index, {EXCLUDE_LB_LABEL: ""})
        for ip in sorted(won):
            lab.router.wait_fib(ip, hops(lab, after[ip]), timeout=30)
        # It comes back: every IP returns to its first pair.
        lab.set_node_labels(index, {})
        for ip in sorted(won):
            lab.router.wait_fib(ip, hops(lab, before[ip]), timeout=30)
    assert watch.samples > 0
    assert watch.deviations == [], watch.deviations[:5]
    for ip in IPS:
        assert lab.router.fib(ip) == hops(lab, before[ip])

    with FibWatch(lab.router, untouched) as watch:
        lab.stop_speaker(index)
        for ip in sorted(won):
            lab.router.wait_fib(ip, hops(lab, before[ip] - {leaving}), timeout=30)
        lab.start_speaker(index)
        for ip in sorted(won):
            lab.router.wait_fib(ip, hops(lab, before[ip]), timeout=30)
    assert watch.samples > 0
    assert watch.deviations == [], watch.deviations[:5]
