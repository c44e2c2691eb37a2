"""The memory viewer's compare view (issue 36 item 1) in Debian's Chromium (Playwright),
network cut, on the two-batch JAX program of scripts/make_oom_programs.py: both heap curves
on one chart, the buffers at each peak side by side, a matched pair lit on hover, the delta
tables; every number checked against the data route's diff JSON. Screenshots go to
test-artifacts/."""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS
from tests.test_browser_oom_risk import _run, _url, two_batch_server  # noqa: F401  (the module fixture)
from tests.test_oom_risk_verdict import two_batch  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.browser
SMALL, BIG = "jit_train_step(32)", "jit_train_step_big(34)"


@pytest.fixture(scope="module")
def server(two_batch_server):  # noqa: F811
    return two_batch_server


def _get(server, path, **params):
    with urlopen(f"{server}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def test_two_heaps_side_by_side_peaks_and_a_lit_pair(server, open_page):
    run = _run(server, "two_batch")
    d = _get(server, "data/plugin/profile/data", run=run, tag="memory_viewer", module_name=BIG, base_module=SMALL,
             view="page")
    assert d["comparable"] and d["totals"]["residual"] == 0
    page = open_page(server)
    # The single view's "Compare with…" picker: a base module puts base_module in the URL.
    page.goto(_url(server, run=run, tool="memory_viewer", module_name=BIG))
    page.wait_for_selector("#mv-heap-chart .main-svg", timeout=90_000)
    page.wait_for_selector(f"#cmp-base-module option[value='{SMALL}']", state="attached")
    page.select_option("#cmp-base-module", SMALL)
    page.wait_for_selector("#mvc-heap .main-svg", timeout=90_000)
    assert f"base_module={quote(SMALL)}" in page.url
    page.wait_for_selector("#mvc-rows tbody tr")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_compare_two_batch.png"), full_page=True)

    # The totals are the diff's, to the byte.
    delta = page.locator("#mvc-delta")
    assert f"{d['totals']['delta']:,} bytes" in delta.get_attribute("title")
    assert "residual 0 B" in delta.inner_text()
    # Both curves on one chart, each reaching its module's peak.
    traces = page.evaluate("document.getElementById('mvc-heap').data.filter(t => t.mode === 'lines')"
                           ".map(t => [t.name, Math.max(...t.y)])")
    assert [t[0].split(":")[0] for t in traces] == ["base", "current"]
    assert [t[1] for t in traces] == [max(d["heap"]["base"]["mib"]), max(d["heap"]["current"]["mib"])]
    assert traces[1][1] > traces[0][1]
    # The buffers at each peak, side by side: as many as the diff lists.
    for side in ("base", "current"):
        assert page.locator(f"#mvc-peak-{side} .mvc-buf").count() == len(d["peak_buffers"][side]["buffers"])
    # Hover the largest paired buffer whose size changed: its pair at the other peak and its
    # table row light up, nothing else.
    row = next(r for r in d["rows"] if r["in"] == "both" and r["delta"] != 0)
    current_item = page.locator(f"#mvc-peak-current .mvc-buf[data-row='{row['key']}']")
    base_item = page.locator(f"#mvc-peak-base .mvc-buf[data-row='{row['key']}']")
    assert current_item.count() == 1 and base_item.count() == 1
    page.locator(".mvc-peaks").scroll_into_view_if_needed()
    current_item.hover()
    assert "mvc-lit" in base_item.get_attribute("class")
    lit = page.evaluate("[...document.querySelectorAll('.mvc-lit')].map(n => n.getAttribute('data-row'))")
    assert set(lit) == {row["key"]} and len(lit) == 3
    assert page.locator("#mvc-rows tr:has(.mvc-lit)").count() == 1
    page.locator(".mvc-peaks").screenshot(path=str(ARTIFACTS / "memory_viewer_compare_peaks_lit.png"))
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_compare_top.png"))
    # The delta table: one line per row, largest change first.
    first = page.locator("#mvc-rows tbody tr").first.inner_text()
    assert d["rows"][0]["label"] in first
    assert page.locator("#mvc-rows tbody tr").count() == len(d["rows"])
    cats = page.locator("#mvc-group-category tbody tr")
    assert cats.count() == len(d["groups"]["category"])
    # Back to the single module: the compare keys leave the URL.
    page.click("#mvc-single")
    page.wait_for_selector("#mv-heap-chart .main-svg", timeout=90_000)
    assert "base_module" not in page.url
    # Each row opens either side's single view on its buffer.
    page.go_back()
    page.wait_for_selector("#mvc-rows tbody tr", timeout=90_000)
    page.locator(f"#mvc-rows tr:has([data-row='{row['key']}']) a.cmp-link", has_text="base").click()
    page.wait_for_selector("#mv-heap-chart .main-svg", timeout=90_000)
    assert f"buffer={row['id_base']}" in page.url and f"module_name={quote(SMALL)}" in page.url
    assert row["label"] in page.inner_text("#mv-card")


def test_unrelated_modules_say_why(server, open_page):
    run = _run(server, "two_batch")
    d = _get(server, "data/plugin/profile/data", run=run, tag="memory_viewer", module_name=BIG,
             base_module="jit_stage(0)", view="page")
    page = open_page(server)
    page.goto(_url(server, run=run, tool="memory_viewer", module_name=BIG, base_module="jit_stage(0)"))
    page.wait_for_selector("#cmp-why", timeout=90_000)
    assert "different programs" in page.inner_text("#cmp-why")
    # jit_stage(0) has no heap-simulator event (its peak is its parameter and output): the
    # base is drawn as a flat line at its peak, not left out.
    assert d["heap"]["base"]["mib"] == [] and d["heap"]["base"]["peak_mib"] > 0
    page.wait_for_selector("#mvc-heap .main-svg")
    base = page.evaluate("document.getElementById('mvc-heap').data.find(t => t.name.startsWith('base:')).y")
    assert base == [d["heap"]["base"]["peak_mib"]] * 2
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_compare_unrelated.png"), full_page=True)
