"""Structure: a speaker that reads no YAML does not load PyYAML (~0.7 MiB on every node).

In a pod the speaker reads its configuration from the cluster (custom resources, JSON
over the API) and its credentials from the service account: nothing it reads is YAML.
A fresh interpreter imports what such a speaker imports (its CLI command, the speaker,
the Kubernetes source, the configuration from the cluster, the credentials), resolves a
configuration from cluster objects and parses a JSON cluster dump: `yaml` must not be
in sys.modules. Reading a YAML file (a config file, a YAML dump, a kubeconfig) still
loads it where it is read."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import json, sys
from bgpd.cli import build_parser
build_parser(only="speaker")
import bgpd.speaker.app, k8s_watcher.cache, k8s_watcher.config_source
from k8s_watcher.credentials import in_cluster
from bgpd.config.cluster import object_key, parse_objects
from bgpd.objects import parse_cluster_dump

def obj(kind, name, spec, api="metallb.io/v1beta1"):
    meta = {"name": name, "namespace": "metallb-system", "uid": "u-" + name,
            "resourceVersion": "1"}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}

raws = [obj("IPAddressPool", "web", {"addresses": ["10.99.0.0/24"]}),
        obj("BGPPeer", "tor", {"myASN": 64512, "peerASN": 64500,
                               "peerAddress": "172.31.0.1"}, "metallb.io/v1beta2"),
        obj("BGPAdvertisement", "all", {"ipAddressPools": ["web"]})]
result = parse_objects({object_key(r): r for r in raws})
assert result.config is not None, result
dump = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}]}
parse_cluster_dump(json.dumps(dump))
print(sorted(m for m in sys.modules if m == "yaml" or m.startswith(("yaml.", "_yaml"))))
"""


def test_a_speaker_that_reads_no_yaml_does_not_load_pyyaml() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_yaml_config_file_still_loads_it_where_it_is_read() -> None:
    script = (
        "import sys\nfrom bgpd.config import parse_text\n"
        "assert 'yaml' not in sys.modules\n"
        "result = parse_text('kind: IPAddressPool\\n', 'f.yaml')\n"
        "print('yaml' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
