"""The CustomResourceDefinitions of the status kinds the speaker writes (not configuration:
the loader never reads them, so they are not in the field table):

* MetalLB's ServiceBGPStatus (metallb.io/v1beta1), the same definition as MetalLB's own
  (tests/unit/test_crds.py compares it with MetalLB's file), so tools built for MetalLB
  read ours;
* kube-bgpd's BGPNodeStatus (kube-bgpd.io/v1alpha1): one per node, its sessions, their
  route counts, the configuration in force and the drain. Its status schema lists every
  field (the API server prunes what a schema does not name); fields are only ever added
  at the end.

Pure: bgpd.config.crds renders them with the others.
"""

from __future__ import annotations

from typing import Any, Final

_IMMUTABLE: Final = [{"message": "Value is immutable", "rule": "self == oldSelf"}]

_TYPE_META: Final[dict[str, Any]] = {
    "apiVersion": {
        "description": "APIVersion defines the versioned schema of this representation of "
        "an object.",
        "type": "string",
    },
    "kind": {
        "description": "Kind is a string value representing the REST resource this object "
        "represents.",
        "type": "string",
    },
    "metadata": {"type": "object"},
}


def _crd(
    *,
    group: str,
    kind: str,
    plural: str,
    version: str,
    columns: list[dict[str, Any]],
    description: str,
    status: dict[str, Any],
) -> dict[str, Any]:
    """A namespaced CRD of one version with an empty spec and a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "additionalPrinterColumns": columns,
                    "name": version,
                    "schema": {
                        "openAPIV3Schema": {
                            "description": description,
                            "properties": {
                                **_TYPE_META,
                                "spec": {"type": "object"},
                                "status": status,
                            },
                            "type": "object",
                        }
                    },
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def _column(name: str, path: str, type_: str) -> dict[str, Any]:
    return {"jsonPath": path, "name": name, "type": type_}


def service_bgp_status() -> dict[str, Any]:
    """MetalLB's ServiceBGPStatus CRD (api/v1beta1/servicebgpstatus_types.go)."""

    def immutable(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "type": "string",
            "x-kubernetes-validations": [dict(r) for r in _IMMUTABLE],
        }

    return _crd(
        group="metallb.io",
        kind="ServiceBGPStatus",
        plural="servicebgpstatuses",
        version="v1beta1",
        columns=[
            _column("Node", ".status.node", "string"),
            _column("Service Name", ".status.serviceName", "string"),
            _column("Service Namespace", ".status.serviceNamespace", "string"),
        ],
        description="ServiceBGPStatus lists, per node, the BGP peers that have a Service's routes.",
        status={
            "properties": {
                "node": immutable("The node announcing the Service."),
                "peers": {
                    "description": "The BGPPeers that have the Service's routes from this "
                    "node (kube-bgpd: on an Established session).",
                    "items": {"type": "string"},
                    "type": "array",
                },
                "serviceName": immutable("The Service's name."),
                "serviceNamespace": immutable("The Service's namespace."),
            },
            "type": "object",
        },
    )


def _props(**fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": fields}


_INT: Final[dict[str, Any]] = {"type": "integer"}
_STR: Final[dict[str, Any]] = {"type": "string"}
_TIME: Final[dict[str, Any]] = {"type": "string", "format": "date-time"}


def bgp_node_status() -> dict[str, Any]:
    """kube-bgpd's BGPNodeStatus CRD."""
    session = _props(
        peer=_STR,
        address=_STR,
        state={"type": "string", "enum": ["up", "connected", "down"]},
        establishedAt=_TIME,
        lastError=_STR,
        desired=_INT,
        accepted=_INT,
        advertised=_INT,
        bfd=_props(state=_STR, since=_TIME, flaps=_INT, detectMs=_INT),
    )
    status = _props(
        node=_STR,
        summary=_props(sessions=_INT, sessionsUp=_INT, advertised=_INT),
        sessions={"type": "array", "items": session},
        config=_props(
            source={"type": "string", "enum": ["file", "cluster"]},
            stale={"type": "boolean"},
            errors={"type": "array", "items": _STR},
        ),
        drain=_props(state=_STR, since=_TIME),
    )
    status["description"] = (
        "Written by the node's speaker: its BGP sessions (one per BGPPeer it is "
        "configured with), the routes desired, accepted by ExaBGP and advertised on "
        "each, the configuration in force and the drain."
    )
    return _crd(
        group="kube-bgpd.io",
        kind="BGPNodeStatus",
        plural="bgpnodestatuses",
        version="v1alpha1",
        columns=[
            _column("Sessions Up", ".status.summary.sessionsUp", "integer"),
            _column("Sessions", ".status.summary.sessions", "integer"),
            _column("Advertised", ".status.summary.advertised", "integer"),
            _column("Drain", ".status.drain.state", "string"),
            _column("Config Stale", ".status.config.stale", "boolean"),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
        description="A node's BGP status, written by its kube-bgpd speaker; named after "
        "the node, removed with it.",
        status=status,
    )


def status_crds() -> list[dict[str, Any]]:
    """Both, fresh dicts per call."""
    return [service_bgp_status(), bgp_node_status()]


#: (apiVersion, kind) of the status kinds: served, but not configuration.
STATUS_KINDS: Final = frozenset(
    {("metallb.io/v1beta1", "ServiceBGPStatus"), ("kube-bgpd.io/v1alpha1", "BGPNodeStatus")}
)
