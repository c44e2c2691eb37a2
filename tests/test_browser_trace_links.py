"""The trace viewer's links in real Chromium (issue 37 "From the trace"), on the real
profiles of ``shared/fixtures/public_profiles``:

* a click on an allocator counter's point opens its card; its memory profile link opens
  the memory profile of that allocator with the same event selected, whose own trace link
  (the memory profile's, pages/memory_profile_timeline.js) lands back within one event of
  the point: the round trip of the issue, on the TF GPU profile and on the H100 PyTorch
  trace whose ``[memory]`` events are its counters;
* "Peak in trace" moves the selection to the counter's largest sample;
* a click on an XLA op draws its HLO view link and its memory viewer link, each opening
  its view (the instruction highlighted; its buffers).
Screenshots go to test-artifacts/."""

from __future__ import annotations

from urllib.error import HTTPError
from urllib.parse import parse_qs, urlencode, urlparse
from urllib.request import urlopen

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.conftest import ARTIFACTS
from tests.test_browser_trace_viewer import READY, _hook, _query, _view_url

pytestmark = pytest.mark.browser

TF_GPU = ("xplane/tf_gpu/GPU-multi-worker", "34.83.195.179_6003", "GPU_4_bfc heap allocated")
H100 = ("traces/tracelens_h100_bert_small.trace.json.gz", "", "memory allocated (device 0)")


def _warm(server: str, run: str, host: str = "") -> None:
    """What the pages will ask, computed first (a fresh cache: the trace indexes of every
    host for "All hosts", the memory profile, the trace clock), so that under a loaded
    machine the page's own waits do not race a first conversion. Hang backstop: 600 s."""
    h = {"host": host} if host else {}
    for path, params in (("/api/trace/window", {"run": run, **h}), ("/api/trace_hosts", {"run": run}),
                         ("/data/plugin/profile/data", {"run": run, "tag": "memory_profile", **h}),
                         ("/api/trace_clock", {"run": run, **h})):
        try:
            with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=600) as res:
                res.read()
        except HTTPError:
            pass  # a run without hosts or without a memory profile: the page says so itself


def _href_state(page, selector: str) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.get_attribute(selector, "href")).query).items()}


def _click_counter_point(page, name: str) -> dict:
    """Clicks a sample in the middle of counter ``name`` (as drawn), returns it. The page
    above the canvas may still grow (a multi-host run's "All hosts" section arrives with
    /api/trace_hosts, slower on a cold cache), so it is waited for, and the point is
    measured again right before each click."""
    page.wait_for_function("() => !document.querySelector('#tvh-loading')", timeout=90_000)
    track = next(r["id"] for r in _hook(page, "rows") if r["type"] == "track" and r["name"] == name)
    for _attempt in range(3):
        assert _hook(page, "scrollToTrack", track)
        page.wait_for_function(READY)
        pts = _hook(page, "counterPoints", track)
        assert pts, name
        page.evaluate("(dy) => window.scrollBy(0, dy)", pts[0]["y"] - 400)  # the row into the viewport
        pts = _hook(page, "counterPoints", track)
        # a sample whose next one is more than 2 px away: a click 1 px right of it picks it
        span = _hook(page, "window")
        px = (span[1] - span[0]) / 1000
        pick = [p for p in pts if p["next"] is None or p["next"] - p["t"] > 3 * px]
        p = pick[len(pick) // 2]
        page.mouse.click(p["x"] + 1, p["y"])
        try:
            page.wait_for_selector("#tv-card.selected #tv-counter-time", timeout=10_000)
            return {"track": track, **p}
        except PlaywrightTimeout:
            continue  # the layout moved under the click: measure again
    raise AssertionError(f"no counter card after 3 clicks on {name!r}")


@pytest.mark.parametrize("case", [TF_GPU, H100], ids=["tf_gpu", "h100_torch"])
def test_counter_point_to_memory_profile_and_back_to_the_trace(open_page, public_server, case):
    run, host, name = case
    _warm(public_server, run, host)
    page = open_page(public_server)
    page.set_viewport_size({"width": 1400, "height": 1500})
    page.goto(_view_url(public_server, run=run, tool="trace_viewer@", **({"host": host} if host else {})))
    page.wait_for_function(READY, timeout=90_000)
    tag = run.split("/")[1].split(".")[0]
    p = _click_counter_point(page, name)
    t = float(page.get_attribute("#tv-counter-time", "data-time"))
    assert abs(t - p["t"]) < 1e-9  # the point clicked, not its neighbour
    assert _hook(page, "counterSelected")["time"] == t
    q = _query(page)
    assert q["ctr"] == str(p["track"]) and q["ct"] == str(t)  # shareable: a reload reopens the point's card
    page.reload()
    page.wait_for_function(READY, timeout=90_000)
    page.wait_for_selector("#tv-card.selected #tv-counter-time")
    assert float(page.get_attribute("#tv-counter-time", "data-time")) == t and page.is_visible("#tv-mp-link")
    link = _href_state(page, "#tv-mp-link")
    assert link["tool"] == "memory_profile" and link["run"] == run and link["memory_id"] in name.replace("memory allocated (device 0)", "CUDA:0")
    page.screenshot(path=str(ARTIFACTS / f"trace_links_{tag}_counter.png"), full_page=True)

    page.click("#tv-mp-link")
    page.mouse.move(2, 2)  # off the charts: a hovered point would take the card
    page.wait_for_selector("#mp-event[data-mode='selected']", timeout=90_000)
    assert _query(page)["t"] == link["t"] and _query(page)["memory_id"] == link["memory_id"]
    page.wait_for_selector("#mp-trace-link", timeout=60_000)
    back_ms = float(page.get_attribute("#mp-trace-link", "data-trace-ms"))
    # the memory profile's selected event is the counter's event: back on the trace's clock
    # it is the clicked point (within one event: closer than the next sample)
    gap = (p["next"] - p["t"]) if p["next"] is not None else 1.0
    assert abs(back_ms - t) < min(gap, 1e-3), (back_ms, t)
    page.screenshot(path=str(ARTIFACTS / f"trace_links_{tag}_memory_profile.png"), full_page=True)

    page.click("#mp-trace-link")
    page.wait_for_function(READY, timeout=90_000)
    win = _hook(page, "window")
    assert abs((win[0] + win[1]) / 2 - t) < min(gap, 1e-3)
    # and the memory profile's link selects the event's counter sample: the clicked point
    page.wait_for_selector("#tv-card.selected #tv-counter-time")
    assert abs(float(page.get_attribute("#tv-counter-time", "data-time")) - t) < min(gap, 1e-3)
    page.screenshot(path=str(ARTIFACTS / f"trace_links_{tag}_back_in_trace.png"), full_page=True)
    page.go_back()
    page.wait_for_selector("#mp-event[data-mode='selected']", timeout=60_000)


def test_peak_in_trace_selects_the_counters_largest_sample(open_page, public_server):
    run, host, name = TF_GPU
    _warm(public_server, run, host)
    page = open_page(public_server)
    page.set_viewport_size({"width": 1400, "height": 1500})
    page.goto(_view_url(public_server, run=run, tool="trace_viewer@", host=host))
    page.wait_for_function(READY, timeout=90_000)
    p = _click_counter_point(page, name)
    drawn_max = max(_hook(page, "counterValues", p["track"]))  # the whole trace: each pixel's max is drawn
    page.click("#tv-peak-all")
    page.wait_for_function("(m) => { const e = document.querySelector('#tv-counter-value');"
                           " return e && Number(e.dataset.value) === m; }", arg=drawn_max)
    peak_t = float(page.get_attribute("#tv-counter-time", "data-time"))
    assert _hook(page, "counterSelected")["time"] == peak_t and abs(float(_query(page)["ct"]) - peak_t) < 1e-6
    assert page.is_visible("#tv-mp-link")
    page.screenshot(path=str(ARTIFACTS / "trace_links_tf_gpu_peak.png"), full_page=True)
    # Escape lets the point go, in the URL too
    page.keyboard.press("Escape")
    page.wait_for_function("() => !__traceViewer.counterSelected()")
    assert "ctr" not in _query(page) and page.query_selector("#tv-counter-time") is None


def test_a_counter_without_an_allocator_draws_no_link(open_page, public_server):
    """TPU: the allocator events name no allocator (memory ids 0..3), so the trace's one
    "allocator heap allocated" counter is no allocator's: the card says why, no link."""
    _warm(public_server, "xplane/tpu_inference/2025_12_10_tpu")
    page = open_page(public_server)
    page.set_viewport_size({"width": 1400, "height": 1500})
    page.goto(_view_url(public_server, run="xplane/tpu_inference/2025_12_10_tpu", tool="trace_viewer@"))
    page.wait_for_function(READY, timeout=90_000)
    _click_counter_point(page, "allocator heap allocated")
    page.wait_for_selector("#tv-mp-none")
    assert page.query_selector("#tv-mp-link") is None
    assert "no allocator 'allocator'" in page.inner_text("#tv-mp-none")
    page.screenshot(path=str(ARTIFACTS / "trace_links_tpu_no_allocator.png"), full_page=True)


def test_xla_op_links_to_its_hlo_and_its_buffers(open_page, public_server):
    run = "xplane/mi300_jax08_gemm/jax08_gemm"
    _warm(public_server, run)
    page = open_page(public_server)
    page.set_viewport_size({"width": 1400, "height": 1500})
    page.goto(_view_url(public_server, run=run, tool="trace_viewer@"))
    page.wait_for_function(READY, timeout=90_000)
    ops_tracks = {r["id"] for r in _hook(page, "rows") if r["type"] == "track" and r["name"].startswith("XLA Ops")}
    ops = sorted((s for s in _hook(page, "visibleSlices") if s["track"] in ops_tracks), key=lambda s: -s["w"])
    for op in ops[:10]:
        page.mouse.click(op["x"] + min(op["w"], 6) / 2, op["y"] + op["h"] / 2)
        page.wait_for_selector("#tv-card.selected .tv-card-name")
        if page.query_selector("#tv-hlo-link"):
            break
    hlo = _href_state(page, "#tv-hlo-link")
    mem = _href_state(page, "#tv-memory-link")
    assert hlo["tool"] == "memory_viewer" and hlo["view"] == "hlo" and hlo["instr"] and hlo["module_name"].startswith("jit_")
    assert mem["module_name"] == hlo["module_name"] and mem["hlo_op"] == hlo["instr"]
    page.screenshot(path=str(ARTIFACTS / "trace_links_xla_op_card.png"), full_page=True)

    page.click("#tv-hlo-link")
    page.wait_for_selector("#hv-selected", timeout=90_000)
    assert hlo["instr"] in page.inner_text("#hv-selected")
    assert _query(page)["instr"] == hlo["instr"] and _query(page)["view"] == "hlo"  # the URL reopens it
    page.screenshot(path=str(ARTIFACTS / "trace_links_xla_op_hlo.png"), full_page=True)

    page.go_back()
    page.wait_for_function(READY, timeout=90_000)
    page.wait_for_selector("#tv-memory-link")
    page.click("#tv-memory-link")
    page.wait_for_function("(op) => new URLSearchParams(location.search).get('hlo_op') === op", arg=hlo["instr"])
    page.wait_for_selector("#mv-timeline, .mv-card", timeout=90_000)
    page.screenshot(path=str(ARTIFACTS / "trace_links_xla_op_buffers.png"), full_page=True)
