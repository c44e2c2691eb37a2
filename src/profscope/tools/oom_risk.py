"""OOM risk: will it fit, and if not, what to cut. An open, rule-based answer.

Inputs are the payloads of the other tools, never files: the memory viewer of one module
(:mod:`profscope.tools.memory_viewer`, the compiler's plan), the per-module summaries
(``Workspace.module_peaks``), the memory profile of allocator events
(:mod:`profscope.tools.memory_profile_allocator`, what the allocator really did) and a PyTorch
snapshot's overview plus its live blocks at the peak grouped by stack
(:mod:`profscope.tools.memory_profile_snapshot`). :func:`assess` combines whichever are given.

The model (``docs/oom_risk.md`` is the long form; every rule there is a rule here):

Capacity, first source that applies wins, and the answer says which (``capacitySource``):
``request`` (``capacity_bytes=`` / ``device_memory=`` / ``--device-memory``), ``allocator``
(memory profile: ``profileSummary.memoryCapacity`` = stack + heap + free bytes of the
allocator, XProf's ``memory_profile.proto``), ``device_plane`` (an xplane device plane's
``memory_size`` stat), ``trace_device`` (a PyTorch trace's ``deviceProperties``
``totalGlobalMem``), ``oom_event`` (PyTorch ``oom`` trace entry:
``device_free`` + the bytes reserved by the caching allocator at that event: a lower bound
of the device's memory that this process could have had), ``device_table`` (a known
device name, :data:`DEVICES`). A JAX run on a GPU gets 0.75 of a device plane's or a named
device's memory (JAX preallocates XLA_PYTHON_CLIENT_MEM_FRACTION = 0.75 by default); when
the user says the run was JAX on GPU (``jax_mem_fraction``), that fraction (default 0.75)
of any device memory, a requested one included.
Otherwise the capacity is unknown and so is the tier
(``risk`` ``UNKNOWN``) unless an OOM was observed.

Usage (``peakBytes``): the largest of the compiled peak of the chosen module (memory viewer
``peakBytes``: heap-simulated peak + arguments, outputs and constants), the allocator's
peak (stack + heap at its peak; XProf's lifetime peak if larger), a PyTorch trace's peaks
(``Total Allocated``, ``Total Reserved`` and the memory timeline's category total) and a
snapshot's peak (max of the active-bytes timeline and the most reserved bytes after any
trace event). Every figure is a ``usage`` row whose ``measure`` is one of :data:`MEASURES`,
the words every page prints beside a peak (an allocator's lifetime peak is "lifetime peak
allocated"); ``peakMeasure`` names the one that won.

Tiers (``thresholds`` come with every answer): ``OOM`` when an OOM event was recorded or
the peak exceeds the capacity; else ``HIGH`` when utilization >= high (0.90); ``MEDIUM``
when >= medium (0.70); else ``LOW``. Utilization = peak / capacity.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from profscope.errors import BadRequest
from profscope.model.units import fmt_bytes

__all__ = [
    "CATEGORIES",
    "DEFAULT_THRESHOLDS",
    "DEVICES",
    "RANK",
    "TIERS",
    "allocator_evidence",
    "assess",
    "classify_frames",
    "evidence_sentence",
    "compiled_evidence",
    "default_module",
    "device_capacity",
    "over_capacity",
    "requested_capacity",
    "step_kind",
    "parse_size",
    "tier_thresholds",
    "snapshot_evidence",
    "tier_of",
]

TIERS = ("LOW", "MEDIUM", "HIGH", "OOM")
# A verdict's rank, for "worst first" and "at or above": UNKNOWN (no capacity, tier_of)
# ranks below every tier.
RANK = {"UNKNOWN": -1, **{t: i for i, t in enumerate(TIERS)}}
# What a peak counts, in the words every page and the report print beside it (the memory
# profile's tiles say the same): bytes in live allocations or tensors; allocator segments
# (PyTorch's reserved, cached memory included); a sum of categories (PyTorch's memory
# timeline, which also counts tensors made before the profiler started); XLA's heap
# simulator (plus arguments, outputs and constants, as the memory viewer's peak).
PEAK_ALLOCATED = "peak allocated"
PEAK_RESERVED = "peak reserved"
PEAK_CATEGORY_TOTAL = "peak of category total"
COMPILER_HEAP_PEAK = "compiler heap peak"
MEASURES = (PEAK_ALLOCATED, PEAK_RESERVED, PEAK_CATEGORY_TOTAL, COMPILER_HEAP_PEAK)
DEFAULT_THRESHOLDS = {"medium": 0.70, "high": 0.90}
MIB = 1 << 20
GIB = 1 << 30

# Finding thresholds (each finding carries the number it compared and the limit).
ACTIVATION_SHARE = 0.50  # activations at the peak / peak
PADDING_SHARE = 0.10  # compiler padding / peak
FRAGMENTATION_SHARE = 0.20  # see fragmentation()
UNDONATED_SHARE = 0.05  # undonated argument bytes with a same-shaped output / peak
OTHER_MODULE_MARGIN = 0.10  # a non-training module's peak above the training step's by 10 %
LONG_LIVED = 0.50  # share of a module's heap events a buffer without metadata must span
MAX_ROWS = 50  # rows kept per contributor category (the rest are summed in "others")

# Contributor categories, in display order.
CATEGORIES = {
    "parameters": "Parameters / weights",
    "optimizer_state": "Optimizer state",
    "gradients": "Gradients (backward pass)",
    "activations": "Activations",
    "inputs": "Inputs (batch)",
    "outputs": "Outputs",
    "temporaries": "Temporaries",
    "constants": "Constants",
    "small": "Small buffers (< 16 KiB, merged)",
    "allocator_reserve": "Reserved, not allocated",
    # A JAX device-memory profile (pprof) says only what each sample is (its ``kind``
    # label) and where it was made (its Python stack): its buffers are live arrays by the
    # line that made them, its executables the loaded programs' code (pprof_evidence).
    "live_buffers": "Live arrays (JAX buffers, by the line that made them)",
    "executables": "Loaded executables (program code)",
    # XProf's "unused preallocated device memory" row is heap in use at the peak that no
    # allocation event of the profiled window explains (memory_profile.cc
    # InsertSpecialAllocations: peak heap bytes in use minus the mapped allocations), i.e.
    # memory allocated before the profile started (weights, optimizer state). It is in use,
    # not slack: cutting it means cutting what was allocated earlier.
    "allocated_before": "In use, allocated before the profile (XProf: unused preallocated device memory)",
    "unknown": "Unknown (no stack / metadata)",
}

# Nominal memory of common accelerators (vendor data sheets). What a program can use is
# less: runtimes reserve some. Matched on the device name, see device_capacity().
DEVICES = (
    # (family regex on the normalised name, {size tag: bytes}, default tag, label)
    (r"h200", {"141gb": 141 * 10**9}, "141gb", "NVIDIA H200 141 GB"),
    (r"h100", {"80gb": 80 * GIB, "94gb": 94 * GIB, "96gb": 96 * GIB}, "80gb", "NVIDIA H100"),
    (r"gh200", {"96gb": 96 * GIB, "144gb": 144 * GIB}, "96gb", "NVIDIA GH200"),
    (r"a100", {"40gb": 40 * GIB, "80gb": 80 * GIB}, "40gb", "NVIDIA A100"),
    (r"a10g", {"24gb": 24 * GIB}, "24gb", "NVIDIA A10G"),
    (r"l40s?", {"48gb": 48 * GIB}, "48gb", "NVIDIA L40/L40S"),
    (r"l4(?!0)", {"24gb": 24 * GIB}, "24gb", "NVIDIA L4"),
    (r"v100", {"16gb": 16 * GIB, "32gb": 32 * GIB}, "16gb", "NVIDIA V100"),
    (r"t4", {"16gb": 16 * GIB}, "16gb", "NVIDIA T4"),
    (r"rtx4090|4090", {"24gb": 24 * GIB}, "24gb", "NVIDIA RTX 4090"),
    (r"rtx3090|3090", {"24gb": 24 * GIB}, "24gb", "NVIDIA RTX 3090"),
    (r"mi300x", {"192gb": 192 * GIB}, "192gb", "AMD MI300X"),
    (r"mi250", {"128gb": 128 * GIB}, "128gb", "AMD MI250"),
    # TPUs: HBM per chip.
    (r"tpuv5p|v5p", {"95gb": 95 * GIB}, "95gb", "TPU v5p (95 GiB HBM per chip)"),
    (r"tpuv5e|tpuv5lite|v5e|v5litepod|v5lite", {"16gb": 16 * GIB}, "16gb", "TPU v5e (16 GiB HBM per chip)"),
    (r"tpuv6e|v6e|trillium", {"32gb": 32 * GIB}, "32gb", "TPU v6e / Trillium (32 GiB HBM per chip)"),
    (r"tpuv4|v4", {"32gb": 32 * GIB}, "32gb", "TPU v4 (32 GiB HBM per chip)"),
    (r"tpuv3|v3", {"32gb": 32 * GIB}, "32gb", "TPU v3 (32 GiB HBM per chip)"),
    (r"tpuv2|v2", {"16gb": 16 * GIB}, "16gb", "TPU v2 (16 GiB HBM per chip)"),
)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgtp]?i?b?)\s*$", re.IGNORECASE | re.ASCII)  # "١٢" is no size
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12, "tib": 1 << 40,
          "p": 10**15, "pb": 10**15, "pib": 1 << 50}


# ---------------------------------------------------------------------------
# Capacity
# ---------------------------------------------------------------------------


def parse_size(text: str) -> int | None:
    """``"80GiB"`` -> 85899345920, ``"80GB"`` -> 80e9, ``"1234"`` -> 1234 bytes; None if
    the text is not a size. Decimal units are powers of 1000, binary (``GiB``) of 1024."""
    m = _SIZE.match(text or "")
    if not m:
        return None
    unit = m.group(2).lower()
    if unit not in _UNITS:
        return None
    size = float(m.group(1)) * _UNITS[unit]
    # "1e400" is infinity (int() of it raises), "1e300GiB" a number no JSON can store.
    if not math.isfinite(size) or size >= 2.0 ** 63:
        raise BadRequest(f"size {text.strip()[:40]!r} is out of range (at most 2^63 bytes)")
    return int(size)


def device_capacity(name: str) -> tuple[int, str] | None:
    """Nominal memory of a device named like ``H100``, ``NVIDIA A100-SXM4-80GB``,
    ``TPU v5e``; None when no entry matches. A size in the name (``80GB``) picks the
    variant; without one the table's default variant is used (and named in the label)."""
    norm = re.sub(r"[^a-z0-9]", "", (name or "").lower())
    if not norm:
        return None
    for family, sizes, default, label in DEVICES:
        if re.search(family, norm):
            tag = next((t for t in sizes if t in norm), default)
            return sizes[tag], f"{label} {tag[:-2]} GB" if len(sizes) > 1 else label
    return None


def known_devices() -> str:
    return ", ".join(sorted({label.split(" (")[0] for *_, label in DEVICES}))


def requested_capacity(capacity_bytes: int | None = None, device_memory: str | None = None) -> dict | None:
    """The requested capacity: ``{"bytes", "source": "request", "detail"}``, or None when
    neither is given. ``capacity_bytes`` is a number the caller has checked (the server,
    the CLI); ``device_memory`` is this tool's own vocabulary, a size (80GiB) or a name
    of the device table, resolved here. Raises BadRequest for what it cannot mean."""
    if capacity_bytes is not None:
        if capacity_bytes <= 0:
            raise BadRequest(f"parameter 'capacity_bytes' must be a positive integer (bytes), not {capacity_bytes}")
        return {"bytes": capacity_bytes, "source": "request", "detail": f"given: {capacity_bytes:,} bytes"}
    if device_memory:
        text = device_memory.strip()
        size = parse_size(text)
        if size is not None:
            if size <= 0:
                raise BadRequest(f"device memory must be positive, not {text!r}")
            return {"bytes": size, "source": "request", "detail": f"device memory {text}"}
        dev = device_capacity(text)
        if dev is None:
            raise BadRequest(
                f"unknown device memory {text!r}: give a size (80GiB, 40GB, 17179869184) "
                f"or a known device ({known_devices()})"
            )
        return {"bytes": dev[0], "source": "device_table", "detail": f"{dev[1]} (nominal; named {text!r})", "device": text}
    return None


def tier_thresholds(medium: float | None = None, high: float | None = None) -> dict:
    """The utilisation thresholds of the MEDIUM and HIGH tiers, defaults where None."""
    out = dict(DEFAULT_THRESHOLDS)
    for name, value in (("medium", medium), ("high", high)):
        if value is None:
            continue
        if not (0 < value <= 1.5) or math.isnan(value):
            raise BadRequest(f"threshold {name!r} must lie in (0, 1.5], not {value!r}")
        out[name] = value
    if out["medium"] > out["high"]:
        raise BadRequest(f"threshold 'medium' ({out['medium']}) must not exceed 'high' ({out['high']})")
    return out


def tier_of(peak: int, capacity: int | None, thresholds: dict, oom_observed: bool = False) -> str:
    if oom_observed or (capacity and peak > capacity):
        return "OOM"
    if not capacity:
        return "UNKNOWN"
    # Exact rational comparison: a peak of exactly 70 % of the capacity is MEDIUM, which
    # float division (7/10 has no binary form) could get wrong by one ulp.
    u = Fraction(peak, capacity)
    if u >= Fraction(str(thresholds["high"])):
        return "HIGH"
    if u >= Fraction(str(thresholds["medium"])):
        return "MEDIUM"
    return "LOW"


# ---------------------------------------------------------------------------
# Grouping rules
# ---------------------------------------------------------------------------

_OPT_TOKENS = {"opt", "opt_state", "optimizer", "optim", "mu", "nu", "momentum", "momentums", "adam", "adamw",
               "exp_avg", "exp_avg_sq", "velocity", "accumulator", "accum", "count", "step_count", "ema"}
_INPUT_TOKENS = {"batch", "inputs", "input", "x", "y", "labels", "label", "tokens", "data", "features",
                 "targets", "target", "images", "image", "ids", "input_ids", "mask"}
_PATH_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _tokens(path: str) -> list[str]:
    # "state['opt']['mu']['dense_1']['w']" -> state, opt, mu, dense_1, w. JAX names entry
    # parameters by their pytree path (HloInstruction metadata op_name).
    return [t.lower() for t in _PATH_TOKEN.findall(path or "")]


def classify_argument(path: str) -> tuple[str, str]:
    tokens = _tokens(path)
    hit = next((t for t in tokens if t in _OPT_TOKENS), None)
    if hit:
        return "optimizer_state", f"argument path has optimizer-state key {hit!r}"
    hit = next((t for t in tokens if t in _INPUT_TOKENS), None)
    if hit:
        return "inputs", f"argument path has input key {hit!r}"
    return "parameters", "entry-computation argument, no optimizer or input key in its path"


def classify_compiled(row: dict, param_shapes: set, training: bool, span: dict | None, events: int) -> tuple[str, str]:
    """Category and the rule that put a memory-viewer ``maxHeap`` row there."""
    group = row.get("groupName")
    op = row.get("tfOpName") or ""
    if row.get("logicalBufferId") == -1 or group is None:
        return "small", "XProf merges buffers under 16 KiB into one 'small' entry"
    if group == "Parameter":
        return classify_argument(op or row.get("instructionName") or "")
    if group == "Output":
        return "outputs", "maybe-live-out allocation (a result of the module, not an argument)"
    if group == "Constant":
        return "constants", "constant allocation"
    # Temporaries and thread-local buffers: JAX's op_name tells the pass.
    if "rematted_computation" in op:
        return "activations", "op_name has 'rematted_computation': an activation recomputed by remat"
    if "transpose(" in op:
        return "gradients", "op_name has 'transpose(': JAX's backward pass (transpose of the JVP)"
    if "jvp(" in op:
        return "activations", "op_name has 'jvp(' without 'transpose(': forward pass of a differentiated function"
    shape = _dims(row.get("shapeString"))
    if not op and shape and shape in param_shapes:
        return "temporaries", "no op_name; same shape as an argument: a copy (e.g. for an in-place update)"
    if not op and training and span and events and span.get("limit", 0) - span.get("start", 0) >= LONG_LIVED * events:
        return "activations", (f"no op_name; in a differentiated program, live at the peak and for >= {100 * LONG_LIVED:.0f} % "
                               "of the program: a saved residual (e.g. scan's stacked activations)")
    if op:
        return "temporaries", "temporary of a pass that is neither forward nor backward (e.g. optimizer update)"
    return "temporaries", "temporary without op_name metadata"


def _dims(shape: str | None) -> str | None:
    # "f32[6,512,1024]{2,1,0}" -> "f32[6,512,1024]" (layout dropped: copies change it).
    if not shape:
        return None
    return shape.split("{", 1)[0]


def classify_frames(frames: list[dict]) -> tuple[str, str]:
    """Category of a PyTorch allocation from its stack (innermost first, as torch lists
    frames); the first rule that matches any frame wins."""
    if not frames:
        return "unknown", "no stack recorded for this allocation"
    for f in frames:
        fn, name = (f.get("filename") or ""), (f.get("name") or "")
        if "/optim/" in fn or fn.endswith("optimizer.py") or name in ("zero_grad",):
            return "optimizer_state", f"frame {name} in {fn.rsplit('/', 1)[-1]}: optimizer code"
    for f in frames:
        fn, name = (f.get("filename") or ""), (f.get("name") or "")
        if name in ("backward", "_engine_run_backward", "run_backward") or "/autograd/" in fn:
            return "gradients", f"frame {name}: autograd backward"
    for f in frames:
        name = f.get("name") or ""
        if name == "forward" or name == "_call_impl" or name == "_wrapped_call_impl":
            return "activations", f"frame {name}: a module's forward pass"
    for f in frames:
        name = f.get("name") or ""
        if name in ("__init__", "_apply", "to", "cuda", "load_state_dict", "_load_from_state_dict", "reset_parameters") \
                or "init_weight" in name or name.startswith("load"):
            return "parameters", f"frame {name}: model construction or weight loading"
    py = next((f for f in frames if (f.get("filename") or "").endswith(".py")), None)
    if py is None:
        return "unknown", "only C++ frames: no Python caller recorded"
    return "temporaries", "no optimizer, backward, forward or init frame"


def classify_allocator(meta: dict) -> tuple[str, str]:
    """Category of an allocation in the memory profile (TF/XLA allocator events) from its
    ``tfOpName`` and ``regionType`` (XProf's MemoryActivityMetadata)."""
    op = (meta.get("tfOpName") or "")
    low = op.lower()
    region = meta.get("regionType") or ""
    if "preallocated" in low:
        return "allocated_before", ("XProf's special 'unused preallocated device memory': heap in use at the peak that no "
                                    "allocation of the profiled window explains (allocated before the profile began)")
    tokens = set(re.split(r"[^a-z0-9_]+", low))
    if tokens & {"adam", "adamw", "momentum", "rmsprop", "adagrad", "sgd", "optimizer"} or "/optimizer" in low:
        return "optimizer_state", f"tf_op {op!r} names an optimizer"
    if "gradient" in low or "grad" in tokens:
        return "gradients", f"tf_op {op!r} is under gradients/"
    if region.startswith("persist"):
        return "parameters", f"region_type {region!r}: persistent tensor (variables)"
    if region == "output":
        return "activations", "region_type 'output': an op's output tensor"
    if region == "temp":
        return "temporaries", "region_type 'temp': op scratch space"
    return "unknown", f"no rule for region_type {region!r}"


# ---------------------------------------------------------------------------
# Evidence from each tool
# ---------------------------------------------------------------------------


def _mib_bytes(v) -> int:
    # XProf writes sizes as MiB doubles; bytes * 2^-20 is exact in a double up to 2^73.
    return round(float(v or 0) * MIB)


def compiled_evidence(mv: dict, module_name: str) -> dict:
    """What the compiler planned for one module: peak, contributors, and the numbers the
    compile-time findings need. ``mv`` is the memory viewer payload (with ``profscope``
    extras; a text-only dump payload works with fewer findings)."""
    if mv.get("textOnly"):
        return _text_only_evidence(mv, module_name)
    ext = mv.get("profscope") or {}
    totals = ext.get("totals") or {}
    peak = int(totals.get("peakBytes", _mib_bytes(mv.get("peakHeapMib"))))
    spans = mv.get("logicalBufferSpans") or {}
    lifetimes = mv.get("indefiniteLifetimes") or []
    param_shapes = set()
    for a in lifetimes:
        if "entry computation parameter" in (a.get("attributes") or []):
            for b in a.get("logicalBuffers") or []:
                if b.get("shape"):
                    param_shapes.add(_dims(b["shape"]))
    rows = mv.get("maxHeap") or []
    ops = [r.get("tfOpName") or "" for r in rows]
    training = any("transpose(" in o for o in ops)
    events = int(ext.get("heapEvents") or max(0, len(mv.get("heapSizes") or []) - 1))
    items = []
    for r in rows:
        bid = r.get("logicalBufferId")
        cat, rule = classify_compiled(r, param_shapes, training, spans.get(str(bid)), events)
        item = {
            "category": cat, "rule": rule, "bytes": _mib_bytes(r.get("logicalBufferSizeMib")),
            "name": r.get("instructionName") or r.get("label") or "", "shape": r.get("shapeString") or "",
            "opName": r.get("tfOpName") or "", "group": r.get("groupName") or "small",
            "link": {"tool": "memory_viewer", "module_name": module_name},
        }
        if bid not in (None, -1):
            item["link"]["buffer"] = str(bid)
            item["logicalBufferId"] = bid
        items.append(item)
    return {
        "kind": "compiled", "moduleName": module_name, "peakBytes": peak,
        "peakPosition": mv.get("peakHeapSizePosition"),
        "totals": totals, "items": items, "lifetimes": lifetimes,
        "isTraining": training,
        "usesRemat": any(("checkpoint" in o or "remat" in o) for o in ops),
    }


def _text_only_evidence(mv: dict, module_name: str) -> dict:
    """A module with only XLA's buffer-assignment text (tools/memory_viewer_text.py): no
    heap-simulator trace, so no simulated peak. What the text does say: the live ranges'
    peak when XLA printed them (``HloLiveRange``: ``Live ranges at N (peak)``, the logical
    buffers live at once before buffer reuse), else XLA's "Total bytes used" (the sum of
    the allocations the executable makes, what it requests from the allocator). The
    contributors are the allocations by kind (Parameter, Output, ... as XProf types them).
    The live ranges' peak is the memory viewer's (tools/memory_viewer_text.py
    live_range_heap: the maximum of the heap over program order, with its values)."""
    totals = mv.get("totals") or {}
    live = mv.get("liveRange") or {}
    live_peak = sum(int(v.get("bytes") or 0) for v in live.get("peakValues") or [])
    total = int(totals.get("totalBufferAllocationBytes") or 0)
    link = {"tool": "memory_viewer", "module_name": module_name}
    items = []
    cats = {"Parameter": "parameters", "Output": "outputs", "Constant": "constants", "Thread-local": "temporaries",
            "Temporary": "temporaries"}
    if live_peak:
        # A live value is named "<instruction><shape index>" (x.1{}); the buffer assignment
        # says which allocation (Parameter, Output, ...) holds the value of that name.
        where = {}
        for a in mv.get("allocations") or []:
            for v in a.get("values") or []:
                where.setdefault(f"{v.get('name')}{v.get('shapeIndex') or ''}", (a.get("category") or "Temporary", v))
        for v in live["peakValues"]:
            cat, val = where.get(v["name"], (None, None))
            if cat == "Parameter":
                category, rule = classify_argument(v["name"])
            elif cat:
                category, rule = cats.get(cat, "temporaries"), f"live at XLA's live-range peak, held by a {cat} allocation"
            else:
                category, rule = "unknown", "a logical buffer live at XLA's live-range peak (HloLiveRange), in no allocation"
            items.append({"category": category, "rule": rule, "bytes": int(v["bytes"]), "count": 1, "name": v["name"],
                          "shape": (val or {}).get("shape") or "", "opName": "", "link": link})
    else:
        for a in mv.get("allocations") or []:
            cat = a.get("category") or "Temporary"
            if cat == "Parameter":
                names = [x.get("name") or "" for x in a.get("values") or []]
                category, rule = classify_argument(" ".join(names))
            else:
                category, rule = cats.get(cat, "temporaries"), f"buffer-assignment allocation of type {cat}"
            items.append({"category": category, "rule": rule, "bytes": int(a.get("sizeBytes") or 0), "count": 1,
                          "name": f"allocation {a.get('index')}", "shape": "", "opName": "", "link": link})
    peak = live_peak or total
    return {
        "kind": "compiled", "moduleName": module_name, "peakBytes": peak, "textOnly": True,
        "peakFrom": ("live ranges: the most logical buffers live at once over the schedule (XLA's HloLiveRange, "
                     f"time {live.get('peakTime')}), before buffer reuse, as the memory viewer shows it; "
                     f"{total:,} bytes of allocations") if live_peak else
                    ("the sum of the buffer-assignment text's allocation sizes (what the executable allocates; "
                     "no heap-simulator trace, so not a simulated peak)" if total else None),
        "peakPosition": None, "totals": {"totalAllocationBytes": total}, "items": items, "lifetimes": [],
        "isTraining": False, "usesRemat": False,
    }


def allocator_evidence(mp: dict, memory_id: str | None = None) -> dict | None:
    """The allocator with the highest peak (or ``memory_id``) of a memory profile payload;
    None when the profile has no allocator events."""
    per = mp.get("memoryProfilePerAllocator") or {}
    extras = ((mp.get("profscope") or {}).get("allocators")) or {}
    ids = [i for i in (mp.get("memoryIds") or list(per)) if i in per]
    if not ids:
        return None
    if memory_id and memory_id in per:
        mid = memory_id
    else:
        mid = max(ids, key=lambda i: int(((per[i].get("profileSummary") or {}).get("peakBytesUsageLifetime")) or 0))
    a = per[mid]
    s = a.get("profileSummary") or {}
    ps = s.get("peakStats") or {}
    summary = (extras.get(mid) or {}).get("summary") or {}
    peak_in_use = int(ps.get("stackReservedBytes") or 0) + int(ps.get("heapAllocatedBytes") or 0)
    lifetime = int(s.get("peakBytesUsageLifetime") or 0)
    peak_ps = int(s.get("peakStatsTimePs") or 0)
    snaps = a.get("memoryProfileSnapshots") or []
    special = a.get("specialAllocations") or []
    items = []
    for act in a.get("activeAllocations") or []:
        si, sp = int(act.get("snapshotIndex", -1)), int(act.get("specialIndex", -1))
        meta = (snaps[si].get("activityMetadata") if 0 <= si < len(snaps) else special[sp] if 0 <= sp < len(special) else None)
        if not meta:
            continue
        n = int(act.get("numOccurrences") or 1)
        cat, rule = classify_allocator(meta)
        items.append({
            "category": cat, "rule": rule, "bytes": int(meta.get("allocationBytes") or 0) * n,
            "name": meta.get("tfOpName") or "", "shape": meta.get("tensorShape") or "",
            "opName": meta.get("regionType") or "", "count": n,
            "link": {"tool": "memory_profile", "memory_id": mid, "t": _ps_to_ms(peak_ps), "q": meta.get("tfOpName") or ""},
        })
    leak = ((extras.get(mid) or {}).get("leakHints") or {}).get("heapGrowth") or {}
    return {
        "kind": "allocator", "memoryId": mid, "peakBytes": max(peak_in_use, lifetime),
        "peakInUseBytes": peak_in_use, "lifetimePeakBytes": lifetime, "peakTimePs": peak_ps,
        "capacityBytes": int(s.get("memoryCapacity") or 0) or None,
        "fragmentationAtPeak": float(ps.get("fragmentation") or 0.0),
        "freeAtPeakBytes": int(ps.get("freeMemoryBytes") or 0),
        "items": items, "heapGrowth": leak, "summary": summary,
    }


def _ps_to_ms(ps: int) -> str:
    # The memory profile page's `t` is in milliseconds (memory_profile.js psToMs).
    return repr(ps / 1e9)


# A pprof sample's ``kind`` label -> (category, rule); a sample without one is "unknown".
_PPROF_KINDS = {
    "buffer": ("live_buffers", "kind=buffer: live device arrays, by the innermost frame outside installed libraries "
                               "(the line that made them)"),
    "executable": ("executables", "kind=executable: a loaded XLA executable's generated code"),
    "": ("unknown", "pprof sample without a kind label"),
}


def pprof_evidence(points: list[dict], sites: dict[str, list[dict]], device: str, profile: str) -> dict:
    """JAX device-memory profiles (pprof) of one device: ``points`` the live bytes of each
    successive profile (tools/memory_profile_pprof.py ``timeline``), ``sites`` the
    allocation sites of the profile with the most (``top_sites``) per sample ``kind``
    label, ``profile`` its name.
    Live bytes are what JAX holds in buffers when the profile was taken: the largest of
    the profiles is the peak this input can show."""
    peak = max((int(pt["byDevice"].get(device, 0)) for pt in points), default=0)
    link = {"tool": "memory_profile", "host": device, "profile": profile}
    items = []
    for kind, rows in sites.items():
        # The category is the sample's kind label, the only role the file records (JAX's
        # HeapProfile writes kind=buffer for a live array, kind=executable for a loaded
        # program's code); PyTorch's frame rules (classify_frames: forward, backward,
        # optimizer frames) would put every JAX site under "temporaries", a guess.
        cat, rule = _PPROF_KINDS.get(kind, ("unknown", f"pprof sample kind {kind!r}: not a kind JAX writes"))
        for s in rows:
            if s["bytes"] <= 0:
                continue
            items.append({"category": cat, "rule": rule, "bytes": int(s["bytes"]), "count": int(s["count"]),
                          "name": f"{s['function']} ({s['file'].rsplit('/', 1)[-1]}:{s['line']})", "shape": "", "opName": "",
                          "link": link})
    return {"kind": "pprof", "host": device, "device": device, "peakBytes": peak, "profile": profile,
            "profiles": len(points), "items": items, "link": link}


def snapshot_evidence(overview: dict, peak_totals: dict | None, groups: list[dict], host: str) -> dict:
    """A PyTorch snapshot (one device). ``peak_totals``: ``state_at(peak)["totals"]``;
    ``groups``: live blocks at the peak grouped by stack, ``{"stackId", "bytes", "count",
    "frames"}`` (frames innermost first)."""
    s = overview.get("summary") or {}
    peak = s.get("peak") or {}
    reserved_at_peak = int((peak_totals or {}).get("reservedBytes") or 0)
    active_peak = int(peak.get("bytes") or 0)
    final_reserved = int(s.get("finalReservedBytes") or 0)
    # Peak reserved is the most reserved after any event (overview's peakReserved): a
    # segment freed mid-trace (segment_free after empty_cache, segment_unmap of an
    # expandable segment) held memory that neither the allocated peak nor the end shows.
    top = s.get("peakReserved") or {}
    peak_reserved = max(int(top.get("bytes") or 0), reserved_at_peak, final_reserved)
    items = []
    event = peak.get("event")
    for g in groups:
        cat, rule = classify_frames(g.get("frames") or [])
        inner = next((f for f in g.get("frames") or [] if (f.get("filename") or "").endswith(".py")), None)
        # The innermost Python frame names the row; the stack id keeps rows from the same
        # helper apart (its frames: /api/snapshot/stack?stack=N).
        name = (f"{inner['name']} ({inner['filename'].rsplit('/', 1)[-1]}:{inner['line']}) · stack {g['stackId']}" if inner
                else "<no stack>" if g.get("stackId", -1) < 0 else f"stack {g['stackId']} (C++ frames only)")
        link = {"tool": "memory_profile", "host": host}
        if event is not None:
            link["t"] = str(event)
        items.append({"category": cat, "rule": rule, "bytes": int(g["bytes"]), "count": int(g.get("count") or 1),
                      "name": name, "shape": "", "opName": "", "stackId": g.get("stackId"), "link": link})
    unalloc = max(0, reserved_at_peak - sum(i["bytes"] for i in items))
    if unalloc:
        items.append({"category": "allocator_reserve", "rule": "segment bytes the caching allocator reserved but no live block uses",
                      "bytes": unalloc, "count": 1, "name": "reserved, not allocated", "shape": "", "opName": "",
                      "link": {"tool": "memory_profile", "host": host, **({"t": str(event)} if event is not None else {})}})
    ooms = overview.get("ooms") or []
    return {
        "kind": "snapshot", "host": host, "peakBytes": max(active_peak, peak_reserved),
        "activePeakBytes": active_peak, "reservedAtPeakBytes": reserved_at_peak, "finalReservedBytes": final_reserved,
        "peakReservedBytes": peak_reserved, "peakReservedEvent": top.get("event"),
        "peakEvent": event, "totalsAtPeak": peak_totals or {}, "items": items, "ooms": ooms,
        "warnings": overview.get("warnings") or [],
    }


# PyTorch's own memory-timeline categories (torch.profiler._memory_profiler.Category).
_TORCH_CATEGORIES = {
    "PARAMETER": "parameters", "OPTIMIZER_STATE": "optimizer_state", "INPUT": "inputs", "TEMPORARY": "temporaries",
    "ACTIVATION": "activations", "GRADIENT": "gradients", "AUTOGRAD_DETAIL": "gradients", "UNKNOWN": "unknown",
}


def classify_torch_row(row: dict) -> tuple[str, str]:
    """Category of a PyTorch profiler allocation row (op, nn.Module scope, Python frame)
    when the trace has no memory-timeline JSON beside it."""
    op, module, frame = row.get("op") or "", row.get("module") or "", row.get("frame") or ""
    if frame.startswith("(allocated before"):
        return "unknown", "allocated before the trace started"
    if "optim" in frame.lower() or "Optimizer" in op:
        return "optimizer_state", f"frame {frame!r}: optimizer code"
    if "backward" in frame.lower() or "Backward" in op or "backward" in op:
        return "gradients", f"op {op!r} / frame {frame!r}: autograd backward"
    if module and not module.startswith("("):
        return "activations", f"allocated inside nn.Module {module!r} (forward pass)"
    return "temporaries", "no optimizer, backward or module scope"


def torch_trace_evidence(payload: dict) -> dict | None:
    """A PyTorch profiler trace (tools/memory_profile_torch.py payload): the device with the
    highest peak; contributors from the memory-timeline categories PyTorch itself assigned
    (``export_memory_timeline``) when present, else from the allocations live at the peak."""
    devs = payload.get("devices") or []
    if not devs:
        return None
    dev = max(devs, key=lambda d: (d["device"] != "CPU", d["summary"]["peakAllocatedBytes"]))
    s = dev["summary"]
    peak = dev.get("peak") or {}
    t = peak.get("timeMs")
    link = {"tool": "memory_profile", "memory_id": dev["device"], **({"t": repr(t)} if t is not None else {})}
    items = []
    ct = payload.get("categoryTimeline")
    if ct and ct.get("peakBreakdown"):
        ct_link = {"tool": "memory_profile", "memory_id": dev["device"], "t": repr(ct["peakTimeMs"])}
        for c in ct["peakBreakdown"]:
            if c["bytes"]:
                cat = _TORCH_CATEGORIES.get(c["category"], "unknown")
                items.append({"category": cat, "rule": f"PyTorch memory-timeline category {c['category']}",
                              "bytes": int(c["bytes"]), "count": 1, "name": c["category"], "shape": "", "opName": "",
                              "link": ct_link})
        source_peak = int(ct.get("peakBytes") or 0)
    else:
        b = dev.get("breakdownAtPeak") or {}
        for r in b.get("allocations") or []:
            cat, rule = classify_torch_row(r)
            items.append({"category": cat, "rule": rule, "bytes": int(r["bytes"]), "count": int(r.get("count") or 1),
                          "name": f"{r.get('op')} · {r.get('frame')}", "shape": "", "opName": r.get("module") or "",
                          "link": {**link, "q": r.get("op") or ""}})
        if b.get("unattributedBytes"):
            items.append({"category": "unknown", "rule": "allocated before the trace started", "bytes": int(b["unattributedBytes"]),
                          "count": 1, "name": "(allocated before the trace)", "shape": "", "opName": "", "link": link})
        source_peak = 0
    return {
        "kind": "torch_trace", "device": dev["device"], "link": link,
        # The largest of the three: on CPU, Total Allocated counts only what was allocated
        # while the profiler recorded, and the memory timeline also counts the parameters
        # and optimizer state made before (demo/logdir/torch/README.md), so it is larger.
        "peakBytes": max(int(s["peakAllocatedBytes"]), int(s.get("peakReservedBytes") or 0), source_peak),
        "allocatedPeakTimeMs": s.get("peakAllocatedTimeMs"), "reservedPeakTimeMs": s.get("peakReservedTimeMs"),
        "categoryPeakTimeMs": ct.get("peakTimeMs") if source_peak else None,
        "allocatedPeakBytes": int(s["peakAllocatedBytes"]), "reservedPeakBytes": int(s.get("peakReservedBytes") or 0),
        "categoryPeakBytes": source_peak or None, "items": items, "leakHints": dev.get("leakHints") or [],
        # memory_profile_torch's notes say why a device has no per-allocation view (its
        # [memory] events carry no Addr, so no allocation can be paired with its free).
        "contributorsNote": None if items else ("; ".join(dev.get("notes") or [])
                                                or "no allocation is recorded live at the peak"),
    }


# ---------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------


def _finding(fid: str, severity: str, title: str, message: str, evidence: dict, links: list[dict] | None = None) -> dict:
    # evidenceText/evidenceExamples: what the page and the report print (the numbers in
    # a sentence); evidence keeps the raw figures for scripts.
    return {"id": fid, "severity": severity, "title": title, "message": message, "evidence": evidence,
            "evidenceText": evidence_sentence(evidence), "evidenceExamples": evidence_examples(evidence), "links": links or []}


_fmt = fmt_bytes


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _words(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).lower()


# Evidence keys said in words (the rest: camelCase split into words).
_EVIDENCE_WORDS = {"r2": "r²", "stepSource": "steps from", "bytesPerStep": "growth per step", "liveBytesAtStepEnd": "live at each step's end",
                   "trainingStep": "training step", "stepsGrowing": "steps that grew", "stepsCompared": "steps compared"}


def _evidence_value(key: str, v) -> str:
    k = key.lower()
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)) and "bytes" in k:
        return f"{fmt_bytes(v)} ({int(v):,} bytes{' per step' if k.endswith('perstep') else ''})"
    # A fraction (a share, a threshold, a fragmentation figure) reads as a percentage;
    # a fit's r2 and a ratio of peaks do not.
    if isinstance(v, float) and 0 <= v <= 1 and k != "r2" and "ratio" not in k:
        return _pct(v)
    if isinstance(v, float) and ("ratio" in k or k == "threshold"):
        return f"{v:.2f}×"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        if "bytes" in k and v and all(isinstance(x, (int, float)) for x in v):
            shown = ", ".join(fmt_bytes(x) for x in v[:6])  # a series: the numbers, in one unit each
        else:
            shown = ", ".join(_evidence_value(key, x) for x in v[:6])
        return shown + (f", … ({len(v)} values)" if len(v) > 6 else "")
    if isinstance(v, dict):
        return "(" + evidence_sentence(v, end="", capital=False) + ")"
    return "—" if v is None else str(v)


def evidence_sentence(e: dict, end: str = ".", capital: bool = True) -> str:
    """A finding's evidence as a sentence with its numbers ("Activation 12.0 MiB
    (12,582,912 bytes), share 61.0 %, threshold 50.0 %."), never the payload's key=value
    pairs; ``examples`` are rendered apart (:func:`evidence_examples`)."""
    labels = {_words(k) for k in e}
    parts = []
    for k, v in e.items():
        if k == "examples" or v is None:
            continue
        label = _EVIDENCE_WORDS.get(k) or _words(k)
        # The value already says "bytes"; keep the word where dropping it would make the
        # label another key's (category vs categoryBytes).
        if label.endswith(" bytes") and label != "bytes" and label[: -len(" bytes")] not in labels:
            label = label[: -len(" bytes")]
        parts.append(f"{label} {_evidence_value(k, v)}")
    text = ", ".join(parts)
    if not text:
        return ""
    return (text[:1].upper() + text[1:] if capital else text) + end


def evidence_examples(e: dict) -> list[str]:
    return [evidence_sentence(x) if isinstance(x, dict) else str(x) for x in (e.get("examples") or [])]


def undonated_arguments(ev: dict) -> list[dict]:
    """Entry parameters whose allocation is not live-out (not donated/aliased) while an
    output allocation of the same shape and size exists: XLA could have reused the
    argument's memory for that output had the argument been donated."""
    params, outputs = [], []
    for a in ev.get("lifetimes") or []:
        attrs = a.get("attributes") or []
        size = _mib_bytes(a.get("sizeMib"))
        shapes = [_dims(b.get("shape")) for b in a.get("logicalBuffers") or [] if b.get("shape")]
        names = [b.get("hloName") or "" for b in a.get("logicalBuffers") or []]
        entry = {"allocation": int(a.get("id") or 0), "bytes": size, "shapes": shapes, "names": names,
                 "ids": [b.get("id") for b in a.get("logicalBuffers") or []]}
        if "entry computation parameter" in attrs and "may-be live out" not in attrs:
            params.append(entry)
        elif "may-be live out" in attrs and "entry computation parameter" not in attrs:
            outputs.append(entry)
    free = list(outputs)
    hits = []
    for p in sorted(params, key=lambda p: -p["bytes"]):
        if not p["shapes"]:
            continue
        match = next((o for o in free if o["bytes"] == p["bytes"] and p["shapes"][0] in o["shapes"]), None)
        if match is not None:
            free.remove(match)
            hits.append({"argument": p["names"][0] if p["names"] else "", "shape": p["shapes"][0], "bytes": p["bytes"],
                         "argumentBuffer": p["ids"][0] if p["ids"] else None,
                         "output": match["names"][0] if match["names"] else "", "outputAllocation": match["allocation"]})
    return hits


def fragmentation(ev: dict) -> dict | None:
    """Fragmentation per source, as a share. Compiler: (total allocation - peak) / total
    allocation (holes the heap simulator left). Allocator (memory profile): XProf's
    ``fragmentation`` at the peak. Snapshot: external = inactive bytes inside segments /
    reserved; internal = (size - requested) of active blocks / active bytes (at the peak)."""
    if ev["kind"] == "compiled":
        t = ev["totals"]
        total = int(t.get("totalAllocationBytes") or 0)
        if not total or ev.get("textOnly"):  # no simulated peak to compare the allocations with
            return None
        return {"kind": "compiler", "share": max(0, total - ev["peakBytes"]) / total,
                "totalAllocationBytes": total, "peakBytes": ev["peakBytes"],
                "rule": "(total buffer allocation - peak) / total buffer allocation"}
    if ev["kind"] in ("torch_trace", "pprof"):  # pprof: live buffers only, no allocator state
        return None
    if ev["kind"] == "allocator":
        return {"kind": "allocator", "share": ev["fragmentationAtPeak"], "rule": "XProf's allocator fragmentation at the peak (1 - largest free chunk / free bytes)"}
    t = ev["totalsAtPeak"]
    reserved = int(t.get("reservedBytes") or 0)
    active = int(t.get("activeBytes") or 0)
    if not reserved:
        return None
    ext = int(t.get("externalFragmentation") or 0) / reserved
    internal = int(t.get("internalFragmentation") or 0) / active if active else 0.0
    return {"kind": "allocator", "share": max(ext, internal), "external": ext, "internal": internal,
            "externalBytes": int(t.get("externalFragmentation") or 0), "internalBytes": int(t.get("internalFragmentation") or 0),
            "rule": "max(external: inactive bytes in segments / reserved, internal: block size - requested / active)"}


def _is_step(name: str) -> bool:
    low = name.lower()
    return bool(re.search(r"train|update|step|fit", low)) and not re.search(r"eval|predict|infer|test", low)


# An inference step by its name: JAX names a module after the jitted function
# (jit_eval_step, jit_predict, jit_generate, jit_decode_step, pjit_serve_fn, jit_forward).
_INFERENCE_STEP = re.compile(r"eval|predict|infer|serv|generat|decod|sampl|forward", re.IGNORECASE)


def step_kind(name: str) -> str | None:
    """``training`` (:func:`_is_step`), ``inference`` (an eval/predict/serve/generate/
    decode/forward module) or None (an initialiser, a ``device_put`` copy)."""
    if _is_step(name):
        return "training"
    return "inference" if _INFERENCE_STEP.search(name) else None


def default_module(modules: list[dict], known: set[str], times: dict[str, dict]) -> tuple[str | None, dict | None]:
    """The module a run is rated on when the request names none (docs/oom_risk.md "The
    rated module"): the worst module that runs as a step, i.e. the highest compiled peak
    among the modules named as a training or inference step (:func:`step_kind`), since
    one capacity rates them all and the worst one is what the run must fit. Without any
    step, the module that ran most in the profile (``times``: total time of its module
    events), else the highest peak among modules with a heap-simulator schedule (one
    without is a single copy or fill: jit_stage, broadcast_in_dim). ``known``: the names
    that may be chosen (readable, on the rated host)."""
    usable = [m for m in modules if m.get("moduleName") in known and not m.get("error")]
    steps = [m for m in usable if step_kind(m["moduleName"]) and m.get("peakBytes")]
    if steps:
        worst = max(steps, key=lambda m: (m["peakBytes"], m["moduleName"]))
        name = worst["moduleName"]
        return name, {"rule": "worst step module", "stepKind": step_kind(name), "peakBytes": worst["peakBytes"],
                      "steps": [m["moduleName"] for m in sorted(steps, key=lambda m: -m["peakBytes"])],
                      **(times.get(name) or {})}
    ran = sorted((t["ps"], k) for k, t in times.items() if k in known and t["ps"] > 0)
    if ran:
        name = ran[-1][1]
        return name, {"rule": "ran most in the profile (no module is named as a step)", "ps": ran[-1][0], **times[name]}
    ranked = sorted(usable, key=lambda m: (not m.get("heapEvents"), -(m.get("peakBytes") or 0)))
    if ranked:
        return ranked[0]["moduleName"], {"rule": "highest compiled peak (no step module, no module events in the profile)"}
    return None, None


def over_capacity(mods: list[dict], capacity: int | None) -> list[dict]:
    """Every module whose own compiled peak exceeds the capacity, worst first: each would
    fail when it runs, whichever module rates the run."""
    if not capacity:
        return []
    over = [m for m in mods if (m.get("peakBytes") or 0) > capacity]
    return [{"moduleName": m["moduleName"], "peakBytes": m["peakBytes"], "utilization": m["peakBytes"] / capacity,
             "stepKind": m.get("stepKind")} for m in sorted(over, key=lambda m: -m["peakBytes"])]


def findings(ev_list: list[dict], modules: list[dict], peak: int) -> list[dict]:
    out: list[dict] = []
    for ev in ev_list:
        if ev["kind"] == "compiled":
            mod = ev["moduleName"]
            hits = undonated_arguments(ev)
            wasted = sum(h["bytes"] for h in hits)
            if hits and ev["peakBytes"] and wasted / ev["peakBytes"] >= UNDONATED_SHARE:
                top = hits[0]
                out.append(_finding(
                    "undonated_arguments", "high",
                    "Arguments not donated though same-shaped outputs exist",
                    f"{len(hits)} argument(s) of {mod} ({_fmt(wasted)}, {100 * wasted / ev['peakBytes']:.1f} % of the peak) are "
                    f"not aliased with any output, yet an output of the same shape exists (largest: {top['argument']} "
                    f"{top['shape']}). Donating them (jax.jit(..., donate_argnums=...)) lets XLA write the outputs in place.",
                    {"arguments": len(hits), "bytes": wasted, "peakBytes": ev["peakBytes"], "share": wasted / ev["peakBytes"],
                     "threshold": UNDONATED_SHARE, "examples": hits[:10]},
                    [{"tool": "memory_viewer", "module_name": mod, **({"buffer": str(h["argumentBuffer"])} if h["argumentBuffer"] else {}),
                      "label": h["argument"]} for h in hits[:5]],
                ))
            act = [i for i in ev["items"] if i["category"] == "activations"]
            act_bytes = sum(i["bytes"] for i in act)
            if ev["peakBytes"] and ev["isTraining"] and act_bytes / ev["peakBytes"] >= ACTIVATION_SHARE:
                hint = ("remat is already in use here: checkpoint more (a coarser policy, or fewer saved residuals)"
                        if ev["usesRemat"] else "consider rematerialization (jax.checkpoint / jax.remat) of the repeated blocks")
                biggest = max(act, key=lambda i: i["bytes"])
                out.append(_finding(
                    "activations_dominate", "medium", "Activations dominate the peak",
                    f"Activations are {_fmt(act_bytes)} of the {_fmt(ev['peakBytes'])} peak of {mod} "
                    f"({100 * act_bytes / ev['peakBytes']:.1f} % >= {100 * ACTIVATION_SHARE:.0f} %): {hint}.",
                    {"activationBytes": act_bytes, "peakBytes": ev["peakBytes"], "share": act_bytes / ev["peakBytes"],
                     "threshold": ACTIVATION_SHARE, "usesRemat": ev["usesRemat"], "buffers": len(act)},
                    [{**biggest["link"], "label": biggest["name"]}],
                ))
            t = ev["totals"]
            pad = int(t.get("paddingBytes") or 0)
            if ev["peakBytes"] and pad / ev["peakBytes"] > PADDING_SHARE:
                out.append(_finding(
                    "padding", "medium", "Padding overhead above 10 %",
                    f"{_fmt(pad)} of the {_fmt(ev['peakBytes'])} peak of {mod} is layout padding "
                    f"({100 * pad / ev['peakBytes']:.1f} % > {100 * PADDING_SHARE:.0f} %): pad dimensions to the tile sizes "
                    "(multiples of 8/128 on TPU) or reorder them.",
                    {"paddingBytes": pad, "peakBytes": ev["peakBytes"], "share": pad / ev["peakBytes"], "threshold": PADDING_SHARE},
                    [{"tool": "memory_viewer", "module_name": mod, "label": mod}],
                ))
        frag = fragmentation(ev)
        if frag and frag["share"] > FRAGMENTATION_SHARE:
            where = ev.get("moduleName") or ev.get("memoryId") or ev.get("host")
            out.append(_finding(
                f"fragmentation_{frag['kind']}", "medium", f"{frag['kind'].capitalize()} fragmentation above 20 %",
                f"{frag['kind'].capitalize()} fragmentation of {where} is {100 * frag['share']:.1f} % "
                f"(> {100 * FRAGMENTATION_SHARE:.0f} %; {frag['rule']}).",
                {**{k: v for k, v in frag.items() if k != "kind"}, "threshold": FRAGMENTATION_SHARE},
                [_peak_link(ev)],
            ))
        if ev["kind"] == "allocator":
            g = ev.get("heapGrowth") or {}
            if g.get("steadyLeak"):
                out.append(_finding(
                    "heap_growth", "high", "Heap grows step over step",
                    f"The heap of {ev['memoryId']} at the end of each step grows by {_fmt(g.get('slopeBytesPerStep') or 0)} "
                    f"per step (linear fit r² = {g.get('r2')}): a leak, or state accumulated across steps.",
                    {k: g.get(k) for k in ("slopeBytesPerStep", "interceptBytes", "r2")} | {"steps": len(g.get("points") or [])},
                    [{"tool": "memory_profile", "memory_id": ev["memoryId"], "label": ev["memoryId"]}],
                ))
        if ev["kind"] == "torch_trace":
            for h in ev["leakHints"]:
                if h["kind"] != "stepGrowth":
                    continue
                e = h["evidence"]
                out.append(_finding(
                    "heap_growth", "high", "Heap grows step over step",
                    f"On {ev['device']}, {h['message']}: a leak, or state accumulated across steps.",
                    {k: e.get(k) for k in ("stepSource", "bytesPerStep", "stepsGrowing", "stepsCompared")}
                    | {"liveBytesAtStepEnd": (e.get("liveBytesAtStepEnd") or [])[:20]},
                    [{**ev["link"], "label": f"{ev['device']} at its peak"}],
                ))
        if ev["kind"] == "snapshot":
            for o in ev["ooms"][:5]:
                out.append(_finding(
                    "oom_event", "oom", "Out-of-memory event recorded",
                    f"The allocator failed to allocate {_fmt(o['requestedBytes'])} ({o['requestedBytes']:,} bytes) on {ev['host']} "
                    f"with {_fmt(o['deviceFreeBytes'])} ({o['deviceFreeBytes']:,} bytes) free on the device, "
                    f"{_fmt(o['reservedBytes'])} reserved and {_fmt(o['liveBytes'])} live.",
                    {k: o.get(k) for k in ("event", "requestedBytes", "deviceFreeBytes", "liveBytes", "reservedBytes", "largestFreeBlock", "stream")},
                    [{"tool": "memory_profile", "host": ev["host"], "t": str(o["event"]), "label": f"event {o['event']}"}],
                ))
    # A module other than the training step has the highest compiled peak.
    ranked = [m for m in modules if m.get("peakBytes") and not m.get("error") and (m.get("heapEvents") or 0) > 0]
    steps = [m for m in ranked if _is_step(m["moduleName"])]
    if ranked and steps:
        top = max(ranked, key=lambda m: m["peakBytes"])
        step = max(steps, key=lambda m: m["peakBytes"])
        if top is not step and not _is_step(top["moduleName"]) and top["peakBytes"] > step["peakBytes"] * (1 + OTHER_MODULE_MARGIN):
            out.append(_finding(
                "other_module_peak", "medium", "A module other than the training step has the highest peak",
                f"{top['moduleName']} peaks at {_fmt(top['peakBytes'])}, {top['peakBytes'] / step['peakBytes']:.2f}x the "
                f"training step {step['moduleName']} ({_fmt(step['peakBytes'])}): shrink its batch or shard it; "
                "it sets the memory you need.",
                {"module": top["moduleName"], "peakBytes": top["peakBytes"], "trainingStep": step["moduleName"],
                 "trainingStepPeakBytes": step["peakBytes"], "ratio": top["peakBytes"] / step["peakBytes"],
                 "threshold": 1 + OTHER_MODULE_MARGIN},
                [{"tool": "memory_viewer", "module_name": top["moduleName"], "label": top["moduleName"]},
                 {"tool": "memory_viewer", "module_name": step["moduleName"], "label": step["moduleName"]}],
            ))
    return out


def _peak_link(ev: dict) -> dict:
    if ev["kind"] in ("torch_trace", "pprof"):
        return {**ev["link"], "label": "peak"}
    if ev["kind"] == "compiled":
        return {"tool": "memory_viewer", "module_name": ev["moduleName"], "label": ev["moduleName"]}
    if ev["kind"] == "allocator":
        return {"tool": "memory_profile", "memory_id": ev["memoryId"], "t": _ps_to_ms(ev["peakTimePs"]), "label": "peak"}
    link = {"tool": "memory_profile", "host": ev["host"], "label": "peak"}
    if ev.get("peakEvent") is not None:
        link["t"] = str(ev["peakEvent"])
    return link


def _jax_gpu(modules: list[dict] | None, devices: list[dict] | None, cap: dict, device_name: str | None) -> bool:
    """A JAX program (its XLA modules are named ``jit_<function>``, jax/_src/interpreters
    /pxla.py) on a GPU (a ``/device:GPU:N`` plane, or a named device that is a GPU in
    :data:`DEVICES`)."""
    if not any(re.match(r"(jit|pjit|pmap|xmap)_", (m.get("moduleName") or "")) for m in modules or []):
        return False
    if any("GPU" in (d.get("plane") or "") for d in devices or []):
        return True
    name = cap.get("device") or device_name or next((d.get("gpu_device_name") for d in devices or [] if d.get("gpu_device_name")), None)
    if not name:
        return False
    norm = re.sub(r"[^a-z0-9]", "", name.lower())
    entry = next((e for e in DEVICES if re.search(e[0], norm)), None)
    return entry is not None and not entry[3].startswith("TPU")


def _jax_preallocation(cap: dict | None, modules: list[dict] | None, devices: list[dict] | None, device_name: str | None,
                       jax_mem_fraction: float | None) -> dict | None:
    """The capacity of a JAX run on a GPU: the share of the device's memory JAX
    preallocates. ``jax_mem_fraction`` (jax_gpu= / jax_mem_fraction=, --jax-gpu /
    --jax-mem-fraction): the user says the run was JAX on a GPU; then a requested
    capacity is the device's memory too. Without it, a JAX run is recognised on a GPU
    device plane or a GPU name (:func:`_jax_gpu`)."""
    said = jax_mem_fraction is not None
    if cap is None or not (cap["source"] in ("device_table", "device_plane", "request", "trace_device") if said else
                           cap["source"] in ("device_table", "device_plane") and _jax_gpu(modules, devices, cap, device_name)):
        return cap
    # JAX on GPU preallocates XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75) of the
    # device's memory for its BFC allocator and cannot use the rest
    # (docs.jax.dev/en/latest/gpu_memory_allocation.html): a device's full memory would
    # rate a run LOW that can still OOM. An allocator's own capacity (memory profile) is
    # already what JAX got, and stays as it is.
    full, frac = cap["bytes"], Fraction(str(jax_mem_fraction)) if said else Fraction(3, 4)
    return {**cap, "bytes": int(full * frac), "deviceBytes": full, "jaxMemFraction": float(frac),
            "detail": f"{cap['detail']}; x {float(frac):g}: JAX on GPU preallocates XLA_PYTHON_CLIENT_MEM_FRACTION="
                      f"{float(frac):g} of {full:,} bytes"
                      + ("" if said else " by default (say jax_mem_fraction= / --jax-mem-fraction if you changed "
                                         "XLA_PYTHON_CLIENT_MEM_FRACTION, or give the capacity yourself with XLA_PYTHON_CLIENT_PREALLOCATE=false)")}


# What to cut, per category: the change that shrinks that category (the evidence gives
# the bytes it must shrink by).
_CUT_ADVICE = {
    "parameters": "shard the weights across devices (FSDP / jax.sharding), keep them in bf16/fp16, or offload some to host memory",
    "optimizer_state": "shard the optimizer state (ZeRO / FSDP, or a sharded optax state), use a low-memory optimizer "
                       "(8-bit Adam, Adafactor) or keep the state in bf16",
    "gradients": "accumulate gradients over micro-batches (a smaller per-step batch) or shard them (ZeRO-2 / reduce-scatter)",
    "activations": "rematerialize (jax.checkpoint / torch.utils.checkpoint) the repeated blocks or shrink the batch or sequence",
    "inputs": "shrink the per-device batch (accumulate over micro-batches to keep the global batch)",
    "outputs": "donate the arguments the outputs replace (donate_argnums) or return less",
    "temporaries": "look at the largest temporary in the memory viewer: fuse or chunk the op that makes it",
    "live_buffers": "open the memory profile at the line that made the largest arrays: drop the references that keep "
                    "them alive across steps, shard them (jax.sharding), keep them in bf16, or donate them (donate_argnums)",
    "executables": "load fewer programs: compile fewer distinct shapes (pad to a few sizes) or drop unused ones (jax.clear_caches)",
    "constants": "pass large constants as arguments instead of closing over them",
    "small": "many small buffers: batch them into larger arrays",
    "allocator_reserve": "release the caching allocator's unused segments (torch.cuda.empty_cache) or reduce fragmentation "
                         "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
    "allocated_before": "this is memory in use, allocated before the profile started (usually weights and optimizer state): "
                        "start the profile earlier to attribute it, then shard or shrink that state",
    "unknown": "record the allocations with stacks (PyTorch: _record_memory_history; JAX: a profile with the HLO) to attribute "
               "them, then cut the largest",
}


def what_to_cut(contributors: list[dict], peak: int, capacity: int | None, thresholds: dict, risk: str) -> dict:
    """The HIGH/OOM answer's concrete cut: the bytes to shave to get below the high
    threshold (and to fit at all), and the largest contributor with the change that
    shrinks it."""
    top = contributors[0]
    target = int(capacity * Fraction(str(thresholds["high"]))) if capacity else None
    need = max(0, peak - target + 1) if target is not None else None  # below high: peak < high x capacity
    to_fit = max(0, peak - capacity) if capacity else None
    biggest = max(top["items"], key=lambda i: i["bytes"]) if top["items"] else None
    msg = (f"{top['label']} is the largest part of the {_fmt(peak)} peak: {_fmt(top['bytes'])} "
           f"({100 * top['share']:.1f} %). ")
    if need is not None:
        msg += (f"Cut {_fmt(need)} ({need:,} bytes) to get below {100 * thresholds['high']:.0f} % of the "
                f"{_fmt(capacity)} capacity" + (f", {_fmt(to_fit)} just to fit" if to_fit else "") + ". ")
    advice = _CUT_ADVICE.get(top["category"], _CUT_ADVICE["unknown"])
    # Only the first letter: str.capitalize() lowercases the rest (FSDP, ZeRO, PYTORCH_CUDA_ALLOC_CONF).
    msg += advice[:1].upper() + advice[1:] + "."
    if len(contributors) > 1:
        nxt = contributors[1]
        msg += f" Next: {nxt['label']}, {_fmt(nxt['bytes'])} ({100 * nxt['share']:.1f} %)."
    links = [{**biggest["link"], "label": biggest["name"] or top["label"]}] if biggest and biggest.get("link") else []
    return _finding(
        "what_to_cut", "oom" if risk == "OOM" else "high", f"What to cut: {top['label']}", msg,
        {"category": top["category"], "categoryBytes": top["bytes"], "share": top["share"], "peakBytes": peak,
         "capacityBytes": capacity, "bytesToCutBelowHigh": need, "bytesToCutToFit": to_fit, "threshold": thresholds["high"],
         "largestItem": ({"name": biggest["name"], "bytes": biggest["bytes"]} if biggest else None),
         "next": [{"category": c["category"], "bytes": c["bytes"], "share": c["share"]} for c in contributors[1:3]]},
        links,
    )


# ---------------------------------------------------------------------------
# The answer
# ---------------------------------------------------------------------------


def _co_residence(mods: list[dict]) -> None:
    """Estimate, for each scheduled module that is not a training step, its peak with the
    training state resident: the train state (the largest training step's arguments) stays
    live between steps, and this module's own arguments are assumed to be part of it (an
    eval step reads the same weights), so only the difference adds:
    ``coResidentBytes = peak + max(0, trainArguments - ownArguments)``."""
    steps = [m for m in mods if m["isTrainingStep"] and m.get("argumentBytes") is not None and m.get("heapEvents")]
    if not steps:
        return
    step = max(steps, key=lambda m: m["argumentBytes"])
    for m in mods:
        if m is step or m["isTrainingStep"] or not m.get("heapEvents") or m.get("peakBytes") is None:
            continue
        extra = max(0, step["argumentBytes"] - (m.get("argumentBytes") or 0))
        m["coResidentBytes"] = m["peakBytes"] + extra
        m["coResidentWith"] = step["moduleName"]


def _contributors(items: list[dict], peak: int) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for i in items:
        by.setdefault(i["category"], []).append(i)
    out = []
    for cat, label in CATEGORIES.items():
        rows = sorted(by.get(cat, []), key=lambda i: -i["bytes"])
        if not rows:
            continue
        total = sum(r["bytes"] for r in rows)
        kept = rows[:MAX_ROWS]
        rest = rows[MAX_ROWS:]
        out.append({
            "category": cat, "label": label, "bytes": total, "share": total / peak if peak else 0.0,
            "count": sum(int(r.get("count") or 1) for r in rows),
            "rules": sorted({r["rule"] for r in rows}),
            "items": kept, "othersBytes": sum(r["bytes"] for r in rest), "othersCount": len(rest),
        })
    return sorted(out, key=lambda c: -c["bytes"])



def _module_rows(modules: list[dict], capacity: int | None, thresholds: dict) -> list[dict]:
    """``modules[]`` of the answer: each module's peak, arguments, outputs, own tier and
    step kind, and the co-residence estimate."""
    mods = []
    for m in modules:
        row = {k: m.get(k) for k in ("moduleName", "peakBytes", "totalAllocationBytes", "heapEvents", "error") if m.get(k) is not None}
        for k, src in (("argumentBytes", "entryComputationParametersMib"), ("outputBytes", "maybeLiveOutMib")):
            if m.get(src) is not None:
                row[k] = _mib_bytes(m[src])
        if capacity and m.get("peakBytes") is not None:
            row["utilization"] = m["peakBytes"] / capacity
            row["risk"] = tier_of(m["peakBytes"], capacity, thresholds)
        row["isTrainingStep"] = _is_step(m.get("moduleName") or "")
        row["stepKind"] = step_kind(m.get("moduleName") or "")
        mods.append(row)
    _co_residence(mods)
    return mods


def _others_over_capacity(over: list[dict], rated: str | None, capacity: int | None) -> tuple[str, dict] | None:
    """The words added to the reason and the ``modules_over_capacity`` finding when a
    module other than the rated one is over capacity."""
    others = [o for o in over if o["moduleName"] != rated]
    if not others:
        return None
    names = ", ".join(f"{o['moduleName']} ({100 * o['utilization']:.1f} %)" for o in others[:5])
    return f"; also over capacity: {names}{' and more' if len(others) > 5 else ''}", _finding(
        "modules_over_capacity", "oom", "Other modules exceed the capacity",
        f"{len(others)} module(s) other than the rated {rated or 'evidence'} have a compiled peak above the capacity "
        f"{fmt_bytes(capacity)}: {names}. Each fails when it runs.",
        {"modules": len(others), "capacityBytes": capacity,
         "examples": [{"module": o["moduleName"], "peakBytes": o["peakBytes"], "utilization": o["utilization"]}
                      for o in others[:10]]},
        [{"tool": "memory_viewer", "module_name": o["moduleName"], "label": o["moduleName"]} for o in others[:5]],
    )


def _informative(ev: dict) -> bool:
    return any(i["category"] != "unknown" for i in ev["items"])


def _contributor_source(main: dict | None, compiled: dict | None, head: dict | None) -> tuple[dict | None, str | None]:
    """The evidence whose items are the contributors, and a note when they cannot say
    what holds the peak. The evidence with the largest peak, unless none of its items
    can be told apart (an XLA runtime's allocations carry no op: a TPU's one ``stack``
    region, a GPU BFC allocator's unnamed chunks) while the compiled plan of the same
    run names every buffer live at its peak: then the memory viewer's buffers at the
    compiler's peak, by category and framework op."""
    if main is None:
        return None, None
    if not _informative(main) and compiled is not None and compiled is not main and _informative(compiled):
        why = main.get("contributorsNote") or "its allocations at the peak carry no framework op or region the rules know"
        return compiled, (f"The {head['label']} ({main['peakBytes']:,} bytes) has no breakdown: {why}. "
                          f"These are the buffers live at the compiler's peak of {compiled['moduleName']} "
                          f"({compiled['peakBytes']:,} bytes, memory viewer), what the program itself holds.")
    if not main["items"]:
        return main, main.get("contributorsNote") or "this input has no per-buffer breakdown of its peak"
    if not _informative(main):
        return main, main.get("contributorsNote") or ("none of the allocations live at the peak carries a framework op, "
                                                       "region or stack the rules know (docs/oom_risk.md)")
    return main, main.get("contributorsNote")


def _byte_count(value) -> int | None:
    """A device memory size as the trace states it (kineto writes an integer; a hostile
    or broken file may hold text, a list, a float or a number beyond int64): a positive
    int64, else None, so that such a device is simply not used as the capacity."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        n = int(value)
    except (ValueError, OverflowError):
        return None
    return n if 0 < n < 2**63 else None


def _usage_rows(e: dict) -> list[dict]:
    """The peak figures of one piece of evidence, each a ``usage`` row labelled with what
    it counts (``measure``, one of :data:`MEASURES`): the label reads the same on every
    page, so one run's "peak allocated" is one number everywhere."""
    def row(measure, where, nbytes, detail, link, kind="runtime"):
        return {"kind": kind, "measure": measure, "label": f"{measure} {where}", "bytes": int(nbytes), "detail": detail, "link": link}

    if e["kind"] == "pprof":
        return [row(PEAK_ALLOCATED, f"on {e['device']}", e["peakBytes"],
                    f"live buffer bytes of JAX's device-memory profile {e['profile']}, the largest of {e['profiles']} "
                    "(jax.profiler.save_device_memory_profile)", {**e["link"], "label": "peak"})]
    if e["kind"] == "compiled":
        return [row(COMPILER_HEAP_PEAK, f"of {e['moduleName']}", e["peakBytes"],
                    e.get("peakFrom") or "memory viewer: heap-simulated peak + arguments, outputs and constants",
                    {"tool": "memory_viewer", "module_name": e["moduleName"]}, kind="compiled")]
    if e["kind"] == "allocator":
        link = _peak_link(e)
        rows = [row(PEAK_ALLOCATED, f"of {e['memoryId']}", e["peakInUseBytes"],
                    "stack + heap in use at the allocator's peak in the profiled window", link)]
        if e["lifetimePeakBytes"] > e["peakInUseBytes"]:
            # The same count over a longer time, named as the memory profile's tile names it.
            rows.append(row(f"lifetime {PEAK_ALLOCATED}", f"of {e['memoryId']}", e["lifetimePeakBytes"],
                            "the allocator's peak bytes in use since it was created (before the window too)", link))
        return rows
    if e["kind"] == "torch_trace":
        on = f"on {e['device']}"
        rows = [row(PEAK_ALLOCATED, on, e["allocatedPeakBytes"],
                    "the trace's Total Allocated: bytes in live tensors"
                    + (" (on CPU, only those allocated while the profiler recorded)" if e["device"] == "CPU" else ""),
                    {**e["link"], "label": "peak"})]
        if e["reservedPeakBytes"]:
            t = e.get("reservedPeakTimeMs")
            rows.append(row(PEAK_RESERVED, on, e["reservedPeakBytes"], "the trace's Total Reserved: the caching allocator's segments",
                            {**e["link"], **({"t": repr(t)} if t is not None else {}), "label": "peak reserved"}))
        if e["categoryPeakBytes"]:
            t = e.get("categoryPeakTimeMs")
            rows.append(row(PEAK_CATEGORY_TOTAL, on, e["categoryPeakBytes"],
                            "PyTorch's memory timeline (export_memory_timeline): every category summed, "
                            "tensors made before the profiler started included",
                            {**e["link"], **({"t": repr(t)} if t is not None else {}), "label": "category peak"}))
        return rows
    link = _peak_link(e)
    rows = [row(PEAK_ALLOCATED, f"on {e['host']}", e["activePeakBytes"], "the snapshot's live (requested) bytes at their peak", link)]
    reserved = e["peakReservedBytes"]
    if reserved:
        at = e.get("peakReservedEvent")
        rows.append(row(PEAK_RESERVED, f"on {e['host']}", reserved,
                        f"the caching allocator's segments at their most{f' (event {at})' if at is not None else ''}: "
                        f"the maximum over the trace; {e['reservedAtPeakBytes']:,} bytes at the allocated peak, "
                        f"{e['finalReservedBytes']:,} at the end",
                        {**link, "t": str(at)} if at is not None else link))
    return rows


def assess(*, compiled: dict | None = None, allocator: dict | None = None, snapshot: dict | None = None,
           modules: list[dict] | None = None, requested: dict | None = None, device_name: str | None = None,
           devices: list[dict] | None = None, torch_trace: dict | None = None,
           trace_devices: list[dict] | None = None,
           thresholds: dict | None = None, module_choice: dict | None = None,
           jax_mem_fraction: float | None = None, pprof: dict | None = None) -> dict[str, Any]:
    """The OOM-risk payload from whatever evidence there is (see the module docstring).
    ``trace_devices``: a PyTorch trace's ``deviceProperties`` (``id``, ``name``,
    ``totalGlobalMem``)."""
    thresholds = dict(thresholds or DEFAULT_THRESHOLDS)
    evs = [e for e in (compiled, allocator, snapshot, torch_trace, pprof) if e is not None]
    # A text-only dump (buffer-assignment text, no heap-simulator trace) has no simulated
    # peak: its memory viewer says 0. Use what the text does say (the allocations XLA
    # makes) or, with nothing, leave the peak unknown rather than rate "0 bytes" LOW.
    unknown_peak = compiled is not None and not compiled["peakBytes"] and len(evs) == 1
    usage = []
    headline = []  # per evidence: its usage row whose bytes are its peakBytes
    for e in evs:
        rows = _usage_rows(e)
        usage += rows
        headline.append(max(rows, key=lambda u: u["bytes"]))  # the first of equal figures
    main = max(evs, key=lambda e: e["peakBytes"]) if evs else None
    peak = main["peakBytes"] if main else 0
    measure = headline[evs.index(main)]["measure"] if main else "peak"

    # Capacity: the first source that applies (order documented above).
    cap = None
    if requested:
        cap = dict(requested)
    elif allocator and allocator.get("capacityBytes"):
        cap = {"bytes": allocator["capacityBytes"], "source": "allocator",
               "detail": f"allocator {allocator['memoryId']}: stack + heap + free bytes (memory profile memoryCapacity)"}
    elif any(d.get("memory_size") for d in devices or []):
        # Device planes (formats/xplane_devices.py): the smallest device bounds what fits.
        d = min((d for d in devices if d.get("memory_size")), key=lambda d: int(d["memory_size"]))
        label = d.get("gpu_device_name") or d.get("device_vendor") or ""
        cap = {"bytes": int(d["memory_size"]), "source": "device_plane",
               "detail": f"memory_size stat of {d['plane']}{' (' + label + ')' if label else ''} in the profile"}
    elif torch_trace and any(_byte_count(d.get("totalGlobalMem")) for d in trace_devices or []):
        # PyTorch traces state each device (kineto's deviceProperties: cudaDeviceProp /
        # hipDeviceProp_t totalGlobalMem): the device the peak is on, else the smallest.
        did = torch_trace["device"].rsplit(":", 1)[-1]
        with_mem = [d for d in trace_devices if _byte_count(d.get("totalGlobalMem"))]
        d = next((d for d in with_mem if str(d.get("id")) == did), None) \
            or min(with_mem, key=lambda d: _byte_count(d["totalGlobalMem"]))
        cap = {"bytes": _byte_count(d["totalGlobalMem"]), "source": "trace_device",
               "detail": f"totalGlobalMem of device {d.get('id')} ({d.get('name') or 'unnamed'}) in the trace's deviceProperties"}
    elif snapshot and snapshot["ooms"]:
        o = snapshot["ooms"][0]
        cap = {"bytes": int(o["deviceFreeBytes"]) + int(o["reservedBytes"]), "source": "oom_event",
               "detail": f"free on the device ({o['deviceFreeBytes']:,}) + reserved by this process ({o['reservedBytes']:,}) "
                         f"at the oom event {o['event']}: a lower bound of the device's memory"}
    elif not device_name and devices:
        device_name = next((d["gpu_device_name"] for d in devices if d.get("gpu_device_name")), None)
    if cap is None and device_name and device_capacity(device_name):
        b, label = device_capacity(device_name)
        cap = {"bytes": b, "source": "device_table", "detail": f"{label} (nominal, from the device name {device_name!r})"}
    cap = _jax_preallocation(cap, modules, devices, device_name, jax_mem_fraction)
    capacity = cap["bytes"] if cap else None
    oom_events = snapshot["ooms"] if snapshot else []
    risk = tier_of(peak, capacity, thresholds, bool(oom_events))
    if unknown_peak and not oom_events:
        risk = "UNKNOWN"
    util = peak / capacity if capacity else None
    if oom_events:
        reason = f"{len(oom_events)} out-of-memory event(s) recorded"
    elif unknown_peak:
        reason = "peak unknown: the module has no heap-simulator trace and no allocation sizes (dump with --xla_dump_hlo_as_proto)"
        util = None
    elif capacity is None:
        # Said in words: the page asks for the device's memory in its field, the report
        # for --device-memory (each adds its own way to give it).
        reason = "capacity unknown: the device's memory is not in the files and was not given"
    elif peak > capacity:
        reason = f"{measure} {fmt_bytes(peak)} > capacity {fmt_bytes(capacity)} ({peak:,} > {capacity:,} bytes)"
    else:
        reason = f"{measure} is {100 * util:.2f} % of capacity ({'>=' if risk != 'LOW' else '<'} " \
                 f"{100 * thresholds['high' if risk == 'HIGH' else 'medium']:.0f} %)"
    csrc, note = _contributor_source(main, compiled, headline[evs.index(main)] if main else None)
    items = list(csrc["items"]) if csrc else []
    src_peak = csrc["peakBytes"] if csrc else 0
    if main and peak and not items and risk in ("HIGH", "OOM"):
        # Every HIGH/OOM answer names what the peak is made of, even when this input has
        # no breakdown (a trace without allocation details, a text-only dump).
        items = [{"category": "unknown", "rule": "this input has no per-buffer breakdown of its peak", "bytes": peak,
                  "count": 1, "name": headline[evs.index(main)]["label"], "shape": "", "opName": "",
                  "link": dict(headline[evs.index(main)]["link"])}]
    mods = _module_rows(modules or [], capacity, thresholds)
    frags = [f for f in (fragmentation(e) for e in evs) if f]
    contributors = _contributors(items, src_peak or peak)
    found = findings(evs, modules or [], peak)
    # Every module over capacity is named, not only the rated one: each fails when it runs.
    over = over_capacity(mods, capacity)
    also = _others_over_capacity(over, compiled["moduleName"] if compiled else None, capacity)
    reason, found = (reason + also[0], found + [also[1]]) if also else (reason, found)
    if risk in ("HIGH", "OOM") and contributors:
        found.append(what_to_cut(contributors, peak, capacity, thresholds, risk))
    return {
        "risk": risk,
        "reason": reason,
        "peakBytes": peak,
        "peakSource": headline[evs.index(main)]["label"] if main else None,
        "peakMeasure": headline[evs.index(main)]["measure"] if main else None,
        "capacityBytes": capacity,
        "capacitySource": cap["source"] if cap else None,
        "capacityDetail": cap["detail"] if cap else None,
        "deviceBytes": cap.get("deviceBytes") if cap else None,
        "utilization": util,
        "headroomBytes": capacity - peak if capacity else None,
        "thresholds": {**thresholds, "rule": "OOM: an OOM event, or peak > capacity; HIGH: utilization >= high; "
                                             "MEDIUM: >= medium; LOW: below; UNKNOWN: no capacity"},
        "usage": usage,
        "fragmentation": frags,
        "contributors": contributors,
        "contributorsSource": headline[evs.index(csrc)]["label"] if csrc else None,
        "contributorsPeakBytes": src_peak if csrc else None,
        "contributorsMeasure": headline[evs.index(csrc)]["measure"] if csrc else None,
        "contributorsNote": note,  # why they are empty, unknown or from another figure (_contributor_source)
        "findings": found,
        "oomEvents": oom_events,
        "modules": mods,
        "overCapacity": over,
        "module": compiled["moduleName"] if compiled else None,
        "moduleChoice": module_choice if compiled else None,
        "version": 1,
    }
