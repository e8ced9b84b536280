"""BFDProfile: MetalLB's fields and ranges; the values of the BFD sessions (bfdd) of the
BGPPeers that name the profile. echoMode is refused: bfdd runs standalone (no zebra), and
its echo function needs zebra (see docs/configuration.md, BFD)."""

from __future__ import annotations

from typing import Final

from bgpd.config.fields import METALLB_V1BETA1, Api, Column, Field, KindTable, bounds, names
from bgpd.config.issues import Doc
from bgpd.config.values import read_bool, read_fields, read_int
from bgpd.model import BFDProfile


def _int32(name: str, lo: int, hi: int, default: int) -> Field:
    """An integer whose range MetalLB's CRD states too (its default it does not)."""
    api = Api(format="int32", minimum=lo, maximum=hi)
    return Field(name, type="integer", minimum=lo, maximum=hi, default=default, api=api)


BFD_PROFILE: Final = KindTable(
    kind="BFDProfile",
    api_version=METALLB_V1BETA1,
    definition="BFDProfile",
    description="MetalLB BFDProfile: the values of the BFD sessions of the BGPPeers naming it.",
    # MetalLB's bfdProfileFromCR ranges (milliseconds; TTL hops).
    spec=(
        _int32("receiveInterval", 10, 60000, 300),
        _int32("transmitInterval", 10, 60000, 300),
        _int32("detectMultiplier", 2, 255, 3),
        _int32("echoInterval", 10, 60000, 50),
        Field(
            "echoMode",
            type="boolean",
            default=False,
            description="Refused when true: bfdd runs without zebra, which echo needs.",
        ),
        Field("passiveMode", type="boolean", default=False),
        _int32("minimumTtl", 1, 254, 254),
    ),
    columns=(
        Column("Passive Mode", ".spec.passiveMode", "boolean"),
        Column("Transmit Interval", ".spec.transmitInterval", "integer"),
        Column("Receive Interval", ".spec.receiveInterval", "integer"),
        Column("Multiplier", ".spec.detectMultiplier", "integer"),
    ),
)


def parse_bfd_profile(doc: Doc, spec: object, name: str) -> BFDProfile | None:
    f = read_fields(doc, "spec", {} if spec is None else spec, names(BFD_PROFILE.spec))
    if f is None:
        return None
    before = doc.errors
    ints: dict[str, int] = {}
    bools: dict[str, bool] = {}
    # Integers first, then booleans: the order the messages have always come in.
    for spec_field in sorted(BFD_PROFILE.spec, key=lambda x: x.type != "integer"):
        key = spec_field.name
        value = f.get(key)
        if spec_field.type == "integer":
            got = (
                None if value is None else read_int(doc, f"spec.{key}", value, *bounds(spec_field))
            )
            ints[key] = got or spec_field.default
        else:
            bools[key] = value is not None and read_bool(doc, f"spec.{key}", value) is True
    if bools["echoMode"]:
        doc.error("spec.echoMode", "not supported: bfdd runs without zebra, which echo needs")
    if doc.errors != before:
        return None
    return BFDProfile(
        name=name,
        receive_interval=ints["receiveInterval"],
        transmit_interval=ints["transmitInterval"],
        detect_multiplier=ints["detectMultiplier"],
        echo_interval=ints["echoInterval"],
        echo_mode=bools["echoMode"],
        passive_mode=bools["passiveMode"],
        minimum_ttl=ints["minimumTtl"],
    )
