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
        for seed in args.seed:
            for obj in load_objects(Path(seed)):
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
