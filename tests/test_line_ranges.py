"""One host's xplane decoded in line ranges and merged (formats/xplane_line_ranges.py;
issue 40, "one big host across the cluster"): the trace index is byte-identical to a
single decode's (every column, the names, flows, counters, steps, tiers: every window's
answer is read from these files), on every real xplane of the shared fixtures and the
demo's JAX and TensorFlow profiles, cut in 2, 3 and 7 ranges (the C decoder and its numpy
twin), and through a real local Dask cluster, where the ranges run in both worker
processes."""

from __future__ import annotations

import hashlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from profscope.formats import xplane, xplane_line_ranges, xplane_trace
from profscope.tools import trace_index

DEMO = Path(__file__).resolve().parents[1] / "src/profscope/demo/logdir"
DEMO_XPLANES = sorted(DEMO.glob("*/plugins/profile/*/*.xplane.pb"))


def _xplanes(shared_fixtures) -> list[Path]:
    found = sorted(p for p in shared_fixtures.glob("public_profiles/xplane/*/plugins/profile/*/*.xplane.pb")
                   if "corrupt" not in str(p))
    assert len(found) >= 5, found
    return found


def _build(path: Path, out: Path, split: xplane_line_ranges.Split | None, elsewhere=None,
           preview: int | None = None) -> dict[str, str]:
    out.mkdir(parents=True)
    writer = trace_index.IndexWriter(out, source=str(path))
    writer.elsewhere = elsewhere
    try:
        with open(path, "rb") as f:
            events = xplane_trace.read_trace(f, str(path), 0, "host", sink=writer, split=split)
    finally:
        writer.close()
    writer.finish(events, preview=(out.with_name(out.name + "-preview"), preview) if preview else None)
    return _hashes(out)


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


class _Counting(xplane_line_ranges.InProcess):
    """In-process ranges, counting the planes cut (so a test cannot pass by not cutting)."""

    def __init__(self, parts: int):
        super().__init__(parts, min_bytes=0)
        self.cut: list[int] = []

    def run(self, fn, specs):
        self.cut.append(len(specs))
        return super().run(fn, specs)


class _Beside:
    """IndexWriter.elsewhere in a thread of this process (the cluster's is another worker),
    recording what ran there."""

    def __init__(self):
        self.ran = []

    def submit(self, fn, *args):
        self.ran.append(fn)
        pool = ThreadPoolExecutor(1)
        try:
            return pool.submit(fn, *args)
        finally:
            pool.shutdown(wait=False)


@pytest.mark.parametrize(("parts", "native", "sort"), [(2, "1", True), (7, "1", True), (3, "0", True),
                                                     (2, "1", False)])
def test_a_plane_cut_in_ranges_indexes_as_one_decode(shared_fixtures, tmp_path, monkeypatch, parts, native, sort):
    """``native``: PROFSCOPE_NATIVE, the C decoder or its numpy twin (the cuts' event
    boundaries are found by either). ``sort``: each range also sorts its rows as the
    index does (``trace_index.sorted_run``, as the app asks) and the build merges the
    ranges' sorted runs with the rows decoded in between (other planes); else the build
    sorts every row."""
    monkeypatch.setenv("PROFSCOPE_NATIVE", native)
    merged, beside = [], _Beside()
    monkeypatch.setattr(trace_index, "merge_runs", lambda runs, shift, f=trace_index.merge_runs:
                        merged.append(len(runs)) or f(runs, shift))
    for i, path in enumerate([*_xplanes(shared_fixtures), *DEMO_XPLANES]):
        whole = _build(path, tmp_path / f"whole{i}", None)
        assert not merged
        ranges = _Counting(parts)
        split = xplane_line_ranges.Split(ranges, str(path), str(tmp_path / f"scratch{i}"),
                                         trace_index.sorted_run if sort else None)
        # (with the sorted runs, the tiers made beside the rest of the build, as on a cluster)
        cut = _build(path, tmp_path / f"cut{i}", split, beside.submit if sort else None)
        assert ranges.cut and all(k >= 2 for k in ranges.cut), (path, ranges.cut)
        assert cut == whole, (path, sorted(k for k in whole if cut.get(k) != whole[k]))
        assert not (tmp_path / f"scratch{i}").exists()  # the ranges' columns are removed once merged
        # one merge per build, of every range's run (and the runs of the rows between them)
        assert (len(merged) == 1 and merged[0] >= sum(ranges.cut)) if sort else not merged, (path, merged)
        merged.clear()
        assert beside.ran == ([trace_index.tiers_of_saved] if sort else []), path
        beside.ran.clear()


def test_a_range_that_failed_elsewhere_is_decoded_by_the_merge(shared_fixtures, tmp_path):
    """A range whose process failed (here: every other one) is decoded in the merging
    process: same index."""
    (path, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))

    class Failing(xplane_line_ranges.InProcess):
        def run(self, fn, specs):
            return [fn(s) if i % 2 else OSError("worker lost") for i, s in enumerate(specs)]

    whole = _build(path, tmp_path / "whole", None)
    split = xplane_line_ranges.Split(Failing(4, min_bytes=0), str(path), str(tmp_path / "scratch"))
    assert _build(path, tmp_path / "cut", split) == whole


def test_ranges_files_copied_where_they_cannot_be_renamed_into_the_build(shared_fixtures, tmp_path, monkeypatch):
    """The index writer takes a range's files by renaming them into its folder; where that
    fails (another file system) it appends copies, and sorts the range's rows itself: the
    same index."""
    (path, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    whole = _build(path, tmp_path / "whole", None)

    def refuse(a, b):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(trace_index.os, "replace", refuse)
    split = xplane_line_ranges.Split(_Counting(3), str(path), str(tmp_path / "scratch"), trace_index.sorted_run)
    assert _build(path, tmp_path / "cut", split) == whole
    monkeypatch.undo()
    # a build that publishes a preview (which reads the names of the rows it shows) from
    # ranges' files taken as they are: the same preview and index
    whole = _build(path, tmp_path / "whole2", None, preview=200)
    split = xplane_line_ranges.Split(_Counting(3), str(path), str(tmp_path / "scratch2"), trace_index.sorted_run)
    assert _build(path, tmp_path / "cut2", split, preview=200) == whole
    assert _hashes(tmp_path / "cut2-preview") == _hashes(tmp_path / "whole2-preview") != {}


def test_small_planes_and_device_planes_are_not_cut(shared_fixtures, tmp_path):
    """Not cut: a plane under two ranges' worth of bytes, and a GPU plane."""
    (path, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    small = _Counting(2)
    small.min_bytes = xplane_line_ranges.MIN_RANGE_BYTES  # the file is 3 MB
    _build(path, tmp_path / "a", xplane_line_ranges.Split(small, str(path), str(tmp_path / "s")))
    assert small.cut == []
    every = _Counting(2)
    _build(path, tmp_path / "b", xplane_line_ranges.Split(every, str(path), str(tmp_path / "s")))
    assert every.cut == [2]  # its host plane; the 8 GPU planes' Steps wait for names across chunks
    # ranges of at least min_bytes: fewer than the cluster's threads on a smaller plane
    with open(path, "rb") as f:
        (host,) = [p for p in xplane.scan(f, str(path)).planes if p.name.startswith("/host:CPU")]
    bounded = _Counting(64)
    bounded.min_bytes = 300_000
    _build(path, tmp_path / "c", xplane_line_ranges.Split(bounded, str(path), str(tmp_path / "s")))
    assert 2 <= host.length // 300_000 < 64 and bounded.cut == [host.length // 300_000]


# -- on a real local Dask cluster -------------------------------------------------------


@pytest.fixture(scope="module")
def cutting_cluster():
    """2 worker processes that cut every plane (their $PROFSCOPE_LINE_RANGE_MIN_BYTES)."""
    pytest.importorskip("distributed")
    from profscope.app.scale_out import local_cluster

    before = os.environ.get("PROFSCOPE_LINE_RANGE_MIN_BYTES")
    os.environ["PROFSCOPE_LINE_RANGE_MIN_BYTES"] = "0"
    try:
        cluster = local_cluster(2)
    finally:
        if before is None:
            os.environ.pop("PROFSCOPE_LINE_RANGE_MIN_BYTES")
        else:
            os.environ["PROFSCOPE_LINE_RANGE_MIN_BYTES"] = before
    try:
        yield cluster
    finally:
        cluster.close(timeout=20)


def test_one_host_split_across_the_dask_workers_is_the_single_process_index(shared_fixtures, cutting_cluster,
                                                                             tmp_path):
    from distributed import Client

    from profscope.app.scale_out import convert_host
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir

    (gpu, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    (jax,) = (DEMO / "transformer/plugins/profile").glob("*/demo-host.xplane.pb")
    folder = tmp_path / "logs/plugins/profile/s"
    folder.mkdir(parents=True)
    hosts = {"gpu": gpu, "jax": jax}
    for host, path in hosts.items():
        shutil.copy(path, folder / f"{host}.xplane.pb")
    logdir = tmp_path / "logs"

    serial = Workspace(LogDir(str(logdir)), DiskCache(tmp_path / "serial", workers=WorkerPool(enabled=False)))
    (run,) = serial.runs()
    ran = set()
    with Client(cutting_cluster) as client:
        for host in hosts:
            answer = client.submit(convert_host, str(logdir), str(tmp_path / "dask"), "s", host,
                                   report=False, pure=False).result(timeout=120)
            assert answer["built"]
            # the plane was cut
            assert len(answer["ranges"]) >= 2, answer
            ran.update(answer["ranges"])
            info = dict(serial.trace_sources(run))[host]
            serial.trace_index(run, host, info, tiers=True)  # (the cluster's build makes them)
            dask_cache = DiskCache(tmp_path / "dask", workers=WorkerPool(enabled=False))
            whole, cut = _hashes(serial.cache.built_dir(answer["key"])), _hashes(dask_cache.built_dir(answer["key"]))
            assert whole
            assert cut == whole, (host, sorted(k for k in whole if cut.get(k) != whole[k]))
    # and the ranges ran in both worker processes. (Per host they need not: these ranges
    # take a few ms, and once the scheduler has timed a build it may place both of the
    # next host's ranges on the other worker before it hears that the build's thread
    # seceded; ranges of a real big host, ~1 s each, are then spread by work stealing.)
    assert len(ran) == 2, ran


def test_a_range_is_merged_while_the_next_one_is_decoded(shared_fixtures, tmp_path):
    """The merge takes each range as its answer comes (``Ranges.run`` yields them): when
    the second range starts decoding, the first one's slices are already in the index
    writer."""
    (path, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    out = tmp_path / "cut"
    out.mkdir()
    writer = trace_index.IndexWriter(out, source=str(path))
    seen: list[int] = []

    class Watching(xplane_line_ranges.InProcess):
        def run(self, fn, specs):
            for s in specs:
                seen.append(writer.n)  # slices merged before this range is decoded
                yield fn(s)

    split = xplane_line_ranges.Split(Watching(3, min_bytes=0), str(path), str(tmp_path / "scratch"))
    with open(path, "rb") as f:
        xplane_trace.read_trace(f, str(path), 0, "host", sink=writer, split=split)
    writer.close()
    assert len(seen) == 3 and seen[0] < seen[1] < seen[2], seen


def _broken_event(path: Path, out: Path) -> Path:
    """A copy of a real xplane with one event of its host plane, 80 % in, made malformed
    (its first byte a tag of wire type 7): the planes and the lines' event framing are
    intact (the plane is read and cut), the event's decode fails."""
    import numpy as np

    from profscope.formats import xplane_wire as xw

    shutil.copy(path, out)
    with open(out, "rb") as f:
        (host,) = [p for p in xplane.scan(f, str(out)).planes if p.name.startswith("/host:CPU")]
        f.seek(0)
        stream, size = xplane.open_stream(f, str(out))
        data = xw.read_plane_bytes(stream, size, host, pad=xw.PAD + (-host.length) % 8)
    b = np.frombuffer(data, np.uint8)
    starts = []
    for a, z in xw.split_plane(data, host.length)[1]:
        for run_start, _end, line_end in xplane_trace._line_runs(data, b, a, z)[1]:
            for s_, _e, _ in xplane_trace._windows(data, b, run_start, line_end):
                starts += s_.tolist()
    raw = bytearray(out.read_bytes())
    raw[host.offset + starts[len(starts) * 4 // 5]] = 0x0F
    out.write_bytes(bytes(raw))
    return out


def test_a_malformed_event_in_a_range_is_the_single_decodes_error(shared_fixtures, tmp_path):
    """A range that fails on a malformed event is decoded again by the merge, which raises
    the single decode's error naming the file (a 4xx for the server), not another one."""
    from profscope.errors import ProfscopeError

    (good, *_) = sorted(shared_fixtures.glob("public_profiles/xplane/tf_gpu/plugins/profile/*/*.xplane.pb"))
    path = _broken_event(good, tmp_path / "broken.xplane.pb")

    def error(split, name):
        out = tmp_path / name
        out.mkdir()
        writer = trace_index.IndexWriter(out, source=str(path))
        with open(path, "rb") as f, pytest.raises(ProfscopeError) as e:
            xplane_trace.read_trace(f, str(path), 0, "host", sink=writer, split=split)
        writer.close()
        return type(e.value), e.value.message, e.value.file

    whole = error(None, "whole")
    assert str(path) in whole[2]

    class Failing(_Counting):
        def run(self, fn, specs):  # as the cluster answers a range that raised
            self.cut.append(len(specs))
            for s in specs:
                try:
                    yield fn(s)
                except Exception as e:  # noqa: BLE001
                    yield e

    ranges = Failing(3)
    assert error(xplane_line_ranges.Split(ranges, str(path), str(tmp_path / "scratch")), "cut") == whole
    assert ranges.cut == [3]
    assert not (tmp_path / "scratch").exists()
