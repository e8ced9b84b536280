"""Failover time: how long a router keeps forwarding to a node that went silent.

Role: the one measurement the BFD tests and bench/bench_failover.py share. A node is
blackholed (kbgpd_lab.lab.blackhole: every packet dropped inside its namespace, its link
still up, so only BFD or the BGP hold timer can notice), and the clock runs until the
router's kernel FIB no longer lists the node's address among the prefix's next hops: the
moment traffic stops going to the dead node. The router's BGP and BFD states with the
node are read right then, so a caller can show what the hold timer alone would still
say (the session Established).

Public interface: ``Failover`` (node, seconds, session, bfd), ``blackhole_and_time(lab,
node, prefix, timeout=60)``, ``restore_and_wait(lab, node, prefix, nexthops, bfd,
timeout=60)``.

What it must not do: leave a node blackholed when timing fails (it restores it before
raising), or sleep for a fixed time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bgpd.model import IPAddress
from kbgpd_lab.lab.blackhole import blackhole, restore
from kbgpd_lab.lab.lab import Lab
from kbgpd_lab.lab.routers import RouterError


@dataclass(frozen=True, slots=True)
class Failover:
    """One blackholed node, seen from the router."""

    node: int
    #: Blackhole -> the node's next hop gone from the router's FIB.
    seconds: float
    #: The router's BGP session state with the node at that moment (``Idle`` after a BFD
    #: teardown; ``Established`` would mean the route went for another reason).
    session: str
    #: The router's BFD session state with the node then; None when the router runs none.
    bfd: str | None


def _router_view(lab: Lab, address: IPAddress) -> tuple[str, str | None]:
    session = lab.router.neighbors().get(address, "absent")
    if lab.router.config.bfd is None:
        return session, None
    return session, lab.router.bfd_sessions().get(address, "absent")


def blackhole_and_time(lab: Lab, node: int, prefix: str, *, timeout: float = 60) -> Failover:
    """Blackhole node N and time until the router's FIB for ``prefix`` no longer goes to
    it. The node stays blackholed (undo with :func:`restore_and_wait`), except when the
    wait fails: then it is restored before the error is raised."""
    address = lab.topology.node_address(node)
    if address not in lab.router.fib(prefix):
        raise RouterError(f"node{node} is not a next hop of {prefix} before the blackhole")
    ns = lab.topology.nodes[node - 1]
    start = time.monotonic()
    blackhole(ns)
    try:
        # Back to back (each read is one `ip route`, a few ms): the resolution of the figure.
        while address in lab.router.fib(prefix):
            if time.monotonic() - start > timeout:
                raise RouterError(f"node{node} still a next hop of {prefix} after {timeout} s")
        seconds = time.monotonic() - start
        session, bfd = _router_view(lab, address)
    except BaseException:
        restore(ns)
        raise
    return Failover(node=node, seconds=seconds, session=session, bfd=bfd)


def restore_and_wait(
    lab: Lab,
    node: int,
    prefix: str,
    nexthops: set[IPAddress],
    *,
    timeout: float = 60,
) -> float:
    """Undo node N's blackhole; wait until the router's FIB for ``prefix`` is
    ``nexthops`` again and, when the router runs BFD, its BFD session with the node is
    Up (a failover measured before that would meet BFD down and wait for the hold
    timer). Returns the seconds it took."""
    start = time.monotonic()
    restore(lab.topology.nodes[node - 1])
    lab.router.wait_fib(prefix, nexthops, timeout=timeout)
    if lab.router.config.bfd is not None:
        address = lab.topology.node_address(node)
        left = max(1.0, timeout - (time.monotonic() - start))
        lab.router.wait_bfd(lambda s: s.get(address) == "up", timeout=left)
    return time.monotonic() - start


__all__ = ["Failover", "blackhole_and_time", "restore_and_wait"]
