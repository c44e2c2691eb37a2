"""The questions a coding agent asks of a log directory, as plain functions over the
workspace: which runs are there, what is wrong with one (the Summary), where its step
time goes (Steps & ops), what is live at its memory peak, and will it fit (OOM risk).

These are the tools of ``profscope mcp`` (server/mcp_server.py binds them to the MCP
SDK and knows no tool of profscope's). Each answer is built from a tool's own payload,
through the tool table and the workspace's cache, exactly as the data route
(``/data/plugin/profile/data?tag=...``) serves it: the MCP answer and the page never
disagree. What is cut for an agent's context (``top`` rows) is cut here, from that
payload, in a fixed order, so the same files give the same answer.

Only names come in (a run as the workspace lists it, a host as the run names it): a run
is found among the runs the workspace discovered under its log directory
(``Workspace.run``), so no path an agent sends is ever opened. Bad input raises the
workspace's own errors (:class:`~profscope.errors.ProfscopeError`: the message and the
file), which the MCP server turns into an error result.
"""

from __future__ import annotations

import gzip

import orjson

from profscope.app import tool_table
from profscope.app.profile_steps import ALL_HOSTS
from profscope.app.unsupported_files import unsupported_files
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind

# The most rows an answer lists (``top``): bounded so that one question cannot ask for a
# payload of hundreds of thousands of ops into an agent's context.
MAX_TOP = 1000
DEFAULT_TOP = 20
MAX_RUNS = 1000
MIB = 1 << 20

# The profscope tools each question reads (rows of app/tool_table.py).
SUMMARY, STEPS_OPS, OOM_RISK = "summary", "steps_ops", "oom_risk"
MEMORY_VIEWER, MEMORY_PROFILE = "memory_viewer", "memory_profile"

# memory_at_peak's sources: the compiler's plan of a module (the memory viewer) or what
# the allocator did (the memory profile: allocator events, a snapshot, a trace's [memory]).
COMPILED, RUNTIME = "compiled", "runtime"


def _top(top: int | None) -> int:
    if top is None:
        return DEFAULT_TOP
    if not 1 <= top <= MAX_TOP:
        raise BadRequest(f"top must be 1 to {MAX_TOP}, not {top}")
    return top


def payload(ws, run: Run, tool_name: str, **fields) -> dict:
    """A tool's payload as the data route answers ``?run=R&tag=TOOL&host=H...``: the run
    must have the tool's input (``Workspace.tool``), a host must be one of the run's (or
    ALL_HOSTS, for the tools that answer every host at once), and the answer is the
    workspace's cached one."""
    tool = ws.tool(tool_name, run)
    host = fields.get("host")
    if host:
        known = ws.hosts(run) or [h for h, _ in ws.trace_sources(run)]
        if host not in known and not (host == ALL_HOSTS and tool.name in tool_table.ANSWERS_ALL_HOSTS):
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(known)}")
    query = tool.query(**{k: v for k, v in fields.items() if v is not None})
    return orjson.loads(gzip.decompress(ws.tool_data(run, tool, query)))


def list_runs(ws, prefix: str | None = None, limit: int | None = None) -> dict:
    """Every run (or those whose name starts with ``prefix``), with its kind, hosts and
    the tools that have input for it. A run whose files cannot be read lists no tools
    and says why (``error``, ``file``): one corrupt file never hides the others."""
    limit = MAX_RUNS if limit is None else limit
    if not 1 <= limit <= MAX_RUNS:
        raise BadRequest(f"limit must be 1 to {MAX_RUNS}, not {limit}")
    runs = [r for r in ws.runs() if not prefix or r.name.startswith(prefix)]
    rows = []
    for run in runs[:limit]:
        row = {"name": run.name, "kind": run.kind.value, "hosts": run.hosts, "files": len(run.files),
               "bytes": sum(f.size or 0 for f in run.files)}
        try:
            row["hosts"] = ws.hosts(run)  # a snapshot's devices are inside it
            row["tools"] = [t.name for t in ws.tools(run)]
        except ProfscopeError as e:
            row.update(tools=[], error=e.message, file=e.file)
        rows.append(row)
    # Files recognised but not read, with why (app/unsupported_files.py): an agent asking
    # what the log directory holds is told of them too, never left to guess.
    unsupported = [u for u in unsupported_files(ws.logdir.listing(), ws.runs())
                   if not prefix or u["file"].startswith(prefix)]
    return {"logdir": ws.logdir.url, "count": len(runs), "truncated": len(runs) > limit, "runs": rows,
            "unsupported": unsupported}


def summary(ws, run_name: str, host: str | None = None) -> dict:
    """The Summary tool's answer (docs/analysis.md, "JSON"): status, metrics, findings."""
    return payload(ws, ws.run(run_name), SUMMARY, host=host)


def steps_ops(ws, run_name: str, host: str | None = None, top: int | None = None) -> dict:
    """The Steps & ops answer (docs/steps_and_ops.md) with its ranked ``kernels`` and
    ``ops`` cut to the ``top`` first (the steps are all kept: each is one row);
    ``ops_total`` / ``kernels_total`` say how many there were."""
    n = _top(top)
    out = payload(ws, ws.run(run_name), STEPS_OPS, host=host)
    for key in ("kernels", "ops"):
        if isinstance(out.get(key), list):
            out[f"{key}_total"] = len(out[key])
            out[key] = out[key][:n]
    return out


def oom_verdict(ws, run_name: str, host: str | None = None, module: str | None = None,
                device_memory: str | None = None, top: int | None = None) -> dict:
    """OOM risk's verdict (docs/oom_risk.md): the tier and why, peak against capacity,
    the findings (what to cut among them), the largest contributors at the peak with
    their largest items, and the planner's headline."""
    n = _top(top)
    run = ws.run(run_name)
    risk = payload(ws, run, OOM_RISK, host=host, module_name=module, device_memory=device_memory)
    contributors = [{"category": c["category"], "label": c["label"], "bytes": c["bytes"], "share": c.get("share"),
                     "count": c.get("count"),
                     "items": [{k: i.get(k) for k in ("name", "bytes", "shape", "opName")} for i in c.get("items", [])[:5]]}
                    for c in risk.get("contributors", [])[:n]]
    return {
        "run": run.name, "host": risk.get("host"),
        "risk": risk["risk"], "reason": risk["reason"],
        "peak_bytes": risk.get("peakBytes"), "peak_source": risk.get("peakSource"),
        "capacity_bytes": risk.get("capacityBytes"), "capacity_source": risk.get("capacitySource"),
        "utilization": risk.get("utilization"), "headroom_bytes": risk.get("headroomBytes"),
        "module": risk.get("module"), "over_capacity": risk.get("overCapacity", []),
        "oom_events": len(risk.get("oomEvents") or []),
        "findings": [{k: f.get(k) for k in ("id", "severity", "title", "message", "evidenceText")}
                     for f in risk.get("findings", [])],
        "contributors": contributors,
        "plan": (risk.get("plan") or {}).get("headline"),
        "hosts": [{k: h.get(k) for k in ("host", "risk", "peakBytes", "capacityBytes", "utilization")}
                  for h in risk.get("hosts") or []],
    }


def memory_at_peak(ws, run_name: str, host: str | None = None, source: str | None = None,
                   module: str | None = None, memory_id: str | None = None, top: int | None = None) -> dict:
    """What is live at the memory peak, largest first. ``source="compiled"``: the memory
    viewer's buffers at the peak of a compiled module (the one with the highest peak
    unless ``module`` names one), with sizes, shapes and ops; ``"runtime"``: the memory
    profile's allocations live at the allocator's peak (allocator events, a PyTorch
    snapshot or a trace's ``[memory]`` events; the allocator with the highest peak unless
    ``memory_id`` names one). Default: compiled where the run has modules."""
    n = _top(top)
    run = ws.run(run_name)
    if source not in (None, COMPILED, RUNTIME):
        raise BadRequest(f"source must be {COMPILED!r} or {RUNTIME!r}, not {source!r}")
    has_modules = run.kind in (RunKind.PROFILE, RunKind.XLA_DUMP) and bool(ws.modules(run))
    if source is None:
        source = COMPILED if has_modules or module else RUNTIME
    if source == COMPILED:
        return _compiled_peak(ws, run, host, module, n)
    return _runtime_peak(ws, run, host, memory_id, n)


def _compiled_peak(ws, run: Run, host: str | None, module: str | None, n: int) -> dict:
    peaks = [r for r in ws.module_peaks(run) if "error" not in r]
    if module is None:
        if not peaks:
            raise NotFound(f"run {run.name!r} has no compiled module to read buffers from")
        module = peaks[0]["moduleName"]  # module_peaks: highest peak first
    mv = payload(ws, run, MEMORY_VIEWER, module_name=module, host=host)
    # XProf's maxHeapBySize: the buffers live at the heap's peak, largest first (sizes in
    # MiB, as XProf's memory_viewer_preprocess.cc writes them: bytes / 2^20).
    buffers = mv.get("maxHeapBySize") or []
    totals = (mv.get("profscope") or {}).get("totals") or {}
    return {
        "run": run.name, "host": host, "source": COMPILED, "module": module,
        "peak_bytes": totals.get("peakBytes", round((mv.get("peakHeapMib") or 0) * MIB)),
        "buffers_at_peak": len(buffers),
        "buffers": [_buffer(b) for b in buffers[:n]],
        "modules": [{"module": r["moduleName"], "peak_bytes": round((r.get("peakHeapMib") or 0) * MIB)} for r in peaks[:n]],
    }


def _buffer(b: dict) -> dict:
    """One row of XProf's maxHeapBySize (memory_viewer_preprocess.cc ``Convert``): the
    small buffers' aggregate row has only its label ("small (<16384 bytes)") and size."""
    src = b.get("sourceInfo") or {}
    return {"name": b.get("instructionName") or b.get("label"), "bytes": round(b.get("logicalBufferSizeMib", 0) * MIB),
            "unpadded_bytes": round(b.get("unpaddedShapeMib", b.get("logicalBufferSizeMib", 0)) * MIB),
            "shape": b.get("shapeString"), "op": b.get("opCode"), "framework_op": b.get("tfOpName"),
            "source": f"{src['fileName']}:{src.get('lineNumber', 0)}" if src.get("fileName") else None,
            "group": b.get("groupName"), "logical_buffer_id": b.get("logicalBufferId")}


def _runtime_peak(ws, run: Run, host: str | None, memory_id: str | None, n: int) -> dict:
    mp = payload(ws, run, MEMORY_PROFILE, host=host)
    # XProf's memory_profile schema (memory_profile.proto, MemoryProfile): per allocator a
    # profileSummary (peakStats at peakStatsTimePs), and activeAllocations, the
    # allocations live at that peak, each an index into memoryProfileSnapshots (or, with
    # snapshotIndex -1, into specialAllocations) and a count; int64 fields are strings.
    allocators = mp.get("memoryProfilePerAllocator") or {}
    ids = sorted(allocators, key=lambda i: (-_int(allocators[i]["profileSummary"]["peakStats"].get("peakBytesInUse")), i))
    if not ids:
        raise NotFound(f"run {run.name!r} has no allocator memory to read a peak from")
    memory_id = memory_id or ids[0]
    if memory_id not in allocators:
        raise NotFound(f"run {run.name!r} has no memory {memory_id!r}; memory ids: {', '.join(ids)}")
    a = allocators[memory_id]
    rows = []
    for active in a.get("activeAllocations") or []:
        snap_i, special_i = _int(active.get("snapshotIndex")), _int(active.get("specialIndex"))
        # a snapshot holds its MemoryActivityMetadata; a special allocation is one
        meta = (a["memoryProfileSnapshots"][snap_i].get("activityMetadata") or {}) if snap_i >= 0 \
            else a["specialAllocations"][special_i]
        rows.append({"name": meta.get("tfOpName"), "bytes": _int(meta.get("allocationBytes")),
                     "requested_bytes": _int(meta.get("requestedBytes")), "shape": meta.get("tensorShape"),
                     "data_type": meta.get("dataType"), "region": meta.get("regionType"),
                     "step_id": _int(meta.get("stepId")), "count": _int(active.get("numOccurrences")) or 1})
    rows.sort(key=lambda r: (-r["bytes"] * r["count"], -r["bytes"], r["name"] or ""))
    summary_ = a["profileSummary"]
    return {
        "run": run.name, "host": host, "source": RUNTIME, "memory_id": memory_id,
        "peak_bytes": _int(summary_["peakStats"].get("peakBytesInUse")),
        "capacity_bytes": _int(summary_.get("memoryCapacity")) or None,
        "peak_time_ps": _int(summary_.get("peakStatsTimePs")),
        "fragmentation": summary_["peakStats"].get("fragmentation"),
        "allocations_at_peak": sum(r["count"] for r in rows),
        "allocations": rows[:n],
        "memory_ids": [{"memory_id": i, "peak_bytes": _int(allocators[i]["profileSummary"]["peakStats"].get("peakBytesInUse"))}
                       for i in ids],
    }


def _int(v) -> int:
    return int(v) if v not in (None, "") else 0


# -- HLO and source (issue 37: app/hlo_links.py) -----------------------------------------

#: The most lines of HLO text one answer carries (a TPU module runs to tens of thousands).
MAX_HLO_LINES = 2000
DEFAULT_HLO_LINES = 200


def get_hlo_text(ws, run_name: str, module: str, host: str | None = None, instruction: str | None = None,
                 query: str | None = None, lines: int | None = None) -> dict:
    """A compiled module's HLO text (XLA's HloModule::ToString shape): ``lines`` lines
    (default 200, at most 2000) from the start, or around ``instruction``'s line, or the
    lines holding ``query`` (case-insensitive). ``total_lines`` says how long it is."""
    n = DEFAULT_HLO_LINES if lines is None else lines
    if not 1 <= n <= MAX_HLO_LINES:
        raise BadRequest(f"lines must be 1 to {MAX_HLO_LINES}, not {n}")
    run = ws.run(run_name)
    text = ws.hlo_module_text(run, module, host)
    all_lines = text["lines"]
    out = {"run": run.name, "module": module, "hlo_module": text["module"], "total_lines": len(all_lines)}
    if query:
        q = query.lower()
        hits = [i for i, line in enumerate(all_lines) if q in line.lower()]
        out.update(query=query, matches=len(hits), lines=[{"line": i + 1, "text": all_lines[i]} for i in hits[:n]])
        return out
    first = 0
    if instruction:
        info = text["instructions"].get(instruction)
        if info is None:
            raise NotFound(f"module {module!r} has no instruction {instruction!r}")
        out["instruction"] = {"name": instruction, "line": info["line"] + 1, "text": all_lines[info["line"]].strip()}
        first = max(0, info["line"] - n // 2)
    out.update(first_line=first + 1, lines=all_lines[first:first + n], truncated=first + n < len(all_lines) or first > 0)
    return out


def get_hlo_neighborhood(ws, run_name: str, module: str, instruction: str, host: str | None = None,
                         hops: int | None = None) -> dict:
    """One instruction and what is around it: its HLO line, its operands and users
    ``hops`` edges out (default 1, at most 4), the instruction that reads its buffer last,
    how often each ran in the trace (with the first slice's time and a trace-viewer link),
    and its source line (``found``: the file is under a source root, get_source reads it)."""
    run = ws.run(run_name)
    d = ws.hlo_instruction(run, module, host, instruction, hops)
    trace = d["trace"]

    def ran(found):
        if not found:
            return None
        first = found["slices"][0] if found["slices"] else None
        return {"count": found["count"], "count_is_lower_bound": found.get("countIsLowerBound", False),
                "first": None if first is None else {
            "start_ms": first["start_ms"], "dur_ms": first["dur_ms"], "track": first["track"], "link": first["link"]}}

    nodes = [{k: n[k] for k in ("name", "direction", "distance", "opcode", "shape", "text", "opName")}
             for n in d["neighborhood"]["nodes"]]
    named = d["sourceNamed"]
    return {
        "run": run.name, "module": module, "instruction": nodes[0], "hops": d["neighborhood"]["hops"],
        "operands": [n for n in nodes if n["direction"] == "operand"],
        "users": [n for n in nodes if n["direction"] == "user"],
        "truncated": d["neighborhood"]["truncated"], "last_use": d["lastUse"],
        "trace": None if trace is None else {"host": trace["host"], "defining": ran(trace["defining"]),
                                             "last_use": ran(trace["lastUse"])},
        "source": None if named is None else {**named, "found": d["source"] is not None,
                                              "path": d["source"]["path"] if d["source"] else None},
    }


def get_source(ws, run_name: str, file: str, line: int | None = None, context: int | None = None) -> dict:
    """A few lines of a source file a profile names (``context`` lines either side of
    ``line``, default 5, at most 50), read only when it is found under the log directory
    or a source root (``profscope serve|mcp --source-root``): an error otherwise."""
    ws.run(run_name)
    return ws.source_lines(file, line, context)
