"""The trace viewer's API on real traces and built ones: windows, details, search, export,
several hosts, bad input. (XProf parity on the demo profiles: test_trace_golden.py.)"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from profscope.formats import chrome_trace
from profscope.testing import timelines as tvb

DEMO = Path(__file__).parents[1] / "src" / "profscope" / "demo" / "logdir"
TORCH = sorted((DEMO / "torch").glob("*.pt.trace.json.gz"))
MLP = next(DEMO.glob("mlp/plugins/profile/*/demo-host.xplane.pb"))
MLP_RUN = f"mlp/{MLP.parent.name}"


def _window(client, run, **params):
    r = client.get("/api/trace/window", params={"run": run, **params})
    assert r.status_code == 200, r.text
    return r.json()


def _slices(w):
    s = w["slices"]
    return [{"id": s["id"][i], "track": s["track"][i], "start": s["start"][i], "dur": s["dur"][i],
             "depth": s["depth"][i], "name": w["names"][s["name"][i]]} for i in range(len(s["id"]))]


# -- real torch traces --------------------------------------------------------------------


@pytest.mark.parametrize("trace", TORCH, ids=lambda p: p.name)
def test_every_x_event_of_a_torch_trace_is_served(demo_client, trace):
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    want = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            want[(e["name"], chrome_trace._int_id(e["pid"]), chrome_trace._int_id(e["tid"]))].append((e["ts"], e.get("dur", 0)))
    assert sum(map(len, want.values())) > 1000
    r = demo_client.get("/data/plugin/profile/data", params={"run": f"torch/{trace.name}", "tag": "trace_viewer@",
                                                              "resolution": 0})
    assert r.status_code == 200, r.text
    got = defaultdict(list)
    for e in r.json()["traceEvents"]:
        if e["ph"] == "X":
            got[(e["name"], e["pid"], e["tid"])].append((e["ts"], e["dur"]))
    for key, events in want.items():
        mine = sorted(got.get(key, []))
        assert len(mine) >= len(events), key
        ts = np.array(sorted(events))
        # every X event: same thread, name, start and duration (µs; ns precision)
        m = np.array(mine)
        for t, d in ts:
            i = np.searchsorted(m[:, 0], t - 1e-3)
            assert i < len(m) and abs(m[i, 0] - t) < 1e-3 and any(abs(m[j, 1] - d) < 1e-3 for j in range(i, min(i + 50, len(m))) if abs(m[j, 0] - t) < 1e-3), (key, t, d)


@pytest.mark.parametrize("trace", TORCH, ids=lambda p: p.name)
def test_every_flow_of_a_torch_trace_is_an_arrow(demo_client, trace):
    """torch's fwdbwd flows (``s`` at a forward op, ``f`` at its backward op, joined by
    cat and id) come back as arrows between the threads and times they mark."""
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    events = doc["traceEvents"]
    base = min(e["ts"] for e in events if e.get("ph") != "M" and "ts" in e)
    starts = {(e["cat"], e["id"]): e for e in events if e.get("ph") == "s"}
    want = sorted((round(starts[(e["cat"], e["id"])]["ts"] - base, 3), round(e["ts"] - base, 3))
                  for e in events if e.get("ph") == "f" and (e["cat"], e["id"]) in starts)
    assert len(want) >= 40
    w = _window(demo_client, f"torch/{trace.name}", resolution=4000)
    f = w["flows"]
    got = sorted((round(a * 1000, 3), round(b * 1000, 3)) for a, b in zip(f["from"], f["to"]))
    assert got == want  # µs from the first event, as the window's ms * 1000
    assert {w["names"][i] for i in f["name"]} == {"fwdbwd"} and f["truncated"] == 0
    tracks = {t["id"]: t for t in w["tracks"]}
    assert all(tracks[t]["kind"] == "slices" for t in f["fromTrack"] + f["toTrack"])
    # a window that holds neither end of an arrow, nor is crossed by one, has none
    first = min(f["from"] + f["to"])
    assert _window(demo_client, f"torch/{trace.name}", start_ms=0, end_ms=first * 0.999)["flows"]["from"] == []


def test_torch_trace_window_steps_counters_and_details(demo_client):
    run = "torch/transformer_train.pt.trace.json.gz"
    w = _window(demo_client, run)
    assert w["hosts"] == ["transformer_train.pt.trace.json.gz"]
    assert [s["name"] for s in w["steps"]][:2] == ["1", "2"]  # ProfilerStep#1, #2
    mem = [c for c in w["counters"] if c["name"].startswith("memory allocated")]
    assert mem and mem[0]["unit"] == "bytes" and len(mem[0]["t"]) == len(mem[0]["v"]) > 10
    kinds = {t["kind"] for t in w["tracks"]}
    assert kinds == {"slices", "counter"}
    op = next(s for s in _slices(w) if s["name"].startswith("aten::"))
    d = demo_client.get("/api/trace/event", params={"run": run, "id": op["id"]}).json()
    assert d["name"] == op["name"] and d["start"] == pytest.approx(op["start"]) and "Ev Idx" in d["args"]


# -- real JAX profile: details, search -----------------------------------------------------


def test_details_of_an_xla_op_name_its_module(demo_client):
    found = demo_client.get("/api/trace/search", params={"run": MLP_RUN, "q": "dot.2"}).json()
    assert found["total"] >= 1
    d = demo_client.get("/api/trace/event", params={"run": MLP_RUN, "id": found["matches"][0]["id"]}).json()
    assert d["hloOp"] == "dot.2" and d["hloModule"] == "jit_train_step"
    assert d["module"] in demo_client.get("/api/run", params={"run": MLP_RUN}).json()["modules"]
    assert d["args"]["program_id"] == int(d["module"].split("(")[1].rstrip(")"))
    assert d["track"]["process"] == "demo-host /host:CPU"


def test_search_prefix_first_then_substring_each_in_time_order(demo_client):
    r = demo_client.get("/api/trace/search", params={"run": MLP_RUN, "q": "TRAIN", "limit": 1000}).json()
    names = [m["name"] for m in r["matches"]]
    pre = [m for m in r["matches"] if m["name"].lower().startswith("train")]
    assert pre and names[: len(pre)] == [m["name"] for m in pre]  # prefix matches first
    assert all("train" in n.lower() for n in names) and len(names) > len(pre)
    for group in (r["matches"][: len(pre)], r["matches"][len(pre):]):
        assert [m["start"] for m in group] == sorted(m["start"] for m in group)
    assert r["total"] == len(names)
    # the steps are named as XProf names them
    assert {"train 0", "train 1", "train 2"} <= set(names)
    assert demo_client.get("/api/trace/search", params={"run": MLP_RUN, "q": "train", "limit": 2}).json()["matches"].__len__() == 2


def test_export_reparses_as_chrome_json_with_the_window_events(demo_client):
    w = _window(demo_client, MLP_RUN, start_ms=5, end_ms=9, resolution=100000)
    r = demo_client.get("/api/trace/export", params={"run": MLP_RUN, "start_ms": 5, "end_ms": 9})
    assert r.status_code == 200
    assert "attachment" in r.headers["content-disposition"] and ".json" in r.headers["content-disposition"]
    doc = json.loads(r.content)
    assert doc["displayTimeUnit"] == "ns"
    # the profile's steps travel as slices of a "Steps" thread of their own (read back as
    # steps: test_export_read_back_keeps_the_steps); the other slices are the window's
    steps_thread = {(e["pid"], e["tid"]) for e in doc["traceEvents"]
                    if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "Steps"}
    assert len(steps_thread) == 1
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and (e["pid"], e["tid"]) not in steps_thread]
    assert {e["name"] for e in xs} == {s["name"] for s in _slices(w)}
    assert len(xs) >= w["returnedEventsSize"]  # export applies no resolution filter
    origin_us = w["originNs"] / 1000
    for e in xs:  # only events overlapping the window, ts/dur in µs on the absolute base
        assert e["ts"] - origin_us < 9000 + 1e-3 and e["ts"] + e["dur"] - origin_us > 5000 - 1e-3
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in doc["traceEvents"])
    assert any("hlo_op" in e["args"] for e in xs)
    # the whole trace re-reads with our own streaming reader: its 780 slices and 3 steps
    whole = demo_client.get("/api/trace/export", params={"run": MLP_RUN})
    assert sum(1 for e in chrome_trace.iter_events(whole.content, "export.json") if e.get("ph") == "X") == 780 + 3


def test_export_keeps_the_flows_and_reads_back_the_same(demo_client, tmp_path, make_client):
    run = f"torch/{TORCH[0].name}"
    w = _window(demo_client, run, resolution=4000)
    exported = demo_client.get("/api/trace/export", params={"run": run}).content
    doc = json.loads(exported)
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "s") == len(w["flows"]["from"]) > 0
    # the export is itself a trace: read back, it has the same arrows and slices
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "again.trace.json").write_bytes(exported)
    again = _window(make_client(tmp_path / "logs"), "again.trace.json", resolution=4000)
    key = lambda x: np.array(sorted(zip(x["flows"]["from"], x["flows"]["to"])))
    assert np.allclose(key(again), key(w), rtol=0, atol=1e-5)  # ms, so within 10 ns (µs floats)
    assert again["totalEventsSize"] == w["totalEventsSize"]


def test_a_window_outside_the_trace_is_clamped_to_it(demo_client):
    """/api/trace/window clamps a window to the trace as the page clamps a link's: the part
    inside it, or the whole trace when none of it is (a window past the end answered 0
    slices). ``window`` says what was answered."""
    whole = _window(demo_client, MLP_RUN, resolution=4000)
    end = whole["fullTimespan"][1]
    assert whole["window"] == [0.0, end] and whole["slices"]["id"]
    for s, e in ((end + 10, end + 20), (-20, -10)):
        out = _window(demo_client, MLP_RUN, start_ms=s, end_ms=e, resolution=4000)
        assert out["window"] == whole["window"] and out["slices"] == whole["slices"], (s, e)
    part = _window(demo_client, MLP_RUN, start_ms=end / 2, end_ms=end * 3, resolution=4000)
    inside = _window(demo_client, MLP_RUN, start_ms=end / 2, end_ms=end, resolution=4000)
    assert part["window"] == inside["window"] == [end / 2, end]
    assert part["slices"] == inside["slices"] and part["slices"]["id"]
    left = _window(demo_client, MLP_RUN, start_ms=-end, end_ms=end / 2, resolution=4000)
    assert left["window"] == [0.0, end / 2]


def _demo_run(prefix: str) -> str:
    folder = next(DEMO.glob(f"{prefix}/plugins/profile/*"))
    return f"{prefix}/{folder.name}"


@pytest.mark.parametrize("run", [lambda: _demo_run("transformer"), lambda: _demo_run("tf_bfc"),
                                 lambda: f"torch/{TORCH[0].name}"], ids=["jax_xplane", "tf_xplane", "torch_trace"])
def test_export_read_back_keeps_the_steps(demo_client, make_client, tmp_path, run):
    """A profile's Chrome-trace export, read back as a Chrome trace, has the profile's
    steps again, same names, starts and lengths: an xplane's steps (``step_num`` roots,
    XProf's grouping; no event of their own) travel as ``ProfilerStep#<step>`` slices on a
    "Steps" thread, one more slice each; a torch trace's are its own ProfilerStep slices."""
    run = run()
    w = _window(demo_client, run, resolution=4000)
    assert len(w["steps"]) >= 3
    exported = demo_client.get("/api/trace/export", params={"run": run}).content
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "again.trace.json").write_bytes(exported)
    again = _window(make_client(tmp_path / "logs"), "again.trace.json", resolution=4000)

    def absolute(x):  # ms on the absolute clock: each window counts from its own origin
        return [(st["name"], x["originNs"] / 1e6 + st["start"], st["dur"]) for st in x["steps"]]

    assert [n for n, _, _ in absolute(again)] == [n for n, _, _ in absolute(w)]
    for (_, a0, d0), (_, a1, d1) in zip(absolute(again), absolute(w)):
        assert abs(a0 - a1) < 1e-5 and abs(d0 - d1) < 1e-5  # ms: µs floats in the JSON
    added = 0 if run.startswith("torch/") else len(w["steps"])
    assert again["totalEventsSize"] == w["totalEventsSize"] + added


def test_every_tpu_counter_series_is_a_row(make_client, tmp_path):
    """A TPU profile's ``_counters_`` series (``allocator_xplane.tpu_counters``: nine
    ``% util`` series on TPU:0, two on TPU:1; pids 1011, 1012 as XProf numbers them) are all rows of the page's window with every
    sample, the four read once too: one before the first slice, one after the last, one
    of 0 % (an idle unit: a measurement, not an empty series) and a uint64 one."""
    from profscope.testing.allocator_xplane import TPU_COUNTERS
    from profscope.testing.timelines import builder_logdir

    client = make_client(builder_logdir(tmp_path / "logdir", {"tpu_counters": "tpu-host"}))
    w = _window(client, "tpu_counters/2026_01_01_00_00_00", resolution=100000)
    pid_of = {t["id"]: t["pid"] for t in w["tracks"]}
    got = {(pid_of[c["track"]], c["name"]): c for c in w["counters"]}
    want = {(1011, name): n for name, n, _ in TPU_COUNTERS} | {(1012, "MXU % util"): 200, (1012, "HBM read % util"): 1}
    assert {k: len(got[k]["t"]) for k in got} == want
    assert got[(1011, "DMA % util")]["v"] == [0.0]
    counter_rows = {t["id"] for t in w["tracks"] if t["kind"] == "counter"}
    assert {c["track"] for c in w["counters"]} == counter_rows and len(counter_rows) == 11


def test_export_is_sent_in_large_pieces(demo_client):
    """Each piece of a streamed answer is sent (and gzipped) on its own: one per counter
    sample or flow end made a 30 MB export take 25 s."""
    from profscope.app.queries import TraceQuery
    from profscope.tools.trace_export import EXPORT_PIECE

    ws = demo_client.app.state.workspace
    run = f"torch/{TORCH[0].name}"
    pieces = list(ws.trace_export(ws.run(run), TraceQuery()))
    assert len(pieces) >= 2 and all(len(p) >= EXPORT_PIECE for p in pieces[:-1])
    assert json.loads(b"".join(pieces))["traceEvents"]



def test_answer_events_are_made_with_the_cyclic_collector_paused(demo_client, monkeypatch):
    """A busy XProf window is ~54,000 events on jax308, made as dicts for one orjson
    call per piece: the collections their allocations triggered walked them all again
    (docs/performance.md, issue 40). The collector is paused while a piece is made, and
    on again between pieces and when the reader stops after the first one."""
    import gc

    import orjson

    from profscope.app.queries import TraceQuery, XprofTraceQuery
    from profscope.tools import trace_xprof

    seen = []

    class Recording:
        loads = staticmethod(orjson.loads)

        @staticmethod
        def dumps(obj, *args, **kwargs):
            if isinstance(obj, list):  # a piece of events
                seen.append((len(obj), gc.isenabled()))
            return orjson.dumps(obj, *args, **kwargs)

    monkeypatch.setattr(trace_xprof, "orjson", Recording)
    ws = demo_client.app.state.workspace
    run = ws.run("torch/transformer_train.pt.trace.json.gz")
    answer = json.loads(ws.trace_xprof_json(run, XprofTraceQuery(resolution=0)))
    events = sum(1 for e in answer["traceEvents"] if e["ph"] == "X")
    assert events > 5000 and sum(n for n, _ in seen) == events and not any(on for _, on in seen)
    assert gc.isenabled()
    seen.clear()
    pieces = ws.trace_export(run, TraceQuery())  # events 5,000 to a piece
    next(pieces)
    assert gc.isenabled() and seen and not any(on for _, on in seen)
    pieces.close()
    assert gc.isenabled()


def test_an_xprof_answer_is_sent_whole_up_to_a_size_then_streamed(demo_client, monkeypatch):
    """XProf's trace_viewer@ answer is made in pieces; up to ``WHOLE_MAX_BYTES`` they go
    as one body with its length (a client reads it faster than chunks: jax308's busy later
    windows 69-71 -> 61-65 ms over HTTP, docs/performance.md), past it streamed, so a
    gigabyte answer is never held whole. The same bytes either way."""
    from profscope.server import responses

    params = {"run": "torch/transformer_train.pt.trace.json.gz", "tag": "trace_viewer@", "resolution": 0}
    plain = {"Accept-Encoding": "identity"}
    whole = demo_client.get("/data/plugin/profile/data", params=params, headers=plain)
    assert whole.status_code == 200 and int(whole.headers["content-length"]) == len(whole.content) > 100_000
    monkeypatch.setattr(responses, "WHOLE_MAX_BYTES", 50_000)
    streamed = demo_client.get("/data/plugin/profile/data", params=params, headers=plain)  # (kept in memory: one piece)
    assert streamed.status_code == 200 and "content-length" not in streamed.headers
    assert streamed.content == whole.content

# -- windows on a dense built trace -----------------------------------------------------------


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    root = tmp_path_factory.mktemp("dense")
    truth = tvb.dense_trace(root / "dense.trace.json.gz")
    ws = Workspace(LogDir(str(root), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws)), "dense.trace.json.gz", truth


def _brute(truth, base_us, s_ms, e_ms):
    out = []
    for name, tid, ts, dur in truth:
        a = (ts - base_us) / 1000
        z = a + dur / 1000
        if a < e_ms and (z > s_ms or (dur == 0 and a >= s_ms)):
            out.append((name, tid, a, dur / 1000))
    return out


@pytest.mark.parametrize("window,res", [((None, None), 1000), ((100.0, 300.0), 800), ((250.0, 250.5), 1000),
                                        ((0.0, 0.02), 50), ((400.0, 480.0), 3)])
def test_windows_overlap_span_and_resolution(dense, window, res):
    client, run, truth = dense
    params = {"resolution": res}
    if window[0] is not None:
        params.update(start_ms=window[0], end_ms=window[1])
    w = _window(client, run, **params)
    s_ms, e_ms = w["window"]
    base_us = w["originNs"] / 1000
    sl = _slices(w)
    # only overlapping events
    assert all(x["start"] < e_ms and (x["start"] + x["dur"] > s_ms or x["dur"] == 0 and x["start"] >= s_ms) for x in sl)
    # every event at least a pixel wide is there, the spanning epoch included
    px = (e_ms - s_ms) / res
    brute = _brute(truth, base_us, s_ms, e_ms)
    wide = {(n, round(a, 6)) for n, tid, a, d in brute if d >= px}
    got = {(x["name"], round(x["start"], 6)) for x in sl}
    assert wide <= got
    assert any(x["name"] == "epoch" for x in sl)
    # at most one sub-pixel event per (track, depth, pixel)
    seen = defaultdict(int)
    for x in sl:
        if x["dur"] < px:
            seen[(x["track"], x["depth"], int((max(x["start"], s_ms) - s_ms) // px))] += 1
    assert max(seen.values(), default=1) == 1
    per_row = defaultdict(int)
    for x in sl:
        per_row[(x["track"], x["depth"])] += 1
    assert max(per_row.values()) <= 2 * res + 2
    if len(brute) > 2 * res:
        assert w["truncated"] and w["returnedEventsSize"] < len(brute)
    else:  # zoomed in: everything in the window
        assert w["returnedEventsSize"] == len(brute)
    assert w["totalEventsSize"] == len(truth)


def test_a_slice_seen_only_when_zoomed_in(dense):
    client, run, _truth = dense
    far = _window(client, run, resolution=500)
    names_far = {(x["name"], round(x["start"], 6)) for x in _slices(far)}
    near = _window(client, run, start_ms=123.0, end_ms=123.05, resolution=500)
    fine = [x for x in _slices(near) if x["name"].startswith("tick")]
    assert fine and any((x["name"], round(x["start"], 6)) not in names_far for x in fine)
    # and its details
    d = client.get("/api/trace/event", params={"run": run, "id": fine[0]["id"]}).json()
    assert d["name"] == fine[0]["name"] and d["args"]["i"] >= 0


def test_depth_nesting_and_b_e_pairs(dense):
    client, run, _ = dense
    w = _window(client, run, start_ms=10.0, end_ms=10.5, resolution=100000)
    by = {x["name"]: x for x in _slices(w)}
    assert by["epoch"]["depth"] == 0
    assert any(x["name"].startswith("block") and x["depth"] == 1 for x in _slices(w))
    assert any(x["name"].startswith("tick") and x["depth"] == 2 for x in _slices(w))
    jobs = _window(client, run, resolution=100000)
    job = next(x for x in _slices(jobs) if x["name"] == "job 3")
    d = client.get("/api/trace/event", params={"run": run, "id": job["id"]}).json()
    assert d["args"] == {"k": 3, "done": True}  # B args merged with E args
    assert d["dur"] == pytest.approx(100_000 * 5.0 / 40 / 1000)  # span / 40, in ms
    counters = [c for c in jobs["counters"] if c["name"] == "queue"]
    assert counters and max(counters[0]["v"]) == 4


# -- several hosts --------------------------------------------------------------------------


def test_two_hosts_merge_on_one_timeline(make_client, tmp_path):
    root = tmp_path / "logs"
    tvb.profile_session(root, {"host_a": MLP, "host_b": MLP})
    client = make_client(root)
    run = client.get("/api/runs").json()["runs"][0]["name"]
    one = _window(client, run, resolution=100000)
    both = _window(client, run, hosts="host_a,host_b", resolution=100000)
    assert one["hosts"] == ["host_a"] and both["hosts"] == ["host_a", "host_b"]
    assert len(both["tracks"]) == 2 * len(one["tracks"])
    assert both["returnedEventsSize"] == 2 * one["returnedEventsSize"]
    assert {p["pid"] for p in both["processes"]} == {1701, 2701}  # XProf: 1000 * host + device
    assert {p["host"] for p in both["processes"]} == {"host_a", "host_b"}
    ids = both["slices"]["id"]
    assert len(set(ids)) == len(ids) and len({t["id"] for t in both["tracks"]}) == len(both["tracks"])
    b_only = _window(client, run, host="host_b", resolution=100000)
    assert {p["pid"] for p in b_only["processes"]} == {1701}  # XProf numbers the selected hosts
    d = client.get("/api/trace/event", params={"run": run, "hosts": "host_a,host_b", "id": b_only["slices"]["id"][0]}).json()
    assert d["track"]["host"] == "host_b"
    assert client.get("/api/trace/window", params={"run": run, "host": "nope"}).status_code == 404
    x = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "hosts": "host_a,host_b",
                                                          "resolution": 0}).json()
    assert {e["pid"] for e in x["traceEvents"] if e["ph"] == "X"} == {1701, 2701}


def test_xprofs_no_host_selected_is_the_default_host(make_client, tmp_path):
    """XProf's trace viewer sends ``hosts=none`` before its page has picked a host
    (trace_viewer_index.js ``_updateHostsParamToBaseUrl``): the first host, as with no
    parameter; a host really named ``none`` is still that host."""
    root = tmp_path / "logs"
    tvb.profile_session(root, {"host_a": MLP, "host_b": MLP})
    client = make_client(root)
    run = client.get("/api/runs").json()["runs"][0]["name"]
    xprof = {"run": run, "tag": "trace_viewer@", "resolution": 0}
    default = client.get("/data/plugin/profile/data", params=xprof)
    none = client.get("/data/plugin/profile/data", params={**xprof, "hosts": "none"})
    assert none.status_code == 200 and none.json() == default.json()
    assert _window(client, run, hosts="none")["hosts"] == ["host_a"]
    assert client.get("/api/trace/window", params={"run": run, "hosts": "none,host_b"}).status_code == 404
    named = tmp_path / "named"
    tvb.profile_session(named, {"host_a": MLP, "none": MLP})
    client = make_client(named)
    run = client.get("/api/runs").json()["runs"][0]["name"]
    assert _window(client, run, hosts="none")["hosts"] == ["none"]


# -- a real profile made by the big-profile script, small --------------------------------------


def test_generated_jax_profile(make_client, tmp_path):
    import subprocess
    import sys

    script = Path(__file__).parents[1] / "scripts" / "make_big_jax_profile.py"
    out = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "big"), "--steps", "25"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    client = make_client(tmp_path / "big")
    run = client.get("/api/runs").json()["runs"][0]["name"]
    w = _window(client, run, resolution=400)
    assert [s["name"] for s in w["steps"]] == [f"train {i}" for i in range(25)]
    assert w["truncated"] and w["returnedEventsSize"] < w["totalEventsSize"]
    # the main thread's line (named after the process: python, python3) holds the frames
    python = next(t for t in w["tracks"] if t["name"].startswith("python"))
    assert python["maxDepth"] >= 20  # the nested helpers
    xla = client.get("/api/trace/search", params={"run": run, "q": "dot"}).json()
    assert xla["total"] >= 25
    d = client.get("/api/trace/event", params={"run": run, "id": xla["matches"][0]["id"]}).json()
    assert d["hloOp"] and d["module"] and d["module"].startswith("jit_train_step(")


# -- bad input ---------------------------------------------------------------------------------


def test_bad_parameters_are_4xx_json(demo_client):
    run = MLP_RUN
    cases = [
        ({"start_ms": 5, "end_ms": 1}, 400, "before"),
        ({"resolution": 0}, 400, "resolution"),
        ({"resolution": 10**9}, 400, "resolution"),
        ({"resolution": "abc"}, 400, "resolution"),
        ({"start_ms": "soon"}, 400, "start_ms"),
        ({"end_ms": "nan"}, 400, "end_ms"),
    ]
    for params, status, word in cases:
        r = demo_client.get("/api/trace/window", params={"run": run, **params})
        assert r.status_code == status, (params, r.text)
        body = r.json()
        assert body["ok"] is False and word in body["error"]
    assert demo_client.get("/api/trace/event", params={"run": run, "id": 10**12}).status_code == 404
    assert demo_client.get("/api/trace/event", params={"run": run, "id": "x"}).status_code == 400
    assert demo_client.get("/api/trace/event", params={"run": run}).status_code == 400
    assert demo_client.get("/api/trace/search", params={"run": run, "q": ""}).status_code == 400
    assert demo_client.get("/api/trace/search", params={"run": run, "q": "a", "limit": "many"}).status_code == 400
    assert demo_client.get("/api/trace/export", params={"run": run, "start_ms": 3, "end_ms": 1}).status_code == 400
    assert demo_client.get("/api/trace/window", params={"run": "dumps/mlp"}).status_code == 404
    x = demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "start_time_ms": 9,
                                                              "end_time_ms": 1})
    assert x.status_code == 400
    x = demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "resolution": "-3"})
    assert x.status_code == 400
    # windows far outside the trace are empty answers, not overflows
    for params in ({"start_ms": 1e14, "end_ms": 2e14}, {"start_ms": -1e14, "end_ms": 1e14}, {"start_ms": -5, "end_ms": -1}):
        w = demo_client.get("/api/trace/window", params={"run": run, **params})
        assert w.status_code == 200, (params, w.text)
        assert demo_client.get("/api/trace/export", params={"run": run, **params}).status_code == 200
    x = demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "start_time_ms": -1e14,
                                                              "end_time_ms": 1e14, "resolution": 7})
    assert x.status_code == 200 and x.json()["returnedEventsSize"] > 0


def test_corrupt_xplane_and_truncated_json_are_422_naming_the_file(make_client, tmp_path):
    root = tmp_path / "logs"
    session = root / "bad" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    data = MLP.read_bytes()
    (session / "cut.xplane.pb").write_bytes(data[: len(data) // 2])
    (session / "junk.xplane.pb").write_bytes(bytes(range(256)) * 40)
    text = gzip.decompress((DEMO / "torch" / "leak.pt.trace.json.gz").read_bytes())
    (root / "short.pt.trace.json").write_bytes(text[: len(text) // 2])
    (root / "notjson.trace.json").write_bytes(b"hello, world")
    far = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
           {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1e300, "dur": 2.0}]
    (root / "far.trace.json").write_text(json.dumps({"traceEvents": far}))
    client = make_client(root)
    bad = next(r["name"] for r in client.get("/api/runs").json()["runs"] if r["kind"] == "profile")
    for params in ({"run": bad, "host": "cut"}, {"run": bad, "host": "junk"},
                   {"run": "short.pt.trace.json"}, {"run": "notjson.trace.json"}, {"run": "far.trace.json"}):
        r = client.get("/api/trace/window", params=params)
        assert r.status_code == 422, (params, r.text)
        body = r.json()
        assert body["file"] and body["file"].endswith((params.get("host") or params["run"]).split("/")[-1] + ("" if "host" not in params else ".xplane.pb"))
        # the failure is not cached: asking again says the same
        assert client.get("/api/trace/window", params=params).status_code == 422
    assert client.get("/api/progress").json()["jobs"] == []


def test_a_profile_without_events_is_an_empty_timeline(make_client, tmp_path):
    from profscope.testing import allocator_xplane as ax

    sp = ax.Space("host0")
    sp.plane("/host:CPU", 0).line("python3", 1)  # a line without events
    folder = tmp_path / "logs" / "empty" / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "host0.xplane.pb").write_bytes(sp.to_bytes())
    client = make_client(tmp_path / "logs")
    run = client.get("/api/runs").json()["runs"][0]["name"]
    w = _window(client, run)
    assert w["slices"]["id"] == [] and w["totalEventsSize"] == 0 and w["truncated"] is False
    assert client.get("/api/trace/search", params={"run": run, "q": "x"}).json()["total"] == 0
    doc = json.loads(client.get("/api/trace/export", params={"run": run}).content)
    assert [e for e in doc["traceEvents"] if e["ph"] == "X"] == []


def test_gzipped_xplane_serves_the_same_events(make_client, tmp_path):
    folder = tmp_path / "logs" / "gz" / "plugins" / "profile" / "2026_01_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "demo-host.xplane.pb.gz").write_bytes(gzip.compress(MLP.read_bytes()))
    client = make_client(tmp_path / "logs")
    run = client.get("/api/runs").json()["runs"][0]["name"]
    w = _window(client, run, resolution=100000)
    assert w["hosts"] == ["demo-host"] and w["totalEventsSize"] == 780


def test_odd_but_valid_chrome_events(make_client, tmp_path):
    """NaN timestamps are skipped, absurd durations capped, string pids/tids numbered."""
    events = [{"ph": "X", "name": "ok", "pid": "main", "tid": "t1", "ts": 5.0, "dur": 1.0},
              {"ph": "X", "name": "huge", "pid": "main", "tid": "t1", "ts": 6.0, "dur": 1e30},
              {"ph": "i", "name": "nan", "pid": 1, "tid": 1, "ts": float("nan")},
              {"ph": "B", "name": "open", "pid": 1, "tid": 2, "ts": 7.0}]  # never closed
    root = tmp_path / "logs"
    root.mkdir()
    (root / "odd.trace.json").write_text(json.dumps({"traceEvents": events}))  # NaN as Python writes it
    client = make_client(root)
    w = _window(client, "odd.trace.json", resolution=100000)
    names = {x["name"]: x for x in _slices(w)}
    assert set(names) == {"ok", "huge", "open"}
    assert names["huge"]["dur"] == pytest.approx(2**60 / 1e9)  # capped at 2^60 ps
    assert names["open"]["dur"] > 0  # closed at the last timestamp of the trace


def test_chrome_flows_bind_to_slices_as_catapult_binds_them(make_client, tmp_path):
    """XProf's answer binds a Chrome trace's flow events to slices by Catapult's rules:
    ``s`` to the deepest slice open at its time (here the launch nested in an op), ``f``
    with ``"bp": "e"`` to the slice open at its time (the kernel beginning exactly where
    the previous one ends: the one that begins), ``f`` without it to the next slice
    starting at or after it; a flow whose end no slice takes, and the later of two flows
    ending on one slice, are left out of XProf's form (one flow per slice). The page's
    own arrows keep all four."""
    ev = [{"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          {"ph": "X", "name": "launch_a", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
          {"ph": "X", "name": "launch_b", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
          {"ph": "X", "name": "launch_c", "pid": 1, "tid": 1, "ts": 30, "dur": 5},
          {"ph": "X", "name": "launch_d", "pid": 1, "tid": 1, "ts": 40, "dur": 5},
          {"ph": "X", "name": "kernel_1", "pid": 0, "tid": 7, "ts": 50, "dur": 10},
          {"ph": "X", "name": "kernel_2", "pid": 0, "tid": 7, "ts": 60, "dur": 10},
          # kineto's order: the f first; a at launch_a's start, b inside launch_b
          {"ph": "f", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 60, "bp": "e"},
          {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 10},
          {"ph": "s", "id": 2, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 22},
          {"ph": "f", "id": 2, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 45},  # next slice: kernel_1
          {"ph": "s", "id": 3, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 30},
          {"ph": "f", "id": 3, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 90, "bp": "e"},  # no slice
          {"ph": "s", "id": 4, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 40},
          {"ph": "f", "id": 4, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 55, "bp": "e"}]  # kernel_1 again
    root = tmp_path / "logs"
    root.mkdir()
    (root / "flows.trace.json").write_text(json.dumps({"traceEvents": ev}))
    client = make_client(root)
    assert len(_window(client, "flows.trace.json", resolution=100000)["flows"]["from"]) == 4
    body = client.get("/data/plugin/profile/data", params={"run": "flows.trace.json", "tag": "trace_viewer@",
                                                           "resolution": 0}).json()
    pairs: dict = defaultdict(dict)
    for e in body["traceEvents"]:
        if "bind_id" in e:
            assert e["cat"] == "ac2g"
            pairs[e["bind_id"]]["out" if e.get("flow_out") else "in"] = e["name"]
    assert sorted((p["out"], p["in"]) for p in pairs.values()) == [("launch_a", "kernel_2"), ("launch_b", "kernel_1")]


@pytest.mark.parametrize("q", ["fusion", "TRAIN", "o"])
def test_search_total_and_offset_pages_through_every_match(demo_client, q):
    """Pages of ``limit`` matches from ``offset`` put end to end are the one long answer,
    across the prefix/substring boundary, and every page says the true total."""
    get = lambda **p: demo_client.get("/api/trace/search", params={"run": MLP_RUN, "q": q, **p})  # noqa: E731
    whole = get(limit=10000).json()
    assert whole["total"] == len(whole["matches"]) > 5
    pages, off = [], 0
    while off < whole["total"]:
        r = get(limit=7, offset=off).json()
        assert r["total"] == whole["total"] and r["offset"] == off
        assert 0 < len(r["matches"]) <= 7
        pages += r["matches"]
        off += len(r["matches"])
    assert [m["id"] for m in pages] == [m["id"] for m in whole["matches"]]
    past = get(limit=7, offset=whole["total"] + 3).json()
    assert past["matches"] == [] and past["total"] == whole["total"]
    assert get(offset=-1).status_code == 400


def test_search_total_counts_past_the_limit(demo_client):
    r = demo_client.get("/api/trace/search", params={"run": MLP_RUN, "q": "o", "limit": 50}).json()
    assert len(r["matches"]) == 50 and r["total"] > 50
