"""The per-route metric families, encoded row by row so a scrape re-encodes only what changed.

At 10,000s of routes nearly all of ``/metrics`` is two families: ``service_announced`` (a
line per route and Service) and ``service_serving_endpoints`` (a line per Service).
Encoding them whole takes 0.3-0.6 s of CPU at 10,000 routes, in a thread that holds the
interpreter while the event loop has a route change to send; with ``/metrics`` scraped
back to back that was a change's latency. So each row's text (a route's lines, a
Service's line) is kept from the scrape before, with the objects it was built from, and a
scrape re-encodes only the rows whose objects changed:

* a route the Decider rebuilt (it keeps the Route object of a route that came out
  equal, so a new object is a changed or new route),
* a route whose prefix became or stopped being advertised to its peer (the set
  difference of the two advertised copies' prefixes),
* a Service whose EndpointSlices changed (the cluster source keeps the slice tuple of a
  Service it did not touch) or that became one this speaker handles.

Finding those rows costs passes at C speed over the rows (ids, set differences,
identity comparisons through ``map``), no Python per row, and the body is one join: a
scrape after one change costs the changed rows plus about a millisecond at 10,000
routes. Nothing here is a second copy of the state that can go stale: each row's text is
what the encoder gave for frozen objects still compared by identity at every scrape,
and the rows themselves are read from the live decision, advertised routes and snapshot
at scrape time (bgpd.metrics).

The text of every line comes from prometheus_client's own encoder (`LineEncoder`): the
rows to encode go into one throwaway family encoded at once, and since each sample is one
line (label values escape newlines) the lines are handed back to their rows in order.
The body is byte for byte what the encoder gives for the whole family, in either format
(tests/unit/test_metric_rows.py holds this as a property over sequences of changes).

Must not import the driver, the reconciler or the watcher: the inputs are bgpd.model
types, as for bgpd.metrics.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from bgpd.decision import prefix_text
from bgpd.model import (
    DesiredRoutes,
    EndpointSlice,
    IPNetwork,
    PeerName,
    Route,
    ServiceKey,
    Skip,
    SkipReason,
)

#: One sample of a row: its label values (in the family's label order) and its value.
Labelled = tuple[list[str], float]

#: Metric families -> their text alone, in one exposition format (no OpenMetrics "# EOF").
FamiliesText = Callable[[list[Metric]], bytes]

_NO_ROUTES: Mapping[IPNetwork, object] = {}


class LineEncoder:
    """One gauge family's samples as text lines, written by the encoder of one exposition
    format (prometheus_client's: the format has one writer here)."""

    def __init__(
        self, text: FamiliesText, name: str, documentation: str, labels: Sequence[str]
    ) -> None:
        self._text = text
        self._name = name
        self._documentation = documentation
        self._labels = list(labels)
        #: The family's HELP and TYPE lines: what the encoder writes for it with no sample.
        self.header = text([self._family(())])

    def _family(self, samples: Iterable[Labelled]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labels)
        for values, value in samples:
            family.add_metric(values, value)
        return family

    def lines(self, samples: Sequence[Labelled]) -> list[bytes]:
        """The line of each sample, in order (each ends with a newline)."""
        if not samples:
            return []
        text = self._text([self._family(samples)])
        # Rows get their lines back by position: an encoder that wrote a gauge otherwise
        # than as its header and one line per sample fails here, not as a wrong body.
        if not text.startswith(self.header):
            raise RuntimeError(f"{self._name}: the encoder's header changed between calls")
        lines = text[len(self.header) :].split(b"\n")
        # The text ends with a newline: the split leaves one empty piece after it.
        if len(lines) != len(samples) + 1 or lines[-1]:
            raise RuntimeError(
                f"{self._name}: the encoder wrote {len(lines) - 1} lines for {len(samples)} samples"
            )
        return [line + b"\n" for line in lines[:-1]]


class Encoded(Protocol):
    """What one family's rows were encoded to at the last scrape: its body (header and
    rows) and what the next scrape needs to re-encode only the changed rows."""

    @property
    def body(self) -> bytes: ...


class Rows(Protocol):
    """A per-route family's samples, as rows that can be encoded one by one."""

    def samples(self) -> Iterator[Labelled]:
        """Every sample, in the family's order (what any other reader of the family gets)."""
        ...

    def encode(self, kept: Encoded | None, lines: LineEncoder) -> Encoded:
        """The family's body, re-encoding only the rows that differ from ``kept`` (what
        the last call returned for this family and format; None: encode every row)."""
        ...


# --------------------------------------------------------------------------- announced


@dataclass(slots=True, eq=False)
class _AnnouncedText:
    routes: tuple[Route, ...]
    advertised: DesiredRoutes
    #: id(route) -> its lines, for exactly the routes in `routes`: those are held, so no
    #: other object can have their ids meanwhile, and an id in here is that route.
    lines: dict[int, bytes] = field(default_factory=dict)
    #: peer -> prefix -> the route at it: where a prefix's advertised state shows.
    at: dict[PeerName, dict[IPNetwork, Route]] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class AnnouncedRows:
    """``service_announced``: per route (in the decision's order) a line per Service it
    carries, 1 while the route's prefix is advertised to its peer, else 0."""

    routes: tuple[Route, ...]
    advertised: DesiredRoutes

    def _route_samples(self, route: Route) -> list[Labelled]:
        value = 1 if route.prefix in self.advertised.get(route.peer, _NO_ROUTES) else 0
        prefix = prefix_text(route.prefix)
        return [([svc, prefix, route.peer], value) for svc in route.services]

    def samples(self) -> Iterator[Labelled]:
        for route in self.routes:
            yield from self._route_samples(route)

    def encode(self, kept: Encoded | None, lines: LineEncoder) -> Encoded:
        last = kept if isinstance(kept, _AnnouncedText) else None
        if last is not None and last.routes is self.routes and last.advertised is self.advertised:
            return last
        text = _AnnouncedText(self.routes, self.advertised)
        if last is not None:
            # The last scrape's routes are still held (last.routes), so the ids compare
            # the objects; its dictionaries pass on to this one.
            text.lines, text.at = last.lines, last.at
        known, at = text.lines, text.at
        ids = list(map(id, self.routes))
        new: list[Route] = []
        if last is None or last.routes is not self.routes:  # else only advertised changed
            new = list(compress(self.routes, map(operator.not_, map(known.__contains__, ids))))
            if last is not None and len(known) != len(ids) - len(new):  # some route is gone
                now = set(ids)
                before = last.routes
                for route in compress(
                    before, map(operator.not_, map(now.__contains__, map(id, before)))
                ):
                    known.pop(id(route), None)
                    if (peer := at.get(route.peer)) is not None and peer.get(route.prefix) is route:
                        del peer[route.prefix]
            for route in new:
                at.setdefault(route.peer, {})[route.prefix] = route
        stale = {id(r): r for r in new}
        if last is not None and last.advertised is not self.advertised:
            for route in self._flipped(last.advertised, at):
                stale.setdefault(id(route), route)
        self._encode_routes(list(stale.values()), known, lines)
        text.body = lines.header + b"".join(map(known.__getitem__, ids))
        return text

    def _flipped(
        self, before: DesiredRoutes, at: Mapping[PeerName, Mapping[IPNetwork, Route]]
    ) -> Iterator[Route]:
        """The routes whose prefix was advertised ``before`` and is not now, or the other
        way round. The set operations use the prefixes' stored hashes (hashing an
        ipaddress network is Python code), so this is a C-speed pass per peer."""
        for peer in before.keys() | self.advertised.keys():
            flipped = set(before.get(peer, _NO_ROUTES))
            flipped.symmetric_difference_update(self.advertised.get(peer, _NO_ROUTES))
            routes = at.get(peer)
            if routes is None:
                continue
            for prefix in flipped:
                if (route := routes.get(prefix)) is not None:
                    yield route

    def _encode_routes(
        self, routes: list[Route], known: dict[int, bytes], lines: LineEncoder
    ) -> None:
        samples = [self._route_samples(r) for r in routes]
        text = lines.lines(list(chain.from_iterable(samples)))
        start = 0
        for route, mine in zip(routes, samples, strict=True):
            end = start + len(mine)
            known[id(route)] = b"".join(text[start:end])
            start = end


# --------------------------------------------------------------------------- serving


def handled_services(routes: Iterable[Route], skipped: Iterable[Skip]) -> set[ServiceKey]:
    """The Services this speaker is responsible for: every Service the decision routed or
    skipped for a reason other than belonging to another load-balancer class, exactly the
    Services an operator expects some node to announce."""
    skips = list(skipped)
    ours = map(
        operator.is_not, map(operator.attrgetter("reason"), skips), repeat(SkipReason.NOT_OUR_CLASS)
    )
    keys = set(chain.from_iterable(map(operator.attrgetter("services"), routes)))
    keys.update(compress(map(operator.attrgetter("service"), skips), ours))
    return keys


def serving_count(slices: Iterable[EndpointSlice]) -> int:
    """Endpoints in these EndpointSlices that can serve (Endpoint.can_serve)."""
    return sum(1 for s in slices for ep in s.endpoints if ep.can_serve)


#: A snapshot's EndpointSlices per Service (ClusterSnapshot.endpoint_slices).
SlicesOf = Mapping[ServiceKey, tuple[EndpointSlice, ...]]


@dataclass(slots=True, eq=False)
class _ServingText:
    routes: tuple[Route, ...]
    skipped: tuple[Skip, ...]
    slices: SlicesOf | None
    #: handled_services(), sorted.
    keys: list[ServiceKey] = field(default_factory=list)
    #: A plain dictionary copy of `slices` (its get() runs at C speed; the source's
    #: mapping may be a Python class), whose tuples the next scrape compares by identity.
    copy: dict[ServiceKey, tuple[EndpointSlice, ...]] = field(default_factory=dict)
    lines: dict[ServiceKey, bytes] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class ServingRows:
    """``service_serving_endpoints``: per Service this speaker handles (handled_services,
    sorted) the endpoints in the cluster that can serve. The count is cluster-wide (every
    speaker sees the whole cluster), so the alert "serving endpoints but no node announces
    it" can take the max across nodes and compare it with the announced series. No rows
    without a snapshot."""

    routes: tuple[Route, ...]
    skipped: tuple[Skip, ...]
    slices: SlicesOf | None

    def samples(self) -> Iterator[Labelled]:
        if self.slices is None:
            return
        slices = self.slices
        for key in sorted(handled_services(self.routes, self.skipped)):
            yield [key], serving_count(slices.get(key, ()))

    def encode(self, kept: Encoded | None, lines: LineEncoder) -> Encoded:
        last = kept if isinstance(kept, _ServingText) else None
        if (
            last is not None
            and last.routes is self.routes
            and last.skipped is self.skipped
            and last.slices is self.slices
        ):
            return last
        text = _ServingText(self.routes, self.skipped, self.slices)
        if self.slices is None:
            text.body = lines.header
            return text
        stale: set[ServiceKey]
        if last is None or last.slices is None:
            stale = handled_services(self.routes, self.skipped)
            text.keys = sorted(stale)
            text.copy = dict(self.slices.items())
        else:
            text.keys, text.lines = last.keys, last.lines
            text.copy = last.copy
            stale = set()
            if last.routes is not self.routes or last.skipped is not self.skipped:
                stale = self._rekey(text)
            if last.slices is not self.slices:
                text.copy = dict(self.slices.items())
                before, now = last.copy.get, text.copy.get
                stale.update(
                    compress(
                        text.keys, map(operator.is_not, map(before, text.keys), map(now, text.keys))
                    )
                )
        keys = sorted(stale)
        copy = text.copy
        encoded = lines.lines([([k], serving_count(copy.get(k, ()))) for k in keys])
        text.lines.update(zip(keys, encoded, strict=True))
        text.body = lines.header + b"".join(map(text.lines.__getitem__, text.keys))
        return text

    def _rekey(self, text: _ServingText) -> set[ServiceKey]:
        """Brings text.keys to the handled Services now; returns the ones added."""
        handled = handled_services(self.routes, self.skipped)
        # text.lines has a line for each Service handled at the last scrape, no other.
        # One pass finds the new ones; when the others are all still handled (the sizes
        # say so), no second pass over 10,000s of keys looks for gone ones.
        added = handled.difference(text.lines)
        removed: set[ServiceKey] = set()
        if len(handled) - len(added) != len(text.lines):
            removed = text.lines.keys() - handled
        keys = text.keys
        if len(added) + len(removed) > len(keys) // 8:
            text.keys = sorted(handled)
        else:
            for key in removed:
                del keys[bisect.bisect_left(keys, key)]
            for key in added:
                bisect.insort(keys, key)
        for key in removed:
            del text.lines[key]
        return added
