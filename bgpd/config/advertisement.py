"""BGPAdvertisement: which pools go to which peers from which nodes, with what
aggregation and attributes (community aliases are resolved in the cross-checks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bgpd.attributes import MAX_U32
from bgpd.config.fields import METALLB_V1BETA1, Api, Column, Field, KindTable, bounds, field, names
from bgpd.config.issues import Doc
from bgpd.config.parsed import AdvertisementDraft
from bgpd.config.values import read_fields, read_int, read_selectors, read_text_list
from bgpd.model import (
    BGPAdvertisement,
    PeerName,
    PoolName,
)

ADVERTISEMENT: Final = KindTable(
    kind="BGPAdvertisement",
    api_version=METALLB_V1BETA1,
    definition="BGPAdvertisement",
    description="MetalLB BGPAdvertisement.",
    spec=(
        Field("ipAddressPools", ref="uniqueTexts"),
        Field("ipAddressPoolSelectors", ref="labelSelectors"),
        # MetalLB's CRD: minimum 1; its loader: at most 32 (128).
        Field(
            "aggregationLength",
            type="integer",
            minimum=1,
            maximum=32,
            default=32,
            api=Api(format="int32", minimum=1, default=32),
        ),
        Field(
            "aggregationLengthV6",
            type="integer",
            minimum=1,
            maximum=128,
            default=128,
            api=Api(format="int32", default=128),
        ),
        Field(
            "communities",
            ref="uniqueTexts",
            description="a:b, large:a:b:c, a well-known name (no-export, ...) or the name of "
            "a Community alias.",
        ),
        Field(
            "localPref",
            ref="u32",
            description="0 means unset, as in MetalLB.",
            api=Api(format="int32"),
        ),
        Field("peers", ref="uniqueTexts"),
        Field("nodeSelectors", ref="labelSelectors"),
        Field(
            "linkBandwidthPerEndpoint",
            type="integer",
            minimum=1,
            maximum=MAX_U32,
            description="kube-bgpd: weighted ECMP for externalTrafficPolicy Local. Bytes per "
            "second each serving endpoint on the node adds to the route's link-bandwidth "
            "extended community (125000 = 1 Mbit/s per endpoint); unset: no community.",
            api=Api(minimum=1, maximum=MAX_U32),
        ),
        Field(
            "maxNodes",
            type="integer",
            minimum=1,
            maximum=MAX_U32,
            description="Announce each prefix from at most this many of the nodes that "
            "could, chosen by rendezvous hashing of (prefix, node); unset: from all.",
            api=Api(minimum=1, maximum=MAX_U32),
        ),
        Field(
            "serviceSelectors",
            ref="labelSelectors",
            description="Only Services whose labels match any of these selectors are "
            "announced through this advertisement; none: every Service.",
        ),
    ),
    spec_api=Api(
        rules=(
            (
                "!has(self.serviceSelectors) || self.serviceSelectors.size() == 0 || "
                "((!has(self.aggregationLength) || self.aggregationLength == 32) && "
                "(!has(self.aggregationLengthV6) || self.aggregationLengthV6 == 128))",
                "serviceSelectors and aggregationLength are mutually exclusive, can only be "
                "used together with default aggregationLength (32) and aggregationLengthV6 "
                "(128)",
            ),
        )
    ),
    columns=(
        Column("IPAddressPools", ".spec.ipAddressPools", "string"),
        Column("IPAddressPool Selectors", ".spec.ipAddressPoolSelectors", "string"),
        Column("Peers", ".spec.peers", "string"),
        Column("Node Selectors", ".spec.nodeSelectors", "string", priority=10),
    ),
)


def _optional_int(doc: Doc, f: Mapping[str, Any], key: str) -> int | None:
    """An optional integer field of the spec, in the range its field table row states."""
    if f.get(key) is None:
        return None
    return read_int(doc, f"spec.{key}", f[key], *bounds(field(ADVERTISEMENT.spec, key)))


def parse_advertisement(doc: Doc, spec: object, name: str) -> AdvertisementDraft | None:
    # An advertisement with no spec is valid in MetalLB: all pools, all peers.
    f = read_fields(doc, "spec", {} if spec is None else spec, names(ADVERTISEMENT.spec))
    if f is None:
        return None
    before = doc.errors
    pools = _opt_str_list(doc, "spec.ipAddressPools", f.get("ipAddressPools"))
    pool_sel = read_selectors(doc, "spec.ipAddressPoolSelectors", f.get("ipAddressPoolSelectors"))
    agg4, agg6 = (_aggregation(doc, f, key) for key in ("aggregationLength", "aggregationLengthV6"))
    communities = _opt_str_list(doc, "spec.communities", f.get("communities"))
    local_pref: int | None = None
    if f.get("localPref") is not None:
        # MetalLB's localPref is a plain uint32 where 0 means "not set" (omitempty).
        local_pref = read_int(doc, "spec.localPref", f["localPref"], 0, MAX_U32) or None
    peers = _opt_str_list(doc, "spec.peers", f.get("peers"))
    node_sel = read_selectors(doc, "spec.nodeSelectors", f.get("nodeSelectors"))
    per_endpoint = _optional_int(doc, f, "linkBandwidthPerEndpoint")
    max_nodes = _optional_int(doc, f, "maxNodes")
    svc_sel = read_selectors(doc, "spec.serviceSelectors", f.get("serviceSelectors"))
    if doc.errors != before:
        return None
    adv = BGPAdvertisement(
        name=name,
        ip_address_pools=tuple(PoolName(p) for p in pools or ()),
        ip_address_pool_selectors=pool_sel or (),
        aggregation_length=agg4,
        aggregation_length_v6=agg6,
        local_pref=local_pref,
        peers=tuple(PeerName(p) for p in peers or ()),
        node_selectors=node_sel or (),
        link_bandwidth_per_endpoint=per_endpoint,
        max_nodes=max_nodes,
        service_selectors=svc_sel or (),
    )
    return AdvertisementDraft(adv, tuple(communities or ()))


def _aggregation(doc: Doc, f: Mapping[str, object], key: str) -> int:
    """aggregationLength or aggregationLengthV6, with the table's range and default."""
    spec = field(ADVERTISEMENT.spec, key)
    default: int = spec.default
    if f.get(key) is None:
        return default
    return read_int(doc, f"spec.{key}", f[key], *bounds(spec)) or default


def _opt_str_list(doc: Doc, path: str, value: object) -> list[str] | None:
    return [] if value is None else read_text_list(doc, path, value)
