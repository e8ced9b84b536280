"""`kube-bgpd-lab apiserver-sim` as a process: seed files, kubeconfig out, SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from apisim_helpers import endpoint_slice, node, service

from kbgpd_lab.cli.apisim import load_objects

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def objects(suffix: str) -> list[dict[str, Any]]:
    svc = service(f"web-{suffix}", svc_type="LoadBalancer")
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "10.99.0.9"}]}}
    return [svc, endpoint_slice(f"web-{suffix}-1", f"web-{suffix}", ("10.0.0.1",)), node(suffix)]


def write_seed(path: Path, fmt: str, objs: list[dict[str, Any]]) -> Path:
    if fmt == "json-list":
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    elif fmt == "raw-api-lists":
        # As GET /api/v1/services answers: typed lists whose items lack kind/apiVersion.
        lists = [
            {
                "apiVersion": o["apiVersion"],
                "kind": o["kind"] + "List",
                "items": [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")}],
            }
            for o in objs
        ]
        path.write_text("\n---\n".join(json.dumps(d) for d in lists))
    else:
        path.write_text("\n---\n".join(json.dumps(o) for o in objs) + "\n---\n")
    return path


@pytest.mark.parametrize("fmt", ["yaml-multidoc", "json-list", "raw-api-lists"])
def test_seed_formats_load_the_same_objects(tmp_path: Path, fmt: str) -> None:
    expected = objects("a")
    loaded = load_objects(write_seed(tmp_path / "seed", fmt, expected))
    assert loaded == expected


def test_cli_serves_seeded_objects_to_kubectl_and_stops_on_sigterm(tmp_path: Path) -> None:
    seeds = [
        write_seed(tmp_path / fmt, fmt, objects(str(i)))
        for i, fmt in enumerate(("yaml-multidoc", "json-list", "raw-api-lists"))
    ]
    kubeconfig = tmp_path / "kubeconfig"
    argv = [
        sys.executable,
        "-m",
        "kbgpd_lab",
        "apiserver-sim",
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig-out",
        str(kubeconfig),
    ]
    for seed in seeds:
        argv += ["--seed", str(seed)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        get = ["get", "svc,endpointslices,nodes", "-A", "-o", "json"]
        out = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), *get],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        items = json.loads(out)["items"]
        assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
            ("Service", "web-0"),
            ("Service", "web-1"),
            ("Service", "web-2"),
            ("EndpointSlice", "web-0-1"),
            ("EndpointSlice", "web-1-1"),
            ("EndpointSlice", "web-2-1"),
            ("Node", "0"),
            ("Node", "1"),
            ("Node", "2"),
        ]
        # Seeding goes around HTTP, so a Service keeps the status it was dumped with.
        assert items[0]["status"]["loadBalancer"]["ingress"] == [{"ip": "10.99.0.9"}]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "apisim.ready" in err
