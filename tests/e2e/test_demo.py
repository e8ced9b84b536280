"""`kube-bgpd-lab demo` (what `make demo` runs) goes through its six steps and cleans up."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from kbgpd_lab.lab.demo import run_demo
from kbgpd_lab.lab.lab import Lab
from kbgpd_lab.lab.netns import netns_exists, process_alive

pytestmark = [pytest.mark.e2e, pytest.mark.root]


# FRR is what `make demo` runs; `kube-bgpd-lab demo --router bird` the same with BIRD.
@pytest.mark.parametrize("router", [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")])
def test_demo_runs_every_step_and_tears_down(router: str, tmp_path: Path) -> None:
    out = io.StringIO()
    seen: list[Lab] = []
    pids: list[int] = []

    def on_lab(lab: Lab) -> None:
        seen.append(lab)
        pids.extend(p for ns in lab.topology.all_netns() for p in ns.pids)

    status = run_demo(router=router, interactive=False, out=out, state_dir=tmp_path, on_lab=on_lab)
    text = out.getvalue()
    assert status == 0, text
    for n in range(1, 7):
        assert f"==> [{n}/6]" in text, text
    assert re.search(
        r"demo\s+web\s+LoadBalancer\s+\S+\s+10\.99\.100\.1,fd00:99:100::1\s+80:\d+/TCP", text
    )
    assert "=> node1, node2, node3" in text
    assert "=> node1, node2\n" in text  # Local
    assert "=> node2\n" in text  # node1's speaker stopped
    # Step 5: kubectl apply of a community reaches every path at the router, no reset.
    assert "$ kubectl apply -f advertisement.yaml" in text
    assert re.search(r"every path of 10\.99\.100\.1 at the router carries 64512:100", text), text
    assert re.search(r"BGP sessions: (\d+) of \1 Established; ExaBGP restarted on no node", text)
    # Step 6 under traffic: the lab's router pins open connections, so none fails.
    assert "pinned ECMP" in text
    assert re.search(r"during the stop: \d+ requests -> node1: \d+, node2: \d+; 0 failed\n", text)
    assert re.search(r"answers after node1's route left the router: node2 \d+, and node1 \d+", text)
    # The same restart with onSigterm retain: the router's route never changed.
    assert re.search(r"read \d+ times meanwhile, never changed: node1, node2\n", text), text
    assert re.search(r"during the restart: \d+ requests -> node\d: \d+, .*; 0 failed\n", text)
    assert re.search(r"300 requests -> node1: \d+, node2: \d+, node3: \d+; 0 failed", text)
    assert "demo finished" in text
    # Torn down: no namespace, no process, no state left.
    [lab] = seen
    assert not any(netns_exists(n) for n in lab.topology.namespaces())
    assert len(pids) >= 8  # router, controller, three speakers, three HTTP servers
    assert [p for p in pids if process_alive(p)] == []
    assert list(tmp_path.glob("*.json")) == []
