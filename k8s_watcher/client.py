"""Raw JSON requests and watch streams to the API server, over aiohttp.

Credentials come from k8s_watcher.credentials (an in-cluster service account read here;
a kubeconfig, exec and OIDC plugins through the official client's loaders in a
short-lived child process); this process never imports `kubernetes`, whose package
loads the whole generated client (about 21 MiB per speaker). Requests send and receive
plain JSON dicts, because (a) the informers convert API objects into bgpd.model at this
boundary and generated models would be built only to be thrown away (measured: most of
the per-event CPU of the stock Watch helper is model deserialisation), and (b) a raw
response gives us the status code and Retry-After header to classify errors ourselves.

Credentials are looked up like kubectl and client-go: an explicit --kubeconfig, then
$KUBECONFIG (a colon-separated list), then ~/.kube/config, then the in-cluster service
account. This module must not leak client types: callers get dicts and our errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from yarl import URL

from bgpd.aiohttp_import import aiohttp, get_env_proxy_for_url, system_tls
from k8s_watcher.credentials import SERVICE_ACCOUNT, Credentials, CredentialSource, shared
from k8s_watcher.errors import (
    ApiUnavailable,
    MalformedResponse,
    error_from_status,
)

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
#: Who we are to the API server (its audit log, its per-client metrics).
USER_AGENT = "kube-bgpd"
#: Seconds to wait for a TCP (and TLS) connection before calling the API unreachable.
CONNECT_TIMEOUT = 10.0
#: Total seconds for one ordinary (non-watch) request.
REQUEST_TIMEOUT = 60.0
#: Connections kept open to the API server (the official client's pool size).
POOL_SIZE = 100
#: The read buffer: one watch event (a large object) can exceed aiohttp's default.
READ_BUFFER = 2**21
#: In-cluster namespace file, read for the default Lease namespace.
SERVICE_ACCOUNT_NAMESPACE = SERVICE_ACCOUNT / "namespace"

Query = Sequence[tuple[str, str]]


async def load_credentials(
    kubeconfig: str | None = None, *, context: str | None = None
) -> Credentials:
    """This process's credentials for these flags (the child runs once and its answer is
    shared with every client built later: see credentials.shared).

    Raises CredentialsError when none is usable, so the CLI can say so and exit instead of
    retrying forever: a missing kubeconfig does not fix itself.
    """
    return await shared(kubeconfig, context).get()


def ssl_context(creds: Credentials) -> ssl.SSLContext:
    """The TLS settings of `creds`, as the official client builds them: the CA (else the
    system's), the client certificate, no verification when the kubeconfig says
    insecure-skip-tls-verify. The certificate and key go through a private temporary
    directory (ssl loads a chain only from files), removed before this returns."""
    context = ssl.create_default_context(cadata=creds.ca_data or None)
    if creds.cert_data:
        directory = tempfile.mkdtemp(prefix="kube-bgpd-tls-")
        try:
            cert = Path(directory, "cert.pem")
            cert.write_text(creds.cert_data)
            key = None
            if creds.key_data:
                key = Path(directory, "key.pem")
                key.write_text(creds.key_data)
            context.load_cert_chain(cert, key)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    if not creds.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


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
    the loop that opened it (opened on the first request).
    """

    def __init__(
        self,
        credentials: Credentials | None = None,
        *,
        kubeconfig: str | None = None,
        source: CredentialSource | None = None,
    ) -> None:
        """With `credentials`, those are used as they are; else they come from `source`
        (default: the process's shared one for `kubeconfig`) on the first request, so
        synchronous code can build a client that async code connects."""
        self._fixed = credentials
        if source is None and credentials is None:
            source = shared(kubeconfig)
        self._source = source
        self._seen = credentials
        self._session: aiohttp.ClientSession | None = None
        self._tls: tuple[Credentials | None, ssl.SSLContext | None] = (None, None)
        self._proxies: dict[str, tuple[str | None, aiohttp.BasicAuth | None]] = {}

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, *, context: str | None = None
    ) -> KubeClient:
        """Load credentials now (CredentialsError now; `context`: the kubeconfig context
        to use instead of its current one) and build a client that keeps them fresh."""
        source = shared(kubeconfig, context)
        client = cls(source=source)
        client._seen = await source.get()
        return client

    @classmethod
    def lazy(cls, kubeconfig: str | None = None) -> KubeClient:
        """A client that loads its credentials on first use (CredentialsError then)."""
        return cls(kubeconfig=kubeconfig)

    async def _credentials(self) -> Credentials:
        if self._fixed is not None:
            return self._fixed
        assert self._source is not None
        self._seen = await self._source.get()
        return self._seen

    def _ssl_for(self, creds: Credentials) -> ssl.SSLContext | None:
        """The TLS context of these credentials, built once per credentials in hand (an
        exec plugin may hand out a new client certificate). A plain-HTTP server has
        none, unless it is reached through an HTTPS proxy (a kubeconfig's proxy-url):
        aiohttp then verifies the proxy with the request's context, here the system's
        CA store (aiohttp's own default trusts no CA in the product: bgpd.aiohttp_import)."""
        if not creds.server.startswith("https:"):
            return system_tls() if (creds.proxy or "").startswith("https:") else None
        held, context = self._tls
        if held is None or (held.ca_data, held.cert_data, held.key_data, held.verify) != (
            creds.ca_data,
            creds.cert_data,
            creds.key_data,
            creds.verify,
        ):
            context = ssl_context(creds)
        self._tls = (creds, context)
        return context

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=POOL_SIZE),
                # Not the environment per request: aiohttp would look up $HTTPS_PROXY and
                # ~/.netrc in two worker threads for every request (the official client reads
                # no netrc); the proxy is looked up once per server (_env_proxy).
                trust_env=False,
                read_bufsize=READ_BUFFER,
            )
        return self._session

    async def _env_proxy(self, server: str) -> tuple[str | None, aiohttp.BasicAuth | None]:
        """The proxy $HTTPS_PROXY / $HTTP_PROXY / $NO_PROXY name for `server` (as the
        official client honours them), and its credentials from the URL or ~/.netrc: what
        aiohttp's trust_env finds, looked up once per server in a worker thread (it may
        read ~/.netrc), not in two per request. The environment does not change while the
        process runs; a first list's requests then leave in one turn of the event loop."""
        found = self._proxies.get(server)
        if found is None:
            try:
                url, auth = await asyncio.to_thread(get_env_proxy_for_url, URL(server))
                found = (str(url), auth)
            except LookupError:  # none, or $NO_PROXY names the server
                found = (None, None)
            self._proxies[server] = found
        return found

    @property
    def host(self) -> str:
        """The API server's URL, once credentials are loaded."""
        return "" if self._seen is None else self._seen.server

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
        if self._session is not None:
            await self._session.close()
            self._session = None

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
        """Send a request; return the open response (the caller reads and releases it).
        A 401 renews the credentials (the child again, or the token file) and, if that
        gave other ones, sends the request once more."""
        data = None if body is None else json.dumps(dict(body))
        creds = await self._credentials()
        response = await self._send_once(
            creds, method, path, query, data, content_type, client_timeout, what
        )
        if response.status != 401 or self._fixed is not None or self._source is None:
            return response
        fresh = await self._source.renew(creds)
        if fresh is None:
            return response
        response.release()
        self._seen = fresh
        return await self._send_once(
            fresh, method, path, query, data, content_type, client_timeout, what
        )

    async def _send_once(
        self,
        creds: Credentials,
        method: str,
        path: str,
        query: Query,
        data: str | None,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout,
        what: str,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON, "Content-Type": content_type, "User-Agent": USER_AGENT}
        if creds.authorization:
            headers["Authorization"] = creds.authorization
        extra: dict[str, Any] = {}
        if creds.tls_server_name:
            extra["server_hostname"] = creds.tls_server_name
        if creds.proxy:
            extra["proxy"] = creds.proxy
        else:
            proxy, proxy_auth = await self._env_proxy(creds.server)
            if proxy is not None:
                extra["proxy"] = proxy
                extra["proxy_auth"] = proxy_auth
        try:
            return await self._open_session().request(
                method,
                creds.server + path,
                params=list(query) or None,
                data=data,
                headers=headers,
                timeout=client_timeout,
                ssl=self._ssl_for(creds) or True,
                **extra,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc

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
