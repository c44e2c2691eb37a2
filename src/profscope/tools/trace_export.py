"""The trace viewer's Chrome-trace export: every event of a window of a
:class:`~profscope.tools.trace_viewer.TraceView` (no resolution filter) as Chrome
trace-event JSON, which Perfetto and chrome://tracing open."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson

from profscope.tools.trace_viewer import HostIndex, TraceView
from profscope.tools.trace_xprof import metadata_events, x_events

EXPORT_PIECE = 1 << 18
# A step's slice name in the export: torch's profiler step annotation, which the Chrome-trace
# reader (formats/chrome_trace.py STEP_PREFIX), HTA and others take for a step, so that an
# exported profile read back has its steps again.
STEP_PREFIX = "ProfilerStep#"
STEPS_TID = 0xDEADBEEF  # XProf's id of a device's "Steps" line (tsl kThreadIdStepInfo)


def export(view: TraceView, start_ms: float | None = None, end_ms: float | None = None) -> Iterator[bytes]:
    """Chrome-trace JSON of every event in the window (no resolution filter): M names,
    X events (µs), C counter events, s/f flow pairs, and a profile's steps (see
    :func:`_step_events`); Perfetto and chrome://tracing open it. In pieces of at least EXPORT_PIECE bytes: the server sends (and gzips)
    each piece on its own, which for one counter sample or flow end at a time made a
    30 MB export take 25 s."""
    piece, size = [], 0
    for chunk in _export_events(view, start_ms, end_ms):
        piece.append(chunk)
        size += len(chunk)
        if size >= EXPORT_PIECE:
            yield b"".join(piece)
            piece, size = [], 0
    if piece:
        yield b"".join(piece)


def _export_events(view: TraceView, start_ms: float | None, end_ms: float | None) -> Iterator[bytes]:
    s, e = view.span_ps(start_ms, end_ms)
    if end_ms is None:
        e += 1  # the whole trace: also an instant at its very end
    yield b'{"displayTimeUnit":"ns","traceEvents":['
    first = True
    for chunk in metadata_events(view, xprof=False):
        yield chunk if first else b"," + chunk
        first = False
    for h in view.hosts:
        ix = h.index
        sh = view.shift[h.position]
        rows = ix.overlapping(s - sh, e - sh)
        rows = rows[np.argsort(np.asarray(ix.cols["start"][rows]), kind="stable")]
        for piece in x_events(h, rows, with_args=True, chunk=5000):
            yield piece if first else b"," + piece
            first = False
        base_us = ix.origin_ps / 1e6
        for ev in _step_events(h, s - sh, e - sh):
            yield (b"" if first else b",") + ev
            first = False
        for i, c in enumerate(ix.meta["counters"]):
            t, v = ix.counter(i, s - sh, e - sh, 10**9)
            pid = ix.tracks[c["track"]]["pid"] + h.pid_offset
            for tt, vv in zip((t / 1e6 + base_us).tolist(), v.tolist()):
                yield (b"" if first else b",") + orjson.dumps({"ph": "C", "pid": pid, "name": c["name"], "ts": tt,
                                                               "args": {c["unit"] or "value": vv}})
                first = False
        # flows with both ends in the window, as s/f pairs bound to the enclosing slices
        f = ix.flows
        inside = f[(np.minimum(f[:, 2], f[:, 4]) >= s - sh) & (np.maximum(f[:, 2], f[:, 4]) < e - sh)] if len(f) else f
        for k, (name, t0, ts0, t1, ts1) in enumerate(inside.tolist()):
            fid = (h.position << 32) | k
            for ph, track, ts in (("s", t0, ts0), ("f", t1, ts1)):
                tr = ix.tracks[track]
                ev = {"ph": ph, "id": fid, "cat": ix.names[name], "name": ix.names[name], "pid": tr["pid"] + h.pid_offset,
                      "tid": tr["tid"], "ts": (ts + ix.origin_ps) / 1e6}
                if ph == "f":
                    ev["bp"] = "e"
                yield (b"" if first else b",") + orjson.dumps(ev)
                first = False
    yield b"]}"


def _step_events(h: HostIndex, s: int, e: int) -> Iterator[bytes]:
    """The host's steps overlapping [s, e) (ps on its index's clock) as slices of a thread
    "Steps" (XProf's name and id for a device's step line) in the host's first process,
    each named ``ProfilerStep#<step>``: a Chrome-trace reader finds steps only among the
    trace's events, and an xplane's steps (``step_num`` roots, XProf's step grouping) are
    no event of their own. A Chrome trace's steps are its ``ProfilerStep#`` slices, exported
    already, so it gets none here."""
    ix = h.index
    steps = [(name, st, du) for name, st, du in ix.meta["steps"] if st < e and st + du > s]
    if ix.meta.get("args_kind") == "json" or not steps or not ix.meta["processes"]:
        return
    pid = ix.meta["processes"][0]["pid"]
    taken = {t["tid"] for t in ix.tracks if t["pid"] == pid}
    tid = STEPS_TID if STEPS_TID not in taken else max(taken) + 1
    pid += h.pid_offset
    yield orjson.dumps({"args": {"name": "Steps"}, "name": "thread_name", "ph": "M", "pid": pid, "tid": tid})
    yield orjson.dumps({"args": {"sort_index": -1}, "name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid})
    base_us = ix.origin_ps / 1e6
    for name, st, du in steps:
        yield orjson.dumps({"pid": pid, "tid": tid, "name": f"{STEP_PREFIX}{name}", "ts": st / 1e6 + base_us,
                            "dur": du / 1e6, "ph": "X", "args": {"step": name}})
