"""The Content-Security-Policy (server/guard.py) in a real headless Chromium: the main
page and every tool page of the demo, served by ``profscope serve`` as a user runs it,
draw their charts with no CSP violation (nor any other console error: ``open_page``);
and the policy is enforced (an inline handler injected into the page is blocked).
Screenshots go to test-artifacts/security-*.png for a person to look at."""

from __future__ import annotations

import time
from urllib.parse import quote, urlencode

import pytest

from profscope.server.guard import CSP
from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.browser

PROFILE = "mlp/2026_11_29_19_47_08"
MODULE = "jit_train_step(14)"

# Listens before any page script runs (Playwright's init scripts are not page content,
# so the policy does not apply to them).
WATCH_CSP = """
window.__csp = [];
document.addEventListener('securitypolicyviolation',
  e => window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline') + ' ' + (e.sourceFile || '')));
"""

# (name, query of the main page, what shows the page drew)
PAGES = [
    ("summary", {"run": PROFILE}, "document.querySelector('#sm-findings') !== null"),  # the page a run opens on
    ("overview", {"run": PROFILE, "tool": "overview"}, "document.querySelector('#sizes .main-svg') !== null"),
    ("memory-viewer", {"run": PROFILE, "tool": "memory_viewer", "module_name": MODULE},
     "document.querySelectorAll('.main-svg').length >= 3"),
    ("memory-profile", {"run": "tf_bfc/2026_11_29_18_51_13", "tool": "memory_profile", "host": "vm"},
     "document.querySelectorAll('.main-svg').length >= 1"),
    ("trace-viewer", {"run": PROFILE, "tool": "trace_viewer@"},
     "window.__traceViewer && __traceViewer.ready()"),
    ("oom-risk", {"run": PROFILE, "tool": "oom_risk"}, "document.querySelectorAll('.main-svg').length >= 1"),
    ("snapshot", {"run": "torch_snapshots/flexgen_oom.pickle", "tool": "memory_profile"},
     "document.querySelectorAll('.main-svg').length >= 1"),
    ("torch-trace-memory", {"run": "torch/mlp_train.pt.trace.json.gz", "tool": "memory_profile"},
     "document.querySelectorAll('.main-svg').length >= 1"),
    ("torch-trace-timeline", {"run": "torch/mlp_train.pt.trace.json.gz", "tool": "trace_viewer@"},
     "window.__traceViewer && __traceViewer.ready()"),
    ("dump-memory-viewer", {"run": "dumps/mlp", "tool": "memory_viewer", "module_name": MODULE},
     "document.querySelectorAll('.main-svg').length >= 3"),
]


def _violations(page) -> list[str]:
    return page.evaluate("window.__csp")


def _wait(page, expression: str, timeout_s: float = 120) -> None:
    """Poll ``expression`` from here: page.evaluate runs through the DevTools protocol,
    which the page's policy does not govern, while wait_for_function polls with eval()
    in the page, which it refuses (no 'unsafe-eval')."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(f"() => Boolean({expression})"):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.2)


@pytest.mark.parametrize("name,query,drawn", PAGES, ids=[p[0] for p in PAGES])
def test_pages_draw_under_the_csp(open_page, demo_server, name, query, drawn):
    ARTIFACTS.mkdir(exist_ok=True)
    page = open_page(demo_server, csp=True)
    page.add_init_script(WATCH_CSP)
    response = page.goto(f"{demo_server}?{urlencode(query, quote_via=quote)}")
    assert response.headers["content-security-policy"] == CSP
    _wait(page, drawn)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(ARTIFACTS / f"security-{name}.png"), full_page=False)
    assert _violations(page) == []


def test_allocation_timeline_page_under_the_csp(open_page, demo_server):
    """XProf's "view memory allocation timeline" answer, an HTML page of its own."""
    page = open_page(demo_server, csp=True)
    page.add_init_script(WATCH_CSP)
    query = urlencode({"run": "dumps/mlp", "tag": "memory_viewer", "module_name": MODULE,
                       "view_memory_allocation_timeline": "1"})
    response = page.goto(f"{demo_server}data/plugin/profile/data?{query}")
    assert response.headers["content-security-policy"] == CSP
    assert page.locator("#allocation-timeline rect.buffer").count() > 0
    # Its inline styles apply (style-src 'unsafe-inline'): the body's font is sans-serif.
    assert "sans-serif" in page.evaluate("getComputedStyle(document.body).fontFamily")
    page.screenshot(path=str(ARTIFACTS / "security-allocation-timeline.png"), full_page=False)
    assert _violations(page) == []


def test_the_policy_blocks_injected_script(browser, demo_server):
    """What the policy is for: markup that came from data (a run name, an op name) cannot
    run. An inline handler and an inline script put into the page are refused."""
    ctx = browser.new_context(bypass_csp=False)
    try:
        page = ctx.new_page()
        page.add_init_script(WATCH_CSP)
        page.goto(demo_server)
        page.wait_for_selector("#run-title")
        page.evaluate("""() => {
            window.__ran = [];
            document.body.insertAdjacentHTML('beforeend', '<img src="data:," onload="window.__ran.push(1)">');
            const s = document.createElement('script');
            s.textContent = 'window.__ran.push(2)';
            document.body.appendChild(s);
        }""")
        _wait(page, "window.__csp.length >= 2", 30)
        assert page.evaluate("window.__ran") == []
        assert all(v.startswith("script-src") for v in _violations(page)), _violations(page)
    finally:
        ctx.close()


def test_token_url_in_a_browser(open_page, tmp_path):
    """``serve --host 0.0.0.0``: the printed URL opens the dashboard, the token leaves the
    address bar for an HttpOnly cookie, and the page's requests (and a data-API fetch as
    XProf's frontend makes it, same origin) are answered with it."""
    from tests.conftest import profscope_server

    with profscope_server("serve", "--demo", "--host", "0.0.0.0", "--port", "0", "--cache-dir", str(tmp_path)) as (url, _):
        assert "?token=" in url
        page = open_page(url, csp=True)
        page.goto(url)
        page.wait_for_selector("#run-title", timeout=120_000)
        assert "token" not in page.url
        assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
        status = page.evaluate("() => fetch('/data/plugin/profile/runs').then(r => r.status)")
        assert status == 200
        # The run's Summary (the page it opens on) answered with the cookie too; and it is
        # done before the server stops, which would answer it 503.
        page.wait_for_selector("#sm-status", timeout=120_000)
        # (Without the cookie the same fetch is a 401: tests/test_server_security.py.)
