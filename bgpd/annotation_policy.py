"""SpeakerConfig annotationPolicy: which Services may set the per-Service attribute
annotations, and which well-known communities those may carry.

Why: with aggregation or a shared IP, one route carries several Services and their
attributes are merged (bgpd.decision), so one namespace's `blackhole`, `no-advertise` or
MED would steer the traffic of another namespace's Services. In a cluster shared by
tenants the operator names the namespaces trusted with attributes and the well-known
communities they may use. What the policy refuses is dropped from the Service's
attributes (the Service is still announced, with its advertisements' attributes), and
the owner is told why (a notice: explain and a Warning Event).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from bgpd.attributes import WELL_KNOWN
from bgpd.model import AnnotationPolicy, RouteAttributes, Service

#: RFC 1997: communities 0xFFFF0000-0xFFFFFFFF are the well-known range.
_WELL_KNOWN_PREFIX = "65535:"
_NAME_OF = {value: name for name, value in WELL_KNOWN.items()}
_NOTHING = RouteAttributes()


def restrict(
    policy: AnnotationPolicy | None, service: Service, asked: RouteAttributes
) -> tuple[RouteAttributes, str]:
    """The attributes `service` may have of those its annotations ask for, and why not
    the rest ('' when everything is allowed)."""
    if policy is None or asked == _NOTHING:
        return asked, ""
    namespaces = policy.namespaces
    if namespaces is not None and service.namespace not in namespaces:
        allowed = ", ".join(sorted(namespaces)) or "none"
        return _NOTHING, (
            f"namespace {service.namespace} may not set attribute annotations "
            f"(SpeakerConfig annotationPolicy.namespaces: {allowed}); announced with its "
            "advertisements' attributes only"
        )
    names = policy.allowed_well_known_communities
    if names is None:
        return asked, ""
    allowed_values = {WELL_KNOWN[n] for n in names}
    refused = [
        c for c in asked.communities if c.startswith(_WELL_KNOWN_PREFIX) and c not in allowed_values
    ]
    if not refused:
        return asked, ""
    shown = ", ".join(_NAME_OF.get(c, c) for c in refused)
    permitted = ", ".join(sorted(names)) or "none"
    return replace(asked, communities=tuple(c for c in asked.communities if c not in refused)), (
        f"well-known communities {shown} are not allowed (SpeakerConfig annotationPolicy."
        f"allowedWellKnownCommunities: {permitted}); announced without them"
    )
