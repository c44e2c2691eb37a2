"""XProf's ``hlo_stats`` tool: one row per HLO op, ranked by its total self time on the
device, as XProf 2.24's ``ConvertOpStatsToHloStats`` and ``HloStatsToDataTableJson``
(xprof/convert/op_stats_to_hlo_stats.cc) answer it: a Google DataTable JSON
(``{"cols": [...], "rows": [{"c": [{"v": ...}, ...]}]}``) with XProf's column ids.

The rows come from the device op metrics (formats/xplane_op_metrics.py, XProf's
``OpMetricsDb``), sorted by self time (``SortedOpMetricsDb``); the ``IDLE`` op and ops
that never ran (no occurrences) get no row. Times are µs (``PicoToMicro``: ps / 1e6, not
rounded), averages over occurrences, the share of self time over the device time of
every device plane (idle included), the cumulative share in rank order.

Not reproduced (docs/xprof_compat.md): the roofline columns (XProf fills them from
XLA's ``HloCostAnalysis`` of the module, which profscope does not run: 0 and "Unknown"
here) and the full HLO text of ``hlo_op_expression`` (profscope writes a short form
with the same op name).
"""

from __future__ import annotations

__all__ = ["COLUMNS", "hlo_stats"]

PS_PER_US = 1e6  # tsl PicoToMicro divides by 1E6

# HloStatsDataTableColumns(): id, type, label, in XProf's order
COLUMNS = (
    ("rank", "number", "Rank"),
    ("program_id", "string", "Program id"),
    ("category", "string", "HLO op category"),
    ("hlo_op_name", "string", "HLO op name"),
    ("hlo_op_expression", "string", "HLO op text"),
    ("tf_op_name", "string", "Framework op name"),
    ("occurrences", "number", "#Occurrences"),
    ("total_time", "number", "Total time (us)"),
    ("avg_time", "number", "Avg. time (us)"),
    ("total_self_time", "number", "Total self time (us)"),
    ("avg_self_time", "number", "Avg. self time (us)"),
    ("total_self_time_percent", "number", "Total self time (%)"),
    ("cumulative_total_self_time_percent", "number", "Cumulative total self time (%)"),
    ("dma_stall_percent", "number", "%time stalled by DMA"),
    ("model_flop_rate", "number", "Model GFLOP/s"),
    ("normalized_flop_rate", "number", "Normalized GFLOP/s"),
    ("measured_memory_bw", "number", "Measured memory BW (GiB/s)"),
    ("hbm_bw", "number", "HBM BW (GiB/s)"),
    ("cmem_read_bw", "number", "CMEM Read BW (GiB/s)"),
    ("cmem_write_bw", "number", "CMEM Write BW (GiB/s)"),
    ("operational_intensity", "number", "Operational intensity (FLOPS/Byte)"),
    ("bound_by", "string", "Bound by"),
    ("hlo_rematerialization", "string", "Rematerialization"),
    ("outside_compilation", "string", "Outside Compilation"),
    ("autotuned", "string", "Autotuned"),
    ("source_info", "string", "Source Info"),
    ("core_type", "string", "TPU core type"),
    ("parent_op_name", "string", "Parent op name"),
    ("vdd_energy", "number", "VDD Energy (J)"),
)


def _safe_div(a: float, b: float) -> float:
    return a / b if b else 0.0  # tsl SafeDivide


def _op_name(expression: str, name: str) -> str:
    # GetHloOpNameFromExpression: the text before " = ", without its leading '%'
    head = (expression or name).split(" = ")[0]
    return head[1:] if head.startswith("%") else head


def _escape_html(text: str) -> str:
    # XProf's EscapeHtml (xprof/convert/source_info_utils.h)
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#39;")):
        text = text.replace(a, b)
    return text


def source_info_text(op: dict) -> str:
    """XProf's SourceInfoFormattedText: the op's ``file:line`` in a cell whose title is its
    stack, "" without a file."""
    if not op["source_file"] or op["source_line"] == -1:
        return ""
    return (f"<div class='source-info-cell' title='{_escape_html(op['stack_frame'])}'>"
            f"{_escape_html(op['source_file'])}:{op['source_line']}</div>")


def hlo_stats(ops: list[dict], total_time_ps: int) -> dict:
    """The DataTable of ``ops``: dicts with the keys of formats.xplane_op_metrics.OpMetric,
    in XProf's sorted order; ``total_time_ps`` the device time the shares are of."""
    total_us = total_time_ps / PS_PER_US
    rows = []
    cumulative = 0.0
    for op in ops:
        if op["occurrences"] == 0:
            continue  # AddHloStatsRecordsRecursively: "Skip empty metrics" (IDLE among them)
        total = op["time_ps"] / PS_PER_US
        self_us = op["self_time_ps"] / PS_PER_US
        share = _safe_div(self_us, total_us)
        cumulative += share
        expression = op["long_name"] or op["name"]
        values = (
            float(len(rows) + 1), str(op["hlo_module_id"]), op["category"], _op_name(expression, op["name"]),
            expression, op["provenance"], float(op["occurrences"]), total, _safe_div(total, op["occurrences"]),
            self_us, _safe_div(self_us, op["occurrences"]), share * 100.0, cumulative * 100.0,
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "Unknown", "No", "No", "No", source_info_text(op), op["core_type"], "", 0.0,
        )
        rows.append({"c": [{"v": v} for v in values]})
    return {"cols": [{"id": i, "label": label, "type": t} for i, t, label in COLUMNS], "rows": rows}
