"""Reading config files: YAML as Kubernetes reads it, errors naming file and line, the
shipped examples, and the JSON schema in config/."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bgpd.config import (
    SPEC_FIELDS,
    ConfigError,
    load_config,
    load_config_or_raise,
    parse_text,
)
from bgpd.config import schema as config_schema
from bgpd.config.fields import field
from bgpd.config.speaker_config import SPEAKER
from bgpd.model import SpeakerConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
SCHEMA = ROOT / "config" / "schema.json"

ONE_TOR = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool-a}
spec: {addresses: [10.99.100.0/24]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-a}
spec: {myASN: 64512, peerASN: 64500, peerAddress: 172.31.250.1}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: adv}
"""


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


YAML_ERRORS = [
    pytest.param(
        "kind: IPAddressPool\nmetadata:\n  name: a\n   bad: indent\n",
        "bad.yaml: line 4, column 7: invalid YAML: mapping values are not allowed",
        id="indentation",
    ),
    pytest.param(
        "kind: BGPPeer\nspec: [1, 2\n",
        "bad.yaml: line 3, column 1: invalid YAML: while parsing a flow sequence,",
        id="unclosed-flow",
    ),
    pytest.param(
        "kind: BGPPeer\nkind: IPAddressPool\n",
        "bad.yaml: line 2, column 1: invalid YAML: while constructing a mapping, found "
        "duplicate key 'kind'",
        id="duplicate-key",
    ),
    pytest.param(
        "a: !!python/object:os.system {}\n",
        "bad.yaml: line 1, column 4: invalid YAML: could not determine a constructor for the "
        "tag 'tag:yaml.org,2002:python/object:os.system'",
        id="python-tag",
    ),
    pytest.param(
        "? [a, b]\n: 1\n",
        "bad.yaml: line 1, column 3: invalid YAML: while constructing a mapping, found an "
        "unhashable key",
        id="unhashable-key",
    ),
]


@pytest.mark.parametrize(("text", "expected"), YAML_ERRORS)
def test_bad_yaml_names_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    """`expected` is the start of the message: libyaml and PyYAML word the rest differently."""
    path = write(tmp_path, "bad.yaml", text)
    result = load_config([path])
    assert result.config is None
    (error,) = result.errors
    assert str(error).replace(str(tmp_path) + "/", "").startswith(expected)


def test_documents_before_a_yaml_error_are_still_checked(tmp_path: Path) -> None:
    text = ONE_TOR.replace("64500", "0").replace("metadata: {name: adv}", "metadata: {name: [")
    path = write(tmp_path, "half.yaml", text)
    result = load_config([path])
    got = [str(e).replace(str(tmp_path) + "/", "") for e in result.errors]
    assert (
        got[0] == "half.yaml:doc 2: BGPPeer tor-a: spec.peerASN: must not be 0 (missing peer ASN)"
    )
    assert got[1].startswith("half.yaml: line 14, column 1: invalid YAML: while parsing a flow")
    assert len(got) == 2


def test_unreadable_and_missing_files_are_errors_with_their_place(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    latin1 = write(tmp_path, "latin1.yaml", b"kind: \xe9\n")
    result = load_config([missing, latin1])
    assert [str(e) for e in result.errors] == [
        f"{missing}: cannot read: No such file or directory",
        f"{latin1}: cannot read: 'utf-8' codec can't decode byte 0xe9 in position 6: "
        "invalid continuation byte",
    ]


def test_sexagesimal_looking_communities_stay_text_as_in_kubernetes() -> None:
    # PyYAML alone reads 65000:50 as the base-60 integer 3900050.
    text = ONE_TOR + "spec: {communities: [65000:50, 1:30], localPref: 0x10}\n"
    result = parse_text(text, "c.yaml")
    assert result.config is not None, [str(e) for e in result.errors]
    adv = result.config.advertisements[0]
    assert adv.communities == ("1:30", "65000:50")
    assert adv.local_pref == 16


def test_merge_keys_may_be_overridden() -> None:
    text = ONE_TOR.replace(
        "spec: {myASN: 64512, peerASN: 64500, peerAddress: 172.31.250.1}",
        "spec:\n  <<: &peer {myASN: 64512, peerASN: 64500, peerAddress: 172.31.250.9}\n"
        "  peerAddress: 172.31.250.1\n",
    )
    result = parse_text(text, "m.yaml")
    assert result.config is not None, [str(e) for e in result.errors]
    assert str(result.config.peers[0].peer_address) == "172.31.250.1"


def test_documents_are_labelled_by_number_and_list_items_by_index(tmp_path: Path) -> None:
    text = ONE_TOR.replace("myASN: 64512", "myASN: 0") + (
        "---\napiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: metallb.io/v1beta1, kind: IPAddressPool, metadata: {name: b}, "
        "spec: {addresses: [bad]}}\n"
    )
    single = write(tmp_path, "single.yaml", "apiVersion: v1\nkind: Nope\nmetadata: {name: x}\n")
    multi = write(tmp_path, "multi.yaml", text)
    result = load_config([single, multi])
    assert [str(e).replace(str(tmp_path) + "/", "") for e in result.errors] == [
        "single.yaml: Nope x: kind: unknown kind Nope (kube-bgpd reads BFDProfile, "
        "BGPAdvertisement, BGPPeer, Community, IPAddressPool, SpeakerConfig, and v1 List)",
        "multi.yaml:doc 2: BGPPeer tor-a: spec.myASN: must not be 0 (missing local ASN)",
        "multi.yaml:doc 4:items[0]: IPAddressPool b: spec.addresses[0]: invalid CIDR 'bad'",
    ]


def test_several_files_make_one_config(tmp_path: Path) -> None:
    pools, rest = ONE_TOR.split("---\n", 1)
    a = write(tmp_path, "pools.yaml", pools)
    b = write(tmp_path, "bgp.yaml", rest)
    config, warnings = load_config_or_raise([a, b])
    assert (len(config.pools), len(config.peers), len(config.advertisements)) == (1, 1, 1)
    assert warnings == ()


def test_load_config_or_raise_lists_every_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "two.yaml",
        ONE_TOR.replace("64500", "4294967296").replace("10.99.100.0/24", "10.99.100.0/99"),
    )
    with pytest.raises(ConfigError) as info:
        load_config_or_raise([path])
    assert str(info.value) == "\n".join(
        [
            f"{path}:doc 1: IPAddressPool pool-a: spec.addresses[0]: invalid CIDR '10.99.100.0/99'",
            f"{path}:doc 2: BGPPeer tor-a: spec.peerASN: 4294967296 is out of range (1-4294967295)",
        ]
    )
    assert len(info.value.errors) == 2


def test_empty_documents_are_skipped() -> None:
    result = parse_text("---\n---\n" + ONE_TOR + "---\n", "e.yaml")
    assert result.config is not None
    assert len(result.config.pools) == 1


# --------------------------------------------------------------------------- examples

EXAMPLE_SUMMARIES = [
    pytest.param("one-tor.yaml", (1, 1, 1, 0), id="one-tor"),
    pytest.param("two-tors-dual-stack.yaml", (2, 4, 2, 1), id="two-tors-dual-stack"),
    pytest.param("metallb-user.yaml", (2, 2, 2, 0), id="metallb-user"),
]


@pytest.mark.parametrize(("name", "counts"), EXAMPLE_SUMMARIES)
def test_examples_load_without_errors_or_warnings(name: str, counts: tuple[int, ...]) -> None:
    result = load_config([EXAMPLES / name])
    assert result.errors == ()
    assert result.warnings == ()
    c = result.config
    assert c is not None
    assert (len(c.pools), len(c.peers), len(c.advertisements), len(c.communities)) == counts


def test_dual_stack_example_sends_each_family_to_its_own_peers() -> None:
    config, _ = load_config_or_raise([EXAMPLES / "two-tors-dual-stack.yaml"])
    assert sorted((p.name, p.family) for p in config.peers) == [
        ("tor-a-v4", 4),
        ("tor-a-v6", 6),
        ("tor-b-v4", 4),
        ("tor-b-v6", 6),
    ]
    public, internal = config.advertisements
    assert (public.communities, public.large_communities) == (("64512:100",), ("64512:100:1",))
    assert (internal.communities, internal.local_pref) == (("65535:65281",), 200)
    assert config.speaker.listen
    assert config.speaker.debounce == 0.2


def test_metallb_user_example_keeps_metallb_semantics() -> None:
    config, _ = load_config_or_raise([EXAMPLES / "metallb-user.yaml"])
    router1 = config.peer("router-1")
    assert router1 is not None
    assert (router1.hold_time, router1.keepalive_time) == (90, 30)
    production = config.pool("production")
    assert production is not None
    assert production.avoid_buggy_ips
    assert config.speaker.metrics_address == "127.0.0.1:7473"


# --------------------------------------------------------------------------- schema


@functools.cache
def schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def example_documents() -> list[Any]:
    return [
        pytest.param(doc, id=f"{path.stem}-{i}")
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()), start=1)
    ]


@pytest.mark.parametrize("doc", example_documents())
def test_every_example_document_matches_the_schema(doc: object) -> None:
    errors = [e.message for e in schema_validator().iter_errors(doc)]
    assert errors == []


SCHEMA_REJECTS = [
    pytest.param({"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement"}, id="kind"),
    pytest.param(
        {
            "apiVersion": "metallb.io/v1beta2",
            "kind": "BGPPeer",
            "metadata": {"name": "tor-a"},
            "spec": {"myASN": 64512, "peerASN": 4294967296, "peerAddress": "172.31.250.1"},
        },
        id="asn-range",
    ),
    pytest.param(
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": "a"},
            "spec": {"addresses": ["10.0.0.0/8"], "color": "blue"},
        },
        id="unknown-field",
    ),
    pytest.param(
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": "Bad_Name"},
            "spec": {"addresses": ["10.0.0.0/8"]},
        },
        id="name",
    ),
]


@pytest.mark.parametrize("doc", SCHEMA_REJECTS)
def test_schema_rejects(doc: object) -> None:
    assert not schema_validator().is_valid(doc)


def test_schema_and_loader_accept_the_same_spec_fields() -> None:
    schema = json.loads(SCHEMA.read_text())
    in_schema: dict[tuple[str, str], set[str]] = {}
    for definition in schema["$defs"].values():
        props = definition.get("properties", {})
        if "spec" in props and "const" in props.get("kind", {}):
            key = (props["apiVersion"]["const"], props["kind"]["const"])
            in_schema[key] = set(props["spec"]["properties"])
    assert in_schema == {key: set(fields) for key, fields in SPEC_FIELDS.items()}


def test_committed_schema_is_the_generated_one() -> None:
    """config/schema.json is generated from the field table; regenerate it with
    `python -m bgpd.config.schema > config/schema.json`."""
    assert SCHEMA.read_text() == config_schema.render()


def test_speaker_config_defaults_in_the_table_are_the_model_defaults() -> None:
    d = SpeakerConfig()
    defaults = {
        "loadBalancerClass": d.load_balancer_class,
        "ignoreExcludeLB": d.ignore_exclude_lb,
        "exabgpBinary": d.exabgp_binary,
        "workDir": str(d.work_dir),
        "metricsAddress": d.metrics_address,
        "debounce": d.debounce,
        "logFormat": d.log_format.value,
        "drainWindow": f"{d.drain_window:g}s",
        "onSigterm": d.on_sigterm.value,
        "listen": d.listen,
    }
    assert {k: field(SPEAKER.spec, k).default for k in defaults} == defaults
