"""Start ExaBGP in this interpreter with verified hot spots made cheaper, or unmodified.

``python -m bgpd.exabgp.launch server CONF`` is ``python -m exabgp server CONF`` after
four changes. First, ExaBGP 5.0's ``Neighbor.remove_self`` deep-copies every route it puts in a
neighbour's adj-rib-out (about 60 objects per route), which profiling showed to be about
half of ExaBGP's CPU time when it takes 10,000 routes from the API (docs/benchmarks.md).
The copy exists so the per-neighbour next-hop rewrite ("next-hop self") cannot leak into
the shared parsed route or into another neighbour's copy. The replacement keeps exactly
that guarantee with shallow copies of the three objects the rest of ExaBGP ever assigns
to (the Change, its NLRI and its attribute set): the attribute and NLRI field objects are
never mutated in place after parsing. Second, the reactor may run :data:`ASYNC_STEPS`
queued route steps per loop turn instead of 50 (see there). Third, a configuration reload
is never skipped because updates are still queued (:func:`no_pending_adjribout`): the
speaker reloads ExaBGP in place (bgpd/exabgp/reload.py) and must know it happened.
Fourth, the routes of one API command share one copy of its attribute set per neighbour
in the adj-rib-out (:func:`neighbour_attributes`; ~0.65 KiB less per route).

The launcher fails open: it must never be the reason ExaBGP does not start. The changes
are applied only when the source of every ExaBGP function and class the replacement
calls or assumes (:data:`RELIED_ON`) is byte-for-byte what it was checked against
(ExaBGP 5.0.15, pinned in pyproject.toml: whole files are compared first,
:data:`VERIFIED_FILES`, and each target's source read only when one differs); a changed
or missing source (an ExaBGP installed without its .py files),
``$KUBE_BGPD_EXABGP_UNMODIFIED`` set, or any exception
while checking or patching means ExaBGP runs unmodified, correct and slower with many
routes. The launcher then prints one line with "warning" and the reason on stderr
(starting with :data:`UNMODIFIED_MARK`), which the supervisor logs at WARNING and the
runtime reads: an unmodified ExaBGP is restarted for a configuration change instead of
reloaded. It also compares the route steps the driver may keep
queued (``$KUBE_BGPD_EXABGP_STEPS``, set by the runtime) with the step limit in force in
this ExaBGP, read from its reactor class, and says so when a turn cannot take them all.

It also makes two steps of ExaBGP's parsing cheaper, verified the same way:
``NLRI.unpack_nlri`` formats its family key once per family instead of once per NLRI
(:func:`unpack_nlri`: ExaBGP parses every UPDATE it sends to report it to the speaker,
and that formatting was ~6% of its CPU while it sent 30,000 routes), and
``Family.family`` builds its result without the constructor's throw-away objects
(:func:`family`: its calls were ~11% there; each now costs about half), as the
constructor itself now does (:func:`family_init`), and ``Family.index`` is formatted
once per family (:func:`family_index`).
Three more steps of its intake of API routes, verified the same way (docs/benchmarks.md,
"ExaBGP's intake: session 10"): the tokenizer splits a line without quotes or comments
with a regular expression instead of one Python step per character (:func:`tokens`);
the ``announce attributes`` command formats its INFO line per route only when that
line is logged (:func:`announce_attributes`); the sort of each UPDATE's NLRI computes
each route's index once instead of twice per comparison (:func:`nlri_sorted`).

Apart from these, checked on its own (:data:`BRIDGE_RELIED_ON`, :func:`bridge_helper`):
when ExaBGP is patched, its API helper runs as a thread of ExaBGP's process instead of a
process of its own (bgpd/exabgp/bridge.py); a difference there keeps the helper a process
and says so, ExaBGP staying patched.

Before all of this, patched or not, the launcher keeps OpenSSL out of ExaBGP's process
(:func:`keep_out`): there ``import ssl``, ``import _ssl`` and ``import _hashlib`` raise
ImportError (``sys.modules[name] = None``, the import system's documented way), so neither
libssl nor libcrypto is mapped: ~4.5 MiB of ExaBGP's RSS at idle (docs/benchmarks.md,
"OpenSSL out of ExaBGP's process (session 11)"). Nothing there uses them. BGP has no TLS
(TCP-MD5 is the kernel's: ExaBGP sets it with setsockopt), ExaBGP 5.0.15 imports neither
``ssl`` nor ``hashlib`` (grep), asyncio imports ``ssl`` optionally (``ssl = None``:
only a TLS connection or server needs it), and ``hashlib``, which the launcher's digests,
``random`` (its ``sha512`` seed) and ``uuid`` (``uuid3``/``uuid5``) import, falls back to
Python's built-in hashes without ``_hashlib`` (kept out only when they are all there,
:func:`builtin_hashes`). What would break: an ExaBGP that imports one of them at start
(not 5.0.15) would not start, so the launcher imports ExaBGP's entry point first and, on
that ImportError, starts itself again in the same process with OpenSSL allowed
(:func:`restart_with_openssl`, saying so); one that imports one only when it runs (to use
TLS, or a hash only OpenSSL has) would fail there, which 5.0.15 never does
(tests/component/test_exabgp_driver.py runs it, MD5 sessions included, and checks its
maps). ``$KUBE_BGPD_EXABGP_OPENSSL`` set lets them in.

This module must not import anything from kube-bgpd but the relay (bridge and helper,
standard library only): it runs inside ExaBGP's process; nor ``hashlib`` at module level
(:func:`sha256_hex`): run as ``__main__``, its imports come before :func:`main` keeps
``_hashlib`` out.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib
import importlib.util
import inspect
import itertools
import operator
import os
import re
import sys
from collections.abc import Collection, Mapping
from typing import Any, NoReturn

#: Set (to anything but empty) to run ExaBGP unmodified: the escape hatch should the
#: patch ever be suspected, and how the component test takes the fallback path.
UNMODIFIED_ENV = "KUBE_BGPD_EXABGP_UNMODIFIED"
#: The most route steps the driver keeps queued in ExaBGP (:func:`queued_steps`).
STEPS_ENV = "KUBE_BGPD_EXABGP_STEPS"
#: How the launcher's line begins when ExaBGP runs unmodified (the runtime looks for it).
UNMODIFIED_MARK = "kube-bgpd launcher warning: running ExaBGP unmodified"
#: Set (to anything but empty) to let ExaBGP's process load OpenSSL (:func:`keep_out`):
#: the escape hatch, and what :func:`restart_with_openssl` sets.
OPENSSL_ENV = "KUBE_BGPD_EXABGP_OPENSSL"
#: The modules :func:`keep_out` keeps out of ExaBGP's process: ``_ssl`` and ``_hashlib``
#: are the two that map OpenSSL (libssl and libcrypto; libcrypto alone for ``_hashlib``),
#: and ``ssl`` the one that imports ``_ssl``, kept out itself so that the ImportError
#: asyncio's optional ``import ssl`` expects is raised before anything runs.
OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")
#: The module without which ``hashlib`` uses Python's built-in hashes.
OPENSSL_HASHES = "_hashlib"
#: ExaBGP's entry point (its ``main``), imported by :func:`main` before anything else of
#: ExaBGP: it imports the server and so the reactor and the configuration, nearly all of
#: ExaBGP, which is where a module kept out would be missed at start.
ENTRY = "exabgp.application.main"

#: sha256 of ``inspect.getsource`` of each ExaBGP function or class the replacement calls
#: or relies on, in the release it was verified against (5.0.15). Whole classes where
#: :func:`remove_self` copies instances field by field or builds them, so a new field, a
#: ``__slots__`` or a changed cache is a difference too.
RELIED_ON: Mapping[str, str] = {
    # The original: the contract the replacement keeps.
    "exabgp.bgp.neighbor:Neighbor.remove_self": (
        "cbd04747e6f3e8345b2591aea898be36c58c4a3fa26c2aecef1909d05ef517a2"
    ),
    # Called for "next-hop self": the neighbour's own address for the route's family.
    "exabgp.bgp.neighbor:Neighbor.ip_self": (
        "745f4d8d79e07f7a4e8a6eb127a755a064f3b044d09f125588a9988ca4db8eb9"
    ),
    # Built over the copies: Change(nlri, attributes), nothing else in its state.
    "exabgp.rib.change:Change": (
        "9eae21f177635ca101b521a5fe3dfb2c98ae75574d29b432cac7516131e05dd9"
    ),
    # Copied field by field: a dict subclass whose only mutable instance field is _dict.
    "exabgp.bgp.message.update.attribute.attributes:Attributes": (
        "a6394504e7c7d0d2e19dc50c38c1ae1d2b35e967317288135c94a7a104a8dc1d"
    ),
    # The attribute written for the rewritten next hop (its class and base, which holds
    # the NEXT_HOP code).
    "exabgp.bgp.message.update.attribute.attribute:Attribute": (
        "8e9c9d1811c72221f6b91712efa13f79e7219b040541f24b5298b007e9325708"
    ),
    "exabgp.bgp.message.update.attribute.nexthop:NextHop": (
        "af31f324d22d38ef797196dbcec0b36d44a6df4ce1a7b15b1e0811e8a18b95ae"
    ),
    # The unicast NLRI copied field by field (its class and bases: no __slots__, the
    # nexthop and afi fields).
    "exabgp.bgp.message.update.nlri.inet:INET": (
        "0f178e00d0f4c5bbd371def7a1d75b446e5ec927b11fa8bb4cac6942c11e5475"
    ),
    "exabgp.bgp.message.update.nlri.nlri:NLRI": (
        "a3b6caada23a4dae244d55f8590ebd314a4e3b4472366043f309db7408037b19"
    ),
    "exabgp.protocol.family:Family": (
        "98a12a8a11e63af5efa471b00fd52ca67feb2c0ad0c492a13006f178106588b8"
    ),
    # A next hop's SELF flag, and pack() of the neighbour's own address.
    "exabgp.protocol.ip:IPSelf": "fb8b0f81776db342d373db294f387a1be3a2de0a5189ce9a283a7d00c8464260",
    "exabgp.protocol.ip:IP": "def44422c6bcdfb72b8e47c5dcc40fd4c77c6ae6ac6ed482eff7722ecaa70181",
    "exabgp.protocol.ip:IPv4": "01e844615b9ce9258e7860ccff6262374cdb5d851e734f16cbd57c915dbc7557",
    "exabgp.protocol.ip:IPv6": "98376b08457824cb15c488a3f018ab8cb96b79286e012f1f3a13de1dcad487fa",
    # The reactor's step loop: runs LIMIT queued steps a turn, LIMIT read per turn.
    "exabgp.reactor.asynchronous:ASYNC": (
        "0516fc1478a4d2f6ff6b9b0284cf72d343181c638690bbf878341e4ae946c993"
    ),
    # The family key made once per family (unpack_nlri): the original is NLRI's (hashed
    # above, with its registry); the key's text is the AFI's and SAFI's names, which
    # depend on their value only, and create() gives those types. family() builds what
    # Family's constructor (hashed above) builds from AFI.create() and SAFI.create().
    "exabgp.protocol.family:_AFI": (
        "b84559077f95957c79827ba81121040cf0e0b4e1bfa882bd0bb6f3bb7ac6e614"
    ),
    "exabgp.protocol.family:_SAFI": (
        "03bc1a93010241494da9dc99dd89ce581ecd265351f3f58dc27031dcf7d529e5"
    ),
    "exabgp.protocol.family:AFI": (
        "1db6ed25248858edbbe0f869a6e382233f1677591a401ca3f56e686b285ced56"
    ),
    "exabgp.protocol.family:SAFI": (
        "ae2871dbca25e44143f7ffb6e01ab22bfef461f67f9e38b0defcbc08292bdf2d"
    ),
    # The reload made reliable (no_pending_adjribout): the check it replaces, its only
    # caller (the main loop, which re-arms the signal before consulting it, so a reload
    # refused there is lost) and the reload itself (what it does to each neighbour:
    # bgpd/exabgp/reload.py).
    "exabgp.reactor.loop:Reactor._pending_adjribout": (
        "1eca799614b5b01c8fe9b0c294f490185264394dca086b92cc1ed0484b41f8a3"
    ),
    "exabgp.reactor.loop:Reactor.run": (
        "2be669a4812a5c6d00309f7c19de90f9731ce222d345e307dbdecd2a892857c8"
    ),
    "exabgp.reactor.loop:Reactor.reload": (
        "9d31059186ff3252436c996c286e7ea27f5df66f6893e48de86e4ae057f9cf23"
    ),
    # One attribute copy shared by a command's routes (neighbour_attributes): the one
    # caller hands every route of an API command, parsed over one attribute set, to each
    # neighbour in turn, and the adj-rib-out and its cache store, index, compare and pack
    # a route's attributes but never assign to them (the watchdog's pops aside, which
    # only an attribute set holding an internal code has: never shared).
    "exabgp.configuration.configuration:Configuration.inject_change": (
        "061dae4651ca234dd6ed1a92f8bd035d991327087145c6893975836b994ad260"
    ),
    "exabgp.rib.outgoing:OutgoingRIB": (
        "73e00146b7d49804274d853dde435ae45d0a70120954ae7f287ef89fedad4493"
    ),
    "exabgp.rib.cache:Cache": "c012dfecf9170daca97851684b6649d6cdfe6902859a64e7f50ab727569c52ca",
    # The tokenizer (tokens): the original, the contract kept, which the tokeniser module
    # calls by its own name for it (checked at install) and which unescapes each line
    # with the same module's unescape (called the same way).
    "exabgp.configuration.core.format:tokens": (
        "3c65240e64438f72feb229b82295789be8a60cfc8eda3aaab8835dda62cce013"
    ),
    # The announce command with its INFO line made lazy (announce_attributes): the
    # original; the registry it is found and replaced in (by command name, per
    # encoding); log_message, whose log.info of the message the replacement calls with a
    # callable; the logger, which calls a callable message at once and only when the line
    # is logged.
    "exabgp.reactor.api.command.announce:announce_attributes": (
        "576c0115f8832656fc864e969b894e79ca675ed397ac971708ac7d71fb5417f1"
    ),
    "exabgp.reactor.api.command.command:Command": (
        "7fe9aaf4130adc9933547dfd5015489d1db14775b6f466bcca739078ab8b44b2"
    ),
    "exabgp.reactor.api:API.log_message": (
        "ffcfabe74e00c1fb6cc28a10ea346a3a62f1e3b846beff29f1b99b35bc279327"
    ),
    "exabgp.logger:_log": "052d72734cb9f89db111c941683a4889944f4a96f48db9f7b836a1d77efc99ae",
    "exabgp.logger:log": "d26cc64c8c09f69035a7f5698be6a26293cfc0533a97b04b7171a74892b5b0ca",
    # The NLRI sort by index (nlri_sorted): NLRI's __lt__/__gt__ compare index() (NLRI,
    # hashed above), INET.index (INET, above) builds it from Family.index (above), the
    # path-info's pack and the prefix's pack_nlri, which read the route's fields only.
    "exabgp.bgp.message.update.nlri.cidr:CIDR": (
        "3d16b53e375eff2840eb32036f41d2d0ee271390872754346b7062b06803bb68"
    ),
    "exabgp.bgp.message.update.nlri.qualifier.path:PathInfo": (
        "743de55dc7ad7ccfeef651c44250f162a999112afa353700a293d9fe7f656388"
    ),
}

#: sha256 of each whole ExaBGP source file holding a :data:`RELIED_ON` or
#: :data:`BRIDGE_RELIED_ON` target, by its path under site-packages, in the release those
#: were verified against: when every file a check needs is this one byte for byte, each
#: target's source is the verified one, and :func:`verified_digests` need not read them out
#: one by one (``inspect.getsource`` tokenizes and parses: ~0.1 s of CPU for the 25
#: targets, at every ExaBGP start, beside the speaker's first LIST).
VERIFIED_FILES: Mapping[str, str] = {
    "exabgp/bgp/message/update/attribute/attribute.py": (
        "7cff23e184a812f6bc06b510066aaaecee9bf0ff3a8e95bb264b3144d47c8f2f"
    ),
    "exabgp/bgp/message/update/attribute/attributes.py": (
        "0e185c3428f21a45399b0fb65496f32d4af06644b2e2173cf1422cf6e8d469e6"
    ),
    "exabgp/bgp/message/update/attribute/nexthop.py": (
        "fa6b1ba1494051c4c34ee3c20635408ae77774960b8e401b6da89af0c1de9fbb"
    ),
    "exabgp/bgp/message/update/nlri/cidr.py": (
        "21d4ecefb132a4583f6953648ab5763c8d45a364ab404366d6cb8c7d1fea6b52"
    ),
    "exabgp/bgp/message/update/nlri/inet.py": (
        "7bb3e4e0a056357343922a6b26a3ed8e7addc62154222c5d3f297a5876767ac8"
    ),
    "exabgp/bgp/message/update/nlri/nlri.py": (
        "e891388de8ca6a2fe51828bac6fd3ea8edb35a40594502846708d466b848eaf9"
    ),
    "exabgp/bgp/message/update/nlri/qualifier/path.py": (
        "60d64112b2961144ce92eb3f8fbf1557da967d85fc9b7ed208709f1f0ff75fbd"
    ),
    "exabgp/bgp/neighbor.py": "5985070e18ad76fa7d4b599b52181a577ef57ad96ac4c9126f63d6e7d3b4c064",
    "exabgp/configuration/configuration.py": (
        "f78b289e3c2a573fe7862dac5c812636cc4822fe7738dea6a9d9044fb577f73f"
    ),
    "exabgp/configuration/core/format.py": (
        "af0b6b7bce0db232281e437b353ab8d0252ec22d523f60a4243dae1d32c79b20"
    ),
    "exabgp/logger/__init__.py": "bafa3edcc3a0047b7437fe6a2bf66449583e6fe99fd50b6cf8b75e6faff8feda",
    "exabgp/protocol/family.py": "e97fb7b188b64b05411c2f319a2c14d068568a2d33b8d607b5d1b3115d01fd4e",
    "exabgp/protocol/ip/__init__.py": (
        "12a184f22abd2f65054ffc81c19125039fe8b9d499e06041b365b05044009058"
    ),
    "exabgp/reactor/api/__init__.py": (
        "539e9b912adf24659f62b3566a123b3e1144fbe8783db07473396fe6a853726e"
    ),
    "exabgp/reactor/api/command/announce.py": (
        "c5dbde71fff5bf58253832c09947668aecf4916f42c7cc3afbf6ed09459e6be4"
    ),
    "exabgp/reactor/api/command/command.py": (
        "be4686d17f0893761ddfed6a2d70a1147ec0625775583b04e6ac9189712a0bf4"
    ),
    "exabgp/reactor/api/processes.py": (
        "22e6356630081860200ec7025706efbbdd87b5198f9a52dcb5e630fbdd9ad3f1"
    ),
    "exabgp/reactor/asynchronous.py": (
        "6cd687ee1e958089d99e716cb7c10cca68f529afd4e1ae92d097dd562f40a211"
    ),
    "exabgp/reactor/loop.py": "1ce862d263ca6c20a3e27f5827ea811753c98384717e363c139e6565a6327579",
    "exabgp/rib/cache.py": "33c09084f8b8ef690713cd7ac9c3414dc05103908b62b0bfea86e6ab6e1a69ea",
    "exabgp/rib/change.py": "3b1fe95030b1c4680b7ccc78e020496721c1c19f1c8f03c489d0314e28edeafd",
    "exabgp/rib/outgoing.py": "9bfb0cecd20f0a6d79dcaa482fe34cde5119cd78d891ded334cfb0d2c4ff72c7",
}

#: :func:`targets_fingerprint` of :data:`RELIED_ON` and :data:`BRIDGE_RELIED_ON` as they
#: were when :data:`VERIFIED_FILES` was recorded: the files vouch for those digests only
#: (one edited without the other makes every check read the targets one by one again).
VERIFIED_FILES_FOR = "938d5b652e328d0057ddd409ce41b6f31ab5035f04ce8f9e74c1d0581d9f461b"

#: Route steps ExaBGP's reactor runs per loop turn once patched (ExaBGP 5.0: 50, one per
#: prefix of a command). When queued work remains at the end of a turn and no new command
#: arrived, the reactor waits in poll() for up to 10 ms before the next turn; with 50 steps
#: a 100-prefix command always leaves work behind, and each turn also sets up a new
#: asyncio event loop (10,000 routes: ~200 turns instead of ~25). The runtime refuses a
#: driver window whose :func:`queued_steps` exceed this, and the launcher checks the limit
#: actually in force against what the runtime says the driver keeps queued.
ASYNC_STEPS = 1000


class Unmodified(enum.StrEnum):
    """Why ExaBGP runs unmodified; named in the launcher's warning line."""

    REQUESTED = "requested"  # $KUBE_BGPD_EXABGP_UNMODIFIED is set
    SOURCE_UNAVAILABLE = "source-unavailable"  # inspect.getsource raised (no .py files)
    SOURCE_CHANGED = "source-changed"  # a function in RELIED_ON is not the verified one
    FAILED = "failed"  # any exception while checking or patching


def queued_steps(window: int, batch: int) -> int:
    """The most route steps a driver keeps queued in ExaBGP: ``window`` commands in flight,
    each one step per prefix (up to ``batch``) plus one for its answer."""
    return window * (batch + 1)


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` in hex, with ``hashlib`` imported on first use rather than with
    this module (see the module's docstring): in ExaBGP's process it is built-in sha256,
    ~0.6 ms more CPU at start for the verified files than OpenSSL's."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


def resolve(target: str) -> Any:
    """The object ``"module:Qual.name"`` names."""
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for name in qualname.split("."):
        obj = getattr(obj, name)
    return obj


def source_digest(target: str) -> str | None:
    """The sha256 of the installed source of ``target``; None if it has no source (an
    ExaBGP installed from bytecode only: ``inspect.getsource`` raises OSError)."""
    try:
        source = inspect.getsource(resolve(target))
    except (OSError, TypeError):
        return None
    return sha256_hex(source.encode())


def _site_packages() -> str | None:
    """The directory ExaBGP is installed in (that holds the ``exabgp`` package)."""
    file = importlib.import_module("exabgp").__file__
    return None if file is None else os.path.dirname(os.path.dirname(file))


def _source_file(target: str) -> str | None:
    """The path of the source file that holds ``target``, under site-packages (as
    :data:`VERIFIED_FILES` names it); None when there is none."""
    path, root = inspect.getsourcefile(resolve(target)), _site_packages()
    return None if path is None or root is None else os.path.relpath(path, root)


def file_digest(relative: str) -> str | None:
    """The sha256 of the file at ``relative`` under site-packages (None if unreadable)."""
    root = _site_packages()
    if root is None:
        return None
    try:
        with open(os.path.join(root, relative), "rb") as f:
            return sha256_hex(f.read())
    except OSError:
        return None


def targets_fingerprint(digests: Mapping[str, str]) -> str:
    """One sha256 for a mapping of targets to digests (:data:`VERIFIED_FILES_FOR`)."""
    text = "\n".join(f"{target} {digest}" for target, digest in sorted(digests.items()))
    return sha256_hex(text.encode())


def verified_digests(verified: Mapping[str, str]) -> dict[str, str | None]:
    """:func:`source_digest` of each target in ``verified`` (which maps them to their
    verified digests), the cheap way when it gives the same answer: if every file that
    holds one of them is the verified release's (:data:`VERIFIED_FILES`), the targets'
    sources are the verified ones, so their digests are ``verified``'s, provided these
    are the digests the files were recorded with (:data:`VERIFIED_FILES_FOR`). Otherwise
    each target's source is read and hashed, and :func:`check` says which differ."""
    release = {**RELIED_ON, **BRIDGE_RELIED_ON}
    if (
        targets_fingerprint(release) == VERIFIED_FILES_FOR
        and verified.items() <= release.items()
        and all(
            f is not None and f in VERIFIED_FILES and file_digest(f) == VERIFIED_FILES[f]
            for f in {_source_file(target) for target in verified}
        )
    ):
        return dict(verified)
    return {target: source_digest(target) for target in verified}


def check(
    digests: Mapping[str, str | None], verified: Mapping[str, str], *, requested: bool
) -> tuple[Unmodified | None, str]:
    """Whether to patch, and the detail for the warning: purely computational.

    ``digests`` is :func:`source_digest` of the targets, ``verified`` their digests in
    the verified release (:data:`RELIED_ON`); a target missing from ``digests`` counts as
    changed. None: patch."""
    if requested:
        return Unmodified.REQUESTED, f"${UNMODIFIED_ENV} is set"
    missing = [t for t in verified if t in digests and digests[t] is None]
    if missing:
        return Unmodified.SOURCE_UNAVAILABLE, f"no source for {', '.join(missing)}"
    changed = [t for t, want in verified.items() if digests.get(t) != want]
    if changed:
        return Unmodified.SOURCE_CHANGED, f"not the verified 5.0.15: {', '.join(changed)}"
    return None, ""


def step_limit(in_force: int) -> int:
    """The step limit once patched: :data:`ASYNC_STEPS`, never lower than what is in force."""
    return max(in_force, ASYNC_STEPS)


def steps_note(wanted: int | None, limit: int) -> str:
    """The warning when a reactor turn cannot take what the driver keeps queued, or ""."""
    if wanted is None or wanted <= limit:
        return ""
    return (
        f"the driver keeps up to {wanted} route steps queued and this ExaBGP runs {limit} "
        "a turn (slower: more reactor turns)"
    )


def wanted_steps(environ: Mapping[str, str]) -> int | None:
    """:data:`STEPS_ENV` as an int; None when unset or not a number (then nothing to
    compare: a hand-started launcher)."""
    try:
        return int(environ[STEPS_ENV])
    except (KeyError, ValueError):
        return None


@functools.cache
def _exabgp_types() -> tuple[Any, Any, Any]:
    """ExaBGP's Change, the NEXT_HOP attribute code and NextHop, imported once (lazily:
    the runtime imports this module for :func:`queued_steps` without loading ExaBGP)."""
    from exabgp.bgp.message.update.attribute import Attribute, NextHop
    from exabgp.rib.change import Change

    return Change, Attribute.CODE.NEXT_HOP, NextHop


def _shallow(obj: Any) -> Any:
    """A new instance of ``obj``'s class sharing its field values (what ``copy.copy``
    does for these plain classes, at a fraction of the cost)."""
    cls: Any = type(obj)
    new = cls.__new__(cls)
    new.__dict__.update(obj.__dict__)
    return new


def _nlri_copy(nlri: Any) -> Any:
    """:func:`_shallow` for the NLRI the adj-rib-out keeps, one per route: the fields
    set one by one, in the original's order, keep CPython's inline attribute values,
    where updating ``__dict__`` gave every copy a dictionary of its own (64 bytes a
    route: 1.8 MiB at 30,000 routes; the original's dictionary, made by reading it, goes
    with the parsed route)."""
    cls: Any = type(nlri)
    new = cls.__new__(cls)
    for name, value in nlri.__dict__.items():
        setattr(new, name, value)
    return new


def remove_self(self: Any, changes: Any) -> Any:
    """``Neighbor.remove_self`` without the deep copy: a new Change over a copied NLRI
    and this neighbour's copy of the attribute set (:func:`neighbour_attributes`), so
    the next-hop rewrite touches only this neighbour's copies (the original's contract),
    and nothing else is shared mutably."""
    change_type = _exabgp_types()[0]
    nlri = _nlri_copy(changes.nlri)
    neighbor_self = self.ip_self(nlri.afi) if nlri.nexthop.SELF else None
    attributes = neighbour_attributes(self, changes.attributes, neighbor_self)
    if neighbor_self is not None:
        nlri.nexthop = neighbor_self
    return change_type(nlri, attributes)


def _attributes_copy(parsed: Any, neighbor_self: Any) -> Any:
    """A copy of the attribute set ``parsed`` with the next hop rewritten to
    ``neighbor_self`` (None: kept)."""
    _, next_hop_code, next_hop_type = _exabgp_types()
    attributes = _shallow(parsed)
    dict.update(attributes, parsed)
    # The instance dict's values are shared now; the one mutable cache gets its own.
    attributes._dict = dict(attributes._dict)
    if neighbor_self is not None and next_hop_code in attributes:
        attributes[next_hop_code] = next_hop_type(str(neighbor_self), neighbor_self.pack())
    return attributes


class _Copies:
    """The attribute copies made from the parsed set of the command being injected:
    (neighbour, rewritten next hop) -> copy. ExaBGP parses one ``announce attributes
    ... nlri P1 P2 ...`` into one attribute set shared by its routes, and its
    adj-rib-out then held one copy per route (~0.5 KiB each: the dict, its instance dict
    and caches); the routes of one command now share one copy per neighbour and next
    hop. Only the last parsed set is kept (a command's routes arrive together), and the
    neighbours and the set are held, so the ids in the keys cannot be reused."""

    def __init__(self) -> None:
        self.parsed: Any = None
        self.items: tuple[Any, ...] = ()
        self.copies: dict[tuple[int, str | None], tuple[Any, Any]] = {}


_COPIES = _Copies()


def neighbour_attributes(neighbor: Any, parsed: Any, neighbor_self: Any) -> Any:
    """This neighbour's copy of the attribute set ``parsed``, shared with the routes of
    the same command. A set holding one of ExaBGP's internal codes (a watchdog, which
    the adj-rib-out pops from the route's own set) and a set whose content changed
    since its copies were made (nothing in ExaBGP does that) get a copy of their own."""
    if not dict.keys(parsed).isdisjoint(type(parsed).INTERNAL):
        return _attributes_copy(parsed, neighbor_self)
    items = tuple(dict.items(parsed))
    if parsed is not _COPIES.parsed or items != _COPIES.items:
        _COPIES.parsed, _COPIES.items, _COPIES.copies = parsed, items, {}
    key = (id(neighbor), None if neighbor_self is None else str(neighbor_self))
    held = _COPIES.copies.get(key)
    if held is None:
        held = _COPIES.copies[key] = (neighbor, _attributes_copy(parsed, neighbor_self))
    return held[1]


def no_pending_adjribout(self: Any) -> bool:
    """``Reactor._pending_adjribout`` for a reactor whose routes all come from the API:
    never "still sending". ExaBGP 5.0.15's main loop re-arms the signal (or the ``reload``
    command's request) and then skips the reload while any active neighbour has
    updates queued; the request is then lost, not deferred. A neighbour that is down
    with routes queued for it has updates queued until it comes back, so with a router
    down a reload never happened (measured: a neighbour added then was refused every
    announce). The wait exists for the static routes of the previous reload, and our
    configuration has none: reloading at once is what the driver counts on."""
    return False


@functools.cache
def _nlri_types() -> tuple[Any, Any, Any, Any, Any]:
    """What :func:`unpack_nlri` calls, imported once (an import statement in the function
    costs as much as the formatting it saves)."""
    from exabgp.bgp.message.notification import Notify
    from exabgp.logger import lazynlri, log
    from exabgp.protocol.family import AFI, SAFI

    return Notify, lazynlri, log, AFI, SAFI


@functools.lru_cache(maxsize=64, typed=True)
def _family_key(afi: Any, safi: Any) -> str:
    """The registry key ``NLRI.unpack_nlri`` formats for every NLRI it parses, made once
    per family: the AFI's name builds its (unused) default text on every call, which
    made the formatting ~6% of ExaBGP's CPU while it sent 30,000 routes (it parses every
    UPDATE it sends to report it): ~2 us less per NLRI parsed (timeit). Typed: only
    AFI.create()/SAFI.create() results come here, and a plain int of the same value
    would format differently."""
    return "{}/{}".format(afi, safi)  # noqa: UP032 - the original's exact expression


def unpack_nlri(cls: Any, afi: Any, safi: Any, data: Any, action: Any, addpath: Any) -> Any:
    """``NLRI.unpack_nlri`` (a classmethod) with the family key from :func:`_family_key`;
    the rest, its debug line included, as the original."""
    notify, lazynlri, log, afi_type, safi_type = _nlri_types()
    a, s = afi_type.create(afi), safi_type.create(safi)
    log.debug(lazynlri(a, s, addpath, data), "parser")
    key = _family_key(a, s)
    if key in cls.registered_nlri:
        return cls.registered_nlri[key].unpack_nlri(a, s, data, action, addpath)
    raise notify(3, 0, f"trying to decode unknown family {a}/{s}")


def family(self: Any) -> Any:
    """``Family.family`` (every NLRI's) without its constructor call: the same new Family
    with the same AFI and SAFI objects ``AFI.create``/``SAFI.create`` give, which build
    their unused default (a new int) on every call. ExaBGP asks for a route's family
    several times as it puts the route in its adj-rib-out; the profile of 30,000 routes
    put these calls at ~11% of its CPU, and this takes about half of each (timeit)."""
    family_type, afi_type, safi_type, afi_new, safi_new = _family_types()
    new = object.__new__(family_type)
    afi = afi_type.cache.get(self.afi)
    new.afi = afi if afi is not None else afi_new(self.afi)
    safi = safi_type.cache.get(self.safi)
    new.safi = safi if safi is not None else safi_new(self.safi)
    return new


def family_init(self: Any, afi: Any, safi: Any) -> None:
    """``Family.__init__`` (every NLRI's, through INET's and NLRI's) without the default
    ``AFI.create``/``SAFI.create`` build on every call: the same AFI and SAFI objects.
    ExaBGP builds an NLRI for each route it parses from a command and for each it parses
    back from an UPDATE it sent; this takes a third off building one (timeit: INET()
    0.59 -> 0.36 us)."""
    _, afi_type, safi_type, afi_new, safi_new = _family_types()
    known = afi_type.cache.get(afi)
    self.afi = known if known is not None else afi_new(afi)
    known = safi_type.cache.get(safi)
    self.safi = known if known is not None else safi_new(safi)


def family_index(self: Any) -> Any:
    """``Family.index`` (the family's part of every route's index, which ExaBGP builds
    for each route it queues and sorts) formatted once per family: the same bytes. The
    original formats both numbers and encodes them on every call (timeit: 0.39 -> 0.16
    us a call), twice per route. Only for AFI and SAFI objects of ExaBGP's own
    int types, whose formatting is int's (they define no ``__format__``); anything else
    is formatted as the original does."""
    afi, safi = self.afi, self.safi
    _, _, _, afi_type, safi_type = _family_types()
    if type(afi) is afi_type and type(safi) is safi_type:
        return _family_index(afi, safi)
    return f"{afi:02x}{safi:02x}".encode()


@functools.lru_cache(maxsize=64)
def _family_index(afi: int, safi: int) -> bytes:
    """:func:`family_index` for one family (the original's expression)."""
    return f"{afi:02x}{safi:02x}".encode()


@functools.cache
def _family_types() -> tuple[Any, Any, Any, Any, Any]:
    """Family, AFI, SAFI and the int types their create() builds, imported once."""
    from exabgp.protocol.family import _AFI, _SAFI, AFI, SAFI, Family

    return Family, AFI, SAFI, _AFI, _SAFI


#: What ExaBGP's tokenizer (``format.tokens``) splits a line into when it holds no quote
#: and no comment: a character of its "eol" or "syntax" sets alone, or a run of characters
#: that are in none of them nor its spaces (" ", tab, CR, LF; any other is a word's).
_TOKEN = re.compile(r"[;{}\[\],]|[^ \t\r\n;{}\[\],]+")
#: The characters ExaBGP's tokenizer ends a group of tokens at (its "eol").
_END = frozenset(";{}")
#: The characters that are a token alone (its "eol" and "syntax").
_ALONE = _END | frozenset("[],")
#: A line holding one of these (its quotes and comment) is left to ExaBGP's tokenizer.
_QUOTED = re.compile("[\"'#]")


def tokens(stream: Any) -> Any:
    """``format.tokens``, ExaBGP's tokenizer of configuration and API text, with the
    common line (no quote, no comment) split by a regular expression instead of one
    Python step per character: an ``announce attributes`` command of 100 prefixes is
    ~2,500 characters, and that loop was ~8% of ExaBGP's CPU while it took 10,000
    routes (docs/benchmarks.md). The same groups of (line, column, word) as the original,
    yielded as lazily (each line read when the previous one's groups are taken), the same
    ValueError at the end of a line left open; a line with a quote or a comment goes to
    the original, given as many empty lines before it as came before it (its line
    numbers count from its own start; an empty line yields nothing)."""
    unescape, original = _format_functions()
    line_number = 0
    for letters in stream:
        line = unescape(letters)
        line_number += 1
        if _QUOTED.search(line):
            yield from original(itertools.chain(itertools.repeat("", line_number - 1), [letters]))
            continue
        group: list[tuple[int, int, str]] = []
        word = ""
        for match in _TOKEN.finditer(line):
            text, column = match.group(), match.start()
            group.append((line_number, column, text))
            if text in _END:
                yield group
                group = []
            # A word ending the line was never ended: the original's error, not a token.
            word = text if match.end() == len(line) and text not in _ALONE else ""
        if word:
            raise ValueError(f'invalid syntax line {line_number}: "{word}"')
        if group:
            raise ValueError(f'invalid syntax line {line_number}: "{group}"')


@functools.cache
def _format_functions() -> tuple[Any, Any]:
    """The unescaping :func:`tokens` shares with ExaBGP's tokenizer, and that tokenizer."""
    from exabgp.configuration.core import format as exabgp_format

    return exabgp_format.unescape, exabgp_format.tokens


def announce_attributes(self: Any, reactor: Any, service: Any, line: str, use_json: bool) -> bool:
    """ExaBGP's ``announce attributes`` API command with its INFO line per route formatted
    only when that line is logged. The original formats ``route added to PEERS : ROUTE``
    (the route's whole text: prefix, next hop, every attribute) for each route, before
    ``log_message`` hands it to a logger that drops it below INFO; the speaker runs
    ExaBGP at WARNING. That formatting was ~8% of ExaBGP's CPU while it took 10,000
    routes. Everything else is the original's, in its order: the same answers, the same
    routes injected, the same line when INFO is on (``log_message`` is ``log.info`` of
    the message for "processes")."""
    extract_neighbors, match_neighbors, action, log = _announce_types()

    def callback() -> Any:
        try:
            descriptions, command = extract_neighbors(line)
            peers = match_neighbors(reactor.peers(service), descriptions)
            if not peers:
                self.log_failure(f"no neighbor matching the command : {command}")
                reactor.processes.answer_error(service)
                yield True
                return

            changes = self.api_attributes(command, peers)
            if not changes:
                self.log_failure(f"command could not parse route in : {command}")
                reactor.processes.answer_error(service)
                yield True
                return

            for change in changes:
                change.nlri.action = action.ANNOUNCE
                reactor.configuration.inject_change(peers, change)
                log.info(
                    lambda change=change: (
                        f"route added to {', '.join(peers) if peers else 'all peers'} : "
                        f"{change.extensive()}"
                    ),
                    "processes",
                    "INFO",
                )
                yield False

            reactor.processes.answer_done(service)
        except ValueError:
            self.log_failure("issue parsing the route")
            reactor.processes.answer_error(service)
            yield True
        except IndexError:
            self.log_failure("issue parsing the route")
            reactor.processes.answer_error(service)
            yield True

    reactor.asynchronous.schedule(service, line, callback())
    return True


#: The API commands :func:`announce_attributes` answers (both names ExaBGP registers).
ANNOUNCE_ATTRIBUTES = ("announce attribute", "announce attributes")


@functools.cache
def _announce_types() -> tuple[Any, Any, Any, Any]:
    """What :func:`announce_attributes` calls, imported once."""
    from exabgp.bgp.message import Action
    from exabgp.logger import log
    from exabgp.reactor.api.command.limit import extract_neighbors, match_neighbors

    return extract_neighbors, match_neighbors, Action, log


def nlri_sorted(iterable: Any, /, **options: Any) -> list[Any]:
    """``sorted`` as ExaBGP's update module sees it (:func:`_install` gives it this name
    there): its one call sorts the NLRI of each UPDATE it packs, and NLRI compare by
    ``self.index() < other.index()``, so a sort built two indexes per comparison: two per
    route for routes already in order, more out of order (``INET.index`` builds bytes
    from the family, path-info and prefix: ~5% of ExaBGP's CPU while it took 10,000
    routes). When every item is an NLRI with those
    comparisons and ``INET.index``, sorting by the index once per item gives the same
    list (the same comparisons, of the same values, in a stable sort); anything else
    (another type, a keyword) is ``sorted``'s, unchanged."""
    items = list(iterable)
    if options or not _indexed_alike(items):
        return sorted(items, **options)
    return sorted(items, key=_INDEX)


#: The module whose ``sorted`` is :func:`nlri_sorted` (Update._split_nlris's one call).
UPDATE_MODULE = "exabgp.bgp.message.update"
#: What :func:`nlri_sorted` sorts by: the NLRI's own index, in C.
_INDEX = operator.methodcaller("index")


def _indexed_alike(items: list[Any]) -> bool:
    """Every item's type compares with NLRI's ``__lt__``/``__gt__`` and indexes with
    ``INET.index`` (not overridden by a subclass: a label or VPN route keeps the sort
    ExaBGP gives it)."""
    lt, gt, index = _nlri_comparisons()
    return all(
        t.__lt__ is lt and t.__gt__ is gt and getattr(t, "index", None) is index
        for t in {type(item) for item in items}
    )


@functools.cache
def _nlri_comparisons() -> tuple[Any, Any, Any]:
    """NLRI's ordering functions and ``INET.index``, imported once."""
    from exabgp.bgp.message.update.nlri.inet import INET
    from exabgp.bgp.message.update.nlri.nlri import NLRI

    return NLRI.__lt__, NLRI.__gt__, INET.index


def _install() -> None:
    """Replace ``Neighbor.remove_self``, ``NLRI.unpack_nlri``, ``Family``'s ``family``,
    ``index`` and constructor, the tokenizer, the ``announce attributes`` command and the
    update module's ``sorted``, raise the reactor's step limit and make its reload
    reliable, all or none: an exception half way puts back what was replaced before it
    propagates."""
    from exabgp.bgp.message.update.nlri.nlri import NLRI
    from exabgp.bgp.neighbor import Neighbor
    from exabgp.configuration.core import format as exabgp_format
    from exabgp.configuration.core import tokeniser
    from exabgp.protocol.family import Family
    from exabgp.reactor.api.command import announce
    from exabgp.reactor.api.command.command import Command
    from exabgp.reactor.asynchronous import ASYNC
    from exabgp.reactor.loop import Reactor

    undo: list[Any] = []
    try:
        _swap(undo, Neighbor, "remove_self", remove_self)
        _exabgp_types()
        _swap(undo, Reactor, "_pending_adjribout", no_pending_adjribout)
        _swap(undo, NLRI, "unpack_nlri", classmethod(unpack_nlri))
        _swap(undo, Family, "family", family)
        _swap(undo, Family, "__init__", family_init)
        _swap(undo, Family, "index", family_index)
        if tokeniser.tokens is not exabgp_format.tokens:
            raise RuntimeError("the tokeniser does not call format.tokens")
        _format_functions()
        _swap(undo, tokeniser, "tokens", tokens)
        _announce_types()
        for api, commands in Command.callback.items():
            for name in ANNOUNCE_ATTRIBUTES if api in ("text", "json") else ():
                if name in commands and commands[name] is not announce.announce_attributes:
                    raise RuntimeError(f"{name!r} is not announce_attributes")
                if name in commands:
                    _swap(undo, commands, name, announce_attributes)
        update = importlib.import_module(UPDATE_MODULE)
        if "sorted" in vars(update):
            raise RuntimeError(f"{update.__name__} has a sorted of its own")
        _nlri_comparisons()
        _swap(undo, update, "sorted", nlri_sorted)
        _swap(undo, ASYNC, "LIMIT", step_limit(ASYNC.LIMIT))
    except BaseException:
        for put_back in reversed(undo):
            put_back()
        raise


def _swap(undo: list[Any], owner: Any, name: str, new: Any) -> None:
    """Set ``owner``'s ``name`` (an attribute of a class or module, or a dict's key) to
    ``new``, adding to ``undo`` what puts the original back (a class's own entry, as
    stored: a classmethod stays one; a module's name it did not have, a builtin it
    used, is deleted again)."""
    if isinstance(owner, dict):
        undo.append(functools.partial(owner.__setitem__, name, owner[name]))
        owner[name] = new
    elif name not in vars(owner):
        undo.append(functools.partial(delattr, owner, name))
        setattr(owner, name, new)
    else:
        undo.append(functools.partial(setattr, owner, name, vars(owner)[name]))
        setattr(owner, name, new)


def _step_limit_in_force() -> int | None:
    """The reactor's step limit as this ExaBGP has it now, None if unreadable."""
    try:
        from exabgp.reactor.asynchronous import ASYNC

        limit = ASYNC.LIMIT
    except Exception:  # fail open: it only feeds a warning
        return None
    return limit if isinstance(limit, int) else None


def patch(environ: Mapping[str, str] = os.environ) -> Unmodified | None:
    """Install :func:`remove_self` and the step limit if this ExaBGP is the verified one.

    Returns why ExaBGP runs unmodified (None: patched). Never raises an Exception: it runs
    before ExaBGP starts, and a launcher bug must cost speed, never the BGP sessions."""
    reason: Unmodified | None
    try:
        # Asked to stand back: do not even read the sources.
        requested = bool(environ.get(UNMODIFIED_ENV))
        digests = {} if requested else verified_digests(RELIED_ON)
        reason, detail = check(digests, RELIED_ON, requested=requested)
        if reason is None:
            _install()
    except Exception as exc:  # fail open, and say so on stderr below
        reason, detail = Unmodified.FAILED, f"{type(exc).__name__}: {exc}"
    limit = _step_limit_in_force()
    notes = [steps_note(wanted_steps(environ), limit)] if limit is not None else []
    if reason is None:
        notes.append(bridge_helper())
    if reason is not None:
        notes.insert(
            0,
            f"running ExaBGP unmodified ({reason}: {detail}); slower with many routes, "
            "restarted for every configuration change",
        )
    line = "; ".join(note for note in notes if note)
    if line:
        warn(line)
    return reason


def warn(line: str) -> None:
    """The launcher's one line on stderr: "warning" makes the supervisor relay it at
    WARNING level; one line, so newlines in an exception's text are flattened."""
    text = " ".join(f"kube-bgpd launcher warning: {line}".split())
    with contextlib.suppress(OSError, ValueError):  # no usable stderr: still start
        print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the relay thread

#: The ExaBGP code the relay thread (bgpd/exabgp/bridge.py) relies on, as :data:`RELIED_ON`
#: but checked on its own: a difference here only keeps the helper a process. ``Processes``
#: whole: it calls ``subprocess.Popen(run, stdin=PIPE, stdout=PIPE, env=...)`` for each API
#: process, sets O_NONBLOCK on ``stdout.fileno()``, polls and ``os.read``s that fd, writes
#: and flushes ``stdin``, and ends a process with terminate/wait(timeout)/kill; ``poll()``
#: not None with its stdout at its end is a death (respawned, counted).
BRIDGE_RELIED_ON: Mapping[str, str] = {
    "exabgp.reactor.api.processes:Processes": (
        "866caebb5261f0958dfb209626d450b4c8e98aed544e8fc28c9b1fb6083c40d3"
    ),
}
#: The module whose ``subprocess`` name the bridge replaces.
BRIDGE_MODULE = "exabgp.reactor.api.processes"


def bridge_note(reason: Unmodified | None, detail: str) -> str:
    """The warning when the helper stays a process although ExaBGP is patched, or ""."""
    if reason is None:
        return ""
    return f"the API helper runs as its own process ({reason}: {detail})"


def _install_bridge() -> None:
    """ExaBGP's processes.py gets the subprocess module with ``Popen`` of the relay made a
    thread (bridge.SubprocessFacade); refused unless its ``subprocess`` is the module."""
    import subprocess

    from bgpd.exabgp.bridge import SubprocessFacade

    processes: Any = importlib.import_module(BRIDGE_MODULE)
    if processes.subprocess is not subprocess:
        raise RuntimeError(f"{BRIDGE_MODULE}.subprocess is not the subprocess module")
    processes.subprocess = SubprocessFacade(subprocess)


def bridge_helper() -> str:
    """Run the relay as a thread of this process if :data:`BRIDGE_RELIED_ON` holds;
    returns the warning when it stays a process (""). Never raises an Exception."""
    try:
        digests = verified_digests(BRIDGE_RELIED_ON)
        reason, detail = check(digests, BRIDGE_RELIED_ON, requested=False)
        if reason is None:
            _install_bridge()
    except Exception as exc:  # fail open: the helper process as before
        reason, detail = Unmodified.FAILED, f"{type(exc).__name__}: {exc}"
    return bridge_note(reason, detail)


# --------------------------------------------------------------------------- OpenSSL kept out


def kept_out(
    environ: Mapping[str, str], imported: Collection[str], builtin: bool
) -> tuple[str, ...]:
    """Which of :data:`OPENSSL_MODULES` :func:`keep_out` keeps out: purely computational.

    None when :data:`OPENSSL_ENV` is set (asked to let them in, or started again by
    :func:`restart_with_openssl`); never one already imported (too late: its library is
    mapped, and code holds it); ``_hashlib`` only when ``builtin``, all of hashlib's
    built-in hashes being there (:func:`builtin_hashes`: without one, hashlib would lack
    that hash, and ``random`` needs sha512)."""
    if environ.get(OPENSSL_ENV):
        return ()
    return tuple(
        name
        for name in OPENSSL_MODULES
        if name not in imported and (builtin or name != OPENSSL_HASHES)
    )


def builtin_hashes(version: tuple[int, ...] = sys.version_info[:2]) -> bool:
    """Whether this Python has each built-in hash module hashlib falls back to without
    ``_hashlib``, one for each hash it guarantees (md5, sha1, sha2, sha3, blake2; from
    Python 3.12 on ``_sha2`` holds sha256 and sha512): a build may leave them out
    (``--with-builtin-hashlib-hashes``). Found without importing them."""
    sha2 = ("_sha2",) if version >= (3, 12) else ("_sha256", "_sha512")
    names = ("_md5", "_sha1", *sha2, "_sha3", "_blake2")
    return all(importlib.util.find_spec(name) is not None for name in names)


def keep_out(
    environ: Mapping[str, str] = os.environ, modules: dict[str, Any] = sys.modules
) -> tuple[str, ...]:
    """Make each import of the :func:`kept_out` modules raise ImportError in this process
    (a None entry in ``sys.modules``); returns their names."""
    names = kept_out(environ, modules.keys(), builtin_hashes())
    for name in names:
        modules[name] = None
    return names


def restart_with_openssl(name: str) -> NoReturn:
    """Start this launcher again in this process (exec: the same pid and pipes, which the
    supervisor holds) with :data:`OPENSSL_ENV` set, saying so: this ExaBGP imports
    ``name`` at start, which 5.0.15 never does. A fresh interpreter, not the import tried
    again in this one: the modules that ran half way before the ImportError may have
    registered their classes in ExaBGP's registries, which refuse a second class."""
    warn(f"this ExaBGP imports {name}, kept out of its process: starting it with OpenSSL")
    argv = [sys.executable, *sys.orig_argv[1:]]
    # This interpreter, its own argv: nothing from outside is run.
    os.execve(sys.executable, argv, {**os.environ, OPENSSL_ENV: "1"})  # noqa: S606


def main() -> None:
    """``python -m exabgp`` in this process, OpenSSL kept out and ExaBGP patched.

    ExaBGP's entry point is imported before :func:`patch` so that an ExaBGP needing a
    module kept out is found before anything else of it runs (then started again, with
    OpenSSL). The order changes nothing :func:`patch` does: it replaces what ExaBGP looks
    up when it calls it (class attributes, module globals, the command registry's
    entries), and its checks import most of ExaBGP themselves."""
    names = keep_out()
    try:
        entry = importlib.import_module(ENTRY)
    except ImportError as exc:
        if exc.name not in names:
            raise
        restart_with_openssl(exc.name)
    patch()
    sys.argv[0] = "exabgp"
    entry.main()


if __name__ == "__main__":
    main()
