"""The kube-bgpd lab: a ToR router, three nodes running the real speaker, a client.

Role: bring the whole system up in network namespaces so people can watch it work
(``kube-bgpd-lab up|down|status``) and the e2e tests can judge it with real traffic:

* router namespace: FRR (default) or BIRD, programming ECMP routes into its kernel FIB,
  with a static neighbour per node address and family (so a restarted router reconnects
  at once: the speakers' ExaBGP also listens);
* node1..N: ``kube-bgpd speaker`` (with its ExaBGP) and the keep-alive HTTP server
  (:mod:`kbgpd_lab.lab.httpserver`) answering with the node name on every service IP the lab
  put on the node's ``lo``;
* client namespace behind the router, where :mod:`kbgpd_lab.lab.client` runs.

The cluster, two ways: ``cluster="api"`` (``kube-bgpd-lab up`` and the demo) runs the API
simulator and the controller in the router namespace; the lab writes Services,
EndpointSlices and Nodes to the API, the controller allocates the IPs and the speakers
watch the API (``--kubeconfig``). There the configuration is custom resources too: the
lab's ``config.yaml`` is applied with ``kubectl apply`` into ``metallb-system``, and the
speakers and the controller read it live (``--config-from-cluster``); ``apply_config``
changes it the same way while everything runs. ``cluster="file"`` has the speakers read a
cluster dump (``--cluster-file``) the lab writes from :class:`LabService` declarations.

State: everything started is recorded (namespaces and PIDs in the topology's state file,
the rest in ``lab.json``) so ``lab down`` tears down a lab whose ``lab up`` process has
exited or crashed, and removes leftovers of crashed earlier runs; nothing outside the
lab's namespaces, its directory and FRR's run directory is touched.

Public interface: ``LabService``, ``Lab.up(...)``, ``Lab.attach(state_dir)``,
``lab.set_services(...)``, ``wait_service(svc)``, ``expected_nexthops(svc, family)``,
``start_speaker(i)``, ``stop_speaker(i, sig)``, ``wait_speaker_refreshed(i)``,
``set_on_sigterm(action)``, ``config_documents()`` + ``apply_config(docs)``,
``edit_config(edit)``, ``kubectl(*args)``, ``kubectl_bgpd(*args)``, ``speaker_pid(i)``,
``speaker_status(i)``, ``drain(i)``,
``client(target, connections=300)``, ``start_steady_client(target, *args)`` +
``finish_client(proc)``, ``status()``, ``down()``; ``lab_down(state_dir)``;
``fed_exabgp(topo, work)`` (a bare ExaBGP in a node, the benchmarks' baseline).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from bgpd.model import IPAddress
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.crds import crd_files
from kbgpd_lab.kit.processes import FedExaBGP
from kbgpd_lab.lab.apicluster import (
    API_PORT,
    ApiClient,
    ApiError,
    NetnsApiSimulator,
    endpoint_slices,
    namespace_object,
    node_object,
    service_object,
    services_table,
)
from kbgpd_lab.lab.client import Result
from kbgpd_lab.lab.healthserver import HEALTHZ_PORT, write_state
from kbgpd_lab.lab.netns import Netns, NetnsError, process_alive, process_start_time, stop_pid
from kbgpd_lab.lab.routers import (
    NODE_ASN,
    ROUTER_ASN,
    FRRRouter,
    Router,
    RouterBfd,
    RouterError,
    make_router,
)
from kbgpd_lab.lab.topology import (
    DEFAULT_STATE_DIR,
    Topology,
    cleanup_leftovers,
    remove_recorded,
)

#: Service IP pools the lab's speakers announce from.
POOL4 = ipaddress.IPv4Network("10.99.100.0/24")
POOL6 = ipaddress.IPv6Network("fd00:99:100::/120")
POOL4_RANGE = "10.99.100.1-10.99.100.250"
POOL6_RANGE = "fd00:99:100::1-fd00:99:100::fa"
LAB_FILE = "lab.json"
#: Where the API simulator listens: on the router, but not its BGP address.
API_ADDRESS = ipaddress.IPv4Address("172.31.250.2")
#: Each speaker's status listener, on its own namespace's loopback.
STATUS_ADDRESS = "127.0.0.1:7473"
#: A second speaker's in the same namespace (Lab.start_duplicate_speaker).
DUPLICATE_STATUS_ADDRESS = "127.0.0.1:7474"
#: Where the lab's configuration objects live (kube-bgpd's default, MetalLB's namespace).
CONFIG_NAMESPACE = "metallb-system"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
#: `kubectl apply` of the configuration objects, validated as a user's kubectl does (the
#: simulator serves /openapi and checks the shipped CRDs' schemas).
KUBECTL_APPLY = ("-n", CONFIG_NAMESPACE)
#: The BFDProfile the lab's BGPPeers name (Lab.up(bfd=..., speaker_bfd=True)).
BFD_PROFILE = "lab"
#: The Secret holding the BGPPeers' MD5 key (Lab.up(md5_password=...)).
MD5_OBJECT_NAME = "tor-md5"


class LabError(RuntimeError):
    """The lab could not be brought up, found, or queried."""


#: What asking a router or a namespace can raise when the lab is half gone.
_QUERY_ERRORS = (
    RouterError,
    NetnsError,
    ApiError,
    subprocess.TimeoutExpired,
    OSError,
    ValueError,
)


def kube_bgpd_argv() -> list[str]:
    """How to run our own CLI: the script next to this interpreter, else on PATH."""
    script = Path(sys.executable).with_name("kube-bgpd")
    if script.exists():
        return [str(script)]
    found = shutil.which("kube-bgpd")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from bgpd.cli import main; sys.exit(main())"]


def lab_argv() -> list[str]:
    """How to run ``kube-bgpd-lab`` (the API simulator's process) from this interpreter."""
    return [sys.executable, "-m", "kbgpd_lab"]


@dataclass(frozen=True, slots=True)
class LabService:
    """A LoadBalancer Service as the lab declares it: its IPs and where its pods run."""

    name: str
    ips: tuple[str, ...]
    pod_nodes: tuple[int, ...] = (1, 2)
    policy: str = "Cluster"
    namespace: str = "demo"
    port: int = 80
    #: spec.healthCheckNodePort of a Local Service (the API's allocation; in file mode
    #: the lab picks one).
    health_check_node_port: int | None = None


def node_addresses(topo: Topology, i: int) -> list[str]:
    return [str(topo.node_address(i, f)) for f in ((4, 6) if topo.ipv6 else (4,))]


def fed_exabgp(topo: Topology, work: Path, node: int = 1) -> FedExaBGP:
    """A bare ExaBGP in node N peering with the lab's router (the lab's ASNs, IPv4), fed
    commands by its caller: the baseline the benchmarks set kube-bgpd's driver against."""
    return FedExaBGP(
        work,
        router=str(topo.router_address(4)),
        local=str(topo.node_address(node)),
        my_asn=NODE_ASN,
        peer_asn=ROUTER_ASN,
        spawner=topo.nodes[node - 1],
    )


def families_of(ips: Iterable[str]) -> list[int]:
    return sorted({ipaddress.ip_address(ip).version for ip in ips})


def cluster_dump(
    services: Sequence[LabService],
    nodes: Mapping[str, Sequence[str]],
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """The ``kubectl get services,endpointslices,nodes -A -o yaml`` the speakers read;
    ``nodes`` maps node names to their InternalIPs, ``node_labels`` to extra labels."""
    labels = node_labels or {}
    items: list[dict[str, Any]] = [
        node_object(name, addrs, labels.get(name)) for name, addrs in nodes.items()
    ]
    for svc in services:
        fams = families_of(svc.ips)
        obj = service_object(svc.name, svc.namespace, policy=svc.policy, families=fams)
        obj["metadata"]["uid"] = f"uid-{svc.namespace}-{svc.name}"
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": ip} for ip in svc.ips]}}
        if svc.health_check_node_port is not None:
            obj["spec"]["healthCheckNodePort"] = svc.health_check_node_port
        items.append(obj)
        items += endpoint_slices(
            svc.name, svc.namespace, families=fams, pod_nodes=svc.pod_nodes, port=svc.port
        )
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)


#: healthCheckNodePorts the lab gives Local Services in file mode (the API allocates its own).
FILE_HEALTH_CHECK_PORTS = 32100

#: The lab speakers' dataPlaneCheck: quick rounds, so tests see a change within a second.
DATA_PLANE_CHECK: dict[str, Any] = {
    "nodeURL": f"http://127.0.0.1:{HEALTHZ_PORT}/healthz",
    "interval": "200ms",
    "timeout": "500ms",
    "failureThreshold": 2,
    "successThreshold": 2,
}


def speaker_config(
    topo: Topology,
    *,
    graceful_restart: bool,
    drain_window: float,
    hold_time: int,
    on_sigterm: str = "withdraw",
    link_bandwidth_per_endpoint: int | None = None,
    max_nodes: int | None = None,
    data_plane_check: bool = False,
    password: tuple[str, str] | None = None,
    vrf: str | None = None,
    dynamic_asn: str | None = None,
    bfd: RouterBfd | None = None,
    bfd_watchdog: float | None = None,
) -> str:
    """The speakers' config: the lab pools, one BGPPeer per family to the router (in the
    VRF ``vrf``; with ``dynamic_asn``, its dynamicASN instead of peerASN);
    ``password`` (text, "secret" or "inline"): the peers' MD5 key, named in the Secret
    MD5_OBJECT_NAME (the API) or written in the BGPPeer (a cluster file);
    ``link_bandwidth_per_endpoint`` is the advertisement's linkBandwidthPerEndpoint,
    ``max_nodes`` its fan-out cap (unset: every node announces); ``bfd``: a
    BFDProfile ``BFD_PROFILE`` with these timers that every BGPPeer names, and
    ``bfd_watchdog`` SpeakerConfig bfdWatchdog; with
    ``data_plane_check``, SpeakerConfig dataPlaneCheck against the node's kube-proxy
    stand-in (kbgpd_lab.lab.healthserver)."""
    advertisement: dict[str, Any] = {"ipAddressPools": ["lab"]}
    if link_bandwidth_per_endpoint is not None:
        advertisement["linkBandwidthPerEndpoint"] = link_bandwidth_per_endpoint
    if max_nodes is not None:
        advertisement["maxNodes"] = max_nodes
    spec: dict[str, Any] = {
        "drainWindow": f"{drain_window}s",
        "listen": True,
        "onSigterm": on_sigterm,
    }
    if data_plane_check:
        spec["dataPlaneCheck"] = DATA_PLANE_CHECK
    if bfd_watchdog is not None:
        spec["bfdWatchdog"] = f"{bfd_watchdog}s"
    # Ranges, not CIDRs: the first Service gets 10.99.100.1, not the network address.
    pools = [POOL4_RANGE] + ([POOL6_RANGE] if topo.ipv6 else [])
    docs: list[dict[str, Any]] = [
        manifests.pool("lab", pools),
        manifests.advertisement("lab", **advertisement),
        manifests.speaker_config(**spec),
    ]
    peer_options: dict[str, Any] = {}
    if vrf is not None:
        peer_options["vrf"] = vrf
    if dynamic_asn is not None:
        peer_options.update(peerASN=None, dynamicASN=dynamic_asn)
    if bfd is not None:
        docs.append(bfd_profile(bfd))
        peer_options["bfdProfile"] = BFD_PROFILE
    docs += [
        manifests.bgp_peer(
            f"tor-v{fam}",
            my_asn=NODE_ASN,
            peer_asn=ROUTER_ASN,
            address=str(topo.router_address(fam)),
            holdTime=f"{hold_time}s",
            enableGracefulRestart=graceful_restart,
            **_password_fields(password),
            **peer_options,
        )
        for fam in ((4, 6) if topo.ipv6 else (4,))
    ]
    return yaml.safe_dump_all(docs, sort_keys=False)


def bfd_profile(bfd: RouterBfd) -> dict[str, Any]:
    """The BFDProfile (MetalLB's kind) with the router's timers (RouterConfig.bfd)."""
    return manifests.config_object(
        manifests.METALLB_V1BETA1,
        "BFDProfile",
        BFD_PROFILE,
        {
            "receiveInterval": bfd.receive_interval,
            "transmitInterval": bfd.transmit_interval,
            "detectMultiplier": bfd.detect_multiplier,
        },
    )


def _password_fields(password: tuple[str, str] | None) -> dict[str, Any]:
    if password is None:
        return {}
    text, how = password
    if how == "inline":
        return {"password": text}
    return {"passwordSecret": {"name": MD5_OBJECT_NAME, "namespace": CONFIG_NAMESPACE}}


def md5_secret(password: str) -> dict[str, Any]:
    """The Secret the BGPPeers' passwordSecret names (MetalLB's type for it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": MD5_OBJECT_NAME, "namespace": CONFIG_NAMESPACE},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"password": password},
    }


def client_argv(target: str, *args: str) -> list[str]:
    """``python -m kbgpd_lab.lab.client --target TARGET ARGS`` (run it in the client namespace)."""
    return [sys.executable, "-m", "kbgpd_lab.lab.client", "--target", target, *args]


class HeldConnection:
    """One keep-alive connection from a namespace, held open while routes change
    (``python -m kbgpd_lab.lab.client --hold``): :meth:`ask` on it again, or on a fresh one.
    Always :meth:`close` it (``contextlib.closing``)."""

    def __init__(self, ns: Netns, target: str, *, port: int = 80, node: str | None = None):
        argv = client_argv(target, "--port", str(port), "--hold", *([node] if node else []))
        self._proc = ns.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        #: The node that answered the held connection first.
        self.node = self._line()
        if node is not None and self.node != node:
            self.close()
            raise LabError(f"no connection to {target} reached {node}: {self.node}")

    def _line(self) -> str:
        assert self._proc.stdout is not None
        return self._proc.stdout.readline().decode().strip()

    def ask(self, on: str = "again") -> str:
        """``again``: a request on the held connection; ``new``: on a fresh connection.
        Returns the answering node's name, or the error's type (``ConnectionResetError``)."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{on}\n".encode())
        self._proc.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop_pid(self._proc.pid, 1.0)


@dataclass(slots=True)
class _Recorded:
    """What lab.json holds (everything ``status`` and ``down`` need after a restart)."""

    prefix: str
    directory: str
    router_kind: str
    nodes: int
    ipv6: bool
    graceful_restart: bool
    #: The router's ECMP: "pinned" (stateful) or "stateless" (see topology.pin_ruleset).
    ecmp: str = "stateless"
    frr_rundir: str | None = None
    #: True when the lab made its directory itself (then `down` removes it).
    owns_directory: bool = False
    #: "file": the speakers read a cluster dump the lab writes; "api": the API simulator
    #: and the controller run in the router namespace, Services are written to the API.
    cluster: str = "file"
    controller: dict[str, int] = field(default_factory=dict)
    speakers: dict[str, dict[str, int]] = field(default_factory=dict)
    servers: dict[str, dict[str, int]] = field(default_factory=dict)
    services: list[dict[str, Any]] = field(default_factory=list)
    #: Extra labels per Node name (file mode), see Lab.set_node_labels.
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The kube-proxy stand-ins (kbgpd_lab.lab.healthserver), with dataPlaneCheck.
    health_servers: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Per node: what its stand-in is told to answer (Lab.set_proxy_health).
    proxy: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Second speakers in a node's namespace (Lab.start_duplicate_speaker), per node.
    duplicates: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Where the speakers' work directories are, when not in the lab's directory
    #: (speaker BFD: see Lab._work_dir); removed by down().
    work_root: str | None = None


class Lab:
    """A running lab. Use :meth:`up` (or :meth:`attach` to one that is already up)."""

    def __init__(self, topology: Topology, router: Router, rec: _Recorded, state_dir: Path) -> None:
        self.topology = topology
        self.router = router
        self._rec = rec
        self.state_dir = state_dir
        self.dir = Path(rec.directory)
        self.services: list[LabService] = [LabService(**_svc_args(s)) for s in rec.services]
        #: The in-process API simulator (tests' fault hooks), when this process runs it.
        self.apisim: NetnsApiSimulator | None = None
        self.api: ApiClient | None = (
            ApiClient(topology.router.name, f"http://{API_ADDRESS}:{API_PORT}")
            if rec.cluster == "api"
            else None
        )

    @property
    def kubeconfig(self) -> Path:
        """Reaches the API simulator from any lab namespace (172.31.250.2:6443)."""
        return self.dir / "kubeconfig"

    # -- bring-up -------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        *,
        router: str = "frr",
        nodes: int = 3,
        ipv6: bool = True,
        ecmp: str = "pinned",
        graceful_restart: bool = False,
        drain_window: float = 2.0,
        hold_time: int = 9,
        on_sigterm: str = "withdraw",
        max_nodes: int | None = None,
        state_dir: Path | str | None = None,
        directory: Path | str | None = None,
        prefix: str | None = None,
        services: Sequence[LabService] = (),
        wait: float = 30.0,
        cluster: str = "file",
        apisim_in_process: bool = True,
        link_bandwidth_per_endpoint: int | None = None,
        bestpath_bandwidth: str | None = None,
        data_plane_check: bool = False,
        md5_password: str | None = None,
        vrf: str | None = None,
        dynamic_asn: str | None = None,
        bfd: RouterBfd | None = None,
        speaker_bfd: bool = False,
        error_wait_time: tuple[int, int] | None = None,
        bfd_watchdog: float | None = None,
        connect_retry: int | None = None,
    ) -> Lab:
        """Build everything and wait until every session is up and the services routed.

        Refuses when a lab is already recorded in ``state_dir`` (run ``lab down``).
        On any failure, everything already started is torn down. ``cluster="api"`` runs
        the API simulator (in this process unless ``apisim_in_process=False``) and the
        controller in the router namespace; services then get their IPs from the pools.
        ``graceful_restart`` enables it on the router and the BGPPeers; ``on_sigterm`` is
        the speakers' SpeakerConfig onSigterm (``withdraw``, ``drain`` or ``retain``).
        ``link_bandwidth_per_endpoint``: the BGPAdvertisement's linkBandwidthPerEndpoint
        (weighted ECMP for Local); ``bestpath_bandwidth``: FRR's ``bgp bestpath
        bandwidth`` choice (None: FRR's default).
        ``max_nodes`` is the BGPAdvertisement's fan-out cap (maxNodes); with it, give no
        ``services`` here (they would be waited for on every node) and wait for the
        routes the cap chooses yourself.
        ``ecmp`` is the router's: ``pinned`` keeps each open connection on the node it
        started on (stateful, see topology.pin_ruleset), ``stateless`` is the FIB alone.
        ``data_plane_check`` runs a kube-proxy stand-in per node (healthy; see
        :meth:`set_proxy_health`) and has the speakers check it (SpeakerConfig
        dataPlaneCheck). ``md5_password`` protects every session with TCP MD5 (RFC 2385):
        the router has it, and the BGPPeers name it in a Secret (``passwordSecret``, in
        the API) or carry it (``password``, with a cluster file).
        ``vrf`` is the BGPPeers' vrf: the device their sessions are bound to (the lab
        builds no VRF device: the CI kernel has no VRF support, so ``"eth0"``, the node's
        link to the router, is what a test can bind to).
        ``dynamic_asn`` sets the BGPPeers' dynamicASN instead of peerASN; ``"internal"``
        also gives the router the nodes' ASN (iBGP).
        ``bfd`` gives the router BFD with every node at those timers; with
        ``speaker_bfd`` the BGPPeers also name a BFDProfile of the same timers
        (``bfdProfile``), so the speakers run BFD themselves. Without it the node side of
        BFD is the caller's (e.g. :class:`kbgpd_lab.lab.nodebfd.NodeBfdd`).
        ``error_wait_time``: BIRD's wait before a session that went down with an error
        (BFD down, hold timer expired) may come back (RouterConfig.error_wait_time;
        BIRD's default is 60 s at first), for tests that bring a node back.
        ``bfd_watchdog``: the speakers' SpeakerConfig bfdWatchdog (seconds).
        ``connect_retry``: the router's seconds between connection attempts to a node
        (RouterConfig.connect_retry), for tests whose nodes go down often enough for a
        speaker to hold its peer down (it then waits for the router to connect).
        """
        if cluster not in ("file", "api"):
            raise ValueError(f"cluster must be 'file' or 'api', not {cluster!r}")
        sdir = Path(state_dir) if state_dir is not None else DEFAULT_STATE_DIR
        sdir.mkdir(parents=True, exist_ok=True)
        if (sdir / LAB_FILE).exists():
            raise LabError(f"a lab is already up ({sdir / LAB_FILE}); run `kube-bgpd-lab down`")
        topo = Topology.create(prefix=prefix, nodes=nodes, ipv6=ipv6, state_dir=sdir, ecmp=ecmp)
        lab: Lab | None = None
        try:
            # dynamicASN internal: the router is in the nodes' AS.
            router_asn = NODE_ASN if dynamic_asn == "internal" else ROUTER_ASN
            base = Path(directory) if directory is not None else sdir / f"lab-{topo.prefix}"
            base.mkdir(parents=True, exist_ok=True)
            statics = [topo.node_address(i, f) for i in range(1, nodes + 1) for f in (4, 6)]
            statics = [a for a in statics if ipv6 or a.version == 4]
            rtr = make_router(
                router,
                topo.router,
                base / "router",
                neighbor_ranges=(),
                static_neighbors=tuple(statics),
                graceful_restart=graceful_restart,
                hold_time=hold_time,
                keepalive_time=max(1, hold_time // 3),
                # As docs/routers.md recommends: a draining node leaves the ECMP set.
                graceful_shutdown_policy=True,
                bestpath_bandwidth=bestpath_bandwidth,
                md5_password=md5_password,
                asn=router_asn,
                bfd=bfd,
                error_wait_time=error_wait_time,
                connect_retry=connect_retry,
            )
            rec = _Recorded(
                prefix=topo.prefix,
                directory=str(base),
                router_kind=router,
                nodes=nodes,
                ipv6=ipv6,
                ecmp=ecmp,
                graceful_restart=graceful_restart,
                frr_rundir=str(rtr.rundir) if isinstance(rtr, FRRRouter) else None,
                owns_directory=directory is None,
                cluster=cluster,
                work_root=_work_root() if speaker_bfd else None,
            )
            lab = cls(topo, rtr, rec, sdir)
            lab._save()
            rtr.start()
            (base / "config.yaml").write_text(
                speaker_config(
                    topo,
                    graceful_restart=graceful_restart,
                    drain_window=drain_window,
                    hold_time=hold_time,
                    on_sigterm=on_sigterm,
                    link_bandwidth_per_endpoint=link_bandwidth_per_endpoint,
                    max_nodes=max_nodes,
                    data_plane_check=data_plane_check,
                    password=None
                    if md5_password is None
                    else (md5_password, "secret" if cluster == "api" else "inline"),
                    vrf=vrf,
                    dynamic_asn=dynamic_asn,
                    bfd=bfd if speaker_bfd else None,
                    bfd_watchdog=bfd_watchdog,
                )
            )
            if cluster == "api":
                lab._start_api(in_process=apisim_in_process, md5_password=md5_password)
            lab.set_services(services, timeout=wait)
            for i in range(1, nodes + 1):
                lab._start_server(i)
                if data_plane_check:
                    lab._start_health_server(i)
                lab.start_speaker(i)
            lab.wait_sessions(timeout=wait)
            for svc in lab.services:
                lab.wait_service(svc, timeout=wait)
            return lab
        except BaseException:
            if lab is not None:
                lab.down()
            else:
                topo.destroy()
            raise

    @classmethod
    def attach(cls, state_dir: Path | str | None = None) -> Lab:
        """The lab recorded in ``state_dir`` (started by another process)."""
        sdir = Path(state_dir) if state_dir is not None else DEFAULT_STATE_DIR
        try:
            rec = _Recorded(**json.loads((sdir / LAB_FILE).read_text()))
        except FileNotFoundError:
            raise LabError(f"no lab is up (no {sdir / LAB_FILE})") from None
        topo = Topology.attach(sdir / f"{rec.prefix}.json")
        rundir = {"rundir": rec.frr_rundir} if rec.frr_rundir else {}
        rtr = make_router(rec.router_kind, topo.router, Path(rec.directory) / "router", **rundir)
        return cls(topo, rtr, rec, sdir)

    # -- services -------------------------------------------------------------------

    @property
    def dump_path(self) -> Path:
        return self.dir / "cluster.yaml"

    def set_services(self, services: Iterable[LabService], *, timeout: float = 30) -> None:
        """Declare the cluster's Services (the whole set).

        File mode: the speakers see the new dump within ~0.5 s. API mode: the Services and
        their EndpointSlices are written to the API (gone ones deleted), the controller
        allocates their IPs (``ips`` of a LabService are then requested IPs, or empty),
        and ``self.services`` holds the allocated IPs. Either way every service IP is put
        on every node's ``lo`` for the HTTP servers.
        """
        self.services = list(services)
        if self._rec.cluster == "api":
            self.services = self._apply_api_services(self.services, timeout)
        else:
            self.services = [
                replace(s, health_check_node_port=FILE_HEALTH_CHECK_PORTS + k)
                if s.policy == "Local" and s.health_check_node_port is None
                else s
                for k, s in enumerate(self.services)
            ]
        ips = {ip for svc in self.services for ip in svc.ips}
        for node in self.topology.nodes:
            have = _lo_addresses(node)
            for ip in ips - have:
                node.ip("addr", "add", f"{ip}/{32 if ':' not in ip else 128}", "dev", "lo")
        if self._rec.cluster == "file":
            nodes = {
                f"node{i}": node_addresses(self.topology, i)
                for i in range(1, len(self.topology.nodes) + 1)
            }
            self._write_dump(cluster_dump(self.services, nodes, self._rec.node_labels))
        self._rec.services = [asdict(s) for s in self.services]
        self._save()
        for i in self._rec.health_servers:
            self._write_proxy_state(int(i))

    def set_node_labels(self, i: int, labels: Mapping[str, str]) -> None:
        """Give node I these extra labels (replacing earlier ones) in the cluster dump the
        speakers read, e.g. node.kubernetes.io/exclude-from-external-load-balancers.
        File mode only: in API mode, patch the Node through the API."""
        if self._rec.cluster != "file":
            raise LabError("set_node_labels works on a file-mode lab only")
        self._rec.node_labels[f"node{i}"] = dict(labels)
        self.set_services(self.services)

    def _write_dump(self, text: str) -> None:
        tmp = self.dump_path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.dump_path)  # a new inode: the speakers' poll sees the change

    # -- the API side ---------------------------------------------------------------

    def _api(self) -> ApiClient:
        if self.api is None:
            raise LabError("this lab runs without the API simulator (cluster=file)")
        return self.api

    def _start_api(self, *, in_process: bool, md5_password: str | None = None) -> None:
        # An address of its own (a secondary on br0), so an API outage can be staged
        # without touching the router's BGP address.
        host = str(API_ADDRESS)
        self.topology.router.ip("addr", "add", f"{host}/24", "dev", "br0")
        if in_process:
            self.apisim = NetnsApiSimulator(self.topology.router.name, host=host, port=API_PORT)
            self.apisim.__enter__()
            self.apisim.write_kubeconfig(self.kubeconfig)
        else:
            argv = [
                *lab_argv(),
                "apiserver-sim",
                "--listen",
                f"{host}:{API_PORT}",
                "--kubeconfig-out",
                str(self.kubeconfig),
            ]
            self._spawn(self.topology.router, argv, self.dir / "apisim.log")
        deadline = time.monotonic() + 20
        while True:
            try:
                self._api().list("Namespace")
                break
            except ApiError as exc:
                if time.monotonic() > deadline:
                    raise LabError(
                        f"API simulator did not start: {exc} {_tail(self.dir / 'apisim.log')}"
                    ) from exc
                time.sleep(0.02)
        if not in_process:
            while not self.kubeconfig.exists():
                if time.monotonic() > deadline:
                    raise LabError(f"API simulator did not start: {_tail(self.dir / 'apisim.log')}")
                time.sleep(0.02)
        api = self._api()
        nodes = [
            node_object(f"node{i}", node_addresses(self.topology, i))
            for i in range(1, len(self.topology.nodes) + 1)
        ]
        api.apply([namespace_object("demo"), namespace_object(CONFIG_NAMESPACE), *nodes])
        # The shipped CRDs first, as an operator installs them (docs/configuration.md).
        for crd in crd_files():
            self.kubectl("apply", "-f", str(crd))
        # The configuration as custom resources, applied as a user does.
        if md5_password is not None:
            secret = self.dir / "md5-secret.yaml"
            secret.write_text(yaml.safe_dump(md5_secret(md5_password)))
            secret.chmod(0o600)
            self.kubectl("apply", *KUBECTL_APPLY, "-f", str(secret))
        self.kubectl("apply", *KUBECTL_APPLY, "-f", str(self.dir / "config.yaml"))
        argv = [
            *kube_bgpd_argv(),
            "controller",
            *self._config_args(),
            "--kubeconfig",
            str(self.kubeconfig),
            "--lease-namespace",
            "default",
        ]
        pid = self._spawn(self.topology.router, argv, self.dir / "controller.log")
        self._rec.controller = {"pid": pid, "start_time": process_start_time(pid) or 0}
        self._save()

    def _apply_api_services(self, services: list[LabService], timeout: float) -> list[LabService]:
        api = self._api()
        wanted = {(s.namespace, s.name) for s in services}
        for old in self.services_in_api():
            if (old["metadata"]["namespace"], old["metadata"]["name"]) not in wanted:
                api.delete("Service", old["metadata"]["name"], old["metadata"]["namespace"])
                for fam in (4, 6):
                    api.delete(
                        "EndpointSlice",
                        f"{old['metadata']['name']}-v{fam}",
                        old["metadata"]["namespace"],
                    )
        objects: list[dict[str, Any]] = []
        for svc in services:
            fams = families_of(svc.ips) if svc.ips else ([4, 6] if self.topology.ipv6 else [4])
            objects.append(
                service_object(
                    svc.name,
                    svc.namespace,
                    policy=svc.policy,
                    families=fams,
                    port=svc.port,
                    requested_ips=svc.ips,
                )
            )
            objects += endpoint_slices(
                svc.name, svc.namespace, families=fams, pod_nodes=svc.pod_nodes, port=svc.port
            )
        api.apply(objects)
        # Wait for the controller's allocation (status.loadBalancer.ingress).
        deadline = time.monotonic() + timeout
        while True:
            current = {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o
                for o in self.services_in_api()
            }
            out = []
            for svc in services:
                obj = current.get((svc.namespace, svc.name), {})
                ingress = obj.get("status", {}).get("loadBalancer", {}).get("ingress") or []
                ips = tuple(i["ip"] for i in ingress if i.get("ip"))
                hcnp = obj.get("spec", {}).get("healthCheckNodePort")
                fams = families_of(svc.ips) if svc.ips else ([4, 6] if self.topology.ipv6 else [4])
                if len(ips) < len(fams):
                    break
                out.append(replace(svc, ips=ips, health_check_node_port=hcnp))
            else:
                return out
            if time.monotonic() > deadline:
                raise LabError(
                    f"the controller did not allocate every Service's IPs: "
                    f"{_tail(self.dir / 'controller.log')}"
                )
            time.sleep(0.05)

    def api_outage(self, down: bool) -> None:
        """Make the API unreachable (its address leaves br0: packets to it are dropped,
        open connections hang) or reachable again; BGP sessions are not touched."""
        if down:
            self.topology.router.ip("addr", "del", f"{API_ADDRESS}/24", "dev", "br0")
        else:
            self.topology.router.ip("addr", "add", f"{API_ADDRESS}/24", "dev", "br0")

    def get_services_table(self) -> str:
        """What ``kubectl get svc -A`` shows (its columns, without AGE)."""
        return services_table(self._api().list("Service"))

    def services_in_api(self) -> list[dict[str, Any]]:
        items = self._api().list("Service")
        return [o for o in items if o.get("spec", {}).get("type") == "LoadBalancer"]

    def expected_nexthops(self, svc: LabService, family: int = 4) -> set[IPAddress]:
        """Where the router should send ``svc``'s traffic, by MetalLB's rules."""
        nodes = range(1, len(self.topology.nodes) + 1) if svc.policy == "Cluster" else svc.pod_nodes
        return {self.topology.node_address(i, family) for i in nodes}

    def wait_service(self, svc: LabService, timeout: float = 30) -> None:
        for ip in svc.ips:
            fam = ipaddress.ip_address(ip).version
            self.router.wait_fib(ip, self.expected_nexthops(svc, fam), timeout=timeout)

    def node_of(self, address: IPAddress) -> str:
        for i in range(1, len(self.topology.nodes) + 1):
            if address in (self.topology.node_address(i, 4), self.topology.node_address(i, 6)):
                return f"node{i}"
        return str(address)

    # -- processes ------------------------------------------------------------------

    def _node_dir(self, i: int) -> Path:
        d = self.dir / f"node{i}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _work_dir(self, i: int, which: str = "") -> Path:
        """Node I's speaker's work directory (``which``: "duplicate" for its second).

        With speaker BFD it sits in a directory of its own under /tmp (recorded, removed
        by down()): the speaker's bfdd runs as FRR's user and must reach it, which a
        test's temporary directory (mode 700) does not allow."""
        if self._rec.work_root:
            return Path(self._rec.work_root) / f"node{i}{'-' + which if which else ''}"
        return self._node_dir(i) / (f"{which}/work" if which else "work")

    def _spawn(self, ns: Netns, argv: list[str], log: Path) -> int:
        with log.open("ab") as out:
            # A session of its own: the lab outlives `lab up` and a Ctrl-C in its terminal.
            proc = ns.popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return proc.pid

    def _speaker_argv(
        self, config: list[str], node_name: str, work_dir: Path, status: str
    ) -> list[str]:
        """``kube-bgpd speaker`` reading ``config`` as ``node_name``, the cluster from the
        lab's API or dump."""
        source = (
            ["--kubeconfig", str(self.kubeconfig)]
            if self._rec.cluster == "api"
            else ["--cluster-file", str(self.dump_path)]
        )
        return [
            *kube_bgpd_argv(),
            "speaker",
            *config,
            "--node-name",
            node_name,
            *source,
            "--work-dir",
            str(work_dir),
            "--metrics-address",
            status,
        ]

    def start_speaker(self, i: int) -> int:
        """Start node I's ``kube-bgpd speaker`` (with its ExaBGP); returns its PID."""
        d = self._node_dir(i)
        argv = self._speaker_argv(
            self._config_args(), f"node{i}", self._work_dir(i), STATUS_ADDRESS
        )
        pid = self._spawn(self.topology.nodes[i - 1], argv, d / "speaker.log")
        self._rec.speakers[str(i)] = {"pid": pid, "start_time": process_start_time(pid) or 0}
        self._save()
        return pid

    def start_duplicate_speaker(self, i: int, node_name: str) -> int:
        """A second ``kube-bgpd speaker`` in node I's namespace claiming to be
        ``node_name``: its sessions open from node I's address, like a systemd unit and a
        pod on one host. It has its own work directory and status address, and reads a
        copy of the configuration that does not listen (node I's ExaBGP holds port 179).
        Returns its PID; stop_duplicate_speaker(i) or down() stops it."""
        d = self._node_dir(i) / "duplicate"
        d.mkdir(parents=True, exist_ok=True)
        docs = self.config_documents()
        for doc in docs:
            if doc.get("kind") == "SpeakerConfig":
                doc["spec"]["listen"] = False
        (d / "config.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        config = ["--config", str(d / "config.yaml")]
        argv = self._speaker_argv(
            config, node_name, self._work_dir(i, "duplicate"), DUPLICATE_STATUS_ADDRESS
        )
        pid = self._spawn(self.topology.nodes[i - 1], argv, d / "speaker.log")
        self._rec.duplicates[str(i)] = {"pid": pid, "start_time": process_start_time(pid) or 0}
        self._save()
        return pid

    def duplicate_log(self, i: int) -> Path:
        """The log of node I's second speaker (start_duplicate_speaker)."""
        return self._node_dir(i) / "duplicate" / "speaker.log"

    def stop_duplicate_speaker(self, i: int, *, timeout: float = 30) -> None:
        """SIGTERM node I's second speaker and wait for it to exit."""
        pid = _alive(self._rec.duplicates.get(str(i)))
        if pid is not None:
            stop_pid(pid, timeout)
            self.topology.nodes[i - 1].wait_child(pid, 1.0)
        self._rec.duplicates.pop(str(i), None)
        self._save()

    def speaker_pid(self, i: int) -> int | None:
        return _alive(self._rec.speakers.get(str(i)))

    def stop_speaker(
        self, i: int, sig: signal.Signals = signal.SIGTERM, *, timeout: float = 30
    ) -> int | None:
        """Signal node I's speaker and wait for it to exit; returns its exit status when
        it was our child (None otherwise). SIGTERM is the graceful stop (withdraw first)."""
        pid = self.speaker_pid(i)
        if pid is None:
            return None
        node = self.topology.nodes[i - 1]
        os.kill(pid, sig)
        status = node.wait_child(pid, timeout)
        if status is None:
            deadline = time.monotonic() + timeout
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            stop_pid(pid, 1.0)
        self._rec.speakers.pop(str(i), None)
        self._save()
        return status

    def wait_speaker_refreshed(self, i: int, timeout: float = 30) -> None:
        """Until node I's sessions are Established at the router and the router keeps
        nothing of it for graceful restart any more (its End-of-RIB arrived)."""
        peers = {ipaddress.ip_address(a) for a in node_addresses(self.topology, i)}
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = self.router.neighbors()
                up = all(states.get(p) == "Established" for p in peers)
                if up and not peers & self.router.restarting_peers():
                    return
            except _QUERY_ERRORS as exc:
                if time.monotonic() > deadline:
                    raise LabError(f"node{i}: router unreadable: {exc}") from exc
            if time.monotonic() > deadline:
                raise LabError(f"node{i}'s speaker did not refresh its routes in {timeout} s")
            time.sleep(0.02)

    def set_on_sigterm(self, action: str) -> None:
        """Change the speakers' SpeakerConfig ``onSigterm`` (withdraw, drain, retain);
        speakers started from now on read it, running ones have it in force on return
        (apply_config)."""
        docs = self.config_documents()
        for doc in docs:
            if doc.get("kind") == "SpeakerConfig":
                doc["spec"]["onSigterm"] = action
        self.apply_config(docs)

    def edit_config(self, edit: Callable[[list[dict[str, Any]]], None]) -> None:
        """Change the configuration documents with ``edit`` (in place) and put them in
        force on every running speaker (apply_config: kubectl apply, or the file and a
        SIGHUP)."""
        docs = self.config_documents()
        edit(docs)
        self.apply_config(docs)

    def _config_args(self) -> list[str]:
        """How the speakers and the controller read the configuration: the cluster's
        custom resources with the API, else the file."""
        if self._rec.cluster == "api":
            return ["--config-from-cluster", CONFIG_NAMESPACE]
        return ["--config", str(self.dir / "config.yaml")]

    def config_documents(self) -> list[dict[str, Any]]:
        """The lab's configuration documents (``config.yaml``) as they are now."""
        return list(yaml.safe_load_all((self.dir / "config.yaml").read_text()))

    def kubectl(self, *args: str, timeout: float = 60) -> str:
        """Run ``kubectl ARGS`` against the lab's API (in the router namespace, where
        the simulator listens); returns its output, LabError if it fails."""
        # A discovery cache of the lab's own: every lab's simulator listens on the same
        # address (in its own namespace), so kubectl's default cache (~/.kube/cache, keyed
        # by host and port) would hand one lab the resources another lab's API served.
        cache = str(self.dir / "kubectl-cache")
        argv = [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", cache]
        argv += ["--request-timeout=20s", *args]
        return self._run_kubectl(argv, args, timeout)

    def kubectl_bgpd(self, *args: str, timeout: float = 60) -> str:
        """Run ``kubectl bgpd ARGS`` against the lab's API as a user does: the real
        kubectl finds the plugin ``kubectl-bgpd`` on PATH (next to this interpreter, where
        the package installs it). kubectl refuses flags before a plugin's name, so the
        kubeconfig comes after ARGS."""
        argv = [KUBECTL, "bgpd", *args, "--kubeconfig", str(self.kubeconfig)]
        return self._run_kubectl(argv, ("bgpd", *args), timeout)

    def _run_kubectl(self, argv: list[str], args: Sequence[str], timeout: float) -> str:
        """Run ``argv`` in the router namespace (where the simulator listens)."""
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, "PATH": path}
        proc = self.topology.router.run(argv, check=False, timeout=timeout, env=env)
        if proc.returncode != 0:
            raise LabError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def apply_config(self, docs: Sequence[Mapping[str, Any]], *, timeout: float = 30) -> None:
        """Make ``docs`` the configuration and return once every running speaker has it
        in force: with the API, ``kubectl apply`` of the custom resources (the speakers
        follow the watch); with a cluster file, the file is rewritten and the speakers
        get a SIGHUP. Waits on each speaker's log line ``config.reloaded`` (so with the
        API, ``docs`` must change the parsed configuration, not only metadata)."""
        path = self.dir / "config.yaml"
        if list(docs) == self.config_documents():
            return  # nothing would change, and no speaker would say so
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
        tmp.replace(path)
        logs = {
            int(i): self._node_dir(int(i)) / "speaker.log"
            for i in list(self._rec.speakers)
            if self.speaker_pid(int(i)) is not None
        }
        before = {i: _count(log, "config.reloaded") for i, log in logs.items()}
        if self._rec.cluster == "api":
            self.kubectl("apply", *KUBECTL_APPLY, "-f", str(path))
        else:
            for i in logs:
                pid = self.speaker_pid(i)
                if pid is not None:
                    os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        for i, log in logs.items():
            while _count(log, "config.reloaded") <= before[i]:
                if time.monotonic() > deadline:
                    raise LabError(f"node{i}'s speaker did not take the new config: {_tail(log)}")
                time.sleep(0.02)

    def speaker_cli(self, i: int, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``kube-bgpd ARGS`` in node I's namespace against its speaker's control
        socket (in its work directory)."""
        argv = [*kube_bgpd_argv(), *args, "--work-dir", str(self._work_dir(i))]
        return self.topology.nodes[i - 1].run(argv, check=False, timeout=30)

    def speaker_status(self, i: int) -> dict[str, Any]:
        """Node I's speaker's ``/status`` document (``kube-bgpd status --json``)."""
        out = self.speaker_cli(i, "status", "--json")
        if out.returncode != 0:
            raise LabError(f"node{i} speaker status: {out.stderr.strip()}")
        doc: dict[str, Any] = json.loads(out.stdout)
        return doc

    def drain(self, i: int) -> None:
        """``kube-bgpd drain`` node I: GRACEFUL_SHUTDOWN, drain window, withdrawal."""
        out = self.speaker_cli(i, "drain")
        if out.returncode != 0:
            raise LabError(f"node{i} drain: {out.stderr.strip()}")

    def _start_server(self, i: int) -> None:
        argv = [sys.executable, "-m", "kbgpd_lab.lab.httpserver", "--name", f"node{i}"]
        self._rec.servers[str(i)] = self._start_ready(i, argv, "http.log", "HTTP server")

    def _start_health_server(self, i: int) -> None:
        """Node I's kube-proxy stand-in on 127.0.0.1:10256 of its namespace."""
        self._write_proxy_state(i)
        state = self._health_state(i)
        argv = [sys.executable, "-m", "kbgpd_lab.lab.healthserver", "--state", str(state)]
        self._rec.health_servers[str(i)] = self._start_ready(
            i, argv, "proxy-health.log", "kube-proxy stand-in"
        )
        self._save()

    def _health_state(self, i: int) -> Path:
        return self._node_dir(i) / "proxy-health.json"

    def set_proxy_health(
        self, i: int, *, healthy: bool = True, local_endpoints: Mapping[str, int] | None = None
    ) -> None:
        """What node I's kube-proxy stand-in answers from now on: /healthz 200 (healthy)
        or 503; a Local Service's healthCheckNodePort as many local endpoints as the lab
        put pods on node I, unless ``local_endpoints`` (namespace/name -> count) says
        otherwise (kube-proxy lagging behind the EndpointSlices)."""
        self._rec.proxy[str(i)] = {
            "healthy": healthy,
            "local_endpoints": dict(local_endpoints or {}),
        }
        self._save()
        self._write_proxy_state(i)

    def _write_proxy_state(self, i: int) -> None:
        said = self._rec.proxy.get(str(i), {})
        override: Mapping[str, int] = said.get("local_endpoints", {})
        services = {
            f"{s.namespace}/{s.name}": (
                s.health_check_node_port,
                override.get(f"{s.namespace}/{s.name}", s.pod_nodes.count(i)),
            )
            for s in self.services
            if s.policy == "Local" and s.health_check_node_port is not None
        }
        write_state(self._health_state(i), healthy=said.get("healthy", True), services=services)

    def _start_ready(self, i: int, argv: list[str], log_name: str, what: str) -> dict[str, int]:
        """Start a server in node I's namespace and wait for its ``ready`` line."""
        log = self._node_dir(i) / log_name
        log.unlink(missing_ok=True)
        pid = self._spawn(self.topology.nodes[i - 1], argv, log)
        entry = {"pid": pid, "start_time": process_start_time(pid) or 0}
        self._save()
        deadline = time.monotonic() + 10
        while b"ready" not in (log.read_bytes() if log.exists() else b""):
            if time.monotonic() > deadline or not process_alive(pid):
                raise LabError(f"node{i} {what} did not start: {log.read_text()[-500:]}")
            time.sleep(0.01)
        return entry

    def wait_sessions(self, timeout: float = 30) -> None:
        """Every node's session (per family) Established at the router."""
        per_node = 2 if self._rec.ipv6 else 1
        self.router.wait_established(len(self.topology.nodes) * per_node, timeout=timeout)

    # -- traffic --------------------------------------------------------------------

    def client(self, target: str, *, connections: int = 300, timeout: float = 3) -> Result:
        """``connections`` fresh connections from the client namespace; per-node counts."""
        client = self._client_ns()
        argv = client_argv(target, "--connections", str(connections), "--timeout", str(timeout))
        out = client.run(argv, timeout=120)
        return Result.from_json(out.stdout)

    def start_steady_client(self, target: str, *args: str) -> subprocess.Popen[bytes]:
        """A client that keeps connecting until :meth:`finish_client` (SIGTERM)."""
        client = self._client_ns()
        proc = client.popen(
            client_argv(target, "--steady", *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        proc.stderr.readline()  # "started": the signal handlers are in place
        return proc

    @staticmethod
    def mark_client(proc: subprocess.Popen[bytes]) -> None:
        """Mark now in a steady client: its Result counts answers per node from here on
        (``per_node_after_mark``), e.g. which nodes answered after a route changed."""
        proc.send_signal(signal.SIGUSR1)

    @staticmethod
    def finish_client(proc: subprocess.Popen[bytes], timeout: float = 30) -> Result:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise LabError(f"client failed: {err.decode(errors='replace')[-500:]}")
        return Result.from_json(out.decode())

    def hold_connection(self, target: str, node: str | None = None) -> HeldConnection:
        """A keep-alive connection from the client namespace (answered by ``node``)."""
        return HeldConnection(self._client_ns(), target, node=node)

    def _client_ns(self) -> Netns:
        if self.topology.client is None:
            raise LabError("this lab has no client namespace")
        return self.topology.client

    # -- status and teardown ------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Sessions, per-service routes (FIB next hops as node names) and processes."""
        try:
            sessions = {str(a): s for a, s in self.router.neighbors().items()}
        except _QUERY_ERRORS as exc:  # status shows a dead router; it never raises
            sessions = {"error": str(exc)}
        routes: dict[str, list[str]] = {}
        for svc in self.services:
            for ip in svc.ips:
                try:
                    routes[ip] = sorted(self.node_of(h) for h in self.router.fib(ip))
                except _QUERY_ERRORS as exc:
                    routes[ip] = [f"error: {exc}"]
        return {
            "prefix": self._rec.prefix,
            "directory": str(self.dir),
            "router": self._rec.router_kind,
            "ecmp": self._rec.ecmp,
            "cluster": self._rec.cluster,
            "controller": _alive(self._rec.controller),
            "namespaces": self.topology.namespaces(),
            "sessions": sessions,
            "services": [asdict(s) for s in self.services],
            "routes": routes,
            "speakers": {f"node{i}": self.speaker_pid(int(i)) for i in sorted(self._rec.speakers)},
            "http_servers": {
                f"node{i}": _alive(entry) for i, entry in sorted(self._rec.servers.items())
            },
        }

    def _save(self) -> None:
        path = self.state_dir / LAB_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self._rec), indent=1))
        tmp.replace(path)

    def down(self) -> None:
        """Stop everything, delete the namespaces, forget the lab. Idempotent."""
        for i in list(self._rec.duplicates):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                self.stop_duplicate_speaker(int(i), timeout=5)
        for i in list(self._rec.speakers):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                self.stop_speaker(int(i), signal.SIGKILL, timeout=5)
        with contextlib.suppress(*_QUERY_ERRORS):
            self.router.close()
        self.topology.destroy()
        if self.apisim is not None:
            self.apisim.__exit__(None, None, None)
            self.apisim = None
        _remove_dirs(self._rec)
        (self.state_dir / LAB_FILE).unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()


def lab_down(state_dir: Path | str | None = None) -> list[str]:
    """Tear down the recorded lab, then leftovers of crashed runs; names removed."""
    sdir = Path(state_dir) if state_dir is not None else DEFAULT_STATE_DIR
    removed: list[str] = []
    lab_file = sdir / LAB_FILE
    if lab_file.exists():
        try:
            rec = _Recorded(**json.loads(lab_file.read_text()))
        except (OSError, ValueError, TypeError):
            rec = None
        if rec is not None:
            servers = [*rec.servers.values(), *rec.health_servers.values()]
            speakers = [*rec.speakers.values(), *rec.duplicates.values()]
            for entry in [*speakers, *servers, rec.controller]:
                pid = _alive(entry)
                if pid is not None:
                    stop_pid(pid, 1.0)
            removed += remove_recorded(sdir / f"{rec.prefix}.json")
            _remove_dirs(rec)
        lab_file.unlink(missing_ok=True)
    removed += cleanup_leftovers(sdir, include_detached=True)
    return removed


def _work_root() -> str:
    """A directory for the speakers' work directories that FRR's user can traverse."""
    root = Path(tempfile.mkdtemp(prefix="kube-bgpd-lab-work-"))
    root.chmod(0o711)
    return str(root)


def _remove_dirs(rec: _Recorded) -> None:
    if rec.work_root:
        shutil.rmtree(rec.work_root, ignore_errors=True)
    if rec.frr_rundir:
        shutil.rmtree(rec.frr_rundir, ignore_errors=True)
    if rec.owns_directory:
        shutil.rmtree(rec.directory, ignore_errors=True)


def _alive(entry: dict[str, int] | None) -> int | None:
    """The PID of a recorded process if it still runs and is the same process."""
    if not entry:
        return None
    pid = int(entry["pid"])
    if process_alive(pid) and process_start_time(pid) == entry.get("start_time"):
        return pid
    return None


def _lo_addresses(ns: Netns) -> set[str]:
    out = json.loads(ns.ip("-j", "addr", "show", "dev", "lo").stdout or "[]")
    return {a["local"] for link in out for a in link.get("addr_info", [])}


def _count(path: Path, event: str) -> int:
    """How many log lines of ``path`` carry the event name ``event``."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.splitlines() if f" {event}" in line or f'"{event}"' in line)


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _svc_args(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "ips": tuple(d["ips"]), "pod_nodes": tuple(d["pod_nodes"])}
