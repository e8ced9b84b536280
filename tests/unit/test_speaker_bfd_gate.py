"""The speaker's BFD wiring (bgpd.speaker.app with bgpd.speaker.bfd_follow), without
processes: a rendering for a node with a BFD-enabled peer, then BFD readings as the bfdd
runtime hands them over. What /status, the explain answer and the driver get."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from bgpd.bfd.state import BfdPeerState, BfdState
from bgpd.cli.status import render
from bgpd.clusterfile import ClusterFileSource
from bgpd.model import (
    BFDProfile,
    BGPPeer,
    ClusterSnapshot,
    Config,
    Node,
    NodeName,
    PeerName,
    SpeakerConfig,
)
from bgpd.speaker.app import Speaker

FAST, PLAIN = PeerName("fast"), PeerName("plain")
NODE = NodeName("n1")


def reading(state: BfdState) -> dict[PeerName, BfdPeerState]:
    return {
        FAST: BfdPeerState(
            peer=FAST,
            address=ipaddress.ip_address("192.0.2.1"),
            local_address=ipaddress.ip_address("192.0.2.10"),
            state=state,
        )
    }


def speaker(tmp_path: Path, *, profiles: bool = True) -> Speaker:
    def peer(name: PeerName, address: str, profile: str | None) -> BGPPeer:
        return BGPPeer(
            name=name,
            my_asn=64512,
            peer_asn=64500,
            peer_address=ipaddress.ip_address(address),
            source_address=ipaddress.ip_address("192.0.2.10"),
            bfd_profile=profile,
        )

    config = Config(
        peers=(peer(FAST, "192.0.2.1", "fast"), peer(PLAIN, "192.0.2.2", None)),
        bfd_profiles=(BFDProfile(name="fast"),) if profiles else (),
        speaker=SpeakerConfig(work_dir=tmp_path),
    )
    s = Speaker(
        config=config,
        config_paths=[],
        node=NODE,
        source=ClusterFileSource(tmp_path / "cluster.yaml"),
        work_dir=tmp_path,
        status_address="127.0.0.1:0",
    )
    node = Node(name=NODE, addresses=(("InternalIP", "192.0.2.10"),))
    s._install(s.render_now(ClusterSnapshot(nodes={NODE: node}), {}))
    return s


async def test_strict_holds_until_up_and_tears_down_on_down(tmp_path: Path) -> None:
    s = speaker(tmp_path)
    held = [{"peer": "fast", "reason": "bfdNotUp", "routes": 0}]
    assert s.status()["bfd_gate"] == {"strict": True, "held": held, "teardowns": {}}
    assert s.driver.core.held_routes() == {FAST: 0}
    s.on_bfd_states(reading(BfdState.UP))
    assert s.status()["bfd_gate"]["held"] == []
    s.on_bfd_states(reading(BfdState.DOWN))
    assert s.status()["bfd_gate"]["teardowns"] == {FAST: 1}
    # The next command ExaBGP gets, once its helper is there: the teardown, alone.
    s.driver.core.connect()
    (cmd,) = s.driver.core.next_commands(0.0)
    assert cmd.text == "neighbor 192.0.2.1 local-ip 192.0.2.10 teardown 10"


async def test_without_a_bfd_session_nothing_is_held(tmp_path: Path) -> None:
    """A bfdProfile that names no BFDProfile gives no BFD session: nothing waits for one."""
    s = speaker(tmp_path, profiles=False)
    assert s.status()["bfd_gate"]["held"] == []


async def test_a_stopping_speaker_tears_nothing_down(tmp_path: Path) -> None:
    s = speaker(tmp_path)
    s.on_bfd_states(reading(BfdState.UP))
    s.request_stop()
    s.on_bfd_states(reading(BfdState.DOWN))
    assert s.status()["bfd_gate"]["teardowns"] == {}


def test_status_table_lists_held_peers() -> None:
    doc = {
        "node": "n1",
        "peers": [],
        "routes": [],
        "bfd_gate": {"strict": True, "held": [{"peer": "fast", "reason": "bfdNotUp", "routes": 3}]},
    }
    text = render(doc, 0.0)
    assert "held back:\nPEER  REASON    ROUTES\nfast  bfdNotUp  3" in text
    assert "held back" not in render({**doc, "bfd_gate": {"held": []}}, 0.0)
