"""`kube-bgpd explain` run as the installed console script on the dump in tests/data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

DATA = Path(__file__).resolve().parent.parent / "data" / "explain"
CONFIG = DATA / "config.yaml"
CLUSTER = DATA / "cluster.yaml"
KUBE_BGPD = Path(sys.executable).parent / "kube-bgpd"


def explain(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBE_BGPD), "explain", *map(str, args)],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def route(
    service: str, prefix: str, peer: str, communities: list[str], med: int | None = None
) -> dict[str, Any]:
    return {
        "service": service,
        "prefix": prefix,
        "peer": peer,
        "communities": communities,
        "largeCommunities": [],
        "localPref": 150,
        "med": med,
        "linkBandwidth": None,
    }


WEB_V4 = route("shop/web", "10.99.100.10/32", "tor-a", ["65000:100"])
WEB_V6 = route("shop/web", "fd00:99:100::10/128", "tor-a-v6", ["65000:100"])
API = route("shop/api", "10.99.100.20/32", "tor-a", ["65000:100", "65535:65281"], med=10)
OTHER_CLASS = {
    "service": "other/ingress",
    "reason": "notOurLoadBalancerClass",
    "detail": "loadBalancerClass example.com/other-lb; "
    "this speaker serves Services without a class",
}
PENDING = {"service": "shop/pending", "reason": "noIPAllocated"}
BATCH = {
    "service": "shop/batch",
    "reason": "noEndpoints",
    "detail": "1 endpoint, none ready or serving",
}
API_NOT_ON_N1 = {
    "service": "shop/api",
    "reason": "noLocalEndpoints",
    "detail": "no endpoint on n1; serving on n2",
}

EVERY_NODE = [
    {
        "node": "n1",
        "routes": [WEB_V4, WEB_V6],
        "skipped": [
            OTHER_CLASS,
            API_NOT_ON_N1,
            BATCH,
            PENDING,
        ],
    },
    {"node": "n2", "routes": [WEB_V4, API, WEB_V6], "skipped": [OTHER_CLASS, BATCH, PENDING]},
    {
        "node": "n3",
        "routes": [],
        "skipped": [
            OTHER_CLASS,
            {"service": "shop/api", "reason": "nodeLabeledExcludeBalancers"},
            {"service": "shop/batch", "reason": "nodeLabeledExcludeBalancers"},
            PENDING,
            {"service": "shop/web", "reason": "nodeLabeledExcludeBalancers"},
        ],
    },
]


def test_json_for_every_node() -> None:
    done = explain("--config", CONFIG, "--cluster", CLUSTER, "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EVERY_NODE
    assert done.stderr == ""


def test_json_one_node_is_an_object() -> None:
    done = explain("--config", CONFIG, "--cluster", CLUSTER, "--node", "n2", "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EVERY_NODE[1]


def test_json_filtered_by_service() -> None:
    done = explain("--config", CONFIG, "--cluster", CLUSTER, "--output", "json", "shop/api")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {
            "node": "n1",
            "routes": [],
            "skipped": [API_NOT_ON_N1],
        },
        {"node": "n2", "routes": [API], "skipped": []},
        {
            "node": "n3",
            "routes": [],
            "skipped": [{"service": "shop/api", "reason": "nodeLabeledExcludeBalancers"}],
        },
    ]


def test_json_dump_from_stdin() -> None:
    """`kubectl get ... -o json | kube-bgpd explain --cluster -`: the JSON path."""
    as_json = json.dumps(yaml.safe_load(CLUSTER.read_text()))
    done = explain("--config", CONFIG, "--cluster", "-", "--output", "json", stdin=as_json)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EVERY_NODE


def test_table_is_the_default() -> None:
    done = explain("--config", CONFIG, "--cluster", CLUSTER, "--node", "n2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "node n2: 3 routes, 3 entries not announced"
    assert lines[3].split() == [
        "shop/api",
        "10.99.100.20/32",
        "tor-a",
        "65000:100,65535:65281",
        "150",
        "10",
    ]


def test_unknown_node_and_service_warn() -> None:
    done = explain(
        "--config", CONFIG, "--cluster", CLUSTER, "--node", "n9", "--output", "json", "shop/nope"
    )
    assert done.returncode == 0
    answer = json.loads(done.stdout)
    assert answer["routes"] == answer["skipped"] == []
    # An unknown node has no InternalIP, so no session (the speaker would open none).
    assert [(p["peer"], p["reason"]) for p in answer["peersSkipped"]] == [
        ("tor-a", "noLocalAddress"),
        ("tor-a-v6", "noLocalAddress"),
    ]
    assert "warning: node n9 is not in" in done.stderr
    assert "warning: Service shop/nope is not in" in done.stderr


def test_config_errors_print_like_validate(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: tor}\n"
        "spec: {myASN: 4294967296, peerASN: 64512, peerAddress: 172.31.250.1}\n"
    )
    done = explain("--config", bad, "--cluster", CLUSTER)
    assert done.returncode == 1
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors
    assert "spec.myASN" in errors[0]
    assert done.stderr.splitlines()[-1] == f"invalid: {len(errors)} error" + (
        "s" if len(errors) > 1 else ""
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read", id="missing-file"),
        pytest.param("kind: List\nitems: [\n", "not valid YAML", id="bad-yaml"),
        pytest.param(
            json.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {}}]}),
            "dump item 0 (Node): Node.metadata.name: required",
            id="bad-item",
        ),
    ],
)
def test_bad_dump_is_a_clear_error(tmp_path: Path, content: str | None, message: str) -> None:
    dump = tmp_path / "dump.yaml"
    if content is not None:
        dump.write_text(content)
    done = explain("--config", CONFIG, "--cluster", dump)
    assert done.returncode == 1
    assert done.stdout == ""
    assert message in done.stderr
    assert str(dump) in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--cluster", str(CLUSTER), "shop/api"], id="no-config"),
        pytest.param(
            ["--config", str(CONFIG), "--cluster", str(CLUSTER), "just-a-name"], id="bad-service"
        ),
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = explain(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr
