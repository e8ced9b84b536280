"""bfdd's configuration and the in-place change set (bgpd.bfd.render), as tables."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

import pytest

from bgpd.bfd.render import BfdPeerConfig, admin_down, bfd_peers, commands, render
from bgpd.model import BFDProfile, BGPPeer, IPAddress, PeerName


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


A = BfdPeerConfig(
    peer=PeerName("a"), address=ip("192.0.2.1"), local_address=ip("192.0.2.10"), profile="p"
)
B = BfdPeerConfig(
    peer=PeerName("b"), address=ip("2001:db8::1"), local_address=ip("2001:db8::10"), profile="p"
)
M = replace(A, peer=PeerName("m"), address=ip("198.51.100.1"), multihop=True, minimum_ttl=250)


def test_render_one_block_per_session_in_name_order() -> None:
    assert render([M, A]) == (
        "! Rendered by kube-bgpd: one BFD session per BFD-enabled BGPPeer.\n"
        "bfd\n"
        " ! a (BFDProfile p)\n"
        " peer 192.0.2.1 local-address 192.0.2.10\n"
        "  receive-interval 300\n"
        "  transmit-interval 300\n"
        "  detect-multiplier 3\n"
        "  no passive-mode\n"
        "  no shutdown\n"
        " exit\n"
        " ! m (BFDProfile p)\n"
        " peer 198.51.100.1 multihop local-address 192.0.2.10\n"
        "  receive-interval 300\n"
        "  transmit-interval 300\n"
        "  detect-multiplier 3\n"
        "  no passive-mode\n"
        "  minimum-ttl 250\n"
        "  no shutdown\n"
        " exit\n"
        "exit\n"
    )


WRAP = ("configure terminal", "bfd")
#: A new session's settings with the default profile.
DEFAULTS = A.lines()


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param([A, B], [B, A], (), id="same-sessions-nothing"),
        pytest.param([], [], (), id="empty"),
        pytest.param(
            [A],
            [A, B],
            (
                *WRAP,
                "peer 2001:db8::1 local-address 2001:db8::10",
                *DEFAULTS,
                "exit",
                "end",
            ),
            id="added-only-the-new-one",
        ),
        pytest.param(
            [A, B],
            [A],
            (*WRAP, "no peer 2001:db8::1 local-address 2001:db8::10", "end"),
            id="removed",
        ),
        pytest.param(
            [A, B],
            [A, replace(B, transmit_interval=200, receive_interval=250)],
            (
                *WRAP,
                "peer 2001:db8::1 local-address 2001:db8::10",
                "receive-interval 250",
                "transmit-interval 200",
                "exit",
                "end",
            ),
            id="interval-changed-one-line-each-other-session-untouched",
        ),
        pytest.param(
            [A],
            [replace(A, passive_mode=True)],
            (*WRAP, "peer 192.0.2.1 local-address 192.0.2.10", "passive-mode", "exit", "end"),
            id="passive",
        ),
        pytest.param(
            [A],
            [replace(A, local_address=ip("192.0.2.11"))],
            (
                *WRAP,
                "no peer 192.0.2.1 local-address 192.0.2.10",
                "peer 192.0.2.1 local-address 192.0.2.11",
                *DEFAULTS,
                "exit",
                "end",
            ),
            id="new-local-address-is-another-session",
        ),
        pytest.param([A], [replace(A, peer=PeerName("renamed"), profile="q")], (), id="names-only"),
        pytest.param(
            [M],
            [replace(M, minimum_ttl=200)],
            (
                *WRAP,
                "peer 198.51.100.1 multihop local-address 192.0.2.10",
                "minimum-ttl 200",
                "exit",
                "end",
            ),
            id="multihop-minimum-ttl",
        ),
        pytest.param(
            [A, B],
            admin_down([A, B]),
            (
                *WRAP,
                "peer 192.0.2.1 local-address 192.0.2.10",
                "shutdown",
                "exit",
                "peer 2001:db8::1 local-address 2001:db8::10",
                "shutdown",
                "exit",
                "end",
            ),
            id="admin-down-all",
        ),
    ],
)
def test_commands(
    before: list[BfdPeerConfig], after: list[BfdPeerConfig], expected: tuple[str, ...]
) -> None:
    assert commands(before, after) == expected


def peer(name: str, address: str, profile: str | None, *, multihop: bool = False) -> BGPPeer:
    return BGPPeer(
        name=PeerName(name),
        my_asn=64513,
        peer_asn=64512,
        peer_address=ip(address),
        bfd_profile=profile,
        ebgp_multihop=multihop,
    )


def test_bfd_peers_only_peers_with_a_profile_with_its_values() -> None:
    fast = BFDProfile(
        name="fast",
        receive_interval=100,
        transmit_interval=150,
        detect_multiplier=4,
        passive_mode=True,
        minimum_ttl=200,
    )
    sessions = [
        (peer("z", "192.0.2.3", "fast", multihop=True), ip("192.0.2.10")),
        (peer("plain", "192.0.2.2", None), ip("192.0.2.10")),
        (peer("a", "192.0.2.1", "fast"), ip("192.0.2.10")),
        (peer("gone", "192.0.2.4", "missing"), ip("192.0.2.10")),
    ]
    a = BfdPeerConfig(
        peer=PeerName("a"),
        address=ip("192.0.2.1"),
        local_address=ip("192.0.2.10"),
        profile="fast",
        receive_interval=100,
        transmit_interval=150,
        detect_multiplier=4,
        passive_mode=True,
        minimum_ttl=200,
    )
    z = replace(a, peer=PeerName("z"), address=ip("192.0.2.3"), multihop=True)
    assert bfd_peers(sessions, [fast]) == (a, z)


def test_bfd_peers_one_session_per_key() -> None:
    p = BFDProfile(name="p")
    sessions = [
        (peer("b", "192.0.2.1", "p"), ip("192.0.2.10")),
        (peer("a", "192.0.2.1", "p"), ip("192.0.2.10")),
    ]
    assert [c.peer for c in bfd_peers(sessions, [p])] == ["a"]
