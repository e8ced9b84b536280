"""The simulator's structural-schema rules for custom resources: pruning, defaults, and
field errors worded as kube-apiserver words them."""

from __future__ import annotations

from typing import Any

import pytest

from kbgpd_lab.apisim import schema
from kbgpd_lab.apisim.crds import check, prepare, resource_defs, status
from kbgpd_lab.apisim.resources import ResourceTable, version_priority

SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {
            "type": "object",
            "required": ["peerASN"],
            "properties": {
                "peerASN": {"type": "integer", "minimum": 0, "maximum": 4294967295},
                "holdTime": {"type": "string"},
                "port": {"type": "integer", "default": 179, "exclusiveMinimum": True, "minimum": 0},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "name": {"type": "string", "maxLength": 3, "minLength": 1},
                "id": {"type": "string", "pattern": "^[0-9]+$"},
                "addr": {"type": "string", "format": "ipv4"},
                "port2": {"x-kubernetes-int-or-string": True},
                "maybe": {"type": "string", "nullable": True},
                "list": {
                    "type": "array",
                    "maxItems": 2,
                    "minItems": 1,
                    "items": {"type": "object", "properties": {"x": {"type": "integer"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "properties": {"state": {"type": "string"}}},
    },
}


def obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "x.io/v1",
        "kind": "K",
        "metadata": {"name": "n"},
        "spec": {"peerASN": 1, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "errors"),
    [
        pytest.param({}, [], id="valid"),
        pytest.param(
            {"holdTime": 90},
            [
                'spec.holdTime: Invalid value: "integer": spec.holdTime in body must be of '
                'type string: "integer"'
            ],
            id="type",
        ),
        pytest.param(
            {"peerASN": 4294967296},
            [
                "spec.peerASN: Invalid value: 4294967296: spec.peerASN in body should be "
                "less than or equal to 4294967295"
            ],
            id="maximum",
        ),
        pytest.param(
            {"port": 0},
            ["spec.port: Invalid value: 0: spec.port in body should be greater than 0"],
            id="exclusive-minimum",
        ),
        pytest.param(
            {"mode": "c"},
            ['spec.mode: Unsupported value: "c": supported values: "a", "b"'],
            id="enum",
        ),
        pytest.param(
            {"name": "abcd"}, ["spec.name: Too long: may not be more than 3 bytes"], id="max-length"
        ),
        pytest.param(
            {"name": ""},
            ['spec.name: Invalid value: "": spec.name in body should be at least 1 chars long'],
            id="min-length",
        ),
        pytest.param(
            {"id": "x1"},
            ["spec.id: Invalid value: \"x1\": spec.id in body should match '^[0-9]+$'"],
            id="pattern",
        ),
        pytest.param(
            {"addr": "10.0.0.300"},
            [
                'spec.addr: Invalid value: "10.0.0.300": spec.addr in body must be of type '
                'ipv4: "10.0.0.300"'
            ],
            id="format",
        ),
        pytest.param({"port2": "http"}, [], id="int-or-string-string"),
        pytest.param(
            {"port2": 1.5},
            [
                'spec.port2: Invalid value: "number": spec.port2 in body must be of type '
                'integer,string: "number"'
            ],
            id="int-or-string-number",
        ),
        pytest.param({"maybe": None}, [], id="nullable"),
        pytest.param(
            {"list": [{"x": "1"}, {}, {}]},
            [
                'spec.list[0].x: Invalid value: "string": spec.list[0].x in body must be of '
                'type integer: "string"',
                "spec.list: Too many: 3: must have at most 2 items",
            ],
            id="array-items-and-max-items",
        ),
        pytest.param(
            {"list": []},
            ["spec.list: Invalid value: 0: spec.list in body should have at least 1 items"],
            id="min-items",
        ),
        pytest.param(
            {"labels": {"a": 1}},
            [
                'spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of '
                'type string: "integer"'
            ],
            id="additional-properties",
        ),
    ],
)
def test_validate_words_errors_as_the_apiserver(spec: dict[str, Any], errors: list[str]) -> None:
    assert [str(e) for e in schema.validate(obj(**spec), SPEC)] == errors


def test_required_and_cause_reasons() -> None:
    value = obj()
    del value["spec"]["peerASN"]
    value["spec"]["holdTime"] = 1
    errors = schema.validate(value, SPEC)
    assert [(str(e), e.reason) for e in errors] == [
        ("spec.peerASN: Required value", "FieldValueRequired"),
        (
            'spec.holdTime: Invalid value: "integer": spec.holdTime in body must be of type '
            'string: "integer"',
            "FieldValueTypeInvalid",
        ),
    ]
    assert [str(e) for e in schema.validate({"metadata": {}}, SPEC)] == ["spec: Required value"]


def test_prune_drops_unknown_fields_and_reports_their_paths() -> None:
    value = obj(
        bogus=1,
        list=[{"x": 1, "y": 2}],
        labels={"any": "kept"},
        free={"anything": {"goes": 1}},
    )
    value["extra"] = True
    value["status"] = {"state": "up", "other": 1}
    assert schema.prune(value, SPEC) == [
        "spec.bogus",
        "spec.list[0].y",
        "extra",
        "status.other",
    ]
    assert value["spec"]["list"] == [{"x": 1}]
    assert value["spec"]["labels"] == {"any": "kept"}
    assert value["spec"]["free"] == {"anything": {"goes": 1}}
    assert value["status"] == {"state": "up"}
    assert set(value) == {"apiVersion", "kind", "metadata", "spec", "status"}


def test_defaults_fill_absent_fields_and_non_nullable_nulls_are_dropped() -> None:
    value = obj(holdTime=None, maybe=None)
    schema.drop_nulls(value, SPEC)
    schema.apply_defaults(value, SPEC)
    assert value["spec"] == {"peerASN": 1, "port": 179, "maybe": None}
    # A default never creates its parent object.
    bare: dict[str, Any] = {"metadata": {}}
    schema.apply_defaults(bare, SPEC)
    assert bare == {"metadata": {}}


CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.x.io"},
    "spec": {
        "group": "x.io",
        "names": {"kind": "Thing", "plural": "things"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": False,
                "schema": {"openAPIV3Schema": SPEC},
            },
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": SPEC},
                "subresources": {"status": {}},
            },
            {
                "name": "v1beta1",
                "served": False,
                "storage": False,
                "schema": {"openAPIV3Schema": SPEC},
            },
        ],
    },
}


def test_crd_defaults_status_and_served_resources() -> None:
    crd = {**CRD, "spec": dict(CRD["spec"])}
    prepare(crd)
    assert check(crd) == []
    names = crd["spec"]["names"]
    assert (names["singular"], names["listKind"]) == ("thing", "ThingList")
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    first = status(crd, None, "2026-01-01T00:00:00Z")
    assert [(c["type"], c["status"]) for c in first["conditions"]] == [
        ("NamesAccepted", "True"),
        ("Established", "True"),
    ]
    assert first["storedVersions"] == ["v1"]
    again = status(crd, first, "2026-01-02T00:00:00Z")
    assert again["conditions"] == first["conditions"]  # transition times kept
    defs = resource_defs(crd)
    assert [(d.version, d.storage_version, d.status_subresource) for d in defs] == [
        ("v1", "v1", True),
        ("v1alpha1", "v1", False),
    ]
    table = ResourceTable()
    table.register(defs)
    assert table.group_versions()["x.io"] == ["v1", "v1alpha1"]
    body = (
        b'{"kind":"Thing","apiVersion":"x.io/v1",'
        b'"metadata":{"name":"n","annotations":{"apiVersion":"x.io/v1"}}}'
    )
    assert defs[1].served_as(body).startswith(b'{"kind":"Thing","apiVersion":"x.io/v1alpha1"')
    assert defs[1].served_as(body).count(b"x.io/v1alpha1") == 1
    table.unregister("things.x.io")
    assert table.by_name("things") is None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param(
            {"metadata": {"name": "wrong"}},
            'metadata.name: Invalid value: "wrong": must be spec.names.plural+"."+spec.group',
            id="name",
        ),
        pytest.param(
            {"spec": {**CRD["spec"], "scope": "Global"}},
            'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
            id="scope",
        ),
        pytest.param(
            {
                "spec": {
                    **CRD["spec"],
                    "versions": [{**v, "storage": True} for v in CRD["spec"]["versions"]],
                }
            },
            "must have exactly one version marked as storage version",
            id="storage",
        ),
        pytest.param(
            {
                "spec": {
                    **CRD["spec"],
                    "versions": [{"name": "v1", "served": True, "storage": True}],
                }
            },
            "spec.versions[0].schema.openAPIV3Schema: Required value",
            id="schema",
        ),
        pytest.param(
            {
                "spec": {
                    **CRD["spec"],
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {"openAPIV3Schema": {"type": "string", "pattern": "(["}},
                        }
                    ],
                }
            },
            'spec.versions[0].schema.openAPIV3Schema.pattern: Invalid value: "([": must be a '
            "valid regular expression, but isn't",
            id="pattern",
        ),
    ],
)
def test_crd_checks(change: dict[str, Any], error: str) -> None:
    crd = {**CRD, **change}
    assert any(error in str(e) for e in check(crd)), [str(e) for e in check(crd)]


def test_version_priority_is_the_apiservers() -> None:
    versions = ["v1alpha1", "v1beta1", "foo", "v2", "v1", "v1beta2", "v2beta1"]
    assert sorted(versions, key=version_priority) == [
        "v2",
        "v1",
        "v2beta1",
        "v1beta2",
        "v1beta1",
        "v1alpha1",
        "foo",
    ]
