"""The Event budget: how many announce-change Events a node's speaker writes when many
Services change at once (a drain, a peer down, a new configuration over 10,000 Services),
and the one aggregated Event that stands for the rest. A pure state machine: no I/O, no
clock (every call takes `now`), no asyncio; the speaker's AnnouncementEvents
(k8s_watcher.writer) feeds it and hands what it returns to the EventRecorder.

What client-go does, and what we take from it. client-go's EventCorrelator
(tools/record/events_cache.go) has three stages: a spam filter (a token bucket per source
and involved object: burst 25, one more every 300 s), an aggregator (events "similar"
when source, involved object, type and reason match, i.e. all but the message: after 10
similar events within 600 s, the next ones become one Event "(combined from similar
events): ..."), and a logger folding identical events into one with a growing `count`.
Its similarity key contains the involved object, so a burst over 10,000 different
Services is 10,000 keys and nothing is aggregated: the per-object stages bound a flapping
Service, not a wide burst. EventRecorder already has the first and last stages per
object. This module adds the missing one across objects, keyed by the node: per window
of `window` seconds, at most `limit` Service Events go out one by one (the first ones,
which name their Service and show in `kubectl describe service`); every further change
only counts, per group (the Event's reason and its short cause, e.g. ("nodeUnassigned",
"draining")), and is reported in one aggregated Event per group on the Node, "combined"
as client-go's aggregate is: at once for the first overflow of a window, then once when
the window ends for what came after. So, whatever the burst:

* a window holds at most `limit` Service Events plus one aggregated Event per group
  (the aggregate that closes a window is sent at the start of the next and counts there);
* no change is lost from the counts: every offered change is either sent on its own or
  counted in exactly one aggregated Event (once `flush` ran after the last window).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

#: What one Service Event is about, opaque here (the writer's (Service, message)).
T = TypeVar("T")

#: Service Events sent one by one per window; client-go's spam burst is 25 per object,
#: its aggregation threshold 10 similar events: 100 Services named one by one is what a
#: person reads in `kubectl get events`, and what a drain of a small node fully names.
DEFAULT_LIMIT = 100
#: Seconds per window (client-go aggregates over 600 s; a drain and its cancel within a
#: minute should both be told, so the window is shorter).
DEFAULT_WINDOW = 60.0


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """One Service's announce change: its group (reason, cause) and the opaque item."""

    reason: str
    cause: str
    item: T


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregated Event: `count` changes of one group not sent one by one."""

    reason: str
    cause: str
    count: int


@dataclass(frozen=True, slots=True)
class Released(Generic[T]):
    """What to record now: Service Events one by one, and aggregated Events."""

    single: tuple[Change[T], ...] = ()
    aggregates: tuple[Aggregate, ...] = ()


@dataclass(slots=True)
class EventBudget(Generic[T]):
    """Per node: `offer` the changes of one pass, `flush` when `wake_at` has come (the
    speaker's timer, or the next pass). Both return what to record."""

    limit: int = DEFAULT_LIMIT
    window: float = DEFAULT_WINDOW
    #: Start of the current window; None before the first change.
    started: float | None = None
    #: Service Events sent one by one in the current window.
    used: int = 0
    #: Groups whose aggregated Event was sent in the current window.
    aggregated: set[tuple[str, str]] = field(default_factory=set)
    #: Changes counted, not yet reported, per group (insertion order: first seen first).
    pending: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def wake_at(self) -> float | None:
        """When `flush` has something to report (the current window's end), None if not."""
        if not self.pending or self.started is None:
            return None
        return self.started + self.window

    def _roll(self, now: float) -> list[Aggregate]:
        """A new window when the current one has ended: its counted changes go out as the
        new window's first aggregated Events."""
        if self.started is not None and now < self.started + self.window:
            return []
        self.started = now
        self.used = 0
        self.aggregated = set()
        out = [Aggregate(r, c, n) for (r, c), n in self.pending.items()]
        self.aggregated.update(self.pending)
        self.pending = {}
        return out

    def offer(self, now: float, changes: Iterable[Change[T]]) -> Released[T]:
        aggregates = self._roll(now)
        single: list[Change[T]] = []
        for change in changes:
            if self.used < self.limit:
                self.used += 1
                single.append(change)
                continue
            group = (change.reason, change.cause)
            self.pending[group] = self.pending.get(group, 0) + 1
        # The first overflow of a group in this window is told at once (a drain of a
        # large node is news now, not in a minute); later ones wait for the window's end.
        for group in [g for g in self.pending if g not in self.aggregated]:
            aggregates.append(Aggregate(*group, self.pending.pop(group)))
            self.aggregated.add(group)
        return Released(tuple(single), tuple(aggregates))

    def flush(self, now: float) -> Released[T]:
        """What is due at `now` (nothing before `wake_at`)."""
        return Released((), tuple(self._roll(now))) if self.pending else Released()


def total(released: Sequence[Released[T]]) -> int:
    """Changes accounted for by these releases (one by one plus aggregated counts)."""
    return sum(len(r.single) + sum(a.count for a in r.aggregates) for r in released)
