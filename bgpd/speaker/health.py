"""/healthz and /readyz: pure answers from the speaker's state, read at request time.

Health says whether the process should be restarted (its ExaBGP died and is not being
restarted); readiness whether it announces what the cluster says (source synced, ExaBGP
configured and its helper connected, a decision applied). Each returns (ok, why).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HealthInputs:
    #: ExaBGP's configuration was rendered once (it is meant to run).
    rendered: bool
    #: ExaBGP runs (the supervisor has a pid).
    running: bool
    #: The supervisor is stopping it on purpose.
    stopping: bool


@dataclass(frozen=True, slots=True)
class ReadinessInputs:
    synced: bool
    rendered: bool
    connected: bool
    decided: bool
    #: Why ExaBGP's configuration file could not be written ("": it was). ExaBGP keeps
    #: running with what it has, but not with what the cluster and config say.
    write_error: str = ""


def health(s: HealthInputs) -> tuple[bool, str]:
    if s.rendered and not s.running and not s.stopping:
        return False, "exabgp is not running"
    return True, "ok"


def readiness(s: ReadinessInputs) -> tuple[bool, str]:
    if not s.synced:
        return False, "cluster source not synced"
    if not s.rendered:
        return False, "exabgp not configured yet"
    if not s.connected:
        return False, "exabgp helper not connected"
    if not s.decided:
        return False, "no decision applied yet"
    if s.write_error:
        return False, f"exabgp configuration not written (retrying): {s.write_error}"
    return True, "ok"
