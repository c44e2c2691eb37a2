"""The trace viewer's preview, in Chromium, against ``profscope serve`` in its own process:
while another process holds a run's index build (its single-flight lock: a second server
replica on one cache, say) and has published the preview, the page draws the preview,
inert, under a note; once the build lock is released the page's own request builds the
index and the same slices are drawn from it, with their flows and real ids."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from urllib.parse import quote, urlencode

import pytest

from profscope.app.workspace import Workspace
from profscope.cache import eviction
from profscope.cache.store import DiskCache
from profscope.storage import LogDir
from profscope.tools import trace_index as ti
from tests.conftest import ARTIFACTS, profscope_server
from tests.test_trace_preview import GPU, _build

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(ti._native is None, reason="the preview's picks come from the native build")]


def _held_preview(shared_fixtures, tmp_path):
    """A log dir with the GPU profile, and where another "replica" building its index
    holds the build lock (the caller takes it, and publishes the preview if it wants one)."""
    session = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    shutil.copy(shared_fixtures / GPU, session / "gpu-host.xplane.pb")
    cache_dir = tmp_path / "cache"
    ws = Workspace(LogDir(str(tmp_path / "logdir"), listing_ttl=0), DiskCache(cache_dir))
    run = ws.runs()[0]
    host, info = ws.trace_sources(run)[0]
    key = ws._trace_index_key(host, info)
    lock_path = eviction.lock_path(cache_dir, key)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    return run, key, ws, lock_path, cache_dir, session / "gpu-host.xplane.pb"


@contextlib.contextmanager
def _replica_building(shared_fixtures, tmp_path, preview: bool = True):
    """``profscope serve`` on the GPU profile while another "replica" holds its index build
    (the lock) and, with ``preview``, has published the preview at 1200 px: yields the
    server's URL, the run and ``release``, which lets the page's own request build."""
    run, key, ws, lock_path, cache_dir, path = _held_preview(shared_fixtures, tmp_path)
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if preview:
            _build(path, tmp_path / "elsewhere", preview=(ws.cache.preview_dir(key), 1200))
        with profscope_server("serve", str(tmp_path / "logdir"), "--port", "0", "--cache-dir", str(cache_dir)) as (url, _):
            yield url, run, lambda: fcntl.flock(lock, fcntl.LOCK_UN)


def _settle(page, previewing: bool) -> None:
    page.wait_for_function(f"window.__traceViewer && __traceViewer.previewing() === {str(previewing).lower()} && __traceViewer.settled()",
                           timeout=90_000)


def test_page_draws_the_preview_until_the_index_answers(open_page, shared_fixtures, tmp_path):
    with _replica_building(shared_fixtures, tmp_path) as (url, run, release):
        page = open_page(url)
        page.goto(f"{url}?{urlencode({'run': run.name, 'tool': 'trace_viewer@'}, quote_via=quote)}")
        page.wait_for_selector("#tv-preview", timeout=60_000)
        assert page.locator("#tv").get_attribute("data-preview") == "1"
        assert "preview" in page.locator("#tv-counts").inner_text()
        # the canvas takes input during the preview (test_preview_is_interactive... uses it)
        assert page.locator("#tv canvas").first.evaluate("c => getComputedStyle(c).pointerEvents") != "none"
        previewed = page.locator("#tv-counts").inner_text()
        page.screenshot(path=str(ARTIFACTS / "trace_preview.png"))
        release()  # the page's request now builds the index itself
        page.wait_for_selector("#tv-preview", state="detached", timeout=60_000)
        assert page.locator("#tv").get_attribute("data-preview") is None
        final = page.locator("#tv-counts").inner_text()
        assert "preview" not in final
        # the same slices out of the same total (the counts' first words), now with flows
        assert final.split(" events")[0] == previewed.split(" events")[0]
        page.screenshot(path=str(ARTIFACTS / "trace_preview_done.png"))


def test_page_waiting_for_a_preview_logs_no_console_error(open_page, shared_fixtures, tmp_path):
    """Every trace page asks /api/trace/preview while its first window is on its way; "no
    preview yet" is a state it polls (200, ``state: pending``), not a 404, which Chromium
    logged as a red console error on every trace page. The page is opened expecting no
    error status at all, waits through several polls while another process holds the
    index build, then draws the trace once the build is its own."""
    with _replica_building(shared_fixtures, tmp_path, preview=False) as (url, run, release):  # no preview yet
        page = open_page(url, shown=())  # any 4xx/5xx the page meets is an error
        console = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        answers = []
        page.on("response", lambda r: answers.append(r.status) if "/api/trace/preview" in r.url else None)
        page.goto(f"{url}?{urlencode({'run': run.name, 'tool': 'trace_viewer@'}, quote_via=quote)}")
        for _ in range(100):  # the page polls every 0.4 s
            if len(answers) >= 3:
                break
            page.wait_for_timeout(100)
        assert len(answers) >= 3 and set(answers) == {200}, answers
        page.screenshot(path=str(ARTIFACTS / "trace_preview_pending.png"))
        release()  # the page's own request builds the index now
        page.wait_for_function("window.__traceViewer && __traceViewer.ready()", timeout=90_000)
        assert not console, console
        page.screenshot(path=str(ARTIFACTS / "trace_preview_polled_done.png"))


def test_preview_is_interactive_and_the_index_replaces_it(open_page, shared_fixtures, tmp_path):
    with _replica_building(shared_fixtures, tmp_path) as (url, run, release):
        page = open_page(url)
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(f"{url}?{urlencode({'run': run.name, 'tool': 'trace_viewer@'}, quote_via=quote)}")
        page.wait_for_selector("#tv-preview", timeout=60_000)
        _settle(page, True)
        full = page.evaluate("__traceViewer.window()")
        page.screenshot(path=str(ARTIFACTS / "trace_preview_interactive_0.png"))
        # zoom: the wheel over the longest preview slice on screen
        target = max(page.evaluate("__traceViewer.visibleSlices()"), key=lambda v: v["w"])
        page.mouse.move(target["x"] + min(target["w"], 40) / 2, target["y"] + target["h"] / 2)
        for _ in range(3):
            page.mouse.wheel(0, -300)
            page.wait_for_timeout(50)
        _settle(page, True)
        zoomed = page.evaluate("__traceViewer.window()")
        assert zoomed[1] - zoomed[0] < (full[1] - full[0]) / 10
        assert page.evaluate("__traceViewer.dataWindow()") == zoomed  # answered, from the preview
        counts = page.locator("#tv-counts").inner_text()
        assert "preview: coarse, the short slices arrive with the index" in counts
        assert "start_ms=" in page.url  # the window in the URL
        # details: click the widest slice in view
        sl = max((v for v in page.evaluate("__traceViewer.visibleSlices()") if len(v["name"]) >= 4), key=lambda v: v["w"])
        assert sl["w"] > 4
        page.mouse.click(sl["x"] + min(sl["w"], 40) / 2, sl["y"] + sl["h"] / 2)
        page.wait_for_selector("#tv-card-pending", timeout=30_000)
        assert page.evaluate("__traceViewer.selected()") == f"p{sl['id']}"
        assert page.locator(".tv-card-name").inner_text() == sl["name"]
        assert "track" in page.locator("#tv-card").inner_text()
        assert f"ev=p{sl['id']}" in page.url
        # search: the page's own box, answered from the preview and saying so
        q = sl["name"][: max(3, len(sl["name"]) // 2)]
        page.fill("#tv-search", q)
        page.press("#tv-search", "Enter")
        page.wait_for_selector("#tv-results-preview", timeout=30_000)
        head = page.locator("#tv-results-head").inner_text()
        assert "match" in head and q in head, head
        assert page.locator(".tv-match").count() >= 1
        assert "null" not in page.locator("#tv-results").inner_text()
        page.screenshot(path=str(ARTIFACTS / "trace_preview_interactive_1.png"), full_page=True)
        release()  # the page's own request builds the index now
        page.wait_for_selector("#tv-preview", state="detached", timeout=90_000)
        _settle(page, False)
        # the exact window the user is looking at, not the whole trace
        assert page.evaluate("__traceViewer.window()") == zoomed
        assert page.evaluate("__traceViewer.dataWindow()") == zoomed
        assert "preview" not in page.locator("#tv-counts").inner_text()
        # the same slice, now the index's: its id, args and event id in the card
        page.wait_for_function("/^[0-9]+$/.test(__traceViewer.selected())", timeout=30_000)
        page.wait_for_selector("#tv-card .tv-card-name", timeout=30_000)
        page.wait_for_function("!document.querySelector('#tv-card-pending')", timeout=30_000)
        assert page.locator(".tv-card-name").inner_text() == sl["name"]
        assert "event id" in page.locator("#tv-card").inner_text()
        assert f"ev={page.evaluate('__traceViewer.selected()')}" in page.url
        # the search asked again of the whole trace
        page.wait_for_selector("#tv-results-preview", state="detached", timeout=30_000)
        assert q in page.locator("#tv-results-head").inner_text()
        assert "null" not in page.locator("#tv-results").inner_text()
        page.screenshot(path=str(ARTIFACTS / "trace_preview_interactive_2.png"), full_page=True)


def test_a_link_to_a_preview_slice_after_the_build_says_it_is_gone(open_page, shared_fixtures, tmp_path):
    """ev=p<id> names a slice of the build's preview (its own ids): opened once the index
    is built there is no preview to ask, and the card says so instead of staying blank."""
    run, key, ws, lock_path, cache_dir, path = _held_preview(shared_fixtures, tmp_path)
    # built before the page opens: a build the page started would publish a preview that
    # has a p5 (the card would show it, then find it in the index: remapSelection)
    ws.trace_index(run, *ws.trace_sources(run)[0])
    with profscope_server("serve", str(tmp_path / "logdir"), "--port", "0", "--cache-dir", str(cache_dir)) as (url, _):
        page = open_page(url)
        page.goto(f"{url}?{urlencode({'run': run.name, 'tool': 'trace_viewer@', 'ev': 'p5'}, quote_via=quote)}")
        page.wait_for_selector("#tv-card-gone", timeout=90_000)
        assert "ev=p5" in page.locator("#tv-card-gone").inner_text()
        page.screenshot(path=str(ARTIFACTS / "trace_preview_link_gone.png"))
