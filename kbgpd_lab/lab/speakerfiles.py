"""The files one `kube-bgpd speaker` reads in a lab topology: its config and a cluster dump.

Role: the component tests and the benchmarks start real speakers in a node namespace
against the lab's router; this module writes what those speakers read, so a test and a
benchmark that mean the same setup get the same text: a config with one pool, one
BGPPeer (the router at ``172.31.250.1``) and one BGPAdvertisement, optionally a
SpeakerConfig; and a cluster dump (``--cluster-file``) of Nodes and LoadBalancer Services,
each Service with one ready endpoint.

Public interface: ``one_peer_config(...)``; ``node_item``, ``service_items``,
``cluster_list`` (dump building blocks) and ``node1_cluster_dump(ips)``.

What it must not do: start processes or touch the network; it only builds YAML text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from kbgpd_lab.kit import manifests
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN

#: The lab router's IPv4 address on the node LAN (``Topology.router_address(4)``).
ROUTER_V4 = "172.31.250.1"
#: node1's IPv4 address on the node LAN (``Topology.node_address(1)``).
NODE1_V4 = "172.31.250.11"


def one_peer_config(
    *,
    pool: str = "svc",
    addresses: Sequence[str] = ("10.99.100.0/24",),
    communities: Sequence[str] = (),
    peer_address: str = ROUTER_V4,
    graceful: bool = False,
    speaker: Mapping[str, Any] | None = None,
) -> str:
    """One pool, one BGPPeer to the router (hold time 9 s), one BGPAdvertisement of the
    pool (with ``communities`` when given); a SpeakerConfig with spec ``speaker`` when
    given (none otherwise)."""
    advertisement: dict[str, Any] = {"ipAddressPools": [pool]}
    if communities:
        advertisement["communities"] = list(communities)
    docs = [
        manifests.pool(pool, addresses),
        manifests.bgp_peer(
            "tor",
            my_asn=NODE_ASN,
            peer_asn=ROUTER_ASN,
            address=peer_address,
            holdTime="9s",
            enableGracefulRestart=graceful,
        ),
        manifests.advertisement(pool, **advertisement),
    ]
    if speaker is not None:
        docs.append(manifests.speaker_config(**speaker))
    return yaml.safe_dump_all(docs)


def node_item(
    name: str, address: str, *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Node with one InternalIP (and ``labels`` when given)."""
    return manifests.node(name, labels=labels, addresses=(address,))


def service_items(name: str, ip: str, *, uid: str, namespace: str = "shop") -> list[dict[str, Any]]:
    """A Cluster-policy LoadBalancer Service holding ``ip`` and its EndpointSlice with one
    ready endpoint (10.0.0.1) on node1."""
    return [
        manifests.service(name, namespace, policy="Cluster", uid=uid, ips=(ip,)),
        manifests.endpoint_slice(
            f"{name}-a", name, [manifests.endpoint("10.0.0.1", "node1")], namespace
        ),
    ]


def cluster_list(items: Iterable[dict[str, Any]]) -> str:
    """The dump text: a v1 List of ``items``."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(items)})


def node1_cluster_dump(ips: Sequence[str], node_ip: str = NODE1_V4) -> str:
    """node1 (label rack=r1) and Services shop/web0, web1, ... holding ``ips`` in order,
    each served from node1."""
    items = [node_item("node1", node_ip, labels={"rack": "r1"})]
    for i, ip in enumerate(ips):
        items += service_items(f"web{i}", ip, uid=f"u{i}")
    return cluster_list(items)
