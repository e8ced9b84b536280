"""k8s_watcher's pure parts: error classification and where credentials come from."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from k8s_watcher.client import KubeClient, object_path
from k8s_watcher.credentials import kubeconfig_candidates, resolve_kubeconfig
from k8s_watcher.errors import (
    ApiUnavailable,
    Conflict,
    CredentialsError,
    MalformedResponse,
    NotFound,
    Outcome,
    RequestRejected,
    ResourceExpired,
    classify,
    error_from_status,
    parse_retry_after,
)


@pytest.mark.parametrize(
    ("status", "body", "cls", "outcome"),
    [
        pytest.param(
            410,
            {"reason": "Expired", "code": 410},
            ResourceExpired,
            Outcome.RESYNC,
            id="410-resync",
        ),
        pytest.param(
            0,
            {"kind": "Status", "code": 410, "reason": "Expired"},
            ResourceExpired,
            Outcome.RESYNC,
            id="watch-error-event-410",
        ),
        pytest.param(
            0,
            {"kind": "Status", "code": 500, "reason": "InternalError"},
            ApiUnavailable,
            Outcome.RETRY,
            id="watch-error-event-500",
        ),
        pytest.param(
            429, b'{"reason":"TooManyRequests"}', ApiUnavailable, Outcome.RETRY, id="429-retry"
        ),
        pytest.param(503, b"", ApiUnavailable, Outcome.RETRY, id="503-retry"),
        pytest.param(409, {"reason": "Conflict"}, Conflict, Outcome.RETRY, id="409"),
        pytest.param(404, b"not json", NotFound, Outcome.GIVE_UP, id="404"),
        pytest.param(403, {"reason": "Forbidden"}, RequestRejected, Outcome.GIVE_UP, id="403"),
        pytest.param(422, {"reason": "Invalid"}, RequestRejected, Outcome.GIVE_UP, id="422"),
        pytest.param(302, None, MalformedResponse, Outcome.RETRY, id="redirect"),
    ],
)
def test_error_classification(
    status: int, body: object, cls: type[Exception], outcome: Outcome
) -> None:
    exc = error_from_status(status, body, what="list services")  # type: ignore[arg-type]
    assert type(exc) is cls
    assert classify(exc) is outcome
    assert exc.message.startswith("list services: HTTP")


def test_error_message_carries_reason_and_message() -> None:
    exc = error_from_status(
        409, {"reason": "Conflict", "message": "the object has been modified"}, what="put lease"
    )
    assert exc.message == "put lease: HTTP 409 Conflict: the object has been modified"
    assert exc.reason == "Conflict"


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("1", 1.0, id="int"),
        pytest.param(" 2.5 ", 2.5, id="float"),
        pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", None, id="http-date-ignored"),
        pytest.param("-1", None, id="negative"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds
    assert error_from_status(429, b"", retry_after=header).retry_after == seconds


def test_cancelled_error_is_never_classified() -> None:
    with pytest.raises(TypeError):
        classify(asyncio.CancelledError())


def test_kubeconfig_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert kubeconfig_candidates("/explicit", {"KUBECONFIG": "/env", "HOME": str(home)}) == [
        "/explicit"
    ]
    assert kubeconfig_candidates(None, {"KUBECONFIG": "/a:/b", "HOME": str(home)}) == ["/a:/b"]
    assert kubeconfig_candidates(None, {"HOME": str(home)}) == [], "in-cluster"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    assert kubeconfig_candidates(None, {"HOME": str(home)}) == [str(home / ".kube" / "config")]


def test_missing_explicit_kubeconfig_is_an_error_not_in_cluster(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="does not exist"):
        resolve_kubeconfig(str(tmp_path / "nope"), {})
    existing = tmp_path / "kc"
    existing.write_text("{}")
    listed = f"{tmp_path / 'nope'}:{existing}"
    assert resolve_kubeconfig(None, {"KUBECONFIG": listed}) == listed
    assert resolve_kubeconfig(None, {"HOME": str(tmp_path)}) is None


async def test_lazy_client_reports_missing_credentials_on_first_request(tmp_path: Path) -> None:
    client = KubeClient.lazy(str(tmp_path / "missing"))
    with pytest.raises(CredentialsError):
        await client.request("GET", "/api/v1/services")
    await client.close()


@pytest.mark.parametrize(
    ("args", "path"),
    [
        pytest.param(("v1", "services"), "/api/v1/services", id="core-all"),
        pytest.param(
            ("coordination.k8s.io/v1", "leases"), "/apis/coordination.k8s.io/v1/leases", id="group"
        ),
    ],
)
def test_object_path(args: tuple[str, str], path: str) -> None:
    assert object_path(*args) == path


def test_object_path_quotes_names() -> None:
    assert (
        object_path("v1", "events", namespace="kube-system", name="a/b")
        == "/api/v1/namespaces/kube-system/events/a%2Fb"
    )
