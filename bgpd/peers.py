"""Which BGPPeers a node has a session with, and why each other one has none: pure.

One rule in one place: decide() sends routes only to these peers, and the ExaBGP
renderer writes a ``neighbor`` for exactly these peers, so `explain` never lists a
route to a peer that has no session. A peer applies on a node when

1. its nodeSelectors match the node's labels (none = every node; MetalLB's rule), and
2. the node has a local address for the session: sourceAddress, else the address the
   kernel picks to reach the peer (if of the peer's family), else the Node's InternalIP
   of the peer's family. ExaBGP 5.0.15 needs one (``next-hop self`` resolves to it) and
   rejects the whole configuration file without it.

The kernel's choice is I/O (a connected UDP socket), done by the speaker and passed in
as a mapping; callers with no kernel at hand (offline `explain`, tests) pass none, and
the rule falls back to sourceAddress and InternalIP as the renderer does. No I/O, no
logging, no clock here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from bgpd.model import (
    BGPPeer,
    Config,
    IPAddress,
    Node,
    PeerName,
    PeerSkip,
    PeerSkipReason,
    selectors_match,
)

#: "No kernel choice for any peer": what offline callers pass.
NO_KERNEL_CHOICES: Mapping[PeerName, IPAddress | None] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Session:
    """A BGPPeer this node opens a session to, with the local address it uses."""

    peer: BGPPeer
    local_address: IPAddress


@dataclass(frozen=True, slots=True)
class NodePeers:
    """peers_for_node()'s answer, both in config order."""

    sessions: tuple[Session, ...] = ()
    skipped: tuple[PeerSkip, ...] = ()

    @property
    def peers(self) -> tuple[BGPPeer, ...]:
        return tuple(s.peer for s in self.sessions)


def internal_ip(node: Node | None, version: int) -> IPAddress | None:
    """The Node's first InternalIP of an address family, from status.addresses."""
    if node is None:
        return None
    for kind, text in node.addresses:
        if kind != "InternalIP":
            continue
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        if ip.version == version:
            return ip
    return None


def local_address(
    peer: BGPPeer, *, kernel_choice: IPAddress | None, node: Node | None
) -> IPAddress | None:
    """sourceAddress, else the kernel's choice to reach the peer (only if of the peer's
    family), else the Node's InternalIP of the peer's family."""
    if peer.source_address is not None:
        return peer.source_address
    if kernel_choice is not None and kernel_choice.version == peer.family:
        return kernel_choice
    return internal_ip(node, peer.family)


def peers_for_node(
    config: Config,
    node: Node | None,
    *,
    kernel_choices: Mapping[PeerName, IPAddress | None] = NO_KERNEL_CHOICES,
) -> NodePeers:
    """The BGPPeers `node` has a session with, and a PeerSkip for every other one.

    `node` is None when the cluster does not (yet) know the node: no labels, no
    addresses. `kernel_choices` maps a peer to the source address the kernel picks to
    reach it (None or absent: no route, or not asked)."""
    labels = node.labels if node is not None else {}
    sessions: list[Session] = []
    skipped: list[PeerSkip] = []
    for peer in config.peers:
        if not selectors_match(peer.node_selectors, labels):
            skipped.append(PeerSkip(peer.name, PeerSkipReason.NODE_SELECTORS))
            continue
        addr = local_address(peer, kernel_choice=kernel_choices.get(peer.name), node=node)
        if addr is None:
            skipped.append(
                PeerSkip(
                    peer.name,
                    PeerSkipReason.NO_LOCAL_ADDRESS,
                    f"no local address of IPv{peer.family} (no sourceAddress, no route to "
                    "the peer, no InternalIP)",
                )
            )
            continue
        sessions.append(Session(peer, addr))
    return NodePeers(sessions=tuple(sessions), skipped=tuple(skipped))
