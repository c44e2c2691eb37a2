"""The trace viewer's index: an on-disk, multi-resolution index of trace events, built once
per input file, and the row queries the views (tools/trace_viewer.py, trace_xprof.py,
trace_export.py) are made of.

Index (one folder per input file, written once by :func:`build_index`)
----------------------------------------------------------------------
Every slice becomes one row of fixed-width numpy columns (``np.save``, read back with
``mmap_mode="r"``), so a query touches only the pages it needs and never the raw file:

* ``start`` (int64 ps from the trace's first event), ``dur`` (int64 ps), ``track``
  (int32), ``depth`` (int16: nesting on its track, computed here), ``name`` (int32 into
  the string table), ``aoff``/``alen`` (the event's argument bytes: the raw ``XEvent``
  or its JSON ``args``, decoded only for one event's details). They are in ``args.bin``,
  or, for a plain local xplane, in the profile itself (``meta.json``'s ``source`` and
  ``args_segments``): its planes' bytes are read back from it rather than copied.
* Rows are grouped into duration *levels*: level k holds ``dur`` in ``[2^k, 2^(k+1))`` ps
  (0 and 1 ps in level 0), each level sorted by start. Everything overlapping ``[s, e)``
  at level k starts in ``(s - 2^(k+1), e)``: one binary search per level finds every
  overlapping event of that level exactly, however long (so events spanning the whole
  window are always found).
* Zoomed out, the short levels would hold millions of events in the window, most of them
  narrower than a pixel. Like XProf's visibility filter
  (``xprof/convert/trace_viewer/trace_viewer_visibility.cc``: per row, an event shorter
  than a pixel is dropped when the previous visible one on that row ends in the same
  pixel), a *tier* per bin width ``2^z`` ps (z = 10, 12, ...) keeps, of the events shorter
  than ``2^z``, the first one in every (track, depth, bin): a sample with at most one event
  per bin per row, sorted by start. A query at ``p`` ps per pixel takes the levels
  ``>= z`` exactly and the tier ``z`` (the largest stored with ``2^z <= p``) for the rest,
  then keeps at most one sub-pixel event per (track, depth, pixel). So a window costs
  about 2 binary searches per level plus work proportional to what it returns.
  Tiers that would not thin out the events (more than 70 % kept) are not stored.
* ``meta.json``: tracks, processes, the string table, steps, counters (their series in
  ``counter_<i>_t.npy`` / ``_v.npy``), the time origin (absolute ps, a Python int) and the
  planes' metadata for decoding xplane args (``plane_<i>.pb``).

Decoding an event's arguments
-----------------------------
A Chrome trace's are JSON, read here. An xplane's are the raw ``XEvent`` bytes, which
only the xplane reader knows how to decode: the app hands a :class:`XEventDecoder` (its
``plane_metadata`` / ``event_args``) to :class:`TraceIndex` (through :class:`IndexCache`),
so no tool imports a format.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from profscope.errors import BadInput, NotFound
from profscope.forksafe import renew_locks_after_fork
from profscope.model import npy_files as npy
from profscope.model.trace import FLOW_END, FLOW_MID, FLOW_START, FlowEvents, FlowPoints, TraceEvents
from profscope.tools import trace_visibility as tv

try:  # the build's linear passes in C (setup.py builds it; absent: the numpy path below)
    from profscope.tools import _trace_build as _native
except ImportError:  # pragma: no cover - no compiler where installed
    _native = None
if os.environ.get("PROFSCOPE_NATIVE") == "0":
    _native = None

INDEX_VERSION = 12  # 2: crossing events stacked (depths never overlap); 3: flows; 4: flow-bound slices; 5: derived lines, events per track; 6: narrower tier columns; 7: args read from the profile; 8: Chrome-trace flows bound to slices; 9: XProf's counter series; 10: tiers as row ids, XProf's row order saved; 11: tiers made on a window's first need after a Steps & ops build (meta "tiers" null); 12: columns as narrow as they fit, durations uint32 plus a tail, flow arrows as rows
FLOW_SHORT_PS = 10**10  # arrows spanning at most 10 ms are found by binary search
ZOOM_LEVELS_FILE = "xlevel.npy"  # write_zoom_levels' one file: XProf's zoom level per row (int8)
ZOOM_FLOW_FILE = "xflow.npy"  # with levels made down to a depth only: the flow pre-pass's own levels
ZOOM_STATE_FILE = "xstate.json"  # ... and how deep both are done
# the rows by (track, start, longest first; int32), the build's nesting pass's order: XProf's
# zoom levels walk them (trace_visibility.ZoomLevels.order) instead of sorting the whole
# trace again, and tiers made after the build (write_tiers) walk them as the build does.
# Absent from an index the numpy path built.
XPROF_ORDER_FILE = "xorder.npy"
# where XProf's rule orders them otherwise (_zero_length_ties): positions and index rows
XPROF_TIES_FILE = "xorder_ties.npy"
TIERS_FILE = "tiers.json"  # write_tiers' list of the tiers it made (a folder of its own)
LEVELS = 64
TIER_MIN_Z = 10  # 1 ns bins
TIER_STEP = 2
TIER_KEEP_MAX = 0.7
PREVIEW_MAX_SHARE = 0.25  # a preview holding more of the events is hardly quicker than the index
MAX_DUR_PS = 1 << 60  # 13 days; longer durations (corrupt input) are capped
_COLS = ("start", "dur", "track", "depth", "name", "aoff", "alen")
# Stored as narrow as the values fit (issue 40: the index on disk <= 1.5x the file), each the
# first of its list that holds every value: aoff and alen, read only for one event's
# details, as they are stored; track, name and depth widened on read (_Widened) to the
# dtype every reader expects (``_WIDE``), so no reader's arithmetic can overflow. jax308
# (13.6 M events, 6 tracks, 45,056 names, depth <= 27, args <= 82 bytes): 192 -> 55 MB.
_NARROW = {"aoff": (np.uint32,), "alen": (np.uint8, np.uint16), "track": (np.uint8, np.uint16),
           "name": (np.uint16,), "depth": (np.int8,)}
_WIDE = {"track": np.int32, "name": np.int32, "depth": np.int16, "dur": np.int64}
# Durations as uint32 for the rows of duration levels below DUR_TAIL_LEVEL (each level's
# durations are < 2^(level + 1) ps, so < 2^32 there; rows sorted by level, so one stretch);
# the longer levels' rows (>= 4.3 ms: 66 of jax308's 13.6 M) also as int64 in DUR_TAIL_FILE.
DUR_TAIL_LEVEL = 32
DUR_TAIL_FILE = "dur_tail.npy"
FLOW_ARROWS_FILE = "flow_arrows.npy"  # the flow-bound slices' arrows as (label, from row, to row)
# each flow slice's flow numbered by the rank of its id among the sorted distinct ids
# (np.unique's inverse), as the zoom levels' flow pre-pass reads them (an xplane's index)
FLOW_DENSE_FILE = "flow_dense.npy"
_FLOW_DTYPES = (("seq", np.int64), ("flow_id", np.uint64), ("kind", np.int8), ("category", np.int32))
SHIFT_CLIP_ROWS = 1 << 21  # the first pass's block: 40 MiB of the three raw columns at a time
FENCE = 1024  # every FENCE-th start is kept in memory: binary searches touch ~2 pages
_WIN_COLS = ("start", "dur", "track", "depth", "name")
MODULE_ID = re.compile(r"\((\d+)\)$")  # jit_train_step(42): XProf's module names


class XEventDecoder(Protocol):
    """How an xplane index's event arguments are decoded (formats/xplane_trace.py's
    functions of these names: the app passes that module)."""

    def plane_metadata(self, meta_bytes: bytes) -> Any:
        """What :meth:`event_args` needs of a plane, from its serialized XPlane without
        lines (``plane_<i>.pb``); decoded once per plane and index."""

    def event_args(self, event_bytes: bytes, plane_meta: Any) -> dict:
        """One XEvent's arguments as XProf's trace viewer shows them."""


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------


_RAW = (("track", np.int32), ("start", np.int64), ("dur", np.int64), ("name", np.int32), ("aoff", np.int64),
        ("alen", np.int32))


# IndexWriter.flow_events' spill files (FlowEvents' columns and dtypes), in the index
# folder until finish reads them back
FLOW_SPILL = (("flowspill_seq", np.int64), ("flowspill_flow_id", np.uint64), ("flowspill_kind", np.int8),
              ("flowspill_category", np.int32))


class IndexWriter:
    """A sink for the trace readers (``events`` chunks, ``blob`` buffers) that writes
    them straight to disk, so a conversion never holds every event in memory; then
    :meth:`finish` sorts them into the index. ``build_index`` does the same for columns
    already in memory."""

    def __init__(self, folder: Path | str, source: str | None = None):
        """``source``: the path of the plain local file being read, when the reader's blobs
        may be its own bytes (:meth:`blob`'s ``source_offset``): those are then read back
        from it, not copied into ``args.bin`` (a copy the size of the profile)."""
        self.folder = Path(folder)
        self.source = source
        self.n = 0
        self.blob_bytes = 0
        self._args_bytes = 0
        # where each blob's bytes are: [first arg offset, 0 (args.bin) | 1 (source), offset there]
        self._segments: list[list[int]] = []
        # open for the whole conversion (chunks arrive one by one); closed by close()
        self._raw = {k: open(self.folder / f"{k}.raw", "wb") for k, _ in _RAW}  # noqa: SIM115
        self._args = open(self.folder / "args.bin", "wb")  # noqa: SIM115
        # the flow-bound slices (few calls: one per read) go to FLOW_SPILL files, not memory:
        # jax308's 2.4 M (50 MB) were held from the decode's end through the whole build
        self._flows_spilled = False
        # the line ranges' sorted runs (sorted_run): (first row, rows, RUN_FILES' paths here)
        self._runs: list[tuple[int, int, dict[str, Path]]] = []
        self._ranges = 0  # line ranges merged (events_files)
        self._taken: list[tuple[int, int, dict[str, Path]]] = []  # their column files: (first row, rows, paths)
        # where work of finish's that can run beside it goes once the rows came in line
        # ranges (the app's ClusterRanges.submit: a task on the Dask cluster): called as
        # elsewhere(fn, *args), answers an object whose result() is fn(*args); None: here
        self.elsewhere = None

    def events(self, track, start, dur, name, off, length) -> None:
        for (k, dtype), col in zip(_RAW, (track, start, dur, name, off, length)):
            # the array's own bytes: tobytes() copied each chunk's column first
            self._raw[k].write(memoryview(np.ascontiguousarray(col, dtype=dtype)).cast("B"))
        self.n += len(start)

    def blob(self, buf, source_offset: int | None = None) -> None:
        if source_offset is not None and self.source is not None:
            self._segments.append([self.blob_bytes, 1, int(source_offset)])
        else:
            self._segments.append([self.blob_bytes, 0, self._args_bytes])
            self._args.write(buf)
            self._args_bytes += len(buf)
        self.blob_bytes += len(buf)

    def flow_events(self, seq, flow_id, kind, category) -> None:
        """Slices bound to flows (:class:`FlowEvents`; ``seq`` counts the slices handed
        to :meth:`events`, from 0)."""
        for (k, dtype), col in zip(FLOW_SPILL, (seq, flow_id, kind, category)):
            with open(self.folder / f"{k}.raw", "ab") as f:  # (appended: the file is the calls' concatenation)
                f.write(memoryview(np.ascontiguousarray(col, dtype)).cast("B"))
        self._flows_spilled = True

    def _spilled_flows(self, seq: bool = True) -> list[FlowEvents]:
        """What :meth:`flow_events` wrote, read back (as one FlowEvents) and removed;
        ``seq=False``: its ``seq`` column neither read nor removed (an empty one in its place:
        :meth:`_flow_seq` read it)."""
        if not self._flows_spilled:
            return []
        cols = []
        for k, dtype in FLOW_SPILL:
            path = self.folder / f"{k}.raw"
            if k == "flowspill_seq" and not seq:
                cols.append(np.zeros(0, dtype))
                continue
            cols.append(np.fromfile(path, dtype))
            path.unlink()
        self._flows_spilled = False
        return [FlowEvents(*cols)]

    def events_files(self, files: dict[str, str], n: int) -> None:
        """``n`` slices already written as one raw file per column (``_RAW``'s names and
        dtypes): a plane's line range another process decoded (formats/xplane_line_ranges.py).
        The files are taken as they are (renamed into this folder: :meth:`_load` reads them
        in row order between this writer's own rows), not copied: appending them to the
        writer's files (``copy_file_range``) cost the merging build ~0.2 s of system time
        on jax308; copied only where they cannot be renamed here (another file system).
        With ``RUN_FILES`` among ``files`` (the range sorted its rows: :func:`sorted_run`)
        those are kept too, until :meth:`finish` merges them (a range without them is
        sorted there with the rows decoded here)."""
        with contextlib.suppress(OSError):
            if all(k in files for k, _ in RUN_FILES):
                kept = {k: self.folder / f"{k}_{len(self._runs)}.raw" for k, _ in RUN_FILES}
                for k, path in kept.items():
                    os.replace(files[k], path)
                self._runs.append((self.n, n, kept))
        self._ranges += 1
        try:
            taken = {k: self.folder / f"{k}.raw.{len(self._taken)}" for k, _ in _RAW}
            for k, path in taken.items():
                os.replace(files[k], path)
            self._taken.append((self.n, n, taken))
        except OSError:
            for k, _ in _RAW:
                self._append_copy(k, files[k])
        self.n += n

    def _append_copy(self, k: str, path: str) -> None:
        """A column file appended to this writer's own by the kernel (``copy_file_range``)."""
        out = self._raw[k]
        out.flush()
        with open(path, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            done = 0
            while done < size:
                step = os.copy_file_range(src.fileno(), out.fileno(), size - done)
                if not step:
                    raise OSError(f"{path}: copied {done} of {size} bytes")
                done += step
        out.seek(0, os.SEEK_END)
        os.unlink(path)

    def _load(self, k: str, keep: bool = False) -> np.ndarray:
        dtype = np.dtype(dict(_RAW)[k])
        path = self.folder / f"{k}.raw"
        if not self._taken:
            col = np.fromfile(path, dtype=dtype) if self.n else np.zeros(0, dtype)
        else:  # the writer's own rows and the line ranges' files taken as they were, in row order
            col = np.empty(self.n, dtype)
            buf, at = memoryview(col).cast("B"), 0
            with open(path, "rb", buffering=0) as own:
                for row0, m, taken in [*self._taken, (self.n, 0, None)]:
                    _read_into(own, buf[at * dtype.itemsize:row0 * dtype.itemsize])
                    if taken is not None:
                        with open(taken[k], "rb", buffering=0) as f:
                            _read_into(f, buf[row0 * dtype.itemsize:(row0 + m) * dtype.itemsize])
                    at = row0 + m
        if not keep:
            path.unlink()
            for _, _, taken in self._taken:
                taken[k].unlink()
        return col

    def _runs_mergeable(self, start: np.ndarray) -> bool:
        """Whether :func:`merge_runs` gives the order of the rows with these (shifted)
        starts: int32 rows, and no shifted start wrapped (the runs were sorted unshifted)."""
        return 0 < self.n < 2**31 - 1 and int(start.min()) >= 0

    def _sorted_runs(self, start: np.ndarray, dur: np.ndarray, shift: int) -> list:
        """:func:`merge_runs`' runs: the line ranges' (their files mapped, and removed), and
        the rows between them (decoded here: other planes) sorted here as runs of their own
        (``start`` shifted and ``dur`` clipped by the first pass)."""
        runs, at = [], 0
        for row0, m, files in [*self._runs, (self.n, 0, None)]:
            if row0 > at:
                o, _, b, st = _sorted_levels(start[at:row0], _level(dur[at:row0]))
                runs.append((o, st + np.int64(shift), b))  # merge_runs shifts every run's starts
            if files is not None:  # mapped: read once by the merge (a read into fresh memory cost
                # more system time than the merge itself: 0.43 s for jax308's 163 MB)
                runs.append(tuple(_run_file(files[k], dtype) for k, dtype in RUN_FILES))
            at = row0 + m
        self._drop_runs()
        return runs

    def _drop_runs(self) -> None:  # (a mapped file stays readable until its map is let go)
        for _, _, files in self._runs:
            for path in files.values():
                path.unlink(missing_ok=True)
        self._runs = []

    def _raw_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The start, duration and track columns :meth:`finish` reads. Memory-mapped from
        their raw files where the C passes read them (one file per column: no line range's
        files taken beside it), shared so that the first pass's shift and clip are written
        to the page cache: each step then lets the pages it read go (``tv._let_go``) and
        the build never holds the three whole (261 MiB of fresh memory on jax308's 13.7 M
        events, held through the nesting pass: issue 40's peak). The durations and tracks
        stay on disk for the gathers (read again there: the durations clipped already,
        which their clip leaves as they are). Otherwise read into memory, as before."""
        if _native is None or self._taken or not 0 < self.n < 2**31 - 1:
            return self._load("start"), self._load("dur", keep=True), self._load("track", keep=True)
        cols = []
        for k, mode in (("start", "r+"), ("dur", "r+"), ("track", "r")):
            path = self.folder / f"{k}.raw"
            cols.append(np.memmap(path, dict(_RAW)[k], mode, shape=(self.n,)))
        (self.folder / "start.raw").unlink()  # (its map keeps it readable until let go)
        return tuple(cols)

    def close(self) -> None:
        for f in self._raw.values():
            f.close()
        self._args.close()

    def finish(self, ev: TraceEvents, progress=None, preview: tuple[Path, int] | None = None,
               known: tuple | None = None, windows: bool = True) -> dict:
        """Sort what was written into the index. ``preview`` (folder, resolution): first
        publish there, once the events are nested, the small index of what a whole-trace
        window at that resolution shows (:meth:`_write_preview`). ``known``: (depth,
        max_depth, events per track, slice span, end) taken as given, not computed (the
        preview's, which are the whole trace's). ``windows=False``: the resolution tiers,
        which only the page's windows read, are not made (meta ``tiers`` null): the first
        window has :func:`write_tiers` make them (Steps & ops' build reads the columns only)."""
        self.close()
        _release_freed_memory()
        out = self.folder
        n = self.n
        for i, pb in enumerate(ev.planes):
            (out / f"plane_{i}.pb").write_bytes(bytes(pb))
        _report(progress, 0.0, f"indexing {n:,} events")
        # The raw columns stay on disk until they are written sorted: what is not needed
        # for a step is read again rather than held (the build's peak is these columns).
        start, dur, track = self._raw_columns()
        first = _let_go_after(start, int(start.min())) if n else 0
        starts = [first] if n else []
        starts += [int(c.t_ps[0]) for c in ev.counters if len(c.t_ps)]
        shift = min(starts) if starts else 0
        end_ps, per_track, clipped = _shift_clip(start, dur, track, shift, len(ev.tracks), known is None)
        # XProf's trace span (its ``fullTimespan``, the bounds a window is clamped to)
        # is that of the slices: counters and allocator events are not in its answer
        slice_span = [first - shift, end_ps] if n else [0, 0]  # (_shift_clip shifted every start)
        for c in ev.counters:
            if len(c.t_ps):
                end_ps = max(end_ps, int(c.t_ps[-1] - shift))
        _report(progress, 0.1, "nesting events per thread")
        if known is None:
            depth, max_depth, by_track = _nest(track, start, dur, len(ev.tracks))
        else:
            depth, max_depth, per_track, slice_span, end_ps = known
            by_track = None
        ties = _zero_length_ties(by_track[0], track, start, dur) if by_track is not None and ev.args_kind != "json" else None
        tv._let_go(start, dur, track)
        track = track if preview is not None else None  # (read again from its file: 52 MiB less from here on jax308)
        # the line ranges' processes sorted their own rows (sorted_run): merged here, not
        # sorted again (but for a preview, which wants the levels in row order)
        runs = self._sorted_runs(start, dur, shift) \
            if self._runs and preview is None and self._runs_mergeable(start) else None
        level = _let_go_after(dur, _level(dur)) if runs is None else None
        if preview is not None and by_track is not None:
            _report(progress, 0.3, "publishing a preview of the whole trace")
            self._write_preview(preview, ev, (start, dur, track, depth, level), by_track, max_depth, per_track,
                                (slice_span, end_ps), shift)
        del track, dur
        if by_track is not None:  # on disk through the level sort, its peak (78 MiB on jax308)
            depth, by_track = _spill(out / "depth.spill", depth), (_spill(out / "order.spill", by_track[0]), by_track[1])
        _report(progress, 0.35, "sorting events into duration levels")
        if runs is None:  # (the sorted starts go straight to start.npy; the rows' levels let go first)
            leveled, level = _level_order(level, False), None
            order, level, bounds, _ = _sorted_levels(_in_memory(start), leveled, out)
            del leveled  # (``order`` is its sorted order, in place: 52 MiB held through the flows and tiers)
            self._drop_runs()
        else:  # (merged once the raw columns above are let go: the build's peak stays theirs)
            order, level, bounds, start_sorted = merge_runs(runs, shift)
            _save_starts(out, start_sorted)
            del start_sorted
        del start, runs
        # each reader row's index row: for the flows and the saved row order, made before
        # the columns are gathered so that the nesting pass's order, this and the reader's
        # depths are let go first (137 MB on jax308, held through the gathers and the
        # tiers before): the tiers walk the saved order instead, as write_tiers does
        rank = _inverse(order)
        track_bounds = None
        if by_track is not None:
            _save_xprof_order(out, rank, by_track[0], ties)
            track_bounds = by_track[1]
        del by_track, ties
        flow_seq = [self._flow_seq(ev, rank)]  # (the flow slices' other columns stay on disk through the gathers)
        del rank
        _release_freed_memory()  # the sorts' small temporaries' heap, before the gathers' peak
        # the tiers read the starts saved (mapped: page-cache pages, not fresh ones)
        kept, cols = {"start": _mapped(out / "start.npy")}, {"depth": depth}
        del depth
        later = None
        for k in ("track", "depth", "dur", "name", "aoff", "alen"):  # sorted track and depth kept for the tiers
            col = _save_in_order(out, k, cols.pop(k) if k in cols else self._load(k), order, bounds,
                                 clip=clipped, keep=k in ("track", "depth"))
            if col is not None:  # (the file just saved, mapped: read by the tiers only, its pages let go there)
                kept[k] = _mapped(out / f"{k}.npy")
            del col
            if k == "depth" and windows and track_bounds is not None and self.elsewhere is not None and self._ranges:
                # a big host cut in line ranges on a cluster: another worker makes its tiers
                # from the columns saved so far while this one saves the rest and the flows
                later = self.elsewhere(tiers_of_saved, str(out), bounds, max_depth, track_bounds)
                kept.clear()
        del order
        # the flows before the tiers (every column they read is saved): their rows (50 MB
        # on jax308) were held through the tiers, the build's peak, and their temporaries
        # now stack on less
        _report(progress, 0.55, "writing counters and flows")
        n_flows = self._save_flows(ev, flow_seq, shift, out, arrows=windows)
        counters = _save_counters(ev, shift, out)
        tiers = _tiers_here(kept, level, bounds, out, track_bounds, max_depth, progress) \
            if windows and later is None else None
        del level, kept
        if later is not None:
            tiers = later.result()
        meta = {
            "version": INDEX_VERSION,
            "path": ev.path,
            "hostname": ev.hostname,
            # a string: Unix-epoch traces (kineto's µs since 1970) put it past 2^63 ps
            "origin_ps": str(int(ev.base_ps) + int(shift)),
            "end_ps": end_ps,
            "slice_span": slice_span,
            "events": n,
            "levels": bounds.tolist(),
            "tiers": tiers,
            "args_kind": ev.args_kind,
            # an event's argument bytes: in args.bin, or in the profile itself (``source``)
            "args_segments": self._segments,
            "source": self.source if any(kind == 1 for _, kind, _ in self._segments) else None,
            "planes": len(ev.planes),
            "names": ev.names,
            "tracks": [
                {"pid": t.pid, "tid": t.tid, "name": t.name, "sortIndex": t.sort_index, "kind": t.kind,
                 "plane": t.plane, "maxDepth": int(max_depth[i]) if i < len(max_depth) else 0,
                 "events": int(per_track[i]) if i < len(per_track) else 0}
                for i, t in enumerate(ev.tracks)
            ],
            "processes": [{"pid": p.pid, "name": p.name, "sortIndex": p.sort_index} for p in ev.processes],
            "counters": counters,
            "steps": [[s[0], int(s[1] - shift), int(s[2])] for s in ev.steps],
            "flows": n_flows,
        }
        (out / "meta.json").write_bytes(_checked_meta(meta, ev.path))
        _report(progress, 1.0, "index written")
        return meta


    def _write_preview(self, target: tuple[Path, int], ev: TraceEvents, cols, by_track, max_depth, per_track,
                       span, shift) -> None:
        """The index of just the rows a whole-trace window at ``resolution`` px draws,
        published (renamed into place) at ``folder`` while the full index is still being
        sorted: every event at least a tier bin long, and the first shorter one of every
        (track, depth, bin) of the tier :meth:`TraceIndex.window_rows` would use and of
        the tier one step finer (when the rows stay under PREVIEW_MAX_SHARE), with
        their nesting depths, each track's depth and size and the trace's span as the
        whole trace has them. Its whole-trace window is the full index's (when that index
        stores the tier, as it does unless the tier keeps > 70 % of the short events); it
        holds no flows and no arguments (a preview is looked at, not clicked)."""
        folder, resolution = target
        start, dur, track, depth, level = cols
        n = len(start)
        p = max(1, span[1] // max(1, resolution))  # the whole-trace window is [0, end)
        if p < (1 << TIER_MIN_Z):
            return  # no tier that coarse: the first window is every event anyway
        z = TIER_MIN_Z + (p.bit_length() - 1 - TIER_MIN_Z) // TIER_STEP * TIER_STEP
        order, tb = by_track
        # (the nesting's and the ties' temporaries' heap, 13 MiB on jax308, given back before
        # the tiers pass below, the page-started build's peak: the nesting's order and depths
        # stay in memory through it, where spilling them first cost ~0.15 s of the first picture)
        _release_freed_memory()
        # Also the tier one step finer, so that a first zoom (to a quarter of the trace)
        # is answered from the preview slice for slice as the index will (app/trace_preview.py):
        # on jax308 (13.6 M events) 41,000 -> 164,000 rows, _write_preview 0.34 -> 0.40 CPU s
        # of a ~7.5 CPU s build; a third tier (exact to a 16th) cost 0.94 s, 8 % of the build.
        zs = tuple(t for t in (z - TIER_STEP, z) if t >= TIER_MIN_Z)
        # (the starts mapped: let go every 16th call of the C pass's release, 2^20 rows of
        # its walk (it calls every 2^16: TIERS_RELEASE_ROWS). By (track, depth, start) over
        # reader rows the walk reaches all over start.raw: 2^17 rows of it mapped ~90 MiB of
        # jax308's 104, and letting them go that often cost ~0.13 s of faults in the first
        # picture's path; every 2^20 rows: 10 MiB off this step's peak for ~0.02 s)
        calls = [0]

        def release():
            calls[0] += 1
            if calls[0] % 16 == 0:
                tv._let_go(start)
        picks = _native.tiers(order, tb, max_depth, depth, None, np.ascontiguousarray(start, np.int64), level, zs, False,
                              None, release)
        tv._let_go(start)
        for k in range(len(zs)):  # the finest tier whose rows stay few enough
            rows = np.union1d(np.flatnonzero(level >= zs[k]), np.concatenate(picks[k:]))
            if len(rows) <= PREVIEW_MAX_SHARE * n:
                break
        else:
            return  # hardly fewer events than the index: no quicker to show
        del picks
        # the mapped columns gathered a block of rows at a time, each block's pages let go
        # (tv._gathered: ``rows`` is sorted): 164,000 rows all over jax308's columns mapped
        # 272 MiB of them at once, held through the preview's own build, the page-started
        # build's peak (438 MiB, 1.4x the file; issue 40)
        name = tv._gathered(self._load("name", keep=True) if self._taken else
                            np.memmap(self.folder / "name.raw", dtype=np.int32, mode="r", shape=(n,)), rows)
        sub = TraceEvents(path=ev.path, hostname=ev.hostname, base_ps=ev.base_ps, track=tv._gathered(track, rows),
                          start_ps=tv._gathered(start, rows) + shift, dur_ps=tv._gathered(dur, rows), name=name,
                          args_off=np.zeros(len(rows), np.int64), args_len=np.zeros(len(rows), np.int32), blob=[],
                          args_kind=ev.args_kind, names=ev.names, tracks=ev.tracks, processes=ev.processes,
                          counters=ev.counters, steps=ev.steps, planes=ev.planes)
        part = folder.with_name(folder.name + ".part")
        try:
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir(parents=True)
            w = IndexWriter(part)
            w.events(sub.track, sub.start_ps, sub.dur_ps, sub.name, sub.args_off, sub.args_len)
            w.finish(sub, known=(tv._gathered(depth, rows), max_depth, per_track, list(span[0]), span[1]))
            shutil.rmtree(folder, ignore_errors=True)  # an earlier build's
            os.replace(part, folder)
        except OSError:  # a preview is a courtesy: the build goes on without one
            shutil.rmtree(part, ignore_errors=True)

    def _flow_seq(self, ev: TraceEvents, rank: np.ndarray) -> np.ndarray:
        """The flow-bound slices' index rows (``rank`` maps reader rows to index rows; -1
        for a reader row out of range), in :meth:`_flow_rows`' order: their one column
        read before the gathers. The others stay in their ``FLOW_SPILL`` files, on disk,
        until :meth:`_flow_rows` after the gathers (jax308's 2.4 M flow slices: 50 MB held
        through every gather before, the build's peak with them, issue 40)."""
        path = self.folder / f"{FLOW_SPILL[0][0]}.raw"
        parts = [np.fromfile(path, FLOW_SPILL[0][1])] if self._flows_spilled else []
        if self._flows_spilled:
            path.unlink()
        if ev.flow_events is not None:
            parts.append(ev.flow_events.seq)
        seq = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        ok = (seq >= 0) & (seq < self.n)
        if ok.all():
            return rank[seq]
        rows = np.full(len(seq), -1, rank.dtype)
        rows[ok] = rank[seq[ok]]
        return rows

    def _save_flows(self, ev: TraceEvents, held: list, shift: int, out: Path, arrows: bool = True) -> int:
        """:func:`_write_flows` of the flow slices at :meth:`_flow_seq`'s rows (``held``: a
        list of them, emptied, so that they are let go once read; ``arrows``: as there)."""
        unsorted = [self._flow_rows(ev, held.pop())]
        flow_rows = _by_row(unsorted.pop())  # (handed over: the only reference, let go there)
        return _write_flows(ev, flow_rows, shift, out, arrows=arrows)

    def _flow_rows(self, ev: TraceEvents, rows: np.ndarray) -> FlowEvents:
        """The flow-bound slices at their index rows (:meth:`_flow_seq`'s ``rows``), not yet
        sorted by row (:func:`_by_row`); those whose reader row was out of range left out."""
        parts = self._spilled_flows(seq=False) + ([ev.flow_events] if ev.flow_events is not None else [])
        fe = FlowEvents.concat(parts)
        del parts
        if not len(rows):
            return fe
        fe.seq = rows.astype(np.int64)
        ok = rows >= 0
        if not ok.all():
            fe = FlowEvents(fe.seq[ok], fe.flow_id[ok], fe.kind[ok], fe.category[ok])
        return fe


def _by_row(fe: FlowEvents) -> FlowEvents:
    """:meth:`IndexWriter._flow_rows`' slices sorted by row (stable), a column at a time
    (each unsorted one let go as its sorted one is made)."""
    if not len(fe.seq):
        return fe
    cols = [fe.seq, fe.flow_id, fe.kind, fe.category]
    del fe
    o = np.argsort(cols[0], kind="stable")
    for i in range(len(cols)):
        cols[i] = cols[i][o]
    return FlowEvents(*cols)


def _write_flows(ev: TraceEvents, flow_rows: FlowEvents, shift: int, out: Path, arrows: bool = True) -> int:
    """Save the arrows the page draws (``flows.npy``: a Chrome trace's own, point to
    point, and those of the flow-bound slices) and the flow-bound slices by row
    (``flow_*.npy``: an xplane's, and a Chrome trace's flow points bound to slices for
    XProf's answer); the number of arrows. ``arrows`` False (a build without the tiers,
    ``finish(windows=False)``): the slices' arrows, which only the page's windows read,
    wait for the first window's :func:`write_tiers` as the tiers do (jax308's 2.4 M flow
    slices: ~0.9 of the build's CPU s), and only their numbering for the zoom levels is
    made here; not for a Chrome trace's flow points, whose bound rows join the flow rows."""
    flows = np.array(ev.flows, np.int64).reshape(-1, 5)
    flows[:, 2] -= shift
    flows[:, 4] -= shift
    np.save(out / "flows.npy", flows)
    points = ev.flow_points is not None and len(ev.flow_points)
    flow_name = _flow_name(ev.names) if len(flow_rows.seq) else -1
    if not arrows and not points:
        dense = tv._dense(flow_rows.flow_id)[1]  # (a sort of the ids alone, in C: ~0.13 s on jax308)
        # as many arrows as _flow_arrows makes: one per flow slice but each flow's first
        n_arrows = len(dense) - (int(dense.max()) + 1 if len(dense) else 0)
    else:
        # the slices' arrows as index rows (TraceIndex.flows reads their tracks and starts):
        # jax308's 1.19 M arrows 47.5 MB as five int64s, 14.3 MB as three int32s
        arrow_rows, dense = _flow_arrows(flow_rows, out, flow_name)
        np.save(out / FLOW_ARROWS_FILE, _narrowest(arrow_rows, (np.int32,)))
        n_arrows = len(arrow_rows)
        del arrow_rows
    if not points:  # (else the flow rows grow below)
        np.save(out / FLOW_DENSE_FILE, dense)
    else:
        flow_rows = FlowEvents.concat([flow_rows, _bind_flow_points(ev.flow_points, shift, out)])
        o = np.argsort(flow_rows.seq, kind="stable")
        flow_rows = FlowEvents(flow_rows.seq[o], flow_rows.flow_id[o], flow_rows.kind[o], flow_rows.category[o])
    for k, dtypes in (("seq", (np.int32,)), ("flow_id", ()), ("kind", ()), ("category", (np.int8, np.int16))):
        np.save(out / f"flow_{k}.npy", _narrowest(getattr(flow_rows, k), dtypes))  # widened on read (_FLOW_DTYPES)
    return len(flows) + n_arrows


def _flow_name(names: list[str]) -> int:
    """The name id of "flow", the label of an arrow whose start slice has no category,
    added to ``names`` (the index's) where it is not there yet."""
    try:
        return names.index("flow")
    except ValueError:
        names.append("flow")
        return len(names) - 1


def _narrowest(col: np.ndarray, dtypes) -> np.ndarray:
    """``col`` as the first of ``dtypes`` that holds all its values, else as it is."""
    dtype = _narrow_dtype(col, dtypes)
    return col if dtype == col.dtype else col.astype(dtype)


def _narrow_dtype(col: np.ndarray, dtypes) -> np.dtype:
    """The first of ``dtypes`` that holds all of ``col``'s values, else ``col``'s own."""
    if len(col):
        lo, hi = int(col.min()), int(col.max())
        for dtype in dtypes:
            if np.iinfo(dtype).min <= lo and hi <= np.iinfo(dtype).max:
                return np.dtype(dtype)
    return col.dtype


def _flow_arrows(fe: FlowEvents, out: Path, flow_name: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrows (name, from row, to row) of each flow, as the page draws them (with the
    slices' tracks and starts: :attr:`TraceIndex.flows`): from the flow's start slice
    (XProf's ``flow_out``) to each of its other slices, slice start to slice start; a flow without a start slice is chained in time order.
    (XProf's flows are one ``flow_out`` slice and up to a dozen ``flow_in`` ones: a launch
    and the kernels or callbacks it caused.) ``fe.seq`` holds index rows here. And each
    flow slice's flow numbered by its id's rank among the distinct ids (int32, in ``fe``'s
    order; :data:`FLOW_DENSE_FILE`): the grouping below makes it, which the zoom levels'
    flow pre-pass made again with ``np.unique`` (jax308's 2.4 M flow slices: ~0.35 s).
    ``flow_name``: the label of an arrow from a slice without a category (:func:`_flow_name`)."""
    if not len(fe.seq):
        return np.zeros((0, 3), np.int64), np.zeros(0, np.int32)
    # (temporaries let go as soon as they are used, positions and groups as int32 where the
    # rows fit, each flow's source found once and the gathers read through ``o``, not from
    # whole columns gathered first: jax308's 2.4 M flow slices took ~160 MiB of temporaries
    # here, in the build worker beside its kept columns, its peak with them; issue 40)
    n = len(fe.seq)
    idx = np.int32 if n < 2**31 - 1 else np.int64
    # (the rows sorted: the starts read a block at a time, the map's pages let go after
    # each, not the 87 MiB of start.npy's pages that 2.4 M rows all over it map at once)
    o = np.lexsort((tv._gathered(_column(out, "start"), fe.seq), fe.flow_id)).astype(idx)
    fid = fe.flow_id[o]
    first = np.empty(n, bool)
    first[0] = True
    np.not_equal(fid[1:], fid[:-1], out=first[1:])
    del fid
    gid = np.cumsum(first, dtype=idx)
    gid -= 1
    dense = np.empty(n, np.int32)
    dense[o] = gid  # (ids sorted as uint64: the pre-pass checks they sort so as int64 too)
    # each flow's start slice (XProf's flow_out): its first FLOW_START, by position
    starts = np.flatnonzero(fe.kind[o] == FLOW_START).astype(idx)
    g = gid[starts]
    lead = np.empty(len(g), bool)
    lead[:1] = True
    np.not_equal(g[1:], g[:-1], out=lead[1:])
    start_of = np.full(int(gid[-1]) + 1, -1, idx)
    start_of[g[lead]] = starts[lead]
    del starts, g, lead
    src = start_of[gid]
    del gid, start_of
    has = src >= 0
    pos = np.arange(n, dtype=idx)
    np.subtract(pos, 1, out=src, where=~has)  # a flow without a start slice: chained in time order
    ok = src != pos
    ok &= ~(first & ~has)
    del first, has
    src, dst = src[ok], pos[ok]
    del ok, pos
    arrows = np.empty((len(src), 3), np.int64)
    src, dst = o[src], o[dst]  # (their flow slices' places in ``fe``)
    del o
    cat = fe.category[src]
    arrows[:, 0] = np.where(cat >= 0, cat, flow_name)
    del cat
    arrows[:, 1] = fe.seq[src]
    arrows[:, 2] = fe.seq[dst]
    return arrows, dense


def _bind_flow_points(fp: FlowPoints, shift: int, out: Path) -> FlowEvents:
    """The slices (index rows) a Chrome trace's flow points bind to, as XProf's FlowV2
    rows (:class:`FlowEvents`: a flow's number is its ``bind_id``). Catapult's rules for
    ``s``/``t``/``f`` events (``trace_event_importer.js``, ``createFlowSlices_``):

    * an enclosing point binds to the deepest slice of its track open at its time, ends
      included (``findSliceAtTs``: closed intervals, so an instant can be bound); where one
      slice ends as the next one at that depth begins, to the one that begins (kineto puts
      a kernel's ``f`` at the kernel's start, which may be the previous kernel's end);
    * any other point to the first slice of its track starting at or after it, the
      outermost of those starting together (``findNextSliceAfter``).

    XProf's answer carries one flow per slice (``bind_id``): a flow with a point bound to
    no slice, or to a slice another flow (of a lower number) already holds, or with two
    points on one slice, is left out whole, so that every ``flow_in`` XProf's trace viewer
    reads has its ``flow_out``. The page's own arrows (point to point) keep every flow."""
    start, dur, track, depth = (_column(out, k) for k in ("start", "dur", "track", "depth"))
    ts = fp.ts_ps - shift
    pt_track = fp.track.astype(np.int64)
    rows = np.flatnonzero(np.isin(track, np.unique(fp.track)))
    bound = np.full(len(fp), -1, np.int64)
    if len(rows):
        st = np.asarray(start[rows])
        en = st + np.asarray(dur[rows])
        tr = np.asarray(track[rows]).astype(np.int64)
        dp = np.asarray(depth[rows]).astype(np.int64)
        starts = np.unique(st)
        base = np.int64(len(starts) + 1)
        rank = np.searchsorted(starts, st).astype(np.int64)
        p_rank = np.searchsorted(starts, ts, side="right").astype(np.int64) - 1  # last start <= ts
        # threads as ranks (0..), so composite keys stay below n * (n + 1)
        threads = np.unique(tr)
        tr_r = np.searchsorted(threads, tr).astype(np.int64)
        p_tr = np.minimum(np.searchsorted(threads, pt_track), len(threads) - 1).astype(np.int64)
        has = threads[p_tr] == pt_track
        # enclosing: at one depth of a track slices do not overlap (the index stacks a
        # crossing slice deeper), so only the last one starting at or before the point can
        # hold it; the deepest depth that does wins
        deep = int(dp.max()) + 1
        groups, key = np.unique(tr_r * deep + dp, return_inverse=True)
        key = key.reshape(-1).astype(np.int64)
        comp = key * base + rank
        order = np.argsort(comp, kind="stable")
        comp = comp[order]
        todo = np.flatnonzero(fp.enclosing & (p_rank >= 0) & has)
        for d in range(deep - 1, -1, -1):
            if not len(todo):
                break
            want = p_tr[todo] * deep + d
            g = np.minimum(np.searchsorted(groups, want), len(groups) - 1)
            pos = np.searchsorted(comp, g * base + p_rank[todo], side="right") - 1
            cand = order[np.maximum(pos, 0)]
            ok = (groups[g] == want) & (pos >= 0) & (key[cand] == g) & (en[cand] >= ts[todo])
            bound[todo[ok]] = rows[cand[ok]]
            todo = todo[~ok]
        # the next slice: the first by (start, depth) on the track from the point's time on
        comp2 = tr_r * base + rank
        order2 = np.lexsort((dp, comp2))
        comp2 = comp2[order2]
        nxt = np.flatnonzero(~fp.enclosing & has)
        pos = np.searchsorted(comp2, p_tr[nxt] * base + np.searchsorted(starts, ts[nxt], side="left"), side="left")
        cand = order2[np.minimum(pos, len(order2) - 1)]
        ok = (pos < len(order2)) & (tr_r[cand] == p_tr[nxt])
        bound[nxt[ok]] = rows[cand[ok]]
    # whole flows only, one per slice
    drop = np.unique(fp.flow[bound < 0])
    o = np.lexsort((fp.flow, bound))
    b, f = bound[o], fp.flow[o]
    taken = np.r_[False, b[1:] == b[:-1]] & (b >= 0)  # a slice some earlier (lower) flow holds
    drop = np.union1d(drop, f[taken])
    keep = ~np.isin(fp.flow, drop)
    return FlowEvents(bound[keep], fp.flow[keep].astype(np.uint64), fp.kind[keep], fp.category[keep])


#: pid, tid and sort indexes are written as int64 by every answer (``_x_events`` builds int64
#: columns of them, plus a host's pid offset of at most 1000 * 8192): an index never holds one
#: past this, so no answer can fail once it has begun to stream.
_MAX_ID = (1 << 63) - (1 << 32)


def _checked_meta(meta: dict, path: str) -> bytes:
    """``meta.json``'s bytes, refused (BadInput naming the file) rather than written when it
    holds what an answer could not write: an id past int64, a string no UTF-8 encoder
    takes. The readers keep their values within these bounds (formats/chrome_trace.py
    hashes ids past 2^53, replaces lone surrogates); this is the index's own guarantee, for
    every reader, checked once per build instead of failing mid-stream on every request."""
    for where, rows, keys in (("track", meta["tracks"], ("pid", "tid", "sortIndex")),
                              ("process", meta["processes"], ("pid", "sortIndex"))):
        for row in rows:
            for k in keys:
                v = row[k]
                if not isinstance(v, int) or not -_MAX_ID <= v <= _MAX_ID:
                    raise BadInput(f"{path}: a {where}'s {k} ({str(v)[:40]}) is not an integer within int64; "
                                   "cannot index this trace", file=path)
    try:
        return orjson.dumps(meta)
    except TypeError as exc:  # orjson: a lone surrogate, an integer beyond 64 bits
        raise BadInput(f"{path}: cannot index this trace ({exc})", file=path) from None


def build_index(ev: TraceEvents, out: Path, progress=None) -> dict:
    """Write the index of ``ev`` (columns in memory) into the empty folder ``out``.
    Takes ownership of ``ev``'s columns: they are released once written."""
    w = IndexWriter(out)
    for buf in ev.blob:
        w.blob(buf)
    ev.blob.clear()
    w.events(ev.track, ev.start_ps, ev.dur_ps, ev.name, ev.args_off, ev.args_len)
    ev.track = ev.start_ps = ev.dur_ps = ev.name = ev.args_off = ev.args_len = None
    return w.finish(ev, progress)


def _level(dur: np.ndarray) -> np.ndarray:
    """floor(log2(dur)) (0 for 0 and 1 ps); rounding in the float conversion only ever
    moves an event up a level, which keeps ``dur < 2^(level+1)``."""
    out = np.empty(len(dur), dtype=np.int8)
    step = 1 << 18  # in blocks: frexp's temporaries (28 bytes a row) stay small beside the nesting pass's peak
    for a in range(0, len(dur), step):
        _, e = np.frexp(np.maximum(dur[a:a + step], 1).astype(np.float64))
        out[a:a + step] = e - 1
    return out


def _let_go_after(col: np.ndarray, got):
    """``got`` (what a pass over the column ``col`` answered), once ``col``'s mapped pages
    are let go (``tv._let_go``; an array in memory: nothing)."""
    tv._let_go(col)
    return got


def _in_memory(col: np.ndarray, step: int = 1 << 21) -> np.ndarray:
    """A mapped column copied into fresh memory a block at a time, each block's mapped
    pages let go (an array in memory: itself). For a pass that reads all of it at random
    (the level sort's gathers): its pages are all in the RSS during that pass either way,
    and numpy's fresh memory is in huge pages where the kernel gives them (madvised), the
    map's are 4 KiB ones: the level sort's CPU rose 0.1-0.15 s on jax308 reading the map."""
    if not isinstance(col, np.memmap):
        return col
    got = np.empty(col.shape, col.dtype)
    for a in range(0, len(col), step):
        got[a:a + step] = col[a:a + step]
        tv._let_go(col)
    return got


def _spill(path: Path, col: np.ndarray) -> np.ndarray:
    """``col`` written to ``path`` and memory-mapped back read-only, the file removed (the
    map keeps it): its pages are the page cache's, in the RSS only while read (and let go
    by ``tv._let_go``), not a column of fresh memory held through the steps between."""
    if not len(col):
        return col
    col.tofile(path)
    got = np.memmap(path, col.dtype, "r", shape=col.shape)
    path.unlink()
    return got


def _read_into(f, buf: memoryview) -> None:
    """Fill ``buf`` from the unbuffered file ``f`` (its next bytes)."""
    done = 0
    while done < len(buf):
        got = f.readinto(buf[done:])
        if not got:
            raise OSError(f"{f.name}: {len(buf) - done} bytes short")
        done += got


def _sorted_levels(start: np.ndarray, level: np.ndarray, out: Path | None = None):
    """The index order of rows with these starts and levels: by level (a counting sort of
    int8), then each level by start, ties by row (stable); the levels and starts in that
    order and where each level begins. The temporaries are one level's, not all rows'.
    ``out``: the starts in that order are written there as ``start.npy`` and
    ``start_fence.npy`` (what :func:`_save_starts` writes) a level at a time instead,
    never whole in memory (None in their place): 104 MiB less at jax308's sort and
    gathers, and no fresh column of pages to fault in and zero. ``level``: the rows'
    levels, or the (order, bounds) ``_level_order(level, False)`` made of them, so that the
    caller can let the rows' levels go first; the levels in index order are made after the
    sort (13 MiB each on jax308, held through its peak before)."""
    order, bounds = level if isinstance(level, tuple) else _level_order(level, False)
    del level
    n = len(order)
    # the starts in index order come out of this sort: the start column is not
    # gathered again (a second random read of 109 MB on jax308)
    start_sorted = np.empty(n, np.int64) if out is None else None
    fence = []
    with (open(out / "start.npy", "wb") if out is not None else contextlib.nullcontext()) as f:
        if f is not None:
            _npy_header(f, n, np.int64)
        for k in range(LEVELS):
            a, z = int(bounds[k]), int(bounds[k + 1])
            if z - a:
                seg = order[a:z]
                st = _take(start, seg)
                by_start = np.argsort(st, kind="stable")
                seg[:] = seg[by_start]
                if f is None:
                    np.take(st, by_start, out=start_sorted[a:z])  # (no level-sized temporary in between)
                # (a block-sized one: 2 MiB, beside the level's own 40 MiB at jax308's largest)
                for b in range(a, z, 1 << 18) if f is not None else ():
                    piece = st[by_start[b - a:b - a + (1 << 18)]]
                    f.write(memoryview(piece).cast("B"))
                    fence.append(piece[-b % FENCE::FENCE].copy())  # rows a multiple of FENCE (not a view: it held the block)
                del st, by_start
    if out is not None:
        np.save(out / "start_fence.npy", np.concatenate(fence) if fence else np.zeros(0, np.int64))
    return order, _sorted_level(bounds), bounds, start_sorted


def _save_starts(out: Path, start_sorted: np.ndarray) -> None:
    """The index's starts (``start.npy``) and every ``FENCE``-th one (``start_fence.npy``)."""
    np.save(out / "start.npy", start_sorted)
    np.save(out / "start_fence.npy", start_sorted[::FENCE])


# A sorted run's files beside a line range's columns (sorted_run; IndexWriter.events_files):
# its rows (local, int32) in index order, their starts (not shifted) and its level bounds.
RUN_FILES = (("run_order", np.int32), ("run_start", np.int64), ("run_bounds", np.int64))


def sorted_run(folder: str | Path, n: int) -> None:
    """In a line range's process, after its decode (formats/xplane_line_ranges.py): its
    ``n`` rows (``start.raw``/``dur.raw`` in ``folder``) sorted as the index sorts all
    rows (:func:`_sorted_levels`), written as ``RUN_FILES``, so the merging build only
    merges the ranges' runs (``_trace_build.merge_runs``) instead of sorting every row.
    Durations clipped as the build's first pass clips them (``_shift_clip``); starts not
    shifted (a uniform shift keeps their order; the merge shifts them)."""
    folder = Path(folder)
    start = np.fromfile(folder / "start.raw", np.int64, count=n)
    dur = np.fromfile(folder / "dur.raw", np.int64, count=n)
    np.clip(dur, 0, MAX_DUR_PS, out=dur)
    order, _, bounds, start_sorted = _sorted_levels(start, _level(dur))
    del start, dur
    for (k, dtype), col in zip(RUN_FILES, (order, start_sorted, bounds)):
        np.ascontiguousarray(col, dtype).tofile(folder / f"{k}.raw")


def _run_file(path: Path, dtype) -> np.ndarray:
    """One of a sorted run's files, memory-mapped (an empty one as an empty array:
    np.memmap refuses a file of no bytes)."""
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype)


def merge_runs(runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], shift: int):
    """:func:`_sorted_levels`' answer (order, levels, bounds, starts shifted by ``shift``)
    for rows that come as runs, each (its rows in index order, local; their starts; its
    level bounds), covering the rows in row order: per level the runs' stretches merged,
    ties to the earlier run (so to the lower row, as the stable sort). C where it applies;
    numpy's stable argsort of the runs' stretches otherwise (the same order)."""
    n = sum(len(o) for o, _, _ in runs)
    bases = np.cumsum([0] + [len(o) for o, _, _ in runs[:-1]]).astype(np.int64)
    bounds = np.sum([b for _, _, b in runs], axis=0).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(np.diff(bounds))]).astype(np.int64)
    order = np.empty(n, np.int32)
    start = np.empty(n, np.int64)
    if _native is not None and 0 < n < 2**31 - 1:
        _native.merge_runs(tuple(np.ascontiguousarray(s, np.int64) for _, s, _ in runs),
                           tuple(np.ascontiguousarray(o, np.int32) for o, _, _ in runs),
                           np.ascontiguousarray(np.concatenate([b for _, _, b in runs]), np.int64), bases,
                           shift, order, start)
    else:
        for k in range(LEVELS):
            a, z = int(bounds[k]), int(bounds[k + 1])
            if z - a:
                st = np.concatenate([s[b[k]:b[k + 1]] for _, s, b in runs]) - np.int64(shift)
                rows = np.concatenate([o[b[k]:b[k + 1]] + base for (o, _, b), base in zip(runs, bases)])
                by_start = np.argsort(st, kind="stable")
                start[a:z], order[a:z] = st[by_start], rows[by_start]
    return order, np.repeat(np.arange(LEVELS, dtype=np.int8), np.diff(bounds)), bounds, start


def _mapped(path: Path) -> np.ndarray:
    """A column memory-mapped read-only. (Each lookup maps the page-cache folio around
    it: on this machine's ext4 that is 2 MB, so RssFile grows by a few MB per distinct
    place a window touches; those pages are clean, shared and reclaimable.)"""
    return npy.load(path, mmap_mode="r")


class _Widened:
    """A column stored narrower than its readers see it (``_NARROW``, ``DUR_TAIL_FILE``):
    ``col`` (memory-mapped) read as ``dtype``, the rows from ``at`` on from ``tail``.
    Indexing (a row, a slice, row ids, a mask) and ``np.asarray`` give what the wide
    column gave, so every reader (the window passes, Steps & ops' ops table, the C passes
    through ``np.ascontiguousarray``) is unchanged; only the rows read are widened."""

    def __init__(self, col: np.ndarray, dtype, tail: np.ndarray | None = None):
        self.col, self.dtype, self.tail = col, np.dtype(dtype), tail
        self.at = len(col) - (len(tail) if tail is not None else 0)
        self.shape, self.ndim, self.size = col.shape, 1, col.size

    def __len__(self) -> int:
        return len(self.col)

    def __getitem__(self, key):
        n = len(self.col)
        if isinstance(key, (int, np.integer)):
            i = int(key) + (n if key < 0 else 0)
            if self.tail is not None and self.at <= i < n:
                return self.tail[i - self.at]
            return self.dtype.type(self.col[i])
        if isinstance(key, slice):
            a, z, step = key.indices(n)
            if step == 1:
                out = np.asarray(self.col[a:z]).astype(self.dtype)
                if self.tail is not None and z > self.at:
                    lo = max(a, self.at)
                    out[lo - a:] = self.tail[lo - self.at:z - self.at]
                return out
            key = np.arange(a, z, step)
        rows = np.asarray(key)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        out = np.asarray(self.col[rows]).astype(self.dtype)
        if self.tail is not None and len(self.tail):
            hit = np.flatnonzero((rows >= self.at) | ((rows < 0) & (rows >= self.at - n)))
            if len(hit):
                out[hit] = self.tail[rows[hit] % n - self.at]
        return out

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)


def _column(folder: Path, k: str, mmap: bool = True):
    """Index column ``k`` of ``folder`` as its readers see it: memory-mapped (``mmap``),
    widened where it is stored narrow (:class:`_Widened`)."""
    col = npy.load(folder / f"{k}.npy", mmap_mode="r" if mmap else None)
    wide = _WIDE.get(k)
    if wide is None or col.dtype == wide:
        return col
    tail = npy.load(folder / DUR_TAIL_FILE) if k == "dur" and (folder / DUR_TAIL_FILE).exists() else None
    return _Widened(col, wide, tail)


def _save_column(out: Path, k: str, col: np.ndarray, bounds: np.ndarray) -> None:
    """Column ``k`` in index order (as narrow as :func:`_in_order` made it) into ``k``.npy;
    the durations as uint32 where they fit, the rows of levels >= DUR_TAIL_LEVEL kept
    also in DUR_TAIL_FILE (int64). Checked: a column that does not fit stays int64."""
    if k == "dur" and len(col):
        at = int(bounds[DUR_TAIL_LEVEL])
        head = col[:at]
        if not len(head) or (int(head.min()) >= 0 and int(head.max()) <= np.iinfo(np.uint32).max):
            if at < len(col):
                np.save(out / DUR_TAIL_FILE, col[at:])
            narrow = np.zeros(len(col), np.uint32)  # the tail's rows read 0 here: read from DUR_TAIL_FILE
            narrow[:at] = head
            col = narrow
    np.save(out / f"{k}.npy", col)


def first_per_pixel(track: np.ndarray, depth: np.ndarray, px: np.ndarray) -> np.ndarray:
    """Positions of the first event of each (track, depth, pixel), in any order: what
    ``np.unique(key, return_index=True)`` gives for the key ``(track << 16 | depth) << 20
    | px``, for events in start order (``px`` nondecreasing).

    A window holds few (track, depth) rows (jax308: 6 tracks, depth <= 27), so the events
    are grouped by row with a stable sort of 16-bit row codes (numpy sorts those by
    radix, in linear time), which keeps each row's pixels nondecreasing: a key's events
    are then adjacent, its first one first. That is ~10x cheaper than sorting the int64
    keys (a 1 % window of jax308 at 8000 px: 107,000 narrow events). Rows or pixels that
    do not fit those codes take the keys' sort."""
    if not len(px):
        return np.zeros(0, np.int64)
    d = int(depth.max()) + 1
    if int(track.min()) >= 0 and int(depth.min()) >= 0 and d <= 1 << 16 and int(px.max()) < 1 << 20 \
            and (int(track.max()) + 1) * d <= 1 << 16:
        code = track.astype(np.int32) * d + depth  # < 2^16: no int64 copies
        by_row = np.argsort(code.astype(np.uint16), kind="stable")
        code, px = code[by_row], px[by_row]
        new = np.ones(len(code), bool)
        new[1:] = (code[1:] != code[:-1]) | (px[1:] != px[:-1])
        return by_row[new]
    track, depth = track.astype(np.int64), depth.astype(np.int64)
    _, first = np.unique((track << 16 | depth) << 20 | px, return_index=True)
    return first


_NO_TAIL = np.zeros(0, np.int64)


def _stored(col) -> tuple[np.ndarray, np.ndarray, int]:
    """A column as stored (what a C pass reads), its int64 tail and the row the tail
    starts at (:class:`_Widened`; none: the column's length)."""
    if isinstance(col, _Widened):
        return col.col, (col.tail if col.tail is not None else _NO_TAIL), col.at
    return col, _NO_TAIL, len(col)


class _AtRows:
    """``col[rows]`` read a stretch at a time (what :func:`_fenced` slices): a tier's
    starts, from its row ids."""

    def __init__(self, col: np.ndarray, rows: np.ndarray):
        self.col, self.rows = col, rows

    def __getitem__(self, part: slice) -> np.ndarray:
        return self.col[np.asarray(self.rows[part])]


def _fenced(col, fence: np.ndarray, a: int, z: int, x: int, side: str) -> int:
    """``a + searchsorted(col[a:z], x, side)`` for a sorted stretch of a memory-mapped
    column, through the in-memory ``fence`` (``col[::FENCE]``): the fence narrows the
    search to one block, so it faults in about 2 pages of the column instead of ~20."""
    fa = -(-a // FENCE)  # first fence post inside [a, z)
    fz = (z - 1) // FENCE + 1  # one past the last
    if fz <= fa:
        return a + int(np.searchsorted(col[a:z], x, side=side))
    j = int(np.searchsorted(fence[fa:fz], x, side=side))  # posts [fa, fa + j) are before x
    lo = a if j == 0 else (fa + j - 1) * FENCE
    hi = z if fa + j >= fz else min(z, (fa + j) * FENCE + 1)
    return lo + int(np.searchsorted(col[lo:hi], x, side=side))


def _track_order(track: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Rows by (track, start, longest first). XLines are usually stored in that order
    already (tsl's ``SortXPlane``: by offset, longer first), so the rows are grouped by
    track with a stable sort (near-linear on runs) and only the tracks found out of order
    are sorted; a 3-key sort of everything costs ~5 s per 10 M events."""
    order = np.argsort(track, kind="stable")
    n = len(order)
    bad_tracks = set()
    block = 1 << 20
    for a in range(0, n - 1, block):
        r = order[a:min(n, a + block + 1)]
        tr, st, du = track[r], start[r], dur[r]
        ok = (tr[1:] != tr[:-1]) | (st[1:] > st[:-1]) | ((st[1:] == st[:-1]) & (du[1:] <= du[:-1]))
        if not ok.all():
            bad_tracks.update(np.unique(tr[1:][~ok]).tolist())
    if bad_tracks:
        tb = np.searchsorted(track[order], np.arange(int(track.max()) + 2))
        for ti in sorted(bad_tracks):
            seg = order[tb[ti]:tb[ti + 1]]
            seg[:] = seg[np.lexsort((~dur[seg], start[seg]))]
    return order


def _in_order(k: str, col: np.ndarray, order: np.ndarray, clip: bool = True) -> np.ndarray:
    """Column ``k`` (read from its raw file, writable) in the index's order: durations
    clipped again, as _depths and _level saw them (``clip``: unless none needed it); the
    others as narrow as they fit (``_NARROW``). (Mapping the raw file instead
    of reading it saved no measurable CPU on jax308 and raised the build's peak RSS.)"""
    dtype = col.dtype
    if k == "dur":
        if clip:
            np.clip(col, 0, MAX_DUR_PS, out=col)
    elif k in _NARROW:
        dtype = _narrow_dtype(col, _NARROW[k])
    return _take(col, order, dtype)


def _save_in_order(out: Path, k: str, col: np.ndarray, order: np.ndarray, bounds: np.ndarray,
                   clip: bool = True, keep: bool = True) -> np.ndarray | None:
    """:func:`_in_order` then :func:`_save_column`; the column as saved (``keep``), else
    None. With the C gather a column not kept is gathered and written a block at a time
    (:func:`_save_blocks`), never whole in memory (jax308: aoff 55 MB, name 27 MB), and the
    durations' uint32 head and int64 tail are gathered as such (the C pass says whether
    the head fitted), not from an int64 column in index order (109 MB)."""
    n = len(order)
    if n and not keep and _takes(col, order):
        path = out / f"{k}.npy"
        if k != "dur":
            dtype = _narrow_dtype(col, _NARROW[k]) if k in _NARROW else col.dtype
            _save_blocks(path, n, dtype, lambda a, z: _take(col, order[a:z], dtype))
            return None
        if clip:
            np.clip(col, 0, MAX_DUR_PS, out=col)
        at = int(bounds[DUR_TAIL_LEVEL])
        fits = [True]

        def head(a: int, z: int) -> np.ndarray:
            got = np.zeros(z - a, np.uint32)  # the tail's rows read 0 here: read from DUR_TAIL_FILE
            if a < at:
                fits[0] &= _native.take(col, order[a:min(z, at)], got[:min(z, at) - a])
            return got

        _save_blocks(path, n, np.uint32, head)
        if fits[0]:
            if at < n:
                np.save(out / DUR_TAIL_FILE, _take(col, order[at:]))
            return None
        clip = False  # a duration past 32 bits in the head: the int64 column, as _save_column keeps it
    col = _in_order(k, col, order, clip)
    _save_column(out, k, col, bounds)
    return col if keep else None


_TAKE_SRC = (np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int16))
_TAKE_DST = (*_TAKE_SRC, *map(np.dtype, (np.uint32, np.uint16, np.int8, np.uint8)))


def _takes(col: np.ndarray, rows: np.ndarray, dtype=None) -> bool:
    """Whether the C gather (``_trace_build.take``) does ``col[rows].astype(dtype)``."""
    return (_native is not None and rows.dtype == np.int32 and col.dtype in _TAKE_SRC
            and np.dtype(dtype or col.dtype) in _TAKE_DST and col.flags.c_contiguous and rows.flags.c_contiguous)


def _take(col: np.ndarray, rows: np.ndarray, dtype=None) -> np.ndarray:
    """``col[rows]`` as ``dtype`` (values known to fit): the C gather casts as it reads, so
    no whole-column copy is made in either dtype first; numpy's fancy indexing otherwise."""
    if _takes(col, rows, dtype):
        got = np.empty(len(rows), dtype or col.dtype)
        _native.take(col, rows, got)
        return got
    got = col[rows]
    return got if dtype is None else got.astype(dtype, copy=False)


def _shift_clip(start: np.ndarray, dur: np.ndarray, track: np.ndarray, shift: int, ntracks: int, count: bool):
    """The raw columns' first pass, in place: starts shifted by ``shift`` (to >= 0),
    durations clipped to [0, MAX_DUR_PS]. Returns the last end, the events per track
    (``count``; else None) and whether any duration was clipped (so the durations read
    again from their raw file need no clipping where none was). In one C pass where it
    applies: numpy made a 109 MB ``start + dur`` and an int64 copy of the tracks on jax308."""
    n = len(start)
    if _native is not None and n and track.dtype == np.int32 and start.dtype == dur.dtype == np.int64:
        per_track = np.zeros(ntracks, np.int64)  # (the C pass adds each block's counts)
        lo, hi, end, outside = 0, 0, None, False
        # a block at a time, the mapped columns' pages let go after each (IndexWriter._raw_columns)
        for a in range(0, n, SHIFT_CLIP_ROWS):
            s, d, t = (c[a:a + SHIFT_CLIP_ROWS] for c in (start, dur, track))
            lo, hi = min(lo, int(d.min())), max(hi, int(d.max()))
            e, out = _native.shift_clip(s, d, shift, MAX_DUR_PS, t, per_track)
            end, outside = e if end is None else max(end, e), outside or out
            tv._let_go(start, dur, track)
        if outside and count:  # ids past the tracks: bincount's longer answer, as the numpy path
            per_track = np.bincount(track, minlength=ntracks)
        return end, per_track if count else None, lo < 0 or hi > MAX_DUR_PS
    if shift:
        start -= shift
    np.clip(dur, 0, MAX_DUR_PS, out=dur)
    end = int((start + dur).max()) if n else 0
    per_track = (np.bincount(track, minlength=ntracks) if n else np.zeros(ntracks, np.int64)) if count else None
    return end, per_track, True


def _level_order(level: np.ndarray, levels: bool = True):
    """Rows by duration level, stable (int32 where they fit), the levels in that order, and
    where each level begins (``LEVELS + 1`` bounds); ``levels=False``: (order, bounds)."""
    n = len(level)
    if _native is not None and 0 < n < 2**31 - 1:
        order, bounds = _native.level_order(level)
    else:
        order = np.argsort(level, kind="stable")
        if n < 2**31:
            order = order.astype(np.int32)
        bounds = np.searchsorted(level[order], np.arange(LEVELS + 1)).astype(np.int64)
    return (order, _sorted_level(bounds), bounds) if levels else (order, bounds)


def _sorted_level(bounds: np.ndarray) -> np.ndarray:
    """The level of each row in index order, from where each level begins."""
    return np.repeat(np.arange(LEVELS, dtype=np.int8), np.diff(bounds))


def _inverse(order: np.ndarray) -> np.ndarray:
    """``rank`` with ``rank[order] = arange(n)``: each reader row's index row."""
    if _native is not None and order.dtype == np.int32 and len(order):
        return _native.inverse(order)
    rank = np.empty(len(order), order.dtype)
    rank[order] = np.arange(len(order), dtype=order.dtype)
    return rank


def _npy_header(f, n: int, dtype) -> None:
    """The header ``np.save`` writes for an ``n``-long ``dtype`` column (version 1.0)."""
    header = np.lib.format.header_data_from_array_1_0(np.empty(0, dtype))
    header["shape"] = (n,)
    np.lib.format.write_array_header_1_0(f, header)


def _save_blocks(path: Path, n: int, dtype, block, step: int = 1 << 20) -> None:
    """What ``np.save(path, column)`` writes (the same bytes: a version 1.0 header, as
    np.save writes for a column) for an ``n``-long ``dtype`` column made ``block(a, z)``
    rows at a time, so the whole column is never held."""
    with open(path, "wb") as f:
        _npy_header(f, n, dtype)
        for a in range(0, n, step):
            f.write(np.ascontiguousarray(block(a, min(n, a + step)), dtype).tobytes())


def _zero_length_ties(order: np.ndarray, track: np.ndarray, start: np.ndarray, dur: np.ndarray):
    """Where the nesting pass's order (``order``: reader rows by track, start, longest
    first, ties in reader order) is not XProf's zoom levels' order: XProf's rule sees an
    xplane's 1 ps events as 0 ps long (``TraceIndex._rule_durations``), so at one start
    on one track its 0 and 1 ps events tie and go by index row (ZoomLevels.order's
    lexsort), which among events of one start and one duration level is reader order.
    Returns (positions in ``order``, the reader rows that belong there), or None."""
    if not (dur == 0).any():  # an xplane's zero-length events are stored 1 ps long: most have none
        return None
    short = np.flatnonzero((dur <= 1)[order])  # (a bool gather: dur[order] was a 109 MB int64 copy on jax308)
    if len(short) < 2:
        return None
    rows = order[short]
    t, s, d = track[rows], start[rows], dur[rows]
    # the 0 and 1 ps events of one (track, start) are the last of its stretch: a run of
    # consecutive positions
    brk = np.ones(len(short), bool)
    brk[1:] = (np.diff(short) != 1) | (t[1:] != t[:-1]) | (s[1:] != s[:-1])
    run = np.cumsum(brk) - 1
    mixed = (np.bincount(run, weights=d == 0) > 0) & (np.bincount(run, weights=d == 1) > 0)
    sel = mixed[run]
    if not sel.any():
        return None
    rows, run = rows[sel], run[sel]
    return short[sel], rows[np.lexsort((rows, run))]


def _save_xprof_order(out: Path, rank: np.ndarray, nest_order: np.ndarray, ties) -> None:
    """``XPROF_ORDER_FILE``: the nesting pass's order (reader rows) as index rows
    (``rank``); ``XPROF_TIES_FILE``: where XProf's rule orders zero-length ties otherwise
    (:func:`_zero_length_ties`), applied by :meth:`TraceIndex._xprof_order`."""
    if _takes(rank, nest_order):  # written a block at a time, never whole in memory (55 MB on jax308)
        _save_blocks(out / XPROF_ORDER_FILE, len(nest_order), rank.dtype,
                     lambda a, z: _take(rank, np.ascontiguousarray(nest_order[a:z])))
    else:
        np.save(out / XPROF_ORDER_FILE, rank[nest_order])
    if ties is not None:
        np.save(out / XPROF_TIES_FILE, np.stack([ties[0], rank[ties[1]]]).astype(np.int64))


def _depths(track: np.ndarray, start: np.ndarray, dur: np.ndarray, ntracks: int):
    """Nesting depth of every event on its track: the number of earlier events (by start,
    longest first) still open when it starts. For properly nested events that is the
    number of ancestors; computed with one sort and binary searches per track."""
    return _nest(track, start, dur, ntracks)[:2]


def _native_ok(track: np.ndarray, start: np.ndarray, dur: np.ndarray, ntracks: int) -> bool:
    """Whether the C passes apply: int32 row numbers, doubled ends within int64 (starts
    are shifted to >= 0, durations capped at MAX_DUR_PS) and every track id in range
    (the numpy path leaves events on unknown tracks at depth 0)."""
    n = len(start)
    # (a column at a time, each let go after: IndexWriter._raw_columns' maps)
    return (_native is not None and 0 < n < 2**31 - 1 and ntracks > 0
            and _let_go_after(start, int(start.min()) >= 0 and int(start.max()) < (1 << 61) - MAX_DUR_PS)
            and _let_go_after(dur, int(dur.min()) >= 0 and int(dur.max()) <= MAX_DUR_PS)
            and _let_go_after(track, int(track.min()) >= 0 and int(track.max()) < ntracks))


def _nest(track: np.ndarray, start: np.ndarray, dur: np.ndarray, ntracks: int):
    """``_depths``' (depth, max_depth), plus, from the C pass, (rows by track, start and
    longest first; each track's bounds in it) for the tiers (None on the numpy path)."""
    if _native_ok(track, start, dur, ntracks):
        # memory-mapped columns (IndexWriter._raw_columns): the C passes call this every
        # 2^20 rows, so the pages they walked leave the RSS as they go (jax308's track of
        # 11 M events would otherwise map 80 % of the starts and durations at once)
        maps = (track, start, dur)

        def release():
            tv._let_go(*maps)

        track = np.ascontiguousarray(track, np.int32)
        start = np.ascontiguousarray(start, np.int64)
        dur = np.ascontiguousarray(dur, np.int64)
        order, tb, bad = _native.track_order(track, start, dur, ntracks, release)
        for ti in np.flatnonzero(bad).tolist():  # as _track_order: sort only those
            # (by merging the track's sorted runs: np.lexsort((~dur[seg], start[seg]))
            # sorted every duration first, 0.3 s on jax308's two tracks of two runs each)
            _native.sort_track(order[tb[ti]:tb[ti + 1]], start, dur)
            release()
        depth = np.zeros(len(start), dtype=np.int16)
        max_depth = np.zeros(ntracks, dtype=np.int64)
        _native.depths(order, tb, start, dur, depth, max_depth, release)
        release()
        if len(depth) and int(max_depth.max(initial=0)) <= np.iinfo(np.int8).max:
            # held through the preview and spilled before the level sort: as the index saves
            # it (_NARROW) and the C tiers pass reads it, 13 MiB of jax308's 26 less
            depth = depth.astype(np.int8)
        return depth, max_depth, (order, tb)
    return (*_depths_numpy(track, start, dur, ntracks), None)


def _depths_numpy(track: np.ndarray, start: np.ndarray, dur: np.ndarray, ntracks: int):
    n = len(start)
    depth = np.zeros(n, dtype=np.int16)
    max_depth = np.zeros(ntracks, dtype=np.int64)
    if not n:
        return depth, max_depth
    order = _track_order(track, start, dur)
    tb = np.searchsorted(track[order], np.arange(ntracks + 1))
    block = 1 << 20
    for ti in range(ntracks):
        a, z = int(tb[ti]), int(tb[ti + 1])
        if z <= a:
            continue
        rows = order[a:z]
        # ends, doubled; zero-length events get half a picosecond so that they nest
        # inside what holds them
        e2 = dur[rows]
        zero = e2 == 0
        e2 += start[rows]
        e2 *= 2
        e2 += zero
        del zero
        e2.sort()
        top = 0
        for b0 in range(0, z - a, block):
            r = rows[b0:b0 + block]
            closed = np.searchsorted(e2, start[r] * 2, side="right")
            d = np.arange(b0, b0 + len(r), dtype=np.int64) - closed
            np.clip(d, 0, 32767, out=d)
            depth[r] = d
            top = max(top, int(d.max()))
        del e2
        if top and _crossing(rows, depth, start, dur, top):
            top = _stack_depths(rows, depth, start, dur)
        max_depth[ti] = top
    return depth, max_depth


def _ends2(rows, start, dur) -> np.ndarray:
    """Doubled ends: zero-length events get half a picosecond (see _depths)."""
    d = dur[rows]
    return (start[rows] + d) * 2 + (d == 0)


def _crossing(rows, depth, start, dur, top: int) -> bool:
    """Whether some event on this track ends after the event that holds it (Python
    tracer and torch traces have a few): counting open events then gives two
    overlapping events the same depth. An event's holder is the last event one level
    up that starts before it (``rows`` are in start order)."""
    d = depth[rows]
    upper = np.flatnonzero(d == 0)
    for level in range(1, top + 1):
        lower = np.flatnonzero(d == level)
        if len(lower) and len(upper):
            holder = upper[np.maximum(np.searchsorted(upper, lower) - 1, 0)]
            if (_ends2(rows[lower], start, dur) > _ends2(rows[holder], start, dur)).any():
                return True
        upper = lower
    return False


def _stack_depths(rows, depth, start, dur) -> int:
    """Depths by a stack of open events, for a track where events cross: an event goes
    one level above the events still open when it starts, after closing those that
    ended, so two events at one depth never overlap. Returns the track's maximum."""
    stack: list[int] = []
    top = 0
    for c0 in range(0, len(rows), 1 << 16):  # Python ints for one chunk at a time
        r = rows[c0:c0 + (1 << 16)]
        out = []
        for s, e in zip((start[r] * 2).tolist(), _ends2(r, start, dur).tolist()):
            while stack and stack[-1] <= s:
                stack.pop()
            out.append(len(stack))
            stack.append(e)
        d = np.minimum(np.array(out, np.int64), 32767)
        depth[r] = d
        top = max(top, int(d.max()))
    return top


def _build_tiers(track, depth, start, level, bounds, out: Path, native=None) -> list[int]:
    """Tier z: of the events shorter than 2^z ps (levels < z), the first in every
    (track, depth, 2^z bin), sorted by start; inputs are in index (level, start) order.
    Each tier is stored as its row ids and every ``FENCE``-th start. ``native``: for the C
    pass, (rows by track, start and longest first, the tracks' bounds in them, max depth
    per track, depth by row, each row's index row), or the last None where the rows are
    index rows already (the saved order, ``XPROF_ORDER_FILE``: the build's and
    write_tiers')."""
    n = len(start)
    if not n:
        return []
    top = int(np.flatnonzero(np.diff(bounds) > 0).max()) + 1
    zs = list(range(TIER_MIN_Z, max(top, TIER_MIN_Z) + 1, TIER_STEP))
    if native is not None:
        picks = _tier_rows_native(native, track, depth, start, level, bounds, zs)
    else:  # sorted one tier at a time
        picks = ((z, rows[np.argsort(start[rows], kind="stable")])
                 for z, rows in _tier_picks(track, depth, start, level, zs))
    tiers = []
    small = n < 2**31
    for z, rows in picks:
        # row ids only (index version 10): a window reads the main columns at them. The
        # tiers' own column copies were 375 MB of jax308's 912 MB index (1.2x the file);
        # a tier's rows in a window lie in one sorted stretch per duration level of the
        # main columns, the stretches the window's longer events are read from too.
        np.save(out / f"tier_{z}_rows.npy", rows.astype(np.int32 if small else np.int64, copy=False))
        np.save(out / f"tier_{z}_fence.npy", _fence(start, rows))
        tiers.append(z)
        del rows
    return tiers


def _fence(start: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``start[rows[::FENCE]]``, read in row order a few folios at a time (``tv._gathered``,
    1,024 rows a block): a tier's rows are sorted by start, not by row, and their every
    FENCE-th row all over a mapped start.npy mapped ~110 MiB of it at once on jax308 (the
    page cache's 2 MiB folios: ~250 fence rows share one), the tiers step's peak with it."""
    at = rows[::FENCE]
    if not isinstance(start, np.memmap) or len(at) < 2:
        return start[at]
    by_row = np.argsort(at, kind="stable")
    got = np.empty(len(at), start.dtype)
    got[by_row] = tv._gathered(start, at[by_row], 1 << 10)
    return got


def _tiers_here(kept: dict, level, bounds, out: Path, track_bounds, max_depth, progress) -> list[int]:
    """IndexWriter.finish's tiers, from its sorted columns in memory (``kept``: start,
    track and depth, let go here)."""
    _report(progress, 0.6, "building resolution tiers")
    _release_freed_memory()
    native = None
    if track_bounds is not None:
        # (the saved order's rows are index rows: no rank, the index's own depths)
        dep = kept["depth"]  # (the C pass reads int8 as saved: no int16 copy)
        native = (npy.load(out / XPROF_ORDER_FILE, mmap_mode="r"), track_bounds, max_depth,
                  dep if dep.dtype in (np.int8, np.int16) else np.ascontiguousarray(dep, np.int16), None)
    return _build_tiers(kept.pop("track"), kept.pop("depth"), kept.pop("start"), level, bounds, out, native)


def tiers_of_saved(folder: str, bounds: np.ndarray, max_depth: np.ndarray, track_bounds: np.ndarray) -> list[int]:
    """:func:`_tiers_here` from the columns a build has saved in ``folder`` (start, track,
    depth and the saved row order, memory-mapped), in another process (a Dask worker,
    IndexWriter.elsewhere): the same values, so the same tier files; the tiers made."""
    folder = Path(folder)
    start, track, depth = (npy.load(folder / f"{k}.npy", mmap_mode="r") for k in ("start", "track", "depth"))
    level = np.repeat(np.arange(LEVELS, dtype=np.int8), np.diff(bounds))
    native = (npy.load(folder / XPROF_ORDER_FILE, mmap_mode="r"), track_bounds, max_depth,
              np.ascontiguousarray(depth, np.int16), None)
    return _build_tiers(track, depth, start, level, bounds, folder, native)


def _save_counters(ev: TraceEvents, shift: int, out: Path) -> list[dict]:
    """The counters' series (``counter_<i>_t/_v.npy``) and their meta entries."""
    counters = []
    for i, c in enumerate(ev.counters):
        np.save(out / f"counter_{i}_t.npy", (c.t_ps - shift).astype(np.int64))
        np.save(out / f"counter_{i}_v.npy", c.value.astype(np.float64))
        counters.append({"track": c.track, "name": c.name, "unit": c.unit, "points": len(c.t_ps),
                         **({"stat": c.stat, "integer": c.integer} if c.stat else {})})
    return counters


def _keep_tier(kept: int, short: int) -> bool:
    """Tiers that would not thin out the events (more than 70 % kept) are not stored."""
    return bool(short) and kept <= TIER_KEEP_MAX * short


def _tier_rows_native(native, track, depth, start, level, bounds, zs):
    """The kept tiers' rows, each sorted by start (ties by track, depth and row: the stable
    sort of :func:`_tier_picks_native`'s walk order), by the C passes: one walk counts every
    tier and marks each row with the tiers that pick it (a bit per tier, ``tiers``' mask),
    then one merge of the duration levels' runs (each sorted by start) collects the kept
    tiers in start order (``tier_merge``). Before, a second walk collected them and each
    was sorted by start: 0.7 of jax308's 1.2 CPU s of tiers. ``track``/``depth``: the
    index's columns (any integer dtype), read for rows that tie on a start."""
    n = len(start)
    if len(zs) > 32 or track is None or depth is None or n >= 2**31 - 1:
        return [(z, rows[np.argsort(start[rows], kind="stable")])
                for z, rows in _tier_picks_native(native, start, level, bounds, zs)]
    order, tb, max_depth, dep, rank = native
    maps = (order, start, dep)  # (memory-mapped in the build: their pages let go as the C pass walks)
    start = np.ascontiguousarray(start, np.int64)
    mask = np.zeros(n, np.uint32)
    counts = _native.tiers(order, tb, max_depth, dep, rank, start, np.ascontiguousarray(level, np.int8), tuple(zs),
                           True, mask, lambda: tv._let_go(*maps))
    tv._let_go(*maps)
    keep = [j for j, (z, c) in enumerate(zip(zs, counts)) if _keep_tier(int(c), int(bounds[z]))]
    if not keep:
        return []
    top = zs[keep[-1]]  # the rows of the kept tiers are at the levels below it
    rows = _native.tier_merge(mask, sum(1 << j for j in keep), np.asarray(counts, np.int64),
                              np.ascontiguousarray(bounds[:top + 1], np.int64), start,
                              np.ascontiguousarray(track), np.ascontiguousarray(depth), lambda: tv._let_go(*maps))
    tv._let_go(*maps)
    return [(zs[j], r) for j, r in zip(keep, rows)]


def _tier_picks_native(native, start, level, bounds, zs):
    """The tiers' rows (unsorted) by the C pass: counted for every tier first, then
    collected only for the tiers that are kept, so the low tiers (~every event) are
    never held."""
    order, tb, max_depth, depth, rank = native
    args = (order, tb, max_depth, depth, rank, np.ascontiguousarray(start, np.int64),
            np.ascontiguousarray(level, np.int8))
    counts = _native.tiers(*args, tuple(zs), True)
    keep = [z for z, c in zip(zs, counts) if _keep_tier(int(c), int(bounds[z]))]
    if not keep:
        return []
    return list(zip(keep, _native.tiers(*args, tuple(keep), False)))


def _tier_picks(track, depth, start, level, zs):
    """The tiers' rows (unsorted), numpy: rows ordered by (track, depth, start), then per
    tier the first event of each (row, bin) among the short ones."""
    n = len(start)
    # rows ordered by (track, depth, start): a bin change or a row change starts a group
    wide = int(track.max()) >= (1 << 15)
    rowkey = track.astype(np.int64 if wide else np.int32) << 16
    rowkey |= depth.astype(rowkey.dtype)
    # by start (timsort: the index order is a few dozen sorted runs, one per level),
    # then stably by row: faster than a 2-key lexsort
    # int32 positions where they fit: this function is the index build's memory peak
    small = n < 2**31
    order = np.argsort(start, kind="stable")
    if small:
        order = order.astype(np.int32)
    by_row = np.argsort(rowkey[order], kind="stable")
    order = order[by_row]
    del by_row
    rk = rowkey[order]
    del rowkey
    row_id = np.empty(n, dtype=np.int32)
    row_id[0] = 0
    np.cumsum(rk[1:] != rk[:-1], out=row_id[1:])
    del rk
    out = []
    block = 1 << 20
    for z in zs:
        parts, short, prev = [], 0, None
        for i0 in range(0, n, block):  # in blocks: the scratch arrays stay small
            o = order[i0:i0 + block]
            m = np.flatnonzero(level[o] < z)
            if not m.size:
                continue
            short += len(m)
            b = start[o[m]] >> z
            m += i0
            r = row_id[m]
            first = np.empty(len(m), dtype=bool)
            first[0] = prev is None or b[0] != prev[0] or r[0] != prev[1]
            first[1:] = (b[1:] != b[:-1]) | (r[1:] != r[:-1])
            parts.append(m[first])
            prev = (b[-1], r[-1])
        if not short:
            continue
        keep = np.concatenate(parts)
        del parts
        if not _keep_tier(len(keep), short):
            continue
        out.append((z, order[keep]))
        del keep
    return out


def _release_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``): the
    decoder's many chunk-sized temporaries otherwise leave ~100 MB of freed but mapped
    heap behind, which the index build would then stack its own peak on."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _report(progress, fraction, message):
    if progress is not None:
        progress.update(fraction=fraction, message=message)


# ---------------------------------------------------------------------------
# One host's index
# ---------------------------------------------------------------------------


class TraceIndex:
    """A built index, its columns memory-mapped. ``decoder`` decodes an xplane index's
    event arguments (:class:`XEventDecoder`); a Chrome trace's index needs none."""

    def __init__(self, folder: Path | str, decoder: XEventDecoder | None = None):
        self.folder = Path(folder)
        self.decoder = decoder
        self.meta = orjson.loads((self.folder / "meta.json").read_bytes())
        self.n = self.meta["events"]
        self.origin_ps = int(self.meta["origin_ps"])
        self.end_ps = int(self.meta["end_ps"])
        self.cols = {k: _column(self.folder, k, mmap=bool(self.n)) for k in _COLS}
        self.levels = self.meta["levels"]
        self.tiers: dict = {}
        self.tier_fence: dict = {}
        if self.meta["tiers"] is not None:  # else made after the build (use_tiers)
            self._open_tiers(self.folder, self.meta["tiers"])
        self.fence = npy.load(self.folder / "start_fence.npy")
        self.names = self.meta["names"]
        self.tracks = self.meta["tracks"]
        self._flows: np.ndarray | None = None  # see flows
        self._flow: FlowEvents | None = None  # see flow
        self._flow_lock = threading.Lock()
        self._lower = None
        self._modules: dict[str, str] | None = None
        self._flow_split = None  # see flows_in
        self._zoom: tv.ZoomLevels | None = None
        self._zoom_lock = threading.Lock()  # one level computation at a time per index
        self._planes: dict[int, dict] = {}
        self._tiers_from: Path | None = None  # where use_tiers found them
        self._args = None
        self._lock = threading.Lock()
        self._ndepths: int | None = None  # see _pick_native

    @property
    def flows(self) -> np.ndarray:
        """(name, from track, from ps, to track, to ps) per arrow, in memory once read: a
        Chrome trace's own (``flows.npy``), then the flow-bound slices' (FLOW_ARROWS_FILE,
        their rows: their tracks and starts are read from the columns)."""
        f = self._flows
        if f is None:
            f = npy.load(self.folder / "flows.npy")
            a = self._flow_arrow_rows()
            if a is not None:
                if len(a):
                    start, track = self.cols["start"], self.cols["track"]
                    src, dst = a[:, 1], a[:, 2]
                    out = np.empty((len(f) + len(a), 5), np.int64)
                    out[:len(f)] = f
                    for j, col in enumerate((a[:, 0], track[src], start[src], track[dst], start[dst])):
                        out[len(f):, j] = col
                    f = out
            self._flows = f
        return f

    def _flow_arrow_rows(self) -> np.ndarray | None:
        """The flow-bound slices' arrows as rows (FLOW_ARROWS_FILE): the build's, else
        those :func:`write_tiers` made with the tiers of an index built without either
        (:meth:`use_tiers`), else made here from the flow rows (a reader other than the
        page's windows, which have the tiers made first); None where there are none."""
        for folder in (self.folder, self._tiers_from):
            if folder is not None and (folder / FLOW_ARROWS_FILE).exists():
                return npy.load(folder / FLOW_ARROWS_FILE)
        if not len(self.flow.seq):
            return None
        return _flow_arrows(self.flow, self.folder, self.names.index("flow"))[0]

    # -- windows --------------------------------------------------------------------------

    def overlapping(self, s: int, e: int, min_level: int = 0) -> np.ndarray:
        """Rows of every event at levels >= ``min_level`` overlapping [s, e), exactly."""
        out = [np.arange(lo, hi, dtype=np.int64) for lo, hi in self._level_stretches(s, e, min_level)]
        rows = np.concatenate(out) if out else np.zeros(0, np.int64)
        return self._overlap(rows, s, e)

    def _level_stretches(self, s: int, e: int, min_level: int) -> list[tuple[int, int]]:
        """Per duration level >= ``min_level`` (each level's rows in start order, its
        durations < 2^(level + 1) ps), the rows from the first that can reach ``s`` to the
        last starting before ``e``: a superset of those overlapping [s, e)."""
        start = self.cols["start"]
        out = []
        for k in range(min_level, LEVELS):
            a, z = self.levels[k], self.levels[k + 1]
            if z <= a:
                continue
            lo = _fenced(start, self.fence, a, z, s - (1 << (k + 1)), "right")
            hi = _fenced(start, self.fence, a, z, e, "left")
            if hi > lo:
                out.append((lo, hi))
        return out

    def overlapping_closed(self, s: int, e: int) -> np.ndarray:
        """Rows of every event overlapping [s, e] as XProf tests it (``Timespan::Overlaps``:
        both ends inclusive, so an event ending exactly at ``s`` is in)."""
        if e < s:
            return np.zeros(0, np.int64)
        rows = self.overlapping(s - 1, e + 1)
        if not rows.size:
            return rows
        st = self.cols["start"][rows]
        return rows[(st <= e) & (st + self.cols["dur"][rows] >= s)]

    def count_overlapping_closed(self, s: int, e: int) -> int:
        """``len(overlapping_closed(s, e))`` without making the rows: per level, the events
        starting in [s, e] are counted by binary search; only those starting in the strip
        before ``s`` that a level's durations can reach across are read."""
        if e < s or not self.n:
            return 0
        start, dur = self.cols["start"], self.cols["dur"]
        total = 0
        for k in range(LEVELS):
            a, z = self.levels[k], self.levels[k + 1]
            if z <= a:
                continue
            lo = _fenced(start, self.fence, a, z, s - (1 << (k + 1)), "right")  # dur < 2^(k+1)
            mid = _fenced(start, self.fence, a, z, s, "left")
            hi = _fenced(start, self.fence, a, z, e, "right")
            total += max(0, hi - mid)
            if mid > lo:
                total += int((np.asarray(start[lo:mid]) + np.asarray(dur[lo:mid]) >= s).sum())
        return total

    def _overlap(self, rows: np.ndarray, s: int, e: int) -> np.ndarray:
        if not rows.size:
            return rows
        st = self.cols["start"][rows]
        du = self.cols["dur"][rows]
        end = st + du
        ok = (st < e) & ((end > s) | ((du == 0) & (st >= s)))
        return rows[ok]

    def gather(self, rows: np.ndarray) -> dict:
        """The window columns of ``rows`` (plus ``rows``)."""
        out = {k: np.asarray(self.cols[k][rows]) for k in _WIN_COLS}
        out["rows"] = rows
        return out

    def xprof_visible(self, s: int, e: int, resolution: int) -> dict:
        """The events XProf's visibility filter returns for [s, e] at ``resolution``
        pixels (:mod:`profscope.tools.trace_visibility`): window columns sorted by start.

        Exactly XProf's, at every size: the events of the zoom levels a window at this
        resolution loads (made once per index, kept on disk: :meth:`zoom_levels`),
        filtered by XProf's rule."""
        r = tv.resolution_ps(max(0, e - s), resolution)
        if r:
            upto = tv.levels_needed(r)
            rows = self._xprof_loaded(s, e, self.zoom_levels(upto), upto)
        else:
            rows = self.overlapping_closed(s, e)
        sl = self.gather(rows)
        if not len(rows) or r == 0:
            order = np.argsort(sl["start"], kind="stable")
            return {k: v[order] for k, v in sl.items()}
        order = tv.event_order(sl["start"], sl["dur"], sl["track"])
        fe = self.flow
        flow_id = np.full(len(rows), -1, np.int64)
        flow_end = np.zeros(len(rows), bool)
        if len(fe.seq):
            # looked up before the rows are put in XProf's order: ascending rows search a
            # few times faster (5 -> 1 ms for a busy 1 % window of jax308)
            pos = np.clip(np.searchsorted(fe.seq, rows), 0, len(fe.seq) - 1)[order]
        sl = {k: v[order] for k, v in sl.items()}
        if len(fe.seq):
            hit = fe.seq[pos] == sl["rows"]
            flow_id[hit] = fe.flow_id[pos[hit]].astype(np.int64)
            flow_end[hit] = fe.kind[pos[hit]] == FLOW_END
        keep = tv.keep_mask(sl["start"], self._rule_durations(sl["dur"]), sl["track"], flow_id, flow_end, r)
        return {k: v[keep] for k, v in sl.items()}  # XProf's order is by start first

    def _xprof_loaded(self, s: int, e: int, level: np.ndarray, upto: int) -> np.ndarray:
        """The rows XProf loads for [s, e] down to zoom level ``upto``: its events at
        those levels overlapping the window. A window holding a good part of the trace
        reads the level column (one byte a row) rather than making every overlapping row
        (13.6 M of them, 0.1 GB of row ids, for jax308's whole span)."""
        if self.count_overlapping_closed(s, e) * 4 <= self.n:
            rows = self.overlapping_closed(s, e)
            return rows[level[rows] <= upto]
        rows = np.flatnonzero(np.asarray(level) <= upto)
        st = self.cols["start"][rows]
        return rows[(st <= e) & (st + self.cols["dur"][rows] >= s)]  # Timespan::Overlaps, ends inclusive

    def _rule_durations(self, dur: np.ndarray | None = None) -> np.ndarray:
        """``dur`` (default: every row's) as XProf's visibility rule sees them: the xplane
        reader stores a zero-length event as 1 ps long, as XProf's JSON shows it, but
        XProf's passes run on the event's real duration, 0 (``TraceEventLite``); an end
        1 ps later moves the next kept event's 100 µs spacing by that ps (jax308's
        ``ThreadpoolListener::StartRegion`` ends, issue 40). A Chrome trace keeps its
        zeros. (An xplane event really 1 ps long reads as 0 here.)"""
        dur = np.asarray(self.cols["dur"] if dur is None else dur)
        if self.meta["args_kind"] == "json":
            return dur
        return np.where(dur == 1, 0, dur)

    def zoom_levels(self, upto: int) -> np.ndarray:
        """XProf's zoom level of every row, down to level ``upto`` (deeper ones read as
        ``NOT_YET``): the ones :meth:`use_zoom_levels` was given, else computed here, in
        memory. The server never computes them in its own process: the app has a
        conversion worker write them (:func:`write_zoom_levels`) and hands them over
        before it asks for a filtered window."""
        with self._zoom_lock:
            z = self._zoom
            if z is None:
                fe = self.flow
                z = self._zoom = tv.ZoomLevels(self.cols["start"], self._rule_durations, self.cols["track"], fe.seq,
                                               fe.flow_id.view(np.int64), fe.kind == FLOW_END,  # (astype's bits: no copy)
                                               np.full(self.n, tv.NOT_YET, np.int8), -1, self._xprof_order(),
                                               (self.cols["dur"], self.meta["args_kind"] != "json"), self._flow_dense())
            if z.done < upto:
                z.compute(upto)
            return z.level

    def _open_tiers(self, folder: Path, zs: list[int]) -> None:
        self.tier_fence = {z: npy.load(folder / f"tier_{z}_fence.npy") for z in zs}
        self.tiers = {z: _mapped(folder / f"tier_{z}_rows.npy") for z in zs}

    def tiers_missing(self) -> bool:
        """Whether the build left the resolution tiers to a window's first need
        (``finish(windows=False)``) and none were handed over (:meth:`use_tiers`)."""
        return self.meta["tiers"] is None and self._tiers_from is None

    def use_tiers(self, folder: Path | str) -> None:
        """Take the tiers :func:`write_tiers` made for this index into ``folder``."""
        folder = Path(folder)
        with self._lock:
            if self._tiers_from is None:
                self._open_tiers(folder, orjson.loads((folder / TIERS_FILE).read_bytes()))
                self._tiers_from = folder

    def _nest_order(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The build's rows by (track, start, longest first) (``XPROF_ORDER_FILE``,
        memory-mapped) and each track's stretch of it (the tracks' event counts, in track
        id order, as the nesting pass grouped them); None where the build did not save it."""
        path = self.folder / XPROF_ORDER_FILE
        if not self.n or not path.exists():
            return None
        counts = [t["events"] for t in self.tracks]
        return _mapped(path), np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def _xprof_order(self) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`_nest_order` in XProf's order within a row: its zero-length ties
        (``XPROF_TIES_FILE``) put as XProf's rule orders them."""
        got = self._nest_order()
        ties = self.folder / XPROF_TIES_FILE
        if got is None or not ties.exists():
            return got
        order = np.array(got[0])  # a copy, fixed (an xplane with events of 0 ps: few)
        pos, rows = npy.load(ties)
        order[pos] = rows
        return order, got[1]

    def zoom_levels_missing(self, upto: int = tv.N_LEVELS - 1) -> bool:
        """Whether XProf's filter down to zoom level ``upto`` needs levels this index does
        not hold yet."""
        z = self._zoom
        return z is None or z.done < upto

    def use_zoom_levels(self, folder: Path | str) -> None:
        """Take the zoom levels kept in ``folder`` (:func:`write_zoom_levels`: every
        level, or those down to the depth it says), memory-mapped."""
        folder = Path(folder)
        level = npy.load(folder / ZOOM_LEVELS_FILE, mmap_mode="r")
        if level.shape != (self.n,) or level.dtype != np.int8:
            raise ValueError(f"{folder}: zoom levels of {level.shape} {level.dtype}, not of this index's {self.n} rows")
        done, flow = tv.N_LEVELS - 1, None
        if (folder / ZOOM_STATE_FILE).exists():  # made only as deep as a window asked
            st = orjson.loads((folder / ZOOM_STATE_FILE).read_bytes())
            done, flow = st["done"], (npy.load(folder / ZOOM_FLOW_FILE), st["flow_done"])
        fe = self.flow
        with self._zoom_lock:
            if self._zoom is not None and self._zoom.done >= done:
                return
            z = tv.ZoomLevels(self.cols["start"], self._rule_durations, self.cols["track"], fe.seq,
                              fe.flow_id.astype(np.int64), fe.kind == FLOW_END, level, done, self._xprof_order(),
                              (self.cols["dur"], self.meta["args_kind"] != "json"), self._flow_dense())
            self._zoom = z if flow is None else z.resumed(*flow)

    def window_rows(self, s: int, e: int, resolution: int) -> tuple[dict, bool]:
        """What to draw for [s, e) at ``resolution`` pixels: every event at least a pixel
        wide, and at most one narrower event per (track, depth, pixel); columns (``rows``,
        ``start``, ``dur``, ``track``, ``depth``, ``name``) sorted by start."""
        if e <= s or not self.n:
            return self.gather(np.zeros(0, np.int64)), False
        p = max(1, (e - s) // max(1, resolution))
        if self.tiers_missing():  # the app hands them over first (app/traces.py _window_tiers)
            raise RuntimeError(f"{self.folder}: the resolution tiers are not made yet (write_tiers)")
        tier = max((z for z in self.tiers if (1 << z) <= p), default=None)
        if tier is None:  # every event of the window: no tier is as fine as a pixel
            min_level, trows = 0, np.zeros(0, np.int64)
        else:  # the levels of a pixel and longer, and the tier's picks of the shorter ones
            min_level, t = tier, self.tiers[tier]
            t_start = _AtRows(self.cols["start"], t)  # the tier's starts, read through its rows
            lo = _fenced(t_start, self.tier_fence[tier], 0, len(t), s - (1 << tier), "right")
            hi = _fenced(t_start, self.tier_fence[tier], 0, len(t), e, "left")
            trows = t[lo:hi]
        picked = self._pick_native(s, e, p, resolution, min_level, trows)
        if picked is not None:
            rows, thinned = picked
            return self.gather(rows), bool(len(rows)) and (tier is not None or thinned)
        return self._window_rows_numpy(s, e, p, resolution, min_level, trows, tier is not None)

    def _pick_native(self, s: int, e: int, p: int, resolution: int, min_level: int, trows: np.ndarray):
        """The window's rows in start order, thinned, and whether any was thinned, by the C
        pass (``_trace_build.window_pick``: :meth:`_window_rows_numpy` in one pass over
        the candidates, ~5x fewer CPU seconds on a 1 % window of jax308 at 8000 px); None
        where it does not apply (no extension, a column of another dtype, a (track,
        depth) table too large for its pass)."""
        start = self.cols["start"]
        if _native is None or start.dtype != np.int64 or trows.dtype not in (np.int32, np.int64):
            return None
        dur, tail, at = _stored(self.cols["dur"])
        track, depth = _stored(self.cols["track"])[0], _stored(self.cols["depth"])[0]
        if dur.dtype not in (np.uint32, np.int64) or tail.dtype != np.int64:
            return None
        ndepths = self._ndepths
        if ndepths is None:  # the (track, depth) table's side: the deepest track's depth + 1
            ndepths = self._ndepths = max((int(t.get("maxDepth", 0)) for t in self.tracks), default=0) + 1
        stretches = np.asarray(self._level_stretches(s, e, min_level), np.int64).reshape(-1)
        got = _native.window_pick(start, dur, tail, at, track, depth, stretches, np.ascontiguousarray(trows),
                                  s, e, p, resolution, max(1, len(self.tracks)), ndepths)
        return None if got is None else (got[0][:got[1]], got[2])

    def _window_rows_numpy(self, s: int, e: int, p: int, resolution: int, min_level: int, trows: np.ndarray,
                           sampled: bool) -> tuple[dict, bool]:
        """:meth:`window_rows` in numpy (the C pass's twin, and where it declines)."""
        sl = self.gather(self.overlapping(s, e, min_level))
        if sampled:
            extra = self.gather(np.asarray(trows, np.int64))
            st, du = extra["start"], extra["dur"]
            ok = (st < e) & ((st + du > s) | ((du == 0) & (st >= s)))
            sl = {k: np.concatenate([sl[k], extra[k][ok]]) for k in sl}
        if not len(sl["rows"]):
            return sl, False
        # the rows by start, then the narrow ones thinned: each column is gathered once,
        # at the end, by the positions kept (a 1 % window of jax308 holds ~140,000 rows)
        order = np.argsort(sl["start"], kind="stable")
        narrow = np.flatnonzero(sl["dur"][order] < p)
        truncated = sampled
        if len(narrow):
            nr = order[narrow]
            px = np.clip((sl["start"][nr] - s) // p, 0, resolution + 1)
            first = first_per_pixel(sl["track"][nr], sl["depth"][nr], px)
            if len(first) < len(nr):
                truncated = True
                keep = np.ones(len(order), dtype=bool)
                keep[narrow] = False
                keep[narrow[first]] = True
                order = order[keep]
        return {k: v[order] for k, v in sl.items()}, truncated

    def counter(self, i: int, s: int, e: int, resolution: int) -> tuple[np.ndarray, np.ndarray]:
        """A counter series in [s, e) (and the point before it), decimated when it has
        more than 3 points per pixel: per pixel its first point, then its min and max at
        that point's time (so spikes narrower than a pixel still show)."""
        t = npy.load(self.folder / f"counter_{i}_t.npy", mmap_mode="r")
        v = npy.load(self.folder / f"counter_{i}_v.npy", mmap_mode="r")
        lo = max(0, int(np.searchsorted(t, s, side="left")) - 1)
        hi = int(np.searchsorted(t, e, side="right"))
        if hi - lo <= 3 * resolution:
            return np.asarray(t[lo:hi]), np.asarray(v[lo:hi])
        # bucket starts by binary search on the (memory-mapped) times: only the values
        # are read in full
        edges = s + ((e - s) / resolution * np.arange(resolution)).astype(np.int64)
        starts = np.unique(np.concatenate([[0], np.searchsorted(t[lo + 1:hi], edges, side="left") + 1]))
        starts = starts[starts < hi - lo]
        vv = np.asarray(v[lo:hi])
        first = vv[starts]
        mins = np.minimum.reduceat(vv, starts)
        maxs = np.maximum.reduceat(vv, starts)
        tf = np.asarray(t[lo + starts])  # fancy indexing reads only those times
        out_t = np.repeat(tf, 3)
        out_v = np.stack([first, mins, maxs], axis=1).reshape(-1)
        return np.append(out_t, t[hi - 1]), np.append(out_v, vv[-1])

    def counter_samples(self, i: int, s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        """Every sample of counter ``i`` in [s, e], bounds included (XProf's window)."""
        t = npy.load(self.folder / f"counter_{i}_t.npy", mmap_mode="r")
        v = npy.load(self.folder / f"counter_{i}_v.npy", mmap_mode="r")
        lo = int(np.searchsorted(t, s, side="left"))
        hi = int(np.searchsorted(t, e, side="right"))
        return np.asarray(t[lo:hi]), np.asarray(v[lo:hi])

    def xprof_counter_span(self) -> tuple[int, int] | None:
        """The first and last sample of the counters XProf's answer carries (an xplane's
        ``_counters_`` series: ``stat`` in their meta), or None without one."""
        got = getattr(self, "_xprof_counter_span", False)
        if got is False:
            ends = []
            for i, c in enumerate(self.meta["counters"]):
                if c.get("stat") and c["points"]:
                    t = npy.load(self.folder / f"counter_{i}_t.npy", mmap_mode="r")
                    ends += [int(t[0]), int(t[-1])]
            got = self._xprof_counter_span = (min(ends), max(ends)) if ends else None
        return got

    # -- details, search ------------------------------------------------------------------

    def check_row(self, row: int) -> None:
        if not 0 <= row < self.n:
            raise NotFound(f"no event with id {row} in {self.meta['path']}")

    def args(self, row: int) -> dict:
        off = int(self.cols["aoff"][row])
        ln = int(self.cols["alen"][row])
        if ln <= 0:
            return {}
        data = self._arg_bytes(off, ln)
        if self.meta["args_kind"] == "json":
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                return {}
            return value if isinstance(value, dict) else {"args": value}
        if self.decoder is None:
            raise TypeError(f"{self.folder} holds XEvents: open it with an XEventDecoder to read their args")
        plane = self.tracks[int(self.cols["track"][row])]["plane"]
        with self._lock:
            pm = self._planes.get(plane)
            if pm is None:
                pm = self._planes[plane] = self.decoder.plane_metadata((self.folder / f"plane_{plane}.pb").read_bytes())
        return self.decoder.event_args(data, pm)

    def json_args(self, rows: np.ndarray):
        """The args of many rows of a Chrome trace's index, in order (``{}`` for none):
        :meth:`args` with the offset columns read once for all rows (a tool reading every
        kernel's args reads ~10^5 rows)."""
        if self.meta["args_kind"] != "json":
            raise TypeError(f"{self.folder} holds XEvents: json_args reads a Chrome trace's index")
        rows = np.asarray(rows, np.int64)
        offs, lens = np.asarray(self.cols["aoff"])[rows].tolist(), np.asarray(self.cols["alen"])[rows].tolist()
        for off, ln in zip(offs, lens):
            value = None
            if ln > 0:
                try:
                    value = orjson.loads(self._arg_bytes(off, ln))
                except orjson.JSONDecodeError:
                    pass
            yield value if isinstance(value, dict) else ({"args": value} if value is not None else {})

    def _arg_bytes(self, off: int, ln: int) -> bytes:
        """``ln`` argument bytes at ``off``: from args.bin, or from the profile the index
        was built from (its plain planes' bytes are not copied), both mapped once (an
        export reads the args of every event)."""
        with self._lock:
            if self._args is None:
                seg = self.meta["args_segments"]
                self._seg_start = [a for a, _, _ in seg]
                self._args = {0: np.memmap(self.folder / "args.bin", dtype=np.uint8, mode="r")
                              if (self.folder / "args.bin").stat().st_size else np.zeros(0, np.uint8)}
        i = bisect.bisect_right(self._seg_start, off) - 1
        if i < 0:
            return b""
        first, where, at = self.meta["args_segments"][i]
        return self._mapped_args(where)[at + off - first:at + off - first + ln].tobytes()

    def _mapped_args(self, where: int) -> np.ndarray:
        if where not in self._args:
            source = self.meta["source"]
            try:
                mapped = np.memmap(source, dtype=np.uint8, mode="r")
            except (OSError, ValueError) as e:  # gone, unreadable, emptied
                raise NotFound(f"{self.meta['path']}: cannot read the profile's event details ({e.__class__.__name__}: "
                               f"{e}); open the run again once the file is back", file=self.meta["path"]) from None
            with self._lock:
                self._args.setdefault(where, mapped)
        return self._args[where]

    def flows_in(self, s: int, e: int) -> np.ndarray:
        """The arrows with a point in [s, e) or crossing it, in time order. Most arrows
        are short (a launch and its kernel, µs apart): those are sorted by their first
        point once and found by binary search, the few long ones are tested one by one."""
        f = self.flows
        if not len(f):
            return f
        (fs, lo, hi), (fl, llo, lhi) = self._flows_split()
        a = int(np.searchsorted(lo, s - FLOW_SHORT_PS, side="left"))
        b = int(np.searchsorted(lo, e, side="left"))
        parts = [fs[a:b][hi[a:b] >= s]]
        if len(fl):
            parts.append(fl[(llo < e) & (lhi >= s)])
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1 and len(out):
            out = out[np.argsort(np.minimum(out[:, 2], out[:, 4]), kind="stable")]
        return out

    def _flows_split(self):
        """The arrows sorted by their first point, split into the short (with their first
        and last points) and the long ones, once."""
        split = self._flow_split
        if split is None:
            f = self.flows
            lo, hi = np.minimum(f[:, 2], f[:, 4]), np.maximum(f[:, 2], f[:, 4])
            o = np.argsort(lo, kind="stable")
            f, lo, hi = f[o], lo[o], hi[o]
            short = hi - lo <= FLOW_SHORT_PS
            # both halves in one attribute: two windows at once on a fresh index saw the
            # short half set and the long one not yet (a TypeError in one of them)
            split = self._flow_split = ((f[short], lo[short], hi[short]), (f[~short], lo[~short], hi[~short]))
        return split

    def flows_first(self, s: int, e: int, limit: int) -> tuple[np.ndarray, int]:
        """``flows_in(s, e)[:limit]`` and ``len(flows_in(s, e))``. Where every arrow is
        short (jax308: 1.2 M arrows, none long) only the first ``limit`` found are
        gathered: a busy 1 % window of jax308 finds 24,000 and shows 5,000."""
        f = self.flows
        if not len(f):
            return f, 0
        (fs, lo, hi), (fl, _, _) = self._flows_split()
        if len(fl):
            out = self.flows_in(s, e)
            return out[:limit], len(out)
        a = int(np.searchsorted(lo, s - FLOW_SHORT_PS, side="left"))
        b = int(np.searchsorted(lo, e, side="left"))
        hit = np.flatnonzero(hi[a:b] >= s)
        return fs[a + hit[:limit]], len(hit)

    @property
    def flow(self) -> FlowEvents:
        """The slices bound to a flow (XProf's bind_id), by row: read on first use, since
        only XProf's answers and zoom levels ask (jax308: 2.4 M of them, 48 MB once widened,
        and most of an index's opening, 116 -> 30 ms; a merged view opens one per host).
        Stored narrow (:func:`_write_flows`)."""
        if self._flow is None:
            with self._flow_lock:
                if self._flow is None:
                    self._flow = FlowEvents(*(npy.load(self.folder / f"flow_{k}.npy").astype(dtype, copy=False)
                                              for k, dtype in _FLOW_DTYPES))
        return self._flow

    def _flow_dense(self) -> np.ndarray | None:
        """The build's numbering of the flow slices' flows (:data:`FLOW_DENSE_FILE`), mapped;
        None for an index without it (a Chrome trace's, whose flow points add flow slices)."""
        path = self.folder / FLOW_DENSE_FILE
        return _mapped(path) if path.exists() else None

    def flow_fields(self, rows: np.ndarray) -> dict[int, dict]:
        """XProf's FlowV2 fields of the flow-bound slices among ``rows``, by their
        position in ``rows`` (``trace_events_to_json.h``: ``bind_id``, ``cat``,
        ``flow_out`` on a flow's start, ``flow_in`` on its end, both on a middle slice)."""
        fe = self.flow
        if not len(fe.seq) or not len(rows):
            return {}
        pos = np.clip(np.searchsorted(fe.seq, rows), 0, len(fe.seq) - 1)
        hit = np.flatnonzero(fe.seq[pos] == rows)
        at = pos[hit]
        out = {}
        for k, fid, c, kind in zip(hit.tolist(), fe.flow_id[at].tolist(), fe.category[at].tolist(), fe.kind[at].tolist()):
            f = {"bind_id": fid}
            if c >= 0:
                f["cat"] = self.names[c]
            if kind in (FLOW_END, FLOW_MID):
                f["flow_in"] = True
            if kind in (FLOW_START, FLOW_MID):
                f["flow_out"] = True
            out[k] = f
        return out

    def module_named(self, program_id) -> str | None:
        """The name ``<module>(<program_id>)`` among the slice names (an XLA Modules
        line's), or None."""
        if isinstance(program_id, re.Match):
            program_id = program_id.group(1)
        if program_id is None:
            return None
        if self._modules is None:
            self._modules = {m.group(1): n for n in self.names if (m := MODULE_ID.search(n))}
        return self._modules.get(str(program_id))

    def lower_names(self) -> list[str]:
        if self._lower is None:
            self._lower = [s.lower() for s in self.names]
        return self._lower

    def rows_named(self, name_ids: list[int]) -> np.ndarray:
        if not name_ids or not self.n:
            return np.zeros(0, np.int64)
        return np.flatnonzero(np.isin(self.cols["name"], np.asarray(name_ids, dtype=np.int32)))


def write_zoom_levels(index_folder: Path | str, out: Path, progress=None, upto: int = tv.N_LEVELS - 1,
                      resume: Path | None = None) -> None:
    """XProf's zoom level of every row of the index in ``index_folder``, down to level
    ``upto`` (every level by default), into ``out`` (``ZOOM_LEVELS_FILE``, for
    :meth:`TraceIndex.use_zoom_levels`); ``resume``: a folder this wrote for a shallower
    depth, continued rather than redone. A pass per level over the whole trace
    (O(events x log nesting) each, :mod:`trace_visibility`), so the app runs it in a
    conversion worker, under its CPU and memory limits."""
    ix = TraceIndex(index_folder)
    if resume is not None:
        ix.use_zoom_levels(resume)
        z = ix._zoom
        z.level = np.array(z.level)  # writable, in memory
    last = tv.N_LEVELS - 1 if upto >= tv.N_LEVELS - 1 else upto
    # every level at once: the C pass makes them in one walk of the rows (ZoomLevels._levels_native)
    _report(progress, 0.0, f"XProf's zoom levels 1-{last + 1} ({ix.n:,} events)")
    level = ix.zoom_levels(last)
    np.save(out / ZOOM_LEVELS_FILE, level)
    if upto < tv.N_LEVELS - 1:  # a partial depth: what a deeper one resumes from
        st = ix._zoom.state()
        np.save(out / ZOOM_FLOW_FILE, st["flow_level"])
        (out / ZOOM_STATE_FILE).write_bytes(orjson.dumps({"done": st["done"], "flow_done": st["flow_done"]}))


def write_tiers(index_folder: Path | str, out: Path, progress=None) -> None:
    """The resolution tiers of the index in ``index_folder``, built without them
    (``finish(windows=False)``), into ``out`` (``tier_{z}_*.npy`` and ``TIERS_FILE``, for
    :meth:`TraceIndex.use_tiers`): the same picks as the build's, from its columns, the C
    pass walking the saved nesting order (its rows already index rows) or the numpy path
    where there is none."""
    folder = Path(index_folder)
    meta = orjson.loads((folder / "meta.json").read_bytes())
    _report(progress, 0.0, f"building resolution tiers ({meta['events']:,} events)")
    # track and depth as stored (maybe narrow: _tier_picks and the C pass widen them); each
    # row's duration level from the level bounds (rows are sorted by level), not from dur
    # (mapped, as the build's tiers read them: their pages let go as the C passes walk;
    # read whole, jax308's tiers worker peaked at 458 MiB, 1.47x the file, issue 40)
    cols = {k: npy.load(folder / f"{k}.npy", mmap_mode="r") for k in ("start", "track", "depth")}
    bounds = np.asarray(meta["levels"], np.int64)
    level = np.repeat(np.arange(LEVELS, dtype=np.int8), np.diff(bounds))
    native = None
    if _native is not None and (folder / XPROF_ORDER_FILE).exists() and meta["events"]:
        order = npy.load(folder / XPROF_ORDER_FILE, mmap_mode="r")
        order = order if order.dtype == np.int32 else np.ascontiguousarray(order, np.int32)
        tb = np.concatenate([[0], np.cumsum([t["events"] for t in meta["tracks"]], dtype=np.int64)])
        max_depth = np.asarray([t["maxDepth"] for t in meta["tracks"]], np.int64)
        dep = cols["depth"]  # (the C pass reads int8 as saved: no int16 copy)
        native = (order, tb, max_depth, dep if dep.dtype in (np.int8, np.int16) else np.ascontiguousarray(dep, np.int16),
                  None)
    tiers = _build_tiers(cols["track"], cols["depth"], cols["start"], level, bounds, out, native)
    del cols, level, native
    if not (folder / FLOW_ARROWS_FILE).exists() and (folder / "flow_seq.npy").exists():
        # the flow slices' arrows the build left with the tiers (_write_flows): the same
        # rows, from the flow rows as saved (widened as read) and the saved starts
        fe = FlowEvents(*(npy.load(folder / f"flow_{k}.npy").astype(dtype, copy=False) for k, dtype in _FLOW_DTYPES))
        arrows = _flow_arrows(fe, folder, meta["names"].index("flow") if len(fe.seq) else -1)[0]
        np.save(out / FLOW_ARROWS_FILE, _narrowest(arrows, (np.int32,)))
    (out / TIERS_FILE).write_bytes(orjson.dumps(tiers))
    _report(progress, 1.0, "tiers written")


class IndexCache:
    """Open indexes, the last few kept (their columns are memory-mapped); each opened with
    ``decoder`` (see :class:`TraceIndex`)."""

    def __init__(self, size: int = 8, decoder: XEventDecoder | None = None, most: int = 64):
        self.size = size
        self.most = most  # what hold may raise size to
        self.decoder = decoder
        self._open: OrderedDict[str, TraceIndex] = OrderedDict()
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")

    def hold(self, n: int) -> None:
        """Keep at least ``n`` open (at most ``most``): a merged view of more hosts than
        ``size`` reopened every host's index on each of its windows (32 pod hosts: a later
        window 100 -> 19 ms). An open index holds its meta (its names) and, once an XProf
        answer asked, its flows: 12 + 48 MB for jax308, ~0.1 MB for a small host."""
        with self._lock:
            self.size = max(self.size, min(n, self.most))

    def get(self, folder: Path) -> TraceIndex:
        key = os.fspath(folder)
        with self._lock:
            ix = self._open.get(key)
            if ix is not None:
                self._open.move_to_end(key)
                return ix
        ix = TraceIndex(folder, self.decoder)
        with self._lock:
            self._open[key] = ix
            while len(self._open) > self.size:
                self._open.popitem(last=False)
        return ix
