"""k8s_watcher.credentials.in_cluster: a pod's service account read in the daemon itself
(https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, token, ca.crt, namespace),
its one-line errors, and that in a pod no credentials child is ever started."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from k8s_watcher import credentials
from k8s_watcher.credentials import IN_CLUSTER, CredentialSource, in_cluster, resolve_here
from k8s_watcher.errors import CredentialsError

CA = "-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n"
TOKEN = "tok\n"  # the kubelet's file may end in a newline
ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def account(tmp_path: Path, *, token: str | None = TOKEN, ca: str | bytes | None = CA) -> Path:
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    if token is not None:
        (directory / "token").write_text(token)
    if isinstance(ca, bytes):
        (directory / "ca.crt").write_bytes(ca)
    elif ca is not None:
        (directory / "ca.crt").write_text(ca)
    return directory


def in_a_pod(monkeypatch: pytest.MonkeyPatch, home: Path, directory: Path) -> None:
    """This process as in a pod: no kubeconfig, the Service's variables, `directory` as
    the mounted account."""
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT", directory)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(home))
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def test_the_account_as_kubernetes_documents_it(tmp_path: Path) -> None:
    directory = account(tmp_path)
    (directory / "namespace").write_text("kube-system")
    creds = in_cluster(ENV, directory)
    assert creds.source == IN_CLUSTER
    assert creds.server == "https://10.96.0.1:443"
    assert creds.authorization == "Bearer tok", "the file's newline is not part of it"
    assert creds.token_file == str(directory / "token"), "re-read when rotated"
    assert creds.ca_data == CA
    assert creds.verify
    assert creds.namespace == "kube-system"
    assert (creds.expires, creds.cert_data, creds.key_data) == (None, None, None)


@pytest.mark.parametrize(
    ("host", "server"),
    [
        ("fd00:10:96::1", "https://[fd00:10:96::1]:6443"),
        ("fe80::1%eth0", "https://[fe80::1%eth0]:6443"),
        ("kubernetes.default.svc", "https://kubernetes.default.svc:6443"),
    ],
)
def test_an_ipv6_service_host_is_bracketed(tmp_path: Path, host: str, server: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "6443"}
    assert in_cluster(env, account(tmp_path)).server == server


def test_without_a_namespace_file_there_is_no_namespace(tmp_path: Path) -> None:
    assert in_cluster(ENV, account(tmp_path)).namespace is None


@pytest.mark.parametrize(
    ("env", "files", "reason"),
    [
        ({}, {}, "Service host/port is not set."),
        ({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, {}, "Service host/port is not set."),
        ({**ENV, "KUBERNETES_SERVICE_PORT": ""}, {}, "Service host/port is set but empty."),
        (ENV, {"token": None}, "Service token file does not exist."),
        (ENV, {"token": " \n"}, "Token file exists but empty."),
        (ENV, {"ca": None}, "Service certification file does not exist."),
        (ENV, {"ca": ""}, "Cert file exists but empty."),
        (ENV, {"ca": b"\xff\xfe"}, "'utf-8' codec can't decode byte 0xff"),
    ],
    ids=[
        "no-env",
        "no-port",
        "empty-port",
        "no-token",
        "empty-token",
        "no-ca",
        "empty-ca",
        "unreadable-ca",
    ],
)
def test_what_is_missing_on_one_line(
    tmp_path: Path, env: dict[str, str], files: dict[str, Any], reason: str
) -> None:
    with pytest.raises(CredentialsError) as failed:
        in_cluster(env, account(tmp_path, **files))
    message = failed.value.message
    assert message.startswith(f"cannot load Kubernetes credentials from {IN_CLUSTER}: {reason}")
    assert "\n" not in message


def test_the_child_reads_the_account_the_same_way(tmp_path: Path) -> None:
    """`python -m k8s_watcher.credentials` without a kubeconfig gives the same answer."""
    directory = account(tmp_path)
    env = {**ENV, "HOME": str(tmp_path)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(credentials, "SERVICE_ACCOUNT", directory)
        assert resolve_here(None, None, env) == in_cluster(env, directory)


def test_in_a_pod_no_child_is_ever_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig anywhere: start_early starts nothing and the first get reads the
    account here; a 401 re-reads the token file, still without a process."""
    directory = account(tmp_path)

    def no_process(*args: Any, **kw: Any) -> Any:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(asyncio, "create_subprocess_exec", no_process)
    in_a_pod(monkeypatch, tmp_path, directory)
    source = CredentialSource()
    source.start_early()
    first = asyncio.run(source.get())
    assert (first.source, first.authorization) == (IN_CLUSTER, "Bearer tok")
    (directory / "token").write_text("rotated\n")
    renewed = asyncio.run(source.renew(first))
    assert renewed is not None
    assert renewed.authorization == "Bearer rotated"
    assert source.runs == 1


def test_in_a_pod_a_missing_account_is_said_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_a_pod(monkeypatch, tmp_path, tmp_path / "none")
    source = CredentialSource()
    source.start_early()
    with pytest.raises(CredentialsError, match="Service token file does not exist"):
        asyncio.run(source.get())
