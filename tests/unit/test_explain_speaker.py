"""A live speaker serves its last decision as explain's JSON; reading it back gives the
same Decision, so `explain --from-speaker` renders exactly what the offline path would."""

from __future__ import annotations

import ipaddress
import json

import pytest

from bgpd.explain import decision_from_json, decision_json, explain_table
from bgpd.model import (
    Decision,
    NodeName,
    PeerName,
    Route,
    RouteAttributes,
    ServiceKey,
    Skip,
    SkipReason,
)

WEB, API = ServiceKey("default/web"), ServiceKey("default/api")
R1, R2 = PeerName("router-1"), PeerName("router-2")
ATTRS = RouteAttributes(communities=("65000:1",), large_communities=("1:2:3",), local_pref=50)


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(Decision(node=NodeName("n1")), id="empty"),
        pytest.param(
            Decision(
                node=NodeName("n1"),
                routes=(
                    # One prefix carrying two Services (shared IP) stays one Route.
                    Route(R1, ipaddress.ip_network("10.99.100.1/32"), ATTRS, (API, WEB)),
                    Route(
                        R2, ipaddress.ip_network("10.99.100.1/32"), RouteAttributes(), (API, WEB)
                    ),
                    Route(
                        R1, ipaddress.ip_network("fd00:99::/120"), RouteAttributes(med=7), (WEB,)
                    ),
                ),
                skipped=(
                    Skip(ServiceKey("a/b"), SkipReason.NO_LOCAL_ENDPOINTS),
                    Skip(
                        ServiceKey("a/c"),
                        SkipReason.NO_PEER_OF_FAMILY,
                        ipaddress.ip_address("fd00:99::5"),
                        "no IPv6 peer selected",
                    ),
                ),
            ),
            id="routes-shared-ip-v6-skips",
        ),
    ],
)
def test_round_trip_through_json_text(decision: Decision) -> None:
    text = json.dumps(decision_json(decision))
    back = decision_from_json(json.loads(text))
    assert back == decision
    assert explain_table([back]) == explain_table([decision])


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param({"routes": [], "skipped": []}, id="no-node"),
        pytest.param({"node": "n", "routes": [{"peer": "p"}], "skipped": []}, id="route-fields"),
        pytest.param(
            {"node": "n", "routes": [], "skipped": [{"service": "a/b", "reason": "nope"}]},
            id="unknown-reason",
        ),
        pytest.param({"node": "n", "routes": None, "skipped": []}, id="not-a-list"),
    ],
)
def test_malformed_documents_are_value_errors(doc: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message names what was wrong
        decision_from_json(doc)
