"""`kube-bgpd-lab apiserver-sim`: run the Kubernetes API simulator as a process.

Serves on --listen until SIGTERM or SIGINT, optionally seeded from a file of objects (a
List, a multi-document YAML stream or a JSON dump such as `kubectl get ... -o json`) and
optionally writing a kubeconfig that points at it. For tests, the lab and demos only.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:0, an ephemeral port)",
    )
    parser.add_argument(
        "--crds",
        action="append",
        default=[],
        metavar="PATH",
        help="CustomResourceDefinitions to install at start: a file, or a directory whose "
        "*.yaml/*.yml/*.json files are read; other kinds there are skipped (before --seed)",
    )
    parser.add_argument(
        "--seed", action="append", default=[], metavar="FILE", help="objects to load at start"
    )
    parser.add_argument(
        "--kubeconfig-out", default=None, metavar="PATH", help="write a kubeconfig for it here"
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="period of BOOKMARK events on watches that allow them (default 60)",
    )
    parser.add_argument(
        "--token", default=None, help="require this bearer token (written to the kubeconfig)"
    )
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="log format")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a throw-away self-signed certificate (in the kubeconfig)",
    )


def load_objects(path: Path) -> list[dict[str, Any]]:
    """Objects from a JSON or YAML file; Lists are flattened, empty documents skipped."""
    text = path.read_text()
    docs: list[Any]
    try:
        docs = [json.loads(text)]
    except ValueError:
        import yaml

        docs = list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    out: list[dict[str, Any]] = []
    while docs:
        doc = docs.pop(0)
        if not isinstance(doc, dict):
            continue
        kind = str(doc.get("kind", ""))
        if kind.endswith("List") and isinstance(doc.get("items"), list):
            items = doc["items"]
            if kind != "List":
                # A raw API list (curl, not kubectl) leaves kind/apiVersion off its items.
                item_type = {"kind": kind[: -len("List")], "apiVersion": doc.get("apiVersion")}
                items = [{**item_type, **i} if isinstance(i, dict) else i for i in items]
            docs[:0] = items
            continue
        out.append(doc)
    return out


def crd_files(path: Path) -> list[Path]:
    """The files `--crds PATH` names: the file itself, or a directory's manifests."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
    return [path]


def crd_objects(paths: list[Path]) -> list[dict[str, Any]]:
    """The CRDs in `--crds` files and directories (a kustomization.yaml there is skipped)."""
    return [
        obj
        for path in paths
        for name in crd_files(path)
        for obj in load_objects(name)
        if obj.get("kind") == "CustomResourceDefinition"
    ]


def seed_order(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CRDs first, so a seed file may hold a CRD and its objects in any order."""
    is_crd = [o.get("kind") == "CustomResourceDefinition" for o in objects]
    return [o for o, c in zip(objects, is_crd, strict=True) if c] + [
        o for o, c in zip(objects, is_crd, strict=True) if not c
    ]


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from bgpd.logs import log, setup_logging
    from kbgpd_lab.apisim import ApiSimulator

    setup_logging(args.log_format or "text")
    logger = logging.getLogger("kbgpd_lab.cli.apisim")
    host, _, port = str(args.listen).rpartition(":")
    host = host.strip("[]") or "127.0.0.1"

    async def serve() -> int:
        sim = ApiSimulator(
            host,
            int(port or 0),
            bookmark_interval=args.bookmark_interval,
            token=args.token,
            tls=args.tls,
        )
        objects = crd_objects([Path(p) for p in args.crds])
        for seed in args.seed:
            objects.extend(load_objects(Path(seed)))
        for obj in seed_order(objects):
            sim.store.apply(obj)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with sim:
            if args.kubeconfig_out:
                sim.write_kubeconfig(args.kubeconfig_out)
            log(
                logger,
                logging.INFO,
                "apisim.ready",
                url=sim.url,
                kubeconfig=args.kubeconfig_out or "",
                objects=sum(len(sim.store.records(r)) for r in sim.table.resources),
            )
            print(sim.url, flush=True)
            await stop.wait()
        return 0

    return asyncio.run(serve())
