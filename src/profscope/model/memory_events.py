"""What a PyTorch profiler trace says about memory: the model ``tools/memory_profile_torch.py``
consumes.

:class:`MemoryEvents` holds a Chrome trace's ``[memory]`` instant events
(``profile_memory=True``) as numpy columns, each attributed to the innermost enclosing op,
Python frame and ``nn.Module`` scope on its thread, with the trace's ``ProfilerStep#N``
annotations as :class:`Steps`; :class:`MemoryTimeline` holds
``prof.export_memory_timeline(path.json)``: bytes per category (:data:`CATEGORIES`) at each
time. :mod:`profscope.formats.chrome_trace` reads both files into these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: torch/profiler/_memory_profiler.py ``_CATEGORY_TO_COLORS`` order; ``None`` is "unknown".
CATEGORIES = (
    "PARAMETER",
    "OPTIMIZER_STATE",
    "INPUT",
    "TEMPORARY",
    "ACTIVATION",
    "GRADIENT",
    "AUTOGRAD_DETAIL",
    "UNKNOWN",
)

#: c10::DeviceType values, for naming devices.
DEVICE_TYPES = {
    0: "CPU", 1: "CUDA", 2: "MKLDNN", 3: "OPENGL", 4: "OPENCL", 5: "IDEEP", 6: "HIP",
    7: "FPGA", 8: "MAIA", 9: "XLA", 10: "Vulkan", 11: "Metal", 12: "XPU", 13: "MPS",
    14: "Meta", 15: "HPU", 16: "VE", 17: "Lazy", 18: "IPU", 19: "MTIA", 20: "PrivateUse1",
}


@dataclass(slots=True)
class Steps:
    """``ProfilerStep#N`` annotations, sorted by start."""

    number: np.ndarray  # int64, N of ProfilerStep#N
    start: np.ndarray  # float64 us
    end: np.ndarray  # float64 us


@dataclass(slots=True)
class MemoryEvents:
    """The ``[memory]`` events of one trace, sorted by time (ties keep file order).

    Index columns (``thread``, ``op``, ``module``, ``frame``) point into the string tables
    beside them; -1 means none (no enclosing op / module / Python frame on that thread).
    ``module_names`` are paths of nested ``nn.Module`` scopes, outermost first
    (``Net_0/Linear_0``).
    """

    path: str
    ts: np.ndarray  # float64, microseconds (the trace's ts)
    addr: np.ndarray  # uint64
    bytes: np.ndarray  # int64, + allocation / - free
    total_allocated: np.ndarray  # int64, allocator total after the event
    total_reserved: np.ndarray  # int64
    device_type: np.ndarray  # int16, c10::DeviceType
    device_id: np.ndarray  # int16, -1 for CPU
    thread: np.ndarray  # int32 -> threads
    op: np.ndarray  # int32 -> op_names
    module: np.ndarray  # int32 -> module_names
    frame: np.ndarray  # int32 -> frame_names: innermost Python source frame ("file.py(12): fn"),
    # built-in calls ("<built-in method ...>") skipped
    threads: list[tuple] = field(default_factory=list)  # (pid, tid)
    op_names: list[str] = field(default_factory=list)
    module_names: list[str] = field(default_factory=list)
    frame_names: list[str] = field(default_factory=list)
    # bool per event: False where the event had no "Addr" (2021 PyTorch wrote only
    # "Bytes", "Device Type", "Device Id"); None when every event had one. Without
    # addresses an allocation cannot be paired with its free.
    has_addr: np.ndarray | None = None
    # bool per event: False where the event had no "Total Reserved" (2021 PyTorch wrote
    # no totals); None when every event had one. Its reserved bytes are then unknown, not
    # 0: ``total_reserved`` holds 0 there only to keep the column numeric.
    has_reserved: np.ndarray | None = None
    steps: Steps | None = None
    optimizer_step_ends: np.ndarray | None = None  # float64 us, ends of Optimizer.step#... annotations
    metadata: dict = field(default_factory=dict)
    num_trace_events: int = 0
    num_ops: int = 0  # X events that are not Python frames
    start_us: float | None = None  # earliest ts of any event in the trace
    end_us: float | None = None  # latest ts (+ dur) of any event

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def base_time_ns(self) -> int | None:
        """``baseTimeNanoseconds``: trace ts + this / 1000 = the profiler clock in us."""
        v = self.metadata.get("baseTimeNanoseconds")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not -(2.0**63) < v < 2.0**63:
            return None  # not a number an int64 answer can carry (NaN fails the comparison too)
        return int(v)


@dataclass(slots=True)
class MemoryTimeline:
    """``export_memory_timeline`` output: bytes per category at each time."""

    path: str
    times_us: np.ndarray  # int64, profiler clock (trace ts + baseTimeNanoseconds / 1000)
    sizes: np.ndarray  # int64, shape (len(times_us), len(CATEGORIES))
    categories: tuple[str, ...] = CATEGORIES

    @property
    def total(self) -> np.ndarray:
        return self.sizes.sum(axis=1)
