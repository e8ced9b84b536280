"""Real routers (FRR, BIRD 2, GoBGP) run inside a lab namespace, and how to read them.

Role: start a real router as the peer of the nodes' ExaBGP, and read back what it learnt:
its BGP RIB (prefix -> paths with next hop and attributes), its kernel FIB (the next hops
the router would really forward to) and its session states. Tests and the lab assert on
these; nothing here announces routes.

ExaBGP only connects out, so every router here listens: by default it accepts dynamic
neighbours from the node LAN (``RouterConfig.neighbor_ranges``), optionally static
neighbours per node address (``static_neighbors``). Nodes may share one ASN; iBGP
(``peer_asn == asn``) and eBGP both work; ``peer_asn=None`` accepts any external ASN
(not for GoBGP, whose dynamic neighbours need one).

Public interface::

    RouterConfig(asn=64512, router_id=172.31.250.1, peer_asn=64513, listen=(...),
                 neighbor_ranges=(172.31.250.0/24, fd00:99:250::/64), static_neighbors=(),
                 md5_password=None, graceful_restart=False, restart_time=120,
                 hold_time=9, keepalive_time=3, ebgp_multihop=None, ttl_security=False,
                 graceful_shutdown_policy=False, ..., bfd=None)
    RouterBfd(receive_interval=300, transmit_interval=300, detect_multiplier=3,
              graceful=False, check_control_plane=False)
    RibPath(next_hop, communities, large_communities, local_pref, med, as_path)
    Router: start() stop() restart() rib(family=4) fib(prefix) neighbors() changes_received()
            fib_weights(prefix) (next hop -> kernel ECMP weight)
            restarting_peers() (FRR, BIRD)
            bfd_sessions() wait_bfd(predicate, timeout) (FRR, BIRD with RouterConfig.bfd)
            wait_rib(predicate, timeout) wait_fib(prefix, expected_nexthops, timeout)
            wait_established(count, timeout) wait_neighbors(predicate, timeout)
            wait_route(prefix, next_hops=None, timeout) log_tail() close()
    FRRRouter, BirdRouter, GoBGPRouter(netns, config, workdir)
    Static neighbours are connected to actively (the router restarts and reconnects at once
    if the speaker's ExaBGP listens); dynamic ranges are passive by nature.
    make_router(kind, netns, workdir, **config) with kind in ROUTER_KINDS
    FibWatch(router, {prefix: expected_nexthops}): ``with`` it to sample the FIB back to
    back; ``samples`` and ``deviations`` (time, prefix, next hops seen) afterwards

Facts used (measured on this lab's Debian packages): FRR daemons run by hand in the netns
with their own paths and ``chown frr``; eBGP needs ``no bgp ebgp-requires-policy``,
``maximum-paths 8`` and ``bgp bestpath as-path multipath-relax``; FRR needs ~60 ms to
program the FIB, BIRD ~3 ms (hence the short poll interval); GoBGP cannot program the
kernel, so it is RIB only (``fib`` raises).

What it must not do: stop any process but its own (by PID); talk to anything outside
its namespace.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from bgpd.model import IPAddress, IPNetwork
from kbgpd_lab.lab.netns import Netns, NetnsError
from kbgpd_lab.lab.topology import NODE_LAN4, NODE_LAN6

T = TypeVar("T")

Rib = dict[IPNetwork, list["RibPath"]]

#: The name of the FRR router's BFD profile (``RouterConfig.bfd``).
FRR_BFD_PROFILE = "lab"

#: Lab router defaults: a private ASN for the ToR and one shared ASN for the nodes (eBGP).
ROUTER_ASN = 64512
NODE_ASN = 64513
_ROUTER4 = ipaddress.IPv4Address("172.31.250.1")
_ROUTER6 = ipaddress.IPv6Address("fd00:99:250::1")


class RouterError(RuntimeError):
    """A router did not start, or a query or wait failed; carries the last seen state."""


@dataclass(frozen=True, slots=True)
class RibPath:
    """One path to a prefix in a router's BGP RIB, in the router-neutral form tests use.

    Communities are ``"a:b"`` strings, large communities ``"a:b:c"``, both sorted.
    """

    next_hop: IPAddress
    communities: tuple[str, ...] = ()
    large_communities: tuple[str, ...] = ()
    local_pref: int | None = None
    med: int | None = None
    as_path: tuple[int, ...] = ()
    #: Kept by graceful restart after the peer went away (FRR and GoBGP report it;
    #: BIRD's text output does not, so it is always False there).
    stale: bool = False


@dataclass(frozen=True, slots=True)
class RouterBfd:
    """The router's side of BFD (RFC 5880/5881, single hop) with every node.

    FRR: a ``bfd`` profile in bfdd (``profile lab``) and ``neighbor GROUP bfd profile
    lab`` on each peer group; bfdd runs beside bgpd. BIRD: ``protocol bfd`` with these
    intervals on every interface and ``bfd on`` (``bfd graceful`` with ``graceful``) in
    each BGP protocol. Intervals are in milliseconds, as both routers write them.
    """

    receive_interval: int = 300
    transmit_interval: int = 300
    detect_multiplier: int = 3
    #: BIRD's ``bfd graceful``: a BFD session going down starts a graceful restart of the
    #: BGP session (routes kept as stale, when GR was negotiated) instead of a teardown.
    #: FRR's nearest equivalent is ``check_control_plane``.
    graceful: bool = False
    #: FRR's ``neighbor ... bfd check-control-plane-failure``: with graceful restart
    #: negotiated, a BFD down is ignored when the peer's BFD says it shares fate with its
    #: control plane (C bit clear, RFC 5880 section 4.1). FRR 8.4 does so for a dead
    #: node in about 7 runs of 12 (the C bit it reports at the Down varies): no test
    #: asserts either outcome. BIRD has no such option.
    check_control_plane: bool = False


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """How the lab router is configured; every router kind reads the same fields."""

    asn: int = ROUTER_ASN
    router_id: ipaddress.IPv4Address = _ROUTER4
    #: The nodes' ASN; equal to ``asn`` for iBGP; None = any external ASN (FRR, BIRD).
    peer_asn: int | None = NODE_ASN
    neighbor_ranges: tuple[IPNetwork, ...] = (NODE_LAN4, NODE_LAN6)
    static_neighbors: tuple[IPAddress, ...] = ()
    md5_password: str | None = None
    #: Router-side graceful restart: keep a restarting peer's routes as stale.
    graceful_restart: bool = False
    restart_time: int = 120
    hold_time: int = 9
    keepalive_time: int = 3
    ebgp_multihop: int | None = None
    ttl_security: bool = False
    #: RFC 8326 receiver policy (docs/routers.md): paths carrying GRACEFUL_SHUTDOWN
    #: 65535:0 get LOCAL_PREF 0 on import, so a draining node leaves the ECMP set before
    #: its withdrawal. BIRD needs the import filter; FRR does this for eBGP paths by itself.
    graceful_shutdown_policy: bool = False
    #: FRR's ``bgp bestpath bandwidth`` (ignore, skip-missing, default-weight-for-missing):
    #: how the link-bandwidth community of paths weighs ECMP next hops (docs/routers.md);
    #: None keeps FRR's default (weighted when every path carries one). BIRD has none.
    bestpath_bandwidth: str | None = None
    #: Local addresses for the BGP sessions (BIRD needs them per template).
    local_address4: ipaddress.IPv4Address = _ROUTER4
    local_address6: ipaddress.IPv6Address = _ROUTER6
    #: GoBGP's gRPC API port (inside the namespace, so no clash between labs).
    api_port: int = 50051
    #: BFD with every node (FRR and BIRD), None for none.
    bfd: RouterBfd | None = None
    #: BIRD's ``error wait time MIN, MAX``: how long a session that went down with an
    #: error (BFD down, hold timer expired) waits before BIRD accepts or opens it again
    #: (BIRD's default 60, 300 s); None keeps the default. FRR has no such delay.
    error_wait_time: tuple[int, int] | None = None
    #: Seconds between the router's attempts to connect to a static neighbour (FRR's
    #: ``timers connect``, BIRD's ``connect retry time``; both 120 s by default); None
    #: keeps the default. A speaker holding a flapping peer down only listens.
    connect_retry: int | None = None

    def __post_init__(self) -> None:
        # The password is written into FRR's (one word) and BIRD's ("quoted") config text.
        pw = self.md5_password
        if pw is not None and (not pw or any(c.isspace() or c in '"\\' for c in pw)):
            raise ValueError("lab routers take an MD5 password without spaces, quotes or \\")

    @property
    def ibgp(self) -> bool:
        return self.peer_asn == self.asn


def _poll(
    read: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float,
    interval: float,
    what: str,
) -> T:
    """Call ``read`` until ``done`` holds; on timeout raise with the last value seen."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    error: Exception | None = None
    while True:
        try:
            last = read()
            error = None
            if done(last):
                return last
        except (RouterError, NetnsError, subprocess.TimeoutExpired) as exc:
            error = exc
        if time.monotonic() >= deadline:
            raise RouterError(
                f"timeout after {timeout} s waiting for {what}; last seen: {last!r}"
                + (f"; last error: {error}" if error else "")
            )
        time.sleep(interval)


def _log_tail(directory: Path, lines: int) -> str:
    out = []
    for path in sorted(directory.glob("*.log")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {path.name}\n" + "\n".join(text))
    return "\n".join(out)


def _net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text, strict=False)


class Router(ABC):
    """A real router process in ``netns``; its files (config, logs, sockets) in ``workdir``."""

    kind: str = ""
    #: How often wait_* poll; each read is one CLI call (a few ms).
    poll_interval: float = 0.01
    programs_kernel: bool = True

    def __init__(self, netns: Netns, config: RouterConfig, workdir: Path) -> None:
        self.netns = netns
        self.config = config
        self.workdir = Path(workdir)
        self._pids: list[int] = []

    # -- lifecycle ------------------------------------------------------------------

    @abstractmethod
    def write_config(self) -> None:
        """Render the config into the work directory (``start`` does it first)."""

    @abstractmethod
    def _spawn(self) -> None:
        """Start the daemon(s) and wait until they answer queries."""

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        try:
            self._spawn()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for pid in reversed(self._pids):
            self.netns.stop(pid, timeout=3.0)
        self._pids.clear()

    def restart(self) -> None:
        self.stop()
        self._spawn()

    @property
    def running(self) -> bool:
        return bool(self._pids)

    def _popen_logged(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = (self.workdir / log_name).open("ab")
        try:
            # Own session: a lab router outlives `kube-bgpd-lab up` and its terminal.
            proc = self.netns.popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()
        self._pids.append(proc.pid)
        return proc

    def log_tail(self, lines: int = 30) -> str:
        """The end of every log file in the work directory (for failure messages)."""
        return _log_tail(self.workdir, lines)

    def close(self) -> None:
        """Stop, and remove anything kept outside ``workdir``."""
        self.stop()

    def _wait_ready(self, probe: Callable[[], object], what: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                probe()
                return
            except (RouterError, NetnsError, subprocess.TimeoutExpired) as exc:
                if time.monotonic() >= deadline:
                    raise RouterError(
                        f"{self.kind}: {what} not ready: {exc}\n{self.log_tail()}"
                    ) from exc
            time.sleep(0.02)

    # -- reading state -------------------------------------------------------------

    @abstractmethod
    def rib(self, family: int = 4) -> Rib:
        """Every prefix in the BGP RIB of that family with all its paths."""

    @abstractmethod
    def neighbors(self) -> dict[IPAddress, str]:
        """Session state per neighbour address (``Established``, ``Active``, ...)."""

    @abstractmethod
    def changes_received(self) -> dict[IPAddress, int]:
        """A counter per neighbour that grows with every route change received from it.

        Only for comparing before/after ("nothing was re-announced"): FRR and GoBGP count
        UPDATE messages, BIRD counts route updates plus withdrawals.
        """

    def sessions_since(self) -> dict[IPAddress, str]:
        """Per Established neighbour, a mark of when its session came up: the same mark
        later means the session was never reset in between (FRR: its count of sessions
        established; BIRD: how many times its protocol came up, from BIRD's log). FRR and
        BIRD only."""
        raise RouterError(f"{self.kind}: sessions_since() is not implemented")

    def bfd_sessions(self) -> dict[IPAddress, str]:
        """BFD session state per neighbour address, in RFC 5880's words as the speaker's
        status uses them: ``up``, ``down``, ``init``, ``admin-down``. FRR and BIRD only
        (with ``RouterConfig.bfd``)."""
        raise RouterError(f"{self.kind}: bfd_sessions() is not implemented")

    def wait_bfd(
        self, predicate: Callable[[dict[IPAddress, str]], bool], timeout: float = 10
    ) -> dict[IPAddress, str]:
        """Poll the BFD sessions until ``predicate(sessions)``; returns them."""
        return _poll(
            self.bfd_sessions,
            predicate,
            timeout=timeout,
            interval=self.poll_interval,
            what=f"{self.kind} BFD sessions condition",
        )

    def restarting_peers(self) -> set[IPAddress]:
        """Neighbours whose routes the router still holds for graceful restart (RFC 4724):
        the session went down and the restart time runs, or it is back but End-of-RIB
        has not arrived yet. Empty when every restart is over. FRR and BIRD only."""
        raise RouterError(f"{self.kind}: restarting_peers() is not implemented")

    def fib(self, prefix: str | IPNetwork | IPAddress) -> set[IPAddress]:
        """Next hops of the kernel route for exactly ``prefix`` in the router namespace.

        An ECMP route is one route with N nexthops; an absent route gives an empty set.
        """
        return set(self.fib_weights(prefix))

    def fib_weights(self, prefix: str | IPNetwork | IPAddress) -> dict[IPAddress, int]:
        """Next hop -> weight of the kernel route for exactly ``prefix`` (``ip -j route``;
        a single-path route has weight 1): what weighted ECMP installed."""
        net = _net(str(prefix))
        fam = "-6" if net.version == 6 else "-4"
        proc = self.netns.ip("-j", fam, "route", "show", "exact", str(net))
        routes: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
        return {
            ipaddress.ip_address(hop["gateway"]): int(hop.get("weight", 1))
            for route in routes
            for hop in route.get("nexthops", [route])
            if "gateway" in hop
        }

    def wait_rib(
        self,
        predicate: Callable[[Rib], bool],
        timeout: float = 10,
        *,
        family: int = 4,
    ) -> Rib:
        """Poll the RIB until ``predicate(rib)``; returns that RIB."""
        return _poll(
            lambda: self.rib(family),
            predicate,
            timeout=timeout,
            interval=self.poll_interval,
            what=f"{self.kind} RIB (IPv{family}) condition",
        )

    def wait_route(
        self,
        prefix: str | IPNetwork,
        next_hops: set[IPAddress] | None = None,
        timeout: float = 10,
    ) -> list[RibPath]:
        """Poll until ``prefix`` is in the RIB (with exactly these next hops, if given)."""
        net = _net(str(prefix))

        def ok(rib: Rib) -> bool:
            paths = rib.get(net, [])
            if next_hops is None:
                return bool(paths)
            return {p.next_hop for p in paths} == next_hops

        return self.wait_rib(ok, timeout, family=net.version)[net]

    def wait_fib(
        self,
        prefix: str | IPNetwork | IPAddress,
        expected_nexthops: set[IPAddress] | set[str],
        timeout: float = 10,
    ) -> set[IPAddress]:
        """Poll the kernel FIB until the route's next hops are exactly the expected set.

        An empty expected set waits for the route to be gone.
        """
        want = {ipaddress.ip_address(str(h)) for h in expected_nexthops}
        return _poll(
            lambda: self.fib(prefix),
            lambda hops: hops == want,
            timeout=timeout,
            interval=self.poll_interval,
            what=f"{self.kind} FIB for {prefix} == {sorted(map(str, want))}",
        )

    def wait_neighbors(
        self, predicate: Callable[[dict[IPAddress, str]], bool], timeout: float = 15
    ) -> dict[IPAddress, str]:
        """Poll :meth:`neighbors` until ``predicate`` holds (e.g. a session went down)."""
        return _poll(
            self.neighbors,
            predicate,
            timeout=timeout,
            interval=max(self.poll_interval, 0.02),
            what=f"{self.kind} sessions condition",
        )

    def wait_established(self, count: int = 1, timeout: float = 15) -> dict[IPAddress, str]:
        """Poll until at least ``count`` sessions are Established."""
        return _poll(
            self.neighbors,
            lambda n: sum(s == "Established" for s in n.values()) >= count,
            timeout=timeout,
            interval=max(self.poll_interval, 0.02),
            what=f"{count} established {self.kind} session(s)",
        )


# --------------------------------------------------------------------------- FRR


class FRRRouter(Router):
    """FRR 8.x: zebra + bgpd (+ bfdd) started by hand inside the namespace.

    Each daemon gets its own pid file, zserv socket and vty socket in ``workdir``, which
    is chowned to ``frr`` because FRR drops privileges and root is not in ``frrvty``.
    Daemons run in the foreground so their PIDs are our Popen children.
    """

    kind = "frr"
    poll_interval = 0.01

    def __init__(
        self,
        netns: Netns,
        config: RouterConfig,
        workdir: Path,
        *,
        rundir: Path | None = None,
    ) -> None:
        super().__init__(netns, config, workdir)
        # FRR drops to user frr, which cannot enter a root-only test directory (pytest's
        # tmp_path is mode 700): its sockets, pid files, config and logs live in a
        # directory of its own under /tmp, linked from workdir and removed by close().
        # ``rundir`` re-attaches to a running FRR (``kube-bgpd-lab status``).
        self.rundir = rundir or Path(tempfile.mkdtemp(prefix="kube-bgpd-frr-"))
        link = self.workdir / "frr"
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(self.rundir)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.rundir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        return super().log_tail(lines) + "\n" + _log_tail(self.rundir, lines)

    def _daemon_argv(self, name: str) -> list[str]:
        d = self.rundir
        argv = [
            f"/usr/lib/frr/{name}",
            "-i",
            str(d / f"{name}.pid"),
            "-z",
            str(d / "zserv.api"),
            "--vty_socket",
            str(d),
            "-f",
            str(d / f"{name}.conf"),
            "-P",
            "0",
            "--log",
            f"file:{d / (name + '.log')}",
        ]
        if name == "bfdd":
            argv += ["--bfdctl", str(d / "bfdd.sock")]
        return argv

    def write_config(self) -> None:
        d = self.rundir
        (d / "zebra.conf").write_text("hostname lab-router\nzebra work-queue 1\n")
        (d / "bfdd.conf").write_text(self.render_bfdd())
        (d / "bgpd.conf").write_text(self.render_bgpd())
        (d / "vtysh.conf").write_text("")
        shutil.chown(d, "frr", "frr")
        for path in d.iterdir():
            shutil.chown(path, "frr", "frr")

    def render_bgpd(self) -> str:
        """bgpd.conf: one peer group per address family, listening on the node ranges."""
        c = self.config
        remote = "external" if c.peer_asn is None else str(c.peer_asn)
        lines = [
            "hostname lab-router",
            "log timestamp precision 3",
            f"router bgp {c.asn}",
            f" bgp router-id {c.router_id}",
            " no bgp ebgp-requires-policy",
            " no bgp default ipv4-unicast",
            " no bgp network import-check",
            " bgp bestpath as-path multipath-relax",
        ]
        if c.bestpath_bandwidth is not None:
            lines.append(f" bgp bestpath bandwidth {c.bestpath_bandwidth}")
        if c.graceful_restart:
            lines += [
                " bgp graceful-restart",
                f" bgp graceful-restart restart-time {c.restart_time}",
            ]
        groups: dict[int, str] = {}
        for fam in (4, 6):
            ranges = [r for r in c.neighbor_ranges if r.version == fam]
            statics = [a for a in c.static_neighbors if a.version == fam]
            if not ranges and not statics:
                continue
            g = f"NODES{fam}"
            groups[fam] = g
            lines += [f" neighbor {g} peer-group", f" neighbor {g} remote-as {remote}"]
            lines.append(f" neighbor {g} timers {c.keepalive_time} {c.hold_time}")
            if c.connect_retry is not None:
                lines.append(f" neighbor {g} timers connect {c.connect_retry}")
            if c.md5_password is not None:
                lines.append(f" neighbor {g} password {c.md5_password}")
            if c.ebgp_multihop is not None:
                lines.append(f" neighbor {g} ebgp-multihop {c.ebgp_multihop}")
            if c.ttl_security:
                lines.append(f" neighbor {g} ttl-security hops 1")
            if c.bfd is not None:
                lines.append(f" neighbor {g} bfd profile {FRR_BFD_PROFILE}")
                if c.bfd.check_control_plane:
                    lines.append(f" neighbor {g} bfd check-control-plane-failure")
            lines += [f" bgp listen range {r} peer-group {g}" for r in ranges]
            lines += [f" neighbor {a} peer-group {g}" for a in statics]
        lines.append(" bgp listen limit 200")
        for fam, g in groups.items():
            afi = "ipv4" if fam == 4 else "ipv6"
            lines += [
                f" address-family {afi} unicast",
                f"  neighbor {g} activate",
                "  maximum-paths 8",
                "  maximum-paths ibgp 8",
                " exit-address-family",
            ]
        return "\n".join(lines) + "\n"

    def render_bfdd(self) -> str:
        """bfdd.conf: the profile the peer groups name (bgpd asks bfdd for one session
        per neighbour, dynamic ones included)."""
        lines = ["hostname lab-router"]
        b = self.config.bfd
        if b is not None:
            lines += [
                "bfd",
                f" profile {FRR_BFD_PROFILE}",
                f"  detect-multiplier {b.detect_multiplier}",
                f"  receive-interval {b.receive_interval}",
                f"  transmit-interval {b.transmit_interval}",
                " exit",
                "exit",
            ]
        return "\n".join(lines) + "\n"

    def _spawn(self) -> None:
        d = self.rundir
        for stale in ("zserv.api", "zebra.vty", "bgpd.vty", "bfdd.vty", "bfdd.sock"):
            (d / stale).unlink(missing_ok=True)
        self._popen_logged(self._daemon_argv("zebra"), "zebra.stdout.log")
        # bgpd connects to zebra's socket; starting it first only costs a retry, but
        # waiting keeps the first FIB install prompt.
        self._wait_ready(lambda: self._require(d / "zserv.api"), "zebra")
        self._popen_logged(self._daemon_argv("bgpd"), "bgpd.stdout.log")
        if self.config.bfd is not None:
            self._popen_logged(self._daemon_argv("bfdd"), "bfdd.stdout.log")
            self._wait_ready(lambda: self.vtysh("show bfd peers json"), "bfdd")
        self._wait_ready(lambda: self.vtysh("show bgp summary json"), "bgpd")

    @staticmethod
    def _require(path: Path) -> None:
        if not path.exists():
            raise RouterError(f"{path} missing")

    def vtysh(self, command: str) -> str:
        proc = self.netns.run(
            ["vtysh", "--vty_socket", str(self.rundir), "-c", command], check=False, timeout=10
        )
        if proc.returncode != 0:
            raise RouterError(f"vtysh -c {command!r}: {proc.stderr.strip() or proc.stdout}")
        return proc.stdout

    def vtysh_json(self, command: str) -> Any:
        text = self.vtysh(command)
        try:
            return json.loads(text)
        except ValueError as exc:
            raise RouterError(f"vtysh -c {command!r}: not JSON: {text[:300]!r}") from exc

    def rib(self, family: int = 4) -> Rib:
        afi = "ipv4" if family == 4 else "ipv6"
        data = self.vtysh_json(f"show bgp {afi} unicast json detail")
        out: Rib = {}
        for prefix, entries in (data.get("routes") or {}).items():
            # FRR 8.4 lists the prefix's own record first, then one record per path.
            paths = [parse_frr_path(p) for p in entries if "nexthops" in p]
            if paths:
                out[_net(prefix)] = paths
        return out

    def neighbors(self) -> dict[IPAddress, str]:
        data = self.vtysh_json("show bgp neighbors json")
        return {ip: str(info.get("bgpState", "?")) for ip, info in _frr_neighbors(data)}

    def changes_received(self) -> dict[IPAddress, int]:
        data = self.vtysh_json("show bgp neighbors json")
        return {
            ip: int(info.get("messageStats", {}).get("updatesRecv", 0))
            for ip, info in _frr_neighbors(data)
        }

    def restarting_peers(self) -> set[IPAddress]:
        return parse_frr_restarting(self.vtysh_json("show bgp neighbors json"))

    def sessions_since(self) -> dict[IPAddress, str]:
        return parse_frr_since(self.vtysh_json("show bgp neighbors json"))

    def bfd_sessions(self) -> dict[IPAddress, str]:
        return parse_frr_bfd(self.vtysh_json("show bfd peers json"))


#: FRR's ``show bfd peers json`` status words -> RFC 5880 state names.
_FRR_BFD_STATES = {"up": "up", "down": "down", "init": "init", "shutdown": "admin-down"}


def parse_frr_bfd(data: Any) -> dict[IPAddress, str]:
    """Peer address -> BFD state from ``show bfd peers json`` (FRR 8.4: a list of
    sessions with ``peer`` and ``status``)."""
    return {
        ipaddress.ip_address(entry["peer"]): _FRR_BFD_STATES.get(
            str(entry.get("status")), str(entry.get("status"))
        )
        for entry in data or []
        if entry.get("peer")
    }


def _frr_neighbors(data: Mapping[str, Any]) -> Iterator[tuple[IPAddress, Mapping[str, Any]]]:
    """The neighbours of ``show bgp neighbors json`` by address (peer groups left out)."""
    for addr, info in data.items():
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            continue  # peer-group entries
        yield ip, info


def parse_frr_since(data: Mapping[str, Any]) -> dict[IPAddress, str]:
    """From ``show bgp neighbors json`` (FRR 8.4): per Established neighbour, its count
    of sessions established (``connectionsEstablished``: every reset raises it). Not
    ``bgpTimerUpEstablishedEpoch``: FRR computes it as now minus the uptime, and it
    moves by a second between two reads of one session."""
    out: dict[IPAddress, str] = {}
    for ip, info in _frr_neighbors(data):
        if info.get("bgpState") == "Established":
            out[ip] = str(info.get("connectionsEstablished", "?"))
    return out


def parse_frr_restarting(data: Mapping[str, Any]) -> set[IPAddress]:
    """From ``show bgp neighbors json`` (FRR 8.4): a neighbour is restarting while its
    restart timer runs (session down, routes kept as stale), or while an address family
    of an Established session has not received End-of-RIB."""
    out: set[IPAddress] = set()
    for addr, info in data.items():
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            continue  # peer-group entries
        gr = info.get("gracefulRestartInfo") or {}
        if info.get("bgpState") != "Established":
            if "gracefulRestartTimerMsecs" in gr:
                out.add(ip)
            continue
        families = [v for v in gr.values() if isinstance(v, dict) and "endOfRibStatus" in v]
        if any(not f["endOfRibStatus"].get("endOfRibRecv", False) for f in families):
            out.add(ip)
    return out


def parse_frr_path(p: Mapping[str, Any]) -> RibPath:
    hops = p.get("nexthops") or []
    nh = next((h["ip"] for h in hops if h.get("ip") and h.get("scope") != "link-local"), None)
    if nh is None and hops:
        nh = hops[0]["ip"]
    aspath = p.get("aspath") or {}
    as_text = aspath.get("string", "") if isinstance(aspath, dict) else str(aspath)
    comm = (p.get("community") or {}).get("string", "")
    large = (p.get("largeCommunity") or {}).get("string", "")
    return RibPath(
        next_hop=ipaddress.ip_address(nh or "0.0.0.0"),
        communities=tuple(sorted(_frr_communities(comm))),
        large_communities=tuple(sorted(large.split())),
        local_pref=p.get("locPrf", p.get("localpref")),
        med=p.get("metric", p.get("med")),
        as_path=tuple(int(a) for a in as_text.split() if a.isdigit()),
        stale=bool(p.get("stale", False)),
    )


#: FRR prints well-known communities by name; tests compare numbers.
_FRR_WELL_KNOWN = {
    "graceful-shutdown": "65535:0",
    "accept-own": "65535:1",
    "route-filter-translated-v4": "65535:2",
    "route-filter-v4": "65535:3",
    "route-filter-translated-v6": "65535:4",
    "route-filter-v6": "65535:5",
    "llgr-stale": "65535:6",
    "no-llgr": "65535:7",
    "accept-own-nexthop": "65535:8",
    "blackhole": "65535:666",
    "no-export": "65535:65281",
    "no-advertise": "65535:65282",
    "local-AS": "65535:65283",
    "no-peer": "65535:65284",
    "internet": "0:0",
}


def _frr_communities(text: str) -> list[str]:
    return [_FRR_WELL_KNOWN.get(c, c) for c in text.split()]


# --------------------------------------------------------------------------- BIRD


class BirdRouter(Router):
    """BIRD 2: one process, ``bird -f -c conf -s ctl``; RIB read by parsing ``birdc``.

    The kernel protocol merges equal BGP paths into one ECMP route (``merge paths on
    limit 8``); next hops on the LAN are used directly (``gateway direct``) so iBGP needs
    no IGP table.
    """

    kind = "bird"
    #: BIRD programs the FIB within ~3 ms: poll often.
    poll_interval = 0.005

    @property
    def ctl(self) -> Path:
        return self.workdir / "bird.ctl"

    def render(self) -> str:
        c = self.config
        lines = [
            f"router id {c.router_id};",
            'log "' + str(self.workdir / "bird.log") + '" all;',
            "debug protocols { states };",
            "protocol device { scan time 10; }",
            # Connected routes only resolve multihop next hops; the kernel has them already.
            "protocol direct { ipv4; ipv6; }",
            "protocol kernel kernel4 { ipv4 { import none; export where source != RTS_DEVICE; "
            "}; merge paths on limit 8; }",
            "protocol kernel kernel6 { ipv6 { import none; export where source != RTS_DEVICE; "
            "}; merge paths on limit 8; }",
        ]
        if c.bfd is not None:
            lines += [
                "protocol bfd {",
                f'  interface "*" {{ min rx interval {c.bfd.receive_interval} ms; '
                f"min tx interval {c.bfd.transmit_interval} ms; "
                f"multiplier {c.bfd.detect_multiplier}; }};",
                "}",
            ]
        for fam in (4, 6):
            local = c.local_address4 if fam == 4 else c.local_address6
            chan = "ipv4" if fam == 4 else "ipv6"
            common = [f"  local {local} as {c.asn};", f"  hold time {c.hold_time};"]
            common.append(f"  keepalive time {c.keepalive_time};")
            if c.md5_password is not None:
                common.append(f'  password "{c.md5_password}";')
            if c.graceful_restart:
                common += ["  graceful restart on;", f"  graceful restart time {c.restart_time};"]
            if c.ebgp_multihop is not None:
                common.append(f"  multihop {c.ebgp_multihop};")
            elif c.ibgp:
                common.append("  direct;")  # BIRD treats iBGP as multihop unless told
            if c.ttl_security:
                common.append("  ttl security on;")
            if c.bfd is not None:
                common.append("  bfd graceful;" if c.bfd.graceful else "  bfd on;")
            if c.error_wait_time is not None:
                common.append("  error wait time {}, {};".format(*c.error_wait_time))
            if c.connect_retry is not None:
                common.append(f"  connect retry time {c.connect_retry};")
            # Next hops on the LAN are used as they are; a multihop session resolves them
            # through the connected routes (protocol direct) instead.
            gateway = "recursive" if c.ebgp_multihop is not None else "direct"
            imports = "import all;"
            if c.graceful_shutdown_policy:
                imports = (
                    "import filter { if (65535, 0) ~ bgp_community then bgp_local_pref = 0; "
                    "accept; };"
                )
            common.append(f"  {chan} {{ {imports} export none; gateway {gateway}; }};")
            peer = "external" if c.peer_asn is None else f"as {c.peer_asn}"
            if c.ibgp and c.peer_asn is not None:
                peer = "internal"
            for n, r in enumerate(x for x in c.neighbor_ranges if x.version == fam):
                lines += [f"protocol bgp nodes{fam}_{n} {{", f"  neighbor range {r} {peer};"]
                lines += [*common, f'  dynamic name "dyn{fam}_{n}_";', "}"]
            for n, a in enumerate(x for x in c.static_neighbors if x.version == fam):
                lines += [f"protocol bgp static{fam}_{n} {{", f"  neighbor {a} {peer};"]
                lines += [*common, "}"]
        return "\n".join(lines) + "\n"

    def write_config(self) -> None:
        (self.workdir / "bird.conf").write_text(self.render())

    def _spawn(self) -> None:
        self.ctl.unlink(missing_ok=True)
        argv = ["bird", "-f", "-c", str(self.workdir / "bird.conf"), "-s", str(self.ctl)]
        argv += ["-P", str(self.workdir / "bird.pid")]
        self._popen_logged(argv, "bird.stdout.log")
        self._wait_ready(lambda: self.birdc("show status"), "bird")

    def birdc(self, command: str) -> str:
        proc = self.netns.run(["birdc", "-s", str(self.ctl), command], check=False, timeout=10)
        if proc.returncode != 0 or "Unable to connect" in proc.stdout:
            raise RouterError(f"birdc {command!r}: {proc.stdout.strip()} {proc.stderr.strip()}")
        return proc.stdout

    def rib(self, family: int = 4) -> Rib:
        table = "master4" if family == 4 else "master6"
        return parse_bird_routes(self.birdc(f"show route all table {table}"))

    def neighbors(self) -> dict[IPAddress, str]:
        return parse_bird_protocols(self.birdc("show protocols all"))

    def changes_received(self) -> dict[IPAddress, int]:
        return parse_bird_changes(self.birdc("show protocols all"))

    def restarting_peers(self) -> set[IPAddress]:
        return parse_bird_restarting(self.birdc("show protocols all"))

    def sessions_since(self) -> dict[IPAddress, str]:
        # The protocols first: a session up after it has a later line, never an earlier.
        protocols = self.birdc("show protocols all")
        return bird_session_marks(protocols, (self.workdir / "bird.log").read_text())

    def bfd_sessions(self) -> dict[IPAddress, str]:
        return parse_bird_bfd(self.birdc("show bfd sessions"))


def parse_bird_bfd(text: str) -> dict[IPAddress, str]:
    """Peer address -> BFD state from ``birdc show bfd sessions`` (BIRD 2: a table per
    BFD protocol, one line per session: address, interface, state, since, ...)."""
    out: dict[IPAddress, str] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3:
            continue
        try:
            address = ipaddress.ip_address(words[0])
        except ValueError:
            continue
        out[address] = words[2].lower().replace("admindown", "admin-down")
    return out


_BIRD_ROUTE_START = re.compile(r"^(\S+)\s+unicast\s")
_BIRD_PATH_CONT = re.compile(r"^\s+unicast\s")


def parse_bird_routes(text: str) -> Rib:
    """Parse ``birdc show route all``: one block per path, attributes as BGP.* lines."""
    out: Rib = {}
    current: IPNetwork | None = None
    attrs: dict[str, str] | None = None

    def flush() -> None:
        if current is not None and attrs is not None and "BGP.next_hop" in attrs:
            out.setdefault(current, []).append(_bird_path(attrs))

    for line in text.splitlines():
        m = _BIRD_ROUTE_START.match(line)
        if m:
            flush()
            current = _net(m.group(1))
            attrs = {}
            continue
        if _BIRD_PATH_CONT.match(line):
            flush()
            attrs = {}
            continue
        stripped = line.strip()
        if attrs is not None and stripped.startswith("BGP.") and ":" in stripped:
            key, _, value = stripped.partition(":")
            attrs[key] = value.strip()
    flush()
    return out


def _bird_path(attrs: Mapping[str, str]) -> RibPath:
    comm = re.findall(r"\((\d+),\s*(\d+)\)", attrs.get("BGP.community", ""))
    large = re.findall(r"\((\d+),\s*(\d+),\s*(\d+)\)", attrs.get("BGP.large_community", ""))
    lp = attrs.get("BGP.local_pref")
    med = attrs.get("BGP.med")
    return RibPath(
        next_hop=ipaddress.ip_address(attrs["BGP.next_hop"].split()[0]),
        communities=tuple(sorted(f"{a}:{b}" for a, b in comm)),
        large_communities=tuple(sorted(f"{a}:{b}:{c}" for a, b, c in large)),
        local_pref=int(lp) if lp else None,
        med=int(med) if med else None,
        as_path=tuple(int(a) for a in attrs.get("BGP.as_path", "").split() if a.isdigit()),
    )


@dataclass(frozen=True, slots=True)
class _BirdProtocol:
    """One protocol of ``birdc show protocols all``: its header line's words (Name Proto
    Table State Since(date and/or time) Info), its neighbour address if it shows one,
    and its other lines, stripped."""

    header: tuple[str, ...]
    neighbor: IPAddress | None
    lines: tuple[str, ...]

    @property
    def bgp_name(self) -> str:
        """The protocol's name if it is a BGP protocol, else ""."""
        h = self.header
        return h[0] if len(h) > 5 and h[1] == "BGP" else ""


def _bird_protocols(text: str) -> Iterator[_BirdProtocol]:
    """The protocols of ``birdc show protocols all``, one block each (the one walk every
    parser below shares)."""
    header: tuple[str, ...] = ()
    neighbor: IPAddress | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "END"]:
        s = line.strip()
        if line and not line[0].isspace():
            if header:
                yield _BirdProtocol(header, neighbor, tuple(lines))
            header, neighbor, lines = tuple(line.split()), None, []
        elif s.startswith("Neighbor address:"):
            neighbor = ipaddress.ip_address(s.split(":", 1)[1].strip().split("%")[0])
        elif s:
            lines.append(s)


def parse_bird_protocols(text: str) -> dict[IPAddress, str]:
    """Neighbour address -> BGP state from ``birdc show protocols all``."""
    out: dict[IPAddress, str] = {}
    for p in _bird_protocols(text):
        states = [s.split(":", 1)[1].strip() for s in p.lines if s.startswith("BGP state:")]
        if p.neighbor is not None and states:
            out[p.neighbor] = states[0]
    return out


#: The line BIRD logs (``debug protocols { states }``) each time a protocol comes up; for
#: a BGP protocol, each time a session is established.
_BIRD_UP = re.compile(r"<TRACE> (\S+): State changed to up$")


def parse_bird_established(text: str) -> dict[IPAddress, str]:
    """Per Established neighbour, the name of its protocol in ``birdc show protocols
    all`` (a dynamic BGP protocol per neighbour of a range)."""
    return {
        p.neighbor: p.bgp_name
        for p in _bird_protocols(text)
        if p.neighbor is not None and p.bgp_name and p.header[-1] == "Established"
    }


def count_bird_ups(log: str) -> dict[str, int]:
    """Per protocol, how many times BIRD's log says it came up. BIRD's since time is no
    mark of a session: BIRD keeps it on its monotonic clock and converts it to wall-clock
    time at each call, so one untouched session read twice differed by up to 6 ms under
    load, and replacements came as little as 2 ms apart."""
    ups: dict[str, int] = {}
    for line in log.splitlines():
        m = _BIRD_UP.search(line)
        if m:
            ups[m.group(1)] = ups.get(m.group(1), 0) + 1
    return ups


def bird_session_marks(protocols: str, log: str) -> dict[IPAddress, str]:
    """Per Established neighbour, ``protocol#N``: the Nth time its protocol came up. The
    same mark later means the session was never reset in between."""
    ups = count_bird_ups(log)
    return {
        address: f"{name}#{ups.get(name, 0)}"
        for address, name in parse_bird_established(protocols).items()
    }


def parse_bird_restarting(text: str) -> set[IPAddress]:
    """Neighbours shown with ``Neighbor graceful restart active`` by ``birdc show
    protocols all``: BIRD keeps their routes as stale (session down within the restart
    time, or back and waiting for End-of-RIB)."""
    return {
        p.neighbor
        for p in _bird_protocols(text)
        if p.neighbor is not None and "Neighbor graceful restart active" in p.lines
    }


def parse_bird_changes(text: str) -> dict[IPAddress, int]:
    """Neighbour address -> received route updates + withdrawals (``show protocols all``)."""
    out: dict[IPAddress, int] = {}
    for p in _bird_protocols(text):
        if p.neighbor is None:
            continue
        out[p.neighbor] = 0
        for s in p.lines:
            if s.startswith(("Import updates:", "Import withdraws:")):
                received = s.split(":", 1)[1].split()[0]
                out[p.neighbor] += int(received) if received.isdigit() else 0
    return out


# --------------------------------------------------------------------------- GoBGP


class GoBGPRouter(Router):
    """GoBGP 3.x as a RIB-only peer (it cannot program the kernel through FRR 8.4 zebra)."""

    kind = "gobgp"
    poll_interval = 0.005
    programs_kernel = False

    def render(self) -> str:
        c = self.config
        if c.peer_asn is None:
            raise RouterError("gobgp needs a fixed peer_asn for dynamic neighbours")
        lines = [
            "[global.config]",
            f"  as = {c.asn}",
            f'  router-id = "{c.router_id}"',
            "  port = 179",
        ]
        for fam in (4, 6):
            afi = "ipv4-unicast" if fam == 4 else "ipv6-unicast"
            lines += [
                "[[peer-groups]]",
                "  [peer-groups.config]",
                f'    peer-group-name = "nodes{fam}"',
                f"    peer-as = {c.peer_asn}",
            ]
            if c.md5_password is not None:
                lines.append(f'    auth-password = "{c.md5_password}"')
            lines += [
                "  [peer-groups.timers.config]",
                f"    hold-time = {c.hold_time}",
                f"    keepalive-interval = {c.keepalive_time}",
                "  [peer-groups.transport.config]",
                "    passive-mode = true",
            ]
            if c.ebgp_multihop is not None:
                lines += [
                    "  [peer-groups.ebgp-multihop.config]",
                    "    enabled = true",
                    f"    multihop-ttl = {c.ebgp_multihop}",
                ]
            if c.graceful_restart:
                lines += [
                    "  [peer-groups.graceful-restart.config]",
                    "    enabled = true",
                    f"    restart-time = {c.restart_time}",
                ]
            lines += [
                "  [[peer-groups.afi-safis]]",
                "    [peer-groups.afi-safis.config]",
                f'      afi-safi-name = "{afi}"',
            ]
            if c.graceful_restart:
                lines += ["    [peer-groups.afi-safis.mp-graceful-restart.config]"]
                lines += ["      enabled = true"]
            for r in (x for x in c.neighbor_ranges if x.version == fam):
                lines += [
                    "[[dynamic-neighbors]]",
                    "  [dynamic-neighbors.config]",
                    f'    prefix = "{r}"',
                    f'    peer-group = "nodes{fam}"',
                ]
            for a in (x for x in c.static_neighbors if x.version == fam):
                lines += [
                    "[[neighbors]]",
                    "  [neighbors.config]",
                    f'    neighbor-address = "{a}"',
                    f'    peer-group = "nodes{fam}"',
                    "  [neighbors.transport.config]",
                    "    passive-mode = false",
                ]
        return "\n".join(lines) + "\n"

    def write_config(self) -> None:
        (self.workdir / "gobgpd.toml").write_text(self.render())

    def _spawn(self) -> None:
        argv = [
            "gobgpd",
            "-f",
            str(self.workdir / "gobgpd.toml"),
            "--api-hosts",
            f"127.0.0.1:{self.config.api_port}",
            "--log-level",
            "info",
        ]
        self._popen_logged(argv, "gobgpd.log")
        self._wait_ready(lambda: self.gobgp("global"), "gobgpd")

    def gobgp(self, *args: str) -> str:
        proc = self.netns.run(
            ["gobgp", "-u", "127.0.0.1", "-p", str(self.config.api_port), *args],
            check=False,
            timeout=10,
        )
        if proc.returncode != 0:
            raise RouterError(f"gobgp {' '.join(args)}: {proc.stderr.strip() or proc.stdout}")
        return proc.stdout

    def rib(self, family: int = 4) -> Rib:
        data = json.loads(self.gobgp("global", "rib", "-a", f"ipv{family}", "-j") or "{}")
        out: Rib = {}
        for prefix, paths in (data or {}).items():
            out[_net(prefix)] = [parse_gobgp_path(p) for p in paths]
        return out

    def neighbors(self) -> dict[IPAddress, str]:
        data = json.loads(self.gobgp("neighbor", "-j") or "[]")
        out: dict[IPAddress, str] = {}
        for peer in data or []:
            addr = peer.get("conf", {}).get("neighbor_address") or peer.get("state", {}).get(
                "neighbor_address"
            )
            if not addr:
                continue
            state = peer.get("state", {}).get("session_state", "?")
            out[ipaddress.ip_address(addr)] = _GOBGP_STATES.get(state, str(state))
        return out

    def changes_received(self) -> dict[IPAddress, int]:
        data = json.loads(self.gobgp("neighbor", "-j") or "[]")
        out: dict[IPAddress, int] = {}
        for peer in data or []:
            state = peer.get("state", {})
            addr = state.get("neighbor_address") or peer.get("conf", {}).get("neighbor_address")
            if addr:
                received = state.get("messages", {}).get("received", {})
                out[ipaddress.ip_address(addr)] = int(received.get("update", 0))
        return out

    def fib_weights(self, prefix: str | IPNetwork | IPAddress) -> dict[IPAddress, int]:
        raise RouterError("gobgp is a RIB-only peer here: it does not program the kernel")


#: GoBGP's session_state enum (numbers in JSON, names in some versions).
_GOBGP_STATES: dict[Any, str] = {
    0: "Unknown",
    1: "Idle",
    2: "Connect",
    3: "Active",
    4: "OpenSent",
    5: "OpenConfirm",
    6: "Established",
    "idle": "Idle",
    "connect": "Connect",
    "active": "Active",
    "opensent": "OpenSent",
    "openconfirm": "OpenConfirm",
    "established": "Established",
}


def parse_gobgp_path(p: Mapping[str, Any]) -> RibPath:
    nh: str | None = None
    comm: list[str] = []
    large: list[str] = []
    lp: int | None = None
    med: int | None = None
    as_path: list[int] = []
    for a in p.get("attrs", []):
        t = a.get("type")
        if t == 3 or (t == 14 and nh is None):  # MP_REACH carries IPv6 next hops
            nh = a.get("nexthop")
        elif t == 5:
            lp = a.get("value")
        elif t == 4:
            med = a.get("metric")
        elif t == 8:
            comm = [f"{c >> 16}:{c & 0xFFFF}" for c in a.get("communities", [])]
        elif t == 32:
            large = [f"{v['ASN']}:{v['LocalData1']}:{v['LocalData2']}" for v in a.get("value", [])]
        elif t == 2:
            for seg in a.get("as_paths", []):
                as_path += seg.get("asns", [])
    return RibPath(
        next_hop=ipaddress.ip_address(nh or "0.0.0.0"),
        communities=tuple(sorted(comm)),
        large_communities=tuple(sorted(large)),
        local_pref=lp,
        med=med,
        as_path=tuple(as_path),
        stale=bool(p.get("stale", False)),
    )


# --------------------------------------------------------------------------- sampling


class FibWatch:
    """Samples a router's kernel FIB for some prefixes from a thread, back to back (each
    read is one ``ip route`` call, a few ms), and keeps every sample that is not the
    expected next-hop set, with its CLOCK_MONOTONIC time. A context manager: sampling
    runs inside the ``with`` block."""

    def __init__(self, router: Router, want: Mapping[str, set[IPAddress]]) -> None:
        self.router = router
        self.want = dict(want)
        #: Rounds of reading every prefix.
        self.samples = 0
        self.deviations: list[tuple[float, str, set[IPAddress]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fib-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for prefix, hops in self.want.items():
                got = self.router.fib(prefix)
                if got != hops:
                    self.deviations.append((time.monotonic(), prefix, got))
            self.samples += 1

    def __enter__(self) -> FibWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --------------------------------------------------------------------------- factory

ROUTER_KINDS: dict[str, type[Router]] = {
    "frr": FRRRouter,
    "bird": BirdRouter,
    "gobgp": GoBGPRouter,
}


def router_config(**opts: Any) -> RouterConfig:
    """A RouterConfig with defaults, accepting strings for addresses and networks."""
    conv: dict[str, Any] = {}
    for key, value in opts.items():
        if key == "neighbor_ranges":
            value = tuple(_net(str(v)) for v in value)
        elif key == "static_neighbors":
            value = tuple(ipaddress.ip_address(str(v)) for v in value)
        elif key in ("router_id", "local_address4"):
            value = ipaddress.IPv4Address(str(value))
        elif key == "local_address6":
            value = ipaddress.IPv6Address(str(value))
        elif key == "bfd" and not isinstance(value, RouterBfd):
            value = RouterBfd() if value else None
        conv[key] = value
    return replace(RouterConfig(), **conv)


def make_router(kind: str, netns: Netns, workdir: Path | str, **opts: Any) -> Router:
    """Build (not start) a router of ``kind`` ("frr", "bird", "gobgp") with config ``opts``.

    ``bfd=True`` is BFD with the default timers (a :class:`RouterBfd` for others), FRR
    and BIRD only; ``rundir=`` (re-attach to a running FRR) is for FRR only.
    """
    rundir = opts.pop("rundir", None)
    cfg = router_config(**opts)
    workdir = Path(workdir)
    if kind == "frr":
        return FRRRouter(netns, cfg, workdir, rundir=Path(rundir) if rundir else None)
    if cfg.bfd is not None and kind != "bird":
        raise ValueError("bfd is only available with the frr and bird routers")
    try:
        cls = ROUTER_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown router kind {kind!r}; one of {sorted(ROUTER_KINDS)}") from None
    return cls(netns, cfg, workdir)


__all__ = [
    "ROUTER_KINDS",
    "BirdRouter",
    "FRRRouter",
    "FibWatch",
    "GoBGPRouter",
    "RibPath",
    "Router",
    "RouterBfd",
    "RouterConfig",
    "RouterError",
    "make_router",
    "router_config",
]
