"""SpeakerConfig's BFD settings: bfdStrict (announce only over a BFD-confirmed path) and
bfdWatchdog (how long the speaker may hang before bfdd is killed)."""

from __future__ import annotations

from typing import Any

import pytest
from configkit import messages, parse, peer, pool, speaker

from bgpd.model import SpeakerConfig


def config_of(**spec: Any) -> SpeakerConfig:
    result = parse(pool(), peer(), speaker(**spec))
    assert result.config is not None, messages(result.errors)
    return result.config.speaker


def test_defaults() -> None:
    s = config_of()
    assert (s.bfd_strict, s.bfd_watchdog) == (True, 5.0)


@pytest.mark.parametrize(
    ("spec", "strict", "watchdog"),
    [
        pytest.param({"bfdStrict": False}, False, 5.0, id="strict-off"),
        pytest.param({"bfdWatchdog": "2500ms"}, True, 2.5, id="duration-text"),
        pytest.param({"bfdWatchdog": 60}, True, 60.0, id="seconds-max"),
        pytest.param({"bfdWatchdog": 1}, True, 1.0, id="seconds-min"),
    ],
)
def test_values(spec: dict[str, Any], strict: bool, watchdog: float) -> None:
    s = config_of(**spec)
    assert (s.bfd_strict, s.bfd_watchdog) == (strict, watchdog)


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param({"bfdStrict": "yes"}, "spec.bfdStrict", id="strict-not-bool"),
        pytest.param({"bfdWatchdog": "500ms"}, "spec.bfdWatchdog", id="below-a-second"),
        pytest.param({"bfdWatchdog": 61}, "spec.bfdWatchdog", id="above-a-minute"),
    ],
)
def test_errors(spec: dict[str, Any], error: str) -> None:
    result = parse(pool(), peer(), speaker(**spec))
    assert result.config is None
    assert [m.split(":")[1].strip() for m in messages(result.errors)] == [error]
