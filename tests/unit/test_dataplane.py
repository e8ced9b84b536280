"""Data-plane checks (SpeakerConfig dataPlaneCheck): the hysteresis (bgpd.speaker.dataplane)
as properties, decide() with a DataPlane input, the drain machine's data-plane source,
the config fields and the Service's healthCheckNodePort."""

from __future__ import annotations

from dataclasses import replace

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc
from configkit import messages, parse, speaker
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.attributes import GRACEFUL_SHUTDOWN
from bgpd.decision import Decider, decide
from bgpd.exabgp.driver import DriverMode
from bgpd.model import (
    ClusterSnapshot,
    DataPlane,
    DataPlaneCheck,
    NodeName,
    Service,
    ServiceKey,
    SkipReason,
)
from bgpd.objects import ObjectError, service_from_api
from bgpd.speaker import dataplane, drain
from bgpd.speaker.dataplane import Check, DataPlaneState, Thresholds
from bgpd.speaker.drain import DrainSource, DrainState

# --------------------------------------------------------------------------- hysteresis


@settings(max_examples=300)
@given(
    results=st.lists(st.booleans(), max_size=40),
    failures=st.integers(1, 4),
    successes=st.integers(1, 4),
)
def test_verdict_changes_only_after_enough_results_in_a_row(
    results: list[bool], failures: int, successes: int
) -> None:
    thresholds = Thresholds(failures=failures, successes=successes)
    check = Check()
    assert not check.ready  # not ready until proven: an unreachable check at start
    history: list[bool] = []
    for now, ok in enumerate(results):
        before = check
        check = dataplane.observe(check, ok, float(now), thresholds)
        history.append(ok)
        need = successes if ok else failures
        tail = history[-need:]
        if check.ready is not before.ready:
            # A flip needs `need` results in a row that agree with the new verdict ...
            assert check.ready is ok
            assert len(tail) == need
            assert all(r is ok for r in tail)
            # ... and records when a ready check failed (the drain window's start).
            assert check.failed_at == (None if ok else float(now))
        elif len(tail) == need and all(r is ok for r in tail):
            # ... and `need` such results always flip it (or it already agreed).
            assert check.ready is ok
        if check.ready:
            assert check.failed_at is None


def test_failure_then_drain_window_then_not_ready() -> None:
    t = Thresholds(failures=2, successes=1)
    c = dataplane.observe(Check(), True, 0.0, t)
    assert c.ready
    c = dataplane.observe(dataplane.observe(c, False, 1.0, t), False, 2.0, t)
    assert (c.ready, c.failed_at) == (False, 2.0)
    assert dataplane.draining(c, 5.0, window=10.0)
    assert not dataplane.draining(c, 12.0, window=10.0)
    # Never ready: nothing was announced, so there is nothing to drain.
    assert not dataplane.draining(Check(), 0.0, window=10.0)


K1 = ServiceKey("default/a")
K2 = ServiceKey("default/b")
K3 = ServiceKey("default/c")


def test_round_forgets_services_no_longer_checked_and_builds_the_decide_input() -> None:
    t = Thresholds(failures=1, successes=1)
    s = DataPlaneState()
    s = dataplane.observe_round(
        s, node_ok=True, services_ok={K1: True, K2: True, K3: False}, now=0.0, thresholds=t
    )
    s = dataplane.observe_round(
        s, node_ok=True, services_ok={K1: True, K2: False}, now=1.0, thresholds=t
    )
    assert set(s.services) == {K1, K2}
    got = dataplane.data_plane(s, node_withdrawn=False, services_checked=True, now=2.0, window=5.0)
    assert got == DataPlane(
        node_ready=True, services_checked=True, ready=frozenset({K1}), draining=frozenset({K2})
    )
    later = dataplane.data_plane(s, node_withdrawn=True, services_checked=True, now=6.0, window=5.0)
    assert later == DataPlane(node_ready=False, services_checked=True, ready=frozenset({K1}))
    assert (
        dataplane.data_plane(s, node_withdrawn=False, services_checked=False, now=2.0, window=5.0)
        == DataPlane()
    )


# --------------------------------------------------------------------------- decide()

V4 = pool("v4", "198.51.100.0/24")
IBGP = peer("tor-a", "172.31.250.1")
EBGP = peer("tor-b", "172.31.250.2", peer_asn=65001)
CFG = config(pools=[V4], peers=[IBGP, EBGP], advertisements=[adv()])
LOCAL = "default/local"
CLUSTER = "default/cluster"
ELSEWHERE = "default/elsewhere"
N1 = NodeName("n1")


def _hc(service: Service, port: int) -> Service:
    return replace(service, health_check_node_port=port)


SNAPSHOT = cluster(
    [
        _hc(svc(LOCAL, "198.51.100.1", local=True), 30101),
        svc(CLUSTER, "198.51.100.2"),
        _hc(svc(ELSEWHERE, "198.51.100.3", local=True), 30103),
    ],
    [eps(LOCAL, ep("n1")), eps(CLUSTER, ep("n2")), eps(ELSEWHERE, ep("n2"))],
    [node("n1"), node("n2")],
)

Outcome = tuple[dict[str, tuple[tuple[str, ...], int | None]], dict[str, SkipReason]]


def _outcome(snapshot: ClusterSnapshot, data_plane: DataPlane) -> Outcome:
    """Per (peer prefix): communities and local-pref; per Service: its skip reason."""
    decision = decide(CFG, snapshot, N1, data_plane=data_plane)
    routes = {
        f"{r.peer} {r.prefix}": (r.attributes.communities, r.attributes.local_pref)
        for r in decision.routes
    }
    return routes, {s.service: s.reason for s in decision.skipped}


PLAIN = ((), None)
GSHUT_IBGP = ((GRACEFUL_SHUTDOWN,), 0)
GSHUT_EBGP = ((GRACEFUL_SHUTDOWN,), None)  # LOCAL_PREF never goes to eBGP peers
NOT_READY = SkipReason.DATA_PLANE_NOT_READY
NO_LOCAL = SkipReason.NO_LOCAL_ENDPOINTS


@pytest.mark.parametrize(
    ("data_plane", "routes", "skips"),
    [
        pytest.param(
            DataPlane(),
            {"tor-a 198.51.100.1/32": PLAIN, "tor-b 198.51.100.1/32": PLAIN}
            | {"tor-a 198.51.100.2/32": PLAIN, "tor-b 198.51.100.2/32": PLAIN},
            {ELSEWHERE: NO_LOCAL},
            id="unchecked-gates-nothing",
        ),
        pytest.param(
            DataPlane(node_ready=False),
            {},
            {LOCAL: NOT_READY, CLUSTER: NOT_READY, ELSEWHERE: NOT_READY},
            id="node-not-ready-skips-every-service",
        ),
        pytest.param(
            DataPlane(services_checked=True),
            {"tor-a 198.51.100.2/32": PLAIN, "tor-b 198.51.100.2/32": PLAIN},
            {LOCAL: NOT_READY, ELSEWHERE: NO_LOCAL},
            id="local-service-not-checked-yet-is-not-ready",
        ),
        pytest.param(
            DataPlane(services_checked=True, ready=frozenset({ServiceKey(LOCAL)})),
            {"tor-a 198.51.100.1/32": PLAIN, "tor-b 198.51.100.1/32": PLAIN}
            | {"tor-a 198.51.100.2/32": PLAIN, "tor-b 198.51.100.2/32": PLAIN},
            {ELSEWHERE: NO_LOCAL},
            id="local-service-ready",
        ),
        pytest.param(
            DataPlane(services_checked=True, draining=frozenset({ServiceKey(LOCAL)})),
            {"tor-a 198.51.100.1/32": GSHUT_IBGP, "tor-b 198.51.100.1/32": GSHUT_EBGP}
            | {"tor-a 198.51.100.2/32": PLAIN, "tor-b 198.51.100.2/32": PLAIN},
            {ELSEWHERE: NO_LOCAL},
            id="draining-service-carries-graceful-shutdown",
        ),
    ],
)
def test_decide_with_data_plane(
    data_plane: DataPlane,
    routes: dict[str, tuple[tuple[str, ...], int | None]],
    skips: dict[str, SkipReason],
) -> None:
    assert _outcome(SNAPSHOT, data_plane) == (routes, skips)


def test_not_ready_detail_names_the_port() -> None:
    decision = decide(CFG, SNAPSHOT, N1, data_plane=DataPlane(services_checked=True))
    (skip,) = [s for s in decision.skipped if s.reason is NOT_READY]
    assert "healthCheckNodePort 30101" in skip.detail


data_planes = st.builds(
    DataPlane,
    node_ready=st.booleans(),
    services_checked=st.booleans(),
    ready=st.frozensets(st.sampled_from([ServiceKey(LOCAL), ServiceKey(ELSEWHERE)])),
    draining=st.frozensets(st.sampled_from([ServiceKey(LOCAL)])),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(data_planes, max_size=8))
def test_incremental_decider_follows_the_data_plane(steps: list[DataPlane]) -> None:
    decider = Decider()
    for dp in steps:
        expected = decide(CFG, SNAPSHOT, N1, data_plane=dp)
        assert decider.decide(CFG, SNAPSHOT, N1, data_plane=dp) == expected
        assert decider.desired() == expected.by_peer()


def test_checked_services_are_local_ones_with_a_serving_endpoint_here() -> None:
    assert dataplane.checked_services(CFG, SNAPSHOT, N1) == {LOCAL: 30101}
    assert dataplane.checked_services(CFG, SNAPSHOT, NodeName("n2")) == {ELSEWHERE: 30103}


# --------------------------------------------------------------------------- drain


def test_speaker_with_the_check_starts_withdrawn_until_it_passes() -> None:
    t = drain.initial(30.0, data_plane_check=True)
    assert (t.mode, t.state.source, t.state.withdraw_at) == (
        DriverMode.WITHDRAWN,
        DrainSource.DATA_PLANE,
        None,
    )
    assert t.state.data_plane_withdrawn
    back = drain.data_plane(t.state, True, 1.0)
    assert (back.mode, back.state.source) == (DriverMode.NORMAL, None)
    assert drain.initial(30.0, data_plane_check=False).state == DrainState(window=30.0)


def test_failing_node_drains_then_withdraws_and_comes_back() -> None:
    s = DrainState(window=10.0)
    t = drain.data_plane(s, False, 100.0)
    assert (t.mode, t.state.source, t.wake_at) == (
        DriverMode.DRAINING,
        DrainSource.DATA_PLANE,
        110.0,
    )
    assert not t.state.data_plane_withdrawn  # in the window: announced, GRACEFUL_SHUTDOWN
    done = drain.tick(t.state, 110.0)
    assert done.mode is DriverMode.WITHDRAWN
    assert done.state.data_plane_withdrawn
    back = drain.data_plane(done.state, True, 120.0)
    assert (back.mode, back.state.source) == (DriverMode.NORMAL, None)


def test_annotation_and_data_plane_hand_the_drain_over() -> None:
    t = drain.data_plane(DrainState(window=10.0), False, 0.0)
    t = drain.annotate(t.state, "true", 1.0)
    assert (t.state.source, t.state.started) == (DrainSource.ANNOTATION, 0.0)
    t = drain.data_plane(t.state, True, 2.0)
    assert t.state.source is DrainSource.ANNOTATION  # the annotation still asks
    t = drain.data_plane(t.state, False, 3.0)
    t = drain.annotate(t.state, "false", 4.0)
    assert (t.state.source, t.state.started, t.mode) == (DrainSource.DATA_PLANE, 0.0, None)


Step = tuple[str, object]
steps = st.lists(
    st.tuples(
        st.one_of(
            st.tuples(st.just("annotate"), st.sampled_from([None, "true", "false", "yes"])),
            st.tuples(st.just("data_plane"), st.booleans()),
            st.tuples(st.just("request"), st.none()),
            st.tuples(st.just("tick"), st.none()),
            st.tuples(st.just("stop"), st.none()),
        ),
        st.floats(min_value=0.0, max_value=15.0),
    ),
    max_size=30,
)


@settings(max_examples=300)
@given(start_checked=st.booleans(), sequence=steps)
def test_drain_properties_with_the_data_plane(
    start_checked: bool, sequence: list[tuple[Step, float]]
) -> None:
    first = drain.initial(10.0, data_plane_check=start_checked)
    state = first.state
    mode = first.mode or DriverMode.NORMAL
    clock = 0.0
    for (kind, arg), advance in sequence:
        clock += advance
        before = state
        match kind:
            case "annotate":
                assert arg is None or isinstance(arg, str)
                t = drain.annotate(state, arg, clock)
            case "data_plane":
                assert isinstance(arg, bool)
                t = drain.data_plane(state, arg, clock)
            case "request":
                t = drain.request(state, clock)
            case "tick":
                t = drain.tick(state, clock)
            case _:
                t = drain.stop(state)
        state = t.state
        if t.mode is not None:
            mode = t.mode
        assert mode is state.mode
        # While not stopping, a failing data plane or a "true" annotation keeps a drain.
        if not state.stopping and (state.annotated or not state.data_plane_ready):
            assert state.draining
        # A drain ends only when nothing asks for it any more (never an operator's).
        if before.draining and not state.draining:
            assert before.source is not DrainSource.REQUEST
            assert not state.annotated
            assert state.data_plane_ready
        # WITHDRAWN only after the window, or from the start (nothing announced yet).
        if state.mode is DriverMode.WITHDRAWN and before.mode is not DriverMode.WITHDRAWN:
            assert before.started is not None
            assert clock >= before.started + 10.0
        # Routes are reported dataPlaneNotReady only once withdrawn.
        if state.data_plane_withdrawn:
            assert state.mode is DriverMode.WITHDRAWN


# --------------------------------------------------------------------------- config


def test_data_plane_check_defaults_and_values() -> None:
    assert parse(speaker()).config.speaker.data_plane_check is None  # type: ignore[union-attr]
    on = parse(speaker(dataPlaneCheck={})).config
    assert on is not None
    assert on.speaker.data_plane_check == DataPlaneCheck()
    full = parse(
        speaker(
            dataPlaneCheck={
                "nodeURL": "http://10.0.0.5:10256/healthz",
                "serviceHost": "::1",
                "services": False,
                "interval": "500ms",
                "timeout": 0.25,
                "failureThreshold": 5,
                "successThreshold": 1,
            }
        )
    ).config
    assert full is not None
    assert full.speaker.data_plane_check == DataPlaneCheck(
        node_url="http://10.0.0.5:10256/healthz",
        service_host="::1",
        services=False,
        interval=0.5,
        timeout=0.25,
        failure_threshold=5,
        success_threshold=1,
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"nodeURL": "ftp://x/healthz"},
            "spec.dataPlaneCheck.nodeURL: 'ftp://x/healthz' must be an http:// or https:// "
            "URL with a host",
            id="url-scheme",
        ),
        pytest.param(
            {"serviceHost": "localhost"},
            "spec.dataPlaneCheck.serviceHost: 'localhost' is not an IP address",
            id="service-host-not-ip",
        ),
        pytest.param(
            {"interval": 0}, "spec.dataPlaneCheck.interval: must be more than 0", id="interval-0"
        ),
        pytest.param(
            {"failureThreshold": 0},
            "spec.dataPlaneCheck.failureThreshold: 0 is out of range (1-100)",
            id="threshold-0",
        ),
        pytest.param(
            {"probe": "x"},
            "spec.dataPlaneCheck.probe: unknown field",
            id="unknown-field",
        ),
    ],
)
def test_data_plane_check_errors(spec: dict[str, object], expected: str) -> None:
    result = parse(speaker(dataPlaneCheck=spec))
    assert result.config is None
    assert messages(result.errors) == [f"SpeakerConfig speaker: {expected}"]


# --------------------------------------------------------------------------- objects

API_SERVICE = {
    "metadata": {"namespace": "default", "name": "web"},
    "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"},
}


def test_health_check_node_port_is_read() -> None:
    obj = {**API_SERVICE, "spec": {**API_SERVICE["spec"], "healthCheckNodePort": 30101}}
    assert service_from_api(obj).health_check_node_port == 30101
    assert service_from_api(API_SERVICE).health_check_node_port is None


@pytest.mark.parametrize("bad", [0, 70000, "30101", True])
def test_bad_health_check_node_port_is_one_clear_error(bad: object) -> None:
    obj = {**API_SERVICE, "spec": {**API_SERVICE["spec"], "healthCheckNodePort": bad}}
    with pytest.raises(ObjectError, match=r"spec\.healthCheckNodePort: .* is not a port 1-65535"):
        service_from_api(obj)
