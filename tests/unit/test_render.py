"""Rendering of ExaBGP's configuration: golden files, neighbors and their resolution
(which peers get a session: tests/unit/test_peers.py).

Golden files live in tests/data/golden/; regenerate with KUBE_BGPD_UPDATE_GOLDEN=1 and
review the diff. The real ``exabgp validate`` checks every golden rendering."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bgpd.exabgp.errors import RenderError
from bgpd.exabgp.render import (
    GENERATION_ENV,
    SOCKET_ENV,
    render,
    render_config,
    render_env,
)
from bgpd.model import (
    BGPPeer,
    Config,
    LabelSelector,
    Node,
    NodeName,
    PeerName,
    frozen_map,
)

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
UPDATE = os.environ.get("KUBE_BGPD_UPDATE_GOLDEN") == "1"
HELPER = ("/usr/bin/python3", "-m", "bgpd.exabgp.helper")
EXABGP = Path(sys.executable).parent / "exabgp"

ip = ipaddress.ip_address

NODE = Node(
    name=NodeName("node1"),
    labels=frozen_map({"rack": "r1", "kubernetes.io/hostname": "node1"}),
    addresses=(
        ("Hostname", "node1"),
        ("InternalIP", "172.31.250.11"),
        ("InternalIP", "fd00:99:250::11"),
    ),
)


def peer(name: str, address: str, **kw: object) -> BGPPeer:
    fields: dict[str, object] = {"my_asn": 64513, "peer_asn": 64512}
    fields.update(kw)
    return BGPPeer(name=PeerName(name), peer_address=ip(address), **fields)  # type: ignore[arg-type]


CASES = [
    pytest.param(Config(peers=(peer("tor", "172.31.250.1"),)), {}, {}, id="ebgp-minimal"),
    pytest.param(
        Config(
            peers=(
                peer(
                    "tor-full",
                    "172.31.250.1",
                    peer_port=1790,
                    hold_time=9,
                    ebgp_multihop=True,
                    enable_graceful_restart=True,
                    router_id=ipaddress.IPv4Address("10.0.0.1"),
                    source_address=ip("172.31.250.11"),
                ),
            )
        ),
        {},
        {"tor-full": 'pa ss;"word{}'},
        id="ebgp-all-options",
    ),
    pytest.param(
        Config(peers=(peer("ibgp6", "fd00:99:250::1", my_asn=64512, hold_time=0),)),
        {},
        {},
        id="ibgp-ipv6-hold-0",
    ),
    pytest.param(
        Config(
            peers=(
                peer("a-v4", "172.31.250.1"),
                peer("b-v6", "fd00:99:250::1"),
                peer(
                    "c-other-rack",
                    "172.31.250.2",
                    node_selectors=(LabelSelector(match_labels=(("rack", "r2"),)),),
                ),
            )
        ),
        {PeerName("a-v4"): ip("172.31.250.99")},
        {},
        id="dual-stack-kernel-choice-and-selector",
    ),
    # BGPPeer vrf: the socket bound to the VRF device; dynamicASN external: peer-as auto
    # (eBGP, so single-hop TTL); internal: peer-as myASN (iBGP).
    pytest.param(
        Config(
            peers=(
                peer(
                    "external-in-red", "172.31.250.1", peer_asn=0, dynamic_asn="external", vrf="red"
                ),
                peer("internal", "172.31.251.1", peer_asn=64513, dynamic_asn="internal"),
            )
        ),
        {},
        {},
        id="vrf-and-dynamic-asn",
    ),
]


@pytest.mark.parametrize(("config", "kernel", "passwords"), CASES)
def test_golden(
    request: pytest.FixtureRequest, config: Config, kernel: dict, passwords: dict, tmp_path: Path
) -> None:
    r = render(config, NODE, kernel_choices=kernel, passwords=passwords, helper_argv=HELPER)
    name = request.node.callspec.id
    golden = GOLDEN / f"exabgp-{name}.conf"
    if UPDATE:
        golden.write_text(r.config)
    assert r.config == golden.read_text()
    for password in passwords.values():
        assert password not in r.config
        assert password not in repr(r)
    conf = tmp_path / "exabgp.conf"
    conf.write_text(r.config)
    env = dict(os.environ, exabgp_daemon_user="root", exabgp_daemon_drop="false")
    done = subprocess.run(
        [str(EXABGP), "validate", str(conf)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_peer_without_local_address_is_skipped_with_warning() -> None:
    r = render(
        Config(peers=(peer("x", "fd00:99:250::1"),)),
        None,
        kernel_choices={},
        passwords={},
        helper_argv=HELPER,
    )
    assert r.neighbors == ()
    assert "no local address" in r.warnings[0]


def test_router_id_falls_back_for_ipv6_only_node() -> None:
    node = Node(name=NodeName("n6"), addresses=(("InternalIP", "fd00:99:250::11"),))
    r = render(
        Config(peers=(peer("v6", "fd00:99:250::1"),)),
        node,
        kernel_choices={},
        passwords={},
        helper_argv=HELPER,
    )
    assert str(r.neighbors[0].router_id) == "0.0.0.17"


def test_keepalive_warning() -> None:
    r = render(
        Config(peers=(peer("k", "172.31.250.1", hold_time=90, keepalive_time=10),)),
        NODE,
        kernel_choices={},
        passwords={},
        helper_argv=HELPER,
    )
    assert any("keepaliveTime 10s" in w for w in r.warnings)


def test_bad_text_rejected() -> None:
    with pytest.raises(RenderError):
        render_config((), helper_argv=("/bin/x;y",))
    with pytest.raises(ValueError, match="control character"):
        render_config((), helper_argv=("/bin/x\nprocess",))


@pytest.mark.parametrize(
    ("as_root", "listen", "expect", "absent"),
    [
        pytest.param(
            True,
            (),
            {"exabgp_daemon_user": "root", "exabgp_daemon_drop": "false"},
            ["exabgp_tcp_bind"],
            id="root",
        ),
        pytest.param(
            False, (), {"exabgp_api_ack": "true"}, ["exabgp_daemon_user"], id="unprivileged"
        ),
        pytest.param(
            False, (ip("172.31.250.11"),), {"exabgp_tcp_bind": "172.31.250.11"}, [], id="listen"
        ),
    ],
)
def test_env(as_root: bool, listen: tuple, expect: dict[str, str], absent: list[str]) -> None:
    env = render_env(socket_path="/run/x.sock", generation=3, as_root=as_root, listen=listen)
    assert env[SOCKET_ENV] == "/run/x.sock"
    assert env[GENERATION_ENV] == "3"
    for k, v in expect.items():
        assert env[k] == v
    for k in absent:
        assert k not in env


def test_listener_leaves_vrf_sessions_out(tmp_path: Path) -> None:
    """ExaBGP listens in the default VRF: a VRF session's local address cannot be bound
    there, so it is not in exabgp_tcp_bind (that session only connects out)."""
    from bgpd.exabgp.runtime import ExaBGPRuntime

    config = Config(
        peers=(
            peer("in-red", "172.31.251.1", vrf="red", source_address=ip("172.31.251.11")),
            peer("default", "172.31.250.1"),
        )
    )
    rt = ExaBGPRuntime(node=NodeName("node1"), work_dir=tmp_path / "w", listen=True)
    rt.rendering = render(config, NODE, kernel_choices={}, passwords={}, helper_argv=HELPER)
    assert [n.name for n in rt.rendering.neighbors] == ["default", "in-red"]
    assert rt._env(1)["exabgp_tcp_bind"] == "172.31.250.11"
