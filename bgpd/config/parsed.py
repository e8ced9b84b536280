"""What the documents held before the cross-checks (bgpd.config.checks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bgpd.config.issues import Doc
from bgpd.model import (
    BFDProfile,
    BGPAdvertisement,
    BGPPeer,
    Community,
    IPAddressPool,
    SpeakerConfig,
)


@dataclass(slots=True)
class Parsed:
    """What the documents held, before cross-checks. Names of objects that failed to parse
    are kept too, so a bad pool does not also make every advertisement naming it fail."""

    pools: list[tuple[IPAddressPool, Doc]] = field(default_factory=list)
    peers: list[tuple[BGPPeer, Doc]] = field(default_factory=list)
    advertisements: list[tuple[AdvertisementDraft, Doc]] = field(default_factory=list)
    communities: list[tuple[Community, Doc]] = field(default_factory=list)
    bfd_profiles: list[tuple[BFDProfile, Doc]] = field(default_factory=list)
    speakers: list[tuple[SpeakerConfig, Doc]] = field(default_factory=list)
    names: dict[str, dict[str, Doc]] = field(default_factory=dict)
    #: Peers that named a BFD profile: (profile, doc) for the cross-check.
    bfd_references: list[tuple[str, Doc]] = field(default_factory=list)
    #: Every alias name a Community object defines, also those with a bad value, so an
    #: advertisement using one is not reported a second time.
    alias_names: set[str] = field(default_factory=set)
    all_peers_parsed: bool = True
    #: Name objects "namespace/name" in messages (objects read from a cluster, where the
    #: namespace is part of the identity: `BGPPeer metallb-system/tor: spec.holdTime`).
    qualified_names: bool = False


@dataclass(frozen=True, slots=True)
class AdvertisementDraft:
    """A BGPAdvertisement before its community aliases are resolved."""

    advertisement: BGPAdvertisement
    community_texts: tuple[str, ...]
