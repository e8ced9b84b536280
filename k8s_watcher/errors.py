"""kube-bgpd's own errors for talking to the Kubernetes API, and how to react to each.

The HTTP library (aiohttp) raises its own exception types; callers outside this package
must not depend on them, because the client can be replaced.
Every failure is turned into one of the classes below (``raise ... from exc`` keeps the
cause), and each class says what the caller should do with it, like MetalLB's SyncState:

* retry later with back-off (API down, 429, 5xx, timeouts),
* resync: the watch position is gone (410 Gone), list again and diff,
* give up on this request (4xx that will not change by retrying: 400, 403, 404, 422),
* conflict: someone else wrote first (409); re-read and decide again.

This module must not import the client library: it classifies HTTP status codes and
standard exceptions only, so it stays importable without the heavy client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """What the caller does after an error."""

    RETRY = "retry"
    RESYNC = "resync"
    GIVE_UP = "giveUp"


class KubernetesError(Exception):
    """Base of every error this package raises about the API."""

    outcome: Outcome = Outcome.GIVE_UP

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: HTTP status code; 0 when the request never got an answer.
        self.status = status
        #: The Status object's `reason` (e.g. "Expired", "Conflict"), if the server sent one.
        self.reason = reason
        #: Seconds from a Retry-After header (429, 503); None if absent.
        self.retry_after = retry_after


class CredentialsError(KubernetesError):
    """No usable kubeconfig or in-cluster credentials: a configuration problem, not transient."""


class ApiUnavailable(KubernetesError):
    """The API could not be reached or asked us to come back later (network, 429, 5xx)."""

    outcome = Outcome.RETRY


class ResourceExpired(KubernetesError):
    """410 Gone: the resourceVersion we resume from was compacted; list again."""

    outcome = Outcome.RESYNC


class Conflict(KubernetesError):
    """409: AlreadyExists or a stale resourceVersion on write; re-read, then decide again."""

    outcome = Outcome.RETRY


class NotFound(KubernetesError):
    """404: the object (or the API path) does not exist."""


class RequestRejected(KubernetesError):
    """Any other 4xx: our request is wrong or forbidden; retrying the same request won't help."""


class MalformedResponse(KubernetesError):
    """The server answered 2xx with something that is not the JSON we expect."""

    outcome = Outcome.RETRY


def classify(exc: BaseException) -> Outcome:
    """The reaction to any exception raised while talking to the API.

    CancelledError is never an API error: callers must re-raise it, so asking is a bug.
    """
    if isinstance(exc, asyncio.CancelledError):
        raise TypeError("CancelledError is not an API error; re-raise it") from exc
    if isinstance(exc, KubernetesError):
        return exc.outcome
    return Outcome.GIVE_UP


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (RFC 9110 10.2.3); the API server never sends the date form."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_status(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    *,
    retry_after: str | None = None,
    what: str = "",
) -> KubernetesError:
    """Build our error from an HTTP status and the body the API server sent (a Status object).

    `what` names the request (e.g. "list services") so messages say which call failed.
    """
    doc: Mapping[str, Any] = {}
    if isinstance(body, Mapping):
        doc = body
    elif body:
        try:
            loaded = json.loads(body)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            doc = loaded
    code = doc.get("code")
    if isinstance(code, int) and code and status in (0, 200):
        # A Status inside a 200 response: the watch stream's ERROR event.
        status = code
    reason = str(doc.get("reason") or "")
    message = str(doc.get("message") or (body if isinstance(body, str) else "") or "")
    text = f"{what}: HTTP {status}" if what else f"HTTP {status}"
    if reason:
        text += f" {reason}"
    if message:
        text += f": {message}"
    kwargs: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "retry_after": parse_retry_after(retry_after),
    }
    cls: type[KubernetesError]
    if status == 410:
        cls = ResourceExpired
    elif status == 409:
        cls = Conflict
    elif status == 404:
        cls = NotFound
    elif status == 429 or status >= 500 or status == 0:
        cls = ApiUnavailable
    elif 400 <= status < 500:
        cls = RequestRejected
    else:
        cls = MalformedResponse
    return cls(text, **kwargs)
