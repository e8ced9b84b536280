"""BGP follows BFD (bgpd.bfd.gate): table steps, and properties over any sequence of BFD
readings, configurations and stops."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bgpd.bfd import gate
from bgpd.bfd.gate import GateState, GoodbyeStep, Teardown
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.model import HoldReason, PeerName

A, B, C = PeerName("a"), PeerName("b"), PeerName("c")
PEERS = (A, B, C)
UP, DOWN, INIT = BfdState.UP, BfdState.DOWN, BfdState.INIT
ADMIN, UNKNOWN = BfdState.ADMIN_DOWN, BfdState.UNKNOWN


def reading(peer: PeerName, state: BfdState, diagnostic: str = "") -> BfdPeerState:
    return BfdPeerState(
        peer=peer,
        address=ipaddress.ip_address("192.0.2.1"),
        local_address=ipaddress.ip_address("192.0.2.2"),
        state=state,
        diagnostic=diagnostic,
    )


def start(*, strict: bool = True, enabled: tuple[PeerName, ...] = (A, B)) -> GateState:
    return gate.configure(GateState(), enabled=enabled, strict=strict).state


def feed(state: GateState, *states: tuple[PeerName, BfdState]) -> tuple[GateState, list[Teardown]]:
    """Each (peer, state) as its own reading, in order; all teardowns."""
    out: list[Teardown] = []
    for peer, s in states:
        t = gate.observe(state, {peer: reading(peer, s)})
        state = t.state
        out += t.teardowns
    return state, out


@pytest.mark.parametrize(
    ("sequence", "teardowns"),
    [
        pytest.param((UP, DOWN), 1, id="up-down"),
        pytest.param((DOWN, INIT, UP, DOWN, DOWN), 1, id="down-repeated"),
        pytest.param((UP, UNKNOWN, DOWN), 1, id="up-unknown-down"),
        pytest.param((UP, UNKNOWN, UP), 0, id="up-unknown-up"),
        pytest.param((UP, ADMIN, DOWN), 0, id="admin-down-is-no-failure"),
        pytest.param((UP, ADMIN, UP, DOWN), 1, id="admin-down-then-up-then-down"),
        pytest.param((DOWN, INIT, DOWN), 0, id="never-up"),
        pytest.param((UP, DOWN, UP, DOWN), 2, id="two-failures"),
        pytest.param((UP, INIT, DOWN), 1, id="up-init-down"),
    ],
)
def test_teardowns(sequence: tuple[BfdState, ...], teardowns: int) -> None:
    _, out = feed(start(), *((A, s) for s in sequence))
    assert out == [Teardown(A)] * teardowns


def test_teardown_carries_the_diagnostic() -> None:
    state, _ = feed(start(), (A, UP))
    t = gate.observe(state, {A: reading(A, DOWN, "control detection time expired")})
    assert t.teardowns == (Teardown(A, "control detection time expired"),)


REMOTE = gate.NEIGHBOR_SIGNALED_DOWN
EXPIRED = "control detection time expired"


@pytest.mark.parametrize(
    ("sequence", "teardowns"),
    [
        pytest.param(((UP, ""), (DOWN, REMOTE)), [], id="router-signalled-down"),
        pytest.param(
            ((DOWN, ""), (INIT, ""), (UP, ""), (DOWN, REMOTE), (INIT, ""), (UP, "")),
            [],
            id="start-up-re-registration",
        ),
        pytest.param(((UP, ""), (DOWN, REMOTE), (DOWN, EXPIRED)), [EXPIRED], id="then-expired"),
        pytest.param(((UP, ""), (DOWN, EXPIRED), (DOWN, REMOTE)), [EXPIRED], id="expired-once"),
        pytest.param(((UP, ""), (DOWN, REMOTE), (UP, ""), (DOWN, "")), [""], id="then-down"),
    ],
)
def test_a_down_the_router_signalled_is_the_routers_to_act_on(
    sequence: tuple[tuple[BfdState, str], ...], teardowns: list[str]
) -> None:
    """Issue 17: at start FRR re-registers the BFD session when BGP comes up and signals
    Down once; the speaker tears down only for a Down of its own reading."""
    state, out = start(), list[Teardown]()
    for s, diagnostic in sequence:
        t = gate.observe(state, {A: reading(A, s, diagnostic)})
        state, out = t.state, out + list(t.teardowns)
    assert out == [Teardown(A, d) for d in teardowns]
    assert A in gate.held(state) or state.states[A] is UP


@pytest.mark.parametrize(
    ("strict", "state", "held"),
    [
        pytest.param(True, None, True, id="strict-nothing-read"),
        pytest.param(True, UNKNOWN, True, id="strict-unknown"),
        pytest.param(True, DOWN, True, id="strict-down"),
        pytest.param(True, INIT, True, id="strict-init"),
        pytest.param(True, UP, False, id="strict-up"),
        pytest.param(True, ADMIN, False, id="strict-admin-down-is-bfd-not-in-use"),
        pytest.param(False, None, False, id="loose-nothing-read"),
        pytest.param(False, DOWN, False, id="loose-down"),
    ],
)
def test_held(strict: bool, state: BfdState | None, held: bool) -> None:
    g = start(strict=strict)
    if state is not None:
        g, _ = feed(g, (A, state))
    assert (A in gate.held(g)) is held
    if held:
        assert gate.held(g)[A] is HoldReason.BFD_NOT_UP


def test_unknown_keeps_up() -> None:
    """bfdd restarting (no answer) does not withdraw routes that BFD confirmed."""
    g, _ = feed(start(), (A, UP), (A, UNKNOWN))
    assert A not in gate.held(g)


def test_peer_without_bfd_is_never_held_nor_torn_down() -> None:
    g = start(enabled=(A,))
    g, out = feed(g, (C, UP), (C, DOWN))
    assert out == []
    assert C not in gate.held(g)


def test_reconfigure_forgets_a_peer_and_holds_a_new_one() -> None:
    g, _ = feed(start(enabled=(A,)), (A, UP))
    g = gate.configure(g, enabled=(B,), strict=True).state
    assert gate.held(g) == {B: HoldReason.BFD_NOT_UP}
    g = gate.configure(g, enabled=(A, B), strict=True).state
    # A's session is read anew: nothing known about it now.
    assert set(gate.held(g)) == {A, B}
    g, out = feed(g, (A, DOWN))
    assert out == []


def test_stopping_tears_nothing_down() -> None:
    g, _ = feed(start(), (A, UP))
    g = gate.stop(g).state
    _, out = feed(g, (A, ADMIN), (A, UP), (A, DOWN))
    assert out == []


@pytest.mark.parametrize("retain", [False, True])
def test_goodbye_bgp_first_bfd_last(retain: bool) -> None:
    steps = gate.goodbye(retain=retain)
    first = GoodbyeStep.RETAIN if retain else GoodbyeStep.WITHDRAW
    assert steps == (
        first,
        GoodbyeStep.STOP_EXABGP,
        GoodbyeStep.BFD_ADMIN_DOWN,
        GoodbyeStep.STOP_BFD,
    )


# ---------------------------------------------------------------------------- properties


@dataclass(frozen=True)
class Observe:
    readings: tuple[tuple[PeerName, BfdState], ...]


@dataclass(frozen=True)
class Configure:
    enabled: frozenset[PeerName]
    strict: bool


@dataclass(frozen=True)
class Stop:
    pass


Step = Observe | Configure | Stop

bfd_states = st.sampled_from(list(BfdState))
observations = st.lists(
    st.tuples(st.sampled_from(PEERS), bfd_states), min_size=1, max_size=3, unique_by=lambda r: r[0]
).map(lambda rs: Observe(tuple(rs)))
configurations = st.builds(Configure, st.frozensets(st.sampled_from(PEERS)), st.booleans())
steps = st.lists(
    st.one_of(observations, observations, observations, configurations, st.just(Stop())),
    max_size=40,
)


def run(steps: list[Step], initial: GateState) -> list[tuple[Step, GateState, gate.Transition]]:
    """Every step with the state before it and its transition."""
    out = []
    state = initial
    for step in steps:
        match step:
            case Observe(readings):
                t = gate.observe(state, {p: reading(p, s) for p, s in readings})
            case Configure(enabled, strict):
                t = gate.configure(state, enabled=enabled, strict=strict)
            case Stop():
                t = gate.stop(state)
        out.append((step, state, t))
        state = t.state
    return out


INITIAL = gate.configure(GateState(), enabled=PEERS, strict=True).state


@given(steps)
def test_never_announced_while_strict_and_not_up(steps: list[Step]) -> None:
    """A peer is never announced to while strict and its BFD (the last reading that
    said anything) is not Up (AdminDown: BFD not in use)."""
    for _, _, t in run(steps, INITIAL):
        s = t.state
        for peer in s.enabled:
            known = s.states.get(peer, UNKNOWN)
            if s.strict and known not in (UP, ADMIN):
                assert gate.held(s).get(peer) is HoldReason.BFD_NOT_UP
        assert set(gate.held(s)) <= s.enabled


@given(steps)
def test_down_after_up_tears_down_exactly_once(steps: list[Step]) -> None:
    """A model replaying the readings per peer: a teardown comes exactly when a Down
    follows an Up with only Unknown or Init readings between them, while the peer stayed
    BFD-enabled and the speaker was not stopping."""
    up_since: dict[PeerName, bool] = {}
    stopping = False
    enabled = set(PEERS)
    for step, _before, t in run(steps, INITIAL):
        expected: list[Teardown] = []
        match step:
            case Observe(readings):
                for peer, s in sorted(readings):
                    if peer not in enabled:
                        continue
                    if s is UP:
                        up_since[peer] = True
                    elif s is ADMIN:
                        up_since[peer] = False
                    elif s is DOWN and up_since.get(peer):
                        up_since[peer] = False
                        if not stopping:
                            expected.append(Teardown(peer))
            case Configure(new, _):
                for peer in enabled - new:
                    up_since.pop(peer, None)
                enabled = set(new)
            case Stop():
                stopping = True
        assert list(t.teardowns) == expected


@given(steps, st.sampled_from(PEERS))
def test_one_peer_never_affects_another(steps: list[Step], peer: PeerName) -> None:
    """What the gate says about ``peer`` is the same whether or not the other peers'
    readings were given at all."""
    only: list[Step] = []
    for step in steps:
        if isinstance(step, Observe):
            mine = tuple(r for r in step.readings if r[0] == peer)
            if mine:
                only.append(Observe(mine))
        else:
            only.append(step)
    full, alone = run(steps, INITIAL), run(only, INITIAL)
    tear_full = [d for _, _, t in full for d in t.teardowns if d.peer == peer]
    tear_alone = [d for _, _, t in alone for d in t.teardowns if d.peer == peer]
    assert tear_full == tear_alone
    last_full = full[-1][2].state if full else INITIAL
    last_alone = alone[-1][2].state if alone else INITIAL
    assert gate.held(last_full).get(peer) == gate.held(last_alone).get(peer)


@given(steps)
def test_admin_down_never_tears_down(steps: list[Step]) -> None:
    """AdminDown from the router is not a failure (RFC 5882 section 3.2): a reading of
    AdminDown never yields a teardown, nor does the Down that follows it."""
    for step, before, t in run(steps, INITIAL):
        if isinstance(step, Observe):
            for peer, s in step.readings:
                if s is ADMIN or (before.states.get(peer) is ADMIN and s is DOWN):
                    assert all(d.peer != peer for d in t.teardowns)
