"""The speaker's work directory (SpeakerConfig workDir): who may use it, and how files are
written there.

Measured hazards this answers (issue 15):

* two speakers on one host sharing a work directory (a systemd unit and a pod) silently
  took over each other's ExaBGP socket: ``lock()`` takes an exclusive ``flock`` on
  ``kube-bgpd.lock`` for the life of the process and writes its PID there, so the second
  speaker exits with one line naming the holder;
* a world-writable or foreign-owned directory lets another user plant files the speaker
  (often root) then trusts: ``check()`` refuses it;
* a planted ``exabgp.tmp`` symlink was followed as root when the configuration was
  written: ``write_private()`` writes to a fresh temporary name created with O_EXCL and
  O_NOFOLLOW (tempfile.mkstemp) and renames it over the target (rename replaces a symlink,
  it never writes through one).

Nothing here decides about routes; the composition root (`kube-bgpd speaker`) calls
``prepare()`` once before anything else uses the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: The lock file in the work directory; it holds the PID of the speaker holding it.
LOCK_NAME = "kube-bgpd.lock"


class WorkDirError(Exception):
    """The work directory cannot be used; the message is one line for the operator."""


def check(work_dir: Path) -> None:
    """Raise WorkDirError if ``work_dir`` is not a directory owned by this user, or is
    world-writable."""
    try:
        st = os.stat(work_dir)
    except OSError as exc:
        raise WorkDirError(f"work directory {work_dir}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise WorkDirError(f"work directory {work_dir} is not a directory")
    if st.st_uid != os.geteuid():
        raise WorkDirError(
            f"work directory {work_dir} belongs to uid {st.st_uid}, not to this user "
            f"(uid {os.geteuid()}): use a directory of its own (spec.workDir or --work-dir)"
        )
    if not os.access(work_dir, os.W_OK | os.X_OK):
        raise WorkDirError(f"work directory {work_dir} is unusable: not writable by this user")
    if st.st_mode & stat.S_IWOTH:
        raise WorkDirError(
            f"work directory {work_dir} is world-writable (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): chmod 700 it, or use a directory of its own"
        )


@dataclass(slots=True)
class WorkDirLock:
    """The held lock: the open lock file (closing it, or the process ending, frees it)."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _holder(fd: int) -> str:
    """The PID the holder wrote into the lock file ("unknown" if none)."""
    with contextlib.suppress(OSError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
    return "unknown"


def lock(work_dir: Path) -> WorkDirLock:
    """Take the work directory for this process, or raise WorkDirError naming the PID of
    the speaker that holds it. The lock file is opened without following a symlink and
    not inherited by children (ExaBGP)."""
    path = work_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise WorkDirError(f"cannot open the lock file {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise WorkDirError(
            f"work directory {work_dir} is in use by another kube-bgpd speaker (pid {holder}, "
            f"lock file {path}): stop it, or give this one its own spec.workDir or --work-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return WorkDirLock(path, fd)


def prepare(work_dir: Path) -> WorkDirLock:
    """Create the directory (0700) if missing, check it, and lock it."""
    try:
        work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:  # a file in its place, a read-only mount, no permission
        raise WorkDirError(f"work directory {work_dir} is unusable: {exc.strerror or exc}") from exc
    check(work_dir)
    return lock(work_dir)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) all at once: a fresh temporary file in the
    same directory (O_EXCL | O_NOFOLLOW), then a rename over ``path``. Raises OSError (a
    full disk: ENOSPC) with ``path`` unchanged and no temporary file left."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
