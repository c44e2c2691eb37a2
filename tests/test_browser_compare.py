"""The "Compare with…" picker and "What changed" (issue 36, docs/compare.md) in Debian's
Chromium (Playwright), the network cut, on the real public profiles:

* OOM risk of a real snapshot: picking the base run in the picker puts ``base=`` in the
  URL and draws the diff of the data API (verdict, total, the category rows, largest
  change first, +/− coloured); "Stop comparing" takes it out;
* the Summary of the two-host TF GPU run: "Straggler vs median host" compares the slowest
  host with the median one (host=, base_host= in the URL), as the data API answers;
* a profile against a snapshot: the page says what cannot be compared, no error.

Screenshots: test-artifacts/compare_*.png."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS
from tests.test_browser_compare_runs import _compare_page, _data

pytestmark = pytest.mark.browser

NIU = "snapshots/niu_fwd_bwd_200_mixed.pickle"
BOLONG = "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle"
TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
TPU = "xplane/tpu_inference/2025_12_10_tpu"


@pytest.fixture(scope="module")
def server(public_server):
    return public_server.rstrip("/")  # tests/fixtures/servers.py: profscope serve over public_profiles


def _query(page) -> dict:
    return dict(parse_qsl(urlparse(page.url).query))


def _rows(page, table: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"#{table} tbody tr", "trs => trs.map((tr) => [...tr.cells].map((td) => td.innerText))")


def test_oom_risk_picker_writes_the_base_into_the_url_and_draws_the_diff(server, open_page):
    page = _compare_page(open_page, server, ("#oom-gauge, .oom .error",), run=NIU, tool="oom_risk")
    assert not page.query_selector("#cmp-section")
    page.wait_for_selector(f'#cmp-base option[value="{BOLONG}"]', state="attached")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "compare_oom_before.png"), full_page=True)
    page.select_option("#cmp-base", BOLONG)
    page.wait_for_selector("#cmp-rows tbody tr")
    assert _query(page)["base"] == BOLONG
    api = _data(server, run=NIU, tag="oom_risk", base=BOLONG)
    assert float(page.get_attribute("#cmp-total .cmp-delta", "data-delta")) == api["totals"]["delta"]
    assert page.inner_text("#cmp-verdict") == f"Verdict {api['verdict']['text']}"
    shown = _rows(page, "cmp-rows")
    assert [r[0] for r in shown] == [r["label"] for r in api["rows"]]  # largest change first, as the API
    colours = page.eval_on_selector_all("#cmp-rows tbody tr .cmp-delta", "ss => ss.map((s) => s.style.color)")
    assert [c != "" for c in colours] == [r["delta"] != 0 for r in api["rows"]]
    assert len({c for c, r in zip(colours, api["rows"]) if r["delta"] > 0}) == 1  # one colour for growth
    assert not {c for c, r in zip(colours, api["rows"]) if r["delta"] > 0} & {c for c, r in zip(colours, api["rows"]) if r["delta"] < 0}
    assert page.inner_text("#cmp-base") and "(this run)" in page.inner_text("#cmp-base")
    page.screenshot(path=str(ARTIFACTS / "compare_oom_after.png"), full_page=True)
    page.click("#cmp-clear")
    page.wait_for_selector("#oom-gauge")
    assert "base" not in _query(page) and not page.query_selector("#cmp-section")


def test_summary_straggler_against_median_host(server, open_page):
    page = _compare_page(open_page, server, ("#sm-findings, #view .error",), run=TF_GPU, tool="summary")
    page.click("#cmp-straggler")
    page.wait_for_selector("#cmp-head")
    state = _query(page)
    with urlopen(f"{server}/api/trace_hosts?{urlencode({'run': TF_GPU})}", timeout=300) as res:
        slowest = json.loads(res.read())["rollup"]["slowestHost"]
    assert state["host"] == slowest and state["base_host"] not in ("", slowest) and "base" not in state
    api = _data(server, run=TF_GPU, tag="summary", host=state["host"], base_host=state["base_host"])
    assert page.inner_text("#cmp-side-base").endswith(api["base"]["label"])
    assert page.inner_text("#cmp-side-current").endswith(api["current"]["label"])
    assert float(page.get_attribute("#cmp-total .cmp-delta", "data-delta")) == api["totals"]["delta"]
    assert len(_rows(page, "cmp-rows")) == len(api["rows"])
    assert "null" not in page.inner_text("#cmp-picker")  # no module picker on the Summary, and no stray text
    assert page.eval_on_selector("#cmp-base", "s => s.options[s.selectedIndex].text") == "— this run —"
    # the two hosts' findings are one rule's: kept, not "new" on one host and "gone" on the other
    assert [li.split(" ")[0] for li in page.eval_on_selector_all("#cmp-findings li", "ls => ls.map((l) => l.innerText)")] == \
        ["kept"] * len(api["findings"])
    page.wait_for_selector("#sm-findings")
    page.screenshot(path=str(ARTIFACTS / "compare_summary_hosts.png"), full_page=True)


def test_a_profile_against_a_snapshot_says_what_cannot_be_compared(server, open_page):
    page = _compare_page(open_page, server, ("#cmp-head",), run=TPU, tool="summary", base=NIU)
    assert page.get_attribute("#cmp-head", "data-comparable") == "false"
    why = _data(server, run=TPU, tag="summary", base=NIU)["why"]
    assert page.inner_text("#cmp-why") == f"Cannot compare: {why}"
    page.wait_for_selector("#sm-findings")  # the run's own summary still drawn below
    page.screenshot(path=str(ARTIFACTS / "compare_mismatch.png"), full_page=True)
