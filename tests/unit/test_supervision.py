"""The supervisor's fork-side half: PR_SET_PDEATHSIG through libc resolved in the parent.

After fork only the forking thread exists in the child, and a lock another thread held
(the dynamic loader's, malloc's) stays held: loading libc there could hang the child
before exec. The child therefore only calls the ``prctl`` resolved at import.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bgpd import supervision as supervisor

#: Prints the child's parent-death signal (prctl PR_GET_PDEATHSIG = 2).
READ_PDEATHSIG = (
    "import ctypes; v = ctypes.c_int(); "
    "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)"
)


def test_child_gets_sigkill_on_parent_death_without_loading_libc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_dlopen(*args: object, **kwargs: object) -> None:
        raise AssertionError("ctypes.CDLL called between fork and exec")

    # The child is a fork of this process: it would inherit this replacement.
    monkeypatch.setattr(ctypes, "CDLL", no_dlopen)
    out = subprocess.run(
        [sys.executable, "-c", READ_PDEATHSIG],
        preexec_fn=supervisor._pdeathsig_preexec(os.getpid()),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert int(out.stdout) == signal.SIGKILL


async def test_kills_by_our_watchdog_are_no_crash_loop(tmp_path: Path) -> None:
    """Issue 17: bfdd killed by our own watchdog (ExaBGP stuck for a while) is not a
    crash, whether the supervisor learns of the kill before the exit or after it; other
    exits still end in a crash loop."""
    spawned: asyncio.Queue[int] = asyncio.Queue()
    sup = supervisor.Supervisor(
        argv=["sleep", "600"],
        name="child",
        env=lambda _generation: {},
        cwd=tmp_path,
        on_spawned=spawned.put_nowait,
        backoff_base=0.01,
        backoff_cap=0.02,
        max_crashes=2,
        crash_error=CrashLoop,
    )
    task = asyncio.create_task(sup.run())
    try:
        async with asyncio.timeout(60):
            pid = await spawned.get()
            for i in range(6):
                if i % 2 == 0:
                    sup.excuse(pid)  # told before the exit
                os.kill(pid, signal.SIGKILL)
                new = await spawned.get()
                if i % 2 == 1:
                    sup.excuse(pid)  # told after the exit was counted
                pid = new
            assert not task.done()
            with pytest.raises(CrashLoop):
                await kill_unexcused(pid, spawned, task)
    finally:
        await sup.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, CrashLoop):
            await task


class CrashLoop(Exception):
    pass


async def kill_unexcused(pid: int, spawned: asyncio.Queue[int], task: asyncio.Task[None]) -> None:
    """Kill each new child, unexcused, until the supervisor's run() ends."""
    for _ in range(3):
        os.kill(pid, signal.SIGKILL)
        get = asyncio.ensure_future(spawned.get())
        done, _ = await asyncio.wait({get, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            get.cancel()
            await task
        pid = get.result()
