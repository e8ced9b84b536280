"""`kube-bgpd speaker`: run the per-node speaker (one supervised ExaBGP, driven from the
cluster state).

This build reads the cluster from a static dump (``--cluster-file``, re-read on SIGHUP
and when it changes); the Kubernetes watcher plugs into bgpd.speaker.make_source. The
command only parses flags, loads the config and hands over to bgpd.speaker.Speaker.
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


def run(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from prometheus_client import CollectorRegistry

    from bgpd.config import ConfigError, load_config_or_raise
    from bgpd.logs import setup_logging
    from bgpd.metrics import WatchMetrics
    from bgpd.model import NodeName
    from bgpd.speaker import Speaker, make_source

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
    address = args.metrics_address or config.speaker.metrics_address

    async def main() -> int:
        # The watch counters exist before the source that feeds them and the speaker
        # that exports them (bgpd.metrics).
        registry = CollectorRegistry()
        watch = WatchMetrics(registry)
        speaker = Speaker(
            config=config,
            config_paths=args.config,
            node=NodeName(args.node_name),
            source=make_source(args, config, observer=watch),
            work_dir=work_dir,
            status_address=address,
            registry=registry,
            watch=watch,
        )
        return await speaker.run()

    # The event loop is where ExaBGP's parent "thread" lives for PR_SET_PDEATHSIG.
    os.umask(0o077)
    return asyncio.run(main())
