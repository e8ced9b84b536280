"""deploy/systemd checked with the real systemd tools and kube-bgpd's own parsers.

`systemd-analyze verify` needs the ExecStart binary to exist, and the units name the
documented install path (/opt/kube-bgpd/bin/kube-bgpd), which does not exist here; the
units are therefore verified as copies whose ExecStart points at this venv's kube-bgpd,
every other line unchanged. The sample config must pass `kube-bgpd validate`; the sample
environment file's arguments must parse with kube-bgpd's real argument parser; the
sysusers entry must create the account the units run as.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import deploy_kit as kit
import pytest

from bgpd.cli import build_parser
from bgpd.config import load_config_or_raise
from bgpd.model import SigtermAction

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

SYSTEMD = kit.ROOT / "deploy" / "systemd"
KUBE_BGPD = kit.KUBE_BGPD
INSTALLED = "/opt/kube-bgpd/bin/kube-bgpd"
UNITS = [
    pytest.param("kube-bgpd-speaker.service", id="speaker"),
    pytest.param("kube-bgpd-controller.service", id="controller"),
]
#: The speaker's bound on the final withdraw (bgpd.speaker: runtime.stop(within=10.0)).
WITHDRAW_BOUND = 10.0


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (a key may repeat, as systemd allows)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in (SYSTEMD / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = {}
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key, []).append(value)
    return out


def local_copy(name: str, directory: Path) -> Path:
    text = (SYSTEMD / name).read_text()
    assert text.count(INSTALLED) == 1
    target = directory / name
    target.write_text(text.replace(INSTALLED, KUBE_BGPD))
    return target


def environment_file() -> dict[str, str]:
    """/etc/default/kube-bgpd as systemd reads it (NAME=value; no quotes used here)."""
    env: dict[str, str] = {}
    for raw in (SYSTEMD / "kube-bgpd.default").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), key
            assert '"' not in value
            assert "'" not in value
            env[key] = value
    return env


def exec_start_argv(name: str, env: dict[str, str]) -> list[str]:
    """ExecStart as systemd expands it: an unbraced $VAR splits at whitespace."""
    (line,) = unit(name)["Service"]["ExecStart"]
    argv: list[str] = []
    for word in shlex.split(line):
        if word.startswith("$") and not word.startswith("${"):
            argv.extend(env.get(word[1:], "").split())
        else:
            argv.append(word)
    return argv


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verify_is_silent(name: str, tmp_path: Path) -> None:
    path = local_copy(name, tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    # verify exits 0 on unknown keys and only warns: any output is a defect.
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""


def test_verify_catches_a_misspelt_directive(tmp_path: Path) -> None:
    """The check above is not vacuous."""
    path = local_copy("kube-bgpd-speaker.service", tmp_path)
    path.write_text(path.read_text().replace("ProtectSystem=", "ProtectSytem="))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert "Unknown key 'ProtectSytem'" in result.stderr


@pytest.mark.parametrize("name", UNITS)
def test_exposure_is_low(name: str, tmp_path: Path) -> None:
    """systemd's own hardening score (0 = locked down, 10 = fully exposed)."""
    path = local_copy(name, tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (score,) = re.findall(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert float(score) <= 2.0, result.stdout


@pytest.mark.parametrize("name", UNITS)
def test_hardening_and_lifecycle(name: str) -> None:
    s = unit(name)["Service"]
    assert s["NoNewPrivileges"] == ["yes"]
    # No capability at all: ExaBGP only connects out (listen needs a drop-in).
    assert s["CapabilityBoundingSet"] == [""]
    assert s["AmbientCapabilities"] == [""]
    assert s["ProtectSystem"] == ["strict"]
    assert s["ProtectHome"] == ["yes"]
    assert s["PrivateTmp"] == ["yes"]
    assert s["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"]
    assert s["Restart"] == ["on-failure"]
    assert s["EnvironmentFile"] == ["-/etc/default/kube-bgpd"]
    assert s["User"] == s["Group"] == ["kube-bgpd"]


@pytest.mark.parametrize("name", UNITS)
def test_reload_is_sighup(name: str) -> None:
    """Both daemons re-read their config files on SIGHUP."""
    assert unit(name)["Service"]["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_speaker_stops_gracefully(tmp_path: Path) -> None:
    s = unit("kube-bgpd-speaker.service")["Service"]
    # SIGTERM to kube-bgpd only, so it withdraws before it stops ExaBGP itself.
    assert s["KillMode"] == ["mixed"]
    config, _ = load_config_or_raise([str(SYSTEMD / "config.yaml")])
    sc = config.speaker
    assert sc.on_sigterm is SigtermAction.DRAIN
    assert float(s["TimeoutStopSec"][0]) >= sc.drain_window + WITHDRAW_BOUND + 5
    # ExaBGP's work dir is the unit's RuntimeDirectory (writable under ProtectSystem).
    assert Path("/run") / s["RuntimeDirectory"][0] == sc.work_dir


def test_sample_config_validates() -> None:
    result = subprocess.run(
        [KUBE_BGPD, "validate", str(SYSTEMD / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("valid:")
    assert "warning" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("name", "command"),
    [
        pytest.param("kube-bgpd-speaker.service", "speaker", id="speaker"),
        pytest.param("kube-bgpd-controller.service", "controller", id="controller"),
    ],
)
def test_environment_file_arguments_parse(name: str, command: str) -> None:
    """The command line systemd builds from the unit and the sample environment file
    is one kube-bgpd accepts, with the config and kubeconfig where the docs put them."""
    env = environment_file()
    argv = exec_start_argv(name, env)
    assert argv[0] == INSTALLED
    args = build_parser().parse_args(argv[1:])
    assert args.command == command
    assert args.config == ["/etc/kube-bgpd/config.yaml"]
    assert args.kubeconfig == "/etc/kube-bgpd/kubeconfig"
    if command == "speaker":
        assert env["NODE_NAME"]
    else:
        assert args.lease_namespace == "kube-bgpd-system"


def test_sysusers_creates_the_units_account(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    result = subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", str(SYSTEMD / "kube-bgpd.sysusers")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    entries = [line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()]
    users = {e[0]: e for e in entries}
    account = users["kube-bgpd"]
    assert account[6] == "/usr/sbin/nologin"
    assert 0 < int(account[2]) < 1000  # a system account
    for name in ("kube-bgpd-speaker.service", "kube-bgpd-controller.service"):
        assert unit(name)["Service"]["User"] == ["kube-bgpd"]


def _with_bfd_drop_in(directory: Path, text: str | None = None) -> Path:
    """The speaker unit with deploy/systemd/kube-bgpd-speaker-bfd.conf installed as its
    drop-in, as docs/configuration.md (BFD) says."""
    directory.mkdir()
    path = local_copy("kube-bgpd-speaker.service", directory)
    drop_ins = directory / "kube-bgpd-speaker.service.d"
    drop_ins.mkdir()
    conf = (SYSTEMD / "kube-bgpd-speaker-bfd.conf").read_text()
    (drop_ins / "bfd.conf").write_text(conf if text is None else text)
    return path


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )


def test_bfd_drop_in_verifies_and_gives_bfdd_what_it_needs(tmp_path: Path) -> None:
    """The drop-in loads silently (a misspelt key in it would be reported) and runs the
    speaker as root with exactly the capabilities bfdd insists on (bgpd.bfd.runtime)."""
    result = _verify(_with_bfd_drop_in(tmp_path / "ok"))
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""
    conf = (SYSTEMD / "kube-bgpd-speaker-bfd.conf").read_text()
    bad = _verify(_with_bfd_drop_in(tmp_path / "bad", conf.replace("Group=", "Grop=")))
    assert "Unknown key 'Grop'" in bad.stderr
    lines = [line for line in conf.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "[Service]",
        "User=root",
        "Group=root",
        "CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_NET_RAW CAP_NET_BIND_SERVICE "
        "CAP_SYS_ADMIN",
    ]
