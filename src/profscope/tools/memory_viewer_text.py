"""Memory viewer for XLA dumps that have only text: ``*-buffer-assignment.txt`` (and the
``*-memory-usage-report.txt`` beside it), no ``.hlo.pb``.

Without the heap-simulator trace there is no heap over program order, no peak, no buffers at
peak and no lifetimes; what the text does say is shown as it is: every allocation with its
size, category, attributes and the values placed in it (offset, size, shape), and the totals.

Payload (``from_dump_text``)::

    {"moduleName", "textOnly": true, "note",
     "totals": {"totalBufferAllocationBytes", "parameterBytes", "outputBytes",
                "temporaryBytes", "constantBytes", "threadLocalBytes",
                "allocationCount", "valueCount"},
     "allocations": [{"index", "sizeBytes", "category", "attributes", "color",
                      "parameterNumber", "values": [{"id", "name", "shapeIndex", "shape",
                      "offset", "sizeBytes"}],
                      # extras: "parameterShape", "parameterShapeIndex", "outputShape"
                     }],                                   # largest first
     "memoryUsageReport": {...} | null,
     "sources": {"bufferAssignment": <file name>, "memoryUsageReport": <file name> | null},
     # extra: "liveRange": {...} | null  (older XLA put HloLiveRange into the same file)
    }

Totals are sums of allocation sizes: ``parameterBytes`` counts entry parameters,
``outputBytes`` maybe-live-out allocations (a donated parameter is in both),
``constantBytes`` / ``threadLocalBytes`` their flags, ``temporaryBytes`` the allocations whose
category is Temporary; ``totalBufferAllocationBytes`` is XLA's "Total bytes (used)". The
report copy says ``file`` (its name, no path) and each of its tables gets ``index``,
``sizeBytes`` and ``category``.
"""

from __future__ import annotations

from profscope.errors import BadInput
from profscope.model.buffer_assignment import Allocation, BufferAssignmentText

PARAMETER = "Parameter"
OUTPUT = "Output"
THREAD_LOCAL = "Thread-local"
CONSTANT = "Constant"
TEMPORARY = "Temporary"

NOTE = (
    "This module has only XLA's text dump (the buffer assignment{report}), which lists every "
    "allocation with its size and the values placed in it but not the heap-simulator "
    "trace, so the heap size over program order, the peak and where it happens, the "
    "buffers live at the peak and each buffer's lifetime cannot be shown; re-run with "
    'XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_proto" to also get the module\'s '
    ".hlo.pb, which holds them.{live}"
)
LIVE_RANGE_NOTE = (
    " This file also carries XLA's live ranges (schedule order and each value's live "
    "interval), listed under liveRange, but they are not the heap simulation the full "
    "memory viewer replays."
)


def category(alloc: Allocation) -> str:
    """XProf's allocation type, in its precedence:
    Parameter > Output > Thread-local > Constant > Temporary."""
    if alloc.is_entry_computation_parameter:
        return PARAMETER
    if alloc.maybe_live_out:
        return OUTPUT
    if alloc.is_thread_local:
        return THREAD_LOCAL
    if alloc.is_constant:
        return CONSTANT
    return TEMPORARY


def _attributes(alloc: Allocation) -> list[str]:
    out: list[str] = []
    if alloc.parameter_number is not None:
        out.append(f"parameter {alloc.parameter_number}")
        if alloc.parameter_shape_index not in (None, "{}"):
            out.append(f"parameter shape index {alloc.parameter_shape_index}")
    if alloc.output_shape is not None:
        out.append("output")
    if alloc.is_constant:
        out.append("constant")
    if alloc.is_thread_local:
        out.append("thread-local")
    if alloc.maybe_live_out:
        out.append("maybe-live-out")
    if alloc.is_preallocated_temp:
        out.append("preallocated-temp")
    if alloc.is_tuple:
        out.append("tuple")
    if alloc.color:
        out.append(f"color {alloc.color}")
    known = ("parameter ", "shape |", "output shape is |", "color ")
    for piece in alloc.attributes:  # anything a newer XLA prints that we do not know
        if piece.startswith(known) or piece in out:
            continue
        out.append(piece)
    return out


def _base_name(path: str | None) -> str | None:
    if path is None:
        return None
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def _match_report(ba: BufferAssignmentText, report: dict) -> dict:
    """A copy of ``report`` (its ``path`` cut to the file name, as ``file``) whose
    allocation tables name their allocation (index, exact size, category). Where the format
    does not print the index, XLA's order gives it: per color, size descending, then index
    (GetMemoryUsageReportProto). Raises BadInput when a table counts a different number of
    values than the buffer assignment lists for that allocation."""
    by_index = {a.index: a for a in ba.allocations}
    by_color: dict[int, list[Allocation]] = {}
    for a in ba.allocations:
        by_color.setdefault(a.color, []).append(a)
    for allocs in by_color.values():
        allocs.sort(key=lambda a: (-a.size, a.index))
    spaces = []
    for space in report.get("memorySpaces", []):
        entries = [dict(e) for e in space.get("allocations", [])]
        spaces.append({**space, "allocations": entries})
        if any(e.get("index") is not None for e in entries):
            matched = [(e, by_index.get(e["index"])) for e in entries]
        else:
            color = space.get("color")
            allocs = by_color.get(color if color is not None else 0, [])
            if len(entries) > len(allocs):
                raise BadInput(
                    f"{ba.path}: {_base_name(report.get('path'))} lists {len(entries)} "
                    f"allocations of color {color} but the buffer assignment has "
                    f"{len(allocs)}",
                    file=ba.path,
                )
            matched = list(zip(entries, allocs, strict=False))
        for entry, alloc in matched:
            if alloc is None:
                continue
            entry["index"] = alloc.index
            entry["sizeBytes"] = alloc.size
            entry["category"] = category(alloc)
            counted = sum(row["valueCount"] for row in entry.get("offsets", []))
            if entry.get("offsets") and entry.get("omittedOffsets") is None and (
                counted != len(alloc.values)
            ):
                raise BadInput(
                    f"{ba.path}: allocation {alloc.index} lists {len(alloc.values)} values "
                    f"but {_base_name(report.get('path'))} counts {counted} (files from "
                    "different compilations, or one is cut short)",
                    file=ba.path,
                )
    out = {k: v for k, v in report.items() if k != "path"}  # no local paths in the payload
    out["file"] = _base_name(report.get("path"))
    out["memorySpaces"] = spaces
    return out


def from_dump_text(ba: BufferAssignmentText, report: dict | None, module_name: str) -> dict:
    """The text-only memory viewer payload for one module (see module doc).

    ``report`` is :func:`parse_memory_usage_report`'s dict or None. Raises BadInput naming
    the buffer-assignment file when the report's total disagrees with the allocations (the
    two files are from different compilations, or one is cut short).
    """
    report_name = _base_name(report.get("path")) if report is not None else None
    allocations = sorted(ba.allocations, key=lambda a: (-a.size, a.index))
    totals = {
        "totalBufferAllocationBytes": 0,
        "parameterBytes": 0,
        "outputBytes": 0,
        "temporaryBytes": 0,
        "constantBytes": 0,
        "threadLocalBytes": 0,
        "allocationCount": len(allocations),
        "valueCount": 0,
    }
    rows = []
    for a in allocations:
        cat = category(a)
        totals["totalBufferAllocationBytes"] += a.size
        totals["valueCount"] += len(a.values)
        if a.is_entry_computation_parameter:
            totals["parameterBytes"] += a.size
        if a.maybe_live_out:
            totals["outputBytes"] += a.size
        if a.is_constant:
            totals["constantBytes"] += a.size
        if a.is_thread_local:
            totals["threadLocalBytes"] += a.size
        if cat == TEMPORARY:
            totals["temporaryBytes"] += a.size
        rows.append({
            "index": a.index,
            "sizeBytes": a.size,
            "category": cat,
            "attributes": _attributes(a),
            "color": a.color,
            "parameterNumber": a.parameter_number,
            "values": [
                {
                    "id": v.id,
                    "name": v.name,
                    "shapeIndex": v.shape_index,
                    "shape": v.shape,
                    "offset": v.offset,
                    "sizeBytes": v.size,
                }
                for v in a.values
            ],
            "parameterShape": a.parameter_shape,
            "parameterShapeIndex": a.parameter_shape_index,
            "outputShape": a.output_shape,
        })

    if report is not None:
        stated = report.get("totalBytes")
        if stated is not None and stated != totals["totalBufferAllocationBytes"]:
            raise BadInput(
                f"{ba.path}: allocations add up to {totals['totalBufferAllocationBytes']} "
                f"bytes but {report_name} says {stated} (files from "
                "different compilations, or one is cut short)",
                file=ba.path,
            )
        report = _match_report(ba, report)

    live = ba.live_range
    live_payload = None
    if live is not None:
        live_payload = {
            "maxTime": live.max_time,
            "instructionSequence": live.instruction_sequence,
            "ranges": [
                {"name": n, "shapeIndex": i, "start": s, "end": e}
                for n, i, s, e in live.ranges
            ],
            "peakTime": live.peak_time,
            "peakValues": [{"name": n, "bytes": b} for n, b in live.peak_values],
        }
    note = NOTE.format(
        report=" and memory usage report" if report is not None else "",
        live=LIVE_RANGE_NOTE if live is not None else "",
    )
    return {
        "moduleName": module_name,
        "textOnly": True,
        "note": note,
        "totals": totals,
        "allocations": rows,
        "memoryUsageReport": report,
        "sources": {
            "bufferAssignment": _base_name(ba.path),
            "memoryUsageReport": report_name,
        },
        "liveRange": live_payload,
    }
