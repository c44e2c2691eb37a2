"""``profscope diff A B`` (issue 36, docs/compare.md "CLI"): the data API's diff JSON,
Markdown or one HTML file, and ``--fail-on-growth`` exiting 1 exactly when the total grew
by more than the threshold. On the real public snapshots and profiles."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import test_analyze_cli

BACKSTOP_S = test_analyze_cli.BACKSTOP_S  # a hang bound, not a speed assertion
cache, public = test_analyze_cli.cache, test_analyze_cli.public  # fixtures: this module's cache, the public profiles

NIU = "snapshots/niu_fwd_bwd_200_mixed.pickle"  # peak reserved 1.12 GiB
BOLONG = "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle"  # peak reserved 21.3 GiB
TPU = "xplane/tpu_inference/2025_12_10_tpu"


def diff(*args, cache) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profscope", "diff", *map(str, args), "--cache-dir", str(cache),
                           "--workers", "0"], capture_output=True, text=True, timeout=BACKSTOP_S, check=False)


def test_json_is_the_data_api_diff(public, cache, make_client):
    res = diff(NIU, BOLONG, "--logdir", public, "--tool", "oom_risk", "--format", "json", cache=cache)
    assert res.returncode == 0, res.stderr
    api = make_client(public).get("/data/plugin/profile/data", params={"run": BOLONG, "tag": "oom_risk", "base": NIU})
    assert api.status_code == 200, api.text
    assert json.loads(res.stdout) == api.json()


def test_fail_on_growth_exits_1_exactly_when_the_total_grew_more(public, cache):
    """From 1.12 GiB to 21.3 GiB is growth (exit 1 at 5 %); the other way round is not
    (exit 0); the growth itself is the threshold's boundary: more than it fails, it passes."""
    grew = diff(public / NIU, public / BOLONG, "--tool", "oom_risk", "--format", "json", "--fail-on-growth", "5%",
                cache=cache)
    assert grew.returncode == 1, grew.stderr
    body = json.loads(grew.stdout)
    share = body["totals"]["delta"] / body["totals"]["base"]
    assert share > 0.05 and "grew by" in grew.stderr
    assert diff(public / BOLONG, public / NIU, "--tool", "oom_risk", "--fail-on-growth", "5%",
                cache=cache).returncode == 0
    assert diff(public / NIU, public / BOLONG, "--tool", "oom_risk", "--fail-on-growth", str(share),
                cache=cache).returncode == 0
    assert diff(public / NIU, public / BOLONG, "--tool", "oom_risk", "--fail-on-growth", str(share * 0.999),
                cache=cache).returncode == 1


def test_a_run_against_itself_passes_any_threshold(public, cache):
    res = diff(TPU, TPU, "--logdir", public, "--fail-on-growth", "0%", cache=cache)
    assert res.returncode == 0, res.stderr
    assert "total 78.423 s → 78.423 s, 0 (+0.0%)" in res.stdout
    assert "| Memory copy | 78.423 s" not in res.stdout  # rows are categories, each 0 change
    assert "| Memory copy | 75.960 s | 75.960 s | 0 | both | category |" in res.stdout


def test_html_is_one_offline_file(public, cache, tmp_path):
    out = tmp_path / "diff.html"
    res = diff(public / NIU, public / BOLONG, "--tool", "oom_risk", "--format", "html", "-o", out, cache=cache)
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert "<table>" in html and "Activations" in html and 'class="num grew"' in html
    assert "<script" not in html and "http" not in html.split("</head>")[1]


@pytest.mark.parametrize(("args", "message"), [
    ((NIU, TPU, "--tool", "memory_viewer"), "cannot be compared"),
    ((TPU, "no/such/run"), "no run named 'no/such/run'"),
    ((NIU, BOLONG, "--tool", "memory_profile", "--module", "m"), "--module does not apply to memory_profile"),
])
def test_bad_or_mismatched_input_is_exit_2_with_a_message(public, cache, args, message):
    res = diff(*args, "--logdir", public, cache=cache)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


def test_a_bad_threshold_is_refused(public, cache):
    res = diff(NIU, BOLONG, "--logdir", public, "--fail-on-growth", "lots", cache=cache)
    assert res.returncode == 2 and "5% or 0.05" in res.stderr
