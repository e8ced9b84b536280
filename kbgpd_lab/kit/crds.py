"""kube-bgpd's CustomResourceDefinitions as shipped (deploy/kubernetes/crds), for a
simulator that should look like a cluster kube-bgpd is deployed in.

Role: the simulator serves metallb.io and kube-bgpd.io kinds only once their CRDs exist,
as a real apiserver does; tests and the lab install the very files users apply, so what
the speaker reads is checked against the shipped schemas.

Public interface: ``CRD_DIR``, ``crd_files()``, ``product_crds()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: The generated CRDs (python -m bgpd.config.crds deploy/kubernetes/crds).
CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "crds"


def crd_files() -> list[Path]:
    """One file per CRD (the directory's kustomization.yaml is not one)."""
    return sorted(p for p in CRD_DIR.glob("*.yaml") if p.name != "kustomization.yaml")


def product_crds() -> list[dict[str, Any]]:
    """The CRD objects, fresh dicts per call."""
    return [
        doc
        for path in crd_files()
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]
