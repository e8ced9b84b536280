"""`kube-bgpd drain`: ask the running speaker on this host to drain (RFC 8326), or
(``--cancel``) to take that drain back.

It talks to the speaker's control socket in its work directory (bgpd.cli.control): a
state change is never served on the network listener, so ``--metrics-address`` is
refused here. The speaker re-announces every route with GRACEFUL_SHUTDOWN (65535:0, plus
LOCAL_PREF 0 on iBGP sessions), holds them for SpeakerConfig.drainWindow, then withdraws
them; a cancel announces them again with their normal attributes, unless the Node's
``kube-bgpd.io/drain`` annotation or a failing data-plane check still asks for a drain.
Prints the speaker's answer. Standard library only: it must work from a minimal debug
shell.
"""

from __future__ import annotations

import argparse
import sys

from bgpd.cli import control


def configure(parser: argparse.ArgumentParser) -> None:
    control.add_flags(parser)
    parser.add_argument(
        "--cancel",
        action="store_true",
        help="take back a drain asked with `kube-bgpd drain`: announce normally again",
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the speaker"
    )


def run(args: argparse.Namespace) -> int:
    prog = "kube-bgpd drain"
    if args.metrics_address:
        print(
            f"{prog}: the speaker serves drains only on its control socket, not on "
            "--metrics-address: run this on the node, with --work-dir if not the default",
            file=sys.stderr,
        )
        return 2
    where = control.target(args)
    try:
        answer = control.call(where, "DELETE" if args.cancel else "POST", "/drain", args.timeout)
    except (control.SpeakerUnreachable, control.RefusedHere) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    print(f"mode: {answer.get('mode')}")
    source = answer.get("source")
    if args.cancel:
        if source is None:
            print("drain cancelled: announcing normally")
        else:
            print(f"still draining: asked by {source} (only that can end it)")
        return 0
    print(
        f"drain window: {answer.get('window')}s (routes withdrawn at {answer.get('withdraw_at')})"
    )
    return 0
