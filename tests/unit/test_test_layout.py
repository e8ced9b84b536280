"""The test tree's one structural rule: pytest collects tests/ without packages
(rootdir-relative imports of the kits), so two test files with one basename in different
tiers collide at collection ("import file mismatch") and the whole run stops."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_file_basenames_are_unique_across_tiers() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
