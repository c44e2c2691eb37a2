"""The trace index's size on disk (issue 40: at most 1.5x the file): its columns stored as
narrow as their values fit and read back as the wide columns they were (index version 12),
on real profiles: a JAX CPU profile from the generator of the 308 MB benchmark profile,
TPU and GPU xplanes, a PyTorch Chrome trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profscope.formats import chrome_trace, xplane_trace
from profscope.model.trace import TraceEvents, Track
from profscope.testing.timelines import build_index
from profscope.tools import trace_index as ti

ROOT = Path(__file__).parents[1]
REAL = ["xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
        "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
        "traces/kineto_resnet50_v100.pt.trace.json.gz"]


@pytest.fixture(scope="module")
def jax_cpu(tmp_path_factory) -> Path:
    """A JAX CPU profile of 300 training steps (2.5 MB, ~100k host events): the kind of
    profile jax308 is, from the same generator."""
    out = tmp_path_factory.mktemp("jax300")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                          "--steps", "300"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


def _read(path: Path, sink=None) -> TraceEvents:
    with open(path, "rb") as f:
        if path.name.endswith(".xplane.pb"):
            return xplane_trace.read_trace(f, str(path), 0, "host", sink=sink)
        return chrome_trace.trace_columns(f, str(path), sink=sink)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def test_jax_cpu_index_at_most_one_and_a_half_times_the_file(jax_cpu, tmp_path):
    """Was 1.91x the file (32 bytes of columns per event); the narrow columns make it 1.35x."""
    build_index(jax_cpu, tmp_path / "ix")
    assert _size(tmp_path / "ix") <= 1.5 * jax_cpu.stat().st_size


def _check_round_trip(path: Path, ix: ti.TraceIndex) -> None:
    """Every column read through the index (whole, by row, slice, row ids, mask, negative
    row) is the reader's, as wide as it always was; the files are as narrow as the values."""
    ev = _read(path)
    cols = {k: np.asarray(ix.cols[k]) for k in ("start", "dur", "track", "depth", "name")}
    for k, dtype in ti._WIDE.items():
        assert cols[k].dtype == dtype and ix.cols[k][:3].dtype == dtype, k
    # the same events: (track, start, duration, name) as the reader made them, as a multiset
    dur = np.clip(ev.dur_ps, 0, ti.MAX_DUR_PS)
    mine = np.lexsort((cols["name"], cols["dur"], cols["start"], cols["track"]))
    theirs = np.lexsort((ev.name, dur, ev.start_ps, ev.track))
    shift = int(ix.meta["origin_ps"]) - int(ev.base_ps)  # the index's starts are from its origin
    assert np.array_equal(cols["track"][mine], ev.track[theirs])
    assert np.array_equal(cols["start"][mine], ev.start_ps[theirs] - shift)
    assert np.array_equal(cols["dur"][mine], dur[theirs])
    assert np.array_equal(cols["name"][mine], ev.name[theirs])
    # each row's duration within its level's bounds: a tail row read from dur.npy alone
    # (0 there) would fall out of them
    level = np.repeat(np.arange(ti.LEVELS), np.diff(ix.levels))
    assert np.all((cols["dur"] < (2 << level)) & ((cols["dur"] >= (1 << level)) | (level == 0)))
    n = ix.n
    rng = np.random.default_rng(0)
    rows = np.concatenate([rng.integers(0, n, 500), np.arange(max(0, n - 40), n)])
    for k, col in cols.items():
        c = ix.cols[k]
        assert np.array_equal(c[rows], col[rows]) and np.array_equal(c[rows.tolist()], col[rows]), k
        assert np.array_equal(c[col > col.mean()], col[col > col.mean()]), k
        assert [int(c[int(r)]) for r in rows[-50:]] == col[rows[-50:]].tolist(), k
        assert int(c[-1]) == int(col[-1]) and np.array_equal(c[n // 2:], col[n // 2:]), k
        assert np.array_equal(c[n - 60:n - 5], col[n - 60:n - 5]) and np.array_equal(c[::7], col[::7]), k
    # stored: the first dtype of each list that holds the values, durations as uint32 with
    # the rows of levels >= 32 also in the tail file
    for k in ("track", "name", "depth"):
        stored = np.load(ix.folder / f"{k}.npy", mmap_mode="r").dtype
        lo, hi = int(cols[k].min()), int(cols[k].max())
        fits = [d for d in ti._NARROW[k] if np.iinfo(d).min <= lo and hi <= np.iinfo(d).max]
        assert stored == (fits[0] if fits else ti._WIDE[k]), k
    assert np.load(ix.folder / "dur.npy", mmap_mode="r").dtype == np.uint32
    long_rows = n - ix.levels[ti.DUR_TAIL_LEVEL]
    tail = ix.folder / ti.DUR_TAIL_FILE
    assert (np.load(tail) if tail.exists() else np.zeros(0)).tolist() == cols["dur"][n - long_rows:].tolist()


def test_jax_cpu_columns_read_back_as_written(jax_cpu, tmp_path):
    ix = build_index(jax_cpu, tmp_path / "ix")
    assert ix.n - ix.levels[ti.DUR_TAIL_LEVEL] > 0  # steps longer than 4.3 ms: a tail to read
    _check_round_trip(jax_cpu, ix)


@pytest.mark.parametrize("rel", REAL)
def test_real_columns_read_back_as_written(rel, shared_fixtures, tmp_path):
    path = shared_fixtures / "public_profiles" / rel
    _check_round_trip(path, build_index(path, tmp_path / "ix"))


def test_flow_arrows_as_rows_read_back_as_points(jax_cpu, tmp_path):
    """The flow-bound slices' arrows are stored as rows; read back, each arrow's ends are
    its slices' tracks and starts, from a flow's first slice to its others."""
    ix = build_index(jax_cpu, tmp_path / "ix")
    stored = np.load(ix.folder / ti.FLOW_ARROWS_FILE)
    assert stored.dtype == np.int32 and len(stored) > 1000
    f = ix.flows
    assert f.dtype == np.int64 and f.shape == (len(stored), 5)
    start, track = np.asarray(ix.cols["start"]), np.asarray(ix.cols["track"])
    src, dst = stored[:, 1], stored[:, 2]
    assert np.array_equal(f[:, 1], track[src]) and np.array_equal(f[:, 2], start[src])
    assert np.array_equal(f[:, 3], track[dst]) and np.array_equal(f[:, 4], start[dst])
    bound = dict(zip(ix.flow.seq.tolist(), ix.flow.flow_id.tolist()))
    assert all(bound[a] == bound[b] for a, b in zip(src.tolist(), dst.tolist()))  # one flow per arrow
    assert ix.flow.seq.dtype == np.int64 and ix.flow.category.dtype == np.int32  # read as wide as before


def test_columns_too_wide_stay_wide(tmp_path):
    """Values past a narrow dtype keep the next one: 70,000 names stay int32, 300 tracks
    uint16; every value reads back."""
    n = 140_000
    rng = np.random.default_rng(3)
    track = (np.arange(n) % 300).astype(np.int32)
    start = np.sort(rng.integers(0, 10**12, n)).astype(np.int64)
    dur = rng.integers(1, 10**6, n).astype(np.int64)
    name = (np.arange(n) // 2).astype(np.int32)
    names = [f"n{i}" for i in range(n // 2)]
    ev = TraceEvents(path="wide", hostname="", base_ps=0, track=track.copy(), start_ps=start.copy(),
                     dur_ps=dur.copy(), name=name.copy(), args_off=np.zeros(n, np.int64),
                     args_len=np.zeros(n, np.int32), blob=[], args_kind="json", names=names,
                     tracks=[Track(1, i, f"t{i}", i) for i in range(300)])
    ti.build_index(ev, tmp_path)
    ix = ti.TraceIndex(tmp_path)
    assert np.load(tmp_path / "name.npy", mmap_mode="r").dtype == np.int32
    assert np.load(tmp_path / "track.npy", mmap_mode="r").dtype == np.uint16
    o = np.lexsort((np.asarray(ix.cols["name"]), np.asarray(ix.cols["track"]), np.asarray(ix.cols["start"])))
    p = np.lexsort((name, track, start))
    assert np.array_equal(np.asarray(ix.cols["name"])[o], name[p])
    assert np.array_equal(np.asarray(ix.cols["track"])[o], track[p])
    assert np.array_equal(np.asarray(ix.cols["dur"])[o], dur[p])
