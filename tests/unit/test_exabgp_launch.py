"""The ExaBGP launcher's replacement of ``Neighbor.remove_self`` against the original.

Routes are parsed by ExaBGP's own API parser (the path ``announce attributes ...`` takes)
and handed to two neighbours with different local addresses, as one API command for both
would be; the replacement must produce what the original produces, for each neighbour,
without touching the parsed route or sharing the per-neighbour rewrite.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from exabgp.bgp.message import Action
from exabgp.bgp.message import update as exabgp_update
from exabgp.bgp.message.notification import Notify
from exabgp.bgp.message.update.nlri.cidr import CIDR
from exabgp.bgp.message.update.nlri.nlri import NLRI
from exabgp.bgp.message.update.nlri.qualifier.path import PathInfo
from exabgp.bgp.neighbor import Neighbor
from exabgp.configuration.configuration import Configuration
from exabgp.configuration.core import format as exabgp_format
from exabgp.configuration.core import tokeniser
from exabgp.environment import getenv
from exabgp.logger import log
from exabgp.logger.option import option as log_option
from exabgp.protocol.family import AFI, SAFI, Family
from exabgp.reactor.api import API
from exabgp.reactor.api import processes as exabgp_processes
from exabgp.reactor.api.command import announce as exabgp_announce
from exabgp.reactor.api.command.command import Command
from exabgp.reactor.asynchronous import ASYNC
from exabgp.reactor.loop import Reactor
from exabgp.rib import RIB
from exabgp.rib.change import Change
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd.exabgp import launch
from kbgpd_lab.kit.exabgp_conf import NEIGHBORS

CONFIG = NEIGHBORS


def parse(line: str) -> tuple[list[Any], list[Any]]:
    """The three neighbours, and the routes of one API command line."""
    log.init(getenv())  # what `exabgp validate` does before it parses
    conf = Configuration([CONFIG], text=True)
    assert conf.reload(), conf.error
    neighbors = list(conf.neighbors.values())  # partial() below clears conf.neighbors
    assert len(neighbors) == 3
    conf.static.clear()
    assert conf.partial("static", line), conf.error
    conf.scope.to_context()
    return neighbors, conf.scope.pop_routes()


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("attributes next-hop self nlri 10.99.0.1/32 10.99.0.2/32", id="self"),
        pytest.param(
            "attributes next-hop self community [65000:1 65535:0] large-community "
            "[65000:1:2] med 10 local-preference 50 nlri 10.99.0.3/32",
            id="self-with-attributes",
        ),
        pytest.param("attributes next-hop 192.0.2.99 nlri 10.99.0.4/32", id="explicit"),
        pytest.param("attributes next-hop self nlri 2001:db8:99::1/128", id="ipv6-self"),
    ],
)
def test_same_result_as_exabgps_own_remove_self(line: str) -> None:
    neighbors, changes = parse(line)
    assert changes
    original = Neighbor.remove_self
    compared = 0
    for change in changes:
        before = change.extensive()
        for neighbor in neighbors:
            if change.nlri.family().afi_safi() not in neighbor.families():
                continue
            want = original(neighbor, change)
            got = launch.remove_self(neighbor, change)
            assert got == want
            assert got.extensive() == want.extensive()
            assert got.index() == want.index()
            assert got.attributes.index() == want.attributes.index()
            assert str(got.nlri.nexthop) == str(want.nlri.nexthop)
            assert got is not change
            assert got.nlri is not change.nlri
            assert got.attributes is not change.attributes
            compared += 1
        # Neither the original nor the replacement changed the parsed route.
        assert change.extensive() == before
    assert compared >= len(changes)


def test_each_neighbour_gets_its_own_next_hop() -> None:
    [n1, n2, _], [change] = parse("attributes next-hop self nlri 10.99.0.9/32")
    a = launch.remove_self(n1, change)
    b = launch.remove_self(n2, change)
    assert str(a.nlri.nexthop) == "192.0.2.10"
    assert str(b.nlri.nexthop) == "192.0.2.11"
    a.nlri.action = 2  # what ExaBGP's outgoing RIB does to a stored change on withdraw
    assert b.nlri.action == change.nlri.action != 2


def test_a_routes_nlri_copy_has_no_dictionary_of_its_own() -> None:
    """Structure: the NLRI the adj-rib-out keeps per route holds its fields inline
    (CPython's inline values), not in a dictionary per route (64 bytes each)."""
    [n1, _, _], [change] = parse("attributes next-hop self nlri 10.99.0.9/32")
    got = launch.remove_self(n1, change)
    assert not [r for r in gc.get_referents(got.nlri) if type(r) is dict]
    assert vars(got.nlri).keys() == vars(change.nlri).keys()


def test_the_routes_of_one_command_share_one_attribute_copy_per_neighbour() -> None:
    """What keeps ExaBGP's adj-rib-out small: one copy of a command's attribute set per
    neighbour and next hop, not one per route; another command gets its own."""
    [n1, n2, _], changes = parse("attributes next-hop self med 5 nlri 10.99.0.1/32 10.99.0.2/32")
    _, [other] = parse("attributes next-hop self med 5 nlri 10.99.0.3/32")
    first = [launch.remove_self(n1, c).attributes for c in changes]
    second = [launch.remove_self(n2, c).attributes for c in changes]
    assert first[0] is first[1]
    assert second[0] is second[1]
    assert first[0] is not second[0]
    assert str(first[0][3]) == "192.0.2.10"
    assert str(second[0][3]) == "192.0.2.11"
    assert launch.remove_self(n1, other).attributes is not first[0]
    # The parsed set kept its own next hop.
    assert changes[0].attributes is changes[1].attributes
    assert str(changes[0].attributes[3]) == "self"


@pytest.mark.parametrize(
    "words",
    [
        pytest.param("watchdog dog", id="watchdog"),
        pytest.param("withdraw", id="withdraw"),
        pytest.param("name foo", id="name"),
    ],
)
def test_an_attribute_set_with_an_internal_code_is_copied_per_route(words: str) -> None:
    """The adj-rib-out pops a watchdog's codes from the route's own set: never shared."""
    [n1, _, _], changes = parse(f"attributes next-hop self {words} nlri 10.99.0.1/32 10.99.0.2/32")
    got = [launch.remove_self(n1, c) for c in changes]
    assert got[0].attributes is not got[1].attributes
    want = [Neighbor.remove_self(n1, c).extensive() for c in changes]
    assert [g.extensive() for g in got] == want


def test_a_parsed_set_changed_after_its_copy_is_copied_again() -> None:
    [n1, _, _], changes = parse("attributes next-hop self nlri 10.99.0.1/32 10.99.0.2/32")
    [med] = parse("attributes next-hop self med 7 nlri 10.99.0.9/32")[1]
    extra = med.attributes[4]  # MULTI_EXIT_DISC
    a = launch.remove_self(n1, changes[0]).attributes
    changes[1].attributes.add(extra)
    b = launch.remove_self(n1, changes[1]).attributes
    assert a is not b
    assert extra.ID not in a
    assert b[extra.ID] is extra


#: ExaBGP's own check, before any test patched it.
PENDING_ADJRIBOUT = Reactor.__dict__["_pending_adjribout"]
#: ExaBGP's own NLRI parser entry (a classmethod), before any test patched it.
UNPACK_NLRI = NLRI.__dict__["unpack_nlri"]
#: ExaBGP's own Family.family, before any test patched it.
FAMILY = Family.__dict__["family"]
#: ExaBGP's own Family constructor, before any test patched it.
FAMILY_INIT = Family.__dict__["__init__"]
#: ExaBGP's own Family.index, before any test patched it.
FAMILY_INDEX = Family.__dict__["index"]


#: Families to build: known ones, one from create(), the falsy undefined, unknown values.
FAMILIES = [
    pytest.param(1, 1, id="ipv4-unicast"),
    pytest.param(2, 1, id="ipv6-unicast"),
    pytest.param(AFI.ipv4, SAFI.multicast, id="created"),
    pytest.param(0, 0, id="undefined-is-falsy"),
    pytest.param(99, 77, id="unknown-not-cached"),
]


@pytest.mark.parametrize(("afi", "safi"), FAMILIES)
def test_family_same_result_as_exabgps_own(afi: int, safi: int) -> None:
    """A new Family each call, holding the very AFI and SAFI objects the original's
    constructor gets from AFI.create() and SAFI.create() (equal values for the unknown
    ones, which create() builds anew), for a Family and for a route's NLRI."""
    _, [change] = parse("attributes next-hop self nlri 10.99.0.7/32")
    for route in (Family(afi, safi), change.nlri):
        want, got = FAMILY(route), launch.family(route)
        assert type(got) is type(want) is Family
        assert vars(got) == vars(want)
        assert [type(v) for v in vars(got).values()] == [type(v) for v in vars(want).values()]
        cached = (AFI.cache.get(route.afi), SAFI.cache.get(route.safi))
        for mine, theirs, known in zip(got.afi_safi(), want.afi_safi(), cached, strict=True):
            assert (mine is theirs) == (known is not None)
        assert got is not launch.family(route)
        assert got.afi_safi() == route.afi_safi()


@pytest.mark.parametrize(("afi", "safi"), FAMILIES)
def test_family_init_same_result_as_exabgps_own(afi: int, safi: int) -> None:
    """The same fields as the original constructor: the very AFI and SAFI objects
    AFI.create() and SAFI.create() give (equal new ones for the unknown values)."""
    want, got = object.__new__(Family), object.__new__(Family)
    FAMILY_INIT(want, afi, safi)
    launch.family_init(got, afi, safi)
    assert vars(got) == vars(want)
    assert [type(v) for v in vars(got).values()] == [type(v) for v in vars(want).values()]
    cached = (AFI.cache.get(afi), SAFI.cache.get(safi))
    for mine, theirs, known in zip(got.afi_safi(), want.afi_safi(), cached, strict=True):
        assert (mine is theirs) == (known is not None)


@pytest.mark.parametrize(("afi", "safi"), FAMILIES)
def test_family_index_same_result_as_exabgps_own(afi: int, safi: int) -> None:
    """The same bytes for a Family, a route's NLRI, and a family whose fields are not
    ExaBGP's int types (formatted as the original does, not cached)."""
    _, [change] = parse("attributes next-hop self nlri 10.99.0.7/32")
    plain = object.__new__(Family)
    plain.afi, plain.safi = int(afi), int(safi)
    for route in (Family(afi, safi), change.nlri, plain):
        assert launch.family_index(route) == FAMILY_INDEX(route)
        assert launch.family_index(route) == FAMILY_INDEX(route)  # cached the second time


@pytest.mark.parametrize(
    ("afi", "safi", "data"),
    [
        pytest.param(1, 1, bytes([32, 10, 99, 0, 1, 24, 10, 99, 1]), id="ipv4-two-prefixes"),
        pytest.param(2, 1, bytes([128]) + bytes(range(16)), id="ipv6-host"),
        pytest.param(1, 1, b"", id="empty"),
    ],
)
def test_unpack_nlri_same_result_as_exabgps_own(afi: int, safi: int, data: bytes) -> None:
    """What ExaBGP reports of an UPDATE it sent is parsed by this: the same NLRI, the
    same rest, for each family; the key is made once and reused."""
    log.init(getenv())
    for _ in range(2):
        try:
            want = UNPACK_NLRI.__func__(NLRI, afi, safi, data, Action.ANNOUNCE, False)
        except Exception as exc:  # the empty payload: compared as the same error
            with pytest.raises(type(exc)):
                launch.unpack_nlri(NLRI, afi, safi, data, Action.ANNOUNCE, False)
            continue
        got = launch.unpack_nlri(NLRI, afi, safi, data, Action.ANNOUNCE, False)
        assert type(got[0]) is type(want[0])
        assert str(got[0]) == str(want[0])
        assert got[0].index() == want[0].index()
        assert bytes(got[1]) == bytes(want[1])
    assert launch._family_key.cache_info().hits >= 1


def test_unpack_nlri_unknown_family_is_the_same_notification() -> None:
    log.init(getenv())
    errors = []
    for unpack in (UNPACK_NLRI.__func__, launch.unpack_nlri):
        with pytest.raises(Notify) as caught:
            unpack(NLRI, 99, 77, b"\x00", Action.ANNOUNCE, False)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


@pytest.fixture
def exabgp_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Whatever a test's patch() does to ExaBGP's classes is undone after it; yields the
    original remove_self."""
    original = Neighbor.__dict__["remove_self"]
    monkeypatch.setattr(Neighbor, "remove_self", original)
    monkeypatch.setattr(ASYNC, "LIMIT", ASYNC.LIMIT)
    monkeypatch.setattr(Reactor, "_pending_adjribout", PENDING_ADJRIBOUT)
    monkeypatch.setattr(NLRI, "unpack_nlri", UNPACK_NLRI)
    monkeypatch.setattr(Family, "family", FAMILY)
    monkeypatch.setattr(Family, "__init__", FAMILY_INIT)
    monkeypatch.setattr(Family, "index", FAMILY_INDEX)
    monkeypatch.setattr(exabgp_processes, "subprocess", subprocess)  # the relay thread
    monkeypatch.setattr(tokeniser, "tokens", exabgp_format.tokens)
    for name in launch.ANNOUNCE_ATTRIBUTES:
        monkeypatch.setitem(Command.callback["text"], name, exabgp_announce.announce_attributes)
    yield original
    # The update module's sorted is the builtin: a name it does not have of its own.
    vars(exabgp_update).pop("sorted", None)


def warning_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_installed_exabgp_is_the_verified_one(
    exabgp_restored: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A changed ExaBGP must be re-verified: this fails when the dependency moves."""
    assert {t: launch.source_digest(t) for t in launch.RELIED_ON} == launch.RELIED_ON
    assert launch.patch({launch.STEPS_ENV: str(launch.queued_steps(4, 100))}) is None
    assert Neighbor.remove_self is launch.remove_self
    assert launch.ASYNC_STEPS == ASYNC.LIMIT
    assert Reactor._pending_adjribout is launch.no_pending_adjribout
    assert NLRI.__dict__["unpack_nlri"].__func__ is launch.unpack_nlri
    assert Family.family is launch.family
    assert Family.__init__ is launch.family_init
    assert Family.index is launch.family_index
    assert tokeniser.tokens is launch.tokens
    assert exabgp_update.sorted is launch.nlri_sorted
    for name in launch.ANNOUNCE_ATTRIBUTES:
        assert Command.callback["text"][name] is launch.announce_attributes
        assert name not in Command.callback["json"]  # ExaBGP registers it for text only
    assert warning_lines(capsys) == []


def test_the_verified_files_are_the_installed_ones_and_hold_every_target() -> None:
    """The whole-file fast path covers exactly the files of the targets, and gives what
    reading each target's source gives (this fails when the dependency moves, as the
    test above does)."""
    targets = {**launch.RELIED_ON, **launch.BRIDGE_RELIED_ON}
    files = {launch._source_file(t) for t in targets}
    assert files == set(launch.VERIFIED_FILES)
    assert {f: launch.file_digest(f) for f in files} == launch.VERIFIED_FILES
    assert launch.targets_fingerprint(targets) == launch.VERIFIED_FILES_FOR
    for verified in (launch.RELIED_ON, launch.BRIDGE_RELIED_ON):
        assert launch.verified_digests(verified) == {t: launch.source_digest(t) for t in verified}


def test_a_file_that_differs_has_each_target_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that is not the verified release's (a distribution's patch, another line
    ending) does not say which targets changed: each one's source is read, as before
    the fast path, so an edit beside the targets still patches."""
    read: list[str] = []
    digest = launch.source_digest

    def reading(target: str) -> str | None:
        read.append(target)
        return digest(target)

    monkeypatch.setattr(launch, "source_digest", reading)
    assert launch.verified_digests(launch.RELIED_ON) == launch.RELIED_ON
    assert read == []
    monkeypatch.setattr(
        launch, "VERIFIED_FILES", {**launch.VERIFIED_FILES, "exabgp/rib/cache.py": "0" * 64}
    )
    assert launch.verified_digests(launch.RELIED_ON) == launch.RELIED_ON
    assert sorted(read) == sorted(launch.RELIED_ON)


def test_the_reload_check_has_one_caller_the_main_loop() -> None:
    """no_pending_adjribout changes only whether the main loop reloads at once: ExaBGP
    calls the check in exactly one place (Reactor.run, whose source is pinned too)."""
    import exabgp

    root = Path(exabgp.__file__).parent
    calls = [
        (path.relative_to(root), line.strip())
        for path in sorted(root.rglob("*.py"))
        for line in path.read_text().splitlines()
        if "_pending_adjribout(" in line and "def _pending_adjribout" not in line
    ]
    assert calls == [(Path("reactor/loop.py"), "if self._pending_adjribout():")]
    assert "exabgp.reactor.loop:Reactor.run" in launch.RELIED_ON


def test_every_class_the_replacement_copies_or_builds_is_hashed() -> None:
    """remove_self copies the NLRI and the attribute set field by field and builds a
    Change, a NextHop and the neighbour's address: a change in any class on their MRO
    (a new field, __slots__, a new cache) must make the launcher stand back."""
    neighbors, changes = parse("attributes next-hop self nlri 10.99.0.1/32 2001:db8:99::1/128")
    _, explicit = parse("attributes next-hop 192.0.2.99 nlri 10.99.0.2/32")
    change_type, _, next_hop_type = launch._exabgp_types()
    objects: list[Any] = [change_type, next_hop_type]
    for change in [*changes, *explicit]:
        objects += [type(change.nlri), type(change.attributes), type(change.nlri.nexthop)]
    for neighbor in neighbors:
        objects.append(type(neighbor.ip_self(neighbor["local-address"].afi)))
    names = {
        f"{cls.__module__}:{cls.__qualname__}"
        for obj in objects
        for cls in obj.__mro__
        if cls.__module__ != "builtins"
    }
    assert names <= set(launch.RELIED_ON)


def test_the_runtime_tells_the_launcher_what_the_driver_keeps_queued(tmp_path: Any) -> None:
    from bgpd.exabgp.runtime import ExaBGPRuntime
    from bgpd.model import NodeName

    rt = ExaBGPRuntime(node=NodeName("n1"), work_dir=tmp_path / "w", window=3, batch=50)
    assert rt._env(1)[launch.STEPS_ENV] == str(launch.queued_steps(3, 50)) == "153"
    with pytest.raises(ValueError, match="exceeds ExaBGP's 1000 steps a turn"):
        ExaBGPRuntime(node=NodeName("n1"), work_dir=tmp_path / "w", window=10, batch=100)


def test_the_default_window_is_the_most_one_reactor_turn_takes() -> None:
    """The driver keeps as many commands in flight as the patched ExaBGP runs in one turn
    of its reactor (plan.DEFAULT_WINDOW: fewer left ExaBGP waiting at a first sync), and
    not one more (the runtime refuses a window past it)."""
    from bgpd.exabgp.plan import DEFAULT_BATCH, DEFAULT_WINDOW

    assert launch.queued_steps(DEFAULT_WINDOW, DEFAULT_BATCH) <= launch.ASYNC_STEPS
    assert launch.queued_steps(DEFAULT_WINDOW + 1, DEFAULT_BATCH) > launch.ASYNC_STEPS


VERIFIED = dict(launch.RELIED_ON)


@pytest.mark.parametrize(
    ("digests", "requested", "want"),
    [
        pytest.param(VERIFIED, False, None, id="verified"),
        pytest.param(VERIFIED, True, launch.Unmodified.REQUESTED, id="requested"),
        pytest.param(
            {**VERIFIED, "exabgp.bgp.neighbor:Neighbor.ip_self": None},
            False,
            launch.Unmodified.SOURCE_UNAVAILABLE,
            id="no-source",
        ),
        pytest.param(
            {**VERIFIED, "exabgp.reactor.asynchronous:ASYNC": "0" * 64},
            False,
            launch.Unmodified.SOURCE_CHANGED,
            id="changed",
        ),
        pytest.param(
            {t: d for t, d in VERIFIED.items() if t != "exabgp.rib.change:Change"},
            False,
            launch.Unmodified.SOURCE_CHANGED,
            id="not-checked",
        ),
    ],
)
def test_check(
    digests: dict[str, str | None], requested: bool, want: launch.Unmodified | None
) -> None:
    reason, detail = launch.check(digests, launch.RELIED_ON, requested=requested)
    assert reason is want
    assert bool(detail) is (want is not None)


@pytest.mark.parametrize(
    ("wanted", "limit", "warns"),
    [
        pytest.param(None, 50, False, id="nothing-to-compare"),
        pytest.param(404, 1000, False, id="fits"),
        pytest.param(1000, 1000, False, id="exactly"),
        pytest.param(404, 50, True, id="unmodified-limit"),
    ],
)
def test_steps_note(wanted: int | None, limit: int, warns: bool) -> None:
    note = launch.steps_note(wanted, limit)
    assert bool(note) is warns
    if warns:
        assert f"{wanted} route steps" in note
        assert f"runs {limit} a turn" in note


@pytest.mark.parametrize(
    ("in_force", "want"),
    [pytest.param(50, 1000, id="raised"), pytest.param(5000, 5000, id="never-lowered")],
)
def test_step_limit(in_force: int, want: int) -> None:
    assert launch.step_limit(in_force) == want


def assert_unmodified(
    reason: launch.Unmodified | None,
    want: launch.Unmodified,
    original: Any,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """ExaBGP untouched, and one warning line naming the reason (returned)."""
    assert reason is want
    assert Neighbor.remove_self is original
    assert ASYNC.LIMIT == 50
    assert Reactor.__dict__["_pending_adjribout"] is PENDING_ADJRIBOUT
    assert NLRI.__dict__["unpack_nlri"] is UNPACK_NLRI
    assert Family.__dict__["family"] is FAMILY
    assert Family.__dict__["__init__"] is FAMILY_INIT
    assert Family.__dict__["index"] is FAMILY_INDEX
    assert tokeniser.tokens is exabgp_format.tokens
    assert "sorted" not in vars(exabgp_update)
    for name in launch.ANNOUNCE_ATTRIBUTES:
        assert Command.callback["text"][name] is exabgp_announce.announce_attributes
    # The supervisor relays ExaBGP lines containing "warning" at WARNING level.
    [line] = warning_lines(capsys)
    assert line.startswith("kube-bgpd launcher warning: running ExaBGP unmodified")
    assert f"({want}: " in line
    return line


def no_source(obj: object) -> str:
    """inspect.getsource for an ExaBGP installed without its .py files."""
    raise OSError("could not get source code")


class NoSources:
    """The inspect module as the launcher sees an ExaBGP installed without its .py
    files: no source file, no source."""

    getsource = staticmethod(no_source)

    @staticmethod
    def getsourcefile(obj: object) -> None:
        return None


def broken_step_limit(in_force: int) -> int:
    raise RuntimeError("broken\nacross lines")


def broken_resolve(target: str) -> Any:
    raise ImportError(f"no module for {target}")


@pytest.mark.parametrize(
    ("where", "name", "replacement", "want", "says"),
    [
        pytest.param(
            launch,
            "inspect",
            NoSources(),
            launch.Unmodified.SOURCE_UNAVAILABLE,
            "no source for exabgp.bgp.neighbor:Neighbor.remove_self",
            id="source-unavailable",
        ),
        pytest.param(
            launch,
            "RELIED_ON",
            {**launch.RELIED_ON, "exabgp.bgp.neighbor:Neighbor.ip_self": "0" * 64},
            launch.Unmodified.SOURCE_CHANGED,
            # One relied-on function is enough, even one the launcher does not replace.
            "not the verified 5.0.15: exabgp.bgp.neighbor:Neighbor.ip_self)",
            id="hash-mismatch",
        ),
        pytest.param(
            # Half way: remove_self is already replaced when the step limit fails, and is
            # put back; the multi-line exception text still makes one line.
            launch,
            "step_limit",
            broken_step_limit,
            launch.Unmodified.FAILED,
            "RuntimeError: broken across lines",
            id="exception-while-patching",
        ),
        pytest.param(
            launch,
            "resolve",
            broken_resolve,
            launch.Unmodified.FAILED,
            "ImportError: no module for exabgp.bgp.neighbor:Neighbor.remove_self",
            id="exception-while-checking",
        ),
    ],
)
def test_each_failure_runs_unmodified_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
    exabgp_restored: Any,
    capsys: pytest.CaptureFixture[str],
    where: object,
    name: str,
    replacement: object,
    want: launch.Unmodified,
    says: str,
) -> None:
    monkeypatch.setattr(where, name, replacement)
    line = assert_unmodified(launch.patch({}), want, exabgp_restored, capsys)
    assert says in line


def test_requested_unmodified_says_the_window_does_not_fit(
    exabgp_restored: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = {launch.UNMODIFIED_ENV: "1", launch.STEPS_ENV: "404"}
    line = assert_unmodified(
        launch.patch(environ), launch.Unmodified.REQUESTED, exabgp_restored, capsys
    )
    assert "up to 404 route steps queued and this ExaBGP runs 50 a turn" in line


def run_launcher(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bgpd.exabgp.launch", "version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **env},
    )


def test_launcher_runs_exabgp() -> None:
    out = run_launcher()
    assert "ExaBGP : 5.0." in out.stdout
    assert out.stderr == ""


def test_launcher_runs_exabgp_unmodified_when_asked() -> None:
    out = run_launcher(**{launch.UNMODIFIED_ENV: "1"})
    assert "ExaBGP : 5.0." in out.stdout
    [line] = out.stderr.splitlines()
    assert "running ExaBGP unmodified (requested" in line


# --------------------------------------------------------------------------- OpenSSL kept out

#: What ``python -m bgpd.exabgp.launch version`` does (runpy, as ``-m``: the launcher's
#: module-level imports, then its main() running ExaBGP's ``version`` command, whose entry
#: point imports the server, the reactor and the configuration), then what that process
#: maps and holds.
OPENSSL_PROBE = """
import json, os, runpy, sys
sys.argv = ["launch", "version"]
runpy.run_module("bgpd.exabgp.launch", run_name="__main__")
from exabgp.bgp.neighbor import Neighbor
from kbgpd_lab.kit.measure import OPENSSL_LIBRARIES, mapped_libraries
print(json.dumps({
    "mapped": sorted(mapped_libraries(os.getpid(), OPENSSL_LIBRARIES)),
    "imported": sorted(n for n in ("ssl", "_ssl", "_hashlib") if sys.modules.get(n)),
    "patched": Neighbor.remove_self.__module__ == "__main__",
}))
"""


@pytest.mark.parametrize(
    ("env", "openssl"),
    [
        pytest.param({}, False, id="patched"),
        pytest.param({launch.UNMODIFIED_ENV: "1"}, False, id="unmodified"),
        pytest.param({launch.OPENSSL_ENV: "1"}, True, id="asked-to-let-it-in"),
    ],
)
def test_exabgps_process_maps_no_openssl(env: dict[str, str], openssl: bool) -> None:
    out = subprocess.run(
        [sys.executable, "-c", OPENSSL_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **env},
    )
    *version, last = out.stdout.splitlines()
    assert "ExaBGP : 5.0.15" in version
    got = json.loads(last)
    assert got["patched"] is (launch.UNMODIFIED_ENV not in env)
    if openssl:
        assert got["mapped"] == ["libcrypto.so", "libssl.so"]
    else:
        assert got == {**got, "mapped": [], "imported": []}


#: A stand-in for an ExaBGP whose entry point imports ``{module}`` at start (placed first on
#: PYTHONPATH); its main says which process it runs in, with what.
FAKE_MAIN = """
import json, os, sys
{module}

def main():
    print(json.dumps([os.getpid(), os.environ.get("{env}"), sys.argv]))
"""


@pytest.mark.parametrize(
    ("module", "restarted"),
    [
        pytest.param("import ssl", True, id="ssl"),
        pytest.param("import hashlib, _hashlib", True, id="hashlib"),
        # asyncio's own optional import: no ssl, no restart.
        pytest.param("import asyncio.sslproto", False, id="asyncio"),
    ],
)
def test_an_exabgp_importing_openssl_is_started_again_with_it(
    tmp_path: Path, module: str, restarted: bool
) -> None:
    main = tmp_path / "exabgp" / "application" / "main.py"
    main.parent.mkdir(parents=True)
    for package in (main.parent.parent, main.parent):
        (package / "__init__.py").write_text("")
    main.write_text(FAKE_MAIN.format(module=module, env=launch.OPENSSL_ENV))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bgpd.exabgp.launch", "version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    # The same process (exec'd), with ExaBGP's own argv.
    assert json.loads(out) == [proc.pid, "1" if restarted else None, ["exabgp", "version"]]
    lines = err.splitlines()
    restart = [line for line in lines if "kept out of its process" in line]
    name = module.split(", ")[-1].removeprefix("import ")
    want = f"kube-bgpd launcher warning: this ExaBGP imports {name}, kept out of its process"
    assert restart == ([f"{want}: starting it with OpenSSL"] if restarted else [])
    # Not the verified ExaBGP: it also runs unmodified, and says so.
    assert any(line.startswith(launch.UNMODIFIED_MARK) for line in lines)


@pytest.mark.parametrize(
    ("environ", "imported", "builtin", "want"),
    [
        pytest.param({}, set(), True, launch.OPENSSL_MODULES, id="all"),
        pytest.param({launch.OPENSSL_ENV: "1"}, set(), True, (), id="asked-to-let-it-in"),
        pytest.param({launch.OPENSSL_ENV: ""}, set(), True, launch.OPENSSL_MODULES, id="empty"),
        pytest.param({}, {"_hashlib", "hashlib"}, True, ("ssl", "_ssl"), id="already-imported"),
        pytest.param({}, set(), False, ("ssl", "_ssl"), id="no-builtin-hashes"),
    ],
)
def test_kept_out(
    environ: dict[str, str], imported: set[str], builtin: bool, want: tuple[str, ...]
) -> None:
    assert launch.kept_out(environ, imported, builtin) == want


def test_keep_out_makes_their_import_fail() -> None:
    held = object()
    modules: dict[str, Any] = {"_hashlib": held}
    assert launch.keep_out({}, modules) == ("ssl", "_ssl")
    assert modules == {"_hashlib": held, "ssl": None, "_ssl": None}


def test_builtin_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    # This Python has them all, as the image's (python:3.11-slim) has.
    assert launch.builtin_hashes()
    find_spec = importlib.util.find_spec

    def without_sha3(name: str) -> Any:
        return None if name == "_sha3" else find_spec(name)

    monkeypatch.setattr(importlib.util, "find_spec", without_sha3)
    assert not launch.builtin_hashes()


# --------------------------------------------------------------------------- the tokenizer

#: ExaBGP's own tokenizer, as the tokeniser module calls it (before any test patched it).
TOKENS = exabgp_format.tokens


def token_groups(tokenize: Any, lines: list[str]) -> list[Any]:
    """What a tokenizer yields for ``lines``, then the error it ends with (if any)."""
    out: list[Any] = []
    try:
        out.extend(tokenize(iter(lines)))
    except Exception as exc:  # compared as the same error
        out.append((type(exc), str(exc)))
    return out


COMMAND = "neighbor 192.0.2.1 announce attributes next-hop self community [65000:1 65535:0] " + (
    "nlri " + " ".join(f"10.99.0.{i}/32" for i in range(1, 101)) + " ;"
)


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param([COMMAND], id="api-command"),
        pytest.param(["neighbor 192.0.2.1 {", "  local-as 65001;", "}"], id="config-lines"),
        pytest.param(["a { b; c [ d, e ] ; } f;"], id="groups-in-one-line"),
        pytest.param(['description "a b; c";'], id="quoted"),
        pytest.param(["a;", "b 'x y' ;"], id="quoted-second-line"),
        pytest.param(["a ; # b ;", "c;"], id="comment"),
        pytest.param(["a\\tb\\u0022c ;"], id="escapes-make-a-quote"),
        pytest.param(["a\\nb ;"], id="escaped-newline"),
        pytest.param(["a b"], id="unended-word"),
        pytest.param(["a b ]"], id="unended-syntax"),
        pytest.param(["a b "], id="unended-space"),
        pytest.param(["a;", "b"], id="unended-second-line"),
        pytest.param(["a ;\\"], id="escape-at-the-end"),
        pytest.param(["", "  ", "\t\r"], id="blank"),
        pytest.param(["a\x0bb\x0c ;", "é ;"], id="other-characters-are-words"),
    ],
)
def test_tokens_same_result_as_exabgps_own(lines: list[str]) -> None:
    assert token_groups(launch.tokens, lines) == token_groups(TOKENS, lines)


#: Lines of the characters the tokenizer treats apart, a word's, and escapes.
TOKEN_TEXT = st.lists(
    st.lists(
        st.sampled_from([*" \t\r\n;{}[],#\"'\\ab1./:", "\\u0022", "\\n", "é", "nlri"]),
        max_size=16,
    ).map("".join),
    min_size=1,
    max_size=3,
)


@settings(max_examples=2000, deadline=None)
@given(TOKEN_TEXT)
def test_tokens_property_same_as_exabgps_own(lines: list[str]) -> None:
    assert token_groups(launch.tokens, lines) == token_groups(TOKENS, lines)


def test_tokens_reads_its_stream_line_by_line_as_the_original() -> None:
    """The configuration's file reader counts the lines read for its error messages: a
    group is yielded before the next line is read."""
    for tokenize in (TOKENS, launch.tokens):
        read: list[str] = []

        def stream(read: list[str] = read) -> Any:
            for line in ("a ; b ;", "c ;"):
                read.append(line)
                yield line

        groups = tokenize(stream())
        assert [word for _, _, word in next(groups)] == ["a", ";"]
        assert read == ["a ; b ;"]
        next(groups)
        assert read == ["a ; b ;"]
        next(groups)
        assert read == ["a ; b ;", "c ;"]


# --------------------------------------------------------------------------- announce attributes

#: ExaBGP's own ``announce attributes`` command (before any test patched the registry).
ANNOUNCE_COMMAND = exabgp_announce.announce_attributes


class FakeReactor:
    """What the ``announce attributes`` command uses of ExaBGP's reactor: its peers, its
    configuration's neighbours (real ones, from the test configuration), the answers it
    writes and the step it schedules."""

    def __init__(self) -> None:
        log.init(getenv())
        self.configuration = Configuration([CONFIG], text=True)
        assert self.configuration.reload(), self.configuration.error
        self.answers: list[str] = []
        self.scheduled: list[tuple[str, str, Any]] = []
        self.processes = SimpleNamespace(
            answer_done=lambda service: self.answers.append(f"done {service}"),
            answer_error=lambda service: self.answers.append(f"error {service}"),
        )
        self.asynchronous = SimpleNamespace(
            schedule=lambda *args: self.scheduled.append(args),
        )

    def peers(self, service: str) -> list[str]:
        return list(self.configuration.neighbors)

    def adj_rib_out(self) -> dict[str, list[str]]:
        return {
            name: [c.extensive() for c in neighbor.rib.outgoing._new_nlri.values()]
            for name, neighbor in self.configuration.neighbors.items()
        }


class Logged:
    """ExaBGP's logger writing to a list, at ``level`` with the "processes" lines on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, level: str) -> None:
        self.lines: list[str] = []
        monkeypatch.setattr(log_option, "logit", {})
        log_option._set_level(level)
        monkeypatch.setattr(log_option, "enabled", {**log_option.enabled, "processes": True})
        writer = SimpleNamespace(**dict.fromkeys(("info", "error", "debug"), self.lines.append))
        monkeypatch.setattr(log_option, "logger", writer)
        monkeypatch.setattr(log_option, "formater", lambda line, source, level, when: line)


def run_steps(
    command: Any, monkeypatch: pytest.MonkeyPatch, level: str, line: str
) -> tuple[FakeReactor, Logged, Any, list[Any]]:
    """One API command run to its end as ExaBGP's reactor would, over fresh adj-rib-outs
    (ExaBGP keeps them per neighbour name across configurations): the reactor, the log,
    what the command returned and the steps it yielded."""
    monkeypatch.setattr(RIB, "_cache", {})
    reactor = FakeReactor()
    logged = Logged(monkeypatch, level)
    returned = command(API(reactor), reactor, "speaker", line, False)
    [(service, scheduled, steps)] = reactor.scheduled
    assert (service, scheduled) == ("speaker", line)
    return reactor, logged, returned, list(steps)


def run_command(command: Any, monkeypatch: pytest.MonkeyPatch, level: str, line: str) -> Any:
    """:func:`run_steps`, then the answers, the adj-rib-outs and the log lines."""
    reactor, logged, returned, steps = run_steps(command, monkeypatch, level, line)
    return returned, steps, reactor.answers, reactor.adj_rib_out(), logged.lines


ANNOUNCE = (
    "neighbor 192.0.2.1 announce attributes next-hop self med 5 nlri 10.99.0.1/32 10.99.0.2/32"
)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(ANNOUNCE, id="one-neighbour"),
        pytest.param(
            "announce attributes next-hop self community [65000:1] "
            "nlri 10.99.0.3/32 2001:db8::9/128",
            id="every-neighbour-two-families",
        ),
        pytest.param("announce attribute next-hop 192.0.2.99 nlri 10.99.0.4/32", id="singular"),
        pytest.param(
            "neighbor 198.51.100.1 announce attributes next-hop self nlri 10.99.0.5/32",
            id="no-neighbour",
        ),
        pytest.param("announce attributes next-hop self", id="no-route"),
        pytest.param("announce attributes next-hop self nlri 10.99.0.300/32", id="bad-prefix"),
    ],
)
@pytest.mark.parametrize("level", ["WARNING", "INFO"])
def test_announce_attributes_same_result_as_exabgps_own(
    monkeypatch: pytest.MonkeyPatch, line: str, level: str
) -> None:
    """The same answers, steps, routes in each adj-rib-out and log lines (at INFO the
    per-route line too) as the original command."""
    want = run_command(ANNOUNCE_COMMAND, monkeypatch, level, line)
    got = run_command(launch.announce_attributes, monkeypatch, level, line)
    assert got == want
    if level == "INFO" and "nlri 10.99.0.1/32" in line:
        assert any(text.startswith("route added to neighbor 192.0.2.1") for text in got[-1])


def test_announce_attributes_formats_no_route_text_that_is_not_logged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of the replacement: at WARNING (how the speaker runs ExaBGP) no route's
    text is made for the INFO line; ExaBGP's own command makes one per route."""
    made: list[str] = []
    extensive = Change.extensive

    def counted(change: Any) -> str:
        made.append(change.nlri.cidr.prefix())
        return str(extensive(change))

    monkeypatch.setattr(Change, "extensive", counted)
    reactor = run_steps(launch.announce_attributes, monkeypatch, "WARNING", ANNOUNCE)[0]
    assert made == []
    assert reactor.answers == ["done speaker"]
    assert [len(routes) for routes in reactor.adj_rib_out().values()] == [2, 0, 0]
    assert len(made) == 2  # the check above
    made.clear()
    run_steps(launch.announce_attributes, monkeypatch, "INFO", ANNOUNCE)
    assert made == ["10.99.0.1/32", "10.99.0.2/32"]


# --------------------------------------------------------------------------- the NLRI sort


def routes(words: str) -> list[Any]:
    """The NLRI of one ``announce attributes`` command's routes, as ExaBGP parses them."""
    return [change.nlri for change in parse(f"attributes next-hop self {words}")[1]]


def with_path_info(nlris: list[Any], ids: list[int]) -> list[Any]:
    """Copies of ``nlris`` carrying an add-path identifier each (RFC 7911)."""
    out = []
    for nlri, path_id in zip(nlris, ids, strict=True):
        copy = launch._nlri_copy(nlri)
        copy.path_info = PathInfo(path_id.to_bytes(4, "big"))
        out.append(copy)
    return out


def nlri_cases() -> list[Any]:
    """Lists to sort: what ExaBGP sorts (NLRI of one UPDATE) and what it must leave to
    sorted (other NLRI types, other items, keywords)."""
    many = routes("nlri " + " ".join(f"10.{i // 250}.{i % 250}.1/32" for i in range(400)))
    shuffled = many[:]
    random.Random(7).shuffle(shuffled)
    mixed = routes("nlri 10.99.0.2/32 2001:db8::1/128 10.99.0.0/24 10.99.0.1/32")
    twice = routes("nlri 10.99.0.1/32 10.99.0.1/32 10.99.0.0/31")  # equal indexes: stable
    paths = with_path_info(mixed[:3] * 2, [2, 1, 3, 1, 0, 2])
    labels = routes("label 100 nlri 10.99.0.2/32 10.99.0.1/32")
    return [
        pytest.param(many, {}, id="one-update-in-order"),
        pytest.param(shuffled, {}, id="one-update-shuffled"),
        pytest.param(mixed, {}, id="families-and-masks"),
        pytest.param(twice, {}, id="equal-indexes"),
        pytest.param(paths, {}, id="add-path"),
        pytest.param(labels, {}, id="labelled-left-to-sorted"),
        pytest.param(mixed + labels, {}, id="mixed-types-left-to-sorted"),
        pytest.param([3, 1, 2], {}, id="not-nlri"),
        pytest.param(shuffled[:20], {"reverse": True}, id="reverse"),
        pytest.param(shuffled[:20], {"key": str}, id="key"),
        pytest.param([], {}, id="empty"),
    ]


@pytest.mark.parametrize(("items", "options"), nlri_cases())
def test_nlri_sorted_same_result_as_sorted(items: list[Any], options: dict[str, Any]) -> None:
    """The same objects in the same order as ``sorted`` (by identity: equal NLRI keep
    their order), from a list and from a one-pass iterator."""
    want = [id(item) for item in sorted(items, **options)]
    assert [id(item) for item in launch.nlri_sorted(items, **options)] == want
    assert [id(item) for item in launch.nlri_sorted(iter(items), **options)] == want


def test_nlri_sorted_indexes_each_route_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: one index per route, where comparing NLRI made two per
    comparison (ExaBGP's sort of one UPDATE's 400 routes: ~800 for routes in order)."""
    many = routes("nlri " + " ".join(f"10.{i // 250}.{i % 250}.1/32" for i in range(400)))
    packed: list[int] = []
    pack_nlri = CIDR.pack_nlri

    def counted(cidr: Any) -> Any:
        packed.append(1)
        return pack_nlri(cidr)

    monkeypatch.setattr(CIDR, "pack_nlri", counted)
    launch.nlri_sorted(many)
    assert len(packed) == len(many)
    packed.clear()
    sorted(many)
    assert len(packed) >= 2 * (len(many) - 1)
