"""The cluster source the speaker runs, and the optional abilities a source may have.

``make_source`` is the one place that picks the source (a cluster dump or the
Kubernetes API) from ``SourceOptions``; to add a source, change it only. Abilities
beyond ``RunnableSource`` are runtime-checkable Protocols the speaker tests once, at
construction (``isinstance``), so mypy checks both sides:

* ``SecretPasswords``: MD5 keys from BGPPeers' passwordSecrets (both sources);
* ``DecisionObserver``: sees each decision before it is applied (the Kubernetes source
  records "started/stopped announcing" Events);
* ``ConfigFollower``: takes a reloaded config (the Secrets it names may differ);
* ``KindsSynced``: per-kind sync state for the metrics (the Kubernetes source's
  informers); without it the source counts as one kind, "cluster";
* ``StatusPublisher``: writes this node's status objects in the cluster (the
  Kubernetes source, with SpeakerConfig clusterStatus);
* ``NodeFirst``: knows this Node and the peers' passwords before the Services (the
  Kubernetes source), so ExaBGP starts while the Services are listed and decided;
* ``HeldEvents``: writes its Events (the Kubernetes source) only once released, so the
  speaker holds them while ExaBGP takes the first decision's routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from bgpd.metrics import WatchMetrics
from bgpd.model import Config, Decision, IPNetwork, Node, NodeName, PeerName, ServiceKey
from bgpd.reconciler import SnapshotSource

if TYPE_CHECKING:
    from bgpd.clusterfile import DumpRead


class RunnableSource(SnapshotSource, Protocol):
    """A SnapshotSource the speaker runs: ``run()`` is its long-lived task and ``reload()``
    re-reads on SIGHUP."""

    async def run(self) -> None: ...

    def reload(self) -> None: ...


@runtime_checkable
class SecretPasswords(Protocol):
    def secret_passwords(self) -> Mapping[PeerName, str]:
        """Peer -> password from its passwordSecret."""
        ...


@runtime_checkable
class DecisionObserver(Protocol):
    def observe_decision(
        self,
        decision: Decision,
        changes: Mapping[PeerName, AbstractSet[IPNetwork]] | None = None,
    ) -> None:
        """`changes`: the (peer, prefix) whose route may differ from the previous
        decision's, None when unknown. Never blocks."""
        ...


@runtime_checkable
class DrainObserver(Protocol):
    def observe_drain(self, event: str, fields: Mapping[str, object], *, withdrawn: bool) -> None:
        """A drain transition: `event` is the drain's log event name (bgpd.speaker.drain)
        with its fields; `withdrawn`: the drain has withdrawn every route of the node.
        Never blocks."""
        ...


@runtime_checkable
class ConfigFollower(Protocol):
    def set_config(self, config: Config) -> None: ...


@runtime_checkable
class KindsSynced(Protocol):
    def kinds_synced(self) -> Mapping[str, bool]:
        """Kind name -> whether its first list finished."""
        ...


@runtime_checkable
class StatusPublisher(Protocol):
    def publish_status(
        self,
        services: Mapping[ServiceKey, tuple[PeerName, ...]],
        node_status: Mapping[str, Any] | None,
        node_uid: str,
    ) -> None:
        """The whole desired state of this node's status objects: Service -> the peers
        that have its routes, and the BGPNodeStatus status (None: the Node is gone).
        Never blocks; the source coalesces and rate-limits the writes."""
        ...


@runtime_checkable
class HeldEvents(Protocol):
    def hold_events(self) -> None:
        """Record Events as usual, write none of them until release_events()."""
        ...

    def release_events(self) -> None:
        """Write the Events recorded meanwhile, and those to come."""
        ...


@runtime_checkable
class NodeFirst(Protocol):
    async def node_known(self) -> Node | None:
        """Return once what ExaBGP's configuration needs from the cluster is known, which
        comes before the Services and EndpointSlices are: the Nodes' first list and the
        first read of the peers' passwordSecrets. The value is this node's Node (None:
        the cluster has none of that name)."""
        ...


@runtime_checkable
class ConfigSource(Protocol):
    """Where the configuration comes from when it is not files (the cluster's objects,
    k8s_watcher.config_source.ClusterConfig): it hands each new Config to
    Speaker.apply_config itself; the speaker asks it to re-read on SIGHUP and why the
    configuration in force is not what it holds."""

    def reload(self) -> None: ...

    def stale_reason(self) -> str:
        """Why the configuration in force differs from the source's ("" if it does not)."""
        ...


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What picks and connects the cluster source (bgpd.cli.speaker builds it)."""

    node: NodeName
    #: A cluster dump to read instead of the API.
    cluster_file: Path | None = None
    #: --kubeconfig; None: $KUBECONFIG, ~/.kube/config, then in-cluster.
    kubeconfig: str | None = None
    #: --config-from-cluster's namespace: where a passwordSecret without a namespace is
    #: (beside its BGPPeer, as in MetalLB); None: the speaker's own namespace.
    config_namespace: str | None = None


def make_source(
    options: SourceOptions,
    config: Config,
    *,
    observer: WatchMetrics | None = None,
    first_read: DumpRead | None = None,
) -> RunnableSource:
    """The one place that picks the cluster source. `observer` counts watch events and
    relists (the Kubernetes source's informers take it as their InformerObserver); the
    file source has no watch to count. `first_read`: the cluster dump as already read
    (the file source's first read; not kept in SourceOptions, which lives as long as the
    process, so a later read can free it)."""
    from bgpd.clusterfile import ClusterFileSource

    if options.cluster_file is not None:
        from k8s_watcher.client import default_namespace

        # passwordSecrets without a namespace: where the Kubernetes source looks.
        return ClusterFileSource(
            options.cluster_file,
            config=config,
            namespace=default_namespace(),
            first=first_read,
        )
    from k8s_watcher.cache import SpeakerSource
    from k8s_watcher.status_writer import StatusLimits

    sc = config.speaker
    # The credentials are loaded when run() starts.
    return SpeakerSource.connect(
        options.kubeconfig,
        config=config,
        node=options.node,
        observer=observer,
        secret_namespace=options.config_namespace,
        status=StatusLimits(sc.status_interval, float(sc.status_writes_per_second))
        if sc.cluster_status
        else None,
    )
