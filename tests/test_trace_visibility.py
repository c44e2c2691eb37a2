"""XProf's visibility filter: the events a trace_viewer@ window at a resolution returns.

Below XProf's 500,000-event threshold nothing is filtered (every event overlapping the
window comes back, both ends inclusive); above it, XProf's zoom levels and its per-row
rule pick the events. The golden comes from XProf 2.24.2 itself on a deterministic
640,000-event trace (scripts/record_xprof_visibility_golden.py); the small real profiles
are compared in test_trace_golden_public.py."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from profscope.tools import trace_visibility as tv
from profscope.testing.timelines import crowded_xspace

GOLDEN = Path(__file__).parent / "golden" / "trace_viewer" / "crowded_visibility.json.gz"


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


@pytest.fixture(scope="module")
def crowded(tmp_path_factory, golden):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    data = crowded_xspace()
    assert hashlib.sha256(data).hexdigest() == golden["input_sha256"], "the builder changed: re-record the golden"
    root = tmp_path_factory.mktemp("crowded")
    session = root / "run" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "crowded.xplane.pb").write_bytes(data)
    cache = tmp_path_factory.mktemp("cache")
    client = TestClient(create_app(Workspace(LogDir(str(root), listing_ttl=0), DiskCache(cache))))
    return client, "run/s1", cache


def _events(body: dict) -> Counter:
    # XProf prints µs with up to 17 digits; compare at the picosecond
    return Counter((e["name"], e["tid"], round(e["ts"] * 1e6), round(e["dur"] * 1e6))
                   for e in body["traceEvents"] if e["ph"] == "X")


def _golden(rows) -> Counter:
    return Counter((n, tid, round(ts * 1e6), round(dur * 1e6)) for n, tid, ts, dur in rows)


def test_whole_trace_at_4040_returns_xprofs_events(crowded, golden):
    client, run, cache = crowded
    assert golden["events"] >= tv.XPROF_FILTER_MIN_EVENTS
    r = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "resolution": 4040})
    assert r.status_code == 200, r.text
    body = r.json()
    want = _golden(golden["whole"]["complete"])
    assert len(want) < golden["events"] / 20  # the filter really thins this trace out
    assert _events(body) == want
    assert body["fullTimespan"] == pytest.approx(golden["whole"]["fullTimespan"], rel=1e-5)
    # the zoom levels computed for it are kept with the index: the next answer reads them
    assert list(Path(cache).rglob("xlevel.npy"))
    again = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", "resolution": 4040})
    assert _events(again.json()) == want


def test_window_at_4040_returns_xprofs_events(crowded, golden):
    client, run, _ = crowded
    g = golden["window"]
    r = client.get("/data/plugin/profile/data", params={
        "run": run, "tag": "trace_viewer@", "resolution": 4040,
        "start_time_ms": repr(g["start_time_ms"]), "end_time_ms": repr(g["end_time_ms"])})
    assert r.status_code == 200, r.text
    assert _events(r.json()) == _golden(g["complete"])


def test_no_filter_below_xprofs_threshold(demo_client):
    """The demo profiles are small: XProf returns all of their events at any resolution."""
    runs = [r for r in demo_client.get("/data/plugin/profile/runs").json() if r.startswith("transformer/")]
    run = runs[0]
    every = demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@"}).json()
    coarse = demo_client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@",
                                                                 "resolution": 100}).json()
    assert _events(coarse) == _events(every) and len(_events(every)) > 5000


def test_rule_keeps_first_per_depth_and_spaced_events():
    """VisibleAtResolution on a hand-made row (r = 10 ps): long events always, the first
    at each depth, then only those starting r after the last kept end at their depth."""
    #        parent, child a (first at depth 1), b (2 after a), c (24 after a), short, far (depth 0)
    start = [0, 1, 13, 35, 200]
    dur = [100, 10, 5, 5, 3]
    keep = tv.keep_mask(start, dur, [0] * 5, [-1] * 5, [False] * 5, 10)
    assert keep.tolist() == [True, True, False, True, True]
    # a flow's later slice follows its first one: flow 7's first slice is dropped (too close
    # to the row's last kept arrow), so is its end on another row, which the rule alone
    # would drop too; flow 9's first slice is kept, so its end is kept as well
    keep = tv.keep_mask([0, 3, 15, 17], [1, 1, 1, 1], [0, 0, 1, 1], [5, 7, -1, 7], [False, False, False, True], 10)
    assert keep.tolist() == [True, False, True, False]
    keep = tv.keep_mask([0, 30, 31, 33], [1, 1, 1, 1], [0, 0, 1, 1], [-1, 9, -1, 9], [False, False, False, True], 10)
    assert keep.tolist() == [True, True, True, True]
    # flow 7's first slice, dropped by the rule (3 after the last kept end at its depth),
    # ends before the row's last arrow end (its holder's, flow 5): XProf subtracts the two
    # as uint64, the difference wraps around, and the flow is kept (jax308's ynn_fusion /
    # bitcast_fusion slices, issue 40)
    for keep in (tv.keep_mask(*(np.array(c) for c in ([0, 1, 5], [100, 1, 1], [0, 0, 0], [5, -1, 7],
                                                      [False, False, False])), 10),
                 tv._keep_mask_py([0, 1, 5], [100, 1, 1], [0, 0, 0], [5, -1, 7], [False, False, False], 10)):
        assert keep.tolist() == [True, True, True]


def test_resolution_and_levels_follow_xprof():
    assert tv.resolution_ps(2_400_000_000_000, 4040) == 594_059_406
    assert tv.resolution_ps(10, 0) == 0
    assert tv.levels_needed(594_059_406) == 4  # reads 1 s .. 100 µs
    assert tv.levels_needed(10**12) == 0 and tv.levels_needed(0) == tv.N_LEVELS - 1
    assert tv.LAYER_RESOLUTIONS[0] == 10**12 and tv.LAYER_RESOLUTIONS[-1] == 1
    assert np.all(np.diff(tv.LAYER_RESOLUTIONS) < 0)


@pytest.mark.parametrize("rel", [
    "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "public_profiles/traces/kineto_resnet50_v100.pt.trace.json.gz",
])
def test_overlap_count_is_the_rows_count(rel, shared_fixtures, tmp_path):
    """``count_overlapping_closed`` (how xprof_visible decides between XProf's filter and
    the index's tiers without making millions of rows) counts what overlapping_closed
    returns: whole trace, windows at random, windows ending or starting on an event."""
    import random

    from profscope.formats import chrome_trace, xplane_trace
    from profscope.tools import trace_index as ti

    path = shared_fixtures / rel
    with open(path, "rb") as f:
        ev = (xplane_trace.read_trace(f, str(path), 0, "host") if path.name.endswith(".xplane.pb")
              else chrome_trace.trace_columns(f, str(path)))
    ti.build_index(ev, tmp_path)
    ix = ti.TraceIndex(tmp_path)
    rnd = random.Random(7)
    ends = [int(x) for x in ix.cols["start"][::97]] + [int(a + b) for a, b in zip(ix.cols["start"][::91], ix.cols["dur"][::91])]
    windows = [(0, ix.end_ps), (-5, ix.end_ps + 5), (ix.end_ps, ix.end_ps), (3, 2)]
    for _ in range(300):
        a, b = sorted(rnd.randrange(-10, ix.end_ps + 10) for _ in range(2))
        windows.append((a, b))
    windows += [(x, x + rnd.randrange(0, 10**9)) for x in rnd.sample(ends, min(50, len(ends)))]
    windows += [(x - rnd.randrange(0, 10**9), x) for x in rnd.sample(ends, min(50, len(ends)))]
    for s, e in windows:
        assert ix.count_overlapping_closed(s, e) == len(ix.overlapping_closed(s, e)), (s, e)


def _xprof_rule(start, dur, track, flow_id, flow_end, r) -> list[bool]:
    """``TraceViewerVisibility::VisibleAtResolution`` as XProf 2.24.2 writes it
    (``trace_viewer_visibility.cc``): ``RowVisibility::Depth`` scans the row's stack of
    kept ends from the bottom, a keep truncates the stack at its depth and pushes its
    end; a flow's slices follow its first one. The scan is quadratic on deep nestings,
    which is why profscope's passes search a clamped stack instead: this is what they
    must agree with."""
    rows, flows, out = {}, {}, []
    for b, d, t, fid, fend in zip(start, dur, track, flow_id, flow_end):
        stack, last = rows.setdefault(t, [[], None])
        depth = 0
        while depth < len(stack) and stack[depth] > b:
            depth += 1
        visible = d >= r or depth >= len(stack) or b - stack[depth] >= r
        if fid >= 0:
            first = fid not in flows
            if first:
                flows[fid] = visible
            if not visible:
                if first:  # span.end_ps() - *last_flow_timestamp_ps: uint64, wraps around
                    flows[fid] = last is None or (b + d - last) % 2**64 >= r
                visible = flows[fid]
            if fend:
                flows.pop(fid, None)
            if visible:
                rows[t][1] = b + d
        if visible:
            del stack[depth:]
            stack.append(b + d)
        out.append(visible)
    return out


def test_the_passes_agree_with_xprofs_scan_on_random_rows():
    """Crossing, nested, zero-length and flow-bound events on a few rows, in XProf's
    order: the window's pass (C and Python) keeps what XProf's own scan keeps; and the
    zoom levels (C and Python) put each event where the scan, run level by level as
    ``GetLiteTraceEventsByLevel`` does over the events not kept yet, would."""
    import random

    rnd = random.Random(32)
    for _ in range(1500):
        n = rnd.randrange(1, 80)
        ev = sorted(((rnd.randrange(60), rnd.choice([0, 1, 2, 5, 9, 30, 200]), rnd.randrange(3)) for _ in range(n)),
                    key=lambda e: (e[0], -e[1], e[2]))
        start, dur, track = (list(c) for c in zip(*ev))
        flow_id = [rnd.choice([-1, -1, -1, 0, 1, 2]) for _ in range(n)]
        flow_end = [rnd.random() < 0.3 for _ in range(n)]
        r = rnd.choice([1, 3, 8, 25])
        want = _xprof_rule(start, dur, track, flow_id, flow_end, r)
        assert tv._keep_mask_py(start, dur, track, flow_id, flow_end, r).tolist() == want
        if tv._native is not None:
            # track ids as an index's (from 0), sparse, negative or huge (numbered densely first)
            for tracks in (track, [7 * t + 3 for t in track], [t - 5 for t in track], [t + 10 ** 12 for t in track]):
                assert tv.keep_mask(*(np.array(c) for c in (start, dur, tracks, flow_id, flow_end)), r).tolist() == want
    for _ in range(300):  # zoom levels, flows aside: per level, the scan over what no coarser level kept
        n = rnd.randrange(1, 200)
        start = np.array([rnd.randrange(10 ** rnd.randrange(1, 13)) for _ in range(n)], np.int64)
        dur = np.array([rnd.choice([0, 1, 10 ** rnd.randrange(13)]) for _ in range(n)], np.int64)
        track = np.array([rnd.randrange(3) for _ in range(n)], np.int32)
        order = np.lexsort((-dur, start, track))
        want = np.full(n, tv.N_LEVELS - 1, np.int8)
        for k in range(tv.N_LEVELS - 1):
            # the rows' state counts the events kept at coarser levels too (SetVisibleAtResolution)
            rows, kept_before = {}, want < k
            for i in order.tolist():
                stack = rows.setdefault(int(track[i]), [])
                b, d = int(start[i]), int(dur[i])
                depth = 0
                while depth < len(stack) and stack[depth] > b:
                    depth += 1
                if kept_before[i] or d >= tv.LAYER_RESOLUTIONS[k] or depth >= len(stack) \
                        or b - stack[depth] >= tv.LAYER_RESOLUTIONS[k]:
                    if not kept_before[i]:
                        want[i] = k
                    del stack[depth:]
                    stack.append(b + d)
        for native in (tv._native, None):
            z = tv.ZoomLevels(start, dur, track, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool),
                              np.full(n, tv.NOT_YET, np.int8), -1)
            saved, tv._native = tv._native, native
            try:
                z.compute(tv.N_LEVELS - 1)
            finally:
                tv._native = saved
            assert z.level.tolist() == want.tolist()


DEEP = 200_000  # identical nested events: XProf's scan walks 2 * 10^10 stack entries over them


def _deep_passes(job) -> bytes:
    """Every pass over :data:`DEEP` identical nested events, C and Python: the window's
    (``keep_mask``) and the zoom levels'."""
    start, dur = np.full(DEEP, 1_000_000, np.int64), np.full(DEEP, 10_000_000, np.int64)
    zeros = np.zeros(DEEP, np.int64)
    kept, saved = [], tv._native
    try:
        for native in dict.fromkeys((saved, None)):  # C where it is built, and Python
            tv._native = native
            kept.append(int(tv.keep_mask(start, dur, zeros, zeros - 1, zeros.astype(bool), 100).sum()))
            z = tv.ZoomLevels(start, dur, zeros.astype(np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64),
                              np.zeros(0, bool), np.full(DEEP, tv.NOT_YET, np.int8), -1)
            z.compute(tv.N_LEVELS - 1)
            kept.append(int((z.level == 0).sum()))
    finally:
        tv._native = saved
    return json.dumps(kept).encode()


def test_deep_nestings_fit_a_workers_cpu_limit():
    """The passes walk a row's nesting in O(log depth) per event, not XProf's O(depth):
    200,000 identical nested events, in C and in Python, all of them in a conversion
    worker under a 60 CPU-second limit (XProf's scan: minutes in C, hours in Python).
    Each event is the first kept at its depth, so every one is kept, at level 0."""
    from profscope.cache.progress import ProgressBoard
    from profscope.cache.worker import WorkerPool

    board = ProgressBoard()
    job = board.start("deep", "deep nesting")
    got = WorkerPool(cpu_seconds=60, enabled=True).run(_deep_passes, job, board, file="deep")
    assert json.loads(got) == [DEEP] * (4 if tv._native is not None else 2)


def test_zoom_levels_are_made_in_a_worker_and_served_from_the_cache(tmp_path):
    """Past XProf's threshold, ``trace_viewer@`` has a conversion worker make XProf's zoom
    levels (a pass per level over the whole trace), as it has one build the index: the
    server process runs no pass over the whole trace. Later answers, and a server started
    again over the same cache, read them from the cache without a worker."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.server import create_app
    from profscope.storage import LogDir
    from profscope.testing import nestings

    logdir = tmp_path / "logs"
    logdir.mkdir()
    name = "deep.pt.trace.json.gz"
    nestings.write(logdir / name, "wide", tv.XPROF_FILTER_MIN_EVENTS + 10_000)

    def server():
        pool = WorkerPool(enabled=True)
        return TestClient(create_app(Workspace(LogDir(str(logdir), listing_ttl=0),
                                               DiskCache(tmp_path / "cache", workers=pool)))), pool

    client, pool = server()
    params = {"run": name, "tag": "trace_viewer@", "resolution": 4040}
    whole = client.get("/data/plugin/profile/data", params=params)
    assert whole.status_code == 200, whole.text
    assert pool.stats["runs"] == 2  # the index, then the zoom levels
    assert list((tmp_path / "cache").rglob("xlevel.npy"))
    lo, hi = whole.json()["fullTimespan"]
    part = client.get("/data/plugin/profile/data", params={**params, "start_time_ms": lo + (hi - lo) / 3,
                                                            "end_time_ms": lo + (hi - lo) / 2})
    assert part.status_code == 200 and len(_events(part.json())) > 1
    assert pool.stats["runs"] == 2
    client, pool = server()
    assert _events(client.get("/data/plugin/profile/data", params=params).json()) == _events(whole.json())
    assert pool.stats["runs"] == 0


@pytest.mark.parametrize("ahead", [0, tv.LEVELS_AHEAD])
def test_past_the_levels_threshold_windows_are_xprofs_own(golden, tmp_path, monkeypatch, ahead):
    """Past ``XPROF_LEVELS_MAX`` events (lowered here, so the 640,000-event crowded trace
    is past it) the zoom levels are made only as deep as a window loads and
    ``LEVELS_AHEAD`` deeper, kept per depth, and a deeper window resumes from them (with
    none ahead, the golden window, 1 level deeper than the whole trace's, resumes; with
    the default, the whole trace's walk made its levels): every window is still XProf's
    own event set (the golden from XProf 2.24.2). Before, past the threshold the answer
    came from the index's resolution tiers, without XProf's levels, and differed."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.server import create_app
    from profscope.storage import LogDir

    monkeypatch.setattr(tv, "XPROF_LEVELS_MAX", 100_000)  # the workers are forked: they see it too
    monkeypatch.setattr(tv, "LEVELS_AHEAD", ahead)
    assert golden["events"] > tv.XPROF_LEVELS_MAX
    session = tmp_path / "logs" / "run" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "crowded.xplane.pb").write_bytes(crowded_xspace())
    pool = WorkerPool(enabled=True)
    ws = Workspace(LogDir(str(tmp_path / "logs"), listing_ttl=0), DiskCache(tmp_path / "cache", workers=pool))
    client = TestClient(create_app(ws))
    params = {"run": "run/s1", "tag": "trace_viewer@", "resolution": 4040}
    whole = client.get("/data/plugin/profile/data", params=params)
    assert whole.status_code == 200, whole.text
    assert _events(whole.json()) == _golden(golden["whole"]["complete"])
    states = [json.loads(p.read_text()) for p in (tmp_path / "cache").rglob("xstate.json")]
    loads = tv.levels_needed(tv.resolution_ps(
        round((golden["whole"]["fullTimespan"][1] - golden["whole"]["fullTimespan"][0]) * 1e9), 4040))
    assert [s["done"] for s in states] == [loads + ahead]
    g = golden["window"]
    window_loads = tv.levels_needed(tv.resolution_ps(round((g["end_time_ms"] - g["start_time_ms"]) * 1e9), 4040))
    assert loads < window_loads <= loads + max(ahead, 1)  # (with none ahead: deeper than the first's)
    part = client.get("/data/plugin/profile/data", params={
        **params, "start_time_ms": repr(g["start_time_ms"]), "end_time_ms": repr(g["end_time_ms"])})
    assert part.status_code == 200, part.text
    assert _events(part.json()) == _golden(g["complete"])
    deeper = sorted(json.loads(p.read_text())["done"] for p in (tmp_path / "cache").rglob("xstate.json"))
    if ahead:  # the whole trace's walk made the window's levels: no conversion for it
        assert deeper == [loads + ahead] and pool.stats["runs"] == 2
    else:
        assert deeper == [loads, window_loads]  # the window's depth, resumed from the first
        assert pool.stats["runs"] == 3  # the index, then each depth's levels
    # Each answer is kept by its window as XProf normalises it: the same window asked
    # again, or in other words (no start, an end past the trace's), is the kept answer.
    answers = ws._xprof_answers
    assert len(answers._answers) == 2
    again = client.get("/data/plugin/profile/data", params={**params, "end_time_ms": "1e15"})
    assert again.content == whole.content
    assert client.get("/data/plugin/profile/data", params={
        **params, "start_time_ms": repr(g["start_time_ms"]), "end_time_ms": repr(g["end_time_ms"])}).content == part.content
    assert len(answers._answers) == 2 and answers._size == len(whole.content) + len(part.content)


def test_the_answer_cache_keeps_the_last_answers_within_its_bounds():
    from profscope.app.answer_cache import AnswerCache

    c = AnswerCache(max_bytes=10, max_entry=6)
    assert b"".join(c.keeping("a", iter([b"ab", b"cd"]))) == b"abcd"
    c.put("b", b"efgh")
    assert c.get("a") == b"abcd"  # now the most recent: "b" goes first
    c.put("c", b"ijkl")
    assert c.get("b") is None and c.get("a") == b"abcd" and c.get("c") == b"ijkl"
    assert b"".join(c.keeping("d", iter([b"1234", b"5678"]))) == b"12345678"  # over max_entry: not kept
    assert c.get("d") is None and c._size == 8


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
])
def test_zero_length_xplane_events_are_zero_to_xprofs_rule(rel, shared_fixtures, tmp_path):
    """The xplane reader stores a zero-length event as 1 ps long (XProf's JSON shows it
    so), but XProf's passes run on its real duration, 0: on jax308 a 1 ps flow end kept
    99.76 µs before a flow's first slice made the 100 µs rule drop that slice by 1 ps
    where XProf keeps it (issue 40; the answers now equal XProf 2.24.2's on that file,
    docs/performance.md). Here, on real profiles: their xplanes hold zero-length events
    and none 1 ps long, so every 1 ps row of the index is a zero-length event, and it is
    what the rule gets as 0; a Chrome trace keeps its zeros as they are."""
    from profscope.formats import xplane_trace
    from profscope.formats.protos import xplane_pb2
    from profscope.tools import trace_index as ti

    path = shared_fixtures / "public_profiles" / rel
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    durations = Counter(ev.duration_ps for pl in space.planes for ln in pl.lines for ev in ln.events)
    assert durations[0] > 100 and durations[1] == 0
    with open(path, "rb") as f:
        ti.build_index(xplane_trace.read_trace(f, str(path), 0, "host"), tmp_path)
    ix = ti.TraceIndex(tmp_path)
    dur = np.asarray(ix.cols["dur"])
    assert (dur == 1).sum() > 100 and not (dur == 0).any()
    rule = ix._rule_durations()
    assert np.array_equal(rule == 0, dur == 1) and np.array_equal(rule[dur != 1], dur[dur != 1])
    # and it decides: a zero-length flow end kept 99.76 µs before a 100 µs-rule's next
    # slice leaves it kept when it ends where it starts, not 1 ps later
    r = 100_000_000
    for d0, kept in ((0, True), (1, False)):
        keep = tv.keep_mask(np.array([0, 99_999_759]), np.array([d0, 241]), np.zeros(2, np.int64),
                            np.array([1, 2]), np.array([True, False]), r)
        assert keep.tolist() == [True, kept]


@pytest.mark.parametrize("seed", range(4))
def test_event_order_is_xprofs_comparator(seed):
    """``event_order`` is ``np.lexsort((track, -dur, start))`` (XProf's
    TraceEventsComparator, stable), on rows as a window gathers them: a few runs sorted by
    start (the index's duration levels), with many shared starts, durations and tracks."""
    rng = np.random.default_rng(seed)
    runs = [np.sort(rng.integers(0, 300, rng.integers(0, 400))) for _ in range(rng.integers(1, 30))]
    start = np.concatenate(runs).astype(np.int64)
    dur = rng.integers(0, 4, len(start)).astype(np.int64) * rng.integers(1, 3)
    track = rng.integers(0, 3, len(start)).astype(np.int64)
    assert np.array_equal(tv.event_order(start, dur, track), np.lexsort((track, -dur, start)))


def test_let_go_keeps_a_mapped_columns_values(tmp_path):
    """tv._let_go drops a read-only map's pages (read again from the file), and leaves a
    private writable map (whose writes it would lose) and plain arrays alone."""
    col = np.arange(1 << 20, dtype=np.int64)
    np.save(tmp_path / "c.npy", col)
    ro = np.load(tmp_path / "c.npy", mmap_mode="r")
    cow = np.load(tmp_path / "c.npy", mmap_mode="c")
    cow[5] = -1
    assert int(ro.sum()) == int(col.sum())
    tv._let_go(ro, cow, col, None, lambda: None)
    assert np.array_equal(ro, col) and int(cow[5]) == -1 and int(col[7]) == 7
