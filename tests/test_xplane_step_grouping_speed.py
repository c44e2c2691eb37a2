"""XProf's step grouping (formats/xplane_steps.py) on long CPU profiles: the native walks
(``_xplane_scan.nest_sequence`` / ``group_from``) give what the Python twin gives, group
id for group id and step for step, and the step reader's memory is bounded by the file.

The inputs are real: the TF CPU profile of the shared fixtures (allocator events, 5
``train`` steps grouped by XProf's rules) and a JAX CPU profile written by
``scripts/make_big_jax_profile.py`` (the generator of the 308 MB benchmark profile).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from profscope.formats import xplane_allocator as xm
from profscope.formats import xplane_step_events as xse
from profscope.formats import xplane_wire as xw

pytestmark = pytest.mark.skipif(xw._native is None, reason="the _xplane_scan extension is not built")

ROOT = Path(__file__).parents[1]
TF_CPU = "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb"


@pytest.fixture(scope="module")
def jax_cpu(tmp_path_factory) -> Path:
    """A JAX CPU profile of 300 training steps (2.5 MB, ~100k host events), every step a
    ``StepTraceAnnotation`` with XLA's per-thunk events and their producer/consumer flows."""
    out = tmp_path_factory.mktemp("jax300")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                          "--steps", "300"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


_NUMBERED = """
import sys, jax, jax.numpy as jnp
jax.profiler.start_trace(sys.argv[1])
for s in range(4):
    with jax.profiler.StepTraceAnnotation("train", step_num=100 + 7 * s):
        jnp.ones(8).sum().block_until_ready()
jax.profiler.stop_trace()
"""


@pytest.fixture(scope="module")
def jax_numbered(tmp_path_factory) -> Path:
    """A JAX CPU profile whose 4 steps are numbered 100, 107, 114, 121 (``step_num``), not
    0-3 as their group ids: a name that took the group id would show."""
    out = tmp_path_factory.mktemp("jaxnum")
    res = subprocess.run([sys.executable, "-c", _NUMBERED, str(out)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


def _steps(path: Path, native: bool, monkeypatch) -> tuple:
    monkeypatch.setenv("PROFSCOPE_NATIVE", "1" if native else "0")
    with open(path, "rb") as f:
        ev = xse.read_step_events(f, str(path))
    return ev.grouping, ev.steps, ev.first_ps


def test_native_grouping_equals_python_on_a_jax_cpu_profile(jax_cpu, monkeypatch):
    grouping, steps, first = _steps(jax_cpu, True, monkeypatch)
    assert grouping == "grouped" and len(steps) == 300
    assert [s["name"] for s in steps[:2]] == ["train 0", "train 1"]
    assert (grouping, steps, first) == _steps(jax_cpu, False, monkeypatch)


def test_native_grouping_equals_python_on_the_tf_cpu_fixture(shared_fixtures, monkeypatch):
    """Allocator events (hung under their nesting parent), threadpool regions, TF names."""
    data = (shared_fixtures / TF_CPU).read_bytes()
    out = {}
    for native in (True, False):
        monkeypatch.setenv("PROFSCOPE_NATIVE", "1" if native else "0")
        ev = xm.read_allocator_events(io.BytesIO(data), "vm.xplane.pb")
        out[native] = (ev.grouping, ev.steps, np.asarray(ev.group_id).tolist())
    assert out[True][0] == "grouped" and [s.name for s in out[True][1]] == [f"train {i}" for i in range(5)]
    assert max(out[True][2]) == 4
    assert out[True] == out[False]


def test_native_step_db_equals_numpy_on_the_tf_cpu_fixture(shared_fixtures, monkeypatch):
    """The host step database in C (``_xplane_scan.host_step_db``) against its numpy twin
    on XProf's grouping of a real TF CPU profile: 5 ``train`` steps (explicit markers),
    allocator events, the time of each type and the unknown rest, byte for byte."""
    path = shared_fixtures / TF_CPU
    got = _steps(path, True, monkeypatch)
    assert got[0] == "grouped" and [s["name"] for s in got[1]] == [f"train {i}" for i in range(5)]
    assert all(s["type_ps"][xse.HOST_COMPUTE] > 0 for s in got[1])
    assert got == _steps(path, False, monkeypatch)


def test_step_names_as_arrays_equal_the_context_walks(jax_cpu, jax_numbered, shared_fixtures, monkeypatch):
    """Grouping._steps names the 44,000 roots of a long profile with arrays where each name
    stat is the root's own (or absent, or the root has no parent); its result is
    EventNode::GetGroupName's walk (Grouping._step) root for root, on a JAX profile
    (step_num on the root) and the TF CPU fixture (TF names, allocator events)."""
    from profscope.formats import xplane_steps as xs

    def walks_only(self, walked, *args):
        return [self._step(r, k, *args) for k, r in enumerate(walked)]

    assert [s["name"] for s in _steps(jax_numbered, True, monkeypatch)[1]] == ["train 100", "train 107", "train 114",
                                                                                "train 121"]
    for path in (jax_cpu, jax_numbered, shared_fixtures / TF_CPU):
        by_arrays = _steps(path, True, monkeypatch)
        with monkeypatch.context() as m:
            m.setattr(xs.Grouping, "_steps", walks_only)
            assert _steps(path, True, monkeypatch) == by_arrays, path.name


def test_host_steps_run_on_small_pages_and_restore_numpy_s_setting(jax_cpu, monkeypatch):
    """The CPU host's step reader turns numpy's huge pages off while it runs (its short
    lived arrays over every event cost 3x the system time on huge pages here) and puts the
    process's setting back after, also when it fails or when readers nest."""
    from numpy._core.multiarray import _set_madvise_hugepage

    seen = []
    inner = xse._host_steps

    def spy(*args):
        was = _set_madvise_hugepage(False)
        _set_madvise_hugepage(was)
        seen.append(was)
        with xse.small_pages():  # nested: still off inside, and the outer restore wins
            pass
        return inner(*args)

    monkeypatch.setattr(xse, "_host_steps", spy)
    before = _set_madvise_hugepage(True)
    try:
        with open(jax_cpu, "rb") as f:
            assert len(xse.read_step_events(f, str(jax_cpu)).steps) == 300
        assert seen == [False] and _set_madvise_hugepage(True) is True
        monkeypatch.setattr(xse, "_host_steps", lambda *a: 1 / 0)
        with pytest.raises(ZeroDivisionError), open(jax_cpu, "rb") as f:
            xse.read_step_events(f, str(jax_cpu))
        assert _set_madvise_hugepage(True) is True
    finally:
        _set_madvise_hugepage(before)


def test_an_extension_built_before_the_lean_reader_still_reads_the_steps(jax_cpu, monkeypatch):
    """An installed extension with only 1c72efb's functions (decoder, run walks, the two
    walks; ``nest_sequence`` wanting an array for ``below``): the reader falls back to
    numpy where a function is missing, not to an AttributeError, with the same steps."""
    import types

    want = _steps(jax_cpu, True, monkeypatch)
    real = xw._native

    def nest_sequence(ids, ts, end, is_async, parent, below):
        if below is None:
            raise TypeError("below: an int64 array")
        return real.nest_sequence(ids, ts, end, is_async, parent, below)

    old = types.SimpleNamespace(**{k: getattr(real, k) for k in ("decode_events", "event_run", "run_count",
                                                                   "group_from", "set_truncated")},
                                nest_sequence=nest_sequence)
    monkeypatch.setattr(xw, "_native", old)
    assert _steps(jax_cpu, True, monkeypatch) == want


def test_step_reader_memory_is_bounded_by_the_file(jax_cpu):
    """The grouping's per-event state lives in arrays (no dict entry, list or Python int
    per event), only the stats the steps read are decoded, each per-event temporary is
    dropped after its use, and the host step database is one C pass over the decoded
    columns, whose group ids (the C walks') are int32, the step names' stats read at the
    roots (no view over every event) and the root levels int8 where they fit: at most
    3.5x the file at the peak (tracemalloc, numpy's buffers and the decoder's arrays
    included; 3.3x when written, 3.8x at cf6a813, 5.8x when the bound was 6.2x, 6.7x at
    1c72efb, 7.0x at 2b15384, 8.35x at 8af1827, 9.1x at 9596bbe, 22.6x before 4a93d9b,
    when the 308 MB profile took 7.3 GB)."""
    size = jax_cpu.stat().st_size
    tracemalloc.start()
    try:
        with open(jax_cpu, "rb") as f:
            ev = xse.read_step_events(f, str(jax_cpu))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ev.steps) == 300
    assert peak <= 3.5 * size, f"peak {peak / 2**20:.1f} MiB = {peak / size:.2f}x the file"


def test_native_walks_reject_bad_arrays():
    nat = xw._native
    ts = np.zeros(3, np.int64)
    with pytest.raises(TypeError):
        nat.nest_sequence(np.arange(3), ts.astype(np.int32), ts, np.zeros(3, bool), ts.copy(), ts.copy())
    with pytest.raises(ValueError):
        nat.nest_sequence(np.array([5], np.int64), ts, ts, np.zeros(3, bool), ts.copy(), ts.copy())
    group = np.full(3, -1, np.int32)  # the walks' group ids: int32
    first = np.zeros(4, np.int64)
    with pytest.raises(TypeError):
        nat.group_from(0, 0, group.astype(np.int64), first, np.zeros(0, np.int64), first, np.zeros(0, np.int64))
    with pytest.raises(ValueError):
        nat.group_from(7, 0, group, first, np.zeros(0, np.int64), first, np.zeros(0, np.int64))
    bad_first = np.array([0, 5, 5, 5], np.int64)  # offsets past the edges
    with pytest.raises(ValueError):
        nat.group_from(0, 0, group, bad_first, np.zeros(1, np.int64), first, np.zeros(0, np.int64))


def test_native_step_db_rejects_bad_arrays():
    """Ids that would index past a table are refused before any pass reads them."""
    i64, i32 = np.zeros(2, np.int64), np.zeros(2, np.int32)
    flags, kinds = np.zeros(1, np.uint8), np.zeros(1, np.int16)
    none = (np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
            np.zeros(0, np.int64))

    one_line = np.zeros(1, np.int64)

    def call(group=i64, line=i32, mid=i64, line_ps=one_line, n_groups=1):
        return xw._native.host_step_db(group, line, i64, i64, mid, line_ps, np.zeros(len(line_ps), np.int32),
                                       flags, kinds, *none, n_groups)

    assert call()[0] == 0  # two events at 0 of group 0
    with pytest.raises(ValueError):
        call(group=np.array([0, 1], np.int64))  # group 1 of 1
    with pytest.raises(ValueError):
        call(line=np.array([0, 1], np.int32))  # line 1 of 1
    with pytest.raises(ValueError):
        call(mid=np.array([0, 3], np.int64))  # metadata id 3 of a table of 1
    with pytest.raises(TypeError):
        call(line=i64)  # int64 lines
    with pytest.raises(ValueError):  # int32 ids are checked as the int64 ones
        call(group=np.array([0, 1], np.int32))
    with pytest.raises(ValueError):
        call(mid=np.array([0, 3], np.int32))
    with pytest.raises(TypeError):
        call(group=np.zeros(2, np.int16))


def test_native_step_db_reads_int32_and_int64_ids_alike(jax_cpu):
    """The walks' int32 group ids and the build's gathered int32 metadata ids
    (HostEventColumns) give the C step database the steps the int64 ones give, on a real
    JAX CPU host plane's grouping: 300 steps, every type's time equal."""
    from profscope.formats import xplane

    with open(jax_cpu, "rb") as raw:
        ref = xplane.scan(raw, str(jax_cpu)).plane(xse.HOST_PLANE)
        raw.seek(0)
        f, size = xplane.open_stream(raw, str(jax_cpu))
        data = xw.read_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
    meta_bytes, spans = xw.split_plane(data, ref.length)
    meta = xse.xplane_pb2.XPlane.FromString(meta_bytes)
    names = {k: v.name for k, v in meta.stat_metadata.items()}
    headers, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, xse.host_step_stats(names))
    line_ts, group, roots, named, event_names, line_names = xse.group_host_events(ev, data, meta, headers)
    assert group.dtype == np.int32  # the C walks' ids, not copied to int64

    def steps(group_ids, mids):
        out = []
        cols = xw.Events(ev.n, ev.line, mids, ev.offset_ps, ev.duration_ps, {})
        first = xse._host_step_db_native(cols, line_ts, group_ids, roots, named, event_names, line_names, out)
        return first, out

    want = steps(group.astype(np.int64), ev.metadata_id.astype(np.int64))
    assert len(want[1]) == 300
    assert steps(group, ev.metadata_id.astype(np.int64)) == want
    assert steps(group, ev.metadata_id.astype(np.int32)) == want
    assert steps(group.astype(np.int64), ev.metadata_id.astype(np.int32)) == want


# -- the steps on the trace index's clock ---------------------------------------------------

# -- the steps on the trace index's clock ---------------------------------------------------


def _device_events(path: Path) -> np.ndarray:
    """(device-clock begin, trace-clock begin, plane id) of every device-plane event: the
    device clock is XProf's (``device_offset_ps`` where the event has it), the trace
    clock the line's timestamp + offset, which the trace viewer and the index use."""
    from profscope.formats import xplane

    out = []
    with open(path, "rb") as raw:
        index = xplane.scan(raw, str(path))
        for ref in index.planes:
            if not ref.name.startswith((xse.GPU_PREFIX, xse.TPU_PREFIX)):
                continue
            raw.seek(0)
            plane = xplane.read_plane(raw, ref, str(path))
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            meta = {k: xse._stats(m.stats, names) for k, m in plane.event_metadata.items()}
            for line in plane.lines:
                line_ps = line.timestamp_ns * 1000
                for ev in line.events:
                    st = {**meta.get(ev.metadata_id, {}), **xse._stats(ev.stats, names)}
                    out.append((xse.device_span(ev, st, line_ps)[0], line_ps + ev.offset_ps, int(plane.id)))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


@pytest.fixture(scope="module")
def xplane_answers(shared_fixtures, tmp_path_factory):
    """Every host of the public xplanes and of the demo's CPU profiles: its /api/steps_ops
    step part, its trace index and its file."""
    from profscope.app.traces import TraceQuery
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.model.catalog import RunKind
    from profscope.storage import LogDir

    out = []
    for root in (shared_fixtures / "public_profiles" / "xplane", ROOT / "src" / "profscope" / "demo" / "logdir"):
        ws = Workspace(LogDir(str(root), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
        for run in ws.runs():
            if run.kind is not RunKind.PROFILE or "corrupt" in run.name:
                continue
            for host in run.hosts:
                answer = ws.xplane_steps_ops(run, host)
                name, info, _pos = ws._trace_hosts(run, TraceQuery(host=host))[0]
                out.append((f"{run.name}/{host}", answer, ws.trace_index(run, name, info), root / info.path))
    return out


def test_step_windows_hold_the_steps_events_on_the_index_clock(xplane_answers):
    """Each step's ``trace_window_ps`` (absolute ps on the index's clock) holds the events
    that begin in the step on XProf's clock. On the TPU v6e profile the two clocks drift
    apart by up to 0.26 s over the profile (so the earliest device event is no exact
    anchor for a later step); GPU, ROCm and CPU profiles have one clock. The index holds every such event at
    its window time less its ``origin_ps``."""
    seen = set()
    for name, answer, ix, path in xplane_answers:
        events = _device_events(path)
        for step in answer["steps"]:
            begin, end = step["trace_window_ps"]
            a = answer["origin_ps"] + round(step["start_us"] * 1e6)  # start_us: ns rounding
            b = a + round(step["step_time_us"] * 1e6)
            if not len(events):  # CPU only: the host's steps are on the index's clock already
                assert abs(begin - a) <= 1000 and abs(end - b) <= 1000, (name, step["step"])
                seen.add("cpu")
                continue
            seen.add(answer["summary"]["hardware"])
            dev, trace = events[:, 0], events[:, 1]
            surely_in = set(trace[(dev >= a + 1000) & (dev < b - 1000)].tolist())
            maybe_in = set(trace[(dev >= a - 1000) & (dev < b + 1000)].tolist())
            in_window = set(trace[(trace >= begin) & (trace < end)].tolist())
            assert surely_in <= in_window <= maybe_in, (name, step["step"], len(surely_in), len(in_window))
            idx = set((np.asarray(ix.cols["start"]).astype(np.int64) + ix.origin_ps).tolist())
            assert in_window <= idx, (name, step["step"], len(in_window - idx))
            for d in step["devices"]:  # per device: its own clock
                on = events[events[:, 2] == d["device"]]
                db, de = d["trace_window_ps"]
                want = set(on[(on[:, 0] >= a - 1000) & (on[:, 0] < b + 1000), 1].tolist())
                got = set(on[(on[:, 1] >= db) & (on[:, 1] < de), 1].tolist())
                # TPU: a step's bound from another core is placed through this core's
                # nearest event; its clocks are not monotonic to each other by < 1 us
                assert len(want ^ got) <= max(2, len(want) // 500), (name, step["step"], d["device"], len(want ^ got))
    assert {"cpu", "GPU", "TPU"} <= seen, seen


def test_trace_clock_places_each_tpu_event_at_its_index_time(shared_fixtures):
    """Every event of a TPU core, given by its time on XProf's device clock, is placed at
    its own time on the index's clock (their offset varies by 0.20-0.26 s per core over
    this profile: a later step of a long TPU profile would be placed by one anchor up to
    that far off). Events sharing a device begin (an op and its first nested op) share the
    trace begin the lookup takes; all others are exact."""
    from profscope.tools import xplane_step_breakdown as xsb

    path = shared_fixtures / "public_profiles/xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb"
    with open(path, "rb") as f:
        ev = xse.read_step_events(f, str(path))
    events = _device_events(path)
    checked = 0
    for dev in ev.devices:
        clock = xsb._TraceClock(dev)
        on = events[events[:, 2] == dev.device]
        drift = on[:, 1] - on[:, 0]
        assert drift.max() - drift.min() > 10**11  # > 0.1 s: no constant offset would do
        placed = np.array([clock.begin(t) for t in on[:, 0].tolist()])
        ambiguous = np.isin(on[:, 0], on[:, 0][np.diff(np.sort(on[:, 0]), prepend=-1) == 0])
        assert (placed[~ambiguous] == on[~ambiguous, 1]).all()
        checked += int((~ambiguous).sum())
    assert checked > 5000


def test_a_plane_without_allocator_events_nests_by_the_stack_walk_alone(jax_cpu, shared_fixtures, monkeypatch):
    """The step reader's grouping (no allocator event: ``ev_kind`` all 0) nests each line
    by the stack walk alone, without _nest_line's allocator masks (``mem``, ``special``,
    ``below``: whole-profile temporaries), and gives the same steps, native and Python;
    the memory profile's grouping of the TF CPU fixture (allocator events) still takes
    _nest_line."""
    from profscope.formats import xplane_steps as xs

    want = {native: _steps(jax_cpu, native, monkeypatch) for native in (True, False)}
    calls = []
    real = xs.Grouping._nest_line
    monkeypatch.setattr(xs.Grouping, "_nest_line", lambda self, *a: calls.append(1) or real(self, *a))
    for native in (True, False):
        assert _steps(jax_cpu, native, monkeypatch) == want[native]
    assert calls == []
    assert want[True] == want[False]
    data = (shared_fixtures / TF_CPU).read_bytes()
    xm.read_allocator_events(io.BytesIO(data), "vm.xplane.pb")
    assert calls


def test_the_stats_no_mutator_reads_are_not_decoded(jax_cpu, shared_fixtures):
    """XProf's launch and queue mutators' stats are decoded only where the plane has all
    of a mutator's stats and an event of its names; elsewhere the grouping never reads
    them (``xs.unread_stats``: a JAX CPU profile's device_ordinal and run_id), and the
    group ids, roots and named roots are those of a decode of every grouping stat."""
    from profscope.formats import xplane
    from profscope.formats import xplane_steps as xs

    launch, queue = {"device_ordinal", "queue_id", "run_id", "core_type"}, {"request_id", "queue_addr"}
    assert xs.unread_stats({"device_ordinal", "queue_id", "run_id"}, {"DoEnqueueProgram"}) == queue
    assert xs.unread_stats({"device_ordinal", "queue_id"}, {"DoEnqueueProgram"}) == launch | queue
    assert xs.unread_stats({"request_id", "queue_addr"}, {"CustomWait"}) == launch
    assert not xs.unread_stats(launch | queue, {"CompleteCallbacks", "EnqueueRequestLocked"})
    for path in (jax_cpu, shared_fixtures / TF_CPU):
        with open(path, "rb") as raw:
            ref = xplane.scan(raw, str(path)).plane(xse.HOST_PLANE)
            raw.seek(0)
            data = xw.read_plane_bytes(*xplane.open_stream(raw, str(path)), ref, pad=xw.PAD + (-ref.length) % 8)
        meta_bytes, spans = xw.split_plane(data, ref.length)
        meta = xse.xplane_pb2.XPlane.FromString(meta_bytes)
        names = {k: v.name for k, v in meta.stat_metadata.items()}
        lean = xse.host_step_stats(names, {m.name for m in meta.event_metadata.values()})
        if path == jax_cpu:
            assert {"device_ordinal", "run_id"} <= set(xse.host_step_stats(names).values()) - set(lean.values())
        got = []
        for wanted in (lean, xse.host_step_stats(names)):
            headers, ev = xw.decode_plane(data, np.frombuffer(data, np.uint8), spans, wanted)
            _, group, roots, named, _, _ = xse.group_host_events(ev, data, meta, headers)
            got.append((np.asarray(group).tolist(), list(roots), named))
        assert got[0] == got[1] and max(got[0][0]) > 0
