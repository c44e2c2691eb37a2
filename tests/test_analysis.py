"""The Summary tool (issue 35, docs/analysis.md): its JSON on the real fixtures and the
demo, the time rules each fired and not fired on real profiles and on kineto traces from
profscope.testing.kineto_trace, all hosts, refused files, and byte-identical answers.

Everything goes through the data route (``/data/plugin/profile/data?tag=summary``) of a
fresh workspace, as the page, the CLI and the MCP server read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from profscope.testing import kineto_trace
from tests.test_xprof_op_stats import _client  # a TestClient of a logdir with its own cache

ROOT = Path(__file__).parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
FINDING_KEYS = ["id", "priority", "area", "title", "what", "evidence", "impact", "fix", "host"]
TOP_KEYS = ["version", "run", "host", "status", "summary", "metrics", "findings"]


def _summary(client, run: str, host: str | None = None) -> dict:
    params = {"run": run, "tag": "summary", **({"host": host} if host else {})}
    res = client.get("/data/plugin/profile/data", params=params)
    assert res.status_code == 200, res.text
    return res.json()


def _check_contract(d: dict) -> None:
    from profscope.tools.analysis import RULES

    assert list(d)[:len(TOP_KEYS)] == TOP_KEYS
    assert list(d)[-2:] == ["refused", "inputs"]
    ids = {r.id for r in RULES}
    rank = {"P0": 0, "P1": 1, "P2": 2}
    for f in d["findings"]:
        assert list(f) == FINDING_KEYS, f
        assert f["id"] in ids and f["priority"] in rank and f["area"] in ("time", "memory", "compiler")
        assert set(f["impact"]) == {"seconds_per_step", "bytes", "text"}
        for e in f["evidence"]:
            assert set(e) == {"label", "value", "number", "link"}
            assert e["link"] is None or e["link"].startswith("?run=")
    prios = [rank[f["priority"]] for f in d["findings"]]
    assert prios == sorted(prios)
    if any(d["inputs"].values()) or prios:
        assert d["status"] == ("NEEDS_ATTENTION" if any(p < 2 for p in prios) else "OPTIMAL")
    else:  # nothing could be read: no verdict
        assert d["status"] == "NOT_ASSESSED"
    sentences = [s for s in d["summary"].split(". ") if s]
    assert 2 <= len(sentences) <= 5, d["summary"]


@pytest.fixture(scope="module")
def public(shared_fixtures, tmp_path_factory):
    return _client(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Kineto traces whose device time is laid out the way each rule looks for."""
    d = tmp_path_factory.mktemp("planted")
    for name in ("input_bound", "launch_bound", "compute_bound", "collective_bound", "straggler"):
        getattr(kineto_trace, name)(d / f"{name}.pt.trace.json.gz")
    # each step: 10 GEMMs of 500 µs, a synchronize (loss.item()), then 4 ms of host work
    # before the next step (a checkpoint): the device idles after its last kernel
    tr = kineto_trace.KinetoTrace()

    def then_host(t):
        for _ in range(10):
            t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 500)
        t.t = max(t.t, t.gpu_free) + 2
        t.host("checkpoint_save", 4000)
    for n in range(4):
        tr.step(n, then_host)
    tr.write(d / "idle_between_steps.pt.trace.json.gz")
    return _client(d, tmp_path_factory.mktemp("cache"))


def _ids(d: dict) -> dict[str, str]:
    return {f["id"]: f["priority"] for f in d["findings"]}


PUBLIC_RUNS = ["xplane/tf_gpu/GPU-multi-worker", "xplane/tpu_inference/2025_12_10_tpu",
               "xplane/mi300_jax08_gemm/jax08_gemm", "xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal",
               "traces/kineto_resnet50_v100.pt.trace.json.gz", "traces/tracelens_h100_bert_small.trace.json.gz",
               "traces/hta_alexnet.trace.json.gz", "snapshots/niu_fwd_bwd_200_mixed.pickle"]


@pytest.mark.parametrize("run", PUBLIC_RUNS)
def test_every_public_run_gets_a_summary_that_keeps_the_contract(public, run):
    d = _summary(public, run)
    _check_contract(d)
    assert d["run"] == run
    assert not d["refused"]


def test_the_summary_is_listed_first(public):
    res = public.get("/api/run", params={"run": "xplane/tpu_inference/2025_12_10_tpu"})
    assert res.status_code == 200
    assert res.json()["tools"][0]["name"] == "summary"


def test_metrics_are_the_step_and_memory_payloads_numbers(public):
    run = "traces/kineto_resnet50_v100.pt.trace.json.gz"
    d = _summary(public, run)
    so = public.get("/api/steps_ops", params={"run": run}).json()
    oom = public.get("/data/plugin/profile/data", params={"run": run, "tag": "oom_risk"}).json()
    st = d["metrics"]["steps"]
    assert (st["count"], st["median_us"], st["p90_us"]) == (so["summary"]["steps"], so["summary"]["median_us"],
                                                            so["summary"]["p90_us"])
    assert d["metrics"]["memory"]["peak_bytes"] == oom["peakBytes"] and d["metrics"]["memory"]["risk"] == oom["risk"]
    busy = sum(dev["busy_us"] for s in so["steps"] for dev in s["devices"]) / sum(s["step_time_us"] for s in so["steps"])
    assert d["metrics"]["device"]["busy_share"] == pytest.approx(busy, abs=1e-4)
    cats = d["metrics"]["categories"]
    assert [c["key"] for c in cats] == [c["key"] for c in so["categories"]] + ["idle"]
    # the median step's numbers (one GPU): its busy time split in proportion to the kernel
    # time by category (kernels overlap across streams: their sum is past the busy time),
    # and its idle time; one 100 % bar
    mid = min(so["steps"], key=lambda s: abs(s["step_time_us"] - so["summary"]["median_us"]))
    dev = mid["devices"][0]
    kernel_us = sum(dev["time_us"].values())
    assert kernel_us > dev["busy_us"]
    for c in cats[:-1]:
        assert c["us"] == pytest.approx(dev["busy_us"] * dev["time_us"][c["key"]] / kernel_us, abs=1e-3)
    assert cats[-1]["us"] == dev["idle_us"]
    assert sum(c["share"] for c in cats) == pytest.approx(1.0, abs=1e-3)


# -- the time rules: each fired, and not fired ---------------------------------------------


def test_input_bound_fires_on_the_input_bound_trace_only(planted):
    d = _summary(planted, "input_bound.pt.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "input_bound")
    # each step: 8 ms of host loading before 20 x 50 µs of kernels: ~89 % of the step idle first
    assert f["priority"] == "P0" and d["status"] == "NEEDS_ATTENTION"
    assert 0.007 < f["impact"]["seconds_per_step"] < 0.0095
    assert any(e["link"] and "tool=steps_ops" in e["link"] and "step=" in e["link"] for e in f["evidence"])
    assert "input_bound" not in _ids(_summary(planted, "compute_bound.pt.trace.json.gz"))


def test_launch_bound_fires_on_many_tiny_kernels_only(planted):
    d = _summary(planted, "launch_bound.pt.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "launch_bound")
    assert f["priority"] == "P0" and "tiny kernels" in f["title"]
    mean = next(e for e in f["evidence"] if e["label"] == "mean activity duration")
    assert mean["number"] == pytest.approx(2.0, abs=0.01)
    assert "launch_bound" not in _ids(_summary(planted, "compute_bound.pt.trace.json.gz"))


def test_collective_bound_fires_on_the_all_reduce_trace_only(planted):
    d = _summary(planted, "collective_bound.pt.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "collective_bound")
    # 5 ms of all-reduce in a step of 10 x 100 µs + 5 ms
    assert f["priority"] == "P0"
    assert f["impact"]["seconds_per_step"] == pytest.approx(0.005, rel=0.01)
    assert "collective_bound" not in _ids(_summary(planted, "input_bound.pt.trace.json.gz"))


def test_a_straggler_device_fires_where_one_gpu_is_slower(planted, public):
    d = _summary(planted, "straggler.pt.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "straggler_device")
    assert "device 1" in f["what"] and f["priority"] in ("P0", "P1")
    # the TPU's four cores finish within 23 ms of a 78 s step: no straggler
    # GPU 0 idles after its last kernel while GPU 1 finishes: that wait is the straggler's,
    # not idle between steps (the same time twice)
    assert "idle_between_steps" not in _ids(d)
    assert "straggler_device" not in _ids(_summary(public, "xplane/tpu_inference/2025_12_10_tpu"))


def test_a_healthy_compute_bound_trace_is_optimal(planted):
    d = _summary(planted, "compute_bound.pt.trace.json.gz")
    assert d["status"] == "OPTIMAL", d["findings"]
    assert not [f for f in d["findings"] if f["area"] == "time" and f["priority"] != "P2"]


def test_op_dominates_fires_on_the_tpu_copies_and_not_on_resnet(public):
    d = _summary(public, "xplane/tpu_inference/2025_12_10_tpu")
    f = next(f for f in d["findings"] if f["id"] == "op_dominates")
    assert f["priority"] == "P2" and "copy-done" in f["title"]
    assert any("category=copy-done" in (e["link"] or "") for e in f["evidence"])
    # resnet50's largest kernel is 7.7 % of the steps' device time
    assert "op_dominates" not in _ids(_summary(public, "traces/kineto_resnet50_v100.pt.trace.json.gz"))


def test_idle_between_steps_fires_on_host_work_after_the_device_work_only(planted, public):
    d = _summary(planted, "idle_between_steps.pt.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "idle_between_steps")
    # ~4 ms of each ~9 ms step
    assert f["priority"] == "P0" and 0.0038 < f["impact"]["seconds_per_step"] < 0.0043
    assert "idle_between_steps" not in _ids(_summary(public, "xplane/tpu_inference/2025_12_10_tpu"))
    # the MI300 conv's device 0 idles after its work while device 7 still runs: a straggler
    conv = _ids(_summary(public, "xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal"))
    assert "straggler_device" in conv and "idle_between_steps" not in conv


# -- all hosts, refused files, determinism ----------------------------------------------------


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory, shared_fixtures):
    """One session of two real hosts whose steps differ (the demo's mlp and convnet CPU
    profiles), and one of a good host beside the corrupt TPU file."""
    root = tmp_path_factory.mktemp("hosts")
    src = {p.parts[-5]: p for p in DEMO.glob("*/plugins/profile/*/*.xplane.pb")}
    uneven = root / "uneven" / "plugins" / "profile" / "s"
    uneven.mkdir(parents=True)
    shutil.copy(src["mlp"], uneven / "fast.xplane.pb")
    shutil.copy(src["convnet"], uneven / "slow.xplane.pb")
    broken = root / "broken" / "plugins" / "profile" / "s"
    broken.mkdir(parents=True)
    shutil.copy(src["mlp"], broken / "good.xplane.pb")
    bad = next((shared_fixtures / "public_profiles" / "xplane" / "tpu_inference_corrupt").rglob("*.xplane.pb"))
    shutil.copy(bad, broken / "bad.xplane.pb")
    return _client(root, tmp_path_factory.mktemp("cache"))


def test_all_hosts_is_one_summary_with_the_straggler_host(two_hosts):
    d = _summary(two_hosts, "uneven/s")  # no host: a multi-host run is summarised over every host
    assert d["host"] == "ALL_HOSTS"
    assert {h["host"] for h in d["hosts"]} == {"fast", "slow"}
    med = {h["host"]: h["median_us"] for h in d["hosts"]}
    f = next(f for f in d["findings"] if f["id"] == "straggler_host")
    slow, fast = max(med, key=med.get), min(med, key=med.get)
    assert f["host"] == slow
    assert f["impact"]["seconds_per_step"] == pytest.approx((med[slow] - med[fast]) / 1e6, rel=1e-6)
    assert _summary(two_hosts, "uneven/s", "ALL_HOSTS") == d
    one = _summary(two_hosts, "uneven/s", "fast")
    assert one["host"] == "fast" and "hosts" not in one and "straggler_host" not in _ids(one)


def test_all_hosts_of_equal_steps_has_no_straggler_host(public):
    d = _summary(public, "xplane/tf_gpu/GPU-multi-worker")
    assert d["host"] == "ALL_HOSTS" and len(d["hosts"]) == 2
    assert "straggler_host" not in _ids(d)
    # memory: OOM risk's rating of the run by its worst host
    oom = public.get("/data/plugin/profile/data", params={"run": "xplane/tf_gpu/GPU-multi-worker", "tag": "oom_risk"}).json()
    assert (d["metrics"]["memory"]["peak_bytes"], d["metrics"]["memory"]["host"]) == (oom["peakBytes"], oom["host"])
    # the rule that fired on both hosts is one finding that names them both
    f = d["findings"][0]
    assert any(e["label"] == "hosts with this finding" and e["number"] == 2 for e in f["evidence"])


def test_a_corrupt_file_is_refused_and_never_fails_the_summary(public, two_hosts):
    d = _summary(public, "xplane/tpu_inference_corrupt/2025_12_15_tpu")
    _check_contract(d)
    assert len(d["refused"]) == 1
    r = d["refused"][0]
    # the file by its path in the log directory (as the run list names it), said once
    assert r["file"] == "xplane/tpu_inference_corrupt/plugins/profile/2025_12_15_tpu/tpu_inference_2.xplane.pb"
    assert r["reason"].startswith("truncated XSpace profile")
    assert "steps_ops" in r["parts"] and "nothing could be read" in d["summary"] and "optimal" not in d["summary"]
    assert d["status"] == "NOT_ASSESSED"
    mixed = _summary(two_hosts, "broken/s")
    rows = {h["host"]: h for h in mixed["hosts"]}
    assert "error" in rows["bad"] and "error" not in rows["good"]
    assert mixed["hosts"][-1]["host"] == "bad"  # an unreadable host comes last
    assert [r["file"] for r in mixed["refused"]] == ["broken/plugins/profile/s/bad.xplane.pb"]
    assert mixed["metrics"]["steps"]["host"] == "good"
    assert "the summary covers only what was" in mixed["summary"]
    # five sentences at most, the worst host named in the first, the verdict kept last
    _check_contract(mixed)
    assert "good is the worst" in mixed["summary"].split(". ")[0]
    assert mixed["summary"].split(". ")[-1].startswith(("Most urgent", "No rule found"))


def test_an_unknown_host_is_a_404_naming_the_hosts(public):
    res = public.get("/data/plugin/profile/data", params={"run": "xplane/tf_gpu/GPU-multi-worker", "tag": "summary",
                                                           "host": "nope"})
    assert res.status_code == 404 and "34.83.195.179_6003" in res.json()["error"]
    # ALL_HOSTS rolls up a profile's hosts; a snapshot's devices are no hosts: a 400 saying so
    res = public.get("/data/plugin/profile/data", params={"run": "snapshots/niu_fwd_bwd_200_mixed.pickle",
                                                           "tag": "summary", "host": "ALL_HOSTS"})
    assert res.status_code == 400 and "leave host out" in res.json()["error"]


def test_the_same_input_gives_byte_identical_json(shared_fixtures, tmp_path):
    runs = ["xplane/tf_gpu/GPU-multi-worker", "traces/kineto_resnet50_v100.pt.trace.json.gz",
            "xplane/tpu_inference_corrupt/2025_12_15_tpu"]
    answers = []
    for i in range(2):
        client = _client(shared_fixtures / "public_profiles", tmp_path / f"cache{i}")
        answers.append([client.get("/data/plugin/profile/data", params={"run": r, "tag": "summary"}).content
                        for r in runs])
    assert answers[0] == answers[1]
    assert all(a.startswith(b'{"version":1') for a in answers[0])


def test_roofline_where_the_planes_name_their_peaks(public):
    """The TPU's planes carry peak FLOP/s and HBM bandwidth and its HLO ops FLOPs and
    bytes: utilization = their sum over (device time x peak). The GPUs' planes name no
    peak FLOP/s: null."""
    run = "xplane/tpu_inference/2025_12_10_tpu"
    roof = _summary(public, run)["metrics"]["roofline"]
    hlo = [o for o in public.get("/api/steps_ops", params={"run": run}).json()["ops"] if o["kind"] == "hlo"]
    seconds = sum(o["total_us"] for o in hlo) / 1e6
    assert roof["flops"] == sum(o["flops"] or 0 for o in hlo)
    assert roof["hbm_utilization"] == pytest.approx(sum(o["bytes_accessed"] or 0 for o in hlo)
                                                    / (seconds * roof["peak_bytes_per_s"]), abs=1e-6)
    assert 0 < roof["flops_utilization"] < roof["hbm_utilization"] < 1
    assert _summary(public, "xplane/mi300_jax08_gemm/jax08_gemm")["metrics"]["roofline"] is None


def test_a_cpu_profile_is_input_bound_by_xprofs_input_time(tmp_path):
    """A CPU-only xplane has no device time to be idle: its input share is XProf's step
    database's (IteratorGetNext, 'waiting for input'), as overview_page measures it."""
    from profscope.testing.planted import grouped_cpu

    for run, input_us in (("waits", 3000), ("computes", 0)):
        folder = tmp_path / "logs" / run / "plugins" / "profile" / "s"
        folder.mkdir(parents=True)
        (folder / "h.xplane.pb").write_bytes(grouped_cpu("h", step_us=4000, input_us=input_us))
    client = _client(tmp_path / "logs", tmp_path / "cache")
    d = _summary(client, "waits/s")
    f = next(f for f in d["findings"] if f["id"] == "input_bound")
    overview = client.get("/data/plugin/profile/data", params={"run": "waits/s", "tag": "overview_page"}).json()
    assert "HIGHLY input-bound" in str(overview)  # XProf's own verdict on the same steps
    assert f["priority"] == "P0" and 0.7 < f["evidence"][0]["number"] < 0.8
    assert f["impact"]["seconds_per_step"] == pytest.approx(0.003, rel=0.01)
    # no input op: at most XProf's "POTENTIALLY" (time in no op), a P2
    assert _ids(_summary(client, "computes/s")).get("input_bound") in (None, "P2")


def test_evidence_links_open_the_step_and_the_op(planted, public):
    """A step link is the Steps & ops page of that step (its data answers for that step);
    an op link is its slowest occurrence in the trace viewer (the event id is that op's)."""
    from urllib.parse import parse_qsl

    d = _summary(planted, "compute_bound.pt.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "op_dominates")  # one GEMM is all the device time: P2
    assert f["priority"] == "P2" and "gemm" in f["title"]
    q = dict(parse_qsl(next(e["link"] for e in f["evidence"] if "tool=trace_viewer" in (e["link"] or ""))[1:]))
    assert q["tool"] == "trace_viewer@" and float(q["start_ms"]) < float(q["end_ms"])
    ev = planted.get("/api/trace/event", params={"run": q["run"], "host": q["host"], "id": q["ev"]})
    assert ev.status_code == 200 and "gemm" in ev.json()["name"]
    steps = [e["link"] for run in ("xplane/tf_gpu/GPU-multi-worker", "traces/kineto_resnet50_v100.pt.trace.json.gz")
             for f in _summary(public, run)["findings"] for e in f["evidence"] if "step=" in (e["link"] or "")]
    assert steps
    for link in steps:
        q = dict(parse_qsl(link[1:]))
        res = public.get("/data/plugin/profile/data", params={"run": q["run"], "tag": q["tool"], "host": q["host"],
                                                               "step": q["step"]})
        assert res.status_code == 200 and any(s["step"] == q["step"] for s in res.json()["steps"]), link


def test_findings_sort_by_priority_then_impact_without_mixing_units():
    """Within a priority, a time at stake first (most seconds first), then bytes (most
    first), then neither; then the rule's id and the host. Never re-ranked."""
    from profscope.tools.analysis import sort_findings, summarize
    from profscope.tools.analysis_rules import finding, impact
    from profscope.tools.analysis_time import RULES

    rule = RULES[0]

    def f(p, secs=None, nbytes=None, host="h"):
        return finding(rule, priority=p, title="t", what="w", evidence=[], fix="x", host=host,
                       impact=impact(secs, nbytes))
    found = [f("P2", 5.0), f("P1", nbytes=1 << 40), f("P1", 0.001), f("P1"), f("P1", 0.5), f("P0", nbytes=10),
             f("P1", 0.5, host="a")]
    order = [(x["priority"], x["impact"]["seconds_per_step"], x["impact"]["bytes"], x["host"]) for x in sort_findings(found)]
    assert order == [("P0", None, 10, "h"), ("P1", 0.5, None, "a"), ("P1", 0.5, None, "h"), ("P1", 0.001, None, "h"),
                     ("P1", None, 1 << 40, "h"), ("P1", None, None, "h"), ("P2", 5.0, None, "h")]
    d = summarize({"run": "r", "findings": found})
    assert d["status"] == "NEEDS_ATTENTION" and [x["priority"] for x in d["findings"]][:1] == ["P0"]
    assert summarize({"run": "r", "findings": [f("P2", 5.0)]})["status"] == "OPTIMAL"


def test_a_cpu_profile_mostly_outside_any_op_is_possibly_input_bound_at_p2():
    """The real JAX program of the planted suite (tests/data/planted_programs/input_bound:
    20 ms of host sleep before each ~1 ms jitted step, on CPU): XProf's overview page says
    POTENTIALLY input-bound (98.8 % 'All Others'); the time is in no op, its cause
    unmeasured, so a P2 that says so."""
    import tempfile

    client = _client(ROOT / "tests" / "data" / "planted_programs", Path(tempfile.mkdtemp()))
    run = next(r["name"] for r in client.get("/api/runs").json()["runs"] if r["name"].startswith("input_bound/"))
    d = _summary(client, run)
    f = next(f for f in d["findings"] if f["id"] == "input_bound")
    assert f["priority"] == "P2" and f["title"].startswith("Possibly input-bound")
    assert f["evidence"][0]["number"] > 0.9 and 0.019 < f["impact"]["seconds_per_step"] < 0.022


@pytest.mark.parametrize("name", ["hta_alexnet", "tracelens_b200_eager"])
def test_a_trace_without_steps_reports_the_devices_idle_span_as_hta_does(public, name):
    """No ProfilerStep#N: the step rules have no window, so the device's idle over its
    kernel span (HTA's temporal breakdown, recorded by HTA itself in tests/golden/hta) is
    the finding; it said "No rule found anything to fix" on 99.5 % idle."""
    import json

    hta = json.loads((Path(__file__).parent / "golden" / "hta" / f"{name}.json").read_text())["temporal"][0]
    d = _summary(public, f"traces/{name}.trace.json.gz")
    f = next(f for f in d["findings"] if f["id"] == "device_idle")
    assert f["priority"] == "P0" and f["impact"]["seconds_per_step"] is None
    assert f["evidence"][0]["number"] == pytest.approx(hta["idle"] / hta["kernel_time"], abs=0.015)
    assert f["evidence"][1]["number"] == pytest.approx(hta["kernel_time"], rel=0.001)
    assert "device_idle" not in _ids(_summary(public, "traces/kineto_resnet50_v100.pt.trace.json.gz"))


def test_a_capacity_asked_of_the_summary_rates_the_memory(demo_logdir, tmp_path):
    """A snapshot names no device: the summary takes OOM risk's capacity parameters, so
    the demo's FlexGen snapshot (11.0 GiB peak) on an 11 GB device is over capacity."""
    client = _client(demo_logdir, tmp_path / "cache")
    run = "torch_snapshots/flexgen_oom.pickle"
    plain = _summary(client, run)
    assert plain["metrics"]["memory"]["capacity_bytes"] is None
    res = client.get("/data/plugin/profile/data", params={"run": run, "tag": "summary", "device_memory": "11GB"})
    assert res.status_code == 200, res.text
    d = res.json()
    assert d["metrics"]["memory"]["capacity_bytes"] == 11 * 10**9 and d["metrics"]["memory"]["risk"] == "OOM"
    assert d["status"] == "NEEDS_ATTENTION" and d["findings"][0]["priority"] == "P0"
    bad = client.get("/data/plugin/profile/data", params={"run": run, "tag": "summary", "device_memory": "lots"})
    assert bad.status_code == 400


def test_a_tpu_barrier_cores_step_is_collective_bound(tmp_path):
    """A TPU's barrier-cores op (the cores' synchronisation, XProf's kSpecialOpName that
    its smart_suggestion BarrierCoresRule measures: planted.tpu_barrier, 40 % of each 4 ms
    step) is collective time; it was 'other' and the run OPTIMAL."""
    from profscope.testing.planted import tpu_barrier

    folder = tmp_path / "logs" / "tpu" / "plugins" / "profile" / "s"
    folder.mkdir(parents=True)
    (folder / "tpu-host.xplane.pb").write_bytes(tpu_barrier("tpu-host", barrier_share=0.4))
    client = _client(tmp_path / "logs", tmp_path / "cache")
    d = _summary(client, "tpu/s")
    f = next(f for f in d["findings"] if f["id"] == "collective_bound")
    assert f["priority"] == "P0" and f["evidence"][0]["number"] == pytest.approx(0.4, abs=0.01)


def test_hosts_in_lockstep_name_the_host_the_others_wait_for(tmp_path):
    """Four TPU hosts whose steps all take 4 ms: three spend 40 % of each step in
    barrier-cores waiting, pod-host3 5 % (planted.tpu_barrier). Equal medians hide it; the
    collective time per step names pod-host3, the others' wait over its own the impact.
    Four hosts of equal barriers have none."""
    from profscope.testing.planted import tpu_barrier

    for run, shares in (("lockstep", (0.4, 0.4, 0.4, 0.05)), ("even", (0.4, 0.4, 0.4, 0.4))):
        folder = tmp_path / "logs" / run / "plugins" / "profile" / "s"
        folder.mkdir(parents=True)
        for i, share in enumerate(shares):
            (folder / f"pod-host{i}.xplane.pb").write_bytes(tpu_barrier(f"pod-host{i}", barrier_share=share))
    client = _client(tmp_path / "logs", tmp_path / "cache")
    d = _summary(client, "lockstep/s")
    f = next(f for f in d["findings"] if f["id"] == "straggler_host")
    assert f["host"] == "pod-host3" and f["priority"] == "P0"
    rows = {h["host"]: h for h in d["hosts"]}
    gap = rows["pod-host0"]["collective_us"] - rows["pod-host3"]["collective_us"]
    assert f["impact"]["seconds_per_step"] == pytest.approx(gap / 1e6, rel=1e-6) and 0.0013 < gap / 1e6 < 0.0015
    assert d["hosts"][0]["host"] == "pod-host3" and "pod-host3 is the worst" in d["summary"]
    assert "straggler_host" not in _ids(_summary(client, "even/s"))
