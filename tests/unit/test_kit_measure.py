"""The benchmarks' memory readings (kbgpd_lab.kit.measure), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys

from kbgpd_lab.kit.measure import children, peak_rss_kb, pss_kb, rss_kb, tree_pss_kb


def test_pss_is_within_rss_and_counts_shared_pages_once() -> None:
    me = os.getpid()
    rss, pss = rss_kb(me), pss_kb(me)
    # Private pages count whole in both; a shared page counts whole in RSS, a share in PSS.
    assert 0 < pss <= rss


def test_tree_pss_adds_the_direct_children() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert child.pid in children(os.getpid())
        alone, tree, its = pss_kb(os.getpid()), tree_pss_kb(os.getpid()), pss_kb(child.pid)
        assert its > 0
        # The child is in the tree's figure (the parent's own moves a little between reads).
        assert tree > alone + its / 2
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


def test_a_gone_process_reads_zero() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert pss_kb(child.pid) == 0


def test_the_peak_keeps_memory_the_process_has_handed_back() -> None:
    # 64 MiB touched then freed (a block that large is its own mapping, unmapped on free):
    # the RSS drops back, the peak (VmHWM) keeps it.
    script = (
        "import sys\n"
        "block = bytearray(64 * 2**20)\n"
        "del block\n"
        "print('freed', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "freed"
            rss, peak = rss_kb(child.pid), peak_rss_kb(child.pid)
        finally:
            child.stdin.close()
            child.wait(30)
    assert peak >= rss + 60 * 1024
