"""Bad annotation values are echoed as bounded excerpts (issue 15: 20 Services with 1 MB
annotations grew /status to 20 MB and the speaker from 90 to 273 MB).

decide() (both the skip of a Service never seen valid and the notice of one that keeps
its last valid attributes), explain's JSON (what /status and `explain --from-speaker`
carry) and its table stay small whatever the Services carry, and the decision keeps no
copy of the values: tracemalloc measures what stays allocated.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from clusterkit import adv, cluster, config, ep, eps, node, peer, pool, svc

from bgpd.attributes import EXCERPT_CHARS, excerpt
from bgpd.decision import (
    ANNOTATION_COMMUNITIES,
    ANNOTATION_LOCAL_PREF,
    ANNOTATION_MED,
    Decider,
    decide,
)
from bgpd.explain import decision_json, explain_table
from bgpd.model import ClusterSnapshot, NodeName

MB = 1 << 20
SERVICES = 20
CONFIG = config(
    pools=[pool("v4", "198.51.100.0/24")],
    peers=[peer("tor-a", "172.31.250.1")],
    advertisements=[adv()],
)
N1 = node("n1")

#: One megabyte each, in every shape of error the annotations can make.
HUGE = [
    pytest.param({ANNOTATION_COMMUNITIES: "x" * MB}, id="one-bad-community"),
    pytest.param({ANNOTATION_COMMUNITIES: "," + "x" * MB}, id="empty-entry"),
    pytest.param({ANNOTATION_COMMUNITIES: "65000:" + "9" * MB}, id="huge-number"),
    pytest.param({ANNOTATION_COMMUNITIES: "large:" + "1:" * (MB // 2)}, id="large-fields"),
    pytest.param({ANNOTATION_MED: "9" * MB}, id="med"),
    pytest.param({ANNOTATION_LOCAL_PREF: "\n" * MB}, id="local-pref-control"),
]


def huge_cluster(annotations: dict[str, str]) -> ClusterSnapshot:
    keys = [f"default/web{i}" for i in range(SERVICES)]
    return cluster(
        [svc(k, f"198.51.100.{i + 1}", annotations=annotations) for i, k in enumerate(keys)],
        [eps(k, ep("n1")) for k in keys],
        [N1],
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("65000:1", "'65000:1'", id="short-as-is"),
        pytest.param("a" * EXCERPT_CHARS, repr("a" * EXCERPT_CHARS), id="at-limit"),
        pytest.param(
            "a" * 100, f"{'a' * EXCERPT_CHARS!r}... (100 characters)", id="cut-with-length"
        ),
    ],
)
def test_excerpt(text: str, shown: str) -> None:
    assert excerpt(text) == shown


@pytest.mark.parametrize("annotations", HUGE)
def test_skips_of_huge_annotations_are_bounded_and_keep_no_copy(
    annotations: dict[str, str],
) -> None:
    snapshot = huge_cluster(annotations)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        decision = decide(CONFIG, snapshot, NodeName("n1"))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(decision.skipped) == SERVICES
    assert all(len(s.detail) < 600 for s in decision.skipped), decision.skipped[0].detail
    # 20 copies would be 20 MB; what stays is the decision itself.
    assert kept < 1 * MB, kept
    doc = json.dumps(decision_json(decision))
    assert len(doc) < 64 * 1024
    assert len(explain_table([decision], None)) < 64 * 1024


@pytest.mark.parametrize("annotations", HUGE)
def test_notices_of_kept_attributes_are_bounded(annotations: dict[str, str]) -> None:
    """A Service that was valid and then got a huge bad value keeps its attributes
    (invalidAnnotationKept): the notice is bounded too."""
    decider = Decider()
    decider.decide(CONFIG, huge_cluster({}), NodeName("n1"))
    decision = decider.decide(CONFIG, huge_cluster(annotations), NodeName("n1"))
    assert len(decision.notices) == SERVICES
    assert all(len(n.detail) < 600 for n in decision.notices), decision.notices[0].detail
    assert len(json.dumps(decision_json(decision))) < 64 * 1024
