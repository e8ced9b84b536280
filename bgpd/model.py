"""The frozen vocabulary every layer of kube-bgpd speaks.

Three groups of types live here and nowhere else:

* the parsed configuration (MetalLB's kinds: IPAddressPool, BGPPeer, BGPAdvertisement,
  Community, BFDProfile, plus our SpeakerConfig),
* the cluster snapshot (Services, EndpointSlices, Nodes, Namespaces) as the pure
  functions need them, already converted from API objects at the edge,
* the outputs of the pure functions (routes per peer, skip reasons).

This module must not import anything but the standard library, must do no I/O and must
hold no mutable state: adapters (Kubernetes, ExaBGP, metrics, MQTT) convert to and from
these types at their boundary, so the core never sees a client library's objects.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, NewType, TypeVar

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: "namespace/name" of a Service; the one key Services are known by everywhere.
ServiceKey = NewType("ServiceKey", str)
#: metadata.name of a BGPPeer; metrics, status, MQTT topics and explain use it as is.
PeerName = NewType("PeerName", str)
#: metadata.name of an IPAddressPool.
PoolName = NewType("PoolName", str)
NodeName = NewType("NodeName", str)

EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


def frozen_map(items: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """Return a read-only copy, so a frozen dataclass cannot be changed through a dict."""
    return MappingProxyType(dict(items or {}))


def service_key(namespace: str, name: str) -> ServiceKey:
    return ServiceKey(f"{namespace}/{name}")


_T = TypeVar("_T")


class _Factory:
    """The default of a field made by a factory, in a quick_init signature (as in the
    dataclass's own)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an ``__init__`` that stores each field through the
    field's own slot descriptor instead of ``object.__setattr__(self, "name", value)``.

    Why: the cluster's objects are built by the ten thousand during a speaker's first list
    (issue 18's cold start), and the dataclass's own frozen ``__init__`` looks the field's
    slot up by name on every assignment: 1.47 us for a Service's 15 fields, 0.80 us this
    way (timeit, docs/benchmarks.md "The first LIST and the imports: session 10"). The
    signature, defaults and default factories are the dataclass's, and the instance is
    the same (tests/unit/test_model_quick_init.py compares both constructors); assigning
    to a field afterwards still raises FrozenInstanceError. Only for plain dataclasses:
    keyword-only fields, InitVar, ``init=False`` and ``__post_init__`` are refused here,
    at import, rather than half supported."""
    settings = getattr(cls, "__dataclass_params__", None)
    if not (
        is_dataclass(cls) and settings is not None and settings.frozen and "__slots__" in vars(cls)
    ):
        raise TypeError(f"{cls.__name__}: quick_init needs a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init does not call __post_init__")
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    params: list[str] = []
    body: list[str] = []
    for f in fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init needs plain positional fields")
        names[f"_set_{f.name}"] = vars(cls)[f.name].__set__
        if f.default is not MISSING:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            body.append(f"    _set_{f.name}(_self, {f.name})")
        elif f.default_factory is not MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(
                f"    _set_{f.name}(_self, _factory_{f.name}() "
                f"if {f.name} is _FACTORY else {f.name})"
            )
        else:
            params.append(f.name)
            body.append(f"    _set_{f.name}(_self, {f.name})")
    source = f"def __init__(_self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"])
    exec(source, names)  # noqa: S102  # as dataclasses makes __init__; no outside text
    init = names["__init__"]
    init.__annotations__ = {f.name: f.type for f in fields(cls)} | {"return": None}
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


# --------------------------------------------------------------------------- selectors


class SelectorOperator(StrEnum):
    """Operators of a metav1.LabelSelectorRequirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case SelectorOperator.IN:
                return present and labels[self.key] in self.values
            case SelectorOperator.NOT_IN:
                # Kubernetes: NotIn matches objects that lack the key.
                return not present or labels[self.key] not in self.values
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: matchLabels and matchExpressions, ANDed.

    An empty selector matches everything, as in Kubernetes.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


def selectors_match(selectors: tuple[LabelSelector, ...], labels: Mapping[str, str]) -> bool:
    """MetalLB's rule for a list of selectors: none means all; otherwise any one (OR)."""
    return not selectors or any(s.matches(labels) for s in selectors)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True, slots=True)
class AddressRange:
    """An inclusive range of one family; a CIDR is parsed into its first and last address."""

    first: IPAddress
    last: IPAddress
    #: The text as written, for messages and explain.
    text: str

    @property
    def version(self) -> int:
        return self.first.version

    def contains(self, ip: IPAddress) -> bool:
        return ip.version == self.first.version and int(self.first) <= int(ip) <= int(self.last)

    def networks(self) -> tuple[IPNetwork, ...]:
        """The range as the smallest list of CIDRs covering exactly it."""
        return tuple(ipaddress.summarize_address_range(self.first, self.last))

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1


@dataclass(frozen=True, slots=True)
class ServiceAllocation:
    """IPAddressPool.spec.serviceAllocation: which Services may take IPs from a pool."""

    priority: int | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selectors: tuple[LabelSelector, ...] = ()
    service_selectors: tuple[LabelSelector, ...] = ()


@dataclass(frozen=True, slots=True)
class IPAddressPool:
    name: PoolName
    addresses: tuple[AddressRange, ...]
    auto_assign: bool = True
    avoid_buggy_ips: bool = False
    service_allocation: ServiceAllocation | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)

    def contains(self, ip: IPAddress) -> bool:
        return any(r.contains(ip) for r in self.addresses)


@dataclass(frozen=True, slots=True)
class SecretRef:
    """BGPPeer.spec.passwordSecret: a kubernetes.io/basic-auth Secret's `password` key."""

    name: str
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class BGPPeer:
    name: PeerName
    my_asn: int
    peer_asn: int
    peer_address: IPAddress
    peer_port: int = 179
    source_address: IPAddress | None = None
    router_id: ipaddress.IPv4Address | None = None
    #: Seconds; 0 disables keepalives (RFC 4271 4.2). MetalLB's default is 90 s.
    hold_time: int = 90
    #: Seconds; None means hold_time / 3 as RFC 4271 suggests.
    keepalive_time: int | None = None
    #: Seconds (MetalLB's connectTime). Kept for explain and status only: ExaBGP's connect
    #: retry is hard-coded, so the loader accepts it with a warning saying so.
    connect_time: int | None = None
    password: str | None = field(default=None, repr=False)
    password_secret: SecretRef | None = None
    password_file: Path | None = None
    ebgp_multihop: bool = False
    enable_graceful_restart: bool = False
    node_selectors: tuple[LabelSelector, ...] = ()
    bfd_profile: str | None = None
    #: MetalLB's vrf: the Linux VRF device the session runs in (ExaBGP binds its socket to
    #: it, and the kernel picks the local address in the VRF's table). None: default VRF.
    vrf: str | None = None
    #: MetalLB's dynamicASN (internal/external) when set instead of peerASN. With external,
    #: peer_asn is 0 (RFC 7607 reserves AS 0, so no router sends it in its OPEN): the
    #: router's ASN is learnt from its OPEN, and the session is eBGP.
    dynamic_asn: str | None = None

    @property
    def family(self) -> int:
        """4 or 6: the address family of the session, which is also the family of the
        prefixes it carries by default (one session per family, see docs/architecture.md)."""
        return self.peer_address.version

    @property
    def is_ibgp(self) -> bool:
        return self.my_asn == self.peer_asn

    @property
    def secret_ref(self) -> SecretRef | None:
        """The Secret this peer's MD5 key comes from: its passwordSecret, unless an inline
        password or a passwordFile is set (they win; the loader refuses combinations)."""
        if self.password or self.password_file is not None:
            return None
        return self.password_secret


@dataclass(frozen=True, slots=True)
class BFDProfile:
    name: str
    receive_interval: int = 300
    transmit_interval: int = 300
    detect_multiplier: int = 3
    echo_interval: int = 50
    echo_mode: bool = False
    passive_mode: bool = False
    minimum_ttl: int = 254


@dataclass(frozen=True, slots=True)
class Community:
    """A Community object: named aliases usable in BGPAdvertisement.spec.communities."""

    name: str
    #: alias -> value as written ("65000:100" or "large:1:2:3").
    communities: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)


@dataclass(frozen=True, slots=True)
class BGPAdvertisement:
    name: str
    ip_address_pools: tuple[PoolName, ...] = ()
    ip_address_pool_selectors: tuple[LabelSelector, ...] = ()
    aggregation_length: int = 32
    aggregation_length_v6: int = 128
    #: Resolved standard communities, canonical "a:b" text, sorted.
    communities: tuple[str, ...] = ()
    #: Resolved large communities, canonical "a:b:c" text (no "large:" prefix), sorted.
    large_communities: tuple[str, ...] = ()
    local_pref: int | None = None
    peers: tuple[PeerName, ...] = ()
    node_selectors: tuple[LabelSelector, ...] = ()
    #: Weighted ECMP for externalTrafficPolicy Local (spec.linkBandwidthPerEndpoint):
    #: bytes per second each serving endpoint on the node adds to the route's
    #: link-bandwidth extended community (bgpd.bandwidth); None = no community.
    link_bandwidth_per_endpoint: int | None = None
    #: The fan-out cap (spec.maxNodes): announce each prefix from at most this many of the
    #: nodes that could, chosen by rendezvous hashing (bgpd.fanout); None: from all.
    max_nodes: int | None = None
    #: spec.serviceSelectors: the Services (by their labels) this advertisement carries;
    #: empty = every Service.
    service_selectors: tuple[LabelSelector, ...] = ()

    def selects_pool(self, pool: IPAddressPool) -> bool:
        """MetalLB: no pools and no pool selectors means every pool."""
        if not self.ip_address_pools and not self.ip_address_pool_selectors:
            return True
        return pool.name in self.ip_address_pools or any(
            s.matches(pool.labels) for s in self.ip_address_pool_selectors
        )

    def selects_service(self, labels: Mapping[str, str]) -> bool:
        """spec.serviceSelectors: none means every Service, else any selector matches."""
        return selectors_match(self.service_selectors, labels)


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class SigtermAction(StrEnum):
    """SpeakerConfig spec.onSigterm: what a graceful stop does with the node's routes."""

    #: Withdraw every route, wait until the UPDATEs left, then stop ExaBGP.
    WITHDRAW = "withdraw"
    #: RFC 8326 drain (65535:0 for drainWindow) first, then withdraw.
    DRAIN = "drain"
    #: Keep the routes at peers with graceful restart (RFC 4724): stop ExaBGP without
    #: withdrawing, so they stay as stale until the next speaker refreshes them; peers
    #: without graceful restart are withdrawn from first. Falls back to withdraw after a
    #: drain the node asked for.
    RETAIN = "retain"


@dataclass(frozen=True, slots=True)
class MQTTConfig:
    host: str
    port: int = 1883
    topic_prefix: str = "kube-bgpd"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False


@dataclass(frozen=True, slots=True)
class DataPlaneCheck:
    """SpeakerConfig spec.dataPlaneCheck: poll kube-proxy's health answers and announce
    only while they pass (a node whose proxy is broken, or still starting after a reboot,
    would drop the traffic its routes attract). kube-proxy's /healthz gates every route of
    the node; a Local Service's healthCheckNodePort gates that Service. A result changes
    the state only after `failure_threshold` (or `success_threshold`) in a row."""

    #: kube-proxy's healthz endpoint (--healthz-bind-address, port 10256 by default).
    node_url: str = "http://127.0.0.1:10256/healthz"
    #: The address healthCheckNodePorts are asked on (kube-proxy listens on every node
    #: address unless --nodeport-addresses narrows it).
    service_host: str = "127.0.0.1"
    #: Also check each Local Service's healthCheckNodePort.
    services: bool = True
    #: Seconds between two rounds of checks, and the bound on one answer.
    interval: float = 1.0
    timeout: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 2


@dataclass(frozen=True, slots=True)
class AnnotationPolicy:
    """SpeakerConfig annotationPolicy: which Services may set the attribute annotations
    (kube-bgpd.io/communities, local-pref, med) and which well-known communities they may
    use. With aggregation or a shared IP one Service's attributes land on a route that
    carries other Services too, so in a cluster shared by tenants the operator decides."""

    #: Namespaces whose Services may set attribute annotations; None: every namespace.
    namespaces: frozenset[str] | None = None
    #: Well-known community names (bgpd.attributes.WELL_KNOWN) annotations may use;
    #: None: all of them.
    allowed_well_known_communities: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class SpeakerConfig:
    """kube-bgpd.io/v1alpha1 SpeakerConfig: the daemon's own settings. Every field has a
    default so that a file holding only MetalLB kinds is a complete config."""

    #: spec.loadBalancerClass we serve; None serves Services with no class (MetalLB's default).
    load_balancer_class: str | None = None
    ignore_exclude_lb: bool = False
    exabgp_binary: str = "exabgp"
    work_dir: Path = Path("/run/kube-bgpd")
    metrics_address: str = "127.0.0.1:7473"
    mqtt: MQTTConfig | None = None
    #: Seconds to coalesce bursts of cluster events into one decision.
    debounce: float = 0.0
    log_format: LogFormat = LogFormat.TEXT
    #: Seconds routes are held with GRACEFUL_SHUTDOWN (RFC 8326) before withdrawal.
    drain_window: float = 30.0
    on_sigterm: SigtermAction = SigtermAction.WITHDRAW
    #: Also let ExaBGP listen so routers can reconnect at once (its own retry backs off to 60 s).
    listen: bool = False
    #: Announce only where the data plane works (kube-proxy's health answers); None: off.
    data_plane_check: DataPlaneCheck | None = None
    #: A reload that leaves no BGPPeer or no IPAddressPool is meant (bgpd.config.emptying);
    #: without it such a reload is refused and the running config kept.
    allow_empty_config: bool = False
    #: Who may set the per-Service attribute annotations (multi-tenancy); None: anyone.
    annotation_policy: AnnotationPolicy | None = None
    #: Also serve GET /status (peers, routes, the last decision) on metricsAddress; it is
    #: always served on the control socket in workDir.
    expose_status: bool = False
    #: Announce to a BFD-enabled peer only while its BFD session is Up (bgpd.bfd.gate).
    bfd_strict: bool = True
    #: Seconds the event loop may stall, or ExaBGP leave a command unanswered, before the
    #: watchdog kills bfdd so the routers drop the node (bgpd.bfd.watchdog).
    bfd_watchdog: float = 5.0
    #: Write this node's status objects in the cluster (ServiceBGPStatus, BGPNodeStatus).
    cluster_status: bool = True
    #: The least time between two writes of one status object, in seconds.
    status_interval: float = 1.0
    #: Status object writes per second at most (and as many at once).
    status_writes_per_second: int = 20


@dataclass(frozen=True, slots=True)
class Config:
    pools: tuple[IPAddressPool, ...] = ()
    peers: tuple[BGPPeer, ...] = ()
    advertisements: tuple[BGPAdvertisement, ...] = ()
    communities: tuple[Community, ...] = ()
    bfd_profiles: tuple[BFDProfile, ...] = ()
    speaker: SpeakerConfig = field(default_factory=SpeakerConfig)

    def pool(self, name: str) -> IPAddressPool | None:
        return next((p for p in self.pools if p.name == name), None)

    def peer(self, name: str) -> BGPPeer | None:
        return next((p for p in self.peers if p.name == name), None)

    def pool_of(self, ip: IPAddress) -> IPAddressPool | None:
        """The pool an IP belongs to; pools never overlap (the loader rejects it)."""
        return next((p for p in self.pools if p.contains(ip)), None)


# --------------------------------------------------------------------------- cluster


class TrafficPolicy(StrEnum):
    CLUSTER = "Cluster"
    LOCAL = "Local"


@quick_init
@dataclass(frozen=True, slots=True)
class ServicePort:
    port: int
    protocol: str = "TCP"
    name: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class Service:
    """A Service as the decision and the allocator need it (core/v1 Service)."""

    namespace: str
    name: str
    type: str = "LoadBalancer"
    uid: str = ""
    load_balancer_class: str | None = None
    external_traffic_policy: TrafficPolicy = TrafficPolicy.CLUSTER
    #: status.loadBalancer.ingress[].ip, in order.
    ingress_ips: tuple[IPAddress, ...] = ()
    #: spec.loadBalancerIP (deprecated upstream, still honoured).
    load_balancer_ip: str | None = None
    ip_families: tuple[str, ...] = ()
    ip_family_policy: str | None = None
    ports: tuple[ServicePort, ...] = ()
    selector: Mapping[str, str] | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    #: spec.healthCheckNodePort (Local Services): kube-proxy answers there with the
    #: node's local endpoint count, 503 when none.
    health_check_node_port: int | None = None

    @property
    def key(self) -> ServiceKey:
        return service_key(self.namespace, self.name)


@quick_init
@dataclass(frozen=True, slots=True)
class Endpoint:
    """One discovery.k8s.io/v1 endpoint. Conditions keep Kubernetes' tri-state (None = unset)."""

    addresses: tuple[str, ...] = ()
    node_name: str | None = None
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None

    @property
    def can_serve(self) -> bool:
        """MetalLB's EndpointCanServe: ready unset or true, or serving true, so a terminating
        pod that still serves keeps its route (metallb#2074, KEP-1672)."""
        return self.ready is None or self.ready or self.serving is True


@quick_init
@dataclass(frozen=True, slots=True)
class EndpointSlice:
    namespace: str
    name: str
    #: The label kubernetes.io/service-name; a slice without it belongs to no Service.
    service_name: str | None
    address_type: str = "IPv4"
    endpoints: tuple[Endpoint, ...] = ()

    @property
    def service_key(self) -> ServiceKey | None:
        return None if self.service_name is None else service_key(self.namespace, self.service_name)


@quick_init
@dataclass(frozen=True, slots=True)
class Node:
    name: NodeName
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    network_unavailable: bool = False
    #: status.addresses as (type, address), e.g. ("InternalIP", "172.31.250.11").
    addresses: tuple[tuple[str, str], ...] = ()
    #: metadata.uid: the owner the node's status objects name.
    uid: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the pure functions read about the cluster, at one instant."""

    services: Mapping[ServiceKey, Service] = field(default_factory=lambda: MappingProxyType({}))
    #: EndpointSlices grouped by the Service they belong to.
    endpoint_slices: Mapping[ServiceKey, tuple[EndpointSlice, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    nodes: Mapping[NodeName, Node] = field(default_factory=lambda: MappingProxyType({}))
    namespaces: Mapping[str, Namespace] = field(default_factory=lambda: MappingProxyType({}))

    def endpoints_of(self, key: ServiceKey) -> tuple[Endpoint, ...]:
        return tuple(ep for s in self.endpoint_slices.get(key, ()) for ep in s.endpoints)


# --------------------------------------------------------------------------- decisions


class SkipReason(StrEnum):
    """Why a LoadBalancer Service (or one of its IPs) is not announced from a node.

    MetalLB's camelCase vocabulary where MetalLB has the case; these strings appear in
    logs, Events, metrics labels, MQTT payloads and `explain` unchanged.
    """

    NO_IP_ALLOCATED = "noIPAllocated"
    NOT_OUR_CLASS = "notOurLoadBalancerClass"
    NO_ENDPOINTS = "noEndpoints"
    NO_LOCAL_ENDPOINTS = "noLocalEndpoints"
    NODE_EXCLUDED = "nodeLabeledExcludeBalancers"
    NODE_NETWORK_UNAVAILABLE = "nodeNetworkUnavailable"
    NODE_UNKNOWN = "nodeUnknown"
    IP_NOT_IN_POOL = "ipNotInAnyPool"
    NO_MATCHING_ADVERTISEMENT = "noMatchingAdvertisement"
    NO_MATCHING_PEER = "noMatchingPeer"
    NO_PEER_OF_FAMILY = "noPeerOfFamily"
    INVALID_ANNOTATION = "invalidAnnotation"
    #: The advertisement's maxNodes cap: other nodes rank higher for this prefix.
    NOT_SELECTED_FOR_FANOUT = "notSelectedForFanOut"
    #: SpeakerConfig dataPlaneCheck: kube-proxy's health answer for this node (or the
    #: Service's healthCheckNodePort) is failing, after its drain window.
    DATA_PLANE_NOT_READY = "dataPlaneNotReady"


class PeerSkipReason(StrEnum):
    """Why a BGPPeer has no session from a node (so no route goes to it from there).

    The same strings appear in `explain`, logs and render warnings."""

    #: The peer's nodeSelectors do not match the node's labels (MetalLB's rule).
    NODE_SELECTORS = "nodeSelectorsDoNotMatch"
    #: No sourceAddress, no kernel route to the peer, no InternalIP of the peer's family:
    #: ExaBGP cannot open the session (it needs a local-address for `next-hop self`).
    NO_LOCAL_ADDRESS = "noLocalAddress"


@dataclass(frozen=True, slots=True)
class PeerSkip:
    """A BGPPeer this node opens no session to, and why."""

    peer: PeerName
    reason: PeerSkipReason
    detail: str = ""


class HoldReason(StrEnum):
    """Why the live speaker holds every route back from a BGP peer it has a session with
    (bgpd.bfd.gate). camelCase like SkipReason; in explain, status, metrics and logs."""

    #: SpeakerConfig bfdStrict: the peer's BFD session is not Up (yet, or any more).
    BFD_NOT_UP = "bfdNotUp"


@dataclass(frozen=True, slots=True)
class PeerHold:
    """A peer the speaker holds its routes back from, why, and how many routes."""

    peer: PeerName
    reason: HoldReason
    routes: int = 0


@dataclass(frozen=True, slots=True, order=True)
class LinkBandwidth:
    """A link-bandwidth extended community: the announcing AS (2 octets; AS_TRANS for a
    4-octet ASN) and the bandwidth in bytes per second, as the draft defines it."""

    asn: int
    bytes_per_second: int


@dataclass(frozen=True, slots=True, order=True)
class RouteAttributes:
    """Path attributes of one announced prefix. Next hop is always `self` (the session's
    local address), so it is not an attribute here."""

    communities: tuple[str, ...] = ()
    large_communities: tuple[str, ...] = ()
    local_pref: int | None = None
    med: int | None = None
    #: RFC 8326 GRACEFUL_SHUTDOWN is added by the driver while draining, not by decide().
    #: The link-bandwidth extended community (draft-ietf-idr-link-bandwidth), for weighted
    #: ECMP of Local Services at the router (bgpd.bandwidth); None = not sent.
    link_bandwidth: LinkBandwidth | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """One prefix this node announces to one peer, and the Services it carries."""

    peer: PeerName
    prefix: IPNetwork
    attributes: RouteAttributes
    services: tuple[ServiceKey, ...]


@dataclass(frozen=True, slots=True)
class Skip:
    """A LoadBalancer Service, or one IP of it, that this node does not announce, and why."""

    service: ServiceKey
    reason: SkipReason
    ip: IPAddress | None = None
    detail: str = ""


class NoticeReason(StrEnum):
    """Something an operator should know about a Service whose routes this node decides
    on; unlike a SkipReason it withdraws nothing. The strings appear in Warning Events
    and `explain`."""

    #: An attribute annotation no longer parses: the Service keeps the attributes of its
    #: last valid annotations rather than being withdrawn for a typo.
    ANNOTATION_KEPT = "invalidAnnotationKept"
    #: An attribute the Service asks for cannot go to some of its peers (LOCAL_PREF to
    #: eBGP peers, RFC 4271 5.1.5).
    ATTRIBUTE_NOT_SENT = "attributeNotSent"
    #: An aggregate's merged communities would not fit in one BGP UPDATE: the Service's
    #: (or an advertisement's) communities are left out of that route (bgpd.update_size).
    COMMUNITIES_LEFT_OUT = "communitiesLeftOut"
    #: SpeakerConfig annotationPolicy refuses (part of) the Service's attribute
    #: annotations: announced without them.
    ANNOTATION_NOT_ALLOWED = "annotationNotAllowed"


@dataclass(frozen=True, slots=True)
class Notice:
    """A Service, and what is worth knowing about it on this node (NoticeReason)."""

    service: ServiceKey
    reason: NoticeReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DataPlane:
    """What the data-plane checks (SpeakerConfig dataPlaneCheck) say, as decide() takes
    it: whether the node may announce at all and, when `services_checked`, which Local
    Services with a healthCheckNodePort passed their check (`ready`) or are in the drain
    window after failing it (`draining`: routes with GRACEFUL_SHUTDOWN); any other such
    Service is `dataPlaneNotReady`, one not checked yet included. The default (no
    checks) gates nothing."""

    node_ready: bool = True
    services_checked: bool = False
    ready: frozenset[ServiceKey] = frozenset()
    draining: frozenset[ServiceKey] = frozenset()


#: No data-plane check: nothing gated.
DATA_PLANE_UNCHECKED = DataPlane()


@dataclass(frozen=True, slots=True)
class Decision:
    node: NodeName
    routes: tuple[Route, ...] = ()
    skipped: tuple[Skip, ...] = ()
    #: BGPPeers this node has no session with (bgpd.peers.peers_for_node): no route in
    #: `routes` goes to them; `explain` shows them with the reason.
    peers_skipped: tuple[PeerSkip, ...] = ()
    #: What is worth knowing about Services beyond their routes and skips (NoticeReason),
    #: sorted.
    notices: tuple[Notice, ...] = ()
    #: Peers the live speaker holds every route back from (bgpd.bfd.gate, bfdStrict):
    #: their routes above are not sent. Only in a speaker's answer (`explain
    #: --from-speaker`); an offline decision knows no BFD state.
    peers_held: tuple[PeerHold, ...] = ()

    def by_peer(self) -> dict[PeerName, dict[IPNetwork, RouteAttributes]]:
        """The desired set in the shape the ExaBGP driver's apply() takes."""
        out: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
        for r in self.routes:
            out.setdefault(r.peer, {})[r.prefix] = r.attributes
        return out


#: The desired route set handed to the ExaBGP driver: peer -> prefix -> attributes.
DesiredRoutes = Mapping[PeerName, Mapping[IPNetwork, RouteAttributes]]


# --------------------------------------------------------------------------- speaker state


class SessionState(StrEnum):
    """A BGP session's state as ExaBGP reports it in its neighbor-changes events."""

    DOWN = "down"
    CONNECTED = "connected"
    UP = "up"


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """What the speaker knows about one peer, for metrics, status, MQTT and explain:
    session state from ExaBGP's JSON events and three route counts, one name each
    everywhere: ``desired`` (the routes the decision wants the peer to have, as the
    drain state leaves them), ``accepted`` (ExaBGP answered ``done``: in its
    adj-rib-out, also while the session is down) and ``advertised`` (sent to the router
    in UPDATEs on the established session since it came up, and not withdrawn since:
    0 while the session is down). advertised <= accepted; after a re-establishment
    advertised climbs back as ExaBGP re-sends."""

    peer: PeerName
    address: IPAddress
    state: SessionState = SessionState.DOWN
    #: Wall-clock time (time.time()) of the last state change; None before the first.
    since: float | None = None
    #: ExaBGP's reason for the last down, e.g. "hold timer expired" or "connection refused".
    reason: str = ""
    accepted: int = 0
    pending: int = 0
    desired: int = 0
    advertised: int = 0


class RouteChange(StrEnum):
    ANNOUNCED = "announced"
    WITHDRAWN = "withdrawn"


@dataclass(frozen=True, slots=True)
class RouteEvent:
    """A route this node started or stopped advertising to a peer: ANNOUNCED when it is
    in the peer's ``advertised`` set (sent in an UPDATE on the established session and
    accepted by ExaBGP), also when its attributes there change; WITHDRAWN when it leaves
    it (withdrawn, the session down, ExaBGP's routes for the peer forgotten). The same
    set as ``kube_bgpd_bgp_prefixes_advertised`` (bgpd.exabgp.advertised)."""

    node: NodeName
    peer: PeerName
    prefix: IPNetwork
    change: RouteChange
    attributes: RouteAttributes | None
    at: float


@dataclass(frozen=True, slots=True)
class PeerEvent:
    """A BGP session state change, or (MQTT, bgpd.mqtt.MQTTPublisher.follow_peers) a change
    of the peer's route counts; the counts as in PeerStatus."""

    node: NodeName
    peer: PeerName
    state: SessionState
    reason: str
    at: float
    desired: int = 0
    accepted: int = 0
    advertised: int = 0


@dataclass(frozen=True, slots=True)
class BfdEvent:
    """A BFD session state change (``state``: bgpd.bfd.state.BfdState's value, as the
    metrics and /status say it)."""

    node: NodeName
    peer: PeerName
    state: str
    diagnostic: str
    at: float


@dataclass(frozen=True, slots=True)
class BfdTeardownEvent:
    """A BGP session torn down because its BFD session went from Up to Down
    (bgpd.bfd.gate): published to MQTT."""

    node: NodeName
    peer: PeerName
    #: bfdd's diagnostic read with the Down ("" for none).
    diagnostic: str
    at: float


SpeakerEvent = RouteEvent | PeerEvent | BfdEvent | BfdTeardownEvent


@dataclass(frozen=True, slots=True)
class RouteEvents:
    """The routes one change of a peer's advertised set changed, in order: one event per
    batch (the UPDATE reports read together, ~400 /32s each but one IPv6 /128; an
    answer; a session going down), not one per route. A first sync of 30,000 routes was
    30,000 events built and queued to every subscriber, and all but MQTT only want to
    be woken; MQTT publishes one message per route (events())."""

    node: NodeName
    peer: PeerName
    #: (prefix, attributes) advertised from now on, (prefix, None) no longer advertised.
    changes: tuple[tuple[IPNetwork, RouteAttributes | None], ...]
    at: float

    def events(self) -> Iterator[RouteEvent]:
        """The same as one RouteEvent per route."""
        for prefix, attrs in self.changes:
            change = RouteChange.WITHDRAWN if attrs is None else RouteChange.ANNOUNCED
            yield RouteEvent(self.node, self.peer, prefix, change, attrs, self.at)


@dataclass(frozen=True, slots=True)
class RoutesAccepted:
    """ExaBGP's answer changed what it holds for a peer (``accepted``: in its
    adj-rib-out, also while the session is down), without saying which routes: a wake-up
    for what shows the accepted count (the node's status object), one per answer. Not a
    RouteEvents: nothing was advertised by it (that comes with ExaBGP's UPDATE report)."""

    node: NodeName
    peer: PeerName
    at: float


#: What the ExaBGP driver hands its subscribers (bgpd.exabgp.driver.subscribe).
DriverEvent = RouteEvents | RoutesAccepted | PeerEvent
