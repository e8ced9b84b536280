"""The kit's waits: the value a check returns, the failure's text, and giving up early,
the same for the plain and the async wait (one deadline rule)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from kbgpd_lab.kit.waiting import WaitOptions, wait_until, wait_until_async


def plain(check: Callable[[], Any], **options: Any) -> Any:
    return wait_until(check, **options)


def in_loop(check: Callable[[], Any], **options: Any) -> Any:
    return asyncio.run(wait_until_async(check, **options))


def in_loop_awaited(check: Callable[[], Any], **options: Any) -> Any:
    async def awaited() -> Any:
        return check()

    return asyncio.run(wait_until_async(awaited, **options))


WAITS = [
    pytest.param(plain, id="plain"),
    pytest.param(in_loop, id="async-plain-check"),
    pytest.param(in_loop_awaited, id="async-awaited-check"),
]


@pytest.mark.parametrize("wait", WAITS)
def test_returns_the_first_true_value(wait: Callable[..., Any]) -> None:
    counter = itertools.count()
    assert wait(lambda: [n] if (n := next(counter)) >= 3 else [], poll=0) == [3]


@pytest.mark.parametrize("wait", WAITS)
def test_timeout_names_what_and_how_long_with_details(wait: Callable[..., Any]) -> None:
    options: WaitOptions = {"within": 0.05, "what": "the moon", "details": lambda: "log tail"}
    with pytest.raises(AssertionError) as failed:
        wait(lambda: False, **options)
    assert str(failed.value) == "timed out after 0.05 s waiting for the moon\nlog tail"


@pytest.mark.parametrize("wait", WAITS)
def test_give_up_ends_the_wait_at_once_with_its_reason(wait: Callable[..., Any]) -> None:
    checks = itertools.count(1)

    def check() -> bool:
        next(checks)
        return False

    with pytest.raises(AssertionError) as failed:
        wait(check, within=60, what="health", give_up=lambda: "the process exited (1)")
    assert str(failed.value) == "gave up waiting for health: the process exited (1)"
    assert next(checks) == 2  # one check, then the reason ended it
