"""CustomResourceDefinitions in the API simulator, through the real kubectl 1.32 and the
official Python client: registration, discovery, OpenAPI, schema validation and pruning,
versions, the status subresource, printer columns, watches and CRD deletion."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apisim_crds import CRS, POOL_CRD_YAML, peer, peer_crd, peer_crd_yaml, pool_crd
from apisim_helpers import Kubectl
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from kbgpd_lab.apisim import ApiSimulatorThread

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

NS = "metallb-system"
GROUP = "metallb.io"


@pytest.fixture
def sim() -> Iterator[ApiSimulatorThread]:
    with ApiSimulatorThread(bookmark_interval=0.5) as s:
        s.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield s


@pytest.fixture
def kubectl(sim: ApiSimulatorThread, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.write_kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def api(sim: ApiSimulatorThread, tmp_path: Path) -> Iterator[client.ApiClient]:
    path = sim.write_kubeconfig(tmp_path / "kc-client")
    with config.new_client_from_config(config_file=str(path)) as api_client:
        yield api_client


def get_json(sim: ApiSimulatorThread, path: str) -> Any:
    with urllib.request.urlopen(sim.url + path, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


def install(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for crd in (pool_crd(), peer_crd()):
        ext.create_custom_resource_definition(crd)


# --------------------------------------------------------------------------- kubectl


def test_kubectl_applies_crds_and_custom_resources_with_validation_on(
    sim: ApiSimulatorThread, kubectl: Kubectl
) -> None:
    assert "doesn't have a resource type" in kubectl.fails("get", "bgppeers", "-A")
    # Before the CRDs, kubectl reads /openapi/v2 (protobuf) and names the missing kind.
    err = kubectl.fails("apply", "-f", "-", stdin=CRS)
    assert 'no matches for kind "BGPPeer" in version "metallb.io/v1beta2"' in err
    assert "ensure CRDs are installed first" in err
    out = kubectl("apply", "-f", "-", stdin=POOL_CRD_YAML + "---\n" + peer_crd_yaml())
    assert "customresourcedefinition.apiextensions.k8s.io/bgppeers.metallb.io created" in out
    kubectl("wait", "--for", "condition=Established", "crd/bgppeers.metallb.io", "--timeout=10s")
    resources = kubectl("api-resources", "--api-group", GROUP).splitlines()
    assert [line.split()[0] for line in resources[1:]] == ["bgppeers", "ipaddresspools"]
    # No --validate=false: kubectl finds fieldValidation in /openapi/v3 and lets the
    # server validate (Strict).
    out = kubectl("apply", "-f", "-", stdin=CRS)
    assert "ipaddresspool.metallb.io/pool created" in out
    assert "bgppeer.metallb.io/router created" in out
    assert kubectl("apply", "-f", "-", stdin=CRS).count("unchanged") == 2
    requests = [r for r in sim.request_log if r.method in ("POST", "PATCH") and "metallb" in r.path]
    assert requests
    assert all("fieldValidation=Strict" in r.query for r in requests)
    # Printer columns (State has priority 1: -o wide only), Age as an age.
    table = kubectl("get", "bgppeers", "-n", NS, "-o", "wide").splitlines()
    assert table[0].split() == ["NAME", "ADDRESS", "ASN", "STATE", "AGE"]
    assert table[1].split()[:3] == ["router", "172.31.250.1", "64512"]
    assert kubectl("get", "bgppeers", "-n", NS).splitlines()[0].split() == [
        "NAME",
        "ADDRESS",
        "ASN",
        "AGE",
    ]
    explained = kubectl("explain", "bgppeers.spec.holdTime")
    assert "KIND:       BGPPeer" in explained
    assert "FIELD: holdTime <string>" in explained


def test_kubectl_reports_invalid_and_unknown_fields_as_the_apiserver(
    sim: ApiSimulatorThread, kubectl: Kubectl
) -> None:
    kubectl("apply", "-f", "-", stdin=peer_crd_yaml())
    kubectl("apply", "-f", "-", stdin=CRS.split("---\n")[1])
    bad = CRS.split("---\n")[1].replace("holdTime: 90s", "holdTime: 90")
    err = kubectl.fails("apply", "-f", "-", stdin=bad)
    assert (
        'The BGPPeer "router" is invalid: spec.holdTime: Invalid value: "integer": '
        'spec.holdTime in body must be of type string: "integer"'
    ) in err
    unknown = CRS.split("---\n")[1].replace("holdTime: 90s", "holdTime: 90s, bogus: 1")
    err = kubectl.fails("apply", "-f", "-", stdin=unknown)
    assert 'strict decoding error: unknown field "spec.bogus"' in err
    proc = kubectl.run("apply", "--validate=warn", "-f", "-", stdin=unknown)
    assert proc.returncode == 0, proc.stderr
    assert 'Warning: unknown field "spec.bogus"' in proc.stderr
    stored = sim.store.get("bgppeers.metallb.io", "router", NS)
    assert stored is not None
    assert "bogus" not in stored["spec"]
    assert stored["spec"]["peerPort"] == 179  # the schema default


def test_openapi_documents(sim: ApiSimulatorThread) -> None:
    sim.store.create(pool_crd())
    index = get_json(sim, "/openapi/v3")["paths"]
    assert {"api/v1", "apis/metallb.io/v1beta1", "apis/apiextensions.k8s.io/v1"} <= set(index)
    doc = get_json(sim, index["apis/metallb.io/v1beta1"]["serverRelativeURL"])
    pool = doc["components"]["schemas"]["io.metallb.v1beta1.IPAddressPool"]
    assert pool["x-kubernetes-group-version-kind"] == [
        {"group": GROUP, "version": "v1beta1", "kind": "IPAddressPool"}
    ]
    assert pool["properties"]["spec"]["required"] == ["addresses"]
    patch = doc["paths"]["/apis/metallb.io/v1beta1/namespaces/{namespace}/ipaddresspools/{name}"]
    assert "fieldValidation" in [p["name"] for p in patch["patch"]["parameters"]]
    v2 = get_json(sim, "/openapi/v2")
    assert "io.metallb.v1beta1.IPAddressPool" in v2["definitions"]
    sim.store.delete("crd", "ipaddresspools.metallb.io")
    assert "apis/metallb.io/v1beta1" not in get_json(sim, "/openapi/v3")["paths"]


# --------------------------------------------------------------------------- Python client


def test_discovery_follows_crds(sim: ApiSimulatorThread, api: client.ApiClient) -> None:
    groups = client.ApisApi(api).get_api_versions()
    assert GROUP not in [g.name for g in groups.groups]
    install(api)
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("bgppeers.metallb.io")
    assert [(c.type, c.status) for c in crd.status.conditions] == [
        ("NamesAccepted", "True"),
        ("Established", "True"),
    ]
    assert crd.status.stored_versions == ["v1beta2"]
    group = next(g for g in client.ApisApi(api).get_api_versions().groups if g.name == GROUP)
    assert [v.version for v in group.versions] == ["v1beta2", "v1beta1"]
    assert group.preferred_version.version == "v1beta2"
    v1beta1 = get_json(sim, "/apis/metallb.io/v1beta1")["resources"]
    assert sorted(r["name"] for r in v1beta1) == ["bgppeers", "ipaddresspools"]
    v1beta2 = get_json(sim, "/apis/metallb.io/v1beta2")["resources"]
    assert sorted(r["name"] for r in v1beta2) == ["bgppeers", "bgppeers/status"]
    client.ApiextensionsV1Api(api).delete_custom_resource_definition("bgppeers.metallb.io")
    assert [r["name"] for r in get_json(sim, "/apis/metallb.io/v1beta1")["resources"]] == [
        "ipaddresspools"
    ]


def test_invalid_object_is_422_with_causes(api: client.ApiClient) -> None:
    install(api)
    objects = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as err:
        objects.create_namespaced_custom_object(
            GROUP,
            "v1beta2",
            NS,
            "bgppeers",
            peer("bad", holdTime=90, peerPort=70000, dynamicASN="x"),
        )
    assert err.value.status == 422
    status = json.loads(err.value.body)
    assert status["reason"] == "Invalid"
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("spec.holdTime", "FieldValueTypeInvalid"),
        ("spec.peerPort", "FieldValueInvalid"),
        ("spec.dynamicASN", "FieldValueNotSupported"),
    ]
    assert status["message"].startswith('BGPPeer.metallb.io "bad" is invalid: [spec.holdTime: ')
    spec = peer("p")["spec"]
    del spec["peerASN"]
    with pytest.raises(ApiException) as err:
        objects.create_namespaced_custom_object(
            GROUP, "v1beta2", NS, "bgppeers", {**peer("p"), "spec": spec}
        )
    assert json.loads(err.value.body)["message"] == (
        'BGPPeer.metallb.io "p" is invalid: spec.peerASN: Required value'
    )
    with pytest.raises(ApiException) as err:
        objects.create_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers", peer("Tor_A"))
    assert json.loads(err.value.body)["message"].startswith(
        'BGPPeer.metallb.io "Tor_A" is invalid: metadata.name: Invalid value: "Tor_A": a '
        "lowercase RFC 1123 subdomain must consist of"
    )


def test_versions_share_objects_and_patch_types(api: client.ApiClient) -> None:
    install(api)
    objects = client.CustomObjectsApi(api)
    created = objects.create_namespaced_custom_object(
        GROUP, "v1beta1", NS, "bgppeers", peer("a", version="v1beta1", bogus=True)
    )
    assert created["apiVersion"] == "metallb.io/v1beta1"
    assert "bogus" not in created["spec"]  # pruned
    as_v2 = objects.get_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers", "a")
    assert as_v2["apiVersion"] == "metallb.io/v1beta2"
    assert as_v2["metadata"]["uid"] == created["metadata"]["uid"]
    listed = objects.list_namespaced_custom_object(GROUP, "v1beta1", NS, "bgppeers")
    assert [i["apiVersion"] for i in listed["items"]] == ["metallb.io/v1beta1"]
    # Merge patch (the client's default for custom objects), JSON patch and apply.
    objects.patch_namespaced_custom_object(
        GROUP, "v1beta1", NS, "bgppeers", "a", {"spec": {"holdTime": "30s"}}
    )
    objects.patch_namespaced_custom_object(
        GROUP,
        "v1beta2",
        NS,
        "bgppeers",
        "a",
        [{"op": "replace", "path": "/spec/peerPort", "value": 1179}],
        _content_type="application/json-patch+json",
    )
    applied = objects.patch_namespaced_custom_object(
        GROUP,
        "v1beta2",
        NS,
        "bgppeers",
        "a",
        {"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer", "spec": {"ebgpMultiHop": True}},
        field_manager="test",
        _content_type="application/apply-patch+yaml",
    )
    assert applied["spec"]["holdTime"] == "30s"
    assert (applied["spec"]["peerPort"], applied["spec"]["ebgpMultiHop"]) == (1179, True)
    assert applied["metadata"]["generation"] == 4
    with pytest.raises(ApiException) as err:
        objects.patch_namespaced_custom_object(
            GROUP,
            "v1beta2",
            NS,
            "bgppeers",
            "a",
            {"spec": {"ebgpMultiHop": False}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415


def test_status_subresource_semantics(api: client.ApiClient) -> None:
    install(api)
    objects = client.CustomObjectsApi(api)
    created = objects.create_namespaced_custom_object(
        GROUP, "v1beta2", NS, "bgppeers", {**peer("s"), "status": {"state": "ignored"}}
    )
    assert "status" not in created  # create ignores status with a status subresource
    after_status = objects.patch_namespaced_custom_object_status(
        GROUP,
        "v1beta2",
        NS,
        "bgppeers",
        "s",
        {"spec": {"holdTime": "1s"}, "status": {"state": "Established"}},
    )
    assert after_status["status"] == {"state": "Established"}
    assert "holdTime" not in after_status["spec"]  # spec ignored on /status
    assert after_status["metadata"]["generation"] == 1  # status is not the spec
    after_main = objects.patch_namespaced_custom_object(
        GROUP,
        "v1beta2",
        NS,
        "bgppeers",
        "s",
        {"spec": {"holdTime": "2s"}, "status": {"state": "Idle"}},
    )
    assert after_main["status"] == {"state": "Established"}  # status ignored on main
    assert (after_main["spec"]["holdTime"], after_main["metadata"]["generation"]) == ("2s", 2)
    # A pool (no status subresource): status is part of the object, pruned by its schema.
    pool = objects.create_namespaced_custom_object(
        GROUP,
        "v1beta1",
        NS,
        "ipaddresspools",
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": "p"},
            "spec": {"addresses": ["10.0.0.0/24"]},
        },
    )
    assert pool["spec"] == {"addresses": ["10.0.0.0/24"], "autoAssign": True}


def test_watch_sees_changes_and_crd_deletion_ends_it(
    sim: ApiSimulatorThread, api: client.ApiClient
) -> None:
    install(api)
    objects = client.CustomObjectsApi(api)
    objects.create_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers", peer("w1"))
    events: list[tuple[str, str, str]] = []

    def run() -> None:
        stream = watch.Watch().stream(
            objects.list_namespaced_custom_object,
            GROUP,
            "v1beta1",
            NS,
            "bgppeers",
            timeout_seconds=60,
        )
        for event in stream:
            obj = event["object"]
            events.append((event["type"], obj["metadata"]["name"], obj["apiVersion"]))

    watcher = threading.Thread(target=run, daemon=True)
    watcher.start()
    sim.wait_for_watches(1)
    objects.create_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers", peer("w2"))
    objects.patch_namespaced_custom_object(
        GROUP, "v1beta2", NS, "bgppeers", "w1", {"spec": {"holdTime": "3s"}}
    )
    client.ApiextensionsV1Api(api).delete_custom_resource_definition("bgppeers.metallb.io")
    watcher.join(timeout=30)
    assert not watcher.is_alive(), "the watch of a deleted CRD's resource ends"
    v1 = "metallb.io/v1beta1"
    assert events == [
        ("ADDED", "w1", v1),
        ("ADDED", "w2", v1),
        ("MODIFIED", "w1", v1),
        ("DELETED", "w1", v1),
        ("DELETED", "w2", v1),
    ]
    with pytest.raises(ApiException) as err:
        objects.list_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers")
    assert err.value.status == 404
    # Re-created, the resource is empty: the objects went with the CRD.
    install_peer = client.ApiextensionsV1Api(api).create_custom_resource_definition
    install_peer(peer_crd())
    assert objects.list_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers")["items"] == []


def test_a_default_added_to_the_crd_is_read_on_existing_objects(
    sim: ApiSimulatorThread, api: client.ApiClient
) -> None:
    install(api)
    objects = client.CustomObjectsApi(api)
    created = objects.create_namespaced_custom_object(GROUP, "v1beta2", NS, "bgppeers", peer("d"))
    assert "holdTime" not in created["spec"]
    crd = peer_crd()
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["holdTime"]["default"] = "90s"
    ext = client.ApiextensionsV1Api(api)
    current = ext.read_custom_resource_definition("bgppeers.metallb.io")
    crd["metadata"]["resourceVersion"] = current.metadata.resource_version
    ext.replace_custom_resource_definition("bgppeers.metallb.io", crd)
    read = objects.get_namespaced_custom_object(GROUP, "v1beta1", NS, "bgppeers", "d")
    assert read["spec"]["holdTime"] == "90s"
    assert read["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_invalid_crd_is_refused(api: client.ApiClient) -> None:
    crd = peer_crd()
    crd["metadata"]["name"] = "peers.metallb.io"
    with pytest.raises(ApiException) as err:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    assert err.value.status == 422
    assert (
        'metadata.name: Invalid value: "peers.metallb.io": must be spec.names.plural+"."+'
        "spec.group" in json.loads(err.value.body)["message"]
    )


ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CRDS = ROOT / "deploy" / "kubernetes" / "crds"
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))


def test_the_shipped_crds_serve_the_config_examples(
    sim: ApiSimulatorThread, kubectl: Kubectl
) -> None:
    out = kubectl("apply", "-k", str(SHIPPED_CRDS))
    assert out.count("customresourcedefinition.apiextensions.k8s.io/") == 8
    assert EXAMPLES
    for example in EXAMPLES:
        proc = kubectl.run("apply", "-n", NS, "-f", str(example))
        assert proc.returncode == 0, f"{example.name}: {proc.stderr}"
        assert proc.stderr == "", f"{example.name}: {proc.stderr}"  # no unknown fields
        assert " created" in proc.stdout
    peers = kubectl.json("get", "bgppeers.v1beta1.metallb.io", "-n", NS)["items"]
    assert peers
    assert {p["apiVersion"] for p in peers} == {"metallb.io/v1beta1"}
    name = peers[0]["metadata"]["name"]
    err = kubectl.fails(
        "patch", "bgppeer", name, "-n", NS, "--type", "merge", "-p", '{"spec":{"holdTime":90}}'
    )
    assert (
        'spec.holdTime: Invalid value: "integer": spec.holdTime in body must be of type '
        'string: "integer"'
    ) in err


def test_seed_loads_crds_before_their_objects(tmp_path: Path) -> None:
    from kbgpd_lab.cli.apisim import crd_objects, seed_order

    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "peer.yaml").write_text(peer_crd_yaml())
    (tmp_path / "crds" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [peer.yaml]\n"
    )
    (tmp_path / "crds" / "notes.txt").write_text("not a manifest")
    crds = crd_objects([tmp_path / "crds"])
    assert [c["metadata"]["name"] for c in crds] == ["bgppeers.metallb.io"]
    assert len(crd_objects([SHIPPED_CRDS])) == 8  # its kustomization.yaml is skipped
    assert [o["kind"] for o in seed_order([peer("x"), *crds])] == [
        "CustomResourceDefinition",
        "BGPPeer",
    ]
