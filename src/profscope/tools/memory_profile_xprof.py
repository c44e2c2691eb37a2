"""XProf's ``memory_profile`` answer (``tensorflow.profiler.MemoryProfile`` as proto3 JSON)
for inputs XProf cannot read: PyTorch CUDA memory snapshots and PyTorch profiler traces.

XProf's page (memory-profile-summary, memory-timeline-graph, memory-breakdown-table)
reads exactly the fields XProf's converter emits on an xplane
(``xprof/convert/xplane_to_memory_profile.cc``, ``ProcessMemoryProfileProto``), so
these answers carry the same keys, spelled and typed the same way (int64 as strings,
enums by name), built from profscope's own payloads (tools/memory_profile_snapshot.py,
tools/memory_profile_torch.py). The richer payloads stay on profscope's API
(``/api/memory_profile``, ``/api/snapshot/...``), which the dashboard reads.

How the allocator's numbers map onto XProf's ``MemoryAggregationStats``:

* ``heapAllocatedBytes``: live bytes (the snapshot's active allocations, the trace's
  ``Total Allocated``);
* ``stackReservedBytes``: 0 (PyTorch's caching allocator has no stack region);
* ``freeMemoryBytes``: reserved minus allocated, the bytes the caching allocator holds
  from the device but has not handed out (BFC's ``bytes_available`` is likewise what the
  allocator could still hand out);
* ``fragmentation``: that free share of the reserved bytes (0 when nothing is reserved);
* ``peakBytesInUse``: the running maximum of the allocated bytes.

``profileSummary.memoryCapacity``: XProf's is stack + heap + free at the peak (the
allocator's view). A PyTorch trace states its GPUs' memory (``totalGlobalMem`` in
``deviceProperties``, what the OOM risk rates against), so a trace's GPU gets that; a
snapshot (which records no device size) and a trace's CPU get the largest reserved
total, at least the peak.
"""

from __future__ import annotations

import numpy as np

from profscope.tools.memory_profile_allocator import activity_metadata

# ``SampleMemoryProfileTimeline``'s max_num_snapshots (xplane_to_memory_profile.cc).
MAX_TIMELINE_SNAPSHOTS = 1000


def sample(total: np.ndarray, limit: int = MAX_TIMELINE_SNAPSHOTS) -> np.ndarray:
    """XProf's ``SampleMemoryProfileTimeline``: indices kept (max box filter)."""
    from profscope.tools.memory_profile_allocator import _sample

    return _sample(np.asarray(total), limit)


def agg(heap: int, reserved: int, peak_in_use: int) -> dict:
    """``MemoryAggregationStats`` as proto3 JSON (the mapping in the module docstring)."""
    heap, reserved = int(heap), int(reserved)
    free = max(reserved - heap, 0)
    return {
        "stackReservedBytes": "0",
        "heapAllocatedBytes": str(heap),
        "freeMemoryBytes": str(free),
        "fragmentation": (free / reserved) if reserved > 0 else 0.0,
        "peakBytesInUse": str(int(peak_in_use)),
    }


def activity(kind: str, size: int, *, address: int = 0, op: str = "", region: str = "",
             dtype: str = "INVALID", shape: str = "", step: int = 0) -> dict:
    """``MemoryActivityMetadata``; ``kind`` is a ``MemoryActivity`` enum name."""
    size = abs(int(size))
    code = {"ALLOCATION": 1, "DEALLOCATION": 2}.get(kind, 0)  # the enum's numbers
    return activity_metadata(code, size, size, address, op, step, region, dtype, shape)


def snapshot(time_ps: int, stats: dict, meta: dict) -> dict:
    """``MemoryProfileSnapshot``."""
    return {"timeOffsetPs": str(int(time_ps)), "aggregationStats": stats, "activityMetadata": meta}


def allocator(*, timeline: list[dict], peak_stats: dict, peak_time_ps: int, lifetime_peak: int,
              capacity: int, rows: list[tuple[dict, int, tuple[int, dict] | None]]) -> dict:
    """``PerAllocatorMemoryProfile``. ``rows``: (activity, count, where) of the allocations
    live at the peak, largest first. As in XProf's ``ProcessActiveAllocations``, a row
    with ``where`` = (time ps, aggregation stats) of its allocation points at a
    ``memoryProfileSnapshots`` entry (``specialIndex`` -1); one without (memory from
    before the recording) is a ``specialAllocations`` entry (``snapshotIndex`` -k,
    ``specialIndex`` k-1, as XProf's synthetic "unused preallocated device memory")."""
    snapshots, specials, active = [], [], []
    for meta, count, where in rows:
        if where is not None:
            active.append({"snapshotIndex": str(len(snapshots)), "specialIndex": "-1",
                           "numOccurrences": str(int(count))})
            snapshots.append(snapshot(where[0], where[1], meta))
        else:
            specials.append(meta)
            active.append({"snapshotIndex": str(-len(specials)), "specialIndex": str(len(specials) - 1),
                           "numOccurrences": str(int(count))})
    return {
        "memoryProfileSnapshots": snapshots,
        "profileSummary": {
            "peakBytesUsageLifetime": str(int(lifetime_peak)),
            "peakStats": peak_stats,
            "peakStatsTimePs": str(int(peak_time_ps)),
            "memoryCapacity": str(int(capacity)),
        },
        "activeAllocations": active,
        "specialAllocations": specials,
        "sampledTimelineSnapshots": timeline,
    }


def answer(per_allocator: dict[str, dict], counts: dict[str, tuple[int, int]] | None = None) -> dict:
    """``MemoryProfile``: one host, version 1 (as XProf's). ``memoryIds`` in the order of
    ``per_allocator``: XProf's page opens on ``memoryIds[0]``, so callers put the
    allocator with the highest peak first (XProf sorts them by name; a trace's ``CPU``
    would then hide its ``CUDA:0``).

    ``counts``: (allocations, deallocations) the allocator recorded over the whole run,
    put where an xplane's answer has them (``profscope.allocators[id].summary``,
    tools/memory_profile_allocator.py counts every MemoryAllocation / MemoryDeallocation
    event): XProf's page counts only the ALLOCATION rows of the sampled timeline (at most
    1,000), and the memory profile compare diffs this figure."""
    out = {
        "memoryProfilePerAllocator": per_allocator,
        "numHosts": 1,
        "memoryIds": list(per_allocator),
        "version": 1,
        "hloModules": [],
    }
    if counts:
        out["profscope"] = {"allocators": {
            i: {"summary": {"allocations": int(a), "deallocations": int(d)}} for i, (a, d) in counts.items()
            if i in per_allocator}}
    return out
