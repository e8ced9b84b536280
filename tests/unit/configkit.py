"""Builders for config documents in the unit tests: a valid object by default, with the
spec fields a case changes (DROP removes a field). The document envelope is the kit's
(:func:`kbgpd_lab.kit.manifests.config_object`); this module adds the defaults and DROP."""

from __future__ import annotations

from typing import Any

from bgpd.config import LoadResult, parse_documents
from kbgpd_lab.kit.manifests import (
    KUBE_BGPD_V1ALPHA1,
    METALLB_V1BETA1,
    METALLB_V1BETA2,
    config_object,
)

V1B1 = METALLB_V1BETA1
V1B2 = METALLB_V1BETA2
OURS = KUBE_BGPD_V1ALPHA1
DROP: Any = object()


def _obj(
    api: str, kind: str, name: str, base: dict[str, Any], spec: dict[str, Any]
) -> dict[str, Any]:
    merged = {**base, **spec}
    return config_object(api, kind, name, {k: v for k, v in merged.items() if v is not DROP})


def pool(name: str = "pool-a", **spec: Any) -> dict[str, Any]:
    return _obj(V1B1, "IPAddressPool", name, {"addresses": ["10.99.100.0/24"]}, spec)


def peer(name: str = "tor-a", **spec: Any) -> dict[str, Any]:
    base = {"myASN": 64512, "peerASN": 64500, "peerAddress": "172.31.250.1"}
    return _obj(V1B2, "BGPPeer", name, base, spec)


def peer6(name: str = "tor-a-v6", **spec: Any) -> dict[str, Any]:
    return peer(name, peerAddress="fd00:99::1", **spec)


def adv(name: str = "adv", **spec: Any) -> dict[str, Any]:
    return _obj(V1B1, "BGPAdvertisement", name, {}, spec)


def community(name: str = "communities", **aliases: str) -> dict[str, Any]:
    items = [{"name": k.replace("_", "-"), "value": v} for k, v in aliases.items()]
    return _obj(V1B1, "Community", name, {"communities": items}, {})


def bfd(name: str = "bfd", **spec: Any) -> dict[str, Any]:
    return _obj(V1B1, "BFDProfile", name, {}, spec)


def speaker(name: str = "speaker", **spec: Any) -> dict[str, Any]:
    return _obj(OURS, "SpeakerConfig", name, {}, spec)


def parse(*docs: object) -> LoadResult:
    return parse_documents([(f"t.yaml:doc {i}", d) for i, d in enumerate(docs, start=1)])


def messages(issues: tuple[Any, ...]) -> list[str]:
    """Issues without the source (the document number), which the cases need not repeat."""
    return [f"{i.where}: {i.message}" for i in issues]
