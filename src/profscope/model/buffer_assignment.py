"""A buffer assignment as XLA's text dumps print it: the model ``tools/memory_viewer_text.py``
consumes.

:mod:`profscope.formats.buffer_assignment_text` parses ``*-buffer-assignment.txt`` (and the
OOM message's ``ToVerboseString``) into a :class:`BufferAssignmentText`: its allocations
with their assigned values, and, from older XLA, the used values, the ``HloLiveRange``
block and the peak buffers. Field names follow what XLA prints (see that module for each
line's writer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Flags of an allocation header, as BufferAllocation::ToShortString prints them.
FLAG_CONSTANT = "constant"
FLAG_THREAD_LOCAL = "thread-local"
FLAG_MAYBE_LIVE_OUT = "maybe-live-out"
FLAG_PREALLOCATED_TEMP = "preallocated-temp"

_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_SOURCE = re.compile(r'source_file="((?:[^"\\]|\\.)*)"\s+source_line=(\d+)')


# -- data ---------------------------------------------------------------------------------


@dataclass(slots=True)
class AssignedValue:
    """One ``value: <id name{index} (phi) @color> (size=..,offset=..): shape`` line."""

    id: int
    name: str  # the defining instruction's name
    shape_index: str  # "{}" / "{0,2}"; XLA prints an index only for tuple-shaped instructions
    offset: int
    size: int
    shape: str  # ShapeUtil::HumanStringWithLayout; "" if the line had none
    phi: bool = False
    color: int | None = None  # the " @<color>" of the short string


@dataclass(slots=True)
class CrossColorValue:
    """A ``reused by buffers of a different color:`` entry (already listed as a value)."""

    id: int
    name: str
    shape_index: str
    color: int


@dataclass(slots=True)
class Allocation:
    index: int
    size: int
    color: int = 0
    parameter_number: int | None = None
    parameter_shape: str | None = None  # without layout, as printed between |...|
    parameter_shape_index: str | None = None  # "{}" or "{1}" (a tuple parameter's element)
    output_shape: str | None = None  # the entry root's shape, when this allocation holds it
    is_constant: bool = False
    is_thread_local: bool = False
    maybe_live_out: bool = False
    is_preallocated_temp: bool = False
    attributes: list[str] = field(default_factory=list)  # header pieces, as printed
    values: list[AssignedValue] = field(default_factory=list)
    cross_color_values: list[CrossColorValue] = field(default_factory=list)
    line: int = 0  # 1-based line of the header

    @property
    def is_entry_computation_parameter(self) -> bool:
        return self.parameter_number is not None

    @property
    def is_tuple(self) -> bool:
        """BufferAllocationProto.is_tuple, which the text does not print. XLA sets it only
        on an allocation of its own for a tuple-shaped buffer that is not a constant, an
        entry parameter or thread-local (BufferAssigner::AssignSpecialHloBuffer)."""
        if (self.is_constant or self.is_thread_local or self.is_preallocated_temp
                or self.parameter_number is not None):
            return False
        return any(v.shape.startswith("(") for v in self.values)


@dataclass(slots=True)
class UsedValue:
    """One entry of the ``Used values:`` section (HloValue::ToString)."""

    id: int
    name: str
    shape_index: str
    phi: bool = False
    color: int | None = None
    positions: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    instruction: str = ""  # the defining instruction, as HloInstruction::ToString prints it

    @property
    def op_name(self) -> str | None:
        m = _OP_NAME.search(self.instruction)
        return m.group(1) if m else None

    @property
    def source(self) -> str | None:
        m = _SOURCE.search(self.instruction)
        return f"{m.group(1)}:{m.group(2)}" if m else None


@dataclass(slots=True)
class LiveRangeText:
    """``HloLiveRange::ToString``: schedule, per-value live ranges and XLA's own peak moment.

    These are live ranges over the flattened schedule, not the heap simulation: sizes at the
    peak are the instruction's unpadded byte size, one line per value live at that moment.
    """

    max_time: int
    instruction_sequence: list[str] = field(default_factory=list)
    ranges: list[tuple[str, str, int, int]] = field(default_factory=list)  # name, index, start, end
    peak_time: int | None = None
    peak_values: list[tuple[str, int]] = field(default_factory=list)  # name, bytes


@dataclass(slots=True)
class PeakBuffer:
    """One ``Buffer N:`` of ToVerboseString's ``Peak buffers:`` (heap-simulator peak)."""

    rank: int
    size_text: str = ""
    operator: str | None = None
    label: str | None = None  # "XLA Label" (opcode)
    shape: str | None = None  # "Shape" or "Entry Parameter Subshape"
    entry_parameter: bool = False

    @property
    def approx_bytes(self) -> int | None:
        return human_bytes(self.size_text)


@dataclass(slots=True)
class BufferAssignmentText:
    path: str
    allocations: list[Allocation] = field(default_factory=list)
    total_bytes_used: int | None = None  # "Total bytes used: N (...)", older XLA only
    used_values: list[UsedValue] | None = None  # "Used values:", older XLA only
    live_range: LiveRangeText | None = None  # "HloLiveRange (max N):", older XLA only
    stats: dict[str, dict] | None = None  # ToVerboseString's "BufferAssignment stats:"
    peak_buffers: list[PeakBuffer] | None = None  # ToVerboseString's "Peak buffers:"
    unknown_lines: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def allocation_bytes(self) -> int:
        return sum(a.size for a in self.allocations)

    @property
    def value_count(self) -> int:
        return sum(len(a.values) for a in self.allocations)


# -- sizes as printed ------------------------------------------------------------------

#: A size as tsl's HumanReadableNumBytes prints it ("512B", "128.0KiB", "4.98MiB").
HUMAN_BYTES = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([KMGTPE]?)i?B\s*$")
_I64_MAX = (1 << 63) - 1
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}


def human_bytes(text: str | None) -> int | None:
    """Bytes from tsl's HumanReadableNumBytes ("512B", "128.0KiB", "4.98MiB"); rounded, so
    approximate beyond 1 KiB. None if it is not such a string, or if it is beyond int64
    (tsl formats an int64 byte count, so no real dump says more; 10^400 KiB would be a
    float inf)."""
    if not text:
        return None
    m = HUMAN_BYTES.match(text)
    if m is None:
        return None
    value = float(m.group(1)) * _UNIT[m.group(2)]
    return round(value) if abs(value) <= _I64_MAX else None
