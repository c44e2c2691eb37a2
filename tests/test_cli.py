"""The profscope command as a user runs it: a real process, a real socket."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

from profscope import __version__
from tests.conftest import profscope_server

PROFSCOPE = [sys.executable, "-m", "profscope"]


def run_cli(*args, **kw):
    return subprocess.run([*PROFSCOPE, *args], capture_output=True, text=True, timeout=60, **kw)


def test_version_and_help():
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"profscope {__version__}"
    res = run_cli("--help")
    assert res.returncode == 0
    for word in ("serve", "runs", "gs://", "--demo", "xplane.pb"):
        assert word in res.stdout
    assert "--port" in run_cli("serve", "--help").stdout


def test_runs_command_lists_the_demo(demo_expected, tmp_path):
    res = run_cli("runs", "--demo", "--json", "--cache-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    for program in demo_expected["programs"].values():
        row = rows[f"{program['run']}/{program['session']}"]
        assert row["kind"] == "profile" and row["hosts"] == ["demo-host"]
    assert rows["dumps/mlp"]["kind"] == "xla_dump"


def test_bad_logdir_is_a_clear_error(tmp_path):
    res = run_cli("runs", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert "nope" in res.stderr and "does not exist" in res.stderr
    res = run_cli(str(tmp_path / "nope"))  # the default command is serve
    assert res.returncode == 2 and "does not exist" in res.stderr
    res = run_cli("serve")
    assert res.returncode == 2 and "no log directory" in res.stderr


def test_serve_demo_on_a_free_port_binds_loopback(tmp_path):
    with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path)) as (url, lines):
        assert url.startswith("http://127.0.0.1:")
        runs = json.loads(urllib.request.urlopen(url + "data/plugin/profile/runs", timeout=10).read())
        assert "dumps/mlp" in runs
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "profscope" in page
        assert any("run(s) in" in line for line in lines)


def test_default_command_serves_a_logdir(demo_logdir, tmp_path):
    with profscope_server(str(demo_logdir), "--port", "0", "--cache-dir", str(tmp_path)) as (url, _):
        assert json.loads(urllib.request.urlopen(url + "data/plugin/profile/runs", timeout=10).read())


def test_port_in_use_is_reported(tmp_path):
    with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path)) as (url, _):
        port = url.rsplit(":", 1)[1].rstrip("/")
        res = run_cli("serve", "--demo", "--port", port, "--cache-dir", str(tmp_path))
        assert res.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in res.stderr


def test_cache_inside_logdir_is_refused(demo_copy):
    res = run_cli("runs", str(demo_copy), "--cache-dir", str(demo_copy / "cache"))
    assert res.returncode == 2 and "inside the log directory" in res.stderr
