"""The ranked ops table of Steps & ops (``ops[]`` of ``/api/steps_ops``): one row per HLO
op, per device kernel and per framework op, most device time first, each with its slowest
occurrence (the trace viewer's link to it).

Where each kind comes from
--------------------------
* **HLO ops** (xplane profiles): XProf's device op metrics (``OpMetricsDb``,
  formats/xplane_op_metrics.py, the table XProf's ``hlo_stats`` is made of): occurrences,
  total and self time, XLA's category, the program (module) of the op; the same counts as
  XProf's hlo_stats, over the whole profile (XProf keeps no step per occurrence). A TPU's
  op metadata carries XLA's cost analysis (``flops``, ``bytes_accessed`` stats, per
  occurrence); GPU xplanes carry none (XProf runs ``HloCostAnalysis`` itself), so their
  FLOPs are null. The slowest occurrence is looked up on the trace index's ``XLA Ops``
  tracks of the device planes, by the op's name.
* **Kernels**: xplane: the events of the device planes' ``Stream #N(...)`` lines (the GPU's
  CUPTI/ROCm activities), by name. PyTorch: kineto's device activities
  (tools/step_breakdown.py ``device_kernels``), by name.
* **Framework ops**: xplane: the device planes' derived ``Framework Ops`` / ``TensorFlow
  Ops`` lines (the framework op each device op ran for), by name. PyTorch: the host slices
  kineto writes for ``record_function`` ranges (``cpu_op``, ``user_annotation``: args with
  ``External id`` and no ``cbid``, which the runtime calls have; the index keeps no
  ``cat``; read once per name), their device time the kernels launched inside them (the
  launch is the ``ac2g`` flow's start on the op's thread): ``total_us`` every kernel
  launched within the op, ``self_us`` those not within a nested framework op, ``host_us``
  the op's own wall time.

``within_steps``: only occurrences in a step (xplane: starting inside a step of the
breakdown, placed on the index's clock, else of the index's ``Steps`` lines; PyTorch:
kernels launched in a ``ProfilerStep#N``, framework ops starting in one). ``step``: one
step's occurrences only. Neither applies to the HLO rows' counts (XProf's, the whole
profile); with ``step`` each HLO row has ``in_step``, its XLA Ops events in that step
(the answer's ``ops_scope`` says what each kind covers).

Roofline: with an op's FLOPs and bytes accessed, and the device's peak FLOP/s and HBM
bandwidth (the TPU device plane's ``peak_teraflops_per_second`` and
``peak_hbm_bw_gigabytes_per_second`` stats), the op is ``compute``-bound when its
arithmetic intensity (FLOPs per byte) is at least the ridge point (peak FLOP/s over peak
bytes/s), else ``memory``-bound; null where any of the four is missing.

Times are index picoseconds inside, microseconds (3 decimals) out.
"""

from __future__ import annotations

import re

import numpy as np

from profscope.model.gc_pause import gc_paused
from profscope.tools import step_breakdown as sb
from profscope.tools import xplane_step_breakdown as xsb
from profscope.tools.trace_viewer import xplane_device_tracks

__all__ = ["chrome_trace_ops", "roofline", "xplane_ops"]

PS_PER_US = 1e6
HLO, KERNEL, FRAMEWORK = "hlo", "kernel", "framework"
_KERNEL_LINE = re.compile(r"^Stream #\d+")  # XProf's GPU stream lines: "Stream #16(Kernel)"
_FRAMEWORK_LINE = re.compile(r"^(Framework Ops|TensorFlow Ops)")  # tsl kTensorFlowOpLineName and its successor
_XLA_OPS_LINE = re.compile(r"^XLA Ops")  # "XLA Ops" (TPU) or the derived "XLA Ops - from #16" (GPU)
_STEP_NAME = re.compile(r"^ProfilerStep#")


def _us(ps) -> float:
    return round(float(ps) / PS_PER_US, 3)


def roofline(flops, bytes_accessed, peak_flops_per_s, peak_bytes_per_s) -> dict | None:
    """Where an op sits on the device's roofline: its arithmetic intensity (FLOPs per
    byte), the ridge point (peak FLOP/s over peak bytes/s) and ``bound`` (``compute`` at or
    past the ridge, else ``memory``); None when any of the four is missing or zero."""
    if not (flops and bytes_accessed and peak_flops_per_s and peak_bytes_per_s):
        return None
    intensity = flops / bytes_accessed
    ridge = peak_flops_per_s / peak_bytes_per_s
    return {"intensity": round(intensity, 6), "ridge": round(ridge, 6),
            "bound": "compute" if intensity >= ridge else "memory"}


def _row(name, kind, category, module, occurrences, total_ps, self_ps, whole_ps, slowest, **more) -> dict:
    return {"name": name, "kind": kind, "category": category, "module": module, "occurrences": int(occurrences),
            "total_us": _us(total_ps), "self_us": None if self_ps is None else _us(self_ps),
            "average_us": _us(total_ps / occurrences) if occurrences else None,
            "share": round(float(total_ps) / whole_ps, 6) if whole_ps else None,
            "flops": None, "bytes_accessed": None, "roofline": None, "slowest": slowest, **more}


def _rank(rows: list[dict]) -> list[dict]:
    """Most total device time first, then kind and name (a stable order for equal times)."""
    return sorted(rows, key=lambda r: (-r["total_us"], r["kind"], r["name"]))


# ---------------------------------------------------------------------------
# The trace index's side: tracks, groups, slowest occurrences
# ---------------------------------------------------------------------------


def _rows_on(ix, tracks: list[int]) -> np.ndarray:
    return np.flatnonzero(np.isin(np.asarray(ix.cols["track"]), tracks)) if tracks else np.zeros(0, np.int64)


def _in_windows(start: np.ndarray, windows: list[tuple[int, int]]) -> np.ndarray:
    """Which of ``start`` lie in one of ``windows`` ([s, s + d) pairs): the windows merged
    into their union's disjoint pieces, then one search per start (a pass over ``start``
    per window was 0.13 s for the 44,000 steps of a long CPU profile, with no row)."""
    out = np.zeros(len(start), bool)
    if not len(start) or not windows:
        return out
    w = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
    s, e = w[:, 0], w[:, 0] + w[:, 1]
    s, e = s[e > s], e[e > s]  # an empty window holds nothing
    if not len(s):
        return out
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    head = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])  # a piece starts past all before it
    piece_s, piece_e = s[head], np.r_[reach[head[1:] - 1], reach[-1]]
    k = np.searchsorted(piece_s, start, side="right") - 1  # the last piece starting at or before
    ok = k >= 0
    out[ok] = start[ok] < piece_e[k[ok]]
    return out


def _slowest(ix, row: int, device: str | None, host: str) -> dict:
    """The occurrence the trace viewer's link opens: its event id (the index row), where
    it is, and its time from the trace's origin."""
    start, dur = int(ix.cols["start"][row]), int(ix.cols["dur"][row])
    track = int(ix.cols["track"][row])
    return {"event_id": int(row), "start_us": _us(start), "dur_us": _us(dur), "device": device, "host": host,
            "track": ix.tracks[track].get("name", "")}


def _groups(ix, rows: np.ndarray, devices: dict[int, str] | None = None):
    """``rows`` by name: per name id, (occurrences, total ps, the slowest row, the devices
    it ran on (of ``devices``' tracks), sorted)."""
    if not len(rows):
        return
    names = np.asarray(ix.cols["name"])[rows]
    dur = np.asarray(ix.cols["dur"])[rows].astype(np.int64)
    uniq, inv = np.unique(names, return_inverse=True)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    o = np.lexsort((-dur, inv))  # by name, longest first
    first = np.r_[0, np.flatnonzero(np.diff(inv[o])) + 1]
    ran_on = _devices_of_groups(ix, rows, inv, len(uniq), devices or {})
    for j, pos in zip(range(len(uniq)), first):
        yield int(uniq[j]), int(count[j]), int(total[j]), int(rows[o[pos]]), ran_on[j]


def _devices_of_groups(ix, rows: np.ndarray, inv: np.ndarray, groups: int, devices: dict[int, str]) -> list[list[str]]:
    """Per group of ``inv``, the devices its rows' tracks belong to (one pass over the
    distinct (group, track) pairs, not over the rows)."""
    out: list[set] = [set() for _ in range(groups)]
    track = np.asarray(ix.cols["track"])[rows].astype(np.int64)
    for g, t in np.unique(np.stack([inv.astype(np.int64), track]), axis=1).T.tolist():
        if t in devices:
            out[g].add(devices[t])
    return [sorted(d) for d in out]


def _index_rows(ix, kind: str, line: re.Pattern, devices: dict[int, str], windows, host: str,
                category) -> list[dict]:
    """One row per name of the events on the device tracks whose line name matches."""
    tracks = [t for t in devices if line.match(ix.tracks[t].get("name", ""))]
    rows = _rows_on(ix, tracks)
    if windows is not None:
        rows = rows[_in_windows(np.asarray(ix.cols["start"])[rows], windows)]
    nested = any(ix.tracks[t].get("maxDepth", 0) > 0 for t in tracks)
    whole = _device_span(ix, devices, windows)
    out = []
    for name_id, count, total, slow, ran_on in _groups(ix, rows, devices):
        name = ix.names[name_id]
        dev = devices.get(int(ix.cols["track"][slow]))
        # a nested line's self time would need its children: left unknown
        out.append(_row(name, kind, category(name), None, count, total, None if nested else total, whole,
                        _slowest(ix, slow, dev, host), devices=ran_on))
    return out


def _device_span(ix, devices: dict[int, str], windows) -> int:
    """The device time the shares are of: the steps' total time on every device, or each
    device's first-to-last event span, summed (XProf's device time, idle included)."""
    by_dev: dict[str, list[int]] = {}
    for t, d in devices.items():
        by_dev.setdefault(d, []).append(t)
    if windows is not None:
        return sum(d for _s, d in windows) * len(by_dev)
    total = 0
    for tracks in by_dev.values():
        rows = _rows_on(ix, tracks)
        if len(rows):
            start = np.asarray(ix.cols["start"])[rows]
            end = start + np.asarray(ix.cols["dur"])[rows]
            total += int(end.max() - start.min())
    return total


# A breakdown's step times are rounded to the ns: its windows are widened by that much
# either side, so an op starting with its step (a module run's first op) is inside it.
_ROUNDING_PS = 1000


def _step_windows(ix, within_steps: bool | None, step: str | None, steps: list[dict] | None = None,
                  devices: dict[int, str] | None = None) -> list[tuple[int, int]] | None:
    """The windows the index-side rows are restricted to: the chosen step's, every step's
    (``within_steps``, the default when there are steps), or None for the whole profile.
    The steps are the breakdown's (``steps[]`` of the answer: an xplane's carry their span
    on the index's clock, ``trace_window_ps``, tools/xplane_step_breakdown.py; a PyTorch
    trace's are placed by the earliest event of its device tracks), else the index's own."""
    if steps and all("trace_window_ps" in s for s in steps):
        # xplane: each step's span on the index's clock, exact (the breakdown reads a TPU
        # core's device clock back event by event: xplane_step_breakdown._TraceClock)
        origin = ix.origin_ps
        steps = [(str(s["step"]), s["trace_window_ps"][0] - origin, s["trace_window_ps"][1] - s["trace_window_ps"][0])
                 for s in steps]
    elif steps:
        rows = _rows_on(ix, list(devices or {}))
        first = int(np.asarray(ix.cols["start"])[rows].min()) if len(rows) else 0
        steps = [(str(s["step"]), first + round(s["start_us"] * PS_PER_US) - _ROUNDING_PS,
                  round(s["step_time_us"] * PS_PER_US) + 2 * _ROUNDING_PS) for s in steps]
    else:
        steps = [(str(n), int(s), int(d)) for n, s, d in ix.meta.get("steps", [])]
    if step is not None:
        return [(s, d) for n, s, d in steps if n == step]
    if steps and within_steps is not False:
        return [(s, d) for _n, s, d in steps]
    return None


# ---------------------------------------------------------------------------
# xplane profiles
# ---------------------------------------------------------------------------


def xplane_ops(ix, ops: list[dict], total_time_ps: int, program_names: dict[int, str], host: str,
               peaks: dict | None = None, within_steps: bool | None = None, step: str | None = None,
               steps: list[dict] | None = None) -> dict:
    """The ops of one host's xplane: ``ops`` are the op metrics (dicts with the keys of
    formats.xplane_op_metrics.OpMetric, plus per-occurrence ``flops`` / ``bytes_accessed``
    where the profile has them), ``total_time_ps`` the device time of every device plane
    (XProf's hlo_stats shares are of it), ``peaks`` the device's ``peak_flops_per_s`` and
    ``peak_bytes_per_s``, ``steps`` the breakdown's steps. Answers ``ops`` and ``ops_scope``."""
    # The step windows are a tuple per step (44,000 on the 308 MB CPU profile) made beside
    # the breakdown's step dicts: model/gc_pause.py says why the collector waits.
    with gc_paused():
        return _xplane_ops(ix, ops, total_time_ps, program_names, host, peaks, within_steps, step, steps)


def _xplane_ops(ix, ops, total_time_ps, program_names, host, peaks, within_steps, step, steps) -> dict:
    devices = xplane_device_tracks(ix)
    windows = _step_windows(ix, within_steps, step, steps, devices)
    peaks = peaks or {}
    # one step chosen: each HLO op's events of the XLA Ops line in it (the op metrics
    # keep no step), as `in_step`
    xla = _xla_slowest(ix, devices, windows if step is not None else None)
    rows = []
    for op in ops:
        if not op["occurrences"]:
            continue  # XProf's IDLE and ops that never ran (hlo_stats skips them too)
        slow, ran_on, in_step = xla.get((op["hlo_module_id"], op["name"]), (None, [], [0, 0] if step is not None else None))
        pid = op["hlo_module_id"]
        # "<module>(<program id>)": the memory viewer's and the XLA Modules line's name of it
        module = f"{program_names[pid]}({pid})" if pid in program_names else None
        row = _row(op["name"], HLO, op["category"], module, op["occurrences"],
                   op["time_ps"], op["self_time_ps"], total_time_ps,
                   _slowest(ix, slow, devices.get(int(ix.cols["track"][slow])), host) if slow is not None else None,
                   program_id=str(op["hlo_module_id"]), framework_op=op["provenance"] or None, devices=ran_on)
        if op.get("flops"):
            row["flops"] = int(op["flops"]) * op["occurrences"]
        if op.get("bytes_accessed"):
            row["bytes_accessed"] = int(op["bytes_accessed"]) * op["occurrences"]
        # the step chart's category of the op (XLA's category read as the breakdown reads it)
        row["step_category"] = xsb.category_of("", op["category"], op["name"], "")
        if in_step is not None:
            row["in_step"] = {"events": in_step[0], "total_us": _us(in_step[1])}
        row["roofline"] = roofline(row["flops"], row["bytes_accessed"], peaks.get("peak_flops_per_s"),
                                   peaks.get("peak_bytes_per_s"))
        rows.append(row)
    # a kernel's category by its name alone (the PyTorch rule: memcpy/memset, nccl/rccl,
    # compute): the breakdown's rule needs the kernel's TF op or HLO op, which the
    # index's name does not carry (Eigen's "TensorConversionOp" kernels are no matmul)
    rows += _index_rows(ix, KERNEL, _KERNEL_LINE, devices, windows, host, sb.category_of)
    rows += _index_rows(ix, FRAMEWORK, _FRAMEWORK_LINE, devices, windows, host, _framework_category)
    scope = "step" if step is not None else "steps" if windows is not None else "profile"
    of = _share_of(scope, len(windows or []), len(set(devices.values())), "device")
    return {"ops": _rank(rows), "ops_scope": {HLO: "profile", KERNEL: scope, FRAMEWORK: scope},
            "share_of": {HLO: "the time of every device plane over the whole profile (XProf's hlo_stats share)",
                         KERNEL: of, FRAMEWORK: of}}


_PROGRAM = re.compile(r"\((\d+)\)$")  # an XLA Modules event's name: "<module>(<program id>)"


def _xla_slowest(ix, devices: dict[int, str], step_window: list[tuple[int, int]] | None = None) -> dict:
    """Per (program id, op name) on the device planes' XLA Ops lines: its slowest
    occurrence (index row) over the whole profile (XProf's counts are), the devices it
    ran on, and with ``step_window`` the (events, ps) of it that start in that window.
    An op's program is that of the XLA Modules event of its plane holding its start (two
    programs may both have a ``custom-call.1``)."""
    start = np.asarray(ix.cols["start"])
    dur = np.asarray(ix.cols["dur"])
    names = np.asarray(ix.cols["name"])
    best: dict[tuple[int, str], tuple[int, int]] = {}  # (duration, row)
    ran_on: dict[tuple[int, str], set] = {}
    in_step: dict[tuple[int, str], list[int]] = {}  # [events, ps]
    by_pid: dict[int, tuple[list[int], list[int]]] = {}
    for t in devices:
        name = ix.tracks[t].get("name", "")
        kind = 0 if _XLA_OPS_LINE.match(name) else 1 if name.startswith("XLA Modules") else None
        if kind is not None:
            by_pid.setdefault(ix.tracks[t]["pid"], ([], []))[kind].append(t)
    for op_tracks, module_tracks in by_pid.values():
        if not op_tracks:
            continue
        mods = _rows_on(ix, module_tracks)
        mods = mods[np.argsort(start[mods], kind="stable")]
        # program ids are uint64 (a TPU's pass 2^63): numbered here, looked up after
        programs, slot = [], np.full(len(ix.names), -1, np.int64)
        for n in np.unique(names[mods]).tolist():
            if m := _PROGRAM.search(ix.names[n]):
                slot[n] = len(programs)
                programs.append(int(m.group(1)))
        rows = _rows_on(ix, op_tracks)
        i = np.searchsorted(start[mods], start[rows], side="right") - 1
        ok = i >= 0
        ok[ok] = start[rows[ok]] < start[mods[i[ok]]] + dur[mods[i[ok]]]
        rows, program = rows[ok], slot[names[mods[i[ok]]]]
        rows, program = rows[program >= 0], program[program >= 0]
        if not len(rows):
            continue
        op = names[rows].astype(np.int64)
        o = np.lexsort((-dur[rows], op, program))  # per (program, op), the longest first
        new = np.r_[True, (np.diff(program[o]) != 0) | (np.diff(op[o]) != 0)]
        device = devices[op_tracks[0]]  # one plane: one device
        for p, n, r in zip(program[o][new].tolist(), op[o][new].tolist(), rows[o][new].tolist()):
            key = (programs[p], ix.names[n])
            ran_on.setdefault(key, set()).add(device)
            if int(dur[r]) > best.get(key, (-1, -1))[0]:
                best[key] = (int(dur[r]), r)
        if step_window is not None:
            inside = _in_windows(start[rows], step_window)
            for p, n, d in zip(program[inside].tolist(), op[inside].tolist(), dur[rows[inside]].tolist()):
                acc = in_step.setdefault((programs[p], ix.names[n]), [0, 0])
                acc[0] += 1
                acc[1] += int(d)
    return {key: (row, sorted(ran_on[key]), in_step.get(key, [0, 0]) if step_window is not None else None)
            for key, (_d, row) in best.items()}


def _framework_category(name: str) -> str:
    # XProf's Framework Ops events are named "name:type" (tsl TfOpFullname); the type is
    # the op's category, as XProf's framework_op_stats files it
    return name.rsplit(":", 1)[1] if ":" in name else "framework"


# ---------------------------------------------------------------------------
# PyTorch (kineto) traces
# ---------------------------------------------------------------------------


def chrome_trace_ops(ix, host: str, within_steps: bool | None = None, step: str | None = None) -> dict:
    """The kernels and framework ops of a PyTorch trace's index (module docstring)."""
    k = sb.device_kernels(ix)
    steps = sb.host_steps(ix, k)
    step_of = sb._step_of(k, steps)
    cats = sb._per_name(k, sb.category_of) if len(k) else np.zeros(0, str)
    chosen = [i for i, s in enumerate(steps) if s[0] == step] if step is not None else None
    if chosen is not None:
        sel, windows = np.isin(step_of, chosen), [(steps[i][1], steps[i][2]) for i in chosen]
    elif steps and within_steps is not False:
        sel, windows = step_of >= 0, [(s, d) for _n, s, d in steps]
    else:
        sel, windows = np.ones(len(k), bool), None
    # the device time the shares are of: every GPU's (args.device) share of the steps'
    # windows, else each GPU's first-to-last kernel span, summed (one GPU's alone would
    # give two GPUs' kernels shares adding up past 100 %)
    gpus = np.unique(k.device).tolist() if len(k) else []
    whole = (sum(d for _s, d in windows) * len(gpus) if windows is not None
             else sum(int(k.end[k.device == g].max() - k.start[k.device == g].min()) for g in gpus))
    rows = _kernel_rows(ix, k, sel, cats, whole, host) + _framework_rows(ix, k, sel, windows, whole, host)
    scope = "step" if chosen is not None else "steps" if windows is not None else "trace"
    of = _share_of(scope, len(windows or []), len(gpus), "GPU")
    return {"ops": _rank(rows), "ops_scope": {KERNEL: scope, FRAMEWORK: scope}, "share_of": {KERNEL: of, FRAMEWORK: of}}


def _share_of(scope: str, steps: int, devices: int, unit: str) -> str | None:
    """What a kernel or framework row's ``share`` is of, said for the page's table header;
    None without a device (a CPU-only trace: no device time, the shares are null)."""
    if not devices:
        return None
    many = f"{devices} {unit}s" if devices != 1 else f"1 {unit}"
    if scope == "step":
        return f"the step's device time (its time × {many})"
    if scope == "steps":
        return f"the steps' device time ({steps} step{'s' if steps != 1 else ''} × {many})"
    return f"the devices' time from first to last activity ({many})"


def _kernel_rows(ix, k: sb.Kernels, sel: np.ndarray, cats: np.ndarray, whole: int, host: str) -> list[dict]:
    if not sel.any():
        return []
    names, dur, idx = k.name[sel], (k.end - k.start)[sel], np.flatnonzero(sel)
    uniq, inv = np.unique(names, return_inverse=True)
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    o = np.lexsort((-dur, inv))
    first = np.r_[0, np.flatnonzero(np.diff(inv[o])) + 1]
    ran_on: list[list[str]] = [[] for _ in range(len(uniq))]
    for g, d in np.unique(np.stack([inv.astype(np.int64), k.device[sel]]), axis=1).T.tolist():
        ran_on[g].append(f"GPU {d}")
    out = []
    for j, pos in enumerate(first):
        i = int(idx[o[pos]])
        slow = _slowest(ix, int(k.row[i]), f"GPU {int(k.device[i])}", host)
        slow["stream"] = int(k.stream[i])
        name = k.names[int(uniq[j])]
        out.append(_row(name, KERNEL, str(cats[i]), None, count[j], total[j], total[j], whole, slow,
                        memory_kind=sb.memory_kind(name), devices=ran_on[j]))
    return out


def _framework_ops(ix, device_tracks: list[int]) -> np.ndarray:
    """The rows of kineto's ``record_function`` ranges (module docstring): host slices
    whose args have ``External id`` and no ``cbid``, not the Python stack's (``Python id``)
    nor the step's own slice. Kineto gives every event of a name the same ``cat``, so the
    args of each name's first row decide for all its rows (one read per name, not per
    row: the V100 trace has 44,668 slices of 353 names)."""
    track = np.asarray(ix.cols["track"])
    rows = np.flatnonzero(~np.isin(track, device_tracks) & (np.asarray(ix.cols["alen"]) > 0))
    names = np.asarray(ix.cols["name"])[rows]
    uniq, first = np.unique(names, return_index=True)
    framework = [int(n) for n, a in zip(uniq.tolist(), ix.json_args(rows[first]))
                 if ("External id" in a or "external id" in a) and "cbid" not in a and "Python id" not in a
                 and not _STEP_NAME.match(ix.names[int(n)])]
    return rows[np.isin(names, framework)]


def _framework_rows(ix, k: sb.Kernels, sel: np.ndarray, windows, whole: int, host: str) -> list[dict]:
    ops = _framework_ops(ix, k.tracks)
    if not len(ops):
        return []
    start = np.asarray(ix.cols["start"])[ops].astype(np.int64)
    end = start + np.asarray(ix.cols["dur"])[ops].astype(np.int64)
    track = np.asarray(ix.cols["track"])[ops]
    depth = np.asarray(ix.cols["depth"])[ops]
    device_ps = np.zeros(len(ops), np.int64)
    self_ps = np.zeros(len(ops), np.int64)
    # the kernels' launches (the ac2g flow's start: its track and time), per host track
    launched = sel & (k.launch >= 0)
    ltrack = _launch_tracks(ix, k)
    kdur = (k.end - k.start).astype(np.int64)
    for t in np.unique(track):
        on = np.flatnonzero(launched & (ltrack == t))
        mine = np.flatnonzero(track == t)
        if not len(on):
            continue
        o = np.argsort(k.launch[on], kind="stable")
        when, d = k.launch[on][o], kdur[on][o]
        cum = np.r_[0, np.cumsum(d)]
        a = np.searchsorted(when, start[mine], side="left")
        b = np.searchsorted(when, end[mine], side="left")
        device_ps[mine] = cum[b] - cum[a]
        # each launch's innermost framework op: deeper ops overwrite their parents
        owner = np.full(len(when), -1, np.int64)
        for p in np.argsort(depth[mine], kind="stable").tolist():
            owner[a[p]:b[p]] = mine[p]
        has = owner >= 0
        np.add.at(self_ps, owner[has], d[has])
    keep = np.ones(len(ops), bool) if windows is None else _in_windows(start, windows)
    sub = np.flatnonzero(keep)
    names = np.asarray(ix.cols["name"])[ops][sub]
    uniq, inv = np.unique(names, return_inverse=True)
    host_ps = (end - start)[sub]
    o = np.lexsort((-host_ps, inv))
    first = np.r_[0, np.flatnonzero(np.diff(inv[o])) + 1] if len(sub) else []
    # per name, summed in one pass each (int64: exact ps)
    count = np.bincount(inv, minlength=len(uniq))
    sums = [np.zeros(len(uniq), np.int64) for _ in range(3)]
    for acc, col in zip(sums, (device_ps[sub], self_ps[sub], host_ps)):
        np.add.at(acc, inv, col)
    out = []
    for j, pos in enumerate(first):
        out.append(_row(ix.names[int(uniq[j])], FRAMEWORK, "framework", None, int(count[j]), int(sums[0][j]),
                        int(sums[1][j]), whole, _slowest(ix, int(ops[int(sub[o[pos]])]), None, host),
                        host_us=_us(sums[2][j]), devices=[]))  # a host op: its kernels' devices are the kernel rows
    return out


def _launch_tracks(ix, k: sb.Kernels) -> np.ndarray:
    """Per kernel, the track its launch flow comes from (-1 without one)."""
    return sb.launch_sources(ix, np.asarray(ix.cols["track"])[k.row], k.start)[0]
