"""bfdd's answer to ``show bfd peers json`` into BfdPeerState per peer. Pure.

``next_states(peers, answer, previous, now)`` is the whole rule: the runtime polls bfdd
and hands each answer (or None: bfdd did not answer) here with the states it produced
last time. What it derives:

* ``state``: bfdd's ``status`` (``up``, ``down``, ``init``, ``shutdown`` = AdminDown);
  a configured session bfdd does not list yet, or no answer at all, is UNKNOWN.
* ``since``: bfdd reports whole seconds (``uptime`` while up, ``downtime`` otherwise);
  ``since`` is set from them when the state changes and kept while it does not, so it
  does not jitter by a second from poll to poll.
* ``flaps``: transitions out of UP seen between two polls, plus the ones that happened
  between two polls (Up, then Down, then Up again before the next poll: bfdd's uptime
  then restarted, so the session's ``since`` moved forward by more than the rounding).
* ``detect_ms`` while UP: the remote detect multiplier x the agreed interval, the larger
  of our Required Min RX and the remote's Desired Min TX (RFC 5880 section 6.8.4).
* ``diagnostic``: bfdd's local diagnostic, "" for ``ok``.

No I/O, no clock: tested with tables (tests/unit/test_bfd_readback.py).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bgpd.bfd.render import BfdPeerConfig
from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.model import IPAddress, PeerName

_STATES = {
    "up": BfdState.UP,
    "down": BfdState.DOWN,
    "init": BfdState.INIT,
    "shutdown": BfdState.ADMIN_DOWN,
}
#: bfdd's uptime is in whole seconds, read at poll time: a ``since`` that moves forward by
#: more than this while the session stayed Up means it went down and up between polls.
SINCE_SLACK = 2.0


class AnswerError(ValueError):
    """bfdd's answer is not the JSON list of sessions it should be."""


def parse_answer(
    answer: str,
) -> dict[tuple[IPAddress, IPAddress, bool], Mapping[str, Any]]:
    """The sessions in bfdd's JSON, by (peer, local address, multihop)."""
    try:
        rows = json.loads(answer)
    except ValueError as exc:
        raise AnswerError(f"bfdd's answer is not JSON: {exc}") from exc
    if not isinstance(rows, list):
        raise AnswerError("bfdd's answer is not a list of sessions")
    out: dict[tuple[IPAddress, IPAddress, bool], Mapping[str, Any]] = {}
    for row in rows:
        if not isinstance(row, dict):
            raise AnswerError("bfdd's answer holds a session that is not an object")
        try:
            peer = ipaddress.ip_address(row["peer"])
            local = ipaddress.ip_address(row["local"])
        except (KeyError, ValueError):
            # A session without a local address is none of ours (we always set one).
            continue
        out[(peer, local, bool(row.get("multihop")))] = row
    return out


def _int(row: Mapping[str, Any], key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def session_state(
    config: BfdPeerConfig,
    row: Mapping[str, Any] | None,
    previous: BfdPeerState | None,
    now: float,
) -> BfdPeerState:
    """One peer's new state from its row in bfdd's answer (None: not listed, or no
    answer) and its previous state."""
    before = previous or BfdPeerState(
        peer=config.peer, address=config.address, local_address=config.local_address
    )
    before = replace(before, address=config.address, local_address=config.local_address)
    if row is None:
        state = BfdState.UNKNOWN
        age = None
    else:
        state = _STATES.get(str(row.get("status")), BfdState.UNKNOWN)
        age = _int(row, "uptime" if state is BfdState.UP else "downtime")
    since = before.since
    flaps = before.flaps
    measured = None if age is None else now - age
    if state is not before.state:
        since = measured if measured is not None else now
        if before.state is BfdState.UP:
            flaps += 1
    elif (
        state is BfdState.UP
        and measured is not None
        and since is not None
        and measured > since + SINCE_SLACK
    ):
        # Up at both polls, but its uptime started again in between: a missed flap.
        flaps += 1
        since = measured
    elif since is None:
        since = measured
    detect_ms = None
    diagnostic = ""
    if row is not None:
        if state is BfdState.UP:
            multiplier = _int(row, "remote-detect-multiplier")
            ours = _int(row, "receive-interval")
            theirs = _int(row, "remote-transmit-interval")
            if multiplier is not None and ours is not None and theirs is not None:
                detect_ms = multiplier * max(ours, theirs)
        text = str(row.get("diagnostic", "ok"))
        diagnostic = "" if text == "ok" else text
    return BfdPeerState(
        peer=config.peer,
        address=config.address,
        local_address=config.local_address,
        state=state,
        since=since,
        flaps=flaps,
        detect_ms=detect_ms,
        diagnostic=diagnostic,
    )


def next_states(
    peers: Sequence[BfdPeerConfig],
    answer: str | None,
    previous: Mapping[PeerName, BfdPeerState],
    now: float,
) -> dict[PeerName, BfdPeerState]:
    """Every configured peer's state after one poll (``answer`` None: bfdd did not
    answer). Raises AnswerError when the answer is not bfdd's JSON list."""
    rows = {} if answer is None else parse_answer(answer)
    return {p.peer: session_state(p, rows.get(p.key), previous.get(p.peer), now) for p in peers}


def status_rows(
    peers: Sequence[BfdPeerConfig], states: Mapping[PeerName, BfdPeerState]
) -> list[dict[str, object]]:
    """The BFD sessions for /status (``bfd.peers``), one row per configured peer, in name
    order; a peer not read back yet is ``unknown``."""
    rows: list[dict[str, object]] = []
    for p in sorted(peers, key=lambda p: p.peer):
        s = states.get(p.peer)
        rows.append(
            {
                "name": p.peer,
                "address": str(p.address),
                "local_address": str(p.local_address),
                "profile": p.profile,
                "state": str(BfdState.UNKNOWN if s is None else s.state),
                "since": None if s is None else s.since,
                "flaps": 0 if s is None else s.flaps,
                "detect_ms": None if s is None else s.detect_ms,
                "diagnostic": "" if s is None else s.diagnostic,
            }
        )
    return rows
