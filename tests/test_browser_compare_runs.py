"""Run vs run on the pages (issue 36, docs/compare.md "Steps & ops", "Memory profile"):
the real server over shared/fixtures/public_profiles, Debian's Chromium driven by
Playwright, network cut, no mocks.

* Steps & ops with base= (kineto's resnet50 V100 trace against TraceLens' BERT H100
  trace): the step time tiles, the split by category, the ops table with its change
  column, sorted by the change, the ops only in one run tagged; numbers as the data
  route answers them.
* The memory profile with base= (two PyTorch traces): both timelines on one chart, the
  peak tiles, the live set at the peak as a delta table.

Screenshots (test-artifacts/compare_*.png) are looked at by whoever changes the pages."""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(public_server):
    return public_server  # tests/fixtures/servers.py: profscope serve over public_profiles

V100 = "traces/kineto_resnet50_v100.pt.trace.json.gz"
BERT = "traces/tracelens_h100_bert_small.trace.json.gz"
NIU = "snapshots/niu_fwd_bwd_200_mixed.pickle"


def _data(server: str, **params) -> dict:
    with urlopen(f"{server.rstrip('/')}/data/plugin/profile/data?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _compare_page(open_page, server: str, waits: tuple[str, ...], shot: str | None = None, **state):
    """A page opened on ``state`` (tool, run, base...), once ``waits`` are drawn; its
    screenshot saved as ``shot`` under test-artifacts/."""
    page = open_page(server)
    page.goto(f"{server}?{urlencode(state, quote_via=quote)}")
    for selector in waits:
        page.wait_for_selector(selector)
    if shot:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    return page


def _us(v: float) -> str:
    """The page's time (pages/steps_ops_compare.js ``us``)."""
    a = abs(v)
    return f"{v / 1e6:.3f} s" if a >= 1e6 else f"{v / 1e3:.3f} ms" if a >= 1e3 else f"{v:.3f} µs"


def _signed(v: float) -> str:
    return f"+{_us(v)}" if v > 0 else f"−{_us(-v)}" if v < 0 else "0"


def _column(page, table: str, key: str) -> list[str]:
    """The texts of one column of a delta table (lib/compare.js deltaTable), by its key."""
    keys = page.eval_on_selector_all(f"#{table} thead th", "ths => ths.map((t) => t.dataset.key)")
    return page.locator(f"#{table} tbody tr td:nth-child({keys.index(key) + 1})").all_inner_texts()


def test_steps_ops_compared_with_another_run(open_page, server):
    d = _data(server, tag="steps_ops", run=BERT, base=V100)
    page = _compare_page(open_page, server, ("#so-compare-ops tbody tr", "#so-compare-split .bars"), "compare_steps_ops.png",
                         tool="steps_ops", run=BERT, base=V100)
    assert V100 in page.inner_text("#cmp-side-base") and BERT in page.inner_text("#cmp-side-current")
    assert page.input_value("#cmp-base") == V100  # the picker shows the base
    assert page.inner_text("#so-compare-median .value") == _signed(d["step_time"]["median"]["delta"])
    assert page.inner_text("#so-compare-mean .value") == _signed(d["totals"]["delta"])
    # the split by category: one row per category, base and current as answered
    cats = _column(page, "so-compare-categories", "label")
    assert sorted(cats) == sorted(r["label"] for r in d["groups"]["category"])
    # the ops table: kernels first, sorted by the size of the change, with the change column
    kernels = [r for r in d["rows"] if r["kind"] == "kernel"]
    assert page.input_value("#so-compare-kind") == "kernel"
    assert _column(page, "so-compare-ops", "label")[:10] == [r["label"] for r in kernels[:10]]
    assert _column(page, "so-compare-ops", "delta")[:10] == [_signed(r["delta"]) for r in kernels[:10]]
    # the ops only in one run marked so (the first 50 rows shown: resnet50's own kernels)
    words = {"both": "both", "base_only": "base only", "current_only": "current only"}
    assert _column(page, "so-compare-ops", "in")[:50] == [words[r["in"]] for r in kernels[:50]]
    page.fill("#so-compare-ops-filter", "current_only")
    n_current = sum(r["in"] == "current_only" for r in kernels)
    page.wait_for_function(f"() => document.querySelectorAll('#so-compare-ops tbody tr').length === {n_current}")
    assert set(_column(page, "so-compare-ops", "in")) == {"current only"}
    # the framework ops one click away; "Stop comparing" goes back to the run alone
    page.select_option("#so-compare-kind", "framework")
    page.wait_for_function("() => new URLSearchParams(location.search).get('kind') === 'framework'")
    page.wait_for_selector("#so-compare-ops tbody tr")
    framework = [r for r in d["rows"] if r["kind"] == "framework"]
    assert _column(page, "so-compare-ops", "label")[:5] == [r["label"] for r in framework[:5]]
    page.click("#cmp-clear")
    page.wait_for_selector("#so-ops tbody tr")
    assert "base=" not in page.url


def test_steps_ops_self_compare_shows_zero(open_page, server):
    page = _compare_page(open_page, server, ("#so-compare-ops tbody tr",), tool="steps_ops", run=BERT, base=BERT)
    assert page.inner_text("#so-compare-median .value") == "0"
    assert set(_column(page, "so-compare-ops", "delta")) == {"0"}
    assert set(_column(page, "so-compare-ops", "in")) == {"both"}


TF = "xplane/tf_gpu/GPU-multi-worker"
TF_HOSTS = ("34.83.195.179_6003", "34.83.195.180_6003")
MP_WAITS = ("#mp-compare-timeline .scatterlayer", "#mp-compare-live tbody tr")


def _fmt_bytes_signed(page, v: int) -> str:
    """The page's own signed bytes (lib/format.js signedBytes), to compare text with text."""
    return page.evaluate("async (v) => (await import('/static/lib/format.js')).signedBytes(v)", v)


def _traces(page, chart: str) -> list[dict]:
    return page.evaluate(f"() => document.getElementById('{chart}').data.map((t) => ({{name: t.name, n: t.x.length}}))")


def test_memory_profile_two_traces_on_one_chart(open_page, server):
    d = _data(server, tag="memory_profile", run=BERT, base=V100)
    page = _compare_page(open_page, server, MP_WAITS, "compare_memory_profile_traces.png", tool="memory_profile", run=BERT, base=V100)
    assert page.inner_text("#mp-compare-peak .value") == _fmt_bytes_signed(page, d["totals"]["delta"])
    # resnet50's trace has no addresses: said, and its whole peak is the residual
    assert "not recorded" in page.inner_text("#cmp-head") and d["timeline"]["align"] == "time"
    traces = _traces(page, "mp-compare-timeline")
    assert [t["n"] for t in traces] == [len(d["timeline"]["base"]["x"]), len(d["timeline"]["current"]["x"])]
    assert traces[0]["name"].startswith("base: ") and traces[1]["name"].startswith("current: ")
    assert "time from the first sample" in page.eval_on_selector("#mp-compare-timeline .g-xtitle", "g => g.textContent")
    assert _column(page, "mp-compare-live", "label") == [r["label"] for r in d["rows"]][:50]


def test_memory_profile_allocation_counts(open_page, server):
    """The Allocations tile of two traces: the change and both counts as the diff answers
    them (every [memory] event with Bytes > 0 of CUDA:0, tests/test_compare_memory_profile.py
    checks them against the raw files), not "not counted"."""
    d = _data(server, tag="memory_profile", run=BERT, base=V100)
    page = _compare_page(open_page, server, MP_WAITS, "compare_memory_profile_counts.png", tool="memory_profile", run=BERT, base=V100)
    a = d["allocations"]
    assert a["base"] > 0 and a["current"] > 0 and a["delta"] == a["current"] - a["base"]
    sign = "+" if a["delta"] > 0 else ""
    assert page.inner_text("#mp-compare-allocs .value") == f"{sign}{a['delta']:,}"
    assert page.inner_text("#mp-compare-allocs .sub") == f"{a['base']:,} → {a['current']:,}"


def test_memory_profile_hosts_aligned_by_step(open_page, server):
    d = _data(server, tag="memory_profile", run=TF, host=TF_HOSTS[1], base_host=TF_HOSTS[0])
    assert d["timeline"]["align"] == "step" and d["totals"]["delta"] == 0
    page = _compare_page(open_page, server, MP_WAITS, "compare_memory_profile_hosts.png",
                         tool="memory_profile", run=TF, host=TF_HOSTS[1], base_host=TF_HOSTS[0])
    assert d["current"]["allocator"] in page.inner_text("#cmp-side-current")
    assert page.inner_text("#mp-compare-peak .value") == "0 B"
    assert "step" in page.eval_on_selector("#mp-compare-timeline .g-xtitle", "g => g.textContent")
    assert set(_column(page, "mp-compare-live", "delta")) == {"0 B"}
    page.click("#cmp-clear")
    page.wait_for_function("() => !new URLSearchParams(location.search).get('base_host')")
    page.wait_for_selector("#mp-body")


BOLONG = "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle"


def test_snapshot_compared_with_base(open_page, server):
    """The snapshot page takes base= as every tool does (other= stays its own key): the
    picker shows the base, and the change from the base to this snapshot is the server's
    diff JSON's (current - base), beside the A/B tables."""
    with urlopen(f"{server.rstrip('/')}/api/snapshot/compare?{urlencode({'run': NIU, 'base': BOLONG})}", timeout=120) as res:
        diff = json.loads(res.read())["diff"]
    page = _compare_page(open_page, server, ("#ts-compare-change", "#ts-sites tbody tr"), None,
                         tool="memory_profile", run=NIU, base=BOLONG)
    page.locator("#ts-compare").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "compare_snapshot_base.png"), full_page=True)
    assert page.input_value("#ts-compare-pick") == BOLONG
    t = diff["totals"]
    assert t["delta"] == t["current"] - t["base"] < 0 and t["residual"] == 0
    shown = page.evaluate("async (v) => (await import('/static/lib/format.js')).fmtBytes(v)", t["delta"])
    text = page.inner_text("#ts-compare-change")
    assert f"{shown} ({t['delta']:,} bytes)" in text, text
    assert f"{sum(r['in'] == 'base_only' for r in diff['rows'])} only in B" in text
    # the head's "Compare with…" (lib/compare.js, as on every page) drives the same compare
    assert page.input_value("#cmp-base") == BOLONG
    page.click("#cmp-clear")
    page.wait_for_function("() => !new URLSearchParams(location.search).get('base')")
    page.wait_for_selector("#ts-compare-change", state="detached")
    assert page.input_value("#ts-compare-pick") == ""
    page.select_option("#cmp-base", BOLONG)
    page.wait_for_function("() => new URLSearchParams(location.search).get('base') !== null")
    page.wait_for_selector("#ts-compare-change")
    assert page.input_value("#ts-compare-pick") == BOLONG and page.locator("#cmp-clear").count() == 1
