"""The real `kube-bgpd speaker` (in a node namespace, against a real BIRD and a real
mosquitto): its live /metrics passes `promtool check metrics` and reflects the routers'
view, its MQTT retained state is the current state, `--log-format json` logs are JSON
with stable event names, and `explain --from-speaker` answers from it."""

from __future__ import annotations

import ipaddress
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_kit import endpoint_slice, lb_service
from k8s_kit import node as node_object

from kbgpd_lab.kit.measure import exposition_samples as _samples
from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.netns import Netns
from kbgpd_lab.lab.routers import Router
from kbgpd_lab.lab.speakerfiles import cluster_list, one_peer_config
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(240)]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
LISTENER = "127.0.0.1:7473"
MQTT_PORT = 1883  # a fresh namespace: nothing else listens on its loopback


def _config() -> str:
    return one_peer_config(
        communities=("65000:7",), speaker={"mqtt": {"host": "127.0.0.1", "port": MQTT_PORT}}
    )


def _dump(services: dict[str, str]) -> str:
    """Services name -> IP, each with one ready endpoint on node1; plus an idle one."""
    items: list[dict[str, Any]] = [
        node_object("node1"),
        lb_service("idle", "shop", ips=("10.99.100.99",)),
    ]
    for name, ip in services.items():
        items.append(lb_service(name, "shop", ips=(ip,)))
        items.append(endpoint_slice(f"{name}-a", name, (("10.0.0.1", "node1", True),), "shop"))
    return cluster_list(items)


# Runs inside the namespace: print every retained message under kube-bgpd/ as one JSON
# object (topic -> payload text) once the broker has been quiet for 1 s.
SUBSCRIBER = """
import asyncio, json, sys, aiomqtt
async def main():
    got = {}
    async with aiomqtt.Client("127.0.0.1", int(sys.argv[1])) as c:
        await c.subscribe("kube-bgpd/#", qos=1)
        it = aiter(c.messages)
        while True:
            try:
                m = await asyncio.wait_for(anext(it), 1.0)
            except TimeoutError:
                break
            if m.retain:
                got[str(m.topic)] = m.payload.decode()
    print(json.dumps(got))
asyncio.run(main())
"""


def _retained(node: Netns) -> dict[str, str]:
    out = node.run([sys.executable, "-c", SUBSCRIBER, str(MQTT_PORT)], timeout=30)
    doc: dict[str, str] = json.loads(out.stdout)
    return doc


def _scrape(node: Netns, path: str = "/metrics") -> subprocess.CompletedProcess[str]:
    return node.run(["curl", "-s", "-f", f"http://{LISTENER}{path}"], check=False, timeout=10)


def _what_happened(retained: dict[str, str], node: Netns, log: Path, tmp_path: Path) -> str:
    """For a failure: what the broker held, what /metrics and the speaker's and broker's
    logs said."""
    metrics = [
        line
        for line in _scrape(node).stdout.splitlines()
        if line.startswith(("kube_bgpd_mqtt", "kube_bgpd_bgp_prefixes", "kube_bgpd_driver"))
    ]
    broker_log = tmp_path / "mosquitto.log"
    return "\n".join(
        [
            f"last retained: {json.dumps(retained, indent=1)}",
            *metrics,
            "speaker log:",
            log.read_text(errors="replace")[-6000:],
            "broker log:",
            broker_log.read_text(errors="replace")[-3000:] if broker_log.exists() else "",
        ]
    )


@pytest.fixture
def broker(topology: Topology, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {MQTT_PORT} 127.0.0.1\nallow_anonymous true\nuser root\nlog_type all\n"
    )
    with (tmp_path / "mosquitto.log").open("wb") as log:
        proc = topology.nodes[0].popen([MOSQUITTO, "-c", str(conf)], stdout=log, stderr=log)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_live_speaker_metrics_mqtt_logs_and_explain(
    topology: Topology,
    make_router: Callable[..., Router],
    broker: subprocess.Popen[bytes],
    tmp_path: Path,
) -> None:
    del broker
    bird = make_router("bird")
    node = topology.nodes[0]
    (tmp_path / "config.yaml").write_text(_config())
    dump = tmp_path / "cluster.yaml"
    dump.write_text(_dump({"web": "10.99.100.5", "api": "10.99.100.6"}))
    log_path = tmp_path / "speaker.log"
    argv = [
        KUBE_BGPD, "speaker", "--config", str(tmp_path / "config.yaml"),
        "--node-name", "node1", "--cluster-file", str(dump),
        "--work-dir", str(tmp_path / "work"), "--metrics-address", LISTENER,
        "--log-format", "json",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = node.popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    try:
        bird.wait_rib(
            lambda r: (
                {ipaddress.ip_network("10.99.100.5/32"), ipaddress.ip_network("10.99.100.6/32")}
                <= set(r)
            ),
            30,
        )
        web = 'kube_bgpd_service_announced{peer="tor",prefix="10.99.100.5/32",service="shop/web"}'

        def scraped() -> dict[str, float] | None:
            out = _scrape(node)
            s = _samples(out.stdout) if out.returncode == 0 else {}
            ok = s.get('kube_bgpd_bgp_session_up{peer="tor"}') == 1.0 and s.get(web) == 1.0
            return s if ok and s.get('kube_bgpd_convergence_seconds_count{phase="total"}') else None

        samples = wait_until(
            scraped,
            within=30,
            poll=0.2,
            what="session up, web announced and one convergence in /metrics",
        )
        text = _scrape(node).stdout
        lint = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
        )
        assert lint.returncode == 0, lint.stdout + lint.stderr
        assert samples['kube_bgpd_bgp_prefixes_accepted{peer="tor"}'] == 2.0
        assert samples['kube_bgpd_bgp_prefixes_advertised{peer="tor"}'] == 2.0
        assert samples['kube_bgpd_bgp_prefixes_desired{peer="tor"}'] == 2.0
        assert samples["kube_bgpd_exabgp_running"] == 1.0
        assert samples['kube_bgpd_services_skipped{reason="noEndpoints"}'] == 1.0
        assert samples['kube_bgpd_service_serving_endpoints{service="shop/idle"}'] == 0.0
        assert samples["kube_bgpd_reconcile_duration_seconds_count"] >= 1.0
        assert samples["kube_bgpd_mqtt_connected"] == 1.0
        assert _scrape(node, "/readyz").returncode == 0

        peer_topic = "kube-bgpd/node1/peers/tor"
        seen: dict[str, str] = {}

        def two_routes_advertised() -> dict[str, str] | None:
            r = _retained(node)
            seen.clear()
            seen.update(r)
            routes = [t for t in r if "/routes/" in t]
            peer = json.loads(r.get(peer_topic) or "{}")
            return r if len(routes) == 2 and peer.get("advertised") == 2 else None

        retained = wait_until(
            two_routes_advertised,
            within=30,
            poll=0.2,
            what="two retained routes, the peer's document saying 2 advertised",
            details=lambda: _what_happened(seen, node, log_path, tmp_path),
        )
        peer_doc = json.loads(retained[peer_topic])
        assert (peer_doc["state"], peer_doc["desired"], peer_doc["accepted"]) == ("up", 2, 2)
        route = json.loads(retained["kube-bgpd/node1/routes/10.99.100.5_32"])
        assert (route["state"], route["communities"]) == ("announced", ["65000:7"])
        assert retained["kube-bgpd/node1/status"] == "online"

        live = node.run(
            # Through the control socket in the work directory.
            [
                KUBE_BGPD,
                "explain",
                "--from-speaker",
                "--work-dir",
                str(tmp_path / "work"),
                "shop/web",
            ]
        )
        assert "10.99.100.5/32" in live.stdout
        assert "tor" in live.stdout

        # api is deleted: its series and its retained message go away by themselves.
        total = 'kube_bgpd_convergence_seconds_count{phase="total"}'
        before = _samples(_scrape(node).stdout)[total]
        dump.write_text(_dump({"web": "10.99.100.5"}))
        bird.wait_rib(lambda r: ipaddress.ip_network("10.99.100.6/32") not in r, 30)
        wait_until(
            lambda: 'service="shop/api"' not in _scrape(node).stdout,
            within=30,
            poll=0.2,
            what="api series gone",
        )
        # The withdrawal was timed end to end: one more "total" observation.
        wait_until(
            lambda: _samples(_scrape(node).stdout)[total] > before,
            within=30,
            poll=0.2,
            what="withdraw convergence",
        )
        wait_until(
            lambda: "kube-bgpd/node1/routes/10.99.100.6_32" not in _retained(node),
            within=30,
            poll=0.2,
            what="api's retained route cleared",
        )

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = log_path.read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(events) == len(lines), f"non-JSON log lines: {lines}"
    names = {e["event"] for e in events}
    assert {"speaker.started", "peer.up", "mqtt.connected", "speaker.stopped"} <= names
    assert all({"ts", "level", "event", "logger"} <= e.keys() for e in events)
