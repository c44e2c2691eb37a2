"""The trace viewer's preview, in Chromium, against ``profscope serve`` in its own process:
while another process holds a run's index build (its single-flight lock: a second server
replica on one cache, say) and has published the preview, the page draws the preview,
inert, under a note; once the build lock is released the page's own request builds the
index and the same slices are drawn from it, with their flows and real ids."""

from __future__ import annotations

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


def test_page_draws_the_preview_until_the_index_answers(open_page, shared_fixtures, tmp_path):
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
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "another replica is building this index"
        _build(session / "gpu-host.xplane.pb", tmp_path / "elsewhere", preview=(ws.cache.preview_dir(key), 1200))
        with profscope_server("serve", str(tmp_path / "logdir"), "--port", "0", "--cache-dir", str(cache_dir)) as (url, _):
            page = open_page(url)
            page.goto(f"{url}?{urlencode({'run': run.name, 'tool': 'trace_viewer@'}, quote_via=quote)}")
            page.wait_for_selector("#tv-preview", timeout=60_000)
            assert page.locator("#tv").get_attribute("data-preview") == "1"
            assert "preview" in page.locator("#tv-counts").inner_text()
            assert page.locator("#tv canvas").first.evaluate("c => getComputedStyle(c).pointerEvents") == "none"
            previewed = page.locator("#tv-counts").inner_text()
            page.screenshot(path=str(ARTIFACTS / "trace_preview.png"))
            fcntl.flock(lock, fcntl.LOCK_UN)  # the page's request now builds the index itself
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
    session = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    shutil.copy(shared_fixtures / GPU, session / "gpu-host.xplane.pb")
    cache_dir = tmp_path / "cache"
    ws = Workspace(LogDir(str(tmp_path / "logdir"), listing_ttl=0), DiskCache(cache_dir))
    run = ws.runs()[0]
    host, info = ws.trace_sources(run)[0]
    lock_path = eviction.lock_path(cache_dir, ws._trace_index_key(host, info))
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "another replica is building this index", no preview yet
        with profscope_server("serve", str(tmp_path / "logdir"), "--port", "0", "--cache-dir", str(cache_dir)) as (url, _):
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
            fcntl.flock(lock, fcntl.LOCK_UN)  # the page's own request builds the index now
            page.wait_for_function("window.__traceViewer && __traceViewer.ready()", timeout=90_000)
            assert not console, console
            page.screenshot(path=str(ARTIFACTS / "trace_preview_polled_done.png"))
