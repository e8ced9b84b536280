"""Conversion of Kubernetes API objects (the JSON dicts the API server returns, camelCase)
into the frozen types of bgpd.model, and parsing of offline cluster dumps.

The watcher hands every Service, EndpointSlice, Node and Namespace through these
functions at the edge, and `kube-bgpd explain` reads `kubectl get ... -o yaml|json`
output through them, so both see exactly the same conversion. Only the fields the
decision and the allocator read are kept; in particular a Node keeps no heartbeat
fields (condition timestamps, resourceVersion), so two converted Nodes compare equal
when only a heartbeat changed and the watcher can drop that event.

Pure: no I/O, no logging, no client library. Malformed objects raise ObjectError
(a ValueError) naming the field; parse_cluster_dump wraps that in DumpError naming
the item.
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeGuard

from bgpd.model import (
    EMPTY_LABELS,
    ClusterSnapshot,
    Endpoint,
    EndpointSlice,
    IPAddress,
    Namespace,
    Node,
    NodeName,
    Service,
    ServiceKey,
    ServicePort,
    TrafficPolicy,
)
from bgpd.untrusted import (
    MAX_DUMP_BYTES,
    InputRefused,
    Item,
    Part,
    check_size,
    fastest_safe_loader,
    json_parts,
    yaml_parts,
)

#: EndpointSlice label naming the Service a slice belongs to (discovery.k8s.io/v1).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
#: The annotations kept of a Service or Node: MetalLB's (current and deprecated prefix,
#: read by the allocator) and ours (attributes, drain). Every other annotation (often a
#: kubectl last-applied-configuration copy of the whole object, kilobytes per Service) is
#: dropped at conversion, so no cache holds it; tests/unit/test_objects_trimmed.py checks
#: that every annotation the product reads has one of these prefixes.
KEPT_ANNOTATION_PREFIXES = ("metallb.io/", "metallb.universe.tf/", "kube-bgpd.io/")
#: Node condition type that, when True, means the node's network is not set up
#: (core/v1 NodeNetworkUnavailable); MetalLB withdraws from such nodes.
NETWORK_UNAVAILABLE = "NetworkUnavailable"


class ObjectError(ValueError):
    """An API object lacks a required field or holds a value of the wrong type."""


class DumpError(ValueError):
    """A cluster dump cannot be read; the message names the document and item."""


# --------------------------------------------------------------------------- field access
#
# Every accessor names the field it refuses as `where` + `part` + "." + key: `where` names
# the object ("Service shop/web"), `part` the path inside it (".spec.ports[0]"). The two are
# joined only when a message is written, so reading a valid object builds no path text
# (a first list converts 20,000 objects at 10,000 Services).


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(value, Mapping) with a fast path: JSON and YAML give plain dicts, and the
    ABC check costs more than the rest of a conversion (measured on 10,000 Services)."""
    return type(value) is dict or isinstance(value, Mapping)


def _map(obj: Mapping[str, Any], key: str, where: str, part: str = "") -> Mapping[str, Any]:
    """obj[key] as a mapping; absent or null is an empty mapping (the API omits empty
    fields), anything else is an error."""
    value = obj.get(key)
    if value is None:
        return {}
    if not is_mapping(value):
        raise ObjectError(f"{where}{part}.{key}: expected an object, got {type(value).__name__}")
    return value


def _list(obj: Mapping[str, Any], key: str, where: str, part: str = "") -> Sequence[Any]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ObjectError(f"{where}{part}.{key}: expected a list, got {type(value).__name__}")
    return value


def _str(
    obj: Mapping[str, Any], key: str, where: str, part: str = "", *, required: bool = False
) -> str | None:
    value = obj.get(key)
    if type(value) is str:
        return value
    if value is None:
        if required:
            raise ObjectError(f"{where}{part}.{key}: required")
        return None
    if not isinstance(value, str):
        raise ObjectError(f"{where}{part}.{key}: expected a string, got {type(value).__name__}")
    return value


def _required(obj: Mapping[str, Any], key: str, where: str, part: str = "") -> str:
    value = _str(obj, key, where, part, required=True)
    assert value is not None  # _str raised otherwise
    return value


def _bool(obj: Mapping[str, Any], key: str, where: str, part: str = "") -> bool | None:
    """A tri-state condition: None when unset, as EndpointConditions define it."""
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ObjectError(f"{where}{part}.{key}: expected true or false, got {value!r}")


def _string_map(meta: Mapping[str, Any], key: str, where: str, part: str = "") -> Mapping[str, str]:
    raw = _map(meta, key, where, part)
    for k, v in raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ObjectError(f"{where}{part}.{key}: {k!r} must map a string to a string")
    return raw


def _labels(meta: Mapping[str, Any], key: str, where: str, part: str) -> Mapping[str, str]:
    """A read-only string-to-string map; its keys interned (label keys repeat across
    objects), and the one shared empty map when empty (most objects)."""
    raw = _string_map(meta, key, where, part)
    return MappingProxyType({sys.intern(k): v for k, v in raw.items()}) if raw else EMPTY_LABELS


def _annotations(meta: Mapping[str, Any], where: str) -> Mapping[str, str]:
    """metadata.annotations, checked whole and kept only under KEPT_ANNOTATION_PREFIXES."""
    raw = _string_map(meta, "annotations", where, ".metadata")
    if not raw:
        return EMPTY_LABELS
    kept = {sys.intern(k): v for k, v in raw.items() if k.startswith(KEPT_ANNOTATION_PREFIXES)}
    return MappingProxyType(kept) if kept else EMPTY_LABELS


def _interned(value: str | None) -> str | None:
    """One string object for a value many objects share (a namespace, a node name, a
    protocol), instead of one per object parsed from the API's JSON."""
    return None if value is None else sys.intern(value)


@functools.lru_cache(maxsize=1024)
def shared_ports(ports: tuple[tuple[int, str, str], ...]) -> tuple[ServicePort, ...]:
    """The ServicePorts of spec.ports read as (port, protocol, name): one tuple (and one
    ServicePort each) for every Service with equal ports. Most Services of a cluster
    expose the same few (80/TCP, 443/TCP), and the caches hold every Service (10,000
    Services: ~1 MiB less); keyed by the plain values, a Service whose ports were seen
    before builds no ServicePort at all. Bounded: past 1,024 distinct port lists the least
    recently seen ones are built again, which is only memory and time."""
    return tuple(
        ServicePort(port=port, protocol=sys.intern(protocol), name=name)
        for port, protocol, name in ports
    )


@functools.lru_cache(maxsize=64)
def shared_families(families: tuple[str, ...]) -> tuple[str, ...]:
    """One tuple for each spec.ipFamilies value (there are four), as shared_ports(), its
    strings interned."""
    return tuple(sys.intern(f) for f in families)


#: spec.externalTrafficPolicy's values, looked up without the enum's call.
_POLICIES: Final = {policy.value: policy for policy in TrafficPolicy}

#: A dotted quad as ipaddress.IPv4Address accepts it: four decimal octets of 0-255 with
#: no leading zero, ASCII digits only.
_OCTET: Final = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD: Final = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")


def ip_address(text: str) -> IPAddress:
    """ipaddress.ip_address(text), an IPv4 address read without ipaddress's octet-by-octet
    parsing in Python (0.9 against 1.4-1.6 us, once per Service's ingress IP in a first
    list): the pattern admits exactly the dotted quads ipaddress accepts, and anything else
    (IPv6, an error) goes to ipaddress itself. tests/unit/test_objects_paths.py holds the two
    equal on generated text. ValueError when `text` is not an address."""
    if _DOTTED_QUAD.fullmatch(text):
        a, b, c, d = text.split(".")
        return ipaddress.IPv4Address((int(a) << 24) | (int(b) << 16) | (int(c) << 8) | int(d))
    return ipaddress.ip_address(text)


def _meta(obj: Any, kind: str, *, namespaced: bool) -> tuple[Mapping[str, Any], str, str, str]:
    """(metadata, namespace, name, where) of an object; `where` begins every error
    message."""
    if not is_mapping(obj):
        raise ObjectError(f"{kind}: expected an object, got {type(obj).__name__}")
    meta = _map(obj, "metadata", kind)
    name = _required(meta, "name", kind, ".metadata")
    if not namespaced:
        return meta, "", name, f"{kind} {name}"
    namespace = sys.intern(_required(meta, "namespace", f"{kind} {name}", ".metadata"))
    return meta, namespace, name, f"{kind} {namespace}/{name}"


# --------------------------------------------------------------------------- kinds


def service_from_api(obj: Mapping[str, Any]) -> Service:
    """core/v1 Service -> model.Service.

    Ingress entries without `ip` (hostname-only, written by cloud load balancers) are
    skipped: only IPs can be announced. spec.type defaults to ClusterIP as the API does.
    """
    meta, namespace, name, where = _meta(obj, "Service", namespaced=True)
    spec = _map(obj, "spec", where)
    status = _map(obj, "status", where)
    lb_status = _map(status, "loadBalancer", where, ".status")

    ingress: list[IPAddress] = []
    for i, entry in enumerate(_list(lb_status, "ingress", where, ".status.loadBalancer")):
        if not is_mapping(entry):
            raise ObjectError(f"{where}.status.loadBalancer.ingress[{i}]: expected an object")
        text = entry.get("ip")
        if text is None:
            continue
        if type(text) is not str:
            _str(entry, "ip", where, f".status.loadBalancer.ingress[{i}]")  # raises
        try:
            ingress.append(ip_address(text))
        except ValueError as exc:
            raise ObjectError(
                f"{where}.status.loadBalancer.ingress[{i}].ip: {text!r} is not an IP address"
            ) from exc

    policy_text = _str(spec, "externalTrafficPolicy", where, ".spec") or "Cluster"
    policy = _POLICIES.get(policy_text)
    if policy is None:
        raise ObjectError(
            f"{where}.spec.externalTrafficPolicy: {policy_text!r} is not Cluster or Local"
        )

    ports: list[tuple[int, str, str]] = []
    for i, entry in enumerate(_list(spec, "ports", where, ".spec")):
        if not is_mapping(entry):
            raise ObjectError(f"{where}.spec.ports[{i}]: expected an object")
        port = entry.get("port")
        if type(port) is not int and (not isinstance(port, int) or isinstance(port, bool)):
            raise ObjectError(f"{where}.spec.ports[{i}].port: expected an integer, got {port!r}")
        protocol = entry.get("protocol")
        port_name = entry.get("name")
        if (protocol is not None and type(protocol) is not str) or (
            port_name is not None and type(port_name) is not str
        ):
            at = f".spec.ports[{i}]"
            protocol = _str(entry, "protocol", where, at)
            port_name = _str(entry, "name", where, at)
        ports.append((port, protocol or "TCP", port_name or ""))

    families = _list(spec, "ipFamilies", where, ".spec")
    if not all(isinstance(f, str) for f in families):
        raise ObjectError(f"{where}.spec.ipFamilies: expected a list of strings")
    selector = spec.get("selector")
    hcnp = spec.get("healthCheckNodePort")
    if hcnp is not None and (
        not isinstance(hcnp, int) or isinstance(hcnp, bool) or not 1 <= hcnp <= 65535
    ):
        raise ObjectError(f"{where}.spec.healthCheckNodePort: {hcnp!r} is not a port 1-65535")
    return Service(
        namespace,
        name,
        sys.intern(_str(spec, "type", where, ".spec") or "ClusterIP"),
        _str(meta, "uid", where, ".metadata") or "",
        _str(spec, "loadBalancerClass", where, ".spec"),
        policy,
        tuple(ingress),
        _str(spec, "loadBalancerIP", where, ".spec") or None,
        shared_families(tuple(families)),
        _interned(_str(spec, "ipFamilyPolicy", where, ".spec")),
        shared_ports(tuple(ports)),
        None if selector is None else _labels(spec, "selector", where, ".spec"),
        _labels(meta, "labels", where, ".metadata"),
        _annotations(meta, where),
        hcnp,
    )


def endpoint_slice_from_api(obj: Mapping[str, Any]) -> EndpointSlice:
    """discovery.k8s.io/v1 EndpointSlice -> model.EndpointSlice.

    Conditions keep Kubernetes' tri-state: an unset `ready` is not False (the API says
    consumers should interpret unknown as ready), and Endpoint.can_serve relies on it.
    """
    meta, namespace, name, where = _meta(obj, "EndpointSlice", namespaced=True)
    labels = _string_map(meta, "labels", where, ".metadata")
    endpoints: list[Endpoint] = []
    for i, entry in enumerate(_list(obj, "endpoints", where)):
        if not is_mapping(entry):
            raise ObjectError(f"{where}.endpoints[{i}]: expected an object")
        at = f".endpoints[{i}]"
        addresses = _list(entry, "addresses", where, at)
        if not all(isinstance(a, str) for a in addresses):
            raise ObjectError(f"{where}{at}.addresses: expected a list of strings")
        cond = _map(entry, "conditions", where, at)
        endpoints.append(
            Endpoint(
                tuple(addresses),
                _interned(_str(entry, "nodeName", where, at)),
                _bool(cond, "ready", where, f"{at}.conditions"),
                _bool(cond, "serving", where, f"{at}.conditions"),
                _bool(cond, "terminating", where, f"{at}.conditions"),
            )
        )
    return EndpointSlice(
        namespace,
        name,
        labels.get(SERVICE_NAME_LABEL),
        sys.intern(_str(obj, "addressType", where) or "IPv4"),
        tuple(endpoints),
    )


def node_from_api(obj: Mapping[str, Any]) -> Node:
    """core/v1 Node -> model.Node.

    Only the NetworkUnavailable condition's status is kept, never its heartbeat or
    transition times, so the kubelet's periodic status updates convert to equal Nodes.
    """
    meta, _, name, where = _meta(obj, "Node", namespaced=False)
    status = _map(obj, "status", where)
    unavailable = False
    for i, cond in enumerate(_list(status, "conditions", where, ".status")):
        if not is_mapping(cond):
            raise ObjectError(f"{where}.status.conditions[{i}]: expected an object")
        if cond.get("type") == NETWORK_UNAVAILABLE:
            unavailable = _str(cond, "status", where, f".status.conditions[{i}]") == "True"
    addresses: list[tuple[str, str]] = []
    for i, entry in enumerate(_list(status, "addresses", where, ".status")):
        at = f".status.addresses[{i}]"
        if not is_mapping(entry):
            raise ObjectError(f"{where}{at}: expected an object")
        addresses.append(
            (_required(entry, "type", where, at), _required(entry, "address", where, at))
        )
    return Node(
        name=NodeName(name),
        labels=_labels(meta, "labels", where, ".metadata"),
        annotations=_annotations(meta, where),
        network_unavailable=unavailable,
        addresses=tuple(addresses),
        uid=str(meta.get("uid", "")),
    )


def namespace_from_api(obj: Mapping[str, Any]) -> Namespace:
    """core/v1 Namespace -> model.Namespace (labels feed serviceAllocation.namespaceSelectors)."""
    meta, _, name, where = _meta(obj, "Namespace", namespaced=False)
    return Namespace(name=name, labels=_labels(meta, "labels", where, ".metadata"))


def build_snapshot(
    services: Iterable[Service],
    endpoint_slices: Iterable[EndpointSlice],
    nodes: Iterable[Node],
    namespaces: Iterable[Namespace] = (),
) -> ClusterSnapshot:
    """Assemble a snapshot, grouping slices by their `kubernetes.io/service-name` label.

    A Service's endpoints may be spread over several slices (the EndpointSlice
    controller caps a slice at 100 endpoints by default), so grouping happens once here
    rather than per decision. Slices without the label belong to no Service and are
    dropped. Within a Service, slices are ordered by name so the snapshot does not
    depend on the order objects arrived in.
    """
    grouped: dict[ServiceKey, list[EndpointSlice]] = {}
    for s in endpoint_slices:
        key = s.service_key
        if key is not None:
            grouped.setdefault(key, []).append(s)
    return ClusterSnapshot(
        services=MappingProxyType({s.key: s for s in services}),
        endpoint_slices=MappingProxyType(
            {k: tuple(sorted(v, key=lambda s: s.name)) for k, v in grouped.items()}
        ),
        nodes=MappingProxyType({n.name: n for n in nodes}),
        namespaces=MappingProxyType({n.name: n for n in namespaces}),
    )


# --------------------------------------------------------------------------- dumps

_CONVERTERS = {
    "Service": service_from_api,
    "EndpointSlice": endpoint_slice_from_api,
    "Node": node_from_api,
    "Namespace": namespace_from_api,
}


def _parts(text: str) -> Iterator[Part]:
    """The dump's documents, the items of each list streamed one at a time (see
    bgpd.untrusted: the whole document tree is never built). JSON with the json module
    when the text looks like JSON (about 100 times faster than a YAML parser on a
    10,000-Service dump), else YAML with libyaml's events when available.
    Several YAML documents (`---`) are allowed, so dumps of several `kubectl get` runs can
    be concatenated."""
    try:
        check_size(len(text), MAX_DUMP_BYTES)
    except InputRefused as exc:
        raise DumpError(f"refused: {exc}") from exc
    if text.lstrip().startswith(("{", "[")):
        try:
            yield from json_parts(text)
        except json.JSONDecodeError as exc:
            raise DumpError(f"not valid JSON: {exc}") from exc
        except InputRefused as exc:
            raise DumpError(f"refused: {exc}") from exc
        return
    import yaml  # only for a YAML dump: PyYAML costs every node ~0.7 MiB

    try:
        yield from yaml_parts(text, fastest_safe_loader())
    except yaml.YAMLError as exc:
        raise DumpError(f"not valid YAML: {' '.join(str(exc).split())}") from exc
    except InputRefused as exc:
        raise DumpError(f"refused: {exc}") from exc
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # SafeConstructor can still fail on odd scalars (a timestamp out of range).
        raise DumpError(f"not valid YAML: {exc}") from exc


class _Refused(Exception):
    """An object of a dump that cannot be read; `detail` follows its place in the message."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _read_object(kind: str, obj: object) -> tuple[str, Any] | None:
    """(kind, what the dump gives for it): a model object, or for a Secret ((namespace,
    name), password); None for kinds that change no decision. Raises _Refused."""
    if not is_mapping(obj):
        raise _Refused(f": expected an object, got {type(obj).__name__}")
    if not kind:
        raise _Refused(": has no kind")
    if kind == "Secret":
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise _Refused(" (Secret): has no metadata.name")
        namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
        ns = namespace if isinstance(namespace, str) and namespace else "default"
        return kind, ((ns, name), secret_password(obj))
    convert = _CONVERTERS.get(kind)
    if convert is None:
        return None
    try:
        return kind, convert(obj)
    except ObjectError as exc:
        raise _Refused(f" ({kind}): {exc}") from exc
    except (ValueError, TypeError, OverflowError, AttributeError, KeyError) as exc:
        # A value of a type no accessor expects (a float port, a date, a huge
        # number): a dump error naming the object, never a traceback.
        raise _Refused(f" ({kind}): cannot read: {type(exc).__name__}: {exc}") from exc


def _kind_of(obj: object, default: str) -> str:
    kind = obj.get("kind", default) if is_mapping(obj) else default
    return kind if isinstance(kind, str) else ""


def _read(parts: Iterable[Part]) -> Iterator[tuple[str, Any]]:
    """What _read_object gives for every object of every document, in order; a document
    is a List (kubectl's `kind: List`, or a typed list such as ServiceList from the raw
    API, whose items carry no kind) or a single object. An item is read as soon as it is
    parsed (kubectl prints `kind: List` after the items); what it gave is handed on once
    the document is known to be a List, and an error is raised then, naming its place."""
    read: list[tuple[int, tuple[str, Any] | _Refused | None]] = []
    kindless: list[Item] = []
    number = 0
    for part in parts:
        if isinstance(part, Item):
            if is_mapping(part.value) and "kind" not in part.value:
                kindless.append(part)  # its kind is the List's, said after the items
                continue
            kind = _kind_of(part.value, "")
            read.append((part.index, _try_read(kind, part.value)))
            continue
        number += 1
        doc_where = "dump" if number == 1 and part.last else f"document {number}"
        doc = part.value
        if is_mapping(doc):
            kind = _kind_of(doc, "")
            if kind.endswith("List"):
                items = doc.get("items")
                if not part.streamed and items is not None:
                    raise DumpError(f"{doc_where}: items must be a list")  # else streamed
                default = kind.removesuffix("List")
                read += [(p.index, _try_read(default, p.value)) for p in kindless]
            else:
                read = [(-1, _try_read(kind, doc))]
        elif isinstance(doc, list):  # a top-level sequence, streamed: no List kind
            read += [(p.index, _try_read("", p.value)) for p in kindless]
        else:
            raise DumpError(
                f"{doc_where}: expected a kind: List or an object, got {type(doc).__name__}"
            )
        read.sort(key=lambda entry: entry[0])
        for index, outcome in read:
            if isinstance(outcome, _Refused):
                where = doc_where if index < 0 else f"{doc_where} item {index}"
                raise DumpError(f"{where}{outcome.detail}") from outcome.__cause__
            if outcome is not None:
                yield outcome
        read, kindless = [], []


def _try_read(kind: str, obj: object) -> tuple[str, Any] | _Refused | None:
    """_read_object, its refusal returned instead of raised."""
    try:
        return _read_object(kind, obj)
    except _Refused as exc:
        return exc


def secret_password(secret: Mapping[str, Any]) -> str | None:
    """data.password of a kubernetes.io/basic-auth Secret (base64, as the API and
    `kubectl get secret -o yaml` give it), or stringData.password (a manifest not yet
    applied); None when there is no usable password."""
    data = secret.get("data")
    raw = data.get("password") if isinstance(data, Mapping) else None
    if isinstance(raw, str):
        try:
            return base64.b64decode(raw, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            # ValueError: non-ASCII text (b64decode refuses it); UnicodeDecodeError is one.
            return None
    string_data = secret.get("stringData")
    plain = string_data.get("password") if isinstance(string_data, Mapping) else None
    return plain if isinstance(plain, str) else None


@dataclass(frozen=True, slots=True)
class ClusterDump:
    """A parsed dump: the snapshot, and the BGP passwords of the Secrets it holds
    (``kubectl get secret NAME -n NS -o yaml`` appended), by (namespace, name); None for a
    Secret without a usable ``password``. Only the file source needs the Secrets: the
    Kubernetes source reads them from the API."""

    snapshot: ClusterSnapshot
    secret_passwords: Mapping[tuple[str, str], str | None]


def parse_cluster_dump(text: str) -> ClusterSnapshot:
    """Parse what `kubectl get services,endpointslices,nodes -A -o yaml` (or `-o json`)
    prints into a snapshot. Namespaces are read too when present (for the allocator's
    namespaceSelectors). Objects of other kinds (Pods, Deployments from `kubectl get
    all`) are ignored: they do not change a decision."""
    return parse_dump(text).snapshot


def parse_dump(text: str) -> ClusterDump:
    """:func:`parse_cluster_dump`, plus the Secrets' passwords (see :class:`ClusterDump`)."""
    secrets: dict[tuple[str, str], str | None] = {}
    services: list[Service] = []
    slices: list[EndpointSlice] = []
    nodes: list[Node] = []
    namespaces: list[Namespace] = []
    sinks: dict[str, list[Any]] = {
        "Service": services,
        "EndpointSlice": slices,
        "Node": nodes,
        "Namespace": namespaces,
    }
    for kind, value in _read(_parts(text)):
        if kind == "Secret":
            key, password = value
            secrets[key] = password
        else:
            sinks[kind].append(value)
    return ClusterDump(
        build_snapshot(services, slices, nodes, namespaces), MappingProxyType(secrets)
    )


# --------------------------------------------------------------------------- shared rules


def is_our_load_balancer(service: Service, load_balancer_class: str | None) -> bool:
    """Whether this installation handles a Service: type LoadBalancer, and
    spec.loadBalancerClass equal to the class we serve, where unset on both sides is
    equal. With a class configured, a Service without a class is NOT ours: KEP-1959
    gives class-less Services to the cluster's default implementation, and MetalLB's
    `--lb-class` handles "only services whose spec.loadBalancerClass matches"; else two
    implementations would write the same status. The decision and the allocator both
    use this one rule, so they never disagree."""
    return service.type == "LoadBalancer" and service.load_balancer_class == load_balancer_class
