"""The product's wheel and image hold the product only: bgpd and k8s_watcher, never the
test tools (kbgpd_lab: the lab, the API simulator, the kit) nor a command for them."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.component


def test_wheel_contains_only_the_product(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("kube_bgpd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"bgpd", "k8s_watcher"}
    assert "bgpd/exabgp/helper.py" in names
    assert "k8s_watcher/informer.py" in names
    assert not [n for n in names if "apisim" in n or "/lab/" in n or "kbgpd_lab" in n]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = configparser.ConfigParser()
    scripts.read_string(zipfile.ZipFile(wheel).read(entry_points).decode())
    assert dict(scripts["console_scripts"]) == {
        "kube-bgpd": "bgpd.cli:main",
        "kubectl-bgpd": "bgpd.cli:kubectl_main",
    }


def test_the_product_command_has_no_lab_or_simulator() -> None:
    from bgpd.cli import COMMANDS

    names = {name for name, _, _ in COMMANDS}
    assert names == {
        "validate",
        "explain",
        "speaker",
        "controller",
        "status",
        "drain",
        "inspect",
        "peers",
    }
    for command, prog in (("kube-bgpd", "kube-bgpd"), ("kubectl-bgpd", "kubectl bgpd")):
        out = subprocess.run(
            [str(Path(sys.executable).with_name(command)), "--help"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert out.startswith(f"usage: {prog} ")
        assert "apiserver-sim" not in out
        assert not re.search(r"^\s+lab\b", out, re.MULTILINE)


def test_dockerfile_copies_only_the_product() -> None:
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY\s+(.+)$", dockerfile, re.MULTILINE)
    sources = sorted(src for line in copied for src in line.split()[:-1])
    assert sources == ["README.md", "bgpd", "k8s_watcher", "pyproject.toml"]
    # The image checks that both commands of the wheel are on PATH.
    assert re.search(r"^RUN kube-bgpd --version && kubectl-bgpd --version$", dockerfile, re.M)
    ignore = (ROOT / "deploy" / "docker" / "Dockerfile.dockerignore").read_text()
    # A whitelist: everything is ignored but what the image is built from.
    lines = [line.strip() for line in ignore.splitlines() if line.strip()[:1] not in ("", "#")]
    assert lines[0] == "*"
    assert sorted(line for line in lines if line.startswith("!")) == [
        "!README.md",
        "!bgpd/",
        "!k8s_watcher/",
        "!pyproject.toml",
    ]


def test_lab_command_is_installed_beside_the_product() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).with_name("kube-bgpd-lab")), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    for action in ("up", "down", "status", "client", "demo", "apiserver-sim"):
        assert re.search(rf"^\s+{action}\b", out, re.MULTILINE), action
