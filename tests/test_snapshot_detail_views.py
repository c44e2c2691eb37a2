"""The snapshot views added for issue 16 (tools/memory_profile_snapshot.py), on the real
fixtures and the builders: which allocations the timeline draws, the segment timeline,
the event list and its search, site labels by first user frame, and the in-server
answers of the stepping views. References are computed here from the reader's columns."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from profscope.formats.snapshot_pickle import load_snapshot
from profscope.testing import torch_snapshot as b
from profscope.tools import memory_profile_snapshot as V

FIX = "torch_snapshots/Wedsonlin_assignment2-systems"
TRAIN = "medium_128_training_memory_snapshot.pickle"
INFER = "medium_128_inference_memory_snapshot.pickle"


@pytest.fixture(scope="module")
def snaps(shared_fixtures):
    out = {}
    for rel in (f"{FIX}/{TRAIN}", f"{FIX}/{INFER}", "../public_profiles/snapshots/niu_fwd_bwd_200_mixed.pickle",
                "../public_profiles/snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle"):
        p = shared_fixtures / "torch_snapshots" / rel if rel.startswith("..") else shared_fixtures / rel
        with open(p.resolve(), "rb") as f:
            out[p.name] = load_snapshot(f, p.name)
    out["built"] = load_snapshot(b.to_pickle(b.expandable_oom_multidevice()), "built.pickle")
    return out


def _live_at(dv, i):
    return (dv.start <= i) & (dv.end > i)


@pytest.mark.parametrize("detail", [200, 600, V.MAX_DETAIL])
def test_the_peak_is_drawn_first(snaps, detail):
    s = snaps[TRAIN]
    tl = V.timeline(s, 0, top=detail)
    dv = V._dev(s, 0)
    pk = tl["peak"]["event"]
    live = np.nonzero(_live_at(dv, pk))[0]
    drawn = {a["id"] for a in tl["allocations"]}
    at_peak = [e for e in live.tolist() if e in drawn]
    # allocations live at the peak come first: with room for them all, all are drawn
    assert len(at_peak) == min(detail, len(live))
    assert tl["peak"]["drawnBytes"] == sum(int(dv.size[e]) for e in at_peak)
    if detail >= len(live):
        assert tl["peak"]["drawnBytes"] == tl["peak"]["bytes"] == 7_013_335_044
    # 200 by size alone (the old rule) drew 0.83 GiB of the 6.53 GiB peak; peak-first, 200 hold more
    if detail == 200:
        assert tl["peak"]["drawnBytes"] > 2 * 0.83 * 2**30


def test_zoomed_window_every_event_is_a_column(snaps):
    s = snaps[TRAIN]
    tl = V.timeline(s, 0, 9000, 11000, max_points=2000)
    assert not tl["decimated"] and tl["total"]["index"] == list(range(9000, 11000))
    assert tl["drawn"] == tl["allocationsInWindow"] == tl["visibleInWindow"] > 200
    for a in tl["allocations"]:
        p = a["polygon"]
        assert p["x"][0] == max(9000, a["allocIndex"] if a["allocIndex"] is not None else 0)
        assert p["x"] == sorted(p["x"]) and p["xEnd"] >= p["x"][-1]
        assert all(y1 - y0 == a["size"] for y0, y1 in zip(p["y0"], p["y1"]))


@pytest.mark.parametrize("name", [TRAIN, "niu_fwd_bwd_200_mixed.pickle", "bolong_xl_fwd_cl2048_fp32_expandable.pickle", "built"])
def test_segment_timeline_adds_up_to_reserved(snaps, name):
    s = snaps[name]
    for d in s.devices:
        dv, sg = V._segs(s, d)
        if dv.n == 0:
            continue
        # reserved after each event, by a plain walk: final segments minus later deltas
        tr = s.traces[d]
        sign = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
        delta = np.array([sign.get(s.action_names[a], 0) for a in tr.action.tolist()], np.int64) * tr.size
        final = int(s.segments.total_size[s.segments.device == d].sum())
        reserved = final - int(delta.sum()) + np.cumsum(delta)
        for i in range(dv.n):
            assert int(sg.size[(sg.start <= i) & (sg.end > i)].sum()) == reserved[i], (name, d, i)
        st = V.segment_timeline(s, d)
        assert st["peak"]["bytes"] == int(reserved.max())
        assert st["reserved"]["reservedBytes"] == reserved[st["reserved"]["index"]].tolist()


def test_niu_segments_are_reserved_during_the_trace(snaps):
    st = V.segment_timeline(snaps["niu_fwd_bwd_200_mixed.pickle"], 0)
    assert st["drawn"] == 88 and all(x["action"] == "segment_alloc" and not x["preexisting"] for x in st["segments"])
    ov = V.overview(snaps["niu_fwd_bwd_200_mixed.pickle"], 0)["summary"]
    assert ov["peakReserved"] == {"bytes": st["peak"]["bytes"], "event": st["peak"]["event"], "timeUs": ov["peakReserved"]["timeUs"]}


def test_events_page_versions_and_search(snaps):
    s = snaps[TRAIN]
    tr = s.traces[0]
    page = V.events(s, 0, 100, 300)
    assert page["rows"]["event"] == list(range(100, 300))
    assert page["rows"]["addr"] == tr.addr[100:300].tolist()
    # memory_viz's version: frees of the same address before the entry
    names = s.action_names
    seen: dict = {}
    want = []
    for i in range(300):
        a = int(tr.addr[i])
        want.append(seen.get(a, 0))
        if names[tr.action[i]] in ("free_completed", "free"):
            seen[a] = seen.get(a, 0) + 1
    assert page["rows"]["version"] == want[100:]
    assert len(V.events(s, 0)["rows"]["event"]) == V.EVENTS_PAGE
    addr = int(tr.addr[150])
    for q in (hex(addr), str(addr), f"b{addr:x}_0", f"{addr:x}"):
        r = V.events(s, 0, 0, 0, q=q)
        assert r["queryKind"] == "address"
        assert r["matches"] == np.nonzero((tr.addr == addr) | ((tr.addr <= addr) & (addr < tr.addr + tr.size)))[0].tolist()
    r = V.events(s, 0, 0, 0, q="IndexBackward0")
    frames = {i for i in range(len(s.frame_name)) if "indexbackward0" in s.strings[s.frame_name[i]].lower()}
    assert r["queryKind"] == "frame" and r["matchCount"] == sum(1 for st in tr.stack.tolist() if frames & set(s.stacks[st])) > 0
    assert V.events(s, 0, 0, 0, q="no such frame anywhere")["matchCount"] == 0
    with pytest.raises(V.BadRequest):
        V.events(s, 0, 0, 10**9)


def test_sites_are_named_by_the_first_user_frame(snaps):
    cmp = V.compare(snaps[TRAIN], snaps[INFER], 0, 0)
    sites = [r["site"] for r in cmp["sites"] if r["site"]]
    assert sites and not any("CachingAllocator" in x["name"] or "malloc" in x["name"] for x in sites)
    py = [x for x in sites if x["kind"] == "python"]
    assert all(x["filename"].endswith(".py") and "/torch/" not in x["filename"] for x in py)
    assert {(x["name"], x["line"]) for x in py if x["filename"].endswith("cs336_basics/optimizer.py")} == {("step", 76), ("step", 77)}
    cpp = [x for x in sites if x["kind"] == "cpp"]
    assert any(x["short"] == "torch::autograd::AccumulateGrad::accumulateGrad" for x in cpp)
    assert all(x["op"] for x in sites if x["kind"] == "python")
    assert V.short_name("void torch::autograd::AccumulateGrad::accumulateGrad<std::function<void (at::Tensor&&)> >(at::Tensor const&)") \
        == "torch::autograd::AccumulateGrad::accumulateGrad"
    assert V.short_name("step") == "step"


def test_stacks_name_what_has_no_stack(snaps):
    d = V.stacks_at(snaps[TRAIN], 0)
    assert "<allocated before recording began>" in d["labels"]
    rec = V.overview(snaps[TRAIN], 0)["summary"]["stacks"]
    assert rec["traceEntriesWithStack"] == rec["traceEntries"] == 19_136 and rec["pythonFrames"] and rec["cppFrames"]
    legacy = load_snapshot(b.to_pickle(b.ring_buffer()), "r.pickle")
    assert V.overview(legacy, 0)["summary"]["stacks"]["traceEntriesWithStack"] == 0


def test_stepping_views_answer_in_the_server(tmp_path, shared_fixtures):
    """state/events/stack come from the model in memory once it is saved: no worker runs."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server import create_app
    from profscope.storage import LogDir

    (tmp_path / "logs").mkdir()
    shutil.copy(shared_fixtures / FIX / TRAIN, tmp_path / "logs" / TRAIN)
    ws = Workspace(LogDir(str(tmp_path / "logs"), listing_ttl=0), DiskCache(tmp_path / "cache"))
    client = TestClient(create_app(ws))
    q = {"run": TRAIN, "host": "cuda:0"}
    assert client.get("/api/snapshot/overview", params=q).status_code == 200  # a worker saves the columns
    runs = ws.cache.workers.stats["runs"]
    for ev in (123, 124, 125):
        assert client.get("/api/snapshot/state", params={**q, "event": ev}).json()["event"] == ev
    e = client.get("/api/snapshot/events", params={**q, "start": 0, "end": 0, "q": "optimizer.py"}).json()
    assert e["matchCount"] > 1000
    assert client.get("/api/snapshot/stack", params={**q, "stack": 5}).json()["stackId"] == 5
    assert ws.cache.workers.stats["runs"] == runs
    if ws.cache.workers.enabled:  # the other views still go to a worker
        assert client.get("/api/snapshot/stacks", params={**q, "event": 5}).status_code == 200
        assert ws.cache.workers.stats["runs"] == runs + 1
    r = client.get("/api/snapshot/state", params={**q, "event": 10**7})
    assert r.status_code == 400 and "out of range" in r.json()["error"]


def test_polygon_points_are_bounded(monkeypatch):
    """Long-lived allocations on top of constant churn: every free below shifts them all.
    The answer lowers the detail until the points fit, keeping the peak's allocations first."""
    tr = []
    base = 0x10000000
    churn = 0x70000000
    for i in range(400):  # churn first: it sits at the bottom of the stack
        tr.append({"action": "alloc", "addr": churn + i * 4096, "size": 4096, "stream": 0})
    for i in range(300):  # then 300 long-lived ones above it
        tr.append({"action": "alloc", "addr": base + i * (1 << 21), "size": 1 << 20, "stream": 0})
    for i in range(400):  # every churn free shifts all 300 down
        tr.append({"action": "free_completed", "addr": churn + i * 4096, "size": 4096, "stream": 0})
    s = load_snapshot(b.to_pickle({"segments": [], "device_traces": [tr]}), "churn.pickle")
    full = V.timeline(s, 0)
    points = sum(len(a["polygon"]["x"]) for a in full["allocations"])
    assert full["detailCapped"] is None and points > 300 * 400
    monkeypatch.setattr(V, "MAX_POLYGON_POINTS", 20_000)
    cut = V.timeline(s, 0)
    assert cut["detailCapped"] is not None and cut["drawn"] <= cut["detailCapped"] < full["drawn"]
    assert sum(len(a["polygon"]["x"]) for a in cut["allocations"]) <= 20_000
    pk = cut["peak"]["event"]  # all 700 are live there: the ones kept are the largest of them
    assert all(a["allocIndex"] <= pk and a["freeIndex"] is None or a["freeIndex"] > pk for a in cut["allocations"])
    assert all(a["size"] == 1 << 20 for a in cut["allocations"])
