"""Load MetalLB-style YAML documents into the frozen `bgpd.model.Config`.

Why this module exists: operators already have MetalLB files (IPAddressPool, BGPPeer,
BGPAdvertisement, Community, BFDProfile); they must load unchanged, and anything that would
not behave as MetalLB documents it must be refused loudly, before a single route goes out.
So the loader

* reads every document, collects *every* problem with its place (file, document, kind,
  metadata.name, field path) instead of stopping at the first one;
* rejects unknown kinds and unknown fields, and says "not supported" for MetalLB fields
  kube-bgpd parses but cannot honour (ExaBGP has no BFD, no configurable connect retry, ...)
  rather than silently ignoring them;
* rejects any text that can reach an ExaBGP command line or config file if it holds a
  newline or a control character (one newline would turn one command into two);
* cross-checks the objects (unknown pools and peers, overlapping pools, aggregation
  shorter than a pool, conflicting local-pref) with MetalLB's rules, which are cited where
  they are applied.

It must stay pure apart from reading the files it is given: no logging, no network, no
Kubernetes client, no clock. `parse_documents` takes already-parsed YAML and does no I/O at
all, so it is what the tests and the Hypothesis property drive.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml

from bgpd.attributes import MAX_U32, check_command_text, parse_community
from bgpd.model import (
    AddressRange,
    BFDProfile,
    BGPAdvertisement,
    BGPPeer,
    Community,
    Config,
    IPAddress,
    IPAddressPool,
    LabelSelector,
    LogFormat,
    MQTTConfig,
    PeerName,
    PoolName,
    SecretRef,
    SelectorOperator,
    SelectorRequirement,
    ServiceAllocation,
    SigtermAction,
    SpeakerConfig,
    frozen_map,
)

__all__ = [
    "SPEC_FIELDS",
    "ConfigError",
    "ConfigIssue",
    "LoadResult",
    "load_config",
    "load_config_or_raise",
    "parse_documents",
    "parse_duration",
    "parse_text",
]

METALLB_V1BETA1: Final = "metallb.io/v1beta1"
METALLB_V1BETA2: Final = "metallb.io/v1beta2"
KUBE_BGPD_V1ALPHA1: Final = "kube-bgpd.io/v1alpha1"

#: Linux TCP_MD5SIG_MAXKEYLEN; ExaBGP enforces the same limit.
MAX_MD5_PASSWORD = 80


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One error or warning, with enough place to find it in the files."""

    #: Where the document came from: "path/to/file.yaml" or "path:doc 3".
    source: str
    #: Kind, metadata.name and field path, e.g. "BGPPeer tor-a: spec.myASN".
    where: str
    message: str

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.where, self.message) if p]
        return ": ".join(parts)


@dataclass(frozen=True, slots=True)
class LoadResult:
    #: None when there is any error.
    config: Config | None
    errors: tuple[ConfigIssue, ...]
    warnings: tuple[ConfigIssue, ...]

    @property
    def ok(self) -> bool:
        return self.config is not None


class ConfigError(Exception):
    """The configuration has errors; `errors` lists every one, `str()` prints them all."""

    def __init__(self, errors: Sequence[ConfigIssue]) -> None:
        self.errors: tuple[ConfigIssue, ...] = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors) or "invalid configuration")


# --------------------------------------------------------------------------- collection


class _Issues:
    """Accumulates errors and warnings in the order they are found."""

    def __init__(self) -> None:
        self.errors: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        #: source -> order of first appearance, so messages come out in file order.
        self.order: dict[str, int] = {}

    def see(self, source: str) -> None:
        self.order.setdefault(source, len(self.order))

    def sorted(self, issues: list[ConfigIssue]) -> tuple[ConfigIssue, ...]:
        """Stable sort by document, keeping each document's messages in field order."""
        return tuple(sorted(issues, key=lambda i: self.order.get(i.source, len(self.order))))


_MISSING: Final = object()
T = TypeVar("T")


@dataclass(slots=True)
class _Doc:
    """One document being read: where it came from and what it is, for every message."""

    source: str
    kind: str
    name: str
    issues: _Issues
    errors: int = 0

    def where(self, path: str) -> str:
        head = f"{self.kind} {self.name}" if self.kind else self.name
        return f"{head}: {path}" if path else head

    def error(self, path: str, message: str) -> None:
        self.errors += 1
        self.issues.errors.append(ConfigIssue(self.source, self.where(path), message))

    def warn(self, path: str, message: str) -> None:
        self.issues.warnings.append(ConfigIssue(self.source, self.where(path), message))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: object) -> str:
    """A short, single-line rendering of a bad value for a message."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(value: object) -> str:
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


def _fields(
    doc: _Doc,
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
        doc.error(path, f"must be a mapping, not {_type_name(value)}")
        return None
    known_set = set(known)
    unsupported = unsupported or {}
    ignored_set = set(ignored)
    out: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            doc.error(path, f"key {_show(key)} is not a string")
            continue
        if key in known_set:
            out[key] = item
        elif key in unsupported:
            doc.error(_join(path, key), f"not supported: {unsupported[key]}")
        elif key not in ignored_set:
            close = difflib.get_close_matches(key, sorted(known_set), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            doc.error(_join(path, _safe_key(key)), f"unknown field{hint}")
    return out


def _safe_key(key: str) -> str:
    """A key fit for a one-line message: control characters shown escaped."""
    return key if not re.search(r"[\x00-\x1f\x7f]", key) else repr(key)


# --------------------------------------------------------------------------- scalars


def _int(doc: _Doc, path: str, value: object, lo: int, hi: int) -> int | None:
    # bool is an int in Python; YAML `true` must not pass as 1.
    if isinstance(value, bool) or not isinstance(value, int):
        doc.error(path, f"must be an integer, not {_type_name(value)}")
        return None
    if not lo <= value <= hi:
        doc.error(path, f"{value} is out of range ({lo}-{hi})")
        return None
    return value


def _bool(doc: _Doc, path: str, value: object) -> bool | None:
    if not isinstance(value, bool):
        doc.error(path, f"must be true or false, not {_type_name(value)}")
        return None
    return value


def _str(doc: _Doc, path: str, value: object, *, empty: bool = False) -> str | None:
    """A string that may reach an ExaBGP command line or config file: no control characters."""
    if not isinstance(value, str):
        doc.error(path, f"must be a string, not {_type_name(value)}")
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


def _unique_list(
    doc: _Doc,
    path: str,
    value: object,
    item: Callable[[_Doc, str, object], T | None],
    *,
    unique: bool = True,
) -> list[T] | None:
    """A list whose items `item` parses; a repeated item is an error, as MetalLB's
    validateDuplicate and validateLabelSelectorDuplicate make it. None if any item is bad."""
    if not isinstance(value, list):
        doc.error(path, f"must be a list, not {_type_name(value)}")
        return None
    out: list[T] = []
    ok = True
    for i, raw in enumerate(value):
        got = item(doc, f"{path}[{i}]", raw)
        if got is None:
            ok = False
        elif unique and got in out:
            doc.error(f"{path}[{i}]", f"{_show(raw)} is listed twice")
            ok = False
        else:
            out.append(got)
    return out if ok else None


def _str_list(doc: _Doc, path: str, value: object, *, unique: bool = True) -> list[str] | None:
    return _unique_list(doc, path, value, _str, unique=unique)


def _ip(doc: _Doc, path: str, value: object) -> IPAddress | None:
    text = _str(doc, path, value)
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


def parse_duration(text: str) -> Fraction:
    """Parse a Go duration string (time.ParseDuration, which metav1.Duration uses):
    "90s", "1m30s", "1.5h", "300ms", "0". Returns seconds; raises ValueError."""
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


def _duration(doc: _Doc, path: str, value: object, *, numbers: bool = False) -> Fraction | None:
    """A Go duration string, as metav1.Duration takes it (a bare number is refused there;
    our own SpeakerConfig also takes plain seconds when numbers=True)."""
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
        doc.error(path, f"must be {expect}, not {_type_name(value)}")
        return None
    if seconds < 0:
        doc.error(path, f"{_show(value)} is negative")
        return None
    return seconds


def _whole_seconds(doc: _Doc, path: str, value: object) -> int | None:
    seconds = _duration(doc, path, value)
    if seconds is None:
        return None
    if seconds.denominator != 1:
        doc.error(path, f"{_show(value)}: must be a whole number of seconds (BGP timers are)")
        return None
    return int(seconds)


# --------------------------------------------------------------------------- names

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _dns_subdomain(text: str) -> str | None:
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
    if "/" in text and (not prefix or _dns_subdomain(prefix) is not None):
        return f"label key {text!r}: prefix must be a DNS-1123 subdomain"
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"label key {text!r}: name must be 1-63 characters of letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or digit"
        )
    return None


def _label_value(text: str) -> str | None:
    if text and (len(text) > 63 or not _LABEL_NAME.fullmatch(text)):
        return (
            f"label value {text!r} must be at most 63 characters of letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or digit"
        )
    return None


def _labels(doc: _Doc, path: str, value: object) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        doc.error(path, f"must be a mapping, not {_type_name(value)}")
        return None
    out: dict[str, str] = {}
    ok = True
    for key, item in value.items():
        if not isinstance(key, str):
            doc.error(path, f"key {_show(key)} is not a string")
            ok = False
            continue
        why = _label_key(key)
        if why is not None:
            doc.error(_join(path, _safe_key(key)), why)
            ok = False
            continue
        if not isinstance(item, str):
            doc.error(_join(path, key), f"must be a string, not {_type_name(item)}")
            ok = False
            continue
        why = _label_value(item)
        if why is not None:
            doc.error(_join(path, key), why)
            ok = False
            continue
        out[key] = item
    return out if ok else None


# --------------------------------------------------------------------------- selectors


def _selector(doc: _Doc, path: str, value: object) -> LabelSelector | None:
    """metav1.LabelSelector, validated as metav1.LabelSelectorAsSelector does."""
    f = _fields(doc, path, value, ("matchLabels", "matchExpressions"))
    if f is None:
        return None
    before = doc.errors
    labels: dict[str, str] = {}
    if "matchLabels" in f:
        labels = _labels(doc, _join(path, "matchLabels"), f["matchLabels"]) or {}
    reqs: list[SelectorRequirement] = []
    if "matchExpressions" in f:
        exprs = f["matchExpressions"]
        epath = _join(path, "matchExpressions")
        if not isinstance(exprs, list):
            doc.error(epath, f"must be a list, not {_type_name(exprs)}")
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


def _requirement(doc: _Doc, path: str, value: object) -> SelectorRequirement | None:
    f = _fields(doc, path, value, ("key", "operator", "values"))
    if f is None:
        return None
    before = doc.errors
    key = f.get("key", _MISSING)
    op_text = f.get("operator", _MISSING)
    if key is _MISSING:
        doc.error(_join(path, "key"), "is required")
    elif isinstance(key, str):
        why = _label_key(key)
        if why is not None:
            doc.error(_join(path, "key"), why)
    else:
        doc.error(_join(path, "key"), f"must be a string, not {_type_name(key)}")
    operator: SelectorOperator | None = None
    if op_text is _MISSING:
        doc.error(_join(path, "operator"), "is required")
    elif op_text not in {o.value for o in SelectorOperator}:
        doc.error(
            _join(path, "operator"),
            f"{_show(op_text)} is not one of {', '.join(o.value for o in SelectorOperator)}",
        )
    else:
        operator = SelectorOperator(str(op_text))
    values: list[str] = []
    if "values" in f and f["values"] is not None:
        got = _str_list(doc, _join(path, "values"), f["values"], unique=False)
        for i, v in enumerate(got or ()):
            why = _label_value(v)
            if why is not None:
                doc.error(f"{_join(path, 'values')}[{i}]", why)
        values = got or []
    if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        doc.error(_join(path, "values"), f"must not be empty for operator {operator}")
    if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        doc.error(_join(path, "values"), f"must be empty for operator {operator}")
    if doc.errors != before or operator is None or not isinstance(key, str):
        return None
    return SelectorRequirement(key=key, operator=operator, values=tuple(values))


def _selectors(doc: _Doc, path: str, value: object) -> tuple[LabelSelector, ...] | None:
    if value is None:
        return ()
    got = _unique_list(doc, path, value, _selector)
    return None if got is None else tuple(got)


def _may_overlap(a: tuple[LabelSelector, ...], b: tuple[LabelSelector, ...]) -> bool:
    """Whether two selector lists (OR of ANDs, empty = everything) may select a common node.

    Offline we know no nodes, so this is conservative: two selectors are disjoint only if
    both pin one label key to different values, or one requires a key the other forbids.
    """

    def disjoint(x: LabelSelector, y: LabelSelector) -> bool:
        xl, yl = dict(x.match_labels), dict(y.match_labels)
        if any(k in yl and yl[k] != v for k, v in xl.items()):
            return True
        for s, other in ((x, yl), (y, xl)):
            for r in s.match_expressions:
                if r.operator is SelectorOperator.DOES_NOT_EXIST and r.key in other:
                    return True
                if r.key not in other:
                    continue
                if r.operator is SelectorOperator.IN and other[r.key] not in r.values:
                    return True
                if r.operator is SelectorOperator.NOT_IN and other[r.key] in r.values:
                    return True
        return False

    left = a or (LabelSelector(),)
    right = b or (LabelSelector(),)
    return any(not disjoint(x, y) for x in left for y in right)


# --------------------------------------------------------------------------- kinds

_META_FIELDS: Final = ("name", "namespace", "labels", "annotations")
#: Server-side ObjectMeta fields a `kubectl get -o yaml` dump carries; meaningless here.
_META_IGNORED: Final = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "finalizers",
    "ownerReferences",
    "selfLink",
    "generateName",
)


@dataclass(slots=True)
class _Parsed:
    """What the documents held, before cross-checks. Names of objects that failed to parse
    are kept too, so a bad pool does not also make every advertisement naming it fail."""

    pools: list[tuple[IPAddressPool, _Doc]] = field(default_factory=list)
    peers: list[tuple[BGPPeer, _Doc]] = field(default_factory=list)
    advertisements: list[tuple[_AdvertisementDraft, _Doc]] = field(default_factory=list)
    communities: list[tuple[Community, _Doc]] = field(default_factory=list)
    bfd_profiles: list[tuple[BFDProfile, _Doc]] = field(default_factory=list)
    speakers: list[tuple[SpeakerConfig, _Doc]] = field(default_factory=list)
    names: dict[str, dict[str, _Doc]] = field(default_factory=dict)
    #: Peers that named a BFD profile: (profile, doc) for the cross-check.
    bfd_references: list[tuple[str, _Doc]] = field(default_factory=list)
    #: Every alias name a Community object defines, also those with a bad value, so an
    #: advertisement using one is not reported a second time.
    alias_names: set[str] = field(default_factory=set)
    all_peers_parsed: bool = True


@dataclass(frozen=True, slots=True)
class _AdvertisementDraft:
    """A BGPAdvertisement before its community aliases are resolved."""

    advertisement: BGPAdvertisement
    community_texts: tuple[str, ...]


def _metadata(doc: _Doc, value: object) -> tuple[str | None, dict[str, str]]:
    """Read metadata; returns (name or None, labels)."""
    f = _fields(doc, "metadata", value, _META_FIELDS, ignored=_META_IGNORED)
    if f is None:
        return None, {}
    name: str | None = None
    raw = f.get("name", _MISSING)
    if raw is _MISSING or raw is None or raw == "":
        doc.error("metadata.name", "is required")
    elif not isinstance(raw, str):
        doc.error("metadata.name", f"must be a string, not {_type_name(raw)}")
    else:
        why = _dns_subdomain(raw)
        if why is not None:
            doc.error("metadata.name", why)
        else:
            name = raw
    if "namespace" in f:
        ns = f["namespace"]
        if not isinstance(ns, str) or len(ns) > 63 or not _DNS_LABEL_RE.fullmatch(ns):
            doc.error("metadata.namespace", f"{_show(ns)} is not a valid namespace name")
    labels: dict[str, str] = {}
    if "labels" in f and f["labels"] is not None:
        labels = _labels(doc, "metadata.labels", f["labels"]) or {}
    if "annotations" in f and f["annotations"] is not None:
        ann = f["annotations"]
        if not isinstance(ann, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in ann.items()
        ):
            doc.error("metadata.annotations", "must be a mapping of strings to strings")
    return name, labels


def _ip_range(doc: _Doc, path: str, value: object) -> AddressRange | None:
    """One IPAddressPool address: a CIDR, an `a-b` range, or (our extension) a single IP."""
    text = _str(doc, path, value)
    if text is None:
        return None
    t = text.strip()
    if "-" in t:
        # MetalLB's ParseCIDR: split on the first '-', trim both ends.
        first_text, _, last_text = t.partition("-")
        try:
            first = ipaddress.ip_address(first_text.strip())
        except ValueError:
            doc.error(path, f"invalid IP range {text!r}: invalid start IP {first_text.strip()!r}")
            return None
        try:
            last = ipaddress.ip_address(last_text.strip())
        except ValueError:
            doc.error(path, f"invalid IP range {text!r}: invalid end IP {last_text.strip()!r}")
            return None
        if first.version != last.version:
            doc.error(path, f"invalid IP range {text!r}: start and end are of different families")
            return None
        if int(first) > int(last):
            doc.error(
                path, f"invalid IP range {text!r}: start IP {first} is after the end IP {last}"
            )
            return None
        if _zoned(first) or _zoned(last):
            doc.error(path, f"invalid IP range {text!r}: zoned IPv6 addresses are not supported")
            return None
        return AddressRange(first=first, last=last, text=text)
    try:
        if "/" in t:
            net = ipaddress.ip_network(t, strict=False)
            if net.network_address != ipaddress.ip_interface(t).ip:
                # MetalLB (Go's net.ParseCIDR) takes the network and drops host bits.
                doc.warn(path, f"{text!r} has host bits set; the pool is {net}, as in MetalLB")
        else:
            net = ipaddress.ip_network(t)  # a single address: /32 or /128
    except ValueError:
        doc.error(path, f"invalid CIDR {text!r}")
        return None
    if _zoned(net.network_address):
        doc.error(path, f"invalid CIDR {text!r}: zoned IPv6 addresses are not supported")
        return None
    return AddressRange(first=net.network_address, last=net.broadcast_address, text=text)


def _zoned(ip: IPAddress) -> bool:
    return isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None


def _parse_pool(doc: _Doc, spec: object, name: str, labels: dict[str, str], out: _Parsed) -> None:
    f = _fields(doc, "spec", spec, _POOL_FIELDS)
    if f is None:
        return
    ranges: list[AddressRange] = []
    addrs = f.get("addresses", _MISSING)
    if addrs is _MISSING or addrs is None or addrs == []:
        doc.error("spec.addresses", "pool has no addresses (CIDRs or a-b ranges)")
    elif not isinstance(addrs, list):
        doc.error("spec.addresses", f"must be a list, not {_type_name(addrs)}")
    else:
        for i, a in enumerate(addrs):
            got = _ip_range(doc, f"spec.addresses[{i}]", a)
            if got is not None:
                ranges.append(got)
    auto_assign = True
    if "autoAssign" in f:
        auto_assign = _bool(doc, "spec.autoAssign", f["autoAssign"]) is not False
    avoid = False
    if "avoidBuggyIPs" in f:
        avoid = _bool(doc, "spec.avoidBuggyIPs", f["avoidBuggyIPs"]) is True
    allocation: ServiceAllocation | None = None
    if "serviceAllocation" in f and f["serviceAllocation"] is not None:
        allocation = _service_allocation(doc, "spec.serviceAllocation", f["serviceAllocation"])
    pool = IPAddressPool(
        name=PoolName(name),
        addresses=tuple(ranges),
        auto_assign=auto_assign,
        avoid_buggy_ips=avoid,
        service_allocation=allocation,
        labels=frozen_map(labels),
    )
    # Kept even with field errors (with its good ranges), so overlap checks still run.
    out.pools.append((pool, doc))


def _service_allocation(doc: _Doc, path: str, value: object) -> ServiceAllocation | None:
    f = _fields(
        doc, path, value, ("priority", "namespaces", "namespaceSelectors", "serviceSelectors")
    )
    if f is None:
        return None
    priority: int | None = None
    if "priority" in f and f["priority"] is not None:
        # A Go int in MetalLB; lower numbers win.
        priority = _int(doc, _join(path, "priority"), f["priority"], -(2**31), 2**31 - 1)
    namespaces: list[str] = []
    if "namespaces" in f and f["namespaces"] is not None:
        got = _str_list(doc, _join(path, "namespaces"), f["namespaces"])
        for i, ns in enumerate(got or ()):
            if len(ns) > 63 or not _DNS_LABEL_RE.fullmatch(ns):
                doc.error(f"{_join(path, 'namespaces')}[{i}]", f"{ns!r} is not a namespace name")
        namespaces = got or []
    ns_sel = _selectors(doc, _join(path, "namespaceSelectors"), f.get("namespaceSelectors"))
    svc_sel = _selectors(doc, _join(path, "serviceSelectors"), f.get("serviceSelectors"))
    return ServiceAllocation(
        priority=priority,
        namespaces=tuple(namespaces),
        namespace_selectors=ns_sel or (),
        service_selectors=svc_sel or (),
    )


_PEER_V1BETA2_FIELDS: Final = (
    "myASN",
    "peerASN",
    "peerAddress",
    "peerPort",
    "sourceAddress",
    "routerID",
    "holdTime",
    "keepaliveTime",
    "connectTime",
    "password",
    "passwordSecret",
    "passwordFile",
    "ebgpMultiHop",
    "enableGracefulRestart",
    "nodeSelectors",
    "bfdProfile",
)
#: The older metallb.io/v1beta1 BGPPeer has a subset of the fields (same meaning).
_PEER_V1BETA1_FIELDS: Final = tuple(
    f
    for f in _PEER_V1BETA2_FIELDS
    if f not in {"enableGracefulRestart", "connectTime", "passwordSecret"}
)
_PEER_UNSUPPORTED: Final = {
    "dynamicASN": "kube-bgpd needs an explicit peerASN (an ExaBGP neighbor has one peer-as)",
    "localASN": "ExaBGP has no local-as replacement; set myASN instead",
    "interface": "ExaBGP cannot peer over an interface (BGP unnumbered); set peerAddress",
    "vrf": "kube-bgpd peers only in the default VRF",
    "disableMP": "kube-bgpd always runs one session per address family",
    "dualStackAddressFamily": "kube-bgpd runs one session per address family; add a BGPPeer "
    "for the other family",
}


def _parse_peer(doc: _Doc, spec: object, name: str, version: str, out: _Parsed) -> BGPPeer | None:
    known = _PEER_V1BETA2_FIELDS if version == METALLB_V1BETA2 else _PEER_V1BETA1_FIELDS
    f = _fields(doc, "spec", spec, known, _PEER_UNSUPPORTED)
    if f is None:
        return None
    before = doc.errors

    def required(key: str) -> object:
        v = f.get(key, _MISSING)
        if v is _MISSING or v is None:
            doc.error(f"spec.{key}", "is required")
            return _MISSING
        return v

    # RFC 6793 four-octet ASNs; MetalLB: "missing local ASN" for 0.
    my_asn = peer_asn = None
    if (v := required("myASN")) is not _MISSING:
        if v == 0 and not isinstance(v, bool):
            doc.error("spec.myASN", "must not be 0 (missing local ASN)")
        else:
            my_asn = _int(doc, "spec.myASN", v, 1, MAX_U32)
    if (v := required("peerASN")) is not _MISSING:
        if v == 0 and not isinstance(v, bool):
            doc.error("spec.peerASN", "must not be 0 (missing peer ASN)")
        else:
            peer_asn = _int(doc, "spec.peerASN", v, 1, MAX_U32)
    peer_address = None
    if (v := required("peerAddress")) is not _MISSING:
        peer_address = _ip(doc, "spec.peerAddress", v)
    port = 179
    if "peerPort" in f and f["peerPort"] is not None:
        port = _int(doc, "spec.peerPort", f["peerPort"], 1, 65535) or 179
    source = None
    if "sourceAddress" in f and f["sourceAddress"] not in (None, ""):
        source = _ip(doc, "spec.sourceAddress", f["sourceAddress"])
        if (
            source is not None
            and peer_address is not None
            and source.version != peer_address.version
        ):
            doc.error(
                "spec.sourceAddress",
                f"{source} is IPv{source.version} but peerAddress {peer_address} is "
                f"IPv{peer_address.version}",
            )
    router_id = None
    if "routerID" in f and f["routerID"] not in (None, ""):
        rid = _ip(doc, "spec.routerID", f["routerID"])
        if isinstance(rid, ipaddress.IPv6Address):
            doc.error(
                "spec.routerID", f"{rid}: must be an IPv4 address (a BGP identifier is 32 bits)"
            )
        elif rid is not None:
            router_id = rid

    hold_time, keepalive = _timers(doc, f)

    if "connectTime" in f and f["connectTime"] is not None:
        doc.error(
            "spec.connectTime",
            "not supported: ExaBGP's connect retry is fixed (it backs off up to 60 s); "
            "set SpeakerConfig spec.listen: true so routers can reconnect at once",
        )

    password = None
    if "password" in f and f["password"] not in (None, ""):
        password = _password(doc, "spec.password", f["password"])
    secret = None
    if "passwordSecret" in f and f["passwordSecret"] is not None:
        secret = _secret_ref(doc, "spec.passwordSecret", f["passwordSecret"])
    password_file = None
    if "passwordFile" in f and f["passwordFile"] not in (None, ""):
        pf = _str(doc, "spec.passwordFile", f["passwordFile"])
        if pf is not None and not os.path.isabs(pf):
            doc.error("spec.passwordFile", f"{pf!r} must be an absolute path")
        elif pf is not None:
            password_file = Path(pf)
    given = [
        k
        for k, v in (
            ("password", password),
            ("passwordSecret", secret),
            ("passwordFile", password_file),
        )
        if v is not None
    ]
    if len(given) > 1:
        # MetalLB: "can not have both password and secret ref set"; passwordFile likewise.
        doc.error("spec", f"{' and '.join(given)} are mutually exclusive: set one")

    multihop = False
    if "ebgpMultiHop" in f:
        multihop = _bool(doc, "spec.ebgpMultiHop", f["ebgpMultiHop"]) is True
        if multihop and my_asn is not None and my_asn == peer_asn:
            # MetalLB: "invalid ebgp-multihop parameter set for an ibgp peer".
            doc.error("spec.ebgpMultiHop", "must not be set for an iBGP peer (myASN == peerASN)")
    graceful = False
    if "enableGracefulRestart" in f:
        graceful = _bool(doc, "spec.enableGracefulRestart", f["enableGracefulRestart"]) is True
    node_selectors = _selectors(doc, "spec.nodeSelectors", f.get("nodeSelectors"))

    bfd = None
    if "bfdProfile" in f and f["bfdProfile"] not in (None, ""):
        bfd = _str(doc, "spec.bfdProfile", f["bfdProfile"])
        if bfd is not None:
            out.bfd_references.append((bfd, doc))
            doc.error(
                "spec.bfdProfile",
                "not supported: ExaBGP has no BFD (remove bfdProfile; see "
                "docs/configuration.md for running a separate BFD daemon)",
            )

    if doc.errors != before or my_asn is None or peer_asn is None or peer_address is None:
        return None
    return BGPPeer(
        name=PeerName(name),
        my_asn=my_asn,
        peer_asn=peer_asn,
        peer_address=peer_address,
        peer_port=port,
        source_address=source,
        router_id=router_id,
        hold_time=hold_time,
        keepalive_time=keepalive,
        connect_time=None,
        password=password,
        password_secret=secret,
        password_file=password_file,
        ebgp_multihop=multihop,
        enable_graceful_restart=graceful,
        node_selectors=node_selectors or (),
        bfd_profile=bfd,
    )


def _timers(doc: _Doc, f: Mapping[str, object]) -> tuple[int, int | None]:
    """holdTime and keepaliveTime with MetalLB's rules (parseTimers): either one implies the
    other (hold = 3 x keepalive), hold must be 0 or >= 3 s (RFC 4271 4.2), keepalive must
    not exceed hold. ExaBGP always sends keepalives every hold/3, so another keepalive
    cannot be honoured and is refused."""
    hold: int | None = None
    ka: int | None = None
    if f.get("holdTime") is not None:
        hold = _whole_seconds(doc, "spec.holdTime", f["holdTime"])
        if hold is None:
            return 90, None
        if 0 < hold < 3:
            doc.error("spec.holdTime", f"{_show(f['holdTime'])} is invalid: must be 0 or >= 3s")
            return 90, None
        if hold > 65535:
            doc.error("spec.holdTime", f"{_show(f['holdTime'])} is out of range (0-65535s)")
            return 90, None
    if f.get("keepaliveTime") is not None:
        ka = _whole_seconds(doc, "spec.keepaliveTime", f["keepaliveTime"])
        if ka is None:
            return hold if hold is not None else 90, None
    if hold is None and ka is None:
        return 90, None
    if hold is None:
        assert ka is not None
        hold = ka * 3
        if 0 < hold < 3 or hold > 65535:
            doc.error(
                "spec.keepaliveTime", f"{ka}s gives a hold time of {hold}s: must be 0 or 3-65535s"
            )
        return hold, ka
    if ka is None:
        return hold, None
    if ka > hold:
        doc.error("spec.keepaliveTime", f"{ka}s must not be greater than holdTime ({hold}s)")
    elif ka != hold // 3:
        doc.error(
            "spec.keepaliveTime",
            f"not supported: ExaBGP sends keepalives every holdTime/3 ({hold // 3}s); "
            f"remove keepaliveTime or set it to {hold // 3}s",
        )
    return hold, ka


def _password(doc: _Doc, path: str, value: object) -> str | None:
    """A TCP MD5 key (RFC 2385). The ExaBGP renderer writes it base64-encoded, so quotes and
    backslashes are safe; control characters are still refused like any command text."""
    text = _str(doc, path, value)
    if text is None:
        return None
    if len(text.encode()) > MAX_MD5_PASSWORD:
        doc.error(path, f"must be at most {MAX_MD5_PASSWORD} bytes (the TCP MD5 key limit)")
        return None
    return text


def _secret_ref(doc: _Doc, path: str, value: object) -> SecretRef | None:
    f = _fields(doc, path, value, ("name", "namespace"))
    if f is None:
        return None
    name = f.get("name")
    if name in (None, ""):
        doc.error(_join(path, "name"), "is required")
        return None
    text = _str(doc, _join(path, "name"), name)
    if text is not None and (why := _dns_subdomain(text)) is not None:
        doc.error(_join(path, "name"), why)
        return None
    namespace: str | None = None
    if f.get("namespace") not in (None, ""):
        ns = f["namespace"]
        if not isinstance(ns, str) or not _DNS_LABEL_RE.fullmatch(ns) or len(ns) > 63:
            doc.error(_join(path, "namespace"), f"{_show(ns)} is not a valid namespace name")
            return None
        namespace = ns
    return None if text is None else SecretRef(name=text, namespace=namespace)


_ADV_FIELDS: Final = (
    "ipAddressPools",
    "ipAddressPoolSelectors",
    "aggregationLength",
    "aggregationLengthV6",
    "communities",
    "localPref",
    "peers",
    "nodeSelectors",
)
_ADV_UNSUPPORTED: Final = {
    "serviceSelectors": "selecting Services per advertisement is not supported yet",
}


def _parse_advertisement(doc: _Doc, spec: object, name: str) -> _AdvertisementDraft | None:
    # An advertisement with no spec is valid in MetalLB: all pools, all peers.
    f = _fields(doc, "spec", {} if spec is None else spec, _ADV_FIELDS, _ADV_UNSUPPORTED)
    if f is None:
        return None
    before = doc.errors
    pools = _opt_str_list(doc, "spec.ipAddressPools", f.get("ipAddressPools"))
    pool_sel = _selectors(doc, "spec.ipAddressPoolSelectors", f.get("ipAddressPoolSelectors"))
    agg4 = 32
    if f.get("aggregationLength") is not None:
        # MetalLB's CRD: minimum 1; its loader: at most 32.
        agg4 = _int(doc, "spec.aggregationLength", f["aggregationLength"], 1, 32) or 32
    agg6 = 128
    if f.get("aggregationLengthV6") is not None:
        agg6 = _int(doc, "spec.aggregationLengthV6", f["aggregationLengthV6"], 1, 128) or 128
    communities = _opt_str_list(doc, "spec.communities", f.get("communities"))
    local_pref: int | None = None
    if f.get("localPref") is not None:
        # MetalLB's localPref is a plain uint32 where 0 means "not set" (omitempty).
        local_pref = _int(doc, "spec.localPref", f["localPref"], 0, MAX_U32) or None
    peers = _opt_str_list(doc, "spec.peers", f.get("peers"))
    node_sel = _selectors(doc, "spec.nodeSelectors", f.get("nodeSelectors"))
    if doc.errors != before:
        return None
    adv = BGPAdvertisement(
        name=name,
        ip_address_pools=tuple(PoolName(p) for p in pools or ()),
        ip_address_pool_selectors=pool_sel or (),
        aggregation_length=agg4,
        aggregation_length_v6=agg6,
        local_pref=local_pref,
        peers=tuple(PeerName(p) for p in peers or ()),
        node_selectors=node_sel or (),
    )
    return _AdvertisementDraft(adv, tuple(communities or ()))


def _opt_str_list(doc: _Doc, path: str, value: object) -> list[str] | None:
    return [] if value is None else _str_list(doc, path, value)


def _parse_community(doc: _Doc, spec: object, name: str, out: _Parsed) -> Community | None:
    f = _fields(doc, "spec", {} if spec is None else spec, _COMMUNITY_FIELDS)
    if f is None:
        return None
    aliases: dict[str, str] = {}
    items = f.get("communities")
    if items is None:
        items = []
    if not isinstance(items, list):
        doc.error("spec.communities", f"must be a list, not {_type_name(items)}")
        return None
    before = doc.errors
    for i, item in enumerate(items):
        path = f"spec.communities[{i}]"
        g = _fields(doc, path, item, ("name", "value"))
        if g is None:
            continue
        alias = g.get("name")
        value = g.get("value")
        if alias in (None, ""):
            doc.error(_join(path, "name"), "is required")
        if value in (None, ""):
            doc.error(_join(path, "value"), "is required")
        if alias in (None, "") or value in (None, ""):
            continue
        alias_s = _str(doc, _join(path, "name"), alias)
        if alias_s is not None:
            out.alias_names.add(alias_s)
        value_s = _str(doc, _join(path, "value"), value)
        if alias_s is None or value_s is None:
            continue
        try:
            parse_community(value_s)
        except ValueError as exc:
            doc.error(_join(path, "value"), str(exc))
            continue
        if alias_s in aliases:
            doc.error(_join(path, "name"), f"duplicate definition of community {alias_s!r}")
            continue
        aliases[alias_s] = value_s
    if doc.errors != before:
        return None
    return Community(name=name, communities=frozen_map(aliases))


def _parse_bfd_profile(doc: _Doc, spec: object, name: str) -> BFDProfile | None:
    f = _fields(doc, "spec", {} if spec is None else spec, _BFD_FIELDS)
    if f is None:
        return None
    before = doc.errors
    # MetalLB's bfdProfileFromCR ranges (milliseconds; TTL hops).
    ranges = {
        "receiveInterval": (10, 60000, 300),
        "transmitInterval": (10, 60000, 300),
        "detectMultiplier": (2, 255, 3),
        "echoInterval": (10, 60000, 50),
        "minimumTtl": (1, 254, 254),
    }
    ints: dict[str, int] = {}
    for key, (lo, hi, default) in ranges.items():
        ints[key] = default
        if f.get(key) is not None:
            ints[key] = _int(doc, f"spec.{key}", f[key], lo, hi) or default
    bools: dict[str, bool] = {}
    for key in ("echoMode", "passiveMode"):
        bools[key] = False
        if f.get(key) is not None:
            bools[key] = _bool(doc, f"spec.{key}", f[key]) is True
    if doc.errors != before:
        return None
    return BFDProfile(
        name=name,
        receive_interval=ints["receiveInterval"],
        transmit_interval=ints["transmitInterval"],
        detect_multiplier=ints["detectMultiplier"],
        echo_interval=ints["echoInterval"],
        echo_mode=bools["echoMode"],
        passive_mode=bools["passiveMode"],
        minimum_ttl=ints["minimumTtl"],
    )


_SPEAKER_FIELDS: Final = (
    "loadBalancerClass",
    "ignoreExcludeLB",
    "exabgpBinary",
    "workDir",
    "metricsAddress",
    "mqtt",
    "debounce",
    "logFormat",
    "drainWindow",
    "onSigterm",
    "listen",
)


def _host_port(doc: _Doc, path: str, value: object) -> str | None:
    """HOST:PORT, IPv6 hosts in brackets; port 0 asks the kernel for a free one (tests)."""
    text = _str(doc, path, value)
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        doc.error(path, f"{text!r} must be HOST:PORT (IPv6 as [::1]:7473), port 0-65535")
        return None
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            doc.error(path, f"{text!r}: {host} is not an IPv6 address")
            return None
    elif ":" in host:
        doc.error(path, f"{text!r}: write an IPv6 host in brackets, e.g. [::1]:7473")
        return None
    return text


def _parse_speaker(doc: _Doc, spec: object) -> SpeakerConfig | None:
    f = _fields(doc, "spec", {} if spec is None else spec, _SPEAKER_FIELDS)
    if f is None:
        return None
    before = doc.errors
    d = SpeakerConfig()
    lb_class = d.load_balancer_class
    if f.get("loadBalancerClass") is not None:
        lb_class = _str(doc, "spec.loadBalancerClass", f["loadBalancerClass"])
    ignore = d.ignore_exclude_lb
    if f.get("ignoreExcludeLB") is not None:
        ignore = _bool(doc, "spec.ignoreExcludeLB", f["ignoreExcludeLB"]) is True
    binary = d.exabgp_binary
    if f.get("exabgpBinary") is not None:
        binary = _str(doc, "spec.exabgpBinary", f["exabgpBinary"]) or binary
    work_dir = d.work_dir
    if f.get("workDir") is not None:
        wd = _str(doc, "spec.workDir", f["workDir"])
        if wd is not None:
            work_dir = Path(wd)
    metrics = d.metrics_address
    if f.get("metricsAddress") is not None:
        metrics = _host_port(doc, "spec.metricsAddress", f["metricsAddress"]) or metrics
    mqtt = None
    if f.get("mqtt") is not None:
        mqtt = _mqtt(doc, "spec.mqtt", f["mqtt"])
    debounce = d.debounce
    if f.get("debounce") is not None:
        got = _duration(doc, "spec.debounce", f["debounce"], numbers=True)
        debounce = float(got) if got is not None else debounce
    log_format = d.log_format
    if f.get("logFormat") is not None:
        lf = f["logFormat"]
        if lf not in {x.value for x in LogFormat}:
            doc.error("spec.logFormat", f"{_show(lf)} is not one of text, json")
        else:
            log_format = LogFormat(str(lf))
    drain = d.drain_window
    if f.get("drainWindow") is not None:
        got = _duration(doc, "spec.drainWindow", f["drainWindow"], numbers=True)
        drain = float(got) if got is not None else drain
    on_sigterm = d.on_sigterm
    if f.get("onSigterm") is not None:
        action = f["onSigterm"]
        if action not in {x.value for x in SigtermAction}:
            doc.error(
                "spec.onSigterm",
                f"{_show(action)} is not one of {', '.join(x.value for x in SigtermAction)}",
            )
        else:
            on_sigterm = SigtermAction(str(action))
    listen = d.listen
    if f.get("listen") is not None:
        listen = _bool(doc, "spec.listen", f["listen"]) is True
    if doc.errors != before:
        return None
    return SpeakerConfig(
        load_balancer_class=lb_class,
        ignore_exclude_lb=ignore,
        exabgp_binary=binary,
        work_dir=work_dir,
        metrics_address=metrics,
        mqtt=mqtt,
        debounce=debounce,
        log_format=log_format,
        drain_window=drain,
        on_sigterm=on_sigterm,
        listen=listen,
    )


def _mqtt(doc: _Doc, path: str, value: object) -> MQTTConfig | None:
    f = _fields(doc, path, value, ("host", "port", "topicPrefix", "username", "password", "tls"))
    if f is None:
        return None
    before = doc.errors
    host = None
    if f.get("host") in (None, ""):
        doc.error(_join(path, "host"), "is required")
    else:
        host = _str(doc, _join(path, "host"), f["host"])
    d = MQTTConfig(host="")
    port = d.port
    if f.get("port") is not None:
        port = _int(doc, _join(path, "port"), f["port"], 1, 65535) or port
    prefix = d.topic_prefix
    if f.get("topicPrefix") is not None:
        got = _str(doc, _join(path, "topicPrefix"), f["topicPrefix"])
        if got is not None and ("+" in got or "#" in got):
            doc.error(
                _join(path, "topicPrefix"), f"{got!r}: MQTT wildcards + and # are not allowed"
            )
        prefix = got or prefix
    username = password = None
    if f.get("username") is not None:
        username = _str(doc, _join(path, "username"), f["username"])
    if f.get("password") is not None:
        password = _str(doc, _join(path, "password"), f["password"])
    tls = d.tls
    if f.get("tls") is not None:
        tls = _bool(doc, _join(path, "tls"), f["tls"]) is True
    if doc.errors != before or host is None:
        return None
    return MQTTConfig(
        host=host, port=port, topic_prefix=prefix, username=username, password=password, tls=tls
    )


# --------------------------------------------------------------------------- documents

_POOL_FIELDS: Final = ("addresses", "autoAssign", "avoidBuggyIPs", "serviceAllocation")
_COMMUNITY_FIELDS: Final = ("communities",)
_BFD_FIELDS: Final = (
    "receiveInterval",
    "transmitInterval",
    "detectMultiplier",
    "echoInterval",
    "echoMode",
    "passiveMode",
    "minimumTtl",
)

#: (apiVersion, kind) -> the spec fields the loader accepts; config/schema.json must agree
#: (a unit test checks it).
SPEC_FIELDS: Final[Mapping[tuple[str, str], tuple[str, ...]]] = {
    (METALLB_V1BETA1, "IPAddressPool"): _POOL_FIELDS,
    (METALLB_V1BETA2, "BGPPeer"): _PEER_V1BETA2_FIELDS,
    (METALLB_V1BETA1, "BGPPeer"): _PEER_V1BETA1_FIELDS,
    (METALLB_V1BETA1, "BGPAdvertisement"): _ADV_FIELDS,
    (METALLB_V1BETA1, "Community"): _COMMUNITY_FIELDS,
    (METALLB_V1BETA1, "BFDProfile"): _BFD_FIELDS,
    (KUBE_BGPD_V1ALPHA1, "SpeakerConfig"): _SPEAKER_FIELDS,
}

#: kind -> accepted apiVersions.
_KINDS: Final[dict[str, tuple[str, ...]]] = {
    "IPAddressPool": (METALLB_V1BETA1,),
    "BGPPeer": (METALLB_V1BETA2, METALLB_V1BETA1),
    "BGPAdvertisement": (METALLB_V1BETA1,),
    "Community": (METALLB_V1BETA1,),
    "BFDProfile": (METALLB_V1BETA1,),
    "SpeakerConfig": (KUBE_BGPD_V1ALPHA1,),
}
#: Kinds MetalLB users may have that kube-bgpd refuses, and why.
_REFUSED_KINDS: Final[dict[str, str]] = {
    "L2Advertisement": "layer 2 mode is not supported: kube-bgpd only speaks BGP",
    "ConfigMap": "MetalLB's legacy ConfigMap format is not supported; convert it to "
    "custom resources first (MetalLB's configmaptocrs tool)",
    "ConfigurationState": "it is status written by MetalLB, not configuration",
    "ServiceBGPStatus": "it is status written by MetalLB, not configuration",
    "ServiceL2Status": "it is status written by MetalLB, not configuration",
}


def _parse_document(source: str, raw: object, issues: _Issues, out: _Parsed) -> None:
    if isinstance(raw, _YamlFailure):
        issues.errors.append(raw.issue)
        return
    if raw is None:
        return  # an empty document between two `---`, as kubectl skips it
    if not isinstance(raw, Mapping):
        issues.errors.append(
            ConfigIssue(
                source,
                "document",
                f"must be a mapping (a Kubernetes object), not {_type_name(raw)}",
            )
        )
        return
    kind = raw.get("kind")
    api = raw.get("apiVersion")
    if kind == "List" and api == "v1":
        _parse_list(source, raw, issues, out)
        return
    name_hint = _name_hint(raw)
    if not isinstance(kind, str) or not kind:
        doc = _Doc(source, "", name_hint or "document", issues)
        doc.error(
            "kind", "is required" if kind is None else f"must be a string, not {_type_name(kind)}"
        )
        return
    safe_kind = kind if _LABEL_NAME.fullmatch(kind) else repr(kind)
    doc = _Doc(source, safe_kind, name_hint or "<unnamed>", issues)
    if kind in _REFUSED_KINDS:
        doc.error("kind", f"{safe_kind} is not accepted: {_REFUSED_KINDS[kind]}")
        return
    if kind not in _KINDS:
        known = ", ".join(sorted(_KINDS))
        doc.error("kind", f"unknown kind {safe_kind} (kube-bgpd reads {known}, and v1 List)")
        return
    if api not in _KINDS[kind]:
        want = " or ".join(_KINDS[kind])
        doc.error("apiVersion", f"{_show(api)} is not supported for {kind}; use {want}")
        return
    top = _fields(doc, "", raw, ("apiVersion", "kind", "metadata", "spec"), ignored=("status",))
    if top is None:
        return
    name, labels = _metadata(doc, top.get("metadata"))
    if name is None:
        return
    doc.name = name
    registry = out.names.setdefault(kind, {})
    if name in registry:
        doc.error("metadata.name", f"duplicate {kind} name (also in {registry[name].source})")
        return
    registry[name] = doc
    spec = top.get("spec")
    if kind == "IPAddressPool":
        _parse_pool(doc, spec, name, labels, out)
    elif kind == "BGPPeer":
        peer = _parse_peer(doc, spec, name, str(api), out)
        if peer is None:
            out.all_peers_parsed = False
        else:
            out.peers.append((peer, doc))
    elif kind == "BGPAdvertisement":
        adv = _parse_advertisement(doc, spec, name)
        if adv is not None:
            out.advertisements.append((adv, doc))
    elif kind == "Community":
        if (c := _parse_community(doc, spec, name, out)) is not None:
            out.communities.append((c, doc))
    elif kind == "BFDProfile":
        if (b := _parse_bfd_profile(doc, spec, name)) is not None:
            out.bfd_profiles.append((b, doc))
    elif kind == "SpeakerConfig" and (s := _parse_speaker(doc, spec)) is not None:
        out.speakers.append((s, doc))


def _name_hint(raw: Mapping[Any, Any]) -> str | None:
    meta = raw.get("metadata")
    if isinstance(meta, Mapping):
        name = meta.get("name")
        if isinstance(name, str) and name and _dns_subdomain(name) is None:
            return name
    return None


def _parse_list(source: str, raw: Mapping[Any, Any], issues: _Issues, out: _Parsed) -> None:
    doc = _Doc(source, "List", "", issues)
    top = _fields(doc, "", raw, ("apiVersion", "kind", "items", "metadata"))
    if top is None:
        return
    items = top.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        doc.error("items", f"must be a list, not {_type_name(items)}")
        return
    for i, item in enumerate(items):
        issues.see(f"{source}:items[{i}]")
        _parse_document(f"{source}:items[{i}]", item, issues, out)


# --------------------------------------------------------------------------- cross-checks


def _cross_check(out: _Parsed, issues: _Issues) -> Config:
    pools = [p for p, _ in out.pools]
    pool_docs = {p.name: d for p, d in out.pools}
    pool_names = out.names.get("IPAddressPool", {})
    peer_names = out.names.get("BGPPeer", {})

    _check_overlaps(out)
    _check_duplicate_peers(out)

    # BFD profiles: a peer that names one already got "not supported"; also say when the
    # profile does not exist. Profiles themselves are kept (they may be used once a BFD
    # daemon is wired in) but warned about, so nobody thinks they are active.
    bfd_names = out.names.get("BFDProfile", {})
    for profile, doc in out.bfd_references:
        if profile not in bfd_names:
            doc.error("spec.bfdProfile", f"no BFDProfile named {profile!r}")
    for _profile, doc in out.bfd_profiles:
        doc.warn("", "parsed, but no BFD session runs (ExaBGP has no BFD)")

    aliases: dict[str, str] = {}
    alias_docs: dict[str, _Doc] = {}
    for community, doc in out.communities:
        for alias, value in community.communities.items():
            if alias in aliases:
                # MetalLB: aliases are global across Community objects.
                doc.error(
                    "spec.communities",
                    f"duplicate definition of community {alias!r} "
                    f"(also in Community {alias_docs[alias].name})",
                )
                continue
            aliases[alias] = value
            alias_docs[alias] = doc

    advertisements: list[BGPAdvertisement] = []
    adv_docs: list[_Doc] = []
    for draft, doc in out.advertisements:
        adv = _resolve_advertisement(doc, draft, aliases, out.alias_names)
        for i, pool_name in enumerate(adv.ip_address_pools):
            if pool_name not in pool_names:
                doc.error(f"spec.ipAddressPools[{i}]", f"no IPAddressPool named {pool_name!r}")
        for i, peer in enumerate(adv.peers):
            if peer not in peer_names:
                doc.error(f"spec.peers[{i}]", f"no BGPPeer named {peer!r}")
        for pool in pools:
            if adv.selects_pool(pool):
                _check_aggregation(doc, adv, pool)
        if (
            adv.ip_address_pool_selectors
            and not any(adv.selects_pool(p) for p in pools)
            and not adv.ip_address_pools
        ):
            doc.warn("spec.ipAddressPoolSelectors", "selects no IPAddressPool")
        advertisements.append(adv)
        adv_docs.append(doc)

    _check_local_pref(advertisements, adv_docs, pools)

    speakers = out.speakers
    for _, doc in speakers[1:]:
        doc.error("", f"only one SpeakerConfig is allowed (first: {speakers[0][1].name})")
    speaker = speakers[0][0] if speakers else SpeakerConfig()

    peers = [p for p, _ in out.peers]
    if not issues.errors:
        _warn_reach(advertisements, adv_docs, pools, pool_docs, peers, out.all_peers_parsed)

    return Config(
        pools=tuple(pools),
        peers=tuple(peers),
        advertisements=tuple(advertisements),
        communities=tuple(c for c, _ in out.communities),
        bfd_profiles=tuple(b for b, _ in out.bfd_profiles),
        speaker=speaker,
    )


def _community_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(":"))


def _resolve_advertisement(
    doc: _Doc, draft: _AdvertisementDraft, aliases: Mapping[str, str], broken: set[str]
) -> BGPAdvertisement:
    """MetalLB's getCommunityValue: an alias defined in a Community object wins; otherwise
    the text must be a community itself (we also accept the well-known names)."""
    standard: set[str] = set()
    large: set[str] = set()
    for i, text in enumerate(draft.community_texts):
        if text in broken and text not in aliases:
            continue  # its Community object already has the error
        value = aliases.get(text, text)
        try:
            kind, canonical = parse_community(value)
        except ValueError as exc:
            if ":" not in text:
                doc.error(
                    f"spec.communities[{i}]",
                    f"{text!r} is neither a Community alias nor a community "
                    "(a:b, large:a:b:c or a well-known name)",
                )
            else:
                doc.error(f"spec.communities[{i}]", str(exc))
            continue
        (large if kind == "large" else standard).add(canonical)
    adv = draft.advertisement
    return BGPAdvertisement(
        name=adv.name,
        ip_address_pools=adv.ip_address_pools,
        ip_address_pool_selectors=adv.ip_address_pool_selectors,
        aggregation_length=adv.aggregation_length,
        aggregation_length_v6=adv.aggregation_length_v6,
        communities=tuple(sorted(standard, key=_community_key)),
        large_communities=tuple(sorted(large, key=_community_key)),
        local_pref=adv.local_pref,
        peers=adv.peers,
        node_selectors=adv.node_selectors,
    )


def _check_aggregation(doc: _Doc, adv: BGPAdvertisement, pool: IPAddressPool) -> None:
    """MetalLB's validateBGPAdvPerPool: for every address of the pool, the aggregation
    length of its family must not be shorter than the shortest prefix of the CIDRs that
    address covers (a range counts as its summarised CIDRs). An aggregate shorter than the
    pool would announce addresses the pool does not own."""
    for r in pool.addresses:
        nets = r.networks()
        shortest = min(n.prefixlen for n in nets)
        length = adv.aggregation_length if r.version == 4 else adv.aggregation_length_v6
        field_name = "aggregationLength" if r.version == 4 else "aggregationLengthV6"
        if length < shortest:
            doc.error(
                f"spec.{field_name}",
                f"{length} is shorter than /{shortest} of {r.text!r} in IPAddressPool "
                f"{pool.name}: the aggregate would cover addresses outside the pool",
            )


def _check_overlaps(out: _Parsed) -> None:
    """MetalLB's poolsFor: no two CIDRs (of any pools, or of one pool) may overlap; an IP
    must belong to exactly one pool."""
    seen: list[tuple[AddressRange, IPAddressPool]] = []
    for pool, doc in out.pools:
        for i, r in enumerate(pool.addresses):
            for other, other_pool in seen:
                if (
                    r.version == other.version
                    and int(r.first) <= int(other.last)
                    and int(other.first) <= int(r.last)
                ):
                    where = (
                        f"IPAddressPool {other_pool.name}"
                        if other_pool.name != pool.name
                        else "this pool"
                    )
                    doc.error(
                        f"spec.addresses[{_index_of(pool, r, i)}]",
                        f"{r.text!r} overlaps {other.text!r} of {where}",
                    )
            seen.append((r, pool))


def _index_of(pool: IPAddressPool, r: AddressRange, fallback: int) -> int:
    return next((i for i, x in enumerate(pool.addresses) if x is r), fallback)


def _check_duplicate_peers(out: _Parsed) -> None:
    """Two BGPPeers with the same address and port that may apply on the same node would be
    two ExaBGP neighbors for one session (MetalLB's FRR mode refuses the same)."""
    for i, (a, doc) in enumerate(out.peers):
        for b, _ in out.peers[:i]:
            if (a.peer_address, a.peer_port) == (b.peer_address, b.peer_port) and _may_overlap(
                a.node_selectors, b.node_selectors
            ):
                doc.error(
                    "spec.peerAddress",
                    f"BGPPeer {b.name} already peers with {a.peer_address} port {a.peer_port} "
                    "on the same nodes",
                )


def _families(pool: IPAddressPool) -> set[int]:
    return {r.version for r in pool.addresses}


def _check_local_pref(
    advs: Sequence[BGPAdvertisement],
    docs: Sequence[_Doc],
    pools: Sequence[IPAddressPool],
) -> None:
    """MetalLB's BGPAdvertisementsHaveCompatibleLocalPref: two advertisements that can send
    the same prefix to the same peer from the same node must not disagree on local-pref.
    "Same prefix" means a shared pool and, per family present, equal aggregation length."""
    for i, a in enumerate(advs):
        for b in advs[:i]:
            if a.local_pref == b.local_pref:
                continue
            shared = [p for p in pools if a.selects_pool(p) and b.selects_pool(p)]
            if not shared:
                continue
            if a.peers and b.peers and not set(a.peers) & set(b.peers):
                continue
            if not _may_overlap(a.node_selectors, b.node_selectors):
                continue
            for pool in shared:
                fam = _families(pool)
                same4 = 4 in fam and a.aggregation_length == b.aggregation_length
                same6 = 6 in fam and a.aggregation_length_v6 == b.aggregation_length_v6
                if same4 or same6:
                    docs[i].error(
                        "spec.localPref",
                        f"{a.local_pref or 'unset'} conflicts with localPref "
                        f"{b.local_pref or 'unset'} of BGPAdvertisement {b.name} for pool "
                        f"{pool.name} (same prefixes, peers and nodes)",
                    )
                    break


def _warn_reach(
    advs: Sequence[BGPAdvertisement],
    docs: Sequence[_Doc],
    pools: Sequence[IPAddressPool],
    pool_docs: Mapping[PoolName, _Doc],
    peers: Sequence[BGPPeer],
    all_peers_parsed: bool,
) -> None:
    """Warnings that do not make a config wrong but make it surprising."""
    for pool in pools:
        if not any(a.selects_pool(pool) for a in advs):
            pool_docs[pool.name].warn(
                "",
                "no BGPAdvertisement selects this pool: its IPs are allocated but never announced",
            )
    if not all_peers_parsed:
        return
    for adv, doc in zip(advs, docs, strict=True):
        reach = [p for p in peers if not adv.peers or p.name in adv.peers]
        families = {p.family for p in reach}
        for fam in (4, 6):
            fam_pools = [p.name for p in pools if adv.selects_pool(p) and fam in _families(p)]
            if fam_pools and fam not in families:
                doc.warn(
                    "",
                    f"IPv{fam} addresses of pool {', '.join(fam_pools)} reach no IPv{fam} "
                    f"peer (a peer receives only prefixes of its session's family)",
                )
        if adv.local_pref is not None and reach and all(not p.is_ibgp for p in reach):
            doc.warn("spec.localPref", "is only sent to iBGP peers, and every peer here is eBGP")


# --------------------------------------------------------------------------- entry points


def parse_documents(docs: Iterable[tuple[str, object]]) -> LoadResult:
    """Parse already-loaded YAML documents, each with the label of where it came from.

    Pure and total: any input yields a LoadResult (never an exception), with a Config when
    there is no error and every error and warning found otherwise.
    """
    issues = _Issues()
    out = _Parsed()
    for source, raw in docs:
        issues.see(source)
        _parse_document(source, raw, issues, out)
    config = _cross_check(out, issues)
    if not out.names and not issues.errors:
        issues.warnings.append(ConfigIssue("", "", "no configuration documents found"))
    return LoadResult(
        config=None if issues.errors else config,
        errors=issues.sorted(issues.errors),
        warnings=issues.sorted(issues.warnings),
    )


def _yaml_loader_base() -> type[yaml.SafeLoader]:
    # libyaml's parser is ~10x faster; the pure-Python one behaves the same.
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_yaml_loader_base()):  # type: ignore[misc]
    """YAML as Kubernetes reads it, which differs from PyYAML's YAML 1.1 in two ways that
    matter here: sexagesimal numbers (PyYAML reads `65000:50` as the integer 3900050, which
    would turn a community into a number) are plain strings, and a duplicated key is an
    error instead of silently keeping the last one."""


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(
        r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0[0-7_]+
        |[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[object, object]:
    """SafeConstructor's mapping, but a key written twice is an error. Keys brought in by a
    `<<` merge may still be overridden, as YAML's merge-key rule says."""
    written: list[object] = []
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in written
        except TypeError:
            duplicate = False
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        written.append(key)
    loader.flatten_mapping(node)
    out: dict[object, object] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            ) from None
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def parse_text(text: str, source: str) -> LoadResult:
    """Parse the text of one YAML file (any number of documents)."""
    return parse_documents(_documents(text, source))


def _yaml_error(source: str, exc: yaml.YAMLError) -> ConfigIssue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {context}, {problem}" if context else f"invalid YAML: {problem}"
    return ConfigIssue(source, where, " ".join(str(message).split()))


@dataclass(slots=True)
class _YamlFailure:
    """A document that could not be read, carried through parse_documents as an error."""

    issue: ConfigIssue


def _documents(text: str, source: str) -> list[tuple[str, object]]:
    """The documents of one file, labelled "file" or "file:doc N". Documents before a YAML
    error are kept, so their own errors are reported too."""
    raw: list[object] = []
    failure: _YamlFailure | None = None
    try:
        for doc in yaml.load_all(text, Loader=_Loader):  # _Loader is a SafeLoader
            raw.append(doc)
    except yaml.YAMLError as exc:
        failure = _YamlFailure(_yaml_error(source, exc))
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # SafeConstructor can still fail on odd scalars (e.g. a timestamp out of range).
        failure = _YamlFailure(ConfigIssue(source, "", f"invalid YAML: {exc}"))
    if len(raw) + (failure is not None) <= 1:
        out = [(source, d) for d in raw]
    else:
        out = [(f"{source}:doc {i}", d) for i, d in enumerate(raw, start=1)]
    if failure is not None:
        out.append((source, failure))
    return out


def load_config(paths: Sequence[str | os.PathLike[str]]) -> LoadResult:
    """Read YAML files (each any number of documents, or a v1 List) and parse them as one
    configuration. An unreadable file or bad YAML is an error naming the file (and line)."""
    docs: list[tuple[str, object]] = []
    for path in paths:
        source = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            docs.append((source, _YamlFailure(ConfigIssue(source, "", f"cannot read: {reason}"))))
            continue
        docs.extend(_documents(text, source))
    return parse_documents(docs)


def load_config_or_raise(
    paths: Sequence[str | os.PathLike[str]],
) -> tuple[Config, tuple[ConfigIssue, ...]]:
    """load_config for daemons: the Config and its warnings, or ConfigError with every error."""
    result = load_config(paths)
    if result.config is None:
        raise ConfigError(result.errors)
    return result.config, result.warnings
