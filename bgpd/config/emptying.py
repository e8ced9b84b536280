"""The one rule for a config that would leave the node with nothing: a reload that
removes every BGPPeer or every IPAddressPool is refused unless SpeakerConfig
`allowEmptyConfig: true` says it is meant.

Why: a truncated or emptied file on SIGHUP (an editor's half-written save, a template
that rendered nothing) was accepted, ExaBGP restarted with no neighbours and every route
went without a graceful withdraw (issue 15). The speaker's reload and `kube-bgpd
validate` both ask `emptying_refusal`, so they cannot disagree. Pure: no I/O.
"""

from __future__ import annotations

from bgpd.model import Config

#: How to say the emptiness is meant, quoted in every refusal.
HOW_TO_ALLOW = "set SpeakerConfig spec.allowEmptyConfig: true if this is meant"


def emptying_refusal(previous: Config | None, new: Config) -> str | None:
    """Why `new` must not replace `previous`, or None when it may.

    `previous` None means "whatever is running" (validate has no running config): any
    config without peers or pools is then reported, since it would empty a running one.
    A previous config that had none already loses nothing."""
    if new.speaker.allow_empty_config:
        return None
    lost = [
        what
        for what, before, after in (
            ("BGPPeer", None if previous is None else previous.peers, new.peers),
            ("IPAddressPool", None if previous is None else previous.pools, new.pools),
        )
        if not after and (before is None or before)
    ]
    if not lost:
        return None
    return f"it holds no {' and no '.join(lost)} (would withdraw every route); {HOW_TO_ALLOW}"
