"""The Summary page and ``profscope analyze``'s HTML file in Debian's Chromium (Playwright),
the network cut, on the real public profiles and a snapshot with a real OOM event:

* a bare ``?run=R`` opens the run's Summary (the tool picker: Summary, then Overview); the
  status, findings and evidence links are the data API's; an evidence link opens the view
  it names (the step in Steps & ops, the ops of a category, the snapshot at the OOM) and
  Back returns; the run overview stays one click away (V100 trace, TPU, MI300);
* the two-host TF GPU profile opens on every host (host=ALL_HOSTS), worst host first, and
  a host's row opens that host's summary;
* the snapshot with an OOM (the repo's builder: no public snapshot has an ``oom`` entry,
  shared/fixtures/public_profiles/README.md) shows its P0 and the OOM tier;
* the HTML file, opened from disk with JavaScript off, shows the same status and findings
  and asks nothing of the network.

Screenshots: test-artifacts/summary_*.png."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from urllib.parse import parse_qsl, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from profscope.testing import torch_snapshot
from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser

V100 = "traces/kineto_resnet50_v100.pt.trace.json.gz"
TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
TPU = "xplane/tpu_inference/2025_12_10_tpu"
MI300 = "xplane/mi300_jax08_gemm/jax08_gemm"
OOM_SNAPSHOT = "built_oom.pickle"
NO_CAPACITY = "oom_snapshot.pickle"  # real (FlexGen, just before an OOM): names no device, so no capacity
# The page each evidence link's tool draws, ready when this shows.
READY = {"steps_ops": "#so-ops tbody tr, #so-no-steps, #so-steps-chart", "memory_profile": "#ts-overview, #mp-summary, .mp",
         "trace_viewer@": "#tv-canvas", "memory_viewer": "#mv-overview"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    root = shared_fixtures / "public_profiles"
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url.rstrip("/")


@pytest.fixture(scope="module")
def snap_dir(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("oomsnap")
    shutil.copy(shared_fixtures / "torch_snapshots" / "Yiyi-philosophy_LLM-inference" / NO_CAPACITY, root / NO_CAPACITY)
    (root / OOM_SNAPSHOT).write_bytes(torch_snapshot.to_pickle(torch_snapshot.expandable_oom_multidevice()))
    return root


@pytest.fixture(scope="module")
def snap_server(tmp_path_factory, snap_dir):
    with profscope_server("serve", str(snap_dir), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url.rstrip("/")


def _api(server: str, **params) -> dict:
    with urlopen(f"{server}/data/plugin/profile/data?{urlencode({'tag': 'summary', **params})}", timeout=300) as res:
        return json.loads(res.read())


def _query(page) -> dict:
    return dict(parse_qsl(urlparse(page.url).query))


def _open(page, server: str, **state):
    page.goto(f"{server}/?{urlencode(state, quote_via=quote)}")
    page.wait_for_selector("#sm-findings, #view .error", timeout=120_000)


def _links(api: dict) -> list[str]:
    return [x["link"] for f in api["findings"] for x in f["evidence"] if x.get("link")]


def _shown(page) -> dict:
    return {"status": page.get_attribute("#sm-status", "data-status"),
            "findings": page.eval_on_selector_all(".sm-finding", "fs => fs.map((f) => f.dataset.key)"),
            "links": page.eval_on_selector_all(".sm-finding a.sm-open", "as => as.map((a) => a.getAttribute('href'))")}


def _keys(api: dict) -> list[str]:
    return [f"{f['id']}@{f['host']}" if f.get("host") else f["id"] for f in api["findings"]]


def _follow(page, link: str) -> None:
    """Click the evidence link ``link``: the URL becomes the link's view, that page draws."""
    page.click(f'.sm-finding a.sm-open[href="{link}"] >> nth=0')
    want = dict(parse_qsl(link.lstrip("?")))
    page.wait_for_selector(READY[want["tool"]], timeout=120_000)
    assert _query(page) == want


def test_a_bare_url_opens_the_summary_whose_links_open_their_view(server, open_page):
    api = _api(server, run=V100)
    assert api["findings"] and _links(api), "the V100 trace has findings with links (its launch-bound P0)"
    page = open_page(server)
    _open(page, server, run=V100)
    assert "tool" not in _query(page)
    assert page.eval_on_selector("#pick-tool", "e => [e.value, e.options[0].text, e.options[1].text]") == ["summary", "Summary", "Overview"]
    assert _shown(page) == {"status": api["status"], "findings": _keys(api), "links": _links(api)}
    assert page.inner_text("#sm-summary") == api["summary"]
    assert page.inner_text("#sm-median .value").endswith("ms")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "summary_v100.png"), full_page=True)
    # The first evidence link: its step in Steps & ops, the step selected; Back returns.
    link = _links(api)[0]
    _follow(page, link)
    assert page.inner_text("#so-summary").count("Selected step") == 1
    page.screenshot(path=str(ARTIFACTS / "summary_v100_evidence.png"), full_page=True)
    page.go_back()
    page.wait_for_selector("#sm-findings")
    # A finding's title selects it (finding= in the URL); the overview is one click away.
    first = page.locator(".sm-finding").first
    first.locator("a.sm-title").click()
    page.wait_for_selector(".sm-finding.selected")
    assert _query(page)["finding"] == _keys(api)[0]
    page.click("#sm-overview-link")
    page.wait_for_selector("#files tbody tr")
    assert _query(page)["tool"] == "overview"


def test_every_host_at_once_and_a_host_drill_down(server, open_page):
    api = _api(server, run=TF_GPU)
    assert api["host"] == "ALL_HOSTS" and len(api["hosts"]) == 2
    page = open_page(server)
    _open(page, server, run=TF_GPU)
    page.wait_for_selector("#sm-hosts")
    assert _query(page) == {"run": TF_GPU, "host": "ALL_HOSTS"}
    assert _shown(page) == {"status": api["status"], "findings": _keys(api), "links": _links(api)}
    rows = page.eval_on_selector_all("#sm-hosts tbody tr", "rs => rs.map((r) => r.dataset.host)")
    assert rows == [h["host"] for h in api["hosts"]]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "summary_tf_gpu_all_hosts.png"), full_page=True)
    host = rows[-1]
    one = _api(server, run=TF_GPU, host=host)
    page.click(f'#sm-hosts tr[data-host="{host}"] a')
    page.wait_for_function("() => !document.querySelector('#sm-hosts') && document.querySelector('#sm-status')")
    assert _query(page) == {"run": TF_GPU, "host": host}
    assert _shown(page) == {"status": one["status"], "findings": _keys(one), "links": _links(one)}


@pytest.mark.parametrize(("run", "name"), [(TPU, "tpu"), (MI300, "mi300")])
def test_accelerator_profiles(server, open_page, run, name):
    api = _api(server, run=run)
    page = open_page(server)
    _open(page, server, run=run)
    assert _shown(page) == {"status": api["status"], "findings": _keys(api), "links": _links(api)}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"summary_{name}.png"), full_page=True)
    for link in dict.fromkeys(_links(api)):  # each distinct view once
        _follow(page, link)
        page.go_back()
        page.wait_for_selector("#sm-findings")


def test_a_snapshot_with_an_oom(snap_server, open_page):
    api = _api(snap_server, run=OOM_SNAPSHOT)
    assert api["metrics"]["memory"]["risk"] == "OOM" and api["findings"][0]["priority"] == "P0"
    page = open_page(snap_server)
    _open(page, snap_server, run=OOM_SNAPSHOT)
    assert _shown(page) == {"status": api["status"], "findings": _keys(api), "links": _links(api)}
    assert page.inner_text("#sm-risk") == "OOM"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "summary_oom_snapshot.png"), full_page=True)
    _follow(page, _links(api)[0])  # the snapshot at its OOM event
    page.screenshot(path=str(ARTIFACTS / "summary_oom_snapshot_evidence.png"), full_page=True)


def test_a_device_memory_for_a_run_that_names_none(snap_server, open_page):
    """A snapshot names no capacity: the memory tile asks for one (the OOM risk page's
    capacity key, sent as device_memory) and the summary is made again against it."""
    page = open_page(snap_server, shown=(404, 400))  # the bad capacity's 400, shown on purpose
    _open(page, snap_server, run=NO_CAPACITY)
    assert _shown(page)["status"] == _api(snap_server, run=NO_CAPACITY)["status"]
    page.fill("#sm-capacity", "12GB")
    page.press("#sm-capacity", "Enter")
    page.wait_for_function("() => location.search.includes('capacity=12GB') && document.querySelector('#sm-status')")
    api = _api(snap_server, run=NO_CAPACITY, device_memory="12GB")
    assert api["metrics"]["memory"]["capacity_bytes"]
    assert _shown(page) == {"status": api["status"], "findings": _keys(api), "links": _links(api)}
    assert page.inner_text("#sm-risk") == api["metrics"]["memory"]["risk"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "summary_snapshot_capacity.png"), full_page=True)
    # A capacity the server cannot read: its message, and a way back.
    page.fill("#sm-capacity", "Z80")
    page.press("#sm-capacity", "Enter")
    page.wait_for_selector("#view .error")
    assert "unknown device memory 'Z80'" in page.inner_text("#view .error")
    page.click("#sm-clear-capacity")
    page.wait_for_selector("#sm-status")
    assert "capacity" not in _query(page)


@pytest.mark.parametrize(("target", "name"), [
    (f"public_profiles/{V100}", "v100"), ("public_profiles/xplane/tf_gpu", "tf_gpu"),
    ("public_profiles/xplane/tpu_inference", "tpu"), ("public_profiles/xplane/mi300_jax08_gemm", "mi300"), (None, "oom_snapshot")])
def test_the_html_file_reads_without_javascript(browser, shared_fixtures, snap_dir, tmp_path, target, name):
    path = snap_dir / OOM_SNAPSHOT if target is None else shared_fixtures / target

    def analyze(*args):
        res = subprocess.run([sys.executable, "-m", "profscope", "analyze", str(path), *args, "--cache-dir", str(tmp_path / "cache"),
                              "--workers", "0"], capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr
        return res.stdout

    summary = json.loads(analyze("--format", "json"))
    out = tmp_path / f"summary_{name}.html"
    analyze("--format", "html", "-o", str(out))
    ctx = browser.new_context(java_script_enabled=False, viewport={"width": 1300, "height": 900})
    asked = []
    ctx.route("**/*", lambda r: (r.continue_() if r.request.url.startswith("file://") else (asked.append(r.request.url), r.abort())))
    try:
        page = ctx.new_page()
        page.goto(out.as_uri())
        assert page.get_attribute("#status", "data-status") == summary["status"]
        assert page.eval_on_selector_all(".finding[data-id]", "fs => fs.map((f) => f.dataset.id)") == [f["id"] for f in summary["findings"]]
        assert page.inner_text("#summary-text") == summary["summary"]
        if summary["metrics"]["memory"]:
            assert page.locator("#memory").count() == 1 and page.locator("section.run").count() >= 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"summary_file_{name}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1300  # long names wrap
    finally:
        ctx.close()
    assert asked == []


def test_the_html_files_links_open_their_view_on_a_server(browser, server, shared_fixtures, tmp_path):
    """``analyze --format html --server URL`` of the log directory that server serves: every
    evidence link is that server's dashboard URL of the link's view, and clicking one opens
    the view (Steps & ops at the step)."""
    def analyze(*args):
        res = subprocess.run([sys.executable, "-m", "profscope", "analyze", str(shared_fixtures / "public_profiles"), "--run", V100,
                              *args, "--cache-dir", str(tmp_path / "cache"), "--workers", "0"],
                             capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr
        return res.stdout

    links = _links(json.loads(analyze("--format", "json")))
    assert links
    out = tmp_path / "summary.html"
    analyze("--format", "html", "-o", str(out), "--server", f"{server}/")
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    allowed = urlparse(server).netloc
    outside = []
    ctx.route("**/*", lambda r: (r.continue_() if r.request.url.startswith("file://") or urlparse(r.request.url).netloc == allowed
                                 else (outside.append(r.request.url), r.abort())))
    try:
        page = ctx.new_page()
        page.goto(out.as_uri())
        hrefs = page.eval_on_selector_all(".finding a.open", "as => as.map((a) => a.getAttribute('href'))")
        assert hrefs == [f"{server}/{link}" for link in links]
        page.click(".finding a.open >> nth=0")
        want = dict(parse_qsl(links[0].lstrip("?")))
        page.wait_for_selector(READY[want["tool"]], timeout=120_000)
        assert _query(page) == want
    finally:
        ctx.close()
    assert outside == []


@pytest.fixture(scope="module")
def mixed_dir(tmp_path_factory, shared_fixtures):
    """One session of two hosts: a TF GPU host's real xplane and the corrupt TPU file."""
    root = tmp_path_factory.mktemp("mixed")
    session = root / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    xplane = shared_fixtures / "public_profiles" / "xplane"
    shutil.copy(xplane / "tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb", session)
    shutil.copy(xplane / "tpu_inference_corrupt/plugins/profile/2025_12_15_tpu/tpu_inference_2.xplane.pb", session / "bad_host.xplane.pb")
    return root


def test_a_corrupt_host_is_refused_and_the_rest_summarised(mixed_dir, tmp_path_factory, open_page, tmp_path):
    with profscope_server("serve", str(mixed_dir), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        url = url.rstrip("/")
        api = _api(url, run="s1")
        assert [x["file"] for x in api["refused"]] == ["plugins/profile/s1/bad_host.xplane.pb"]
        page = open_page(url)
        _open(page, url, run="s1")
        page.wait_for_selector("#sm-hosts")
        note = page.inner_text("#sm-refused")
        assert "plugins/profile/s1/bad_host.xplane.pb" in note and api["refused"][0]["reason"] in note
        assert "cannot be read" in page.inner_text('#sm-hosts tr[data-host="bad_host"]')
        assert _shown(page) == {"status": api["status"], "findings": _keys(api), "links": _links(api)}
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "summary_corrupt_host.png"), full_page=True)
    out = tmp_path / "mixed.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "analyze", str(mixed_dir), "--format", "html", "-o", str(out),
                          "--cache-dir", str(tmp_path / "cache"), "--workers", "0"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0 and "REFUSED plugins/profile/s1/bad_host.xplane.pb" in res.stderr, res.stderr
    assert "bad_host.xplane.pb" in out.read_text().split('id="refused"')[1].split("</section>")[0]
