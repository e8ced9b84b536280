"""Small builders for config and cluster objects, so table-driven tests of decide() and
allocate() read as the cluster they describe. Builders only fill model types; no logic
under test lives here."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from bgpd.allocation import AllocationResult, FailureReason
from bgpd.model import (
    AddressRange,
    BGPAdvertisement,
    BGPPeer,
    ClusterSnapshot,
    Community,
    Config,
    Endpoint,
    EndpointSlice,
    IPAddressPool,
    LabelSelector,
    Namespace,
    Node,
    NodeName,
    PeerName,
    PoolName,
    Route,
    Service,
    ServiceAllocation,
    ServiceKey,
    ServicePort,
    SpeakerConfig,
    TrafficPolicy,
    frozen_map,
)
from bgpd.objects import build_snapshot


def addr_range(text: str) -> AddressRange:
    if "-" in text:
        first, last = (ipaddress.ip_address(p.strip()) for p in text.split("-"))
        return AddressRange(first=first, last=last, text=text)
    net = ipaddress.ip_network(text)
    return AddressRange(first=net[0], last=net[-1], text=text)


def pool(
    name: str,
    *addresses: str,
    auto_assign: bool = True,
    avoid_buggy_ips: bool = False,
    allocation: ServiceAllocation | None = None,
    labels: Mapping[str, str] | None = None,
) -> IPAddressPool:
    return IPAddressPool(
        name=PoolName(name),
        addresses=tuple(addr_range(a) for a in addresses),
        auto_assign=auto_assign,
        avoid_buggy_ips=avoid_buggy_ips,
        service_allocation=allocation,
        labels=frozen_map(labels),
    )


def selector(**labels: str) -> LabelSelector:
    return LabelSelector(match_labels=tuple(sorted(labels.items())))


def peer(
    name: str,
    address: str,
    *,
    my_asn: int = 64512,
    peer_asn: int = 64512,
    nodes: Iterable[LabelSelector] = (),
) -> BGPPeer:
    return BGPPeer(
        name=PeerName(name),
        my_asn=my_asn,
        peer_asn=peer_asn,
        peer_address=ipaddress.ip_address(address),
        node_selectors=tuple(nodes),
    )


def adv(
    name: str = "all",
    *,
    pools: Iterable[str] = (),
    pool_selectors: Iterable[LabelSelector] = (),
    peers: Iterable[str] = (),
    nodes: Iterable[LabelSelector] = (),
    aggregation_length: int = 32,
    aggregation_length_v6: int = 128,
    communities: Iterable[str] = (),
    large_communities: Iterable[str] = (),
    local_pref: int | None = None,
    link_bandwidth: int | None = None,
    max_nodes: int | None = None,
    services: Iterable[LabelSelector] = (),
) -> BGPAdvertisement:
    return BGPAdvertisement(
        name=name,
        ip_address_pools=tuple(PoolName(p) for p in pools),
        ip_address_pool_selectors=tuple(pool_selectors),
        aggregation_length=aggregation_length,
        aggregation_length_v6=aggregation_length_v6,
        communities=tuple(sorted(communities)),
        large_communities=tuple(sorted(large_communities)),
        local_pref=local_pref,
        peers=tuple(PeerName(p) for p in peers),
        node_selectors=tuple(nodes),
        link_bandwidth_per_endpoint=link_bandwidth,
        max_nodes=max_nodes,
        service_selectors=tuple(services),
    )


def config(
    *,
    pools: Iterable[IPAddressPool] = (),
    peers: Iterable[BGPPeer] = (),
    advertisements: Iterable[BGPAdvertisement] = (),
    communities: Mapping[str, str] | None = None,
    speaker: SpeakerConfig | None = None,
) -> Config:
    return Config(
        pools=tuple(pools),
        peers=tuple(peers),
        advertisements=tuple(advertisements),
        communities=(Community(name="aliases", communities=frozen_map(communities)),)
        if communities
        else (),
        speaker=speaker or SpeakerConfig(),
    )


def svc(
    key: str,
    *ips: str,
    local: bool = False,
    type: str = "LoadBalancer",
    lb_class: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    ports: Iterable[int | tuple[int, str]] = (80,),
    families: Iterable[str] = (),
    family_policy: str | None = None,
    load_balancer_ip: str | None = None,
    selector: Mapping[str, str] | None = None,
) -> Service:
    namespace, name = key.split("/")
    return Service(
        namespace=namespace,
        name=name,
        type=type,
        load_balancer_class=lb_class,
        external_traffic_policy=TrafficPolicy.LOCAL if local else TrafficPolicy.CLUSTER,
        ingress_ips=tuple(ipaddress.ip_address(i) for i in ips),
        load_balancer_ip=load_balancer_ip,
        ip_families=tuple(families),
        ip_family_policy=family_policy,
        ports=tuple(
            ServicePort(port=p) if isinstance(p, int) else ServicePort(port=p[0], protocol=p[1])
            for p in ports
        ),
        selector=None if selector is None else frozen_map(selector),
        labels=frozen_map(labels),
        annotations=frozen_map(annotations),
    )


def ep(
    node: str | None,
    *,
    ready: bool | None = True,
    serving: bool | None = None,
    terminating: bool | None = None,
    address: str = "10.244.0.10",
) -> Endpoint:
    return Endpoint(
        addresses=(address,),
        node_name=node,
        ready=ready,
        serving=serving,
        terminating=terminating,
    )


def eps(
    key: str, *endpoints: Endpoint, name: str | None = None, address_type: str = "IPv4"
) -> EndpointSlice:
    namespace, service = key.split("/")
    return EndpointSlice(
        namespace=namespace,
        name=name or f"{service}-abcde",
        service_name=service,
        address_type=address_type,
        endpoints=endpoints,
    )


#: A node's status.addresses unless a test says otherwise: an InternalIP of each family,
#: so every peer has a local address (bgpd.peers) and sessions depend on selectors only.
NODE_ADDRESSES = (("InternalIP", "172.31.250.11"), ("InternalIP", "fd00:99:250::11"))


def node(
    name: str,
    *,
    unavailable: bool = False,
    addresses: tuple[tuple[str, str], ...] = NODE_ADDRESSES,
    **labels: str,
) -> Node:
    return Node(
        name=NodeName(name),
        labels=frozen_map({"kubernetes.io/hostname": name, **labels}),
        network_unavailable=unavailable,
        addresses=addresses,
    )


def namespace(name: str, **labels: str) -> Namespace:
    return Namespace(name=name, labels=frozen_map(labels))


def cluster(
    services: Iterable[Service] = (),
    slices: Iterable[EndpointSlice] = (),
    nodes: Iterable[Node] = (),
    namespaces: Iterable[Namespace] = (),
) -> ClusterSnapshot:
    return build_snapshot(services, slices, nodes, namespaces)


def route_table(
    routes: Iterable[Route],
) -> list[tuple[str, str, tuple[str, ...], tuple[object, ...]]]:
    """Routes as plain, comparable tuples: (peer, prefix, services, attributes)."""
    return [
        (
            r.peer,
            str(r.prefix),
            tuple(r.services),
            (
                r.attributes.communities,
                r.attributes.large_communities,
                r.attributes.local_pref,
                r.attributes.med,
            ),
        )
        for r in routes
    ]


#: Attributes tuple of a route with no communities, local-pref or MED.
PLAIN: tuple[object, ...] = ((), (), None, None)


def changed_keys(before: ClusterSnapshot | None, after: ClusterSnapshot) -> set[ServiceKey]:
    """The Service keys whose Service or EndpointSlices differ (by equality) between two
    snapshots: at the least what the Kubernetes source's events mark dirty (all keys
    when there is no `before`)."""
    if before is None:
        return set(after.services) | set(after.endpoint_slices)
    keys = (
        before.services.keys()
        | after.services.keys()
        | before.endpoint_slices.keys()
        | after.endpoint_slices.keys()
    )
    return {
        k
        for k in keys
        if before.services.get(k) != after.services.get(k)
        or before.endpoint_slices.get(k, ()) != after.endpoint_slices.get(k, ())
    }


#: allocate()'s outcome as a table row: key -> (pool, *IPs) or the failure reason.
Expected = dict[str, tuple[str, ...] | FailureReason]


def summary(result: AllocationResult) -> Expected:
    out: Expected = {k: (a.pool, *(str(ip) for ip in a.ips)) for k, a in result.assignments.items()}
    out.update({k: f.reason for k, f in result.failures.items()})
    return out
