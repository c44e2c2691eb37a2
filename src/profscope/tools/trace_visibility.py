"""XProf's visibility filter for its ``trace_viewer@`` answer: which events a window at a
resolution returns, exactly as XProf 2.24.2 picks them.

XProf (``xprof/convert/trace_viewer/``) does it in two steps:

1. When it converts a trace, every event gets a *zoom level* (``lite_trace_events.cc``,
   ``GetLiteTraceEventsByLevel``): levels 0..12 have resolutions 1 s, 100 ms, ... 1 ps
   (``kLayerResolutions``); per row, in time order, an event goes to the first level at
   which ``TraceViewerVisibility::VisibleAtResolution`` keeps it given what that level
   kept so far, and counts as kept at every finer level (``SetVisibleAtResolution``).
   Flow events are decided first, per flow (``CalculateFlowVisibilityLite``): a flow's
   slices land where its first slice is kept, or where they are long enough.
2. A window ``[s, e]`` at ``resolution`` pixels (``DoLoadFromLevelDbTable``) loads the
   levels down to the first whose resolution is at most ``r = llround((e - s) /
   resolution)`` and runs the same rule with a fresh state over what it loaded.

Traces with fewer than ``XPROF_FILTER_MIN_EVENTS`` events are not filtered at all
(``kDisableStreamingThreshold``): XProf returns every event overlapping the window.

The rule (``VisibleAtResolution``), per row: an event is kept if it lasts at least ``r``,
or is the first kept one at its depth, or starts at least ``r`` after the end of the last
kept event at its depth; its depth counts the kept events still open at its start (a
stack of kept ends, truncated at each keep). A slice bound to a flow is kept with its
flow: the flow's first slice decides (when the rule would drop it, it is still kept if
its end is ``r`` past the row's last kept arrow end, or before it: XProf subtracts
``uint64`` timestamps, so a nested slice's end, before its holder's, wraps around).

Step 1 is a pass per level over the whole trace (in C, ``_trace_build.c``; the Python
loops below where it is not built): the app has a conversion worker make every level at
once and keep them in the cache (``trace_index.write_zoom_levels``, app/traces.py), so
the server process runs only step 2. Past ``XPROF_LEVELS_MAX`` events all 13 levels cost
more than the index build itself (13.6 M events: 8.6 CPU s, a level 0.4-1 s after the
first's 2.7 s of ordering), so they are made as deep as a window needs and
``LEVELS_AHEAD`` deeper, on its first request, and a deeper window resumes from the
levels kept (:meth:`ZoomLevels.state`); every window is still XProf's exact event set.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from bisect import bisect_left

import numpy as np

from profscope.model import heap

try:  # the zoom levels' per-event pass in C (setup.py builds it; absent: the Python loop below)
    from profscope.tools import _trace_build as _native
except ImportError:  # pragma: no cover - no compiler where installed
    _native = None
if os.environ.get("PROFSCOPE_NATIVE") == "0":
    _native = None

XPROF_FILTER_MIN_EVENTS = 500_000  # kDisableStreamingThreshold (trace_view_options.cc)
XPROF_LEVELS_MAX = 4_000_000  # events up to which all 13 zoom levels are made at once (past it: as deep as asked)
# Past XPROF_LEVELS_MAX, the levels a window makes below those it loads: a window 1 % of
# its span (XProf's frontend zoomed in) then loads only levels made already. The C walk
# reads each row once for all the levels it makes, so two more cost little in the walk
# that runs anyway (jax308, levels 0-3 -> 0-5: 0.85 -> 0.92 CPU s), where a walk of their
# own, resumed, cost 0.6 s (the flow pre-pass and the rows' random reads again) and was
# what the first 1 % window after the whole trace's waited for (0.75 s; docs/performance.md)
LEVELS_AHEAD = 2
LAYER_RESOLUTIONS = tuple(10 ** (12 - i) for i in range(13))  # kLayerResolutions, ps
N_LEVELS = len(LAYER_RESOLUTIONS)
NOT_YET = 127  # an event not kept at any level computed so far
CHUNK = 1 << 16  # events of a row turned into Python ints at once (bounds the pass's memory)


def resolution_ps(duration_ps: int, resolution: int) -> int:
    """``TraceVisibilityFilter::ResolutionPs``: 0 (no filter) for resolution 0."""
    return 0 if resolution <= 0 else int(duration_ps / resolution + 0.5)  # llround, duration >= 0


def filters(events: int, resolution: int) -> bool:
    """Whether XProf thins an answer over ``events`` events (every selected host's) at
    ``resolution`` pixels: from ``kDisableStreamingThreshold`` events on, never at
    resolution 0 (``DoLoadFromLevelDbTable``)."""
    return resolution > 0 and events >= XPROF_FILTER_MIN_EVENTS


def levels_needed(r: int) -> int:
    """The last zoom level XProf loads for a window at ``r`` ps per pixel: levels are
    read until one's resolution is at most ``r`` (``DoLoadFromLevelDbTable``)."""
    for i, res in enumerate(LAYER_RESOLUTIONS):
        if r >= res:
            return i
    return N_LEVELS - 1


def levels_made(upto: int) -> int:
    """How deep a window loading levels down to ``upto`` makes them, past
    ``XPROF_LEVELS_MAX`` events: ``LEVELS_AHEAD`` deeper, down to the last."""
    return min(upto + LEVELS_AHEAD, N_LEVELS - 1)


# RowVisibility's stack of kept ends, kept here negated and clamped: XProf's
# ``RowVisibility::Depth`` scans its stack from the bottom for the first end at or before
# an event's start, once per event, which is quadratic when events nest deep (a 97 KB
# gzipped trace of 633,000 identical nested events, issue 32, took minutes). Each end is
# stored clamped to the one below it (``min(end, stack[depth - 1])``): the stack then never
# rises, the first end <= begin is found by binary search, and it is the same depth (a
# clamped entry is <= begin exactly when an entry at or below it is) with the same end
# (at that depth the one below is > begin >= the real end, so nothing was clamped). The
# C passes (_trace_build.c ``kept_depth``/``clamped_end``) keep it the same way. Negated,
# so that the stack is ascending, as ``bisect`` wants it.


def event_order(start: np.ndarray, dur: np.ndarray, track: np.ndarray) -> np.ndarray:
    """XProf's order of events (``TraceEventsComparator``: start, longest first, track),
    stable: what ``np.lexsort((track, -dur, start))`` gives. Rows of the index come sorted
    by start within each duration level, so a stable sort by start merges a few dozen
    sorted runs; then only the few events that share a start are sorted by the other two
    keys (a busy 1 % window of jax308, 60,000 events: 0.9 ms against the lexsort's 6)."""
    o = np.argsort(start, kind="stable")
    so = start[o]
    tied = np.zeros(len(o), bool)
    same = so[1:] == so[:-1]
    tied[1:] |= same
    tied[:-1] |= same
    if tied.any():
        t = np.flatnonzero(tied)
        sub = o[t]
        o[t] = sub[np.lexsort((track[sub], -dur[sub], so[t]))]
    return o


def _depth(neg: list, begin: int) -> int:
    """``RowVisibility::Depth``: the first kept end at or before ``begin``, over a stack of
    negated, clamped ends (:func:`_push`)."""
    if not neg or -neg[0] <= begin:
        return 0  # the common case: after every kept end
    return bisect_left(neg, -begin)


def _push(neg: list, depth: int, end: int) -> None:
    """Keep ``end`` at ``depth``: the stack truncated there, the end clamped (see above)."""
    del neg[depth:]
    neg.append(-end if not depth or -end > neg[-1] else neg[-1])


def keep_mask(start, dur, track, flow_id, flow_end, r: int) -> np.ndarray:
    """Which events ``VisibleAtResolution`` keeps, with a fresh state, for events in
    XProf's order (start, then longest first); ``flow_id`` -1 for none. In C when built
    (``_trace_build.flow_pass`` over every event at level 0), else :func:`_keep_mask_py`."""
    n = len(start)
    if _native is None or not n:
        return _keep_mask_py(start, dur, track, flow_id, flow_end, r)
    tr = np.asarray(track)
    lo, hi = (int(tr.min()), int(tr.max())) if tr.dtype.kind in "iu" else (-1, -1)
    if 0 <= lo and hi <= max(n, 1 << 16):
        # an index's own track ids (narrow, from 0): the pass keeps a state per id, so they
        # serve as they are (bounded: a state per id up to the events' count); np.unique's
        # sort of the window's loaded rows was a sixth of a busy 1 % XProf window of jax308
        ntracks, tr_dense = hi + 1, tr.astype(np.int32)
    else:
        tracks, inv = np.unique(np.asarray(tr, np.int64), return_inverse=True)
        ntracks, tr_dense = len(tracks), inv.reshape(-1).astype(np.int32)
    fid = np.asarray(flow_id, np.int64)
    bound = fid >= 0
    ids, fid_dense = np.unique(fid[bound], return_inverse=True)
    flows = np.full(n, -1, np.int32)
    flows[bound] = fid_dense.reshape(-1)
    level = np.full(n, NOT_YET, np.int8)
    _native.flow_pass(np.arange(n, dtype=np.int32), np.ascontiguousarray(start, np.int64),
                      np.ascontiguousarray(dur, np.int64), tr_dense, flows,
                      np.ascontiguousarray(flow_end, np.int8), level, ntracks, len(ids), 0, int(r))
    return level == 0


def _keep_mask_py(start, dur, track, flow_id, flow_end, r: int) -> np.ndarray:
    """:func:`keep_mask`'s Python twin."""
    start, dur, track, flow_id, flow_end = (a.tolist() if isinstance(a, np.ndarray) else a
                                            for a in (start, dur, track, flow_id, flow_end))
    rows: dict[int, list] = {}  # track -> [stack of kept ends (negated, clamped), last kept arrow end]
    flows: dict[int, bool] = {}
    keep = np.zeros(len(start), bool)
    for i, (b, d, t, fid) in enumerate(zip(start, dur, track, flow_id)):
        row = rows.get(t)
        if row is None:
            row = rows[t] = [[], None]
        stack = row[0]
        depth = _depth(stack, b)
        end = b + d
        visible = d >= r or depth >= len(stack) or b + stack[depth] >= r
        if fid >= 0:
            first = fid not in flows
            if first:
                flows[fid] = visible
            if not visible:
                if first:  # XProf's uint64 difference: an end before the last arrow's wraps around (kept)
                    last = row[1]
                    flows[fid] = last is None or end < last or end - last >= r
                visible = flows[fid]
            if flow_end[i]:
                flows.pop(fid, None)
            if visible:
                row[1] = end
        if visible:
            _push(stack, depth, end)
            keep[i] = True
    return keep


def _let_go(*cols) -> None:
    """Let the pages of memory-mapped columns (an ``np.memmap``, or a column that wraps
    one in ``col``: ``trace_index._Widened``) go from this process (``MADV_DONTNEED``):
    the page cache keeps them, and a later read maps them again. Shared maps only (mode
    ``r``, or ``r+``/``w+``, whose writes are the file's: IndexWriter.finish's raw columns;
    a private writable one, ``c``, would lose what was written); anything else: nothing."""
    for col in cols:
        col = getattr(col, "col", col)
        m = getattr(col, "_mmap", None)  # np.memmap's own mmap.mmap
        if m is not None and getattr(col, "mode", None) in ("r", "r+", "w+") and hasattr(mmap, "MADV_DONTNEED"):
            with contextlib.suppress(OSError, ValueError):
                m.madvise(mmap.MADV_DONTNEED)


def _gathered(col, rows: np.ndarray, step: int = 1 << 18) -> np.ndarray:
    """``col[rows]`` (``rows`` sorted) as an array, read ``step`` rows at a time with the
    mapped pages of ``col`` let go after each block (:func:`_let_go`): the pages a block
    read lie behind the next block's."""
    if len(rows) <= step:
        got = np.asarray(col[rows])
        _let_go(col)
        return got
    parts = []
    for a in range(0, len(rows), step):
        parts.append(np.asarray(col[rows[a:a + step]]))
        _let_go(col)
    return np.concatenate(parts)


def _dense(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)``, the inverse as int32 (numbers < 2^31: the
    flow slices are fewer), made with fewer temporaries than np.unique's (its int64
    inverse, a sorted copy beside it): ~30 MiB of the levels' worker's flow pre-pass on
    jax308's 2.4 M flow slices, its peak once the walk let its columns go. In C where it
    applies (``_trace_build.dense_numbers``, a radix sort: numpy's argsort of jax308's ids
    was ~0.25 CPU s of the first XProf window); :func:`_dense_numpy` is its twin."""
    if _native is not None and ids.dtype in (np.int64, np.uint64) and len(ids) < 2**31 - 1:
        return _native.dense_numbers(np.ascontiguousarray(ids))
    return _dense_numpy(ids)


def _dense_numpy(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_dense` by numpy's argsort."""
    perm = np.argsort(ids)  # (ties in any order: they get one number)
    srt = ids[perm]
    first = np.ones(len(srt), bool)
    np.not_equal(srt[1:], srt[:-1], out=first[1:])
    uniq = srt[first]
    del srt
    number = np.cumsum(first, dtype=np.int32)
    number -= 1
    del first
    inverse = np.empty(len(ids), np.int32)
    inverse[perm] = number
    return uniq, inverse


class ZoomLevels:
    """XProf's zoom level of every event of one index, computed level by level.

    ``start``/``dur``/``track`` are the index's columns; ``flow_rows``/``flow_ids``/
    ``flow_end`` its flow-bound slices (rows sorted); ``level`` the int8 column being
    filled (``NOT_YET`` where unknown) and ``done`` the deepest level computed.
    ``order``: the rows already in :meth:`order`'s order and each track's stretch of it
    (the index build's, ``trace_index.XPROF_ORDER_FILE``), or None to sort them here.
    ``dur``: the durations as the rule sees them, or a function making them (of every
    row, or of the rows given); ``raw``: (the index's own duration column, whether the
    rule reads its 1 ps as 0), what the C pass reads in place of a copy. ``flow_dense``:
    each flow slice's flow numbered by its id's rank among the distinct ids (the build's,
    ``trace_index.FLOW_DENSE_FILE``), or None to number them here."""

    def __init__(self, start, dur, track, flow_rows, flow_ids, flow_end, level: np.ndarray, done: int,
                 order: tuple[np.ndarray, np.ndarray] | None = None, raw: tuple[np.ndarray, bool] | None = None,
                 flow_dense: np.ndarray | None = None):
        self.start, self.track = start, track
        self._dur = dur  # the durations, or a function making them (run only if a level is computed)
        self._rule = dur if callable(dur) else None
        self._raw = raw
        self.flow_rows, self.flow_ids, self.flow_end = flow_rows, flow_ids, flow_end
        self.flow_dense = flow_dense
        self.level = level
        self.done = done
        self._order, self._track_bounds = order if order is not None else (None, None)
        # where the flow pre-pass keeps each flow slice (its own levels: it runs the
        # rule over the flow slices alone), recomputed from level 0 when first needed
        self._flow_level: np.ndarray | None = None
        self._flow_done = -1
        self._flow_of: np.ndarray | None = None  # per row, its flow id or -1
        self._flow_seq: tuple | None = None
        self._flow_dense: tuple | None = None  # the same for the C pass
        self._flow_positions: np.ndarray | None = None  # the flow slices in that order
        self._flow_got: np.ndarray | None = None  # its last answer, per flow as numbered there

    @property
    def dur(self) -> np.ndarray:
        if callable(self._dur):
            self._dur = self._dur()
        return self._dur

    def state(self) -> dict:
        """What a later :meth:`compute` resumes from (:meth:`resumed`): the levels, the flow
        pre-pass's own levels and how deep each is done. The pre-pass keeps its slices at
        its own levels (it runs the rule over the flow slices alone), so it is state too."""
        flow = self._flow_level if self._flow_level is not None else np.full(len(self.flow_rows), NOT_YET, np.int8)
        return {"level": self.level, "flow_level": flow, "done": self.done, "flow_done": self._flow_done}

    def resumed(self, flow_level: np.ndarray, flow_done: int) -> "ZoomLevels":
        """This object continuing from a kept :meth:`state` (``level``/``done`` given to
        the constructor)."""
        self._flow_level = np.array(flow_level, np.int8)  # a writable copy
        self._flow_done = flow_done
        return self

    def order(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows by (track, start, longest first), ties by row: XProf's order within a row;
        and the bounds of each track's stretch of it."""
        if self._order is None:  # the 13.6 M rows of jax308: 2.7 s (what the build's saved order spares)
            self._order = np.lexsort((-np.asarray(self.dur), np.asarray(self.start), np.asarray(self.track)))
        if self._track_bounds is None:
            tr_sorted = np.asarray(self.track)[self._order]
            inner = np.flatnonzero(np.diff(tr_sorted)) + 1
            self._track_bounds = np.concatenate([[0], inner, [len(self._order)]]).astype(np.int64)
        return self._order, self._track_bounds

    def compute(self, upto: int) -> None:
        ks = list(range(self.done + 1, min(upto, N_LEVELS - 2) + 1))
        if _native is not None and len(ks) > 1:
            self._levels_native(ks)
        for k in ks[ks.index(self.done) + 1 if self.done in ks else 0:]:
            self._level(k)
            self.done = k
        if upto >= N_LEVELS - 1 and self.done < N_LEVELS - 1:
            self.level[self.level == NOT_YET] = N_LEVELS - 1  # the catch-all level
            self.done = N_LEVELS - 1

    def _flow_visibility(self, k: int, r: int):
        """``CalculateFlowVisibilityLite`` at level ``k``: per flow id, whether its first
        slice (in XProf's global order) is kept; slices kept at a coarser level count as
        kept (``SetVisibleAtResolution``). A dict; from the C pass, the visible flow ids
        as a sorted array (a million-flow dict per level cost more than the pass)."""
        fr = self.flow_rows
        if not len(fr):
            return {} if _native is None else np.zeros(0, np.int64)
        if self._flow_level is None:
            self._flow_level = np.full(len(fr), NOT_YET, np.int8)
        while self._flow_done < k - 1:  # the pre-pass's coarser levels first
            self._flow_done += 1
            self._flow_pass(self._flow_done, LAYER_RESOLUTIONS[self._flow_done])
        self._flow_done = k
        return self._flow_pass(k, r)

    def _flow_order(self) -> tuple:
        """The flow slices in XProf's global order (start, longest first, track): their
        positions, starts, durations, tracks, flow ids and whether each ends its flow."""
        fr = self.flow_rows
        # the flow slices lie all over the index: read whole, they mapped in nearly every
        # page of the start, duration and track columns at once (170 MiB on jax308, the
        # levels' worker's peak beside this pre-pass's temporaries); the rows are sorted,
        # so read a block at a time, each block's pages let go after it (_gathered)
        if self._raw is not None and self._rule is not None and not isinstance(self._dur, np.ndarray):
            du = self._rule(_gathered(self._raw[0], fr))  # the flow slices' alone, not every row's
        else:
            du = _gathered(self.dur, fr)
        st, tr = _gathered(self.start, fr), _gathered(self.track, fr)
        o = event_order(st, du, tr)
        self._flow_positions = o  # (for the dense numbers: _flow_pass_native)
        # reordered one column at a time, each let go as its reordered copy is made: all
        # at once held both (jax308's 2.4 M flow slices: ~55 MiB more at the pre-pass's peak)
        st = st[o]
        du = du[o]
        tr = tr[o]
        return o, st, du, tr, self.flow_ids[o], self.flow_end[o]

    def _flow_pass(self, k: int, r: int) -> dict[int, bool]:
        if _native is not None:
            return self._flow_pass_native(k, r)
        if self._flow_seq is None:  # once, as Python ints
            self._flow_seq = tuple(a.tolist() for a in self._flow_order())
        rows: dict[int, list] = {}
        flows: dict[int, bool] = {}  # TraceViewerVisibility::flows_ of this level
        out: dict[int, bool] = {}
        lv = self._flow_level
        for i, b, d, t, fid, end_flow in zip(*self._flow_seq):
            row = rows.get(t)
            if row is None:
                row = rows[t] = [[], None]
            stack = row[0]  # negated, clamped ends (_push)
            n = len(stack)
            depth = _depth(stack, b)  # few flow slices: a call is cheap here
            if lv[i] < k:  # SetVisibleAtResolution
                if end_flow:
                    flows.pop(fid, None)
                else:
                    flows.setdefault(fid, True)
                visible = True
                out.setdefault(fid, True)
            else:
                visible = d >= r or depth >= n or b + stack[depth] >= r
                first = fid not in flows
                if first:
                    flows[fid] = visible
                if not visible:
                    if first:  # (uint64 in XProf: an end before the last arrow's wraps around)
                        flows[fid] = row[1] is None or b + d < row[1] or b + d - row[1] >= r
                    visible = flows[fid]
                if end_flow:
                    flows.pop(fid, None)
                if visible:
                    lv[i] = k
                out.setdefault(fid, visible)
            if visible:
                row[1] = b + d
                _push(stack, depth, b + d)
        return out

    def _flow_pass_native(self, k: int, r: int) -> np.ndarray:
        """:meth:`_flow_pass` by the C pass, over the same order with flow ids numbered
        densely (tracks are already: the index's track ids); the visible flow ids, sorted."""
        if self._flow_dense is None:
            # positions, tracks and dense flow numbers as int32 (the C pass's types): kept
            # for every later level, they were int64 (jax308's 2.4 M flow slices: 29 MB)
            o, st, du, tr, fid, end = self._flow_order()
            o = o.astype(np.int32)  # (the int64 one: _flow_positions, let go once numbered)
            tr = np.asarray(tr)
            if len(tr) and int(tr.min()) < 0:  # (an index the numpy path built may hold unknown tracks)
                tr = np.unique(tr, return_inverse=True)[1].reshape(-1)
            tr = tr.astype(np.int32)
            ids, fid = self._dense_ids(fid)
            self._flow_positions = None  # (read by _dense_ids alone: 19 MiB of int64 held through the walk on jax308)
            self._flow_dense = (o, np.asarray(st, np.int64), np.asarray(du, np.int64), tr, fid,
                                np.asarray(end, np.int8), int(tr.max()) + 1 if len(tr) else 0, ids)
        o, st, du, tr, fid, end, ntracks, ids = self._flow_dense
        got = _native.flow_pass(o, st, du, tr, fid, end, self._flow_level, ntracks, len(ids), k, r)
        self._flow_got = got  # per flow as numbered densely: for _levels_native
        return ids[got == 1]  # ids from np.unique: sorted

    def _dense_ids(self, fid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``np.unique(fid, return_inverse=True)`` of the flow ids in the pre-pass's order
        (``fid``, int64): the distinct ids sorted and each slice's rank among them, as
        int32. From the build's numbering where there is one (a sort of 2.4 M ids saved on
        jax308) and the ids sort the same as int64 as they did as uint64 there, else by
        :func:`_dense`."""
        dense, self.flow_dense = self.flow_dense, None  # (read once: its map let go after)
        if dense is not None and len(dense) == len(fid):
            ids = np.empty(int(dense.max()) + 1 if len(dense) else 0, np.int64)
            ids[dense] = self.flow_ids
            if not len(ids) or bool(np.all(ids[1:] > ids[:-1])):
                return ids, np.asarray(dense[self._flow_positions])
        return _dense(np.asarray(fid, np.int64))

    def _levels_native(self, ks: list[int]) -> None:
        """:meth:`_level` for each level of ``ks`` (consecutive) by one C walk of the rows
        (``_trace_build.zoom_levels``), which reads each row's start and duration once for
        all of them: the walk is by track and start, the columns by duration level and
        start, so those reads are random, and were most of jax308's first window's levels
        0-3 (13.6 M rows, 0.9 of 1.1 CPU s) when made level by level. The durations are
        read as the index stores them (uint32 and a tail: ``trace_index._Widened``) and
        each row's flow from the flow rows, not from whole-trace int64 copies (the two
        were 218 MB of the levels' worker's 685 MiB peak on jax308). Leaves ``done`` as it
        is where :meth:`_level` would have every row kept at the first level alone."""
        r0 = LAYER_RESOLUTIONS[ks[0]]
        dur, one_is_zero = self._raw if self._raw is not None else (self.dur, False)
        narrow = getattr(dur, "col", None)  # trace_index._Widened: uint32 and its tail
        if narrow is not None and narrow.dtype == np.uint32:
            tail = dur.tail if dur.tail is not None else np.zeros(0, np.int64)
            # (the tail's rows read 0 in ``narrow``: at worst the shortcut is not taken)
            short = narrow < r0
            dur = narrow
        else:
            dur = np.ascontiguousarray(dur, np.int64)
            tail = np.zeros(0, np.int64)
            short = dur < r0
        short &= self.level == NOT_YET
        if not short.any():
            return  # _level's shortcut (every row left kept at ks[0]), taken there
        del short
        order, bounds = self.order()
        if not len(order):
            return
        # each level's visible flows as a byte per flow, the flows numbered as the flow
        # pre-pass numbers them (_flow_pass_native), each flow row's number by its place
        visible, dense = [], np.zeros(0, np.int32)
        for k in ks:
            self._flow_got = None
            self._flow_visibility(k, LAYER_RESOLUTIONS[k])
            visible.append(np.zeros(0, np.uint8) if self._flow_got is None else (self._flow_got == 1).view(np.uint8))
        if self._flow_dense is not None:
            o, fid = self._flow_dense[0], self._flow_dense[4]
            dense = np.empty(len(o), np.int32)
            dense[o] = fid
            # not needed by the walk (jax308: 89 MB beside its mapped columns, its peak);
            # a deeper level computed later by this object makes it again
            self._flow_dense = None
            del o, fid
        if order.dtype != np.int32:
            order = np.ascontiguousarray(order, np.int64)
        heap.give_back()  # what the flow pre-pass freed, before the walk that sets the peak
        # the walk lets the mapped order, starts and durations go every 2^20 rows: it read
        # nearly all of them at once before (jax308: ~200 MiB of its worker's 362 MiB peak)
        maps = (order, self.start, dur)
        _native.zoom_levels(order, bounds, np.ascontiguousarray(self.start, np.int64), dur,
                            np.ascontiguousarray(tail, np.int64), self.level,
                            np.ascontiguousarray(self.flow_rows, np.int64), dense,
                            tuple(visible), ks[0], tuple(LAYER_RESOLUTIONS[k] for k in ks), one_is_zero,
                            lambda: _let_go(*maps))
        _let_go(*maps)
        self.done = ks[-1]

    def _level(self, k: int) -> None:
        """One level: which events not kept at a coarser level are kept here
        (``ProcessTrackEventsParallelLite``)."""
        r = LAYER_RESOLUTIONS[k]
        lv = self.level
        if self._raw is not None and not isinstance(self._raw[0], np.ndarray):
            # a duration column stored narrow (trace_index._Widened): widened once for the
            # passes over every row, not once per level
            self._raw = (np.asarray(self._raw[0], np.int64), self._raw[1])
        flow_vis = self._flow_visibility(k, r)
        pending = lv == NOT_YET
        # (the index's own durations will do here: they differ from the rule's at 1 ps
        # only, and r is at least 10 ps at a level made by a pass)
        dur = self._raw[0] if self._raw is not None and _native is not None else self.dur
        if not (pending & (np.asarray(dur) < r)).any():
            lv[pending] = k  # everything left is at least r long: all kept here
            return
        if self._flow_of is None:
            self._flow_of = np.full(len(lv), -1, np.int64)
            self._flow_of[self.flow_rows] = self.flow_ids
        order, bounds = self.order()
        if _native is not None and len(order):
            visible = flow_vis  # sorted ids (_flow_pass_native)
            if order.dtype != np.int32:
                order = np.ascontiguousarray(order, np.int64)
            dur, one_is_zero = self._raw if self._raw is not None else (self.dur, False)
            _native.zoom_level(order, bounds, np.ascontiguousarray(self.start, np.int64),
                               np.ascontiguousarray(dur, np.int64), lv, self._flow_of, visible, k, r, one_is_zero)
            return
        for seg in np.split(order, bounds[1:-1]):
            if not pending[seg].any():
                continue
            stack: list[int] = []  # the row's state (negated, clamped ends: _push), across its chunks
            for c0 in range(0, len(seg), CHUNK):  # Python ints for one chunk at a time
                part = seg[c0:c0 + CHUNK]
                kept = []
                # the loop inlines _depth and _push: most events start after every kept
                # end (depth 0), and a call per event costs more than the rule
                for row, b, d, l_, fid in zip(part.tolist(), np.asarray(self.start[part]).tolist(),
                                              np.asarray(self.dur[part]).tolist(), lv[part].tolist(),
                                              self._flow_of[part].tolist()):
                    n = len(stack)
                    depth = 0 if n == 0 or -stack[0] <= b else bisect_left(stack, -b)
                    if l_ < k:  # kept at a coarser level: kept here too
                        pass
                    elif fid >= 0:  # a flow's slice: kept with its flow, or if long enough
                        if not (flow_vis.get(fid, False) or d >= r):
                            continue
                        kept.append(row)
                    elif d >= r or depth >= n or b + stack[depth] >= r:
                        kept.append(row)
                    else:
                        continue
                    del stack[depth:]
                    stack.append(-(b + d) if not depth or -(b + d) > stack[-1] else stack[-1])
                if kept:
                    lv[np.asarray(kept, np.int64)] = k
