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
