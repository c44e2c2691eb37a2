"""The index build's C passes (tools/_trace_build.c) against the numpy path: identical
index files and metadata, on real profiles (xplanes, torch Chrome traces) and on traces
whose events cross (the Python tracer's), built once with each path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from profscope.formats import chrome_trace, xplane_trace
from profscope.model.trace import TraceEvents, Track
from profscope.tools import trace_index as ti
from tests.fixtures.paths import REPO

pytestmark = pytest.mark.skipif(ti._native is None, reason="the _trace_build extension is not built")


def _read(path: Path) -> TraceEvents:
    with open(path, "rb") as f:
        if path.name.endswith(".xplane.pb"):
            return xplane_trace.read_trace(f, str(path), 0, "host")
        return chrome_trace.trace_columns(f, str(path))


def _same_index(a: Path, b: Path) -> None:
    # XProf's row order is saved by the C passes alone (test_build_saves_xprofs_row_order)
    names = sorted(p.name for p in a.glob("*.npy") if p.name != ti.XPROF_ORDER_FILE)
    assert names == sorted(p.name for p in b.glob("*.npy"))
    for name in names:
        x, y = np.load(a / name), np.load(b / name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert json.loads((a / "meta.json").read_bytes()) == json.loads((b / "meta.json").read_bytes())


def _both(make, tmp_path, monkeypatch) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "py").mkdir()
    ti.build_index(make(), tmp_path / "c")
    monkeypatch.setattr(ti, "_native", None)
    ti.build_index(make(), tmp_path / "py")
    _same_index(tmp_path / "c", tmp_path / "py")


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "traces/hta_alexnet.trace.json.gz",
    "traces/tracelens_h100_bert_small.trace.json.gz",
])
def test_native_build_equals_numpy_on_real_profiles(rel, shared_fixtures, tmp_path, monkeypatch):
    path = shared_fixtures / "public_profiles" / rel
    _both(lambda: _read(path), tmp_path, monkeypatch)


def _crossing_trace(seed: int, n: int = 40_000) -> TraceEvents:
    """Three tracks: nested slices (track 0), crossing ones as the Python tracer writes
    (track 1: random starts and ends), and zero-length and tied events (track 2), in a
    shuffled reader order so the per-track sort runs."""
    rng = np.random.default_rng(seed)
    start = np.concatenate([np.repeat(np.arange(n // 3) * 1000, 1), np.sort(rng.integers(0, 10**8, n // 3)),
                            rng.integers(0, 1000, n - 2 * (n // 3)) * 1000]).astype(np.int64)
    dur = np.concatenate([np.full(n // 3, 500), rng.integers(0, 10**6, n // 3),
                          rng.integers(0, 3, n - 2 * (n // 3)) * 1500]).astype(np.int64)
    track = np.repeat(np.arange(3, dtype=np.int32), [n // 3, n // 3, n - 2 * (n // 3)])
    perm = rng.permutation(n)
    return TraceEvents(
        path="x", hostname="", base_ps=0, track=track[perm], start_ps=start[perm], dur_ps=dur[perm],
        name=(perm % 5).astype(np.int32), args_off=np.zeros(n, np.int64), args_len=np.zeros(n, np.int32),
        blob=[], args_kind="json", names=[f"n{i}" for i in range(5)], tracks=[Track(1, i, f"t{i}", i) for i in range(3)],
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_native_build_equals_numpy_when_events_cross(seed, tmp_path, monkeypatch):
    _both(lambda: _crossing_trace(seed), tmp_path, monkeypatch)


def test_native_depths_equal_numpy_and_cross_is_stacked(monkeypatch):
    ev = _crossing_trace(4)
    a = ti._depths(ev.track, ev.start_ps, ev.dur_ps, 3)
    monkeypatch.setattr(ti, "_native", None)
    b = ti._depths(ev.track, ev.start_ps, ev.dur_ps, 3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[1][1] > 0


def test_native_rejects_bad_order():
    n = 4
    z = np.zeros(n, np.int64)
    with pytest.raises(ValueError):
        ti._native.depths(np.array([0, 1, 2, 9], np.int32), np.array([0, n], np.int64), z, z,
                          np.zeros(n, np.int16), np.zeros(1, np.int64))
    with pytest.raises(ValueError):
        ti._native.track_order(np.array([0, 5, 0, 0], np.int32), z, z, 1)


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",  # 3,995 flow slices
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
])
def test_native_zoom_levels_equal_python(rel, shared_fixtures, tmp_path, monkeypatch):
    """XProf's zoom levels (trace_visibility.ZoomLevels: the flow pre-pass and the rows'
    pass) by the C passes and by the Python loops, every level, on real GPU, TPU and ROCm
    profiles and a PyTorch trace."""
    from profscope.tools import trace_visibility as tv

    ti.build_index(_read(shared_fixtures / "public_profiles" / rel), tmp_path)
    levels = {}
    for native in (tv._native, None):
        monkeypatch.setattr(tv, "_native", native)
        ix = ti.TraceIndex(tmp_path)
        levels[native is None] = ix.zoom_levels(tv.N_LEVELS - 1).copy()
        for f in tmp_path.glob("xlevel*"):
            f.unlink()
    assert np.array_equal(levels[False], levels[True])
    assert len(np.unique(levels[True])) > 3  # several levels, not one catch-all


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",  # 3,995 flow slices
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "demo:transformer",  # a CPU JAX profile, as jax308 is: 4,294 flow slices
])
def test_the_builds_flow_numbers_are_np_uniques_and_give_the_same_zoom_levels(rel, shared_fixtures, tmp_path):
    """The build's numbering of the flow slices' flows (``FLOW_DENSE_FILE``, from the
    arrows' grouping) is ``np.unique``'s inverse of their ids, and the zoom levels made
    with it equal those made numbering them in the pre-pass, on real TPU, ROCm and CPU
    JAX profiles; ids that sort otherwise as int64 than as uint64 fall back to np.unique."""
    from profscope.tools import trace_visibility as tv

    path = next((REPO / "src/profscope/demo/logdir" / rel[5:]).glob("plugins/profile/*/*.xplane.pb")) \
        if rel.startswith("demo:") else shared_fixtures / "public_profiles" / rel
    ti.build_index(_read(path), tmp_path)
    ix = ti.TraceIndex(tmp_path)
    fe = ix.flow
    dense = np.load(tmp_path / ti.FLOW_DENSE_FILE)
    assert dense.dtype == np.int32 and len(dense) == len(fe.seq) > 1000
    assert np.array_equal(dense, np.unique(fe.flow_id, return_inverse=True)[1].reshape(-1))
    with_numbers = ix.zoom_levels(tv.N_LEVELS - 1).copy()
    (tmp_path / ti.FLOW_DENSE_FILE).unlink()
    ix = ti.TraceIndex(tmp_path)
    assert np.array_equal(ix.zoom_levels(tv.N_LEVELS - 1), with_numbers)
    # the pre-pass's numbering of the ids in its own order (a permutation of the flow
    # slices) is np.unique's, from the build's numbers; and from np.unique where the ids
    # (here with the top bit flipped) sort otherwise as int64 than as uint64
    perm = np.random.default_rng(7).permutation(len(dense))
    for ids64 in (fe.flow_id.view(np.int64), (fe.flow_id ^ np.uint64(1 << 63)).view(np.int64)):
        z = tv.ZoomLevels(None, None, None, fe.seq, ids64, None, None, -1, flow_dense=dense)
        z._flow_positions = perm
        ids, inv = z._dense_ids(ids64[perm])
        want_ids, want_inv = np.unique(ids64[perm], return_inverse=True)
        assert np.array_equal(ids, want_ids) and np.array_equal(inv, want_inv.reshape(-1)) and inv.dtype == np.int32


def _xprof_order_checked(folder: Path) -> None:
    """The build's saved row order (``XPROF_ORDER_FILE``, from the nesting pass) is the
    three-key sort ZoomLevels makes without it, and every zoom level made over it equals
    the levels made over that sort."""
    from profscope.tools import trace_visibility as tv

    ix = ti.TraceIndex(folder)
    order, bounds = ix._xprof_order()
    sorted_here = np.lexsort((-ix._rule_durations(), np.asarray(ix.cols["start"]), np.asarray(ix.cols["track"])))
    assert np.array_equal(np.asarray(order), sorted_here)
    assert bounds[-1] == ix.n and np.array_equal(np.asarray(ix.cols["track"])[sorted_here],
                                                 np.repeat(np.arange(len(bounds) - 1), np.diff(bounds)))
    with_order = ix.zoom_levels(tv.N_LEVELS - 1).copy()
    (folder / ti.XPROF_ORDER_FILE).unlink()
    ix = ti.TraceIndex(folder)
    assert ix._xprof_order() is None
    assert np.array_equal(ix.zoom_levels(tv.N_LEVELS - 1), with_order)


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
])
def test_build_saves_xprofs_row_order(rel, shared_fixtures, tmp_path):
    """XProf's zoom levels walk the rows in the order the build saved instead of sorting
    13.6 M rows again on jax308's first window (2.7 s, docs/performance.md): the same
    order, the same levels, on real GPU, TPU and ROCm profiles and a PyTorch trace."""
    ti.build_index(_read(shared_fixtures / "public_profiles" / rel), tmp_path)
    _xprof_order_checked(tmp_path)


@pytest.mark.parametrize("seed", [1, 2])
def test_build_saves_xprofs_row_order_with_zero_length_ties(seed, tmp_path):
    """An xplane's 0 and 1 ps events at one start on one track are equal for XProf's rule
    (1 ps reads as 0) and go by row, where the nesting pass put the 1 ps ones first
    (trace_index._zero_length_ties): the crossing trace's tied track with 1 ps events
    mixed in among its zero-length ones, read as an xplane's."""
    ev = _crossing_trace(seed)
    ev.args_kind = "xevent"
    ev.dur_ps[ev.dur_ps == 3000] = 1
    assert ((ev.dur_ps == 0).sum(), (ev.dur_ps == 1).sum()) > (1000, 1000)
    ti.build_index(ev, tmp_path)
    _xprof_order_checked(tmp_path)


def test_native_zoom_level_rejects_a_bad_saved_order():
    n = 4
    z = np.zeros(n, np.int64)
    with pytest.raises(ValueError):
        ti._native.zoom_level(np.array([0, 1, 2, 9], np.int32), np.array([0, n], np.int64), z, z,
                              np.full(n, 127, np.int8), np.full(n, -1, np.int64), np.zeros(0, np.int64), 0, 10)


@pytest.mark.parametrize("seed", [1, 2])
def test_native_build_equals_numpy_with_clipped_durations(seed, tmp_path, monkeypatch):
    """The fused first pass (``_trace_build.shift_clip``) clips negative and too long
    durations as numpy's ``np.clip`` did, and says so, so that the durations read back
    from their raw file are clipped again; the dur column and its tail (levels past
    DUR_TAIL_LEVEL) as the numpy path saves them."""
    def clipped():
        ev = _crossing_trace(seed)
        ev.dur_ps[:50] = -7
        ev.dur_ps[50:60] = ti.MAX_DUR_PS * 4
        ev.dur_ps[60:70] = 1 << 40  # past the uint32 head: the tail
        return ev
    _both(clipped, tmp_path, monkeypatch)
    assert (tmp_path / "c" / ti.DUR_TAIL_FILE).exists()
    assert int(np.load(tmp_path / "c" / ti.DUR_TAIL_FILE).max()) == ti.MAX_DUR_PS


def test_native_first_pass_equals_numpy_and_counts_outside_tracks(monkeypatch):
    """``_shift_clip`` in C and in numpy on a real order of values: shifted starts, clipped
    durations, the last end (wrapping as int64 does), events per track; a track id
    outside the tracks falls back to ``bincount``'s longer answer, as before."""
    ev = _crossing_trace(5)
    ev.dur_ps[:5] = -1
    ev.track[:3] = 7  # past the 3 tracks
    got = {}
    for native in (ti._native, None):
        monkeypatch.setattr(ti, "_native", native)
        start, dur = ev.start_ps.copy(), ev.dur_ps.copy()
        end, per_track, clipped = ti._shift_clip(start, dur, ev.track, 1000, 3, True)
        got[native is None] = (start, dur, end, per_track, clipped)
    (s1, d1, e1, p1, c1), (s2, d2, e2, p2, c2) = got[False], got[True]
    assert np.array_equal(s1, s2) and np.array_equal(d1, d2) and e1 == e2 and np.array_equal(p1, p2)
    assert c1 and c2 and len(p1) == 8 and p1[7] == 3


def test_native_level_order_take_and_inverse_equal_numpy():
    """The index order's C passes against numpy: the stable sort by level and its bounds,
    the gather that casts (and says whether every value fitted), the inverse permutation;
    out-of-range input raises instead of reading past an array."""
    rng = np.random.default_rng(0)
    level = rng.integers(0, 40, 100_000).astype(np.int8)
    order, bounds = ti._native.level_order(level)
    assert np.array_equal(order, np.argsort(level, kind="stable"))
    assert np.array_equal(bounds, np.searchsorted(np.sort(level), np.arange(65)))
    rank = ti._native.inverse(order)
    assert np.array_equal(rank[order], np.arange(len(order)))
    src = rng.integers(-300, 70_000, 100_000)
    for dtype in (np.int64, np.int32, np.uint32, np.int16, np.uint16, np.int8, np.uint8):
        got = np.empty(len(order), dtype)
        fits = ti._native.take(src, order, got)
        assert np.array_equal(got, src[order].astype(dtype)), dtype
        want = np.iinfo(dtype).min <= src.min() and src.max() <= np.iinfo(dtype).max
        assert fits == want, dtype
    with pytest.raises(ValueError):
        ti._native.take(src, np.array([0, len(src)], np.int32), np.empty(2, np.int64))
    with pytest.raises(ValueError):
        ti._native.inverse(np.array([0, 0, 1], np.int32))
    with pytest.raises(ValueError):
        ti._native.level_order(np.array([0, -1], np.int8))


def test_native_tier_merge_rejects_counts_that_disagree():
    """``tier_merge`` fills arrays as long as ``tiers`` counted: a mask or counts that do not
    agree raise instead of writing past them."""
    n = 6
    mask = np.array([1, 0, 1, 1, 0, 1], np.uint32)
    start = np.array([0, 1, 2, 0, 1, 2], np.int64)
    bounds = np.array([0, 3, 6], np.int64)
    cols = (start, np.zeros(n, np.uint8), np.zeros(n, np.int8))
    (rows,) = ti._native.tier_merge(mask, 1, np.array([4], np.int64), bounds, *cols)
    assert rows.tolist() == [0, 3, 2, 5]  # by start, ties by (track, depth, row)
    for counts in ([3], [5]):
        with pytest.raises(ValueError):
            ti._native.tier_merge(mask, 1, np.array(counts, np.int64), bounds, *cols)
    with pytest.raises(ValueError):
        ti._native.tier_merge(mask, 1, np.array([4], np.int64), np.array([0, 7], np.int64), *cols)


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
])
def test_native_zoom_levels_in_one_walk_equal_level_by_level(rel, shared_fixtures, tmp_path):
    """``_trace_build.zoom_levels`` (every level of one compute in one walk of the rows)
    against ``zoom_level`` called level by level, as compute did before: every level at
    once, and levels 0-3 then 4-12 resumed from them (the first window, then a later one),
    on real GPU, TPU and ROCm profiles and a PyTorch trace."""
    from profscope.tools import trace_visibility as tv

    ti.build_index(_read(shared_fixtures / "public_profiles" / rel), tmp_path)

    def fresh() -> "tv.ZoomLevels":
        ix = ti.TraceIndex(tmp_path)
        ix.zoom_levels(-1)  # the ZoomLevels object, nothing computed yet
        return ix._zoom

    one_by_one = fresh()
    for k in range(tv.N_LEVELS):
        one_by_one.compute(k)  # one level per call: _level's zoom_level
    at_once = fresh()
    at_once.compute(tv.N_LEVELS - 1)
    resumed = fresh()
    resumed.compute(3)
    assert resumed.done == 3 and (resumed.level != tv.NOT_YET).any()
    resumed.compute(tv.N_LEVELS - 1)
    assert np.array_equal(at_once.level, one_by_one.level)
    assert np.array_equal(resumed.level, one_by_one.level)
    assert len(np.unique(one_by_one.level)) > 3


def test_native_zoom_levels_rejects_bad_input():
    n = 4
    z = np.zeros(n, np.int64)
    none, no_flows = np.zeros(0, np.int64), np.zeros(0, np.int32)
    args = (np.array([0, 1, 2, 9], np.int32), np.array([0, n], np.int64), z, z, none, np.full(n, 127, np.int8),
            none, no_flows)
    with pytest.raises(ValueError):  # a row past the columns
        ti._native.zoom_levels(*args, (np.zeros(0, np.uint8),), 0, (10,))
    args = (np.arange(n, dtype=np.int32), *args[1:])
    with pytest.raises(ValueError):  # one visible set per level
        ti._native.zoom_levels(*args, (np.zeros(0, np.uint8),), 0, (10, 1))
    with pytest.raises(ValueError):  # flow rows past the columns
        ti._native.zoom_levels(*args[:6], np.array([9], np.int64), np.array([0], np.int32), (np.ones(1, np.uint8),),
                               0, (10,))
    with pytest.raises(ValueError):  # a flow number past the visible flows
        ti._native.zoom_levels(*args[:6], np.array([1], np.int64), np.array([1], np.int32), (np.ones(1, np.uint8),),
                               0, (10,))


def test_native_zoom_levels_in_one_walk_on_int64_durations_and_a_row_of_two_flows(shared_fixtures, tmp_path):
    """The one-walk levels read int64 durations as given (a ZoomLevels over plain columns,
    as a numpy-built index gives them) and take a row listed under two flows with its
    last flow, as ``flow_of[rows] = ids`` in the level-by-level pass: the TPU fixture's
    columns, one of its flow slices listed again under another flow."""
    from profscope.tools import trace_visibility as tv

    rel = "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb"
    ti.build_index(_read(shared_fixtures / "public_profiles" / rel), tmp_path)
    ix = ti.TraceIndex(tmp_path)
    fe = ix.flow
    rows, ids, end = np.asarray(fe.seq, np.int64), fe.flow_id.astype(np.int64), fe.kind == ti.FLOW_END
    assert len(rows) > 100
    at = len(rows) // 2
    rows, ids, end = np.insert(rows, at, rows[at]), np.insert(ids, at, ids[0]), np.insert(end, at, False)
    start, dur, track = (np.asarray(ix.cols[k]).astype(np.int64) for k in ("start", "dur", "track"))

    def zoom() -> "tv.ZoomLevels":
        return tv.ZoomLevels(start, dur, track, rows, ids, end, np.full(len(start), tv.NOT_YET, np.int8), -1)

    one_by_one, at_once = zoom(), zoom()
    for k in range(tv.N_LEVELS):
        one_by_one.compute(k)
    at_once.compute(tv.N_LEVELS - 1)
    assert np.array_equal(at_once.level, one_by_one.level)
    assert len(np.unique(one_by_one.level)) > 3


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
def test_columns_saved_a_block_at_a_time_are_np_saves_bytes(n, tmp_path):
    """``_save_blocks`` (the saved row order written a block at a time) writes the bytes
    ``np.save`` writes for the whole column, so the index stays byte-identical."""
    col = np.arange(n, dtype=np.int32)[::-1].copy()
    np.save(tmp_path / "whole.npy", col)
    ti._save_blocks(tmp_path / "blocks.npy", n, col.dtype, lambda a, z: col[a:z], step=7)
    assert (tmp_path / "blocks.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()


def test_durations_saved_in_blocks_fall_back_to_int64_when_the_head_does_not_fit(tmp_path, monkeypatch):
    """The durations written a block at a time as uint32 (rows below DUR_TAIL_LEVEL's
    bound) are rewritten as the int64 column when one of them does not fit 32 bits, as
    ``_save_column`` keeps it: C and numpy save the same file."""
    dur = np.array([5, 1 << 40, 7, 3], np.int64)
    order = np.array([2, 0, 3, 1], np.int32)
    bounds = np.full(ti.LEVELS + 1, 4, np.int64)  # every row below the tail's level
    saved = {}
    for native in (ti._native, None):
        monkeypatch.setattr(ti, "_native", native)
        folder = tmp_path / ("c" if native else "py")
        folder.mkdir()
        ti._save_in_order(folder, "dur", dur.copy(), order, bounds, keep=False)
        saved[native is None] = (folder / "dur.npy").read_bytes()
        assert not (folder / ti.DUR_TAIL_FILE).exists()
    assert saved[False] == saved[True]
    assert np.load(tmp_path / "c" / "dur.npy").tolist() == [7, 5, 3, 1 << 40]


@pytest.mark.parametrize("runs", [1, 2, 7, 5000])
def test_native_sort_track_equals_the_lexsort(runs):
    """``_trace_build.sort_track`` (a track's sorted runs merged) orders a track's rows as
    ``np.lexsort((~dur, start))`` did: by start, longest first, ties in their order; on
    tracks of one to thousands of runs with many equal starts and durations."""
    rng = np.random.default_rng(runs)
    n = 20_000
    start = rng.integers(0, 3000, n).astype(np.int64)
    dur = rng.integers(0, 4, n).astype(np.int64) * 100
    parts = np.array_split(rng.permutation(n).astype(np.int32), runs)
    seg = np.concatenate([p[np.lexsort((~dur[p], start[p]))] for p in parts])  # sorted runs
    want = seg[np.lexsort((~dur[seg], start[seg]))]
    ti._native.sort_track(seg, start, dur)
    assert np.array_equal(seg, want)
    with pytest.raises(ValueError):
        ti._native.sort_track(np.array([0, n], np.int32), start, dur)


def test_flow_pre_pass_keeps_int32_positions_tracks_and_flows(shared_fixtures, tmp_path):
    """The flow pre-pass the zoom levels keep for every later level holds its positions,
    tracks and dense flow numbers as int32, the C pass's types (int64, they were 29 MB
    more of the levels' worker on jax308's 2.4 M flow slices); the levels equal the
    Python pass's."""
    from profscope.tools import trace_visibility as tv

    rel = "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb"
    ti.build_index(_read(shared_fixtures / "public_profiles" / rel), tmp_path)
    ix = ti.TraceIndex(tmp_path)
    fe = ix.flow
    rows, ids, end = np.asarray(fe.seq, np.int64), fe.flow_id.astype(np.int64), fe.kind == ti.FLOW_END
    start, dur, track = (np.asarray(ix.cols[k]).astype(np.int64) for k in ("start", "dur", "track"))

    def zoom() -> "tv.ZoomLevels":
        return tv.ZoomLevels(start, dur, track, rows, ids, end, np.full(len(start), tv.NOT_YET, np.int8), -1)

    z = zoom()
    z.compute(tv.N_LEVELS - 1)
    assert z._flow_dense is None  # let go before the row walk (_levels_native)
    z._flow_pass_native(0, tv.LAYER_RESOLUTIONS[0])  # made again where a level needs it
    o, _, _, tr, fid, _, ntracks, flows = z._flow_dense
    assert (o.dtype, tr.dtype, fid.dtype) == (np.int32,) * 3
    assert len(o) == len(rows) > 100 and int(fid.max()) == len(flows) - 1 and int(tr.max()) < ntracks
    py = zoom()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tv, "_native", None)
        py.compute(tv.N_LEVELS - 1)
    assert np.array_equal(z.level, py.level)
    with pytest.raises(ValueError):  # the C pass takes int32 positions only
        tv._native.flow_pass(o.astype(np.int64), *z._flow_dense[1:6], z._flow_level, ntracks, len(flows), 0, 10)


@pytest.mark.parametrize(("rel", "cuts"), [
    ("xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb", 2),
    ("xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb", 7),
    ("traces/hta_alexnet.trace.json.gz", 3),
])
def test_native_merge_of_sorted_runs_equals_numpy_and_the_whole_sort(rel, cuts, shared_fixtures, monkeypatch):
    """Line ranges' own sorts (``sorted_run``) merged (``merge_runs``: C and its numpy twin)
    give the order, levels, bounds and shifted starts of one sort of every row, on a real
    profile's columns cut into runs (and with every start tied, so that only the rows
    order the ties)."""
    ev = _read(shared_fixtures / "public_profiles" / rel)
    dur = np.clip(ev.dur_ps.astype(np.int64), 0, ti.MAX_DUR_PS)
    n = len(dur)
    for start in (ev.start_ps.astype(np.int64), np.full(n, 123, np.int64)):
        shift = int(start.min()) - 5
        whole = ti._sorted_levels(start - shift, ti._level(dur))
        edges = [0, *sorted(np.random.default_rng(cuts).choice(np.arange(1, n), cuts - 1, replace=False)), n]
        runs = []
        for a, z in zip(edges, edges[1:]):
            o, _, b, st = ti._sorted_levels(start[a:z], ti._level(dur[a:z]))
            runs.append((o, st, b))
        got = ti.merge_runs(runs, shift)
        monkeypatch.setattr(ti, "_native", None)
        twin = ti.merge_runs(runs, shift)
        monkeypatch.undo()
        for x, y, z in zip(got, twin, whole):
            assert x.dtype == y.dtype == z.dtype and np.array_equal(x, y) and np.array_equal(x, z)


def test_native_merge_runs_rejects_runs_that_do_not_cover_the_rows():
    o, s, b = np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int64), np.zeros(65, np.int64)
    b[1:] = 3
    out_o, out_s = np.empty(3, np.int32), np.empty(3, np.int64)
    with pytest.raises(ValueError, match="do not cover"):
        ti._native.merge_runs((s,), (o,), b, np.array([1], np.int64), 0, out_o, out_s)
    with pytest.raises(ValueError, match="out of range"):
        ti._native.merge_runs((s,), (o + 1,), b, np.array([0], np.int64), 0, out_o, out_s)
    with pytest.raises(ValueError, match="do not span"):
        ti._native.merge_runs((s,), (o,), b * 2, np.array([0], np.int64), 0, out_o, out_s)


def _nested_trace(n: int) -> TraceEvents:
    """``n`` slices on three tracks, nested three deep (long ones holding short ones), at
    starts spread over many duration levels, in reader order by track."""
    rng = np.random.default_rng(11)
    start = np.sort(rng.integers(0, 10**12, n)).astype(np.int64)
    dur = (2 ** rng.integers(0, 30, n)).astype(np.int64)
    track = (np.arange(n) % 3).astype(np.int32)
    perm = np.argsort(track, kind="stable")
    return TraceEvents(
        path="x", hostname="", base_ps=0, track=track[perm], start_ps=start[perm], dur_ps=dur[perm],
        name=(perm % 5).astype(np.int32), args_off=np.zeros(n, np.int64), args_len=np.zeros(n, np.int32),
        blob=[], args_kind="json", names=[f"n{i}" for i in range(5)], tracks=[Track(1, i, f"t{i}", i) for i in range(3)],
    )


def test_build_letting_mapped_columns_go_writes_the_same_index(tmp_path, monkeypatch):
    """IndexWriter.finish maps the raw columns and lets their pages go as the C passes walk
    them (issue 40's fourth pass): more than 2^20 rows, so the passes call back mid-walk,
    give the same files, byte for byte, as the columns read into memory; the zoom levels'
    walk letting its mapped columns go gives the same levels as without."""
    from profscope.tools import trace_visibility as tv

    n = (1 << 21) + 12_345
    let_go = tv._let_go
    calls = []
    monkeypatch.setattr(tv, "_let_go", lambda *cols: (calls.append(len(cols)), let_go(*cols)))
    (tmp_path / "mapped").mkdir()
    ti.build_index(_nested_trace(n), tmp_path / "mapped")
    assert len(calls) > 12  # shift_clip's blocks, the nesting pass's and the tiers' walks, ...
    built = len(calls)
    levels = [ti.TraceIndex(tmp_path / "mapped").zoom_levels(tv.N_LEVELS - 1).copy()]
    assert len(calls) > built + 1  # the zoom levels' walk, mid-walk too
    monkeypatch.setattr(tv, "_let_go", lambda *cols: None)
    monkeypatch.setattr(ti.IndexWriter, "_raw_columns", lambda self: (
        self._load("start"), self._load("dur", keep=True), self._load("track", keep=True)))
    (tmp_path / "memory").mkdir()
    ti.build_index(_nested_trace(n), tmp_path / "memory")
    levels.append(ti.TraceIndex(tmp_path / "memory").zoom_levels(tv.N_LEVELS - 1))
    assert np.array_equal(*levels) and len(np.unique(levels[0])) > 3
    names = sorted(p.name for p in (tmp_path / "memory").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "mapped").iterdir())
    for name in names:
        assert (tmp_path / "mapped" / name).read_bytes() == (tmp_path / "memory" / name).read_bytes(), name


def test_native_passes_call_release_and_stop_where_it_raises():
    """The C passes' optional ``release`` is called every 2^20 rows walked (the tiers' walk:
    2^16; and once the track column is read): the answers are those without it; an exception it raises ends
    the pass with that exception."""
    ev = _crossing_trace(5, (1 << 21) + 1000)  # (track 1's events cross: the stack walk too)
    n = len(ev.start_ps)
    tr, st, du = ev.track, ev.start_ps, ev.dur_ps
    calls = []
    nested = _nested_trace(n)  # (its tracks in order: the order check walks every row)
    args = (nested.track, nested.start_ps, nested.dur_ps, 3)
    plain, called = ti._native.track_order(*args), ti._native.track_order(*args, lambda: calls.append("order"))
    assert all(np.array_equal(a, b) for a, b in zip(plain, called)) and calls.count("order") >= 2
    order, tb, bad = ti._native.track_order(tr, st, du, 3)
    for k in np.flatnonzero(bad).tolist():
        ti._native.sort_track(order[tb[k]:tb[k + 1]], st, du)
    got = []
    for release in (None, lambda: calls.append("depths")):
        depth, top = np.zeros(n, np.int16), np.zeros(3, np.int64)
        ti._native.depths(order, tb, st, du, depth, top, *([release] if release else []))
        got.append((depth, top))
    assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])
    assert calls.count("depths") >= 2
    # the tiers' walk, collecting with no mask (the preview's picks, its starts mapped)
    depth, top = got[0]
    targs = (order, tb, top, depth, None, np.ascontiguousarray(st - st.min(), np.int64), ti._level(du), (10, 12), False)
    plain, called = ti._native.tiers(*targs), ti._native.tiers(*targs, None, lambda: calls.append("tiers"))
    assert all(np.array_equal(a, b) for a, b in zip(plain, called)) and len(plain[0]) and calls.count("tiers") >= 2
    with pytest.raises(ZeroDivisionError):
        ti._native.tiers(*targs, None, lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        ti._native.track_order(tr, st, du, 3, lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        ti._native.depths(order, tb, st, du, np.zeros(n, np.int16), np.zeros(3, np.int64), lambda: 1 // 0)
    m = (1 << 20) + 10  # (tier_merge calls it every 2^20 rows merged)
    args = (np.ones(m, np.uint32), 1, np.array([m], np.int64), np.array([0, m], np.int64),
            np.arange(m, dtype=np.int64), np.zeros(m, np.uint8), np.zeros(m, np.int8))
    (plain,), (called,) = ti._native.tier_merge(*args), ti._native.tier_merge(*args, lambda: calls.append("merge"))
    assert np.array_equal(plain, called) and calls.count("merge") == 1
    with pytest.raises(ZeroDivisionError):
        ti._native.tier_merge(*args, lambda: 1 // 0)


def test_native_tier_merge_called_inside_another_keeps_each_ones_ties():
    """``tier_merge`` orders the rows of one start by their (track, depth): a second merge
    run while the first is under way (here from the first one's ``release``, as another
    thread's could, the GIL let go) must not reorder the first one's later ties by its own
    columns, as a comparator's static columns did."""
    m = (1 << 20) + 4096  # release comes after 2^20 rows merged; ties follow it
    start = np.arange(m, dtype=np.int64) // 4
    args = (np.ones(m, np.uint32), 1, np.array([m], np.int64), np.array([0, m], np.int64), start)
    track = (3 - np.arange(m) % 4).astype(np.int32)  # each start's four rows, backwards
    (alone,) = ti._native.tier_merge(*args, track, np.zeros(m, np.int16))
    other = (np.zeros(m, np.int32), np.zeros(m, np.int16))  # the same starts, no tie reversed
    nested = []
    (outer,) = ti._native.tier_merge(*args, track, np.zeros(m, np.int16),
                                     lambda: nested.append(ti._native.tier_merge(*args, *other)[0]))
    assert len(nested) == 1 and np.array_equal(nested[0], np.arange(m, dtype=np.int32))
    assert alone[-4:].tolist() == [m - 1, m - 2, m - 3, m - 4]
    assert np.array_equal(outer, alone)


def test_let_go_keeps_what_a_shared_map_wrote(tmp_path):
    """``tv._let_go`` drops the pages of a shared writable map (``r+``, as IndexWriter's raw
    columns are mapped) too: what was written through it is the file's, read back after."""
    from profscope.tools import trace_visibility as tv

    path = tmp_path / "col.raw"
    np.arange(1 << 16, dtype=np.int64).tofile(path)
    col = np.memmap(path, np.int64, "r+", shape=(1 << 16,))
    col -= 5
    tv._let_go(col)
    assert col[0] == -5 and col[-1] == (1 << 16) - 6
    assert np.array_equal(np.fromfile(path, np.int64), np.arange(1 << 16, dtype=np.int64) - 5)


def test_gathered_reads_sorted_rows_a_block_at_a_time(tmp_path):
    """``trace_visibility._gathered`` (the flow pre-pass's reads of the mapped columns, a
    block at a time, each let go) is ``col[rows]``, for a map, a plain array and the
    index's widened durations, in one block or several."""
    from profscope.tools import trace_visibility as tv

    path = tmp_path / "col.raw"
    (np.arange(10_000, dtype=np.int64) * 3).tofile(path)
    col = np.memmap(path, np.int64, "r", shape=(10_000,))
    rows = np.sort(np.random.default_rng(2).choice(10_000, 3_001, replace=False))
    widened = ti._Widened(np.arange(10_000, dtype=np.uint32), np.int64, np.array([-1, -2], np.int64))
    for c in (col, np.asarray(col).copy(), widened):
        for step in (7, 1 << 18):
            assert np.array_equal(tv._gathered(c, rows, step), np.asarray(c[rows])), (type(c), step)


@pytest.mark.parametrize("ids", [[], [5], [3, -1, 3, 2**62, -1, 7, 3], list(range(50, 0, -1)) * 3,
                                 [-2**63, 2**63 - 1, 0, -1, 1, -2**63, 2**63 - 1, 12345 << 40]])
@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_dense_flow_numbers_are_np_uniques(ids, dtype):
    """``trace_visibility._dense`` (the flow pre-pass's and the build's dense flow numbers,
    in C: ``_trace_build.dense_numbers``) and its numpy twin are ``np.unique(ids,
    return_inverse=True)``, the inverse int32, the ids ordered as their dtype orders them."""
    from profscope.tools import trace_visibility as tv

    ids = np.array(ids, np.int64).view(dtype)
    want_uniq, want_inverse = np.unique(ids, return_inverse=True)
    for dense in (tv._dense, tv._dense_numpy):
        uniq, inverse = dense(ids)
        assert uniq.dtype == ids.dtype and np.array_equal(uniq, want_uniq) and inverse.dtype == np.int32
        assert np.array_equal(inverse, want_inverse.reshape(-1))


def _flow_arrows_reference(fe, start: np.ndarray, names: list) -> tuple[np.ndarray, np.ndarray]:
    """``_flow_arrows`` as it was written before its temporaries were narrowed (issue 40):
    np.unique for each flow's start slice, int64 positions, whole columns reordered."""
    from profscope.model.trace import FLOW_START

    o = np.lexsort((start[fe.seq], fe.flow_id))
    fid, rows, cat, kind = fe.flow_id[o], fe.seq[o], fe.category[o], fe.kind[o]
    n = len(fid)
    pos = np.arange(n)
    first = np.r_[True, fid[1:] != fid[:-1]]
    gid = np.cumsum(first) - 1
    dense = np.empty(n, np.int32)
    dense[o] = gid
    start_of = np.full(int(gid[-1]) + 1, -1, np.int64)
    starts = pos[kind == FLOW_START]
    g, at = np.unique(gid[starts], return_index=True)
    start_of[g] = starts[at]
    src = np.where(start_of[gid] >= 0, start_of[gid], pos - 1)
    ok = (src != pos) & ~(first & (start_of[gid] < 0))
    src, dst = src[ok], pos[ok]
    flow_name = names.index("flow")
    label = np.where(cat[src] >= 0, cat[src], flow_name).astype(np.int64)
    return np.stack([label, rows[src], rows[dst]], axis=1), dense


def test_flow_arrows_equal_the_plain_formulation(tmp_path):
    """The narrowed ``_flow_arrows`` gives the plain formulation's arrows and numbering on
    flows with one start slice, several, none (chained in time order), and categories or
    none, rows bound twice and ids past 2^63 (uint64)."""
    from profscope.model.trace import FLOW_END, FLOW_MID, FLOW_START, FlowEvents

    rng = np.random.default_rng(7)
    n_rows, m = 5000, 3000
    start = np.sort(rng.integers(0, 10**9, n_rows)).astype(np.int64)
    np.save(tmp_path / "start.npy", start)
    seq = np.sort(rng.integers(0, n_rows, m)).astype(np.int64)
    ids = rng.integers(0, 400, m).astype(np.uint64) + np.uint64(2**63 - 200)
    kind = rng.choice(np.array([FLOW_START, FLOW_MID, FLOW_END], np.int8), m, p=[0.2, 0.3, 0.5])
    category = np.where(rng.random(m) < 0.5, -1, rng.integers(0, 5, m)).astype(np.int32)
    fe = FlowEvents(seq, ids, kind, category)
    names = ["a", "b", "c", "d", "e"]
    got_names = list(names)
    arrows, dense = ti._flow_arrows(fe, tmp_path, ti._flow_name(got_names))
    want, want_dense = _flow_arrows_reference(fe, start, got_names)
    assert got_names == [*names, "flow"]
    assert arrows.dtype == np.int64 and dense.dtype == np.int32
    np.testing.assert_array_equal(arrows, want)
    np.testing.assert_array_equal(dense, want_dense)


@pytest.mark.parametrize("rel", [
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "xplane/mi300_jax_conv_xprof_touched/plugins/profile/jax_conv_minimal/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
])
def test_dense_numbers_in_c_are_the_numpy_twins_on_real_flow_ids(rel, shared_fixtures, tmp_path):
    """``_trace_build.dense_numbers`` numbers the flow ids of real TPU, ROCm and PyTorch
    profiles as its numpy twin does, as uint64 and as int64, and in a random order."""
    from profscope.tools import trace_visibility as tv

    path = shared_fixtures / "public_profiles" / rel
    ti.build_index(_read(path), tmp_path)
    ids = ti.TraceIndex(tmp_path).flow.flow_id
    assert len(ids) > 100
    shuffled = ids[np.random.default_rng(5).permutation(len(ids))]
    for x in (ids, ids.view(np.int64), shuffled, (shuffled ^ np.uint64(1 << 63)).view(np.int64)):
        (u, inv), (nu, ninv) = ti._native.dense_numbers(np.ascontiguousarray(x)), tv._dense_numpy(x)
        assert u.dtype == nu.dtype and np.array_equal(u, nu) and np.array_equal(inv, ninv)
