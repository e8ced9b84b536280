"""deploy/kubernetes RBAC against what the code really asks the API server.

The real `kube-bgpd controller` and `kube-bgpd speaker` run as processes, with the
manifests' own arguments (the configuration read from the cluster), against the API
simulator with the shipped CRDs installed and MetalLB-style objects in metallb-system,
and are driven through every kind of write they make. Each request in the
simulator's log is turned into the attributes kube-apiserver's authorizer sees (verb,
API group, resource[/subresource], namespace, name; GET on a collection = list, with
watch=true = watch, on an object = get; POST = create, PUT = update, PATCH = patch,
DELETE = delete) and must be allowed by the Roles and ClusterRoles bound to that
component's ServiceAccount in the rendered manifests. The other way round, every verb
those rules grant must have been used: the manifests grant exactly what the code uses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import deploy_kit as kit
import pytest
from k8s_kit import free_port

from bgpd.config.status_crds import status_crds
from kbgpd_lab.apisim import ApiSimulatorThread, RequestRecord
from kbgpd_lab.kit import manifests
from kbgpd_lab.kit.bgp_peer import PassivePeer
from kbgpd_lab.kit.crds import product_crds
from kbgpd_lab.kit.waiting import wait_until

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

NAMESPACE = "kube-bgpd-system"
CONFIG_NAMESPACE = kit.CONFIG_NAMESPACE
#: The base with components/peer-passwords (a kustomization under tests/data).
PEER_PASSWORDS = kit.ROOT / "tests" / "data" / "kustomize" / "peer-passwords"


# --------------------------------------------------------------------------- authorizer


@dataclass(frozen=True, slots=True)
class Attributes:
    """What the RBAC authorizer decides on, for one resource request."""

    verb: str
    group: str
    resource: str  # "services" or "services/status"
    namespace: str | None
    name: str | None


def attributes(record: RequestRecord) -> Attributes | None:
    """kube-apiserver's RequestInfo for a resource request; None for discovery, /version
    and the like (non-resource URLs every authenticated user may read: system:discovery)."""
    parts = [p for p in record.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    query = parse_qs(record.query)
    watch = query.get("watch", ["false"])[0] in ("true", "1")
    if rest[0] == "watch":  # legacy /watch/ paths
        watch, rest = True, rest[1:]
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource += "/" + rest[2]
    if record.method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[record.method]
    return Attributes(verb, group, resource, namespace, name)


@dataclass(frozen=True, slots=True)
class Grant:
    """One rule of a bound role, and where it applies (None: cluster-wide)."""

    rule: dict[str, Any]
    namespace: str | None
    source: str

    def allows(self, a: Attributes) -> bool:
        r = self.rule
        if self.namespace is not None and a.namespace != self.namespace:
            return False
        if a.group not in r["apiGroups"] or a.resource not in r["resources"]:
            return False
        if a.verb not in r["verbs"]:
            return False
        names = r.get("resourceNames")
        return not names or a.name in names

    def triples(self) -> Iterator[tuple[str, str, str]]:
        for group in self.rule["apiGroups"]:
            for resource in self.rule["resources"]:
                for verb in self.rule["verbs"]:
                    yield group, resource, verb


def grants(docs: list[dict[str, Any]], account: str) -> list[Grant]:
    """The rules bound to ServiceAccount `account` of NAMESPACE."""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: list[Grant] = []
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        if subject not in b["subjects"]:
            continue
        where = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        ref = b["roleRef"]
        role_ns = where if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_ns, ref["name"])]
        for rule in role["rules"]:
            # Wildcards would make "exactly what the code uses" meaningless.
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{ref['name']}: wildcard in {field}"
            out.append(Grant(rule, where, f"{ref['kind']}/{ref['name']}"))
    return out


def check_exact(docs: list[dict[str, Any]], account: str, log: Iterable[RequestRecord]) -> None:
    """Every request allowed, every granted (group, resource, verb) used."""
    rules = grants(docs, account)
    assert rules, f"nothing is bound to {account}"
    seen = {a for r in log if (a := attributes(r)) is not None}
    denied = sorted(str(a) for a in seen if not any(g.allows(a) for g in rules))
    assert not denied, f"{account} would be forbidden:\n" + "\n".join(denied)
    unused = [
        (g.source, t)
        for g in rules
        for t in g.triples()
        if not any(g.allows(a) and (a.group, a.resource, a.verb) == t for a in seen)
    ]
    assert not unused, f"{account} is granted more than it uses: {unused}"


# --------------------------------------------------------------------------- the authorizer itself

PATHS = [
    pytest.param(
        "GET",
        "/api/v1/services",
        "limit=500",
        Attributes("list", "", "services", None, None),
        id="list-cluster-wide",
    ),
    pytest.param(
        "GET",
        "/apis/discovery.k8s.io/v1/endpointslices",
        "watch=true&resourceVersion=5&allowWatchBookmarks=true",
        Attributes("watch", "discovery.k8s.io", "endpointslices", None, None),
        id="watch",
    ),
    pytest.param(
        "GET",
        "/api/v1/watch/nodes",
        "",
        Attributes("watch", "", "nodes", None, None),
        id="legacy-watch-path",
    ),
    pytest.param(
        "PATCH",
        "/api/v1/namespaces/default/services/web/status",
        "",
        Attributes("patch", "", "services/status", "default", "web"),
        id="subresource",
    ),
    pytest.param(
        "GET",
        "/api/v1/namespaces",
        "",
        Attributes("list", "", "namespaces", None, None),
        id="list-namespaces",
    ),
    pytest.param(
        "GET",
        "/api/v1/namespaces/default",
        "",
        Attributes("get", "", "namespaces", None, "default"),
        id="get-namespace",
    ),
    pytest.param(
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
        "",
        Attributes("update", "coordination.k8s.io", "leases", "ns", "l"),
        id="update",
    ),
    pytest.param(
        "POST",
        "/api/v1/namespaces/ns/events",
        "",
        Attributes("create", "", "events", "ns", None),
        id="create",
    ),
    pytest.param("GET", "/apis/discovery.k8s.io/v1", "", None, id="discovery"),
    pytest.param("GET", "/version", "", None, id="version"),
]


@pytest.mark.parametrize(("method", "path", "query", "expected"), PATHS)
def test_request_attributes(
    method: str, path: str, query: str, expected: Attributes | None
) -> None:
    assert attributes(RequestRecord(method, path, query, 200)) == expected


def _docs_with(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": rules},
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "r"},
            "roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": NAMESPACE}],
        },
    ]


_LOG = [
    RequestRecord("GET", "/api/v1/services", "limit=500", 200),
    RequestRecord("PATCH", "/api/v1/namespaces/default/services/web/status", "", 200),
]
_EXACT = [
    {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["services/status"], "verbs": ["patch"]},
]


@pytest.mark.parametrize(
    ("rules", "error"),
    [
        pytest.param(_EXACT, None, id="exact"),
        pytest.param(_EXACT[:1], "would be forbidden", id="missing-subresource"),
        pytest.param(
            [*_EXACT, {"apiGroups": [""], "resources": ["services"], "verbs": ["delete"]}],
            "more than it uses",
            id="extra-verb",
        ),
        pytest.param(
            [{"apiGroups": [""], "resources": ["services", "services/status"], "verbs": ["*"]}],
            "wildcard",
            id="wildcard",
        ),
    ],
)
def test_check_exact(rules: list[dict[str, Any]], error: str | None) -> None:
    if error is None:
        check_exact(_docs_with(rules), "sa", _LOG)
    else:
        with pytest.raises(AssertionError, match=error):
            check_exact(_docs_with(rules), "sa", _LOG)


# --------------------------------------------------------------------------- real runs

CONFIG = f"""
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: services, namespace: {CONFIG_NAMESPACE}}}
spec:
  addresses: [10.99.100.0/28]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {{name: tor, namespace: {CONFIG_NAMESPACE}}}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 127.0.0.1
  peerPort: 1
  passwordSecret: {{name: tor-md5}}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {{name: services, namespace: {CONFIG_NAMESPACE}}}
spec:
  ipAddressPools: [services]
---
apiVersion: kube-bgpd.io/v1alpha1
kind: SpeakerConfig
metadata: {{name: speaker, namespace: {CONFIG_NAMESPACE}}}
spec:
  drainWindow: 1s
"""


def lb_service(name: str, ips: tuple[str, ...] = ()) -> dict[str, Any]:
    return manifests.service(
        name, policy="Cluster", protocol="TCP", selector={"app": name}, ips=ips
    )


def config(peer_port: int) -> str:
    return CONFIG.replace("peerPort: 1\n", f"peerPort: {peer_port}\n")


def seed(sim: ApiSimulatorThread, peer_port: int) -> None:
    """A cluster kube-bgpd is deployed in: its CRDs, and its configuration as objects."""
    for ns in ("default", NAMESPACE, CONFIG_NAMESPACE):
        sim.store.apply(manifests.namespace(ns))
    for crd in product_crds():
        sim.store.create(crd)
    for obj in kit.config_objects(config(peer_port)):
        sim.store.create(obj)


def wait_on_process(
    predicate: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    """Wait for the process under test (log in `log`) to show `what`; give up if it exits."""

    def exited() -> str | None:
        code = proc.poll()
        return None if code is None else f"the process exited ({code})"

    wait_until(predicate, within=30, what=what, poll=0.05, give_up=exited, details=log.read_text)


@pytest.fixture
def peer() -> Iterator[PassivePeer]:
    """The BGPPeer "tor": a passive peer on loopback with its MD5 key, so the session
    comes up and the speaker writes its status objects."""
    # MetalLB's BGPPeer schema allows ports up to 16384.
    with PassivePeer(port=free_port(below=16385), md5="secret") as p:
        yield p


@pytest.fixture
def sim(peer: PassivePeer) -> Iterator[ApiSimulatorThread]:
    with ApiSimulatorThread(bookmark_interval=0.5) as s:
        seed(s, peer.port)
        yield s


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, POD_NAMESPACE=NAMESPACE)
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"did not stop on SIGTERM:\n{log.read_text()}") from None
    assert code == 0, log.read_text()


def requests(sim: ApiSimulatorThread, method: str, suffix: str) -> list[RequestRecord]:
    return [r for r in sim.request_log if r.method == method and r.path.endswith(suffix)]


def test_controller_rbac_is_exactly_what_it_uses(sim: ApiSimulatorThread, tmp_path: Path) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    sim.store.create(lb_service("web"))
    log = tmp_path / "controller.log"
    pod_ip = kit.loopback_address()
    argv = kit.manifest_argv(kit.one(kit.rendered(), "Deployment"), POD_IP=pod_ip)
    # In a pod the credentials are the service account's; here the simulator's. Short
    # lease timings only make the renewals (PUT) happen within the test.
    argv += [
        f"--kubeconfig={kubeconfig}",
        "--lease-duration=3",
        "--renew-deadline=2",
        "--retry-period=0.5",
    ]
    proc = start(argv, log)
    try:
        # The liveness probe's target answers.
        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://{pod_ip}:7473/healthz", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_on_process(healthy, "the controller's /healthz", proc, log)

        # Allocation: status subresource, pool annotation, an IPAllocated Event.
        def assigned() -> bool:
            svc = sim.store.get("services", "web", "default")
            return bool(svc and svc.get("status", {}).get("loadBalancer", {}).get("ingress"))

        wait_on_process(assigned, "an IP for default/web", proc, log)
        wait_on_process(lambda: bool(requests(sim, "POST", "/events")), "an Event", proc, log)
        # Clearing the status makes it assign the same IP again: the identical
        # IPAllocated Event is folded into the first one (PATCH).
        svc = sim.store.get("services", "web", "default")
        assert svc is not None
        svc["status"] = {"loadBalancer": {}}
        sim.store.update_status(svc)
        wait_on_process(
            lambda: any(r.method == "PATCH" and "/events/" in r.path for r in sim.request_log),
            "an aggregated Event",
            proc,
            log,
        )
        # The leader reports the SpeakerConfig accepted (its status subresource).
        wait_on_process(
            lambda: bool(requests(sim, "PATCH", "/speakerconfigs/speaker/status")),
            "the SpeakerConfig's Accepted condition",
            proc,
            log,
        )
        # A renewal (PUT) happens every retry period.
        wait_on_process(
            lambda: bool(requests(sim, "PUT", "/leases/kube-bgpd-controller")),
            "a Lease renewal",
            proc,
            log,
        )
    finally:
        stop(proc, log)
    check_exact(kit.rendered(), "kube-bgpd-controller", sim.request_log)


def endpoint_slice(service: str, node: str, *, ready: bool) -> dict[str, Any]:
    endpoint = manifests.endpoint("10.0.0.1", node, ready=ready)
    return manifests.endpoint_slice(f"{service}-a", service, [endpoint])


def test_speaker_rbac_is_exactly_what_it_uses(
    sim: ApiSimulatorThread, peer: PassivePeer, tmp_path: Path
) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    sim.store.create(manifests.node("node1", addresses=["127.0.0.1"]))
    sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            # Where a passwordSecret without a namespace is looked up: the configuration's.
            "metadata": {"name": "tor-md5", "namespace": CONFIG_NAMESPACE},
            "type": "kubernetes.io/basic-auth",
            "data": {"password": "c2VjcmV0"},
        }
    )
    sim.store.create(lb_service("web", ips=("10.99.100.1",)))
    sim.store.create(endpoint_slice("web", "node1", ready=True))
    log = tmp_path / "speaker.log"
    # The base plus components/peer-passwords, as an overlay for this CONFIG would be.
    docs = kit.rendered(str(PEER_PASSWORDS))
    argv = kit.manifest_argv(kit.one(docs, "DaemonSet"), POD_IP=kit.loopback_address())
    # A pod has NODE_NAME from the downward API, in-cluster credentials and an emptyDir
    # at /run/kube-bgpd; here the same by flags.
    argv += [f"--kubeconfig={kubeconfig}", "--node-name=node1", f"--work-dir={tmp_path / 'run'}"]
    proc = start(argv, log)

    def posted(reason: str) -> Callable[[], bool]:
        def check() -> bool:
            return any(e.get("reason") == reason for e in sim.store.list("events", "default"))

        return check

    def service_status(peers: list[str]) -> Callable[[], bool]:
        def check() -> bool:
            objs = sim.store.list("servicebgpstatuses", NAMESPACE)
            return [o.get("status", {}).get("peers") for o in objs] == ([peers] if peers else [])

        return check

    try:
        # Starts announcing: nodeAssigned.
        wait_on_process(posted("nodeAssigned"), "a nodeAssigned Event", proc, log)
        # Its routes on the wire to tor: a ServiceBGPStatus (created, then its status
        # patched) and the node's BGPNodeStatus.
        wait_on_process(service_status(["tor"]), "the ServiceBGPStatus of web", proc, log)
        wait_on_process(
            lambda: bool(
                (o := sim.store.get("bgpnodestatuses", "node1", NAMESPACE))
                and o.get("status", {}).get("summary", {}).get("sessionsUp") == 1
            ),
            "the BGPNodeStatus of node1",
            proc,
            log,
        )
        # Stops (endpoint not ready) and starts again: the second, identical
        # nodeAssigned is folded into the first (PATCH). The ServiceBGPStatus goes.
        sim.store.apply(endpoint_slice("web", "node1", ready=False))
        wait_on_process(posted("nodeUnassigned"), "a nodeUnassigned Event", proc, log)
        wait_on_process(service_status([]), "the ServiceBGPStatus deleted", proc, log)
        sim.store.apply(endpoint_slice("web", "node1", ready=True))
        wait_on_process(
            lambda: any(r.method == "PATCH" and "/events/" in r.path for r in sim.request_log),
            "an aggregated Event",
            proc,
            log,
        )
        secret_reads = [r.path for r in sim.request_log if "/secrets/" in r.path]
        assert secret_reads, "the passwordSecret was never read"
        assert set(secret_reads) == {f"/api/v1/namespaces/{CONFIG_NAMESPACE}/secrets/tor-md5"}
        # An invalid configuration object (a pool overlapping the one in force) gets a
        # Warning Event, in the configuration's namespace.
        clash = kit.config_objects(CONFIG)[0]  # the pool: the peer's port does not matter
        clash["metadata"]["name"] = "clash"
        sim.store.create(clash)
        wait_on_process(
            lambda: any(
                e.get("reason") == "InvalidConfiguration"
                for e in sim.store.list("events", CONFIG_NAMESPACE)
            ),
            "a Warning Event on the invalid pool",
            proc,
            log,
        )
    finally:
        stop(proc, log)
    check_exact(docs, "kube-bgpd-speaker", sim.request_log)
    # Narrowed to the Secrets the config names (resourceNames): only tor-md5 is readable.
    role = kit.one(docs, "Role", "kube-bgpd-speaker-secrets")
    assert [r.get("resourceNames") for r in role["rules"]] == [["tor-md5"]]


def test_base_speaker_reads_no_secret() -> None:
    """The base config names no passwordSecret, so the base grants no Secret at all."""
    for grant in grants(kit.rendered(), "kube-bgpd-speaker"):
        assert "secrets" not in grant.rule["resources"], grant.source


# ---------------------------------------------------------------- config from the cluster


def test_workloads_read_their_config_from_the_cluster() -> None:
    """The exactness tests above run the manifests' arguments, so they are the ones
    reading the custom resources; say so, so a return to a mounted file is noticed."""
    for workload in ("DaemonSet", "Deployment"):
        args = kit.container(kit.one(kit.rendered(), workload))["args"]
        assert f"--config-from-cluster={CONFIG_NAMESPACE}" in args, workload
        assert not [a for a in args if a.startswith("--config=")], workload


@pytest.mark.parametrize(
    ("account", "writes"),
    [
        pytest.param(
            "kube-bgpd-speaker",
            {
                ("metallb.io", "servicebgpstatuses", "list"),
                ("metallb.io", "servicebgpstatuses", "create"),
                ("metallb.io", "servicebgpstatuses", "delete"),
                ("metallb.io", "servicebgpstatuses/status", "patch"),
                ("kube-bgpd.io", "bgpnodestatuses", "create"),
                ("kube-bgpd.io", "bgpnodestatuses/status", "patch"),
            },
            id="speaker",
        ),
        pytest.param(
            "kube-bgpd-controller",
            {("kube-bgpd.io", "speakerconfigs/status", "patch")},
            id="controller",
        ),
    ],
)
def test_base_reads_every_crd(account: str, writes: set[tuple[str, str, str]]) -> None:
    """The base grants list and watch on every configuration resource
    deploy/kubernetes/crds defines, in any namespace (`--config-from-cluster NAMESPACE`
    may name another), and nothing else on those groups but `writes` (the status kinds
    the speaker writes, in its own namespace)."""
    docs = kit.rendered()
    status_kinds = {d["metadata"]["name"] for d in status_crds()}
    crds = [
        d
        for d in docs
        if d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] not in status_kinds
    ]
    assert crds
    rules = grants(docs, account)
    reads = {
        (d["spec"]["group"], d["spec"]["names"]["plural"], verb)
        for d in crds
        for verb in ("list", "watch")
    }
    for group, resource, verb in reads:
        assert any(g.allows(Attributes(verb, group, resource, "any", None)) for g in rules)
    groups = {d["spec"]["group"] for d in crds}
    granted = {t for g in rules for t in g.triples() if t[0] in groups}
    assert granted == reads | writes
