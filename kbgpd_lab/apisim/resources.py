"""The table of kinds the API simulator serves: one `ResourceDef` per REST resource.

Everything kind-specific in the simulator (URL paths, discovery documents, list kinds,
status subresource, generation, selectable fields, strategic-merge list keys) is read from
this table, so serving another kind (the metallb.io config kinds, say) is one entry here.
This module holds data only: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: Strategic-merge list keys: path of a list field (list elements are transparent in the
#: path) -> the merge key, or "" for a list of scalars merged as a set. Lists absent from
#: the map are replaced whole ("atomic"), as for fields without a patchStrategy tag in
#: k8s.io/api. Source: the `patchStrategy`/`patchMergeKey` tags of k8s.io/api types.
MergeKeys = Mapping[tuple[str, ...], str]

_METADATA_MERGE: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): "",
    ("metadata", "ownerReferences"): "uid",
}

_POD_SPEC: dict[tuple[str, ...], str] = {
    ("containers",): "name",
    ("containers", "ports"): "containerPort",
    ("containers", "env"): "name",
    ("containers", "volumeMounts"): "mountPath",
    ("initContainers",): "name",
    ("initContainers", "ports"): "containerPort",
    ("initContainers", "env"): "name",
    ("initContainers", "volumeMounts"): "mountPath",
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
}


def _merge_keys(extra: Mapping[tuple[str, ...], str]) -> MergeKeys:
    return MappingProxyType({**_METADATA_MERGE, **extra})


#: Fields every kind can be selected on (k8s.io/apiserver generic registry).
_META_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True, slots=True)
class ResourceDef:
    """One served REST resource (`kubectl api-resources` shows the same columns)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    #: Has a `/status` subresource: main-resource writes keep `.status`, `/status`
    #: writes change only `.status`.
    status_subresource: bool = False
    #: metadata.generation is set to 1 on create and bumped when anything but
    #: metadata (and status, for kinds with a status subresource) changes. Services
    #: and Nodes have no generation in Kubernetes; EndpointSlices and CRDs do.
    has_generation: bool = False
    #: POST drops `.status` (Services: status is written by controllers only).
    create_resets_status: bool = False
    #: DELETE without pending finalizers answers with the object (else a Status).
    return_deleted_object: bool = False
    #: Field-selector labels beyond metadata.name/metadata.namespace; any other field
    #: label is rejected with 400, as the real server does.
    extra_fields: tuple[str, ...] = ()
    merge_keys: MergeKeys = field(default_factory=lambda: _merge_keys({}))
    categories: tuple[str, ...] = ()
    #: A custom resource: list items keep kind/apiVersion (the apiserver serves CRDs as
    #: unstructured objects), and strategic merge is not allowed (415), as for CRDs.
    crd: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """`plural.group` (`services` for the core group), the name the store uses."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def selectable_fields(self) -> tuple[str, ...]:
        return _META_FIELDS + self.extra_fields


_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

RESOURCES: tuple[ResourceDef, ...] = (
    ResourceDef(
        group="",
        version="v1",
        plural="namespaces",
        kind="Namespace",
        namespaced=False,
        singular="namespace",
        short_names=("ns",),
        status_subresource=True,
        extra_fields=("status.phase",),
    ),
    ResourceDef(
        group="",
        version="v1",
        plural="services",
        kind="Service",
        namespaced=True,
        singular="service",
        short_names=("svc",),
        status_subresource=True,
        create_resets_status=True,
        return_deleted_object=True,
        extra_fields=("spec.clusterIP", "spec.type"),
        merge_keys=_merge_keys(
            {
                ("spec", "ports"): "port",
                ("status", "conditions"): "type",
            }
        ),
        categories=("all",),
    ),
    ResourceDef(
        group="",
        version="v1",
        plural="nodes",
        kind="Node",
        namespaced=False,
        singular="node",
        short_names=("no",),
        status_subresource=True,
        extra_fields=("spec.unschedulable",),
        merge_keys=_merge_keys(
            {
                ("spec", "podCIDRs"): "",
                ("status", "conditions"): "type",
                ("status", "addresses"): "type",
                ("status", "images"): "",
            }
        ),
    ),
    ResourceDef(
        group="",
        version="v1",
        plural="pods",
        kind="Pod",
        namespaced=True,
        singular="pod",
        short_names=("po",),
        status_subresource=True,
        return_deleted_object=True,
        extra_fields=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
        merge_keys=_merge_keys(
            {
                **{("spec", *path): key for path, key in _POD_SPEC.items()},
                ("status", "conditions"): "type",
                ("status", "podIPs"): "ip",
            }
        ),
        categories=("all",),
    ),
    ResourceDef(
        group="",
        version="v1",
        plural="events",
        kind="Event",
        namespaced=True,
        singular="event",
        short_names=("ev",),
        extra_fields=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    ResourceDef(
        group="",
        version="v1",
        plural="secrets",
        kind="Secret",
        namespaced=True,
        singular="secret",
        extra_fields=("type",),
    ),
    ResourceDef(
        group="",
        version="v1",
        plural="configmaps",
        kind="ConfigMap",
        namespaced=True,
        singular="configmap",
        short_names=("cm",),
    ),
    ResourceDef(
        group="discovery.k8s.io",
        version="v1",
        plural="endpointslices",
        kind="EndpointSlice",
        namespaced=True,
        singular="endpointslice",
        has_generation=True,
    ),
    ResourceDef(
        group="coordination.k8s.io",
        version="v1",
        plural="leases",
        kind="Lease",
        namespaced=True,
        singular="lease",
    ),
    ResourceDef(
        group="events.k8s.io",
        version="v1",
        plural="events",
        kind="Event",
        namespaced=True,
        singular="event",
        short_names=("ev",),
        extra_fields=(
            "reason",
            "reportingController",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "type",
        ),
    ),
)


def _metallb(kind: str, plural: str, version: str = "v1beta1") -> ResourceDef:
    # MetalLB's CRDs (config/crd in metallb/metallb): namespaced, generation, no status.
    return ResourceDef(
        group="metallb.io",
        version=version,
        plural=plural,
        kind=kind,
        namespaced=True,
        singular=kind.lower(),
        has_generation=True,
        crd=True,
    )


#: The MetalLB config kinds (BGPPeer in its storage version v1beta2 only: the simulator
#: does not convert between versions). Not served unless a table includes them.
METALLB_RESOURCES: tuple[ResourceDef, ...] = (
    _metallb("IPAddressPool", "ipaddresspools"),
    _metallb("BGPPeer", "bgppeers", "v1beta2"),
    _metallb("BGPAdvertisement", "bgpadvertisements"),
    _metallb("Community", "communities"),
    _metallb("BFDProfile", "bfdprofiles"),
    # kube-bgpd's own SpeakerConfig (its CRD in deploy/kubernetes), with status.
    ResourceDef(
        group="kube-bgpd.io",
        version="v1alpha1",
        plural="speakerconfigs",
        kind="SpeakerConfig",
        namespaced=True,
        singular="speakerconfig",
        status_subresource=True,
        has_generation=True,
        crd=True,
    ),
)

VERBS = _VERBS


class ResourceTable:
    """Look-ups over a tuple of `ResourceDef` by URL parts, by kind and by name."""

    def __init__(self, resources: tuple[ResourceDef, ...] | None = None) -> None:
        if resources is None:
            resources = RESOURCES + METALLB_RESOURCES
        self.resources = resources
        self._by_path = {(r.group, r.version, r.plural): r for r in resources}
        self._by_gvk: dict[tuple[str, str], ResourceDef] = {}
        self._by_name: dict[str, ResourceDef] = {}
        # Later entries never shadow earlier ones: "events"/"Event" mean core v1.
        for r in resources:
            self._by_gvk.setdefault((r.api_version, r.kind), r)
            for name in (r.key, r.plural, r.kind, r.singular, *r.short_names):
                self._by_name.setdefault(name, r)
                self._by_name.setdefault(name.lower(), r)

    def by_path(self, group: str, version: str, plural: str) -> ResourceDef | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceDef | None:
        return self._by_gvk.get((api_version, kind))

    def by_name(self, name: str) -> ResourceDef | None:
        """`services`, `Service`, `svc` or `endpointslices.discovery.k8s.io`."""
        return self._by_name.get(name) or self._by_name.get(name.lower())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions, in table order (the core group is "")."""
        out: dict[str, list[str]] = {}
        for r in self.resources:
            versions = out.setdefault(r.group, [])
            if r.version not in versions:
                versions.append(r.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceDef]:
        return [r for r in self.resources if r.group == group and r.version == version]
