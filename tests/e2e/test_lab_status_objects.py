"""MetalLB's ServiceBGPStatus in the lab, against a real router: each node's object lists
the peer while the session is Established; the router stopped, the objects lose it (no
peer left: deleted, as MetalLB does); the router back, they return.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kbgpd_lab.lab.lab import Lab, LabService

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(300)]

PATH = "/apis/metallb.io/v1beta1/servicebgpstatuses"


def peers_by_node(lab: Lab, service: str) -> dict[str, list[str]]:
    """Node -> the peers its ServiceBGPStatus of `service` lists."""
    assert lab.api is not None
    status, doc = lab.api.request(
        "GET", f"{PATH}?labelSelector=metallb.io/service-name%3D{service}"
    )
    assert status == 200, doc
    return {
        o["metadata"]["labels"]["metallb.io/node"]: o.get("status", {}).get("peers", [])
        for o in doc["items"]
    }


def wait_for(check: Callable[[], bool], what: str, within: float = 90) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_service_bgp_status_follows_the_router(tmp_path: Path) -> None:
    """At FRR only, to keep the e2e tier short (the objects come from the speaker's own
    session state, the same for every router kind)."""
    web = LabService("web", (), pod_nodes=(1,))
    with Lab.up(
        router="frr", cluster="api", nodes=2, ipv6=False, services=[web], state_dir=tmp_path
    ) as lab:
        peers = sorted(
            d["metadata"]["name"] for d in lab.config_documents() if d["kind"] == "BGPPeer"
        )
        everywhere = {"node1": peers, "node2": peers}  # Cluster policy: both nodes announce
        wait_for(lambda: peers_by_node(lab, "web") == everywhere, "both nodes' objects")

        lab.router.stop()
        wait_for(lambda: peers_by_node(lab, "web") == {}, "the peer gone from every object")

        lab.router.start()
        wait_for(lambda: peers_by_node(lab, "web") == everywhere, "the objects back", 150)
