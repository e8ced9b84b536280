"""The Event budget (k8s_watcher.event_budget) and AnnouncementEvents through it: a burst
over any number of Services records a bounded number of Events per window, no change is
lost from the counts, and a drain that withdraws the node's routes is told per Service
and on the Node."""

from __future__ import annotations

from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.decision import decide
from bgpd.model import ClusterSnapshot, Decision, NodeName
from k8s_watcher.event_budget import Change, EventBudget, Released, total
from k8s_watcher.writer import (
    REASON_ANNOUNCING,
    REASON_NOT_ANNOUNCING,
    AnnouncementEvents,
    EventRecorder,
    EventType,
    ObjectRef,
    drain_event_text,
)

GROUPS = (("nodeUnassigned", "draining"), ("nodeUnassigned", "noEndpoints"), ("nodeAssigned", "a"))

#: A pass: (seconds after the previous one, [group index per change]).
passes = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=200.0, allow_nan=False),
        st.lists(st.integers(0, len(GROUPS) - 1), max_size=400),
    ),
    max_size=30,
)


def _changes(groups: list[int]) -> list[Change[int]]:
    return [Change(*GROUPS[g], i) for i, g in enumerate(groups)]


def _run(
    limit: int, window: float, steps: list[tuple[float, list[int]]]
) -> tuple[EventBudget[int], list[tuple[float, Released[int]]]]:
    """Offer each pass, flushing whenever a wake-up came due in between (as the speaker's
    timer does); the final flush comes after the last window."""
    budget: EventBudget[int] = EventBudget(limit=limit, window=window)
    now = 0.0
    out: list[tuple[float, Released[int]]] = []
    for gap, groups in steps:
        target = now + gap
        while (wake := budget.wake_at) is not None and wake <= target:
            out.append((wake, budget.flush(wake)))
        now = target
        out.append((now, budget.offer(now, _changes(groups))))
    while (wake := budget.wake_at) is not None:
        out.append((wake, budget.flush(wake)))
    return budget, out


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(0, 50),
    window=st.floats(min_value=1.0, max_value=120.0, allow_nan=False),
    steps=passes,
)
def test_no_change_is_lost_from_the_counts(
    limit: int, window: float, steps: list[tuple[float, list[int]]]
) -> None:
    budget, out = _run(limit, window, steps)
    assert not budget.pending
    assert total([r for _, r in out]) == sum(len(g) for _, g in steps)
    # Per group, too: an aggregate never mixes causes.
    for index, group in enumerate(GROUPS):
        offered = sum(g.count(index) for _, g in steps)
        sent = sum(
            sum(1 for c in r.single if (c.reason, c.cause) == group)
            + sum(a.count for a in r.aggregates if (a.reason, a.cause) == group)
            for _, r in out
        )
        assert sent == offered


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(0, 50),
    window=st.floats(min_value=1.0, max_value=120.0, allow_nan=False),
    steps=passes,
)
def test_any_window_holds_a_bounded_number_of_events(
    limit: int, window: float, steps: list[tuple[float, list[int]]]
) -> None:
    """Any interval as long as a window (not only the budget's own windows) holds at most
    two windows' worth: 2 x (limit + one aggregate per group), whatever the burst."""
    _, out = _run(limit, window, steps)
    events = [(at, len(r.single) + len(r.aggregates)) for at, r in out]
    bound = 2 * (limit + len(GROUPS))
    for start, _ in events:
        inside = sum(n for at, n in events if start <= at < start + window)
        assert inside <= bound


def test_ten_thousand_services_in_one_pass() -> None:
    budget: EventBudget[int] = EventBudget(limit=100, window=60.0)
    first = budget.offer(0.0, [Change("nodeUnassigned", "draining", i) for i in range(10_000)])
    assert [c.item for c in first.single] == list(range(100))
    assert [(a.reason, a.cause, a.count) for a in first.aggregates] == [
        ("nodeUnassigned", "draining", 9_900)
    ]
    # More in the same window only count, and are told when the window ends.
    again = budget.offer(10.0, [Change("nodeUnassigned", "draining", i) for i in range(500)])
    assert again == Released()
    assert budget.wake_at == 60.0
    assert budget.flush(59.0) == Released()
    late = budget.flush(60.0)
    assert [(a.cause, a.count) for a in late.aggregates] == [("draining", 500)]
    assert budget.wake_at is None


class _Collector(EventRecorder):
    """Keeps what AnnouncementEvents records, instead of queueing it for the API."""

    def __init__(self) -> None:
        self.seen: list[tuple[ObjectRef, EventType, str, str]] = []

    def record(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool:
        self.seen.append((ref, type_, reason, message))
        return True


N1 = NodeName("n1")


def _setup(
    count: int,
) -> tuple[AnnouncementEvents, _Collector, list[float], ClusterSnapshot, Decision]:
    services = [svc(f"default/s{i}", f"198.51.{i // 250}.{i % 250 + 1}") for i in range(count)]
    snapshot = cluster(services, [eps(s.key, ep("n1")) for s in services], [node("n1")])
    cfg = config(
        pools=[pool("v4", "198.51.0.0/16")],
        peers=[peer("tor", "172.31.250.1")],
        advertisements=[adv()],
    )
    clock = [0.0]
    recorder = _Collector()
    events = AnnouncementEvents(
        recorder,
        N1,
        budget=EventBudget(limit=100, window=60.0),
        clock=lambda: clock[0],
    )
    first = decide(cfg, snapshot, N1)
    events.observe(None, first, snapshot.services)
    return events, recorder, clock, snapshot, first


def test_a_burst_of_ten_thousand_announces_is_bounded() -> None:
    events, recorder, _, _, _ = _setup(10_000)
    on_services = [e for e in recorder.seen if e[0].kind == "Service"]
    on_node = [e for e in recorder.seen if e[0].kind == "Node"]
    assert len(on_services) == 100
    assert {e[2] for e in on_services} == {REASON_ANNOUNCING}
    assert len(on_node) == 1
    ref, type_, reason, message = on_node[0]
    assert (ref.name, ref.uid, type_, reason) == ("n1", "n1", EventType.NORMAL, REASON_ANNOUNCING)
    assert "started announcing 9900 more Services" in message
    assert events.wake_at is None


def test_a_drain_tells_every_service_and_the_node() -> None:
    events, recorder, clock, _, _ = _setup(150)
    recorder.seen.clear()
    clock[0] = 61.0
    events.set_withdrawn(True)
    stopped = [e for e in recorder.seen if e[0].kind == "Service"]
    assert len(stopped) == 100
    assert stopped[0][2:] == (REASON_NOT_ANNOUNCING, "node 'n1' stopped announcing: draining")
    (aggregate,) = [e for e in recorder.seen if e[0].kind == "Node"]
    assert "stopped announcing 50 more Services: draining" in aggregate[3]
    # Set twice: nothing new.
    recorder.seen.clear()
    events.set_withdrawn(True)
    assert recorder.seen == []
    # The drain ends in the same window, past the budget: one aggregate on the Node now.
    events.set_withdrawn(False)
    (back,) = recorder.seen
    assert back[0].kind == "Node"
    assert "started announcing 150 more Services" in back[3]
    # A second drain in that window: its group was told already; counted, told at its end.
    recorder.seen.clear()
    events.set_withdrawn(True)
    assert recorder.seen == []
    assert events.wake_at == 121.0
    clock[0] = 121.0
    events.flush()
    (late,) = recorder.seen
    assert late[0].kind == "Node"
    assert "stopped announcing 150 more Services: draining" in late[3]


def test_while_withdrawn_decisions_record_nothing() -> None:
    events, recorder, _, snapshot, first = _setup(3)
    events.set_withdrawn(True)
    recorder.seen.clear()
    cfg = config(pools=[pool("v4", "198.51.0.0/16")], peers=[], advertisements=[adv()])
    events.observe(first, decide(cfg, snapshot, N1), snapshot.services)
    assert recorder.seen == []
    # Given back with no route left: nothing to announce again.
    events.set_withdrawn(False)
    assert recorder.seen == []


def test_drain_node_events() -> None:
    assert drain_event_text("speaker.draining", {"window": 30, "source": "request"}, N1) == (
        EventType.NORMAL,
        "DrainStarted",
        "node 'n1' is draining (asked by request): its routes carry GRACEFUL_SHUTDOWN "
        "and are withdrawn in 30s",
    )
    assert drain_event_text("speaker.drained", {}, N1) == (
        EventType.NORMAL,
        "Drained",
        "node 'n1' withdrew its routes: the drain window ended",
    )
    found = drain_event_text(
        "speaker.drain_annotation_invalid",
        {
            "annotation": "kube-bgpd.io/drain",
            "value": "yes",
            "expected": "true or false",
            "kept": "announcing",
        },
        N1,
    )
    assert found is not None
    assert found[:2] == (EventType.WARNING, "InvalidDrainAnnotation")
    assert drain_event_text("speaker.something_else", {}, N1) is None
