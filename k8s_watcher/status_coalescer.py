"""Which status objects to write now: the coalescing and rate limit behind the cluster's
status objects (ServiceBGPStatus, BGPNodeStatus), with no I/O and no clock.

The speaker hands over the whole desired state (object key -> content, `replace`) as
often as it likes; the API server is only written where the desired content differs
from what it holds, and within two limits:

* per object, at most one write per `interval` seconds: a Service whose routes flap
  100 times in a second costs one write, then one more with the state it settled in;
* overall, a token bucket of `rate` writes per second and `burst` at once: 10,000
  Services changing together are written at `rate`, oldest change first.

Nothing is ever lost: a key stays dirty until the content the API holds equals the
desired one (a change that returns to the written content before its turn is simply
dropped), so the last state is always written; a key missing from the desired state is
deleted; a failed write is retried after the delay the transport gives. The transport
(k8s_watcher.status_writer) asks `due(now)`, performs those writes and reports each with
`done` or `failed`; `wake_at(now)` says when to ask again.

What the API holds is kept only where it differs from the desired content (the dirty
keys): once the objects are written, a clean key's content is its desired one, so the
coalescer holds one entry per object, not two (at 30,000 Services a second dictionary
of 30,000 entries, ~1.3 MiB).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Float rounding allowed in times and tokens (a wake-up computed for a token must find
#: one).
_EPSILON = 1e-6


class _Unknown:
    """What the API server holds after a failed write: a timed-out request may have
    been carried out or not. Equal to no content, present or absent, so the key is
    written again whatever is desired."""


_UNKNOWN = _Unknown()


class _Absent:
    """What the API server holds for a key without an object."""


_ABSENT = _Absent()


@dataclass(frozen=True, slots=True)
class Write(Generic[K, V]):
    """One write to do: `value` None deletes the object."""

    key: K
    value: V | None


class Coalescer(Generic[K, V]):
    """Desired vs written status objects; see the module docstring."""

    def __init__(self, *, interval: float, rate: float, burst: int, now: float) -> None:
        if interval < 0 or rate <= 0 or burst < 1:
            raise ValueError("interval >= 0, rate > 0 and burst >= 1 are required")
        self.interval = interval
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._stamp = now
        self._desired: dict[K, V] = {}
        #: What the API server holds, for the dirty keys where it holds some content
        #: (_held_now: a dirty key not here has no object; a clean key holds its desired
        #: content, or no object when none is desired).
        self._held: dict[K, V | _Unknown] = {}
        #: Keys whose written content differs from the desired one, oldest change first
        #: (a dict keeps insertion order), with the time they became dirty.
        self._dirty: dict[K, float] = {}
        self._in_flight: set[K] = set()
        #: Key -> the earliest time it may be written again (interval, retry delay).
        self._not_before: dict[K, float] = {}
        #: Its size after the last _prune().
        self._pruned_size = 0
        #: Counters for tests, metrics and the benchmark.
        self.writes = 0
        self.failures = 0

    # ------------------------------------------------------------------ inputs

    def known(self, written: Mapping[K, V]) -> None:
        """What the API server holds already (the objects listed at start): a key whose
        desired content equals it is not written again, one not desired is deleted."""
        keys = written.keys() | self._desired.keys() | self._dirty.keys()
        for key in keys:
            self._hold(key, written.get(key, _ABSENT), self._stamp)

    def replace(self, desired: Mapping[K, V], now: float) -> None:
        """The whole desired state; keys not in it are to be deleted."""
        old = self._desired
        new = dict(desired)
        changed = list(old.keys() - new.keys())
        changed += [key for key, value in new.items() if key not in old or old[key] != value]
        held = [(key, self._held_now(key)) for key in changed]
        self._desired = new
        for key, content in held:
            self._hold(key, content, now)

    def _held_now(self, key: K) -> V | _Unknown | _Absent:
        """What the API server holds for `key`, as far as the writes done say."""
        if key in self._held:
            return self._held[key]
        if key in self._dirty:
            return _ABSENT
        return self._desired.get(key, _ABSENT)

    def _hold(self, key: K, content: V | _Unknown | _Absent, now: float) -> None:
        """The API server holds `content` for `key`: dirty (since `now`, unless it
        already was) where that differs from the desired content, clean where not."""
        desired = self._desired.get(key, _ABSENT)
        if isinstance(content, _Absent):
            same = desired is _ABSENT
        else:
            same = desired is not _ABSENT and content == desired
        if same:
            self._held.pop(key, None)
            if self._dirty.pop(key, None) is not None and not self._dirty:
                # A dictionary keeps its largest table when emptied: once the first
                # 30,000 writes are done, that is 1.3-2.5 MiB held for nothing.
                self._dirty = {}
            return
        if isinstance(content, _Absent):
            self._held.pop(key, None)
        else:
            self._held[key] = content
        self._dirty.setdefault(key, now)

    # ------------------------------------------------------------------ writes

    def due(self, now: float) -> list[Write[K, V]]:
        """The writes to start now (they are in flight until done/failed)."""
        self._refill(now)
        out: list[Write[K, V]] = []
        if self._tokens < 1.0 - _EPSILON:
            return out
        for key in self._dirty:
            if key in self._in_flight or self._not_before.get(key, now) > now + _EPSILON:
                continue
            out.append(Write(key, self._desired.get(key)))
            self._tokens -= 1.0
            if self._tokens < 1.0 - _EPSILON:
                break
        for write in out:
            self._in_flight.add(write.key)
            self._not_before[write.key] = now + self.interval
        self.writes += len(out)
        self._prune(now)
        return out

    def _prune(self, now: float) -> None:
        """Forget the write times that no longer hold anything back, once their number
        doubled since the last look (amortised: a write time is looked at about twice).
        Only the keys written within an interval or waiting for a retry need one: once
        every object is written, a time per object would be ~1.4 MiB at 30,000."""
        if len(self._not_before) > 2 * self._pruned_size + 1024:
            self._not_before = {k: t for k, t in self._not_before.items() if t > now}
            self._pruned_size = len(self._not_before)

    def done(self, write: Write[K, V]) -> None:
        """The API server now holds `write.value` (None: the object is gone)."""
        self._in_flight.discard(write.key)
        content = _ABSENT if write.value is None else write.value
        self._hold(write.key, content, self._dirty.get(write.key, self._stamp))

    def failed(self, write: Write[K, V], now: float, retry_in: float) -> None:
        """The write failed, or its outcome is unknown (a timeout): what the API server
        holds is unknown, so the key is written again after `retry_in`, even if the
        desired content returns to what was written before."""
        self.failures += 1
        self._in_flight.discard(write.key)
        self._hold(write.key, _UNKNOWN, now)
        self._not_before[write.key] = max(self._not_before.get(write.key, now), now + retry_in)

    def forget(self, key: K) -> None:
        """The API server's content of `key` is unknown (e.g. the object was not found
        where it was expected): it is written again if desired."""
        self._hold(key, _ABSENT, self._stamp)

    # ------------------------------------------------------------------ timing

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now

    def wake_at(self, now: float) -> float | None:
        """When `due` may return something next (None: nothing is pending; writes in
        flight wake the transport through done/failed)."""
        self._refill(now)
        first: float | None = None
        for key in self._dirty:
            if key in self._in_flight:
                continue
            at = self._not_before.get(key, now)
            if first is None or at < first:
                first = at
                if at <= now:
                    break
        if first is None:
            return None
        if self._tokens < 1.0 - _EPSILON:
            first = max(first, now + (1.0 - self._tokens) / self.rate)
        return max(first, now)

    # ------------------------------------------------------------------ introspection

    @property
    def pending(self) -> int:
        """Objects whose written content is not the desired one yet."""
        return len(self._dirty)

    def written(self) -> Mapping[K, V]:
        """What the API server holds, as far as the writes done say (keys whose last
        write failed are left out)."""
        out = {k: v for k, v in self._desired.items() if k not in self._dirty}
        for key, content in self._held.items():
            if not isinstance(content, _Unknown):
                out[key] = content
        return out
