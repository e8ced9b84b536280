"""The Grafana dashboard and the alert rules only query series our collectors export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bgpd.metrics import (
    BfdCollector,
    ControllerMetrics,
    SpeakerMetrics,
    StaticSpeakerView,
    metric_names,
)
from bgpd.model import NodeName

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kube-bgpd.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
    | {"bool", "offset", "inf", "nan"}
)


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are not functions, keywords,
    label names (inside {} or by/on lists), strings or durations."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    idents = re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", s)
    return {m[1] for m in idents if m[2] is None and m[1].lower() not in _KEYWORDS}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param("up", {"up"}, id="bare"),
        pytest.param(
            'sum by (le) (rate(a_bucket{phase="x"}[$__rate_interval]))', {"a_bucket"}, id="nest"
        ),
        pytest.param(
            'a * on (instance, job) group_left (node) b{node=~"$node"} == 0', {"a", "b"}, id="join"
        ),
        pytest.param("histogram_quantile(0.9, x) > 1e3 or vector(0)", {"x"}, id="numbers"),
        pytest.param(
            "max by (s) (a) > 0 unless on (s) max by (s) (b) == 1", {"a", "b"}, id="unless"
        ),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names


@pytest.fixture(scope="module")
def exported() -> frozenset[str]:
    speaker = CollectorRegistry()
    SpeakerMetrics(
        speaker,
        StaticSpeakerView(),
        node=NodeName("n"),
        mqtt=_NoMQTT(),
        bfd=BfdCollector(list, ("up", "down")),
    )
    controller = CollectorRegistry()
    ControllerMetrics(controller, dict)
    return metric_names(speaker) | metric_names(controller)


class _NoMQTT:
    connected = False
    published = dropped = queued = connects = 0


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _targets() -> list[tuple[str, str]]:
    return [
        (p["title"], t["expr"])
        for p in _dashboard()["panels"]
        if p["type"] != "row"
        for t in p["targets"]
    ]


def _alert_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]


_QUERIES = [(f"dashboard: {t}", e) for t, e in _targets()] + [
    (f"alert: {a}", e) for a, e in _alert_exprs()
]


@pytest.mark.parametrize(("where", "expr"), _QUERIES, ids=[w for w, _ in _QUERIES])
def test_dashboard_and_alerts_query_only_exported_metrics(
    where: str, expr: str, exported: frozenset[str]
) -> None:
    used = promql_metric_names(expr)
    assert used, f"{where}: selects no metric"
    assert used <= exported, f"{where}: unknown {sorted(used - exported)}"


def test_alerts_carry_summary_description_and_severity() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    for rule in (r for g in doc["groups"] for r in g["rules"]):
        assert {"summary", "description"} <= rule["annotations"].keys(), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]


def test_dashboard_model_is_importable_and_datasource_is_a_variable() -> None:
    d = _dashboard()
    assert d["schemaVersion"] >= 39
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert {"h", "w", "x", "y"} <= p["gridPos"].keys()
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]


def test_dashboard_covers_what_the_issue_asks_for() -> None:
    """Sessions, announced routes per node and peer, convergence percentiles, allocator
    use, ExaBGP restarts and skipped reasons each have a panel."""
    exprs = " ".join(e for _, e in _targets())
    for needle in (
        "kube_bgpd_bgp_session_up",
        "kube_bgpd_bgp_prefixes_advertised",
        "kube_bgpd_bgp_prefixes_accepted",
        "kube_bgpd_bgp_prefixes_desired",
        "histogram_quantile(0.99, sum by (le) (rate(kube_bgpd_convergence_seconds_bucket",
        "kube_bgpd_pool_addresses_in_use",
        "kube_bgpd_exabgp_restarts_total",
        "kube_bgpd_services_skipped",
    ):
        assert needle in exprs, needle
