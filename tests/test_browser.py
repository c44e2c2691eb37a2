"""End to end in a real headless Chromium (Debian's, driven by Playwright), network cut:
open the demo, pick a run, a tool and a module, reload the copied URL elsewhere and find
the same view; back and forward walk the views."""

from __future__ import annotations

import pytest

from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.browser


def _state(page) -> dict:
    return {
        "run": page.eval_on_selector("#pick-run", "e => e.value"),
        "tool": page.eval_on_selector("#pick-tool", "e => e.value"),
        "module": page.eval_on_selector("#pick-module", "e => e.value"),
        "heading": page.inner_text("#view h1"),
    }


def test_pick_run_tool_module_and_reopen_the_link(open_page, demo_server, demo_expected):
    ARTIFACTS.mkdir(exist_ok=True)
    mlp = demo_expected["programs"]["mlp"]
    mlp_run = f"mlp/{mlp['session']}"

    page = open_page(demo_server)
    page.goto(demo_server)
    page.wait_for_selector("#run-title")
    assert "run=" in page.url  # the first run was chosen and written into the URL
    page.select_option("#pick-run", mlp_run)
    page.wait_for_function(f"document.querySelector('#run-title')?.textContent === {mlp_run!r}")
    # A run opens on its Summary; the overview (files, modules, tools) is one pick away.
    assert _state(page)["tool"] == "summary"
    page.select_option("#pick-tool", "overview")
    page.wait_for_selector("#modules li")
    assert page.locator("#modules li").count() == len(mlp["metadata_modules"])
    page.wait_for_function("document.querySelector('#sizes .main-svg') !== null")  # Plotly drew, offline
    page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)

    # A module opens in the memory viewer (the page about a module's buffers).
    page.click(f"#modules li[data-module='{mlp['profile_module_name']}'] a")
    page.wait_for_selector("#mv-overview .mv-peak-value")
    assert _state(page) == {"run": mlp_run, "tool": "memory_viewer", "module": mlp["profile_module_name"], "heading": "Memory viewer"}
    page.select_option("#pick-tool", "trace_viewer@")  # a tool page (trace_viewer.js)
    page.wait_for_selector("#tv-canvas")
    state = _state(page)
    assert state == {"run": mlp_run, "tool": "trace_viewer@", "module": mlp["profile_module_name"], "heading": "Trace viewer"}
    page.screenshot(path=str(ARTIFACTS / "tool.png"), full_page=True)
    link = page.url

    other = open_page(demo_server)  # another browser profile: nothing shared but the URL
    other.goto(link)
    other.wait_for_selector("#tv-canvas")
    assert _state(other) == state

    page.go_back()  # back to the module's memory viewer, then the overview
    page.wait_for_selector("#mv-overview .mv-peak-value")
    assert _state(page)["tool"] == "memory_viewer" and _state(page)["module"] == mlp["profile_module_name"]
    page.go_back()
    page.wait_for_selector("#modules li")
    assert _state(page)["tool"] == "overview" and _state(page)["module"] == ""
    page.go_forward()
    page.wait_for_selector("#mv-overview .mv-peak-value")
    page.go_forward()
    page.wait_for_selector("#tv-canvas")
    assert _state(page) == state


@pytest.mark.parametrize("tool", ["trace_viewer", "trace_viewer@"])
def test_the_tool_picker_names_the_page_open(open_page, demo_server, demo_expected, tool):
    # profscope's own links (the overview, the memory viewer's op links) say
    # tool=trace_viewer, XProf's trace_viewer@: both are the picker's "Trace viewer".
    run = f"mlp/{demo_expected['programs']['mlp']['session']}"
    page = open_page(demo_server)
    page.goto(f"{demo_server}?run={run}&tool={tool}")
    page.wait_for_selector("#tv-canvas")
    assert page.eval_on_selector("#pick-tool", "e => e.options[e.selectedIndex].text") == "Trace viewer"


def test_unknown_run_in_a_link_says_so(open_page, demo_server):
    page = open_page(demo_server)
    page.goto(demo_server + "?run=nope%2F2020")
    page.wait_for_selector("#view .error")
    assert "no run named" in page.inner_text("#view .error")


def test_module_filter_narrows_the_picker(open_page, demo_server, demo_expected):
    transformer = demo_expected["programs"]["transformer"]
    page = open_page(demo_server)
    page.goto(f"{demo_server}?run=transformer%2F{transformer['session']}")
    page.wait_for_selector("#run-title")
    page.fill("#module-filter", "train")
    options = page.eval_on_selector_all("#pick-module option", "os => os.map(o => o.value).filter(Boolean)")
    assert options == [transformer["profile_module_name"]]
    page.select_option("#pick-module", transformer["profile_module_name"])
    page.wait_for_function("location.search.includes('module_name=jit_train_step')")
