"""One big plane of an xplane decoded in ranges of its lines by other processes, and
merged back into the columns a single decode makes (issue 40: one big host across the
cluster; docs/scale_out.md).

The wire format allows the cut: ``XPlane.lines`` is repeated field 3, ``XLine.events``
repeated field 4, so a plane's events are runs of length-delimited entries whose byte
ranges the reader already finds (``xplane_trace._line_runs``). A *range* is a list of
such byte segments, cut at event boundaries (a CPU profile's main thread can hold 80 %
of the plane's events, so lines alone would not balance). Each range is decoded by
:func:`decode_range` with the very loop of a single decode
(``xplane_trace.decode_chunks``), in a process of its own that reads only its bytes of
the file and writes its slice columns to a folder of its own; what it collected across
chunks comes back as plain data.

:func:`merge` then takes the ranges in line order, which is the single decode's order,
so the index is identical (every column, every window's answer: tests/test_line_ranges.py):

* names: each range interned its names into a table of its own; the merge interns them
  into the trace's table in that table's order. A name first met in range k then gets
  the id the single decode gives it (interning is idempotent, and each range met its new
  names in the single decode's order), and the range's name column is mapped through.
* flows name their slices by their position among all slices (``CountingSink``): a
  range counts from 0 and the merge adds the slices before it.
* what the plane readers collect (step rows, counter values, Region starts and stops,
  allocator rows, the host's step roots) is appended in range order, as the chunks'
  would be; an allocator's name is a string of the range's own table, mapped the same
  way as the names.

Only a plane the reader would decode without per-event state across chunks is cut: a
host plane (or any plane but a GPU/TensorCore one, whose ``DevicePlane`` holds Steps
events back until their names are known), not the plane whose host steps a Steps & ops
build groups in the same pass, and only from a plain (not gzipped) local file, which a
range's process opens again.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np

from profscope.formats import xplane_derived
from profscope.formats import xplane_flows
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2
from profscope.model.trace import NameTable

# The smallest range: a plane is cut into at most length // MIN_RANGE_BYTES ranges (so one
# under twice this is decoded whole). A range costs its process a read of its bytes and
# the plane's metadata, and the merge a copy of its columns (docs/performance.md, "One big
# host across the cluster"); on a pod session of many big hosts this also bounds the
# tasks per host (a 300 MB host: 18 ranges at most, whatever the cluster's size).
MIN_RANGE_BYTES = 16 << 20
# The slice columns of a range, as the readers hand them to a sink (``sink.events``).
_COLUMNS = (("track", np.int32), ("start", np.int64), ("dur", np.int64), ("name", np.int32),
            ("aoff", np.int64), ("alen", np.int32))
# Bytes of a run walked at once to find a cut's event boundary.
WINDOW = 1 << 22
# Rows handed to the trace's sink at once when a range is merged (bounds the copy).
MERGE_ROWS = 1 << 20


class Ranges(Protocol):
    """Where the ranges of a plane are decoded: up to ``parts`` of them, none smaller than
    ``min_bytes`` of the plane, by ``run`` (``fn`` over the specs: yields an answer or
    the exception per spec, in order, each as soon as it is there, so the merge of the
    first ranges overlaps the decode of the later ones). app/scale_out.py's
    is the Dask cluster's; :class:`InProcess` decodes them here, one after another."""

    parts: int
    min_bytes: int

    def run(self, fn: Callable, specs: list) -> Iterator: ...


@dataclass
class Split:
    """A build's request to decode its big planes in ranges: on ``ranges``, reading
    ``source`` (the plain local file being converted), each range writing its columns
    under ``folder`` (removed once merged), which every range's process must reach."""

    ranges: "Ranges"
    source: str
    folder: str
    # run by each range's process on its written columns (folder, rows), after its decode:
    # the app passes the index build's per-row sort (tools/trace_index.py ``sorted_run``,
    # which writes ``RUN_FILES`` beside the columns), so the merging build merges sorted
    # runs instead of sorting every row itself; None: the columns as decoded
    sorted_run: Callable[[str, int], None] | None = None


class InProcess:
    """Every range decoded in this process, one after another: the split and the merge
    without another process (tests compare it with the single decode)."""

    def __init__(self, parts: int = 2, min_bytes: int = MIN_RANGE_BYTES):
        self.parts = parts
        self.min_bytes = min_bytes

    def run(self, fn, specs):
        for s in specs:
            yield fn(s)


@dataclass
class Spec:
    """What one range's process needs (strings, numbers and small arrays: it reads the
    file itself)."""

    source: str  # the plain local file
    plane_offset: int  # the plane's bytes in it
    first: int  # the range's bytes in the plane: [first, last)
    last: int
    segments: list  # (line, start, end) in the plane: runs of events, cut at event boundaries
    meta: bytes  # the plane without its lines (XPlane)
    plane_name: str
    line_names: list
    lines: tuple  # (track per line, line timestamp in ns from the trace's base)
    special: dict  # line -> "counter" | "steps" (xplane_trace._read)
    hostname: str
    grouped: bool  # flows.grouped once this plane's metadata is noted
    host_key: int | None  # the HostPlane's key, None when the plane has no derived reader
    blob_base: int  # the plane's first byte among the trace's argument bytes
    folder: str  # where the range writes its columns
    index: int
    sorted_run: Callable[[str, int], None] | None = None  # Split's


def plan(split: Split, ref, data, meta_bytes: bytes, runs, hostname: str, lines: tuple, blob_base: int, dplane,
         grouped: bool, line_names: list, special: dict) -> list[Spec] | None:
    """The ranges of a plane (``runs``: ``xplane_trace._line_runs``' per line), or None
    when it is decoded whole (small, a device plane, fewer than two ranges)."""
    ranges = split.ranges
    most = ref.length // ranges.min_bytes if ranges.min_bytes > 0 else ref.length
    if most < 2 or isinstance(dplane, xplane_derived.DevicePlane):
        return None
    n = min(ranges.parts, most)  # asked last: the cluster's threads are a scheduler call
    if n < 2:
        return None
    total = sum(z - a for line_runs in runs for a, z, _ in line_runs)
    if not total:
        return None
    b = np.frombuffer(data, dtype=np.uint8)
    cuts = [total * k // n for k in range(1, n)]
    parts: list[list] = [[]]
    done = 0
    for li, line_runs in enumerate(runs):
        for a, z, _line_end in line_runs:
            while cuts and done + (z - a) > cuts[0]:
                at = _boundary(data, b, a, z, a + cuts[0] - done)
                cuts.pop(0)
                if at > a:
                    parts[-1].append((li, a, at))
                    done += at - a
                    a = at
                if parts[-1]:
                    parts.append([])
            if z > a:
                parts[-1].append((li, a, z))
                done += z - a
    parts = [p for p in parts if p]
    if len(parts) < 2:
        return None
    # derived.plane makes a HostPlane, a DevicePlane (not cut, above) or nothing
    host_key = dplane.key if isinstance(dplane, xplane_derived.HostPlane) else None
    out = Path(split.folder)
    out.mkdir(parents=True, exist_ok=True)
    return [Spec(split.source, ref.offset, p[0][1], p[-1][2], p, meta_bytes, ref.name, line_names, lines, special,
                 hostname, grouped, host_key, blob_base, str(out / f"range_{i}"), i, split.sorted_run)
            for i, p in enumerate(parts)]


def _boundary(data, b, a: int, z: int, want: int) -> int:
    """The last event boundary at or before ``want`` in the run of events [a, z), walked
    ``WINDOW`` bytes at a time (the walk's arrays stay small); an event longer than that
    ends the walk early (a range then ends before its share)."""
    at = a
    while at < want:
        _s, _e, nxt = xw.event_run_part(data, b, at, z, min(want, at + WINDOW))
        if nxt <= at:
            break
        at = nxt
    return at


class _ColumnFiles:
    """A range's sink: the slice columns appended to one file each, counted."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.files = {k: open(folder / f"{k}.raw", "wb") for k, _ in _COLUMNS}  # noqa: SIM115
        self.count = 0

    def events(self, track, start, dur, name, off, length) -> None:
        for (k, dtype), col in zip(_COLUMNS, (track, start, dur, name, off, length)):
            self.files[k].write(np.ascontiguousarray(col, dtype=dtype).tobytes())
        self.count += len(start)

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def decode_range(spec: Spec) -> dict:
    """Decode one range (in any process that can open ``spec.source`` and write
    ``spec.folder``): its columns go to that folder, what it collected comes back."""
    from profscope.formats import xplane_trace  # it imports this module

    with open(spec.source, "rb") as f:
        f.seek(spec.plane_offset + spec.first)
        length = spec.last - spec.first
        data = bytearray(length + xw.PAD + (-length) % 8)
        if f.readinto(memoryview(data)[:length]) != length:
            raise OSError(f"{spec.source}: shorter than its plane")
    b = np.frombuffer(data, dtype=np.uint8)
    names = NameTable()
    meta = xplane_pb2.XPlane.FromString(spec.meta)
    flows = xplane_flows.Flows(spec.hostname, names)
    flows.grouped = spec.grouped
    pflows = xplane_flows.PlaneFlows(flows, meta, spec.plane_name, spec.line_names)
    space = xplane_derived.Space(names)
    dplane = xplane_derived.HostPlane(space, meta, spec.host_key) if spec.host_key is not None else None
    plane = xplane_trace._PlaneReader(meta, names, data)
    plane.special = spec.special
    # the segments as the single decode's runs (start, end, end), in this buffer's positions
    runs: list[list] = [[] for _ in spec.line_names]
    for li, a, z in spec.segments:
        runs[li].append((a - spec.first, z - spec.first, z - spec.first))
    sink = _ColumnFiles(Path(spec.folder))
    try:
        xplane_trace.decode_chunks(data, b, xplane_trace._event_chunks(data, b, runs), plane, dplane, pflows,
                                   sink, spec.lines, spec.blob_base + spec.first)
    finally:
        sink.close()
    if spec.sorted_run is not None:
        spec.sorted_run(spec.folder, sink.count)
    alloc = [(np.asarray(plane.strings.table, dtype=object)[who], t, heap, stack)
             for who, t, heap, stack in plane.alloc]
    return {"index": spec.index, "rows": sink.count, "folder": spec.folder, "names": names.names,
            "flows": flows.rows, "step_rows": plane.step_rows, "line_rows": plane.line_rows, "reg": plane.reg,
            "alloc": alloc, "counter_values": plane.counter_values, "counter_stats": plane.counter_stats,
            "roots": space.roots, "pid": os.getpid()}


def merge(split: Split, specs: list[Spec], names: NameTable, parts, plane, dplane, pflows):
    """Decode ``specs`` on ``ranges`` and hand each range's slices and collections to
    the single decode's objects (``parts`` the counting sink, ``plane`` its
    ``_PlaneReader``, ``dplane`` its derived reader, ``pflows`` its flows), in range
    order; yields the events merged so far after each range. A range whose process
    failed (a worker lost, a worker that cannot see the file) is decoded here, where a
    malformed input raises as in a single decode."""
    answers = split.ranges.run(decode_range, specs)
    try:
        for spec, got in zip(specs, answers):
            if isinstance(got, BaseException) or not isinstance(got, dict):
                got = decode_range(spec)
            _merge_one(got, names, parts, plane, dplane, pflows)
            yield got["rows"]
    finally:
        close = getattr(answers, "close", None)
        if close is not None:  # a merge that stopped: the ranges still running are let go
            close()
        shutil.rmtree(split.folder, ignore_errors=True)


def _merge_one(got: dict, names: NameTable, parts, plane, dplane, pflows) -> None:
    lut = np.fromiter((names(s) for s in got["names"]), dtype=np.int32, count=len(got["names"]))
    seq0 = parts.count
    folder = Path(got["folder"])
    files = {k: str(folder / f"{k}.raw") for k, _ in _COLUMNS}
    # the range's own sort of its rows (Split.sorted_run), when it made one
    files.update((p.stem, str(p)) for p in folder.glob("run_*.raw"))
    name = lut[np.fromfile(files["name"], dtype=np.int32)]
    name.tofile(files["name"])
    # the index writer appends the files as they are (the kernel copies them); another
    # sink gets the columns
    if not parts.events_files(files, got["rows"]):
        cols = [np.fromfile(files[k], dtype=dtype) for k, dtype in _COLUMNS]
        for a in range(0, got["rows"], MERGE_ROWS):
            parts.events(*(c[a:a + MERGE_ROWS] for c in cols))
        del cols
    del name
    shutil.rmtree(folder, ignore_errors=True)
    for fe, made in got["flows"]:
        cat = np.where(fe.category >= 0, lut[np.maximum(fe.category, 0)], fe.category).astype(np.int32)
        pflows.flows.rows.append((type(fe)(fe.seq + seq0, fe.flow_id, fe.kind, cat), made))
    plane.step_rows += got["step_rows"]
    plane.line_rows += got["line_rows"]
    plane.reg += got["reg"]
    for name, points in got["counter_values"].items():
        plane.counter_values.setdefault(name, []).extend(points)
    for name, stat in got["counter_stats"].items():
        plane.counter_stats.setdefault(name, stat)
    for who, t, heap, stack in got["alloc"]:
        plane.alloc.append((np.asarray([plane.strings.add(s) for s in who.tolist()], np.int32), t, heap, stack))
    if dplane is not None:
        dplane.space.roots += got["roots"]
