"""k8s_watcher.credentials: what the child prints for each kind of kubeconfig (the
official loaders, in this process), its one-line errors, and the CredentialSource's
freshness rules with a fake child and clock."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_watcher import credentials
from k8s_watcher.client import ssl_context
from k8s_watcher.credentials import (
    EXIT_CREDENTIALS,
    Credentials,
    CredentialSource,
    child_argv,
    resolve_here,
)
from k8s_watcher.errors import CredentialsError

# A real PEM pair is needed only where ssl loads it; these are the loader's pass-through.
CERT = "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n"


def kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any]) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [
            {"name": "other", "context": {"cluster": "c", "user": "u"}},
            {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
        ],
        "current-context": "main",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_token_kubeconfig_with_its_context_and_tls_settings(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {"token": "abc"},
        {
            "server": "https://10.0.0.1:6443/",
            "certificate-authority-data": b64(CERT),
            "tls-server-name": "api.internal",
            "proxy-url": "http://proxy:3128",
        },
    )
    creds = resolve_here(path, None, {})
    assert creds == Credentials(
        source=f"kubeconfig {path}",
        server="https://10.0.0.1:6443",
        authorization="Bearer abc",
        ca_data=CERT,
        tls_server_name="api.internal",
        proxy="http://proxy:3128",
        namespace="team",
    )
    assert resolve_here(path, "other", {}).namespace is None, "--context is honoured"
    assert Credentials.from_json(creds.to_json()) == creds


def test_client_certificate_and_insecure_kubeconfig(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
        {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True},
    )
    creds = resolve_here(path, None, {})
    assert (creds.cert_data, creds.key_data, creds.authorization) == (CERT, KEY, None)
    assert creds.verify is False


def exec_kubeconfig(tmp_path: Path, token: str = "tok") -> str:  # noqa: S107
    """A kubeconfig whose user is an exec plugin (a token that expires): the kind only the
    child resolves (a static one is read in the process: test_kubeconfig_static.py)."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        '#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1",'
        f'"kind":"ExecCredential","status":{{"token":"{token}",'
        '"expirationTimestamp":"2030-01-02T03:04:05Z"}}\'\n'
    )
    plugin.chmod(0o755)
    exec_user = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    return kubeconfig(tmp_path, {"exec": exec_user}, {"server": "http://127.0.0.1:1"})


def test_exec_plugin_reports_its_expiry(tmp_path: Path) -> None:
    path = exec_kubeconfig(tmp_path)
    creds = resolve_here(path, None, {})
    assert creds.authorization == "Bearer tok"
    assert creds.expires == 1893553445.0


def test_oidc_token_expiry_is_its_jwt_exp() -> None:
    claims = base64.urlsafe_b64encode(json.dumps({"exp": 1700000000}).encode()).rstrip(b"=")
    token = f"Bearer e30.{claims.decode()}.sig"
    assert credentials._jwt_expiry(token) == 1700000000.0
    assert credentials._jwt_expiry("Bearer opaque") is None
    assert credentials._jwt_expiry("Basic dTpw") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(None, "kubeconfig {p} does not exist", id="missing"),
        pytest.param(
            "apiVersion: v1\nclusters: [\n",
            "cannot load Kubernetes credentials from kubeconfig {p}: while parsing",
            id="garbage",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Config\n",
            "cannot load Kubernetes credentials from kubeconfig {p}: ",
            id="no-context",
        ),
    ],
)
def test_the_child_says_what_is_wrong_on_one_line(
    tmp_path: Path, text: str | None, message: str
) -> None:
    path = tmp_path / "kubeconfig"
    if text is not None:
        path.write_text(text)
    done = subprocess.run(
        child_argv(str(path), None), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == EXIT_CREDENTIALS
    error = json.loads(done.stdout)["error"]
    assert error.startswith(message.format(p=path))
    assert "\n" not in error


def test_in_cluster_without_the_environment_names_the_account(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError) as failed:
        resolve_here(None, None, {"HOME": str(tmp_path)})
    assert failed.value.message.startswith(
        "cannot load Kubernetes credentials from in-cluster service account: "
    )


def test_ssl_context_loads_the_pair_through_removed_private_files(tmp_path: Path) -> None:
    from kbgpd_lab.apisim.tls import make_self_signed

    made = make_self_signed()
    try:
        creds = Credentials(
            source="test",
            server="https://127.0.0.1:1",
            ca_data=made.cert.read_text(),
            cert_data=made.cert.read_text(),
            key_data=made.key.read_text(),
        )
        import tempfile

        saved = tempfile.tempdir
        tempfile.tempdir = str(tmp_path)
        try:
            context = ssl_context(creds)
        finally:
            tempfile.tempdir = saved
        assert context.verify_mode.name == "CERT_REQUIRED"
        assert list(tmp_path.iterdir()) == []
    finally:
        for f in made.directory.iterdir():
            f.unlink()
        made.directory.rmdir()


# --------------------------------------------------------------------------- freshness


class FakeChild:
    """The child's answers in order; counts runs."""

    def __init__(self, *answers: Credentials) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str | None, str | None]] = []

    async def __call__(self, kubeconfig: str | None, context: str | None) -> Credentials:
        self.calls.append((kubeconfig, context))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def creds(token: str, **kw: Any) -> Credentials:
    return Credentials(source="kubeconfig kc", server="https://api", authorization=token, **kw)


def source_for(child: FakeChild, clock: Clock, **kw: Any) -> CredentialSource:
    return CredentialSource("kc", "ctx", runner=child, clock=clock, wall=clock, **kw)


def test_resolved_once_and_shared() -> None:
    child, clock = FakeChild(creds("Bearer a")), Clock()
    source = source_for(child, clock)

    async def main() -> list[Credentials]:
        return list(await asyncio.gather(*(source.get() for _ in range(5))))

    assert {c.authorization for c in asyncio.run(main())} == {"Bearer a"}
    assert asyncio.run(source.get()).authorization == "Bearer a", "another loop, same answer"
    assert child.calls == [("kc", "ctx")]
    assert credentials.shared("kc") is credentials.shared("kc")
    assert credentials.shared("kc") is not credentials.shared("kc", "ctx")


def test_the_child_runs_again_near_the_expiry_at_most_every_interval() -> None:
    clock = Clock()
    child = FakeChild(
        creds("Bearer a", expires=clock.now + 100),
        creds("Bearer b", expires=clock.now + 5),  # a plugin whose token is near its end
    )
    source = source_for(child, clock, expiry_margin=10.0, rerun_interval=5.0)
    assert asyncio.run(source.get()).authorization == "Bearer a"
    clock.now += 89
    assert asyncio.run(source.get()).authorization == "Bearer a"
    clock.now += 1  # 10 s before the expiry
    assert asyncio.run(source.get()).authorization == "Bearer b"
    assert len(child.calls) == 2
    clock.now += 4.9
    asyncio.run(source.get())
    assert len(child.calls) == 2, "not again within the rerun interval"
    clock.now += 0.1
    asyncio.run(source.get())
    assert len(child.calls) == 3


def test_an_in_cluster_token_is_reread_at_most_every_minute(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    clock = Clock()
    child = FakeChild(creds("Bearer one", token_file=str(token)))
    source = source_for(child, clock)
    token.write_text("two\n")
    assert asyncio.run(source.get()).authorization == "Bearer one"
    clock.now += 59.9
    assert asyncio.run(source.get()).authorization == "Bearer one"
    clock.now += 0.1
    assert asyncio.run(source.get()).authorization == "Bearer two"
    token.unlink()  # unreadable for a while: the token in hand is kept
    clock.now += 60
    assert asyncio.run(source.get()).authorization == "Bearer two"
    assert len(child.calls) == 1


def test_a_401_renews_once_and_a_stale_refusal_waits() -> None:
    clock = Clock()
    child = FakeChild(creds("Bearer a"), creds("Bearer b"), creds("Bearer b", expires=9e9))
    source = source_for(child, clock, renew_interval=30.0)
    first = asyncio.run(source.get())
    renewed = asyncio.run(source.renew(first))
    assert renewed is not None
    assert renewed.authorization == "Bearer b"
    assert asyncio.run(source.renew(first)) is renewed, "a second 401 of the old one: no run"
    assert len(child.calls) == 2
    assert asyncio.run(source.renew(renewed)) is None, "only a new expiry: refused again"
    assert len(child.calls) == 3
    refused = asyncio.run(source.get())
    assert asyncio.run(source.renew(refused)) is None
    assert len(child.calls) == 3, "the same refusal within renew_interval runs nothing"
    clock.now += 30
    asyncio.run(source.renew(refused))
    assert len(child.calls) == 4


def test_a_child_failure_is_not_kept(tmp_path: Path) -> None:
    calls = []

    async def failing(kubeconfig: str | None, context: str | None) -> Credentials:
        calls.append(kubeconfig)
        raise CredentialsError("kubeconfig kc does not exist")

    source = CredentialSource("kc", runner=failing)
    for _ in range(2):
        with pytest.raises(CredentialsError, match="does not exist"):
            asyncio.run(source.get())
    assert len(calls) == 2


def test_child_argv_is_this_interpreter_and_module() -> None:
    assert child_argv("kc", "ctx") == [
        sys.executable,
        "-m",
        "k8s_watcher.credentials",
        "--kubeconfig",
        "kc",
        "--context",
        "ctx",
    ]
    assert child_argv(None, None) == [sys.executable, "-m", "k8s_watcher.credentials"]


def test_from_json_refuses_what_is_not_credentials() -> None:
    for text in ("", "[]", '{"server": 1}', "{"):
        with pytest.raises(CredentialsError, match="printed no credentials"):
            Credentials.from_json(text)


def test_a_child_started_early_is_the_first_answer(tmp_path: Path) -> None:
    """The speaker starts the child before its own imports; the first get() collects it
    (the runner is not used) and a failure there is the same one line."""
    path = exec_kubeconfig(tmp_path, token="abc")
    child = FakeChild(creds("Bearer never"))
    source = CredentialSource(path, runner=child)
    source.start_early()
    source.start_early()  # once
    assert asyncio.run(source.get()).authorization == "Bearer abc"
    assert (source.runs, child.calls) == (1, [])
    missing = CredentialSource(str(tmp_path / "nope"), runner=child)
    missing.start_early()
    with pytest.raises(CredentialsError, match="does not exist"):
        asyncio.run(missing.get())
    assert child.calls == []


def test_a_child_started_early_and_never_collected_ends_with_its_parent(tmp_path: Path) -> None:
    """A speaker that stops on a bad config before it needs credentials leaves no child."""
    path = exec_kubeconfig(tmp_path)
    script = (
        "import sys\n"
        "from k8s_watcher.credentials import CredentialSource\n"
        "source = CredentialSource(sys.argv[1])\n"
        "source.start_early()\n"
        "print(source._early[0].pid)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, path],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    cmdline = Path(f"/proc/{int(done.stdout)}/cmdline")
    # Reaped by its parent's exit handler: nothing under /proc (not even a zombie), or
    # the number already belongs to another process.
    with contextlib.suppress(FileNotFoundError):
        assert b"k8s_watcher.credentials" not in cmdline.read_bytes()


def test_a_failing_rerun_keeps_the_credentials_in_hand() -> None:
    """A plugin that breaks after working: the expiry re-run and the 401 renewal keep the
    old credentials (the API's refusal is retried like any other), at the usual pace."""
    clock = Clock()
    held = creds("Bearer a", expires=clock.now + 5)
    answers: list[Credentials | None] = [held, None, None]

    async def child(kubeconfig: str | None, context: str | None) -> Credentials:
        answer = answers.pop(0)
        if answer is None:
            raise CredentialsError("exec: process returned 1")
        return answer

    source = CredentialSource("kc", runner=child, clock=clock, wall=clock, rerun_interval=5.0)
    assert asyncio.run(source.get()) is held
    clock.now += 5
    assert asyncio.run(source.get()) is held, "the expiry re-run failed: kept"
    assert len(answers) == 1
    assert asyncio.run(source.get()) is held
    assert len(answers) == 1, "not again within the rerun interval"
    assert asyncio.run(source.renew(held)) is None, "the 401 stands"
    assert answers == []
