"""plan(): the commands that turn ExaBGP's acknowledged set into the desired one."""

from __future__ import annotations

import ipaddress

import pytest

from bgpd.exabgp.plan import CommandKind, attribute_text, delta, drained, eor_command, plan
from bgpd.model import IPNetwork, PeerName, RouteAttributes

A = PeerName("a")
B = PeerName("b")
SEL = {
    A: "neighbor 172.31.250.1 local-ip 172.31.250.11",
    B: "neighbor fd00:99:250::1 local-ip fd00:99:250::11",
}
PLAIN = RouteAttributes()
COMM = RouteAttributes(communities=("65000:1",), large_communities=("1:2:3",), local_pref=50, med=7)


def net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


def texts(acked: dict, desired: dict, batch: int = 100) -> list[str]:
    return [c.text for c in plan(acked, desired, SEL, batch=batch)]


@pytest.mark.parametrize(
    ("acked", "desired", "expected"),
    [
        pytest.param({}, {}, [], id="nothing"),
        pytest.param(
            {},
            {A: {net("10.99.0.2/32"): PLAIN, net("10.99.0.1/32"): PLAIN}},
            [f"{SEL[A]} announce attributes next-hop self nlri 10.99.0.1/32 10.99.0.2/32"],
            id="batched-and-sorted",
        ),
        pytest.param(
            {A: {net("10.99.0.1/32"): PLAIN}},
            {A: {net("10.99.0.1/32"): PLAIN}},
            [],
            id="already-acknowledged",
        ),
        pytest.param(
            {A: {net("10.99.0.1/32"): PLAIN}},
            {A: {net("10.99.0.1/32"): COMM}},
            [
                f"{SEL[A]} announce attributes next-hop self community [ 65000:1 ] "
                "large-community [ 1:2:3 ] local-preference 50 med 7 nlri 10.99.0.1/32"
            ],
            id="attribute-change-is-reannounce",
        ),
        pytest.param(
            {A: {net("10.99.0.1/32"): PLAIN, net("10.99.0.3/32"): PLAIN}},
            {A: {net("10.99.0.2/32"): PLAIN}},
            [
                f"{SEL[A]} announce attributes next-hop self nlri 10.99.0.2/32",
                f"{SEL[A]} withdraw attributes next-hop self nlri 10.99.0.1/32 10.99.0.3/32",
            ],
            id="announce-before-withdraw",
        ),
        pytest.param(
            {},
            {
                A: {net("10.99.0.1/32"): COMM, net("10.99.0.2/32"): PLAIN},
                B: {net("fd00:99::1/128"): PLAIN},
            },
            [
                f"{SEL[A]} announce attributes next-hop self nlri 10.99.0.2/32",
                f"{SEL[A]} announce attributes next-hop self community [ 65000:1 ] "
                "large-community [ 1:2:3 ] local-preference 50 med 7 nlri 10.99.0.1/32",
                f"{SEL[B]} announce attributes next-hop self nlri fd00:99::1/128",
            ],
            id="per-peer-per-attributes",
        ),
        pytest.param(
            {},
            {PeerName("unknown"): {net("10.99.0.1/32"): PLAIN}},
            [],
            id="unconfigured-peer-ignored",
        ),
        pytest.param(
            {A: {net("10.99.0.1/32"): PLAIN}},
            {},
            [f"{SEL[A]} withdraw attributes next-hop self nlri 10.99.0.1/32"],
            id="withdraw-all",
        ),
    ],
)
def test_plan(acked: dict, desired: dict, expected: list[str]) -> None:
    assert texts(acked, desired) == expected


def test_batch_size_and_changes() -> None:
    desired = {A: {net(f"10.99.{i // 256}.{i % 256}/32"): PLAIN for i in range(250)}}
    cmds = plan({}, desired, SEL, batch=100)
    assert [len(c.changes) for c in cmds] == [100, 100, 50]
    assert all(c.kind is CommandKind.ANNOUNCE and c.peer == A and not c.sync for c in cmds)
    assert {p for c in cmds for p, _ in c.changes} == set(desired[A])


def test_mixed_families_never_share_a_command() -> None:
    cmds = plan({}, {A: {net("10.99.0.1/32"): PLAIN, net("fd00:99::1/128"): PLAIN}}, SEL)
    assert len(cmds) == 2
    assert {c.changes[0][0].version for c in cmds} == {4, 6}


def test_eor_is_sync() -> None:
    cmd = eor_command(A, SEL[A], "ipv4 unicast")
    assert cmd.text == f"{SEL[A]} announce eor ipv4 unicast"
    assert cmd.sync
    assert cmd.kind is CommandKind.EOR


@pytest.mark.parametrize(
    ("attrs", "ibgp", "expected"),
    [
        pytest.param(PLAIN, False, RouteAttributes(communities=("65535:0",)), id="ebgp"),
        pytest.param(
            PLAIN,
            True,
            RouteAttributes(communities=("65535:0",), local_pref=0),
            id="ibgp-local-pref-0",
        ),
        pytest.param(
            RouteAttributes(communities=("65535:0", "65000:1"), med=5),
            False,
            RouteAttributes(communities=("65535:0", "65000:1"), med=5),
            id="already-there",
        ),
        pytest.param(
            RouteAttributes(communities=("65000:1",), local_pref=200),
            True,
            RouteAttributes(communities=("65000:1", "65535:0"), local_pref=0),
            id="kept-sorted",
        ),
    ],
)
def test_drained(attrs: RouteAttributes, ibgp: bool, expected: RouteAttributes) -> None:
    out = drained({A: {net("10.99.0.1/32"): attrs}}, [A] if ibgp else [])
    assert out[A][net("10.99.0.1/32")] == expected


def test_attribute_text_minimal() -> None:
    assert attribute_text(PLAIN) == "next-hop self"


X = net("10.99.0.1/32")
Y = net("10.99.0.2/32")


@pytest.mark.parametrize(
    ("have", "want", "todo", "gone"),
    [
        pytest.param({X: PLAIN}, {X: PLAIN}, {}, set(), id="equal"),
        pytest.param({X: PLAIN}, {X: COMM}, {X: COMM}, set(), id="attributes-changed"),
        pytest.param({X: PLAIN}, {X: RouteAttributes()}, {}, set(), id="equal-value-other-object"),
        pytest.param({X: PLAIN}, {X: PLAIN, Y: COMM}, {Y: COMM}, set(), id="new-prefix"),
        pytest.param({X: PLAIN, Y: COMM}, {Y: COMM}, {}, {X}, id="prefix-gone"),
        pytest.param({X: PLAIN}, {Y: PLAIN}, {Y: PLAIN}, {X}, id="replaced"),
        pytest.param({}, {X: PLAIN, Y: COMM}, {X: PLAIN, Y: COMM}, set(), id="nothing-held"),
        pytest.param({}, {}, {}, set(), id="nothing-at-all"),
    ],
)
def test_delta(
    have: dict[IPNetwork, RouteAttributes],
    want: dict[IPNetwork, RouteAttributes],
    todo: dict[IPNetwork, RouteAttributes],
    gone: set[IPNetwork],
) -> None:
    assert delta(have, want) == (todo, gone)
