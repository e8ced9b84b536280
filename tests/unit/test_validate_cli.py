"""`kube-bgpd validate`: exit codes and what it prints, through the real entry point (and
once through the installed console script, as an operator runs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bgpd.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"

BAD = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool-a}
spec: {addresses: [10.99.100.20-10.99.100.10]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-a}
spec: {myASN: 4294967296, peerASN: 64500, peerAddress: 172.31.250.1, holdTime: 2s}
"""

WARNS = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool-a}
spec: {addresses: [fd00:99:100::/120]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-a}
spec: {myASN: 64512, peerASN: 64500, peerAddress: 172.31.250.1}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: adv}
"""

VALID = [
    pytest.param(["one-tor.yaml"], "valid: 1 pools, 1 peers, 1 advertisements", id="one-tor"),
    pytest.param(
        ["two-tors-dual-stack.yaml"],
        "valid: 2 pools, 4 peers, 2 advertisements, 1 communities",
        id="two-tors-dual-stack",
    ),
    pytest.param(
        ["metallb-user.yaml"], "valid: 2 pools, 2 peers, 2 advertisements", id="metallb-user"
    ),
]


@pytest.mark.parametrize(("files", "summary"), VALID)
def test_valid_examples(files: list[str], summary: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", *(str(EXAMPLES / f) for f in files)])
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, summary + "\n", "")


def test_every_error_one_per_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    code = main(["validate", str(path)])
    out, _ = capsys.readouterr()
    assert code == 1
    assert out.splitlines() == [
        f"error: {path}:doc 1: IPAddressPool pool-a: spec.addresses[0]: invalid IP range "
        "'10.99.100.20-10.99.100.10': start IP 10.99.100.20 is after the end IP 10.99.100.10",
        f"error: {path}:doc 2: BGPPeer tor-a: spec.myASN: 4294967296 is out of range "
        "(1-4294967295)",
        f"error: {path}:doc 2: BGPPeer tor-a: spec.holdTime: '2s' is invalid: must be 0 or >= 3s",
        "invalid: 3 errors",
    ]


def test_warnings_are_printed_and_the_config_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "warn.yaml"
    path.write_text(WARNS)
    code = main(["validate", "--config", str(path)])
    out, _ = capsys.readouterr()
    assert code == 0
    assert out.splitlines() == [
        f"warning: {path}:doc 3: BGPAdvertisement adv: IPv6 addresses of pool pool-a reach no "
        "IPv6 peer (a peer receives only prefixes of its session's family)",
        "valid: 1 pools, 1 peers, 1 advertisements",
    ]


def test_files_and_config_flags_combine(capsys: pytest.CaptureFixture[str]) -> None:
    # The same objects twice: every name is a duplicate, which proves both files were read.
    one = str(EXAMPLES / "one-tor.yaml")
    code = main(["validate", "--config", one, one])
    out, _ = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[-1] == "invalid: 3 errors"


def test_unreadable_file_is_an_error_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    code = main(["validate", str(missing)])
    out, _ = capsys.readouterr()
    assert code == 1
    assert out.splitlines() == [
        f"error: {missing}: cannot read: No such file or directory",
        "invalid: 1 error",
    ]


def test_no_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        "kube-bgpd validate: no config file given (FILE..., --config FILE, "
        "or --kubeconfig KC for the cluster's objects)\n"
    )


def test_console_script(tmp_path: Path) -> None:
    script = shutil.which("kube-bgpd", path=str(Path(sys.executable).parent))
    assert script is not None, "the kube-bgpd console script is installed with the project"
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    ok = subprocess.run(
        [script, "validate", str(EXAMPLES / "one-tor.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (ok.returncode, ok.stdout) == (0, "valid: 1 pools, 1 peers, 1 advertisements\n")
    failed = subprocess.run(
        [script, "validate", str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert failed.returncode == 1
    assert failed.stdout.splitlines()[-1] == "invalid: 3 errors"


def test_a_command_loads_only_its_own_module() -> None:
    """The parser is built for the command given: `kube-bgpd validate` (and the
    long-running speaker) do not import the other commands' modules, and --help still
    lists every command."""
    probe = (
        "import sys\n"
        "from bgpd.cli import main\n"
        "code = main(['validate', sys.argv[1]])\n"
        "print(sorted(m for m in sys.modules if m.startswith('bgpd.cli.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(EXAMPLES / "one-tor.yaml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.stdout.splitlines()[-1] == "['bgpd.cli.validate']", out.stderr
    helped = subprocess.run(
        [sys.executable, "-c", "from bgpd.cli import main; main(['--help'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    for command in ("validate", "explain", "speaker", "controller", "status", "drain"):
        assert command in helped.stdout
