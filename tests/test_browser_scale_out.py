"""The "Converting hosts" panel (lib/conversions.js) in Chromium against ``profscope serve
--dask-workers 2`` in its own process: a 16-host session of copies of a real 3 MB
TensorFlow GPU xplane. Opening a host's trace viewer submits the run (that host first);
the panel counts the hosts up to 16/16 with a bar and a state per host (one host, a
bigger built profile, long enough to be seen part way), from the
workers' progress events (GET /api/convert), then stops polling. The memory profile
page of another run that is converting shows the same panel. Screenshots:
test-artifacts/scale_out_converting.png, scale_out_done.png, scale_out_memory_profile.png."""

from __future__ import annotations

import os
import shutil
import time
from urllib.parse import quote, urlencode

import httpx
import pytest

from profscope.testing import derived_xplane
from tests.conftest import ARTIFACTS, profscope_server

pytest.importorskip("distributed")
pytestmark = pytest.mark.browser

HOSTS = [f"host{i:02d}" for i in range(16)]


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures):
    (xplane, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    root = tmp_path_factory.mktemp("pod")
    for run, hosts in (("s", HOSTS), ("t", HOSTS[:8]), ("u", HOSTS)):
        folder = root / "plugins/profile" / run
        folder.mkdir(parents=True)
        for host in hosts:
            shutil.copy(xplane, folder / f"{host}.xplane.pb")
    # The last host of run s is a bigger GPU profile (the builder's 1,000,000 kernels,
    # 47 MB): it indexes for about 2 s (a quiet machine decodes ~0.5 M events a second),
    # so the page's polls (every 0.5 s) see it part way however busy the machine is; with
    # copies only, or 150,000 kernels (~0.3 s, a CI run of 2026-12-06 saw no host part
    # way), the polls could fall between a host's start and its end.
    (root / "plugins/profile/s" / f"{HOSTS[-1]}.xplane.pb").write_bytes(derived_xplane.large_gpu(1_000_000))
    # events every 50 ms instead of 250: these hosts index in ~0.3 s, and the page is to
    # show a host part way (the server reads the setting; its tasks carry it)
    old = os.environ.get("PROFSCOPE_REPORT_EVERY")
    os.environ["PROFSCOPE_REPORT_EVERY"] = "0.05"
    try:
        with profscope_server("serve", str(root), "--dask-workers", "2", "--port", "0", "--no-capture",
                              "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
            yield url.rstrip("/")
    finally:
        if old is None:
            del os.environ["PROFSCOPE_REPORT_EVERY"]
        else:
            os.environ["PROFSCOPE_REPORT_EVERY"] = old


def _panel(page) -> dict:
    return page.evaluate("""() => {
      const box = document.querySelector('#conversions');
      const hosts = [...box.querySelectorAll('.cv-host')].map((li) => ({
        host: li.dataset.host, state: li.dataset.state, text: li.querySelector('.cv-state').textContent,
        bar: li.querySelector('.cv-bar').style.getPropertyValue('--p') }));
      return { hidden: box.hidden, state: box.dataset.state || null, done: Number(box.dataset.done || 0),
               head: (box.querySelector('.cv-head') || {}).textContent || '', hosts };
    }""")


def _watch(page, until: float) -> list[dict]:
    """The panel as it changes, sampled every 50 ms, until it says done."""
    seen = []
    while time.monotonic() < until:
        now = _panel(page)
        if not seen or now != seen[-1]:
            seen.append(now)
        if now["state"] == "done":
            return seen
        time.sleep(0.05)
    raise AssertionError(f"the panel never said done: {seen[-1] if seen else None}")


def test_the_trace_viewer_shows_the_hosts_converting_to_done(open_page, server):
    ARTIFACTS.mkdir(exist_ok=True)
    page = open_page(server)
    requests = []
    page.on("request", lambda r: requests.append((r.method, r.url)) if "/api/convert" in r.url else None)
    page.goto(f"{server}/?{urlencode({'run': 's', 'tool': 'trace_viewer@', 'host': 'host07'}, quote_via=quote)}")
    page.wait_for_selector("#conversions .cv-host", timeout=60_000)
    shot = False
    seen = []
    until = time.monotonic() + 120
    while time.monotonic() < until:
        now = _panel(page)
        if not seen or now != seen[-1]:
            seen.append(now)
        if not shot and any(h["state"] == "processing" and h["bar"] not in ("0%", "") for h in now["hosts"]):
            page.screenshot(path=str(ARTIFACTS / "scale_out_converting.png"))
            shot = True
        if now["state"] == "done":
            break
        time.sleep(0.05)
    final = seen[-1]
    assert final["state"] == "done" and final["done"] == 16, final
    assert final["head"].startswith("Converted hosts: 16/16"), final["head"]
    assert [h["host"] for h in final["hosts"]] == HOSTS
    assert all(h["state"] == "done" and h["bar"] == "100%" and h["text"].startswith("done ") and "pid " in h["text"]
               for h in final["hosts"]), final["hosts"]
    # it counted up: it said "Converting hosts: n/16" with n < 16, and showed a host's
    # own fraction (a bar between empty and full, "NN% · stage") on the way
    converting = [s for s in seen if s["state"] == "converting"]
    assert converting and converting[0]["head"].startswith("Converting hosts: ") and converting[0]["done"] < 16
    assert [s["done"] for s in seen] == sorted(s["done"] for s in seen)
    partial = [h for s in seen for h in s["hosts"] if h["state"] == "processing" and h["bar"] not in ("0%", "100%", "")]
    assert partial and all("% · " in h["text"] for h in partial), partial[:3]
    assert shot
    # the viewed host went first (submitted first with the higher priority): one of the
    # two the 2 workers started with, so done before a third host is
    early = next(s for s in seen if s["done"] >= 3)
    assert "host07" in {h["host"] for h in early["hosts"] if h["state"] == "done"}, early
    page.wait_for_selector("#tv canvas", timeout=60_000)  # the timeline itself drew
    page.screenshot(path=str(ARTIFACTS / "scale_out_done.png"))
    # one POST (the page submits the run), then GETs while pending, none once done
    assert requests[0][0] == "POST" and {m for m, _ in requests[1:]} <= {"GET"}
    n = len(requests)
    time.sleep(1.5)
    assert len(requests) == n, "still polling after done"


def test_the_memory_profile_page_of_a_converting_run_shows_the_panel(open_page, server):
    ARTIFACTS.mkdir(exist_ok=True)
    page = open_page(server)
    page.goto(f"{server}/?{urlencode({'run': 't', 'tool': 'memory_profile', 'host': 'host00'}, quote_via=quote)}")
    page.wait_for_selector("#pick-host option", state="attached")
    time.sleep(1)
    assert _panel(page)["hidden"] is True  # nothing converting: no panel
    # another user opens the run's timeline: the page's slow poll (3 s) notices
    res = httpx.post(f"{server}/api/convert", params={"run": "t", "host": "host03"}, timeout=30)
    assert res.status_code == 202 and res.json()["submitted"] == 8, res.text
    page.wait_for_selector("#conversions .cv-host", timeout=60_000)
    seen = _watch(page, time.monotonic() + 120)
    assert seen[-1]["head"].startswith("Converted hosts: 8/8"), seen[-1]
    assert len(seen[-1]["hosts"]) == 8
    page.screenshot(path=str(ARTIFACTS / "scale_out_memory_profile.png"))
    # a run whose hosts are all converted already opens without the panel
    page.goto(f"{server}/?{urlencode({'run': 's', 'tool': 'memory_profile', 'host': 'host00'}, quote_via=quote)}")
    page.wait_for_selector("#pick-run option", state="attached")
    time.sleep(1)
    assert _panel(page)["hidden"] is True


def test_the_all_hosts_memory_section_is_made_on_the_cluster_with_its_progress(open_page, server):
    """The memory profile page of a 16-host run asks for every host's peak: the hosts are
    Dask tasks (Workspace.fan_out), and the page's progress line under the top bar says
    so while they run, then the section lists the 16 hosts."""
    ARTIFACTS.mkdir(exist_ok=True)
    page = open_page(server)
    page.goto(f"{server}/?{urlencode({'run': 'u', 'tool': 'memory_profile', 'host': 'host00'}, quote_via=quote)}")
    labels, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline and page.locator("#mp-hosts-list .mp-host-row").count() < 16:
        label = page.evaluate("() => { const b = document.querySelector('#progress'); "
                              "return b && !b.hidden ? b.querySelector('.label').textContent : null; }")
        if label and (not labels or labels[-1] != label):
            labels.append(label)
            if "on the Dask cluster" in label:
                page.screenshot(path=str(ARTIFACTS / "scale_out_memory_hosts_progress.png"))
        time.sleep(0.05)
    assert page.locator("#mp-hosts-list .mp-host-row").count() == 16
    assert any(label.startswith("memory peaks of 16 hosts on the Dask cluster") for label in labels), labels
    assert "host00 peaks at" in page.inner_text("#mp-hosts-summary")
    body = httpx.get(f"{server}/api/memory_hosts", params={"run": "u"}, timeout=30).json()
    assert [r["status"] for r in body["hosts"]] == ["ok"] * 16
