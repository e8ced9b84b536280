"""k8s_watcher.status_coalescer: the writes of the cluster's status objects.

Properties over random histories of desired states, a transport that sometimes fails
and a clock that moves in random steps: a burst of changes makes a bounded number of
writes (per object at most one per interval, overall within the token bucket), the last
state is always written, nothing is written when nothing changed, and keys that leave
the desired state are deleted.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s_watcher.status_coalescer import Coalescer, Write

KEYS = ["a", "b", "c", "d", "e"]

states = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 3), max_size=len(KEYS))


@dataclass
class Api:
    """The objects the API server holds, and every write with its time."""

    held: dict[str, int] = field(default_factory=dict)
    log: list[tuple[float, Write[str, int]]] = field(default_factory=list)

    def apply(self, write: Write[str, int]) -> None:
        if write.value is None:
            self.held.pop(write.key, None)
        else:
            self.held[write.key] = write.value


def drive(c: Coalescer[str, int], api: Api, now: float, fail: bool = False) -> None:
    for w in c.due(now):
        api.log.append((now, w))
        if fail:
            c.failed(w, now, retry_in=0.5)
        else:
            api.apply(w)
            c.done(w)


def settle(c: Coalescer[str, int], api: Api, now: float) -> float:
    """Run the transport until nothing is pending; returns the time it took until."""
    for _ in range(1000):
        at = c.wake_at(now)
        if at is None:
            return now
        now = at
        drive(c, api, now)
    raise AssertionError("never settled")


steps = st.lists(st.tuples(st.floats(0.0, 0.7), states, st.booleans()), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    history=steps,
    interval=st.sampled_from([0.0, 0.3, 1.0]),
    rate=st.sampled_from([1.0, 5.0, 100.0]),
    burst=st.integers(1, 6),
    start=states,
)
def test_bounded_writes_and_last_state_written(
    history: list[tuple[float, dict[str, int], bool]],
    interval: float,
    rate: float,
    burst: int,
    start: dict[str, int],
) -> None:
    api = Api(held=dict(start))
    c: Coalescer[str, int] = Coalescer(interval=interval, rate=rate, burst=burst, now=0.0)
    c.known(start)
    now = 0.0
    for step, desired, fail in history:
        now += step
        c.replace(desired, now)
        drive(c, api, now, fail=fail)
        # What it says the API holds, it does (a failed write's object is unknown).
        assert c.written().items() <= api.held.items()
    end = settle(c, api, now)
    # The last state is what the API server holds; keys not desired were deleted.
    assert api.held == history[-1][1]
    assert c.written() == api.held
    assert c.pending == 0
    # Per object: two writes at least `interval` apart, within the coalescer's float
    # tolerance of 1e-6 s (Hypothesis found writes 0.3 s - 6e-8 apart at interval 0.3).
    times: dict[str, list[float]] = {}
    for at, w in api.log:
        times.setdefault(w.key, []).append(at)
    for seen in times.values():
        assert all(b - a >= interval - 1e-6 for a, b in itertools.pairwise(seen))
    # Overall: within the token bucket over every window.
    starts = [at for at, _ in api.log]
    for i, t0 in enumerate(starts):
        for j in range(i, len(starts)):
            assert j - i + 1 <= burst + rate * (starts[j] - t0) + 1e-6
    # Bounded: a burst of changes costs at most one write per object and interval.
    span = end - 0.0
    assert len(api.log) <= len(KEYS) * (span / interval + 2) if interval else True
    # Nothing more happens when nothing changes.
    c.replace(history[-1][1], end + 10)
    assert c.due(end + 10) == []
    assert c.wake_at(end + 10) is None


@settings(max_examples=100, deadline=None)
@given(desired=states)
def test_nothing_written_when_the_api_holds_it(desired: dict[str, int]) -> None:
    """After a restart, objects that are already right cost no write."""
    c: Coalescer[str, int] = Coalescer(interval=1.0, rate=10.0, burst=10, now=0.0)
    c.known(desired)
    c.replace(desired, 0.0)
    assert c.due(0.0) == []
    assert c.wake_at(0.0) is None


def test_a_burst_of_changes_to_one_object_is_two_writes() -> None:
    """1,000 changes within one interval: the first is written at once, the last one
    after the interval, nothing in between."""
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=1.0, rate=100.0, burst=100, now=0.0)
    for i in range(1000):
        c.replace({"a": i}, i / 1000)
        drive(c, api, i / 1000)
    settle(c, api, 0.999)
    assert [(t, w.value) for t, w in api.log] == [(0.0, 0), (1.0, 999)]


def test_a_change_undone_before_its_turn_is_not_written() -> None:
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=1.0, rate=100.0, burst=100, now=0.0)
    c.replace({"a": 1}, 0.0)
    drive(c, api, 0.0)
    c.replace({"a": 2}, 0.2)
    c.replace({"a": 1}, 0.4)
    assert c.wake_at(0.4) is None
    assert len(api.log) == 1


def test_many_objects_are_written_at_the_rate_oldest_first() -> None:
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=1.0, rate=10.0, burst=5, now=0.0)
    c.replace({f"s{i:03}": 1 for i in range(100)}, 0.0)
    drive(c, api, 0.0)
    assert [w.key for _, w in api.log] == ["s000", "s001", "s002", "s003", "s004"]
    end = settle(c, api, 0.0)
    assert len(api.log) == 100
    assert end == pytest.approx(9.5)


def test_stale_objects_known_at_start_are_deleted() -> None:
    api = Api(held={"old": 1, "kept": 2})
    c: Coalescer[str, int] = Coalescer(interval=1.0, rate=10.0, burst=5, now=0.0)
    c.known(dict(api.held))
    c.replace({"kept": 2}, 0.0)
    settle(c, api, 0.0)
    assert [w for _, w in api.log] == [Write("old", None)]


def test_a_failed_write_is_retried_after_the_delay() -> None:
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=0.0, rate=10.0, burst=5, now=0.0)
    c.replace({"a": 1}, 0.0)
    drive(c, api, 0.0, fail=True)
    assert c.wake_at(0.0) == pytest.approx(0.5)
    assert c.due(0.4) == []
    settle(c, api, 0.4)
    assert api.held == {"a": 1}
    assert c.failures == 1


def test_forget_writes_again() -> None:
    """An object deleted behind the writer's back (404) is written again."""
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=0.0, rate=10.0, burst=5, now=0.0)
    c.replace({"a": 1}, 0.0)
    settle(c, api, 0.0)
    c.forget("a")
    assert [w.key for w in c.due(1.0)] == ["a"]


@pytest.mark.parametrize(
    ("interval", "rate", "burst"),
    [
        pytest.param(-1.0, 1.0, 1, id="negative-interval"),
        pytest.param(1.0, 0.0, 1, id="no-rate"),
        pytest.param(1.0, 1.0, 0, id="no-burst"),
    ],
)
def test_bad_limits_are_refused(interval: float, rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="required"):
        Coalescer(interval=interval, rate=rate, burst=burst, now=0.0)


def test_after_a_failed_write_the_object_is_written_again_even_if_unchanged() -> None:
    """A timed-out delete may have happened: when the desired content returns to the
    one written before, it is written again (not taken as already there)."""
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=0.0, rate=10.0, burst=5, now=0.0)
    c.replace({"a": 1}, 0.0)
    settle(c, api, 0.0)
    c.replace({}, 1.0)
    [w] = c.due(1.0)
    api.apply(w)  # the server deleted it, but the answer was lost
    c.failed(w, 1.0, retry_in=0.5)
    c.replace({"a": 1}, 1.1)
    settle(c, api, 1.1)
    assert api.held == {"a": 1}


def test_once_written_an_object_is_held_once_and_keeps_no_write_time() -> None:
    """Structure: before and after the writes, the coalescer holds each object's desired
    content and nothing else per object: not the content the API holds beside it (none,
    then the same), not the time of its last write (past its interval it holds nothing
    back)."""
    api = Api()
    c: Coalescer[str, int] = Coalescer(interval=1.0, rate=1000.0, burst=1000, now=0.0)
    desired = {f"s{i}": i % 3 for i in range(20_000)}
    c.replace(desired, 0.0)
    assert c._held == {}  # nothing written yet: no content of its own per object
    now = 0.0
    while c.pending:
        drive(c, api, now)
        now += 1.0
    assert api.held == desired == c.written()
    assert c._held == {}
    assert sys.getsizeof(c._dirty) < 1024  # not the table of 20,000 dirty keys
    # Only the writes of about the last interval, twice over, plus the slack of 1,024.
    assert len(c._not_before) <= 2 * 1000 + 1024 < len(desired)
