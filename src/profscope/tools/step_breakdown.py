"""Why is my step slow, for PyTorch (kineto) traces: per ``ProfilerStep#N`` and per GPU,
the step time, the device time by kernel category, the device idle time and what it
waits for, HTA's temporal breakdown, and a ranked table of the kernels.

Everything is read from a built trace index (:class:`profscope.tools.trace_index.TraceIndex`):
its columns (``start``, ``dur``, ``track``, ``name``), its steps, its flows, and the JSON
args of the device rows only, so the trace is never decoded a second time.

What kineto writes, and what this module relies on
--------------------------------------------------
* A device activity (``cat`` ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync``;
  ``Kernel``/``Memcpy``/``Memset`` in 2021's traces) has ``args.device`` and
  ``args.stream`` (and ``args.correlation``); ``gpu_user_annotation`` slices on the same
  stream rows have no ``stream`` arg, and CPU runtime calls have no ``device`` (ROCm's
  ``hipMemcpyWithStream`` has ``stream`` alone). Such rows live on the GPU's own
  ``pid``/``tid`` (stream) tracks; a track is a device track when one of its first
  :data:`_SAMPLE` rows has both args (thread names cannot tell: TraceLens's B200 trace
  names its stream track ``thread 7``).
* Each launch is an ``ac2g`` flow (``async`` in 2021) from the runtime call (``s`` at the
  call's ``ts``) to the kernel (``f`` at the kernel's ``ts``); the index keeps the arrow
  ``(name, from track, from ps, to track, to ps)``. A kernel belongs to the step whose
  ``ProfilerStep#N`` slice holds its launch (HTA's ``add_iteration`` does the same through
  ``correlation``); a kernel without a launch flow belongs to the step holding its start.

Categories (``category_of``): ``communication`` (NCCL/RCCL kernels), ``memory``
(``Memcpy*``, ``Memset*``, ``dma*``: kineto's names for copies and sets), ``other``
(``cuda_sync`` waits: ``Event Sync``, ``Context Sync``, ``Stream Wait Event``,
``Stream Sync``) and ``compute`` (every other kernel). HTA's own types
(``hta_kernel_type``) differ in one place: ``Stream Wait Event`` is COMPUTATION there (its
``NCCL_COMPUTE_KERNEL_RE`` only excludes names ending ``Sync``); docs/steps_and_ops.md says
how every number relates to HTA's and to XProf's.

All times are integer picoseconds internally; the answers give microseconds (floats).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_SAMPLE = 16  # rows looked at per track to tell a device (stream) track from a CPU thread
COMPUTE, COMMUNICATION, MEMORY, OTHER = "compute", "communication", "memory", "other"
CATEGORIES = (COMPUTE, COMMUNICATION, MEMORY, OTHER)
_COMM = re.compile(r"^(nccl|rccl)", re.I)  # ncclDevKernel_*, ncclKernel_*, rccl...: collectives
_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")  # kineto's copy/set activities (HTA's MEMORY_KERNEL_RE)
_SYNC = frozenset(("Event Sync", "Context Sync", "Stream Wait Event", "Stream Sync"))  # kineto's cuda_sync names
# HTA 0.5's rules (hta/utils/utils.py), for the comparison with HTA only
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = _MEMORY
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_HTA_SYNC_NAMES = ("Event Sync", "Context Sync")  # HTA keeps these even on stream -1
# a step is bound by what keeps its device idle when idle is at least this share of it
BOUND_IDLE_SHARE = 0.5
PS_PER_US = 1e6


def category_of(name: str) -> str:
    if _COMM.match(name):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    if name in _SYNC:
        return OTHER
    return COMPUTE


def memory_kind(name: str) -> str | None:
    """A memory activity's kind, from kineto's name (``Memcpy HtoD (Pinned -> Device)``,
    ``Memcpy DtoH (Device -> Pinned)``, ``Memcpy DtoD (Device -> Device)``, ``Memset
    (Device)``): ``HtoD``, ``DtoH``, ``DtoD``, ``PtoP`` or ``Memset``; ``other`` for any other
    copy; None for a non-memory activity."""
    if not _MEMORY.match(name):
        return None
    if name.startswith("Memset"):
        return "Memset"
    kind = name[7:11]  # HTA's get_memory_kernel_type: the 4 letters after "Memcpy "
    return kind if name.startswith("Memcpy ") and kind in ("HtoD", "DtoH", "DtoD", "PtoP") else "other"


def hta_kernel_type(name: str) -> str:
    """HTA's ``get_kernel_type``: COMMUNICATION, MEMORY, COMPUTATION or OTHER."""
    if _HTA_COMM.match(name):
        return "COMMUNICATION"
    if _HTA_MEMORY.match(name):
        return "MEMORY"
    return "OTHER" if _HTA_NOT_COMPUTE.match(name) else "COMPUTATION"


@dataclass
class Kernels:
    """The device activities of a trace, one entry per row, sorted by start."""

    start: np.ndarray  # int64 ps (index time)
    end: np.ndarray  # int64 ps
    name: np.ndarray  # int32 into ``names``
    device: np.ndarray  # int64 (args.device)
    stream: np.ndarray  # int64 (args.stream)
    launch: np.ndarray  # int64 ps: the launching call's start, or -1 without a launch flow
    names: list[str]
    tracks: list[int]  # the device (stream) tracks
    row: np.ndarray | None = None  # int64: each activity's index row (its event id, for links)

    def __len__(self) -> int:
        return len(self.start)


def _device_track_rows(idx) -> tuple[list[int], list[np.ndarray]]:
    track = np.asarray(idx.cols["track"])
    tracks, rows_by_track = [], []
    for t, tr in enumerate(idx.tracks):
        if tr.get("kind", "slices") != "slices" or not tr.get("events"):
            continue
        rows = np.flatnonzero(track == t)
        if any(_is_device(idx.args(int(r))) for r in rows[:_SAMPLE]):
            rows_by_track.append(rows)
            tracks.append(t)
    return tracks, rows_by_track


def device_tracks(idx) -> list[int]:
    """The device (stream) tracks of a Chrome trace's index: one of a track's first
    :data:`_SAMPLE` rows has ``args.device`` and ``args.stream`` (see the module docstring)."""
    return _device_track_rows(idx)[0]


def device_kernels(idx) -> Kernels:
    """Every device activity of a Chrome trace's index (see the module docstring)."""
    track = np.asarray(idx.cols["track"])
    tracks, rows_by_track = _device_track_rows(idx)
    rows = np.sort(np.concatenate(rows_by_track)) if rows_by_track else np.zeros(0, np.int64)
    keep, device, stream = [], [], []
    names, name_col = idx.names, np.asarray(idx.cols["name"])[rows].tolist()
    for r, n, a in zip(rows.tolist(), name_col, idx.json_args(rows)):
        dev = _int(a.get("device"), -1)
        if dev >= 0 and "stream" in a and _int(a.get("correlation"), -1) >= 0:
            st = _int(a["stream"], -1)
            if st >= 0 or names[n] in _HTA_SYNC_NAMES:
                keep.append(r)
                device.append(dev)
                stream.append(st)
    rows = np.asarray(keep, np.int64)
    start = np.asarray(idx.cols["start"])[rows].astype(np.int64)
    end = start + np.asarray(idx.cols["dur"])[rows].astype(np.int64)
    launch = launch_sources(idx, track[rows], start)[1]
    o = np.lexsort((end, start))
    return Kernels(start[o], end[o], np.asarray(idx.cols["name"])[rows][o].astype(np.int32),
                   np.asarray(device, np.int64)[o], np.asarray(stream, np.int64)[o], launch[o], idx.names, tracks,
                   rows[o])


def _is_device(args: dict) -> bool:
    return isinstance(args, dict) and "device" in args and "stream" in args


def _int(v, default: int) -> int:
    """An integer arg (kineto writes ints), else ``default``: a string, a bool, NaN or a
    value beyond int64 (hostile input) is not a device or stream number."""
    if v.__class__ is int:
        return v if -(1 << 63) <= v < 1 << 63 else default
    return int(v) if v.__class__ is float and v == v and abs(v) < 2.0**63 else default


def launch_sources(idx, track: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel, the track and the start (ps) of the call its launch flow comes from,
    -1 and -1 if none: the arrow whose end is on the kernel's track at the kernel's start
    (kineto's ``f`` has the kernel's ``ts``)."""
    src_track = np.full(len(start), -1, np.int64)
    src_ps = np.full(len(start), -1, np.int64)
    flows = np.asarray(idx.flows, np.int64).reshape(-1, 5)  # (name, from track, from ps, to track, to ps)
    if not len(flows) or not len(start):
        return src_track, src_ps
    # one key per (track, ps): tracks are few (< 2^20) and index times fit in 2^43 ps here
    fkey = (flows[:, 3] << 43) + flows[:, 4]
    o = np.argsort(fkey, kind="stable")
    fkey, flows = fkey[o], flows[o]
    key = (track.astype(np.int64) << 43) + start
    i = np.searchsorted(fkey, key)
    hit = i < len(fkey)
    hit[hit] = fkey[i[hit]] == key[hit]
    src_track[hit] = flows[i[hit], 1]
    src_ps[hit] = flows[i[hit], 2]
    return src_track, src_ps


# ---------------------------------------------------------------------------
# Interval arithmetic
# ---------------------------------------------------------------------------


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint intervals covering [start, end) (HTA's ``merge_kernel_intervals``:
    touching intervals merge too)."""
    if not len(start):
        return start, end
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]


def _covered(start: np.ndarray, end: np.ndarray) -> int:
    s, e = union(start, end)
    return int((e - s).sum())


def temporal(start: np.ndarray, end: np.ndarray, compute: np.ndarray) -> dict:
    """HTA's temporal breakdown of these activities: ``kernel_time`` from the first start
    to the last end, ``idle`` the part of it no activity covers, ``compute`` the part
    compute kernels cover, ``non_compute`` the rest (copies, sets, collectives, waits not
    under a compute kernel). Same units as the input."""
    if not len(start):
        return {"kernel_time": 0, "idle": 0, "compute": 0, "non_compute": 0}
    span = int(end.max() - start.min())
    idle = span - _covered(start, end)
    comp = _covered(start[compute], end[compute])
    return {"kernel_time": span, "idle": idle, "compute": comp, "non_compute": span - idle - comp}


# ---------------------------------------------------------------------------
# The breakdown
# ---------------------------------------------------------------------------


def _us(ps) -> float:
    return round(float(ps) / PS_PER_US, 3)


def host_steps(idx, k: Kernels) -> list[tuple[str, int, int]]:
    """The ``ProfilerStep#N`` slices of the host threads, by start. Kineto also writes each
    step as a ``gpu_user_annotation`` on the stream rows (the span of its kernels); the
    index lists those among its steps too, and they are dropped here: a step's time is
    the host's."""
    steps = [(str(n), int(s), int(d)) for n, s, d in idx.meta.get("steps", [])]
    if not steps or not k.tracks:
        return sorted(steps, key=lambda x: x[1])
    on_device = np.isin(np.asarray(idx.cols["track"]), k.tracks)
    names = {i for i, n in enumerate(idx.names) if n.startswith("ProfilerStep#")}
    rows = np.flatnonzero(on_device & np.isin(np.asarray(idx.cols["name"]), list(names)))
    device_starts = {(idx.names[int(idx.cols["name"][r])].removeprefix("ProfilerStep#"), int(idx.cols["start"][r]))
                     for r in rows}
    return sorted((s for s in steps if (s[0], s[1]) not in device_starts), key=lambda x: x[1])


def _step_of(k: Kernels, steps: list) -> np.ndarray:
    """Per kernel, the index of the step holding its launch (its start when it has no
    launch flow), -1 for none."""
    when = np.where(k.launch >= 0, k.launch, k.start)
    out = np.full(len(k), -1, np.int64)
    for i, (_name, s, d) in enumerate(steps):
        out[(when >= s) & (when < s + d)] = i
    return out


def _device_step(k: Kernels, launched: np.ndarray, on_dev: np.ndarray, s: int, d: int, cats: np.ndarray,
                 kinds: np.ndarray) -> dict:
    """One device's share of one step [s, s + d): ``launched`` its kernels launched in the
    step (their time by category, HTA's temporal breakdown of them), ``on_dev`` every
    kernel of the device (the device is busy in the step's window whichever step
    launched what runs there: kineto's GPU runs behind the host)."""
    dur = k.end - k.start
    by_cat = {c: _us(dur[launched & (cats == c)].sum()) for c in CATEGORIES}
    mem = launched & (cats == MEMORY)
    memory = {str(kind): int(dur[mem & (kinds == kind)].sum()) for kind in np.unique(kinds[mem])}
    e = s + d
    inside = on_dev & (k.end > s) & (k.start < e)
    bs, be = union(np.maximum(k.start[inside], s), np.minimum(k.end[inside], e))
    busy = int((be - bs).sum())
    # where the idle lies: before the first activity of the window (the device waits for
    # the host: the input pipeline, Python before the first launch), after the last one
    # (the host has not started the next step's work), and between activities (each
    # kernel waits for its launch, or a stream for another's event)
    before = int(bs[0] - s) if len(bs) else d
    after = int(e - be[-1]) if len(be) else 0
    between = d - busy - before - after
    tb = temporal(k.start[launched], k.end[launched], launched[launched] & (cats[launched] == COMPUTE))
    done = _us(int(k.end[launched].max()) - s) if launched.any() else None
    return {"kernels": int(launched.sum()), "time_us": by_cat, "work_done_us": done,
            "memory_us": {kind: _us(v) for kind, v in sorted(memory.items())}, "busy_us": _us(busy), "idle_us": _us(d - busy),
            "idle_before_first_us": _us(before), "idle_between_us": _us(between), "idle_after_last_us": _us(after),
            "temporal_us": {key: _us(v) for key, v in tb.items()},
            "bound": bound(d, d - busy, before, between, after, by_cat)}


def bound(step: int, idle: int, before: int, between: int, after: int, by_cat: dict,
          categories=(COMPUTE, COMMUNICATION, MEMORY)) -> str:
    """What limits the step on this device. With idle at least :data:`BOUND_IDLE_SHARE`
    of the step, where most of it lies: before the first activity, ``input`` (nothing is
    queued while the host prepares the batch); between activities, ``launch`` (kernels
    wait for the host to launch them); after the last, ``waiting`` (the device's work is
    done and the step goes on: the host waits for another device, or runs on without
    it). Otherwise the busiest of ``categories`` on the device (here ``compute``,
    ``communication``, ``memory``; the xplane breakdown's own)."""
    if step > 0 and idle >= BOUND_IDLE_SHARE * step:
        return max((before, "input"), (between, "launch"), (after, "waiting"))[1]
    busiest = max(categories, key=lambda c: by_cat[c])
    return busiest if by_cat[busiest] > 0 else "idle"


def kernel_table(k: Kernels, sel: np.ndarray, cats: np.ndarray, whole_us: float) -> list[dict]:
    """The kernels of ``sel`` by name, most total time first: occurrences, total,
    average, and share of ``whole_us`` (the time they are a part of)."""
    if not sel.any():
        return []
    names, dur = k.name[sel], (k.end - k.start)[sel]
    uniq, inv = np.unique(names, return_inverse=True)
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    first_cat = {int(n): c for n, c in zip(names, cats[sel])}
    rows = []
    for j in np.argsort(-total, kind="stable"):
        n = int(uniq[j])
        rows.append({"name": k.names[n], "category": first_cat[n], "memory_kind": memory_kind(k.names[n]),
                     "hta_kernel_type": hta_kernel_type(k.names[n]),
                     "occurrences": int(count[j]), "total_us": _us(total[j]), "average_us": _us(total[j] / count[j]),
                     "share": round(float(total[j]) / PS_PER_US / whole_us, 6) if whole_us else None})
    return rows


def straggler(per_dev: list[dict]) -> dict | None:
    """The device that finishes the step's work last (``work_done_us``: the end of its
    last kernel launched in the step, from the step's start) and by how much after the
    first one; None with fewer than two devices working in the step."""
    done = [(d["work_done_us"], d["device"]) for d in per_dev if d["work_done_us"] is not None]
    if len(done) < 2:
        return None
    last, first = max(done), min(done)
    return {"device": last[1], "lag_us": round(last[0] - first[0], 3)}


def _per_name(k: Kernels, fn) -> np.ndarray:
    """``fn(name)`` per kernel as a fixed-width string array (one call per distinct name:
    a trace has millions of kernels of a few hundred names)."""
    uniq, inv = np.unique(k.name, return_inverse=True)
    return np.array([fn(k.names[int(u)]) for u in uniq] or [""], dtype=str)[inv.reshape(-1)]


def breakdown(idx) -> dict:
    """The step-time breakdown of a Chrome trace's index, as plain data: ``steps`` (per
    ``ProfilerStep#N``: its time and, per device, kernel time by category, busy and idle
    time, the idle before the first kernel and between kernels, HTA's temporal breakdown
    and what bounds it), ``summary`` (median, p90 and slowest step) and ``kernels`` (the
    ranked kernel table of the steps' kernels, all kernels when the trace has no steps).
    """
    k = device_kernels(idx)
    steps = host_steps(idx, k)
    cats = _per_name(k, category_of)
    kinds = _per_name(k, lambda n: memory_kind(n) or "")
    step_of = _step_of(k, steps)
    devices = sorted(set(int(d) for d in k.device))
    out_steps = []
    for i, (name, s, d) in enumerate(steps):
        # name: the device as the trace viewer and the ops table's rows call it (kineto's
        # args.device N is the process "GPU N")
        per_dev = [{"device": dev, "name": f"GPU {dev}", **_device_step(k, (step_of == i) & (k.device == dev), k.device == dev, s, d, cats,
                                                   kinds)}
                   for dev in devices]
        out_steps.append({"step": name, "start_us": _us(s), "step_time_us": _us(d), "devices": per_dev,
                          "straggler": straggler(per_dev)})
    sel = step_of >= 0 if steps else np.ones(len(k), bool)
    whole = sum(s[2] for s in steps) / PS_PER_US if steps else _us(temporal(k.start, k.end, cats == COMPUTE)["kernel_time"])
    times = np.array([s["step_time_us"] for s in out_steps])
    summary = {"steps": len(steps), "devices": devices, "kernels": int(len(k)),
               "step_source": "ProfilerStep" if steps else "none"}
    if len(times):
        slow = int(np.argmax(times))
        summary.update(median_us=round(float(np.median(times)), 3), p90_us=round(float(np.percentile(times, 90)), 3),
                       slowest_step=out_steps[slow]["step"], slowest_us=float(times[slow]),
                       slowest_straggler=out_steps[slow]["straggler"])
    if not len(k):
        summary["missing"] = "no device activity (no event with args.device and args.stream): a CPU-only trace"
    elif not steps:
        summary["missing"] = "no ProfilerStep#N slices: the kernel table covers the whole trace"
    return {"categories": [{"key": c, "label": c} for c in CATEGORIES], "summary": summary, "steps": out_steps,
            "kernels": kernel_table(k, sel, cats, whole)}


def hta_view(idx) -> dict:
    """The kernels HTA 0.5 analyses and its numbers for them (µs), computed here for the
    comparison that tests/test_step_breakdown_hta.py makes. HTA's choices, each followed:

    * kernels launched before the last ``ProfilerStep``'s start, when the trace has two
      steps or more (``Trace._filter_irrelevant_gpu_kernels``, ``include_last_profiler_step``
      False by default); all kernels otherwise; a kernel without a launch flow is kept only
      in the latter case (HTA joins kernels to launches by ``correlation``);
    * times in whole microseconds: start rounded up, end down (``round_down_time_stamps``,
      for traces whose ``ts`` are floats; integer traces are unchanged by it);
    * HTA's kernel types (``hta_kernel_type``) for its compute time.
    """
    k = device_kernels(idx)
    steps = idx.meta.get("steps", [])
    sel = np.ones(len(k), bool)
    # HTA counts distinct step *names* (symbol ids), and takes the last start among every
    # slice so named, kineto's gpu_user_annotation copies included
    if len({s[0] for s in steps}) >= 2:
        last = max(int(s[1]) for s in steps)
        sel = (k.launch >= 0) & (k.launch < last)
    # index times are ps from ``origin_ps`` (absolute, from the file's own µs timestamps),
    # which need not be a whole µs: rounded in the file's µs, as HTA rounds
    off = int(idx.origin_ps) % 1_000_000
    start = -((-(k.start[sel] + off)) // 1_000_000)
    end = (k.end[sel] + off) // 1_000_000
    types = np.array([hta_kernel_type(k.names[int(n)]) for n in k.name[sel]], dtype=object)
    tb = temporal(start, end, types == "COMPUTATION")
    per_kernel: dict[str, list] = {}
    for n, d in zip(k.name[sel], end - start):
        per_kernel.setdefault(k.names[int(n)], []).append(int(d))
    kernels = {name: {"count": len(v), "sum": sum(v), "kernel_type": hta_kernel_type(name)}
               for name, v in per_kernel.items()}
    return {"temporal": tb, "kernels": kernels}
