"""Getting to a module's memory view (issue 16), in Debian's Chromium on the real demo
(JAX profiles whose xplanes carry the compiled modules in /host:metadata, and an XLA
dump), network cut, no mocks.

* A run with one module opens it directly; a module clicked on the overview opens it.
* XProf's links (``?run=R&tag=memory_viewer&host=H``) open the matching page; a tag we
  have no page for says so and lists the run's tools.
* "Memory viewer for <module>" on an HLO-op slice of the trace viewer opens that module
  with the buffers the op defines selected and the heap-simulator event that allocates
  them marked (``hlo_op=``); the expected buffers come from the JSON API's payload."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server_url(demo_server):
    return demo_server


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _view_url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _run(demo_expected, program: str) -> str:
    return f"{program}/{demo_expected['programs'][program]['session']}"


def test_a_single_module_opens_directly(open_page, server_url):
    modules = _get_json(server_url, "/api/run", run="dumps/mlp")["modules"]
    assert len(modules) == 1
    page = open_page(server_url)
    page.goto(_view_url(server_url, run="dumps/mlp"))
    page.wait_for_selector("#run-title")
    before = page.evaluate("history.length")
    page.select_option("#pick-tool", "memory_viewer")
    page.wait_for_selector("#mv-overview .mv-peak-value")
    assert _query(page)["module_name"] == modules[0]
    assert page.inner_text("#view .mv-module") == modules[0]
    assert page.locator("#mv-modules-table").count() == 0 or not page.locator("#mv-modules-table").is_visible()
    # The pick replaced the module-less URL: Back goes to the overview, not to a picker.
    assert page.evaluate("history.length") == before + 1
    page.go_back()
    page.wait_for_selector("#run-title")
    assert page.eval_on_selector("#pick-module", "e => e.options[0].textContent") == "(1 module)"


def test_an_overview_module_opens_in_the_memory_viewer(open_page, server_url, demo_expected):
    run = _run(demo_expected, "transformer")
    modules = _get_json(server_url, "/api/run", run=run)["modules"]
    module = next(m for m in modules if m.startswith("jit_eval_step"))
    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tool="overview"))
    page.wait_for_selector("#modules li")
    assert page.eval_on_selector_all("#modules li", "xs => xs.map(x => x.dataset.module)") == modules
    page.click(f"#modules li[data-module='{module}']")  # the row, not only its link
    page.wait_for_selector("#mv-overview .mv-peak-value")
    q = _query(page)
    assert (q["tool"], q["module_name"]) == ("memory_viewer", module)
    assert page.inner_text("#view .mv-module") == module


@pytest.mark.parametrize(("tag", "tool", "ready"), [
    ("memory_viewer", "memory_viewer", "#mv-modules-table tbody tr"),
    ("trace_viewer", "trace_viewer@", "#tv-canvas"),
    ("trace_viewer@", "trace_viewer@", "#tv-canvas"),
    ("overview_page", None, "#sm-status"),  # XProf's performance summary: the run's Summary
])
def test_xprof_tag_links_open_our_page(open_page, server_url, demo_expected, tag, tool, ready):
    run = _run(demo_expected, "mlp")
    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tag=tag, host="demo-host"))
    page.wait_for_selector(ready, timeout=60_000)
    q = _query(page)
    assert "tag" not in q and q["run"] == run and q["host"] == "demo-host"
    assert q.get("tool") == tool
    assert page.eval_on_selector("#pick-tool", "e => e.value") == (tool or "summary")


def test_an_xprof_tag_we_lack_says_so(open_page, server_url, demo_expected):
    run = _run(demo_expected, "mlp")
    tools = _get_json(server_url, "/api/run", run=run)["tools"]
    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tag="input_pipeline_analyzer", host="demo-host"))
    page.wait_for_selector("#no-such-tool")
    assert "tag=input_pipeline_analyzer" in page.inner_text("#no-such-tool")
    listed = page.eval_on_selector_all("#tool-list a", "xs => xs.map(x => [x.dataset.tool, x.textContent])")
    assert listed == [[t["name"], t["title"]] for t in tools]
    page.screenshot(path=str(ARTIFACTS / "unknown_tag.png"))
    page.click("#tool-list a[data-tool='memory_viewer']")
    page.wait_for_selector("#mv-modules-table tbody tr")
    assert "tag" not in _query(page)
    # A mistyped tool= gets the same answer.
    page.goto(_view_url(server_url, run=run, tool="memory_veiwer"))
    page.wait_for_selector("#no-such-tool")
    assert "memory_veiwer" in page.inner_text("#no-such-tool")


def _op_buffers(payload: dict, op: str) -> dict[str, dict]:
    """Every logical buffer the op defines in the payload: named after the instruction,
    plus "{i}" for a tuple part. id -> {name, bytes, start}."""
    mine = lambda name: name == op or name.startswith(op + "{")  # noqa: E731
    spans = payload.get("logicalBufferSpans", {})
    out = {}
    for b in payload.get("bufferBlocks", []):
        if b.get("logicalBufferId", 0) >= 0 and mine(b.get("name", "")):
            out[str(b.get("logicalBufferId", 0))] = {"name": b["name"], "bytes": b.get("size", 0)}
    for o in payload.get("maxHeap", []):
        if o.get("logicalBufferId", 0) >= 0 and mine(o.get("instructionName", "")):
            out.setdefault(str(o.get("logicalBufferId", 0)), {"name": o["instructionName"], "bytes": o.get("logicalBufferSizeMib", 0) * 2**20})
    for bid, b in out.items():
        b["start"] = spans[bid].get("start", 0) if bid in spans else None
    return out


@pytest.mark.parametrize("program", ["mlp", "transformer"])
def test_a_trace_op_opens_its_buffers(open_page, server_url, demo_expected, program):
    ARTIFACTS.mkdir(exist_ok=True)
    run = _run(demo_expected, program)
    module = demo_expected["programs"][program]["profile_module_name"]
    payload = _get_json(server_url, "/data/plugin/profile/data", run=run, tag="memory_viewer",
                        module_name=module, memory_space=0, view="page")
    # An XLA op slice of the training step whose op defines a buffer there (a fusion).
    found = _get_json(server_url, "/api/trace/search", run=run, q="fusion", limit=200)["matches"]
    event = buffers = None
    for m in found:
        e = _get_json(server_url, "/api/trace/event", run=run, id=m["id"])
        if e.get("module") == module and e.get("hloOp"):
            buffers = _op_buffers(payload, e["hloOp"])
            if buffers:
                event = e
                break
    assert event is not None, "no fusion slice of the training step defines a buffer"
    op = event["hloOp"]
    largest = max(buffers.items(), key=lambda kv: kv[1]["bytes"])[0]
    starts = [b["start"] for b in buffers.values() if b["start"] is not None]

    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tool="trace_viewer@", ev=event["id"]))
    page.wait_for_selector("#tv-memory-link", timeout=60_000)
    assert op in page.inner_text("#tv-memory-link")
    href = parse_qs(urlparse(page.get_attribute("#tv-memory-link", "href")).query)
    assert (href["module_name"], href["hlo_op"]) == ([module], [op])
    page.click("#tv-memory-link")
    page.wait_for_selector("#mv-op-note")
    page.wait_for_selector("#mv-heap-chart .main-svg")
    q = _query(page)
    assert (q["tool"], q["module_name"], q["hlo_op"]) == ("memory_viewer", module, op) and "ev" not in q

    # The note lists the op's buffers and where they are allocated.
    note = page.locator("#mv-op-note")
    assert note.get_attribute("data-op") == op
    assert sorted(page.eval_on_selector_all("#mv-op-note .mv-buf", "xs => xs.map(x => x.dataset.buffer)")) == sorted(buffers)
    assert note.get_attribute("data-allocated-at") == str(min(starts))
    assert f"allocated at heap-simulator event {min(starts)}" in note.inner_text()
    # ...marked on the heap chart, with the largest buffer's lifetime shaded...
    shapes = page.evaluate("document.getElementById('mv-heap-chart').layout.shapes.map(s => [s.name, s.x0, s.x1])")
    assert ["op-alloc", min(starts), min(starts)] in shapes
    span = payload["logicalBufferSpans"][largest]
    assert ["lifetime", span.get("start", 0), span.get("limit", 0)] in shapes
    # ...and its card shown as the selection, outlined in the bars when it is live at peak.
    page.wait_for_selector("#mv-card.selected")
    assert page.inner_text("#mv-card .mv-card-name") == buffers[largest]["name"]
    assert f"#{largest}" in page.inner_text("#mv-card")
    at_peak = [str(o.get("logicalBufferId", 0)) for o in payload["maxHeap"]]
    outlined = page.evaluate("(document.getElementById('mv-bars-order').layout.shapes || []).length")
    assert outlined == sum(1 for b in buffers if b in at_peak)
    page.screenshot(path=str(ARTIFACTS / f"memory_viewer_hlo_op_{program}.png"))

    # The copied link alone reopens the same view.
    other = open_page(server_url)
    other.goto(page.url)
    other.wait_for_selector("#mv-card.selected")
    assert other.inner_text("#mv-card .mv-card-name") == buffers[largest]["name"]

    # Clear: the op and its mark go; Back brings them again.
    page.click("#mv-op-note .mv-clear")
    page.wait_for_function("!new URLSearchParams(location.search).has('hlo_op')")
    assert page.locator("#mv-op-note").count() == 0
    assert not any(s[0] == "op-alloc" for s in page.evaluate(
        "document.getElementById('mv-heap-chart').layout.shapes.map(s => [s.name])"))
    page.go_back()
    page.wait_for_selector("#mv-op-note")


def test_an_op_without_buffers_says_so(open_page, server_url, demo_expected):
    run = _run(demo_expected, "mlp")
    module = demo_expected["programs"]["mlp"]["profile_module_name"]
    page = open_page(server_url)
    page.goto(_view_url(server_url, run=run, tool="memory_viewer", module_name=module, hlo_op="no_such_op.7"))
    page.wait_for_selector("#mv-op-note.missing")
    assert "no_such_op.7 defines no buffer" in page.inner_text("#mv-op-note")
    page.wait_for_selector("#mv-heap-chart .main-svg")
    assert not any(s == "op-alloc" for s in page.evaluate("document.getElementById('mv-heap-chart').layout.shapes.map(s => s.name)"))
    assert page.locator("#mv-card.selected").count() == 0
