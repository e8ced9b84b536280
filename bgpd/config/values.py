"""Readers of the value types the kinds share: the unknown-key check, scalars, Go
durations, Kubernetes names and labels, label selectors. Each reports problems on the
Doc and returns None for a bad value; none raises."""

from __future__ import annotations

import ipaddress
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Final

from bgpd.attributes import check_command_text
from bgpd.config.fields import DNS_LABEL, DNS_SUBDOMAIN, REQUIREMENT_FIELDS, SELECTOR_FIELDS, names
from bgpd.config.issues import MISSING, Doc, T
from bgpd.model import (
    IPAddress,
    LabelSelector,
    SelectorOperator,
    SelectorRequirement,
)


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxdict, _SHOW.maxlist = 2, 4, 4
_SHOW.maxstring = _SHOW.maxother = 78
_SHOW.maxlong = 40


def show(value: object) -> str:
    """A short, single-line rendering of a bad value for a message. Bounded work whatever
    the value holds: a string is cut before it is quoted, a list or mapping is shown only
    to two levels (reprlib), so an alias-expanded value costs nothing to mention."""
    text = repr(value[:80]) if isinstance(value, str) else _SHOW.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def read_fields(
    doc: Doc,
    path: str,
    value: object,
    known: Iterable[str],
    unsupported: Mapping[str, str] | None = None,
    *,
    ignored: Iterable[str] = (),
) -> dict[str, object] | None:
    """Check that value is a mapping with string keys drawn from `known`.

    Unknown keys are errors (with a close match suggested); keys in `unsupported` are
    errors carrying the reason; keys in `ignored` are dropped on purpose (status and
    server-side metadata). Returns the known keys' values, or None if value is no mapping.
    """
    if not isinstance(value, Mapping):
        doc.error(path, f"must be a mapping, not {type_name(value)}")
        return None
    known_set = set(known)
    unsupported = unsupported or {}
    ignored_set = set(ignored)
    out: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            doc.error(path, f"key {show(key)} is not a string")
            continue
        if key in known_set:
            out[key] = item
        elif key in unsupported:
            doc.error(join_path(path, key), f"not supported: {unsupported[key]}")
        elif key not in ignored_set:
            # Imported here, for a message only: a valid configuration never needs it
            # (difflib is ~0.2 MiB in every speaker otherwise).
            import difflib

            close = difflib.get_close_matches(key, sorted(known_set), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            doc.error(join_path(path, _safe_key(key)), f"unknown field{hint}")
    return out


def _safe_key(key: str) -> str:
    """A key fit for a one-line message: control characters shown escaped."""
    return key if not re.search(r"[\x00-\x1f\x7f]", key) else repr(key)


# --------------------------------------------------------------------------- scalars


def read_int(doc: Doc, path: str, value: object, lo: int, hi: int) -> int | None:
    # bool is an int in Python; YAML `true` must not pass as 1.
    if isinstance(value, bool) or not isinstance(value, int):
        doc.error(path, f"must be an integer, not {type_name(value)}")
        return None
    if not lo <= value <= hi:
        doc.error(path, f"{value} is out of range ({lo}-{hi})")
        return None
    return value


def read_bool(doc: Doc, path: str, value: object) -> bool | None:
    if not isinstance(value, bool):
        doc.error(path, f"must be true or false, not {type_name(value)}")
        return None
    return value


def read_text(doc: Doc, path: str, value: object, *, empty: bool = False) -> str | None:
    """A string that may reach an ExaBGP command line or config file: no control characters."""
    if not isinstance(value, str):
        doc.error(path, f"must be a string, not {type_name(value)}")
        return None
    if not value and not empty:
        doc.error(path, "must not be empty")
        return None
    try:
        check_command_text(value)
    except ValueError as exc:
        doc.error(path, str(exc))
        return None
    return value


def read_secret(doc: Doc, path: str, value: object) -> str | None:
    """read_text for a password: the messages never hold the value, not even a bad one
    (a control character is named by its position), because validate, the speaker's
    start and config.reload_failed all print them."""
    if not isinstance(value, str):
        doc.error(path, f"must be a string, not {type_name(value)}")
        return None
    if not value:
        doc.error(path, "must not be empty")
        return None
    bad = re.search(r"[\x00-\x1f\x7f]", value)
    if bad is not None:
        doc.error(
            path,
            f"holds a control character at position {bad.start() + 1} (value not shown: a secret)",
        )
        return None
    return value


def _unique_list(
    doc: Doc,
    path: str,
    value: object,
    item: Callable[[Doc, str, object], T | None],
    *,
    unique: bool = True,
) -> list[T] | None:
    """A list whose items `item` parses; a repeated item is an error, as MetalLB's
    validateDuplicate and validateLabelSelectorDuplicate make it. None if any item is bad."""
    if not isinstance(value, list):
        doc.error(path, f"must be a list, not {type_name(value)}")
        return None
    out: list[T] = []
    ok = True
    for i, raw in enumerate(value):
        got = item(doc, f"{path}[{i}]", raw)
        if got is None:
            ok = False
        elif unique and got in out:
            doc.error(f"{path}[{i}]", f"{show(raw)} is listed twice")
            ok = False
        else:
            out.append(got)
    return out if ok else None


def read_text_list(doc: Doc, path: str, value: object, *, unique: bool = True) -> list[str] | None:
    return _unique_list(doc, path, value, read_text, unique=unique)


def read_ip(doc: Doc, path: str, value: object) -> IPAddress | None:
    text = read_text(doc, path, value)
    if text is None:
        return None
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        doc.error(path, f"{text!r} is not an IP address")
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        doc.error(path, f"{text!r}: zoned IPv6 addresses are not supported")
        return None
    return ip


_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS: Final = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}


#: Characters of a duration string; "1h2m3.000000001s" is 16, so a longer one is hostile.
MAX_DURATION_CHARS: Final = 64


def parse_duration(text: str) -> Fraction:
    """Parse a Go duration string (time.ParseDuration, which metav1.Duration uses):
    "90s", "1m30s", "1.5h", "300ms", "0". Returns seconds; raises ValueError. A string
    over MAX_DURATION_CHARS is refused unread (Python would refuse its digits anyway,
    past 4,300 of them, with a less useful message)."""
    if len(text) > MAX_DURATION_CHARS:
        raise ValueError(
            f"a duration of {len(text)} characters is too long (at most {MAX_DURATION_CHARS})"
        )
    s = text.strip()
    sign = 1
    if s[:1] in "+-" and s:
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return Fraction(0)
    if not s:
        raise ValueError(f'{text!r} is not a duration (like "90s" or "1m30s")')
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f'{text!r} is not a duration (like "90s" or "1m30s")')
        total += Fraction(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def read_duration(
    doc: Doc, path: str, value: object, *, maximum: int, numbers: bool = False
) -> Fraction | None:
    """A Go duration string, as metav1.Duration takes it (a bare number is refused there;
    our own SpeakerConfig also takes plain seconds when numbers=True), at most `maximum`
    seconds: every duration has a bound in the field table (Field.max_seconds), so no
    value can overflow a float or a timer downstream."""
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):
            doc.error(path, f"{value} is not a number of seconds")
            return None
        seconds = Fraction(value)
    elif isinstance(value, str):
        try:
            check_command_text(value)
            seconds = parse_duration(value)
        except ValueError as exc:
            doc.error(path, str(exc))
            return None
    else:
        expect = (
            'a duration like "90s" or a number of seconds'
            if numbers
            else ('a duration string like "90s" or "1m30s"')
        )
        doc.error(path, f"must be {expect}, not {type_name(value)}")
        return None
    if seconds < 0:
        doc.error(path, f"{show(value)} is negative")
        return None
    if seconds > maximum:
        doc.error(path, f"{show(value)} is out of range (0-{maximum}s)")
        return None
    return seconds


def read_whole_seconds(doc: Doc, path: str, value: object, *, maximum: int) -> int | None:
    seconds = read_duration(doc, path, value, maximum=maximum)
    if seconds is None:
        return None
    if seconds.denominator != 1:
        doc.error(path, f"{show(value)}: must be a whole number of seconds (BGP timers are)")
        return None
    return int(seconds)


# --------------------------------------------------------------------------- names

_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
DNS_LABEL_RE = re.compile(DNS_LABEL)
LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def dns_subdomain_error(text: str) -> str | None:
    """None when text is a valid Kubernetes object name (RFC 1123 subdomain), else why not."""
    if len(text) > 253:
        return "must be at most 253 characters (a Kubernetes DNS-1123 subdomain)"
    if not _DNS_SUBDOMAIN.fullmatch(text):
        return (
            f"{text!r} is not a valid Kubernetes name: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (DNS-1123 subdomain)"
        )
    return None


def _label_key(text: str) -> str | None:
    """None when text is a valid label key (optional DNS prefix + '/' + name), else why not."""
    prefix, _, name = text.rpartition("/")
    if "/" in text and (not prefix or dns_subdomain_error(prefix) is not None):
        return f"label key {text!r}: prefix must be a DNS-1123 subdomain"
    if len(name) > 63 or not LABEL_NAME_RE.fullmatch(name):
        return (
            f"label key {text!r}: name must be 1-63 characters of letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or digit"
        )
    return None


def _label_value(text: str) -> str | None:
    if text and (len(text) > 63 or not LABEL_NAME_RE.fullmatch(text)):
        return (
            f"label value {text!r} must be at most 63 characters of letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or digit"
        )
    return None


def read_labels(doc: Doc, path: str, value: object) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        doc.error(path, f"must be a mapping, not {type_name(value)}")
        return None
    out: dict[str, str] = {}
    ok = True
    for key, item in value.items():
        if not isinstance(key, str):
            doc.error(path, f"key {show(key)} is not a string")
            ok = False
            continue
        why = _label_key(key)
        if why is not None:
            doc.error(join_path(path, _safe_key(key)), why)
            ok = False
            continue
        if not isinstance(item, str):
            doc.error(join_path(path, key), f"must be a string, not {type_name(item)}")
            ok = False
            continue
        why = _label_value(item)
        if why is not None:
            doc.error(join_path(path, key), why)
            ok = False
            continue
        out[key] = item
    return out if ok else None


# --------------------------------------------------------------------------- selectors


def _selector(doc: Doc, path: str, value: object) -> LabelSelector | None:
    """metav1.LabelSelector, validated as metav1.LabelSelectorAsSelector does."""
    f = read_fields(doc, path, value, names(SELECTOR_FIELDS))
    if f is None:
        return None
    before = doc.errors
    labels: dict[str, str] = {}
    if "matchLabels" in f:
        labels = read_labels(doc, join_path(path, "matchLabels"), f["matchLabels"]) or {}
    reqs: list[SelectorRequirement] = []
    if "matchExpressions" in f:
        exprs = f["matchExpressions"]
        epath = join_path(path, "matchExpressions")
        if not isinstance(exprs, list):
            doc.error(epath, f"must be a list, not {type_name(exprs)}")
        else:
            for i, expr in enumerate(exprs):
                req = _requirement(doc, f"{epath}[{i}]", expr)
                if req is None:
                    continue
                if req in reqs:
                    # MetalLB: validateLabelSelectorMatchExpressions.
                    doc.error(f"{epath}[{i}]", "duplicate match expression")
                    continue
                reqs.append(req)
    if doc.errors != before:
        return None
    return LabelSelector(match_labels=tuple(sorted(labels.items())), match_expressions=tuple(reqs))


def _requirement(doc: Doc, path: str, value: object) -> SelectorRequirement | None:
    f = read_fields(doc, path, value, names(REQUIREMENT_FIELDS))
    if f is None:
        return None
    before = doc.errors
    key = f.get("key", MISSING)
    op_text = f.get("operator", MISSING)
    if key is MISSING:
        doc.error(join_path(path, "key"), "is required")
    elif isinstance(key, str):
        why = _label_key(key)
        if why is not None:
            doc.error(join_path(path, "key"), why)
    else:
        doc.error(join_path(path, "key"), f"must be a string, not {type_name(key)}")
    operator: SelectorOperator | None = None
    if op_text is MISSING:
        doc.error(join_path(path, "operator"), "is required")
    elif not isinstance(op_text, str) or op_text not in {o.value for o in SelectorOperator}:
        doc.error(
            join_path(path, "operator"),
            f"{show(op_text)} is not one of {', '.join(o.value for o in SelectorOperator)}",
        )
    else:
        operator = SelectorOperator(str(op_text))
    values: list[str] = []
    if "values" in f and f["values"] is not None:
        got = read_text_list(doc, join_path(path, "values"), f["values"], unique=False)
        for i, v in enumerate(got or ()):
            why = _label_value(v)
            if why is not None:
                doc.error(f"{join_path(path, 'values')}[{i}]", why)
        values = got or []
    if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        doc.error(join_path(path, "values"), f"must not be empty for operator {operator}")
    if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        doc.error(join_path(path, "values"), f"must be empty for operator {operator}")
    if doc.errors != before or operator is None or not isinstance(key, str):
        return None
    return SelectorRequirement(key=key, operator=operator, values=tuple(values))


def read_selectors(doc: Doc, path: str, value: object) -> tuple[LabelSelector, ...] | None:
    if value is None:
        return ()
    got = _unique_list(doc, path, value, _selector)
    return None if got is None else tuple(got)
