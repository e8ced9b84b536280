"""The ExaBGP launcher's replacement of ``Neighbor.remove_self`` against the original.

Routes are parsed by ExaBGP's own API parser (the path ``announce attributes ...`` takes)
and handed to two neighbours with different local addresses, as one API command for both
would be; the replacement must produce what the original produces, for each neighbour,
without touching the parsed route or sharing the per-neighbour rewrite.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from exabgp.bgp.neighbor import Neighbor
from exabgp.configuration.configuration import Configuration
from exabgp.environment import getenv
from exabgp.logger import log
from exabgp.reactor.asynchronous import ASYNC

from bgpd.exabgp import launch

CONFIG = """
neighbor 192.0.2.1 {
    router-id 192.0.2.10;
    local-address 192.0.2.10;
    local-as 65001;
    peer-as 65000;
    family { ipv4 unicast; }
}
neighbor 192.0.2.2 {
    router-id 192.0.2.11;
    local-address 192.0.2.11;
    local-as 65001;
    peer-as 65001;
    family { ipv4 unicast; }
}
neighbor 2001:db8::1 {
    router-id 192.0.2.12;
    local-address 2001:db8::12;
    local-as 65001;
    peer-as 65000;
    family { ipv6 unicast; }
}
"""


def parse(line: str) -> tuple[list[Any], list[Any]]:
    """The three neighbours, and the routes of one API command line."""
    log.init(getenv())  # what `exabgp validate` does before it parses
    conf = Configuration([CONFIG], text=True)
    assert conf.reload(), conf.error
    neighbors = list(conf.neighbors.values())  # partial() below clears conf.neighbors
    assert len(neighbors) == 3
    conf.static.clear()
    assert conf.partial("static", line), conf.error
    conf.scope.to_context()
    return neighbors, conf.scope.pop_routes()


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("attributes next-hop self nlri 10.99.0.1/32 10.99.0.2/32", id="self"),
        pytest.param(
            "attributes next-hop self community [65000:1 65535:0] large-community "
            "[65000:1:2] med 10 local-preference 50 nlri 10.99.0.3/32",
            id="self-with-attributes",
        ),
        pytest.param("attributes next-hop 192.0.2.99 nlri 10.99.0.4/32", id="explicit"),
        pytest.param("attributes next-hop self nlri 2001:db8:99::1/128", id="ipv6-self"),
    ],
)
def test_same_result_as_exabgps_own_remove_self(line: str) -> None:
    neighbors, changes = parse(line)
    assert changes
    original = Neighbor.remove_self
    compared = 0
    for change in changes:
        before = change.extensive()
        for neighbor in neighbors:
            if change.nlri.family().afi_safi() not in neighbor.families():
                continue
            want = original(neighbor, change)
            got = launch.remove_self(neighbor, change)
            assert got == want
            assert got.extensive() == want.extensive()
            assert got.index() == want.index()
            assert got.attributes.index() == want.attributes.index()
            assert str(got.nlri.nexthop) == str(want.nlri.nexthop)
            assert got is not change
            assert got.nlri is not change.nlri
            assert got.attributes is not change.attributes
            compared += 1
        # Neither the original nor the replacement changed the parsed route.
        assert change.extensive() == before
    assert compared >= len(changes)


def test_each_neighbour_gets_its_own_next_hop() -> None:
    [n1, n2, _], [change] = parse("attributes next-hop self nlri 10.99.0.9/32")
    a = launch.remove_self(n1, change)
    b = launch.remove_self(n2, change)
    assert str(a.nlri.nexthop) == "192.0.2.10"
    assert str(b.nlri.nexthop) == "192.0.2.11"
    a.nlri.action = 2  # what ExaBGP's outgoing RIB does to a stored change on withdraw
    assert b.nlri.action == change.nlri.action != 2


def test_installed_exabgp_is_the_verified_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed ExaBGP must be re-verified: this fails when the dependency moves."""
    assert launch.source_digest() == launch.VERIFIED_SOURCE_SHA256
    monkeypatch.setattr(Neighbor, "remove_self", Neighbor.remove_self)
    monkeypatch.setattr(ASYNC, "LIMIT", ASYNC.LIMIT)
    assert launch.patch() is True
    assert Neighbor.remove_self is launch.remove_self
    assert launch.ASYNC_STEPS == ASYNC.LIMIT


def test_another_exabgp_runs_unmodified(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(launch, "VERIFIED_SOURCE_SHA256", "0" * 64)
    original = Neighbor.remove_self
    monkeypatch.setattr(ASYNC, "LIMIT", ASYNC.LIMIT)
    assert launch.patch() is False
    # The supervisor relays ExaBGP lines containing "warning" at WARNING level.
    assert "warning" in capsys.readouterr().err
    assert Neighbor.remove_self is original
    assert ASYNC.LIMIT == 50


def test_launcher_runs_exabgp() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bgpd.exabgp.launch", "version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "ExaBGP : 5.0." in out.stdout
    assert "unmodified" not in out.stderr
