"""The speaker DaemonSet's security context, applied to a real speaker.

No container runtime here, so the pod's sandbox is built from the rendered manifest with
the kernel features a runtime uses: a new network namespace (POD_IP = 127.0.0.1 there,
the lab's node and router addresses on its loopback), a private mount namespace with the
root filesystem read-only (readOnlyRootFilesystem), a tmpfs for every emptyDir mount, the
config directory bind-mounted where the ConfigMap is mounted, and `setpriv` for
runAsUser/runAsGroup, the capability set (drop ALL, add ...) and no_new_privs
(allowPrivilegeEscalation: false). The speaker runs with the container's own arguments
(plus a cluster dump instead of the API, and its node name); it must become ready, run
ExaBGP under the same identity and capabilities, listen on 179 exactly when the config
asks for it, and stop cleanly on SIGTERM.

This machine's venv interpreter lives under /root (mode 0700), which a non-root uid
cannot execute, while the image's interpreter is in /usr/local. For runAsUser != 0 the
test therefore builds a small venv from the system's python3.11 that imports the same
installed packages (nothing is downloaded).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = "/usr/bin/kubectl"
SYSTEM_PYTHON = "/usr/bin/python3.11"
CAP_NET_BIND_SERVICE = 10


def rendered(path: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / "deploy" / "kubernetes" / path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


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


def sandbox_script(ds: dict[str, Any], config_dir: Path, bin_dir: Path, state: Path) -> str:
    """The shell run inside `unshare -mn`: the pod's sandbox, then the speaker."""
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = {**pod["securityContext"], **c["securityContext"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    lines = [
        "set -eu",
        "ip link set lo up",
        # The lab's node and router addresses, so the peers resolve to something local.
        "ip addr add 172.31.250.11/24 dev lo",
        "ip -6 addr add fd00:99::11/64 dev lo nodad",
        "mount --make-rprivate /",
    ]
    if sc.get("readOnlyRootFilesystem"):
        lines += ["mount --bind / /", "mount -o remount,bind,ro /"]
    for m in c["volumeMounts"]:
        vol = volumes[m["name"]]
        if "configMap" in vol:
            lines.append(f"mount --bind -o ro {shlex.quote(str(config_dir))} {m['mountPath']}")
        elif "emptyDir" in vol:
            lines.append(f"mount -t tmpfs -o mode=1777 tmpfs {m['mountPath']}")
    lines.append(f"mount --bind {shlex.quote(str(state))} {shlex.quote(str(state))}")
    lines.append(f"mount -o remount,bind,rw {shlex.quote(str(state))}")
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    env.update(NODE_NAME="node1", POD_IP="127.0.0.1", POD_NAMESPACE="kube-bgpd-system")
    args = [a.replace("$(POD_IP)", env["POD_IP"]) for a in c["args"]]
    args += ["--cluster-file=/etc/kube-bgpd/cluster.yaml"]
    adds = ",".join(f"+{cap.lower()}" for cap in sc["capabilities"].get("add", []))
    caps = "-all" + (f",{adds}" if adds else "")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    lines.append(
        f"env -i PATH={bin_dir}:/usr/bin:/bin {exports} "
        f"setpriv --reuid={sc['runAsUser']} --regid={sc['runAsGroup']} --clear-groups "
        f"--bounding-set={caps} --inh-caps={caps} "
        f"{'--no-new-privs ' if sc.get('allowPrivilegeEscalation') is False else ''}"
        f"-- {bin_dir}/kube-bgpd {' '.join(shlex.quote(a) for a in args)} "
        f"> {state}/speaker.log 2>&1 &"
    )
    lines += [
        "P=$!",
        f"echo $P > {state}/pid",
        # Wait here so the namespaces live as long as the speaker.
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


@pytest.mark.parametrize(
    "path", [pytest.param("base", id="base"), pytest.param("overlays/example", id="listen")]
)
def test_speaker_runs_in_the_daemonsets_security_context(
    path: str, tmp_path: Path, nonroot_bin: Path
) -> None:
    docs = rendered(path)
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config_dir = Path(tempfile.mkdtemp(prefix="kube-bgpd-cm-", dir="/var/tmp"))
    state = Path(tempfile.mkdtemp(prefix="kube-bgpd-state-", dir="/var/tmp"))
    created: list[Path] = []
    try:
        for key, text in cm["data"].items():
            (config_dir / key).write_text(text)
        (config_dir / "cluster.yaml").write_text(cluster_dump())
        for p in (config_dir, *config_dir.iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)
        state.chmod(0o777)
        sc = {**ds["spec"]["template"]["spec"]["securityContext"]}
        bin_dir = nonroot_bin if sc["runAsUser"] != 0 else Path(sys.executable).parent
        script = sandbox_script(ds, config_dir, bin_dir, state)
        # Mount points must exist before the root goes read-only; create the missing
        # ones (empty directories) for the duration of the test only.
        (c,) = ds["spec"]["template"]["spec"]["containers"]
        for m in c["volumeMounts"]:
            target = Path(m["mountPath"])
            if not target.exists():
                target.mkdir(parents=True)
                created.append(target)
        sandbox = subprocess.Popen(["unshare", "-mn", "sh", "-c", script])
        try:
            _check(ds, cm, state, sandbox)
        finally:
            if sandbox.poll() is None:
                pid_file = state / "pid"
                if pid_file.exists():
                    os.kill(int(pid_file.read_text()), 15)
                try:
                    sandbox.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    sandbox.kill()
                    sandbox.wait()
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
        for target in reversed(created):
            target.rmdir()


def _check(
    ds: dict[str, Any], cm: dict[str, Any], state: Path, sandbox: subprocess.Popen[bytes]
) -> None:
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    uid = pod["securityContext"]["runAsUser"]
    adds = c["securityContext"]["capabilities"].get("add", [])
    want_caps = (1 << CAP_NET_BIND_SERVICE) if adds == ["NET_BIND_SERVICE"] else 0
    assert adds in ([], ["NET_BIND_SERVICE"])
    listen = "listen: true" in cm["data"]["config.yaml"]

    def log() -> str:
        path = state / "speaker.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    deadline = time.monotonic() + 60
    while not (state / "pid").exists():
        assert sandbox.poll() is None, "the sandbox failed to start"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int((state / "pid").read_text())
    ready = ""
    while ready != "ok":
        assert sandbox.poll() is None, log()
        assert time.monotonic() < deadline, f"not ready: {ready!r}\n{log()}"
        time.sleep(0.2)
        ready = in_netns_of(pid, ["curl", "-s", "http://127.0.0.1:7473/readyz"]).stdout.strip()

    status = proc_status(pid)
    assert status["Uid"].split()[0] == str(uid)
    assert int(status["CapEff"], 16) == want_caps
    assert status["NoNewPrivs"] == "1"
    (exabgp,) = [p for p in children(pid) if b"exabgp" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert proc_status(exabgp)["Uid"].split()[0] == str(uid)
    assert int(proc_status(exabgp)["CapEff"], 16) == want_caps
    listening = in_netns_of(pid, ["ss", "-Hltn", "sport = :179"]).stdout
    assert bool(listening.strip()) == listen, listening

    os.kill(pid, 15)
    sandbox.wait(timeout=30)
    assert (state / "rc").read_text().strip() == "0", log()
    assert "speaker.stopped" in log()
