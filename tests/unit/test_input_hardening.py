"""Unit tests for issue 15's input items: the emptying rule (3), reloads that keep the
running config whatever fails (4), duration bounds (4), secrets never printed (12), the
node-name readiness (16)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from bgpd.cli import validate
from bgpd.config import parse_text
from bgpd.config import reload as reload_module
from bgpd.config.emptying import HOW_TO_ALLOW, emptying_refusal
from bgpd.config.reload import reload_config
from bgpd.model import Config
from bgpd.speaker.health import ReadinessInputs, readiness

POOL = """\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: p}
spec: {addresses: [10.99.100.0/24]}
"""
PEER = """\
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor}
spec: {myASN: 64512, peerASN: 64500, peerAddress: 127.0.0.1, PASSWORD}
"""
ALLOW = """\
apiVersion: kube-bgpd.io/v1alpha1
kind: SpeakerConfig
metadata: {name: s}
spec: {allowEmptyConfig: true}
"""


def config(*docs: str) -> Config:
    result = parse_text("---\n".join(docs), "test.yaml")
    assert result.config is not None, result.errors
    return result.config


FULL = config(POOL, PEER.replace(", PASSWORD", ""))


@pytest.mark.parametrize(
    ("previous", "new", "refused"),
    [
        pytest.param(FULL, FULL, None, id="same"),
        pytest.param(FULL, config(POOL), "no BGPPeer", id="peers-removed"),
        pytest.param(FULL, config(PEER.replace(", PASSWORD", "")), "no IPAddressPool", id="pools"),
        pytest.param(FULL, Config(), "no BGPPeer and no IPAddressPool", id="everything"),
        pytest.param(FULL, config(ALLOW), None, id="allowed"),
        pytest.param(config(POOL), config(POOL), None, id="had-no-peers"),
        pytest.param(None, config(POOL), "no BGPPeer", id="validate-no-running"),
        pytest.param(None, FULL, None, id="validate-full"),
    ],
)
def test_emptying_refusal(previous: Config | None, new: Config, refused: str | None) -> None:
    got = emptying_refusal(previous, new)
    if refused is None:
        assert got is None
    else:
        assert got is not None
        assert refused in got
        assert HOW_TO_ALLOW in got


def test_reload_refuses_an_empty_file_and_accepts_an_allowed_one(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("")
    outcome = reload_config([path], FULL)
    assert outcome.config is None
    assert outcome.error.startswith("refused: it holds no BGPPeer and no IPAddressPool")
    path.write_text(ALLOW)
    assert reload_config([path], FULL).config is not None


def test_reload_keeps_the_running_config_on_any_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loader bug (any Exception, not only ConfigError) is a failed reload, not a crash."""

    def broken(_paths: object) -> object:
        raise TypeError("unhashable type: 'dict'")

    monkeypatch.setattr(reload_module, "load_config_or_raise", broken)
    outcome = reload_config([tmp_path / "c.yaml"], FULL)
    assert outcome.config is None
    assert outcome.error == "cannot read the config: TypeError: unhashable type: 'dict'"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("drainWindow: 3601s", "spec.drainWindow: '3601s' is out of range (0-3600s)"),
        pytest.param("drainWindow: 3600", None),
        pytest.param("debounce: 61", "spec.debounce: 61 is out of range (0-60s)"),
        pytest.param("debounce: 1.0e+308", "spec.debounce: 1e+308 is out of range (0-60s)"),
        pytest.param(
            "dataPlaneCheck: {timeout: 2m}",
            "spec.dataPlaneCheck.timeout: '2m' is out of range (0-60s)",
        ),
        pytest.param(
            "drainWindow: " + "9" * 70 + "h",
            "spec.drainWindow: a duration of 71 characters is too long (at most 64)",
        ),
    ],
)
def test_every_duration_is_bounded(spec: str, message: str | None) -> None:
    doc = ALLOW.replace("allowEmptyConfig: true", spec)
    result = parse_text(doc, "s.yaml")
    errors = [str(e) for e in result.errors]
    if message is None:
        assert not errors
    else:
        assert errors == [f"s.yaml: SpeakerConfig s: {message}"]


@pytest.mark.parametrize(
    "password",
    [
        pytest.param('password: "s3cr\\aet-PW"', id="control-char"),
        pytest.param('password: "s3cret-PW\\n"', id="newline"),
        pytest.param("password: " + "s3cret-PW" * 10, id="too-long"),
    ],
)
def test_validate_never_prints_a_password(tmp_path: Path, password: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("---\n".join([POOL, PEER.replace("PASSWORD", password)]))
    out = io.StringIO()
    code = validate.run(argparse.Namespace(config=[], files=[str(path)]), out=out, err=out)
    assert code == validate.EXIT_INVALID
    assert "s3cr" not in out.getvalue()
    assert "spec.password" in out.getvalue()


def test_mqtt_password_is_not_printed_either() -> None:
    doc = ALLOW.replace("allowEmptyConfig: true", 'mqtt: {host: h, password: "s3cr\\tet"}')
    result = parse_text(doc, "s.yaml")
    assert [str(e) for e in result.errors] == [
        "s.yaml: SpeakerConfig s: spec.mqtt.password: holds a control character at position 5 "
        "(value not shown: a secret)"
    ]


def test_validate_warns_about_a_config_a_reload_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(POOL)
    out = io.StringIO()
    code = validate.run(argparse.Namespace(config=[], files=[str(path)]), out=out, err=out)
    assert code == validate.EXIT_VALID
    assert (
        "warning: a running speaker refuses to reload to this config: it holds no BGPPeer"
        in out.getvalue()
    )


READY = {"synced": True, "rendered": True, "connected": True, "decided": True}


@pytest.mark.parametrize(
    ("inputs", "ok", "why"),
    [
        pytest.param(READY, True, "ok", id="ready"),
        pytest.param(
            {**READY, "node_missing": "node-1"}, False, "no Node named 'node-1'", id="gone"
        ),
        pytest.param(
            {**READY, "synced": False, "node_missing": "node-1"},
            False,
            "cluster source not synced",
            id="not-synced-first",
        ),
        pytest.param({**READY, "source_stale": True}, True, "cluster source stale", id="stale"),
    ],
)
def test_readiness_names_a_missing_node(inputs: dict[str, object], ok: bool, why: str) -> None:
    got_ok, got_why = readiness(ReadinessInputs(**inputs))  # type: ignore[arg-type]
    assert got_ok is ok
    assert why in got_why
    if "node_missing" in inputs and inputs["synced"]:
        assert "--node-name" in got_why


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        pytest.param(401, "credentials rejected", id="401"),
        pytest.param(403, "forbidden: check the speaker's RBAC", id="403"),
    ],
)
async def test_a_refused_list_is_logged_as_retried_with_a_hint(
    status: int, hint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15 item 15: the informer retries a 401/403, so its line must not say giveUp."""
    import asyncio
    import logging
    from typing import Any, cast

    from k8s_watcher.errors import error_from_status
    from k8s_watcher.informer import SERVICES, Informer, InformerTiming

    third = asyncio.Event()

    class Refusing:
        calls = 0

        async def request(self, *_args: object, **_kw: object) -> dict[str, Any]:
            Refusing.calls += 1
            if Refusing.calls >= 3:
                third.set()
            raise error_from_status(status, {"reason": "Forbidden"}, what="list services")

    informer = Informer(
        cast(Any, Refusing()),
        SERVICES,
        lambda *_: None,
        timing=InformerTiming(backoff_initial=0.01, backoff_max=0.02),
    )
    caplog.set_level(logging.WARNING, logger="k8s_watcher.informer")
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(third.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    contexts = [getattr(r, "kube_bgpd_context", {}) for r in caplog.records]
    retries = [
        c for r, c in zip(caplog.records, contexts, strict=True) if r.msg == "informer.retry"
    ]
    assert retries
    assert all(c["outcome"] == "retry" and hint in c["hint"] for c in retries)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("kind: List\nitems:\n- !!python/object:os.system x\n", id="python-tag"),
        pytest.param("[" * 100_000 + "]" * 100_000, id="deep-json"),
        pytest.param('{"kind": "List", "items": [' + "9" * 5000 + "]}", id="huge-json-int"),
        pytest.param(
            "kind: List\nitems: [{kind: Node, metadata: {name: !!float 1e400}}]\n", id="float-name"
        ),
        pytest.param(b"\xff\xfe".decode("latin-1"), id="not-utf8"),
    ],
)
def test_a_bad_cluster_file_on_reload_keeps_the_last_good_snapshot(
    tmp_path: Path, bad: str
) -> None:
    """Issue 15 item 5: the file source keeps its snapshot, turns stale and names the error."""
    from bgpd.clusterfile import ClusterFileSource

    path = tmp_path / "d.yaml"
    path.write_text(
        "kind: List\nitems:\n- {kind: Node, metadata: {name: n1}, status: {addresses: "
        "[{type: InternalIP, address: 127.0.0.1}]}}\n"
    )
    source = ClusterFileSource(path)
    source.reload()
    assert source.synced
    assert not source.stale
    good = source.snapshot()
    assert list(good.nodes) == ["n1"]
    path.write_bytes(bad.encode("latin-1") if bad.startswith("\xff") else bad.encode())
    source.reload()
    assert source.stale
    assert source.snapshot() is good
    assert source.error
    assert "\n" not in source.error
