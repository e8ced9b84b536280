"""What this node publishes in the cluster's status objects, computed from the speaker's
state: pure functions, no I/O and no clock (k8s_watcher.status_writer writes the result).

* MetalLB's ServiceBGPStatus: per Service, the BGPPeers that have its routes
  (`service_peers`): a peer counts when a route of the Service is on the wire to it
  (`routes_on_the_wire`), not merely wanted, so a stopped router drops out.
* kube-bgpd's BGPNodeStatus: this node's sessions, their route counts, BFD, the
  configuration in force and the drain (`node_status`).

Only timestamps of events appear (a session's establishment, a BFD or drain change),
never a value that changes by itself (no uptime, no "updated at"): an idle node's
desired state stays equal, so it writes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from bgpd.bfd.state import BfdPeerState
from bgpd.model import (
    Decision,
    DesiredRoutes,
    NodeName,
    PeerName,
    PeerStatus,
    ServiceKey,
    SessionState,
)


class StatusView(Protocol):
    """The part of the ExaBGP driver the status reads."""

    def peer_status(self) -> Mapping[PeerName, PeerStatus]: ...

    def advertised(self) -> DesiredRoutes: ...


def routes_on_the_wire(view: StatusView) -> DesiredRoutes:
    """Per peer, the routes a router has from this node: the one place the status
    objects read routes from. The driver's advertised routes: sent in UPDATEs on the
    peer's Established session (none while it is down; bgpd.exabgp.advertised)."""
    return view.advertised()


@functools.lru_cache(maxsize=1024)
def _shared_peers(peers: tuple[PeerName, ...]) -> tuple[PeerName, ...]:
    """One tuple for equal peer lists: nearly every Service has the same (the node's
    peers), and the status writer keeps each Service's list until the next publish
    (a tuple each cost 48 bytes or more: 1.4 MiB at 30,000 Services). Bounded: past
    1,024 distinct lists the least recently seen are copies again, which is only
    memory."""
    return peers


def service_peers(
    decision: Decision | None, on_wire: DesiredRoutes
) -> dict[ServiceKey, tuple[PeerName, ...]]:
    """Service -> the peers (sorted) that have at least one of its routes: what a
    ServiceBGPStatus lists. A Service with none has no object."""
    out: dict[ServiceKey, set[PeerName]] = {}
    for route in decision.routes if decision is not None else ():
        wire = on_wire.get(route.peer)
        if wire is None or route.prefix not in wire:
            continue
        for key in route.services:
            out.setdefault(key, set()).add(route.peer)
    return {key: _shared_peers(tuple(sorted(peers))) for key, peers in out.items()}


class ConfigOrigin(StrEnum):
    """Where the configuration in force comes from."""

    FILE = "file"
    CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class NodeInputs:
    """Everything a BGPNodeStatus shows, as the speaker holds it."""

    node: NodeName
    #: The driver's view of each peer, with its desired, accepted and advertised counts.
    peers: Mapping[PeerName, PeerStatus]
    config_origin: ConfigOrigin = ConfigOrigin.FILE
    #: Why the configuration in force is not what its source holds, and other errors
    #: of the configuration ("" or absent for none).
    config_errors: tuple[str, ...] = ()
    config_stale: bool = False
    #: The driver's mode (normal, draining, withdrawn, ...) and when the drain started.
    drain_state: str = "normal"
    drain_since: float | None = None
    bfd: Mapping[PeerName, BfdPeerState] = field(default_factory=dict)


def rfc3339(when: float) -> str:
    """metav1.Time text (RFC 3339, seconds, UTC)."""
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bfd(state: BfdPeerState) -> dict[str, Any]:
    out: dict[str, Any] = {"state": str(state.state)}
    if state.since is not None:
        out["since"] = rfc3339(state.since)
    out["flaps"] = state.flaps
    if state.detect_ms is not None:
        out["detectMs"] = state.detect_ms
    return out


def _session(inputs: NodeInputs, status: PeerStatus) -> dict[str, Any]:
    out: dict[str, Any] = {
        "peer": status.peer,
        "address": str(status.address),
        "state": str(status.state),
    }
    if status.state is SessionState.UP and status.since is not None:
        out["establishedAt"] = rfc3339(status.since)
    out["lastError"] = status.reason
    out["desired"] = status.desired
    out["accepted"] = status.accepted
    out["advertised"] = status.advertised
    bfd = inputs.bfd.get(status.peer)
    if bfd is not None:
        out["bfd"] = _bfd(bfd)
    return out


def node_status(inputs: NodeInputs) -> dict[str, Any]:
    """The `status` of this node's BGPNodeStatus (the shape `kubectl bgpd peers` reads;
    fields are only ever added at the end)."""
    sessions = [_session(inputs, inputs.peers[p]) for p in sorted(inputs.peers)]
    # "since" is null, not missing, when there is none: the writer merge-patches the
    # status (RFC 7386), where null removes a key and a missing one keeps the old value.
    drain: dict[str, Any] = {
        "state": inputs.drain_state,
        "since": None if inputs.drain_since is None else rfc3339(inputs.drain_since),
    }
    return {
        "node": inputs.node,
        "summary": {
            "sessions": len(sessions),
            "sessionsUp": sum(s["state"] == SessionState.UP for s in sessions),
            "advertised": sum(s["advertised"] for s in sessions),
        },
        "sessions": sessions,
        "config": {
            "source": str(inputs.config_origin),
            "stale": inputs.config_stale,
            "errors": [e for e in inputs.config_errors if e],
        },
        "drain": drain,
    }
