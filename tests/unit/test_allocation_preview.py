"""The allocation preview (`kube-bgpd explain --allocation`): one outcome per Service, the
controller's allocate() behind it, and the command on the dump in tests/data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clusterkit import cluster, config, pool, svc

from bgpd.allocation import ANNOTATION_ADDRESS_POOL, ANNOTATION_ALLOW_SHARED_IP
from bgpd.allocation_preview import Outcome, preview, preview_json, preview_table
from bgpd.model import Service, SpeakerConfig

P = pool("p", "198.51.100.0/30")
DUAL = pool("dual", "198.51.100.0/30", "2001:db8:100::/126")
DATA = Path(__file__).resolve().parent.parent / "data" / "explain"
KUBE_BGPD = Path(sys.executable).parent / "kube-bgpd"


def outcomes(services: list[Service], *, lb_class: str | None = None) -> list[tuple[str, ...]]:
    cfg = config(pools=[P, DUAL], speaker=SpeakerConfig(load_balancer_class=lb_class))
    return [
        (e.service, e.outcome.value, ",".join(map(str, e.ips)), e.pool or "-", e.reason or "-")
        for e in preview(cfg, cluster(services, [], []))
    ]


@pytest.mark.parametrize(
    ("services", "lb_class", "expected"),
    [
        pytest.param(
            [svc("ns/a", "198.51.100.2")],
            None,
            [("ns/a", "kept", "198.51.100.2", "p", "-")],
            id="valid-status-kept",
        ),
        pytest.param(
            [svc("ns/a")],
            None,
            [("ns/a", "assigned", "198.51.100.0", "p", "-")],
            id="no-status-assigned",
        ),
        pytest.param(
            [svc("ns/a", "203.0.113.9")],
            None,
            [("ns/a", "changed", "198.51.100.0", "p", "-")],
            id="ip-outside-every-pool-changed",
        ),
        pytest.param(
            [svc("ns/a", "198.51.100.1"), svc("ns/b", load_balancer_ip="198.51.100.1")],
            None,
            [
                ("ns/a", "kept", "198.51.100.1", "p", "-"),
                ("ns/b", "failed", "", "-", "requestedIPInUse"),
            ],
            id="requested-ip-held-by-another-failed",
        ),
        pytest.param(
            [
                svc("ns/a", "198.51.100.1", annotations={ANNOTATION_ALLOW_SHARED_IP: "k"}),
                svc("ns/b", "198.51.100.1", annotations={ANNOTATION_ALLOW_SHARED_IP: "j"}),
            ],
            None,
            [
                ("ns/a", "kept", "198.51.100.1", "p", "-"),
                ("ns/b", "changed", "198.51.100.0", "p", "-"),
            ],
            id="sharing-conflict-in-the-dump-moves-one",
        ),
        pytest.param(
            [svc("ns/a", "198.51.100.1"), svc("ns/b", "198.51.100.2", lb_class="x.io/lb")],
            "x.io/lb",
            [
                ("ns/a", "notOurLoadBalancerClass", "198.51.100.1", "-", "-"),
                ("ns/b", "kept", "198.51.100.2", "p", "-"),
            ],
            id="class-less-not-ours-when-a-class-is-served",
        ),
        pytest.param(
            [svc("ns/a", type="ClusterIP")],
            None,
            [],
            id="not-a-load-balancer-absent",
        ),
    ],
)
def test_outcome(
    services: list[Service], lb_class: str | None, expected: list[tuple[str, ...]]
) -> None:
    assert outcomes(services, lb_class=lb_class) == expected


@pytest.mark.parametrize(
    ("service", "detail"),
    [
        pytest.param(
            svc("ns/a", "203.0.113.9"),
            "203.0.113.9: not in one IPAddressPool (or a .0/.255 address its pool avoids)",
            id="outside-every-pool",
        ),
        pytest.param(
            svc("ns/a", "2001:db8:100::1"),
            "2001:db8:100::1: the status holds IPv6 addresses but the Service is IPv4",
            id="wrong-family",
        ),
        pytest.param(
            svc("ns/a", "198.51.100.1", load_balancer_ip="198.51.100.2"),
            "198.51.100.1: the Service requests 198.51.100.2",
            id="request-changed",
        ),
        pytest.param(
            svc("ns/a", "198.51.100.1", annotations={ANNOTATION_ADDRESS_POOL: "dual"}),
            "198.51.100.1: from pool p, but the Service asks for pool dual",
            id="pool-changed",
        ),
        pytest.param(
            svc("ns/a", "203.0.113.9", annotations={ANNOTATION_ADDRESS_POOL: "nope"}),
            "203.0.113.9: not in one IPAddressPool (or a .0/.255 address its pool avoids); "
            "no IPAddressPool named 'nope'",
            id="failed-says-both",
        ),
    ],
)
def test_detail_says_why_the_status_is_not_kept(service: Service, detail: str) -> None:
    cfg = config(pools=[P, pool("dual", "198.51.100.4/30", "2001:db8:100::/126")])
    (entry,) = preview(cfg, cluster([service], [], []))
    assert entry.detail == detail


def test_json_and_table_say_the_same() -> None:
    cfg = config(pools=[P])
    entries = preview(
        cfg,
        cluster([svc("ns/a", "198.51.100.1"), svc("ns/b", load_balancer_ip="203.0.113.1")], [], []),
    )
    assert preview_json(entries, None) == [
        {
            "service": "ns/a",
            "outcome": "kept",
            "current": ["198.51.100.1"],
            "ips": ["198.51.100.1"],
            "pool": "p",
        },
        {
            "service": "ns/b",
            "outcome": "failed",
            "current": [],
            "ips": [],
            "pool": None,
            "reason": "requestedIPNotInPool",
            "detail": "requested 203.0.113.1 is not in one IPAddressPool",
        },
    ]
    table = preview_table(entries, None).splitlines()
    assert table[0] == "2 LoadBalancer Services: 1 kept, 1 failed"
    assert table[1].split() == [
        "SERVICE",
        "OUTCOME",
        "CURRENT",
        "WOULD-BE",
        "POOL",
        "REASON",
        "DETAIL",
    ]
    assert table[2].split() == ["ns/a", "kept", "198.51.100.1", "198.51.100.1", "p", "-"]
    assert table[3].split()[:6] == ["ns/b", "failed", "-", "-", "-", "requestedIPNotInPool"]
    assert table[3].endswith("requested 203.0.113.1 is not in one IPAddressPool")
    assert preview_table(entries, "ns/a").splitlines()[0] == "1 LoadBalancer Service: 1 kept"
    (only,) = json.loads(json.dumps(preview_json(entries, "ns/b")))
    assert Outcome(only["outcome"]) is Outcome.FAILED


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBE_BGPD), "explain", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_command_on_the_dump() -> None:
    done = run(
        "--allocation",
        "--config",
        DATA / "config.yaml",
        "--cluster",
        DATA / "cluster.yaml",
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    got = {e["service"]: (e["outcome"], e.get("reason")) for e in json.loads(done.stdout)}
    assert got == {
        "other/ingress": ("notOurLoadBalancerClass", None),
        "shop/api": ("kept", None),
        "shop/batch": ("kept", None),
        "shop/pending": ("assigned", None),
        # Its IPv4 and IPv6 addresses lie in two pools; MetalLB (poolFor) and the
        # controller need one pool holding both.
        "shop/web": ("failed", "noPoolMatches"),
    }


def test_command_refuses_from_speaker() -> None:
    done = run("--allocation", "--from-speaker")
    assert done.returncode == 2
    assert "--allocation previews from a dump" in done.stderr
