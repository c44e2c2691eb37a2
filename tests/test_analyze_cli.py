"""``profscope analyze`` as a user runs it (a real process) on the real public profiles:

* ``--format json`` is the data API's ``tag=summary`` answer byte for byte, and the same
  input gives the same bytes from a fresh cache;
* Markdown and the offline HTML file say the same findings, in the JSON's order; the HTML
  file holds no script and no external URL, and its memory section is ``profscope
  report``'s own section for the run (one template, not a copy);
* ``--fail-on P0|P1``: exit 1 exactly when a finding at or above it exists;
* bad input is exit 2 with a message, never a traceback; a corrupt profile's summary lists
  the file as refused.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from profscope.frontend.render import PALETTE, bytes_text

V100 = "traces/kineto_resnet50_v100.pt.trace.json.gz"
TF_GPU = "xplane/tf_gpu"  # two hosts: one summary of every host by default
TPU = "xplane/tpu_inference"
MI300 = "xplane/mi300_jax08_gemm"
CORRUPT = "xplane/tpu_inference_corrupt"
BACKSTOP_S = 300  # a hang bound, not a speed assertion


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("analyze-cache")


@pytest.fixture(scope="module")
def public(shared_fixtures):
    return shared_fixtures / "public_profiles"


def analyze(*args, cache) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profscope", "analyze", *map(str, args), "--cache-dir", str(cache), "--workers", "0"],
                          capture_output=True, text=True, timeout=BACKSTOP_S, check=False)


def _json(target, cache, *extra) -> dict:
    res = analyze(target, "--format", "json", *extra, cache=cache)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_json_is_the_data_api_answer_byte_for_byte(public, cache, make_client, tmp_path):
    trace = public / V100
    res = analyze(trace, "--format", "json", cache=cache)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    body = make_client(trace.parent).get("/data/plugin/profile/data", params={"run": trace.name, "tag": "summary"})
    assert body.status_code == 200, body.text
    assert res.stdout.rstrip("\n") == body.text
    again = analyze(trace, "--format", "json", cache=tmp_path / "fresh-cache")
    assert again.stdout == res.stdout  # deterministic: no time, no order from a set or a cache
    summary = json.loads(res.stdout)
    assert summary["run"] == trace.name and summary["status"] in ("OPTIMAL", "NEEDS_ATTENTION")
    assert f"profscope: {trace.name}: {summary['status']}" in res.stderr


def _section(html: str, anchor: str) -> str:
    start = html.index(f'<section class="run" id="{anchor}">')
    return html[start:html.index("</section>", start) + len("</section>")]


def test_each_format_says_the_same_findings(public, cache, tmp_path):
    """The two-host TF GPU profile (one summary of both hosts): Markdown and HTML list the
    JSON's findings in its order; the HTML file is offline and carries the OOM report's
    section of the run, the same markup `profscope report` writes for it."""
    summary = _json(public / TF_GPU, cache)
    assert summary["host"] == "ALL_HOSTS" and len(summary["hosts"]) == 2
    md = analyze(public / TF_GPU, "--format", "md", cache=cache)
    out = tmp_path / "summary.html"
    html_run = analyze(public / TF_GPU, "--format", "html", "-o", out, cache=cache)
    assert html_run.returncode == md.returncode == 0, html_run.stderr + md.stderr
    html = out.read_text()
    assert f"# Summary: {summary['run']}: {summary['status']}" in md.stdout
    titles = re.findall(r"^### (P[012]): (.*) \((?:time|memory|compiler)[^()]*\)$", md.stdout, flags=re.M)
    assert titles == [(f["priority"], f["title"]) for f in summary["findings"]]
    assert re.findall(r'class="finding p[012]" id="finding-\d+" data-id="([^"]+)"', html) == [f["id"] for f in summary["findings"]]
    assert f'data-status="{summary["status"]}"' in html
    for h in summary["hosts"]:
        assert f'<tr data-host="{h["host"]}">' in html and f"| {h['host']} |" in md.stdout
    # Offline: no script, nothing fetched from elsewhere (links only to the file's anchors).
    assert "<script" not in html
    assert not re.findall(r'(?:src|href)="(?!#)[^"]*"', html)
    # The memory section: profscope report's section of the same run, byte for byte.
    report = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(public / TF_GPU), "-o", str(report), "--cache-dir", str(cache),
                          "--workers", "0"], capture_output=True, text=True, timeout=BACKSTOP_S, check=False)
    assert res.returncode == 0, res.stderr
    anchors = re.findall(r'<section class="run" id="([^"]+)">', report.read_text())
    assert len(anchors) == 1 and 'id="memory"' in html
    assert _section(html, anchors[0]) == _section(report.read_text(), anchors[0])


def test_fail_on_exits_1_exactly_when_a_finding_at_or_above_it_exists(public, cache):
    seen = set()
    for target in (V100, TPU, MI300):
        summary = _json(public / target, cache)
        priorities = {f["priority"] for f in summary["findings"]}
        for level, worse in (("P0", {"P0"}), ("P1", {"P0", "P1"})):
            res = analyze(public / target, "--fail-on", level, "-o", "/dev/null", cache=cache)
            assert res.returncode == (1 if priorities & worse else 0), (target, level, res.stderr)
            seen.add(res.returncode)
        # NEEDS_ATTENTION is exactly "a P0 or P1 exists" (docs/analysis.md)
        assert (summary["status"] == "NEEDS_ATTENTION") == bool(priorities & {"P0", "P1"})
    assert seen == {0, 1}  # both outcomes met on these real profiles


@pytest.mark.parametrize(("args", "message"), [
    (("{public}/no/such/profile",), "does not exist"),
    (("{public}",), "give --run NAME"),
    (("{public}", "--run", "nope/2020"), "no run named"),
    (("{public}/" + TF_GPU, "--host", "nope"), "has no host 'nope'"),
    (("{public}/" + V100, "--server", "ftp://x"), "--server must be an http(s) URL"),
])
def test_bad_input_is_exit_2_with_a_message(public, cache, args, message):
    res = analyze(*(a.format(public=public) for a in args), cache=cache)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "profscope: error:" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_corrupt_profile_is_listed_as_refused(public, cache, tmp_path):
    """The corrupt TPU session: the summary is still written, listing the file and why in
    each format; nothing else could be read, so the exit status is 2."""
    res = analyze(public / CORRUPT, "--format", "json", cache=cache)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    summary = json.loads(res.stdout)
    assert summary["status"] == "NOT_ASSESSED"  # not a green OPTIMAL: nothing was read
    assert [x["file"].endswith("tpu_inference_2.xplane.pb") for x in summary["refused"]] == [True]
    assert "truncated XSpace profile" in summary["refused"][0]["reason"]
    assert "nothing in run" in res.stderr and "REFUSED" in res.stderr
    md = analyze(public / CORRUPT, cache=cache)
    assert "## Refused" in md.stdout and "truncated XSpace profile" in md.stdout
    assert md.stdout.startswith(f"# Summary: {summary['run']}: NOT_ASSESSED")
    out = tmp_path / "corrupt.html"
    assert analyze(public / CORRUPT, "--format", "html", "-o", out, cache=cache).returncode == 2
    html = out.read_text()
    # grey (the UNKNOWN tier's colour), not OPTIMAL's green; the file and why under Refused
    assert f'data-status="NOT_ASSESSED" style="background: {PALETTE["RISK"]["UNKNOWN"]}">NOT ASSESSED<' in html
    assert "truncated XSpace profile" in html.split('id="refused"')[1]
    assert "No rule could run" in html and "No rule could run" in md.stdout and "none of the rules fired" not in html


def test_device_memory_reaches_the_summary_and_its_memory_section(shared_fixtures, cache, make_client, tmp_path):
    """A snapshot names no device: --device-memory gives the memory rules their capacity,
    the same one the API takes (device_memory=) and the HTML file's OOM section shows."""
    snap = shared_fixtures / "torch_snapshots" / "Yiyi-philosophy_LLM-inference" / "oom_snapshot.pickle"
    assert _json(snap, cache)["metrics"]["memory"]["capacity_bytes"] is None
    res = analyze(snap, "--format", "json", "--device-memory", "12GB", cache=cache)
    assert res.returncode == 0, res.stderr
    api = make_client(snap.parent).get("/data/plugin/profile/data", params={"run": snap.name, "tag": "summary", "device_memory": "12GB"})
    assert res.stdout.rstrip("\n") == api.text
    capacity = json.loads(res.stdout)["metrics"]["memory"]["capacity_bytes"]
    assert capacity
    out = tmp_path / "snap.html"
    assert analyze(snap, "--format", "html", "--device-memory", "12GB", "-o", out, cache=cache).returncode == 0
    html = out.read_text()
    section = html[html.index('<section class="run"'):]
    assert f"capacity {bytes_text(capacity)}" in section  # the OOM section's gauge marks that capacity
