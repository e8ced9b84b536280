"""`kube-bgpd-lab up|status|client|down` as a user runs it, including after a crash.

Each test uses its own --state-dir, so it never sees (or removes) another run's lab.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbgpd_lab.lab.lab import lab_down
from kbgpd_lab.lab.netns import netns_exists, process_alive

pytestmark = [pytest.mark.e2e, pytest.mark.root]

KUBE_BGPD_LAB = str(Path(sys.executable).with_name("kube-bgpd-lab"))


def lab(state: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBE_BGPD_LAB, "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def recorded(state: Path) -> tuple[list[str], list[int]]:
    """Namespaces and PIDs every state file in ``state`` recorded."""
    names: list[str] = []
    pids: list[int] = []
    for path in state.glob("*.json"):
        doc = json.loads(path.read_text())
        names += doc.get("namespaces", [])
        pids += [p["pid"] for p in doc.get("pids", [])]
        for group in ("speakers", "servers"):
            pids += [p["pid"] for p in doc.get(group, {}).values()]
    return names, pids


def assert_nothing_left(names: list[str], pids: list[int]) -> None:
    assert [n for n in names if netns_exists(n)] == []
    deadline = time.monotonic() + 5
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if process_alive(p)] == []


ROUTERS = [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")]


@pytest.fixture
def state() -> Iterator[Path]:
    """A short --state-dir: each speaker's unix socket lives under it and must fit in
    sun_path (108 bytes), which pytest's tmp_path with a parametrized test name does not."""
    top = Path(tempfile.mkdtemp(prefix="kb-lab-"))
    yield top / "state"
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize(
    ("router", "ecmp"),
    [
        pytest.param("frr", "pinned", id="frr"),
        pytest.param("bird", "stateless", id="bird-stateless"),
    ],
)
def test_up_status_client_down(router: str, ecmp: str, state: Path) -> None:
    try:
        up = lab(state, "up", "--router", router, "--ecmp", ecmp)
        assert up.returncode == 0, up.stderr
        assert "10.99.100.1            node1, node2, node3" in up.stdout

        again = lab(state, "up")
        assert again.returncode == 1
        assert "already up" in again.stderr

        status = lab(state, "status", "--json")
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert doc["routes"]["fd00:99:100::1"] == ["node1", "node2", "node3"]
        assert doc["ecmp"] == ecmp
        # Pinned: the router's nftables table that keeps connections on their node.
        [router_ns] = [n for n in doc["namespaces"] if n.endswith("-router")]
        ruleset = subprocess.run(
            ["ip", "netns", "exec", router_ns, "nft", "list", "ruleset"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert ("kube_bgpd_lab_pin" in ruleset) == (ecmp == "pinned"), ruleset
        assert set(doc["sessions"].values()) == {"Established"}

        client = lab(state, "client", "--connections", "60", "--json")
        assert client.returncode == 0, client.stderr
        result = json.loads(client.stdout)
        assert result["failures"] == 0
        assert sum(result["per_node"].values()) == 60

        names, pids = recorded(state)
        assert len(names) == 5
        assert len(pids) >= 3 + 3 + 1  # speakers, HTTP servers, the router
    finally:
        names, pids = recorded(state)
        down = lab(state, "down")
    assert down.returncode == 0, down.stderr
    assert "removed 5 namespaces" in down.stdout
    assert_nothing_left(names, pids)
    assert list(state.glob("*.json")) == []
    assert lab(state, "status").returncode == 1


@pytest.mark.parametrize("router", ROUTERS)
def test_down_after_up_was_killed_midway(router: str, state: Path) -> None:
    """`lab up` SIGKILLed while starting the speakers: `lab down` still removes it all."""
    proc = subprocess.Popen(
        [KUBE_BGPD_LAB, "--state-dir", str(state), "up", "--router", router],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lab_file = state / "lab.json"
            if lab_file.exists() and json.loads(lab_file.read_text()).get("speakers"):
                break
            time.sleep(0.01)
        else:
            pytest.fail("lab up never started a speaker")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        names, pids = recorded(state)
        assert names
        assert any(process_alive(p) for p in pids)
        down = lab(state, "down")
        assert down.returncode == 0, down.stderr
        assert_nothing_left(names, pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        lab_down(state)  # whatever an assertion above left behind
