"""The JAX device-memory profile page (pages/memory_profile_pprof.js) in Debian's Chromium
(Playwright), the network cut, on the profiles JAX made here
(tests/data/jax_memory_profiles) and a TPU-shaped one from profscope.testing:

* one profile: live bytes by device and kind, the icicle of bytes by Python stack, the top
  allocation sites and the buffers, each equal to the data API's answer;
* the successive profiles of the leaking loop: the timeline of live bytes, one point per
  profile; picking a profile to diff against puts ``base_profile=`` in the URL and lists
  what grew, the leaking function's line first.

Screenshots: test-artifacts/pprof_*.png."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlparse
from urllib.request import urlopen

import pytest

from profscope.testing.local_server import profscope_server
from profscope.testing.pprof_profiles import multi_device_buffers, profile_bytes
from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.browser

DATA = Path(__file__).parent / "data" / "jax_memory_profiles"
EXPECTED = json.loads((DATA / "expected.json").read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    logs = tmp_path_factory.mktemp("pprof_logs")
    shutil.copytree(DATA, logs / "jax")
    (logs / "tpu").mkdir()
    (logs / "tpu" / "memory.prof").write_bytes(profile_bytes(multi_device_buffers("tpu", 4)))
    with profscope_server("serve", str(logs), "--port", "0", "--cache-dir", str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url.rstrip("/")


def _data(server, **params) -> dict:
    with urlopen(f"{server}/data/plugin/profile/data?{urlencode({'tag': 'memory_profile', **params})}", timeout=600) as r:
        return json.loads(r.read())


def _open(open_page, server, **state):
    page = open_page(server)
    page.goto(f"{server}/?{urlencode({'tool': 'memory_profile', **state}, quote_via=quote)}")
    page.wait_for_selector("#pp-buffers tbody tr")
    return page


def _rows(page, table: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"#{table} tbody tr", "trs => trs.map((tr) => [...tr.cells].map((td) => td.innerText))")


def test_one_profile(server, open_page):
    run = "tpu/memory.prof"
    page = _open(open_page, server, run=run)
    page.wait_for_selector("#pp-icicle .main-svg")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "pprof_one.png"), full_page=True)
    api = _data(server, run=run)
    o = api["overview"]
    assert [r[0] for r in _rows(page, "pp-devices")][:4] == [r["device"] for r in o["totals"]["byDeviceKind"]][:4]
    sites = [r[0] for r in _rows(page, "pp-sites")]
    assert sites[0].startswith(o["topSites"][0]["function"])
    assert len(_rows(page, "pp-buffers")) == min(50, len(o["buffers"]["rows"]))
    # the icicle: every node drawn from the same arrays
    labels = page.evaluate("() => document.querySelector('#pp-icicle').data[0].labels")
    assert labels == o["icicle"]["labels"]


def test_successive_profiles_timeline_and_diff(server, open_page):
    run = "jax/leak"
    page = _open(open_page, server, run=run)
    page.wait_for_selector("#pp-timeline .main-svg")
    api = _data(server, run=run)
    ys = page.evaluate("() => document.querySelector('#pp-timeline').data[0].y")
    assert ys == [p["bytes"] for p in api["timeline"]["profiles"]] and ys == sorted(ys)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "pprof_timeline.png"), full_page=True)
    page.select_option("#pp-base", api["profiles"][0])
    page.wait_for_selector("#pp-diff tbody tr")
    assert dict(parse_qsl(urlparse(page.url).query))["base_profile"] == api["profiles"][0]
    first = _rows(page, "pp-diff")[0]
    made_at = next(c for c in first if EXPECTED["leak_function"] in c)
    assert f"{EXPECTED['leak_file']}:{EXPECTED['leak_line']}" in made_at
    page.screenshot(path=str(ARTIFACTS / "pprof_diff.png"), full_page=True)


def test_compare_with_another_run(server, open_page):
    """The "Compare with…" picker (lib/compare.js): another pprof run as base= draws the
    diff JSON's rows by stack, the leak's line first."""
    page = _open(open_page, server, run="jax/leak")
    page.wait_for_selector('#cmp-base option[value="jax/mlp/memory.prof"]', state="attached")
    page.select_option("#cmp-base", "jax/mlp/memory.prof")
    page.wait_for_selector("#pp-compare-rows tbody tr")
    assert dict(parse_qsl(urlparse(page.url).query))["base"] == "jax/mlp/memory.prof"
    api = _data(server, run="jax/leak", base="jax/mlp/memory.prof")
    assert float(page.get_attribute("#cmp-total .cmp-delta", "data-delta")) == api["totals"]["delta"]
    shown = _rows(page, "pp-compare-rows")
    assert [r[0] for r in shown][:3] == [r["label"] for r in api["rows"]][:3]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "pprof_compare_runs.png"), full_page=True)


def test_host_picker_agrees_with_the_page(server, open_page):
    """The builder's TPU-shaped profile of 4 devices: the page sums every device unless one
    is picked, so the shell's Host picker opens on "all 4 hosts" (ALL_HOSTS, the first of
    the run's hosts), not on TPU_0 as if that device were the one shown; picking a device
    shows that device alone, and the picker and the page say the same device."""
    run = "tpu/memory.prof"
    page = _open(open_page, server, run=run)
    picked = page.eval_on_selector("#pick-host", "s => [s.value, s.options[s.selectedIndex].text]")
    assert picked[0] == "ALL_HOSTS" and picked[1].startswith("all 4 hosts"), picked
    assert "all devices" in page.inner_text("#pp-root .mp-subtitle")
    every = _data(server, run=run)["overview"]["totals"]["byDeviceKind"]
    shown = {r[0] for r in _rows(page, "pp-devices")}
    assert shown == {r["device"] or "no device (executables)" for r in every} and len(shown) >= 4
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "pprof_host_all.png"), full_page=True)
    page.select_option("#pick-host", "TPU_1")
    page.wait_for_function("() => document.querySelector('#pp-root .mp-subtitle').innerText.includes('device TPU_1')")
    page.wait_for_selector("#pp-buffers tbody tr")
    assert page.eval_on_selector("#pick-host", "s => s.value") == "TPU_1"
    assert {r[0] for r in _rows(page, "pp-devices")} == {"TPU_1"}
    page.screenshot(path=str(ARTIFACTS / "pprof_host_one.png"), full_page=True)


def test_oom_risk_contributors_are_live_arrays(server, open_page):
    """OOM risk of the real leaking loop: the contributors are the device's live arrays by
    the line that made them (kind=buffer), with their own swatch, the leak's line first;
    no "Temporaries" row (PyTorch's frame rules, which know nothing of a JAX stack)."""
    page = open_page(server)
    page.goto(f"{server}/?{urlencode({'run': 'jax/leak', 'tool': 'oom_risk', 'capacity': '4MiB'})}")
    page.wait_for_selector("#oom-contributors tbody tr")
    rows = _rows(page, "oom-contributors")
    assert [r[0].strip() for r in rows] == ["Live arrays (JAX buffers, by the line that made them)"]
    assert f"{EXPECTED['leak_function']} ({EXPECTED['leak_file']}:{EXPECTED['leak_line']})" in rows[0][4].splitlines()[0]
    assert page.eval_on_selector("#oom-contributors tbody tr .swatch", "s => getComputedStyle(s).backgroundColor") == "rgb(160, 203, 232)"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "pprof_oom_risk.png"), full_page=True)


def test_overview_lists_the_devices_not_all_hosts(server, open_page):
    """A multi-device JAX memory profile offers ALL_HOSTS among its hosts (the picker's
    "all devices"); the run's overview lists its devices only."""
    page = open_page(server)
    page.goto(f"{server}/?{urlencode({'run': 'tpu/memory.prof', 'tool': 'overview'}, quote_via=quote)}")
    page.wait_for_selector("#run-title")
    hosts = page.eval_on_selector("dl.kv", "dl => [...dl.children].find((d, i, all) => all[i - 1] && all[i - 1].innerText === 'hosts').innerText")
    assert hosts == "TPU_0, TPU_1, TPU_2, TPU_3", hosts
