"""YAML files into documents, as Kubernetes reads YAML (no sexagesimal numbers, a
duplicated key is an error), with the line and column of a YAML error; then
bgpd.config.documents.parse_documents."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bgpd.config.documents import parse_documents
from bgpd.config.issues import ConfigError, ConfigIssue, LoadResult, YamlFailure
from bgpd.model import Config
from bgpd.untrusted import (
    MAX_CONFIG_BYTES,
    InputRefused,
    bounded_loader,
    check_size,
    fastest_safe_loader,
)

if TYPE_CHECKING:
    import yaml


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[object, object]:
    """SafeConstructor's mapping, but a key written twice is an error. Keys brought in by a
    `<<` merge may still be overridden, as YAML's merge-key rule says."""
    import yaml  # loaded already: this runs inside a parse (see _loader)

    written: list[object] = []
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in written
        except TypeError:
            duplicate = False
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        written.append(key)
    loader.flatten_mapping(node)
    out: dict[object, object] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            ) from None
        out[key] = loader.construct_object(value_node, deep=True)
    return out


@functools.cache
def _loader() -> type[yaml.SafeLoader]:
    """YAML as Kubernetes reads it, which differs from PyYAML's YAML 1.1 in two ways that
    matter here: sexagesimal numbers (PyYAML reads `65000:50` as the integer 3900050, which
    would turn a community into a number) are plain strings, and a duplicated key is an
    error instead of silently keeping the last one.

    Built on first use, with yaml imported then: a speaker that reads its configuration
    from the cluster reads no YAML, and PyYAML costs every node ~0.7 MiB (a structure
    test holds that it is not loaded there). libyaml's parser when present
    (fastest_safe_loader), bounded (bgpd.untrusted): depth, aliases and integer length
    are checked before a document is built."""
    import yaml

    loader: Any = type("_Loader", (bounded_loader(fastest_safe_loader()),), {})
    loader.yaml_implicit_resolvers = {
        first: [
            (tag, regexp)
            for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
        ]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(
            r"""^(?:[-+]?0b[0-1_]+
            |[-+]?0[0-7_]+
            |[-+]?(?:0|[1-9][0-9_]*)
            |[-+]?0x[0-9a-fA-F_]+)$""",
            re.X,
        ),
        list("-+0123456789"),
    )
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
            |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
        list("-+0123456789."),
    )
    loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
    result: type[yaml.SafeLoader] = loader
    return result


def parse_text(text: str, source: str) -> LoadResult:
    """Parse the text of one YAML file (any number of documents)."""
    return parse_documents(_documents(text, source))


def _yaml_error(source: str, exc: yaml.YAMLError) -> ConfigIssue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {context}, {problem}" if context else f"invalid YAML: {problem}"
    return ConfigIssue(source, where, " ".join(str(message).split()))


def _documents(text: str, source: str) -> list[tuple[str, object]]:
    """The documents of one file, labelled "file" or "file:doc N". Documents before a YAML
    error are kept, so their own errors are reported too."""
    import yaml  # see _loader

    raw: list[object] = []
    failure: YamlFailure | None = None
    try:
        for doc in yaml.load_all(text, Loader=_loader()):  # a SafeLoader
            raw.append(doc)
    except yaml.YAMLError as exc:
        failure = YamlFailure(_yaml_error(source, exc))
    except InputRefused as exc:
        failure = YamlFailure(ConfigIssue(source, "", f"refused: {exc}"))
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # SafeConstructor can still fail on odd scalars (e.g. a timestamp out of range).
        failure = YamlFailure(ConfigIssue(source, "", f"invalid YAML: {exc}"))
    if len(raw) + (failure is not None) <= 1:
        out = [(source, d) for d in raw]
    else:
        out = [(f"{source}:doc {i}", d) for i, d in enumerate(raw, start=1)]
    if failure is not None:
        out.append((source, failure))
    return out


def load_config(paths: Sequence[str | os.PathLike[str]]) -> LoadResult:
    """Read YAML files (each any number of documents, or a v1 List) and parse them as one
    configuration. An unreadable file or bad YAML is an error naming the file (and line)."""
    docs: list[tuple[str, object]] = []
    for path in paths:
        source = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                check_size(os.fstat(fh.fileno()).st_size, MAX_CONFIG_BYTES)
                text = fh.read(MAX_CONFIG_BYTES + 1)
            check_size(len(text), MAX_CONFIG_BYTES)  # a pipe or /proc file has no size
        except InputRefused as exc:
            docs.append((source, YamlFailure(ConfigIssue(source, "", f"refused: {exc}"))))
            continue
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            docs.append((source, YamlFailure(ConfigIssue(source, "", f"cannot read: {reason}"))))
            continue
        docs.extend(_documents(text, source))
    return parse_documents(docs)


def load_config_or_raise(
    paths: Sequence[str | os.PathLike[str]],
) -> tuple[Config, tuple[ConfigIssue, ...]]:
    """load_config for daemons: the Config and its warnings, or ConfigError with every error."""
    result = load_config(paths)
    if result.config is None:
        raise ConfigError(result.errors)
    return result.config, result.warnings
