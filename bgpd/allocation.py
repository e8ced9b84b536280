"""The pure IP allocation: which LoadBalancer Service gets which address from which pool.

This is the controller's brain; the controller writes the result to
status.loadBalancer.ingress and reports failures as Events. Like decide(), it is purely
computational: no I/O, no logging, no clock; all state comes in as parameters, and the
previous run's result is read back from the Services themselves (their ingress IPs), so
a restarted controller reaches the same answer.

The rules are MetalLB's controller and allocator (controller/service.go,
internal/allocator/allocator.go), which users of MetalLB-style config expect:

* Only Services of type LoadBalancer whose loadBalancerClass is unset or ours.
* Stable: an IP a Service already holds stays while it is still valid: it lies in one
  pool (and not on a .0/.255 address the pool avoids), that pool still admits the
  Service (serviceAllocation), its family still fits the Service, it still satisfies
  the sharing rules, and the Service does not now request other IPs or another pool.
  Otherwise the Service is allocated afresh, like MetalLB's ClearAssignment.
* Requested IPs: the annotation metallb.io/loadBalancerIPs (comma list, at most one per
  family) or spec.loadBalancerIP, not both; the deprecated metallb.universe.tf/ names
  are read when the metallb.io/ ones are absent. A requested IP may come from a pool
  with autoAssign false.
* Requested pool: metallb.io/address-pool; the pool need not auto-assign.
* Otherwise: first the pools with a serviceAllocation that admits the Service (by
  namespaces, namespaceSelectors and serviceSelectors), in priority order (a lower
  number first; pools with a priority before pools without), then the pools without a
  serviceAllocation, in config order; only pools with autoAssign true. In a pool, the
  lowest acceptable address; avoidBuggyIPs skips IPv4 addresses ending in .0 or .255
  (firmware that treats them as network/broadcast addresses drops the traffic).
* Families: spec.ipFamilies and ipFamilyPolicy. SingleStack takes the first family;
  RequireDualStack needs one address of each family from one pool; PreferDualStack
  (with two families) takes both when a pool has both, else one family from the first
  pool that has it, preferring the primary (first listed) family, as MetalLB does.
  Requested IPs must cover the Service's families, except that a PreferDualStack
  Service may request one family only (MetalLB rejects that, yet keeps such an IP once
  held and then flaps adding and clearing the second family; we accept it and add
  nothing to requested IPs, which is stable).
  Kubernetes always fills spec.ipFamilies; when it is empty (hand-made test objects) the
  family comes from the requested IPs, else IPv4.
* Sharing (metallb.io/allow-shared-ip): Services may hold the same IP when both carry
  the same key, their ports (protocol and number) are disjoint, and both use
  externalTrafficPolicy Cluster or both Local with identical pod selectors (otherwise
  kube-proxy would send one Service's traffic to nodes without the other's pods).
  An IP already shared under the key is taken when it is the lowest acceptable address.

* Dual-stack ingress: IPv4 first for IPs handed out (as MetalLB writes it); kept IPs
  keep the status's order, so a valid status is never rewritten.

Order, which is what makes allocation stable:
1. Every Service that holds still-valid IPs keeps them. Two holders of one IP that may
   no longer share it (one changed its sharing key, ports, or backend): the incumbent
   keeps it, i.e. the one whose sharing terms did not change since the previous run
   (`previous`); MetalLB re-checks only the edited Service, with the same effect. A
   Service that did not change never loses or changes its IP because another one did.
   Without a previous run, namespace/name order settles it.
2. Services that request IPs (spec.loadBalancerIP, metallb.io/loadBalancerIPs), so an
   automatic choice never takes a requested address while another one is free.
3. PreferDualStack holders get their second family.
4. The rest, automatically: Services that had IPs first, each group by namespace/name.
The result does not depend on input order, and feeding it back (as the next run reads
it from status, with the result as `previous`) changes nothing.
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from bgpd.attributes import excerpt
from bgpd.model import (
    Config,
    IPAddress,
    IPAddressPool,
    Namespace,
    PoolName,
    Service,
    ServiceKey,
    TrafficPolicy,
    selectors_match,
)
from bgpd.objects import is_our_load_balancer

ANNOTATION_LOAD_BALANCER_IPS = "metallb.io/loadBalancerIPs"
ANNOTATION_ADDRESS_POOL = "metallb.io/address-pool"
ANNOTATION_ALLOW_SHARED_IP = "metallb.io/allow-shared-ip"
#: Written back by the controller, as MetalLB does, so users see where an IP came from.
ANNOTATION_IP_ALLOCATED_FROM_POOL = "metallb.io/ip-allocated-from-pool"
DEPRECATED_PREFIX = "metallb.universe.tf/"
#: The API server sets this label on every Namespace (Kubernetes 1.22+), so
#: namespaceSelectors can use it even when no Namespace objects were given.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class FailureReason(StrEnum):
    """Why a Service got no IP; camelCase like MetalLB's event reasons and our SkipReason."""

    INVALID_ANNOTATION = "invalidAnnotation"
    UNKNOWN_POOL = "unknownPool"
    POOL_NOT_ALLOWED = "poolNotAllowed"
    NO_POOL_MATCHES = "noPoolMatches"
    POOL_EXHAUSTED = "poolExhausted"
    REQUESTED_IP_NOT_IN_POOL = "requestedIPNotInPool"
    REQUESTED_IP_IN_USE = "requestedIPInUse"
    REQUESTED_IP_NOT_IN_REQUESTED_POOL = "requestedIPNotInRequestedPool"
    CONFLICTING_SHARING_KEY = "conflictingSharingKey"
    IP_FAMILY_MISMATCH = "ipFamilyMismatch"


@dataclass(frozen=True, slots=True)
class SharingTerms:
    """What decides whether a Service may share an IP with another (MetalLB's sharing
    key, backend key and ports). Recorded with each assignment, so that the next run
    can tell which of two Services that shared an IP is the one that changed."""

    key: str
    #: Empty for externalTrafficPolicy Cluster; the pod selector as text for Local.
    backend: str
    ports: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Assignment:
    service: ServiceKey
    #: At most one address per family: IPv4 first when handed out now (ingress_order),
    #: in the status's order when kept.
    ips: tuple[IPAddress, ...]
    pool: PoolName
    #: The sharing terms the IPs are held under (None only in hand-made results).
    terms: SharingTerms | None = None


@dataclass(frozen=True, slots=True)
class AllocationFailure:
    service: ServiceKey
    reason: FailureReason
    message: str


@dataclass(frozen=True, slots=True)
class AllocationResult:
    assignments: Mapping[ServiceKey, Assignment] = field(
        default_factory=lambda: MappingProxyType({})
    )
    failures: Mapping[ServiceKey, AllocationFailure] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: Why the IPs in a Service's status were not kept (the Service was allocated afresh,
    #: or failed), for people: explain --allocation shows it.
    released: Mapping[ServiceKey, str] = field(default_factory=lambda: MappingProxyType({}))


class _Failed(Exception):
    """Internal: carries a failure out of the nested allocation steps."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# --------------------------------------------------------------------------- per Service


def _annotation(service: Service, name: str) -> str | None:
    """metallb.io/<name>, falling back to the deprecated metallb.universe.tf/<name>."""
    value = service.annotations.get(f"metallb.io/{name}")
    if value is None:
        value = service.annotations.get(f"{DEPRECATED_PREFIX}{name}")
    return value


def sharing_key(service: Service) -> str:
    """The Service's sharing key (metallb.io/allow-shared-ip), "" when it has none."""
    return _annotation(service, "allow-shared-ip") or ""


@dataclass(frozen=True, slots=True)
class _Request:
    """What one Service asks for, parsed once."""

    key: ServiceKey
    families: tuple[int, ...]
    prefer_dual: bool
    requested_ips: tuple[IPAddress, ...]
    pool: str | None
    sharing: str
    backend: str
    ports: frozenset[tuple[str, int]]

    @property
    def terms(self) -> SharingTerms:
        return SharingTerms(self.sharing, self.backend, self.ports)


def _family(name: str) -> int:
    if name == "IPv4":
        return 4
    if name == "IPv6":
        return 6
    raise _Failed(FailureReason.IP_FAMILY_MISMATCH, f"spec.ipFamilies: unknown family {name!r}")


def _request(service: Service) -> _Request:
    key = service.key
    raw_ips = _annotation(service, "loadBalancerIPs")
    if raw_ips and service.load_balancer_ip:
        raise _Failed(
            FailureReason.INVALID_ANNOTATION,
            f"{ANNOTATION_LOAD_BALANCER_IPS} and spec.loadBalancerIP are both set",
        )
    texts = [t.strip() for t in raw_ips.split(",")] if raw_ips else []
    if not texts and service.load_balancer_ip:
        texts = [service.load_balancer_ip.strip()]
    requested: list[IPAddress] = []
    for text in texts:
        try:
            requested.append(ipaddress.ip_address(text))
        except ValueError as exc:
            raise _Failed(
                FailureReason.INVALID_ANNOTATION,
                f"requested IP {excerpt(text)} is not an IP address",
            ) from exc
    if len(requested) > 2 or len({ip.version for ip in requested}) != len(requested):
        raise _Failed(
            FailureReason.INVALID_ANNOTATION,
            f"{ANNOTATION_LOAD_BALANCER_IPS}: at most one IPv4 and one IPv6 address",
        )

    listed = tuple(dict.fromkeys(_family(f) for f in service.ip_families))
    if not listed:
        listed = tuple(ip.version for ip in requested) or (4,)
    policy = service.ip_family_policy or "SingleStack"
    if policy == "RequireDualStack":
        families = listed + tuple(f for f in (4, 6) if f not in listed)
    elif policy == "PreferDualStack":
        families = listed
    else:
        families = listed[:1]

    backend = ""
    if service.external_traffic_policy is TrafficPolicy.LOCAL:
        # MetalLB's backend key: the selector as text; Local Services may share an IP
        # only when they select the same pods.
        backend = ",".join(f"{k}={v}" for k, v in sorted((service.selector or {}).items()))
    return _Request(
        key=key,
        families=families,
        prefer_dual=policy == "PreferDualStack" and len(families) == 2,
        requested_ips=tuple(requested),
        pool=_annotation(service, "address-pool") or None,
        sharing=sharing_key(service),
        backend=backend,
        ports=frozenset((p.protocol, p.port) for p in service.ports),
    )


def _family_name(families: Iterable[int]) -> str:
    return " and ".join(f"IPv{f}" for f in families)


def _ips_text(ips: Iterable[IPAddress]) -> str:
    return ", ".join(map(str, ips))


# --------------------------------------------------------------------------- pools


def _buggy(ip: IPAddress) -> bool:
    """IPv4 .0 and .255 addresses confuse some consumer firmware (MetalLB avoidBuggyIPs)."""
    return ip.version == 4 and int(ip) & 0xFF in (0, 0xFF)


def _in_pool(pool: IPAddressPool, ip: IPAddress) -> bool:
    return pool.contains(ip) and not (pool.avoid_buggy_ips and _buggy(ip))


def _count_residue(first: int, last: int, residue: int) -> int:
    """How many x in [first, last] have x % 256 == residue."""
    return (last - residue) // 256 - (first - 1 - residue) // 256


def pool_size(pool: IPAddressPool) -> int:
    """Usable addresses of a pool: every address, less .0/.255 when it avoids them."""
    total = 0
    for r in pool.addresses:
        size = r.size
        if pool.avoid_buggy_ips and r.version == 4:
            first, last = int(r.first), int(r.last)
            size -= _count_residue(first, last, 0) + _count_residue(first, last, 255)
        total += size
    return total


def _namespace_labels(namespace: str, namespaces: Mapping[str, Namespace]) -> Mapping[str, str]:
    ns = namespaces.get(namespace)
    labels = dict(ns.labels) if ns is not None else {}
    labels.setdefault(NAMESPACE_NAME_LABEL, namespace)
    return labels


def pool_admits(pool: IPAddressPool, service: Service, namespaces: Mapping[str, Namespace]) -> bool:
    """IPAddressPool.spec.serviceAllocation: namespaces and namespaceSelectors restrict the
    Service's namespace (either may match), serviceSelectors its labels; no
    serviceAllocation, or an empty one, admits every Service."""
    sa = pool.service_allocation
    if sa is None:
        return True
    if sa.namespaces or sa.namespace_selectors:
        by_name = service.namespace in sa.namespaces
        by_label = bool(sa.namespace_selectors) and selectors_match(
            sa.namespace_selectors, _namespace_labels(service.namespace, namespaces)
        )
        if not (by_name or by_label):
            return False
    return selectors_match(sa.service_selectors, service.labels)


def _priority_key(indexed: tuple[int, IPAddressPool]) -> tuple[int, int, int]:
    index, pool = indexed
    priority = pool.service_allocation.priority if pool.service_allocation else None
    if priority is None or priority <= 0:
        # MetalLB: 0 (unset) sorts after every explicit priority.
        return (1, 0, index)
    return (0, priority, index)


# --------------------------------------------------------------------------- state


@dataclass(slots=True)
class _User:
    key: ServiceKey
    sharing: str
    backend: str
    ports: frozenset[tuple[str, int]]


class PoolIndex:
    """Which pools hold an address, by binary search: the config's address ranges cut
    into segments (per IP family, between every range's first address and the one after
    its last), each with the indexes, in config order, of the pools whose ranges cover
    it. A pass looks up every Service's current IPs; scanning the pools for each made it
    Services x pools (250 us per Service at 100 pools). Overlapping pools, which config
    validation refuses, are still answered right."""

    def __init__(self, pools: tuple[IPAddressPool, ...]) -> None:
        self._starts: dict[int, list[int]] = {}
        self._holders: dict[int, list[tuple[int, ...]]] = {}
        for version in {r.version for p in pools for r in p.addresses}:
            spans = [
                (int(r.first), int(r.last) + 1, i)
                for i, p in enumerate(pools)
                for r in p.addresses
                if r.version == version
            ]
            cuts = sorted({edge for first, end, _ in spans for edge in (first, end)})
            holders = [
                tuple(sorted({i for first, end, i in spans if first <= cut < end})) for cut in cuts
            ]
            self._starts[version], self._holders[version] = cuts, holders

    def holding(self, ip: IPAddress) -> tuple[int, ...]:
        """The indexes (config order) of the pools with a range that contains ``ip``."""
        starts = self._starts.get(ip.version)
        if not starts:
            return ()
        at = bisect.bisect_right(starts, int(ip)) - 1
        return self._holders[ip.version][at] if at >= 0 else ()


@dataclass(slots=True)
class _State:
    config: Config
    users: dict[IPAddress, list[_User]] = field(default_factory=dict)
    #: Lowest offset in each (pool, range) that may still be free: addresses below it
    #: are taken, and within one run addresses are only ever taken, never released.
    hints: dict[tuple[PoolName, int], int] = field(default_factory=dict)
    #: sharing key -> the IPs that Services with that key hold.
    shared: dict[str, set[IPAddress]] = field(default_factory=dict)
    #: (pool, family) with no free address left (same reason as `hints`: it stays so for
    #: the run). Without it every Service walked each full pool's ranges again: with
    #: Services filling pools in order, a pass grew with Services x full pools.
    full: set[tuple[PoolName, int]] = field(default_factory=set)
    #: Built at the first lookup (pool_of_all).
    index: PoolIndex | None = None

    def conflict(self, req: _Request, ip: IPAddress) -> tuple[FailureReason, str] | None:
        """None when `req` may use `ip` next to its current users (MetalLB checkSharing)."""
        for user in self.users.get(ip, ()):
            if user.key == req.key:
                continue
            if not user.sharing or user.sharing != req.sharing:
                return (
                    FailureReason.REQUESTED_IP_IN_USE,
                    f"{ip} is used by {user.key}, and the two do not share an "
                    f"{ANNOTATION_ALLOW_SHARED_IP} key",
                )
            if user.backend != req.backend:
                return (
                    FailureReason.CONFLICTING_SHARING_KEY,
                    f"{ip} is shared with {user.key} under key {excerpt(req.sharing)}, but IP "
                    "sharing needs externalTrafficPolicy Cluster on both or Local with "
                    "the same selector",
                )
            overlap = user.ports & req.ports
            if overlap:
                ports = ", ".join(f"{proto}/{port}" for proto, port in sorted(overlap))
                return (
                    FailureReason.CONFLICTING_SHARING_KEY,
                    f"{ip} is shared with {user.key} under key {excerpt(req.sharing)}, and port "
                    f"{ports} is used by both",
                )
        return None

    def take(self, req: _Request, ips: Iterable[IPAddress]) -> None:
        for ip in ips:
            self.users.setdefault(ip, []).append(
                _User(req.key, req.sharing, req.backend, req.ports)
            )
            if req.sharing:
                self.shared.setdefault(req.sharing, set()).add(ip)

    def pool_of_all(self, ips: tuple[IPAddress, ...]) -> IPAddressPool | None:
        """The one pool holding every address (MetalLB poolFor): the first in config
        order, as a scan of the pools would find it."""
        if not ips:
            return self.config.pools[0] if self.config.pools else None
        if self.index is None:
            self.index = PoolIndex(self.config.pools)
        rest = [set(self.index.holding(ip)) for ip in ips[1:]]
        for i in self.index.holding(ips[0]):
            pool = self.config.pools[i]
            if all(i in held for held in rest) and all(_in_pool(pool, ip) for ip in ips):
                return pool
        return None

    def lowest(self, pool: IPAddressPool, req: _Request, family: int) -> IPAddress | None:
        """The lowest address of `family` in `pool` that `req` may use: the first free one,
        or a lower one already shared under req's key."""
        best: IPAddress | None = None
        full = (pool.name, family) in self.full
        for index, r in enumerate(() if full else pool.addresses):
            if r.version != family:
                continue
            hint_key = (pool.name, index)
            offset = self.hints.get(hint_key, 0)
            # The range's own address class: ip_address(int) would read a small IPv6
            # value such as ::5 as IPv4.
            make = type(r.first)
            first, last = int(r.first), int(r.last)
            while first + offset <= last:
                ip = make(first + offset)
                if (pool.avoid_buggy_ips and _buggy(ip)) or ip in self.users:
                    offset += 1
                    continue
                break
            self.hints[hint_key] = offset
            if first + offset <= last:
                best = make(first + offset)
                break
        if best is None:
            self.full.add((pool.name, family))
        if req.sharing:
            for ip in sorted(self.shared.get(req.sharing, ()), key=int):
                if best is not None and int(ip) >= int(best):
                    break
                if ip.version == family and _in_pool(pool, ip) and self.conflict(req, ip) is None:
                    return ip
        return best


# --------------------------------------------------------------------------- steps


def ingress_order(ips: Iterable[IPAddress]) -> tuple[IPAddress, ...]:
    """IPv4 first, the order MetalLB writes a dual-stack ingress in (its pools list their
    IPv4 ranges first), whatever spec.ipFamilies says: a takeover from MetalLB then
    writes what MetalLB wrote, and readers of ingress[0] see no change. Only for IPs
    handed out now; IPs kept from the status keep the status's order."""
    return tuple(sorted(ips, key=lambda ip: ip.version))


def _keep_current(
    state: _State, req: _Request, service: Service, namespaces: Mapping[str, Namespace]
) -> Assignment | str | None:
    """The Service's current IPs when they are all still valid; else why not (None when
    it holds no IP)."""
    current = tuple(dict.fromkeys(service.ingress_ips))
    if not current:
        return None
    if len(current) > 2 or len({ip.version for ip in current}) != len(current):
        return "the status holds more than one address of a family"
    versions = {ip.version for ip in current}
    if not versions <= set(req.families):
        held = _family_name(sorted(versions))
        return f"the status holds {held} addresses but the Service is {_family_name(req.families)}"
    if len(current) < len(req.families) and not req.prefer_dual:
        wanted = _family_name(req.families)
        return f"the status lacks an address of each family; the Service is {wanted}"
    pool = state.pool_of_all(current)
    if pool is None:
        return "not in one IPAddressPool (or a .0/.255 address its pool avoids)"
    if not pool_admits(pool, service, namespaces):
        return f"pool {pool.name}'s serviceAllocation does not admit this Service"
    if req.pool is not None and pool.name != req.pool:
        return f"from pool {pool.name}, but the Service asks for pool {req.pool}"
    if req.requested_ips and set(req.requested_ips) != set(current):
        return f"the Service requests {_ips_text(req.requested_ips)}"
    for ip in current:
        problem = state.conflict(req, ip)
        if problem is not None:
            return problem[1]
    # The status's own order: a valid status is never rewritten (see ingress_order).
    return Assignment(req.key, current, pool.name, req.terms)


def _add_family(state: _State, req: _Request, kept: Assignment) -> Assignment:
    """MetalLB AllocateFromPoolForAdditionalFamily: a PreferDualStack Service holding one
    address gets the other family from the same pool when it has a free one. Not when
    the Service requested its IPs: MetalLB adds one there too, then finds the pair
    unequal to the request on the next pass and clears it, for ever."""
    if not req.prefer_dual or len(kept.ips) != 1 or req.requested_ips:
        return kept
    pool = state.config.pool(kept.pool)
    assert pool is not None  # kept.pool came from config.pools
    (missing,) = set(req.families) - {ip.version for ip in kept.ips}
    extra = state.lowest(pool, req, missing)
    if extra is None:
        return kept
    return Assignment(req.key, ingress_order((*kept.ips, extra)), kept.pool, req.terms)


def _assign_requested(
    state: _State, req: _Request, service: Service, namespaces: Mapping[str, Namespace]
) -> Assignment:
    ips = req.requested_ips
    versions = {ip.version for ip in ips}
    if not (versions == set(req.families) or (req.prefer_dual and versions <= set(req.families))):
        raise _Failed(
            FailureReason.IP_FAMILY_MISMATCH,
            f"requested {_ips_text(ips)} but the Service is {_family_name(req.families)}",
        )
    pool = state.pool_of_all(ips)
    if pool is None:
        raise _Failed(
            FailureReason.REQUESTED_IP_NOT_IN_POOL,
            f"requested {_ips_text(ips)} is not in one IPAddressPool"
            + (" (or is a .0/.255 address its pool avoids)" if any(map(_buggy, ips)) else ""),
        )
    if not pool_admits(pool, service, namespaces):
        raise _Failed(
            FailureReason.POOL_NOT_ALLOWED,
            f"pool {pool.name}'s serviceAllocation does not admit this Service",
        )
    if req.pool is not None and pool.name != req.pool:
        raise _Failed(
            FailureReason.REQUESTED_IP_NOT_IN_REQUESTED_POOL,
            f"requested {_ips_text(ips)} is in pool {pool.name}, not in the "
            f"requested pool {req.pool}",
        )
    for ip in ips:
        problem = state.conflict(req, ip)
        if problem is not None:
            raise _Failed(*problem)
    return Assignment(req.key, ingress_order(ips), pool.name, req.terms)


def _from_pool(state: _State, req: _Request, pool: IPAddressPool) -> dict[int, IPAddress]:
    """The lowest usable address per wanted family in one pool (families it lacks or has
    no room in are absent)."""
    found: dict[int, IPAddress] = {}
    for family in req.families:
        ip = state.lowest(pool, req, family)
        if ip is not None:
            found[family] = ip
    return found


def _choose(
    state: _State, req: _Request, pools: list[IPAddressPool]
) -> tuple[IPAddressPool, tuple[IPAddress, ...]] | None:
    """MetalLB findBestPoolForService: the first pool with every wanted family; for
    PreferDualStack, failing that, the first pool with the primary family, then the
    first with the secondary one."""
    fallback: dict[int, tuple[IPAddressPool, IPAddress]] = {}
    for pool in pools:
        found = _from_pool(state, req, pool)
        if len(found) == len(req.families):
            return pool, ingress_order(found.values())
        if req.prefer_dual:
            for family, ip in found.items():
                fallback.setdefault(family, (pool, ip))
    for family in req.families:
        if family in fallback:
            pool, ip = fallback[family]
            return pool, (ip,)
    return None


def _has_families(pool: IPAddressPool, req: _Request) -> bool:
    versions = {r.version for r in pool.addresses}
    return bool(versions & set(req.families)) if req.prefer_dual else set(req.families) <= versions


def _allocate_one(
    state: _State, req: _Request, service: Service, namespaces: Mapping[str, Namespace]
) -> Assignment:
    if req.requested_ips:
        return _assign_requested(state, req, service, namespaces)
    config = state.config
    if req.pool is not None:
        pool = config.pool(req.pool)
        if pool is None:
            raise _Failed(FailureReason.UNKNOWN_POOL, f"no IPAddressPool named {req.pool!r}")
        if not pool_admits(pool, service, namespaces):
            raise _Failed(
                FailureReason.POOL_NOT_ALLOWED,
                f"pool {pool.name}'s serviceAllocation does not admit this Service",
            )
        if not _has_families(pool, req):
            raise _Failed(
                FailureReason.IP_FAMILY_MISMATCH,
                f"pool {pool.name} has no {_family_name(req.families)} addresses",
            )
        chosen = _choose(state, req, [pool])
        if chosen is None:
            raise _Failed(FailureReason.POOL_EXHAUSTED, f"pool {pool.name} has no free address")
        return Assignment(req.key, chosen[1], pool.name, req.terms)

    indexed = list(enumerate(config.pools))
    pinned = [
        p
        for _, p in sorted(
            (
                (i, p)
                for i, p in indexed
                if p.auto_assign
                and p.service_allocation is not None
                and pool_admits(p, service, namespaces)
            ),
            key=_priority_key,
        )
    ]
    general = [p for p in config.pools if p.auto_assign and p.service_allocation is None]
    for candidates in (pinned, general):
        chosen = _choose(state, req, candidates)
        if chosen is not None:
            return Assignment(req.key, chosen[1], chosen[0].name, req.terms)
    usable = [p for p in pinned + general if _has_families(p, req)]
    if not usable:
        raise _Failed(
            FailureReason.NO_POOL_MATCHES,
            f"no auto-assigning IPAddressPool with {_family_name(req.families)} addresses "
            "admits this Service",
        )
    raise _Failed(
        FailureReason.POOL_EXHAUSTED,
        f"no free address in {', '.join(p.name for p in usable)}",
    )


# --------------------------------------------------------------------------- allocate


def _allocate_all(
    state: _State,
    services: list[Service],
    requests: Mapping[ServiceKey, _Request],
    namespaces: Mapping[str, Namespace],
    assignments: dict[ServiceKey, Assignment],
    failures: dict[ServiceKey, AllocationFailure],
) -> None:
    """Allocate afresh to `services`, in order, recording each outcome."""
    for service in services:
        req = requests[service.key]
        try:
            assignment = _allocate_one(state, req, service, namespaces)
        except _Failed as failed:
            failures[service.key] = AllocationFailure(service.key, failed.reason, failed.message)
            continue
        state.take(req, assignment.ips)
        assignments[service.key] = assignment


def _incumbency(previous: AllocationResult | None) -> Callable[[_Request], int]:
    """Rank of a holder in pass 1 (lower keeps first): 0 if the previous run assigned
    it under the same sharing terms, 2 if under other terms (it changed), 1 if unknown
    (new to us, or no previous run: then namespace/name order decides)."""
    held = previous.assignments if previous is not None else {}

    def rank(req: _Request) -> int:
        before = held.get(req.key)
        if before is None or before.terms is None:
            return 1
        return 0 if before.terms == req.terms else 2

    return rank


def allocate(
    config: Config,
    services: Iterable[Service],
    namespaces: Mapping[str, Namespace],
    previous: AllocationResult | None = None,
) -> AllocationResult:
    """Assign addresses to every LoadBalancer Service of ours. Services of other types
    or classes appear in neither map; the controller clears status it had set on them.

    `previous` is the result of the run before (the controller keeps it): when two
    Services that shared an IP can no longer share it, the one whose sharing terms did
    not change since keeps it (the incumbent), as in MetalLB where only the edited
    Service is re-checked. Without it, namespace/name order decides."""
    rank = _incumbency(previous)
    parsed: list[tuple[Service, _Request | _Failed]] = []
    for service in services:
        if not is_our_load_balancer(service, config.speaker.load_balancer_class):
            continue
        try:
            parsed.append((service, _request(service)))
        except _Failed as failed:
            parsed.append((service, failed))
    # Holders first; among them the incumbents (unchanged terms) before the changed.
    parsed.sort(
        key=lambda sr: (
            not sr[0].ingress_ips,
            rank(sr[1]) if isinstance(sr[1], _Request) else 1,
            sr[0].key,
        )
    )
    state = _State(config)
    assignments: dict[ServiceKey, Assignment] = {}
    failures: dict[ServiceKey, AllocationFailure] = {}
    requests: dict[ServiceKey, _Request] = {}
    released: dict[ServiceKey, str] = {}
    pending: list[Service] = []
    # Pass 1: every Service that holds valid IPs keeps them before anything new is
    # handed out, so no Service (not even one processed earlier) can take an address
    # that a later one holds; that is what makes feeding a result back a no-op.
    for service, parsed_req in parsed:
        if isinstance(parsed_req, _Failed):
            failures[service.key] = AllocationFailure(
                service.key, parsed_req.reason, parsed_req.message
            )
            continue
        req = requests[service.key] = parsed_req
        kept = _keep_current(state, req, service, namespaces)
        if not isinstance(kept, Assignment):
            if kept is not None:
                released[service.key] = f"{_ips_text(service.ingress_ips)}: {kept}"
            pending.append(service)
            continue
        state.take(req, kept.ips)
        assignments[service.key] = kept
    # Pass 2: Services that request IPs, so that no automatic choice takes a requested
    # address while another one is free (MetalLB settles this by event order, which can
    # go either way); then the second family for PreferDualStack holders; then the
    # automatic allocations, Services that had IPs first, each group by namespace/name.
    requested = [s for s in pending if requests[s.key].requested_ips]
    automatic = [s for s in pending if not requests[s.key].requested_ips]
    _allocate_all(state, requested, requests, namespaces, assignments, failures)
    for key, kept in list(assignments.items()):
        grown = _add_family(state, requests[key], kept)
        if grown is not kept:
            state.take(requests[key], [ip for ip in grown.ips if ip not in kept.ips])
            assignments[key] = grown
    _allocate_all(state, automatic, requests, namespaces, assignments, failures)
    return AllocationResult(
        assignments=MappingProxyType(dict(sorted(assignments.items()))),
        failures=MappingProxyType(dict(sorted(failures.items()))),
        released=MappingProxyType(dict(sorted(released.items()))),
    )


def pool_usage(config: Config, result: AllocationResult) -> Mapping[PoolName, tuple[int, int]]:
    """(usable addresses, addresses in use) per pool, for the allocator metrics. A shared
    IP counts once."""
    used: dict[PoolName, set[IPAddress]] = {p.name: set() for p in config.pools}
    for a in result.assignments.values():
        used.setdefault(a.pool, set()).update(a.ips)
    return MappingProxyType({p.name: (pool_size(p), len(used[p.name])) for p in config.pools})
