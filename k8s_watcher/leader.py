"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it.

Exactly one controller may allocate IPs at a time, or two could hand the same IP to two
Services. The Lease is the lock:

* spec.holderIdentity names the leader; leaseDurationSeconds says how long others must
  wait after its last renewal; renewTime, acquireTime and leaseTransitions are kept as
  client-go keeps them, so `kubectl get lease` reads the same as for any controller;
* every write is a PUT carrying the resourceVersion we read (optimistic concurrency): if
  two candidates race, the API server accepts one and answers 409 to the other;
* expiry is judged on our own monotonic clock from the moment we saw the record change,
  never by comparing the record's renewTime with our wall clock, so clock skew between
  nodes cannot make two leaders (client-go's observedTime rule);
* the leader renews every retry period; if it cannot renew within the renew deadline
  (shorter than the lease duration) it stops leading *before* anyone else may take over;
* on a graceful stop the leader releases the Lease (empty holder, 1 s duration) so a
  standby takes over at its next retry instead of waiting out the lease.

This module must not know what leading means: it runs the coroutine it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bgpd.logs import log
from k8s_watcher.client import KubeClient, object_path
from k8s_watcher.errors import Conflict, KubernetesError, NotFound
from k8s_watcher.writer import micro_time

logger = logging.getLogger(__name__)

LEASE_API = "coordination.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class LeaderTiming:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration "
                f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration})"
            )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str | None
    duration: int
    renew_time: str | None
    acquire_time: str | None
    transitions: int
    resource_version: str | None

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=spec.get("holderIdentity") or None,
            duration=duration if isinstance(duration, int) else 0,
            renew_time=spec.get("renewTime"),
            acquire_time=spec.get("acquireTime"),
            transitions=transitions if isinstance(transitions, int) else 0,
            resource_version=meta.get("resourceVersion"),
        )


class LeaderElector:
    """Campaign for one Lease; run a coroutine while holding it."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaderTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or LeaderTiming()
        self._clock = clock
        self._on_change = on_change
        self._observed: tuple[str | None, str | None, str | None] | None = None
        self._observed_at = 0.0
        self._leading = False
        #: Number of times this elector became leader (tests, metrics).
        self.terms = 0

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def _path(self) -> str:
        return object_path(LEASE_API, "leases", namespace=self.namespace, name=self.name)

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self.terms += 1
        log(
            logger,
            logging.INFO,
            "leader.acquired" if leading else "leader.lost",
            lease=f"{self.namespace}/{self.name}",
            identity=self.identity,
        )
        if self._on_change is not None:
            self._on_change(leading)

    # ------------------------------------------------------------------ main loop

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign forever; while leader, run `lead()` and keep renewing.

        If renewal fails past the deadline, `lead()` is cancelled and we campaign again.
        If `lead()` returns or raises, we release the Lease and return or re-raise. When
        cancelled (graceful stop), `lead()` is cancelled first, then the Lease released.
        """
        while True:
            await self._acquire()
            try:
                async with asyncio.TaskGroup() as tg:
                    lead_task = tg.create_task(self._lead(lead), name="leader-lead")
                    tg.create_task(self._renew_until_lost(lead_task), name="leader-renew")
            except BaseException:
                self._set_leading(False)
                with contextlib.suppress(KubernetesError):
                    await asyncio.shield(self.release())
                raise
            if lead_task.done() and not lead_task.cancelled():
                # lead() finished on its own: step down cleanly and stop campaigning.
                self._set_leading(False)
                await self.release()
                return
            # Lost the lease: lead() was cancelled; campaign again.
            self._set_leading(False)

    async def _lead(self, lead: Callable[[], Awaitable[None]]) -> None:
        await lead()

    async def _renew_until_lost(self, lead_task: asyncio.Task[None]) -> None:
        t = self.timing
        last_renew = self._clock()
        while not lead_task.done():
            await asyncio.sleep(t.retry_period)
            try:
                async with asyncio.timeout(
                    max(0.1, t.renew_deadline - (self._clock() - last_renew))
                ):
                    ok = await self.try_acquire_or_renew()
            except (KubernetesError, TimeoutError) as exc:
                ok = False
                log(logger, logging.WARNING, "leader.renew_failed", error=str(exc))
            now = self._clock()
            if ok:
                last_renew = now
            elif self._observed is not None and self._observed[0] not in (None, self.identity):
                # Someone else holds it now: we were deposed; stop at once.
                break
            if now - last_renew >= t.renew_deadline:
                break
        lead_task.cancel()

    async def _acquire(self) -> None:
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self._set_leading(True)
                    return
            except KubernetesError as exc:
                log(logger, logging.WARNING, "leader.acquire_failed", error=exc.message)
            await asyncio.sleep(self.timing.retry_period)

    # ------------------------------------------------------------------ one step

    async def try_acquire_or_renew(self) -> bool:
        """One attempt to take or keep the Lease; True if we hold it afterwards."""
        now = micro_time()
        duration = max(1, round(self.timing.lease_duration))
        try:
            current = await self._client.request("GET", self._path, what="get lease")
        except NotFound:
            spec = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            try:
                created = await self._client.request(
                    "POST",
                    object_path(LEASE_API, "leases", namespace=self.namespace),
                    body=self._body(spec, None),
                    what="create lease",
                )
            except Conflict:
                return False
            self._observe(LeaseRecord.from_api(created))
            return True

        record = LeaseRecord.from_api(current)
        self._observe(record)
        held_by_other = record.holder is not None and record.holder != self.identity
        if held_by_other and self._clock() < self._observed_at + max(record.duration, duration):
            return False
        mine = record.holder == self.identity
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": duration,
            "acquireTime": record.acquire_time if mine and record.acquire_time else now,
            "renewTime": now,
            "leaseTransitions": record.transitions if mine else record.transitions + 1,
        }
        try:
            updated = await self._client.request(
                "PUT", self._path, body=self._body(spec, record), what="update lease"
            )
        except Conflict:
            # Someone wrote since our read: whoever it was, it is not us.
            return False
        self._observe(LeaseRecord.from_api(updated))
        return True

    def _body(self, spec: dict[str, Any], record: LeaseRecord | None) -> dict[str, Any]:
        """A whole Lease; with the record's resourceVersion, a PUT fails (409) if anyone
        wrote since we read it."""
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record is not None:
            metadata["resourceVersion"] = record.resource_version
        return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata, "spec": spec}

    def _observe(self, record: LeaseRecord) -> None:
        key = (record.holder, record.renew_time, record.resource_version)
        if key != self._observed:
            self._observed = key
            self._observed_at = self._clock()

    async def release(self) -> None:
        """Give the Lease up if we hold it, so a standby need not wait it out."""
        try:
            current = await self._client.request(
                "GET", self._path, request_timeout=5.0, what="get lease"
            )
        except NotFound:
            return
        record = LeaseRecord.from_api(current)
        if record.holder != self.identity:
            return
        now = micro_time()
        spec = {
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": record.transitions,
        }
        try:
            await self._client.request(
                "PUT",
                self._path,
                body=self._body(spec, record),
                request_timeout=5.0,
                what="release lease",
            )
        except Conflict:
            return
        log(logger, logging.INFO, "leader.released", lease=f"{self.namespace}/{self.name}")
