"""What the speaker knows about one peer's BFD session: the one type the bfdd adapter
produces (read back from bfdd) and everything else reads (the BGP gate, metrics,
`status`, `explain --from-speaker`, MQTT, the node status object).

Pure data: no I/O, standard library and bgpd.model only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from bgpd.model import IPAddress, PeerName


class BfdState(StrEnum):
    """A BFD session's state (RFC 5880 section 4.1), as bfdd reports it, plus UNKNOWN for
    "no answer from bfdd yet" (bfdd starting, restarting, or not reachable)."""

    ADMIN_DOWN = "admin-down"
    DOWN = "down"
    INIT = "init"
    UP = "up"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class BfdPeerState:
    """One BFD-enabled peer's BFD session as last read back from bfdd."""

    peer: PeerName
    #: The BGP peer's address (the BFD session's remote address).
    address: IPAddress
    #: The BGP session's source address (the BFD session's local address).
    local_address: IPAddress
    state: BfdState = BfdState.UNKNOWN
    #: Wall-clock time (time.time()) of the last state change seen; None before the first.
    since: float | None = None
    #: Transitions out of UP since the speaker started.
    flaps: int = 0
    #: The negotiated detection time in milliseconds (remote multiplier x the agreed
    #: receive interval); None while not UP.
    detect_ms: int | None = None
    #: bfdd's last local diagnostic (e.g. "control detection time expired"), "" for none.
    diagnostic: str = ""
