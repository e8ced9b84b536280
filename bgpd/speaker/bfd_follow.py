"""BGP follows BFD in the speaker: carries out what the gate (bgpd.bfd.gate) decides.

``BfdFollow(node=..., driver=..., publish=...)``: ``configure(config, sessions)`` after
every rendering (the BFD-enabled peers this node has a session with, and bfdStrict);
``on_states(states)`` with every reading of the BFD sessions (the bfdd runtime calls the
speaker's ``on_bfd_states``); ``stop()`` once the speaker stops. It hands the held peers
to the driver (``set_held``: their routes are withdrawn from ExaBGP and not sent until
released), has the driver tear a session down (``teardown``, Cease subcode 10), and
reports: ``bfd.routes_held`` / ``bfd.routes_released`` and ``bfd.teardown`` log lines,
a BfdTeardownEvent for MQTT, and ``held()`` / ``teardowns()`` for explain, status and
metrics (bgpd.metrics.BfdGateCollector). It decides nothing itself.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol

from bgpd.bfd import gate
from bgpd.bfd.gate import CEASE_BFD_DOWN, GateState, GoodbyeStep, Transition, goodbye
from bgpd.bfd.state import BfdPeerState
from bgpd.logs import log
from bgpd.model import BfdTeardownEvent, Config, NodeName, PeerHold, PeerName, SpeakerEvent

_logger = logging.getLogger("bgpd.bfd")


class GatedDriver(Protocol):
    """The driver's part this needs (bgpd.exabgp.driver.ExaBGPDriver)."""

    def set_held(self, peers: AbstractSet[PeerName]) -> None: ...

    def teardown(self, peer: PeerName, subcode: int) -> None: ...

    def held_routes(self) -> Mapping[PeerName, int]: ...


class BfdControl(Protocol):
    """What the speaker asks of the bfdd runtime (bgpd.bfd.runtime.BfdRuntime): run it,
    and at the end of a stop (after the BGP goodbye) AdminDown then stop."""

    async def run(self) -> None: ...

    async def admin_down(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def pid(self) -> int | None: ...


def bfd_enabled(config: Config) -> set[PeerName]:
    """The BGPPeers with a bfdProfile: one BFD session each."""
    return {p.name for p in config.peers if p.bfd_profile}


class BfdFollow:
    """See the module docstring."""

    def __init__(
        self,
        *,
        node: NodeName,
        driver: GatedDriver,
        publish: Callable[[SpeakerEvent], None] | None = None,
    ) -> None:
        self.node = node
        self.driver = driver
        self.publish = publish
        self.state = GateState()
        self._teardowns: collections.Counter[PeerName] = collections.Counter()
        self._held: frozenset[PeerName] = frozenset()

    def configure(self, config: Config, sessions: Iterable[PeerName]) -> None:
        """The BFD-enabled peers among this node's sessions, and bfdStrict."""
        enabled = bfd_enabled(config) & set(sessions)
        self._step(gate.configure(self.state, enabled=enabled, strict=config.speaker.bfd_strict))

    def on_states(self, states: Mapping[PeerName, BfdPeerState]) -> None:
        """A new reading of the BFD sessions."""
        self._step(gate.observe(self.state, states))

    def stop(self) -> None:
        """The speaker stops: its own goodbye must not tear anything down."""
        self._step(gate.stop(self.state))

    def held(self) -> tuple[PeerHold, ...]:
        """The peers routes are held back from now, why, and how many routes."""
        counts = self.driver.held_routes()
        return tuple(
            PeerHold(peer, reason, counts.get(peer, 0))
            for peer, reason in gate.held(self.state).items()
        )

    def teardowns(self) -> Mapping[PeerName, int]:
        """BGP sessions torn down for BFD since the start, per peer."""
        return dict(self._teardowns)

    def status(self) -> dict[str, object]:
        """/status "bfd_gate"."""
        return {
            "strict": self.state.strict,
            "held": [
                {"peer": h.peer, "reason": h.reason.value, "routes": h.routes} for h in self.held()
            ],
            "teardowns": self.teardowns(),
        }

    def _step(self, t: Transition) -> None:
        self.state = t.state
        held = frozenset(gate.held(t.state))
        if held != self._held:
            for peer in sorted(held - self._held):
                log(_logger, logging.WARNING, "bfd.routes_held", peer=peer, reason="bfdNotUp")
            for peer in sorted(self._held - held):
                log(_logger, logging.INFO, "bfd.routes_released", peer=peer)
            self._held = held
            self.driver.set_held(held)
        for td in t.teardowns:
            self._teardowns[td.peer] += 1
            self.driver.teardown(td.peer, CEASE_BFD_DOWN)
            log(_logger, logging.WARNING, "bfd.teardown", peer=td.peer, diagnostic=td.diagnostic)
            if self.publish is not None:
                self.publish(BfdTeardownEvent(self.node, td.peer, td.diagnostic, time.time()))


async def say_goodbye(
    *,
    retain: bool,
    withdraw: Callable[[bool], Awaitable[bool]],
    stop_exabgp: Callable[[], Awaitable[object]],
    bfd: BfdControl | None,
) -> bool:
    """A stop in bgpd.bfd.gate.goodbye's order: ``withdraw(retain)`` (every route, or
    with ``retain`` only from peers without graceful restart; True when ExaBGP
    acknowledged it all in time and its UPDATEs were flushed), ``stop_exabgp()``, then
    bfdd's AdminDown and stop. Returns what ``withdraw`` returned."""
    ok = True
    for step in goodbye(retain=retain):
        match step:
            case GoodbyeStep.WITHDRAW | GoodbyeStep.RETAIN:
                ok = await withdraw(retain)
            case GoodbyeStep.STOP_EXABGP:
                await stop_exabgp()
            case GoodbyeStep.BFD_ADMIN_DOWN:
                if bfd is not None:
                    await bfd.admin_down()
            case GoodbyeStep.STOP_BFD:
                if bfd is not None:
                    await bfd.stop()
    return ok
