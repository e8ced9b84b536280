"""`kubectl bgpd inspect` and `kubectl bgpd peers`: one Service's whole story, and every
node's BGP sessions, from the cluster's own objects (for people: a table; for programs:
the JSON contract in docs/cli.md, versioned by "version").

What it joins, and where each part comes from (one rule in one place):

* the allocation: the controller's own `allocate()` through
  `bgpd.allocation_preview.preview` (pool, IPs, outcome) and the sharing key through
  `bgpd.allocation.sharing_key`;
* each node's decision and reason: `bgpd.explain.explain` (that is `decide()`), exactly
  what `kube-bgpd explain` prints for the same objects;
* whether a route is advertised: what the speakers wrote into the cluster, the
  ServiceBGPStatus objects (MetalLB's metallb.io/v1beta1 shape: per node and Service, the
  peers that have its routes) and the BGPNodeStatus objects (kube-bgpd.io/v1alpha1: per
  node, the sessions). A node without a BGPNodeStatus has written no status: whether its
  routes are advertised is unknown (null), not false.

Pure: API JSON and a Config in, values and strings out; no I/O, no clock. Malformed
status objects are ValueError naming the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from bgpd.allocation import sharing_key
from bgpd.allocation_preview import ServicePreview, preview
from bgpd.decision import prefix_text
from bgpd.explain import JSONValue, explain, route_entries, skip_entries, table_lines
from bgpd.model import ClusterSnapshot, Config, NodeName, PeerName, ServiceKey, Skip

#: The JSON contract's version: bumped only when a key changes meaning or goes away
#: (new keys may be added within a version).
JSON_VERSION = 1

#: ServiceBGPStatus labels (MetalLB's): the node and the Service an object speaks for.
LABEL_NODE = "metallb.io/node"
LABEL_SERVICE_NAME = "metallb.io/service-name"
LABEL_SERVICE_NAMESPACE = "metallb.io/service-namespace"


# --------------------------------------------------------------------------- status objects


@dataclass(frozen=True, slots=True)
class Session:
    """One BGP session of a node, as its BGPNodeStatus says."""

    peer: PeerName
    address: str
    #: up | connected | down.
    state: str
    established_at: str | None = None
    last_error: str = ""
    desired: int = 0
    accepted: int = 0
    advertised: int = 0
    #: BFD's state for the session, None without BFD.
    bfd: str | None = None


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """A BGPNodeStatus, the parts the CLI shows."""

    node: NodeName
    sessions: tuple[Session, ...] = ()
    config_source: str = ""
    config_stale: bool = False
    config_errors: tuple[str, ...] = ()
    drain: str = ""


def _status(doc: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    status = doc.get("status")
    if not isinstance(status, Mapping):
        raise ValueError(f"{what}: has no status")
    return status


def _name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else "?"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: not an integer: {value!r}")
    return value


def node_status_from_json(doc: Mapping[str, Any]) -> NodeStatus:
    """A BGPNodeStatus object as the API serves it -> NodeStatus (ValueError if malformed)."""
    what = f"BGPNodeStatus {_name(doc)}"
    status = _status(doc, what)
    node = status.get("node") or _name(doc)
    sessions: list[Session] = []
    raw_sessions = status.get("sessions") or []
    if not isinstance(raw_sessions, list):
        raise ValueError(f"{what}: status.sessions is not a list")
    for i, s in enumerate(raw_sessions):
        where = f"{what}: status.sessions[{i}]"
        if not isinstance(s, Mapping) or not isinstance(s.get("peer"), str):
            raise ValueError(f"{where}: has no peer")
        bfd = s.get("bfd")
        sessions.append(
            Session(
                peer=PeerName(s["peer"]),
                address=str(s.get("address", "")),
                state=str(s.get("state", "")),
                established_at=s.get("establishedAt") or None,
                last_error=str(s.get("lastError") or ""),
                desired=_int(s.get("desired", 0), f"{where}.desired"),
                accepted=_int(s.get("accepted", 0), f"{where}.accepted"),
                advertised=_int(s.get("advertised", 0), f"{where}.advertised"),
                bfd=str(bfd.get("state", "")) if isinstance(bfd, Mapping) else None,
            )
        )
    config = _mapping(status.get("config"))
    drain = _mapping(status.get("drain"))
    errors = config.get("errors") or []
    return NodeStatus(
        node=NodeName(str(node)),
        sessions=tuple(sorted(sessions, key=lambda s: s.peer)),
        config_source=str(config.get("source", "")),
        config_stale=bool(config.get("stale", False)),
        config_errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (),
        drain=str(drain.get("state", "")),
    )


def advertised_peers(
    objects: Iterable[Mapping[str, Any]], service: ServiceKey
) -> dict[NodeName, frozenset[PeerName]]:
    """Node -> the peers that have `service`'s routes, from ServiceBGPStatus objects
    (status.node, status.serviceNamespace/serviceName, status.peers); objects of other
    Services are ignored. ValueError on a malformed object of this Service."""
    out: dict[NodeName, frozenset[PeerName]] = {}
    for doc in objects:
        what = f"ServiceBGPStatus {_name(doc)}"
        status = _status(doc, what)
        key = f"{status.get('serviceNamespace')}/{status.get('serviceName')}"
        if key != service:
            continue
        node, peers = status.get("node"), status.get("peers") or []
        if not isinstance(node, str) or not isinstance(peers, list):
            raise ValueError(f"{what}: status.node or status.peers is malformed")
        out[NodeName(node)] = out.get(NodeName(node), frozenset()) | {
            PeerName(str(p)) for p in peers
        }
    return out


# --------------------------------------------------------------------------- inspect


@dataclass(frozen=True, slots=True)
class RouteState:
    peer: PeerName
    prefix: str
    #: The peer has the route (ServiceBGPStatus); None: the node reported no status.
    advertised: bool | None


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: NodeName
    #: Endpoints on this node: (can serve, all).
    endpoints: tuple[int, int]
    routes: tuple[RouteState, ...]
    skipped: tuple[Skip, ...]
    #: Peers the ServiceBGPStatus names that the decision does not (a withdrawal on its
    #: way, or a speaker with another configuration).
    extra_peers: tuple[PeerName, ...] = ()

    @property
    def announced(self) -> bool:
        return bool(self.routes)


@dataclass(frozen=True, slots=True)
class Inspection:
    service: ServiceKey
    found: bool
    type: str
    allocation: ServicePreview | None
    sharing_key: str
    nodes: tuple[NodeVerdict, ...]


def _endpoints(snapshot: ClusterSnapshot, key: ServiceKey) -> dict[str | None, tuple[int, int]]:
    out: dict[str | None, tuple[int, int]] = {}
    for es in snapshot.endpoint_slices.get(key, ()):
        for ep in es.endpoints:
            serving, total = out.get(ep.node_name, (0, 0))
            out[ep.node_name] = (serving + ep.can_serve, total + 1)
    return out


def _only(snapshot: ClusterSnapshot, service: ServiceKey) -> ClusterSnapshot:
    """The snapshot with `service` as its only Service (every Node and Namespace kept).

    decide() handles each Service on its own (its IPs, endpoints, advertisements, peers
    and fan-out candidates) and only then merges contributions per (peer, prefix) into
    Routes that list every contributing Service; so one Service's routes (prefix, peer)
    and skips are the same with or without the others, and one Service over 100 nodes
    costs 100 decisions of one Service instead of 100 of the whole cluster (the
    attributes of a shared prefix do depend on the others: they are not shown here)."""
    found = snapshot.services.get(service)
    slices = snapshot.endpoint_slices.get(service)
    return replace(
        snapshot,
        services=MappingProxyType({} if found is None else {service: found}),
        endpoint_slices=MappingProxyType({} if slices is None else {service: slices}),
    )


def inspect_service(
    config: Config,
    snapshot: ClusterSnapshot,
    service: ServiceKey,
    *,
    node_statuses: Mapping[NodeName, NodeStatus],
    advertised: Mapping[NodeName, frozenset[PeerName]],
) -> Inspection:
    """One Service on every Node of the snapshot: the allocation, the endpoints and each
    node's decision (bgpd.explain, i.e. decide()), each route marked advertised or not."""
    svc = snapshot.services.get(service)
    allocation = next((p for p in preview(config, snapshot) if p.service == service), None)
    endpoints = _endpoints(snapshot, service)
    verdicts: list[NodeVerdict] = []
    for decision in explain(config, _only(snapshot, service), sorted(snapshot.nodes)):
        node = decision.node
        reported = node in node_statuses
        have = advertised.get(node, frozenset())
        routes = tuple(
            RouteState(r.peer, prefix_text(r.prefix), (r.peer in have) if reported else None)
            for _, r in route_entries(decision, service)
        )
        wanted = {r.peer for r in routes}
        verdicts.append(
            NodeVerdict(
                node=node,
                endpoints=endpoints.get(node, (0, 0)),
                routes=routes,
                skipped=tuple(skip_entries(decision, service)),
                extra_peers=tuple(sorted(have - wanted)),
            )
        )
    return Inspection(
        service=service,
        found=svc is not None,
        type=svc.type if svc is not None else "",
        allocation=allocation,
        sharing_key=sharing_key(svc) if svc is not None else "",
        nodes=tuple(verdicts),
    )


def _skip_json(s: Skip) -> dict[str, JSONValue]:
    entry: dict[str, JSONValue] = {"reason": s.reason.value}
    if s.ip is not None:
        entry["ip"] = str(s.ip)
    if s.detail:
        entry["detail"] = s.detail
    return entry


def inspect_json(result: Inspection) -> dict[str, JSONValue]:
    """The JSON contract of `kubectl bgpd inspect --output json` (docs/cli.md)."""
    allocation: JSONValue = None
    a = result.allocation
    if a is not None:
        allocation = {
            "outcome": a.outcome.value,
            "pool": a.pool,
            "ips": [str(ip) for ip in a.current],
            "sharingKey": result.sharing_key or None,
        }
        if a.ips != a.current:
            allocation["wouldBe"] = [str(ip) for ip in a.ips]
        if a.reason:
            allocation["reason"] = a.reason
        if a.detail:
            allocation["detail"] = a.detail
    nodes: list[JSONValue] = []
    for v in result.nodes:
        node: dict[str, JSONValue] = {
            "node": v.node,
            "endpoints": {"serving": v.endpoints[0], "total": v.endpoints[1]},
            "announced": v.announced,
            "routes": [
                {"prefix": r.prefix, "peer": r.peer, "advertised": r.advertised} for r in v.routes
            ],
            "skipped": [_skip_json(s) for s in v.skipped],
        }
        if v.extra_peers:
            node["advertisedNotDesired"] = list(v.extra_peers)
        nodes.append(node)
    return {
        "version": JSON_VERSION,
        "service": result.service,
        "found": result.found,
        "type": result.type or None,
        "allocation": allocation,
        "nodes": nodes,
    }


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def inspect_table(result: Inspection) -> str:
    lines = [f"Service {result.service}"]
    if not result.found:
        lines.append("  not found")
    elif result.type != "LoadBalancer":
        lines.append(f"  type {result.type}, not LoadBalancer: no node announces it")
    a = result.allocation
    if a is not None:
        ips = ",".join(map(str, a.current)) or "-"
        lines.append(
            f"  allocation: {a.outcome.value}, pool {a.pool or '-'}, IPs {ips}, "
            f"sharing key {result.sharing_key or '-'}"
        )
        if a.ips != a.current:
            lines.append(f"    the controller would write: {','.join(map(str, a.ips)) or '-'}")
        if a.reason or a.detail:
            lines.append(f"    {' '.join(filter(None, (a.reason, a.detail)))}")
    rows: list[list[str]] = []
    for v in result.nodes:
        endpoints = f"{v.endpoints[0]}/{v.endpoints[1]}"
        for r in v.routes:
            rows.append(
                [v.node, endpoints, "announce", r.prefix, r.peer, _yes_no(r.advertised), ""]
            )
        for peer in v.extra_peers:
            rows.append([v.node, endpoints, "-", "-", peer, "yes", "advertised, not desired"])
        for s in v.skipped:
            detail = " ".join(filter(None, (str(s.ip) if s.ip else "", s.detail)))
            rows.append([v.node, endpoints, s.reason.value, "-", "-", "-", detail])
        if not v.routes and not v.skipped and not v.extra_peers:
            rows.append([v.node, endpoints, "-", "-", "-", "-", ""])
    if rows:
        header = ("NODE", "ENDPOINTS", "DECISION", "PREFIX", "PEER", "ADVERTISED", "DETAIL")
        lines += table_lines(header, rows, "  ")
    else:
        lines.append("  no Node in the cluster")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- peers


def peers_json(statuses: Sequence[NodeStatus]) -> dict[str, JSONValue]:
    """The JSON contract of `kubectl bgpd peers --output json` (docs/cli.md)."""
    nodes: list[JSONValue] = []
    for st in sorted(statuses, key=lambda s: s.node):
        sessions: list[JSONValue] = []
        for s in st.sessions:
            sessions.append(
                {
                    "peer": s.peer,
                    "address": s.address,
                    "state": s.state,
                    "establishedAt": s.established_at,
                    "lastError": s.last_error or None,
                    "desired": s.desired,
                    "accepted": s.accepted,
                    "advertised": s.advertised,
                    "bfd": s.bfd,
                }
            )
        nodes.append(
            {
                "node": st.node,
                "sessions": sessions,
                "config": {
                    "source": st.config_source or None,
                    "stale": st.config_stale,
                    "errors": list(st.config_errors),
                },
                "drain": st.drain or None,
            }
        )
    return {"version": JSON_VERSION, "nodes": nodes}


def peers_table(statuses: Sequence[NodeStatus]) -> str:
    rows = [
        [
            st.node,
            s.peer,
            s.address or "-",
            s.state or "-",
            s.established_at or "-",
            str(s.desired),
            str(s.accepted),
            str(s.advertised),
            s.bfd or "-",
            s.last_error or "",
        ]
        for st in sorted(statuses, key=lambda s: s.node)
        for s in st.sessions
    ]
    if not rows:
        return "no BGP session reported (no BGPNodeStatus, or no peer on any node)\n"
    header = (
        "NODE",
        "PEER",
        "ADDRESS",
        "STATE",
        "ESTABLISHED",
        "DESIRED",
        "ACCEPTED",
        "ADVERTISED",
        "BFD",
        "LAST-ERROR",
    )
    lines = table_lines(header, rows, "")
    notes = [
        f"node {st.node}: " + "; ".join(filter(None, (_drain_note(st), _config_note(st))))
        for st in sorted(statuses, key=lambda s: s.node)
        if _drain_note(st) or _config_note(st)
    ]
    return "\n".join(lines + notes) + "\n"


def _drain_note(st: NodeStatus) -> str:
    return "" if st.drain in ("", "none", "normal") else f"drain {st.drain}"


def _config_note(st: NodeStatus) -> str:
    if not st.config_stale and not st.config_errors:
        return ""
    return "configuration stale: " + ("; ".join(st.config_errors) or "not the cluster's")
