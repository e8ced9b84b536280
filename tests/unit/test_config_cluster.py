"""bgpd.config.cluster: cluster objects through the file's parser, and the per-object
last-valid rule (an invalid object keeps its last valid version in force, a new invalid
object stays out, a change that breaks an unchanged object is put back whole)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.config.cluster import ObjectKey, RawObject, object_key, parse_objects, resolve

NS = "metallb-system"


def obj(kind: str, name: str, spec: dict[str, Any], api: str = "metallb.io/v1beta1") -> RawObject:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": f"u-{name}", "resourceVersion": "7"},
        "spec": spec,
        "status": {"anything": 1},
    }


def pool(name: str, cidr: str) -> RawObject:
    return obj("IPAddressPool", name, {"addresses": [cidr]})


def peer(name: str, address: str, **spec: Any) -> RawObject:
    return obj(
        "BGPPeer",
        name,
        {"myASN": 64512, "peerASN": 64500, "peerAddress": address, **spec},
        "metallb.io/v1beta2",
    )


def adv(name: str, pools: list[str], communities: list[str] | None = None) -> RawObject:
    spec: dict[str, Any] = {"ipAddressPools": pools}
    if communities is not None:
        spec["communities"] = communities
    return obj("BGPAdvertisement", name, spec)


def objects(*raws: RawObject) -> dict[ObjectKey, RawObject]:
    out = {}
    for raw in raws:
        key = object_key(raw)
        assert key is not None
        out[key] = raw
    return out


BASE = objects(pool("web", "10.99.0.0/24"), peer("tor", "172.31.0.1"), adv("all", ["web"]))


def test_cluster_objects_parse_like_a_file_and_errors_name_the_object() -> None:
    result = parse_objects(objects(peer("tor", "172.31.0.1", holdTime="banana")))
    assert result.config is None
    (error,) = result.errors
    assert str(error).startswith("BGPPeer metallb-system/tor: spec.holdTime: ")


def test_valid_objects_are_in_force() -> None:
    r = resolve(BASE, {})
    assert r.config is not None
    assert not r.stale
    assert [p.name for p in r.config.pools] == ["web"]
    assert r.in_force == BASE


def test_an_invalid_edit_keeps_the_objects_last_valid_version() -> None:
    first = resolve(BASE, {})
    edited = {**BASE, **objects(adv("all", ["web"], ["not-a-community"]))}
    r = resolve(edited, first.in_force)
    assert r.config == first.config
    (key,) = r.rejected
    assert str(key) == "BGPAdvertisement metallb-system/all"
    assert "spec.communities[0]" in str(r.rejected[key][0])
    assert r.stale


def test_an_invalid_object_does_not_block_a_valid_new_one() -> None:
    first = resolve(BASE, {})
    now = {
        **BASE,
        **objects(adv("all", ["web"], ["nope"]), pool("db", "10.98.0.0/24")),
    }
    r = resolve(now, first.in_force)
    assert r.config is not None
    assert sorted(p.name for p in r.config.pools) == ["db", "web"]
    assert [str(k) for k in r.rejected] == ["BGPAdvertisement metallb-system/all"]
    assert r.config.advertisements == first.config.advertisements  # type: ignore[union-attr]


def test_a_new_invalid_object_stays_out() -> None:
    now = {**BASE, **objects(peer("bad", "172.31.0.2", holdTime="x"))}
    r = resolve(now, {})
    assert r.config is not None
    assert [p.name for p in r.config.peers] == ["tor"]
    assert [str(k) for k in r.rejected] == ["BGPPeer metallb-system/bad"]


def test_deleting_what_an_unchanged_object_names_is_put_back() -> None:
    first = resolve(BASE, {})
    without_pool = {k: v for k, v in BASE.items() if k.kind != "IPAddressPool"}
    r = resolve(without_pool, first.in_force)
    assert r.config == first.config
    rejected = {str(k): v for k, v in r.rejected.items()}
    assert "no IPAddressPool named 'web'" in str(rejected["BGPAdvertisement metallb-system/all"][0])
    assert "IPAddressPool metallb-system/web" in rejected


@pytest.mark.parametrize(
    "now",
    [
        pytest.param(dict(BASE), id="unchanged"),
        pytest.param(
            {
                k: {
                    **v,
                    "status": {"other": 2},
                    "metadata": {**v["metadata"], "resourceVersion": "9"},
                }
                for k, v in BASE.items()
            },
            id="status-and-metadata-only",
        ),
    ],
)
def test_status_or_metadata_only_changes_give_an_equal_config(
    now: dict[ObjectKey, RawObject],
) -> None:
    assert resolve(now, {}).config == resolve(BASE, {}).config


def test_nothing_valid_at_first_start_is_no_config_when_errors_name_no_object() -> None:
    two_speakers = objects(
        obj("SpeakerConfig", "a", {}, "kube-bgpd.io/v1alpha1"),
        obj("SpeakerConfig", "b", {}, "kube-bgpd.io/v1alpha1"),
    )
    r = resolve(two_speakers, {})
    # The second SpeakerConfig is the one refused; the first is in force.
    assert r.config is not None
    assert [str(k) for k in r.rejected] == ["SpeakerConfig metallb-system/b"]


# --------------------------------------------------------------------------- property

#: Per object, the versions an edit may leave it in: absent (None), two valid ones, and
#: an invalid one (errors on the object itself).
VERSIONS: dict[str, tuple[RawObject | None, ...]] = {
    "p0": (None, pool("p0", "10.1.0.0/24"), pool("p0", "10.1.1.0/24"), pool("p0", "nope")),
    "p1": (None, pool("p1", "10.2.0.0/24"), pool("p1", "10.1.0.0/24"), pool("p1", "10.2.0.0/99")),
    "t0": (None, peer("t0", "172.31.0.1"), peer("t0", "172.31.0.9"), peer("t0", "x")),
    "t1": (
        None,
        peer("t1", "172.31.0.2"),
        peer("t1", "172.31.0.2", holdTime="30s"),
        peer("t1", "172.31.0.2", holdTime="x"),
    ),
    "a0": (None, adv("a0", ["p0"]), adv("a0", ["p1"], ["65000:1"]), adv("a0", ["p0"], ["bad"])),
    "a1": (None, adv("a1", ["p1"]), adv("a1", ["p0", "p1"]), adv("a1", ["p9"])),
}


def pick(choice: dict[str, int]) -> dict[ObjectKey, RawObject]:
    return objects(*(v for name, i in choice.items() if (v := VERSIONS[name][i]) is not None))


choices = st.fixed_dictionaries({name: st.integers(0, 3) for name in VERSIONS})


@settings(max_examples=300, deadline=None)
@given(first=choices, then=choices)
def test_resolve_keeps_a_valid_config_and_only_versions_that_exist(
    first: dict[str, int], then: dict[str, int]
) -> None:
    """From a valid last set, any edit gives a Config; each object in force is its
    current or its last valid version; a set that parses whole goes in whole."""
    last = resolve(pick(first), {})
    assert last.config is not None  # invalid new objects stay out; {} always parses
    current = pick(then)
    r = resolve(current, last.in_force)
    assert r.config is not None
    for key, raw in r.in_force.items():
        assert raw is current.get(key) or raw is last.in_force.get(key)
    assert parse_objects(r.in_force).config == r.config
    if parse_objects(current).config is not None:
        assert r.in_force == current
        assert not r.rejected
