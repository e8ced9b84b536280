"""The ExaBGP driver: declarative route sets in, ExaBGP API commands out, acks and session
events back. The only code that speaks ExaBGP's API text (through plan.py).

This module is the transport: the unix socket the helper dials (its hello, stale helpers,
the settle time after a reconnect), the sender task, the asyncio events and the
subscribers' queues. Every decision about routes and commands is in core.py
(``DriverCore``, no I/O), which this module feeds with the clock and the socket's lines.

Public API (used by the reconciler, the speaker, status, metrics and MQTT):

* ``ExaBGPDriver(node=..., socket_path=..., window=9, batch=100, ack_timeout=10.0,
  flush_delay=0.5, on_dead=None)``
* ``await driver.start()`` / ``await driver.close()``: the unix socket the helper dials.
  ``driver.run()`` is the long-lived sender task (run it in the composition root's group).
* ``driver.configure(neighbors)``: the sessions ExaBGP has (from render.Rendering).
* ``driver.reset(generation)``: called by the Supervisor before every ExaBGP start;
  ExaBGP keeps nothing across a restart, so everything is replayed.
* ``driver.reload(neighbors, forgotten)``: the running ExaBGP reloads its (rewritten)
  configuration in place: ``reload`` goes first and alone, then the routes of the
  ``forgotten`` peers (new to ExaBGP, or removed) are planned again; every other session
  keeps its routes (bgpd.exabgp.reload, DriverCore.reload).
* ``driver.apply(desired)``: the whole desired route set (peer -> prefix -> attributes).
  Never blocks; the sender converges in the background.
  ``driver.apply_changes(desired, changed)``: the same when only the prefixes in
  ``changed`` (per peer) may differ from the previous apply: costs those prefixes, not
  the whole set (the reconciler's incremental path; ``desired`` is read, not kept).
* ``await driver.wait_converged(within)``: True when ExaBGP accepted exactly the
  effective desired set and nothing is in flight.
* ``driver.mode`` / ``driver.set_mode(DriverMode.DRAINING | WITHDRAWN | RETAINED |
  NORMAL)``: RFC 8326 drain (every route with 65535:0, LOCAL_PREF 0 on iBGP), withdraw-all,
  and withdraw only from peers without graceful restart (a stop that retains the routes).
* ``await driver.withdraw_all(within, retain_graceful=False)``: graceful stop: withdraw
  everything (or, retaining, only from non-graceful-restart peers), wait for the acks, then
  ``flush_delay`` for ExaBGP to write the UPDATEs (``done`` means "in the adj-rib-out", not
  "on the wire"; ExaBGP's reactor writes them within its next loops).
* ``driver.set_held(peers)``: hold back every route from these peers (bgpd.bfd.gate,
  bfdStrict); ``driver.teardown(peer, subcode)``: close one BGP session now (its BFD
  session went down), before any route command not yet written.
* ``driver.peer_status() -> Mapping[PeerName, PeerStatus]`` (desired, accepted and
  advertised counts), ``driver.accepted() -> DesiredRoutes`` (ExaBGP answered ``done``),
  ``driver.advertised() -> DesiredRoutes`` (sent to the router on its established
  session: DriverCore.advertised()), ``driver.subscribe(maxsize) ->
  asyncio.Queue[DriverEvent]`` (session changes; one RouteEvents per change of a
  peer's advertised routes, with the routes it changed; one RoutesAccepted per answer
  that changed what ExaBGP holds; a full queue drops its oldest event and counts it in
  ``stats.events_dropped``: a slow subscriber never blocks BGP),
  ``driver.unsubscribe(queue)``.
* ``driver.stats``: ``commands_sent`` (Counter by CommandKind value), ``command_errors``,
  ``ack_timeouts``, ``helper_connections``, ``events_dropped``, ``wrong_family``
  (prefixes of the other family handed to a session: logged, never sent), ``last_error``
  (command text, without secrets: commands hold none).

Flow control: at most ``window`` commands in flight (each up to ``batch`` prefixes; 9 x 100,
as many as ExaBGP's patched reactor takes in a turn: plan.DEFAULT_WINDOW); acks are matched in
order, so a synchronous command (``announce eor``, answered at once by ExaBGP, overtaking
queued ones) is only sent when nothing else is in flight, and nothing follows it until its
answer. An ``error`` ack is logged with its command and counted; its routes fall back to
what ExaBGP accepted before and are retried on the next apply() (not at once: a
deterministic error would loop). No ack within ``ack_timeout`` means ExaBGP is hung:
``on_dead()`` (the supervisor kills it; the restart replays everything).

Graceful restart peers run with manual-eor: after every session establishment, once
their routes are all accepted, the driver sends ``announce eor <afi> unicast`` so the
router flushes only what we no longer announce (RFC 4724).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path

from bgpd.exabgp.core import DriverCore, DriverMode, DriverStats
from bgpd.exabgp.plan import DEFAULT_BATCH, DEFAULT_WINDOW
from bgpd.exabgp.render import Neighbor
from bgpd.logs import log
from bgpd.model import (
    DesiredRoutes,
    DriverEvent,
    IPNetwork,
    NodeName,
    PeerName,
    PeerStatus,
)

__all__ = ["DriverMode", "DriverStats", "ExaBGPDriver"]

_logger = logging.getLogger("bgpd.exabgp.driver")

#: After a helper replaced a live one, ExaBGP may still answer the old helper's commands;
#: the new helper drops answers it did not ask for, given this long to arrive (helper.py).
SETTLE_SECONDS = 0.2

#: What ExaBGP 5.0.15 writes for a session with ``peer-as auto`` (BGPPeer dynamicASN
#: external): Python's None where JSON needs null (reactor/api/response/json.py formats
#: neighbor['peer-as'] as it is; the ASN learnt from the OPEN is not written back).
_UNKNOWN_PEER_AS = re.compile(r'("asn": \{ "local": \d+, "peer": )None( \})')


def repair_event(line: str) -> str:
    """ExaBGP's JSON event line with its one non-JSON token (an unknown peer ASN, see
    _UNKNOWN_PEER_AS) made JSON's null; any other line unchanged."""
    return _UNKNOWN_PEER_AS.sub(r"\1null\2", line, count=1)


class ExaBGPDriver:
    """See the module docstring for the public API and its reasons."""

    def __init__(
        self,
        *,
        node: NodeName,
        socket_path: Path,
        window: int = DEFAULT_WINDOW,
        batch: int = DEFAULT_BATCH,
        ack_timeout: float = 10.0,
        flush_delay: float = 0.5,
        on_dead: Callable[[], None] | None = None,
    ) -> None:
        self.node = node
        self.socket_path = socket_path
        self.flush_delay = flush_delay
        self.on_dead = on_dead
        self.core = DriverCore(
            node=node, window=window, batch=batch, ack_timeout=ack_timeout, emit=self._emit
        )
        self._generation = 0
        self._writer: asyncio.StreamWriter | None = None
        self._server: asyncio.Server | None = None
        self._settle_until = 0.0
        self._wake = asyncio.Event()
        self._converged = asyncio.Event()
        self._subscribers: list[asyncio.Queue[DriverEvent]] = []
        #: A call of core.flush_events() is scheduled (see _on_line).
        self._flush_due = False

    @property
    def stats(self) -> DriverStats:
        return self.core.stats

    @property
    def mode(self) -> DriverMode:
        return self.core.mode

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen on the unix socket the helper dials (mode 0600: root's business)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(
            self._on_connection, path=str(self.socket_path), limit=4 * 1024 * 1024
        )
        self.socket_path.chmod(0o600)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def configure(self, neighbors: Sequence[Neighbor]) -> None:
        """The sessions of the ExaBGP being started (call before reset() of that start)."""
        self.core.configure(neighbors)
        self._changed()

    def reload(self, neighbors: Sequence[Neighbor], forgotten: AbstractSet[PeerName]) -> None:
        """The running ExaBGP is to reload its configuration in place (DriverCore.reload)."""
        self.core.reload(neighbors, forgotten)
        self._changed()

    def reset(self, generation: int) -> None:
        """A new ExaBGP is starting: it holds no route and no session."""
        self._generation = generation
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.core.reset(time.time())
        self._changed()

    # ------------------------------------------------------------------ desired state

    def apply(self, desired: DesiredRoutes) -> None:
        """Take the whole desired route set; converge in the background."""
        self.core.apply(desired)
        self._changed()

    def apply_changes(
        self, desired: DesiredRoutes, changed: Mapping[PeerName, AbstractSet[IPNetwork]]
    ) -> None:
        """apply(desired) when only the prefixes in ``changed`` may differ from the
        previous apply (see DriverCore.apply_changes). ``desired`` is read now, not kept."""
        self.core.apply_changes(desired, changed)
        self._changed()

    def set_mode(self, mode: DriverMode) -> None:
        self.core.set_mode(mode)
        self._changed()

    def set_held(self, peers: AbstractSet[PeerName]) -> None:
        """Hold back every route from these peers (DriverCore.set_held)."""
        self.core.set_held(peers)
        self._changed()

    def teardown(self, peer: PeerName, subcode: int) -> None:
        """Close this peer's BGP session now (DriverCore.teardown)."""
        self.core.teardown(peer, subcode)
        self._changed()

    def held_routes(self) -> Mapping[PeerName, int]:
        """Per held peer, how many desired routes are held back (DriverCore.held_routes)."""
        return self.core.held_routes()

    async def wait_converged(self, within: float | None = None) -> bool:
        try:
            async with asyncio.timeout(within):
                await self._converged.wait()
        except TimeoutError:
            return False
        return True

    async def withdraw_all(self, within: float, *, retain_graceful: bool = False) -> bool:
        """Withdraw every route (with ``retain_graceful``: only from peers without
        graceful restart, mode RETAINED) and wait until ExaBGP accepted it, then give
        its reactor ``flush_delay`` to put the UPDATEs on the wire. Always: commands sent
        before this call (a drain window's withdrawals) may still be in ExaBGP."""
        self.set_mode(DriverMode.RETAINED if retain_graceful else DriverMode.WITHDRAWN)
        ok = await self.wait_converged(within)
        await asyncio.sleep(self.flush_delay)
        return ok

    # ------------------------------------------------------------------ observers

    def accepted(self) -> DesiredRoutes:
        return self.core.accepted()

    def advertised(self) -> DesiredRoutes:
        return self.core.advertised()

    def peer_status(self) -> Mapping[PeerName, PeerStatus]:
        return self.core.peer_status()

    def neighbors(self) -> Mapping[PeerName, Neighbor]:
        return self.core.neighbors()

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def connected(self) -> bool:
        return self._writer is not None

    @property
    def answering(self) -> bool:
        """False while ExaBGP owes an answer past the ack timeout (hung; the supervisor
        is told and restarts it): what /healthz reports."""
        return not self.core.answer_overdue(time.monotonic())

    def subscribe(self, maxsize: int = 10000) -> asyncio.Queue[DriverEvent]:
        q: asyncio.Queue[DriverEvent] = asyncio.Queue(maxsize)
        self._subscribers.append(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[DriverEvent]) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(q)

    def _emit(self, event: DriverEvent) -> None:
        for q in self._subscribers:
            if q.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
                self.stats.events_dropped += 1
            q.put_nowait(event)

    # ------------------------------------------------------------------ helper connection

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(5.0):
                hello_line = await reader.readline()
            hello = json.loads(hello_line) if hello_line else {}
        except (TimeoutError, ValueError, OSError):
            writer.close()
            return
        gen = int(hello.get("generation", 0)) if isinstance(hello, dict) else 0
        if gen and self._generation and gen != self._generation:
            log(_logger, logging.INFO, "driver.stale_helper", generation=gen)
            writer.close()
            return
        if self._writer is not None:
            self._writer.close()
            # The previous helper died with commands in flight: ExaBGP may still answer
            # some of them; the new helper drops answers it did not ask for, and we give
            # them a moment to arrive before sending (see helper.py).
            self._settle_until = time.monotonic() + SETTLE_SECONDS
        self._writer = writer
        self.stats.helper_connections += 1
        self.core.connect()
        self._changed()
        log(
            _logger,
            logging.INFO,
            "driver.helper_connected",
            pid=hello.get("pid"),
            generation=gen,
            dropped=hello.get("dropped", 0),
        )
        try:
            while line := await reader.readline():
                self._on_line(line.decode(errors="replace").strip())
        except (ConnectionError, ValueError):
            pass
        finally:
            if self._writer is writer:
                self._writer = None
                self.core.disconnect()
            writer.close()

    def _on_line(self, line: str) -> None:
        if not line:
            return
        if line in ("done", "error"):
            self.core.on_ack(line == "done", time.time())
            self._wake.set()
        elif line.startswith("{"):
            try:
                doc = json.loads(repair_event(line))
            except ValueError:
                log(_logger, logging.WARNING, "driver.bad_json", line=line[:200])
                return
            if isinstance(doc, dict):
                self.core.on_event(doc, time.time())
                self._wake.set()
                if self.core.events_held and not self._flush_due:
                    # After the lines already read (readline returns them without
                    # yielding): the reports of one read make one RouteEvents per peer.
                    self._flush_due = True
                    asyncio.get_running_loop().call_soon(self._flush_events)

    def _flush_events(self) -> None:
        self._flush_due = False
        self.core.flush_events()

    # ------------------------------------------------------------------ sender

    def _changed(self) -> None:
        """The core's input changed what is wanted or what ExaBGP holds: not converged
        until the sender says so, and the sender has work."""
        if not self.core.converged:
            self._converged.clear()
        self._wake.set()

    def _step(self) -> None:
        """Send what the window allows; report a hung ExaBGP."""
        now = time.monotonic()
        if self.core.ack_timed_out(now):
            if self.on_dead is not None:
                self.on_dead()
            return
        if self._writer is None or now < self._settle_until:
            return
        commands = self.core.next_commands(now)
        if commands:
            self._writer.write(b"".join(c.text.encode() + b"\n" for c in commands))
        if self.core.converged:
            self._converged.set()

    async def run(self) -> None:
        """The sender: wakes on apply(), acks, events and a 0.5 s tick (timeouts)."""
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
            # that races with its timeout, and this loop would then never end.
            # Sooner when commands are held after a reload (DriverCore.hold_remaining).
            held = self.core.hold_remaining(time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(held if 0 < held < 0.5 else 0.5):
                    await self._wake.wait()
            self._wake.clear()
            self._step()
            if self._writer is not None and self._writer.transport.get_write_buffer_size():
                with contextlib.suppress(ConnectionError):
                    await self._writer.drain()
