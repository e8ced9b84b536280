"""ExaBGP configuration text for tests and benchmarks that run ExaBGP's own code in process.

Role: the launcher's tests (tests/unit/test_exabgp_launch.py) and the in-process CPU
benchmark (bench/bench_exabgp_cpu.py) parse routes with ExaBGP's parser and hand them to
neighbours built from this text, so both mean the same sessions.

What it must not do: start ExaBGP or touch the network; it is text only.
"""

from __future__ import annotations

#: Three neighbours: two IPv4 (eBGP 192.0.2.1 from 192.0.2.10, iBGP 192.0.2.2 from
#: 192.0.2.11: different local addresses, so "next-hop self" differs per neighbour) and
#: one IPv6 (2001:db8::1 from 2001:db8::12).
NEIGHBORS = """
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
