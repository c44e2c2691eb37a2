"""The memory profile page's "All hosts" section end to end: the real server, Debian's
Chromium driven by Playwright, network cut, no mocks. The session is made of different
real profiles as hosts (tests/test_memory_hosts.py ``build_multi_host``: TF CPU BFC, JAX
ROCm MI300, JAX TPU, and a JAX CPU profile without allocator events). The section lists
the hosts worst first with the API's peaks, names the imbalance in words, and a click on
a host opens that host's memory profile with host= in the URL. Screenshot:
test-artifacts/memory_hosts.png."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_memory_hosts import build_multi_host

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("hostslog")
    run = build_multi_host(root, shared_fixtures)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url, run


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _fmt(page, n) -> str:
    return page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", n)


def test_all_hosts_worst_first_and_a_click_switches_host(open_page, server):
    ARTIFACTS.mkdir(exist_ok=True)
    url, run = server
    api = _get_json(url, "/api/memory_hosts", run=run)
    page = open_page(url)
    page.goto(f"{url}?{urlencode({'run': run, 'tool': 'memory_profile'}, quote_via=quote)}")
    page.wait_for_selector("#mp-hosts #mp-hosts-list")
    page.wait_for_selector("#mp-summary")  # the first host's own profile below the section

    # Worst first, as the API; the host on screen (the first, no host= yet) is marked.
    rows = page.locator("#mp-hosts-list .mp-host-row")
    assert [rows.nth(i).get_attribute("data-host") for i in range(rows.count())] == [h["host"] for h in api["hosts"]]
    assert [rows.nth(i).get_attribute("data-host") for i in range(rows.count())] == ["host03", "host02", "host01", "host04"]
    for h in api["hosts"]:
        row = page.locator(f"#mp-hosts-list .mp-host-row[data-host={h['host']}]")
        assert row.get_attribute("data-status") == h["status"]
        if h["status"] == "ok":
            assert int(row.get_attribute("data-peak")) == h["peakBytes"]
            assert row.locator(".mp-host-peak").inner_text() == _fmt(page, h["peakBytes"])
        else:
            assert "no allocator events" in row.inner_text()
    assert page.get_attribute("#mp-hosts-list .mp-host-row.current", "data-host") == "host01"

    # The imbalance in words: "host03 peaks at 20.02 GiB (...), 44.56× the median host (...)".
    roll = api["rollup"]
    sentence = page.inner_text("#mp-hosts-summary")
    assert sentence.startswith(f"host03 peaks at {_fmt(page, roll['maxBytes'])}")
    assert f"{roll['maxOverMedian']:.2f}× the median host ({_fmt(page, roll['medianBytes'])})" in sentence
    assert float(page.get_attribute("#mp-hosts-stats [data-key=imbalance]", "data-value")) == pytest.approx(roll["imbalance"])
    # host03's capacity (XProf's memoryCapacity) is within the scale: its line is drawn.
    assert page.locator("#mp-hosts-list .mp-host-row[data-host=host03] .mp-host-cap").count() == 1
    page.locator("#mp-hosts").screenshot(path=str(ARTIFACTS / "memory_hosts.png"))
    page.screenshot(path=str(ARTIFACTS / "memory_hosts_page.png"), full_page=True)

    # A click opens that host's memory profile, with host= in the URL (shareable).
    page.click("#mp-hosts-list .mp-host-row[data-host=host03] a.mp-host-link")
    page.wait_for_function("() => new URLSearchParams(location.search).get('host') === 'host03'")
    page.wait_for_selector("#mp-hosts-list .mp-host-row.current[data-host=host03]")
    page.wait_for_selector("#mp-summary")
    assert parse_qs(urlparse(page.url).query)["host"] == ["host03"]
    assert "host host03" in page.inner_text(".mp-subtitle")
    # ... on the allocator of that host's peak, not the first one by name.
    worst = api["hosts"][0]
    assert parse_qs(urlparse(page.url).query)["memory_id"] == [worst["memoryId"]]
    assert page.input_value("#mp-allocator") == worst["memoryId"]
    assert page.input_value("#pick-host") == "host03"

    # The copied link reopens the same host in a fresh page; the host without events says so.
    again = open_page(url)
    again.goto(page.url)
    again.wait_for_selector("#mp-hosts-list .mp-host-row.current[data-host=host03]")
    again.click("#mp-hosts-list .mp-host-row[data-host=host04] a.mp-host-link")
    again.wait_for_selector("#mp-empty")
    assert parse_qs(urlparse(again.url).query)["host"] == ["host04"]
    assert worst["host"] == "host03"
