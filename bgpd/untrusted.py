"""Bounds on text read from outside (config files, cluster dumps): size, nesting depth,
alias expansion and integer length, so hostile or clumsy input costs bounded time and
memory and ends as one named error, never a traceback.

Why each bound exists (measured against the loader before these bounds, issue 15):

* alias expansion: YAML aliases share one node, so a 600-byte "billion laughs" file
  builds cheaply but every later walk of the value (validation, a message quoting it)
  sees ~5 million items: 7.4 s and 595 MB. The node graph is measured before anything
  is built, counting each alias as the copy it stands for; aliases may add at most
  `MAX_ALIAS_EXPANSION` values, and a recursive alias is refused.
* nesting: Python's recursion (the constructor, json, our walkers) fails deep down with
  RecursionError; real Kubernetes objects nest about 20 levels.
* integers: Python refuses to turn a decimal of over 4,300 digits into an int (or back
  into text), and a hexadecimal one builds a number no field can hold.
* size: a config file is a few kilobytes; a cluster dump of 10,000 Services is ~50 MB.

Pure: text in, values out or `InputRefused`; no I/O, no logging.
"""

from __future__ import annotations

import json
from typing import Any, Final

import yaml

#: Values aliases may add beyond the document's own nodes.
MAX_ALIAS_EXPANSION: Final = 10_000
#: Nesting depth of mappings and lists.
MAX_DEPTH: Final = 64
#: Characters of an integer (sign, digits, 0x prefix and underscores included).
MAX_INTEGER_CHARS: Final = 40
#: Bytes of one config file.
MAX_CONFIG_BYTES: Final = 4 * 1024 * 1024
#: Bytes of one cluster dump.
MAX_DUMP_BYTES: Final = 512 * 1024 * 1024

_INT_TAG: Final = "tag:yaml.org,2002:int"


class InputRefused(ValueError):
    """The text is beyond a bound; the message names the bound and where it was crossed."""


def check_size(size: int, limit: int) -> None:
    """Refuse a file of `size` bytes over `limit` before reading it."""
    if size > limit:
        raise InputRefused(f"is {size} bytes, more than the {limit}-byte limit")


def check_node(node: yaml.Node) -> None:
    """Walk a composed YAML node graph once per distinct node (iteratively, so depth costs
    no recursion) and refuse it before construction if it nests deeper than MAX_DEPTH,
    holds a recursive alias, an integer longer than MAX_INTEGER_CHARS, or aliases that
    would add more than MAX_ALIAS_EXPANSION values to what the document spells out."""
    # size[id] = values the node stands for once expanded; computed children first.
    size: dict[int, int] = {}
    distinct = 0
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 1, False)]
    while stack:
        current, depth, done = stack.pop()
        key = id(current)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(current))
            continue
        if key in size:
            continue
        if key in open_:
            raise InputRefused(_at(current, "a recursive alias (a value holding itself)"))
        distinct += 1
        if isinstance(current, yaml.ScalarNode):
            if current.tag == _INT_TAG and len(current.value) > MAX_INTEGER_CHARS:
                raise InputRefused(
                    _at(
                        current,
                        f"an integer of {len(current.value)} characters (at most "
                        f"{MAX_INTEGER_CHARS})",
                    )
                )
            size[key] = 1
            continue
        if depth > MAX_DEPTH:
            raise InputRefused(_at(current, f"nested deeper than {MAX_DEPTH} levels"))
        open_.add(key)
        stack.append((current, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(current))
    if size[id(node)] - distinct > MAX_ALIAS_EXPANSION:
        raise InputRefused(
            _at(node, f"aliases that expand it by more than {MAX_ALIAS_EXPANSION} values")
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _at(node: yaml.Node, what: str) -> str:
    mark = node.start_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{what}"


def bounded_loader(base: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A subclass of a SafeLoader (C or Python) that checks every document's node graph
    with check_node before constructing it."""

    def construct_document(self: yaml.SafeLoader, node: yaml.Node) -> Any:
        check_node(node)
        return base.construct_document(self, node)

    return type(f"Bounded{base.__name__}", (base,), {"construct_document": construct_document})


def _json_int(text: str) -> int:
    if len(text) > MAX_INTEGER_CHARS:
        raise InputRefused(f"an integer of {len(text)} characters (at most {MAX_INTEGER_CHARS})")
    return int(text)


def load_json(text: str) -> object:
    """json.loads with a bound on integer length. Depth is bounded by json's own C
    scanner (RecursionError past Python's recursion limit, refused here); nothing that
    reads the value recurses into it, and walking every value again to check depth
    would cost ~50% more on a 10,000-Service dump."""
    try:
        return json.loads(text, parse_int=_json_int)
    except RecursionError:
        raise InputRefused("nested too deeply") from None
