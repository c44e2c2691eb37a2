"""GET /api/trace_clock (issue 37, "from the memory profile and the snapshot"): where a
time of the memory profile or of a memory snapshot falls on the trace viewer's clock.

Each link is checked the way a user follows it: the trace viewer's window the page would
open (/api/trace/window around the time the answer gives) holds, at exactly that time, the
same allocator event (its counter sample, with the memory profile's heap bytes), i.e. it
lands on the event itself. And the other way: where the run has no trace of the same
process (or the clocks cannot be matched) there is no offset and the answer says why."""

from __future__ import annotations

import pytest

from profscope.testing import memory_trace, torch_snapshot
from profscope.testing.planted import client_for

TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
H100 = "traces/tracelens_h100_bert_small.trace.json.gz"
PAD_MS = 0.05  # the pages' window either side (memory_profile_timeline.js TRACE_PAD_MS)


@pytest.fixture(scope="module")
def public(shared_fixtures, tmp_path_factory):
    return client_for(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("clock_cache"))


def _clock(client, run, host=None):
    r = client.get("/api/trace_clock", params={"run": run, **({"host": host} if host else {})})
    assert r.status_code == 200, r.text
    return r.json()


def _counter_at(client, clock, counter: str, ms: float):
    """The counter's sample at trace time ``ms`` in the window a link opens, or None."""
    w = client.get("/api/trace/window", params={"run": clock["trace"]["run"], "host": clock["trace"]["host"],
                                                "start_ms": ms - PAD_MS, "end_ms": ms + PAD_MS}).json()
    c = next(c for c in w["counters"] if c["name"] == counter)
    hits = [v for t, v in zip(c["t"], c["v"]) if abs(t - ms) < 1e-6]  # the same ns
    return hits[0] if hits else None


def _selected_sample(client, clock, entry: dict, ms: float) -> tuple[float, float]:
    """(time, value) of the counter sample the link's ctr/ct select (GET /api/trace/counter,
    what the trace page's counter card shows)."""
    p = client.get("/api/trace/counter", params={"run": clock["trace"]["run"], "host": clock["trace"]["host"],
                                                 "track": entry["counter"], "t": ms}).json()
    return p["time"], p["value"]


def _trace_ms(entry: dict, ps: str) -> float:
    """The trace ms of the memory profile event at ``ps`` as the page computes it
    (memory_profile_timeline.js traceTime): one offset, or the event's own time."""
    return int(ps) / 1e9 + entry["offsetMs"] if entry["offsetMs"] is not None else entry["traceMs"][ps]


@pytest.mark.parametrize("run,hosts,per_event", [
    (TF_GPU, ["34.83.195.179_6003", "34.83.195.180_6003"], False),  # one host line timestamp
    ("xplane/mi300_jax08_gemm/jax08_gemm", ["tw003"], True),  # host lines at 3 timestamps
    ("xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal", ["chi-mi300x-013.ord.vultr.cpe.ice.amd.com"], True),
])
def test_allocator_times_land_on_their_own_events(public, run, hosts, per_event):
    """Every allocator: the peak and 20 events spread over its timeline open the trace at
    that very allocator event (its counter sample there holds the event's heap bytes)."""
    checked = 0
    for host in hosts:
        clock = _clock(public, run, host)
        assert clock["trace"] == {"run": run, "host": host} and clock["why"] is None
        mp = public.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_profile", "host": host}).json()
        assert any(c.get("traceMs") for c in clock["clocks"].values()) == per_event
        for mid, per in mp["memoryProfilePerAllocator"].items():
            snaps = sorted(per["sampledTimelineSnapshots"], key=lambda s: int(s["timeOffsetPs"]))
            peak = per["profileSummary"]["peakStatsTimePs"]
            for s in snaps[:: max(1, len(snaps) // 20)] + [x for x in snaps if x["timeOffsetPs"] == peak][:1]:
                ms = _trace_ms(clock["clocks"][mid], s["timeOffsetPs"])
                heap = _counter_at(public, clock, f"{mid} heap allocated", ms)
                # events at the same ps: the counter keeps one of their values
                same = [int(x["aggregationStats"]["heapAllocatedBytes"]) for x in snaps if x["timeOffsetPs"] == s["timeOffsetPs"]]
                assert heap is not None and heap in same, (host, mid, s["timeOffsetPs"])
                # the sample the link selects (ctr/ct) is that one
                t, v = _selected_sample(public, clock, clock["clocks"][mid], ms)
                assert abs(t - ms) < 1e-6 and v in same
                checked += 1
    assert checked > 20


def test_pytorch_trace_memory_times_land_on_their_own_events(public):
    """tracelens H100 ([memory] events with Total Allocated): each timeline point of the
    memory profile opens the trace at its [memory] event's counter sample."""
    clock = _clock(public, H100)
    assert clock["trace"]["run"] == H100 and clock["why"] is None
    payload = public.get("/api/memory_profile", params={"run": H100}).json()
    dev = next(d for d in payload["devices"] if d["device"] == "CUDA:0")
    off = clock["clocks"]["CUDA:0"]["offsetMs"]
    tl = dev["timeline"]
    for i in range(0, len(tl["timeMs"]), max(1, len(tl["timeMs"]) // 25)):
        got = _counter_at(public, clock, "memory allocated (device 0)", tl["timeMs"][i] + off)
        assert got == tl["allocatedBytes"][i], i
        t, v = _selected_sample(public, clock, clock["clocks"]["CUDA:0"], tl["timeMs"][i] + off)
        assert abs(t - tl["timeMs"][i] - off) < 1e-6 and v == tl["allocatedBytes"][i]


def test_no_matching_trace_no_link_and_why(public, demo_logdir, tmp_path):
    """No dead link: a public snapshot has no trace beside it; a profile without allocator
    events (the demo's JAX CPU MLP) has nothing to place: no offset, and a reason."""
    snap = _clock(public, "snapshots/niu_fwd_bwd_200_mixed.pickle")
    assert snap["trace"] is None and snap["clocks"] == {} and "no PyTorch trace sits beside" in snap["why"]
    demo = client_for(demo_logdir, tmp_path / "cache")
    mlp = next(r for r in demo.get("/data/plugin/profile/runs").json() if r.startswith("mlp/"))
    got = _clock(demo, mlp)
    assert got["trace"] is None and got["clocks"] == {} and got["why"]


def test_bad_run_or_host_is_a_4xx(public):
    assert public.get("/api/trace_clock", params={"run": "nope"}).status_code == 404
    r = public.get("/api/trace_clock", params={"run": TF_GPU, "host": "nohost"})
    assert r.status_code == 404 and "nohost" in r.json()["error"]


def _workspace_client(logdir, cache_dir):
    """A TestClient and its workspace (the cache is looked into: what a request built)."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server import create_app
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache_dir))
    return TestClient(create_app(ws)), ws


def _index_built(ws, run: str, host: str) -> bool:
    r = ws.run(run)
    return ws.cache.is_built(ws._trace_index_key(host, dict(ws.trace_sources(r))[host]))


@pytest.mark.parametrize("run,host", [
    ("xplane/mi300_jax08_gemm/jax08_gemm", "tw003"),  # an xplane's allocators
    (H100, None),  # a PyTorch trace's [memory] events
])
def test_index_built_only_answers_pending_and_builds_nothing(shared_fixtures, tmp_path, run, host):
    """Opening the memory profile asks ``index=built``: on a fresh cache that builds no trace
    index (seconds and hundreds of MiB on a large profile, a Dask submission under --dask)
    and says pending; once the trace viewer has indexed the trace, the same question gets
    the full clock, equal to the one asked without ``index``."""
    client, ws = _workspace_client(shared_fixtures / "public_profiles", tmp_path / "cache")
    h = {"host": host} if host else {}
    key_host = host or dict(ws.trace_sources(ws.run(run))).popitem()[0]
    got = client.get("/api/trace_clock", params={"run": run, **h, "index": "built"})
    assert got.status_code == 200, got.text
    got = got.json()
    assert got["pending"] is True and got["trace"] is None and got["why"] == "the trace is not indexed yet"
    assert not _index_built(ws, run, key_host)  # nothing built (nor converting: a sync build would be done)
    assert client.get("/api/trace/window", params={"run": run, **h}).status_code == 200
    assert _index_built(ws, run, key_host)
    built = client.get("/api/trace_clock", params={"run": run, **h, "index": "built"}).json()
    assert built["pending"] is False and built["trace"] is not None
    assert built == _clock(client, run, host)


def test_snapshot_index_built_only_waits_for_its_traces_index(tmp_path):
    """The snapshot page's question: the trace beside it is not indexed, so pending, and
    nothing built; after the trace viewer indexed it, the snapshot's own clock."""
    (tmp_path / "logs").mkdir()
    snapshot_and_trace(tmp_path / "logs")
    client, ws = _workspace_client(tmp_path / "logs", tmp_path / "cache")
    q = {"run": "snap.pickle", "host": "cuda:0", "index": "built"}
    got = client.get("/api/trace_clock", params=q).json()
    assert got["pending"] is True and got["trace"] is None
    assert not _index_built(ws, "run.pt.trace.json", "run.pt.trace.json")
    client.get("/api/trace/window", params={"run": "run.pt.trace.json"}).raise_for_status()
    built = client.get("/api/trace_clock", params=q).json()
    assert built["pending"] is False and built["trace"] == {"run": "run.pt.trace.json", "host": "run.pt.trace.json"}
    assert built == _clock(client, "snap.pickle", "cuda:0")


def test_index_other_than_built_is_a_400(public):
    r = public.get("/api/trace_clock", params={"run": TF_GPU, "index": "all"})
    assert r.status_code == 400 and "index" in r.json()["error"]


# -- a snapshot and the PyTorch trace its run recorded beside it (builders) ----------------

BASE_NS = 1_700_000_000_000_000_000  # memory_trace.TraceBuilder's baseTimeNanoseconds


def snapshot_and_trace(folder, *, skew_us: int = 0, device: int = 0):
    """``segment_freed_mid_trace`` (time_us from 1,700,000,100,000,001 µs, Unix) and a kineto
    trace of the same run: its [memory] events on CUDA:0 at the same Unix times (ts =
    time_us - baseTimeNanoseconds / 1000), plus ``skew_us`` (another run's trace); its
    events on CUDA:``device`` (another device than the snapshot's: not its process's)."""
    snap = torch_snapshot.segment_freed_mid_trace()
    (folder / "snap.pickle").write_bytes(torch_snapshot.to_pickle(snap))
    tb = memory_trace.TraceBuilder()
    t0 = snap["device_traces"][0][0]["time_us"] - BASE_NS // 1000 + skew_us
    tb.op("aten::empty", t0 - 5000, 30)  # the trace runs 5 ms either side: a link's window sits inside it
    tb.op("aten::zero_", t0 + 5000, 30)
    for e in snap["device_traces"][0]:
        ts = e["time_us"] - BASE_NS // 1000 + skew_us
        if e["action"] == "alloc":
            tb.alloc(ts, e["addr"], e["size"], memory_trace.CUDA, device)
        elif e["action"] == "free_completed":
            tb.free(ts, e["addr"], memory_trace.CUDA, device)
    tb.write(folder / "run.pt.trace.json")
    return snap


def test_snapshot_beside_its_trace_lands_on_the_same_event(tmp_path):
    """Each alloc / free of the snapshot opens the trace at its [memory] event (the
    counter sample at that time holds the allocated bytes after it)."""
    (tmp_path / "logs").mkdir()
    snap = snapshot_and_trace(tmp_path / "logs")
    client = client_for(tmp_path / "logs", tmp_path / "cache")
    clock = _clock(client, "snap.pickle", "cuda:0")
    assert clock["trace"] == {"run": "run.pt.trace.json", "host": "run.pt.trace.json"}, clock
    mine = clock["clocks"]["cuda:0"]
    live = 0
    for e in snap["device_traces"][0]:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        live += e["size"] if e["action"] == "alloc" else -e["size"]
        ms = (e["time_us"] - mine["sinceUs"]) / 1000 + mine["offsetMs"]
        assert _counter_at(client, clock, "memory allocated (device 0)", ms) == live, e
        t, v = _selected_sample(client, clock, mine, ms)
        assert abs(t - ms) < 1e-6 and v == live


def test_snapshot_beside_another_runs_trace_gets_no_link(tmp_path):
    """The same trace one hour later: not the snapshot's run, so no offset, and the why
    names both time spans."""
    (tmp_path / "logs").mkdir()
    snapshot_and_trace(tmp_path / "logs", skew_us=3_600_000_000)
    clock = _clock(client_for(tmp_path / "logs", tmp_path / "cache"), "snap.pickle", "cuda:0")
    assert clock["trace"] is None and "not the same run" in clock["why"] and "2023-11-14" in clock["why"]


def test_snapshot_beside_a_trace_of_another_device_gets_no_link(tmp_path):
    """The same times, but the trace's [memory] events are CUDA:1's: the snapshot's cuda:0
    is not in it, so no offset, and the why says which device is missing."""
    (tmp_path / "logs").mkdir()
    snapshot_and_trace(tmp_path / "logs", device=1)
    clock = _clock(client_for(tmp_path / "logs", tmp_path / "cache"), "snap.pickle", "cuda:0")
    assert clock["trace"] is None and "recorded no CUDA device 0" in clock["why"]
