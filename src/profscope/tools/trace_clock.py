"""The trace of the same process at a memory time: how a time of the memory profile or of
a PyTorch memory snapshot maps onto the trace viewer's clock (issue 37: a time on those
pages opens the trace viewer there), and when it does not.

The trace viewer's times are ms from its index's ``origin_ps`` (tools/trace_index.py: an
absolute ps time, the earliest slice of the host). Each memory source has its own zero:

* **xplane allocator events** (tools/memory_profile_allocator.py): ``timeOffsetPs`` is the
  event's ``offset_ps`` from its own ``/host:CPU`` line's ``timestamp_ns``, as XProf
  stores it; the trace places the same event at ``timestamp_ns * 1000 + offset_ps``
  (formats/xplane_trace.py: a point of the allocator's counter). The host's
  :class:`~profscope.tools.trace_links.AllocatorClock` holds both times of every event (the
  one mapping, shared with the trace's counter -> memory profile links). TF and JAX on
  NVIDIA write one ``timestamp_ns`` for every host line, so one shift holds (237,916,000 ps
  on the TF GPU fixture's host 34.83.195.179_6003); ROCm JAX's host lines start at 2 or 3
  different times (the MI300 fixtures), so there each event has its own trace time.
* **PyTorch trace ``[memory]`` events** (tools/memory_profile_torch.py): ms from
  ``timeOriginUs``, the file's earliest ``ts``; the index's origin is the same file's
  earliest slice in ps (formats/chrome_trace.py), so the offset is the difference of the
  two origins, computed as the reader computes a ``ts`` (0 on both public PyTorch traces
  with ``[memory]`` events).
* **a memory snapshot**: trace entries carry ``time_us``, Unix-epoch µs (torch converts its
  TSC clock with ``c10::ApproximateClockToUnixTimeConverter``: 1,762,926,170,067,820 µs
  in niu_fwd_bwd_200_mixed.pickle, November 2025). A kineto trace's own clock is
  ``ts`` µs + ``baseTimeNanoseconds`` / 1000 (kineto >= 2.1 writes ``ts`` relative to it)
  or, without that key, ``ts`` itself (older kineto writes Unix-epoch µs: the 2021
  resnet50 fixture). A snapshot has no pid, so "the same process" is what can be checked:
  the trace sits in the snapshot's folder, its Unix-time span contains every time of the
  snapshot's device, and its ``[memory]`` events include that CUDA device. None of the public snapshots has such a trace (their
  times fall in 2025-2026, the traces' in 2021 and 2025-07), so there they get no link.

Everything returns plain data for the pages: ``{"offsetMs": float}`` (trace ms = source
ms + offsetMs), ``{"offsetMs": None, "traceMs": {timeOffsetPs: trace ms}}`` (per event),
or ``{"offsetMs": None, "why": str}``.
"""

from __future__ import annotations

import datetime

import numpy as np

PS_PER_MS = 10**9


def no_link(why: str) -> dict:
    return {"offsetMs": None, "why": why}


def allocator_times(profile: dict, clock, origin_ps: int) -> dict[str, dict]:
    """Per memory id of an XProf memory profile payload: where its events (the sampled
    timeline the page draws) fall on the trace viewer's ms. ``clock``: the host's
    :class:`~profscope.tools.trace_links.AllocatorClock` (each event's line timestamp +
    offset, the trace's absolute ps); ``origin_ps``: the trace index's origin. One shift
    for every event (one line timestamp: TF GPU, TPU) is ``offsetMs``; several (MI300's
    host lines) give ``traceMs``, the trace ms of each event by its ``timeOffsetPs``."""
    out = {}
    for mid, per in (profile.get("memoryProfilePerAllocator") or {}).items():
        ps = np.unique(np.array([int(s["timeOffsetPs"]) for s in per.get("sampledTimelineSnapshots") or []], dtype=np.int64))
        got = clock.trace_ps_of(mid, ps) if len(ps) else None
        if got is None:
            out[mid] = no_link(f"the profile's host plane has no event of allocator {mid} to place on the trace")
            continue
        shifts = np.unique(got - ps)
        if len(shifts) == 1:
            out[mid] = {"offsetMs": (int(shifts[0]) - origin_ps) / PS_PER_MS}
        else:
            out[mid] = {"offsetMs": None, "traceMs": {str(int(p)): (int(a) - origin_ps) / PS_PER_MS for p, a in zip(ps, got)}}
    return out


def allocator_counter(memory_id: str) -> str:
    """The trace's counter of an allocator's events: formats/xplane_trace.py names it after
    the allocator (its ``bytes_allocated`` after each event)."""
    return f"{memory_id} heap allocated"


def torch_counter(device: dict) -> str:
    """The trace's counter of a PyTorch memory payload device (tools/memory_profile_torch.py
    ``devices[]``): formats/chrome_trace.py names it after the ``[memory]`` events' Device Id,
    -1 for the host's CPU allocator."""
    index = -1 if device.get("device") == "CPU" else device.get("deviceIndex")
    return f"memory allocated (device {index})"


def torch_trace_offset(time_origin_us: float, origin_ps: int) -> dict:
    """A PyTorch trace's memory payload (ms since ``timeOriginUs``) on the same file's
    trace viewer clock. ``timeOriginUs`` is a float ``ts`` (Unix-epoch µs: ~1.6e15, whose
    float step is 0.25 µs), so it is turned into ps the way formats/chrome_trace.py turns a
    ``ts`` into the index's ps (its whole µs exactly, then the rest rounded to the ps), not by
    ``ts * 1e6``: that product's rounding put the 2021 V100 trace 3,072 ps off and the H100 one
    50 ps, enough for the counter sample at the link's time to be the one before it."""
    t = float(time_origin_us)
    whole = float(int(t))
    return {"offsetMs": (int(whole) * 10**6 + round((t - whole) * 1e6) - origin_ps) / PS_PER_MS}


def kineto_unix_ns(base_time_ns) -> int:
    """What to add to a kineto trace's ``ts`` (as ns) for Unix-epoch ns: its
    ``baseTimeNanoseconds``, or 0 for a trace without it (older kineto wrote epoch µs
    into ``ts``)."""
    return int(base_time_ns) if isinstance(base_time_ns, (int, float)) and base_time_ns > 0 else 0


def snapshot_offset(first_us: int, last_us: int, device: int, trace: dict) -> dict:
    """A snapshot device's times (``time_us``, Unix µs) on a trace beside it: trace ms =
    (time_us - ``first_us``) / 1000 + offsetMs (from the first event, as the snapshot page
    counts, so that no float holds a Unix time in ms). ``trace``: ``name``,
    ``startUs``/``endUs`` (its span, Unix µs), ``originPs`` (the index's origin in the
    file's own ps), ``unixNs`` (:func:`kineto_unix_ns`), ``devices`` (the CUDA device
    indexes it recorded)."""
    name = trace["name"]
    if device not in trace["devices"]:
        return no_link(f"{name} recorded no CUDA device {device}")
    if first_us < trace["startUs"] or last_us > trace["endUs"]:
        return no_link(f"{name} ran from {_utc(trace['startUs'])} to {_utc(trace['endUs'])}, this snapshot's "
                       f"events from {_utc(first_us)} to {_utc(last_us)}: not the same run")
    # the file's own ps of first_us: Unix ps minus the trace's base; then from the origin
    return {"offsetMs": (int(first_us) * 10**6 - trace["unixNs"] * 1000 - trace["originPs"]) / PS_PER_MS}


def _utc(us: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{us:.0f} µs"
