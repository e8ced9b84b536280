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
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    # Imported by the functions that read YAML: PyYAML (~0.7 MiB) is not loaded by a
    # speaker that reads none (its configuration from the cluster, JSON from the API).
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


def check_node(node: yaml.Node, *, budget: int = MAX_ALIAS_EXPANSION) -> int:
    """Walk a composed YAML node graph once per distinct node (iteratively, so depth costs
    no recursion) and refuse it before construction if it nests deeper than MAX_DEPTH,
    holds a recursive alias, an integer longer than MAX_INTEGER_CHARS, or aliases that
    would add more than `budget` values to what the document spells out (the values they
    add are returned: a streamed document's items share one budget)."""
    import yaml  # see the module's imports: loaded only where YAML is read

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
    added = size[id(node)] - distinct
    if added > budget:
        raise InputRefused(
            _at(node, f"aliases that expand it by more than {MAX_ALIAS_EXPANSION} values")
        )
    return added


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml  # see the module's imports: loaded only where YAML is read

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _at(node: yaml.Node, what: str) -> str:
    mark = node.start_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{what}"


def fastest_safe_loader() -> type[yaml.SafeLoader]:
    """libyaml's SafeLoader when PyYAML was built with it (~10x faster), else the Python
    one, which behaves the same."""
    import yaml  # see the module's imports: loaded only where YAML is read

    loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


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


# --------------------------------------------------------------------------- streaming
#
# A cluster dump is one document holding a list of every object (`kubectl get -o yaml`
# prints `kind: List` with `items`). Loaded whole, the parser's tree of 20,000 objects
# (for YAML a node with two marks per scalar) lives at once, hundreds of megabytes at
# 10,000 Services, and CPython keeps most of that peak resident afterwards. The readers
# below hand out the items of a document's top-level `items` sequence (or of a top-level
# sequence) one at a time, each built, bounded and dropped before the next is parsed.


@dataclass(frozen=True, slots=True)
class Item:
    """One element of a document's top-level list, built alone."""

    index: int
    value: object


@dataclass(frozen=True, slots=True)
class DocumentEnd:
    """A document ended. `value`: the document without the items already handed out (a
    mapping without its `items`, an empty list for a top-level sequence) or, when nothing
    was streamed, the whole value; `last`: no document follows."""

    value: object
    streamed: bool
    last: bool


Part = Item | DocumentEnd

_JSON = json.JSONDecoder(parse_int=_json_int)
_SPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, i: int) -> int:
    """The index of the first character at or after `i` that is not JSON white space."""
    match = _SPACE.match(text, i)
    return i if match is None else match.end()


def _json_at(text: str, i: int) -> tuple[object, int]:
    try:
        return _JSON.raw_decode(text, i)
    except RecursionError:
        raise InputRefused("nested too deeply") from None


def _json_expect(text: str, i: int, char: str, what: str) -> int:
    i = _skip(text, i)
    if not text.startswith(char, i):
        raise json.JSONDecodeError(f"Expecting {what}", text, i)
    return _skip(text, i + 1)


def _json_array(text: str, i: int, end: list[int]) -> Iterator[object]:
    """The values of the array starting at text[i] ('['), one at a time; end[0] is set to
    the index after its ']'."""
    i = _json_expect(text, i, "[", "'['")
    if text.startswith("]", i):
        end[0] = i + 1
        return
    while True:
        value, i = _json_at(text, i)
        yield value
        i = _skip(text, i)
        if text.startswith("]", i):
            end[0] = i + 1
            return
        i = _json_expect(text, i, ",", "',' delimiter")


def json_parts(text: str) -> Iterator[Part]:
    """The one JSON document of `text`, its top-level `items` (or the top-level array)
    streamed; bounds as load_json. Raises json.JSONDecodeError or InputRefused."""
    i = _skip(text, 0)
    end = [0]
    if text.startswith("[", i):
        for index, element in enumerate(_json_array(text, i, end)):
            yield Item(index, element)
        value: object = []
        streamed = True
    elif text.startswith("{", i):
        members: dict[str, object] = {}
        streamed = False
        i = _json_expect(text, i, "{", "'{'")
        while not text.startswith("}", i):
            if members or streamed:
                i = _json_expect(text, i, ",", "',' delimiter")
            if not text.startswith('"', i):
                raise json.JSONDecodeError("Expecting property name in double quotes", text, i)
            key, i = _json_at(text, i)
            i = _json_expect(text, i, ":", "':' delimiter")
            if key == "items" and text.startswith("[", i):
                members.pop("items", None)
                for index, item in enumerate(_json_array(text, i, end)):
                    yield Item(index, item)
                streamed, i = True, end[0]
            else:
                members[str(key)], i = _json_at(text, i)
            i = _skip(text, i)
        end[0] = i + 1
        value = members
    else:
        value, end[0] = _json_at(text, i)
        streamed = False
    if _skip(text, end[0]) != len(text):
        raise json.JSONDecodeError("Extra data", text, end[0])
    yield DocumentEnd(value, streamed, True)


def _composer_methods() -> dict[str, Any]:
    """PyYAML's Python composer, to compose one item at a time on top of a loader whose
    events may come from libyaml (CParser composes whole documents only)."""
    import yaml  # see the module's imports: loaded only where YAML is read

    names = ("compose_node", "compose_scalar_node", "compose_sequence_node", "compose_mapping_node")
    return {n: getattr(yaml.composer.Composer, n) for n in names}


def yaml_parts(text: str, base: type[yaml.SafeLoader]) -> Iterator[Part]:
    """Every YAML document of `text` (null documents skipped), the top-level `items` of a
    mapping (or a top-level sequence) streamed item by item; each item's node graph is
    checked with check_node, with one alias budget for the whole text, and its aliases
    may name its own anchors only. Raises yaml.YAMLError or InputRefused."""
    import yaml  # see the module's imports: loaded only where YAML is read

    loader_class = type(f"Streaming{base.__name__}", (base,), _composer_methods())
    loader: Any = loader_class(text)
    budget = [MAX_ALIAS_EXPANSION]

    def item() -> yaml.Node:
        # An alias may name an anchor of its own item only: one to an earlier item would
        # build a copy of that item per alias, outside check_node's count (which walks one
        # item's graph). kubectl writes no anchors at all.
        loader.anchors = {}
        node: yaml.Node = loader.compose_node(None, None)
        return node

    def build(node: yaml.Node) -> object:
        budget[0] -= check_node(node, budget=budget[0])
        return yaml.constructor.SafeConstructor.construct_document(loader, node)

    def sequence() -> Iterator[Item]:
        """The sequence at the loader's position, item by item (its start and end
        events consumed)."""
        loader.get_event()
        index = 0
        while not loader.check_event(yaml.SequenceEndEvent):
            yield Item(index, build(item()))
            index += 1
        loader.get_event()

    try:
        loader.get_event()  # StreamStart
        pending: DocumentEnd | None = None
        while not loader.check_event(yaml.StreamEndEvent):
            loader.get_event()  # DocumentStart
            loader.anchors = {}  # anchors are per document (YAML 1.1, 9.1)
            if loader.check_event(yaml.MappingStartEvent):
                loader.get_event()
                members: dict[object, object] = {}
                streamed = False
                while not loader.check_event(yaml.MappingEndEvent):
                    key = build(loader.compose_node(None, None))
                    if key == "items" and loader.check_event(yaml.SequenceStartEvent):
                        if pending is not None:
                            yield pending
                            pending = None
                        yield from sequence()
                        members.pop("items", None)
                        streamed = True
                    else:
                        members[key] = build(loader.compose_node(None, None))
                loader.get_event()
                value: object = members
            elif loader.check_event(yaml.SequenceStartEvent):
                if pending is not None:
                    yield pending
                    pending = None
                yield from sequence()
                value, streamed = [], True
            else:
                value, streamed = build(loader.compose_node(None, None)), False
            loader.get_event()  # DocumentEnd
            if value is None and not streamed:
                continue
            if pending is not None:
                yield pending
            pending = DocumentEnd(value, streamed, False)
        if pending is not None:
            yield DocumentEnd(pending.value, pending.streamed, True)
    except RecursionError:
        # The Python composer recurses per level; check_node would refuse the depth too,
        # but only once the item is composed.
        raise InputRefused(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
