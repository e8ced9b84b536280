"""End to end: per peer, desired / accepted / advertised tell the truth about a real router.

One lab per router (FRR 8.4, BIRD 2): one node, one IPv4 session (BGPPeer tor-v4, hold
time 9 s, TCP MD5), the Service demo/web announced. The lab is walked through the two
failures a user met (issue 14), judged by the speaker's /status, its /metrics, the table
of ``kube-bgpd status`` and the router's RIB:

1. the router's daemons stopped: advertised falls to 0 for the peer within the hold time
   while desired and accepted stay 1 (ExaBGP keeps accepting and holds the route for the
   session's return); the alert rules, evaluated by the real promtool on the samples of
   that live scrape, fire (see ``assert_alerts_fire``);
2. the router back: advertised returns to desired as ExaBGP re-sends;
3. a wrong MD5 password on the speaker's side: the session never comes up, accepted
   stays 1, advertised stays 0 (watched across several of ExaBGP's connect attempts);
4. the right password back: advertised returns to desired.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from bgpd.cli import control
from kbgpd_lab.kit.measure import exposition_samples as samples
from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.lab import STATUS_ADDRESS, Lab, LabService

pytestmark = [pytest.mark.e2e, pytest.mark.root]

PEER = "tor-v4"
PASSWORD = "lab-truth-key"
WEB = LabService("web", ("10.99.100.1",), pod_nodes=(1,))
SERVICE = f"{WEB.namespace}/{WEB.name}"
V4 = ipaddress.ip_network("10.99.100.1/32")
HOLD_TIME = 9
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
T = TypeVar("T")
RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yaml"


def counts(lab: Lab) -> tuple[str, int, int, int]:
    """The peer's session state and (desired, accepted, advertised) from /status, asked
    on the speaker's control socket from this process (a unix socket is reached from any
    network namespace; polling through `kube-bgpd status` would start a process a poll)."""
    where = control.Target(socket=lab.dir / "node1" / "work" / control.CONTROL_SOCKET, address=None)
    doc = control.call(where, "GET", "/status", 10)
    (peer,) = [p for p in doc["peers"] if p["name"] == PEER]
    return peer["state"], peer["desired"], peer["accepted"], peer["advertised"]


def status_table_counts(lab: Lab) -> tuple[int, int, int]:
    """DESIRED, ACCEPTED, ADVERTISED of the peer's row in ``kube-bgpd status``."""
    out = lab.speaker_cli(1, "status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line.split() for line in lines if line.startswith("PEER  "))
    row = next(line.split() for line in lines if line.startswith(PEER + " "))
    cells = dict(zip(header, row, strict=False))
    return int(cells["DESIRED"]), int(cells["ACCEPTED"]), int(cells["ADVERTISED"])


def scrape(lab: Lab) -> str:
    out = lab.topology.nodes[0].run(
        ["curl", "-s", "-f", f"http://{STATUS_ADDRESS}/metrics"], check=False, timeout=10
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def peer_metrics(text: str) -> tuple[float, float, float]:
    s = samples(text)
    return tuple(  # type: ignore[return-value]
        s[f'kube_bgpd_bgp_prefixes_{what}{{peer="{PEER}"}}']
        for what in ("desired", "accepted", "advertised")
    )


def assert_the_three_agree(lab: Lab, want: tuple[int, int, int]) -> None:
    """/status, /metrics and the `kube-bgpd status` table give the same three numbers."""
    assert counts(lab)[1:] == want
    assert peer_metrics(scrape(lab)) == tuple(float(x) for x in want)
    assert status_table_counts(lab) == want


def assert_alerts_fire(text: str, tmp: Path) -> None:
    """The alert rules fire on this live scrape, evaluated by the real promtool.

    Why a rule unit test built from the scrape rather than a live Prometheus: every
    route alert has ``for: 5m``, so a Prometheus scraping the speaker would need five
    minutes of a stopped router to say "firing". promtool's rule tests evaluate the
    shipped expressions and ``for`` clauses on series we give it: here every sample of
    the real speaker's /metrics, as scraped, with the target labels Prometheus adds
    (instance, job), held for ten minutes. The rules file is the shipped one with its
    annotations left out (promtool compares annotations, which only repeat the labels
    in prose); expressions, ``for`` and labels are untouched. At 4m nothing may fire,
    at 6m the Service alert pages and the peer's alerts warn."""
    target = 'instance="node1:7473",job="kube-bgpd-speaker"'
    series = []
    for key, value in samples(text).items():
        name, brace, rest = key.partition("{")
        labels = f"{rest[:-1]},{target}" if brace and rest != "}" else target
        series.append({"series": f"{name}{{{labels}}}", "values": f"{value:g}x10"})
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rules))
    node = {"instance": "node1:7473", "job": "kube-bgpd-speaker", "node": "node1"}
    peer = {**node, "peer": PEER, "severity": "warning"}
    expected = {
        "KubeBgpdServiceNotAnnounced": [{"service": SERVICE, "severity": "critical"}],
        "KubeBgpdPeerNotAdvertised": [peer],
        "KubeBgpdSessionDown": [peer],
    }
    checks: list[dict[str, Any]] = []
    for alert, labels in expected.items():
        checks.append({"eval_time": "4m", "alertname": alert, "exp_alerts": []})
        checks.append(
            {
                "eval_time": "6m",
                "alertname": alert,
                "exp_alerts": [{"exp_labels": x} for x in labels],
            }
        )
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    (tmp / "scrape_test.yaml").write_text(yaml.safe_dump(test))
    # SessionDown's `for` is 5m too, but it counts the down session from its first
    # sample: at 4m nothing fires, at 6m all three do.
    out = subprocess.run(
        [PROMTOOL, "test", "rules", "scrape_test.yaml"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def holds_for(read: Callable[[], T], ok: Callable[[T], bool], seconds: float) -> int:
    """Read every 0.2 s for ``seconds`` and assert ``ok`` each time; returns how many
    reads were made (an observation window: what is asserted is that something never
    happens)."""
    end = time.monotonic() + seconds
    reads = 0
    while time.monotonic() < end:
        value = read()
        assert ok(value), value
        reads += 1
        time.sleep(0.2)
    return reads


def set_password(lab: Lab, password: str) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc.get("kind") == "BGPPeer" and doc["metadata"]["name"] == PEER:
                doc["spec"]["password"] = password

    lab.edit_config(edit)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("router", ["frr", "bird"])
def test_advertised_follows_the_router_and_the_password(
    make_lab: Any, router: str, tmp_path: Path
) -> None:
    lab: Lab = make_lab(
        router,
        nodes=1,
        ipv6=False,
        cluster="file",
        services=[WEB],
        hold_time=HOLD_TIME,
        md5_password=PASSWORD,
    )
    lab.router.wait_route(V4, next_hops=None, timeout=30)
    wait_until(lambda: counts(lab) == ("up", 1, 1, 1), within=30, what="advertised 1")
    assert_the_three_agree(lab, (1, 1, 1))

    # 1. The router dies: advertised 0 within the hold time; desired and accepted stay.
    lab.router.stop()
    wait_until(
        lambda: counts(lab)[3] == 0,
        within=HOLD_TIME + 1,
        poll=0.1,
        what="advertised 0 within the hold time",
    )
    assert counts(lab)[1:3] == (1, 1)
    text = scrape(lab)
    assert samples(text)[f'kube_bgpd_bgp_session_up{{peer="{PEER}"}}'] == 0.0
    assert (
        samples(text)[
            f'kube_bgpd_service_announced{{peer="{PEER}",prefix="{V4}",service="{SERVICE}"}}'
        ]
        == 0.0
    )
    assert_the_three_agree(lab, (1, 1, 0))
    assert_alerts_fire(text, tmp_path)

    # 2. The router back: ExaBGP re-sends, advertised returns to desired.
    lab.router.start()
    lab.router.wait_route(V4, next_hops=None, timeout=60)
    wait_until(lambda: counts(lab) == ("up", 1, 1, 1), within=60, what="advertised back")
    assert_the_three_agree(lab, (1, 1, 1))

    # 3. A wrong password: the session drops and never comes back; accepted stays.
    set_password(lab, "not-" + PASSWORD)
    wait_until(lambda: counts(lab)[3] == 0, within=30, what="advertised 0")
    lab.router.wait_rib(lambda rib: V4 not in rib, 30)
    # "Never" needs a span: ExaBGP retries the connection after 0, 1, 2, 3 s (lab notes)
    # and the router connects too (the speakers listen); over 6 s, polled throughout,
    # the session is never up, nothing is advertised and accepted stays.
    seen = holds_for(lambda: counts(lab), lambda c: c[0] != "up" and c[1:] == (1, 1, 0), 6.0)
    assert seen >= 3, "polled too few times to say never"
    assert V4 not in lab.router.rib(4)
    assert_the_three_agree(lab, (1, 1, 0))

    # 4. The right password back: advertised returns to desired.
    set_password(lab, PASSWORD)
    lab.router.wait_route(V4, next_hops=None, timeout=60)
    wait_until(lambda: counts(lab) == ("up", 1, 1, 1), within=60, what="advertised back")
    assert_the_three_agree(lab, (1, 1, 1))
