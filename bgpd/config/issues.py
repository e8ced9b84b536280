"""Results of loading (ConfigIssue, LoadResult, ConfigError) and the collection of
issues while documents are read (Issues, Doc): every problem with its place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from bgpd.model import Config

# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One error or warning, with enough place to find it in the files."""

    #: Where the document came from: "path/to/file.yaml" or "path:doc 3".
    source: str
    #: Kind, metadata.name and field path, e.g. "BGPPeer tor-a: spec.myASN".
    where: str
    message: str

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.where, self.message) if p]
        return ": ".join(parts)


@dataclass(frozen=True, slots=True)
class LoadResult:
    #: None when there is any error.
    config: Config | None
    errors: tuple[ConfigIssue, ...]
    warnings: tuple[ConfigIssue, ...]

    @property
    def ok(self) -> bool:
        return self.config is not None


class ConfigError(Exception):
    """The configuration has errors; `errors` lists every one, `str()` prints them all."""

    def __init__(self, errors: Sequence[ConfigIssue]) -> None:
        self.errors: tuple[ConfigIssue, ...] = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors) or "invalid configuration")


# --------------------------------------------------------------------------- collection


class Issues:
    """Accumulates errors and warnings in the order they are found."""

    def __init__(self) -> None:
        self.errors: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        #: source -> order of first appearance, so messages come out in file order.
        self.order: dict[str, int] = {}

    def see(self, source: str) -> None:
        self.order.setdefault(source, len(self.order))

    def sorted(self, issues: list[ConfigIssue]) -> tuple[ConfigIssue, ...]:
        """Stable sort by document, keeping each document's messages in field order."""
        return tuple(sorted(issues, key=lambda i: self.order.get(i.source, len(self.order))))


MISSING: Final = object()
T = TypeVar("T")


@dataclass(slots=True)
class Doc:
    """One document being read: where it came from and what it is, for every message."""

    source: str
    kind: str
    name: str
    issues: Issues
    errors: int = 0

    def where(self, path: str) -> str:
        head = f"{self.kind} {self.name}" if self.kind else self.name
        return f"{head}: {path}" if path else head

    def error(self, path: str, message: str) -> None:
        self.errors += 1
        self.issues.errors.append(
            ConfigIssue(self.source, bounded(self.where(path)), bounded(message))
        )

    def warn(self, path: str, message: str) -> None:
        self.issues.warnings.append(
            ConfigIssue(self.source, bounded(self.where(path)), bounded(message))
        )


#: Characters of a message's place or text: a 5,000-character key or value quoted in
#: full would make one error line unreadable (and a log line huge).
MAX_MESSAGE: Final = 300


def bounded(text: str) -> str:
    """Text cut to MAX_MESSAGE characters, marked with "..." when cut."""
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


@dataclass(slots=True)
class YamlFailure:
    """A document that could not be read, carried through parse_documents as an error."""

    issue: ConfigIssue
