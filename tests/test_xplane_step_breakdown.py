"""Steps of xplane profiles: XProf's ``overview_page`` step-time graph against XProf 2.24.2's
own answers, and profscope's step breakdown (``/api/steps_ops`` on xplane runs), on the
real GPU/ROCm/TPU profiles of ``shared/fixtures/public_profiles`` and the demo's CPU
profiles.

Goldens: ``tests/golden/overview_page/<case>.overview_page.json.gz`` (listed in
``index.json``), recorded by ``scripts/record_xprof_overview_golden.py`` from XProf itself.
Table 1 (the step-time graph: rows, columns and every property), table 3 (the
recommendation) and table 6 (the diagnostics) must equal XProf's; numbers to 1e-9
relative (XProf prints doubles, the sums are of the same integers). The other tables are
compared by their column ids (docs/steps_and_ops.md says what profscope leaves empty).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import pytest

from tests.test_xprof_op_stats import _client  # a TestClient of a logdir with its own cache

GOLDEN = Path(__file__).parent / "golden" / "overview_page"
INDEX = json.loads((GOLDEN / "index.json").read_text())
CASES = sorted(k for k in INDEX if not k.startswith("_") and "path" in INDEX[k])
# profiles written by profscope.testing builders (scripts/record_xprof_overview_golden.py)
BUILDER_CASES = sorted(k for k in INDEX if not k.startswith("_") and "builder" in INDEX[k])
# XProf's ALL_HOSTS merge of a session's hosts (scripts/record_xprof_overview_golden.py)
ALL_HOSTS_CASES = sorted(k for k in INDEX if not k.startswith("_") and "hosts" in INDEX[k])
ROOT = Path(__file__).parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
EQUAL_TABLES = (1, 3, 6)


@pytest.fixture(scope="module")
def clients(shared_fixtures, tmp_path_factory):
    for case in CASES:
        entry = INDEX[case]
        path = (shared_fixtures if entry["fixture"] else ROOT) / entry["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], f"{path} is not the file recorded"
    return {True: _client(shared_fixtures / "public_profiles" / "xplane", tmp_path_factory.mktemp("cache")),
            False: _client(DEMO, tmp_path_factory.mktemp("cache"))}


def _path(shared_fixtures: Path, entry: dict) -> Path:
    return (shared_fixtures if entry["fixture"] else ROOT) / entry["path"]


def _same(ours, theirs, where: str) -> None:
    if isinstance(theirs, float) and isinstance(ours, (int, float)):
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12), (where, ours, theirs)
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), (where, list(ours), list(theirs))
        for k in theirs:
            _same(ours[k], theirs[k], f"{where}.{k}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (where, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, (where, ours, theirs)


def _overview(clients, entry: dict):
    return clients[entry["fixture"]].get("/data/plugin/profile/data",
                                         params={"run": entry["run"], "tag": "overview_page", "host": entry["host"]})


@pytest.mark.parametrize("case", CASES)
def test_overview_page_step_graph_is_xprofs(clients, case):
    entry = INDEX[case]
    res = _overview(clients, entry)
    assert res.status_code == 200, res.text
    ours = res.json()
    theirs = json.loads(gzip.decompress((GOLDEN / entry["overview_page"]).read_bytes()))
    assert len(ours) == len(theirs) == 7
    for t in EQUAL_TABLES:
        _same(ours[t], theirs[t], f"{case} table {t}")
    for t, (a, b) in enumerate(zip(ours, theirs)):
        assert [c["id"] for c in a.get("cols", [])][: len(b.get("cols", []))] == \
            [c["id"] for c in b.get("cols", [])][: len(a.get("cols", []))], (case, t)
    assert len(ours[1]["rows"]) == entry["steps"]


@pytest.mark.parametrize("case", ALL_HOSTS_CASES)
def test_overview_page_all_hosts_is_xprofs(shared_fixtures, tmp_path, case):
    """host=ALL_HOSTS: XProf's merge of the hosts (its step intersection: the tf_gpu
    session's two hosts; two demo CPU profiles of different times as one session, of
    which XProf keeps 2 aligned steps), equal to XProf's own answer."""
    import shutil

    entry = INDEX[case]
    session = tmp_path / "logdir" / "pair" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    for h in entry["hosts"]:
        src = (shared_fixtures if h["fixture"] else ROOT) / h["path"]
        assert hashlib.sha256(src.read_bytes()).hexdigest() == h["sha256"], f"{src} is not the file recorded"
        shutil.copyfile(src, session / f"{h['host']}.xplane.pb")
    c = _client(tmp_path / "logdir", tmp_path / "cache")
    assert [h["hostname"] for h in c.get("/data/plugin/profile/hosts",
                                         params={"run": "pair/s1", "tag": "overview_page"}).json()] == ["ALL_HOSTS"]
    res = c.get("/data/plugin/profile/data", params={"run": "pair/s1", "tag": "overview_page", "host": "ALL_HOSTS"})
    assert res.status_code == 200, res.text
    ours = res.json()
    theirs = json.loads(gzip.decompress((GOLDEN / entry["overview_page"]).read_bytes()))
    for t in EQUAL_TABLES:
        _same(ours[t], theirs[t], f"{case} table {t}")
    assert len(ours[1]["rows"]) == entry["steps"]
    assert ours[2]["p"]["task_count"] == theirs[2]["p"]["task_count"]


@pytest.mark.parametrize("case", BUILDER_CASES)
def test_overview_page_of_builders_is_xprofs(tmp_path, case):
    """A CPU profile grouped at capture (its roots named by step_name stats, no train
    events): XProf's 3 steps with their names, host compute and input time."""
    import importlib

    entry = INDEX[case]
    module, func = entry["builder"].split(":")
    data = getattr(importlib.import_module(module), func)()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], "the builder no longer writes the file recorded"
    session = tmp_path / "logdir" / "b" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / f"{entry['host']}.xplane.pb").write_bytes(data)
    c = _client(tmp_path / "logdir", tmp_path / "cache")
    res = c.get("/data/plugin/profile/data", params={"run": "b/s1", "tag": "overview_page", "host": entry["host"]})
    assert res.status_code == 200, res.text
    theirs = json.loads(gzip.decompress((GOLDEN / entry["overview_page"]).read_bytes()))
    for t in EQUAL_TABLES:
        _same(res.json()[t], theirs[t], f"{case} table {t}")
    assert len(theirs[1]["rows"]) == entry["steps"] > 0


def test_run_tools_list_overview_page_first(clients):
    """XProf lists overview_page first for every xplane session (profile_plugin.py tool order)."""
    for entry in (INDEX["tf_gpu"], INDEX["demo_mlp"]):
        tools = clients[entry["fixture"]].get("/data/plugin/profile/run_tools", params={"run": entry["run"]}).json()
        assert tools[0] == "overview_page", tools


def _read(path: Path):
    from profscope.formats import xplane_step_events

    with open(path, "rb") as f:
        return xplane_step_events.read_step_events(f, str(path))


@pytest.mark.parametrize("case", CASES)
def test_categories_and_idle_add_up_to_the_step_per_device(shared_fixtures, case):
    """Per step and device, the category times (overlaps given to one category) and the
    idle time are the step's window, to the picosecond."""
    from profscope.tools import xplane_step_breakdown as xb

    ev = _read(_path(shared_fixtures, INDEX[case]))
    out = xb.breakdown(ev, ev.program_names)
    devices = [xb._Device(d) for d in ev.devices if d.start]
    windows = [(s["begin_ps"], s["begin_ps"] + s["duration_ps"]) for s in ev.steps] or \
        [(a, b) for _n, a, b in xb.module_runs(devices)[1]]
    assert len(windows) == out["summary"]["steps"]
    for a, b in windows:
        for d in devices:
            ps = d.in_step(a, b)["_ps"]
            assert sum(ps["time"].values()) + ps["idle"] == b - a
            assert ps["idle"] >= 0 and min(ps["time"].values()) >= 0
    for s in out["steps"]:
        for d in s["devices"]:
            total = sum(d["time_us"].values()) + d["idle_us"]
            assert abs(total - s["step_time_us"]) < 0.001 * (len(d["time_us"]) + 2), (case, s["step"], d["device"])
            idle = d["idle_before_first_us"] + d["idle_between_us"] + d["idle_after_last_us"]
            assert abs(idle - d["idle_us"]) < 0.004


@pytest.mark.parametrize("case", CASES)
def test_steps_ops_answers_every_xplane(clients, case):
    """/api/steps_ops answers every xplane run with the contract's shape; where XProf finds
    steps they are XProf's (the step-time graph's), else the module runs or none, and the
    summary says which."""
    entry = INDEX[case]
    res = clients[entry["fixture"]].get("/api/steps_ops", params={"run": entry["run"], "host": entry["host"]})
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["source"] == "xplane" and body["host"] == entry["host"] and isinstance(body["origin_ps"], int)
    assert [c["key"] for c in body["categories"]] == ["collective", "memory", "other", "custom_call", "fusion",
                                                       "matmul"]
    xprof = _overview(clients, entry).json()[1]["rows"]
    summary = body["summary"]
    if xprof:
        assert summary["step_source"] == "xprof_steps"
        assert [s["step"] for s in body["steps"]] == [r["c"][0]["v"] for r in xprof]
        for s, r in zip(body["steps"], xprof):
            assert abs(s["step_time_us"] - r["c"][-1]["v"] * 1000) < 0.0005
    else:
        assert summary["step_source"] in ("module_runs", "none")
        assert "no steps XProf recognises" in summary["missing"]
    if summary["steps"]:
        times = sorted(s["step_time_us"] for s in body["steps"])
        assert summary["slowest_us"] == times[-1] and summary["median_us"] == pytest.approx(
            times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2)
    for s in body["steps"]:
        for d in s["devices"]:
            assert set(d) >= {"device", "time_us", "busy_us", "idle_us", "idle_before_first_us", "idle_between_us",
                              "idle_after_last_us", "work_done_us", "bound", "memory_us"}
            # the copies by kind are their own times: at least what the memory category kept
            assert set(d["memory_us"]) <= {"HtoD", "DtoH", "DtoD", "PtoP", "Memset", "other"}
            assert sum(d["memory_us"].values()) >= d["time_us"]["memory"] - 0.001 * (len(d["memory_us"]) + 1)


def test_memory_copies_by_kind(clients):
    """The TF GPU step's copies are CUPTI's MemcpyH2D / MemcpyD2H on GPU 6 (XProf counts
    the H2D ones as device compute: ClassifyGpuEvent knows only MemcpyHToD names)."""
    entry = INDEX["tf_gpu"]
    body = clients[True].get("/api/steps_ops", params={"run": entry["run"], "host": entry["host"]}).json()
    gpu6 = next(d for d in body["steps"][0]["devices"] if d["device"] == 6)
    assert set(gpu6["memory_us"]) == {"HtoD", "DtoH"} and all(v > 0 for v in gpu6["memory_us"].values())


def test_cpu_only_profile_says_it_has_no_device(clients):
    """A profile without device planes: XProf's host steps, no device to break down."""
    entry = INDEX["demo_mlp"]
    body = clients[False].get("/api/steps_ops", params={"run": entry["run"], "host": entry["host"]}).json()
    assert body["summary"]["steps"] == entry["steps"] > 0
    assert body["summary"]["devices"] == [] and "no device planes" in body["summary"]["missing"]
    assert all(s["devices"] == [] for s in body["steps"])


def test_module_runs_on_a_profile_without_steps(shared_fixtures):
    """The ROCm GEMM profile has no step markers: each run of the module with the most
    device time is a step, and every step's window holds that module's activities."""
    import numpy as np

    from profscope.tools import xplane_step_breakdown as xb

    ev = _read(_path(shared_fixtures, INDEX["mi300_jax08_gemm"]))
    assert not ev.steps
    devices = [xb._Device(d) for d in ev.devices if d.start]
    best, windows = xb.module_runs(devices)
    time_of: dict[int, int] = {}
    for d in devices:
        for p in set(d.program.tolist()) - {-1}:
            sel = d.program == p
            time_of[p] = time_of.get(p, 0) + int((d.end[sel] - d.start[sel]).sum())
    assert best == max(time_of, key=time_of.get)
    out = xb.breakdown(ev, ev.program_names)
    assert out["summary"]["module"] == ev.program_names[best]
    for _n, a, b in windows:
        assert any(((d.program == best) & (d.start >= a) & (d.end <= b)).any() for d in devices)
    assert np.isclose(sum(s["step_time_us"] for s in out["steps"]),
                      sum((b - a) / 1e6 for _n, a, b in windows))


def test_all_hosts(clients):
    """host=ALL_HOSTS: one row per host with that host's own numbers, and the straggler
    host (none when the hosts' medians are equal: the two tf_gpu hosts are one file)."""
    entry = INDEX["tf_gpu"]
    c = clients[True]
    body = c.get("/api/steps_ops", params={"run": entry["run"], "host": "ALL_HOSTS"})
    assert body.status_code == 200, body.text
    body = body.json()
    hosts = c.get("/data/plugin/profile/hosts", params={"run": entry["run"]}).json()
    assert [h["host"] for h in body["hosts"]] == [h["hostname"] for h in hosts] and len(hosts) == 2
    for row in body["hosts"]:
        one = c.get("/api/steps_ops", params={"run": entry["run"], "host": row["host"]}).json()["summary"]
        assert (row["steps"], row["median_us"], row["p90_us"], row["slowest_us"]) == \
            (one["steps"], one["median_us"], one["p90_us"], one["slowest_us"])
    assert body["straggler_host"] is None


def test_corrupt_profile_is_a_4xx_naming_the_file(shared_fixtures, tmp_path):
    c = _client(shared_fixtures / "public_profiles" / "xplane", tmp_path)
    run = "tpu_inference_corrupt/2025_12_15_tpu"
    for url, params in (("/api/steps_ops", {"run": run}),
                        ("/data/plugin/profile/data", {"run": run, "tag": "overview_page",
                                                       "host": "tpu_inference_2"})):
        res = c.get(url, params=params)
        assert 400 <= res.status_code < 500, (url, res.status_code, res.text)
        assert "tpu_inference" in res.json()["error"]


@pytest.mark.parametrize("case", ["mi300_jax08_gemm", "mi300_jax_conv_xprof_touched"])
def test_ops_in_steps_agree_with_hlo_stats(shared_fixtures, case):
    """Every HLO op of the module the steps are made of: its kernels inside the steps'
    windows are XProf's hlo_stats occurrences of that op (XProf's own answer, the
    op-stats golden), so the steps hold every run of the module and nothing else."""
    from collections import Counter

    from profscope.tools import xplane_step_breakdown as xb

    ops_index = json.loads((Path(__file__).parent / "golden" / "op_stats" / "index.json").read_text())[case]
    hlo = json.loads(gzip.decompress((Path(__file__).parent / "golden" / "op_stats" / ops_index["hlo_stats"])
                                     .read_bytes()))
    ids = [c["id"] for c in hlo["cols"]]
    rows = [dict(zip(ids, [c.get("v") for c in r["c"]])) for r in hlo["rows"]]
    ev = _read(_path(shared_fixtures, INDEX[case]))
    best, windows = xb.module_runs([xb._Device(d) for d in ev.devices if d.start])
    assert windows
    ours: Counter = Counter()
    for d in ev.devices:
        for start, program, op in zip(d.start, d.program_id, d.hlo_op):
            if program == best and op and any(a <= start < b for _n, a, b in windows):
                ours[op] += 1
    theirs = Counter({r["hlo_op_name"]: int(r["occurrences"]) for r in rows if int(r["program_id"]) == best})
    assert ours == theirs and sum(theirs.values()) > 0


def test_tpu_steps_line_makes_the_steps(tmp_path):
    """A TPU profile with a ``Steps`` line (the derived-lines builder: TensorCore 1 has
    one, of 3 steps of 1.5 ms): those are the steps, on every core; the copy-start /
    copy-done ops are memory copies, the fusions fusions (categories from each op's HLO
    text when it has no hlo_category stat)."""
    from profscope.testing.derived_xplane import tpu_derived

    session = tmp_path / "logdir" / "tpu" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "tpu-host.xplane.pb").write_bytes(tpu_derived())
    c = _client(tmp_path / "logdir", tmp_path / "cache")
    body = c.get("/api/steps_ops", params={"run": "tpu/s1"}).json()
    assert body["summary"]["step_source"] == "xprof_steps" and body["summary"]["hardware"] == "TPU"
    assert [(s["step"], s["step_time_us"]) for s in body["steps"]] == [("0", 1500.0), ("1", 1500.0), ("2", 1500.0)]
    for s in body["steps"]:
        assert [d["device"] for d in s["devices"]] == [10, 11]
        for d in s["devices"]:
            # per step: copy-start x3, copy-done x2 of 5 us; fusion.1 twice 100 us; add.2 50 us
            assert d["time_us"]["memory"] == 25.0 and d["time_us"]["fusion"] == 200.0
            assert d["time_us"]["other"] == 50.0 and d["idle_us"] == 1225.0
    overview = c.get("/data/plugin/profile/data", params={"run": "tpu/s1", "tag": "overview_page",
                                                           "host": "tpu-host"}).json()
    assert overview[1]["p"]["hardware_type"] == "TPU" and overview[6]["rows"] == []  # steps: no warning


def test_kernels_of_no_xla_op_take_their_tensorflow_op_type():
    """A GPU kernel of no XLA op (TensorFlow without XLA): its category comes from its
    TensorFlow op (the builder's kernels with a ``tf_op`` stat ``a/b/MatMul:MatMul`` are
    matmul, its ``jit(f)/.../add:`` ones other); the tf_gpu fixture's kernels are
    Cast/Mul/RandomUniform/GreaterEqual ops: other."""
    import io
    from collections import Counter

    from profscope.formats import xplane_step_events
    from profscope.testing.derived_xplane import random_gpu
    from profscope.tools import xplane_step_breakdown as xb

    ev = xplane_step_events.read_step_events(io.BytesIO(random_gpu(seed=3, n=600)), "random_gpu")
    seen = Counter()
    for d in ev.devices:
        for o, h, n, m in zip(d.opcode, d.hlo_category, d.name, d.memcpy):
            if h:
                seen[(h, xb.category_of(o, h, n, m))] += 1
    assert seen[("tf:MatMul", "matmul")] > 0
    assert all(cat == ("matmul" if h == "tf:MatMul" else "other") for h, cat in seen)


def test_kernels_of_no_op_at_all_by_their_name():
    """A kernel with neither an XLA op nor a TensorFlow op: cuBLAS/cuDNN/CUTLASS GEMM and
    convolution kernels by name are matmul; Eigen's TensorConversionOp (a cast, whose name
    holds "Conv") and the rest are other."""
    from profscope.tools import xplane_step_breakdown as xb

    assert xb.category_of("", "", "volta_sgemm_128x64_nn", "") == "matmul"
    assert xb.category_of("", "", "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6>", "") == "matmul"
    assert xb.category_of("", "", "implicit_convolve_sgemm", "") == "matmul"
    assert xb.category_of("", "", "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<"
                          "Eigen::TensorMap<Eigen::Tensor<float, 1, 1, long>>, Eigen::TensorConversionOp<float, "
                          "Eigen::TensorMap<Eigen::Tensor<int const, 1, 1, long>> const> const> const, "
                          "Eigen::GpuDevice>, long>(...)", "") == "other"
    assert xb.category_of("", "", "convert_element_type_kernel", "") == "other"


def test_origin_is_the_device_planes_first_event(shared_fixtures):
    """start_us counts from origin_ps: the earliest event of any line of the device planes
    (on the TPU profile a line other than XLA Ops starts first), as the ops table places
    the steps on the trace index's clock by its device tracks' first event."""
    from profscope.formats import xplane
    from profscope.tools import xplane_step_breakdown as xb

    path = _path(shared_fixtures, INDEX["tpu_inference"])
    with open(path, "rb") as f:
        index = xplane.scan(f, str(path))
        firsts = []
        for ref in index.planes:
            if ref.name.startswith("/device:TPU:") and ref.name[len("/device:TPU:"):].isdigit():
                plane = xplane.read_plane(f, ref, str(path))
                names = {k: v.name for k, v in plane.stat_metadata.items()}
                for line in plane.lines:
                    for ev in line.events:
                        st = {names.get(s.metadata_id): xplane.stat_value(s, names) for s in ev.stats}
                        off = st.get("device_offset_ps")
                        firsts.append(off if isinstance(off, int) else line.timestamp_ns * 1000 + ev.offset_ps)
    ev = _read(path)
    out = xb.breakdown(ev, ev.program_names)
    assert out["origin_ps"] == min(firsts) < min(min(d.start) for d in ev.devices if d.start)
