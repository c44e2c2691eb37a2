"""Memory profile: what the runtime allocator did over time, per allocator.

:func:`from_allocator_events` turns the allocator events of one host
(:class:`profscope.model.allocator.AllocatorEvents`) into what XProf 2.24.2's
``GET /data/plugin/profile/data?tag=memory_profile&host=...`` returns: the
``tensorflow.profiler.MemoryProfile`` proto as proto3 JSON (camelCase names, every
scalar printed even when zero, int64/uint64 as strings, enums by name), as a Python dict,
so that ``json.loads(xprof_body) == from_allocator_events(...)`` minus the ``"profscope"`` key. XProf's
algorithm (``xprof/convert/xplane_to_memory_profile.cc``), per allocator (memory id):

1. Every ``MemoryAllocation``/``MemoryDeallocation`` becomes a snapshot: the event's
   offset, the allocator state after it (``stackReservedBytes`` = ``bytes_reserved``,
   ``heapAllocatedBytes`` = ``bytes_allocated``, ``freeMemoryBytes`` =
   ``bytes_available``, ``fragmentation``, ``peakBytesInUse``) and the activity
   (sizes, address, op, step, region, dtype, shape).
2. The peak is the event, in reading order, where stack + heap is largest; on a tie the
   *last* such event in reading order (not in time) wins. ``profileSummary.peakStats`` is
   its state with ``peakBytesInUse`` replaced by stack + heap, ``memoryCapacity`` is
   stack + heap + free there, ``peakStatsTimePs`` its offset.
3. Snapshots are sorted by time (``std::sort``: events at the same picosecond come out in
   the order libstdc++'s introsort leaves them, reproduced exactly).
4. Steps: an event without a group gets the previous event's step + 1 (0 at the start).
5. A deallocation takes the op, region, dtype and shape of the allocation it frees:
   matched by address, the first allocation at that address since the last free there.
6. ``sampledTimelineSnapshots``: all snapshots when there are at most 1000, else 1000
   taken with a max box filter (the largest stack + heap of each window, the first on a
   tie; windows of ``n // 1000`` then ``n // 1000 + 1`` snapshots), so the peak survives.
7. The breakdown at the peak: the step of the last snapshot (in time order) whose stack +
   heap equals the peak; the events of that step up to the peak's time are replayed by
   address; the allocations still live are the rows. The heap at peak not explained by
   them ("unmapped": peak heap - allocations + deallocations - frees of memory allocated
   before the step) becomes a synthetic ``unused preallocated device memory`` row
   (region ``persist/dynamic``) and the stack at peak a synthetic ``stack`` row; both are
   ``specialAllocations``. Rows are sorted by allocation bytes, requested bytes (both
   descending), op, region, dtype, shape; identical rows are merged with
   ``numOccurrences``. ``memoryProfileSnapshots`` holds just the snapshots the rows point
   to (``snapshotIndex``; ``specialIndex`` for the synthetic rows, -1 otherwise).
8. ``memoryIds`` sorted; ``numHosts`` 1; ``version`` 1; ``hloModules`` from the ``XLA
   Modules`` lines of TPU planes.

XProf behaviours reproduced on purpose (each checked against XProf 2.24.2's output on the
TF fixture and on the builders in ``profscope/testing/allocator_xplane.py``):

* ``peakBytesUsageLifetime`` is the ``peak_bytes_in_use`` of the *last event read* (lines
  in plane order), not the largest one; profscope's summary adds the real maximum.
* Times are offsets from each event's own line, as stored, even when lines disagree.
* Integer stats stored as ``uint64`` (or anything but ``int64``) read as 0, as do
  non-double ``fragmentation`` values.
* When several identical rows are merged, the row points at the one XProf's hash map
  happened to list first; profscope points at the earliest one (the order of XProf's
  ``absl::flat_hash_map`` is seeded per process and is not reproducible).
* An event that belongs to no allocator name gets the memory id ``""``.
* A profile without a ``/host:CPU`` plane gets an empty body from XProf; :func:`from_allocator_events`
  returns ``{}`` (plus the extras).

profscope's own additions live under the top-level key ``"profscope"`` (no XProf field is
named so). All numbers there are JSON numbers (ints exact), addresses are strings:

``version``
    1, bumped when the extras change.
``host``, ``grouping``
    the XSpace's host name; how step ids were found (``grouped``: XProf's step
    grouping found roots; ``no-roots``: nothing to group; ``pre-grouped``: the profile
    carried ``group_id`` stats; ``loop-ops``: XProf skips grouping for TF loop ops;
    ``no-allocator-events``: the host plane's metadata names no allocator event, so
    nothing was read or grouped and ``steps`` is empty).
``steps``
    the groups XProf's grouping made: ``groupId``, ``name`` (e.g. ``"train 3"``),
    ``startPs``/``endPs`` (the root event's span, same time base as ``timeOffsetPs``):
    the step bands of the timeline.
``allocators.<memory id>.summary``
    what the page's summary shows: ``events``, ``allocations``, ``deallocations``,
    ``imbalance`` (allocations - deallocations: the first leak signal),
    ``windowStartPs``/``windowEndPs`` (first/last event), ``capacityBytes`` (stack + heap
    + free at the peak = XProf's ``memoryCapacity``), ``lifetimePeakBytes`` (the largest
    ``peak_bytes_in_use`` seen: the allocator's peak since it was created, possibly before
    the window), ``xprofLifetimePeakBytes`` (XProf's ``peakBytesUsageLifetime``),
    ``peakBytes`` (stack + heap at the peak in the window), ``peakTimePs``,
    ``peakStepId``, ``stackBytesAtPeak``, ``heapBytesAtPeak``, ``freeBytesAtPeak``,
    ``fragmentationAtPeak``, ``peakShareOfCapacity`` (peak / capacity, null when the
    capacity is 0), ``liveAtEndBytes`` (allocations made in the window and not freed in
    it), ``freedBeforeWindowBytes`` (frees of memory allocated before the window).
``allocators.<memory id>.leakHints``
    every hint with its evidence. Allocations and frees are paired by address in time
    order, as XProf pairs them (a free takes the first allocation at its address since
    the last free there), except that at equal times a free comes first (an address cannot
    be allocated twice; XProf's order of such ties can pair a reused address wrongly).

    ``hints``: list of ``{kind, severity ("info"/"warning"), message}``, one per finding
    below that fires (``imbalance``, ``neverFreed``, ``heapGrowth``, ``risingOps``).

    ``neverFreed``: allocations of the window with no free in it: ``count``, ``bytes``
    (sum of allocation bytes), ``largest`` (up to 10 by size: ``tfOpName``,
    ``allocationBytes``, ``requestedBytes``, ``timeOffsetPs``, ``stepId``,
    ``regionType``, ``dataType``, ``tensorShape``, ``address``). Allocations of the last
    step that would be freed after the window count here too: read it with
    ``heapGrowth``.

    ``freedBeforeAllocated``: frees whose allocation precedes the window: ``count``,
    ``bytes``.

    Steps here are the groups XProf's step grouping found (``stepId`` = group id; events
    in no group are left out, since XProf's "previous step + 1" makes pseudo-steps at the
    window's edges), or XProf's step ids when nothing was grouped.

    ``heapGrowth``: ``points`` (per step, in step order: ``stepId``, ``endTimePs`` and
    ``heapBytes`` = the heap after the step's last event), ``slopeBytesPerStep`` and
    ``interceptBytes`` of the least-squares line through them (null with < 2 points),
    ``r2`` (its coefficient of determination; null when all points are equal),
    ``steadyLeak``: at least 3 points, slope > 0, r2 >= 0.9 and the last point above the
    first.

    ``risingOps``: ops whose live bytes (allocations of the op made in the window and
    not yet freed) at the end of every step never go down and go up in at least half
    of the step-to-step transitions, over at least 3 steps, ending higher than they
    started: ``tfOpName``, ``stepIds``, ``liveBytes`` (the series), ``growthBytes``
    (last - first), largest growth first (at most 20).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from profscope.model.stdsort import std_sort_order
from profscope.model import allocator as ma

__all__ = ["EXTRAS_VERSION", "MAX_TIMELINE_SNAPSHOTS", "from_allocator_events"]

MAX_TIMELINE_SNAPSHOTS = 1000
EXTRAS_VERSION = 1
_UNMAPPED_NAME = "unused preallocated device memory"
_LARGEST = 10
_MAX_RISING = 20


def _report(progress, fraction: float | None = None, message: str | None = None) -> None:
    if progress is not None:
        progress.update(fraction=fraction, message=message)


def _double(x: float):
    """A double as protobuf's JSON printer writes it (NaN/Infinity as strings)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


class _Columns:
    """One allocator's snapshots, sorted by time, with XProf's fix-ups applied."""

    def __init__(self, ev: ma.AllocatorEvents, rows: np.ndarray):
        # generation (reading) order first
        self.ev = ev
        gen_total = ev.bytes_reserved[rows] + ev.bytes_allocated[rows]
        self.gen_rows = rows
        self.gen_total = gen_total
        order = std_sort_order(ev.time_ps[rows])
        r = rows[order]
        self.rows = r
        self.time = ev.time_ps[r]
        self.kind = ev.kind[r]
        self.stack = ev.bytes_reserved[r]
        self.heap = ev.bytes_allocated[r]
        self.free = ev.bytes_available[r]
        self.frag = ev.fragmentation[r]
        self.peak_in_use = ev.peak_bytes_in_use[r]
        self.requested = ev.requested_bytes[r]
        self.alloc_bytes = ev.allocation_bytes[r]
        self.address = ev.address[r]
        self.total = self.stack + self.heap
        self.step = _fix_steps(ev.group_id[r])
        self.tf_op = ev.tf_op[r].copy()
        self.region = ev.region_type[r].copy()
        self.dtype = ev.data_type[r].copy()
        self.shape = ev.shape[r].copy()
        self.match = _match_deallocations(self.kind, self.address)
        # for profscope's evidence: at equal times a free comes first (an address cannot
        # be allocated twice), so reuse of an address within one picosecond pairs right
        o = np.lexsort((np.arange(len(r)), self.kind == ma.ALLOCATION, self.time))
        m = _match_deallocations(self.kind[o], self.address[o])
        self.pair = np.full(len(r), -1, dtype=np.int64)
        ok = m >= 0
        self.pair[o[ok]] = o[m[ok]]
        d = np.flatnonzero(self.match >= 0)
        a = self.match[d]
        for col in (self.tf_op, self.region, self.dtype, self.shape):
            col[d] = col[a]

    def __len__(self):
        return len(self.rows)


def _fix_steps(group: np.ndarray) -> np.ndarray:
    """UpdateStepId: -1 becomes the previous valid step + 1 (0 before any)."""
    step = group.astype(np.int64, copy=True)
    invalid = step == -1
    if not invalid.any():
        return step
    idx = np.where(~invalid, np.arange(len(step)), -1)
    prev = np.maximum.accumulate(idx)
    fill = np.where(prev >= 0, step[np.maximum(prev, 0)] + 1, 0)
    step[invalid] = fill[invalid]
    return step


def _match_deallocations(kind: np.ndarray, address: np.ndarray) -> np.ndarray:
    """UpdateDeallocation: for each deallocation, the allocation it takes metadata from
    (-1 when none): the first allocation at its address since the last deallocation
    there. Vectorized over the events grouped by address (time order kept)."""
    n = len(kind)
    match = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return match
    o = np.argsort(address, kind="stable")
    addr = address[o]
    k = kind[o]
    pos = np.arange(n)
    run_start = np.flatnonzero(np.concatenate(([True], addr[1:] != addr[:-1])))
    start_of = np.repeat(run_start, np.diff(np.append(run_start, n)))
    is_d = k == ma.DEALLOCATION
    is_a = k == ma.ALLOCATION
    last_d = np.maximum.accumulate(np.where(is_d, pos, -1))
    prev_d = np.concatenate(([-1], last_d[:-1]))
    prev_d = np.maximum(prev_d, start_of - 1)  # not before the run
    big = n + 1
    next_a = np.minimum.accumulate(np.where(is_a, pos, big)[::-1])[::-1]
    next_a = np.append(next_a, big)
    first_a = next_a[prev_d + 1]
    ok = is_d & (first_a < pos)
    match[o[ok]] = o[first_a[ok]]
    return match


def _sample(total: np.ndarray, limit: int) -> np.ndarray:
    """SampleMemoryProfileTimeline: indices kept for the timeline (max box filter)."""
    n = len(total)
    if n <= limit:
        return np.arange(n)
    width = n // limit
    count1 = limit * (width + 1) - n
    count2 = limit - count1
    a = total[: width * count1].reshape(count1, width)
    first = np.argmax(a, axis=1) + np.arange(count1) * width
    if count2:
        b = total[width * count1:].reshape(count2, width + 1)
        second = np.argmax(b, axis=1) + width * count1 + np.arange(count2) * (width + 1)
        return np.concatenate([first, second])
    return first


def _agg_json(stack, heap, free, frag, peak) -> dict:
    return {
        "stackReservedBytes": str(int(stack)),
        "heapAllocatedBytes": str(int(heap)),
        "freeMemoryBytes": str(int(free)),
        "fragmentation": _double(float(frag)),
        "peakBytesInUse": str(int(peak)),
    }


def activity_metadata(activity: int, requested, alloc, address, tf_op: str, step, region: str, dtype: str,
               shape: str) -> dict:
    return {
        "memoryActivity": {1: "ALLOCATION", 2: "DEALLOCATION"}.get(int(activity), "UNKNOWN_ACTIVITY"),
        "requestedBytes": str(int(requested)),
        "allocationBytes": str(int(alloc)),
        "address": str(int(address)),
        "tfOpName": tf_op,
        "stepId": str(int(step)),
        "regionType": region,
        "dataType": dtype,
        "tensorShape": shape,
    }


class _Allocator:
    def __init__(self, ev: ma.AllocatorEvents, rows: np.ndarray):
        self.ev = ev
        self.c = _Columns(ev, rows)
        self._dtype_names: dict[int, str] = {}
        self._summary()

    def dtype_name(self, v) -> str:
        v = int(v)
        name = self._dtype_names.get(v)
        if name is None:
            name = self._dtype_names[v] = ma.data_type_name(v)
        return name

    def snapshot_json(self, i: int) -> dict:
        c, s = self.c, self.ev.strings
        return {
            "timeOffsetPs": str(int(c.time[i])),
            "aggregationStats": _agg_json(c.stack[i], c.heap[i], c.free[i], c.frag[i], c.peak_in_use[i]),
            "activityMetadata": activity_metadata(c.kind[i], c.requested[i], c.alloc_bytes[i], c.address[i],
                                           s[c.tf_op[i]], c.step[i], s[c.region[i]],
                                           self.dtype_name(c.dtype[i]), s[c.shape[i]]),
        }

    # -- XProf ----------------------------------------------------------------------

    def _summary(self):
        """UpdateProfileSummary over the events in reading order."""
        ev, rows, total = self.ev, self.c.gen_rows, self.c.gen_total
        self.lifetime_last = int(ev.peak_bytes_in_use[rows[-1]])
        m = int(total.max())
        if m >= 0:
            g = rows[int(np.flatnonzero(total == m)[-1])]
            self.peak = {"stack": int(ev.bytes_reserved[g]), "heap": int(ev.bytes_allocated[g]),
                         "free": int(ev.bytes_available[g]), "frag": float(ev.fragmentation[g]), "total": m}
            self.peak_time = int(ev.time_ps[g])
            self.capacity = self.peak["stack"] + self.peak["heap"] + self.peak["free"]
        else:  # never reached: nothing is >= the initial 0
            self.peak = {"stack": 0, "heap": 0, "free": 0, "frag": 0.0, "total": 0}
            self.peak_time = 0
            self.capacity = 0

    def xprof(self) -> dict:
        c = self.c
        sampled = _sample(c.total, MAX_TIMELINE_SNAPSHOTS)
        # GetPeakMemoryStep: the last snapshot (time order) at the peak total
        hits = np.flatnonzero(c.total == self.peak["total"])
        peak_step = int(c.step[hits[-1]]) if hits.size else 0
        self.peak_step = peak_step
        rows, specials = self._active(peak_step)
        active_json = []
        snapshots_json = []
        for index, count in rows:
            if index >= 0:
                active_json.append({"snapshotIndex": str(len(snapshots_json)), "specialIndex": "-1",
                                    "numOccurrences": str(count)})
                snapshots_json.append(self.snapshot_json(index))
            else:
                active_json.append({"snapshotIndex": str(index), "specialIndex": str(-index - 1),
                                    "numOccurrences": str(count)})
        p = self.peak
        return {
            "memoryProfileSnapshots": snapshots_json,
            "profileSummary": {
                "peakBytesUsageLifetime": str(self.lifetime_last),
                "peakStats": _agg_json(p["stack"], p["heap"], p["free"], p["frag"], p["total"]),
                "peakStatsTimePs": str(self.peak_time),
                "memoryCapacity": str(self.capacity),
            },
            "activeAllocations": active_json,
            "specialAllocations": specials,
            "sampledTimelineSnapshots": [self.snapshot_json(int(i)) for i in sampled],
        }

    def _active(self, peak_step: int):
        """ProcessActiveAllocations: merged rows [(snapshot index or -k, count)], specials."""
        c = self.c
        prefix = int(np.searchsorted(c.time, self.peak_time, side="right"))
        sel = np.flatnonzero(c.step[:prefix] == peak_step)
        unmapped = self.peak["heap"]
        kinds = c.kind[sel]
        addr = c.address[sel]
        nbytes = c.alloc_bytes[sel]
        is_a = kinds == ma.ALLOCATION
        unmapped -= int(nbytes[is_a].sum())
        unmapped += int(nbytes[~is_a].sum())
        live = np.zeros(0, dtype=np.int64)
        if sel.size:
            o = np.argsort(addr, kind="stable")
            a_sorted = addr[o]
            same_prev = np.concatenate(([False], a_sorted[1:] == a_sorted[:-1]))
            prev_is_alloc = np.concatenate(([False], is_a[o][:-1])) & same_prev
            unmatched_d = ~is_a[o] & ~prev_is_alloc
            unmapped -= int(nbytes[o][unmatched_d].sum())
            last_of_run = np.concatenate((a_sorted[1:] != a_sorted[:-1], [True]))
            live = sel[o[last_of_run & is_a[o]]]
        strings = self.ev.strings
        entries = []  # (sort key, index)
        for i in sorted(live.tolist()):
            entries.append(((-int(c.alloc_bytes[i]), -int(c.requested[i]), strings[c.tf_op[i]],
                             strings[c.region[i]], self.dtype_name(c.dtype[i]), strings[c.shape[i]]), i))
        specials = []
        special_index = 0
        stack = self.peak["stack"]
        for amount, name, region in ((unmapped, _UNMAPPED_NAME, "persist/dynamic"),
                                     (stack, "stack", "stack")):
            if amount > 0:
                special_index -= 1
                specials.append(activity_metadata(ma.ALLOCATION, amount, amount, 0, name, peak_step, region,
                                           ma.data_type_name(0), "unknown"))
                entries.append(((-amount, -amount, name, region, ma.data_type_name(0), "unknown"),
                                special_index))
        entries.sort(key=lambda e: e[0])
        rows = []
        k = 0
        while k < len(entries):
            j = k
            while j + 1 < len(entries) and entries[j + 1][0] == entries[k][0]:
                j += 1
            rows.append((entries[k][1], j - k + 1))
            k = j + 1
        return rows, specials

    # -- profscope extras ------------------------------------------------------------

    def extras(self) -> dict:
        c = self.c
        n = len(c)
        allocs = int((c.kind == ma.ALLOCATION).sum())
        deallocs = n - allocs
        p = self.peak
        is_a = c.kind == ma.ALLOCATION
        freed = np.zeros(n, dtype=bool)
        freed[c.pair[c.pair >= 0]] = True
        never = np.flatnonzero(is_a & ~freed)
        before = np.flatnonzero(~is_a & (c.pair < 0))
        never_bytes = int(c.alloc_bytes[never].sum())
        before_bytes = int(c.alloc_bytes[before].sum())
        largest = never[np.argsort(-c.alloc_bytes[never], kind="stable")[:_LARGEST]]
        s = self.ev.strings
        growth = self._heap_growth()
        rising = self._rising_ops()
        summary = {
            "events": n,
            "allocations": allocs,
            "deallocations": deallocs,
            "imbalance": allocs - deallocs,
            "windowStartPs": int(c.time[0]),
            "windowEndPs": int(c.time[-1]),
            "capacityBytes": self.capacity,
            "lifetimePeakBytes": int(c.peak_in_use.max()),
            "xprofLifetimePeakBytes": self.lifetime_last,
            "peakBytes": p["total"],
            "peakTimePs": self.peak_time,
            "peakStepId": self.peak_step,
            "stackBytesAtPeak": p["stack"],
            "heapBytesAtPeak": p["heap"],
            "freeBytesAtPeak": p["free"],
            "fragmentationAtPeak": _double(p["frag"]),
            "peakShareOfCapacity": (p["total"] / self.capacity) if self.capacity > 0 else None,
            "liveAtEndBytes": never_bytes,
            "freedBeforeWindowBytes": before_bytes,
        }
        hints = []
        if allocs != deallocs:
            more = "allocations than deallocations" if allocs > deallocs else "deallocations than allocations"
            hints.append({"kind": "imbalance", "severity": "info",
                          "message": f"{abs(allocs - deallocs):,} more {more} in the window "
                                     f"({allocs:,} vs {deallocs:,})"})
        if len(never):
            hints.append({"kind": "neverFreed", "severity": "info",
                          "message": f"{len(never):,} allocations ({never_bytes:,} bytes) are not freed "
                                     f"within the window"})
        if growth["steadyLeak"]:
            hints.append({"kind": "heapGrowth", "severity": "warning",
                          "message": f"the heap grows {growth['slopeBytesPerStep']:,.0f} bytes per step "
                                     f"over {len(growth['points'])} steps (r2 = {growth['r2']:.3f})"})
        for r in rising:
            hints.append({"kind": "risingOps", "severity": "warning",
                          "message": f"live bytes of {r['tfOpName'] or '(no op)'} rise by "
                                     f"{r['growthBytes']:,} bytes over {len(r['stepIds'])} steps"})
        return {
            "summary": summary,
            "leakHints": {
                "hints": hints,
                "neverFreed": {
                    "count": len(never),
                    "bytes": never_bytes,
                    "largest": [{
                        "tfOpName": s[c.tf_op[i]],
                        "allocationBytes": int(c.alloc_bytes[i]),
                        "requestedBytes": int(c.requested[i]),
                        "timeOffsetPs": int(c.time[i]),
                        "stepId": int(c.step[i]),
                        "regionType": s[c.region[i]],
                        "dataType": self.dtype_name(c.dtype[i]),
                        "tensorShape": s[c.shape[i]],
                        "address": str(int(c.address[i])),
                    } for i in largest.tolist()],
                },
                "freedBeforeAllocated": {"count": len(before), "bytes": before_bytes},
                "heapGrowth": growth,
                "risingOps": rising,
            },
        }

    def _step_ends(self):
        """(step ids ascending, sorted index of each step's last event).

        Steps are the groups XProf's step grouping found (events outside every group are
        left out: XProf's "previous step + 1" would make pseudo-steps at the window's
        edges); without any group, XProf's step ids."""
        c = self.c
        group = self.ev.group_id[c.rows]
        member = np.flatnonzero(group >= 0)
        ids = group[member]
        if not member.size:
            member = np.arange(len(c))
            ids = c.step
        steps, inv = np.unique(ids, return_inverse=True)
        last = np.full(len(steps), -1, dtype=np.int64)
        last[inv.reshape(-1)] = member  # later events overwrite: the last one
        return steps, last

    def _heap_growth(self) -> dict:
        c = self.c
        steps, last = self._step_ends()
        y = c.heap[last].astype(np.float64)
        x = steps.astype(np.float64)
        points = [{"stepId": int(s), "endTimePs": int(c.time[i]), "heapBytes": int(c.heap[i])}
                  for s, i in zip(steps.tolist(), last.tolist())]
        slope = intercept = r2 = None
        if len(points) >= 2:
            xm_, ym = x.mean(), y.mean()
            sxx = float(((x - xm_) ** 2).sum())
            if sxx > 0:
                slope = float(((x - xm_) * (y - ym)).sum() / sxx)
                intercept = float(ym - slope * xm_)
                sst = float(((y - ym) ** 2).sum())
                if sst > 0:
                    r2 = 1.0 - float(((y - (intercept + slope * x)) ** 2).sum()) / sst
        steady = bool(len(points) >= 3 and slope is not None and slope > 0 and r2 is not None
                      and r2 >= 0.9 and y[-1] > y[0])
        return {"points": points, "slopeBytesPerStep": slope, "interceptBytes": intercept, "r2": r2,
                "steadyLeak": steady}

    def _rising_ops(self) -> list[dict]:
        c = self.c
        steps, last = self._step_ends()
        if len(steps) < 3:
            return []
        o = np.argsort(last, kind="stable")
        steps, ends = steps[o], last[o]
        alloc = np.flatnonzero(c.kind == ma.ALLOCATION)
        if not alloc.size:
            return []
        free_at = np.full(len(c), len(c) + 1, dtype=np.int64)
        d = np.flatnonzero(c.pair >= 0)
        free_at[c.pair[d]] = d
        ops, op_of = np.unique(c.tf_op[alloc], return_inverse=True)
        s0 = np.searchsorted(ends, alloc, side="left")  # first step end at/after the alloc
        s1 = np.searchsorted(ends, free_at[alloc], side="left")  # first step end after the free
        ns = len(steps)
        delta = np.zeros((len(ops), ns + 1), dtype=np.int64)
        b = c.alloc_bytes[alloc]
        np.add.at(delta, (op_of, np.minimum(s0, ns)), b)
        np.add.at(delta, (op_of, np.minimum(s1, ns)), -b)
        live = np.cumsum(delta, axis=1)[:, :ns]
        diff = np.diff(live, axis=1)
        rising = (diff >= 0).all(axis=1) & ((diff > 0).sum(axis=1) * 2 >= ns - 1) & (live[:, -1] > live[:, 0])
        out = []
        for k in np.flatnonzero(rising).tolist():
            out.append({"tfOpName": self.ev.strings[int(ops[k])], "stepIds": steps.tolist(),
                        "liveBytes": live[k].tolist(), "growthBytes": int(live[k, -1] - live[k, 0])})
        out.sort(key=lambda r: -r["growthBytes"])
        return out[:_MAX_RISING]


def from_allocator_events(events: ma.AllocatorEvents, progress=None) -> dict[str, Any]:
    """XProf's memory profile of one host, plus profscope's extras under ``"profscope"``."""
    _report(progress, 0.0, "building the memory profile")
    extras: dict[str, Any] = {
        "version": EXTRAS_VERSION,
        "host": events.hostname,
        "grouping": events.grouping,
        "steps": [{"groupId": s.group_id, "name": s.name, "startPs": s.start_ps, "endPs": s.end_ps}
                  for s in events.steps],
        "allocators": {},
    }
    if not events.has_host_plane:
        return {"profscope": extras}
    per_allocator: dict[str, Any] = {}
    ids = events.memory_ids
    if len(events):
        order = np.argsort(events.memory_id, kind="stable")
        bounds = np.searchsorted(events.memory_id[order], np.arange(len(ids) + 1))
    for k, memory_id in enumerate(ids):
        _report(progress, 0.1 + 0.85 * k / max(1, len(ids)), f"allocator {memory_id}")
        rows = np.sort(order[bounds[k]:bounds[k + 1]])
        if not rows.size:
            continue
        alloc = _Allocator(events, rows)
        per_allocator[memory_id] = alloc.xprof()
        extras["allocators"][memory_id] = alloc.extras()
    result = {
        "memoryProfilePerAllocator": per_allocator,
        "numHosts": 1,
        "memoryIds": [m for m in ids if m in per_allocator],
        "version": 1,
        "hloModules": [{"name": h.name, "startTimePs": str(h.start_ps), "endTimePs": str(h.end_ps),
                        "id": str(i), "planeName": h.plane_name}
                       for i, h in enumerate(events.hlo_modules)],
        "profscope": extras,
    }
    _report(progress, 1.0, "done")
    return result
