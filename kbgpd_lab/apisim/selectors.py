"""Label and field selector strings, parsed with the Kubernetes syntax.

Label selectors (k8s.io/apimachinery/pkg/labels): `a=b`, `a==b`, `a!=b`,
`a in (x,y)`, `a notin (x)`, `a` (exists), `!a` (does not exist), comma-separated and
ANDed. They parse into the model's `LabelSelector`, so matching has one implementation.
Field selectors (k8s.io/apimachinery/pkg/fields): `f=v`, `f==v`, `f!=v`, with `\\,`,
`\\=` and `\\\\` escapes; only the fields a kind declares selectable are accepted, any
other one is a 400 "field label not supported", as the real server answers.
Parsing errors raise `ApiError(400)`. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bgpd.model import LabelSelector, SelectorOperator, SelectorRequirement
from kbgpd_lab.apisim.errors import bad_request

_LABEL_TOKEN = re.compile(r"\s*(?:(==|!=|=|\(|\)|,|!)|([^\s=!(),]+))")
_KEY = re.compile(
    r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a `labelSelector=` query value; the empty string selects everything."""
    tokens = _tokenize(text)
    reqs: list[SelectorRequirement] = []
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    while pos < len(tokens):
        negate = False
        if tokens[pos] == "!":
            negate = True
            pos += 1
        key = peek()
        if key is None or not _KEY.match(key):
            raise bad_request(f"unable to parse requirement: invalid label key {key!r}")
        pos += 1
        op = peek()
        if negate:
            reqs.append(SelectorRequirement(key, SelectorOperator.DOES_NOT_EXIST))
        elif op is None or op == ",":
            reqs.append(SelectorRequirement(key, SelectorOperator.EXISTS))
        elif op in ("=", "==", "!="):
            pos += 1
            value = peek()
            if value is None or value in ("=", "==", "!=", "(", ")", ",", "!"):
                value = ""
            else:
                pos += 1
            operator = SelectorOperator.NOT_IN if op == "!=" else SelectorOperator.IN
            reqs.append(SelectorRequirement(key, operator, (value,)))
        elif op in ("in", "notin"):
            pos += 1
            if peek() != "(":
                raise bad_request(f"unable to parse requirement: expected '(' after {op}")
            pos += 1
            values: list[str] = []
            expect_value = True
            while True:
                tok = peek()
                if tok is None:
                    raise bad_request("unable to parse requirement: missing ')'")
                pos += 1
                if tok == ")":
                    if expect_value and values:
                        values.append("")
                    break
                if tok == ",":
                    if expect_value:
                        values.append("")
                    expect_value = True
                    continue
                values.append(tok)
                expect_value = False
            operator = SelectorOperator.IN if op == "in" else SelectorOperator.NOT_IN
            reqs.append(SelectorRequirement(key, operator, tuple(values)))
        else:
            raise bad_request(f"unable to parse requirement: unexpected {op!r} after {key!r}")
        nxt = peek()
        if nxt is not None:
            if nxt != ",":
                raise bad_request(f"unable to parse requirement: expected ',' but got {nxt!r}")
            pos += 1
    return LabelSelector(match_expressions=tuple(reqs))


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _LABEL_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise bad_request(f"unable to parse requirement: {text!r}")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    return tokens


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, r.field) == r.value) == r.equal for r in self.requirements)

    def exact_name(self) -> str | None:
        """The name if the selector pins `metadata.name=X` (a single-object watch)."""
        for r in self.requirements:
            if r.field == "metadata.name" and r.equal:
                return r.value
        return None


def parse_field_selector(text: str, allowed: tuple[str, ...]) -> FieldSelector:
    """Parse a `fieldSelector=` query value, accepting only the `allowed` field labels."""
    reqs: list[FieldRequirement] = []
    for part in _split_unescaped(text, ","):
        if not part.strip():
            continue
        field, op, value = _split_term(part)
        if field not in allowed:
            raise bad_request(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, op != "!=", value))
    return FieldSelector(tuple(reqs))


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _split_term(term: str) -> tuple[str, str, str]:
    i = 0
    while i < len(term):
        c = term[i]
        if c == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i].strip(), op, _unescape(term[i + len(op) :])
        i += 1
    raise bad_request(f"invalid selector: '{term}'; can't understand '{term}'")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


#: Boolean fields render as "false" when unset (Go's zero value), as the real server does.
_BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})
#: Field labels whose value lives under another path.
_FIELD_PATHS = {"source": "source.component"}


def field_value(obj: Mapping[str, Any], field: str) -> str:
    """The string a field selector compares against (Go's fmt of the field)."""
    cur: Any = obj
    for part in _FIELD_PATHS.get(field, field).split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if cur is None:
        return "false" if field in _BOOL_FIELDS else ""
    return str(cur)
