"""The configuration as custom resources in the lab: `kubectl apply` of a MetalLB-style
set (pools with a range and a CIDR, a BGPPeer whose MD5 key is in a Secret,
advertisements with communities and aggregation, a Community alias) reaches FRR and BIRD
as routes with those attributes; an invalid edit changes no route and is reported as a
Warning Event. (A configuration change under 1,000 endpoint changes a second:
tests/component/test_speaker_cluster_config.py.)
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbgpd_lab.lab.lab import CONFIG_NAMESPACE, KUBECTL_APPLY, Lab, LabService
from kbgpd_lab.lab.routers import RibPath

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(300)]

EXTRA_CIDR = "10.99.101.0/28"
ALIAS = {"name": "lab-edge", "value": "64512:200"}


def metallb_set(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lab's config with MetalLB's sample shapes added: a CIDR pool advertised as one
    aggregate, a Community alias, and communities (one by alias) on the lab pool."""
    out = []
    for doc in docs:
        if doc["kind"] == "BGPAdvertisement":
            doc["spec"]["communities"] = ["lab-edge", "64512:300"]
        out.append(doc)
    out += [
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": "extra"},
            "spec": {"addresses": [EXTRA_CIDR], "autoAssign": False},
        },
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "BGPAdvertisement",
            "metadata": {"name": "extra-aggregate"},
            "spec": {"ipAddressPools": ["extra"], "aggregationLength": 28},
        },
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "Community",
            "metadata": {"name": "aliases"},
            "spec": {"communities": [ALIAS]},
        },
    ]
    return out


def paths(lab: Lab, prefix: str) -> list[RibPath]:
    return lab.router.rib(4).get(ipaddress.ip_network(prefix), [])


def wait_for(check: Any, what: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("router", [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")])
def test_metallb_objects_applied_with_kubectl_reach_the_router(router: str, tmp_path: Path) -> None:
    web = LabService("web", (), pod_nodes=(1, 2))
    with Lab.up(
        router=router,
        cluster="api",
        ipv6=False,
        services=[web],
        state_dir=tmp_path,
        md5_password="lab-md5-key",
    ) as lab:
        # The sessions came up with the MD5 key from the Secret.
        assert set(lab.router.neighbors().values()) == {"Established"}
        lab.apply_config(metallb_set(lab.config_documents()))
        api = LabService("api", ("10.99.101.5",), pod_nodes=(3,))
        lab.set_services([web, api])
        [web, api] = lab.services
        ip = web.ips[0]
        wait_for(
            lambda: {p.communities for p in paths(lab, f"{ip}/32")} == {("64512:200", "64512:300")},
            "communities by alias and value",
        )
        wait_for(lambda: len(paths(lab, EXTRA_CIDR)) == 3, "the CIDR pool's aggregate")
        assert not paths(lab, "10.99.101.5/32"), "aggregated: no host route"
        assert lab.router.fib(EXTRA_CIDR) == lab.expected_nexthops(api)  # Cluster: all nodes

        # An invalid edit: nothing at the router changes; a Warning Event says why.
        before = lab.router.rib(4)
        changes = lab.router.changes_received()
        bad = [
            {**d, "spec": {**d["spec"], "communities": ["no-such-alias"]}}
            if d["metadata"]["name"] == "lab" and d["kind"] == "BGPAdvertisement"
            else d
            for d in lab.config_documents()
        ]
        edit = tmp_path / "bad.yaml"
        edit.write_text(yaml.safe_dump_all(bad))
        lab.kubectl("apply", *KUBECTL_APPLY, "-f", str(edit))
        wait_for(
            lambda: "InvalidConfiguration" in lab.kubectl("get", "events", "-n", CONFIG_NAMESPACE),
            "Warning Event",
        )
        assert lab.router.rib(4) == before
        assert lab.router.changes_received() == changes
