"""XProf's step grouping with the nesting edges as scans of the lines (issue 34, "Speed").

``Grouping._by_ranges``: on a plane whose lines are in line order and without allocator
events (the step reader's), each root's walk marks a nesting subtree by scanning its line
(``_xplane_scan.range_roots``) instead of walking a parent array and its CSR over every
event, and the roots' nesting parents come from one stack walk (``nest_parents_at``).
These tests hold it to the two ways it replaces, on real profiles: the C walks over the
nesting edges (``_by_ranges`` off) and the pure numpy/Python twin (``PROFSCOPE_NATIVE=0``),
group id for group id and step for step (names, begins, ends, ids).

Inputs: every xplane of the shared fixtures (TPU, TF GPU on 2 hosts, MI300 x2: their host
planes have no roots or were grouped at capture, so they answer the same without scans;
the TF CPU profile: 5 ``train`` roots nested under other events, threadpool regions), the
JAX CPU profiles of ``scripts/make_big_jax_profile.py`` (the 308 MB benchmark profile's
generator) at 300 and 1,500 steps, and one of those with events made async and roots
picked anywhere, for the scans' edge cases.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profscope.formats import xplane
from profscope.formats import xplane_step_events as xse
from profscope.formats import xplane_steps as xs
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2

pytestmark = pytest.mark.skipif(xw._native is None or not hasattr(xw._native, "range_roots"),
                                reason="the _xplane_scan extension (with range_roots) is not built")

ROOT = Path(__file__).parents[1]


def _jax_profile(tmp_path_factory, steps: int) -> Path:
    out = tmp_path_factory.mktemp(f"jax{steps}")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                          "--steps", str(steps)], capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


@pytest.fixture(scope="module")
def jax_profiles(tmp_path_factory) -> list[Path]:
    return [_jax_profile(tmp_path_factory, 300), _jax_profile(tmp_path_factory, 1500)]


_SERVING = """
import sys, jax, jax.numpy as jnp
jax.profiler.start_trace(sys.argv[1])
for s in range(4):
    with jax.profiler.StepTraceAnnotation("serve", step_num=s):
        jnp.ones(8).sum().block_until_ready()
jax.profiler.stop_trace()
"""


@pytest.fixture(scope="module")
def jax_serving(tmp_path_factory) -> Path:
    """A JAX CPU profile of 4 steps named ``serve``, not a name XProf takes for a step
    marker (IsExplicitHostStepMarker: ``train``/``test``/``TraceContext``...): each step's
    marker is its root, found by the root's key (line, span, group) in the step database."""
    out = tmp_path_factory.mktemp("serve")
    res = subprocess.run([sys.executable, "-c", _SERVING, str(out)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


def _host_plane(path: Path):
    with open(path, "rb") as f:
        ref = xplane.scan(f, str(path)).plane(xse.HOST_PLANE)
        if ref is None:
            return None
        ff, size = xplane.open_stream(f, str(path))
        data = xw.read_plane_bytes(ff, size, ref, pad=xw.PAD + (-ref.length) % 8)
    meta_bytes, spans = xw.split_plane(data, ref.length)
    return data, spans, xplane_pb2.XPlane.FromString(meta_bytes)


def _grouped(plane, mode: str, monkeypatch) -> tuple:
    """group_host_events of the plane: ``ranges`` (the default where built), ``edges`` (the
    C walks over the nesting edges) or ``numpy`` (PROFSCOPE_NATIVE=0); and whether the
    scans ran."""
    data, spans, meta = plane
    used = []
    real = xs.Grouping._by_ranges
    with monkeypatch.context() as m:
        m.setenv("PROFSCOPE_NATIVE", "0" if mode == "numpy" else "1")
        m.setattr(xs.Grouping, "_by_ranges",
                  lambda self, loops: used.append(real(self, loops) and mode == "ranges") or used[-1])
        stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        headers, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, xse.host_step_stats(stat_names))
        _lts, group, roots, named, _names, _lines = xse.group_host_events(ev, data, meta, headers)
    steps = [(r.group_id, r.name, r.start_ps, r.end_ps, r.line) for r in roots]
    return np.asarray(group).tolist(), steps, sorted(named.items()), any(used)


def _checked_nest(monkeypatch) -> list:
    """Every answer of the scans' lazy nesting parents (the roots', by one stack walk of
    their lines) checked against the whole parent array; the nodes asked, per call."""
    real = xs._LazyNest.__getitem__
    asked = []

    def checked(self, nodes):
        got = real(self, nodes)
        assert np.array_equal(got, self.g._full_nest(self.is_async)[nodes])
        asked.append(np.size(nodes))
        return got

    monkeypatch.setattr(xs._LazyNest, "__getitem__", checked)
    return asked


def _read_steps(path: Path, mode: str, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setenv("PROFSCOPE_NATIVE", "0" if mode == "numpy" else "1")
        if mode == "edges":
            m.setattr(xs.Grouping, "_by_ranges", lambda self, loops: False)
        with open(path, "rb") as f:
            ev = xse.read_step_events(f, str(path))
    return ev.grouping, ev.steps, ev.first_ps


def _fixture_xplanes(shared_fixtures) -> list[Path]:
    found = sorted(p for p in shared_fixtures.rglob("*.xplane.pb") if "corrupt" not in str(p))
    assert len(found) >= 6, found  # TPU, TF GPU x2, MI300 x2, TF CPU
    return found


def test_scans_equal_the_nesting_edges_and_numpy_on_every_fixture(shared_fixtures, monkeypatch):
    scanned = []
    for path in _fixture_xplanes(shared_fixtures):
        plane = _host_plane(path)
        if plane is None:
            continue
        by_ranges = _grouped(plane, "ranges", monkeypatch)
        assert by_ranges[:3] == _grouped(plane, "edges", monkeypatch)[:3], path.name
        assert by_ranges[:3] == _grouped(plane, "numpy", monkeypatch)[:3], path.name
        if by_ranges[3]:
            scanned.append(path.name)
            assert by_ranges[1], path.name  # steps found, not an empty answer
            with monkeypatch.context() as m:
                asked = _checked_nest(m)
                assert _grouped(plane, "ranges", monkeypatch)[:3] == by_ranges[:3]
            assert 1 in asked, asked  # a nested root's ancestors: the whole array, once
    # the TF CPU profile's 5 train roots, nested under other events (the lazy parents)
    assert scanned == ["vm.xplane.pb"]


def test_scans_equal_the_nesting_edges_and_numpy_on_jax_cpu_profiles(jax_profiles, monkeypatch):
    for path, n in zip(jax_profiles, (300, 1500)):
        plane = _host_plane(path)
        by_ranges = _grouped(plane, "ranges", monkeypatch)
        assert by_ranges[3] and len(by_ranges[1]) == n
        assert [s[1] for s in by_ranges[1][:2]] == ["train 0", "train 1"]
        assert by_ranges[:3] == _grouped(plane, "edges", monkeypatch)[:3]
        assert by_ranges[:3] == _grouped(plane, "numpy", monkeypatch)[:3]
        with monkeypatch.context() as m:
            asked = _checked_nest(m)
            assert _grouped(plane, "ranges", monkeypatch)[:3] == by_ranges[:3]
        assert asked and max(asked) == n  # the roots' parents, asked at once
        # the step lists of the reader (grouping, host step database, first event), all three ways
        got = _read_steps(path, "ranges", monkeypatch)
        assert got[0] == "grouped" and len(got[1]) == n
        assert got == _read_steps(path, "edges", monkeypatch) == _read_steps(path, "numpy", monkeypatch)


def test_steps_whose_roots_are_not_marker_names_equal_every_way(jax_serving, monkeypatch):
    """The host step database finds a root that is not a marker by name through the roots'
    keys (``_xplane_scan.host_step_db``, by group); the numpy twin by a dict of keys."""
    got = _read_steps(jax_serving, "ranges", monkeypatch)
    assert got[0] == "grouped" and [s["name"] for s in got[1]] == [f"serve {i}" for i in range(4)]
    assert got == _read_steps(jax_serving, "edges", monkeypatch) == _read_steps(jax_serving, "numpy", monkeypatch)


def test_range_walk_equals_the_stack_walk_with_async_events_and_roots_anywhere(jax_profiles):
    """The C scans against the C nesting edges on a real plane's columns where the profile
    has none of the edge cases: 5 % of the events made async (skipped by the stack walk:
    no parent, no subtree, and not ending a subtree), times cut to whole microseconds
    (children beginning or ending with their parent: contained, as ``<=`` says), roots
    picked at random (nested and outermost ones, in a random order), other edges between
    random events; group ids, the roots walked, and the nesting parents of random events
    equal."""
    data, spans, meta = _host_plane(jax_profiles[0])
    headers, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, {})
    n = ev.n
    rng = np.random.default_rng(34)
    line_ps = np.array([h.timestamp_ns for h in headers], np.int64) * 1000
    line = np.ascontiguousarray(ev.line, np.int32)
    coarse = 1_000_000  # times cut to whole microseconds: children that begin or end with their parent
    for trial, (async_share, off, dur) in enumerate((
            (0.0, ev.offset_ps, ev.duration_ps), (0.05, ev.offset_ps, ev.duration_ps),
            (0.05, ev.offset_ps // coarse * coarse, ev.duration_ps // coarse * coarse))):
        asy = rng.random(n) < async_share
        ts, end = np.empty(n, np.int64), np.empty(n, np.int64)
        xw._native.event_times(line, off, dur, line_ps, ts, end)
        parent = np.full(n, -1, np.int64)
        cut = np.r_[0, np.flatnonzero(line[1:] != line[:-1]) + 1, n]
        for a, z in zip(cut[:-1], cut[1:]):
            xw._native.nest_sequence(np.arange(a, z, dtype=np.int64), ts, end, asy, parent, None)
        assert (parent >= 0).sum() > n // 2  # deeply nested Python frames: most events have a parent
        first, kids = xw._native.nest_children(parent.copy())
        xp = rng.integers(0, n, 2000).astype(np.int64)
        xk = rng.integers(0, n, 2000).astype(np.int64)
        xfirst, xkids = xw._native.edges_csr(xp, xk, n)
        outer = np.flatnonzero((parent < 0) & ~asy)  # whole trees: big scans
        roots = np.unique(np.r_[rng.choice(n, 400, replace=False), rng.choice(outer, 100, replace=False)])
        roots = rng.permutation(roots).astype(np.int64)
        g_edges = np.full(n, -1, np.int32)  # the walks' group ids: int32
        g_scans = np.full(n, -1, np.int32)
        w_edges = xw._native.group_roots(roots, g_edges, first, kids, xfirst, xkids)
        w_scans = xw._native.range_roots(roots, g_scans, line, line_ps, off, dur, asy if asy.any() else None,
                                         xfirst, xkids)
        assert w_scans.tolist() == w_edges.tolist()
        assert np.array_equal(g_scans, g_edges)
        narrow, narrow_kids = xw._native.edges_csr(xp, xk, n, True)  # int32 offsets: the same edges and walks
        assert narrow.dtype == np.int32 and np.array_equal(narrow, xfirst) and np.array_equal(narrow_kids, xkids)
        g_narrow = np.full(n, -1, np.int32)
        w_narrow = xw._native.range_roots(roots, g_narrow, line, line_ps, off, dur, asy if asy.any() else None,
                                          narrow, xkids)
        assert w_narrow.tolist() == w_edges.tolist() and np.array_equal(g_narrow, g_edges)
        assert (g_scans >= 0).sum() > 4 * len(roots)  # subtrees marked, not the roots alone
        asked = np.sort(rng.choice(n, 3000, replace=False)).astype(np.int64)
        got = xw._native.nest_parents_at(asked, line, line_ps, off, dur, asy if asy.any() else None)
        assert np.array_equal(got, parent[asked]), trial


_CONTEXT_KINDS = ("_pt", "_p", "_ct", "_c", "_pid", "_r", "_a")


def _sparse_reads(sp, nodes, native: bool, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setenv("PROFSCOPE_NATIVE", "1" if native else "0")
        ok, k = sp._at(nodes)
        return ok.tolist(), np.asarray(k).tolist()


def test_sparse_reads_by_merge_equal_numpy_s_search(jax_profiles, shared_fixtures, monkeypatch):
    """``_Sparse._at`` by ``_xplane_scan.sorted_find`` (a merge of ascending nodes, a
    search back where they descend) and ``_common`` (the events two views share) against
    numpy's search and ``np.intersect1d`` (PROFSCOPE_NATIVE=0), on the grouping stats of
    real host planes: nodes as the grouping asks them (a view's own events, another
    view's, ascending samples) and as it never does (shuffled, repeated, below and past
    every event), each stat found at the same index or missing for both."""
    rng = np.random.default_rng(3434)
    planes = [p for p in (_host_plane(x) for x in [jax_profiles[0], *_fixture_xplanes(shared_fixtures)]) if p]
    read = 0
    for data, spans, meta in planes:
        stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        _h, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, xse.host_step_stats(stat_names))
        views = {s: xs._Sparse(xw.kind_stats(ev, s)) for s in _CONTEXT_KINDS}
        for name, sp in views.items():
            if not len(sp.events):
                continue
            read += 1
            near = np.r_[sp.events, sp.events + 1, -3, ev.n + 3].astype(np.int64)
            asked = [sp.events, np.sort(rng.choice(near, min(len(near), 5000))),
                     rng.permutation(near)[:5000], rng.choice(near, 3000)[::-1].copy(),
                     *(v.events for v in views.values())]
            for nodes in asked:
                nodes = np.asarray(nodes, np.int64)
                assert _sparse_reads(sp, nodes, True, monkeypatch) == _sparse_reads(sp, nodes, False, monkeypatch), name
            for other in views.values():
                with monkeypatch.context() as m:
                    m.setenv("PROFSCOPE_NATIVE", "1")
                    got = xs._common(sp.events, other.events)
                assert got.tolist() == np.intersect1d(sp.events, other.events, assume_unique=True).tolist()
    assert read >= 4  # the JAX profile's contexts, pids, roots at least


def test_sparse_values_equal_the_stat_views_without_a_temporary_as_large(jax_profiles):
    """``_Sparse``'s values (the last stat of an event, and with ``last=False`` the
    first, as the step names read ``step_num``) equal ``StatView``'s over every event, at
    every event of a real JAX host plane's grouping stats; and reading them at a view's
    events holds at most 30 bytes a node at the peak (tracemalloc: the result, the stat
    indices and the values zeroed in place; 34 with ``np.where``'s result beside them,
    docs/performance.md)."""
    import tracemalloc

    data, spans, meta = _host_plane(jax_profiles[0])
    stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
    _h, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, xse.host_step_stats(stat_names))
    every = np.arange(ev.n, dtype=np.int64)
    checked = 0
    for name in (*_CONTEXT_KINDS, "step_num"):
        if not xw.has_stat(ev, name):
            continue
        for last in (True, False):
            sp, view = xs._Sparse(xw.kind_stats(ev, name), last=last), xw.StatView(ev, name, last=last)
            assert np.array_equal(sp.int_value_at(every), view.int_value_at(every)), (name, last)
            assert np.array_equal(sp.int_or_uint_value_at(every), view.int_or_uint_value_at(every)), (name, last)
            assert np.array_equal(sp.present[every], view.present), (name, last)
            checked += 1
    assert checked >= 8
    sp = max((xs._Sparse(xw.kind_stats(ev, s)) for s in _CONTEXT_KINDS), key=lambda v: len(v.events))
    nodes = sp.events.copy()
    assert len(nodes) > 5000
    for read in (sp.int_value_at, sp.int_or_uint_value_at):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            read(nodes)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert peak <= 30 * len(nodes), f"{read.__name__}: {peak / len(nodes):.1f} bytes a node"


def test_scans_reject_bad_arrays():
    nat = xw._native
    z = np.zeros(3, np.int64)
    line = np.zeros(3, np.int32)
    first = np.zeros(4, np.int64)
    group = np.full(3, -1, np.int32)
    with pytest.raises(TypeError):  # line as int64
        nat.range_roots(np.zeros(1, np.int64), group, z, z[:1], z, z, None, first, z[:0])
    with pytest.raises(TypeError):  # group ids as int64 (the walks write int32)
        nat.range_roots(np.zeros(1, np.int64), np.full(3, -1, np.int64), line, z[:1], z, z, None, first, z[:0])
    with pytest.raises(ValueError):  # a line out of range
        nat.range_roots(np.zeros(1, np.int64), group, np.full(3, 2, np.int32), z[:1], z, z, None,
                        first, z[:0])
    with pytest.raises(ValueError):  # a root out of range
        nat.range_roots(np.array([7], np.int64), group, line, z[:1], z, z, None, first, z[:0])
    with pytest.raises(ValueError):  # nodes not sorted
        nat.nest_parents_at(np.array([2, 1], np.int64), line, z[:1], z, z, None)
    with pytest.raises(TypeError):  # keys as int32
        nat.sorted_find(np.zeros(2, np.int32), z)
