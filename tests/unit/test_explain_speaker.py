"""A live speaker serves its last decision as explain's JSON; reading it back gives the
same Decision, so `explain --from-speaker` renders exactly what the offline path would."""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bgpd.config import load_config
from bgpd.explain import decision_from_json, decision_json, explain, explain_table
from bgpd.model import (
    Decision,
    NodeName,
    Notice,
    NoticeReason,
    PeerName,
    Route,
    RouteAttributes,
    ServiceKey,
    Skip,
    SkipReason,
)
from bgpd.objects import parse_cluster_dump

WEB, API = ServiceKey("default/web"), ServiceKey("default/api")
R1, R2 = PeerName("router-1"), PeerName("router-2")
KEPT_DETAIL = (
    "kube-bgpd.io/local-pref: 'high': value 'high' is not a number; accepted: an unsigned "
    "32-bit integer (0-4294967295); keeping the attributes of the last valid annotations"
)
ATTRS = RouteAttributes(communities=("65000:1",), large_communities=("1:2:3",), local_pref=50)


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(Decision(node=NodeName("n1")), id="empty"),
        pytest.param(
            Decision(
                node=NodeName("n1"),
                routes=(
                    # One prefix carrying two Services (shared IP) stays one Route.
                    Route(R1, ipaddress.ip_network("10.99.100.1/32"), ATTRS, (API, WEB)),
                    Route(
                        R2, ipaddress.ip_network("10.99.100.1/32"), RouteAttributes(), (API, WEB)
                    ),
                    Route(
                        R1, ipaddress.ip_network("fd00:99::/120"), RouteAttributes(med=7), (WEB,)
                    ),
                ),
                skipped=(
                    Skip(ServiceKey("a/b"), SkipReason.NO_LOCAL_ENDPOINTS),
                    Skip(
                        ServiceKey("a/c"),
                        SkipReason.NO_PEER_OF_FAMILY,
                        ipaddress.ip_address("fd00:99::5"),
                        "no IPv6 peer selected",
                    ),
                ),
            ),
            id="routes-shared-ip-v6-skips",
        ),
        pytest.param(
            Decision(
                node=NodeName("n1"),
                routes=(Route(R1, ipaddress.ip_network("10.99.100.1/32"), ATTRS, (WEB,)),),
                notices=(
                    Notice(WEB, NoticeReason.ANNOTATION_KEPT, KEPT_DETAIL),
                    Notice(WEB, NoticeReason.ATTRIBUTE_NOT_SENT, "local-pref 50 to isp"),
                ),
            ),
            id="notices",
        ),
    ],
)
def test_round_trip_through_json_text(decision: Decision) -> None:
    text = json.dumps(decision_json(decision))
    back = decision_from_json(json.loads(text))
    assert back == decision
    assert explain_table([back]) == explain_table([decision])


def test_table_shows_notices() -> None:
    decision = Decision(
        node=NodeName("n1"),
        routes=(Route(R1, ipaddress.ip_network("10.99.100.1/32"), ATTRS, (WEB,)),),
        notices=(Notice(WEB, NoticeReason.ANNOTATION_KEPT, KEPT_DETAIL),),
    )
    assert explain_table([decision]).splitlines()[-3:] == [
        "  notices (announced as shown above):",
        "  SERVICE      REASON                 DETAIL",
        f"  default/web  invalidAnnotationKept  {KEPT_DETAIL}",
    ]
    assert explain_table([decision], ServiceKey("default/api")).count("notices") == 0


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param({"routes": [], "skipped": []}, id="no-node"),
        pytest.param({"node": "n", "routes": [{"peer": "p"}], "skipped": []}, id="route-fields"),
        pytest.param(
            {"node": "n", "routes": [], "skipped": [{"service": "a/b", "reason": "nope"}]},
            id="unknown-reason",
        ),
        pytest.param({"node": "n", "routes": None, "skipped": []}, id="not-a-list"),
    ],
)
def test_malformed_documents_are_value_errors(doc: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message names what was wrong
        decision_from_json(doc)


# --------------------------------------------------------------------------- the CLI

DATA = Path(__file__).resolve().parent.parent / "data" / "explain"
KUBE_BGPD = Path(sys.executable).parent / "kube-bgpd"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBE_BGPD), "explain", *args], capture_output=True, text=True, timeout=60, check=False
    )


@contextlib.contextmanager
def fake_speaker(status: dict[str, Any] | None) -> Iterator[str]:
    """An HTTP listener answering GET /status like the speaker's (a real socket on
    127.0.0.1; the document is what Speaker.status() serves). None answers 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(status).encode()
            self.send_response(200 if status is not None and self.path == "/status" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _live_decision(node: str) -> Decision:
    config = load_config([str(DATA / "config.yaml")]).config
    assert config is not None
    snapshot = parse_cluster_dump((DATA / "cluster.yaml").read_text())
    (decision,) = explain(config, snapshot, [NodeName(node)])
    return decision


@pytest.mark.parametrize("output", ["json", "table"])
def test_from_speaker_answers_like_the_offline_command_plus_the_routers(output: str) -> None:
    """The same decision, rendered the same way, then what became of each route at the
    routers (advertised / accepted / pending) and each session's three counts."""
    decision = _live_decision("n2")
    first, second = decision.routes[0], decision.routes[-1]
    status: dict[str, Any] = {
        "node": "n2",
        "explain": decision_json(decision),
        "routes": [
            {"peer": first.peer, "prefix": str(first.prefix), "advertised": True},
            {"peer": second.peer, "prefix": str(second.prefix), "advertised": False},
        ],
        "peers": [
            {"name": first.peer, "state": "up", "desired": 3, "accepted": 2, "advertised": 1},
        ],
    }
    offline = _cli(
        "--config",
        str(DATA / "config.yaml"),
        "--cluster",
        str(DATA / "cluster.yaml"),
        "--node",
        "n2",
        "--output",
        output,
    )
    assert offline.returncode == 0, offline.stderr
    with fake_speaker(status) as address:
        live = _cli(
            "--from-speaker", "--metrics-address", address, "--node", "n2", "--output", output
        )
        assert live.returncode == 0, live.stderr
        peer_counts = {
            "peer": first.peer, "state": "up", "desired": 3, "accepted": 2, "advertised": 1
        }  # fmt: skip
        if output == "json":
            answer = json.loads(live.stdout)
            assert answer.pop("peers") == [peer_counts]
            states = [r.pop("state") for r in answer["routes"]]
            assert answer == json.loads(offline.stdout)
            assert states[0] == "advertised"
            assert states[-1] == "accepted"
            assert set(states[1:-1]) <= {"pending", "advertised", "accepted"}
        else:
            assert live.stdout.startswith(offline.stdout)
            extra = live.stdout[len(offline.stdout) :].splitlines()
            assert extra[0] == "  at the routers:"
            assert extra[1].split() == ["SERVICE", "PREFIX", "PEER", "STATE"]
            assert extra[2].split()[1:] == [str(first.prefix), first.peer, "advertised"]
            assert extra[-2].split() == ["PEER", "STATE", "DESIRED", "ACCEPTED", "ADVERTISED"]
            assert extra[-1].split() == [first.peer, "up", "3", "2", "1"]
        # Without --node the JSON is a list, as offline: parsing does not depend on flags.
        listed = _cli("--from-speaker", "--metrics-address", address, "--output", "json")
        (node,) = json.loads(listed.stdout)
        assert node["peers"] == [peer_counts]


@pytest.mark.parametrize(
    ("status", "args", "code", "message"),
    [
        pytest.param({"node": "n1", "explain": None}, [], 1, "no decision yet", id="no-decision"),
        pytest.param(
            {"node": "n1", "explain": {"node": "n1"}}, [], 1, "not a decision", id="malformed"
        ),
        pytest.param(
            {"node": "n1", "explain": {"node": "n1", "routes": [], "skipped": []}},
            ["--node", "n2"],
            2,
            "runs on node n1",
            id="other-node",
        ),
        pytest.param(None, [], 1, "cannot read the speaker's status", id="http-404"),
    ],
)
def test_from_speaker_errors(
    status: dict[str, Any] | None, args: list[str], code: int, message: str
) -> None:
    with fake_speaker(status) as address:
        out = _cli("--from-speaker", "--metrics-address", address, *args)
    assert out.returncode == code, out.stderr
    assert message in out.stderr
    assert out.stdout == ""


def test_from_speaker_and_cluster_are_exclusive() -> None:
    out = _cli("--from-speaker", "--cluster", str(DATA / "cluster.yaml"))
    assert out.returncode == 2
    assert "not allowed with argument" in out.stderr


def test_from_speaker_table_ends_with_the_bfd_sessions() -> None:
    """A speaker with BFD-enabled peers: the same table as offline, then its BFD sessions
    (a route reaches such a peer only over a path BFD confirmed)."""
    decision = _live_decision("n2")
    bfd = {
        "pid": 7,
        "restarts": 0,
        "peers": [
            {
                "name": "tor",
                "address": "192.0.2.1",
                "local_address": "192.0.2.12",
                "profile": "fast",
                "state": "down",
                "since": None,
                "flaps": 2,
                "detect_ms": None,
                "diagnostic": "control detection time expired",
            }
        ],
    }
    doc = {"node": "n2", "explain": decision_json(decision), "bfd": bfd}
    with fake_speaker(doc) as address:
        live = _cli("--from-speaker", "--metrics-address", address, "--output", "table")
    assert live.returncode == 0, live.stderr
    head, _, tail = live.stdout.rpartition("\nBFD PEER")
    # The offline table, then where each route stands at the routers, then BFD.
    assert head.startswith(explain_table([decision], None))
    assert "at the routers:" in head.removeprefix(explain_table([decision], None))
    assert tail.splitlines()[1].split() == [
        "tor",
        "192.0.2.1",
        "192.0.2.12",
        "down",
        "-",
        "2",
        "-",
        "control",
        "detection",
        "time",
        "expired",
    ]
