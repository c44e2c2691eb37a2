"""The PyTorch memory snapshot page end to end: the real server, Debian's Chromium driven
by Playwright, network cut, no mocks.

Input: the real training and inference snapshots of ``shared/fixtures/torch_snapshots/
Wedsonlin_assignment2-systems`` (copied into a temporary log directory). Checks: the
overview's peak is the API's; hovering an allocation polygon shows its card and, after the
on-demand stack fetch, its frames; clicking selects the event (``t=`` in the URL) and the
allocator state panel shows it; prev/next step; the copied URL reopens the same event in a
fresh browser; compare with the inference snapshot shows the training-only bytes.
Screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import shutil
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from profscope.testing import torch_snapshot as b
from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser

FIXTURES = "torch_snapshots/Wedsonlin_assignment2-systems"
TRAIN = "medium_128_training_memory_snapshot.pickle"
INFER = "medium_128_inference_memory_snapshot.pickle"
BUILT = "built_oom_two_devices.pickle"


@pytest.fixture(scope="module")
def snap_server(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("snaplog")
    for name in (TRAIN, INFER):
        shutil.copy(shared_fixtures / FIXTURES / name, root / name)
    # What no real fixture has: an OOM, two devices, expandable segments, overflow.
    (root / BUILT).write_bytes(b.to_pickle(b.expandable_oom_multidevice()))
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _api(server: str, view: str, **params):
    with urlopen(f"{server.rstrip('/')}/api/snapshot/{view}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _view_url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _open(page, url):
    page.goto(url)
    page.wait_for_selector("#ts-overview")
    page.wait_for_selector("#ts-timeline .main-svg")
    page.wait_for_selector("#ts-state[data-event]")


def _polygon_point(page, alloc_id: int) -> tuple[float, float]:
    """Screen position inside drawn allocation ``alloc_id`` (the middle of its widest step;
    the page paints polygons on a canvas and says where they are: tsPointOf)."""
    page.locator("#ts-timeline").scroll_into_view_if_needed()
    return tuple(page.evaluate("(id) => document.getElementById('ts-timeline').tsPointOf(id)", alloc_id))


@pytest.mark.slow  # a long walk: 14 s on 2 cores
def test_snapshot_page(open_page, browser, snap_server):
    ARTIFACTS.mkdir(exist_ok=True)
    ov = _api(snap_server, "overview", run=TRAIN, host="cuda:0")
    peak = ov["summary"]["peak"]
    assert peak["bytes"] == 7_013_335_044

    page = open_page(snap_server)
    _open(page, _view_url(snap_server, run=TRAIN, tool="memory_profile", host="cuda:0"))

    # Overview: the peak exactly as the JSON says, formatted by the page's fmtBytes (lib/format.js).
    assert int(page.get_attribute("#ts-peak", "data-bytes")) == peak["bytes"]
    assert page.inner_text("#ts-peak") == page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", peak["bytes"])
    assert "7,013,335,044 bytes" in page.inner_text("#ts-overview")
    assert f"event {peak['event']:,}" in page.inner_text("#ts-overview")
    # No t yet: the state panel shows the peak event.
    assert int(page.get_attribute("#ts-state", "data-event")) == peak["event"]
    assert "(the peak allocated)" in page.inner_text("#ts-state-title")
    page.wait_for_selector("#ts-icicle .main-svg")

    # Hover a drawn allocation (the largest allocated in the trace): a card, then its frames.
    tl = page.evaluate("document.getElementById('ts-timeline').tsTimeline()")
    by_id = {a["id"]: a for a in tl["allocations"]}
    want = max((a for a in tl["allocations"] if not a["preexisting"]), key=lambda a: (a["size"], len(a["polygon"]["x"])))
    x, y = _polygon_point(page, want["id"])
    page.mouse.move(x, y)
    page.wait_for_selector("#ts-card[data-alloc]")
    alloc = by_id[int(page.get_attribute("#ts-card", "data-alloc"))]
    assert alloc["id"] == want["id"]  # hit-testing is exact: the one under the mouse
    assert page.inner_text("#ts-card-size").startswith(page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", alloc["size"]))
    assert hex(alloc["addr"]) in page.inner_text("#ts-card")
    page.wait_for_selector("#ts-card-frames[data-loaded]")
    stack = _api(snap_server, "stack", run=TRAIN, host="cuda:0", stack=alloc["stackId"])
    assert stack["frames"], "the hovered allocation has a recorded stack"
    # The card starts at the stack's first user frame (here a C++-only backward stack: its
    # first frame past the allocator and dispatcher), the inner frames one click away.
    k = stack["userFrame"] or 0
    assert stack["frames"][k]["name"] in page.inner_text("#ts-card-frames")
    assert page.locator("#ts-card-frames .ts-frame").count() == len(stack["frames"]) - k

    # Click: the event under the mouse goes into the URL and the state panel follows.
    page.mouse.click(x, y)
    page.wait_for_function("new URLSearchParams(location.search).get('t') !== null")
    t = int(parse_qs(urlparse(page.url).query)["t"][0])
    assert alloc["polygon"]["x"][0] <= t <= alloc["polygon"]["x"][-1] + 1
    page.wait_for_selector(f"#ts-state[data-event='{t}']")
    st = _api(snap_server, "state", run=TRAIN, host="cuda:0", event=t)
    assert f"{st['totals']['largestFreeBlock']:,} B" in page.inner_text("#ts-state-totals")
    page.screenshot(path=str(ARTIFACTS / "snapshot_selected.png"), full_page=True)

    # Step forward with "next": t + 1, then back.
    page.click("#ts-next")
    page.wait_for_selector(f"#ts-state[data-event='{t + 1}']")
    assert parse_qs(urlparse(page.url).query)["t"] == [str(t + 1)]
    page.click("#ts-prev")
    page.wait_for_selector(f"#ts-state[data-event='{t}']")

    # A copied URL reopens on the same event in a fresh browser context.
    url = page.url
    ctx2 = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page2 = ctx2.new_page()
        errors = []
        page2.on("pageerror", lambda e: errors.append(str(e)))
        _open(page2, url)
        page2.wait_for_selector(f"#ts-state[data-event='{t}']")
        assert page2.input_value("#ts-event") == str(t)
        assert not errors
    finally:
        ctx2.close()

    # Compare with the inference snapshot: the training-only bytes, sites sorted by |delta|.
    cmp = _api(snap_server, "compare", run=TRAIN, host="cuda:0", other=INFER)
    page.select_option("#ts-compare-pick", INFER)
    page.wait_for_selector("#ts-only-a")
    assert int(page.get_attribute("#ts-only-a", "data-bytes")) == cmp["summary"]["onlyA"]["bytes"]
    assert f"{cmp['summary']['onlyA']['bytes']:,} bytes" in page.inner_text("#ts-row-only-a")
    rows = page.locator("#ts-sites tbody tr.ts-site")
    assert rows.count() == len(cmp["sites"])
    assert f"{cmp['segments']['onlyACount']:,} only in A" in page.inner_text("#ts-segment-diff")
    page.locator("#ts-compare").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "snapshot_compare.png"), full_page=True)

    # The compared run is part of the link: a fresh browser reopens the comparison.
    assert parse_qs(urlparse(page.url).query)["other"] == [INFER]
    ctx3 = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page3 = ctx3.new_page()
        _open(page3, page.url)
        page3.wait_for_selector("#ts-only-a")
        assert int(page3.get_attribute("#ts-only-a", "data-bytes")) == cmp["summary"]["onlyA"]["bytes"]
        assert page3.input_value("#ts-compare-pick") == INFER
    finally:
        ctx3.close()


def test_snapshot_zoom_requests_a_window(open_page, snap_server):
    page = open_page(snap_server)
    _open(page, _view_url(snap_server, run=TRAIN, tool="memory_profile", host="cuda:0", t="100"))
    assert page.input_value("#ts-event") == "100"
    with page.expect_request(lambda r: "/api/snapshot/timeline" in r.url and "start=" in r.url):
        page.evaluate("Plotly.relayout('ts-timeline', {'xaxis.range': [9000, 11000]})")
    page.wait_for_function("document.getElementById('ts-timeline-note').textContent.startsWith('events 8,9')")
    page.screenshot(path=str(ARTIFACTS / "snapshot_zoomed.png"), full_page=True)
    # The window and the x axis are part of the link.
    page.wait_for_function("new URLSearchParams(location.search).get('win') !== null")
    win = parse_qs(urlparse(page.url).query)["win"][0]
    a, b = map(int, win.split(","))
    assert a <= 9000 and b >= 11000 and b - a < 2100
    page2 = open_page(snap_server)
    with page2.expect_request(lambda r: "/api/snapshot/timeline" in r.url and f"start={a}&end={b}" in r.url):
        _open(page2, page.url)
    page2.wait_for_function("document.getElementById('ts-timeline-note').textContent.startsWith('events 8,9')")
    # Switching the axis to time starts from the whole trace; a time window then zooms.
    with page2.expect_request(lambda r: "/api/snapshot/timeline" in r.url and "x=time" in r.url and "start=" not in r.url):
        page2.select_option("#ts-xmode", "time")
    state = parse_qs(urlparse(page2.url).query)
    assert state["x"] == ["time"] and "win" not in state
    first_us = _api(snap_server, "overview", run=TRAIN, host="cuda:0")["summary"]["firstTimeUs"]
    page2.wait_for_selector("#ts-timeline .main-svg")
    with page2.expect_request(lambda r: "/api/snapshot/timeline" in r.url and "x=time" in r.url
                              and f"start={first_us + 1000}" in r.url):
        page2.evaluate("Plotly.relayout('ts-timeline', {'xaxis.range': [1, 2]})")
    page2.wait_for_function("(new URLSearchParams(location.search).get('win') || '').includes(',')")
    assert page2.input_value("#ts-xmode") == "time"


def test_snapshot_oom_events_overflow_and_devices(open_page, snap_server):
    ov = _api(snap_server, "overview", run=BUILT, host="cuda:0")
    oom = ov["ooms"][0]
    page = open_page(snap_server)
    _open(page, _view_url(snap_server, run=BUILT, tool="memory_profile", host="cuda:0"))
    # The ring-buffer flag is a warning at the top; the OOM has its row, from the file.
    assert "Events may be missing" in page.inner_text("#ts-overflow")
    row = page.locator(f"#ts-ooms tr[data-event='{oom['event']}']")
    cells = row.locator("td").all_inner_texts()
    fmt = lambda v: page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", v)
    assert cells[1:] == [fmt(oom["requestedBytes"]), fmt(oom["deviceFreeBytes"]), fmt(oom["liveBytes"]),
                         fmt(oom["reservedBytes"]), fmt(oom["largestFreeBlock"])]
    assert oom["requestedBytes"] == 64 * b.GB and oom["deviceFreeBytes"] == 123 * b.MB
    # Clicking it selects the event: the allocator state at the OOM.
    row.click()
    page.wait_for_selector(f"#ts-state[data-event='{oom['event']}']")
    assert parse_qs(urlparse(page.url).query)["t"] == [str(oom["event"])]
    page.screenshot(path=str(ARTIFACTS / "snapshot_oom.png"), full_page=True)
    # Both devices are hosts; the second has no OOM.
    assert page.locator("#pick-host option").all_inner_texts() == ["cuda:0", "cuda:1"]
    page.select_option("#pick-host", "cuda:1")
    page.wait_for_function("document.querySelector('#ts-head, .ts-head') && document.querySelector('.ts-head').textContent.includes('cuda:1')")
    page.wait_for_selector("#ts-overview")
    assert page.locator("#ts-ooms").count() == 0
