"""`kube-bgpd speaker` as a real process inside a node namespace, from a cluster dump,
against a real BIRD router; `kube-bgpd status` and `kube-bgpd drain` against it.

Every speaker here runs in node1's namespace (``ip netns exec``), so its status listener
on 127.0.0.1 is that namespace's loopback; the CLI commands run there too.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbgpd_lab.kit.waiting import wait_until
from kbgpd_lab.lab.netns import process_alive
from kbgpd_lab.lab.routers import NODE_ASN, ROUTER_ASN, BirdRouter, Router
from kbgpd_lab.lab.speakerfiles import (
    NODE1_V4,
    cluster_list,
    node1_cluster_dump,
    node_item,
    one_peer_config,
    service_items,
)
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root]

KUBE_BGPD = str(Path(sys.executable).with_name("kube-bgpd"))
STATUS = "127.0.0.1:7473"


def config_text(
    *,
    drain_window: str = "2s",
    graceful: bool = False,
    community: str = "65000:1",
    exabgp: str | None = None,
    on_sigterm: str = "withdraw",
    more: dict[str, object] | None = None,
) -> str:
    return one_peer_config(
        communities=(community,),
        graceful=graceful,
        speaker={
            "drainWindow": drain_window,
            "onSigterm": on_sigterm,
            **({"exabgpBinary": exabgp} if exabgp else {}),
            **(more or {}),
        },
    )


class SpeakerProc:
    def __init__(
        self,
        topology: Topology,
        tmp: Path,
        config: str,
        dump: str,
        *,
        user: str | None = None,
        work_dir: Path | None = None,
        tmpfs_kib: int | None = None,
    ) -> None:
        """``work_dir``: the speaker's (default TMP/work); ``tmpfs_kib``: run it in a
        private mount namespace with a tmpfs of that size on its work directory."""
        self.topology = topology
        self.dir = tmp
        self.work = work_dir if work_dir is not None else tmp / "work"
        self.config = tmp / "config.yaml"
        self.dump = tmp / "cluster.yaml"
        self.config.write_text(config)
        self.dump.write_text(dump)
        self.log = tmp / "speaker.log"
        argv = [
            KUBE_BGPD,
            "speaker",
            "--config",
            str(self.config),
            "--node-name",
            "node1",
            "--cluster-file",
            str(self.dump),
            "--work-dir",
            str(self.work),
            "--metrics-address",
            STATUS,
        ]
        if tmpfs_kib is not None:
            self.work.mkdir(mode=0o700, exist_ok=True)
            mount = f"mount -t tmpfs -o size={tmpfs_kib}k,mode=0700 kbgpd-test {self.work}"
            argv = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                f'{mount} && exec "$@"',
                "-",
                *argv,
            ]
        env = None
        if user:
            # The venv's interpreter is a symlink into /root (0700 here), which an
            # unprivileged user cannot exec; run the same Python version from /usr/bin
            # with the venv's packages on PYTHONPATH (the children inherit it).
            site = next(p for p in sys.path if p.endswith("site-packages"))
            env = dict(os.environ, PYTHONPATH=f"{site}:{Path(__file__).resolve().parents[2]}")
            entry = "import sys; from bgpd.cli import main; sys.exit(main())"
            argv = ["/usr/bin/python3.11", "-c", entry, *argv[1:]]
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *argv]
            for path in (tmp, self.config, self.dump):
                os.chown(path, int(user), int(user))
        with self.log.open("wb") as out:
            self.proc = topology.nodes[0].popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        if tmpfs_kib is not None:
            # The tmpfs (and the control socket on it) exists only in the speaker's mount
            # namespace: reach it through the process's root.
            self.work = Path(f"/proc/{self.proc.pid}/root") / self.work.relative_to("/")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.topology.nodes[0].run(
            [KUBE_BGPD, *args, "--work-dir", str(self.work)], check=False, timeout=30
        )

    def status(self) -> dict[str, Any]:
        out = self.cli("status", "--json")
        assert out.returncode == 0, out.stderr
        doc: dict[str, Any] = json.loads(out.stdout)
        return doc

    def wait_status(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 20
    ) -> dict[str, Any]:
        last: list[dict[str, Any] | str] = ["no answer"]

        def check() -> dict[str, Any] | None:
            out = self.cli("status", "--json")
            if out.returncode != 0:
                return None
            doc: dict[str, Any] = json.loads(out.stdout)
            last[0] = doc
            return doc if pred(doc) else None

        def exited() -> str | None:
            code = self.proc.poll()
            return None if code is None else f"speaker exited {code}"

        return wait_until(
            check,
            within=timeout,
            poll=0.1,
            what="status condition",
            give_up=exited,
            details=lambda: f"last: {last[0]}\n{self.log_text()}",
        )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def speaker(topology: Topology, tmp_path: Path) -> Iterator[Callable[..., SpeakerProc]]:
    made: list[SpeakerProc] = []

    def start(config: str, dump: str, *, tmp: Path | None = None, **kw: Any) -> SpeakerProc:
        made.append(SpeakerProc(topology, tmp or tmp_path, config, dump, **kw))
        return made[-1]

    yield start
    for sp in made:
        sp.stop()


def net(text: str) -> Any:
    import ipaddress

    return ipaddress.ip_network(text)


#: test_speaker_from_cluster_file_status_reload_drain_and_stop's drain window (2 s did not
#: hold a RIB read and a /status read under a load average of 11).
DRAIN = "6s"


def test_speaker_from_cluster_file_status_reload_drain_and_stop(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    bird = make_router("bird")
    # The drain window is long enough for a loaded machine to see "draining" inside it.
    sp = speaker(config_text(drain_window=DRAIN), node1_cluster_dump(["10.99.100.5"]))
    rib = bird.wait_rib(lambda r: net("10.99.100.5/32") in r, 20)
    (path,) = rib[net("10.99.100.5/32")]
    assert str(path.next_hop) == "172.31.250.11"
    assert path.communities == ("65000:1",)

    doc = sp.wait_status(lambda d: d["peers"] and d["peers"][0]["state"] == "up")
    assert [r["prefix"] for r in doc["routes"]] == ["10.99.100.5/32"]
    table = sp.cli("status")
    assert table.returncode == 0
    assert "tor" in table.stdout
    assert "10.99.100.5/32" in table.stdout
    assert "65000:1" in table.stdout
    ready = sp.topology.nodes[0].run(["curl", "-sf", f"http://{STATUS}/readyz"], check=False)
    assert ready.returncode == 0, ready.stdout

    # The file changes: a new Service's route appears without a signal.
    sp.dump.write_text(node1_cluster_dump(["10.99.100.5", "10.99.100.6"]))
    bird.wait_rib(lambda r: net("10.99.100.6/32") in r, 20)
    # A bad file keeps the last good snapshot (and the routes), and status says stale.
    sp.dump.write_text("kind: List\nitems: [\n")
    sp.wait_status(lambda d: d["source"]["stale"])
    assert net("10.99.100.6/32") in bird.rib()
    # SIGHUP re-reads the config: the community changes at the router.
    sp.config.write_text(config_text(community="65000:2", drain_window=DRAIN))
    sp.dump.write_text(node1_cluster_dump(["10.99.100.5"]))
    sp.proc.send_signal(signal.SIGHUP)
    bird.wait_rib(
        lambda r: (
            net("10.99.100.6/32") not in r
            and [p.communities for p in r.get(net("10.99.100.5/32"), [])] == [("65000:2",)]
        ),
        20,
    )

    # Drain: 65535:0 at the router, then the withdrawal after the window.
    out = sp.cli("drain")
    assert out.returncode == 0, out.stderr
    assert "draining" in out.stdout
    bird.wait_rib(
        lambda r: (
            [p.communities for p in r.get(net("10.99.100.5/32"), [])] == [("65000:2", "65535:0")]
        ),
        10,
    )
    assert sp.status()["mode"] == "draining"
    bird.wait_rib(lambda r: not r, 30)
    assert sp.status()["mode"] == "withdrawn"

    sp.proc.send_signal(signal.SIGTERM)
    assert sp.proc.wait(20) == 0


def test_password_secret_from_the_cluster_file(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc], topology: Topology
) -> None:
    """BGPPeer passwordSecret with the file source: the Secret comes from the dump (as
    `kubectl get secret -o yaml` prints it) and keys the session's MD5, which the router
    requires: no route without the right password."""
    bird = make_router(
        "bird",
        neighbor_ranges=(),
        static_neighbors=(topology.node_address(1),),
        md5_password="s3cret",
    )
    docs = list(yaml.safe_load_all(config_text()))
    [peer] = [d for d in docs if d["kind"] == "BGPPeer"]
    peer["spec"]["passwordSecret"] = {"name": "tor-md5", "namespace": "infra"}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/basic-auth",
        "metadata": {"name": "tor-md5", "namespace": "infra"},
        "data": {"password": "czNjcmV0"},  # base64 of s3cret
    }
    dump = node1_cluster_dump(["10.99.100.5"]) + "---\n" + yaml.safe_dump(secret)
    sp = speaker(yaml.safe_dump_all(docs), dump)
    bird.wait_rib(lambda r: net("10.99.100.5/32") in r, 20)
    assert bird.neighbors()[topology.node_address(1)] == "Established"
    assert "s3cret" not in sp.log_text()


def test_sigterm_withdraws_before_exit_even_with_graceful_restart(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    bird = make_router("bird", graceful_restart=True)
    sp = speaker(
        config_text(graceful=True), node1_cluster_dump([f"10.99.100.{i}" for i in range(1, 101)])
    )
    bird.wait_rib(lambda r: len(r) == 100, 20)
    exabgp = sp.wait_status(lambda d: d["exabgp"]["pid"] is not None)["exabgp"]["pid"]
    sp.proc.send_signal(signal.SIGTERM)
    assert sp.proc.wait(20) == 0
    # At the moment the speaker has exited, the router holds nothing (not even stale
    # routes kept for graceful restart) and ExaBGP is gone.
    assert bird.rib() == {}
    assert not process_alive(exabgp)


def test_killed_speaker_takes_exabgp_down(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    bird = make_router("bird")
    sp = speaker(config_text(), node1_cluster_dump(["10.99.100.5"]))
    bird.wait_rib(lambda r: len(r) == 1, 20)
    exabgp = sp.wait_status(lambda d: d["exabgp"]["pid"] is not None)["exabgp"]["pid"]
    sp.proc.kill()
    sp.proc.wait(10)
    wait_until(lambda: not process_alive(exabgp), within=5, what="PR_SET_PDEATHSIG to stop ExaBGP")
    bird.wait_rib(lambda r: not r, 10)


def test_crash_loop_gives_up_with_clear_error(speaker: Callable[..., SpeakerProc]) -> None:
    sp = speaker(config_text(exabgp="/bin/false"), node1_cluster_dump(["10.99.100.5"]))
    assert sp.proc.wait(60) == 1
    assert "crash_loop" in sp.log_text()
    assert "giving up" in sp.log_text()


def test_unprivileged_speaker(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    bird = make_router("bird")
    # pytest's tmp dirs sit in a 0700 root dir: the unprivileged speaker gets its own
    # (chowned to it by SpeakerProc).
    with tempfile.TemporaryDirectory(prefix="kube-bgpd-unpriv-") as tmp:
        sp = speaker(
            config_text(), node1_cluster_dump(["10.99.100.5"]), user="65534", tmp=Path(tmp)
        )
        try:
            _unprivileged_checks(bird, sp)
        except Exception as exc:
            raise AssertionError(f"speaker log:\n{sp.log_text()}") from exc
        finally:
            sp.stop()


def _unprivileged_checks(bird: Router, sp: SpeakerProc) -> None:
    bird.wait_rib(lambda r: net("10.99.100.5/32") in r, 20)
    doc = sp.wait_status(lambda d: d["exabgp"]["pid"] is not None)
    assert Path(f"/proc/{doc['exabgp']['pid']}").stat().st_uid != 0
    sp.proc.send_signal(signal.SIGTERM)
    assert sp.proc.wait(20) == 0
    assert bird.rib() == {}


def test_on_sigterm_drain(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    bird = make_router("bird")
    sp = speaker(
        config_text(drain_window="2s", on_sigterm="drain"), node1_cluster_dump(["10.99.100.5"])
    )
    bird.wait_rib(lambda r: net("10.99.100.5/32") in r, 20)
    sp.proc.send_signal(signal.SIGTERM)
    bird.wait_rib(
        lambda r: (
            [p.communities for p in r.get(net("10.99.100.5/32"), [])] == [("65000:1", "65535:0")]
        ),
        10,
    )
    assert sp.proc.poll() is None, "the speaker holds the drained routes for the window"
    assert sp.proc.wait(20) == 0
    assert bird.rib() == {}


NODE1_V6 = "fd00:99:250::11"


def two_peer_config(*, on_sigterm: str) -> str:
    """The router over IPv4 with graceful restart (BGPPeer ``tor``) and over IPv6 without
    it (``tor-v6``); one BIRD has graceful restart on both, but it is only negotiated
    where the speaker offers it too."""
    v6_peer = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "tor-v6"},
        "spec": {"myASN": NODE_ASN, "peerASN": ROUTER_ASN, "peerAddress": "fd00:99:250::1"},
    }
    v4_and_speaker = one_peer_config(
        addresses=("10.99.100.0/24", "fd00:99:100::/120"),
        graceful=True,
        speaker={"onSigterm": on_sigterm, "listen": True},
    )
    return v4_and_speaker + "---\n" + yaml.safe_dump(v6_peer)


def bird_withdraws(bird: Router) -> dict[str, int]:
    """Withdrawals received per BIRD channel (``Import withdraws`` of ``show protocols
    all``): a withdraw UPDATE counts, a session loss or a stale flush does not."""
    assert isinstance(bird, BirdRouter)
    out: dict[str, int] = {}
    channel = ""
    for line in bird.birdc("show protocols all").splitlines():
        s = line.strip()
        if s.startswith("Channel "):
            channel = s.split()[1]
        elif s.startswith("Import withdraws:") and channel:
            received = s.split(":", 1)[1].split()[0]
            out[channel] = out.get(channel, 0) + (int(received) if received.isdigit() else 0)
    return out


def test_on_sigterm_retain_keeps_routes_at_graceful_peers_and_withdraws_elsewhere(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc], tmp_path: Path
) -> None:
    """onSigterm retain: the graceful-restart session is closed without a withdraw (the
    router keeps the routes as stale), the other session gets the withdraw first; the
    next speaker refreshes the kept route, and its End-of-RIB flushes the one it no longer
    announces. The kept route is never withdrawn nor missing at the router."""
    # Static neighbours: BIRD deletes a dynamic one (and its counters) when it goes down.
    bird = make_router(
        "bird",
        graceful_restart=True,
        restart_time=60,
        neighbor_ranges=(),
        static_neighbors=(NODE1_V4, NODE1_V6),
    )
    v4a, v4b, v6 = net("10.99.100.5/32"), net("10.99.100.6/32"), net("fd00:99:100::5/128")
    dump = cluster_list(
        [
            node_item("node1", NODE1_V4),
            *service_items("web0", "10.99.100.5", uid="u0"),
            *service_items("web1", "10.99.100.6", uid="u1"),
            *service_items("web6", "fd00:99:100::5", uid="u6"),
        ]
    )
    (tmp_path / "a").mkdir()
    first = speaker(two_peer_config(on_sigterm="retain"), dump, tmp=tmp_path / "a")
    bird.wait_rib(lambda r: {v4a, v4b} <= set(r), 20)
    bird.wait_rib(lambda r: v6 in r, 20, family=6)
    first.wait_status(lambda d: all(p["pending"] == 0 for p in d["peers"]))
    n4, n6 = ipaddress.ip_address(NODE1_V4), ipaddress.ip_address(NODE1_V6)

    # Sampled while the speaker stops: the IPv6 route leaves while its session is still
    # up (a withdraw UPDATE; the speaker flushes before it stops ExaBGP), the IPv4 routes
    # never leave, though their session goes down.
    first.proc.send_signal(signal.SIGTERM)
    withdrawn_while_up = False
    while first.proc.poll() is None:
        sessions, rib4, rib6 = bird.neighbors(), bird.rib(4), bird.rib(6)
        assert {v4a, v4b} <= set(rib4), "a retained route was withdrawn"
        withdrawn_while_up |= v6 not in rib6 and sessions.get(n6) == "Established"
        time.sleep(0.01)
    assert first.proc.wait(20) == 0
    assert withdrawn_while_up, "no withdraw reached the peer without graceful restart"
    log = first.log_text()
    assert "speaker.stop_peer peer=tor action=retained routes=2" in log, log
    assert "speaker.stop_peer peer=tor-v6 action=withdrawn routes=1" in log, log
    bird.wait_neighbors(lambda n: n.get(n4) != "Established")
    # Kept as stale for the restart time (60 s here).
    assert {v4a, v4b} <= set(bird.rib(4))
    assert v6 not in bird.rib(6)

    # The next speaker announces only .5: it refreshes it and, after its End-of-RIB, BIRD
    # flushes the stale .6. Sampled all along: .5 never leaves the RIB.
    (tmp_path / "b").mkdir()
    dump_b = cluster_list(
        [
            node_item("node1", NODE1_V4),
            *service_items("web0", "10.99.100.5", uid="u0"),
            *service_items("web6", "fd00:99:100::5", uid="u6"),
        ]
    )
    second = speaker(two_peer_config(on_sigterm="retain"), dump_b, tmp=tmp_path / "b")
    deadline = time.monotonic() + 30
    while True:
        rib = bird.rib(4)
        assert v4a in rib, "the retained route left the router's RIB"
        if v4b not in rib and "driver.eor_sent peer=tor" in second.log_text():
            break
        assert time.monotonic() < deadline, (rib, second.log_text())
        time.sleep(0.02)
    bird.wait_rib(lambda r: v6 in r, 20, family=6)
    # The new IPv4 session received no withdraw at all (.6 went as a stale flush).
    assert bird_withdraws(bird)["ipv4"] == 0
    second.proc.send_signal(signal.SIGTERM)
    assert second.proc.wait(20) == 0


def test_on_sigterm_retain_after_a_drain_withdraws(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    """A node that asked to be drained wants its routes gone: retain falls back to withdraw."""
    bird = make_router("bird", graceful_restart=True, restart_time=60)
    sp = speaker(
        config_text(graceful=True, on_sigterm="retain", drain_window="1s"),
        node1_cluster_dump(["10.99.100.5"]),
    )
    bird.wait_rib(lambda r: net("10.99.100.5/32") in r, 20)
    assert sp.cli("drain").returncode == 0
    sp.proc.send_signal(signal.SIGTERM)
    assert sp.proc.wait(20) == 0
    assert bird.rib() == {}
    log = sp.log_text()
    assert 'speaker.retain_skipped reason="drain requested"' in log, log
    assert "speaker.stop_peer peer=tor action=withdrawn" in log, log


def annotated_dump(ips: list[str], drain: str | None) -> str:
    """node1_cluster_dump with node1's kube-bgpd.io/drain annotation set to ``drain``."""
    doc = yaml.safe_load(node1_cluster_dump(ips))
    if drain is not None:
        doc["items"][0]["metadata"]["annotations"] = {"kube-bgpd.io/drain": drain}
    return yaml.safe_dump(doc)


def test_node_drain_annotation_drains_then_its_removal_announces_again(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    """kube-bgpd.io/drain: "true" on the Node: 65535:0 at the router, the withdrawal after
    the window; a value that is neither true nor false changes nothing and is logged;
    removing the annotation brings the routes back without 65535:0."""
    bird = make_router("bird")
    ips = ["10.99.100.5"]
    sp = speaker(config_text(drain_window="2s"), annotated_dump(ips, None))
    prefix = net("10.99.100.5/32")
    bird.wait_rib(lambda r: [p.communities for p in r.get(prefix, [])] == [("65000:1",)], 20)

    sp.dump.write_text(annotated_dump(ips, "true"))
    bird.wait_rib(
        lambda r: [p.communities for p in r.get(prefix, [])] == [("65000:1", "65535:0")], 10
    )
    doc = sp.wait_status(lambda d: d["mode"] == "draining")
    assert doc["drain"]["source"] == "annotation"
    bird.wait_rib(lambda r: not r, 10)
    sp.wait_status(lambda d: d["mode"] == "withdrawn")

    sp.dump.write_text(annotated_dump(ips, "maybe"))
    wait_until(
        lambda: "speaker.drain_annotation_invalid" in sp.log_text(), within=10, what="the report"
    )
    assert "maybe" in sp.log_text()
    assert sp.status()["mode"] == "withdrawn"
    assert bird.rib() == {}

    sp.dump.write_text(annotated_dump(ips, None))
    bird.wait_rib(lambda r: [p.communities for p in r.get(prefix, [])] == [("65000:1",)], 10)
    doc = sp.wait_status(lambda d: d["mode"] == "normal")
    assert doc["drain"]["source"] is None
    sp.proc.send_signal(signal.SIGTERM)
    assert sp.proc.wait(20) == 0
    assert bird.rib() == {}


def test_requested_drain_outlasts_the_annotations(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    """`kube-bgpd drain` during an annotation's drain takes it over: removing the
    annotation then announces nothing again."""
    bird = make_router("bird")
    ips = ["10.99.100.5"]
    sp = speaker(config_text(drain_window="2s"), annotated_dump(ips, "true"))
    sp.wait_status(lambda d: d["drain"]["source"] == "annotation")
    out = sp.cli("drain")
    assert out.returncode == 0, out.stderr
    sp.wait_status(lambda d: d["drain"]["source"] == "request")
    # The drain window (2 s) ends: withdrawn.
    sp.wait_status(lambda d: d["mode"] == "withdrawn", timeout=10)
    bird.wait_rib(lambda r: not r, 10)
    # No annotation any more, and a second Service to show the dump was read again.
    sp.dump.write_text(annotated_dump([*ips, "10.99.100.6"], None))
    # The pass that read this dump also followed its (absent) annotation before /status
    # could show its decision (bgpd.speaker.app: after the apply, in the same step).
    doc = sp.wait_status(lambda d: "10.99.100.6" in json.dumps(d["explain"]))
    assert doc["mode"] == "withdrawn"
    assert bird.rib() == {}


def test_a_failed_or_emptying_reload_keeps_the_config_and_the_routes(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc]
) -> None:
    """Issue 15 items 3, 4, 12: SIGHUP with a file that is hostile (alias bomb, a YAML tag,
    an operator that is a mapping, a password with a control character) or that would
    remove every peer keeps the running config: config_stale 1 in /status and /metrics,
    the route stays at the router, one config.reload_failed line each, no traceback, the
    password never logged. A good file clears config_stale."""
    bird = make_router("bird")
    good = config_text()
    sp = speaker(good, node1_cluster_dump(["10.99.100.5"]))
    bird.wait_rib(lambda r: net("10.99.100.5/32") in r, 20)
    secret = "Xy7-s3cr3t-md5"
    docs = list(yaml.safe_load_all(good))
    no_peers = yaml.safe_dump_all([d for d in docs if d["kind"] != "BGPPeer"])
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    peer = next(d for d in docs if d["kind"] == "BGPPeer")
    tagged = good.replace(f"peerASN: {peer['spec']['peerASN']}", "peerASN: !!timestamp 2001-12-14")
    operator = yaml.safe_dump_all(
        [
            {
                **d,
                "spec": {
                    **d["spec"],
                    "nodeSelectors": [{"matchExpressions": [{"key": "a", "operator": {"x": 1}}]}],
                },
            }
            if d["kind"] == "BGPPeer"
            else d
            for d in docs
        ]
    )
    password = yaml.safe_dump_all(
        [
            {**d, "spec": {**d["spec"], "password": secret + "\x07"}}
            if d["kind"] == "BGPPeer"
            else d
            for d in docs
        ]
    )
    for n, bad in enumerate([no_peers, "", bomb, tagged, operator, password], start=1):
        sp.config.write_text(bad)
        sp.proc.send_signal(signal.SIGHUP)
        wait_until(
            lambda n=n: sp.log_text().count("config.reload_failed") >= n or None,
            within=20,
            what=f"reload {n} refused",
        )
        assert sp.wait_status(lambda d: d["config"]["stale"])
        assert net("10.99.100.5/32") in bird.rib()
    metrics = sp.topology.nodes[0].run(["curl", "-sf", f"http://{STATUS}/metrics"], check=False)
    assert "kube_bgpd_config_stale 1.0" in metrics.stdout
    text = sp.log.read_text(errors="replace")
    assert "refused: it holds no BGPPeer" in text
    assert "Traceback" not in text
    assert "Exception in callback" not in text
    assert secret not in text
    assert sp.proc.poll() is None
    sp.config.write_text(good)
    sp.proc.send_signal(signal.SIGHUP)
    sp.wait_status(lambda d: not d["config"]["stale"])
    assert net("10.99.100.5/32") in bird.rib()
    # A field read at start (the reconciler's debounce) is named, not applied silently;
    # the reload is in force otherwise.
    sp.config.write_text(config_text(more={"debounce": "1s"}))
    sp.proc.send_signal(signal.SIGHUP)
    wait_until(
        lambda: "config.restart_needed" in sp.log_text() or None,
        within=20,
        what="the reload naming the field that waits for a restart",
    )
    line = next(x for x in sp.log_text().splitlines() if "config.restart_needed" in x)
    assert "spec.debounce" in line
    assert not sp.status()["config"]["stale"]
    assert net("10.99.100.5/32") in bird.rib()


def annotated_communities_dump(value: str) -> str:
    """node1 and shop/web0 on 10.99.100.5 with kube-bgpd.io/communities ``value``."""
    items = [node_item("node1", NODE1_V4, labels={"rack": "r1"})]
    items += service_items("web0", "10.99.100.5", uid="u0")
    items[1]["metadata"]["annotations"] = {"kube-bgpd.io/communities": value}
    return cluster_list(items)


def test_restart_keeps_the_last_valid_attributes(
    make_router: Callable[..., Router], speaker: Callable[..., SpeakerProc], tmp_path: Path
) -> None:
    """An announced Service whose attribute annotation became invalid keeps its last valid
    attributes (issue 16 item 9), and keeps them across a speaker restart: the speaker
    writes them to its work directory and reads them at start. Without that, the
    restarted speaker would see a Service it never saw valid and not announce it."""
    bird = make_router("bird")
    prefix = net("10.99.100.5/32")

    def communities() -> list[tuple[str, ...]]:
        return [p.communities for p in bird.rib().get(prefix, [])]

    sp = speaker(config_text(), annotated_communities_dump("65000:7"))
    bird.wait_rib(lambda r: communities() == [("65000:1", "65000:7")], 20)
    sp.dump.write_text(annotated_communities_dump("65000:seven"))

    def decided_on_the_edit() -> bool:
        text = sp.log.read_text(errors="replace")
        last = text.rfind("clusterfile.loaded")
        return text.count("clusterfile.loaded") >= 2 and "reconcile.applied" in text[last:]

    wait_until(decided_on_the_edit, within=20, what="a pass on the edited dump")
    assert communities() == [("65000:1", "65000:7")]
    state = tmp_path / "work" / "last-valid-attributes.json"
    assert "65000:7" in state.read_text()

    sp.stop()  # SIGKILL: ExaBGP goes down with it and BIRD drops the route
    bird.wait_rib(lambda r: prefix not in r, 20)
    speaker(config_text(), annotated_communities_dump("65000:seven"))
    bird.wait_rib(lambda r: communities() == [("65000:1", "65000:7")], 20)
