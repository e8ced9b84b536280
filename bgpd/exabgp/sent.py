"""The prefixes of one UPDATE ExaBGP reports it sent to a router: pure, no I/O.

Role: read ExaBGP 5.0's JSON report of an UPDATE it wrote on an established session
(rendered ``api { ...; send { parsed; update; } }``, bgpd.exabgp.render) into the
announced and withdrawn prefixes, so the driver's core can tell what a router was
actually sent (``advertised``) from what ExaBGP merely accepted on its API (``done``
means "in the adj-rib-out", also while the session is down).

Only the prefixes are read, and as text: the attributes of an advertised route are the
accepted ones (DriverCore.advertised()), so nothing here parses communities or MEDs, and
an IPv4 prefix is not turned into an ``ipaddress`` object (~9 us each, most of the cost
of a report: 10,000 prefixes took 0.1 s of the speaker's CPU that way). ExaBGP writes
IPv4 prefixes as Python does (dotted quad, ``/len``); an IPv6 prefix is written by
``inet_ntop``, which may differ from Python's text (IPv4-mapped addresses), so IPv6
text is normalised through ``ipaddress`` (one /128 per UPDATE: a small share of its
line's cost). The shape,
from ExaBGP 5.0.15's reactor/api/response/json.py (``update()`` and ``_update()``)::

    {"type": "update", "neighbor": {"address": {"local": A, "peer": B}, ...,
     "direction": "send", "message": {"update": {
        "attribute": {...},
        "announce": {"ipv4 unicast": {"<next hop>": [{"nlri": "10.99.0.1/32"}, ...]}},
        "withdraw": {"ipv4 unicast": [{"nlri": "10.99.0.2/32"}, ...]}}}}}

An NLRI is ``{"nlri": P, ...}`` (more keys with ADD-PATH) or, with ExaBGP's compact
encoding, the bare string ``P``. End-of-RIB is ``"message": {"eor": {...}}``: no prefix.
Anything else (a received UPDATE, another family's NLRI text that is not a prefix) is
not an UPDATE we sent, or carries no prefix of ours: it yields None or nothing.

What it must not do: raise on a line it does not understand (ExaBGP's output is not
ours to trust): it returns None or skips the item (an IPv4 text that is not a prefix
is kept: it matches no route of ours, so it counts for nothing).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SentUpdate:
    """One UPDATE written to a router: its session's addresses and its prefixes."""

    peer_address: str
    local_address: str
    #: The prefixes as bgpd.decision.prefix_text() writes them (str of the network).
    announced: tuple[str, ...]
    withdrawn: tuple[str, ...]


def _prefixes(items: object) -> Iterator[str]:
    if not isinstance(items, list):
        return
    for item in items:
        text = item.get("nlri") if isinstance(item, dict) else item
        if not isinstance(text, str):
            continue
        if ":" not in text:
            yield text
            continue
        try:
            yield str(ipaddress.ip_network(text))
        except ValueError:
            continue


def sent_update(doc: Mapping[str, Any]) -> SentUpdate | None:
    """The UPDATE ExaBGP reports it sent, or None if ``doc`` is not such a report."""
    if doc.get("type") != "update":
        return None
    neighbor = doc.get("neighbor")
    if not isinstance(neighbor, dict) or neighbor.get("direction") != "send":
        return None
    message = neighbor.get("message")
    update = message.get("update") if isinstance(message, dict) else None
    if not isinstance(update, dict):
        return None
    address = neighbor.get("address")
    address = address if isinstance(address, dict) else {}
    announced: list[str] = []
    announce = update.get("announce")
    if isinstance(announce, dict):
        for by_next_hop in announce.values():
            if isinstance(by_next_hop, dict):
                for items in by_next_hop.values():
                    announced.extend(_prefixes(items))
    withdrawn: list[str] = []
    withdraw = update.get("withdraw")
    if isinstance(withdraw, dict):
        for items in withdraw.values():
            withdrawn.extend(_prefixes(items))
    return SentUpdate(
        peer_address=str(address.get("peer", "")),
        local_address=str(address.get("local", "")),
        announced=tuple(announced),
        withdrawn=tuple(withdrawn),
    )
