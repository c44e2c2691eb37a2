"""The profscope command as a user runs it: a real process, a real socket."""

from __future__ import annotations

import json
import shutil
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


# -- profscope steps / ops: GET /api/steps_ops on the command line (issue 34) -------------------

GEMM_RUN = "mi300_jax08_gemm/jax08_gemm"
TORCH_RUN = "traces/tracelens_h100_bert_small.trace.json.gz"


def _route(logdir, cache, run: str) -> dict:
    """What ``GET /api/steps_ops`` answers for ``run`` (a server of its own, in this process)."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    client = TestClient(create_app(Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache))))
    res = client.get("/api/steps_ops", params={"run": run})
    assert res.status_code == 200, res.text
    return res.json()


def _xprof_hlo_stats(case: str) -> dict:
    """XProf 2.24.2's own hlo_stats rows (scripts/record_xprof_op_golden.py), by (program id, op)."""
    import gzip
    from pathlib import Path

    table = json.loads(gzip.decompress((Path(__file__).parent / "golden" / "op_stats" / f"{case}.hlo_stats.json.gz")
                                       .read_bytes()))
    ids = [c["id"] for c in table["cols"]]
    rows = [dict(zip(ids, [cell.get("v") for cell in r["c"]])) for r in table["rows"]]
    return {(r["program_id"], r["hlo_op_name"]): r for r in rows}


def _table_rows(text: str, header: str) -> list[str]:
    """The body rows of the Markdown table whose header line starts with ``header``."""
    lines = text.split("\n" + header, 1)[1].splitlines()[2:]
    return [line for line in lines[: next((i for i, x in enumerate(lines) if not x.startswith("|")), len(lines))]]


def test_ops_prints_the_routes_ops_of_an_xplane(shared_fixtures, tmp_path):
    """``profscope ops`` on the MI300 GEMM profile: the JSON's ``ops`` are the route's, its
    HLO rows XProf's own hlo_stats ops (occurrences exactly, total time to the µs rounding
    of the answer); Markdown with ``--top 3`` prints those rows first, in that order."""
    logdir = shared_fixtures / "public_profiles" / "xplane"
    cache = ["--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "ops.json"
    res = run_cli("ops", str(logdir), "--run", GEMM_RUN, "--format", "json", "--top", "0", "-o", str(out), *cache)
    assert res.returncode == 0, res.stderr
    got = json.loads(out.read_text())
    assert got["ops"] == _route(logdir, tmp_path / "route-cache", GEMM_RUN)["ops"]
    xprof = _xprof_hlo_stats("mi300_jax08_gemm")
    hlo = {(r["program_id"], r["name"]): r for r in got["ops"] if r["kind"] == "hlo"}
    assert set(hlo) == set(xprof)
    for key, row in hlo.items():
        assert row["occurrences"] == xprof[key]["occurrences"], key
        assert abs(row["total_us"] - xprof[key]["total_time"]) <= 0.0005 + 1e-9 * row["total_us"], key

    res = run_cli("ops", str(logdir), "--run", GEMM_RUN, "--top", "3", *cache)
    assert res.returncode == 0, res.stderr
    rows = _table_rows(res.stdout, "| op | kind |")
    assert len(rows) == 3
    for line, op in zip(rows, got["ops"]):
        assert line.startswith(f"| {op['name']} | {op['kind']} | {op['category']} |")
        assert f"| {op['occurrences']:,} | {op['total_us']:,.1f} |" in line


def test_ops_and_steps_of_a_pytorch_trace(shared_fixtures, tmp_path):
    """The kernels and framework ops of a PyTorch trace, as the route ranks them; ``steps``
    prints one row per step and device under the answer's own categories."""
    logdir = shared_fixtures / "public_profiles"
    cache = ["--cache-dir", str(tmp_path / "cache")]
    res = run_cli("ops", str(logdir), "--run", TORCH_RUN, "--format", "json", "--top", "5", *cache)
    assert res.returncode == 0, res.stderr
    route = _route(logdir, tmp_path / "route-cache", TORCH_RUN)
    assert json.loads(res.stdout)["ops"] == route["ops"][:5]
    assert {r["kind"] for r in route["ops"]} == {"kernel", "framework"}

    res = run_cli("steps", str(logdir), "--run", TORCH_RUN, *cache)
    assert res.returncode == 0, res.stderr
    assert route["summary"]["step_source"] == "ProfilerStep"
    labels = [c["label"] for c in route["categories"]]
    assert labels == ["compute", "communication", "memory", "other"]
    header = "| step | device | step time | " + " | ".join(labels) + " | idle | bound |"
    assert header in res.stdout
    rows = _table_rows(res.stdout, header)
    assert len(rows) == sum(len(s["devices"]) for s in route["steps"]) > 0
    assert rows[0].startswith(f"| {route['steps'][0]['step']} | {route['steps'][0]['devices'][0]['device']} | "
                              f"{route['steps'][0]['step_time_us']:,.1f} |")


def test_steps_of_an_xplane(shared_fixtures, tmp_path):
    """``profscope steps`` reads xplane runs too: what the answer holds (its steps under its
    categories, or the note saying why there are none), then the ops, ranked."""
    logdir = shared_fixtures / "public_profiles" / "xplane"
    cache = ["--cache-dir", str(tmp_path / "cache")]
    res = run_cli("steps", str(logdir), "--run", GEMM_RUN, "--format", "json", "--top", "0", *cache)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["source"] == "xplane" and got["ops"]
    res = run_cli("steps", str(logdir), "--run", GEMM_RUN, "--top", "2", *cache)
    assert res.returncode == 0, res.stderr
    if got["steps"]:
        header = ("| step | device | step time | " + " | ".join(c["label"] for c in got["categories"])
                  + " | idle | bound |")
        assert len(_table_rows(res.stdout, header)) == sum(len(s["devices"]) for s in got["steps"])
    else:
        assert f"Note: {got['summary']['missing']}" in res.stdout
    assert len(_table_rows(res.stdout, "| op | kind |")) == 2


def test_steps_and_ops_bad_input_is_exit_2_naming_the_file(shared_fixtures, tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    corrupt = shared_fixtures / "public_profiles" / "xplane" / "tpu_inference_corrupt"
    [session] = [p.name for p in (corrupt / "plugins" / "profile").iterdir()]
    for command in ("ops", "steps"):
        res = run_cli(command, str(corrupt), "--run", session, *cache)
        assert res.returncode == 2, res.stdout
        assert "tpu_inference_2.xplane.pb: truncated XSpace" in res.stderr, res.stderr
    res = run_cli("ops", str(corrupt), "--run", session, "--top", "-1", *cache)
    assert res.returncode == 2 and "--top" in res.stderr
    res = run_cli("ops", str(corrupt), "--run", "nope", *cache)
    assert res.returncode == 2 and "no run named 'nope'" in res.stderr


def test_steps_of_all_hosts(shared_fixtures, tmp_path):
    """``--host ALL_HOSTS`` (XProf's name) on the two-host TF GPU profile: one row per host
    with its step statistics, the straggler marked; ``ops`` says the table is per host."""
    logdir = shared_fixtures / "public_profiles" / "xplane"
    cache = ["--cache-dir", str(tmp_path / "cache")]
    args = ["--run", "tf_gpu/GPU-multi-worker", "--host", "ALL_HOSTS", *cache]
    res = run_cli("steps", str(logdir), *args, "--format", "json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert len(got["hosts"]) == 2
    res = run_cli("steps", str(logdir), *args)
    assert res.returncode == 0, res.stderr
    rows = _table_rows(res.stdout, "| host | steps |")
    assert len(rows) == 2
    for line, h in zip(rows, got["hosts"]):
        mark = " (straggler)" if h["host"] == got.get("straggler_host") else ""
        assert line.startswith(f"| {h['host']}{mark} | {h['steps']:,} | {h['median_us']:,.1f} | {h['p90_us']:,.1f} |")
    res = run_cli("ops", str(logdir), *args)
    assert res.returncode == 0 and "Ops are ranked per host: give --host, one of 34.83.195.179_6003" in res.stdout


def test_steps_of_all_hosts_with_an_unreadable_host(shared_fixtures, tmp_path):
    """A session of the TF GPU host and the corrupt TPU file: the readable host's row, and
    the unreadable one's with the reason the answer gives (was a row of empty cells)."""
    base = shared_fixtures / "public_profiles" / "xplane"
    run_dir = tmp_path / "logs" / "plugins" / "profile" / "s"
    run_dir.mkdir(parents=True)
    shutil.copy(next((base / "tf_gpu").rglob("34.83.195.179_6003.xplane.pb")), run_dir / "good.xplane.pb")
    shutil.copy(next((base / "tpu_inference_corrupt").rglob("*.xplane.pb")), run_dir / "bad.xplane.pb")
    args = ["--run", "s", "--host", "ALL_HOSTS", "--cache-dir", str(tmp_path / "cache")]
    res = run_cli("steps", str(tmp_path / "logs"), *args, "--format", "json")
    assert res.returncode == 0, res.stderr
    bad = next(h for h in json.loads(res.stdout)["hosts"] if h["host"] == "bad")
    assert bad["status"] == "error" and "bad.xplane.pb" in bad["reason"]
    res = run_cli("steps", str(tmp_path / "logs"), *args)
    assert res.returncode == 0, res.stderr
    rows = _table_rows(res.stdout, "| host | steps |")
    assert rows[0] == f"| bad | unreadable: {bad['reason'].replace('|', chr(92) + '|')} | | | | |"
    assert rows[1].startswith("| good | 1 | ")


def test_steps_of_a_cpu_only_profile(demo_logdir, tmp_path):
    """The demo's CPU-only transformer profile: XProf's host steps, one row each with its
    start and time (there is no device to break down), and the answer's note."""
    cache = ["--cache-dir", str(tmp_path / "cache")]
    run = next(r["name"] for r in json.loads(run_cli("runs", str(demo_logdir), "--json", *cache).stdout)
               if r["name"].startswith("transformer/"))
    res = run_cli("steps", str(demo_logdir), "--run", run, "--format", "json", *cache)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["steps"] and not any(s["devices"] for s in got["steps"])
    res = run_cli("steps", str(demo_logdir), "--run", run, *cache)
    assert res.returncode == 0, res.stderr
    rows = _table_rows(res.stdout, "| step | start | step time |")
    assert rows == [f"| {s['step']} | {s['start_us']:,.1f} | {s['step_time_us']:,.1f} |" for s in got["steps"]]
    assert f"Note: {got['summary']['missing']}" in res.stdout
    # --top 2: the two slowest steps, in step order, and how many there are
    assert len(got["steps"]) > 2
    res = run_cli("steps", str(demo_logdir), "--run", run, "--top", "2", *cache)
    assert res.returncode == 0, res.stderr
    slow = sorted(got["steps"], key=lambda s: -s["step_time_us"])[:2]
    assert _table_rows(res.stdout, "| step | start | step time |") == [
        f"| {s['step']} | {s['start_us']:,.1f} | {s['step_time_us']:,.1f} |" for s in got["steps"] if s in slow]
    assert f"The 2 slowest of {len(got['steps']):,} steps (--top 0 for all):" in res.stdout
