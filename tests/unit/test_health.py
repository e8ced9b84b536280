"""/healthz: restart the speaker only when its ExaBGP is down for good or hung."""

from __future__ import annotations

import pytest

from bgpd.speaker.health import HealthInputs, health

HEALTH = [
    pytest.param(HealthInputs(True, True, False), (True, "ok"), id="running"),
    pytest.param(HealthInputs(False, False, False), (True, "ok"), id="not-configured-yet"),
    pytest.param(
        HealthInputs(True, False, False), (False, "exabgp is not running"), id="not-running"
    ),
    pytest.param(HealthInputs(True, False, True), (True, "ok"), id="stopping-on-purpose"),
    pytest.param(
        HealthInputs(True, True, False, answering=False),
        (False, "exabgp does not answer its API (hung): restarting it"),
        id="hung",
    ),
]


@pytest.mark.parametrize(("inputs", "expected"), HEALTH)
def test_health(inputs: HealthInputs, expected: tuple[bool, str]) -> None:
    assert health(inputs) == expected
