"""The speaker's last valid attributes across a restart (issue 16, item 9 kept over
restarts): the file's round trip, what is ignored (with a warning) rather than trusted,
and a Decider started from what was kept announcing a Service whose annotation is now
invalid, as the speaker before the restart did."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, route_table, svc

from bgpd.decision import ANNOTATION_LOCAL_PREF, Decider
from bgpd.model import ClusterSnapshot, NodeName, RouteAttributes, ServiceKey
from bgpd.speaker import attribute_state
from bgpd.speaker.attribute_state import MAX_BYTES, dumps, load, loads, save

KEPT = {
    ServiceKey("demo/web"): RouteAttributes(
        communities=("64512:100",), large_communities=("64512:1:2",), local_pref=150, med=7
    ),
    ServiceKey("demo/api"): RouteAttributes(),
}


def test_round_trip_and_atomic_write(tmp_path: Path) -> None:
    path = tmp_path / attribute_state.FILE_NAME
    assert save(path, KEPT)
    assert load(path) == KEPT
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    assert dumps(KEPT) == path.read_text()  # sorted: equal maps, equal files


def test_missing_file_is_no_memory_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert load(tmp_path / "absent.json") == {}
    assert caplog.records == []


BAD = [
    pytest.param("{", id="not-json"),
    pytest.param(json.dumps({"version": 2, "services": {}}), id="other-version"),
    pytest.param(json.dumps({"version": 1, "services": []}), id="services-not-object"),
    pytest.param(json.dumps({"version": 1, "services": {"web": {}}}), id="key-not-ns-name"),
    pytest.param(
        json.dumps({"version": 1, "services": {"demo/web": {"localPref": "high"}}}),
        id="bad-local-pref",
    ),
    pytest.param(
        json.dumps({"version": 1, "services": {"demo/web": {"communities": "64512:1"}}}),
        id="communities-not-list",
    ),
]


@pytest.mark.parametrize("text", BAD)
def test_unusable_file_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    path = tmp_path / attribute_state.FILE_NAME
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="bgpd.speaker"):
        assert load(path) == {}
    assert [r.getMessage().split()[0] for r in caplog.records] == ["state.last_valid_ignored"]
    with pytest.raises(ValueError, match=r"."):
        loads(text)


def test_oversized_file_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / attribute_state.FILE_NAME
    with path.open("wb") as f:
        f.truncate(MAX_BYTES + 1)
    with caplog.at_level(logging.WARNING, logger="bgpd.speaker"):
        assert load(path) == {}
    (record,) = caplog.records
    assert "more than" in record.kube_bgpd_context["error"]


def test_unwritable_directory_is_logged_not_raised(tmp_path: Path) -> None:
    assert not save(tmp_path / "missing-dir" / attribute_state.FILE_NAME, KEPT)


CFG = config(
    pools=[pool("p", "10.99.100.0/24")],
    peers=[peer("tor", "172.31.250.1")],
    advertisements=[adv()],
)


def snapshot_with(local_pref: str) -> ClusterSnapshot:
    return cluster(
        [svc("demo/web", "10.99.100.1", annotations={ANNOTATION_LOCAL_PREF: local_pref})],
        [eps("demo/web", ep("n1"))],
        [node("n1")],
    )


def test_restarted_decider_keeps_announcing_with_the_kept_attributes(tmp_path: Path) -> None:
    """Before the restart: local-pref 150 was valid, then edited to `high` (kept: 150).
    After it, a Decider started from the file announces with 150, as before; one started
    without it would not announce the Service at all."""
    before = Decider()
    before.decide(CFG, snapshot_with("150"), NodeName("n1"))
    kept = before.decide(CFG, snapshot_with("high"), NodeName("n1"))
    path = tmp_path / attribute_state.FILE_NAME
    assert save(path, before.last_valid)

    restarted = Decider(load(path)).decide(CFG, snapshot_with("high"), NodeName("n1"))
    assert route_table(restarted.routes) == route_table(kept.routes)
    assert [r.attributes.local_pref for r in restarted.routes] == [150]
    assert Decider().decide(CFG, snapshot_with("high"), NodeName("n1")).routes == ()
