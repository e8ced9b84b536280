"""The table of kinds the API simulator serves: one `ResourceDef` per REST resource.

Everything kind-specific in the simulator (URL paths, discovery documents, list kinds,
status subresource, generation, selectable fields, strategic-merge list keys, schema,
printer columns) is read from this table. The built-in kinds are fixed (`RESOURCES`);
custom resources enter the table when a CustomResourceDefinition is created
(`ResourceTable.register`, called by the store, see `kbgpd_lab.apisim.crds`) and leave it
when the CRD is deleted, as kube-apiserver's apiextensions-apiserver does. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

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
    #: The structural openAPIV3Schema of a custom resource's version (None: no
    #: validation, pruning or defaulting, as for the built-in kinds here).
    schema: Mapping[str, Any] | None = field(default=None, compare=False)
    #: The version objects are stored in ("" = this one). Served versions of one CRD
    #: share the objects; they go out with the apiVersion the client asked for.
    storage_version: str = ""
    #: A CRD's additionalPrinterColumns (name, type, jsonPath, priority, description,
    #: format) for the Table kubectl asks for; empty: Name and Age.
    printer_columns: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    #: The list kind when it is not `{kind}List` (a CRD's spec.names.listKind).
    list_kind_name: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.list_kind_name or f"{self.kind}List"

    @property
    def storage_api_version(self) -> str:
        """The apiVersion stored objects carry (this version's unless another stores)."""
        version = self.storage_version or self.version
        return f"{self.group}/{version}" if self.group else version

    def served_as(self, body: bytes) -> bytes:
        """A stored object's JSON as this version serves it (`conversion: None`).

        Stored encodings start with kind then apiVersion, so the first apiVersion in the
        bytes is the object's own; only that one is rewritten.
        """
        stored = self.storage_api_version
        if stored == self.api_version:
            return body
        old = b'"apiVersion":"' + stored.encode() + b'"'
        return body.replace(old, b'"apiVersion":"' + self.api_version.encode() + b'"', 1)

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
        group="apiextensions.k8s.io",
        version="v1",
        plural="customresourcedefinitions",
        kind="CustomResourceDefinition",
        namespaced=False,
        singular="customresourcedefinition",
        short_names=("crd", "crds"),
        status_subresource=True,
        has_generation=True,
        categories=("api-extensions",),
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


VERBS = _VERBS


class ResourceTable:
    """Look-ups over the served `ResourceDef`s by URL parts, by kind and by name.

    The built-in kinds come first and stay; `register` adds the versions of one custom
    resource and `unregister` removes them (the store calls both as CRDs come and go).
    """

    def __init__(self, resources: tuple[ResourceDef, ...] | None = None) -> None:
        self.resources: tuple[ResourceDef, ...] = RESOURCES if resources is None else resources
        self._index()

    def _index(self) -> None:
        resources = self.resources
        self._by_path = {(r.group, r.version, r.plural): r for r in resources}
        self._by_gvk: dict[tuple[str, str], ResourceDef] = {}
        self._by_name: dict[str, ResourceDef] = {}
        # Later entries never shadow earlier ones: "events"/"Event" mean core v1, and a
        # custom resource's first (preferred) version answers to its names.
        for r in resources:
            self._by_gvk.setdefault((r.api_version, r.kind), r)
            for name in (r.key, r.plural, r.kind, r.singular, *r.short_names):
                self._by_name.setdefault(name, r)
                self._by_name.setdefault(name.lower(), r)

    def register(self, defs: tuple[ResourceDef, ...]) -> None:
        """Serve the versions of one custom resource (replacing what it served before)."""
        if not defs:
            return
        key = defs[0].key
        kept = tuple(r for r in self.resources if not (r.crd and r.key == key))
        self.resources = kept + defs
        self._index()

    def unregister(self, key: str) -> None:
        """Stop serving the custom resource `plural.group`."""
        self.resources = tuple(r for r in self.resources if not (r.crd and r.key == key))
        self._index()

    def by_path(self, group: str, version: str, plural: str) -> ResourceDef | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceDef | None:
        return self._by_gvk.get((api_version, kind))

    def by_name(self, name: str) -> ResourceDef | None:
        """`services`, `Service`, `svc` or `endpointslices.discovery.k8s.io`."""
        return self._by_name.get(name) or self._by_name.get(name.lower())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions, preferred first (the core group is "").

        Built-in groups in table order; a custom resource's group orders its versions
        as kube-apiserver does (`version_priority`: v2 > v1 > v1beta2 > v1alpha1).
        """
        out: dict[str, list[str]] = {}
        custom: set[str] = set()
        for r in self.resources:
            versions = out.setdefault(r.group, [])
            if r.crd:
                custom.add(r.group)
            if r.version not in versions:
                versions.append(r.version)
        for group in custom:
            out[group].sort(key=version_priority)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceDef]:
        return [r for r in self.resources if r.group == group and r.version == version]


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting Kubernetes versions in kube-apiserver's order of preference.

    GA before beta before alpha, higher numbers first, and versions that do not look
    like Kubernetes versions last in alphabetical order (apimachinery's
    CompareKubeAwareVersionStrings).
    """
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0), "")
