"""The configuration shown in the operator docs is checked by the programs that read it.

* every ```frr block of docs/routers.md passes FRR's own check (`vtysh -C -f FILE`), and
  so do all of them together (what an operator pastes into one frr.conf);
* every ```bird block passes BIRD's parse-only mode (`bird -p -c FILE`);
* every ```yaml block of the deployment docs that holds kube-bgpd configuration (MetalLB
  or kube-bgpd.io kinds) loads without errors; Kubernetes objects pass
  `kubernetes-validate --strict`.

* every ```yaml-invalid block (a refused MetalLB file) gives, from `kube-bgpd validate`,
  exactly the ```validate-output block that follows it.

Both router checks are shown to reject a broken block, so they are not vacuous.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deploy_kit as kit
import pytest
import yaml

from bgpd.config import load_config_or_raise
from kbgpd_lab.apisim import ApiSimulatorThread
from kbgpd_lab.kit.crds import product_crds

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

ROOT = kit.ROOT
DOCS = kit.DOCS
VALIDATE = kit.VALIDATE
OUR_DOCS = ("quickstart.md", "routers.md", "operations.md", "migrating-from-metallb.md")
CONFIG_GROUPS = ("metallb.io/", "kube-bgpd.io/")


blocks = kit.doc_blocks


def check_frr(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "frr.conf"
    path.write_text(text)
    return subprocess.run(
        ["vtysh", "-C", "-f", str(path)], capture_output=True, text=True, timeout=60
    )


def check_bird(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "bird.conf"
    path.write_text(text)
    return subprocess.run(
        ["bird", "-p", "-c", str(path)], capture_output=True, text=True, timeout=60
    )


Checker = Callable[[str, Path], "subprocess.CompletedProcess[str]"]
ROUTER_DOC_FRR = blocks("routers.md", "frr")
FRR = [b for doc in OUR_DOCS for b in blocks(doc, "frr")]
BIRD = [b for doc in OUR_DOCS for b in blocks(doc, "bird")]


def test_the_docs_have_router_examples() -> None:
    assert len(FRR) > len(ROUTER_DOC_FRR) >= 2
    assert len(BIRD) >= 2


@pytest.mark.parametrize("index", range(len(FRR)))
def test_frr_block_passes_vtysh_check(index: int, tmp_path: Path) -> None:
    result = check_frr(FRR[index], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_frr_blocks_together(tmp_path: Path) -> None:
    result = check_frr("\n".join(ROUTER_DOC_FRR), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("index", range(len(BIRD)))
def test_bird_block_parses(index: int, tmp_path: Path) -> None:
    result = check_bird(BIRD[index], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bird_blocks_together(tmp_path: Path) -> None:
    result = check_bird("\n".join(BIRD), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("check", "broken"),
    [
        pytest.param(check_frr, "router bgp 64512\n neighbour NODES peer-group\n", id="frr"),
        pytest.param(check_bird, "protocol bgp x { neighbour 1.2.3.4 as 1; }\n", id="bird"),
    ],
)
def test_checks_reject_a_typo(check: Checker, broken: str, tmp_path: Path) -> None:
    result = check(broken, tmp_path)
    assert result.returncode != 0


def _yaml_blocks() -> list[object]:
    out = []
    for doc in OUR_DOCS:
        for n, text in enumerate(blocks(doc, "yaml")):
            out.append(pytest.param(text, id=f"{doc}:{n}"))
    return out


@pytest.mark.parametrize("text", _yaml_blocks())
def test_yaml_block_is_valid(text: str, tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert docs
    ours = [d for d in docs if str(d.get("apiVersion", "")).startswith(CONFIG_GROUPS)]
    kube = [d for d in docs if d not in ours]
    if ours:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump_all(ours))
        load_config_or_raise([str(path)])
    if kube:
        path = tmp_path / "objects.yaml"
        path.write_text(yaml.safe_dump_all(kube))
        result = subprocess.run(
            [VALIDATE, "--strict", "-k", "1.32.0", "--quiet", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def _refused_examples() -> list[object]:
    out = []
    for doc in OUR_DOCS:
        text = (DOCS / doc).read_text()
        pairs = re.findall(
            r"^```yaml-invalid\n(.*?)^```\n.*?^```validate-output\n(.*?)^```", text, re.S | re.M
        )
        out += [pytest.param(c, o, id=f"{doc}:{n}") for n, (c, o) in enumerate(pairs)]
    return out


def test_the_docs_show_a_refused_file() -> None:
    assert _refused_examples()


@pytest.mark.parametrize(("config", "output"), _refused_examples())
def test_refused_example_gives_the_documented_output(
    config: str, output: str, tmp_path: Path
) -> None:
    """Run where the file is, by its name, so the places read as in the docs."""
    name = re.search(r"^\S+: (\S+?):doc", output, re.M)
    assert name is not None
    (tmp_path / name.group(1)).write_text(config)
    result = subprocess.run(
        [kit.KUBE_BGPD, "validate", name.group(1)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == output


# --------------------------------------------------------------------------- quickstart


def _quickstart_config() -> str:
    (config,) = [b for b in blocks("quickstart.md", "yaml") if "kind: IPAddressPool" in b]
    return config


def _quickstart_service() -> dict[str, object]:
    (service,) = [b for b in blocks("quickstart.md", "yaml") if "kind: Service" in b]
    loaded = yaml.safe_load(service)
    assert isinstance(loaded, dict)
    return loaded


def _quickstart_objects() -> list[dict[str, Any]]:
    return kit.config_objects(_quickstart_config())


def test_quickstart_overlay_steps_render(tmp_path: Path) -> None:
    """The documented copy-and-edit of the example overlay, run as written in a copy of
    the repository's deploy/, renders workloads that read the namespace the quickstart's
    objects are in (and no ConfigMap)."""
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    (steps,) = [b for b in blocks("quickstart.md", "sh") if "overlays/example my-site" in b]
    subprocess.run(["bash", "-euc", steps], cwd=tmp_path, check=True, timeout=60)
    out = subprocess.run(
        [kit.KUBECTL, "kustomize", str(tmp_path / "my-site")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    namespaces = {o["metadata"]["namespace"] for o in _quickstart_objects()}
    assert namespaces == {kit.CONFIG_NAMESPACE}
    for kind in ("DaemonSet", "Deployment"):
        args = kit.container(kit.one(docs, kind))["args"]
        assert f"--config-from-cluster={kit.CONFIG_NAMESPACE}" in args
    # The page creates that namespace, then applies the objects into it.
    (apply,) = [b for b in blocks("quickstart.md", "sh") if "examples/namespace.yaml" in b]
    assert apply.index("examples/namespace.yaml") < apply.index("kubectl apply -f config.yaml")


def test_quickstart_service_gets_the_documented_ip(tmp_path: Path) -> None:
    """The real controller, run as the Deployment runs it with the quickstart's objects
    applied, gives the quickstart's Service the address the page says (10.99.100.1)."""
    documented = re.search(r"EXTERNAL-IP (\S+):", (DOCS / "quickstart.md").read_text())
    assert documented is not None
    argv = kit.manifest_argv(kit.one(kit.rendered(), "Deployment"), POD_IP=kit.loopback_address())
    with ApiSimulatorThread() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        for ns in ("default", kit.CONFIG_NAMESPACE):
            sim.store.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for obj in [*product_crds(), *_quickstart_objects()]:
            sim.store.create(obj)
        sim.store.create(_quickstart_service())
        log = tmp_path / "controller.log"
        env = dict(os.environ, POD_NAMESPACE="kube-bgpd-system")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*argv, f"--kubeconfig={kubeconfig}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            deadline = time.monotonic() + 30
            ingress: list[dict[str, str]] = []
            while not ingress:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
                svc = sim.store.get("services", "web", "default") or {}
                ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress", [])
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0, log.read_text()
    assert [i["ip"] for i in ingress] == [documented.group(1)]


# --------------------------------------------------------------------------- names


def _code_text() -> str:
    return "\n".join(
        p.read_text() for d in ("bgpd", "k8s_watcher") for p in (ROOT / d).rglob("*.py")
    )


def test_log_events_named_in_operations_exist() -> None:
    text = (DOCS / "operations.md").read_text()
    section = text[text.index("**5. Logs.**") :]
    section = section[: section.index("\n\n")]
    names = re.findall(r"`([a-z_]+\.[a-z_]+)`", section)
    assert len(names) >= 10
    code = _code_text()
    assert [n for n in names if f'"{n}"' not in code] == []


def test_metric_names_in_the_docs_exist() -> None:
    """bgpd/metrics.py names every metric as PREFIX + a quoted short name (counters
    without their _total suffix, which prometheus_client adds)."""
    metrics = (ROOT / "bgpd" / "metrics.py").read_text()
    assert 'PREFIX = "kube_bgpd"' in metrics
    names = {n for doc in OUR_DOCS for n in re.findall(r"kube_bgpd_\w+", (DOCS / doc).read_text())}
    assert len(names) >= 5
    for name in names:
        short = re.sub(r"_total$", "", name.removeprefix("kube_bgpd_"))
        assert f'"{short}"' in metrics, name


def test_skip_reasons_table_is_complete() -> None:
    from bgpd.model import SkipReason

    text = (DOCS / "operations.md").read_text()
    documented = set(re.findall(r"^\| `([a-zA-Z]+)` \|", text, re.M))
    assert documented == {str(r) for r in SkipReason}


def test_alert_names_in_operations_exist() -> None:
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    shipped = {r["alert"] for g in alerts["groups"] for r in g["rules"] if "alert" in r}
    named = set(re.findall(r"`(KubeBgpd\w+)`", (DOCS / "operations.md").read_text()))
    assert named == shipped
