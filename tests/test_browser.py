"""End to end in a real headless Chromium (Debian's, driven by Playwright), network cut:
open the demo, pick a run, a tool and a module, reload the copied URL elsewhere and find
the same view; back and forward walk the views."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    proc = subprocess.Popen(
        [sys.executable, "-m", "profscope", "serve", "--demo", "--port", "0", "--cache-dir", str(cache)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        for line in proc.stdout:
            m = re.search(r"serving at (http://\S+)", line)
            if m:
                yield m.group(1)
                break
        else:
            pytest.fail("profscope did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: run `make chromium`"
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b
        b.close()


@pytest.fixture
def open_page(browser, server_url):
    """A page in a fresh context whose network reaches only the profscope server."""
    contexts, outside, errors = [], [], []
    allowed = urlparse(server_url).netloc

    def make():
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(ctx)

        def route(r):
            if urlparse(r.request.url).netloc == allowed or r.request.url.startswith("data:"):
                r.continue_()
            else:
                outside.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "404" not in m.text else None)
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert not outside, f"the page tried to reach the network: {outside}"
    assert not errors, f"errors in the page: {errors}"


def _state(page) -> dict:
    return {
        "run": page.eval_on_selector("#pick-run", "e => e.value"),
        "tool": page.eval_on_selector("#pick-tool", "e => e.value"),
        "module": page.eval_on_selector("#pick-module", "e => e.value"),
        "heading": page.inner_text("#view h1"),
    }


def test_pick_run_tool_module_and_reopen_the_link(open_page, server_url, demo_expected):
    ARTIFACTS.mkdir(exist_ok=True)
    mlp = demo_expected["programs"]["mlp"]
    mlp_run = f"mlp/{mlp['session']}"

    page = open_page()
    page.goto(server_url)
    page.wait_for_selector("#run-title")
    assert "run=" in page.url  # the first run was chosen and written into the URL
    page.select_option("#pick-run", mlp_run)
    page.wait_for_function(f"document.querySelector('#run-title')?.textContent === {mlp_run!r}")
    assert page.locator("#modules li").count() == len(mlp["metadata_modules"])
    page.wait_for_function("document.querySelector('#sizes .main-svg') !== null")  # Plotly drew, offline
    page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)

    page.click(f"#modules li:text-is('{mlp['profile_module_name']}')")
    page.wait_for_function(f"location.search.includes('module_name=')")
    page.select_option("#pick-tool", "memory_profile")  # a tool still to come: its 404 shows
    page.wait_for_selector("#view .error")
    assert "not available in this version" in page.inner_text("#view .error")
    state = _state(page)
    assert state == {"run": mlp_run, "tool": "memory_profile", "module": mlp["profile_module_name"], "heading": "Memory profile"}
    page.screenshot(path=str(ARTIFACTS / "tool.png"), full_page=True)
    link = page.url

    other = open_page()  # another browser profile: nothing shared but the URL
    other.goto(link)
    other.wait_for_selector("#view .error")
    assert _state(other) == state

    page.go_back()  # back to the overview of the module pick
    page.wait_for_selector("#run-title")
    assert _state(page)["tool"] == "" and _state(page)["module"] == mlp["profile_module_name"]
    page.go_forward()
    page.wait_for_selector("#view .error")
    assert _state(page) == state


def test_unknown_run_in_a_link_says_so(open_page, server_url):
    page = open_page()
    page.goto(server_url + "?run=nope%2F2020")
    page.wait_for_selector("#view .error")
    assert "no run named" in page.inner_text("#view .error")


def test_module_filter_narrows_the_picker(open_page, server_url, demo_expected):
    transformer = demo_expected["programs"]["transformer"]
    page = open_page()
    page.goto(f"{server_url}?run=transformer%2F{transformer['session']}")
    page.wait_for_selector("#run-title")
    page.fill("#module-filter", "train")
    options = page.eval_on_selector_all("#pick-module option", "os => os.map(o => o.value).filter(Boolean)")
    assert options == [transformer["profile_module_name"]]
    page.select_option("#pick-module", transformer["profile_module_name"])
    page.wait_for_function("location.search.includes('module_name=jit_train_step')")
