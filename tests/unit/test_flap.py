"""The flap rule (bgpd.exabgp.flap): when a session is flapping and how long it is held
down. Issue 15 item 10: two speakers on one source address replace each other at the
router ~20 times a second (BIRD, graceful restart) with no back-off."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.exabgp.flap import (
    FlapPolicy,
    FlapState,
    held,
    hold_down_interval,
    on_down,
    release_at,
)

POLICY = FlapPolicy(downs=3, window=10.0, first=5.0, factor=2.0, cap=40.0, jitter=0.5, quiet=100.0)


def run(downs: list[float], rand: float = 0.0) -> list[float | None]:
    """The hold-down each down starts (None: none)."""
    state, out = FlapState(), []
    for at in downs:
        verdict = on_down(POLICY, state, at, rand)
        state = verdict.state
        out.append(verdict.hold_down)
    return out


@pytest.mark.parametrize(
    ("downs", "expected"),
    [
        pytest.param([0.0, 1.0], [None, None], id="two-downs-are-not-flapping"),
        pytest.param([0.0, 1.0, 2.0], [None, None, 5.0], id="third-within-window-holds"),
        pytest.param([0.0, 6.0, 12.0], [None, None, None], id="spread-over-window-is-not"),
        pytest.param(
            [0.0, 1.0, 2.0, 3.0, 4.0],
            [None, None, 5.0, None, None],
            id="downs-while-held-are-not-counted",
        ),
        pytest.param(
            [0.0, 1.0, 2.0, 7.0, 8.0, 9.0, 20.0, 21.0, 22.0],
            [None, None, 5.0, None, None, 10.0, None, None, 20.0],
            id="each-hold-down-of-an-episode-doubles",
        ),
        pytest.param(
            [0.0, 1.0, 2.0, 7.0, 8.0, 9.0, 200.0, 201.0, 202.0],
            [None, None, 5.0, None, None, 10.0, None, None, 5.0],
            id="quiet-ends-the-episode",
        ),
    ],
)
def test_flap_table(downs: list[float], expected: list[float | None]) -> None:
    assert run(downs) == expected


@pytest.mark.parametrize(
    ("level", "rand", "expected"),
    [
        pytest.param(0, 0.0, 5.0, id="first"),
        pytest.param(0, 0.5, 3.75, id="first-jittered"),
        pytest.param(3, 0.0, 40.0, id="capped"),
        pytest.param(10_000, 0.999, 40.0 * (1 - 0.5 * 0.999), id="huge-level-capped"),
    ],
)
def test_hold_down_interval(level: int, rand: float, expected: float) -> None:
    assert hold_down_interval(POLICY, level, rand) == pytest.approx(expected)


def test_held_until_the_interval_ends() -> None:
    state = FlapState()
    for at in (0.0, 1.0, 2.0):
        state = on_down(POLICY, state, at, 0.0).state
    assert held(state, 2.0)
    assert held(state, 6.99)
    assert not held(state, 7.0)
    assert not held(FlapState(), 0.0)


def test_release_at_is_the_next_end_of_a_hold_down_in_force() -> None:
    """The speaker's timer wakes then; ended and absent hold-downs do not count."""
    ends_at = [FlapState(held_until=t) for t in (7.0, 3.0, 12.0)]
    assert release_at(ends_at, 0.0) == 3.0
    assert release_at(ends_at, 3.0) == 7.0
    assert release_at(ends_at, 12.0) is None
    assert release_at([FlapState()], 0.0) is None


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=200.0), min_size=1, max_size=60),
    rands=st.lists(st.floats(min_value=0.0, max_value=0.999), min_size=60, max_size=60),
)
def test_hold_downs_are_bounded_spaced_and_never_overlap(
    gaps: list[float], rands: list[float]
) -> None:
    """Whatever the downs: every hold-down lies within [(1 - jitter) * first, cap]; one
    starts only after `downs` downs within `window` outside any hold-down; a new one
    never starts while one runs; within an episode none is shorter than its
    predecessor's ceiling allows (exponential up to the cap)."""
    state, at = FlapState(), 0.0
    counted: list[float] = []
    for gap, rand in zip(gaps, rands, strict=False):
        at += gap
        was_held = held(state, at)
        verdict = on_down(POLICY, state, at, rand)
        if was_held:
            assert verdict.hold_down is None
            assert verdict.state == state
            continue
        counted = [t for t in counted if at - t < POLICY.window] + [at]
        if verdict.hold_down is None:
            assert len(counted) < POLICY.downs
        else:
            assert len(counted) >= POLICY.downs
            counted = []
            assert (1 - POLICY.jitter) * POLICY.first <= verdict.hold_down <= POLICY.cap
            level = verdict.state.level - 1
            assert verdict.hold_down == hold_down_interval(POLICY, level, rand)
            assert verdict.state.held_until == at + verdict.hold_down
        state = verdict.state
