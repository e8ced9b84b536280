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
