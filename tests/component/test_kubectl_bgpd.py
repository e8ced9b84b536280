"""`kubectl bgpd` (the kubectl-bgpd plugin) through the real kubectl against the API
simulator: kubectl finds the plugin on PATH, `inspect` answers with the same decision and
reason as `kube-bgpd explain` over the same objects, and reads the advertised state from
the status objects; `peers` lists every node's sessions; errors are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from apisim_helpers import KUBECTL

from kbgpd_lab.apisim import ApiSimulatorThread
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.crds import product_crds

pytestmark = [pytest.mark.component, pytest.mark.timeout(180)]

NS = "metallb-system"
BIN = Path(sys.executable).parent


def in_ns(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = NS
    return obj


CONFIG = [
    manifests.pool("pool", ["10.99.1.0/24"]),
    manifests.bgp_peer("tor-a", my_asn=64513, peer_asn=64512, address="172.31.250.1"),
    manifests.bgp_peer("tor-b", my_asn=64513, peer_asn=64512, address="172.31.250.2"),
    manifests.advertisement("all", ipAddressPools=["pool"]),
]

CLUSTER = [
    manifests.node("n1", addresses=["172.31.250.11"]),
    manifests.node("n2", addresses=["172.31.250.12"]),
    manifests.service(
        "web",
        "shop",
        policy="Local",
        ips=["10.99.1.10"],
        annotations={
            "metallb.io/ip-allocated-from-pool": "pool",
            "metallb.io/allow-shared-ip": "web-key",
        },
    ),
    manifests.endpoint_slice(
        "web-1",
        "web",
        [manifests.endpoint("10.0.0.1", "n1"), manifests.endpoint("10.0.0.2", "n2", ready=False)],
        "shop",
        ports=(8080,),
    ),
    manifests.service("batch", "shop", ips=["10.99.1.11"]),
]


def node_status(node: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "kube-bgpd.io/v1alpha1",
        "kind": "BGPNodeStatus",
        "metadata": {"name": node, "namespace": NS},
        "status": {
            "node": node,
            "summary": {"sessions": len(sessions), "sessionsUp": 1, "advertised": 1},
            "sessions": sessions,
            "config": {"source": "cluster", "stale": False, "errors": []},
            "drain": {"state": "normal"},
        },
    }


def session(peer: str, state: str, advertised: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "peer": peer,
        "address": "172.31.250.1" if peer == "tor-a" else "172.31.250.2",
        "state": state,
        "lastError": "" if state == "up" else "connection refused",
        "desired": 1,
        "accepted": 1,
        "advertised": advertised,
    }
    if state == "up":
        out["establishedAt"] = "2026-12-02T01:00:00Z"
    return out


def service_bgp_status(node: str, namespace: str, name: str, peers: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "ServiceBGPStatus",
        "metadata": {
            "name": f"{node}-{namespace}-{name}",
            "namespace": NS,
            "labels": {
                "metallb.io/node": node,
                "metallb.io/service-name": name,
                "metallb.io/service-namespace": namespace,
            },
        },
        "status": {
            "node": node,
            "serviceName": name,
            "serviceNamespace": namespace,
            "peers": peers,
        },
    }


@pytest.fixture(scope="module")
def sim() -> Iterator[ApiSimulatorThread]:
    with ApiSimulatorThread() as s:
        # The shipped CRDs: the configuration kinds and the status kinds the speakers write.
        for crd in product_crds():
            s.store.create(crd)
        for obj in CONFIG:
            s.store.create(in_ns(json.loads(json.dumps(obj))))
        for obj in CLUSTER:
            s.store.create(obj)
        s.store.create(node_status("n1", [session("tor-a", "up", 1), session("tor-b", "down", 0)]))
        s.store.create(service_bgp_status("n1", "shop", "web", ["tor-a"]))
        yield s


@pytest.fixture(scope="module")
def kubeconfig(sim: ApiSimulatorThread, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(sim.write_kubeconfig(tmp_path_factory.mktemp("kubectl-bgpd") / "kubeconfig"))


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl, with the plugin's directory on PATH (as a user installs it)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [KUBECTL, *args, "--kubeconfig", str(kubeconfig)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_kubectl_finds_the_plugin(kubeconfig: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(
        [KUBECTL, "plugin", "list"], env=env, capture_output=True, text=True, check=False
    )
    assert str(BIN / "kubectl-bgpd") in listed.stdout
    usage = kubectl(kubeconfig, "bgpd", "--help")
    assert usage.returncode == 0, usage.stderr
    assert "kubectl bgpd" in usage.stdout
    assert "inspect" in usage.stdout
    assert "peers" in usage.stdout


def explain_json(tmp_path: Path, kubeconfig: Path) -> list[dict[str, Any]]:
    """`kube-bgpd explain` over the same objects: the config as a file, the cluster as
    `kubectl get ... -o json` dumps it."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump_all(CONFIG))
    dump = subprocess.run(
        [
            KUBECTL,
            "get",
            "services,endpointslices,nodes",
            "-A",
            "-o",
            "json",
            "--kubeconfig",
            str(kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (tmp_path / "dump.json").write_text(dump)
    proc = subprocess.run(
        [
            str(BIN / "kube-bgpd"),
            "explain",
            "--config",
            str(config),
            "--cluster",
            str(tmp_path / "dump.json"),
            "--output",
            "json",
            "shop/web",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


def test_inspect_shows_what_explain_decides(kubeconfig: Path, tmp_path: Path) -> None:
    proc = kubectl(kubeconfig, "bgpd", "inspect", "shop/web", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 1
    assert doc["service"] == "shop/web"
    assert doc["allocation"]["pool"] == "pool"
    assert doc["allocation"]["ips"] == ["10.99.1.10"]
    assert doc["allocation"]["sharingKey"] == "web-key"
    by_node = {n["node"]: n for n in doc["nodes"]}
    assert by_node["n1"]["endpoints"] == {"serving": 1, "total": 1}
    assert by_node["n2"]["endpoints"] == {"serving": 0, "total": 1}
    # The same decision and reason as `kube-bgpd explain`, node by node.
    for explained in explain_json(tmp_path, kubeconfig):
        node = by_node[explained["node"]]
        assert sorted((r["prefix"], r["peer"]) for r in node["routes"]) == sorted(
            (r["prefix"], r["peer"]) for r in explained["routes"]
        )
        assert node["skipped"] == [
            {k: v for k, v in s.items() if k != "service"} for s in explained["skipped"]
        ]
    # n1 announces to both peers; its ServiceBGPStatus names tor-a only (tor-b is down).
    advertised = {r["peer"]: r["advertised"] for r in by_node["n1"]["routes"]}
    assert advertised == {"tor-a": True, "tor-b": False}
    assert by_node["n1"]["announced"] is True
    # n2 has no local endpoint (Local policy) and wrote no status.
    assert by_node["n2"]["announced"] is False
    assert [s["reason"] for s in by_node["n2"]["skipped"]] == ["noLocalEndpoints"]


def test_inspect_table_and_namespace_flag(kubeconfig: Path) -> None:
    proc = kubectl(kubeconfig, "bgpd", "inspect", "-n", "shop", "web")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Service shop/web"
    assert "pool pool, IPs 10.99.1.10, sharing key web-key" in lines[1]
    rows = [line.split() for line in lines if line.startswith("  n")]
    assert ["n1", "1/1", "announce", "10.99.1.10/32", "tor-a", "yes"] in rows
    assert ["n1", "1/1", "announce", "10.99.1.10/32", "tor-b", "no"] in rows
    assert rows[-1][:3] == ["n2", "0/1", "noLocalEndpoints"]


def test_peers_lists_every_nodes_sessions(kubeconfig: Path) -> None:
    proc = kubectl(kubeconfig, "bgpd", "peers", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 1
    (n1,) = doc["nodes"]
    assert n1["node"] == "n1"
    assert [(s["peer"], s["state"], s["advertised"]) for s in n1["sessions"]] == [
        ("tor-a", "up", 1),
        ("tor-b", "down", 0),
    ]
    assert n1["sessions"][1]["lastError"] == "connection refused"
    table = kubectl(kubeconfig, "bgpd", "peers")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:4] == ["NODE", "PEER", "ADDRESS", "STATE"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("inspect", "a/b/c"), "is not NAMESPACE/SERVICE", id="bad-service"),
        pytest.param(
            ("inspect", "shop/web", "--context", "nowhere"), "nowhere", id="unknown-context"
        ),
    ],
)
def test_errors_are_one_line(kubeconfig: Path, args: tuple[str, ...], message: str) -> None:
    proc = kubectl(kubeconfig, "bgpd", *args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreachable_api_is_one_line(tmp_path: Path, kubeconfig: Path) -> None:
    dead = tmp_path / "dead"
    text = kubeconfig.read_text()
    doc = yaml.safe_load(text)
    doc["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    dead.write_text(yaml.safe_dump(doc))
    proc = kubectl(dead, "bgpd", "peers")
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("kubectl bgpd peers: ")


def test_a_bare_service_is_looked_up_in_the_contexts_namespace(
    tmp_path: Path, kubeconfig: Path
) -> None:
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["contexts"][0]["context"]["namespace"] = "shop"
    shop = tmp_path / "shop-kubeconfig"
    shop.write_text(yaml.safe_dump(doc))
    proc = kubectl(shop, "bgpd", "inspect", "web", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["service"] == "shop/web"
