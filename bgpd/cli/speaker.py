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
    from bgpd.cli.controller import add_leader_flags

    add_leader_flags(parser)


def run(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from prometheus_client import CollectorRegistry

    from bgpd.cli.controller import options_from_args
    from bgpd.config import ConfigError, load_config_or_raise
    from bgpd.exabgp.runtime import work_dir_problem
    from bgpd.exabgp.workdir import WorkDirError, prepare
    from bgpd.logs import setup_logging
    from bgpd.metrics import WatchMetrics
    from bgpd.model import NodeName
    from bgpd.speaker import SourceOptions, Speaker, make_source

    if not args.node_name:
        print("kube-bgpd speaker: --node-name (or $NODE_NAME) is required", file=sys.stderr)
        return EXIT_CONFIG
    if not args.config:
        print("kube-bgpd speaker: --config FILE is required", file=sys.stderr)
        return EXIT_CONFIG
    try:
        config, warnings = load_config_or_raise(args.config)
    except ConfigError as exc:
        print(f"kube-bgpd speaker: invalid config:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(args.log_format or str(config.speaker.log_format))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    work_dir = Path(args.work_dir) if args.work_dir else config.speaker.work_dir
    problem = work_dir_problem(work_dir)
    if problem is not None:
        print(f"kube-bgpd speaker: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        # Held until the process ends: one speaker per work directory.
        work_lock = prepare(work_dir)
    except WorkDirError as exc:
        print(f"kube-bgpd speaker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    address = args.metrics_address or config.speaker.metrics_address
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

    options = SourceOptions(
        node=NodeName(args.node_name),
        cluster_file=Path(args.cluster_file) if args.cluster_file else None,
        kubeconfig=args.kubeconfig,
    )

    async def main() -> int:
        # The watch counters exist before the source that feeds them and the speaker
        # that exports them (bgpd.metrics).
        registry = CollectorRegistry()
        watch = WatchMetrics(registry)
        companions = {}
        if controller is not None:
            # The controller campaigns for the Lease beside the speaker and stops
            # (releasing the Lease) when the speaker stops.
            from bgpd.controller import run_controller
            from k8s_watcher.client import KubeClient

            async def run_in_process_controller() -> None:
                client = KubeClient.lazy(args.kubeconfig)
                try:
                    await run_controller(
                        config, client, controller, registry=registry, observer=watch
                    )
                finally:
                    await client.close()

            companions["controller"] = run_in_process_controller
        speaker = Speaker(
            config=config,
            config_paths=args.config,
            node=options.node,
            source=make_source(options, config, observer=watch),
            work_dir=work_dir,
            status_address=address,
            registry=registry,
            watch=watch,
            companions=companions,
        )
        return await speaker.run()

    # The event loop is where ExaBGP's parent "thread" lives for PR_SET_PDEATHSIG.
    os.umask(0o077)
    try:
        return asyncio.run(main())
    finally:
        work_lock.release()
