"""`kube-bgpd apiserver-sim` as a process: seed file, kubeconfig out, SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from apisim_helpers import endpoint_slice, node, service

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.mark.parametrize("fmt", ["yaml-multidoc", "json-list", "raw-api-lists"])
def test_cli_serves_seeded_objects_to_kubectl_and_stops_on_sigterm(
    tmp_path: Path, fmt: str
) -> None:
    objects = [
        service("web", svc_type="LoadBalancer"),
        endpoint_slice("web-1", "web", ("10.0.0.1",)),
        node("n1"),
    ]
    objects[0]["status"] = {"loadBalancer": {"ingress": [{"ip": "10.99.0.9"}]}}
    seed = tmp_path / "seed"
    if fmt == "json-list":
        seed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    elif fmt == "raw-api-lists":
        # As GET /api/v1/services answers: typed lists whose items lack kind/apiVersion.
        lists = [
            {
                "apiVersion": o["apiVersion"],
                "kind": o["kind"] + "List",
                "items": [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")}],
            }
            for o in objects
        ]
        seed.write_text("\n---\n".join(json.dumps(d) for d in lists))
    else:
        seed.write_text("\n---\n".join(json.dumps(o) for o in objects) + "\n---\n")
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from bgpd.cli import main; sys.exit(main())",
            "apiserver-sim",
            "--listen",
            "127.0.0.1:0",
            "--seed",
            str(seed),
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        out = subprocess.run(
            [
                KUBECTL,
                "--kubeconfig",
                str(kubeconfig),
                "get",
                "svc,endpointslices,nodes",
                "-A",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        items = json.loads(out)["items"]
        assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
            ("Service", "web"),
            ("EndpointSlice", "web-1"),
            ("Node", "n1"),
        ]
        # Seeding goes around HTTP, so the Service keeps the status it was dumped with.
        assert items[0]["status"]["loadBalancer"]["ingress"] == [{"ip": "10.99.0.9"}]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "apisim.ready" in err
