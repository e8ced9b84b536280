"""Rendering of ExaBGP's configuration file and environment for one node: pure functions.

Input: the parsed Config, this node's Node object (labels, InternalIPs) and the facts the
caller resolved by I/O beforehand (the address the kernel picks to reach each peer, each
peer's password from a file or a Secret). Output: the text of ExaBGP's configuration and
the environment ExaBGP runs with. Nothing here opens a socket, reads a file or logs: the
same inputs give the same text, which golden files pin (tests/data/golden/, regenerated
with ``KUBE_BGPD_UPDATE_GOLDEN=1``).

Rules and why (see shared lab notes, measured on ExaBGP 5.0.15):

* one ``neighbor`` per BGPPeer the node has a session with (bgpd.peers.peers_for_node:
  nodeSelectors match, and a local address exists); each session carries one address
  family, the peer's (an IPv4 route on an IPv6 session would get the
  router-id as next hop; an IPv6 route with ``next-hop self`` on an IPv4 session errors);
* ``local-address`` is mandatory: ExaBGP 5.0.15 rejects ``next-hop self`` without it, and
  ``next-hop self`` resolves to it (bgpd.peers.local_address says which);
* ``router-id``: routerID, else this node's IPv4 local address (an IPv6-only node falls
  back to the low 32 bits of its IPv6 local address, which RFC 6286 allows as long as it
  is unique in the AS);
* ExaBGP has no keepalive setting: it sends keepalives at hold-time / 3, which is also
  RFC 4271's suggestion; another keepalive value yields the loader's warning
  (bgpd.config.peer.keepalive_note) in the log as well;
* the MD5 key is written base64-encoded (``md5-base64 true``) so no character of a
  password can break ExaBGP's tokeniser; the file is written mode 0600 by the caller and
  the password never appears in a log or a repr;
* ebgpMultiHop: ``outgoing-ttl 255``; single-hop eBGP: ``outgoing-ttl 1`` (RFC 4271
  single-hop, what FRR and MetalLB do); iBGP: the kernel default;
* enableGracefulRestart: ``capability { graceful-restart 120; }`` (MetalLB's restart
  time) and ``manual-eor true``: without manual-eor ExaBGP sends End-of-RIB before our
  replay, and the router flushes the routes it was keeping;
* vrf: ``source-interface VRF``: ExaBGP binds the session's socket to the VRF device
  (SO_BINDTODEVICE, CAP_NET_RAW), so the connection and its local address live in that
  VRF's table (the kernel choice is asked there too: bgpd.speaker.render_inputs);
* dynamicASN external: ``peer-as auto`` (ExaBGP takes the router's ASN from its OPEN);
  internal: ``peer-as`` myASN, so another ASN is refused;
* ``api { processes [ kube-bgpd ]; neighbor-changes; send { parsed; update; } }`` and
  the helper process with ``encoder json``: the only programmatic channel of ExaBGP 5.0;
  ``send`` reports every UPDATE written to the router (what is advertised).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from bgpd.attributes import check_command_text
from bgpd.config.peer import DYNAMIC_ASN_EXTERNAL, keepalive_note
from bgpd.exabgp.errors import RenderError

# The socket path and ExaBGP's start generation travel to the helper in the environment
# (ExaBGP passes its environment on to the processes it spawns).
from bgpd.exabgp.helper import GENERATION_ENV, SOCKET_ENV
from bgpd.model import (
    BGPPeer,
    Config,
    IPAddress,
    Node,
    PeerName,
    PeerSkipReason,
)
from bgpd.peers import internal_ip, peers_for_node

#: Name of the API process in ExaBGP's configuration.
PROCESS_NAME = "kube-bgpd"
#: MetalLB's graceful-restart time (seconds).
GRACEFUL_RESTART_TIME = 120


@dataclass(frozen=True, slots=True)
class Neighbor:
    """One BGPPeer with the facts resolved for this node: what the renderer and the driver
    need to talk about a session."""

    peer: BGPPeer
    local_address: IPAddress
    router_id: ipaddress.IPv4Address
    password: str | None = field(default=None, repr=False)

    @property
    def name(self) -> PeerName:
        return self.peer.name

    @property
    def selector(self) -> str:
        """The ``neighbor ...`` prefix of API commands that reaches exactly this session.

        The local address is part of it because two BGPPeers may share a router address
        (another ASN, another source); ExaBGP matches every word given."""
        return f"neighbor {self.peer.peer_address} local-ip {self.local_address}"

    @property
    def family(self) -> str:
        return "ipv4 unicast" if self.peer.family == 4 else "ipv6 unicast"

    @property
    def graceful_restart(self) -> bool:
        return self.peer.enable_graceful_restart

    @property
    def session_key(self) -> str:
        """The name ExaBGP 5.0.15 keys this neighbour by (``Neighbor.name()``): its peer
        address, local address, both ASNs and router-id. A reload that changes any of
        them is a removed neighbour and a new one to ExaBGP (bgpd.exabgp.reload)."""
        return (
            f"neighbor {self.peer.peer_address} local-ip {self.local_address} "
            f"local-as {self.peer.my_asn} peer-as {self.peer.peer_asn} "
            f"router-id {self.router_id} family-allowed in-open"
        )


@dataclass(frozen=True, slots=True)
class Rendering:
    """ExaBGP's configuration text, its environment, and the neighbors it holds."""

    config: str = field(repr=False)
    env: Mapping[str, str]
    neighbors: tuple[Neighbor, ...]
    warnings: tuple[str, ...] = ()
    #: The text before the neighbour blocks (the API process); a reload keeps ExaBGP's
    #: processes as they are, so a change here takes a restart (bgpd.exabgp.reload).
    header: str = ""
    #: Each neighbour's block of the text, by peer name.
    blocks: Mapping[PeerName, str] = field(default_factory=dict)


def resolve_neighbors(
    config: Config,
    node: Node | None,
    *,
    kernel_choices: Mapping[PeerName, IPAddress | None],
    passwords: Mapping[PeerName, str | None],
) -> tuple[tuple[Neighbor, ...], tuple[str, ...]]:
    """Turn the peers this node has a session with (bgpd.peers.peers_for_node, the rule
    decide() follows too) into Neighbors. A selected peer with no usable local address is
    left out with a warning (ExaBGP would reject the whole file for it)."""
    chosen = peers_for_node(config, node, kernel_choices=kernel_choices)
    warnings = [
        f"BGPPeer {s.peer}: {s.detail}: session skipped"
        for s in chosen.skipped
        if s.reason is PeerSkipReason.NO_LOCAL_ADDRESS
    ]
    v4 = [s.local_address for s in chosen.sessions if s.local_address.version == 4]
    fallback_v4 = v4[0] if v4 else internal_ip(node, 4)
    neighbors: list[Neighbor] = []
    for session in chosen.sessions:
        peer, addr = session.peer, session.local_address
        rid = peer.router_id
        if rid is None and isinstance(fallback_v4, ipaddress.IPv4Address):
            rid = fallback_v4
        if rid is None:
            rid = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        neighbors.append(
            Neighbor(
                peer=peer, local_address=addr, router_id=rid, password=passwords.get(peer.name)
            )
        )
    return tuple(neighbors), tuple(warnings)


def _quote(text: str) -> str:
    """A value for ExaBGP's tokeniser: no control characters, no quotes, no ';{}'."""
    check_command_text(text)
    if any(c in text for c in "\"'; {}"):
        raise RenderError(f"{text!r} cannot be written into an ExaBGP configuration")
    return text


def _neighbor_block(n: Neighbor, *, passive: bool = False) -> tuple[list[str], list[str]]:
    p = n.peer
    warnings: list[str] = []
    lines = [
        f"neighbor {p.peer_address} {{",
        f"    description {_quote(str(p.name))};",
        f"    router-id {n.router_id};",
        f"    local-address {n.local_address};",
        f"    local-as {p.my_asn};",
        f"    peer-as {'auto' if p.dynamic_asn == DYNAMIC_ASN_EXTERNAL else p.peer_asn};",
        f"    hold-time {p.hold_time};",
    ]
    if p.vrf is not None:
        lines.append(f"    source-interface {_quote(p.vrf)};")
    if (note := keepalive_note(p.hold_time, p.keepalive_time)) is not None:
        warnings.append(f"BGPPeer {p.name}: keepaliveTime {note}")
    if p.peer_port != 179:
        lines.append(f"    connect {p.peer_port};")
    if passive:
        # Held down (flapping, bgpd.exabgp.flap): ExaBGP does not connect out; without
        # a listener the session waits until the hold-down ends and this line goes.
        lines.append("    passive true;")
    if not p.is_ibgp:
        lines.append(f"    outgoing-ttl {255 if p.ebgp_multihop else 1};")
    if n.password:
        encoded = base64.b64encode(n.password.encode()).decode("ascii")
        lines.append(f"    md5-password {encoded};")
        lines.append("    md5-base64 true;")
    if p.enable_graceful_restart:
        lines.append("    manual-eor true;")
    lines.append("    capability {")
    lines.append("        route-refresh enable;")
    if p.enable_graceful_restart:
        lines.append(f"        graceful-restart {GRACEFUL_RESTART_TIME};")
    lines.append("    }")
    lines += [
        "    family {",
        f"        {n.family};",
        "    }",
        "    api {",
        f"        processes [ {PROCESS_NAME} ];",
        "        neighbor-changes;",
        # The UPDATEs ExaBGP writes to the router, reported to the helper as JSON
        # (bgpd.exabgp.sent): what was advertised, not only accepted. Both words are
        # needed: ``update`` picks the message type, ``parsed`` the JSON encoding.
        "        send {",
        "            parsed;",
        "            update;",
        "        }",
        "    }",
        "}",
    ]
    return lines, warnings


def render_config(
    neighbors: Sequence[Neighbor],
    *,
    helper_argv: Sequence[str],
    held: AbstractSet[PeerName] = frozenset(),
) -> Rendering:
    """The configuration text for these neighbors (environment left empty: render_env);
    ``held``: the peers held down (rendered ``passive``: bgpd.exabgp.flap)."""
    run = " ".join(_quote(a) for a in helper_argv)
    lines = [
        "# Generated by kube-bgpd: do not edit, it is rewritten at every start.",
        f"process {PROCESS_NAME} {{",
        f"    run {run};",
        "    encoder json;",
        "}",
    ]
    header = "\n".join(lines) + "\n"
    warnings: list[str] = []
    blocks: dict[PeerName, str] = {}
    for n in sorted(neighbors, key=lambda n: n.name):
        block, w = _neighbor_block(n, passive=n.name in held)
        lines.append("")
        lines += block
        blocks[n.name] = "\n".join(block) + "\n"
        warnings += w
    return Rendering(
        config="\n".join(lines) + "\n",
        env={},
        neighbors=tuple(sorted(neighbors, key=lambda n: n.name)),
        warnings=tuple(warnings),
        header=header,
        blocks=blocks,
    )


def render_env(
    *,
    socket_path: str,
    generation: int,
    as_root: bool,
    listen: Sequence[IPAddress] = (),
) -> dict[str, str]:
    """ExaBGP's environment (``exabgp_<section>_<option>``).

    As root, ExaBGP drops to ``nobody`` by default and then cannot run its helper or read
    its 0600 config: keep root. Acks on (the driver counts on one answer per command),
    the human CLI pipe off, warnings and errors unshortened on stdout for the supervisor
    to relay.
    ``listen`` lets routers connect to us too (ExaBGP's own retry backs off to 60 s)."""
    env = {
        "exabgp_api_ack": "true",
        "exabgp_api_cli": "false",
        "exabgp_api_respawn": "true",
        "exabgp_log_destination": "stdout",
        # INFO logs a line per route (formatted even when nobody reads it): 10,000 routes
        # would mean 10,000 lines for the supervisor to relay. Warnings and errors (a
        # refused command, a session error) still come through.
        "exabgp_log_level": "WARNING",
        "exabgp_log_short": "false",
        "exabgp_log_statistics": "false",
        "exabgp_daemon_daemonize": "false",
        "exabgp_daemon_pid": "",
        SOCKET_ENV: socket_path,
        GENERATION_ENV: str(generation),
    }
    if as_root:
        env["exabgp_daemon_user"] = "root"
        env["exabgp_daemon_drop"] = "false"
    if listen:
        env["exabgp_tcp_bind"] = " ".join(str(a) for a in listen)
        env["exabgp_tcp_port"] = "179"
    return env


def render(
    config: Config,
    node: Node | None,
    *,
    kernel_choices: Mapping[PeerName, IPAddress | None],
    passwords: Mapping[PeerName, str | None],
    helper_argv: Sequence[str],
    held: AbstractSet[PeerName] = frozenset(),
) -> Rendering:
    """Everything but the environment: selected neighbors, their resolution and the text;
    ``held``: the peers held down (``passive`` for the interval)."""
    neighbors, warnings = resolve_neighbors(
        config, node, kernel_choices=kernel_choices, passwords=passwords
    )
    r = render_config(neighbors, helper_argv=helper_argv, held=held)
    return Rendering(
        config=r.config,
        env=r.env,
        neighbors=r.neighbors,
        warnings=warnings + r.warnings,
        header=r.header,
        blocks=r.blocks,
    )
