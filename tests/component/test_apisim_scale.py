"""The API simulator at the scale of the benchmarks: 10,000 Services + 10,000 EndpointSlices.

Bounds are generous (they catch a quadratic path or a hang, not a slow machine).
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from apisim_helpers import endpoint_slice, service

from kbgpd_lab.apisim import ApiSimulator

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

COUNT = 10_000


async def test_ten_thousand_services_and_slices_list_watch_and_fan_out() -> None:
    async with ApiSimulator() as sim, aiohttp.ClientSession(base_url=sim.url) as http:
        for i in range(COUNT):
            sim.store.create(service(f"s{i:05d}", svc_type="LoadBalancer"))
            sim.store.create(
                endpoint_slice(f"s{i:05d}-a", f"s{i:05d}", (f"10.1.{i // 250}.{i % 250}",))
            )

        started = time.monotonic()
        async with http.get("/api/v1/services") as r:
            services = json.loads(await r.read())
        async with http.get("/apis/discovery.k8s.io/v1/endpointslices") as r:
            slices = json.loads(await r.read())
        assert len(services["items"]) == len(slices["items"]) == COUNT
        assert time.monotonic() - started < 20

        pages = 0
        token = ""
        seen = 0
        while True:
            params = {"limit": "500", **({"continue": token} if token else {})}
            async with http.get("/api/v1/services", params=params) as r:
                page = json.loads(await r.read())
            pages += 1
            seen += len(page["items"])
            token = page["metadata"].get("continue", "")
            if not token:
                break
        assert (pages, seen) == (COUNT // 500, COUNT)

        watchers = [
            await http.get("/apis/discovery.k8s.io/v1/endpointslices", params={"watch": "1"})
            for _ in range(4)
        ]
        changes = 1000

        async def drain(response: aiohttp.ClientResponse) -> int:
            seen = 0
            async with asyncio.timeout(60):
                while seen < COUNT + changes:
                    line = await response.content.readline()
                    assert line, "watch ended early"
                    seen += 1
            return seen

        readers = [asyncio.create_task(drain(w)) for w in watchers]
        await sim.wait_for_watches(4)
        started = time.monotonic()
        for i in range(changes):
            sim.store.patch(
                "endpointslices",
                f"s{i:05d}-a",
                {"endpoints": [{"addresses": ["10.2.0.1"]}]},
                namespace="default",
            )
            if i % 50 == 0:
                await asyncio.sleep(0)
        assert await asyncio.gather(*readers) == [COUNT + changes] * 4
        assert time.monotonic() - started < 30
        for w in watchers:
            w.close()
