"""The size of the BGP UPDATE that carries one route, and the limits that keep it
inside one message.

A BGP message is at most 4,096 bytes (RFC 4271 4.1; we do not negotiate RFC 8654
extended messages, and many routers do not either). An UPDATE whose path attributes do
not fit cannot be sent: the router answers with a NOTIFICATION and resets the session,
so one Service asking for too many communities would cut every route of every node. The
speaker therefore counts, before anything reaches ExaBGP, the bytes of the UPDATE that
carries one prefix with a route's attributes, and refuses what does not fit.

The count is a worst case over the sessions a route may go to, so it never depends on
the peer: every optional attribute we can send is counted as present (MED, LOCAL_PREF,
an AS_PATH with our ASN and an AS4_PATH beside it for a peer without 4-octet ASNs), IPv6
carries MP_REACH_NLRI with a global and a link-local next hop, and RFC 8326
GRACEFUL_SHUTDOWN (the driver adds it while draining) is counted as one more community.

Pure functions on the model's types; no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Collection

from bgpd.model import RouteAttributes

#: RFC 4271 4.1: the largest BGP message without RFC 8654 extended messages.
MAX_MESSAGE = 4096

#: Marker (16), length (2), type (1); withdrawn routes length (2); path attributes
#: length (2) (RFC 4271 4.3).
_UPDATE_HEADER = 19 + 2 + 2
#: One IPv4 host route in the NLRI field: length octet and 4 address octets.
_NLRI_V4 = 1 + 4
#: MP_REACH_NLRI value for one IPv6 host route (RFC 4760 3): AFI 2, SAFI 1, next hop
#: length 1, global and link-local next hops 32, reserved 1, one /128 (1 + 16).
_MP_REACH_V6 = 2 + 1 + 1 + 32 + 1 + 1 + 16
#: ORIGIN value.
_ORIGIN = 1
#: AS_PATH with one segment (type, count) of our ASN as 4 octets; the same again as
#: AS4_PATH when the peer speaks 2-octet ASNs only (RFC 6793 4.2.2).
_AS_PATH = 2 + 4
#: NEXT_HOP (IPv4), MULTI_EXIT_DISC, LOCAL_PREF values.
_NEXT_HOP = _MED = _LOCAL_PREF = 4

#: Bytes per community on the wire: standard (RFC 1997), large (RFC 8092), extended
#: (RFC 4360; the link bandwidth is one).
STANDARD_BYTES = 4
LARGE_BYTES = 12
EXTENDED_BYTES = 8

#: What the communities of one Service's annotation may take (kube-bgpd.io/communities):
#: 512 standard or 170 large communities. With a BGPAdvertisement's own limit
#: (ADVERTISEMENT_COMMUNITY_BYTES) and every other attribute this always fits in one
#: message (a test checks it), so a Service alone can never make an UPDATE too large.
SERVICE_COMMUNITY_BYTES = 2048
#: What the communities of one BGPAdvertisement (spec.communities) may take.
ADVERTISEMENT_COMMUNITY_BYTES = 1024


def _attribute(value_bytes: int) -> int:
    """One path attribute: flags, type, and a 1-octet length, or 2 octets with the
    Extended Length flag once the value exceeds 255 bytes (RFC 4271 4.3)."""
    return (3 if value_bytes <= 255 else 4) + value_bytes


def _list_attribute(count: int, size: int) -> int:
    return _attribute(count * size) if count else 0


def community_bytes(communities: Collection[str], large: Collection[str]) -> int:
    """The value bytes of these standard and large communities."""
    return len(communities) * STANDARD_BYTES + len(large) * LARGE_BYTES


def path_attributes_size(attributes: RouteAttributes, version: int) -> int:
    """The bytes of the path attributes of an UPDATE announcing one IPv`version` host
    route with `attributes`, in the worst case over sessions (see the module text)."""
    standard = set(attributes.communities)
    standard.add("65535:0")  # GRACEFUL_SHUTDOWN while draining: counted always.
    size = (
        _attribute(_ORIGIN)
        + 2 * _attribute(_AS_PATH)
        + _attribute(_MED)
        + _attribute(_LOCAL_PREF)
        + _list_attribute(len(standard), STANDARD_BYTES)
        + _list_attribute(len(attributes.large_communities), LARGE_BYTES)
        + _list_attribute(1 if attributes.link_bandwidth is not None else 0, EXTENDED_BYTES)
    )
    if version == 4:
        return size + _attribute(_NEXT_HOP)
    return size + _attribute(_MP_REACH_V6)


def update_size(attributes: RouteAttributes, version: int) -> int:
    """The bytes of the whole UPDATE message announcing one IPv`version` host route with
    `attributes` (a /32 in the NLRI field, or a /128 inside MP_REACH_NLRI)."""
    nlri = _NLRI_V4 if version == 4 else 0
    return _UPDATE_HEADER + path_attributes_size(attributes, version) + nlri


@functools.lru_cache(maxsize=4096)
def fits(attributes: RouteAttributes, version: int) -> bool:
    """Whether a route with `attributes` goes out in one BGP message.

    Memoised: the Decider asks once per route it builds (10,000 times in a first decision
    at 10,000 Services), and nearly every route carries one of a few attribute values.
    Bounded like bgpd.decision.shared_attributes; the answer depends on nothing else."""
    return update_size(attributes, version) <= MAX_MESSAGE


def too_many_communities(communities: Collection[str], large: Collection[str], limit: int) -> str:
    """'' when these communities take at most `limit` bytes, else why not, in words."""
    used = community_bytes(communities, large)
    if used <= limit:
        return ""
    return (
        f"{len(communities)} communities and {len(large)} large communities take {used} "
        f"bytes, more than {limit} ({limit // STANDARD_BYTES} communities or "
        f"{limit // LARGE_BYTES} large ones), so that every route fits in one "
        f"{MAX_MESSAGE:,}-byte BGP UPDATE"
    )
