"""Leader failover between two real `kube-bgpd controller` processes.

Both processes campaign for the same Lease in the API simulator (in-process, loopback).
The leader is killed with SIGKILL, so it can neither release the Lease nor finish a
write; the standby must notice the Lease expire and take over within seconds, keep every
existing assignment, allocate what arrived meanwhile, and never hand out an IP twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from k8s_kit import free_port, lb_service, lease_renewals, simulator

from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.kit.processes import fast_lease_argv
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(90)]

LEASE_SECONDS = 2.0
CONFIG = """
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool}
spec:
  addresses: [10.99.3.0/28]
"""


def kube_bgpd() -> str:
    return str(Path(sys.executable).with_name("kube-bgpd"))


def holder(sim: ApiSimulator) -> str | None:
    obj = sim.store.get("leases", "kube-bgpd-controller", "default")
    return None if obj is None else obj["spec"].get("holderIdentity")


def all_ingress(sim: ApiSimulator) -> dict[str, list[str]]:
    out = {}
    for obj in sim.store.list("services"):
        if obj["spec"].get("type") != "LoadBalancer":
            continue
        entries = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        out[obj["metadata"]["name"]] = [e["ip"] for e in entries]
    return out


async def scrape(port: int) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


@contextlib.asynccontextmanager
async def controller_process(
    identity: str, config: Path, kubeconfig: Path, log: Path, *extra: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            kube_bgpd(),
            "controller",
            "--config",
            str(config),
            "--kubeconfig",
            str(kubeconfig),
            "--lease-namespace",
            "default",
            "--identity",
            identity,
            *fast_lease_argv(LEASE_SECONDS),
            *extra,
            stdout=out,
            stderr=out,
            env={**os.environ, "HOME": str(log.parent)},
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def test_standby_takes_over_after_sigkill_without_double_allocation(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    async with simulator(tmp_path) as (sim, kubeconfig):
        for i in range(4):
            sim.store.create(lb_service(f"svc{i}"))
        async with contextlib.AsyncExitStack() as stack:
            one = await stack.enter_async_context(
                controller_process("one", config, kubeconfig, tmp_path / "one.log")
            )
            await wait_until_async(lambda: holder(sim) == "one", within=20, what="one leads")
            port = free_port()
            two = await stack.enter_async_context(
                controller_process(
                    "two",
                    config,
                    kubeconfig,
                    tmp_path / "two.log",
                    "--metrics-address",
                    f"127.0.0.1:{port}",
                )
            )
            await wait_until_async(
                lambda: all(all_ingress(sim).values()), within=20, what="first allocations"
            )
            before = all_ingress(sim)
            # Let two come up (a cold Python start can take seconds on a busy machine)
            # and watch the Lease being renewed for a few retry periods.
            two_log = tmp_path / "two.log"
            await wait_until_async(
                lambda: "controller.starting" in two_log.read_text(), within=30, what="two up"
            )
            renewals = lease_renewals(sim)
            await wait_until_async(lambda: renewals() >= 4, within=20, what="one renewing")
            assert holder(sim) == "one"
            assert two.returncode is None

            one.send_signal(signal.SIGKILL)
            await one.wait()
            killed_at = time.monotonic()
            # Work that arrives while nobody leads.
            for i in range(4, 7):
                sim.store.create(lb_service(f"svc{i}"))
            await wait_until_async(lambda: holder(sim) == "two", within=20, what="two takes over")
            takeover = time.monotonic() - killed_at
            await wait_until_async(
                lambda: all(all_ingress(sim).values()), within=20, what="new allocations"
            )
            after = all_ingress(sim)
            metrics = await scrape(port)

            # Graceful stop of the new leader releases the Lease.
            two.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(two.wait(), 20) == 0
            assert holder(sim) is None

    assert takeover < LEASE_SECONDS + 3.0, f"takeover took {takeover:.1f} s"
    assert {k: after[k] for k in before} == before, "existing assignments kept"
    ips = [ip for ips in after.values() for ip in ips]
    assert len(ips) == len(set(ips)) == 7, f"double allocation: {after}"
    lease = sim.store.get("leases", "kube-bgpd-controller", "default")
    assert lease is not None
    assert lease["spec"]["leaseTransitions"] >= 1
    # The new leader's pool gauge counts every IP in use, including the old leader's.
    assert 'kube_bgpd_pool_addresses_in_use{pool="pool"} 7.0' in metrics
    assert 'kube_bgpd_pool_addresses{pool="pool"} 16.0' in metrics
