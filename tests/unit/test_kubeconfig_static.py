"""k8s_watcher.kubeconfig: a static kubeconfig read in the process gives exactly what the
official loader gives (run here in-process through resolve_here, as the child runs it),
and everything else is left to the loader (None), including every kubeconfig the loader
refuses, so that its one-line error is the one the user sees."""

from __future__ import annotations

import asyncio
import base64
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s_watcher import credentials
from k8s_watcher.credentials import Credentials, CredentialSource, resolve_here
from k8s_watcher.errors import CredentialsError
from k8s_watcher.kubeconfig import read_static

CA = "-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write(
    directory: Path,
    user: dict[str, Any] | None,
    cluster: dict[str, Any],
    context: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """A kubeconfig in `directory` with PEM and token files beside it (relative names)."""
    (directory / "ca.crt").write_text(CA)
    (directory / "client.crt").write_text(CERT)
    (directory / "client.key").write_text(KEY)
    (directory / "token").write_text("from-file\n")
    chosen = {"cluster": "c", "user": "u"} if context is None else context
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [
            {"name": "main", "context": chosen},
            {"name": "other", "context": {"cluster": "c"}},
        ],
        "current-context": "main",
    }
    if user is not None:
        doc["users"] = [{"name": "u", "user": user}]
    doc.update(extra or {})
    path = directory / "config"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def official(path: str, context: str | None = None) -> Credentials | None:
    """What the child would print; None where it refuses the kubeconfig."""
    try:
        return resolve_here(path, context, {})
    except CredentialsError:
        return None


HTTPS = {"server": "https://127.0.0.1:6443/", "certificate-authority": "ca.crt"}

STATIC = {
    "token": ({"token": "abc"}, HTTPS),
    "token file, relative": ({"tokenFile": "token"}, HTTPS),
    "token before token file": ({"token": "abc", "tokenFile": "token"}, HTTPS),
    "empty token, then basic": ({"token": "", "username": "a", "password": "b"}, HTTPS),
    "basic auth": ({"username": "admin", "password": "s3cret"}, HTTPS),
    "client certificate files": (
        {"client-certificate": "client.crt", "client-key": "client.key"},
        HTTPS,
    ),
    "data fields over files": (
        {
            "client-certificate-data": b64(CERT),
            "client-key-data": b64(KEY),
            "client-certificate": "missing.crt",
        },
        {"server": "https://k:443", "certificate-authority-data": b64(CA)},
    ),
    "empty data field": ({"token": "t"}, {"server": "https://k", "certificate-authority-data": ""}),
    "plain http ignores the TLS files": (
        {"token": "t", "client-certificate": "missing.crt"},
        {"server": "http://127.0.0.1:8080", "certificate-authority": "missing.crt"},
    ),
    "insecure, server name, proxy": (
        {"token": "t"},
        {
            "server": "https://10.0.0.1",
            "insecure-skip-tls-verify": True,
            "tls-server-name": "kubernetes",
            "proxy-url": "http://proxy:3128",
        },
    ),
    "secure said explicitly": ({"token": "t"}, {**HTTPS, "insecure-skip-tls-verify": False}),
    "no user section, plain http": (None, {"server": "http://127.0.0.1:8080"}),
    "empty user": ({}, HTTPS),
}


@pytest.mark.parametrize("case", list(STATIC))
def test_a_static_kubeconfig_is_read_as_the_official_loader_reads_it(
    tmp_path: Path, case: str
) -> None:
    user, cluster = STATIC[case]
    path = write(tmp_path, user, cluster)
    expected = official(path)
    assert expected is not None
    assert read_static(path, None) == expected


def test_the_context_chooses_the_cluster_user_and_namespace(tmp_path: Path) -> None:
    context = {"cluster": "c", "user": "u", "namespace": "team"}
    http = {"server": "http://127.0.0.1:8080"}  # the loader needs a user for https
    path = write(tmp_path, {"token": "abc"}, http, context=context)
    main = read_static(path, None)
    assert main is not None
    assert main == official(path)
    assert (main.namespace, main.authorization) == ("team", "Bearer abc")
    other = read_static(path, "other")
    assert other is not None
    assert other == official(path, "other")
    assert (other.namespace, other.authorization) == (None, None)


def test_a_user_the_context_names_but_the_file_lacks_means_no_credentials(
    tmp_path: Path,
) -> None:
    http = {"server": "http://127.0.0.1:8080"}  # the loader needs a user for https
    path = write(tmp_path, {"token": "abc"}, http, context={"cluster": "c", "user": "nobody"})
    creds = read_static(path, None)
    assert creds is not None
    assert creds == official(path)
    assert creds.authorization is None


NOT_STATIC = {
    "exec plugin": ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}},),
    "auth provider": ({"auth-provider": {"name": "oidc", "config": {}}},),
    "missing CA file": ({"token": "t"}, {"server": "https://k", "certificate-authority": "no"}),
    "missing token file": ({"tokenFile": "no"},),
    "no server": ({"token": "t"}, {"certificate-authority": "ca.crt"}),
    "null server name": ({"token": "t"}, {**HTTPS, "tls-server-name": None}),
    "no user section, https": (None,),
    "token of another type": ({"token": 12345},),
}


@pytest.mark.parametrize("case", list(NOT_STATIC))
def test_what_is_not_static_is_left_to_the_official_loader(tmp_path: Path, case: str) -> None:
    user, *cluster = NOT_STATIC[case]
    path = write(tmp_path, user, cluster[0] if cluster else HTTPS)
    assert read_static(path, None) is None


@pytest.mark.parametrize(
    "broken",
    [
        "not: [yaml",
        "",
        "- a list\n",
        "current-context: main\n",
        yaml.safe_dump({"current-context": "x", "contexts": [{"name": "x"}]}),
        yaml.safe_dump({"current-context": "x", "contexts": [{"context": {"cluster": "c"}}]}),
    ],
)
def test_a_kubeconfig_the_loader_refuses_is_left_to_it(tmp_path: Path, broken: str) -> None:
    """The child's message is the one the user sees: the loader refuses these, and the
    read here never answers for them."""
    path = tmp_path / "config"
    path.write_text(broken)
    assert official(str(path)) is None
    assert read_static(str(path), None) is None


def test_a_missing_context_or_several_files_are_left_to_the_loader(tmp_path: Path) -> None:
    path = write(tmp_path, {"token": "t"}, HTTPS)
    assert official(path, "nope") is None
    assert read_static(path, "nope") is None
    assert read_static(f"{path}:{path}", None) is None  # KUBECONFIG's merge of several


# ---------------------------------------------------------------- property

TEXT = st.sampled_from(["", "t", "abc", "a b"])
# Mostly files that exist, so that most examples are kubeconfigs both sides answer for.
FILES = st.sampled_from(["ca.crt", "client.crt", "client.key", "token"] * 3 + ["missing", ""])
USER_KEYS = {
    "token": TEXT,
    "tokenFile": FILES,
    "username": TEXT,
    "password": TEXT,
    "client-certificate": FILES,
    "client-key": FILES,
    "client-certificate-data": st.sampled_from(["", b64(CERT), "%%"]),
    "client-key-data": st.sampled_from(["", b64(KEY)]),
}
CLUSTER_KEYS = {
    "certificate-authority": FILES,
    "certificate-authority-data": st.sampled_from(["", b64(CA), b64(CA), "%%"]),
    "insecure-skip-tls-verify": st.sampled_from([True, False, False, None, "yes"]),
    "tls-server-name": st.sampled_from(["", "kubernetes", "kubernetes", None]),
    "proxy-url": st.sampled_from(["", "http://p:1", "http://p:1", None]),
}
SERVERS = st.sampled_from(
    ["https://127.0.0.1:6443", "http://127.0.0.1:1/", "https://k/"] * 2 + ["", None]
)


def sections(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=keys)


@settings(max_examples=150, deadline=None)
@given(
    user=st.none() | sections(USER_KEYS),
    server=SERVERS,
    cluster=sections(CLUSTER_KEYS),
    context=st.sampled_from(
        [None, {"cluster": "c"}, {"cluster": "c", "user": "u"}, {"cluster": "c", "user": "x"}]
    ),
    namespace=st.sampled_from([None, "", "team"]),
)
def test_any_read_here_equals_the_official_loaders(
    user: dict[str, Any] | None,
    server: str | None,
    cluster: dict[str, Any],
    context: dict[str, Any] | None,
    namespace: str | None,
) -> None:
    """Over generated kubeconfigs: the read here answers only where the loader answers,
    and then with the very same credentials."""
    if server is not None:
        cluster = {**cluster, "server": server}
    chosen = dict(context or {"cluster": "c", "user": "u"})
    if namespace is not None:
        chosen["namespace"] = namespace
    with tempfile.TemporaryDirectory() as directory:
        path = write(Path(directory), user, cluster, context=chosen)
        here = read_static(path, None)
        if here is not None:
            assert here == official(path)


def test_a_static_kubeconfig_starts_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The speaker's early start and its first get read a static kubeconfig in process."""

    def no_child(*args: Any) -> list[str]:
        raise AssertionError("a static kubeconfig started the credentials child")

    monkeypatch.setattr(credentials, "child_argv", no_child)
    path = write(tmp_path, {"token": "abc"}, HTTPS)
    source = CredentialSource(path)
    source.start_early()
    creds = asyncio.run(source.get())
    assert (creds.authorization, creds.ca_data, source.runs) == ("Bearer abc", CA, 1)
