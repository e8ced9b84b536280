"""ClusterConfig: the configuration read live from the cluster (`--config-from-cluster`).

One informer per configuration kind (MetalLB's IPAddressPool, BGPPeer v1beta2,
BGPAdvertisement, Community, BFDProfile, and kube-bgpd's SpeakerConfig), in one
namespace, with the informers' error classes, back-off and sync tracking. The objects go
through bgpd.config.cluster.resolve, the file's parser and checks with the per-object
last-valid rule; each new valid Config (compared as a parsed Config, so a status-only or
metadata-only change hands nothing on) goes to the listeners, debounced.

What never takes routes down:

* an invalid object: its last valid version stays in force; it is reported with a log
  line (`config.object_rejected`, naming the object and field), a Warning Event on the
  object (reason `InvalidConfiguration`) and, for a SpeakerConfig when `write_status`
  is set (the controller), a `status.conditions` entry of type `Accepted`;
* a watch failure (the API down, 404 because the CRD was deleted): the informers keep
  their cache, the running configuration stays, and `stale_reason()` says why;
* a change that leaves no IPAddressPool or no BGPPeer while the configuration in force
  has some (every object deleted, or the CRDs): not applied until every kind was listed
  again successfully after it was seen, and still says so then.

This module decides nothing about routes; its only writes are Events and that status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from bgpd.config.advertisement import ADVERTISEMENT
from bgpd.config.bfd import BFD_PROFILE
from bgpd.config.cluster import ObjectKey, RawObject, Resolution, object_key, resolve
from bgpd.config.community import COMMUNITY
from bgpd.config.emptying import emptying_refusal
from bgpd.config.fields import KindTable
from bgpd.config.issues import ConfigIssue
from bgpd.config.peer import PEER_V1BETA2
from bgpd.config.pool import POOL
from bgpd.config.speaker_config import SPEAKER
from bgpd.logs import log
from bgpd.model import Config
from k8s_watcher.client import MERGE_PATCH, KubeClient, object_path
from k8s_watcher.errors import KubernetesError
from k8s_watcher.informer import Informer, InformerObserver, InformerTiming, Kind
from k8s_watcher.namespaces import DEFAULT_CONFIG_NAMESPACE
from k8s_watcher.writer import EventRecorder, EventType, ObjectRef, rfc3339

logger = logging.getLogger(__name__)


#: The watched kinds: (field table, plural). BGPPeer in its storage version v1beta2.
CONFIG_KINDS: Final[tuple[tuple[KindTable, str], ...]] = (
    (POOL, "ipaddresspools"),
    (PEER_V1BETA2, "bgppeers"),
    (ADVERTISEMENT, "bgpadvertisements"),
    (COMMUNITY, "communities"),
    (BFD_PROFILE, "bfdprofiles"),
    (SPEAKER, "speakerconfigs"),
)

#: Metadata the parser reads (and uid, for Events); everything else the server writes.
_KEPT_METADATA: Final = ("name", "namespace", "labels", "annotations", "uid")
#: A kind whose objects must not all vanish without a confirming list (see the docstring).
_CONFIRMED_KINDS: Final = ("IPAddressPool", "BGPPeer")
#: Reason of the Warning Event on an invalid object.
INVALID_REASON: Final = "InvalidConfiguration"
#: The condition type written on SpeakerConfig's status.
CONDITION_TYPE: Final = "Accepted"


def config_object(raw: Mapping[str, Any]) -> RawObject:
    """What the parser reads of an object: apiVersion, kind, the kept metadata, spec.
    Status and server-written metadata are dropped here, so the informer drops events
    that change only those (its equal-object rule)."""
    meta = raw.get("metadata")
    kept = (
        {k: v for k, v in meta.items() if k in _KEPT_METADATA} if isinstance(meta, Mapping) else {}
    )
    out = {k: raw[k] for k in ("apiVersion", "kind", "spec") if k in raw}
    out["metadata"] = kept
    return out


def config_kinds(namespace: str) -> tuple[Kind[RawObject], ...]:
    return tuple(
        Kind(table.kind, table.api_version, plural, True, config_object, namespace=namespace)
        for table, plural in CONFIG_KINDS
    )


#: listener(config, warnings): a new valid configuration is in force.
ConfigListener = Callable[[Config, tuple[ConfigIssue, ...]], None]


class ClusterConfig:
    """The configuration objects of one namespace, resolved into the Config in force.
    Run `run()` as a task; `wait_config()` returns once the first one is in force."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str = DEFAULT_CONFIG_NAMESPACE,
        timing: InformerTiming | None = None,
        observer: InformerObserver | None = None,
        recorder: EventRecorder | None = None,
        write_status: bool = False,
        debounce: float = 0.2,
        confirm_poll: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self._recorder = recorder
        self._write_status = write_status
        self._debounce = debounce
        self._confirm_poll = confirm_poll
        self._clock = clock
        self._changed = asyncio.Event()
        self._first = asyncio.Event()
        self.listeners: list[ConfigListener] = []
        #: Why the objects' configuration is refused by the emptying rule (None: it is not).
        self.refused: str | None = None
        self.informers: list[Informer[RawObject]] = [
            Informer(
                client,
                kind,
                self._on_object,
                timing=timing,
                on_state=self._changed.set,
                observer=observer,
            )
            for kind in config_kinds(namespace)
        ]
        #: The Config in force and the object versions it was built from.
        self.config: Config | None = None
        self.in_force: Mapping[ObjectKey, RawObject] = {}
        self.last: Resolution | None = None
        #: Objects reported invalid, with the issues reported (reported again on change).
        self._reported: dict[ObjectKey, tuple[ConfigIssue, ...]] = {}
        #: Lists per informer when a vanishing of every pool or peer was seen, until
        #: every kind listed again (None: nothing to confirm).
        self._confirm: list[int] | None = None
        self.applied = 0
        #: SpeakerConfig conditions written: key -> (accepted, message).
        self._conditions: dict[ObjectKey, tuple[bool, str]] = {}
        self._status_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ state

    @property
    def synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    def stale_reason(self) -> str:
        """Why the configuration in force is not what the cluster holds now ("" if it is)."""
        if self._confirm is not None:
            return "every IPAddressPool or BGPPeer vanished; waiting for a list to confirm it"
        if self.refused is not None:
            return f"refused: {self.refused}"
        lost = [i.kind.name for i in self.informers if i.has_synced and not i.connected]
        if lost:
            return f"watch of {', '.join(lost)} failed; keeping the last configuration"
        if self.last is not None and self.last.config is None:
            return f"no valid configuration: {self.last.errors[0]}"
        if self.last is not None and self.last.rejected:
            first = next(iter(sorted(self.last.rejected)))
            issues = self.last.rejected[first]
            why = f"{issues[0].where}: {issues[0].message}" if issues else f"{first} held back"
            return f"{len(self.last.rejected)} object(s) not in force: {why}"
        return ""

    def reload(self) -> None:
        """SIGHUP: list every kind again (only differences come out)."""
        for informer in self.informers:
            informer.request_resync()

    async def wait_config(self) -> Config:
        """The first Config in force (after every kind's first list)."""
        await self._first.wait()
        assert self.config is not None
        return self.config

    async def start(self) -> asyncio.Task[None]:
        """Run in a task of its own and return it once the first Config is in force (a
        daemon needs it to start). Raises what ends run() before that (no credentials)."""
        task = asyncio.create_task(self.run(), name="config-source")
        waiter = asyncio.create_task(self._first.wait(), name="config-first")
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            waiter.cancel()
            task.result()  # raises run()'s error
        return task

    # ------------------------------------------------------------------ loop

    def _on_object(self, key: str, old: RawObject | None, new: RawObject | None) -> None:
        self._changed.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for informer in self.informers:
                tg.create_task(informer.run(), name=f"config-{informer.kind.resource}")
            tg.create_task(self._loop(), name="config-resolve")
            if self._recorder is not None:
                tg.create_task(self._recorder.run(), name="config-events")

    async def _loop(self) -> None:
        while True:
            if self._confirm is None:
                await self._changed.wait()
            else:
                # A confirming list that changes nothing wakes nobody: look again soon.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self._confirm_poll)
            self._changed.clear()
            if not self.synced:
                continue
            # Debounce: a burst of edits (kubectl apply -f of a directory) is one pass.
            await asyncio.sleep(self._debounce)
            self._changed.clear()
            self.resolve_now()

    def current(self) -> dict[ObjectKey, RawObject]:
        out: dict[ObjectKey, RawObject] = {}
        for informer in self.informers:
            for raw in informer.cache.values():
                key = object_key(raw)
                if key is not None:
                    out[key] = raw
        return out

    def resolve_now(self) -> None:
        """One pass: resolve the objects as they are, report, hand on a changed Config."""
        current = self.current()
        if self._unconfirmed(current):
            return
        resolution = resolve(current, self.in_force)
        self.last = resolution
        self._report(resolution)
        if resolution.config is None:
            return
        # The one emptying rule (bgpd.config.emptying), as for a SIGHUP of a file: a running
        # speaker does not lose every peer or pool unless SpeakerConfig says it is meant.
        refusal = None if self.config is None else emptying_refusal(self.config, resolution.config)
        if refusal != self.refused and refusal is not None:
            log(
                logger,
                logging.ERROR,
                "config.reload_failed",
                error=f"refused: {refusal}",
                keeping="running config",
            )
        self.refused = refusal
        if refusal is not None:
            return
        self.in_force = resolution.in_force
        for w in resolution.warnings:
            log(logger, logging.WARNING, "config.warning", warning=str(w))
        if resolution.config != self.config:
            self.config = resolution.config
            self.applied += 1
            log(
                logger,
                logging.INFO,
                "config.cluster_applied",
                namespace=self.namespace,
                objects=len(resolution.in_force),
                rejected=len(resolution.rejected),
            )
            for listener in self.listeners:
                listener(resolution.config, resolution.warnings)
        self._first.set()

    def _unconfirmed(self, current: Mapping[ObjectKey, RawObject]) -> bool:
        """True while a vanishing of every pool or every peer waits for a list."""
        vanished = [
            kind
            for kind in _CONFIRMED_KINDS
            if any(k.kind == kind for k in self.in_force)
            and not any(k.kind == kind for k in current)
        ]
        if not vanished:
            self._confirm = None
            return False
        lists = [i.stats.lists for i in self.informers]
        if self._confirm is None:
            self._confirm = lists
            log(logger, logging.WARNING, "config.vanished_unconfirmed", kinds=",".join(vanished))
            for informer in self.informers:
                informer.request_resync()
            return True
        if all(now > then for now, then in zip(lists, self._confirm, strict=True)) and all(
            i.connected for i in self.informers
        ):
            self._confirm = None
            log(logger, logging.WARNING, "config.vanished_confirmed", kinds=",".join(vanished))
            return False
        return True

    # ------------------------------------------------------------------ reports

    def _report(self, resolution: Resolution) -> None:
        current = self.current()
        for key, issues in resolution.rejected.items():
            if not issues or self._reported.get(key) == issues:
                continue
            self._reported[key] = issues
            text = "; ".join(f"{i.where}: {i.message}" if i.where else i.message for i in issues)
            log(logger, logging.ERROR, "config.object_rejected", object=str(key), error=text)
            raw = current.get(key)
            if raw is None:
                continue
            uid = raw.get("metadata", {}).get("uid", "")
            ref = ObjectRef(key.kind, key.namespace, key.name, str(uid), str(raw.get("apiVersion")))
            if self._recorder is not None:
                self._recorder.record(
                    ref,
                    EventType.WARNING,
                    INVALID_REASON,
                    f"not applied, keeping the last valid version: {text}",
                )
        for key in list(self._reported):
            if key not in resolution.rejected:
                del self._reported[key]
                log(logger, logging.INFO, "config.object_accepted", object=str(key))
        for key in current:
            if key.kind == SPEAKER.kind:
                issues = resolution.rejected.get(key, ())
                text = "; ".join(f"{i.where}: {i.message}" for i in issues)
                self._condition(
                    key, not issues, "Invalid" if issues else "Accepted", text or "in force"
                )

    def _condition(self, key: ObjectKey, ok: bool, reason: str, message: str) -> None:
        """Write SpeakerConfig's `Accepted` condition when it differs from the last written."""
        if not self._write_status or self._conditions.get(key) == (ok, message):
            return
        self._conditions[key] = (ok, message)
        body = {
            "status": {
                "conditions": [
                    {
                        "type": CONDITION_TYPE,
                        "status": "True" if ok else "False",
                        "reason": reason,
                        "message": message[:1024],
                        "lastTransitionTime": rfc3339(),
                    }
                ]
            }
        }
        path = object_path(
            SPEAKER.api_version, "speakerconfigs", namespace=key.namespace, name=key.name
        )

        async def write() -> None:
            try:
                await self._client.request(
                    "PATCH",
                    f"{path}/status",
                    body=body,
                    content_type=MERGE_PATCH,
                    what=f"patch status of {key}",
                )
            except KubernetesError as exc:
                log(
                    logger,
                    logging.WARNING,
                    "config.status_failed",
                    object=str(key),
                    error=exc.message,
                )

        task = asyncio.get_running_loop().create_task(write(), name="config-status")
        self._status_tasks.add(task)
        task.add_done_callback(self._status_tasks.discard)


async def list_config_objects(
    client: KubeClient, namespace: str
) -> tuple[dict[ObjectKey, RawObject], list[str]]:
    """Every configuration object in `namespace` (one list per kind, as the informers
    do), and a line per kind that could not be listed (a CRD not installed: 404)."""
    objects: dict[ObjectKey, RawObject] = {}
    problems: list[str] = []
    for kind in config_kinds(namespace):
        try:
            doc = await client.request("GET", kind.path, what=f"list {kind.resource}")
        except KubernetesError as exc:
            problems.append(
                f"{kind.name}: cannot list {kind.group_version} {kind.resource}: {exc.message}"
            )
            continue
        for raw in doc.get("items") or []:
            if not isinstance(raw, Mapping):
                continue
            # A list's items may omit kind and apiVersion (built-in kinds do).
            item = config_object({"kind": kind.name, "apiVersion": kind.group_version, **raw})
            key = object_key(item)
            if key is not None:
                objects[key] = item
    return objects, problems
