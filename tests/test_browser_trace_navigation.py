"""Trace viewer navigation (issue 16): a link whose window lies outside the trace is
clamped to it, refetched, written back to the URL and said so; Reset zoom and the `0` key
always come back to the whole trace. Real server on the bundled demo, Debian's Chromium."""

from __future__ import annotations

import pytest

from tests.test_browser_trace_viewer import _get_json, _hook, _open, _query, _ready, mlp_run, server_url  # noqa: F401

pytestmark = pytest.mark.browser

SHOTS = "/tmp/shots/t1"


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
