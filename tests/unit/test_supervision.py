"""The supervisor's fork-side half: PR_SET_PDEATHSIG through libc resolved in the parent.

After fork only the forking thread exists in the child, and a lock another thread held
(the dynamic loader's, malloc's) stays held: loading libc there could hang the child
before exec. The child therefore only calls the ``prctl`` resolved at import.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

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
