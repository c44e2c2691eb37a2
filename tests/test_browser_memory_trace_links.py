"""Issue 37 in real headless Chromium: from the memory profile, the snapshot and Steps &
ops to the trace viewer (and the HLO view), over the public fixtures' server.

* memory profile (TF GPU, real BFC allocator events): the selected event's card links to
  the trace viewer at that event's time; the link opens the trace viewer with its window
  centred there, the window holds that allocator event's counter sample, and the URL
  reopens the same view in a fresh page;
* no matching trace (MI300: host lines with different timestamps; a snapshot with no
  trace beside it): no link, the reason in a line and its tooltip.
Screenshots go to test-artifacts/."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_browser_memory_viewer_links import _get_json as _get, _query, _view_url as _url
from tests.test_memory_trace_clock import snapshot_and_trace
from tests.test_snapshot_sources import write_snapshot_with_source

pytestmark = pytest.mark.browser

TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
HOST = "34.83.195.179_6003"
READY = "window.__traceViewer && __traceViewer.ready()"


def _open(open_page, server, **state):
    page = open_page(server)
    page.goto(_url(server, **state))
    return page


def _assert_counter_selected(page, server: str, aim: float):
    """The link selects the allocator's (device's) counter sample at its time: ctr/ct in
    the URL (the trace page's counter card keys), that sample (GET /api/trace/counter) is
    at exactly the link's time, and the page opened with its card."""
    q = _query(page)
    assert abs(float(q["ct"]) - aim) < 1e-6
    p = _get(server, "/api/trace/counter", run=q["run"], host=q["host"], track=q["ctr"], t=q["ct"])
    assert abs(p["time"] - aim) < 1e-6
    # and the trace page shows that sample's card (helper J's, trace_viewer.js)
    card = page.wait_for_selector("#tv-card.selected #tv-counter-time", timeout=60_000)
    assert abs(float(card.get_attribute("data-time")) - aim) < 1e-6


@pytest.fixture(scope="module")
def fresh_public(tmp_path_factory, shared_fixtures):
    """The public fixtures' server with a cache of its own: no trace is indexed yet, whatever
    the session's other tests opened on the shared one."""
    with profscope_server("serve", str(shared_fixtures / "public_profiles"), "--port", "0", "--cache-dir",
                          str(tmp_path_factory.mktemp("fresh-cache"))) as (url, _):
        yield url


def _href_state(page, selector: str) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.get_attribute(selector, "href")).query).items()}


def test_memory_profile_event_opens_the_trace_there(open_page, fresh_public):
    """The trace is not indexed yet: opening the page indexes nothing (GET /api/trace_clock
    ?index=built is pending), the card's link is an action that indexes the trace when
    clicked, then opens it at the event; back on the page, the trace indexed, the link is
    drawn with its href on load, to the same view."""
    server = fresh_public
    mp = _get(server, "/data/plugin/profile/data", run=TF_GPU, tag="memory_profile", host=HOST)
    per = mp["memoryProfilePerAllocator"]["GPU_4_bfc"]
    peak_ms = int(per["profileSummary"]["peakStatsTimePs"]) / 1e9
    page = _open(open_page, server, run=TF_GPU, tool="memory_profile", host=HOST, memory_id="GPU_4_bfc", t=repr(peak_ms))
    link = page.wait_for_selector("#mp-event #mp-trace-link", timeout=90_000)
    assert link.get_attribute("href") is None and "indexes the trace first" in link.get_attribute("title")
    assert _get(server, "/api/trace_clock", run=TF_GPU, host=HOST, index="built")["pending"] is True  # still nothing built
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "memory_trace_link_pending.png"), full_page=False)
    heap = int(page.eval_on_selector("#mp-event", "n => n.dataset.index"))  # the selected event
    assert heap >= 0
    link.click()
    page.wait_for_function(READY, timeout=90_000)
    q = _query(page)
    assert q["tool"] == "trace_viewer@" and q["host"] == HOST and q["run"] == TF_GPU
    s, e = float(q["start_ms"]), float(q["end_ms"])
    aim = float(q["ct"])
    assert abs((s + e) / 2 - aim) < 1e-6  # centred on the event
    _assert_counter_selected(page, server, aim)
    page.screenshot(path=str(ARTIFACTS / "memory_trace_link_trace.png"), full_page=False)
    # the window the page opened holds that allocator event: its counter sample at `aim`
    # is the heap the memory profile's peak event reports
    w = _get(server, "/api/trace/window", run=TF_GPU, host=HOST, start_ms=q["start_ms"], end_ms=q["end_ms"])
    c = next(c for c in w["counters"] if c["name"] == "GPU_4_bfc heap allocated")
    at = [v for t, v in zip(c["t"], c["v"]) if abs(t - aim) < 1e-6]
    assert at and at[-1] == int(per["profileSummary"]["peakStats"]["heapAllocatedBytes"])
    # the URL is the view: a fresh page opens the same window
    again = open_page(server)
    again.goto(page.url)
    again.wait_for_function(READY, timeout=90_000)
    assert _query(again)["start_ms"] == q["start_ms"] and _query(again)["end_ms"] == q["end_ms"]
    # back: the memory profile, the same event selected; the trace is indexed now, so the
    # link has its href on load, and it is the view the action opened
    page.go_back()
    page.wait_for_selector("#mp-event #mp-trace-link[href]", timeout=60_000)
    assert float(page.get_attribute("#mp-trace-link", "data-trace-ms")) == pytest.approx(aim, abs=1e-6)
    assert _href_state(page, "#mp-trace-link") == q
    page.screenshot(path=str(ARTIFACTS / "memory_trace_link_card.png"), full_page=False)


def test_per_event_clock_and_no_matching_trace(open_page, public_server):
    """MI300's host lines start at different times: the peak event's link aims at that
    event's own trace time (the API's traceMs); a snapshot with no trace beside it: no
    link, the why in the line's tooltip."""
    run = "xplane/mi300_jax08_gemm/jax08_gemm"
    clock = _get(public_server, "/api/trace_clock", run=run)
    mp = _get(public_server, "/data/plugin/profile/data", run=run, tag="memory_profile", host="tw003")
    peak = mp["memoryProfilePerAllocator"]["GPU_0_bfc"]["profileSummary"]["peakStatsTimePs"]
    page = _open(open_page, public_server, run=run, tool="memory_profile", t=repr(int(peak) / 1e9))
    link = page.wait_for_selector("#mp-event #mp-trace-link", timeout=90_000)
    assert float(link.get_attribute("data-trace-ms")) == clock["clocks"]["GPU_0_bfc"]["traceMs"][peak]
    page.screenshot(path=str(ARTIFACTS / "memory_trace_link_mi300.png"), full_page=False)

    snap = _open(open_page, public_server, run="snapshots/niu_fwd_bwd_200_mixed.pickle", tool="memory_profile", t="5")
    none = snap.wait_for_selector("#ts-trace-none", timeout=60_000)
    assert "no PyTorch trace sits beside" in none.get_attribute("title")
    assert snap.query_selector("#ts-trace-link") is None
    none.scroll_into_view_if_needed()
    snap.screenshot(path=str(ARTIFACTS / "snapshot_trace_none.png"), full_page=False)


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """A snapshot and the PyTorch trace its run recorded beside it (builders)."""
    root = tmp_path_factory.mktemp("snaplog")
    write_snapshot_with_source(root)  # src/train.py under the log directory (the same snapshot)
    snap = snapshot_and_trace(root)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url, snap


def test_snapshot_event_opens_its_trace_there(open_page, side_by_side):
    """A fresh cache: the trace beside the snapshot is not indexed, so the link is an action
    (opening the snapshot indexes nothing); a click indexes it ("indexing the trace…") and
    opens the trace at the event; back, the link has its href to the same view."""
    server, snap = side_by_side
    page = _open(open_page, server, run="snap.pickle", tool="memory_profile", t="1")  # event 1: the 16 MiB alloc
    link = page.wait_for_selector("#ts-trace-link", timeout=90_000)
    assert link.get_attribute("href") is None and "indexes the PyTorch trace first" in link.get_attribute("title")
    link.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "snapshot_trace_link_pending.png"), full_page=False)
    link.click()
    page.wait_for_function(READY, timeout=90_000)
    q = _query(page)
    assert q["run"] == "run.pt.trace.json" and q["tool"] == "trace_viewer@"
    aim = float(q["ct"])
    assert abs((float(q["start_ms"]) + float(q["end_ms"])) / 2 - aim) < 1e-6
    _assert_counter_selected(page, server, aim)
    page.screenshot(path=str(ARTIFACTS / "snapshot_trace_link_trace.png"), full_page=False)
    w = _get(server, "/api/trace/window", run=q["run"], host=q["host"], start_ms=q["start_ms"], end_ms=q["end_ms"])
    c = next(c for c in w["counters"] if c["name"] == "memory allocated (device 0)")
    assert [v for t, v in zip(c["t"], c["v"]) if abs(t - aim) < 1e-6] == [snap["device_traces"][0][1]["size"]]
    page.go_back()
    link = page.wait_for_selector("#ts-trace-link[href]", timeout=60_000)
    assert float(link.get_attribute("data-trace-ms")) == pytest.approx(aim, abs=1e-6)
    assert _href_state(page, "#ts-trace-link") == q
    link.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "snapshot_trace_link.png"), full_page=False)


def test_snapshot_link_indexes_then_says_why_there_is_no_place(open_page, tmp_path):
    """The trace beside the snapshot is another run's (one hour later), not indexed yet: the
    link is an action on load (whether it has a place needs the trace's index); the click
    indexes it and puts the why in the link's place, no dead link."""
    (tmp_path / "logs").mkdir()
    snapshot_and_trace(tmp_path / "logs", skew_us=3_600_000_000)
    with profscope_server("serve", str(tmp_path / "logs"), "--port", "0", "--cache-dir", str(tmp_path / "cache")) as (server, _):
        page = _open(open_page, server, run="snap.pickle", tool="memory_profile", t="1")
        link = page.wait_for_selector("#ts-trace-link", timeout=90_000)
        assert link.get_attribute("href") is None
        link.click()
        none = page.wait_for_selector("#ts-trace-none", timeout=90_000)
        assert "not the same run" in none.get_attribute("title")
        assert page.query_selector("#ts-trace-link") is None and _query(page)["tool"] == "memory_profile"
        none.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "snapshot_trace_link_no_place.png"), full_page=False)


def test_snapshot_frame_opens_its_source(open_page, side_by_side):
    """Hover the 16 MiB allocation: its card's /src/train.py:42 frame is a link (the file is
    under the log directory), a click shows line 42 highlighted; the C++ frame "??" is text."""
    server, _snap = side_by_side
    page = _open(open_page, server, run="snap.pickle", tool="memory_profile", detail="all")
    page.wait_for_selector("#ts-timeline .main-svg", timeout=90_000)
    gd = "document.getElementById('ts-timeline')"
    tl = page.evaluate(f"{gd}.tsTimeline()")
    a = next(a for a in tl["allocations"] if a["size"] == 16 << 20)
    page.locator("#ts-timeline").scroll_into_view_if_needed()
    x, y = page.evaluate(f"(id) => {gd}.tsPointOf(id)", a["id"])
    page.mouse.move(x, y)
    page.wait_for_selector(f"#ts-card[data-alloc='{a['id']}'] #ts-card-frames[data-loaded]", timeout=60_000)
    if page.query_selector("#ts-inner-frames"):
        page.click("#ts-inner-frames")  # the C++ frame before the user's code
    links = page.locator("#ts-card-frames a.ts-src-link")
    assert links.count() == 1 and links.first.inner_text() == "src/train.py:42"
    assert "??:0" in page.inner_text("#ts-card-frames") and page.locator("#ts-card-frames .ts-frame").count() == 2
    links.first.click()
    page.wait_for_selector("#ts-source .ts-src-line.hit", timeout=30_000)
    assert page.inner_text("#ts-source .ts-src-line.hit").strip() == "42  line_42 = 42  # train.py line 42"
    page.locator("#ts-card").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "snapshot_frame_source.png"), full_page=False)


GEMM = "xplane/mi300_jax08_gemm/jax08_gemm"


def test_steps_ops_row_opens_its_hlo_and_its_slowest_occurrence(open_page, public_server):
    """MI300 GEMM, the slowest HLO op's row: "HLO of NAME" opens the module's HLO text with
    that instruction selected (the module is in the memory viewer's list, the instruction
    in the module); the trace link selects the occurrence itself (ev= the event, its name
    and start); a kernel row has no HLO link."""
    so = _get(public_server, "/data/plugin/profile/data", run=GEMM, tag="steps_ops")
    r = max((o for o in so["ops"] if o["kind"] == "hlo"), key=lambda o: o["slowest"]["dur_us"])
    key = f"hlo|{r['program_id']}|{r['name']}"
    page = _open(open_page, public_server, run=GEMM, tool="steps_ops", kind="hlo", op=key)
    link = page.wait_for_selector("#so-op #so-hlo-link", timeout=90_000)
    page.locator("#so-op").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "steps_ops_hlo_link.png"), full_page=False)
    link.click()
    page.wait_for_selector("#hv-selected", timeout=90_000)
    q = _query(page)
    assert (q["tool"], q["view"], q["module_name"], q["instr"]) == ("memory_viewer", "hlo", r["module"], r["name"])
    assert page.inner_text("#hv-selected").strip().startswith(f"%{r['name']} = ")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_hlo_view.png"), full_page=False)
    again = open_page(public_server)  # the URL is the view
    again.goto(page.url)
    assert again.wait_for_selector("#hv-selected", timeout=90_000).inner_text() == page.inner_text("#hv-selected")
    page.go_back()
    trace = page.wait_for_selector("#so-op #so-trace-link", timeout=60_000)
    trace.click()
    page.wait_for_function(READY, timeout=90_000)
    q = _query(page)
    ev = _get(public_server, "/api/trace/event", run=GEMM, host=q["host"], id=q["ev"])
    assert ev["name"] == r["name"] and abs(ev["start"] * 1e3 - r["slowest"]["start_us"]) < 1e-3
    assert float(q["start_ms"]) < ev["start"] < ev["start"] + ev["dur"] < float(q["end_ms"])
    # a kernel row: its trace link, no HLO link
    k = next(o for o in so["ops"] if o["kind"] == "kernel")
    page = _open(open_page, public_server, run=GEMM, tool="steps_ops", kind="kernel", op=f"kernel|{k.get('program_id') or ''}|{k['name']}")
    page.wait_for_selector("#so-op #so-trace-link", timeout=90_000)
    assert page.query_selector("#so-hlo-link") is None and page.query_selector("#so-hlo-spot") is None


def test_pytorch_trace_memory_event_opens_the_trace_there(open_page, public_server):
    """tracelens H100 ([memory] events with Total Allocated): the peak event of CUDA:0 opens
    the same file's trace centred on it, where the device's counter holds the peak bytes."""
    run = "traces/tracelens_h100_bert_small.trace.json.gz"
    dev = next(d for d in _get(public_server, "/api/memory_profile", run=run)["devices"] if d["device"] == "CUDA:0")
    _get(public_server, "/api/trace_clock", run=run)  # the full clock indexes the trace: the link has its href on load
    page = _open(open_page, public_server, run=run, tool="memory_profile", memory_id="CUDA:0", t=repr(dev["peak"]["timeMs"]))
    link = page.wait_for_selector("#mp-event #mp-trace-link", timeout=90_000)
    aim = float(link.get_attribute("data-trace-ms"))
    link.click()
    page.wait_for_function(READY, timeout=90_000)
    q = _query(page)
    assert q["run"] == run and abs((float(q["start_ms"]) + float(q["end_ms"])) / 2 - aim) < 1e-6
    _assert_counter_selected(page, public_server, aim)
    w = _get(public_server, "/api/trace/window", run=run, host=q["host"], start_ms=q["start_ms"], end_ms=q["end_ms"])
    c = next(c for c in w["counters"] if c["name"] == "memory allocated (device 0)")
    assert [v for t, v in zip(c["t"], c["v"]) if abs(t - aim) < 1e-6] == [dev["peak"]["allocatedBytes"]]
    page.screenshot(path=str(ARTIFACTS / "memory_trace_link_h100.png"), full_page=False)
