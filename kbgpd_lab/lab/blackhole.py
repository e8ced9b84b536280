"""A blackholed node: every packet of a lab namespace dropped, its links still up.

Role: stage the failure BFD exists for (a node that dies, hangs in its kernel, or sits
behind a broken switch) without the link going down: a router sees a carrier loss at
once, so ``ip link set down`` would measure the router's link handling, not BFD or the
hold timer. The drop happens inside the node's namespace, on every link but ``lo``,
with nftables' netdev ingress and egress hooks: a packet leaves its socket normally and
vanishes at the device (an output-hook drop would instead fail the sender's ``sendmsg``
with EPERM, which a process can notice), and nothing arriving gets past the device.
Loopback traffic (the speaker's status port, unix sockets) is untouched.

``match`` narrows the drop to the packets an nftables expression matches: ``BFD`` (BFD
control packets, UDP 3784, both directions), ``BFD4`` and ``BFD6`` (one family's), so
a test can fail one BFD session and leave BGP and the other sessions alone.

Public interface: ``blackhole(ns, match=None)``, ``restore(ns)``, ``blackholed(ns,
match=None)`` (context manager), ``is_blackholed(ns)``, ``ruleset(links, match=None)``,
``TABLE``, ``BFD``, ``BFD4``, ``BFD6``.

What it must not do: run ``nft`` outside a lab namespace (it is only ever run through
``ip netns exec`` of a namespace the lab created), or touch another nftables table (the
router's pinning table lives in another namespace, and this one has a name of its own).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kbgpd_lab.lab.netns import Netns

#: The nftables table (family netdev) holding the drop chains.
TABLE = "kube_bgpd_lab_blackhole"
#: BFD control packets (RFC 5881: to UDP port 3784 both ways), of either family or one.
BFD = "udp dport 3784"
BFD4 = f"meta protocol ip {BFD}"
BFD6 = f"meta protocol ip6 {BFD}"


def ruleset(links: Sequence[str], match: str | None = None) -> str:
    """The table dropping everything in and out of ``links`` (or only what ``match``
    matches): one ingress and one egress chain per link (netdev chains are per device),
    at a priority before any other netdev chain."""
    policy = "drop" if match is None else "accept"
    lines = [f"table netdev {TABLE} {{"]
    for n, link in enumerate(links):
        for hook in ("ingress", "egress"):
            lines += [
                f"    chain {hook}{n} {{",
                f'        type filter hook {hook} device "{link}" priority -500; policy {policy};',
                *([] if match is None else [f"        {match} drop"]),
                "    }",
            ]
    return "\n".join([*lines, "}", ""])


def _links(ns: Netns) -> list[str]:
    """Every link of the namespace but loopback."""
    data = json.loads(ns.ip("-j", "link", "show").stdout or "[]")
    return [str(link["ifname"]) for link in data if link.get("link_type") != "loopback"]


def is_blackholed(ns: Netns) -> bool:
    return ns.run(["nft", "list", "table", "netdev", TABLE], check=False).returncode == 0


def blackhole(ns: Netns, match: str | None = None) -> None:
    """Drop every packet of ``ns`` (not loopback; only ``match``'s if given) from now on;
    nothing changes if ``ns`` is blackholed already."""
    if not is_blackholed(ns):
        ns.run(["nft", "-f", "-"], input=ruleset(_links(ns), match))


def restore(ns: Netns) -> None:
    """Undo :func:`blackhole`; a namespace that is not blackholed is left as it is."""
    if is_blackholed(ns):
        ns.run(["nft", "delete", "table", "netdev", TABLE])


@contextmanager
def blackholed(ns: Netns, match: str | None = None) -> Iterator[Netns]:
    """``with blackholed(node):`` the node is cut off inside the block, restored after."""
    blackhole(ns, match)
    try:
        yield ns
    finally:
        restore(ns)


__all__ = [
    "BFD",
    "BFD4",
    "BFD6",
    "TABLE",
    "blackhole",
    "blackholed",
    "is_blackholed",
    "restore",
    "ruleset",
]
