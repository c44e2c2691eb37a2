"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: ``shared/`` sits beside the checkout: <root>/main (this repo) and <root>/shared.
SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The real-data fixtures folder, ``../shared/fixtures`` next to the checkout.

    Skips when it is missing, except under CI (``CI`` set), where that is an error.
    """
    if not SHARED_FIXTURES.is_dir():
        message = f"shared fixtures not found at {SHARED_FIXTURES}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_FIXTURES


# -- profscope fixtures ------------------------------------------------------------------

import shutil  # noqa: E402

from fastapi.testclient import TestClient  # noqa: E402

from profscope.cache.store import DiskCache  # noqa: E402
from profscope.cache.workspace import Workspace  # noqa: E402
from profscope.cli import demo_logdir as _demo_logdir  # noqa: E402
from profscope.server import create_app  # noqa: E402
from profscope.storage import LogDir  # noqa: E402

DEMO = _demo_logdir()


@pytest.fixture(scope="session")
def demo_logdir() -> Path:
    """The demo bundled in the package: real JAX profiles and an XLA dump."""
    assert DEMO.is_dir(), f"bundled demo missing at {DEMO}"
    return DEMO


@pytest.fixture(scope="session")
def demo_expected(demo_logdir) -> dict:
    """What the demo generator recorded from JAX itself (module names, memory analysis)."""
    import json

    return json.loads((demo_logdir.parent / "expected.json").read_text())


@pytest.fixture
def demo_copy(tmp_path, demo_logdir) -> Path:
    """A private copy of the demo log directory that a test may change."""
    dest = tmp_path / "logdir"
    shutil.copytree(demo_logdir, dest)
    return dest


@pytest.fixture
def make_client(tmp_path):
    """``make_client(url_or_path)`` -> a TestClient over a fresh workspace and cache."""

    def make(url, **storage_options) -> TestClient:
        cache = DiskCache(tmp_path / "cache")
        ws = Workspace(LogDir(str(url), storage_options=storage_options or None, listing_ttl=0), cache)
        return TestClient(create_app(ws))

    return make


@pytest.fixture
def demo_client(make_client, demo_logdir) -> TestClient:
    return make_client(demo_logdir)


# -- live servers and the browser ---------------------------------------------------------

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from urllib.parse import urlparse  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"  # screenshots, gitignored
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def profscope_server(*args: str):
    """Run ``python -m profscope ARGS`` as a user would; yield (url, output lines so far)."""
    proc = subprocess.Popen([sys.executable, "-m", "profscope", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"serving at (http://\S+)", line)
            if m:
                yield m.group(1), lines
                break
        else:
            raise AssertionError("profscope did not start:\n" + "".join(lines))
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    """URL of ``profscope serve --demo`` on a free port with a private cache."""
    with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: run `make chromium`"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # Playwright's wait_for_function polls with eval() in the page, which profscope's
        # Content-Security-Policy (script-src 'self', no 'unsafe-eval') refuses: contexts
        # bypass the policy unless a test asks for it (bypass_csp=False), as
        # tests/test_browser_security.py does for every page.
        new_context = b.new_context

        def context(**options):
            options.setdefault("bypass_csp", True)
            return new_context(**options)

        b.new_context = context
        yield b
        b.close()


@pytest.fixture
def open_page(browser):
    """``open_page(server_url)``: a page in a fresh browser context whose network reaches
    only that server; the test fails if the page tried anything else or logged an error."""
    contexts, outside, errors = [], [], []

    def make(server, csp: bool = False):
        """``csp=True``: the page runs under the server's Content-Security-Policy (then
        wait with wait_for_selector or page.evaluate, not wait_for_function)."""
        allowed = urlparse(server).netloc
        ctx = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US", bypass_csp=not csp)
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
        # 4xx answers the page shows on purpose are logged by Chromium as console errors.
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "status of 404" not in m.text else None)
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert not outside, f"the page tried to reach the network: {outside}"
    assert not errors, f"errors in the page: {errors}"
