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
    #: ExaBGP answers its API within the ack timeout (route commands, the idle probe).
    answering: bool = True


@dataclass(frozen=True, slots=True)
class ReadinessInputs:
    synced: bool
    rendered: bool
    connected: bool
    decided: bool
    #: This speaker's --node-name when the synced cluster holds no Node of that name
    #: (a placeholder left in a unit file): not ready, whatever else holds. "" otherwise.
    node_missing: str = ""
    #: The source keeps its last good snapshot (a watch lost, a bad cluster file): still
    #: ready (the routes are the last known truth), and /readyz says so.
    source_stale: bool = False
    #: Why the configuration in force is not its source's ("" when it is).
    config_stale: str = ""
    #: Why ExaBGP's configuration file could not be written ("": it was). ExaBGP keeps
    #: running with what it has, but not with what the cluster and config say.
    write_error: str = ""


def health(s: HealthInputs) -> tuple[bool, str]:
    if s.rendered and not s.running and not s.stopping:
        return False, "exabgp is not running"
    if s.running and not s.answering:
        return False, "exabgp does not answer its API (hung): restarting it"
    return True, "ok"


def readiness(s: ReadinessInputs) -> tuple[bool, str]:
    if not s.synced:
        return False, "cluster source not synced"
    if s.node_missing:
        return False, node_missing_reason(s.node_missing)
    if not s.rendered:
        return False, "exabgp not configured yet"
    if not s.connected:
        return False, "exabgp helper not connected"
    if not s.decided:
        return False, "no decision applied yet"
    if s.write_error:
        return False, f"exabgp configuration not written (retrying): {s.write_error}"
    # Still ready when stale: the last good snapshot's and the last valid configuration's
    # routes are announced, which is what a lost watch or an invalid edit must not take
    # away; the answer says what is held back.
    held = []
    if s.source_stale:
        held.append("cluster source stale: keeping the last good snapshot")
    if s.config_stale:
        held.append(f"config stale: {s.config_stale}")
    if held:
        return True, "ok; " + "; ".join(held)
    return True, "ok"


def node_missing_reason(node: str) -> str:
    """The one text for a --node-name that names no Node: /readyz and the log line."""
    return (
        f"no Node named {node!r} in the cluster (--node-name / $NODE_NAME): no route is "
        "announced until it appears"
    )
