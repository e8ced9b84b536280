"""Credentials (k8s_watcher.credentials) against real servers: the API simulator with a
bearer token, an exec plugin whose token expires, a 401 renewal (the child process), the
in-cluster account read without a child and its rotated token file, a TLS server that
demands a client certificate; and the speaker, started against the simulator and synced,
never imports the `kubernetes` package.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import signal
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from k8s_kit import free_port, lb_service, simulator
from test_speaker_cluster_config import seed, speaker, status

from k8s_watcher.client import KubeClient
from k8s_watcher.credentials import CredentialSource
from k8s_watcher.errors import RequestRejected
from kbgpd_lab.apisim import ApiSimulator
from kbgpd_lab.apisim.tls import make_self_signed
from kbgpd_lab.kit.waiting import wait_until_async

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]

SERVICES = "/api/v1/namespaces/default/services"
ACCOUNT = "/run/secrets/kubernetes.io/serviceaccount"


def names(doc: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in doc["items"]]


def refusals(sim: ApiSimulator) -> int:
    return sum(1 for r in sim.request_log if r.status == 401)


def exec_kubeconfig(tmp_path: Path, sim: ApiSimulator, *, expires_in: int) -> Path:
    """A kubeconfig whose user is an exec plugin: a shell script printing an
    ExecCredential with the token in `token` and an expiry `expires_in` s from now."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        "#!/bin/sh\n"
        f'expiry=$(date -u -d "+{expires_in} seconds" +%Y-%m-%dT%H:%M:%SZ)\n'
        f"token=$(cat {shlex.quote(str(tmp_path / 'token'))})\n"
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        '"status":{"token":"%s","expirationTimestamp":"%s"}}\' "$token" "$expiry"\n'
    )
    plugin.chmod(0o755)
    exec_user = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": sim.url}}],
        "users": [{"name": "plugin", "user": {"exec": exec_user}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "plugin"}}],
        "current-context": "sim",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_exec_plugin_token_is_renewed_after_its_expiry(tmp_path: Path) -> None:
    async with ApiSimulator(token="first") as sim:
        sim.store.create(lb_service("a"))
        (tmp_path / "token").write_text("first")
        kubeconfig = exec_kubeconfig(tmp_path, sim, expires_in=8)
        source = CredentialSource(str(kubeconfig), expiry_margin=1.0, rerun_interval=0.2)
        async with KubeClient(source=source) as client:
            assert names(await client.request("GET", SERVICES)) == ["a"]
            first = await source.get()
            assert first.authorization == "Bearer first"
            assert first.expires is not None
            runs = source.runs
            # The plugin now hands out another token, and only that one is accepted.
            (tmp_path / "token").write_text("second")
            sim.token = "second"
            expires = first.expires
            await wait_until_async(lambda: time.time() >= expires - 1.0, within=30, what="expiry")
            assert names(await client.request("GET", SERVICES)) == ["a"]
            assert source.runs > runs, "the child ran again for the expiry"
            assert (await source.get()).authorization == "Bearer second"
        assert refusals(sim) == 0, "the new token was fetched before it was needed"


async def test_a_401_runs_the_child_once_then_the_refusal_stands(tmp_path: Path) -> None:
    async with ApiSimulator(token="first") as sim:
        sim.store.create(lb_service("a"))
        (tmp_path / "token").write_text("first")
        kubeconfig = exec_kubeconfig(tmp_path, sim, expires_in=3600)
        source = CredentialSource(str(kubeconfig))
        async with KubeClient(source=source) as client:
            assert names(await client.request("GET", SERVICES)) == ["a"]
            assert source.runs == 1
            # Revoked on the server, renewed by the plugin: one 401, then success.
            (tmp_path / "token").write_text("second")
            sim.token = "second"
            assert names(await client.request("GET", SERVICES)) == ["a"]
            assert (source.runs, refusals(sim)) == (2, 1)
            # Revoked with nothing new from the plugin: the 401 is the answer...
            sim.token = "third"
            with pytest.raises(RequestRejected) as refused:
                await client.request("GET", SERVICES)
            assert refused.value.status == 401
            assert source.runs == 3
            # ...and the same credentials refused again do not start another child.
            with pytest.raises(RequestRejected):
                await client.request("GET", SERVICES)
            assert source.runs == 3


IN_CLUSTER_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from k8s_watcher import credentials
from k8s_watcher.client import KubeClient
from k8s_watcher.credentials import CredentialSource

def no_child(*args):
    raise AssertionError("in-cluster credentials started a child")

credentials.child_argv = no_child  # every way to the child goes through it

async def main():
    source = CredentialSource(token_reread=0.0)
    source.start_early()  # as the speaker does
    async with KubeClient(source=source) as client:
        doc = await client.request("GET", "/api/v1/namespaces/default/services")
        print(json.dumps([i["metadata"]["name"] for i in doc["items"]]), flush=True)
        new = sys.stdin.readline().strip()
        Path("{account}/token").write_text(new)  # the kubelet rotates the token
        doc = await client.request("GET", "/api/v1/namespaces/default/services")
        print(json.dumps([i["metadata"]["name"] for i in doc["items"]]), flush=True)
        print(json.dumps([source.runs, (await source.get()).source]), flush=True)

asyncio.run(main())
"""


@pytest.mark.root
async def test_in_cluster_token_rotation_reaches_the_next_request(tmp_path: Path) -> None:
    """As in a pod: $KUBERNETES_SERVICE_HOST/PORT, the account's token and CA in
    /run/secrets (a tmpfs in a mount namespace of the client's own), read by the client
    itself with no credentials child; the token file is rewritten, and the next request
    carries the new token without a 401."""
    async with ApiSimulator(tls=True, token="pod-token") as sim:
        assert sim.ca_cert is not None
        sim.store.create(lb_service("a"))
        (tmp_path / "token").write_text("pod-token\n")
        script = tmp_path / "client.py"
        script.write_text(IN_CLUSTER_SCRIPT.replace("{account}", ACCOUNT))
        setup = " && ".join(
            [
                "mount -t tmpfs tmpfs /run",
                f"mkdir -p {ACCOUNT}",
                f"cp {shlex.quote(str(tmp_path / 'token'))} {ACCOUNT}/token",
                f"cp {shlex.quote(str(sim.ca_cert))} {ACCOUNT}/ca.crt",
                shlex.join(["exec", sys.executable, str(script)]),
            ]
        )
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAMESPACE")}
        env |= {
            "HOME": str(tmp_path),  # no ~/.kube/config
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(sim.port),
        }
        proc = await asyncio.create_subprocess_exec(
            "unshare",
            "-m",
            "sh",
            "-c",
            setup,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            first = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert json.loads(first or b"null") == ["a"], await proc.stderr.read()  # type: ignore[union-attr]
            sim.token = "rotated"
            proc.stdin.write(b"rotated\n")
            await proc.stdin.drain()
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        lines = out.decode().splitlines()
        assert proc.returncode == 0, err.decode()
        assert json.loads(lines[0]) == ["a"]
        assert json.loads(lines[1]) == [1, "in-cluster service account"]
        assert refusals(sim) == 0


async def test_client_certificate_from_kubeconfig_data(tmp_path: Path) -> None:
    """A server that demands a client certificate (as an API server with x509 users):
    the kubeconfig's *-data fields reach the TLS handshake, and the private copies the
    client makes for the ssl module are gone afterwards."""
    server_cert = await asyncio.to_thread(make_self_signed)
    client_cert = await asyncio.to_thread(make_self_signed)
    context = server_cert.server_context()
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(client_cert.cert)

    async def handler(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        return web.json_response(
            {"kind": "ServiceList", "items": [], "subject": subject.get("commonName")}
        )

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/services", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "certificate-authority-data": b64(server_cert.cert),
                },
            }
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate-data": b64(client_cert.cert),
                    "client-key-data": b64(client_cert.key),
                },
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    private = tmp_path / "tmp"
    private.mkdir()
    saved = tempfile.tempdir
    tempfile.tempdir = str(private)
    try:
        async with KubeClient(source=CredentialSource(str(kubeconfig))) as client:
            doc = await client.request("GET", SERVICES)
    finally:
        tempfile.tempdir = saved
        await runner.cleanup()
        for made in (server_cert, client_cert):
            for f in made.directory.iterdir():
                f.unlink()
            made.directory.rmdir()
    assert doc["subject"] == "apisim", "the client certificate was presented"
    assert list(private.iterdir()) == [], "the certificate's private copies are removed"


async def test_the_speaker_never_imports_the_kubernetes_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The speaker with its in-process controller (leader election, the IP written to the
    Service's status, Events) against the simulator with a bearer token, synced (its
    decision for the Service in /status), then stopped: Python's import log
    (PYTHONPROFILEIMPORTTIME: every module the process imported, in its stderr) names
    aiohttp and no `kubernetes` module. The credentials child's imports go to a pipe.
    Nor, without SpeakerConfig.mqtt, the MQTT client (aiomqtt, paho), nor the modules
    of the CLI's other commands."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    async with simulator(tmp_path, crds=True, token="node-token") as (sim, kubeconfig):
        seed(sim, tmp_path / "work")
        port = free_port()
        async with speaker(tmp_path, kubeconfig, port) as proc:

            async def decided() -> bool:
                return bool(((await status(port)).get("explain") or {}).get("routes"))

            await wait_until_async(decided, within=60, what="the Service decided")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in (tmp_path / "speaker.log").read_text().splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"aiohttp", "k8s_watcher.client", "k8s_watcher.leader"} <= imported
    unused = ("kubernetes", "aiomqtt", "paho")
    heavy = sorted(m for m in imported if m.split(".")[0] in unused)
    assert heavy == []
    # The CLI's parser is built for `speaker` alone: no other command's module.
    commands = {m for m in imported if m.startswith("bgpd.cli.")}
    assert "bgpd.cli.controller" in commands  # its leader-election flags
    assert commands <= {"bgpd.cli.controller", "bgpd.cli.speaker"}
