"""Pure parts of the API simulator: the three patch types and the selector parsers."""

from __future__ import annotations

from typing import Any

import pytest

from kbgpd_lab.apisim.errors import ApiError
from kbgpd_lab.apisim.patch import PatchError, json_patch, merge_patch, strategic_merge
from kbgpd_lab.apisim.resources import RESOURCES, ResourceTable
from kbgpd_lab.apisim.selectors import field_value, parse_field_selector, parse_label_selector

SERVICE_KEYS = ResourceTable(RESOURCES).by_name("services").merge_keys  # type: ignore[union-attr]
POD_KEYS = ResourceTable(RESOURCES).by_name("pods").merge_keys  # type: ignore[union-attr]


# ---------------------------------------------------------------- RFC 7386 (its appendix A)


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        pytest.param({"a": "b"}, {"a": "c"}, {"a": "c"}, id="replace"),
        pytest.param({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}, id="add"),
        pytest.param({"a": "b"}, {"a": None}, {}, id="null-deletes"),
        pytest.param({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}, id="lists-replaced"),
        pytest.param({"e": None}, {"a": 1}, {"e": None, "a": 1}, id="existing-null-kept"),
        pytest.param([1, 2], {"a": "b", "c": None}, {"a": "b"}, id="non-object-target"),
        pytest.param({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}, id="nested-null"),
        pytest.param({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}, {"a": {"c": 2}}, id="nested"),
    ],
)
def test_merge_patch(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


def test_merge_patch_does_not_mutate_its_inputs() -> None:
    target = {"a": {"b": [1]}}
    patch = {"a": {"c": {"d": 1}}}
    out = merge_patch(target, patch)
    out["a"]["c"]["d"] = 2
    assert target == {"a": {"b": [1]}}
    assert patch == {"a": {"c": {"d": 1}}}


# ---------------------------------------------------------------- RFC 6902


@pytest.mark.parametrize(
    ("doc", "ops", "result"),
    [
        pytest.param({}, [{"op": "add", "path": "/a", "value": 1}], {"a": 1}, id="add"),
        pytest.param(
            {"a": [1, 3]},
            [{"op": "add", "path": "/a/1", "value": 2}],
            {"a": [1, 2, 3]},
            id="insert",
        ),
        pytest.param(
            {"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}], {"a": [1, 2]}, id="append"
        ),
        pytest.param({"a": 1, "b": 2}, [{"op": "remove", "path": "/a"}], {"b": 2}, id="remove"),
        pytest.param(
            {"a": 1}, [{"op": "replace", "path": "/a", "value": 2}], {"a": 2}, id="replace"
        ),
        pytest.param(
            {"a": {"x": 1}},
            [{"op": "move", "from": "/a/x", "path": "/b"}],
            {"a": {}, "b": 1},
            id="move",
        ),
        pytest.param(
            {"a": [1]},
            [{"op": "copy", "from": "/a", "path": "/b"}],
            {"a": [1], "b": [1]},
            id="copy",
        ),
        pytest.param(
            {"a": 1}, [{"op": "test", "path": "/a", "value": 1}], {"a": 1}, id="test-passes"
        ),
        pytest.param(
            {"m": {}},
            [{"op": "add", "path": "/m/a~1b~0c", "value": 1}],
            {"m": {"a/b~c": 1}},
            id="pointer-escapes",
        ),
    ],
)
def test_json_patch(doc: Any, ops: Any, result: Any) -> None:
    assert json_patch(doc, ops) == result


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        pytest.param([{"op": "remove", "path": "/missing"}], 422, id="remove-missing"),
        pytest.param([{"op": "replace", "path": "/a/x", "value": 1}], 422, id="into-scalar"),
        pytest.param([{"op": "add", "path": "/l/5", "value": 1}], 422, id="index-out-of-range"),
        pytest.param([{"op": "add", "path": "/l/01", "value": 1}], 422, id="leading-zero-index"),
        pytest.param([{"op": "test", "path": "/a", "value": 2}], 422, id="test-fails"),
        pytest.param([{"op": "frobnicate", "path": "/a"}], 400, id="unknown-op"),
        pytest.param([{"op": "add", "path": "/a"}], 400, id="add-without-value"),
        pytest.param({"op": "add"}, 400, id="not-a-list"),
        pytest.param([{"op": "add", "path": "a", "value": 1}], 400, id="pointer-without-slash"),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    doc = {"a": 1, "l": [0]}
    with pytest.raises(PatchError) as err:
        json_patch(doc, ops)
    assert err.value.code == code
    assert doc == {"a": 1, "l": [0]}


# ---------------------------------------------------------------- strategic merge


def svc(*ports: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "s", **meta}, "spec": {"ports": list(ports)}}


@pytest.mark.parametrize(
    ("original", "patch", "result"),
    [
        pytest.param(
            svc({"port": 80, "name": "http"}),
            {"spec": {"ports": [{"port": 80, "name": "web"}, {"port": 443}]}},
            svc({"port": 80, "name": "web"}, {"port": 443}),
            id="ports-merge-by-port",
        ),
        pytest.param(
            svc({"port": 80}, {"port": 443}),
            {"spec": {"ports": [{"port": 80, "$patch": "delete"}]}},
            svc({"port": 443}),
            id="delete-element",
        ),
        pytest.param(
            svc({"port": 80}, {"port": 443}),
            {"spec": {"ports": [{"port": 8080}, {"$patch": "replace"}]}},
            svc({"port": 8080}),
            id="replace-list",
        ),
        pytest.param(
            svc({"port": 80}, {"port": 443}),
            {"spec": {"$setElementOrder/ports": [{"port": 443}, {"port": 80}]}},
            svc({"port": 443}, {"port": 80}),
            id="set-element-order",
        ),
        pytest.param(
            svc({"port": 80, "name": "a", "targetPort": 8080}),
            {"spec": {"ports": [{"port": 80, "targetPort": None}]}},
            svc({"port": 80, "name": "a"}),
            id="null-deletes-inside-element",
        ),
        pytest.param(
            svc(finalizers=["a", "b"]),
            {"metadata": {"finalizers": ["b", "c"]}},
            svc(finalizers=["a", "b", "c"]),
            id="finalizers-are-a-set",
        ),
        pytest.param(
            svc(finalizers=["a", "b"]),
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
            svc(finalizers=["b"]),
            id="delete-from-primitive-list",
        ),
        pytest.param(
            {"spec": {"externalIPs": ["1.1.1.1"]}},
            {"spec": {"externalIPs": ["2.2.2.2"]}},
            {"spec": {"externalIPs": ["2.2.2.2"]}},
            id="list-without-strategy-replaced",
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "A", "status": "True"}]}},
            {
                "status": {
                    "conditions": [
                        {"type": "B", "status": "False"},
                        {"type": "A", "status": "False"},
                    ]
                }
            },
            {
                "status": {
                    "conditions": [
                        {"type": "A", "status": "False"},
                        {"type": "B", "status": "False"},
                    ]
                }
            },
            id="conditions-merge-by-type",
        ),
        pytest.param(
            {"spec": {"selector": {"a": "1"}, "type": "ClusterIP"}},
            {"spec": {"selector": {"$patch": "delete"}, "other": {"$patch": "delete"}}},
            {"spec": {"type": "ClusterIP"}},
            id="delete-map-present-or-not",
        ),
        pytest.param(
            {"spec": {"selector": {"a": "1", "b": "2"}}},
            {"spec": {"selector": {"c": "3", "$patch": "replace"}}},
            {"spec": {"selector": {"c": "3"}}},
            id="replace-map",
        ),
        pytest.param(
            {"spec": {"type": "LoadBalancer", "loadBalancerIP": "1.2.3.4", "ports": []}},
            {"spec": {"$retainKeys": ["type", "ports"], "type": "ClusterIP"}},
            {"spec": {"type": "ClusterIP", "ports": []}},
            id="retain-keys",
        ),
    ],
)
def test_strategic_merge_service(original: Any, patch: Any, result: Any) -> None:
    assert strategic_merge(original, patch, SERVICE_KEYS) == result


def test_strategic_merge_nested_lists_by_their_own_keys() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]},
                {"name": "b", "image": "y"},
            ]
        }
    }
    patch = {"spec": {"containers": [{"name": "a", "env": [{"name": "F", "value": "2"}]}]}}
    out = strategic_merge(pod, patch, POD_KEYS)
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "E", "value": "1"},
        {"name": "F", "value": "2"},
    ]
    assert out["spec"]["containers"][1] == {"name": "b", "image": "y"}


def test_strategic_merge_element_without_merge_key_is_an_error() -> None:
    with pytest.raises(PatchError):
        strategic_merge(svc({"port": 80}), {"spec": {"ports": [{"name": "x"}]}}, SERVICE_KEYS)


# ---------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        pytest.param("", {}, True, id="empty-matches-all"),
        pytest.param("a=1", {"a": "1"}, True, id="eq"),
        pytest.param("a=", {"a": ""}, True, id="eq-empty-value"),
        pytest.param("a!=1", {}, True, id="neq-missing"),
        pytest.param("a in (1, 2)", {"a": "2"}, True, id="in-spaces"),
        pytest.param("a notin (1,2)", {"a": "2"}, False, id="notin"),
        pytest.param("example.com/x", {"example.com/x": "v"}, True, id="prefixed-key-exists"),
        pytest.param("!a,b", {"b": "1"}, True, id="not-exists-and-exists"),
        pytest.param("a=1,b=2", {"a": "1"}, False, id="and"),
    ],
)
def test_label_selector(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector(text).matches(labels) is matches


@pytest.mark.parametrize("text", ["a in (1", "=1", "a b", "a in 1", "-bad=1"])
def test_label_selector_errors(text: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(text)
    assert err.value.code == 400


def test_field_selector_escapes_and_booleans() -> None:
    sel = parse_field_selector(
        r"metadata.name=a\,b,spec.unschedulable=false", ("metadata.name", "spec.unschedulable")
    )
    assert sel.matches({"metadata": {"name": "a,b"}, "spec": {}})
    assert field_value({"spec": {"unschedulable": True}}, "spec.unschedulable") == "true"
    assert sel.exact_name() == "a,b"


def test_field_selector_unknown_field() -> None:
    with pytest.raises(ApiError) as err:
        parse_field_selector("spec.nodeName=x", ("metadata.name",))
    assert (err.value.code, err.value.message) == (400, "field label not supported: spec.nodeName")
