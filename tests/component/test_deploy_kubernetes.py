"""deploy/kubernetes rendered by the real `kubectl kustomize` and checked object by object.

Schemas: `kubernetes-validate --strict` (offline, bundled OpenAPI schemas) on every
rendered object. Semantics no schema sees: selectors match template labels, pods name
ServiceAccounts that exist and are bound, both workloads read the configuration objects
of metallb-system, each kustomization's example objects live there and pass kube-bgpd's
own loader, the config-file component mounts the generated ConfigMap instead, the
speaker's listener, probes and grace period agree with its config, capabilities follow
SpeakerConfig.listen and BGPPeer vrf, the image's user is the pods' user. The preStop
hook is run for real against a running speaker. RBAC is checked against the code's
actual requests in test_deploy_rbac.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deploy_kit as kit
import pytest
import yaml

from bgpd.config import load_config_or_raise

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

ROOT = kit.ROOT
DEPLOY = kit.DEPLOY
VALIDATE = kit.VALIDATE
KUBE_BGPD = kit.KUBE_BGPD
NAMESPACE = "kube-bgpd-system"
CONFIG_PATH = kit.CONFIG_PATH
#: The speaker's bound on the final withdraw (bgpd.speaker: runtime.stop(within=10.0)).
WITHDRAW_BOUND = 10.0

KUSTOMIZATIONS = [
    pytest.param("base", id="base"),
    pytest.param("overlays/example", id="overlay-example"),
    pytest.param("overlays/retain", id="overlay-retain"),
]
#: The configuration objects applied with each kustomization (kubectl apply -f).
EXAMPLE_CONFIG = {
    "base": kit.EXAMPLE_CONFIG,
    "overlays/example": DEPLOY / "overlays" / "example" / "config.yaml",
    "overlays/retain": DEPLOY / "overlays" / "retain" / "config.yaml",
}

#: The kinds of the manifests that live in no namespace.
CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition")

rendered = kit.rendered
one = kit.one
container = kit.container


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("DaemonSet", "Deployment")]


def mounted_config(docs: list[dict[str, Any]], workload: dict[str, Any]) -> str:
    """The text the pod sees at CONFIG_PATH: through its volume, from the ConfigMap."""
    c = container(workload)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    for name, path in mounts.items():
        if CONFIG_PATH.startswith(path.rstrip("/") + "/"):
            key = CONFIG_PATH[len(path.rstrip("/")) + 1 :]
            cm = one(docs, "ConfigMap", volumes[name]["configMap"]["name"])
            return str(cm["data"][key])
    raise AssertionError(f"{workload['metadata']['name']}: nothing mounted at {CONFIG_PATH}")


def speaker_config(path: str) -> Any:
    """The Config of the objects applied with kustomization `path`."""
    config, _warnings = load_config_or_raise([str(EXAMPLE_CONFIG[path])])
    return config


# --------------------------------------------------------------------------- schemas


def validate_strictly(
    docs: list[dict[str, Any]], tmp_path: Path, version: str = "1.32.0"
) -> subprocess.CompletedProcess[str]:
    """`kubernetes-validate --strict` on these objects."""
    target = tmp_path / "rendered.yaml"
    target.write_text(yaml.safe_dump_all(docs))
    return subprocess.run(
        [VALIDATE, "--strict", "--kubernetes-version", version, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", ["1.29.0", "1.32.0", "1.37.0"])
def test_every_object_validates_strictly(path: str, version: str, tmp_path: Path) -> None:
    docs = rendered(path)
    result = validate_strictly(docs, tmp_path, version)
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.findall(r"passed for resource (\S+)", result.stdout + result.stderr)
    expected = {f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs}
    assert set(passed) == expected


def test_strict_validation_catches_a_misspelt_field(tmp_path: Path) -> None:
    """The schema check is not vacuous: a typo that `kubectl apply` would drop fails."""
    docs = rendered("base")
    ds = json.loads(json.dumps(one(docs, "DaemonSet", "kube-bgpd-speaker")))
    spec = ds["spec"]["template"]["spec"]
    spec["serviceAcountName"] = spec.pop("serviceAccountName")
    result = validate_strictly([ds], tmp_path)
    assert result.returncode != 0
    assert "serviceAcountName" in result.stdout + result.stderr


# --------------------------------------------------------------------------- semantics


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_everything_lives_in_one_namespace(path: str) -> None:
    docs = rendered(path)
    one(docs, "Namespace", NAMESPACE)
    for d in docs:
        if d["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in d["metadata"]
        else:
            assert d["metadata"]["namespace"] == NAMESPACE, d["metadata"]["name"]


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_selectors_match_template_labels(path: str) -> None:
    docs = rendered(path)
    assert {w["kind"] for w in workloads(docs)} == {"DaemonSet", "Deployment"}
    selectors = []
    for w in workloads(docs):
        selector = w["spec"]["selector"]
        assert set(selector) == {"matchLabels"}, "only matchLabels are used"
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert selector["matchLabels"].items() <= labels.items(), w["metadata"]["name"]
        selectors.append(selector["matchLabels"])
    # Two workloads must not select each other's pods.
    for a in selectors:
        for b in selectors:
            if a is not b:
                assert not a.items() <= b.items()
    # The controller's anti-affinity names its own pods.
    deploy = one(docs, "Deployment", "kube-bgpd-controller")
    terms = deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    for term in terms:
        sel = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        assert sel == deploy["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_pods_use_their_own_bound_service_account(path: str) -> None:
    docs = rendered(path)
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    bound: set[str] = set()
    for b in docs:
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            role = one(docs, b["roleRef"]["kind"], b["roleRef"]["name"])
            assert role["rules"], role["metadata"]["name"]
            for s in b["subjects"]:
                assert s["kind"] == "ServiceAccount"
                assert s["namespace"] == NAMESPACE
                bound.add(s["name"])
    used = [w["spec"]["template"]["spec"]["serviceAccountName"] for w in workloads(docs)]
    assert len(set(used)) == len(used), "speaker and controller share an identity"
    assert set(used) == accounts == bound


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_both_components_read_the_example_objects(path: str) -> None:
    """Speaker and controller read the configuration objects of one namespace, nothing
    is mounted in its place, and the objects applied with this kustomization are in that
    namespace and pass `kube-bgpd validate`."""
    docs = rendered(path)
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    for w in workloads(docs):
        args = container(w)["args"]
        assert f"--config-from-cluster={kit.CONFIG_NAMESPACE}" in args
        assert not [a for a in args if a.startswith("--config=")]
        volumes = w["spec"]["template"]["spec"]["volumes"]
        assert not [v for v in volumes if "configMap" in v]
    objects = kit.config_objects(EXAMPLE_CONFIG[path].read_text())
    assert objects
    assert {o["metadata"].get("namespace") for o in objects} == {kit.CONFIG_NAMESPACE}
    result = subprocess.run(
        [KUBE_BGPD, "validate", str(EXAMPLE_CONFIG[path])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("valid:")


def test_example_namespace_is_the_one_read() -> None:
    ns = yaml.safe_load((DEPLOY / "examples" / "namespace.yaml").read_text())
    assert ns["kind"] == "Namespace"
    assert ns["metadata"]["name"] == kit.CONFIG_NAMESPACE


def test_config_file_component_mounts_the_file(tmp_path: Path) -> None:
    """components/config-file: both components read the same mounted file (`--config`),
    the overlay's (here the example objects, which load as a file as they are), and the
    pods are otherwise the base's."""
    docs = kit.overlay(tmp_path / "overlay", ["config-file"], config=kit.EXAMPLE_CONFIG)
    base = rendered("base")
    texts = set()
    for w in workloads(docs):
        args = container(w)["args"]
        assert f"--config={CONFIG_PATH}" in args
        assert not [a for a in args if a.startswith("--config-from-cluster")]
        texts.add(mounted_config(docs, w))
        shipped = one(base, w["kind"], w["metadata"]["name"])
        assert container(w)["securityContext"] == container(shipped)["securityContext"]
    assert len(texts) == 1, "speaker and controller must read the same config"
    target = tmp_path / "config.yaml"
    target.write_text(texts.pop())
    result = subprocess.run(
        [KUBE_BGPD, "validate", str(target)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("valid:")
    assert load_config_or_raise([str(target)])[0] == speaker_config("base")


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_speaker_pod(path: str) -> None:
    docs = rendered(path)
    config = speaker_config(path)
    ds = one(docs, "DaemonSet", "kube-bgpd-speaker")
    pod = ds["spec"]["template"]["spec"]
    c = container(ds)
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert c["args"][0] == "speaker"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env["NODE_NAME"] == "spec.nodeName"
    assert env["POD_IP"] == "status.podIP"
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    # The listener is on the pod IP, at the port the probes use.
    (address,) = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--metrics-address=")]
    host, _, port = address.rpartition(":")
    assert host == "$(POD_IP)"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == int(port)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # Read-only root; ExaBGP's work dir (from the config) is a writable emptyDir.
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    # The work directory is created by the speaker inside the emptyDir (whose own root is
    # world-writable, which the speaker refuses).
    assert "emptyDir" in volumes[mounts[str(config.speaker.work_dir.parent)]]
    # Long enough to drain for the whole window and then withdraw.
    assert pod["terminationGracePeriodSeconds"] >= config.speaker.drain_window + WITHDRAW_BOUND + 5
    if str(config.speaker.on_sigterm) == "retain":
        # A preStop drain would make every stop withdraw: retain needs none.
        assert "lifecycle" not in c
        return
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    # Through the control socket in the work directory the speaker uses.
    assert pre_stop == ["kube-bgpd", "drain", f"--work-dir={config.speaker.work_dir}"]


def capabilities_for(config: Any) -> set[str]:
    """What the speaker needs beyond none: binding 179 for SpeakerConfig listen, binding
    a socket to a VRF device for a BGPPeer vrf, starting bfdd for a BGPPeer bfdProfile."""
    needed = {"NET_BIND_SERVICE"} if config.speaker.listen else set()
    if any(p.vrf for p in config.peers):
        needed.add("NET_RAW")
    if any(p.bfd_profile for p in config.peers):
        needed |= BFDD_CAPABILITIES
    return needed


#: What FRR's bfdd insists on at start (bgpd.bfd.runtime, measured).
BFDD_CAPABILITIES = {"SETUID", "SETGID", "NET_RAW", "NET_BIND_SERVICE", "SYS_ADMIN"}


def check_capabilities(ds: dict[str, Any], needed: set[str], *, listen: bool = False) -> None:
    pod_sc = ds["spec"]["template"]["spec"]["securityContext"]
    caps = container(ds)["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    assert sorted(caps.get("add") or []) == sorted(needed)
    if needed:
        # Kubernetes gives capabilities only to uid 0 (no ambient set).
        assert pod_sc["runAsUser"] == 0
        assert pod_sc["runAsNonRoot"] is False
    else:
        assert pod_sc["runAsNonRoot"] is True
        assert pod_sc["runAsUser"] != 0
    bgp = {"name": "bgp", "containerPort": 179, "protocol": "TCP"}
    # Port 179 only for listen (bfdd's NET_BIND_SERVICE is for its privilege code).
    assert (bgp in container(ds)["ports"]) == listen


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_capabilities_follow_the_config(path: str) -> None:
    """No capability at all unless ExaBGP must bind port 179 (SpeakerConfig listen) or
    a VRF device (BGPPeer vrf)."""
    ds = one(rendered(path), "DaemonSet", "kube-bgpd-speaker")
    config = speaker_config(path)
    check_capabilities(ds, capabilities_for(config), listen=bool(config.speaker.listen))


VRF_PEER = f"""
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: tor-vrf
  namespace: {kit.CONFIG_NAMESPACE}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 172.31.251.1
  vrf: red
"""


@pytest.mark.parametrize(
    ("components", "listen"),
    [
        pytest.param(["vrf"], False, id="vrf"),
        pytest.param(["listen-bgp-port", "vrf"], True, id="vrf-and-listen"),
    ],
)
def test_vrf_component_adds_net_raw(components: list[str], listen: bool, tmp_path: Path) -> None:
    """components/vrf gives the speaker what a BGPPeer vrf needs (NET_RAW, as root), alone
    and together with listen-bgp-port; the result passes the strict schema check."""
    docs = kit.overlay(tmp_path / "overlay", components)
    config = tmp_path / "config.yaml"
    example = kit.EXAMPLE_CONFIG.read_text()
    if listen:
        example = example.replace(
            "spec:\n  # The DaemonSet", "spec:\n  listen: true\n  # The DaemonSet"
        )
    config.write_text(example + "---" + VRF_PEER)
    loaded, _warnings = load_config_or_raise([str(config)])
    assert bool(loaded.speaker.listen) == listen
    check_capabilities(
        one(docs, "DaemonSet", "kube-bgpd-speaker"), capabilities_for(loaded), listen=listen
    )
    result = validate_strictly(docs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


BFD_PEER = """
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 300, transmitInterval: 300}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-bfd, namespace: metallb-system}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 172.31.251.1
  bfdProfile: fast
"""


def test_bfd_component_adds_what_bfdd_needs(tmp_path: Path) -> None:
    """components/bfd gives the speaker what bfdd insists on (as root), no port 179; the
    result passes the strict schema check."""
    docs = kit.overlay(tmp_path / "overlay", ["bfd"])
    config = tmp_path / "config.yaml"
    config.write_text(kit.EXAMPLE_CONFIG.read_text() + "---" + BFD_PEER)
    loaded, _warnings = load_config_or_raise([str(config)])
    check_capabilities(
        one(docs, "DaemonSet", "kube-bgpd-speaker"), capabilities_for(loaded), listen=False
    )
    result = validate_strictly(docs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_overlay_example_exercises_listen() -> None:
    """The example overlay is the one that turns listen on (so both branches above run)."""
    text = (DEPLOY / "overlays" / "example" / "config.yaml").read_text()
    assert any(
        d and d.get("kind") == "SpeakerConfig" and d["spec"].get("listen") is True
        for d in yaml.safe_load_all(text)
    )


def test_overlay_retain_keeps_routes_across_pod_restarts() -> None:
    """The retain overlay: no preStop drain (a drain makes any stop withdraw), onSigterm
    retain, and graceful restart on every peer (retain keeps nothing at other peers)."""
    docs = rendered("overlays/retain")
    ds = one(docs, "DaemonSet", "kube-bgpd-speaker")
    assert "lifecycle" not in container(ds)
    assert "lifecycle" in container(one(rendered("base"), "DaemonSet", "kube-bgpd-speaker"))
    config = speaker_config("overlays/retain")
    assert str(config.speaker.on_sigterm) == "retain"
    assert config.peers
    assert all(p.enable_graceful_restart for p in config.peers)


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_controller_pod(path: str) -> None:
    docs = rendered(path)
    deploy = one(docs, "Deployment", "kube-bgpd-controller")
    pod = deploy["spec"]["template"]["spec"]
    c = container(deploy)
    assert deploy["spec"]["replicas"] == 2
    assert c["args"][0] == "controller"
    assert not pod.get("hostNetwork")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (address,) = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--metrics-address=")]
    host, _, port = address.rpartition(":")
    assert host == "$(POD_IP)"
    assert {"name": "metrics", "containerPort": int(port), "protocol": "TCP"} in c["ports"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # The Lease goes to the pod's namespace, which is where the leader Role applies.
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert env["POD_IP"] == "status.podIP"
    leader_role = one(docs, "Role", "kube-bgpd-controller-leader")
    names = {n for r in leader_role["rules"] for n in r.get("resourceNames", [])}
    assert names == {"kube-bgpd-controller"}
    from bgpd.cli import build_parser

    args = build_parser().parse_args(c["args"])
    assert args.lease_name in names


def test_image_user_is_the_pods_user() -> None:
    """The Dockerfile's USER is the uid the manifests run as, and its entrypoint is the
    kube-bgpd command the manifests pass sub-commands to."""
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert re.search(rf"useradd .*--uid {user[0]} --gid {user[1]}", dockerfile)
    # Both stages on one base, pinned by its digest (a moving tag cannot change it).
    bases = {f.split(" ")[0] for f in re.findall(r"^FROM (.+)$", dockerfile, re.M)}
    (base,) = bases
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), base
    entry = json.loads(re.findall(r"^ENTRYPOINT (.+)$", dockerfile, re.M)[0])
    assert entry[-1] == "kube-bgpd"
    for copied in re.findall(r"^COPY (?!--)(.+) \S+$", dockerfile, re.M):
        for src in copied.split():
            assert (ROOT / src).exists(), src
    docs = rendered("base")
    for w in workloads(docs):
        sc = w["spec"]["template"]["spec"]["securityContext"]
        assert (str(sc["runAsUser"]), str(sc["runAsGroup"])) == user


# --------------------------------------------------------------------------- preStop


@pytest.fixture
def loopback_address() -> str:
    return kit.loopback_address()


@pytest.fixture
def running_speaker(
    tmp_path: Path, loopback_address: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real `kube-bgpd speaker` (cluster dump, a peer that is never reached) whose
    listener is where the DaemonSet puts it: POD_IP:7473."""
    config = tmp_path / "config.yaml"
    text = kit.EXAMPLE_CONFIG.read_text()
    # A short window so that the SIGTERM at teardown (which waits for it) is quick.
    assert "drainWindow: 30s" in text
    config.write_text(text.replace("drainWindow: 30s", "drainWindow: 2s"))
    dump = tmp_path / "cluster.yaml"
    dump.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": "node1"},
                        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
                    }
                ],
            }
        )
    )
    log = (tmp_path / "speaker.log").open("w")
    proc = subprocess.Popen(
        [
            KUBE_BGPD,
            "speaker",
            f"--config={config}",
            "--node-name=node1",
            f"--cluster-file={dump}",
            f"--work-dir={tmp_path / 'run' / 'kube-bgpd'}",
            f"--metrics-address={loopback_address}:7473",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{loopback_address}:7473/healthz", timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, (tmp_path / "speaker.log").read_text()
                assert time.monotonic() < deadline, "speaker listener never came up"
                time.sleep(0.1)
        yield loopback_address, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def running_speaker_work_dir(proc: subprocess.Popen[bytes]) -> str:
    """The --work-dir a speaker process was started with."""
    argv = proc.args
    assert isinstance(argv, list)
    return next(
        str(a).removeprefix("--work-dir=") for a in argv if str(a).startswith("--work-dir=")
    )


def test_pre_stop_hook_drains_then_sigterm_stops_within_grace(
    running_speaker: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """The DaemonSet's preStop command, run as the kubelet would (its shell, POD_IP from
    the downward API), makes the real speaker drain; the SIGTERM that follows waits for
    the drain window, then the speaker exits 0 well within the grace period."""
    address, proc = running_speaker
    ds = one(rendered("base"), "DaemonSet", "kube-bgpd-speaker")
    # The pod's work directory is /run/kube-bgpd; this speaker's is its --work-dir.
    work = str(Path(running_speaker_work_dir(proc)))
    command = [
        arg.replace("--work-dir=/run/kube-bgpd", f"--work-dir={work}")
        for arg in container(ds)["lifecycle"]["preStop"]["exec"]["command"]
    ]
    # The network listener (the node's address under hostNetwork) serves no drain and,
    # without exposeStatus, no /status.
    for method, path in (("POST", "/drain"), ("DELETE", "/drain"), ("GET", "/status")):
        req = urllib.request.Request(f"http://{address}:7473{path}", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)  # noqa: S310 - http to the test speaker
        refused.value.close()
        assert refused.value.code == 404, (method, path)
    env = {
        "PATH": f"{Path(KUBE_BGPD).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "POD_IP": address,
    }
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mode: draining" in result.stdout
    shown = subprocess.run(
        [KUBE_BGPD, "status", "--json", f"--work-dir={work}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    status = json.loads(shown.stdout)
    assert status["mode"] == "draining"
    assert status["drain"]["window"] == 2.0
    withdraw_at = status["drain"]["withdraw_at"]
    proc.send_signal(signal.SIGTERM)
    grace = ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert proc.wait(timeout=grace) == 0
    # It held the routes for the whole window before stopping.
    assert time.time() >= withdraw_at
