"""Child processes of tests and benchmarks: kube-bgpd speakers, bare ExaBGPs, and the group
that stops them.

Role: one way to start the processes a test or a benchmark runs beside it, each with its
output in a log file, and to stop them. A :class:`ProcessGroup` starts processes through
a :class:`Spawner` (a lab network namespace, or :data:`HOST` for this one), stops them by
PID (SIGTERM, then SIGKILL after a grace period) in reverse order, and hands back their
log tails when a check failed. :func:`speaker_argv` is the ``kube-bgpd speaker`` command
line; :func:`exabgp_argv` and :func:`exabgp_env` start an ExaBGP with no kube-bgpd code
(as root without privilege drop, logging to a file) for baselines and harness checks.

:func:`fast_lease_argv` is the leader election's timings shortened for tests.

:class:`BareExaBGP` is such an ExaBGP; :class:`CommandFeed` gives one an API process that
reads commands from a FIFO and counts ExaBGP's acknowledgements, so a benchmark can
drive ExaBGP with no kube-bgpd driver in between. :func:`exabgp_runtime` runs the
product's own ExaBGP runtime (supervisor, helper, driver) for a component test.

What it must not do: stop a process by name, or leave one running after its group ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bgpd.exabgp.render import Rendering, render
from bgpd.exabgp.runtime import ExaBGPRuntime
from bgpd.model import BGPPeer, Config, Node, NodeName, PeerName


class Spawner(Protocol):
    """Something that starts a process somewhere (a lab namespace's ``Netns.popen``)."""

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]: ...


class _Host:
    """Starts processes in this process' own namespace."""

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(list(argv), **kw)


#: The host namespace (no lab): tests on loopback.
HOST: Spawner = _Host()


def fast_lease_argv(duration: float = 2.0) -> list[str]:
    """The controller's leader-election flags for a test: a lease of ``duration`` seconds
    renewed within 1.5 s, retried every 0.25 s, so a takeover fits in a test's seconds
    (the controller's defaults are 15 / 10 / 2 s)."""
    return [
        "--lease-duration",
        f"{duration:g}",
        "--renew-deadline",
        "1.5",
        "--retry-period",
        "0.25",
    ]


def venv_script(name: str) -> str:
    """A console script installed beside this interpreter (kube-bgpd, exabgp, ...)."""
    return str(Path(sys.executable).with_name(name))


def speaker_argv(
    *,
    config: Path,
    node: str,
    work_dir: Path,
    kubeconfig: Path | None = None,
    cluster_file: Path | None = None,
    metrics_address: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``kube-bgpd speaker`` reading ``config`` as ``node``, its cluster from ``kubeconfig``
    (an API) or ``cluster_file`` (a dump)."""
    argv = [venv_script("kube-bgpd"), "speaker", "--config", str(config), "--node-name", node]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    if cluster_file is not None:
        argv += ["--cluster-file", str(cluster_file)]
    argv += ["--work-dir", str(work_dir)]
    if metrics_address is not None:
        argv += ["--metrics-address", metrics_address]
    return [*argv, *extra]


def exabgp_argv(config: Path) -> list[str]:
    """A bare ``exabgp server CONFIG`` from this venv."""
    return [venv_script("exabgp"), "server", str(config)]


def exabgp_env(log: Path, **settings: str) -> dict[str, str]:
    """ExaBGP's environment: run as root without dropping privileges (it drops to nobody
    otherwise and cannot read its files), log to ``log``; ``settings`` add exabgp_* keys."""
    return dict(
        os.environ,
        exabgp_daemon_user="root",
        exabgp_daemon_drop="false",
        exabgp_log_destination=str(log),
        **settings,
    )


@dataclass(slots=True)
class Child:
    """One process of a group, with the file its output goes to."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def exited(self) -> str | None:
        """Why waiting on this process is pointless (it exited), or None: a ``give_up``
        for :func:`kbgpd_lab.kit.waiting.wait_until`."""
        code = self.proc.poll()
        return None if code is None else f"{self.name} exited ({code})"

    def stop(self, grace: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it is still running after ``grace`` seconds; the exit
        code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@dataclass(slots=True)
class ProcessGroup:
    """Processes started for one test or benchmark, with their logs under ``logs``.

    Use it as a context manager: on exit every child is stopped, and when the block
    raised, each child's log tail goes to stderr (the failure's context)."""

    logs: Path
    tail: int = 3000
    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        spawner: Spawner = HOST,
        log: Path | None = None,
        **kw: Any,
    ) -> Child:
        """Start ``argv`` through ``spawner`` with stdout and stderr in ``log`` (default
        LOGS/NAME.log)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        path = log or self.logs / f"{name}.log"
        with path.open("wb") as out:
            proc = spawner.popen(argv, stdout=out, stderr=subprocess.STDOUT, **kw)
        self.children.append(Child(name, proc, path))
        return self.children[-1]

    def check_alive(self) -> None:
        """Fail (with the logs) if a child has exited."""
        for child in self.children:
            assert child.proc.poll() is None, f"{child.name} exited:\n{self.log_tails()}"

    def log_tails(self) -> str:
        return "\n".join(
            f"==== {c.name} ({c.log.name})\n{c.log_text()[-self.tail :]}" for c in self.children
        )

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM every child at once (newest first), then wait for each; SIGKILL one
        that outlives ``grace``."""
        for child in reversed(self.children):
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        for child in reversed(self.children):
            child.stop(grace)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            if exc_type is not None and exc_type is not KeyboardInterrupt:
                sys.stderr.write(f"\n{self.log_tails()}\n")
        finally:
            self.stop()

    def __iter__(self) -> Iterator[Child]:
        return iter(self.children)


@dataclass(slots=True)
class BareExaBGP:
    """An ExaBGP started with ``config`` and no kube-bgpd code, logging to ``log``."""

    child: Child
    config: Path
    log: Path

    @classmethod
    def start(
        cls,
        group: ProcessGroup,
        config_text: str,
        config: Path,
        *,
        spawner: Spawner = HOST,
        **settings: str,
    ) -> BareExaBGP:
        """Write ``config_text`` to ``config`` and start ExaBGP on it in ``group``; its log
        is CONFIG.log, its stdout and stderr CONFIG.out; ``settings`` are exabgp_* keys."""
        config.write_text(config_text)
        log = config.with_suffix(".log")
        child = group.start(
            f"exabgp {config.name}",
            exabgp_argv(config),
            spawner=spawner,
            log=config.with_suffix(".out"),
            env=exabgp_env(log, **settings),
        )
        return cls(child, config, log)

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.child.proc

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class CommandFeed:
    """ExaBGP's API process for a :class:`BareExaBGP`: commands written here reach ExaBGP
    through a FIFO, and its acknowledgements are counted in a file."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.fifo = work / "commands"
        os.mkfifo(self.fifo)
        self.acks = work / "acks"
        self.helper = work / "bare-helper.sh"
        # O_RDWR (<>) so the reader never sees EOF; stdin (acks) drained by a background cat.
        # (an explicit redirection: sh gives a background job /dev/null as stdin otherwise)
        self.helper.write_text(
            f"#!/bin/sh\nexec 3<&0\ncat <&3 > {self.acks} &\nexec cat 0<> {self.fifo}\n"
        )
        self.helper.chmod(0o755)
        self.writer = os.open(self.fifo, os.O_RDWR)

    def send(self, lines: list[str]) -> None:
        data = "".join(line + "\n" for line in lines).encode()
        while data:
            n = os.write(self.writer, data)
            data = data[n:]

    def send_windowed(self, lines: list[str], window: int, within: float = 120) -> None:
        """Send ``lines`` with at most ``window`` unacknowledged (blocking: run it in a
        thread from async code); returns once everything is sent, not acknowledged."""
        base = self.acked()
        sent = 0
        deadline = time.monotonic() + within
        while sent < len(lines):
            if time.monotonic() > deadline:
                raise TimeoutError(f"bare ExaBGP acknowledged {self.acked() - base} of {sent}")
            inflight = sent - (self.acked() - base)
            if inflight < window:
                k = min(window - inflight, len(lines) - sent)
                self.send(lines[sent : sent + k])
                sent += k
            else:
                time.sleep(0.0005)

    def acked(self) -> int:
        """Answers (``done``/``error`` lines) so far; ExaBGP's JSON lines (session states,
        the UPDATEs it sent) share the file and end with ``}``, so they are not counted."""
        try:
            data = self.acks.read_bytes()
        except FileNotFoundError:
            return 0
        return data.count(b"done\n") + data.count(b"error\n")

    def updates_sent(self) -> tuple[int, int]:
        """(lines, bytes) of ExaBGP's reports of the UPDATEs it sent (``api send``)."""
        try:
            data = self.acks.read_bytes()
        except FileNotFoundError:
            return 0, 0
        lines = [x for x in data.splitlines() if b'"type": "update"' in x]
        return len(lines), sum(len(x) + 1 for x in lines)

    def close(self) -> None:
        os.close(self.writer)


class FedExaBGP:
    """A :class:`BareExaBGP` peering with one router, fed commands by a :class:`CommandFeed`
    (the figure to set kube-bgpd's own driver against). Its config is the one kube-bgpd
    renders for that peer, with the feed as its API process."""

    def __init__(
        self,
        work: Path,
        *,
        router: str,
        local: str,
        my_asn: int,
        peer_asn: int,
        spawner: Spawner = HOST,
    ) -> None:
        self.feed = CommandFeed(work)
        self.group = ProcessGroup(work)
        peer = BGPPeer(
            name=PeerName("tor"),
            my_asn=my_asn,
            peer_asn=peer_asn,
            peer_address=ipaddress.ip_address(router),
            hold_time=9,
        )
        rendering = render(
            Config(peers=(peer,)),
            Node(name=NodeName("node1"), addresses=(("InternalIP", local),)),
            kernel_choices={},
            passwords={},
            helper_argv=[str(self.feed.helper)],
        )
        self.exabgp = BareExaBGP.start(
            self.group,
            rendering.config,
            work / "bare.conf",
            spawner=spawner,
            exabgp_api_cli="false",
        )

    @property
    def pid(self) -> int:
        return self.exabgp.child.pid

    def close(self) -> None:
        self.group.stop(grace=5)
        self.feed.close()


@contextlib.asynccontextmanager
async def exabgp_runtime(
    rendering: Rendering,
    *,
    node: NodeName,
    work_dir: Path,
    prefix: Sequence[str] = (),
    **opts: Any,
) -> AsyncIterator[ExaBGPRuntime]:
    """The product's ExaBGP runtime (supervisor, helper, driver) for ``rendering``, running
    until the block ends; then stopped without a withdraw and its task cancelled (tests of
    the graceful stop call ``rt.stop()`` themselves). ``prefix``: a lab node's exec prefix."""
    rt = ExaBGPRuntime(node=node, work_dir=work_dir, prefix=prefix, **opts)
    rt.configure(rendering)
    task = asyncio.create_task(rt.run(), name=f"exabgp-{node}")
    try:
        yield rt
    finally:
        if not task.done():
            await rt.stop(withdraw=False)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
