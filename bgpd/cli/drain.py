"""`kube-bgpd drain`: ask the running speaker on this node to drain (RFC 8326).

POSTs to the speaker's listener (``--metrics-address``, default 127.0.0.1:7473): the
speaker re-announces every route with GRACEFUL_SHUTDOWN (65535:0, plus LOCAL_PREF 0 on
iBGP sessions), holds them for SpeakerConfig.drainWindow, then withdraws them. Prints the
speaker's answer. Standard library only: it must work from a minimal debug shell.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

DEFAULT_ADDRESS = "127.0.0.1:7473"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the speaker"
    )


def run(args: argparse.Namespace) -> int:
    address = args.metrics_address or DEFAULT_ADDRESS
    req = urllib.request.Request(f"http://{address}/drain", method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:  # noqa: S310 - http to our own listener
            answer = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"kube-bgpd drain: cannot reach the speaker at {address}: {exc}", file=sys.stderr)
        return 1
    print(f"mode: {answer.get('mode')}")
    print(
        f"drain window: {answer.get('window')}s (routes withdrawn at {answer.get('withdraw_at')})"
    )
    return 0
