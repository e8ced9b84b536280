"""One document at a time: kind and apiVersion, metadata, the kind's spec; then the
cross-checks. `parse_documents` is the pure entry point (already-loaded YAML in)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from bgpd.config.advertisement import ADVERTISEMENT, parse_advertisement
from bgpd.config.bfd import BFD_PROFILE, parse_bfd_profile
from bgpd.config.checks import cross_check
from bgpd.config.community import COMMUNITY, parse_community_spec
from bgpd.config.fields import METADATA_FIELDS, KindTable, ignored_names, names
from bgpd.config.issues import MISSING, ConfigIssue, Doc, Issues, LoadResult, YamlFailure
from bgpd.config.parsed import Parsed
from bgpd.config.peer import PEER_V1BETA1, PEER_V1BETA2, parse_peer
from bgpd.config.pool import POOL, parse_pool
from bgpd.config.speaker_config import SPEAKER, parse_speaker
from bgpd.config.values import (
    DNS_LABEL_RE,
    LABEL_NAME_RE,
    dns_subdomain_error,
    read_fields,
    read_labels,
    show,
    type_name,
)

#: Every (apiVersion, kind) the loader reads, in the order config/schema.json lists them.
KINDS: Final[tuple[KindTable, ...]] = (
    POOL,
    PEER_V1BETA2,
    PEER_V1BETA1,
    ADVERTISEMENT,
    COMMUNITY,
    BFD_PROFILE,
    SPEAKER,
)


def _metadata(doc: Doc, value: object) -> tuple[str | None, dict[str, str]]:
    """Read metadata; returns (name or None, labels)."""
    f = read_fields(
        doc, "metadata", value, names(METADATA_FIELDS), ignored=ignored_names(METADATA_FIELDS)
    )
    if f is None:
        return None, {}
    name: str | None = None
    raw = f.get("name", MISSING)
    if raw is MISSING or raw is None or raw == "":
        doc.error("metadata.name", "is required")
    elif not isinstance(raw, str):
        doc.error("metadata.name", f"must be a string, not {type_name(raw)}")
    else:
        why = dns_subdomain_error(raw)
        if why is not None:
            doc.error("metadata.name", why)
        else:
            name = raw
    if "namespace" in f:
        ns = f["namespace"]
        if not isinstance(ns, str) or len(ns) > 63 or not DNS_LABEL_RE.fullmatch(ns):
            doc.error("metadata.namespace", f"{show(ns)} is not a valid namespace name")
    labels: dict[str, str] = {}
    if "labels" in f and f["labels"] is not None:
        labels = read_labels(doc, "metadata.labels", f["labels"]) or {}
    if "annotations" in f and f["annotations"] is not None:
        ann = f["annotations"]
        if not isinstance(ann, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in ann.items()
        ):
            doc.error("metadata.annotations", "must be a mapping of strings to strings")
    return name, labels


#: (apiVersion, kind) -> the spec fields the loader accepts (config/schema.json is
#: generated from the same table).
SPEC_FIELDS: Final[Mapping[tuple[str, str], tuple[str, ...]]] = {
    (k.api_version, k.kind): names(k.spec) for k in KINDS
}

#: kind -> accepted apiVersions.
_KINDS: Final[dict[str, tuple[str, ...]]] = {}
for _table in KINDS:
    _KINDS[_table.kind] = (*_KINDS.get(_table.kind, ()), _table.api_version)
#: Kinds MetalLB users may have that kube-bgpd refuses, and why.
_REFUSED_KINDS: Final[dict[str, str]] = {
    "L2Advertisement": "layer 2 mode is not supported: kube-bgpd only speaks BGP",
    "ConfigMap": "MetalLB's legacy ConfigMap format is not supported; convert it to "
    "custom resources first (MetalLB's configmaptocrs tool)",
    "ConfigurationState": "it is status written by MetalLB, not configuration",
    "ServiceBGPStatus": "it is status written by MetalLB, not configuration",
    "ServiceL2Status": "it is status written by MetalLB, not configuration",
}


def _parse_document(source: str, raw: object, issues: Issues, out: Parsed) -> None:
    if isinstance(raw, YamlFailure):
        issues.errors.append(raw.issue)
        return
    if raw is None:
        return  # an empty document between two `---`, as kubectl skips it
    if not isinstance(raw, Mapping):
        issues.errors.append(
            ConfigIssue(
                source,
                "document",
                f"must be a mapping (a Kubernetes object), not {type_name(raw)}",
            )
        )
        return
    kind = raw.get("kind")
    api = raw.get("apiVersion")
    if kind == "List" and api == "v1":
        _parse_list(source, raw, issues, out)
        return
    name_hint = _name_hint(raw)
    if not isinstance(kind, str) or not kind:
        doc = Doc(source, "", name_hint or "document", issues)
        doc.error(
            "kind", "is required" if kind is None else f"must be a string, not {type_name(kind)}"
        )
        return
    safe_kind = kind if LABEL_NAME_RE.fullmatch(kind) else repr(kind)
    doc = Doc(source, safe_kind, name_hint or "<unnamed>", issues)
    if kind in _REFUSED_KINDS:
        doc.error("kind", f"{safe_kind} is not accepted: {_REFUSED_KINDS[kind]}")
        return
    if kind not in _KINDS:
        known = ", ".join(sorted(_KINDS))
        doc.error("kind", f"unknown kind {safe_kind} (kube-bgpd reads {known}, and v1 List)")
        return
    if api not in _KINDS[kind]:
        want = " or ".join(_KINDS[kind])
        doc.error("apiVersion", f"{show(api)} is not supported for {kind}; use {want}")
        return
    top = read_fields(doc, "", raw, ("apiVersion", "kind", "metadata", "spec"), ignored=("status",))
    if top is None:
        return
    name, labels = _metadata(doc, top.get("metadata"))
    if name is None:
        return
    doc.name = _qualified(name, top.get("metadata")) if out.qualified_names else name
    registry = out.names.setdefault(kind, {})
    if name in registry:
        doc.error("metadata.name", f"duplicate {kind} name (also in {registry[name].source})")
        return
    registry[name] = doc
    spec = top.get("spec")
    if kind == "IPAddressPool":
        parse_pool(doc, spec, name, labels, out)
    elif kind == "BGPPeer":
        peer = parse_peer(doc, spec, name, str(api), out)
        if peer is None:
            out.all_peers_parsed = False
        else:
            out.peers.append((peer, doc))
    elif kind == "BGPAdvertisement":
        adv = parse_advertisement(doc, spec, name)
        if adv is not None:
            out.advertisements.append((adv, doc))
    elif kind == "Community":
        if (c := parse_community_spec(doc, spec, name, out)) is not None:
            out.communities.append((c, doc))
    elif kind == "BFDProfile":
        if (b := parse_bfd_profile(doc, spec, name)) is not None:
            out.bfd_profiles.append((b, doc))
    elif kind == "SpeakerConfig" and (s := parse_speaker(doc, spec)) is not None:
        out.speakers.append((s, doc))


def _qualified(name: str, meta: object) -> str:
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{ns}/{name}" if isinstance(ns, str) and ns else name


def _name_hint(raw: Mapping[Any, Any]) -> str | None:
    meta = raw.get("metadata")
    if isinstance(meta, Mapping):
        name = meta.get("name")
        if isinstance(name, str) and name and dns_subdomain_error(name) is None:
            return name
    return None


def _parse_list(source: str, raw: Mapping[Any, Any], issues: Issues, out: Parsed) -> None:
    doc = Doc(source, "List", "", issues)
    top = read_fields(doc, "", raw, ("apiVersion", "kind", "items", "metadata"))
    if top is None:
        return
    items = top.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        doc.error("items", f"must be a list, not {type_name(items)}")
        return
    for i, item in enumerate(items):
        issues.see(f"{source}:items[{i}]")
        _parse_document(f"{source}:items[{i}]", item, issues, out)


def parse_documents(
    docs: Iterable[tuple[str, object]], *, qualified_names: bool = False
) -> LoadResult:
    """Parse already-loaded YAML documents, each with the label of where it came from.
    `qualified_names`: name objects "namespace/name" in messages (cluster objects).

    Pure and total: any input yields a LoadResult (never an exception), with a Config when
    there is no error and every error and warning found otherwise.
    """
    issues = Issues()
    out = Parsed(qualified_names=qualified_names)
    for source, raw in docs:
        issues.see(source)
        _parse_document(source, raw, issues, out)
    config = cross_check(out, issues)
    if not out.names and not issues.errors:
        issues.warnings.append(ConfigIssue("", "", "no configuration documents found"))
    return LoadResult(
        config=None if issues.errors else config,
        errors=issues.sorted(issues.errors),
        warnings=issues.sorted(issues.warnings),
    )
