"""docs/quickstart.md end to end, with real processes and no real cluster.

In a lab topology (network namespaces): the router runs the quickstart's FRR block
verbatim; the API simulator stands in for the API server (the shipped CRDs installed,
seeded with the quickstart's configuration objects in their namespace, two Nodes, the
quickstart's Service and a ready endpoint on node1); the controller and two speakers run
with the command lines of the rendered Deployment and DaemonSet (hostNetwork: POD_IP is
the node's address), which read the configuration from the cluster. Checked: the
Service gets the IP the page names, the router installs it with both nodes as ECMP next
hops (Cluster policy), and the page's `kube-bgpd status` / `explain --from-speaker`
commands show it.
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path
from typing import Any

import deploy_kit as kit
import pytest
import yaml

from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.processes import ProcessGroup
from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.routers import FRRRouter, RouterConfig
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(180)]

DOC = kit.DOCS / "quickstart.md"
KUBE_BGPD = kit.KUBE_BGPD
API = "172.31.250.1:6443"


def doc_blocks(info: str) -> list[str]:
    return kit.doc_blocks("quickstart.md", info)


def doc_config() -> str:
    (config,) = [b for b in doc_blocks("yaml") if "kind: IPAddressPool" in b]
    return config


def doc_service() -> dict[str, Any]:
    (service,) = [b for b in doc_blocks("yaml") if "kind: Service" in b]
    loaded: dict[str, Any] = yaml.safe_load(service)
    return loaded


class QuickstartFRR(FRRRouter):
    def render_bgpd(self) -> str:
        (frr,) = doc_blocks("frr")
        return frr


def seed(topology: Topology) -> str:
    objects: list[dict[str, Any]] = [
        manifests.namespace(ns) for ns in ("default", "kube-bgpd-system", kit.CONFIG_NAMESPACE)
    ]
    objects += kit.config_objects(doc_config())
    objects += [
        manifests.node(f"node{i}", addresses=[str(topology.node_address(i))]) for i in (1, 2)
    ]
    objects.append(doc_service())
    objects.append(
        manifests.endpoint_slice("web-a", "web", [manifests.endpoint("10.0.0.1", "node1")])
    )
    return yaml.safe_dump_all(objects)


def test_quickstart_end_to_end(topology: Topology, tmp_path: Path) -> None:
    documented = re.search(r"EXTERNAL-IP (\S+):", DOC.read_text())
    assert documented is not None
    ip = documented.group(1)
    (tmp_path / "seed.yaml").write_text(seed(topology))
    kubeconfig = tmp_path / "kubeconfig"

    router = QuickstartFRR(topology.router, RouterConfig(), tmp_path / "router")
    router.start()
    with contextlib.closing(router), ProcessGroup(tmp_path / "logs") as procs:
        apisim = procs.start(
            "apisim",
            [
                kit.KUBE_BGPD_LAB,
                "apiserver-sim",
                f"--listen={API}",
                f"--crds={kit.DEPLOY / 'crds'}",
                f"--seed={tmp_path / 'seed.yaml'}",
                f"--kubeconfig-out={kubeconfig}",
            ],
            spawner=topology.router,
        )
        wait_until(
            kubeconfig.exists,
            within=30,
            what="the API simulator's kubeconfig",
            give_up=apisim.exited,
            details=procs.log_tails,
        )
        procs.start(
            "controller",
            [
                *kit.manifest_argv(kit.one(kit.rendered(), "Deployment"), POD_IP="127.0.0.1"),
                f"--kubeconfig={kubeconfig}",
            ],
            spawner=topology.router,
        )
        nodes = {i: str(topology.node_address(i)) for i in (1, 2)}
        for i, address in nodes.items():
            procs.start(
                f"speaker{i}",
                [
                    *kit.manifest_argv(kit.one(kit.rendered(), "DaemonSet"), POD_IP=address),
                    f"--kubeconfig={kubeconfig}",
                    f"--node-name=node{i}",
                    f"--work-dir={tmp_path / f'run{i}'}",
                ],
                spawner=topology.nodes[i - 1],
            )

        try:
            router.wait_fib(f"{ip}/32", set(nodes.values()), timeout=60)
        except Exception:
            sys.stderr.write(router.log_tail())  # the processes' logs: ProcessGroup's exit
            raise
        procs.check_alive()

        # The page's checks, as it runs them inside the pod (POD_IP set by the kubelet).
        node1 = topology.nodes[0]
        # The pod's work directory is /run/kube-bgpd; here the speaker's --work-dir.
        work = f"--work-dir={tmp_path / 'run1'}"
        status = node1.run([KUBE_BGPD, "status", work], check=False)
        assert status.returncode == 0, status.stderr
        assert re.search(r"^tor\s+172\.31\.250\.1\s+up\s", status.stdout, re.M), status.stdout
        assert f"{ip}/32" in status.stdout
        explain = node1.run(
            [KUBE_BGPD, "explain", "--from-speaker", work, "default/web"], check=False
        )
        assert explain.returncode == 0, explain.stderr
        assert re.search(rf"default/web\s+{re.escape(ip)}/32\s+tor", explain.stdout), explain.stdout
