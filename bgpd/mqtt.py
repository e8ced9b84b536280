"""MQTT events: this node's routes and BGP sessions, published through aiomqtt.

Off unless SpeakerConfig.mqtt is set. Topics (documented in docs/observability.md):

* ``<topic_prefix>/<node>/routes/<prefix>`` with the prefix's ``/`` written as ``_``
  (``10.99.100.1_32``, ``fd00:99::1_128``): MQTT reserves ``/`` as the level separator
  and ``+``/``#`` as wildcards, and neither appears in an address. The route events are
  the driver's RouteEvents: changes of what each router was sent (``advertised``, the
  set ``kube_bgpd_bgp_prefixes_advertised`` counts), not of what ExaBGP accepted, so a
  session down withdraws its routes here as it does at the router (RFC 4271). An
  announce is a retained JSON document, so a subscriber that connects later sees the
  current state. A withdraw publishes the JSON event (not retained, for live
  subscribers) and then clears the retained message with an empty payload (MQTT 3.1.1
  3.3.1.3), so the retained set is exactly what the node advertises now instead of every
  prefix it ever announced. The topic has no peer level: while another peer still has
  the prefix, a withdraw leaves that peer's latest document retained instead of
  clearing it (``_hold``).
* ``<topic_prefix>/<node>/peers/<peer>``: the session state and the peer's three route
  counts (``desired``, ``accepted`` by ExaBGP, ``advertised`` on the established
  session), retained; published on every state change and, by ``follow_peers``, when
  the counts change (at most once per ``every`` seconds per peer).
* ``<topic_prefix>/<node>/bfd/<peer>``: the peer's BFD session state, retained (only
  for peers with a bfdProfile).
* ``<topic_prefix>/<node>/bfd/<peer>/teardown``: the BGP session was torn down because
  its BFD session went down (bgpd.bfd.gate), not retained.
* ``<topic_prefix>/<node>/status``: ``online`` (retained) once connected; the broker
  publishes ``offline`` (our Last Will) if the connection dies.
* ``<topic_prefix>/<node>/sync``: a non-retained probe the publisher sends to itself on
  every connect to find the end of the broker's retained messages, so it can clear the
  ones an earlier run of this speaker left behind. Subscribers ignore it.

A slow or absent broker must never delay BGP: `publish()` is synchronous and O(1) (a
bounded deque; when full the oldest event is dropped and counted), and the only task
that waits on the network is `run()`. After a reconnect or after dropping events the
publisher sends the current retained state instead of the missed events: subscribers see
the state converge, not every transition. A lost connection is noticed when it is lost,
also while idle (a broker restart, or another client taking our client ID over): `run()`
watches aiomqtt's message iterator, which ends with MqttError on a disconnect, beside the
sender, so `connected` (the `kube_bgpd_mqtt_connected` gauge) is true only while a
connection is, and the reconnect does not wait for the next event. Reconnects back off
exponentially with jitter, capped, like aiomqtt's own examples; a connection that ended
within `stable` seconds does not reset the back-off, so two clients fighting over one
client ID (two speakers with the same node name) settle at the cap instead of
reconnecting in a tight loop. This module must not touch the ExaBGP driver or the
metrics registry: it consumes `bgpd.model` events and exposes its counters as attributes
(`bgpd.metrics.MQTTView`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import random
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bgpd.bandwidth import bytes_per_second
from bgpd.logs import log
from bgpd.model import (
    BfdEvent,
    BfdTeardownEvent,
    DriverEvent,
    IPNetwork,
    MQTTConfig,
    NodeName,
    PeerEvent,
    PeerName,
    PeerStatus,
    RouteChange,
    RouteEvent,
    RouteEvents,
    RoutesAccepted,
    SpeakerEvent,
)

if TYPE_CHECKING:
    # Imported where a connection is made: aiomqtt and paho (~1 MiB) are loaded only by
    # a speaker with SpeakerConfig.mqtt (a structure test holds that).
    import aiomqtt

_logger = logging.getLogger("bgpd.mqtt")

#: Level separator and wildcards: must never appear inside one level we build.
_RESERVED = ("/", "+", "#")


@dataclass(frozen=True, slots=True)
class Message:
    """One MQTT publication; an empty payload with retain clears a retained message."""

    topic: str
    payload: bytes
    retain: bool


def prefix_level(prefix: IPNetwork) -> str:
    """The topic level of a prefix: ``10.99.100.1/32`` -> ``10.99.100.1_32``."""
    return prefix.with_prefixlen.replace("/", "_")


def _level(text: str) -> str:
    # Node and peer names are Kubernetes object names (DNS subdomains), which cannot hold
    # these characters; refuse rather than publish to a wildcard or the wrong subtree.
    if not text or any(c in text for c in _RESERVED):
        raise ValueError(f"not usable as an MQTT topic level: {text!r}")
    return text


def route_topic(topic_prefix: str, node: str, prefix: IPNetwork) -> str:
    return f"{topic_prefix}/{_level(node)}/routes/{prefix_level(prefix)}"


def peer_topic(topic_prefix: str, node: str, peer: PeerName) -> str:
    return f"{topic_prefix}/{_level(node)}/peers/{_level(peer)}"


def bfd_topic(topic_prefix: str, node: str, peer: PeerName) -> str:
    return f"{topic_prefix}/{_level(node)}/bfd/{_level(peer)}"


def status_topic(topic_prefix: str, node: str) -> str:
    return f"{topic_prefix}/{_level(node)}/status"


def _json(doc: dict[str, object]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def bfd_teardown_topic(topic_prefix: str, node: str, peer: PeerName) -> str:
    return f"{bfd_topic(topic_prefix, node, peer)}/teardown"


def event_payload(event: SpeakerEvent) -> dict[str, object]:
    """The JSON document of an event (see docs/observability.md for the fields)."""
    if isinstance(event, BfdTeardownEvent):
        return {
            "node": event.node,
            "peer": event.peer,
            "event": "bfdTeardown",
            "diagnostic": event.diagnostic,
            "at": event.at,
        }
    if isinstance(event, PeerEvent):
        return {
            "node": event.node,
            "peer": event.peer,
            "state": event.state.value,
            "reason": event.reason,
            "at": event.at,
            "desired": event.desired,
            "accepted": event.accepted,
            "advertised": event.advertised,
        }
    if isinstance(event, BfdEvent):
        return {
            "node": event.node,
            "peer": event.peer,
            "state": event.state,
            "diagnostic": event.diagnostic,
            "at": event.at,
        }
    doc: dict[str, object] = {
        "node": event.node,
        "peer": event.peer,
        "prefix": event.prefix.with_prefixlen,
        "state": event.change.value,
        "at": event.at,
    }
    if event.change is RouteChange.ANNOUNCED and event.attributes is not None:
        a = event.attributes
        doc.update(
            communities=list(a.communities),
            large_communities=list(a.large_communities),
            local_pref=a.local_pref,
            med=a.med,
            link_bandwidth=bytes_per_second(a.link_bandwidth),
        )
    return doc


def messages(topic_prefix: str, event: SpeakerEvent) -> tuple[Message, ...]:
    """What one event publishes: pure, so topics, payloads and retain flags are tested
    without a broker."""
    payload = _json(event_payload(event))
    if isinstance(event, BfdTeardownEvent):
        # An event, not a state: not retained.
        return (Message(bfd_teardown_topic(topic_prefix, event.node, event.peer), payload, False),)
    if isinstance(event, PeerEvent):
        return (Message(peer_topic(topic_prefix, event.node, event.peer), payload, True),)
    if isinstance(event, BfdEvent):
        return (Message(bfd_topic(topic_prefix, event.node, event.peer), payload, True),)
    topic = route_topic(topic_prefix, event.node, event.prefix)
    if event.change is RouteChange.ANNOUNCED:
        return (Message(topic, payload, True),)
    return (Message(topic, payload, False), Message(topic, b"", True))


def peer_key(s: PeerStatus | PeerEvent) -> tuple[object, ...]:
    """What a peer document says (its time aside): two equal keys publish the same."""
    return (s.state, s.reason, s.desired, s.accepted, s.advertised)


def peer_counts_changed(
    node: NodeName,
    statuses: Mapping[PeerName, PeerStatus],
    last: dict[PeerName, tuple[object, ...]],
    at: float,
) -> list[PeerEvent]:
    """A PeerEvent for each peer whose state or counts differ from ``last`` (updated in
    place; a peer gone is forgotten)."""
    out = []
    for name, s in sorted(statuses.items()):
        key = peer_key(s)
        if last.get(name) != key:
            last[name] = key
            out.append(
                PeerEvent(node, name, s.state, s.reason, at, s.desired, s.accepted, s.advertised)
            )
    for name in set(last) - set(statuses):
        del last[name]
    return out


def backoff_delay(
    attempt: int, *, base: float, cap: float, rand: Callable[[], float] = random.random
) -> float:
    """Exponential back-off with "equal jitter": half the capped delay plus a random half,
    so many speakers reconnecting to one restarted broker spread out but never spin."""
    ceiling = min(cap, base * 2.0 ** min(attempt, 32))
    return ceiling / 2 + rand() * ceiling / 2


class MQTTPublisher:
    """Publishes speaker events to one broker; see the module docstring for the rules.

    ``publish(event)`` from any code on the event loop (never blocks, never raises on
    broker trouble); ``await run()`` as one long-lived task of the composition root;
    ``follow(queue)`` moves events from the driver's subscription queue into ``publish``.
    """

    def __init__(
        self,
        config: MQTTConfig,
        *,
        node: NodeName,
        max_queue: int = 1000,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        timeout: float = 5.0,
        stale_scan: float = 5.0,
        stable: float = 10.0,
    ) -> None:
        self.config = config
        self.stable = stable
        self.node = node
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.timeout = timeout
        self.stale_scan = stale_scan
        #: Per event, its messages (what messages() says, adjusted by _hold).
        self._queue: collections.deque[tuple[Message, ...]] = collections.deque(maxlen=max_queue)
        #: topic -> retained payload: the state a (re)connect publishes; "online" is part
        #: of it, so every (re)connect overwrites the "offline" of our last will.
        self._retained: dict[str, bytes] = {status_topic(config.topic_prefix, node): b"online"}
        #: Per route topic, the peers the prefix is advertised to (see _hold): the one
        #: peer (its document is the retained one: nothing more is kept), or each peer's
        #: document, the latest announce last.
        self._holders: dict[str, PeerName | dict[PeerName, bytes]] = {}
        #: Per peer, peer_key() of the document published last, by either path (the
        #: driver's PeerEvents through follow(), the samples of follow_peers()): see
        #: follow_peers.
        self._peer_docs: dict[PeerName, tuple[object, ...]] = {}
        #: Topics holding a retained message we published in this process.
        self._on_broker: set[str] = set()
        self._resync = True
        self._wake = asyncio.Event()
        self._sending = False
        # Counters and state read by bgpd.metrics.MQTTCollector and status.
        self.connected = False
        self.published = 0
        self.dropped = 0
        self.connects = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def settled(self) -> bool:
        """Connected, and the broker holds everything published so far."""
        return self.connected and not self._resync and not self._queue and not self._sending

    def retained(self) -> Mapping[str, bytes]:
        """Topic -> payload of what the broker holds retained once everything published
        so far is sent (what a (re)connect publishes): a copy."""
        return dict(self._retained)

    # ------------------------------------------------------------------ producer side

    def publish(self, event: SpeakerEvent) -> None:
        """Queue one event. Synchronous and O(1); a full queue drops its oldest event,
        and the next send resynchronises the retained state to cover the gap."""
        out = messages(self.config.topic_prefix, event)
        if isinstance(event, RouteEvent):
            out = self._hold(event, out)
        elif isinstance(event, PeerEvent):
            self._peer_docs[event.peer] = peer_key(event)
        for m in out:
            if m.retain:
                if m.payload:
                    self._retained[m.topic] = m.payload
                else:
                    self._retained.pop(m.topic, None)
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
            self._resync = True
        self._queue.append(out)
        self._wake.set()

    def _hold(self, event: RouteEvent, out: tuple[Message, ...]) -> tuple[Message, ...]:
        """A route topic is per prefix, and a prefix may be advertised to several peers
        (two top-of-rack routers) while each event is one peer's: the retained message
        stays while any peer has the prefix (the document of the peer announced last
        among them), and is cleared when the last one's advertisement ends. Without
        this, one router's session going down would clear the topic of a prefix the
        other router still has. One peer, the usual case, is kept as its name alone
        (30,000 routes: a dict per topic was 6 MiB more)."""
        topic, peer = out[0].topic, event.peer
        holders = self._holders.get(topic)
        if event.change is RouteChange.ANNOUNCED:
            if holders is None or holders == peer:
                self._holders[topic] = peer
                return out
            if not isinstance(holders, dict):
                # A second peer: the first one's document is the retained one.
                holders = self._holders[topic] = {holders: self._retained[topic]}
            holders.pop(peer, None)
            holders[peer] = out[0].payload
            return out
        if holders is None or holders == peer:
            self._holders.pop(topic, None)
            return out
        if isinstance(holders, dict):
            holders.pop(peer, None)
            payload = next(reversed(holders.values()))
            if len(holders) == 1:
                self._holders[topic] = next(iter(holders))
        else:
            # Another peer holds it, and this one did not: its document stays.
            payload = self._retained[topic]
        # The withdraw event (live subscribers), then the remaining peer's document.
        return (out[0], Message(topic, payload, True))

    async def follow(self, events: asyncio.Queue[DriverEvent]) -> None:
        """Forward a subscription queue (the driver's) into `publish` until cancelled:
        one message per route, so a batch of routes is published route by route. What
        ExaBGP accepted (RoutesAccepted) is not published: the route topics say what the
        routers were sent, and the peer documents carry the accepted count."""
        while True:
            event = await events.get()
            if isinstance(event, RouteEvents):
                for route in event.events():
                    self.publish(route)
            elif not isinstance(event, RoutesAccepted):
                self.publish(event)

    async def follow_peers(
        self,
        read: Callable[[], Mapping[PeerName, PeerStatus]],
        *,
        every: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Every ``every`` seconds, publish each peer whose state or route counts differ
        from its document published last (peer_counts_changed()): the counts move with
        every UPDATE, so they are sampled, not sent per route (a 10,000-route table would
        be 10,000 messages).

        The comparison is with what either path published last, not with this loop's
        own previous sample: the driver's PeerEvent of a session change carries the
        counts of the moment it was emitted and reaches `publish` through a queue, so it
        can be published after a sample that read newer counts (the session came up and
        its UPDATEs were reported in one read). Compared with its own samples, the loop
        would never correct that older document, and the retained peer document would say
        ``advertised: 0`` for a session advertising every route."""
        while True:
            for event in peer_counts_changed(self.node, read(), self._peer_docs, clock()):
                self.publish(event)
            await asyncio.sleep(every)

    # ------------------------------------------------------------------ network side

    def _client(self) -> aiomqtt.Client:
        import aiomqtt  # only with MQTT configured (see the top)

        c = self.config
        return aiomqtt.Client(
            c.host,
            c.port,
            username=c.username,
            password=c.password,
            identifier=f"kube-bgpd-{self.node}",
            will=aiomqtt.Will(
                status_topic(c.topic_prefix, self.node), b"offline", qos=1, retain=True
            ),
            tls_context=ssl.create_default_context() if c.tls else None,
            timeout=self.timeout,
        )

    async def run(self) -> None:
        """Connect, publish, and reconnect forever; returns only by cancellation."""
        import aiomqtt  # only with MQTT configured (see the top)

        attempt = 0
        loop = asyncio.get_running_loop()
        while True:
            since: float | None = None
            try:
                async with self._client() as client:
                    self.connected = True
                    self.connects += 1
                    since = loop.time()
                    log(_logger, logging.INFO, "mqtt.connected", host=self.config.host)
                    self._resync = True
                    await self._clear_stale(client)
                    async with asyncio.TaskGroup() as tg:
                        tg.create_task(self._watch(client), name="mqtt-watch")
                        tg.create_task(self._pump(client), name="mqtt-pump")
            except* aiomqtt.MqttError as group:
                lasted = None if since is None else round(loop.time() - since, 1)
                log(
                    _logger,
                    logging.WARNING if since is not None else logging.DEBUG,
                    "mqtt.disconnected",
                    host=self.config.host,
                    error=str(group.exceptions[0]),
                    connected_for=lasted,
                )
            finally:
                self.connected = False
            if since is not None and loop.time() - since >= self.stable:
                attempt = 0
            delay = backoff_delay(attempt, base=self.backoff_base, cap=self.backoff_cap)
            attempt += 1
            await asyncio.sleep(delay)

    @staticmethod
    async def _watch(client: aiomqtt.Client) -> None:
        """Raise MqttError as soon as the connection is lost: aiomqtt ends its message
        iterator so. Nothing is subscribed after _clear_stale; a late message of its
        scan is ignored."""
        async for _ in client.messages:
            pass

    async def _clear_stale(self, client: aiomqtt.Client) -> None:
        """Clear retained messages under this node that an earlier run of the speaker left
        (routes it no longer announces, peers no longer configured): without this, a
        restarted speaker's retained set would not be "the current state".

        The broker sends retained messages right after the SUBACK, then forwards what is
        published later in order; a probe published to our own ``sync`` topic therefore
        arrives after every retained message, which ends the scan without a guessed
        delay (``stale_scan`` bounds it if a broker reorders). Our own later messages
        arrive without the retain flag, so only the retained ones are judged.
        """
        base = f"{self.config.topic_prefix}/{self.node}"
        filters = (f"{base}/routes/#", f"{base}/peers/#", f"{base}/sync")
        probe = f"{self.node}-{random.getrandbits(64):016x}".encode()
        for f in filters:
            await client.subscribe(f, qos=1)
        await client.publish(f"{base}/sync", probe, qos=1)
        cleared = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.stale_scan):
                async for msg in client.messages:
                    topic = str(msg.topic)
                    if topic == f"{base}/sync" and msg.payload == probe:
                        break
                    if msg.retain and msg.payload and topic not in self._retained:
                        await self._send(client, Message(topic, b"", True))
                        cleared += 1
        for f in filters:
            await client.unsubscribe(f)
        if cleared:
            log(_logger, logging.INFO, "mqtt.stale_cleared", topics=cleared)

    async def _pump(self, client: aiomqtt.Client) -> None:
        while True:
            self._sending = True
            try:
                if self._resync:
                    await self._send_state(client)
                    continue
                if self._queue:
                    for m in self._queue.popleft():
                        await self._send(client, m)
                    continue
            finally:
                self._sending = False
            self._wake.clear()
            await self._wake.wait()

    async def _send_state(self, client: aiomqtt.Client) -> None:
        """Publish the whole retained state and clear what no longer holds. The queued
        events are already part of that state, so they are dropped, not replayed."""
        self._resync = False
        self._queue.clear()
        state = dict(self._retained)
        for topic in sorted(self._on_broker - state.keys()):
            await self._send(client, Message(topic, b"", True))
        for topic, payload in sorted(state.items()):
            await self._send(client, Message(topic, payload, True))
        log(_logger, logging.INFO, "mqtt.state_published", topics=len(state))

    async def _send(self, client: aiomqtt.Client, m: Message) -> None:
        await client.publish(m.topic, m.payload, qos=1, retain=m.retain)
        self.published += 1
        if m.retain:
            if m.payload:
                self._on_broker.add(m.topic)
            else:
                self._on_broker.discard(m.topic)
