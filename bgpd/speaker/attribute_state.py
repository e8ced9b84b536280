"""The speaker's last valid attributes per Service, kept in its work directory across
restarts.

Why: an invalid attribute annotation on an announced Service keeps the attributes of its
last annotations that parsed (decide()'s ``last_valid``, which the Decider keeps in
memory). A speaker that restarts (a rolling update, a crash) would start without them, and
the Service would be withdrawn from that node although nothing about it changed. So the
speaker writes the map to a small JSON file after each pass that changed it, and reads it
at start.

Rules: written atomically (a temporary file in the same directory, then ``os.replace``),
so a crash leaves the old file or the new one, never half of one; at most
``MAX_ENTRIES`` Services and ``MAX_BYTES`` bytes are read (a bigger file is ignored with a
warning, as is a corrupt or foreign one): a missing or ignored file only means "no
memory", which is how the speaker started before this file existed. Only attributes are
kept, never a Service's object; a Service that is gone when the speaker starts is dropped
by the first decide() (gated on a synced cluster).

No decision is made here: ``load`` and ``save`` are the file, ``changed`` says when to
write.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from bgpd.decision import shared_attributes
from bgpd.logs import log
from bgpd.model import RouteAttributes, ServiceKey

_logger = logging.getLogger("bgpd.speaker")

#: The file's name in the speaker's work directory (SpeakerConfig workDir).
FILE_NAME: Final = "last-valid-attributes.json"
#: The format's version; another one is ignored (with a warning).
VERSION: Final = 1
#: Bounds on what is read: far above a real cluster's LoadBalancer Services.
MAX_ENTRIES: Final = 100_000
MAX_BYTES: Final = 32 * 1024 * 1024


def _encode(attrs: RouteAttributes) -> dict[str, Any]:
    return {
        "communities": list(attrs.communities),
        "largeCommunities": list(attrs.large_communities),
        "localPref": attrs.local_pref,
        "med": attrs.med,
    }


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("a list of strings")
    return tuple(value)


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFFFFFF:
        raise ValueError("an unsigned 32-bit integer")
    return value


def _decode(value: object) -> RouteAttributes:
    if not isinstance(value, dict):
        raise ValueError("an object")
    # Shared: one object per distinct value, not one per Service the file names.
    return shared_attributes(
        RouteAttributes(
            communities=_strings(value.get("communities", [])),
            large_communities=_strings(value.get("largeCommunities", [])),
            local_pref=_optional_int(value.get("localPref")),
            med=_optional_int(value.get("med")),
        )
    )


def dumps(last_valid: Mapping[ServiceKey, RouteAttributes]) -> str:
    """The file's text: sorted, so equal maps give equal files."""
    services = {str(k): _encode(last_valid[k]) for k in sorted(last_valid)}
    return json.dumps({"version": VERSION, "services": services}, sort_keys=True) + "\n"


def loads(text: str) -> dict[ServiceKey, RouteAttributes]:
    """The map in a file's text; ValueError saying what is wrong."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} file")
    services = doc.get("services")
    if not isinstance(services, dict):
        raise ValueError("services must be an object")
    if len(services) > MAX_ENTRIES:
        raise ValueError(f"{len(services)} services, more than {MAX_ENTRIES}")
    out: dict[ServiceKey, RouteAttributes] = {}
    for key, value in services.items():
        namespace, sep, name = key.partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"{key!r} is not namespace/name")
        try:
            out[ServiceKey(key)] = _decode(value)
        except ValueError as exc:
            raise ValueError(f"{key}: must be {exc}") from None
    return out


def load(path: Path) -> dict[ServiceKey, RouteAttributes]:
    """What the file holds; empty (with a warning, unless it is simply missing) when it
    cannot be used."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ValueError(f"{size} bytes, more than {MAX_BYTES}")
        return loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log(
            _logger,
            logging.WARNING,
            "state.last_valid_ignored",
            path=str(path),
            error=str(exc)[:200],
        )
        return {}


def save(path: Path, last_valid: Mapping[ServiceKey, RouteAttributes]) -> bool:
    """Write the map atomically; False (logged) when the directory refuses it: the
    speaker runs on, only the memory across a restart is lost."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(dumps(last_valid))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log(_logger, logging.WARNING, "state.last_valid_unwritable", path=str(path), error=exc)
        return False
    return True
