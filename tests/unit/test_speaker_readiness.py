"""bgpd.speaker.health.readiness: the answer of /readyz, table-driven. A stale
configuration keeps the speaker ready (it announces what the last valid configuration
says) and the answer says what is held back."""

from __future__ import annotations

import pytest

from bgpd.speaker.health import ReadinessInputs, readiness

READY = ReadinessInputs(synced=True, rendered=True, connected=True, decided=True)


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        pytest.param(READY, (True, "ok"), id="ready"),
        pytest.param(
            ReadinessInputs(True, True, True, True, config_stale="BGPPeer ns/tor: spec.holdTime"),
            (True, "ok; config stale: BGPPeer ns/tor: spec.holdTime"),
            id="config-stale-still-ready",
        ),
        pytest.param(
            ReadinessInputs(False, True, True, True, config_stale="x"),
            (False, "cluster source not synced"),
            id="not-synced-first",
        ),
        pytest.param(
            ReadinessInputs(True, True, False, True),
            (False, "exabgp helper not connected"),
            id="helper",
        ),
    ],
)
def test_readiness(inputs: ReadinessInputs, expected: tuple[bool, str]) -> None:
    assert readiness(inputs) == expected
