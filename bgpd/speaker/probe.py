"""Asking kube-proxy's health answers (SpeakerConfig dataPlaneCheck): the I/O half.

One round asks the node's healthz URL and every checked Service's healthCheckNodePort
at once, each bounded by the check's timeout, and says for each whether it passed. The
verdicts (hysteresis, drain window) are bgpd.speaker.dataplane's; this module only asks.

kube-proxy answers 200 when healthy and 503 when not, with a JSON body: /healthz
``{"lastUpdated": ..., "currentTime": ..., "nodeEligible": ...}``, a healthCheckNodePort
``{"service": {"namespace": ..., "name": ...}, "localEndpoints": N, ...}``. The status
code is the verdict (kube-proxy's own contract, what cloud load balancers use); the body
only explains a failure in the log. No answer within the timeout, a refused connection
or any other status is a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from bgpd.aiohttp_import import aiohttp, system_tls
from bgpd.model import DataPlaneCheck, ServiceKey

#: The most of an answer's body kept to explain a failure.
_BODY = 200


@dataclass(frozen=True, slots=True)
class Answer:
    """One check's result: passed, and what was seen (for the log when it failed)."""

    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Round:
    node: Answer
    services: Mapping[ServiceKey, Answer]


def service_url(check: DataPlaneCheck, port: int) -> str:
    host = check.service_host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


async def ask(session: aiohttp.ClientSession, url: str, within: float) -> Answer:
    """GET `url`: passed when it answers 200 within `within` seconds. An https URL is
    verified against the system's CA store (aiohttp's own default trusts no CA in the
    product: bgpd.aiohttp_import)."""
    tls = system_tls() if url.startswith("https:") else True
    try:
        async with asyncio.timeout(within):
            async with session.get(url, allow_redirects=False, ssl=tls) as response:
                body = (await response.content.read(_BODY)).decode("utf-8", "replace")
                return Answer(response.status == 200, f"HTTP {response.status} {body.strip()}")
    except TimeoutError:
        return Answer(False, f"no answer within {within:g}s")
    except aiohttp.ClientError as exc:
        return Answer(False, f"{type(exc).__name__}: {exc}")


async def ask_round(
    session: aiohttp.ClientSession, check: DataPlaneCheck, services: Mapping[ServiceKey, int]
) -> Round:
    """The node's check and each Service's (key -> healthCheckNodePort), concurrently."""
    keys = list(services)
    answers = await asyncio.gather(
        ask(session, check.node_url, check.timeout),
        *(ask(session, service_url(check, services[k]), check.timeout) for k in keys),
    )
    return Round(node=answers[0], services=dict(zip(keys, answers[1:], strict=True)))
