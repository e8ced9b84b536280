"""Reloading ExaBGP in place: the verdict for a changed rendering (bgpd.exabgp.reload),
the neighbour key checked against ExaBGP's own parser, and the driver core's reload
(DriverCore.reload): the ``reload`` command first and alone, a new or re-keyed
neighbour's routes re-sent, the other sessions' routes left alone, in a Hypothesis state
machine against a simulated ExaBGP that keys its adj-rib-out the way 5.0.15 does and
reloads from the newest file (which may be newer than the one a reload was sent for)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bgpd.exabgp.core import DriverCore
from bgpd.exabgp.plan import Command, CommandKind
from bgpd.exabgp.reload import ConfigAction, RestartReason, reconfiguration
from bgpd.exabgp.render import Neighbor, Rendering, render_config
from bgpd.model import (
    BGPPeer,
    IPAddress,
    IPNetwork,
    NodeName,
    PeerName,
    RouteAttributes,
)

HELPER = ("/usr/bin/python3", "-m", "bgpd.exabgp.helper")
A, B, C = PeerName("a"), PeerName("b"), PeerName("c")
PLAIN = RouteAttributes()
TAGGED = RouteAttributes(communities=("65000:1",))


def net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


def nb(
    name: str,
    peer: str,
    *,
    hold: int = 90,
    asn: int = 65001,
    local: str = "192.0.2.10",
    router_id: str = "192.0.2.10",
) -> Neighbor:
    return Neighbor(
        peer=BGPPeer(
            name=PeerName(name),
            my_asn=65000,
            peer_asn=asn,
            peer_address=ipaddress.ip_address(peer),
            hold_time=hold,
        ),
        local_address=ipaddress.ip_address(local),
        router_id=ipaddress.IPv4Address(router_id),
    )


def rendering(*neighbors: Neighbor, helper: tuple[str, ...] = HELPER) -> Rendering:
    return render_config(neighbors, helper_argv=helper)


NA = nb("a", "192.0.2.1")
NB = nb("b", "192.0.2.2")
NC = nb("c", "192.0.2.3")
LOCAL: list[IPAddress] = [ipaddress.ip_address("192.0.2.10")]


@pytest.mark.parametrize(
    ("before", "after", "kw", "action", "reason", "sets"),
    [
        pytest.param(
            rendering(NA, NB), rendering(NA, NB), {}, ConfigAction.NONE, None, {}, id="same"
        ),
        pytest.param(
            rendering(NA, NB),
            rendering(NA, NB, NC),
            {},
            ConfigAction.RELOAD,
            None,
            {"added": {C}, "kept": {A, B}},
            id="peer-added",
        ),
        pytest.param(
            rendering(NA, NB),
            rendering(NA),
            {},
            ConfigAction.RELOAD,
            None,
            {"removed": {B}, "kept": {A}},
            id="peer-removed",
        ),
        pytest.param(
            rendering(NA, NB),
            rendering(NA, nb("b", "192.0.2.2", hold=30)),
            {},
            ConfigAction.RELOAD,
            None,
            {"reset": {B}, "kept": {A}},
            id="hold-time-resets-only-that-session",
        ),
        pytest.param(
            rendering(NA, NB),
            rendering(NA, nb("b", "192.0.2.2", asn=65002)),
            {},
            ConfigAction.RELOAD,
            None,
            {"added": {B}, "kept": {A}},
            id="peer-asn-is-a-new-neighbour",
        ),
        pytest.param(
            rendering(NA, NB),
            rendering(
                nb("a", "192.0.2.1", router_id="192.0.2.99"),
                nb("b", "192.0.2.2", router_id="192.0.2.99"),
            ),
            {},
            ConfigAction.RELOAD,
            None,
            {"added": {A, B}},
            id="router-id-re-keys-every-session",
        ),
        pytest.param(
            rendering(NA),
            rendering(replace(NA, peer=replace(NA.peer, name=PeerName("renamed")))),
            {},
            ConfigAction.RESTART,
            RestartReason.PEER_RENAMED,
            {"added": {PeerName("renamed")}, "removed": {A}},
            id="renamed-same-session-restarts",
        ),
        pytest.param(
            rendering(NA),
            rendering(NA, helper=("/opt/python3", "-m", "bgpd.exabgp.helper")),
            {},
            ConfigAction.RESTART,
            RestartReason.PROCESS_CHANGED,
            {"kept": {A}},
            id="process-changed-restarts",
        ),
        pytest.param(
            rendering(NA),
            rendering(NA, NB),
            {
                "listen_before": LOCAL,
                "listen_after": [*LOCAL, ipaddress.ip_address("2001:db8::10")],
            },
            ConfigAction.RESTART,
            RestartReason.LISTEN_CHANGED,
            {"added": {B}, "kept": {A}},
            id="a-new-listen-address-restarts",
        ),
        pytest.param(
            rendering(NA, NB),
            rendering(NA),
            {
                "listen_before": [*LOCAL, ipaddress.ip_address("2001:db8::10")],
                "listen_after": LOCAL,
            },
            ConfigAction.RELOAD,
            None,
            {"removed": {B}, "kept": {A}},
            id="an-address-no-longer-listened-on-is-reloaded",
        ),
        pytest.param(
            rendering(NA),
            rendering(NA, NB),
            {"reload_available": False},
            ConfigAction.RESTART,
            RestartReason.RELOAD_UNAVAILABLE,
            {"added": {B}, "kept": {A}},
            id="reload-switched-off",
        ),
    ],
)
def test_reconfiguration(
    before: Rendering,
    after: Rendering,
    kw: dict[str, object],
    action: ConfigAction,
    reason: RestartReason | None,
    sets: dict[str, set[PeerName]],
) -> None:
    verdict = reconfiguration(before, after, **kw)  # type: ignore[arg-type]
    assert (verdict.action, verdict.reason) == (action, reason)
    for name in ("added", "removed", "reset", "kept"):
        assert getattr(verdict, name) == sets.get(name, set()), name
    assert verdict.forgotten == verdict.added | verdict.removed


#: Parses a configuration file with ExaBGP's own parser and prints its neighbour keys
#: (in a child: ExaBGP's environment and logger are process-wide).
KEYS_SCRIPT = """
import json, sys
from exabgp.environment import getenv
from exabgp.logger import log
log.init(getenv())
from exabgp.configuration.configuration import Configuration
conf = Configuration([sys.argv[1]])
if not conf.reload():
    sys.exit(str(conf.error))
print(json.dumps(sorted(conf.neighbors)))
"""


def exabgp_reads(script: str, path: Path) -> object:
    """What ``script`` prints (JSON) about the configuration at ``path``, in a child."""
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def test_session_key_is_exabgps_own_neighbour_name(tmp_path: Path) -> None:
    """Parsed by ExaBGP 5.0.15's configuration parser, each rendered neighbour is keyed
    by exactly the session_key the verdict compares."""
    neighbors = (NA, nb("b", "2001:db8::1", local="2001:db8::10", router_id="192.0.2.10"))
    path = tmp_path / "exabgp.conf"
    path.write_text(rendering(*neighbors).config)
    assert exabgp_reads(KEYS_SCRIPT, path) == sorted(n.session_key for n in neighbors)


def test_a_held_down_peer_is_reset_alone_going_passive_and_coming_back() -> None:
    """A peer held down (flapping: bgpd.exabgp.flap) is rendered ``passive``: its key
    stays, so the reload resets that session alone (ExaBGP keeps its routes and re-sends
    them when the session is up again), and the other sessions are kept, both ways."""
    plain = rendering(NA, NB, NC)
    held = render_config((NA, NB, NC), helper_argv=HELPER, held={A})
    assert "passive true;" in held.blocks[A]
    assert "passive" not in held.blocks[B] + held.blocks[C]
    for before, after in ((plain, held), (held, plain)):
        verdict = reconfiguration(before, after, listen_before=LOCAL, listen_after=LOCAL)
        assert verdict.action is ConfigAction.RELOAD
        assert (verdict.reset, verdict.kept) == ({A}, {B, C})
        assert verdict.forgotten == frozenset()


PASSIVE_SCRIPT = KEYS_SCRIPT.replace(
    "print(json.dumps(sorted(conf.neighbors)))",
    "print(json.dumps({k: n['passive'] for k, n in conf.neighbors.items()}))",
)


def test_exabgp_parses_a_held_down_peer_as_passive(tmp_path: Path) -> None:
    """ExaBGP 5.0.15 reads the held-down rendering: the same keys, that neighbour passive
    (it does not connect out), the others not."""
    path = tmp_path / "exabgp.conf"
    path.write_text(render_config((NA, NB), helper_argv=HELPER, held={A}).config)
    assert exabgp_reads(PASSIVE_SCRIPT, path) == {NA.session_key: True, NB.session_key: False}


# ---------------------------------------------------------------------- the core


def started(neighbors: tuple[Neighbor, ...]) -> DriverCore:
    c = DriverCore(node=NodeName("n1"), window=3, batch=2, reload_settle=0.1)
    c.configure(neighbors)
    c.reset(0.0)
    c.connect()
    return c


def converged(c: DriverCore) -> bool:
    """The core's flag, read through a call (an attribute assert would narrow its type)."""
    return c.converged


def test_reload_goes_first_alone_then_only_the_new_peer_is_sent_its_routes() -> None:
    c = started((NA,))
    routes = {A: {net("10.0.0.1/32"): PLAIN}, C: {net("10.0.0.1/32"): TAGGED}}
    c.apply(routes)
    sent = c.next_commands(0.0)
    assert [x.peer for x in sent] == [A]
    c.on_ack(True, 0.0)
    assert c.next_commands(0.0) == []
    assert c.converged
    v = reconfiguration(rendering(NA), rendering(NA, NC))
    c.reload((NA, NC), v.forgotten)
    assert not converged(c)
    first = c.next_commands(1.0)
    assert [x.kind for x in first] == [CommandKind.RELOAD]
    assert first[0].text == "reload"
    assert c.next_commands(1.0) == [], "nothing follows reload until its answer"
    c.on_ack(True, 1.0)
    assert c.next_commands(1.0) == [], "held for the settle"
    assert c.hold_remaining(1.05) == pytest.approx(0.05)
    after = c.next_commands(1.2)
    assert [(x.peer, x.kind) for x in after] == [(C, CommandKind.ANNOUNCE)]
    assert after[0].text.startswith(NC.selector)
    c.on_ack(True, 1.2)
    assert c.next_commands(1.2) == []
    assert c.converged
    assert c.accepted() == routes


def test_removed_peer_is_forgotten_at_the_reload_answer_and_a_lost_answer_reloads_again() -> None:
    c = started((NA, NB))
    c.apply({A: {net("10.0.0.1/32"): PLAIN}, B: {net("10.0.0.2/32"): PLAIN}})
    while cmds := c.next_commands(0.0):
        for _ in cmds:
            c.on_ack(True, 0.0)
    c.reload((NA,), {B})
    assert [x.kind for x in c.next_commands(1.0)] == [CommandKind.RELOAD]
    assert B in c.accepted(), "ExaBGP still holds B until it reloaded"
    # The helper reconnects before the answer: unknown whether ExaBGP got it.
    c.disconnect()
    c.connect()
    assert [x.kind for x in c.next_commands(1.0)] == [CommandKind.RELOAD]
    c.on_ack(True, 1.0)
    assert c.accepted() == {A: {net("10.0.0.1/32"): PLAIN}}
    assert c.next_commands(2.0) == []
    assert not c.converged, "held for the settle"
    assert c.next_commands(2.2) == []
    assert c.converged


def test_a_peer_rekeyed_while_a_reload_is_in_flight_is_not_reported_accepted() -> None:
    """ExaBGP answers a reload and loads the file as it is then: a second reconfiguration
    written meanwhile (b's ASN changed: a new session key, its adj-rib-out empty) may be
    in force already, so b's routes are uncertain, not accepted, until its own reload is
    answered and they are sent again (the state machine below found this)."""
    first, second = (
        rendering(NB),
        rendering(nb("a", "192.0.2.1", hold=30), nb("b", "192.0.2.2", asn=65002)),
    )
    c = started((NA, NB))
    c.apply({B: {net("10.0.0.1/32"): PLAIN}})
    while cmds := c.next_commands(0.0):
        for _ in cmds:
            c.on_ack(True, 0.0)
    assert B in c.accepted()
    verdict = reconfiguration(rendering(NA, NB), first)
    c.reload(first.neighbors, verdict.forgotten)
    assert [x.kind for x in c.next_commands(1.0)] == [CommandKind.RELOAD]
    verdict = reconfiguration(first, second)
    assert B in verdict.forgotten
    c.reload(second.neighbors, verdict.forgotten)
    c.on_ack(True, 1.0)  # the first reload answered: the second file may be in force
    assert B not in c.accepted()
    assert [x.kind for x in c.next_commands(2.0)] == [CommandKind.RELOAD]
    c.on_ack(True, 2.0)
    now = 2.0
    while not c.converged and now < 10.0:
        now += 0.5
        for _ in c.next_commands(now):
            c.on_ack(True, now)
    assert c.accepted() == {B: {net("10.0.0.1/32"): PLAIN}}


class ExaBGPReloads(RuleBasedStateMachine):
    """A simulated ExaBGP keyed like 5.0.15: an adj-rib-out per session key, a
    configuration file the runtime rewrites and a ``reload`` command that makes it the
    one in force when answered, from the file as it is then (removed keys dropped, new
    keys empty, the rest kept). The runtime's verdict drives the core. Invariants: no
    route command ever goes to a neighbour the configuration in force does not have
    (ExaBGP would refuse it), what the core reports accepted ExaBGP holds, and once
    quiet ExaBGP holds exactly the desired routes of the configured peers."""

    CHOICES = (
        NA,
        nb("a", "192.0.2.1", hold=30),
        NB,
        nb("b", "192.0.2.2", asn=65002),
        NC,
    )

    def __init__(self) -> None:
        super().__init__()
        self.config = rendering(NA, NB)
        self.in_force = self.config
        self.core = started(self.config.neighbors)
        self.rib: dict[str, dict[IPNetwork, RouteAttributes]] = {}
        self.desired: dict[PeerName, dict[IPNetwork, RouteAttributes]] = {}
        self.core.apply(self.desired)  # the first decision: no route yet
        self.outstanding: list[Command] = []
        self.now = 0.0

    def _keys(self, r: Rendering) -> dict[PeerName, str]:
        return {n.name: n.session_key for n in r.neighbors}

    @rule(
        routes=st.dictionaries(
            st.sampled_from([A, B, C]),
            st.dictionaries(
                st.sampled_from([net(f"10.0.0.{i}/32") for i in range(1, 4)]),
                st.sampled_from([PLAIN, TAGGED]),
                min_size=1,
                max_size=3,
            ),
        )
    )
    def apply(self, routes: dict[PeerName, dict[IPNetwork, RouteAttributes]]) -> None:
        self.desired = routes
        self.core.apply(routes)

    @rule(picked=st.lists(st.sampled_from(range(5)), min_size=1, max_size=3, unique=True))
    def reconfigure(self, picked: list[int]) -> None:
        by_name = {}
        for i in picked:
            n = self.CHOICES[i]
            by_name[n.name] = n
        new = rendering(*by_name.values())
        verdict = reconfiguration(self.config, new)
        self.config = new
        if verdict.action is ConfigAction.RELOAD:
            self.core.reload(new.neighbors, verdict.forgotten)
        else:
            assert verdict.action is ConfigAction.NONE

    @rule()
    def send(self) -> None:
        self.now += 0.05
        self.outstanding += self.core.next_commands(self.now)

    @precondition(lambda self: bool(self.outstanding))
    @rule()
    def answer(self) -> None:
        cmd = self.outstanding.pop(0)
        if cmd.kind is CommandKind.RELOAD:
            kept = set(self._keys(self.config).values())
            self.rib = {k: r for k, r in self.rib.items() if k in kept}
            self.in_force = self.config
        elif cmd.peer is not None:
            key = self._keys(self.in_force).get(cmd.peer)
            assert key is not None, f"{cmd.text} sent to a neighbour ExaBGP does not have"
            assert cmd.text.startswith(
                next(n.selector for n in self.in_force.neighbors if n.name == cmd.peer)
            )
            held = self.rib.setdefault(key, {})
            for prefix, a in cmd.changes:
                if a is None:
                    held.pop(prefix, None)
                else:
                    held[prefix] = a
        self.core.on_ack(True, self.now)

    @rule()
    def helper_reconnects(self) -> None:
        self.outstanding.clear()
        self.core.disconnect()
        self.core.connect()

    @invariant()
    def accepted_routes_are_held(self) -> None:
        """Whatever the core reports accepted, ExaBGP holds (after a reload it may
        hold more, which the core treats as uncertain until answered)."""
        if any(c.kind is CommandKind.RELOAD for c in self.outstanding):
            return  # answered or not, ExaBGP may have reloaded already
        keys = self._keys(self.in_force)
        for peer, routes in self.core.accepted().items():
            assert peer in keys
            assert routes.items() <= self.rib.get(keys[peer], {}).items()

    def teardown(self) -> None:
        for _ in range(200):
            self.send()
            self.now += 1.0
            if not self.outstanding and self.core.converged:
                break
            while self.outstanding:
                self.answer()
        else:
            raise AssertionError("never quiet")
        assert self.in_force.config == self.config.config
        configured = self._keys(self.config)
        want = {p: r for p, r in self.desired.items() if p in configured and r}
        assert self.core.accepted() == want
        assert {configured[p]: r for p, r in want.items()} == {
            k: r for k, r in self.rib.items() if r
        }


TestExaBGPReloads = ExaBGPReloads.TestCase
TestExaBGPReloads.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # The explain phase traces every line of a failing example: minutes on this machine.
    phases=[p for p in Phase if p is not Phase.explain],
)
#: Seconds alone, minutes beside other test workers on a loaded machine: the timeout only
#: catches a hang.
TestExaBGPReloads.pytestmark = [pytest.mark.timeout(900)]
