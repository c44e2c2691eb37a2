"""The memory profile page end to end: the real server, Debian's Chromium driven by
Playwright, network cut, no mocks.

Two real inputs: the TF CPU profile with BFC allocator events from ``shared/fixtures``
(XProf's memory profile JSON plus profscope's extras) and the bundled demo's PyTorch
profiler traces (profscope's torch payload). Checks what an engineer chasing a leak or an
OOM relies on: the summary's numbers are the JSON API's; hovering the timeline shows the
event (op, sizes, region, dtype, shape); clicking selects it into the URL; the breakdown
table filters (``q=`` in the URL) and sorts; the copied link reopens the same view in a
fresh browser; leak hints come with their evidence. Screenshots go to test-artifacts/."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser

TF_PROFILE = "tf_bfc_cpu/profile"


@pytest.fixture(scope="module")
def tf_server(tmp_path_factory, shared_fixtures):
    """A log directory holding a copy of the TF fixture profile (real allocator events)."""
    root = tmp_path_factory.mktemp("mplog")
    shutil.copytree(shared_fixtures / TF_PROFILE, root / "tf_bfc")
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _view_url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _run(server: str, kind: str, contains: str = "") -> dict:
    runs = _get_json(server, "/api/runs")["runs"]
    return next(r for r in runs if r["kind"] == kind and contains in r["name"])


def _data(server: str, run: dict) -> dict:
    """What the page draws: a PyTorch trace's profscope payload (/api/memory_profile),
    else XProf's memory profile (the data API)."""
    if run["kind"] == "chrome_trace":
        return _get_json(server, "/api/memory_profile", run=run["name"])
    params = {"run": run["name"], "tag": "memory_profile"}
    if run["hosts"]:
        params["host"] = run["hosts"][0]
    return _get_json(server, "/data/plugin/profile/data", **params)


def _wait_for_page(page):
    page.wait_for_selector("#mp-summary")
    page.wait_for_selector("#mp-timeline .main-svg")
    page.wait_for_selector("#mp-breakdown-table")


def _tile(page, key: str) -> str:
    return page.get_attribute(f"#mp-summary .mp-tile[data-key={key}] .value", "data-value")


def _point(page, x: float, y_fraction: float = 0.5) -> tuple[float, float]:
    """Screen position of time ``x`` (ms) on the timeline, from its axis range."""
    page.locator("#mp-timeline").scroll_into_view_if_needed()
    return tuple(page.evaluate("""([x, f]) => {
        const div = document.getElementById('mp-timeline');
        const box = div.querySelector('.nsewdrag').getBoundingClientRect();
        const [x0, x1] = div.layout.xaxis.range;
        return [box.left + box.width * (x - x0) / (x1 - x0), box.top + box.height * f];
    }""", [x, y_fraction]))


def _fmt(page, n) -> str:
    return page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", n)


def _ps_ms(ps) -> float:
    return int(ps) / 1e9


def test_xprof_summary_matches_the_api(open_page, tf_server):
    ARTIFACTS.mkdir(exist_ok=True)
    run = _run(tf_server, "profile")
    data = _data(tf_server, run)
    memory_id = data["memoryIds"][0]
    allocator = data["memoryProfilePerAllocator"][memory_id]
    summary = allocator["profileSummary"]
    peak = summary["peakStats"]
    extras = data["profscope"]["allocators"][memory_id]["summary"]

    page = open_page(tf_server)
    page.goto(_view_url(tf_server, run=run["name"], tool="memory_profile", host=run["hosts"][0]))
    _wait_for_page(page)
    assert page.input_value("#mp-allocator") == memory_id

    # Every number is the API's: XProf's fields and profscope's summary agree and the page shows them.
    assert int(_tile(page, "capacity")) == int(summary["memoryCapacity"]) == extras["capacityBytes"]
    assert int(_tile(page, "peak")) == int(peak["stackReservedBytes"]) + int(peak["heapAllocatedBytes"]) == extras["peakBytes"]
    assert int(_tile(page, "lifetimePeak")) == extras["lifetimePeakBytes"]
    assert float(_tile(page, "peakTime")) == pytest.approx(_ps_ms(summary["peakStatsTimePs"]))
    assert int(_tile(page, "stack")) == int(peak["stackReservedBytes"])
    assert int(_tile(page, "heap")) == int(peak["heapAllocatedBytes"])
    assert int(_tile(page, "free")) == int(peak["freeMemoryBytes"])
    assert float(_tile(page, "fragmentation")) == pytest.approx(peak["fragmentation"])
    balance = page.locator("#mp-balance")
    assert int(balance.get_attribute("data-allocations")) == extras["allocations"]
    assert int(balance.get_attribute("data-deallocations")) == extras["deallocations"]
    assert "leak" in balance.inner_text()
    assert page.inner_text("#mp-summary .mp-peak-value") == _fmt(page, extras["peakBytes"])

    # The breakdown has one row per XProf row, XProf's synthetic row included.
    rows = page.locator("#mp-breakdown-table tr.mp-row")
    assert rows.count() == len(allocator["activeAllocations"])
    assert page.locator("#mp-breakdown-table tr.synthetic", has_text="unused preallocated device memory").count() == 1

    # The peak is marked on the timeline; the card shows the peak event until something is hovered.
    assert page.evaluate("document.getElementById('mp-timeline').layout.shapes.some(s => s.name === 'peak')")
    assert page.get_attribute("#mp-event", "data-mode") == "peak"
    peak_op = next(s["activityMetadata"]["tfOpName"] for s in allocator["sampledTimelineSnapshots"]
                   if s["timeOffsetPs"] == summary["peakStatsTimePs"])
    assert peak_op in page.inner_text("#mp-event .mp-card-name")

    # Leak hints with their evidence: the never-freed allocations, the heap at each step.
    hints = data["profscope"]["allocators"][memory_id]["leakHints"]
    for hint in hints["hints"]:
        fired = page.locator(f"#mp-leaks details.mp-check[data-kind={hint['kind']}]")
        assert fired.get_attribute("open") is not None and hint["message"] in fired.inner_text()
    never = page.locator("#mp-leaks details.mp-check", has_text="never freed")
    assert never.locator("tbody tr").count() == len(hints["neverFreed"]["largest"])
    page.wait_for_selector("#mp-heap-growth .main-svg")
    page.screenshot(path=str(ARTIFACTS / "memory_profile.png"), full_page=True)


def test_xprof_hover_select_filter_sort_and_share(open_page, tf_server):
    run = _run(tf_server, "profile")
    data = _data(tf_server, run)
    memory_id = data["memoryIds"][0]
    allocator = data["memoryProfilePerAllocator"][memory_id]
    snaps = allocator["sampledTimelineSnapshots"]

    page = open_page(tf_server)
    page.goto(_view_url(tf_server, run=run["name"], tool="memory_profile", host=run["hosts"][0], memory_id=memory_id))
    _wait_for_page(page)

    # Hover an allocation: the card shows its op, sizes, region, dtype and shape.
    target = next(i for i, s in enumerate(snaps)
                  if s["activityMetadata"]["memoryActivity"] == "ALLOCATION" and s["activityMetadata"]["tensorShape"]
                  and int(s["activityMetadata"]["allocationBytes"]) > 100_000)
    x, y = _point(page, _ps_ms(snaps[target]["timeOffsetPs"]))
    page.mouse.move(x, y, steps=4)
    page.wait_for_function("document.querySelector('#mp-event').dataset.mode === 'hover'")
    shown = int(page.get_attribute("#mp-event", "data-index"))
    assert abs(_ps_ms(snaps[shown]["timeOffsetPs"]) - _ps_ms(snaps[target]["timeOffsetPs"])) < 0.05  # within a pixel or two
    meta = snaps[shown]["activityMetadata"]
    card = page.inner_text("#mp-event")
    assert meta["tfOpName"] in card
    for field in ("regionType", "tensorShape"):
        assert meta[field] in card
    if meta["memoryActivity"] in ("ALLOCATION", "DEALLOCATION"):
        assert _fmt(page, int(meta["allocationBytes"])) in card and _fmt(page, int(meta["requestedBytes"])) in card
    # Plotly's own hover label says it too.
    assert meta["tfOpName"] in page.text_content("#mp-timeline .hoverlayer")
    page.screenshot(path=str(ARTIFACTS / "memory_profile_hover.png"))

    # Click: the time goes into the URL and the event stays on the card.
    page.mouse.click(x, y)
    page.wait_for_function("new URLSearchParams(location.search).get('t') !== null")
    page.mouse.move(5, 300)
    page.wait_for_selector("#mp-event.selected")
    t = float(parse_qs(urlparse(page.url).query)["t"][0])
    assert t == pytest.approx(_ps_ms(snaps[shown]["timeOffsetPs"]), abs=1e-6)
    assert page.get_attribute("#mp-event", "data-index") == str(shown)
    assert page.evaluate("document.getElementById('mp-timeline').layout.shapes.some(s => s.name === 'selected')")

    # Filter the breakdown: fewer rows, q= in the URL.
    rows = page.locator("#mp-breakdown-table tr.mp-row")
    total = rows.count()
    page.fill("#mp-filter", "float")
    page.wait_for_function("new URLSearchParams(location.search).get('q') === 'float'")
    filtered = rows.count()
    assert 0 < filtered < total
    assert page.inner_text("#mp-count").startswith(f"{filtered} of {total}")
    assert all("float" in r for r in rows.all_inner_texts())

    # Sort by allocation size: descending, then ascending.
    page.click("#mp-breakdown-table th[data-key=allocation]")
    assert page.get_attribute("#mp-breakdown-table th[data-key=allocation]", "aria-sort") == "descending"
    sizes = [int(v) for v in page.eval_on_selector_all("#mp-breakdown-table tr.mp-row td:nth-child(2)", "tds => tds.map(td => td.dataset.v)")]
    assert sizes == sorted(sizes, reverse=True)
    page.click("#mp-breakdown-table th[data-key=allocation]")
    sizes = [int(v) for v in page.eval_on_selector_all("#mp-breakdown-table tr.mp-row td:nth-child(2)", "tds => tds.map(td => td.dataset.v)")]
    assert sizes == sorted(sizes)
    page.screenshot(path=str(ARTIFACTS / "memory_profile_filtered.png"), full_page=True)
    link = page.url

    # The link alone, in a fresh browser profile: same allocator, event, filter.
    other = open_page(tf_server)
    other.goto(link)
    _wait_for_page(other)
    other.wait_for_selector("#mp-event.selected")
    assert other.get_attribute("#mp-event", "data-index") == str(shown)
    assert other.input_value("#mp-filter") == "float"
    assert other.locator("#mp-breakdown-table tr.mp-row").count() == filtered
    assert other.input_value("#mp-allocator") == memory_id
    other.screenshot(path=str(ARTIFACTS / "memory_profile_shared_link.png"), full_page=True)

    # Back: the previous view (no event selected); clear the filter from the box.
    page.go_back()
    page.wait_for_function("new URLSearchParams(location.search).get('t') === null")
    page.wait_for_function("document.querySelector('#mp-event').dataset.mode === 'peak'")
    page.fill("#mp-filter", "")
    page.wait_for_function("new URLSearchParams(location.search).get('q') === null")
    assert rows.count() == total


def test_unknown_allocator_says_so(open_page, tf_server):
    run = _run(tf_server, "profile")
    page = open_page(tf_server)
    page.goto(_view_url(tf_server, run=run["name"], tool="memory_profile", memory_id="no_such_allocator"))
    _wait_for_page(page)
    assert "no_such_allocator" in page.inner_text("#mp-unknown-id")


def test_torch_trace_page(open_page, demo_server, demo_logdir):
    expected = json.loads((demo_logdir / "torch" / "expected.json").read_text())
    run = _run(demo_server, "chrome_trace", "leak")
    data = _data(demo_server, run)
    device = data["devices"][0]
    summary = device["summary"]
    assert summary["peakAllocatedBytes"] == expected["programs"]["leak"]["peakTotalAllocated"]

    page = open_page(demo_server)
    page.goto(_view_url(demo_server, run=run["name"], tool="memory_profile"))
    _wait_for_page(page)
    assert page.input_value("#mp-allocator") == device["device"]
    assert int(_tile(page, "peakAllocated")) == summary["peakAllocatedBytes"]
    assert int(_tile(page, "liveAtEnd")) == summary["liveBytesAtEnd"]
    balance = page.locator("#mp-balance")
    assert int(balance.get_attribute("data-allocations")) == summary["numAllocations"] == expected["programs"]["leak"]["allocations"]
    assert int(balance.get_attribute("data-deallocations")) == summary["numDeallocations"] == expected["programs"]["leak"]["frees"]

    # The leak is found and shown with its evidence (a chart of live bytes per step).
    growth = next(h for h in device["leakHints"] if h["kind"] == "stepGrowth")
    check = page.locator("#mp-leaks details.mp-check[data-kind=stepGrowth]")
    assert check.get_attribute("data-status") == "warning" and growth["message"] in check.inner_text()
    assert "warning" in page.inner_text("#mp-leak-verdict")
    page.wait_for_selector("#mp-leaks .mp-mini-chart .main-svg")
    assert page.locator("#mp-steps-table tbody tr").count() == len(device["steps"])

    # The category chart from export_memory_timeline, and the breakdown by op and module.
    if data.get("categoryTimeline"):
        page.wait_for_selector("#mp-categories .main-svg")
    by_op = device["breakdownAtPeak"]["byOp"]
    assert page.locator("#mp-by-op tbody tr").count() == min(12, len(by_op))
    assert page.locator("#mp-breakdown-table tr.mp-row").count() == len(device["breakdownAtPeak"]["allocations"])

    # Clicking an op filters the allocations to it.
    top_op = by_op[0]["op"]
    page.locator("#mp-by-op tbody tr").first.click()
    page.wait_for_function(f"new URLSearchParams(location.search).get('q') === {top_op!r}")
    assert all(top_op in r for r in page.locator("#mp-breakdown-table tr.mp-row").all_inner_texts())

    # Hover the peak: the card names the op that allocated there.
    tl = device["timeline"]
    peak_i = tl["allocatedBytes"].index(summary["peakAllocatedBytes"])
    x, y = _point(page, tl["timeMs"][peak_i], 0.6)
    page.mouse.move(x, y, steps=4)
    page.wait_for_function("document.querySelector('#mp-event').dataset.mode === 'hover'")
    # The index and the card's text read in one go: a later hover event of the same move
    # may redraw the card between two separate reads (seen once: the card named the next
    # point's op, aten::sum, while the index read before was still the peak's).
    shown, card = page.evaluate("() => { const e = document.querySelector('#mp-event'); "
                                "return [Number(e.dataset.index), e.innerText]; }")
    op_index = tl["op"][shown]
    if op_index >= 0:
        assert tl["strings"][op_index] in card
    page.screenshot(path=str(ARTIFACTS / "memory_profile_torch.png"), full_page=True)


# -- one vocabulary: binary units, labelled peaks, one time axis (issue 16) ------------------

# A byte tick as lib/format.js byteTicks writes it: "0", "800 KiB", "1.5 MiB", "−64 KiB".
BYTE_TICK = r"^(0|−?\d[\d,]*(\.\d+)? (B|KiB|MiB|GiB|TiB))$"
Y_TICKS = """sel => [...document.querySelectorAll(sel + ' .yaxislayer-above .ytick text')].map(t => t.textContent)"""


def _byte_ticks(page, sel: str) -> list[str]:
    ticks = page.evaluate(Y_TICKS, sel)
    assert ticks, f"no y ticks drawn on {sel}"
    bad = [t for t in ticks if not re.match(BYTE_TICK, t)]
    assert not bad, f"{sel}: ticks not in binary units: {bad} (all: {ticks})"
    return ticks


def test_byte_axes_say_binary_units(open_page, demo_server):
    """Every byte axis of both payloads is labelled KiB/MiB/GiB, never Plotly's SI "7.00G"
    or a bare number under a unit title, before and after the y-scale toggle."""
    page = open_page(demo_server)
    page.goto(_view_url(demo_server, run=_run(demo_server, "chrome_trace", "mlp_train")["name"], tool="memory_profile"))
    _wait_for_page(page)
    page.wait_for_selector("#mp-categories .main-svg")
    timeline, categories = _byte_ticks(page, "#mp-timeline"), _byte_ticks(page, "#mp-categories")
    # The timeline tops out under 1 MiB (peak allocated 845.1 KiB), the categories above it.
    assert any(t.endswith("KiB") for t in timeline) and any(t.endswith("MiB") for t in categories)
    for sel in ("#mp-timeline", "#mp-categories"):
        assert page.evaluate(f"document.querySelector('{sel}').layout.yaxis.tickmode") == "array"

    run = _run(demo_server, "profile", "tf_bfc")
    page.goto(_view_url(demo_server, run=run["name"], tool="memory_profile"))
    _wait_for_page(page)
    use = _byte_ticks(page, "#mp-timeline")
    page.click(".mp-seg button[data-scale=capacity]")
    page.wait_for_function("document.getElementById('mp-timeline').layout.yaxis.range[1] > 500")  # MiB: the 1 GiB capacity
    full = _byte_ticks(page, "#mp-timeline")
    assert use != full and any(t.endswith("GiB") or t.endswith("MiB") for t in full)
    page.wait_for_selector("#mp-heap-growth .main-svg")
    _byte_ticks(page, "#mp-heap-growth")


def _x_geometry(page, sel: str) -> dict:
    return page.evaluate("""sel => {
        const div = document.querySelector(sel), xa = div._fullLayout.xaxis;
        const box = div.getBoundingClientRect();
        return { range: div.layout.xaxis.range.slice(), left: box.left + xa._offset, width: xa._length };
    }""", sel)


def test_torch_charts_share_one_time_axis(open_page, demo_server):
    """The allocated/reserved timeline and the memory-timeline categories of one trace: the
    same x range, the same plot area left and width (a time sits at one x on both), and a
    zoom in either zooms the other; double-click resets both to the same range."""
    run = _run(demo_server, "chrome_trace", "mlp_train")
    data = _data(demo_server, run)
    assert data["categoryTimeline"]["aligned"]
    page = open_page(demo_server)
    page.goto(_view_url(demo_server, run=run["name"], tool="memory_profile"))
    _wait_for_page(page)
    page.wait_for_selector("#mp-categories .main-svg")
    a, b = _x_geometry(page, "#mp-timeline"), _x_geometry(page, "#mp-categories")
    assert a == b, (a, b)
    # The range covers both series: the trace's memory events and the timeline's samples.
    times = data["devices"][0]["timeline"]["timeMs"] + data["categoryTimeline"]["timeMs"]
    assert a["range"][0] <= min(times) and a["range"][1] >= max(times)
    initial = a["range"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#mp-timeline").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "memory_profile_torch_axes.png"), full_page=True)

    def drag(sel, f0, f1):
        page.locator(sel).scroll_into_view_if_needed()
        box = page.locator(f"{sel} .nsewdrag").first.bounding_box()
        y = box["y"] + box["height"] * 0.5
        page.mouse.move(box["x"] + box["width"] * f0, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * f1, y, steps=8)
        page.mouse.up()

    # A drag-zoom on the categories chart: the timeline follows.
    drag("#mp-categories", 0.2, 0.5)
    page.wait_for_function("""() => {
        const r = document.getElementById('mp-timeline').layout.xaxis.range, s = document.getElementById('mp-categories').layout.xaxis.range;
        return r[0] === s[0] && r[1] === s[1] && r[1] - r[0] < 0.5 * (%f - %f);
    }""" % (initial[1], initial[0]))
    a, b = _x_geometry(page, "#mp-timeline"), _x_geometry(page, "#mp-categories")
    assert a == b and a["range"] != initial
    # A drag-zoom on the timeline: the categories follow.
    drag("#mp-timeline", 0.3, 0.6)
    page.wait_for_function("""r0 => {
        const r = document.getElementById('mp-timeline').layout.xaxis.range, s = document.getElementById('mp-categories').layout.xaxis.range;
        return r[0] === s[0] && r[1] === s[1] && r[0] > r0;
    }""", arg=a["range"][0])
    # Double-click resets both, to the same shared range.
    box = page.locator("#mp-timeline .nsewdrag").first.bounding_box()
    page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("""r => ['mp-timeline', 'mp-categories'].every(id => {
        const x = document.getElementById(id).layout.xaxis.range; return Math.abs(x[0] - r[0]) < 1e-9 && Math.abs(x[1] - r[1]) < 1e-9; })""", arg=initial)


def test_torch_peaks_are_labelled_with_what_they_count(open_page, demo_server):
    """A CPU trace's Total Allocated misses the tensors made before the profiler started;
    the memory timeline counts them: two peaks, each under its own name, none bare."""
    run = _run(demo_server, "chrome_trace", "mlp_train")
    data = _data(demo_server, run)
    s, cat = data["devices"][0]["summary"], data["categoryTimeline"]
    assert cat["peakBytes"] > s["peakAllocatedBytes"]  # 1.81 MiB vs 845.1 KiB
    page = open_page(demo_server)
    page.goto(_view_url(demo_server, run=run["name"], tool="memory_profile"))
    _wait_for_page(page)
    page.wait_for_selector("#mp-categories .main-svg")
    label = lambda key: page.inner_text(f"#mp-summary .mp-tile[data-key={key}] .label")  # noqa: E731
    assert label("peakAllocated") == "Peak allocated" and int(_tile(page, "peakAllocated")) == s["peakAllocatedBytes"]
    assert label("peakCategoryTotal") == "Peak of category total" and int(_tile(page, "peakCategoryTotal")) == cat["peakBytes"]
    # The peak marks on the charts say which peak they are.
    marks = page.evaluate("""() => ['mp-timeline', 'mp-categories'].map(id =>
        document.getElementById(id).data.filter(t => t.name === 'peak').map(t => t.text[0]))""")
    assert marks == [[f"peak allocated {_fmt(page, s['peakAllocatedBytes'])}"], [f"peak of category total {_fmt(page, cat['peakBytes'])}"]]
    assert "At the peak of category total" in page.inner_text("#mp-category-peak")


# -- a GPU trace opens on its GPU (issue 31) ----------------------------------------------

# Real PyTorch GPU traces whose CPU device holds next to nothing: the H100 BERT trace's CPU
# peaks at 16 B, the 2021 V100 ResNet-50 one's at 55.1 MiB beside CUDA:0's 2.60 GiB.
GPU_TRACES = ("tracelens_h100_bert_small.trace.json.gz", "kineto_resnet50_v100.pt.trace.json.gz")


@pytest.fixture(scope="module")
def gpu_trace_server(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("gpu_traces")
    for name in GPU_TRACES:
        shutil.copyfile(shared_fixtures / "public_profiles" / "traces" / name, root / name)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


@pytest.mark.parametrize("name", GPU_TRACES)
def test_gpu_trace_opens_on_the_device_with_the_highest_peak(open_page, gpu_trace_server, shared_fixtures, name):
    data = _get_json(gpu_trace_server, "/api/memory_profile", run=name)
    peaks = {d["device"]: d["summary"]["peakAllocatedBytes"] for d in data["devices"]}
    top = max(peaks, key=peaks.get)
    assert top == "CUDA:0" and set(peaks) == {"CPU", "CUDA:0"}
    assert data["devices"][0]["device"] == top  # the API's first device, what a client opens

    page = open_page(gpu_trace_server)
    page.goto(_view_url(gpu_trace_server, run=name, tool="memory_profile"))
    page.wait_for_selector("#mp-summary")
    page.wait_for_selector("#mp-timeline .main-svg")
    assert page.input_value("#mp-allocator") == top
    assert int(_tile(page, "peakAllocated")) == peaks[top]
    assert page.inner_text("#mp-summary .mp-peak-value") == _fmt(page, peaks[top])
    reserved = page.inner_text("#mp-summary .mp-tile[data-key=peakReserved]")
    cuda = next(d for d in data["devices"] if d["device"] == top)
    with gzip.open(shared_fixtures / "public_profiles" / "traces" / name) as f:
        recorded = any("Total Reserved" in e["args"] for e in json.load(f)["traceEvents"]
                       if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
    if recorded:
        assert int(_tile(page, "peakReserved")) == cuda["summary"]["peakReservedBytes"] > 0
    else:  # the 2021 format: no Total Reserved in the file, so no number either
        assert cuda["summary"]["peakReservedBytes"] is None
        assert "unknown" in reserved and "0 B" not in reserved, reserved
        assert "reserved: not recorded in this trace" in page.inner_text("#mp-timeline")
    page.screenshot(path=str(ARTIFACTS / f"memory_profile_opens_on_gpu_{name.split('.')[0]}.png"))


# -- two peaks that measure different things (issue 31) -----------------------------------


@pytest.fixture(scope="module")
def tpu_server(tmp_path_factory, shared_fixtures):
    """The real TPU inference profile: its allocators reserve 20.0 GiB of stack."""
    root = tmp_path_factory.mktemp("tpu")
    shutil.copytree(shared_fixtures / "public_profiles" / "xplane" / "tpu_inference", root / "tpu_inference")
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_lifetime_and_window_peaks_say_what_they_count(open_page, tpu_server):
    """"Lifetime peak 15.0 GiB" beside "Peak in window 20.0 GiB" is no contradiction: the
    first is the allocator's peak_bytes_in_use (heap only), the second stack + heap. Both
    numbers are XProf's; the page must say why they differ."""
    run = _run(tpu_server, "profile", "tpu_inference")
    data = _data(tpu_server, run)
    allocator = data["memoryIds"][0]
    extras = data["profscope"]["allocators"][allocator]["summary"]
    assert extras["lifetimePeakBytes"] < extras["peakBytes"] == extras["stackBytesAtPeak"] + extras["heapBytesAtPeak"]
    assert extras["stackBytesAtPeak"] > extras["lifetimePeakBytes"]  # the stack alone is above it

    page = open_page(tpu_server)
    page.goto(_view_url(tpu_server, run=run["name"], tool="memory_profile", memory_id=allocator))
    page.wait_for_selector("#mp-summary")
    assert int(_tile(page, "lifetimePeak")) == extras["lifetimePeakBytes"]
    assert int(_tile(page, "peak")) == extras["peakBytes"]
    lifetime = page.inner_text("#mp-summary .mp-tile[data-key=lifetimePeak] .note")
    window = page.inner_text("#mp-summary .mp-tile[data-key=peak] .note")
    stack, heap = _fmt(page, extras["stackBytesAtPeak"]), _fmt(page, extras["heapBytesAtPeak"])
    assert "heap only" in lifetime and f"also counts {stack} of stack" in lifetime, lifetime
    assert f"{stack} stack + {heap} heap" in window, window
    page.locator("#mp-summary").screenshot(path=str(ARTIFACTS / "memory_profile_tpu_two_peaks.png"))
