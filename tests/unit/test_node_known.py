"""SpeakerSource.node_known: this Node is known once the Nodes are listed, while the
Services and EndpointSlices are not (the speaker starts ExaBGP then: bgpd.speaker.app),
and never before the Nodes are listed.

A fake client answers the Nodes' list at once and holds every other list until the test
lets it go; watches stay open and quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

from bgpd.model import Config, NodeName
from k8s_watcher.cache import SpeakerSource
from k8s_watcher.client import KubeClient

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "uid": "u-n1", "resourceVersion": "5"},
    "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
}


class HeldClient:
    """Lists the Nodes (``nodes``: their items) and holds every other list until
    ``release`` is set; a watch stays open and sends nothing."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.release = asyncio.Event()
        self.nodes_release = asyncio.Event()
        self.nodes_release.set()

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        del method, kw
        if path.endswith("/nodes"):
            await self.nodes_release.wait()
            items = self.nodes
        else:
            await self.release.wait()
            items = []
        return {"items": items, "metadata": {"resourceVersion": "5"}}

    @contextlib.asynccontextmanager
    async def stream_lines(self, path: str, **kw: Any) -> AsyncIterator[AsyncIterator[bytes]]:
        del path, kw

        async def quiet() -> AsyncIterator[bytes]:
            await asyncio.Event().wait()
            yield b""

        yield quiet()

    async def close(self) -> None:
        return None


def source_on(client: HeldClient, node: str = "n1") -> SpeakerSource:
    return SpeakerSource(
        cast(KubeClient, client), config=Config(), node=NodeName(node), events=False
    )


async def test_the_node_is_known_before_the_services_are_listed() -> None:
    client = HeldClient([NODE])
    source = source_on(client)
    client.nodes_release.clear()
    task = asyncio.create_task(source.run())
    try:
        known = asyncio.create_task(source.node_known())
        await asyncio.sleep(0)
        for _ in range(20):  # the Nodes' list is held: nothing may be known yet
            await asyncio.sleep(0)
            assert not known.done()
        client.nodes_release.set()
        async with asyncio.timeout(10):
            node = await known
        assert node is not None
        assert node.name == "n1"
        assert not source.synced  # the Services and EndpointSlices are still held
        client.release.set()
        async with asyncio.timeout(10):
            await source.wait_changed()
        assert source.synced
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_missing_node_is_known_as_none() -> None:
    client = HeldClient([NODE])
    source = source_on(client, "elsewhere")
    task = asyncio.create_task(source.run())
    try:
        async with asyncio.timeout(10):
            assert await source.node_known() is None
        assert not source.synced
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
