"""MQTTPublisher against a real mosquitto on 127.0.0.1, started and killed by PID here."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import pytest
from prometheus_client import CollectorRegistry

from bgpd.metrics import MQTTCollector
from bgpd.model import (
    MQTTConfig,
    NodeName,
    PeerEvent,
    PeerName,
    RouteAttributes,
    RouteChange,
    RouteEvent,
    SessionState,
)
from bgpd.mqtt import MQTTPublisher
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
NODE = NodeName("node-a")
R1 = PeerName("router-1")
ATTRS = RouteAttributes(communities=("65000:100",), local_pref=150)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    """One mosquitto on a fixed loopback port that a test can kill and start again."""

    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        conf = self.workdir / "mosquitto.conf"
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "persistence false"]
        if os.geteuid() == 0:
            lines.append("user root")  # as root, mosquitto otherwise switches to the user mosquitto
        conf.write_text("\n".join(lines) + "\n")
        with (self.workdir / "mosquitto.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=log
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.workdir / "mosquitto.log").read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.02)
        raise AssertionError("mosquitto did not listen within 10 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(_free_port(), tmp_path)
    try:
        yield b
    finally:
        b.kill()


def _publisher(port: int, **kw: float | int) -> MQTTPublisher:
    return MQTTPublisher(
        MQTTConfig(host="127.0.0.1", port=port),
        node=NODE,
        backoff_base=0.05,
        backoff_cap=0.4,
        timeout=2.0,
        **kw,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def running(pub: MQTTPublisher) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(pub.run(), name="mqtt-publisher")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _announce(prefix: str, at: float = 1.0) -> RouteEvent:
    return RouteEvent(NODE, R1, ipaddress.ip_network(prefix), RouteChange.ANNOUNCED, ATTRS, at)


def _withdraw(prefix: str, at: float = 2.0) -> RouteEvent:
    return RouteEvent(NODE, R1, ipaddress.ip_network(prefix), RouteChange.WITHDRAWN, None, at)


def _peer(state: SessionState, at: float = 1.0) -> PeerEvent:
    return PeerEvent(NODE, R1, state, "" if state is SessionState.UP else "hold timer expired", at)


Received = list[tuple[str, bytes, bool]]


async def _collect(
    port: int, until: Callable[[Received], bool], *, quiet: float = 0.3, within: float = 20
) -> Received:
    """Subscribe to everything under kube-bgpd/ and gather (topic, payload, retain) until
    `until` holds, then for `quiet` seconds more so unexpected extra messages show."""
    got: Received = []
    deadline = time.monotonic() + within
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"test-{time.monotonic_ns()}") as c:
        await c.subscribe("kube-bgpd/#", qos=1)
        it = aiter(c.messages)
        stop_at: float | None = None
        while True:
            now = time.monotonic()
            if stop_at is None and until(got):
                stop_at = now + quiet
            end = stop_at if stop_at is not None else deadline
            if now >= end:
                break
            try:
                msg = await asyncio.wait_for(anext(it), end - now)
            except TimeoutError:
                continue
            payload = msg.payload if isinstance(msg.payload, bytes) else str(msg.payload).encode()
            got.append((str(msg.topic), payload, bool(msg.retain)))
    assert stop_at is not None, f"condition never held; got {got}"
    return got


def _retained(got: Received) -> dict[str, dict[str, object] | str]:
    out: dict[str, dict[str, object] | str] = {}
    for topic, payload, retain in got:
        assert retain, f"a new subscriber only gets retained messages: {topic}"
        out[topic] = payload.decode() if topic.endswith("/status") else json.loads(payload)
    return out


ROUTE1 = "kube-bgpd/node-a/routes/10.99.100.1_32"
ROUTE2 = "kube-bgpd/node-a/routes/10.99.100.2_32"
ROUTE6 = "kube-bgpd/node-a/routes/fd00:99::1_128"
PEER = "kube-bgpd/node-a/peers/router-1"
STATUS = "kube-bgpd/node-a/status"


async def test_events_arrive_live_and_the_retained_state_is_the_current_state(
    broker: Broker,
) -> None:
    broker.start()
    pub = _publisher(broker.port)
    async with running(pub):
        await wait_until_async(lambda: pub.settled, within=20, poll=0.02, what="settled")
        async with asyncio.TaskGroup() as tg:
            live = tg.create_task(
                _collect(broker.port, lambda g: sum(1 for t, _, _ in g if t == ROUTE2) >= 3)
            )
            await asyncio.sleep(0.3)  # the live subscriber is subscribed
            pub.publish(_peer(SessionState.UP))
            pub.publish(_announce("10.99.100.1/32"))
            pub.publish(_announce("fd00:99::1/128"))
            pub.publish(_announce("10.99.100.2/32"))
            pub.publish(_withdraw("10.99.100.2/32"))
        got = live.result()

        route2 = [(p, r) for t, p, r in got if t == ROUTE2]
        # announce (JSON), withdraw event (JSON, not retained), then the clearing message.
        assert [json.loads(p)["state"] if p else "" for p, _ in route2] == [
            "announced",
            "withdrawn",
            "",
        ]
        assert json.loads(route2[1][0]) == {
            "node": "node-a",
            "peer": "router-1",
            "prefix": "10.99.100.2/32",
            "state": "withdrawn",
            "at": 2.0,
        }

        # A subscriber arriving now sees exactly the current state, all retained.
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 4))
        assert late == {
            STATUS: "online",
            PEER: {
                "node": "node-a",
                "peer": "router-1",
                "state": "up",
                "reason": "",
                "at": 1.0,
                "desired": 0,
                "accepted": 0,
                "advertised": 0,
            },
            ROUTE1: {
                "node": "node-a",
                "peer": "router-1",
                "prefix": "10.99.100.1/32",
                "state": "announced",
                "communities": ["65000:100"],
                "large_communities": [],
                "local_pref": 150,
                "med": None,
                "link_bandwidth": None,
                "at": 1.0,
            },
            ROUTE6: late[ROUTE6],
        }
        assert late[ROUTE6]["prefix"] == "fd00:99::1/128"  # type: ignore[index]


async def test_absent_broker_then_started_gets_the_current_state(broker: Broker) -> None:
    pub = _publisher(broker.port)
    async with running(pub) as task:
        pub.publish(_peer(SessionState.UP))
        pub.publish(_announce("10.99.100.1/32"))
        pub.publish(_announce("10.99.100.2/32"))
        pub.publish(_withdraw("10.99.100.2/32"))
        await asyncio.sleep(0.5)  # several failed connection attempts
        assert not pub.connected
        assert not task.done()
        broker.start()
        await wait_until_async(lambda: pub.settled, within=20, poll=0.02, what="settled")
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 3))
        assert set(late) == {STATUS, PEER, ROUTE1}


async def test_broker_killed_mid_stream_never_blocks_and_reconnect_republishes(
    broker: Broker,
) -> None:
    broker.start()
    pub = _publisher(broker.port)
    enqueue_times: list[float] = []

    def publish(event: RouteEvent | PeerEvent) -> None:
        t0 = time.perf_counter()
        pub.publish(event)
        enqueue_times.append(time.perf_counter() - t0)

    async with running(pub) as task:
        await wait_until_async(lambda: pub.connected, within=20, poll=0.02, what="connected")
        publish(_peer(SessionState.UP))
        for i in range(1, 51):
            publish(_announce(f"10.99.101.{i}/32"))
        await wait_until_async(lambda: pub.settled, within=20, poll=0.02, what="settled")

        broker.kill()
        # While the broker is gone: the session flaps, routes come and go.
        publish(_peer(SessionState.DOWN, at=5.0))
        for i in range(1, 26):
            publish(_withdraw(f"10.99.101.{i}/32"))
            await asyncio.sleep(0.005)
        publish(_peer(SessionState.UP, at=6.0))
        publish(_announce("10.99.100.9/32"))
        await wait_until_async(lambda: not pub.connected, within=20, poll=0.02)
        assert not task.done(), "no exception may escape the publisher"

        # A new, empty broker on the same port: the publisher republishes its state.
        broker.start()
        await wait_until_async(lambda: pub.settled and pub.connects == 2, within=20, poll=0.02)
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 28))

    expected_routes = {f"kube-bgpd/node-a/routes/10.99.101.{i}_32" for i in range(26, 51)}
    expected_routes.add("kube-bgpd/node-a/routes/10.99.100.9_32")
    assert {t for t in late if "/routes/" in t} == expected_routes
    assert late[PEER] == {
        "node": "node-a",
        "peer": "router-1",
        "state": "up",
        "reason": "",
        "at": 6.0,
        "desired": 0,
        "accepted": 0,
        "advertised": 0,
    }
    assert late[STATUS] == "online"
    # publish() only appends to a deque: far below a millisecond; 20 ms only catches a block.
    assert max(enqueue_times) < 0.02, max(enqueue_times)


async def test_a_broker_that_never_answers_delays_nothing() -> None:
    """A slow broker: TCP accepts, but no CONNACK ever comes. publish() stays O(1), the
    queue stays bounded and the publisher keeps retrying instead of hanging.

    The silent broker is a listening socket: the kernel completes each client's handshake
    into its backlog, and the test takes the connections out itself (non-blocking
    accept) to count the publisher's tries. An asyncio server here leaked: a connection
    accepted while the test ended got its transport after the writers were closed, and
    its ResourceWarning failed whichever test the worker ran next."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []

    def tries() -> int:
        with contextlib.suppress(BlockingIOError):
            while True:
                conn, _ = listener.accept()
                accepted.append(conn)  # keep it open and say nothing
        return len(accepted)

    pub = MQTTPublisher(
        MQTTConfig(host="127.0.0.1", port=port),
        node=NODE,
        max_queue=100,
        backoff_base=0.05,
        backoff_cap=0.2,
        timeout=0.5,
    )
    try:
        async with running(pub) as task:
            worst = 0.0
            for i in range(5000):
                t0 = time.perf_counter()
                pub.publish(_announce(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}/32"))
                worst = max(worst, time.perf_counter() - t0)
                if i % 500 == 0:
                    await asyncio.sleep(0.1)  # let the publisher try (and time out)
            # It gave up on one try and retried.
            await wait_until_async(lambda: tries() >= 2, within=20, poll=0.02)
            assert not task.done()
            assert not pub.connected
            assert pub.queued == 100
            assert pub.dropped == 4900
            # Generous (a loaded machine pauses any code): a publish that waited on the
            # silent broker would take the 0.5 s timeout.
            assert worst < 0.25, worst
    finally:
        for conn in accepted:
            conn.close()
        listener.close()


async def test_full_queue_drops_oldest_counts_it_and_still_converges(broker: Broker) -> None:
    pub = _publisher(broker.port, max_queue=10)
    async with running(pub):
        for i in range(1, 101):
            pub.publish(_announce(f"10.99.102.{i}/32"))
        for i in range(1, 91):
            pub.publish(_withdraw(f"10.99.102.{i}/32"))
        assert pub.dropped == 180
        assert pub.queued == 10
        broker.start()
        await wait_until_async(lambda: pub.settled, within=20, poll=0.02, what="settled")
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 11))
    assert {t for t in late if "/routes/" in t} == {
        f"kube-bgpd/node-a/routes/10.99.102.{i}_32" for i in range(91, 101)
    }


async def test_restarted_speaker_clears_what_its_previous_run_left_retained(
    broker: Broker,
) -> None:
    broker.start()
    first = _publisher(broker.port)
    async with running(first):
        first.publish(_peer(SessionState.UP))
        first.publish(PeerEvent(NODE, PeerName("router-2"), SessionState.UP, "", 1.0))
        first.publish(_announce("10.99.100.1/32"))
        first.publish(_announce("10.99.100.2/32"))
        await wait_until_async(lambda: first.settled, within=20, poll=0.02)
    # The next run (same node) only announces .1 and only has router-1 configured.
    second = _publisher(broker.port)
    second.publish(_peer(SessionState.UP, at=9.0))
    second.publish(_announce("10.99.100.1/32", at=9.0))
    async with running(second):
        await wait_until_async(lambda: second.settled, within=20, poll=0.02)
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 3))
    assert set(late) == {STATUS, PEER, ROUTE1}
    assert late[ROUTE1]["at"] == 9.0  # type: ignore[index]


PUBLISHER_SCRIPT = """
import asyncio, sys
from bgpd.model import MQTTConfig, NodeName
from bgpd.mqtt import MQTTPublisher
pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=int(sys.argv[1])), node=NodeName("node-a"))
asyncio.run(pub.run())
"""


async def test_last_will_marks_the_node_offline_when_the_speaker_dies(broker: Broker) -> None:
    """A crashed speaker cannot say goodbye: the broker publishes our will, retained."""
    broker.start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PUBLISHER_SCRIPT,
        str(broker.port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Live or retained, depending on who connects first.
        got = await _collect(broker.port, lambda g: any(p == b"online" for _, p, _ in g), quiet=0)
        assert [(t, p) for t, p, _ in got if t == STATUS] == [(STATUS, b"online")]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)
    got = await _collect(broker.port, lambda g: (STATUS, b"offline", True) in g, quiet=0)
    assert _retained(got) == {STATUS: "offline"}


def _gauge_connected(pub: MQTTPublisher) -> float | None:
    """``kube_bgpd_mqtt_connected`` as a scrape reads it."""
    registry = CollectorRegistry()
    registry.register(MQTTCollector(pub))
    return registry.get_sample_value("kube_bgpd_mqtt_connected")


async def _one_route_settled(pub: MQTTPublisher) -> None:
    """Connected, one route announced, and the broker holds it."""
    await wait_until_async(lambda: pub.connected, within=20, poll=0.02, what="connected")
    pub.publish(_announce("10.99.100.1/32"))
    await wait_until_async(lambda: pub.settled, within=20, poll=0.02, what="settled")


async def test_broker_restart_reconnects_without_waiting_for_an_event(broker: Broker) -> None:
    """Issue 15: after a broker restart nothing reconnected until the next event while
    the gauge stayed 1. Now the loss is seen while idle, the gauge drops at once, and
    the publisher reconnects and republishes its state with no new event."""
    broker.start()
    pub = _publisher(broker.port)
    async with running(pub):
        await _one_route_settled(pub)
        assert _gauge_connected(pub) == 1

        broker.kill()  # by PID; no event is published from here on
        await wait_until_async(
            lambda: not pub.connected, within=10, poll=0.02, what="the loss noticed while idle"
        )
        assert _gauge_connected(pub) == 0
        broker.start()  # empty: persistence false
        await wait_until_async(
            lambda: pub.settled and pub.connects == 2, within=20, poll=0.02, what="reconnected"
        )
        assert _gauge_connected(pub) == 1
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 2))
    assert set(late) == {STATUS, "kube-bgpd/node-a/routes/10.99.100.1_32"}
    assert late[STATUS] == "online"


async def test_client_id_takeover_is_noticed_and_taken_back(broker: Broker) -> None:
    """Another client connecting with our client ID makes the broker close our
    connection: the publisher notices at once (no event needed), reconnects (taking the
    ID back) and republishes the state, including "online" over our Last Will's
    "offline"."""
    broker.start()
    pub = _publisher(broker.port)
    async with running(pub):
        await _one_route_settled(pub)
        intruder = aiomqtt.Client("127.0.0.1", broker.port, identifier=f"kube-bgpd-{NODE}")
        with contextlib.suppress(aiomqtt.MqttError):
            async with intruder:
                await wait_until_async(
                    lambda: pub.connects == 2 and pub.settled,
                    within=20,
                    poll=0.02,
                    what="the ID taken back",
                )
        await wait_until_async(lambda: pub.settled, within=20, poll=0.02, what="settled")
        assert _gauge_connected(pub) == 1
        late = _retained(await _collect(broker.port, lambda g: len(g) >= 2))
    assert late[STATUS] == "online"
    assert "kube-bgpd/node-a/routes/10.99.100.1_32" in late
