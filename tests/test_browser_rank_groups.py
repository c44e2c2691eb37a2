"""A distributed job's pages end to end (issue 38 item 3, docs/runs.md "One run per
distributed job"): the real server, Debian's Chromium driven by Playwright, network cut,
no mocks. Inputs as tests/test_rank_groups.py: 4 per-rank snapshots (real public and demo
snapshots copied and renamed at test time) and the traces of a real 2-process torchrun.
The run picker and the pages say "4 ranks: rank0 … rank3"; the snapshot page's "All
ranks" lists the ranks worst first with the API's peaks and a click opens one rank alone;
the trace viewer's "All ranks" has both ranks' steps and merges them on one timeline.
Screenshots: test-artifacts/rank_job_*.png."""

from __future__ import annotations

import json
import shutil
from urllib.parse import parse_qs, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_rank_groups import SNAPSHOT_JOB, TORCHRUN, TRACE_JOB, _snapshot_sources

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    root = tmp_path_factory.mktemp("ranklog")
    (root / "fsdp").mkdir()
    for rank, src in enumerate(_snapshot_sources(shared_fixtures)):
        shutil.copyfile(src, root / "fsdp" / f"rank{rank}_snapshot.pickle")
    shutil.copytree(TORCHRUN, root / "ddp", ignore=shutil.ignore_patterns("*.md"))
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def _get_json(server: str, path: str, **params):
    with urlopen(f"{server.rstrip('/')}{path}?{urlencode(params)}", timeout=300) as res:
        return json.loads(res.read())


def _query(page) -> dict:
    return parse_qs(urlparse(page.url).query)


def test_snapshot_job_all_ranks_and_one_rank_alone(open_page, server):
    ARTIFACTS.mkdir(exist_ok=True)
    runs = {r["name"]: r for r in _get_json(server, "/api/runs")["runs"]}
    assert runs[SNAPSHOT_JOB]["job"]["ranks"] == ["rank0", "rank1", "rank2", "rank3"]
    api = _get_json(server, "/api/memory_hosts", run=SNAPSHOT_JOB)
    page = open_page(server)
    page.goto(f"{server}?{urlencode({'run': SNAPSHOT_JOB, 'tool': 'memory_profile'}, quote_via=quote)}")
    page.wait_for_selector("#mp-hosts #mp-hosts-list")
    assert page.inner_text("#mp-hosts h2") == "All ranks"
    assert page.inner_text("#rank-job").startswith("4 ranks: rank0 … rank3 — one distributed job: files that differ only")
    # the run picker says it too
    label = page.locator("#pick-run option", has_text=SNAPSHOT_JOB).inner_text()
    assert label == f"{SNAPSHOT_JOB} (4 ranks)"
    rows = page.locator("#mp-hosts-list .mp-host-row")
    order = [rows.nth(i).get_attribute("data-host") for i in range(rows.count())]
    assert order == [h["host"] for h in api["hosts"]] and sorted(order) == ["rank0", "rank1", "rank2", "rank3"]
    for h in api["hosts"]:
        assert int(page.get_attribute(f"#mp-hosts-list .mp-host-row[data-host={h['host']}]", "data-peak")) == h["peakBytes"]
    worst = api["rollup"]["worstHost"]
    assert page.inner_text("#mp-hosts-summary").startswith(f"{worst} peaks at ")
    assert page.get_attribute("#mp-hosts-list .mp-host-row.current", "data-host") == "rank0"  # no host=: the first rank
    page.wait_for_selector("#ts-loading", state="detached")
    page.screenshot(path=str(ARTIFACTS / "rank_job_snapshots.png"), full_page=True)

    # A click opens the worst rank alone: host= in the URL, the snapshot page of that file.
    # (once the page's fetches are done: in one loaded CI run the click was lost, the URL
    # never changed; `go` pushes it synchronously, so the link's handler never ran)
    page.wait_for_load_state("networkidle")
    page.click(f"#mp-hosts-list .mp-host-row[data-host={worst}] a.mp-host-link")
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('host') === '{worst}'")
    page.wait_for_selector(f"#mp-hosts-list .mp-host-row.current[data-host={worst}]")
    page.wait_for_selector("#ts-loading", state="detached")
    assert f"{SNAPSHOT_JOB} · {worst}" in page.inner_text(".ts-head")
    overview = _get_json(server, "/api/snapshot/overview", run=SNAPSHOT_JOB, host=worst)
    alone = _get_json(server, "/api/snapshot/overview", run=f"fsdp/{worst}_snapshot.pickle")
    assert overview == alone  # the rank's own file's answer
    page.screenshot(path=str(ARTIFACTS / "rank_job_snapshot_worst.png"), full_page=True)


def test_trace_job_all_ranks_and_merged_timeline(open_page, server):
    api = _get_json(server, "/api/trace_hosts", run=TRACE_JOB)
    page = open_page(server)
    page.goto(f"{server}?{urlencode({'run': TRACE_JOB, 'tool': 'trace_viewer'}, quote_via=quote)}")
    page.wait_for_selector("#tvh #tvh-list .tvh-row[data-host]")
    page.wait_for_selector("#tv-canvas")
    assert page.inner_text("#tvh summary strong") == "All ranks"
    assert page.inner_text("#tvh-job").startswith("2 ranks: rank0 … rank1")
    rows = page.locator("#tvh-list .tvh-row[data-host]")
    order = [rows.nth(i).get_attribute("data-host") for i in range(rows.count())]
    assert order == [h["host"] for h in api["hosts"]] and api["rollup"]["slowestHost"] == order[0]
    page.screenshot(path=str(ARTIFACTS / "rank_job_traces.png"), full_page=True)

    # Both ranks on one timeline (hosts=rank0,rank1), as a pod's hosts are.
    page.check("#tvh-list .tvh-row[data-host=rank0] input[type=checkbox]")
    page.check("#tvh-list .tvh-row[data-host=rank1] input[type=checkbox]")
    assert page.inner_text("#tvh-open") == "Open 2 hosts in one timeline"
    page.click("#tvh-open")
    page.wait_for_function("() => (new URLSearchParams(location.search).get('hosts') || '').includes(',')")
    assert sorted(_query(page)["hosts"][0].split(",")) == ["rank0", "rank1"]
    page.wait_for_selector("#tvh-list .tvh-row.current >> nth=1")
    page.wait_for_function("() => document.querySelector('#tv-counts') && document.querySelector('#tv-counts').textContent.length > 0")
    page.screenshot(path=str(ARTIFACTS / "rank_job_traces_merged.png"), full_page=True)

    # The memory profile of rank1 alone: its own trace's payload.
    page.goto(f"{server}?{urlencode({'run': TRACE_JOB, 'tool': 'memory_profile', 'host': 'rank1'}, quote_via=quote)}")
    page.wait_for_selector("#mp-hosts #mp-hosts-list")
    page.wait_for_selector("#mp-summary")
    assert page.get_attribute("#mp-hosts-list .mp-host-row.current", "data-host") == "rank1"
    mine = _get_json(server, "/api/memory_profile", run=TRACE_JOB, host="rank1")
    alone = _get_json(server, "/api/memory_profile", run="ddp/ddp_rank1.pt.trace.json.gz")
    assert mine == alone
    page.screenshot(path=str(ARTIFACTS / "rank_job_trace_memory.png"), full_page=True)
