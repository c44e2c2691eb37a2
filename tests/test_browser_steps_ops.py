"""The Steps & ops page end to end: the real server over shared/fixtures/public_profiles,
Debian's Chromium driven by Playwright, network cut, no mocks.

* a PyTorch trace (V100 ResNet-50): the stacked step chart, a click on a bar selects
  the step (step= in the URL, the table shows that step's ops), sorting and filtering go
  into the URL and a fresh page reopens the same view, an op's details link the trace
  viewer at its slowest occurrence, which opens with that event selected;
* the MI300 GEMM (ROCm xplane): the ops table with XProf's HLO ops (the same counts as
  the API), kind/category selectors, the memory viewer link of an HLO op's module;
* the TPU v6e inference profile: HLO rows with their roofline; XProf's hlo_stats tool
  opens this page on its HLO rows;
* the TF GPU profile (2 hosts): the "All hosts" view (host=ALL_HOSTS);
* bad input: the corrupt TPU profile is said, with the file, never a blank page.

Screenshots (test-artifacts/steps_ops_*.png) are looked at by whoever changes the page."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser

V100 = "traces/kineto_resnet50_v100.pt.trace.json.gz"
MI300 = "xplane/mi300_jax08_gemm/jax08_gemm"
TPU = "xplane/tpu_inference/2025_12_10_tpu"
TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
CORRUPT = "xplane/tpu_inference_corrupt/2025_12_15_tpu"


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    root = shared_fixtures / "public_profiles"
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _api(server: str, **params) -> dict:
    with urlopen(f"{server.rstrip('/')}/api/steps_ops?{urlencode(params)}", timeout=120) as res:
        return json.loads(res.read())


def _open(page, server: str, **state):
    page.goto(f"{server}?{urlencode({'tool': 'steps_ops', **state}, quote_via=quote)}")
    page.wait_for_selector("#so-ops tbody tr, #view .error")


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _names(page) -> list[str]:
    return page.locator("#so-ops tbody tr td:first-child").all_inner_texts()


def _kinds(page) -> set[str]:
    return set(page.locator("#so-ops tbody tr td:nth-child(2)").all_inner_texts())


def _yaxis(page, chart: str) -> tuple[str, list[str]]:
    """A chart's y axis: its title and tick labels."""
    title = page.eval_on_selector(f"#{chart} .g-ytitle", "g => g.textContent")
    return title, page.eval_on_selector_all(f"#{chart} .ytick text", "ts => ts.map((t) => t.textContent)")


def test_pytorch_trace_steps_sort_filter_and_trace_link(open_page, server):
    ARTIFACTS.mkdir(exist_ok=True)
    api = _api(server, run=V100)
    page = open_page(server)
    _open(page, server, run=V100)
    page.wait_for_selector("#so-steps-chart .bars")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_v100.png"), full_page=True)
    assert page.inner_text("#so-steps-count .value") == str(len(api["steps"]))
    # the Ops tile counts the rows the table shows (kernels), every kind's count beside it
    kernels = sum(r["kind"] == "kernel" for r in api["ops"])
    assert page.inner_text("#so-ops-count .label") == "Ops: kernels"
    assert page.inner_text("#so-ops-count .value") == f"{kernels:,}"
    assert page.inner_text("#so-ops-count .sub") == \
        " · ".join(f"{n:,} {name}" for kind, name in (("kernel", "kernels"), ("framework", "framework ops"))
                   for n in [sum(r["kind"] == kind for r in api["ops"])] if n)
    # by default the device's own rows, the kernels, as the API ranks them (most total
    # time first): framework ops nest over the same kernels, so mixed in they would count
    # the device time several times; the kernels' shares are of the steps' device time
    kernels = [r for r in api["ops"] if r["kind"] == "kernel"]
    assert _kinds(page) == {"kernel"} and page.input_value("#so-kind") == "kernel"
    assert _names(page)[:5] == [r["name"] for r in kernels[:5]]
    assert 0 < sum(r["share"] for r in kernels) <= 1
    assert page.inner_text("#so-share-of") == f"Share: of {api['share_of']['kernel']}."
    assert f"{len(api['steps'])} steps × 1 GPU" in api["share_of"]["kernel"]
    # the step chart's time axis in the unit its steps read in (ms here), not "150k µs"
    title, ticks = _yaxis(page, "so-steps-chart")
    assert max(s["step_time_us"] for s in api["steps"]) > 1e5 and title == "step time (ms)", (title, ticks)
    assert not any("k" in t or "M" in t for t in ticks), ticks

    # the framework ops one click away (kind= in the URL), every kind too
    page.select_option("#so-kind", "framework")
    page.wait_for_function("() => new URLSearchParams(location.search).get('kind') === 'framework'")
    page.wait_for_selector("#so-ops tbody tr")
    assert _kinds(page) == {"framework"}
    page.select_option("#so-kind", "all")
    page.wait_for_function("() => new URLSearchParams(location.search).get('kind') === 'all'")
    assert _kinds(page) == {"kernel", "framework"} and "do not add up" in page.inner_text("#so-share-of")
    page.select_option("#so-kind", "kernel")
    page.wait_for_function("() => new URLSearchParams(location.search).get('kind') === 'kernel'")

    # a click on a step's bar selects it: step= in the URL, that step's ops in the table
    step = api["steps"][2]["step"]
    box = page.locator("#so-steps-chart .bars .point path").nth(2).bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # Plotly's drag layer takes the events
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('step') === '{step}'")
    page.wait_for_selector("#so-clear-step")
    one = _api(server, run=V100, step=step)
    page.wait_for_function("n => document.querySelector('#so-count').textContent.endsWith(`of ${n} ops`)",
                           arg=f"{sum(1 for r in one['ops'] if r['kind'] == 'kernel'):,}")
    assert page.inner_text("h2:has-text('Ops of step')") == f"Ops of step #{step}"

    # sort by occurrences (ascending after two clicks), filter, and the URL keeps both
    page.click("#so-ops th[data-key=occurrences]")
    assert _query(page)["sort"] == "-occurrences"
    page.fill("#so-filter", "elementwise")
    page.wait_for_function("() => new URLSearchParams(location.search).get('opq') === 'elementwise'")
    shown = _names(page)
    assert shown and all("elementwise" in n for n in shown)
    occ = [int(t.replace(",", "")) for t in page.locator("#so-ops tbody tr td:nth-child(5)").all_inner_texts()]
    assert occ == sorted(occ, reverse=True)
    url = page.url
    again = open_page(server)
    again.goto(url)
    again.wait_for_selector("#so-ops tbody tr")
    assert _names(again) == shown and again.input_value("#so-filter") == "elementwise"
    assert again.get_attribute("#so-ops th[data-key=occurrences]", "aria-sort") == "descending"

    # an op's details link the trace viewer at its slowest occurrence, event selected
    page.locator("#so-ops tbody tr").first.click()
    page.wait_for_selector("#so-op #so-trace-link")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_v100_op.png"), full_page=True)
    row = next(r for r in one["ops"] if r["name"] == shown[0])
    page.click("#so-trace-link")
    page.wait_for_selector("#tv-canvas")
    q = _query(page)
    assert q["tool"] == "trace_viewer@" and q["ev"] == str(row["slowest"]["event_id"])
    assert float(q["start_ms"]) <= row["slowest"]["start_us"] / 1e3 <= float(q["end_ms"])
    page.wait_for_selector("#tv-card .tv-card-name")
    assert page.inner_text("#tv-card .tv-card-name") == row["name"]  # the occurrence is selected
    page.screenshot(path=str(ARTIFACTS / "steps_ops_v100_trace.png"), full_page=True)


def test_mi300_hlo_ops_selectors_and_memory_link(open_page, server):
    api = _api(server, run=MI300)
    page = open_page(server)
    _open(page, server, run=MI300)
    page.wait_for_selector("#so-steps-chart .main-svg, #so-no-steps")  # the module's runs are its steps, or none
    if api["steps"]:  # the table behind the chart: a row per step and device
        page.click(".so-step-details summary")
        page.wait_for_selector("#so-step-table tbody tr")
        assert page.locator("#so-step-table tbody tr").count() == sum(len(s["devices"]) for s in api["steps"])
    # an xplane with HLO ops: those are its device's own rows, shown without kind=
    assert page.input_value("#so-kind") == "hlo" and "kind" not in _query(page)
    assert page.inner_text("#so-share-of") == f"Share: of {api['share_of']['hlo']}."
    hlo = [r for r in api["ops"] if r["kind"] == "hlo"]
    assert 0 < sum(r["share"] for r in hlo) <= 1
    page.wait_for_function("n => document.querySelector('#so-count').textContent.startsWith(`${n} of`)", arg=str(len(hlo)))
    assert sorted(_names(page)) == sorted(r["name"] for r in hlo)
    page.select_option("#so-category", "custom-call")
    page.wait_for_function("() => new URLSearchParams(location.search).get('category') === 'custom-call'")
    assert set(page.locator("#so-ops tbody tr td:nth-child(3)").all_inner_texts()) == {"custom-call"}
    page.locator("#so-ops tbody tr").first.click()
    page.wait_for_selector("#so-memory-link")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_mi300.png"), full_page=True)
    module = page.inner_text("#so-memory-link").removeprefix("Memory viewer of ")
    page.click("#so-memory-link")
    page.wait_for_function("m => new URLSearchParams(location.search).get('module_name') === m", arg=module)
    assert _query(page)["tool"] == "memory_viewer"


def test_mi300_step_shows_each_hlo_ops_events_in_it(open_page, server):
    """A click on the MI300 GEMM's one step (a module run): the HLO rows gain an "in step"
    column (their XLA Ops events in it), and the page says the rows count the profile."""
    page = open_page(server)
    _open(page, server, run=MI300, kind="hlo")
    page.wait_for_selector("#so-steps-chart .main-svg")
    paths = page.locator("#so-steps-chart .bars .point path")
    box = max((paths.nth(i).bounding_box() for i in range(paths.count())), key=lambda b: b["height"])  # a category's segment
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#so-ops th[data-key=in_step]")
    assert _query(page)["step"] == "0" and page.locator("#so-scope-note").count() == 1
    page.click("#so-ops th[data-key=in_step]")
    first = page.locator("#so-ops tbody tr").first
    assert first.locator("td").nth(0).inner_text() == "custom-call.1"
    assert first.locator("td").nth(5).inner_text() == "1 × · 2.027 ms"
    page.screenshot(path=str(ARTIFACTS / "steps_ops_mi300_step.png"), full_page=True)


def test_within_steps_switch_and_open_op_in_the_url(open_page, server):
    """The MI300 GEMM's kernels inside its one step, then every kernel once the switch is
    off (within=0 in the URL, the API's within_steps=0 rows); an open op (op=) reopens."""
    steps = _api(server, run=MI300)
    whole = _api(server, run=MI300, within_steps="0")
    count = lambda b: sum(1 for r in b["ops"] if r["kind"] == "kernel")  # noqa: E731
    assert count(whole) > count(steps) > 0
    page = open_page(server)
    _open(page, server, run=MI300, kind="kernel")
    assert page.inner_text("#so-count").startswith(f"{count(steps)} of")
    page.uncheck("#so-within")
    page.wait_for_function("() => new URLSearchParams(location.search).get('within') === '0'")
    page.wait_for_function("n => document.querySelector('#so-count').textContent.startsWith(`${n} of`)", arg=str(count(whole)))
    page.locator("#so-ops tbody tr").nth(1).click()
    page.wait_for_selector("#so-op")
    name = page.inner_text("#so-op h3")
    again = open_page(server)
    again.goto(page.url)
    again.wait_for_selector("#so-op")
    assert again.inner_text("#so-op h3") == name and not again.is_checked("#so-within")
    assert again.locator("#so-ops tr.selected td").first.inner_text() == name  # the open row marked


def test_b200_trace_without_steps(open_page, server):
    """TraceLens's B200 trace has no ProfilerStep: the page says so, the within-steps switch
    is off and disabled, the table ranks every kernel and framework op; a kernel's link
    opens the trace viewer on it; the device selector keeps the rows that ran there."""
    run = "traces/tracelens_b200_eager.trace.json.gz"
    api = _api(server, run=run)
    page = open_page(server)
    _open(page, server, run=run)
    assert "ProfilerStep" in page.inner_text("#so-missing")
    assert page.is_disabled("#so-within") and not page.is_checked("#so-within")
    assert _names(page)[:5] == [r["name"] for r in api["ops"] if r["kind"] == "kernel"][:5]
    assert "the devices' time from first to last activity" in page.inner_text("#so-share-of")  # no steps
    page.select_option("#so-device", "GPU 0")
    page.wait_for_function("() => new URLSearchParams(location.search).get('device') === 'GPU 0'")
    kinds = set(page.locator("#so-ops tbody tr td:nth-child(2)").all_inner_texts())
    assert kinds == {"kernel"}  # framework ops are host ops: no device of their own
    kernel = next(r for r in api["ops"] if r["kind"] == "kernel")
    page.locator("#so-ops tbody tr").first.click()
    page.wait_for_selector("#so-trace-link")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_b200.png"), full_page=True)
    page.click("#so-trace-link")
    page.wait_for_selector("#tv-card .tv-card-name")
    assert page.inner_text("#tv-card .tv-card-name") == kernel["name"]


def test_tpu_roofline_and_hlo_stats_opens_here(open_page, server):
    page = open_page(server)
    page.goto(f"{server}?{urlencode({'run': TPU, 'tool': 'hlo_stats'}, quote_via=quote)}")
    page.wait_for_selector("#so-ops tbody tr")
    q = _query(page)
    assert q["tool"] == "steps_ops" and q["kind"] == "hlo"
    bounds = set(page.locator("#so-ops tbody tr td:nth-child(10)").all_inner_texts())
    assert "memory" in bounds  # the fusions with XLA's cost analysis sit on the roofline
    page.locator("#so-ops tbody tr", has_text="memory").first.click()
    page.wait_for_selector("#so-op")
    assert "FLOP/byte" in page.inner_text("#so-op")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_tpu.png"), full_page=True)


def test_tf_gpu_all_hosts(open_page, server):
    page = open_page(server)
    _open(page, server, run=TF_GPU)
    page.click("#so-all-hosts")
    page.wait_for_function("() => new URLSearchParams(location.search).get('host') === 'ALL_HOSTS'")
    page.wait_for_selector("#so-hosts-chart .main-svg")
    api = _api(server, run=TF_GPU, host="ALL_HOSTS")
    bars = page.eval_on_selector_all("#so-hosts-chart .xtick text", "ts => ts.map((t) => t.textContent)")
    assert [b.rstrip(" ★") for b in bars] == [h["host"] for h in api["hosts"]]
    if api.get("straggler_host"):
        assert f"{api['straggler_host']} ★" in bars and page.locator("#so-straggler-host").count() == 1
    # the tiles say what reads across hosts: hosts with steps, the slowest host's median,
    # the slowest step of any host; the ops are per host
    with_steps = [h for h in api["hosts"] if h["steps"]]
    assert page.inner_text("#so-hosts-count .value") == f"{len(with_steps)} of {len(api['hosts'])}"
    slow = max(with_steps, key=lambda h: h["median_us"])
    assert slow["host"] in page.inner_text("#so-slowest-host .sub")
    assert page.inner_text("#so-slowest-host .value") not in ("—", "") and page.inner_text("#so-slowest-any .value") != "—"
    assert "per host" in page.inner_text("#so-summary")
    # the top bar's Host menu says all hosts, not the first one
    shown = page.eval_on_selector("#pick-host", "s => s.options[s.selectedIndex].textContent")
    assert shown == f"all {len(api['hosts'])} hosts: 34.83.195.{{179,180}}_6003", shown
    title, ticks = _yaxis(page, "so-hosts-chart")
    assert title == "step time (ms)" and not any("k" in t for t in ticks), (title, ticks)  # 21.3 ms steps
    page.wait_for_selector("#so-ops-per-host")  # the ops table is one host's
    page.screenshot(path=str(ARTIFACTS / "steps_ops_tf_gpu_all_hosts.png"), full_page=True)
    page.click("#so-ops-per-host a")
    page.wait_for_selector("#so-ops tbody tr")
    assert _query(page)["host"] == api["hosts"][0]["host"]
    # one host: its step per GPU (a two-level axis: step, then device)
    page.wait_for_selector("#so-steps-chart .main-svg")
    one = _api(server, run=TF_GPU, host=api["hosts"][0]["host"])
    ticks = page.eval_on_selector_all("#so-steps-chart .xtick text, #so-steps-chart .xtick2 text", "ts => ts.map((t) => t.textContent)")
    # each GPU named as the trace viewer names its process (/device:GPU:1), not "dev 1"
    assert {d["plane"] for d in one["steps"][0]["devices"]} == {"/device:GPU:1", "/device:GPU:4", "/device:GPU:6"}
    assert {d["plane"] for d in one["steps"][0]["devices"]} <= set(ticks), ticks
    page.screenshot(path=str(ARTIFACTS / "steps_ops_tf_gpu_host.png"), full_page=True)


def test_corrupt_profile_says_what_is_wrong(open_page, server):
    page = open_page(server, shown=(404, 422))
    _open(page, server, run=CORRUPT)
    text = page.inner_text("#view")
    assert "tpu_inference_2.xplane.pb" in text
    # every host unreadable (its only one): all hosts is that host's 4xx, naming the file
    with pytest.raises(HTTPError) as err:
        _api(server, run=CORRUPT, host="ALL_HOSTS")
    assert err.value.code == 422 and "tpu_inference_2.xplane.pb" in json.loads(err.value.read())["error"]
    page.screenshot(path=str(ARTIFACTS / "steps_ops_corrupt.png"), full_page=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


@pytest.mark.parametrize("run", ["convnet/2026_11_29_19_47_20", "torch/mlp_train.pt.trace.json.gz"])
def test_cpu_only_runs_say_what_is_missing(open_page, demo, run):
    """A CPU-only JAX profile (no device plane) and a CPU-only PyTorch trace (no kernel):
    the host's step times drawn, what is missing said, the table empty or of framework ops."""
    api = _api(demo, run=run)
    page = open_page(demo)
    _open(page, demo, run=run)
    page.wait_for_selector("#so-steps-chart .main-svg")
    # only the series a step has are drawn: the host's step time here (the device
    # categories and idle, all zero, cost Plotly a bar per step each: jax308's 44,000
    # steps took 35 s to draw with them, 6 s without)
    drawn = page.eval_on_selector("#so-steps-chart", "d => d.data.map((t) => t.name)")
    assert drawn == ["step time (host, no device)"], drawn
    # the steps as a table: one row per step, the host's step time (it had no row
    # without devices), made when opened
    assert page.locator("#so-step-table").count() == 0
    page.click(".so-step-details summary")
    page.wait_for_selector("#so-step-table tbody tr")  # (the toggle event comes after the click)
    assert page.locator("#so-step-table tbody tr").count() == len(api["steps"])
    first = page.locator("#so-step-table tbody tr").first.locator("td").all_inner_texts()
    assert first[1] == "host" and first[3:] == ["—", "—", "—"] and first[2].strip()
    assert page.inner_text("#so-missing") == f"Missing: {api['summary']['missing']}"
    assert page.inner_text("#so-steps-count .value") == str(api["summary"]["steps"])
    # no device: no device time for shares to be of, and no note about them
    assert page.locator("#so-share-of").count() == 0
    if api["ops"]:
        assert _names(page)[:3] == [r["name"] for r in api["ops"][:3]]
    else:
        assert "No device op in this profile" in page.inner_text("#so-ops tbody")
    page.screenshot(path=str(ARTIFACTS / f"steps_ops_cpu_{run.split('/')[0]}.png"), full_page=True)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, shared_fixtures):
    """Seven real profiles as the hosts of one session (tests/test_trace_hosts.py), the
    corrupt one left out: hosts whose step times differ, so one is the straggler."""
    from tests.test_trace_hosts import build_mixed_session

    root = tmp_path_factory.mktemp("mixedlog")
    run, _ = build_mixed_session(root, shared_fixtures, corrupt=False)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url, run


def test_all_hosts_marks_the_straggler_host(open_page, mixed):
    url, run = mixed
    api = _api(url, run=run, host="ALL_HOSTS")
    assert api["straggler_host"], "the mixed session's hosts differ"
    page = open_page(url)
    _open(page, url, run=run)
    page.click("#so-all-hosts")
    page.wait_for_selector("#so-hosts-chart .main-svg")
    bars = page.eval_on_selector_all("#so-hosts-chart .xtick text", "ts => ts.map((t) => t.textContent)")
    assert bars == [f"{h['host']} ★" if h["host"] == api["straggler_host"] else h["host"] for h in api["hosts"]]
    assert page.inner_text("#so-straggler-host strong") == api["straggler_host"]
    # a log axis (hosts' steps differ by 100x or more): each tick in its own unit
    title, ticks = _yaxis(page, "so-hosts-chart")
    assert title == "step time (log)" and ticks and all(re.fullmatch(r"[\d.,]+ (ps|ns|µs|ms|s)", t) for t in ticks), (title, ticks)
    assert len({t.split()[1] for t in ticks}) > 1, ticks  # more than one unit: the steps differ by orders of magnitude
    page.screenshot(path=str(ARTIFACTS / "steps_ops_all_hosts_straggler.png"), full_page=True)
    # a click on the straggler's bars opens that host
    i = [h["host"] for h in api["hosts"]].index(api["straggler_host"])
    box = page.locator("#so-hosts-chart .bars").first.locator(".point path").nth(i).bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + 20)  # near its top: on a log axis the path runs far below the plot
    page.wait_for_function("h => new URLSearchParams(location.search).get('host') === h", arg=api["straggler_host"])
    page.wait_for_selector("#so-ops tbody tr")


@pytest.fixture(scope="module")
def mixed_corrupt(tmp_path_factory, shared_fixtures):
    """The mixed session with the corrupt TPU profile as its eighth host (host08)."""
    from tests.test_trace_hosts import build_mixed_session

    root = tmp_path_factory.mktemp("mixedbad")
    run, _ = build_mixed_session(root, shared_fixtures, corrupt=True)
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url, run


def test_all_hosts_with_a_corrupt_host(open_page, mixed_corrupt):
    """One unreadable host is an error row naming its file (as /api/trace_hosts lists
    it), not a 422 for the whole session: the seven others are still drawn."""
    url, run = mixed_corrupt
    api = _api(url, run=run, host="ALL_HOSTS")
    bad = [h for h in api["hosts"] if h.get("status") == "error"]
    assert [h["host"] for h in bad] == ["host08"] and bad[0]["file"].endswith("host08.xplane.pb")
    assert len(api["hosts"]) == 8 and api["summary"]["unreadable"] == 1
    page = open_page(url)
    page.goto(f"{url}?{urlencode({'run': run, 'tool': 'steps_ops', 'host': 'ALL_HOSTS'}, quote_via=quote)}")
    page.wait_for_selector("#so-hosts-chart .main-svg, #view .error")
    bars = page.eval_on_selector_all("#so-hosts-chart .xtick text", "ts => ts.map((t) => t.textContent)")
    assert [b.rstrip(" ★") for b in bars] == [f"host0{i}" for i in range(1, 8)]
    errors = page.inner_text("#so-host-errors")
    assert "host08" in errors and "host08.xplane.pb" in errors and bad[0]["reason"] in errors
    assert page.inner_text("#so-hosts-count .value") == "7 of 8" and "1 unreadable" in page.inner_text("#so-hosts-count")
    page.screenshot(path=str(ARTIFACTS / "steps_ops_all_hosts_corrupt.png"), full_page=True)
