"""The memory profile of every host of a multi-host profile run, side by side.

Input: each host's memory profile payload (:mod:`profscope.tools.memory_profile_allocator`:
XProf's ``MemoryProfile`` as proto3 JSON plus profscope's extras under ``"profscope"``),
or the error that host's conversion raised. Output: plain data for
``GET /api/memory_hosts?run=`` and the memory profile page's "All hosts" section.

One host's peak is its allocator with the highest **peak allocated**: stack + heap in use
at the allocator's peak in the profiled window (``profileSummary.peakStats``
``stackReservedBytes`` + ``heapAllocatedBytes``; profscope's ``summary.peakBytes``). An
out-of-memory happens on one allocator (one device), so a host's allocators are never
summed. The window's peak, not the lifetime peak, is what is compared: it is the one
measure every host has with a time, and the same words as the memory profile's tile and
OOM risk's usage row (``oom_risk.PEAK_ALLOCATED``). The lifetime peak (the largest
``peak_bytes_in_use``, possibly from before the window) is given beside it.

``hosts``: one row per host, worst (highest peak) first, ties by host name; hosts without
a peak follow in the run's order, each with ``status`` and ``reason``:

* ``ok``: ``memoryId`` (the allocator), ``allocators`` (how many the host has),
  ``peakBytes``, ``peakMeasure``, ``peakTimePs`` (offset on the allocator's line, as the
  memory profile's ``peakStatsTimePs``), ``stackBytesAtPeak``, ``heapBytesAtPeak``,
  ``lifetimePeakBytes``, ``capacityBytes`` (XProf's ``memoryCapacity`` = stack + heap +
  free at the peak; null when 0), ``utilization`` (peak / capacity, null without one),
  ``shareOfWorst`` (peak / the worst host's peak);
* ``noAllocatorEvents``: the file has no allocator events (``reason`` says which case);
* ``error``: the host's conversion failed (``reason`` is its message, ``file`` the file).

``rollup``: over the ``ok`` hosts: ``hosts`` (count), ``worstHost``, ``maxBytes``,
``minBytes``, ``medianBytes`` (the mean of the two middle ones for an even count),
``meanBytes``, ``imbalance`` = (max - min) / max and ``maxOverMedian`` = max / median
(null when the divisor is 0); every field null when no host has a peak.
"""

from __future__ import annotations

import statistics
from typing import Any

from profscope.tools.oom_risk import PEAK_ALLOCATED

__all__ = ["host_summary", "error_row", "memory_hosts"]

# profscope's extras (memory_profile_allocator.py): ``grouping`` is this when the host
# plane's metadata names no MemoryAllocation/MemoryDeallocation event.
_NO_EVENTS_GROUPING = "no-allocator-events"


def _int(v: Any) -> int:
    """proto3 JSON int64 fields are strings; missing ones are 0."""
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def host_summary(host: str, mp: dict) -> dict:
    """One host's row from its memory profile payload."""
    per = mp.get("memoryProfilePerAllocator") or {}
    extras = (mp.get("profscope") or {})
    if not per:
        if not [k for k in mp if k != "profscope"]:
            # XProf answers a profile without a /host:CPU plane with an empty body.
            reason = "no allocator events: the profile has no /host:CPU plane"
        elif extras.get("grouping") == _NO_EVENTS_GROUPING:
            reason = "no allocator events: the host plane names no MemoryAllocation/MemoryDeallocation event"
        else:
            reason = "no allocator events"
        return {"host": host, "status": "noAllocatorEvents", "reason": reason}
    summaries = (extras.get("allocators") or {})
    candidates = []
    for mid, a in per.items():
        s = a.get("profileSummary") or {}
        ps = s.get("peakStats") or {}
        stack, heap = _int(ps.get("stackReservedBytes")), _int(ps.get("heapAllocatedBytes"))
        extra = (summaries.get(mid) or {}).get("summary") or {}
        row = {
            "memoryId": mid,
            "peakBytes": stack + heap,
            "peakTimePs": _int(s.get("peakStatsTimePs")),
            "stackBytesAtPeak": stack,
            "heapBytesAtPeak": heap,
            # XProf's peakBytesUsageLifetime is the last event's; profscope's extras hold the max.
            "lifetimePeakBytes": _int(extra.get("lifetimePeakBytes", s.get("peakBytesUsageLifetime"))),
            "capacityBytes": _int(s.get("memoryCapacity")) or None,
        }
        candidates.append(row)
    # The highest peak; a tie goes to the first allocator name (stable across runs).
    best = min(candidates, key=lambda r: (-r["peakBytes"], r["memoryId"]))
    cap = best["capacityBytes"]
    return {"host": host, "status": "ok", "allocators": len(per), "peakMeasure": PEAK_ALLOCATED, **best,
            "utilization": best["peakBytes"] / cap if cap else None}


def error_row(host: str, message: str, file: str | None = None) -> dict:
    return {"host": host, "status": "error", "reason": message, "file": file}


def memory_hosts(rows: list[dict]) -> dict:
    """The roll-up of host rows (from :func:`host_summary` / :func:`error_row`, in the
    run's host order)."""
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: (-r["peakBytes"], r["host"]))
    rest = [r for r in rows if r.get("status") != "ok"]
    peaks = [r["peakBytes"] for r in ok]
    if peaks:
        hi, lo, med = max(peaks), min(peaks), statistics.median(peaks)
        rollup = {"hosts": len(peaks), "worstHost": ok[0]["host"], "maxBytes": hi, "minBytes": lo,
                  "medianBytes": med, "meanBytes": statistics.fmean(peaks),
                  "imbalance": (hi - lo) / hi if hi else None,
                  "maxOverMedian": hi / med if med else None,
                  "peakMeasure": PEAK_ALLOCATED}
    else:
        rollup = {"hosts": 0, "worstHost": None, "maxBytes": None, "minBytes": None, "medianBytes": None,
                  "meanBytes": None, "imbalance": None, "maxOverMedian": None, "peakMeasure": PEAK_ALLOCATED}
    for r in ok:
        r["shareOfWorst"] = r["peakBytes"] / peaks[0] if peaks[0] else None
    return {"rollup": rollup, "hosts": ok + rest}
