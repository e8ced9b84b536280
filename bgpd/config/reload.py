"""Loading the config again for a running daemon (SIGHUP): the new Config, or why the
running one is kept. One function for the speaker and the controller, so a reload fails
the same way in both: a config error, a refusal by the emptying rule
(bgpd.config.emptying), or any other exception while reading (a loader bug must cost a
log line, never the daemon or its routes: before this, an unexpected TypeError escaped
the signal handler as "Exception in callback" and config_stale stayed 0)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from bgpd.config.emptying import emptying_refusal
from bgpd.config.issues import ConfigError, ConfigIssue
from bgpd.config.loader import load_config_or_raise
from bgpd.model import Config


@dataclass(frozen=True, slots=True)
class Reload:
    """The outcome of a reload: `config` to switch to, or None and `error` saying why the
    running config is kept (one line per problem, no secret)."""

    config: Config | None
    warnings: tuple[ConfigIssue, ...] = ()
    error: str = ""


def reload_config(paths: Sequence[str | os.PathLike[str]], running: Config) -> Reload:
    """Read `paths` for a daemon running `running`; never raises (but CancelledError and
    the like, which are not Exceptions)."""
    try:
        config, warnings = load_config_or_raise(paths)
    except ConfigError as exc:
        return Reload(None, error=str(exc))
    except Exception as exc:  # any failure keeps the running config
        return Reload(None, error=f"cannot read the config: {type(exc).__name__}: {exc}")
    refusal = emptying_refusal(running, config)
    if refusal is not None:
        return Reload(None, warnings, error=f"refused: {refusal}")
    return Reload(config, warnings)
