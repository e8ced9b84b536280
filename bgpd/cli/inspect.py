"""`kube-bgpd inspect NAMESPACE/SERVICE` (also `kubectl bgpd inspect`): one Service's
allocation, its endpoints per node, each node's decision and reason, and whether each
route is advertised to its peer, from the cluster itself (no port-forward).

The decision is `kube-bgpd explain`'s (bgpd.explain over the cluster's objects and the
configuration objects resolved as the speaker's --config-from-cluster does); whether a
peer has the route is what the speakers wrote into ServiceBGPStatus and BGPNodeStatus.
Reads through k8s_watcher.reader; renders with bgpd.inspection.
Exit codes: 0 answered, 1 the API or its objects could not be read, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from bgpd.cli import kubeflags

if TYPE_CHECKING:
    from bgpd.inspection import Inspection
    from bgpd.model import Config
    from k8s_watcher.client import KubeClient


def configure(parser: argparse.ArgumentParser) -> None:
    kubeflags.add_flags(parser)
    parser.add_argument(
        "service", metavar="NAMESPACE/SERVICE", help="the Service (or SERVICE with -n)"
    )


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from bgpd.model import ServiceKey

    out = out or sys.stdout
    err = err or sys.stderr
    prog = f"{getattr(args, 'prog_name', 'kube-bgpd')} inspect"
    parts = args.service.split("/")
    if len(parts) == 1 and parts[0]:
        parts = [kubeflags.namespace(args), parts[0]]
    if len(parts) != 2 or not all(parts):
        print(f"{prog}: {args.service!r} is not NAMESPACE/SERVICE", file=err)
        return kubeflags.EXIT_USAGE
    if args.namespace and parts[0] != args.namespace:
        print(f"{prog}: {args.service!r} is not in namespace {args.namespace}", file=err)
        return kubeflags.EXIT_USAGE
    key = ServiceKey("/".join(parts))

    config: Config | None = None
    if args.config:
        from bgpd.config import load_config

        loaded = load_config(args.config)
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=err)
        if loaded.config is None:
            print(f"{prog}: invalid config: {'; '.join(map(str, loaded.errors))}", file=err)
            return kubeflags.EXIT_FAILED
        config = loaded.config

    async def reader(client: KubeClient) -> Inspection:
        return await _inspect(client, config, args.config_namespace, key, err)

    result = kubeflags.read(args, prog, reader, err)
    if result is None:
        return kubeflags.EXIT_FAILED
    from bgpd.inspection import inspect_json, inspect_table

    if not result.found:
        print(f"warning: Service {key} does not exist", file=err)
    if args.output == "json":
        out.write(json.dumps(inspect_json(result), indent=2) + "\n")
    else:
        out.write(inspect_table(result))
    return kubeflags.EXIT_OK


async def _inspect(
    client: KubeClient, config: Config | None, config_namespace: str, key: str, err: TextIO
) -> Inspection:
    """The Inspection (Unanswerable: a one-line reason why there is none). `config`: from --config
    files (a speaker configured by files); None: the cluster's configuration objects."""
    from bgpd.inspection import (
        LABEL_SERVICE_NAME,
        LABEL_SERVICE_NAMESPACE,
        advertised_peers,
        inspect_service,
        node_status_from_json,
    )
    from bgpd.model import ServiceKey
    from k8s_watcher import reader as r

    reading = r.Reading()
    if config is None:
        resolution = await r.read_config(client, config_namespace, reading)
        for issue in resolution.warnings:
            print(f"warning: {issue}", file=err)
        for obj, issues in resolution.rejected.items():
            for issue in issues:
                print(f"warning: {obj} is not in force: {issue}", file=err)
        if resolution.config is None:
            errors = "; ".join(str(e) for e in resolution.errors)
            raise kubeflags.Unanswerable(
                f"the configuration in namespace {config_namespace} is invalid: {errors}"
            )
        config = resolution.config
    snapshot = await r.read_snapshot(client)
    namespace, name = key.split("/", 1)
    selector = f"{LABEL_SERVICE_NAMESPACE}={namespace},{LABEL_SERVICE_NAME}={name}"
    try:
        statuses = [
            node_status_from_json(o)
            for o in await r.read_status_objects(client, r.NODE_STATUS, reading)
        ]
        service_objects = await r.read_status_objects(
            client, r.SERVICE_BGP_STATUS, reading, label_selector=selector
        )
        advertised = advertised_peers(service_objects, ServiceKey(key))
    except ValueError as exc:
        raise kubeflags.Unanswerable(str(exc)) from exc
    for kind in reading.missing:
        print(f"warning: the cluster does not serve {kind} (its CRD is not installed)", file=err)
    return inspect_service(
        config,
        snapshot,
        ServiceKey(key),
        node_statuses={s.node: s for s in statuses},
        advertised=advertised,
    )
