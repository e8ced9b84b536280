"""Waiting on a condition, for tests and benchmarks: never on a fixed time.

Role: one ``wait_until`` for plain code and one ``wait_until_async`` for coroutines. Both
poll a check until it returns something true and hand that value back (so a caller can
wait for a result and keep it), and fail with an AssertionError that names what was
awaited and for how long. ``give_up`` ends the wait early when it returns a reason (a
process that exited cannot still become healthy); ``details`` adds text to the failure
(a log tail).

What it must not do: sleep for a fixed time as synchronisation; hide a timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _failure(
    what: str, within: float, reason: str | None, details: Callable[[], str] | None
) -> str:
    if reason is not None:
        head = f"gave up waiting for {what}: {reason}"
    else:
        head = f"timed out after {within} s waiting for {what}"
    return head if details is None else f"{head}\n{details()}"


def wait_until(
    check: Callable[[], T],
    *,
    within: float = 10.0,
    what: str = "condition",
    poll: float = 0.01,
    give_up: Callable[[], str | None] | None = None,
    details: Callable[[], str] | None = None,
) -> T:
    """Poll ``check()`` every ``poll`` seconds until it returns a true value; return it."""
    deadline = time.monotonic() + within
    while not (value := check()):
        reason = give_up() if give_up is not None else None
        if reason is not None or time.monotonic() > deadline:
            raise AssertionError(_failure(what, within, reason, details))
        time.sleep(poll)
    return value


async def wait_until_async(
    check: Callable[[], T | Awaitable[T]],
    *,
    within: float = 10.0,
    what: str = "condition",
    poll: float = 0.01,
    give_up: Callable[[], str | None] | None = None,
    details: Callable[[], str] | None = None,
) -> T:
    """As :func:`wait_until`, without blocking the loop; ``check`` may be a plain or an
    async function."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        value: T = await result if inspect.isawaitable(result) else result
        if value:
            return value
        reason = give_up() if give_up is not None else None
        if reason is not None or time.monotonic() > deadline:
            raise AssertionError(_failure(what, within, reason, details))
        await asyncio.sleep(poll)
