"""From a buffer to its HLO, its trace slices and its source, and back (issue 37 item 1),
in Debian's Chromium on a real JAX program profiled here (profscope.testing.link_program:
its module embedded in the profile, its ops on the CPU host's threads, its source under the
log directory), network cut, no mocks.

Open the memory viewer at the peak, click the largest buffer at the peak: the pinned card
shows the instruction's HLO line, its operands and users, its slices and its last use's in
the trace and its source lines. Follow the HLO link (view=hlo: the module's text with the
line highlighted, search), come back, follow the trace link (the trace viewer opens at the
slice, selected)."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from profscope.testing import link_program
from tests.conftest import ARTIFACTS, profscope_server
from tests.test_browser_memory_viewer import _hover  # the real mouse onto a Plotly point

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    made = link_program.make(tmp_path_factory.mktemp("link_program"))
    with profscope_server("serve", str(made / "logdir"), "--port", "0", "--no-capture",
                          "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}




def test_buffer_to_hlo_to_trace_and_back(open_page, server_url):
    ARTIFACTS.mkdir(exist_ok=True)
    run = next(r["name"] for r in _get_json(server_url, "/api/runs")["runs"] if r["kind"] == "profile")
    module = next(m for m in _get_json(server_url, "/api/run", run=run)["modules"]
                  if m.startswith(link_program.MODULE + "("))
    data = _get_json(server_url, "/data/plugin/profile/data", run=run, tag="memory_viewer", module_name=module,
                     memory_space=0, view="page")
    # the largest buffer at the peak whose instruction ran a kernel (the trace has its slices)
    by_size = data["maxHeapBySize"]
    rank, target, panel = next((i, o, p) for i, o in enumerate(by_size)
                               if (p := _get_json(server_url, "/api/hlo/instruction", run=run, module_name=module,
                                                  instr=o["instructionName"].split("{")[0]))["trace"]["defining"]["count"])
    instr = panel["instruction"]["name"]

    page = open_page(server_url)
    page.goto(f"{server_url}?{urlencode({'run': run, 'tool': 'memory_viewer', 'module_name': module}, quote_via=quote)}")
    page.wait_for_selector("#mv-bars-size .main-svg")
    # the hover card: the HLO line and the trace links, no neighbourhood
    _hover(page, page.locator("#mv-bars-size .point path").nth(rank))
    page.wait_for_selector("#mv-card:not(.selected) #mv-panel .hp-line")
    assert page.inner_text("#mv-panel .hp-line") == panel["instruction"]["text"]
    assert page.locator("#mv-panel #mv-trace-link").count() == 1 and page.locator("#mv-neighbourhood").count() == 0
    page.locator("#mv-card").screenshot(path=str(ARTIFACTS / "hlo_links_hover.png"))
    _hover(page, page.locator("#mv-bars-size .point path").nth(rank), click=True)
    page.wait_for_selector("#mv-card.selected #mv-trace-link")
    page.wait_for_selector("#mv-card #hp-code .hit")
    page.mouse.move(5, 400)
    card = page.inner_text("#mv-card")
    assert panel["instruction"]["text"] in card  # the HLO line
    for n in panel["neighborhood"]["nodes"][1:]:
        assert n["name"] in card
    hit = page.inner_text("#mv-card #hp-code .hit")
    assert str(panel["source"]["line"]) in hit and "jnp.tanh(x @ w1)" in hit
    page.screenshot(path=str(ARTIFACTS / "hlo_links_card.png"), full_page=True)
    # two hops: the URL keeps it, the card lists the API's two-hop neighbourhood
    two = _get_json(server_url, "/api/hlo/instruction", run=run, module_name=module, instr=instr, hops=2)
    page.select_option("#mv-hops", "2")
    page.wait_for_function("new URLSearchParams(location.search).get('hops') === '2'")
    page.wait_for_function(f"document.querySelectorAll('#mv-neighbourhood .hp-node').length === {len(two['neighborhood']['nodes']) - 1}")
    assert len(two["neighborhood"]["nodes"]) > len(panel["neighborhood"]["nodes"])
    page.go_back()
    page.wait_for_function(f"document.querySelectorAll('#mv-neighbourhood .hp-node').length === {len(panel['neighborhood']['nodes']) - 1}")
    buffer_url = page.url

    # The HLO view: the module's text, the instruction's line highlighted and in view.
    page.click("#mv-hlo-link")
    page.wait_for_selector("#hv-selected")
    q = _query(page)
    assert (q["view"], q["instr"], q["module_name"]) == ("hlo", instr, module)
    assert page.inner_text("#hv-selected").strip() == panel["instruction"]["text"]
    assert page.evaluate("""() => { const r = document.getElementById('hv-selected').getBoundingClientRect();
        const box = document.getElementById('hv-text').getBoundingClientRect();
        return r.top >= box.top && r.bottom <= box.bottom; }""")
    page.fill("#hv-search", "fusion(")
    page.wait_for_function("document.querySelectorAll('#hv-text .hv-hit').length > 0")
    assert "hq=fusion" in page.url
    hits = page.locator("#hv-text .hv-hit").count()
    assert hits == sum("fusion(" in line for line in _get_json(server_url, "/api/hlo", run=run, module_name=module)["lines"])
    page.screenshot(path=str(ARTIFACTS / "hlo_links_hlo_view.png"))
    # the URL alone reopens the view, search included
    other = open_page(server_url)
    other.goto(page.url)
    other.wait_for_selector("#hv-selected")
    assert other.input_value("#hv-search") == "fusion("
    # HLO -> trace -> back: the HLO view's own panel opens the same slice
    hlo_url = page.url
    page.wait_for_selector("#hv-trace-link")
    page.click("#hv-trace-link")
    first = panel["trace"]["defining"]["slices"][0]["link"]
    page.wait_for_function(f"window.__traceViewer && __traceViewer.selected() === '{first['ev']}'")
    page.go_back()
    page.wait_for_selector("#hv-selected")
    assert page.url == hlo_url and page.input_value("#hv-search") == "fusion("

    # Back: the memory viewer, the same buffer pinned.
    page.go_back()
    page.wait_for_selector("#mv-card.selected #mv-trace-link")
    assert page.url == buffer_url
    # a fusion's fused computation opens at its root
    assert panel["calls"]  # the buffer is a fusion's
    for c in panel["calls"]:
        page.click(f"#mv-card .hp-call:text-is('%{c['computation']}')")
        page.wait_for_selector("#hv-selected")
        assert _query(page)["instr"] == c["root"] and page.inner_text("#hv-selected").strip().startswith(f"ROOT %{c['root']} = ")
        page.go_back()
        page.wait_for_selector("#mv-card.selected #mv-trace-link")

    # The trace link: the trace viewer at the slice, the slice selected.
    link = panel["trace"]["defining"]["slices"][0]["link"]
    page.click("#mv-trace-link")
    page.wait_for_function("new URLSearchParams(location.search).get('tool') === 'trace_viewer@'")
    q = _query(page)
    assert (q["ev"], q["host"]) == (link["ev"], link["host"])
    assert float(q["start_ms"]) == pytest.approx(link["start_ms"]) and float(q["end_ms"]) == pytest.approx(link["end_ms"])
    page.wait_for_function(f"window.__traceViewer && __traceViewer.selected() === '{link['ev']}'")
    page.wait_for_function(f"document.getElementById('tv-card').innerText.includes({json.dumps(instr)})")
    page.screenshot(path=str(ARTIFACTS / "hlo_links_trace.png"))
    page.go_back()
    page.wait_for_selector("#mv-card.selected #mv-trace-link")
    assert page.url == buffer_url


def test_no_dead_link_for_a_parameter(open_page, server_url):
    """A parameter runs no kernel: its pinned card says so and draws no trace link; its
    HLO link and source are drawn (the module has it; the file is under the log directory)."""
    run = next(r["name"] for r in _get_json(server_url, "/api/runs")["runs"] if r["kind"] == "profile")
    module = next(m for m in _get_json(server_url, "/api/run", run=run)["modules"]
                  if m.startswith(link_program.MODULE + "("))
    data = _get_json(server_url, "/data/plugin/profile/data", run=run, tag="memory_viewer", module_name=module,
                     memory_space=0, view="page")
    param = next(b for b in data["profscope"]["peakBuffers"] if b["category"] == "Parameter")
    panel = _get_json(server_url, "/api/hlo/instruction", run=run, module_name=module, instr=param["instruction"])
    assert panel["trace"]["defining"]["count"] == 0
    page = open_page(server_url)
    page.goto(f"{server_url}?{urlencode({'run': run, 'tool': 'memory_viewer', 'module_name': module, 'buffer': param['id']}, quote_via=quote)}")
    page.wait_for_selector("#mv-card.selected #mv-trace")
    assert "no slice of it in this trace" in page.inner_text("#mv-trace")
    assert page.locator("#mv-trace-link").count() == 0
    assert "a parameter: no kernel of its own" in page.inner_text("#mv-trace")
    # the links drawn are the last use's slices, one each
    assert page.locator("#mv-trace a").count() == len((panel["trace"]["lastUse"] or {}).get("slices", []))
    assert page.locator("#mv-hlo-link").count() == 1
    page.locator("#mv-card").screenshot(path=str(ARTIFACTS / "hlo_links_parameter.png"))


@pytest.mark.parametrize("run, module_prefix", [("xplane/tpu_inference/2025_12_10_tpu", "jit_f("),
                                                ("xplane/mi300_jax08_gemm/jax08_gemm", "jit_dot(21)")])
def test_public_profile_buffer_to_its_device_slice(open_page, public_server, run, module_prefix):
    """On the public TPU and MI300 xplanes: the largest buffer at the peak whose op ran
    opens the trace viewer at its slice on the device's XLA Ops line, selected."""
    module = next(m for m in _get_json(public_server, "/api/run", run=run)["modules"] if m.startswith(module_prefix))
    data = _get_json(public_server, "/data/plugin/profile/data", run=run, tag="memory_viewer", module_name=module,
                     memory_space=0, view="page")
    buffer, panel = next((b, p) for b in sorted(data["profscope"]["peakBuffers"], key=lambda b: -b["bytes"])
                         if (p := _get_json(public_server, "/api/hlo/instruction", run=run, module_name=module,
                                            instr=b["instruction"]))["trace"]["defining"]["count"])
    page = open_page(public_server)
    page.goto(f"{public_server}?{urlencode({'run': run, 'tool': 'memory_viewer', 'module_name': module, 'buffer': buffer['id']}, quote_via=quote)}")
    page.wait_for_selector("#mv-card.selected #mv-trace-link")
    assert panel["instruction"]["text"] in page.inner_text("#mv-card")
    page.locator("#mv-card").screenshot(path=str(ARTIFACTS / f"hlo_links_card_{run.split('/')[1]}.png"))
    link = panel["trace"]["defining"]["slices"][0]["link"]
    page.click("#mv-trace-link")
    page.wait_for_function(f"window.__traceViewer && __traceViewer.selected() === '{link['ev']}'")
    page.wait_for_function(f"document.getElementById('tv-card').innerText.includes({json.dumps(panel['instruction']['name'])})")
    assert "XLA Ops" in page.inner_text("#tv-card")
    page.screenshot(path=str(ARTIFACTS / f"hlo_links_trace_{run.split('/')[1]}.png"))
