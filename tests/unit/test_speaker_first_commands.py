"""A reconciler pass hands its routes to the driver, and the driver's sender writes
ExaBGP's first commands, before the rest of the pass runs (the decision's Events, the
metrics, the last valid attributes written to the work directory): at the first sync
ExaBGP is idle until it gets a command, and none of that work is ExaBGP's. The source's
Events are written only once the first decision's routes are accepted. What must not
move with it: a node annotated to drain sends its first routes drained, never plain
first. Without processes: a stand-in for the helper on the driver's socket records what
the driver writes and answers the idle probe, and the route commands only when asked."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from pathlib import Path

from clusterkit import adv, config, ep, eps, peer, pool, svc
from sourcekit import StillSource

from bgpd.attributes import GRACEFUL_SHUTDOWN
from bgpd.model import (
    ClusterSnapshot,
    Decision,
    IPNetwork,
    Node,
    NodeName,
    PeerName,
    SpeakerConfig,
)
from bgpd.objects import build_snapshot
from bgpd.speaker.app import Speaker
from bgpd.speaker.drain import ANNOTATION_DRAIN
from k8s_watcher.writer import EventRecorder, EventType, ObjectRef
from kbgpd_lab.kit.waiting import wait_until_async

NODE = NodeName("n1")
TOR = PeerName("tor")


def snapshot(node_annotations: Mapping[str, str]) -> ClusterSnapshot:
    """Two Services, each announced from n1 (a Local endpoint there)."""
    services = [svc(f"default/s{i}", f"198.51.100.{i + 1}", local=True) for i in range(2)]
    slices = [eps(f"default/s{i}", ep("n1")) for i in range(2)]
    node = Node(
        name=NODE,
        addresses=(("InternalIP", "192.0.2.10"),),
        annotations=node_annotations,
    )
    return build_snapshot(services, slices, [node])


class SyncedSource(StillSource):
    """A synced cluster with one change to decide; it observes each decision as the
    Kubernetes source does (its Events), noting how many of the driver's commands were in
    flight to ExaBGP by then."""

    def __init__(self, cluster: ClusterSnapshot) -> None:
        super().__init__(cluster, synced=True, changes=1)
        self.speaker: Speaker | None = None
        self.in_flight_when_observed: list[int] = []
        #: "hold" and "release" calls, each with the routes ExaBGP had accepted by then.
        self.events_held: list[tuple[str, int]] = []

    def _accepted(self) -> int:
        return 0 if self.speaker is None else len(self.speaker.driver.accepted().get(TOR, {}))

    def hold_events(self) -> None:
        self.events_held.append(("hold", self._accepted()))

    def release_events(self) -> None:
        self.events_held.append(("release", self._accepted()))

    def observe_decision(
        self,
        decision: Decision,
        changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None = None,
    ) -> None:
        assert self.speaker is not None
        self.in_flight_when_observed.append(self.speaker.driver.core.in_flight)


def speaker(tmp_path: Path, source: SyncedSource) -> Speaker:
    # A session from n1's address without asking the kernel (bgpd.peers).
    tor = replace(
        peer(TOR, "192.0.2.1", peer_asn=64500),
        source_address=ipaddress.ip_address("192.0.2.10"),
    )
    s = Speaker(
        config=config(
            pools=[pool("web", "198.51.100.0/24")],
            peers=[tor],
            advertisements=[adv()],
            speaker=SpeakerConfig(work_dir=tmp_path),
        ),
        config_paths=[],
        node=NODE,
        source=source,
        work_dir=tmp_path,
        status_address="127.0.0.1:0",
    )
    source.speaker = s
    return s


@contextlib.asynccontextmanager
async def helper_connected(s: Speaker, *, answer: bool = False) -> AsyncIterator[list[str]]:
    """The driver's socket and sender, and a helper that records every line it gets and
    answers the idle probe, and with `answer` every command, ``done``."""
    lines: list[str] = []
    driver = s.driver
    await driver.start()
    sender = asyncio.create_task(driver.run())
    reader, writer = await asyncio.open_unix_connection(str(driver.socket_path))

    async def record() -> None:
        while line := await reader.readline():
            text = line.decode().strip()
            lines.append(text)
            if answer or text == "#":  # the idle probe: answered as ExaBGP does
                writer.write(b"done\n")

    recorder = asyncio.create_task(record())
    try:
        writer.write(json.dumps({"generation": 0, "pid": 0}).encode() + b"\n")
        await wait_until_async(lambda: driver.connected, what="the helper connected")
        yield lines
    finally:
        for task in (sender, recorder):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        writer.close()
        # The driver's side of the connection ends once it reads the end of it.
        await wait_until_async(lambda: not driver.connected, what="the helper gone")
        await driver.close()


async def first_pass(s: Speaker) -> None:
    """The speaker's reconciler task, until its first pass was applied and recorded."""
    task = asyncio.create_task(s._reconcile())
    try:
        async with asyncio.timeout(10):
            await s._first_decision.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def announces(lines: list[str]) -> list[str]:
    """The announces written so far, once there is one."""
    return await wait_until_async(
        lambda: [x for x in lines if " announce " in x], what="an announce written"
    )


async def test_first_commands_are_written_before_the_pass_is_recorded(tmp_path: Path) -> None:
    source = SyncedSource(snapshot({}))
    s = speaker(tmp_path, source)
    async with helper_connected(s) as lines:
        await first_pass(s)
        (written,) = await announces(lines)
    # Both routes share their attributes: one command, in flight when the Events came.
    assert source.in_flight_when_observed == [1]
    assert written.endswith("nlri 198.51.100.1/32 198.51.100.2/32")


async def test_a_node_annotated_to_drain_sends_its_first_routes_drained(
    tmp_path: Path,
) -> None:
    source = SyncedSource(snapshot({ANNOTATION_DRAIN: "true"}))
    s = speaker(tmp_path, source)
    async with helper_connected(s) as lines:
        await first_pass(s)
        written = await announces(lines)
    assert all(f"community [ {GRACEFUL_SHUTDOWN} ]" in x for x in written), written


async def test_events_are_written_once_the_first_routes_are_accepted(tmp_path: Path) -> None:
    source = SyncedSource(snapshot({}))
    s = speaker(tmp_path, source)
    assert source.events_held == [("hold", 0)]  # from the start
    release = asyncio.create_task(s._release_events(source))
    try:
        async with helper_connected(s, answer=True):
            await first_pass(s)
            async with asyncio.timeout(10):
                await release
    finally:
        release.cancel()
    assert source.events_held == [("hold", 0), ("release", 2)]


async def test_a_stop_releases_the_events(tmp_path: Path) -> None:
    source = SyncedSource(snapshot({}))
    s = speaker(tmp_path, source)
    s.request_stop()
    assert source.events_held == [("hold", 0), ("release", 0)]


class RecordingClient:
    """Stands in for KubeClient: the Event writes it was asked for."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    async def request(self, method: str, path: str, **kwargs: object) -> dict[str, object]:
        self.requests.append(f"{method} {path}")
        return {}


async def test_a_held_recorder_writes_nothing_until_released() -> None:
    client = RecordingClient()
    recorder = EventRecorder(client, component="test")  # type: ignore[arg-type]
    recorder.hold()
    writer = asyncio.create_task(recorder.run())
    try:
        assert recorder.record(ObjectRef.node("n1"), EventType.NORMAL, "Test", "held")
        # Taken from the queue, then held.
        await wait_until_async(recorder._queue.empty, what="the Event taken")
        assert client.requests == []
        recorder.release()
        async with asyncio.timeout(10):
            await recorder.flush()
        assert client.requests == ["POST /api/v1/namespaces/default/events"]
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
