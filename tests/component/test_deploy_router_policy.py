"""docs/routers.md's FRR and BIRD configurations, run for real against real speakers.

The first ```frr and ```bird blocks of the page are loaded verbatim into a real FRR and
BIRD in a lab namespace; two real `kube-bgpd speaker` processes (nodes 1 and 2, the
kube-bgpd side from the same page) announce one Cluster Service. What the page
promises is checked at the router's kernel FIB and BGP RIB:

* both nodes' paths are installed as one ECMP route (listen range, maximum-paths /
  merge paths, import filter);
* a prefix outside the pools is filtered out;
* `kube-bgpd drain` on node 1 (RFC 8326): node 1's path stays in the RIB with 65535:0
  but leaves the FIB at once (the policy's local-pref 0), so traffic moves before the
  withdrawal; after drainWindow the path is withdrawn.

The BFD blocks (the second ```frr and ```bird blocks, added to the first as the page
says, with the page's BFDProfile named by the speakers' BGPPeer): both nodes' BFD
sessions come Up at the router, and node 1 blackholed (every packet dropped in its
namespace, its link up) leaves the FIB within the detect time plus a margin, with the
reason the page names in the router's own words.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deploy_kit as kit
import pytest
import yaml

from kbgpd_lab.kit import manifests
from kbgpd_lab.lab.blackhole import blackhole, restore
from kbgpd_lab.lab.routers import BirdRouter, FRRRouter, RouterBfd, RouterConfig
from kbgpd_lab.lab.speakerfiles import cluster_list, node_item, service_items
from kbgpd_lab.lab.topology import Topology

pytestmark = [pytest.mark.component, pytest.mark.root, pytest.mark.timeout(180)]

KUBE_BGPD = kit.KUBE_BGPD
STATUS = "127.0.0.1:7473"  # each node namespace has its own loopback
SERVICE_IP = "10.99.100.5"
OUTSIDE_IP = "10.99.101.5"  # not in the router's prefix-list
DRAIN_WINDOW = 6


def doc_block(info: str, index: int = 0) -> str:
    """A block of routers.md with this info string: the first is each section's main
    one, the second its BFD addition."""
    return kit.doc_blocks("routers.md", info)[index]


class DocsFRR(FRRRouter):
    def render_bgpd(self) -> str:
        return doc_block("frr")


class DocsBird(BirdRouter):
    def render(self) -> str:
        return doc_block("bird")


def split_bfd_stanza(text: str) -> tuple[str, str]:
    """An integrated FRR configuration split between bgpd and bfdd (the lab runs each
    daemon on its own file): the top-level ``bfd`` stanza, up to its ``exit``, is
    bfdd's."""
    bgpd: list[str] = []
    bfdd: list[str] = []
    inside = False
    for line in text.splitlines():
        if line == "bfd":
            inside = True
        (bfdd if inside else bgpd).append(line)
        if inside and line == "exit":
            inside = False
    return "\n".join(bgpd) + "\n", "\n".join(bfdd) + "\n"


class DocsFRRWithBfd(FRRRouter):
    """The main block plus the BFD block (RouterConfig.bfd only makes bfdd run)."""

    def render_bgpd(self) -> str:
        return doc_block("frr") + split_bfd_stanza(doc_block("frr", 1))[0]

    def render_bfdd(self) -> str:
        return split_bfd_stanza(doc_block("frr", 1))[1]


class DocsBirdWithBfd(BirdRouter):
    """The main block with its protocols made ``from nodes_bfd``, plus the BFD block."""

    def render(self) -> str:
        main = doc_block("bird")
        assert main.count("from nodes {") == 2
        head, sep, protocols = main.partition("protocol bgp nodes4")
        assert sep
        bfd = doc_block("bird", 1)
        return head + bfd + "\n" + (sep + protocols).replace("from nodes {", "from nodes_bfd {")


def speaker_config(*, bfd: bool = False) -> str:
    """The page's kube-bgpd side, plus a pool for each IP and a short drain window;
    with ``bfd`` its BGPPeer names the page's BFDProfile."""
    (peer,) = [d for d in yaml.safe_load_all(doc_block("yaml")) if d]
    if bfd:
        (profile,) = [d for d in yaml.safe_load_all(doc_block("yaml", 1)) if d]
        peer["spec"]["bfdProfile"] = profile["metadata"]["name"]
    docs: list[dict[str, Any]] = [
        manifests.pool("services", ["10.99.100.0/24", "10.99.101.0/24"]),
        peer,
        manifests.advertisement("services", ipAddressPools=["services"]),
        manifests.speaker_config(drainWindow=f"{DRAIN_WINDOW}s"),
        *([profile] if bfd else []),
    ]
    return yaml.safe_dump_all(docs)


def cluster_dump(topology: Topology) -> str:
    items = [node_item(f"node{i}", str(topology.node_address(i))) for i in (1, 2)]
    for name, ip in (("web", SERVICE_IP), ("other", OUTSIDE_IP)):
        items += service_items(name, ip, uid=f"uid-{name}")
    return cluster_list(items)


@pytest.fixture
def work_root() -> Iterator[Path]:
    """The speakers' work directories: where FRR's user can reach them (the speaker's
    bfdd runs as frr; a test's tmp_path is mode 700)."""
    root = Path(tempfile.mkdtemp(prefix="kube-bgpd-docs-work-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def speakers(topology: Topology, tmp_path: Path, work_root: Path) -> Iterator[Callable[..., None]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*, bfd: bool = False) -> None:
        config = tmp_path / "config.yaml"
        config.write_text(speaker_config(bfd=bfd))
        dump = tmp_path / "cluster.yaml"
        dump.write_text(cluster_dump(topology))
        for i in (1, 2):
            log = tmp_path / f"speaker{i}.log"
            argv = [
                KUBE_BGPD,
                "speaker",
                f"--config={config}",
                f"--node-name=node{i}",
                f"--cluster-file={dump}",
                f"--work-dir={work_root / f'work{i}'}",
                f"--metrics-address={STATUS}",
            ]
            with log.open("wb") as out:
                procs.append(
                    topology.nodes[i - 1].popen(argv, stdout=out, stderr=subprocess.STDOUT)
                )

    yield start
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.parametrize("kind", [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")])
def test_docs_router_config_ecmp_filter_and_gshut(
    kind: str,
    topology: Topology,
    tmp_path: Path,
    work_root: Path,
    speakers: Callable[..., None],
) -> None:
    cls = DocsFRR if kind == "frr" else DocsBird
    router = cls(topology.router, RouterConfig(), tmp_path / "router")
    router.start()
    try:
        speakers()
        n1, n2 = topology.node_address(1), topology.node_address(2)
        prefix = ipaddress.ip_network(f"{SERVICE_IP}/32")
        router.wait_fib(prefix, {n1, n2}, timeout=60)
        rib = router.rib()
        assert {p.next_hop for p in rib[prefix]} == {n1, n2}
        # The speakers announce the other pool too; the router's filter drops it.
        assert ipaddress.ip_network(f"{OUTSIDE_IP}/32") not in rib

        drain = topology.nodes[0].run(
            [KUBE_BGPD, "drain", f"--work-dir={work_root / 'work1'}"], check=False, timeout=30
        )
        assert drain.returncode == 0, drain.stdout + drain.stderr
        started = time.monotonic()
        # Traffic leaves node 1 while its path still exists, marked 65535:0 ...
        router.wait_fib(prefix, {n2}, timeout=DRAIN_WINDOW)
        rib = router.rib()
        drained = [p for p in rib[prefix] if p.next_hop == n1]
        assert len(drained) == 1
        assert "65535:0" in drained[0].communities
        assert time.monotonic() - started < DRAIN_WINDOW
        # ... and is withdrawn after the window.
        router.wait_rib(lambda r: {p.next_hop for p in r.get(prefix, [])} == {n2}, timeout=30)
        assert time.monotonic() - started >= DRAIN_WINDOW - 1
    except BaseException:
        sys.stderr.write(f"\n==== {kind} logs\n{router.log_tail()}\n")
        for log in sorted(tmp_path.glob("speaker*.log")):
            sys.stderr.write(f"\n==== {log.name}\n{log.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        router.close()


#: What each router says about a session BFD took down (docs/routers.md names both).
BFD_REASON = {"frr": "(Cease/BFD Down)", "bird": "BFD session down"}


@pytest.mark.parametrize("kind", [pytest.param("frr", id="frr"), pytest.param("bird", id="bird")])
def test_docs_bfd_config_drops_a_dead_node_within_the_detect_time(
    kind: str, topology: Topology, tmp_path: Path, speakers: Callable[..., None]
) -> None:
    (profile,) = [d for d in yaml.safe_load_all(doc_block("yaml", 1)) if d]
    detect = profile["spec"]["detectMultiplier"] * profile["spec"]["receiveInterval"] / 1000
    cls = DocsFRRWithBfd if kind == "frr" else DocsBirdWithBfd
    router = cls(topology.router, RouterConfig(bfd=RouterBfd()), tmp_path / "router")
    router.start()
    try:
        speakers(bfd=True)
        n1, n2 = topology.node_address(1), topology.node_address(2)
        prefix = ipaddress.ip_network(f"{SERVICE_IP}/32")
        router.wait_fib(prefix, {n1, n2}, timeout=60)
        router.wait_bfd(lambda s: s.get(n1) == s.get(n2) == "up", timeout=30)
        blackhole(topology.nodes[0])
        started = time.monotonic()
        router.wait_fib(prefix, {n2}, timeout=detect + 3)
        print(f"\n{kind}: node1 out of the FIB {time.monotonic() - started:.2f} s after")
        # FRR deletes a listen-range neighbour with its session: its log keeps the reason.
        reason = router.log_tail(200) if kind == "frr" else router.birdc("show protocols all")
        assert BFD_REASON[kind] in reason
        assert router.neighbors()[n2] == "Established"
    except BaseException:
        sys.stderr.write(f"\n==== {kind} logs\n{router.log_tail()}\n")
        for log in sorted(tmp_path.glob("speaker*.log")):
            sys.stderr.write(f"\n==== {log.name}\n{log.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        restore(topology.nodes[0])
        router.close()
