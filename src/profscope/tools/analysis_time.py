"""Time rules of the Summary (issue 35, docs/analysis.md "Time rules"): findings from one
host's Steps & ops payload (``/api/steps_ops``, docs/steps_and_ops.md), and the straggler
host of an ``ALL_HOSTS`` one.

Every number here is the payload's: per step and device, ``busy_us``, ``idle_us`` and its
split ``idle_before_first_us`` / ``idle_between_us`` / ``idle_after_last_us``, ``time_us``
by category, the activity count (``activities`` of an xplane device, ``kernels`` of a
PyTorch one) and the step's ``straggler``; the ranked ``ops`` with their ``share``.
A step's device numbers are averaged over the devices that ran something in it (a device
with no activity in the step is not waiting on anything: it is unused), and a rule's share
is the sum over the steps of that average over the sum of the step times. The impact
(seconds per step at stake) is that sum over the number of steps: measured, not guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from profscope.tools import xprof_overview
from profscope.tools.analysis_rules import (P0_SHARE, P1_SHARE, P2_SHARE, Rule, evidence, finding, impact,
                                            priority_for_share)

__all__ = ["RULES", "collective_per_step", "device_metrics", "host_input_findings", "host_straggler_findings", "span_findings",
           "time_findings"]

_BY_SHARE = (f"by share of step time: P0 >= {P0_SHARE:.0%}, P1 >= {P1_SHARE:.0%}, P2 >= {P2_SHARE:.0%}")
# Activities shorter than this on average are "tiny": a CUDA kernel launch costs about
# 5-10 µs of host time (HTA's kernel-launch statistics compare the launch with the kernel's
# duration), so kernels of a few µs cannot keep the device busy when launched one by one.
TINY_ACTIVITY_US = 10.0
# One op at least this share of device time, or one op family at least OP_FAMILY_SHARE:
# the place to look first (XProf's source, smart_suggestion SpecialOpRule, flags an op
# family at >= 10 % of step time, kSpecialOpBoundThresholdInPercent; a quarter is where
# one op is the step rather than a part of it).
OP_SHARE = 0.25
OP_FAMILY_SHARE = 0.50

RULES: tuple[Rule, ...] = (
    Rule("input_bound", "time", "by share",
         f"the device idle before its first activity of the step, {_BY_SHARE}",
         "XProf's source (openxla/xprof smart_suggestion InputBoundRule, input >= 10 % of step time, "
         "kInfeedPercentageThreshold; not in the pinned 2.24.2, which registers BarrierCoresRule only); "
         "HTA idle time 'host wait'; profscope's bound 'input' (docs/steps_and_ops.md)",
         "Input-bound: each step's device waits for the host before its first op"),
    Rule("launch_bound", "time", "by share",
         f"the device idle between its activities inside the step, {_BY_SHARE}; "
         f"'many tiny kernels' when they average under {TINY_ACTIVITY_US:g} µs",
         "HTA idle time breakdown ('host wait' between kernels) and kernel-launch statistics; "
         "XProf's source (smart_suggestion TensorCoreIdleBoundRule, idle >= 10 %; after 2.24.2)",
         "Launch-bound: the device waits between ops for the host to launch the next"),
    Rule("collective_bound", "time", "by share",
         f"collective / communication time in the step, {_BY_SHARE}",
         "XProf's source (smart_suggestion CollectiveBoundRule, average collective share >= 4 %; after "
         "2.24.2); HTA communication share of the temporal breakdown",
         "Collective-bound: communication takes a large part of each step"),
    Rule("op_dominates", "time", "P2",
         f"one op >= {OP_SHARE:.0%} of device time, or one op family (an HLO category) >= {OP_FAMILY_SHARE:.0%}",
         "XProf's source (smart_suggestion SpecialOpRule, one op family >= 10 % of step time; after "
         "2.24.2); the ops table's share (docs/steps_and_ops.md)",
         "One op dominates device time"),
    Rule("straggler_device", "time", "by share",
         f"the last device to finish a step's work lags the first, {_BY_SHARE}",
         "XProf's source (CollectiveBoundRule's 'check for stragglers'; after 2.24.2); the step's "
         "straggler (docs/steps_and_ops.md)",
         "A straggler device finishes each step late"),
    Rule("straggler_host", "time", "by share",
         f"the slowest host's median step time over the fastest's: the difference as a share of the "
         f"slowest; hosts of equal steps (in lockstep): the others' mean collective time per step over "
         f"that of the host with the least, as a share of the step; {_BY_SHARE}",
         "XProf's pod viewer / overview ALL_HOSTS; /api/steps_ops?host=ALL_HOSTS straggler_host; XProf 2.24.2 "
         "smart_suggestion's host stragglers by barrier-cores share (GetHostStragglers)",
         "A straggler host: one host's steps are slower than the others'"),
    Rule("device_idle", "time", "by share",
         f"(a trace without steps) the device idle between its first and last activity, {_BY_SHARE}",
         "HTA temporal breakdown (idle over the kernel span, tests/golden/hta)",
         "The device is idle most of the trace"),
    Rule("idle_between_steps", "time", "by share",
         f"every device idle after its last activity of a step until the next step starts (the least of "
         f"the devices' idle after their last op), {_BY_SHARE}",
         "HTA idle time breakdown; profscope's bound 'waiting' (docs/steps_and_ops.md)",
         "The device is idle between steps"),
)
_RULE = {r.id: r for r in RULES}
_COLLECTIVE = ("collective", "communication")  # the xplane breakdown's key, the PyTorch one's


def _us(us: float) -> str:
    """A duration as the pages print it (µs, ms or s, three significant digits or more)."""
    if us >= 1e6:
        return f"{us / 1e6:.3g} s" if us < 1e9 else f"{us / 1e6:,.0f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} µs"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _activities(dev: dict) -> int:
    return int(dev.get("activities", dev.get("kernels", 0)) or 0)


def _step_key(step: dict) -> str:
    """The step as Steps & ops' ``step`` URL key names it (StepsOpsQuery.step)."""
    return str(step["step"])


class _Steps:
    """The per-step averages over the working devices that every rule reads."""

    def __init__(self, so: dict):
        self.rows = []  # (step, working devices)
        for s in so.get("steps") or []:
            devs = [d for d in s.get("devices") or [] if _activities(d) > 0]
            if devs and s.get("step_time_us"):
                self.rows.append((s, devs))
        self.total_us = sum(s["step_time_us"] for s, _ in self.rows)
        self.count = len(self.rows)

    @staticmethod
    def mean(step_devs, fn: Callable[[dict], float]) -> float:
        devs = step_devs[1]
        return sum(fn(d) for d in devs) / len(devs)

    @staticmethod
    def least(step_devs, fn: Callable[[dict], float]) -> float:
        return min(fn(d) for d in step_devs[1])

    def summed(self, fn: Callable[[dict], float], over=None) -> tuple[float, dict | None, float]:
        """The sum over the steps of ``fn`` over the step's devices (``over``: their
        average, :meth:`mean`, by default), the step where it is largest and its value there."""
        over = over or self.mean
        total, worst, worst_v = 0.0, None, -1.0
        for row in self.rows:
            v = over(row, fn)
            total += v
            if v > worst_v:
                worst, worst_v = row[0], v
        return total, worst, worst_v


def device_metrics(so: dict) -> dict | None:
    """``metrics.device`` of the JSON: the share of the steps' time the working devices are
    busy and idle; None without timed steps."""
    st = _Steps(so)
    if not st.total_us:
        return None
    busy, _, _ = st.summed(lambda d: d.get("busy_us") or 0.0)
    share = min(1.0, busy / st.total_us)
    return {"busy_share": round(share, 4), "idle_share": round(1 - share, 4), "steps": st.count,
            "devices": sorted({d["device"] for _, devs in st.rows for d in devs}, key=lambda d: (isinstance(d, str), d))}


def median_step_categories(so: dict) -> list[dict]:
    """``metrics.categories``: where the median step's time goes on its working devices
    (their average per category, and idle), in the payload's stacking order. Ops on
    several streams overlap, so a device's time by category can add up past its busy
    time: the busy time is split among the categories in proportion to their op time,
    and the shares of the step add up to 1 (busy plus idle is the step's window)."""
    st = _Steps(so)
    if not st.rows:
        return []
    mid = median(s["step_time_us"] for s, _ in st.rows)
    step, devs = min(st.rows, key=lambda r: (abs(r[0]["step_time_us"] - mid), st.rows.index(r)))
    out = []
    for c in so.get("categories") or []:
        us = sum(_busy_part(d, c["key"]) for d in devs) / len(devs)
        out.append({"key": c["key"], "label": c["label"], "us": round(us, 3),
                    "share": round(us / step["step_time_us"], 4)})
    idle = sum(d.get("idle_us") or 0.0 for d in devs) / len(devs)
    out.append({"key": "idle", "label": "Idle", "us": round(idle, 3), "share": round(idle / step["step_time_us"], 4)})
    return out


def _busy_part(dev: dict, key: str) -> float:
    """The part of a device's busy time that category ``key``'s ops take."""
    times = dev.get("time_us") or {}
    total = sum(times.values())
    return (dev.get("busy_us") or 0.0) * times.get(key, 0.0) / total if total else 0.0


def _share_rule(rule_id: str, st: _Steps, fn, host, link, *, what, fix, title=None, extra=(), over=None) -> list[dict]:
    """A rule whose finding is a share of step time lost to ``fn`` (a device's µs)."""
    if not st.total_us:
        return []
    lost, worst, worst_us = st.summed(fn, over)
    share = lost / st.total_us
    p = priority_for_share(share)
    if p is None:
        return []
    rule = _RULE[rule_id]
    per_step = lost / st.count
    ev = [evidence("share of step time", _pct(share), round(share, 4)),
          evidence("per step (on every device)" if over is _Steps.least else "per step (mean over the devices that ran)",
                   _us(per_step), round(per_step, 3)),
          evidence(f"worst step: {_step_key(worst)}", f"{_us(worst_us)} of {_us(worst['step_time_us'])}",
                   round(worst_us, 3), link("steps_ops", host=host, step=_step_key(worst))),
          *extra]
    return [finding(rule, priority=p, title=title or rule.title, what=what(share, per_step), evidence=ev,
                    impact=impact(per_step / 1e6, text=f"{_us(per_step)} per step ({_pct(share)} of step time)"),
                    fix=fix, host=host)]


def _mean_activity_us(st: _Steps) -> float | None:
    n = sum(_activities(d) for _, devs in st.rows for d in devs)
    busy = sum(d.get("busy_us") or 0.0 for _, devs in st.rows for d in devs)
    return busy / n if n else None


def _time_share_findings(st: _Steps, host: str | None, link) -> list[dict]:
    out = _share_rule(
        "input_bound", st, lambda d: d.get("idle_before_first_us") or 0.0, host, link,
        what=lambda s, us: (f"Each step starts with the device idle: on average {_us(us)} ({_pct(s)} of the step) pass "
                            "before its first op, while the host prepares the batch or runs the step's Python."),
        fix=("Overlap input with compute: prefetch the next batch (tf.data prefetch, a DataLoader with "
             "num_workers > 0 and pin_memory=True, jax device_put of the next batch ahead), move preprocessing "
             "off the step's critical path, and check the host code before the first op of the step."))
    mean_act = _mean_activity_us(st)
    tiny = mean_act is not None and mean_act < TINY_ACTIVITY_US
    act_ev = [evidence("mean activity duration", _us(mean_act), round(mean_act, 3))] if mean_act is not None else []
    out += _share_rule(
        "launch_bound", st, lambda d: d.get("idle_between_us") or 0.0, host, link, extra=act_ev,
        title=(_RULE["launch_bound"].title + " (many tiny kernels)") if tiny else None,
        what=lambda s, us: (f"Between its ops the device is idle {_us(us)} per step ({_pct(s)} of the step)"
                            + (f": its {_us(mean_act)} average ops finish faster than the host launches them."
                               if tiny else ": the host does not queue work ahead (synchronisations, host "
                               "round trips or Python between ops).")),
        fix=("Launch fewer, larger kernels: compile the step (torch.compile, jax.jit, XLA fusion), capture it in "
             "a CUDA graph, and batch small ops." if tiny else
             "Remove host synchronisations inside the step (.item(), .cpu(), printing tensors, "
             "block_until_ready), and keep the host ahead of the device (async dispatch, larger steps)."))
    # Every device idle after its last op: the least of the devices' idle after their last
    # op. A device that finished early waits for the straggler (straggler_device's lag):
    # counted here too it would be the same time twice.
    out += _share_rule(
        "idle_between_steps", st, lambda d: d.get("idle_after_last_us") or 0.0, host, link, over=_Steps.least,
        what=lambda s, us: (f"After its last op of a step the device waits {_us(us)} ({_pct(s)} of the step) until "
                            "the next step starts, on every device: the host is still busy with the step (logging, "
                            "checkpoints, metrics)."),
        fix=("Move per-step host work (logging, metric reads, checkpointing) out of the step or make it "
             "asynchronous; read metrics every N steps."))
    out += _share_rule(
        "collective_bound", st, lambda d: sum((d.get("time_us") or {}).get(k, 0.0) for k in _COLLECTIVE), host, link,
        what=lambda s, us: (f"Collective / communication ops take {_us(us)} per step ({_pct(s)} of the step) on each "
                            "device; the step waits on them wherever they do not overlap compute."),
        fix=("Overlap communication with compute (gradient bucketing, async collectives, XLA's latency-hiding "
             "scheduler), send less (bf16 gradients, reduce-scatter instead of all-reduce) and check for a "
             "straggler that the others wait for."))
    out += _straggler_device(st, host, link)
    return out


def _straggler_device(st: _Steps, host, link) -> list[dict]:
    if not st.total_us:
        return []
    lags = [((s.get("straggler") or {}).get("lag_us") or 0.0, s) for s, _ in st.rows]
    lost = sum(v for v, _ in lags)
    share = lost / st.total_us
    p = priority_for_share(share)
    if p is None:
        return []
    worst_lag, worst = max(lags, key=lambda t: t[0])
    device = worst["straggler"]["device"]
    per_step = lost / st.count
    rule = _RULE["straggler_device"]
    return [finding(rule, priority=p, title=rule.title, host=host,
                    what=(f"In each step one device finishes its work {_us(per_step)} after the first on average "
                          f"({_pct(share)} of the step); in step {_step_key(worst)} device {device} is {_us(worst_lag)} late."),
                    evidence=[evidence("share of step time", _pct(share), round(share, 4)),
                              evidence("lag per step", _us(per_step), round(per_step, 3)),
                              evidence(f"worst step: {_step_key(worst)} (device {device})", _us(worst_lag),
                                       round(worst_lag, 3), link("steps_ops", host=host, step=_step_key(worst)))],
                    impact=impact(per_step / 1e6, text=f"{_us(per_step)} per step the other devices wait"),
                    fix=("Balance the work across devices: an uneven sharding or batch split, a device sharing "
                         "its host's PCIe or CPU with more work, or data-dependent shapes on one device."))]


def _op_rows(so: dict) -> list[dict]:
    """The ops whose share the op rule reads: an xplane's HLO ops (XProf's op metrics),
    a PyTorch trace's kernels; framework ops are their kernels' time again."""
    ops = so.get("ops") or []
    kind = "hlo" if any(o.get("kind") == "hlo" for o in ops) else "kernel"
    return [o for o in ops if o.get("kind") == kind and o.get("share") is not None]


def _op_dominates(so: dict, st: _Steps, host, link) -> list[dict]:
    rows = _op_rows(so)
    if not rows:
        return []
    top = rows[0]  # the payload ranks by total time (op_table._rank)
    families: dict[str, float] = {}
    if top["kind"] == "hlo":
        for o in rows:
            families[o["category"]] = families.get(o["category"], 0.0) + o["share"]
    fam, fam_share = max(sorted(families.items()), key=lambda kv: kv[1], default=(None, 0.0))
    rule = _RULE["op_dominates"]
    mean_step = st.total_us / st.count if st.count else None
    scope = (so.get("share_of") or {}).get(top["kind"], "device time")
    if top["share"] >= OP_SHARE:
        share, name, what = top["share"], top["name"], (
            f"{top['name']} ({top['category']}, {top['kind']}) takes {_pct(top['share'])} of {scope}: "
            f"{top['occurrences']} occurrences, {_us(top['total_us'])} in all, {_us(top['average_us'])} each.")
        slow = top.get("slowest")
        # the occurrence with 50 µs either side, as the Steps & ops page's own link (PAD_US)
        op_link = link("trace_viewer@", host=slow.get("host") or host, start_ms=round((slow["start_us"] - 50) / 1e3, 6),
                       end_ms=round((slow["start_us"] + slow["dur_us"] + 50) / 1e3, 6),
                       ev=slow["event_id"]) if slow else None
        ev = [evidence("share", _pct(share), round(share, 4), link("steps_ops", host=host, kind=top["kind"], opq=name)),
              evidence("slowest occurrence", _us(slow["dur_us"]) if slow else "not located", slow["dur_us"] if slow else None,
                       op_link)]
    elif fam is not None and fam_share >= OP_FAMILY_SHARE:
        share, name = round(fam_share, 6), fam
        members = [o for o in rows if o["category"] == fam]
        what = (f"The {fam} ops take {_pct(fam_share)} of {scope} ({len(members)} ops; the largest, "
                f"{members[0]['name']}, {_pct(members[0]['share'])}).")
        ev = [evidence("share", _pct(fam_share), round(fam_share, 4),
                       link("steps_ops", host=host, kind="hlo", category=fam))]
    else:
        return []
    per_step = share * mean_step if mean_step else None
    return [finding(rule, title=f"{rule.title}: {name}", what=what, evidence=ev, host=host,
                    impact=impact(per_step / 1e6 if per_step else None,
                                  text=(f"{_us(per_step)} of each step's device time" if per_step else
                                        f"{_pct(share)} of device time")),
                    fix=("Look at this op first: check its roofline (compute- or memory-bound), its layout and "
                         "precision (bf16/fp8 on matmuls), and whether it fuses with its neighbours; a copy or "
                         "transpose family points at layouts (the compiler rules)."))]


def time_findings(steps_ops: dict, link: Callable[..., str]) -> list[dict]:
    """The time findings of one host's Steps & ops payload, unsorted (tools/analysis.py
    sorts). ``link(tool, **keys)`` makes a dashboard link."""
    host = steps_ops.get("host")
    st = _Steps(steps_ops)
    return _time_share_findings(st, host, link) + _op_dominates(steps_ops, st, host, link)


def collective_per_step(steps_ops: dict | None) -> float | None:
    """A host's collective / communication time per step (µs, averaged over its working
    devices), None without timed steps: the ALL_HOSTS rows' ``collective_us``."""
    st = _Steps(steps_ops or {})
    if not st.count:
        return None
    total, _, _ = st.summed(lambda d: sum((d.get("time_us") or {}).get(k, 0.0) for k in _COLLECTIVE))
    return round(total / st.count, 3)


def host_straggler_findings(hosts: list[dict], link: Callable[..., str]) -> list[dict]:
    """``straggler_host`` from the per-host rows of an ALL_HOSTS summary (``host``,
    ``median_us``, ``collective_us``). In synchronous training every host waits for the
    slowest one each step: the slowest median over the fastest is time the others lose.
    Hosts in lockstep have equal step times, and then the others' wait is inside their
    collectives (a TPU's barrier-cores): the host with the least collective time per step
    is the one they wait for, and the others' mean collective time over its own is what
    they lose (XProf 2.24.2's smart_suggestion names such a host a straggler by its
    barrier-cores share, GetHostStragglers)."""
    timed = sorted((h for h in hosts if h.get("median_us")), key=lambda h: (-h["median_us"], h["host"]))
    if len(timed) < 2:
        return []
    slow, fast = timed[0], timed[-1]
    gap = slow["median_us"] - fast["median_us"]
    share = gap / slow["median_us"]
    rule = _RULE["straggler_host"]
    if priority_for_share(share) is None:
        return _lockstep_straggler(timed, link)
    return [finding(rule, priority=priority_for_share(share), title=f"{rule.title} ({slow['host']})", host=slow["host"],
                    what=(f"Host {slow['host']}'s median step takes {_us(slow['median_us'])}, {_us(gap)} "
                          f"({_pct(share)}) longer than {fast['host']}'s {_us(fast['median_us'])}."),
                    evidence=[evidence(f"median step of {h['host']}", _us(h["median_us"]), h["median_us"],
                                       link("steps_ops", host=h["host"])) for h in (slow, fast)]
                    + [evidence("spread across hosts", _pct(share), round(share, 4), link("steps_ops", host="ALL_HOSTS"))],
                    impact=impact(gap / 1e6, text=f"{_us(gap)} per step the faster hosts wait"),
                    fix=("Find what differs on the slow host: its input pipeline (idle before the first op), "
                         "its devices' load, its network; balance the data and work split across hosts."))]


def _lockstep_straggler(timed: list[dict], link: Callable[..., str]) -> list[dict]:
    """Hosts of equal step times: the one whose collectives take least (the others wait
    for it in theirs), where the others' mean exceeds its own by a share of the step."""
    coll = [h for h in timed if h.get("collective_us") is not None]
    if len(coll) < 2:
        return []
    slow = min(coll, key=lambda h: (h["collective_us"], h["host"]))
    others = [h for h in coll if h is not slow]
    wait = sum(h["collective_us"] for h in others) / len(others)
    gap = wait - slow["collective_us"]
    step = sum(h["median_us"] for h in coll) / len(coll)
    share = gap / step
    p = priority_for_share(share)
    if p is None:
        return []
    rule = _RULE["straggler_host"]
    return [finding(rule, priority=p, title=f"{rule.title} ({slow['host']})", host=slow["host"],
                    what=(f"The hosts' steps take the same time, but the other hosts spend {_us(wait)} per step in "
                          f"collectives and {slow['host']} only {_us(slow['collective_us'])}: they wait for it there, "
                          f"{_us(gap)} ({_pct(share)} of the step)."),
                    evidence=[evidence(f"collectives per step on {slow['host']}", _us(slow["collective_us"]),
                                       slow["collective_us"], link("steps_ops", host=slow["host"])),
                              evidence("collectives per step on the other hosts (mean)", _us(wait), round(wait, 3),
                                       link("steps_ops", host="ALL_HOSTS")),
                              evidence("share of step time", _pct(share), round(share, 4))],
                    impact=impact(gap / 1e6, text=f"{_us(gap)} per step the other hosts wait"),
                    fix=("Find what makes this host's compute longer: its share of the data or the model, its "
                         "devices' load or clocks, its input pipeline; balance the work across hosts."))]


def host_input_findings(steps_ops: dict, step_db: dict | None, link: Callable[..., str]) -> list[dict]:
    """``input_bound`` of a profile whose steps have no device time (a CPU-only xplane: the
    device-idle rules have nothing to read) from XProf's own input measure, the step
    database (tools/xprof_overview.py ``step_details``), graded by share as the other time
    rules: the time waiting for input (host wait input plus host-to-device over the step
    time: overview_page's "HIGHLY / MODERATELY input-bound" at 20 % / 5 %), else, below
    2 % of it, the step's time outside any op ("All Others": overview_page's "POTENTIALLY
    input-bound", at 3 %, I/O or Python between ops, e.g. a data loader that is no
    tf.data op)."""
    if _Steps(steps_ops).total_us or not step_db or not step_db.get("steps"):
        return []
    details = xprof_overview.step_details(step_db["steps"])
    total_ms = sum(d["step_time_ms"] for d in details)
    if not total_ms:
        return []
    lost = [d["host_wait_input_ms"] + d["host_to_device_ms"] for d in details]
    waiting = priority_for_share(sum(lost) / total_ms) is not None
    if not waiting:
        lost = [d["unknown_time_ms"] for d in details]
    share = sum(lost) / total_ms
    p = priority_for_share(share)
    if p is None:
        return []
    if not waiting:
        # time in no op has no measured cause (XProf too says only "POTENTIALLY"): worth
        # knowing, never the P0/P1 of a measured loss (a profile with few ops annotated
        # would be one)
        p = "P2"
    host = steps_ops.get("host")
    per_step_us = 1e3 * sum(lost) / len(details)
    worst_i = max(range(len(details)), key=lambda i: (lost[i], -i))
    worst = details[worst_i]
    rule = _RULE["input_bound"]
    if waiting:
        title = rule.title.replace("each step's device waits", "each step waits")
        what = (f"{_pct(share)} of the step time ({_us(per_step_us)} per step) is spent waiting for input (XProf's "
                "step database: the host waiting for the input pipeline and the copies to the device), as XProf's "
                "overview page measures it.")
    else:
        title = "Possibly input-bound: each step runs mostly outside any op (I/O or Python)"
        what = (f"{_pct(share)} of the step time ({_us(per_step_us)} per step) is in no op XProf knows ('All "
                "Others' in its step database, which its overview page calls POTENTIALLY input-bound): the host "
                "reading or preparing data outside the input pipeline's ops, or Python between the ops.")
    return [finding(rule, priority=p, title=title, host=host, what=what,
                    evidence=[evidence("share of step time", _pct(share), round(share, 4)),
                              evidence("per step", _us(per_step_us), round(per_step_us, 3)),
                              evidence(f"worst step: {worst['step_name']}",
                                       f"{_us(1e3 * lost[worst_i])} of {_us(1e3 * worst['step_time_ms'])}",
                                       round(1e3 * lost[worst_i], 3),
                                       link("steps_ops", host=host, step=worst["step_name"]))],
                    impact=impact(per_step_us / 1e6, text=f"{_us(per_step_us)} per step ({_pct(share)} of step time)"),
                    fix=("Overlap input with compute: prefetch (tf.data prefetch and parallel map/interleave, a "
                         "DataLoader with workers), cache or preprocess offline what every epoch recomputes"
                         + ("." if waiting else "; profile the host (py-spy) to see what runs between the ops, and "
                            "compile the step (jax.jit, tf.function) so that less Python runs per step.")))]


def span_findings(steps_ops: dict, spans: list[dict] | None, link: Callable[..., str]) -> list[dict]:
    """``device_idle`` of a trace with no steps (no ``ProfilerStep#N``: the step rules have
    no window): the devices' idle over their whole kernel span (HTA's temporal breakdown,
    ``spans`` per device: ``span_us``, ``idle_us``), averaged over the devices. No step, so
    the impact is the idle time of the trace, not per step."""
    spans = [d for d in spans or [] if d["span_us"] > 0]
    if not spans:
        return []
    span = sum(d["span_us"] for d in spans) / len(spans)
    idle = sum(d["idle_us"] for d in spans) / len(spans)
    share = idle / span
    p = priority_for_share(share)
    if p is None:
        return []
    host = steps_ops.get("host")
    rule = _RULE["device_idle"]
    first = min(spans, key=lambda d: d["start_us"])
    trace = link("trace_viewer@", host=host, start_ms=round(first["start_us"] / 1e3, 6),
                 end_ms=round((first["start_us"] + span) / 1e3, 6))
    return [finding(rule, priority=p, title=rule.title, host=host,
                    what=(f"Between its first and last kernel the device is idle {_pct(share)} of the time ({_us(idle)} "
                          f"of {_us(span)}). The trace has no ProfilerStep#N, so this idle cannot be split into "
                          "input, launch and end-of-step waits."),
                    evidence=[evidence("idle share of the kernel span", _pct(share), round(share, 4)),
                              evidence("kernel span", _us(span), round(span, 3), trace),
                              evidence("devices", ", ".join(f"GPU {d['device']}" for d in spans), len(spans))],
                    impact=impact(None, text=f"{_us(idle)} idle of {_us(span)} ({_pct(share)})"),
                    fix=("Record steps (torch.profiler.schedule with prof.step() each iteration) to see where the "
                         "idle lies; then keep the device fed: prefetch input, remove synchronisations, compile the "
                         "step or capture it in a CUDA graph."))]
