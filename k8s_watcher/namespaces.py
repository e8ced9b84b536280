"""Namespace defaults shared by the commands and the watchers (no client import, so the
command line can show them without loading the Kubernetes client)."""

from __future__ import annotations

from typing import Final

#: Where the configuration objects live by default: MetalLB's own namespace, so a
#: MetalLB user's objects are found where they already are.
DEFAULT_CONFIG_NAMESPACE: Final = "metallb-system"
