"""A cluster dump is read item by item: each object of a List is parsed, converted and
dropped before the next is parsed, so the whole document tree never exists at once (at
10,000 Services a YAML tree held ~400 MiB; docs/benchmarks.md, "Memory")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bgpd.objects import DumpError, parse_dump
from bgpd.untrusted import (
    MAX_ALIAS_EXPANSION,
    DocumentEnd,
    InputRefused,
    Item,
    Part,
    json_parts,
    yaml_parts,
)

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _service(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"s{i}", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": f"10.0.0.{i + 1}"}]}},
    }


def _kubectl_list(n: int) -> dict[str, Any]:
    # kubectl prints the keys sorted: the items come before `kind: List`.
    return {"apiVersion": "v1", "items": [_service(i) for i in range(n)], "kind": "List"}


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        pytest.param(json.dumps(_kubectl_list(2)) + "\n", lambda t: json_parts(t), id="json"),
        pytest.param(yaml.safe_dump(_kubectl_list(2)), lambda t: yaml_parts(t, LOADER), id="yaml"),
    ],
)
def test_items_come_out_before_the_rest_is_parsed(text: str, parts: Any) -> None:
    # The text breaks after the first item: that item is handed out before the parser
    # reaches the break, which only a reader that does not build the document first does.
    cut = text.index("s1") - 40
    broken = text[:cut] + "\n}}]]: [[ broken: {{"
    stream: Iterator[Part] = parts(broken)
    first = next(stream)
    assert isinstance(first, Item)
    assert first.index == 0
    assert first.value == _service(0)
    with pytest.raises((json.JSONDecodeError, yaml.YAMLError, InputRefused)):
        list(stream)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(json.dumps(_kubectl_list(3)), id="json"),
        pytest.param(yaml.safe_dump(_kubectl_list(3)), id="yaml"),
    ],
)
def test_a_streamed_list_ends_with_the_rest_of_its_document(text: str) -> None:
    parts = list(json_parts(text) if text.startswith("{") else yaml_parts(text, LOADER))
    assert [p.index for p in parts if isinstance(p, Item)] == [0, 1, 2]
    assert parts[-1] == DocumentEnd({"apiVersion": "v1", "kind": "List"}, True, True)
    assert sorted(parse_dump(text).snapshot.services) == ["default/s0", "default/s1", "default/s2"]


def test_aliases_share_one_budget_across_the_items() -> None:
    # Each item alone expands by less than the bound; together by more.
    anchored = "[" + ", ".join(["1"] * (MAX_ALIAS_EXPANSION // 3 + 1)) + "]"
    items = "\n".join(f"- {{kind: Foo, a: &x {anchored}, b: *x}}" for _ in range(4))
    parse_dump(f"kind: List\nitems:\n{items.split(chr(10))[0]}\n")  # one alone is fine
    with pytest.raises(DumpError, match="aliases that expand"):
        parse_dump(f"kind: List\nitems:\n{items}\n")


def test_an_alias_names_an_anchor_of_its_own_item_only() -> None:
    text = "kind: List\nitems:\n- {kind: Foo, a: &x [1, 2]}\n- {kind: Foo, a: *x}\n"
    with pytest.raises(DumpError, match="undefined alias"):
        parse_dump(text)


def test_a_typed_list_names_its_items_kind_after_them() -> None:
    # The raw API's ServiceList: items without a kind, the List's kind after them.
    doc = {"items": [{k: v for k, v in _service(0).items() if k != "kind"}], "kind": "ServiceList"}
    for text in (json.dumps(doc), yaml.safe_dump(doc)):
        assert list(parse_dump(text).snapshot.services) == ["default/s0"]


def test_an_object_holding_items_is_one_object_not_a_list() -> None:
    text = yaml.safe_dump({"kind": "Foo", "metadata": {"name": "x"}, "items": [_service(0)]})
    assert dict(parse_dump(text).snapshot.services) == {}


def test_errors_name_the_document_and_item() -> None:
    bad = _kubectl_list(2)
    bad["items"][1]["spec"]["ports"] = [{"port": "http"}]
    with pytest.raises(DumpError, match=r"^dump item 1 \(Service\): "):
        parse_dump(yaml.safe_dump(bad))
    two = yaml.safe_dump(_kubectl_list(1)) + "---\n" + yaml.safe_dump(bad)
    with pytest.raises(DumpError, match=r"^document 2 item 1 \(Service\): "):
        parse_dump(two)
