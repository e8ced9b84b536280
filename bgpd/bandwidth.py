"""Weighted ECMP for externalTrafficPolicy Local: the link-bandwidth extended community.

With Local, kube-proxy sends a node's traffic only to that node's pods, but a router
splits evenly over its next hops, so a node with one pod gets as much traffic as a node
with ten (MetalLB issue #1). A BGPAdvertisement with `linkBandwidthPerEndpoint: B`
announces each Local route with the link-bandwidth extended community
(draft-ietf-idr-link-bandwidth) set to N x B bytes per second, N being the node's
serving endpoints of the Service, so a router that honours it (FRR: weighted ECMP from
link bandwidth, docs/routers.md) weighs the next hops N1 : N2 : ...

The rules, pure and in one place (decide() calls them, plan() writes the text):

* N counts the endpoints on this node that can serve (Endpoint.can_serve, the rule that
  decides whether a Local route exists at all), per address family of the Service's
  EndpointSlices, the largest family count: a dual-stack pod is listed once in the IPv4
  slice and once in the IPv6 one and counts once.
* Only Local Services carry it: with Cluster every node forwards to every pod, so the
  even split is already right.
* A route that carries several Services (aggregation) carries the sum of their values,
  the node's share of the capacity behind that prefix, but only when every Service on
  it asks for a bandwidth; a Cluster Service, or one whose advertisement does not ask,
  on the same route leaves the route without the community, so the router splits it
  evenly rather than by a partial count.
* The value is clamped to MAX_BYTES_PER_SECOND: routers read it as an IEEE float and FRR
  keeps it as a 32-bit integer.
* The community's AS is the speaker's AS, AS_TRANS (RFC 6793) when that needs 4 octets,
  since the field has 2.

ExaBGP 5.0 writes `bandwidth:<asn>:<bytes/s>` inside `extended-community [ ... ]` as type
0x40 subtype 0x04, the draft's non-transitive form (exabgp/configuration/static/parser.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from bgpd.model import EndpointSlice, LinkBandwidth

#: RFC 6793: the 2-octet stand-in for a 4-octet AS number.
AS_TRANS = 23456
MAX_ASN16 = 0xFFFF
#: The largest value sent: FRR converts the float to a 32-bit unsigned integer.
MAX_BYTES_PER_SECOND = 0xFFFFFFFF
#: The documented scale's unit: 1 Mbit/s, in bytes per second.
MBIT_PER_SECOND = 125_000


def serving_endpoints(slices: Iterable[EndpointSlice], node: str) -> int:
    """Endpoints on `node` that can serve, the largest count of one address family."""
    per_family: dict[str, int] = {}
    for s in slices:
        # The node first: a plain comparison, where can_serve is a property (the
        # decision asks this for every Local Service).
        n = 0
        for ep in s.endpoints:
            if ep.node_name == node and ep.can_serve:
                n += 1
        if n:
            per_family[s.address_type] = per_family.get(s.address_type, 0) + n
    return max(per_family.values(), default=0)


def link_bandwidth(asn: int, bytes_per_second: int) -> LinkBandwidth:
    """The community for this speaker's AS and value (the AS and the value clamped)."""
    return LinkBandwidth(
        asn=asn if asn <= MAX_ASN16 else AS_TRANS,
        bytes_per_second=min(bytes_per_second, MAX_BYTES_PER_SECOND),
    )


def bytes_per_second(value: LinkBandwidth | None) -> int | None:
    """The value /status and MQTT report as `link_bandwidth` (None: no community)."""
    return None if value is None else value.bytes_per_second


def exabgp_text(value: LinkBandwidth) -> str:
    """ExaBGP's words for the community, inside `extended-community [ ... ]`."""
    return f"bandwidth:{value.asn}:{value.bytes_per_second}"
