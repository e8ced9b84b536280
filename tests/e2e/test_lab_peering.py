"""End to end: BGPPeer fields MetalLB users have, with real routers and real traffic
(issue 16, item 7): a session bound to its VRF device, and dynamicASN internal and external.

Each test brings a lab up with the speakers reading a cluster dump (Service demo/web:
10.99.100.1 and fd00:99:100::1, pods on node1 and node2, externalTrafficPolicy Cluster),
then judges by the router's sessions, RIB and FIB, and by client requests to the Service.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest

from kbgpd_lab.lab.lab import Lab
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN

pytestmark = [pytest.mark.e2e, pytest.mark.root]

IP4 = "10.99.100.1"
IP6 = "fd00:99:100::1"
ROUTERS = [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")]


def assert_served(lab: Lab, as_path: tuple[int, ...]) -> None:
    """Every node's session is up, the router's RIB holds the Service from every node
    with this AS path, and the client reaches both pods' nodes through it."""
    lab.router.wait_established(count=2 * len(lab.topology.nodes))
    for ip, fam in ((IP4, 4), (IP6, 6)):
        prefix = ipaddress.ip_network(ip)
        paths = lab.router.rib(fam)[prefix]
        assert {p.next_hop for p in paths} == {
            lab.topology.node_address(i, fam) for i in range(1, len(lab.topology.nodes) + 1)
        }
        assert {p.as_path for p in paths} == {as_path}
        result = lab.client(ip, connections=60)
        assert result.failures == 0, result
        assert set(result.per_node) == {"node1", "node2"}, result


@pytest.mark.parametrize("router", ROUTERS)
def test_session_bound_to_the_vrf_device(make_lab: Callable[..., Lab], router: str) -> None:
    """BGPPeer vrf: ExaBGP's session socket is bound to the named device (source-interface,
    SO_BINDTODEVICE, the way a Linux VRF is entered) and its local address is the kernel's
    choice from a socket bound the same way. The CI kernel has no VRF device type, so the
    device here is the node's link to the router: the sessions come up bound to it, the
    router learns the Service from both nodes, and traffic to it is answered."""
    lab = make_lab(router, nodes=2, cluster="file", vrf="eth0")
    assert_served(lab, (NODE_ASN,))
    for node in lab.topology.nodes:
        sockets = node.run(["ss", "-tnH", "state", "established", "( dport = :179 )"]).stdout
        local = [line.split()[2] for line in sockets.splitlines()]
        assert len(local) == 2, sockets
        assert all("%eth0:" in a for a in local), sockets


@pytest.mark.parametrize("router", ROUTERS)
def test_dynamic_asn_internal(make_lab: Callable[..., Lab], router: str) -> None:
    """dynamicASN internal: the router is in the nodes' AS; the speaker peers with myASN
    (iBGP: no AS prepended) without a peerASN."""
    lab = make_lab(router, nodes=2, cluster="file", dynamic_asn="internal")
    assert lab.router.config.asn == NODE_ASN
    assert_served(lab, ())


@pytest.mark.parametrize("router", ROUTERS)
def test_dynamic_asn_external(make_lab: Callable[..., Lab], router: str) -> None:
    """dynamicASN external: the speaker learns the router's ASN from its OPEN (ExaBGP
    `peer-as auto`); eBGP, so the nodes' AS is on the path, and the speaker's status
    reports the sessions (ExaBGP's events for them are repaired JSON)."""
    lab = make_lab(router, nodes=2, cluster="file", dynamic_asn="external")
    assert lab.router.config.asn == ROUTER_ASN
    assert_served(lab, (NODE_ASN,))
    peers = lab.speaker_status(1)["peers"]
    assert {p["state"] for p in peers} == {"up"}, peers
