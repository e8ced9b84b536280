"""The controller against the API simulator: allocation written to the live cluster.

Each test seeds Services in the simulator, runs the real controller (leader election,
informers, allocate(), status subresource, Events) in-process over loopback HTTP, and
checks what ended up in the simulator's store: status.loadBalancer.ingress, the pool
annotation, the Events, and which requests were made.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from k8s_kit import (
    FAST,
    client_for,
    lb_service,
    lease_renewals,
    namespace,
    running,
    simulator,
)

from bgpd.config import load_config_or_raise
from bgpd.controller import Controller, ControllerOptions, run_controller
from bgpd.model import Config
from k8s_watcher.client import KubeClient
from k8s_watcher.leader import LeaderElector, LeaderTiming
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

POOL_ANNOTATION = "metallb.io/ip-allocated-from-pool"
SHARE = "metallb.io/allow-shared-ip"
FAST_LEASE = LeaderTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)

POOLS = """
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: small}
spec:
  addresses: [10.99.0.10-10.99.0.11]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: reserved}
spec:
  addresses: [10.99.1.0/29]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: team-a}
spec:
  addresses: [10.99.2.0/29]
  serviceAllocation:
    priority: 1
    namespaceSelectors:
      - matchLabels: {team: a}
"""


def load(tmp_path: Path, text: str = POOLS) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    config, _ = load_config_or_raise([path])
    return config


def ingress(sim: ApiSimulator, name: str, ns: str = "default") -> list[str]:
    obj = sim.store.get("services", name, ns)
    assert obj is not None, f"service {ns}/{name} is gone"
    entries = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [e["ip"] for e in entries]


def annotations(sim: ApiSimulator, name: str, ns: str = "default") -> dict[str, str]:
    obj = sim.store.get("services", name, ns)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def events(sim: ApiSimulator, name: str | None = None) -> list[tuple[str, str, str, str]]:
    """(object name, type, reason, message) of every Event, oldest first."""
    out = []
    for e in sim.store.list("events"):
        obj = e["involvedObject"]
        if name is None or obj["name"] == name:
            out.append((obj["name"], e["type"], e["reason"], e["message"]))
    return out


def reasons(sim: ApiSimulator, name: str) -> list[str]:
    return [r for _, _, r, _ in events(sim, name)]


def lease(sim: ApiSimulator, name: str = "kube-bgpd-controller") -> dict[str, Any]:
    obj = sim.store.get("leases", name, "default")
    return {} if obj is None else dict(obj["spec"])


class Env:
    def __init__(self, sim: ApiSimulator, client: KubeClient, config: Config) -> None:
        self.sim = sim
        self.client = client
        self.config = config
        self.controllers: list[Controller] = []

    @contextlib.asynccontextmanager
    async def controller(self, identity: str = "c1") -> AsyncIterator[Controller]:
        """Run one controller (leader election included) for the block."""
        found: list[Controller] = []
        options = ControllerOptions(
            lease_namespace="default", identity=identity, leader=FAST_LEASE, informer=FAST
        )
        coro = run_controller(
            self.config,
            self.client,
            options,
            elected=lambda _elector, controller: found.append(controller),
        )
        async with running(coro, f"controller-{identity}"):
            await wait_until_async(lambda: bool(found), what="controller created")
            yield found[0]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with simulator(tmp_path) as (sim, kubeconfig), client_for(kubeconfig) as client:
        yield Env(sim, client, load(tmp_path))


async def test_allocates_writes_status_annotation_and_events(env: Env) -> None:
    sim = env.sim
    sim.store.create(lb_service("web"))
    sim.store.create(lb_service("plain", svc_type="ClusterIP"))
    async with env.controller():
        await wait_until_async(lambda: ingress(sim, "web") != [], what="web allocated")
        await wait_until_async(lambda: reasons(sim, "web") == ["IPAllocated"], what="event")
    assert ingress(sim, "web") == ["10.99.0.10"]
    assert annotations(sim, "web")[POOL_ANNOTATION] == "small"
    assert events(sim, "web") == [("web", "Normal", "IPAllocated", 'Assigned IP ["10.99.0.10"]')]
    assert ingress(sim, "plain") == []
    assert POOL_ANNOTATION not in annotations(sim, "plain")
    patches = [(r.method, r.path) for r in sim.request_log if r.method == "PATCH"]
    assert ("PATCH", "/api/v1/namespaces/default/services/web/status") in patches
    assert ("PATCH", "/api/v1/namespaces/default/services/web") in patches


@pytest.mark.parametrize(
    ("service", "expected", "pool"),
    [
        pytest.param(
            {"annotations": {"metallb.io/loadBalancerIPs": "10.99.1.3"}},
            ["10.99.1.3"],
            "reserved",
            id="annotation-from-non-auto-pool",
        ),
        pytest.param({"load_balancer_ip": "10.99.0.11"}, ["10.99.0.11"], "small", id="spec-ip"),
        pytest.param(
            {"annotations": {"metallb.io/address-pool": "reserved"}},
            ["10.99.1.0"],
            "reserved",
            id="requested-pool",
        ),
    ],
)
async def test_requested_ips_and_pools(
    env: Env, service: dict[str, Any], expected: list[str], pool: str
) -> None:
    env.sim.store.create(lb_service("asks", **service))
    async with env.controller():
        await wait_until_async(lambda: ingress(env.sim, "asks") != [], what="allocation")
        await wait_until_async(lambda: POOL_ANNOTATION in annotations(env.sim, "asks"), what="pool")
    assert ingress(env.sim, "asks") == expected
    assert annotations(env.sim, "asks")[POOL_ANNOTATION] == pool


async def test_namespace_selector_pool(env: Env) -> None:
    sim = env.sim
    sim.store.create(namespace("team-a", {"team": "a"}))
    sim.store.create(lb_service("api", "team-a"))
    sim.store.create(lb_service("api", "default"))
    async with env.controller():
        await wait_until_async(lambda: ingress(sim, "api", "team-a") != [], what="team-a")
        await wait_until_async(lambda: ingress(sim, "api", "default") != [], what="default")
    assert ingress(sim, "api", "team-a") == ["10.99.2.0"]
    assert ingress(sim, "api", "default") == ["10.99.0.10"]


async def test_conflicting_requests_one_wins_other_gets_event_then_ip_on_delete(
    env: Env,
) -> None:
    sim = env.sim
    wanted = {"metallb.io/loadBalancerIPs": "10.99.0.11"}
    sim.store.create(lb_service("first", annotations=wanted))
    sim.store.create(lb_service("second", annotations=wanted))
    async with env.controller():
        await wait_until_async(lambda: "AllocationFailed" in reasons(sim, "second"), what="failure")
        # Events are recorded without waiting for the status write, so the failure Event of
        # the loser can land before the winner's status patch: wait for the write itself.
        await wait_until_async(lambda: ingress(sim, "first") != [], what="first allocated")
        assert ingress(sim, "first") == ["10.99.0.11"], "ties go by namespace/name"
        assert ingress(sim, "second") == []
        (failed,) = [e for e in events(sim, "second") if e[2] == "AllocationFailed"]
        assert failed[1] == "Warning"
        assert "10.99.0.11" in failed[3]
        # Deleting the holder releases the IP; the waiting Service gets it.
        sim.store.delete("services", "first", "default")
        await wait_until_async(lambda: ingress(sim, "second") == ["10.99.0.11"], what="handover")
        await wait_until_async(lambda: "IPAllocated" in reasons(sim, "second"), what="event")
    assert reasons(sim, "second").count("AllocationFailed") == 1, "not repeated every round"


async def test_sharing_key_shares_one_ip(env: Env) -> None:
    sim = env.sim
    shared = {"metallb.io/allow-shared-ip": "dns"}
    sim.store.create(lb_service("dns-tcp", annotations=shared, ports=(53,)))
    sim.store.create(lb_service("dns-alt", annotations=shared, ports=(5353,)))
    sim.store.create(lb_service("other"))
    async with env.controller():
        for name in ("dns-tcp", "dns-alt", "other"):
            await wait_until_async(lambda n=name: ingress(sim, n) != [], what=f"{name} allocated")
    assert ingress(sim, "dns-tcp") == ingress(sim, "dns-alt") == ["10.99.0.10"]
    assert ingress(sim, "other") == ["10.99.0.11"]


async def share_one_ip(sim: ApiSimulator) -> None:
    """a-dns and b-dns (sharing key dns, other ports) created and sharing 10.99.0.10."""
    sim.store.create(lb_service("a-dns", annotations={SHARE: "dns"}, ports=(53,)))
    sim.store.create(lb_service("b-dns", annotations={SHARE: "dns"}, ports=(5353,)))
    for name in ("a-dns", "b-dns"):
        await wait_until_async(lambda n=name: ingress(sim, n) != [], what=f"{name} allocated")
    assert ingress(sim, "a-dns") == ingress(sim, "b-dns") == ["10.99.0.10"]


async def edit_first_key_and_see_it_move(sim: ApiSimulator) -> None:
    """a-dns (sorting first) changes its sharing key: it moves, b-dns keeps the IP."""
    sim.store.patch(
        "services", "a-dns", {"metadata": {"annotations": {SHARE: "other"}}}, namespace="default"
    )
    await wait_until_async(lambda: ingress(sim, "a-dns") == ["10.99.0.11"], what="a moves")
    assert ingress(sim, "b-dns") == ["10.99.0.10"]


async def test_sharing_edits_in_sequence_keep_the_incumbent(env: Env) -> None:
    """Two Services share 10.99.0.10. Editing the first one's sharing key (it sorts first,
    so name order alone would cut the second off) moves only the edited one, as in
    MetalLB; the untouched one never gets a ClearAssignment. Editing it back keeps its
    new IP (stable), and a request for the shared IP under another key is refused."""
    sim = env.sim
    async with env.controller():
        await share_one_ip(sim)
        await edit_first_key_and_see_it_move(sim)

        sim.store.patch(
            "services", "a-dns", {"metadata": {"annotations": {SHARE: "dns"}}}, namespace="default"
        )
        sim.store.create(
            lb_service("c-web", load_balancer_ip="10.99.0.10", annotations={SHARE: "web"})
        )
        await wait_until_async(lambda: "AllocationFailed" in reasons(sim, "c-web"), what="c")
    assert ingress(sim, "a-dns") == ["10.99.0.11"]
    assert ingress(sim, "b-dns") == ["10.99.0.10"]
    assert reasons(sim, "b-dns") == ["IPAllocated"]
    assert reasons(sim, "a-dns") == ["IPAllocated", "ClearAssignment", "IPAllocated"]


async def test_incumbent_still_wins_after_a_controller_restart(env: Env) -> None:
    """Item 2 across a leader change: the new controller starts with no previous result
    and takes the incumbents from the cluster (the Services holding the IP in their
    status, under their current terms) in its first round; an edit after that moves only
    the edited Service, although it sorts first."""
    sim = env.sim
    async with env.controller():
        await share_one_ip(sim)
    async with env.controller("c2") as second:
        await wait_until_async(lambda: second.rounds >= 1, what="a round by the new controller")
        await edit_first_key_and_see_it_move(sim)
    assert "ClearAssignment" not in reasons(sim, "b-dns")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"spec": {"type": "ClusterIP"}}, id="type-cluster-ip"),
        pytest.param({"spec": {"loadBalancerClass": "other.example/lb"}}, id="other-class"),
    ],
)
async def test_release_when_no_longer_ours(env: Env, change: dict[str, Any]) -> None:
    """The pool holds two IPs; a third Service waits. When one holder stops being a
    LoadBalancer of ours, its status and annotation are cleared and the waiter gets the IP."""
    sim = env.sim
    for name in ("a", "b", "c"):
        sim.store.create(lb_service(name))
    async with env.controller():
        await wait_until_async(lambda: "AllocationFailed" in reasons(sim, "c"), what="c waits")
        # c's Event and a's status are separate writes, not ordered between them.
        await wait_until_async(lambda: ingress(sim, "a") != [], what="a's status written")
        held = ingress(sim, "a")
        assert held == ["10.99.0.10"]
        sim.store.patch("services", "a", change, namespace="default")
        await wait_until_async(lambda: ingress(sim, "c") == held, what="c gets a's IP")
        await wait_until_async(lambda: POOL_ANNOTATION not in annotations(sim, "a"), what="cleared")
        await wait_until_async(lambda: "ClearAssignment" in reasons(sim, "a"), what="event")
    assert ingress(sim, "a") == []
    assert ingress(sim, "b") == ["10.99.0.11"]


async def test_assignments_survive_restart_and_are_read_first(env: Env) -> None:
    """Existing status is the allocator's memory: a Service already holding the higher
    address keeps it, and a newcomer created before the restart cannot take it."""
    sim = env.sim
    sim.store.create(lb_service("old", ips=("10.99.0.11",)))
    sim.store.create(lb_service("new"))
    async with env.controller():
        await wait_until_async(lambda: ingress(sim, "new") != [], what="new allocated")
        for name in ("old", "new"):
            await wait_until_async(lambda n=name: POOL_ANNOTATION in annotations(sim, n), what=name)
    assert ingress(sim, "old") == ["10.99.0.11"]
    assert ingress(sim, "new") == ["10.99.0.10"]
    before = {n: ingress(sim, n) for n in ("old", "new")}
    sim.request_log.clear()
    async with env.controller("c2") as second:
        await wait_until_async(lambda: second.rounds >= 1, what="a round by the new controller")
        # A second round (same config) starts only after the first made its writes.
        second.set_config(second.config)
        await wait_until_async(lambda: second.rounds >= 2, what="the first round finished")
    assert {n: ingress(sim, n) for n in ("old", "new")} == before
    status_writes = [r for r in sim.request_log if r.method == "PATCH"]
    assert status_writes == [], "a converged cluster needs no writes after a restart"


async def test_failed_writes_are_retried(env: Env) -> None:
    sim = env.sim
    async with env.controller() as controller:
        await wait_until_async(lambda: controller.rounds >= 1, what="first round")
        sim.fail_next(2, 503)
        sim.store.create(lb_service("web"))
        await wait_until_async(lambda: ingress(sim, "web") == ["10.99.0.10"], what="allocated")
    failed = [r for r in sim.request_log if r.status == 503]
    assert len(failed) == 2


async def test_only_one_leader_and_graceful_handover(env: Env) -> None:
    sim = env.sim
    sim.store.create(lb_service("web"))
    electors: dict[str, LeaderElector] = {}

    def keep(identity: str) -> Any:
        return lambda elector, _c: electors.__setitem__(identity, elector)

    async def start(identity: str) -> asyncio.Task[None]:
        options = ControllerOptions(
            lease_namespace="default", identity=identity, leader=FAST_LEASE, informer=FAST
        )
        return asyncio.create_task(
            run_controller(env.config, env.client, options, elected=keep(identity))
        )

    first = await start("one")
    await wait_until_async(lambda: lease(sim).get("holderIdentity") == "one", what="one leads")
    second = await start("two")
    try:
        await wait_until_async(lambda: "two" in electors, what="two campaigning")
        # Several retry periods (renewals by one): two must stay a standby.
        renewals = lease_renewals(sim)
        await wait_until_async(lambda: renewals() >= 4, what="one renewing its Lease")
        assert electors["one"].is_leader
        assert not electors["two"].is_leader
        assert ingress(sim, "web") == ["10.99.0.10"]
        transitions = lease(sim)["leaseTransitions"]
        # A graceful stop releases the Lease: two takes over within a few retry periods,
        # far sooner than the 2 s lease duration.
        first.cancel()
        await asyncio.wait({first})
        released_at = time.monotonic()
        await wait_until_async(lambda: electors["two"].is_leader, within=5, what="takeover")
        took = time.monotonic() - released_at
        assert took < FAST_LEASE.lease_duration
        assert lease(sim)["holderIdentity"] == "two"
        assert lease(sim)["leaseTransitions"] == transitions + 1
        sim.store.create(lb_service("after"))
        await wait_until_async(
            lambda: ingress(sim, "after") == ["10.99.0.11"], what="two allocates"
        )
        assert ingress(sim, "web") == ["10.99.0.10"]
    finally:
        for task in (first, second):
            task.cancel()
        await asyncio.wait({first, second})


async def test_config_reload_moves_ips_the_new_config_no_longer_allows(
    env: Env, tmp_path: Path
) -> None:
    sim = env.sim
    sim.store.create(lb_service("web"))
    async with env.controller() as controller:
        await wait_until_async(lambda: ingress(sim, "web") == ["10.99.0.10"], what="first IP")
        moved = POOLS.replace("10.99.0.10-10.99.0.11", "10.99.0.20-10.99.0.21")
        controller.set_config(load(tmp_path, moved))
        await wait_until_async(lambda: ingress(sim, "web") == ["10.99.0.20"], what="moved IP")
        await wait_until_async(lambda: "ClearAssignment" in reasons(sim, "web"), what="event")
    assert reasons(sim, "web") == ["IPAllocated", "ClearAssignment", "IPAllocated"]
