"""Our trace viewer page on real accelerator profiles (``shared/fixtures/public_profiles``):
the real server, Debian's Chromium, network cut. A GPU/TPU timeline shows XProf's
derived lines (XLA Modules, XLA Ops, ...) next to the raw streams, flow arrows are drawn
(host launch -> device kernel, CPU launch -> GPU kernel in a torch trace) and the Flows
toggle hides them, in the link too. Screenshots go to test-artifacts/."""

from __future__ import annotations

import pytest

from tests.conftest import ARTIFACTS, profscope_server
from tests.test_browser_trace_viewer import _hook, _open, _query, _ready

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def public_server(shared_fixtures, tmp_path_factory):
    with profscope_server("serve", str(shared_fixtures / "public_profiles"), "--port", "0", "--cache-dir",
                          str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


@pytest.fixture(scope="module")
def counters_server(tmp_path_factory):
    """A TPU profile with utilisation counters (``allocator_xplane.tpu_counters``)."""
    from profscope.testing.timelines import builder_logdir

    root = builder_logdir(tmp_path_factory.mktemp("builders"), {"tpu_counters": "tpu-host"})
    with profscope_server("serve", str(root), "--port", "0", "--cache-dir",
                          str(tmp_path_factory.mktemp("cache"))) as (url, _):
        yield url


def test_tpu_utilisation_counters_are_all_drawn(open_page, counters_server):
    """Every ``% util`` series of a TPU profile is a row, and a series read once (before
    the first slice, after the last, at 0 %) shows its sample as a dot: a single sample
    has no area to fill, and one at the trace's end no width."""
    page = _open(open_page, counters_server, run="tpu_counters/2026_01_01_00_00_00", tool="trace_viewer@")
    page.set_viewport_size({"width": 1400, "height": 1500})  # every row on screen
    _ready(page)
    rows = [r for r in _hook(page, "rows") if r["type"] == "track" and r["kind"] == "counter"]
    assert len(rows) == 11 and all(r["name"].endswith("% util") for r in rows)
    names = {r["id"]: r["name"] for r in rows}
    dots = _hook(page, "counterDots")
    # the five series of one sample: four on TPU:0, one on TPU:1
    assert sorted(names[d["track"]] for d in dots) == sorted(
        ["HBM read % util", "HBM write % util", "ICI % util", "DMA % util", "HBM read % util"])
    for d in dots:  # painted where the hook says, in the counters' colour (#8e4f80)
        r, g, b = _hook(page, "pixel", d["x"], d["y"])
        assert abs(r - 0x8e) + abs(g - 0x4f) + abs(b - 0x80) < 60, (names[d["track"]], (r, g, b))
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_tpu_counters.png"), full_page=True)


def _track_names(page) -> set[str]:
    return {r["name"] for r in _hook(page, "rows") if r["type"] == "track"}


@pytest.mark.parametrize("run, lines", [
    ("xplane/mi300_jax08_gemm/jax08_gemm", {"XLA Modules", "XLA Ops"}),
    ("xplane/tpu_inference/2025_12_10_tpu", {"XLA Modules", "XLA Ops"}),
], ids=["rocm_mi300", "tpu"])
def test_device_timeline_shows_derived_lines_and_flows(open_page, public_server, run, lines):
    page = _open(open_page, public_server, run=run, tool="trace_viewer@", flows="all")  # every arrow, not the selection's
    _ready(page)
    names = _track_names(page)
    # on GPU each stream gets its own derived lines, named "XLA Ops - from #16"
    assert all(any(n == want or n.startswith(f"{want} - from ") for n in names) for want in lines), sorted(names)
    assert len(_hook(page, "visibleSlices")) > 200
    flows = _hook(page, "flows")
    assert flows["inWindow"] > 0 and flows["drawn"] > 0
    # a derived XLA op leads back to its module: click the widest one drawn
    ops_tracks = {r["id"] for r in _hook(page, "rows") if r["type"] == "track"
                  and r["name"].startswith("XLA Ops")}
    op = max((s for s in _hook(page, "visibleSlices") if s["track"] in ops_tracks), key=lambda s: s["w"])
    page.mouse.click(op["x"] + min(op["w"], 6) / 2, op["y"] + op["h"] / 2)
    page.wait_for_selector("#tv-card.selected")
    card = page.inner_text("#tv-card")
    assert op["name"] in card and "program_id" in card
    # GPU ops name their module (hlo_module), TPU ops only its program id: both link to it
    assert "Memory viewer for jit_" in card
    href = page.get_attribute("#tv-memory-link", "href")
    assert "module_name=jit_" in href and "tool=memory_viewer" in href
    tag = run.split("/")[1]
    page.screenshot(path=str(ARTIFACTS / f"trace_viewer_{tag}.png"), full_page=True)

    # the picker hides the arrows, the link remembers it, and a reload keeps them hidden
    page.select_option("#tv-flows", "none")
    assert _hook(page, "flows")["drawn"] == 0
    assert _query(page).get("flows") == "0"
    page.reload()
    _ready(page)
    assert page.locator("#tv-flows").input_value() == "none" and _hook(page, "flows")["drawn"] == 0
    page.screenshot(path=str(ARTIFACTS / f"trace_viewer_{tag}_no_flows.png"), full_page=True)
    page.select_option("#tv-flows", "all")
    assert _hook(page, "flows")["drawn"] > 0 and _query(page).get("flows") == "all"


def test_torch_cuda_trace_draws_launch_to_kernel_arrows(open_page, public_server):
    """B200 eager trace: kineto writes each flow's GPU end before its CPU start."""
    run = "traces/tracelens_b200_eager.trace.json.gz"
    page = _open(open_page, public_server, run=run, tool="trace_viewer@", flows="all")
    _ready(page)
    flows = _hook(page, "flows")
    assert flows["inWindow"] == 929 and flows["drawn"] > 100
    assert len(_track_names(page)) >= 3  # the CPU thread and the GPU streams
    page.screenshot(path=str(ARTIFACTS / "trace_viewer_b200.png"), full_page=True)
