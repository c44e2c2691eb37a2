"""An HLO module as text, and the graph around one instruction, from the ``HloModuleProto``
the memory viewer already reads (a profile's embedded module or an XLA dump's ``*.hlo.pb``).

The text follows XLA's ``HloModule::ToString`` with its default print options
(xla/hlo/ir/hlo_instruction.cc, ``HloInstruction::PrintWithCanonicalNameMap``): one line per
instruction, ``[ROOT ]%name = shape opcode(%operand, ...), attribute=..., metadata={...}``,
the computations in the proto's order (callees before their callers; XLA's own dump orders
them by a walk from the entry's root, so the order may differ, never the lines) and each
scheduled computation's instructions in its schedule's order. What XLA prints before the
first ``,`` of a line (name, shape with layout, opcode, operands, and a constant's literal)
is the same as XLA's own ``--xla_dump_hlo_as_text`` (tests/test_hlo_text.py compares every
instruction of a jax dump); the attributes are the ones our proto subset declares
(protos/hlo.proto), so a few of XLA's (windows, convolution dimensions, sharding) are left
out.

:func:`module_text` builds a plain payload (lines, and per instruction its line, operands,
users and source); :func:`neighborhood` and :func:`instruction_view` answer from that payload,
so the app caches the payload once per module and every later question is a dict lookup.
"""

from __future__ import annotations

import math
import struct
from collections import deque

from profscope.model.protos import hlo_pb2
from profscope.tools import memory_viewer

#: The most operand/user hops :func:`neighborhood` walks (each hop can fan out).
MAX_HOPS = 4
#: The most instructions one neighbourhood answer lists.
MAX_NODES = 200
#: XLA's HloPrintOptions::print_large_constants is false by default: a constant array of
#: more elements prints as ``{...}`` (HloConstantInstruction::PrintOperandsWithCanonicalNameMap).
_LARGE_CONSTANT = 10

_TUPLE = hlo_pb2.TUPLE
_NAMES = {v.number: v.name.lower() for v in hlo_pb2.PrimitiveType.DESCRIPTOR.values}
# The attribute that names each opcode's called computations (HloInstruction's
# PrintExtraAttributes: "calls=" for fusions and async ops, "to_apply=" for the reducers).
_CALLS_ATTR = {"fusion": "calls", "async-start": "calls", "call": "to_apply", "reduce": "to_apply",
               "reduce-window": "to_apply", "sort": "to_apply", "map": "to_apply", "scatter": "to_apply",
               "all-reduce": "to_apply", "all-reduce-start": "to_apply", "reduce-scatter": "to_apply",
               "select-and-scatter": None, "while": None, "conditional": None, "custom-call": "called_computations"}


def shape_text(shape, layout: bool = True) -> str:
    """ShapeUtil::HumanStringWithLayout (``layout``) or ShapeUtil::HumanString."""
    if layout:
        return memory_viewer._shape_string(shape)
    if shape.element_type == _TUPLE:
        # ShapeUtil::HumanString marks every fifth element, as HumanStringWithLayout does
        return "(" + ", ".join(("/*index=%d*/" % i if i and i % 5 == 0 else "") + shape_text(s, False)
                               for i, s in enumerate(shape.tuple_shapes)) + ")"
    name = _NAMES.get(shape.element_type, "invalid")
    return f"{name}[{','.join(str(d) for d in shape.dimensions)}]"


def _f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _bf16(v: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def _f16(v: float) -> float:
    try:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    except OverflowError:
        return math.inf


# (digits10, max_digits10, the value rounded to the type) per float type
_F32, _F64, _F16, _BF16 = (6, 9, _f32), (15, 17, float), (3, 5, _f16), (2, 4, _bf16)


def _float(v: float, kind=_F32) -> str:
    """xla::RoundTripFpToString: ``%.{digits10}g`` when it reads back as the same value of
    the type, else ``%.{max_digits10}g``: ``0.9``, ``2``, ``1.52587891e-05``."""
    if math.isnan(v):
        return "-nan" if math.copysign(1, v) < 0 else "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    short, full, rounded = kind
    text = f"{v:.{short}g}"
    return text if rounded(float(text)) == rounded(v) else f"{v:.{full}g}"


def _half(raw: bytes, bf16: bool) -> list[float]:
    out = []
    for i in range(0, len(raw) - 1, 2):
        (u,) = struct.unpack_from("<H", raw, i)
        out.append(struct.unpack("<f", struct.pack("<I", u << 16))[0] if bf16 else struct.unpack("<e", raw[i:i + 2])[0])
    return out


def _literal_values(lit) -> list[str] | None:
    """The elements of a LiteralProto as XLA prints them, or None for a type not declared."""
    et = lit.shape.element_type
    t = hlo_pb2
    if et == t.PRED:
        return ["true" if v else "false" for v in lit.preds]
    if et in (t.S32, t.S64, t.U32, t.U64):
        return [str(v) for v in {t.S32: lit.s32s, t.S64: lit.s64s, t.U32: lit.u32s, t.U64: lit.u64s}[et]]
    if et in (t.S8, t.U8):
        raw = lit.s8s if et == t.S8 else lit.u8s
        return [str(v) for v in (struct.unpack(f"<{len(raw)}b", raw) if et == t.S8 else raw)]
    if et in (t.S16, t.U16):
        raw = lit.s16s if et == t.S16 else lit.u16s
        return [str(v) for v in struct.unpack(f"<{len(raw) // 2}{'h' if et == t.S16 else 'H'}", raw)]
    if et == t.F32:
        return [_float(v) for v in lit.f32s]
    if et == t.F64:
        return [_float(v, _F64) for v in lit.f64s]
    if et in (t.F16, t.BF16):
        return [_float(v, _BF16 if et == t.BF16 else _F16) for v in _half(lit.bf16s if et == t.BF16 else lit.f16s, et == t.BF16)]
    return None


def _literal_text(ins) -> str:
    """A constant's operand text: its value, ``{...}`` when large or not readable here."""
    shape = ins.shape
    n = 1
    for d in shape.dimensions:
        n *= d
    if shape.element_type == _TUPLE or n > _LARGE_CONSTANT or not ins.HasField("literal"):
        return "{...}"
    values = _literal_values(ins.literal)
    if values is None or len(values) != n:
        return "{...}"
    if not len(shape.dimensions):
        return values[0]
    return _nested(values, list(shape.dimensions))


def _nested(values: list[str], dims: list[int]) -> str:
    # Literal::ToString of a small array: "{1, 2}" for rank 1, "{ { 1, 2 }, { 3, 4 } }" above
    if len(dims) == 1:
        return "{" + ", ".join(values) + "}"
    step = len(values) // dims[0] if dims[0] else 0
    inner = [_nested(values[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]
    return "{ " + ", ".join(inner) + " }"


# OpMetadataToString's order; True: a quoted string, False: a number (printed when not 0)
_METADATA_FIELDS = (("op_type", True), ("op_name", True), ("source_file", True), ("source_line", False),
                    ("source_end_line", False), ("source_column", False), ("source_end_column", False),
                    ("deduplicated_name", True), ("scheduling_name", True), ("stack_frame_id", False))


def _metadata(md) -> str:
    parts = [f'{name}="{_escape(value)}"' if quoted else f"{name}={value}"
             for name, quoted in _METADATA_FIELDS if (value := getattr(md, name))]
    return "{" + " ".join(parts) + "}" if parts else ""


_C_ESCAPES = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"', ord("'"): "\\'",
              ord("\\"): "\\\\"}


def _escape(s: str) -> str:
    """absl::CEscape, as OpMetadataToString quotes names: \\n \\r \\t \\" \\' \\\\, and every
    other byte below ' ' or from 0x7F as three octal digits (of the UTF-8 bytes)."""
    out = []
    for b in s.encode("utf-8"):
        esc = _C_ESCAPES.get(b)
        out.append(esc if esc else chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}")
    return "".join(out)


def _braced(xs) -> str:
    return "{" + ",".join(str(x) for x in xs) + "}"


def _attributes(ins, comp_names: dict[int, str], names: dict[int, str]) -> list[str]:
    """The ``, attr=value`` list after the operands, in XLA's order (the fields declared)."""
    op = ins.opcode
    out = []
    if op == "fusion" and ins.fusion_kind:
        out.append(f"kind={ins.fusion_kind}")
    if op == "get-tuple-element":
        out.append(f"index={ins.tuple_index}")
    if op == "iota":
        out.append(f"iota_dimension={ins.dimensions[0] if len(ins.dimensions) else 0}")
    elif len(ins.dimensions) or op in ("broadcast", "reduce", "transpose", "reverse"):
        out.append(f"dimensions={_braced(ins.dimensions)}")
    if len(ins.slice_dimensions):
        out.append("slice={" + ", ".join(
            f"[{s.start}:{s.limit}" + (f":{s.stride}" if s.stride != 1 else "") + "]" for s in ins.slice_dimensions) + "}")
    if ins.HasField("padding_config"):
        out.append("padding=" + "x".join(
            f"{d.edge_padding_low}_{d.edge_padding_high}" + (f"_{d.interior_padding}" if d.interior_padding else "")
            for d in ins.padding_config.dimensions))
    if ins.comparison_direction:
        out.append(f"direction={ins.comparison_direction}")
    if ins.HasField("dot_dimension_numbers"):
        dn = ins.dot_dimension_numbers
        for key, dims in (("lhs_batch_dims", dn.lhs_batch_dimensions), ("lhs_contracting_dims", dn.lhs_contracting_dimensions),
                          ("rhs_batch_dims", dn.rhs_batch_dimensions), ("rhs_contracting_dims", dn.rhs_contracting_dimensions)):
            if len(dims):
                out.append(f"{key}={_braced(dims)}")
    if ins.is_stable:
        out.append("is_stable=true")
    out.extend(_called(ins, comp_names))
    if ins.custom_call_target:
        out.append(f'custom_call_target="{_escape(ins.custom_call_target)}"')
    if len(ins.control_predecessor_ids):
        out.append("control-predecessors={" + ", ".join(
            "%" + names.get(i, f"<id {i}>") for i in ins.control_predecessor_ids) + "}")
    md = _metadata(ins.metadata)
    if md:
        out.append(f"metadata={md}")
    if ins.backend_config:
        try:
            text = ins.backend_config.decode("utf-8")
        except UnicodeDecodeError:
            text = ""  # a serialized proto (some backends): nothing readable to show
        if text and text.isprintable():
            out.append(f"backend_config={text}")
    return out


def _called(ins, comp_names: dict[int, str]) -> list[str]:
    names = ["%" + comp_names.get(c, f"computation.{c}") for c in ins.called_computation_ids]
    if not names:
        return []
    op = ins.opcode
    if op == "while" and len(names) == 2:
        # HloWhileInstruction's called computations are {body, condition}
        return [f"condition={names[1]}", f"body={names[0]}"]
    if op == "select-and-scatter" and len(names) == 2:
        return [f"select={names[0]}", f"scatter={names[1]}"]
    if op == "conditional":
        return ["branch_computations={" + ", ".join(names) + "}"]
    attr = _CALLS_ATTR.get(op, "calls")
    if attr == "called_computations" or len(names) > 1:
        return [f"{attr}={{" + ", ".join(names) + "}"]
    return [f"{attr}={names[0]}"]


def _operand_list(operands: list[str]) -> str:
    # HloInstruction::PrintOperandsWithCanonicalNameMap marks every fifth operand
    return ", ".join(("/*index=%d*/" % i if i and i % 5 == 0 else "") + "%" + o for i, o in enumerate(operands))


def _order(comp, schedule: dict[int, list[int]]) -> list:
    """A computation's instructions: in its schedule's order where the module is
    scheduled (XLA prints a scheduled computation so), else the proto's (post order)."""
    seq = schedule.get(comp.id)
    if seq and len(seq) == len(comp.instructions):
        by_id = {i.id: i for i in comp.instructions}
        if all(i in by_id for i in seq):
            return [by_id[i] for i in seq]
    return list(comp.instructions)


def _source(ins, sfi) -> dict | None:
    """The file:line an instruction's metadata names: OpMetadata.source_file/line, else the
    innermost frame of its stack_frame_id in the module's StackFrameIndexProto (1-based
    ids, hlo.proto)."""
    md = ins.metadata
    if md.source_file:
        return {"file": md.source_file, "line": md.source_line or None}
    fid = md.stack_frame_id
    if 0 < fid <= len(sfi.stack_frames):
        loc_id = sfi.stack_frames[fid - 1].file_location_id
        if 0 < loc_id <= len(sfi.file_locations):
            loc = sfi.file_locations[loc_id - 1]
            if 0 < loc.file_name_id <= len(sfi.file_names):
                return {"file": sfi.file_names[loc.file_name_id - 1], "line": loc.line or None}
    return None


def module_text(module: hlo_pb2.HloModuleProto) -> dict:
    """The whole module as text lines, and per instruction: its ``line`` (0-based index
    into ``lines``), ``computation``, ``opcode``, ``shape``, ``operands``, ``users`` (names,
    within its computation), ``opName`` and ``source`` (``{file, line}`` or None)."""
    comp_names = {c.id: c.name for c in module.computations}
    schedule = {k: list(v.instruction_ids) for k, v in module.schedule.sequences.items()}
    entry_id = module.entry_computation_id
    lines: list[str] = []
    instructions: dict[str, dict] = {}
    computations = []
    entry = next((c for c in module.computations if c.id == entry_id), None)
    header = f"HloModule {module.name}"
    if schedule:
        header += ", is_scheduled=true"
    if entry is not None and entry.HasField("program_shape"):
        ps = entry.program_shape
        header += (", entry_computation_layout={(" + ", ".join(shape_text(p) for p in ps.parameters)
                   + ")->" + shape_text(ps.result) + "}")
    lines.append(header)
    for comp in module.computations:
        lines.append("")
        by_id = {i.id: i for i in comp.instructions}
        ids = {i: x.name for i, x in by_id.items()}
        ps = comp.program_shape
        params = ", ".join(f"{n}: {shape_text(s, False)}" for n, s in zip(ps.parameter_names, ps.parameters))
        head = f"{'ENTRY ' if comp.id == entry_id else ''}%{comp.name} ({params}) -> {shape_text(ps.result, False)} {{"
        first = len(lines)
        lines.append(head)
        users: dict[str, list[str]] = {}
        for ins in _order(comp, schedule):
            operands = [by_id[o].name if o in by_id else f"<id {o}>" for o in ins.operand_ids]
            for o in dict.fromkeys(operands):
                users.setdefault(o, []).append(ins.name)
            args = _literal_text(ins) if ins.opcode == "constant" else (
                str(ins.parameter_number) if ins.opcode == "parameter" else _operand_list(operands))
            text = f"{'ROOT ' if ins.id == comp.root_id else ''}%{ins.name} = {shape_text(ins.shape)} {ins.opcode}({args})"
            attrs = _attributes(ins, comp_names, ids)
            if attrs:
                text += ", " + ", ".join(attrs)
            instructions[ins.name] = {
                "line": len(lines), "computation": comp.name, "opcode": ins.opcode, "shape": shape_text(ins.shape),
                "operands": operands, "opName": ins.metadata.op_name,
                "calls": [comp_names[c] for c in ins.called_computation_ids if c in comp_names],
                "source": _source(ins, module.stack_frame_index),
            }
            lines.append("  " + text)
        for name, u in users.items():
            if name in instructions:
                instructions[name]["users"] = u
        lines.append("}")
        computations.append({"name": comp.name, "line": first, "endLine": len(lines) - 1,
                             "entry": comp.id == entry_id, "fusion": comp.is_fusion_computation,
                             "root": by_id[comp.root_id].name if comp.root_id in by_id else None})
    for info in instructions.values():
        info.setdefault("users", [])
    return {"module": module.name, "lines": lines, "computations": computations, "instructions": instructions}


def instruction_view(text: dict, name: str) -> dict | None:
    """One instruction of a :func:`module_text` payload with its line of text, or None."""
    info = text["instructions"].get(name)
    if info is None:
        return None
    return {"name": name, "text": text["lines"][info["line"]].strip(), **info}


def called_roots(text: dict, name: str) -> list[dict]:
    """The computations ``name`` calls (a fusion's fused computation, a reduce's reducer),
    each with its root instruction: where the HLO view opens it."""
    by_name = {c["name"]: c for c in text["computations"]}
    return [{"computation": c, "root": by_name[c]["root"]} for c in text["instructions"][name]["calls"]
            if c in by_name and by_name[c].get("root")]


def neighborhood(text: dict, name: str, hops: int = 1) -> dict | None:
    """The instructions within ``hops`` operand or user edges of ``name`` (breadth first,
    at most :data:`MAX_NODES`), each with its text line, distance and which way it lies
    (``operand``: feeds it, ``user``: reads it); None when the module has no ``name``."""
    ins = text["instructions"]
    if name not in ins:
        return None
    hops = max(0, min(hops, MAX_HOPS))
    nodes = [{**instruction_view(text, name), "distance": 0, "direction": "self"}]
    truncated = False
    for direction, key in (("operand", "operands"), ("user", "users")):
        seen = {name}
        queue = deque([(name, 0)])
        while queue:
            cur, d = queue.popleft()
            if d >= hops:
                continue
            for nxt in ins[cur][key]:
                if nxt in seen or nxt not in ins:
                    continue
                seen.add(nxt)
                if len(nodes) >= MAX_NODES:
                    truncated = True
                    break
                nodes.append({**instruction_view(text, nxt), "distance": d + 1, "direction": direction})
                queue.append((nxt, d + 1))
    return {"module": text["module"], "instruction": name, "hops": hops, "nodes": nodes, "truncated": truncated}
