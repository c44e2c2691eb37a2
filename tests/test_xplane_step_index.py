"""A CPU-only xplane's host steps grouped by the trace index build (issue 34's speed bar):
when Steps & ops asks for the index (``steps=True``), its build groups the host plane's
events from the plane's bytes it has read anyway (formats/xplane_trace.py,
``xplane_step_events.host_steps_in_build``: the step reader's decode and grouping, not a
second read of the file), keeps the steps in the index folder (``host_steps.json``,
app/profile_steps.py), and the Steps & ops answer read from them is the step reader's
answer byte for byte (``read_step_events``, which index folders built for the timeline
alone, older ones and profiles never indexed still use). A timeline's build groups
nothing: it costs what it did.

The inputs are real: the TF CPU profile of the shared fixtures and the demo's CPU
profiles (grouped here by XProf's rules), the ``pregrouped_cpu`` builder (grouped when it
was captured: ``group_id``/``step_name`` stats), and a JAX CPU profile of
``scripts/make_big_jax_profile.py`` (~100k host events: several decode chunks); each
with the native decoder and without it (``PROFSCOPE_NATIVE=0``).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from profscope.app import profile_steps
from profscope.formats import xplane_step_events as xse
from profscope.formats import xplane_trace
from profscope.testing import step_xplane

ROOT = Path(__file__).parents[1]
TF_CPU = "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb"
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
GPU = "public_profiles/xplane/mi300_jax08_gemm/plugins/profile/jax08_gemm/tw003.xplane.pb"


@pytest.fixture(scope="module")
def jax_cpu(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jax300")
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                          "--steps", "300"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.rglob("*.xplane.pb"))


def _profiles(shared_fixtures, jax_cpu) -> dict[str, bytes]:
    out = {"tf_bfc_cpu": (shared_fixtures / TF_CPU).read_bytes(), "pregrouped_cpu": step_xplane.pregrouped_cpu(),
           "jax_cpu_300": jax_cpu.read_bytes()}
    for p in sorted(DEMO.rglob("*.xplane.pb")):
        out[f"demo_{p.parts[-5]}"] = p.read_bytes()
    return out


@pytest.mark.parametrize("native", ["1", "0"])
def test_index_build_steps_are_the_readers(shared_fixtures, jax_cpu, tmp_path, monkeypatch, native):
    """Per CPU profile: the steps the trace index build grouped, written to and read
    from an index folder, give the Steps & ops / overview step database and breakdown
    the step reader gives, byte for byte. A small decode chunk too: the gathered
    columns of many chunks are the columns of one decode."""
    monkeypatch.setenv("PROFSCOPE_NATIVE", native)
    seen = set()
    default = xplane_trace.CHUNK_EVENTS
    for name, data in _profiles(shared_fixtures, jax_cpu).items():
        want = profile_steps._answer(xse.read_step_events(io.BytesIO(data), name))
        assert want["step_db"]["hardware"] == "CPU_ONLY" and want["step_db"]["steps"], name
        seen.add(want["step_db"]["grouping"])
        for chunk in (default, 997):
            monkeypatch.setattr(xplane_trace, "CHUNK_EVENTS", chunk)
            events = xplane_trace.read_trace(io.BytesIO(data), name, 0, "h", steps=True)
            folder = tmp_path / f"{name}-{chunk}"
            folder.mkdir()
            profile_steps.write_host_steps(folder, events)
            got = profile_steps._answer(profile_steps._from_index(folder), keys_are_str=True)
            assert orjson.dumps(got) == orjson.dumps(want), (name, chunk)
    assert seen == {"grouped"}


def test_timeline_build_groups_nothing(shared_fixtures, jax_cpu):
    """The timeline's index build (no ``steps``) of a CPU-only profile gathers and groups
    nothing (the grouping cost +28-46 % CPU and 2.6x peak memory on the 308 MB profile,
    docs/performance.md); its events are the same as the grouping build's."""
    for name, data in _profiles(shared_fixtures, jax_cpu).items():
        plain = xplane_trace.read_trace(io.BytesIO(data), name, 0, "h")
        grouped = xplane_trace.read_trace(io.BytesIO(data), name, 0, "h", steps=True)
        assert plain.host_steps is None and grouped.host_steps is not None, name
        assert plain.steps == grouped.steps and plain.names == grouped.names, name
        assert plain.tracks == grouped.tracks and plain.processes == grouped.processes, name


def test_device_profile_keeps_the_reader(shared_fixtures):
    """A GPU profile's steps are its device planes': the index build groups nothing."""
    events = xplane_trace.read_trace(io.BytesIO((shared_fixtures / GPU).read_bytes()), "gpu", 0, "h", steps=True)
    assert events.host_steps is None


def _workspace(logdir: Path, cache: Path):
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir

    return Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache, workers=WorkerPool(enabled=False)))


def _steps_ops(logdir: Path, cache: Path, index_first: str | None, older: bool = False):
    """/api/steps_ops and overview_page on a fresh cache; ``index_first``: the trace index
    built before, for the timeline ("timeline") or as Steps & ops builds it ("steps")."""
    from profscope.app.queries import TraceQuery

    ws = _workspace(logdir, cache)
    run = next(r for r in ws.runs() if r.hosts)
    host = run.hosts[0]
    info = run.xplane(host)
    if index_first:
        ws.trace_index(run, host, info, steps=index_first == "steps")
        folder = ws.cache.built_dir(ws._trace_index_key(host, info))
        if older:  # steps grouped by an older version's rules (here: one step fewer)
            f = folder / profile_steps.HOST_STEPS_FILE
            saved = orjson.loads(f.read_bytes())
            f.write_bytes(orjson.dumps({**saved, "version": saved["version"] - 1, "steps": saved["steps"][1:]}))
    answers = ws.steps_ops(run, TraceQuery(host=host)), ws.overview_page(run, TraceQuery(host=host))
    return (*answers, ws.cache.built_dir(ws._trace_index_key(host, info)))


def test_workspace_answers_from_the_index_folder(shared_fixtures, tmp_path):
    """Through the workspace (what the Summary and the Steps & ops page ask): an index
    built for the timeline alone holds no ``host_steps.json`` (its steps: the step
    reader's); Steps & ops on a cold cache builds the index with the file, and its
    /api/steps_ops and overview_page equal the reader's byte for byte; so does an index
    whose steps an older version of the grouping wrote (``HOST_STEPS_VERSION``)."""
    logdir = tmp_path / "logdir"
    shutil.copytree(shared_fixtures / "tf_bfc_cpu" / "profile", logdir)
    base = _steps_ops(logdir, tmp_path / "c0", index_first="timeline")
    assert not (base[2] / profile_steps.HOST_STEPS_FILE).exists()
    ours = _steps_ops(logdir, tmp_path / "c1", index_first=None)
    assert (ours[2] / profile_steps.HOST_STEPS_FILE).is_file()
    saved = orjson.loads((ours[2] / profile_steps.HOST_STEPS_FILE).read_bytes())
    assert len(saved["steps"]) == base[0]["summary"]["steps"] == 5
    stale = _steps_ops(logdir, tmp_path / "c3", index_first="steps", older=True)
    for got in (ours, stale):
        assert orjson.dumps(got[0]) == orjson.dumps(base[0])
        assert orjson.dumps(got[1]) == orjson.dumps(base[1])


def test_steps_made_and_loaded_with_the_cyclic_gc_paused(shared_fixtures, tmp_path, monkeypatch):
    """The step dicts (tens of thousands on a long profile, none in a cycle) are made,
    loaded and made into breakdown rows with Python's cyclic collector paused
    (``model.gc_pause.gc_paused``: 0.2 s of a cold answer's 0.54 s after the index
    build on the 308 MB profile), on both ways in (the file read by the step reader, the
    index folder's ``host_steps.json``) and in the index build's grouping; and it runs
    again after each."""
    import gc

    from profscope.tools import xplane_step_breakdown

    seen = {"breakdown": [], "grouping": []}
    real_breakdown, real_group = xplane_step_breakdown.breakdown, xse.group_host_events

    def breakdown(*args, **kwargs):
        seen["breakdown"].append(gc.isenabled())
        return real_breakdown(*args, **kwargs)

    def group(*args, **kwargs):
        seen["grouping"].append(gc.isenabled())
        return real_group(*args, **kwargs)

    monkeypatch.setattr(xplane_step_breakdown, "breakdown", breakdown)
    monkeypatch.setattr(xse, "group_host_events", group)
    logdir = tmp_path / "logdir"
    shutil.copytree(shared_fixtures / "tf_bfc_cpu" / "profile", logdir)
    assert gc.isenabled()
    for k, index_first in enumerate(("timeline", None)):  # the reader; the build, then the folder
        got = _steps_ops(logdir, tmp_path / f"c{k}", index_first=index_first)
        assert got[0]["summary"]["steps"] == 5
        assert gc.isenabled()
    assert seen == {"breakdown": [False, False], "grouping": [False, False]}


def test_ops_table_made_with_the_cyclic_gc_paused(shared_fixtures, tmp_path, monkeypatch):
    """The ops table's step windows (a tuple per step) are made with the cyclic collector
    paused as the steps were: its collections walked the breakdown's step dicts, 0.11 s
    of the 0.30 s of user time after the Steps & ops build on the 308 MB profile
    (docs/performance.md); the collector runs again after, and the answer is the same."""
    import gc

    from profscope.tools import op_table

    seen = []
    real = op_table._step_windows

    def windows(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    logdir = tmp_path / "logdir"
    shutil.copytree(shared_fixtures / "tf_bfc_cpu" / "profile", logdir)
    base = _steps_ops(logdir, tmp_path / "c0", index_first=None)[0]
    monkeypatch.setattr(op_table, "_step_windows", windows)
    got = _steps_ops(logdir, tmp_path / "c1", index_first=None)[0]
    assert seen == [False]
    assert gc.isenabled()
    assert got["summary"]["steps"] == 5 and orjson.dumps(got) == orjson.dumps(base)


def test_build_decodes_the_host_plane_once(shared_fixtures, jax_cpu, monkeypatch):
    """The grouping in the build reads the columns the build's own decode of the host
    plane gathered (``xse.HostEventColumns``), not a second decode of the plane's bytes
    (``xw.decode_plane``: 0.25 s of user time on the 308 MB JAX profile,
    docs/performance.md); the step reader, which has no such decode, still makes one."""
    from profscope.formats import xplane_wire as xw

    calls = []
    real = xw.decode_plane

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(xw, "decode_plane", counted)
    for name, data in _profiles(shared_fixtures, jax_cpu).items():
        events = xplane_trace.read_trace(io.BytesIO(data), name, 0, "h", steps=True)
        assert events.host_steps is not None and events.host_steps["steps"], name
        assert not calls, name
        xse.read_step_events(io.BytesIO(data), name)
        assert calls, name  # (the count above would see a decode_plane call)
        calls.clear()


def test_gathered_metadata_ids_are_int32_while_they_fit(shared_fixtures, jax_cpu, monkeypatch):
    """The build's gathered columns keep the metadata ids as int32 (4 bytes an event
    fewer over the whole host plane, docs/performance.md) and widen them to int64, values
    unchanged, when a chunk has an id past int32; the C step database reads either."""
    import dataclasses

    import numpy as np

    from profscope.formats import xplane_wire as xw

    seen = []
    real = xse.host_steps_in_build

    def spy(data, length, meta, headers=None, columns=None):
        seen.append(columns.metadata_id.dtype)
        return real(data, length, meta, headers, columns)

    monkeypatch.setattr(xse, "host_steps_in_build", spy)
    events = xplane_trace.read_trace(io.BytesIO(jax_cpu.read_bytes()), "jax", 0, "h", steps=True)
    assert seen == [np.dtype(np.int32)] and len(events.host_steps["steps"]) == 300

    # a real decoded chunk, then the same chunk with ids past int32: one int64 column
    data = (shared_fixtures / TF_CPU).read_bytes()
    f = io.BytesIO(data)
    from profscope.formats import xplane

    ref = xplane.scan(f, "tf").plane(xse.HOST_PLANE)
    plane = xw.read_plane_bytes(f, len(data), ref, pad=xw.PAD + (-ref.length) % 8)
    meta_bytes, spans = xw.split_plane(plane, ref.length)
    names = {k: v.name for k, v in xse.xplane_pb2.XPlane.FromString(meta_bytes).stat_metadata.items()}
    _headers, chunk = xw.decode_plane(plane, np.frombuffer(plane, np.uint8), spans, xse.host_step_stats(names))
    cols = xse.HostEventColumns(2 * chunk.n, names)
    cols.add(chunk)
    assert cols.metadata_id.dtype == np.int32
    cols.add(dataclasses.replace(chunk, metadata_id=chunk.metadata_id + (1 << 31)))
    got = cols.events()
    assert got.metadata_id.dtype == np.int64
    assert np.array_equal(got.metadata_id, np.r_[chunk.metadata_id, chunk.metadata_id + (1 << 31)])
    assert np.array_equal(got.offset_ps, np.r_[chunk.offset_ps, chunk.offset_ps])


def _host_chunks(data: bytes, chunk: int):
    """A host plane's stat names and its events decoded ``chunk`` at a time, as the
    build's decode hands them to ``xse.HostEventColumns`` (formats/xplane_trace.py)."""
    import numpy as np

    from profscope.formats import xplane
    from profscope.formats import xplane_wire as xw

    f = io.BytesIO(data)
    ref = xplane.scan(f, "p").plane(xse.HOST_PLANE)
    plane = xw.read_plane_bytes(f, len(data), ref, pad=xw.PAD + (-ref.length) % 8)
    meta_bytes, spans = xw.split_plane(plane, ref.length)
    names = {k: v.name for k, v in xse.xplane_pb2.XPlane.FromString(meta_bytes).stat_metadata.items()}
    b = np.frombuffer(plane, np.uint8)
    starts, ends, lines = [], [], []
    for li, (a, z) in enumerate(spans):
        _head, runs, _count = xplane_trace._line_runs(plane, b, a, z)
        for run_start, _after, end in runs:
            for s_, e_, _nxt in xplane_trace._windows(plane, b, run_start, end):
                starts.append(s_)
                ends.append(e_)
                lines.append(np.full(len(s_), li, np.int32))
    s_, e_, l_ = np.concatenate(starts), np.concatenate(ends), np.concatenate(lines)
    wanted = xse.host_step_stats(names)
    full = xw.decode_events(b, s_, e_, l_, wanted)
    return names, full, [xw.decode_events(b, s_[a:a + chunk], e_[a:a + chunk], l_[a:a + chunk], wanted)
                         for a in range(0, len(s_), chunk)]


def test_gathered_stats_are_the_decode_s_without_a_join(jax_cpu):
    """The build's gathered stat kinds (``xse._KindColumns``) hold the stats of a decode
    of the whole plane, kind for kind (by event, then field position), copied in chunk by
    chunk: taking them (``events()``) allocates nothing (tracemalloc), where the chunks'
    join copied them all again (25 k fresh pages on the 308 MB profile,
    docs/performance.md); a kind outgrowing its room grows with the same values."""
    import tracemalloc

    import numpy as np

    names, full, chunks = _host_chunks(jax_cpu.read_bytes(), 4096)
    assert len(chunks) > 10

    def by_event(ks):
        o = np.lexsort((ks.ordinal, ks.event))
        return [c[o].tolist() for c in (ks.event, ks.ordinal, ks.case, ks.value)]

    cols = xse.HostEventColumns(full.n, names)
    for c in chunks:
        cols.add(c)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        got = cols.events()
        grew = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    kinds = {k: ks for k, ks in full.kinds.items() if k in cols.wanted}
    size = sum(ks.event.nbytes + ks.value.nbytes for ks in kinds.values())
    assert set(got.kinds) == set(kinds) and size > 1 << 18
    assert grew < size / 20, f"{grew} bytes allocated taking {size} bytes of stats"
    for k, ks in kinds.items():
        assert by_event(got.kinds[k]) == by_event(ks), k
        room = xse._KindColumns(chunks[0].kinds.get(k, ks), 0)  # no room: every chunk grows it
        base = 0
        for c in chunks:
            if k in c.kinds and len(c.kinds[k].event):
                room.add(c.kinds[k], base)
            base += c.n
        assert by_event(room.stats()) == by_event(ks), k


def test_build_groups_after_the_plane_s_bytes_are_let_go(shared_fixtures, jax_cpu, monkeypatch):
    """The build groups a plain file's host plane once the loop has let its bytes go (they
    were 302 MB of the cold Steps & ops answer's 1.5 GB peak on jax308,
    docs/performance.md): the grouping gets the file's plane (``_PlaneInFile``), not
    the bytes, and reads its string stats from the file: the pre-grouped profile's
    ``step_name`` strings and the TF profile's names give the step reader's steps; a
    stream (no size) is still grouped from its bytes."""
    import gzip

    got = []
    real = xse.host_steps_in_build

    def spy(data, *a, **k):
        got.append(type(data))
        return real(data, *a, **k)

    monkeypatch.setattr(xse, "host_steps_in_build", spy)
    for name, data in _profiles(shared_fixtures, jax_cpu).items():
        events = xplane_trace.read_trace(io.BytesIO(data), name, 0, "h", steps=True)
        first = xse.read_step_events(io.BytesIO(data), name)
        want = [{**s, "type_ps": {str(t): v for t, v in s["type_ps"].items()}} for s in first.steps]
        assert events.host_steps["steps"] == want, name
        assert got == [xplane_trace._PlaneInFile], name
        got.clear()
    data = (shared_fixtures / TF_CPU).read_bytes()
    events = xplane_trace.read_trace(io.BytesIO(gzip.compress(data)), "tf.gz", 0, "h", steps=True)
    assert got == [bytearray] and len(events.host_steps["steps"]) == 5

    # the file's plane reads what the bytes hold, at and past its ends, and leaves the
    # file where it was
    from profscope.formats import xplane

    f = io.BytesIO(data)
    ref = xplane.scan(f, "tf").plane(xse.HOST_PLANE)
    plane = data[ref.offset:ref.offset + ref.length]
    f.seek(7)
    for block in (1 << 20, 64):  # (a block over the whole plane, and blocks smaller than a read)
        monkeypatch.setattr(xplane_trace._PlaneInFile, "BLOCK", block)
        in_file = xplane_trace._PlaneInFile(f, ref.offset, ref.length)
        for a, z in ((0, 10), (100, 5000), (ref.length - 3, ref.length + 9), (ref.length + 1, ref.length + 4),
                     (5, 5), (3, 8), (150, 170), (2, 400)):
            assert in_file[a:z] == plane[a:z], (block, a, z)
        assert f.tell() == 7

    class Counted(io.BytesIO):  # (the file's reads counted: one per block, not per string)
        reads = 0

        def read(self, *a):
            self.reads += 1
            return super().read(*a)

    monkeypatch.setattr(xplane_trace._PlaneInFile, "BLOCK", 1 << 20)
    counted = Counted(data)
    in_file = xplane_trace._PlaneInFile(counted, ref.offset, ref.length)
    assert [in_file[k * 10:k * 10 + 8] for k in range(200)] == [plane[k * 10:k * 10 + 8] for k in range(200)]
    assert counted.reads == 1


def _same(a, b, where: str = "") -> None:
    """``a`` and ``b`` equal as plain data, type for type (a tuple is no list, 1 no 1.0,
    a numpy number no int), keys in the same order."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


XPLANE_LOGDIRS = ["tf_bfc_cpu/profile", "public_profiles/xplane/mi300_jax08_gemm",
                  "public_profiles/xplane/mi300_jax_conv_xprof_touched", "public_profiles/xplane/tf_gpu",
                  "public_profiles/xplane/tpu_inference"]


def test_steps_made_here_are_their_cache_entry(shared_fixtures, jax_cpu, tmp_path):
    """Made in this process (no conversion worker), a host's steps answer is the value
    made, not its cache entry's JSON loaded back (``derived_json(as_made=True)``): on
    every xplane of the shared fixtures (CPU, MI300 x2, TF GPU's 2 hosts, TPU) and a
    300-step JAX CPU profile, each read by the step reader and, for the CPU ones, from
    the index build Steps & ops makes, the value equals the entry a second workspace
    loads, type for type."""
    logdirs = [shared_fixtures / d for d in XPLANE_LOGDIRS] + [jax_cpu.parents[3]]
    seen = set()
    for k, logdir in enumerate(logdirs):
        for index_first in (False, True):
            ws = _workspace(logdir, tmp_path / f"c{k}-{index_first}")
            run = next(r for r in ws.runs() if r.hosts)
            for host in run.hosts:
                if index_first:
                    ws.trace_index(run, host, run.xplane(host), steps=True)
                made = ws.xplane_steps(run, host)
                loaded = _workspace(logdir, tmp_path / f"c{k}-{index_first}").xplane_steps(run, host)
                assert made is not loaded
                _same(made, loaded, f"{logdir.name}/{host}")
                seen.add(made["step_db"]["hardware"])
    assert {"CPU_ONLY", "GPU", "TPU"} <= seen, seen


def test_steps_built_here_are_not_loaded_back(shared_fixtures, jax_cpu, tmp_path, monkeypatch):
    """Steps & ops on a cold cache in one process: the host steps the index build grouped
    are the steps answered, the same objects: not ``host_steps.json`` loaded back from
    the folder just written, nor the cache entry of the answer (44,000 steps: 0.1 s
    and 0.23 s of the 308 MB profile's cold answer, docs/performance.md). Both are
    still written, and a new process reads them."""
    from profscope.app.queries import TraceQuery

    built, answered = [], []
    real_read, real_steps = xplane_trace.read_trace, profile_steps.ProfileSteps.xplane_steps

    def read_trace(*a, **k):
        built.append(real_read(*a, **k))
        return built[-1]

    def xplane_steps(*a, **k):
        answered.append(real_steps(*a, **k))
        return answered[-1]

    monkeypatch.setattr(xplane_trace, "read_trace", read_trace)
    monkeypatch.setattr(profile_steps.ProfileSteps, "xplane_steps", xplane_steps)
    for k, logdir in enumerate((shared_fixtures / "tf_bfc_cpu" / "profile", jax_cpu.parents[3])):
        ws = _workspace(logdir, tmp_path / f"c{k}")
        run = next(r for r in ws.runs() if r.hosts)
        ws.steps_ops(run, TraceQuery(host=run.hosts[0]))
        steps = built[-1].host_steps["steps"]
        assert len(answered) == k + 1 and answered[-1]["step_db"]["steps"] is steps, logdir
        assert profile_steps._built == {}  # (taken, not kept)
        folder = ws.cache.built_dir(ws._trace_index_key(run.hosts[0], run.xplane(run.hosts[0])))
        assert orjson.loads((folder / profile_steps.HOST_STEPS_FILE).read_bytes())["steps"] == steps


def test_columns_out_of_memory_fail_the_steps_not_the_timeline(shared_fixtures, jax_cpu, monkeypatch):
    """The gathered columns are 28 bytes an event on top of the build's memory: where
    they cannot be had (a ``MemoryError`` at the third chunk, as a worker's memory limit
    gives it; injected, a real one needs a profile this machine cannot hold), the build
    still makes the timeline, the same as a timeline's build, with no steps (Steps & ops
    then takes the step reader's, as for any failure of the grouping in the build)."""
    seen = []
    real = xse.HostEventColumns._add

    def add(self, ev):
        seen.append(ev.n)
        if len(seen) == 3:
            raise MemoryError
        return real(self, ev)

    monkeypatch.setattr(xse.HostEventColumns, "_add", add)
    monkeypatch.setattr(xplane_trace, "CHUNK_EVENTS", 997)
    data = jax_cpu.read_bytes()
    plain = xplane_trace.read_trace(io.BytesIO(data), "jax", 0, "h")
    seen.clear()
    grouped = xplane_trace.read_trace(io.BytesIO(data), "jax", 0, "h", steps=True)
    assert len(seen) == 3 and grouped.host_steps is None
    assert plain.steps == grouped.steps and plain.names == grouped.names and plain.tracks == grouped.tracks
