"""One ExaBGP for this node, put together: its files, the supervisor and the driver.

The speaker (and the component tests and the benchmark) hold one ``ExaBGPRuntime``:

* ``configure(rendering)`` writes ExaBGP's configuration (mode 0600: it may hold MD5
  keys; bgpd.exabgp.workdir.write_private, never through a planted symlink) into the work
  dir, raising OSError with nothing changed when it cannot, and tells the driver which
  sessions exist. If ExaBGP runs and the text changed, it is reloaded in place
  (bgpd.exabgp.reload: only the neighbours that changed are touched; the driver re-sends
  the routes of new ones, which a reload leaves empty), or restarted when the change
  cannot be reloaded (the reason is returned; the driver then replays everything);
* ``run()`` is the long-lived task: the driver's socket and sender plus the supervisor;
* ``stop(withdraw=True, retain_graceful=False)`` is the graceful stop: withdraw everything
  (retaining: only from peers without graceful restart), wait for the acks and the flush,
  then SIGTERM ExaBGP (SIGKILL after a bound) and close the socket.

It adds no policy of its own: what to announce comes from the reconciler.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from bgpd.exabgp import helper
from bgpd.exabgp.driver import ExaBGPDriver
from bgpd.exabgp.errors import CrashLoopError
from bgpd.exabgp.launch import ASYNC_STEPS, STEPS_ENV, UNMODIFIED_MARK, queued_steps
from bgpd.exabgp.plan import DEFAULT_BATCH, DEFAULT_WINDOW
from bgpd.exabgp.reload import ConfigAction, Reconfiguration, reconfiguration
from bgpd.exabgp.render import Rendering, render_env
from bgpd.exabgp.workdir import write_private
from bgpd.model import IPAddress, NodeName
from bgpd.supervision import Supervisor

CONFIG_NAME = "exabgp.conf"
SOCKET_NAME = "exabgp-api.sock"
#: Longest unix socket path Linux accepts (sun_path is 108 bytes with its NUL).
UNIX_PATH_MAX = 107


def work_dir_problem(work_dir: Path) -> str | None:
    """Why ``work_dir`` cannot hold the helper's unix socket, or None. Checked before
    starting, so a long work directory is a clear configuration error rather than a
    traceback from bind() once everything else is running."""
    path = work_dir / SOCKET_NAME
    size = len(os.fsencode(path))
    if size <= UNIX_PATH_MAX:
        return None
    return (
        f"the ExaBGP API socket {path} would be {size} bytes long, and a unix socket path "
        f"has at most {UNIX_PATH_MAX}: choose a shorter work directory "
        "(spec.workDir or --work-dir)"
    )


def helper_argv() -> list[str]:
    """How ExaBGP starts the helper: this interpreter running the helper's file as a
    script, isolated (-I: no PYTHON* variables, no user site) and without site-packages
    (-S): it needs the standard library only, and each .pth file or site-packages import
    would cost every node memory (bgpd/exabgp/helper.py)."""
    return [sys.executable, "-I", "-S", str(Path(helper.__file__).resolve())]


def launched(argv: Sequence[str]) -> bool:
    """ExaBGP starts through our launcher (bgpd.exabgp.launch), whose reload is the one
    bgpd.exabgp.reload describes; any other binary is restarted for every change."""
    return list(argv[1:3]) == ["-m", "bgpd.exabgp.launch"]


def exabgp_argv(binary: str) -> list[str]:
    """How to start ExaBGP. The default ``exabgp`` runs as ``<this python> -m
    bgpd.exabgp.launch`` when the package is importable: ExaBGP with its verified per-route
    copy made cheaper (see launch.py), and no dependence on PATH or on a script's shebang
    (an unprivileged user may not be able to exec the interpreter a shebang names). Any
    other value is a binary (a path, or a name on PATH), run as it is."""
    if binary == "exabgp" and importlib.util.find_spec("exabgp") is not None:
        return [sys.executable, "-m", "bgpd.exabgp.launch"]
    if os.sep in binary:
        return [binary]
    return [shutil.which(binary) or binary]


class ExaBGPRuntime:
    def __init__(
        self,
        *,
        node: NodeName,
        work_dir: Path,
        exabgp_binary: str = "exabgp",
        prefix: Sequence[str] = (),
        window: int = DEFAULT_WINDOW,
        batch: int = DEFAULT_BATCH,
        ack_timeout: float = 10.0,
        flush_delay: float = 0.5,
        stop_timeout: float = 5.0,
        max_crashes: int = 5,
        crash_window: float = 60.0,
        listen: bool = False,
        reload_in_place: bool = True,
    ) -> None:
        problem = work_dir_problem(work_dir)
        if problem is not None:
            raise ValueError(problem)
        self.queued_steps = queued_steps(window, batch)
        if self.queued_steps > ASYNC_STEPS:
            # More queued work than ExaBGP's reactor runs per turn once the launcher
            # raised its limit; the launcher checks the limit in force (see launch.py).
            raise ValueError(
                f"window {window} x batch {batch} exceeds ExaBGP's {ASYNC_STEPS} steps a turn"
            )
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.config_path = work_dir / CONFIG_NAME
        self.listen = listen
        #: Off: every configuration change restarts ExaBGP (the behaviour before reloads;
        #: the benchmark compares both).
        self.reload_in_place = reload_in_place
        self.rendering: Rendering | None = None
        #: The addresses the running ExaBGP was started listening on.
        self._listening: list[IPAddress] = []
        self.driver = ExaBGPDriver(
            node=node,
            socket_path=work_dir / SOCKET_NAME,
            window=window,
            batch=batch,
            ack_timeout=ack_timeout,
            flush_delay=flush_delay,
        )
        argv = exabgp_argv(exabgp_binary)
        #: The running ExaBGP reloads reliably: started through the launcher, and the
        #: launcher did not say it runs ExaBGP unmodified (see _on_output).
        self._reloads = launched(argv)
        self._launched = self._reloads
        self.supervisor = Supervisor(
            argv=[*argv, "server", str(self.config_path)],
            name="exabgp",
            crash_error=CrashLoopError,
            env=self._env,
            cwd=work_dir,
            prefix=prefix,
            on_start=self._on_start,
            on_output=self._on_output,
            stop_timeout=stop_timeout,
            max_crashes=max_crashes,
            crash_window=crash_window,
        )
        self.driver.on_dead = self.supervisor.kill

    def _on_start(self, generation: int) -> None:
        self._reloads = self._launched
        self.driver.reset(generation)

    def _on_output(self, line: str) -> None:
        """An unmodified ExaBGP (the launcher's warning) may skip a reload silently while
        updates are queued (launch.no_pending_adjribout): restart it for changes."""
        if UNMODIFIED_MARK in line:
            self._reloads = False

    def _listen(self, rendering: Rendering | None) -> list[IPAddress]:
        """The addresses ExaBGP listens on for this rendering (its environment)."""
        if rendering is None or not self.listen:
            return []
        # ExaBGP's listener is in the default VRF: a VRF session's address cannot be bound
        # there (the kernel says EADDRNOTAVAIL), so that session only connects out.
        return [n.local_address for n in rendering.neighbors if n.peer.vrf is None]

    def _env(self, generation: int) -> dict[str, str]:
        self._listening = self._listen(self.rendering)
        env = render_env(
            socket_path=str(self.driver.socket_path),
            generation=generation,
            as_root=os.geteuid() == 0,
            listen=self._listening,
        )
        # For the launcher's check against the step limit in force in that ExaBGP.
        env[STEPS_ENV] = str(self.queued_steps)
        return env

    def configure(self, rendering: Rendering) -> Reconfiguration:
        """Install a rendering; returns what it does to a running ExaBGP: nothing (the
        text is the same, or ExaBGP is not running: it reads the file when it starts), a
        reload in place, or a restart with its reason (bgpd.exabgp.reload)."""
        before = self.rendering
        if before is None:
            verdict = Reconfiguration(ConfigAction.NONE)
        else:
            verdict = reconfiguration(
                before,
                rendering,
                listen_before=self._listening,
                listen_after=self._listen(rendering),
                reload_available=self.reload_in_place and self._reloads,
            )
            if verdict.action is ConfigAction.NONE:
                self.rendering = rendering
                return verdict
        # An OSError (a full work directory) leaves everything as it was: the running
        # ExaBGP keeps its file and sessions, and the caller retries (bgpd.speaker.app).
        write_private(self.config_path, rendering.config)
        self.rendering = rendering
        if self.supervisor.pid is None:
            # Not running (not started yet, or between a crash and its restart): the
            # next start reads the new file and the driver replays everything.
            self.driver.configure(rendering.neighbors)
            return Reconfiguration(ConfigAction.NONE)
        if verdict.action is ConfigAction.RELOAD:
            self.driver.reload(rendering.neighbors, verdict.forgotten)
            return verdict
        self.driver.configure(rendering.neighbors)
        self.supervisor.restart()
        return verdict

    async def run(self) -> None:
        """Serve the helper socket, send commands, keep ExaBGP running."""
        if self.rendering is None:
            raise RuntimeError("configure() before run()")
        await self.driver.start()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.driver.run(), name="exabgp-driver")
                tg.create_task(self.supervisor.run(), name="exabgp-supervisor")
        finally:
            await self.driver.close()

    async def stop(
        self, *, withdraw: bool = True, retain_graceful: bool = False, within: float = 10.0
    ) -> bool:
        """Graceful stop. Returns whether every withdraw was acknowledged in time.

        ``retain_graceful``: withdraw only from peers without graceful restart; ExaBGP's
        SIGTERM then closes every session with a bare TCP FIN (no Cease, no withdraw: lab
        notes), so graceful-restart peers keep the routes as stale for their restart time.
        """
        ok = True
        if withdraw and self.supervisor.pid is not None and self.driver.connected:
            ok = await self.driver.withdraw_all(within, retain_graceful=retain_graceful)
        await self.supervisor.stop()
        return ok
