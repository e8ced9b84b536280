"""What the driver core's route events cost, without processes (not a test).

Run from the repository root:

    .venv/bin/python bench/bench_route_events.py [--routes 30000] [--repeat 5] [--mqtt]
        [--per-update 400] [--flush-every N]
    .venv/bin/python bench/bench_route_events.py --retained-memory --peers 2 [--routes 30000]

The sans-I/O DriverCore (bgpd.exabgp.core) with one IPv4 peer: ``--routes`` /32s
applied and every command answered ``done`` (batches of 100), the session up, ExaBGP's
UPDATE reports of ``--per-update`` prefixes each (400: its packing for /32s with one
attribute set; 1: an IPv6 /128's, docs/benchmarks.md) fed to ``on_event`` and flushed
every ``--flush-every`` reports (as the transport does after each read; default: once
at the end), then the session down. Per phase: the CPU seconds of this process
(``time.process_time``, robust on a shared machine) and the events the core emitted
(what every subscriber queues), by type. With ``--mqtt`` the route events also go
through MQTTPublisher.publish (no broker: its retained state), as the speaker's MQTT
task does. The median of ``--repeat`` runs is printed.

``--retained-memory``: instead, the memory (tracemalloc) an MQTTPublisher holds after
``--routes`` announces to each of ``--peers`` peers: its retained state (one topic per
prefix) and which peers have each prefix.
"""

from __future__ import annotations

import argparse
import collections
import gc
import ipaddress
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from bgpd.exabgp.core import DriverCore
from bgpd.exabgp.render import Neighbor
from bgpd.model import (
    BGPPeer,
    DriverEvent,
    MQTTConfig,
    NodeName,
    PeerName,
    RouteAttributes,
    RouteChange,
    RouteEvent,
    RouteEvents,
)
from bgpd.mqtt import MQTTPublisher

PEER = PeerName("tor")
LOCAL = "192.0.2.10"
ROUTER = "192.0.2.1"


def neighbor() -> Neighbor:
    peer = BGPPeer(
        name=PEER, peer_address=ipaddress.ip_address(ROUTER), my_asn=65000, peer_asn=65001
    )
    return Neighbor(
        peer=peer,
        local_address=ipaddress.ip_address(LOCAL),
        router_id=ipaddress.IPv4Address(LOCAL),
    )


def state_doc(state: str) -> dict[str, Any]:
    return {
        "type": "state",
        "neighbor": {"address": {"peer": ROUTER, "local": LOCAL}, "state": state},
    }


def update_doc(prefixes: list[str]) -> dict[str, Any]:
    nlri = [{"nlri": p} for p in prefixes]
    return {
        "type": "update",
        "neighbor": {
            "address": {"local": LOCAL, "peer": ROUTER},
            "direction": "send",
            "message": {"update": {"announce": {"ipv4 unicast": {LOCAL: nlri}}}},
        },
    }


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def run(
    routes: int, mqtt: bool, per_update: int, flush_every: int | None
) -> tuple[dict[str, float], collections.Counter[str]]:
    events: list[DriverEvent] = []
    pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NodeName("n1"))
    counts: collections.Counter[str] = collections.Counter()

    def emit(event: DriverEvent) -> None:
        counts[type(event).__name__] += 1
        if mqtt and isinstance(event, RouteEvents):
            for route in event.events():
                pub.publish(route)
        else:
            events.append(event)

    c = DriverCore(node=NodeName("n1"), window=4, batch=100, probe_interval=None, emit=emit)
    c.configure([neighbor()])
    c.reset(0.0)
    c.connect()
    attrs = RouteAttributes()
    nets = [ipaddress.IPv4Network((0x0A000000 + i, 32)) for i in range(routes)]
    texts = [str(n) for n in nets]
    docs = [update_doc(texts[i : i + per_update]) for i in range(0, routes, per_update)]
    every = flush_every or len(docs)
    # The transport flushes after the lines at hand (a core without the call, as before
    # it existed, emitted per report).
    flush = getattr(c, "flush_events", lambda: None)
    c.apply({PEER: dict.fromkeys(nets, attrs)})

    def answer() -> None:
        while commands := c.next_commands(0.0):
            for _ in commands:
                c.on_ack(True, 1.0)

    def reports() -> None:
        for i, doc in enumerate(docs, 1):
            c.on_event(doc, 3.0)
            if i % every == 0 or i == len(docs):
                flush()

    times = {
        "answers": cpu(answer),
        "up": cpu(lambda: c.on_event(state_doc("up"), 2.0)),
        "reports": cpu(reports),
        "down": cpu(lambda: c.on_event(state_doc("down"), 4.0)),
    }
    assert c.peer_status()[PEER].accepted == routes
    return times, counts


def retained_memory(routes: int, peers: int) -> None:
    pub = MQTTPublisher(MQTTConfig(host="127.0.0.1", port=1), node=NodeName("n1"), max_queue=1)
    attrs = RouteAttributes()
    nets = [ipaddress.IPv4Network((0x0A000000 + i, 32)) for i in range(routes)]
    gc.collect()
    tracemalloc.start()
    for i in range(peers):
        peer = PeerName(f"tor{i}")
        for n in nets:
            pub.publish(RouteEvent(NodeName("n1"), peer, n, RouteChange.ANNOUNCED, attrs, 1.0))
    pub._queue.clear()  # the one event the bounded queue kept: not retained state
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"retained topics {len(pub._retained)}, held {held / 2**20:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--routes", type=int, default=30000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mqtt", action="store_true")
    ap.add_argument("--per-update", type=int, default=400)
    ap.add_argument("--flush-every", type=int, default=None)
    ap.add_argument("--retained-memory", action="store_true")
    ap.add_argument("--peers", type=int, default=1)
    args = ap.parse_args()
    if args.retained_memory:
        retained_memory(args.routes, args.peers)
        return
    runs = [
        run(args.routes, args.mqtt, args.per_update, args.flush_every) for _ in range(args.repeat)
    ]
    for phase in runs[0][0]:
        values = [t[phase] for t, _ in runs]
        print(
            f"{phase:8s} CPU s median {statistics.median(values):.3f} "
            f"(min {min(values):.3f}, max {max(values):.3f})"
        )
    print("events", dict(sorted(runs[0][1].items())))


if __name__ == "__main__":
    main()
