"""One bfdd for this node: its files, the supervisor, the vty connection, the polling.

The speaker holds one ``BfdRuntime`` while some BGPPeer has a bfdProfile:

* ``run()`` is the long-lived task: bfdd (FRR's BFD daemon, standalone: no zebra, no
  bgpd) under bgpd.supervision (restart with back-off, crash loop, stop by PID),
  plus one task that owns the connection to bfdd's vty socket: it applies configuration
  changes in place and polls the sessions' state;
* ``configure(peers)`` hands over the sessions bfdd should run; the change is applied
  in place (bgpd.bfd.render.commands: unchanged sessions get no command), and the file
  bfdd reads at its next start is rendered whole (bgpd.bfd.render.render);
* ``admin_down()`` sets every session AdminDown (the speaker's goodbye, after the BGP
  withdraw) and waits about two transmit intervals so the routers receive it;
* ``stop()`` stops bfdd by PID (SIGTERM, SIGKILL after a bound): nothing is left.

States go to ``on_states`` (bgpd.bfd.readback: one BfdPeerState per configured peer)
whenever one changes; ``on_started(pid)`` is called at each start of bfdd.

Measured with FRR 8.4 (Debian 12's frr; tests/component/test_bfdd_runtime.py), and the
hazards this answers:

* State read back through bfdd's vty unix socket directly (the protocol vtysh speaks:
  a command and a NUL; the answer and three NULs and a status byte): 0.1-0.2 ms a poll
  on an idle machine and 3.3 ms on the loaded 2-core test machine (1000 polls, one
  session), against 400 ms idle and 680 ms loaded for spawning ``vtysh -d bfdd -c 'show
  bfd peers json'`` (through ``ip netns exec``, itself 78 ms of it).
  So the poll is cheap enough to run at a quarter of the shortest detect time (bounded
  to 20 ms - 250 ms): a Down is seen within detect time + one poll. ``show bfd peers``
  needs ENABLE mode: the connection sends ``enable`` first.
* bfdd insists on being started as root and switching to its user (frr, compiled in):
  run as another user it exits ("could not setgroups"), and ``-u root -g root`` is
  refused (root is not in group frrvty). It then needs these capabilities in its
  bounding set or it exits at start ("initial cap_set_proc failed"): CAP_SETUID,
  CAP_SETGID (the switch to frr), CAP_NET_RAW, CAP_NET_BIND_SERVICE and CAP_SYS_ADMIN
  (which its privilege code wants permitted, whether used or not). This runtime refuses
  to start it when not root, with that reason.
* As frr, bfdd must reach its directory (``<workDir>/bfdd``, owned by frr: it writes its
  pid file and vty socket there) and read its configuration: the work directory (mode
  0700, owned by the speaker's user) gets the search bit for others (0711: no listing;
  every file of the speaker's there is 0600) and the configuration file is 0644 (it holds
  no secret). The vty socket is srwxrwx--- frr:frrvty; root connects anyway.
* Without ``--bfdctl`` FRR 8.4's bfdd binds ``/var/run/frr/bfdd.sock``, replacing the
  one of a bfdd the host may run. FRR 10.2 removed the option (and the socket), so the
  runtime passes ``--bfdctl <dir>/bfdd.sock`` only when ``bfdd --help`` lists it, and
  never uses that socket.
* PR_SET_PDEATHSIG does not survive bfdd's switch to frr: the kernel clears it when a
  process changes its effective user (prctl(2)), so a bfdd whose speaker is SIGKILLed
  keeps running (and keeps its sessions Up). The supervisor's stop() and the speaker's
  ``finally`` stop it by PID on every other exit; the SIGKILL case needs a guard
  outside the speaker's event loop (a watchdog process), which this module does not
  provide.
* bfdd makes ``/var/tmp/frr/bfdd.<pid>`` for its crash log (removed at a clean exit);
  without write access there it says "crashlog ... unavailable" and runs on.
* bfdd keeps running without zebra (it retries the zebra socket quietly), as long as
  every session names its local address, which the speaker always does.
* Echo mode does nothing standalone: with ``echo-mode`` on both ends (two bfdd 8.4 in
  network namespaces, session Up) the echo packet counters stayed 0 after 6 s (bfdd
  sends echo packets on an interface it learns from zebra). So the loader refuses
  BFDProfile echoMode rather than pretend.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
import pwd
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bgpd.bfd.readback import AnswerError, next_states
from bgpd.bfd.render import BfdPeerConfig, admin_down, commands, render
from bgpd.bfd.state import BfdPeerState
from bgpd.logs import log
from bgpd.model import PeerName
from bgpd.supervision import Supervisor

_logger = logging.getLogger("bgpd.bfd.runtime")

BFDD_BINARY = "/usr/lib/frr/bfdd"
#: bfdd's user (FRR's compiled-in default on Debian).
BFDD_USER = "frr"
DIR_NAME = "bfdd"
CONFIG_NAME = "bfdd.conf"
VTY_NAME = "bfdd.vty"
#: The answer to one vty command ends with three NULs and a status byte (FRR's vtysh
#: protocol; status 0 = success).
_END = b"\0\0\0"
#: Seconds bfdd has to answer one vty command (it answers in well under a millisecond;
#: longer means it is hung or stopped, and its sessions are then UNKNOWN).
VTY_TIMEOUT = 2.0
#: Longest answer read (a few hundred bytes per session).
_ANSWER_LIMIT = 16 * 1024 * 1024


class BfdError(Exception):
    """bfdd cannot run here, or died too often; the message is one line for the operator."""


class VtyError(BfdError):
    """bfdd's vty refused a command or did not answer."""


def poll_interval(peers: Sequence[BfdPeerConfig]) -> float:
    """Seconds between two reads of bfdd's sessions: a quarter of the shortest detect
    time configured (so a Down is seen within the detect time plus at most a quarter of
    it), bounded to 20 ms - 250 ms (a poll costs a few milliseconds at most, see the
    module docstring)."""
    if not peers:
        return 0.25
    shortest = min(p.receive_interval * p.detect_multiplier for p in peers) / 1000.0
    return min(0.25, max(0.02, shortest / 4))


def bfdd_problem(binary: str) -> str | None:
    """Why bfdd cannot run here, or None (see the module docstring's measurements)."""
    if not os.access(binary, os.X_OK):
        return f"{binary} is missing: install FRR (Debian package frr) for BFD"
    if os.geteuid() != 0:
        return (
            "bfdd must be started as root (it switches to the user frr and needs "
            "CAP_SETUID, CAP_SETGID, CAP_NET_RAW, CAP_NET_BIND_SERVICE, CAP_SYS_ADMIN); "
            "see docs/configuration.md, BFD"
        )
    try:
        pwd.getpwnam(BFDD_USER)
    except KeyError:
        return f"user {BFDD_USER!r} is missing: bfdd runs as it (install FRR's package)"
    return None


def _supports_bfdctl(binary: str) -> bool:
    """FRR before 10.2 has --bfdctl (and binds a default path without it)."""
    try:
        out = subprocess.run(
            [binary, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--bfdctl" in out.stdout + out.stderr


def bfdd_argv(binary: str, directory: Path, *, bfdctl: bool) -> list[str]:
    """bfdd with every path of its own in ``directory`` (see the module docstring)."""
    argv = [
        binary,
        "--config_file",
        str(directory / CONFIG_NAME),
        "--pid_file",
        str(directory / "bfdd.pid"),
        "--vty_socket",
        str(directory),
        # No TCP vty: the unix socket is the only way in.
        "--vty_port",
        "0",
        "--log",
        "stdout",
    ]
    if bfdctl:
        argv += ["--bfdctl", str(directory / "bfdd.sock")]
    return argv


def _unreachable(path: Path, uid: int, gid: int) -> Path | None:
    """The first parent of ``path`` the user ``uid``/``gid`` cannot search, or None."""
    for parent in reversed(path.parents):
        st = os.stat(parent)
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return parent
    return None


class Vty:
    """One connection to bfdd's vty socket, in ENABLE mode."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, path: Path) -> Vty:
        async with asyncio.timeout(VTY_TIMEOUT):
            reader, writer = await asyncio.open_unix_connection(path, limit=_ANSWER_LIMIT)
        vty = cls(reader, writer)
        try:
            await vty.run("enable")
        except BaseException:
            vty.close()
            raise
        return vty

    async def run(self, command: str) -> str:
        """Send one command; its output, or VtyError if bfdd refused it."""
        self._writer.write(command.encode() + b"\0")
        async with asyncio.timeout(VTY_TIMEOUT):
            await self._writer.drain()
            body = await self._reader.readuntil(_END)
            status = await self._reader.readexactly(1)
        text = body[: -len(_END)].decode(errors="replace")
        if status != b"\0":
            raise VtyError(f"bfdd refused {command!r}: {text.strip() or status[0]}")
        return text

    def close(self) -> None:
        self._writer.close()


class BfdRuntime:
    def __init__(
        self,
        *,
        work_dir: Path,
        on_states: Callable[[Mapping[PeerName, BfdPeerState]], None],
        on_started: Callable[[int], None],
        binary: str = BFDD_BINARY,
        prefix: Sequence[str] = (),
        stop_timeout: float = 5.0,
        max_crashes: int = 5,
        crash_window: float = 60.0,
    ) -> None:
        self.work_dir = work_dir
        self.dir = work_dir / DIR_NAME
        self.config_path = self.dir / CONFIG_NAME
        self.vty_path = self.dir / VTY_NAME
        self.binary = binary
        self.prefix = list(prefix)
        self.on_states = on_states
        self.on_started = on_started
        #: What bfdd should run (configure(), admin_down()) and what the running bfdd
        #: holds (its file at start, then each change applied through the vty).
        self._desired: tuple[BfdPeerConfig, ...] = ()
        self._applied: tuple[BfdPeerConfig, ...] = ()
        self.states: dict[PeerName, BfdPeerState] = {}
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._vty: Vty | None = None
        #: admin_down() was called: the speaker is saying goodbye, and no configure()
        #: (a rendering during the stop) may bring the sessions back Up.
        self._goodbye = False
        self.supervisor = Supervisor(
            argv=[binary],
            name="bfdd",
            crash_error=BfdError,
            env=lambda _generation: {},
            cwd=self.dir,
            prefix=prefix,
            on_start=self._on_start,
            on_spawned=self._on_spawned,
            stop_timeout=stop_timeout,
            max_crashes=max_crashes,
            crash_window=crash_window,
        )

    @property
    def pid(self) -> int | None:
        return self.supervisor.pid

    @property
    def peers(self) -> tuple[BfdPeerConfig, ...]:
        """The sessions bfdd should run now."""
        return self._desired

    # ------------------------------------------------------------------ files

    def _prepare(self) -> None:
        """The directory bfdd (as frr) writes its pid file and vty socket into."""
        user = pwd.getpwnam(BFDD_USER)
        group = grp.getgrgid(user.pw_gid)
        mode = stat.S_IMODE(os.stat(self.work_dir).st_mode)
        if not mode & stat.S_IXOTH:
            os.chmod(self.work_dir, mode | stat.S_IXOTH)
        blocked = _unreachable(self.work_dir.resolve(), user.pw_uid, user.pw_gid)
        if blocked is not None:
            raise BfdError(
                f"bfdd runs as {BFDD_USER} and cannot reach the work directory "
                f"{self.work_dir}: {blocked} is not searchable by it; use a work directory "
                "whose parents are (e.g. /run/kube-bgpd)"
            )
        self.dir.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.dir, user.pw_uid, group.gr_gid)
        self.supervisor.argv = bfdd_argv(
            self.binary, self.dir, bfdctl=_supports_bfdctl(self.binary)
        )

    def _write_config(self, peers: Sequence[BfdPeerConfig]) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(render(peers))
        os.chmod(tmp, 0o644)  # whatever the umask (the systemd unit's is 0077)
        os.replace(tmp, self.config_path)

    def _on_start(self, generation: int) -> None:
        """Before each start: bfdd reads the whole current configuration from its file."""
        self._drop_vty()
        self._write_config(self._desired)
        self._applied = self._desired
        self._settled.set()

    def _on_spawned(self, pid: int) -> None:
        self._wake.set()
        self.on_started(pid)

    # ------------------------------------------------------------------ the API

    async def configure(self, peers: Sequence[BfdPeerConfig]) -> None:
        """Run these sessions; returns once the running bfdd holds them (or none runs:
        its next start reads them from the file). Ignored once admin_down() was called:
        the goodbye's AdminDown holds until bfdd stops."""
        if self._goodbye:
            return
        await self._configure(peers)

    async def _configure(self, peers: Sequence[BfdPeerConfig]) -> None:
        self._desired = tuple(peers)
        if self.pid is not None and self._desired != self._applied:
            self._settled.clear()
            self._wake.set()
            await self._settled.wait()

    async def admin_down(self) -> None:
        """Every session AdminDown, then about two transmit intervals so the routers
        receive it (bfdd sends the state change at once and then at its interval)."""
        self._goodbye = True
        peers = admin_down(self._desired)
        await self._configure(peers)
        if self.pid is not None and peers:
            await asyncio.sleep(2 * max(p.transmit_interval for p in peers) / 1000.0)

    async def stop(self) -> None:
        """Stop bfdd by PID (SIGTERM, SIGKILL after the bound); nothing is left."""
        await self.supervisor.stop()
        self._drop_vty()
        self._settled.set()

    async def run(self) -> None:
        """Keep bfdd running and its sessions read back, until cancelled or stopped."""
        problem = bfdd_problem(self.binary)
        if problem is not None:
            raise BfdError(problem)
        self._prepare()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.supervisor.run(), name="bfdd-supervisor")
                tg.create_task(self._follow(), name="bfdd-vty")
        finally:
            self._drop_vty()
            self._settled.set()

    # ------------------------------------------------------------------ the vty task

    def _drop_vty(self) -> None:
        if self._vty is not None:
            self._vty.close()
            self._vty = None

    async def _follow(self) -> None:
        """Connect, apply, poll; on any failure drop the connection and start again."""
        while not self.supervisor.stopping:
            if self.supervisor.pid is None:
                self._publish(None)
                self._settled.set()
                await self._sleep(0.25)
                continue
            try:
                if self._vty is None:
                    self._vty = await Vty.connect(self.vty_path)
                await self._apply()
                answer = await self._vty.run("show bfd peers json")
            except (OSError, TimeoutError, asyncio.IncompleteReadError, VtyError) as exc:
                # bfdd starting (no socket yet), restarting or hung: unknown until it
                # answers again.
                if self._vty is not None:
                    log(_logger, logging.DEBUG, "bfdd.vty_failed", error=str(exc))
                self._drop_vty()
                self._publish(None)
                await self._sleep(0.05)
                continue
            try:
                self._publish(answer)
            except AnswerError as exc:
                log(_logger, logging.WARNING, "bfdd.bad_answer", error=str(exc))
            await self._sleep(poll_interval(self._desired))

    async def _apply(self) -> None:
        """Send the change from what bfdd holds to what it should hold. A command bfdd
        refuses restarts it (it then reads the whole configuration from its file)."""
        assert self._vty is not None
        target = self._desired
        steps = commands(self._applied, target)
        if steps:
            try:
                for step in steps:
                    await self._vty.run(step)
            except VtyError as exc:
                log(_logger, logging.ERROR, "bfdd.reconfigure_failed", error=str(exc))
                # Back to ENABLE mode is not guaranteed: reconnect after the restart.
                self.supervisor.restart()
                raise
            self._write_config(target)
            log(_logger, logging.INFO, "bfdd.reconfigured", peers=len(target), commands=len(steps))
        self._applied = target
        if self._applied == self._desired:
            self._settled.set()

    def _publish(self, answer: str | None) -> None:
        states = next_states(self._desired, answer, self.states, time.time())
        if states != self.states:
            self.states = states
            self.on_states(dict(states))

    async def _sleep(self, seconds: float) -> None:
        """Sleep, cut short by a configure() or a new bfdd."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()
