"""The DaemonSet's and the Deployment's security contexts, applied to the real daemons.

The pods as shipped read their configuration from the cluster's custom resources, which a
sandbox with its own network namespace cannot reach; the workloads here are rendered with
components/config-file (a mounted file, the security contexts untouched: the base's,
which test_deploy_kubernetes.py checks), so the daemons run from a file and a cluster
dump. No container runtime here, so the pod's sandbox is built from the rendered manifest with
the kernel features a runtime uses: a new network namespace (POD_IP = 127.0.0.1 there,
the lab's node and router addresses on its loopback), a private mount namespace with the
root filesystem read-only (readOnlyRootFilesystem), a tmpfs for every emptyDir mount, the
config directory bind-mounted where the ConfigMap is mounted, and `setpriv` for
runAsUser/runAsGroup, the capability set (drop ALL, add ...) and no_new_privs
(allowPrivilegeEscalation: false). The speaker runs with the container's own arguments
(plus a cluster dump instead of the API, and its node name); it must become ready, run
ExaBGP under the same identity and capabilities, listen on 179 exactly when the config
asks for it, and stop cleanly on SIGTERM. The controller runs the same way (mount
namespace only, so it reaches the API simulator on loopback) and must allocate an IP,
answer its liveness probe and stop cleanly.

This machine's venv interpreter lives under /root (mode 0700), which a non-root uid
cannot execute, while the image's interpreter is in /usr/local. For runAsUser != 0 the
test therefore builds a small venv from the system's python3.11 that imports the same
installed packages (nothing is downloaded).

In the image the code lives on the read-only root filesystem. Here it lives wherever the
repository was cloned, and its venv under it: CI may clone under /tmp, which the pod's
emptyDir tmpfs then hides. The sandbox therefore binds the paths the daemon's code and
interpreter live in (repository, venvs, base interpreter) back, read-only, over any
emptyDir mount that would hide them, after that mount: the daemon still gets a fresh
writable tmpfs there and sees the code as the image's read-only root shows it. From a
repository outside every emptyDir mount nothing is added.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deploy_kit as kit
import pytest
import yaml

from kbgpd_lab.apisim import ApiSimulatorThread

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(180)]

ROOT = kit.ROOT
SYSTEM_PYTHON = "/usr/bin/python3.11"
#: Capability numbers (linux/capability.h) of the names the manifests may add.
CAPABILITIES = {"NET_BIND_SERVICE": 10, "NET_RAW": 13}


@pytest.fixture(scope="module")
def nonroot_bin() -> Iterator[Path]:
    """A bin/ with kube-bgpd and exabgp on an interpreter any uid may run."""
    site = Path(sys.prefix) / "lib" / "python3.11" / "site-packages"
    base = Path(tempfile.mkdtemp(prefix="kube-bgpd-sec-", dir="/var/tmp"))
    try:
        venv = base / "venv"
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
        (venv / "lib" / "python3.11" / "site-packages" / "project.pth").write_text(
            f"import site; site.addsitedir({str(site)!r})\n{ROOT}\n"
        )
        for script in ("kube-bgpd", "exabgp"):
            text = (Path(sys.executable).parent / script).read_text().splitlines()
            text[0] = f"#!{venv / 'bin' / 'python'}"
            (venv / "bin" / script).write_text("\n".join(text) + "\n")
            (venv / "bin" / script).chmod(0o755)
        for p in [base, *base.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o555 if p.is_dir() else p.stat().st_mode | 0o444)
        yield venv / "bin"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def cluster_dump() -> str:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node1"},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "172.31.250.11"},
                {"type": "InternalIP", "address": "fd00:99::11"},
            ]
        },
    }
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]})


def hidden_code_paths(mount_paths: list[str], bin_dir: Path) -> list[Path]:
    """The paths the daemon's code and interpreter live in that lie under one of these
    mount points (outermost only): the repository (the editable install's source), this
    venv, its base interpreter and `bin_dir`."""
    needed = {ROOT, Path(sys.prefix), Path(sys.base_prefix), bin_dir}
    mounts = [Path(m) for m in mount_paths]
    hidden = {p.resolve() for p in needed if any(m in p.resolve().parents for m in mounts)}
    return sorted(p for p in hidden if not any(q in p.parents for q in hidden))


def sandbox_script(
    workload: dict[str, Any],
    config_dir: Path,
    bin_dir: Path,
    state: Path,
    *,
    env: dict[str, str],
    extra_args: list[str],
    netns: bool,
) -> str:
    """The shell run inside `unshare`: the pod's sandbox, then the container's command."""
    pod = workload["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = {**pod["securityContext"], **c["securityContext"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    lines = ["set -eu"]
    if netns:
        lines += [
            "ip link set lo up",
            # The lab's node and router addresses, so the peers are local addresses.
            "ip addr add 172.31.250.11/24 dev lo",
            "ip -6 addr add fd00:99::11/64 dev lo nodad",
        ]
    empty_dirs = [m["mountPath"] for m in c["volumeMounts"] if "emptyDir" in volumes[m["name"]]]
    # Code paths an emptyDir tmpfs would hide (see the module docstring): each is bound
    # to a staging directory in `state` before the tmpfs mounts (afterwards it is out of
    # reach), then moved back to its own path inside the tmpfs and made read-only.
    keep = {
        shlex.quote(str(path)): shlex.quote(str(state / f"keep-{i}"))
        for i, path in enumerate(hidden_code_paths(empty_dirs, bin_dir))
    }
    lines += [f"mkdir {stage}" for stage in keep.values()]
    lines.append("mount --make-rprivate /")
    if sc.get("readOnlyRootFilesystem"):
        lines += ["mount --bind / /", "mount -o remount,bind,ro /"]
    lines += [f"mount --bind {path} {stage}" for path, stage in keep.items()]
    for m in c["volumeMounts"]:
        vol = volumes[m["name"]]
        if "configMap" in vol:
            lines.append(f"mount --bind -o ro {shlex.quote(str(config_dir))} {m['mountPath']}")
        elif "emptyDir" in vol:
            lines.append(f"mount -t tmpfs -o mode=1777 tmpfs {m['mountPath']}")
    for path, stage in keep.items():
        lines += [
            f"mkdir -p {path}",
            f"mount -n --move {stage} {path}",  # -n: no utab on the read-only root
            f"mount -o remount,bind,ro {path}",
        ]
    lines.append(f"mount --bind {shlex.quote(str(state))} {shlex.quote(str(state))}")
    lines.append(f"mount -o remount,bind,rw {shlex.quote(str(state))}")
    env = {**{e["name"]: e["value"] for e in c["env"] if "value" in e}, **env}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
    adds = ",".join(f"+{cap.lower()}" for cap in sc["capabilities"].get("add") or [])
    caps = "-all" + (f",{adds}" if adds else "")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = " ".join(shlex.quote(a) for a in [*args, *extra_args])
    lines.append(
        f"env -i PATH={bin_dir}:/usr/bin:/bin {exports} "
        f"setpriv --reuid={sc['runAsUser']} --regid={sc['runAsGroup']} --clear-groups "
        f"--bounding-set={caps} --inh-caps={caps} "
        f"{'--no-new-privs ' if sc.get('allowPrivilegeEscalation') is False else ''}"
        f"-- {bin_dir}/kube-bgpd {command} > {state}/daemon.log 2>&1 &"
    )
    lines += [
        "P=$!",
        f"echo $P > {state}/pid",
        # Wait here so the namespaces live as long as the daemon.
        "wait $P || echo $? > " + str(state / "rc"),
        f"test -e {state}/rc || echo 0 > {state}/rc",
    ]
    return "\n".join(lines)


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if proc_status(int(entry.name)).get("PPid") == str(pid):
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def in_netns_of(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-n", *argv], capture_output=True, text=True, timeout=10
    )


@dataclass
class Sandboxed:
    pid: int
    state: Path
    sandbox: subprocess.Popen[bytes]

    def log(self) -> str:
        path = self.state / "daemon.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> str:
        """SIGTERM, as the kubelet sends it; the exit code."""
        os.kill(self.pid, 15)
        self.sandbox.wait(timeout=30)
        return (self.state / "rc").read_text().strip()


@contextlib.contextmanager
def sandboxed(
    workload: dict[str, Any],
    cm: dict[str, Any],
    bin_dir: Path,
    *,
    env: dict[str, str],
    extra_args: list[str],
    netns: bool,
    files: dict[str, str] | None = None,
) -> Iterator[Sandboxed]:
    """Run the workload's container command in its pod's sandbox until the block ends."""
    config_dir = Path(tempfile.mkdtemp(prefix="kube-bgpd-cm-", dir="/var/tmp"))
    state = Path(tempfile.mkdtemp(prefix="kube-bgpd-state-", dir="/var/tmp"))
    created: list[Path] = []
    sandbox: subprocess.Popen[bytes] | None = None
    try:
        for key, text in {**cm["data"], **(files or {})}.items():
            (config_dir / key).write_text(text)
        for p in (config_dir, *config_dir.iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)
        state.chmod(0o777)
        # Mount points must exist before the root goes read-only; create the missing
        # ones (empty directories) for the duration of the test only.
        (c,) = workload["spec"]["template"]["spec"]["containers"]
        for m in c["volumeMounts"]:
            target = Path(m["mountPath"])
            if not target.exists():
                target.mkdir(parents=True)
                created.append(target)
        script = sandbox_script(
            workload, config_dir, bin_dir, state, env=env, extra_args=extra_args, netns=netns
        )
        sandbox = subprocess.Popen(["unshare", "-mn" if netns else "-m", "sh", "-c", script])
        deadline = time.monotonic() + 30
        while not (state / "pid").exists():
            assert sandbox.poll() is None, "the sandbox failed to start"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield Sandboxed(int((state / "pid").read_text()), state, sandbox)
    finally:
        if sandbox is not None and sandbox.poll() is None:
            with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
                os.kill(int((state / "pid").read_text()), 15)
            try:
                sandbox.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sandbox.kill()
                sandbox.wait()
        shutil.rmtree(config_dir, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
        for target in reversed(created):
            target.rmdir()


def bin_for(workload: dict[str, Any], nonroot_bin: Path) -> Path:
    uid = workload["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    return nonroot_bin if uid != 0 else Path(sys.executable).parent


def check_identity(workload: dict[str, Any], pid: int) -> int:
    """The process runs as the pod's user with exactly the pod's capabilities; returns
    the effective capability mask."""
    pod = workload["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    adds = c["securityContext"]["capabilities"].get("add") or []
    want_caps = sum(1 << CAPABILITIES[name] for name in adds)
    status = proc_status(pid)
    assert status["Uid"].split()[0] == str(pod["securityContext"]["runAsUser"])
    assert int(status["CapEff"], 16) == want_caps
    assert status["NoNewPrivs"] == "1"
    return want_caps


def in_mntns_of(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    # -r: the daemon's own root; joining the namespace alone lands on the rw `mount --bind
    # / /` stacked on it (setns follows mounts on the namespace root), not the daemon's view.
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "-r", *argv], capture_output=True, text=True, timeout=10
    )


def check_mounts(workload: dict[str, Any], pid: int) -> None:
    """The daemon's filesystem as the pod spec says: the root read-only (so is the code,
    also where it is bound back over an emptyDir), every emptyDir a writable tmpfs, the
    ConfigMap read-only. Probed as root in its mount namespace, so only a read-only mount
    refuses the write."""
    pod = workload["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    read_only_root = bool(c["securityContext"].get("readOnlyRootFilesystem"))
    writable = {"/": not read_only_root, str(ROOT): not read_only_root}
    for m in c["volumeMounts"]:
        writable[m["mountPath"]] = "emptyDir" in volumes[m["name"]]
        if "emptyDir" in volumes[m["name"]]:
            fstype = in_mntns_of(pid, ["stat", "-f", "-c", "%T", m["mountPath"]]).stdout
            assert fstype.strip() == "tmpfs", (m["mountPath"], fstype)
    probe = 'f=$(mktemp -p "$1" 2>/dev/null) && rm -f "$f"'
    found = {
        path: in_mntns_of(pid, ["sh", "-c", probe, "-", path]).returncode == 0 for path in writable
    }
    assert found == writable


def with_config_file(
    where: Path, components: list[str], config: Path = kit.EXAMPLE_CONFIG
) -> list[dict[str, Any]]:
    """The base with components/config-file mounting `config`, and `components`."""
    return kit.overlay(where, ["config-file", *components], config=config)


@pytest.mark.parametrize(
    ("components", "config"),
    [
        pytest.param([], kit.EXAMPLE_CONFIG, id="base"),
        pytest.param(
            ["listen-bgp-port"], kit.DEPLOY / "overlays" / "example" / "config.yaml", id="listen"
        ),
        pytest.param(["vrf"], kit.EXAMPLE_CONFIG, id="vrf"),
    ],
)
def test_speaker_runs_in_the_daemonsets_security_context(
    components: list[str], config: Path, nonroot_bin: Path, tmp_path: Path
) -> None:
    docs = with_config_file(tmp_path / "overlay", components, config)
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    listen = "listen: true" in cm["data"]["config.yaml"]
    env = {"NODE_NAME": "node1", "POD_IP": "127.0.0.1", "POD_NAMESPACE": "kube-bgpd-system"}
    with sandboxed(
        ds,
        cm,
        bin_for(ds, nonroot_bin),
        env=env,
        # In a pod the cluster comes from the API; here from a dump.
        extra_args=["--cluster-file=/etc/kube-bgpd/cluster.yaml"],
        netns=True,
        files={"cluster.yaml": cluster_dump()},
    ) as run:
        deadline = time.monotonic() + 60
        ready = ""
        while ready != "ok":
            assert run.sandbox.poll() is None, run.log()
            assert time.monotonic() < deadline, f"not ready: {ready!r}\n{run.log()}"
            time.sleep(0.2)
            ready = in_netns_of(run.pid, ["curl", "-s", "http://127.0.0.1:7473/readyz"]).stdout
            ready = ready.strip()
        caps = check_identity(ds, run.pid)
        check_mounts(ds, run.pid)
        (exabgp,) = [
            p for p in children(run.pid) if b"exabgp" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        assert proc_status(exabgp)["Uid"] == proc_status(run.pid)["Uid"]
        assert int(proc_status(exabgp)["CapEff"], 16) == caps
        listening = in_netns_of(run.pid, ["ss", "-Hltn", "sport = :179"]).stdout
        assert bool(listening.strip()) == listen, listening
        assert run.stop() == "0", run.log()
        assert "speaker.stopped" in run.log()


def test_controller_runs_in_the_deployments_security_context(
    nonroot_bin: Path, tmp_path: Path
) -> None:
    """The controller as the Deployment runs it allocates from the simulator, answers
    its liveness probe, and stops cleanly."""
    docs = with_config_file(tmp_path / "overlay", [])
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    pod_ip = kit.loopback_address()
    with ApiSimulatorThread() as sim:
        sim.store.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
        sim.store.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
            }
        )
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig").read_text()
        with sandboxed(
            deploy,
            cm,
            bin_for(deploy, nonroot_bin),
            env={"POD_IP": pod_ip, "POD_NAMESPACE": "kube-bgpd-system"},
            # In a pod the credentials are the service account's; here the simulator's.
            extra_args=["--kubeconfig=/etc/kube-bgpd/kubeconfig"],
            netns=False,
            files={"kubeconfig": kubeconfig},
        ) as run:
            deadline = time.monotonic() + 60
            while True:
                assert run.sandbox.poll() is None, run.log()
                assert time.monotonic() < deadline, run.log()
                svc = sim.store.get("services", "web", "default") or {}
                if svc.get("status", {}).get("loadBalancer", {}).get("ingress"):
                    break
                time.sleep(0.1)
            health = subprocess.run(
                ["curl", "-sf", f"http://{pod_ip}:7473/healthz"], capture_output=True, text=True
            )
            assert health.returncode == 0, run.log()
            check_identity(deploy, run.pid)
            check_mounts(deploy, run.pid)
            assert run.stop() == "0", run.log()
