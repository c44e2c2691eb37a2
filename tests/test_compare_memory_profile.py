"""Memory profile, run vs run, and snapshots (issue 36, tools/compare_memory_profile.py,
docs/compare.md "Memory profile" and "Snapshots"): the diff of two real ``memory_profile``
answers (XProf's schema, as the data route gives it for an xplane, a PyTorch trace and a
snapshot) and of the snapshot compare.

Inputs: the public profiles of ``shared/fixtures`` (the TF GPU session's BFC allocators,
the TPU and MI300 xplanes, the kineto and TraceLens traces, the two real snapshots)."""

from __future__ import annotations

import pytest

from profscope.tools import compare_memory_profile as cmp
from tests.test_compare_steps_ops import _unlinked  # a diff's rows without their links
from tests.test_xprof_op_stats import _client  # a TestClient of a logdir with its own cache

TF = ("xplane/tf_gpu/GPU-multi-worker", "34.83.195.179_6003")
TPU = ("xplane/tpu_inference/2025_12_10_tpu", "tpu_inference_2")
MI300 = ("xplane/mi300_jax08_gemm/jax08_gemm", "tw003")
RESNET = ("traces/kineto_resnet50_v100.pt.trace.json.gz", None)  # [memory] events without addresses
BERT = ("traces/tracelens_h100_bert_small.trace.json.gz", None)
NIU = ("snapshots/niu_fwd_bwd_200_mixed.pickle", None)
BOLONG = ("snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle", None)


def _link(tool, **keys):
    return "?" + "&".join(f"{k}={v}" for k, v in {"tool": tool, **keys}.items() if v is not None)


@pytest.fixture(scope="module")
def client(shared_fixtures, tmp_path_factory):
    return _client(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def answers(client):
    out = {}

    def get(which):
        if which not in out:
            run, host = which
            res = client.get("/data/plugin/profile/data",
                             params={"run": run, "tag": "memory_profile", **({"host": host} if host else {})})
            assert res.status_code == 200, res.text
            out[which] = res.json()
        return out[which]

    return get


def _diff(answers, b, c, **refs):
    return cmp.diff(answers(b), answers(c), base_ref={"run": b[0], "host": b[1], **refs.get("base", {})},
                    current_ref={"run": c[0], "host": c[1], **refs.get("current", {})}, link=_link)


def _peak(answer, alloc):
    return int(answer["memoryProfilePerAllocator"][alloc]["profileSummary"]["peakStats"]["peakBytesInUse"])


def _sums_hold(d):
    t = d["totals"]
    for rows in (d["rows"], *d["groups"].values()):
        assert sum(r["delta"] for r in rows) == t["delta"] - t["residual"]
    for r in d["rows"]:
        assert r["delta"] == r["current"] - r["base"]
    deltas = [abs(r["delta"]) for r in d["rows"]]
    assert deltas == sorted(deltas, reverse=True)


@pytest.mark.parametrize("run", [TF, TPU, BERT, NIU], ids=["tf_gpu", "tpu", "trace", "snapshot"])
def test_self_compare_is_zero_everywhere(answers, run):
    d = _diff(answers, run, run)
    assert d["comparable"] and d["why"] is None
    assert d["totals"]["delta"] == 0 and d["totals"]["residual"] == 0
    assert d["fragmentation"]["delta"] == 0
    assert d["timeline"]["base"] == d["timeline"]["current"]
    for rows in (d["rows"], *d["groups"].values()):
        assert rows and all(r["delta"] == 0 and r["in"] == "both" for r in rows)


@pytest.mark.parametrize("pair", [(NIU, BOLONG), (TPU, MI300), (BERT, NIU)], ids=["snapshots", "tpu_mi300", "trace_snapshot"])
def test_peak_delta_is_itemised_to_the_byte(answers, pair):
    """XProf's live set at the peak adds up to the peak on these answers: every byte of the
    peak's change is in a row (residual 0), and the totals are the single answers' peaks."""
    b, c = pair
    d = _diff(answers, b, c)
    ba, ca = d["base"]["allocator"], d["current"]["allocator"]
    assert d["totals"]["base"] == _peak(answers(b), ba) and d["totals"]["current"] == _peak(answers(c), ca)
    assert d["totals"]["delta"] == d["totals"]["current"] - d["totals"]["base"] != 0
    assert d["totals"]["residual"] == 0
    _sums_hold(d)
    assert sum(r["base"] for r in d["rows"]) == d["totals"]["base"]
    assert sum(r["current"] for r in d["rows"]) == d["totals"]["current"]


def test_a_trace_without_addresses_is_compared_but_not_itemised(answers):
    d = _diff(answers, RESNET, BERT)
    assert d["comparable"] and "not recorded" in d["why"]
    assert d["totals"]["residual"] == -d["totals"]["base"]  # resnet50's peak: no live set to itemise
    assert {r["in"] for r in d["rows"]} == {"current_only"}
    _sums_hold(d)


def test_different_allocators_say_so(answers):
    d = _diff(answers, TPU, MI300)
    tpu = answers(TPU)
    highest = max(tpu["memoryIds"], key=lambda i: _peak(tpu, i))
    assert d["base"]["allocator"] == highest and d["current"]["allocator"] == "GPU_0_bfc"
    assert "no allocator in common" in d["why"]


def test_the_highest_peak_allocator_by_default(answers):
    """TF's memoryIds list GPU_1_bfc first, a fifth of GPU_6_bfc's peak: the default is the
    allocator with the highest peak, not the first listed."""
    tf = answers(TF)
    d = _diff(answers, TF, TF)
    assert d["current"]["allocator"] == max(tf["memoryIds"], key=lambda i: _peak(tf, i)) != tf["memoryIds"][0]
    assert d["totals"]["current"] == max(_peak(tf, i) for i in tf["memoryIds"])


def test_an_unknown_allocator_is_not_comparable(answers):
    d = _diff(answers, TF, TF, current={"allocator": "no_such_bfc"})
    assert not d["comparable"] and "current run has no such allocator" in d["why"]


def test_timelines_aligned_by_step(answers):
    """The TF GPU:4 allocator has samples in two steps: both timelines on the steps' axis,
    each sample at its step's ordinal plus its place within the step."""
    d = _diff(answers, TF, TF, base={"allocator": "GPU_4_bfc"}, current={"allocator": "GPU_4_bfc"})
    tl = d["timeline"]
    assert tl["align"] == "step" and tl["x_unit"] == "step"
    xs = tl["current"]["x"]
    assert xs == sorted(xs) and 0 <= xs[0] and xs[-1] <= 2 and any(x >= 1 for x in xs)
    samples = answers(TF)["memoryProfilePerAllocator"]["GPU_4_bfc"]["sampledTimelineSnapshots"]
    assert len(xs) == len(samples)
    assert d["allocations"]["base"] == d["allocations"]["current"] > 0  # profscope's own summary of the xplane


def test_timelines_by_time_when_a_run_has_one_step(answers):
    d = _diff(answers, RESNET, BERT)
    tl = d["timeline"]
    assert tl["align"] == "time" and tl["x_unit"] == "us"
    assert tl["base"]["x"][0] == 0 and tl["current"]["x"][0] == 0


def test_snapshots_compare_in_the_row_shape(client):
    """The snapshot compare (``/api/snapshot/compare``, a = the base, b = the current) in the
    diff JSON: live bytes by allocation site, every changed byte in a row."""
    res = client.get("/api/snapshot/compare", params={"run": NIU[0], "other": BOLONG[0]})
    assert res.status_code == 200, res.text
    raw = res.json()
    d = cmp.diff_snapshots(raw, base_ref={"run": NIU[0]}, current_ref={"run": BOLONG[0]}, link=_link)
    assert d["totals"]["base"] == raw["a"]["liveBytes"] and d["totals"]["current"] == raw["b"]["liveBytes"]
    assert d["totals"]["residual"] == 0 and raw["sitesOmitted"] == 0
    _sums_hold(d)
    assert {r["in"] for r in d["rows"]} == {"base_only", "current_only"}  # two unrelated programs
    flipped = cmp.diff_snapshots(raw, base_ref={"run": BOLONG[0]}, current_ref={"run": NIU[0]}, link=_link, base_is="b")
    assert flipped["totals"]["delta"] == -d["totals"]["delta"] and flipped["totals"]["residual"] == 0
    assert sorted(r["delta"] for r in flipped["rows"]) == sorted(-r["delta"] for r in d["rows"])
    assert {r["in"] for r in flipped["rows"] if r["base"] == 0} == {"current_only"}
    _sums_hold(flipped)
    same = client.get("/api/snapshot/compare", params={"run": NIU[0], "other": NIU[0]}).json()
    d = cmp.diff_snapshots(same, base_ref={"run": NIU[0]}, current_ref={"run": NIU[0]}, link=_link)
    assert d["totals"]["delta"] == 0 and d["rows"] == []  # the compare leaves unchanged sites out


def test_snapshot_compare_answers_the_diff_with_base(client):
    """``/api/snapshot/compare?run=A&base=B`` (``other=B`` its alias): the raw compare of A
    with B, and under ``diff`` the same in the diff JSON with B the base: current - base."""
    raw = client.get("/api/snapshot/compare", params={"run": NIU[0], "base": BOLONG[0]}).json()
    alias = client.get("/api/snapshot/compare", params={"run": NIU[0], "other": BOLONG[0]}).json()
    assert raw == alias
    d = raw["diff"]
    assert d["base"]["run"] == BOLONG[0] and d["current"]["run"] == NIU[0]
    assert d["totals"]["delta"] == raw["a"]["liveBytes"] - raw["b"]["liveBytes"] < 0
    assert d["totals"]["residual"] == 0
    _sums_hold(d)
    assert all(r["link_base"].startswith(f"?run={BOLONG[0].replace('/', '%2F')}&tool=memory_profile")
               for r in d["rows"] if r["link_base"])


def test_the_data_route_answers_this_diff(client, answers):
    """``tag=memory_profile&base=...`` (app/compare.py) answers this module's diff of the
    two single answers: two snapshots, and the TF GPU hosts through ``base_host``."""
    tf180 = (TF[0], "34.83.195.180_6003")
    for params, (b, c) in (({"run": NIU[0], "base": BOLONG[0]}, (BOLONG, NIU)),
                           ({"run": TF[0], "host": tf180[1], "base_host": TF[1]}, (TF, tf180))):
        res = client.get("/data/plugin/profile/data", params={"tag": "memory_profile", **params})
        assert res.status_code == 200, res.text
        routed, direct = res.json(), _diff(answers, b, c)
        for key in ("comparable", "why", "totals", "groups", "rows", "peak", "fragmentation", "timeline"):
            assert _unlinked(routed[key]) == _unlinked(direct[key]), key
        # the links are the dashboard's, into each side's own run (app/compare.py side_link)
        assert all(r["link_base"].startswith("?run=") for r in routed["rows"] if r["link_base"])


# -- allocation counts of traces and snapshots (issue 36 item 2) ---------------------------

LEAK = ("torch/leak.pt.trace.json.gz", None)  # the demo's torch leak trace (CPU only)


def _trace_counts(path) -> dict[str, tuple[int, int]]:
    """(allocations, frees) per device, read straight from the trace's JSON: every
    ``[memory]`` instant event is one, by the sign of its ``Bytes``."""
    import collections
    import gzip
    import json

    with gzip.open(path) as f:
        doc = json.load(f)
    counts: dict[str, list] = collections.defaultdict(lambda: [0, 0])
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        if e.get("name") == "[memory]":
            a = e["args"]
            dev = {0: "CPU", 1: "CUDA"}[a["Device Type"]] + (f":{a['Device Id']}" if a["Device Id"] >= 0 else "")
            counts[dev][0 if a["Bytes"] > 0 else 1] += a["Bytes"] != 0
    return {k: tuple(v) for k, v in counts.items()}


def _snapshot_counts(path) -> tuple[int, int]:
    """("alloc", "free_completed") entries of device 0's trace, through the safe unpickler
    (formats/safe_pickle.py: no global is run), not profscope's snapshot model."""
    from profscope.formats import safe_pickle

    with open(path, "rb") as f:
        snap, _ = safe_pickle.load(f, str(path))
    actions = [e["action"] for e in snap["device_traces"][0]]
    return actions.count("alloc"), actions.count("free_completed") + actions.count("free")


def _summaries(answer) -> dict[str, tuple[int, int]]:
    return {i: (s["summary"]["allocations"], s["summary"]["deallocations"])
            for i, s in answer["profscope"]["allocators"].items()}


@pytest.fixture(scope="module")
def demo_answers(demo_logdir, tmp_path_factory):
    demo = demo_logdir
    c = _client(demo, tmp_path_factory.mktemp("demo_cache"))

    def get(which):
        res = c.get("/data/plugin/profile/data", params={"run": which[0], "tag": "memory_profile"})
        assert res.status_code == 200, res.text
        return res.json()
    return get, demo


def test_trace_allocation_counts_are_the_raw_events(answers, shared_fixtures, demo_answers):
    """A trace's answer counts every ``[memory]`` event per device, as an xplane's counts
    every MemoryAllocation event: with addresses (BERT), without (the 2021 ResNet trace)
    and the demo's leak trace, whose 6 unfreed blocks show as 96 vs 90."""
    get_demo, demo = demo_answers
    for answer, path in ((answers(BERT), shared_fixtures / "public_profiles" / BERT[0]),
                         (answers(RESNET), shared_fixtures / "public_profiles" / RESNET[0]),
                         (get_demo(LEAK), demo / LEAK[0])):
        raw = _trace_counts(path)
        assert _summaries(answer) == raw
        assert set(raw) == set(answer["memoryIds"])


def test_snapshot_allocation_counts_are_the_raw_alloc_entries(answers, shared_fixtures):
    for run in (NIU, BOLONG):
        raw = _snapshot_counts(shared_fixtures / "public_profiles" / run[0])
        assert _summaries(answers(run)) == {"cuda:0": raw}


def test_the_compare_diffs_the_allocation_counts(answers, shared_fixtures, demo_answers):
    """The compare's ``allocations`` is the two raw counts and their difference: two
    snapshots, two traces (CUDA:0, the common allocator with the highest peak), the leak
    trace against BERT (their only common allocator, CPU), and a run with itself."""
    pub = shared_fixtures / "public_profiles"
    niu, bolong = _snapshot_counts(pub / NIU[0])[0], _snapshot_counts(pub / BOLONG[0])[0]
    d = _diff(answers, NIU, BOLONG)
    assert d["allocations"] == {"base": niu, "current": bolong, "delta": bolong - niu}
    resnet, bert = _trace_counts(pub / RESNET[0]), _trace_counts(pub / BERT[0])
    d = _diff(answers, RESNET, BERT)
    assert d["base"]["allocator"] == d["current"]["allocator"] == "CUDA:0"
    assert d["allocations"] == {"base": resnet["CUDA:0"][0], "current": bert["CUDA:0"][0],
                                "delta": bert["CUDA:0"][0] - resnet["CUDA:0"][0]}
    get_demo, demo = demo_answers
    leak = _trace_counts(demo / LEAK[0])["CPU"][0]
    d = cmp.diff(get_demo(LEAK), answers(BERT), base_ref={"run": LEAK[0]}, current_ref={"run": BERT[0]}, link=_link)
    assert d["base"]["allocator"] == d["current"]["allocator"] == "CPU"
    assert d["allocations"] == {"base": leak, "current": bert["CPU"][0], "delta": bert["CPU"][0] - leak}
    for run in (NIU, BERT):
        assert _diff(answers, run, run)["allocations"]["delta"] == 0
