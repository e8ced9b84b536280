"""The helper ExaBGP spawns on every node stays small: it is started isolated and without
site-packages, and what it imports is the standard library and nothing it does not use
(bgpd/exabgp/helper.py says why; docs/benchmarks.md "Memory" has the figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bgpd.exabgp import helper
from bgpd.exabgp.runtime import helper_argv

#: Run the helper's file as ExaBGP runs it, without calling main(): the modules its
#: imports added (the probe's own runpy loaded before), and the search path it had.
_PROBE = (
    "import runpy, sys; before = set(sys.modules); "
    "runpy.run_path(sys.argv[1], run_name='probe'); "
    "added = sorted(set(sys.modules) - before); import json; "
    "print(json.dumps({'modules': added, 'path': sys.path}))"
)


def _started_like_exabgp() -> dict[str, list[str]]:
    *interpreter_and_flags, script = helper_argv()
    out = subprocess.run(
        [*interpreter_and_flags, "-c", _PROBE, script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded: dict[str, list[str]] = json.loads(out.stdout)
    return loaded


def test_helper_runs_as_an_isolated_script_without_site_packages() -> None:
    argv = helper_argv()
    assert argv[:3] == [sys.executable, "-I", "-S"]
    assert Path(argv[3]) == Path(helper.__file__).resolve()
    assert not any("site-packages" in p for p in _started_like_exabgp()["path"])


def test_helper_imports_only_the_standard_library_it_uses() -> None:
    added = _started_like_exabgp()["modules"]
    top_level = {m.split(".")[0] for m in added}
    assert {m for m in top_level if m not in sys.stdlib_module_names} == set()
    # Not json (the hello line is written by hand), nor anything of kube-bgpd.
    assert not top_level & {"json", "bgpd", "k8s_watcher", "exabgp"}


def test_hello_line_is_the_json_the_daemon_reads() -> None:
    line = helper.hello_line(123, 4, 0)
    assert line.endswith(b"\n")
    hello = {"type": "kube-bgpd-helper", "pid": 123, "generation": 4, "dropped": 0}
    assert json.loads(line) == hello
