"""SpeakerConfig annotationPolicy (issue 15 item 11): with aggregation one namespace's
blackhole, no-advertise or MED would land on a route carrying another namespace's IP.
The operator names the namespaces trusted with attribute annotations and the well-known
communities they may use; what is refused is left off, with a notice, and the Service
is still announced. The incremental Decider agrees with decide()."""

from __future__ import annotations

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.config import parse_text
from bgpd.decision import (
    ANNOTATION_COMMUNITIES,
    ANNOTATION_LOCAL_PREF,
    ANNOTATION_MED,
    Decider,
    decide,
)
from bgpd.model import AnnotationPolicy, Config, NodeName, NoticeReason, SpeakerConfig

N1 = node("n1")
TOR = peer("tor-a", "172.31.250.1")
SHARED = pool("shared", "198.51.100.0/24")


def policy_config(policy: AnnotationPolicy | None) -> Config:
    return config(
        pools=[SHARED],
        peers=[TOR],
        advertisements=[adv(aggregation_length=24, communities=["65000:7"])],
        speaker=SpeakerConfig(annotation_policy=policy),
    )


TENANT_A = svc(
    "team-a/web",
    "198.51.100.1",
    annotations={ANNOTATION_COMMUNITIES: "blackhole,65000:1", ANNOTATION_MED: "5"},
)
TENANT_B = svc("team-b/api", "198.51.100.2")

NOT_IN_NAMESPACES = (
    "namespace team-a may not set attribute annotations (SpeakerConfig "
    "annotationPolicy.namespaces: infra); announced with its advertisements' attributes only"
)
BLACKHOLE = (
    "well-known communities blackhole are not allowed (SpeakerConfig annotationPolicy."
    "allowedWellKnownCommunities: no-export); announced without them"
)

POLICIES = [
    pytest.param(None, ("65000:1", "65000:7", "65535:666"), 5, [], id="no-policy-everything-goes"),
    pytest.param(
        AnnotationPolicy(namespaces=frozenset({"infra"})),
        ("65000:7",),
        None,
        [("team-a/web", NoticeReason.ANNOTATION_NOT_ALLOWED, NOT_IN_NAMESPACES)],
        id="namespace-not-trusted-annotations-ignored",
    ),
    pytest.param(
        AnnotationPolicy(namespaces=frozenset({"team-a"})),
        ("65000:1", "65000:7", "65535:666"),
        5,
        [],
        id="namespace-trusted",
    ),
    pytest.param(
        AnnotationPolicy(allowed_well_known_communities=frozenset({"no-export"})),
        ("65000:1", "65000:7"),
        5,
        [("team-a/web", NoticeReason.ANNOTATION_NOT_ALLOWED, BLACKHOLE)],
        id="well-known-community-not-allowed-dropped-rest-kept",
    ),
]


@pytest.mark.parametrize(("policy", "communities", "med", "notices"), POLICIES)
def test_annotation_policy_on_a_shared_aggregate(
    policy: AnnotationPolicy | None,
    communities: tuple[str, ...],
    med: int | None,
    notices: list[tuple[str, NoticeReason, str]],
) -> None:
    cfg = policy_config(policy)
    snapshot = cluster(
        [TENANT_A, TENANT_B], [eps("team-a/web", ep("n1")), eps("team-b/api", ep("n1"))], [N1]
    )
    got = decide(cfg, snapshot, NodeName("n1"))
    (route,) = got.routes
    assert route.services == ("team-a/web", "team-b/api")
    assert (route.attributes.communities, route.attributes.med) == (communities, med)
    assert [(n.service, n.reason, n.detail) for n in got.notices] == notices
    assert Decider().decide(cfg, snapshot, NodeName("n1")) == got


def test_an_untrusted_local_pref_is_not_reported_as_not_sent() -> None:
    """A refused local-pref is not sent for the policy, not for being eBGP: one notice."""
    ebgp = peer("isp", "172.31.250.9", peer_asn=65001)
    cfg = config(
        pools=[SHARED],
        peers=[ebgp],
        advertisements=[adv()],
        speaker=SpeakerConfig(annotation_policy=AnnotationPolicy(namespaces=frozenset())),
    )
    service = svc("team-a/web", "198.51.100.1", annotations={ANNOTATION_LOCAL_PREF: "300"})
    got = decide(cfg, cluster([service], [eps("team-a/web", ep("n1"))], [N1]), NodeName("n1"))
    assert [n.reason for n in got.notices] == [NoticeReason.ANNOTATION_NOT_ALLOWED]
    assert len(got.routes) == 1


SPEAKER_DOC = """
apiVersion: kube-bgpd.io/v1alpha1
kind: SpeakerConfig
metadata: {{name: speaker}}
spec:
  annotationPolicy: {policy}
"""


@pytest.mark.parametrize(
    ("policy", "expected", "errors"),
    [
        pytest.param(
            "{namespaces: [infra, team-a], allowedWellKnownCommunities: [no-export]}",
            AnnotationPolicy(
                namespaces=frozenset({"infra", "team-a"}),
                allowed_well_known_communities=frozenset({"no-export"}),
            ),
            [],
            id="both",
        ),
        pytest.param("{}", AnnotationPolicy(), [], id="empty-allows-all"),
        pytest.param(
            "{namespaces: []}", AnnotationPolicy(namespaces=frozenset()), [], id="no-namespace"
        ),
        pytest.param(
            "{allowedWellKnownCommunities: [gold]}",
            None,
            [
                "'gold' is not one of blackhole, graceful-shutdown, no-advertise, no-export, "
                "no-export-subconfed, no-peer"
            ],
            id="unknown-well-known-name",
        ),
    ],
)
def test_annotation_policy_config(
    policy: str, expected: AnnotationPolicy | None, errors: list[str]
) -> None:
    result = parse_text(SPEAKER_DOC.format(policy=policy), "s.yaml")
    assert [e.message for e in result.errors] == errors
    if expected is not None:
        assert result.config is not None
        assert result.config.speaker.annotation_policy == expected
