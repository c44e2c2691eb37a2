"""The memory viewer page end to end: the real server on the bundled demo (real JAX
profiles and an XLA dump), Debian's Chromium driven by Playwright, network cut, no mocks.

Checks what an engineer chasing an OOM relies on: the overview's peak is the JSON API's
peak; hovering a bar shows the buffer's card and shades its lifetime on the heap chart;
clicking selects it into the URL and the copied link reopens on the same card; the dump
run gives the same page; a dump with only the text files says what is missing and lists
its allocations. Screenshots go to test-artifacts/ for a person to look at."""

from __future__ import annotations

import json
import shutil
from urllib.parse import quote, urlencode
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server

MIB = 1024 * 1024

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server_url(demo_server):
    return demo_server


@pytest.fixture(scope="module")
def text_dump_url(tmp_path_factory, demo_logdir):
    """A log directory holding the demo dump's text files only (no *.hlo.pb)."""
    root = tmp_path_factory.mktemp("textlog")
    dest = root / "dumps" / "mlp_text"
    dest.mkdir(parents=True)
    for f in (demo_logdir / "dumps" / "mlp").glob("*.txt"):
        shutil.copy(f, dest / f.name)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _get_json(server: str, path: str, **params) -> dict | list:
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _view_url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _hover(page, locator, click=False):
    """Move the real mouse onto a Plotly point (Plotly's drag layer covers the SVG, so
    Playwright's element hover would refuse)."""
    locator.scroll_into_view_if_needed()
    box = locator.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    if click:
        page.mouse.click(x, y)


def _timeline_point(page, block) -> tuple[float, float]:
    """Where a buffer block's centre is on screen, from the timeline's axis ranges."""
    page.locator("#mv-timeline").scroll_into_view_if_needed()
    x = (block.get("startStep", 0) + max(block.get("endStep", 0), block.get("startStep", 0) + 1)) / 2
    y = (block.get("offset", 0) + block["size"] / 2) / MIB
    return tuple(page.evaluate("""([x, y]) => {
        const div = document.getElementById('mv-timeline');
        const box = div.querySelector('.nsewdrag').getBoundingClientRect();
        const [x0, x1] = div.layout.xaxis.range, [y0, y1] = div.layout.yaxis.range;
        return [box.left + box.width * (x - x0) / (x1 - x0), box.bottom - box.height * (y - y0) / (y1 - y0)];
    }""", [x, y]))


def _lifetime_shapes(page) -> list:
    return page.evaluate(
        "(document.getElementById('mv-heap-chart').layout.shapes || []).filter(s => s.name === 'lifetime')"
        ".map(s => [s.x0, s.x1])")


def _wait_for_module_page(page):
    page.wait_for_selector("#mv-overview .mv-peak-value")
    for chart in ("#mv-heap-chart", "#mv-bars-order", "#mv-bars-size", "#mv-timeline"):
        page.wait_for_selector(f"{chart} .main-svg")


def test_hover_click_and_share_a_buffer(open_page, server_url, demo_expected):
    ARTIFACTS.mkdir(exist_ok=True)
    mlp = demo_expected["programs"]["mlp"]
    run, module = f"mlp/{mlp['session']}", mlp["profile_module_name"]
    data = _get_json(server_url, "/data/plugin/profile/data", run=run, tag="memory_viewer",
                     module_name=module, memory_space=0, view="page")

    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tool="memory_viewer", module_name=module))
    _wait_for_module_page(page)

    # The overview's peak is the API's peak (exact bytes in the tooltip).
    peak_bytes = round(data["peakHeapMib"] * MIB)
    peak = page.locator("#mv-overview .mv-peak-value")
    assert peak.inner_text() == page.evaluate("b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", peak_bytes)
    exact = data.get("profscope", {}).get("totals", {}).get("peakBytes", peak_bytes)
    assert peak.get_attribute("title") == f"{exact:,} bytes"
    assert "program order" in page.text_content("#mv-heap-chart .g-xtitle")
    assert page.locator("#mv-space option").count() >= 1
    assert page.locator("#mv-whole-program tbody tr").count() > 0
    page.screenshot(path=str(ARTIFACTS / "memory_viewer.png"), full_page=True)

    # Hover the largest buffer at peak that has a lifetime: card + shaded band.
    by_size = data["maxHeapBySize"]
    spans = data["logicalBufferSpans"]
    rank = next(i for i, o in enumerate(by_size) if str(o.get("logicalBufferId", 0)) in spans)
    target = by_size[rank]
    buffer_id = str(target.get("logicalBufferId", 0))
    assert not _lifetime_shapes(page)
    _hover(page, page.locator("#mv-bars-size .point path").nth(rank))
    page.wait_for_function("document.querySelector('#mv-card .mv-card-name') !== null")
    card = page.inner_text("#mv-card")
    assert target["instructionName"] in card
    assert target["shapeString"] in card
    assert f"#{buffer_id}" in card
    span = spans[buffer_id]
    assert _lifetime_shapes(page) == [[span.get("start", 0), span.get("limit", 0)]]
    assert page.locator("#mv-heap-chart .shapelayer path").count() >= 2  # peak line + band
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_hover.png"))

    # Click: the buffer goes into the URL; the card stays after the mouse leaves.
    _hover(page, page.locator("#mv-bars-size .point path").nth(rank), click=True)
    page.wait_for_function(f"location.search.includes('buffer={buffer_id}')")
    page.mouse.move(5, 400)
    page.wait_for_selector("#mv-card.selected")
    assert target["instructionName"] in page.inner_text("#mv-card")
    link = page.url

    # The link alone, in another browser profile, reopens the same buffer.
    other = open_page(server_url)
    other.goto(link)
    _wait_for_module_page(other)
    other.wait_for_selector("#mv-card.selected")
    assert target["instructionName"] in other.inner_text("#mv-card")
    assert _lifetime_shapes(other) == [[span.get("start", 0), span.get("limit", 0)]]
    other.screenshot(path=str(ARTIFACTS / "memory_viewer_shared_link.png"), full_page=True)

    # The allocation timeline is painted as one image of all blocks; hovering the largest
    # block shows its buffer and clicking it selects it.
    blocks = [b for b in data["bufferBlocks"] if b.get("logicalBufferId", 0) >= 0]
    assert other.evaluate("document.getElementById('mv-timeline').layout.images.length") == 1
    largest = max(blocks, key=lambda b: b.get("size", 0))
    x, y = _timeline_point(other, largest)
    other.mouse.move(x, y, steps=3)
    other.wait_for_function(
        f"document.querySelector('#mv-card')?.textContent.includes('#{largest['logicalBufferId']}')")
    other.locator("#mv-timeline").screenshot(path=str(ARTIFACTS / "memory_viewer_timeline.png"))
    other.mouse.click(x, y)
    other.wait_for_function(f"location.search.includes('buffer={largest['logicalBufferId']}')")

    # Clear the selection: back to no buffer in the URL.
    page.click("#mv-card .mv-clear")
    page.wait_for_function("!location.search.includes('buffer=')")


def test_modules_ranked_by_peak(open_page, server_url, demo_expected):
    mlp = demo_expected["programs"]["mlp"]
    run = f"mlp/{mlp['session']}"
    peaks = _get_json(server_url, "/api/module_peaks", run=run)
    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tool="memory_viewer"))
    page.wait_for_selector("#mv-modules-table tbody tr")
    rows = page.eval_on_selector_all("#mv-modules-table tbody tr", "rs => rs.map(r => r.dataset.module)")
    ranked = [r["moduleName"] for r in sorted(peaks, key=lambda r: -(r.get("peakHeapMib") or 0))]
    assert rows == ranked
    assert rows[0] == mlp["profile_module_name"]  # the training step is the largest
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_modules.png"), full_page=True)
    page.click(f"#mv-modules-table tr[data-module='{rows[1]}'] a")
    page.wait_for_function(f"new URLSearchParams(location.search).get('module_name') === {rows[1]!r}")
    _wait_for_module_page(page)
    # The ranking stays one click away above the charts.
    page.click("#mv-modules-slot summary", position={"x": 8, "y": 8})  # not on its "largest" link
    page.click(f"#mv-modules-table tr[data-module='{rows[0]}'] a")
    page.wait_for_function(f"new URLSearchParams(location.search).get('module_name') === {rows[0]!r}")
    _wait_for_module_page(page)


def test_dump_run_gives_the_same_page(open_page, server_url, demo_expected):
    mlp = demo_expected["programs"]["mlp"]
    module = mlp["profile_module_name"]
    data = _get_json(server_url, "/data/plugin/profile/data", run="dumps/mlp", tag="memory_viewer",
                     module_name=module, memory_space=0, view="page")
    page = open_page(server_url)
    page.goto(_view_url(server_url, run="dumps/mlp", tool="memory_viewer", module_name=module))
    _wait_for_module_page(page)
    assert page.inner_text("#mv-overview .mv-peak-value") == page.evaluate(
        "b => import('/static/lib/format.js').then((m) => m.fmtBytes(b))", round(data["peakHeapMib"] * MIB))
    assert page.locator("#mv-bars-order .point path").count() == len(data["maxHeap"])
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_dump.png"), full_page=True)


def test_text_only_dump_says_what_is_missing(open_page, text_dump_url):
    run, module = "dumps/mlp_text", "jit_train_step(14)"
    data = _get_json(text_dump_url, "/data/plugin/profile/data", run=run, tag="memory_viewer",
                     module_name=module, memory_space=0, view="page")
    assert data["textOnly"]
    page = open_page(text_dump_url)
    page.goto(_view_url(text_dump_url, run=run, tool="memory_viewer", module_name=module))
    page.wait_for_selector("#mv-text-only-note")
    assert "hlo_as_proto" in page.inner_text("#mv-text-only-note")
    assert page.locator("#mv-heap-chart").count() == 0  # nothing pretends to be a peak
    rows = page.locator("#mv-allocations tr.mv-alloc")
    assert rows.count() == data["totals"]["allocationCount"]
    sizes = page.eval_on_selector_all("#mv-allocations tr.mv-alloc", "rs => rs.map(r => +r.dataset.index)")
    by_size = [a["index"] for a in sorted(data["allocations"], key=lambda a: -a["sizeBytes"])]
    assert sizes[0] == by_size[0]  # largest first

    # Expand the largest allocation: its values, with offsets.
    rows.nth(0).click()
    values = page.locator("#mv-allocations tr.mv-values .mv-subtable tbody tr")
    assert values.count() == len(next(a for a in data["allocations"] if a["index"] == by_size[0])["values"])
    page.screenshot(path=str(ARTIFACTS / "memory_viewer_text_only.png"), full_page=True)

    # Filter and sort.
    name = data["allocations"][-1]["values"][0]["name"]
    page.fill("#mv-alloc-filter", name)
    assert 1 <= rows.count() < data["totals"]["allocationCount"]
    page.fill("#mv-alloc-filter", "")
    page.click("#mv-allocations th[data-key=index]")
    first = page.eval_on_selector("#mv-allocations tr.mv-alloc", "r => +r.dataset.index")
    assert first == max(a["index"] for a in data["allocations"])
