"""deploy/kubernetes/crds: generated from the field table, equal to MetalLB's CRDs for
MetalLB's fields, structural, and accepting MetalLB's published samples and our examples
without pruning a field.

tests/data/metallb-crds holds MetalLB's own CRDs (config/crd/bases of metallb/metallb,
v0.16.1-19-g7938d3f89) and tests/data/metallb-samples its published BGP samples
(configsamples/), both unchanged.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bgpd.config import crds
from bgpd.config.documents import KINDS, parse_documents
from bgpd.config.peer import PEER_V1BETA2
from bgpd.config.status_crds import STATUS_KINDS, status_crds

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "kubernetes" / "crds"
METALLB_CRDS = ROOT / "tests" / "data" / "metallb-crds"
METALLB_SAMPLES = ROOT / "tests" / "data" / "metallb-samples"
EXAMPLES = ROOT / "config" / "examples"

#: The fields kube-bgpd adds to MetalLB's kinds (docs/configuration.md lists them): the
#: only difference from MetalLB's schemas besides the BGPPeer conversion strategy.
STATUS_CRD_NAMES = {d["metadata"]["name"] for d in status_crds()}

EXTENSIONS: dict[tuple[str, str], set[str]] = {
    ("bgppeers.metallb.io", "v1beta1"): {"passwordFile"},
    ("bgppeers.metallb.io", "v1beta2"): {"passwordFile"},
    ("bgpadvertisements.metallb.io", "v1beta1"): {"linkBandwidthPerEndpoint", "maxNodes"},
}


def generated() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in crds.generate()}


def metallb() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(METALLB_CRDS.glob("*.yaml")):
        d = yaml.safe_load(path.read_text())
        out[d["metadata"]["name"]] = d
    return out


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


# --------------------------------------------------------------------------- one source


def test_committed_crds_are_the_generated_ones() -> None:
    """Regenerate with `python -m bgpd.config.crds deploy/kubernetes/crds`."""
    files = crds.render()
    assert {p.name for p in CRDS.iterdir()} == set(files)
    for name, text in files.items():
        assert (CRDS / name).read_text() == text, name


def test_generator_writes_the_directory(tmp_path: Path) -> None:
    crds.main([str(tmp_path / "crds")])
    assert {p.name: p.read_text() for p in (tmp_path / "crds").iterdir()} == crds.render()


def test_every_kind_of_the_loader_has_its_crd() -> None:
    served = {
        (d["spec"]["group"] + "/" + v["name"], d["spec"]["names"]["kind"])
        for d in crds.generate()
        for v in d["spec"]["versions"]
    }
    assert served == {(k.api_version, k.kind) for k in KINDS} | STATUS_KINDS


# --------------------------------------------------------------------------- MetalLB's


def test_same_crds_as_metallb_for_its_kinds() -> None:
    ours = generated()
    for name, theirs in metallb().items():
        mine = copy.deepcopy(ours[name])
        assert mine["spec"].pop("conversion", None) == (
            {"strategy": "None"} if len(theirs["spec"]["versions"]) > 1 else None
        )
        for v in mine["spec"]["versions"]:
            spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
            for extra in EXTENSIONS.get((name, v["name"]), set()):
                del spec["properties"][extra]
        theirs = copy.deepcopy(theirs)
        theirs["metadata"].pop("annotations")  # controller-gen's version
        assert without_descriptions(mine) == without_descriptions(theirs), name


def test_extensions_are_optional_and_documented() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    ours = generated()
    for (name, version), fields in EXTENSIONS.items():
        [v] = [v for v in ours[name]["spec"]["versions"] if v["name"] == version]
        spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert not fields & set(spec.get("required", []))
        for f in fields:
            assert f"`{f}`" in docs, f


def test_bgppeer_versions_convert_by_apiversion_only() -> None:
    """`conversion: None` is sound: v1beta1's fields are v1beta2's, same types."""
    crd = generated()["bgppeers.metallb.io"]
    by_name = {v["name"]: v for v in crd["spec"]["versions"]}
    old = by_name["v1beta1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    new = by_name["v1beta2"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(old) <= set(new)
    for name, schema in old.items():
        assert schema["type"] == new[name]["type"], name
    assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == ["v1beta2"]
    assert by_name["v1beta1"]["deprecated"] is True


# --------------------------------------------------------------------------- structural


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def version_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for d in crds.generate():
        for v in d["spec"]["versions"]:
            yield f"{d['metadata']['name']}/{v['name']}", v["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(("name", "schema"), list(version_schemas()))
def test_schemas_are_structural(name: str, schema: dict[str, Any]) -> None:
    """What the API server requires of a CRD schema (no $ref, every node typed, no
    properties beside additionalProperties) and an RE2-compatible pattern dialect."""
    for path, node in nodes(schema):
        where = f"{name}{path}"
        assert "$ref" not in node, where
        assert "anyOf" not in node, where
        assert "type" in node or node.get("x-kubernetes-int-or-string"), where
        assert not ("properties" in node and "additionalProperties" in node), where
        if "pattern" in node:
            assert "\\u" not in node["pattern"], where
            re.compile(node["pattern"])
        if node.get("type") == "object" and path not in (".metadata",):
            assert (
                "properties" in node
                or "additionalProperties" in node
                or path == ".status"
                # The status kinds have no spec (an empty object, as MetalLB's).
                or (path == ".spec" and name.split("/")[0] in STATUS_CRD_NAMES)
            )


def test_speaker_config_has_a_status_subresource_with_conditions() -> None:
    crd = generated()["speakerconfigs.kube-bgpd.io"]
    [v] = crd["spec"]["versions"]
    assert v["subresources"] == {"status": {}}
    conditions = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    # No defaults: one stored on every object would override the command line's flags.
    assert not [p for p, node in nodes(v["schema"]["openAPIV3Schema"]) if "default" in node]


# --------------------------------------------------------------------------- validation


def json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A CRD schema as a strict JSON Schema: what the API server would prune (a field the
    schema does not name) is an error here, so "valid" means "stored unchanged". CEL
    rules (x-kubernetes-validations) are not checked."""
    out: dict[str, Any] = {}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    for key in ("minimum", "maximum", "minLength", "maxLength", "minItems", "pattern", "enum"):
        if key in node:
            out[key] = node[key]
    if "items" in node:
        out["items"] = json_schema(node["items"])
    if "properties" in node:
        out["properties"] = {k: json_schema(v) for k, v in node["properties"].items()}
        out["additionalProperties"] = False
        out["required"] = node.get("required", [])
    elif isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = json_schema(node["additionalProperties"])
    return out


def validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    group, version = api_version.split("/")
    for d in crds.generate():
        if d["spec"]["group"] == group and d["spec"]["names"]["kind"] == kind:
            [v] = [v for v in d["spec"]["versions"] if v["name"] == version]
            schema = json_schema(v["schema"]["openAPIV3Schema"])
            # metadata is the API server's (type: object); our loader reads it.
            schema["properties"]["metadata"] = {"type": "object"}
            return jsonschema.Draft202012Validator(schema)
    raise AssertionError(f"no CRD serves {api_version} {kind}")


def documents(directory: Path) -> Iterator[Any]:
    """The objects of the CRDs' groups in the YAML files of `directory`."""
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and str(doc.get("apiVersion", "")).split("/")[0] in crds.GROUPS:
                yield pytest.param(doc, id=f"{path.stem}:{doc['kind']}:{doc['metadata']['name']}")


#: MetalLB's layer-2 kind has no CRD here (kube-bgpd is BGP only; `validate` says so:
#: tests/unit/test_metallb_samples.py).
SAMPLES = [p for p in documents(METALLB_SAMPLES) if p.values[0]["kind"] != "L2Advertisement"]
EXAMPLE_DOCS = [
    *documents(EXAMPLES),
    *documents(ROOT / "deploy" / "kubernetes" / "base"),
    *documents(ROOT / "deploy" / "systemd"),
]


def test_there_are_samples_of_every_metallb_kind() -> None:
    kinds = {p.values[0]["kind"] for p in SAMPLES}
    assert kinds == {"IPAddressPool", "BGPPeer", "BGPAdvertisement", "Community", "BFDProfile"}


@pytest.mark.parametrize("doc", SAMPLES)
def test_metallb_samples_are_stored_unchanged(doc: dict[str, Any]) -> None:
    errors = [e.message for e in validator(doc["apiVersion"], doc["kind"]).iter_errors(doc)]
    assert not errors


@pytest.mark.parametrize("doc", EXAMPLE_DOCS)
def test_our_examples_are_stored_unchanged(doc: dict[str, Any]) -> None:
    errors = [e.message for e in validator(doc["apiVersion"], doc["kind"]).iter_errors(doc)]
    assert not errors


def test_a_field_the_api_server_would_prune_is_caught() -> None:
    """The check above is not vacuous: a misspelt field fails it."""
    doc = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "tor"},
        "spec": {"myASN": 64512, "peerASN": 64513, "peerAdress": "192.0.2.1"},
    }
    assert not validator(doc["apiVersion"], doc["kind"]).is_valid(doc)


@pytest.mark.parametrize(
    ("spec", "valid"),
    [
        pytest.param({"peerPort": 16385}, False, id="peerPort-above-metallb-bound"),
        pytest.param({"peerPort": 16384}, True, id="peerPort-metallb-bound"),
        pytest.param({"dynamicASN": "sideways"}, False, id="dynamicASN-enum"),
        pytest.param({"myASN": 4294967296}, False, id="myASN-u32"),
        pytest.param({"vrf": "red", "interface": "eth0"}, True, id="refused-but-stored"),
    ],
)
def test_bgppeer_schema_bounds(spec: dict[str, Any], valid: bool) -> None:
    doc = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "tor"},
        "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1", **spec},
    }
    assert validator(doc["apiVersion"], doc["kind"]).is_valid(doc) is valid


# --------------------------------------------------------------------------- the loader


def test_bgppeer_with_the_api_servers_defaults_loads() -> None:
    """MetalLB's CRD stores disableMP and dualStackAddressFamily false on every BGPPeer:
    the loader accepts those (what kube-bgpd does) and refuses true."""
    pool = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "p"},
        "spec": {"addresses": ["192.0.2.0/28"]},
    }

    def peer(value: bool) -> dict[str, Any]:
        return {
            "apiVersion": "metallb.io/v1beta2",
            "kind": "BGPPeer",
            "metadata": {"name": "tor"},
            "spec": {
                "myASN": 64512,
                "peerASN": 64513,
                "peerAddress": "192.0.2.1",
                "peerPort": 179,
                "disableMP": value,
                "dualStackAddressFamily": False,
            },
        }

    stored = parse_documents([("a", pool), ("b", peer(False))])
    assert stored.config is not None, stored.errors
    refused = parse_documents([("a", pool), ("b", peer(True))])
    assert refused.config is None
    assert [e.where for e in refused.errors] == ["BGPPeer tor: spec.disableMP"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param(f.name, True if f.type == "boolean" else 1 if f.type == "integer" else "x")
        for f in PEER_V1BETA2.api_only
    ],
)
def test_fields_only_the_api_has_are_refused_with_a_reason(name: str, value: object) -> None:
    """Each field the CRD keeps for MetalLB and the loader cannot honour gets the loader's
    `not supported: <why>`, never `unknown field`."""
    doc = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "tor"},
        "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1", name: value},
    }
    result = parse_documents([("a", doc)])
    [error] = [e for e in result.errors if e.where.endswith(f"spec.{name}")]
    assert error.message.startswith("not supported: ")
