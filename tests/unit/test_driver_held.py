"""DriverCore's part of BGP-follows-BFD: routes held back from a peer (set_held) and a
session torn down at once (teardown), ahead of any route command not yet written."""

from __future__ import annotations

import ipaddress

from test_driver_core import PLAIN, answer_all, net

from bgpd.exabgp.core import DriverCore
from bgpd.exabgp.plan import CommandKind
from bgpd.exabgp.render import Neighbor
from bgpd.model import BGPPeer, NodeName, PeerName, RouteAttributes

A, B = PeerName("a"), PeerName("b")


def neighbor(name: PeerName, peer: str, *, gr: bool = False) -> Neighbor:
    return Neighbor(
        peer=BGPPeer(
            name=name,
            my_asn=65000,
            peer_asn=65001,
            peer_address=ipaddress.ip_address(peer),
            enable_graceful_restart=gr,
        ),
        local_address=ipaddress.ip_address("192.0.2.10"),
        router_id=ipaddress.IPv4Address("192.0.2.10"),
    )


def core() -> DriverCore:
    c = DriverCore(node=NodeName("n1"), window=4, probe_interval=None)
    c.configure([neighbor(A, "192.0.2.1", gr=True), neighbor(B, "192.0.2.2")])
    c.reset(0.0)
    c.connect()
    return c


def sent_texts(c: DriverCore, now: float = 0.0) -> list[str]:
    """Send and acknowledge until nothing is left; every command text, in order."""
    return [cmd.text for cmd in answer_all(c, now=now)]


DESIRED = {
    A: {net("10.0.0.1/32"): PLAIN, net("10.0.0.2/32"): PLAIN},
    B: {net("10.0.0.1/32"): PLAIN},
}


def test_held_peer_gets_nothing_and_keeps_its_desired_routes() -> None:
    c = core()
    c.set_held({A})
    c.apply(DESIRED)
    texts = sent_texts(c)
    assert all("neighbor 192.0.2.1 " not in t for t in texts)
    assert c.accepted() == {B: DESIRED[B]}
    assert c.held_routes() == {A: 2}
    assert c.converged


def test_release_announces_and_holding_again_withdraws() -> None:
    c = core()
    c.apply(DESIRED)
    sent_texts(c)
    c.set_held({A})
    texts = sent_texts(c)
    assert texts
    assert all("withdraw" in t and "neighbor 192.0.2.1 " in t for t in texts)
    assert A not in c.accepted()
    c.set_held(set())
    sent_texts(c)
    assert c.accepted() == DESIRED
    assert c.held_routes() == {}


def test_teardown_goes_before_queued_route_commands() -> None:
    c = core()
    c.apply({A: {net(f"10.0.{i}.0/32"): RouteAttributes(med=i) for i in range(12)}})
    first = c.next_commands(0.0)
    assert len(first) == 4  # the window is full of announces
    c.teardown(A, 10)
    assert c.next_commands(0.0) == []  # waits for the answers in flight
    for _ in first:
        c.on_ack(True, 0.0)
    (cmd,) = c.next_commands(0.0)
    assert cmd.kind is CommandKind.TEARDOWN
    assert cmd.text == "neighbor 192.0.2.1 local-ip 192.0.2.10 teardown 10"
    assert c.next_commands(0.0) == []  # alone until answered
    c.on_ack(True, 0.0)
    rest = sent_texts(c)
    assert rest
    assert all("teardown" not in t for t in rest)


def test_teardown_of_an_unknown_peer_or_after_a_restart_is_dropped() -> None:
    c = core()
    c.teardown(PeerName("elsewhere"), 10)
    c.teardown(A, 10)
    c.reset(1.0)
    c.connect()
    assert sent_texts(c) == []


def test_unanswered_for() -> None:
    c = core()
    assert c.unanswered_for(5.0) == 0.0
    c.apply(DESIRED)
    c.next_commands(1.0)
    assert c.unanswered_for(4.0) == 3.0


def test_end_of_rib_waits_for_the_held_routes() -> None:
    """A graceful-restart router keeps the routes of a restarted speaker as stale until
    End-of-RIB: sent while the peer is held (BFD not Up yet), it would flush them."""
    c = core()
    c.set_held({A})
    c.apply(DESIRED)
    c.on_event(
        {
            "type": "state",
            "neighbor": {
                "address": {"peer": "192.0.2.1", "local": "192.0.2.10"},
                "state": "up",
            },
        },
        1.0,
    )
    assert all("eor" not in t for t in sent_texts(c))
    c.set_held(set())
    texts = sent_texts(c)
    assert [t.split(" announce ")[1].split(" ")[0] for t in texts] == ["attributes", "eor"]
    assert texts[-1] == "neighbor 192.0.2.1 local-ip 192.0.2.10 announce eor ipv4 unicast"


def state_doc(peer: str, state: str) -> dict[str, object]:
    return {
        "type": "state",
        "neighbor": {"address": {"peer": peer, "local": "192.0.2.10"}, "state": state},
    }


def test_a_session_the_speaker_tore_down_for_bfd_is_not_a_flap() -> None:
    """Issue 17: the flap rule (bgpd.exabgp.flap) is about two speakers taking turns; the
    downs this speaker causes itself when BFD goes down must not hold the peer down."""
    c = core()
    now = 1000.0
    for _ in range(3 * c.flap_policy.downs):
        c.on_event(state_doc("192.0.2.1", "up"), now)
        c.teardown(A, 10)
        assert any("teardown" in t for t in sent_texts(c, now))
        c.on_event(state_doc("192.0.2.1", "down"), now + 0.1)
        now += 1.0
    assert c.held_down(now) == set()
    # The same downs without a teardown of ours are a flap, as before.
    for _ in range(c.flap_policy.downs):
        c.on_event(state_doc("192.0.2.1", "up"), now)
        c.on_event(state_doc("192.0.2.1", "down"), now + 0.1)
        now += 1.0
    assert c.held_down(now) == {A}


def test_a_teardown_of_a_session_already_down_leaves_the_next_down_counted() -> None:
    c = core()
    c.teardown(A, 10)  # the session is down: ExaBGP has nothing to close
    sent_texts(c, 1000.0)
    now = 1001.0
    for _ in range(c.flap_policy.downs):
        c.on_event(state_doc("192.0.2.1", "up"), now)
        c.on_event(state_doc("192.0.2.1", "down"), now + 0.1)
        now += 1.0
    assert c.held_down(now) == {A}
