"""Flap damping for one BGP session: when is a session flapping, and how long to hold it
down. Pure: no I/O, no clock, no randomness of its own (the caller passes the time and a
random number in [0, 1)), so it is tested with tables and properties.

Why: two speakers that open their sessions from one source address to one router
(a systemd unit and a pod on one host, or a copied configuration) take turns. With
graceful restart negotiated, the router treats each new OPEN from an address whose
session is Established as that peer restarting (RFC 4724 section 4.1): it drops the old
session and keeps the new one; the other speaker's ExaBGP reconnects at once (its own
back-off restarts from zero after every Established session), and the two replace each
other for as long as both run. Without graceful restart the router refuses the newcomer
(RFC 4271 6.8: a collision with an Established session closes the new connection; FRR
sends Cease/Connection Collision Resolution, BIRD closes it) and only the newcomer's
ExaBGP retries, on its own growing back-off. Measured in the lab (a second speaker in
node1's namespace, tests/e2e/test_lab_duplicate_speaker.py), hazards to keep in mind:

* BIRD 2 with graceful restart: 539 Established sessions from node1's address in 30 s
  (~20 a second, each one an End-of-RIB on both speakers); FRR 8.4: 12 in 27 s. Without
  graceful restart: none (FRR: Cease 6/7 to the newcomer; BIRD closes it).
* The other nodes' sessions and routes never moved.
* ExaBGP 5.0.15 resets its connect back-off (0, 1, 2, 3, ... 60 s) whenever a session
  reaches Established and on ``teardown``, and has no command that keeps one neighbour
  from reconnecting: holding a session down needs the neighbour out of ExaBGP's
  configuration (or ``passive``) for the interval, which this module computes.
* A second speaker that listens (SpeakerConfig ``listen: true``) on the same address
  cannot start at all: its ExaBGP exits with return code 1 six times in 14 s (the
  first speaker's ExaBGP listens there) and the supervisor gives up (exabgp.crash_loop).

The rule: a session that went down ``downs`` times within ``window`` seconds is
flapping; it is then held down for ``first`` seconds, each further hold-down of the same
episode twice as long up to ``cap``, every one shortened by up to ``jitter`` of itself
at random so two speakers holding down in step do not come back in step. Downs while
held down are not counted (holding down is what causes them), nor are the downs the
speaker causes itself when a peer's BFD session goes down (the driver core does not pass
them in: bgpd.exabgp.core ``_own_teardown``). An episode ends after
``quiet`` seconds without a down: the next hold-down starts from ``first`` again.

What it must not do: decide anything but the interval; the driver core logs the
warning (``peer.flapping``) and says which peers are held and until when
(``DriverCore.held_down``, ``hold_down_ends``); the speaker acts on it
(bgpd.speaker.app ``_hold_downs``): it renders a held peer ``passive`` (ExaBGP opens no
connection for it; with ``listen`` off the session waits) and reloads ExaBGP in place,
which resets that session alone (``passive`` is not part of the session key, so ExaBGP
keeps its routes and re-sends them), and renders it back when the hold-down ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FlapPolicy:
    """The flap rule's constants (see the module docstring)."""

    #: Downs within ``window`` seconds that make a session flapping.
    downs: int = 5
    window: float = 60.0
    #: The first hold-down of an episode, the growth factor and the longest.
    first: float = 5.0
    factor: float = 2.0
    cap: float = 300.0
    #: Each hold-down is shortened by up to this fraction of itself (0 <= jitter < 1).
    jitter: float = 0.5
    #: Seconds without a down that end an episode.
    quiet: float = 600.0


@dataclass(frozen=True, slots=True)
class FlapState:
    """One session's flap history, as the rule needs it."""

    #: When the session went down lately (within the policy's window), oldest first.
    downs: tuple[float, ...] = ()
    #: Hold-downs so far in this episode.
    level: int = 0
    #: The current hold-down ends then (None: not held down).
    held_until: float | None = None
    #: The last down (the episode ends ``quiet`` seconds after it).
    last_down: float | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a down means: the new state, and the hold-down to start now (seconds) or None."""

    state: FlapState
    hold_down: float | None


def hold_down_interval(policy: FlapPolicy, level: int, rand: float) -> float:
    """The ``level``-th hold-down of an episode (0 is the first): exponential, capped,
    shortened by ``jitter * rand`` of itself."""
    ceiling = min(policy.cap, policy.first * policy.factor ** min(level, 64))
    return ceiling * (1.0 - policy.jitter * rand)


def held(state: FlapState, now: float) -> bool:
    """The session is being held down at ``now``."""
    return state.held_until is not None and now < state.held_until


def on_down(policy: FlapPolicy, state: FlapState, at: float, rand: float) -> Verdict:
    """The session went down at ``at``; ``rand`` is a random number in [0, 1) for the
    jitter. Returns the next state and, when this down makes the session flapping, the
    hold-down to start."""
    if held(state, at):
        return Verdict(state, None)
    level = state.level
    if state.last_down is not None and at - state.last_down >= policy.quiet:
        level = 0
    downs = (*(t for t in state.downs if at - t < policy.window), at)
    if len(downs) < policy.downs:
        return Verdict(FlapState(downs, level, None, at), None)
    interval = hold_down_interval(policy, level, rand)
    # The downs that made this hold-down are spent: the next one needs as many again.
    return Verdict(FlapState((), level + 1, at + interval, at), interval)


def release_at(states: Iterable[FlapState], now: float) -> float | None:
    """When the next of these hold-downs ends (None: none is held at ``now``): the
    speaker re-renders ExaBGP's configuration then, to let that session connect again."""
    ends = [s.held_until for s in states if s.held_until is not None and held(s, now)]
    return min(ends, default=None)
