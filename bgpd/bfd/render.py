"""bfdd's configuration, and the commands that change a running bfdd in place. Pure.

Two outputs from one input (the BFD-enabled peers, each with its resolved local address
and its profile's values):

* ``render(peers)``: the whole configuration file bfdd reads when it starts;
* ``commands(before, after)``: the vty commands that turn a running bfdd holding
  ``before`` into one holding ``after``. Only what differs is sent: a session whose peer,
  local address and values are unchanged gets no command at all, so bfdd keeps it as it is
  (its state, its uptime at both ends); a changed interval is a single line, which bfdd
  negotiates with a Poll sequence (RFC 5880 section 6.8.3) without taking the session
  down; a changed peer or local address is another session (removed, added).

FRR's bfdd keys a single-hop session by (peer, local address, interface, VRF) and a
multihop one by (peer, local address, VRF); the speaker uses no interface and no VRF (the
loader refuses bfdProfile with vrf), so the key here is (peer, local address, multihop).

No I/O, no clock: tested with tables (tests/unit/test_bfd_render.py) and against a real
bfdd (tests/component/test_bfdd_runtime.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bgpd.model import BFDProfile, BGPPeer, IPAddress, PeerName


@dataclass(frozen=True, slots=True)
class BfdPeerConfig:
    """One BFD session bfdd should run: a BFD-enabled BGPPeer with the facts resolved for
    this node (its local address) and its BFDProfile's values."""

    peer: PeerName
    #: The BGP peer's address: the BFD session's remote address.
    address: IPAddress
    #: The BGP session's source address: the BFD session's local address.
    local_address: IPAddress
    profile: str
    receive_interval: int = 300
    transmit_interval: int = 300
    detect_multiplier: int = 3
    passive_mode: bool = False
    minimum_ttl: int = 254
    #: ebgpMultiHop peers get a multihop session (RFC 5883), as in MetalLB.
    multihop: bool = False
    #: AdminDown (the speaker's goodbye, after the BGP withdraw).
    shutdown: bool = False

    @property
    def key(self) -> tuple[IPAddress, IPAddress, bool]:
        """What bfdd tells sessions apart by (see the module docstring)."""
        return (self.address, self.local_address, self.multihop)

    @property
    def command(self) -> str:
        """The line that names (and enters) this session in bfdd's ``bfd`` node."""
        hop = " multihop" if self.multihop else ""
        return f"peer {self.address}{hop} local-address {self.local_address}"

    def lines(self) -> tuple[str, ...]:
        """The session's settings, one bfdd command each, in a fixed order. minimum-ttl
        only for multihop: bfdd refuses it on a single-hop session (RFC 5881's single
        hop requires TTL 255 anyway, which bfdd checks by itself)."""
        out = [
            f"receive-interval {self.receive_interval}",
            f"transmit-interval {self.transmit_interval}",
            f"detect-multiplier {self.detect_multiplier}",
            "passive-mode" if self.passive_mode else "no passive-mode",
        ]
        if self.multihop:
            out.append(f"minimum-ttl {self.minimum_ttl}")
        out.append("shutdown" if self.shutdown else "no shutdown")
        return tuple(out)


def bfd_peers(
    sessions: Iterable[tuple[BGPPeer, IPAddress]], profiles: Sequence[BFDProfile]
) -> tuple[BfdPeerConfig, ...]:
    """The BFD sessions for this node's BGP sessions (each peer with the local address the
    ExaBGP rendering resolved): one per peer that names a BFDProfile. A peer whose profile
    is missing gets none (the loader already refused such a configuration, so this only
    guards a config built in code). Two peers with one key (impossible after the loader's
    duplicate check) keep the first: bfdd has one session per key."""
    by_name = {p.name: p for p in profiles}
    out: list[BfdPeerConfig] = []
    seen: set[tuple[IPAddress, IPAddress, bool]] = set()
    for peer, local in sorted(sessions, key=lambda s: s[0].name):
        profile = by_name.get(peer.bfd_profile or "")
        if profile is None:
            continue
        config = BfdPeerConfig(
            peer=peer.name,
            address=peer.peer_address,
            local_address=local,
            profile=profile.name,
            receive_interval=profile.receive_interval,
            transmit_interval=profile.transmit_interval,
            detect_multiplier=profile.detect_multiplier,
            passive_mode=profile.passive_mode,
            minimum_ttl=profile.minimum_ttl,
            multihop=peer.ebgp_multihop,
        )
        if config.key not in seen:
            seen.add(config.key)
            out.append(config)
    return tuple(out)


def admin_down(peers: Sequence[BfdPeerConfig]) -> tuple[BfdPeerConfig, ...]:
    """The same sessions, every one AdminDown (RFC 5880 section 6.8.16): the router then
    takes the session down without treating it as a failure."""
    return tuple(replace(p, shutdown=True) for p in peers)


def render(peers: Sequence[BfdPeerConfig]) -> str:
    """bfdd's configuration file (read at start; changes go through ``commands``)."""
    out = ["! Rendered by kube-bgpd: one BFD session per BFD-enabled BGPPeer.", "bfd"]
    for p in sorted(peers, key=lambda p: p.peer):
        out.append(f" ! {p.peer} (BFDProfile {p.profile})")
        out.append(f" {p.command}")
        out.extend(f"  {line}" for line in p.lines())
        out.append(" exit")
    out.append("exit")
    return "\n".join(out) + "\n"


def commands(before: Sequence[BfdPeerConfig], after: Sequence[BfdPeerConfig]) -> tuple[str, ...]:
    """The vty commands (in order, for a vty in ENABLE mode) that change a bfdd holding
    ``before`` into one holding ``after``; () when nothing differs. Sessions that are
    unchanged get no command (see the module docstring); removed ones first, so a session
    that moves to another key never has two sessions towards one peer at once."""
    old = {p.key: p for p in before}
    new = {p.key: p for p in after}
    body: list[str] = []
    for key in sorted(old.keys() - new.keys(), key=str):
        body.append(f"no {old[key].command}")
    for p in sorted(after, key=lambda p: p.peer):
        was = old.get(p.key)
        if was == p:
            continue
        lines = p.lines() if was is None else _changed(was.lines(), p.lines())
        if not lines:
            # Only the BGPPeer's name or profile name differ: nothing bfdd knows of.
            continue
        body.append(p.command)
        body.extend(lines)
        body.append("exit")
    if not body:
        return ()
    return ("configure terminal", "bfd", *body, "end")


def _changed(before: tuple[str, ...], after: tuple[str, ...]) -> tuple[str, ...]:
    """The lines of ``after`` that ``before`` does not hold (same key, same order)."""
    return tuple(line for line in after if line not in before)
