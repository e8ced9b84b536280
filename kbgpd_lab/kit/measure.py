"""Figures for the benchmarks and tests: percentiles, the prefixes they announce, process
memory and mapped libraries, the samples of a Prometheus text exposition.

Role: what more than one benchmark or test needs to count or to number its routes, in one
place (benchmarks do not import each other).

What it must not do: start processes or time anything itself.
"""

from __future__ import annotations

from pathlib import Path


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the value at that rank, no interpolation."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def prefixes(n: int, base: int = 0) -> list[str]:
    """``n`` distinct /32s in 10.99/16 from number ``base`` on (250 a /24)."""
    return [f"10.99.{(base + i) // 250}.{(base + i) % 250 + 1}/32" for i in range(n)]


def address(i: int) -> str:
    """The address of :func:`prefixes` number ``i``."""
    return prefixes(1, base=i)[0].split("/")[0]


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def rss_kb(pid: int) -> int:
    """Resident memory of one process in KiB (/proc/PID/status), 0 if unknown."""
    return _status_kb(pid, "VmRSS:")


def peak_rss_kb(pid: int) -> int:
    """The most resident memory one process has had since it started, in KiB (VmHWM in
    /proc/PID/status), 0 if unknown: what a memory limit must leave room for, where
    :func:`rss_kb` is the moment's."""
    return _status_kb(pid, "VmHWM:")


def pss_kb(pid: int) -> int:
    """Proportional set size of one process in KiB (/proc/PID/smaps_rollup): its private
    pages plus its share of each page it shares with other processes (libpython, libssl),
    so the PSS of several processes adds up to what they take together, where their RSS
    counts each shared page once per process. 0 if unknown."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    """The PIDs of a process' direct children (ExaBGP's helper)."""
    return [
        int(c)
        for t in Path(f"/proc/{pid}/task").iterdir()
        for c in (t / "children").read_text().split()
    ]


def children_rss_kb(pid: int) -> int:
    """Resident memory of a process' direct children in KiB (ExaBGP's helper)."""
    return sum(rss_kb(c) for c in children(pid))


def tree_pss_kb(*pids: int) -> int:
    """PSS in KiB of these processes and their direct children."""
    return sum(pss_kb(p) + sum(pss_kb(c) for c in children(p)) for p in pids)


#: OpenSSL's two libraries, as :func:`mapped_libraries` names them.
OPENSSL_LIBRARIES = ("libssl.so", "libcrypto.so")


def mapped_libraries(pid: int, names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` (shared libraries' file names without their version, as
    "libssl.so" for libssl.so.3) a process maps (/proc/PID/maps)."""
    mapped = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        file = line.rpartition("/")[2] if "/" in line else ""
        mapped |= {name for name in names if file == name or file.startswith(f"{name}.")}
    return mapped


def exposition_samples(text: str) -> dict[str, float]:
    """'name{labels}' -> value, from a Prometheus text exposition without timestamps
    (what kube-bgpd's /metrics writes)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
