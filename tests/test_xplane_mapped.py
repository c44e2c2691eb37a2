"""A plane's bytes mapped from the file (xplane_wire.map_plane_bytes) and its line runs
counted a window at a time with the mapped pages let go between (xplane_trace._line_runs
with ``drop``): the same bytes and the same runs as the read buffer and the one walk."""

from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest

from profscope.formats import xplane, xplane_activity, xplane_allocator, xplane_module_time, xplane_step_events, xplane_trace
from profscope.formats import xplane_wire as xw
from tests.fixtures.paths import REPO

DEMO = REPO / "src" / "profscope" / "demo" / "logdir"


def _planes(shared_fixtures):
    found = sorted(p for p in shared_fixtures.glob("public_profiles/xplane/*/plugins/profile/*/*.xplane.pb")
                   if "corrupt" not in str(p))
    assert found
    for path in found[:4]:
        with open(path, "rb") as f:
            stream, size = xplane.open_stream(f, str(path))
            refs = xplane.scan(stream, str(path)).planes
        for ref in refs:
            yield path, size, ref


def _runs(data, length: int, drop=None):
    b = np.frombuffer(data, np.uint8)
    return [xplane_trace._line_runs(data, b, a, z, drop) for a, z in xw.split_plane(data, length)[1]]


@pytest.mark.skipif(not xw.native_enabled(), reason="the windowed count is the native walk's")
def test_mapped_planes_read_and_count_as_read_ones(shared_fixtures, monkeypatch):
    monkeypatch.setattr(xplane_trace, "MAP_WINDOW", 4096)  # many windows, entries across their edges
    mapped, drops = 0, []
    for path, size, ref in _planes(shared_fixtures):
        pad = xw.PAD + (-ref.length) % 8
        with open(path, "rb") as f, open(path, "rb") as g, xw.planes_mapped():
            read = xw.read_plane_bytes(*xplane.open_stream(f, str(path)), ref, pad)
            data, drop = xw.map_plane_bytes(*xplane.open_stream(g, str(path)), ref, pad)
        mapped += isinstance(data, memoryview)
        assert bytes(data) == bytes(read)
        got = _runs(data, ref.length, lambda drop=drop: (drops.append(1), drop()))
        assert got == _runs(read, ref.length)
        drop()
        assert bytes(data) == bytes(read)  # the pages let go come back from the file, the pad stays 0
    assert mapped and drops


def _events(data, length: int, drop=None):
    b = np.frombuffer(data, np.uint8)
    meta_bytes, spans = xw.split_plane(data, length)
    names = {k: v.name for k, v in xw.xplane_pb2.XPlane.FromString(meta_bytes).stat_metadata.items()}
    headers, ev = xw.decode_plane(data, b, spans, names, drop)
    kinds = {k: [getattr(ks, c).tolist() for c in ("event", "ordinal", "case", "value", "str_end")]
             for k, ks in ev.kinds.items()}
    return ([h.SerializeToString() for h in headers], ev.n, ev.line.tolist(), ev.metadata_id.tolist(),
            ev.offset_ps.tolist(), ev.duration_ps.tolist(), kinds)


@pytest.mark.skipif(not xw.native_enabled(), reason="the windowed decode is the native decoder's")
def test_a_mapped_plane_decoded_letting_its_pages_go_decodes_as_read(shared_fixtures, monkeypatch):
    """decode_plane with ``drop`` (the step reader's): runs counted a window at a time and
    the pages let go between the decoder's chunks give the same headers and events, each
    stat where it was, as the read plane's one decode."""
    monkeypatch.setattr(xw, "MAP_WINDOW", 4096)  # many windows, entries across their edges
    monkeypatch.setattr(xw, "_CHUNK", 64)  # many chunks, a drop after each
    drops = []
    for path, size, ref in _planes(shared_fixtures):
        pad = xw.PAD + (-ref.length) % 8
        with open(path, "rb") as f, open(path, "rb") as g, xw.planes_mapped():
            read = xw.read_plane_bytes(*xplane.open_stream(f, str(path)), ref, pad)
            data, drop = xw.map_plane_bytes(*xplane.open_stream(g, str(path)), ref, pad)
        assert _events(data, ref.length, lambda drop=drop: (drops.append(1), drop())) == _events(read, ref.length)
    assert drops

    calls = []

    def failing():  # (its first call is decode_plane's own, before the decoder)
        calls.append(1)
        if len(calls) > 1:
            raise KeyError("from the hook")

    monkeypatch.setattr(xw, "MAP_WINDOW", 1 << 40)  # no drop while the runs are counted
    path, size, ref = max(_planes(shared_fixtures), key=lambda p: p[2].length)
    with open(path, "rb") as f:
        read = xw.read_plane_bytes(*xplane.open_stream(f, str(path)), ref, xw.PAD + (-ref.length) % 8)
    with pytest.raises(KeyError, match="from the hook"):  # the hook's own error, out of the C decoder
        _events(read, ref.length, failing)


def test_a_stream_without_a_file_is_read():
    raw = b"\x00" * 64
    ref = xplane.PlaneRef("p", 8, 16)
    with xw.planes_mapped():
        data, drop = xw.map_plane_bytes(io.BytesIO(raw), len(raw), ref, pad=8)
    drop()
    assert isinstance(data, bytearray) and len(data) == 24


def test_planes_are_read_outside_a_worker(shared_fixtures):
    """Outside planes_mapped() (the server process) a plane is read, never mapped: a file
    cut short under a map would end the process with SIGBUS instead of an error."""
    path, size, ref = next(_planes(shared_fixtures))
    with open(path, "rb") as f:
        data, _ = xw.map_plane_bytes(*xplane.open_stream(f, str(path)), ref, xw.PAD + (-ref.length) % 8)
    assert isinstance(data, bytearray)
    with open(path, "rb") as f, xw.planes_mapped():
        data, _ = xw.map_plane_bytes(*xplane.open_stream(f, str(path)), ref, xw.PAD + (-ref.length) % 8)
    assert isinstance(data, memoryview)


def test_a_plane_cut_short_under_its_map_is_a_422_naming_the_file(shared_fixtures, tmp_path):
    """A worker reading a mapped plane whose file was truncated meanwhile dies of SIGBUS
    (a page past the file's new end); the request gets a 422 naming the file and the
    cause, not the worker memory limit's 413 (more memory would not help)."""
    from profscope.cache.progress import ProgressBoard
    from profscope.cache.worker import WorkerPool
    from profscope.errors import BadInput

    src, _, ref = max(_planes(shared_fixtures), key=lambda p: p[2].length)
    path = tmp_path / src.name
    path.write_bytes(src.read_bytes())

    def read_after_the_cut(job):
        with open(path, "rb") as f:  # a worker maps without planes_mapped() (forksafe.disposable)
            data, _ = xw.map_plane_bytes(*xplane.open_stream(f, str(path)), ref, xw.PAD + (-ref.length) % 8)
        assert isinstance(data, memoryview)
        os.truncate(path, 0)  # what a job rewriting the file does between two reads
        return bytes(data[: ref.length])

    board = ProgressBoard()
    job = board.start("k", path.name)
    with pytest.raises(BadInput) as e:
        WorkerPool(enabled=True).run(read_after_the_cut, job, board, file=str(path))
    board.finish(job)
    assert e.value.status == 422 and e.value.file == str(path)
    assert "SIGBUS" in e.value.message and "cut short" in e.value.message and "memory limit" not in e.value.message


READERS = {
    "module times": lambda f, p: xplane_module_time.module_run_times(f, p),
    "host activity": lambda f, p: xplane_activity.host_activity(f, p, "h"),
    "step events": lambda f, p: xplane_step_events.read_step_events(f, p),
    "allocator events": lambda f, p: xplane_allocator.read_allocator_events(f, p),
}


@pytest.mark.parametrize("reader", READERS)
def test_readers_in_a_worker_map_their_planes_and_answer_as_when_they_read(shared_fixtures, monkeypatch, reader):
    """Every plane reader in a conversion worker maps its planes (forksafe.disposable),
    and answers what it answers in the server process, where it reads them: on each
    public xplane (GPU, TPU, ROCm)."""
    from profscope.cache.progress import ProgressBoard
    from profscope.cache.worker import WorkerPool

    mapped = []
    real = xw.map_plane_bytes

    def counting(f, size, ref, pad=0):
        data, drop = real(f, size, ref, pad)
        # (a file's last plane, whose pad would lie past the file's end, is read anywhere)
        if size is not None and ref.offset + ref.length + pad <= size:
            mapped.append(isinstance(data, memoryview))
        return data, drop

    monkeypatch.setattr(xw, "map_plane_bytes", counting)  # the fork inherits it
    # the public GPU/TPU/ROCm profiles, and the demo's CPU ones (whose host steps the step
    # reader reads from the host plane)
    paths = sorted({p for p, _, _ in _planes(shared_fixtures)}) + sorted(DEMO.glob("*/plugins/profile/*/*.xplane.pb"))
    read = READERS[reader]

    def in_worker(job):
        out = []
        for path in paths:
            with open(path, "rb") as f:
                out.append(read(f, str(path)))
        return pickle.dumps((out, mapped))

    board = ProgressBoard()
    job = board.start("k", reader)
    got, worker_mapped = pickle.loads(WorkerPool(enabled=True).run(in_worker, job, board))
    board.finish(job)
    mapped.clear()
    want = []
    for path in paths:
        with open(path, "rb") as f:
            want.append(read(f, str(path)))
    assert mapped and not any(mapped)  # the server process read every plane
    assert worker_mapped and all(worker_mapped)
    assert _same(got, want)


def _same(a, b) -> bool:
    """Equal values: ``==`` where the answers' classes define it (a pickle's bytes also
    record which objects an answer shares, which a mapped read may change), else their
    pickles (answers holding arrays, whose ``==`` is elementwise)."""
    try:
        return bool(a == b)
    except ValueError:
        return pickle.dumps(a) == pickle.dumps(b)
