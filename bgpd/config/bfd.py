"""BFDProfile: parsed with MetalLB's ranges, though no BFD session runs."""

from __future__ import annotations

from typing import Final

from bgpd.config.fields import METALLB_V1BETA1, Field, KindTable, bounds, names
from bgpd.config.issues import Doc
from bgpd.config.values import read_bool, read_fields, read_int
from bgpd.model import BFDProfile

BFD_PROFILE: Final = KindTable(
    kind="BFDProfile",
    api_version=METALLB_V1BETA1,
    definition="BFDProfile",
    description="MetalLB BFDProfile: parsed, but no BFD runs (ExaBGP has no BFD).",
    # MetalLB's bfdProfileFromCR ranges (milliseconds; TTL hops).
    spec=(
        Field("receiveInterval", type="integer", minimum=10, maximum=60000, default=300),
        Field("transmitInterval", type="integer", minimum=10, maximum=60000, default=300),
        Field("detectMultiplier", type="integer", minimum=2, maximum=255, default=3),
        Field("echoInterval", type="integer", minimum=10, maximum=60000, default=50),
        Field("echoMode", type="boolean", default=False),
        Field("passiveMode", type="boolean", default=False),
        Field("minimumTtl", type="integer", minimum=1, maximum=254, default=254),
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
