"""`kube-bgpd controller` with in-cluster credentials, as in a pod: no kubeconfig anywhere,
$KUBERNETES_SERVICE_HOST/PORT set, and the service account's token, CA certificate and
namespace at /var/run/secrets/kubernetes.io/serviceaccount.

The controller runs in its own mount namespace with a tmpfs on /run holding those files
(kbgpd_lab.kit.incluster), so the host's /run is untouched; the API simulator serves HTTPS with
a throw-away certificate and requires the token. The Lease must land in the service
account's namespace (the default when --lease-namespace is not given). The account is
read by the controller itself: a `kubernetes` package that fails to import shadows the
real one on its PYTHONPATH, so a credentials child (the official client) would end it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from k8s_kit import lb_service

from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit.incluster import ACCOUNT, ServiceAccount, in_cluster
from kbgpd_lab.kit.processes import fast_lease_argv
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(90)]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
CONFIG = """
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool}
spec:
  addresses: [10.99.6.0/29]
"""


def host_token() -> str | None:
    token = Path(ACCOUNT, "token")
    return token.read_text() if token.exists() else None


async def test_controller_uses_in_cluster_credentials(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    async with ApiSimulator(host="127.0.0.1", port=0, tls=True, token="pod-token") as sim:
        assert sim.ca_cert is not None
        sim.store.create(lb_service("web"))
        account = ServiceAccount.write(
            tmp_path / "account",
            token="pod-token",
            ca_cert=sim.ca_cert,
            namespace="kube-system",
            host="127.0.0.1",
            port=sim.port,
        )
        shadow = tmp_path / "shadow" / "kubernetes"
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text("raise ImportError('in-cluster imports no client')\n")
        argv, env = in_cluster(
            [
                KUBE_BGPD,
                "controller",
                "--config",
                str(config),
                "--identity",
                "pod-1",
                *fast_lease_argv(),
            ],
            account,
            os.environ | {"PYTHONPATH": str(shadow.parent)},
        )
        log = tmp_path / "controller.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out,
                stderr=out,
                env=env,
            )
            try:

                def allocated() -> bool:
                    obj = sim.store.get("services", "web", "default")
                    assert obj is not None
                    status = (obj.get("status") or {}).get("loadBalancer") or {}
                    return bool(status.get("ingress"))

                await wait_until_async(allocated, within=30, what="allocation over HTTPS")
                lease = sim.store.get("leases", "kube-bgpd-controller", "kube-system")
                assert lease is not None, "the Lease goes to the service account's namespace"
                assert lease["spec"]["holderIdentity"] == "pod-1"
                # A controller in a process of its own settles its heap after its first
                # round (bgpd.heap), once.
                await wait_until_async(
                    lambda: "controller.heap_frozen" in log.read_text(errors="replace"),
                    within=30,
                    what="the heap settled after the first round",
                )
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 20) == 0
                assert log.read_text(errors="replace").count("controller.heap_frozen") == 1
            except BaseException:
                print(log.read_text())
                raise
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    assert host_token() != "pod-token", "the host's /run was not touched"
