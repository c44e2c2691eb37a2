"""OOM risk (tools/oom_risk.py) through the data API, on real JAX programs built to
trigger or not trigger each finding (scripts/make_oom_programs.py, run here into a
temporary folder), the bundled demo, the shared PyTorch snapshots and allocator-event
builders for what no real file has (an ``oom`` trace entry, a steady leak)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from profscope.formats import snapshot_pickle as snapshot_format
from profscope.tools import oom_risk
from profscope.testing import allocator_xplane as ax
from profscope.testing import torch_snapshot as tsb

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


PROGRAMS = ROOT / "tests" / "data" / "oom_programs"


@pytest.fixture(scope="session")
def programs() -> tuple[Path, dict]:
    """The profiles scripts/make_oom_programs.py wrote (428 KB, committed: running all five
    programs takes 15-30 s; test_the_script_makes_these_profiles reruns two of them)."""
    return PROGRAMS, json.loads((PROGRAMS / "programs.json").read_text())


def test_the_script_makes_these_profiles(tmp_path, make_client, programs):
    """The committed profiles are what the script makes: rerun two programs with the jax
    installed here and compare the answers (peaks, contributors and findings)."""
    out = tmp_path / "fresh"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_oom_programs.py"), "--out", str(out), "donated", "undonated"],
                   check=True, timeout=120, capture_output=True)
    fresh, committed = make_client(out), make_client(programs[0])
    for program in ("donated", "undonated"):
        a, b = _risk(fresh, _run_of(fresh, program)), _risk(committed, _run_of(committed, program))
        assert a["peakBytes"] == b["peakBytes"]
        assert [(c["category"], c["bytes"]) for c in a["contributors"]] == [(c["category"], c["bytes"]) for c in b["contributors"]]
        assert [f["id"] for f in a["findings"]] == [f["id"] for f in b["findings"]]


@pytest.fixture
def programs_client(make_client, programs):
    return make_client(programs[0])


def _run_of(client, program: str) -> str:
    runs = client.get("/data/plugin/profile/runs").json()
    return next(r for r in runs if r.startswith(program + "/"))


def _risk(client, run, **params):
    res = client.get("/data/plugin/profile/data", params={"run": run, "tag": "oom_risk", **params})
    assert res.status_code == 200, res.text
    return res.json()


# -- tiers ---------------------------------------------------------------------------


def test_tiers_at_the_documented_boundaries(programs_client):
    """remat_on's compiled peak is 21,758,016 bytes = 7 x 3,108,288, so a capacity of
    31,082,880 puts it at exactly 70 %."""
    client = programs_client
    run = _run_of(client, "remat_on")
    base = _risk(client, run)
    peak = base["peakBytes"]
    assert base["risk"] == "UNKNOWN" and base["capacityBytes"] is None and base["utilization"] is None
    assert base["thresholds"]["medium"] == 0.70 and base["thresholds"]["high"] == 0.90
    assert peak % 7 == 0, "the exact-70 % case needs a peak divisible by 7"
    exactly_70 = peak * 10 // 7
    high_edge = peak * 10 // 9  # the largest capacity at which the peak is still >= 90 %
    cases = [
        (exactly_70, "MEDIUM"),
        (exactly_70 + 1, "LOW"),
        (high_edge, "HIGH"),
        (high_edge + 1, "MEDIUM"),
        (peak, "HIGH"),  # 100 % fits: HIGH, not OOM
        (peak - 1, "OOM"),  # planned peak above capacity
        (peak * 100, "LOW"),
    ]
    for capacity, tier in cases:
        body = _risk(client, run, capacity_bytes=capacity)
        assert body["risk"] == tier, (capacity, body["utilization"], body["reason"])
        assert body["capacityBytes"] == capacity and body["capacitySource"] == "request"
        assert body["headroomBytes"] == capacity - peak
        assert body["utilization"] == pytest.approx(peak / capacity)
    assert Fraction(peak, exactly_70) == Fraction(7, 10)
    # Thresholds are parameters too, and every answer prints them.
    body = _risk(client, run, capacity_bytes=exactly_70, threshold_medium="0.75")
    assert body["risk"] == "LOW" and body["thresholds"]["medium"] == 0.75


def test_compiled_peak_and_contributors_match_the_memory_viewer(programs_client, programs):
    client = programs_client
    for program in ("donated", "remat_off"):
        run = _run_of(client, program)
        body = _risk(client, run)
        module = body["module"]
        mv = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_viewer", "module_name": module}).json()
        assert body["peakBytes"] == mv["profscope"]["totals"]["peakBytes"]
        assert module.startswith("jit_train_step(")
        # Contributors are the buffers live at the peak: they add up to the peak.
        assert sum(c["bytes"] for c in body["contributors"]) == body["peakBytes"]
        buffers = {str(h.get("logicalBufferId")) for h in mv["maxHeap"]}
        for c in body["contributors"]:
            assert c["rules"] and c["label"]
            for item in c["items"]:
                assert item["rule"] and item["link"]["tool"] == "memory_viewer" and item["link"]["module_name"] == module
                if item["category"] != "small":
                    assert item["link"]["buffer"] in buffers
        # modules[] are the run's module peaks, largest first, the train step among them.
        peaks = [m["peakBytes"] for m in body["modules"]]
        assert peaks == sorted(peaks, reverse=True)
        assert any(m["moduleName"] == module and m["isTrainingStep"] for m in body["modules"])
    # XLA's own numbers: arguments of the donated step are parameters + Adam state + batch.
    donated = _risk(client, _run_of(client, "donated"))
    cats = {c["category"]: c["bytes"] for c in donated["contributors"]}
    ma = programs[1]["donated"]["train_memory_analysis"]
    assert cats["parameters"] * 2 == cats["optimizer_state"] - 4 or cats["parameters"] * 2 == cats["optimizer_state"]
    assert cats["parameters"] + cats["optimizer_state"] + cats["inputs"] <= ma["argument_size_in_bytes"]


# -- findings ------------------------------------------------------------------------

EXPECTED_FINDINGS = {
    "donated": set(),
    "undonated": {"undonated_arguments"},
    "remat_off": {"activations_dominate"},
    "remat_on": set(),
    "eval_heavy": {"other_module_peak"},
}


@pytest.mark.parametrize("program", sorted(EXPECTED_FINDINGS))
def test_findings_fire_on_the_programs_built_for_them_only(programs_client, program):
    body = _risk(programs_client, _run_of(programs_client, program))
    assert {f["id"] for f in body["findings"]} == EXPECTED_FINDINGS[program], [f["message"] for f in body["findings"]]
    for f in body["findings"]:
        assert f["evidence"] and f["links"] and f["message"]


def test_undonated_finding_numbers(programs_client, programs):
    """Without donation every state array (params, Adam mu/nu, count) stays an argument
    next to its updated output: the finding's bytes are the arguments less the batch."""
    body = _risk(programs_client, _run_of(programs_client, "undonated"))
    f = next(f for f in body["findings"] if f["id"] == "undonated_arguments")
    info = programs[1]["undonated"]
    ma = info["train_memory_analysis"]
    batch = info["config"]["batch"]
    batch_bytes = batch * info["config"]["layer_sizes"][0] * 4 + batch * 4  # x f32, y int32
    assert ma["alias_size_in_bytes"] == 0
    assert f["evidence"]["bytes"] == ma["argument_size_in_bytes"] - batch_bytes
    assert f["evidence"]["share"] >= oom_risk.UNDONATED_SHARE
    # The donated twin aliases the same bytes (XLA's alias size), so nothing is reported.
    donated = programs[1]["donated"]["train_memory_analysis"]
    assert donated["alias_size_in_bytes"] >= f["evidence"]["bytes"] - 4


def test_remat_cuts_activations(programs_client):
    off = _risk(programs_client, _run_of(programs_client, "remat_off"))
    on = _risk(programs_client, _run_of(programs_client, "remat_on"))
    share = lambda b: sum(c["bytes"] for c in b["contributors"] if c["category"] == "activations") / b["peakBytes"]
    assert share(off) >= oom_risk.ACTIVATION_SHARE > share(on)
    assert on["peakBytes"] < off["peakBytes"] / 2
    f = next(f for f in off["findings"] if f["id"] == "activations_dominate")
    assert f["evidence"]["share"] == pytest.approx(share(off)) and f["evidence"]["usesRemat"] is False


def test_other_module_finding_names_both_modules(programs_client):
    body = _risk(programs_client, _run_of(programs_client, "eval_heavy"))
    f = body["findings"][0]
    assert f["evidence"]["module"].startswith("jit_eval_step(") and f["evidence"]["trainingStep"].startswith("jit_train_step(")
    peaks = {m["moduleName"]: m["peakBytes"] for m in body["modules"]}
    assert f["evidence"]["peakBytes"] == peaks[f["evidence"]["module"]]
    assert f["evidence"]["ratio"] > 1 + oom_risk.OTHER_MODULE_MARGIN
    assert [link["module_name"] for link in f["links"]] == [f["evidence"]["module"], f["evidence"]["trainingStep"]]


# -- demo runs, snapshots, allocators ---------------------------------------------------


def test_demo_runs_all_answer(demo_client):
    for run in demo_client.get("/data/plugin/profile/runs").json():
        body = _risk(demo_client, run, device_memory="80GiB")
        assert body["capacityBytes"] == 80 * GIB and body["capacitySource"] == "request"
        assert body["risk"] == "LOW" or run.startswith("torch_snapshots/")
        assert {"risk", "peakBytes", "capacityBytes", "capacitySource", "utilization", "headroomBytes",
                "thresholds", "contributors", "findings", "modules"} <= set(body)
    # oom_risk stays out of XProf's run_tools (XProf clients do not know the tag).
    assert "oom_risk" not in demo_client.get("/data/plugin/profile/run_tools", params={"run": "dumps/mlp"}).json()


def test_allocator_capacity_from_the_tf_profile(demo_client):
    """TF fixture facts: BFC allocator capacity 1 GiB, lifetime peak 16,014,592 bytes."""
    body = _risk(demo_client, "tf_bfc/2026_11_29_18_51_13")
    assert body["capacitySource"] == "allocator" and body["capacityBytes"] == 1_073_741_824
    assert body["peakBytes"] == 16_014_592 and body["risk"] == "LOW"
    links = [i["link"] for c in body["contributors"] for i in c["items"]]
    assert links and all(link["tool"] == "memory_profile" and link["memory_id"] == "bfc_cpu_allocator_for_gpu" for link in links)
    # A requested capacity wins over the allocator's.
    assert _risk(demo_client, "tf_bfc/2026_11_29_18_51_13", capacity_bytes=16_014_592)["risk"] == "HIGH"


def test_snapshot_with_an_oom_event(make_client, tmp_path):
    """No shared snapshot holds an ``oom`` trace entry (flexgen_oom.pickle is a state
    *before* one), so the builder's snapshot is written as a pickle and read back."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    path = logdir / "oom.pickle"
    path.write_bytes(pickle.dumps(tsb.expandable_oom_multidevice(), protocol=4))
    with open(path, "rb") as f:
        snap = snapshot_format.load_snapshot(f, str(path))
    (event,) = [o for o in snap.oom_events if o["device"] == 0]
    client = make_client(logdir)
    body = _risk(client, "oom.pickle", host="cuda:0")
    assert body["risk"] == "OOM"
    f = next(f for f in body["findings"] if f["id"] == "oom_event")
    assert f["evidence"]["requestedBytes"] == int(event["size"]) == 64 * GIB
    assert f["evidence"]["deviceFreeBytes"] == int(event["device_free"]) == 123 * (1 << 20)
    # Capacity: free on the device + what this process had reserved then (20 MiB mapped,
    # 2 MiB unmapped before the oom).
    assert body["capacitySource"] == "oom_event"
    assert body["capacityBytes"] == int(event["device_free"]) + 18 * (1 << 20)
    # Even a huge requested capacity cannot hide an observed OOM.
    assert _risk(client, "oom.pickle", host="cuda:0", device_memory="1TiB")["risk"] == "OOM"
    assert _risk(client, "oom.pickle", host="cuda:1")["risk"] == "UNKNOWN"  # device 1 never failed


def test_snapshot_peak_and_contributors(make_client, tmp_path, shared_fixtures):
    src = shared_fixtures / "torch_snapshots" / "Yiyi-philosophy_LLM-inference" / "oom_snapshot.pickle"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "flexgen.pickle").write_bytes(src.read_bytes())
    with open(src, "rb") as f:
        snap = snapshot_format.load_snapshot(f, str(src))
    reserved = int(snap.segments.total_size[snap.segments.device == 0].sum())
    client = make_client(logdir)
    body = _risk(client, "flexgen.pickle", device_memory="12GB")
    assert body["peakBytes"] == reserved == 11_844_714_496  # fixture README: reserved bytes
    assert body["risk"] == "HIGH" and body["utilization"] == pytest.approx(reserved / 12e9)
    cats = {c["category"]: c for c in body["contributors"]}
    # FlexGen allocates its weights under init_weight_list: every live block is a weight.
    assert cats["parameters"]["bytes"] == 11_840_159_744
    assert any("init_weight" in r for r in cats["parameters"]["rules"])
    assert cats["allocator_reserve"]["bytes"] == reserved - 11_840_159_744
    assert _risk(client, "flexgen.pickle", device_memory="A100-40GB")["risk"] == "LOW"


def test_steady_leak_finding(make_client, tmp_path):
    for name, builder in (("leak", ax.steady_leak), ("clean", ax.tf_training)):
        folder = tmp_path / "logs" / name / "plugins" / "profile" / "2026_01_01_00_00_00"
        folder.mkdir(parents=True)
        (folder / "host0.xplane.pb").write_bytes(builder())
    client = make_client(tmp_path / "logs")
    leak = _risk(client, "leak/2026_01_01_00_00_00")
    f = next(f for f in leak["findings"] if f["id"] == "heap_growth")
    assert f["evidence"]["slopeBytesPerStep"] == pytest.approx(1 << 20, rel=0.01)
    assert "heap_growth" not in {f["id"] for f in _risk(client, "clean/2026_01_01_00_00_00")["findings"]}


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, status, words",
    [
        ({"capacity_bytes": "0"}, 400, "capacity_bytes"),
        ({"capacity_bytes": "-5"}, 400, "capacity_bytes"),
        ({"capacity_bytes": "lots"}, 400, "capacity_bytes"),
        ({"capacity_bytes": "1.5"}, 400, "capacity_bytes"),
        ({"device_memory": "Z9000"}, 400, "unknown device memory"),
        ({"device_memory": "0GB"}, 400, "positive"),
        ({"threshold_medium": "2"}, 400, "threshold"),
        ({"threshold_medium": "0.95", "threshold_high": "0.9"}, 400, "must not exceed"),
        ({"module_name": "no_such_module(1)"}, 404, "no module"),
    ],
)
def test_bad_input_is_a_clear_error(demo_client, params, status, words):
    res = demo_client.get("/data/plugin/profile/data", params={"run": "dumps/mlp", "tag": "oom_risk", **params})
    assert res.status_code == status, res.text
    assert words in res.json()["error"]


def test_missing_or_unknown_run(demo_client, make_client, tmp_path):
    assert demo_client.get("/data/plugin/profile/data", params={"tag": "oom_risk"}).status_code == 400
    res = demo_client.get("/data/plugin/profile/data", params={"run": "nope", "tag": "oom_risk"})
    assert res.status_code == 404 and "nope" in res.json()["error"]
    folder = tmp_path / "logs" / "empty" / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "host0.xplane.pb").write_bytes(ax.no_allocator_events())
    res = make_client(tmp_path / "logs").get("/data/plugin/profile/data", params={"run": "empty/2026_01_01_00_00_00", "tag": "oom_risk"})
    assert res.status_code == 404 and "neither HLO modules nor allocator events" in res.json()["error"]


# -- capacity parsing --------------------------------------------------------------------


def test_sizes_and_device_names():
    assert oom_risk.parse_size("80GiB") == 80 * GIB
    assert oom_risk.parse_size("80 GB") == 80 * 10**9
    assert oom_risk.parse_size("17179869184") == 16 * GIB
    assert oom_risk.parse_size("1.5TiB") == 3 * (1 << 39)
    assert oom_risk.parse_size("eighty") is None
    assert oom_risk.device_capacity("NVIDIA A100-SXM4-80GB")[0] == 80 * GIB
    assert oom_risk.device_capacity("A100")[0] == 40 * GIB
    assert oom_risk.device_capacity("NVIDIA H100 80GB HBM3")[0] == 80 * GIB
    assert oom_risk.device_capacity("TPU v5e")[0] == 16 * GIB
    assert oom_risk.device_capacity("TPU v5p")[0] == 95 * GIB
    assert oom_risk.device_capacity("TPU v4")[0] == 32 * GIB
    assert oom_risk.device_capacity("Tesla T4")[0] == 16 * GIB
    assert oom_risk.device_capacity("Z9000") is None
    assert oom_risk.requested_capacity(device_memory="H100")["source"] == "device_table"


def test_padding_rule_on_the_numbers():
    """No CPU program pads (unpadded == padded on the CPU backend), so the rule is checked
    on the numbers it reads: padding / peak > 10 % fires, 10 % exactly does not."""

    def ev(pad):
        return {"kind": "compiled", "moduleName": "m(1)", "peakBytes": 1000, "totals": {"paddingBytes": pad, "totalAllocationBytes": 1000},
                "items": [], "lifetimes": [], "isTraining": False, "usesRemat": False}

    assert [f["id"] for f in oom_risk.findings([ev(101)], [], 1000)] == ["padding"]
    assert oom_risk.findings([ev(100)], [], 1000) == []


# -- device planes -----------------------------------------------------------------------


def _with_device_plane(src: Path, dest: Path, **stats) -> None:
    """A real JAX CPU profile plus a ``/device:GPU:0`` plane carrying device-capability
    stats (what a GPU profile has; no fixture here was recorded on a GPU), with lines of
    kernel events that the reader must skip."""
    from profscope.formats.protos import xplane_pb2

    space = xplane_pb2.XSpace.FromString(src.read_bytes())
    plane = ax.Plane(space.planes.add(id=99, name="/device:GPU:0"))
    for name, value in stats.items():
        plane.plane_stat(name, ax.Ref(value) if isinstance(value, str) else ax.U64(value) if name == "memory_size" else value)
    stream = plane.line("stream:7", 7)
    for k in range(2000):
        stream.event("dot_general", 1000 + k * 100, 50, [("correlation_id", k)])
    dest.parent.mkdir(parents=True)
    dest.write_bytes(space.SerializeToString())


def test_capacity_from_device_plane_stats(programs, make_client, tmp_path):
    from profscope.formats import xplane_devices

    (src,) = (programs[0] / "donated" / "plugins" / "profile").glob("*/*.xplane.pb")
    logdir = tmp_path / "logs"
    with_size = logdir / "gpu" / "plugins" / "profile" / "2026_01_01_00_00_00" / "host0.xplane.pb"
    _with_device_plane(src, with_size, memory_size=40 * 10**6, gpu_device_name="NVIDIA A100-SXM4-40GB", device_vendor="Nvidia")
    name_only = logdir / "named" / "plugins" / "profile" / "2026_01_01_00_00_00" / "host0.xplane.pb"
    _with_device_plane(src, name_only, gpu_device_name="NVIDIA H100 80GB HBM3")
    with open(with_size, "rb") as f:
        (caps,) = xplane_devices.device_capabilities(f, str(with_size))
    assert caps == {"plane": "/device:GPU:0", "memory_size": 40 * 10**6, "gpu_device_name": "NVIDIA A100-SXM4-40GB", "device_vendor": "Nvidia"}
    client = make_client(logdir)
    body = _risk(client, "gpu/2026_01_01_00_00_00")
    # A JAX program (jit_ modules) on a GPU: JAX preallocates 75 % of the device
    # (XLA_PYTHON_CLIENT_MEM_FRACTION), so that is its capacity, and the answer says so.
    assert body["capacitySource"] == "device_plane" and body["capacityBytes"] == 30 * 10**6
    assert body["deviceBytes"] == 40 * 10**6 and "XLA_PYTHON_CLIENT_MEM_FRACTION" in body["capacityDetail"]
    assert "A100" in body["capacityDetail"] and body["risk"] == "MEDIUM"  # 24.7 MB of 30 MB (LOW of the full 40 MB)
    body = _risk(client, "named/2026_01_01_00_00_00")
    assert body["capacitySource"] == "device_table" and body["capacityBytes"] == 80 * GIB * 3 // 4
    assert body["deviceBytes"] == 80 * GIB and "0.75" in body["capacityDetail"]
    # A requested capacity still wins.
    assert _risk(client, "gpu/2026_01_01_00_00_00", capacity_bytes=25_000_000)["risk"] == "HIGH"


# -- PyTorch profiler traces --------------------------------------------------------------


def test_torch_traces_leak_and_profiler_categories(demo_client):
    """The demo's leak trace (a tensor kept per step) fires heap_growth with the memory
    profile's own evidence; the clean traces do not. Contributors are the categories
    PyTorch's export_memory_timeline assigned, at that timeline's peak."""
    for name in ("leak", "mlp_train", "transformer_train"):
        run = f"torch/{name}.pt.trace.json.gz"
        body = _risk(demo_client, run)
        mp = demo_client.get("/api/memory_profile", params={"run": run}).json()
        ct = mp["categoryTimeline"]
        assert sum(c["bytes"] for c in body["contributors"]) == ct["peakBytes"]
        assert body["peakBytes"] == max(ct["peakBytes"], mp["devices"][0]["summary"]["peakAllocatedBytes"])
        expected = {c["category"]: c["bytes"] for c in ct["peakBreakdown"]}
        cats = {c["category"]: c["bytes"] for c in body["contributors"]}
        assert cats.get("parameters", 0) == expected["PARAMETER"]
        assert cats.get("gradients", 0) == expected["GRADIENT"] + expected["AUTOGRAD_DETAIL"]
        assert cats.get("activations", 0) == expected["ACTIVATION"]
        ids = {f["id"] for f in body["findings"]}
        if name == "leak":
            (hint,) = [h for h in mp["devices"][0]["leakHints"] if h["kind"] == "stepGrowth"]
            f = next(f for f in body["findings"] if f["id"] == "heap_growth")
            assert f["evidence"]["bytesPerStep"] == hint["evidence"]["bytesPerStep"] == 64 * 1024
            assert f["links"][0]["tool"] == "memory_profile" and f["links"][0]["memory_id"] == "CPU"
        else:
            assert ids == set()


def test_co_residence_of_the_eval_step(demo_client):
    """mlp demo: the eval step runs while the Adam train state stays live; its estimate
    adds the train step's arguments it does not take (numbers from module_peaks)."""
    run = next(r for r in demo_client.get("/data/plugin/profile/runs").json() if r.startswith("mlp/"))
    peaks = {m["moduleName"]: m for m in demo_client.get("/api/module_peaks", params={"run": run}).json()}
    mib = lambda v: round(v * (1 << 20))
    train, ev = peaks["jit_train_step(14)"], peaks["jit_eval_step(16)"]
    expected = ev["peakBytes"] + mib(train["entryComputationParametersMib"]) - mib(ev["entryComputationParametersMib"])
    body = _risk(demo_client, run)
    row = next(m for m in body["modules"] if m["moduleName"] == "jit_eval_step(16)")
    assert row["coResidentBytes"] == expected and row["coResidentWith"] == "jit_train_step(14)"
    assert "coResidentBytes" not in next(m for m in body["modules"] if m["moduleName"] == "jit_train_step(14)")


def test_allocator_fragmentation_finding_on_a_real_snapshot(demo_client, demo_logdir):
    """flexgen_1.3b.pickle: a quarter of its reserved segments is inactive. The finding's
    numbers equal the file's, computed here from the unpickled segments and blocks."""
    path = demo_logdir / "torch_snapshots" / "flexgen_1.3b.pickle"
    with open(path, "rb") as f:
        snap = snapshot_format.load_snapshot(f, str(path))
    inactive = snap.state_names.index("inactive")
    reserved = int(snap.segments.total_size.sum())
    external = int(snap.blocks.size[snap.blocks.state == inactive].sum())
    body = _risk(demo_client, "torch_snapshots/flexgen_1.3b.pickle", host="cuda:0")
    f = next(f for f in body["findings"] if f["id"] == "fragmentation_allocator")
    assert f["evidence"]["externalBytes"] == external
    assert f["evidence"]["external"] == pytest.approx(external / reserved) and external / reserved > oom_risk.FRAGMENTATION_SHARE
    # The other two demo snapshots stay under the threshold.
    for name in ("flexgen_oom.pickle", "sketchkv_2024.pickle"):
        ids = {f["id"] for f in _risk(demo_client, f"torch_snapshots/{name}", host="cuda:0")["findings"]}
        assert "fragmentation_allocator" not in ids


@pytest.mark.parametrize("stated", ['"lots"', "[1]", "1e400", str(2**70), "-5", "true", "85899345920"])
def test_a_traces_odd_device_memory_is_not_a_capacity(make_client, tmp_path, stated):
    """kineto writes totalGlobalMem as an integer; anything else (text, a list, a number
    beyond int64, a negative one) is not taken for the device's capacity, and never a 5xx."""
    from profscope.testing.memory_trace import CUDA, steady_leak

    tb = steady_leak(device_type=CUDA, device_id=0)
    (tmp_path / "logs").mkdir()
    path = tb.write(tmp_path / "logs" / "odd.pt.trace.json")
    text = path.read_text().replace('"deviceProperties": []',
                                    '"deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": %s}]' % stated)
    path.write_text(text)
    r = make_client(tmp_path / "logs").get("/data/plugin/profile/data", params={"run": "odd.pt.trace.json", "tag": "oom_risk"})
    assert r.status_code == 200, r.text
    source = r.json()["capacitySource"]
    assert (source == "trace_device") == (stated == "85899345920")
