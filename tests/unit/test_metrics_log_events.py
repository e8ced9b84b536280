"""Log event names are a contract (log pipelines match on them): each one in the code is
well-formed and listed in docs/observability.md."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "observability.md"
NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def _event_arg(node: ast.expr) -> str | None:
    """The event name as a regex: a literal, or an f-string such as f"peer.{state}" whose
    placeholders stand for one lowercase word each."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(re.escape(v.value))
            else:
                parts.append("[a-z0-9_]+")
        return "".join(parts)
    return None


#: The logging functions of bgpd.logs, and where their event name is among the arguments.
EVENT_ARGUMENT = {"log": 2, "log_limited": 5}


@functools.cache
def log_events() -> dict[str, set[str]]:
    """event name regex -> files calling ``log(logger, level, EVENT, ...)`` (or
    ``log_limited(limiter, key, now, logger, level, EVENT, ...)``) with it."""
    found: dict[str, set[str]] = {}
    for package in ("bgpd", "k8s_watcher"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and (at := EVENT_ARGUMENT.get(node.func.id)) is not None
                    and len(node.args) > at
                    and (pattern := _event_arg(node.args[at])) is not None
                ):
                    rel = str(path.relative_to(ROOT))
                    found.setdefault(pattern, set()).add(rel)
    return found


def documented() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Log events", 1)[1]
    return set(re.findall(r"^\| `([a-z0-9_.]+)` \|", section, flags=re.MULTILINE))


def test_the_scan_finds_the_events_we_know() -> None:
    events = log_events()
    assert events[re.escape("mqtt.connected")] == {"bgpd/mqtt.py"}


def test_event_names_are_dotted_lowercase() -> None:
    assert all(NAME.match(e) for e in documented())
    literals = [p.replace("\\", "") for p in log_events() if "[a-z0-9_]+" not in p]
    bad = sorted(e for e in literals if not NAME.match(e))
    assert not bad, f"not component.event: {bad}"


def test_every_event_is_documented() -> None:
    names = documented()
    missing = sorted(p for p in log_events() if not any(re.fullmatch(p, n) for n in names))
    assert not missing, (
        f"add to the '### Log events' table of docs/observability.md: {missing} "
        "(python tests/unit/test_metrics_log_events.py prints the rows)"
    )


def test_no_documented_event_is_gone() -> None:
    patterns = list(log_events())
    gone = sorted(n for n in documented() if not any(re.fullmatch(p, n) for p in patterns))
    assert not gone, f"documented but no longer logged: {gone}"


if __name__ == "__main__":
    # Prints the table rows for docs/observability.md; the meaning column is kept by hand.
    for pattern, files in sorted(log_events().items()):
        event = pattern.replace("\\", "").replace("[a-z0-9_]+", "*")
        print(f"| `{event}` | {', '.join(sorted(files))} | |")
