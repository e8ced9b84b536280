"""Community: global community aliases."""

from __future__ import annotations

from typing import Final

from bgpd.attributes import parse_community
from bgpd.config.fields import METALLB_V1BETA1, Field, KindTable, names
from bgpd.config.issues import Doc
from bgpd.config.parsed import Parsed
from bgpd.config.values import join_path, read_fields, read_text, type_name
from bgpd.model import (
    Community,
    frozen_map,
)

#: One alias: a name and the community it stands for.
ALIAS_FIELDS: Final = (
    Field("name", ref="text", required=True),
    Field("value", ref="text", required=True),
)
COMMUNITY: Final = KindTable(
    kind="Community",
    api_version=METALLB_V1BETA1,
    definition="Community",
    description="MetalLB Community: global community aliases.",
    plural="communities",
    spec=(
        Field(
            "communities",
            type="array",
            nullable=True,
            items=Field(type="object", fields=ALIAS_FIELDS),
        ),
    ),
)


def parse_community_spec(doc: Doc, spec: object, name: str, out: Parsed) -> Community | None:
    f = read_fields(doc, "spec", {} if spec is None else spec, names(COMMUNITY.spec))
    if f is None:
        return None
    aliases: dict[str, str] = {}
    items = f.get("communities")
    if items is None:
        items = []
    if not isinstance(items, list):
        doc.error("spec.communities", f"must be a list, not {type_name(items)}")
        return None
    before = doc.errors
    for i, item in enumerate(items):
        path = f"spec.communities[{i}]"
        g = read_fields(doc, path, item, names(ALIAS_FIELDS))
        if g is None:
            continue
        alias = g.get("name")
        value = g.get("value")
        if alias in (None, ""):
            doc.error(join_path(path, "name"), "is required")
        if value in (None, ""):
            doc.error(join_path(path, "value"), "is required")
        if alias in (None, "") or value in (None, ""):
            continue
        alias_s = read_text(doc, join_path(path, "name"), alias)
        if alias_s is not None:
            out.alias_names.add(alias_s)
        value_s = read_text(doc, join_path(path, "value"), value)
        if alias_s is None or value_s is None:
            continue
        try:
            parse_community(value_s)
        except ValueError as exc:
            doc.error(join_path(path, "value"), str(exc))
            continue
        if alias_s in aliases:
            doc.error(join_path(path, "name"), f"duplicate definition of community {alias_s!r}")
            continue
        aliases[alias_s] = value_s
    if doc.errors != before:
        return None
    return Community(name=name, communities=frozen_map(aliases))
