"""ExaBGP started before the first decision (bgpd.speaker.app starts it once the peers and
the Node are known, while the Services are still listed): the driver core must not act
on a desired set it was never given.

Held here: before the first apply, whatever the sessions, helper connections and ExaBGP
restarts do, nothing but idle probes is sent (no End-of-RIB: a graceful-restart router
would flush the stale routes it keeps for this node; no withdrawal), nothing is accepted
or advertised, and nothing counts as converged in the modes that want the decision's
routes; a stop before the first decision is not held up. After it, a graceful-restart
peer's End-of-RIB follows all of its routes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_driver_core import GR, IBGP, PLAIN, answer_all, core, net, state_doc

from bgpd.exabgp.core import DriverCore, DriverMode
from bgpd.exabgp.plan import CommandKind
from bgpd.model import SessionState

ROUTES = {GR: {net("10.0.0.1/32"): PLAIN, net("10.0.0.2/32"): PLAIN}, IBGP: {}}


def test_no_end_of_rib_before_the_first_decision() -> None:
    c = core()
    c.on_event(state_doc(GR, SessionState.UP), 1.0)
    assert answer_all(c) == []
    assert not c.converged
    c.apply(ROUTES)
    sent = answer_all(c)
    assert [cmd.kind for cmd in sent] == [CommandKind.ANNOUNCE, CommandKind.EOR]
    assert sent[-1].peer == GR
    assert c.converged


def test_a_first_decision_with_no_route_still_ends_the_rib() -> None:
    """A node that announces nothing sends its End-of-RIB once it knows that."""
    c = core()
    c.on_event(state_doc(GR, SessionState.UP), 1.0)
    assert answer_all(c) == []
    c.apply_changes({}, {})
    assert [cmd.kind for cmd in answer_all(c)] == [CommandKind.EOR]
    assert c.converged


def test_a_stop_before_the_first_decision_is_not_held_up() -> None:
    """onSigterm withdraw/retain: nothing to withdraw, converged at once; a drain (which
    wants the decision's routes, tagged) waits for the decision."""
    for mode, converged in (
        (DriverMode.WITHDRAWN, True),
        (DriverMode.RETAINED, True),
        (DriverMode.DRAINING, False),
        (DriverMode.NORMAL, False),
    ):
        c = core()
        c.on_event(state_doc(GR, SessionState.UP), 1.0)
        c.set_mode(mode)
        assert answer_all(c) == []
        assert c.converged is converged, mode


STEPS = st.lists(
    st.sampled_from(["up", "down", "reconnect", "restart", "drain", "undrain", "tick"]),
    max_size=30,
)


def step(c: DriverCore, what: str, at: float) -> None:
    if what in ("up", "down"):
        state = SessionState.UP if what == "up" else SessionState.DOWN
        c.on_event(state_doc(GR, state), at)
    elif what == "reconnect":
        c.disconnect()
        c.connect()
    elif what == "restart":
        c.reset(at)
        c.connect()
    elif what in ("drain", "undrain"):
        c.set_mode(DriverMode.DRAINING if what == "drain" else DriverMode.NORMAL)


@settings(max_examples=60, deadline=None)
@given(before=STEPS, after=STEPS)
def test_nothing_but_probes_before_the_first_decision(before: list[str], after: list[str]) -> None:
    c = core(probe_interval=1.0)
    for i, what in enumerate(before):
        step(c, what, float(i))
        sent = answer_all(c, now=float(i))
        assert {cmd.kind for cmd in sent} <= {CommandKind.PROBE}, what
        assert c.accepted() == {}
        assert c.advertised() == {}
        assert not c.converged
    c.set_mode(DriverMode.NORMAL)
    c.apply(ROUTES)
    t = float(len(before))
    for i, what in enumerate(["tick", *after]):
        step(c, what, t + i)
        sent = [cmd for cmd in answer_all(c, now=t + i) if cmd.kind is not CommandKind.PROBE]
        # A graceful-restart peer's End-of-RIB follows its routes, never precedes them.
        kinds = [cmd.kind for cmd in sent if cmd.peer == GR]
        if CommandKind.EOR in kinds:
            # (Draining, the routes are held with other attributes.)
            assert c.accepted().get(GR, {}).keys() == ROUTES[GR].keys()
            assert CommandKind.ANNOUNCE not in kinds[kinds.index(CommandKind.EOR) :]
    assert c.accepted().get(GR, {}).keys() == ROUTES[GR].keys()
