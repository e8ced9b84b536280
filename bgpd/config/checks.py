"""Cross-object checks with MetalLB's rules: unknown pools and peers, overlapping pools,
aggregation shorter than a pool, duplicate sessions, conflicting local-pref, and warnings
for surprising but valid configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from bgpd.attributes import parse_community
from bgpd.config.issues import Doc, Issues
from bgpd.config.parsed import AdvertisementDraft, Parsed
from bgpd.model import (
    AddressRange,
    BGPAdvertisement,
    BGPPeer,
    Config,
    IPAddressPool,
    LabelSelector,
    PoolName,
    SelectorOperator,
    SpeakerConfig,
)
from bgpd.update_size import ADVERTISEMENT_COMMUNITY_BYTES, too_many_communities


def _may_overlap(a: tuple[LabelSelector, ...], b: tuple[LabelSelector, ...]) -> bool:
    """Whether two selector lists (OR of ANDs, empty = everything) may select a common node.

    Offline we know no nodes, so this is conservative: two selectors are disjoint only if
    both pin one label key to different values, or one requires a key the other forbids.
    """

    def disjoint(x: LabelSelector, y: LabelSelector) -> bool:
        xl, yl = dict(x.match_labels), dict(y.match_labels)
        if any(k in yl and yl[k] != v for k, v in xl.items()):
            return True
        for s, other in ((x, yl), (y, xl)):
            for r in s.match_expressions:
                if r.operator is SelectorOperator.DOES_NOT_EXIST and r.key in other:
                    return True
                if r.key not in other:
                    continue
                if r.operator is SelectorOperator.IN and other[r.key] not in r.values:
                    return True
                if r.operator is SelectorOperator.NOT_IN and other[r.key] in r.values:
                    return True
        return False

    left = a or (LabelSelector(),)
    right = b or (LabelSelector(),)
    return any(not disjoint(x, y) for x in left for y in right)


def cross_check(out: Parsed, issues: Issues) -> Config:
    pools = [p for p, _ in out.pools]
    pool_docs = {p.name: d for p, d in out.pools}
    pool_names = out.names.get("IPAddressPool", {})
    peer_names = out.names.get("BGPPeer", {})

    _check_overlaps(out)
    _check_duplicate_peers(out)

    # A peer's bfdProfile must name a BFDProfile (its BFD session takes the values).
    bfd_names = out.names.get("BFDProfile", {})
    for profile, doc in out.bfd_references:
        if profile not in bfd_names:
            known = ", ".join(sorted(bfd_names)) or "none"
            doc.error("spec.bfdProfile", f"no BFDProfile named {profile!r} (BFDProfiles: {known})")

    aliases: dict[str, str] = {}
    alias_docs: dict[str, Doc] = {}
    for community, doc in out.communities:
        for alias, value in community.communities.items():
            if alias in aliases:
                # MetalLB: aliases are global across Community objects.
                doc.error(
                    "spec.communities",
                    f"duplicate definition of community {alias!r} "
                    f"(also in Community {alias_docs[alias].name})",
                )
                continue
            aliases[alias] = value
            alias_docs[alias] = doc

    advertisements: list[BGPAdvertisement] = []
    adv_docs: list[Doc] = []
    for draft, doc in out.advertisements:
        adv = _resolve_advertisement(doc, draft, aliases, out.alias_names)
        for i, pool_name in enumerate(adv.ip_address_pools):
            if pool_name not in pool_names:
                doc.error(f"spec.ipAddressPools[{i}]", f"no IPAddressPool named {pool_name!r}")
        for i, peer in enumerate(adv.peers):
            if peer not in peer_names:
                doc.error(f"spec.peers[{i}]", f"no BGPPeer named {peer!r}")
        for pool in pools:
            if adv.selects_pool(pool):
                _check_aggregation(doc, adv, pool)
        if (
            adv.ip_address_pool_selectors
            and not any(adv.selects_pool(p) for p in pools)
            and not adv.ip_address_pools
        ):
            doc.warn("spec.ipAddressPoolSelectors", "selects no IPAddressPool")
        _warn_service_aggregation(doc, adv)
        advertisements.append(adv)
        adv_docs.append(doc)

    _check_local_pref(advertisements, adv_docs, pools)

    speakers = out.speakers
    for _, doc in speakers[1:]:
        doc.error("", f"only one SpeakerConfig is allowed (first: {speakers[0][1].name})")
    speaker = speakers[0][0] if speakers else SpeakerConfig()

    peers = [p for p, _ in out.peers]
    if not issues.errors:
        _warn_reach(advertisements, adv_docs, pools, pool_docs, peers, out.all_peers_parsed)

    return Config(
        pools=tuple(pools),
        peers=tuple(peers),
        advertisements=tuple(advertisements),
        communities=tuple(c for c, _ in out.communities),
        bfd_profiles=tuple(b for b, _ in out.bfd_profiles),
        speaker=speaker,
    )


def _community_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(":"))


def _resolve_advertisement(
    doc: Doc, draft: AdvertisementDraft, aliases: Mapping[str, str], broken: set[str]
) -> BGPAdvertisement:
    """MetalLB's getCommunityValue: an alias defined in a Community object wins; otherwise
    the text must be a community itself (we also accept the well-known names)."""
    standard: set[str] = set()
    large: set[str] = set()
    for i, text in enumerate(draft.community_texts):
        if text in broken and text not in aliases:
            continue  # its Community object already has the error
        value = aliases.get(text, text)
        try:
            kind, canonical = parse_community(value)
        except ValueError as exc:
            if ":" not in text:
                doc.error(
                    f"spec.communities[{i}]",
                    f"{text!r} is neither a Community alias nor a community "
                    "(a:b, large:a:b:c or a well-known name)",
                )
            else:
                doc.error(f"spec.communities[{i}]", str(exc))
            continue
        (large if kind == "large" else standard).add(canonical)
    if problem := too_many_communities(standard, large, ADVERTISEMENT_COMMUNITY_BYTES):
        doc.error("spec.communities", problem)
    adv = draft.advertisement
    # replace(): every other field of the advertisement travels unchanged.
    return replace(
        adv,
        communities=tuple(sorted(standard, key=_community_key)),
        large_communities=tuple(sorted(large, key=_community_key)),
    )


def _warn_service_aggregation(doc: Doc, adv: BGPAdvertisement) -> None:
    """serviceSelectors choose Services, but an aggregate is a range of addresses: the
    one announced for a selected Service also draws the traffic of every other address
    in it, the IPs of Services the advertisement does not select included."""
    if not adv.service_selectors:
        return
    short = [
        f"{name} {length}"
        for name, length, host in (
            ("aggregationLength", adv.aggregation_length, 32),
            ("aggregationLengthV6", adv.aggregation_length_v6, 128),
        )
        if length < host
    ]
    if short:
        doc.warn(
            "spec.serviceSelectors",
            f"with {' and '.join(short)}: the aggregate announced for a selected Service "
            "also covers, and draws the traffic of, the IPs of Services it does not select",
        )


def _check_aggregation(doc: Doc, adv: BGPAdvertisement, pool: IPAddressPool) -> None:
    """MetalLB's validateBGPAdvPerPool: for every address of the pool, the aggregation
    length of its family must not be shorter than the shortest prefix of the CIDRs that
    address covers (a range counts as its summarised CIDRs). An aggregate shorter than the
    pool would announce addresses the pool does not own."""
    for r in pool.addresses:
        nets = r.networks()
        shortest = min(n.prefixlen for n in nets)
        length = adv.aggregation_length if r.version == 4 else adv.aggregation_length_v6
        field_name = "aggregationLength" if r.version == 4 else "aggregationLengthV6"
        if length < shortest:
            doc.error(
                f"spec.{field_name}",
                f"{length} is shorter than /{shortest} of {r.text!r} in IPAddressPool "
                f"{pool.name}: the aggregate would cover addresses outside the pool",
            )


def _check_overlaps(out: Parsed) -> None:
    """MetalLB's poolsFor: no two CIDRs (of any pools, or of one pool) may overlap; an IP
    must belong to exactly one pool."""
    seen: list[tuple[AddressRange, IPAddressPool]] = []
    for pool, doc in out.pools:
        for i, r in enumerate(pool.addresses):
            for other, other_pool in seen:
                if (
                    r.version == other.version
                    and int(r.first) <= int(other.last)
                    and int(other.first) <= int(r.last)
                ):
                    where = (
                        f"IPAddressPool {other_pool.name}"
                        if other_pool.name != pool.name
                        else "this pool"
                    )
                    doc.error(
                        f"spec.addresses[{_index_of(pool, r, i)}]",
                        f"{r.text!r} overlaps {other.text!r} of {where}",
                    )
            seen.append((r, pool))


def _index_of(pool: IPAddressPool, r: AddressRange, fallback: int) -> int:
    return next((i for i, x in enumerate(pool.addresses) if x is r), fallback)


def _check_duplicate_peers(out: Parsed) -> None:
    """Two BGPPeers with the same address and port that may apply on the same node would be
    two ExaBGP neighbors for one session (MetalLB's FRR mode refuses the same)."""
    for i, (a, doc) in enumerate(out.peers):
        for b, _ in out.peers[:i]:
            if (a.peer_address, a.peer_port) == (b.peer_address, b.peer_port) and _may_overlap(
                a.node_selectors, b.node_selectors
            ):
                doc.error(
                    "spec.peerAddress",
                    f"BGPPeer {b.name} already peers with {a.peer_address} port {a.peer_port} "
                    "on the same nodes",
                )


def _families(pool: IPAddressPool) -> set[int]:
    return {r.version for r in pool.addresses}


def _selects_every_node(selectors: tuple[LabelSelector, ...]) -> bool:
    """No nodeSelectors, or one that is empty, selects every node whatever its labels."""
    return not selectors or any(s == LabelSelector() for s in selectors)


def _show_pref(local_pref: int | None) -> str:
    return "unset" if local_pref is None else str(local_pref)


def _check_local_pref(
    advs: Sequence[BGPAdvertisement],
    docs: Sequence[Doc],
    pools: Sequence[IPAddressPool],
) -> None:
    """MetalLB's BGPAdvertisementsHaveCompatibleLocalPref: two advertisements that can send
    the same prefix to the same peer from the same node must not disagree on local-pref.
    "Same prefix" means a shared pool and, per family present, equal aggregation length.

    Refused only when the conflict holds for every set of nodes: both advertisements select
    every node. When a nodeSelector decides (e.g. one that matches no node today), the
    configuration is valid, with a warning; on a node both select, decide() sends the higher
    local-pref (an unset one counts as none), the rule of _Merged.add."""
    for i, a in enumerate(advs):
        for b in advs[:i]:
            if a.local_pref == b.local_pref:
                continue
            shared = [p for p in pools if a.selects_pool(p) and b.selects_pool(p)]
            if not shared:
                continue
            if a.peers and b.peers and not set(a.peers) & set(b.peers):
                continue
            if not _may_overlap(a.node_selectors, b.node_selectors):
                continue
            for pool in shared:
                fam = _families(pool)
                same4 = 4 in fam and a.aggregation_length == b.aggregation_length
                same6 = 6 in fam and a.aggregation_length_v6 == b.aggregation_length_v6
                if not (same4 or same6):
                    continue
                conflict = (
                    f"{_show_pref(a.local_pref)} conflicts with localPref "
                    f"{_show_pref(b.local_pref)} of BGPAdvertisement {b.name} for pool {pool.name}"
                )
                if _selects_every_node(a.node_selectors) and _selects_every_node(b.node_selectors):
                    docs[i].error("spec.localPref", f"{conflict} (same prefixes, peers and nodes)")
                else:
                    # Whether both select one node depends on the nodes' labels, which
                    # validate does not know: decide() resolves it per node (_Merged.add).
                    docs[i].warn(
                        "spec.localPref",
                        f"{conflict} on a node both nodeSelectors match; there the higher "
                        f"localPref is sent",
                    )
                break


def _warn_reach(
    advs: Sequence[BGPAdvertisement],
    docs: Sequence[Doc],
    pools: Sequence[IPAddressPool],
    pool_docs: Mapping[PoolName, Doc],
    peers: Sequence[BGPPeer],
    all_peers_parsed: bool,
) -> None:
    """Warnings that do not make a config wrong but make it surprising."""
    for pool in pools:
        if not any(a.selects_pool(pool) for a in advs):
            pool_docs[pool.name].warn(
                "",
                "no BGPAdvertisement selects this pool: its IPs are allocated but never announced",
            )
    if not all_peers_parsed:
        return
    for adv, doc in zip(advs, docs, strict=True):
        reach = [p for p in peers if not adv.peers or p.name in adv.peers]
        families = {p.family for p in reach}
        for fam in (4, 6):
            fam_pools = [p.name for p in pools if adv.selects_pool(p) and fam in _families(p)]
            if fam_pools and fam not in families:
                doc.warn(
                    "",
                    f"IPv{fam} addresses of pool {', '.join(fam_pools)} reach no IPv{fam} "
                    f"peer (a peer receives only prefixes of its session's family)",
                )
        if adv.local_pref is not None and reach and all(not p.is_ibgp for p in reach):
            doc.warn("spec.localPref", "is only sent to iBGP peers, and every peer here is eBGP")
