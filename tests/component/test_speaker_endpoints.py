"""The speaker's exposed endpoints and its work directory, attacked as issue 15 did, with
real speakers in node1's namespace and real routers (the routes are checked AT THE
ROUTER):

* a drain over the network listener is refused (404), over the control socket it works,
  and `kube-bgpd drain --cancel` brings the routes back with their normal attributes;
* a second speaker on the same work directory exits with one line naming the first; a
  world-writable or foreign-owned work directory is refused; a planted ``exabgp.tmp``
  symlink is not followed;
* a full work directory (a real ENOSPC on a small tmpfs in a private mount namespace)
  keeps ExaBGP and its routes, is reported, and the write is retried once there is room.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import signal
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_speaker import KUBE_BGPD, STATUS, SpeakerProc, config_text

from kbgpd_lab.kit.measure import rss_kb
from kbgpd_lab.lab.routers import Router
from kbgpd_lab.lab.speakerfiles import NODE1_V4, node1_cluster_dump, node_item, service_items
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

PREFIX = ipaddress.ip_network("10.99.100.5/32")
MB = 1 << 20


@pytest.fixture
def speakers(topology: Topology, tmp_path: Path) -> Iterator[Callable[..., SpeakerProc]]:
    made: list[SpeakerProc] = []

    def start(config: str, dump: str, *, tmp: Path | None = None, **kw: Any) -> SpeakerProc:
        tmp = tmp or tmp_path
        tmp.mkdir(exist_ok=True)
        made.append(SpeakerProc(topology, tmp, config, dump, **kw))
        return made[-1]

    yield start
    for sp in made:
        sp.stop()


def http_code(topology: Topology, method: str, path: str) -> str:
    """The HTTP status the network listener answers in node1's namespace."""
    out = topology.nodes[0].run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            method,
            f"http://{STATUS}{path}",
        ],
        check=False,
    )
    return out.stdout.strip()


def fill(path: Path) -> None:
    """Write zeros to ``path`` until its file system is full (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    failed: OSError | None = None
    try:
        while failed is None:
            try:
                os.write(fd, bytes(4096))
            except OSError as exc:
                failed = exc
    finally:
        os.close(fd)
    assert failed.errno == errno.ENOSPC, failed


def communities(rib: dict[Any, Any]) -> list[tuple[str, ...]]:
    return [p.communities for p in rib.get(PREFIX, [])]


@pytest.mark.parametrize("kind", [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")])
def test_drain_only_on_the_control_socket_and_cancel_restores_routes_at_the_router(
    kind: str,
    topology: Topology,
    make_router: Callable[..., Router],
    speakers: Callable[..., SpeakerProc],
) -> None:
    router = make_router(kind)
    sp = speakers(config_text(drain_window="3s"), node1_cluster_dump(["10.99.100.5"]))
    router.wait_rib(lambda r: communities(r) == [("65000:1",)], 30)
    socket = sp.dir / "work" / "control.sock"
    assert stat.S_IMODE(socket.stat().st_mode) == 0o600

    # The network listener: probes and metrics yes; no drain, no /status by default.
    assert http_code(topology, "GET", "/healthz") == "200"
    assert http_code(topology, "GET", "/metrics") == "200"
    for method, path in (("POST", "/drain"), ("DELETE", "/drain"), ("GET", "/status")):
        assert http_code(topology, method, path) == "404", (method, path)
    refused = topology.nodes[0].run([KUBE_BGPD, "drain", "--metrics-address", STATUS], check=False)
    assert refused.returncode == 2
    assert "control socket" in refused.stderr
    # Nothing changed at the router.
    assert communities(router.rib()) == [("65000:1",)]
    assert sp.status()["mode"] == "normal"

    # Over the socket: GRACEFUL_SHUTDOWN at the router, then cancelled within the window.
    out = sp.cli("drain")
    assert out.returncode == 0, out.stderr
    router.wait_rib(lambda r: communities(r) == [("65000:1", "65535:0")], 20)
    back = sp.cli("drain", "--cancel")
    assert back.returncode == 0, back.stderr
    assert "drain cancelled" in back.stdout
    router.wait_rib(lambda r: communities(r) == [("65000:1",)], 20)
    assert sp.status()["drain"]["source"] is None

    # A drain that ran to its withdrawal: the cancel announces the route again.
    assert sp.cli("drain").returncode == 0
    router.wait_rib(lambda r: PREFIX not in r, 20)
    assert sp.status()["mode"] == "withdrawn"
    assert sp.cli("drain", "--cancel").returncode == 0
    router.wait_rib(lambda r: communities(r) == [("65000:1",)], 30)
    assert sp.status()["mode"] == "normal"
    sp.proc.send_signal(signal.SIGTERM)
    assert sp.proc.wait(30) == 0


def test_second_speaker_on_the_work_directory_exits_naming_the_first(
    make_router: Callable[..., Router], speakers: Callable[..., SpeakerProc], tmp_path: Path
) -> None:
    router = make_router("bird")
    dump = node1_cluster_dump(["10.99.100.5"])
    first = speakers(config_text(), dump, tmp=tmp_path / "a")
    router.wait_rib(lambda r: PREFIX in r, 30)
    # Same work directory (its --work-dir), its own config files.
    second = speakers(config_text(), dump, tmp=tmp_path / "b", work_dir=first.dir / "work")
    assert second.proc.wait(30) == 2
    lines = second.log_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"pid {first.proc.pid}" in lines[0]
    assert "in use by another kube-bgpd speaker" in lines[0]
    # The first one still holds its routes and its ExaBGP socket.
    assert first.proc.poll() is None
    assert PREFIX in router.rib()
    assert first.status()["exabgp"]["connected"] is True


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        pytest.param(lambda d: d.chmod(0o777), "world-writable", id="world-writable"),
        pytest.param(lambda d: os.chown(d, 65534, 65534), "belongs to uid 65534", id="foreign"),
    ],
)
def test_unsafe_work_directory_is_refused(
    speakers: Callable[..., SpeakerProc],
    tmp_path: Path,
    prepare: Callable[[Path], None],
    message: str,
) -> None:
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    prepare(work)
    sp = speakers(config_text(), node1_cluster_dump(["10.99.100.5"]))
    assert sp.proc.wait(30) == 2
    (line,) = sp.log_text().strip().splitlines()
    assert message in line
    assert not (work / "kube-bgpd.lock").exists()


def test_planted_symlinks_are_not_followed(
    make_router: Callable[..., Router], speakers: Callable[..., SpeakerProc], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "exabgp.tmp").symlink_to(victim)
    (work / "exabgp.conf").symlink_to(victim)
    router = make_router("bird")
    speakers(config_text(), node1_cluster_dump(["10.99.100.5"]))
    router.wait_rib(lambda r: PREFIX in r, 30)
    assert victim.read_text() == "untouched\n"
    conf = work / "exabgp.conf"
    assert not conf.is_symlink()
    assert stat.S_IMODE(conf.lstat().st_mode) == 0o600
    assert "neighbor" in conf.read_text()


def test_full_work_directory_keeps_exabgp_and_retries(
    topology: Topology, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """A real ENOSPC: the speaker's work directory is a 64 KiB tmpfs mounted in a private
    mount namespace (``unshare -m``); the test fills it through /proc/PID/root."""
    router = make_router("bird")
    sp = SpeakerProc(
        topology,
        tmp_path,
        config_text(),
        node1_cluster_dump(["10.99.100.5"]),
        tmpfs_kib=64,
    )
    try:
        router.wait_rib(lambda r: PREFIX in r, 30)
        generation = sp.wait_status(lambda d: d["exabgp"]["connected"])["exabgp"]["generation"]
        work = sp.work  # as the speaker's mount namespace sees it
        filler = work / "filler"
        fill(filler)
        # A change that needs a new ExaBGP configuration (another hold time), on SIGHUP.
        sp.config.write_text(config_text().replace("holdTime: 9s", "holdTime: 12s"))
        sp.proc.send_signal(signal.SIGHUP)
        doc = sp.wait_status(lambda d: d["exabgp"]["write_error"] != "")
        assert "No space left on device" in doc["exabgp"]["write_error"]
        ready = topology.nodes[0].run(["curl", "-s", f"http://{STATUS}/readyz"], check=False)
        assert "not written" in ready.stdout
        metrics = topology.nodes[0].run(["curl", "-s", f"http://{STATUS}/metrics"]).stdout
        failures = next(
            line
            for line in metrics.splitlines()
            if line.startswith("kube_bgpd_exabgp_config_write_failures_total ")
        )
        assert float(failures.split()[1]) >= 1
        # ExaBGP kept running with what it had: same process, route still at the router.
        assert doc["exabgp"]["generation"] == generation
        assert sp.proc.poll() is None
        assert PREFIX in router.rib()
        assert "exabgp.config_write_failed" in sp.log_text()
        # Room again: the retry writes it, ExaBGP reloads it in place (the same process:
        # bgpd.exabgp.reload), the route stays or comes back.
        filler.unlink()
        sp.wait_status(lambda d: d["exabgp"]["write_error"] == "", timeout=60)
        assert "exabgp.config_written" in sp.log_text()
        assert "exabgp.reconfigured action=reload" in sp.log_text()
        router.wait_rib(lambda r: PREFIX in r, 30)
        assert "hold-time 12;" in (work / "exabgp.conf").read_text()
    finally:
        sp.stop()


def json_dump(annotations: dict[str, str]) -> str:
    """node1 and 20 Services (10.99.100.1-20) served from it, each with ``annotations``,
    as `kubectl get -o json` prints them (the speaker parses JSON dumps fast)."""
    items = [node_item("node1", NODE1_V4, labels={"rack": "r1"})]
    for i in range(20):
        svc, slice_ = service_items(f"web{i}", f"10.99.100.{i + 1}", uid=f"u{i}")
        svc["metadata"]["annotations"] = dict(annotations)
        items += [svc, slice_]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def test_huge_annotations_keep_status_small_and_memory_flat(
    make_router: Callable[..., Router], speakers: Callable[..., SpeakerProc]
) -> None:
    """Issue 15: 20 Services with 1 MB invalid annotations grew /status to 20 MB and the
    speaker from 90 to 273 MB. Now the routes keep their last valid attributes, /status
    carries bounded excerpts, and the speaker grows by about what it must hold (the 20 MB
    of annotations in its snapshot)."""
    router = make_router("bird")
    sp = speakers(config_text(), json_dump({}))
    router.wait_rib(lambda r: len(r) == 20, 30)
    sp.wait_status(lambda d: d["exabgp"]["connected"] and len(d["routes"]) == 20)
    before = rss_kb(sp.proc.pid)
    sp.dump.write_text(json_dump({"kube-bgpd.io/communities": "x" * MB}))
    doc = sp.wait_status(lambda d: len((d["explain"] or {}).get("notices", [])) == 20, timeout=60)
    size = len(json.dumps(doc))
    grown = rss_kb(sp.proc.pid) - before
    print(f"/status {size} bytes; RSS {before} KiB + {grown} KiB")
    assert size < 256 * 1024, size
    assert grown < 80 * 1024, grown
    # Nothing was withdrawn: the last valid attributes stay at the router.
    assert len(router.rib()) == 20
