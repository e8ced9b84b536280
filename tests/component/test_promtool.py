"""The real promtool lints what we export and tests the alert rules we ship."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from bgpd.metrics import (
    BfdCollector,
    BfdSession,
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
            r1: PeerStatus(
                r1,
                ipaddress.ip_address("172.31.250.1"),
                SessionState.UP,
                1.7e9,
                "",
                accepted=2,
                desired=2,
                advertised=2,
            ),
            r2: PeerStatus(
                r2,
                ipaddress.ip_address("172.31.250.2"),
                SessionState.DOWN,
                1.7e9,
                "connection refused",
                accepted=0,
                pending=1,
                desired=1,
            ),
        },
        accepted_routes={r1: {v4: attrs, v6: attrs}},
        advertised_routes={r1: {v4: attrs, v6: attrs}},
        decision=decision,
        snapshot=ClusterSnapshot(endpoint_slices=slices),
        running=True,
        restarts=1,
        commands={"announce": 3, "withdraw": 1, "eor": 1},
        loaded=True,
        kinds_synced={"Service": True, "EndpointSlice": True, "Node": True, "Namespace": True},
    )


def _bfd() -> BfdCollector:
    """One BFD-enabled peer, Up, after one flap."""
    return BfdCollector(
        lambda: [BfdSession(peer="router-1", state="up", flaps=1, detect_ms=900)], ("up", "down")
    )


def test_speaker_exposition_passes_promtool_check_metrics() -> None:
    reg = CollectorRegistry()
    m = SpeakerMetrics(reg, _speaker_state(), node=NodeName("node-a"), mqtt=Publisher(), bfd=_bfd())
    m.observe_reconcile(0.012)
    for phase, seconds in zip(ConvergencePhase, (0.004, 0.002, 0.006), strict=True):
        m.observe_convergence(phase, seconds)
    m.watch.watch_event("Service", "ADDED")
    m.watch.relist("EndpointSlice")
    text = exposition(reg)
    # The state we fed is in the exposition, not just well-formed text.
    assert b'kube_bgpd_bgp_session_up{peer="router-2"} 0.0' in text
    assert b'prefix="fd00:99::1/128"' in text
    assert b'kube_bgpd_bfd_session_flaps_total{peer="router-1"} 1.0' in text
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


# --------------------------------------------------------------------------- real Prometheus

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DASHBOARD = DEPLOY.parent / "grafana" / "kube-bgpd.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - 127.0.0.1 only
        doc: dict[str, Any] = json.load(resp)
        return doc


def _query(port: int, expr: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        return _get(url)
    except urllib.error.HTTPError as exc:  # 400 bad_data carries the parse error
        doc: dict[str, Any] = json.load(exc)
        return doc


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[int]:
    """A real Prometheus scraping a speaker and a controller exposition on loopback."""
    speaker = CollectorRegistry()
    m = SpeakerMetrics(
        speaker, _speaker_state(), node=NodeName("node-a"), mqtt=Publisher(), bfd=_bfd()
    )
    m.observe_reconcile(0.01)
    for phase in ConvergencePhase:
        m.observe_convergence(phase, 0.004)
    m.watch.watch_event("Service", "ADDED")
    m.watch.relist("Service")
    controller = CollectorRegistry()
    ControllerMetrics(controller, lambda: {PoolName("default"): (256, 240)})
    servers = []
    targets = {}
    for job, reg in (("kube-bgpd-speaker", speaker), ("kube-bgpd-controller", controller)):
        port = _free_port()
        servers.append(start_http_server(port, addr="127.0.0.1", registry=reg))
        targets[job] = port
    web = _free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "alerts.yaml")],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in targets.items()
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    with (tmp_path / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{web}",
            ],
            stdout=log,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Prometheus did not scrape both targets"
            with contextlib.suppress(OSError, ValueError):
                r = _query(web, "count_over_time(up[1m]) >= 3 and up == 1")
                if len(r["data"]["result"]) == 2:
                    break
            time.sleep(0.2)
        yield web
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def _grafana_to_promql(expr: str) -> str:
    # The dashboard's two template variables, as Grafana would expand them.
    return expr.replace("$__rate_interval", "10s").replace("$node", ".*")


@pytest.mark.timeout(120)
def test_every_dashboard_and_alert_query_runs_on_real_prometheus(prometheus: int) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (p["title"], _grafana_to_promql(t["expr"]))
        for p in dashboard["panels"]
        if p["type"] != "row"
        for t in p["targets"]
    ]
    rules = yaml.safe_load((DEPLOY / "alerts.yaml").read_text())
    alerts = [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]
    empty = []
    for title, expr in [*queries, *alerts]:
        r = _query(prometheus, expr)
        assert r["status"] == "success", f"{title}: {r.get('error')}\n{expr}"
        if not r["data"]["result"]:
            empty.append(title)
    # Every panel shows data for a realistic speaker and controller; the alert rules may
    # be quiet (only the pool at 240/256 is over its threshold here).
    assert not [t for t in empty if t not in {a for a, _ in alerts}], empty
    assert "KubeBgpdPoolNearlyExhausted" not in empty
    # Prometheus itself loaded the rule file.
    loaded = _get(f"http://127.0.0.1:{prometheus}/api/v1/rules")["data"]["groups"]
    assert {r["name"] for g in loaded for r in g["rules"]} == {a for a, _ in alerts}
