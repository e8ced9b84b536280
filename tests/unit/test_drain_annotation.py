"""The Node annotation that asks a node's speaker to drain (bgpd.speaker.drain.drain_requested)."""

from __future__ import annotations

import pytest

from bgpd.model import Node, NodeName
from bgpd.speaker.drain import ANNOTATION_DRAIN, drain_requested


def node(**annotations: str) -> Node:
    return Node(name=NodeName("node1"), annotations=annotations)


@pytest.mark.parametrize(
    ("n", "want"),
    [
        pytest.param(None, False, id="node-unknown"),
        pytest.param(node(), False, id="no-annotation"),
        pytest.param(node(**{ANNOTATION_DRAIN: "true"}), True, id="true"),
        pytest.param(node(**{ANNOTATION_DRAIN: " True "}), True, id="true-any-case"),
        pytest.param(node(**{ANNOTATION_DRAIN: "false"}), False, id="false"),
        pytest.param(node(**{ANNOTATION_DRAIN: "yes"}), None, id="not-understood"),
        pytest.param(node(**{ANNOTATION_DRAIN: ""}), None, id="empty"),
        pytest.param(node(**{"kube-bgpd.io/drained": "true"}), False, id="other-annotation"),
    ],
)
def test_drain_requested(n: Node | None, want: bool | None) -> None:
    assert drain_requested(n) is want
