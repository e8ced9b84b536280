"""The real kubectl (/usr/bin/kubectl, 1.32) against the API simulator, via subprocess."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from apisim_crds import CRS, POOL_CRD_YAML, peer_crd_yaml
from apisim_helpers import Kubectl, endpoint_slice, node, service

from kbgpd_lab.apisim import ApiSimulatorThread

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

MANIFEST = """\
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  labels:
    app: web
spec:
  type: LoadBalancer
  ports:
  - name: http
    port: 80
  - name: https
    port: 443
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
endpoints:
- addresses: [10.0.0.1]
  conditions: {ready: true}
ports:
- port: 8080
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[ApiSimulatorThread]:
    with ApiSimulatorThread(bookmark_interval=0.5) as s:
        yield s


@pytest.fixture
def kubectl(sim: ApiSimulatorThread, tmp_path: Path) -> Iterator[Kubectl]:
    yield Kubectl(sim.write_kubeconfig(tmp_path / "kubeconfig"))
    for resource in ("services", "endpointslices", "nodes"):
        for obj in sim.store.list(resource):
            meta = obj["metadata"]
            if meta.get("finalizers"):
                sim.store.patch(
                    resource,
                    meta["name"],
                    {"metadata": {"finalizers": None}},
                    namespace=meta.get("namespace"),
                )
            if sim.store.get(resource, meta["name"], meta.get("namespace")) is not None:
                sim.store.delete(resource, meta["name"], meta.get("namespace"))


def test_get_services_endpointslices_nodes_in_every_output(
    sim: ApiSimulatorThread, kubectl: Kubectl
) -> None:
    sim.store.create(service("a", labels={"app": "web"}))
    sim.store.create(service("b", "other"))
    sim.store.create(endpoint_slice("a-1", "a", ("10.0.0.1",)))
    sim.store.create(node("n1"))
    table = kubectl("get", "svc", "-A", "-o", "wide").splitlines()
    assert table[0].split() == [
        "NAMESPACE",
        "NAME",
        "TYPE",
        "CLUSTER-IP",
        "EXTERNAL-IP",
        "PORT(S)",
        "AGE",
        "SELECTOR",
    ]
    row = table[1].split()
    assert row[:3] + row[4:6] == ["default", "a", "ClusterIP", "<none>", "80/TCP"]
    assert row[3].startswith("10.96.")
    assert kubectl("get", "nodes").splitlines()[1].split()[:3] == ["n1", "Ready", "<none>"]
    assert [i["metadata"]["name"] for i in kubectl.json("get", "svc", "-A")["items"]] == ["a", "b"]
    assert [
        i["metadata"]["name"] for i in kubectl.json("get", "svc", "-l", "app=web")["items"]
    ] == ["a"]
    slices = yaml.safe_load(kubectl("get", "endpointslices", "-o", "yaml"))
    assert slices["items"][0]["endpoints"][0]["addresses"] == ["10.0.0.1"]
    assert kubectl.json("get", "nodes")["items"][0]["metadata"]["name"] == "n1"
    one = kubectl.json("get", "svc", "a")
    assert (one["kind"], one["metadata"]["name"]) == ("Service", "a")


def test_get_several_kinds_all_namespaces_yaml_is_one_list(
    sim: ApiSimulatorThread, kubectl: Kubectl
) -> None:
    sim.store.create(service("a", svc_type="LoadBalancer"))
    sim.store.create(endpoint_slice("a-1", "a", ("10.0.0.1",)))
    sim.store.create(node("n1"))
    dump = yaml.safe_load(kubectl("get", "services,endpointslices,nodes", "-A", "-o", "yaml"))
    assert dump["kind"] == "List"
    kinds = [(i["apiVersion"], i["kind"], i["metadata"]["name"]) for i in dump["items"]]
    assert kinds == [
        ("v1", "Service", "a"),
        ("discovery.k8s.io/v1", "EndpointSlice", "a-1"),
        ("v1", "Node", "n1"),
    ]


def test_get_missing_object_fails_with_not_found(kubectl: Kubectl) -> None:
    err = kubectl.fails("get", "svc", "nope")
    assert 'services "nope" not found' in err


def test_apply_create_then_apply_removal_of_a_port(
    sim: ApiSimulatorThread, kubectl: Kubectl
) -> None:
    proc = kubectl.run("apply", "-f", "-", stdin=MANIFEST)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no validation or OpenAPI complaint
    out = proc.stdout
    assert "service/web created" in out
    assert "endpointslice.discovery.k8s.io/web-1 created" in out
    created = sim.store.get("services", "web", "default")
    assert created is not None
    assert "kubectl.kubernetes.io/last-applied-configuration" in created["metadata"]["annotations"]
    smaller = MANIFEST.replace("  - name: https\n    port: 443\n", "")
    out = kubectl("apply", "-f", "-", stdin=smaller)
    assert "service/web configured" in out
    applied = sim.store.get("services", "web", "default")
    assert applied is not None
    assert [p["name"] for p in applied["spec"]["ports"]] == ["http"]
    # The allocation the server made survives the client's three-way merge.
    assert applied["spec"]["clusterIP"] == created["spec"]["clusterIP"]
    out = kubectl("apply", "-f", "-", stdin=smaller)
    assert "service/web unchanged" in out


def test_label_annotate_and_three_patch_types(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    sim.store.create(service("web", ports=(80,)))
    kubectl("label", "svc", "web", "team=a")
    kubectl("annotate", "svc", "web", "note=x")
    kubectl(
        "patch", "svc", "web", "--type", "merge", "-p", '{"spec":{"sessionAffinity":"ClientIP"}}'
    )
    kubectl(
        "patch",
        "svc",
        "web",
        "--type",
        "json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/j","value":"1"}]',
    )
    kubectl(
        "patch", "svc", "web", "--type", "strategic", "-p", '{"spec":{"ports":[{"port":8080}]}}'
    )
    kubectl(
        "patch",
        "svc",
        "web",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        '{"status":{"loadBalancer":{"ingress":[{"ip":"10.99.0.5"}]}}}',
    )
    svc = sim.store.get("services", "web", "default")
    assert svc is not None
    assert svc["metadata"]["labels"] == {"team": "a", "j": "1"}
    assert svc["metadata"]["annotations"] == {"note": "x"}
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert [p["port"] for p in svc["spec"]["ports"]] == [80, 8080]
    assert svc["status"]["loadBalancer"]["ingress"] == [{"ip": "10.99.0.5"}]
    kubectl("label", "svc", "web", "team-")
    svc = sim.store.get("services", "web", "default")
    assert svc is not None
    assert svc["metadata"]["labels"] == {"j": "1"}


def test_delete_and_delete_with_finalizer(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    sim.store.create(service("a"))
    kept = service("b")
    kept["metadata"]["finalizers"] = ["example.com/hold"]
    sim.store.create(kept)
    assert 'service "a" deleted' in kubectl("delete", "svc", "a")
    assert sim.store.get("services", "a", "default") is None
    kubectl("delete", "svc", "b", "--wait=false")
    held = sim.store.get("services", "b", "default")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    kubectl("patch", "svc", "b", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')
    assert sim.store.get("services", "b", "default") is None


def test_get_watch_streams_changes(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    sim.store.create(service("first"))
    proc = subprocess.Popen(
        kubectl.argv("get", "svc", "--watch", "-o", "name"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "service/first"
        sim.wait_for_watches(1)
        sim.store.create(service("second"))
        assert proc.stdout.readline().strip() == "service/second"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)


def test_dry_run_server_and_api_resources(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=MANIFEST)
    assert "(server dry run)" in out
    assert sim.store.get("services", "web", "default") is None
    resources = kubectl("api-resources", "-o", "name")
    for name in ("services", "endpointslices.discovery.k8s.io", "leases.coordination.k8s.io"):
        assert name in resources.split()
    assert "Server Version: v1.32" in kubectl("version")


def test_create_from_file_and_delete_namespace(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    kubectl(
        "create", "-f", "-", stdin="apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n"
    )
    sim.store.create(service("inside", "team-a"))
    ns = sim.store.get("namespaces", "team-a")
    assert ns is not None
    assert ns["status"]["phase"] == "Active"
    started = time.monotonic()
    kubectl("delete", "namespace", "team-a")
    assert time.monotonic() - started < 30
    assert sim.store.get("namespaces", "team-a") is None
    assert sim.store.get("services", "inside", "team-a") is None


def test_create_generators_send_protobuf(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    # `kubectl create namespace|configmap|secret` encode protobuf, which is decoded.
    kubectl("create", "namespace", "team-b")
    kubectl(
        "create", "secret", "generic", "bgp-pass", "-n", "team-b", "--from-literal=password=s3 cret"
    )
    kubectl("create", "configmap", "cm", "-n", "team-b", "--from-literal=a=b")
    ns = sim.store.get("namespaces", "team-b")
    secret = sim.store.get("secrets", "bgp-pass", "team-b")
    config = sim.store.get("configmaps", "cm", "team-b")
    assert ns is not None
    assert secret is not None
    assert config is not None
    assert ns["status"] == {"phase": "Active"}
    assert (secret["type"], secret["data"]) == ("Opaque", {"password": "czMgY3JldA=="})
    assert config["data"] == {"a": "b"}
    # Other kinds' protobuf bodies are refused, as documented.
    err = kubectl.fails("create", "service", "clusterip", "svc1", "--tcp=80:8080")
    assert "unknown format" in err
    kubectl("delete", "namespace", "team-b")


def test_metallb_custom_resources_apply_and_list(sim: ApiSimulatorThread, kubectl: Kubectl) -> None:
    # A cluster has no metallb.io resources until their CRDs are applied.
    assert "doesn't have a resource type" in kubectl.fails("get", "ipaddresspools", "-A")
    kubectl("apply", "-f", "-", stdin=POOL_CRD_YAML + "---\n" + peer_crd_yaml())
    kubectl("create", "namespace", "metallb-system")
    out = kubectl("apply", "-f", "-", stdin=CRS)
    assert "ipaddresspool.metallb.io/pool created" in out
    assert "bgppeer.metallb.io/router created" in out
    kubectl("apply", "-f", "-", stdin=CRS.replace("10.99.1.0", "10.99.2.0"))
    pool = sim.store.get("ipaddresspools.metallb.io", "pool", "metallb-system")
    assert pool is not None
    assert (pool["spec"]["addresses"], pool["metadata"]["generation"]) == (["10.99.2.0/24"], 2)
    dump = kubectl.json("get", "ipaddresspools,bgppeers", "-A")
    assert [(i["apiVersion"], i["kind"]) for i in dump["items"]] == [
        ("metallb.io/v1beta1", "IPAddressPool"),
        ("metallb.io/v1beta2", "BGPPeer"),
    ]
    err = kubectl.fails(
        "patch",
        "ipaddresspool",
        "pool",
        "-n",
        "metallb-system",
        "--type",
        "strategic",
        "-p",
        '{"spec":{"autoAssign":false}}',
    )
    assert "UnsupportedMediaType" in err or "unknown format" in err
    kubectl("delete", "crd", "ipaddresspools.metallb.io", "bgppeers.metallb.io")
    kubectl("delete", "namespace", "metallb-system")
    # Gone (kubectl's discovery cache may still list the resource: then the list is 404).
    err = kubectl.fails("get", "bgppeers", "-A")
    assert "doesn't have a resource type" in err or "could not find the requested" in err
