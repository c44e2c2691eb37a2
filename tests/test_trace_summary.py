"""/api/trace/summary: every slice name in a time range (occurrences, wall, self time),
on built traces (nested slices), a real PyTorch CUDA trace (totals from the raw JSON) and
bad parameters."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict

import pytest

RESNET = "public_profiles/traces/kineto_resnet50_v100.pt.trace.json.gz"  # in the shared fixtures


def overlap_counts(doc: dict, origin_us: float, a_ms: float, b_ms: float) -> dict[str, int]:
    """Complete ("X") events of a Chrome trace overlapping [a_ms, b_ms) (ms from origin_us), by name:
    the reference a range summary's occurrences are checked against."""
    out = defaultdict(int)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            st = (e["ts"] - origin_us) / 1000
            if st < b_ms and st + e.get("dur", 0) / 1000 > a_ms:
                out[e["name"]] += 1
    return out


def _summary(client, run, **params):
    r = client.get("/api/trace/summary", params={"run": run, **params})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def nested(make_client, tmp_path):
    # one thread: outer [0, 100) µs holds a [10, 30) and b [40, 90), b holds c [50, 60);
    # another thread: a [0, 5); a crossing slice on a third thread is no child
    ev = [{"ph": "X", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
          {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 40, "dur": 50},
          {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 50, "dur": 10},
          {"ph": "X", "name": "a", "pid": 1, "tid": 2, "ts": 0, "dur": 5},
          {"ph": "X", "name": "p", "pid": 1, "tid": 3, "ts": 0, "dur": 50},
          {"ph": "X", "name": "q", "pid": 1, "tid": 3, "ts": 40, "dur": 30}]  # crosses p's end
    root = tmp_path / "logs"
    root.mkdir()
    (root / "n.trace.json").write_text(json.dumps({"traceEvents": ev}))
    return make_client(root), "n.trace.json"


def test_self_time_of_nested_slices(nested):
    client, run = nested
    s = _summary(client, run)
    by = {r["name"]: r for r in s["rows"]}
    assert by["outer"]["count"] == 1 and by["outer"]["wallMs"] == pytest.approx(0.1)
    assert by["outer"]["selfMs"] == pytest.approx(0.1 - 0.02 - 0.05)  # minus a and b, not c
    assert by["b"]["selfMs"] == pytest.approx(0.04)  # minus c
    assert by["a"]["count"] == 2 and by["a"]["wallMs"] == pytest.approx(0.025)
    assert by["a"]["avgMs"] == pytest.approx(0.0125) and by["a"]["maxMs"] == pytest.approx(0.02)
    assert by["p"]["selfMs"] == pytest.approx(0.05)  # q sticks out of p: not its child
    assert s["slices"] == 7
    assert [r["name"] for r in s["rows"]][0] == "outer"  # by wall time, longest first


def test_a_range_clips_wall_and_self_time(nested):
    client, run = nested
    s = _summary(client, run, start_ms=0.045, end_ms=0.055)
    by = {r["name"]: r for r in s["rows"]}
    assert s["window"] == pytest.approx([0.045, 0.055]) and s["durationMs"] == pytest.approx(0.01)
    assert set(by) == {"outer", "b", "c", "p", "q"}
    assert by["outer"]["wallMs"] == pytest.approx(0.01) and by["outer"]["selfMs"] == pytest.approx(0)
    assert by["b"]["wallMs"] == pytest.approx(0.01) and by["b"]["selfMs"] == pytest.approx(0.005)
    assert by["c"]["wallMs"] == pytest.approx(0.005)
    assert by["p"]["wallMs"] == pytest.approx(0.005)


def test_real_cuda_trace_totals_match_the_raw_json(make_client, tmp_path, shared_fixtures):
    resnet = shared_fixtures / RESNET
    root = tmp_path / "logs"
    root.mkdir()
    shutil.copy(resnet, root / resnet.name)
    client = make_client(root)
    run = resnet.name
    doc = json.loads(gzip.decompress(resnet.read_bytes()))
    want = defaultdict(lambda: [0, 0.0])
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            want[e["name"]][0] += 1
            want[e["name"]][1] += e.get("dur", 0) / 1000
    s = _summary(client, run)
    got = _both_sides(s["rows"])
    assert s["slices"] >= sum(c for c, _ in want.values()) > 10000
    kernels = [n for n in want if "volta" in n or "Kernel" in n]
    assert kernels
    for name, (count, total) in want.items():
        assert got[name]["count"] == count, name
        assert got[name]["wallMs"] == pytest.approx(total, rel=1e-6, abs=1e-6), name
        assert got[name]["selfMs"] <= got[name]["wallMs"] + 1e-9
    # a sub-range: counts are those overlapping it
    w = client.get("/api/trace/window", params={"run": run, "resolution": 1000}).json()
    t0, t1 = w["fullTimespan"]
    a, b = t0 + (t1 - t0) * 0.4, t0 + (t1 - t0) * 0.5
    origin_us = w["originNs"] / 1000
    part = overlap_counts(doc, origin_us, a, b)
    sub = {n: r["count"] for n, r in _both_sides(_summary(client, run, start_ms=a, end_ms=b)["rows"]).items()}
    assert part and all(abs(sub.get(n, 0) - c) <= 1 for n, c in part.items())  # µs rounding at the edges


def _both_sides(rows: list[dict]) -> dict[str, dict]:
    """A name's rows on the devices' and the host's tracks, added up."""
    out: dict[str, dict] = {}
    for r in rows:
        o = out.setdefault(r["name"], {"count": 0, "wallMs": 0.0, "selfMs": 0.0})
        for k in o:
            o[k] += r[k]
    return out


def test_device_and_host_rows_of_a_cuda_trace(make_client, tmp_path, shared_fixtures):
    """A name has one row per side: the V100 trace's kernels and copies are on the device's
    tracks, its cpu_ops and ProfilerStep#N on the host's. The reference is the raw JSON: a
    (pid, tid) is a device track when its events carry args.device and args.stream."""
    resnet = shared_fixtures / RESNET
    root = tmp_path / "logs"
    root.mkdir()
    shutil.copy(resnet, root / resnet.name)
    doc = json.loads(gzip.decompress(resnet.read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    dev_tracks = {(e["pid"], e["tid"]) for e in xs if "device" in e.get("args", {}) and "stream" in e.get("args", {})}
    want = defaultdict(int)
    for e in xs:
        want[(e["name"], (e["pid"], e["tid"]) in dev_tracks)] += 1
    rows = _summary(make_client(root), resnet.name)["rows"]
    got = {(r["name"], r["device"]): r["count"] for r in rows}
    # (kineto's instant "Iteration Start" marker is a slice of the index, not an "X" event)
    assert {k: v for k, v in got.items() if k[0] in {n for n, _ in want}} == dict(want)
    assert len(rows) == len(got)  # one row per (name, side)
    kernels = {n for n, d in got if d and n.startswith("volta_")}
    assert kernels and not any((n, False) in got for n in kernels)
    assert ("aten::conv2d", False) in got and ("aten::conv2d", True) not in got
    assert ("ProfilerStep#5", False) in got
    # host frames outrank kernels by wall time, which is why the page can show one side
    assert rows[0]["device"] is False and any(r["device"] for r in rows)


def test_device_rows_of_an_xplane(make_client, tmp_path, shared_fixtures):
    """An xplane's device rows are those of its /device:GPU:N plane (the MI300 GEMM's
    kernels, XLA ops and modules), the host's those of /host:CPU."""
    src = next((shared_fixtures / "public_profiles/xplane/mi300_jax08_gemm").rglob("*.xplane.pb"))
    run_dir = tmp_path / "logs" / "plugins" / "profile" / "r"
    run_dir.mkdir(parents=True)
    shutil.copy(src, run_dir / src.name)
    client = make_client(tmp_path / "logs")
    run = client.get("/api/runs").json()["runs"][0]["name"]
    rows = _summary(client, run)["rows"]
    dev = {r["name"] for r in rows if r["device"]}
    host = {r["name"] for r in rows if not r["device"]}
    kernels = {n for n in dev if n.startswith("Cijk_")}  # rocBLAS GEMM kernels, on the GPU's stream lines
    assert kernels and not kernels & host
    assert "custom-call.1" in dev and any(n.startswith("jit_dot(") for n in dev)  # XLA Ops, XLA Modules lines
    # the host's threads run the same op as a thunk (a row of its own), and the Python frames
    assert "custom-call.1" in host and any(n.startswith("$") for n in host) and not any(n.startswith("$") for n in dev)


def test_bad_parameters_are_4xx_json(nested):
    client, run = nested
    for params, code in (({"start_ms": "x"}, 400), ({"start_ms": 5, "end_ms": 1}, 400),
                         ({"run": "nope"}, 404), ({"host": "nope"}, 404), ({"end_ms": "nan"}, 400)):
        r = client.get("/api/trace/summary", params={"run": run, **params})
        assert r.status_code == code, (params, r.text)
        assert r.headers["content-type"].startswith("application/json") and r.json()


def test_self_time_on_the_demo_torch_trace(demo_client):
    """Python stack frames whose ends are equal in the trace (µs floats near 5e12: ends a
    ps apart once in ps) still nest: the outer frames have no self time left."""
    s = _summary(demo_client, "torch/leak.pt.trace.json.gz")
    by = {r["name"]: r for r in s["rows"]}
    for frame in ("make_torch_traces.py(294): <module>", "make_torch_traces.py(260): main",
                  "make_torch_traces.py(152): _child"):
        assert by[frame]["selfMs"] < 0.01 * by[frame]["wallMs"], frame
    assert by["make_torch_traces.py(133): _leak"]["selfMs"] < 0.5 * by["make_torch_traces.py(133): _leak"]["wallMs"]
    assert all(0 <= r["selfMs"] <= r["wallMs"] + 1e-9 for r in s["rows"])


def test_crossing_children_are_subtracted_once(make_client, tmp_path):
    # P [0, 100) holds x [10, 50) and y [40, 70), y crossing x (stacked below it): P's
    # children cover 10..70, 60 µs, not 40 + 30
    ev = [{"ph": "X", "name": "P", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          {"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 10, "dur": 40},
          {"ph": "X", "name": "y", "pid": 1, "tid": 1, "ts": 40, "dur": 30}]
    root = tmp_path / "logs"
    root.mkdir()
    (root / "x.trace.json").write_text(json.dumps({"traceEvents": ev}))
    by = {r["name"]: r for r in _summary(make_client(root), "x.trace.json")["rows"]}
    assert by["P"]["selfMs"] == pytest.approx(0.04)
    assert by["x"]["selfMs"] == pytest.approx(0.04) and by["y"]["selfMs"] == pytest.approx(0.03)
