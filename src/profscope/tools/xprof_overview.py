"""XProf 2.24's ``overview_page`` JSON: a list of 7 DataTables, made from XProf's step
database of one host (formats/xplane_step_events.py, as plain data).

The tables, in XProf's order (xprof/convert/overview_page_processor.cc and
op_stats_to_input_pipeline_analysis.cc):

0. the top ops (``selfTimePercent``...): XProf's column ids, no rows (profscope does not
   compute XProf's ops-by-time summary of the overview page);
1. **the step-time graph**, ported: one row per step (``stepnum``, the times of XProf's
   generic step breakdown in ms, ``tooltip``, ``stepTimeMs``), and the properties XProf
   puts on it (``ComputeGenericStepTimeBreakdownInMs``, ``ComputeBottleneckAnalysis``,
   ``GetSummaryNextStep``); a TPU profile gets XProf's TPU table, without rows (the
   per-core TPU breakdown is not ported: a TPU profile with steps says so);
2. the run environment: host count 1, the device kind and count;
3. the recommendation: the bottleneck statements of table 1 and XProf's fixed tips;
4. the inference latency: column ids, no rows; 5: an empty table (as XProf's);
6. the diagnostics: XProf's warning when no step was found.

Numbers: XProf's ``PicoToMilli`` (ps / 1e9) in the cells, ``OneDigit``/``TwoDigits``
(``%.1f``/``%.2f``) in the properties and the tooltip. The standard deviations are tsl
``Stat<double>``'s, whose ``max_`` starts at the smallest positive double: one step of
0 ms is not "all the same", and its sample variance is 0/0, which XProf prints ``-nan``.
"""

from __future__ import annotations

import math

# xprof/utils/event_span.h EventType values (formats/xplane_step_events.py)
UNKNOWN_TIME, HOST_COMPUTE, HOST_COMPILE, HOST_TO_DEVICE, HOST_PREPARE = 0, 10, 60, 80, 90
DEVICE_COLLECTIVES, HOST_WAIT_INPUT, DEVICE_TO_DEVICE, DEVICE_TO_HOST = 100, 110, 120, 130
DEVICE_COMPUTE_32, DEVICE_COMPUTE_16, DEVICE_WAIT_DEVICE, DEVICE_WAIT_HOST = 140, 150, 160, 170

_DBL_MIN = 2.2250738585072014e-308  # std::numeric_limits<double>::min(): tsl Stat's max_ at start
NO_STEP = "No step time measured. Therefore we cannot tell where the performance bottleneck is."
NO_STEP_WARNING = ("No step marker observed and hence the step time is unknown. This may happen if (1) training "
                   "steps are not instrumented (e.g., if you are not using Keras) or (2) the profiling duration is "
                   "shorter than the step time. For (1), you need to add step instrumentation; for (2), you may try "
                   "to profile longer.")
_DATASET_DOC = "https://www.tensorflow.org/guide/data"
_ALL_OTHERS_PYTHON = (" % of the total step time sampled is spent on 'All Others' time. "
                      "This could be due to Python execution overhead.")

GENERIC_COLUMNS = (
    ("stepnum", "string", "Step number"), ("deviceComputeTimeMs", "number", "Device compute"),
    ("deviceToDeviceTimeMs", "number", "Device to device"),
    ("deviceCollectivesTimeMs", "number", "Device collective communication"),
    ("hostComputeTimeMs", "number", "Host compute"), ("kernelLaunchTimeMs", "number", "Kernel launch"),
    ("infeedTimeMs", "number", "Input"), ("outfeedTimeMs", "number", "Output"),
    ("compileTimeMs", "number", "Compilation"), ("otherTimeMs", "number", "All others"),
)
TPU_COLUMNS = (
    ("stepnum", "string", "stepnum"), ("tcComputeTimeMs", "number", "TensorCore compute (in ms)"),
    ("scv0ComputeTimeMs", "number", "SparseCoreV0 compute (in ms)"),
    ("scv0InfeedTimeMs", "number", "SparseCoreV0 input (in ms)"),
    ("tcInfeedTimeMs", "number", "TensorCore input (in ms)"), ("tcOutfeedTimeMs", "number", "TensorCore output (in ms)"),
    ("tcIdleTimeMs", "number", "TensorCore idle (in ms)"), ("hostTransferTimeMs", "number", "Host transfer (in ms)"),
)


def _col(cid: str, typ: str, label: str, p: dict | None = None) -> dict:
    # XProf's DataTable JSON writes keys in sorted order (id, label, p, type)
    return {"id": cid, "label": label, **({"p": p} if p else {}), "type": typ}


def one_digit(x: float) -> str:
    """tsl ``OneDigit`` (``%.1f``); NaN as glibc prints 0/0: ``-nan``."""
    return "-nan" if math.isnan(x) else f"{x:.1f}"


def two_digits(x: float) -> str:
    return "-nan" if math.isnan(x) else f"{x:.2f}"


class _Stat:
    """tsl ``Stat<double>`` and ``GetStepSummaryForSampleStats`` (avg, sample sdv, min, max)."""

    def __init__(self):
        self.n, self.sum, self.sq, self.min, self.max = 0, 0.0, 0.0, math.inf, _DBL_MIN

    def add(self, v: float) -> None:
        self.n += 1
        self.sum += v
        self.sq += v * v
        self.min, self.max = min(self.min, v), max(self.max, v)

    def summary(self) -> tuple[float, float, float, float]:
        if not self.n:
            return 0.0, 0.0, 0.0, 0.0
        if self.min == self.max:
            var = 0.0
        elif self.n == 1:
            var = math.nan  # (sq - sum^2 / 1) / 0
        else:
            var = (self.sq - self.sum ** 2 / self.n) / (self.n - 1)
        sdv = math.sqrt(var) if var >= 0 else math.nan
        return self.sum / self.n, sdv, self.min, self.max


def _ms(type_ps: dict, *kinds: int) -> float:
    # XProf adds the ms of each type (PicoToMilli per type, then +)
    out = 0.0
    for k in kinds:
        out += type_ps.get(k, 0) / 1e9
    return out


def step_details(steps: list[dict]) -> list[dict]:
    """``PerGenericStepDetails`` of each step (ms), as ComputeGenericInputPipelineAnalysisResult makes them."""
    out = []
    for s in steps:
        t = {int(k): v for k, v in s["type_ps"].items()}
        out.append({
            "step_name": s.get("step_name") or str(s["step_num"]), "step_time_ms": s["duration_ps"] / 1e9,
            # ComputeStepTimeSummaryInMs: the step's time on its slowest core (of every host, merged)
            "slowest_core_ms": s.get("slowest_core_ps", s["duration_ps"]) / 1e9,
            "unknown_time_ms": _ms(t, UNKNOWN_TIME), "host_wait_input_ms": _ms(t, HOST_WAIT_INPUT),
            "host_to_device_ms": _ms(t, HOST_TO_DEVICE, DEVICE_WAIT_HOST), "output_ms": _ms(t, DEVICE_TO_HOST),
            "device_compute_ms": _ms(t, DEVICE_COMPUTE_16, DEVICE_COMPUTE_32),
            "device_to_device_ms": _ms(t, DEVICE_TO_DEVICE, DEVICE_WAIT_DEVICE),
            "device_collectives_ms": _ms(t, DEVICE_COLLECTIVES), "host_compute_ms": _ms(t, HOST_COMPUTE),
            "host_prepare_ms": _ms(t, HOST_PREPARE), "host_compile_ms": _ms(t, HOST_COMPILE),
        })
    return out


def bottleneck(details: list[dict]) -> dict:
    """``ComputeBottleneckAnalysis`` (op_stats_to_input_pipeline_analysis.cc): the input,
    kernel-launch, all-others and collectives statements."""
    total = sum(d["step_time_ms"] for d in details)
    if total == 0:
        return {"input_classification": "unknown", "input_statement": NO_STEP, "kernel_launch_classification": "no",
                "kernel_launch_statement": "", "all_other_classification": "no", "all_other_statement": "",
                "device_collectives_classification": "no", "device_collectives_statement": ""}
    pct = lambda key: 100.0 * sum(d[key] for d in details) / total  # noqa: E731
    input_pct = 100.0 * sum(d["host_wait_input_ms"] + d["host_to_device_ms"] for d in details) / total
    collectives, launch, other = pct("device_collectives_ms"), pct("host_prepare_ms"), pct("unknown_time_ms")
    out: dict = {}
    reported = False
    if input_pct >= 20:
        out.update(input_classification="host", input_statement=(
            f"Your program is HIGHLY input-bound because {one_digit(input_pct)}% of the total step time sampled is "
            "waiting for input. Therefore, you should first focus on reducing the input time."))
    elif input_pct >= 5:
        out.update(input_classification="both", input_statement=(
            f"Your program is MODERATELY input-bound because {one_digit(input_pct)}% of the total step time sampled "
            "is waiting for input. Therefore, you would need to reduce both the input time and other time."))
    elif other >= 3:
        reported = True
        out.update(input_classification="both", input_statement=(
            f"Your program is POTENTIALLY input-bound because {one_digit(other)}% of the total step time sampled is "
            "spent on 'All Others' time (which could be due to I/O or Python execution or both)."))
    else:
        out.update(input_classification="device", input_statement=(
            f"Your program is NOT input-bound because only {one_digit(input_pct)}% of the total step time sampled is "
            "waiting for input. Therefore, you should focus on reducing other time."))
    for key, value, moderate, high, text in (
            ("device_collectives", collectives, 3, 15, " % of the total step time sampled is spent on 'Device "
                                                       "Collective Communication'."),
            ("kernel_launch", launch, 3, 15, " % of the total step time sampled is spent on 'Kernel Launch'.")):
        level = "high" if value >= high else "moderate" if value >= moderate else "no"
        out[f"{key}_classification"] = level
        out[f"{key}_statement"] = "" if level == "no" else one_digit(value) + text
    level = "no" if reported else "high" if other >= 15 else "moderate" if other >= 3 else "no"
    out["all_other_classification"] = level
    out["all_other_statement"] = "" if level == "no" else one_digit(other) + _ALL_OTHERS_PYTHON
    return out


def summary_next_step(input_classification: str, tf_data: bool = False) -> str:
    """``GetSummaryNextStep``; ``tf_data``: XProf's ``TfDataInUse`` (its host input
    breakdown has tf.data time: profscope asks whether the host ran ``Iterator::`` ops)."""
    if input_classification in ("host", "both"):
        if tf_data:
            return "Look at Section 3 for the breakdown of input time on the host."
        return (f'Consider using <a href="{_DATASET_DOC}" target="_blank">the tf.data API</a> to enable profiler\'s '
                "host-side analysis for input pipeline. Profiler currently does not support custom input pipeline "
                "(please ignore Section 3 below).")
    return "You may skip the rest of this page."


def _summary_props(props: dict, name: str, stat: _Stat) -> None:
    avg, sdv, _min, _max = stat.summary()
    props[f"{name}_avg"] = one_digit(avg)
    props[f"{name}_sdv"] = one_digit(sdv)


def generic_step_table(steps: list[dict], hardware: str, tf_data: bool = False) -> tuple[dict, dict]:
    """Table 1 of a GPU or CPU profile: XProf's ``GenerateGenericInputPipelineAnalysisDataTable``."""
    details = step_details(steps)
    cols = [_col(*c) for c in GENERIC_COLUMNS] + [_col("tooltip", "string", "tooltip", {"role": "tooltip"}),
                                                  _col("stepTimeMs", "number", "Step time")]
    step_time = _Stat()
    for d in details:
        step_time.add(d["slowest_core_ms"])
    avg, sdv, lo, hi = step_time.summary()
    props = {"step_time_graph_column_ids": "stepnum,deviceComputeTimeMs,deviceToDeviceTimeMs,deviceCollectivesTimeMs,"
                                           "hostComputeTimeMs,kernelLaunchTimeMs,infeedTimeMs,outfeedTimeMs,"
                                           "compileTimeMs,otherTimeMs, tooltip",
             "hardware_type": hardware, "steptime_ms_average": one_digit(avg),
             "steptime_ms_standard_deviation": one_digit(sdv), "steptime_ms_minimum": one_digit(lo),
             "steptime_ms_maximum": one_digit(hi)}
    for name, fn in (("device_compute_time_ms", lambda d: d["device_compute_ms"]),
                     ("device_to_device_time_ms", lambda d: d["device_to_device_ms"]),
                     ("device_collectives_time_ms", lambda d: d["device_collectives_ms"]),
                     ("infeed_time_ms", lambda d: d["host_wait_input_ms"] + d["host_to_device_ms"]),
                     ("outfeed_time_ms", lambda d: d["output_ms"]),
                     ("host_compute_time_ms", lambda d: d["host_compute_ms"]),
                     ("kernel_launch_time_ms", lambda d: d["host_prepare_ms"]),
                     ("compile_time_ms", lambda d: d["host_compile_ms"]),
                     ("other_time_ms", lambda d: d["unknown_time_ms"])):
        st = _Stat()
        for d in details:
            st.add(fn(d))
        _summary_props(props, name, st)
    b = bottleneck(details)
    props.update(input_conclusion=b["input_statement"],
                 device_collectives_bottleneck=b["device_collectives_statement"],
                 device_collectives_statement=b["device_collectives_statement"],
                 kernel_launch_bottleneck=b["kernel_launch_statement"], kernel_launch_statement=b["kernel_launch_statement"],
                 all_other_bottleneck=b["all_other_statement"], all_other_statement=b["all_other_statement"],
                 summary_nextstep=summary_next_step(b["input_classification"], tf_data))
    rows = []
    for d in details:
        infeed = d["host_wait_input_ms"] + d["host_to_device_ms"]
        tip = (f"Step {d['step_name']}, duration: {two_digits(d['step_time_ms'])} ms"
               f"\n-All others: {two_digits(d['unknown_time_ms'])} ms\n-Compilation: {two_digits(d['host_compile_ms'])} ms"
               f"\n-Output: {two_digits(d['output_ms'])} ms\n-Input: {two_digits(infeed)} ms"
               f"\n-Kernel launch: {two_digits(d['host_prepare_ms'])} ms\n-Host compute: {two_digits(d['host_compute_ms'])} ms"
               f"\n-Device collectives: {two_digits(d['device_collectives_ms'])} ms"
               f"\n-Device to device: {two_digits(d['device_to_device_ms'])} ms"
               f"\n-Device compute: {two_digits(d['device_compute_ms'])} ms")
        values = [d["step_name"], d["device_compute_ms"], d["device_to_device_ms"], d["device_collectives_ms"],
                  d["host_compute_ms"], d["host_prepare_ms"], infeed, d["output_ms"], d["host_compile_ms"],
                  d["unknown_time_ms"], tip, d["step_time_ms"]]
        rows.append({"c": [{"v": v} for v in values]})
    return {"cols": cols, "p": dict(sorted(props.items())), "rows": rows}, b


def tpu_step_table() -> tuple[dict, dict]:
    """Table 1 of a TPU profile without steps: XProf's ``GenerateTpuInputPipelineAnalysisDataTable`` columns."""
    cols = [_col(*c) for c in TPU_COLUMNS] + [
        _col("tooltip", "string", "tooltip", {"role": "tooltip"}),
        _col("infeedPercentAverage", "number", "% step time waiting for input data"),
        _col("infeedPercentMin", "number", "Infeed percent min", {"role": "interval"}),
        _col("infeedPercentMax", "number", "Infeed percent max", {"role": "interval"})]
    zero2 = "0.00"
    props = {"active_steptime_ms_average": zero2, "hardware_type": "TPU", "host_transfer_ms_average": zero2,
             "infeed_percent_average": "0.0", "infeed_percent_maximum": "0.0", "infeed_percent_minimum": "0.0",
             "infeed_percent_standard_deviation": "0.0", "input_conclusion": NO_STEP, "output_conclusion": "",
             "scv0_compute_ms_average": zero2, "scv0_infeed_ms_average": zero2,
             "step_time_graph_column_ids": ",".join(c[0] for c in TPU_COLUMNS) + ",tooltip",
             "steptime_ms_average": zero2, "steptime_ms_maximum": zero2, "steptime_ms_minimum": zero2,
             "steptime_ms_standard_deviation": zero2, "summary_nextstep": summary_next_step("unknown"),
             "tc_active_ms_average": zero2, "tc_compute_ms_average": zero2, "tc_idle_ms_average": zero2,
             "tc_infeed_ms_average": zero2, "tc_outfeed_ms_average": zero2}
    return {"cols": cols, "p": dict(sorted(props.items())), "rows": []}, bottleneck([])


def _recommendation(b: dict, hardware: str) -> dict:
    """Table 3: XProf's ``GenerateRecommendationDataTable`` with its fixed tips."""
    device = hardware  # XProf names the device by its HardwareType name ("CPU_ONLY" too)
    tool = "op_profile" if hardware == "TPU" else "framework_op_stats"
    where = "each TPU core" if hardware == "TPU" else f"each {device}"
    tips = [("faq", "Refer to the TF2 Profiler FAQ", "Tool troubleshooting / FAQ"),
            ("host", "input_pipeline_analyzer (especially Section 3 for the breakdown of input operations on the Host)",
             "Next steps for reducing the Host time"),
            ("host", "trace_viewer (look at the activities on the timeline of each Host Thread near the bottom of the "
                     "trace view)", "Next steps for reducing the Host time"),
            ("device", f"{tool} (identify the time-consuming operations executed on the {device})",
             "Next steps for reducing the Device time"),
            ("device", f"trace_viewer (look at the activities on the timeline of {where} in the trace view)",
             "Next steps for reducing the Device time"),
            ("doc", '<a href="https://www.tensorflow.org/guide/data_performance_analysis" target="_blank">Analyze '
                    "tf.data performance with the TF Profiler</a>", "Other useful resources"),
            ("doc", '<a href="https://www.tensorflow.org/guide/data_performance" target="_blank">Better performance '
                    "with the tf.data API</a>", "Other useful resources")]
    bottleneck_of = b["input_classification"]
    props = {"all_other_bottleneck": b["all_other_classification"], "all_other_statement": b["all_other_statement"],
             "bottleneck": bottleneck_of, "device_collectives_bottleneck": b["device_collectives_classification"],
             "device_collectives_statement": b["device_collectives_statement"],
             "kernel_launch_bottleneck": b["kernel_launch_classification"],
             "kernel_launch_statement": b["kernel_launch_statement"],
             "non_bottleneck_tip_types": "host" if bottleneck_of == "device" else "", "precision_statement": "",
             "statement": b["input_statement"]}
    return {"cols": [_col("tip_type", "string", "tip_type"), _col("link", "string", "link"),
                     _col("description", "string", "description")],
            "p": props, "rows": [{"c": [{"v": v} for v in t]} for t in tips]}


def _step_alignment(sub: list[tuple[int, int]], chief: list[tuple[int, int]]) -> tuple[int, int, int]:
    """step_intersection.cc ``FindStepsAlignment``: (first subordinate step, first chief
    step, steps) of the offset whose overlapping step spans overlap most."""
    if not sub or not chief:
        return 0, 0, 0
    sim = [0] * (len(sub) + len(chief) - 1)
    i = j = 0
    while i < len(sub) and j < len(chief):  # CalculateSimilarities
        (sb, se), (cb, ce) = sub[i], chief[j]
        if se <= sb:
            i += 1
            continue
        if ce <= cb:
            j += 1
            continue
        sim[j - i + len(sub) - 1] += max(0, min(se, ce) - max(sb, cb))
        if se < ce:
            i += 1
        elif ce < se:
            j += 1
        else:
            i, j = i + 1, j + 1
    best_k, best = 0, None  # FindBestOffset: k = 0.., then k = -1, -2...
    for k in list(range(len(chief))) + list(range(-1, -len(sub), -1)):
        if best is None or sim[k + len(sub) - 1] > best:
            best, best_k = sim[k + len(sub) - 1], k
    b_sub, b_chief = (0, best_k) if best_k >= 0 else (-best_k, 0)
    return b_sub, b_chief, min(len(sub) - b_sub, len(chief) - b_chief)


def combine_hosts(step_dbs: list[dict]) -> dict:
    """XProf's ALL_HOSTS: ``CombineAllOpStats`` of the hosts' step databases (in host
    order, host 0 first) over their ``StepIntersection``. The chief is the host whose
    steps span the least time (the first of equal ones); every other host's steps are
    aligned to the chief's by the offset of most overlap; the steps all hosts share are
    kept, numbered from 0. A merged step's breakdown is host 0's (XProf reads core 1 of
    the merged step, host 0's ``kDefaultGpuLocalCoreId``), its time for the summary the
    slowest host's. A CPU-only host among accelerator hosts is a coordinator: left out."""
    if len(step_dbs) == 1:
        return step_dbs[0]
    no_accelerator = all(db["hardware"] == "CPU_ONLY" for db in step_dbs)
    workers = [h for h, db in enumerate(step_dbs) if no_accelerator or db["hardware"] != "CPU_ONLY"]
    spans = {h: [(s["begin_ps"], s["begin_ps"] + s["duration_ps"]) for s in step_dbs[h]["steps"]] for h in workers}
    total = {h: (max(e for _b, e in spans[h]) - min(b for b, _e in spans[h])) if spans[h] else 0 for h in workers}
    chief = min(workers, key=lambda h: total[h])
    align = {h: (0, 0, len(spans[h])) if h == chief else _step_alignment(spans[h], spans[chief]) for h in workers}
    begin = max(a[1] for a in align.values())
    end = min(a[1] + a[2] for a in align.values())
    n = end - begin if begin <= end and spans[chief] else 0
    first = {h: align[h][0] + begin - align[h][1] for h in workers}
    steps = []
    for i in range(n):
        per_host = {h: step_dbs[h]["steps"][first[h] + i] for h in workers}
        slowest = max(s["duration_ps"] for s in per_host.values())
        if 0 in per_host:
            steps.append({**per_host[0], "step_num": i, "slowest_core_ps": slowest})
    head = step_dbs[workers[0]] if workers else step_dbs[0]
    return {**head, "device_count": sum(db["device_count"] for db in step_dbs), "steps": steps,
            "tf_data": any(db.get("tf_data") for db in step_dbs), "tasks": len(step_dbs),
            "host_count": len({db.get("hostname", "") for db in step_dbs})}


def overview_page(step_db: dict) -> list:
    """XProf's overview_page answer (a list of 7 DataTables) of one host's step database:
    ``{"hardware", "device_type", "device_count", "tf_data", "steps": [{name, duration_ps, type_ps}]}``."""
    hardware = step_db["hardware"]
    if hardware == "TPU":
        steps_table, b = tpu_step_table()
    else:
        steps_table, b = generic_step_table(step_db["steps"], hardware, bool(step_db.get("tf_data")))
    ops = {"cols": [_col("selfTimePercent", "number", "Time (%)"),
                    _col("cumulativeTimePercent", "number", "Cumulative time (%)"),
                    _col("category", "string", "Category"), _col("operation", "string", "Operation"),
                    _col("flopRate", "number", "GFLOPs/Sec")], "p": {}, "rows": []}
    env = {"cols": [_col("host_id", "string", "host_id"), _col("command_line", "string", "command_line"),
                    _col("start_time", "string", "start_time"), _col("bns_address", "string", "bns_address")],
           "p": {"device_core_count": str(step_db["device_count"]), "device_type": step_db["device_type"],
                 "host_count": str(step_db.get("host_count", 1)),
                 "task_count": "{} (num tasks per host = {})".format(
                     step_db.get("tasks", 1), step_db.get("tasks", 1) // step_db.get("host_count", 1))}, "rows": []}
    latency = {"cols": [_col("percentile", "string", "percentile"), _col("hostTimeMs", "number", "Host time (in ms)"),
                        _col("deviceTimeMs", "number", "Device time (in ms)"),
                        _col("communicationTimeMs", "number", "Host-device communication time (in ms)"),
                        _col("totalTimeMs", "number", "Total latency (in ms)")], "rows": []}
    diagnostics = {"cols": [_col("severity", "string", "Severity"), _col("message", "string", "Message")],
                   "rows": [] if step_db["steps"] else [{"c": [{"v": "WARNING"}, {"v": NO_STEP_WARNING}]}]}
    return [ops, steps_table, env, _recommendation(b, hardware), latency, {}, diagnostics]
