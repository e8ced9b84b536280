"""The speaker's side of the BFD watchdog (bgpd.bfd.heartbeat) with its real watchdog
process and a `sleep` child standing in for bfdd."""

from __future__ import annotations

import asyncio
import contextlib

from bgpd.bfd.heartbeat import BfdWatchdog, period
from kbgpd_lab.kit.waiting import wait_until_async


def test_period() -> None:
    assert period(5.0) == 1.0
    assert period(1.0) == 0.25


async def test_exabgp_owing_an_answer_gets_bfdd_killed() -> None:
    child = await asyncio.create_subprocess_exec("sleep", "60")
    killed: list[int] = []
    dog = BfdWatchdog(timeout=1.0, unanswered=lambda: 30.0, on_kill=killed.append)
    task = asyncio.create_task(dog.run())
    try:
        await wait_until_async(lambda: dog.pid is not None, what="watchdog started")
        dog.watch(child.pid)
        async with asyncio.timeout(10):  # only catches a hang
            assert await child.wait() == -9
        await wait_until_async(lambda: dog.kills == 1, what="the kill reported")
        # Its supervisor is told which bfdd it was (a kill of ours is no crash).
        assert killed == [child.pid]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
    assert dog.pid is None


async def test_the_watchdog_takes_bfdd_along_when_the_pipe_closes() -> None:
    """The speaker gone (here: its task cancelled, the pipe closed with bfdd still
    named): bfdd must not outlive it."""
    child = await asyncio.create_subprocess_exec("sleep", "60")
    dog = BfdWatchdog(timeout=30.0, unanswered=lambda: 0.0)
    task = asyncio.create_task(dog.run())
    try:
        await wait_until_async(lambda: dog.pid is not None, what="watchdog started")
        dog.watch(child.pid)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    try:
        async with asyncio.timeout(10):  # only catches a hang
            assert await child.wait() == -9
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
