"""The API client honours $HTTP_PROXY / $NO_PROXY as the official client does, and looks
them up once, not per request: aiohttp's trust_env asked two worker threads per request
(~/.netrc, the proxy), so each of a first list's page requests waited for thread hand-offs
before it left (issue 18's cold start). Local servers on loopback addresses stand in for
the proxy and the API server."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from k8s_watcher.client import KubeClient
from k8s_watcher.credentials import Credentials

LIST = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}}


class Server:
    """An HTTP server answering every request with a list, remembering the URLs asked."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.urls: list[str] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.urls.append(str(request.url))
        return web.json_response(self.answer)


async def _serve(host: str, answer: dict[str, Any]) -> AsyncIterator[Server]:
    server = Server(answer)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def proxy() -> AsyncIterator[Server]:
    async for server in _serve("127.0.0.1", LIST | {"items": ["from the proxy"]}):
        yield server


@pytest.fixture
async def api() -> AsyncIterator[Server]:
    async for server in _serve("127.0.0.2", LIST | {"items": ["from the API server"]}):
        yield server


def _client(api: Server) -> KubeClient:
    return KubeClient(Credentials(source="test", server=f"http://127.0.0.2:{api.port}"))


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent")

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


async def test_the_proxy_of_the_environment_carries_the_requests(
    proxy: Server, api: Server, environ: Callable[..., None]
) -> None:
    environ(http_proxy=f"http://127.0.0.1:{proxy.port}")
    async with _client(api) as client:
        doc = await client.request("GET", "/api/v1/nodes")
    assert doc["items"] == ["from the proxy"]
    assert proxy.urls == [f"http://127.0.0.2:{api.port}/api/v1/nodes"]
    assert api.urls == []


async def test_no_proxy_sends_the_requests_straight_to_the_server(
    proxy: Server, api: Server, environ: Callable[..., None]
) -> None:
    environ(http_proxy=f"http://127.0.0.1:{proxy.port}", no_proxy="127.0.0.2")
    async with _client(api) as client:
        doc = await client.request("GET", "/api/v1/nodes")
    assert doc["items"] == ["from the API server"]
    assert proxy.urls == []


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("with_proxy", [False, True])
async def test_the_environment_is_read_once_not_in_threads_per_request(
    proxy: Server, api: Server, environ: Callable[..., None], with_proxy: bool
) -> None:
    if with_proxy:
        environ(http_proxy=f"http://127.0.0.1:{proxy.port}")
    executor = CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    async with _client(api) as client:
        for _ in range(10):
            await client.request("GET", "/api/v1/nodes")
    assert len(proxy.urls if with_proxy else api.urls) == 10
    assert executor.submitted <= 1
