"""`kube-bgpd controller --config FILE [--kubeconfig PATH]`: the leader-elected IP allocator.

Parses flags, loads the config, and runs bgpd.controller.run_controller until SIGTERM or
SIGINT; a signal stops the allocator, releases the Lease (so a standby takes over at
once) and exits 0. SIGHUP re-reads the config files (a broken file keeps the running
config). Exit 1: the config is invalid or there are no credentials (neither
fixes itself, so no retry). The leader-election flags are shared with
`kube-bgpd speaker --with-controller` through `add_leader_flags` and `options_from_args`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from prometheus_client import CollectorRegistry

    from bgpd.controller import Controller, ControllerOptions
    from bgpd.model import Config
    from k8s_watcher.client import KubeClient

EXIT_OK = 0
EXIT_FAILED = 1


def add_leader_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of the Lease-based leader election (client-go's defaults)."""
    group = parser.add_argument_group("leader election")
    group.add_argument(
        "--lease-namespace",
        default=None,
        metavar="NS",
        help="namespace of the Lease (default: $POD_NAMESPACE, the service account's, "
        "else default)",
    )
    group.add_argument(
        "--lease-name", default="kube-bgpd-controller", metavar="NAME", help="Lease name"
    )
    group.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how long standbys wait after the leader's last renewal (default 15)",
    )
    group.add_argument(
        "--renew-deadline",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the leader steps down if it cannot renew for this long (default 10)",
    )
    group.add_argument(
        "--retry-period",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="interval of renewals and acquisition attempts (default 2)",
    )
    group.add_argument(
        "--identity",
        default=None,
        metavar="ID",
        help="this candidate's holderIdentity (default: hostname_random)",
    )


def add_config_source_flag(parser: argparse.ArgumentParser) -> None:
    """--config-from-cluster [NAMESPACE], shared by `speaker` and `controller`."""
    from k8s_watcher.namespaces import DEFAULT_CONFIG_NAMESPACE

    parser.add_argument(
        "--config-from-cluster",
        nargs="?",
        const=DEFAULT_CONFIG_NAMESPACE,
        default=None,
        metavar="NAMESPACE",
        help="read the configuration live from the cluster: the metallb.io objects and "
        f"SpeakerConfig in NAMESPACE (default {DEFAULT_CONFIG_NAMESPACE}, as MetalLB); "
        "instead of --config FILE",
    )


def config_source_problem(args: argparse.Namespace) -> str | None:
    """Exactly one of --config FILE and --config-from-cluster."""
    if args.config and args.config_from_cluster is not None:
        return "--config and --config-from-cluster exclude each other"
    if not args.config and args.config_from_cluster is None:
        return "--config FILE or --config-from-cluster [NAMESPACE] is required"
    return None


def configure(parser: argparse.ArgumentParser) -> None:
    add_leader_flags(parser)
    add_config_source_flag(parser)


def options_from_args(args: argparse.Namespace) -> ControllerOptions:
    """ControllerOptions from the flags of add_leader_flags; ValueError if inconsistent."""
    from bgpd.controller import ControllerOptions, default_identity
    from k8s_watcher.client import default_namespace
    from k8s_watcher.leader import LeaderTiming

    return ControllerOptions(
        lease_namespace=args.lease_namespace or default_namespace(),
        identity=args.identity or default_identity(),
        lease_name=args.lease_name,
        leader=LeaderTiming(
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        ),
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from bgpd.config import ConfigError, load_config_or_raise
    from bgpd.logs import setup_logging

    setup_logging(args.log_format or "text")
    problem = config_source_problem(args)
    if problem is not None:
        print(f"kube-bgpd controller: {problem}", file=sys.stderr)
        return EXIT_FAILED
    config: Config | None = None
    if args.config:
        try:
            config, warnings = load_config_or_raise(args.config)
        except ConfigError as exc:
            print(f"kube-bgpd controller: invalid config:\n{exc}", file=sys.stderr)
            return EXIT_FAILED
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if args.log_format is None:
            setup_logging(str(config.speaker.log_format))
    try:
        options = options_from_args(args)
        metrics = split_address(args.metrics_address) if args.metrics_address else None
    except ValueError as exc:
        print(f"kube-bgpd controller: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return asyncio.run(
        _main(
            args.kubeconfig,
            config,
            options,
            metrics,
            list(args.config),
            config_namespace=args.config_from_cluster,
            # The log format a file's SpeakerConfig set at start (no --log-format flag).
            started_log_format=(
                str(config.speaker.log_format)
                if config is not None and args.log_format is None
                else None
            ),
        )
    )


def split_address(text: str) -> tuple[str, int]:
    """ "host:port" or "[v6]:port" -> (host, port); ValueError if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


async def _main(
    kubeconfig: str | None,
    config: Config | None,
    options: ControllerOptions,
    metrics: tuple[str, int] | None,
    config_paths: list[str],
    *,
    config_namespace: str | None = None,
    started_log_format: str | None = None,
) -> int:
    """`config` from the files, or None with `config_namespace`: then the configuration
    comes from the cluster (k8s_watcher.config_source), each change to every controller."""
    import asyncio
    import signal

    from prometheus_client import CollectorRegistry

    from bgpd.metrics import start_metrics_listener
    from k8s_watcher.client import KubeClient
    from k8s_watcher.errors import CredentialsError

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        client = await KubeClient.connect(kubeconfig)
    except CredentialsError as exc:
        print(f"kube-bgpd controller: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    controllers: list[Controller] = []
    watched = None
    if config_namespace is not None:
        from k8s_watcher.config_source import ClusterConfig
        from k8s_watcher.writer import EventRecorder

        # The leader-elected controller writes SpeakerConfig's status condition: one
        # writer for the cluster, not one per node.
        cluster = ClusterConfig(
            client,
            namespace=config_namespace,
            recorder=EventRecorder(client, component="kube-bgpd-controller", host=options.identity),
            write_status=True,
        )
        try:
            watched = await cluster.start()
        except CredentialsError as exc:
            print(f"kube-bgpd controller: {exc.message}", file=sys.stderr)
            return EXIT_FAILED
        config = cluster.config

        def follow(new: Config, _warnings: object) -> None:
            for controller in controllers:
                controller.set_config(new)

        cluster.listeners.append(follow)
        loop.add_signal_handler(signal.SIGHUP, cluster.reload)
    assert config is not None
    if config_namespace is None:
        running = [config]
        loop.add_signal_handler(
            signal.SIGHUP,
            lambda: _reload(config_paths, controllers, running, started_log_format),
        )
    registry = CollectorRegistry()
    runner = None
    if metrics is not None:
        try:
            runner, _ = await start_metrics_listener(registry, *metrics)
        except OSError as exc:
            await client.close()
            host, port = metrics
            print(
                f"kube-bgpd controller: cannot listen on {host}:{port} (metrics): "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            return EXIT_FAILED
    try:
        return await _supervise(client, config, options, registry, stop, controllers)
    finally:
        if watched is not None:
            watched.cancel()
            await asyncio.gather(watched, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()


def _reload(
    paths: list[str],
    controllers: list[Controller],
    running: list[Config],
    started_log_format: str | None = None,
) -> None:
    """SIGHUP: re-read the config; a broken file, or one that would remove every pool
    (bgpd.config.emptying), keeps the running config `running[0]` (and says so).

    Of SpeakerConfig the controller reads `loadBalancerClass` where it is used (a reload
    puts it in force) and `logFormat` once, at start, when no --log-format flag was given
    (`started_log_format`): a reload that changes it says `config.restart_needed`, as the
    speaker's does, instead of "reloaded" while the old format stays."""
    import logging

    from bgpd.config.reload import reload_config
    from bgpd.logs import log

    logger = logging.getLogger("bgpd.cli.controller")
    outcome = reload_config(paths, running[0])
    if outcome.config is None:
        log(
            logger,
            logging.ERROR,
            "config.reload_failed",
            error=outcome.error,
            keeping="running config",
        )
        return
    running[0] = outcome.config
    for controller in controllers:
        controller.set_config(outcome.config)
    new_format = str(outcome.config.speaker.log_format)
    if started_log_format is not None and new_format != started_log_format:
        log(
            logger,
            logging.WARNING,
            "config.restart_needed",
            fields="spec.logFormat",
            hint="read when the controller starts: it keeps logging as "
            f"{started_log_format} until it is restarted; the rest of the new config is "
            "in force",
        )
    log(logger, logging.INFO, "config.reloaded")


async def _supervise(
    client: KubeClient,
    config: Config,
    options: ControllerOptions,
    registry: CollectorRegistry,
    stop: asyncio.Event,
    controllers: list[Controller],
) -> int:
    """Run the controller until it fails (exit 1) or `stop` is set (exit 0)."""
    import asyncio

    from bgpd.controller import run_controller

    async with client:
        work = asyncio.create_task(
            run_controller(
                config,
                client,
                options,
                registry=registry,
                elected=lambda _elector, controller: controllers.append(controller),
                settle_heap=True,
            ),
            name="controller",
        )
        stopper = asyncio.create_task(stop.wait(), name="controller-signal")
        done, _ = await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            stopper.cancel()
            print(f"kube-bgpd controller: stopped: {work.exception()!r}", file=sys.stderr)
            return EXIT_FAILED
        # Graceful stop: cancel the term (releases the Lease) and wait for the cleanup.
        work.cancel()
        await asyncio.wait({work})
    return EXIT_OK
