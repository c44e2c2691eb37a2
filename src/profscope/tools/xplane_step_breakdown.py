"""Why is my step slow, for xplane profiles (JAX/TF on GPU, ROCm, TPU, CPU): per step and
per device the step time, the device time by op category, the idle time and where it
lies, what bounds the step, and the straggler device; the same answer shape as the
PyTorch breakdown (tools/step_breakdown.py), see docs/steps_and_ops.md.

Input: one host's :class:`profscope.formats.xplane_step_events.StepEvents` (XProf's step
database and every device activity with its HLO op's opcode and category).

* **Steps**: XProf's own where it finds them (``step_source: "xprof_steps"``: a GPU
  plane's ``Steps`` line with the grouped device events, a CPU-only profile's host step
  groups), each step's window ``[begin, begin + duration)`` of XProf's step time. Where
  XProf finds none (JAX without ``StepTraceAnnotation``), each run of the module that
  ran most is one step (``"module_runs"``, profscope's choice: a jitted train step is one
  module run): the runs of that module, in time order, on every device, the k-th run of
  each device making step k, whose window spans them all. ``"none"`` otherwise.
* **Categories** (:data:`CATEGORIES`), from the op's HLO opcode (or, on TPU, XProf's
  ``hlo_category`` stat; a GPU kernel of no XLA op, its TensorFlow op type or its
  cuBLAS/cuDNN/CUTLASS kernel name), else the activity's name: memory copies (``memcpy_details``,
  ``Memcpy*``/``Memset*`` names, ROCm's ``copyBuffer`` kernels, ``copy-start``/``copy-done``),
  collectives (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``collective-permute``,
  ``all-to-all`` and their async halves, NCCL/RCCL kernels, a TPU's ``barrier-cores``: the
  cores' synchronisation, XProf's ``kSpecialOpName`` that its smart_suggestion
  ``BarrierCoresRule`` measures, matched by name as XProf does), matmul/convolution
  (``dot``, ``convolution`` and fusions XLA categorises as convolution), custom calls
  (cuBLAS/cuDNN ``custom-call`` kernels), fusions, other.
* **Per device** in a step's window: where activities of several categories overlap
  (several streams), the time goes to one of them, in the order of :data:`CATEGORIES`
  (last wins: compute over copies over collectives, as XProf's ``EventType`` priorities
  do), so the categories and ``idle_us`` add up to the step time to the picosecond.
  ``bound`` follows the PyTorch breakdown's rule (``input``/``launch``/``waiting`` when
  idle is at least half the step, else the busiest category).

All times are integer picoseconds internally, microseconds in the answer.
"""

from __future__ import annotations

import re

import numpy as np

from profscope.tools.step_breakdown import bound, straggler, union

PS_PER_US = 1e6
# (key, label), lowest priority first: where categories overlap on a device the later wins
CATEGORIES = (("collective", "Collective / communication"), ("memory", "Memory copy"), ("other", "Other"),
              ("custom_call", "Custom call / kernel"), ("fusion", "Fusion"), ("matmul", "Matmul / convolution"))
KEYS = tuple(k for k, _ in CATEGORIES)
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all",
                "collective-broadcast", "ragged-all-to-all", "send", "recv")


_MATMUL_TF = re.compile(r"^tf:(Batch)?MatMul|^tf:.*Conv|^tf:Einsum|^tf:_FusedMatMul|^tf:_FusedConv")
# "conv" not followed by "ert"/"ersion": Eigen's TensorConversionOp kernels (a cast) are no convolution
_MATMUL_KERNEL = re.compile(r"gemm|cutlass|cudnn|conv(?!ert|ersion)|wgrad|dgrad")


def category_of(opcode: str, hlo_category: str, name: str, memcpy: str) -> str:
    """One activity's category (see the module docstring)."""
    op = opcode or hlo_category.lower()
    low = name.lower()
    if memcpy or low.startswith(("memcpy", "memset")) or "copybuffer" in low or op.startswith(("copy-start", "copy-done")):
        return "memory"
    if op.startswith(_COLLECTIVES) or low.startswith(("nccl", "rccl", "barrier-cores")):
        return "collective"
    if op in ("dot", "convolution") or "convolution" in op:
        return "matmul"
    if not opcode and (_MATMUL_TF.search(hlo_category) or (not hlo_category and _MATMUL_KERNEL.search(low))):
        # no XLA op: a TensorFlow MatMul/Conv op's kernel, or a cuBLAS/cuDNN/CUTLASS
        # GEMM or convolution kernel by its name
        return "matmul"
    if op == "custom-call" or "custom-call" in op:
        return "custom_call"
    if op == "fusion" or op.endswith("fusion"):
        return "fusion"
    return "other"


_MEMORY_KINDS = (("h2d", "HtoD"), ("htod", "HtoD"), ("hosttodevice", "HtoD"), ("d2h", "DtoH"), ("dtoh", "DtoH"),
                 ("devicetohost", "DtoH"), ("d2d", "DtoD"), ("dtod", "DtoD"), ("devicetodevice", "DtoD"),
                 ("p2p", "PtoP"), ("ptop", "PtoP"), ("peer", "PtoP"), ("memset", "Memset"))


def memory_kind(name: str) -> str:
    """A memory activity's kind in the PyTorch breakdown's names (``HtoD``, ``DtoH``,
    ``DtoD``, ``PtoP``, ``Memset``), from the activity's name as the GPU tracers write it
    (CUPTI ``MemcpyH2D``/``MemcpyD2H``/``MemcpyD2D``/``MemcpyP2P``/``Memset``, ROCm
    ``CopyHostToDevice``/``CopyDeviceToHost``/``CopyDeviceToDevice``); ``other`` for any
    other copy (ROCm's ``copyBuffer`` kernels, TPU ``copy-start``/``copy-done``)."""
    low = name.lower().replace("_", "").replace(" ", "")
    return next((kind for key, kind in _MEMORY_KINDS if key in low), "other")


def _us(ps) -> float:
    return round(float(ps) / PS_PER_US, 3)


class _Cover:
    """The union of some intervals, asked how much of a window it covers."""

    def __init__(self, start: np.ndarray, end: np.ndarray):
        self.s, self.e = union(start, end)
        self.cum = np.r_[0, np.cumsum(self.e - self.s)]

    def _before(self, t: int) -> int:
        i = int(np.searchsorted(self.e, t, side="right"))  # intervals ending at or before t
        whole = int(self.cum[i])
        if i < len(self.s) and self.s[i] < t:
            whole += t - int(self.s[i])
        return whole

    def covered(self, a: int, b: int) -> int:
        return self._before(b) - self._before(a) if b > a else 0

    def first_last(self, a: int, b: int) -> tuple[int, int] | None:
        """The first and last covered instants of [a, b), None when nothing is covered."""
        i = int(np.searchsorted(self.e, a, side="right"))
        j = int(np.searchsorted(self.s, b, side="left")) - 1
        if i > j:
            return None
        return max(a, int(self.s[i])), min(b, int(self.e[j]))


class _Device:
    """One device's activities as arrays, and one cover per category priority level."""

    def __init__(self, dev):
        self.id, self.plane = dev.device, dev.plane
        self.start = np.asarray(dev.start, np.int64)
        self.end = np.asarray(dev.end, np.int64)
        self.program = np.asarray(dev.program_id, np.int64)
        cats = np.array([KEYS.index(category_of(o, h, n, m))
                         for o, h, n, m in zip(dev.opcode, dev.hlo_category, dev.name, dev.memcpy)], np.int64)
        self.cat = cats
        mem = KEYS.index("memory")
        self.mem_kind = np.array([memory_kind(n) if c == mem else "" for n, c in zip(dev.name, cats.tolist())],
                                 dtype=object)
        # covers[k]: activities of priority >= k; a category's time is covers[k] - covers[k + 1]
        self.covers = [_Cover(self.start[cats >= k], self.end[cats >= k]) for k in range(len(KEYS))]

    def in_step(self, a: int, b: int) -> dict:
        levels = [c.covered(a, b) for c in self.covers] + [0]
        time = {k: levels[i] - levels[i + 1] for i, k in enumerate(KEYS)}
        busy = levels[0]
        span = self.covers[0].first_last(a, b)
        before = (span[0] - a) if span else b - a
        after = (b - span[1]) if span else 0
        started = (self.start >= a) & (self.start < b)
        # the memory copies' time in the window by kind (each copy's own time, clipped)
        mem = (self.cat == KEYS.index("memory")) & (self.end > a) & (self.start < b)
        memory: dict[str, int] = {}
        for kind, s0, e0 in zip(self.mem_kind[mem], self.start[mem].tolist(), self.end[mem].tolist()):
            memory[kind] = memory.get(kind, 0) + min(e0, b) - max(s0, a)
        done = int(self.end[started].max()) - a if started.any() else None
        return {"device": self.id, "plane": self.plane, "activities": int(started.sum()),
                "time_us": {k: _us(v) for k, v in time.items()},
                "memory_us": {k: _us(v) for k, v in sorted(memory.items())},
                "busy_us": _us(busy), "idle_us": _us(b - a - busy),
                "idle_before_first_us": _us(before), "idle_between_us": _us(b - a - busy - before - after),
                "idle_after_last_us": _us(after), "work_done_us": _us(done) if done is not None else None,
                "bound": bound(b - a, b - a - busy, before, b - a - busy - before - after, after, time, KEYS),
                "_ps": {"time": time, "idle": b - a - busy}}


def module_runs(devices: list[_Device]) -> tuple[int | None, list[tuple[str, int, int]]]:
    """The program that ran most (the most time in its runs over all devices, then the most
    runs) and one step
    per run index: a run is a maximal sequence of a device's activities of that program,
    in time order, that no activity of another program interrupts."""
    per_dev_runs: dict[int, dict[int, list[tuple[int, int]]]] = {}
    for d in devices:
        o = np.lexsort((d.end, d.start))
        prog, s, e = d.program[o], d.start[o], d.end[o]
        keep = prog != -1  # -1: no program_id (TPU ids above 2^63 are negative int64s)
        prog, s, e = prog[keep], s[keep], e[keep]
        if not len(prog):
            continue
        new = np.r_[True, prog[1:] != prog[:-1]]
        first = np.flatnonzero(new)
        last = np.r_[first[1:] - 1, len(prog) - 1]
        reach = np.maximum.accumulate(e)
        for a, z in zip(first.tolist(), last.tolist()):
            per_dev_runs.setdefault(int(prog[a]), {}).setdefault(d.id, []).append((int(s[a]), int(reach[z])))
    if not per_dev_runs:
        return None, []

    def weight(p):  # the most time, then the most runs (module_time.py's "ran most")
        runs = [r for rs in per_dev_runs[p].values() for r in rs]
        return sum(b - a for a, b in runs), len(runs)

    best = max(sorted(per_dev_runs), key=weight)
    by_dev = per_dev_runs[best]
    n = max(len(r) for r in by_dev.values())
    steps = []
    for k in range(n):
        spans = [rs[k] for rs in by_dev.values() if k < len(rs)]
        steps.append((str(k), min(a for a, _ in spans), max(b for _, b in spans)))
    return best, steps


class _TraceClock:
    """One device's times on the trace viewer's clock (the index's: each event at its
    line's timestamp + offset) from the breakdown's, which are the device's own clock on
    TPU (``device_offset_ps``): through the device's event at that time, or the last one
    before it (its two clocks' offset; StepEvents' Activities ``clock_begins`` /
    ``clock_ends``); where the clocks agree (GPU, CPU) a time is itself."""

    def __init__(self, dev):
        self._begins = self._table(dev.clock_begins)
        self._ends = self._table(dev.clock_ends)

    @staticmethod
    def _table(points):
        if not points:
            return None
        a = np.asarray(points, dtype=np.int64)
        a = a[np.argsort(a[:, 0], kind="stable")]
        return a[:, 0], a[:, 1]

    @staticmethod
    def _at(table, t: int) -> int:
        # the event at t, or the last one before it (its clock offset); none: the same clock
        if table is None:
            return int(t)
        dev, trace = table
        k = int(np.searchsorted(dev, t, side="right")) - 1
        return int(t) if k < 0 else int(trace[k]) + int(t) - int(dev[k])

    def begin(self, t: int) -> int:
        return self._at(self._begins, t)

    def end(self, t: int) -> int:
        return self._at(self._ends, t)


def breakdown(ev, program_names: dict | None = None) -> dict:
    """The contract answer of one host (docs/steps_and_ops.md) from its StepEvents."""
    devices = [_Device(d) for d in ev.devices if d.start]
    origin = ev.first_ps or 0
    module = None
    if ev.steps:
        windows = [(s["name"], int(s["begin_ps"]), int(s["begin_ps"]) + int(s["duration_ps"])) for s in ev.steps]
        source = "xprof_steps"
    else:
        module, windows = module_runs(devices)
        source = "module_runs" if windows else "none"
    out_steps = []
    clocks = {d.device: _TraceClock(d) for d in ev.devices}
    if not devices:  # CPU-only (44,000 steps of a long run): no device rows, the step its own window
        none = straggler([])  # no device: None, once (0.07 s over 44,000 steps)
        out_steps = [{"step": name, "name": name, "start_us": _us(a - origin), "step_time_us": _us(b - a),
                      "devices": [], "straggler": none, "trace_window_ps": [a, b]}
                     for name, a, b in windows]
    for name, a, b in (windows if devices else ()):
        per_dev = [d.in_step(a, b) for d in devices]
        # the step on the trace index's clock, per device (each TPU core has its own
        # device clock) and over all of them
        for d, row in zip(devices, per_dev):
            row["trace_window_ps"] = [clocks[d.id].begin(a), clocks[d.id].end(b)]
        spans = [row["trace_window_ps"] for row in per_dev] or [[a, b]]
        out_steps.append({"step": name, "name": name, "start_us": _us(a - origin), "step_time_us": _us(b - a),
                          "devices": per_dev, "straggler": straggler(per_dev),
                          "trace_window_ps": [min(w[0] for w in spans), max(w[1] for w in spans)]})
    times = np.array([s["step_time_us"] for s in out_steps])
    summary: dict = {"steps": len(out_steps), "devices": [d.id for d in devices], "step_source": source,
                     "hardware": ev.hardware}
    if module is not None:
        summary["module"] = (program_names or {}).get(module) or str(module)
        summary["program_id"] = module
    if len(times):
        slow = int(np.argmax(times))
        summary.update(median_us=round(float(np.median(times)), 3), p90_us=round(float(np.percentile(times, 90)), 3),
                       slowest_step=out_steps[slow]["step"], slowest_us=float(times[slow]),
                       slowest_straggler=out_steps[slow]["straggler"])
    missing = []
    if not ev.devices:
        missing.append("no device planes (a CPU-only profile): the steps are XProf's host steps, with no device "
                       "time to break down" if ev.steps else "no device planes and no host steps")
    elif not devices:
        missing.append("the device planes hold no activity")
    if not ev.steps and ev.devices:
        missing.append("no steps XProf recognises (no StepTraceAnnotation / grouped step events): each run of the "
                       "module that ran most is one step" if windows else "no steps XProf recognises and no module runs")
    if missing:
        summary["missing"] = "; ".join(missing)
    for s in out_steps:
        for d in s["devices"]:
            d.pop("_ps")
    # start_us counts from origin_ps: the first device activity (CPU only: the first host
    # event), in the xplane's absolute picoseconds (line timestamp_ns * 1000 + offset)
    return {"source": "xplane", "categories": [{"key": k, "label": lab} for k, lab in CATEGORIES],
            "summary": summary, "steps": out_steps, "origin_ps": origin}


def all_hosts(per_host: list[dict]) -> dict:
    """``host=ALL_HOSTS``: per host its step count, median, p90 and slowest step, and the
    straggler host (the highest median step time, with two hosts or more that have steps)."""
    hosts = []
    for h in per_host:
        s = h.get("summary", {})
        hosts.append({"host": h["host"], "steps": s.get("steps", 0), "median_us": s.get("median_us"),
                      "p90_us": s.get("p90_us"), "slowest_step": s.get("slowest_step"),
                      "slowest_us": s.get("slowest_us"), "step_source": s.get("step_source")})
    timed = [h for h in hosts if h["median_us"] is not None]
    slow = max(timed, key=lambda h: h["median_us"]) if len(timed) >= 2 else None
    # hosts of equal medians have no straggler
    slow_host = slow["host"] if slow and slow["median_us"] > min(h["median_us"] for h in timed) else None
    return {"hosts": hosts, "straggler_host": slow_host}
