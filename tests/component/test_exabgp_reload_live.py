"""Reloading a real ExaBGP in place through the whole adapter (runtime, supervisor,
helper, driver), on loopback with no router: every neighbour stays down, which is the
case ExaBGP 5.0.15 got wrong.

A neighbour that is down with routes queued for it keeps updates pending, and ExaBGP's
main loop then drops a reload request instead of deferring it. Through the launcher
(launch.no_pending_adjribout) the reload happens: a neighbour added then is configured
and takes its routes. With ExaBGP run unmodified (the launcher's warning seen), the
runtime restarts ExaBGP for the same change instead, and the new neighbour gets its
routes from the replay.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from bgpd.exabgp import launch
from bgpd.exabgp.reload import ConfigAction, Reconfiguration, RestartReason
from bgpd.exabgp.render import Neighbor, render_config
from bgpd.exabgp.runtime import ExaBGPRuntime, helper_argv
from bgpd.model import BGPPeer, NodeName, PeerName, RouteAttributes
from kbgpd_lab.kit.processes import exabgp_runtime
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component]

A, C = PeerName("a"), PeerName("c")


def neighbor(name: str, peer: str) -> Neighbor:
    """A neighbour on loopback nobody answers for: it never comes up."""
    return Neighbor(
        peer=BGPPeer(
            name=PeerName(name),
            my_asn=65000,
            peer_asn=65001,
            peer_address=ipaddress.ip_address(peer),
        ),
        local_address=ipaddress.ip_address("127.0.0.1"),
        router_id=ipaddress.IPv4Address("127.0.0.1"),
    )


ROUTES = {
    A: {ipaddress.ip_network(f"10.0.0.{i}/32"): RouteAttributes() for i in range(1, 4)},
    C: {ipaddress.ip_network("10.0.1.1/32"): RouteAttributes()},
}


async def add_neighbour_while_the_other_is_down(rt: ExaBGPRuntime) -> Reconfiguration:
    """A's routes accepted (queued in ExaBGP: A is down), then C added."""
    await wait_until_async(lambda: rt.driver.connected, within=30, what="helper connected")
    rt.driver.apply(ROUTES)
    assert await rt.driver.wait_converged(30)
    assert rt.driver.accepted() == {A: ROUTES[A]}
    verdict = rt.configure(
        render_config(
            [neighbor("a", "127.0.0.2"), neighbor("c", "127.0.0.3")], helper_argv=helper_argv()
        )
    )
    assert verdict.added == {C}
    assert verdict.kept == {A}
    return verdict


@pytest.mark.timeout(120)
async def test_a_neighbour_added_while_another_is_down_gets_its_routes(tmp_path: Path) -> None:
    first = render_config([neighbor("a", "127.0.0.2")], helper_argv=helper_argv())
    async with exabgp_runtime(first, node=NodeName("n1"), work_dir=tmp_path / "w") as rt:
        verdict = await add_neighbour_while_the_other_is_down(rt)
        assert verdict.action is ConfigAction.RELOAD
        assert await rt.driver.wait_converged(30), rt.driver.stats
        assert rt.driver.accepted() == ROUTES
        assert rt.driver.stats.command_errors == 0, rt.driver.stats.last_error
        assert rt.supervisor.restarts == 0


@pytest.mark.timeout(120)
async def test_unmodified_exabgp_is_restarted_for_the_same_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(launch.UNMODIFIED_ENV, "1")
    first = render_config([neighbor("a", "127.0.0.2")], helper_argv=helper_argv())
    async with exabgp_runtime(first, node=NodeName("n1"), work_dir=tmp_path / "w") as rt:
        await wait_until_async(lambda: rt.driver.connected, within=30, what="helper connected")
        verdict = await add_neighbour_while_the_other_is_down(rt)
        assert (verdict.action, verdict.reason) == (
            ConfigAction.RESTART,
            RestartReason.RELOAD_UNAVAILABLE,
        )
        await wait_until_async(lambda: rt.supervisor.restarts == 1, within=30, what="restart")
        assert await rt.driver.wait_converged(30), rt.driver.stats
        assert rt.driver.accepted() == ROUTES
        assert rt.driver.stats.command_errors == 0, rt.driver.stats.last_error
