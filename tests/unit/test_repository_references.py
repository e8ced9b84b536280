"""What the repository's docs and code point at exists in the repository.

A user reads the docs from a clone or the rendered repository: a relative link to a file
that is not there (moved, renamed, or one of the team's own notes outside the repository)
is a dead end. The team's working notes live outside the repository; the docs and the
code state the facts they rely on instead of citing those notes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *ROOT.glob("docs/*.md")])
#: Markdown links and images: [text](target) with an optional "title".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: The team's working notes (outside the repository): never cited.
INTERNAL_NOTES = re.compile(r"lab-notes|k8s-notes|shared/docs|style\.md|layout\.md")
SOURCE_DIRS = ("bgpd", "k8s_watcher", "kbgpd_lab", "tests", "bench", "deploy", "config", "docs")


def _relative_links(text: str) -> list[str]:
    targets = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        targets.append(target.split("#", 1)[0])
    return targets


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = []
    for target in _relative_links(doc.read_text(encoding="utf-8")):
        path = (doc.parent / target).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            broken.append(target)
    assert broken == [], f"{doc.relative_to(ROOT)} links to what the repository lacks: {broken}"


def test_link_pattern_finds_links() -> None:
    text = 'See [a](docs/a.md#x), ![img](i.png "t"), [web](https://x.io) and [here](#top).'
    assert _relative_links(text) == ["docs/a.md", "i.png"]


def test_no_file_cites_the_teams_internal_notes() -> None:
    this = Path(__file__).resolve()
    citing = []
    for top in SOURCE_DIRS:
        for path in (ROOT / top).rglob("*"):
            if path.suffix not in {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".sh"}:
                continue
            if path.resolve() == this or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            where = path.relative_to(ROOT)
            citing += [f"{where}: {m.group(0)}" for m in INTERNAL_NOTES.finditer(text)]
    assert citing == []
