"""Memory from PyTorch profiler traces: the streaming Chrome-trace reader, [memory] events,
the export_memory_timeline JSON, and the torch memory payload.

Real inputs: ``src/profscope/demo/logdir/torch`` (made by ``scripts/make_torch_traces.py``
with torch 2.13 on CPU). Every expectation about a real file is computed here
independently, with plain ``json``.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest

from profscope.errors import BadInput
from profscope.formats import chrome_trace as ct
from profscope.tools import memory_profile_torch as tm
from profscope.testing.memory_trace import CPU, CUDA, TraceBuilder, multi_device, steady_leak, write_huge_trace

TORCH = Path(__file__).resolve().parents[1] / "src" / "profscope" / "demo" / "logdir" / "torch"
DEMO = TORCH.parent
PROGRAMS = ["mlp_train", "transformer_train", "leak"]


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((TORCH / "expected.json").read_text())


def _trace(name: str) -> Path:
    return TORCH / f"{name}.pt.trace.json.gz"


def _plain(name: str) -> dict:
    with gzip.open(_trace(name), "rt") as f:
        return json.load(f)


def _read(name: str) -> ct.MemoryEvents:
    with open(_trace(name), "rb") as f:
        return ct.memory_events(f, str(_trace(name)))


def _convert(name: str, **kw) -> dict:
    timeline = ct.parse_memory_timeline((TORCH / f"{name}.memory_timeline.json").read_bytes(), name)
    return tm.from_memory_events(_read(name), timeline, **kw)


def _mem_of(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("name") == "[memory]"]


# -- the streaming reader ----------------------------------------------------------------


def _all_demo_traces() -> list[Path]:
    return sorted(DEMO.rglob("*.trace.json.gz"))


def test_demo_has_real_torch_and_jax_traces():
    names = [p.name for p in _all_demo_traces()]
    assert sum(n.endswith(".pt.trace.json.gz") for n in names) == 3
    assert sum(n == "demo-host.trace.json.gz" for n in names) >= 3  # jax.profiler traces
    total = sum(p.stat().st_size for p in TORCH.iterdir())
    assert total < 1.5 * 2**20


@pytest.mark.parametrize("path", _all_demo_traces(), ids=lambda p: p.parent.name + "/" + p.name)
def test_iter_events_equals_json_load(path):
    with gzip.open(path, "rt") as f:
        ref = json.load(f)
    metadata: dict = {}
    with open(path, "rb") as f:
        events = list(ct.iter_events(f, str(path), metadata))
    assert events == ref["traceEvents"]
    assert metadata == {k: v for k, v in ref.items() if k != "traceEvents"}


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_iter_events_across_chunk_boundaries(monkeypatch, chunk):
    """Tiny read sizes split every event, string, number and multi-byte character."""
    tb = steady_leak(steps=3)
    tb.op("aten::ünïcödé ✓ 名前", 5000.0, 1.5e-3)
    tb.events.append({"ph": "C", "name": "n", "pid": 1, "ts": 1e300, "args": {"v": -12.5e-7, "t": True, "z": None}})
    data = tb.to_bytes(indent=1)
    monkeypatch.setattr(ct, "CHUNK", chunk)
    metadata: dict = {}
    assert list(ct.iter_events(data, "x.json", metadata)) == json.loads(data)["traceEvents"]
    assert metadata["baseTimeNanoseconds"] == 1_700_000_000_000_000_000
    gz = gzip.compress(data)
    assert list(ct.iter_events(io.BytesIO(gz), "x.json.gz")) == json.loads(data)["traceEvents"]


def test_bare_array_with_and_without_closing_bracket():
    tb = steady_leak(steps=2)
    ref = tb.events
    assert list(ct.iter_events(tb.to_bytes(bare=True), "a.json")) == ref
    assert list(ct.iter_events(tb.to_bytes(bare=True, close_bare=False), "a.json")) == ref
    assert list(ct.iter_events(b'[{"ph": "M"},\n]', "a.json")) == [{"ph": "M"}]  # trailing comma
    assert list(ct.iter_events(b"\xef\xbb\xbf[]", "a.json")) == []  # BOM


def test_reader_does_not_materialize_the_event_list():
    """iter_events is lazy: the first event comes before the rest of the stream is read."""

    class Endless(io.RawIOBase):
        def __init__(self):
            self.served = 0
            self.pending = b'{"traceEvents": ['

        def readable(self):
            return True

        def readinto(self, b):
            while len(self.pending) < len(b):
                self.pending += b'{"ph": "i", "ts": 1},' * 4096
            n = len(b)
            b[:n] = self.pending[:n]
            self.pending = self.pending[n:]
            self.served += n
            return n

    src = Endless()
    it = ct.iter_events(src, "endless.json")
    for _, ev in zip(range(100_000), it):
        assert ev == {"ph": "i", "ts": 1}
    assert src.served < 16 * 2**20  # a few MiB read for 100k events, not the whole stream


# -- bad input -------------------------------------------------------------------------------


def _bad(data: bytes, path: str = "bad.pt.trace.json") -> BadInput:
    with pytest.raises(BadInput) as info:
        ct.memory_events(io.BytesIO(data), path)
    err = info.value
    assert err.file == path and path in err.message
    assert err.status == 422
    return err


def test_truncated_gzip():
    data = _trace("leak").read_bytes()
    err = _bad(data[: len(data) // 2], "leak.pt.trace.json.gz")
    assert "truncated gzip" in err.message


def test_corrupt_gzip():
    data = bytearray(_trace("leak").read_bytes())
    data[100:140] = b"\x00" * 40
    err = _bad(bytes(data), "leak.pt.trace.json.gz")
    assert "gzip" in err.message or "JSON" in err.message


@pytest.mark.parametrize("cut", [0.001, 0.5, 0.999])
def test_truncated_json(cut):
    with gzip.open(_trace("leak"), "rb") as f:
        data = f.read()
    err = _bad(data[: int(len(data) * cut)])
    assert "truncated JSON" in err.message


@pytest.mark.parametrize(
    "data, words",
    [
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b"{}", "no 'traceEvents'"),
        (b"ts,name,bytes\n1,[memory],16\n", "not JSON"),
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not"),
        (b'{"traceEvents": {"a": 1}}', "not an array"),
        (b'{"traceEvents": [1, 2]}', "not an event object"),
        (b'{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ',' or ']'"),
        (b'{"traceEvents": []} trailing', "unexpected data"),
        (b'{"traceEvents": [{"ph": "X", "ts": tru}]}', "invalid JSON"),
        (b'[{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": "x"}}]', "bad args"),
    ],
)
def test_not_a_trace(data, words):
    assert words in _bad(data).message


def test_bad_memory_timeline():
    for data, words in [
        (b"", "empty"),
        (b"not json", "not JSON"),
        (b'{"foo": 1}', "[times, sizes]"),
        (b"[[1, 2], [[0, 1, 2, 3, 4, 5, 6, 7, 8]]]", "2 times but 1 rows"),
        (b"[[1], [[0, 1, 2]]]", "9 numbers"),
        (gzip.compress(b"[[1], [[0, 1, 2, 3, 4, 5, 6, 7, 8]]]")[:20], "truncated gzip"),
    ]:
        with pytest.raises(BadInput) as info:
            ct.parse_memory_timeline(data, "x.memory_timeline.json")
        assert words in info.value.message and info.value.file == "x.memory_timeline.json"


# -- real torch traces -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_memory_events_match_plain_json(name):
    trace = _plain(name)
    mem_ref = _mem_of(trace)
    mem = _read(name)
    assert len(mem) == len(mem_ref)
    assert mem.num_trace_events == len(trace["traceEvents"])
    ref_sorted = sorted(mem_ref, key=lambda e: e["ts"])
    assert mem.ts.tolist() == [e["ts"] for e in ref_sorted]
    assert mem.bytes.tolist() == [e["args"]["Bytes"] for e in ref_sorted]
    assert mem.addr.tolist() == [e["args"]["Addr"] for e in ref_sorted]
    assert mem.total_allocated.tolist() == [e["args"]["Total Allocated"] for e in ref_sorted]
    assert set(zip(mem.device_type.tolist(), mem.device_id.tolist())) == {(0, -1)}
    assert mem.metadata["displayTimeUnit"] == "ms" and "deviceProperties" in mem.metadata
    steps = sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert mem.steps.number.tolist() == steps


@pytest.mark.parametrize("name", PROGRAMS)
def test_ops_are_the_innermost_enclosing_cpu_op(name):
    """Checked by brute force with plain json: the shortest cpu_op/user_annotation X event on
    the same thread whose [ts, ts + dur) holds the memory event."""
    trace = _plain(name)
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
           and not e["name"].startswith("ProfilerStep#") and e["dur"] > 0]
    mem = _read(name)
    got = [mem.op_names[i] if i >= 0 else None for i in mem.op]
    for k, (ts, thr) in enumerate(zip(mem.ts.tolist(), mem.thread.tolist())):
        pid, tid = mem.threads[thr]
        cover = [o for o in ops if o["pid"] == pid and o["tid"] == tid and o["ts"] <= ts < o["ts"] + o["dur"]]
        want = min(cover, key=lambda o: (o["dur"], -o["ts"]))["name"] if cover else None
        assert got[k] == want, (k, ts)


def test_module_scopes_and_frames_on_real_trace():
    mem = _read("leak")
    modules = {mem.module_names[i] for i in mem.module if i >= 0}
    assert modules == {"Net_0", "Net_0/Linear_0", "Net_0/Linear_1"}
    frames = {mem.frame_names[i] for i in mem.frame if i >= 0}
    assert any("leaky_step" in f for f in frames)
    assert not any(f.startswith("<built-in") for f in frames)


@pytest.mark.parametrize("name", PROGRAMS)
def test_summary_matches_plain_json(name, expected):
    trace = _plain(name)
    mem_ref = _mem_of(trace)
    facts = expected["programs"][name]
    out = _convert(name)
    assert [d["device"] for d in out["devices"]] == ["CPU"]
    s = out["devices"][0]["summary"]
    peak = max(e["args"]["Total Allocated"] for e in mem_ref)
    assert s["peakAllocatedBytes"] == peak == facts["peakTotalAllocated"]
    assert s["numAllocations"] == sum(e["args"]["Bytes"] > 0 for e in mem_ref) == facts["allocations"]
    assert s["numDeallocations"] == sum(e["args"]["Bytes"] < 0 for e in mem_ref) == facts["frees"]
    assert s["peakReservedBytes"] == max(e["args"]["Total Reserved"] for e in mem_ref)
    last = max(mem_ref, key=lambda e: e["ts"])
    assert s["liveBytesAtEnd"] == last["args"]["Total Allocated"]
    first_peak = min((e for e in mem_ref if e["args"]["Total Allocated"] == peak), key=lambda e: e["ts"])
    origin = min(e["ts"] for e in trace["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    assert s["peakAllocatedTimeMs"] == pytest.approx((first_peak["ts"] - origin) / 1000.0, abs=1e-6)
    assert out["timeOriginUs"] == origin
    # the breakdown at the peak adds up to the peak
    b = out["devices"][0]["breakdownAtPeak"]
    assert b["totalBytes"] == peak
    assert sum(r["bytes"] for r in b["byOp"]) == peak
    assert sum(r["bytes"] for r in b["byModule"]) == peak
    assert sum(r["bytes"] for r in b["allocations"]) == b["attributedBytes"]
    # the timeline keeps the peak
    tl = out["devices"][0]["timeline"]
    assert max(tl["allocatedBytes"]) == peak
    assert len(tl["timeMs"]) <= 1000


def test_timeline_downsampling_keeps_peak():
    out = _convert("transformer_train", max_points=50)
    dev = out["devices"][0]
    tl = dev["timeline"]
    assert tl["downsampled"] and len(tl["timeMs"]) <= 50
    assert max(tl["allocatedBytes"]) == dev["summary"]["peakAllocatedBytes"]
    assert tl["timeMs"] == sorted(tl["timeMs"])
    assert len(tl["op"]) == len(tl["timeMs"]) and all(-1 <= i < len(tl["strings"]) for i in tl["op"])
    cat = out["categoryTimeline"]
    assert len(cat["timeMs"]) <= 50 and max(cat["totalBytes"]) == cat["peakBytes"]


def test_leak_program_is_found(expected):
    out = _convert("leak")
    dev = out["devices"][0]
    hints = {h["kind"]: h for h in dev["leakHints"]}
    growth = hints["stepGrowth"]
    assert growth["severity"] == "warning"
    assert growth["evidence"]["bytesPerStep"] == expected["leakBytesPerStep"] == 65536
    assert growth["evidence"]["stepSource"] == "ProfilerStep"
    steps = expected["programs"]["leak"]["steps"]
    assert len(growth["evidence"]["liveBytesAtStepEnd"]) == steps
    left = growth["evidence"]["neverFreedAfterFirstStep"]
    assert left[0]["sizeBytes"] == 65536 and left[0]["count"] == steps - 1 and "leaky_step" in left[0]["frame"]
    rising = [h for h in dev["leakHints"] if h["kind"] == "risingOp"]
    assert rising and rising[0]["evidence"]["bytesPerInterval"] == 65536
    assert "leaky_step" in rising[0]["evidence"]["neverFreedByFrame"][0]["frame"]
    never = hints["neverFreed"]["evidence"]
    assert never["count"] == steps and never["bytes"] == steps * 65536
    assert [r["bytes"] for r in never["byStep"]] == [65536] * steps
    assert dev["summary"]["neverFreedCount"] == steps
    assert [s["liveBytesAtEnd"] for s in dev["steps"]] == [65536 * (k + 1) for k in range(steps)]


@pytest.mark.parametrize("name", ["mlp_train", "transformer_train"])
def test_no_leak_warnings_on_healthy_programs(name):
    dev = _convert(name)["devices"][0]
    assert not [h for h in dev["leakHints"] if h["severity"] == "warning"]
    ends = [s["liveBytesAtEnd"] for s in dev["steps"]]
    assert len(set(ends[:-1])) == 1  # steady state (the last step's loss is still alive)


@pytest.mark.parametrize("name", PROGRAMS)
def test_memory_timeline_json(name):
    raw = json.loads((TORCH / f"{name}.memory_timeline.json").read_text())
    times, sizes = raw
    tl = ct.parse_memory_timeline((TORCH / f"{name}.memory_timeline.json").read_bytes(), name)
    assert tl.categories == ct.CATEGORIES
    assert tl.times_us.tolist() == times
    assert tl.sizes.shape == (len(times), 8)
    assert all(row[0] == 0 for row in sizes)  # torch's leading column
    assert tl.sizes.tolist() == [row[1:] for row in sizes]
    assert tl.total.tolist() == [sum(row) for row in sizes]
    assert (tl.sizes >= 0).all()
    assert (tl.sizes[:, ct.CATEGORIES.index("PARAMETER")] > 0).all()  # the model exists throughout
    out = _convert(name)
    mem = _read(name)
    cat = out["categoryTimeline"]
    assert cat["aligned"] and cat["categories"] == list(ct.CATEGORIES)
    assert cat["peakBytes"] == max(sum(r) for r in sizes)
    assert sum(r["bytes"] for r in cat["peakBreakdown"]) == cat["peakBytes"]
    for i in range(len(cat["timeMs"])):
        assert sum(s["bytes"][i] for s in cat["series"]) == cat["totalBytes"][i]
    # aligned with the trace: timeline times (profiler clock, us) = trace ts + baseTimeNanoseconds / 1000
    span_ms = (mem.end_us - mem.start_us) / 1000.0
    assert min(cat["timeMs"]) >= -1.0 and max(cat["timeMs"]) <= span_ms + 1.0
    # in-window allocations are a subset of what the timeline accounts for
    assert cat["peakBytes"] >= out["devices"][0]["summary"]["peakAllocatedBytes"]


def test_optimizer_state_in_the_timeline_categories():
    cat = _convert("mlp_train")["categoryTimeline"]
    peak = {r["category"]: r["bytes"] for r in cat["peakBreakdown"]}
    assert peak["OPTIMIZER_STATE"] > 0  # Adam: exp_avg, exp_avg_sq
    sgd = {r["category"]: r["bytes"] for r in _convert("leak")["categoryTimeline"]["peakBreakdown"]}
    assert sgd["OPTIMIZER_STATE"] == 0  # plain SGD keeps no state


def test_counter_series():
    mem = _read("mlp_train")
    series = tm.counter_series(mem)
    (track,) = series["tracks"]
    assert track["device"] == "CPU" and track["name"] == "Memory (CPU)"
    assert len(track["ts"]) == len(mem) and np.all(np.diff(track["ts"]) >= 0)
    assert int(track["allocatedBytes"].max()) == _convert("mlp_train")["devices"][0]["summary"]["peakAllocatedBytes"]
    assert track["pid"] == mem.threads[0][0]


def test_convert_is_json_serializable_and_camel_case():
    out = _convert("leak")
    text = json.dumps(out)

    def keys(o):
        if isinstance(o, dict):
            for k, v in o.items():
                yield k
                yield from keys(v)
        elif isinstance(o, list):
            for v in o:
                yield from keys(v)

    assert all("_" not in k and " " not in k for k in keys(json.loads(text)))


# -- built traces: what real files lack ------------------------------------------------------------


def _built(tb: TraceBuilder, **kw) -> dict:
    mem = ct.memory_events(tb.to_bytes(**{k: v for k, v in kw.items() if k in ("bare", "shuffle", "close_bare")}), "built.json")
    return tm.from_memory_events(mem, max_points=kw.get("max_points", 1000))


def test_several_devices():
    out = _built(multi_device())
    devs = {d["device"]: d for d in out["devices"]}
    # The highest peak first (6, 4 MiB, 12 KiB): the page opens on devices[0].
    assert list(devs) == ["CUDA:1", "CUDA:0", "CPU"]
    assert devs["CPU"]["summary"]["peakAllocatedBytes"] == 12288
    assert devs["CUDA:0"]["summary"]["peakAllocatedBytes"] == 4 << 20
    assert devs["CUDA:0"]["summary"]["peakReservedBytes"] == 4 << 20
    c1 = devs["CUDA:1"]
    assert c1["summary"]["liveBytesAtStart"] == 1 << 20
    assert c1["summary"]["peakAllocatedBytes"] == 6 << 20
    assert c1["summary"]["freedNotAllocatedCount"] == 1
    assert c1["summary"]["freedNotAllocatedBytes"] == 1 << 20
    assert c1["summary"]["liveBytesAtEnd"] == 0
    b = c1["breakdownAtPeak"]
    assert b["unattributedBytes"] == 1 << 20
    assert {r["op"]: r["bytes"] for r in b["byOp"]} == {"aten::empty": 5 << 20, tm.BEFORE_TRACE: 1 << 20}
    assert len(tm.counter_series(ct.memory_events(multi_device().to_bytes(), "m.json"))["tracks"]) == 3


def test_frees_of_blocks_allocated_before_the_window():
    tb = TraceBuilder()
    tb.live_at_start(CPU, -1, 10_000)
    tb.op("aten::add", 0.0, 100.0)
    tb.alloc(10.0, 0x100, 1000)
    tb.free(20.0, 0x900, nbytes=4000)  # allocated before the trace
    tb.free(30.0, 0x100)
    s = _built(tb)["devices"][0]["summary"]
    assert s["liveBytesAtStart"] == 10_000
    assert s["peakAllocatedBytes"] == 11_000
    assert s["freedNotAllocatedCount"] == 1 and s["freedNotAllocatedBytes"] == 4000
    assert s["liveBytesAtEnd"] == 6_000
    assert s["neverFreedCount"] == 0


@pytest.mark.parametrize("device", [(CPU, -1), (CUDA, 0)])
def test_steady_leak_is_found(device):
    steps, leak = 8, 4096
    out = _built(steady_leak(steps=steps, leak_bytes=leak, device_type=device[0], device_id=device[1]))
    dev = out["devices"][0]
    hints = {h["kind"]: h for h in dev["leakHints"]}
    assert hints["stepGrowth"]["evidence"]["bytesPerStep"] == leak
    assert hints["stepGrowth"]["evidence"]["growthBytes"] == [None] + [leak] * (steps - 1)
    rising = [h for h in dev["leakHints"] if h["kind"] == "risingOp"]
    assert [h["evidence"]["op"] for h in rising] == ["aten::clone"]
    assert rising[0]["evidence"]["neverFreedByModule"][0]["module"] == "Model_0/Cache_0"
    assert rising[0]["evidence"]["neverFreedByFrame"][0]["frame"] == "train.py(42): step"
    # peak: step 8, after the two temporaries and the 8th leak block
    assert dev["summary"]["peakAllocatedBytes"] == 65536 + 32768 + steps * leak
    assert dev["peak"]["step"] == steps and dev["peak"]["op"] == "aten::clone"
    by_op = {r["op"]: r for r in dev["breakdownAtPeak"]["byOp"]}
    assert by_op["aten::clone"]["bytes"] == steps * leak and by_op["aten::clone"]["count"] == steps
    assert by_op["aten::mm"]["bytes"] == 65536 + 32768 and by_op["aten::mm"]["count"] == 2
    rows = dev["breakdownAtPeak"]["allocations"]
    clone = next(r for r in rows if r["op"] == "aten::clone")
    assert clone == {"op": "aten::clone", "module": "Model_0/Cache_0", "frame": "train.py(42): step",
                     "sizeBytes": leak, "count": steps, "bytes": steps * leak}


def test_no_growth_without_a_leak():
    dev = _built(steady_leak(steps=6, leak_bytes=1))["devices"][0]
    # 1 byte per step still grows: it is found, and nothing else is
    assert {h["kind"] for h in dev["leakHints"] if h["severity"] == "warning"} >= {"stepGrowth"}
    tb = TraceBuilder()
    for n in range(1, 6):
        t = n * 1000.0
        tb.step(n, t, 900.0)
        tb.op("aten::mm", t + 10, 100.0)
        tb.alloc(t + 20, 0x1000 + n, 4096)
        tb.free(t + 90, 0x1000 + n)
    dev = _built(tb)["devices"][0]
    assert dev["leakHints"] == []


def test_steps_from_optimizer_annotations_when_no_profiler_steps():
    tb = TraceBuilder()
    addr = 0x5000
    for n in range(6):
        t = 1000.0 * n
        tb.op("aten::mm", t, 100.0)
        tb.alloc(t + 10, addr, 1024)  # kept: a leak of 1 KiB per iteration
        addr += 0x100
        tb.annotation("Optimizer.step#SGD.step", t + 200, 100.0)
    dev = _built(tb)["devices"][0]
    growth = next(h for h in dev["leakHints"] if h["kind"] == "stepGrowth")
    assert growth["evidence"]["stepSource"] == "Optimizer.step" and growth["evidence"]["bytesPerStep"] == 1024
    assert dev["steps"] == []


@pytest.mark.parametrize("layout", [{"bare": True}, {"shuffle": 1}, {"shuffle": 2, "bare": True}, {"bare": True, "close_bare": False}])
def test_bare_and_out_of_order_traces_give_the_same_payload(layout):
    tb = steady_leak(steps=5)
    multi = multi_device()
    for ev in multi.events:
        if ev.get("ph") != "M":
            ev = dict(ev, ts=ev["ts"] + 20_000.0)
            tb.events.append(ev)
    ref = _built(tb)
    got = _built(tb, **layout)
    assert got["devices"] == ref["devices"]


def test_ops_nest_per_thread_and_module_paths():
    tb = TraceBuilder()
    tb.module("Outer_0", 0.0, 100.0)
    tb.module("Inner_0", 10.0, 50.0)
    tb.op("aten::linear", 12.0, 40.0)
    tb.op("aten::addmm", 15.0, 10.0)
    tb.alloc(16.0, 0x1, 8)  # addmm in Outer_0/Inner_0
    tb.alloc(30.0, 0x2, 8)  # linear (after addmm ended)
    tb.alloc(70.0, 0x3, 8)  # Outer_0 only, no op
    tb.op("aten::other_thread", 0.0, 1000.0, tid=99)
    tb.alloc(80.0, 0x4, 8, tid=99)  # on thread 99: other_thread, no module
    tb.op("aten::zero", 90.0, 0.0)
    tb.alloc(90.0, 0x5, 8)  # a zero-length op holds nothing
    mem = ct.memory_events(tb.to_bytes(shuffle=3), "n.json")
    ops = [mem.op_names[i] if i >= 0 else None for i in mem.op]
    mods = [mem.module_names[i] if i >= 0 else None for i in mem.module]
    assert ops == ["aten::addmm", "aten::linear", None, "aten::other_thread", None]
    assert mods == ["Outer_0/Inner_0", "Outer_0/Inner_0", "Outer_0", None, "Outer_0"]


def test_missing_totals_are_rebuilt_from_bytes():
    tb = TraceBuilder()
    tb.alloc(1.0, 0x1, 100, with_totals=False)
    tb.alloc(2.0, 0x2, 50, with_totals=False)
    tb.free(3.0, 0x1, with_totals=False)
    mem = ct.memory_events(tb.to_bytes(), "old.json")
    assert mem.total_allocated.tolist() == [100, 150, 50]


def test_downsampling_many_events_keeps_the_exact_peak():
    tb = TraceBuilder()
    rng = np.random.default_rng(0)
    live = []
    for k in range(20_000):
        if live and (rng.random() < 0.5 or len(live) > 300):
            tb.free(float(k), live.pop(int(rng.integers(len(live)))))
        else:
            tb.alloc(float(k), 0x10 * (k + 1), int(rng.integers(1, 10_000)))
            live.append(0x10 * (k + 1))
    mem = ct.memory_events(tb.to_bytes(), "many.json")
    out = tm.from_memory_events(mem, max_points=300)
    tl = out["devices"][0]["timeline"]
    assert 2 <= len(tl["timeMs"]) <= 300
    assert max(tl["allocatedBytes"]) == int(mem.total_allocated.max())
    assert max(tl["reservedBytes"]) == int(mem.total_reserved.max())
    assert out["devices"][0]["summary"]["peakAllocatedBytes"] == int(mem.total_allocated.max())


def test_huge_trace_writer_small(tmp_path):
    """The benchmark's generator, at a small size: streaming parse matches its facts."""
    path = tmp_path / "huge.pt.trace.json.gz"
    facts = write_huge_trace(path, memory_events=30_000, gz=True)
    with open(path, "rb") as f:
        mem = ct.memory_events(f, str(path))
    assert len(mem) == facts["memoryEvents"]
    out = tm.from_memory_events(mem)
    dev = out["devices"][0]
    assert dev["summary"]["peakAllocatedBytes"] == facts["peakTotalAllocated"]
    assert dev["summary"]["numAllocations"] == facts["allocations"]
    assert dev["summary"]["numDeallocations"] == facts["frees"]
    growth = next(h for h in dev["leakHints"] if h["kind"] == "stepGrowth")
    assert growth["evidence"]["bytesPerStep"] == facts["leakBytesPerStep"]


def test_many_steps_growth_is_per_step():
    """More steps than checkpoints: growth is still reported per step."""
    steps, leak = 150, 2048
    dev = _built(steady_leak(steps=steps, leak_bytes=leak))["devices"][0]
    growth = next(h for h in dev["leakHints"] if h["kind"] == "stepGrowth")["evidence"]
    assert growth["bytesPerStep"] == leak and growth["stepsCompared"] == steps - 1
    assert len(growth["checkpoints"]) == len(growth["liveBytesAtStepEnd"]) <= tm.MAX_EVIDENCE_POINTS
    rising = next(h for h in dev["leakHints"] if h["kind"] == "risingOp")["evidence"]
    assert rising["op"] == "aten::clone" and rising["bytesPerStep"] == leak
    assert len(rising["checkpoints"]) <= tm.MAX_CHECKPOINTS
    assert dev["numSteps"] == steps and len(dev["steps"]) == steps


def test_trace_without_memory_events():
    """A JAX trace has no [memory] events: an empty payload, not an error."""
    path = next(DEMO.rglob("demo-host.trace.json.gz"))
    with open(path, "rb") as f:
        mem = ct.memory_events(f, str(path))
    assert len(mem) == 0 and mem.num_ops > 0
    out = tm.from_memory_events(mem)
    assert out["devices"] == [] and out["source"]["memoryEvents"] == 0
    assert tm.counter_series(mem)["tracks"] == []


def test_progress_reports():
    class Rec:
        def __init__(self):
            self.calls = []

        def update(self, fraction=None, message=None):
            self.calls.append((fraction, message))

    rec = Rec()
    with open(_trace("transformer_train"), "rb") as f:
        mem = ct.memory_events(f, "t", progress=rec)
    tm.from_memory_events(mem, progress=rec)
    assert rec.calls[-1][0] == 1.0
    assert all(f is None or 0 <= f <= 1 for f, _ in rec.calls)
