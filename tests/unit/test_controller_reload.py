"""The controller's SIGHUP reload: what it puts in force and what waits for its restart.

Of SpeakerConfig the controller reads `loadBalancerClass` live and `logFormat` once at
start (when no --log-format flag is given): a reload that changes the format must say
`config.restart_needed`, as the speaker's does, not only "reloaded"."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
import yaml
from configkit import peer, pool, speaker

from bgpd.cli.controller import _reload
from bgpd.config import load_config_or_raise

if TYPE_CHECKING:
    from bgpd.controller import Controller
    from bgpd.model import Config


class Applied:
    """Stands in for a Controller: records the configs a reload hands it."""

    def __init__(self) -> None:
        self.configs: list[Config] = []

    def set_config(self, config: Config) -> None:
        self.configs.append(config)


def write(path: Path, **spec: Any) -> None:
    path.write_text(yaml.safe_dump_all([pool(), peer(), speaker(**spec)]))


def events(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage().split()[0]) for r in caplog.records]


@pytest.mark.parametrize(
    ("started_format", "started", "new", "waiting"),
    [
        pytest.param("text", {}, {"logFormat": "json"}, True, id="format-changed"),
        pytest.param("text", {}, {}, False, id="unchanged"),
        pytest.param("text", {}, {"loadBalancerClass": "x"}, False, id="live-field-changed"),
        pytest.param(None, {}, {"logFormat": "json"}, False, id="flag-set-the-format"),
        pytest.param("json", {"logFormat": "json"}, {"logFormat": "text"}, True, id="back-to-text"),
    ],
)
def test_a_reload_names_the_log_format_it_cannot_apply(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    started_format: str | None,
    started: dict[str, Any],
    new: dict[str, Any],
    waiting: bool,
) -> None:
    path = tmp_path / "config.yaml"
    write(path, **started)
    running = [load_config_or_raise([str(path)])[0]]
    write(path, **new)
    applied = Applied()
    with caplog.at_level(logging.INFO, logger="bgpd.cli.controller"):
        _reload([str(path)], [cast("Controller", applied)], running, started_format)
    # The new config is in force either way (the controller and the running copy).
    assert applied.configs == [running[0]]
    assert str(running[0].speaker.load_balancer_class or "") == new.get("loadBalancerClass", "")
    expected = [(logging.WARNING, "config.restart_needed")] if waiting else []
    assert events(caplog) == [*expected, (logging.INFO, "config.reloaded")]
    if waiting:
        assert vars(caplog.records[0])["kube_bgpd_context"]["fields"] == "spec.logFormat"


def test_a_broken_file_keeps_the_running_config_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    write(path)
    before = load_config_or_raise([str(path)])[0]
    running = [before]
    path.write_text("kind: IPAddressPool\nspec: [\n")
    applied = Applied()
    with caplog.at_level(logging.INFO, logger="bgpd.cli.controller"):
        _reload([str(path)], [cast("Controller", applied)], running, "text")
    assert running == [before]
    assert applied.configs == []
    assert events(caplog) == [(logging.ERROR, "config.reload_failed")]
