"""The memory profile page on a PyTorch trace without addresses (the 2021 ``[memory]``
format), served by the real CLI from a log directory where the trace is named
``rank-0.json.gz`` (found by its first bytes): the page shows the running-sum numbers,
says why per-allocation views are missing, and shows "never freed" as unknown, not 0."""

from __future__ import annotations

import json
import shutil
from urllib.parse import quote, urlencode
from urllib.request import urlopen

import pytest

from tests.conftest import profscope_server

pytestmark = pytest.mark.browser

RUN = "dist/rank-0.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("noaddr")
    (root / "dist").mkdir()
    shutil.copy(shared_fixtures / "public_profiles" / "traces" / "kineto_resnet50_v100.pt.trace.json.gz", root / RUN)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def test_page_says_the_trace_has_no_addresses(open_page, server):
    runs = _get_json(server, "/api/runs")["runs"]
    assert [(r["name"], r["kind"]) for r in runs] == [(RUN, "chrome_trace")]
    data = _get_json(server, "/api/memory_profile", run=RUN)
    page = open_page(server)
    page.goto(f"{server}?{urlencode({'run': RUN, 'tool': 'memory_profile'}, quote_via=quote)}")
    page.wait_for_selector("#mp-summary")
    page.wait_for_selector("#mp-timeline .main-svg")
    device = next(d for d in data["devices"] if d["device"] == page.input_value("#mp-allocator"))
    assert device["accounting"] == "runningSum"
    tile = "#mp-summary .mp-tile[data-key={}] .value"
    assert int(page.get_attribute(tile.format("peakAllocated"), "data-value")) == device["summary"]["peakAllocatedBytes"]
    assert page.get_attribute(tile.format("neverFreed"), "data-value") == ""
    assert page.inner_text(tile.format("neverFreed")) == "—"
    assert "no addresses" in page.inner_text("#mp-breakdown")
