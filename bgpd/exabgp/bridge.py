"""The API relay as a thread of ExaBGP's own process, behind what ExaBGP takes for a Popen.

ExaBGP 5.0 talks to its API processes over their stdin/stdout only, so kube-bgpd's relay
(bgpd/exabgp/helper.py) used to be a third process on every node: an interpreter of its
own (10.4 MiB RSS) for a byte relay. When the launcher patches ExaBGP (bgpd/exabgp/launch.py:
verified source, fail-open), ExaBGP's ``Processes`` gets :class:`RelayProcess` instead of
``subprocess.Popen`` for a process whose ``run`` is the helper's file, and the same
``helper.Relay`` runs in a thread, its stdin and stdout being two socketpairs whose other
ends ExaBGP reads and writes as it would a child's pipes. Any other ``run`` is a process,
as before.

The helper's three hazards, in this setting:

* ExaBGP's writes are blocking: its write to the relay is a blocking send on a socketpair,
  which releases the GIL while the buffer is full; the relay thread always drains its end
  (the loop is unchanged), so ExaBGP's write completes as it did with a pipe.
* More than 5 helper deaths in ~64 s make ExaBGP exit: the relay never returns on a
  recoverable error (unchanged). Should it raise (a bug), the thread closes its ends and
  says so on stderr in one line; ExaBGP reads the end of its stdout, as for a dead
  child, and starts a new one (counted against the same limit): a respawned helper.
* Acks are FIFO per process: unchanged code, and still one relay per ExaBGP.

The thread shares ExaBGP's pid (the hello line says ExaBGP's pid), stops with it (the BFD
watchdog's SIGSTOP of ExaBGP stops the relay too: it has nothing to relay while ExaBGP is
stopped) and dies with it (a daemon thread: nothing of it outlives ExaBGP).

Standard library only, and nothing of kube-bgpd but the helper: it is loaded into
ExaBGP's process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from bgpd.exabgp import helper

#: The relay's file: a process ``run`` naming it (as its last word) is the relay.
HELPER_FILE = Path(helper.__file__).resolve()


def is_relay(run: Any) -> bool:
    """Whether ExaBGP's ``run`` (a list of words) starts kube-bgpd's relay: its last word
    is the helper's file (bgpd.exabgp.runtime.helper_argv)."""
    if not isinstance(run, (list, tuple)) or not run or not isinstance(run[-1], str):
        return False
    try:
        return Path(run[-1]).resolve() == HELPER_FILE
    except (OSError, RuntimeError, ValueError):
        return False


class RelayProcess:
    """The part of ``subprocess.Popen`` ExaBGP's ``Processes`` uses, for a relay thread.

    ``stdin`` and ``stdout`` are file objects like a child's pipes (buffered writer,
    buffered reader over a raw fd); ``pid`` is this process's; ``poll()`` is None while
    the thread runs; ``terminate()``/``kill()`` end the relay the way ExaBGP's exit ends
    the helper (end of its input) and ``wait()`` joins the thread."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.args = list(args)
        self.pid = os.getpid()
        self.returncode: int | None = None
        to_relay, relay_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        relay_out, from_relay = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The relay's ends as plain fds it owns (closed when it ends); ExaBGP's as files.
        self._relay_fds = (relay_in.detach(), relay_out.detach())
        self.stdin: IO[bytes] = os.fdopen(to_relay.detach(), "wb")
        self.stdout: IO[bytes] = os.fdopen(from_relay.detach(), "rb")
        self._environ = dict(os.environ if env is None else env)
        self._thread = threading.Thread(target=self._run, name="kube-bgpd-relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        code = 1
        try:
            code = helper.serve(self._environ, *self._relay_fds)
        except BaseException as exc:  # a bug: end as a crashed helper would, and say why
            text = " ".join(f"{type(exc).__name__}: {exc}".split())
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"kube-bgpd relay thread failed: {text}\n")
                sys.stderr.flush()
        finally:
            self.returncode = code
            for fd in self._relay_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def poll(self) -> int | None:
        """None while the relay runs, then its exit code."""
        return None if self._thread.is_alive() else self.returncode

    def terminate(self) -> None:
        """End the relay: the end of its input, as when ExaBGP's side of a pipe closes.
        The relay's own socket to the daemon closes with it (helper.Relay.run returns)."""
        try:
            end = socket.socket(fileno=os.dup(self.stdin.fileno()))
        except (OSError, ValueError):
            return  # already closed: nothing more to say to the relay
        with end, contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_WR)

    def kill(self) -> None:
        """A thread cannot be killed: the same as :meth:`terminate`, which always works
        (the relay's loop always reads its input)."""
        self.terminate()

    def wait(self, timeout: float | None = None) -> int:
        """Join the relay; ``subprocess.TimeoutExpired`` if it still runs after ``timeout``."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode if self.returncode is not None else 1


class SubprocessFacade:
    """The ``subprocess`` module as ExaBGP's processes.py sees it once patched: the same
    module but for ``Popen`` of the relay, which is a :class:`RelayProcess`."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Popen(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        if is_relay(args):
            return RelayProcess(args, kwargs.get("env"))
        return self._real.Popen(args, *rest, **kwargs)
