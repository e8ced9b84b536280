"""The field table: one `Field` per field of every kind, read by the parser (which keys a
spec may hold, ranges, defaults) and by `bgpd.config.schema` (config/schema.json is
generated from it, so the two cannot drift apart).

A Field states JSON Schema / OpenAPI facts (type, format, minimum/maximum, lengths,
pattern, enum, default, description, required, nested fields), so a Kubernetes CRD
schema can be generated from the same table. Shared value types (an ASN, a port, a label
selector) are named definitions in `DEFINITIONS`, referred to by `ref`.

Data only: no parsing, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

METALLB_V1BETA1: Final = "metallb.io/v1beta1"
METALLB_V1BETA2: Final = "metallb.io/v1beta2"
KUBE_BGPD_V1ALPHA1: Final = "kube-bgpd.io/v1alpha1"

#: A regular expression (JSON Schema's ECMA dialect) for text with no control character:
#: what may reach an ExaBGP command line or config file (bgpd.attributes.check_command_text).
NO_CONTROL: Final = r"^[^\u0000-\u001f\u007f]*$"


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


#: A Field without a default (None would be the JSON default null).
NO_DEFAULT: Final[Any] = _NoDefault()


@dataclass(frozen=True, slots=True)
class Api:
    """What the CRD's OpenAPI schema states about a field of a metallb.io kind beyond
    its type and nesting: MetalLB's own CRD facts (formats, bounds, defaults, required,
    Kubernetes list and map types, CEL rules), so our CRD accepts exactly what MetalLB's
    does. The table's own, often stricter checks stay the loader's: an object the API
    server accepts and the loader refuses gets the loader's one-line error naming it.

    On a field that refers to a definition (`ref`), the field's facts are laid over the
    definition's (a None or empty fact is not stated). `rules` are
    x-kubernetes-validations as (rule, message) pairs.
    """

    format: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_items: int | None = None
    enum: tuple[str, ...] | None = None
    default: Any = NO_DEFAULT
    required: bool | None = None
    list_type: str | None = None
    map_type: str | None = None
    rules: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Column:
    """One additionalPrinterColumn of a CRD version (what `kubectl get` shows)."""

    name: str
    json_path: str
    type: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its name in the document and the facts a schema states about it.

    `name` is empty for an array's items or an anyOf branch. `nullable`: null is
    accepted too (and means "unset", as MetalLB's omitempty fields). `fields`: the
    properties of a closed object (no other key allowed); `values`: the type of every
    value of an open map. `ignored`: accepted and dropped (server-side metadata).
    """

    name: str = ""
    type: str | None = None
    nullable: bool = False
    ref: str | None = None
    format: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    any_of: tuple[Field, ...] = ()
    enum: tuple[str, ...] | None = None
    const: str | None = None
    min_items: int | None = None
    unique_items: bool = False
    items: Field | None = None
    values: Field | None = None
    fields: tuple[Field, ...] | None = None
    required: bool = False
    default: Any = NO_DEFAULT
    description: str = ""
    ignored: bool = False
    #: The CRD's facts for a metallb.io field (None: its type and nesting only).
    api: Api | None = None


@dataclass(frozen=True, slots=True)
class KindTable:
    """One (apiVersion, kind) the loader reads: its spec's fields and the schema facts."""

    kind: str
    api_version: str
    #: Its name among the schema's definitions ("BGPPeerV1beta2").
    definition: str
    description: str
    spec: tuple[Field, ...]
    #: IPAddressPool and BGPPeer need a spec; the other kinds have defaults for all.
    spec_required: bool = False
    # What the CustomResourceDefinition states besides the spec's fields (bgpd.config.crds).
    #: The resource's plural name (empty: the kind in lower case, plus "s").
    plural: str = ""
    #: Facts of the spec object itself (MetalLB's CEL rules across fields).
    spec_api: Api | None = None
    #: Fields MetalLB's CRD has that the loader refuses (the kind's parser says why): the
    #: CRD accepts them, so `kubectl apply` works and the loader names the refusal.
    api_only: tuple[Field, ...] = ()
    #: The status object's schema (None: an object with any content).
    status: Field | None = None
    columns: tuple[Column, ...] = ()
    #: Set on a served, deprecated version: the warning the API server returns.
    deprecation: str = ""


def names(fields: Iterable[Field]) -> tuple[str, ...]:
    """The keys a closed object accepts (ignored ones excluded)."""
    return tuple(f.name for f in fields if not f.ignored)


def ignored_names(fields: Iterable[Field]) -> tuple[str, ...]:
    return tuple(f.name for f in fields if f.ignored)


def field(fields: Iterable[Field], name: str) -> Field:
    """The Field called `name` (KeyError if there is none: a table bug)."""
    for f in fields:
        if f.name == name:
            return f
    raise KeyError(name)


def bounds(f: Field) -> tuple[int, int]:
    """(minimum, maximum) of an integer Field, for the parser's range check."""
    if f.minimum is None or f.maximum is None:
        raise ValueError(f"field {f.name} has no range")
    return f.minimum, f.maximum


# --------------------------------------------------------------------------- shared types

#: Kubernetes' DNS-1123 label and subdomain (object names, namespaces).
DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN: Final = rf"{DNS_LABEL}(\.{DNS_LABEL})*"

TEXT = Field(ref="text")
NAME = Field(ref="name")
NAMESPACE = Field(ref="namespace")
DURATION = Field(ref="duration")
ASN = Field(ref="asn")
U32 = Field(ref="u32")
PORT = Field(ref="port")
IP = Field(ref="ip")
STRING_MAP = Field(ref="stringMap")
LABEL_SELECTORS = Field(ref="labelSelectors")
UNIQUE_TEXTS = Field(ref="uniqueTexts")

#: One matchExpressions entry of a label selector.
REQUIREMENT_FIELDS: Final = (
    Field("key", type="string", min_length=1, required=True, api=Api(required=True)),
    Field(
        "operator",
        enum=("In", "NotIn", "Exists", "DoesNotExist"),
        required=True,
        api=Api(required=True),
    ),
    Field(
        "values",
        type="array",
        nullable=True,
        items=Field(type="string"),
        api=Api(list_type="atomic"),
    ),
)
#: metav1.LabelSelector (what bgpd.config.values reads).
SELECTOR_FIELDS: Final = (
    Field("matchLabels", ref="stringMap"),
    Field(
        "matchExpressions",
        type="array",
        items=Field(type="object", fields=REQUIREMENT_FIELDS),
        api=Api(list_type="atomic"),
    ),
)

#: ObjectMeta as a config file holds it.
METADATA_FIELDS: Final = (
    Field("name", ref="name", required=True),
    Field("namespace", ref="namespace"),
    Field("labels", ref="stringMap"),
    Field("annotations", ref="stringMap"),
    # Server-side fields a `kubectl get -o yaml` dump carries; meaningless here.
    *(
        Field(name, ignored=True)
        for name in (
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "finalizers",
            "ownerReferences",
            "selfLink",
            "generateName",
        )
    ),
)

#: Named definitions the kinds' fields refer to (`ref`), in the schema's order.
DEFINITIONS: Final[tuple[Field, ...]] = (
    Field(
        "text",
        type="string",
        min_length=1,
        pattern=NO_CONTROL,
        description="Text that may reach an ExaBGP command line or config file: no newline "
        "or control character.",
    ),
    Field(
        "name",
        type="string",
        min_length=1,
        max_length=253,
        pattern=f"^{DNS_SUBDOMAIN}$",
        description="A Kubernetes object name (DNS-1123 subdomain).",
    ),
    Field("namespace", type="string", min_length=1, max_length=63, pattern=f"^{DNS_LABEL}$"),
    Field(
        "duration",
        type="string",
        pattern=r"^[-+]?(0|((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$",
        description='A Go duration string as metav1.Duration takes it: "90s", "1m30s", "300ms".',
    ),
    Field(
        "asn",
        type="integer",
        minimum=1,
        maximum=4294967295,
        api=Api(format="int64", minimum=0, maximum=4294967295),
    ),
    Field("u32", type="integer", minimum=0, maximum=4294967295),
    Field("port", type="integer", minimum=1, maximum=65535),
    Field(
        "ip",
        type="string",
        any_of=(Field(format="ipv4"), Field(format="ipv6")),
        pattern=r"^[0-9A-Fa-f.:]+$",
    ),
    Field("stringMap", type="object", values=Field(type="string")),
    Field("labelSelector", type="object", fields=SELECTOR_FIELDS, api=Api(map_type="atomic")),
    Field("labelSelectors", type="array", nullable=True, items=Field(ref="labelSelector")),
    Field("uniqueTexts", type="array", nullable=True, unique_items=True, items=TEXT),
    Field(
        "metadata",
        type="object",
        fields=METADATA_FIELDS,
        description="ObjectMeta. name is required; server-side fields of a `kubectl get -o "
        "yaml` dump are accepted and ignored.",
    ),
)


def definition(name: str) -> Field:
    return field(DEFINITIONS, name)
