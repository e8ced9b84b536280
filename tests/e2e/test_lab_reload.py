"""End to end: configuration changes applied in place, judged at a real router.

Each node has two sessions with the router (BGPPeers tor-v4 and tor-v6). The speakers'
config file is edited and the speakers are sent SIGHUP (``Lab.edit_config``); the router
says whether a session was reset (``Router.sessions_since``: FRR's count of sessions
established, BIRD's count of its protocol coming up) and which routes and communities it
has. Nothing may restart ExaBGP (its generation in /status stays 1): a peer edit is
reloaded in place (only that peer's session is reset, and its routes come back), a peer
removed and added back takes its session away and back (its routes re-sent through the
API), and a community added to an advertisement reaches the routes without any session
reset.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.lab import Lab, LabService, node_addresses
from kbgpd_lab.lab.routers import RibPath

pytestmark = [pytest.mark.e2e, pytest.mark.root]

WEB = LabService("web", ("10.99.100.1", "fd00:99:100::1"), pod_nodes=(1, 2))
V4, V6 = ipaddress.ip_network("10.99.100.1/32"), ipaddress.ip_network("fd00:99:100::1/128")
COMMUNITY = "64512:42"


def session_addresses(lab: Lab, family: int) -> set[Any]:
    """The node addresses of that family the router has sessions with."""
    out = set()
    for i in (1, 2):
        for a in node_addresses(lab.topology, i):
            ip = ipaddress.ip_address(a)
            if ip.version == family:
                out.add(ip)
    return out


def generations(lab: Lab) -> list[int]:
    return [int(lab.speaker_status(i)["exabgp"]["generation"]) for i in (1, 2)]


def set_peer(docs: list[dict[str, Any]], name: str, **spec: Any) -> None:
    for doc in docs:
        if doc.get("kind") == "BGPPeer" and doc["metadata"]["name"] == name:
            doc["spec"].update(spec)


def paths(lab: Lab, prefix: Any) -> list[RibPath]:
    return lab.router.rib(prefix.version).get(prefix, [])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("router", ["frr", "bird"])
def test_peer_changes_reset_only_that_session_and_a_community_resets_none(
    make_lab: Any, router: str
) -> None:
    lab: Lab = make_lab(router, nodes=2, cluster="file", services=[WEB])
    v4, v6 = session_addresses(lab, 4), session_addresses(lab, 6)
    lab.router.wait_route(V6, next_hops=None, timeout=30)
    before = lab.router.sessions_since()
    assert set(before) == v4 | v6, before
    assert generations(lab) == [1, 1]

    # 1. One peer edited (its hold time): only its sessions are reset; routes come back.
    lab.edit_config(lambda docs: set_peer(docs, "tor-v6", holdTime="30s"))
    after = wait_until(
        lambda: (
            s
            if set(s := lab.router.sessions_since()) == v4 | v6
            and all(s[a] != before[a] for a in v6)
            else None
        ),
        within=60,
        what="the IPv6 sessions re-established",
    )
    assert {a: after[a] for a in v4} == {a: before[a] for a in v4}, "an IPv4 session was reset"
    wait_until(lambda: len(paths(lab, V6)) == 2, within=30, what="IPv6 route from both nodes")
    assert len(paths(lab, V4)) == 2
    assert generations(lab) == [1, 1], "ExaBGP was restarted"

    # 2. A community added to the advertisement: new attribute, no session reset.
    marks = lab.router.sessions_since()

    def add_community(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc.get("kind") == "BGPAdvertisement":
                doc["spec"]["communities"] = [COMMUNITY]

    lab.edit_config(add_community)
    for prefix in (V4, V6):
        wait_until(
            lambda prefix=prefix: (
                len(ps := paths(lab, prefix)) == 2 and all(COMMUNITY in p.communities for p in ps)
            ),
            within=30,
            what=f"{COMMUNITY} on both paths of {prefix}",
        )
    assert lab.router.sessions_since() == marks, "a session was reset by a community"
    assert generations(lab) == [1, 1]

    # 3. One peer removed, then added back: its sessions go and come back with their
    #    routes (sent again through the API); the other sessions are never touched.
    removed: list[dict[str, Any]] = []

    def remove_v6(docs: list[dict[str, Any]]) -> None:
        for doc in list(docs):
            if doc.get("kind") == "BGPPeer" and doc["metadata"]["name"] == "tor-v6":
                removed.append(doc)
                docs.remove(doc)

    lab.edit_config(remove_v6)
    wait_until(
        lambda: not set(lab.router.sessions_since()) & v6 and not paths(lab, V6),
        within=30,
        what="IPv6 sessions closed and the IPv6 route gone",
    )
    lab.edit_config(lambda docs: docs.extend(removed))
    final = wait_until(
        lambda: s if set(s := lab.router.sessions_since()) == v4 | v6 else None,
        within=60,
        what="the IPv6 sessions back",
    )
    wait_until(
        lambda: len(ps := paths(lab, V6)) == 2 and all(COMMUNITY in p.communities for p in ps),
        within=30,
        what="IPv6 route re-sent from both nodes",
    )
    assert {a: final[a] for a in v4} == {a: marks[a] for a in v4}, "an IPv4 session was reset"
    assert len(paths(lab, V4)) == 2
    assert generations(lab) == [1, 1], "ExaBGP was restarted"
