"""The trace viewer page's "All hosts" section end to end: the real server, Debian's
Chromium driven by Playwright, network cut, no mocks. The session is made of different
real profiles as hosts (tests/test_trace_hosts.py ``build_mixed_session``: JAX CPU MLP,
convnet and transformer, TF CPU BFC, TF GPU, JAX TPU, ROCm MI300, a corrupt TPU file).
The section lists the hosts slowest first with the API's step times and idle shares,
says the roll-up in words, a click on a host opens that host's timeline with host= in
the URL, and ticked hosts open as one merged timeline with hosts= in the URL, which a
fresh page reopens. Screenshots: test-artifacts/trace_hosts.png (the section),
trace_hosts_page.png and trace_hosts_merged.png (two hosts in one timeline)."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_trace_hosts import build_mixed_session

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("tracehostslog")
    run, _ = build_mixed_session(root, shared_fixtures)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url, run


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _dur(page, ps) -> str:
    return page.evaluate("ps => import('/static/lib/format.js').then((m) => m.fmtDur(ps / 1e9))", ps)


def _query(page) -> dict:
    return parse_qs(urlparse(page.url).query)


def test_all_hosts_slowest_first_links_and_a_subset(open_page, server):
    ARTIFACTS.mkdir(exist_ok=True)
    url, run = server
    api = _get_json(url, "/api/trace_hosts", run=run)
    page = open_page(url)
    page.goto(f"{url}?{urlencode({'run': run, 'tool': 'trace_viewer'}, quote_via=quote)}")
    page.wait_for_selector("#tvh #tvh-list .tvh-row[data-host]")
    page.wait_for_selector("#tv-canvas")

    # Slowest first, as the API; the host on screen (the first, no host= yet) is marked.
    rows = page.locator("#tvh-list .tvh-row[data-host]")
    order = [rows.nth(i).get_attribute("data-host") for i in range(rows.count())]
    assert order == [h["host"] for h in api["hosts"]]
    assert order[-1] == "host08"
    for h in api["hosts"]:
        row = page.locator(f"#tvh-list .tvh-row[data-host={h['host']}]")
        assert row.get_attribute("data-status") == h["status"]
        if h["status"] != "ok":
            assert "truncated" in row.inner_text()
            continue
        if h["stepPs"] is None:
            assert "no step markers" in row.inner_text()
        else:
            assert float(row.get_attribute("data-step-ps")) == pytest.approx(h["stepPs"])
            assert row.locator(".tvh-step").inner_text() == _dur(page, h["stepPs"])
            width = row.locator(".tvh-bar.step").evaluate("b => parseFloat(b.style.width)")
            assert width == pytest.approx(100 * h["stepPs"] / api["rollup"]["maxStepPs"], abs=0.01)
        if h["idleShare"] is None:
            assert "no device ops" in row.inner_text()
        else:
            assert float(row.get_attribute("data-idle-share")) == pytest.approx(h["idleShare"])
    assert page.get_attribute("#tvh-list .tvh-row.current", "data-host") == "host01"
    roll = api["rollup"]
    assert page.inner_text("#tvh-summary") == roll["summary"]
    assert page.get_attribute("#tvh-stats [data-key=stragglers]", "data-value") == ",".join(roll["stragglers"])
    slowest = roll["slowestHost"]
    assert order[0] == slowest
    # stragglers' bars are drawn in the alarm colour
    for h in roll["stragglers"]:
        assert page.locator(f".tvh-row[data-host={h}] .tvh-bar.step.straggler").count() == 1
    page.locator("#tvh").screenshot(path=str(ARTIFACTS / "trace_hosts.png"))
    page.screenshot(path=str(ARTIFACTS / "trace_hosts_page.png"), full_page=True)

    # A click on a host opens its timeline, with host= in the URL.
    page.click(f"#tvh-list .tvh-row[data-host={slowest}] a.tvh-link")
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('host') === {json.dumps(slowest)}")
    page.wait_for_selector(f"#tvh-list .tvh-row.current[data-host={slowest}]")
    assert f"host {slowest}" in page.inner_text(".tv-subtitle")
    page.wait_for_selector("#tv-canvas")

    # Two ticked hosts open as one merged timeline: hosts=a,b in the URL.
    pair = order[:2]
    page.click("#tvh-pick-none")
    for h in pair:
        page.check(f"#tvh-list .tvh-row[data-host={h}] input[type=checkbox]")
    assert page.inner_text("#tvh-open") == "Open 2 hosts in one timeline"
    page.click("#tvh-open")
    page.wait_for_function("() => (new URLSearchParams(location.search).get('hosts') || '').includes(',')")
    assert _query(page)["hosts"] == [",".join(pair)] and "host" not in _query(page)
    page.wait_for_selector("#tvh-list .tvh-row.current >> nth=1")
    assert sorted(page.locator("#tvh-list .tvh-row.current").evaluate_all("rs => rs.map((r) => r.dataset.host)")) == sorted(pair)
    assert f"hosts {pair[0]}, {pair[1]}" in page.inner_text(".tv-subtitle")
    assert page.inner_text("#tv-hosts summary") == "2 hosts"  # the top bar's picker agrees
    # The merged timeline has both hosts' processes.
    page.wait_for_function("() => document.querySelector('#tv-counts') && document.querySelector('#tv-counts').textContent.length > 0")
    page.screenshot(path=str(ARTIFACTS / "trace_hosts_merged.png"))

    # The copied link reopens the same subset in a fresh page, boxes ticked.
    again = open_page(url)
    again.goto(page.url)
    again.wait_for_selector("#tvh-list .tvh-row.current >> nth=1")
    ticked = again.locator("#tvh-list input[type=checkbox]:checked").evaluate_all("bs => bs.map((b) => b.value)")
    assert sorted(ticked) == sorted(pair)
    # "Choose the stragglers" ticks exactly the API's stragglers
    if roll["stragglers"]:
        again.click("#tvh-pick-stragglers")
        ticked = again.locator("#tvh-list input[type=checkbox]:checked").evaluate_all("bs => bs.map((b) => b.value)")
        assert sorted(ticked) == sorted(roll["stragglers"])
