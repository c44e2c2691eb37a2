"""Memory viewer: XLA buffer assignment -> heap over program order, buffers at peak.

A static, compiler view of one HLO module in one memory space ("color"). The numbers are
XProf 2.24.2's, byte for byte: :func:`from_hlo` returns what XProf's
``GET /data/plugin/profile/data?tag=memory_viewer&module_name=...&memory_space=...``
returns (``tensorflow.profiler.PreprocessResult`` as proto3 JSON, camelCase names, default
values left out, int64 fields as strings), as a Python dict, so that
``json.loads(xprof_body) == from_hlo(...)`` minus the ``"profscope"`` key. XProf's
algorithm (``xprof/convert/hlo_proto_to_memory_visualization_utils.cc``) in short:

1. Pick the heap-simulator trace of the memory space: the trace whose first event's
   buffer lives in a non-indefinite allocation of that color (lowest allocation index
   first); failing that, the trace with the most events of that color.
2. Replay it: ALLOC adds the buffer's size, FREE drops a reference (the canonical buffer
   leaves the heap when its count reaches zero), SHARE_WITH makes a buffer an alias of a
   canonical one (re-adding the canonical's size when it had been freed). x is the event
   index ("program order", not time); ``heapSizes[i]`` is the heap *before* event ``i``,
   plus one final point after the last event.
3. Allocations with an indefinite lifetime (entry parameters, maybe-live-out outputs,
   constants) are not simulated: their sizes are added to every point as a constant
   offset.
4. Peak = the first maximum of the simulated heap; the buffers live then (plus, for memory
   space 0, the largest buffer of every indefinite allocation) are ``maxHeap``, in program
   order, with all buffers under 16 KiB merged into one ``small (<16384 bytes)`` entry.
5. Padded size = the size XLA assigned; unpadded size = the shape's size under the default
   layout (a tuple counts one 8-byte pointer per element).

XProf behaviours reproduced on purpose (checked against XProf 2.24.2's own output on the
demo programs and on synthetic modules; see ``tests/test_memory_viewer.py``):

* ``peakHeapSizePosition`` is the index of the event that *caused* the peak, and
  ``heapSizes`` holds the heap before each event, so the maximum of ``heapSizes`` is at
  ``peakHeapSizePosition + 1``.
* ``peakUnpaddedHeapMib`` and ``unpaddedHeapSizes`` add the *padded* size of the
  indefinite allocations (there is no unpadded figure for those).
* ``maxHeapBySize`` is ordered by libstdc++'s ``std::sort`` (introsort, not stable):
  buffers of equal size come out in the order that exact algorithm leaves them, which
  ``profscope.model.stdsort`` replays step by step.
* Indefinite allocations count in the heap offset only when they hold at least one buffer
  of non-zero size (``indefiniteBufferAllocationMib`` counts them all).
* A buffer shared with a canonical buffer (SHARE_WITH) is shown at peak under the most
  recent sharer's name; the bar keeps the sharer's own size.
* Buffer-block colours come from XProf's 209-colour palette, indexed by the number of
  timeline rectangles drawn so far (rectangles under one point of a 4096-point canvas are
  not drawn and do not advance the index), except buffers live at peak, which keep their
  ``maxHeap`` colour.
* The shape of a buffer inside a tuple is resolved with the *last* element of its shape
  index only (XProf and XLA both do that).
* Thread-local allocations are not indefinite in 2.24.2: they are left out of the heap
  offset, ``indefiniteLifetimes``, ``totalBufferAllocationMib`` and
  ``indefiniteBufferAllocationMib``, yet still counted in ``nonReusableMib``. (XLA's
  memory-usage report counts them in its total.)
* A buffer's span is closed once, when it first leaves the heap; a canonical buffer whose
  memory comes back through SHARE_WITH keeps that first end. A sharer's span starts at
  its SHARE_WITH and ends at its own FREE.
* ``bufferBlocks`` holds every buffer of the traced allocation that has a span, sharers
  included; allocations without a heap-simulator trace (thread-local, tuples) get no
  container.
* The first event of each trace names its allocation through an ``int``: a buffer id
  beyond int32 wraps, the allocation then has no trace (the trace is still found by
  counting events, but ``bufferBlocks`` is empty). Logical buffer ids, span keys and
  steps are int32 fields and wrap the same way; allocation and buffer ids in
  ``indefiniteLifetimes`` are int64, written as strings.
* Allocations are visited in index order, whatever their order in the proto.
* ``allocationTimeline`` is empty and so left out (XProf puts its ``entry_url`` there,
  empty for the data endpoint).

profscope's own additions live under the top-level key ``"profscope"`` (no XProf field is
named so):

``memorySpace``
    the memory space (color) converted.
``memorySpaces``
    :func:`memory_spaces` of the module.
``heapSimulatorTrace``
    index of the heap-simulator trace replayed, or null when none applies.
``heapEvents``
    number of events in that trace (``len(heapSizes) == heapEvents + 1`` when > 0).
``smallBufferSize``
    16384: buffers below this many bytes are merged into the "small" entry.
``smallBuffersAtPeak``
    how many buffers that "small" entry of ``maxHeap`` merges (0 when there is none).
``heapEventKinds``, ``heapEventBuffers``
    one entry per point of ``heapSizes``, like ``hloInstructionNames``: the event's kind
    as one character ("A" alloc, "F" free, "S" share-with; "-" for the point after the
    last event and for an event whose buffer the assignment lacks) in one string, and
    its logical buffer id (-1 for that last point). ``hloInstructionNames`` names the
    instruction being processed, which for a FREE is the buffer's last user: these say
    which buffer entered or left the heap.
``heapBuffersWithoutSpan``
    ``{id: [name, bytes]}`` of the buffers those events move that have no span, hence
    no block (one that SHARE_WITHs memory still live): the page names them too.
``totals``
    exact byte counts behind the page's overview (all ints unless noted):
    ``peakBytes`` (= ``peakHeapMib`` in bytes: simulated peak + indefinite offset),
    ``peakUnpaddedBytes`` (XProf's definition, see above),
    ``simulatedPeakBytes`` / ``simulatedPeakUnpaddedBytes`` (the heap-simulated part only),
    ``temporaryAtPeakBytes`` (= ``simulatedPeakBytes``: temporaries live at the peak),
    ``indefiniteOffsetBytes`` (the constant added to every point),
    ``argumentBytes`` (entry computation parameters), ``outputBytes`` (maybe-live-out),
    ``nonReusableBytes`` (thread-local and tuple allocations),
    ``totalAllocationBytes`` (every allocation of this color but thread-local ones),
    ``indefiniteAllocationBytes`` (parameters, outputs, constants),
    ``temporaryAllocationBytes`` (= total - indefinite: the temp allocation incl. holes),
    ``paddingBytes`` (= ``peakBytes - peakUnpaddedBytes``), ``paddingShare`` (float,
    padding / peak, 0 when the peak is 0), ``fragmentationBytes`` (= total allocation -
    peak), ``fragmentationPercent`` (float, 100 * fragmentation / temporary allocation,
    XProf's "fragmentation %", 0 when there is no temporary allocation),
    ``maxScopedVmemBytes`` (memory space 1 only).
``wholeProgramBuffers``
    buffers that live for the whole program, never freed inside it: one entry per
    indefinite allocation (``kind`` "parameter", "output" or "constant", with its largest
    buffer, ``sizeBytes`` being the allocation's size) and one per heap-simulated buffer still allocated after the
    last event (``kind`` "never-freed"). Each: ``kind``, ``allocationIndex``,
    ``logicalBufferId``, ``name``, ``sizeBytes``, ``shape``, ``tfOpName``.
``peakBuffers``
    every buffer counted in ``totals.peakBytes``, each once, with its exact bytes (the
    compare of two modules, tools/compare_memory_viewer.py, attributes the peak delta to
    them): the indefinite allocations (any memory space; ``bytes`` = the allocation's
    size, as ``indefiniteOffsetBytes`` adds it) then the heap-simulated buffers live at
    the peak in program order (``bytes`` = the size the replay added for it). Unlike
    ``maxHeap`` nothing is merged into a ``small`` entry. Each: ``id`` (logical buffer),
    ``name`` (shown name, instruction and shape index), ``instruction``, ``shape``,
    ``bytes``, ``unpaddedBytes``, ``category`` (``maxHeap``'s ``groupName``), ``tfOpName``,
    ``source`` ("file:line" or ""), ``opCode``, ``indefinite`` (bool).

:func:`page_view` adds ``profscope.heapPositions`` (the program-order index of every
point kept in ``heapSizes``), ``profscope.heapPoints`` (the heap event at each kept
point, see there) and, when it cut blocks, ``profscope.bufferBlocksOmitted``.
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Any

import numpy as np

from profscope.errors import BadInput, NotFound
from profscope.model.gc_pause import gc_paused
from profscope.model.protos import hlo_pb2
from profscope.model.stdsort import std_sort_order

try:  # the native twin of _simulate_py (setup.py builds it where it can)
    from profscope.tools import _heap_sim
except ImportError:  # pragma: no cover - no C compiler at install time
    _heap_sim = None
try:  # the native twin of _buffers_py
    from profscope.tools import _hlo_index
except ImportError:  # pragma: no cover - no C compiler at install time
    _hlo_index = None

__all__ = [
    "SMALL_BUFFER_SIZE",
    "MEMORY_SPACE_NAMES",
    "memory_spaces",
    "from_hlo",
    "page_view",
    "summary",
]

SMALL_BUFFER_SIZE = 16 * 1024
MEMORY_SPACE_NAMES = {
    # The names of XProf 2.24's memory-space picker (memory_viewer_control).
    0: "HBM",
    1: "VMEM",
    2: "Sflag",
    3: "CMEM",
    4: "SMEM",
    5: "Host",
    6: "SparseCore",
}
_MEMORY_SPACE_DESCRIPTIONS = {
    0: "default memory space: device memory (HBM), or host RAM for the CPU backend",
    1: "alternate memory space (TPU vector memory, VMEM)",
    2: "TPU sync flags",
    3: "TPU common memory (CMEM)",
    4: "TPU scalar memory (SMEM)",
    5: "host memory (memory kind pinned_host)",
    6: "SparseCore memory",
}

_MIB = float(1 << 20)
_U64 = (1 << 64) - 1
_POINTER_SIZE = 8
_CANVAS = 4096.0  # XProf's timeline canvas, points per side

_ALLOC = hlo_pb2.HeapSimulatorTrace.Event.ALLOC
_FREE = hlo_pb2.HeapSimulatorTrace.Event.FREE
_SHARE_WITH = hlo_pb2.HeapSimulatorTrace.Event.SHARE_WITH
_EVENT_CHARS = {_ALLOC: ord("A"), _FREE: ord("F"), _SHARE_WITH: ord("S")}
_EVENT_WORDS = {"A": "alloc", "F": "free", "S": "share"}

_PT = hlo_pb2.PrimitiveType
_TUPLE = _PT.Value("TUPLE")
_TOKEN = _PT.Value("TOKEN")
_OPAQUE = _PT.Value("OPAQUE_TYPE")
_BUFFER = _PT.Value("BUFFER")
_INVALID = _PT.Value("PRIMITIVE_TYPE_INVALID")
_TYPE_NAMES = {v: ("opaque" if n == "OPAQUE_TYPE" else "invalid" if v == _INVALID else n.lower())
               for n, v in _PT.items()}
_BYTE_WIDTH = {
    v: w
    for names, w in (
        (("PRED", "S1", "S2", "S4", "S8", "U1", "U2", "U4", "U8", "F8E5M2", "F8E4M3",
          "F8E4M3FN", "F8E4M3B11FNUZ", "F8E3M4", "F8E5M2FNUZ", "F8E4M3FNUZ", "F4E2M1FN",
          "F8E8M0FNU", "F6E3M2FN", "F6E2M3FN"), 1),
        (("S16", "U16", "F16", "BF16"), 2),
        (("S32", "U32", "F32"), 4),
        (("S64", "U64", "F64", "C64"), 8),
        (("C128",), 16),
    )
    for n in names
    for v in (_PT.Value(n),)
}

# XProf's block palette (xprof/frontend/app/common/utils/utils.ts), 209 entries.
_BUFFER_COLORS = (
    "#e91e63 #2196f3 #81c784 #4dd0e1 #3f51b5 #e53935 #ff9100 #b39ddb #90a4ae #26c6da "
    "#ad1457 #03a9f4 #2196f3 #c2185b #795548 #f9a825 #00bfa5 #880e4f #d500f9 #ce93d8 "
    "#ec407a #4caf50 #ff8f00 #ffca28 #ab47bc #00e5ff #ff9800 #40c4ff #1e88e5 #9fa8da "
    "#bf360c #00b8d4 #f57f17 #64b5f6 #e040fb #ffab91 #4caf50 #01579b #66bb6a #ef9a9a "
    "#558b2f #fb8c00 #ff4081 #00e676 #388e3c #424242 #6d4c41 #c62828 #616161 #00897b "
    "#448aff #0d47a1 #607d8b #673ab7 #00c853 #2e7d32 #ffa726 #5e35b1 #ba68c8 #8d6e63 "
    "#00bcd4 #ff6f00 #f4511e #ff1744 #9e9e9e #d81b60 #4a148c #26a69a #689f38 #7b1fa2 "
    "#b0bec5 #304ffe #f48fb1 #ffd600 #ffb74d #8bc34a #303f9f #5d4037 #80cbc4 #ffcc80 "
    "#00acc1 #3e2723 #ff5252 #ff7043 #e91e63 #ea80fc #e65100 #d84315 #212121 #ff5722 "
    "#1976d2 #2962ff #bdbdbd #3949ab #69f0ae #d50000 #ffd740 #c0ca33 #ff6e40 #00b0ff "
    "#2979ff #e64a19 #7c4dff #607d8b #009688 #ffb300 #c51162 #ffc400 #29b6f6 #3d5afe "
    "#76ff03 #cddc39 #b388ff #5c6bc0 #9e9d24 #7cb342 #ef5350 #fdd835 #ef6c00 #4fc3f7 "
    "#6200ea #004d40 #ff8a65 #ffab00 #80deea #0097a7 #7e57c2 #ff6d00 #1565c0 #455a64 "
    "#ffc107 #4527a0 #ff5722 #f44336 #f57c00 #827717 #a5d6a7 #82b1ff #9c27b0 #ff80ab "
    "#e1bee7 #78909c #311b92 #00695c #4e342e #3f51b5 #651fff #9e9e9e #81d4fa #f8bbd0 "
    "#b71c1c #0091ea #673ab7 #a1887f #4db6ac #ffa000 #6a1b9a #43a047 #bcaaa4 #546e7a "
    "#aeea00 #e57373 #ffccbc #006064 #fbc02d #ffeb3b #8bc34a #039be5 #8e24aa #80d8ff "
    "#009688 #9ccc65 #512da8 #ffc107 #757575 #0277bd #ff3d00 #33691e #03a9f4 #00838f "
    "#ff8a80 #283593 #f50057 #1a237e #90caf9 #9c27b0 #aa00ff #aed581 #afb42b #9575cd "
    "#d32f2f #64dd17 #f44336 #795548 #cddc39 #ff9e80 #7986cb #dd2c00 #0288d1 #ff9800 "
    "#263238 #00796b #42a5f5 #8c9eff #1b5e20 #ffab40 #536dfe #00bcd4 #f06292"
).split()
assert len(_BUFFER_COLORS) == 209


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def _mib(n: int) -> float:
    """XProf's BytesToMiB: static_cast<double>(int64) / (1 << 20)."""
    return float(n) / _MIB


def _i32(n: int) -> int:
    """Truncate like a store into a proto int32 field."""
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n & 0x80000000 else n


def _u64(n: int) -> int:
    return n & _U64


def _report(progress, fraction: float | None = None, message: str | None = None) -> None:
    if progress is not None:
        progress.update(fraction=fraction, message=message)


# ---------------------------------------------------------------------------
# Shapes (xla::ShapeUtil / xla::Layout, as far as XProf prints and sizes them)
# ---------------------------------------------------------------------------


def _layout_string(layout) -> str:
    parts = ["{", ",".join(str(d) for d in layout.minor_to_major)]
    extra = []
    if len(layout.tiles):
        tiles = []
        for tile in layout.tiles:
            dims = []
            for d in tile.dimensions:
                if d >= 0:
                    dims.append(str(d))
                elif d == -(1 << 63):  # Tile::kCombineDimension
                    dims.append("*")
                else:
                    dims.append(f"Invalid value {d}")
            tiles.append("(" + ",".join(dims) + ")")
        extra.append("T" + "".join(tiles))
    tail = layout.tail_padding_alignment_in_elements or 1
    if tail != 1:
        extra.append(f"L({tail})")
    if layout.element_size_in_bits:
        extra.append(f"E({layout.element_size_in_bits})")
    if layout.memory_space:
        extra.append(f"S({layout.memory_space})")
    if layout.dynamic_shape_metadata_prefix_bytes > 0:
        extra.append(f"M({layout.dynamic_shape_metadata_prefix_bytes})")
    if extra:
        parts.append(":" + "".join(extra))
    parts.append("}")
    return "".join(parts)


def _is_array(et: int) -> bool:
    return et not in (_TUPLE, _TOKEN, _OPAQUE, _BUFFER, _INVALID)


def _shape_string(shape) -> str:
    """ShapeUtil::HumanStringWithLayout of a ShapeProto."""
    et = shape.element_type
    if et == _TUPLE:
        out = ["("]
        for i, sub in enumerate(shape.tuple_shapes):
            if i:
                out.append(f", /*index={i}*/" if i % 5 == 0 else ", ")
            out.append(_shape_string(sub))
        out.append(")")
        return "".join(out)
    name = _TYPE_NAMES.get(et, "invalid")
    dims = shape.dimensions
    if not _is_array(et) or not len(dims):
        text = name + "[]"
    else:
        dyn = shape.is_dynamic_dimension
        items = []
        for i, d in enumerate(dims):
            if i < len(dyn) and dyn[i]:
                items.append("?" if d == -(1 << 63) else f"<={d}")
            else:
                items.append(str(d))
        text = f"{name}[{','.join(items)}]"
    if not _is_array(et) or not shape.HasField("layout"):
        return text
    layout = _layout_string(shape.layout)
    if not len(dims) and layout == "{}":
        return text
    return text + layout


_I64_MAX = (1 << 63) - 1


def _unpadded_size(shape) -> int:
    """ShapeUtil::ByteSizeOf(shape with default layout, pointer_size=8)."""
    et = shape.element_type
    if et == _TUPLE:
        return _POINTER_SIZE * len(shape.tuple_shapes)
    if et == _TOKEN:
        return 0
    if et == _OPAQUE:
        return _POINTER_SIZE
    if not _is_array(et) or et not in _BYTE_WIDTH:
        raise BadInput(f"shape with element type {et} has no byte size")
    n = 1
    for d in shape.dimensions:
        n *= d
        if abs(n) > _I64_MAX:  # stop before the product grows to thousands of digits
            raise BadInput(f"shape {_shape_string(shape)[:200]} has no byte size: its element count is beyond 2^63-1")
    # SetToDefaultLayout only resets minor_to_major: a packed element size stays.
    bits = shape.layout.element_size_in_bits if shape.HasField("layout") else 0
    size = -((-n * bits) // 8) if bits else n * _BYTE_WIDTH[et]
    # ShapeUtil::ByteSizeOf is an int64 and XLA checks dimensions >= 0 (an unbounded
    # dynamic one, -2^63, has no size): anything else is a corrupt proto, which would
    # overflow the numpy int64 heap curves
    if not 0 <= size <= _I64_MAX:
        raise BadInput(f"shape {_shape_string(shape)[:200]} has no byte size: {size} is outside 0..2^63-1")
    return size


def _resolve_shape(shape, shape_index) -> Any:
    """XProf's ResolveShapeIndex: only the last index is used."""
    if len(shape_index):
        i = shape_index[-1]
        if i < 0:  # a ShapeIndex counts tuple elements from 0; Python would count from the end
            raise BadInput(f"logical buffer at shape index {list(shape_index)}: a negative tuple index")
        if i < len(shape.tuple_shapes):
            return shape.tuple_shapes[i]
    return shape


# ---------------------------------------------------------------------------
# Source locations (xprof/utils/hlo_module_utils.cc GetSourceInfo)
# ---------------------------------------------------------------------------


def _simple_atoi(text: str, bits: int = 32) -> int | None:
    """absl::SimpleAtoi into a signed integer of ``bits`` bits; None when it fails."""
    s = text.strip(" \t\n\v\f\r")
    body = s[1:] if s[:1] in "+-" else s
    if not body or not body.isascii() or not body.isdigit():
        return None
    v = int(s)
    return v if -(1 << (bits - 1)) <= v < (1 << (bits - 1)) else None


class _SourceInfos:
    def __init__(self, sfi):
        self.sfi = sfi
        self.cache: dict[int, str] = {}
        self.json_cache: dict[tuple, dict | None] = {}

    def stack(self, frame_id: int) -> str:
        got = self.cache.get(frame_id)
        if got is not None:
            return got
        sfi = self.sfi
        frames, locations, files = sfi.stack_frames, sfi.file_locations, sfi.file_names
        lines = []
        fid = frame_id
        seen = set()
        while 0 < fid <= len(frames) and fid not in seen:
            seen.add(fid)  # XProf loops forever on a cycle; we stop
            frame = frames[fid - 1]
            fid = frame.parent_frame_id
            file_name, line, col = "", -1, -1
            loc_id = frame.file_location_id
            if 0 < loc_id <= len(locations):
                loc = locations[loc_id - 1]
                line, col = loc.line, loc.column
                if 0 < loc.file_name_id <= len(files):
                    file_name = files[loc.file_name_id - 1]
            lines.append(f"{file_name}:{line}:{col}")
        text = "\n".join(lines)
        self.cache[frame_id] = text
        return text

    def json(self, instruction) -> dict | None:
        """The SourceInfo JSON of an instruction, or None when XProf sets none (one dict
        per distinct location, shared by every object that has it: do not mutate)."""
        return self.json_of(instruction.metadata)

    def json_of(self, md) -> dict | None:
        """:meth:`json` of an instruction's ``metadata`` already read (upb makes a new
        object on each read of a message field)."""
        key = (md.source_file, md.source_line, md.stack_frame_id)
        try:
            return self.json_cache[key]
        except KeyError:
            pass
        out = self.json_cache[key] = self._json(md)
        return out

    def _json(self, md) -> dict | None:
        stack = self.stack(md.stack_frame_id)
        if md.source_file:
            file_name, line = md.source_file, md.source_line
        else:
            if not stack:
                return None
            first = stack.split("\n", 1)[0]
            parts = first.split(":")
            if len(parts) < 2:
                return None
            file_name = parts[0]
            parsed = _simple_atoi(parts[1])
            line = -1 if parsed is None else parsed
        if not file_name:
            return None
        out: dict[str, Any] = {"fileName": file_name}
        if line:
            out["lineNumber"] = line
        if stack:
            out["stackFrame"] = stack
        return out


# ---------------------------------------------------------------------------
# The module, indexed (XProf's HloProtoBufferWrapper)
# ---------------------------------------------------------------------------


class _LB:
    """One logical buffer that belongs to an allocation (XProf's LogicalBufferStruct)."""

    __slots__ = ("id", "size", "unpadded", "color", "alloc", "offset", "instr", "shape_index",
                 "shape_key", "ref", "canon", "span_start", "span_end")

    def __init__(self, id_, size, unpadded, color, alloc, offset, instr, shape_index, shape_key):
        self.id = id_
        self.size = size
        self.unpadded = unpadded
        self.color = color
        self.alloc = alloc  # position of its BufferAllocationProto
        self.offset = offset
        self.instr = instr
        self.shape_index = shape_index
        self.shape_key = shape_key
        self.ref = 0
        self.canon: _LB | None = None
        self.span_start: int | None = None
        self.span_end = 0

    def name(self) -> str:
        if self.shape_index:
            return f"{self.instr.name}{{{','.join(str(i) for i in self.shape_index)}}}"
        return self.instr.name


def _category(a) -> str:
    if a.is_entry_computation_parameter:
        return "Parameter"
    if a.maybe_live_out:
        return "Output"
    if a.is_thread_local:
        return "Thread-local"
    if a.is_constant:
        return "Constant"
    return "Temporary"


def _indefinite(a) -> bool:
    # XProf 2.24.2 no longer counts thread-local allocations as indefinite (observed:
    # they are neither in indefiniteLifetimes nor in the heap offset nor in the totals).
    return bool(a.is_entry_computation_parameter or a.is_constant or a.maybe_live_out)


def _buffers_py(ba, instrs: dict[int, Any]) -> tuple[dict[int, tuple], dict[tuple, list], None]:
    """Each logical buffer's (size, unpadded size, color, instruction, shape index, shape
    key) by id, and the shape entries ([ShapeProto, unpadded size, its string or None])
    by shape key (instruction id, last shape index); None: no trace bytes (see
    :func:`_buffers_native`)."""
    # XLA's ComputeLogicalBufferUnpaddedSizes: every logical buffer, whether assigned
    # or not (XProf CHECK-fails the whole conversion when one cannot be sized).
    # Shapes are resolved per (instruction, last shape index) and sized and printed
    # once per distinct shape. What each buffer's _LB needs is read here too, once: a
    # field read through upb makes a new object each time, and reading them again in
    # _Module's assignment loop cost as much as this loop. (A repeated id: the last.)
    shape_cache: dict[tuple, list] = {}
    by_shape: dict[bytes, list] = {}
    per_id: dict[int, tuple] = {}
    instrs_get = instrs.get
    for lb in ba.logical_buffers:
        loc = lb.defined_at
        iid = loc.instruction_id
        index = tuple(loc.shape_index)
        key = (iid, index[-1] if index else None)
        ins = instrs_get(iid)
        if ins is None:
            raise BadInput(
                f"logical buffer {lb.id} is defined at instruction id {iid}, "
                "which the module does not have")
        entry = shape_cache.get(key)
        if entry is None:
            sub = _resolve_shape(ins.shape, index)
            skey = sub.SerializeToString(deterministic=True)
            entry = by_shape.get(skey)
            if entry is None:
                entry = by_shape[skey] = [sub, _unpadded_size(sub), None]
            shape_cache[key] = entry
        per_id[lb.id] = (lb.size, entry[1], lb.color, ins, index, key)
    return per_id, shape_cache, None


def _index_native() -> bool:
    """Whether :func:`_buffers_native` runs: when ``_hlo_index`` is built, unless
    ``PROFSCOPE_NATIVE=0`` (tests compare both paths)."""
    return _hlo_index is not None and os.environ.get("PROFSCOPE_NATIVE", "1") != "0"


def _buffers_native(wire: bytes, instrs: dict[int, Any]) -> tuple[dict[int, tuple], dict[tuple, list], list] | None:
    """:func:`_buffers_py` from one pass over the HloProto's bytes (_hlo_index.c), which
    also sorts the buffers' shapes into the module's distinct ones (by their bytes: a
    ShapeProto is parsed and sized once per distinct shape, not serialized per buffer),
    and each heap-simulator trace's bytes in ``wire`` (the third item, for
    :func:`_simulate_native`); None where that pass declines (the twin then answers, or
    raises XProf's error). The
    distinct shapes are sized in their first buffer's order: a shape that cannot be
    sized raises the twin's error, that of its first buffer."""
    out = _hlo_index.index_buffers(wire)
    if out is None:
        return None
    ids, sizes, colors, iids, classes, starts, idx, offsets, lengths, trace_offsets, trace_lengths = (
        np.frombuffer(b, dtype=np.int64).tolist() for b in out)
    entries = []
    for off, n in zip(offsets, lengths):
        sub = hlo_pb2.ShapeProto.FromString(wire[off:off + n])
        entries.append([sub, _unpadded_size(sub), None])
    per_id: dict[int, tuple] = {}
    shape_cache: dict[tuple, list] = {}
    for lb_id, size, color, iid, c, a, b in zip(ids, sizes, colors, iids, classes, starts, starts[1:]):
        index = tuple(idx[a:b]) if b > a else ()
        key = (iid, index[-1] if index else None)
        entry = shape_cache[key] = entries[c]
        per_id[lb_id] = (size, entry[1], color, instrs[iid], index, key)
    view = memoryview(wire)
    traces = [view[off:off + n] for off, n in zip(trace_offsets, trace_lengths)]
    return per_id, shape_cache, traces


class _Module:
    def __init__(self, hlo: hlo_pb2.HloProto, progress=None, wire: bytes | None = None):
        """``wire``: ``hlo``'s own serialized bytes, when the caller has them: its logical
        buffers are then indexed in one native pass over them (:func:`_buffers_native`)."""
        if not isinstance(hlo, hlo_pb2.HloProto):
            raise TypeError("expected a profscope.model.protos.hlo_pb2.HloProto")
        if not hlo.HasField("hlo_module"):
            raise BadInput("the HloProto holds no HLO module")
        if not hlo.HasField("buffer_assignment"):
            raise BadInput(
                f"module {hlo.hlo_module.name!r} has no buffer assignment: the memory viewer "
                "needs the HloProto XLA writes after optimizations (a profile's 'Hlo Proto' "
                "or a dump's *after_optimizations.hlo.pb), not the one before")
        self.hlo = hlo
        module = hlo.hlo_module
        ba = hlo.buffer_assignment
        self.ba = ba

        instrs: dict[int, Any] = {}
        for comp in module.computations:
            for ins in comp.instructions:
                instrs[ins.id] = ins
        self.instrs = instrs
        _report(progress, 0.02, "indexing buffers")

        per_id, shape_cache, self.trace_bytes = (
            (_buffers_native(wire, instrs) if wire is not None and _index_native() else None)
            or _buffers_py(ba, instrs))
        if sum(rec[1] for rec in per_id.values()) > _I64_MAX:  # the unpadded heap curve is an int64 array too
            raise BadInput("the logical buffers' shapes add up to more than 2^63-1 bytes (corrupt sizes)")
        self.shape_cache = shape_cache

        allocs = list(ba.buffer_allocations)
        self.allocs = allocs
        by_index: dict[int, int] = {}
        for pos, a in enumerate(allocs):
            by_index[a.index] = pos
        # GetBufferAllocations iterates allocations by index (one per index, the last).
        self.alloc_order = [by_index[i] for i in sorted(by_index)]

        lbs: dict[int, _LB] = {}
        per_id_get = per_id.get
        for pos in (by_index[i] for i in by_index):
            a = allocs[pos]
            for asg in a.assigned:
                lb_id = asg.logical_buffer_id
                rec = per_id_get(lb_id)
                if rec is None:
                    continue
                size, unpadded, color, ins, index, key = rec
                lbs[lb_id] = _LB(lb_id, size, unpadded, color, pos, asg.offset, ins, index, key)
        self.lbs = lbs

        # The trace's own buffer_allocation_index is not trusted: the allocation of the
        # first event's buffer is (the last trace wins).
        trace_of_alloc: dict[int, int] = {}
        for i, trace in enumerate(ba.heap_simulator_traces):
            if not len(trace.events):
                continue
            # XProf reads the first buffer id into an `int`: ids beyond int32 wrap.
            lb = lbs.get(_i32(trace.events[0].buffer_id))
            if lb is None:
                continue
            trace_of_alloc[allocs[lb.alloc].index] = i
        self.trace_of_alloc = trace_of_alloc
        self.sources = _SourceInfos(module.stack_frame_index)
        # Each color's replay, made once per index (_simulate)
        self.sims: dict[int, _Sim] = {}

    # -- lookups -----------------------------------------------------------------------

    def allocations(self, color: int) -> list[int]:
        return [p for p in self.alloc_order if self.allocs[p].color == color]

    def shape_string(self, lb: _LB) -> str:
        entry = self.shape_cache[lb.shape_key]
        if entry[2] is None:
            entry[2] = _shape_string(entry[0])
        return entry[2]

    def colors(self) -> list[int]:
        seen = {0}
        seen.update(a.color for a in self.allocs)
        seen.update(lb.color for lb in self.lbs.values())
        return sorted(seen)

    def trace_id(self, color: int) -> int:
        for pos in self.allocations(color):
            a = self.allocs[pos]
            if _indefinite(a):
                continue
            t = self.trace_of_alloc.get(a.index)
            if t is not None:
                return t
        best, best_count = -1, 0
        lbs = self.lbs
        for i, trace in enumerate(self.ba.heap_simulator_traces):
            count = 0
            for ev in trace.events:
                lb = lbs.get(ev.buffer_id)
                if lb is not None and lb.color == color:
                    count += 1
            if count > best_count:
                best, best_count = i, count
        return best


# ---------------------------------------------------------------------------
# Heap simulation (XProf's HeapSimulatorStats / ProcessHeapSimulatorTrace)
# ---------------------------------------------------------------------------


class _Sim:
    def __init__(self):
        self.trace_id = -1
        self.events = 0
        self.heap: list[int] = []
        self.unpadded: list[int] = []
        self.names: list[str] = []
        # Per heap point, like names: the event's kind (_EVENT_CHARS) and logical buffer.
        self.kinds = bytearray()
        self.buffers: list[int] = []
        self.peak = 0
        self.peak_unpadded = 0
        self.peak_pos = 0
        self.peak_list: list[int] = []
        self.peak_display: dict[int, int] = {}
        self.seen: list[_LB] = []  # buffers the trace mentions, by id
        self.live_at_end: list[int] = []
        self.with_names = False  # names, kinds and buffers made (_simulate's with_names)


def _root(lb: _LB, limit: int) -> _LB:
    n = 0
    while lb.canon is not None:
        lb = lb.canon
        n += 1
        if n > limit:
            raise BadInput("Failed to process heap simulator trace: SHARE_WITH events form a "
                           "cycle of canonical buffers")
    return lb


def native_enabled() -> bool:
    """Whether the heap simulation runs in ``profscope.tools._heap_sim``: when it is built,
    unless ``PROFSCOPE_NATIVE=0`` (tests compare both paths)."""
    return _heap_sim is not None and os.environ.get("PROFSCOPE_NATIVE", "1") != "0"


def _simulate(m: _Module, color: int, progress=None, with_names: bool = True) -> _Sim:
    """The replay of ``color``'s heap-simulator trace: natively where it can be, else (and
    for every trace the native pass declines: one the replay rejects, whose error text is
    the twin's) by :func:`_simulate_py`.

    Made once per index and color (``m.sims``): :func:`view_and_summary` makes the view
    and the ranking row from one index, and the row's replay is the view's (the same
    trace, buffers and peaks; names only the view's), a second replay that cost 0.13 of
    its 2.2 CPU s on the compare_peers module's 700,000 events (docs/performance.md)."""
    sim = m.sims.get(color)
    if sim is not None and (sim.with_names or not with_names):
        return sim
    sim = _simulate_native(m, color, with_names) if native_enabled() else None
    if sim is None:
        sim = _simulate_py(m, color, progress, with_names)
    sim.with_names = with_names
    m.sims[color] = sim
    return sim


def _simulate_native(m: _Module, color: int, with_names: bool) -> _Sim | None:
    """:func:`_simulate_py` in one C pass over the trace's wire bytes (_heap_sim.c); None
    where that pass declines. The buffers' spans are written back to the ``_LB``s the
    trace mentions, as the twin leaves them; the heap curves and event buffers are int64
    arrays (the twin's are lists of the same values)."""
    sim = _Sim()
    trace_id = m.trace_id(color)
    traces = m.ba.heap_simulator_traces
    if trace_id < 0 or trace_id >= len(traces):
        return sim
    lbs = m.lbs
    ids = np.array(sorted(lbs), dtype=np.int64)
    order = [lbs[i] for i in ids.tolist()]
    size = np.array([lb.size for lb in order], dtype=np.int64) if order else np.zeros(0, np.int64)
    unpadded = np.array([lb.unpadded for lb in order], dtype=np.int64) if order else np.zeros(0, np.int64)
    if len(order) and (size.dtype != np.int64 or unpadded.dtype != np.int64):
        return None
    span_start = np.empty(len(ids), dtype=np.int64)
    span_end = np.empty(len(ids), dtype=np.int64)
    seen = np.empty(len(ids), dtype=np.uint8)
    data = m.trace_bytes[trace_id] if m.trace_bytes is not None else traces[trace_id].SerializeToString()
    out = _heap_sim.simulate(data, ids, size, unpadded,
                             span_start, span_end, seen, with_names)
    if out is None:
        return None
    (n, heap, unp, kinds, buffers, names, peak, peak_unp, peak_pos, peak_step,
     ent_ids, ent_gone, peak_entries, log) = out
    seen_idx = np.flatnonzero(seen).tolist()
    seen_lbs = [order[k] for k in seen_idx]
    if len({lb.alloc for lb in seen_lbs}) != 1:
        return None  # the twin raises XProf's error for it (nothing written back yet)
    for k, lb, start, end in zip(seen_idx, seen_lbs, span_start[seen_idx].tolist(), span_end[seen_idx].tolist()):
        if start >= 0:
            lb.span_start, lb.span_end = start, end
    sim.trace_id, sim.events = trace_id, n
    sim.heap, sim.unpadded = heap, unp
    if with_names:
        sim.names, sim.kinds, sim.buffers = names, bytearray(kinds), buffers
    sim.peak, sim.peak_unpadded, sim.peak_pos = peak, peak_unp, peak_pos
    sim.seen = seen_lbs
    live = ent_gone[:peak_entries] > peak_step
    sim.peak_list = ent_ids[:peak_entries][live].tolist()
    disp: dict[int, int] = {}
    for s, root_id, shown in log.tolist():
        if s > peak_step:
            break
        disp[root_id] = shown
    sim.peak_display = disp
    sim.live_at_end = ent_ids[ent_gone == np.iinfo(np.int64).max].tolist()
    return sim


def _simulate_py(m: _Module, color: int, progress=None, with_names: bool = True) -> _Sim:
    sim = _Sim()
    trace_id = m.trace_id(color)
    traces = m.ba.heap_simulator_traces
    if trace_id < 0 or trace_id >= len(traces):
        return sim
    sim.trace_id = trace_id
    events = traces[trace_id].events
    n = len(events)
    sim.events = n
    last = n - 1
    lbs = m.lbs
    limit = len(lbs) + 1

    heap = unp = peak = peak_unp = peak_pos = 0
    heap_tl = [0] * (n + 1)
    unp_tl = [0] * (n + 1)
    names = [""] * (n + 1) if with_names else []
    # The event's kind ('A', 'F', 'S'; '-' for the point after the last event and for
    # events naming a buffer the assignment does not have) and buffer id, for the page's
    # hover: hloInstructionNames alone names the instruction being processed, which for a
    # FREE is the buffer's last user, not the buffer.
    kinds = bytearray(b"-" * (n + 1)) if with_names else bytearray()
    ev_buffers = [-1] * (n + 1) if with_names else []
    # The list of live (canonical) buffer ids, in program order, is kept as entries with
    # the step at which each left; the list at the peak is rebuilt once at the end instead
    # of being copied at every new peak.
    ent_ids: list[int] = []
    ent_gone: list[float] = []
    active: dict[int, list[int]] = {}
    display_log: list[tuple[int, int, int]] = []
    step = 0
    peak_step = -1
    peak_entries = 0
    seen: set[_LB] = set()
    seen_add = seen.add
    lbs_get = lbs.get
    inf = math.inf
    chunk = max(100_000, n // 20)
    next_report = chunk

    def fail(msg: str):
        raise BadInput(f"Failed to process heap simulator trace: {msg}")

    i = -1
    for ev in events:
        i += 1
        heap_tl[i] = heap
        unp_tl[i] = unp
        if with_names:
            names[i] = ev.instruction_name
            ev_buffers[i] = ev.buffer_id
        if i == next_report:
            next_report += chunk
            if progress is not None:
                _report(progress, 0.05 + 0.6 * i / n, f"replaying heap events {i:,}/{n:,}")
        lb = lbs_get(ev.buffer_id)
        if lb is None:
            continue
        seen_add(lb)
        kind = ev.kind
        if with_names and kind in _EVENT_CHARS:
            kinds[i] = _EVENT_CHARS[kind]
        if kind == _ALLOC:
            root = lb
            if root.canon is not None:
                root = _root(root, limit)
            root.ref += 1
            # IncreaseMemoryUsage(lb, init_span=true): the buffer itself, not its root.
            step += 1
            k = len(ent_ids)
            ent_ids.append(lb.id)
            ent_gone.append(inf)
            got = active.get(lb.id)
            if got is None:
                active[lb.id] = [k]
            else:
                got.append(k)
            heap += lb.size
            unp += lb.unpadded
            if heap > peak:
                peak, peak_pos, peak_unp = heap, i, unp
                peak_step, peak_entries = step, k + 1
            lb.span_start = i
            lb.span_end = last
        elif kind == _FREE:
            root = lb
            if root.canon is not None:
                root = _root(root, limit)
            root.ref -= 1
            if root.ref <= 0:
                if root.ref < 0:
                    fail(f"Buffer {lb.id}is freed multiple times.")
                step += 1
                for k in active.pop(root.id, ()):
                    ent_gone[k] = step
                heap -= root.size
                if heap < 0:
                    fail(f"Heap size should be non-negative, but get: {heap}")
                unp -= root.unpadded
                # 2.24.2 closes a buffer's span once, when it first leaves the heap: a
                # canonical buffer whose memory comes back through SHARE_WITH keeps it.
                if root.span_start is not None and root.span_end == last:
                    root.span_end = i
            if lb.canon is not None and lb.span_start is not None:
                lb.span_end = i
        elif kind == _SHARE_WITH:
            canon = lbs_get(ev.share_with_canonical_id)
            if canon is None:
                continue
            lb.canon = canon
            root = _root(canon, limit)
            root.ref += 1
            if root.ref == 1:
                # SHARE_WITH after FREE: the canonical memory comes back, shown under the
                # sharer's name from now on.
                step += 1
                display_log.append((step, root.id, lb.id))
                lb.span_start = i
                lb.span_end = last
                step += 1
                k = len(ent_ids)
                ent_ids.append(root.id)
                ent_gone.append(inf)
                got = active.get(root.id)
                if got is None:
                    active[root.id] = [k]
                else:
                    got.append(k)
                heap += root.size
                unp += root.unpadded
                if heap > peak:
                    peak, peak_pos, peak_unp = heap, i, unp
                    peak_step, peak_entries = step, k + 1
        else:
            fail(f"Unhandled event kind: {kind}")

    heap_tl[n] = heap
    unp_tl[n] = unp
    seen_allocs = {lb.alloc for lb in seen}
    sim.seen = sorted(seen, key=lambda lb: lb.id)
    if len(seen_allocs) != 1:
        fail("All heap simulation should work out of a single buffer allocation, actual "
             f"seen_buffer_allocations.size():{len(seen_allocs)}")
    sim.heap, sim.unpadded, sim.names = heap_tl, unp_tl, names
    sim.kinds, sim.buffers = kinds, ev_buffers
    sim.peak, sim.peak_unpadded, sim.peak_pos = peak, peak_unp, peak_pos
    sim.peak_list = [ent_ids[k] for k in range(peak_entries) if ent_gone[k] > peak_step]
    disp: dict[int, int] = {}
    for s, root_id, shown in display_log:
        if s > peak_step:
            break
        disp[root_id] = shown
    sim.peak_display = disp
    sim.live_at_end = [ent_ids[k] for k in range(len(ent_ids)) if ent_gone[k] == inf]
    return sim


# ---------------------------------------------------------------------------
# JSON pieces (proto3 JSON: camelCase, defaults left out, int64 as strings)
# ---------------------------------------------------------------------------


def _heap_object(m: _Module, lb: _LB, color: int) -> dict:
    ins = lb.instr
    shape = m.shape_string(lb)
    op_name = ins.metadata.op_name
    obj: dict[str, Any] = {
        "numbered": color,
        "label": f"{ins.name}: {shape} # {op_name}",
    }
    if _i32(lb.id):
        obj["logicalBufferId"] = _i32(lb.id)
    if lb.size:
        obj["logicalBufferSizeMib"] = _mib(lb.size)
    if lb.unpadded:
        obj["unpaddedShapeMib"] = _mib(lb.unpadded)
    name = lb.name()
    if name:
        obj["instructionName"] = name
    if shape:
        obj["shapeString"] = shape
    if op_name:
        obj["tfOpName"] = op_name
    obj["groupName"] = _category(m.allocs[lb.alloc])
    if ins.opcode:
        obj["opCode"] = ins.opcode
    src = m.sources.json(ins)
    if src is not None:
        obj["sourceInfo"] = src
    return obj


def _small_object(total: int, color: int) -> dict:
    obj: dict[str, Any] = {"numbered": color, "label": f"small (<{SMALL_BUFFER_SIZE} bytes)",
                           "logicalBufferId": -1}
    if total:
        obj["logicalBufferSizeMib"] = _mib(total)
    return obj


def _allocation_json(m: _Module, a) -> dict:
    out: dict[str, Any] = {}
    if a.index:
        out["id"] = str(a.index)
    if a.size:
        out["sizeMib"] = _mib(a.size)
    attrs = []
    if a.is_entry_computation_parameter:
        attrs.append("entry computation parameter")
    if a.maybe_live_out:
        attrs.append("may-be live out")
    if not a.is_thread_local and not a.is_tuple:
        attrs.append("reusable")
    if attrs:
        out["attributes"] = attrs
    buffers = []
    shapes = []
    for asg in a.assigned:
        b: dict[str, Any] = {}
        if asg.logical_buffer_id:
            b["id"] = str(asg.logical_buffer_id)
        shape = ""
        lb = m.lbs.get(asg.logical_buffer_id)
        if lb is not None:
            shape = m.shape_string(lb)
            if shape:
                b["shape"] = shape
        if asg.size:
            b["sizeMib"] = _mib(asg.size)
        if lb is not None:
            if lb.instr.name:
                b["hloName"] = lb.instr.name
            if lb.shape_index:
                b["shapeIndex"] = [str(i) for i in lb.shape_index]
        buffers.append(b)
        shapes.append(shape)
    if buffers:
        out["logicalBuffers"] = buffers
        if shapes[0] and all(s == shapes[0] for s in shapes):
            out["commonShape"] = shapes[0]
    return out


def _max_scoped_vmem(m: _Module, color: int) -> tuple[int, str]:
    if color != 1:
        return 0, ""

    def as_int(entry: dict, key: str) -> int:
        # Numbers as numbers, or int64 as proto3 JSON writes them: strings.
        v = entry.get(key)
        if isinstance(v, bool) or v is None:
            return 0
        if isinstance(v, (int, float)):
            return int(v)
        if isinstance(v, str):
            return _simple_atoi(v, 64) or 0
        return 0

    best, best_name = 0, ""
    for comp in m.hlo.hlo_module.computations:
        for ins in comp.instructions:
            raw = ins.backend_config
            if not raw:
                continue
            try:
                cfg = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(cfg, dict):
                continue
            entries = cfg.get("used_scoped_memory_configs")
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if isinstance(entry, dict) and as_int(entry, "memory_space") == color:
                    size = as_int(entry, "size")
                    if size > best:
                        best, best_name = size, ins.name
    return best, best_name


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _space_name(color: int) -> str:
    return MEMORY_SPACE_NAMES.get(color, f"Memory space {color}")


def _spaces(m: _Module) -> list[dict]:
    out = []
    for color in m.colors():
        positions = m.allocations(color)
        trace = m.trace_id(color)
        out.append({
            "id": color,
            "name": _space_name(color),
            "description": _MEMORY_SPACE_DESCRIPTIONS.get(color, "backend-specific memory space"),
            "allocations": len(positions),
            "allocationBytes": sum(m.allocs[p].size for p in positions),
            "heapSimulatorTrace": trace if trace >= 0 else None,
        })
    return out


def memory_spaces(hlo: hlo_pb2.HloProto) -> list[dict]:
    """The memory spaces (colors) of a module: 0 always, plus every color an allocation or
    logical buffer has. Each: ``id``, ``name`` (XProf's picker name, e.g. "HBM", "VMEM",
    "Host"), ``description``, ``allocations`` (count), ``allocationBytes`` (their total),
    ``heapSimulatorTrace`` (index of the trace the viewer replays for it, or None)."""
    return _spaces(_Module(hlo))


def _check_space(m: _Module, memory_space) -> int:
    try:
        color = int(memory_space)
    except (TypeError, ValueError) as e:
        raise NotFound(f"memory space {memory_space!r} is not a number") from e
    known = m.colors()
    if color not in known:
        listed = ", ".join(f"{c} ({_space_name(c)})" for c in known)
        raise NotFound(f"module {m.hlo.hlo_module.name!r} has no memory space {color}; "
                       f"it has: {listed}")
    return color


def _total_allocation(m: _Module, color: int) -> int:
    """totalBufferAllocationMib in bytes: every allocation of the color in the proto but
    the thread-local ones (XProf 2.24.2; XLA's memory-usage report counts those too)."""
    return sum(a.size for a in m.allocs if a.color == color and not a.is_thread_local)


def _indefinite_buffers(m: _Module, color: int) -> list[_LB]:
    """XProf's LogicalBuffersWithIndefiniteLifetime: the largest buffer of each."""
    out = []
    lbs = m.lbs
    for pos in m.allocations(color):
        a = m.allocs[pos]
        if not _indefinite(a):
            continue
        best, best_size = None, 0
        for asg in a.assigned:
            lb = lbs.get(asg.logical_buffer_id)
            if lb is not None and _u64(lb.size) > best_size:
                best, best_size = lb, _u64(lb.size)
        if best is not None:
            out.append(best)
    return out


def _spans(sim: _Sim) -> dict[str, dict]:
    """XProf's logicalBufferSpans: each buffer the trace moves that has a span, by id."""
    spans = {}
    for lb in sim.seen:
        start, limit, lb_id = lb.span_start, lb.span_end, lb.id
        if start is None:
            continue
        # int32 fields in XProf's proto: wrapped only when out of range (a call per
        # field was a third of this loop over 70,000 buffers)
        if not -0x80000000 <= start <= 0x7FFFFFFF:
            start = _i32(start)
        if not -0x80000000 <= limit <= 0x7FFFFFFF:
            limit = _i32(limit)
        if not -0x80000000 <= lb_id <= 0x7FFFFFFF:
            lb_id = _i32(lb_id)
        span = {}
        if start:
            span["start"] = start
        if limit:
            span["limit"] = limit
        spans[str(lb_id)] = span
    return spans


def _collector_paused(fn):
    """``fn`` run with Python's cyclic collector paused (model/gc_pause.py). A module's
    conversion makes a few objects per logical buffer (its ``_LB``, key tuples, a block
    dict, a span dict: ~400,000 on the compare_peers module's 70,000 buffers), and the
    collections their allocations trigger walked every one of them again: 0.2-0.27 of
    from_hlo's 0.9 CPU s and 0.2 of summary's 0.63 there (docs/performance.md). Reference
    counting frees them as before; the collector runs again after."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        with gc_paused():
            return fn(*args, **kwargs)
    return paused


@_collector_paused
def from_hlo(hlo: hlo_pb2.HloProto, memory_space: int = 0, progress=None, *,
            strict: bool = True, module: _Module | None = None, arrays: bool = False) -> dict:
    """XProf 2.24.2's memory-viewer ``PreprocessResult`` of one module, as a JSON-able dict.

    ``memory_space`` is the color (0: default memory). ``progress``, if given, gets
    ``progress.update(fraction=..., message=...)`` calls along the way. Raises
    :class:`~profscope.errors.BadInput` for a module without buffer assignment or with an
    inconsistent heap-simulator trace (XProf answers no data), and
    :class:`~profscope.errors.NotFound` for a memory space the module does not have,
    unless ``strict=False``: then the answer is XProf's for such a space (module and
    entry computation names only). See the module docstring for the ``"profscope"`` key.
    ``module``: ``hlo``'s index when the caller made it already (:func:`view_and_summary`).
    ``arrays``: the three per-event lists (``heapSizes``, ``unpaddedHeapSizes``,
    ``profscope.heapEventBuffers``) left as the numpy arrays they are made from (float64,
    float64, int32), for a caller that only encodes the result with orjson's
    ``OPT_SERIALIZE_NUMPY`` (the same bytes as the lists: orjson writes a float64 and an
    int32 element as it writes a float and an int) or cuts its page (:func:`page_view`):
    ``tolist`` made 2.1 million Python numbers on compare_peers' module of 700,000
    events (~70 MB of fresh pages), which the encoder and the page then read back.
    """
    _report(progress, 0.0, "indexing the module")
    m = module if module is not None else _Module(hlo, progress)
    if strict:
        color = _check_space(m, memory_space)
    else:
        # XProf reads the parameter with SimpleAtoi and falls back to 0.
        parsed = memory_space if isinstance(memory_space, int) else _simple_atoi(str(memory_space))
        color = parsed or 0
    _report(progress, 0.05, "replaying the heap-simulator trace")
    sim = _simulate(m, color, progress)
    _report(progress, 0.7, "collecting buffers at peak")
    allocs, lbs = m.allocs, m.lbs

    # -- PeakUsageSnapshot ---------------------------------------------------------------
    heap_objects: list[dict] = []
    heap_sizes_b: list[int] = []
    buffer_color: dict[int, int] = {}
    colorno = 0
    small_total = 0
    small_count = 0
    indefinite_add = 0

    def add(lb: _LB):
        nonlocal colorno, small_total, small_count
        if _u64(lb.size) < SMALL_BUFFER_SIZE:
            small_total += lb.size
            small_count += 1
        else:
            buffer_color[lb.id] = colorno
            heap_objects.append(_heap_object(m, lb, colorno))
            heap_sizes_b.append(lb.size)
            colorno += 1

    indefinite = _indefinite_buffers(m, color)
    for lb in indefinite:
        indefinite_add += allocs[lb.alloc].size
        if color == 0:
            add(lb)
    complete = True
    for buffer_id in sim.peak_list:
        lb = lbs.get(sim.peak_display.get(buffer_id, buffer_id))
        if lb is None:
            complete = False
            break
        add(lb)
    if complete and small_total != 0:
        heap_objects.append(_small_object(small_total, colorno))
        heap_sizes_b.append(small_total)
        colorno += 1

    # -- GeneratePreprocessResult -------------------------------------------------------
    # XProf sorts by size, largest first, with std::sort: ties come out in libstdc++'s
    # order (a > b on the MiB doubles == -a < -b).
    keys = np.array([_mib(s) for s in heap_sizes_b], dtype=np.float64)
    order = std_sort_order(-keys).tolist() if len(keys) else []
    by_size_to_max_heap = order
    max_heap_to_by_size = [0] * len(order)
    for pos, idx in enumerate(order):
        max_heap_to_by_size[idx] = pos

    add_mib = _mib(indefinite_add)
    result: dict[str, Any] = {}
    if len(sim.heap):
        heap_arr = np.asarray(sim.heap, dtype=np.int64).astype(np.float64) / _MIB + add_mib
        unp_arr = np.asarray(sim.unpadded, dtype=np.int64).astype(np.float64) / _MIB + add_mib
        result["heapSizes"] = heap_arr if arrays else heap_arr.tolist()
        result["unpaddedHeapSizes"] = unp_arr if arrays else unp_arr.tolist()
    if heap_objects:
        result["maxHeap"] = heap_objects
        result["maxHeapBySize"] = [heap_objects[i] for i in order]
    spans = _spans(sim)
    if spans:
        result["logicalBufferSpans"] = spans
    if order:
        result["maxHeapToBySize"] = max_heap_to_by_size
        result["bySizeToMaxHeap"] = by_size_to_max_heap
    module = m.hlo.hlo_module
    if module.name:
        result["moduleName"] = module.name
    if module.entry_computation_name:
        result["entryComputationName"] = module.entry_computation_name
    peak_mib = _mib(sim.peak) + add_mib
    peak_unpadded_mib = _mib(sim.peak_unpadded) + add_mib
    if peak_mib:
        result["peakHeapMib"] = peak_mib
    if peak_unpadded_mib:
        result["peakUnpaddedHeapMib"] = peak_unpadded_mib
    if _i32(sim.peak_pos):
        result["peakHeapSizePosition"] = _i32(sim.peak_pos)

    # -- NoteSpecialAllocations ---------------------------------------------------------
    params = non_reusable = live_out = 0
    lifetimes = []
    positions = m.allocations(color)
    for pos in positions:
        a = allocs[pos]
        if a.is_entry_computation_parameter:
            params += a.size
        if a.is_thread_local or a.is_tuple:
            non_reusable += a.size
        if a.maybe_live_out:
            live_out += a.size
        if _indefinite(a):
            lifetimes.append(_allocation_json(m, a))
    total_alloc = _total_allocation(m, color)
    indefinite_alloc = sum(a.size for a in allocs if a.color == color and _indefinite(a))
    for key, value in (("entryComputationParametersMib", params),
                       ("nonReusableMib", non_reusable),
                       ("maybeLiveOutMib", live_out)):
        if value:
            result[key] = _mib(value)
    if lifetimes:
        result["indefiniteLifetimes"] = lifetimes
    if total_alloc:
        result["totalBufferAllocationMib"] = _mib(total_alloc)
    if indefinite_alloc:
        result["indefiniteBufferAllocationMib"] = _mib(indefinite_alloc)
    if sim.names:
        result["hloInstructionNames"] = sim.names
    scoped, scoped_name = _max_scoped_vmem(m, color)
    if scoped > 0:
        result["maxScopedVmemAllocationMib"] = _mib(scoped)
        if scoped_name:
            result["maxScopedVmemInstructionName"] = scoped_name

    # -- ConvertAllocationTimeline ------------------------------------------------------
    _report(progress, 0.8, "laying out buffer blocks")
    blocks = _buffer_blocks(m, color, positions, buffer_color)
    if blocks:
        result["bufferBlocks"] = blocks

    # -- profscope extras ---------------------------------------------------------------
    peak_bytes = sim.peak + indefinite_add
    peak_unpadded_bytes = sim.peak_unpadded + indefinite_add
    temp_alloc = total_alloc - indefinite_alloc
    fragmentation = total_alloc - peak_bytes
    padding = peak_bytes - peak_unpadded_bytes
    totals = {
        "peakBytes": peak_bytes,
        "peakUnpaddedBytes": peak_unpadded_bytes,
        "simulatedPeakBytes": sim.peak,
        "simulatedPeakUnpaddedBytes": sim.peak_unpadded,
        "temporaryAtPeakBytes": sim.peak,
        "indefiniteOffsetBytes": indefinite_add,
        "argumentBytes": params,
        "outputBytes": live_out,
        "nonReusableBytes": non_reusable,
        "totalAllocationBytes": total_alloc,
        "indefiniteAllocationBytes": indefinite_alloc,
        "temporaryAllocationBytes": temp_alloc,
        "paddingBytes": padding,
        "paddingShare": (padding / peak_bytes) if peak_bytes else 0.0,
        "fragmentationBytes": fragmentation,
        "fragmentationPercent": (100.0 * fragmentation / temp_alloc) if temp_alloc else 0.0,
        "maxScopedVmemBytes": scoped,
    }
    result["profscope"] = {
        "memorySpace": color,
        "memorySpaces": _spaces(m),
        "heapSimulatorTrace": sim.trace_id if sim.trace_id >= 0 else None,
        "heapEvents": sim.events,
        "smallBufferSize": SMALL_BUFFER_SIZE,
        # The buffers merged into maxHeap's "small" entry (0 when it has none).
        "smallBuffersAtPeak": small_count if complete and small_total != 0 else 0,
        "totals": totals,
        "wholeProgramBuffers": _whole_program(m, color, indefinite, sim),
        "peakBuffers": _peak_buffers(m, indefinite, sim),
    }
    if len(sim.heap):
        result["profscope"]["heapEventKinds"] = sim.kinds.decode("ascii")
        buffers = np.asarray(sim.buffers, dtype=np.int64).astype(np.int32)
        result["profscope"]["heapEventBuffers"] = buffers if arrays else buffers.tolist()
        # bufferBlocks names and sizes every buffer with a span; these have none.
        result["profscope"]["heapBuffersWithoutSpan"] = {
            str(_i32(lb.id)): [lb.name(), lb.size] for lb in sim.seen if lb.span_start is None}
    _report(progress, 1.0, "done")
    return result


def _peak_buffer(m: _Module, lb: _LB, size: int, indefinite: bool) -> dict:
    ins = lb.instr
    src = m.sources.json(ins)
    line = src.get("lineNumber") if src else None
    return {
        "id": lb.id,
        "name": lb.name(),
        "instruction": ins.name,
        "shape": m.shape_string(lb),
        "bytes": size,
        "unpaddedBytes": lb.unpadded,
        "category": _category(m.allocs[lb.alloc]),
        "tfOpName": ins.metadata.op_name,
        "source": f"{src['fileName']}:{line}" if src and line else (src["fileName"] if src else ""),
        "opCode": ins.opcode,
        "indefinite": indefinite,
    }


def _peak_buffers(m: _Module, indefinite: list[_LB], sim: _Sim) -> list[dict]:
    """``profscope.peakBuffers``: what ``peakBytes`` is the sum of, buffer by buffer.

    The sizes are the ones the peak was summed from: an indefinite allocation adds its
    allocation's size to every point (``indefinite_add``), and the replay (``_simulate``)
    adds ``lbs[id].size`` for each id of ``peak_list`` (an ALLOC pushes the buffer itself,
    a SHARE_WITH after FREE pushes the canonical root with its size). The name shown is
    ``peak_display``'s, as ``maxHeap``'s is.
    """
    out = [_peak_buffer(m, lb, m.allocs[lb.alloc].size, True) for lb in indefinite]
    for buffer_id in sim.peak_list:
        counted = m.lbs.get(buffer_id)
        if counted is None:
            continue
        shown = m.lbs.get(sim.peak_display.get(buffer_id, buffer_id)) or counted
        out.append(_peak_buffer(m, shown, counted.size, False))
    return out


def _whole_program(m: _Module, color: int, indefinite: list[_LB], sim: _Sim) -> list[dict]:
    out = []

    def entry(kind: str, lb: _LB) -> dict:
        return {
            "kind": kind,
            "allocationIndex": m.allocs[lb.alloc].index,
            "logicalBufferId": lb.id,
            "name": lb.name(),
            "sizeBytes": lb.size,
            "shape": m.shape_string(lb),
            "tfOpName": lb.instr.metadata.op_name,
        }

    for lb in indefinite:
        a = m.allocs[lb.alloc]
        kind = ("parameter" if a.is_entry_computation_parameter else
                "output" if a.maybe_live_out else "constant")
        e = entry(kind, lb)
        e["sizeBytes"] = a.size  # the allocation is what stays
        out.append(e)
    done = set()
    for buffer_id in sim.live_at_end:
        lb = m.lbs.get(buffer_id)
        if lb is None or buffer_id in done:
            continue
        done.add(buffer_id)
        out.append(entry("never-freed", lb))
    return out


def _buffer_blocks(m: _Module, color: int, positions: list[int],
                   buffer_color: dict[int, int]) -> list[dict]:
    allocs = m.allocs
    traces = m.ba.heap_simulator_traces
    offsets: list[int] = []
    total_y = 0
    total_x = 0
    for pos in positions:
        a = allocs[pos]
        if _indefinite(a):
            continue
        t = m.trace_of_alloc.get(a.index)
        if t is None:
            continue
        offsets.append(total_y)
        total_y += a.size
        if t >= len(traces):
            continue
        total_x = max(total_x, len(traces[t].events))
    if not total_y or not total_x:
        return []
    scale_x = _CANVAS / total_x
    scale_y = _CANVAS / total_y
    node_id = 0

    def drawn(width: int, height: int) -> bool:
        return not (float(width) * scale_x < 1.0 or float(height) * scale_y < 1.0)

    blocks: list[dict] = []
    k = 0
    lbs_get = m.lbs.get
    for pos in positions:
        a = allocs[pos]
        if _indefinite(a) or a.index not in m.trace_of_alloc:
            continue
        base = offsets[k]
        k += 1
        category = _category(a)
        container: dict[str, Any] = {"logicalBufferId": -1, "name": category}
        if base:
            container["offset"] = float(base)
        if a.size:
            container["size"] = float(a.size)
        if _i32(total_x):
            container["endStep"] = _i32(total_x)
        container["category"] = category
        container["color"] = "#ffffff"
        blocks.append(container)
        if drawn(_u64(total_x), _u64(a.size)):
            node_id += 1
        # 2.24.2 draws every buffer with a span, sharers included.
        drawn_lbs = [lb for lb in map(lbs_get, [asg.logical_buffer_id for asg in a.assigned])
                     if lb is not None and lb.span_start is not None]
        node_id = _allocation_blocks(m, drawn_lbs, base, node_id, scale_x, scale_y, buffer_color, blocks)
    return blocks


def _allocation_blocks(m: _Module, lbs: list[_LB], base: int, node_id: int, scale_x: float, scale_y: float,
                       buffer_color: dict[int, int], blocks: list[dict]) -> int:
    """The blocks of one allocation's buffers, appended to ``blocks``; returns the next
    node id (XProf's color index: it counts the blocks drawn, container included).

    The one loop of the memory viewer that runs per buffer (70,000 on the compare_peers
    module): XProf's proto fields stored as int32 (ids, steps) or uint64 (offsets,
    sizes) are wrapped only when out of range (:func:`_i32`, :func:`_u64`: a call each
    was a fifth of the loop), an instruction's metadata read once (upb makes a new
    object on each read of a message field), and a field left out when zero, as proto3's
    JSON printer does."""
    shape_cache = m.shape_cache
    json_of = m.sources.json_of
    color_of = buffer_color.get
    categories: dict[int, str] = {}  # by allocation position: _category reads four fields
    n_colors = len(_BUFFER_COLORS)
    for lb in lbs:
        lb_id, start, end = lb.id, lb.span_start, lb.span_end
        width = end - start
        if width < 0 or width > _U64:
            width &= _U64
        y = base + lb.offset
        if y < 0 or y > _U64:
            y &= _U64
        height = lb.size
        if height < 0 or height > _U64:
            height &= _U64
        block: dict[str, Any] = {}
        if not -0x80000000 <= lb_id <= 0x7FFFFFFF:
            lb_id = _i32(lb_id)
        if lb_id:
            block["logicalBufferId"] = lb_id
        ins = lb.instr
        name = ins.name
        if lb.shape_index:
            name = f"{name}{{{','.join(str(i) for i in lb.shape_index)}}}"
        if name:
            block["name"] = name
        if y:
            block["offset"] = float(y)
        if height:
            block["size"] = float(height)
        if not -0x80000000 <= start <= 0x7FFFFFFF:
            start = _i32(start)
        if start:
            block["startStep"] = start
        if not -0x80000000 <= end <= 0x7FFFFFFF:
            end = _i32(end)
        if end:
            block["endStep"] = end
        md = ins.metadata
        op_name = md.op_name
        if op_name:
            block["tfOpName"] = op_name
        group = categories.get(lb.alloc)
        if group is None:
            group = categories[lb.alloc] = _category(m.allocs[lb.alloc])
        block["category"] = group
        src = json_of(md)
        if src is not None:
            block["sourceInfo"] = src
        entry = shape_cache[lb.shape_key]
        shape = entry[2]
        if shape is None:
            shape = entry[2] = _shape_string(entry[0])
        if shape:
            block["shapeString"] = shape
        if lb.unpadded:
            block["unpaddedSize"] = float(lb.unpadded)
        c = color_of(lb.id)
        block["color"] = _BUFFER_COLORS[(c if c is not None else node_id) % n_colors]
        blocks.append(block)
        # XProf's drawn test (see drawn() in _buffer_blocks), on the uint64 width and height
        if not (float(width) * scale_x < 1.0 or float(height) * scale_y < 1.0):
            node_id += 1
    return node_id


@_collector_paused
def summary(hlo: hlo_pb2.HloProto, memory_space: int = 0, *, module: _Module | None = None,
            wire: bytes | None = None) -> dict:
    """Cheap per-module figures for ranking the modules of a run by peak.

    Same numbers as :func:`from_hlo` (``peakHeapMib`` etc. equal exactly) without building
    the buffer lists; plus ``peakBytes`` / ``totalAllocationBytes`` as exact ints and
    ``memorySpaces``. A memory space the module does not have gives zeros, not an error,
    so that every module of a run can be ranked for one space. ``module``: ``hlo``'s
    index when the caller made it already; ``wire``: ``hlo``'s bytes, if the caller has
    them (:class:`_Module`).
    """
    m = module if module is not None else _Module(hlo, wire=wire)
    color = int(memory_space)
    sim = _simulate(m, color, with_names=False) if color in m.colors() else _Sim()
    indefinite_add = sum(m.allocs[lb.alloc].size for lb in _indefinite_buffers(m, color))
    add_mib = _mib(indefinite_add)
    positions = m.allocations(color)
    params = sum(m.allocs[p].size for p in positions if m.allocs[p].is_entry_computation_parameter)
    live_out = sum(m.allocs[p].size for p in positions if m.allocs[p].maybe_live_out)
    total = _total_allocation(m, color)
    module = m.hlo.hlo_module
    return {
        "moduleName": module.name,
        "memorySpace": color,
        "peakHeapMib": _mib(sim.peak) + add_mib,
        "peakUnpaddedHeapMib": _mib(sim.peak_unpadded) + add_mib,
        "totalBufferAllocationMib": _mib(total),
        "entryComputationParametersMib": _mib(params),
        "maybeLiveOutMib": _mib(live_out),
        "peakBytes": sim.peak + indefinite_add,
        "totalAllocationBytes": total,
        "heapEvents": sim.events,
        "logicalBuffers": len(m.ba.logical_buffers),
        "memorySpaces": _spaces(m),
    }


@_collector_paused
def view_and_summary(hlo: hlo_pb2.HloProto, memory_space: int = 0, progress=None,
                     wire: bytes | None = None, arrays: bool = False) -> tuple[dict, dict]:
    """:func:`from_hlo` and :func:`summary` of one module from one index of it (``_Module``:
    a quarter of ``from_hlo``'s time and most of ``summary``'s, 0.25 s for a module of
    70,000 buffers): what the memory viewer's conversion of a module makes, so that the
    run's module ranking needs no conversion of its own (app/compiled_memory.py). Each is
    what the function alone answers (neither changes the index: ``from_hlo`` only fills
    its shape strings' cache). ``wire``: ``hlo``'s serialized bytes, if the caller has
    them (:class:`_Module`); ``arrays``: :func:`from_hlo`'s."""
    _report(progress, 0.0, "indexing the module")
    m = _Module(hlo, progress, wire)
    return from_hlo(hlo, memory_space, progress, module=m, arrays=arrays), summary(hlo, memory_space, module=m)


# ---------------------------------------------------------------------------
# The page's compact copy
# ---------------------------------------------------------------------------


def _keep_points(heap: np.ndarray, max_points: int) -> np.ndarray:
    """Indices to keep: first, last and the maximum of each bin (ties: the first)."""
    n = len(heap)
    if n <= max_points:
        return np.arange(n)
    if max_points < 3:
        raise ValueError("max_points must be at least 3")
    inner = max_points - 2
    edges = np.linspace(1, n - 1, inner + 1).astype(np.int64)
    lo, hi = edges[:-1], edges[1:]
    lo, hi = lo[hi > lo], hi[hi > lo]
    # The non-empty bins tile [1, n - 1) (the edges do not decrease): each bin's maximum
    # by one reduceat, then its first position holding it (np.argmax's tie rule), the
    # same points as an argmax per bin at a 30th of the cost (4,000 calls). The heap
    # points are finite (bytes / 2^20 + an offset), so == finds every maximum.
    inner_heap = heap[1:n - 1]
    bin_of = np.repeat(np.arange(len(lo)), hi - lo)
    at_max = np.flatnonzero(inner_heap == np.maximum.reduceat(inner_heap, lo - 1)[bin_of])
    _, first = np.unique(bin_of[at_max], return_index=True)
    keep = np.concatenate(([0], at_max[first] + 1, [n - 1])).astype(np.int64)
    out = np.unique(keep)
    return out


def _heap_points(result: dict, idx: list[int], kinds: str, event_buffers, spanless: dict[str, list]) -> dict:
    """The event at each kept heap point (see :func:`page_view`), from the full result
    (its per-event lists as lists or arrays: :func:`from_hlo`'s ``arrays``)."""
    heap = result["heapSizes"]
    last = len(heap) - 1
    # Only the kept points are read (4,000 of 700,000 on the compare_peers module), and
    # the heap after each: as Python ints and floats, from a list or an array alike.
    after = [i + 1 if i < last else i for i in idx]
    if isinstance(heap, np.ndarray):
        before_mib, after_mib = heap[idx].tolist(), heap[after].tolist()
    else:
        before_mib, after_mib = [heap[i] for i in idx], [heap[i] for i in after]
    if isinstance(event_buffers, np.ndarray):
        buffers = event_buffers[idx].tolist()
    else:
        buffers = [event_buffers[i] for i in idx]
    # Buffer names and sizes: a buffer the trace moves has a block (bufferBlocks, before
    # any are cut) when it has a span, else it is in heapBuffersWithoutSpan; maxHeap
    # names the ones shown at the peak.
    # Only the buffers of the kept points are looked up (4,000 of 70,000 blocks on the
    # compare_peers module): the blocks are read until each of those has its first.
    wanted = set(buffers)
    known: dict[int, tuple[str, float]] = {int(k): (v[0], float(v[1])) for k, v in spanless.items()}
    for o in result.get("maxHeap") or []:
        if o.get("logicalBufferId", 0) >= 0:
            known[o.get("logicalBufferId", 0)] = (o.get("instructionName", ""), o.get("logicalBufferSizeMib", 0.0) * _MIB)
    missing = {b for b in wanted if b >= 0 and b not in known}
    for b in result.get("bufferBlocks") or []:
        if not missing:
            break
        bid = b.get("logicalBufferId", 0)
        if bid in missing:
            missing.discard(bid)
            known[bid] = (b.get("name", ""), b.get("size", 0.0))
    out: dict[str, list] = {"kind": [], "buffer": [], "name": [], "bytes": [], "heapChangeBytes": []}
    for i, buffer, here, there in zip(idx, buffers, before_mib, after_mib):
        name, size = known.get(buffer, ("", 0.0))
        out["kind"].append(_EVENT_WORDS.get(kinds[i], ""))
        out["buffer"].append(buffer)
        out["name"].append(name)
        out["bytes"].append(int(round(size)))
        # heapSizes[i] is the heap before event i: the event's effect is the next step.
        # The points are bytes / 2^20 (+ the indefinite offset) as doubles: under 2^33 MiB
        # their error is far below a byte, so rounding recovers the byte count.
        out["heapChangeBytes"].append(int(round((there - here) * _MIB)) if i < last else 0)
    return out


@_collector_paused  # run right after from_hlo, whose 400,000 objects a collection would walk
def page_view(result: dict, max_points: int = 4000, max_blocks: int = 20000) -> dict:
    """A copy of :func:`from_hlo`'s result small enough for a browser.

    ``heapSizes``, ``unpaddedHeapSizes`` and ``hloInstructionNames`` are cut to at most
    ``max_points`` points: the first, the last and, in each of ``max_points - 2`` equal
    bins of program order, the point of largest ``heapSizes`` (a max filter, so the exact
    peak point and its value survive). ``profscope.heapPositions`` gives each kept point's
    program-order index (on small modules: ``range(n)``, data unchanged). ``bufferBlocks``
    keeps the ``max_blocks`` largest blocks (in their original order) and
    ``profscope.bufferBlocksOmitted`` says how many and how many MiB were left out;
    ``logicalBufferSpans`` then keeps only the buffers in ``maxHeap`` and in the kept
    blocks. Other fields are shared with ``result``, not copied.

    ``profscope.heapPoints`` describes the heap-simulator event at each kept point, in
    lists parallel to ``heapSizes``: ``kind`` ("alloc", "free", "share" or ""), ``buffer``
    (logical buffer id, -1 if none), ``name`` (that buffer's name, instruction and shape
    index), ``bytes`` (its padded size) and ``heapChangeBytes`` (what the event changed
    the heap by: 0 for a FREE of memory another buffer still shares). It replaces the
    per-event ``heapEventKinds`` / ``heapEventBuffers`` / ``heapBuffersWithoutSpan``,
    which the page copy leaves out.
    """
    out = dict(result)
    extras = dict(out.get("profscope") or {})
    out["profscope"] = extras
    heap = out.get("heapSizes")
    n = 0 if heap is None else len(heap)
    kinds = extras.pop("heapEventKinds", None)
    event_buffers = extras.pop("heapEventBuffers", None)
    spanless = extras.pop("heapBuffersWithoutSpan", None) or {}
    if n <= max_points:
        idx = list(range(n))
        extras["heapPositions"] = idx
        for key in ("heapSizes", "unpaddedHeapSizes"):  # a page holds lists (from_hlo's arrays=True)
            if isinstance(out.get(key), np.ndarray):
                out[key] = out[key].tolist()
    else:
        arr = np.asarray(heap, dtype=np.float64)
        keep = _keep_points(arr, max_points)
        idx = keep.tolist()
        out["heapSizes"] = arr[keep].tolist()
        if "unpaddedHeapSizes" in out:
            out["unpaddedHeapSizes"] = np.asarray(out["unpaddedHeapSizes"],
                                                  dtype=np.float64)[keep].tolist()
        if "hloInstructionNames" in out:
            names = out["hloInstructionNames"]
            out["hloInstructionNames"] = [names[i] for i in idx]
        extras["heapPositions"] = idx
    if n and kinds is not None and event_buffers is not None and len(kinds) == n == len(event_buffers):
        extras["heapPoints"] = _heap_points(result, idx, kinds, event_buffers, spanless)
    blocks = out.get("bufferBlocks") or []
    if len(blocks) > max_blocks:
        sizes = [b.get("size", 0.0) for b in blocks]
        # Largest first, ties in block order: a stable sort on -size (as Python's sorted)
        ranked = np.argsort(-np.asarray(sizes, dtype=np.float64), kind="stable").tolist()
        kept = sorted(ranked[:max_blocks])
        dropped = ranked[max_blocks:]
        out["bufferBlocks"] = [blocks[i] for i in kept]
        extras["bufferBlocksOmitted"] = {
            "count": len(dropped),
            # summed one by one in the ranked order, as before (a pairwise sum rounds otherwise)
            "mib": sum(map(sizes.__getitem__, dropped)) / _MIB,
        }
        wanted = {str(o.get("logicalBufferId", 0)) for o in out.get("maxHeap") or []}
        wanted.update(str(b.get("logicalBufferId", 0)) for b in out["bufferBlocks"])
        spans = out.get("logicalBufferSpans") or {}
        out["logicalBufferSpans"] = {k: v for k, v in spans.items() if k in wanted}
    return out
