"""`ApiSimulatorThread`: the simulator on its own event loop in a background thread.

For synchronous tests (kubectl via subprocess, the sync official client):
``with ApiSimulatorThread() as sim:`` starts it and exposes the same names as
`ApiSimulator` (`url`, `write_kubeconfig`, `store`, `compact`, `cut_watches`,
`fail_next`, `request_log`, `active_watches`, `wait_for_watches`). The store is not
thread-safe, so every call is marshalled into the simulator's loop and waited for;
`store` here is a proxy with the same methods. It must not be used from inside the
simulator's own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from kbgpd_lab.apisim.server import ApiSimulator, RequestRecord

T = TypeVar("T")


class _StoreProxy:
    """Calls `Store` methods inside the simulator's loop thread."""

    def __init__(self, owner: ApiSimulatorThread) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._owner.call(lambda: getattr(self._owner.sim.store, name)(*args, **kwargs))

        return call

    @property
    def resource_version(self) -> int:
        return self._owner.call(lambda: self._owner.sim.store.resource_version)

    @property
    def watermark(self) -> int:
        return self._owner.call(lambda: self._owner.sim.store.watermark)


class ApiSimulatorThread:
    """A context manager running `ApiSimulator(**kwargs)` in a daemon thread."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sim: ApiSimulator | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.store = _StoreProxy(self)

    @property
    def sim(self) -> ApiSimulator:
        if self._sim is None:
            raise RuntimeError("the simulator is not running")
        return self._sim

    def __enter__(self) -> ApiSimulatorThread:
        self._thread = threading.Thread(target=self._main, name="apisim", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError("the API simulator failed to start") from self._error
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loop = None

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self._sim = ApiSimulator(**self._kwargs)
            await self._sim.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self._sim.stop()

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run `fn()` in the simulator's loop and return its result (or raise its error)."""
        if self._loop is None:
            raise RuntimeError("the simulator is not running")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return future.result(timeout)

    # The same names as ApiSimulator, marshalled.

    @property
    def url(self) -> str:
        return self.sim.url

    @property
    def port(self) -> int:
        return self.sim.port

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        return self.sim.write_kubeconfig(path, namespace=namespace)

    def compact(self) -> None:
        self.call(self.sim.compact)

    def cut_watches(self) -> int:
        return self.call(self.sim.cut_watches)

    def stall_watches(self) -> int:
        return self.call(self.sim.stall_watches)

    def fail_next(self, count: int, code: int = 500, *, message: str = "simulated failure") -> None:
        self.call(lambda: self.sim.fail_next(count, code, message=message))

    @property
    def request_log(self) -> list[RequestRecord]:
        return self.call(lambda: list(self.sim.request_log))

    def clear_request_log(self) -> None:
        self.call(self.sim.request_log.clear)

    @property
    def active_watches(self) -> int:
        return self.call(lambda: self.sim.active_watches)

    def wait_for_watches(self, count: int, within: float = 10.0, *, exact: bool = False) -> None:
        if self._loop is None:
            raise RuntimeError("the simulator is not running")
        coro = self.sim.wait_for_watches(count, within, exact=exact)
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(within + 1)
