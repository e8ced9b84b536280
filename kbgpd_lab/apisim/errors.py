"""API errors of the simulator, rendered as the `Status` objects kube-apiserver returns.

Reasons and messages follow k8s.io/apimachinery/pkg/api/errors so that clients which
match on `reason` (the official client's ApiException, kubectl's messages) behave as
against a real server. This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kbgpd_lab.apisim.schema import FieldError

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A failed API call: HTTP code, Status reason and message (and optional details)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        name: str | None = None,
        group: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details: dict[str, Any] = {}
        if name is not None:
            self.details["name"] = name
        if group is not None:
            self.details["group"] = group
        if kind is not None:
            self.details["kind"] = kind

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
    }
    if message:
        doc["message"] = message
    if reason:
        doc["reason"] = reason
    if details:
        doc["details"] = details
    doc["code"] = code
    return doc


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{_qualified(resource, group)} "{name}" not found',
        name=name,
        group=group,
        kind=resource,
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{_qualified(resource, group)} "{name}" already exists',
        reason="AlreadyExists",
        name=name,
        group=group,
        kind=resource,
    )


def conflict(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        reason="Conflict",
        name=name,
        group=group,
        kind=resource,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def invalid(kind: str, group: str, name: str, message: str) -> ApiError:
    return ApiError(
        422,
        f'{_qualified(kind, group)} "{name}" is invalid: {message}',
        name=name,
        group=group,
        kind=kind,
    )


def invalid_fields(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> ApiError:
    """422 Invalid listing field errors, as `errors.NewInvalid` (one, or `[a, b]`)."""
    text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    error = invalid(kind, group, name, text)
    error.details["causes"] = [
        {"reason": e.reason, "message": e.body(), "field": e.field} for e in errors
    ]
    return error


def expired(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource
