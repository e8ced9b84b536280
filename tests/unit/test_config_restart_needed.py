"""Which SpeakerConfig fields a reload puts in force and which wait for the next start:
every field is classified once, under its spec name, and a reload names the ones that
wait (config.restart_needed) instead of applying them silently to nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from configkit import messages, parse, peer, pool, speaker

from bgpd.config.fields import names
from bgpd.config.speaker_config import READ_AT_START, READ_LIVE, SPEAKER, restart_needed
from bgpd.model import SpeakerConfig


def config_of(**spec: Any) -> SpeakerConfig:
    result = parse(pool(), peer(), speaker(**spec))
    assert result.config is not None, messages(result.errors)
    return result.config.speaker


def test_every_field_is_classified_once_under_its_spec_name() -> None:
    """A new SpeakerConfig field must be put in one of the two tables: the tables are what
    tells an operator whether SIGHUP applies it."""
    attrs = [a for _, a in READ_AT_START + READ_LIVE]
    spec_names = [n for n, _ in READ_AT_START + READ_LIVE]
    assert sorted(attrs) == sorted(f.name for f in dataclasses.fields(SpeakerConfig))
    assert sorted(spec_names) == sorted(names(SPEAKER.spec))


@pytest.mark.parametrize(
    ("started", "new", "waiting"),
    [
        pytest.param({}, {}, (), id="unchanged"),
        pytest.param({}, {"loadBalancerClass": "x"}, (), id="live-field"),
        pytest.param({}, {"bfdStrict": False, "onSigterm": "drain"}, (), id="live-fields"),
        pytest.param({}, {"mqtt": {"host": "broker.example"}}, ("spec.mqtt",), id="mqtt-added"),
        pytest.param(
            {"mqtt": {"host": "a.example"}},
            {"mqtt": {"host": "b.example"}},
            ("spec.mqtt",),
            id="mqtt-host-changed",
        ),
        pytest.param(
            {},
            {"metricsAddress": "127.0.0.1:9999", "debounce": "1s", "logFormat": "json"},
            ("spec.metricsAddress", "spec.debounce", "spec.logFormat"),
            id="three-at-start",
        ),
        pytest.param({}, {"dataPlaneCheck": {}}, ("spec.dataPlaneCheck",), id="check-added"),
        pytest.param({"dataPlaneCheck": {}}, {}, (), id="check-removed-is-live"),
        pytest.param(
            {"dataPlaneCheck": {}},
            {"dataPlaneCheck": {"interval": "5s"}},
            (),
            id="check-settings-are-live",
        ),
        pytest.param({"debounce": "1s"}, {"debounce": 1}, (), id="same-value-other-spelling"),
    ],
)
def test_restart_needed(
    started: dict[str, Any], new: dict[str, Any], waiting: tuple[str, ...]
) -> None:
    assert restart_needed(config_of(**started), config_of(**new)) == waiting
