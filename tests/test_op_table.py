"""The ranked ops table of Steps & ops (tools/op_table.py, ``ops[]`` of ``/api/steps_ops``)
on the real profiles of ``shared/fixtures/public_profiles``:

* HLO rows: occurrences and times equal XProf 2.24.2's own ``hlo_stats`` (goldens recorded
  by scripts/record_xprof_op_golden.py in tests/golden/op_stats/), per (program, op);
* every row's slowest occurrence is an event of that name and duration in the trace
  viewer's index (the page's link opens it);
* a TPU op's FLOPs and bytes come from its metadata, its roofline from the device plane's
  peaks; a GPU xplane carries neither, so both are null;
* PyTorch: kernel rows equal the step breakdown's kernel table; a framework op's device
  time equals the kernels launched inside it, found here from the raw trace through
  kineto's ``correlation`` ids (the table uses the index's flows);
* ``within_steps`` / ``step`` choose the occurrences; bad input is a 4xx naming the file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profscope.tools import op_table

GOLDEN = Path(__file__).parent / "golden" / "op_stats"
INDEX = json.loads((GOLDEN / "index.json").read_text())
XPLANE_CASES = sorted(k for k, v in INDEX.items() if not k.startswith("_") and v["fixture"] and v["hlo_stats_rows"])


@pytest.fixture(scope="module")
def client(shared_fixtures, tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(shared_fixtures / "public_profiles"), listing_ttl=0),
                   DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws), raise_server_exceptions=False)


def _ops(client, run: str, **params) -> dict:
    r = client.get("/api/steps_ops", params={"run": run, **params})
    assert r.status_code == 200, r.text
    return r.json()


def _golden_rows(case: str) -> list[dict]:
    body = json.loads(gzip.decompress((GOLDEN / INDEX[case]["hlo_stats"]).read_bytes()))
    ids = [c["id"] for c in body["cols"]]
    return [dict(zip(ids, [cell.get("v") for cell in row["c"]])) for row in body["rows"]]


@pytest.mark.parametrize("case", XPLANE_CASES)
def test_hlo_rows_equal_xprof_hlo_stats(client, case):
    """One HLO row per op of XProf's hlo_stats, with its occurrences exactly and its total
    and self time to the ns (µs, 3 decimals); each row's slowest occurrence is an event
    of that op's name on the device's XLA Ops line, no longer than the op's total."""
    entry = INDEX[case]
    body = _ops(client, f"xplane/{entry['run']}", host=entry["host"])
    ours = {(r["program_id"], r["name"]): r for r in body["ops"] if r["kind"] == "hlo"}
    theirs = _golden_rows(case)
    assert len(theirs) == entry["hlo_stats_rows"] and set(ours) == {(t["program_id"], t["hlo_op_name"]) for t in theirs}
    for t in theirs:
        o = ours[(t["program_id"], t["hlo_op_name"])]
        assert o["occurrences"] == t["occurrences"], (o["name"], o["occurrences"], t["occurrences"])
        assert o["total_us"] == pytest.approx(t["total_time"], abs=6e-4)
        assert o["self_us"] == pytest.approx(t["total_self_time"], abs=6e-4)
        assert o["category"] == t["category"]
        assert o["module"].endswith(f"({t['program_id']})")
        slow = o["slowest"]
        assert slow is not None and slow["track"].startswith("XLA Ops"), o
        ev = client.get("/api/trace/event", params={"run": f"xplane/{entry['run']}", "host": entry["host"],
                                                     "id": slow["event_id"]})
        assert ev.status_code == 200, ev.text
        assert ev.json()["name"] == o["name"]
        assert slow["device"] in o["devices"] and all(d.startswith("/device:") for d in o["devices"])
    assert body["ops_scope"]["hlo"] == "profile"
    # each HLO op also in the step chart's categories, as the breakdown files XLA's
    keys = {c["key"] for c in body["categories"]}
    for o in ours.values():
        assert o["step_category"] in keys
        want = {"copy-done": "memory", "copy-start": "memory", "custom-call": "custom_call", "all-reduce": "collective",
                "loop fusion": "fusion", "convolution": "matmul"}.get(o["category"])
        assert want is None or o["step_category"] == want, (o["name"], o["category"], o["step_category"])


def test_tpu_roofline_from_the_profile(client):
    """The TPU profile's op metadata carries XLA's cost analysis (flops, bytes_accessed per
    occurrence) and its device plane the peaks: the rows that have both are placed on the
    roofline against the ridge point; the MI300 GEMM (GPU) carries no FLOPs: null."""
    tpu = _ops(client, "xplane/tpu_inference/2025_12_10_tpu")
    placed = [r for r in tpu["ops"] if r["roofline"]]
    assert placed, "the TPU profile's fusions carry flops and bytes_accessed"
    for r in placed:
        assert r["flops"] > 0 and r["bytes_accessed"] > 0
        assert r["roofline"]["intensity"] == pytest.approx(r["flops"] / r["bytes_accessed"], rel=1e-6)
        assert r["roofline"]["bound"] == ("compute" if r["roofline"]["intensity"] >= r["roofline"]["ridge"] else "memory")
    ridge = placed[0]["roofline"]["ridge"]
    assert all(r["roofline"]["ridge"] == ridge for r in placed) and ridge > 1  # FLOP/s over bytes/s of one chip
    gpu = _ops(client, "xplane/mi300_jax08_gemm/jax08_gemm")
    assert all(r["flops"] is None and r["roofline"] is None for r in gpu["ops"])
    assert {"hlo", "kernel", "framework"} <= {r["kind"] for r in gpu["ops"]}


def test_roofline_needs_all_four():
    assert op_table.roofline(10, 5, 100.0, 10.0) == {"intensity": 2.0, "ridge": 10.0, "bound": "memory"}
    assert op_table.roofline(1000, 5, 100.0, 10.0)["bound"] == "compute"
    assert op_table.roofline(None, 5, 100.0, 10.0) is None and op_table.roofline(10, 5, None, 10.0) is None


def test_tf_gpu_kernels_and_framework_ops(client):
    """The TF GPU profile has no HLO op (XProf's hlo_stats is empty there) but its GPUs'
    streams and TensorFlow Ops lines: those rows, ranked, with their slowest occurrence."""
    body = _ops(client, "xplane/tf_gpu/GPU-multi-worker", host="34.83.195.180_6003")
    kinds = {r["kind"] for r in body["ops"]}
    assert kinds == {"kernel", "framework"}
    totals = [r["total_us"] for r in body["ops"]]
    assert totals == sorted(totals, reverse=True)
    for r in body["ops"][:5]:
        assert r["slowest"]["device"].startswith("/device:GPU:") and r["slowest"]["dur_us"] <= r["total_us"]


def _raw_trace(shared_fixtures, name: str) -> list[dict]:
    path = shared_fixtures / "public_profiles" / "traces" / name
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_pytorch_rows(client, shared_fixtures):
    """V100 ResNet-50: kernel rows are the step breakdown's kernel table; a framework op's
    device time is the kernels launched inside its occurrences, computed here from the raw
    trace by kineto's correlation ids; the slowest occurrence is the longest slice."""
    run = "traces/kineto_resnet50_v100.pt.trace.json.gz"
    body = _ops(client, run)
    assert body["ops_scope"] == {"kernel": "steps", "framework": "steps"}
    kernels = {r["name"]: r for r in body["ops"] if r["kind"] == "kernel"}
    assert {k["name"]: (k["occurrences"], k["total_us"]) for k in body["kernels"]} == \
        {n: (r["occurrences"], r["total_us"]) for n, r in kernels.items()}

    events = [e for e in _raw_trace(shared_fixtures, "kineto_resnet50_v100.pt.trace.json.gz") if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#")
             and "stream" not in e.get("args", {})]
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("args", {}).get("cbid") is not None and "correlation" in e["args"]}
    kern = [e for e in events if "device" in e.get("args", {}) and "stream" in e["args"]
            and e["args"].get("correlation", -1) in launch]
    name = "aten::cudnn_convolution_backward_weight"
    ops = [e for e in events if e["name"] == name and any(s <= e["ts"] < t for s, t in steps)]
    want = 0.0
    for k in kern:
        lc = launch[k["args"]["correlation"]]
        if any(s <= lc["ts"] < t for s, t in steps) and any(
                o["tid"] == lc["tid"] and o["ts"] <= lc["ts"] < o["ts"] + o["dur"] for o in ops):
            want += k["dur"]
    row = next(r for r in body["ops"] if r["kind"] == "framework" and r["name"] == name)
    assert row["occurrences"] == len(ops) and want > 0
    assert row["total_us"] == pytest.approx(want, abs=1e-3)
    assert row["slowest"]["dur_us"] == max(o["dur"] for o in ops)
    parent = next(r for r in body["ops"] if r["kind"] == "framework" and r["name"] == "aten::cudnn_convolution_backward")
    assert parent["self_us"] == 0 and parent["total_us"] >= row["total_us"]  # its kernels are its children's


def test_within_steps_and_one_step(client):
    """Without steps every occurrence counts; one step's rows are that step's kernels."""
    run = "traces/kineto_resnet50_v100.pt.trace.json.gz"
    steps = _ops(client, run)
    whole = _ops(client, run, within_steps="0")
    assert whole["ops_scope"]["kernel"] == "trace"
    kern = lambda b, kind="kernel": {r["name"]: r["occurrences"] for r in b["ops"] if r["kind"] == kind}  # noqa: E731
    # every kernel of this trace is launched in a step; 18 framework ops run outside them
    assert sum(kern(whole, "framework").values()) > sum(kern(steps, "framework").values())
    assert all(kern(whole, "framework")[n] >= c for n, c in kern(steps, "framework").items())
    assert all(kern(whole)[n] >= c for n, c in kern(steps).items())
    first = steps["steps"][0]
    one = _ops(client, run, step=first["step"])
    assert one["ops_scope"]["kernel"] == "step"
    assert sum(kern(one).values()) == sum(d["kernels"] for d in first["devices"])


def test_bad_input_names_the_file(client):
    r = client.get("/api/steps_ops", params={"run": "xplane/tpu_inference_corrupt/2025_12_15_tpu"})
    assert 400 <= r.status_code < 500 and r.json()["file"].endswith(".xplane.pb"), r.text
    r = client.get("/api/steps_ops", params={"run": "traces/kineto_resnet50_v100.pt.trace.json.gz", "within_steps": "maybe"})
    assert r.status_code == 400 or r.status_code == 422, r.text


def test_steps_ops_is_a_tool_of_profiles_and_traces(client):
    """The dashboard's tool row: listed for a profile run and a Chrome trace run, answered
    by the data route as /api/steps_ops answers."""
    for run in ("xplane/mi300_jax08_gemm/jax08_gemm", "traces/kineto_resnet50_v100.pt.trace.json.gz"):
        tools = [t["name"] for t in client.get("/api/run", params={"run": run}).json()["tools"]]
        assert "steps_ops" in tools, tools
    r = client.get("/data/plugin/profile/data", params={"run": "traces/kineto_resnet50_v100.pt.trace.json.gz", "tag": "steps_ops"})
    assert r.status_code == 200 and r.json()["ops"] == _ops(client, "traces/kineto_resnet50_v100.pt.trace.json.gz")["ops"]


def test_data_route_takes_all_hosts(client):
    """The page asks the data route for host=ALL_HOSTS (XProf's name): it reaches the tool,
    which answers every host's step times (a host the run lacks is still a 404)."""
    params = {"run": "xplane/tf_gpu/GPU-multi-worker", "tag": "steps_ops"}
    r = client.get("/data/plugin/profile/data", params={**params, "host": "ALL_HOSTS"})
    assert r.status_code == 200, r.text
    assert [h["host"] for h in r.json()["hosts"]] == ["34.83.195.179_6003", "34.83.195.180_6003"]
    r = client.get("/data/plugin/profile/data", params={**params, "host": "nohost"})
    assert r.status_code == 404 and "nohost" in r.json()["error"]
    r = client.get("/data/plugin/profile/data", params={**params, "tag": "hlo_stats", "host": "ALL_HOSTS"})
    assert r.status_code == 404  # only the tools that answer every host take it


def _index(client, run: str, host: str | None = None):
    """The trace index the answer was made from (the server's own workspace)."""
    from profscope.app.queries import TraceQuery

    ws = client.app.state.workspace if hasattr(client.app.state, "workspace") else None
    assert ws is not None, "the test client's app keeps its workspace"
    r = ws.run(run)
    name, info, _pos = ws._trace_hosts(r, TraceQuery(host=host))[0]
    return ws.trace_index(r, name, info)


def test_xplane_step_windows_are_the_breakdowns(client):
    """An xplane's steps (the breakdown's, timed from the earliest device event) placed on
    the trace index's clock: on the TF GPU profile, step 0 is the index's own longest
    ``Steps`` event, to the ns, and step=0's kernel rows count exactly the stream events
    that start in it; the MI300 GEMM's one step (a module run) holds its custom-call's
    XLA Ops event, whose program the row's ``in_step`` names."""
    import numpy as np

    run = "xplane/tf_gpu/GPU-multi-worker"
    ix = _index(client, run, "34.83.195.179_6003")
    name, start, dur = max(ix.meta["steps"], key=lambda s: s[2])
    one = _ops(client, run, host="34.83.195.179_6003", step=str(name))
    step = next(s for s in one["steps"] if s["step"] == str(name))
    assert round(step["step_time_us"] * 1e6) == dur
    # the window the table keeps is the step's span on the index's clock, to the ps
    # (trace_window_ps; a TPU core's device clock is read back the same way)
    from profscope.tools import op_table

    assert op_table._step_windows(ix, None, str(name), one["steps"]) == [(start, dur)]
    tracks = [t for t, tr in enumerate(ix.tracks) if tr["name"].startswith("Stream #")]
    col = np.asarray(ix.cols["start"])
    inside = np.isin(np.asarray(ix.cols["track"]), tracks) & (col >= start) & (col < start + dur)
    assert sum(r["occurrences"] for r in one["ops"] if r["kind"] == "kernel") == int(inside.sum()) > 0
    assert one["ops_scope"] == {"hlo": "profile", "kernel": "step", "framework": "step"}

    gemm = _ops(client, "xplane/mi300_jax08_gemm/jax08_gemm", step="0")
    hlo = [r for r in gemm["ops"] if r["kind"] == "hlo"]
    assert all(r["in_step"] is not None for r in hlo)
    ran = [r for r in hlo if r["in_step"]["events"]]
    # the step is one run of program 49 (jit_dot), which is one custom-call.1 spanning it
    assert gemm["summary"]["step_source"] == "module_runs"
    assert [(r["name"], r["program_id"], r["in_step"]["events"]) for r in ran] == \
        [("custom-call.1", str(gemm["summary"]["program_id"]), 1)]
    assert ran[0]["in_step"]["total_us"] == gemm["steps"][0]["step_time_us"]


@pytest.mark.parametrize("run, kind", [("traces/kineto_resnet50_v100.pt.trace.json.gz", "kernel"),
                                       ("traces/tracelens_b200_eager.trace.json.gz", "kernel"),
                                       ("xplane/tf_gpu/GPU-multi-worker", "kernel"),
                                       ("xplane/mi300_jax08_gemm/jax08_gemm", "hlo"),
                                       ("xplane/tpu_inference/2025_12_10_tpu", "hlo")])
def test_device_rows_shares_add_up_to_at_most_the_device_time(client, run, kind):
    """The page's default rows (a device's own: HLO ops where the xplane has them, else
    kernels) are shares of one device time, said in ``share_of``: together at most 1."""
    body = _ops(client, run)
    rows = [r for r in body["ops"] if r["kind"] == kind]
    assert rows and 0 < sum(r["share"] for r in rows) <= 1
    assert body["share_of"][kind]


def test_two_gpus_kernel_shares_are_of_both_gpus_time(tmp_path):
    """A PyTorch trace driving two GPUs (the builder's straggler run): the kernels' shares
    are of the steps' time on both GPUs, so they add up to at most 1 (of one GPU's time
    they came to 1.33)."""
    from profscope.formats import chrome_trace
    from profscope.testing import kineto_trace
    from profscope.tools import trace_index as ti

    path = kineto_trace.straggler(tmp_path / "two.pt.trace.json.gz", steps=3, slow_device=1)
    with open(path, "rb") as f:
        ev = chrome_trace.trace_columns(f, str(path))
    (tmp_path / "ix").mkdir()
    ti.build_index(ev, tmp_path / "ix")
    ix = ti.TraceIndex(tmp_path / "ix")
    body = op_table.chrome_trace_ops(ix, "host")
    (kernel,) = [r for r in body["ops"] if r["kind"] == "kernel"]
    assert kernel["devices"] == ["GPU 0", "GPU 1"]
    from profscope.tools import step_breakdown as sb

    steps = sb.host_steps(ix, sb.device_kernels(ix))
    assert len(steps) == 3
    assert kernel["share"] == pytest.approx(kernel["total_us"] * 1e6 / (2 * sum(d for _n, _s, d in steps)), abs=1e-6)
    assert kernel["share"] <= 1
    assert body["share_of"]["kernel"] == "the steps' device time (3 steps × 2 GPUs)"


def test_rows_in_windows_equal_a_pass_per_window(shared_fixtures):
    """``_in_windows`` (the windows' union cut into disjoint pieces, one search per row)
    against its definition, a pass over the rows per window, on the TF CPU fixture's 5
    steps and its 5,293 host events' begins, with those windows shifted to overlap,
    made adjacent and made empty, and the events' begins and ends at their edges."""
    import numpy as np

    from profscope.formats import xplane, xplane_wire as xw
    from profscope.formats import xplane_step_events as xse

    path = shared_fixtures / "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb"
    with open(path, "rb") as f:
        steps = xse.read_step_events(f, str(path)).steps
        f.seek(0)
        ref = xplane.scan(f, str(path)).plane(xse.HOST_PLANE)
        ff, size = xplane.open_stream(f, str(path))
        data = xw.read_plane_bytes(ff, size, ref, pad=xw.PAD + (-ref.length) % 8)
    meta_bytes, spans = xw.split_plane(data, ref.length)
    headers, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, {})
    begin = np.array([h.timestamp_ns for h in headers], np.int64)[ev.line] * 1000 + ev.offset_ps
    assert len(steps) == 5 and ev.n > 5000
    base = [(s["begin_ps"], s["duration_ps"]) for s in steps]
    cases = [base, base + [(b + d // 2, d) for b, d in base], base + [(b + d, d) for b, d in base],
             base + [(b, 0) for b, _d in base], base[::-1] + [(b - 5, -3) for b, _d in base], []]
    for windows in cases:
        edges = np.r_[[b for b, _ in windows], [b + d for b, d in windows], [b - 1 for b, _ in windows]]
        for start in (begin, begin + ev.duration_ps, np.asarray(edges, np.int64)):
            want = np.zeros(len(start), bool)
            for s, d in windows:
                want |= (start >= s) & (start < s + d)
            assert np.array_equal(op_table._in_windows(start, windows), want)
    assert op_table._in_windows(begin, base).sum() > 1000  # the steps hold events
