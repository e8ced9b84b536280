"""Server-side printing for kubectl: durations and the columns per kind."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kbgpd_lab.apisim.resources import ResourceTable
from kbgpd_lab.apisim.tables import human_age, table, wants_table

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)
TABLE = ResourceTable()


@pytest.mark.parametrize(
    ("created", "text"),
    [
        pytest.param("2026-01-10T11:59:18Z", "42s", id="seconds"),
        pytest.param("2026-01-10T11:56:48Z", "3m12s", id="minutes-seconds"),
        pytest.param("2026-01-10T11:55:00Z", "5m", id="whole-minutes"),
        pytest.param("2026-01-10T11:00:00Z", "60m", id="minutes-up-to-3h"),
        pytest.param("2026-01-10T07:30:00Z", "4h30m", id="hours-minutes"),
        pytest.param("2026-01-09T12:00:00Z", "24h", id="hours-up-to-2d"),
        pytest.param("2026-01-07T09:00:00Z", "3d3h", id="days-hours"),
        pytest.param("2025-11-01T12:00:00Z", "70d", id="days"),
        pytest.param("2026-01-10T11:59:59.500000Z", "0s", id="fractional"),
        pytest.param("2026-01-10T12:00:05Z", "<invalid>", id="future"),
        pytest.param("garbage", "<invalid>", id="unparsable"),
        pytest.param(None, "<unknown>", id="missing"),
    ],
)
def test_human_age(created: str | None, text: str) -> None:
    assert human_age(created, NOW) == text


def cells(resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    rd = TABLE.by_name(resource)
    assert rd is not None
    doc = table(rd, [obj], {"resourceVersion": "1"})
    names = [c["name"] for c in doc["columnDefinitions"]]
    return dict(zip(names, doc["rows"][0]["cells"], strict=True))


def test_service_columns() -> None:
    row = cells(
        "services",
        {
            "metadata": {"name": "web"},
            "spec": {
                "type": "LoadBalancer",
                "clusterIP": "10.96.0.10",
                "ports": [
                    {"port": 80, "nodePort": 30000, "protocol": "TCP"},
                    {"port": 53, "protocol": "UDP"},
                ],
                "selector": {"app": "web"},
            },
            "status": {"loadBalancer": {}},
        },
    )
    assert row["External-IP"] == "<pending>"
    assert row["Port(s)"] == "80:30000/TCP,53/UDP"
    assert row["Selector"] == "app=web"


def test_node_and_event_columns() -> None:
    node = cells(
        "nodes",
        {
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
    )
    assert (node["Status"], node["Roles"]) == ("NotReady,SchedulingDisabled", "control-plane")
    event = cells(
        "events.events.k8s.io",
        {
            "metadata": {"name": "web.1"},
            "regarding": {"kind": "Service", "name": "web"},
            "reason": "Announced",
            "note": "from node1",
            "type": "Normal",
        },
    )
    assert (event["Object"], event["Message"], event["Name"]) == (
        "service/web",
        "from node1",
        "web.1",
    )


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [
        pytest.param(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True, id="kubectl"
        ),
        pytest.param("application/json", False, id="plain"),
        pytest.param(
            "application/json, application/json;as=Table;v=v1;g=meta.k8s.io",
            False,
            id="table-second",
        ),
    ],
)
def test_wants_table(accept: str, wanted: bool) -> None:
    assert wants_table(accept) is wanted
