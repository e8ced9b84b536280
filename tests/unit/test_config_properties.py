"""Hypothesis properties of the loader: it never raises, whatever YAML it is given, and it
always answers with a config xor errors."""

from __future__ import annotations

import string
from typing import Any

from configkit import adv, peer, pool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bgpd.config import LoadResult, parse_documents, parse_text

KEYS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "spec",
        "status",
        "items",
        "addresses",
        "myASN",
        "peerASN",
        "peerAddress",
        "holdTime",
        "keepaliveTime",
        "communities",
        "ipAddressPools",
        "peers",
        "nodeSelectors",
        "matchLabels",
        "matchExpressions",
        "operator",
        "values",
        "mqtt",
        "value",
    ]
)
KINDS = st.sampled_from(
    [
        "IPAddressPool",
        "BGPPeer",
        "BGPAdvertisement",
        "Community",
        "BFDProfile",
        "SpeakerConfig",
        "List",
        "L2Advertisement",
    ]
)
APIS = st.sampled_from(["metallb.io/v1beta1", "metallb.io/v1beta2", "kube-bgpd.io/v1alpha1", "v1"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["10.99.100.0/24", "10.0.0.9-10.0.0.1", "fd00::/120", "90s", "1s", "65000:1"])
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(KEYS | st.text(max_size=8) | st.integers(), children, max_size=5)
    ),
    max_leaves=12,
)


@st.composite
def documents(draw: st.DrawFn) -> object:
    """Mostly object-shaped documents (so the kind parsers are reached), sometimes anything."""
    if draw(st.booleans()):
        return draw(VALUES)
    doc: dict[Any, Any] = {"apiVersion": draw(APIS), "kind": draw(KINDS)}
    doc["metadata"] = draw(
        st.fixed_dictionaries({"name": st.sampled_from(["a", "b", "Bad", ""]) | VALUES}) | VALUES
    )
    doc["spec"] = draw(st.dictionaries(KEYS, VALUES, max_size=6) | VALUES)
    if draw(st.booleans()):
        doc["items"] = draw(st.lists(VALUES, max_size=3))
    return doc


def assert_answers(result: LoadResult) -> None:
    assert isinstance(result, LoadResult)
    assert (result.config is None) == bool(result.errors)
    for issue in (*result.errors, *result.warnings):
        text = str(issue)
        # The text says what is wrong and, for an issue in a document, where (the file).
        assert issue.message
        assert issue.message in text
        assert not issue.source or text.startswith(f"{issue.source}: "), text
        assert "\n" not in text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(documents(), max_size=5))
def test_parse_documents_never_raises(docs: list[object]) -> None:
    assert_answers(parse_documents([(f"h.yaml:doc {i}", d) for i, d in enumerate(docs)]))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.printable + "ü:-[]{}!&*|>'\"%@`", max_size=200))
def test_any_text_through_yaml_never_raises(text: str) -> None:
    assert_answers(parse_text(text, "h.yaml"))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["spec", "metadata"]), KEYS, VALUES)
def test_one_field_changed_in_a_valid_config_never_raises(
    part: str, key: str, value: object
) -> None:
    base = [pool(), peer(), adv()]
    target = base[len(key) % 3]
    section = target[part]
    section[key] = value
    assert_answers(parse_documents([(f"h.yaml:doc {i}", d) for i, d in enumerate(base)]))
