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
     "liveRange": {"maxTime", "instructionSequence", "ranges", "source",
                   "heapSizes": [bytes at each schedule time], "peakBytes", "peakTime",
                   "peakInstruction", "peakValues": [{"name", "bytes"}],
                   "xlaPeakTime", "xlaPeakBytes", "unsizedValues", "rule"} | null,
    }

``liveRange`` comes from XLA's ``HloLiveRange`` text: older XLA (jax 0.4.x) put it at the
end of the buffer-assignment file, newer XLA (jax 0.10.x) writes ``*-live-range.txt``
beside it (:mod:`profscope.formats.live_range_text`). With it, the heap over program order
and its peak are shown (:func:`live_range_heap`): the logical buffers live at each point of
the schedule, before buffer reuse.

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
LIVE_NOTE = (
    "This module has only XLA's text dump (the buffer assignment{report} and the live ranges of "
    "{file}): the heap over program order and its peak are the logical buffers XLA's live ranges "
    "hold at each point of the schedule, before buffers share an allocation, so they are not the "
    "heap simulator's planned peak; buffer offsets in the heap and the simulated peak need the "
    'module\'s .hlo.pb (XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_proto").'
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


# Schedule times drawn when a live-range text lists no instruction sequence to bound them.
MAX_TIMES = 1_000_000


def live_range_heap(live: dict, allocations: list[dict], source: str | None) -> dict:
    """The heap over program order from XLA's live ranges: at each schedule time t
    (0..maxTime), the bytes of the logical buffers (HloValues) live at t, a range
    ``start-end`` holding both ends (hlo_live_range.cc: a value is live at the moment
    when ``start <= t <= end``). A value's size is its size in the buffer assignment
    (``value: <id name> (size=N,...)``), else the size the peak block printed for it;
    values with neither are counted in ``unsizedValues``.

    The peak is the maximum of that heap, with the values live there. It can exceed the
    block XLA prints as "Live ranges at N (peak)": XLA's ComputePeakMemoryMoment sorts
    (time, is_end) events, so at each time it adds the values that start there before it
    drops those whose range ended just before, picks the moment of that transient
    maximum, and then prints the values whose range holds the moment (jax 0.4.30's
    jit_update: 3,208 bytes at time 8, while 4,228 bytes are live at time 5). XLA's
    moment and sum stay as ``xlaPeakTime`` / ``xlaPeakBytes`` (the heap at that time
    equals the sum). Either way these are values before buffer reuse, not the heap
    simulator's planned peak."""
    sizes = {f"{v['name']}{v.get('shapeIndex') or ''}": int(v["sizeBytes"]) for a in allocations for v in a["values"]}
    stated = {v["name"]: int(v["bytes"]) for v in live.get("peakValues") or []}
    seq = live.get("instructionSequence") or []
    # XLA prints max = the flattened sequence's length (schedule_end_time); a larger max
    # (a corrupt or hand-edited file) must not size the heap: clamp to the sequence.
    end_time = max(0, min(int(live.get("maxTime") or 0), len(seq) if seq else MAX_TIMES))
    delta = [0] * (end_time + 2)
    spans, unsized = [], 0
    for r in live.get("ranges") or []:
        key = f"{r['name']}{r.get('shapeIndex') or ''}"
        size = sizes.get(key, stated.get(key))
        if size is None:
            unsized += 1
            continue
        start, end = max(0, r["start"]), min(end_time, r["end"])
        if start > end:
            continue
        delta[start] += size
        delta[end + 1] -= size
        spans.append((key, size, start, end))
    heap, level = [], 0
    for d in delta[: end_time + 1]:
        level += d
        heap.append(level)
    peak = max(heap) if spans else 0
    at = heap.index(peak) if spans else None
    live_at = sorted(((k, b) for k, b, s, e in spans if at is not None and s <= at <= e), key=lambda kb: (-kb[1], kb[0]))
    return {
        **live,
        "source": source,
        "heapSizes": heap,
        "peakBytes": peak,
        "peakTime": at,
        "peakInstruction": seq[at] if at is not None and at < len(seq) else None,
        "peakValues": [{"name": k, "bytes": b} for k, b in live_at],
        "xlaPeakTime": live.get("peakTime"),
        "xlaPeakBytes": sum(stated.values()),
        "unsizedValues": unsized,
        "rule": "max over schedule times t of the sizes of the values whose live range holds t (start <= t <= end)",
    }


def _live_payload(ba: BufferAssignmentText, live_range: dict | None, live_file: str | None,
                  rows: list[dict]) -> dict | None:
    """The live ranges of the buffer-assignment file itself (older XLA) or of the
    ``*-live-range.txt`` beside it, with the heap over program order."""
    live = ba.live_range
    if live is not None:
        live_range = {
            "maxTime": live.max_time,
            "instructionSequence": live.instruction_sequence,
            "ranges": [{"name": n, "shapeIndex": i, "start": s, "end": e} for n, i, s, e in live.ranges],
            "peakTime": live.peak_time,
            "peakValues": [{"name": n, "bytes": b} for n, b in live.peak_values],
        }
        live_file = _base_name(ba.path)
    return live_range_heap(live_range, rows, live_file) if live_range is not None else None


def from_dump_text(ba: BufferAssignmentText, report: dict | None, module_name: str,
                   live_range: dict | None = None, live_file: str | None = None) -> dict:
    """The text-only memory viewer payload for one module (see module doc).

    ``report`` is :func:`parse_memory_usage_report`'s dict or None; ``live_range`` is
    :func:`profscope.formats.live_range_text.parse_live_range` of the ``*-live-range.txt``
    beside the buffer assignment (``live_file``, its name), used when the buffer
    assignment carries no live ranges of its own. Raises BadInput naming the
    buffer-assignment file when the report's total disagrees with the allocations (the
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

    live_payload = _live_payload(ba, live_range, live_file, rows)
    note = NOTE.format(
        report=" and memory usage report" if report is not None else "",
        live=LIVE_RANGE_NOTE if live_payload is not None else "",
    )
    if live_payload is not None and live_payload["peakBytes"]:
        note = LIVE_NOTE.format(report=" and memory usage report" if report is not None else "",
                                file=live_payload["source"])
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


def summary(payload: dict) -> dict:
    """A text-only module's row for ranking a run's modules (the shape of
    :func:`profscope.tools.memory_viewer.summary`): its peak is the live ranges' peak
    (:func:`live_range_heap`), None without live ranges; ``heapEvents`` 0 (no heap
    simulator ran); ``textOnly`` true."""
    t = payload["totals"]
    live = payload.get("liveRange") or {}
    peak = int(live["peakBytes"]) if live.get("peakBytes") else None
    mib = 1 << 20
    return {
        "moduleName": payload["moduleName"], "memorySpace": 0, "textOnly": True,
        "peakHeapMib": peak / mib if peak is not None else None,
        "totalBufferAllocationMib": t["totalBufferAllocationBytes"] / mib,
        "entryComputationParametersMib": t["parameterBytes"] / mib,
        "maybeLiveOutMib": t["outputBytes"] / mib,
        "peakBytes": peak, "totalAllocationBytes": t["totalBufferAllocationBytes"], "heapEvents": 0,
    }
