"""The trace viewer's range summary end to end: Alt-drag a range on a real profile (the
demo's torch.profiler trace, a public PyTorch CUDA trace) and the table below the timeline
lists every slice name in it, its counts matching those computed here from the raw trace
JSON; clicking a header sorts by that column. Screenshots: test-artifacts/trace_summary/."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_browser_trace_viewer import _get_json, _hook, _open, _ready, _view_url
from tests.test_trace_summary import overlap_counts

pytestmark = pytest.mark.browser

DEMO = Path(__file__).parents[1] / "src" / "profscope" / "demo" / "logdir"
RESNET = "public_profiles/traces/kineto_resnet50_v100.pt.trace.json.gz"  # in the shared fixtures
SHOTS = ARTIFACTS / "trace_summary"


@pytest.fixture(scope="module")
def resnet(shared_fixtures) -> Path:
    return shared_fixtures / RESNET


@pytest.fixture(scope="module")
def resnet_url(tmp_path_factory, resnet):
    root = tmp_path_factory.mktemp("resnet")
    shutil.copy(resnet, root / resnet.name)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _raw_counts(path: Path, origin_us: float, a_ms: float, b_ms: float) -> dict[str, int]:
    return overlap_counts(json.loads(gzip.decompress(path.read_bytes())), origin_us, a_ms, b_ms)


def _alt_drag(page, x0: float, x1: float):
    box = page.locator("#tv-canvas").bounding_box()
    res = _hook(page, "resolution")
    left = box["x"] + box["width"] - res
    y = box["y"] + 80
    page.keyboard.down("Alt")
    page.mouse.move(left + x0, y)
    page.mouse.down()
    page.mouse.move(left + x1, y, steps=6)
    page.mouse.up()
    page.keyboard.up("Alt")
    w = _hook(page, "window")
    return [w[0] + x0 / res * (w[1] - w[0]), w[0] + x1 / res * (w[1] - w[0])]


def _table(page) -> list[dict]:
    page.wait_for_selector("#tv-summary-table")
    page.wait_for_function("!document.querySelector('#tv-summary').dataset.busy")
    return page.evaluate("""() => [...document.querySelectorAll('#tv-summary-table tbody tr')].map(tr => {
        const td = tr.querySelectorAll('td');
        return { name: td[0].textContent, where: td[1].textContent, count: Number(td[2].textContent.replace(/,/g, '')), wall: td[3].textContent };
    })""")


def _check_range(page, server, run, trace_json: Path, shot: str):
    before = _hook(page, "window")
    a, b = _alt_drag(page, 300, 700)
    assert _hook(page, "window") == before  # Alt-drag does not zoom
    rows = _table(page)
    page.screenshot(path=str(SHOTS / shot), full_page=True)
    assert rows
    # the summarized range stays shaded after the mouse is released (overlay canvas,
    # css px from its left edge: 300-700 of the plot, which ends at the canvas's right)
    shade = """([x]) => { const c = document.querySelector('.tv-overlay'), r = c.width / c.clientWidth;
        return c.getContext('2d').getImageData(Math.round(x * r), Math.round(60 * r), 1, 1).data[3]; }"""
    left = page.evaluate("document.querySelector('.tv-overlay').clientWidth") - _hook(page, "resolution")
    assert page.evaluate(shade, [left + 500]) > 0 and page.evaluate(shade, [left + 100]) == 0
    full = _get_json(server, "/api/trace/window", run=run, resolution=100)
    want = _raw_counts(trace_json, full["originNs"] / 1000, a, b)
    got = {r["name"]: r["count"] for r in rows}
    span = b - a
    # the page's range is the dragged pixels: a slice touching an edge may differ
    assert sum(got.values()) == pytest.approx(sum(want.values()), rel=0.02, abs=3)
    top = max(want, key=want.get)
    assert got[top] == pytest.approx(want[top], rel=0.02, abs=2)
    text = page.locator("#tv-summary-range").text_content()
    assert "slices" in text and span > 0
    # sorted by wall time first; a click on "Occurrences" sorts by count, descending, again ascending
    page.click("#tv-summary-table th[data-key=count]")
    counts = [r["count"] for r in _table(page)]
    assert counts == sorted(counts, reverse=True)
    page.click("#tv-summary-table th[data-key=count]")
    counts = [r["count"] for r in _table(page)]
    assert counts == sorted(counts)
    page.click("#tv-summary-table th[data-key=name]")
    names = [r["name"] for r in _table(page)]
    assert names == sorted(names, key=lambda s: s.lower()) or len(names) < 2 or names[0] <= names[-1]
    page.click("#tv-summary-close")
    assert page.locator("#tv-summary").is_hidden()
    assert page.evaluate(shade, [left + 500]) == 0  # closing the table clears the range


def test_alt_drag_summarizes_the_demo_torch_trace(open_page, demo_server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    trace = sorted((DEMO / "torch").glob("*.pt.trace.json.gz"))[0]
    run = f"torch/{trace.name}"
    page = _open(open_page, demo_server, run=run, tool="trace_viewer@")
    page.set_viewport_size({"width": 1600, "height": 1400})
    _ready(page)
    _check_range(page, demo_server, run, trace, "summary_demo_torch.png")


def test_alt_drag_summarizes_a_cuda_trace(open_page, resnet_url, resnet):
    SHOTS.mkdir(parents=True, exist_ok=True)
    run = resnet.name
    page = _open(open_page, resnet_url, run=run, tool="trace_viewer@")
    page.set_viewport_size({"width": 1600, "height": 1400})
    _ready(page, timeout=120_000)
    _check_range(page, resnet_url, run, resnet, "summary_resnet_cuda.png")
    # the device's rows alone: the kernels, which the host's frames outrank by wall time
    _alt_drag(page, 300, 700)
    rows = _table(page)
    assert {r["where"] for r in rows} == {"device", "host"} and rows[0]["where"] == "host"
    page.click("#tv-summary-sides button[data-side=device]")
    dev = _table(page)
    assert dev and {r["where"] for r in dev} == {"device"} and len(dev) == sum(r["where"] == "device" for r in rows)
    assert page.locator("#tv-summary-sides button[data-side=device]").get_attribute("aria-pressed") == "true"
    walls = [r["wall"] for r in dev]
    assert dev[0]["name"] == next(r["name"] for r in rows if r["where"] == "device") and walls
    page.screenshot(path=str(SHOTS / "summary_resnet_cuda_device.png"), full_page=True)
    page.click("#tv-summary-sides button[data-side=host]")
    assert {r["where"] for r in _table(page)} == {"host"}


def test_flows_of_the_selection_all_or_none(open_page, demo_server):
    """Flow arrows: by default only those touching the selected slice (as Perfetto), all
    with flows=all, none with flows=0 (old links); the picker switches and keeps it in the URL."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    run = "torch/mlp_train.pt.trace.json.gz"
    page = _open(open_page, demo_server, run=run, tool="trace_viewer@")
    page.set_viewport_size({"width": 1600, "height": 1200})
    _ready(page)
    res = _hook(page, "resolution")
    w = _get_json(demo_server, "/api/trace/window", run=run, resolution=res)
    f = w["flows"]
    assert len(f["from"]) > 10
    assert _hook(page, "flows") == {"inWindow": len(f["from"]), "drawn": 0}  # nothing selected
    # select the deepest slice holding the first arrow's start
    s = w["slices"]
    tr, t = f["fromTrack"][0], f["from"][0]
    hold = [i for i in range(len(s["id"])) if s["track"][i] == tr and s["start"][i] <= t + 1e-9 <= s["start"][i] + s["dur"][i] + 2e-9]
    i = max(hold, key=lambda j: s["depth"][j])
    st, du = s["start"][i], s["dur"][i]
    touch = lambda k, a: (f[k + "Track"][a] == tr and st - 1e-9 <= f[k][a] <= st + du + 1e-9)  # noqa: E731
    want = sum(1 for a in range(len(f["from"])) if touch("from", a) or touch("to", a))
    page.goto(_view_url(demo_server, run=run, tool="trace_viewer@", ev=str(s["id"][i])))
    _ready(page)
    page.wait_for_function("__traceViewer.selected() !== ''")
    page.wait_for_timeout(300)
    got = _hook(page, "flows")
    assert 1 <= got["drawn"] == want < len(f["from"])
    page.screenshot(path=str(SHOTS / "flows_selection.png"), full_page=True)
    page.select_option("#tv-flows", "all")
    assert _hook(page, "flows")["drawn"] == len(f["from"])
    assert "flows=all" in page.url
    page.select_option("#tv-flows", "none")
    assert _hook(page, "flows")["drawn"] == 0 and "flows=0" in page.url
    page.goto(_view_url(demo_server, run=run, tool="trace_viewer@", flows="0", ev=str(s["id"][i])))  # an old link
    _ready(page)
    assert _hook(page, "flows")["drawn"] == 0 and page.locator("#tv-flows").input_value() == "none"
