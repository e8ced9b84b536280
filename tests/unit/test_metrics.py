"""The metrics collectors are pure functions of state: feed in-memory state, read samples."""

from __future__ import annotations

import dataclasses
import ipaddress
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase

from bgpd.metric_rows import Labelled, LineEncoder
from bgpd.metrics import (
    ControllerMetrics,
    ConvergencePhase,
    MQTTCollector,
    SpeakerMetrics,
    SpeakerProbes,
    StaticSpeakerView,
    WatchMetrics,
    metric_names,
    metrics_routes,
    serving_services,
    skipped_counts,
    start_metrics_listener,
)
from bgpd.model import (
    ClusterSnapshot,
    Decision,
    Endpoint,
    EndpointSlice,
    NodeName,
    PeerName,
    PeerStatus,
    PoolName,
    Route,
    RouteAttributes,
    ServiceKey,
    SessionState,
    Skip,
    SkipReason,
)

NODE = NodeName("node-a")
R1 = PeerName("router-1")
R2 = PeerName("router-2")
WEB = ServiceKey("default/web")
DNS = ServiceKey("kube-system/dns")
P_WEB = ipaddress.ip_network("10.99.100.1/32")
P_DNS = ipaddress.ip_network("10.99.100.2/32")
ATTRS = RouteAttributes(communities=("65000:100",))


class LiveView:
    """A view whose state a test swaps between scrapes, as the daemon's state changes."""

    def __init__(self, state: StaticSpeakerView) -> None:
        self.state = state

    def __getattr__(self, name: str) -> object:
        return getattr(self.state, name)


def _route(peer: PeerName, prefix: ipaddress.IPv4Network, *services: ServiceKey) -> Route:
    return Route(peer=peer, prefix=prefix, attributes=ATTRS, services=services)


def _registry(view: object) -> tuple[CollectorRegistry, SpeakerMetrics]:
    reg = CollectorRegistry()
    return reg, SpeakerMetrics(reg, view, node=NODE)  # type: ignore[arg-type]


def _value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


@pytest.mark.parametrize(
    ("status", "up", "since"),
    [
        pytest.param(
            PeerStatus(
                R1, ipaddress.ip_address("172.31.250.1"), SessionState.UP, 1700.5, "", 3, 1, 4, 2
            ),
            1.0,
            1700.5,
            id="established",
        ),
        pytest.param(
            PeerStatus(R1, ipaddress.ip_address("172.31.250.1"), SessionState.CONNECTED, 99.0),
            0.0,
            99.0,
            id="connected-is-not-up",
        ),
        pytest.param(
            PeerStatus(R1, ipaddress.ip_address("172.31.250.1")),
            0.0,
            None,
            id="never-changed-has-no-timestamp",
        ),
    ],
)
def test_session_metrics_follow_peer_status(
    status: PeerStatus, up: float, since: float | None
) -> None:
    reg, _ = _registry(StaticSpeakerView(peers={R1: status}))
    assert _value(reg, "kube_bgpd_bgp_session_up", peer=R1) == up
    assert _value(reg, "kube_bgpd_bgp_session_last_change_timestamp_seconds", peer=R1) == since
    assert _value(reg, "kube_bgpd_bgp_prefixes_desired", peer=R1) == status.desired
    assert _value(reg, "kube_bgpd_bgp_prefixes_accepted", peer=R1) == status.accepted
    assert _value(reg, "kube_bgpd_bgp_prefixes_advertised", peer=R1) == status.advertised
    assert _value(reg, "kube_bgpd_bgp_prefixes_pending", peer=R1) == status.pending


def test_announced_series_follow_decision_and_advertisement_and_disappear() -> None:
    """announced is 1 where the route is advertised (on the wire), not merely accepted."""
    decision = Decision(
        node=NODE,
        routes=(_route(R1, P_WEB, WEB), _route(R2, P_WEB, WEB), _route(R1, P_DNS, DNS)),
    )
    # ExaBGP accepted web for router-2 too, but its session is down: not advertised.
    accepted = {R1: {P_WEB: ATTRS, P_DNS: ATTRS}, R2: {P_WEB: ATTRS}}
    acked = {R1: {P_WEB: ATTRS, P_DNS: ATTRS}}
    view = LiveView(
        StaticSpeakerView(decision=decision, accepted_routes=accepted, advertised_routes=acked)
    )
    reg, _ = _registry(view)
    name = "kube_bgpd_service_announced"
    assert _value(reg, name, service=WEB, prefix="10.99.100.1/32", peer=R1) == 1.0
    assert _value(reg, name, service=WEB, prefix="10.99.100.1/32", peer=R2) == 0.0
    assert _value(reg, name, service=DNS, prefix="10.99.100.2/32", peer=R1) == 1.0

    # dns withdrawn: its series is gone at the next scrape without anyone deleting it.
    view.state = StaticSpeakerView(
        decision=Decision(node=NODE, routes=(_route(R1, P_WEB, WEB),)),
        accepted_routes=accepted,
        advertised_routes=acked,
    )
    assert _value(reg, name, service=DNS, prefix="10.99.100.2/32", peer=R1) is None
    assert _value(reg, name, service=WEB, prefix="10.99.100.1/32", peer=R2) is None
    assert _value(reg, name, service=WEB, prefix="10.99.100.1/32", peer=R1) == 1.0


def test_one_prefix_shared_by_two_services_gives_one_series_each() -> None:
    decision = Decision(node=NODE, routes=(_route(R1, P_WEB, WEB, DNS),))
    reg, _ = _registry(StaticSpeakerView(decision=decision, advertised_routes={R1: {P_WEB: ATTRS}}))
    for svc in (WEB, DNS):
        assert (
            _value(
                reg, "kube_bgpd_service_announced", service=svc, prefix="10.99.100.1/32", peer=R1
            )
            == 1.0
        )


def test_skipped_services_count_distinct_services_per_reason() -> None:
    other = ServiceKey("default/other")
    decision = Decision(
        node=NODE,
        skipped=(
            # One Service skipped for two of its IPs counts once.
            Skip(WEB, SkipReason.NO_MATCHING_PEER, ipaddress.ip_address("10.99.100.1")),
            Skip(WEB, SkipReason.NO_MATCHING_PEER, ipaddress.ip_address("10.99.100.3")),
            Skip(DNS, SkipReason.NO_LOCAL_ENDPOINTS),
            Skip(other, SkipReason.NO_LOCAL_ENDPOINTS),
        ),
    )
    assert skipped_counts(decision) == {
        SkipReason.NO_MATCHING_PEER: 1,
        SkipReason.NO_LOCAL_ENDPOINTS: 2,
    }
    reg, _ = _registry(StaticSpeakerView(decision=decision))
    assert _value(reg, "kube_bgpd_services_skipped", reason="noMatchingPeer") == 1.0
    assert _value(reg, "kube_bgpd_services_skipped", reason="noLocalEndpoints") == 2.0
    assert _value(reg, "kube_bgpd_services_skipped", reason="noEndpoints") is None


def _slice(svc: str, *endpoints: Endpoint) -> EndpointSlice:
    ns, name = svc.split("/")
    return EndpointSlice(namespace=ns, name=f"{name}-x", service_name=name, endpoints=endpoints)


@pytest.mark.parametrize(
    ("decision", "slices", "expected"),
    [
        pytest.param(
            Decision(node=NODE, routes=(_route(R1, P_WEB, WEB),)),
            {WEB: (_slice(WEB, Endpoint(ready=True), Endpoint(ready=False)),)},
            {WEB: 1},
            id="routed-counts-serving-endpoints",
        ),
        pytest.param(
            Decision(node=NODE, skipped=(Skip(WEB, SkipReason.NO_LOCAL_ENDPOINTS),)),
            {
                WEB: (
                    _slice(
                        WEB,
                        Endpoint(ready=None, node_name="node-b"),
                        Endpoint(ready=False, serving=True, terminating=True),
                    ),
                )
            },
            {WEB: 2},
            id="skipped-here-but-serving-elsewhere",
        ),
        pytest.param(
            Decision(node=NODE, skipped=(Skip(WEB, SkipReason.NO_ENDPOINTS),)),
            {},
            {WEB: 0},
            id="no-endpoints",
        ),
        pytest.param(
            Decision(node=NODE, skipped=(Skip(DNS, SkipReason.NOT_OUR_CLASS),)),
            {DNS: (_slice(DNS, Endpoint(ready=True)),)},
            {},
            id="other-class-is-not-ours-to-alert-on",
        ),
    ],
)
def test_serving_services(
    decision: Decision,
    slices: Mapping[ServiceKey, tuple[EndpointSlice, ...]],
    expected: dict[ServiceKey, int],
) -> None:
    snapshot = ClusterSnapshot(endpoint_slices=slices)
    assert serving_services(decision, snapshot) == expected
    reg, _ = _registry(StaticSpeakerView(decision=decision, snapshot=snapshot))
    for svc, count in expected.items():
        assert _value(reg, "kube_bgpd_service_serving_endpoints", service=svc) == count


def test_daemon_state_gauges_and_counters() -> None:
    view = StaticSpeakerView(
        running=True,
        restarts=2,
        commands={"announce": 7, "withdraw": 3, "eor": 1},
        loaded=True,
        stale=True,
        kinds_synced={"Service": True, "EndpointSlice": False},
        source_stale=True,
    )
    reg, _ = _registry(view)
    assert _value(reg, "kube_bgpd_exabgp_running") == 1.0
    assert _value(reg, "kube_bgpd_exabgp_restarts_total") == 2.0
    assert _value(reg, "kube_bgpd_exabgp_commands_total", kind="announce") == 7.0
    assert _value(reg, "kube_bgpd_exabgp_commands_total", kind="eor") == 1.0
    assert _value(reg, "kube_bgpd_config_loaded") == 1.0
    assert _value(reg, "kube_bgpd_config_stale") == 1.0
    assert _value(reg, "kube_bgpd_cache_synced", kind="Service") == 1.0
    assert _value(reg, "kube_bgpd_cache_synced", kind="EndpointSlice") == 0.0
    assert _value(reg, "kube_bgpd_cluster_stale") == 1.0
    assert _value(reg, "kube_bgpd_speaker_info", node=NODE, version=_version()) == 1.0


def _version() -> str:
    from bgpd import __version__

    return __version__


def test_convergence_and_reconcile_histograms() -> None:
    reg, m = _registry(StaticSpeakerView())
    # Every phase exists before the first observation so dashboards show 0, not nothing.
    for phase in ConvergencePhase:
        assert _value(reg, "kube_bgpd_convergence_seconds_count", phase=phase.value) == 0.0
    m.observe_convergence(ConvergencePhase.DECIDE, 0.003)
    m.observe_convergence(ConvergencePhase.TOTAL, -0.5)  # a clock step: clamped to 0
    m.observe_reconcile(0.02)
    assert _value(reg, "kube_bgpd_convergence_seconds_count", phase="decide") == 1.0
    assert _value(reg, "kube_bgpd_convergence_seconds_bucket", phase="decide", le="0.0025") == 0
    assert _value(reg, "kube_bgpd_convergence_seconds_bucket", phase="decide", le="0.005") == 1
    assert _value(reg, "kube_bgpd_convergence_seconds_sum", phase="total") == 0.0
    assert _value(reg, "kube_bgpd_convergence_seconds_bucket", phase="total", le="0.001") == 1
    assert _value(reg, "kube_bgpd_reconcile_duration_seconds_count") == 1.0


def test_watch_counters_are_plain_callables() -> None:
    reg, m = _registry(StaticSpeakerView())
    on_event, on_relist = m.watch.watch_event, m.watch.relist  # what the watcher calls
    on_event("Service", "ADDED")
    on_event("Service", "ADDED")
    on_event("EndpointSlice", "DELETED")
    on_relist("Service")
    assert _value(reg, "kube_bgpd_watch_events_total", kind="Service", type="ADDED") == 2.0
    assert _value(reg, "kube_bgpd_watch_events_total", kind="EndpointSlice", type="DELETED") == 1
    assert _value(reg, "kube_bgpd_watch_relists_total", kind="Service") == 1.0


def test_pool_usage_from_allocator_state() -> None:
    usage: dict[PoolName, tuple[int, int]] = {PoolName("default"): (256, 12)}
    reg = CollectorRegistry()
    ControllerMetrics(reg, lambda: usage)
    assert _value(reg, "kube_bgpd_pool_addresses", pool="default") == 256.0
    assert _value(reg, "kube_bgpd_pool_addresses_in_use", pool="default") == 12.0
    usage.clear()  # pool removed from the config: its series goes with it
    assert _value(reg, "kube_bgpd_pool_addresses", pool="default") is None


@dataclass
class PublisherState:
    connected: bool = True
    published: int = 10
    dropped: int = 4
    queued: int = 2
    connects: int = 3


def test_mqtt_collector_reads_publisher_counters() -> None:
    reg = CollectorRegistry()
    reg.register(MQTTCollector(PublisherState()))
    assert _value(reg, "kube_bgpd_mqtt_connected") == 1.0
    assert _value(reg, "kube_bgpd_mqtt_messages_published_total") == 10.0
    assert _value(reg, "kube_bgpd_mqtt_events_dropped_total") == 4.0
    assert _value(reg, "kube_bgpd_mqtt_events_queued") == 2.0
    assert _value(reg, "kube_bgpd_mqtt_connects_total") == 3.0


def test_watch_counters_created_first_are_shared_with_the_speaker() -> None:
    """The cluster source (and its observer) exists before the speaker."""
    reg = CollectorRegistry()
    watch = WatchMetrics(reg)
    m = SpeakerMetrics(reg, StaticSpeakerView(), node=NODE, watch=watch)
    assert m.watch is watch
    watch.relist("Node")
    assert _value(reg, "kube_bgpd_watch_relists_total", kind="Node") == 1.0


def test_registering_twice_in_one_registry_is_refused() -> None:
    reg, _ = _registry(StaticSpeakerView())
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        SpeakerMetrics(reg, StaticSpeakerView(), node=NODE)


def test_metric_names_lists_every_exported_series_name() -> None:
    # Speaker and controller are separate processes with a registry each.
    reg, _ = _registry(StaticSpeakerView())
    reg.register(MQTTCollector(PublisherState()))
    controller = CollectorRegistry()
    ControllerMetrics(controller, dict)
    names = metric_names(reg) | metric_names(controller)
    assert {
        "kube_bgpd_bgp_session_up",
        "kube_bgpd_service_announced",
        "kube_bgpd_exabgp_restarts_total",
        "kube_bgpd_watch_events_total",  # no sample yet, still a name
        "kube_bgpd_convergence_seconds_bucket",
        "kube_bgpd_pool_addresses_in_use",
        "kube_bgpd_mqtt_events_dropped_total",
    } <= names
    assert all(n.startswith("kube_bgpd_") for n in names)
    assert "kube_bgpd_exabgp_restarts" not in names  # a counter is only read as _total


def test_static_view_is_frozen() -> None:
    view = StaticSpeakerView()
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.running = True  # type: ignore[misc]


def test_probes_are_read_at_scrape_time() -> None:
    """The composition root hands callables; each scrape sees the state of that moment."""
    sessions: dict[PeerName, PeerStatus] = {}
    restarts = [0]
    probes = SpeakerProbes(
        peers=lambda: sessions,
        accepted_routes=dict,
        decision=lambda: None,
        snapshot=lambda: None,
        running=lambda: True,
        restarts=lambda: restarts[0],
        commands=dict,
        loaded=lambda: True,
        stale=lambda: False,
        kinds_synced=lambda: {"Service": True},
        source_stale=lambda: False,
        advertised_routes=dict,
    )
    reg, _ = _registry(probes)
    assert _value(reg, "kube_bgpd_bgp_session_up", peer=R1) is None
    sessions[R1] = PeerStatus(R1, ipaddress.ip_address("172.31.250.1"), SessionState.UP)
    restarts[0] = 3
    assert _value(reg, "kube_bgpd_bgp_session_up", peer=R1) == 1.0
    assert _value(reg, "kube_bgpd_exabgp_restarts_total") == 3.0


@pytest.mark.parametrize(
    ("accept", "content_type", "needle"),
    [
        pytest.param("", "text/plain; version=0.0.4", b"kube_bgpd_exabgp_running 1.0", id="text"),
        pytest.param(
            "application/openmetrics-text; version=1.0.0",
            "application/openmetrics-text",
            b"# EOF",
            id="openmetrics",
        ),
    ],
)
async def test_metrics_route_serves_the_registry(
    accept: str, content_type: str, needle: bytes
) -> None:
    reg, _ = _registry(StaticSpeakerView(running=True))
    app = web.Application()
    app.add_routes(metrics_routes(reg))
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/metrics", headers={"Accept": accept} if accept else {})
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith(content_type)
        assert needle in await resp.read()


@pytest.mark.parametrize(
    "accept", ["", "application/openmetrics-text; version=1.0.0"], ids=["text", "openmetrics"]
)
async def test_metrics_route_serves_what_the_encoder_gives_and_encodes_changed_rows_only(
    accept: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/metrics keeps each route's lines while its state is the same objects: the body
    stays what the encoder gives for the whole registry, scrape after scrape and after
    the state changes, and a scrape encodes only the rows that changed."""
    web_r1, web_r2, dns_r1 = _route(R1, P_WEB, WEB), _route(R2, P_WEB, WEB), _route(R1, P_DNS, DNS)
    acked = {R1: {P_WEB: ATTRS, P_DNS: ATTRS}}
    view = LiveView(
        StaticSpeakerView(
            decision=Decision(node=NODE, routes=(web_r1, web_r2, dns_r1)),
            accepted_routes=acked,
            advertised_routes=acked,
            running=True,
        )
    )
    reg, m = _registry(view)
    encoder, _ = choose_encoder(accept)
    app = web.Application()
    app.add_routes(metrics_routes(reg))
    headers = {"Accept": accept} if accept else {}
    encoded: list[list[str]] = []
    real = LineEncoder.lines

    def counting(self: LineEncoder, samples: Sequence[Labelled]) -> list[bytes]:
        encoded.extend(values for values, _ in samples)
        return real(self, samples)

    monkeypatch.setattr(LineEncoder, "lines", counting)
    async with TestClient(TestServer(app)) as client:

        async def scrape() -> bytes:
            encoded.clear()
            resp = await client.get("/metrics", headers=headers)
            assert resp.status == 200
            return await resp.read()

        first = await scrape()
        assert first == encoder(reg)
        assert b"10.99.100.2/32" in first
        assert len(encoded) == 3

        m.observe_reconcile(0.01)  # a small family changes between scrapes
        again = await scrape()
        assert encoded == []  # no route encoded again
        assert again == encoder(reg)
        assert again != first  # the histogram's new sample is in it

        # One route gone, one new, one kept (the same object), and router-1's DNS prefix
        # no longer advertised: only the new route is encoded.
        dns_r2 = _route(R2, P_DNS, DNS)
        view.state = StaticSpeakerView(
            decision=Decision(node=NODE, routes=(web_r1, dns_r2)),
            accepted_routes={R1: {P_WEB: ATTRS}},
            advertised_routes={R1: {P_WEB: ATTRS}},
            running=True,
        )
        changed = await scrape()
        assert changed == encoder(reg)
        assert encoded == [[DNS, "10.99.100.2/32", R2]]

        # Only the advertised state of a kept route changes: only that route again.
        view.state = dataclasses.replace(view.state, advertised_routes={})
        flipped = await scrape()
        assert flipped == encoder(reg)
        assert encoded == [[WEB, "10.99.100.1/32", R1]]
        assert b'peer="router-1",prefix="10.99.100.1/32",service="default/web"} 0.0' in flipped


async def test_metrics_route_builds_the_event_metrics_samples_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The histograms' and counters' samples (prometheus_client builds a sample per
    bucket at every collect) are built in /metrics' worker thread, not on the event loop
    that the route changes need; the body is still the encoder's."""
    reg, m = _registry(StaticSpeakerView(running=True))
    m.observe_reconcile(0.01)
    m.observe_convergence(ConvergencePhase.TOTAL, 0.002)
    m.watch.watch_event("Service", "ADDED")
    built_in: list[int] = []
    real = MetricWrapperBase._samples

    def recording(self: MetricWrapperBase) -> object:
        built_in.append(threading.get_ident())
        return real(self)

    monkeypatch.setattr(MetricWrapperBase, "_samples", recording)
    app = web.Application()
    app.add_routes(metrics_routes(reg))
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/metrics")
        body = await resp.read()
    loop_thread = threading.get_ident()
    assert built_in  # the samples were built, for the body
    assert loop_thread not in built_in
    encoder, _ = choose_encoder("")
    assert body == encoder(reg)
    assert b'kube_bgpd_reconcile_duration_seconds_bucket{le="0.01"} 1.0' in body


async def test_controller_listener_serves_metrics_and_health() -> None:
    reg = CollectorRegistry()
    ControllerMetrics(reg, lambda: {PoolName("default"): (16, 3)})
    runner, port = await start_metrics_listener(reg, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert b'kube_bgpd_pool_addresses_in_use{pool="default"} 3.0' in await resp.read()
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()
