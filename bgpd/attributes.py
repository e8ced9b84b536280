"""Parsing and checking of BGP path-attribute text shared by the config loader and the
per-Service annotations.

Anything parsed here may end up on an ExaBGP command line, so besides the syntax it
rejects control characters: ExaBGP reads its API one line at a time, and a newline in a
community would turn one announce into two commands (ExaBGP's own healthcheck applies the
same rule). Pure functions; errors are ValueError with a message naming the bad text.
"""

from __future__ import annotations

import re
from typing import Literal

#: RFC 1997 well-known communities, by the names operators write (as MetalLB accepts).
WELL_KNOWN: dict[str, str] = {
    "no-export": "65535:65281",
    "no-advertise": "65535:65282",
    "no-export-subconfed": "65535:65283",
    "no-peer": "65535:65284",
    "graceful-shutdown": "65535:0",
    "blackhole": "65535:666",
}

#: RFC 8326 GRACEFUL_SHUTDOWN, attached while draining.
GRACEFUL_SHUTDOWN = "65535:0"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NUMBER = re.compile(r"\d{1,10}")

MAX_U16 = 0xFFFF
MAX_U32 = 0xFFFFFFFF

#: Characters of a bad value an error message echoes (excerpt()).
EXCERPT_CHARS = 64


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` as an error message shows it: quoted, and cut to its first ``limit``
    characters plus its length when longer. An annotation may hold 256 KiB (a Node's or
    a Service's up to the API's limits), and error messages travel into /status, explain,
    Events and logs: echoing the whole value multiplied it there (issue 15: 20 Services
    with 1 MB annotations grew /status to 20 MB)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def check_command_text(text: str) -> str:
    """Return text unchanged, or raise if it holds a control character (newline, tab, NUL)."""
    bad = _CONTROL.search(text)
    if bad is not None:
        raise ValueError(f"{excerpt(text)} holds a control character ({bad.group()!r})")
    return text


def _number(part: str, limit: int, what: str, text: str) -> int:
    if not _NUMBER.fullmatch(part):
        raise ValueError(f"{excerpt(text)}: {what} {excerpt(part)} is not a number")
    value = int(part)
    if value > limit:
        raise ValueError(f"{excerpt(text)}: {what} {value} is out of range (0-{limit})")
    return value


def parse_community(text: str) -> tuple[Literal["standard", "large"], str]:
    """Parse one community as MetalLB writes it: `a:b` (16-bit each), a well-known name, or
    `large:a:b:c` (32-bit each, RFC 8092). Returns the kind and the canonical text
    ("a:b", or "a:b:c" without the `large:` prefix)."""
    check_command_text(text)
    stripped = text.strip()
    if stripped in WELL_KNOWN:
        return "standard", WELL_KNOWN[stripped]
    parts = stripped.split(":")
    if parts[0] == "large":
        if len(parts) != 4:
            raise ValueError(
                f"{excerpt(text)}: a large community is large:<global>:<local1>:<local2>"
            )
        nums = [_number(p, MAX_U32, "field", text) for p in parts[1:]]
        return "large", ":".join(str(n) for n in nums)
    if len(parts) != 2:
        raise ValueError(
            f"{excerpt(text)}: a community is <asn>:<value> (16-bit each), large:<a>:<b>:<c>, "
            f"or one of {', '.join(sorted(WELL_KNOWN))}"
        )
    asn = _number(parts[0], MAX_U16, "first half", text)
    value = _number(parts[1], MAX_U16, "second half", text)
    return "standard", f"{asn}:{value}"


def parse_u32(text: str, what: str) -> int:
    """Parse a local-preference or MED: an unsigned 32-bit integer."""
    check_command_text(text)
    return _number(text.strip(), MAX_U32, what, text)
