"""The pure announce decision: which routes this node sends to which peer, and why every
other LoadBalancer Service (or IP of one) is not announced.

`decide(config, snapshot, node)` is a purely computational function with no side
effects: no I/O, no logging, no clock; every input is a parameter, so the speaker, the
`explain` command and the tests all get the same answer from the same state. It follows
MetalLB's speaker (speaker/main.go handleService and bgp_controller.go ShouldAnnounce),
because that is what users of MetalLB-style configs expect:

1. Only Services of type LoadBalancer are considered; those of another
   loadBalancerClass are reported as `notOurLoadBalancerClass`, other types are ignored.
2. A Service with no status.loadBalancer.ingress IP: `noIPAllocated`.
3. Per-Service attribute annotations that do not parse: `invalidAnnotation` (see below).
4. Node-wide reasons, reported once per Service: the node is not in the snapshot
   (`nodeUnknown`), its NetworkUnavailable condition is True (`nodeNetworkUnavailable`),
   or it carries the label node.kubernetes.io/exclude-from-external-load-balancers
   (`nodeLabeledExcludeBalancers`, unless SpeakerConfig.ignore_exclude_lb; MetalLB
   honours the label since 0.13 with `--ignore-exclude-lb` as the opt-out).
5. Endpoints: externalTrafficPolicy Cluster announces from every eligible node while any
   endpoint of the Service can serve (`noEndpoints` otherwise); Local only while an
   endpoint on this node can serve (`noLocalEndpoints`), because kube-proxy drops
   traffic for a Local Service on a node without a local endpoint. "Can serve" is
   Endpoint.can_serve: ready unset or true, or serving true, so a terminating pod that
   still serves keeps its route (metallb#2074, KEP-1672).
6. Per IP: its pool (`ipNotInAnyPool`), the BGPAdvertisements that select that pool,
   whose serviceSelectors (none: every Service) match the Service's labels and whose
   nodeSelectors match this node (`noMatchingAdvertisement`), the peers those
   advertisements name (all when none) among the peers this node has a session with
   (`noMatchingPeer`; bgpd.peers.peers_for_node: nodeSelectors match and a local
   address exists, the rule the ExaBGP renderer follows too), and of those only peers
   whose session family is the IP's family (`noPeerOfFamily`): one session per family,
   see docs/architecture.md.
7. The fan-out cap (BGPAdvertisement maxNodes, our extension): of the nodes that would
   announce a prefix through that advertisement by rules 4-6, only the maxNodes with the
   highest rendezvous weight do (bgpd.fanout); this node's pairs of that advertisement
   are dropped otherwise, and `notSelectedForFanOut` says its rank when nothing is left.
   Every node must compute the same candidates, so for all of them (this one included)
   the session rule is peers_for_node() without kernel choices: what the cluster can
   see (sourceAddress, InternalIP), never what one node's kernel says.

7. Data plane (SpeakerConfig dataPlaneCheck, off by default): a node whose kube-proxy
   health answer fails (after its drain) announces nothing (`dataPlaneNotReady`, after
   the node-wide reasons above); a Local Service whose healthCheckNodePort fails is
   announced with GRACEFUL_SHUTDOWN for the drain window, then skipped
   (`dataPlaneNotReady`, after its endpoints). The checks are polled by the speaker
   (bgpd.speaker.dataplane) and arrive here as a `DataPlane` value.

Node-wide reasons come before the per-IP checks (MetalLB checks the advertisement
first) because on an excluded or unavailable node they are the one answer that matters.

Aggregation: the announced prefix is the IP's network at the advertisement's
aggregationLength (IPv4) or aggregationLengthV6. When several Services, IPs or
advertisements give the same prefix to the same peer they become one Route carrying
all those Services (sorted), with merged attributes: the union of communities and of
large communities (sorted), the highest local-pref (the most preferred claim wins, as
Cilium documents for overlapping advertisements) and the lowest MED (the most
preferred value in the MED comparison, RFC 4271 9.1.2.2 c). The link-bandwidth community
(weighted ECMP for Local, bgpd.bandwidth): the sum over the route's Services when every
one of them asks for it, else none.

Aggregation and serviceSelectors: a Service reaches a prefix only through the
advertisements that select it, so an aggregate carries each of its Services with the
attributes of that Service's own advertisements, and the merge above applies to those
contributions: an aggregate is announced while any Service in it is, and an
advertisement's communities and localPref reach the aggregate only while a Service it
selects is in it. The aggregate still covers, and attracts traffic for, every address in
it (validate warns about serviceSelectors with an aggregation shorter than a host route).

Per-Service attributes (metallb#934, #1388): the annotations
`kube-bgpd.io/communities` (comma list of `a:b`, `large:a:b:c`, well-known names such
as `no-export`, or aliases defined by Community objects), `kube-bgpd.io/local-pref` and
`kube-bgpd.io/med` (unsigned 32-bit integers). Communities are added to the
advertisement's; local-pref replaces the advertisement's localPref for that Service.
An annotation that does not parse never costs a route that is up: the Service keeps the
attributes of its last annotations that did parse (`last_valid`, which the Decider keeps
from pass to pass), with an `invalidAnnotationKept` notice naming the annotation and what
it accepts. A Service never seen with valid annotations is `invalidAnnotation`:
announcing it without the attributes the owner asked for could steer traffic wrongly (a
missing no-export community leaks the route beyond the AS), so the route stays out and
the reason says what is wrong. A local-pref annotation on a Service routed to eBGP peers
gets an `attributeNotSent` notice (see below).

LOCAL_PREF is dropped for eBGP peers: RFC 4271 5.1.5 says it SHALL NOT be sent to
external peers, and dropping it here keeps the decision equal to what goes on the wire
(explain, status and metrics show the truth).
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from bgpd import fanout
from bgpd.annotation_policy import restrict
from bgpd.attributes import GRACEFUL_SHUTDOWN, excerpt, parse_community, parse_u32
from bgpd.bandwidth import link_bandwidth, serving_endpoints
from bgpd.model import (
    DATA_PLANE_UNCHECKED,
    BGPAdvertisement,
    BGPPeer,
    ClusterSnapshot,
    Config,
    DataPlane,
    Decision,
    EndpointSlice,
    IPAddress,
    IPAddressPool,
    IPNetwork,
    Node,
    NodeName,
    Notice,
    NoticeReason,
    PeerName,
    PeerSkipReason,
    PoolName,
    Route,
    RouteAttributes,
    Service,
    ServiceKey,
    Skip,
    SkipReason,
    TrafficPolicy,
    selectors_match,
)
from bgpd.objects import is_our_load_balancer
from bgpd.peers import NO_KERNEL_CHOICES, NodePeers, peers_for_node
from bgpd.update_size import (
    MAX_MESSAGE,
    SERVICE_COMMUNITY_BYTES,
    community_bytes,
    fits,
    too_many_communities,
)

ANNOTATION_COMMUNITIES = "kube-bgpd.io/communities"
ANNOTATION_LOCAL_PREF = "kube-bgpd.io/local-pref"
ANNOTATION_MED = "kube-bgpd.io/med"

#: Well-known Kubernetes label: a node carrying it (any value) must not receive traffic
#: from external load balancers.
EXCLUDE_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


# --------------------------------------------------------------------------- annotations

_NO_ATTRIBUTES = RouteAttributes()

#: What each attribute annotation accepts, said in every error about it.
ANNOTATION_SYNTAX = {
    ANNOTATION_COMMUNITIES: "a comma list of a:b, large:a:b:c, a well-known name such as "
    f"no-export, or a Community alias, at most {SERVICE_COMMUNITY_BYTES} bytes of them "
    "(4 per a:b, 12 per large)",
    ANNOTATION_LOCAL_PREF: "an unsigned 32-bit integer (0-4294967295)",
    ANNOTATION_MED: "an unsigned 32-bit integer (0-4294967295)",
}


def _annotation_error(name: str, problem: object) -> ValueError:
    return ValueError(f"{name}: {problem}; accepted: {ANNOTATION_SYNTAX[name]}")


def community_aliases(config: Config) -> Mapping[str, str]:
    """Alias name -> community text, from every Community object."""
    return {alias: value for c in config.communities for alias, value in c.communities.items()}


def service_attributes(
    service: Service, aliases: Mapping[str, str] | None = None
) -> RouteAttributes:
    """The path attributes a Service asks for through its annotations.

    Raises ValueError naming the annotation, the bad text and what it accepts. Parsed with the same
    functions as the config (bgpd.attributes), so the same texts are accepted and
    control characters can never reach an ExaBGP command line.
    """
    annotations = service.annotations
    if (
        ANNOTATION_COMMUNITIES not in annotations
        and ANNOTATION_LOCAL_PREF not in annotations
        and ANNOTATION_MED not in annotations
    ):
        return _NO_ATTRIBUTES
    aliases = aliases or {}
    standard: set[str] = set()
    large: set[str] = set()
    raw = service.annotations.get(ANNOTATION_COMMUNITIES, "")
    if raw.strip():
        for item in raw.split(","):
            text = item.strip()
            if not text:
                raise _annotation_error(
                    ANNOTATION_COMMUNITIES, f"{excerpt(raw)} has an empty entry"
                )
            value = aliases.get(text, text)
            try:
                kind, canonical = parse_community(value)
            except ValueError as exc:
                raise _annotation_error(ANNOTATION_COMMUNITIES, exc) from exc
            (large if kind == "large" else standard).add(canonical)
        if problem := too_many_communities(standard, large, SERVICE_COMMUNITY_BYTES):
            raise _annotation_error(ANNOTATION_COMMUNITIES, problem)
    values: dict[str, int | None] = {}
    for name in (ANNOTATION_LOCAL_PREF, ANNOTATION_MED):
        number = service.annotations.get(name)
        try:
            values[name] = None if number is None else parse_u32(number, "value")
        except ValueError as exc:
            raise _annotation_error(name, exc) from exc
    return shared_attributes(
        RouteAttributes(
            communities=tuple(sorted(standard)),
            large_communities=tuple(sorted(large)),
            local_pref=values[ANNOTATION_LOCAL_PREF],
            med=values[ANNOTATION_MED],
        )
    )


#: decide()'s `last_valid` when nothing was decided before (offline, the first pass).
NO_LAST_VALID: Mapping[ServiceKey, RouteAttributes] = MappingProxyType({})


def attributes_in_force(
    service: Service, aliases: Mapping[str, str], last_valid: RouteAttributes | None
) -> tuple[RouteAttributes | None, str]:
    """The attributes a Service's routes carry, and the annotation error ('' if none):
    what its annotations ask for, or when they do not parse, `last_valid`, those of its
    last annotations that did (None for a Service never seen valid: not announced). A
    typo in an annotation must not withdraw a Service that is serving traffic."""
    try:
        return service_attributes(service, aliases), ""
    except ValueError as exc:
        return last_valid, str(exc)


def _remembered_by_decide(service: Service, ours: str | None) -> bool:
    """The Services decide() keeps last valid attributes for: LoadBalancers of ours."""
    return service.type == "LoadBalancer" and is_our_load_balancer(service, ours)


def remember_attributes(
    config: Config,
    snapshot: ClusterSnapshot,
    last_valid: Mapping[ServiceKey, RouteAttributes],
) -> dict[ServiceKey, RouteAttributes]:
    """decide()'s `last_valid` for the next snapshot, after deciding on this one: per
    LoadBalancer Service of ours, attributes_in_force() (Services that are gone, or
    never parsed, have none). The Decider keeps the same map as its state."""
    aliases = community_aliases(config)
    ours = config.speaker.load_balancer_class
    out: dict[ServiceKey, RouteAttributes] = {}
    for key, svc in snapshot.services.items():
        if _remembered_by_decide(svc, ours):
            got, _ = attributes_in_force(svc, aliases, last_valid.get(key))
            if got is not None:
                out[key] = got
    return out


# --------------------------------------------------------------------------- pieces


def node_reason(config: Config, node: Node | None) -> SkipReason | None:
    """Why this node announces nothing at all, or None when it may announce."""
    if node is None:
        return SkipReason.NODE_UNKNOWN
    if node.network_unavailable:
        return SkipReason.NODE_NETWORK_UNAVAILABLE
    if EXCLUDE_LB_LABEL in node.labels and not config.speaker.ignore_exclude_lb:
        return SkipReason.NODE_EXCLUDED
    return None


def has_serving_endpoint(snapshot: ClusterSnapshot, service: Service, node: NodeName) -> bool:
    """Cluster: any endpoint of the Service (over all its slices) can serve.
    Local: an endpoint whose nodeName is this node can serve."""
    return _has_serving(snapshot.endpoint_slices.get(service.key, ()), service, node)


def _has_serving(slices: tuple[EndpointSlice, ...], service: Service, node: NodeName) -> bool:
    if service.external_traffic_policy is TrafficPolicy.LOCAL:
        # The count the link bandwidth is made of, so both follow one rule.
        return serving_endpoints(slices, node) > 0
    return any(ep.can_serve for s in slices for ep in s.endpoints)


def endpoint_detail(snapshot: ClusterSnapshot, service: Service, node: NodeName) -> str:
    """What the endpoints look like when a Service is skipped for them, so explain can
    tell "no pods at all" from "pods elsewhere" from "pods not ready" without kubectl."""
    return _endpoint_detail(snapshot.endpoint_slices.get(service.key, ()), service, node)


def _endpoint_detail(slices: tuple[EndpointSlice, ...], service: Service, node: NodeName) -> str:
    endpoints = [ep for s in slices for ep in s.endpoints]
    if not slices:
        return "no EndpointSlice for this Service"
    if not endpoints:
        return "its EndpointSlices hold no endpoint"
    if service.external_traffic_policy is TrafficPolicy.LOCAL:
        here = [ep for ep in endpoints if ep.node_name == node]
        elsewhere = sorted({ep.node_name for ep in endpoints if ep.can_serve and ep.node_name})
        parts = []
        if here:
            parts.append(f"{_plural(len(here), 'endpoint')} on {node}, none ready or serving")
        else:
            parts.append(f"no endpoint on {node}")
        if elsewhere:
            parts.append(f"serving on {_names(elsewhere)}")
        return "; ".join(parts)
    return f"{_plural(len(endpoints), 'endpoint')}, none ready or serving"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True, slots=True)
class _Miss:
    reason: SkipReason
    detail: str


_Targets = tuple[tuple[BGPAdvertisement, BGPPeer], ...]


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)


@dataclass(slots=True)
class _NodeScope:
    """What is fixed for one decide() call: this node's peers and advertisements, and a
    cache of the (advertisement, peer) pairs per (pool, family), so 10,000 Services cost
    10,000 dictionary look-ups rather than 10,000 scans of the config."""

    config: Config
    node: NodeName
    labels: Mapping[str, str]
    #: peers_for_node(): the peers with a session from this node, and the others.
    node_peers: NodePeers
    #: snapshot.nodes: every Node, for the fan-out candidates (rule 7).
    nodes: Mapping[NodeName, Node] = field(default_factory=dict)
    #: Per (pool, IP version, names of the serviceSelectors advertisements that select
    #: the Service): the (advertisement, peer) pairs, or why none.
    cache: dict[tuple[PoolName, int, tuple[str, ...]], _Targets | _Miss] = field(
        default_factory=dict
    )
    ranges: list[tuple[int, int, int, IPAddressPool]] | None = None
    #: fan-out candidates by the node-wide rules, per (advertisement, IP version).
    eligible: dict[tuple[str, int], frozenset[NodeName]] = field(default_factory=dict)

    @property
    def peers(self) -> tuple[BGPPeer, ...]:
        return self.node_peers.peers

    def pool_of(self, ip: IPAddress) -> IPAddressPool | None:
        """Config.pool_of over integer bounds computed once (pools never overlap)."""
        if self.ranges is None:
            self.ranges = [
                (r.version, int(r.first), int(r.last), p)
                for p in self.config.pools
                for r in p.addresses
            ]
        version, value = ip.version, int(ip)
        for v, first, last, pool in self.ranges:
            if v == version and first <= value <= last:
                return pool
        return None

    def targets(
        self, pool: IPAddressPool, version: int, selected: tuple[str, ...] = ()
    ) -> _Targets | _Miss:
        """The (advertisement, peer) pairs an IP of `pool` goes through, or why none.
        `selected`: the names of the advertisements with serviceSelectors that select the
        Service; those without serviceSelectors select every Service."""
        key = (pool.name, version, selected)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._targets(pool, version, selected)
        return found

    def _targets(
        self, pool: IPAddressPool, version: int, selected: tuple[str, ...]
    ) -> _Targets | _Miss:
        advs = [a for a in self.config.advertisements if a.selects_pool(pool)]
        if not advs:
            return _Miss(
                SkipReason.NO_MATCHING_ADVERTISEMENT,
                f"no BGPAdvertisement selects pool {pool.name}",
            )
        mine = [a for a in advs if not a.service_selectors or a.name in selected]
        if not mine:
            return _Miss(
                SkipReason.NO_MATCHING_ADVERTISEMENT,
                f"BGPAdvertisement {_names(a.name for a in advs)} select pool {pool.name} "
                "but their serviceSelectors do not match the Service's labels",
            )
        advs = mine
        here = [a for a in advs if selectors_match(a.node_selectors, self.labels)]
        if not here:
            return _Miss(
                SkipReason.NO_MATCHING_ADVERTISEMENT,
                f"BGPAdvertisement {_names(a.name for a in advs)} select pool {pool.name} "
                f"but their nodeSelectors do not match node {self.node}",
            )
        peers = self.peers
        pairs = [(a, p) for a in here for p in peers if not a.peers or p.name in a.peers]
        if not pairs:
            if not self.config.peers:
                detail = "no BGPPeer is configured"
            elif not peers:
                detail = _no_session_detail(self.node_peers, self.node)
            else:
                named = sorted({p for a in here for p in a.peers})
                detail = (
                    f"BGPAdvertisement {_names(a.name for a in here)} name peers "
                    f"{_names(named)}, none of which applies on node {self.node}"
                )
            return _Miss(SkipReason.NO_MATCHING_PEER, detail)
        same = tuple((a, p) for a, p in pairs if p.family == version)
        if not same:
            other = sorted({p.name for _, p in pairs})
            return _Miss(
                SkipReason.NO_PEER_OF_FAMILY,
                f"IPv{version} address; peers {_names(other)} are IPv{10 - version} sessions",
            )
        return same


def _fanout_eligible(
    config: Config, adv: BGPAdvertisement, version: int, nodes: Mapping[NodeName, Node]
) -> frozenset[NodeName]:
    """The nodes that may announce an IPv`version` prefix through `adv` by the rules that
    do not depend on the Service: no node-wide reason, the advertisement's nodeSelectors
    match, and a session (peers_for_node() without kernel choices, so every node gets
    the same answer) to a peer of that family the advertisement names."""
    found: list[NodeName] = []
    for name, node in nodes.items():
        if node_reason(config, node) is not None:
            continue
        if not selectors_match(adv.node_selectors, node.labels):
            continue
        if any(
            p.family == version and (not adv.peers or p.name in adv.peers)
            for p in peers_for_node(config, node).peers
        ):
            found.append(name)
    return frozenset(found)


def _fanout_candidates(
    scope: _NodeScope,
    adv: BGPAdvertisement,
    version: int,
    svc: Service,
    slices: tuple[EndpointSlice, ...],
) -> frozenset[NodeName]:
    """The nodes that would announce an IP of `svc` through `adv` without the cap:
    _fanout_eligible(), and for Local only those with a serving endpoint of `svc`."""
    key = (adv.name, version)
    eligible = scope.eligible.get(key)
    if eligible is None:
        eligible = scope.eligible[key] = _fanout_eligible(scope.config, adv, version, scope.nodes)
    if svc.external_traffic_policy is not TrafficPolicy.LOCAL:
        return eligible
    serving = {ep.node_name for s in slices for ep in s.endpoints if ep.can_serve}
    return frozenset(n for n in eligible if n in serving)


def _no_session_detail(node_peers: NodePeers, node: NodeName) -> str:
    skipped = node_peers.skipped
    if all(s.reason is PeerSkipReason.NODE_SELECTORS for s in skipped):
        return f"no BGPPeer's nodeSelectors match node {node}"
    why = "; ".join(f"{s.peer}: {s.reason}" for s in skipped)
    return f"no BGPPeer has a session from node {node} ({why})"


@dataclass(slots=True)
class _Merged:
    """Accumulates every contribution to one (peer, prefix).

    Communities are kept per source (each advertisement's, each Service's annotation)
    so that an aggregate whose union would not fit in one BGP UPDATE (bgpd.update_size)
    can leave sources out rather than reset the session: see build()."""

    services: set[ServiceKey] = field(default_factory=set)
    #: Per advertisement name, and per Service: (communities, large communities).
    by_advertisement: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)
    by_service: dict[ServiceKey, tuple[set[str], set[str]]] = field(default_factory=dict)
    local_pref: int | None = None
    med: int | None = None
    #: Link bandwidth (bgpd.bandwidth) per Service, bytes/s; `bandwidth_missing` when any
    #: contribution carries none, which leaves the route without the community.
    bandwidth: dict[ServiceKey, int] = field(default_factory=dict)
    bandwidth_missing: bool = False
    asn: int = 0

    def add(
        self,
        service: ServiceKey,
        adv: BGPAdvertisement,
        peer: BGPPeer,
        wanted: RouteAttributes,
        endpoints: int,
    ) -> None:
        self.services.add(service)
        per_endpoint = adv.link_bandwidth_per_endpoint
        if per_endpoint is None or not endpoints:
            self.bandwidth_missing = True
        else:
            # One Service through two advertisements counts once, at the larger value.
            value = per_endpoint * endpoints
            self.bandwidth[service] = max(value, self.bandwidth.get(service, 0))
            self.asn = peer.my_asn
        if adv.communities or adv.large_communities:
            std, large = self.by_advertisement.setdefault(adv.name, (set(), set()))
            std.update(adv.communities)
            large.update(adv.large_communities)
        if wanted.communities or wanted.large_communities:
            std, large = self.by_service.setdefault(service, (set(), set()))
            std.update(wanted.communities)
            large.update(wanted.large_communities)
        lp = wanted.local_pref if wanted.local_pref is not None else adv.local_pref
        if lp is not None and peer.is_ibgp:
            self.local_pref = lp if self.local_pref is None else max(self.local_pref, lp)
        if wanted.med is not None:
            self.med = wanted.med if self.med is None else min(self.med, wanted.med)

    def _attributes(self, communities: set[str], large: set[str]) -> RouteAttributes:
        return shared_attributes(
            RouteAttributes(
                communities=tuple(sorted(communities)),
                large_communities=tuple(sorted(large)),
                local_pref=self.local_pref,
                med=self.med,
                link_bandwidth=None
                if self.bandwidth_missing or not self.bandwidth
                else link_bandwidth(self.asn, sum(self.bandwidth.values())),
            )
        )

    def build(self, peer: PeerName, prefix: IPNetwork) -> tuple[Route, tuple[Notice, ...]]:
        """The route, and a notice per Service whose route lost communities.

        The union of every source's communities, when it fits in one UPDATE. Otherwise
        the sources go in one at a time while the route still fits: the advertisements
        first (the operator's policy, by name), then the Services from the fewest
        community bytes to the most (by key on a tie). So the Service asking for most is
        the one left out, and no Service can push the route of another out of BGP or
        reset a session; each Service is still announced in the prefix."""
        sources = [*self.by_advertisement.values(), *self.by_service.values()]
        everything = self._attributes(
            {c for s, _ in sources for c in s}, {c for _, lg in sources for c in lg}
        )
        services = tuple(sorted(self.services))
        if fits(everything, prefix.version):
            return Route(peer, prefix, everything, services), ()
        std: set[str] = set()
        large: set[str] = set()
        #: Advertisement names first, then Service keys, in the order they go in.
        order: list[tuple[bool, str, tuple[set[str], set[str]]]] = [
            (False, name, got) for name, got in sorted(self.by_advertisement.items())
        ]
        order.extend(
            (True, key, got)
            for key, got in sorted(
                self.by_service.items(), key=lambda kv: (community_bytes(*kv[1]), kv[0])
            )
        )
        notices: list[Notice] = []
        why = (
            f"left out of {prefix_text(prefix)} to peer {peer}: with the communities of "
            f"the route's other sources the BGP UPDATE would exceed {MAX_MESSAGE:,} bytes"
        )
        left = NoticeReason.COMMUNITIES_LEFT_OUT
        for is_service, name, (more, more_large) in order:
            if fits(self._attributes(std | more, large | more_large), prefix.version):
                std |= more
                large |= more_large
            elif is_service:
                notices.append(Notice(ServiceKey(name), left, f"its communities are {why}"))
            else:
                what = f"BGPAdvertisement {name}'s communities are {why}"
                notices.extend(Notice(s, left, what) for s in services)
        route = Route(peer, prefix, self._attributes(std, large), services)
        return route, tuple(sorted(notices, key=notice_sort_key))


@functools.lru_cache(maxsize=4096)
def shared_attributes(attributes: RouteAttributes) -> RouteAttributes:
    """One object for equal attributes: most routes carry the same few (none, or an
    advertisement's communities), and the Decider, the driver's desired and accepted
    sets and the advertised routes each hold every route's (10,000 routes: ~0.7 MiB
    per copy). Bounded: past 4,096 distinct values the least recently seen are copies
    again, which is only memory."""
    return attributes


#: aggregate()'s memo of host routes (/32, /128: nearly every route), by the Service's IP:
#: a dictionary entry costs ~40 bytes where functools.lru_cache's key tuple and list
#: cost ~150 (1 MiB at 10,000 Services). Emptied when it reaches _HOST_ROUTES_MAX.
_HOST_ROUTES: dict[IPAddress, IPNetwork] = {}
_HOST_ROUTES_MAX = 1 << 17


def aggregate(ip: IPAddress, length: int) -> IPNetwork:
    """The network of `ip` at prefix length `length` (host bits cleared). Built from
    integers: ip_network((ip, n), strict=False) costs 4 times as much, which shows at
    10,000 Services; memoised because the same few thousand (ip, length) pairs recur on
    every pass (bounded, and the networks are immutable, so sharing them is safe).

    A host route is trimmed to what a network needs: its network address is `ip`
    itself rather than an equal copy, and ipaddress's per-instance `hosts` closure
    (which it gives every /32 and /128, ~190 bytes each; nothing in kube-bgpd calls
    hosts() on a route) is dropped. Together ~2.5 MiB at 10,000 Services; the network
    is equal to, and hashes as, an untrimmed one."""
    if length != ip.max_prefixlen:
        return _aggregate_network(ip, length)
    network = _HOST_ROUTES.get(ip)
    if network is None:
        network = _network(ip, length)
        network.__dict__.pop("hosts", None)
        # Not an IPv6 address with a zone (fe80::1%eth0): the network has none.
        if getattr(ip, "scope_id", None) is None:
            network.network_address = ip
        if len(_HOST_ROUTES) >= _HOST_ROUTES_MAX:
            _HOST_ROUTES.clear()
        _HOST_ROUTES[ip] = network
    return network


def _network(ip: IPAddress, length: int) -> IPNetwork:
    bits = ip.max_prefixlen - length
    net = (int(ip) >> bits) << bits
    if ip.version == 4:
        return ipaddress.IPv4Network((net, length))
    return ipaddress.IPv6Network((net, length))


#: aggregate() of a prefix shorter than a host route: one of a few aggregates.
_aggregate_network = functools.lru_cache(maxsize=65536)(_network)


@functools.lru_cache(maxsize=65536)
def prefix_text(prefix: IPNetwork) -> str:
    """str(prefix), memoised: ipaddress builds the text in Python (~6 us), and status,
    metrics and explain render the same few thousand prefixes on every request."""
    return str(prefix)


#: A route's place in a Decision's order, unique per route: (peer, IP version, address,
#: prefix length).
RouteKey = tuple[PeerName, int, int, int]


def route_sort_key(route: Route) -> RouteKey:
    return route_key(route.peer, route.prefix)


def route_key(peer: PeerName, prefix: IPNetwork) -> RouteKey:
    """route_sort_key of the route at (peer, prefix): to find it in a Decision by
    bisection, and the Decider's key for the contributions to one route."""
    return (peer, prefix.version, int(prefix.network_address), prefix.prefixlen)


def skip_sort_key(skip: Skip) -> tuple[str, int, int, str, str]:
    ip = skip.ip
    return (
        skip.service,
        0 if ip is None else ip.version,
        -1 if ip is None else int(ip),
        skip.reason,
        skip.detail,
    )


# --------------------------------------------------------------------------- decide

#: One Service's contribution to one route: (peer, prefix) it lands on, and what it adds;
#: last, the serving endpoints on this node when the advertisement asks for a link
#: bandwidth for this Local Service (bgpd.bandwidth), else 0.
_Contribution = tuple[PeerName, IPNetwork, BGPAdvertisement, BGPPeer, RouteAttributes, int]


@dataclass(frozen=True, slots=True)
class _Part:
    """What one Service yields on this node: its skips and its route contributions."""

    skips: tuple[Skip, ...] = ()
    contributions: tuple[_Contribution, ...] = ()
    notices: tuple[Notice, ...] = ()
    #: attributes_in_force(): what remember_attributes() keeps for this Service.
    in_force: RouteAttributes | None = None


_NOTHING = _Part()

#: The contributions to one route, by Service: one (Service, contributions) pair while a
#: single Service contributes (a /32 of one Service: nearly every route), a dict once
#: several do (an aggregate, a shared IP), and back to a pair when one is left. A dict
#: and a list per route cost ~170 bytes more, 1.6 MiB at 10,000 Services.
_Group = tuple[ServiceKey, tuple[_Contribution, ...]] | dict[ServiceKey, tuple[_Contribution, ...]]


@dataclass(slots=True)
class _Context:
    """Everything per decide() call that does not depend on a single Service."""

    scope: _NodeScope
    blocked: SkipReason | None
    aliases: Mapping[str, str]
    ours: str | None
    data_plane: DataPlane
    #: The advertisements with serviceSelectors (the others select every Service).
    selective: tuple[BGPAdvertisement, ...] = ()


def _context(
    config: Config,
    node_obj: Node | None,
    node: NodeName,
    kernel_choices: Mapping[PeerName, IPAddress | None],
    nodes: Mapping[NodeName, Node],
    data_plane: DataPlane,
) -> _Context:
    labels = node_obj.labels if node_obj is not None else {}
    blocked = node_reason(config, node_obj)
    if blocked is None and not data_plane.node_ready:
        blocked = SkipReason.DATA_PLANE_NOT_READY
    return _Context(
        scope=_NodeScope(
            config=config,
            node=node,
            labels=labels,
            node_peers=peers_for_node(config, node_obj, kernel_choices=kernel_choices),
            nodes=nodes,
        ),
        blocked=blocked,
        aliases=community_aliases(config),
        ours=config.speaker.load_balancer_class,
        data_plane=data_plane,
        selective=tuple(a for a in config.advertisements if a.service_selectors),
    )


def _service_part(
    ctx: _Context,
    svc: Service,
    slices: tuple[EndpointSlice, ...],
    last_valid: RouteAttributes | None,
) -> _Part:
    """One Service's skips, notices and route contributions: depends only on the
    context, the Service, its EndpointSlices and its last valid attributes, so it can be
    memoised per Service."""
    if svc.type != "LoadBalancer":
        return _NOTHING
    key = svc.key
    ours = ctx.ours
    if not is_our_load_balancer(svc, ours):
        serves = f"class {ours}" if ours is not None else "Services without a class"
        return _Part(
            skips=(
                Skip(
                    key,
                    SkipReason.NOT_OUR_CLASS,
                    detail=(
                        f"loadBalancerClass {svc.load_balancer_class}"
                        if svc.load_balancer_class is not None
                        else "no loadBalancerClass"
                    )
                    + f"; this speaker serves {serves}",
                ),
            )
        )
    in_force, error = attributes_in_force(svc, ctx.aliases, last_valid)
    notices: tuple[Notice, ...] = ()

    def skipped(*skips: Skip) -> _Part:
        return _Part(skips=skips, notices=notices, in_force=in_force)

    if not svc.ingress_ips:
        return skipped(Skip(key, SkipReason.NO_IP_ALLOCATED))
    if in_force is None:
        return skipped(Skip(key, SkipReason.INVALID_ANNOTATION, detail=error))
    allowed, refused = restrict(ctx.scope.config.speaker.annotation_policy, svc, in_force)
    wanted = allowed
    if error:
        notices = (
            Notice(
                key,
                NoticeReason.ANNOTATION_KEPT,
                detail=f"{error}; keeping the attributes of the last valid annotations",
            ),
        )
    if refused:
        notices += (Notice(key, NoticeReason.ANNOTATION_NOT_ALLOWED, detail=refused),)
    if ctx.blocked is not None:
        detail = NODE_DATA_PLANE_DETAIL if ctx.blocked is SkipReason.DATA_PLANE_NOT_READY else ""
        return skipped(Skip(key, ctx.blocked, detail=detail))
    scope = ctx.scope
    local = svc.external_traffic_policy is TrafficPolicy.LOCAL
    if not _has_serving(slices, svc, scope.node):
        return skipped(
            Skip(
                key,
                SkipReason.NO_LOCAL_ENDPOINTS if local else SkipReason.NO_ENDPOINTS,
                detail=_endpoint_detail(slices, svc, scope.node),
            )
        )
    dp = ctx.data_plane
    if dp.services_checked and gated_by_health_check(svc) and key not in dp.ready:
        if key in dp.draining:
            wanted = _draining(wanted)
        else:
            return skipped(
                Skip(
                    key,
                    SkipReason.DATA_PLANE_NOT_READY,
                    detail=f"healthCheckNodePort {svc.health_check_node_port} has not "
                    "passed its check",
                )
            )
    skips: list[Skip] = []
    contributions: list[_Contribution] = []
    #: The link bandwidth's endpoint count (Local only), counted when an advertisement
    #: first asks for it: most ask for none.
    endpoints: int | None = None if local else 0
    selected = (
        tuple(a.name for a in ctx.selective if a.selects_service(svc.labels))
        if ctx.selective
        else ()
    )
    ips = svc.ingress_ips
    # Each IP once; nearly every Service has one, which then needs no hashing.
    for ip in ips if len(ips) == 1 else dict.fromkeys(ips):
        pool = scope.pool_of(ip)
        if pool is None:
            skips.append(Skip(key, SkipReason.IP_NOT_IN_POOL, ip=ip))
            continue
        targets = scope.targets(pool, ip.version, selected)
        if isinstance(targets, _Miss):
            skips.append(Skip(key, targets.reason, ip=ip, detail=targets.detail))
            continue
        #: Per capped advertisement: why this node is not chosen, or None when it is.
        capped: dict[str, str | None] = {}
        kept = 0
        for adv, peer in targets:
            length = adv.aggregation_length if ip.version == 4 else adv.aggregation_length_v6
            asked = 0
            if adv.link_bandwidth_per_endpoint is not None:
                if endpoints is None:
                    endpoints = serving_endpoints(slices, scope.node)
                asked = endpoints
            prefix = aggregate(ip, length)
            if adv.max_nodes is not None:
                if adv.name not in capped:
                    capped[adv.name] = _fanout_miss(scope, adv, adv.max_nodes, prefix, svc, slices)
                if capped[adv.name] is not None:
                    continue
            contributions.append((peer.name, prefix, adv, peer, wanted, asked))
            kept += 1
        if not kept:
            detail = "; ".join(m for m in capped.values() if m is not None)
            skips.append(Skip(key, SkipReason.NOT_SELECTED_FOR_FANOUT, ip=ip, detail=detail))
    return _Part(
        skips=tuple(skips),
        contributions=tuple(contributions),
        notices=notices + _not_sent(key, allowed, contributions),
        in_force=in_force,
    )


def _not_sent(
    key: ServiceKey, asked: RouteAttributes, contributions: Iterable[_Contribution]
) -> tuple[Notice, ...]:
    """A local-pref annotation on a Service routed to eBGP peers: RFC 4271 5.1.5 keeps
    LOCAL_PREF to iBGP, so those peers do not get it (_Merged drops it), and the owner
    should know rather than wonder."""
    if asked.local_pref is None:
        return ()
    ebgp = sorted({c[3].name for c in contributions if not c[3].is_ibgp})
    if not ebgp:
        return ()
    return (
        Notice(
            key,
            NoticeReason.ATTRIBUTE_NOT_SENT,
            detail=f"{ANNOTATION_LOCAL_PREF} {asked.local_pref} is not sent to eBGP peers "
            f"{_names(ebgp)}: LOCAL_PREF is for iBGP peers only (RFC 4271 5.1.5)",
        ),
    )


def _fanout_miss(
    scope: _NodeScope,
    adv: BGPAdvertisement,
    limit: int,
    prefix: IPNetwork,
    svc: Service,
    slices: tuple[EndpointSlice, ...],
) -> str | None:
    """None when this node is among the `limit` (adv.max_nodes) chosen for `prefix`
    (rule 7), else why not, with its rank."""
    candidates = _fanout_candidates(scope, adv, prefix.version, svc, slices)
    cap = f"cap {limit} (BGPAdvertisement {adv.name})"
    if scope.node not in candidates:
        return (
            f"node {scope.node} is not one of the {len(candidates)} candidates, {cap}: "
            "no session to a peer it names by sourceAddress or InternalIP"
        )
    place = fanout.rank(prefix_text(prefix), candidates, scope.node)
    if place <= limit:
        return None
    return f"rank {place} of {len(candidates)}, {cap}"


#: The detail of a node-wide dataPlaneNotReady.
NODE_DATA_PLANE_DETAIL = "the node's data-plane check (dataPlaneCheck.nodeURL) is failing"


def gated_by_health_check(service: Service) -> bool:
    """A Service kube-proxy answers for on its healthCheckNodePort (Local ones: the API
    allocates the port only for them), so SpeakerConfig dataPlaneCheck gates it."""
    return (
        service.health_check_node_port is not None
        and service.external_traffic_policy is TrafficPolicy.LOCAL
    )


def _draining(wanted: RouteAttributes) -> RouteAttributes:
    """A Service whose data-plane check fails, in its drain window: RFC 8326
    GRACEFUL_SHUTDOWN and LOCAL_PREF 0 (sent to iBGP peers only, like every LOCAL_PREF),
    what the driver's DRAINING mode does for a whole node. A route several Services
    share carries it as soon as one of them drains (communities are merged as a union)."""
    return replace(
        wanted,
        communities=tuple(sorted({*wanted.communities, GRACEFUL_SHUTDOWN})),
        local_pref=0,
    )


def decide(
    config: Config,
    snapshot: ClusterSnapshot,
    node: NodeName,
    *,
    kernel_choices: Mapping[PeerName, IPAddress | None] = NO_KERNEL_CHOICES,
    data_plane: DataPlane = DATA_PLANE_UNCHECKED,
    last_valid: Mapping[ServiceKey, RouteAttributes] = NO_LAST_VALID,
) -> Decision:
    """The routes `node` must announce, per peer, and a Skip for every LoadBalancer
    Service (or IP of one) of ours it does not announce. Routes and skips are sorted,
    so equal inputs give equal Decisions whatever order the snapshot was built in.

    Routes go only to the peers `node` has a session with (bgpd.peers.peers_for_node,
    given the kernel's source-address choice per peer; none offline); the others are in
    Decision.peers_skipped with the reason.

    `data_plane` (SpeakerConfig dataPlaneCheck, bgpd.speaker.dataplane) gates the node
    (`dataPlaneNotReady` for every Service, after the node-wide reasons) and single
    Services (after their endpoints: GRACEFUL_SHUTDOWN while draining, then
    `dataPlaneNotReady`).

    `last_valid` (remember_attributes() of the previous snapshots; none offline): a
    Service whose attribute annotations no longer parse keeps these attributes, with an
    `invalidAnnotationKept` notice, instead of being withdrawn; one without an entry is
    `invalidAnnotation`."""
    ctx = _context(
        config, snapshot.nodes.get(node), node, kernel_choices, snapshot.nodes, data_plane
    )
    merged: dict[tuple[PeerName, IPNetwork], _Merged] = {}
    skipped: list[Skip] = []
    notices: list[Notice] = []
    slices = snapshot.endpoint_slices
    for svc in snapshot.services.values():
        part = _service_part(ctx, svc, slices.get(svc.key, ()), last_valid.get(svc.key))
        skipped.extend(part.skips)
        notices.extend(part.notices)
        for peer_name, prefix, adv, peer, wanted, endpoints in part.contributions:
            entry = merged.get((peer_name, prefix))
            if entry is None:
                entry = merged[(peer_name, prefix)] = _Merged()
            entry.add(svc.key, adv, peer, wanted, endpoints)
    routes: list[Route] = []
    for (peer_name, prefix), m in merged.items():
        route, left_out = m.build(peer_name, prefix)
        routes.append(route)
        notices.extend(left_out)
    routes.sort(key=route_sort_key)
    return Decision(
        node=node,
        routes=tuple(routes),
        skipped=tuple(sorted(skipped, key=skip_sort_key)),
        peers_skipped=ctx.scope.node_peers.skipped,
        notices=tuple(sorted(notices, key=notice_sort_key)),
    )


def notice_sort_key(notice: Notice) -> tuple[str, str, str]:
    return (notice.service, notice.reason, notice.detail)


_K = TypeVar("_K", tuple[str, int, int, str, str], tuple[str, str, str])
_V = TypeVar("_V")


def _first(pair: tuple[RouteKey, Route]) -> RouteKey:
    return pair[0]


def _insort(order: list[_K], items: list[_V], key: _K, item: _V) -> None:
    """Insert `item` at the place of `key` in the sorted `order` (items follow order)."""
    at = bisect.bisect_left(order, key)
    order.insert(at, key)
    items.insert(at, item)


def _delete(order: list[_K], items: list[_V], key: _K) -> None:
    """Remove the entry at `key` from the sorted `order` and from `items`."""
    at = bisect.bisect_left(order, key)
    del order[at]
    del items[at]


@dataclass(slots=True)
class _Memo:
    service: Service
    slices: tuple[EndpointSlice, ...]
    part: _Part


_SkipKey = tuple[str, int, int, str, str]

#: Entries of Decider._alone before it starts again: the combinations 10,000 Services
#: make are a handful; a Service with attributes of its own, or drained by its data-plane
#: check, adds one.
_ALONE_MAX = 4096

#: What a Decider's context depends on: config, node name, Node, kernel choices,
#: every Node when an advertisement has a fan-out cap (else None), and the data plane.
_ContextKey = tuple[
    Config,
    NodeName,
    Node | None,
    Mapping[PeerName, IPAddress | None],
    Mapping[NodeName, Node] | None,
    DataPlane,
]


class Decider:
    """decide() made incremental: the same Decision for the same inputs (property tests
    check it step by step), at a cost close to the number of changed Services.

    It memoises each Service's part keyed by its inputs (the Service object and its
    EndpointSlices, by identity, else by equality; the watcher's snapshots reuse the
    frozen objects that did not change) and keeps the merged routes per (peer, prefix),
    rebuilding only the routes a changed Service touched. Routes and skips stay in
    sorted lists updated by bisection, so no pass sorts everything again, and a route
    whose merge comes out equal keeps its Route object. A different config, node name or
    Node object starts from scratch. State, but no I/O, no logging, no clock.

    `decide(..., changed=keys)` looks only at those Service keys: the caller promises
    that every other Service and its EndpointSlices are as in the snapshot of this
    Decider's previous decide() (the Kubernetes source knows which keys its events
    touched). Without `changed`, every Service is compared (by identity first, so
    unchanged ones cost a dictionary look-up each).

    After each decide(): `last_changes`, the (peer, prefix) whose Route may differ from
    the previous decide()'s (None when everything may have: the first call, or a new
    context), and `desired_changed`, whether desired() differs from the previous one.

    The last valid attributes of every Service (decide()'s `last_valid`) are its state
    too: each decide() equals decide(..., last_valid=remember_attributes() of the
    snapshots before it), so an annotation typo keeps a Service's routes.
    """

    def __init__(self, last_valid: Mapping[ServiceKey, RouteAttributes] = NO_LAST_VALID) -> None:
        self._key: _ContextKey | None = None
        #: decide()'s `last_valid`, kept across new contexts (remember_attributes()); it
        #: starts from `last_valid` (what a restarted speaker kept from before).
        self._valid: dict[ServiceKey, RouteAttributes] = dict(last_valid)
        self._reset(None)
        self.last_changes: dict[PeerName, set[IPNetwork]] | None = None
        self.desired_changed = False

    @property
    def last_valid(self) -> Mapping[ServiceKey, RouteAttributes]:
        """decide()'s `last_valid` for the next snapshot (a read-only view)."""
        return MappingProxyType(self._valid)

    def _reset(self, ctx: _Context | None) -> None:
        self._ctx = ctx
        self._memo: dict[ServiceKey, _Memo] = {}
        #: route_sort_key of (peer, prefix) -> contributing Services and contributions
        #: (_Group).
        self._groups: dict[RouteKey, _Group] = {}
        self._routes: dict[RouteKey, Route] = {}
        #: Route keys, sorted, and their Routes at the same positions.
        self._route_order: list[RouteKey] = []
        self._route_list: list[Route] = []
        #: What desired() returns, kept per route.
        self._by_peer: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
        #: skip_sort_key of every Skip (equal keys: equal Skips), sorted, and the Skips.
        self._skip_order: list[_SkipKey] = []
        self._skip_list: list[Skip] = []
        self._sorted_routes: tuple[Route, ...] = ()
        self._sorted_skips: tuple[Skip, ...] = ()
        #: notice_sort_key of every Notice, sorted, and the Notices; as for skips.
        self._notice_order: list[tuple[str, str, str]] = []
        self._notice_list: list[Notice] = []
        self._sorted_notices: tuple[Notice, ...] = ()
        #: Notices of merged routes (communities left out), per route.
        self._route_notices: dict[RouteKey, tuple[Notice, ...]] = {}
        #: The attributes of a route with one contribution (nearly every route: one
        #: Service's host route through one advertisement), by the identity of that
        #: contribution's advertisement, peer and wanted attributes, its endpoint count
        #: and IP version (None: a merge that leaves communities out, which names the
        #: Service and the prefix). The value holds the three objects, so their ids stay
        #: theirs while the entry lives. See _alone_route.
        self._alone: dict[
            tuple[int, int, int, int, int],
            tuple[BGPAdvertisement, BGPPeer, RouteAttributes, RouteAttributes | None],
        ] = {}
        #: Set by _add/_remove/_rebuild during one decide().
        self._routes_moved = False
        self._skips_moved = False
        self._changes: dict[PeerName, set[IPNetwork]] = {}

    def _same_context(
        self,
        config: Config,
        node: NodeName,
        node_obj: Node | None,
        kernel_choices: Mapping[PeerName, IPAddress | None],
        nodes: Mapping[NodeName, Node] | None,
        data_plane: DataPlane,
    ) -> bool:
        if self._key is None:
            return False
        c, n, o, k, others, d = self._key
        return (
            (c is config or c == config)
            and n == node
            and (o is node_obj or (o is not None and node_obj is not None and o == node_obj))
            and k == kernel_choices
            and (others is nodes or (others is not None and nodes is not None and others == nodes))
            and d == data_plane
        )

    def decide(
        self,
        config: Config,
        snapshot: ClusterSnapshot,
        node: NodeName,
        *,
        changed: Collection[ServiceKey] | None = None,
        kernel_choices: Mapping[PeerName, IPAddress | None] = NO_KERNEL_CHOICES,
        data_plane: DataPlane = DATA_PLANE_UNCHECKED,
    ) -> Decision:
        node_obj = snapshot.nodes.get(node)
        # With a fan-out cap every Node is an input (the candidates, rule 7): any Node
        # added, removed or changed decides everything again. Node heartbeats never reach
        # the snapshot, so this is rare.
        others = snapshot.nodes if any(a.max_nodes for a in config.advertisements) else None
        before: dict[PeerName, dict[IPNetwork, RouteAttributes]] | None = None
        # A new data-plane state starts from scratch like a new config: it changes
        # seldom (a check crossing its threshold), so a full pass then costs little.
        if self._ctx is None or not self._same_context(
            config, node, node_obj, kernel_choices, others, data_plane
        ):
            before = self._by_peer
            self._key = (config, node, node_obj, dict(kernel_choices), others, data_plane)
            self._reset(
                _context(config, node_obj, node, kernel_choices, snapshot.nodes, data_plane)
            )
            changed = None
        ctx = self._ctx
        assert ctx is not None
        memo = self._memo
        services = snapshot.services
        all_slices = snapshot.endpoint_slices
        dirty: set[RouteKey] = set()
        self._routes_moved = self._skips_moved = False
        self._changes = {}
        self.desired_changed = False
        walk: Iterable[tuple[ServiceKey, Service]]
        valid = self._valid
        if changed is None:
            for gone in memo.keys() - services.keys():
                self._remove(gone, memo.pop(gone).part, dirty)
            for gone in valid.keys() - services.keys():
                del valid[gone]
            walk = services.items()
        else:
            present: list[tuple[ServiceKey, Service]] = []
            for key in changed:
                svc = services.get(key)
                if svc is not None:
                    present.append((key, svc))
                else:
                    valid.pop(key, None)
                    if (held := memo.pop(key, None)) is not None:
                        self._remove(key, held.part, dirty)
            walk = present
        for key, svc in walk:
            slices = all_slices.get(key, ())
            held = memo.get(key)
            if (
                held is not None
                and (held.service is svc or held.service == svc)
                and (held.slices is slices or held.slices == slices)
            ):
                # Keep the newest objects so the next pass matches by identity.
                held.service, held.slices = svc, slices
                continue
            part = _service_part(ctx, svc, slices, valid.get(key))
            if part.in_force is None:
                valid.pop(key, None)
            else:
                valid[key] = part.in_force
            if held is not None:
                held.service, held.slices = svc, slices
                if held.part == part:
                    continue
                self._remove(key, held.part, dirty)
                held.part = part
            else:
                memo[key] = _Memo(svc, slices, part)
            self._add(key, part, dirty)
        self._rebuild(dirty)
        if self._routes_moved:
            self._sorted_routes = tuple(self._route_list)
        if self._skips_moved:
            self._sorted_skips = tuple(self._skip_list)
            self._sorted_notices = tuple(self._notice_list)
        if before is None:
            self.last_changes = self._changes
        else:
            self.last_changes = None
            self.desired_changed = before != self._by_peer
        # Not kept past the pass: after a full pass it names every route (10,000
        # prefixes in sets).
        self._changes = {}
        return Decision(
            node=node,
            routes=self._sorted_routes,
            skipped=self._sorted_skips,
            peers_skipped=ctx.scope.node_peers.skipped,
            notices=self._sorted_notices,
        )

    def _add(self, key: ServiceKey, part: _Part, dirty: set[RouteKey]) -> None:
        for skip in part.skips:
            _insort(self._skip_order, self._skip_list, skip_sort_key(skip), skip)
            self._skips_moved = True
        for notice in part.notices:
            _insort(self._notice_order, self._notice_list, notice_sort_key(notice), notice)
            self._skips_moved = True
        groups = self._groups
        for contribution in part.contributions:
            target = route_key(contribution[0], contribution[1])
            group = groups.get(target)
            if group is None:
                groups[target] = (key, (contribution,))
            elif isinstance(group, tuple):
                if group[0] == key:
                    groups[target] = (key, (*group[1], contribution))
                else:
                    groups[target] = {group[0]: group[1], key: (contribution,)}
            else:
                group[key] = (*group.get(key, ()), contribution)
            dirty.add(target)

    def _remove(self, key: ServiceKey, part: _Part, dirty: set[RouteKey]) -> None:
        for skip in part.skips:
            _delete(self._skip_order, self._skip_list, skip_sort_key(skip))
            self._skips_moved = True
        for notice in part.notices:
            _delete(self._notice_order, self._notice_list, notice_sort_key(notice))
            self._skips_moved = True
        groups = self._groups
        for peer_name, prefix, *_ in part.contributions:
            target = route_key(peer_name, prefix)
            group = groups.get(target)
            if isinstance(group, tuple):
                if group[0] == key:
                    del groups[target]
            elif group is not None:
                group.pop(key, None)
                if len(group) == 1:
                    groups[target] = next(iter(group.items()))
            dirty.add(target)

    def _rebuild(self, dirty: set[RouteKey]) -> None:
        """Merge again the routes whose contributions changed; keep the order sorted. A
        route that merges to an equal Route keeps its object (and is no change). New
        routes are put in their places after the loop: one at a time while few, by one
        sort when many (a first pass: inserting 30,000 routes one by one moves the lists'
        tails each time, quadratic, ~0.7 s at 30,000 routes)."""
        added: list[tuple[RouteKey, Route]] = []
        for target in dirty:
            group = self._groups.get(target)
            old = self._routes.get(target)
            if not group:
                self._groups.pop(target, None)
                self._set_route_notices(target, ())
                if old is not None:
                    del self._routes[target]
                    at = bisect.bisect_left(self._route_order, target)
                    del self._route_order[at]
                    del self._route_list[at]
                    peer_routes = self._by_peer[old.peer]
                    del peer_routes[old.prefix]
                    if not peer_routes:
                        del self._by_peer[old.peer]
                    self._changed(old)
                    self.desired_changed = True
                continue
            alone = (
                self._alone_route(group[0], group[1][0])
                if isinstance(group, tuple) and len(group[1]) == 1
                else None
            )
            left_out: tuple[Notice, ...] = ()
            if alone is not None:
                route = alone
            else:
                merged = _Merged()
                members = (group,) if isinstance(group, tuple) else group.items()
                for service, contributions in members:
                    for _, _, adv, peer, wanted, endpoints in contributions:
                        merged.add(service, adv, peer, wanted, endpoints)
                route, left_out = merged.build(contributions[0][0], contributions[0][1])
            peer_name, prefix = route.peer, route.prefix
            self._set_route_notices(target, left_out)
            if old is None:
                added.append((target, route))
                self.desired_changed = True
            elif old == route:
                continue
            else:
                self._route_list[bisect.bisect_left(self._route_order, target)] = route
                self.desired_changed |= old.attributes != route.attributes
            self._routes[target] = route
            self._by_peer.setdefault(peer_name, {})[prefix] = route.attributes
            self._changed(route)
        if len(added) <= max(16, math.isqrt(len(self._route_order))):
            for target, route in added:
                at = bisect.bisect_left(self._route_order, target)
                self._route_order.insert(at, target)
                self._route_list.insert(at, route)
        elif added:
            pairs = sorted(
                [*zip(self._route_order, self._route_list, strict=True), *added],
                key=_first,
            )
            self._route_order = [target for target, _ in pairs]
            self._route_list = [route for _, route in pairs]

    def _alone_route(self, service: ServiceKey, contribution: _Contribution) -> Route | None:
        """The route of one Service's one contribution, as _Merged builds it, without
        merging it again: its attributes depend only on the advertisement, the peer,
        the Service's wanted attributes, the endpoint count and the IP version, which
        10,000 Services share in a handful of combinations (the merge was half of a
        first decision at 10,000 Services). None when that merge leaves communities
        out: its notices name the Service and the prefix, so it is merged each time."""
        peer_name, prefix, adv, peer, wanted, endpoints = contribution
        key = (id(adv), id(peer), id(wanted), endpoints, prefix.version)
        found = self._alone.get(key)
        if found is None:
            merged = _Merged()
            merged.add(service, adv, peer, wanted, endpoints)
            route, left_out = merged.build(peer_name, prefix)
            if len(self._alone) >= _ALONE_MAX:
                self._alone.clear()
            found = self._alone[key] = (adv, peer, wanted, None if left_out else route.attributes)
            return None if left_out else route
        attributes = found[3]
        return None if attributes is None else Route(peer_name, prefix, attributes, (service,))

    def _set_route_notices(self, target: RouteKey, notices: tuple[Notice, ...]) -> None:
        """Replace the notices route `target`'s merge gave last time with `notices`."""
        old = self._route_notices.pop(target, ())
        if old == notices:
            if notices:
                self._route_notices[target] = notices
            return
        for notice in old:
            _delete(self._notice_order, self._notice_list, notice_sort_key(notice))
        for notice in notices:
            _insort(self._notice_order, self._notice_list, notice_sort_key(notice), notice)
        if notices:
            self._route_notices[target] = notices
        self._skips_moved = True

    def _changed(self, route: Route) -> None:
        self._routes_moved = True
        self._changes.setdefault(route.peer, set()).add(route.prefix)

    def desired(self) -> dict[PeerName, dict[IPNetwork, RouteAttributes]]:
        """The last Decision's by_peer(), kept up to date per route rather than rebuilt
        from all routes (a fresh copy: C-speed dictionary copies)."""
        return {peer: dict(routes) for peer, routes in self._by_peer.items()}

    def desired_view(self) -> Mapping[PeerName, Mapping[IPNetwork, RouteAttributes]]:
        """desired() without the copy: the Decider's own per-peer dictionaries, valid
        until the next decide() (read them, keep nothing; with `last_changes`, what a
        driver needs to update its copy in O(changes))."""
        return self._by_peer
