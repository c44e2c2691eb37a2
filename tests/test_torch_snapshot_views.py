"""profscope.tools.memory_profile_snapshot: the views, checked against independent counts."""

from __future__ import annotations

import bisect
import collections
import io
import itertools
import pickle
import time

import numpy as np
import pytest

from profscope.errors import BadRequest, NotFound
from profscope.formats.snapshot_pickle import load_snapshot
from profscope.tools import memory_profile_snapshot as V
from profscope.testing import torch_snapshot as b

FILES = b.FIXTURE_FILES
INF, TRAIN = FILES[3], FILES[4]


class Plain(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name}")


@pytest.fixture(scope="module")
def snaps(shared_fixtures):
    root = shared_fixtures / "torch_snapshots"
    out = {}
    for f in FILES:
        data = (root / f).read_bytes()
        out[f] = (Plain(io.BytesIO(data)).load(), load_snapshot(data, f))
    return out


def blocks_of(d, device=0):
    """(address, block dict, segment) with legacy addresses computed."""
    for sg in d["segments"]:
        if sg["device"] != device:
            continue
        off = sg["address"]
        for bl in sg["blocks"]:
            yield bl.get("address", off), bl, sg
            off += bl["size"]


def replay(d, device=0):
    """memory_viz's process_alloc_data in plain Python -> (live after each event, elements)."""
    tr = d["device_traces"][device] if device < len(d["device_traces"]) else []
    open_, pre, deltas = {}, 0, []
    for e in tr:
        if e["action"] == "alloc":
            open_[e["addr"]] = e["size"]
            deltas.append(e["size"])
        elif e["action"] == "free_completed":
            if e["addr"] in open_:
                deltas.append(-open_.pop(e["addr"]))
            else:
                pre += e["size"]
                deltas.append(-e["size"])
        else:
            deltas.append(0)
    for a, bl, _ in blocks_of(d, device):
        if bl["state"] == "active_allocated" and a not in open_:
            pre += bl.get("requested_size", bl["size"])
    live, cur = [], pre
    for x in deltas:
        cur += x
        live.append(cur)
    return live, pre


@pytest.mark.parametrize("name", FILES)
def test_overview_numbers(snaps, name):
    d, s = snaps[name]
    o = V.overview(s, 0)
    tr = d["device_traces"][0]
    assert o["summary"]["traceEntries"] == len(tr)
    assert o["summary"]["actions"] == dict(collections.Counter(e["action"] for e in tr))
    act = [bl for _, bl, _ in blocks_of(d) if bl["state"].startswith("active")]
    assert o["summary"]["finalActiveBytes"] == sum(bl["size"] for bl in act)
    assert o["summary"]["finalReservedBytes"] == sum(sg["total_size"] for sg in d["segments"])
    live, _ = replay(d)
    assert o["summary"]["peak"]["bytes"] == max(live)
    assert live[o["summary"]["peak"]["event"]] == max(live)
    assert o["summary"]["finalLiveBytes"] == live[-1] == sum(
        bl.get("requested_size", bl["size"]) for bl in act)
    assert o["segments"]["count"] == len(d["segments"])
    json_roundtrip(o)


def json_roundtrip(x):
    import json
    assert json.loads(json.dumps(x)) == x


def test_known_peaks_and_warnings(snaps):
    o = V.overview(snaps[TRAIN][1], 0)
    assert o["summary"]["peak"]["bytes"] == 7_013_335_044  # README: reconstructed max live
    assert o["summary"]["unmatchedFrees"] == {"count": 438, "bytes": 3_385_466_880}
    assert "trace_starts_mid_run" in [w["code"] for w in o["warnings"]]
    assert o["annotationBands"][0]["name"] == "Optimizer.step#AdamW.step"
    assert o["format"]["era"] == "2025+"
    assert V.overview(snaps[INF][1], 0)["summary"]["peak"]["bytes"] == 1_736_962_048
    assert V.overview(snaps[FILES[0]][1], 0)["format"]["era"] == "2023"


def state_replay(d, event, device=0):
    """memory_viz simulate_memory, straightforwardly: active blocks {addr: size} after event."""
    bm = {a: bl.get("requested_size", bl["size"]) for a, bl, _ in blocks_of(d, device)
          if bl["state"] in ("active_allocated", "active_pending_free")}
    tr = d["device_traces"][device]
    for e in reversed(tr[event + 1:]):
        if e["action"] == "free_completed":
            bm[e["addr"]] = e["size"]
        elif e["action"] == "alloc":
            bm.pop(e["addr"], None)
    return bm


@pytest.mark.parametrize("name", FILES)
def test_state_at_matches_replay(snaps, name):
    d, s = snaps[name]
    n = len(d["device_traces"][0])
    final = V.state_at(s, 0)
    last = V.state_at(s, 0, n - 1)
    act = [(a, bl) for a, bl, _ in blocks_of(d) if bl["state"].startswith("active")]
    assert last["totals"]["activeBytes"] == final["totals"]["activeBytes"] == sum(bl["size"] for _, bl in act)
    assert last["totals"]["reservedBytes"] == sum(sg["total_size"] for sg in d["segments"])
    got = sorted((bl["address"], bl["size"], bl["requested"]) for sg in last["segments"]
                 for bl in sg["blocks"] if bl["state"] != "inactive")
    assert got == sorted((a, bl["size"], bl.get("requested_size", bl["size"])) for a, bl in act)
    inactive = sum(bl["size"] for _, bl, _ in blocks_of(d) if bl["state"] == "inactive")
    assert last["totals"]["externalFragmentation"] == inactive
    for ev in sorted({0, n // 3, n // 2, n - 1}):
        st = V.state_at(s, 0, ev)
        want = state_replay(d, ev)
        got = {bl["address"]: bl["requested"] for sg in st["segments"] for bl in sg["blocks"]
               if bl["state"] != "inactive"}
        assert got == want
        assert st["totals"]["requestedBytes"] == sum(want.values())


@pytest.mark.parametrize("name", [INF, TRAIN, FILES[1]])
@pytest.mark.parametrize("top,max_points", [(200, 2000), (5, 50)])
def test_timeline_polygons(snaps, name, top, max_points):
    d, s = snaps[name]
    live, _ = replay(d)
    tl = V.timeline(s, 0, top=top, max_points=max_points)
    assert max(tl["total"]["bytes"]) == max(live) == tl["peak"]["bytes"]
    assert all(live[i] == v for i, v in zip(tl["total"]["index"], tl["total"]["bytes"]))
    assert tl["drawn"] == min(top, tl["allocationsInWindow"])
    # at every point of the "others" band: polygons (read as left steps) never overlap and
    # polygons + band == the exact total
    for x, y0, y1 in zip(*(tl["others"][k] for k in ("x", "y0", "y1"))):
        assert y1 == live[x]
        spans = []
        for a in tl["allocations"]:
            px = a["polygon"]["x"]
            if not px or x < px[0] or x > px[-1]:
                continue
            j = bisect.bisect_right(px, x) - 1
            spans.append((a["polygon"]["y0"][j], a["polygon"]["y1"][j]))
        spans.sort()
        for (_, a1), (b0, _) in itertools.pairwise(spans):
            assert a1 <= b0
        assert sum(h1 - h0 for h0, h1 in spans) == y0
    sizes = sorted((a["size"] for a in tl["allocations"]), reverse=True)
    assert sizes == sorted(sizes, reverse=True)


def test_timeline_window_and_time(snaps):
    _, s = snaps[TRAIN]
    tl = V.timeline(s, 0, 1000, 3000, max_points=100)
    assert tl["window"] == {"start": 1000, "end": 3000} and tl["decimated"]
    assert all(1000 <= i < 3000 for i in tl["total"]["index"])
    o = V.overview(s, 0)["summary"]
    tt = V.timeline(s, 0, o["firstTimeUs"], o["lastTimeUs"] + 1, x="time")
    assert tt["peak"]["bytes"] == o["peak"]["bytes"] and tt["x"] == "time"
    assert tt["peak"]["x"] == o["peak"]["timeUs"]
    with pytest.raises(BadRequest):
        V.timeline(snaps[FILES[1]][1], 0, x="time")  # no time_us
    with pytest.raises(BadRequest):
        V.timeline(s, 0, 5, 5)
    with pytest.raises(BadRequest):
        V.timeline(s, 0, 0, 10**9)


def test_stacks(snaps):
    _, s = snaps[TRAIN]
    sid = max(range(len(s.stacks)), key=lambda i: len(s.stacks[i]))
    full = V.stack(s, sid, filtered=False)
    filt = V.stack(s, sid)
    assert full["unfilteredCount"] == len(s.stacks[sid]) == len(full["frames"])
    assert 0 < len(filt["frames"]) < len(full["frames"])
    names = [f["name"] for f in filt["frames"]]
    assert not any("unwind::unwind" in n or "_start" in n or "PyEval_" in n for n in names)
    with pytest.raises(NotFound):
        V.stack(s, len(s.stacks))
    ic = V.stacks_at(s, 0)
    assert ic["totalBytes"] == ic["values"][0] == 7_013_335_044 and ic["atPeak"]
    pos = {k: i for i, k in enumerate(ic["ids"])}
    kids = collections.defaultdict(int)
    for p, v in zip(ic["parents"], ic["values"]):
        if p:
            assert p in pos
            kids[p] += v
    for p, tot in kids.items():
        assert tot <= ic["values"][pos[p]]
    small = V.stacks_at(s, 0, 100, max_nodes=10)
    assert small["nodes"] <= 10 + 10 and "other" in small["labels"]
    live, _ = replay(snaps[TRAIN][0])
    assert small["totalBytes"] == live[100]


def test_compare(snaps):
    _, a = snaps[INF]
    _, t = snaps[TRAIN]
    same = V.compare(t, t, 0, 0)
    assert same["sites"] == [] and same["summary"]["onlyA"]["sites"] == 0
    assert same["segments"]["onlyACount"] == same["segments"]["onlyBCount"] == 0
    c = V.compare(a, t, 0, 0)
    assert c["summary"]["onlyB"]["bytes"] > 0 and c["summary"]["deltaBytes"] == 6_816_891_392 - 1_703_276_544
    assert sum(r["deltaBytes"] for r in c["sites"]) == c["summary"]["deltaBytes"]
    only_b = [r for r in c["sites"] if r["in"] == "onlyB"]
    assert c["summary"]["onlyB"] == {"sites": 7, "blocks": 659, "bytes": 5_105_070_592}
    assert any(r["site"]["filename"].endswith("optimizer.py") for r in only_b)
    # training-only: optimizer state (AdamW) and gradients (autograd engine)
    assert any("optimizer.py" in str(V.stack(t, r["stackIdB"])) for r in only_b)
    assert any("autograd" in str(V.stack(t, r["stackIdB"])) for r in only_b)
    d = [abs(r["deltaBytes"]) for r in c["sites"]]
    assert d == sorted(d, reverse=True)


def test_builders_expandable_oom_multidevice():
    s = load_snapshot(b.to_pickle(b.expandable_oom_multidevice()), "x.pickle")
    o = V.overview(s, 0)
    codes = [w["code"] for w in o["warnings"]]
    assert "trace_overflow" in codes
    oom = o["ooms"][0]
    assert oom["event"] == 6 and oom["requestedBytes"] == 64 * b.GB and oom["deviceFreeBytes"] == 123 * b.MB
    assert oom["liveBytes"] == 2 * b.MB and oom["largestFreeBlock"] == 16 * b.MB
    assert o["segments"]["expandableCount"] == 1
    tl = V.timeline(s, 0)
    assert tl["reserved"]["reservedBytes"] == [20 * b.MB] * 5 + [18 * b.MB] * 2
    # before the segment_map there was no segment; after the unmap 18 MB
    assert V.state_at(s, 0, 0)["totals"]["reservedBytes"] == 20 * b.MB
    assert V.state_at(s, 0, 6)["totals"]["reservedBytes"] == 18 * b.MB
    st = V.state_at(s, 0, 3)  # free_requested of the 4 MB block
    states = {bl["address"]: bl["state"] for sg in st["segments"] for bl in sg["blocks"]}
    assert states[0x7F0000000000 + 2 * b.MB] == "active_pending_free"
    o1 = V.overview(s, 1)
    assert {tuple(p["poolId"]) for p in o1["segments"]["byPool"]} == {(0, 0), (1, 0)}
    with pytest.raises(NotFound):
        V.overview(s, 5)
    with pytest.raises(BadRequest):
        V.state_at(s, 0, 7)
    with pytest.raises(BadRequest):
        V.stacks_at(s, 1, -1)


def test_builders_ring_and_legacy():
    s = load_snapshot(b.to_pickle(b.ring_buffer()), "r.pickle")
    o = V.overview(s, 0)
    assert o["summary"]["unmatchedFrees"] == {"count": 1, "bytes": 1024}
    tl = V.timeline(s, 0)
    assert tl["total"]["bytes"] == [1024, 0, 1000]
    pre = [a for a in tl["allocations"] if a["preexisting"]]
    assert pre and pre[0]["freeIndex"] == 1
    s2 = load_snapshot(b.to_pickle(b.legacy_2023()), "l.pickle")
    st = V.state_at(s2, 0)
    assert [bl["address"] for bl in st["segments"][0]["blocks"]] == [0x200000, 0x200200, 0x200800]
    assert st["totals"]["internalFragmentation"] == 12 + 48


def synth(n_allocs: int, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    sizes = (rng.integers(1, 2048, n_allocs) * 512).tolist()
    tr, live = [], []
    addr = 0x10000000
    t = 0
    for i in range(n_allocs):
        a = addr + i * (1 << 21)
        tr.append({"action": "alloc", "addr": a, "size": sizes[i], "stream": 0, "time_us": t})
        live.append(i)
        t += 1
        if len(live) > 50 and rng.random() < 0.6:
            j = live.pop(int(rng.integers(0, len(live))))
            tr.append({"action": "free_completed", "addr": addr + j * (1 << 21), "size": sizes[j],
                       "stream": 0, "time_us": t})
            t += 1
    return {"segments": [], "device_traces": [tr]}


def test_synthetic_large_trace_fast():
    d = synth(120_000)
    s = load_snapshot(b.to_pickle(d), "big.pickle")
    t0 = time.process_time()  # CPU seconds, not wall time (a busy machine must not fail it)
    o = V.overview(s, 0)
    tl = V.timeline(s, 0)
    tl2 = V.timeline(s, 0, 1000, 50_000, top=50)
    elapsed = time.process_time() - t0
    live, _ = replay(d)
    assert o["summary"]["peak"]["bytes"] == max(live) == max(tl["total"]["bytes"])
    assert max(tl2["total"]["bytes"]) == max(live[1000:50_000])
    assert len(tl["total"]["x"]) <= 2002
    assert elapsed < 10
