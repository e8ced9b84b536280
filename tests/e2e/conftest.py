"""Fixtures for the end-to-end tier: a whole lab (router, three real speakers, HTTP
servers, client) per test, with FRR or BIRD as the router.

* ``make_lab(router="frr", **Lab.up options)`` - bring a lab up in this test's temporary
  directories (``cluster="api"`` unless told: API simulator in this process, controller,
  speakers watching the API); it is torn down after the test, even when the test fails (then the
  speakers' and the router's logs are printed).
* ``WEB`` - the Service every lab starts with: 10.99.100.1 and fd00:99:100::1 (requested),
  pods on node1 and node2, externalTrafficPolicy Cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kbgpd_lab.lab.lab import Lab, LabService

WEB = LabService("web", ("10.99.100.1", "fd00:99:100::1"), pod_nodes=(1, 2))


def _logs(lab: Lab) -> str:
    parts = [lab.router.log_tail(20)]
    for path in sorted(lab.dir.glob("node*/speaker.log")):
        parts.append(f"--- {path.parent.name}\n{path.read_text(errors='replace')[-2500:]}")
    return "\n".join(parts)


@pytest.fixture
def make_lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Lab]]:
    labs: list[Lab] = []

    def factory(router: str = "frr", **opts: Any) -> Lab:
        opts.setdefault("services", [WEB])
        # The whole system by default: API simulator, controller, speakers on the API.
        opts.setdefault("cluster", "api")
        lab = Lab.up(
            router=router,
            state_dir=tmp_path / f"state{len(labs)}",
            directory=tmp_path / f"lab{len(labs)}",
            **opts,
        )
        labs.append(lab)
        return lab

    try:
        yield factory
    finally:
        for lab in labs:
            rep = getattr(request.node, "rep_call", None)
            if rep is None or rep.failed:
                sys.stderr.write(f"\n==== lab logs\n{_logs(lab)}\n")
            lab.down()
