"""Shared helpers for the deploy/ and docs/ tests (test_deploy_*.py).

Rendering the kustomize tree with the real kubectl, picking objects out of it, turning a
container's arguments into the command line the kubelet would run, and reading fenced
blocks out of the docs. No logic under test lives here.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
DOCS = ROOT / "docs"
KUBECTL = "/usr/bin/kubectl"
KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
KUBE_BGPD_LAB = str(Path(sys.executable).with_name("kube-bgpd-lab"))
VALIDATE = str(Path(sys.executable).with_name("kubernetes-validate"))
#: Where components/config-file mounts the ConfigMap's config file.
CONFIG_PATH = "/etc/kube-bgpd/config.yaml"
#: The namespace the manifests read the configuration objects from.
CONFIG_NAMESPACE = "metallb-system"
#: The example configuration objects, applied with kubectl after the base.
EXAMPLE_CONFIG = DEPLOY / "examples" / "config.yaml"


@functools.cache
def _render(path: str) -> str:
    return subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY / path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def rendered(path: str = "base") -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/kubernetes/PATH` as objects (a fresh copy per call)."""
    return [d for d in yaml.safe_load_all(_render(path)) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def manifest_argv(workload: dict[str, Any], *, config: str | None = None, **env: str) -> list[str]:
    """The container's command line as the kubelet expands it ($(VAR) from `env`), run
    through this venv's kube-bgpd; with `config`, reading it instead of a mounted file."""
    argv = [KUBE_BGPD]
    for arg in container(workload)["args"]:
        arg = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)
        argv.append(arg if config is None else arg.replace(CONFIG_PATH, config))
    return argv


def overlay(
    where: Path, components: list[str], *, config: Path | None = None
) -> list[dict[str, Any]]:
    """The base with deploy/kubernetes/components/NAME for each of `components`, rendered
    by the real kubectl from an overlay written in `where`, as a user's overlay would be;
    with `config`, the overlay generates the ConfigMap components/config-file mounts
    from a copy of that file."""
    where.mkdir(parents=True, exist_ok=True)
    # kustomize takes no absolute path to a kustomization.
    base = os.path.relpath(DEPLOY / "base", where)
    parts = [os.path.relpath(DEPLOY / "components" / c, where) for c in components]
    text = (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{base}]\ncomponents: [{', '.join(parts)}]\n"
    )
    if config is not None:
        (where / "config.yaml").write_text(config.read_text())
        text += (
            "configMapGenerator:\n  - name: kube-bgpd-config\n"
            "    namespace: kube-bgpd-system\n    files: [config.yaml]\n"
        )
    (where / "kustomization.yaml").write_text(text)
    out = subprocess.run(
        [KUBECTL, "kustomize", str(where)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def config_objects(text: str) -> list[dict[str, Any]]:
    """The objects of a configuration file, as `kubectl apply -f` would create them."""
    return [d for d in yaml.safe_load_all(text) if d]


def loopback_address() -> str:
    """A random 127/8 address: the manifests' fixed port 7473 cannot clash with another
    run's (every 127/8 address is local on Linux)."""
    rnd = random.SystemRandom()
    octets = (rnd.randrange(1, 255), rnd.randrange(1, 255), rnd.randrange(2, 255))
    return str(ipaddress.IPv4Address(f"127.{octets[0]}.{octets[1]}.{octets[2]}"))


def doc_blocks(doc: str, info: str) -> list[str]:
    """The fenced blocks of docs/DOC with this info string, dedented (a block may sit in
    a list item)."""
    text = (DOCS / doc).read_text()
    found = re.findall(rf"^( *)```{info}\n(.*?)^\1```", text, re.S | re.M)
    return [textwrap.dedent(body) for _indent, body in found]
