"""The launcher's fallback against a real router: ExaBGP unmodified still does the job.

The launcher fails open (bgpd/exabgp/launch.py): when it cannot verify or apply its
patch, ExaBGP runs as published, with its own deep-copying ``remove_self`` and 50 route
steps a reactor turn. This takes that path for real, through the whole adapter (runtime,
supervisor, helper, driver) in a node namespace, with more routes than one unpatched
reactor turn takes, and checks the router learned every route with each node's own next
hop, that a withdrawal reaches it, that the supervisor logged the launcher's one
warning line, and that ExaBGP's process maps no OpenSSL there either.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from bgpd.exabgp import launch
from bgpd.exabgp.plan import DEFAULT_BATCH, DEFAULT_WINDOW
from bgpd.exabgp.render import render
from bgpd.exabgp.runtime import helper_argv
from bgpd.model import BGPPeer, Config, Node, NodeName, PeerName, RouteAttributes
from kbgpd_lab.kit.measure import OPENSSL_LIBRARIES, mapped_libraries
from kbgpd_lab.kit.processes import exabgp_runtime
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN, Rib, Router
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

#: More than the 50 steps an unpatched reactor runs a turn, so turns run out of steps.
PREFIXES = [ipaddress.ip_network(f"10.99.{i // 250}.{i % 250 + 1}/32") for i in range(300)]


def launcher_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The launcher's lines as the supervisor relayed them at WARNING."""
    lines = [
        str(getattr(r, "kube_bgpd_context", {}).get("line", ""))
        for r in caplog.records
        if r.name == "bgpd.supervision" and r.levelno == logging.WARNING
    ]
    return [line for line in lines if "kube-bgpd launcher warning" in line]


@pytest.mark.parametrize(
    "kind", [pytest.param("gobgp", id="gobgp"), pytest.param("bird", id="bird")]
)
async def test_unmodified_exabgp_announces_and_withdraws(
    topology: Topology,
    tmp_path: Path,
    make_router: Callable[..., Router],
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="bgpd.supervision")
    # The supervisor starts ExaBGP with this process's environment (plus its own).
    monkeypatch.setenv(launch.UNMODIFIED_ENV, "1")
    router = make_router(kind)
    node = Node(
        name=NodeName("node1"),
        addresses=(("InternalIP", str(topology.node_address(1, 4))),),
    )
    peer = BGPPeer(
        name=PeerName("tor"),
        peer_address=topology.router_address(4),
        my_asn=NODE_ASN,
        peer_asn=ROUTER_ASN,
        hold_time=9,
    )
    rendering = render(
        Config(peers=(peer,)), node, kernel_choices={}, passwords={}, helper_argv=helper_argv()
    )
    async with exabgp_runtime(
        rendering,
        node=node.name,
        work_dir=tmp_path / "node1",
        prefix=topology.nodes[0].exec_prefix(),
    ) as rt:
        rt.driver.apply({peer.name: dict.fromkeys(PREFIXES, RouteAttributes())})
        assert await rt.driver.wait_converged(60)

        def all_in(rib: Rib) -> bool:
            return all(p in rib for p in PREFIXES)

        rib = await asyncio.to_thread(router.wait_rib, all_in, 60)
        # ExaBGP's own remove_self rewrote "next-hop self" to this node's address.
        assert {path.next_hop for p in PREFIXES for path in rib[p]} == {topology.node_address(1)}
        kept = PREFIXES[:100]
        rt.driver.apply({peer.name: dict.fromkeys(kept, RouteAttributes())})

        def only_kept(rib: Rib) -> bool:
            return set(rib) == set(kept)

        await asyncio.to_thread(router.wait_rib, only_kept, 60)
        # Unmodified too, ExaBGP's process maps no OpenSSL: the launcher keeps it out.
        assert rt.supervisor.pid is not None
        assert mapped_libraries(rt.supervisor.pid, OPENSSL_LIBRARIES) == set()
    [line] = launcher_warnings(caplog)
    assert "running ExaBGP unmodified (requested" in line
    # The launcher read the unpatched limit from ExaBGP and compared the driver's window.
    assert f"up to {launch.queued_steps(DEFAULT_WINDOW, DEFAULT_BATCH)} route steps queued" in line
    assert "runs 50 a turn" in line
