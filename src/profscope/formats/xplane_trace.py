"""The events of an XSpace profile as trace-viewer columns (:class:`TraceEvents`).

Which planes and lines become which processes and threads follows XProf 2.24.2
(``xprof/convert/xplane_to_trace_container.cc``, ``ConvertXSpaceToLiteTraceEventsContainer``):

* host planes (name starting ``/host:CPU``), sorted by name, get device ids 701, 702, ...
  (``kHostThreadsDeviceId``); then the ``/device:GPU:*`` planes, or, when there are none,
  the ``/device:TPU:*`` planes, with device id ``1 + plane.id`` (``kFirstDeviceId``).
  XProf then numbers hosts from 1 and makes the pid ``1000 * host + device id``
  (``TraceEventsContainerBase::Merge``), so one host's host plane is pid 1701.
* every line with events is a thread whose tid is ``uint32(line.display_id or line.id)``
  (``XLineVisitor::DisplayId``; on GPU planes the display id XProf's preprocessing sets)
  and whose name is the line's display name (or name); the line named ``_counters_``
  holds counter events instead.
* XProf's derived device lines (XLA Modules / XLA Ops / Framework Ops / Framework Name
  Scope / Source code per GPU stream, TPU framework ops and host offload rows) and the
  names of TPU steps: :mod:`profscope.formats.xplane_derived`, made once every plane has
  been read (the metadata of the planes not shown too).
* an event's time is ``line.timestamp_ns * 1000 + offset_ps`` (``XEventVisitor::TimestampPs``),
  its name the event metadata's ``display_name`` if set, else its ``name``; a zero
  duration is shown as 1 ps (as XProf 2.24.2's output has it).
* XProf's preprocessing adds a ``ThreadpoolListener::Region`` slice per
  ``StartRegion``/``StopRegion`` pair on a line (computed here with
  :mod:`profscope.formats.xplane_steps`'s reading of it), and leaves out "internal"
  events; the allocator's ``MemoryAllocation``/``MemoryDeallocation`` instants are those
  we know, and they become counter tracks here (bytes in use per allocator, from their
  ``bytes_allocated``/``bytes_reserved`` stats) instead of zero-length slices.
* steps: events carrying a ``step_num`` stat (JAX ``StepTraceAnnotation``, TF's
  ``Trace(..., step_num=)``) and the events of device ``Steps`` lines.

Reading is wire-level and vectorised (the helpers of :mod:`profscope.formats.xplane_wire`):
a plane is read as one buffer, split into lines and event byte ranges with numpy, and
the events' metadata id, offset and duration decoded in bulk; only the stats the trace
viewer needs up front are decoded. The arguments of an event stay as the raw ``XEvent``
bytes (the plane buffer is the blob) and are parsed on request with the plane's metadata
(:func:`event_args`).
"""

from __future__ import annotations

from typing import IO

import numpy as np

from profscope.formats import protowire as wire
from profscope.formats import xplane
from profscope.formats import xplane_derived
from profscope.formats import xplane_flows
from profscope.formats import xplane_step_events
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2
from profscope.model.trace import (
    Counter,
    MemorySink,
    NameTable,
    Process,
    TraceEvents,
    Track,
)

HOST_PREFIX = "/host:CPU"
GPU_PREFIX = "/device:GPU:"
TPU_PREFIX = "/device:TPU:"
HOST_THREADS_DEVICE_ID = 701  # tsl kHostThreadsDeviceId
FIRST_DEVICE_ID = 1  # tsl kFirstDeviceId
COUNTER_LINE = "_counters_"  # tsl kCounterEventsLineName
MAX_DEVICES_PER_HOST = 1000  # trace_events.cc, TraceEventsContainerBase::Merge
ALLOC_EVENTS = ("MemoryAllocation", "MemoryDeallocation")
# tsl IsInternalEvent: events XProf's trace viewer never shows (the allocator's become
# counter tracks here).
INTERNAL_EVENTS = frozenset({*ALLOC_EVENTS, "PrefetchProduce", "PrefetchConsume",
                             "ParallelInterleaveProduce", "ParallelInterleaveConsume",
                             "ParallelInterleaveInitializeInput", "ParallelMapProduce",
                             "ParallelMapConsume", "MapAndBatchProduce", "MapAndBatchConsume",
                             "ParseExampleProduce", "ParseExampleConsume"})
REGION_NAME = "ThreadpoolListener::Region"


def selected_planes(index: xplane.XSpaceIndex) -> list[tuple[xplane.PlaneRef, int]]:
    """The planes XProf's trace viewer shows, with their device ids, in its order."""
    out = []
    hosts = sorted((p for p in index.planes if p.name.startswith(HOST_PREFIX)), key=lambda p: p.name)
    for i, ref in enumerate(hosts):
        out.append((ref, HOST_THREADS_DEVICE_ID + i))
    devices = [p for p in index.planes if p.name.startswith(GPU_PREFIX)]
    if not devices:
        devices = [p for p in index.planes if p.name.startswith(TPU_PREFIX)]
    for ref in devices:
        out.append((ref, -1))  # the device id needs XPlane.id, read with the plane
    return out


def read_trace(raw: IO[bytes], path: str, host_number: int = 1, hostname: str | None = None,
               progress=None, sink=None, steps: bool = False, split=None) -> TraceEvents:
    """The trace events of one XSpace (``<host>.xplane.pb[.gz]``).

    ``host_number`` is XProf's 1-based host index (pids are ``1000 * host + device``);
    ``hostname`` the host as XProf names it, from the file name (process names are
    ``"<hostname> <plane name>"``); by default the XSpace's first ``hostnames`` entry.
    ``sink``: where the event columns go as they are decoded (``sink.events(track, start,
    dur, name, args_off, args_len)`` per chunk, ``sink.blob(buffer, source_offset)`` per plane
    (the plane's offset in the file when the file is not gzipped, else None), whose
    bytes the args offsets point into); the returned :class:`TraceEvents` then has
    empty columns. Without one they are collected in memory.
    ``split`` (:class:`~profscope.formats.xplane_line_ranges.Split`: where, e.g. the
    Dask cluster, app/scale_out.py; the plain local file ``raw`` reads; a scratch
    folder): a big plane's events are decoded in ranges by other processes and merged
    here into the same columns, in the same order (formats/xplane_line_ranges.py).
    Corrupt or truncated input raises :class:`BadInput` naming the file.
    """
    _report(progress, 0.0, "indexing the profile planes")
    index = xplane.scan(raw, path)
    if hostname is None:
        hostname = index.hostnames[0] if index.hostnames else ""
    chosen = selected_planes(index)
    # the other planes' metadata matter too: XProf's preprocessing (xplane_derived.Space.note)
    others = [p for p in index.planes if all(p is not r for r, _ in chosen)]
    total = sum(ref.length for ref, _ in chosen) or 1
    # A CPU-only profile's steps are XProf's grouping of its host plane's events
    # (formats/xplane_step_events.py): when asked, they are grouped here, from this decode
    # of them, for the index folder (app/traces.py), instead of by a second read of the
    # plane. Not for a timeline alone: the grouping would add about a third to the build's
    # CPU time and 2.6x its peak memory on a long CPU profile (docs/performance.md).
    steps_plane = xplane_step_events.HOST_PLANE if steps and xplane_step_events.cpu_only(index) else None
    with xw.xspace_errors(path):
        raw.seek(0)
        f, size = xplane.open_stream(raw, path)
        out = _read(f, size, path, hostname, chosen, host_number, total, progress, sink, others, steps_plane,
                    split)
    if out.host_steps is not None:
        out.host_steps["hostname"] = index.hostnames[0] if index.hostnames else ""
    return out


CHUNK_EVENTS = 1 << 16  # events decoded at once: bounds the decoder's scratch memory
LINE_WINDOW = 1 << 22  # bytes of a line searched for event headers at once (scratch memory)


def _read(f, size, path, hostname, chosen, host_number, total, progress, sink, others=(),
          steps_plane: str | None = None, split=None) -> TraceEvents:
    names = NameTable()
    tracks: list[Track] = []
    processes: list[Process] = []
    counters: list[Counter] = []
    steps: list[tuple[str, int, int]] = []
    planes: list[bytes] = []
    # counts the slices handed over: a flow names its slices by that position
    parts = xplane_flows.CountingSink(MemorySink() if sink is None else sink)
    flows = xplane_flows.Flows(hostname, names)
    derived = xplane_derived.Space(names)  # XProf's derived device lines, made at the end
    blob_base = 0
    base_ns: int | None = None
    later = None  # the host plane's grouping, made at the end (_host_steps_of)
    done = 0
    for ref, device_id in sorted([*chosen, *((r, None) for r in others)], key=lambda c: c[0].offset):
        if device_id is None:  # a plane not shown: only its metadata
            derived.note(xw.plane_metadata(f, size, ref), ref.name)
            continue
        _report(progress, 0.02 + 0.9 * done / total, f"reading {ref.name} ({ref.length >> 20} MiB)")
        data, drop, b, meta_bytes, meta, (headers, runs, counts) = _plane_lines(f, size, ref)
        if device_id < 0:
            device_id = FIRST_DEVICE_ID + meta.id
        pid = MAX_DEVICES_PER_HOST * host_number + device_id
        pflows = flows.plane(meta, ref.name, [h.name for h in headers])
        dplane = derived.plane(meta, ref.name, headers, counts)
        n = sum(counts)
        if not n:
            del data, b
            done += ref.length
            continue
        if base_ns is None:
            base_ns = min(h.timestamp_ns for h, c in zip(headers, counts) if c)
        plane_index = len(planes)
        planes.append(meta_bytes)
        processes.append(Process(pid, f"{hostname} {meta.name}".strip(), pid))
        line_ts = np.array([h.timestamp_ns - base_ns for h in headers], dtype=np.int64)
        # tracks: one per line with events (the counter line holds counters instead)
        line_track = np.full(len(headers), -1, dtype=np.int32)
        counter_lines = set()
        for li, h in enumerate(headers):
            if h.name == COUNTER_LINE:
                counter_lines.add(li)
            elif counts[li]:
                line_track[li] = len(tracks)
                tid = h.display_id or h.id  # a device plane's display ids: derived.emit
                tracks.append(Track(pid, tid & 0xFFFFFFFF, h.display_name or h.name,
                                    len(tracks), "slices", plane_index))
        if isinstance(dplane, xplane_derived.DevicePlane):
            dplane.pid, dplane.plane_index, dplane.line_track = pid, plane_index, line_track
        plane = _PlaneReader(meta, names, data)
        plane.special = {li: ("counter" if li in counter_lines else "steps") for li, h in enumerate(headers)
                         if li in counter_lines or (h.display_name or h.name) == "Steps"}
        seen = 0
        # the step reader's columns of the plane taken from this decode (no second one)
        columns = xplane_step_events.HostEventColumns(n, plane.stat_names) if ref.name == steps_plane else None
        ranges = None
        if split is not None and columns is None and size is not None:
            from profscope.formats import xplane_line_ranges  # imports this module

            ranges = xplane_line_ranges.plan(split, ref, data, meta_bytes, runs, hostname, (line_track, line_ts),
                                             blob_base, dplane, flows.grouped, [h.name for h in headers],
                                             plane.special)
        if ranges is not None:  # decoded apart (another process each), merged here in line order
            seen = 0
            for rows in xplane_line_ranges.merge(split, ranges, names, parts, plane, dplane, pflows):
                seen += rows
                _report(progress, 0.02 + 0.9 * (done + ref.length * seen / n) / total,
                        f"decoded {ref.name}: {seen:,} of {n:,} events")
        else:
            def decoded(k, ref=ref, n=n, done=done, drop=drop):
                nonlocal seen
                if (seen + k) * 16 // n != seen * 16 // n:  # every 16th of the plane's events
                    drop()
                seen += k
                _report(progress, 0.02 + 0.9 * (done + ref.length * seen / n) / total,
                        f"decoding {ref.name}: {seen:,} of {n:,} events")

            decode_chunks(data, b, _event_chunks(data, b, runs), plane, dplane, pflows, parts,
                          (line_track, line_ts), blob_base, columns, decoded)
        if columns is not None:  # (a plain file's bytes not kept: read back where needed)
            later = (ref, meta, headers, columns, data if size is None else None)
        del columns
        _region_slices(parts, plane, line_track, names)
        plane.counters(pid, tracks, counters, plane_index, counter_lines)
        steps += plane.steps()
        del b, plane
        # a plain file's plane bytes are its own, from the plane's offset: a sink that can
        # read the file back need not keep them (IndexWriter with a ``source``)
        parts.blob(data, source_offset=ref.offset if size is not None else None)
        blob_base += len(data)
        del data
        done += ref.length
    # derived lines and the display ids of device lines, once every plane is known
    blob_base += derived.emit(parts, tracks, planes, blob_base, steps)
    flows.emit(parts)
    _report(progress, 0.95, "collecting columns")
    steps.sort(key=lambda s: s[1])

    out = TraceEvents.without_events(
        path, hostname, (base_ns or 0) * 1000, "xevent", names=names.names, tracks=tracks,
        processes=processes, counters=counters, steps=steps, planes=planes)
    out.host_steps = _host_steps_of(later, f)
    if sink is None:
        parts.fill(out)
    return out


def _host_steps_of(later, f) -> dict | None:
    """The step reader's grouping of the host plane's gathered columns (``later``: the
    plane's ref, metadata, line headers, ``HostEventColumns`` and, for a stream, its
    bytes), made once every plane is decoded and a plain file's plane bytes are gone: they
    were 302 MB of the cold Steps & ops answer's 1.5 GB peak on jax308, beside the columns
    and the grouping's arrays (docs/performance.md). The string stats it may read
    (graph_type, step_name: none on a JAX CPU profile) are read back from the file."""
    if later is None:
        return None
    ref, meta, headers, columns, data = later
    plane = data if data is not None else _PlaneInFile(f, ref.offset, ref.length)
    return xplane_step_events.host_steps_in_build(plane, ref.length, meta, headers, columns)


class _PlaneInFile:
    """A plain file's plane bytes as the step grouping reads them (``data[a:z]``: a
    string stat's value, ``xw.Strings``), read back from the file where asked instead of
    kept in memory, a block of ``BLOCK`` bytes at a time (a TF profile's roots ask one
    graph_type string each, in plane order: one read per block, not per string, also
    where the file is remote); ``f``'s position is left as it was."""

    BLOCK = 1 << 20

    def __init__(self, f, offset: int, length: int):
        self.f, self.offset, self.length = f, offset, length
        self.at, self.block = 0, b""

    def __getitem__(self, at: slice) -> bytes:
        a, z = max(at.start or 0, 0), min(self.length if at.stop is None else at.stop, self.length)
        if z <= a:
            return b""
        if not (self.at <= a and z <= self.at + len(self.block)):
            pos = self.f.tell()
            try:
                self.f.seek(self.offset + a)
                self.at, self.block = a, self.f.read(min(max(z - a, self.BLOCK), self.length - a))
            finally:
                self.f.seek(pos)
        return self.block[a - self.at:z - self.at]


def decode_chunks(data, b, chunks, plane, dplane, pflows, parts, lines, blob_base: int, columns=None,
                  decoded=None) -> None:
    """Decode ``chunks`` (starts, ends, line of events, :func:`_event_chunks`) of one
    plane's buffer ``data`` and hand their slices to ``parts``; what is collected across
    chunks goes to ``plane``, ``dplane``, ``pflows`` and ``columns``. ``lines``: each
    line's (track, timestamp in ns from the trace's base). The same code decodes a line
    range apart (formats/xplane_line_ranges.py): only concatenation across chunks, so
    where the chunks are cut changes nothing."""
    line_track, line_ts = lines
    for ev_start, ev_end, ev_line in chunks:
        if decoded is not None:
            decoded(len(ev_start))
        ev = xw.decode_events(b, ev_start, ev_end, ev_line, plane.stat_names)
        if columns is not None:
            columns.add(ev)
        ts = line_ts[ev.line] * 1000 + ev.offset_ps
        name_id = plane.name_ids(ev)
        internal = np.isin(ev.metadata_id, plane.internal_ids)
        keep = np.flatnonzero(~internal & (line_track[ev.line] >= 0))
        if dplane is not None:  # a TensorCore's Steps events wait for their step names
            keep = dplane.hold(ev, keep, ts, name_id, ev_start, ev_end, blob_base)
        keep = pflows.select(ev, keep, parts.count)  # flows; XProf's async events dropped
        # XProf shows zero-length events as 1 ps long (checked on 2.24.2's output)
        parts.events(line_track[ev.line[keep]], ts[keep], np.maximum(ev.duration_ps[keep], 1), name_id[keep],
                     ev_start[keep] + blob_base, (ev_end[keep] - ev_start[keep]).astype(np.int32))
        plane.collect(ev, ts, name_id, ev_start, ev_end)
        if dplane is not None:
            dplane.collect(ev, ts, data)
        del ev, ts, name_id, internal, keep


def _region_slices(parts, plane, line_track, names) -> None:
    """The plane's ThreadpoolListener::Region slices (XProf's preprocessing), no XEvent bytes."""
    reg_line, reg_ts, reg_end = plane.regions()
    if len(reg_line):
        rtrack = line_track[reg_line]
        ok = rtrack >= 0
        k = int(ok.sum())
        parts.events(rtrack[ok], reg_ts[ok], reg_end[ok] - reg_ts[ok], np.full(k, names(REGION_NAME), np.int32),
                     np.zeros(k, np.int64), np.zeros(k, np.int32))


def _plane_lines(f, size: int | None, ref):
    """A plane's bytes (mapped, not read: xw.map_plane_bytes), their ``drop()``, the bytes
    as uint8, its metadata bytes and XPlane, and its lines' (headers, event runs, counts).
    The decode walks the plane once, letting the pages it passed go (``drop``), so the
    plane (311 MiB on jax308) is not all in the worker's RSS at once."""
    data, drop = xw.map_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
    meta_bytes, line_spans = xw.split_plane(data, ref.length)
    b = np.frombuffer(data, dtype=np.uint8)
    headers, runs, counts = [], [], []
    for a, z in line_spans:
        head, line_runs, count = _line_runs(data, b, a, z, drop)
        headers.append(xplane_pb2.XLine.FromString(head))
        runs.append(line_runs)
        counts.append(count)
    drop()  # (the line runs' walk touched every page)
    return data, drop, b, meta_bytes, xplane_pb2.XPlane.FromString(meta_bytes), (headers, runs, counts)


def _line_runs(data, b, start: int, end: int, drop=None):
    """An XLine's bytes without its events, the byte ranges of its runs of ``events``
    fields and how many events they hold (found ``LINE_WINDOW`` bytes at a time, so a
    huge line never needs arrays over all its events). ``drop``: called after each
    ``MAP_WINDOW`` bytes of a run walked (xw.map_plane_bytes' pages let go)."""
    keep = bytearray()
    runs = []
    count = 0
    pos = start
    while pos < end:
        if data[pos] == 0x22:  # field 4 (events), LEN: a run of events
            run_start = after = pos
            if xw.native_enabled():  # counted without collecting
                k, after = _run_count(data, b, run_start, end, drop)
                count += k
            else:
                for s_, _e, after in _windows(data, b, run_start, end):
                    count += len(s_)
            pos = after
            runs.append((run_start, pos, end))
            continue
        _, _, _, nxt = xw.next_field(data, pos, end)
        keep += data[pos:nxt]
        pos = nxt
    return bytes(keep), runs, count


MAP_WINDOW = 32 << 20  # bytes of a mapped plane walked between two drops (_line_runs)


def _run_count(data, b, pos: int, end: int, drop) -> tuple[int, int]:
    """xw.run_count of the run at ``pos`` (its events, the position after it), walked
    ``MAP_WINDOW`` bytes at a time with ``drop()`` between (one walk without ``drop``):
    the same entries, each read bounded by ``end`` as the one walk reads it."""
    if drop is None:
        return xw.run_count(b, pos, end)
    count = 0
    while True:
        k, nxt = xw.run_count(b, pos, end, min(end, pos + MAP_WINDOW))
        if not k and nxt < end and data[nxt] == 0x22:  # an entry longer than the window
            k, nxt = xw.run_count(b, pos, end)
        count, pos = count + k, nxt
        if not k or pos >= end or data[pos] != 0x22:
            return count, pos
        drop()


def _windows(data, b, pos: int, end: int):
    """(event payload starts, ends, position after) of a run of events, a window at a time."""
    while pos < end and data[pos] == 0x22:
        stop = min(end, pos + LINE_WINDOW)
        s_, e_, nxt = xw.event_run_part(data, b, pos, end, stop)
        if not len(s_):  # an entry longer than the window: read it the slow way
            _, _, payload, nxt = xw.next_field(data, pos, end)
            s_, e_ = np.asarray([payload], dtype=np.int64), np.asarray([nxt], dtype=np.int64)
        yield s_, e_, nxt
        pos = nxt


def _event_chunks(data, b, runs):
    """(starts, ends, line) of the plane's events, about CHUNK_EVENTS at a time, in line
    order and within a line in wire order."""
    buf_s, buf_e, buf_l, held = [], [], [], 0
    for li, line_runs in enumerate(runs):
        for run_start, _run_end, line_end in line_runs:
            for s_, e_, _ in _windows(data, b, run_start, line_end):
                for a in range(0, len(s_), CHUNK_EVENTS):
                    part_s, part_e = s_[a:a + CHUNK_EVENTS], e_[a:a + CHUNK_EVENTS]
                    buf_s.append(part_s)
                    buf_e.append(part_e)
                    buf_l.append(np.full(len(part_s), li, dtype=np.int32))
                    held += len(part_s)
                    if held >= CHUNK_EVENTS:
                        yield np.concatenate(buf_s), np.concatenate(buf_e), np.concatenate(buf_l)
                        buf_s, buf_e, buf_l, held = [], [], [], 0
    if held:
        yield np.concatenate(buf_s), np.concatenate(buf_e), np.concatenate(buf_l)


class _PlaneReader:
    """Per-plane lookups and what is collected across the chunks of its events."""

    def __init__(self, meta, names: NameTable, data):
        self.names = names
        self.stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        mids = sorted(meta.event_metadata)
        self.lut_keys = np.asarray(mids, dtype=np.int64)
        self.lut_vals = np.asarray([names(m.display_name or m.name) for m in (meta.event_metadata[k] for k in mids)],
                                   dtype=np.int32)
        self.empty = names("")
        # by metadata id straight where the ids are few and small (XPlane.event_metadata's
        # keys: the profiler numbers them 1, 2, ...; jax308's 45,055 up to 45,055): one
        # gather per chunk instead of a binary search per event (0.11 of a 1.7 s decode).
        # Index -1 (a negative id, clipped) and top + 1 (past the keys) read "".
        top = int(self.lut_keys[-1]) if len(mids) else -1
        self.dense = None
        if len(mids) and int(self.lut_keys[0]) >= 0 and top < 4 * len(mids) + 4096:
            self.dense = np.full(top + 2, self.empty, dtype=np.int32)
            self.dense[self.lut_keys] = self.lut_vals
        raw = {k: v.name for k, v in meta.event_metadata.items()}
        self.internal_ids = np.asarray([k for k, v in raw.items() if v in INTERNAL_EVENTS], dtype=np.int64)
        self.alloc_ids = np.asarray([k for k, v in raw.items() if v in ALLOC_EVENTS], dtype=np.int64)
        self.region_start = [k for k, v in raw.items() if v == "ThreadpoolListener::StartRegion"][-1:]
        self.region_stop = [k for k, v in raw.items() if v == "ThreadpoolListener::StopRegion"][-1:]
        self.strings = xw.Strings(data, self.stat_names)
        self.reg: list[tuple] = []  # (line, ts, is_start) chunks
        self.alloc: list[tuple] = []  # (allocator string id, ts, heap, stack) chunks
        self.counter_rows: list[tuple] = []  # (line, name id, ts, value) chunks
        self.step_rows: list[tuple] = []
        self.line_rows: list[tuple] = []  # (name, ts, dur, line) of lines that may be "Steps"
        self.special: dict[int, str] = {}  # line -> "counter" (``_counters_``) or "steps"
        self.data = data
        self.counter_values: dict[str, list] = {}  # name -> [(ts, value)]
        self.counter_stats: dict[str, tuple[str, bool]] = {}  # name -> (value's stat, an integer)
        self.event_meta = meta.event_metadata

    def name_ids(self, ev) -> np.ndarray:
        if not len(self.lut_keys):
            return np.full(ev.n, self.empty, dtype=np.int32)
        if self.dense is not None:
            name_id = self.dense[np.clip(ev.metadata_id, -1, len(self.dense) - 1)]
        else:
            pos = np.clip(np.searchsorted(self.lut_keys, ev.metadata_id), 0, len(self.lut_keys) - 1)
            name_id = np.where(self.lut_keys[pos] == ev.metadata_id, self.lut_vals[pos], self.empty).astype(np.int32)
        # Step roots (a ``step_num`` stat: JAX's StepTraceAnnotation, TF's Trace with
        # step_num) are shown under their step's name, "<name> <step_num>": XProf's step
        # grouping gives them that ``step_name`` (checked on 2.24.2's output).
        sv = xw.StatView(ev, "step_num")
        rows = np.flatnonzero(sv.present)
        for r, num in zip(rows.tolist(), sv.int_or_uint_value()[rows].view(np.int64).tolist()):
            name_id[r] = self.names(f"{self.names.names[int(name_id[r])]} {num}")
        return name_id

    def collect(self, ev, ts, name_id, ev_start, ev_end) -> None:
        sv = xw.StatView(ev, "step_num")
        for r in np.flatnonzero(sv.present).tolist():
            self.step_rows.append((self.names.names[int(name_id[r])], int(ts[r]), int(ev.duration_ps[r]), int(ev.line[r])))
        if self.special:
            for r in np.flatnonzero(np.isin(ev.line, list(self.special))).tolist():
                li = int(ev.line[r])
                name = self.names.names[int(name_id[r])]
                if self.special[li] == "steps":
                    self.line_rows.append((name, int(ts[r]), int(ev.duration_ps[r]), li))
                    continue
                # a counter event: its value is its first numeric stat, the metadata's
                # first as in XProf's args (ConvertXStatsToTraceEventArguments; its
                # AddCounterEvent keeps them all, trace_events_to_json writes the first
                # one's name as ``event_stats``); one series per name and plane
                x = xplane_pb2.XEvent.FromString(bytes(self.data[int(ev_start[r]):int(ev_end[r])]))
                md = self.event_meta.get(x.metadata_id)
                st = next((st for st in [*(md.stats if md is not None else ()), *x.stats]
                           if st.WhichOneof("value") in ("int64_value", "uint64_value", "double_value")), None)
                if st is not None:
                    kind = st.WhichOneof("value")
                    self.counter_values.setdefault(name, []).append((int(ts[r]), float(getattr(st, kind))))
                    self.counter_stats.setdefault(name, (self.stat_names.get(st.metadata_id, str(st.metadata_id)),
                                                         kind != "double_value"))
        if self.region_start and self.region_stop:
            is_start = (ev.metadata_id == self.region_start[0]) & xw.StatView(ev, "_c", last=False).present
            is_stop = ev.metadata_id == self.region_stop[0]
            sel = np.flatnonzero(is_start | is_stop)
            if sel.size:
                self.reg.append((ev.line[sel], ts[sel], is_start[sel]))
        if len(self.alloc_ids):
            sel = np.flatnonzero(np.isin(ev.metadata_id, self.alloc_ids))
            if sel.size:
                who = xw.StatView(ev, "allocator_name").str_or_ref(self.strings, sel)
                heap = xw.StatView(ev, "bytes_allocated").int_value()[sel]
                stack = xw.StatView(ev, "bytes_reserved").int_value()[sel]
                self.alloc.append((who, ts[sel], heap, stack))

    def steps(self) -> list[tuple[str, int, int]]:
        """(name, ts, dur) of the plane's step rows: ``step_num`` events and ``Steps`` lines' events."""
        return [(r_name, r_ts, r_dur) for r_name, r_ts, r_dur, r_line in self.step_rows] + \
            [(r_name, r_ts, r_dur) for r_name, r_ts, r_dur, r_line in self.line_rows if self.special[r_line] == "steps"]

    def regions(self):
        """XProf's ThreadpoolLineMutator: a Region per StopRegion after a StartRegion on a
        line (the start is not reset, so two stops make two regions); see
        :func:`profscope.formats.xplane_steps.threadpool_regions`."""
        out_l, out_s, out_e = [], [], []
        cur_line, start_ts = -1, 0
        for lines, tss, starts in self.reg:
            for li, t, st in zip(lines.tolist(), tss.tolist(), starts.tolist()):
                if li != cur_line:
                    cur_line, start_ts = li, 0
                if st:
                    start_ts = t
                elif start_ts != 0:
                    out_l.append(li)
                    out_s.append(start_ts)
                    out_e.append(t)
        return np.asarray(out_l, np.int32), np.asarray(out_s, np.int64), np.asarray(out_e, np.int64)

    def counters(self, pid, tracks, counters, plane_index, counter_lines) -> None:
        """Bytes in use per allocator from the BFC allocator's events (the memory
        profile's ``bytes_allocated`` heap and ``bytes_reserved`` stack), as counter tracks."""
        for name, points in self.counter_values.items():
            points.sort()
            ti = len(tracks)
            tracks.append(Track(pid, 0, name, 10_000 + ti, "counter", plane_index))
            stat, integer = self.counter_stats[name]
            counters.append(Counter(ti, name, "", np.asarray([p[0] for p in points], np.int64),
                                    np.asarray([p[1] for p in points], np.float64), stat, integer))
        if not self.alloc:
            return
        who = np.concatenate([a[0] for a in self.alloc])
        t = np.concatenate([a[1] for a in self.alloc])
        heap = np.concatenate([a[2] for a in self.alloc])
        stack = np.concatenate([a[3] for a in self.alloc])
        for a in np.unique(who).tolist():
            rows = np.flatnonzero(who == a)
            rows = rows[np.argsort(t[rows], kind="stable")]
            label = self.strings.table[a] or "allocator"
            for what, col in (("heap allocated", heap), ("stack reserved", stack)):
                if what == "stack reserved" and not col[rows].any():
                    continue
                ti = len(tracks)
                tracks.append(Track(pid, 0, f"{label} {what}", 10_000 + ti, "counter", plane_index))
                counters.append(Counter(ti, f"{label} {what}", "bytes", t[rows], col[rows].astype(np.float64)))


def _report(progress, fraction, message):
    if progress is not None:
        progress.update(fraction=fraction, message=message)


# ---------------------------------------------------------------------------
# Details of one event
# ---------------------------------------------------------------------------


def plane_metadata(meta_bytes: bytes) -> dict:
    """What :func:`event_args` needs of a plane: event and stat metadata by id."""
    plane = xplane_pb2.XPlane.FromString(bytes(meta_bytes))
    return {
        "stat_names": {k: v.name for k, v in plane.stat_metadata.items()},
        "events": {k: v for k, v in plane.event_metadata.items()},
    }


def event_args(event_bytes: bytes, plane_meta: dict) -> dict:
    """All stats of one XEvent as XProf's trace viewer shows them: the metadata's stats
    first, then the event's own (``ConvertXStatsToTraceEventArguments``); bytes values
    are skipped; a ``ref_value`` is the name of the stat metadata it points to. The
    event metadata's name is ``long_name`` when a display name is shown instead."""
    stat_names = plane_meta["stat_names"]
    try:
        event = xplane_pb2.XEvent.FromString(bytes(event_bytes))
    except wire.DecodeError:
        # The index only checked the event's framing (XLine.events lengths, the fields the
        # columns need); its stats are parsed here, on request, possibly mid-export: a
        # corrupt one is shown, not raised (the answer may be streaming already).
        return {"profscope_error": "this event's stats are corrupt in the profile (not a valid XEvent)"}
    meta = plane_meta["events"].get(event.metadata_id)
    args: dict = {}
    if meta is not None and meta.display_name:
        args["long_name"] = meta.name
    for stat in (list(meta.stats) if meta is not None else []) + list(event.stats):
        kind = stat.WhichOneof("value")
        if kind is None or kind == "bytes_value":
            continue
        args[stat_names.get(stat.metadata_id, str(stat.metadata_id))] = xplane.stat_value(stat, stat_names)
    return args
