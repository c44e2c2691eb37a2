"""The runtime allocator's events of one host, as the memory-profile tool reads them.

Format-agnostic: :func:`profscope.formats.xplane_allocator.read_allocator_events` makes
an :class:`AllocatorEvents` out of an XSpace profile (the ``MemoryAllocation`` /
``MemoryDeallocation`` events of ``/host:CPU``, grouped into steps as XProf groups them),
and :mod:`profscope.tools.memory_profile_allocator` turns it into XProf's
``MemoryProfile``. Also here: the step groups (:class:`StepGroup`), the TPU plane's
``XLA Modules`` spans (:class:`HloModuleSpan`) and XProf's names of TF data types
(:func:`data_type_name`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "ALLOCATION",
    "DEALLOCATION",
    "AllocatorEvents",
    "HloModuleSpan",
    "StepGroup",
    "data_type_name",
]

ALLOCATION, DEALLOCATION = 1, 2  # the values of AllocatorEvents.kind

# TF's DataType enum (tensorflow/core/framework/types.proto), names as XProf's
# DataTypeString prints them.
_DATA_TYPE_NAMES = {
    0: "INVALID", 1: "float", 2: "double", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
    7: "string", 8: "complex64", 9: "int64", 10: "bool", 11: "qint8", 12: "quint8",
    13: "qint32", 14: "bfloat16", 15: "qint16", 16: "quint16", 17: "uint16",
    18: "complex128", 19: "half", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64",
    24: "float8_e5m2", 25: "float8_e4m3fn", 26: "float8_e4m3fnuz",
    27: "float8_e4m3b11fnuz", 28: "float8_e5m2fnuz", 29: "int4", 30: "uint4",
}


def data_type_name(value: int) -> str:
    """XProf's ``DataTypeString(static_cast<TensorflowDataType>(value))``.

    The value is truncated to a C ``int``; values above 100 are reference types
    (``float_ref``); unknown values print as ``unknown dtype enum (N)``.
    """
    v = ((int(value) + (1 << 31)) % (1 << 32)) - (1 << 31)
    suffix = ""
    if v > 100:
        v -= 100
        suffix = "_ref"
    name = _DATA_TYPE_NAMES.get(v)
    if name is None:
        name = f"unknown dtype enum ({v})"
    return name + suffix


@dataclass(frozen=True, slots=True)
class HloModuleSpan:
    """One event of a TPU plane's ``XLA Modules`` line (XProf's ``HloModule``)."""

    name: str
    start_ps: int
    end_ps: int
    plane_name: str  # without the "/device:" prefix


@dataclass(frozen=True, slots=True)
class StepGroup:
    """One group (step) found by step grouping: the root event that started it."""

    group_id: int
    name: str  # XProf's group name, e.g. "train 3"
    start_ps: int  # offset_ps of the root event (same base as the allocator events)
    end_ps: int
    line: str


@dataclass(slots=True)
class AllocatorEvents:
    """The allocator events of one host, one row per event, in XProf's reading order.

    Integer columns are numpy ``int64`` unless noted; string columns are ``int32``
    indices into :attr:`strings`; :attr:`memory_id` indexes :attr:`memory_ids`.
    """

    path: str
    hostname: str
    has_host_plane: bool
    time_ps: np.ndarray
    kind: np.ndarray  # int8: ALLOCATION or DEALLOCATION
    memory_id: np.ndarray  # int32 -> memory_ids
    bytes_reserved: np.ndarray
    bytes_allocated: np.ndarray
    bytes_available: np.ndarray
    peak_bytes_in_use: np.ndarray
    requested_bytes: np.ndarray
    allocation_bytes: np.ndarray
    fragmentation: np.ndarray  # float64
    address: np.ndarray  # uint64
    tf_op: np.ndarray  # int32 -> strings
    region_type: np.ndarray  # int32 -> strings
    data_type: np.ndarray  # raw int64 value of the data_type stat (0 when absent)
    shape: np.ndarray  # int32 -> strings
    group_id: np.ndarray  # step as XProf groups it; -1 = no group
    step_id_stat: np.ndarray  # the allocator's own ``id`` stat; -1 when absent
    line: np.ndarray  # int32 -> line_names
    strings: list[str] = field(default_factory=lambda: [""])
    memory_ids: list[str] = field(default_factory=list)
    line_names: list[str] = field(default_factory=list)
    # each line's ``timestamp_ns``: ``time_ps`` is relative to its event's line (XProf's
    # OffsetPs), so an event's absolute time, the trace viewer's clock, is
    # line_timestamps_ns[line] * 1000 + time_ps (lines may differ: ROCm JAX profiles)
    line_timestamps_ns: list[int] = field(default_factory=list)
    steps: list[StepGroup] = field(default_factory=list)
    hlo_modules: list[HloModuleSpan] = field(default_factory=list)
    grouping: str = "none"  # "grouped", "pre-grouped", "loop-ops", "no-roots", "none"

    def __len__(self) -> int:
        return int(self.time_ps.shape[0])

    def string(self, index: int) -> str:
        return self.strings[int(index)]
