"""/metrics encodes the per-route families row by row (bgpd.metric_rows): after any
sequence of changes its body equals prometheus_client's encoding of the whole registry."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

from bgpd.metric_rows import (
    AnnouncedRows,
    Labelled,
    LineEncoder,
    ServingRows,
    _AnnouncedText,
    handled_services,
)
from bgpd.metrics import ExpositionCache, SpeakerMetrics, StaticSpeakerView
from bgpd.model import (
    ClusterSnapshot,
    Decision,
    DesiredRoutes,
    Endpoint,
    EndpointSlice,
    IPNetwork,
    NodeName,
    PeerName,
    Route,
    RouteAttributes,
    ServiceKey,
    Skip,
    SkipReason,
)

NODE = NodeName("node-a")
ATTRS = RouteAttributes()
PREFIXES: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("10.99.0.1/32"),
    ipaddress.ip_network("10.99.0.2/32"),
    ipaddress.ip_network("10.99.1.0/24"),
    ipaddress.ip_network("2001:db8::1/128"),
)
#: What Prometheus and other scrapers ask for: both formats, both name escapings.
ACCEPTS = (
    "",
    "application/openmetrics-text; version=1.0.0",
    "text/plain; version=1.0.0; escaping=allow-utf-8",
    "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
)
REASONS = (SkipReason.NO_ENDPOINTS, SkipReason.NOT_OUR_CLASS, SkipReason.NO_LOCAL_ENDPOINTS)

#: Label values as they may come from a config or the API, escaping included.
labels = st.text(min_size=1, max_size=6) | st.sampled_from(['a"b', "a\\nb", "a\nb", "ü", "x,y"])
#: Endpoint conditions: (ready, serving), Kubernetes' tri-state.
conditions = st.tuples(st.none() | st.booleans(), st.none() | st.booleans())


@dataclass(frozen=True)
class Step:
    """One state of the speaker, in indexes into the example's peers, prefixes and
    Services; `reuse`: keep the previous step's objects where the value is equal (as the
    Decider, the driver and the cluster source do), else new equal objects."""

    routes: Mapping[tuple[int, int], tuple[int, ...]]
    advertised: frozenset[tuple[int, int]]
    skipped: tuple[tuple[int, SkipReason], ...]
    slices: Mapping[int, tuple[tuple[bool | None, bool | None], ...]]
    no_snapshot: bool
    reuse: bool
    accepts: tuple[str, ...]


def steps(peers: int, services: int) -> st.SearchStrategy[Step]:
    at = st.tuples(st.integers(0, peers - 1), st.integers(0, len(PREFIXES) - 1))
    svc = st.integers(0, services - 1)
    return st.builds(
        Step,
        routes=st.dictionaries(at, st.lists(svc, min_size=1, max_size=3, unique=True).map(tuple)),
        advertised=st.frozensets(at),
        skipped=st.lists(st.tuples(svc, st.sampled_from(REASONS)), max_size=3).map(tuple),
        slices=st.dictionaries(svc, st.lists(conditions, max_size=3).map(tuple)),
        no_snapshot=st.booleans(),
        reuse=st.booleans(),
        accepts=st.lists(st.sampled_from(ACCEPTS), min_size=1, max_size=3).map(tuple),
    )


@dataclass
class World:
    """Builds each step's objects, reusing the previous ones as the live speaker does."""

    peers: list[PeerName]
    services: list[ServiceKey]
    routes: dict[tuple[int, int], Route] = field(default_factory=dict)
    advertised: tuple[frozenset[tuple[int, int]], DesiredRoutes] | None = None
    slices: dict[int, tuple[EndpointSlice, ...]] = field(default_factory=dict)
    slices_map: Mapping[ServiceKey, tuple[EndpointSlice, ...]] | None = None

    def view(self, step: Step) -> StaticSpeakerView:
        routes: dict[tuple[int, int], Route] = {}
        for (p, x), svcs in step.routes.items():
            route = Route(self.peers[p], PREFIXES[x], ATTRS, tuple(self.services[s] for s in svcs))
            kept = self.routes.get((p, x))
            routes[(p, x)] = kept if step.reuse and kept == route else route
        self.routes = routes

        if not (step.reuse and self.advertised and self.advertised[0] == step.advertised):
            by_peer: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
            for p, x in sorted(step.advertised):
                by_peer.setdefault(self.peers[p], {})[PREFIXES[x]] = ATTRS
            self.advertised = (step.advertised, by_peer)

        slices: dict[int, tuple[EndpointSlice, ...]] = {}
        for s, eps in step.slices.items():
            key = self.services[s]
            made = (
                EndpointSlice(
                    namespace="default",
                    name=f"{key}-a",
                    service_name=key,
                    endpoints=tuple(Endpoint(ready=r, serving=v) for r, v in eps),
                ),
            )
            held = self.slices.get(s)
            slices[s] = held if step.reuse and held == made else made
        unchanged = slices.keys() == self.slices.keys() and all(
            slices[s] is self.slices[s] for s in slices
        )
        if self.slices_map is None or not (step.reuse and unchanged):
            mapping = {self.services[s]: t for s, t in slices.items()}
            # The source hands out read-only mappings; either kind must do.
            self.slices_map = MappingProxyType(mapping) if step.reuse else mapping
        self.slices = slices

        skipped = tuple(Skip(self.services[s], reason) for s, reason in step.skipped)
        return StaticSpeakerView(
            decision=Decision(node=NODE, routes=tuple(routes.values()), skipped=skipped),
            snapshot=None if step.no_snapshot else ClusterSnapshot(endpoint_slices=self.slices_map),
            accepted_routes=self.advertised[1],
            advertised_routes=self.advertised[1],
            running=True,
        )


class LiveView:
    """A view whose state the test swaps between scrapes."""

    def __init__(self) -> None:
        self.state = StaticSpeakerView()

    def __getattr__(self, name: str) -> object:
        return getattr(self.state, name)


@settings(max_examples=200, deadline=None)
@given(
    names=st.tuples(
        st.lists(labels, min_size=1, max_size=3, unique=True),
        st.lists(labels, min_size=1, max_size=4, unique=True),
    ).flatmap(lambda n: st.tuples(st.just(n), st.lists(steps(len(n[0]), len(n[1])), max_size=8)))
)
def test_the_body_after_any_changes_is_the_encoders(
    names: tuple[tuple[list[str], list[str]], list[Step]],
) -> None:
    (peers, services), walk = names
    world = World([PeerName(p) for p in peers], [ServiceKey(s) for s in services])
    live = LiveView()
    reg = CollectorRegistry()
    SpeakerMetrics(reg, live, node=NODE)  # type: ignore[arg-type]
    cache = ExpositionCache()
    for step in walk:
        live.state = world.view(step)
        for accept in step.accepts:
            encoder, content_type = choose_encoder(accept)
            body = cache.encode(encoder, content_type, list(reg.collect()))
            assert body == encoder(reg)


@dataclass
class _Families:
    families: list[Metric]

    def collect(self) -> Iterable[Metric]:
        return self.families


def _text(families: list[Metric]) -> bytes:
    """The families in Prometheus' text format (which has no trailer)."""
    encoder, _ = choose_encoder("")
    return encoder(_Families(families))


def test_line_encoder_gives_a_line_per_sample_escaped_as_the_encoder_does() -> None:
    lines = LineEncoder(_text, "kube_bgpd_x", "Doc.", ["service"])
    assert lines.header == b"# HELP kube_bgpd_x Doc.\n# TYPE kube_bgpd_x gauge\n"
    assert lines.lines([(['a"b\nc'], 1), (["d"], 0)]) == [
        b'kube_bgpd_x{service="a\\"b\\nc"} 1.0\n',
        b'kube_bgpd_x{service="d"} 0.0\n',
    ]
    assert lines.lines([]) == []


@pytest.mark.parametrize(
    ("skipped", "expected"),
    [
        pytest.param((), {"a/web"}, id="routed"),
        pytest.param(
            (Skip(ServiceKey("a/dns"), SkipReason.NO_ENDPOINTS),), {"a/web", "a/dns"}, id="skipped"
        ),
        pytest.param(
            (Skip(ServiceKey("a/other"), SkipReason.NOT_OUR_CLASS),), {"a/web"}, id="other-class"
        ),
    ],
)
def test_handled_services(skipped: tuple[Skip, ...], expected: set[str]) -> None:
    route = Route(PeerName("r"), PREFIXES[0], ATTRS, (ServiceKey("a/web"),))
    assert handled_services((route,), skipped) == expected


def test_an_unchanged_state_returns_the_same_encoding() -> None:
    """A scrape of an unchanged speaker encodes no row and joins nothing: the same
    objects give back the last encoding itself."""
    routes = (Route(PeerName("r"), PREFIXES[0], ATTRS, (ServiceKey("a/web"),)),)
    advertised: DesiredRoutes = {PeerName("r"): {PREFIXES[0]: ATTRS}}
    slices: dict[ServiceKey, tuple[EndpointSlice, ...]] = {}
    lines = LineEncoder(_text, "kube_bgpd_x", "Doc.", ["service", "prefix", "peer"])
    announced = AnnouncedRows(routes, advertised).encode(None, lines)
    assert AnnouncedRows(routes, advertised).encode(announced, lines) is announced
    serving = ServingRows(routes, (), slices).encode(None, lines)
    assert ServingRows(routes, (), slices).encode(serving, lines) is serving


def test_the_rows_of_gone_routes_are_not_kept() -> None:
    """Routes that left the decision leave the kept rows (and their prefixes' index) at
    the next scrape: nothing grows with the routes seen since start."""
    lines = LineEncoder(_text, "kube_bgpd_x", "Doc.", ["service", "prefix", "peer"])
    peer = PeerName("r")
    many = tuple(Route(peer, p, ATTRS, (ServiceKey("a/web"),)) for p in PREFIXES)
    encoded = AnnouncedRows(many, {}).encode(None, lines)
    encoded = AnnouncedRows(many[:1], {}).encode(encoded, lines)
    assert isinstance(encoded, _AnnouncedText)
    assert list(encoded.lines) == [id(many[0])]
    assert encoded.at == {peer: {PREFIXES[0]: many[0]}}


def test_rows_are_kept_for_the_formats_asked_for_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scraper making up Accept versions cannot make the speaker keep a copy of the
    rows per version: the oldest format asked for is dropped (and encoded again if
    asked for again)."""
    encoded: list[int] = []
    real = LineEncoder.lines

    def counting(self: LineEncoder, samples: Sequence[Labelled]) -> list[bytes]:
        encoded.append(len(samples))
        return real(self, samples)

    monkeypatch.setattr(LineEncoder, "lines", counting)
    route = Route(PeerName("r"), PREFIXES[0], ATTRS, (ServiceKey("a/web"),))
    live = LiveView()
    live.state = StaticSpeakerView(decision=Decision(node=NODE, routes=(route,)))
    reg = CollectorRegistry()
    SpeakerMetrics(reg, live, node=NODE)  # type: ignore[arg-type]
    cache = ExpositionCache()
    versions = [f"application/openmetrics-text; version=1.0.{n}" for n in range(3)]

    def scrape(accept: str) -> int:
        encoded.clear()
        encoder, content_type = choose_encoder(accept)
        assert cache.encode(encoder, content_type, list(reg.collect())) == encoder(reg)
        return sum(encoded)

    assert [scrape(v) for v in versions] == [1, 1, 1]
    assert scrape(versions[2]) == 0  # kept
    assert scrape(versions[0]) == 1  # dropped: encoded again
    assert ExpositionCache.KEPT_FORMATS == 2
