"""`ApiSimulatorThread`: the simulator for synchronous code, calls marshalled into its loop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from apisim_helpers import service

from kbgpd_lab.apisim import ApiError, ApiSimulatorThread

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]


def get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 (loopback only)
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_thread_exposes_store_hooks_and_log() -> None:
    with ApiSimulatorThread() as sim:
        created = sim.store.create(service("a"))
        assert sim.store.resource_version == int(created["metadata"]["resourceVersion"])
        status, doc = get(f"{sim.url}/api/v1/namespaces/default/services/a")
        assert (status, doc["kind"]) == (200, "Service")
        with pytest.raises(ApiError) as err:
            sim.store.create(service("a"))
        assert err.value.code == 409
        sim.fail_next(1, 503)
        assert get(f"{sim.url}/api/v1/services")[0] == 503
        sim.compact()
        assert sim.store.watermark == sim.store.resource_version
        assert sim.cut_watches() == 0
        assert [(r.method, r.status) for r in sim.request_log][-2:] == [("GET", 200), ("GET", 503)]
        sim.clear_request_log()
        assert sim.request_log == []
    with pytest.raises(RuntimeError):
        sim.store.get("services", "a", "default")
