"""bfdd's JSON into BfdPeerState (bgpd.bfd.readback), as tables and one sequence."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from bgpd.bfd.readback import AnswerError, next_states
from bgpd.bfd.render import BfdPeerConfig
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.model import PeerName

A = PeerName("a")
CONFIG = BfdPeerConfig(
    peer=A,
    address=ipaddress.ip_address("192.0.2.1"),
    local_address=ipaddress.ip_address("192.0.2.10"),
    profile="p",
)


def row(status: str, **fields: Any) -> dict[str, Any]:
    """One session as FRR 8.4's ``show bfd peers json`` prints it (fields trimmed)."""
    out: dict[str, Any] = {
        "multihop": False,
        "peer": "192.0.2.1",
        "local": "192.0.2.10",
        "vrf": "default",
        "status": status,
        "diagnostic": "ok",
        "receive-interval": 300,
        "transmit-interval": 300,
        "remote-transmit-interval": 300,
        "remote-detect-multiplier": 3,
    }
    out.update(fields)
    return out


def answer(*rows: dict[str, Any]) -> str:
    return json.dumps(list(rows))


def state(**fields: Any) -> BfdPeerState:
    return BfdPeerState(
        peer=A, address=CONFIG.address, local_address=CONFIG.local_address, **fields
    )


@pytest.mark.parametrize(
    ("text", "previous", "expected"),
    [
        pytest.param(None, None, state(), id="no-answer-unknown"),
        pytest.param(answer(), None, state(), id="not-listed-unknown"),
        pytest.param(
            answer(row("up", uptime=5)),
            None,
            state(state=BfdState.UP, since=95.0, detect_ms=900),
            id="up-detect-time",
        ),
        pytest.param(
            answer(row("up", uptime=5, **{"remote-transmit-interval": 500})),
            None,
            state(state=BfdState.UP, since=95.0, detect_ms=1500),
            id="detect-uses-the-slower-side",
        ),
        pytest.param(
            answer(row("down", downtime=1, diagnostic="control detection time expired")),
            state(state=BfdState.UP, since=50.0, detect_ms=900),
            state(
                state=BfdState.DOWN,
                since=99.0,
                flaps=1,
                diagnostic="control detection time expired",
            ),
            id="up-to-down-one-flap",
        ),
        pytest.param(
            answer(row("up", uptime=10)),
            state(state=BfdState.UP, since=60.0, flaps=2, detect_ms=900),
            state(state=BfdState.UP, since=90.0, flaps=3, detect_ms=900),
            id="uptime-restarted-between-polls-missed-flap",
        ),
        pytest.param(
            answer(row("up", uptime=11)),
            state(state=BfdState.UP, since=90.0, detect_ms=900),
            state(state=BfdState.UP, since=90.0, detect_ms=900),
            id="uptime-rounding-keeps-since",
        ),
        pytest.param(
            answer(row("shutdown")),
            state(state=BfdState.UP, since=60.0),
            state(state=BfdState.ADMIN_DOWN, since=100.0, flaps=1),
            id="admin-down",
        ),
        pytest.param(
            answer(row("init", downtime=3)),
            state(state=BfdState.DOWN, since=20.0),
            state(state=BfdState.INIT, since=97.0),
            id="down-to-init-no-flap",
        ),
        pytest.param(
            answer(row("up", uptime=5, multihop=True)),
            None,
            state(),
            id="multihop-session-is-another-key",
        ),
        pytest.param(
            answer({"peer": "192.0.2.1", "status": "up"}, row("down", downtime=2)),
            None,
            state(state=BfdState.DOWN, since=98.0),
            id="session-without-local-address-ignored",
        ),
    ],
)
def test_next_states(
    text: str | None, previous: BfdPeerState | None, expected: BfdPeerState
) -> None:
    before = {} if previous is None else {A: previous}
    assert next_states([CONFIG], text, before, 100.0) == {A: expected}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("% [BFD] Unknown command", id="not-json"),
        pytest.param("{}", id="not-a-list"),
        pytest.param("[1]", id="not-objects"),
    ],
)
def test_bad_answers_are_refused(text: str) -> None:
    with pytest.raises(AnswerError):
        next_states([CONFIG], text, {}, 0.0)


def test_a_session_through_a_failure_and_back() -> None:
    """Polls every 0.25 s: Up, the peer dies, Down, it comes back."""
    polls = [
        (10.0, answer(row("down", downtime=10))),
        (10.25, answer(row("init", downtime=0))),
        (10.5, answer(row("up", uptime=0))),
        (12.5, answer(row("up", uptime=2))),
        (13.5, answer(row("down", downtime=0, diagnostic="control detection time expired"))),
        (14.0, answer(row("up", uptime=0))),
    ]
    states: dict[PeerName, BfdPeerState] = {}
    seen = []
    for now, text in polls:
        states = next_states([CONFIG], text, states, now)
        s = states[A]
        seen.append((s.state, s.since, s.flaps))
    assert seen == [
        (BfdState.DOWN, 0.0, 0),
        (BfdState.INIT, 10.25, 0),
        (BfdState.UP, 10.5, 0),
        (BfdState.UP, 10.5, 0),
        (BfdState.DOWN, 13.5, 1),
        (BfdState.UP, 14.0, 1),
    ]
