"""Memory over time from PyTorch profiler traces (``profile_memory=True``).

XProf has no equivalent (its memory profile reads xplane allocator events), so the payload
is our own. Input: :class:`~profscope.model.memory_events.MemoryEvents` (the ``[memory]``
events of one Chrome trace, attributed to ops, ``nn.Module`` scopes and Python source
lines) and, optionally, the :class:`~profscope.model.memory_events.MemoryTimeline` that
``prof.export_memory_timeline(path.json)`` wrote for the same run.

:func:`from_memory_events` returns (all times in milliseconds since ``timeOriginUs``, the earliest
``ts`` in the trace; all sizes in bytes)::

    {
      "version": 1,
      "source": {"file", "traceEvents", "memoryEvents", "ops", "displayTimeUnit",
                 "baseTimeNanoseconds"},
      "timeOriginUs": float,          # trace ts of time 0
      "devices": [{                   # one per (Device Type, Device Id), the highest
                                      # peakAllocatedBytes first (ties: CPU, then by type, id)
        "device": "CPU" | "CUDA:0" | ..., "deviceType": int (c10), "deviceIndex": int,
        "accounting": "address" | "runningSum", "addresses": bool, "notes": [str],
        "reservedRecorded": bool,     # false: no "Total Reserved" in the trace (2021 format);
                                      # every reserved value below is then null (unknown)
        "summary": {
          "numEvents", "numAllocations", "numDeallocations",
          "allocatedBytes", "freedBytes",            # sums of sizes allocated / freed
          "peakAllocatedBytes", "peakAllocatedTimeMs",   # max "Total Allocated", first time
          "peakReservedBytes", "peakReservedTimeMs",     # max "Total Reserved"
          "liveBytesAtStart",        # Total Allocated before the first event
          "liveBytesAtEnd",          # Total Allocated after the last event
          "firstEventMs", "lastEventMs",
          "neverFreedCount", "neverFreedBytes",      # allocated in the window, not freed in it
          "freedNotAllocatedCount", "freedNotAllocatedBytes"  # frees of blocks allocated before
        },
        "timeline": {                # <= max_points points, max filter per time bin
          "timeMs": [...], "allocatedBytes": [...], "reservedBytes": [...],
          "eventBytes": [...],       # the event's own +/- size at each point
          "op": [...], "module": [...],   # indices into "strings" (-1: none)
          "strings": [...], "numEvents": int, "downsampled": bool
        },
        "peak": {"timeMs", "allocatedBytes", "reservedBytes", "eventBytes", "op", "module",
                 "frame", "step"},
        "breakdownAtPeak": {         # allocations live at the peak event
          "totalBytes",              # == peakAllocatedBytes
          "attributedBytes",         # allocated inside the window (rows below)
          "unattributedBytes",       # the rest: allocated before the trace started
          "byOp": [{"op", "bytes", "count"}],
          "byModule": [{"module", "bytes", "count"}],
          "allocations": [{"op", "module", "frame", "sizeBytes", "count", "bytes"}],
          "truncatedRows": int       # rows left out of "allocations" (more than 500)
        },
        "steps": [{"step", "startMs", "endMs", "liveBytesAtStart", "liveBytesAtEnd",
                   "peakBytes", "numAllocations", "numDeallocations", "neverFreedBytes"}],
                                     # ProfilerStep#N only; the first 2000
        "numSteps": int,
        "leakHints": [{"kind": "stepGrowth" | "risingOp" | "neverFreed",
                       "severity": "warning" | "info", "message": str, "evidence": {...}}]
      }],
      "categoryTimeline": null | {    # from the memory-timeline JSON
        "device": None,               # torch does not record which device it was exported for
        "categories": [...],          # PARAMETER, OPTIMIZER_STATE, ..., UNKNOWN
        "timeMs": [...],              # <= max_points, the row with the largest total per bin
        "series": [{"category", "bytes": [...]}],   # stack them in this order
        "totalBytes": [...],
        "peakBytes", "peakTimeMs", "peakBreakdown": [{"category", "bytes"}],
        "aligned": bool,              # times mapped onto the trace (baseTimeNanoseconds)
        "numPoints": int, "downsampled": bool
      }
    }

Leak hints, each with its evidence:

* ``stepGrowth``: live bytes (Total Allocated) at the end of each step, from
  ``ProfilerStep#N`` annotations (a profiler ``schedule`` plus ``prof.step()``), else from the
  ends of ``Optimizer.step#...`` annotations. Each step's end is compared with the previous
  step's end, so a one-off in the first step (optimizer state) does not count. Raised when
  live bytes grow in at least 3/4 of these comparisons (and at least 2) and in total.
  Evidence: ``stepSource``, ``bytesPerStep`` (median growth), ``stepsGrowing``,
  ``stepsCompared``, ``checkpoints`` / ``liveBytesAtStepEnd`` / ``growthBytes`` (aligned
  lists, at most 200 steps shown, ``growthBytes[0]`` is null), and
  ``neverFreedAfterFirstStep`` (rows like ``breakdownAtPeak.allocations``).
* ``risingOp``: an op whose own live bytes (its allocations not yet freed, whoever frees
  them) never fall and grow in at least half (and at least 2) of the intervals between
  checkpoints (up to 64 step ends, or 10 equal time slices without steps). Evidence:
  ``op``, ``checkpoints``, ``liveBytes``, ``bytesPerInterval``, ``bytesPerStep`` (with
  steps), ``neverFreedByFrame`` and ``neverFreedByModule`` (where its leftovers came from).
* ``neverFreed``: allocations made in the window and not freed by its end, grouped by op,
  module, source line and size (``allocations``, ``byStep``). Parameters and optimizer
  state made inside the window show up here too, so this one is ``info`` unless a growth
  hint fires.

Allocations and frees are paired by address per device: a block lives until the next
event at its address. A free with no allocation before it in the window freed a block
allocated before the trace (``freedNotAllocated*``).

Traces whose ``[memory]`` events have no ``Addr`` (PyTorch of 2021: only ``Bytes``,
``Device Type``, ``Device Id``) cannot be paired. Such a device has ``"accounting":
"runningSum"``, ``"addresses": false`` and a note: live bytes are the running sum of
``Bytes`` (what ``Total Allocated`` would have said), counts and byte sums of allocations
and frees are exact, ``neverFreed*`` / ``freedNotAllocated*`` (summary and steps) are null,
``breakdownAtPeak`` has no rows (``byAllocation`` false; ``attributedBytes`` is the peak
minus ``liveBytesAtStart``), and only the ``stepGrowth`` hint (from live bytes) is given.
Those traces have no ``Total Reserved`` either: ``reservedRecorded`` is false and every
reserved value (``peakReservedBytes``, ``peakReservedTimeMs``, ``timeline.reservedBytes``,
``peak.reservedBytes``) is null.
``source.addresses`` is false when any event lacked an address.

:func:`counter_series` exposes the full-resolution allocated / reserved series per device
(numpy arrays in trace microseconds) for the trace viewer's counter tracks.
"""

from __future__ import annotations

import bisect

import numpy as np

from profscope.model.memory_events import DEVICE_TYPES, MemoryEvents, MemoryTimeline
from profscope.tools import memory_profile_xprof as xm

VERSION = 1
MAX_ROWS = 500
MAX_EVIDENCE_ROWS = 20
MAX_CHECKPOINTS = 64
MAX_STEPS = 2000  # rows of "steps"; numSteps has the count
MAX_EVIDENCE_POINTS = 200
NO_OP = "(no op)"
NO_MODULE = "(no module)"
NO_FRAME = "(no Python frame)"
BEFORE_TRACE = "(allocated before the trace)"
NO_ADDR_NOTE = (
    "This trace's [memory] events have no addresses (older PyTorch wrote only Bytes, Device Type and "
    "Device Id): live bytes are the running sum of Bytes per device, so allocations cannot be paired with "
    "their frees; per-allocation lifetimes, the breakdown at the peak and leaks by address are not available."
)


def _report(progress, fraction: float | None = None, message: str | None = None) -> None:
    if progress is not None:
        progress.update(fraction=fraction, message=message)


def device_name(device_type: int, device_id: int) -> str:
    name = DEVICE_TYPES.get(int(device_type), f"device{int(device_type)}")
    return name if device_id < 0 else f"{name}:{int(device_id)}"


def _devices(mem: MemoryEvents) -> list[tuple[int, int, np.ndarray]]:
    """(device type, device id, indices of its events), CPU first then by type and id."""
    if len(mem) == 0:
        return []
    key = mem.device_type.astype(np.int64) * 65536 + (mem.device_id.astype(np.int64) + 32768)
    out = []
    for k in np.unique(key):
        idx = np.flatnonzero(key == k)
        out.append((int(mem.device_type[idx[0]]), int(mem.device_id[idx[0]]), idx))
    return out


def _name(names: list[str], i: int, none: str) -> str:
    return names[i] if i >= 0 else none


def _group(columns: list[np.ndarray], weights: np.ndarray):
    """Merge identical rows: (unique rows, occurrence counts, summed weights), largest sum first."""
    if len(weights) == 0:
        return np.zeros((0, len(columns)), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.stack([c.astype(np.int64) for c in columns], axis=1)
    uniq, inv = np.unique(rows, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    counts = np.bincount(inv, minlength=len(uniq))
    sums = np.bincount(inv, weights=weights.astype(np.float64), minlength=len(uniq)).astype(np.int64)
    order = np.lexsort((-counts, -sums))
    return uniq[order], counts[order], sums[order]


def _bins(t: np.ndarray, max_points: int) -> np.ndarray | None:
    """Start indices of the non-empty bins when ``t`` (sorted) is cut into ``max_points``
    equal time bins; None when every point fits."""
    n = len(t)
    if n <= max_points:
        return None
    edges = np.linspace(t[0], t[-1], max_points + 1)
    bin_of = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, max_points - 1)
    return np.flatnonzero(np.r_[True, bin_of[1:] != bin_of[:-1]])


def _first_max(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the first maximum of ``v`` in each segment ``starts[i]:starts[i + 1]``."""
    n = len(v)
    seg_max = np.maximum.reduceat(v, starts)
    is_max = v == np.repeat(seg_max, np.diff(np.r_[starts, n]))
    return np.minimum.reduceat(np.where(is_max, np.arange(n), np.iinfo(np.int64).max), starts)


def _downsample_max(t: np.ndarray, v: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(indices, bin starts): one point per time bin, the first maximum of ``v`` in it.

    The global maximum always survives (it is the maximum of its bin)."""
    starts = _bins(t, max_points)
    if starts is None:
        return np.arange(len(t)), None
    return _first_max(v, starts), starts


class _Pairs:
    """Allocation/free pairing of one device's events by address.

    An allocation lives until the next event at its address (normally its free); a free
    whose address had no allocation before it in the window freed a block allocated before
    the trace started."""

    def __init__(self, addr: np.ndarray, byts: np.ndarray):
        n = len(addr)
        self.is_alloc = byts > 0
        self.is_free = byts < 0
        self.end = np.full(n, -1, dtype=np.int64)  # for allocations: index of the ending event
        free_matched = np.zeros(n, dtype=bool)
        if n > 1:
            order = np.lexsort((np.arange(n), addr))
            same = addr[order[1:]] == addr[order[:-1]]
            a, b = order[:-1], order[1:]
            ends = same & self.is_alloc[a]
            self.end[a[ends]] = b[ends]
            free_matched[b[ends & self.is_free[b]]] = True
        self.never_freed = self.is_alloc & (self.end < 0)
        self.freed_not_allocated = self.is_free & ~free_matched

    def live_at(self, i: int) -> np.ndarray:
        """Mask of allocations live just after event ``i``."""
        idx = np.arange(len(self.end))
        return self.is_alloc & (idx <= i) & ((self.end < 0) | (self.end > i))


class _RunningSum(_Pairs):
    """A device whose events have no ``Addr`` (2021 PyTorch wrote only ``Bytes``,
    ``Device Type``, ``Device Id``): allocations and frees are counted, live bytes are the
    running sum of ``Bytes``, but no allocation can be paired with its free. Nothing is
    claimed about single allocations: none is "never freed", no free "freed memory
    allocated before the trace", none is live at the peak by itself."""

    def __init__(self, byts: np.ndarray):
        n = len(byts)
        self.is_alloc = byts > 0
        self.is_free = byts < 0
        self.end = np.full(n, -1, dtype=np.int64)
        self.never_freed = np.zeros(n, dtype=bool)
        self.freed_not_allocated = np.zeros(n, dtype=bool)

    def live_at(self, i: int) -> np.ndarray:
        return np.zeros(len(self.end), dtype=bool)


def _rows_by(names: list[str], col: np.ndarray, sel: np.ndarray, sizes: np.ndarray, none: str, field: str):
    keys, counts, sums = _group([col[sel]], sizes[sel])
    return [{field: _name(names, int(k[0]), none), "bytes": int(s), "count": int(c)} for k, c, s in zip(keys, counts, sums)]


def _allocation_rows(mem: MemoryEvents, gi: np.ndarray, sizes: np.ndarray, limit: int):
    keys, counts, sums = _group([mem.op[gi], mem.module[gi], mem.frame[gi], sizes], sizes)
    rows = [
        {
            "op": _name(mem.op_names, int(k[0]), NO_OP),
            "module": _name(mem.module_names, int(k[1]), NO_MODULE),
            "frame": _name(mem.frame_names, int(k[2]), NO_FRAME),
            "sizeBytes": int(k[3]),
            "count": int(c),
            "bytes": int(s),
        }
        for k, c, s in zip(keys[:limit], counts[:limit], sums[:limit])
    ]
    return rows, max(0, len(keys) - limit)


def _step_bounds(mem: MemoryEvents):
    """(source, numbers, starts, ends) of the training steps, or None."""
    if mem.steps is not None and len(mem.steps.start):
        return "ProfilerStep", mem.steps.number, mem.steps.start, mem.steps.end
    ends = mem.optimizer_step_ends
    if ends is not None and len(ends) >= 2:
        starts = np.r_[mem.start_us if mem.start_us is not None else ends[0], ends[:-1]]
        return "Optimizer.step", np.arange(len(ends)), starts, ends
    return None


def _live_before(t: np.ndarray, total: np.ndarray, start_live: int, when: np.ndarray) -> np.ndarray:
    """Total Allocated just after the last event at or before each time in ``when``."""
    k = np.searchsorted(t, when, side="right") - 1
    return np.where(k >= 0, total[np.maximum(k, 0)], start_live)


def _device_payload(mem: MemoryEvents, dtype: int, did: int, gi: np.ndarray, origin: float, max_points: int) -> dict:
    whole = len(gi) == len(mem)  # one device: views, not copies

    def column(a: np.ndarray) -> np.ndarray:
        return a if whole else a[gi]

    t = column(mem.ts)
    byts = column(mem.bytes)
    total = column(mem.total_allocated)
    reserved = column(mem.total_reserved)
    ms = (t - origin) / 1000.0
    n = len(gi)
    has_addr = mem.has_addr is None or bool(column(mem.has_addr).all())
    pairs = _Pairs(column(mem.addr), byts) if has_addr else _RunningSum(byts)
    start_live = int(total[0] - byts[0])

    # -- summary and peak ------------------------------------------------------------
    p = int(np.argmax(total))
    r = int(np.argmax(reserved))
    never = pairs.never_freed
    fna = pairs.freed_not_allocated
    summary = {
        "numEvents": n,
        "numAllocations": int(pairs.is_alloc.sum()),
        "numDeallocations": int(pairs.is_free.sum()),
        "allocatedBytes": int(byts[pairs.is_alloc].sum()),
        "freedBytes": int(-byts[pairs.is_free].sum()),
        "peakAllocatedBytes": int(total[p]),
        "peakAllocatedTimeMs": float(ms[p]),
        "peakReservedBytes": int(reserved[r]),
        "peakReservedTimeMs": float(ms[r]),
        "liveBytesAtStart": start_live,
        "liveBytesAtEnd": int(total[-1]),
        "firstEventMs": float(ms[0]),
        "lastEventMs": float(ms[-1]),
        "neverFreedCount": int(never.sum()) if has_addr else None,
        "neverFreedBytes": int(byts[never].sum()) if has_addr else None,
        "freedNotAllocatedCount": int(fna.sum()) if has_addr else None,
        "freedNotAllocatedBytes": int(-byts[fna].sum()) if has_addr else None,
    }
    bounds = _step_bounds(mem)
    step_pos = np.full(n, -1, dtype=np.int64)  # index into the step arrays, -1: outside any step
    step_of = step_pos  # the step's number N (ProfilerStep#N)
    if bounds is not None and bounds[0] == "ProfilerStep":
        _, numbers, s_start, s_end = bounds
        k = np.searchsorted(s_start, t, side="right") - 1
        inside = (k >= 0) & (t <= s_end[np.maximum(k, 0)])
        step_pos = np.where(inside, k, -1)
        step_of = np.where(inside, numbers[np.maximum(k, 0)], -1)
    peak = {
        "timeMs": float(ms[p]),
        "allocatedBytes": int(total[p]),
        "reservedBytes": int(reserved[p]),
        "eventBytes": int(byts[p]),
        "op": _name(mem.op_names, int(mem.op[gi[p]]), NO_OP),
        "module": _name(mem.module_names, int(mem.module[gi[p]]), NO_MODULE),
        "frame": _name(mem.frame_names, int(mem.frame[gi[p]]), NO_FRAME),
        "step": int(step_of[p]) if step_of[p] >= 0 else None,
    }

    # -- timeline ----------------------------------------------------------------------
    keep, starts = _downsample_max(t, total, max_points)
    strings: list[str] = []
    index: dict[str, int] = {}

    def sid(s: str | None) -> int:
        if s is None:
            return -1
        if s not in index:
            index[s] = len(strings)
            strings.append(s)
        return index[s]

    ops = mem.op[gi[keep]]
    mods = mem.module[gi[keep]]
    timeline = {
        "timeMs": ms[keep].tolist(),
        "allocatedBytes": total[keep].tolist(),
        "reservedBytes": (reserved if starts is None else np.maximum.reduceat(reserved, starts)).tolist(),
        "eventBytes": byts[keep].tolist(),
        "op": [sid(mem.op_names[o]) if o >= 0 else -1 for o in ops.tolist()],
        "module": [sid(mem.module_names[m]) if m >= 0 else -1 for m in mods.tolist()],
        "strings": strings,
        "numEvents": n,
        "downsampled": len(keep) < n,
    }

    # -- breakdown at peak -------------------------------------------------------------------
    live = pairs.live_at(p)
    sizes = byts
    # Without addresses the running sum still says how much of the peak was allocated
    # during the trace (the peak minus what was live before the first event), not by whom.
    attributed = int(sizes[live].sum()) if has_addr else int(total[p]) - start_live
    by_op = _rows_by(mem.op_names, mem.op[gi], live, sizes, NO_OP, "op")
    by_module = _rows_by(mem.module_names, mem.module[gi], live, sizes, NO_MODULE, "module")
    rows, truncated = _allocation_rows(mem, gi[live], sizes[live], MAX_ROWS)
    unattributed = int(total[p]) - attributed
    if unattributed > 0:
        by_op.append({"op": BEFORE_TRACE, "bytes": unattributed, "count": 0})
        by_module.append({"module": BEFORE_TRACE, "bytes": unattributed, "count": 0})
    breakdown = {
        "totalBytes": int(total[p]),
        "attributedBytes": attributed,
        "unattributedBytes": unattributed,
        "byOp": by_op[:MAX_ROWS],
        "byModule": by_module[:MAX_ROWS],
        "allocations": rows,
        "truncatedRows": truncated,
        "byAllocation": has_addr,  # False: no rows, the trace cannot say which blocks were live
    }

    # -- steps ---------------------------------------------------------------------------------
    steps = []
    num_steps = 0
    if bounds is not None and bounds[0] == "ProfilerStep":
        _, numbers, s_start, s_end = bounds
        num_steps = len(s_start)
        live_start = _live_before(t, total, start_live, s_start)
        live_end = _live_before(t, total, start_live, s_end)
        inside = step_pos >= 0
        sp = step_pos[inside]

        def per_step(mask=None, weights=None):
            sel = sp if mask is None else step_pos[inside & mask]
            w = None if weights is None else weights[inside & mask]
            return np.bincount(sel, weights=w, minlength=num_steps)

        n_alloc = per_step(pairs.is_alloc)
        n_free = per_step(pairs.is_free)
        never_bytes = per_step(never, byts.astype(np.float64))
        peak_in = live_start.astype(np.int64).copy()
        np.maximum.at(peak_in, sp, total[inside])
        for j in range(min(num_steps, MAX_STEPS)):
            steps.append({
                "step": int(numbers[j]),
                "startMs": float((s_start[j] - origin) / 1000.0),
                "endMs": float((s_end[j] - origin) / 1000.0),
                "liveBytesAtStart": int(live_start[j]),
                "liveBytesAtEnd": int(live_end[j]),
                "peakBytes": int(peak_in[j]),
                "numAllocations": int(n_alloc[j]),
                "numDeallocations": int(n_free[j]),
                "neverFreedBytes": int(never_bytes[j]) if has_addr else None,
            })

    hints = _leak_hints(mem, gi, t, total, byts, pairs, start_live, bounds, step_of, origin, has_addr)

    return {
        "device": device_name(dtype, did),
        "deviceType": dtype,
        "deviceIndex": did,
        # "address": blocks paired by Addr; "runningSum": no Addr in the trace, live bytes
        # are the running sum of Bytes and per-allocation views are left out.
        "accounting": "address" if has_addr else "runningSum",
        "addresses": has_addr,
        "notes": [] if has_addr else [NO_ADDR_NOTE],
        "summary": summary,
        "timeline": timeline,
        "peak": peak,
        "breakdownAtPeak": breakdown,
        "steps": steps,
        "numSteps": num_steps,
        "leakHints": hints,
    }


def _reserved_unknown(dev: dict) -> None:
    """A device whose events have no "Total Reserved" (2021 PyTorch wrote only Bytes,
    Device Type and Device Id; formats/chrome_trace.py keeps 0 there): its reserved bytes
    are unknown, said as null, never as 0 B."""
    dev["summary"]["peakReservedBytes"] = dev["summary"]["peakReservedTimeMs"] = None
    dev["peak"]["reservedBytes"] = None
    dev["timeline"]["reservedBytes"] = None


def _fmt(b: float) -> str:
    b = float(b)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:,.0f} {unit}" if unit == "B" else f"{b:,.1f} {unit}"
        b /= 1024
    return f"{b} B"


def _thin(n: int, limit: int) -> np.ndarray:
    """Up to ``limit`` evenly spread indices of ``range(n)``, first and last included."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(np.int64))


def _leak_hints(mem, gi, t, total, byts, pairs, start_live, bounds, step_of, origin, has_addr=True) -> list[dict]:
    hints: list[dict] = []
    never = pairs.never_freed
    alloc_idx = np.flatnonzero(pairs.is_alloc)

    # checkpoints: step ends, or equal time slices
    if bounds is not None and len(bounds[3]) >= 3:
        source, numbers, _, s_end = bounds
        cps = s_end
        label = "step " if source == "ProfilerStep" else "optimizer step "
        cp_labels = [f"{label}{int(x)}" for x in numbers]
    else:
        source = None
        cps = np.linspace(t[0], t[-1], 11)[1:] if len(t) > 1 else np.zeros(0)
        cp_labels = [f"{(c - origin) / 1000.0:.3f} ms" for c in cps]

    # 1. growth of live bytes from step to step (every step counts)
    growth_found = False
    if source is not None:
        live_end = _live_before(t, total, start_live, cps)
        diffs = np.diff(live_end)  # step 1 -> 2 onwards: the first step may create optimizer state once
        rising = int((diffs > 0).sum())
        if len(diffs) >= 2 and rising >= max(2, int(np.ceil(0.75 * len(diffs)))) and diffs.sum() > 0:
            growth_found = True
            per_step = int(np.median(diffs))
            # what the later steps left behind
            if source == "ProfilerStep":
                left = never & (step_of > numbers[0])
            else:
                left = never & (t > cps[0])
            rows, _ = _allocation_rows(mem, gi[left], byts[left], MAX_EVIDENCE_ROWS)
            shown = _thin(len(cps), MAX_EVIDENCE_POINTS)
            hints.append({
                "kind": "stepGrowth",
                "severity": "warning",
                "message": (
                    f"live memory grows by {_fmt(per_step)} per step (median over {len(diffs)} steps; "
                    f"{_fmt(live_end[0])} after the first, {_fmt(live_end[-1])} after the last)"
                ),
                "evidence": {
                    "stepSource": source,
                    "checkpoints": [cp_labels[i] for i in shown],  # at most 200 steps shown
                    "liveBytesAtStepEnd": [int(live_end[i]) for i in shown],
                    "growthBytes": [int(diffs[i - 1]) if i > 0 else None for i in shown],
                    "bytesPerStep": per_step,
                    "stepsGrowing": rising,
                    "stepsCompared": len(diffs),
                    "neverFreedAfterFirstStep": rows,
                },
            })

    # 2. ops whose own live bytes keep rising, sampled at up to MAX_CHECKPOINTS checkpoints
    pick = _thin(len(cps), MAX_CHECKPOINTS)
    cps, cp_labels = cps[pick], [cp_labels[i] for i in pick]
    steps_between = np.diff(pick) if source is not None else None
    if has_addr and len(cps) >= 3 and len(alloc_idx):  # an op's live bytes need allocation lifetimes
        cp_event = np.searchsorted(t, cps, side="right") - 1  # last event at or before each checkpoint
        ends = pairs.end[alloc_idx]
        ops = mem.op[gi[alloc_idx]].astype(np.int64) + 1
        sizes = byts[alloc_idx]
        n_ops = len(mem.op_names) + 1
        c = len(cps)
        # an allocation is live at checkpoints first..last-1
        first = np.searchsorted(cp_event, alloc_idx, side="left")
        last = np.where(ends < 0, c, np.searchsorted(cp_event, ends, side="left"))
        delta = np.zeros((c + 1) * n_ops, dtype=np.int64)
        np.add.at(delta, first * n_ops + ops, sizes)
        np.add.at(delta, last * n_ops + ops, -sizes)
        series = np.cumsum(delta.reshape(c + 1, n_ops), axis=0)[:c]
        d = np.diff(series, axis=0)
        up = (d > 0).sum(axis=0)
        never_down = (d >= 0).all(axis=0)
        candidates = np.flatnonzero(never_down & (up >= max(2, int(np.ceil(0.5 * len(d))))) & (series[-1] > series[0]))
        candidates = candidates[np.argsort(-(series[-1, candidates] - series[0, candidates]), kind="stable")]
        for col in candidates[:MAX_EVIDENCE_ROWS]:
            op_i = int(col) - 1
            mine = never & (mem.op[gi] == op_i)
            frames = _rows_by(mem.frame_names, mem.frame[gi], mine, byts, NO_FRAME, "frame")[:5]
            modules = _rows_by(mem.module_names, mem.module[gi], mine, byts, NO_MODULE, "module")[:5]
            per = int(np.median(d[:, col]))
            name = _name(mem.op_names, op_i, NO_OP)
            evidence = {
                "op": name,
                "checkpoints": cp_labels,
                "liveBytes": [int(x) for x in series[:, col]],
                "bytesPerInterval": per,
                "neverFreedByFrame": frames,
                "neverFreedByModule": modules,
            }
            if steps_between is not None:
                evidence["bytesPerStep"] = int(np.median(d[:, col] / steps_between))
            hints.append({
                "kind": "risingOp",
                "severity": "warning",
                "message": (
                    f"{name}: its live allocations grow in {int(up[col])} of {len(d)} intervals and never fall "
                    f"({_fmt(series[0, col])} -> {_fmt(series[-1, col])}, median {_fmt(per)} per interval)"
                ),
                "evidence": evidence,
            })

    # 3. never freed within the window
    if never.any():
        rows, truncated = _allocation_rows(mem, gi[never], byts[never], MAX_EVIDENCE_ROWS)
        per_step = None
        if source == "ProfilerStep":
            keys, counts, sums = _group([step_of[never]], byts[never])
            per_step = sorted(
                ({"step": int(k[0]) if k[0] >= 0 else None, "bytes": int(s), "count": int(c)} for k, c, s in zip(keys, counts, sums)),
                key=lambda r: (r["step"] is None, r["step"] or 0),
            )
        hints.append({
            "kind": "neverFreed",
            "severity": "warning" if growth_found or any(h["kind"] == "risingOp" for h in hints) else "info",
            "message": (
                f"{int(never.sum()):,} allocations ({_fmt(byts[never].sum())}) made during the trace were not freed "
                "before it ended (parameters and optimizer state created in the window count here too)"
            ),
            "evidence": {
                "count": int(never.sum()),
                "bytes": int(byts[never].sum()),
                "allocations": rows,
                "truncatedRows": truncated,
                "byStep": per_step,
            },
        })
    return hints


def _category_timeline(timeline: MemoryTimeline, mem: MemoryEvents, origin: float, max_points: int) -> dict:
    times = timeline.times_us
    sizes = timeline.sizes
    totals = sizes.sum(axis=1)
    base = mem.base_time_ns
    if base is not None:
        rel_us = (times - base // 1000).astype(np.float64) - (base % 1000) / 1000.0 - origin
        aligned = True
    else:
        rel_us = (times - (times[0] if len(times) else 0)).astype(np.float64)
        aligned = False
    order = np.argsort(rel_us, kind="stable")
    rel_us, sizes, totals = rel_us[order], sizes[order], totals[order]
    keep = _downsample_max(rel_us, totals, max_points)[0] if len(rel_us) else np.zeros(0, np.int64)
    ms = rel_us / 1000.0
    if len(totals):
        p = int(np.argmax(totals))
        peak = {"peakBytes": int(totals[p]), "peakTimeMs": float(ms[p]),
                "peakBreakdown": [{"category": c, "bytes": int(b)} for c, b in zip(timeline.categories, sizes[p])]}
    else:
        peak = {"peakBytes": 0, "peakTimeMs": None, "peakBreakdown": []}
    return {
        "device": None,
        "categories": list(timeline.categories),
        "timeMs": ms[keep].tolist(),
        "series": [{"category": c, "bytes": sizes[keep, i].tolist()} for i, c in enumerate(timeline.categories)],
        "totalBytes": totals[keep].tolist(),
        **peak,
        "aligned": aligned,
        "numPoints": len(times),
        "downsampled": len(keep) < len(times),
    }


def from_memory_events(mem: MemoryEvents, timeline: MemoryTimeline | None = None, max_points: int = 1000, progress=None) -> dict:
    """The memory payload of one PyTorch trace (see the module docstring for its fields)."""
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    _report(progress, 0.0, "grouping memory events by device")
    origin = mem.start_us if mem.start_us is not None else (float(mem.ts[0]) if len(mem) else 0.0)
    devices = _devices(mem)
    out_devices = []
    for j, (dtype, did, gi) in enumerate(devices):
        _report(progress, 0.05 + 0.85 * j / max(1, len(devices)), f"device {device_name(dtype, did)}: {len(gi):,} events")
        dev = _device_payload(mem, dtype, did, gi, origin, max_points)
        dev["reservedRecorded"] = mem.has_reserved is None or bool(mem.has_reserved[gi].all())
        if not dev["reservedRecorded"]:
            _reserved_unknown(dev)
        out_devices.append(dev)
    # The highest peak first: the page and XProf's page open on the first device, and on a
    # GPU trace the CPU's few profiled bytes (16 B on the H100 BERT trace) would hide the
    # GPU's. Stable, so equal peaks keep CPU first, then by type and id.
    out_devices.sort(key=lambda d: -d["summary"]["peakAllocatedBytes"])
    _report(progress, 0.9, "category timeline")
    category = _category_timeline(timeline, mem, origin, max_points) if timeline is not None else None
    meta = mem.metadata
    _report(progress, 1.0, "done")
    return {
        "version": VERSION,
        "source": {
            "file": mem.path,
            "traceEvents": mem.num_trace_events,
            "memoryEvents": len(mem),
            "ops": mem.num_ops,
            "displayTimeUnit": meta.get("displayTimeUnit"),
            "baseTimeNanoseconds": mem.base_time_ns,
            "addresses": mem.has_addr is None or bool(mem.has_addr.all()),
        },
        "timeOriginUs": origin,
        "devices": out_devices,
        "categoryTimeline": category,
    }


def counter_series(mem: MemoryEvents) -> dict:
    """Full-resolution memory counters per device, for trace-viewer counter tracks.

    Returns ``{"timeOriginUs": float, "tracks": [{"name", "device", "deviceType",
    "deviceIndex", "pid", "ts", "allocatedBytes", "reservedBytes"}]}`` where ``ts`` (float64,
    trace microseconds, sorted) and the byte columns (int64) are numpy arrays of equal
    length, one entry per ``[memory]`` event of that device; ``pid`` is the process most of
    the device's events came from (where a Chrome-trace viewer would draw the track).
    """
    tracks = []
    for dtype, did, gi in _devices(mem):
        thr = mem.thread[gi]
        counts = np.bincount(thr, minlength=len(mem.threads))
        pid = mem.threads[int(np.argmax(counts))][0] if len(mem.threads) else None
        name = device_name(dtype, did)
        tracks.append({
            "name": f"Memory ({name})",
            "device": name,
            "deviceType": dtype,
            "deviceIndex": did,
            "pid": pid,
            "ts": mem.ts[gi],
            "allocatedBytes": mem.total_allocated[gi],
            "reservedBytes": mem.total_reserved[gi],
        })
    origin = mem.start_us if mem.start_us is not None else (float(mem.ts[0]) if len(mem) else 0.0)
    return {"timeOriginUs": origin, "tracks": tracks}


# -- XProf's memory_profile answer -----------------------------------------------------

def device_memory_bytes(device_properties, device_type: int, device_id: int) -> int | None:
    """The memory a trace states for one of its GPUs: kineto's top-level
    ``deviceProperties`` has one entry per GPU (``id``, ``name``, ``totalGlobalMem``:
    cudaDeviceProp / hipDeviceProp_t), for CUDA (and ROCm, which PyTorch names CUDA too)
    devices only; None when the trace does not say."""
    if DEVICE_TYPES.get(int(device_type)) not in ("CUDA", "HIP") or not isinstance(device_properties, list):
        return None
    for d in device_properties:
        if isinstance(d, dict) and str(d.get("id")) == str(int(device_id)):
            v = d.get("totalGlobalMem")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 2**63:
                return int(v)
    return None


def xprof_memory_profile(payload: dict, mem: MemoryEvents) -> dict:
    """XProf's ``memory_profile`` schema (tools/memory_profile_xprof.py has the field
    mapping) from :func:`from_memory_events`'s payload and the trace's events themselves:
    one allocator per device (``CUDA:0``, ``CPU``) in the payload's order, the highest peak
    first.

    Timeline: every ``[memory]`` event of the device is one of XProf's snapshots (times in
    ps from the trace's first event), sampled by XProf's own rule
    (``SampleMemoryProfileTimeline``: all of them up to 1,000, else a max box filter over
    the events in order), not the payload's time-binned points: XProf's page counts
    #Allocation / #Deallocation over these rows. Rows: ``breakdownAtPeak.allocations``,
    plus the bytes live at the peak that were allocated before the trace started (region
    ``persist/dynamic``, as XProf labels its own "unused preallocated device memory" row).
    ``memoryCapacity``: the device memory the trace states (``totalGlobalMem``, what the
    OOM risk rates against), else the peak reserved bytes, at least the peak."""
    origin = payload.get("timeOriginUs") or 0.0
    events = {(dtype, did): gi for dtype, did, gi in _devices(mem)}
    props = mem.metadata.get("deviceProperties")
    per, counts = {}, {}
    for dev in payload.get("devices", []):
        s = dev["summary"]
        # Every [memory] event of the device with Bytes > 0 is one allocation, < 0 one
        # free (_Pairs.is_alloc / is_free), whether or not the trace has addresses.
        counts[dev["device"]] = (s["numAllocations"], s["numDeallocations"])
        gi = events[(dev["deviceType"], dev["deviceIndex"])]
        total = mem.total_allocated[gi]
        reserved = mem.total_reserved[gi] if dev.get("reservedRecorded", True) else np.zeros(len(gi), np.int64)
        running = np.maximum.accumulate(total)
        # stepId: the ProfilerStep#N an event falls in (the last one started before it; 0
        # before the first). XProf's page warns "Steps may be incomplete" when the last
        # sampled snapshot's step is below 1.
        step_start = [st["startMs"] for st in dev.get("steps") or []]
        step_no = [st["step"] for st in dev.get("steps") or []]
        timeline = []
        for k in xm.sample(total).tolist():
            e = int(gi[k])
            ms = (float(mem.ts[e]) - origin) / 1000.0
            size = int(mem.bytes[e])
            op, module = int(mem.op[e]), int(mem.module[e])
            j = bisect.bisect_right(step_start, ms) - 1
            meta = xm.activity("ALLOCATION" if size > 0 else "DEALLOCATION", size,
                               op=mem.op_names[op] if op >= 0 else "",
                               region=mem.module_names[module] if module >= 0 else "",
                               step=step_no[j] if j >= 0 else 0)
            timeline.append(xm.snapshot(round(ms * 1e9), xm.agg(total[k], reserved[k], running[k]), meta))
        pk, bd = dev["peak"] or {}, dev["breakdownAtPeak"] or {}
        peak = s["peakAllocatedBytes"]
        peak_ps = round((s.get("peakAllocatedTimeMs") or 0) * 1e9)
        peak_stats = xm.agg(peak, pk.get("reservedBytes") or 0, peak)
        # The payload groups the rows (op, module, frame, size) without their events'
        # times: each points at a snapshot at the peak; the bytes from before the trace
        # are a special row.
        rows = [(xm.activity("ALLOCATION", r["sizeBytes"], op=r["op"] or "", region=r["module"] or ""), r["count"],
                 (peak_ps, peak_stats)) for r in bd.get("allocations", [])]
        if bd.get("unattributedBytes"):
            rows.append((xm.activity("ALLOCATION", bd["unattributedBytes"], op=BEFORE_TRACE,
                                     region="persist/dynamic"), 1, None))
        rows.sort(key=lambda r: -int(r[0]["allocationBytes"]) * r[1])
        # XProf's own capacity is stack + heap + free at the peak (the allocator's view);
        # a trace states the device's memory instead. Without it (CPU, a trace without
        # deviceProperties) the reserved bytes, 0 or null without a caching allocator:
        # XProf's capacity is never below the heap it holds.
        capacity = device_memory_bytes(props, dev["deviceType"], dev["deviceIndex"]) \
            or max(s["peakReservedBytes"] or 0, peak)
        per[dev["device"]] = xm.allocator(
            timeline=timeline,
            peak_stats=peak_stats, peak_time_ps=peak_ps, lifetime_peak=peak,
            capacity=capacity, rows=rows)
    return xm.answer(per, counts)
