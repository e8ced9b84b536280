"""The real promtool lints what we export and tests the alert rules we ship."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bgpd.metrics import (
    ControllerMetrics,
    ConvergencePhase,
    SpeakerMetrics,
    StaticSpeakerView,
    exposition,
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

pytestmark = pytest.mark.component

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def _promtool(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        [PROMTOOL, *args], input=stdin, capture_output=True, timeout=60, cwd=cwd, check=False
    )
    out = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0, out
    return out


class Publisher:
    connected = True
    published = 41
    dropped = 2
    queued = 0
    connects = 3


def _speaker_state() -> StaticSpeakerView:
    """A node announcing two Services to two peers, one peer down, some skips."""
    r1, r2 = PeerName("router-1"), PeerName("router-2")
    web, api = ServiceKey("default/web"), ServiceKey("default/api")
    v4 = ipaddress.ip_network("10.99.100.1/32")
    v6 = ipaddress.ip_network("fd00:99::1/128")
    attrs = RouteAttributes(communities=("65000:100",), local_pref=200)
    decision = Decision(
        node=NodeName("node-a"),
        routes=(
            Route(r1, v4, attrs, (web,)),
            Route(r2, v4, attrs, (web,)),
            Route(r1, v6, attrs, (web, api)),
        ),
        skipped=(
            Skip(ServiceKey("default/local"), SkipReason.NO_LOCAL_ENDPOINTS),
            Skip(ServiceKey("other/lb"), SkipReason.NOT_OUR_CLASS),
        ),
    )
    slices = {
        web: (EndpointSlice("default", "web-1", "web", endpoints=(Endpoint(ready=True),)),),
        ServiceKey("default/local"): (
            EndpointSlice(
                "default", "local-1", "local", endpoints=(Endpoint(ready=True, node_name="b"),)
            ),
        ),
    }
    return StaticSpeakerView(
        peers={
            r1: PeerStatus(r1, ipaddress.ip_address("172.31.250.1"), SessionState.UP, 1.7e9, "", 2),
            r2: PeerStatus(
                r2,
                ipaddress.ip_address("172.31.250.2"),
                SessionState.DOWN,
                1.7e9,
                "connection refused",
                0,
                1,
            ),
        },
        routes={r1: {v4: attrs, v6: attrs}},
        decision=decision,
        snapshot=ClusterSnapshot(endpoint_slices=slices),
        running=True,
        restarts=1,
        commands={"announce": 3, "withdraw": 1, "eor": 1},
        loaded=True,
        kinds_synced={"Service": True, "EndpointSlice": True, "Node": True, "Namespace": True},
    )


def test_speaker_exposition_passes_promtool_check_metrics() -> None:
    reg = CollectorRegistry()
    m = SpeakerMetrics(reg, _speaker_state(), node=NodeName("node-a"), mqtt=Publisher())
    m.observe_reconcile(0.012)
    for phase, seconds in zip(ConvergencePhase, (0.004, 0.002, 0.006), strict=True):
        m.observe_convergence(phase, seconds)
    m.watch_event("Service", "ADDED")
    m.relist("EndpointSlice")
    text = exposition(reg)
    # The state we fed is in the exposition, not just well-formed text.
    assert b'kube_bgpd_bgp_session_up{peer="router-2"} 0.0' in text
    assert b'prefix="fd00:99::1/128"' in text
    _promtool("check", "metrics", stdin=text)


def test_controller_exposition_passes_promtool_check_metrics() -> None:
    reg = CollectorRegistry()
    m = ControllerMetrics(reg, lambda: {PoolName("default"): (256, 12), PoolName("v6"): (2**64, 1)})
    m.watch_event("Service", "MODIFIED")
    text = exposition(reg)
    assert b'kube_bgpd_pool_addresses_in_use{pool="default"} 12.0' in text
    _promtool("check", "metrics", stdin=text)


def test_promtool_rejects_a_badly_named_metric() -> None:
    """The lint is live: the same call fails on an exposition breaking a convention."""
    bad = b"# HELP kube_bgpd_x_seconds_total x\n# TYPE kube_bgpd_x_seconds_total gauge\n"
    bad += b"kube_bgpd_x_seconds_total 1\n"
    proc = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=bad, capture_output=True, timeout=60, check=False
    )
    assert proc.returncode != 0
    assert b"non-counter metrics should not have" in proc.stdout + proc.stderr


def test_alert_rules_pass_promtool_check_rules() -> None:
    out = _promtool("check", "rules", str(DEPLOY / "alerts.yaml"))
    assert "SUCCESS" in out


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    out = _promtool("test", "rules", "alerts_test.yaml", cwd=DEPLOY)
    assert "SUCCESS" in out
