"""Credentials and raw JSON requests on top of the official asyncio client.

`kubernetes.aio` supplies what is tedious to get right (kubeconfig parsing, exec and OIDC
plugins, in-cluster service-account tokens and CA, TLS, bearer-token refresh, the aiohttp
session). We do not use its generated models: every request here sends and receives plain
JSON dicts, because (a) the informers convert API objects into bgpd.model at this boundary
and the generated models would be built only to be thrown away (measured in k8s-notes.md:
most of the per-event CPU of the stock Watch helper is model deserialisation), and (b) a
raw response gives us the status code and Retry-After header to classify errors ourselves.

Credentials are looked up like kubectl and client-go: an explicit --kubeconfig, then
$KUBECONFIG (a colon-separated list), then ~/.kube/config, then the in-cluster service
account. This module must not leak client types: callers get dicts and our errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import aiohttp

from bgpd.logs import log
from k8s_watcher.errors import (
    ApiUnavailable,
    CredentialsError,
    MalformedResponse,
    error_from_status,
)

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
#: Seconds to wait for a TCP (and TLS) connection before calling the API unreachable.
CONNECT_TIMEOUT = 10.0
#: Total seconds for one ordinary (non-watch) request.
REQUEST_TIMEOUT = 60.0
#: In-cluster namespace file, read for the default Lease namespace.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

Query = Sequence[tuple[str, str]]


def kubeconfig_candidates(explicit: str | None, environ: Mapping[str, str]) -> list[str]:
    """Kubeconfig paths to try, in kubectl's order; empty means "use in-cluster"."""
    if explicit:
        return [explicit]
    env = environ.get("KUBECONFIG", "")
    if env:
        return [env]
    home = Path(environ.get("HOME", str(Path.home()))) / ".kube" / "config"
    return [str(home)] if home.exists() else []


def resolve_kubeconfig(explicit: str | None, environ: Mapping[str, str]) -> str | None:
    """The kubeconfig path (list) to load, None for in-cluster; CredentialsError if an
    explicitly named file is missing (a typo must not silently fall back to in-cluster)."""
    candidates = kubeconfig_candidates(explicit, environ)
    if not candidates:
        return None
    path = candidates[0]
    if not any(Path(os.path.expanduser(p)).exists() for p in path.split(":") if p):
        raise CredentialsError(f"kubeconfig {path} does not exist")
    return path


async def load_configuration(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """A `kubernetes.aio.client.Configuration` from the first credentials that exist.

    Raises CredentialsError when none is usable, so the CLI can say so and exit instead of
    retrying forever: a missing kubeconfig does not fix itself.
    """
    from kubernetes.aio import client as _kclient
    from kubernetes.aio import config as _kconfig

    # The client is only partly typed; keep its surface Any behind this module.
    kclient: Any = _kclient
    kconfig: Any = _kconfig
    path = resolve_kubeconfig(kubeconfig, os.environ if environ is None else environ)
    # type.__call__ avoids Configuration's copy-the-process-default behaviour: every
    # client we build has its own settings, so tests can run several side by side.
    configuration = type.__call__(kclient.Configuration)
    try:
        if path is not None:
            await kconfig.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
            log(logger, logging.DEBUG, "k8s.credentials", source="kubeconfig", path=path)
        else:
            kconfig.load_incluster_config(client_configuration=configuration)
            log(logger, logging.DEBUG, "k8s.credentials", source="in-cluster")
    except Exception as exc:  # the client's loader raises anything
        # ConfigException, or (a garbage kubeconfig, an unreadable token or CA file) a
        # YAMLError, OSError, ValueError, KeyError, TypeError... from inside the client:
        # all one credentials problem, said on one line naming the file.
        where = f"kubeconfig {path}" if path is not None else "in-cluster service account"
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise CredentialsError(f"cannot load Kubernetes credentials from {where}: {cause}") from exc
    return configuration


def default_namespace(environ: Mapping[str, str] | None = None) -> str:
    """The namespace we run in: $POD_NAMESPACE, the service account's, else "default"."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        text = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        return "default"
    return text or "default"


def object_path(
    group_version: str, resource: str, *, namespace: str | None = None, name: str | None = None
) -> str:
    """The REST path of a collection or object: ("v1", "services", ns, name) ->
    /api/v1/namespaces/ns/services/name; groups live under /apis/."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    if namespace is not None:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{resource}"
    if name is not None:
        base += f"/{quote(name, safe='')}"
    return base


class KubeClient:
    """One API client: raw JSON requests and watch streams, with our errors.

    An async context manager, because it owns an aiohttp session that must be closed on
    the loop that opened it.
    """

    def __init__(self, configuration: Any = None, *, kubeconfig: str | None = None) -> None:
        """With a configuration, ready at once; without, credentials are loaded (from
        `kubeconfig` or the default places) on the first request, so synchronous code can
        build a client that async code connects."""
        self._configuration = configuration
        self._kubeconfig = kubeconfig
        self._api: Any = None
        self._lock = asyncio.Lock()
        if configuration is not None:
            self._api = self._make_api(configuration)

    @staticmethod
    def _make_api(configuration: Any) -> Any:
        from kubernetes.aio import client as kclient

        api = kclient.ApiClient(configuration)
        api.user_agent = "kube-bgpd"
        return api

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, *, context: str | None = None
    ) -> KubeClient:
        """Load credentials (see load_configuration; `context`: the kubeconfig context
        to use instead of its current one) and build a client."""
        return cls(await load_configuration(kubeconfig, context=context))

    @classmethod
    def lazy(cls, kubeconfig: str | None = None) -> KubeClient:
        """A client that loads its credentials on first use (CredentialsError then)."""
        return cls(kubeconfig=kubeconfig)

    async def _ensure(self) -> Any:
        if self._api is None:
            async with self._lock:
                if self._api is None:
                    self._configuration = await load_configuration(self._kubeconfig)
                    self._api = self._make_api(self._configuration)
        return self._api

    @property
    def host(self) -> str:
        return "" if self._configuration is None else str(self._configuration.host)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        client_timeout: aiohttp.ClientTimeout,
        what: str,
    ) -> aiohttp.ClientResponse:
        """Send a request; return the open response (the caller reads and releases it)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        api = await self._ensure()
        try:
            params = await api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query) or None,
                header_params=headers,
                body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
            )
            method_, url, header_params, body_, post_params = params
            rest = await api.call_api(
                method_,
                url,
                header_params=header_params,
                body=body_,
                post_params=post_params,
                _request_timeout=client_timeout,
                _preload_content=False,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
        response: aiohttp.ClientResponse = rest.response
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        request_timeout: float = REQUEST_TIMEOUT,
        what: str = "",
    ) -> dict[str, Any]:
        """One request; the decoded JSON object of a 2xx answer, else our error."""
        what = what or f"{method} {path}"
        client_timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=CONNECT_TIMEOUT)
        response = await self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            client_timeout=client_timeout,
            what=what,
        )
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise error_from_status(
                response.status,
                raw,
                retry_after=response.headers.get("Retry-After"),
                what=what,
            )
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise MalformedResponse(f"{what}: response is not JSON") from exc
        if not isinstance(doc, dict):
            raise MalformedResponse(f"{what}: response is not a JSON object")
        return doc

    @contextlib.asynccontextmanager
    async def stream_lines(
        self,
        path: str,
        *,
        query: Query,
        total_timeout: float,
        what: str,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a watch (or any line-delimited) stream; yields an iterator of raw lines.

        `total_timeout` bounds the whole stream: the server ends a watch cleanly after
        its timeoutSeconds, so a stream still open a little later is a dead TCP connection
        that no keepalive told us about. The response is closed (not returned to the
        pool) on exit, because a half-read chunked body cannot be reused.
        """
        client_timeout = aiohttp.ClientTimeout(total=total_timeout, sock_connect=CONNECT_TIMEOUT)
        response = await self._send(
            "GET", path, query=query, client_timeout=client_timeout, what=what
        )
        try:
            if response.status != 200:
                try:
                    raw = await response.read()
                except (aiohttp.ClientError, TimeoutError, OSError):
                    raw = b""
                raise error_from_status(
                    response.status,
                    raw,
                    retry_after=response.headers.get("Retry-After"),
                    what=what,
                )
            yield _lines(response, what)
        finally:
            response.close()


async def _lines(response: aiohttp.ClientResponse, what: str) -> AsyncIterator[bytes]:
    """Lines of a chunked response; network failures become ApiUnavailable."""
    content = response.content
    while True:
        try:
            line = await content.readline()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            # ValueError: aiohttp's "Line is too long" when an event exceeds the buffer.
            raise ApiUnavailable(f"{what}: stream broken: {type(exc).__name__}: {exc}") from exc
        if not line:
            return
        yield line
