"""The real `kube-bgpd validate`, `explain` and `speaker` processes against hostile or
clumsy input (issue 15 items 4, 5, 12, 15): each bad input ends as named one-line errors
with the documented exit code, no traceback, and a password never appears in any output.

The speaker cases all fail before ExaBGP starts (the preflight, the listener), so no
session is opened and nothing leaves the host."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
SECRET = "Xy7-s3cr3t-md5"

POOL = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: services}
spec: {addresses: [10.99.100.0/24]}
"""
PEER = """\
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: 127.0.0.1
  peerPort: 1
  HOLD
"""
ADV = """\
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: services}
spec: {ipAddressPools: [services]}
"""
GOOD = "---\n".join([POOL, PEER.replace("HOLD", "holdTime: 9s"), ADV])
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
DUMP = "apiVersion: v1\nkind: List\nitems: []\n"


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBE_BGPD, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def assert_clean(out: subprocess.CompletedProcess[str]) -> None:
    both = out.stdout + out.stderr
    assert "Traceback" not in both, both
    assert "ExceptionGroup" not in both, both
    assert SECRET not in both
    assert SECRET[:6] not in both


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        pytest.param(
            GOOD.replace("holdTime: 9s", "holdTime: !!timestamp 2001-12-14"),
            "not a date",
            id="timestamp",
        ),
        pytest.param(
            GOOD.replace("holdTime: 9s", "holdTime: !!python/object:os.system x"),
            "could not determine a constructor",
            id="python-tag",
        ),
        pytest.param(
            GOOD.replace(
                "holdTime: 9s",
                "nodeSelectors: [{matchExpressions: [{key: a, operator: {x: 1}}]}]",
            ),
            "is not one of In, NotIn",
            id="operator-mapping",
        ),
        pytest.param(
            GOOD.replace("64512", "9" * 5000), "an integer of 5000 characters", id="huge-int"
        ),
        pytest.param(
            GOOD.replace("holdTime: 9s", "holdTime: " + "9" * 5000 + "s"),
            "too long",
            id="huge-duration",
        ),
        pytest.param(
            GOOD + "---\napiVersion: kube-bgpd.io/v1alpha1\nkind: SpeakerConfig\n"
            "metadata: {name: s}\nspec: {drainWindow: 100000h}\n",
            "spec.drainWindow: '100000h' is out of range (0-3600s)",
            id="huge-drain-window",
        ),
        pytest.param(BOMB, "aliases that expand it by more than 10000 values", id="alias-bomb"),
        pytest.param(
            GOOD.replace("holdTime: 9s", f'password: "{SECRET}\\u0007"'),
            "spec.password: holds a control character at position 15 (value not shown",
            id="md5-control-char",
        ),
    ],
)
def test_validate_names_every_bad_input_in_one_line(tmp_path: Path, text: str, expect: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    out = run("validate", str(path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert_clean(out)
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert any(expect in line for line in errors), out.stdout
    assert out.stdout.splitlines()[-1].startswith("invalid: ")


@pytest.mark.parametrize(
    ("dump", "expect"),
    [
        pytest.param("kind: List\nitems:\n- !!float 1e400\n", "", id="float-item"),
        pytest.param(
            "kind: List\nitems: [{kind: Service, metadata: {name: !!timestamp 2001-01-01}}]\n",
            "(Service)",
            id="timestamp-name",
        ),
        pytest.param("[" * 100_000 + "]" * 100_000, "", id="deep-json"),
        pytest.param(
            '{"kind": "List", "items": [' + "9" * 5000 + "]}", "an integer of", id="huge-json-int"
        ),
        pytest.param(BOMB, "aliases", id="alias-bomb"),
    ],
)
def test_explain_names_a_bad_dump_in_one_line(tmp_path: Path, dump: str, expect: str) -> None:
    (tmp_path / "c.yaml").write_text(GOOD)
    (tmp_path / "d.yaml").write_text(dump)
    out = run(
        "explain", "--config", str(tmp_path / "c.yaml"), "--cluster", str(tmp_path / "d.yaml")
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert_clean(out)
    [line] = out.stderr.splitlines()
    assert line.startswith(f"kube-bgpd explain: {tmp_path / 'd.yaml'}: ")
    assert expect in line


def test_explain_reads_a_secret_with_non_ascii_base64_as_no_password(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(GOOD)
    (tmp_path / "d.yaml").write_text(
        DUMP + f"---\napiVersion: v1\nkind: Secret\nmetadata: {{name: md5}}\n"
        f"data: {{password: 'é{SECRET}'}}\n"
    )
    out = run(
        "explain",
        "--config",
        str(tmp_path / "c.yaml"),
        "--cluster",
        str(tmp_path / "d.yaml"),
        "--node",
        "n1",
    )
    assert out.returncode == 0, out.stderr
    assert_clean(out)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def speaker(tmp_path: Path, *extra: str, config: str = GOOD) -> subprocess.CompletedProcess[str]:
    (tmp_path / "c.yaml").write_text(config)
    work = tmp_path / "work"
    work.mkdir(mode=0o700, exist_ok=True)
    return run(
        "speaker",
        "--config",
        str(tmp_path / "c.yaml"),
        "--node-name",
        "n1",
        "--work-dir",
        str(work),
        *extra,
    )


def test_speaker_start_up_errors_are_one_line_each(tmp_path: Path, busy_port: int) -> None:
    garbage = tmp_path / "kubeconfig"
    garbage.write_text("apiVersion: v1\nclusters: [\n")
    dump = tmp_path / "d.yaml"
    cases = {
        "missing kubeconfig": (
            ["--kubeconfig", str(tmp_path / "nope")],
            f"kube-bgpd speaker: kubeconfig {tmp_path / 'nope'} does not exist",
        ),
        "garbage kubeconfig": (
            ["--kubeconfig", str(garbage)],
            f"kube-bgpd speaker: cannot load Kubernetes credentials from kubeconfig {garbage}: ",
        ),
        "bad dump": (
            ["--cluster-file", str(dump)],
            f"kube-bgpd speaker: cluster file {dump}: not valid YAML: ",
        ),
        "missing dump": (
            ["--cluster-file", str(tmp_path / "none.yaml")],
            f"kube-bgpd speaker: cannot read cluster file {tmp_path / 'none.yaml'}: ",
        ),
        "port in use": (
            [
                "--cluster-file",
                str(tmp_path / "good.yaml"),
                "--metrics-address",
                f"127.0.0.1:{busy_port}",
            ],
            f"kube-bgpd speaker: cannot listen on 127.0.0.1:{busy_port} (metrics, health, "
            "status): ",
        ),
    }
    dump.write_text("kind: List\nitems: [\n")
    (tmp_path / "good.yaml").write_text(DUMP)
    for what, (extra, start) in cases.items():
        out = speaker(tmp_path, *extra)
        assert out.returncode == 1, (what, out.stderr)
        assert_clean(out)
        [line] = out.stderr.splitlines()
        assert line.startswith(start), (what, line)


def test_speaker_never_prints_an_invalid_password(tmp_path: Path) -> None:
    out = speaker(
        tmp_path,
        "--cluster-file",
        str(tmp_path / "d.yaml"),
        config=GOOD.replace("holdTime: 9s", f'password: "{SECRET}\\n"'),
    )
    assert out.returncode == 2
    assert_clean(out)
    assert "spec.password: holds a control character" in out.stderr


def readyz(port: int) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_a_node_name_that_matches_no_node_is_not_ready_until_it_appears(tmp_path: Path) -> None:
    """Issue 15 item 16: `--node-name n1` with a cluster holding only n2 logs
    speaker.node_missing naming the flag, and /readyz answers 503 saying so, until n1
    appears. The only peer is 127.0.0.1:1 (nothing listens): no traffic leaves the host."""
    from kbgpd_lab.kit.waiting import wait_until
    from kbgpd_lab.lab.speakerfiles import cluster_list, node_item

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dump = tmp_path / "d.yaml"
    dump.write_text(cluster_list([node_item("n2", "127.0.0.2")]))
    (tmp_path / "c.yaml").write_text(GOOD)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    log = tmp_path / "speaker.log"
    argv = [
        KUBE_BGPD,
        "speaker",
        "--config",
        str(tmp_path / "c.yaml"),
        "--node-name",
        "n1",
        "--work-dir",
        str(work),
        "--cluster-file",
        str(dump),
        "--metrics-address",
        f"127.0.0.1:{port}",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        _code, why = wait_until(
            lambda: (got := readyz(port))[0] == 503 and "no Node named" in got[1] and got,
            within=60,
            what="/readyz naming the missing node",
            details=lambda: log.read_text(errors="replace")[-2000:],
        )
        assert "'n1'" in why
        assert "--node-name" in why
        text = log.read_text()
        assert "speaker.node_missing flag=--node-name node=n1" in text
        dump.write_text(cluster_list([node_item("n1", "127.0.0.1"), node_item("n2", "127.0.0.2")]))
        wait_until(
            lambda: "no Node named" not in readyz(port)[1] and readyz(port)[0] != 0,
            within=60,
            what="/readyz no longer naming the node",
            details=lambda: log.read_text(errors="replace")[-2000:],
        )
        wait_until(lambda: "speaker.node_found" in log.read_text(), within=30, what="node_found")
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in log.read_text()


def test_an_unusable_work_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(GOOD)
    (tmp_path / "d.yaml").write_text(DUMP)
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = run(
        "speaker",
        "--config",
        str(tmp_path / "c.yaml"),
        "--node-name",
        "n1",
        "--cluster-file",
        str(tmp_path / "d.yaml"),
        "--work-dir",
        str(blocker),
        "--metrics-address",
        "127.0.0.1:0",
    )
    assert out.returncode == 2
    assert_clean(out)
    assert out.stderr.splitlines() == [
        f"kube-bgpd speaker: work directory {blocker} is unusable: File exists"
    ]


def test_controller_start_up_errors_are_one_line_each(tmp_path: Path, busy_port: int) -> None:
    (tmp_path / "c.yaml").write_text(GOOD)
    garbage = tmp_path / "garbage"
    garbage.write_text("clusters: [\n")
    # Never contacted: the listener fails first.
    unused = tmp_path / "kubeconfig"
    unused.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]\n'
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    cases = {
        "garbage kubeconfig": (
            garbage,
            f"kube-bgpd controller: cannot load Kubernetes credentials from kubeconfig {garbage}",
        ),
        "port in use": (
            unused,
            f"kube-bgpd controller: cannot listen on 127.0.0.1:{busy_port} (metrics): ",
        ),
    }
    for what, (kubeconfig, start) in cases.items():
        out = run(
            "controller",
            "--config",
            str(tmp_path / "c.yaml"),
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-address",
            f"127.0.0.1:{busy_port}",
        )
        assert out.returncode == 1, (what, out.stderr)
        assert_clean(out)
        [line] = out.stderr.splitlines()
        assert line.startswith(start), (what, line)
