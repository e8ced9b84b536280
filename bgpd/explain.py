"""Rendering of decisions for people (a table) and for programs (the JSON contract of
`kube-bgpd explain --output json`, documented in docs/cli.md).

MetalLB computes why a Service is not announced but only logs it (metallb#1447,
#1561); explain answers the question directly, per node: which prefix goes to which
peer with which attributes, and the reason for every LoadBalancer Service that does
not. The offline command and the live speaker render through these same functions, so
their answers cannot drift apart.

Pure: takes Decisions (from bgpd.decision.decide) and returns strings or JSON-ready
values; no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bgpd.bandwidth import exabgp_text
from bgpd.decision import decide, prefix_text
from bgpd.model import (
    ClusterSnapshot,
    Config,
    Decision,
    HoldReason,
    LinkBandwidth,
    NodeName,
    Notice,
    NoticeReason,
    PeerHold,
    PeerName,
    PeerSkip,
    PeerSkipReason,
    Route,
    RouteAttributes,
    ServiceKey,
    Skip,
    SkipReason,
)

JSONValue = str | int | None | list["JSONValue"] | dict[str, "JSONValue"]


def explain(config: Config, snapshot: ClusterSnapshot, nodes: Iterable[NodeName]) -> list[Decision]:
    """One decision per node, in the order given."""
    return [decide(config, snapshot, n) for n in nodes]


def route_entries(
    decision: Decision, service: ServiceKey | None = None
) -> list[tuple[ServiceKey, Route]]:
    """(service, route) for every Service every route carries, in the decision's order
    (peer, prefix), then by service; only `service`'s when given."""
    return [
        (key, r) for r in decision.routes for key in r.services if service is None or key == service
    ]


def skip_entries(decision: Decision, service: ServiceKey | None = None) -> list[Skip]:
    return [s for s in decision.skipped if service is None or s.service == service]


def decision_json(decision: Decision, service: ServiceKey | None = None) -> dict[str, JSONValue]:
    """The JSON object for one node.

    A Route that carries several Services (an aggregate prefix, or Services sharing an
    IP) gives one entry per Service with the same prefix, peer and attributes, so a
    consumer can always group by "service". Skipped entries have "ip" only when the
    reason concerns one IP of the Service and "detail" only when there is more to say
    than the reason. With `service`, only that Service's entries are kept. "peersSkipped",
    present when the node has no session with some BGPPeer, lists those peers and why
    (never filtered by `service`: they concern every Service); "peersHeld", only in a live
    speaker's answer, the peers it holds every route back from (bfdStrict), why and how
    many routes.
    """
    routes: list[JSONValue] = [
        {
            "service": key,
            "prefix": prefix_text(r.prefix),
            "peer": r.peer,
            "communities": list(r.attributes.communities),
            "largeCommunities": list(r.attributes.large_communities),
            "localPref": r.attributes.local_pref,
            "med": r.attributes.med,
            "linkBandwidth": link_bandwidth_json(r.attributes.link_bandwidth),
        }
        for key, r in route_entries(decision, service)
    ]
    skipped: list[JSONValue] = []
    for s in skip_entries(decision, service):
        entry: dict[str, JSONValue] = {"service": s.service, "reason": s.reason.value}
        if s.ip is not None:
            entry["ip"] = str(s.ip)
        if s.detail:
            entry["detail"] = s.detail
        skipped.append(entry)
    out: dict[str, JSONValue] = {"node": decision.node, "routes": routes, "skipped": skipped}
    if decision.peers_skipped:
        out["peersSkipped"] = [peer_skip_json(p) for p in decision.peers_skipped]
    notices = notice_entries(decision, service)
    if notices:
        out["notices"] = [
            {"service": n.service, "reason": n.reason.value, "detail": n.detail} for n in notices
        ]
    if decision.peers_held:
        out["peersHeld"] = [
            {"peer": h.peer, "reason": h.reason.value, "routes": h.routes}
            for h in decision.peers_held
        ]
    return out


def notice_entries(decision: Decision, service: ServiceKey | None = None) -> list[Notice]:
    return [n for n in decision.notices if service is None or n.service == service]


def link_bandwidth_json(value: LinkBandwidth | None) -> JSONValue:
    """The link-bandwidth community (bgpd.bandwidth): {"asn", "bytesPerSecond"} or null."""
    if value is None:
        return None
    return {"asn": value.asn, "bytesPerSecond": value.bytes_per_second}


def peer_skip_json(skip: PeerSkip) -> dict[str, JSONValue]:
    """A peer the node has no session with: "peer", "reason", and "detail" when there is
    more to say than the reason."""
    entry: dict[str, JSONValue] = {"peer": skip.peer, "reason": skip.reason.value}
    if skip.detail:
        entry["detail"] = skip.detail
    return entry


def decision_from_json(doc: Mapping[str, Any]) -> Decision:
    """The inverse of `decision_json`: a live speaker serves its last decision in that
    shape (GET /status, key "explain"), and `kube-bgpd explain --from-speaker` renders it
    with the same functions as an offline answer. Entries of one prefix and peer with the
    same attributes become one Route again. ValueError on anything malformed."""
    try:
        grouped: dict[tuple[PeerName, str, RouteAttributes], list[ServiceKey]] = {}
        for r in doc["routes"]:
            attrs = RouteAttributes(
                communities=tuple(r["communities"]),
                large_communities=tuple(r["largeCommunities"]),
                local_pref=r["localPref"],
                med=r["med"],
                link_bandwidth=_link_bandwidth(r.get("linkBandwidth")),
            )
            key = (PeerName(r["peer"]), str(r["prefix"]), attrs)
            grouped.setdefault(key, []).append(ServiceKey(r["service"]))
        routes = tuple(
            Route(peer, ipaddress.ip_network(prefix), attrs, tuple(services))
            for (peer, prefix, attrs), services in grouped.items()
        )
        skipped = tuple(
            Skip(
                ServiceKey(s["service"]),
                SkipReason(s["reason"]),
                ipaddress.ip_address(s["ip"]) if "ip" in s else None,
                s.get("detail", ""),
            )
            for s in doc["skipped"]
        )
        # Absent in answers of speakers older than peers_for_node().
        peers_skipped = tuple(
            PeerSkip(PeerName(p["peer"]), PeerSkipReason(p["reason"]), p.get("detail", ""))
            for p in doc.get("peersSkipped", ())
        )
        # Absent in answers of speakers older than notices.
        notices = tuple(
            Notice(ServiceKey(n["service"]), NoticeReason(n["reason"]), n.get("detail", ""))
            for n in doc.get("notices", ())
        )
        # Only in a live speaker's answer (bgpd.bfd.gate), and absent in older ones.
        peers_held = tuple(
            PeerHold(PeerName(h["peer"]), HoldReason(h["reason"]), int(h["routes"]))
            for h in doc.get("peersHeld", ())
        )
        return Decision(
            node=NodeName(doc["node"]),
            routes=routes,
            skipped=skipped,
            peers_skipped=peers_skipped,
            notices=notices,
            peers_held=peers_held,
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a decision document: missing or bad {exc}") from exc


def explain_json(
    decisions: Sequence[Decision], service: ServiceKey | None = None, *, single: bool
) -> JSONValue:
    """`single`: the caller asked about exactly one node, so the answer is that node's
    object; otherwise a list of node objects (also when the dump has only one node, so a
    script's parsing does not depend on the cluster's size)."""
    objects: list[JSONValue] = [decision_json(d, service) for d in decisions]
    if single:
        if len(objects) != 1:
            raise ValueError(f"single=True needs exactly one decision, got {len(objects)}")
        return objects[0]
    return objects


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str) -> list[str]:
    """Left-aligned columns, as wide as their widest cell (every table of explain)."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return [
        (indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip()
        for r in (header, *rows)
    ]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _link_bandwidth(doc: Mapping[str, Any] | None) -> LinkBandwidth | None:
    """link_bandwidth_json read back (absent in a document from an older speaker)."""
    if doc is None:
        return None
    return LinkBandwidth(asn=int(doc["asn"]), bytes_per_second=int(doc["bytesPerSecond"]))


def _bandwidth_words(value: LinkBandwidth | None) -> tuple[str, ...]:
    """The COMMUNITIES column shows the extended community as ExaBGP is told it."""
    return () if value is None else (exabgp_text(value),)


def _optional(value: int | None) -> str:
    return "-" if value is None else str(value)


def explain_table(decisions: Sequence[Decision], service: ServiceKey | None = None) -> str:
    """A text table per node: routes (service, prefix, peer, attributes), then the
    Services not announced with their reason, then the peers the node has no session
    with and why. Large communities show as
    `large:a:b:c`, as they are written in config, so they stand apart from standard ones."""
    lines: list[str] = []
    for d in decisions:
        routes = route_entries(d, service)
        skipped = skip_entries(d, service)
        if lines:
            lines.append("")
        not_announced = "1 entry" if len(skipped) == 1 else f"{len(skipped)} entries"
        lines.append(
            f"node {d.node}: {_plural(len(routes), 'route')}, {not_announced} not announced"
        )
        if routes:
            rows = [
                [
                    key,
                    str(r.prefix),
                    r.peer,
                    ",".join(
                        [
                            *r.attributes.communities,
                            *(f"large:{c}" for c in r.attributes.large_communities),
                            *_bandwidth_words(r.attributes.link_bandwidth),
                        ]
                    )
                    or "-",
                    _optional(r.attributes.local_pref),
                    _optional(r.attributes.med),
                ]
                for key, r in routes
            ]
            lines += table_lines(
                ("SERVICE", "PREFIX", "PEER", "COMMUNITIES", "LOCAL-PREF", "MED"), rows, "  "
            )
        if skipped:
            lines.append("  not announced:")
            rows = [
                [s.service, s.reason.value, "-" if s.ip is None else str(s.ip), s.detail]
                for s in skipped
            ]
            lines += table_lines(("SERVICE", "REASON", "IP", "DETAIL"), rows, "  ")
        if d.peers_skipped:
            lines.append("  no session (no route goes to these peers):")
            rows = [[p.peer, p.reason.value, p.detail] for p in d.peers_skipped]
            lines += table_lines(("PEER", "REASON", "DETAIL"), rows, "  ")
        if d.peers_held:
            lines.append("  held back (the routes above to these peers are not sent):")
            rows = [[h.peer, h.reason.value, str(h.routes)] for h in d.peers_held]
            lines += table_lines(("PEER", "REASON", "ROUTES"), rows, "  ")
        notices = notice_entries(d, service)
        if notices:
            lines.append("  notices (announced as shown above):")
            rows = [[n.service, n.reason.value, n.detail] for n in notices]
            lines += table_lines(("SERVICE", "REASON", "DETAIL"), rows, "  ")
    return "\n".join(lines) + "\n" if lines else ""
