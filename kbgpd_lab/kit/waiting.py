"""Waiting on a condition, for tests and benchmarks: never on a fixed time.

Role: one ``wait_until`` for plain code and one ``wait_until_async`` for coroutines, with
the same options (:class:`WaitOptions`) and one deadline rule. Both poll a check until it
returns something true and hand that value back (so a caller can wait for a result and
keep it), and fail with an AssertionError that names what was awaited and for how long.
``give_up`` ends the wait early when it returns a reason (a process that exited cannot
still become healthy); ``details`` adds text to the failure (a log tail).

``recv_lines`` reads a socket until a number of lines has arrived (each recv bounded), for
tests that speak a line protocol (ExaBGP's helper and relay).

What it must not do: sleep for a fixed time as synchronisation; hide a timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypedDict, TypeVar, Unpack

T = TypeVar("T")


class WaitOptions(TypedDict, total=False):
    """How either wait waits; every key may be left out."""

    #: Seconds before the wait fails (10).
    within: float
    #: What is awaited, for the failure's text ("condition").
    what: str
    #: Seconds between checks (0.01).
    poll: float
    #: A reason to stop waiting at once, or None to go on.
    give_up: Callable[[], str | None]
    #: More text for the failure (a log tail).
    details: Callable[[], str]


class _Deadline:
    """The rule both waits share: after each false check, give up (a ``give_up`` reason)
    or time out (past ``within``) with one message, else poll again."""

    def __init__(
        self,
        *,
        within: float = 10.0,
        what: str = "condition",
        poll: float = 0.01,
        give_up: Callable[[], str | None] | None = None,
        details: Callable[[], str] | None = None,
    ) -> None:
        self.within, self.what, self.poll = within, what, poll
        self.give_up, self.details = give_up, details
        self.at = time.monotonic() + within

    def check(self) -> None:
        """Raise the failure when waiting longer is pointless or too late."""
        reason = self.give_up() if self.give_up is not None else None
        if reason is None and time.monotonic() <= self.at:
            return
        if reason is not None:
            head = f"gave up waiting for {self.what}: {reason}"
        else:
            head = f"timed out after {self.within} s waiting for {self.what}"
        raise AssertionError(head if self.details is None else f"{head}\n{self.details()}")


def wait_until(check: Callable[[], T], **options: Unpack[WaitOptions]) -> T:
    """Poll ``check()`` until it returns a true value; return it."""
    deadline = _Deadline(**options)
    while not (value := check()):
        deadline.check()
        time.sleep(deadline.poll)
    return value


async def wait_until_async(
    check: Callable[[], T | Awaitable[T]], **options: Unpack[WaitOptions]
) -> T:
    """As :func:`wait_until`, without blocking the loop; ``check`` may be a plain or an
    async function."""
    deadline = _Deadline(**options)
    while True:
        result = check()
        value: T = await result if inspect.isawaitable(result) else result
        if value:
            return value
        deadline.check()
        await asyncio.sleep(deadline.poll)


def recv_lines(conn: socket.socket, count: int, *, within: float = 10.0) -> list[bytes]:
    """Read ``conn`` until ``count`` lines have arrived; each recv waits at most
    ``within`` seconds, and a peer that closes first fails with what had arrived."""
    conn.settimeout(within)
    buf = b""
    while buf.count(b"\n") < count:
        chunk = conn.recv(65536)
        assert chunk, f"closed after {buf!r}"
        buf += chunk
    return buf.splitlines()
