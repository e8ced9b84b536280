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
* ``start_exabgp(node, routes=..., ...)`` - a bare ExaBGP (the kit's :class:`BareExaBGP`, no
  kube-bgpd code) in node N's namespace with static routes, for testing the harness itself
  and as a baseline.

Tests using these need ``pytest.mark.component`` and ``pytest.mark.root``. They are not
skipped without root: they fail loudly, because CI runs as root and a silent skip would
hide a broken environment.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kbgpd_lab.kit.processes import BareExaBGP, ProcessGroup
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


@pytest.fixture
def start_exabgp(
    topology: Topology, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BareExaBGP]]:
    """Factory: ``start_exabgp(node, routes=("10.99.100.1/32",), family=4, ...)``.

    Writes an ExaBGP 5 config for one neighbour (the router, in that family) with a
    ``static`` block of ``route P next-hop self <attributes>;`` and starts it in node N's
    namespace as the kit's :class:`BareExaBGP` (root without privilege drop).
    ``attributes`` is appended to every route, e.g. ``"community [1:2] med 5"``.
    """
    group = ProcessGroup(tmp_path)
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
        statics = "".join(f"    route {r} next-hop self {attributes};\n" for r in routes)
        md5 = f"  md5-password {md5_password};\n" if md5_password else ""
        config = (
            f"neighbor {topology.router_address(family)} {{\n"
            f"  router-id {topology.node_address(node, 4)};\n"
            f"  local-address {topology.node_address(node, family)};\n"
            f"  local-as {local_as};\n"
            f"  peer-as {peer_as};\n"
            f"  hold-time {hold_time};\n"
            f"{md5}{extra}"
            f"  family {{ ipv{family} unicast; }}\n"
            f"  static {{\n{statics}  }}\n"
            "}\n"
        )
        path = tmp_path / f"exabgp-node{node}-v{family}-{len(started)}.conf"
        started.append(BareExaBGP.start(group, config, path, spawner=topology.nodes[node - 1]))
        return started[-1]

    try:
        yield factory
    finally:
        if _failed(request):
            for exa in started:
                sys.stderr.write(f"\n==== exabgp {exa.config.name}\n{exa.log_text()[-3000:]}\n")
        group.stop(grace=10)
