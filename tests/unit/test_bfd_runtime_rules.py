"""The bfdd runtime's small rules: how often it reads bfdd, how bfdd is started, and the
work directory bfdd (as frr) must be able to reach."""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bgpd.bfd.render import BfdPeerConfig
from bgpd.bfd.runtime import BfdRuntime, _unreachable, bfdd_argv, poll_interval
from bgpd.model import PeerName

P = BfdPeerConfig(
    peer=PeerName("a"),
    address=ipaddress.ip_address("192.0.2.1"),
    local_address=ipaddress.ip_address("192.0.2.10"),
    profile="p",
)


@pytest.mark.parametrize(
    ("peers", "seconds"),
    [
        pytest.param([], 0.25, id="none"),
        pytest.param([P], 0.225, id="default-900ms-quarter"),
        pytest.param([P, replace(P, receive_interval=100)], 0.075, id="shortest-wins"),
        pytest.param([replace(P, receive_interval=10, detect_multiplier=2)], 0.02, id="floor"),
        pytest.param([replace(P, receive_interval=60000)], 0.25, id="ceiling"),
    ],
)
def test_poll_interval(peers: list[BfdPeerConfig], seconds: float) -> None:
    assert poll_interval(peers) == pytest.approx(seconds)


def test_bfdd_argv_keeps_every_path_in_its_directory() -> None:
    d = Path("/run/kube-bgpd/bfdd")
    base = [
        "/usr/lib/frr/bfdd",
        "--config_file",
        "/run/kube-bgpd/bfdd/bfdd.conf",
        "--pid_file",
        "/run/kube-bgpd/bfdd/bfdd.pid",
        "--vty_socket",
        "/run/kube-bgpd/bfdd",
        "--vty_port",
        "0",
        "--log",
        "stdout",
    ]
    assert bfdd_argv("/usr/lib/frr/bfdd", d, bfdctl=False) == base
    assert bfdd_argv("/usr/lib/frr/bfdd", d, bfdctl=True) == [
        *base,
        "--bfdctl",
        "/run/kube-bgpd/bfdd/bfdd.sock",
    ]


@pytest.fixture
def top() -> Iterator[Path]:
    """A directory under /tmp (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="kbfd-rules-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_unreachable_names_the_first_parent_another_user_cannot_search(top: Path) -> None:
    closed = top / "closed"
    inner = closed / "work"
    inner.mkdir(parents=True)
    for path in (top, closed, inner):
        path.chmod(0o711)
    # A uid and gid that own nothing here: only the "others" bits count.
    other = (os.getuid() + 12345, os.getgid() + 12345)
    assert _unreachable(inner, *other) is None
    closed.chmod(0o700)
    assert _unreachable(inner, *other) == closed
    # Its owner may search it.
    assert _unreachable(inner, os.getuid(), os.getgid()) is None


async def test_a_rendering_during_the_stop_does_not_undo_the_goodbye(tmp_path: Path) -> None:
    """Issue 17: once admin_down() (the goodbye) ran, a configure() from a rendering during
    the stop must not set the sessions Up again: AdminDown holds until bfdd stops."""
    runtime = BfdRuntime(work_dir=tmp_path, on_states=lambda _: None, on_started=lambda _: None)
    q = replace(P, peer=PeerName("b"), address=ipaddress.ip_address("192.0.2.2"))
    await runtime.configure([P])
    await runtime.admin_down()
    assert runtime.peers == (replace(P, shutdown=True),)
    await runtime.configure([P, q])
    assert runtime.peers == (replace(P, shutdown=True),)
