"""Fuzz the readers of outside text with the crash classes of issue 15: the config loader,
cluster dumps (as `explain` and `speaker --cluster-file` read them) and Service
annotations. Each example is a valid file with one value replaced by something hostile
(a YAML tag, a mapping where a string belongs, a huge integer or duration, an alias
bomb, deep nesting, non-ASCII base64). The answer must be a parsed result or the named
error (LoadResult errors, DumpError), never another exception, within a bounded time."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bgpd.config import LoadResult, load_config, parse_text
from bgpd.decision import ANNOTATION_COMMUNITIES, ANNOTATION_LOCAL_PREF, ANNOTATION_MED
from bgpd.explain import explain
from bgpd.objects import ClusterDump, DumpError, parse_dump

DATA = Path(__file__).parents[1] / "data" / "explain"
CONFIG_TEXT = (DATA / "config.yaml").read_text()
DUMP_TEXT = (DATA / "cluster.yaml").read_text()
#: Seconds one example may take: only catches a blow-up (the alias bomb took 7.4 s).
BOUND = 5.0

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)

#: Text spliced in place of one scalar: the tags and values the issue names, and more.
HOSTILE_TEXT = st.sampled_from(
    [
        "!!timestamp 2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        "!!float 1e400",
        "!!float nan",
        "!!python/object:os.system x",
        "!!python/name:os.system",
        "!foo bar",
        "!!binary aGVsbG8=",
        "!!set {a, b}",
        "!!omap [a: 1]",
        "{x: 1}",
        "[In, NotIn]",
        "9" * 5000,
        "0x" + "f" * 5000,
        "-" + "9" * 4301,
        "9" * 5000 + "s",
        "99999999999999999999h",
        "1e308",
        "1.0e+308",
        ".inf",
        "'\\u00e9\\u0000'",
        '"s3cr\\x07et"',
        "[" * 200 + "]" * 200,
        "&x [*x]",
        "~",
        "''",
    ]
)


def _scalar_positions(text: str) -> list[tuple[int, int]]:
    """(start, end) of every plain scalar value after `key: ` or `- ` on a line."""
    out = []
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        stripped = body.lstrip()
        if not stripped.startswith("#"):
            if ": " in stripped and not stripped.endswith(":"):
                start = body.index(": ") + 2
                out.append((pos + start, pos + len(body)))
            elif stripped.startswith("- ") and ":" not in stripped:
                start = body.index("- ") + 2
                out.append((pos + start, pos + len(body)))
        pos += len(line)
    return out


CONFIG_POSITIONS = _scalar_positions(CONFIG_TEXT)
DUMP_POSITIONS = _scalar_positions(DUMP_TEXT)


def _splice(text: str, positions: list[tuple[int, int]], index: int, value: str) -> str:
    start, end = positions[index % len(positions)]
    return text[:start] + value + text[end:]


def _timed(call: Any) -> Any:
    started = time.monotonic()
    result = call()
    assert time.monotonic() - started < BOUND
    return result


def _load(text: str) -> LoadResult:
    result: LoadResult = _timed(lambda: parse_text(text, "fuzz.yaml"))
    assert isinstance(result, LoadResult)
    assert (result.config is None) == bool(result.errors)
    for issue in (*result.errors, *result.warnings):
        assert "\n" not in str(issue)
        assert len(str(issue)) < 2000
    return result


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(min_value=0, max_value=10_000), value=HOSTILE_TEXT)
@example(index=0, value="!!timestamp 2001-12-14")
@example(index=3, value="{x: 1}")
@example(index=3, value="9" * 5000)
def test_config_loader_answers_any_spliced_value(index: int, value: str) -> None:
    _load(_splice(CONFIG_TEXT, CONFIG_POSITIONS, index, value))


OPERATOR_DOC = """\
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: 127.0.0.1
  nodeSelectors:
  - matchExpressions:
    - key: a
      operator: OPERATOR
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(OPERATOR_DOC.replace("OPERATOR", "{x: 1}"), "is not one of", id="op-map"),
        pytest.param(OPERATOR_DOC.replace("OPERATOR", "[In]"), "is not one of", id="op-list"),
        pytest.param(BOMB, "aliases that expand it", id="alias-bomb"),
        pytest.param("a: &a [*a]\n", "recursive alias", id="recursive-alias"),
        pytest.param(
            OPERATOR_DOC.replace("64512", "0x" + "f" * 5000), "an integer of", id="huge-hex"
        ),
        pytest.param(OPERATOR_DOC.replace("64512", "9" * 5000), "an integer of", id="huge-int"),
        pytest.param("a:\n" + "".join(f"{' ' * i}- \n" for i in range(1, 200)), "", id="deep"),
        pytest.param(
            OPERATOR_DOC.replace("  nodeSelectors", "  holdTime: !!timestamp 2001-12-14\n  x"),
            "not a date",
            id="timestamp",
        ),
        pytest.param(
            "apiVersion: kube-bgpd.io/v1alpha1\nkind: SpeakerConfig\nmetadata: {name: s}\n"
            "spec: {drainWindow: " + "9" * 300 + "h, debounce: 1.0e+308}\n",
            "too long",
            id="huge-durations",
        ),
    ],
)
def test_config_crash_classes_are_named_errors(text: str, message: str) -> None:
    result = _load(text)
    assert result.config is None
    assert message in " ".join(str(e) for e in result.errors)


def test_an_oversized_config_file_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (5 * 1024 * 1024) + "\n")
    result = _timed(lambda: load_config([big]))
    assert result.config is None
    assert "byte limit" in str(result.errors[0])


# --------------------------------------------------------------------------- dumps


def _dump(text: str) -> ClusterDump | None:
    error = ""
    try:
        dump: ClusterDump = _timed(lambda: parse_dump(text))
    except DumpError as exc:
        error = str(exc)
    if error:
        assert "\n" not in error
        return None
    assert isinstance(dump, ClusterDump)
    return dump


SECRET = """\
---
apiVersion: v1
kind: Secret
metadata: {name: md5, namespace: default}
data:
  password: PASSWORD
"""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(min_value=0, max_value=10_000), value=HOSTILE_TEXT)
@example(index=5, value="!!float 1e400")
@example(index=5, value="!!timestamp 2001-12-14")
def test_dump_reader_answers_any_spliced_value(index: int, value: str) -> None:
    _dump(_splice(DUMP_TEXT, DUMP_POSITIONS, index, value))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 100_000 + "]" * 100_000, id="deep-json"),
        pytest.param('{"items": ' + "[" * 900 + "]" * 900 + "}", id="deep-json-under-limit"),
        pytest.param(
            '{"kind": "List", "items": [{"kind": "Service", "x": ' + "9" * 5000 + "}]}",
            id="huge-json-int",
        ),
        pytest.param(DUMP_TEXT + SECRET.replace("PASSWORD", "'héllo=='"), id="non-ascii-base64"),
        pytest.param(DUMP_TEXT + SECRET.replace("PASSWORD", "'!!!'"), id="invalid-base64"),
        pytest.param(DUMP_TEXT + SECRET.replace("PASSWORD", "{a: 1}"), id="password-mapping"),
        pytest.param(BOMB, id="alias-bomb"),
        pytest.param("kind: List\nitems:\n- !!timestamp 2001-12-14\n", id="timestamp-item"),
    ],
)
def test_dump_crash_classes_are_dump_errors_or_dumps(text: str) -> None:
    _dump(text)


# --------------------------------------------------------------------------- annotations

ANNOTATION_VALUES = st.one_of(
    st.text(max_size=200),
    HOSTILE_TEXT,
    st.builds(lambda n: ",".join(["65000:1"] * n), st.integers(0, 5000)),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    annotation=st.sampled_from([ANNOTATION_COMMUNITIES, ANNOTATION_LOCAL_PREF, ANNOTATION_MED]),
    value=ANNOTATION_VALUES,
)
def test_any_annotation_value_is_decided(annotation: str, value: str) -> None:
    """decide() (through explain) answers for a Service whatever its annotation holds."""
    config = parse_text(CONFIG_TEXT, "config.yaml").config
    assert config is not None
    docs = [d for d in yaml.safe_load_all(DUMP_TEXT) if d is not None]
    docs = copy.deepcopy(docs)
    for doc in docs:
        for item in doc.get("items", [doc]):
            if item.get("kind") == "Service":
                item.setdefault("metadata", {}).setdefault("annotations", {})[annotation] = value
    dump = _dump(yaml.safe_dump_all(docs))
    assert dump is not None
    decisions = _timed(lambda: explain(config, dump.snapshot, sorted(dump.snapshot.nodes)))
    assert decisions
