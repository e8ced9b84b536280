"""The drain state machine (bgpd.speaker.drain): table steps and properties over any
sequence of annotation values, operator requests and clock ticks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bgpd.exabgp.driver import DriverMode
from bgpd.speaker import drain
from bgpd.speaker.drain import DrainSource, DrainState, Transition

WINDOW = 10.0


@dataclass(frozen=True)
class Annotate:
    value: str | None


@dataclass(frozen=True)
class Request:
    pass


@dataclass(frozen=True)
class Tick:
    pass


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Cancel:
    pass


@dataclass(frozen=True)
class DataPlane:
    ready: bool


Step = Annotate | Request | Tick | Stop | Cancel | DataPlane

values = st.sampled_from([None, "true", "false", " TRUE ", "yes", "", "drain"])
steps = st.lists(
    st.tuples(
        st.one_of(
            values.map(Annotate),
            st.just(Request()),
            st.just(Tick()),
            st.just(Stop()),
            st.just(Cancel()),
            st.booleans().map(DataPlane),
        ),
        st.floats(min_value=0.0, max_value=WINDOW * 1.5),
    ),
    max_size=30,
)


def apply(state: DrainState, step: Step, now: float) -> Transition:
    match step:
        case Annotate(value):
            return drain.annotate(state, value, now)
        case Request():
            return drain.request(state, now)
        case Tick():
            return drain.tick(state, now)
        case Stop():
            return drain.stop(state)
        case Cancel():
            return drain.cancel(state, now)
        case DataPlane(ready):
            return drain.data_plane(state, ready, now)
    raise AssertionError(step)


def test_annotation_drain_then_window_then_removal() -> None:
    s = DrainState(window=WINDOW)
    t = drain.annotate(s, "true", 100.0)
    assert (t.mode, t.state.source, t.wake_at) == (
        DriverMode.DRAINING,
        DrainSource.ANNOTATION,
        110.0,
    )
    assert [e.name for e in t.events] == ["speaker.draining"]
    early = drain.tick(t.state, 105.0)
    assert (early.mode, early.wake_at) == (None, 110.0)
    done = drain.tick(t.state, 110.0)
    assert done.mode is DriverMode.WITHDRAWN
    assert [e.name for e in done.events] == ["speaker.drained"]
    ended = drain.annotate(done.state, None, 111.0)
    assert (ended.mode, ended.state.source) == (DriverMode.NORMAL, None)
    assert [e.name for e in ended.events] == ["speaker.undrained"]


def test_request_takes_over_an_annotation_drain_keeping_its_window() -> None:
    t = drain.annotate(DrainState(window=WINDOW), "true", 100.0)
    taken = drain.request(t.state, 104.0)
    assert taken.state.source is DrainSource.REQUEST
    assert taken.state.started == 100.0
    assert taken.mode is None
    kept = drain.annotate(taken.state, "false", 105.0)
    assert (kept.mode, kept.state.source, kept.state.started) == (None, DrainSource.REQUEST, 100.0)


@pytest.mark.parametrize(
    "withdrawn", [pytest.param(False, id="in-window"), pytest.param(True, id="after-window")]
)
def test_cancel_announces_normally_again(withdrawn: bool) -> None:
    t = drain.request(DrainState(window=WINDOW), 100.0)
    if withdrawn:
        t = drain.tick(t.state, 110.0)
        assert t.mode is DriverMode.WITHDRAWN
    back = drain.cancel(t.state, 111.0)
    assert (back.mode, back.state.source, back.state.started) == (DriverMode.NORMAL, None, None)
    assert [e.name for e in back.events] == ["speaker.drain_cancelled", "speaker.undrained"]
    assert back.wake_at is None


def test_cancel_hands_over_to_the_annotation_still_asking() -> None:
    t = drain.request(DrainState(window=WINDOW), 100.0)
    t = drain.annotate(t.state, "true", 101.0)
    back = drain.cancel(t.state, 102.0)
    assert back.mode is None
    assert (back.state.source, back.state.started) == (DrainSource.ANNOTATION, 100.0)
    # The annotation's removal then ends it.
    ended = drain.annotate(back.state, None, 103.0)
    assert ended.mode is DriverMode.NORMAL


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(DrainState(window=WINDOW), id="not-draining"),
        pytest.param(drain.annotate(DrainState(window=WINDOW), "true", 1.0).state, id="annotation"),
        pytest.param(
            drain.stop(drain.request(DrainState(window=WINDOW), 1.0).state).state, id="stopping"
        ),
    ],
)
def test_cancel_changes_nothing_it_does_not_own(state: DrainState) -> None:
    t = drain.cancel(state, 5.0)
    assert (t.state, t.mode, t.events) == (state, None, ())


def test_invalid_value_is_reported_once() -> None:
    t = drain.annotate(DrainState(window=WINDOW), "yes", 1.0)
    assert [e.name for e in t.events] == ["speaker.drain_annotation_invalid"]
    assert t.events[0].fields["kept"] == "announcing"
    assert drain.annotate(t.state, "yes", 2.0).events == ()
    assert len(drain.annotate(t.state, "no", 3.0).events) == 1


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param(None, False, id="absent"),
        pytest.param("true", True, id="true"),
        pytest.param(" True ", True, id="true-any-case"),
        pytest.param("false", False, id="false"),
        pytest.param("yes", None, id="not-understood"),
    ],
)
def test_first_annotation(value: str | None, want: bool | None) -> None:
    t = drain.annotate(DrainState(window=WINDOW), value, 0.0)
    assert t.state.draining is bool(want)


@given(steps)
def test_properties(sequence: list[tuple[Step, float]]) -> None:
    state = DrainState(window=WINDOW)
    clock = 0.0
    mode = DriverMode.NORMAL
    for step, advance in sequence:
        clock += advance
        before = state
        t = apply(state, step, clock)
        state = t.state
        if t.mode is not None:
            mode = t.mode
        # The driver mode the speaker sets is always the machine's.
        assert mode is state.mode
        # A requested drain is undone only by the operator's cancel.
        if before.source is DrainSource.REQUEST and not isinstance(step, Cancel):
            assert state.source is DrainSource.REQUEST
            assert state.mode is not DriverMode.NORMAL
        # A cancelled drain re-announces with normal attributes unless the annotation or
        # a failing data-plane check still asks for one (which then owns it, mode kept).
        if isinstance(step, Cancel) and before.source is DrainSource.REQUEST:
            if before.stopping:
                assert state == before
            elif before.annotated or not before.data_plane_ready:
                assert state.source is not DrainSource.REQUEST
                assert (state.mode, state.started) == (before.mode, before.started)
            else:
                assert (state.mode, state.source) == (DriverMode.NORMAL, None)
                assert t.mode is DriverMode.NORMAL
        # WITHDRAWN only once the window has passed.
        if state.mode is DriverMode.WITHDRAWN and before.mode is not DriverMode.WITHDRAWN:
            assert before.started is not None
            assert clock >= before.started + WINDOW
        # A drain ends only by whoever owns it: the annotation (true -> not true), the
        # data-plane check passing again, or the operator's cancel.
        if before.draining and not state.draining:
            match step:
                case Annotate(value):
                    assert before.source is DrainSource.ANNOTATION
                    assert drain.parse_annotation(value) is False
                case DataPlane(ready):
                    assert before.source is DrainSource.DATA_PLANE
                    assert ready
                case Cancel():
                    assert before.source is DrainSource.REQUEST
                case _:
                    raise AssertionError(f"{step} ended a {before.source} drain")
        # An invalid value keeps the state (only its report is remembered).
        if isinstance(step, Annotate) and drain.parse_annotation(step.value) is None:
            assert state.mode is before.mode
            assert state.source is before.source
            assert state.started == before.started
        # Stopping: the annotation and a cancel no longer change anything.
        if before.stopping and isinstance(step, Annotate | Cancel):
            assert state == before
        # A drain in its window always asks for a tick at its end.
        if state.mode is DriverMode.DRAINING and state.started != before.started:
            assert t.wake_at == state.withdraw_at
