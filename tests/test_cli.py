"""The profscope command as a user runs it: a real process, a real socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from profscope import __version__
from profscope.testing.local_server import profscope_process
from tests.conftest import profscope_server

# A hang bound (no speed is asserted): far beyond what each wait takes on a busy machine.
BACKSTOP_S = 120

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


def _children_of(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (/proc/<n>/stat: "pid (comm) state ppid ...")."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_ctrl_c_during_a_conversion_answers_its_request_and_remembers_nothing(tmp_path):
    """Issue 32.5: Ctrl+C while a request waited for a conversion answered it with
    uvicorn's plain-text 500 after the graceful-shutdown timeout; and Ctrl+C reaching
    the worker (one process group) was remembered as "the conversion stopped (SIGINT)",
    a 422 for that good file on every later start. Now the server ends its workers at
    once, answers the request with the one error shape (503) and keeps nothing."""
    from profscope.testing import derived_xplane

    folder = tmp_path / "logdir" / "plugins" / "profile" / "s"
    folder.mkdir(parents=True)
    (folder / "big.xplane.pb").write_bytes(derived_xplane.large_gpu(150_000))
    cache = tmp_path / "cache"
    args = ("serve", str(tmp_path / "logdir"), "--port", "0", "--cache-dir", str(cache))
    answers = []
    with profscope_process(*args) as (url, _, proc):
        server = proc.pid
        window = url + "api/trace/window?run=s&host=big&resolution=1000"

        def ask():
            try:
                with urllib.request.urlopen(window, timeout=BACKSTOP_S) as r:
                    answers.append((r.status, r.headers["Content-Type"], r.read()))
            except urllib.error.HTTPError as e:
                answers.append((e.code, e.headers["Content-Type"], e.read()))

        asking = threading.Thread(target=ask)
        asking.start()
        # The conversion's worker, held still so that it is certainly under way.
        until = time.monotonic() + BACKSTOP_S
        while not (workers := _children_of(server)) and asking.is_alive() and time.monotonic() < until:
            time.sleep(0.002)
        assert workers, "no worker was forked"
        for w in workers:
            os.kill(w, signal.SIGSTOP)
        os.killpg(server, signal.SIGINT)  # Ctrl+C: the terminal signals the whole group
        asking.join(BACKSTOP_S)
        until = time.monotonic() + BACKSTOP_S
        while os.path.exists(f"/proc/{server}") and open(f"/proc/{server}/stat").read().split()[2] != "Z" \
                and time.monotonic() < until:
            time.sleep(0.05)
    [(status, content_type, body)] = answers
    assert (status, content_type) == (503, "application/json"), (status, body[:300])
    error = json.loads(body)
    assert error["status"] == 503 and "the server is stopping" in error["error"] and "big.xplane.pb" in error["error"]
    assert list(cache.rglob("*.failed.json")) == []  # nothing remembered against the file
    with profscope_server(*args) as (url, _):  # and the next start converts it
        with urllib.request.urlopen(url + "api/trace/window?run=s&host=big&resolution=10", timeout=BACKSTOP_S) as r:
            assert r.status == 200 and json.loads(r.read())["hosts"] == ["big"]
