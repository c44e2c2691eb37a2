"""The Summary's memory rules (tools/analysis_memory.py) on real OOM-risk payloads: the
committed JAX programs (tests/data/oom_programs, scripts/make_oom_programs.py), the
demo's leaking PyTorch trace, the allocator-event and snapshot builders for what no real
file has (a steady allocator leak, an ``oom`` trace entry), and the shared public
profiles, which have no memory problem at P0 or P1."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from profscope.formats import snapshot_pickle as snapshot_format
from profscope.testing import allocator_xplane as ax
from profscope.testing import torch_snapshot as tsb
from profscope.tools import analysis_memory, oom_risk
from profscope.tools.analysis_memory import memory_findings

PROGRAMS = Path(__file__).resolve().parent / "data" / "oom_programs"


def link(tool, **keys):
    return "?" + "&".join([f"tool={tool}"] + [f"{k}={v}" for k, v in keys.items()])


def _data(client, run, tag, **params):
    res = client.get("/data/plugin/profile/data", params={"run": run, "tag": tag, **params})
    assert res.status_code == 200, res.text
    return res.json()


def _run_of(client, prefix):
    return next(r for r in client.get("/data/plugin/profile/runs").json() if r.startswith(prefix))


def _findings(client, run, **params):
    oom = _data(client, run, "oom_risk", **params)
    mp = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", **params})
    found = memory_findings(oom, mp.json() if mp.status_code == 200 else None, link)
    return oom, found


def _by_id(found):
    ids = [f["id"] for f in found]
    assert len(ids) == len(set(ids)), ids  # one finding per rule and host here
    return {f["id"]: f for f in found}


@pytest.fixture(scope="module")
def programs():
    return json.loads((PROGRAMS / "programs.json").read_text())


@pytest.fixture
def client(make_client):
    return make_client(PROGRAMS)


def test_every_finding_is_a_contract_finding(client):
    _, found = _findings(client, _run_of(client, "undonated/"), capacity_bytes=30_000_000)
    assert found
    for f in found:
        assert set(f) == {"id", "priority", "area", "title", "what", "evidence", "impact", "fix", "host"}
        assert f["area"] == "memory" and f["id"] in {r.id for r in analysis_memory.RULES}
        assert f["what"] and f["fix"] and f["evidence"]
        assert all(set(e) == {"label", "value", "number", "link"} for e in f["evidence"])
        json.dumps(f, allow_nan=False)


def test_undonated_arguments_cost_what_donation_saves(client, programs):
    """The bytes at stake are what XLA aliases once the same program donates: the donated
    program's own ``alias_size_in_bytes`` (jax's compiled.memory_analysis())."""
    _, found = _findings(client, _run_of(client, "undonated/"))
    f = _by_id(found)["undonated_arguments"]
    assert f["priority"] == "P2"  # capacity unknown: nothing says it must be cut
    assert f["impact"]["bytes"] == programs["donated"]["train_memory_analysis"]["alias_size_in_bytes"]
    assert "donate_argnums" in f["fix"]
    # Each argument opens its buffer in the memory viewer.
    links = [e["link"] for e in f["evidence"] if e["link"]]
    assert links and all("tool=memory_viewer" in u and "module_name=jit_train_step" in u and "buffer=" in u for u in links)
    _, donated = _findings(client, _run_of(client, "donated/"))
    assert "undonated_arguments" not in _by_id(donated)


def test_over_capacity_is_p0_with_the_bytes_over(client):
    run = _run_of(client, "undonated/")
    oom, found = _findings(client, run, capacity_bytes=30_000_000)
    f = _by_id(found)
    over = f["memory_over_capacity"]
    assert over["priority"] == "P0" and oom["risk"] == "OOM"
    assert over["impact"]["bytes"] == oom["peakBytes"] - 30_000_000 > 0
    # Donating alone frees more than the run must cut to get below 90 % of 30 MB: P1.
    need = oom["peakBytes"] - 30_000_000 * 9 // 10 + 1
    assert f["undonated_arguments"]["impact"]["bytes"] >= need and f["undonated_arguments"]["priority"] == "P1"


def test_high_tier_is_p1_with_the_bytes_to_cut(client):
    run = _run_of(client, "remat_off/")
    peak = _data(client, run, "oom_risk")["peakBytes"]
    capacity = peak * 100 // 95  # 95 % full: HIGH
    oom, found = _findings(client, run, capacity_bytes=capacity)
    assert oom["risk"] == "HIGH"
    f = _by_id(found)
    high = f["memory_high"]
    assert high["priority"] == "P1"
    assert high["impact"]["bytes"] == peak - capacity * 9 // 10 + 1  # below 90 %: peak < 0.9 x capacity
    assert "memory_over_capacity" not in f and all(x["priority"] != "P0" for x in found)
    # The activations alone are more than the cut: rematerialising them is the fix.
    act = f["activations_dominate"]
    assert act["priority"] == "P1" and act["impact"]["bytes"] >= high["impact"]["bytes"]
    assert "jax.checkpoint" in act["fix"]


def test_activations_and_other_module_peak_without_capacity(client):
    oom, off = _findings(client, _run_of(client, "remat_off/"))
    act = _by_id(off)["activations_dominate"]
    assert act["priority"] == "P2"
    # What rematerialising saves, as OOM risk's plan prices it (the largest activation stays
    # live while it is recomputed), not every activation byte.
    remat = next(c for c in oom["plan"]["savings"] if c["id"] == "remat")
    activations = next(f for f in oom["findings"] if f["id"] == "activations_dominate")["evidence"]["activationBytes"]
    assert act["impact"]["bytes"] == remat["savedBytes"] < activations
    _, on = _findings(client, _run_of(client, "remat_on/"))
    assert "activations_dominate" not in _by_id(on)
    run = _run_of(client, "eval_heavy/")
    oom, found = _findings(client, run)
    f = _by_id(found)["other_module_peak"]
    peaks = {m["moduleName"].split("(")[0]: m["peakBytes"] for m in oom["modules"]}
    assert f["priority"] == "P2" and f["impact"]["bytes"] == peaks["jit_eval_step"] - peaks["jit_train_step"] > 0


def test_buffers_dominating_a_tight_peak(client):
    """The donated MLP's three 1024x1024 f32 weights' buffers hold most of its peak: named
    with their bytes once memory is tight (MEDIUM: 30 MB), silent where it is not."""
    run = _run_of(client, "donated/")
    oom, found = _findings(client, run, capacity_bytes=30_000_000)
    assert oom["risk"] == "MEDIUM"
    f = _by_id(found)["buffers_dominate"]
    items = sorted((i["bytes"] for c in oom["contributors"] for i in c["items"]), reverse=True)
    assert f["priority"] == "P2" and f["impact"]["bytes"] == sum(items[:3])
    assert sum(items[:3]) >= 0.5 * oom["contributorsPeakBytes"]
    assert all("tool=memory_viewer" in e["link"] and "buffer=" in e["link"] for e in f["evidence"])
    _, loose = _findings(client, run, capacity_bytes=1_000_000_000)
    assert "buffers_dominate" not in _by_id(loose)


def test_torch_trace_leak_is_p1_per_step(demo_client, demo_logdir):
    run = "torch/leak.pt.trace.json.gz"
    oom, found = _findings(demo_client, run)
    leak = _by_id(found)["memory_leak"]
    growth = next(f for f in oom["findings"] if f["id"] == "heap_growth")["evidence"]
    assert leak["priority"] == "P1"
    ends = growth["liveBytesAtStepEnd"]
    assert leak["impact"]["bytes"] == growth["bytesPerStep"] == ends[1] - ends[0] > 0
    assert leak["evidence"][0]["link"].startswith("?tool=memory_profile&memory_id=")
    _, healthy = _findings(demo_client, "torch/mlp_train.pt.trace.json.gz")
    assert "memory_leak" not in _by_id(healthy)


def test_allocator_leak_names_the_rising_op(make_client, tmp_path):
    for name, builder in (("leak", ax.steady_leak), ("clean", ax.tf_training)):
        folder = tmp_path / "logs" / name / "plugins" / "profile" / "2026_01_01_00_00_00"
        folder.mkdir(parents=True)
        (folder / "host0.xplane.pb").write_bytes(builder())
    client = make_client(tmp_path / "logs")
    _, found = _findings(client, "leak/2026_01_01_00_00_00")
    leak = _by_id(found)["memory_leak"]  # OOM risk's and the memory profile's hints: one finding
    assert leak["priority"] == "P1" and leak["impact"]["bytes"] == pytest.approx(1 << 20, rel=0.01)
    rising = [e for e in leak["evidence"] if e["label"].startswith("rising op")]
    assert [e["label"] for e in rising] == ["rising op leaky/cache"] and "q=leaky/cache" in rising[0]["link"]
    _, clean = _findings(client, "clean/2026_01_01_00_00_00")
    assert not {"memory_leak", "memory_rising_ops"} & set(_by_id(clean))


def test_leak_on_an_allocator_oom_risk_does_not_rate(make_client, tmp_path):
    """OOM risk reads the allocator with the highest peak; a leak on another allocator of
    the memory profile is still a finding."""
    folder = tmp_path / "logs" / "leak" / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "host0.xplane.pb").write_bytes(ax.steady_leak())
    client = make_client(tmp_path / "logs")
    mp = _data(client, "leak/2026_01_01_00_00_00", "memory_profile")
    (mid,) = [m for m, a in mp["profscope"]["allocators"].items() if a["leakHints"]["heapGrowth"]["steadyLeak"]]
    found = memory_findings(None, mp, link)
    leak = _by_id(found)["memory_leak"]
    assert leak["impact"]["bytes"] == round(mp["profscope"]["allocators"][mid]["leakHints"]["heapGrowth"]["slopeBytesPerStep"])
    assert f"memory_id={mid}" in leak["evidence"][0]["link"]


def test_snapshot_oom_event_is_p0(make_client, tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    snap = tsb.expandable_oom_multidevice()
    (logdir / "oom.pickle").write_bytes(pickle.dumps(snap, protocol=4))
    client = make_client(logdir)
    oom, found = _findings(client, "oom.pickle", host="cuda:0")
    f = _by_id(found)
    event = oom["oomEvents"][0]
    assert f["memory_oom"]["priority"] == "P0"
    assert f["memory_oom"]["impact"]["bytes"] == event["requestedBytes"] - event["deviceFreeBytes"] > 0
    assert f["memory_oom"]["evidence"][0]["link"] == link("memory_profile", host="cuda:0", t=str(event["event"]))
    # The fix is OOM risk's cut for the largest contributor (the caching allocator's unused
    # reserve here), its environment variable spelled as PyTorch reads it.
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f["memory_oom"]["fix"]
    # The peak itself is far below 90 % of the capacity: nothing else is raised to P1 by it.
    assert [x["id"] for x in found if x["priority"] != "P2"] == ["memory_oom"]
    _, other = _findings(client, "oom.pickle", host="cuda:1")  # device 1 never failed
    assert "memory_oom" not in _by_id(other)


def test_several_oom_events_are_one_finding(make_client, tmp_path):
    """Two ``oom`` entries on one device: one P0 naming both, the larger shortfall its impact."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    snap = tsb.expandable_oom_multidevice()
    last = snap["device_traces"][0][-1]
    snap["device_traces"][0].append(tsb.entry("oom", 0, 96 * (1 << 30), last["time_us"] + 1, device_free=100 * (1 << 20)))
    (logdir / "oom2.pickle").write_bytes(pickle.dumps(snap, protocol=4))
    oom, found = _findings(make_client(logdir), "oom2.pickle", host="cuda:0")
    assert len(oom["oomEvents"]) == 2
    (f,) = [x for x in found if x["id"] == "memory_oom"]
    assert f["priority"] == "P0" and f["title"] == "2 out-of-memory events are recorded"
    assert f["impact"]["bytes"] == max(o["requestedBytes"] - o["deviceFreeBytes"] for o in oom["oomEvents"]) \
        == 96 * (1 << 30) - 100 * (1 << 20)
    assert sum(e["label"].startswith("event ") for e in f["evidence"]) == 2


@pytest.mark.parametrize("run", [
    "xplane/tpu_inference/2025_12_10_tpu", "xplane/tf_gpu/GPU-multi-worker",
    "xplane/mi300_jax08_gemm/jax08_gemm", "xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal",
    "traces/tracelens_h100_bert_small.trace.json.gz", "traces/kineto_resnet50_v100.pt.trace.json.gz",
    "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle",
])
def test_public_profiles_have_no_p0_or_p1_memory_finding(make_client, shared_fixtures, run):
    """The public profiles ran (none failed, none is near its device's memory: OOM risk
    rates each LOW or UNKNOWN), so a P0/P1 memory finding on them would be a false alarm."""
    client = make_client(shared_fixtures / "public_profiles")
    oom, found = _findings(client, run)
    assert oom["risk"] in ("LOW", "UNKNOWN")
    assert [f["id"] for f in found if f["priority"] in ("P0", "P1")] == []


def test_deterministic(client):
    run = _run_of(client, "undonated/")
    a = json.dumps(_findings(client, run, capacity_bytes=30_000_000)[1], sort_keys=False)
    b = json.dumps(_findings(client, run, capacity_bytes=30_000_000)[1], sort_keys=False)
    assert a == b


def test_flexgen_oom_snapshot_holds_no_oom_entry(make_client, shared_fixtures, tmp_path):
    """The shared oom_snapshot.pickle (the demo's flexgen_oom.pickle) is the state *before*
    an OOM: its trace is one ``snapshot`` entry, no ``oom`` one, and a 2023 snapshot names
    no device, so nothing in the file says it failed or how much memory there was (no P0
    from a file name). Given the device's memory, as OOM risk takes it, the same rules rate
    its 11.84 GB reserved: HIGH on 12 GB (P1), over capacity on 11 GB (P0)."""
    src = shared_fixtures / "torch_snapshots" / "Yiyi-philosophy_LLM-inference" / "oom_snapshot.pickle"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "flexgen_oom.pickle").write_bytes(src.read_bytes())
    with open(src, "rb") as f:
        snap = snapshot_format.load_snapshot(f, str(src))
    assert snap.oom_events == [] and b"oom" not in src.read_bytes()
    client = make_client(logdir)
    oom, found = _findings(client, "flexgen_oom.pickle")
    assert oom["risk"] == "UNKNOWN" and [f["id"] for f in found if f["priority"] in ("P0", "P1")] == []
    oom, found = _findings(client, "flexgen_oom.pickle", device_memory="12GB")
    high = _by_id(found)["memory_high"]
    assert high["priority"] == "P1" and high["impact"]["bytes"] == oom["peakBytes"] - 12_000_000_000 * 9 // 10 + 1
    oom, found = _findings(client, "flexgen_oom.pickle", device_memory="11GB")
    over = _by_id(found)["memory_over_capacity"]
    assert over["priority"] == "P0" and over["impact"]["bytes"] == oom["peakBytes"] - 11_000_000_000 == 844_714_496


def test_padding_of_a_tiled_layout(demo_client):
    """No module here has padding (XLA on the CPU tiles nothing); a TPU's (8, 128) tiles pad
    the demo MLP's buffers the memory viewer reports as ``paddingBytes``. Set to 20 % of
    its peak, OOM risk's padding rule (> 10 %) fires and the Summary takes its bytes."""
    run, module = "mlp/2026_11_29_19_47_08", "jit_train_step(14)"
    mv = _data(demo_client, run, "memory_viewer", module_name=module)
    totals = mv["profscope"]["totals"]
    assert totals["paddingBytes"] == 0
    totals["paddingBytes"] = totals["peakBytes"] // 5
    oom = oom_risk.assess(compiled=oom_risk.compiled_evidence(mv, module))
    f = _by_id(memory_findings(oom, None, link))["memory_padding"]
    assert f["priority"] == "P2" and f["impact"]["bytes"] == totals["peakBytes"] // 5
    assert "multiples of 8 and 128" in f["fix"]
    assert f["evidence"][-1]["link"] == link("memory_viewer", module_name=module)


def test_fragmentation_bytes_where_the_input_has_them(demo_client, make_client, shared_fixtures):
    """A snapshot states its holes (inactive bytes in segments: FlexGen OPT-1.3B's 25.3 %
    external fragmentation); an xplane allocator only XProf's share at the peak (MI300
    GEMM: 23.0 %), so the impact has no bytes there rather than a guess."""
    oom, found = _findings(demo_client, "torch_snapshots/flexgen_1.3b.pickle")
    f = _by_id(found)["memory_fragmentation"]
    assert f["priority"] == "P2" and f["impact"]["bytes"] == oom["fragmentation"][0]["externalBytes"] == 1_925_016_576
    client = make_client(shared_fixtures / "public_profiles")
    oom, found = _findings(client, "xplane/mi300_jax08_gemm/jax08_gemm")
    f = _by_id(found)["memory_fragmentation"]
    assert f["priority"] == "P2" and f["impact"]["bytes"] is None
    assert any(e["label"] == "share" and e["number"] == round(oom["fragmentation"][-1]["share"], 6) for e in f["evidence"])
