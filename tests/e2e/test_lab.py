"""End to end: real speakers on three nodes, a real router's kernel FIB, real traffic.

Every test brings a lab up (kbgpd_lab.lab.lab: FRR or BIRD router, ``kube-bgpd speaker`` with
its ExaBGP on each node, keep-alive HTTP servers, a client namespace), acts on it the way
an operator or a failure would, and judges by the router's FIB and by client requests.
The speakers read the cluster from a dump file the lab writes (``make_lab`` starts every
lab with Service demo/web: 10.99.100.1 and fd00:99:100::1, pods on node1 and node2).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from bgpd.allocation import ANNOTATION_IP_ALLOCATED_FROM_POOL
from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.apicluster import ApiClient, ApiError
from kbgpd_lab.lab.client import Result
from kbgpd_lab.lab.lab import Lab, LabService, kube_bgpd_argv
from kbgpd_lab.lab.netns import process_alive
from kbgpd_lab.lab.routers import FibWatch

pytestmark = [pytest.mark.e2e, pytest.mark.root]

IP4 = "10.99.100.1"
IP6 = "fd00:99:100::1"
ROUTERS = [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")]
#: Short connections (one request each), 8 at a time.
CONCURRENCY = 8
STEADY = (
    "--requests-per-connection",
    "1",
    "--concurrency",
    str(CONCURRENCY),
    "--interval",
    "0.005",
)


#: The router's ECMP for the scenarios that change it under traffic: the lab's default,
#: a router pinning open connections to their node (strict: zero failed requests), with
#: FRR and BIRD; and a stateless one (the FIB alone), which shows what is left without.
ECMP_CASES = [
    pytest.param("frr", "pinned", id="frr"),
    pytest.param("bird", "pinned", id="bird"),
    pytest.param("frr", "stateless", id="frr-stateless"),
]


def steady_args(ecmp: str) -> tuple[str, ...]:
    """Pinned: keep-alive connections of 5 requests 10 ms apart, so many connections are
    open at every change (the hardest case). Stateless: one request per connection, so
    only connections caught in flight are exposed to the re-hash."""
    if ecmp == "pinned":
        return (
            "--requests-per-connection",
            "5",
            "--concurrency",
            str(CONCURRENCY),
            "--interval",
            "0.01",
        )
    return STEADY


def assert_no_failed_request(result: Result, changes: list[tuple[float, float]], ecmp: str) -> None:
    """Pinned: strictly zero failed requests. Stateless: only resets inside a change window
    (see unexplained_failures), at most one per client worker and change."""
    if ecmp == "pinned":
        assert result.failures == 0, result
        return
    assert unexplained_failures(result, changes) == [], result
    assert result.failures <= CONCURRENCY * len(changes), result


def unexplained_failures(result: Result, changes: list[tuple[float, float]]) -> list[Any]:
    """Failures that are not a connection reset while the router's ECMP set changed.

    Linux multipath routing is hash-threshold: when a next hop leaves or joins, part of
    the flows *already open* hash to another node, which answers their next segment with
    a reset (measured; FRR 8.4 and BIRD 2 program no resilient nexthop groups). That
    can hit connections in flight at the instant of a change, whatever the speaker does.
    Everything else counts: a refused or timed-out request, or a reset outside a change
    window, means traffic went to a node that could not serve it.
    """
    return [
        (opened, failed, error)
        for opened, failed, error in result.failure_log
        if error != "ConnectionResetError"
        or not any(opened <= end and failed >= start for start, end in changes)
    ]


def nodes(
    lab: Lab, *numbers: int, family: int = 4
) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return {lab.topology.node_address(n, family) for n in numbers}


@pytest.mark.parametrize(
    ("router", "cluster"),
    [
        pytest.param("frr", "api", id="frr-api"),
        pytest.param("bird", "api", id="bird-api"),
        # The speakers' other cluster source (a dump file), once.
        pytest.param("bird", "file", id="bird-cluster-file"),
    ],
)
def test_cluster_then_local_route_sets_and_spread(
    router: str, cluster: str, make_lab: Callable[..., Lab]
) -> None:
    """Cluster: every node, traffic on all three; Local: only the pods' nodes, v4 and v6."""
    lab = make_lab(router, cluster=cluster)
    assert lab.router.fib(IP4) == nodes(lab, 1, 2, 3)
    assert lab.router.fib(IP6) == nodes(lab, 1, 2, 3, family=6)  # /128 over the v6 session
    for target in (IP4, IP6):
        result = lab.client(target, connections=300)
        assert result.failures == 0, result
        assert set(result.per_node) == {"node1", "node2", "node3"}
        assert min(result.per_node.values()) > 40, result.per_node

    [web] = lab.services
    local = replace(web, policy="Local")
    lab.set_services([local])
    lab.router.wait_fib(IP4, nodes(lab, 1, 2), timeout=10)
    lab.router.wait_fib(IP6, nodes(lab, 1, 2, family=6), timeout=10)
    result = lab.client(IP4, connections=300)
    assert result.failures == 0, result
    assert set(result.per_node) == {"node1", "node2"}

    # Pods move to node3: the route follows the endpoints.
    lab.set_services([replace(local, pod_nodes=(3,))])
    lab.router.wait_fib(IP4, nodes(lab, 3), timeout=10)
    # The Service goes away: the route is withdrawn everywhere.
    lab.set_services([])
    lab.router.wait_fib(IP4, set(), timeout=10)
    lab.router.wait_fib(IP6, set(), timeout=10)


@pytest.mark.parametrize(("router", "ecmp"), ECMP_CASES)
def test_rolling_restart_fails_no_request(
    router: str, ecmp: str, make_lab: Callable[..., Lab]
) -> None:
    """Every speaker stopped (SIGTERM: withdraw, then exit) and started in turn under
    steady traffic: zero failed requests with a pinning router; with a stateless one, none
    but connections caught open by an ECMP change (see assert_no_failed_request)."""
    lab = make_lab(router, ecmp=ecmp)
    changes: list[tuple[float, float]] = []
    client = lab.start_steady_client(IP4, *steady_args(ecmp))
    try:
        time.sleep(0.3)
        for i in (1, 2, 3):
            start = time.monotonic()
            assert lab.stop_speaker(i, signal.SIGTERM) == 0  # graceful: withdraw, then exit
            # Withdrawn before the speaker exited (FRR then takes ~60 ms to the FIB).
            lab.router.wait_fib(IP4, nodes(lab, *(n for n in (1, 2, 3) if n != i)), timeout=2)
            changes.append((start, time.monotonic()))
            start = time.monotonic()
            lab.start_speaker(i)
            lab.router.wait_fib(IP4, nodes(lab, 1, 2, 3), timeout=30)
            changes.append((start, time.monotonic()))
            time.sleep(0.3)
    finally:
        result = lab.finish_client(client)
    assert_no_failed_request(result, changes, ecmp)
    assert result.requests > 100, result
    assert set(result.per_node) == {"node1", "node2", "node3"}


def restart_speaker_retaining(lab: Lab, i: int) -> None:
    """SIGTERM node I's speaker (onSigterm retain), check the router keeps its routes for
    graceful restart, start it again and wait for its End-of-RIB at the router."""
    peers = {lab.topology.node_address(i, f) for f in (4, 6)}

    def sessions_down() -> bool:
        states = lab.router.neighbors()
        return all(states.get(p) != "Established" for p in peers)

    assert lab.stop_speaker(i, signal.SIGTERM) == 0
    # The sessions really closed, and the router holds the routes for the restart.
    wait_until(sessions_down, within=5, what=f"node{i}'s sessions down", poll=0.02)
    assert peers <= lab.router.restarting_peers()
    lab.start_speaker(i)
    lab.wait_speaker_refreshed(i)


@pytest.mark.parametrize("router", ROUTERS)
def test_rolling_restart_retaining_routes_fails_no_request_and_changes_no_fib(
    router: str, make_lab: Callable[..., Lab]
) -> None:
    """Graceful restart and ``onSigterm: retain``: every speaker stopped (SIGTERM) and
    started in turn under steady traffic. Each stop closes the node's sessions without a
    withdraw, the router keeps its routes as stale, and the next speaker refreshes them
    and sends End-of-RIB. Strict: zero failed requests, and the router's FIB for both
    service IPs, sampled back to back from before the first stop until after the last
    End-of-RIB, is never anything but all three nodes."""
    lab = make_lab(router, graceful_restart=True, on_sigterm="retain")
    want = {IP4: nodes(lab, 1, 2, 3), IP6: nodes(lab, 1, 2, 3, family=6)}
    client = lab.start_steady_client(IP4, *STEADY)
    try:
        with FibWatch(lab.router, want) as watch:
            time.sleep(0.3)
            for i in (1, 2, 3):
                restart_speaker_retaining(lab, i)
            time.sleep(0.5)  # a stale route flushed late would show here
    finally:
        result = lab.finish_client(client)
    assert watch.deviations == [], watch.deviations[:10]
    assert watch.samples > 100, watch.samples
    assert result.failures == 0, result
    assert result.requests > 100, result
    assert set(result.per_node) == {"node1", "node2", "node3"}
    for i in (1, 2, 3):
        log = (lab.dir / f"node{i}" / "speaker.log").read_text()
        for peer in ("tor-v4", "tor-v6"):
            assert f"speaker.stop_peer peer={peer} action=retained" in log, log[-2000:]


@pytest.mark.parametrize("router", ROUTERS)
def test_sigkilled_speaker_routes_gone_within_a_second_then_back(
    router: str, make_lab: Callable[..., Lab]
) -> None:
    lab = make_lab(router)
    exabgp = lab.speaker_status(2)["exabgp"]["pid"]
    start = time.monotonic()
    lab.stop_speaker(2, signal.SIGKILL)
    # PR_SET_PDEATHSIG stops ExaBGP; the kernel closes its socket; the router drops it.
    lab.router.wait_fib(IP4, nodes(lab, 1, 3), timeout=1.0)
    lab.router.wait_fib(IP6, nodes(lab, 1, 3, family=6), timeout=1.0)
    assert time.monotonic() - start < 1.5
    assert not process_alive(exabgp)
    lab.start_speaker(2)
    lab.router.wait_fib(IP4, nodes(lab, 1, 2, 3), timeout=30)


@pytest.mark.parametrize(
    ("router", "graceful_restart"),
    [
        pytest.param("frr", True, id="frr-gr"),
        pytest.param("bird", True, id="bird-gr"),
        pytest.param("frr", False, id="frr-no-gr"),
        pytest.param("bird", False, id="bird-no-gr"),
    ],
)
def test_exabgp_sigkill_routes_come_back(
    router: str, graceful_restart: bool, make_lab: Callable[..., Lab]
) -> None:
    """The speaker restarts a killed ExaBGP and replays; with graceful restart the router
    keeps node1's route the whole time."""
    lab = make_lab(router, graceful_restart=graceful_restart)
    node1 = lab.topology.node_address(1)
    old = lab.speaker_status(1)["exabgp"]["pid"]
    os.kill(old, signal.SIGKILL)
    if not graceful_restart:
        # The kernel closes ExaBGP's socket: the router drops node1 at once, long before
        # a new ExaBGP (about a second to start) is back.
        lab.router.wait_fib(IP4, nodes(lab, 2, 3), timeout=5)

    def replayed() -> bool:
        status = lab.speaker_status(1)
        pid = status["exabgp"]["pid"]
        return pid not in (None, old) and all(p["state"] == "up" for p in status["peers"])

    missing = 0
    deadline = time.monotonic() + 30
    next_status = 0.0
    while True:
        fib = lab.router.fib(IP4)
        missing += node1 not in fib
        if time.monotonic() >= next_status:  # the status CLI is slow: ask now and then
            if replayed() and fib == nodes(lab, 1, 2, 3):
                break
            next_status = time.monotonic() + 0.3
        assert time.monotonic() < deadline, f"routes not back: {fib}, {lab.speaker_status(1)}"
        time.sleep(0.01)
    if graceful_restart:
        assert missing == 0  # sampled every ~10 ms from the kill to the replay


@pytest.mark.parametrize("router", ROUTERS)
def test_router_restart_routes_back(router: str, make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(router)
    lab.router.restart()
    # The router connects to every node (static neighbours; the speakers' ExaBGP listens).
    lab.router.wait_fib(IP4, nodes(lab, 1, 2, 3), timeout=30)
    lab.router.wait_fib(IP6, nodes(lab, 1, 2, 3, family=6), timeout=30)


@pytest.mark.parametrize(("router", "ecmp"), ECMP_CASES)
def test_drain_then_withdrawal_fails_no_request(
    router: str, ecmp: str, make_lab: Callable[..., Lab]
) -> None:
    # A window long enough for a loaded machine to read the RIB and FIB inside it (2 s was
    # not, with a load average of 12).
    lab = make_lab(router, drain_window=6.0, ecmp=ecmp)
    # Besides the steady client: one keep-alive connection to node3, held through it all.
    held = lab.hold_connection(IP4, node="node3")
    client = lab.start_steady_client(IP4, *steady_args(ecmp))
    try:
        time.sleep(0.3)
        start = time.monotonic()
        lab.drain(3)
        net = ipaddress.ip_network(f"{IP4}/32")
        rib = lab.router.wait_rib(
            lambda r: any("65535:0" in p.communities for p in r.get(net, [])), timeout=10
        )
        [drained] = [p for p in rib[net] if "65535:0" in p.communities]
        assert drained.next_hop == lab.topology.node_address(3)
        # The router honours GRACEFUL_SHUTDOWN (RFC 8326; FRR by itself, BIRD through the
        # lab's import filter, as docs/routers.md recommends): node3's path loses the
        # best-path tie at once, so it leaves the FIB while still in the RIB ...
        lab.router.wait_fib(IP4, nodes(lab, 1, 2), timeout=15)
        changes = [(start, time.monotonic())]
        node3 = lab.topology.node_address(3)
        assert node3 in {p.next_hop for p in lab.router.rib()[net]}, "withdrawn too early"
        # The open connection: still node3's when the router pins it; a stateless router
        # re-hashes it to node1 or node2, which reset it.
        assert held.ask() == ("node3" if ecmp == "pinned" else "ConnectionResetError")
        assert held.ask("new") in ("node1", "node2")  # new connections avoid node3
        # ... and is withdrawn when the drain window (6 s) ends.
        lab.router.wait_rib(lambda r: node3 not in {p.next_hop for p in r[net]}, timeout=15)
        assert lab.speaker_status(3)["mode"] == "withdrawn"
        assert lab.router.fib(IP4) == nodes(lab, 1, 2)
        if ecmp == "pinned":
            assert held.ask() == "node3"  # after the withdrawal, too
        time.sleep(0.5)  # traffic after the withdrawal, too
    finally:
        result = lab.finish_client(client)
        held.close()
    assert_no_failed_request(result, changes, ecmp)
    assert set(result.per_node) == {"node1", "node2", "node3"}


@pytest.mark.parametrize("router", ROUTERS)
def test_lab_status_reports_what_runs(router: str, make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(
        router,
        cluster="file",
        services=[LabService("web", (IP4,), pod_nodes=(1,), policy="Local")],
    )
    doc = lab.status()
    assert doc["routes"] == {IP4: ["node1"]}
    assert set(doc["sessions"].values()) == {"Established"}
    assert len(doc["sessions"]) == 6
    assert all(pid for pid in doc["speakers"].values())
    assert all(pid for pid in doc["http_servers"].values())


@pytest.mark.parametrize("router", ROUTERS)
def test_api_cluster_controller_allocates_and_routes_follow(
    router: str, make_lab: Callable[..., Lab]
) -> None:
    """The API simulator and the controller in the router namespace: Services written to
    the API get their IPs from the pool; the router's routes follow them, and `kubectl
    bgpd` shows them as `kube-bgpd explain` decides and the speakers' status says."""
    lab = make_lab(router, services=[LabService("web", (), pod_nodes=(1, 2))])
    [web] = lab.services
    assert web.ips == ("10.99.100.1", "fd00:99:100::1")
    assert "10.99.100.1,fd00:99:100::1" in lab.get_services_table()
    assert lab.router.fib(IP4) == nodes(lab, 1, 2, 3)

    api = LabService("api", (), pod_nodes=(3,), policy="Local")
    lab.set_services([web, api])
    [_, api] = lab.services
    assert api.ips == ("10.99.100.2", "fd00:99:100::2")
    lab.wait_service(api)
    assert lab.router.fib("10.99.100.2") == nodes(lab, 3)
    assert set(lab.client("10.99.100.2", connections=30).per_node) == {"node3"}
    check_kubectl_bgpd_inspect(lab, api)

    lab.set_services([api])  # web deleted: its IPs withdrawn
    lab.router.wait_fib(IP4, set(), timeout=10)
    lab.router.wait_fib(IP6, set(), timeout=10)

    # A staged API outage: unreachable, BGP untouched, then back.
    assert lab.api is not None
    impatient = ApiClient(lab.api.netns_name, lab.api.url, timeout=1)
    lab.api_outage(True)
    with pytest.raises(ApiError, match="timed out"):
        impatient.list("Service")
    assert lab.router.fib("10.99.100.2") == nodes(lab, 3)
    lab.api_outage(False)
    assert "10.99.100.2" in lab.get_services_table()


def check_kubectl_bgpd_inspect(lab: Lab, svc: LabService) -> None:
    """`kubectl bgpd inspect` (the plugin through the real kubectl) against the lab: the
    allocation the Service's status holds, each node's decision and reason as `kube-bgpd
    explain` gives them over a dump of the same cluster, and the routes advertised from
    the node announcing (read from the status objects the speakers write); `kubectl bgpd
    peers`: every node's sessions to the router up."""
    key = f"{svc.namespace}/{svc.name}"

    def advertised() -> dict[str, Any] | None:
        doc: dict[str, Any] = json.loads(lab.kubectl_bgpd("inspect", key, "-o", "json"))
        routes = [r for n in doc["nodes"] for r in n["routes"]]
        return doc if routes and all(r["advertised"] for r in routes) else None

    # The speakers write status at most once per statusInterval: wait for it.
    doc = wait_until(advertised, within=30, poll=0.2, what=f"{key} advertised in inspect")
    [obj] = [o for o in lab.services_in_api() if o["metadata"]["name"] == svc.name]
    ingress = [i["ip"] for i in obj["status"]["loadBalancer"]["ingress"]]
    assert doc["allocation"]["ips"] == ingress == list(svc.ips)
    assert (
        doc["allocation"]["pool"]
        == obj["metadata"]["annotations"][ANNOTATION_IP_ALLOCATED_FROM_POOL]
    )

    dump = lab.dir / "inspect-dump.json"
    dump.write_text(lab.kubectl("get", "services,endpointslices,nodes", "-A", "-o", "json"))
    config = ["--config", str(lab.dir / "config.yaml"), "--cluster", str(dump)]
    explain = subprocess.run(
        [*kube_bgpd_argv(), "explain", *config, "--output", "json", key],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert explain.returncode == 0, explain.stderr
    by_node = {n["node"]: n for n in doc["nodes"]}
    explained = json.loads(explain.stdout)
    assert {e["node"] for e in explained} == set(by_node) == {"node1", "node2", "node3"}
    for e in explained:
        node = by_node[e["node"]]
        assert sorted((r["prefix"], r["peer"]) for r in node["routes"]) == sorted(
            (r["prefix"], r["peer"]) for r in e["routes"]
        )
        assert node["skipped"] == [
            {k: v for k, v in s.items() if k != "service"} for s in e["skipped"]
        ]
    # Only node3 has the Service's endpoint (policy Local): it announces, and its status
    # says the router has the routes; the others announce nothing.
    assert by_node["node3"]["announced"] is True
    assert by_node["node3"]["routes"]
    for other in ("node1", "node2"):
        assert by_node[other]["announced"] is False
        assert by_node[other]["routes"] == []
        assert [s["reason"] for s in by_node[other]["skipped"]] == ["noLocalEndpoints"]

    peers = json.loads(lab.kubectl_bgpd("peers", "-o", "json"))
    states = {n["node"]: {s["state"] for s in n["sessions"]} for n in peers["nodes"]}
    assert states == {f"node{i}": {"up"} for i in (1, 2, 3)}


@pytest.mark.parametrize("router", ROUTERS)
def test_watch_cut_forced_410_and_api_outage_change_no_route(
    router: str, make_lab: Callable[..., Lab]
) -> None:
    """The speakers watch the API. Cut watches, a compaction that answers the resumes with
    410, and 30 s without the API (over three hold times, five informer retries): the
    router receives no route change at all (the speakers keep their last known state);
    afterwards a change is followed again."""
    lab = make_lab(router, hold_time=9)
    assert lab.apisim is not None
    [web] = lab.services
    want = {IP4: nodes(lab, 1, 2, 3), IP6: nodes(lab, 1, 2, 3, family=6)}
    before = lab.router.changes_received()
    seen: set[tuple[str, frozenset[object]]] = set()

    def watch_fib(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for ip in want:
                seen.add((ip, frozenset(lab.router.fib(ip))))
            time.sleep(0.05)

    assert lab.apisim.cut_watches() >= 3  # each speaker watches Services, slices, Nodes
    watch_fib(2)
    lab.apisim.compact()  # every resume from an older resourceVersion gets 410
    lab.apisim.cut_watches()
    watch_fib(3)
    lab.api_outage(True)
    try:
        watch_fib(30)
    finally:
        lab.api_outage(False)
    watch_fib(3)
    assert seen == {(ip, frozenset(hops)) for ip, hops in want.items()}
    assert lab.router.changes_received() == before
    assert set(lab.router.neighbors().values()) == {"Established"}

    # The watches came back: a change is announced again.
    lab.set_services([replace(web, policy="Local")])
    lab.router.wait_fib(IP4, nodes(lab, 1, 2), timeout=30)
