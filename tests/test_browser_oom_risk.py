"""The OOM risk page and the offline HTML report in Debian's Chromium (Playwright), the
network cut, on the real JAX programs of scripts/make_oom_programs.py and the demo's
PyTorch snapshot. Screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_oom_risk import programs  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def oom_server(tmp_path_factory, programs):  # noqa: F811
    with profscope_server("serve", str(programs[0]), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _api(server, **params):
    with urlopen(f"{server}data/plugin/profile/data?{urlencode({'tag': 'oom_risk', **params})}", timeout=120) as res:
        return json.loads(res.read())


def _run(server, program):
    with urlopen(f"{server}data/plugin/profile/runs", timeout=30) as res:
        return next(r for r in json.loads(res.read()) if r.startswith(program + "/"))


def _url(server, **state):
    return f"{server}?{urlencode(state, quote_via=quote)}"


def test_page_headline_gauge_treemap_and_finding_links(oom_server, open_page):
    run = _run(oom_server, "remat_off")
    api = _api(oom_server, run=run, device_memory="100MB")
    page = open_page(oom_server)
    page.goto(_url(oom_server, run=run, tool="oom_risk", capacity="100MB"))
    page.wait_for_selector("#oom-gauge .main-svg")
    page.wait_for_selector("#oom-treemap .main-svg")
    assert page.inner_text("#oom-risk") == api["risk"] == "HIGH"
    assert page.locator("#oom-treemap g.slice").count() >= len(api["contributors"])
    assert page.input_value("#oom-capacity") == "100MB"
    assert "95.7 %" in page.inner_text("#oom-util")
    finding = page.locator('[data-finding="activations_dominate"]')
    assert "Activations dominate the peak" in finding.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_risk_page.png"), full_page=True)
    # The finding's link opens the memory viewer at the buffer behind it.
    finding.locator("a.oom-link").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('tool') === 'memory_viewer'")
    q = parse_qs(urlparse(page.url).query)
    assert q["module_name"] == [api["module"]] and q["buffer"][0].isdigit()
    page.wait_for_selector("#mv-card")
    # Back: the OOM risk page again, capacity still in the URL.
    page.go_back()
    page.wait_for_selector("#oom-risk")
    assert parse_qs(urlparse(page.url).query)["capacity"] == ["100MB"]


def test_capacity_input_goes_into_the_url(oom_server, open_page):
    run = _run(oom_server, "undonated")
    page = open_page(oom_server)
    page.goto(_url(oom_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-risk")
    assert page.inner_text("#oom-risk") == "UNKNOWN"
    page.fill("#oom-capacity", "40MB")
    page.press("#oom-capacity", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('capacity') === '40MB'")
    page.wait_for_selector("#oom-gauge .main-svg")
    assert page.inner_text("#oom-risk") == _api(oom_server, run=run, device_memory="40MB")["risk"] == "HIGH"
    assert page.locator('[data-finding="undonated_arguments"]').count() == 1


def test_unknown_device_name_is_a_clear_error_box(oom_server, browser):
    # Its own context: the 400 it provokes is logged by Chromium as a console error, which
    # open_page counts as a failure. The network is cut here too.
    run = _run(oom_server, "undonated")
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    outside = []
    ctx.route("**/*", lambda r: r.continue_() if urlparse(r.request.url).netloc == urlparse(oom_server).netloc
              else (outside.append(r.request.url), r.abort()))
    try:
        page = ctx.new_page()
        page.goto(_url(oom_server, run=run, tool="oom_risk"))
        page.wait_for_selector("#oom-capacity")
        page.fill("#oom-capacity", "Z9000")
        page.click("#oom-apply")
        page.wait_for_selector(".error")
        text = page.inner_text(".error")
        assert "unknown device memory 'Z9000'" in text and "HTTP 400" in text
    finally:
        ctx.close()
    assert not outside


def test_snapshot_run_page(demo_server, open_page):
    page = open_page(demo_server)
    page.goto(_url(demo_server, run="torch_snapshots/flexgen_oom.pickle", tool="oom_risk", host="cuda:0", capacity="12GB"))
    page.wait_for_selector("#oom-treemap .main-svg")
    assert page.inner_text("#oom-risk") == "HIGH"
    assert "init_weight" in page.inner_text("#oom-contributors")
    page.screenshot(path=str(ARTIFACTS / "oom_risk_snapshot.png"), full_page=True)


def test_html_report_offline_shows_its_charts(programs, tmp_path, open_page):  # noqa: F811
    out = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "profscope", "report", str(programs[0]), "--device-memory", "100MB",
                          "-o", str(out), "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    page = open_page(out.as_uri())  # only file:// is let through
    page.goto(out.as_uri())
    assert page.inner_text("#worst-risk") == "HIGH"
    sections = page.locator("section.run")
    assert sections.count() == 5
    for i in range(5):
        s = sections.nth(i)
        gauge = s.locator("svg.gauge rect.peak").bounding_box()
        assert gauge and gauge["width"] > 0
        assert s.locator("svg.treemap rect").count() >= 3
        box = s.locator("svg.treemap").bounding_box()
        assert box and box["width"] > 300 and box["height"] > 200
        assert s.locator("svg.modules rect").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "oom_report.png"), full_page=True)
    sections.nth(0).screenshot(path=str(ARTIFACTS / "oom_report_first_run.png"))


@pytest.fixture(scope="module")
def public_server(shared_fixtures, tmp_path_factory):
    with profscope_server("serve", str(shared_fixtures / "public_profiles"), "--port", "0", "--cache-dir",
                          str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_multi_host_page_shows_every_host_and_why_its_module(public_server, open_page):
    """tf_gpu (two hosts): the run is rated by its worst host, every host is a row that
    opens that host; a JAX ROCm profile says why its module was the one assessed."""
    run = "xplane/tf_gpu/GPU-multi-worker"
    api = _api(public_server, run=run)
    page = open_page(public_server)
    page.goto(_url(public_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-hosts")
    rows = page.locator("#oom-hosts tbody tr")
    assert rows.count() == len(api["hosts"]) == 2
    assert api["host"] in page.inner_text("#oom-host") and "worst" in page.inner_text("#oom-host")
    assert page.inner_text("#oom-risk") == api["risk"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "oom_risk_hosts.png"), full_page=True)
    other = api["hosts"][1]["host"]
    rows.nth(1).locator("a").click()
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('host') === {json.dumps(other)}")
    page.wait_for_selector("#oom-risk")

    run = "xplane/mi300_jax08_gemm/jax08_gemm"
    api = _api(public_server, run=run)
    page.goto(_url(public_server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-module")
    assert api["moduleChoice"]["rule"] in page.inner_text("#oom-module")
    assert api["module"] in page.inner_text("#oom-module")
