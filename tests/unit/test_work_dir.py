"""A work directory too long for the helper's unix socket is a clear configuration
error, from the runtime and from `kube-bgpd speaker`, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bgpd.cli import main
from bgpd.exabgp.runtime import SOCKET_NAME, UNIX_PATH_MAX, ExaBGPRuntime, work_dir_problem
from bgpd.model import NodeName

ROOT = Path(__file__).resolve().parents[2]


def deep(tmp_path: Path, total: int) -> Path:
    """A directory whose socket path is ``total`` bytes long."""
    base = len(str(tmp_path / SOCKET_NAME)) + 1  # "/" before the new component
    return tmp_path / ("d" * (total - base))


@pytest.mark.parametrize(
    ("size", "ok"),
    [pytest.param(UNIX_PATH_MAX, True, id="at-limit"), pytest.param(108, False, id="over")],
)
def test_work_dir_problem(tmp_path: Path, size: int, ok: bool) -> None:
    work = deep(tmp_path, size)
    assert len(str(work / SOCKET_NAME)) == size
    problem = work_dir_problem(work)
    assert (problem is None) is ok
    if not ok:
        assert problem is not None
        assert "108 bytes" in problem
        assert "spec.workDir or --work-dir" in problem


def test_runtime_refuses_a_long_work_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unix socket path has at most 107"):
        ExaBGPRuntime(node=NodeName("n1"), work_dir=deep(tmp_path, 130))


def test_speaker_cli_refuses_a_long_work_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = deep(tmp_path, 140)
    code = main(
        [
            "speaker",
            "--config",
            str(ROOT / "config/examples/one-tor.yaml"),
            "--node-name",
            "node1",
            "--cluster-file",
            str(tmp_path / "absent.yaml"),
            "--work-dir",
            str(work),
        ]
    )
    assert code == 2
    assert "choose a shorter work directory" in capsys.readouterr().err
    assert not work.exists()
