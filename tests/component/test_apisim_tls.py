"""The simulator's optional HTTPS listener with a bearer token: kubeconfig and in-cluster."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from apisim_helpers import service
from kubernetes.aio import client as aio_client
from kubernetes.aio.config.incluster_config import InClusterConfigLoader

from kbgpd_lab.apisim import ApiSimulator, ApiSimulatorThread

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def test_kubectl_over_tls_with_token(tmp_path: Path) -> None:
    with ApiSimulatorThread(tls=True, token="t0ken") as sim:
        assert sim.url.startswith("https://127.0.0.1:")
        sim.store.create(service("a"))
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        out = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "svc", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert out.split() == ["service/a"]
        denied = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "--token", "wrong", "get", "svc"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert denied.returncode != 0
        assert "Unauthorized" in denied.stderr


async def test_in_cluster_config_of_the_aio_client(tmp_path: Path) -> None:
    async with ApiSimulator(tls=True, token="in-cluster") as sim:
        assert sim.ca_cert is not None
        sim.store.create(service("a"))
        token = tmp_path / "token"
        token.write_text("in-cluster")
        configuration = aio_client.Configuration()
        InClusterConfigLoader(
            token_filename=str(token),
            cert_filename=str(sim.ca_cert),
            environ={
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(sim.port),
            },
        ).load_and_set(configuration)
        async with aio_client.ApiClient(configuration) as api:
            listed = await aio_client.CoreV1Api(api).list_namespaced_service("default")
        assert [s.metadata.name for s in listed.items] == ["a"]
