"""MQTT's route topics follow what the router was sent: the ExaBGP driver against a real
router (GoBGP in the lab's namespaces), its events published by MQTTPublisher to a real
mosquitto on 127.0.0.1 (started and killed by PID, test_mqtt.Broker).

The defect this guards: the route topics said ``announced`` when ExaBGP accepted a route,
so with the session down (or not up yet) MQTT said announced to a router that had
nothing. Now they say what ``kube_bgpd_bgp_prefixes_advertised`` counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from test_exabgp_driver import in_thread, net, router_peer, routes, running
from test_mqtt import Broker, Received, _collect, _free_port

from bgpd.exabgp.runtime import ExaBGPRuntime
from bgpd.model import MQTTConfig, NodeName, PeerName, RouteAttributes, SessionState
from bgpd.mqtt import MQTTPublisher
from kbgpd_lab.kit.waiting import wait_until_async
from kbgpd_lab.lab.routers import Router
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(180)]

TOR = PeerName("tor")
ATTRS = RouteAttributes(communities=("65000:100",), med=20)
PREFIXES = ["10.99.100.1/32", "10.99.100.2/32"]
ROUTE_TOPICS = {
    "kube-bgpd/node1/routes/10.99.100.1_32",
    "kube-bgpd/node1/routes/10.99.100.2_32",
}
PEER_TOPIC = "kube-bgpd/node1/peers/tor"


@pytest.fixture
def mqtt_broker(tmp_path: Path) -> Iterator[Broker]:
    workdir = tmp_path / "broker"
    workdir.mkdir()
    b = Broker(_free_port(), workdir)
    b.start()
    try:
        yield b
    finally:
        b.kill()


@contextlib.asynccontextmanager
async def publishing(rt: ExaBGPRuntime, port: int) -> AsyncIterator[MQTTPublisher]:
    """The speaker's wiring (bgpd.speaker.app): the driver's events and its peers'
    counts into a publisher connected to the broker."""
    pub = MQTTPublisher(
        MQTTConfig(host="127.0.0.1", port=port),
        node=NodeName("node1"),
        backoff_base=0.05,
        backoff_cap=0.4,
        timeout=2.0,
    )
    events = rt.driver.subscribe()
    tasks = [
        asyncio.create_task(pub.run(), name="mqtt"),
        asyncio.create_task(pub.follow(events), name="mqtt-events"),
        asyncio.create_task(pub.follow_peers(rt.driver.peer_status, every=0.1), name="peers"),
    ]
    try:
        yield pub
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        rt.driver.unsubscribe(events)


async def retained_now(
    pub: MQTTPublisher, port: int, counts: tuple[int, int]
) -> dict[str, dict[str, object]]:
    """The retained documents a new subscriber reads, once the publisher sent all it has
    and the peer document shows these (accepted, advertised) counts."""

    def peer_counts(got: Received) -> bool:
        docs = [json.loads(p) for t, p, _ in got if t == PEER_TOPIC and p]
        return bool(docs) and (docs[-1]["accepted"], docs[-1]["advertised"]) == counts

    await wait_until_async(lambda: pub.settled, what="publisher settled", within=20)
    got = await _collect(port, peer_counts, quiet=0.5)
    return {t: json.loads(p) for t, p, _ in got if "/routes/" in t and p}


async def advertised(rt: ExaBGPRuntime, n: int) -> None:
    await wait_until_async(
        lambda: rt.driver.peer_status()[TOR].advertised == n, what=f"{n} advertised", within=30
    )


async def router_back(router: Router, rt: ExaBGPRuntime, pub: MQTTPublisher, port: int) -> None:
    """Start the router: once it has both routes and ExaBGP reported sending them, both
    route topics are retained, announced to the peer with their attributes."""
    await in_thread(router.start)
    await in_thread(router.wait_rib, lambda r: len(r) == 2, 30)
    await advertised(rt, 2)
    docs = await retained_now(pub, port, (2, 2))
    assert set(docs) == ROUTE_TOPICS
    assert {str(net(str(d["prefix"]))) for d in docs.values()} == set(PREFIXES)
    for doc in docs.values():
        assert (doc["state"], doc["peer"], doc["med"]) == ("announced", "tor", 20)
        assert doc["communities"] == ["65000:100"]


async def test_route_topics_follow_the_session(
    topology: Topology, tmp_path: Path, gobgp_router: Router, mqtt_broker: Broker
) -> None:
    """Accepted while the session is not up: no route topic. Sent to the router: both
    announced, with their attributes. The router goes away (the session down): the
    retained route topics cleared while ExaBGP still holds the routes. The router back:
    announced again once ExaBGP re-sent them."""
    port = mqtt_broker.port
    await in_thread(gobgp_router.stop)
    async with (
        running(topology, tmp_path, (router_peer(topology),)) as rt,
        publishing(rt, port) as pub,
    ):
        rt.driver.apply(routes("tor", PREFIXES, ATTRS))
        assert await rt.driver.wait_converged(20)
        assert rt.driver.peer_status()[TOR].state is not SessionState.UP
        assert await retained_now(pub, port, (2, 0)) == {}, "announced before the session"

        await router_back(gobgp_router, rt, pub, port)

        await in_thread(gobgp_router.stop)
        await advertised(rt, 0)
        assert rt.driver.accepted() == routes("tor", PREFIXES, ATTRS)
        assert await retained_now(pub, port, (2, 0)) == {}, "kept after the session went down"

        await router_back(gobgp_router, rt, pub, port)
