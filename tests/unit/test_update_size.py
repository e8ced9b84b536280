"""The UPDATE size budget (bgpd.update_size) and how decide() keeps every route inside
one BGP message: a Service asking for too many communities is refused (its last valid
attributes kept), and an aggregate whose merged communities would not fit leaves the
largest sources out, so one Service never resets a session or touches another's route."""

from __future__ import annotations

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.config import parse_text
from bgpd.decision import ANNOTATION_COMMUNITIES, Decider, decide, remember_attributes
from bgpd.model import (
    LinkBandwidth,
    NodeName,
    NoticeReason,
    RouteAttributes,
    Service,
    ServiceKey,
    SkipReason,
)
from bgpd.update_size import (
    ADVERTISEMENT_COMMUNITY_BYTES,
    LARGE_BYTES,
    MAX_MESSAGE,
    SERVICE_COMMUNITY_BYTES,
    STANDARD_BYTES,
    fits,
    path_attributes_size,
    update_size,
)

N1 = node("n1")
TOR = peer("tor-a", "172.31.250.1")
S = ServiceKey("team-a/web")
T = ServiceKey("team-b/api")


def standard(n: int, first: int = 0) -> tuple[str, ...]:
    """n distinct standard communities."""
    return tuple(f"{64000 + (first + i) // 60000}:{(first + i) % 60000}" for i in range(n))


def large(n: int) -> tuple[str, ...]:
    return tuple(f"1:2:{i}" for i in range(n))


SIZES = [
    # header 23 + ORIGIN 4 + 2 x AS_PATH 9 + MED 7 + LOCAL_PREF 7 + COMMUNITIES with
    # GRACEFUL_SHUTDOWN 7 + NEXT_HOP 7 + NLRI 5
    pytest.param(RouteAttributes(), 4, 23 + 4 + 18 + 7 + 7 + 7 + 7 + 5, id="ipv4-bare"),
    # ... MP_REACH_NLRI 3 + 54 instead of NEXT_HOP and NLRI
    pytest.param(RouteAttributes(), 6, 23 + 4 + 18 + 7 + 7 + 7 + 57, id="ipv6-bare"),
    pytest.param(
        RouteAttributes(communities=("65535:0",)),
        4,
        23 + 4 + 18 + 7 + 7 + 7 + 7 + 5,
        id="graceful-shutdown-counted-once",
    ),
    pytest.param(
        RouteAttributes(communities=standard(62)),
        4,
        23 + 4 + 18 + 7 + 7 + (3 + 63 * 4) + 7 + 5,
        id="communities-252-bytes-short-length",
    ),
    pytest.param(
        RouteAttributes(communities=standard(63)),
        4,
        23 + 4 + 18 + 7 + 7 + (4 + 64 * 4) + 7 + 5,
        id="communities-256-bytes-extended-length",
    ),
    pytest.param(
        RouteAttributes(large_communities=large(2), link_bandwidth=LinkBandwidth(65000, 1)),
        4,
        23 + 4 + 18 + 7 + 7 + 7 + (3 + 24) + (3 + 8) + 7 + 5,
        id="large-and-extended",
    ),
]


@pytest.mark.parametrize(("attributes", "version", "size"), SIZES)
def test_update_size(attributes: RouteAttributes, version: int, size: int) -> None:
    assert update_size(attributes, version) == size
    assert path_attributes_size(attributes, version) < size


def test_the_limits_always_fit_in_one_message() -> None:
    """A Service at its annotation limit through an advertisement at its own, with every
    other attribute, in either family and in either kind of community, fits: so a Service
    alone can never make an UPDATE too large."""
    worst = [
        (standard(SERVICE_COMMUNITY_BYTES // STANDARD_BYTES), ()),
        ((), large(SERVICE_COMMUNITY_BYTES // LARGE_BYTES)),
    ]
    for version in (4, 6):
        for svc_std, svc_large in worst:
            attributes = RouteAttributes(
                communities=(
                    *svc_std,
                    *standard(ADVERTISEMENT_COMMUNITY_BYTES // STANDARD_BYTES, 10_000),
                ),
                large_communities=svc_large,
                local_pref=1,
                med=1,
                link_bandwidth=LinkBandwidth(65000, 1),
            )
            assert fits(attributes, version), update_size(attributes, version)
    assert not fits(RouteAttributes(communities=standard(17_000)), 4)
    assert update_size(RouteAttributes(communities=standard(1_010)), 4) > MAX_MESSAGE


def many(n: int, first: int = 0) -> str:
    return ",".join(standard(n, first))


TOO_MANY = (
    f"{ANNOTATION_COMMUNITIES}: 17000 communities and 0 large communities take 68000 bytes, "
    f"more than {SERVICE_COMMUNITY_BYTES} (512 communities or 170 large ones), so that every "
    "route fits in one 4,096-byte BGP UPDATE; accepted: a comma list of a:b, large:a:b:c, "
    "a well-known name such as no-export, or a Community alias, at most 2048 bytes of them "
    "(4 per a:b, 12 per large)"
)
ONE = config(pools=[pool("v4", "198.51.100.0/24")], peers=[TOR], advertisements=[adv()])
HUGE = svc(S, "198.51.100.1", annotations={ANNOTATION_COMMUNITIES: many(17_000)})
FINE = svc(S, "198.51.100.1", annotations={ANNOTATION_COMMUNITIES: "65000:1"})


def test_a_service_with_too_many_communities_is_refused() -> None:
    got = decide(ONE, cluster([HUGE], [eps(S, ep("n1"))], [N1]), NodeName("n1"))
    assert got.routes == ()
    assert [(s.service, s.reason, s.detail) for s in got.skipped] == [
        (S, SkipReason.INVALID_ANNOTATION, TOO_MANY)
    ]


def test_an_announced_service_keeps_its_last_valid_communities() -> None:
    before = cluster([FINE], [eps(S, ep("n1"))], [N1])
    after = cluster([HUGE], [eps(S, ep("n1"))], [N1])
    last_valid = remember_attributes(ONE, before, {})
    got = decide(ONE, after, NodeName("n1"), last_valid=last_valid)
    assert [(r.prefix.compressed, r.attributes.communities) for r in got.routes] == [
        ("198.51.100.1/32", ("65000:1",))
    ]
    assert [(n.service, n.reason) for n in got.notices] == [(S, NoticeReason.ANNOTATION_KEPT)]
    decider = Decider()
    decider.decide(ONE, before, NodeName("n1"))
    assert decider.decide(ONE, after, NodeName("n1")) == got


#: Two Services in one /24 aggregate, each within its limit, together too many.
AGGREGATED = config(
    pools=[pool("v4", "198.51.100.0/24")],
    peers=[TOR],
    advertisements=[adv(aggregation_length=24, communities=["65000:7"])],
)
BIG = svc(S, "198.51.100.1", annotations={ANNOTATION_COMMUNITIES: many(512)})
SMALLER = svc(T, "198.51.100.2", annotations={ANNOTATION_COMMUNITIES: many(500, 1_000)})
LEFT_OUT = (
    "its communities are left out of 198.51.100.0/24 to peer tor-a: with the communities "
    "of the route's other sources the BGP UPDATE would exceed 4,096 bytes"
)

AGGREGATES = [
    pytest.param(
        [BIG, SMALLER],
        {"65000:7", *standard(500, 1_000)},
        [(S, NoticeReason.COMMUNITIES_LEFT_OUT, LEFT_OUT)],
        id="largest-service-left-out",
    ),
    pytest.param(
        [
            svc(S, "198.51.100.1", annotations={ANNOTATION_COMMUNITIES: many(500, 1_000)}),
            svc(T, "198.51.100.2", annotations={ANNOTATION_COMMUNITIES: many(512)}),
        ],
        {"65000:7", *standard(500, 1_000)},
        [(T, NoticeReason.COMMUNITIES_LEFT_OUT, LEFT_OUT)],
        id="the-order-of-keys-does-not-matter",
    ),
    pytest.param(
        [BIG, svc(T, "198.51.100.2", annotations={ANNOTATION_COMMUNITIES: "65000:1"})],
        {"65000:7", "65000:1", *standard(512)},
        [],
        id="union-fits-everything-sent",
    ),
]


@pytest.mark.parametrize(("services", "communities", "notices"), AGGREGATES)
def test_an_aggregate_never_exceeds_one_message(
    services: list[Service], communities: set[str], notices: list[tuple[str, str, str]]
) -> None:
    """The merged communities of an aggregate go in while they fit, the advertisement's
    first, then the Services from the fewest bytes: the Service asking for most is the
    one left out (with a notice), the route stays, and the Decider agrees with decide()."""
    snapshot = cluster(services, [eps(s.key, ep("n1")) for s in services], [N1])
    got = decide(AGGREGATED, snapshot, NodeName("n1"))
    (route,) = got.routes
    assert route.prefix.compressed == "198.51.100.0/24"
    assert set(route.attributes.communities) == communities
    assert fits(route.attributes, 4)
    assert [(n.service, n.reason, n.detail) for n in got.notices] == notices
    assert Decider().decide(AGGREGATED, snapshot, NodeName("n1")) == got


def test_the_decider_drops_the_notice_when_the_big_service_goes() -> None:
    both = cluster([BIG, SMALLER], [eps(S, ep("n1")), eps(T, ep("n1"))], [N1])
    alone = cluster([SMALLER], [eps(T, ep("n1"))], [N1])
    decider = Decider()
    assert decider.decide(AGGREGATED, both, NodeName("n1")).notices
    got = decider.decide(AGGREGATED, alone, NodeName("n1"), changed={S})
    assert got == decide(AGGREGATED, alone, NodeName("n1"))
    assert got.notices == ()


def test_an_advertisement_with_too_many_communities_is_a_config_error() -> None:
    communities = "".join(f"\n    - 65000:{i}" for i in range(300))
    text = f"""
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: v4}}
spec: {{addresses: [198.51.100.0/24]}}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {{name: all}}
spec:
  communities:{communities}
"""
    result = parse_text(text, "c.yaml")
    assert [(e.where, e.message) for e in result.errors] == [
        (
            "BGPAdvertisement all: spec.communities",
            "300 communities and 0 large communities take 1200 bytes, more than 1024 (256 "
            "communities or 85 large ones), so that every route fits in one 4,096-byte BGP "
            "UPDATE",
        )
    ]


def test_fits_is_memoised_per_attribute_value() -> None:
    """The Decider asks fits() once per route it builds; equal attributes (nearly every
    route's) are counted once."""
    fits.cache_clear()
    attributes = RouteAttributes(communities=("65000:1",))
    for _ in range(3):
        assert fits(RouteAttributes(communities=("65000:1",)), 4)
    assert fits(attributes, 4)
    info = fits.cache_info()
    assert (info.misses, info.hits) == (1, 3)
