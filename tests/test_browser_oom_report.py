"""The offline HTML report of a whole log directory in Debian's Chromium (Playwright),
the network cut: a refused pickle among good runs, the real two-host TF GPU profile, the
summary table's links scrolling to each run's section. Screenshot in test-artifacts/."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ARTIFACTS
from tests.test_oom_risk_report_logdir import mixed  # noqa: F401  (the module fixture)

pytestmark = pytest.mark.browser


def test_report_summary_links_refused_and_hosts(mixed, open_page, tmp_path):  # noqa: F811
    logdir, _, cache = mixed
    out = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(logdir), "--device-memory", "12GB", "-o", str(out),
                          "--cache-dir", str(cache)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    page = open_page(out.as_uri())  # only file:// is let through
    page.goto(out.as_uri())
    assert page.inner_text("#worst-risk") == "OOM"
    rows = page.locator("table.summary tbody tr")
    sections = page.locator("section.run")
    assert rows.count() == sections.count() == 4
    assert "evil.pickle" in page.inner_text("#refused") and "posix.system" in page.inner_text("#refused")
    # The multi-host run shows both hosts.
    hosts = page.locator("table.hosts tbody tr")
    assert hosts.count() == 2 and "34.83.195.180_6003" in page.inner_text("table.hosts")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_report_logdir.png"), full_page=True)
    # Each summary link scrolls its run's section to the top of the window.
    for i in (1, 0):
        link = rows.nth(i).locator("a")
        target = link.get_attribute("href")
        link.click()
        page.wait_for_function("h => location.hash === h", arg=target)
        top = page.locator(target).bounding_box()["y"]
        assert abs(top) < 5, (target, top)
    page.click('a[href="#refused"]')
    page.wait_for_function("() => location.hash === '#refused'")
    # The top of the page (headline, summary, refused) as a reader first sees it; the page
    # is no wider than the window (long buffer and rule names wrap).
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "oom_report_logdir_top.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
