"""`kube-bgpd-lab demo` (`make demo`): the lab, narrated, in six steps.

Role: show a person (or CI, with ``DEMO_NONINTERACTIVE=1``) what kube-bgpd does, with
real processes only: the API simulator and the controller allocate a LoadBalancer IP, the
three speakers announce it, the router (FRR or BIRD) installs the ECMP route, the client's
connections spread, externalTrafficPolicy Local shrinks the route, a community added to
the BGPAdvertisement with `kubectl apply` reaches the router's route while every BGP
session stays up (the configuration is custom resources the speakers watch), a graceful speaker
stop under traffic fails no request (the lab's router pins open connections to their
node; ``ecmp="stateless"`` shows the FIB alone, where the re-hash resets some), then the
same restart with ``onSigterm: retain`` (graceful restart is on in the demo lab), which
leaves the router's route untouched. Every number printed is measured in this run;
nothing is canned.

It pauses between steps for Enter unless ``DEMO_NONINTERACTIVE=1`` or stdin is not a
terminal, and always tears the lab down (also on Ctrl-C or an error).

What it must not do: touch anything outside the lab (kbgpd_lab.lab.lab holds that rule).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import yaml

from kbgpd_lab.lab.client import Result
from kbgpd_lab.lab.lab import Lab, LabService
from kbgpd_lab.lab.routers import FibWatch

#: How many numbered steps the demo has.
STEPS = 6
#: The community step 5 adds to the lab's BGPAdvertisement.
DEMO_COMMUNITY = "64512:100"


class Narrator:
    """Progress lines for people: numbered steps, indented facts, optional pauses."""

    def __init__(self, out: TextIO, *, interactive: bool) -> None:
        self.out = out
        self.interactive = interactive
        self.started = time.monotonic()

    def step(self, n: int, title: str) -> None:
        self.out.write(f"\n==> [{n}/{STEPS}] {title}\n")
        self.out.flush()

    def say(self, text: str) -> None:
        for line in text.rstrip("\n").splitlines():
            self.out.write(f"    {line}\n")
        self.out.flush()

    def pause(self) -> None:
        if self.interactive:
            self.out.write("    (press Enter to continue)")
            self.out.flush()
            sys.stdin.readline()


def spread(result: Result) -> str:
    parts = [f"{node}: {count}" for node, count in result.per_node.items()]
    return f"{result.requests} requests -> {', '.join(parts)}; {result.failures} failed" + (
        f" {result.errors}" if result.errors else ""
    )


def route_text(lab: Lab, ip: str) -> str:
    """The router's own view (``ip route show``), and the next hops as node names."""
    fam = "-6" if ":" in ip else "-4"
    raw = lab.topology.router.ip(fam, "route", "show", "exact", ip).stdout.rstrip()
    names = sorted(lab.node_of(h) for h in lab.router.fib(ip))
    return f"$ ip {fam} route show {ip}   (in the router namespace)\n{raw}\n=> {', '.join(names)}"


def route_communities(lab: Lab, ip: str) -> set[tuple[str, ...]]:
    """The communities of every path the router holds for ``ip``'s host route."""
    fam = ipaddress.ip_address(ip).version
    host = ipaddress.ip_network(f"{ip}/{32 if fam == 4 else 128}")
    return {p.communities for p in lab.router.rib(fam).get(host, [])}


def live_change(lab: Lab, say: Narrator, web: LabService) -> bool:
    """Step 5: `kubectl apply` of the BGPAdvertisement with a community added; returns
    whether the router's paths all carry it, with no BGP session reset."""
    ip = web.ips[0]
    docs = lab.config_documents()
    for doc in docs:
        if doc.get("kind") == "BGPAdvertisement":
            doc["spec"]["communities"] = [*doc["spec"].get("communities", []), DEMO_COMMUNITY]
            shown = doc
    say.say("$ kubectl apply -f advertisement.yaml   (the configuration is custom resources)")
    say.say(yaml.safe_dump(shown, sort_keys=False))
    changes_before = lab.router.changes_received()
    nodes = range(1, len(lab.topology.nodes) + 1)
    generations = [lab.speaker_status(i)["exabgp"]["generation"] for i in nodes]
    t0 = time.monotonic()
    lab.apply_config(docs)
    deadline = t0 + 30
    want = {(DEMO_COMMUNITY,)}
    while route_communities(lab, ip) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    took = time.monotonic() - t0
    got = route_communities(lab, ip)
    states = lab.router.neighbors()
    restarted = [
        f"node{i}"
        for i, before in zip(nodes, generations, strict=True)
        if lab.speaker_status(i)["exabgp"]["generation"] != before
    ]
    up = all(state == "Established" for state in states.values()) and not restarted
    say.say(
        f"every path of {ip} at the router carries {DEMO_COMMUNITY} {took:.2f} s after the "
        f"apply: {sorted(got)}"
        if got == want
        else f"the router's paths of {ip} carry {sorted(got)}, not {DEMO_COMMUNITY}"
    )
    grew = sum(1 for a, n in lab.router.changes_received().items() if n > changes_before.get(a, 0))
    say.say(
        f"BGP sessions: {sum(s == 'Established' for s in states.values())} of {len(states)} "
        f"Established; ExaBGP restarted on {', '.join(restarted) or 'no node'} "
        f"(its generation in /status); {grew} sessions sent the route again with the new "
        "attribute"
    )
    return got == want and up


def retain_restart(lab: Lab, say: Narrator, web: LabService) -> bool:
    """Step 6's restart again with SpeakerConfig onSigterm: retain (graceful restart is on
    in the demo lab): the router keeps node1's route as stale until the new speaker's
    End-of-RIB, so its FIB never changes. Returns whether that held, with no failure."""
    ip = web.ips[0]
    want = lab.expected_nexthops(web)
    say.out.write("\n==> then the same restart with SpeakerConfig onSigterm: retain\n")
    say.say(
        "node1's speaker stops without withdrawing; with graceful restart the router keeps\n"
        "its route until the new speaker has sent it again (End-of-RIB): for rolling updates"
    )
    lab.wait_speaker_refreshed(1)
    lab.set_on_sigterm("retain")
    client = lab.start_steady_client(
        ip, "--requests-per-connection", "1", "--concurrency", "4", "--interval", "0.02"
    )
    with FibWatch(lab.router, {ip: want}) as watch:
        time.sleep(0.5)
        t0 = time.monotonic()
        status = lab.stop_speaker(1, signal.SIGTERM)
        lab.start_speaker(1)
        lab.wait_speaker_refreshed(1)
        took = time.monotonic() - t0
        time.sleep(0.5)
    result = lab.finish_client(client)
    names = ", ".join(sorted(lab.node_of(h) for h in want))
    say.say(
        f"node1's speaker stopped (exit {status}) and was back, End-of-RIB included, in "
        f"{took:.1f} s"
    )
    if watch.deviations:
        seen = sorted(
            {
                ", ".join(sorted(lab.node_of(h) for h in hops)) or "none"
                for _, _, hops in watch.deviations
            }
        )
        say.say(
            f"the router's route CHANGED ({len(watch.deviations)} of {watch.samples} "
            f"samples): {'; '.join(seen)}"
        )
    else:
        say.say(f"the router's route, read {watch.samples} times meanwhile, never changed: {names}")
    say.say("during the restart: " + spread(result))
    return not watch.deviations and result.failures == 0 and status == 0


def run_demo(
    *,
    router: str = "frr",
    ecmp: str = "pinned",
    interactive: bool = True,
    out: TextIO = sys.stdout,
    state_dir: Path | None = None,
    on_lab: Callable[[Lab], None] | None = None,
) -> int:
    """Run the steps; returns 0 if every step showed what it should, 1 otherwise."""
    say = Narrator(out, interactive=interactive)
    say.out.write(
        f"kube-bgpd demo: building the lab (router {router}, {ecmp} ECMP, three nodes) ...\n"
    )
    say.out.flush()
    web = LabService("web", (), pod_nodes=(1, 2))
    ok = True
    with Lab.up(
        router=router,
        ecmp=ecmp,
        cluster="api",
        services=[web],
        state_dir=state_dir,
        drain_window=2.0,
        graceful_restart=True,
    ) as lab:
        if on_lab is not None:
            on_lab(lab)
        [web] = lab.services
        ip = web.ips[0]
        say.say(f"lab up in {time.monotonic() - say.started:.1f} s: files in {lab.dir}")

        say.step(1, "a LoadBalancer Service with pods on node1 and node2 gets its IP")
        say.say("kubectl get svc -A would show (the controller allocated from the pool):")
        say.say(lab.get_services_table())
        say.pause()

        say.step(2, "the router's route for it: ECMP over every node (Cluster policy)")
        say.say(route_text(lab, ip))
        say.say(route_text(lab, web.ips[1]) if len(web.ips) > 1 else "")
        ok &= lab.router.fib(ip) == lab.expected_nexthops(web)
        say.pause()

        say.step(3, f"300 client connections to {ip}")
        result = lab.client(ip, connections=300)
        say.say(spread(result))
        ok &= result.failures == 0 and len(result.per_node) == 3
        say.pause()

        say.step(4, "externalTrafficPolicy: Local - only nodes with a pod announce")
        t0 = time.monotonic()
        lab.set_services([replace(web, policy="Local")])
        [web] = lab.services
        lab.wait_service(web)
        say.say(f"route changed {time.monotonic() - t0:.2f} s after the Service was updated")
        say.say(route_text(lab, ip))
        result = lab.client(ip, connections=300)
        say.say(spread(result))
        ok &= result.failures == 0 and set(result.per_node) == {"node1", "node2"}
        say.pause()

        say.step(5, "a live configuration change: a community added to the BGPAdvertisement")
        ok &= live_change(lab, say, web)
        say.pause()

        say.step(6, "graceful stop of node1's speaker while the client keeps connecting")
        if ecmp == "pinned":
            say.say(
                "the router pins each open connection to the node it started on (conntrack,\n"
                "as a stateful router does): new connections follow the route at once, open\n"
                "ones finish where they are (`--ecmp stateless` shows the FIB alone)"
            )
        # Keep-alive connections of 10 requests: many are open when the route changes.
        client = lab.start_steady_client(
            ip, "--requests-per-connection", "10", "--concurrency", "8", "--interval", "0.02"
        )
        time.sleep(1.0)
        t0 = time.monotonic()
        without1 = lab.expected_nexthops(web) - {lab.topology.node_address(1)}
        with ThreadPoolExecutor(1) as pool:
            stopping = pool.submit(lab.stop_speaker, 1, signal.SIGTERM)
            lab.router.wait_fib(ip, without1)
            lab.mark_client(client)  # from here on: who still answers?
            status = stopping.result()
        say.say(
            f"speaker on node1 stopped (SIGTERM, exit {status}) in {time.monotonic() - t0:.2f} s:"
            " it withdrew its routes first"
        )
        say.say(route_text(lab, ip))
        time.sleep(1.0)
        result = lab.finish_client(client)
        say.say("during the stop: " + spread(result))
        after = result.per_node_after_mark
        others = ", ".join(f"{n} {c}" for n, c in after.items() if n != "node1")
        say.say(
            f"answers after node1's route left the router: {others}, and node1 "
            f"{after.get('node1', 0)} (on connections opened before)"
        )
        if result.failures:
            say.say(
                "(a connection open at the instant the router's next hops change can be "
                "re-hashed to another node and reset: Linux ECMP is hash-threshold)"
            )
        ok &= set(result.per_node) <= {"node1", "node2"} and "node2" in result.per_node
        # Without pinning, resets at the change are the router's (docs/lab.md).
        ok &= result.failures == 0 or ecmp == "stateless"
        lab.start_speaker(1)
        lab.wait_service(web)
        say.say("node1's speaker started again: " + route_text(lab, ip).splitlines()[-1])
        ok &= retain_restart(lab, say, web)
        say.out.write("\n==> tearing the lab down\n")
    say.out.write(
        f"demo {'finished' if ok else 'FAILED'} in {time.monotonic() - say.started:.1f} s\n"
    )
    return 0 if ok else 1


def interactive_default() -> bool:
    return os.environ.get("DEMO_NONINTERACTIVE", "") in ("", "0") and sys.stdin.isatty()
