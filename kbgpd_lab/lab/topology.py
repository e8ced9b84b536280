"""The lab's network: a router namespace, N node namespaces on one LAN, and a client.

Role: build and tear down the namespaces and links every lab test and ``kube-bgpd-lab``
runs on, and record what was created in a JSON state file so a crashed run's leftovers
can be removed later (:func:`cleanup_leftovers`), touching only what was recorded.

Layout (addresses are fixed lab ranges, only ever used inside these namespaces)::

    client eth0 10.99.200.2/24, fd00:99:200::2/64 --- r-cl 10.99.200.1, fd00:99:200::1 (router)
    router br0 172.31.250.1/24, fd00:99:250::1/64  (ip_forward, fib_multipath_hash_policy=1)
      +-- r-nI  ===veth===  nodeI eth0 172.31.250.(10+I)/24, fd00:99:250::(10+I)/64

With ``ecmp="pinned"`` (the default) the router also gets an nftables table and one
routing table per node that keep each client connection on the node it started on
(:func:`pin_ruleset` says why); ``ecmp="stateless"`` leaves routing to the FIB alone.

Nodes number from 1: ``nodes[0]`` is node1 and ``node_address(1)`` is 172.31.250.11.
Multipath hash policy 1 (L4) because policy 0 hashes on addresses only and one client
would land on one node (measured). IPv6 addresses are added ``nodad`` so they are usable
at once instead of after ~1 s of duplicate address detection.

Public interface: ``Topology.create(prefix=None, nodes=3, ipv6=True, client=True,
state_dir=None, ecmp="pinned")``, fields ``prefix router nodes client state_file ecmp``,
``node_address(i, family=4)``, ``router_address(family=4)``, ``client_address(family=4)``,
``namespaces()``, ``destroy()`` (idempotent), context manager, ``detach()``,
``Topology.attach(state_file)``; ``pin_ruleset(nodes)``; ``remove_recorded(state_file)``,
``cleanup_leftovers(state_dir=None, include_detached=False)``.

What it must not do: create anything outside its own namespaces (links are created
straight into them), or delete a namespace or kill a process it did not record.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from bgpd.model import IPAddress, IPNetwork
from kbgpd_lab.lab.netns import (
    Netns,
    NetnsError,
    create_netns,
    delete_netns,
    netns_exists,
    process_alive,
    process_start_time,
    processes_in,
    stop_pid,
)

DEFAULT_STATE_DIR = Path("/run/kube-bgpd-lab")

NODE_LAN4 = ipaddress.IPv4Network("172.31.250.0/24")
NODE_LAN6 = ipaddress.IPv6Network("fd00:99:250::/64")
CLIENT_NET4 = ipaddress.IPv4Network("10.99.200.0/24")
CLIENT_NET6 = ipaddress.IPv6Network("fd00:99:200::/64")
#: The first node's host number; node I has host number NODE_HOST_BASE + I.
NODE_HOST_BASE = 10
#: How the router spreads connections over its ECMP next hops (``Topology.create(ecmp=)``).
ECMP_MODES = ("pinned", "stateless")
#: Routing tables (and fwmarks) of the pinned next hops: node I uses PIN_TABLE_BASE + I.
PIN_TABLE_BASE = 1000
#: The client-facing router interface: connections entering here are pinned.
CLIENT_LINK = "r-cl"


def pin_ruleset(nodes: Sequence[tuple[int, Sequence[IPAddress]]]) -> str:
    """The router's nftables ruleset that pins each client connection to its node.

    Why: Linux multipath routing is hash-threshold and neither FRR 8.4 nor BIRD 2 programs
    resilient nexthop groups, so whenever a next hop leaves or joins the ECMP set, part of
    the connections *already open* hash to another node, which resets them (measured).
    A stateful router avoids that: the first packet of a connection is routed by the FIB
    (ECMP, as the speakers' routes say), postrouting records the next hop it took in the
    connection's conntrack mark, and every later packet of the connection carries that
    mark into a routing table of its own that reaches the same node. New connections
    follow the FIB at once; open ones finish where they started, even after the route is
    withdrawn (the node still answers: only its speaker stopped).

    ``nodes``: (node number, its LAN addresses). Only connections entering from the
    client link are pinned; replies and BGP are routed as usual.
    """
    maps: dict[int, list[str]] = {4: [], 6: []}
    for i, addresses in nodes:
        for addr in addresses:
            maps[addr.version].append(f"{addr} : {PIN_TABLE_BASE + i}")
    record = [
        f'        iifname "{CLIENT_LINK}" ct state new ct mark set rt {fam} nexthop map '
        f"{{ {', '.join(entries)} }}"
        for fam, entries in (("ip", maps[4]), ("ip6", maps[6]))
        if entries
    ]
    return "\n".join(
        [
            "table inet kube_bgpd_lab_pin {",
            "    chain restore {",
            "        type filter hook prerouting priority mangle; policy accept;",
            f'        iifname "{CLIENT_LINK}" ct mark != 0 meta mark set ct mark',
            "    }",
            "    chain record {",
            "        type filter hook postrouting priority mangle; policy accept;",
            *record,
            "    }",
            "}",
            "",
        ]
    )


def new_prefix() -> str:
    """A short prefix unique per run: the PID plus randomness (parallel runs happen)."""
    return f"kb{os.getpid()}{secrets.token_hex(2)}"


def _host(net: IPNetwork, host: int) -> IPAddress:
    """Host number ``host`` in ``net``; in IPv6 the decimal digits are read as hex so
    node1 is fd00:99:250::11 like 172.31.250.11 (people read these addresses)."""
    if net.version == 6:
        return net.network_address + int(str(host), 16)
    return net.network_address + host


@dataclass(slots=True, eq=False)
class Topology:
    """A built lab network. Create with :meth:`create`; always :meth:`destroy`."""

    prefix: str
    state_dir: Path
    ipv6: bool = True
    #: "pinned" (a stateful router: open connections stay on their node, see
    #: :func:`pin_ruleset`) or "stateless" (the FIB alone, hash-threshold ECMP).
    ecmp: str = "pinned"
    router: Netns = field(init=False)
    nodes: list[Netns] = field(default_factory=list)
    client: Netns | None = None
    _namespaces: list[str] = field(default_factory=list)
    _created: list[str] = field(default_factory=list)
    _destroyed: bool = False
    #: (pid, start time) of the process that owns this lab; (0, 0) once detached.
    _owner: tuple[int, int] = (0, 0)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def create(
        cls,
        prefix: str | None = None,
        nodes: int = 3,
        ipv6: bool = True,
        client: bool = True,
        state_dir: Path | str | None = None,
        ecmp: str = "pinned",
    ) -> Topology:
        """Build the namespaces and links; on any failure, remove what was built."""
        if not 1 <= nodes <= 200:
            raise ValueError(f"nodes must be 1..200, not {nodes}")
        if ecmp not in ECMP_MODES:
            raise ValueError(f"ecmp must be one of {', '.join(ECMP_MODES)}, not {ecmp!r}")
        topo = cls(
            prefix=prefix or new_prefix(),
            state_dir=Path(state_dir) if state_dir is not None else DEFAULT_STATE_DIR,
            ipv6=ipv6,
            ecmp=ecmp,
            _owner=(os.getpid(), process_start_time(os.getpid()) or 0),
        )
        try:
            topo._build(nodes, client)
        except BaseException:
            topo.destroy()
            raise
        return topo

    def _new_netns(self, role: str) -> Netns:
        name = f"{self.prefix}-{role}"
        # Record before creating: a crash between the two leaves a name that
        # cleanup_leftovers simply finds missing.
        self._namespaces.append(name)
        self._save()
        create_netns(name)
        self._created.append(name)
        return Netns(name, on_spawn=self._on_spawn)

    def _on_spawn(self, _pid: int) -> None:
        self._save()

    def _build(self, n_nodes: int, with_client: bool) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.router = self._new_netns("router")
        r = self.router.name
        self.nodes = [self._new_netns(f"node{i}") for i in range(1, n_nodes + 1)]
        if with_client:
            self.client = self._new_netns("client")

        # No duplicate address detection anywhere: link-local addresses (FRR needs one on
        # br0 for IPv6 next hops) and global ones are usable at once, not after ~1 s.
        nodad = ["net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]
        for ns in self.all_netns()[1:]:
            ns.run(["sysctl", "-q", "-w", *nodad])
        sysctls = [*nodad, "net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1"]
        if self.ipv6:
            sysctls += [
                "net.ipv6.conf.all.forwarding=1",
                "net.ipv6.fib_multipath_hash_policy=1",
            ]
        self.router.run(["sysctl", "-q", "-w", *sysctls])

        cmds = [
            "link set lo up",
            "link add br0 type bridge forward_delay 0 mcast_snooping 0",
            "link set br0 up",
            f"addr add {self.router_address(4)}/{NODE_LAN4.prefixlen} dev br0",
        ]
        if self.ipv6:
            cmds.append(f"addr add {self.router_address(6)}/{NODE_LAN6.prefixlen} dev br0 nodad")
        self._batch(self.router, cmds)

        for i, node in enumerate(self.nodes, start=1):
            _ip_link_veth(node.name, "eth0", r, f"r-n{i}")
            self._batch(self.router, [f"link set r-n{i} master br0", f"link set r-n{i} up"])
            ncmds = [
                "link set lo up",
                "link set eth0 up",
                f"addr add {self.node_address(i, 4)}/{NODE_LAN4.prefixlen} dev eth0",
                f"route add default via {self.router_address(4)}",
            ]
            if self.ipv6:
                ncmds[3:3] = [
                    f"addr add {self.node_address(i, 6)}/{NODE_LAN6.prefixlen} dev eth0 nodad"
                ]
                ncmds.append(f"route add default via {self.router_address(6)}")
            self._batch(node, ncmds)

        if self.client is not None:
            _ip_link_veth(self.client.name, "eth0", r, "r-cl")
            rcmds = [
                "link set r-cl up",
                f"addr add {_host(CLIENT_NET4, 1)}/{CLIENT_NET4.prefixlen} dev r-cl",
            ]
            ccmds = [
                "link set lo up",
                "link set eth0 up",
                f"addr add {self.client_address(4)}/{CLIENT_NET4.prefixlen} dev eth0",
                f"route add default via {_host(CLIENT_NET4, 1)}",
            ]
            if self.ipv6:
                rcmds.append(
                    f"addr add {_host(CLIENT_NET6, 1)}/{CLIENT_NET6.prefixlen} dev r-cl nodad"
                )
                ccmds[3:3] = [
                    f"addr add {self.client_address(6)}/{CLIENT_NET6.prefixlen} dev eth0 nodad"
                ]
                ccmds.append(f"route add default via {_host(CLIENT_NET6, 1)}")
            self._batch(self.router, rcmds)
            self._batch(self.client, ccmds)
            if self.ecmp == "pinned":
                self._pin_flows()

    def _pin_flows(self) -> None:
        """Make the router stateful for client connections (see :func:`pin_ruleset`)."""
        nodes = [
            (i, [self.node_address(i, f) for f in ((4, 6) if self.ipv6 else (4,))])
            for i in range(1, len(self.nodes) + 1)
        ]
        self.router.run(["nft", "-f", "-"], input=pin_ruleset(nodes))
        for i, addresses in nodes:
            table = str(PIN_TABLE_BASE + i)
            for addr in addresses:
                fam = f"-{addr.version}"
                self.router.ip(fam, "rule", "add", "fwmark", table, "lookup", table, "pref", "100")
                self.router.ip(fam, "route", "add", "default", "via", str(addr), "table", table)

    @staticmethod
    def _batch(ns: Netns, commands: list[str]) -> None:
        """Run several ``ip`` commands in one process (building a lab is ~80 ms)."""
        proc = subprocess.run(
            ["ip", "-n", ns.name, "-batch", "-"],
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise NetnsError(f"[{ns.name}] ip -batch failed: {proc.stderr.strip()}")

    # -- addresses ------------------------------------------------------------------

    def node_address(self, i: int, family: int = 4) -> IPAddress:
        """Node I's LAN address (I counts from 1, like the namespace names)."""
        if not 1 <= i <= max(len(self.nodes), 1):
            raise IndexError(f"no node{i} (nodes 1..{len(self.nodes)})")
        return _host(NODE_LAN4 if family == 4 else NODE_LAN6, NODE_HOST_BASE + i)

    def router_address(self, family: int = 4) -> IPAddress:
        """The router's address on the node LAN (bridge br0)."""
        return _host(NODE_LAN4 if family == 4 else NODE_LAN6, 1)

    def client_address(self, family: int = 4) -> IPAddress:
        return _host(CLIENT_NET4 if family == 4 else CLIENT_NET6, 2)

    def node_lan(self, family: int = 4) -> IPNetwork:
        return NODE_LAN4 if family == 4 else NODE_LAN6

    def all_netns(self) -> list[Netns]:
        out = [self.router, *self.nodes]
        if self.client is not None:
            out.append(self.client)
        return out

    def namespaces(self) -> list[str]:
        """Names of every namespace this topology created (or tried to)."""
        return list(self._namespaces)

    # -- state file and teardown --------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.state_dir / f"{self.prefix}.json"

    def _pids(self) -> list[int]:
        try:
            nss = self.all_netns()
        except AttributeError:  # router not built yet
            nss = []
        return [pid for ns in nss for pid in ns.pids]

    def _save(self) -> None:
        pids = []
        for pid in self._pids():
            start = process_start_time(pid)
            if start is not None:
                pids.append({"pid": pid, "start_time": start})
        state = {
            "prefix": self.prefix,
            "owner_pid": self._owner[0],
            "owner_start_time": self._owner[1],
            "detached": self._owner[0] == 0,
            "ipv6": self.ipv6,
            "ecmp": self.ecmp,
            "nodes": len(self.nodes),
            "client": self.client is not None,
            "created": time.time(),
            "namespaces": self._namespaces,
            "pids": pids,
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_file)

    def detach(self) -> None:
        """Hand the topology over to whoever runs ``lab down`` after this process exits.

        A detached state file is never taken for a crashed run's leftovers by
        :func:`cleanup_leftovers` unless asked (``include_detached``).
        """
        self._owner = (0, 0)
        self._save()

    @classmethod
    def attach(cls, state_file: Path | str) -> Topology:
        """Re-open a topology another process created, from its state file.

        The namespaces and recorded PIDs become this object's to query and to destroy;
        the recorded owner is kept.
        """
        path = Path(state_file)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise NetnsError(f"cannot read lab state {path}: {exc}") from exc
        prefix = str(state["prefix"])
        topo = cls(
            prefix=prefix,
            state_dir=path.parent,
            ipv6=bool(state.get("ipv6", True)),
            ecmp=str(state.get("ecmp", "stateless")),
            _owner=(int(state.get("owner_pid", 0)), int(state.get("owner_start_time") or 0)),
        )
        topo._namespaces = list(state.get("namespaces", []))
        topo._created = [n for n in topo._namespaces if netns_exists(n)]
        by_name = {n: Netns(n, on_spawn=topo._on_spawn) for n in topo._namespaces}
        topo.router = by_name[f"{prefix}-router"]
        topo.nodes = [
            by_name[f"{prefix}-node{i}"]
            for i in range(1, int(state.get("nodes", 0)) + 1)
            if f"{prefix}-node{i}" in by_name
        ]
        topo.client = by_name.get(f"{prefix}-client")
        alive = {pid for entry in state.get("pids", []) if (pid := _recorded_alive(entry))}
        for pid in sorted(alive):
            # Attribute each PID to the namespace it lives in (ip netns pids).
            for ns in topo.all_netns():
                if pid in processes_in(ns.name):
                    ns.adopt(pid)
                    break
        return topo

    def destroy(self) -> None:
        """Kill our processes (by PID), delete our namespaces, remove the state file."""
        with contextlib.suppress(AttributeError):
            for ns in reversed(self.all_netns()):
                ns.kill_all()
        # Only what we created: a name that existed before create_netns is not ours.
        for name in reversed(self._created):
            for pid in processes_in(name):
                stop_pid(pid, timeout=1.0)
            delete_netns(name)
        if all(not netns_exists(n) for n in self._created):
            with contextlib.suppress(FileNotFoundError):
                self.state_file.unlink()
        self._destroyed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()


def _ip_link_veth(ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
    """A veth pair created straight into two namespaces: nothing appears in the host's."""
    peer = ("peer", "name", name_b, "netns", ns_b)
    proc = subprocess.run(
        ["ip", "link", "add", name_a, "netns", ns_a, "type", "veth", *peer],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        raise NetnsError(f"veth {ns_a}/{name_a}-{ns_b}/{name_b}: {proc.stderr.strip()}")


def _recorded_alive(entry: dict[str, Any]) -> int | None:
    """The PID if it still runs *and* is the same process that was recorded."""
    pid = int(entry["pid"])
    if process_alive(pid) and process_start_time(pid) == entry.get("start_time"):
        return pid
    return None


def remove_recorded(state_file: Path | str) -> list[str]:
    """Kill the PIDs and delete the namespaces one state file recorded; remove the file.

    Only what was recorded, and a PID only if it is still the recorded process (same
    start time). Returns the names of the namespaces removed.
    """
    path = Path(state_file)
    removed: list[str] = []
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return removed
    except (OSError, ValueError):
        state = {}
    for entry in state.get("pids", []):
        pid = _recorded_alive(entry)
        if pid is not None:
            stop_pid(pid, timeout=1.0)
    for name in reversed(state.get("namespaces", [])):
        if netns_exists(name):
            # Anything inside a namespace we created is ours (grandchildren included).
            for pid in processes_in(name):
                stop_pid(pid, timeout=1.0)
            delete_netns(name)
            removed.append(name)
    path.unlink(missing_ok=True)
    return removed


def cleanup_leftovers(
    state_dir: Path | str | None = None, *, include_detached: bool = False
) -> list[str]:
    """Remove what crashed earlier runs recorded: their PIDs and their namespaces.

    A state file whose owner process still runs belongs to a live run and is left
    alone; so is a detached lab (``kube-bgpd-lab up``) unless ``include_detached``.
    Returns the names of the namespaces removed.
    """
    directory = Path(state_dir) if state_dir is not None else DEFAULT_STATE_DIR
    removed: list[str] = []
    if not directory.is_dir():
        return removed
    for path in sorted(directory.glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(state, dict) or "namespaces" not in state:
            continue  # not a topology state file (lab.json lives here too)
        if state.get("detached") and not include_detached:
            continue
        owner = int(state.get("owner_pid", 0))
        if (
            owner
            and process_alive(owner)
            and process_start_time(owner) == state.get("owner_start_time")
        ):
            continue
        removed += remove_recorded(path)
    return removed
