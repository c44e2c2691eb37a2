"""XProf's device op metrics of a GPU XSpace: one row per HLO op that ran on the device
planes, with its occurrences and device time, the table that XProf's ``hlo_stats`` and
``op_profile`` tools are built from (``OpStats.device_op_metrics_db``).

This follows XProf 2.24's ``ConvertDeviceTraceXPlaneToOpMetricsDb``
(xprof/convert/xplane_to_op_metrics_db.cc) and the combining of the per-device databases
in ``ConvertXSpaceToOpStats`` (xplane_to_op_stats.cc), for GPU device planes
(``/device:GPU:N``, ROCm included):

- Every event of every line of a device plane that is not a derived line (tsl
  ``IsDerivedThreadId``: XProf adds its own XLA Ops / Modules lines before this pass and
  skips them here) counts towards the plane's span: the first event's start to the last
  event's end. That span is the plane's ``total_time_ps``; the time no op took is XProf's
  ``IDLE`` op. The databases of all device planes are summed, so a share of the device
  time is over every device's span.
- An event with an ``hlo_op`` stat (on the event or its metadata; ``::``-separated, tsl
  ``kAnnotationDelimiter``, the last one is the op) whose ``program_id`` names a module of
  the ``/host:metadata`` plane holding an instruction of that name is one occurrence of
  that op, keyed by (program_id, op name); its duration is the op's time and self time
  (a GPU kernel has no children). Consecutive events of one op and ``group_id`` on a line
  are one ``HLOTracker`` run, which enters its metadata once; events of ops the module does
  not know are dropped, as XProf drops them.
- An event with a ``tf_op`` stat and no ``hlo_op`` (TF ops run without XLA) is entered
  under program 0 as ``<tf op name>/<event name>``, category its TF op type.

The op's category is XLA's ``HloInstruction::ToCategory()`` of the instruction in the
module's HloProto (:func:`instruction_category`), its framework op ``name:type`` from the
instruction's OpMetadata (tsl ``TfOpFullname``).

TPU TensorCore planes (``/device:TPU:N``) take XProf's other path,
``ConvertTensorCoreDeviceTraceXPlaneToOpMetricsDb``: the ``XLA Ops`` line's events, each
an occurrence (``max(1, num_occurrences)``) of the op its metadata names by its
``program_id`` and ``symbol_id`` stats (symbol 0, the root, and events without both are
left out). Their span is the device's (``device_offset_ps`` / ``device_duration_ps``
stats when present: tsl ``GetDeviceEventTimespan``); an op nested in another (an
``AncestorStack`` on the line) takes its time out of its direct parent's self time. The
op's name is its metadata's display name (the full HLO text, its name, is the long
name), its category the ``hlo_category`` stat, its framework op ``tf_op``, its source
``source`` (``file:line``) and ``source_stack``. A plane's device time is from its first
to its last op or step (``Steps`` line). SparseCore planes (whose ops XProf hangs under
the TensorCore op that offloads to them) are not read: :func:`read_op_metrics` lists them
in ``unsupported_planes``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import IO

from profscope.errors import BadInput
from profscope.formats import hlo_proto, xplane
from profscope.formats.xplane_derived import is_derived_thread_id, parse_tf_op
from profscope.model.protos import hlo_pb2

__all__ = ["OpMetric", "OpMetricsDb", "instruction_category", "read_op_metrics"]

GPU_PLANE_PREFIX = "/device:GPU:"
TPU_PLANE_PREFIX = "/device:TPU:"
ANNOTATION_DELIMITER = "::"  # tsl kAnnotationDelimiter, between the ops of an hlo_op stat

# XLA ``HloInstruction::IsElementwiseImpl``: the opcodes elementwise on every operand
# (xla/hlo/ir/hlo_instruction.cc); ToCategory calls them "non-fusion elementwise".
_ELEMENTWISE = frozenset({
    # unary
    "abs", "round-nearest-afz", "round-nearest-even", "ceil", "clz", "convert", "bitcast-convert", "copy", "cos",
    "erf", "exp", "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one", "not", "negate",
    "popcnt", "real", "reduce-precision", "rsqrt", "logistic", "sign", "sin", "sqrt", "cbrt", "tan", "tanh",
    # binary
    "add", "atan2", "compare", "complex", "divide", "maximum", "minimum", "multiply", "power", "remainder",
    "subtract", "and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "stochastic-convert",
    # ternary
    "select", "clamp",
    # HloConstantInstruction::IsElementwiseImpl is true: XProf files a fused constant as
    # "non-fusion elementwise"
    "constant",
})
# XLA ``HloFusionInstruction::ToCategory`` by ``FusionKind`` (the proto's ``fusion_kind``).
_FUSION_CATEGORY = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion",
                    "kCustom": "custom fusion"}


def instruction_category(instr: hlo_pb2.HloInstructionProto) -> str:
    """XLA's ``HloInstruction::ToCategory()``: data formatting for the ops that only move
    bytes, the fusion's kind for a fusion, "non-fusion elementwise", else the opcode."""
    op = instr.opcode
    if op in ("transpose", "copy", "reshape", "dynamic-reshape"):
        return "data formatting"
    if op == "fusion":
        return _FUSION_CATEGORY.get(instr.fusion_kind, "fusion")
    if op in _ELEMENTWISE:
        return "non-fusion elementwise"
    return op


@dataclass(slots=True)
class _Instruction:
    category: str
    tf_op: str  # tsl TfOpFullname(op_type, op_name): "name:type"
    expression: str
    deduplicated_name: str = ""
    source_file: str = ""
    source_line: int = -1
    stack_frame: str = ""
    opcode: str = ""
    op_full_name: str = ""  # tsl TraceMeOp(op_name, op_type): "name:type", ":" for neither
    fused: list[str] = field(default_factory=list)  # a fusion's fused instructions, in order


@dataclass(slots=True)
class OpMetric:
    """One op's row of XProf's ``OpMetricsDb`` (op_metrics.proto field names)."""

    hlo_module_id: int
    name: str
    category: str
    provenance: str  # the framework op, "name:type"
    long_name: str  # the op's HLO text (profscope's short form, see instruction_expression)
    deduplicated_name: str = ""  # OpMetadata.deduplicated_name: the op it repeats
    source_file: str = ""
    source_line: int = -1
    stack_frame: str = ""  # "file:line:column\n" per frame, innermost first
    core_type: str = ""  # hlo_stats' "TPU core type": TensorCore on a TPU, else empty
    occurrences: int = 0
    time_ps: int = 0
    self_time_ps: int = 0
    normalized_time_ps: int = 0  # the time at nominal clock (TPU DVFS); 0 on GPU, as XProf
    # XLA's cost analysis of one occurrence, as a TPU's op metadata carries it (``flops``,
    # ``bytes_accessed`` stats); 0 where the profile has none (GPU: XProf runs
    # HloCostAnalysis itself, profscope does not). The ops table's roofline reads them.
    flops: int = 0
    bytes_accessed: int = 0
    children: list[OpMetric] = field(default_factory=list)  # a TPU fusion's fused instructions


@dataclass(slots=True)
class OpMetricsDb:
    metrics: dict[tuple[int, str], OpMetric] = field(default_factory=dict)
    total_time_ps: int = 0  # the sum over device planes of each one's span
    total_op_time_ps: int = 0  # the sum of every op's self time: total minus IDLE
    normalized_total_op_time_ps: float = 0.0  # XEventsOpMetricsDbBuilder::Finalize
    device_planes: list[str] = field(default_factory=list)
    unsupported_planes: list[str] = field(default_factory=list)
    program_names: dict[int, str] = field(default_factory=dict)  # HloModuleProto.name by program id
    device_type: str = "CPU_ONLY"  # XProf's HardwareType name: GPU, TPU, or no device plane read

    @property
    def idle_time_ps(self) -> int:
        return max(self.total_time_ps - self.total_op_time_ps, 0)

    def enter(self, program_id: int, name: str, info: _Instruction | None, occurrences: int, time_ps: int,
              category: str = "", provenance: str = "") -> None:
        """``DeviceOpMetricsDbBuilder::EnterOp``: the metadata from the first entry."""
        m = self.metrics.get((program_id, name))
        if m is None:
            m = self.metrics[(program_id, name)] = OpMetric(
                program_id, name, info.category if info else (category or "unknown"),
                info.tf_op if info else provenance, info.expression if info else "")
            if info is not None:
                m.deduplicated_name, m.source_file = info.deduplicated_name, info.source_file
                m.source_line, m.stack_frame = info.source_line, info.stack_frame
        m.occurrences += occurrences
        m.time_ps += time_ps
        m.self_time_ps += time_ps
        self.total_op_time_ps += time_ps

    def sorted(self) -> list[OpMetric]:
        """XProf's ``SortedOpMetricsDb``: self time descending, then name ascending."""
        return sorted(self.metrics.values(), key=lambda m: (-m.self_time_ps, m.name))

    def to_json(self) -> dict:
        """Plain data for the cache (app/op_stats.py keeps one per file): the metrics as a
        list in their order of entry, which op_profile's ties keep (XProf's partial_sort)."""
        return {"metrics": [asdict(m) for m in self.metrics.values()], "total_time_ps": self.total_time_ps,
                "total_op_time_ps": self.total_op_time_ps,
                "normalized_total_op_time_ps": self.normalized_total_op_time_ps,
                "device_planes": self.device_planes, "unsupported_planes": self.unsupported_planes,
                "program_names": [[k, v] for k, v in self.program_names.items()],  # int keys
                "device_type": self.device_type}

    @classmethod
    def from_json(cls, data: dict) -> OpMetricsDb:
        metrics = [_metric_from_json(m) for m in data["metrics"]]
        return cls({(m.hlo_module_id, m.name): m for m in metrics}, data["total_time_ps"],
                   data["total_op_time_ps"], data["normalized_total_op_time_ps"], data["device_planes"],
                   data["unsupported_planes"], {k: v for k, v in data["program_names"]}, data["device_type"])


def _metric_from_json(data: dict) -> OpMetric:
    return OpMetric(**{**data, "children": [_metric_from_json(c) for c in data["children"]]})


def instruction_expression(instr: hlo_pb2.HloInstructionProto, names: dict[int, str]) -> str:
    """A short HLO text of the instruction, ``%name = opcode(%operand, ...)``. XProf prints
    the full instruction (shapes, layouts, attributes) through XLA's HloPrinter, which
    profscope does not reproduce (docs/xprof_compat.md); the op name before `` = `` is
    the same, and that is what XProf's ``hlo_op_name`` column reads."""
    operands = ", ".join(f"%{names.get(i, '?')}" for i in instr.operand_ids)
    return f"%{instr.name} = {instr.opcode}({operands})"


def _tf_op_fullname(meta: hlo_pb2.OpMetadata) -> str:
    # tsl TfOpFullname(type, name) is "name:type"; XProf leaves the column empty for an op
    # with no OpMetadata at all (a compiler-made copy).
    if not meta.op_name and not meta.op_type:
        return ""
    return f"{meta.op_name}:{meta.op_type}"


def _stack(index: hlo_pb2.StackFrameIndexProto, frame_id: int) -> str:
    """XProf's GetOpLocationStack: ``file:line:column`` per frame from the op's frame out
    through its parents (StackFrameIndexProto ids are 1-based, 0 ends the chain)."""
    lines = []
    seen = set()
    while 0 < frame_id <= len(index.stack_frames) and frame_id not in seen:
        seen.add(frame_id)  # a corrupt index could loop
        frame = index.stack_frames[frame_id - 1]
        if not 0 < frame.file_location_id <= len(index.file_locations):
            break
        loc = index.file_locations[frame.file_location_id - 1]
        name = index.file_names[loc.file_name_id - 1] if 0 < loc.file_name_id <= len(index.file_names) else ""
        lines.append(f"{name}:{loc.line}:{loc.column}\n")
        frame_id = frame.parent_frame_id
    return "".join(lines)


def _source(meta: hlo_pb2.OpMetadata, index: hlo_pb2.StackFrameIndexProto) -> tuple[str, int, str]:
    """XProf's GetSourceInfo: the metadata's file and line with the stack; without a file,
    the first frame's ``file:line`` (ParseOpSourceInfoFromStackFrame)."""
    stack = _stack(index, meta.stack_frame_id) if meta.stack_frame_id else ""
    if meta.source_file:
        return meta.source_file, meta.source_line, stack
    if stack:
        parts = stack.split("\n", 1)[0].split(":")
        if len(parts) >= 2:
            return parts[0], int(parts[1]) if parts[1].lstrip("-").isdigit() else -1, stack
    return "", -1, ""  # tsl OpSourceInfo: source_line -1 when unknown


def _module_instructions(proto: hlo_pb2.HloProto) -> dict[str, _Instruction]:
    out: dict[str, _Instruction] = {}
    index = proto.hlo_module.stack_frame_index
    computations = {c.id: c for c in proto.hlo_module.computations}
    for comp in proto.hlo_module.computations:
        names = {i.id: i.name for i in comp.instructions}
        for instr in comp.instructions:
            # HloModuleWrapper: try_emplace, the first computation holding a name wins
            if instr.name in out:
                continue
            info = out[instr.name] = _Instruction(
                instruction_category(instr), _tf_op_fullname(instr.metadata), instruction_expression(instr, names),
                instr.metadata.deduplicated_name, *_source(instr.metadata, index), opcode=instr.opcode,
                op_full_name=f"{instr.metadata.op_name}:{instr.metadata.op_type}")
            if instr.opcode == "fusion" and instr.called_computation_ids:
                fused = computations.get(instr.called_computation_ids[0])
                info.fused = [i.name for i in fused.instructions] if fused is not None else []
    return out


def fused_children(instructions: dict[str, _Instruction], name: str, depth: int = 0) -> list[OpMetric]:
    """XProf's AddFusionChildrenToOpMetricsFromHloInstruction: one child per fused
    instruction of a fusion but parameters and tuples, nested fusions in turn, each with
    EnterOpMetadata's details (one occurrence, no time, no program id or source)."""
    info = instructions.get(name)
    if info is None or depth > 64:  # a corrupt module could nest fusions in a cycle
        return []
    out = []
    for child_name in info.fused:
        child = instructions.get(child_name)
        if child is None or child.opcode in ("parameter", "tuple"):
            continue
        m = OpMetric(0, child_name, child.category, child.op_full_name, child.expression, child.deduplicated_name,
                     source_line=0, occurrences=1)
        m.children = fused_children(instructions, child_name, depth + 1)
        out.append(m)
    return out


def _modules(raw: IO[bytes], index: xplane.XSpaceIndex, path: str,
             names: dict[int, str]) -> dict[int, dict[str, _Instruction]]:
    """The instructions of each program of the ``/host:metadata`` plane, by program id;
    ``names`` gets each program's module name."""
    ref = index.plane(xplane.METADATA_PLANE)
    if ref is None:
        return {}
    raw.seek(0)
    plane = xplane.read_plane(raw, ref, path)
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    out: dict[int, dict[str, _Instruction]] = {}
    # XProf's ParseHloProtosFromXSpace: a module's program id is its event metadata's id
    # (the key of XPlane.event_metadata), the metadata names it "jit_f(<id>)"; the key is
    # an int64 and the program id a uint64 (TPU ids above 2^63 are stored negative)
    for key, meta in plane.event_metadata.items():
        pid = key & 0xFFFF_FFFF_FFFF_FFFF
        proto_stat = next((s for s in meta.stats if stat_names.get(s.metadata_id) == xplane.HLO_PROTO_STAT), None)
        if proto_stat is None:
            continue
        # XProf's AddHloProto logs a module it cannot convert and goes on without it
        try:
            proto = hlo_proto.parse(proto_stat.bytes_value, f"{path} (module {meta.name})")
        except BadInput:
            continue
        if pid not in out:
            out[pid] = _module_instructions(proto)
            names[pid] = proto.hlo_module.name
    return out


def _event_stats(stats, names: dict[int, str]) -> dict[str, object]:
    return {names.get(s.metadata_id, ""): xplane.stat_value(s, names) for s in stats}


def _read_plane(plane, modules: dict[int, dict[str, _Instruction]], db: OpMetricsDb) -> None:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    meta_stats = {k: _event_stats(m.stats, names) for k, m in plane.event_metadata.items()}
    meta_names = {k: m.name for k, m in plane.event_metadata.items()}
    first, last = None, 0
    for line in plane.lines:
        if is_derived_thread_id(line.id):
            continue
        # HLOTracker: the op being summed, (program, name, group, instruction, events, ps)
        cur: list | None = None
        for ev in line.events:
            begin = ev.offset_ps
            first = begin if first is None else min(first, begin)
            last = max(last, begin + ev.duration_ps)
            # XEventVisitor::ForEachStat: the metadata's stats, then the event's own
            stats = {**meta_stats.get(ev.metadata_id, {}), **_event_stats(ev.stats, names)}
            hlo_op = stats.get("hlo_op")
            if isinstance(hlo_op, bytes):
                hlo_op = hlo_op.decode("utf-8", "replace")
            group = stats.get("group_id")
            if hlo_op:
                op = hlo_op.split(ANNOTATION_DELIMITER)[-1]
                pid = stats.get("program_id")
                info = modules.get(pid, {}).get(op) if isinstance(pid, int) else None
                if info is None:
                    continue
                if cur is not None and (op != cur[1] or (group if group is not None else 0) != cur[2]):
                    db.enter(cur[0], cur[1], cur[3], cur[4], cur[5])
                    cur = None
                if cur is None:
                    cur = [pid, op, group if group is not None else 0, info, 0, 0]
                cur[4] += 1
                cur[5] += ev.duration_ps
                continue
            tf_op = stats.get("tf_op")
            if isinstance(tf_op, bytes):
                tf_op = tf_op.decode("utf-8", "replace")
            if tf_op:
                if cur is not None:
                    db.enter(cur[0], cur[1], cur[3], cur[4], cur[5])
                    cur = None
                _category, name, typ = parse_tf_op(tf_op)
                db.enter(0, f"{name}/{meta_names.get(ev.metadata_id, '')}", None, 1, ev.duration_ps,
                         category=typ, provenance=tf_op)
        if cur is not None:
            db.enter(cur[0], cur[1], cur[3], cur[4], cur[5])
    db.total_time_ps += (last - first) if (first is not None and last) else 0


TPU_OP_LINE = "XLA Ops"  # tsl kXlaOpLineName
TPU_STEP_LINE = "Steps"  # tsl kStepLineName
ROOT_SYMBOL_ID = 0  # XProf kRootSymbolId: the program itself, not an op


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ("" if value is None else str(value))


def _source_top_line(text: str) -> tuple[str, int]:
    """XProf's PopulateSourceInfo of the ``source`` stat: ``file:line``; unreadable, no file."""
    head, _, tail = text.rpartition(":")
    if head and tail.strip().lstrip("-").isdigit():
        return head, int(tail)
    return "", 0


def _tpu_op(meta, stats: dict) -> OpMetric:
    """SetOpMetadataFromHloEventMetadata: the op's details from its event metadata."""
    name, long_name = (meta.display_name, meta.name) if meta.display_name else (meta.name, "")
    file, line = _source_top_line(_text(stats.get("source"))) if "source" in stats else ("", 0)
    cost = {k: stats[k] for k in ("flops", "bytes_accessed") if isinstance(stats.get(k), int) and stats[k] > 0}
    return OpMetric(stats.get("program_id", 0), name, _text(stats.get("hlo_category")), _text(stats.get("tf_op")),
                    long_name, _text(stats.get("deduplicated_name")), file, line, _text(stats.get("source_stack")),
                    **cost)


def device_span(ev, stats: dict, line_ps: int = 0) -> tuple[int, int]:
    """tsl GetDeviceEventTimespan: the device's own clock when the event carries it (a
    stat of another type, as a hostile file may hold, is not a time: the event's own
    span is used, its offset from ``line_ps``, the line's start)."""
    begin, duration = stats.get("device_offset_ps"), stats.get("device_duration_ps")
    begin = begin if isinstance(begin, int) else line_ps + ev.offset_ps
    duration = duration if isinstance(duration, int) else ev.duration_ps
    return begin, begin + duration


def _read_tpu_plane(plane, db: OpMetricsDb) -> None:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    meta_stats = {k: _event_stats(m.stats, names) for k, m in plane.event_metadata.items()}
    first, last = None, 0

    def emit(entry) -> None:  # the AncestorStack's pop: one occurrence of the op
        begin, end, children, ev = entry
        stats = meta_stats.get(ev.metadata_id, {})
        pid, sid = stats.get("program_id"), stats.get("symbol_id")
        if not isinstance(pid, int) or not isinstance(sid, int) or sid == ROOT_SYMBOL_ID:
            return
        key = (pid, ("symbol", sid))  # XEventsOpMetricsDbBuilder keys by program and symbol
        m = db.metrics.get(key)
        if m is None:
            m = db.metrics[key] = _tpu_op(plane.event_metadata[ev.metadata_id], stats)
            m.core_type = "TensorCore"  # OpMetrics_TpuCoreType_TENSOR_CORE
        m.occurrences += max(1, ev.num_occurrences)
        m.time_ps += end - begin
        m.self_time_ps += end - begin - children
        # the time at nominal clock: time x the event's time_scale_multiplier, 1 without it
        factor = _event_stats(ev.stats, names).get("time_scale_multiplier", stats.get("time_scale_multiplier", 1.0))
        m.normalized_time_ps += int((end - begin) * (factor if isinstance(factor, (int, float)) else 1.0))
        db.total_op_time_ps += end - begin - children

    for line in plane.lines:
        if line.name not in (TPU_OP_LINE, TPU_STEP_LINE):
            continue
        stack: list[list] = []  # [begin, end, children's time, event]
        for ev in line.events:
            begin, end = device_span(ev, _event_stats(ev.stats, names))
            first = begin if first is None else min(first, begin)
            last = max(last, end)
            if line.name != TPU_OP_LINE:
                continue
            while stack and not (stack[-1][0] <= begin and end <= stack[-1][1]):
                emit(stack.pop())
            if stack:
                stack[-1][2] += end - begin
            stack.append([begin, end, 0, ev])
        while stack:
            emit(stack.pop())
    db.total_time_ps += (last - first) if first is not None else 0


def read_op_metrics(raw: IO[bytes], path: str) -> OpMetricsDb:
    """The device op metrics of one XSpace (one host), summed over its GPU planes, or its
    TPU TensorCore planes (XProf reads one kind: GPU when it finds no TPU plane)."""
    index = xplane.scan(raw, path)
    db = OpMetricsDb()
    tpus = [r for r in index.planes if r.name.startswith(TPU_PLANE_PREFIX)]
    cores = [r for r in tpus if "SparseCore" not in r.name]
    db.unsupported_planes = [r.name for r in tpus if r not in cores]
    gpus = [] if tpus else [r for r in index.planes if r.name.startswith(GPU_PLANE_PREFIX)]
    if not gpus and not cores:
        return db
    modules = _modules(raw, index, path, db.program_names)
    for ref in gpus or cores:
        raw.seek(0)
        plane = xplane.read_plane(raw, ref, path)
        if gpus:
            _read_plane(plane, modules, db)
        else:
            _read_tpu_plane(plane, db)
        db.device_planes.append(ref.name)
    db.device_type = "TPU" if cores else "GPU"
    for m in db.metrics.values():
        db.normalized_total_op_time_ps += m.self_time_ps * (m.normalized_time_ps / m.time_ps if m.time_ps else 0.0)
        if cores:  # UpdateOpMetricsDbFromHloModuleMap, on the TPU path only
            m.children = fused_children(modules.get(m.hlo_module_id, {}), m.name)
    return db
