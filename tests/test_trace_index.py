"""The trace index on its own: window queries against brute force on random traces, the
directory artifact of the disk cache, progress of a conversion."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from profscope.cache.progress import Progress
from profscope.cache.store import DiskCache
from profscope.errors import BadInput
from profscope.formats import xplane_trace
from profscope.model.trace import TraceEvents, Track
from profscope.tools import trace_index as tv

DEMO = Path(__file__).parents[1] / "src" / "profscope" / "demo" / "logdir"


def _random_trace(seed: int, n: int = 60_000) -> TraceEvents:
    """Nested slices on 3 tracks: long parents, medium children, many tiny leaves, plus a
    few zero-length instants; durations spread over many levels."""
    rng = np.random.default_rng(seed)
    rows = []
    for track in range(3):
        t = 0
        while len(rows) < n * (track + 1) // 3:
            span = int(rng.integers(10**6, 10**9))
            rows.append((track, t, span))
            c = t
            while c < t + span - 10:
                d = int(rng.integers(1, max(2, span // 20)))
                d = min(d, t + span - c - 1)
                if d <= 0:
                    break
                rows.append((track, c, d if rng.random() > 0.02 else 0))
                c += d + int(rng.integers(0, 10**4))
            t += span + int(rng.integers(0, 10**7))
    arr = np.asarray(rows, dtype=np.int64)
    m = len(arr)
    return TraceEvents(
        path="random", hostname="", base_ps=0, track=arr[:, 0].astype(np.int32), start_ps=arr[:, 1].copy(),
        dur_ps=arr[:, 2].copy(), name=(np.arange(m) % 7).astype(np.int32), args_off=np.zeros(m, np.int64),
        args_len=np.zeros(m, np.int32), blob=[], args_kind="json", names=[f"n{i}" for i in range(7)],
        tracks=[Track(1, i, f"t{i}", i) for i in range(3)],
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_windows_match_brute_force(tmp_path, seed):
    ev = _random_trace(seed)
    start, dur, track = ev.start_ps.copy(), ev.dur_ps.copy(), ev.track.copy()
    meta = tv.build_index(ev, tmp_path)
    ix = tv.TraceIndex(tmp_path)
    assert ix.n == len(start) and meta["tiers"]  # dense enough to have tiers
    shift = int(start.min())
    s_all, d_all = start - shift, dur
    rng = np.random.default_rng(seed + 10)
    span = int((s_all + d_all).max())
    for _ in range(40):
        a = int(rng.integers(0, span))
        w = int(10 ** rng.uniform(3, np.log10(span)))
        e = a + w
        res = int(rng.integers(1, 3000))
        sl, truncated = ix.window_rows(a, e, res)
        rows = sl["rows"]
        st = np.asarray(ix.cols["start"][rows])
        du = np.asarray(ix.cols["dur"][rows])
        # the columns handed back are the rows' (tiers keep their own copies)
        for k in ("start", "dur", "track", "depth", "name"):
            assert np.array_equal(sl[k], np.asarray(ix.cols[k][rows]))
        # only overlapping
        assert np.all((st < e) & ((st + du > a) | ((du == 0) & (st >= a))))
        # exact set of overlapping events (brute force over the original columns)
        over = (s_all < e) & ((s_all + d_all > a) | ((d_all == 0) & (s_all >= a)))
        p = max(1, (e - a) // res)
        wide_truth = np.flatnonzero(over & (d_all >= p))
        got = set(zip(np.asarray(ix.cols["track"][rows]).tolist(), st.tolist(), du.tolist()))
        truth = set(zip(track[wide_truth].tolist(), s_all[wide_truth].tolist(), d_all[wide_truth].tolist()))
        assert truth <= got  # every event at least a pixel wide, spanning ones included
        narrow = du < p
        if narrow.any():
            key = np.asarray(ix.cols["track"][rows][narrow], np.int64) * 1 << 40
            key = key | (np.asarray(ix.cols["depth"][rows][narrow], np.int64) << 24) | np.clip((st[narrow] - a) // p, 0, res + 1)
            assert len(np.unique(key)) == len(key)  # at most one narrow per (track, depth, pixel)
        if not truncated:
            assert len(rows) == int(over.sum())
        # the exact query (export) returns every overlapping event
        assert len(ix.overlapping(a, e)) == int(over.sum())


def test_depth_is_the_nesting(tmp_path):
    ev = TraceEvents(
        path="n", hostname="", base_ps=0, track=np.zeros(5, np.int32),
        start_ps=np.array([0, 10, 10, 20, 100], np.int64), dur_ps=np.array([100, 50, 5, 0, 1], np.int64),
        name=np.arange(5, dtype=np.int32), args_off=np.zeros(5, np.int64), args_len=np.zeros(5, np.int32),
        blob=[], args_kind="json", names=list("abcde"), tracks=[Track(1, 1, "t", 0)],
    )
    tv.build_index(ev, tmp_path)
    ix = tv.TraceIndex(tmp_path)
    depth = {ix.names[int(ix.cols["name"][r])]: int(ix.cols["depth"][r]) for r in range(5)}
    # a [0,100) > b [10,60) > c [10,15) (longest first at equal starts); d: instant in b;
    # e starts where a ends
    assert depth == {"a": 0, "b": 1, "c": 2, "d": 2, "e": 0}
    assert ix.tracks[0]["maxDepth"] == 2


def test_directory_artifact_is_built_once_atomically(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    calls = tmp_path / "calls"  # builds run in forked workers: they count in a file
    barrier = threading.Barrier(4)

    def build(progress, folder):
        with open(calls, "a") as f:
            f.write("x")
        progress.update(0.5, "half")
        (folder / "a.txt").write_text("x")

    results = []

    def worker():
        barrier.wait()
        results.append(cache.get_or_build_dir("k" * 64, "test", build))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls.read_text() == "x" and len(set(results)) == 1
    assert (results[0] / "a.txt").read_text() == "x" and not list(results[0].parent.glob(".tmp-*"))
    assert cache.progress.snapshot() == []

    def failing(progress, folder):
        (folder / "half").write_text("x")
        raise ValueError("boom")

    with pytest.raises(BadInput, match="ValueError: boom"):  # a reader's unexpected error: a 422
        cache.get_or_build_dir("f" * 64, "test", failing)
    assert not (cache.root / "ff" / ("f" * 64 + ".d")).exists()
    assert not list((cache.root / "ff").glob(".tmp-*"))


def test_conversion_reports_progress_forward(tmp_path):
    xplane = next(DEMO.glob("transformer/plugins/profile/*/demo-host.xplane.pb"))
    seen = []

    class Recorder(Progress):
        def update(self, fraction=None, message=None):
            super().update(fraction, message)
            seen.append((self.fraction, self.message))

    job = Recorder("k", "label")
    writer = tv.IndexWriter(tmp_path)
    with open(xplane, "rb") as f:
        events = xplane_trace.read_trace(f, str(xplane), progress=job.part(0, 0.6), sink=writer)
    writer.finish(events, progress=job.part(0.6, 1))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(seen) >= 8
    assert any("decoding" in m for _, m in seen) and any("tiers" in m for _, m in seen)


def test_counters_are_decimated_keeping_min_and_max(tmp_path):
    from profscope.model.trace import Counter

    rng = np.random.default_rng(3)
    t = np.cumsum(rng.integers(1, 1000, 200_000)).astype(np.int64)
    v = rng.normal(0, 1, len(t))
    v[123_456] = 99.0  # a one-point spike
    v[7] = -99.0
    ev = TraceEvents(
        path="c", hostname="", base_ps=0, track=np.zeros(0, np.int32), start_ps=np.zeros(0, np.int64),
        dur_ps=np.zeros(0, np.int64), name=np.zeros(0, np.int32), args_off=np.zeros(0, np.int64),
        args_len=np.zeros(0, np.int32), blob=[], args_kind="json", names=[],
        tracks=[Track(1, 0, "bytes", 0, "counter")], counters=[Counter(0, "bytes", "bytes", t, v)],
    )
    tv.build_index(ev, tmp_path)
    ix = tv.TraceIndex(tmp_path)
    shift = int(t[0])
    tt, vv = ix.counter(0, 0, int(t[-1] - shift) + 1, 300)
    assert len(tt) <= 3 * (300 + 1) + 1 and np.all(np.diff(tt) >= 0)
    assert vv.max() == 99.0 and vv.min() == -99.0 and vv[-1] == v[-1]
    # zoomed in: the points as they are
    a, b = int(t[1000] - shift), int(t[1100] - shift)
    tt, vv = ix.counter(0, a, b, 300)
    assert np.array_equal(tt, t[999:1101] - shift) and np.array_equal(vv, v[999:1101])


def test_fenced_search_equals_searchsorted():
    rng = np.random.default_rng(5)
    col = np.sort(rng.integers(0, 5000, 20_000))
    fence = col[:: tv.FENCE]
    for _ in range(2000):
        a = int(rng.integers(0, len(col)))
        z = int(rng.integers(a, len(col) + 1))
        x = int(rng.integers(-10, 5010))
        for side in ("left", "right"):
            assert tv._fenced(col, fence, a, z, x, side) == a + int(np.searchsorted(col[a:z], x, side=side))


def test_crossing_events_get_depths_that_never_overlap(tmp_path):
    """Events that end after the event holding them (the Python tracer and torch traces
    have some) are stacked so that no two events at one depth overlap."""
    rng = np.random.default_rng(3)
    n = 3000
    start = np.sort(rng.integers(0, 1_000_000, n)).astype(np.int64)
    dur = rng.integers(0, 50_000, n).astype(np.int64)
    ev = TraceEvents(
        path="x", hostname="", base_ps=0, track=np.zeros(n, np.int32), start_ps=start, dur_ps=dur,
        name=np.zeros(n, np.int32), args_off=np.zeros(n, np.int64), args_len=np.zeros(n, np.int32),
        blob=[], args_kind="json", names=["s"], tracks=[Track(1, 1, "t", 0)],
    )
    tv.build_index(ev, tmp_path)
    ix = tv.TraceIndex(tmp_path)
    st, du, de = (np.asarray(ix.cols[k], np.int64) for k in ("start", "dur", "depth"))
    assert int(de.max()) == ix.tracks[0]["maxDepth"]
    for level in np.unique(de):
        at = np.flatnonzero(de == level)
        at = at[np.argsort(st[at], kind="stable")]
        ends = st[at] + du[at]
        assert (ends[:-1] <= st[at][1:]).all(), f"events overlap at depth {level}"
