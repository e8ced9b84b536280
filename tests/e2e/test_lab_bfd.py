"""BFD end to end (issue 17): real FRR 8.4 and BIRD 2 routers running BFD with the
nodes, real speakers whose BGPPeers name a BFDProfile (300 ms x 3: detect time 0.9 s), so
each speaker runs bfdd beside ExaBGP.

One lab per router serves the failure cases (they restore what they break):

* a blackholed node (every packet dropped in its namespace, its link up) leaves the
  router's ECMP set within the detect time plus a margin, its session torn down by BFD
  long before the hold timer (9 s, keepalive 3 s) could have expired;
* a SIGSTOPped speaker is dropped within the watchdog (1 s) plus the detect time, and
  stays out (its ExaBGP, stopped by the watchdog, does not connect again);
* BFD down on one peer (the IPv6 one: only its BFD packets dropped) tears down that
  session alone: the node's IPv4 session is the same session after, its routes kept;
* strict (SpeakerConfig bfdStrict, the default): a speaker whose BGP session is up but
  whose BFD session cannot come up sends the router nothing; BFD Up, the routes follow.

A lab of its own, with graceful restart and ``onSigterm: retain``: a speaker restart
keeps the node in the router's FIB the whole time although its BFD session goes down
(BIRD needs ``bfd graceful`` for that; FRR keeps a restarting peer's routes whatever BFD
says once the BGP session is down).

The figures are printed (``-s``); the bounds only catch a failover by the hold timer.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bgpd.model import IPAddress
from kbgpd_lab.lab.blackhole import BFD, BFD6, blackhole, blackholed, restore
from kbgpd_lab.lab.failover import blackhole_and_time
from kbgpd_lab.lab.lab import Lab, LabService
from kbgpd_lab.lab.routers import FibWatch, RouterBfd

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(300)]

IP4, IP6 = "10.99.100.1", "fd00:99:100::1"
WEB = LabService("web", (IP4, IP6), pod_nodes=(1, 2))
TIMERS = RouterBfd(receive_interval=300, transmit_interval=300, detect_multiplier=3)
DETECT = TIMERS.detect_multiplier * TIMERS.receive_interval / 1000
HOLD, KEEPALIVE = 9, 3
WATCHDOG = 1.0
#: Over the target (detect time + FIB work) by seconds, far under a hold-timer failover.
MARGIN = 2.0


def _logs(lab: Lab) -> str:
    parts = [lab.router.log_tail(20)]
    for path in sorted(lab.dir.glob("node*/speaker.log")):
        parts.append(f"--- {path.parent.name}\n{path.read_text(errors='replace')[-2500:]}")
    return "\n".join(parts)


@pytest.fixture(scope="module", params=["frr", "bird"])
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    top = tmp_path_factory.mktemp(f"bfd-{request.param}")
    started = time.monotonic()
    lab = Lab.up(
        router=request.param,
        nodes=2,
        cluster="file",
        ecmp="stateless",
        services=[WEB],
        hold_time=HOLD,
        bfd=TIMERS,
        speaker_bfd=True,
        error_wait_time=(1, 2),
        # The cases end node1's sessions often enough for its speaker to hold a peer
        # down (it then only listens): the router connects every second.
        connect_retry=1,
        bfd_watchdog=WATCHDOG,
        state_dir=top / "state",
        directory=top / "lab",
    )
    print(f"\n{request.param}: lab up in {time.monotonic() - started:.1f} s")
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(autouse=True)
def _print_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    running = request.node.funcargs.get("lab")
    if isinstance(running, Lab) and (rep is None or rep.failed):
        sys.stderr.write(f"\n==== lab logs\n{_logs(running)}\n")


def addresses(lab: Lab, node: int) -> tuple[IPAddress, IPAddress]:
    return lab.topology.node_address(node, 4), lab.topology.node_address(node, 6)


def ready(lab: Lab, timeout: float = 60) -> None:
    """Both nodes in both FIBs and every BFD session Up at the router: a case starts
    (and leaves the lab) there."""
    nodes = [addresses(lab, i) for i in (1, 2)]
    lab.router.wait_fib(IP4, {a for a, _ in nodes}, timeout=timeout)
    lab.router.wait_fib(IP6, {b for _, b in nodes}, timeout=timeout)
    want = {a for pair in nodes for a in pair}
    lab.router.wait_bfd(lambda s: all(s.get(a) == "up" for a in want), timeout=timeout)


def settled(lab: Lab, quiet: float = 3.0, timeout: float = 60) -> dict[IPAddress, str]:
    """The router's session marks once none has changed for ``quiet`` seconds: a node
    back from a failure may still reset a session or two (collisions, BFD coming Up at
    both ends at different times)."""
    marks, since = lab.router.sessions_since(), time.monotonic()
    deadline = since + timeout
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"sessions still changing: {marks}"
        now = lab.router.sessions_since()
        if now != marks:
            marks, since = now, time.monotonic()
        time.sleep(0.1)
    return marks


def time_until_gone(lab: Lab, address: IPAddress, prefix: str, timeout: float) -> float:
    start = time.monotonic()
    while address in lab.router.fib(prefix):
        assert time.monotonic() - start < timeout, f"{address} still a next hop of {prefix}"
    return time.monotonic() - start


def test_a_blackholed_node_leaves_the_ecmp_set_within_the_detect_time(lab: Lab) -> None:
    ready(lab)
    result = blackhole_and_time(lab, 1, IP4, timeout=30)
    try:
        print(
            f"\n{lab.router.kind}: node1 out of the ECMP set {result.seconds * 1000:.0f} ms "
            f"after the blackhole (detect time {DETECT * 1000:.0f} ms); router: BGP "
            f"{result.session}, BFD {result.bfd}"
        )
        assert result.seconds < DETECT + MARGIN
        # Torn down by BFD: the hold timer cannot expire before HOLD - KEEPALIVE seconds
        # (the last keepalive may have arrived just before the blackhole), so without BFD
        # the session would still be Established now.
        assert result.seconds < HOLD - KEEPALIVE
        assert result.session != "Established"
        assert result.bfd == "down"
        n2 = addresses(lab, 2)
        assert lab.router.neighbors()[n2[0]] == "Established"
        assert lab.router.fib(IP4) == {n2[0]}
        lab.router.wait_fib(IP6, {n2[1]}, timeout=DETECT + MARGIN)
    finally:
        restore(lab.topology.nodes[0])
    ready(lab)


def test_a_stopped_speaker_is_dropped_within_watchdog_and_detect_time(lab: Lab) -> None:
    ready(lab)
    pid = lab.speaker_pid(1)
    assert pid is not None
    n1 = addresses(lab, 1)[0]
    try:
        os.kill(pid, signal.SIGSTOP)
        took = time_until_gone(lab, n1, IP4, timeout=WATCHDOG + DETECT + MARGIN + 5)
        print(
            f"\n{lab.router.kind}: SIGSTOPped speaker out of the ECMP set after "
            f"{took * 1000:.0f} ms (watchdog {WATCHDOG * 1000:.0f} ms + detect "
            f"{DETECT * 1000:.0f} ms); router: BGP {lab.router.neighbors().get(n1)}, "
            f"BFD {lab.router.bfd_sessions().get(n1)}"
        )
        assert took < WATCHDOG + DETECT + MARGIN
        # And it stays out: its ExaBGP, alive without its speaker, must not connect again
        # and re-send the routes (the watchdog stops it; the router connects every second).
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            assert n1 not in lab.router.fib(IP4), "the hung node came back"
            assert lab.router.neighbors().get(n1) != "Established"
            time.sleep(0.1)
    finally:
        os.kill(pid, signal.SIGCONT)
    ready(lab)


def test_bfd_down_on_one_peer_leaves_the_other_session_alone(lab: Lab) -> None:
    ready(lab)
    (n1_4, n1_6), (n2_4, n2_6) = addresses(lab, 1), addresses(lab, 2)
    before = settled(lab)
    with blackholed(lab.topology.nodes[0], BFD6):
        lab.router.wait_bfd(lambda s: s.get(n1_6) != "up", timeout=DETECT + MARGIN)
        lab.router.wait_fib(IP6, {n2_6}, timeout=DETECT + MARGIN)
        # The IPv6 session was reset (the speaker reconnects at once, and with
        # bfdStrict sends nothing on it until BFD is Up again) ...
        deadline = time.monotonic() + MARGIN
        while lab.router.sessions_since().get(n1_6) == before[n1_6]:
            assert time.monotonic() < deadline, "node1's IPv6 session was not reset"
        # node1's IPv4 session is the very session it was, with its routes.
        assert lab.router.sessions_since()[n1_4] == before[n1_4]
        assert lab.router.bfd_sessions()[n1_4] == "up"
        assert lab.router.fib(IP4) == {n1_4, n2_4}
    ready(lab)
    assert lab.router.sessions_since()[n1_4] == before[n1_4]


def test_strict_routes_reach_the_router_only_after_bfd_is_up(lab: Lab) -> None:
    ready(lab)
    (n1_4, _), (n2_4, n2_6) = addresses(lab, 1), addresses(lab, 2)
    lab.stop_speaker(1, signal.SIGTERM)
    lab.router.wait_fib(IP4, {n2_4}, timeout=30)
    lab.router.wait_fib(IP6, {n2_6}, timeout=30)
    node1 = lab.topology.nodes[0]
    blackhole(node1, BFD)
    try:
        lab.start_speaker(1)
        # BGP comes up; BFD cannot.
        lab.router.wait_neighbors(lambda n: n.get(n1_4) == "Established", timeout=60)
        assert lab.router.bfd_sessions().get(n1_4) != "up"
        window = time.monotonic() + 2.0
        while time.monotonic() < window:
            rib = lab.router.rib()
            paths = rib.get(ipaddress.ip_network(f"{IP4}/32"), [])
            assert n1_4 not in {p.next_hop for p in paths}, "a route sent before BFD was Up"
            time.sleep(0.05)
    finally:
        restore(node1)
    start = time.monotonic()
    lab.router.wait_fib(IP4, {n1_4, n2_4}, timeout=30)
    print(f"\n{lab.router.kind}: routes at the router {time.monotonic() - start:.2f} s after BFD")
    ready(lab)


@pytest.mark.parametrize("router", ["frr", "bird"])
def test_a_graceful_restart_with_retain_keeps_the_node_in_the_fib(
    router: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # BIRD: bfd graceful (BFD down during the restart would otherwise end it); FRR needs
    # nothing (a peer whose BGP session is already down in graceful restart keeps its
    # routes when BFD goes down).
    timers = RouterBfd(300, 300, 3, graceful=router == "bird")
    with Lab.up(
        router=router,
        nodes=2,
        ipv6=False,
        cluster="file",
        ecmp="stateless",
        services=[LabService("web", (IP4,), pod_nodes=(1, 2))],
        hold_time=HOLD,
        graceful_restart=True,
        on_sigterm="retain",
        bfd=timers,
        speaker_bfd=True,
        error_wait_time=(1, 2),
        state_dir=tmp_path / "state",
        directory=tmp_path / "lab",
    ) as gr_lab:
        try:
            n1, n2 = addresses(gr_lab, 1)[0], addresses(gr_lab, 2)[0]
            gr_lab.router.wait_bfd(lambda s: s.get(n1) == s.get(n2) == "up", timeout=30)
            with FibWatch(gr_lab.router, {IP4: {n1, n2}}) as watch:
                gr_lab.stop_speaker(1, signal.SIGTERM)
                # BFD with node1 is gone (AdminDown, then bfdd stopped) ...
                gr_lab.router.wait_bfd(lambda s: s.get(n1) != "up", timeout=10)
                assert n1 in gr_lab.router.restarting_peers()
                gr_lab.start_speaker(1)
                gr_lab.wait_speaker_refreshed(1, timeout=60)
                gr_lab.router.wait_bfd(lambda s: s.get(n1) == "up", timeout=30)
            # ... and the FIB never lost node1.
            assert watch.samples > 0
            assert watch.deviations == []
        except BaseException:
            sys.stderr.write(f"\n==== lab logs\n{_logs(gr_lab)}\n")
            raise
