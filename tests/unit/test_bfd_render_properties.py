"""commands(before, after) really turns ``before`` into ``after``, and touches nothing
else: checked on random session sets against a small model of bfdd's ``bfd`` node (what
each command does to the sessions it holds)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from bgpd.bfd.render import BfdPeerConfig, commands
from bgpd.model import PeerName

#: A session's settings in the model: its key (the command naming it) -> setting -> value.
Model = dict[str, dict[str, str]]

PEERS = [ipaddress.ip_address(f"192.0.2.{i}") for i in range(1, 5)]
LOCALS = [ipaddress.ip_address(f"192.0.2.{i}") for i in (10, 11)]


def model_of(peers: list[BfdPeerConfig]) -> Model:
    return {p.command: _settings(p.lines()) for p in peers}


def _settings(lines: tuple[str, ...]) -> dict[str, str]:
    """Each line sets one setting: ``x N`` -> x=N, ``x`` -> x=on, ``no x`` -> x=off."""
    out: dict[str, str] = {}
    for line in lines:
        if line.startswith("no "):
            out[line[3:]] = "off"
        elif line.split()[-1].isdigit():
            name, value = line.rsplit(" ", 1)
            out[name] = value
        else:
            out[line] = "on"
    return out


def run(model: Model, steps: tuple[str, ...]) -> tuple[Model, set[str]]:
    """bfdd's bfd node as a model; returns it and the sessions a command touched."""
    out = {k: dict(v) for k, v in model.items()}
    touched: set[str] = set()
    if not steps:
        return out, touched
    assert steps[:2] == ("configure terminal", "bfd")
    assert steps[-1] == "end"
    current: str | None = None
    for step in steps[2:-1]:
        if step.startswith("no peer "):
            del out[step[3:]]
            touched.add(step[3:])
        elif step.startswith("peer "):
            current = step
            out.setdefault(step, {})
            touched.add(step)
        elif step == "exit":
            current = None
        else:
            assert current is not None, step
            out[current].update(_settings((step,)))
    return out, touched


session = st.builds(
    BfdPeerConfig,
    peer=st.sampled_from([PeerName(n) for n in "abcd"]),
    address=st.sampled_from(PEERS),
    local_address=st.sampled_from(LOCALS),
    profile=st.sampled_from(["p", "q"]),
    receive_interval=st.sampled_from([100, 300]),
    transmit_interval=st.sampled_from([100, 300]),
    detect_multiplier=st.sampled_from([3, 5]),
    passive_mode=st.booleans(),
    minimum_ttl=st.sampled_from([250, 254]),
    multihop=st.booleans(),
    shutdown=st.booleans(),
)


def one_per_key(peers: list[BfdPeerConfig]) -> list[BfdPeerConfig]:
    """As bfd_peers() gives them: one session per key, one per peer name."""
    keys: set[object] = set()
    names: set[str] = set()
    out = []
    for p in peers:
        if p.key not in keys and p.peer not in names:
            keys.add(p.key)
            names.add(p.peer)
            out.append(p)
    return out


sessions = st.lists(session, max_size=6).map(one_per_key)


@given(before=sessions, after=sessions)
def test_commands_turn_before_into_after(
    before: list[BfdPeerConfig], after: list[BfdPeerConfig]
) -> None:
    result, _ = run(model_of(before), commands(before, after))
    assert result == model_of(after)


@given(before=sessions, after=sessions)
def test_unchanged_sessions_get_no_command(
    before: list[BfdPeerConfig], after: list[BfdPeerConfig]
) -> None:
    _, touched = run(model_of(before), commands(before, after))
    old = model_of(before)
    new = model_of(after)
    unchanged = {k for k in old.keys() & new.keys() if old[k] == new[k]}
    assert not touched & unchanged


@given(peers=sessions)
def test_same_sessions_other_names_nothing_to_do(peers: list[BfdPeerConfig]) -> None:
    renamed = [replace(p, peer=PeerName(f"x-{p.peer}"), profile="other") for p in peers]
    assert commands(peers, renamed) == ()
