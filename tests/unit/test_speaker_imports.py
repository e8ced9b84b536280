"""Structure: what the speaker's imports leave out, in a fresh interpreter that imports
what a speaker in a pod imports (its CLI command, the speaker, the Kubernetes source, the
configuration from the cluster, the credentials), on every node:

* PyYAML (~0.7 MiB), when nothing it reads is YAML: in a pod the configuration comes
  from the cluster (custom resources, JSON over the API) and the credentials from the
  service account. It resolves a configuration from cluster objects and parses a JSON
  cluster dump; `yaml` must not be loaded. Reading a YAML file still loads it there.
* difflib (~0.2 MiB), which only an unknown field's "did you mean" message needs.
* frozenlist's C extension, the one C++ part of aiohttp's dependencies (it maps the C++
  runtime, ~1 MiB RSS), with the process's environment left as it was.
* The system's CA store in aiohttp's two default TLS contexts (~1 MiB and ~20 ms each,
  bgpd.aiohttp_import) and the system's MIME types file in aiohttp.web's table: the
  interpreter's "system store" is a file holding one CA (SSL_CERT_FILE) and its MIME
  types file one made-up type. aiohttp's default contexts must hold no CA while a
  context built afterwards (ours, k8s_watcher.client.ssl_context's default) holds it.

And the product's TLS still verifies against the system store where it names no CA of
its own, while aiohttp's default no longer does (fail closed): in a fresh interpreter
whose system store is a test server's self-signed certificate, an https API server
with no CA in its credentials, an https data-plane node URL and an HTTPS proxy in front
of a plain-HTTP API server are reached; a request left to aiohttp's default is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbgpd_lab.apisim.tls import SelfSigned, make_self_signed

SPEAKER_IMPORTS = r"""
import json, mimetypes, os, sys
mimetypes.knownfiles = [sys.argv[1]]
environ = dict(os.environ)
from bgpd.cli import build_parser
build_parser(only="speaker")
import bgpd.speaker.app, k8s_watcher.cache, k8s_watcher.config_source
from k8s_watcher.credentials import in_cluster
"""

SCRIPT = (
    SPEAKER_IMPORTS
    + r"""
import ssl
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
connector = sys.modules["aiohttp.connector"]
print(json.dumps({
    "yaml": sorted(m for m in sys.modules if m == "yaml" or m.startswith(("yaml.", "_yaml"))),
    "difflib": "difflib" in sys.modules,
    "aiohttp's default CAs": [
        connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
        connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509_ca"],
    ],
    "a default context's CAs afterwards":
        ssl.create_default_context().cert_store_stats()["x509_ca"],
    "the made-up MIME type": mimetypes.guess_type("a.kubebgpdtest")[0],
    "frozenlist's C extension": "frozenlist._frozenlist" in sys.modules,
    "the environment as it was": dict(os.environ) == environ,
}))
"""
)


@pytest.fixture
def ca(tmp_path: Path) -> Iterator[SelfSigned]:
    made = make_self_signed()
    yield made
    shutil.rmtree(made.directory)


def _python(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    """What `script` prints in a fresh interpreter (which must exit 0)."""
    argv = [sys.executable, "-c", script, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _run(script: str, ca: SelfSigned, tmp_path: Path) -> str:
    """`script` in a fresh interpreter whose system CA store is `ca` alone and whose
    MIME types file names one made-up type (its path is the script's argument)."""
    types = tmp_path / "mime.types"
    types.write_text("application/x-kube-bgpd-test kubebgpdtest\n")
    (tmp_path / "no-certs").mkdir()
    env = os.environ | {"SSL_CERT_FILE": str(ca.cert), "SSL_CERT_DIR": str(tmp_path / "no-certs")}
    return _python(script, str(types), env=env)


def test_the_speakers_imports_leave_out_what_it_does_not_use(
    ca: SelfSigned, tmp_path: Path
) -> None:
    seen = json.loads(_run(SCRIPT, ca, tmp_path))
    assert seen == {
        "yaml": [],
        "difflib": False,
        "aiohttp's default CAs": [0, 0],
        "a default context's CAs afterwards": 1,
        "the made-up MIME type": None,
        "frozenlist's C extension": False,
        "the environment as it was": True,
    }


def test_a_yaml_config_file_still_loads_it_where_it_is_read() -> None:
    script = (
        "import sys\nfrom bgpd.config import parse_text\n"
        "assert 'yaml' not in sys.modules\n"
        "result = parse_text('kind: IPAddressPool\\n', 'f.yaml')\n"
        "print('yaml' in sys.modules)\n"
    )
    assert _python(script).strip() == "True"


def test_an_unknown_field_still_gets_its_did_you_mean() -> None:
    script = (
        "import sys\nfrom bgpd.config import parse_text\n"
        "assert 'difflib' not in sys.modules\n"
        "result = parse_text('apiVersion: metallb.io/v1beta1\\nkind: IPAddressPool\\n"
        "metadata: {name: p}\\n"
        "spec: {adresses: [10.0.0.0/24]}\\n', 'f.yaml')\n"
        "print([str(i) for i in result.errors])\n"
    )
    assert "did you mean 'addresses'?" in _python(script)


TLS = (
    SPEAKER_IMPORTS
    + r"""
import asyncio
import aiohttp  # the speaker imported it
from aiohttp import web
from bgpd.model import DataPlaneCheck
from bgpd.speaker.probe import ask
from k8s_watcher.client import KubeClient
from k8s_watcher.credentials import Credentials
from kbgpd_lab.apisim.tls import SelfSigned

async def serve(context, who):
    async def answer(request):
        return web.json_response({"kind": "NodeList", "apiVersion": "v1", "items": [who]})
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]

async def main():
    ca = SelfSigned(None, sys.argv[2], sys.argv[3])
    runner, port = await serve(ca.server_context(), "TLS")
    plain, plain_port = await serve(None, "plain")
    seen = {}
    try:
        # An https API server whose credentials name no CA: the system store verifies it.
        creds = Credentials(source="test", server=f"https://127.0.0.1:{port}")
        async with KubeClient(creds) as client:
            seen["API, no CA"] = (await client.request("GET", "/api/v1/nodes"))["items"]
        # A plain-HTTP API server behind an HTTPS proxy (a kubeconfig's proxy-url): the
        # TLS server answers as the proxy.
        creds = Credentials(source="test", server=f"http://127.0.0.2:{plain_port}",
                            proxy=f"https://127.0.0.1:{port}")
        async with KubeClient(creds) as client:
            seen["HTTPS proxy"] = (await client.request("GET", "/api/v1/nodes"))["items"]
        async with aiohttp.ClientSession() as session:
            seen["probe"] = (await ask(session, f"https://127.0.0.1:{port}/healthz", 10)).ok
            try:
                async with session.get(f"https://127.0.0.1:{port}/") as response:
                    seen["aiohttp's default"] = response.status
            except aiohttp.ClientConnectorCertificateError:
                seen["aiohttp's default"] = "refused"
    finally:
        await runner.cleanup()
        await plain.cleanup()
    print(json.dumps(seen))

asyncio.run(main())
"""
)


def test_the_products_tls_verifies_against_the_system_store_and_aiohttps_default_does_not(
    ca: SelfSigned, tmp_path: Path
) -> None:
    script = TLS.replace("sys.argv[2], sys.argv[3]", f"{str(ca.cert)!r}, {str(ca.key)!r}")
    seen = json.loads(_run(script, ca, tmp_path))
    assert seen == {
        "API, no CA": ["TLS"],
        "HTTPS proxy": ["TLS"],
        "probe": True,
        "aiohttp's default": "refused",
    }
