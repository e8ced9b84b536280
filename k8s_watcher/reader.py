"""One-shot reads for `kubectl bgpd` (inspect, peers): the cluster's objects, the
configuration in force and the status objects the speakers write, listed once (no watch).

The speaker's informers list and then watch; a command only needs one consistent-enough
look, so this lists each kind once, in pages, converting at the boundary exactly as the
informers do (the same `Kind`s, so the same converters and label selectors), and builds the
configuration with the same resolver as `--config-from-cluster`
(bgpd.config.cluster.resolve over the same kinds and the same kept fields).

A kind whose CustomResourceDefinition is not installed (404 on its collection) reads as
empty and is named in `missing`, so the command can say so instead of failing: a cluster
without BFDProfile or the status kinds is an ordinary one.

This module decides nothing; it reads and converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bgpd.config.cluster import ObjectKey, RawObject, Resolution, object_key, resolve
from bgpd.model import ClusterSnapshot
from bgpd.objects import build_snapshot
from k8s_watcher.client import KubeClient, object_path
from k8s_watcher.config_source import CONFIG_KINDS, config_object
from k8s_watcher.errors import NotFound
from k8s_watcher.informer import ENDPOINT_SLICES, NAMESPACES, NODES, SERVICES, Kind

#: Items per LIST page, as the informers page.
PAGE_SIZE: Final = 500

#: The status kinds the speakers write: (kind, group/version, plural).
NODE_STATUS: Final = ("BGPNodeStatus", "kube-bgpd.io/v1alpha1", "bgpnodestatuses")
SERVICE_BGP_STATUS: Final = ("ServiceBGPStatus", "metallb.io/v1beta1", "servicebgpstatuses")


@dataclass(slots=True)
class Reading:
    """What one read found; `missing` names the kinds the API does not serve."""

    missing: list[str] = field(default_factory=list)


async def list_objects(
    client: KubeClient,
    group_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    page_size: int = PAGE_SIZE,
) -> list[dict[str, Any]]:
    """Every object of a collection (all namespaces when `namespace` is None), in pages."""
    path = object_path(group_version, plural, namespace=namespace)
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query: list[tuple[str, str]] = [("limit", str(page_size))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if token:
            query.append(("continue", token))
        doc = await client.request("GET", path, query=query, what=f"list {plural}")
        items.extend(i for i in doc.get("items") or () if isinstance(i, dict))
        meta = doc.get("metadata")
        token = meta.get("continue", "") if isinstance(meta, Mapping) else ""
        if not token:
            return items


async def _kind_items(client: KubeClient, kind: Kind[Any]) -> list[Any]:
    raw = await list_objects(
        client,
        kind.group_version,
        kind.resource,
        namespace=kind.namespace,
        label_selector=kind.label_selector,
    )
    return [kind.convert(obj) for obj in raw]


async def read_snapshot(client: KubeClient) -> ClusterSnapshot:
    """Services, EndpointSlices, Nodes and Namespaces, as the speaker's informers see
    them (the same kinds and converters), as one snapshot."""
    return build_snapshot(
        await _kind_items(client, SERVICES),
        await _kind_items(client, ENDPOINT_SLICES),
        await _kind_items(client, NODES),
        await _kind_items(client, NAMESPACES),
    )


async def read_config(client: KubeClient, namespace: str, reading: Reading) -> Resolution:
    """The configuration objects of `namespace` through the resolver the speaker's
    `--config-from-cluster` uses (no last valid versions: an invalid object is left out
    and named in `rejected`)."""
    current: dict[ObjectKey, RawObject] = {}
    for table, plural in CONFIG_KINDS:
        try:
            raw = await list_objects(client, table.api_version, plural, namespace=namespace)
        except NotFound:
            reading.missing.append(table.kind)
            continue
        for obj in raw:
            # A list's items carry no kind; the informer's converter needs it.
            kept = config_object({**obj, "kind": table.kind, "apiVersion": table.api_version})
            key = object_key(kept)
            if key is not None:
                current[key] = kept
    return resolve(current, {})


async def read_status_objects(
    client: KubeClient,
    kind: tuple[str, str, str],
    reading: Reading,
    *,
    label_selector: str | None = None,
) -> list[dict[str, Any]]:
    """Every object of a status kind (NODE_STATUS, SERVICE_BGP_STATUS) in every namespace."""
    name, group_version, plural = kind
    try:
        return await list_objects(client, group_version, plural, label_selector=label_selector)
    except NotFound:
        reading.missing.append(name)
        return []


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig context in use (kubectl's default for -n; in a pod
    the service account's), None when it names none or the credentials fail (the command
    says that when it connects: the credentials' answer is kept for it)."""
    import asyncio

    from k8s_watcher.client import load_credentials
    from k8s_watcher.errors import CredentialsError

    try:
        return asyncio.run(load_credentials(kubeconfig, context=context)).namespace
    except CredentialsError:
        return None
