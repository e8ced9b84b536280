"""The log limiter (bgpd.logs.LogLimiter): a flapping session's ~100 lines a second
become a few lines per period, and the next one says how many were held back."""

from __future__ import annotations

import logging

import pytest

from bgpd.logs import LogLimiter, log_limited


def run(limiter: LogLimiter, events: list[tuple[str, float]]) -> list[tuple[str, bool, int]]:
    return [(key, *limiter.check(key, at)) for key, at in events]


LIMITS = [
    pytest.param(
        [("a", 0.0), ("a", 0.1), ("a", 0.2), ("a", 0.3)],
        [("a", True, 0), ("a", True, 0), ("a", False, 0), ("a", False, 0)],
        id="burst-then-held",
    ),
    pytest.param(
        [("a", 0.0), ("a", 0.1), ("a", 0.2), ("a", 0.3), ("a", 10.0)],
        [("a", True, 0), ("a", True, 0), ("a", False, 0), ("a", False, 0), ("a", True, 2)],
        id="next-period-reports-the-held-count",
    ),
    pytest.param(
        [("a", 0.0), ("a", 0.1), ("b", 0.2), ("a", 0.3)],
        [("a", True, 0), ("a", True, 0), ("b", True, 0), ("a", False, 0)],
        id="keys-are-independent",
    ),
]


@pytest.mark.parametrize(("events", "expected"), LIMITS)
def test_limiter(events: list[tuple[str, float]], expected: list[tuple[str, bool, int]]) -> None:
    assert run(LogLimiter(burst=2, period=10.0), events) == expected


def test_log_limited_says_how_many_were_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.limited")
    limiter = LogLimiter(burst=1, period=1.0)
    with caplog.at_level(logging.INFO, logger="test.limited"):
        for i in range(100):
            log_limited(limiter, "peer tor", i * 0.01, logger, logging.INFO, "peer.down")
        log_limited(limiter, "peer tor", 1.5, logger, logging.INFO, "peer.down")
    contexts = [getattr(r, "kube_bgpd_context", {}) for r in caplog.records]
    assert contexts == [{}, {"suppressed": "99 similar lines suppressed"}]
