"""The events of an XSpace profile as trace-viewer columns (:class:`TraceEvents`).

Which planes and lines become which processes and threads follows XProf 2.24.2
(``xprof/convert/xplane_to_trace_container.cc``, ``ConvertXSpaceToLiteTraceEventsContainer``):

* host planes (name starting ``/host:CPU``), sorted by name, get device ids 701, 702, ...
  (``kHostThreadsDeviceId``); then the ``/device:GPU:*`` planes, or, when there are none,
  the ``/device:TPU:*`` planes, with device id ``1 + plane.id`` (``kFirstDeviceId``).
  XProf then numbers hosts from 1 and makes the pid ``1000 * host + device id``
  (``TraceEventsContainerBase::Merge``), so one host's host plane is pid 1701.
* every line with events is a thread whose tid is ``uint32(line.display_id or line.id)``
  (``XLineVisitor::DisplayId``) and whose name is the line's display name (or name); the
  line named ``_counters_`` holds counter events instead.
* an event's time is ``line.timestamp_ns * 1000 + offset_ps`` (``XEventVisitor::TimestampPs``),
  its name the event metadata's ``display_name`` if set, else its ``name``; a zero
  duration is shown as 1 ps (as XProf 2.24.2's output has it).
* XProf's preprocessing adds a ``ThreadpoolListener::Region`` slice per
  ``StartRegion``/``StopRegion`` pair on a line (computed here with
  :mod:`profscope.formats.xplane_memory`'s reading of it), and leaves out "internal"
  events; the allocator's ``MemoryAllocation``/``MemoryDeallocation`` instants are those
  we know, and they become counter tracks here (bytes in use per allocator, from their
  ``bytes_allocated``/``bytes_reserved`` stats) instead of zero-length slices.
* steps: events carrying a ``step_num`` stat (JAX ``StepTraceAnnotation``, TF's
  ``Trace(..., step_num=)``) and the events of device ``Steps`` lines.

Reading is wire-level and vectorised (the helpers of :mod:`profscope.formats.xplane_memory`):
a plane is read as one buffer, split into lines and event byte ranges with numpy, and
the events' metadata id, offset and duration decoded in bulk; only the stats the trace
viewer needs up front are decoded. The arguments of an event stay as the raw ``XEvent``
bytes (the plane buffer is the blob) and are parsed on request with the plane's metadata
(:func:`event_args`).
"""

from __future__ import annotations

from typing import IO

import numpy as np

from profscope.errors import BadInput
from profscope.formats import protowire as wire
from profscope.formats import xplane
from profscope.formats import xplane_memory as xm
from profscope.formats.protos import xplane_pb2
from profscope.formats.trace_events import Counter, NameTable, Process, TraceEvents, Track

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
               progress=None) -> TraceEvents:
    """The trace events of one XSpace (``<host>.xplane.pb[.gz]``).

    ``host_number`` is XProf's 1-based host index (pids are ``1000 * host + device``);
    ``hostname`` the host as XProf names it, from the file name (process names are
    ``"<hostname> <plane name>"``); by default the XSpace's first ``hostnames`` entry.
    Corrupt or truncated input raises :class:`BadInput` naming the file.
    """
    _report(progress, 0.0, "indexing the profile planes")
    index = xplane.scan(raw, path)
    if hostname is None:
        hostname = index.hostnames[0] if index.hostnames else ""
    chosen = selected_planes(index)
    total = sum(ref.length for ref, _ in chosen) or 1
    try:
        raw.seek(0)
        f, size = xplane.open_stream(raw)
        return _read(f, size, path, hostname, chosen, host_number, total, progress)
    except (wire.Truncated, xm._Malformed, ValueError, IndexError, EOFError, OSError) as e:
        raise wire.wire_error(path, "XSpace profile", e) from e
    except BadInput:
        raise
    except Exception as e:  # protobuf's DecodeError
        if type(e).__name__ == "DecodeError":
            raise wire.wire_error(path, "XSpace profile", e) from e
        raise


class _Parts:
    """Column chunks collected plane by plane."""

    def __init__(self):
        self.track, self.start, self.dur, self.name, self.off, self.len = [], [], [], [], [], []

    def add(self, track, start, dur, name, off, length):
        self.track.append(np.asarray(track, np.int32))
        self.start.append(np.asarray(start, np.int64))
        self.dur.append(np.asarray(dur, np.int64))
        self.name.append(np.asarray(name, np.int32))
        self.off.append(np.asarray(off, np.int64))
        self.len.append(np.asarray(length, np.int32))


def _read(f, size, path, hostname, chosen, host_number, total, progress) -> TraceEvents:
    names = NameTable()
    tracks: list[Track] = []
    processes: list[Process] = []
    counters: list[Counter] = []
    steps: list[tuple[str, int, int]] = []
    planes: list[bytes] = []
    parts = _Parts()
    blobs: list[bytearray] = []
    blob_base = 0
    base_ns: int | None = None
    done = 0
    for ref, device_id in sorted(chosen, key=lambda c: c[0].offset):
        _report(progress, 0.05 + 0.85 * done / total, f"reading {ref.name} ({ref.length >> 20} MiB)")
        data = xm._read_plane_bytes(f, size, ref, pad=xm._PAD + (-ref.length) % 8)
        done += ref.length
        meta_bytes, line_spans = xm._split_plane(data, ref.length)
        meta = xplane_pb2.XPlane.FromString(meta_bytes)
        if device_id < 0:
            device_id = FIRST_DEVICE_ID + meta.id
        pid = MAX_DEVICES_PER_HOST * host_number + device_id
        plane_index = len(planes)
        planes.append(meta_bytes)
        b = np.frombuffer(data, dtype=np.uint8)
        headers, starts, ends, lines_of = [], [], [], []
        for li, (a, z) in enumerate(line_spans):
            head, s, e = xm._line_events(data, b, a, z)
            headers.append(xplane_pb2.XLine.FromString(head))
            starts.append(s)
            ends.append(e)
            lines_of.append(np.full(len(s), li, dtype=np.int32))
        if not any(len(s) for s in starts):
            del data, b
            continue
        if base_ns is None:
            base_ns = min(h.timestamp_ns for h, s in zip(headers, starts) if len(s))
        processes.append(Process(pid, f"{hostname} {meta.name}".strip(), pid))
        stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        ev = xm._decode_events(b, xm._cat(starts, np.int64), xm._cat(ends, np.int64),
                               xm._cat(lines_of, np.int32), stat_names)
        ev_start = xm._cat(starts, np.int64)
        ev_end = xm._cat(ends, np.int64)
        del starts, ends, lines_of
        line_ts = np.array([h.timestamp_ns - base_ns for h in headers], dtype=np.int64)
        ts = line_ts[ev.line] * 1000 + ev.offset_ps
        # metadata id -> name id; unknown ids give ""
        mids = sorted(meta.event_metadata)
        lut_keys = np.asarray(mids, dtype=np.int64)
        lut_vals = np.asarray([names(m.display_name or m.name) for m in (meta.event_metadata[k] for k in mids)],
                              dtype=np.int32)
        empty_name = names("")
        if len(lut_keys):
            pos = np.clip(np.searchsorted(lut_keys, ev.metadata_id), 0, len(lut_keys) - 1)
            name_id = np.where(lut_keys[pos] == ev.metadata_id, lut_vals[pos], empty_name).astype(np.int32)
        else:
            name_id = np.full(ev.n, empty_name, dtype=np.int32)
        # Step roots (a ``step_num`` stat: JAX's StepTraceAnnotation, TF's Trace with
        # step_num) are shown under their step's name, "<name> <step_num>": XProf's step
        # grouping gives them that ``step_name`` (checked on 2.24.2's output).
        sv = xm._StatView(ev, "step_num")
        for r, num in zip(np.flatnonzero(sv.present).tolist(), sv.int_or_uint_value()[sv.present].view(np.int64).tolist()):
            name_id[r] = names(f"{names.names[int(name_id[r])]} {num}")
        raw_names = {k: v.name for k, v in meta.event_metadata.items()}
        internal = xm._mid_mask(ev, raw_names, INTERNAL_EVENTS)
        # tracks: one per line with events (not the counter line)
        line_track = np.full(len(headers), -1, dtype=np.int32)
        for li, h in enumerate(headers):
            if h.name == COUNTER_LINE:
                continue
            if not np.any(ev.line == li):
                continue
            tid = (h.display_id or h.id) & 0xFFFFFFFF
            line_track[li] = len(tracks)
            tracks.append(Track(pid, tid, h.display_name or h.name, len(tracks), "slices", plane_index))
        keep = (~internal) & (line_track[ev.line] >= 0)
        idx = np.flatnonzero(keep)
        # XProf shows zero-length events as 1 ps long (checked on 2.24.2's output)
        parts.add(line_track[ev.line[idx]], ts[idx], np.maximum(ev.duration_ps[idx], 1), name_id[idx],
                  ev_start[idx] + blob_base, (ev_end[idx] - ev_start[idx]))
        # ThreadpoolListener::Region slices (XProf's preprocessing), no XEvent bytes
        _order, regions = xm._threadpool_regions(ev, raw_names, line_ts)
        if len(regions.line):
            rtrack = line_track[regions.line]
            ok = rtrack >= 0
            parts.add(rtrack[ok], regions.ts_ps[ok], regions.end_ps[ok] - regions.ts_ps[ok],
                      np.full(int(ok.sum()), names(REGION_NAME), np.int32),
                      np.zeros(int(ok.sum()), np.int64), np.zeros(int(ok.sum()), np.int32))
        # counter line events -> counter series by name
        for li, h in enumerate(headers):
            if h.name != COUNTER_LINE:
                continue
            sel = np.flatnonzero(ev.line == li)
            _counter_line(ev, sel, ts, name_id, names, stat_names, meta, pid, tracks, counters, plane_index)
        _allocator_counters(ev, internal, ts, raw_names, stat_names, data, pid, tracks, counters, plane_index)
        _steps(ev, ts, name_id, names, headers, steps)
        blobs.append(data)
        blob_base += len(data)
        del ev, b
    _report(progress, 0.92, "collecting columns")
    cat = np.concatenate if parts.start else None
    out = TraceEvents(
        path=path, hostname=hostname, base_ps=(base_ns or 0) * 1000,
        track=cat(parts.track) if cat else np.zeros(0, np.int32),
        start_ps=cat(parts.start) if cat else np.zeros(0, np.int64),
        dur_ps=cat(parts.dur) if cat else np.zeros(0, np.int64),
        name=cat(parts.name) if cat else np.zeros(0, np.int32),
        args_off=cat(parts.off) if cat else np.zeros(0, np.int64),
        args_len=cat(parts.len) if cat else np.zeros(0, np.int32),
        blob=blobs, args_kind="xevent", names=names.names, tracks=tracks, processes=processes,
        counters=counters, steps=steps, planes=planes,
    )
    return out


def _counter_line(ev, sel, ts, name_id, names, stat_names, meta, pid, tracks, counters, plane_index):
    """Events of a ``_counters_`` line: one series per event name; the value is the
    event's first numeric stat (XProf's CreateCounterEvent keeps all args; we plot one)."""
    if not sel.size:
        return
    for nid in np.unique(name_id[sel]).tolist():
        rows = sel[name_id[sel] == nid]
        label = names.names[nid]
        ti = len(tracks)
        tracks.append(Track(pid, 0, label, 10_000 + ti, "counter", plane_index))
        # the value: any of the decoded kinds is not general; use the event's duration-free
        # stats through the generic views of the first stat kind present
        values = np.zeros(len(rows), dtype=np.float64)
        for kind_name in ("bytes_allocated", "bytes_reserved", "bytes_available"):
            v = xm._StatView(ev, kind_name)
            if v.present[rows].any():
                values = v.int_value()[rows].astype(np.float64)
                break
        o = np.argsort(ts[rows], kind="stable")
        counters.append(Counter(ti, label, "", ts[rows][o], values[o]))


def _allocator_counters(ev, internal, ts, raw_names, stat_names, data, pid, tracks, counters, plane_index):
    """Bytes in use per allocator from the BFC allocator's events (the memory profile's
    ``bytes_allocated`` heap and ``bytes_reserved`` stack), as counter tracks."""
    alloc = np.flatnonzero(xm._mid_mask(ev, raw_names, set(ALLOC_EVENTS)))
    if not alloc.size:
        return
    strings = xm._Strings(data, stat_names)
    who = xm._StatView(ev, "allocator_name").str_or_ref(strings, alloc)
    heap = xm._StatView(ev, "bytes_allocated").int_value()[alloc]
    stack = xm._StatView(ev, "bytes_reserved").int_value()[alloc]
    t = ts[alloc]
    for a in np.unique(who).tolist():
        rows = np.flatnonzero(who == a)
        o = np.argsort(t[rows], kind="stable")
        rows = rows[o]
        label = strings.table[a] or "allocator"
        for what, col in (("heap allocated", heap), ("stack reserved", stack)):
            if what == "stack reserved" and not col[rows].any():
                continue
            ti = len(tracks)
            tracks.append(Track(pid, 0, f"{label} {what}", 10_000 + ti, "counter", plane_index))
            counters.append(Counter(ti, f"{label} {what}", "bytes", t[rows], col[rows].astype(np.float64)))


def _steps(ev, ts, name_id, names, headers, steps):
    sv = xm._StatView(ev, "step_num")
    for r in np.flatnonzero(sv.present).tolist():  # already named "<name> <step_num>"
        steps.append((names.names[int(name_id[r])], int(ts[r]), int(ev.duration_ps[r])))
    for li, h in enumerate(headers):
        if (h.display_name or h.name) == "Steps":
            for r in np.flatnonzero(ev.line == li).tolist():
                steps.append((names.names[int(name_id[r])], int(ts[r]), int(ev.duration_ps[r])))
    steps.sort(key=lambda s: s[1])


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
    event = xplane_pb2.XEvent.FromString(bytes(event_bytes))
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
