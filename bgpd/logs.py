"""Logging set-up: stable event names with key/value context, as text or JSON lines.

Every log call names an event (`route.announced`, `peer.down`, `config.invalid`) and passes
its context as keyword arguments through `log()`, so log pipelines can match on names that
do not change when a message is reworded. Secrets never go through here: callers pass
peer names, not passwords.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_CONTEXT = "kube_bgpd_context"


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx: dict[str, Any] = getattr(record, _CONTEXT, {})
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        extra = " ".join(f"{k}={_text(v)}" for k, v in ctx.items())
        line = f"{when}.{int(record.msecs):03d}Z {record.levelname:<7} {record.getMessage()}"
        if extra:
            line += " " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx: dict[str, Any] = getattr(record, _CONTEXT, {})
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
        }
        doc.update(
            {k: v if isinstance(v, int | float | bool | None) else str(v) for k, v in ctx.items()}
        )
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, separators=(",", ":"))


def _text(value: object) -> str:
    s = str(value)
    return json.dumps(s) if (not s or " " in s or "=" in s or '"' in s) else s


def setup_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    """Configure the root logger once, for the daemon's whole process, on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JSONFormatter() if log_format == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def log(logger: logging.Logger, level: int, event: str, **context: Any) -> None:
    """Log a stable event name with key/value context."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={_CONTEXT: context}, stacklevel=2)


class LogLimiter:
    """At most ``burst`` lines per key in any ``period`` seconds; the rest are counted,
    and the next line let through says how many were held back ("N similar lines
    suppressed"). A flapping session logs ~100 lines a second otherwise, burying the
    one line that says what is wrong.

    Pure state: the caller passes the clock, so tests need no sleeping."""

    def __init__(self, *, burst: int = 5, period: float = 10.0) -> None:
        self.burst = burst
        self.period = period
        #: key -> (window start, lines let through in it, lines suppressed since the last)
        self._windows: dict[str, tuple[float, int, int]] = {}

    def check(self, key: str, now: float) -> tuple[bool, int]:
        """(log this line?, similar lines suppressed before it, to report with it)."""
        start, passed, held = self._windows.get(key, (now, 0, 0))
        if now - start >= self.period:
            start, passed = now, 0
        if passed < self.burst:
            self._windows[key] = (start, passed + 1, 0)
            return True, held
        self._windows[key] = (start, passed, held + 1)
        return False, 0


def log_limited(
    limiter: LogLimiter,
    key: str,
    now: float,
    logger: logging.Logger,
    level: int,
    event: str,
    **context: Any,
) -> None:
    """log() through `limiter`: lines beyond its rate for `key` are counted, and the next
    line logged carries `suppressed=N`."""
    ok, held = limiter.check(key, now)
    if not ok:
        return
    if held:
        context["suppressed"] = f"{held} similar lines suppressed"
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={_CONTEXT: context}, stacklevel=2)
