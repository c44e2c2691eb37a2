"""Views of a PyTorch CUDA memory snapshot (:class:`profscope.model.snapshot.Snapshot`).

Pure functions; each returns a JSON-able dict (camelCase keys, sizes in bytes, times in
``time_us`` as recorded by torch, event indices into ``device_traces[device]``). Bad
parameters raise :class:`~profscope.errors.BadRequest` (malformed / out of range) or
:class:`~profscope.errors.NotFound` (unknown device, stack id).

Semantics (PyTorch's ``torch/utils/viz/MemoryViz.js`` ``process_alloc_data`` and
``MemoryView.simulate_memory``):

* **Allocations** of a device: every ``alloc`` trace entry opens one, the next
  ``free_completed`` (or legacy ``free``) of the same address closes it. An ``alloc`` at an
  address that is still open closes the older one there (events were missing). Sizes are
  the trace's sizes (torch records the *requested* size), so "active bytes" on the
  timeline are requested bytes. **Pre-existing** allocations (made before recording
  began) are a ``free_completed`` with no open ``alloc`` (live from the start to that
  free; stack = the free's stack) and every active block of the final state whose address
  is not open at the end (live throughout; size = its ``requested_size``).
  "Live after event i" means ``start <= i < end`` (start = alloc index, -1 when
  pre-existing; end = free index, ``totalEvents`` when never freed).
* **Stacking** (memory_viz's layout): allocations stacked bottom-up in this order:
  pre-existing blocks alive at the end (by address), pre-existing frees (latest free
  first), then trace allocations in allocation order; an allocation's bottom is the sum
  of the sizes of the live allocations below it, so when one is freed, those above shift
  down.
* **State after event i**: the final segments, replayed backwards over the later
  ``segment_alloc/segment_free/segment_map/segment_unmap`` entries (map/unmap merge and
  split expandable segments as memory_viz does), and the allocations live after i. A
  block freed later in the trace has the trace's (requested) size as its size (exact
  rounded sizes are only known for blocks of the final state), and is
  ``active_pending_free`` between its ``free_requested`` and its ``free_completed``.
  Inactive blocks are the gaps inside segments.
* **Frame filter** (memory_viz ``frameFilter``): a frame is dropped when its name contains
  one of ``unwind::unwind``, ``CapturedTraceback::gather``, ``gather_with_cpp``,
  ``_start``, ``__libc_start_main``, ``PyEval_``, ``PyObject_``, ``PyFunction_``, or its
  filename contains one of ``core/boxing``, ``/Register``, ``/Redispatch``,
  ``pythonrun.c``, ``Modules/main.c``, ``Objects/call.c``, ``Objects/methodobject.c``,
  ``pycore_ceval.h``, ``ceval.c``, ``cpython/abstract.h``. We also drop unsymbolized
  frames (filename ``??`` or empty and name ``??`` or empty). Consecutive identical frames
  are collapsed (memory_viz ``elideRepeats`` writes ``<repeats N times>``; we set
  ``repeats: N``). Frames are listed innermost first (torch's order) in :func:`stack`.

Payloads::

    overview(snap, device) -> {
      "device": int, "devices": [{"device", "traceEntries", "segments", "reservedBytes"}],
      "format": {"format": "pickle"|"json"|"html", "pickleProtocol": int|null,
                 "era": "2023"|"2024"|"2025+"|"unknown", "eraKeys": {top, segment, block,
                 trace_entry: [str]}},
      "summary": {"traceEntries", "actions": {name: count},
                  "finalActiveBytes" (Σ size of active_* blocks), "finalAllocatedBytes"
                  (Σ size of active_allocated blocks), "finalRequestedBytes" (Σ
                  requested_size of active_* blocks), "finalReservedBytes" (Σ segment
                  total_size), "finalLiveBytes" (timeline total after the last event),
                  "peak": {"bytes", "event"|null, "timeUs"|null} (max of the timeline
                  total; event null when the trace is empty), "firstTimeUs"|null,
                  "lastTimeUs"|null, "hasTime": bool,
                  "peakReserved": {"bytes", "event"|null, "timeUs"|null} (max reserved),
                  "stacks": {"traceEntries", "traceEntriesWithStack", "blocks",
                             "blocksWithStack", "pythonFrames", "cppFrames"} (what the
                             recording kept: why a stack may be missing),
                  "preexisting": {"count", "bytes"} (pre-existing allocations),
                  "unmatchedFrees": {"count", "bytes"}, "allocations": int},
      "allocatorSettings": dict|null,
      "warnings": [{"code": "trace_overflow"|"no_trace"|"trace_starts_mid_run"|
                    "no_timestamps"|"preexisting_blocks", "message": str}],
      "annotations": [{"stage", "name", "device", "timeUs", "event"|null}],
      "annotationBands": [{"name", "startUs", "endUs", "startEvent", "endEvent"}],
      "ooms": [{"event", "timeUs"|null, "requestedBytes", "deviceFreeBytes", "stream",
                "stackId", "liveBytes", "reservedBytes", "largestFreeBlock"}],
      "segments": {"count", "reservedBytes", "expandableCount",
                   "byPool": [{"poolId": [int, int]|null, "count", "reservedBytes"}],
                   "byType": {type: {"count", "reservedBytes"}}}}

    timeline(snap, device, start=None, end=None, x="index"|"time", max_points=2000,
             top=MAX_DETAIL) -> {
      "device", "x": "index"|"time", "totalEvents",
      "window": {"start", "end"} (event indices, [start, end)), "windowX": [x0, x1] (x of
                the window's first event and of its end: event i spans [i, i + 1) by index,
                up to the next event's time in time, :func:`_x_of`),
      "allocations": [{"id", "addr", "size", "stream", "stackId", "allocIndex"|null,
                       "freeIndex"|null, "preexisting": bool,
                       "polygon": {"x": [...], "y0": [...], "y1": [...], "xEnd"}}]
                     (at most `top`: those live at the window's peak first, largest
                     first, then the largest of the rest live at a column (see
                     :func:`_stacked`); x in the requested unit; points kept only where
                     the bottom changes, plus the last column, so between two points the
                     value is that of the left one — a step function, whose last step
                     ends at xEnd),
      "allocationsInWindow": int, "visibleInWindow": int (live at a column), "drawn": int,
      "detail": top, "maxDetail": MAX_DETAIL, "detailCapped": int|null (the detail the
      polygons were lowered to, to stay within MAX_POLYGON_POINTS points),
      "others": {"x", "y0", "y1"} (the rest of the live bytes, on top of the drawn ones),
      "total": {"x", "bytes", "index"} (max filter: each point is the maximum of its
                bucket at its exact position; first and last event of the window kept;
                these are the columns the polygons are sampled at),
      "reserved": {"x", "reservedBytes", "index"} (same decimation),
      "peak": {"bytes", "event", "x", "drawnBytes" (of them, in drawn polygons),
               "liveAllocations"} (exact maximum in the window),
      "decimated": bool}

    segment_timeline(snap, device, start, end, x, max_points, top) -> timeline's shape
      with "segments" (each also "action": "segment_alloc"|"segment_map"|null) and
      "segmentsInWindow" for "allocations"/"allocationsInWindow", the reserved line as
      the total (no "total"), "peak" of reserved bytes ("liveSegments").

    events(snap, device, start=None, end=None, q=None) -> {"device", "totalEvents",
      "start", "end", "actionNames", "rows": {"event", "action", "addr", "size",
      "stream", "timeUs", "stackId", "version"} (columns, at most EVENTS_PAGE rows),
      "query", "queryKind": "address"|"frame"|null, "matches": [event], "matchCount"}

    state_at(snap, device, event=None, max_blocks=20000) -> {
      "device", "event" (null = final state), "timeUs"|null, "totalEvents",
      "segments": [{"address", "size", "stream", "segmentType"|null, "poolId"|null,
                    "expandable"|null, "stackId",
                    "blocks": [{"address", "size", "requested", "state", "stackId",
                                "allocIndex"|null, "freeIndex"|null}]}]  (by address),
      "totals": {"reservedBytes", "allocatedBytes", "activeBytes", "requestedBytes",
                 "internalFragmentation" (Σ size-requested of active blocks),
                 "externalFragmentation" (inactive bytes inside segments),
                 "largestFreeBlock", "segments", "activeBlocks", "inactiveBlocks",
                 "orphanBlocks" (live blocks outside every segment)},
      "blocksShown": int, "blocksOmitted": int}

    stack(snap, stack_id, filtered=True) -> {"stackId", "filtered", "unfilteredCount",
      "frames": [{"filename", "line", "name", "repeats"}],
      "userFrame": int|null (index in "frames" of the first user frame, the frame that
                   names the stack's site in compare: :func:`_user_frame`),
      "userFrameKind": "python"|"cpp"|"runtime"|"none" (its kind there)}

    stacks_at(snap, device, event=None, max_nodes=2000, python_only=False) -> {
      "device", "event", "timeUs"|null, "totalBytes", "atPeak": bool,
      "ids", "labels", "parents", "values", "hover" (Plotly icicle, branchvalues "total":
      root "root" = all live bytes; each level one filtered frame, outermost first;
      "<no stack>" for allocations without one; "other" nodes hold what the node cap cut),
      "nodes", "nodesOmitted"}

    compare(a, b, device_a, device_b, max_sites=500) -> {
      "a": {"path", "device", "liveBytes", "liveBlocks"}, "b": {...},
      "summary": {"onlyA": {"sites", "blocks", "bytes"}, "onlyB": {...},
                  "both": {"sites", "blocksA", "bytesA", "blocksB", "bytesB"},
                  "deltaBytes" (B - A)},
      "sites": [{"site": {"filename", "line", "name", "short", "kind", "op"}|null (the
                 first user frame, :func:`_user_frame`: kind "python" (outside torch and
                 the standard library), "cpp" (a C++-only stack, past the allocator /
                 dispatcher / autograd plumbing) or "runtime"; op: the ATen operator),
                 "stackIdA"|null, "stackIdB"|null, "in": "onlyA"|"onlyB"|"both",
                 "bytesA", "countA", "bytesB", "countB", "deltaBytes", "deltaCount"}]
               (sites whose bytes or counts differ, by |deltaBytes| descending),
      "sitesOmitted": int,
      "segments": {"onlyA": [{"address", "size"}], "onlyB": [...],
                   "onlyACount", "onlyBCount", "onlyABytes", "onlyBBytes", "common"}}

A site is the filtered stack (frames as (filename, line, name)); the live blocks of the
final state (``active_*``, block ``size``) are grouped by it.
"""

from __future__ import annotations

import json
import math
import re
import weakref

import numpy as np

from profscope.errors import BadRequest, NotFound
from profscope.model import npy_files as npy
from profscope.model.snapshot import Snapshot
from profscope.tools import memory_profile_xprof as xm

OMIT_FUNCTIONS = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                  "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_")
OMIT_FILENAMES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
                  "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c",
                  "cpython/abstract.h")
_ACTIVE_STATES = ("active_allocated", "active_pending_free", "active_awaiting_free")

# -- per-snapshot derived data (computed once, dropped with the snapshot) -------------

_CACHE: dict[int, dict] = {}


def _cache(snap: Snapshot) -> dict:
    k = id(snap)
    c = _CACHE.get(k)
    if c is None:
        c = _CACHE[k] = {}
        weakref.finalize(snap, _CACHE.pop, k, None)
    return c


def _check_device(snap: Snapshot, device) -> int:
    try:
        d = int(device)
    except (TypeError, ValueError):
        raise BadRequest(f"device must be an integer, not {device!r}") from None
    if d not in snap.devices:
        raise NotFound(f"device {d} is not in this snapshot (devices: {snap.devices})",
                       file=snap.path)
    return d


class _Dev:
    """Derived columns of one device."""

    def __init__(self, snap: Snapshot, device: int):
        self.device = device
        tr = snap.traces[device] if device < len(snap.traces) else None
        n = len(tr) if tr is not None else 0
        self.n = n
        names = snap.action_names
        code = {nm: i for i, nm in enumerate(names)}
        act = tr.action if tr is not None else np.zeros(0, np.uint8)
        addr = tr.addr if tr is not None else np.zeros(0, np.int64)
        size = tr.size if tr is not None else np.zeros(0, np.int64)
        self.trace = tr
        self.time = tr.time_us if tr is not None else np.zeros(0, np.int64)
        self.has_time = bool(n) and bool((self.time >= 0).all())

        def is_(*acts):
            m = np.zeros(n, bool)
            for a in acts:
                if a in code:
                    m |= act == code[a]
            return m

        # final-state blocks of this device
        seg = snap.segments
        blk = snap.blocks
        seg_dev = seg.device == device
        self.seg_rows = np.nonzero(seg_dev)[0]
        bmask = seg_dev[blk.segment] if len(blk) else np.zeros(0, bool)
        active_codes = [snap.state_names.index(s) for s in _ACTIVE_STATES if s in snap.state_names]
        bact = bmask & np.isin(blk.state, active_codes)
        self.final_blocks = np.nonzero(bact)[0]
        fb_addr = blk.address[self.final_blocks]

        # allocations: match alloc / free_completed by address in trace order
        is_alloc = is_("alloc")
        is_free = is_("free_completed", "free")
        ev = np.nonzero(is_alloc | is_free)[0]
        fr_idx = np.nonzero(is_("free_requested"))[0]
        # the events by address, in trace order at each (a stable sort of the addresses:
        # ``ev`` ascends); addresses are compared as they are, ranked only for the keys of
        # the free_requested match below (an inverse of np.unique would argsort them all)
        a_ev = addr[ev]
        order = np.argsort(a_ev, kind="stable")
        ev_s, r_s = ev[order], a_ev[order]
        uniq = np.sort(np.concatenate([a_ev, fb_addr, addr[fr_idx]]))
        if len(uniq):
            uniq = uniq[np.concatenate(([True], uniq[1:] != uniq[:-1]))]
        r_fr = np.searchsorted(uniq, addr[fr_idx])
        alloc_s = is_alloc[ev_s]
        same_next = np.zeros(len(ev_s), bool)
        same_next[:-1] = r_s[1:] == r_s[:-1]
        # trace allocations
        ai = np.nonzero(alloc_s)[0]
        a_end = np.full(len(ai), n, np.int64)
        has_next = same_next[ai]
        a_end[has_next] = ev_s[ai[has_next] + 1]
        # unmatched frees: first of their address or after another free
        prev_alloc = np.zeros(len(ev_s), bool)
        prev_alloc[1:] = alloc_s[:-1] & (r_s[1:] == r_s[:-1])
        ui = np.nonzero(~alloc_s & ~prev_alloc)[0]
        u_idx = ev_s[ui]
        # open at the end
        open_addrs = r_s[ai[~has_next]]
        pre_fb = ~np.isin(fb_addr, open_addrs)
        pre_rows = self.final_blocks[pre_fb]
        pre_rows = pre_rows[np.argsort(blk.address[pre_rows], kind="stable")]
        u_order = np.argsort(-u_idx, kind="stable")
        u_idx = u_idx[u_order]
        a_idx = ev_s[ai]
        a_order = np.argsort(a_idx, kind="stable")
        a_idx, a_end = a_idx[a_order], a_end[a_order]
        npre, nu = len(pre_rows), len(u_idx)
        self.start = np.concatenate([np.full(npre + nu, -1, np.int64), a_idx])
        self.end = np.concatenate([np.full(npre, n, np.int64), u_idx, a_end])
        self.addr = np.concatenate([blk.address[pre_rows], addr[u_idx], addr[a_idx]])
        self.size = np.concatenate([blk.requested_size[pre_rows], size[u_idx], size[a_idx]])
        st = tr.stack if tr is not None else np.zeros(0, np.int32)
        self.stack = np.concatenate([blk.stack[pre_rows], st[u_idx], st[a_idx]]).astype(np.int64)
        strm = tr.stream if tr is not None else np.zeros(0, np.int64)
        self.stream = np.concatenate([seg.stream[blk.segment[pre_rows]], strm[u_idx], strm[a_idx]])
        self.npre = npre + nu
        self.n_unmatched = nu
        self.n_pre_blocks = npre
        # exact block size / requested / state for allocations alive at the end
        self.bsize = self.size.copy()
        self.breq = self.size.copy()
        self.pending_final = np.zeros(len(self.size), bool)
        alive = self.end == n
        if alive.any() and len(self.final_blocks):
            fbo = np.argsort(fb_addr, kind="stable")
            sa = fb_addr[fbo]
            ea = self.addr[alive]
            pos = np.clip(np.searchsorted(sa, ea), 0, len(sa) - 1)
            ok = sa[pos] == ea
            rows = self.final_blocks[fbo[pos]]
            ia = np.nonzero(alive)[0]
            self.bsize[ia[ok]] = blk.size[rows[ok]]
            self.breq[ia[ok]] = blk.requested_size[rows[ok]]
            if "active_allocated" in snap.state_names:
                self.pending_final[ia[ok]] = blk.state[rows[ok]] != snap.state_code("active_allocated")
            self.stack[ia[ok]] = np.where(self.stack[ia[ok]] == 0, blk.stack[rows[ok]], self.stack[ia[ok]])
        self.pending_since = self._pending_since(uniq, r_fr, fr_idx)
        # total live bytes after each event
        base = int(self.size[self.start < 0].sum())
        delta = np.zeros(n + 1, np.int64)
        np.add.at(delta, self.start[self.start >= 0], self.size[self.start >= 0])
        fe = self.end < n
        np.add.at(delta, self.end[fe], -self.size[fe])
        self.base = base
        self.total = base + np.cumsum(delta[:n])
        # reserved bytes after each event
        sd = np.zeros(n, np.int64)
        for a, sgn in (("segment_alloc", 1), ("segment_map", 1), ("segment_free", -1),
                       ("segment_unmap", -1)):
            m = is_(a)
            sd[m] += sgn * size[m]
        self.final_reserved = int(seg.total_size[self.seg_rows].sum())
        csd = np.cumsum(sd)
        self.reserved = self.final_reserved - (int(csd[-1]) if n else 0) + csd
        self.seg_events = np.nonzero(is_("segment_alloc", "segment_free", "segment_map",
                                         "segment_unmap"))[0]
        self.counts = {}
        if n:
            # one pass per action name: bincount would first widen 7 M uint8 codes to intp
            bc = [np.count_nonzero(act == i) for i in range(len(names))]
            self.counts = {names[i]: int(c) for i, c in enumerate(bc) if c}

    def _pending_since(self, uniq, r_fr, fr_idx) -> np.ndarray:
        """Each allocation's first free_requested inside its life (-1: pending at the end
        with none in the trace, -2: none). ``uniq``: every address, sorted; ``r_fr``: the
        free_requested's ranks in it, at trace indices ``fr_idx``."""
        n = self.n
        ps = np.full(len(self.size), -2, np.int64)
        el_rank = np.searchsorted(uniq, self.addr)
        if len(fr_idx) and len(self.size):
            key = el_rank * (n + 2) + (self.start + 1)
            ko = np.argsort(key, kind="stable")
            ks = key[ko]
            fk = r_fr * (n + 2) + (fr_idx + 1)
            c = np.searchsorted(ks, fk, side="right") - 1
            okc = c >= 0
            cand = ko[np.clip(c, 0, None)]
            okc &= (el_rank[cand] == r_fr) & (self.end[cand] > fr_idx) & (self.start[cand] < fr_idx)
            # an allocation's first free_requested (the earliest event index of those matched)
            first = np.full(len(self.size), n, np.int64)
            np.minimum.at(first, cand[okc], fr_idx[okc])
            hit = first < n
            ps[hit] = first[hit]
        ps[(ps == -2) & self.pending_final] = -1
        return ps

    def live_at(self, i: int) -> np.ndarray:
        return np.nonzero((self.start <= i) & (self.end > i))[0]

    def peak(self) -> tuple[int, int | None]:
        if self.n == 0:
            return self.base, None
        i = int(np.argmax(self.total))
        return int(self.total[i]), i


def _dev(snap: Snapshot, device) -> _Dev:
    d = _check_device(snap, device)
    c = _cache(snap)
    v = c.get(("dev", d))
    if v is None:
        v = c[("dev", d)] = _Dev(snap, d)
    return v


# What _Dev derives, saved beside the model's columns (the app's cache folder) so that
# the next process's first view reads it back instead of deriving it again: the page
# asks for the overview, then the timeline, each in a conversion worker of its own, and
# on a 1 GB snapshot the derivation (sorting 7 M addresses) is ~2 s of each.
_DEV_ARRAYS = ("seg_rows", "final_blocks", "start", "end", "addr", "size", "stack", "stream", "bsize",
               "breq", "pending_final", "pending_since", "total", "reserved", "seg_events")
_DEV_SCALARS = ("n", "has_time", "npre", "n_unmatched", "n_pre_blocks", "base", "final_reserved", "counts")


def save_derived(snap: Snapshot, device, folder) -> None:
    """Write device ``device``'s derived columns (:class:`_Dev`) into ``folder`` (the
    folder of the snapshot's saved model), for :func:`load_derived`."""
    dv = _dev(snap, device)
    for k in _DEV_ARRAYS:
        np.save(folder / f"dev{dv.device}_{k}.npy", getattr(dv, k))
    (folder / f"dev{dv.device}.json").write_text(json.dumps({k: getattr(dv, k) for k in _DEV_SCALARS}))


def load_derived(snap: Snapshot, folder) -> None:
    """Take the devices' derived columns that :func:`save_derived` wrote into ``folder``
    as ``snap``'s own (devices without them are derived on first use)."""
    c = _cache(snap)
    for d in snap.devices:
        meta = folder / f"dev{d}.json"
        if ("dev", d) in c or not meta.exists():
            continue
        dv = _Dev.__new__(_Dev)
        dv.device = d
        dv.__dict__.update(json.loads(meta.read_text()))
        dv.__dict__.update({k: npy.load(folder / f"dev{d}_{k}.npy") for k in _DEV_ARRAYS})
        dv.trace = snap.traces[d] if d < len(snap.traces) else None
        dv.time = dv.trace.time_us if dv.trace is not None else np.zeros(0, np.int64)
        if len(dv.total) != dv.n:
            raise ValueError(f"{folder}: derived columns of device {d} do not match its trace")
        c[("dev", d)] = dv


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def _t(dv: _Dev, i) -> int | None:
    if i is None or not (0 <= i < dv.n):
        return None
    t = int(dv.time[i])
    return t if t >= 0 else None


# -- overview --------------------------------------------------------------------------


def _era(snap: Snapshot) -> str:
    k = snap.era_keys
    if "external_annotations" in k.get("top", []) or "compile_context" in k.get("trace_entry", []):
        return "2025+"
    if "allocator_settings" in k.get("top", []) or "address" in k.get("block", []):
        return "2024"
    if "history" in k.get("block", []) or "segments" in k.get("top", []):
        return "2023"
    return "unknown"


def _peak_reserved(dv: _Dev) -> dict:
    """The most reserved bytes (Σ segment sizes, PyTorch's "reserved") after any event."""
    if dv.n == 0:
        return {"bytes": dv.final_reserved, "event": None, "timeUs": None}
    i = int(np.argmax(dv.reserved))
    return {"bytes": int(dv.reserved[i]), "event": i, "timeUs": _t(dv, i)}


def overview(snap: Snapshot, device) -> dict:
    dv = _dev(snap, device)
    d = dv.device
    seg = snap.segments
    blk = snap.blocks
    devices = []
    for x in snap.devices:
        rows = seg.device == x
        devices.append({"device": x, "traceEntries": len(snap.traces[x]) if x < len(snap.traces) else 0,
                        "segments": int(rows.sum()), "reservedBytes": int(seg.total_size[rows].sum())})
    fb = dv.final_blocks
    alloc_code = snap.state_code("active_allocated")
    peak_bytes, peak_i = dv.peak()
    unmatched = slice(dv.n_pre_blocks, dv.npre)
    summary = {
        "traceEntries": dv.n, "actions": dv.counts,
        "finalActiveBytes": int(blk.size[fb].sum()),
        "finalAllocatedBytes": int(blk.size[fb][blk.state[fb] == alloc_code].sum()),
        "finalRequestedBytes": int(blk.requested_size[fb].sum()),
        "finalReservedBytes": dv.final_reserved,
        "finalLiveBytes": int(dv.total[-1]) if dv.n else dv.base,
        "peak": {"bytes": peak_bytes, "event": peak_i, "timeUs": _t(dv, peak_i)},
        "peakReserved": _peak_reserved(dv),
        "firstTimeUs": _t(dv, 0) if dv.has_time else None,
        "lastTimeUs": _t(dv, dv.n - 1) if dv.has_time else None,
        "hasTime": dv.has_time,
        "preexisting": {"count": dv.npre, "bytes": int(dv.size[:dv.npre].sum())},
        "unmatchedFrees": {"count": dv.n_unmatched, "bytes": int(dv.size[unmatched].sum())},
        "allocations": len(dv.size),
        "stacks": stack_recording(snap, dv),
    }
    warnings = []
    if snap.trace_overflow:
        warnings.append({"code": "trace_overflow", "message": "the trace ring buffer overflowed: "
                         "events may be missing (raise _record_memory_history(max_entries=...))"})
    if dv.n == 0:
        warnings.append({"code": "no_trace", "message": "no trace recorded for this device "
                         "(only the final allocator state is known)"})
    elif not dv.has_time:
        warnings.append({"code": "no_timestamps", "message": "trace entries have no time_us; "
                         "the timeline can only use event indices"})
    if dv.n_unmatched:
        warnings.append({"code": "trace_starts_mid_run", "message":
                         f"the trace starts mid-run: {dv.n_unmatched} frees of blocks allocated "
                         "before recording began (shown as pre-existing)"})
    if dv.n_pre_blocks and dv.n:
        warnings.append({"code": "preexisting_blocks", "message":
                         f"{dv.n_pre_blocks} blocks alive at the end were allocated before "
                         "recording began (shown as pre-existing)"})
    anns, bands, open_ = [], [], {}
    tsorted = np.maximum.accumulate(dv.time) if dv.has_time else None
    for a in snap.external_annotations:
        if not isinstance(a, dict):
            continue
        ad = a.get("device")
        if ad is not None and ad != d:
            continue
        tu = a.get("time_us")
        ev = None
        if tsorted is not None and isinstance(tu, (int, float)):
            j = int(np.searchsorted(tsorted, tu, side="left"))
            ev = min(j, dv.n - 1)
        item = {"stage": _jsonable(a.get("stage")), "name": _jsonable(a.get("name")), "device": ad,
                "timeUs": tu, "event": ev}
        anns.append(item)
        if item["stage"] == "START":
            open_.setdefault(item["name"], []).append(item)
        elif item["stage"] == "END" and open_.get(item["name"]):
            s = open_[item["name"]].pop()
            bands.append({"name": item["name"], "startUs": s["timeUs"], "endUs": tu,
                          "startEvent": s["event"], "endEvent": ev})
    ooms = []
    for o in snap.oom_events:
        if o.get("device") != d:
            continue
        i = int(o["index"])
        st = state_at(snap, d, i, max_blocks=0)["totals"] if len(ooms) < 50 else None
        ooms.append({"event": i, "timeUs": _t(dv, i), "requestedBytes": int(o["size"]),
                     "deviceFreeBytes": int(o["device_free"]), "stream": int(o["stream"]),
                     "stackId": int(o["stack"]), "liveBytes": int(dv.total[i]),
                     "reservedBytes": int(dv.reserved[i]),
                     "largestFreeBlock": st["largestFreeBlock"] if st else None})
    rows = dv.seg_rows
    by_pool: dict = {}
    by_type: dict = {}
    for r in rows.tolist():
        p = tuple(int(x) for x in seg.pool_id[r])
        pk = None if p == (-1, -1) else list(p)
        e = by_pool.setdefault(p, {"poolId": pk, "count": 0, "reservedBytes": 0})
        e["count"] += 1
        e["reservedBytes"] += int(seg.total_size[r])
        ty = snap.strings[seg.segment_type[r]] or "unknown"
        e = by_type.setdefault(ty, {"count": 0, "reservedBytes": 0})
        e["count"] += 1
        e["reservedBytes"] += int(seg.total_size[r])
    return {
        "device": d, "devices": devices,
        "format": {"format": snap.format, "pickleProtocol": snap.pickle_protocol, "era": _era(snap),
                   "eraKeys": _jsonable(snap.era_keys)},
        "summary": summary, "allocatorSettings": _jsonable(snap.allocator_settings),
        "warnings": warnings, "annotations": _jsonable(anns), "annotationBands": _jsonable(bands),
        "ooms": ooms,
        "segments": {"count": len(rows), "reservedBytes": dv.final_reserved,
                     "expandableCount": int(seg.is_expandable[rows].sum()),
                     "byPool": list(by_pool.values()), "byType": by_type},
    }


# -- timeline --------------------------------------------------------------------------


def _maxfilter(values: np.ndarray, ws: int, we: int, max_points: int) -> np.ndarray:
    """Event indices (sorted) of the bucket maxima of values[ws:we], plus ws and we-1."""
    w = we - ws
    if w <= max_points:
        return np.arange(ws, we, dtype=np.int64)
    b = -(-w // max_points)
    nb = -(-w // b)
    pad = np.full(nb * b, np.iinfo(np.int64).min, np.int64)
    pad[:w] = values[ws:we]
    pos = np.argmax(pad.reshape(nb, b), axis=1) + np.arange(nb) * b + ws
    return np.unique(np.concatenate([pos, [ws, we - 1]]))


def _steps(x: np.ndarray, *ys: np.ndarray) -> np.ndarray:
    """Mask of points to keep so that a left-step reading of ys is unchanged."""
    k = len(x)
    keep = np.ones(k, bool)
    if k <= 2:
        return keep
    ch = np.zeros(k - 1, bool)
    for y in ys:
        ch |= y[1:] != y[:-1]
    keep[1:-1] = ch[1:] | ch[:-1]
    return keep


#: The most allocations the timeline draws as polygons of their own (memory_viz's
#: ``create_trace_view`` draws up to 15,000 by default, its "Detail" slider lowers that).
MAX_DETAIL = 15_000


def _window(dv: _Dev, start, end, x: str) -> tuple[int, int]:
    n = dv.n
    if x not in ("index", "time"):
        raise BadRequest(f"x must be 'index' or 'time', not {x!r}")
    if n == 0:
        raise BadRequest(f"device {dv.device} has no trace entries: there is no timeline "
                         "(see the allocator state view)")
    if x == "time":
        if not dv.has_time:
            raise BadRequest("this trace has no time_us: use x=index")
        ts = np.maximum.accumulate(dv.time)
        ws = 0 if start is None else int(np.searchsorted(ts, float(start), side="left"))
        we = n if end is None else int(np.searchsorted(ts, float(end), side="left"))
    else:
        ws = 0 if start is None else int(start)
        we = n if end is None else int(end)
        if ws < 0 or we > n:
            raise BadRequest(f"window [{start}, {end}) is outside the trace's events [0, {n})")
    if we <= ws:
        raise BadRequest(f"empty window [{start}, {end}) (events {ws}..{we})")
    return ws, we


#: The most polygon points one timeline answer holds (~40 bytes each in JSON). Points
#: come from frees below a live allocation; a trace whose long-lived allocations sit on
#: top of constant churn could ask for 15,000 x 2,000: then fewer get their own polygon.
MAX_POLYGON_POINTS = 600_000


def _stacked(el_start: np.ndarray, el_end: np.ndarray, el_size: np.ndarray, total: np.ndarray,
             ws: int, we: int, max_points: int, top: int) -> dict:
    """:func:`_stacked_once`, with ``top`` lowered until the polygons fit in
    :data:`MAX_POLYGON_POINTS` (``capped``: the ``top`` that fit, else None)."""
    capped = None
    for _ in range(6):
        lay = _stacked_once(el_start, el_end, el_size, total, ws, we, max_points, top)
        pts = len(lay["pointEl"])
        if pts <= MAX_POLYGON_POINTS or top <= 1:
            break
        top = capped = max(1, int(top * MAX_POLYGON_POINTS / pts * 0.9))
    lay["capped"] = capped
    return lay


def _stacked_once(el_start: np.ndarray, el_end: np.ndarray, el_size: np.ndarray, total: np.ndarray,
                  ws: int, we: int, max_points: int, top: int) -> dict:
    """memory_viz's stacked layout of the elements (allocations or segments, in stacking
    order) live in the window [ws, we), sampled at the window's columns.

    Columns are the events the total line keeps (:func:`_maxfilter`: each bucket's maximum,
    so the window's peak is one; every event when the window has at most ``max_points``).
    An element is drawn at the columns where it is live; its bottom at a column is the sum
    of the sizes of the drawn elements below it that are live there, so polygons never
    overlap and, with the "others" band on top, add up to the exact total at every column.
    Points are kept only where an element's bottom changes (a free below it), plus its
    first and last column.

    Which elements get their own polygon (``top`` of them): first those live at the
    window's peak, largest first, so what makes the peak is drawn (memory_viz keeps the
    largest overall and the peak can end up in its "summarized" band); then the largest
    of the rest that are live at a column (one that lives and dies between two columns is
    narrower than a pixel)."""
    cols = _maxfilter(total, ws, we, max_points)
    inwin = np.nonzero((el_start < we) & (el_end > ws))[0]
    first = np.searchsorted(cols, np.maximum(el_start[inwin], ws))
    visible = inwin[(first < len(cols)) & (cols[np.minimum(first, len(cols) - 1)] < el_end[inwin])]
    pk = int(np.argmax(total[ws:we])) + ws
    at_peak = (el_start[visible] <= pk) & (el_end[visible] > pk)
    # rank: live at the peak first, then by size (descending); ties by stacking order
    rank = np.lexsort((visible, -el_size[visible], ~at_peak))
    sel = np.sort(visible[rank[:top]])
    s_st, s_en, s_sz = el_start[sel], el_end[sel], el_size[sel]
    k = len(sel)
    prev = np.full(k, -1, np.int64)
    last = np.full(k, -1, np.int64)
    rec_el, rec_col, rec_y = [], [], []
    drawn = np.zeros(len(cols), np.int64)
    for j, c in enumerate(cols.tolist()):
        live = np.nonzero((s_st <= c) & (s_en > c))[0]
        if not len(live):
            continue
        h = s_sz[live]
        top_ = np.cumsum(h)
        bottom = top_ - h
        drawn[j] = top_[-1]
        ch = prev[live] != bottom
        rec_el.append(live[ch])
        rec_col.append(np.full(int(ch.sum()), j, np.int64))
        rec_y.append(bottom[ch])
        prev[live] = bottom
        last[live] = j
    if rec_el:
        re, rc, ry = np.concatenate(rec_el), np.concatenate(rec_col), np.concatenate(rec_y)
    else:
        re = rc = ry = np.zeros(0, np.int64)
    # the last column of each element closes its polygon (a point there unless its bottom
    # changed there already)
    tail = np.nonzero(last >= 0)[0]
    tail = tail[~np.isin(tail * (len(cols) + 1) + last[tail], re * (len(cols) + 1) + rc)]
    re = np.concatenate([re, tail])
    rc = np.concatenate([rc, last[tail]])
    ry = np.concatenate([ry, prev[tail]])
    order = np.lexsort((rc, re))
    re, rc, ry = re[order], rc[order], ry[order]
    bounds = np.searchsorted(re, np.arange(k + 1))
    return {"cols": cols, "sel": sel, "drawn": drawn, "peak": pk, "inWindow": len(inwin),
            "visible": len(visible), "atPeak": int(at_peak.sum()),
            "pointEl": re, "pointCol": rc, "pointY": ry, "bounds": bounds, "last": last}


def _x_of(dv: _Dev, idx: np.ndarray, x: str) -> list:
    """Event indices as x values. An event's state holds until the next event: event i
    spans [i, i + 1) by index (memory_viz's timesteps) and [time_i, time_(i+1)) in time, so
    the window's end, the index just past its last event, is that next event (by index n
    past the trace's end; in time, which has nothing after the last event, its own time)."""
    return (dv.time[np.minimum(idx, dv.n - 1)] if x == "time" else idx).tolist()


def _layers_json(lay: dict, xs, sizes: np.ndarray, we: int, n: int) -> list[tuple[int, dict]]:
    """(element, polygon) per drawn element: x (columns in the requested unit), y0, y1 and
    xEnd, where its last step ends: the next column, or the window's end (``windowX[1]``,
    :func:`_x_of`; a one-event window is then one event wide, not empty)."""
    cols, b, last = lay["cols"], lay["bounds"], lay["last"]
    px_all = xs(cols[lay["pointCol"]])
    y0_all = lay["pointY"].tolist()
    ends = np.where(last + 1 < len(cols), cols[np.minimum(last + 1, len(cols) - 1)], we)
    xend = xs(ends)
    out = []
    for i, e in enumerate(lay["sel"].tolist()):
        a, z = int(b[i]), int(b[i + 1])
        if a == z:
            continue
        sz = int(sizes[e])
        y0 = y0_all[a:z]
        out.append((e, {"x": px_all[a:z], "y0": y0, "y1": [v + sz for v in y0], "xEnd": xend[i]}))
    return out



def _polygon_rows(cols, lay: dict, xs, we: int, n: int, actions: list[str] | None = None) -> list[dict]:
    """The drawn allocations (or segments, with the action that made each) of a timeline
    answer: where each lives in the trace and its polygon."""
    rows = []
    for e, poly in _layers_json(lay, xs, cols.size, we, n):
        pre = bool(cols.start[e] < 0)
        row = {"id": e, "addr": int(cols.addr[e]), "size": int(cols.size[e]),
               "stream": int(cols.stream[e]), "stackId": int(cols.stack[e])}
        if actions is not None:
            row["action"] = None if cols.action[e] < 0 else actions[int(cols.action[e])]
        row.update({"allocIndex": None if pre else int(cols.start[e]),
                    "freeIndex": None if cols.end[e] >= n else int(cols.end[e]),
                    "preexisting": pre, "polygon": poly})
        rows.append(row)
    return rows

def timeline(snap: Snapshot, device, start=None, end=None, x: str = "index",
             max_points: int = 2000, top: int = MAX_DETAIL) -> dict:
    dv = _dev(snap, device)
    n = dv.n
    if not isinstance(max_points, int) or not 2 <= max_points <= 100_000:
        raise BadRequest("max_points must be an integer in [2, 100000]")
    if not isinstance(top, int) or not 0 <= top <= MAX_DETAIL:
        raise BadRequest(f"top must be an integer in [0, {MAX_DETAIL}]")
    ws, we = _window(dv, start, end, x)

    def xs(idx):
        return _x_of(dv, idx, x)

    lay = _stacked(dv.start, dv.end, dv.size, dv.total, ws, we, max_points, top)
    line = lay["cols"]
    rline = _maxfilter(dv.reserved, ws, we, max_points)
    allocs = _polygon_rows(dv, lay, xs, we, n)
    drawn, tot = lay["drawn"], dv.total[line]
    keep = _steps(line, drawn, tot)
    pk = lay["peak"]
    j = int(np.searchsorted(line, pk))
    return {
        "device": dv.device, "x": x, "totalEvents": n,
        "window": {"start": ws, "end": we}, "windowX": [xs(np.array([ws]))[0], xs(np.array([we]))[0]],
        "allocations": allocs, "allocationsInWindow": lay["inWindow"], "drawn": len(allocs),
        "visibleInWindow": lay["visible"], "maxDetail": MAX_DETAIL, "detail": top,
        "detailCapped": lay["capped"],
        "others": {"x": xs(line[keep]), "y0": drawn[keep].tolist(), "y1": tot[keep].tolist()},
        "total": {"x": xs(line), "bytes": tot.tolist(), "index": line.tolist()},
        "reserved": {"x": xs(rline), "reservedBytes": dv.reserved[rline].tolist(),
                     "index": rline.tolist()},
        "peak": {"bytes": int(dv.total[pk]), "event": pk, "x": xs(np.array([pk]))[0],
                 "drawnBytes": int(drawn[j]), "liveAllocations": lay["atPeak"]},
        "decimated": (we - ws) > max_points,
    }


class _SegLayers:
    """The reserved memory of a device as elements, for the segment timeline (memory_viz's
    "Active Cached Segment Timeline", ``process_alloc_data(plot_segments=True)``): every
    ``segment_alloc`` / ``segment_map`` opens one, the next ``segment_free`` /
    ``segment_unmap`` at the same address closes it; a close with nothing open there was
    reserved before recording began (live from the start to that event), and what the
    final segments hold beyond the elements still open at the end (for an expandable
    segment, the part mapped before recording) is pre-existing too, live throughout.
    The live sizes then add up to the reserved line (``_Dev.reserved``) at every event.
    Same stacking order as the allocations."""

    def __init__(self, snap: Snapshot, dv: _Dev):
        n = dv.n
        tr = dv.trace
        names = snap.action_names
        opens = {names.index(a) for a in ("segment_alloc", "segment_map") if a in names}
        # elements opened in the trace: [start, end, addr, size, stack, stream, action]
        made: list[list[int]] = []
        pre_free: list[list[int]] = []  # closed with nothing open there: reserved before
        live: dict[int, int] = {}  # address -> element in `made` (open intervals)
        for i in dv.seg_events.tolist():
            a, lo, sz = int(tr.action[i]), int(tr.addr[i]), int(tr.size[i])
            st, sm = int(tr.stack[i]), int(tr.stream[i])
            if a in opens:
                live[lo] = len(made)
                made.append([i, n, lo, sz, st, sm, a])
                continue
            # segment_free / segment_unmap: close what it covers; an unmap of part of a
            # mapped range (expandable segments) leaves the rest open, as a new element
            hi, covered = lo + sz, 0
            for start_addr in [k for k, e in live.items() if k < hi and k + made[e][3] > lo]:
                e = live.pop(start_addr)
                ea, es = made[e][2], made[e][3]
                made[e][1] = i
                covered += min(hi, ea + es) - max(lo, ea)
                for pa, pz in ((ea, lo - ea), (hi, ea + es - hi)):
                    if pz > 0:
                        live[pa] = len(made)
                        made.append([i, n, pa, pz, made[e][4], made[e][5], made[e][6]])
            if sz - covered > 0:
                pre_free.append([-1, i, lo, sz - covered, st, sm, -1])
        # what the final segments hold beyond the elements open at the end
        seg = snap.segments
        rows = dv.seg_rows[np.argsort(seg.address[dv.seg_rows], kind="stable")]
        open_at_end = [made[e] for e in live.values()]
        pre_end = []
        for r in rows.tolist():
            lo, sz = int(seg.address[r]), int(seg.total_size[r])
            inside = sum(m[3] for m in open_at_end if lo <= m[2] < lo + sz)
            if sz - inside > 0:
                pre_end.append([-1, n, lo, sz - inside, int(seg.stack[r]), int(seg.stream[r]), -1])
        pre_free.sort(key=lambda m: -m[1])
        rows_ = pre_end + pre_free + made
        cols = np.array(rows_, np.int64).reshape(len(rows_), 7)
        self.npre = len(pre_end) + len(pre_free)
        self.start, self.end, self.addr, self.size, self.stack, self.stream, self.action = (
            np.ascontiguousarray(cols[:, k]) for k in range(7))


def _segs(snap: Snapshot, device) -> tuple[_Dev, _SegLayers]:
    dv = _dev(snap, device)
    c = _cache(snap)
    v = c.get(("segs", dv.device))
    if v is None:
        v = c[("segs", dv.device)] = _SegLayers(snap, dv)
    return dv, v


def segment_timeline(snap: Snapshot, device, start=None, end=None, x: str = "index",
                     max_points: int = 2000, top: int = MAX_DETAIL) -> dict:
    """The reserved (cached) memory over the trace as stacked segments (:class:`_SegLayers`),
    in :func:`timeline`'s shape: ``segments`` instead of ``allocations`` (each with
    ``action``: how it was reserved, ``segment_alloc`` / ``segment_map``, or null when
    before recording), ``others`` up to the reserved line."""
    dv, sg = _segs(snap, device)
    n = dv.n
    if not isinstance(max_points, int) or not 2 <= max_points <= 100_000:
        raise BadRequest("max_points must be an integer in [2, 100000]")
    if not isinstance(top, int) or not 0 <= top <= MAX_DETAIL:
        raise BadRequest(f"top must be an integer in [0, {MAX_DETAIL}]")
    ws, we = _window(dv, start, end, x)

    def xs(idx):
        return _x_of(dv, idx, x)

    lay = _stacked(sg.start, sg.end, sg.size, dv.reserved, ws, we, max_points, top)
    line = lay["cols"]
    out = _polygon_rows(sg, lay, xs, we, n, actions=snap.action_names)
    drawn, tot = lay["drawn"], dv.reserved[line]
    keep = _steps(line, drawn, tot)
    pk = lay["peak"]
    j = int(np.searchsorted(line, pk))
    return {
        "device": dv.device, "x": x, "totalEvents": n,
        "window": {"start": ws, "end": we}, "windowX": [xs(np.array([ws]))[0], xs(np.array([we]))[0]],
        "segments": out, "segmentsInWindow": lay["inWindow"], "drawn": len(out),
        "visibleInWindow": lay["visible"], "maxDetail": MAX_DETAIL, "detail": top,
        "detailCapped": lay["capped"],
        "others": {"x": xs(line[keep]), "y0": drawn[keep].tolist(), "y1": tot[keep].tolist()},
        "reserved": {"x": xs(line), "reservedBytes": tot.tolist(), "index": line.tolist()},
        "peak": {"bytes": int(dv.reserved[pk]), "event": pk, "x": xs(np.array([pk]))[0],
                 "drawnBytes": int(drawn[j]), "liveSegments": lay["atPeak"]},
        "decimated": (we - ws) > max_points,
    }


# -- allocator state ---------------------------------------------------------------------


def _segments_at(snap: Snapshot, dv: _Dev, event: int | None) -> list[dict]:
    seg = snap.segments
    segs = []
    for r in dv.seg_rows.tolist():
        p = tuple(int(v) for v in seg.pool_id[r])
        segs.append({"address": int(seg.address[r]), "size": int(seg.total_size[r]),
                     "stream": int(seg.stream[r]),
                     "segmentType": snap.strings[seg.segment_type[r]] or None,
                     "poolId": None if p == (-1, -1) else list(p),
                     "expandable": bool(seg.is_expandable[r]), "stackId": int(seg.stack[r])})
    segs.sort(key=lambda s: s["address"])
    if event is None:
        return segs
    tr = dv.trace
    names = snap.action_names
    later = dv.seg_events[dv.seg_events > event][::-1]
    for i in later.tolist():
        a = names[tr.action[i]]
        s = {"address": int(tr.addr[i]), "size": int(tr.size[i]), "stream": int(tr.stream[i]),
             "segmentType": None, "poolId": None, "expandable": a.endswith("map"),
             "stackId": int(tr.stack[i])}
        addrs = [x["address"] for x in segs]
        if a in ("segment_free", "segment_unmap"):  # undo: the segment existed before
            j = int(np.searchsorted(addrs, s["address"]))
            segs.insert(j, s)
            if a == "segment_unmap":
                if j + 1 < len(segs):
                    nx = segs[j + 1]
                    if s["address"] + s["size"] == nx["address"] and s["stream"] == nx["stream"]:
                        s["size"] += nx["size"]
                        s.update({k: nx[k] for k in ("segmentType", "poolId") if s[k] is None})
                        del segs[j + 1]
                if j > 0:
                    pv = segs[j - 1]
                    if pv["address"] + pv["size"] == s["address"] and pv["stream"] == s["stream"]:
                        pv["size"] += s["size"]
                        del segs[j]
        else:  # segment_alloc / segment_map: undo -> it did not exist before
            if a == "segment_alloc":
                for j, x in enumerate(segs):
                    if x["address"] == s["address"]:
                        del segs[j]
                        break
                continue
            se = s["address"] + s["size"]
            for j, x in enumerate(segs):
                if x["address"] <= s["address"] and se <= x["address"] + x["size"]:
                    xe = x["address"] + x["size"]
                    if x["address"] == s["address"]:
                        x["address"] += s["size"]
                        x["size"] -= s["size"]
                        if x["size"] == 0:
                            del segs[j]
                    elif xe == se:
                        x["size"] -= s["size"]
                    else:
                        x["size"] = s["address"] - x["address"]
                        segs.insert(j + 1, dict(x, address=se, size=xe - se))
                    break
    return segs


def state_at(snap: Snapshot, device, event=None, max_blocks: int = 20000) -> dict:
    dv = _dev(snap, device)
    n = dv.n
    if event is not None:
        try:
            event = int(event)
        except (TypeError, ValueError):
            raise BadRequest(f"event must be an integer, not {event!r}") from None
        if not 0 <= event < n:
            raise BadRequest(f"event {event} is out of range: device {dv.device} has {n} trace "
                             "entries" + (" (omit event for the final state)" if n == 0 else ""))
    segs = _segments_at(snap, dv, event)
    if event is None:
        live = np.nonzero(dv.end >= n)[0]
        at = n
    else:
        live = dv.live_at(event)
        at = event
    live = live[np.argsort(dv.addr[live], kind="stable")]
    baddr, bsize, breq = dv.addr[live], dv.bsize[live], dv.breq[live]
    pend = (dv.pending_since[live] != -2) & (dv.pending_since[live] <= at)
    if event is None:
        pend = dv.pending_final[live] | (dv.pending_since[live] != -2)
    sa = np.array([s["address"] for s in segs], np.int64)
    ss = np.array([s["size"] for s in segs], np.int64)
    si = np.searchsorted(sa, baddr, side="right") - 1
    inside = (si >= 0) & (baddr < sa[np.clip(si, 0, None)] + ss[np.clip(si, 0, None)]) if len(sa) else np.zeros(len(baddr), bool)
    reserved = int(ss.sum())
    active = int(bsize[inside].sum())
    ext = reserved - active
    largest = 0
    shown = 0
    omitted = 0
    inactive_n = 0
    out = []
    idx_in = np.nonzero(inside)[0]
    k = 0
    for j, s in enumerate(segs):
        lo = s["address"]
        hi = lo + s["size"]
        blocks = []
        cur = lo
        while k < len(idx_in) and si[idx_in[k]] == j:
            b = idx_in[k]
            e = int(live[b])
            a = int(baddr[b])
            if a > cur:
                largest = max(largest, a - cur)
                inactive_n += 1
                blocks.append({"address": cur, "size": a - cur, "requested": 0, "state": "inactive",
                               "stackId": 0, "allocIndex": None, "freeIndex": None})
            blocks.append({"address": a, "size": int(bsize[b]), "requested": int(breq[b]),
                           "state": "active_pending_free" if pend[b] else "active_allocated",
                           "stackId": int(dv.stack[e]),
                           "allocIndex": None if dv.start[e] < 0 else int(dv.start[e]),
                           "freeIndex": None if dv.end[e] >= n else int(dv.end[e])})
            cur = max(cur, a + int(bsize[b]))
            k += 1
        if cur < hi:
            largest = max(largest, hi - cur)
            inactive_n += 1
            blocks.append({"address": cur, "size": hi - cur, "requested": 0, "state": "inactive",
                           "stackId": 0, "allocIndex": None, "freeIndex": None})
        room = max(0, max_blocks - shown)
        if len(blocks) > room:
            omitted += len(blocks) - room
            blocks = blocks[:room]
        shown += len(blocks)
        out.append(dict(s, blocks=blocks))
    alloc_bytes = int(bsize[inside & ~pend].sum())
    return {
        "device": dv.device, "event": event, "timeUs": _t(dv, event), "totalEvents": n,
        "segments": out,
        "totals": {"reservedBytes": reserved, "allocatedBytes": alloc_bytes, "activeBytes": active,
                   "requestedBytes": int(breq[inside].sum()),
                   "internalFragmentation": int((bsize[inside] - breq[inside]).sum()),
                   "externalFragmentation": ext, "largestFreeBlock": largest,
                   "segments": len(segs), "activeBlocks": int(inside.sum()),
                   "inactiveBlocks": inactive_n, "orphanBlocks": int((~inside).sum())},
        "blocksShown": shown, "blocksOmitted": omitted,
    }


# -- events --------------------------------------------------------------------------------

EVENTS_PAGE = 2000  # rows of one events answer, at most
EVENT_MATCHES = 10_000  # matches of one search, at most


def _versions(dv: _Dev, snap: Snapshot) -> np.ndarray:
    """memory_viz's ``version`` of each trace entry (``annotate_snapshot``): how many times
    its address was freed before it (blocks: ``free_completed``/``free``; segments:
    ``segment_free``/``segment_unmap``), so ``b7f3a…_2`` names one life of an address and
    searching for it finds that allocation's alloc and free."""
    c = _cache(snap)
    v = c.get(("versions", dv.device))
    if v is not None:
        return v
    n = dv.n
    v = np.zeros(n, np.int64)
    if n:
        tr = dv.trace
        names = snap.action_names
        seg_kind = np.array([a.startswith("segment") for a in names], bool)[tr.action]
        bumps = np.array([a in ("free_completed", "free", "segment_free", "segment_unmap") for a in names], bool)[tr.action]
        key = tr.addr * 2 + seg_kind
        order = np.lexsort((np.arange(n), key))
        k_s, b_s = key[order], bumps[order].astype(np.int64)
        # frees before this entry, within its (address, kind) group
        cum = np.cumsum(b_s) - b_s
        starts = np.r_[0, np.nonzero(k_s[1:] != k_s[:-1])[0] + 1]
        group_base = np.repeat(cum[starts], np.diff(np.r_[starts, n]))
        v[order] = cum - group_base
    c[("versions", dv.device)] = v
    return v


def _parse_address(q: str) -> int | None:
    s = q.strip().lower()
    if s.startswith(("b", "s")) and "_" in s:  # memory_viz's b7f3a00000_2 / s7f3a00000_0
        s = "0x" + s[1:s.index("_")]
    try:
        if s.startswith("0x"):
            return int(s, 16)
        if s.isdigit():
            return int(s)
        if len(s) >= 6 and all(ch in "0123456789abcdef" for ch in s):
            return int(s, 16)
    except ValueError:
        return None
    return None


def events(snap: Snapshot, device, start=None, end=None, q: str | None = None) -> dict:
    """Trace entries ``[start, end)`` (at most :data:`EVENTS_PAGE`), memory_viz's event list
    ("Allocator State History"); with ``q``, also the entries it finds: an address
    (``0x…``, decimal, bare hex of 6+ digits, or memory_viz's ``b<hex>_<version>``) finds
    the entries at that address and the allocations and segments that contain it; any
    other text finds the entries whose stack has a frame whose function or file name
    contains it (case-insensitive, filtered frames included).

    -> {"device", "totalEvents", "start", "end", "actionNames": [...],
        "rows": {"event", "action" (into actionNames), "addr", "size", "stream",
                 "timeUs" (null when absent), "stackId", "version"} (columns),
        "query": str|null, "queryKind": "address"|"frame"|null,
        "matches": [event] (first EVENT_MATCHES, in trace order), "matchCount"}"""
    dv = _dev(snap, device)
    n = dv.n
    ws = 0 if start is None else int(start)
    we = min(n, ws + EVENTS_PAGE) if end is None else int(end)
    if not 0 <= ws <= n or not ws <= we <= n:
        raise BadRequest(f"rows [{start}, {end}) are outside the trace's events [0, {n})")
    we = min(we, ws + EVENTS_PAGE)
    tr = dv.trace
    ver = _versions(dv, snap)
    sl = slice(ws, we)
    out = {"device": dv.device, "totalEvents": n, "start": ws, "end": we,
           "actionNames": list(snap.action_names),
           "rows": {"event": list(range(ws, we)),
                    "action": tr.action[sl].tolist() if n else [],
                    "addr": tr.addr[sl].tolist() if n else [],
                    "size": tr.size[sl].tolist() if n else [],
                    "stream": tr.stream[sl].tolist() if n else [],
                    "timeUs": [t if t >= 0 else None for t in tr.time_us[sl].tolist()] if n else [],
                    "stackId": tr.stack[sl].tolist() if n else [],
                    "version": ver[sl].tolist()},
           "query": None, "queryKind": None, "matches": [], "matchCount": 0}
    text = (q or "").strip()
    if not text or not n:
        return out
    if len(text) > 200:
        raise BadRequest("the search text is longer than 200 characters")
    address = _parse_address(text)
    if address is not None:
        hit = (tr.addr == address) | ((tr.addr <= address) & (address < tr.addr + tr.size))
        out["queryKind"] = "address"
    else:
        needle = text.lower()
        s = snap.strings
        fr = np.array([needle in s[a].lower() or needle in s[b].lower()
                       for a, b in zip(snap.frame_filename.tolist(), snap.frame_name.tolist())], bool)
        stack_hit = np.array([bool(st) and bool(fr[list(st)].any()) for st in snap.stacks], bool)
        hit = stack_hit[tr.stack] if len(stack_hit) else np.zeros(n, bool)
        out["queryKind"] = "frame"
    idx = np.nonzero(hit)[0]
    out.update(query=text, matches=idx[:EVENT_MATCHES].tolist(), matchCount=len(idx))
    return out


# -- stacks ------------------------------------------------------------------------------


def _keep_frames(snap: Snapshot) -> np.ndarray:
    c = _cache(snap)
    k = c.get("keep")
    if k is None:
        s = snap.strings
        keep = []
        for fn_i, nm_i in zip(snap.frame_filename.tolist(), snap.frame_name.tolist()):
            fn, nm = s[fn_i], s[nm_i]
            ok = not any(o in nm for o in OMIT_FUNCTIONS) and not any(o in fn for o in OMIT_FILENAMES)
            if fn in ("", "??") and nm in ("", "??"):
                ok = False
            keep.append(ok)
        k = c["keep"] = np.array(keep, bool)
    return k


def _filtered(snap: Snapshot, stack_id: int, python_only: bool = False) -> list[tuple[int, int]]:
    """[(frame id, repeats)] innermost first, filtered and with repeats collapsed."""
    keep = _keep_frames(snap)
    out: list[list[int]] = []
    for f in snap.stacks[stack_id]:
        if not keep[f]:
            continue
        if python_only and not snap.strings[snap.frame_filename[f]].endswith(".py"):
            continue
        if out and out[-1][0] == f:
            out[-1][1] += 1
        else:
            out.append([f, 0])
    return [(a, b) for a, b in out]


def _frame_json(snap: Snapshot, f: int, repeats: int = 0) -> dict:
    fn, line, nm = snap.frame(f)
    return {"filename": fn, "line": line, "name": nm, "repeats": repeats}


def stack(snap: Snapshot, stack_id, filtered: bool = True) -> dict:
    try:
        sid = int(stack_id)
    except (TypeError, ValueError):
        raise BadRequest(f"stack id must be an integer, not {stack_id!r}") from None
    if not 0 <= sid < len(snap.stacks):
        raise NotFound(f"no stack {sid} (this snapshot has {len(snap.stacks)})", file=snap.path)
    raw = snap.stacks[sid]
    ids = [f for f, _ in _filtered(snap, sid)] if filtered else list(raw)
    if filtered:
        frames = [_frame_json(snap, f, r) for f, r in _filtered(snap, sid)]
    else:
        frames = [_frame_json(snap, f) for f in raw]
    # Where the user's code starts, by the rule that names the compare view's sites (one
    # definition, _user_frame): the frames before it are the allocator's, the
    # dispatcher's and ATen's, a dozen or more on a CUDA allocation.
    user, kind, _ = _user_frame(snap, sid)
    return {"stackId": sid, "filtered": bool(filtered), "unfilteredCount": len(raw),
            "frames": frames, "userFrame": ids.index(user) if user in ids else None,
            "userFrameKind": kind}


def _label(snap: Snapshot, f: int) -> tuple[str, str]:
    fn, line, nm = snap.frame(f)
    base = fn.rsplit("/", 1)[-1]
    short = f"{nm} ({base}:{line})" if base and base != "??" else nm
    return short, f"{fn}:{line} {nm}"


# The icicle's leaves for allocations without frames, and why they have none.
NO_STACK_BEFORE, NO_STACK, NO_STACK_FILTERED = -1, -2, -3
NO_STACK_LABELS = {
    NO_STACK_BEFORE: ("<allocated before recording began>", "allocated before _record_memory_history "
                      "was enabled: the snapshot has no stack for it"),
    NO_STACK: ("<no stack recorded>", "recorded without stacks (_record_memory_history with "
               "stacks or context off)"),
    NO_STACK_FILTERED: ("<only runtime frames>", "every frame is interpreter or allocator plumbing "
                        "(memory_viz's filter drops them)"),
}


def stacks_at(snap: Snapshot, device, event=None, max_nodes: int = 2000,
              python_only: bool = False) -> dict:
    dv = _dev(snap, device)
    at_peak = event is None
    if event is None:
        _, event = dv.peak()
    else:
        try:
            event = int(event)
        except (TypeError, ValueError):
            raise BadRequest(f"event must be an integer, not {event!r}") from None
        if not 0 <= event < dv.n:
            raise BadRequest(f"event {event} is out of range: device {dv.device} has {dv.n} "
                             "trace entries")
    if event is None:  # no trace: the final state
        live = np.nonzero(dv.end >= dv.n)[0]
    else:
        live = dv.live_at(event)
    if max_nodes < 2:
        raise BadRequest("max_nodes must be at least 2")
    by_stack = {}
    if len(live):
        # stack 0 is "none recorded"; -1 marks the ones allocated before recording began
        st = np.where((dv.stack[live] == 0) & (dv.start[live] < 0), -1, dv.stack[live])
        u, inv = np.unique(st, return_inverse=True)
        sums_i = np.zeros(len(u), np.int64)
        np.add.at(sums_i, inv, dv.size[live])
        by_stack = dict(zip(u.tolist(), sums_i.tolist()))
    # trie: node = (parent, frame key)
    nodes = {(): {"value": 0, "children": []}}
    total = 0
    for sid, b in by_stack.items():
        total += b
        fr = [f for f, _ in _filtered(snap, sid, python_only)][::-1] if sid > 0 else []  # outermost first
        path: tuple = ()
        nodes[()]["value"] += b
        if not fr:
            fr = [NO_STACK_BEFORE if sid < 0 else NO_STACK if sid == 0 else NO_STACK_FILTERED]
        for f in fr:
            child = path + (f,)
            nd = nodes.get(child)
            if nd is None:
                nd = nodes[child] = {"value": 0, "children": []}
                nodes[path]["children"].append(child)
            nd["value"] += b
            path = child
    order = sorted(nodes, key=lambda p: (-nodes[p]["value"], len(p)))
    kept = set(order[:max_nodes - 1]) if len(order) > max_nodes else set(order)
    ids, labels, parents, values, hover = [], [], [], [], []
    nid: dict = {}
    n_other = 0
    for p in sorted(kept, key=lambda p: (len(p), -nodes[p]["value"])):
        k = nid[p] = "root" if not p else f"n{len(nid)}"
        ids.append(k)
        values.append(nodes[p]["value"])
        parents.append("" if not p else nid[p[:-1]])
        if not p:
            labels.append("all live memory")
            hover.append("all live memory")
        elif p[-1] in NO_STACK_LABELS:
            labels.append(NO_STACK_LABELS[p[-1]][0])
            hover.append(NO_STACK_LABELS[p[-1]][1])
        else:
            s, lg = _label(snap, p[-1])
            labels.append(s)
            hover.append(lg)
    for p in list(nid):
        ch = nodes[p]["children"]
        cut = [c for c in ch if c not in kept]
        if cut:
            rest = sum(nodes[c]["value"] for c in cut)
            n_other += 1
            ids.append(f"o{n_other}")
            labels.append("other")
            hover.append(f"{len(cut)} frames cut by the node limit")
            parents.append(nid[p])
            values.append(rest)
    return {"device": dv.device, "event": event, "timeUs": _t(dv, event), "totalBytes": total,
            "atPeak": at_peak, "ids": ids, "labels": labels, "parents": parents,
            "values": values, "hover": hover, "nodes": len(ids),
            "nodesOmitted": len(nodes) - len(kept)}


# -- who allocated: the first user frame ---------------------------------------------------

#: C++ frames that belong to the allocator, the dispatcher, tensor factories and the
#: autograd engine's plumbing: a C++-only stack (backward runs on the autograd engine's
#: C++ thread, with no Python frame) is labelled by its first frame that is none of these
#: (``torch::autograd::generated::MmBackward0::apply``, ``AccumulateGrad``, a kernel).
RUNTIME_CPP = re.compile(
    r"^(c10::|at::detail::|at::_ops::|at::\(anonymous namespace\)|at::native::(empty|new_|zeros|ones|full|_empty)"
    r"|at::TensorIterator|at::meta::|at::impl::|at::empty|at::zeros|at::ones|at::redispatch::|at::_ops"
    r"|torch::autograd::(VariableType|utils::|Node::|Engine::|python::|THPVariable|TypeError|"
    r"impl::|ADInplaceOrView|autogradNotImplemented)|torch::ADInplaceOrView|std::|pthread|__clone|clone$|start_thread"
    r"|_?Py|\?\?$)")
#: Python files that are torch's own or the interpreter's (not what a user wrote or called).
RUNTIME_PY = re.compile(r"(^|/)torch/|/lib/python3\.\d+/(?!site-packages/|dist-packages/)|^<frozen |^<string>$")
_RETURN_TYPE = re.compile(r"^(?:(?:void|bool|int|long|auto|unsigned|const|_object\*|PyObject\*)\s+)+")


def _user_frame(snap: Snapshot, stack_id: int) -> tuple[int | None, str, str | None]:
    """(frame, kind, op) of a stack: the first (innermost) Python frame outside torch and
    the standard library (kind "python"); else, on a C++-only stack, its first frame
    that is not allocator / dispatcher / autograd-engine plumbing (kind "cpp"); else the
    innermost frame memory_viz's filter keeps (kind "runtime"); None (kind "none") for an
    empty stack. ``op``: the ATen operator the stack went through (``at::_ops::<op>::``),
    which tells apart sites with the same user frame."""
    c = _cache(snap)
    memo = c.setdefault("user_frame", {})
    got = memo.get(stack_id)
    if got is not None:
        return got
    s = snap.strings
    frames = snap.stacks[stack_id] if 0 <= stack_id < len(snap.stacks) else ()
    keep = _keep_frames(snap)
    op = None
    py = cpp = None
    for f in frames:
        if not keep[f]:
            continue
        fn, nm = s[snap.frame_filename[f]], s[snap.frame_name[f]]
        if op is None and nm.startswith("at::_ops::"):
            op = nm[len("at::_ops::"):].split("::", 1)[0]
        if fn.endswith(".py"):
            if py is None and not RUNTIME_PY.search(fn):
                py = f
        elif cpp is None and nm and not RUNTIME_CPP.match(_RETURN_TYPE.sub("", nm)):
            cpp = f
    if py is not None:
        got = (py, "python", op)
    elif cpp is not None and not any(s[snap.frame_filename[f]].endswith(".py") for f in frames):
        got = (cpp, "cpp", op)
    else:
        kept = _filtered(snap, stack_id) if frames else []
        py_any = [f for f, _ in kept if s[snap.frame_filename[f]].endswith(".py")]
        if py_any:
            got = (py_any[0], "python", op)
        elif kept:
            got = (kept[0][0], "runtime", op)
        else:
            got = (None, "none", op)
    memo[stack_id] = got
    return got


def short_name(name: str) -> str:
    """A C++ frame's function without its return type, template and argument lists
    (``void torch::autograd::AccumulateGrad::accumulateGrad<std::function<…>>(at::Tensor…)``
    -> ``torch::autograd::AccumulateGrad::accumulateGrad``); Python names as they are."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            if ch == "(" and depth == 0 and out:
                break
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    short = "".join(out).strip()
    if " " in short and "::" in short:  # a return type before the qualified name
        short = short.rsplit(" ", 1)[-1]
    return short or name


def _site_json(snap: Snapshot, stack_id: int) -> dict | None:
    f, kind, op = _user_frame(snap, stack_id)
    if f is None:
        return None
    fn, line, nm = snap.frame(f)
    return {"filename": fn, "line": line, "name": nm, "short": short_name(nm), "kind": kind, "op": op}


def stack_recording(snap: Snapshot, dv: _Dev) -> dict:
    """What the recording kept of stacks, so a page can say why an allocation has none
    (memory_viz: ``<block was allocated before _record_history was enabled>``):
    ``traceEntriesWithStack`` of ``traceEntries`` (0: recorded without stacks,
    ``_record_memory_history(stacks=...)`` / ``context=None``, or before 2024 when
    trace entries had no ``frames``), ``blocksWithStack`` of ``blocks`` (the final
    state's live blocks), and whether any recorded frame is Python / C++."""
    tr = dv.trace
    with_stack = int((tr.stack != 0).sum()) if dv.n else 0
    fb = dv.final_blocks
    blk_stack = int((snap.blocks.stack[fb] != 0).sum()) if len(fb) else 0
    s = snap.strings
    files = [s[i] for i in snap.frame_filename.tolist()]
    return {"traceEntries": dv.n, "traceEntriesWithStack": with_stack,
            "blocks": len(fb), "blocksWithStack": blk_stack,
            "pythonFrames": any(f.endswith(".py") for f in files),
            "cppFrames": any(f and not f.endswith(".py") and f != "??" for f in files)
            or any(s[i].startswith(("c10::", "at::", "torch::")) for i in snap.frame_name.tolist())}


# -- compare -----------------------------------------------------------------------------


def _sites(snap: Snapshot, device: int) -> tuple[dict, int, int]:
    _check_device(snap, device)
    blk = snap.blocks
    seg_dev = snap.segments.device == device
    active_codes = [snap.state_names.index(s) for s in _ACTIVE_STATES if s in snap.state_names]
    rows = np.nonzero(seg_dev[blk.segment] & np.isin(blk.state, active_codes))[0] if len(blk) else np.zeros(0, np.int64)
    out: dict = {}
    per_stack: dict = {}
    for sid, sz in zip(blk.stack[rows].tolist(), blk.size[rows].tolist()):
        e = per_stack.setdefault(sid, [0, 0])
        e[0] += sz
        e[1] += 1
    for sid, (b, c) in per_stack.items():
        key = tuple(snap.frame(f) for f, _ in _filtered(snap, sid))
        e = out.setdefault(key, {"bytes": 0, "count": 0, "stack": sid})
        e["bytes"] += b
        e["count"] += c
    return out, int(blk.size[rows].sum()), len(rows)


def compare(a: Snapshot, b: Snapshot, device_a, device_b, max_sites: int = 500) -> dict:
    da = _check_device(a, device_a)
    db = _check_device(b, device_b)
    sa, bytes_a, n_a = _sites(a, da)
    sb, bytes_b, n_b = _sites(b, db)
    summ = {"onlyA": {"sites": 0, "blocks": 0, "bytes": 0}, "onlyB": {"sites": 0, "blocks": 0, "bytes": 0},
            "both": {"sites": 0, "blocksA": 0, "bytesA": 0, "blocksB": 0, "bytesB": 0},
            "deltaBytes": bytes_b - bytes_a}
    rows = []
    for key in sa.keys() | sb.keys():
        x, y = sa.get(key), sb.get(key)
        where = "both" if x and y else ("onlyA" if x else "onlyB")
        ba, ca = (x["bytes"], x["count"]) if x else (0, 0)
        bb, cb = (y["bytes"], y["count"]) if y else (0, 0)
        if where == "both":
            s = summ["both"]
            s["sites"] += 1
            s["blocksA"] += ca
            s["bytesA"] += ba
            s["blocksB"] += cb
            s["bytesB"] += bb
        else:
            s = summ[where]
            s["sites"] += 1
            s["blocks"] += ca + cb
            s["bytes"] += ba + bb
        if ba == bb and ca == cb:
            continue
        site = _site_json(a, x["stack"]) if x else _site_json(b, y["stack"])
        rows.append({"site": site, "stackIdA": x["stack"] if x else None,
                     "stackIdB": y["stack"] if y else None, "in": where,
                     "bytesA": ba, "countA": ca, "bytesB": bb, "countB": cb,
                     "deltaBytes": bb - ba, "deltaCount": cb - ca})
    rows.sort(key=lambda r: (-abs(r["deltaBytes"]), -abs(r["deltaCount"])))
    omitted = max(0, len(rows) - max_sites)

    def segset(s: Snapshot, d: int) -> set:
        m = s.segments.device == d
        return set(zip(s.segments.address[m].tolist(), s.segments.total_size[m].tolist()))

    ga, gb = segset(a, da), segset(b, db)
    oa, ob = sorted(ga - gb), sorted(gb - ga)
    return {
        "a": {"path": a.path, "device": da, "liveBytes": bytes_a, "liveBlocks": n_a},
        "b": {"path": b.path, "device": db, "liveBytes": bytes_b, "liveBlocks": n_b},
        "summary": summ, "sites": rows[:max_sites], "sitesOmitted": omitted,
        "segments": {"onlyA": [{"address": x, "size": y} for x, y in oa[:1000]],
                     "onlyB": [{"address": x, "size": y} for x, y in ob[:1000]],
                     "onlyACount": len(oa), "onlyBCount": len(ob),
                     "onlyABytes": sum(y for _, y in oa), "onlyBBytes": sum(y for _, y in ob),
                     "common": len(ga & gb)},
    }


# -- XProf's memory_profile answer -----------------------------------------------------

XPROF_TOP_ROWS = 200  # breakdown rows (allocations live at the peak, grouped)
XPROF_NAMED_ROWS = 50  # rows whose stack gets resolved to a frame name


def xprof_memory_profile(snap: Snapshot, device, memory_id: str) -> dict:
    """XProf's ``memory_profile`` schema for one device (tools/memory_profile_xprof.py has the
    field mapping), keyed by ``memory_id`` (the host name XProf selects, ``cuda:N``).

    Timeline: the live total after each trace event, sampled as XProf samples its
    snapshots (max box filter to 1000, so the peak survives); times are ``time_us`` from
    the first event (event indices as microseconds when the trace has no times). Rows:
    the allocations live at the peak event (the same peak as :func:`overview`), grouped
    by size and stack, named after the innermost kept frame of their stack."""

    dv = _dev(snap, device)
    if dv.n == 0:
        return xm.answer({})
    names = snap.action_names
    kinds = {"alloc": "ALLOCATION", "free_completed": "DEALLOCATION", "free": "DEALLOCATION",
             "segment_alloc": "RESERVATION", "segment_map": "RESERVATION"}
    t0 = int(dv.time[0]) if dv.has_time else 0
    t_ps = ((dv.time - t0) if dv.has_time else np.arange(dv.n, dtype=np.int64)) * 1_000_000
    running = np.maximum.accumulate(dv.total)
    tr = dv.trace
    timeline = []
    for i in xm.sample(dv.total).tolist():
        act = names[int(tr.action[i])]
        meta = xm.activity(kinds.get(act, "UNKNOWN_ACTIVITY"), int(tr.size[i]), address=int(tr.addr[i]),
                           op=act, region=f"stream {int(tr.stream[i])}")
        timeline.append(xm.snapshot(int(t_ps[i]), xm.agg(dv.total[i], dv.reserved[i], running[i]), meta))
    peak_bytes, pk = dv.peak()
    live = dv.live_at(pk)
    groups: dict[tuple[int, int], list[int]] = {}  # (size, stack) -> [count, first element]
    for e, size, sid in zip(live.tolist(), dv.size[live].tolist(), dv.stack[live].tolist()):
        g = groups.setdefault((size, sid), [0, e])
        g[0] += 1
    ranked = sorted(groups.items(), key=lambda g: (-g[0][0] * g[1][0], -g[0][0], g[0][1]))
    rows = []
    for k, ((size, sid), (count, e)) in enumerate(ranked[:XPROF_TOP_ROWS]):
        op = f"stack {sid}"
        if k < XPROF_NAMED_ROWS and sid >= 0:
            frames = stack(snap, sid)["frames"]
            if frames:
                f = frames[0]
                op = f"{f['name']} ({f['filename']}:{f['line']})"
        start = int(dv.start[e])
        meta = xm.activity("ALLOCATION", size, address=int(dv.addr[e]), op=op,
                           region=f"stream {int(dv.stream[e])}")
        # The group's first allocation event (XProf points each row at its allocation's
        # snapshot); blocks allocated before recording began have none: special rows.
        where = None if start < 0 else (int(t_ps[start]), xm.agg(dv.total[start], dv.reserved[start], running[start]))
        rows.append((meta, count, where))
    rest = ranked[XPROF_TOP_ROWS:]
    if rest:
        rows.append((xm.activity("ALLOCATION", sum(s * c for (s, _), (c, _) in rest),
                                 op=f"{len(rest)} smaller groups"), 1, None))
    per = xm.allocator(
        timeline=timeline,
        peak_stats=xm.agg(peak_bytes, dv.reserved[pk], peak_bytes),
        peak_time_ps=int(t_ps[pk]), lifetime_peak=int(running[-1]),
        capacity=max(int(dv.reserved.max()), peak_bytes), rows=rows)
    # The caching allocator's trace entries (those its ring buffer kept): one "alloc" per
    # block handed out (what an xplane's MemoryAllocation event is), one "free_completed"
    # (or "free", read as one by _Dev too) per block returned. Segment actions
    # (cudaMalloc / cudaFree of the allocator's own regions) are not counted, as an
    # xplane's BFC allocator records no event for its regions.
    n = dict(zip(names, np.bincount(tr.action, minlength=len(names)).tolist()))
    counts = (n.get("alloc", 0), n.get("free_completed", 0) + n.get("free", 0))
    return xm.answer({memory_id: per}, {memory_id: counts})
