"""What ExaBGP's rendering reads from the host (bgpd.speaker.render_inputs): password
files read at (re)load and when they change, not every pass; kernel choices cached with
their refresh rule."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import replace
from pathlib import Path

from clusterkit import config, node, peer

from bgpd.model import IPAddress, PeerName
from bgpd.speaker.render_inputs import KERNEL_CHOICE_TTL, HostRenderInputs

TOR = PeerName("tor")


def test_password_file_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("first\n")
    cfg = config(peers=[replace(peer("tor", "172.31.250.1"), password_file=key)])
    inputs = HostRenderInputs(cfg)
    assert inputs.passwords({}) == {TOR: "first"}
    # Same inode, size and mtime: the cached key (the file is not read).
    st = key.stat()
    key.write_text("other\n")
    os.utime(key, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inputs.passwords({}) == {TOR: "first"}
    # Replaced (a Secret volume swaps files): read again.
    new = tmp_path / "new"
    new.write_text("second\n")
    new.replace(key)
    assert inputs.passwords({}) == {TOR: "second"}
    # A reload reads it again whatever the stamp says.
    os.utime(key, ns=(st.st_atime_ns, st.st_mtime_ns))
    inputs.set_config(cfg)
    assert inputs.passwords({}) == {TOR: "second"}
    key.unlink()
    assert inputs.passwords({}) == {TOR: None}


def test_password_then_file_then_secret() -> None:
    cfg = config(peers=[replace(peer("tor", "172.31.250.1"), password="inline")])
    assert HostRenderInputs(cfg).passwords({TOR: "secret"}) == {TOR: "inline"}
    cfg = config(peers=[peer("tor", "172.31.250.1")])
    assert HostRenderInputs(cfg).passwords({TOR: "secret"}) == {TOR: "secret"}


def test_kernel_choice_is_cached_until_ttl_node_change_or_reload() -> None:
    asked: list[IPAddress] = []
    now = [0.0]
    local = ipaddress.ip_address("172.31.250.11")

    def ask(p: IPAddress, vrf: str | None) -> IPAddress | None:
        assert vrf is None
        asked.append(p)
        return local

    cfg = config(peers=[peer("tor", "172.31.250.1")])
    inputs = HostRenderInputs(cfg, ask_kernel=ask, clock=lambda: now[0])
    n1 = node("n1")
    assert inputs.kernel_choices(n1) == {TOR: local}
    assert inputs.kernel_choices(n1) == {TOR: local}
    assert len(asked) == 1
    now[0] = KERNEL_CHOICE_TTL
    inputs.kernel_choices(n1)
    assert len(asked) == 2
    inputs.kernel_choices(replace(n1, addresses=(("InternalIP", "172.31.250.12"),)))
    assert len(asked) == 3
    inputs.set_config(cfg)
    inputs.kernel_choices(replace(n1, addresses=(("InternalIP", "172.31.250.12"),)))
    assert len(asked) == 4
