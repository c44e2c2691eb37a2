"""What a point of the trace viewer links to (issue 37, "From the trace"): a counter's
sample (or its peak) and the memory profile of the allocator it counts, at the same
event. Plain data for app/trace_viewer_links.py; the page only draws the links it is given.

The clocks (docs/trace_viewer.md "Links"):

* the trace page's times are ms from the origin of the selected hosts (tools/trace_viewer.py),
  an index's counter samples ps from the index's own ``origin_ps``;
* an xplane's memory profile times (XProf's ``timeOffsetPs``, the page's ``t``) are each
  allocator event's ``offset_ps`` relative to its ``/host:CPU`` line's ``timestamp_ns``
  (formats/xplane_allocator.py), and the lines of one plane may start at different times
  (the public MI300 profiles: 2 and 3 distinct line timestamps), so a trace time maps to
  the memory profile's time of the same *event*, found by its absolute time, not by one
  shift;
* a PyTorch trace's memory profile times are ms from its ``timeOriginUs`` (the trace's
  earliest event, tools/memory_profile_torch.py), its counters the ``[memory]`` events'
  ``Total Allocated``/``Total Reserved`` (formats/chrome_trace.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from profscope.errors import BadRequest, NotFound
from profscope.model import npy_files as npy
from profscope.tools.trace_viewer import PS_PER_MS, TRACK_ID_SHIFT, TraceView, display_name

# xplane_trace.py names an allocator's counters "<allocator_name> heap allocated" and
# "<allocator_name> stack reserved" (the BFC allocator's bytes_allocated / bytes_reserved).
_XPLANE_COUNTER = re.compile(r"^(?P<id>.*) (?:heap allocated|stack reserved)$")
# chrome_trace.py names a [memory] event's counters "memory allocated (device N)" and
# "memory reserved (device N)", N its "Device Id" (-1: the host's CPU allocator).
_TORCH_COUNTER = re.compile(r"^memory (?:allocated|reserved) \(device (?P<dev>-?\d+)\)$")


@dataclass
class CounterPoint:
    host: str
    index_ps: int  # the sample's time on its host's index clock
    view_ms: float  # on the page's clock
    name: str  # as the index names it (display_name is the page's)
    unit: str
    value: float

    def payload(self, track: int) -> dict:
        return {"track": track, "name": display_name(self.name, "thread", 0), "unit": self.unit,
                "host": self.host, "time": self.view_ms, "value": self.value}


def counter_point(view: TraceView, track: int, t_ms: float | None, peak: str | None,
                  start_ms: float | None, end_ms: float | None) -> CounterPoint:
    """The sample of counter ``track`` (a track id of the window's answer) shown at
    ``t_ms`` (the last at or before it, as the page's hover picks it), or with
    ``peak="window"`` the largest in [start_ms, end_ms], with ``peak="all"`` the largest
    of the whole trace (the first such sample)."""
    pos, ti = track >> TRACK_ID_SHIFT, track & ((1 << TRACK_ID_SHIFT) - 1)
    h = next((h for h in view.hosts if h.position == pos), None)
    counters = h.index.meta["counters"] if h is not None else []
    ci = next((i for i, c in enumerate(counters) if c["track"] == ti), None)
    if ci is None:
        raise NotFound(f"no counter track {track} in this trace (a track id of /api/trace/window's counters)")
    ix, sh = h.index, view.shift[h.position]
    t = npy.load(ix.folder / f"counter_{ci}_t.npy", mmap_mode="r")
    v = npy.load(ix.folder / f"counter_{ci}_v.npy", mmap_mode="r")
    if not len(t):
        raise NotFound(f"counter track {track} has no samples")
    if peak in ("window", "all"):
        lo, hi = 0, len(t)
        if peak == "window":
            s, e = view.fit_ps(start_ms, end_ms)
            lo, hi = int(np.searchsorted(t, s - sh, "left")), int(np.searchsorted(t, e - sh, "right"))
            if lo >= hi:
                raise NotFound(f"counter track {track} has no sample in the window")
        i = lo + int(np.argmax(np.asarray(v[lo:hi])))
    elif peak:
        raise BadRequest(f"peak={peak!r}: 'window' or 'all'")
    elif t_ms is None:
        raise BadRequest("missing parameter 't' (the counter point's time, ms) or 'peak'")
    else:
        want = round(t_ms * PS_PER_MS) - sh
        i = max(0, int(np.searchsorted(t, want, "right")) - 1)
    c = counters[ci]
    return CounterPoint(h.host, int(t[i]), (int(t[i]) + sh) / PS_PER_MS, str(c["name"]), str(c.get("unit") or ""),
                        float(v[i]))


def xplane_allocator_of(counter_name: str) -> str | None:
    m = _XPLANE_COUNTER.match(counter_name)
    return m.group("id") if m else None


def torch_device_of(counter_name: str) -> int | None:
    m = _TORCH_COUNTER.match(counter_name)
    return int(m.group("dev")) if m else None


@dataclass
class AllocatorClock:
    """One host's allocator events on both clocks, in the memory profile's order."""

    memory_ids: list[str]
    memory_id: np.ndarray  # int32 -> memory_ids
    offset_ps: np.ndarray  # the memory profile's time (relative to the event's line)
    absolute_ps: np.ndarray  # the line's timestamp + the offset: the trace's clock

    @classmethod
    def of(cls, events) -> AllocatorClock:
        """From :class:`~profscope.model.allocator.AllocatorEvents`."""
        line_ps = np.asarray(events.line_timestamps_ns or [0], np.int64) * 1000
        line = np.asarray(events.line, np.int64)
        absolute = (line_ps[line] if len(line) else np.zeros(0, np.int64)) + np.asarray(events.time_ps, np.int64)
        return cls(list(events.memory_ids), np.asarray(events.memory_id), np.asarray(events.time_ps, np.int64), absolute)

    def profile_ms(self, memory_id: str, absolute_ps: int) -> float | None:
        """The memory profile's time (ms) of ``memory_id``'s event nearest ``absolute_ps``."""
        if memory_id not in self.memory_ids:
            return None
        rows = np.flatnonzero(self.memory_id == self.memory_ids.index(memory_id))
        if not len(rows):
            return None
        j = rows[int(np.argmin(np.abs(self.absolute_ps[rows] - absolute_ps)))]
        return int(self.offset_ps[j]) / PS_PER_MS

    def trace_ps(self, memory_id: str, profile_ms: float) -> int | None:
        """The absolute time of ``memory_id``'s event nearest the memory profile's
        ``profile_ms`` (the other way: memory profile → trace)."""
        many = self.trace_ps_of(memory_id, [round(profile_ms * PS_PER_MS)])
        return None if many is None else int(many[0])

    def trace_ps_of(self, memory_id: str, offsets_ps) -> np.ndarray | None:
        """:meth:`trace_ps` of many memory-profile times (ps) at once (the memory profile
        page's trace links, app/memory_trace_clock.py): for each, the absolute time of
        the allocator's event nearest it; of events at the same offset (on lines with
        different timestamps), the first in reading order."""
        if memory_id not in self.memory_ids:
            return None
        rows = np.flatnonzero(self.memory_id == self.memory_ids.index(memory_id))
        if not len(rows):
            return None
        rows = rows[np.argsort(self.offset_ps[rows], kind="stable")]
        off = self.offset_ps[rows]
        want = np.asarray(offsets_ps, np.int64)
        hi = np.minimum(np.searchsorted(off, want, side="left"), len(off) - 1)
        lo = np.maximum(hi - 1, 0)
        # the nearer neighbour; on a tie the lower offset (reading order among equal offsets:
        # searchsorted's left side is the first of them)
        below = np.searchsorted(off, off[lo], side="left")
        pick = np.where(np.abs(want - off[lo]) <= np.abs(off[hi] - want), below, hi)
        return self.absolute_ps[rows[pick]]


def time_param(ms: float) -> str:
    """``t`` as the memory profile page writes it (memory_profile_timeline.js timeParam):
    ms to the nanosecond, without float noise."""
    text = repr(round(float(ms), 6))
    return text[:-2] if text.endswith(".0") else text


def torch_device(devices: list[dict], device_index: int) -> str | None:
    """The memory profile's device id (``CUDA:0``, ``CPU``) of a trace's device index:
    -1 is the host's allocator (Kineto writes the CPU with Device Id -1), any other the
    accelerator with that index."""
    for d in devices:
        idx = d.get("deviceIndex")
        if (device_index < 0 and d.get("device") == "CPU") or (device_index >= 0 and idx == device_index and d.get("device") != "CPU"):
            return d.get("device")
    return None
