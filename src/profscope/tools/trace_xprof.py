"""XProf's ``trace_viewer@`` answer from the trace index: the JSON XProf's trace viewer
(and every XProf client) reads, window by window at a resolution, filtered by XProf's
visibility rule (tools/trace_visibility.py), or one event's details; and the trace-event
JSON writers (``M`` metadata, ``X`` events) that the Chrome-trace export
(tools/trace_export.py) shares.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson

from profscope.errors import BadRequest
from profscope.model.gc_pause import gc_paused
from profscope.tools import trace_visibility as tv
from profscope.tools.trace_index import TraceIndex
from profscope.tools.trace_viewer import PS_PER_MS, HostIndex, TraceView, clamp_ps, jsonable, ms_text, ms_to_ps

XPROF_FILTER_MIN_EVENTS = tv.XPROF_FILTER_MIN_EVENTS
XPROF_DEFAULT_RESOLUTION = 8000


def xprof_json(view: TraceView, start_time_ms: float | None = None, end_time_ms: float | None = None,
               resolution: int | None = None) -> bytes:
    return b"".join(xprof_chunks(view, start_time_ms, end_time_ms, resolution))


def xprof_chunks(view: TraceView, start_time_ms: float | None = None, end_time_ms: float | None = None,
                 resolution: int | None = None, event_name: str | None = None, duration_ms: float | None = None,
                 unique_id: int | None = None) -> Iterator[bytes]:
    """XProf's trace_viewer@ answer, in pieces (a whole trace without a resolution can
    be gigabytes, as in XProf); what needs the data is checked before the first piece.
    Times are XProf's absolute milliseconds; ``resolution`` in pixels (default
    XPROF_DEFAULT_RESOLUTION, 0: no filter; the server keeps it within
    0..queries.XPROF_TRACE_MAX_RESOLUTION).

    With ``event_name`` it is XProf's event-details request instead (its UI sends it
    on a click: ``event_name``, ``start_time_ms``, ``duration_ms``, ``unique_id`` =
    the event's ``args.uid``; ``trace_view_options.cc``, ``ReadFullEventFromLevelDbTable``):
    the answer holds that one event, with all its args, or no event."""
    if event_name:
        found = _find(view, event_name, start_time_ms, duration_ms, unique_id)
        return _pieces(view, 0, 0, 0, found=found)
    return _pieces(view, *xprof_window(view, start_time_ms, end_time_ms, resolution))


def _find(view: TraceView, name: str, start_time_ms: float | None, duration_ms: float | None,
          unique_id: int | None) -> list[tuple[HostIndex, dict]]:
    """The event of an event-details request: the row named by ``unique_id`` (our
    ``uid`` is the row) when its name, start and duration agree, else the event of
    that name starting closest to ``start_time_ms`` within a microsecond."""
    if start_time_ms is None:
        raise BadRequest("missing parameter 'start_time_ms' (the event's start, with event_name)")
    start = ms_to_ps(start_time_ms) - view.origin_ps
    dur = None if duration_ms is None else ms_to_ps(duration_ms)
    uid = unique_id
    tol = 10**6  # 1 µs: the UI sends times as float µs / 1e3

    def fits(ix: TraceIndex, row: int, sh: int) -> bool:
        return (ix.names[int(ix.cols["name"][row])] == name
                and abs(int(ix.cols["start"][row]) + sh - start) <= tol
                and (dur is None or abs(int(ix.cols["dur"][row]) - dur) <= tol))

    for h in view.hosts:
        ix, sh = h.index, view.shift[h.position]
        if uid is not None and 0 <= uid < ix.n and fits(ix, uid, sh):
            return [(h, ix.gather(np.asarray([uid], np.int64)))]
    best = None
    for h in view.hosts:
        ix, sh = h.index, view.shift[h.position]
        rows = ix.overlapping(start - sh - tol, start - sh + tol + 1)
        for row in rows.tolist():
            if fits(ix, row, sh):
                d = abs(int(ix.cols["start"][row]) + sh - start)
                if best is None or d < best[0]:
                    best = (d, h, row)
    if best is None:
        return []
    return [(best[1], best[1].index.gather(np.asarray([best[2]], np.int64)))]


def xprof_span(view: TraceView) -> tuple[int, int]:
    """XProf's trace span (ps from our origin): the first to the last timestamp of what its
    answer holds (``Trace.min_timestamp_ps``/``max_timestamp_ps``): the slices' starts and
    ends, and the samples of the counters it shows (an xplane's ``_counters_`` series; not
    the allocator's, whose events are internal to XProf)."""
    spans = [(view.shift[h.position] + lo, view.shift[h.position] + hi) for h in view.hosts
             for lo, hi in [h.index.meta.get("slice_span", [0, h.index.end_ps])] if h.index.n]
    spans += [(view.shift[h.position] + lo, view.shift[h.position] + hi) for h in view.hosts
              for lo, hi in [h.index.xprof_counter_span() or (None, None)] if lo is not None]
    if not spans:
        return 0, 0
    return min(a for a, _ in spans), max(b for _, b in spans)


def xprof_window(view: TraceView, start_time_ms: float | None, end_time_ms: float | None,
            resolution: int | None) -> tuple[int, int, int]:
    """XProf's trace_viewer@ answer (trace_events_to_json.h): ``M`` process and thread
    names and sort indexes, then ``X`` events with µs ``ts``/``dur`` on XProf's absolute
    time base; ``fullTimespan`` and the window in ms. As in XProf
    (``GetTraceViewOption``, ``TraceVisibilityFilter::SetUp``), an absent or zero
    ``start_time_ms``/``end_time_ms`` is the trace's start/end and the window is
    clamped to the trace's span."""
    s_abs = 0 if start_time_ms is None else ms_to_ps(start_time_ms)
    e_abs = 0 if end_time_ms is None else ms_to_ps(end_time_ms)
    if s_abs and e_abs and e_abs < s_abs:
        raise BadRequest(f"end_time_ms ({ms_text(end_time_ms)}) is before start_time_ms ({ms_text(start_time_ms)})")
    lo, hi = xprof_span(view)
    s = max(lo, clamp_ps(s_abs - view.origin_ps)) if s_abs else lo
    e = min(hi, clamp_ps(e_abs - view.origin_ps)) if e_abs else hi
    # XProf's data route asks for 8000 px when the client gives no resolution
    # (profile_plugin.py: ``request.args.get('resolution', 8000)``); 0 is no filter
    res = XPROF_DEFAULT_RESOLUTION if resolution is None else resolution
    return s, e, res


def xprof_timespan_ms(view: TraceView, lo_ms: float, hi_ms: float) -> list[float]:
    """``fullTimespan`` as XProf prints it: ``absl::StrAppend`` of the two doubles
    (``WriteTraceFullTimespan``, trace_events_to_json.h), so six significant digits
    (29139.978201 ms is "29140"). Its frontend asks its later windows from these printed
    bounds, so an XProf client of ours asks the windows it asks of XProf. A Chrome trace's
    bounds stay whole: XProf does not read those files, and six digits of epoch
    milliseconds would move the opening view by up to 83 minutes."""
    if any(h.index.meta.get("args_kind") == "json" for h in view.hosts):
        return [lo_ms, hi_ms]
    return [float(f"{lo_ms:.6g}"), float(f"{hi_ms:.6g}")]


def _pieces(view: TraceView, s: int, e: int, res: int, found: list | None = None) -> Iterator[bytes]:
    origin_ms = view.origin_ps / PS_PER_MS
    parts = [] if found is None else found
    count = sum(len(sl["rows"]) for _, sl in parts)
    # XProf filters by visibility only traces of at least kDisableStreamingThreshold
    # events (``trace_view_options.cc``; ``DoLoadFromLevelDbTable`` sets the
    # resolution to 0 below it): smaller ones get every event in the window.
    thin = res and sum(h.index.n for h in view.hosts) >= XPROF_FILTER_MIN_EVENTS
    for h in view.hosts if found is None else ():
        ix = h.index
        sh = view.shift[h.position]
        if thin:
            sl = ix.xprof_visible(s - sh, e - sh, res)
        else:
            sl = ix.gather(ix.overlapping_closed(s - sh, e - sh))
            order = np.argsort(sl["start"], kind="stable")
            sl = {k: v[order] for k, v in sl.items()}
        count += len(sl["rows"])
        parts.append((h, sl))
    series = [] if found is not None else list(_counter_series(view, s, e))
    count += sum(len(t) for *_, t, _ in series)
    lo, hi = xprof_span(view)
    # XProf 2.24.2's keys, all of them: its trace viewer reads e.g.
    # ``showCounterMessage.length`` and stays blank without it
    # (``trace_events_to_json.h``, TraceEventsToJson). filteredByVisibility: XProf
    # says true on every answer (its UI then asks again when zooming).
    details = [{"name": "mpmd_pipeline_view", "value": False}]
    if any("/device:TPU:" in p["name"] for h in view.hosts for p in h.index.meta["processes"]):
        details.append({"name": "full_dma", "value": False})  # XProf's TPU-only option
    head = {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "codeLink": "", "useNewBackend": False,
            "details": details, "returnedEventsSize": count,
            "filteredByVisibility": True,
            "fullTimespan": xprof_timespan_ms(view, origin_ms + lo / PS_PER_MS, origin_ms + hi / PS_PER_MS),
            "stackFrames": {}}
    yield orjson.dumps(head)[:-1] + b',"traceEvents":['
    first = True
    buf = []
    for chunk in metadata_events(view, xprof=True):
        buf.append(chunk if first else b"," + chunk)
        first = False
    for h, sl in parts:
        for piece in x_events(h, sl, with_args=found is not None, xprof=True):
            buf.append(piece if first else b"," + piece)
            first = False
            yield b"".join(buf)
            buf = []
    for pid, c, t, v in series:
        buf.append((b"" if first else b",") + _counter_event(pid, c, t, v))
        first = False
    total = sum(len(t) for *_, t, _ in series)
    buf.append(b'],"showCounterMessage":"","totalCounterEvents":%d}' % total)
    yield b"".join(buf)


def _counter_series(view: TraceView, s: int, e: int) -> Iterator[tuple[int, dict, np.ndarray, np.ndarray]]:
    """(pid, counter meta, µs times, values) of each counter series XProf's answer holds
    (an xplane's ``_counters_`` line: ``stat`` in its meta) with samples in [s, e], bounds
    included (checked on XProf 2.24.2's answers: ``tpu_counters`` golden)."""
    for h in view.hosts:
        ix = h.index
        sh = view.shift[h.position]
        for i, c in enumerate(ix.meta["counters"]):
            if not c.get("stat"):
                continue
            t, v = ix.counter_samples(i, s - sh, e - sh)
            if len(t):
                yield ix.tracks[c["track"]]["pid"] + h.pid_offset, c, t / 1e6 + ix.origin_ps / 1e6, v


def _counter_event(pid: int, c: dict, t_us: np.ndarray, v: np.ndarray) -> bytes:
    """One series as XProf 2.24.2 writes counters (``trace_events_to_json.h``,
    ``AddCounterEvent``): a ``C`` event per device and name, ``event_stats`` the name of
    the stat holding the values, ``entries`` its samples as ``[ts µs, value]``, an integer
    stat's values as integers."""
    values = v.astype(np.int64).tolist() if c.get("integer") else v.tolist()
    return orjson.dumps({"pid": pid, "name": c["name"], "ph": "C", "event_stats": c["stat"],
                         "entries": [list(p) for p in zip(t_us.tolist(), values)]})


def metadata_events(view: TraceView, xprof: bool) -> Iterator[bytes]:
    """``M`` events naming the processes and slice threads of the selected hosts, with
    their sort indexes (``xprof``: a thread's is its tid, as XProf writes it)."""
    for h in view.hosts:
        ix = h.index
        for p in ix.meta["processes"]:
            pid = p["pid"] + h.pid_offset
            nthreads = sum(1 for t in ix.tracks if t["pid"] == p["pid"] and t["kind"] == "slices")
            yield orjson.dumps({"args": {"name": p["name"]}, "name": "process_name", "ph": "M", "pid": pid,
                                "thread_count": nthreads})
            yield orjson.dumps({"args": {"sort_index": p["sortIndex"] + h.pid_offset}, "name": "process_sort_index",
                                "ph": "M", "pid": pid})
        for t in ix.tracks:
            if t["kind"] != "slices":
                continue
            pid = t["pid"] + h.pid_offset
            yield orjson.dumps({"args": {"name": t["name"]}, "name": "thread_name", "ph": "M", "pid": pid, "tid": t["tid"]})
            yield orjson.dumps({"args": {"sort_index": t["tid"] if xprof else t["sortIndex"]}, "name": "thread_sort_index",
                                "ph": "M", "pid": pid, "tid": t["tid"]})


def x_events(h: HostIndex, sl, with_args: bool, chunk: int = 20000, xprof: bool = False) -> Iterator[bytes]:
    """X events of columns from :meth:`TraceIndex.window_rows` / ``gather`` (or of
    rows, gathered a chunk at a time), ``chunk`` events at a time: each piece is the
    events' JSON objects joined by commas (no brackets); ``xprof``: with XProf's flow
    fields and ``args.uid``."""
    ix = h.index
    base_us = (ix.origin_ps) / 1e6
    pids = np.asarray([t["pid"] + h.pid_offset for t in ix.tracks] or [0], dtype=np.int64)
    tids = np.asarray([t["tid"] for t in ix.tracks] or [0], dtype=np.int64)
    names = ix.names
    rows = sl["rows"] if isinstance(sl, dict) else sl
    # A Chrome trace's flows are numbered 1, 2, ... in each file (FlowPoints): several
    # traces on one timeline keep theirs apart by the host's position (an xplane's ids are
    # its XFlow ids, kept as they are)
    bind_base = h.position << 32 if ix.meta.get("args_kind") == "json" else 0
    for a in range(0, len(rows), chunk):
        r = rows[a:a + chunk]
        c = {k: v[a:a + chunk] for k, v in sl.items()} if isinstance(sl, dict) else ix.gather(r)
        tr = c["track"]
        rl = r.tolist()
        # a busy window's events are ~150,000 dicts made at once, none in a cycle: the
        # collections their allocations trigger would walk them all again (model/gc_pause.py)
        with gc_paused():
            if with_args:
                args = [jsonable(ix.args(i)) for i in rl]
                if xprof:  # XProf's UI asks for an event's details by its args.uid
                    args = [{**g, "uid": i} for g, i in zip(args, rl)]
            else:
                args = [{"uid": i} for i in rl] if xprof else [{} for _ in rl]
            # One list per piece for one orjson call: an orjson call per event cost as much
            # as making the events (jax308's busy 1 % windows: 54,000 events each).
            # Key order is the answer's: the flow fields after ``ph``, ``args`` last.
            evs = [{"pid": p, "tid": t, "name": names[n], "ts": s, "dur": d, "ph": "X", "args": g}
                   for p, t, n, s, d, g in zip(pids[tr].tolist(), tids[tr].tolist(), c["name"].tolist(),
                                               (c["start"] / 1e6 + base_us).tolist(), (c["dur"] / 1e6).tolist(), args)]
            flows = ix.flow_fields(np.asarray(r)) if xprof else {}
            for k, f in flows.items():
                if bind_base:
                    f["bind_id"] += bind_base
                ev = evs[k]
                g = ev.pop("args")
                ev.update(f)
                ev["args"] = g
            piece = orjson.dumps(evs)[1:-1]
            # freed while paused: the first allocation after the pause would otherwise
            # collect the young generation with all of them still in it (9 % of a busy
            # window's server CPU, py-spy)
            del evs, args, flows
        if piece:
            yield piece


# -- export -----------------------------------------------------------------------------
