"""Fixtures for tests against real routers in network namespaces (root only).

* ``topology`` - a fresh :class:`kbgpd_lab.lab.topology.Topology` per test (router, node1..3,
  client; unique prefix), destroyed after the test even when it fails.
* ``make_router(kind, **opts)`` - build and start a router ("frr", "bird", "gobgp") in
  ``topology.router``; ``opts`` are :class:`kbgpd_lab.lab.routers.RouterConfig` fields
  (asn, peer_asn, md5_password, graceful_restart, hold_time, static_neighbors, ...) plus
  ``bfd=True`` for FRR. Stopped after the test; on failure its logs are printed.
* ``frr_router``, ``bird_router``, ``gobgp_router`` - ``make_router(kind)`` with defaults:
  router AS 64512 listening for dynamic eBGP neighbours of AS 64513 on the node LAN
  (IPv4 and IPv6).
* ``start_exabgp(node, routes=..., ...)`` - a bare ExaBGP (no kube-bgpd code) in node N's
  namespace with static routes, for testing the harness itself and as a baseline.

Tests using these need ``pytest.mark.component`` and ``pytest.mark.root``. They are not
skipped without root: they fail loudly, because CI runs as root and a silent skip would
hide a broken environment.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN, Router
from kbgpd_lab.lab.routers import make_router as build_router
from kbgpd_lab.lab.topology import Topology, cleanup_leftovers

_counter = itertools.count(1)


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


@pytest.fixture(scope="session")
def _leftovers_removed() -> list[str]:
    """Once per session: remove what killed earlier test runs left (their owner process is
    gone; live runs and a `kube-bgpd-lab up` lab are left alone)."""
    return cleanup_leftovers()


@pytest.fixture
def topology(_leftovers_removed: list[str]) -> Iterator[Topology]:
    """Router + node1..3 + client, unique per test; always destroyed."""
    prefix = f"kt{os.getpid()}-{next(_counter)}"
    topo = Topology.create(prefix=prefix, nodes=3)
    try:
        yield topo
    finally:
        topo.destroy()


@pytest.fixture
def make_router(
    topology: Topology, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Router]]:
    """Factory: ``make_router(kind, **RouterConfig fields)`` -> a started router."""
    made: list[Router] = []

    def factory(kind: str, **opts: Any) -> Router:
        router = build_router(
            kind, topology.router, tmp_path / f"router-{kind}-{len(made)}", **opts
        )
        made.append(router)
        router.start()
        return router

    try:
        yield factory
    finally:
        for router in made:
            if _failed(request):
                sys.stderr.write(f"\n==== {router.kind} logs\n{router.log_tail()}\n")
            router.close()


@pytest.fixture
def frr_router(make_router: Callable[..., Router]) -> Router:
    return make_router("frr")


@pytest.fixture
def bird_router(make_router: Callable[..., Router]) -> Router:
    return make_router("bird")


@pytest.fixture
def gobgp_router(make_router: Callable[..., Router]) -> Router:
    return make_router("gobgp")


@dataclass(slots=True)
class BareExaBGP:
    """A bare ExaBGP process started by a test (no kube-bgpd code involved)."""

    proc: subprocess.Popen[bytes]
    config: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def start_exabgp(
    topology: Topology, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BareExaBGP]]:
    """Factory: ``start_exabgp(node, routes=("10.99.100.1/32",), family=4, ...)``.

    Writes an ExaBGP 5 config for one neighbour (the router, in that family) with a
    ``static`` block of ``route P next-hop self <attributes>;`` and starts it in node N's
    namespace as root without privilege drop (lab-notes: otherwise it drops to nobody).
    ``attributes`` is appended to every route, e.g. ``"community [1:2] med 5"``.
    """
    started: list[BareExaBGP] = []

    def factory(
        node: int,
        routes: Sequence[str] = ("10.99.100.1/32",),
        *,
        family: int = 4,
        local_as: int = NODE_ASN,
        peer_as: int = ROUTER_ASN,
        attributes: str = "",
        hold_time: int = 9,
        md5_password: str | None = None,
        extra: str = "",
    ) -> BareExaBGP:
        local = topology.node_address(node, family)
        conf = tmp_path / f"exabgp-node{node}-v{family}-{len(started)}.conf"
        log = conf.with_suffix(".log")
        statics = "".join(f"    route {r} next-hop self {attributes};\n" for r in routes)
        md5 = f"  md5-password {md5_password};\n" if md5_password else ""
        conf.write_text(
            f"neighbor {topology.router_address(family)} {{\n"
            f"  router-id {topology.node_address(node, 4)};\n"
            f"  local-address {local};\n"
            f"  local-as {local_as};\n"
            f"  peer-as {peer_as};\n"
            f"  hold-time {hold_time};\n"
            f"{md5}{extra}"
            f"  family {{ ipv{family} unicast; }}\n"
            f"  static {{\n{statics}  }}\n"
            "}\n"
        )
        env = dict(
            os.environ,
            exabgp_daemon_user="root",
            exabgp_daemon_drop="false",
            exabgp_log_destination=str(log),
        )
        exabgp = str(Path(sys.executable).with_name("exabgp"))
        with log.with_suffix(".out").open("wb") as out:
            proc = topology.nodes[node - 1].popen(
                [exabgp, "server", str(conf)], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        started.append(BareExaBGP(proc, conf, log))
        return started[-1]

    try:
        yield factory
    finally:
        for exa in started:
            if _failed(request):
                sys.stderr.write(f"\n==== exabgp {exa.config.name}\n{exa.log_text()[-3000:]}\n")
            if exa.proc.poll() is None:
                exa.proc.kill()
            exa.proc.wait(timeout=10)
