"""Configuration from cluster objects (MetalLB's custom resources and SpeakerConfig), through
the same parser and checks as a file, and the rule that an invalid object never takes a
valid configuration down.

Why per object: a typo in one BGPAdvertisement must not block a new IPAddressPool, nor
withdraw the routes the advertisement's previous version announced. So `resolve` builds
the configuration from the objects as they are now, except that each object whose current
version has an error is replaced by its last valid version (or left out if it never had
one), and the rest is parsed again; cross-object errors that sit on objects that did not
change (an advertisement naming a pool that was just deleted) put every changed object
back as it was: the whole last valid set, which parsed before. It ends: each round puts
back at least one changed object.

Pure: objects in (API JSON as mappings), a Resolution out; no I/O, no clock. The
Kubernetes side (k8s_watcher.config_source) watches the objects and reports what this
decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bgpd.config.documents import parse_documents
from bgpd.config.issues import ConfigIssue, LoadResult
from bgpd.model import Config

#: An API object as JSON (metadata, spec; status and server fields are ignored).
RawObject = Mapping[str, Any]


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """One configuration object in the cluster; printed the way messages name it."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return (
            f"{self.kind} {self.namespace}/{self.name}"
            if self.namespace
            else f"{self.kind} {self.name}"
        )


def object_key(raw: RawObject) -> ObjectKey | None:
    """The key of an API object; None without kind or name (the API never sends one)."""
    meta = raw.get("metadata")
    kind = raw.get("kind")
    if not isinstance(meta, Mapping) or not isinstance(kind, str):
        return None
    name, namespace = meta.get("name"), meta.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    return ObjectKey(kind, namespace, name)


def parse_objects(objects: Mapping[ObjectKey, RawObject]) -> LoadResult:
    """The objects as one configuration, exactly as a file holding them would be read,
    with every message naming its object (`BGPPeer metallb-system/tor: spec.holdTime: ...`)."""
    return parse_documents((("", objects[key]) for key in sorted(objects)), qualified_names=True)


def issues_by_object(
    issues: tuple[ConfigIssue, ...], keys: Mapping[ObjectKey, object]
) -> tuple[dict[ObjectKey, tuple[ConfigIssue, ...]], tuple[ConfigIssue, ...]]:
    """Each issue under the object it names (its `where` starts with the object's name),
    and those naming none."""
    by_label = {str(key): key for key in keys}
    out: dict[ObjectKey, list[ConfigIssue]] = {}
    loose: list[ConfigIssue] = []
    for issue in issues:
        key = by_label.get(issue.where.split(": ", 1)[0])
        if key is None:
            loose.append(issue)
        else:
            out.setdefault(key, []).append(issue)
    return {k: tuple(v) for k, v in out.items()}, tuple(loose)


@dataclass(frozen=True, slots=True)
class Resolution:
    """What is in force after `resolve`."""

    #: The configuration to run; None when none could be built (no valid version of
    #: anything that has errors, and errors naming no object): keep the running one.
    config: Config | None
    #: The object versions `config` was built from: the next call's `last_valid`.
    in_force: Mapping[ObjectKey, RawObject]
    #: Objects whose current version is not in force, with the errors that keep it out
    #: (on the object itself, or on an unchanged object the change broke).
    rejected: Mapping[ObjectKey, tuple[ConfigIssue, ...]]
    #: Errors when config is None (every error of the last attempt).
    errors: tuple[ConfigIssue, ...]
    warnings: tuple[ConfigIssue, ...]

    @property
    def stale(self) -> bool:
        """Something in the cluster is not in force as written."""
        return self.config is None or bool(self.rejected)


def resolve(
    current: Mapping[ObjectKey, RawObject], last_valid: Mapping[ObjectKey, RawObject]
) -> Resolution:
    """The configuration from `current`, each invalid object replaced by its version in
    `last_valid` (see the module docstring for the rule and why it ends)."""
    candidate = dict(current)
    rejected: dict[ObjectKey, tuple[ConfigIssue, ...]] = {}
    while True:
        result = parse_objects(candidate)
        if result.config is not None:
            return Resolution(result.config, candidate, rejected, (), result.warnings)
        by_key, _ = issues_by_object(result.errors, candidate)
        changed = {
            k for k in candidate.keys() | last_valid.keys() if candidate.get(k) != last_valid.get(k)
        }
        bad_changed = [k for k in by_key if k in changed]
        if not changed:
            # Nothing left to put back: the last valid set itself does not parse (only
            # at the first start, when there is none).
            return Resolution(None, last_valid, {**by_key, **rejected}, result.errors, ())
        if not bad_changed:
            # The errors sit on objects that did not change: a change elsewhere broke
            # them. Put every change back.
            for k, found in by_key.items():
                rejected.setdefault(k, found)
            for k in changed:
                rejected.setdefault(k, by_key.get(k, ()))
            candidate = dict(last_valid)
            continue
        for k in bad_changed:
            rejected.setdefault(k, by_key[k])
            if k in last_valid:
                candidate[k] = last_valid[k]
            else:
                del candidate[k]
