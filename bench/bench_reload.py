"""Benchmark: a configuration change at 10,000 routes, applied in place (not a test).

Run as root from the repository root:

    .venv/bin/python bench/bench_reload.py [--services 10000] [--via sighup|api]

It brings up a one-node lab (``kbgpd_lab.lab.Lab``) with BIRD as the router and the
node's two sessions (BGPPeers tor-v4 and tor-v6), widens the lab pool, puts
``--services`` Local LoadBalancer Services with a ready endpoint on node1
(kbgpd_lab.kit.scale, the shape bench_k8s.py uses) in the cluster, and waits for all
their routes at BIRD. Then it measures, reading BIRD over its control socket
(bench_k8s.BirdCtl, no birdc fork):

1. a community added to the BGPAdvertisement: the time from the config change to the
   last of the routes carrying it at BIRD (``show route where bgp_community ~
   [(64512, 42)] count``, polled every 20 ms), and whether any session was reset
   (BIRD's session marks: how often each protocol came up) or ExaBGP restarted (its
   generation in /status);
2. a peer edited (tor-v6's holdTime): the time until that session is back, and again
   whether the tor-v4 session (which carries the routes) was reset.

Where the cluster and the configuration live, and so how a change is made
(``change_config``, the lab's ``edit_config``):

* ``--via sighup``: the speaker reads a cluster dump file (the Services written into it)
  and a config file; a change is the file rewritten and SIGHUP (which re-reads the dump
  too);
* ``--via api``: the lab's API simulator holds everything (the Services created straight
  in its store, as bench_k8s.py seeds it, then watched by the speaker over HTTP), the
  speaker runs ``--config-from-cluster``, and a change is ``kubectl apply`` of the lab's
  configuration documents, the edited one among them: the path a Kubernetes user takes.

The clock starts before the SIGHUP or the ``kubectl apply``. Prints a JSON summary,
with the speaker's log lines during the community change (``community_speaker_log``:
seconds after the change started, event) to say where the time went; ``--logs DIR``
keeps the speaker's, the controller's and BIRD's logs. Everything it starts is removed
at the end.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_k8s import BirdCtl

from bgpd.allocation import ANNOTATION_IP_ALLOCATED_FROM_POOL
from kbgpd_lab.kit.scale import local_service, node1_slice
from kbgpd_lab.lab.apicluster import node_object
from kbgpd_lab.lab.lab import Lab, node_addresses
from kbgpd_lab.lab.routers import BirdRouter

#: Where the benchmark's Services get their IPs (added to the lab pool).
POOL = ipaddress.IPv4Network("10.100.0.0/18")
COMMUNITY = "64512:42"
#: The lab's IPAddressPool (kbgpd_lab.lab.lab.speaker_config), which the bench widens.
LAB_POOL = "lab"
Edit = Callable[[list[dict[str, Any]]], None]
#: --via: where the cluster and the configuration are, and how a change is made.
VIAS = ("sighup", "api")


def change_config(lab: Lab, edit: Edit) -> float:
    """Apply a configuration change the lab's way (its ``edit_config``: ``kubectl
    apply`` with the API, else the config file rewritten and SIGHUP) and return when it
    started (monotonic); back when the speaker logged ``config.reloaded``."""
    started = time.monotonic()
    lab.edit_config(edit)
    return started


def service_objects(services: int) -> list[dict[str, Any]]:
    """``services`` Local Services, each with a ready endpoint on node1."""
    items: list[dict[str, Any]] = []
    hosts = POOL.hosts()
    for i in range(services):
        name = f"svc{i}"
        items.append(local_service(name, str(next(hosts))))
        items.append(node1_slice(name, True))
    return items


def write_cluster(lab: Lab, services: int) -> None:
    """The cluster dump: node1 and the Services."""
    items = [node_object("node1", node_addresses(lab.topology, 1)), *service_objects(services)]
    tmp = lab.dump_path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    tmp.replace(lab.dump_path)


def seed_api(lab: Lab, services: int) -> None:
    """The Services created straight in the lab's API simulator's store (HTTP creates
    of 20,000 objects would take minutes); the speaker sees them on its watch. They are
    what the controller would leave (their IPs in the widened pool, the pool named in
    the annotation it writes): else it patches every one of them, a minute of Service
    changes for the speaker, overlapping the measurement."""
    sim = lab.apisim
    if sim is None:
        raise SystemExit("--via api needs the lab's API simulator in this process")
    objects = service_objects(services)
    for obj in objects:
        if obj["kind"] == "Service":
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations[ANNOTATION_IP_ALLOCATED_FROM_POOL] = LAB_POOL

    def create_all() -> None:
        for obj in objects:
            sim.sim.store.create(obj)

    sim.call(create_all, timeout=600)


def count(ctl: BirdCtl, query: str) -> int:
    for line in ctl.command(f"show route where {query} count"):
        m = re.search(rb"(\d+) of \d+ routes", line)
        if m:
            return int(m.group(1))
    return 0


def wait_count(ctl: BirdCtl, query: str, n: int, within: float = 300) -> float:
    deadline = time.monotonic() + within
    while (got := count(ctl, query)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{got} of {n} routes with {query}")
        time.sleep(0.02)
    return time.monotonic()


def log_events(lab: Lab, after: float, before: float) -> list[tuple[float, str]]:
    """The speaker's log lines between two wall-clock times: (time, event), the event
    with its peer for the peer.* lines (ExaBGP's own word on each session)."""
    out = []
    for line in (lab.dir / "node1" / "speaker.log").read_text(errors="replace").splitlines():
        words = line.split()
        if len(words) > 2:
            try:
                stamp = datetime.datetime.fromisoformat(words[0].replace("Z", "+00:00"))
            except ValueError:
                continue  # not a log line of the speaker's (e.g. a traceback)
            if after <= stamp.timestamp() <= before:
                peer = [w for w in words[3:4] if w.startswith("peer=")]
                out.append((stamp.timestamp(), " ".join([words[2], *peer])))
    return out


def timeline(lab: Lab, after: float, before: float) -> list[str]:
    """The speaker's log lines between two wall-clock times, as "SECONDS-AFTER event"."""
    return [f"{t - after:.3f} {name}" for t, name in log_events(lab, after, before)][:40]


def log_times(lab: Lab, event: str, after: float) -> list[float]:
    """Wall-clock times of the speaker's ``event`` lines logged after ``after``."""
    return [t for t, name in log_events(lab, after, float("inf")) if name == event]


def note(text: str) -> None:
    """Progress on stderr (the summary is the JSON on stdout)."""
    print(text, file=sys.stderr, flush=True)


def generation(lab: Lab) -> int:
    return int(lab.speaker_status(1)["exabgp"]["generation"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--via", choices=VIAS, default="sighup")
    ap.add_argument(
        "--logs",
        type=Path,
        metavar="DIR",
        help="copy the speaker's, controller's and BIRD's logs here",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbgpd-bench-reload-") as tmp:
        lab = Lab.up(
            router="bird",
            nodes=1,
            cluster="file" if args.via == "sighup" else "api",
            services=(),
            state_dir=Path(tmp) / "state",
            directory=Path(tmp) / "lab",
        )
        try:
            run(lab, args)
        finally:
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                logs = ("node1/speaker.log", "controller.log", "router/bird.log")
                for log in (lab.dir / name for name in logs):
                    if log.exists():
                        shutil.copy(log, args.logs / log.name)
            lab.down()


def run(lab: Lab, args: argparse.Namespace) -> None:
    assert isinstance(lab.router, BirdRouter)
    ctl = BirdCtl(lab.router)

    def widen(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc.get("kind") == "IPAddressPool":
                doc["spec"]["addresses"].append(str(POOL))

    change_config(lab, widen)
    started = time.monotonic()
    if args.via == "api":
        seed_api(lab, args.services)
    else:
        write_cluster(lab, args.services)
    wait_count(ctl, "source = RTS_BGP", args.services)
    cold = time.monotonic() - started
    note(f"{args.services} routes at BIRD after {cold:.1f} s")
    since = lab.router.sessions_since()
    gen = generation(lab)

    def add_community(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc.get("kind") == "BGPAdvertisement":
                doc["spec"]["communities"] = [COMMUNITY]

    asn, value = COMMUNITY.split(":")
    wall0 = time.time()
    t0 = change_config(lab, add_community)
    t1 = wait_count(ctl, f"bgp_community ~ [({asn}, {value})]", args.services)
    community_seconds = t1 - t0
    wall1 = time.time()
    # When the speaker had the new config in force (with the API: the watch event
    # parsed and checked; with SIGHUP: the config file read).
    in_force = [t - wall0 for t in log_times(lab, "config.reloaded", wall0)]
    # The SIGHUP path also re-reads the cluster dump (clusterfile.loaded), blocking.
    reread = [t - wall0 for t in log_times(lab, "clusterfile.loaded", wall0)]
    # Where the time went: what the speaker logged meanwhile (its timestamps).
    community_log = timeline(lab, wall0, wall1)
    community_reset = lab.router.sessions_since() != since
    community_restart = generation(lab) != gen
    # Service writes by the controller (API only): each is a change for the speaker too.
    controller_log = lab.dir / "controller.log"
    controller_writes = (
        controller_log.read_text(errors="replace").count(" controller.service_updated ")
        if controller_log.exists()
        else 0
    )
    note(f"community on every route after {community_seconds:.3f} s")

    v4 = {a for a in since if a.version == 4}
    v6 = {a for a in since if a.version == 6}

    def hold(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc.get("kind") == "BGPPeer" and doc["metadata"]["name"] == "tor-v6":
                doc["spec"]["holdTime"] = "30s"

    peer_wall0 = time.time()
    t0 = change_config(lab, hold)
    deadline = t0 + 600
    while True:
        now_since = lab.router.sessions_since()
        if set(now_since) == v4 | v6 and all(now_since[a] != since[a] for a in v6):
            break
        if time.monotonic() > deadline:
            peers = lab.speaker_status(1)["peers"]
            raise TimeoutError(f"tor-v6 session not re-established: speaker says {peers}")
        time.sleep(0.02)
    peer_seconds = time.monotonic() - t0
    peer_log = timeline(lab, peer_wall0, time.time())
    load = os.getloadavg()
    ctl.close()
    print(
        json.dumps(
            {
                "services": args.services,
                "via": args.via,
                "cold_start_all_routes_s": round(cold, 2),
                "community_all_routes_s": round(community_seconds, 3),
                "community_config_reloaded_s": [round(x, 3) for x in in_force],
                "community_dump_reread_done_s": [round(x, 3) for x in reread],
                "community_speaker_log": community_log,
                "community_session_reset": community_reset,
                "controller_service_writes": controller_writes,
                "community_exabgp_restarted": community_restart,
                "peer_edit_session_back_s": round(peer_seconds, 3),
                "peer_edit_other_session_reset": any(now_since[a] != since[a] for a in v4),
                "peer_edit_speaker_log": peer_log,
                # BIRD's session marks (compared): before the changes, after.
                "sessions_since": [
                    {str(a): since[a] for a in sorted(since, key=str)},
                    {str(a): now_since[a] for a in sorted(now_since, key=str)},
                ],
                "routes_after_peer_edit": count(BirdCtl(lab.router), "source = RTS_BGP"),
                "exabgp_generation": generation(lab),
                "loadavg": [round(x, 2) for x in load],
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
