"""Trace viewer navigation (issue 16): a link whose window lies outside the trace is
clamped to it, refetched, written back to the URL and said so; Reset zoom and the `0` key
always come back to the whole trace. Real server on the bundled demo, Debian's Chromium."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_browser_trace_viewer import _get_json, _hook, _open, _query, _ready, mlp_run, server_url  # noqa: F401

pytestmark = pytest.mark.browser

SHOTS = ARTIFACTS / "trace_navigation"


def _full(server, run):
    return _get_json(server, "/api/trace/window", run=run, resolution=200)["fullTimespan"]


def _assert_whole(page, full):
    w = _hook(page, "window")
    span = full[1] - full[0]
    assert abs(w[0] - full[0]) <= span * 1e-4 and abs(w[1] - full[1]) <= span * 1e-4, (w, full)
    assert len(_hook(page, "visibleSlices")) > 20


def test_link_far_outside_the_trace(open_page, server_url, mlp_run):
    full = _full(server_url, mlp_run)
    far = full[1] + 1000 * (full[1] - full[0])
    page = _open(open_page, server_url, run=mlp_run, tool="trace_viewer@", start_ms=str(round(far, 3)), end_ms=str(round(far + 50, 3)))
    _ready(page)
    note = page.locator("#tv-clamped-window")
    assert note.is_visible()
    text = note.inner_text()
    assert "outside this trace" in text and "showing the whole trace" in text, text
    assert "partly" not in text
    _assert_whole(page, full)
    # The URL no longer carries the dead window.
    q = _query(page)
    assert not q.get("start_ms") and not q.get("end_ms"), q
    page.screenshot(path=f"{SHOTS}/after_far_outside.png")

    # Zoom in, then Reset zoom and `0` both give back the whole trace.
    page.mouse.move(600, 300)
    for _ in range(5):
        page.keyboard.press("w")
    _ready(page)
    assert _hook(page, "window")[1] - _hook(page, "window")[0] < (full[1] - full[0]) * 0.9
    page.click("#tv-reset")
    _ready(page)
    _assert_whole(page, full)
    for _ in range(5):
        page.keyboard.press("w")
    _ready(page)
    page.keyboard.press("0")
    _ready(page)
    _assert_whole(page, full)


def test_link_half_outside_the_trace(open_page, server_url, mlp_run):
    full = _full(server_url, mlp_run)
    span = full[1] - full[0]
    s, e = full[0] + span * 0.75, full[1] + span * 0.5
    page = _open(open_page, server_url, run=mlp_run, tool="trace_viewer@", start_ms=str(round(s, 4)), end_ms=str(round(e, 4)))
    _ready(page)
    text = page.locator("#tv-clamped-window").inner_text()
    assert "partly outside this trace" in text and "showing the part inside it" in text, text
    w = _hook(page, "window")
    assert w[1] <= full[1] + span * 1e-6 and abs(w[0] - s) <= span * 1e-3, (w, s, full)
    assert w[1] - w[0] >= span * 0.2
    q = _query(page)
    assert float(q["end_ms"]) <= full[1] + span * 1e-6, q
    # The fetched data is the clamped window's, not the link's.
    dw = _hook(page, "dataWindow")
    assert abs(dw[1] - w[1]) <= span * 1e-6 and abs(dw[0] - w[0]) <= span * 1e-6, (dw, w)
    page.screenshot(path=f"{SHOTS}/after_half_outside.png")
    page.keyboard.press("0")
    _ready(page)
    _assert_whole(page, full)


def _pos(page):
    return page.locator("#tv-match-pos").inner_text()


def _wait_selected(page, ev_id):
    page.wait_for_function(f"__traceViewer.selected() === '{ev_id}'", timeout=30_000)
    _ready(page)


def test_search_counts_all_matches_and_steps_past_the_first_page(open_page, server_url, mlp_run):
    q = "o"
    whole = _get_json(server_url, "/api/trace/search", run=mlp_run, q=q, limit=10000)
    total = whole["total"]
    assert total > 120 and len(whole["matches"]) == total
    ids = [str(m["id"]) for m in whole["matches"]]
    page = _open(open_page, server_url, run=mlp_run, tool="trace_viewer@", q=q)
    _ready(page)
    page.wait_for_function("__traceViewer.searchPos() && __traceViewer.searchPos().total > 0", timeout=30_000)
    assert _pos(page) == f"{total:,} matches"
    head = page.locator("#tv-results-head").inner_text()
    assert f"{total:,} slices match" in head and "1–50 listed" in head, head
    assert page.locator(".tv-match").count() == 50

    def check(i):
        _wait_selected(page, ids[i])
        assert _pos(page) == f"match {i + 1:,} of {total:,}"
        m = whole["matches"][i]
        w = _hook(page, "window")
        assert w[0] <= m["start"] + m["dur"] and m["start"] <= w[1], (w, m)

    page.focus("#tv-search")
    page.keyboard.press("Enter")
    check(0)
    page.click("#tv-match-next")
    check(1)
    # Shift+Enter from the first wraps to the last match, on the last page.
    page.focus("#tv-search")
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Shift+Enter")
    check(total - 2)
    assert _hook(page, "searchPos")["page"] == (total - 2) // 50
    page.screenshot(path=f"{SHOTS}/after_search_last_page.png")
    page.click("#tv-match-next")
    page.click("#tv-match-next")
    check(0)
    # The 50th row, then next: the 51st match comes from the second page.
    page.locator(".tv-match").nth(49).click()
    check(49)
    page.click("#tv-match-next")
    check(50)
    assert _hook(page, "searchPos")["page"] == 1
    assert page.locator(".tv-match.on").get_attribute("data-id") == ids[50]
    page.screenshot(path=f"{SHOTS}/after_search_page2.png")
    page.click("#tv-match-prev")
    check(49)


BAD_NAME = re.compile(r"device -1|^(process|thread)\s*$|^\s*$")


@pytest.fixture(scope="module")
def fixtures_url(tmp_path_factory, shared_fixtures):
    """A logdir of real files: a GPU xplane (MI300 JAX GEMM) and torch.profiler CUDA and
    ROCm Chrome traces."""
    public = shared_fixtures / "public_profiles"
    root = tmp_path_factory.mktemp("names")
    shutil.copytree(public / "xplane" / "mi300_jax08_gemm", root / "gemm")
    (root / "torch").mkdir()
    for f in ("kineto_resnet50_v100.pt.trace.json.gz", "hta_mi250_rocm62.trace.json.gz"):
        shutil.copy(public / "traces" / f, root / "torch" / f)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _row_names(page):
    return [r["name"] for r in _hook(page, "rows")]


def test_track_names_on_real_files(open_page, fixtures_url, demo_logdir):
    runs = [r["name"] for r in _get_json(fixtures_url, "/api/runs")["runs"]]
    gemm = next(r for r in runs if r.startswith("gemm"))
    page = _open(open_page, fixtures_url, run=gemm, tool="trace_viewer@")
    _ready(page)
    names = _row_names(page)
    assert any("/device:GPU:0" in n for n in names) and any("/host:CPU" in n for n in names), names
    assert not [n for n in names if BAD_NAME.search(n)], names
    page.screenshot(path=f"{SHOTS}/after_names_gpu_xplane.png")

    resnet = next(r for r in runs if "resnet50" in r)
    page = _open(open_page, fixtures_url, run=resnet, tool="trace_viewer@")
    _ready(page)
    names = _row_names(page)
    assert "GPU 0 (python)" in names, names  # Kineto's pid 0 is the first GPU
    assert "no pid" in names and "no tid" in names  # the global "Record Window End" instant
    assert not [n for n in names if BAD_NAME.search(n)], names
    page.screenshot(path=f"{SHOTS}/after_names_torch_cuda.png")


def test_torch_host_counters_named_and_zero_rows_hidden(open_page, server_url):
    run = next(r["name"] for r in _get_json(server_url, "/api/runs")["runs"] if r["name"].endswith("mlp_train.pt.trace.json.gz"))
    data = _get_json(server_url, "/api/trace/window", run=run, resolution=200)
    counters = {c["name"]: c for c in data["counters"]}
    # Kineto's host allocator has no reserved memory: that row is all zeros, so not shown.
    assert list(counters) == ["memory allocated (Host CPU)"]
    assert any(counters["memory allocated (Host CPU)"]["v"])
    page = _open(open_page, server_url, run=run, tool="trace_viewer@")
    _ready(page)
    names = _row_names(page)
    assert "memory allocated (Host CPU)" in names and not any("reserved" in n for n in names), names
    assert not [n for n in names if BAD_NAME.search(n)], names
    page.screenshot(path=f"{SHOTS}/after_names_torch_demo.png")
