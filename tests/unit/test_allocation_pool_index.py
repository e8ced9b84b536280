"""allocate()'s pool lookup by binary search (bgpd.allocation.PoolIndex) answers what a
scan of the pools in config order answers, overlapping pools and .0/.255 included."""

from __future__ import annotations

import ipaddress

from clusterkit import pool
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.allocation import PoolIndex, _in_pool, _State
from bgpd.model import Config, IPAddress, IPAddressPool


def scan(pools: tuple[IPAddressPool, ...], ips: tuple[IPAddress, ...]) -> IPAddressPool | None:
    """The definition: the first pool holding every address (MetalLB poolFor)."""
    return next((p for p in pools if all(_in_pool(p, ip) for ip in ips)), None)


def v4(offset: int) -> str:
    return str(ipaddress.IPv4Address("198.51.100.250") + offset)


def v6(offset: int) -> str:
    return str(ipaddress.IPv6Address("2001:db8::fe") + offset)


@st.composite
def ranges(draw: st.DrawFn) -> str:
    first = draw(st.integers(0, 12))
    last = first + draw(st.integers(0, 6))
    text = v6 if draw(st.booleans()) else v4
    return f"{text(first)}-{text(last)}"


pools_strategy = st.lists(
    st.tuples(st.lists(ranges(), min_size=1, max_size=3), st.booleans()), max_size=5
).map(
    lambda drawn: tuple(
        pool(f"p{i}", *addresses, avoid_buggy_ips=buggy)
        for i, (addresses, buggy) in enumerate(drawn)
    )
)
ip_strategy = st.integers(-2, 20).flatmap(
    lambda k: st.sampled_from([ipaddress.ip_address(v4(k)), ipaddress.ip_address(v6(k))])
)


@settings(max_examples=300, deadline=None)
@given(pools=pools_strategy, ips=st.lists(ip_strategy, min_size=1, max_size=2))
def test_the_index_finds_the_pool_a_scan_finds(
    pools: tuple[IPAddressPool, ...], ips: list[IPAddress]
) -> None:
    state = _State(Config(pools=pools))
    assert state.pool_of_all(tuple(ips)) == scan(pools, tuple(ips))
    index = PoolIndex(pools)
    for ip in ips:
        assert index.holding(ip) == tuple(i for i, p in enumerate(pools) if p.contains(ip))


def test_the_first_pool_in_config_order_wins() -> None:
    pools = (pool("wide", "10.0.0.0/24"), pool("narrow", "10.0.0.8/29"))
    state = _State(Config(pools=pools))
    assert state.pool_of_all((ipaddress.IPv4Address("10.0.0.9"),)) is pools[0]
    assert state.pool_of_all((ipaddress.IPv4Address("10.0.1.9"),)) is None
