"""Issue 15 item 1 at real routers: a Service asking for more communities than one BGP
UPDATE carries is refused, and neither its routes, another Service's routes nor any
session move; a Service at the limit reaches the router with every community."""

from __future__ import annotations

import re
from collections.abc import Callable
from ipaddress import IPv4Network
from typing import Any

import pytest

from bgpd.decision import ANNOTATION_COMMUNITIES
from bgpd.update_size import SERVICE_COMMUNITY_BYTES, STANDARD_BYTES
from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.lab import Lab, LabService
from kbgpd_lab.lab.routers import BirdRouter

WEB = LabService("web", ("10.99.100.1",), pod_nodes=(1, 2))
API = LabService("api", ("10.99.100.2",), pod_nodes=(1, 3))
AT_LIMIT = SERVICE_COMMUNITY_BYTES // STANDARD_BYTES


def communities(n: int) -> list[str]:
    return [f"{64000 + i // 60000}:{i % 60000}" for i in range(n)]


def annotate(lab: Lab, svc: LabService, values: list[str]) -> None:
    assert lab.api is not None
    lab.api.annotate("Service", svc.name, svc.namespace, {ANNOTATION_COMMUNITIES: ",".join(values)})


def notices(lab: Lab, i: int) -> list[dict[str, Any]]:
    explain = lab.speaker_status(i).get("explain") or {}
    found: list[dict[str, Any]] = explain.get("notices", [])
    return found


def paths_with_all(lab: Lab, net: IPv4Network, wanted: list[str]) -> int:
    """How many paths to `net` at the router carry every one of `wanted`. BIRD's CLI
    cuts long attribute lines, so there a filter counts them."""
    if isinstance(lab.router, BirdRouter):
        ends = " && ".join(
            f"({c.replace(':', ',')}) ~ bgp_community" for c in (wanted[0], wanted[-1])
        )
        out = lab.router.birdc(
            f"show route where net = {net} && bgp_community.len >= {len(wanted)} && {ends} count"
        )
        found = re.search(r"^(\d+) of \d+ routes .* table master4$", out, re.MULTILINE)
        assert found is not None, out
        return int(found.group(1))
    return sum(1 for p in lab.router.rib(4).get(net, []) if set(wanted) <= set(p.communities))


@pytest.mark.parametrize("router", ["frr", "bird"])
def test_too_many_communities_cost_no_route_and_no_session(
    make_lab: Callable[..., Lab], router: str
) -> None:
    lab = make_lab(router=router, ipv6=False, services=[WEB, API])
    for svc in lab.services:
        lab.wait_service(svc)
    sessions = lab.router.sessions_since()
    assert len(sessions) == 3
    web, api = lab.services
    (api_ip,) = api.ips
    net = IPv4Network(f"{api_ip}/32")

    # At the limit: accepted, and every community reaches the router from every node.
    wanted = communities(AT_LIMIT)
    annotate(lab, api, wanted)
    wait_until(
        lambda: paths_with_all(lab, net, wanted) == 3,
        within=30,
        poll=0.2,
        what="the communities at the router from every node",
    )
    assert lab.router.sessions_since() == sessions

    # 17,000: refused on every node (the notice), the last valid communities kept.
    annotate(lab, api, communities(17_000))
    for i in (1, 2, 3):
        wait_until(
            lambda i=i: any(
                n["service"] == "demo/api" and n["reason"] == "invalidAnnotationKept"
                for n in notices(lab, i)
            ),
            within=30,
            poll=0.2,
            what=f"node{i} refuses the annotation",
        )
    assert paths_with_all(lab, net, wanted) == 3
    for svc in (web, api):
        lab.wait_service(svc, timeout=5)
    assert lab.router.sessions_since() == sessions
