"""The dashboard on shared/fixtures/public_profiles as a new user opens it (issue 31 items
3, 7 and 9), in Debian's Chromium (Playwright), the network cut, against ``profscope
serve`` of that folder: the real corrupt TPU xplane first in the run list, the real
two-host TF GPU profile, the real V100 PyTorch trace. What each page should show is read
from the JSON API (or the files), not from the page. Screenshots in test-artifacts/."""

from __future__ import annotations

import json
import re
from urllib.error import HTTPError
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server

pytestmark = pytest.mark.browser

READY = "window.__traceViewer && __traceViewer.ready()"
TF_GPU = "xplane/tf_gpu/GPU-multi-worker"


@pytest.fixture(scope="module")
def server(shared_fixtures, tmp_path_factory):
    with profscope_server("serve", str(shared_fixtures / "public_profiles"), "--port", "0",
                          "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _get(server: str, path: str, **params) -> tuple[int, dict]:
    try:
        with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=300) as res:
            return res.status, json.loads(res.read())
    except HTTPError as e:
        return e.code, json.loads(e.read())


def _url(server: str, **state) -> str:
    return f"{server}?{urlencode(state, quote_via=quote)}"


def _query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_a_bare_url_opens_the_first_run_that_reads_and_marks_the_broken_one(server, open_page):
    """Item 3: `/` landed on "Cannot read run …tpu_inference_corrupt…" (the first run of the
    catalog) with an empty tool picker and no way to the good runs. It opens the first run
    whose /api/run answers, names the broken one with its reason in the run picker and on
    the overview; opening the broken one shows why and lists the other runs."""
    runs = _get(server, "/api/runs")[1]["runs"]
    before, first = {}, None
    for r in runs:  # what the catalog holds, asked the way the page asks
        status, body = _get(server, "/api/run", run=r["name"])
        if status == 200:
            first = body
            break
        assert 400 <= status < 500, body
        before[r["name"]] = body["error"].removeprefix(f"{body['file']}: ")
    assert before and first, "the public profiles list their corrupt xplane first"
    broken = next(iter(before))

    page = open_page(server, shown=(404, 422))  # the corrupt run's 422 is read on purpose
    page.goto(server)
    page.wait_for_selector("#run-title")
    assert _query(page)["run"] == first["name"] == page.inner_text("#run-title")
    tools = page.eval_on_selector_all("#pick-tool option", "o => o.map((x) => x.textContent)")
    titles = [t["title"] for t in first["tools"]]
    assert tools == [*titles[:1], "Overview", *titles[1:]] and titles[0] == "Summary"  # the Summary first, the overview next
    marked = page.eval_on_selector_all("#pick-run option[data-unreadable]", "o => o.map((x) => [x.value, x.textContent, x.title])")
    assert [m[0] for m in marked] == list(before)
    for name, text, title in marked:
        assert "cannot be read" in text and before[name] in text and title == before[name]
    assert page.locator("#pick-run option").count() == len(runs)
    note = page.inner_text("#unreadable-runs")
    assert broken in note and before[broken] in note
    _shot(page, "public_profiles_first_run")

    # The broken run itself: its error, and every other run one click away.
    page.select_option("#pick-run", broken)
    page.wait_for_selector("#run-list")
    assert "truncated XSpace profile" in page.inner_text("#view .error")
    listed = page.eval_on_selector_all("#run-list li", "li => li.map((x) => x.dataset.run)")
    assert listed == [r["name"] for r in runs if r["name"] != broken]
    assert page.eval_on_selector_all("#pick-tool option", "o => o.map((x) => x.textContent)") == ["Overview"]
    _shot(page, "public_profiles_broken_run")
    page.click(f'#run-list li[data-run="{first["name"]}"] a')
    page.wait_for_selector("#run-title")
    assert _query(page)["run"] == first["name"]


def test_the_tool_picker_names_the_tool_that_is_open(server, open_page):
    """Item 9: the memory viewer of a run without HLO modules (the TF GPU profile, reached
    by a link) showed "Overview" in the tool picker."""
    status, details = _get(server, "/api/run", run=TF_GPU)
    assert status == 200 and "memory_viewer" not in {t["name"] for t in details["tools"]}
    titles = {t["name"]: t["title"] for r in _get(server, "/api/runs")[1]["runs"] if r["kind"] == "profile"
              for t in _get(server, "/api/run", run=r["name"])[1].get("tools", [])}
    page = open_page(server)
    page.goto(_url(server, run=TF_GPU, tool="memory_viewer"))
    page.wait_for_selector("#view h1")
    page.wait_for_function("() => document.querySelector('#pick-tool').value === 'memory_viewer'")
    shown = page.eval_on_selector("#pick-tool", "s => s.selectedOptions[0].textContent")
    assert shown.startswith(titles["memory_viewer"]) and shown != "Overview"
    _shot(page, "public_profiles_tool_picker")


def test_the_oom_gauge_label_is_whole(server, open_page):
    """Item 9: the gauge's label ("peak allocated 2.60 GiB of 31.7 GiB") was Plotly's
    indicator title, right-aligned left of the bullet and cut at the card's left edge."""
    run = "traces/kineto_resnet50_v100.pt.trace.json.gz"
    status, risk = _get(server, "/data/plugin/profile/data", run=run, tag="oom_risk")
    assert status == 200 and risk["capacityBytes"]
    page = open_page(server)
    page.goto(_url(server, run=run, tool="oom_risk"))
    page.wait_for_selector("#oom-gauge .main-svg")
    fmt = lambda v: page.evaluate("v => import('/static/lib/format.js').then((m) => m.fmtBytes(v))", v)
    words = f"{risk['peakMeasure']} {fmt(risk['peakBytes'])} of {fmt(risk['capacityBytes'])}"
    assert words in page.inner_text(".oom-gauge")
    # Every text of the gauge card lies inside the card, and none is clipped by its box.
    outside = page.evaluate("""() => {
        const card = document.querySelector('.oom-gauge').getBoundingClientRect();
        return [...document.querySelectorAll('.oom-gauge text, .oom-gauge-label')].filter((t) => t.textContent.trim())
          .map((t) => [t.textContent, t.getBoundingClientRect()])
          .filter(([, r]) => r.left < card.left - 0.5 || r.right > card.right + 0.5).map(([text]) => text);
      }""")
    assert not outside, outside
    label = page.locator(".oom-gauge-label")
    assert label.count() == 1 and page.evaluate("(e) => e.scrollWidth <= e.clientWidth", label.element_handle())
    page.locator(".oom-gauge").screenshot(path=str(ARTIFACTS / "public_profiles_oom_gauge.png"))


def test_merged_hosts_keep_each_device_number_and_the_picker_names_the_hosts(server, open_page):
    """Item 7: with both hosts of the TF GPU profile on one timeline, every process header
    read "34.83.195.179_6003 /device:GP…", and the top bar's host picker showed the first
    host as if it alone were open."""
    hosts = _get(server, "/api/run", run=TF_GPU)[1]["hosts"]
    assert len(hosts) == 2
    status, window = _get(server, "/api/trace/window", run=TF_GPU, hosts=",".join(hosts), resolution=200)
    assert status == 200
    # What tells the hosts apart, from their names: the parts one has and the other not.
    parts = [set(re.split(r"[._:-]", h)) for h in hosts]
    own = {h: sorted(p - q) for h, p, q in ((hosts[0], parts[0], parts[1]), (hosts[1], parts[1], parts[0]))}
    page = open_page(server)
    page.goto(_url(server, run=TF_GPU, tool="trace_viewer", hosts=",".join(hosts)))
    page.wait_for_function(READY, timeout=300_000)
    page.evaluate("__traceViewer.setWindow(...__traceViewer.window())")  # one full repaint
    page.wait_for_function(READY)
    headers = [r for r in page.evaluate("__traceViewer.rows()") if r["type"] == "process"]
    names = {p["name"] for p in window["processes"]}
    assert len(headers) >= 2 * 2 and {h["name"] for h in headers} <= names
    for h in headers:
        host = next(x for x in hosts if h["name"].startswith(x))
        device = h["name"][len(host):].strip()  # "/device:GPU:1", "/host:CPU"
        assert h["label"].endswith(device), h  # the whole device name, its number last
        assert any(part in h["label"] for part in own[host]), (h, own[host])
    assert len({h["label"] for h in headers}) == len(headers)
    picked = page.eval_on_selector("#pick-host", "s => [s.selectedOptions[0].textContent, s.selectedOptions[0].title]")
    assert picked[0].startswith("2 hosts") and all(p in picked[0] for h in hosts for p in own[h]), picked
    assert picked[1].split("\n") == hosts
    _shot(page, "public_profiles_merged_hosts")

    # A host picked from the list opens that host alone.
    page.select_option("#pick-host", hosts[1])
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('host') === {json.dumps(hosts[1])}")
    page.wait_for_function(READY, timeout=300_000)
    assert "hosts" not in _query(page)
    assert page.eval_on_selector("#pick-host", "s => s.selectedOptions[0].textContent") == hosts[1]
    labels = [r["label"] for r in page.evaluate("__traceViewer.rows()") if r["type"] == "process"]
    assert labels and all(re.search(r"/(device|host):\w+(:\d+)?$", x) for x in labels), labels
    _shot(page, "public_profiles_one_host")
