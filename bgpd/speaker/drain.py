"""Drain (RFC 8326), the one owner of its rules: a pure state machine.

Four inputs ask for or end a drain: the operator (`kube-bgpd drain`, i.e. POST /drain on
the control socket, and SpeakerConfig onSigterm drain; `kube-bgpd drain --cancel`, DELETE
/drain, takes the operator's request back), the Node's ``kube-bgpd.io/drain`` annotation, the node's
data-plane check (SpeakerConfig dataPlaneCheck: kube-proxy's health answer, after its
hysteresis in bgpd.speaker.dataplane), and the clock (the window ends). Each transition
takes the current ``DrainState`` and the time and returns a ``Transition``: the new
state, the driver mode to set (None: unchanged),
the log events to write and when to be ticked again. No I/O, no clock, no asyncio task:
the speaker (bgpd.speaker.app) turns the outputs into ``driver.set_mode`` calls, log
lines and one timer.

The rules:

* a drain announces every route with GRACEFUL_SHUTDOWN (DriverMode.DRAINING) for
  SpeakerConfig.drainWindow seconds, then withdraws them (WITHDRAWN), never before;
* an operator's drain lasts until the operator cancels it or the process stops: no
  annotation undoes it (one that comes on top of an annotation's drain takes it over,
  keeping its window);
* a cancel takes back only the operator's request, and not once the speaker is stopping
  (the stop owns the mode then): if the annotation or a failing data-plane check still
  asks for a drain, the drain is handed over to it (window and mode kept); otherwise every
  route is announced again with its normal attributes (DriverMode.NORMAL), whether the
  window had ended or not;
* the annotation "true" starts a drain; "false" or its removal ends only a drain the
  annotation started (announcing normally again);
* a failing data-plane check starts a drain; passing again ends only a drain the data
  plane owns. The annotation and the data plane are levels the state remembers: when
  one lets go while the other still asks, the drain is handed over (its window and mode
  kept), so neither can bring back a node the other withdrew. A speaker started with
  the check begins withdrawn (owned by the data plane, no window: nothing was
  announced to drain) until the check first passes;
* a value that is neither "true" nor "false" changes nothing (a typo must neither
  withdraw a node nor bring one back); it is reported once per value;
* once the speaker is stopping, the annotation is no longer followed (the stop owns the
  driver's mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from bgpd.attributes import excerpt
from bgpd.exabgp.driver import DriverMode
from bgpd.model import Node

#: On a Node: "true" asks that node's speaker to drain (RFC 8326 for drainWindow, then
#: withdraw), like `kube-bgpd drain`; "false" or removing it ends a drain it started.
ANNOTATION_DRAIN = "kube-bgpd.io/drain"


def annotation_value(node: Node | None) -> str | None:
    """The Node's ``kube-bgpd.io/drain`` value as written (None: absent or no Node)."""
    return None if node is None else node.annotations.get(ANNOTATION_DRAIN)


def drain_requested(node: Node | None) -> bool | None:
    """What the Node's ``kube-bgpd.io/drain`` annotation asks: True (drain), False (no
    annotation, or "false"), or None for a value that is neither, which the caller reports
    without changing what it does (a typo must not withdraw a node, nor bring one back)."""
    return parse_annotation(annotation_value(node))


def parse_annotation(value: str | None) -> bool | None:
    """The annotation's value (None: absent) -> True, False, or None (not understood)."""
    if value is None:
        return False
    return {"true": True, "false": False}.get(value.strip().lower())


class DrainSource(StrEnum):
    """Who started the drain: only an annotation's drain ends with its annotation."""

    REQUEST = "request"
    ANNOTATION = "annotation"
    DATA_PLANE = "dataPlane"


@dataclass(frozen=True, slots=True)
class DrainEvent:
    """A log event for the speaker to write (stable name, key/value context)."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DrainState:
    """Where the drain is. `started` is in the clock the caller passes (wall clock in
    the speaker, for /status)."""

    window: float
    mode: DriverMode = DriverMode.NORMAL
    source: DrainSource | None = None
    started: float | None = None
    stopping: bool = False
    #: The last annotation value that was not understood (reported once).
    bad_annotation: str | None = None
    #: The annotation last asked for a drain ("true").
    annotated: bool = False
    #: The node's data-plane check passes (always, without SpeakerConfig dataPlaneCheck).
    data_plane_ready: bool = True

    @property
    def data_plane_withdrawn(self) -> bool:
        """The node's routes are withdrawn while its data-plane check fails: decide()
        then reports every Service as `dataPlaneNotReady` (before the window ends the
        routes are still announced, with GRACEFUL_SHUTDOWN)."""
        return not self.data_plane_ready and self.mode is DriverMode.WITHDRAWN

    @property
    def draining(self) -> bool:
        """A drain was asked for (in its window, or its routes already withdrawn)."""
        return self.source is not None

    @property
    def withdraw_at(self) -> float | None:
        return None if self.started is None else self.started + self.window

    def status(self) -> dict[str, Any]:
        """The "drain" part of /status and the answer to POST /drain."""
        return {
            "mode": str(self.mode),
            "started": self.started,
            "source": None if self.source is None else str(self.source),
            "window": self.window,
            "withdraw_at": self.withdraw_at,
        }


@dataclass(frozen=True, slots=True)
class Transition:
    state: DrainState
    #: The driver mode to set now (None: leave it).
    mode: DriverMode | None = None
    events: tuple[DrainEvent, ...] = ()
    #: When to call tick() next (None: no timer needed).
    wake_at: float | None = None


def _start(state: DrainState, source: DrainSource, now: float) -> Transition:
    started = replace(state, mode=DriverMode.DRAINING, source=source, started=now)
    return Transition(
        started,
        mode=DriverMode.DRAINING,
        events=(DrainEvent("speaker.draining", {"window": state.window, "source": str(source)}),),
        wake_at=started.withdraw_at,
    )


def _settle(state: DrainState, now: float) -> Transition:
    """Start, hand over or end the drain as the remembered levels ask (an operator's
    drain is never ended here)."""
    if state.source is DrainSource.REQUEST:
        return Transition(state)
    wanted = (
        DrainSource.ANNOTATION
        if state.annotated
        else DrainSource.DATA_PLANE
        if not state.data_plane_ready
        else None
    )
    if wanted is state.source:
        return Transition(state)
    if wanted is None:
        ended = replace(state, mode=DriverMode.NORMAL, source=None, started=None)
        return Transition(ended, mode=DriverMode.NORMAL, events=(DrainEvent("speaker.undrained"),))
    if state.source is None:
        return _start(state, wanted, now)
    event = DrainEvent("speaker.draining", {"window": state.window, "source": str(wanted)})
    return Transition(replace(state, source=wanted), events=(event,))


def initial(window: float, *, data_plane_check: bool) -> Transition:
    """The state a speaker starts in: with a data-plane check, withdrawn until the check
    first passes (an unreachable check endpoint is "not ready", and a node that announced
    nothing yet has nothing to drain)."""
    state = DrainState(window=window)
    if not data_plane_check:
        return Transition(state)
    held = replace(
        state, mode=DriverMode.WITHDRAWN, source=DrainSource.DATA_PLANE, data_plane_ready=False
    )
    return Transition(held, mode=DriverMode.WITHDRAWN)


def data_plane(state: DrainState, ready: bool, now: float) -> Transition:
    """The node's data-plane check changed its verdict (after its hysteresis)."""
    if ready is state.data_plane_ready:
        return Transition(state)
    state = replace(state, data_plane_ready=ready)
    if state.stopping:
        return Transition(state)
    return _settle(state, now)


def request(state: DrainState, now: float) -> Transition:
    """The operator asks for a drain (idempotent)."""
    if state.source is DrainSource.REQUEST:
        return Transition(state)
    if state.source is not None:
        # An operator's drain outlasts the others': removing them must not undo this.
        taken = replace(state, source=DrainSource.REQUEST)
        event = DrainEvent("speaker.draining", {"window": state.window, "source": "request"})
        return Transition(taken, events=(event,))
    return _start(state, DrainSource.REQUEST, now)


def cancel(state: DrainState, now: float) -> Transition:
    """The operator takes the drain request back (`kube-bgpd drain --cancel`). Changes
    nothing unless the operator owns the drain and the speaker is not stopping; then the
    annotation and the data-plane check decide as if the request had never come."""
    if state.source is not DrainSource.REQUEST or state.stopping:
        return Transition(state)
    cancelled = DrainEvent("speaker.drain_cancelled", {"mode": str(state.mode)})
    if state.annotated or not state.data_plane_ready:
        # Hand over to the level that still asks; its window and mode are kept.
        wanted = DrainSource.ANNOTATION if state.annotated else DrainSource.DATA_PLANE
        event = DrainEvent("speaker.draining", {"window": state.window, "source": str(wanted)})
        return Transition(replace(state, source=wanted), events=(cancelled, event))
    ended = replace(state, mode=DriverMode.NORMAL, source=None, started=None)
    return Transition(
        ended, mode=DriverMode.NORMAL, events=(cancelled, DrainEvent("speaker.undrained"))
    )


def annotate(state: DrainState, value: str | None, now: float) -> Transition:
    """The Node's drain annotation is `value` (None: absent, or no Node)."""
    if state.stopping:
        return Transition(state)
    wanted = parse_annotation(value)
    if wanted is None:
        if value == state.bad_annotation:
            return Transition(state)
        event = DrainEvent(
            "speaker.drain_annotation_invalid",
            {
                "annotation": ANNOTATION_DRAIN,
                "value": excerpt(value or ""),
                "expected": "true or false",
                "kept": "draining" if state.draining else "announcing",
            },
        )
        return Transition(replace(state, bad_annotation=value), events=(event,))
    # Remembered even under an operator's drain, for the hand-over when it is cancelled.
    return _settle(replace(state, bad_annotation=None, annotated=wanted), now)


def tick(state: DrainState, now: float) -> Transition:
    """The clock: withdraw once the window has passed (else say when to look again)."""
    deadline = state.withdraw_at
    if state.mode is not DriverMode.DRAINING or deadline is None:
        return Transition(state)
    if now < deadline:
        return Transition(state, wake_at=deadline)
    withdrawn = replace(state, mode=DriverMode.WITHDRAWN)
    return Transition(withdrawn, mode=DriverMode.WITHDRAWN, events=(DrainEvent("speaker.drained"),))


def stop(state: DrainState) -> Transition:
    """The speaker is stopping: the annotation is no longer followed."""
    return Transition(replace(state, stopping=True))
