"""MetalLB's own published sample files (tests/data/metallb-samples, see its NOTICE)
through kube-bgpd: `kube-bgpd validate` accepts each BGP sample (a fragment together with
the pools and peers it names, which the samples leave to other files), refuses what it
says it refuses (layer 2) with the reason, and decide()/allocate() give what MetalLB
gives for the samples' Service (issue 16, item 5). Each row names MetalLB's rule."""

from __future__ import annotations

import io
from collections.abc import Sequence
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import PLAIN, cluster, ep, eps, namespace, node, route_table, summary, svc

from bgpd.allocation import FailureReason, allocate
from bgpd.cli import main
from bgpd.config.documents import parse_documents
from bgpd.decision import decide
from bgpd.model import Config, NodeName, Service, SkipReason
from bgpd.objects import service_from_api

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "metallb-samples"
METALLB_KINDS = {"IPAddressPool", "BGPPeer", "BGPAdvertisement", "Community", "BFDProfile"}

#: What the fragments name and no sample defines: the rest of a user's configuration.
COMPANIONS = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: test-addresspool, namespace: metallb-system}
spec: {addresses: [192.168.30.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bgp-with-advertisement, namespace: metallb-system}
spec: {addresses: [192.168.40.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: first-pool, namespace: metallb-system}
spec: {addresses: [192.168.50.0/24]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: ebgp-single-hop0, namespace: metallb-system}
spec: {myASN: 64512, peerASN: 64500, peerAddress: 172.30.0.4}
"""

L2 = (
    "kind: L2Advertisement is not accepted: layer 2 mode is not supported: kube-bgpd only "
    "speaks BGP"
)

VALIDATE = [
    pytest.param("bgpadv_selectspool_by_label.yaml", False, [], id="adv-pool-selector"),
    pytest.param("bgpadv_selectspool_by_list.yaml", True, [], id="adv-pool-list-and-peers"),
    pytest.param("bgpadvertisement_communities_localpref.yaml", True, [], id="adv-communities"),
    pytest.param("bgpadvertisement_community_alias.yaml", True, [], id="adv-community-alias"),
    pytest.param("bgpadvertisement_with_node_selector.yaml", True, [], id="adv-node-selector"),
    pytest.param("bgppeer_simple.yaml", False, [], id="peer-simple"),
    # MetalLB runs BFD through FRR; kube-bgpd through bfdd beside ExaBGP.
    pytest.param("bgppeer_with_bfdprofile.yaml", False, [], id="peer-bfd-profile"),
    pytest.param("bgppeer_with_session_options.yaml", False, [], id="peer-connect-time"),
    pytest.param("bgppeer_with_vrf.yaml", False, [], id="peer-vrf"),
    pytest.param("bgppeer_withsecret.yaml", False, [], id="peer-secret-hold-9m-keepalive-0"),
    pytest.param("ipaddresspool_simple.yaml", False, [], id="pool-simple"),
    pytest.param("ipaddresspool_with_selector.yaml", False, [], id="pool-service-allocation"),
    pytest.param("simple_pool_adv_bgp.yaml", False, [], id="pool-and-empty-adv"),
    # Layer 2: not kube-bgpd's (it only speaks BGP), said as such.
    pytest.param("simple_pool_adv_l2.yaml", False, [L2], id="l2-pool-and-adv"),
    pytest.param("l2adv_selects_pools_by_list.yaml", False, [L2], id="l2-adv-pool-list"),
    pytest.param("l2adv_with_node_selector.yaml", False, [L2], id="l2-adv-node-selector"),
]


def validate(*files: Path) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["validate", *(str(f) for f in files)])
    return code, out.getvalue()


@pytest.mark.parametrize(("name", "companions", "errors"), VALIDATE)
def test_validate_each_sample(
    tmp_path: Path, name: str, companions: bool, errors: list[str]
) -> None:
    files = [SAMPLES / name]
    if companions:
        (tmp_path / "rest.yaml").write_text(COMPANIONS)
        files.append(tmp_path / "rest.yaml")
    code, out = validate(*files)
    found = [line.split(": ", 3)[-1] for line in out.splitlines() if line.startswith("error: ")]
    assert found == errors, out
    assert code == (1 if errors else 0), out


def test_every_sample_is_checked() -> None:
    named = {p.values[0] for p in VALIDATE} | {"deployment_bgp.yaml", "deployment_l2.yaml"}
    assert {f.name for f in SAMPLES.glob("*.yaml")} == named


def test_l2_deployment_sample_says_layer_2() -> None:
    """deployment_l2.yaml: the layer-2 advertisement is named as such; its Deployment and
    Service are not configuration kinds."""
    code, out = validate(SAMPLES / "deployment_l2.yaml")
    assert code == 1
    assert L2 in out
    assert "unknown kind Deployment" in out
    assert "unknown kind Service" in out


def documents(*names: str) -> list[dict[str, Any]]:
    return [d for n in names for d in yaml.safe_load_all((SAMPLES / n).read_text()) if d]


def sample_config(*names: str, companions: bool = False) -> Config:
    """The samples' MetalLB documents as one configuration (a deployment sample's
    Deployment and Service are workload, not configuration: they are left out)."""
    docs = [d for d in documents(*names) if d.get("kind") in METALLB_KINDS]
    if companions:
        docs += [d for d in yaml.safe_load_all(COMPANIONS) if d]
    result = parse_documents([(f"doc {i}", d) for i, d in enumerate(docs, start=1)])
    assert result.config is not None, result.errors
    return result.config


def test_deployment_sample_mixes_workload_the_validator_names() -> None:
    """deployment_bgp.yaml holds a Deployment and a Service beside the configuration:
    validate says they are not configuration kinds; its MetalLB documents validate."""
    code, out = validate(SAMPLES / "deployment_bgp.yaml")
    assert code == 1
    assert [line.split(": ")[3] for line in out.splitlines() if line.startswith("error")] == [
        "kind",
        "kind",
    ]
    assert "unknown kind Deployment" in out
    assert "unknown kind Service" in out
    config = sample_config("deployment_bgp.yaml")
    assert [p.name for p in config.peers] == ["peer", "peerv6"]


def sample_service() -> Service:
    """deployment_bgp.yaml's Service nginx, in namespace default (kubectl's)."""
    (obj,) = [d for d in documents("deployment_bgp.yaml") if d["kind"] == "Service"]
    obj["metadata"]["namespace"] = "default"
    return service_from_api(obj)


NGINX_SLICE = eps("default/nginx", ep("kind-worker"))
NODES = [node("kind-control-plane"), node("kind-worker")]


def allocated(config: Config, services: Sequence[Service], **namespaces: dict[str, str]) -> Any:
    ns = {n: namespace(n, **labels) for n, labels in namespaces.items()}
    return allocate(config, services, ns)


ALLOCATE = [
    # MetalLB hands out the first free address of the pool's first range (no
    # avoidBuggyIPs: the network address too), IPv4 for a single-stack IPv4 Service.
    pytest.param(("deployment_bgp.yaml",), {"default/nginx": ("example", "192.168.10.0")}),
    pytest.param(("simple_pool_adv_bgp.yaml",), {"default/nginx": ("example", "192.168.10.0")}),
]


@pytest.mark.parametrize(("names", "expected"), ALLOCATE)
def test_sample_service_gets_the_pools_first_address(
    names: tuple[str, ...], expected: dict[str, tuple[str, ...]]
) -> None:
    assert summary(allocated(sample_config(*names), [sample_service()], default={})) == expected


def test_pool_service_allocation_sample() -> None:
    """ipaddresspool_with_selector.yaml: MetalLB's serviceAllocation gives the pool only
    to Services in its namespaces (or namespaces matching its selectors) with matching
    labels; avoidBuggyIPs skips the .0 (and .255) of a /24."""
    config = sample_config("ipaddresspool_with_selector.yaml")
    services = [
        svc("namespace-a/app", labels={"app": "bar"}),
        svc("other/app", labels={"app": "bar"}),
        svc("namespace-b/web", labels={"app": "web"}),
    ]
    result = allocated(config, services, **{"namespace-a": {}, "other": {}, "namespace-b": {}})
    assert summary(result) == {
        "namespace-a/app": ("ippool-ns-service-alloc-sample", "192.168.20.1"),
        "other/app": FailureReason.NO_POOL_MATCHES,
        "namespace-b/web": FailureReason.NO_POOL_MATCHES,
    }


def routes_of(config: Config, node_name: str, ip: str) -> Any:
    snapshot = cluster([svc("default/nginx", ip)], [NGINX_SLICE], NODES, [namespace("default")])
    return decide(config, snapshot, NodeName(node_name))


#: The communities samples: 65535:65282 (NO_ADVERTISE) to every peer, localPref 150 only
#: to the iBGP one (64512 = 64512; MetalLB: "localPref only applies to iBGP peers").
NO_ADVERTISE = ("65535:65282",)
NO_ADVERTISE_ROUTES = [
    ("ebgp-single-hop0", "192.168.40.1/32", ("default/nginx",), (NO_ADVERTISE, (), None, None)),
    ("peer", "192.168.40.1/32", ("default/nginx",), (NO_ADVERTISE, (), 150, None)),
]

DECIDE = [
    # externalTrafficPolicy Cluster, one ready endpoint: every node announces the /32 to
    # the IPv4 peer, nothing to the IPv6 one (one session per family); no attributes.
    pytest.param(
        ("deployment_bgp.yaml",),
        False,
        "192.168.10.0",
        "kind-control-plane",
        [("peer", "192.168.10.0/32", ("default/nginx",), PLAIN)],
        id="deployment-bgp",
    ),
    # The advertisement's communities and localPref (NO_ADVERTISE_ROUTES).
    pytest.param(
        ("bgpadvertisement_communities_localpref.yaml", "bgppeer_simple.yaml"),
        True,
        "192.168.40.1",
        "kind-worker",
        NO_ADVERTISE_ROUTES,
        id="communities-localpref",
    ),
    # The same through the Community alias NO_ADVERTISE.
    pytest.param(
        ("bgpadvertisement_community_alias.yaml", "bgppeer_simple.yaml"),
        True,
        "192.168.40.1",
        "kind-worker",
        NO_ADVERTISE_ROUTES,
        id="community-alias",
    ),
    # A BGPPeer in a VRF gets the same routes (the VRF is how the session is opened).
    pytest.param(
        ("simple_pool_adv_bgp.yaml", "bgppeer_with_vrf.yaml"),
        False,
        "192.168.10.0",
        "kind-worker",
        [("peer", "192.168.10.0/32", ("default/nginx",), PLAIN)],
        id="peer-vrf",
    ),
    # The advertisement lists both sample nodes by hostname: both announce.
    pytest.param(
        ("bgpadvertisement_with_node_selector.yaml", "bgppeer_simple.yaml"),
        True,
        "192.168.50.1",
        "kind-control-plane",
        [
            ("ebgp-single-hop0", "192.168.50.1/32", ("default/nginx",), PLAIN),
            ("peer", "192.168.50.1/32", ("default/nginx",), PLAIN),
        ],
        id="adv-node-selector",
    ),
]


@pytest.mark.parametrize(("names", "companions", "ip", "node_name", "expected"), DECIDE)
def test_sample_routes(
    names: tuple[str, ...], companions: bool, ip: str, node_name: str, expected: list[Any]
) -> None:
    config = sample_config(*names, companions=companions)
    assert route_table(routes_of(config, node_name, ip).routes) == expected


def test_adv_node_selector_sample_leaves_other_nodes_out() -> None:
    """MetalLB: a node no nodeSelector of the advertisement matches does not announce."""
    config = sample_config(
        "bgpadvertisement_with_node_selector.yaml", "bgppeer_simple.yaml", companions=True
    )
    snapshot = cluster(
        [svc("default/nginx", "192.168.50.1")],
        [NGINX_SLICE],
        [*NODES, node("kind-worker2")],
        [namespace("default")],
    )
    decision = decide(config, snapshot, NodeName("kind-worker2"))
    assert decision.routes == ()
    assert [s.reason for s in decision.skipped] == [SkipReason.NO_MATCHING_ADVERTISEMENT]
