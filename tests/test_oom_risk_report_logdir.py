"""``profscope report`` over a whole log directory as a user runs it (a real process): a
refused file among good runs (a pickle that asks for ``os.system``), a multi-host
profile rated by its worst host (the real two-host TF GPU profile of
shared/fixtures/public_profiles), the runs sorted worst first under a summary table, and
links that resolve inside the file."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROFSCOPE = [sys.executable, "-m", "profscope"]
TF_GPU_PEAK = 6_210_111_488  # GPU_6_bfc's lifetime peak, the same on both hosts (the files are byte-identical)
TF_GPU_CAPACITY = 15_477_102_400  # that allocator's memoryCapacity
TF_BFC_PEAK = 16_014_592  # the demo's TF profile (docs/oom_risk.md)
SNAPSHOTS = ("flexgen_oom.pickle", "flexgen_1.3b.pickle", "sketchkv_2024.pickle")


class _Evil:
    """Unpickled by plain ``pickle.load``, this would run a shell command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def report(*args, cache):
    return subprocess.run([*PROFSCOPE, "report", *args, "--cache-dir", str(cache)], capture_output=True, text=True,
                          timeout=300, check=False)


def _tf_gpu(shared_fixtures: Path) -> Path:
    return shared_fixtures / "public_profiles" / "xplane" / "tf_gpu"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, demo_logdir, shared_fixtures):
    """Three real snapshots, the real two-host TF GPU profile and one malicious pickle."""
    root = tmp_path_factory.mktemp("mixed")
    logdir = root / "logs"
    (logdir / "snapshots").mkdir(parents=True)
    for name in SNAPSHOTS:
        shutil.copy(demo_logdir / "torch_snapshots" / name, logdir / "snapshots" / name)
    shutil.copytree(_tf_gpu(shared_fixtures), logdir / "tf_gpu")
    marker = root / "pwned"
    (logdir / "snapshots" / "evil.pickle").write_bytes(pickle.dumps(_Evil(marker)))
    return logdir, marker, root / "cache"


def test_one_refused_pickle_does_not_hide_the_other_runs(mixed):
    logdir, marker, cache = mixed
    res = report(str(logdir), "--format", "json", cache=cache)
    assert res.returncode == 0, res.stderr
    body = json.loads(res.stdout)
    (refused,) = body["refused"]
    assert refused["file"].endswith("snapshots/evil.pickle") and refused["run"] == "snapshots/evil.pickle"
    assert "posix.system" in refused["problem"] and "nothing was run" in refused["problem"]
    assert not marker.exists()
    runs = {r["run"] for r in body["reports"]}
    assert runs == {f"snapshots/{n}" for n in SNAPSHOTS} | {"tf_gpu/GPU-multi-worker"}
    assert "REFUSED" in res.stderr and "evil.pickle" in res.stderr and "(1 refused)" in res.stderr
    # Markdown and HTML list it too, with its reason.
    md = report(str(logdir), "--format", "markdown", cache=cache)
    assert md.returncode == 0, md.stderr
    assert "## Refused" in md.stdout and re.search(r"\| `[^`]*evil\.pickle` \| refused: the pickle asks for global posix\.system", md.stdout)
    html = report(str(logdir), cache=cache)
    assert html.returncode == 0, html.stderr
    refused_section = re.search(r'<section class="refused" id="refused">(.*?)</section>', html.stdout, re.S).group(1)
    assert "evil.pickle" in refused_section and "posix.system" in refused_section
    assert 'href="#refused"' in html.stdout


def test_refused_files_do_not_decide_the_exit_status(mixed):
    logdir, _, cache = mixed
    # Everything fits in 80 GiB: --fail-on MEDIUM passes though a file was refused.
    assert report(str(logdir), "--format", "json", "--device-memory", "80GiB", "--fail-on", "MEDIUM", cache=cache).returncode == 0
    # 12 GB: flexgen_oom's reserved bytes are HIGH (tests/test_oom_risk_report.py), sketchkv's above it.
    res = report(str(logdir), "--format", "json", "--device-memory", "12GB", "--fail-on", "HIGH", cache=cache)
    assert res.returncode == 1 and json.loads(res.stdout)["risk"] == "OOM"


def test_nothing_readable_is_one_clear_error(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "evil.pickle").write_bytes(pickle.dumps(_Evil(tmp_path / "pwned")))
    res = report(str(tmp_path / "logs"), cache=tmp_path / "cache")
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("profscope: error: nothing could be read: 1 run(s) refused:")
    assert "evil.pickle" in line and "posix.system" in line
    assert not (tmp_path / "pwned").exists()


def test_multi_host_run_assesses_every_host(shared_fixtures, tmp_path):
    res = report(str(_tf_gpu(shared_fixtures)), "--format", "json", cache=tmp_path)
    assert res.returncode == 0, res.stderr
    (r,) = json.loads(res.stdout)["reports"]
    assert [h["host"] for h in r["hosts"]] == ["34.83.195.179_6003", "34.83.195.180_6003"]
    for h in r["hosts"]:
        assert (h["risk"], h["peakBytes"], h["capacityBytes"], h["capacitySource"]) == ("LOW", TF_GPU_PEAK, TF_GPU_CAPACITY, "allocator")
    assert r["host"] in {h["host"] for h in r["hosts"]} and r["peakBytes"] == TF_GPU_PEAK


def test_multi_host_run_is_rated_by_its_worst_host(shared_fixtures, demo_logdir, tmp_path):
    """Two different hosts in one session: the small demo TF profile first, a tf_gpu host
    second. The first host alone is LOW; the run is HIGH, from the second."""
    session = tmp_path / "logs" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (small,) = (demo_logdir / "tf_bfc" / "plugins" / "profile").glob("*/*.xplane.pb")
    shutil.copy(small, session / "a-small.xplane.pb")
    shutil.copy(next((_tf_gpu(shared_fixtures) / "plugins" / "profile" / "GPU-multi-worker").glob("*.xplane.pb")),
                session / "b-large.xplane.pb")
    cap = "6500000000"  # tf_gpu's peak is 95.5 % of it (HIGH: >= 90 %)
    res = report(str(tmp_path / "logs"), "--format", "json", "--capacity-bytes", cap, "--fail-on", "HIGH", cache=tmp_path / "cache")
    assert res.returncode == 1, res.stderr
    (r,) = json.loads(res.stdout)["reports"]
    assert (r["risk"], r["host"], r["peakBytes"]) == ("HIGH", "b-large", TF_GPU_PEAK)
    assert [(h["host"], h["risk"], h["peakBytes"]) for h in r["hosts"]] == [("a-small", "LOW", TF_BFC_PEAK), ("b-large", "HIGH", TF_GPU_PEAK)]
    # One host on request: that host only, as before.
    res = report(str(tmp_path / "logs"), "--format", "json", "--capacity-bytes", cap, "--host", "a-small", cache=tmp_path / "cache")
    (r,) = json.loads(res.stdout)["reports"]
    assert (r["risk"], r["peakBytes"]) == ("LOW", TF_BFC_PEAK) and "hosts" not in r
    # The HTML shows both hosts, the worst one marked.
    html = report(str(tmp_path / "logs"), "--capacity-bytes", cap, cache=tmp_path / "cache").stdout
    hosts = re.search(r'<table class="hosts">(.*?)</table>', html, re.S).group(1)
    assert "a-small" in hosts and re.search(r'<tr class="worst"><td>b-large', hosts)
    assert "worst of 2 hosts: b-large" in html


def test_sorted_worst_first_under_a_summary_with_working_anchors(mixed):
    logdir, _, cache = mixed
    body = json.loads(report(str(logdir), "--format", "json", "--device-memory", "12GB", cache=cache).stdout)
    order = {"UNKNOWN": -1, "LOW": 0, "MEDIUM": 1, "HIGH": 2, "OOM": 3}
    risks = [r["risk"] for r in body["reports"]]
    assert risks == sorted(risks, key=lambda k: -order[k]) and risks[:2] == ["OOM", "HIGH"]
    assert [r["run"] for r in body["reports"]][:2] == ["snapshots/sketchkv_2024.pickle", "snapshots/flexgen_oom.pickle"]
    res = report(str(logdir), "--device-memory", "12GB", cache=cache)
    assert res.returncode == 0, res.stderr
    html = res.stdout
    assert not re.search(r"https?://", html)
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    hrefs = re.findall(r'\bhref="([^"]*)"', html)
    assert hrefs and all(h.startswith("#") for h in hrefs), hrefs
    assert {h[1:] for h in hrefs} <= set(ids)
    # The summary lists the runs in the sections' order, with capacity and its source.
    summary = re.search(r'<table class="summary">(.*?)</table>', html, re.S).group(1)
    rows = re.findall(r'<a href="#([^"]+)">', summary)
    sections = re.findall(r'<section class="run" id="([^"]+)">', html)
    assert rows == sections and len(rows) == len(body["reports"])
    assert "12.00 GB" not in summary and "11.2 GiB" in summary and "request" in summary
    # Evidence is a sentence with numbers, not JSON.
    evidence = re.findall(r'<div class="evidence">Evidence[^:]*: (.*?)</div>', html)
    assert evidence and not any("{" in e or "&#34;" in e for e in evidence)
    assert any(re.search(r"\d[\d,]* bytes", e) and "%" in e for e in evidence)


def test_evidence_reads_as_a_sentence():
    from profscope.tools.oom_risk import evidence_examples, evidence_sentence

    ev = {"category": "unknown", "categoryBytes": 13_477_044_736, "share": 0.787, "threshold": 0.9, "ratio": 1.25,
          "usesRemat": False, "largestItem": {"name": "stack 0", "bytes": 1024}, "examples": [{"argument": "p0", "bytes": 2048}]}
    assert evidence_sentence(ev) == ("Category unknown, category bytes 12.6 GiB (13,477,044,736 bytes), share 78.7 %, threshold 90.0 %, "
                                 "ratio 1.25×, uses remat no, largest item (name stack 0, bytes 1.00 KiB (1,024 bytes)).")
    assert evidence_examples(ev) == ["Argument p0, bytes 2.00 KiB (2,048 bytes)."]
