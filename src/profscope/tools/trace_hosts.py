"""The trace of every host of a multi-host profile run, side by side: which host is slow.

The sibling of :mod:`profscope.tools.memory_hosts` for time (XProf's ALL_HOSTS views, HTA's
cross-rank step and idle time). Input: each host's
:class:`~profscope.model.host_activity.HostActivity` (its step markers, its devices' op
intervals, its span), or the error reading that host's file raised. Output: plain data for
``GET /api/trace_hosts?run=`` and the trace viewer page's "All hosts" section.

Per host (:func:`host_summary`):

* steps: the host's step markers merged by name, in start order: ``name``, ``number``,
  ``startPs`` (its earliest start on any line, from the host's first event) and ``durPs``,
  the longest of its lines' durations, each line's from its first start to its last end
  there. A step seen on several threads or devices (a ``Steps`` line per GPU) is as long
  as its slowest one, not the stretch from one device's start to another's end: on the
  public TF GPU profile, GPU 4 and GPU 6 ran step 0 some 650 ms apart, which merged
  end-to-end made a 669 ms "step" of ~20 ms ones. The host's **step time** is the median of its step durations: the first
  step of a JAX/TF program usually includes compilation, and the median is the number a
  steady state is judged by (mean, min, max and total are given beside it);
* busy and idle: per device, ``busyPs`` is the length of the union of its op intervals
  (overlapping kernels on several streams count once) and ``idlePs`` = the host's span -
  busy; the host's ``busyPs``/``idlePs`` are the sums over its devices (devices with no op
  event are listed in ``idleDevices`` and not counted: a profile of an 8-GPU machine that
  ran on one GPU would otherwise read 7/8 idle), ``idleShare`` = idle / (devices x span).

``hosts``: one row per host, slowest first: hosts with steps by step time (highest first),
then hosts without step markers by busy time (most first), ties by host name; then hosts
whose file could not be read, in the run's order. ``status``: ``ok``, ``empty`` (no event
in the shown planes) or ``error`` (``reason`` is its message, ``file`` the file).

``rollup``, over the hosts with steps: ``hostsWithSteps``, ``slowestHost``,
``maxStepPs``/``minStepPs``/``medianStepPs`` (the median over hosts of their step times,
the mean of the two middle ones for an even count), ``maxOverMedian``, ``stragglers``
(hosts whose step time is at least :data:`STRAGGLER_RATIO` x the median, slowest first;
only with at least 2 hosts with steps) and ``summary``, the same in words; and over hosts
with device ops: ``mostIdleHost``, ``medianIdleShare``, ``maxIdleShare``.
``steps``: the steps that several hosts have (matched by name), in start order on the
first host that has them, with each one's ``minPs``/``medianPs``/``maxPs`` and
``slowestHost`` (at most :data:`MAX_SHARED_STEPS`).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from profscope.model.host_activity import HostActivity

STRAGGLER_RATIO = 1.10  # a host whose step time is >= 10 % above the median host's
MAX_SHARED_STEPS = 1000  # rows of the steps-across-hosts table
NO_STEPS = ("no step markers: no event with a step_num stat (jax.profiler.StepTraceAnnotation, "
            "tf.profiler.experimental.Trace(..., step_num=)) and no Steps line")


def union_ps(begin: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals [begin[i], end[i]) (any order, any overlap)."""
    if not len(begin):
        return 0
    o = np.argsort(begin, kind="stable")
    b = np.asarray(begin, np.int64)[o]
    e = np.maximum(np.asarray(end, np.int64)[o], b)
    reach = np.maximum.accumulate(e)  # the furthest end so far
    first = np.flatnonzero(np.r_[True, b[1:] > reach[:-1]])  # an interval after a gap starts a run
    last = np.r_[first[1:] - 1, len(b) - 1]
    return int((reach[last] - b[first]).sum())


def host_summary(host: str, act: HostActivity) -> dict[str, Any]:
    """One host's row (before the roll-up adds ``shareOfSlowest``)."""
    if act.begin_ps is None:
        return {"host": host, "status": "empty", "reason": "the profile has no event on its host or device planes",
                "events": 0}
    base = act.begin_ps
    span = act.end_ps - act.begin_ps
    steps = _merged_steps(act, base)
    devices = []
    for d in act.devices:
        busy = union_ps(d.begin_ps, d.end_ps)
        devices.append({"name": d.name, "lines": d.lines, "ops": int(len(d.begin_ps)), "busyPs": busy,
                        "idlePs": span - busy, "busyShare": busy / span if span else None})
    busy = sum(d["busyPs"] for d in devices)
    idle = sum(d["idlePs"] for d in devices)
    row: dict[str, Any] = {
        "host": host, "status": "ok", "hostname": act.hostname, "spanPs": span, "events": act.events,
        "stepSource": act.step_source, "stepCount": len(steps), "steps": steps,
        "deviceSource": act.device_source, "deviceCount": len(devices), "devices": devices,
        "idleDevices": act.idle_devices, "busyPs": busy, "idlePs": idle,
        "idleShare": idle / (len(devices) * span) if devices and span else None,
    }
    durs = [s["durPs"] for s in steps]
    if durs:
        slow = max(steps, key=lambda s: (s["durPs"], -s["startPs"]))
        row.update(stepPs=_median(durs), stepMeanPs=statistics.fmean(durs), stepMinPs=min(durs),
                   stepMaxPs=max(durs), stepTotalPs=sum(durs), slowestStep=slow["name"])
    else:
        row.update(stepPs=None, stepMeanPs=None, stepMinPs=None, stepMaxPs=None, stepTotalPs=None,
                   slowestStep=None, reason=NO_STEPS)
    if not devices:
        row["deviceReason"] = ("no device op events: no GPU/TPU plane with ops, and no XLA op events "
                               "(an hlo_op stat) on the host threads")
    return row


def _merged_steps(act: HostActivity, base: int) -> list[dict]:
    # first: each line's extent of the step (its first start to its last end there)
    per_line: dict[tuple[str, str], list] = {}
    for s in act.steps:
        cur = per_line.get((s.name, s.where))
        if cur is None:
            per_line[s.name, s.where] = [s.start_ps, s.start_ps + s.dur_ps, s.number]
        else:
            cur[0] = min(cur[0], s.start_ps)
            cur[1] = max(cur[1], s.start_ps + s.dur_ps)
    # then the host's: its earliest start, and its longest line's duration
    by_name: dict[str, list] = {}
    for (name, _), (b, e, number) in per_line.items():
        cur = by_name.setdefault(name, [b, e - b, number])
        cur[0] = min(cur[0], b)
        cur[1] = max(cur[1], e - b)
    out = [{"name": n, "number": v[2], "startPs": v[0] - base, "durPs": v[1]} for n, v in by_name.items()]
    out.sort(key=lambda s: (s["startPs"], s["name"]))
    return out


def error_row(host: str, message: str, file: str | None = None) -> dict:
    return {"host": host, "status": "error", "reason": message, "file": file}


def _median(values):
    m = statistics.median(values)
    return int(m) if float(m).is_integer() else m


def trace_hosts(rows: list[dict]) -> dict:
    """The roll-up of host rows (from :func:`host_summary` / :func:`error_row`, in the
    run's host order)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    stepped = sorted((r for r in ok if r["stepPs"] is not None), key=lambda r: (-r["stepPs"], r["host"]))
    unstepped = sorted((r for r in ok if r["stepPs"] is None), key=lambda r: (-r["busyPs"], r["host"]))
    rest = [r for r in rows if r.get("status") != "ok"]
    times = [r["stepPs"] for r in stepped]
    rollup: dict[str, Any] = {"hosts": len(rows), "hostsRead": len(ok), "hostsWithSteps": len(stepped),
                              "stragglerRatio": STRAGGLER_RATIO}
    if times:
        hi, lo, med = max(times), min(times), _median(times)
        stragglers = [r["host"] for r in stepped if len(stepped) > 1 and med and r["stepPs"] >= STRAGGLER_RATIO * med]
        rollup.update(slowestHost=stepped[0]["host"], maxStepPs=hi, minStepPs=lo, medianStepPs=med,
                      maxOverMedian=hi / med if med else None, stragglers=stragglers)
        for r in stepped:
            r["shareOfSlowest"] = r["stepPs"] / hi if hi else None
            r["overMedian"] = r["stepPs"] / med if med else None
    else:
        rollup.update(slowestHost=None, maxStepPs=None, minStepPs=None, medianStepPs=None, maxOverMedian=None,
                      stragglers=[])
    idle = [r for r in ok if r["idleShare"] is not None]
    if idle:
        most = max(idle, key=lambda r: (r["idleShare"], r["host"]))
        rollup.update(mostIdleHost=most["host"], maxIdleShare=most["idleShare"],
                      medianIdleShare=statistics.median(r["idleShare"] for r in idle), hostsWithDeviceOps=len(idle))
    else:
        rollup.update(mostIdleHost=None, maxIdleShare=None, medianIdleShare=None, hostsWithDeviceOps=0)
    rollup["summary"] = _summary(rollup, stepped)
    return {"rollup": rollup, "hosts": stepped + unstepped + rest, "steps": _shared_steps(stepped)}


def _shared_steps(stepped: list[dict]) -> list[dict]:
    seen: dict[str, list] = {}
    for r in stepped:
        for s in r["steps"]:
            seen.setdefault(s["name"], []).append((s["durPs"], r["host"]))
    order = []
    for r in stepped:  # the first host's order of a step
        for s in r["steps"]:
            if len(seen.get(s["name"], ())) > 1 and s["name"] not in order:
                order.append(s["name"])
    out = []
    for name in order[:MAX_SHARED_STEPS]:
        d = seen[name]
        durs = [x for x, _ in d]
        slow = max(d, key=lambda x: (x[0], x[1]))
        out.append({"name": name, "hosts": len(d), "minPs": min(durs), "medianPs": _median(durs), "maxPs": max(durs),
                    "slowestHost": slow[1]})
    return out


def fmt_ps(ps: float) -> str:
    """A duration in words: 850 µs, 12.5 ms, 3.21 s."""
    ms = ps / 1e9
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 1:
        return f"{ms:.3g} ms"
    return f"{ms * 1000:.3g} µs"


def _summary(r: dict, stepped: list[dict]) -> str:
    parts = []
    if not stepped:
        parts.append("No host has step markers; hosts are ordered by device busy time.")
    elif len(stepped) == 1:
        parts.append(f"Only {stepped[0]['host']} has step markers: its median step takes {fmt_ps(r['maxStepPs'])}.")
    else:
        parts.append(f"{r['slowestHost']} is the slowest host: its median step takes {fmt_ps(r['maxStepPs'])}, "
                     f"{r['maxOverMedian']:.2f}× the median host ({fmt_ps(r['medianStepPs'])}); "
                     f"the fastest takes {fmt_ps(r['minStepPs'])}.")
        s = r["stragglers"]
        if s:
            shown = ", ".join(s[:8]) + (f" and {len(s) - 8} more" if len(s) > 8 else "")
            parts.append(f"Straggler{'s' if len(s) > 1 else ''} (step time ≥ {STRAGGLER_RATIO:.2f}× the median): {shown}.")
        else:
            parts.append(f"No straggler: every host is within {STRAGGLER_RATIO:.2f}× the median.")
    if r["mostIdleHost"] is not None:
        parts.append(f"Most idle devices: {r['mostIdleHost']} ({100 * r['maxIdleShare']:.1f}% of device time idle; "
                     f"median host {100 * r['medianIdleShare']:.1f}%).")
    return " ".join(parts)
