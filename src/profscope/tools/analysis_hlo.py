"""Compiler rules of the Summary (issue 35): checks on the optimized HLO modules of a run.

``modules`` are parsed ``xla.HloProto`` messages (formats/hlo_proto.py: the one a profile
embeds per module, or an XLA dump's ``*after_optimizations.hlo.pb``), each alone or as a
``(display name, HloProto)`` pair (the memory viewer's ``<name>(<program id>)``, which the
evidence links open). The three checks are those XProf's agent CLI names
(xprof/cli/tools/, 2.24+), on the proto alone: XProf picks its candidates from the
profile's top ops by time or bytes, so it only looks at ops that ran long; here every
instruction is checked and a floor on the bytes moved (:data:`MIN_BYTES_ACCESSED`, XProf's
``detect_unfused_reshapes`` floor) keeps the ones worth knowing; where the op's share of
the step is known (``op_share``), it sets the priority instead (P0 >= 25 %, P1 >= 10 %,
P2 >= 2 %, tools/analysis_rules.py).

``layout_mismatch_copy`` (``detect_layout_mismatch_copies``): a ``copy`` whose operand and
result have the same dimensions and element type but a different ``minor_to_major`` layout
(XProf's ``has_layout_mismatch``: a missing layout is the default, dimensions major to
minor), "sandwiched" as XProf says: a producer within 5 hops upstream (a compute stage, a
constant or an entry parameter: ``find_upstream_compute_stages``) and a compute stage
within 5 hops downstream (``find_downstream_compute_stages``): the tensor is physically
reordered in memory between the stage that made it and the one that reads it. Bytes: the copy reads its operand and
writes its result.

``unfused_reshape`` (``detect_unfused_reshapes``): a standalone data-formatting kernel (a
``reshape``, ``transpose``, ``copy``, ``broadcast``, ``slice``, ``pad`` or ``convert``
outside any fusion, or a fusion of only such ops) whose result a compute op reads directly
(XProf's list: dot, convolution, custom-call, fusion, reduce, reduce-window, fft,
cholesky, triangular-solve, sort, topk, batch-norm): the formatted tensor is materialised
in memory instead of being folded into the compute op. A kernel whose copy is a layout
mismatch is reported by the rule above only.

``convert_in_reduction`` (``detect_unnecessary_convert_reduce``): a reduction (``reduce``,
``all-reduce``, ``reduce-scatter``) to f32 whose reducer is an add or a multiply, fed by a
convert from bf16/f16 to f32 and followed by a convert back to bf16/f16 (traced through
element-wise and shape ops, into and out of fusions, as XProf's ``_HloModuleTracer``).
XProf's rules matrix: in an inference module every such reduction is reported; in a
training module (a computation named grad, backward, loss, optimizer, adam, sgd or
update) only a general one (not a loss, norm or softmax, by its names and metadata), at
low priority, since those keep f32 for accuracy. Bytes: the f32 copy of the reduced
operand, twice the bytes of its bf16 original.

Each finding is the Summary's ``Finding`` dict (tools/analysis_rules.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

from profscope.errors import BadInput
from profscope.model.protos import hlo_pb2
from profscope.model.units import fmt_bytes
from profscope.tools.analysis_rules import Rule, evidence, finding, impact, priority_for_share
# The memory viewer's spelling of a shape (XLA's HumanStringWithLayout) and its byte size
# (ShapeUtil::ByteSizeOf), so a finding names shapes as the page it links to shows them.
from profscope.tools.memory_viewer import _shape_string as shape_text
from profscope.tools.memory_viewer import _unpadded_size

__all__ = ["MIN_BYTES_ACCESSED", "RULES", "hlo_findings"]

# XProf's detect_unfused_reshapes MIN_BYTES_ACCESSED: 10 MiB read + written.
MIN_BYTES_ACCESSED = 10 * 1024 * 1024
_MAX_HOPS = 5  # XProf's max_depth of the downstream search

_XPROF = "XProf agent CLI {} (xprof/cli/tools)"
RULES: tuple[Rule, ...] = (
    Rule("layout_mismatch_copy", "compiler", "P2",
         "a copy whose operand and result differ only in layout (minor_to_major), a compute stage within 5 hops "
         f"downstream, >= {MIN_BYTES_ACCESSED >> 20} MiB read + written; by share of step time where the op's time is known",
         _XPROF.format("detect_layout_mismatch_copies"), "Copy caused by a layout mismatch"),
    Rule("unfused_reshape", "compiler", "P2",
         "a standalone reshape/transpose/copy/broadcast/slice/pad/convert (outside a fusion, or a fusion of only "
         f"those) read directly by a compute op, >= {MIN_BYTES_ACCESSED >> 20} MiB read + written; by share of step "
         "time where known", _XPROF.format("detect_unfused_reshapes"), "Unfused reshape or transpose"),
    Rule("convert_in_reduction", "compiler", "P2",
         "bf16/f16 -> f32 convert -> add/multiply reduction -> bf16/f16 convert, in an inference module, or a general "
         f"(not loss/norm/softmax) reduction of a training module; the f32 operand >= {MIN_BYTES_ACCESSED >> 20} MiB",
         _XPROF.format("detect_unnecessary_convert_reduce"), "Precision conversion around a reduction"),
)
_RULE = {r.id: r for r in RULES}

_PT = hlo_pb2.PrimitiveType
_F32, _F16, _BF16 = _PT.Value("F32"), _PT.Value("F16"), _PT.Value("BF16")
_LOW = (_BF16, _F16)

# XProf's _COMPUTE_KEYWORDS (detect_layout_mismatch_copies: an opcode containing one is a
# compute stage) and the compute targets of detect_unfused_reshapes.
_COMPUTE_KEYWORDS = ("convolution", "dot", "reduce", "scatter", "gather", "fft", "triangular-solve", "cholesky", "sort",
                     "topk", "batch-norm", "all-to-all", "collective-permute", "collective-broadcast")
_COMPUTE_TARGETS = frozenset({"dot", "convolution", "custom-call", "fusion", "reduce", "reduce-window", "fft", "cholesky",
                              "triangular-solve", "sort", "topk", "batch-norm-training", "batch-norm-inference",
                              "batch-norm-grad"})
_FORMATTING = frozenset({"reshape", "transpose", "copy", "broadcast", "slice", "pad", "convert"})
_FREE = frozenset({"parameter", "bitcast", "constant", "tuple", "get-tuple-element"})
# XProf's _ALLOWED_TRACING_OPCODES: precision-neutral ops a convert is traced through.
_TRACE = frozenset({"abs", "negate", "add", "subtract", "multiply", "divide", "exponential", "log", "maximum", "minimum",
                    "select", "compare", "power", "sine", "cosine", "round", "floor", "ceil", "sign", "sqrt", "rsqrt",
                    "tanh", "reshape", "broadcast", "transpose", "slice", "concatenate", "bitcast", "dynamic-slice",
                    "dynamic-update-slice", "copy", "parameter", "get-tuple-element", "fusion", "convert", "tuple",
                    "reduce", "all-reduce", "reduce-scatter"})
_REDUCTIONS = frozenset({"reduce", "all-reduce", "reduce-scatter"})
_TRAINING_WORDS = ("grad", "backward", "loss", "optimizer", "adam", "sgd", "update")
# XProf's _KNOWN_NON_COMPUTE_CUSTOM_CALLS, the ones a JAX program on CPU/GPU/TPU emits.
_NON_COMPUTE_CALLS = ("allocatebuffer", "pin", "unpin", "movetodevice", "movetohost", "sharding", "spmdfulltoshardshape",
                      "spmdshardtofullshape", "annotate", "control_dep", "xla_ffi_python_cpu_callback", "setbound",
                      "padtostatic", "slicetodynamic")

Link = Callable[..., str]
OpShare = Callable[[str, str], "float | None"]


def _bytes(shape) -> int:
    if shape.element_type == _PT.Value("TUPLE"):
        return sum(_bytes(s) for s in shape.tuple_shapes)
    try:
        return _unpadded_size(shape)
    except BadInput:
        return 0


def _minor_to_major(shape) -> list[int]:
    """A shape's layout; a missing one is XLA's default (dimensions major to minor)."""
    if shape.HasField("layout") and len(shape.layout.minor_to_major):
        return list(shape.layout.minor_to_major)
    return list(reversed(range(len(shape.dimensions))))


class _Module:
    """One HloModuleProto, indexed: instructions by id, their users, the computation of
    each, and the fusion instruction that calls each fused computation."""

    def __init__(self, name: str, proto: Any):
        m = proto.hlo_module
        self.name = name
        self.comps = {c.id: c for c in m.computations}
        self.instr: dict[int, Any] = {}
        self.comp_of: dict[int, int] = {}
        self.users: dict[int, list[int]] = defaultdict(list)
        self.fusion_caller: dict[int, Any] = {}  # fused computation id -> the fusion instruction
        self.callers: dict[int, list] = defaultdict(list)  # computation id -> every instruction calling it
        for c in m.computations:
            for i in c.instructions:
                self.instr[i.id] = i
                self.comp_of[i.id] = c.id
                for o in i.operand_ids:
                    self.users[o].append(i.id)
                for cid in i.called_computation_ids:
                    self.callers[cid].append(i)
                if i.opcode == "fusion":
                    for cid in i.called_computation_ids:
                        self.fusion_caller[cid] = i
        self.training = any(w in c.name.lower() for c in m.computations for w in _TRAINING_WORDS)

    def fused(self, iid: int) -> bool:
        return self.comp_of.get(iid) in self.fusion_caller

    def top_level(self, iid: int):
        """The instruction the profile and the memory viewer know: itself, or the fusion
        (outermost) that holds it."""
        ins, seen = self.instr[iid], set()
        # A corrupt proto can make a fusion call the computation that holds it: stop there.
        while self.comp_of[ins.id] in self.fusion_caller and self.comp_of[ins.id] not in seen:
            seen.add(self.comp_of[ins.id])
            ins = self.fusion_caller[self.comp_of[ins.id]]
        return ins

    def fused_instructions(self, fusion) -> list:
        """Every instruction of the computations ``fusion`` calls, nested fusions' included,
        each computation once (a call cycle in a corrupt proto ends there)."""
        out, seen, todo = [], set(), list(fusion.called_computation_ids)
        while todo:
            cid = todo.pop(0)
            if cid in seen or cid not in self.comps:
                continue
            seen.add(cid)
            for i in self.comps[cid].instructions:
                out.append(i)
                if i.opcode == "fusion":
                    todo += list(i.called_computation_ids)
        return out

    def is_compute(self, ins) -> bool:
        """XProf's is_compute_stage: a compute opcode, a compute custom call, or a fusion holding one."""
        if any(k in ins.opcode for k in _COMPUTE_KEYWORDS):
            return True
        if ins.opcode == "custom-call":
            target = ins.custom_call_target.lower()
            return bool(target) and not any(target == t or target.startswith(t) for t in _NON_COMPUTE_CALLS)
        if ins.opcode == "fusion":
            return any(self.is_compute(i) for i in self.fused_instructions(ins) if i.opcode != "fusion")
        return False

    def upstream_producer(self, iid: int) -> tuple[Any, int] | None:
        """The nearest producer of ``iid``'s operand within :data:`_MAX_HOPS`: a compute stage, a
        constant or a parameter of the entry (XProf's find_upstream_compute_stages), leaving
        a called computation at a parameter for the caller's operand (a while's: its tuple)."""
        queue, seen = [(o, 1) for o in self.instr[iid].operand_ids if o in self.instr], set()
        while queue:
            cur, dist = queue.pop(0)
            if cur in seen or dist > _MAX_HOPS:
                continue
            seen.add(cur)
            ins = self.instr[cur]
            callers = self.callers.get(self.comp_of[cur], [])
            if self.is_compute(ins) or ins.opcode == "constant" or (ins.opcode == "parameter" and not callers):
                return ins, dist
            if ins.opcode == "parameter":
                for c in callers:
                    k = 0 if c.opcode == "while" else ins.parameter_number
                    if 0 <= k < len(c.operand_ids):
                        queue.append((c.operand_ids[k], dist + 1))
                continue
            queue += [(o, dist + 1) for o in ins.operand_ids if o in self.instr]
        return None

    def downstream_compute(self, iid: int) -> tuple[Any, int] | None:
        """The first compute stage reading ``iid``'s value within :data:`_MAX_HOPS`, leaving a
        fused computation at its root for the fusion's users (breadth first, as XProf)."""
        queue, seen = [(iid, 0)], {iid}
        while queue:
            cur, dist = queue.pop(0)
            if dist >= _MAX_HOPS:
                continue
            nxt = list(self.users.get(cur, ()))
            comp_id = self.comp_of[cur]
            if self.comps[comp_id].root_id == cur and comp_id in self.fusion_caller:
                nxt += self.users.get(self.fusion_caller[comp_id].id, [])
            for u in nxt:
                if u in seen:
                    continue
                seen.add(u)
                if self.is_compute(self.instr[u]):
                    return self.instr[u], dist + 1
                queue.append((u, dist + 1))
        return None


def _modules(modules: Iterable) -> list[_Module]:
    out = []
    for m in modules:
        name, proto = m if isinstance(m, tuple) else (m.hlo_module.name, m)
        out.append(_Module(name, proto))
    return sorted(out, key=lambda m: m.name)


def hlo_findings(modules: Iterable, link: Link, op_share: OpShare | None = None) -> list[dict]:
    """The compiler findings over ``modules`` (P0..P2). ``op_share(module, instruction)``:
    the share of the step's time the top-level instruction took, None where unknown."""
    out: list[dict] = []
    for mod in _modules(modules):
        unfused, taken = _unfused(mod)
        out += _emit(mod, _layout_copies(mod, taken) + unfused, link, op_share)
        out += _emit(mod, _convert_reduces(mod), link, op_share)
    return out


def _is_layout_copy(mod: _Module, ins) -> bool:
    """XProf's has_layout_mismatch on a copy: same element type and dimensions, another layout."""
    if ins.opcode != "copy" or len(ins.operand_ids) != 1 or ins.operand_ids[0] not in mod.instr:
        return False
    src, dst = mod.instr[ins.operand_ids[0]].shape, ins.shape
    return (src.element_type == dst.element_type and list(src.dimensions) == list(dst.dimensions)
            and len(dst.dimensions) >= 2 and _minor_to_major(src) != _minor_to_major(dst))


def _layout_copies(mod: _Module, taken: set[int]) -> list[dict]:
    hits = []
    for ins in mod.instr.values():
        if ins.id in taken or not _is_layout_copy(mod, ins):
            continue
        src, dst = mod.instr[ins.operand_ids[0]].shape, ins.shape
        moved = _bytes(src) + _bytes(dst)
        if moved < MIN_BYTES_ACCESSED:
            continue
        down, up = mod.downstream_compute(ins.id), mod.upstream_producer(ins.id)
        if down is None or up is None:
            continue
        top = mod.top_level(ins.id)
        where = f" inside fusion {top.name}" if top.id != ins.id else ""
        hits.append({
            "rule": "layout_mismatch_copy", "top": top, "bytes": moved,
            "title": f"Layout mismatch copy {ins.name}: {shape_text(src)} -> {shape_text(dst)}",
            "what": f"{mod.name}: copy {ins.name}{where} changes only the layout of {shape_text(src)} to "
                    f"{shape_text(dst)} (minor_to_major {_minor_to_major(src)} -> {_minor_to_major(dst)}), "
                    f"so the tensor is physically reordered, {fmt_bytes(moved)} read and written, between "
                    f"{up[0].opcode} {up[0].name} that makes it ({up[1]} hop(s) upstream) and "
                    f"{down[0].opcode} {down[0].name} that reads it ({down[1]} hop(s) downstream).",
            "rows": [("copy", f"{ins.name}{where}: {shape_text(src)} -> {shape_text(dst)}", _bytes(dst)),
                     ("producer", f"{up[0].opcode} {up[0].name}", None),
                     ("consumer", f"{down[0].opcode} {down[0].name}", None)],
            "fix": "Let XLA propagate one layout: move the transpose or dimension reordering earlier (or fold it into "
                   "the dot/conv with einsum dimension numbers), keep the producer's and consumer's dimension order "
                   "the same, and apply related updates in one jitted function so layout assignment sees them together.",
        })
    return hits


def _formatting_only(mod: _Module, ins) -> bool:
    """A fusion whose fused instructions all move or re-lay out data (no arithmetic)."""
    inner = [i for i in mod.fused_instructions(ins) if i.opcode != "fusion"]
    return bool(inner) and all(i.opcode in _FORMATTING or i.opcode in _FREE for i in inner) \
        and any(i.opcode in _FORMATTING for i in inner)


def _reshapes(mod: _Module, ops: list) -> bool:
    """Whether formatting ops change a tensor's dimensions beyond a permutation: a reshape,
    or a bitcast whose dimensions are not its operand's reordered (a bitcast with the same
    dimensions in another order is a transpose that needs no data movement)."""
    for i in ops:
        if i.opcode == "reshape":
            return True
        if i.opcode == "bitcast" and i.operand_ids and i.operand_ids[0] in mod.instr:
            if sorted(i.shape.dimensions) != sorted(mod.instr[i.operand_ids[0]].shape.dimensions):
                return True
    return False


def _unfused(mod: _Module) -> tuple[list[dict], set[int]]:
    """Standalone formatting kernels read directly by a compute op. A kernel that only
    re-lays out a tensor (a layout-changing copy, with at most a transposing bitcast or
    transpose: what XLA makes of a transpose) is left to the layout rule; one that also
    reshapes it, or pads, slices, broadcasts or converts it, is reported here, and its
    copies are not reported again. Returns the hits and the ids of the copies taken."""
    hits, taken = [], set()
    for ins in mod.instr.values():
        if mod.fused(ins.id):
            continue
        if not (ins.opcode in _FORMATTING or (ins.opcode == "fusion" and _formatting_only(mod, ins))):
            continue
        inner = [i for i in mod.fused_instructions(ins) if i.opcode != "fusion"] if ins.opcode == "fusion" else [ins]
        copies = {i.id for i in inner if _is_layout_copy(mod, i)}
        kinds = {i.opcode for i in inner if i.opcode in _FORMATTING} - {"copy", "transpose"}
        if copies and not kinds and not _reshapes(mod, inner):
            continue
        taken |= copies
        readers = [mod.instr[u] for u in mod.users.get(ins.id, ())]
        target = next((u for u in readers if u.opcode in _COMPUTE_TARGETS
                       and not (u.opcode == "fusion" and _formatting_only(mod, u))), None)
        moved = sum(_bytes(mod.instr[o].shape) for o in ins.operand_ids if o in mod.instr) + _bytes(ins.shape)
        if target is None or moved < MIN_BYTES_ACCESSED:
            continue
        ops = sorted({i.opcode for i in inner if i.opcode in _FORMATTING} | ({"reshape"} if _reshapes(mod, inner) else set()))
        src = [shape_text(mod.instr[o].shape) for o in ins.operand_ids if o in mod.instr]
        hits.append({
            "rule": "unfused_reshape", "top": ins, "bytes": moved,
            "title": f"Unfused {'/'.join(ops)} {ins.name} before {target.opcode} {target.name}",
            "what": f"{mod.name}: {ins.opcode} {ins.name} ({'/'.join(ops)}) runs as its own kernel, "
                    f"{', '.join(src)} -> {shape_text(ins.shape)}, and {target.opcode} {target.name} reads its result: "
                    f"the formatted tensor is materialised in memory ({fmt_bytes(moved)} read and written) instead of "
                    "being folded into the compute op.",
            "rows": [("formatting op", f"{ins.name}: {', '.join(src)} -> {shape_text(ins.shape)}", _bytes(ins.shape)),
                     ("consumer", f"{target.opcode} {target.name}", None)],
            "fix": "Fold the reshape/transpose into the compute op (jnp.einsum or lax.dot_general dimension numbers, "
                   "a conv's dimension_numbers) instead of materialising it, or keep the array in the order its "
                   "consumer reads.",
        })
    return hits, taken


def _upcast(mod: _Module, start: int):
    """A bf16/f16 -> f32 convert feeding ``start`` through precision-neutral ops, leaving a
    fused computation at a parameter for the fusion's operand (XProf's trace_upcast)."""
    stack, seen = [start], set()
    while stack:
        cur = stack.pop()
        if cur in seen or cur not in mod.instr:
            continue
        seen.add(cur)
        ins = mod.instr[cur]
        if ins.opcode not in _TRACE:
            continue
        if ins.opcode == "convert" and ins.shape.element_type == _F32 and ins.operand_ids \
                and mod.instr.get(ins.operand_ids[0]) is not None and mod.instr[ins.operand_ids[0]].shape.element_type in _LOW:
            return ins
        if ins.opcode == "parameter":
            caller = mod.fusion_caller.get(mod.comp_of[cur])
            if caller is not None and ins.parameter_number < len(caller.operand_ids):
                stack.append(caller.operand_ids[ins.parameter_number])
            continue
        if ins.opcode == "fusion":
            stack += [mod.comps[c].root_id for c in ins.called_computation_ids[:1] if c in mod.comps]
            continue
        stack += [o for o in reversed(ins.operand_ids) if mod.instr.get(o) is not None and mod.instr[o].opcode != "constant"]
    return None


def _downcast(mod: _Module, start: int) -> bool:
    """A convert to bf16/f16 reading ``start``'s value through precision-neutral ops,
    leaving a fused computation at its root for the fusion's users (XProf's trace_downcast)."""
    stack, seen = [start], set()
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        comp = mod.comps[mod.comp_of[cur]]
        nxt = list(mod.users.get(cur, ()))
        if comp.root_id == cur and comp.id in mod.fusion_caller:
            nxt.append(mod.fusion_caller[comp.id].id)
        for u in nxt:
            ins = mod.instr[u]
            if ins.opcode == "convert" and ins.shape.element_type in _LOW:
                return True
            if ins.opcode == "fusion" and cur in ins.operand_ids:
                # Entering a fusion that reads the value: on at the fused computation's
                # parameters it binds to (XLA on CPU wraps the back-convert alone: wrapped_convert)
                stack += [p.id for p in _parameters(mod, ins) if ins.operand_ids[p.parameter_number] == cur]
            elif ins.opcode in _TRACE and ins.opcode not in _REDUCTIONS:
                stack.append(u)
    return False


def _parameters(mod: _Module, fusion) -> list:
    comp = mod.comps.get(fusion.called_computation_ids[0]) if fusion.called_computation_ids else None
    return [i for i in comp.instructions if i.opcode == "parameter" and i.parameter_number < len(fusion.operand_ids)] if comp else []


def _context(mod: _Module, ins) -> str:
    """XProf's classify_context: LOSS > NORM > SOFTMAX by the names and op_name metadata
    of the reduction, its computation and its fusion; else GENERAL."""
    comp = mod.comps[mod.comp_of[ins.id]]
    names = [comp.name, ins.metadata.op_name]
    caller = mod.fusion_caller.get(comp.id)
    if caller is not None:
        names += [caller.name, caller.metadata.op_name]
    text = " ".join(n.lower() for n in names if n)
    if any(k in text for k in ("loss", "entropy", "criterion", "nll")):
        return "LOSS"
    if any(k in text for k in ("norm", "variance", "mean")):
        return "NORM"
    if "softmax" in text or any(i.opcode == "exponential" for i in comp.instructions):
        return "SOFTMAX"
    return "GENERAL"


def _reducer_adds(mod: _Module, ins) -> bool:
    comp = mod.comps.get(ins.called_computation_ids[0]) if ins.called_computation_ids else None
    if comp is None:
        return False
    root = mod.instr.get(comp.root_id)
    return (root is not None and root.opcode in ("add", "multiply")) or \
        any(k in comp.name.lower() for k in ("add", "sum", "mul"))


def _convert_reduces(mod: _Module) -> list[dict]:
    hits = []
    for ins in mod.instr.values():
        if ins.opcode not in _REDUCTIONS or ins.shape.element_type != _F32 or not _reducer_adds(mod, ins):
            continue
        up = next((u for u in (_upcast(mod, o) for o in ins.operand_ids) if u is not None), None)
        if up is None or not _downcast(mod, ins.id):
            continue
        context = _context(mod, ins)
        if mod.training and context != "GENERAL":
            continue  # XProf: a training module's loss/norm/softmax reductions keep f32
        f32_bytes = _bytes(up.shape)
        if f32_bytes < MIN_BYTES_ACCESSED:
            continue
        low = _PT.Name(mod.instr[up.operand_ids[0]].shape.element_type).lower()
        top = mod.top_level(ins.id)
        phase = "training" if mod.training else "inference"
        hits.append({
            "rule": "convert_in_reduction", "top": top, "bytes": f32_bytes // 2, "bytes_label": "f32 bytes beyond the original",
            "title": f"{low} promoted to f32 around {ins.opcode} {ins.name}",
            "what": f"{mod.name} ({phase}, {context.lower()} reduction): convert {up.name} widens "
                    f"{shape_text(mod.instr[up.operand_ids[0]].shape)} to {shape_text(up.shape)}, {ins.opcode} {ins.name} "
                    f"reduces it in f32 and the result is converted back to {low}"
                    + (f" (all inside fusion {top.name})" if top.id != ins.id else "") + ".",
            "rows": [("upcast", f"{up.name}: {shape_text(mod.instr[up.operand_ids[0]].shape)} -> {shape_text(up.shape)}", f32_bytes),
                     ("reduction", f"{ins.opcode} {ins.name} -> {shape_text(ins.shape)}", None)],
            "fix": f"Keep the reduction in {low} (jnp.sum(x, dtype=x.dtype), or no astype(float32) before it) where its "
                   "size allows: verify the accuracy after the change, a reduction over more than 1024 elements can lose "
                   "precision." + (" Low priority in a training module." if mod.training else ""),
        })
    return hits


def _emit(mod: _Module, hits: list[dict], link: Link, op_share: OpShare | None) -> list[dict]:
    out = []
    for h in sorted(hits, key=lambda h: (-h["bytes"], h["top"].name, h["title"])):
        share = op_share(mod.name, h["top"].name) if op_share else None
        prio = "P2"
        if share is not None:
            prio = priority_for_share(share)
            if prio is None:
                continue  # below 2 % of the step: not worth a finding
        mv = link("memory_viewer", module_name=mod.name, hlo_op=h["top"].name)
        ev = [evidence(label, value, n, mv if k == 0 else None) for k, (label, value, n) in enumerate(h["rows"])]
        ev.append(evidence(h.get("bytes_label", "read + written"), fmt_bytes(h["bytes"]) + f" ({h['bytes']:,} bytes)", h["bytes"]))
        if share is not None:
            ev.append(evidence("share of step time", f"{100 * share:.1f} %", round(share, 6)))
        out.append(finding(_RULE[h["rule"]], title=h["title"], what=h["what"], evidence=ev,
                           impact=impact(bytes=h["bytes"], text=f"{fmt_bytes(h['bytes'])} of memory traffic per run of "
                                                                f"{mod.name}"),
                           fix=h["fix"], priority=prio))
    return out
