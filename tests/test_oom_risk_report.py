"""``profscope report`` as a user runs it: a real process on real runs (the JAX programs
of scripts/make_oom_programs.py, the demo's snapshot), every output format, exit status."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profscope.cli import main
from tests.test_oom_risk import programs  # noqa: F401  (the session fixture)

PROFSCOPE = [sys.executable, "-m", "profscope"]
GIB = 1 << 30


def report(*args, cache):
    return subprocess.run([*PROFSCOPE, "report", *args, "--cache-dir", str(cache)], capture_output=True, text=True, timeout=120, check=False)


def _run_dir(logdir: Path, program: str) -> str:
    (session,) = (logdir / program / "plugins" / "profile").iterdir()
    return f"{program}/{session.name}"


def test_json_report_and_fail_on(programs, tmp_path):  # noqa: F811
    logdir, _ = programs
    run = _run_dir(logdir, "undonated")
    res = report(str(logdir), "--run", run, "--format", "json", "--device-memory", "40MB", cache=tmp_path)
    assert res.returncode == 0, res.stderr
    body = json.loads(res.stdout)
    (r,) = body["reports"]
    assert body["risk"] == r["risk"] == "HIGH" and r["run"] == run
    assert r["capacityBytes"] == 40 * 10**6 and r["capacitySource"] == "request"
    assert r["utilization"] == pytest.approx(r["peakBytes"] / 40e6) and r["utilization"] >= 0.9
    # A HIGH answer also says what to cut (tools/oom_risk.py what_to_cut).
    assert [f["id"] for f in r["findings"]] == ["undonated_arguments", "what_to_cut"]
    assert "HIGH" in res.stderr and run in res.stderr
    # --fail-on: exit 1 at or above the tier, 0 below it.
    for fail_on, code in (("HIGH", 1), ("medium", 1), ("OOM", 0)):
        res = report(str(logdir), "--run", run, "--format", "json", "--device-memory", "40MB", "--fail-on", fail_on, cache=tmp_path)
        assert res.returncode == code, (fail_on, res.stderr)
    # Planned peak above the capacity: OOM.
    res = report(str(logdir), "--run", run, "--format", "json", "--capacity-bytes", str(r["peakBytes"] - 1), "--fail-on", "OOM", cache=tmp_path)
    assert res.returncode == 1 and json.loads(res.stdout)["risk"] == "OOM"


def test_all_runs_and_markdown(programs, tmp_path):  # noqa: F811
    logdir, _ = programs
    res = report(str(logdir), "--format", "markdown", "--device-memory", "1GiB", cache=tmp_path)
    assert res.returncode == 0, res.stderr
    md = res.stdout
    assert md.startswith("# OOM risk: LOW")
    for program in ("donated", "undonated", "remat_off", "remat_on", "eval_heavy"):
        assert f"## {_run_dir(logdir, program)}: LOW" in md
    assert "**Activations dominate the peak**" in md and "**Arguments not donated" in md
    assert "| Activations |" in md and "### Modules" in md


def test_a_file_as_input(demo_logdir, tmp_path):
    """A run's file is enough: the snapshot pickle itself, its reserved bytes against 12 GB."""
    res = report(str(demo_logdir / "torch_snapshots" / "flexgen_oom.pickle"), "--format", "json", "--device-memory", "12GB",
                 "--fail-on", "HIGH", cache=tmp_path)
    assert res.returncode == 1, res.stderr
    (r,) = json.loads(res.stdout)["reports"]
    assert r["run"] == "flexgen_oom.pickle" and r["host"] == "cuda:0"
    assert r["risk"] == "HIGH" and r["peakBytes"] == 11_844_714_496
    # An xplane inside plugins/profile/<session>: the run is the session.
    (xplane,) = (demo_logdir / "mlp" / "plugins" / "profile").glob("*/demo-host.xplane.pb")
    res = report(str(xplane), "--format", "json", "--device-memory", "H100", cache=tmp_path)
    assert res.returncode == 0, res.stderr
    (r,) = json.loads(res.stdout)["reports"]
    # A JAX program named onto a GPU: JAX preallocates 75 % of it (XLA_PYTHON_CLIENT_MEM_FRACTION).
    assert r["run"] == xplane.parent.name and r["capacityBytes"] == 80 * GIB * 3 // 4 and r["capacitySource"] == "device_table"
    assert r["deviceBytes"] == 80 * GIB


def test_html_report_is_one_offline_file(programs, tmp_path):  # noqa: F811
    logdir, _ = programs
    out = tmp_path / "report.html"
    res = report(str(logdir), "--device-memory", "100MB", "-o", str(out), cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert "written to" in res.stderr and str(out) in res.stderr
    assert not re.search(r"https?://", html), "the report must not name any URL"
    assert not re.search(r"<(script|link|img|iframe)\b", html, re.IGNORECASE), "no script, stylesheet or image to fetch"
    assert html.count("<svg ") >= 3 * 5  # gauge, treemap, module peaks per run
    assert "Activations dominate the peak" in html and 'id="worst-risk"' in html
    assert len(html.encode()) < 400_000


@pytest.mark.parametrize(
    "args, words",
    [
        (["--capacity-bytes", "0"], "capacity_bytes"),
        (["--capacity-bytes", "-1"], "capacity_bytes"),
        (["--capacity-bytes", "many"], "capacity_bytes"),
        (["--device-memory", "Z9000"], "unknown device memory"),
        (["--device-memory", "80 furlongs"], "unknown device memory"),
        (["--run", "no/such/run"], "no run named"),
    ],
)
def test_bad_input_exits_2_with_one_line(demo_logdir, tmp_path, capsys, args, words):
    # In process (main() is what the command runs): the exit status and the streams.
    code = main(["report", str(demo_logdir), *args, "--cache-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profscope: error:") and words in lines[0], err
    assert out == ""


def test_missing_input_and_unassessable_run(demo_logdir, tmp_path):
    res = report(str(tmp_path / "nope"), cache=tmp_path)
    assert res.returncode == 2 and "does not exist" in res.stderr
    (tmp_path / "logs").mkdir()
    stray = tmp_path / "logs" / "notes.txt"
    stray.write_text("not a profile")
    res = report(str(stray), cache=tmp_path / "cache")
    assert res.returncode == 2 and "not part of any run" in res.stderr
    res = report(str(demo_logdir), "--fail-on", "SOMETIMES", cache=tmp_path)
    assert res.returncode == 2 and "--fail-on" in res.stderr
