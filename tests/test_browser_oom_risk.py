"""The OOM risk page and the offline HTML report in Debian's Chromium (Playwright), the
network cut, on the real JAX programs of scripts/make_oom_programs.py and the demo's
PyTorch snapshot. Screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_oom_risk import programs  # noqa: F401  (the session fixture)
from tests.test_oom_risk_verdict import two_batch  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def oom_server(tmp_path_factory, programs):  # noqa: F811
    with profscope_server("serve", str(programs[0]), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _api(server, **params):
    with urlopen(f"{server}data/plugin/profile/data?{urlencode({'tag': 'oom_risk', **params})}", timeout=120) as res:
        return json.loads(res.read())


def _run(server, program):
    with urlopen(f"{server}data/plugin/profile/runs", timeout=30) as res:
        return next(r for r in json.loads(res.read()) if r.startswith(program + "/"))


def _url(server, **state):
    return f"{server}?{urlencode(state, quote_via=quote)}"


def test_page_headline_gauge_treemap_and_finding_links(oom_server, open_page):
    run = _run(oom_server, "remat_off")
    api = _api(oom_server, run=run, device_memory="100MB")
    page = open_page(oom_server)
    page.goto(_url(oom_server, run=run, tool="oom_risk", capacity="100MB"))
    page.wait_for_selector("#oom-gauge .main-svg")
    page.wait_for_selector("#oom-treemap .main-svg")
    assert page.inner_text("#oom-risk") == api["risk"] == "HIGH"
    assert page.locator("#oom-treemap g.slice").count() >= len(api["contributors"])
    assert page.input_value("#oom-capacity") == "100MB"
    assert "95.7 %" in page.inner_text("#oom-util")
    finding = page.locator('[data-finding="activations_dominate"]')
    assert "Activations dominate the peak" in finding.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_risk_page.png"), full_page=True)
    # The finding's link opens the memory viewer at the buffer behind it.
    finding.locator("a.oom-link").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('tool') === 'memory_viewer'")
    q = parse_qs(urlparse(page.url).query)
    assert q["module_name"] == [api["module"]] and q["buffer"][0].isdigit()
    page.wait_for_selector("#mv-card")
    # Back: the OOM risk page again, capacity still in the URL.
    page.go_back()
    page.wait_for_selector("#oom-risk")
    assert parse_qs(urlparse(page.url).query)["capacity"] == ["100MB"]


def test_capacity_input_goes_into_the_url(oom_server, open_page):
    run = _run(oom_server, "undonated")
    page = open_page(oom_server)
    page.goto(_url(oom_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-risk")
    assert page.inner_text("#oom-risk") == "UNKNOWN"
    page.fill("#oom-capacity", "40MB")
    page.press("#oom-capacity", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('capacity') === '40MB'")
    page.wait_for_selector("#oom-gauge .main-svg")
    assert page.inner_text("#oom-risk") == _api(oom_server, run=run, device_memory="40MB")["risk"] == "HIGH"
    assert page.locator('[data-finding="undonated_arguments"]').count() == 1


def test_unknown_device_name_is_a_clear_error_box(oom_server, browser):
    # Its own context: the 400 it provokes is logged by Chromium as a console error, which
    # open_page counts as a failure. The network is cut here too.
    run = _run(oom_server, "undonated")
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    outside = []
    ctx.route("**/*", lambda r: r.continue_() if urlparse(r.request.url).netloc == urlparse(oom_server).netloc
              else (outside.append(r.request.url), r.abort()))
    try:
        page = ctx.new_page()
        page.goto(_url(oom_server, run=run, tool="oom_risk"))
        page.wait_for_selector("#oom-capacity")
        page.fill("#oom-capacity", "Z9000")
        page.click("#oom-apply")
        page.wait_for_selector(".error")
        text = page.inner_text(".error")
        assert "unknown device memory 'Z9000'" in text and "HTTP 400" in text
    finally:
        ctx.close()
    assert not outside


def test_snapshot_run_page(demo_server, open_page):
    page = open_page(demo_server)
    page.goto(_url(demo_server, run="torch_snapshots/flexgen_oom.pickle", tool="oom_risk", host="cuda:0", capacity="12GB"))
    page.wait_for_selector("#oom-treemap .main-svg")
    assert page.inner_text("#oom-risk") == "HIGH"
    assert "init_weight" in page.inner_text("#oom-contributors")
    page.screenshot(path=str(ARTIFACTS / "oom_risk_snapshot.png"), full_page=True)


def test_html_report_offline_shows_its_charts(programs, tmp_path, open_page):  # noqa: F811
    out = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(programs[0]), "--device-memory", "100MB",
                          "-o", str(out), "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    page = open_page(out.as_uri())  # only file:// is let through
    page.goto(out.as_uri())
    assert page.inner_text("#worst-risk") == "HIGH"
    sections = page.locator("section.run")
    assert sections.count() == 5
    for i in range(5):
        s = sections.nth(i)
        gauge = s.locator("svg.gauge rect.peak").bounding_box()
        assert gauge and gauge["width"] > 0
        assert s.locator("svg.treemap rect").count() >= 3
        box = s.locator("svg.treemap").bounding_box()
        assert box and box["width"] > 300 and box["height"] > 200
        assert s.locator("svg.modules rect").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "oom_report.png"), full_page=True)
    sections.nth(0).screenshot(path=str(ARTIFACTS / "oom_report_first_run.png"))


@pytest.fixture(scope="module")
def public_server(shared_fixtures, tmp_path_factory):
    with profscope_server("serve", str(shared_fixtures / "public_profiles"), "--port", "0", "--cache-dir",
                          str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_multi_host_page_shows_every_host_and_why_its_module(public_server, open_page):
    """tf_gpu (two hosts): the run is rated by its worst host, every host is a row that
    opens that host; a JAX ROCm profile says why its module was the one assessed."""
    run = "xplane/tf_gpu/GPU-multi-worker"
    api = _api(public_server, run=run)
    page = open_page(public_server)
    page.goto(_url(public_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-hosts")
    rows = page.locator("#oom-hosts tbody tr")
    assert rows.count() == len(api["hosts"]) == 2
    assert api["host"] in page.inner_text("#oom-host") and "worst" in page.inner_text("#oom-host")
    assert page.inner_text("#oom-risk") == api["risk"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_risk_hosts.png"), full_page=True)
    other = api["hosts"][1]["host"]
    rows.nth(1).locator("a").click()
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('host') === {json.dumps(other)}")
    page.wait_for_selector("#oom-risk")

    run = "xplane/mi300_jax08_gemm/jax08_gemm"
    api = _api(public_server, run=run)
    page.goto(_url(public_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-module")
    assert api["moduleChoice"]["rule"] in page.inner_text("#oom-module")
    assert api["module"] in page.inner_text("#oom-module")


# -- one vocabulary (issue 16): one peak per meaning on every page, units, words ------------

# Query parameters of the data API: a page says what to do in words, never these.
API_NAMES = ("capacity_bytes", "device_memory", "module_name", "memory_id", "threshold_medium", "threshold_high",
             "peak_bytes_in_use", "peakBytes", "capacitySource")


def _get(server, path, **params):
    with urlopen(f"{server}{path.lstrip('/')}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _page_text(page) -> str:
    """What a reader sees: the text and every tooltip."""
    return page.evaluate("() => document.body.innerText + '\\n' + [...document.querySelectorAll('[title]')].map(e => e.title).join('\\n')")


def _usage(page) -> dict:
    """The OOM page's peaks table: {label: (measure, bytes, text)}."""
    return {r[0]: (r[1], int(r[2]), r[3]) for r in page.evaluate("""() => [...document.querySelectorAll('#oom-usage tr[data-measure]')]
        .filter(tr => tr.dataset.measure).map(tr => [tr.cells[0].innerText, tr.dataset.measure, tr.cells[1].dataset.bytes, tr.cells[1].innerText])""")}


def _mp_tile(page, key):
    return page.evaluate("""k => { const t = document.querySelector(`#mp-summary .mp-tile[data-key=${k}]`);
        return t ? [t.querySelector('.label').innerText, Number(t.querySelector('.value').dataset.value), t.querySelector('.value').innerText] : null; }""", key)


def _report(*args, cache):
    res = subprocess.run([sys.executable, "-m", "profscope", "report", "--demo", *args, "--cache-dir", str(cache)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("program", ["mlp_train", "leak", "transformer_train"])
def test_one_peak_per_meaning_on_every_page(demo_server, open_page, tmp_path, program):
    """One PyTorch trace: its "peak allocated" and its "peak of category total" are the same
    bytes and the same text on the memory profile page, the OOM risk page and the report,
    and the OOM headline names which of them rates the run. (On CPU the trace's Total
    Allocated misses the parameters and optimizer state made before the profiler started,
    which the memory timeline counts: mlp_train's 845.1 KiB vs 1.81 MiB were once both
    printed as its "peak".)"""
    run = f"torch/{program}.pt.trace.json.gz"
    mp = _get(demo_server, "/api/memory_profile", run=run)
    api = _api(demo_server, run=run)
    s, cat = mp["devices"][0]["summary"], mp["categoryTimeline"]
    by_measure = {u["measure"]: u for u in api["usage"]}
    assert by_measure["peak allocated"]["bytes"] == s["peakAllocatedBytes"]
    assert by_measure["peak of category total"]["bytes"] == cat["peakBytes"]
    assert api["peakMeasure"] == max(api["usage"], key=lambda u: u["bytes"])["measure"]
    assert api["peakBytes"] == by_measure[api["peakMeasure"]]["bytes"]

    page = open_page(demo_server)
    page.goto(_url(demo_server, run=run, tool="memory_profile"))
    page.wait_for_selector("#mp-summary")
    alloc_tile, cat_tile = _mp_tile(page, "peakAllocated"), _mp_tile(page, "peakCategoryTotal")
    assert alloc_tile[:2] == ["Peak allocated", s["peakAllocatedBytes"]]
    assert cat_tile[:2] == ["Peak of category total", cat["peakBytes"]]

    page.goto(_url(demo_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-usage")
    usage = _usage(page)
    shown = {m: (b, t) for m, b, t in usage.values()}
    assert shown["peak allocated"] == (alloc_tile[1], alloc_tile[2])
    assert shown["peak of category total"] == (cat_tile[1], cat_tile[2])
    head = page.inner_text("#oom-peak .label"), page.inner_text("#oom-peak .value")
    assert head == (api["peakMeasure"], shown[api["peakMeasure"]][1])

    body = json.loads(_report("--run", run, "--format", "json", cache=tmp_path / "cache"))
    (r,) = body["reports"]
    assert {u["measure"]: u["bytes"] for u in r["usage"]} == {m: b for m, (b, _) in shown.items()}
    html = tmp_path / "report.html"
    html.write_text(_report("--run", run, cache=tmp_path / "cache"))
    page = open_page(html.as_uri())  # only file:// is let through
    page.goto(html.as_uri())
    rows = page.evaluate("""() => [...document.querySelectorAll('table.usage tr')].map(tr => [tr.dataset.measure, Number(tr.cells[1].dataset.bytes), tr.cells[1].innerText])""")
    assert {m: (b, t) for m, b, t in rows} == shown
    assert page.inner_text("table.summary td.peak .measure") == api["peakMeasure"]
    assert page.inner_text("section.run .kv .peak dt") == api["peakMeasure"]


def test_snapshot_and_profile_peaks_match_their_pages(demo_server, open_page):
    """A snapshot's "peak allocated" on the OOM page is the snapshot page's peak of live
    bytes, its "peak reserved" the allocator's segments; an XProf allocator's two peaks
    (window, lifetime) are the memory profile's tiles of the same names."""
    run = "torch_snapshots/flexgen_1.3b.pickle"
    ov = _get(demo_server, "/api/snapshot/overview", run=run, host="cuda:0")
    api = _api(demo_server, run=run, host="cuda:0")
    by = {u["measure"]: u["bytes"] for u in api["usage"]}
    assert by["peak allocated"] == ov["summary"]["peak"]["bytes"]
    assert by["peak reserved"] >= by["peak allocated"] and api["peakMeasure"] == "peak reserved"
    page = open_page(demo_server)
    page.goto(_url(demo_server, run=run, tool="oom_risk", host="cuda:0"))
    page.wait_for_selector("#oom-usage")
    assert {m: b for m, b, _ in _usage(page).values()} == by
    assert page.inner_text("#oom-peak .label") == "peak reserved"

    run = next(r["name"] for r in _get(demo_server, "/api/runs")["runs"] if "tf_bfc" in r["name"])
    api = _api(demo_server, run=run)
    page.goto(_url(demo_server, run=run, tool="memory_profile"))
    page.wait_for_selector("#mp-summary")
    window, lifetime = _mp_tile(page, "peak"), _mp_tile(page, "lifetimePeak")
    assert window[0] == "Peak allocated in window" and lifetime[0] == "Lifetime peak allocated"
    page.goto(_url(demo_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-usage")
    usage = {label.split(" of ")[0]: (b, t) for label, (_, b, t) in _usage(page).items()}
    assert usage["peak allocated"] == (window[1], window[2])
    assert usage["lifetime peak allocated"] == (lifetime[1], lifetime[2])
    assert page.inner_text("#oom-peak .label") == api["peakMeasure"] == "lifetime peak allocated"


def test_gauge_reads_the_cards_unit(demo_server, open_page):
    """The gauge prints the peak in the unit and digits of its card (not "11,296.0 MiB"
    next to "11.0 GiB"), with and without a capacity."""
    page = open_page(demo_server)
    for run, host in (("torch_snapshots/flexgen_oom.pickle", "cuda:0"), ("torch/leak.pt.trace.json.gz", None)):
        page.goto(_url(demo_server, run=run, tool="oom_risk", **({"host": host} if host else {})))
        page.wait_for_selector("#oom-gauge .main-svg")
        card = page.inner_text("#oom-peak .value")
        page.wait_for_function("() => document.querySelector('#oom-gauge text.number')")
        assert page.text_content("#oom-gauge text.number") == card, run
    page.goto(_url(demo_server, run="torch_snapshots/flexgen_oom.pickle", tool="oom_risk", host="cuda:0", capacity="12GB"))
    page.wait_for_selector("#oom-gauge .main-svg")
    title = page.inner_text("#oom-gauge-label")  # the gauge's label, above it (Plotly's title cut it off)
    assert page.inner_text("#oom-peak .value") in title and page.inner_text("#oom-peak .label") in title
    assert page.inner_text("#oom-cap .value") in title


@pytest.mark.slow  # a long walk: 10 s on 2 cores
def test_pages_name_no_api_parameter(demo_server, open_page, browser):
    """The OOM page (capacity unknown, a bad capacity, a finding), the memory profile pages
    and the report say what to do in words, never with the data API's parameter names."""
    page = open_page(demo_server)
    views = [dict(run="torch/leak.pt.trace.json.gz", tool="oom_risk"), dict(run="mlp/2026_11_29_19_47_08", tool="oom_risk"),
             dict(run="torch_snapshots/flexgen_1.3b.pickle", tool="oom_risk", host="cuda:0"),
             dict(run="torch/leak.pt.trace.json.gz", tool="memory_profile")]
    tf = next(r["name"] for r in _get(demo_server, "/api/runs")["runs"] if "tf_bfc" in r["name"])
    views += [dict(run=tf, tool="memory_profile"), dict(run=tf, tool="oom_risk")]
    for state in views:
        page.goto(_url(demo_server, **state))
        page.wait_for_selector("#oom-usage, #mp-breakdown-table")
        text = _page_text(page)
        assert not [n for n in API_NAMES if n in text], (state, [n for n in API_NAMES if n in text])
    page.goto(_url(demo_server, run="torch/leak.pt.trace.json.gz", tool="oom_risk"))
    page.wait_for_selector("#oom-cap")
    assert "enter the device's memory above" in page.inner_text("#oom-cap")
    # A capacity of 0 bytes: the error says "device memory", not a parameter. Its own
    # context: Chromium logs the 400 as a console error, which open_page counts as one.
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.route("**/*", lambda r: r.continue_() if urlparse(r.request.url).netloc == urlparse(demo_server).netloc else r.abort())
    try:
        page = ctx.new_page()
        page.goto(_url(demo_server, run="torch/leak.pt.trace.json.gz", tool="oom_risk", capacity="0"))
        page.wait_for_selector(".error")
        text = _page_text(page)
        assert "device memory must be positive" in text and not [n for n in API_NAMES if n in text]
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def two_batch_server(tmp_path_factory, two_batch):  # noqa: F811
    with profscope_server("serve", str(two_batch[0]), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_two_batch_run_reads_oom_on_the_big_step(two_batch_server, open_page):
    """Issue 33: the headline rates the worst step module (train_step_big, batch 1024),
    not the one that ran most, and names every module over capacity."""
    run = _run(two_batch_server, "two_batch")
    api = _api(two_batch_server, run=run, device_memory="6MiB")
    page = open_page(two_batch_server)
    page.goto(_url(two_batch_server, run=run, tool="oom_risk", capacity="6MiB"))
    page.wait_for_selector("#oom-treemap .main-svg")
    assert page.inner_text("#oom-risk") == api["risk"] == "OOM"
    assert api["module"] in page.inner_text("#oom-module") and api["module"].startswith("jit_train_step_big(")
    assert "worst step module" in page.inner_text("#oom-module")
    assert page.inner_text("#oom-over").startswith("Over capacity (1): " + api["module"])
    assert "training step" in page.inner_text("#oom-modules")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_risk_two_batch.png"), full_page=True)


def test_tpu_contributors_are_the_buffers_at_the_peak(public_server, open_page):
    """The TPU profile's allocator peak is one ``stack`` region: the contributors are the
    memory viewer's buffers at the compiler's peak, and the page says so."""
    run = "xplane/tpu_inference/2025_12_10_tpu"
    api = _api(public_server, run=run)
    page = open_page(public_server)
    page.goto(_url(public_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-treemap .main-svg")
    assert "no breakdown" in page.inner_text("#oom-contributors-note")
    table = page.inner_text("#oom-contributors")
    assert api["contributors"][0]["label"] in table and "Unknown" not in table
    page.screenshot(path=str(ARTIFACTS / "oom_risk_tpu.png"), full_page=True)
    page.goto(_url(public_server, run="traces/kineto_resnet50_v100.pt.trace.json.gz", tool="oom_risk"))
    page.wait_for_selector("#oom-contributors-note")
    assert "no addresses" in page.inner_text("#oom-contributors-note")


def test_text_only_dump_memory_viewer_shows_the_live_range_peak(two_batch_server, open_page):
    """A text-only dump (buffer assignment + live ranges): the memory viewer draws the heap
    over program order and names the peak the OOM risk rates (issue 33)."""
    run = "two_batch_text_dump"
    api = _api(two_batch_server, run=run, device_memory="6MiB")
    page = open_page(two_batch_server)
    page.goto(_url(two_batch_server, run=run, tool="memory_viewer", module_name=api["module"]))
    page.wait_for_selector("#mv-live-heap .main-svg")
    assert "cannot be shown" not in page.inner_text("#mv-text-only-note")
    assert page.get_attribute("#mv-live-peak .value", "title") == f"{api['peakBytes']:,} bytes"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_text_only_live_range.png"), full_page=True)
