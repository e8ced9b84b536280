"""`kube-bgpd speaker` with a BFD-enabled BGPPeer against a real FRR router with BFD: the
speaker starts bfdd beside ExaBGP, the session comes Up at both ends, and /status,
`kube-bgpd status` and /metrics show it; SIGTERM leaves no bfdd behind.

The speaker runs in node1's namespace; its work directory is under /tmp (bfdd runs as
frr and must reach it)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.netns import process_alive, processes_in
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN, Router
from kbgpd_lab.lab.speakerfiles import ROUTER_V4, node1_cluster_dump
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
METRICS = "127.0.0.1:7473"


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kbfd-speaker-"))
    path.chmod(0o711)  # the work directory inside is the speaker's (0700)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def config() -> str:
    return yaml.safe_dump_all(
        [
            manifests.pool("svc", ["10.99.100.0/24"]),
            manifests.bgp_peer(
                "tor",
                my_asn=NODE_ASN,
                peer_asn=ROUTER_ASN,
                address=ROUTER_V4,
                holdTime="9s",
                bfdProfile="fast",
            ),
            manifests.advertisement("svc", ipAddressPools=["svc"]),
            manifests.config_object(
                manifests.METALLB_V1BETA1,
                "BFDProfile",
                "fast",
                {"receiveInterval": 300, "transmitInterval": 300, "detectMultiplier": 3},
            ),
        ]
    )


def test_speaker_runs_bfdd_and_shows_the_session(
    topology: Topology, make_router: Callable[..., Router], work: Path
) -> None:
    frr = make_router("frr", bfd=True)
    (work / "config.yaml").write_text(config())
    (work / "cluster.yaml").write_text(node1_cluster_dump(["10.99.100.1"]))
    state = work / "state"
    state.mkdir(mode=0o700)
    node = topology.nodes[0]
    with (work / "speaker.log").open("wb") as out:
        proc = node.popen(
            [
                KUBE_BGPD,
                "speaker",
                "--config",
                str(work / "config.yaml"),
                "--node-name",
                "node1",
                "--cluster-file",
                str(work / "cluster.yaml"),
                "--work-dir",
                str(state),
                "--metrics-address",
                METRICS,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def status() -> dict[str, Any] | None:
        out = node.run([KUBE_BGPD, "status", "--json", "--work-dir", str(state)], check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def bfd_up() -> dict[str, Any] | None:
        doc = status()
        bfd = None if doc is None else doc.get("bfd")
        # Up with the negotiated timers: right after Up bfdd may still show the slow
        # start's (1 s x 3 = 3000 ms) until the Poll/Final sequence ends (RFC 5880 6.8.3).
        if bfd and bfd["peers"] and bfd["peers"][0]["state"] == "up":
            return doc if bfd["peers"][0]["detect_ms"] == 900 else None
        return None

    try:
        doc = wait_until(
            bfd_up,
            within=60,
            poll=0.2,
            what="the speaker's BFD session Up",
            give_up=lambda: None if proc.poll() is None else f"speaker exited {proc.poll()}",
            details=lambda: (work / "speaker.log").read_text(errors="replace")[-3000:],
        )
        row = doc["bfd"]["peers"][0]
        assert row["name"] == "tor"
        assert row["address"] == ROUTER_V4
        assert row["detect_ms"] == 900
        bfdd = doc["bfd"]["pid"]
        assert process_alive(bfdd)
        # The router's bfdd sees the session Up too (bgpd registered it for the neighbour).
        peers = frr.vtysh_json("show bfd peers json")
        assert [p["status"] for p in peers] == ["up"]
        # The human table and the metrics say the same.
        table = node.run([KUBE_BGPD, "status", "--work-dir", str(state)]).stdout
        assert "BFD PEER" in table
        metrics = node.run(
            [
                sys.executable,
                "-c",
                f"import urllib.request; print(urllib.request.urlopen('http://{METRICS}/metrics')"
                ".read().decode())",
            ]
        ).stdout
        assert 'kube_bgpd_bfd_session_up{peer="tor"} 1.0' in metrics
        assert 'kube_bgpd_bfd_detect_time_seconds{peer="tor"} 0.9' in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not process_alive(bfdd)
        assert processes_in(node.name) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
