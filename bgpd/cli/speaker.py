"""`kube-bgpd speaker`: run the per-node speaker (one supervised ExaBGP, driven from the
cluster state).

The cluster comes from the API (``--kubeconfig``, $KUBECONFIG, ~/.kube/config, then
in-cluster), or from a static dump (``--cluster-file``, re-read on SIGHUP and when it
changes); bgpd.speaker.make_source picks from the SourceOptions built here.
``--with-controller`` also runs the IP allocator in this process, as a companion task in
the speaker's TaskGroup: a controller that fails ends the process (exit 1, one log line).
The command only parses flags, loads the config and hands over to bgpd.speaker.Speaker.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bgpd.clusterfile import DumpRead
    from bgpd.controller import Controller

#: Exit codes (docs/operations.md): 0 stopped; 1 failed to start or while running (the
#: cluster dump, credentials, the listener, a task); 2 usage or invalid config.
EXIT_FAILED = 1
EXIT_CONFIG = 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster-file",
        metavar="DUMP",
        default=None,
        help="read Services, EndpointSlices and Nodes from this dump "
        "(kubectl get services,endpointslices,nodes -A -o yaml) instead of the API",
    )
    parser.add_argument(
        "--work-dir",
        metavar="DIR",
        default=None,
        help="ExaBGP's configuration and API socket (default from SpeakerConfig: /run/kube-bgpd)",
    )
    parser.add_argument(
        "--with-controller",
        action="store_true",
        help="also run the leader-elected IP allocator in this process (small clusters, "
        "systemd hosts); takes the leader-election flags of `kube-bgpd controller`",
    )
    from bgpd.cli.controller import add_config_source_flag, add_leader_flags

    add_config_source_flag(parser)
    add_leader_flags(parser)


def run(args: argparse.Namespace) -> int:
    if not args.cluster_file:
        # The credentials child (about a second: it imports the official client) runs
        # while this process imports and parses; _preflight collects its answer.
        from k8s_watcher.credentials import shared

        shared(args.kubeconfig).start_early()
    import asyncio

    from prometheus_client import CollectorRegistry

    from bgpd.cli.controller import config_source_problem, options_from_args
    from bgpd.config import ConfigError, load_config_or_raise
    from bgpd.exabgp.runtime import work_dir_problem
    from bgpd.exabgp.workdir import WorkDirError, WorkDirLock, prepare
    from bgpd.logs import setup_logging
    from bgpd.metrics import WatchMetrics
    from bgpd.model import Config, NodeName
    from bgpd.speaker import SourceOptions, Speaker, make_source

    if not args.node_name:
        print("kube-bgpd speaker: --node-name (or $NODE_NAME) is required", file=sys.stderr)
        return EXIT_CONFIG
    problem = config_source_problem(args)
    if problem is not None:
        print(f"kube-bgpd speaker: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    from_cluster: str | None = args.config_from_cluster
    if from_cluster is not None and args.cluster_file:
        print(
            "kube-bgpd speaker: --config-from-cluster needs the API, not --cluster-file",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    file_config: Config | None = None
    if from_cluster is None:
        try:
            file_config, warnings = load_config_or_raise(args.config)
        except ConfigError as exc:
            print(f"kube-bgpd speaker: invalid config:\n{exc}", file=sys.stderr)
            return EXIT_CONFIG
        setup_logging(args.log_format or str(file_config.speaker.log_format))
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        # Known from the file: a usage error before the cluster is looked at.
        problem = work_dir_problem(
            Path(args.work_dir) if args.work_dir else file_config.speaker.work_dir
        )
        if problem is not None:
            print(f"kube-bgpd speaker: {problem}", file=sys.stderr)
            return EXIT_CONFIG
    else:
        setup_logging(args.log_format or "text")
    if args.with_controller and args.cluster_file:
        print(
            "kube-bgpd speaker: --with-controller needs the API, not --cluster-file",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        controller = options_from_args(args) if args.with_controller else None
    except ValueError as exc:
        print(f"kube-bgpd speaker: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    problem, read = _preflight(args)
    if problem is not None:
        print(f"kube-bgpd speaker: {problem}", file=sys.stderr)
        return EXIT_FAILED
    # The dump as read here is the file source's first read (handed over once: parsed
    # once at start).
    first_reads = [read] if read is not None else []
    del read  # only first_reads holds it: the source drops it after its first read

    options = SourceOptions(
        node=NodeName(args.node_name),
        cluster_file=Path(args.cluster_file) if args.cluster_file else None,
        kubeconfig=args.kubeconfig,
        config_namespace=from_cluster,
    )

    work_locks: list[WorkDirLock] = []

    async def main() -> int:
        # The watch counters exist before the source that feeds them and the speaker
        # that exports them (bgpd.metrics).
        registry = CollectorRegistry()
        watch = WatchMetrics(registry)
        cluster = None
        config = file_config
        companions = {}
        if from_cluster is not None:
            # The configuration's objects first: the speaker needs a Config to start.
            from k8s_watcher.client import KubeClient
            from k8s_watcher.config_source import ClusterConfig
            from k8s_watcher.errors import CredentialsError
            from k8s_watcher.writer import EventRecorder

            config_client = KubeClient.lazy(args.kubeconfig)
            cluster = ClusterConfig(
                config_client,
                namespace=from_cluster,
                observer=watch,
                recorder=EventRecorder(
                    config_client, component="kube-bgpd-speaker", host=options.node
                ),
                # The controller's job; with it in this process, this process's.
                write_status=controller is not None,
            )
            try:
                watching = await cluster.start()
            except CredentialsError as exc:
                print(f"kube-bgpd speaker: {exc.message}", file=sys.stderr)
                await config_client.close()
                return EXIT_CONFIG
            config = cluster.config

            async def follow_cluster_config() -> None:
                try:
                    await watching
                finally:
                    await config_client.close()

            companions["config"] = follow_cluster_config
        assert config is not None
        work_dir = Path(args.work_dir) if args.work_dir else config.speaker.work_dir
        # A file's work directory was checked before the cluster was looked at.
        problem = None if file_config is not None else work_dir_problem(work_dir)
        if problem is not None:
            print(f"kube-bgpd speaker: {problem}", file=sys.stderr)
            return EXIT_CONFIG
        try:
            # Held until the process ends: one speaker per work directory.
            work_locks.append(prepare(work_dir))
        except WorkDirError as exc:
            print(f"kube-bgpd speaker: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        address = args.metrics_address or config.speaker.metrics_address
        if controller is not None:
            # The controller campaigns for the Lease beside the speaker and stops
            # (releasing the Lease) when the speaker stops.
            from bgpd.controller import run_controller
            from k8s_watcher.client import KubeClient

            first = config

            async def run_in_process_controller() -> None:
                client = KubeClient.lazy(args.kubeconfig)

                def elected(_elector: object, ctl: Controller) -> None:
                    if cluster is not None:
                        cluster.listeners.append(lambda new, _w: ctl.set_config(new))

                try:
                    await run_controller(
                        first,
                        client,
                        controller,
                        registry=registry,
                        observer=watch,
                        elected=elected,
                    )
                finally:
                    await client.close()

            companions["controller"] = run_in_process_controller
        speaker = Speaker(
            config=config,
            config_paths=args.config,
            node=options.node,
            source=make_source(
                options,
                config,
                observer=watch,
                first_read=first_reads.pop() if first_reads else None,
            ),
            work_dir=work_dir,
            status_address=address,
            registry=registry,
            watch=watch,
            companions=companions,
            config_source=cluster,
        )
        if cluster is not None:
            cluster.listeners.append(speaker.apply_config)
        return await speaker.run()

    from bgpd.speaker.app import StartupError
    from k8s_watcher.errors import KubernetesError

    # The event loop is where ExaBGP's parent "thread" lives for PR_SET_PDEATHSIG.
    os.umask(0o077)
    lines: list[str] = []
    try:
        try:
            return asyncio.run(main())
        except* KubernetesError as group:
            # Credentials that worked at start can stop working (a rotated token file),
            # and a refusal the source does not retry (a Secret it may not read) ends it.
            lines.extend(str(e) for e in _leaves(group))
    except StartupError as exc:
        lines.append(str(exc))
    finally:
        for held in work_locks:
            held.release()
    for line in dict.fromkeys(lines):
        print(f"kube-bgpd speaker: {line}", file=sys.stderr)
    return EXIT_FAILED


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _preflight(args: argparse.Namespace) -> tuple[str | None, DumpRead | None]:
    """What stops the speaker before it starts, as one line, or None: the cluster dump
    (a bad one at start is an error; a bad one later keeps the last good snapshot), or
    the Kubernetes credentials (a missing or garbage kubeconfig does not fix itself).
    With a cluster dump, also the dump as read, for the source's first read."""
    import asyncio

    if args.cluster_file:
        from bgpd import heap
        from bgpd.clusterfile import read_dump
        from bgpd.objects import DumpError

        try:
            # Everything the dump holds lives on, without reference cycles: the full
            # collections its parsing would trigger find nothing (heap.collection_paused).
            with heap.collection_paused():
                return None, read_dump(Path(args.cluster_file))
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return f"cannot read cluster file {args.cluster_file}: {reason}", None
        except DumpError as exc:
            return f"cluster file {args.cluster_file}: {exc}", None
    from k8s_watcher.client import load_credentials
    from k8s_watcher.errors import CredentialsError

    try:
        # Kept for the daemon's clients: the credentials child runs once.
        asyncio.run(load_credentials(args.kubeconfig))
    except CredentialsError as exc:
        return exc.message, None
    return None, None
