"""A cluster source for the speaker's tests without processes: a fixed snapshot, never
stale, whose own loop does nothing (bgpd.reconciler.SnapshotSource and
bgpd.speaker.source.RunnableSource). Builders only; no logic under test lives here."""

from __future__ import annotations

import asyncio

from bgpd.model import ClusterSnapshot


class StillSource:
    """`synced` as given; wait_changed() reports `changes` changes at once, then none."""

    def __init__(
        self, cluster: ClusterSnapshot | None = None, *, synced: bool = False, changes: int = 0
    ) -> None:
        self.cluster = ClusterSnapshot() if cluster is None else cluster
        self._synced = synced
        self._changes = changes

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def stale(self) -> bool:
        return False

    def snapshot(self) -> ClusterSnapshot:
        return self.cluster

    async def wait_changed(self) -> float:
        if self._changes:
            self._changes -= 1
            return 0.0
        await asyncio.Event().wait()
        return 0.0

    async def run(self) -> None:
        await asyncio.Event().wait()

    def reload(self) -> None:
        return None
