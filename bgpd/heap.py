"""The daemon's heap once its first sync is done: collected, frozen, and the freed memory
handed back to the system.

The first sync allocates far more than it keeps: the initial LIST's JSON (or a cluster
dump's text), the parsed API objects converted and dropped one at a time, the first
decision's intermediate sets and lists. CPython frees those objects, but glibc's
allocator keeps the freed memory in its heap (only memory at the top of the heap or in
whole mmap'd chunks goes back by itself). ``malloc_trim(0)`` returns the free pages of
every arena to the system (``madvise``). How much that is depends on what the first
sync left behind: measured at 10,000 Services from a JSON dump, ~2 MiB when the routes
went out once, 31 MiB (110 -> 79 MiB RSS) in a run where ExaBGP's session flapped and
the driver replayed the routes (docs/benchmarks.md "Memory"). On a C library without
``malloc_trim`` (musl) nothing is trimmed and nothing fails.

This module does no logging; the caller reports what ``settle()`` returns.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None when the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim


#: Looked up once at import: settle() runs on the event loop.
MALLOC_TRIM = _malloc_trim()


def rss_bytes() -> int:
    """This process's resident set size (/proc/self/statm), 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class Settled:
    """What settle() did: objects moved to the permanent generation, and the RSS before
    and after handing the free memory back (bytes; equal when nothing was trimmed)."""

    frozen: int
    rss_before: int
    rss_after: int
    trimmed: bool
    #: How long settle() took (it holds the event loop that long).
    seconds: float

    def log_context(self) -> dict[str, float]:
        """What the caller's `*.heap_frozen` line says: objects frozen, the seconds it
        took, the RSS after and the memory handed back (MiB)."""
        return {
            "objects": self.frozen,
            "seconds": round(self.seconds, 3),
            "rss_mib": round(self.rss_after / 2**20, 1),
            "released_mib": round((self.rss_before - self.rss_after) / 2**20, 1),
        }


def release() -> bool:
    """Hand the allocator's free memory back to the system; False when it cannot."""
    if MALLOC_TRIM is None:
        return False
    MALLOC_TRIM(0)
    return True


#: Seconds between two looks at the RSS after the first sync (release_if_grown()).
RELEASE_INTERVAL = 30.0
#: Growth of the RSS since the last release that makes the next look hand memory back:
#: answering /status at 10,000 routes left the daemon ~14 MiB larger.
RELEASE_GROWTH = 4 * 2**20


def release_if_grown(since: int, *, growth: int = RELEASE_GROWTH) -> tuple[int, int] | None:
    """When the RSS grew by `growth` bytes or more since `since` (bytes, the RSS after
    the last release), hand the free memory back: (RSS before, RSS after). None when it
    did not grow that much, or nothing can be handed back (no malloc_trim). Cheap: one
    read of /proc and, when due, a trim (~0.3 ms at 100 MiB)."""
    before = rss_bytes()
    if before - since < growth or not release():
        return None
    return before, rss_bytes()


def settle() -> Settled:
    """Collect, then move every object alive now (the first sync's Services, slices and
    routes: 300,000 objects at 10,000 Services) to the permanent generation, then give
    the freed memory back (release()). Python's full collections then no longer walk
    the frozen objects: measured at 10,000 Services, a full collection took 80-110 ms,
    holding the event loop (and every route change) that long whenever allocations
    triggered one, e.g. during a /metrics scrape; after the freeze 3-18 ms. Frozen
    objects are still freed by reference counting; only a reference cycle among them
    would stay (our model objects are frozen and acyclic)."""
    started = time.monotonic()
    gc.collect()
    gc.freeze()
    before = rss_bytes()
    trimmed = release()
    return Settled(gc.get_freeze_count(), before, rss_bytes(), trimmed, time.monotonic() - started)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection inside (the state found is restored after). For the first
    decision: it creates the objects that live on (parts, routes, the desired set: some
    100,000 at 10,000 Services, no reference cycles among them), and on the way
    CPython's thresholds ran two full collections over the whole heap the LIST had just
    filled (measured, 10,000 Services from the API: ~0.05-0.08 s each, inside a 0.49 s
    decision). The young objects are collected at the first collection after, and
    settle() then collects and freezes everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
