"""XProf's derived device lines: what its trace viewer adds to GPU and TPU planes.

XProf 2.24.2's ``trace_viewer@`` tool preprocesses an XSpace before it converts it
(``PreprocessSingleHostXSpace(space, step_grouping=true, derived_timeline=true)``,
``xprof/convert/preprocess_single_host_xplane.cc``), unless the space is already grouped
(tsl ``IsXSpaceGrouped``: a plane has a ``group_id`` stat metadata; 2.24.2 checks *any*
plane, as the memory profile found). The preprocessing makes lines that are not in the
file, built by ``DerivedXLineBuilder`` (``xprof/utils/derived_timeline.cc``):

GPU planes (``DeriveEventsFromAnnotations``): the stream lines (every line whose id is not
a derived thread id, tsl ``IsDerivedThreadId``) are sorted, compute streams (name
containing "Compute") first, then by number of events, largest first (``std::sort``, ties
as libstdc++ leaves them: :func:`profscope.model.stdsort.std_sort_order`); for each
stream, from its kernel events (``GpuEventStats::IsKernel``: a non-empty
``kernel_details`` stat, or a ``cuda_graph_exec_id``) in time order
(``GetSortedEvents``: start, then duration, ascending), ``DeriveEventsFromAnnotationsForLines``
makes

* ``XLA Modules - from #<stream id>``: one event per run of kernels of one module
  (``hlo_module``), named ``<module>(<program_id>)`` (``HloModuleNameWithProgramId``);
* ``XLA Ops - from #<id>``: the ``hlo_op`` stat, split at ``::`` into nested levels,
  named by the op (the event metadata is ``<program_id>/<op>`` with the op as display
  name, so ops of different modules never merge);
* ``Framework Ops - from #<id>`` and ``Framework Name Scope - from #<id>``: the op's
  framework name, from the module's HLO (the ``Hlo Proto`` stats of the
  ``/host:metadata`` plane; ``HloInstructionWrapper::op_full_name`` is
  ``<op_name>:<op_type>`` of the instruction's metadata), or the kernel's ``tf_op`` stat
  when it is no XLA op; parsed by tsl ``ParseTfOpFullname``: the op shows as its type
  (``TfOpEventName``), its ``/``-separated name scopes as nested events (TF and JAX ops
  only, ``ProcessTfOpEvent``);
* ``Source code - from #<id>``: ``<basename of source_file>:<source_line>`` of the HLO
  instruction.

Each stream and its five lines then get display ids 1, 2, ... in that order, the next
stream 7 places further (XProf 2.24.2 keeps one more, always empty, slot per stream:
checked on its output), and empty lines are removed (``RemoveEmptyLines``); the trace
viewer's tid is the display id. Streams past the range of derived line ids get none.

TPU TensorCore planes (``/device:TPU:<n>``, ``DeriveLinesFromStats``): from every event
of the plane in time order, with the stats of its metadata and then its own (the last
one wins) and skipping ``_a`` (async) events: ``Framework Ops`` and ``Framework Name
Scope`` from the ``tf_op`` stat, ``Source code`` from ``source``, and ``Host Offload Ops
row <k>`` (``HostOffloadEventProcessor``): an ``offload-<op>.<n>`` event from each
host-memory (``S(5)`` in the op's HLO text) ``copy-start``/``dynamic-slice-start``/...
to its ``-done``, on the first row free at its start. Before that, TPU grouping
(tsl ``GroupTpuEventsOSS``) gives the events of the plane's ``Steps`` line (or, when
there is none, ``XLA Modules``) the group ids after the host's groups
(``CreateEventGroups``, when no host step reached them), every other event the group of
the grouping event it overlaps (``GroupLine``), and names the ``Steps`` events after
their group (``AddGroupMetadataToStepEvents``: the event's ``iter_num``/``step_num``, else
the group id).

How events are merged (``DerivedXLineBuilder::ExpandOrAddLevelEvent``): per level, the
last event is extended to cover the next one when it has the same metadata, the same
group and a compatible ``scope_range_id``, and, on a TPU plane without a group, starts
within twice its duration after its end; otherwise the last events of that level and
below are closed (``ResetLastEvents``, also of the lines that depend on it: a new XLA
module closes the name scopes, framework ops and XLA ops) and a new one starts. When a
stack of events closes, ``AdjustDurationForTraceViewer`` shortens events that span
exactly the same time as the level above by 1 ns per level (at most the top event's
duration in ns - 1), so the trace viewer nests them in order.

Not done: GPU step grouping (tsl ``GroupTfEvents``: host step roots reaching kernels
through their launches), so GPU planes get no ``Steps`` and ``Launch Stats`` lines and
kernels no group (which would split XLA module runs at step boundaries); TPU groups given
by host steps (a host root event connected to the device steps through producer/consumer
contexts); the host root count for TPU step names only counts root events on the host
planes that no other root of the same level encloses on their line.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from profscope.formats import xplane_steps as xs
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2
from profscope.model.protos import hlo_pb2
from profscope.model.stdsort import std_sort_order
from profscope.model.trace import NameTable, Track

GPU_PREFIX = "/device:GPU:"
TENSOR_CORE_PLANE = re.compile(r"/device:TPU:([0-9]*)")  # tsl kTpuPlaneRegex (full match)
METADATA_PLANE = "/host:metadata"  # tsl kMetadataPlaneName
SCOPE_TREE_PLANE = "/host:__ScopeRangeCallStack__"  # tsl kScopeRangeIdTreePlaneName
HOST_PREFIX = "/host:CPU"

# tsl trace_utils.h thread ids (int32: IsDerivedThreadId takes an int)
THREAD_ID_DERIVED_MIN = 0xDEADBEEF - (1 << 32)
THREAD_ID_STEP_INFO = THREAD_ID_DERIVED_MIN
THREAD_ID_TF_NAME_SCOPE = THREAD_ID_DERIVED_MIN + 2
THREAD_ID_TF_OP = THREAD_ID_DERIVED_MIN + 3
THREAD_ID_SOURCE = THREAD_ID_DERIVED_MIN + 7
THREAD_ID_HOST_OFFLOAD_START = THREAD_ID_DERIVED_MIN + 8
THREAD_ID_HOST_OFFLOAD_END = THREAD_ID_DERIVED_MIN + 48
THREAD_ID_DEVICE_DERIVED_MIN = THREAD_ID_DERIVED_MIN + 49 + 240 + 1
THREAD_ID_DEVICE_DERIVED_MAX = THREAD_ID_DEVICE_DERIVED_MIN + 99
THREAD_ID_DERIVED_MAX = THREAD_ID_DEVICE_DERIVED_MAX
# the id block of one stream's derived lines (display ids are 7 apart in 2.24.2's output)
LINES_PER_STREAM = 7

# tsl xplane_schema.cc line names
NAME_SCOPE_LINE = "Framework Name Scope"
TF_OP_LINE = "Framework Ops"
XLA_MODULE_LINE = "XLA Modules"
XLA_OP_LINE = "XLA Ops"
SOURCE_LINE = "Source code"
HOST_OFFLOAD_LINE = "Host Offload Ops"
STEP_LINE = "Steps"
# the GPU stream's derived lines in display order (ids: name scope +0, tf op +1, module
# +2, hlo op +3, source +5 of the stream's block, sorted)
GPU_DERIVED = (NAME_SCOPE_LINE, TF_OP_LINE, XLA_MODULE_LINE, XLA_OP_LINE, SOURCE_LINE)

LOOP_OPS = frozenset({"WhileOp-EvalCond", "WhileOp-StartBody", "ForOp", "ParallelForOp", "ForeverOp"})
HOST_MEMORY_LABEL = "S(5)"  # HostOffloadEventProcessor: S(xla::Layout::kHostMemorySpace)
HOST_OFFLOAD_KEYWORDS = ("copy-start", "copy-done", "dynamic-slice-start", "dynamic-slice-done",
                         "dynamic-update-slice-start", "dynamic-update-slice-done")
MAX_HOST_OFFLOAD_LINES = THREAD_ID_HOST_OFFLOAD_END - THREAD_ID_HOST_OFFLOAD_START + 1
# derive lines with numpy (False: event by event, the reference the tests compare with)
VECTORIZED = True
_PROGRAM_ID_IN_NAME = re.compile(r".*\((\d+)\)")  # xplane_hlo_fixer.cc kProgIdRegex


def _int32(x: int) -> int:
    return ((int(x) + (1 << 31)) % (1 << 32)) - (1 << 31)


def is_derived_thread_id(line_id: int) -> bool:
    """tsl ``IsDerivedThreadId`` (on the id as a C++ ``int``)."""
    return THREAD_ID_DERIVED_MIN <= _int32(line_id) <= THREAD_ID_DERIVED_MAX


# ---------------------------------------------------------------------------
# tsl tf_op_utils.cc
# ---------------------------------------------------------------------------

_TF_OP_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\/>-]*")
_TF_OP_TYPE = re.compile(r"[A-Z_][a-zA-Z0-9_]*")
_JAX_OP_TYPE = re.compile(r"[a-z_][a-z0-9_]*(\[.*\])?")
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
UNKNOWN, TENSORFLOW, JAX, TF_DATA, MEMCPY = range(5)
_MEMCPY_OPS = (("MEMCPYHToD", "MemcpyHToD"), ("MEMCPYDToH", "MemcpyDToH"), ("MEMCPYDToD", "MemcpyDToD"),
               ("MEMCPYHToH", "MemcpyHToH"))


def _is_integer(s: str) -> bool:  # absl::SimpleAtoi into an int64
    return bool(_INTEGER.fullmatch(s)) and -(1 << 63) <= int(s) < (1 << 63)


def _derive_op_type(full_op_name: str) -> str:
    """``DeriveOpType``: the op name without name scopes and a numeric ``_<n>`` suffix."""
    op_name = full_op_name.split("/")[-1]
    suffix = op_name.split("_")[-1]
    if _is_integer(suffix):
        k = len(op_name) - len(suffix) - 1
        return op_name if k < 0 else op_name[:k]  # std::string_view::substr(0, npos)
    return op_name


@functools.lru_cache(maxsize=1 << 16)
def parse_tf_op(full: str) -> tuple[int, str, str]:
    """``ParseTfOpFullname``: (category, name, type)."""
    parts = full.split(":", 1)
    if len(parts) != 2:
        low = parts[0].lower()
        for prefix, typ in _MEMCPY_OPS:
            if low.startswith(prefix.lower()):
                return MEMCPY, full, typ
        return UNKNOWN, full, ""
    if parts[0] == "Iterator":
        return TF_DATA, full, "Dataset"
    if _TF_OP_NAME.fullmatch(parts[0]) and _TF_OP_TYPE.fullmatch(parts[1]):
        return TENSORFLOW, parts[0], parts[1]
    op_type = parts[1] if parts[1] else _derive_op_type(parts[0])
    if _JAX_OP_TYPE.fullmatch(op_type):
        k = op_type.find("[")
        return JAX, parts[0], op_type if k < 0 else op_type[:k]
    if not parts[1]:
        return TENSORFLOW, parts[0], op_type
    return UNKNOWN, full, ""


def tf_op_event_name(category: int, name: str, typ: str) -> str:
    """``TfOpEventName``: the name framework ops are shown by."""
    if category == UNKNOWN:
        return name.rstrip(" \t\n\v\f\r")  # absl::StripTrailingAsciiWhitespace
    if category == TF_DATA:
        return "Iterator::" + name.split("::")[-1]  # DatasetOpEventName
    return typ


def name_scopes(name: str) -> list[str]:
    """``ParseTfNameScopes``: the ``/``-separated scopes, without the op name."""
    return name.split("/")[:-1]


# ---------------------------------------------------------------------------
# DerivedXLineBuilder
# ---------------------------------------------------------------------------


class _Builder:
    """One derived line (``DerivedXLineBuilder``): its events and the last event of each
    level. Times are ps (any common origin); ``key`` is the event metadata's name (XProf
    makes them with ``GetOrCreateEventMetadata(name)``, so equal names are equal ids)."""

    __slots__ = ("gpu", "deps", "key", "begin", "end", "extra", "last")

    def __init__(self, gpu: bool, deps=()):
        self.gpu = gpu
        self.deps = list(deps)
        self.key: list = []
        self.begin: list[int] = []
        self.end: list[int] = []
        self.extra: list = []
        self.last: list = []  # per level: (event index, group, scope range id) or None

    def add(self, key, begin: int, end: int, group, scope=None, level: int = 0, extra=None) -> None:
        """``ExpandOrAddLevelEvent``."""
        last = self.last
        while len(last) <= level:  # last_event_by_level_[level] (a map: the key is made)
            last.append(None)
        cur = last[level]
        if cur is not None:
            i, g, s = cur
            # ShouldExpand, and without a group on a non-GPU plane, a gap under twice the
            # last event's duration
            if (self.key[i] == key and g == group and (scope is None or s is None or s == scope)
                    and (self.gpu or group is not None
                         or self.end[i] + 2 * (self.end[i] - self.begin[i]) >= begin)):
                if end > self.end[i]:  # Timespan::ExpandToInclude (begins come sorted)
                    self.end[i] = end
                if begin < self.begin[i]:
                    self.begin[i] = begin
                return
        self.reset(level)
        i = len(self.key)
        self.key.append(key)
        self.begin.append(begin)
        self.end.append(end)
        self.extra.append(extra)
        last[level] = (i, group, scope)

    def add_levels(self, keys, begin: int, end: int, group, scopes=(), extras=None) -> None:
        """``ExpandOrAddEvents``: one event per level, then the deeper levels closed."""
        if not keys:
            return
        for level, key in enumerate(keys):
            self.add(key, begin, end, group, scopes[level] if level < len(scopes) else None, level,
                     extras[level] if extras is not None else None)
        self.reset(len(keys))

    def reset(self, level: int) -> None:
        """``ResetLastEvents``."""
        self._adjust(level)
        last = self.last
        for i in range(level, len(last)):
            last[i] = None
        if level == 0:
            for d in self.deps:
                d.reset(0)

    def _adjust(self, level: int) -> None:
        """``AdjustDurationForTraceViewer``: in the closing stack, each event with the same
        span as the level above ends 1 ns earlier than it (cumulatively), at most the top
        event's duration in ns - 1."""
        last = self.last
        if level >= len(last) or last[level] is None:
            return
        top = level
        while top + 1 < len(last) and last[top + 1] is not None:
            top += 1
        if top <= level:
            return
        t = last[top][0]
        max_shrink = (self.end[t] - self.begin[t]) // 1000 - 1
        shrink = 0
        prev = None
        for lv in range(level, top + 1):
            i = last[lv][0]
            span = (self.begin[i], self.end[i])
            if shrink < max_shrink and prev == span:
                shrink += 1
            prev = span
            if shrink:
                self.end[i] = max(self.begin[i], self.end[i] - 1000 * shrink)  # Timespan::FromEndPoints


@dataclass
class DerivedLine:
    """A derived line of a device plane, as the trace viewer shows it."""

    tid: int  # XProf's resource id: uint32 of the display id (or line id)
    name: str
    begin: np.ndarray  # int64 ps, the reader's time base
    dur: np.ndarray  # int64 ps
    key: np.ndarray  # int64 per event: its event metadata's name, in DevicePlane.keys
    extra: np.ndarray  # int64 per event: its stats for the details, in DevicePlane.extras (-1: none)


def _rank(*cols) -> tuple[np.ndarray, np.ndarray]:
    """(dense rank per row of the columns taken together, a row of each rank): a
    ``np.unique(axis=0)`` without its slow row sort (columns packed pairwise into int64)."""
    inv = np.zeros(len(cols[0]), np.int64)
    for c in cols:
        _, ci = np.unique(np.asarray(c), return_inverse=True)
        _, inv = np.unique(inv * (int(ci.max(initial=0)) + 1) + ci.reshape(-1), return_inverse=True)
        inv = inv.reshape(-1)
    first = np.full(int(inv.max(initial=-1)) + 1, -1, np.int64)
    first[inv[::-1]] = np.arange(len(inv) - 1, -1, -1)
    return inv, first


def _gap_rule(new, depth, keys, d_prev, b, e, nogroup, cont: set) -> np.ndarray:
    """The ``new`` flags of calls without a group that follow one, call by call: a level
    continues only if the level above does, the key is the same and the call starts by
    ``end + 2 * duration`` of the level's event so far (``ExpandOrAddLevelEvent``)."""
    new = new.copy()
    span_b: dict[int, int] = {}
    span_e: dict[int, int] = {}
    for c in np.flatnonzero(nogroup).tolist():
        dc = int(depth[c])
        bc, ec = int(b[c]), int(e[c])
        if c in cont:
            carry = False
            for lv in range(dc):
                if not carry:
                    carry = (lv >= d_prev[c] or keys[c, lv] != keys[c - 1, lv]
                             or span_e[lv] + 2 * (span_e[lv] - span_b[lv]) < bc)
                new[c, lv] = carry
        for lv in range(dc):
            if new[c, lv]:
                span_b[lv], span_e[lv] = bc, ec
            elif ec > span_e[lv]:
                span_e[lv] = ec
    return new


@dataclass
class _LineEvents:
    begin: np.ndarray  # per event
    end: np.ndarray
    c0: np.ndarray  # the call that started it
    level: np.ndarray
    new0: np.ndarray  # per call: a new event at level 0 (ResetLastEvents(0): dependents reset)


def _line_events(depth, keys, ext, close_after: bool, b, e, nogroup=None) -> _LineEvents:
    """``DerivedXLineBuilder::ExpandOrAddEvents`` over all calls of one line at once, with
    a GPU plane's rule (an event continues while the key, which includes the group, is the
    same): ``depth`` (C,) levels per call, ``keys`` (C, L) per level, ``ext`` (C,) a
    ``ResetLastEvents(0)`` from a line this one depends on before the call,
    ``close_after`` such a reset after the last call, ``b``/``e`` (C,) the kernel's span.

    A call continues level ``l`` iff it continues every level above, the previous call
    reached level ``l`` and no reset came between. The events closing together (at a
    call's first new level ``g``, through the previous call's depth; at a reset, all of
    them; at the end, none) get ``AdjustDurationForTraceViewer``.

    ``nogroup`` (C,): calls without a group on a non-GPU plane, which continue an event
    only if they start within twice its duration after its end: decided call by call
    along each run of such calls (only they can continue each other: the group is part
    of the key)."""
    c_n = len(depth)
    z = np.zeros(0, np.int64)
    if not c_n:
        return _LineEvents(z, z, z, z, np.zeros(0, bool))
    width = int(depth.max())
    keys = keys[:, :width]
    lv = np.arange(width)
    present = lv[None, :] < depth[:, None]
    d_prev = np.zeros(c_n, np.int64)
    d_prev[1:] = np.where(ext[1:], 0, depth[:-1])
    prev = np.full_like(keys, -1)
    prev[1:] = keys[:-1]
    neq = present & ((lv[None, :] >= d_prev[:, None]) | (keys != prev))
    new = np.logical_or.accumulate(neq, axis=1) & present
    if nogroup is not None and c_n > 1:
        cont = np.flatnonzero(nogroup[1:] & nogroup[:-1] & ~ext[1:]) + 1
        if cont.size:
            new = _gap_rule(new, depth, keys, d_prev, b, e, nogroup, set(cont.tolist()))
    # cells by (level, call): an event is a run of cells of one level
    lvl, call = np.nonzero(present.T)
    nf = new[call, lvl]
    eid = np.cumsum(nf) - 1
    starts = np.flatnonzero(nf)
    begin = b[call[starts]]
    end = np.maximum.reduceat(e[call], starts)
    event_of = np.full((c_n, width), -1, np.int64)
    event_of[call, lvl] = eid
    # closing stacks: after call c, levels g[c] .. depth[c]-1
    first_new = np.where(new.any(axis=1), new.argmax(axis=1), depth)
    g = np.empty(c_n, np.int64)
    g[:-1] = np.where(ext[1:], 0, first_new[1:])
    g[-1] = 0 if close_after else depth[-1]
    rows = np.flatnonzero(depth - g >= 2)
    if rows.size:
        sub = event_of[rows]
        region = (lv[None, :] >= g[rows, None]) & (lv[None, :] < depth[rows, None])
        safe = np.where(region, sub, 0)
        sb, se = begin[safe], end[safe]
        eq = np.zeros_like(region)
        eq[:, 1:] = region[:, 1:] & region[:, :-1] & (sb[:, 1:] == sb[:, :-1]) & (se[:, 1:] == se[:, :-1])
        top = sub[np.arange(len(rows)), depth[rows] - 1]
        max_shrink = np.maximum((end[top] - begin[top]) // 1000 - 1, 0)
        shrink = np.minimum(np.cumsum(eq, axis=1), max_shrink[:, None])
        m = region & (shrink > 0)
        if m.any():
            tgt = sub[m]
            end = end.copy()
            end[tgt] = np.maximum(begin[tgt], end[tgt] - 1000 * shrink[m])
    return _LineEvents(begin, end, call[starts], lvl[starts], new[:, 0].copy())


# ---------------------------------------------------------------------------
# Per-space and per-plane collection
# ---------------------------------------------------------------------------

_GPU_STR_STATS = ("kernel_details", "hlo_op", "hlo_module", "tf_op")
_TPU_STR_STATS = ("tf_op", "source")


@dataclass
class _Cols:
    """The columns one device plane keeps for derivation (chunks, joined at the end)."""

    parts: dict = field(default_factory=dict)

    def append(self, **cols) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def get(self, k, dtype) -> np.ndarray:
        p = self.parts.get(k)
        return np.concatenate(p) if p else np.zeros(0, dtype)


class DevicePlane:
    """What one GPU or TPU plane contributes: collected while its events are decoded."""

    def __init__(self, space: Space, meta, plane_name: str, headers, counts):
        self.space = space
        self.plane_name = plane_name
        self.gpu = plane_name.startswith(GPU_PREFIX)
        m = TENSOR_CORE_PLANE.fullmatch(plane_name)
        self.tensor_core = m is not None
        self.headers = headers
        self.counts = list(counts)
        self.line_ids = [h.id for h in headers]
        self.line_names = [h.name for h in headers]
        stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        self.strings = xw.Strings(None, stat_names)
        self.cols = _Cols()
        self.kcols = _Cols()  # GPU: the kernels' stats
        self.pid = 0
        self.plane_index = -1
        self.line_track = None
        # event metadata: name, display name (GetOrCreateEventMetadata finds them by name)
        self.md_name = {k: v.name for k, v in meta.event_metadata.items()}
        self.md_display = {k: v.display_name for k, v in meta.event_metadata.items()}
        self.display_by_name: dict[str, str] = {}
        self.keys: list[str] = []  # event metadata names of the derived events
        self.key_index: dict[str, int] = {}
        self.extras: list[dict] = []  # their details (stats), shared
        self.extra_index: dict[tuple, int] = {}
        self.sig_cache: dict[tuple, tuple] = {}
        for v in meta.event_metadata.values():
            if v.name and v.name not in self.display_by_name:
                self.display_by_name[v.name] = v.display_name
        if self.tensor_core:
            self._metadata_stats(meta, stat_names)
        # the Steps line of a TensorCore plane: its events are held back and named after
        # their group at the end (AddGroupMetadataToStepEvents)
        self.step_lines = [i for i, n in enumerate(self.line_names) if n == STEP_LINE] if self.tensor_core else []
        self.held: list = []

    def _metadata_stats(self, meta, stat_names) -> None:
        """Per event metadata: the stats DeriveLinesFromStats reads (ForEachStat: the last
        one wins), and those the host offload events copy."""
        self.md_stats: dict[int, dict] = {}
        for k, md in meta.event_metadata.items():
            d = {}
            for st in md.stats:
                name = stat_names.get(st.metadata_id)
                case = st.WhichOneof("value")
                if name in ("tf_op", "source", "shape_with_layout"):
                    if case == "str_value":
                        d[name] = st.str_value
                    elif case == "ref_value":
                        d[name] = stat_names.get(st.ref_value, "")
                    else:
                        d[name] = ""
                elif name in ("group_id", "_a"):
                    d[name] = (st.int64_value if case == "int64_value" else
                               st.uint64_value if case == "uint64_value" else 0)
                elif name == "raw_bytes_accessed":
                    d.setdefault("raw_bytes_accessed", []).append(st.int64_value if case == "int64_value" else 0)
            if d:
                self.md_stats[k] = d

    # -- while decoding --------------------------------------------------------------------

    def collect(self, ev, ts: np.ndarray, data) -> None:
        """Keep what derivation needs of one decoded chunk (``ts``: ps, the reader's base)."""
        self.strings.data = data
        if self.gpu:
            # every event's time (GetSortedEvents sorts all of a stream's events before the
            # kernels are picked: std::sort's order of ties depends on them), the stats of
            # kernels only (GpuEventStats::IsKernel: a non-empty kernel_details, or
            # IsCudaGraphExecution). No group ids: a profile with any is not derived.
            kd = xw.StatView(ev, "kernel_details")
            cg = xw.StatView(ev, "cuda_graph_exec_id")
            kernel = cg.present.copy()
            has = np.flatnonzero(kd.present)
            kernel[has] |= kd.str_or_ref(self.strings, has) > 0
            self.cols.append(line=ev.line, ts=ts, dur=ev.duration_ps, kernel=kernel)
            sel = np.flatnonzero(kernel)
            cols = {}
            for name in _GPU_STR_STATS[1:]:
                v = xw.StatView(ev, name)
                cols[name] = np.where(v.present[sel], v.str_or_ref(self.strings, sel), -1).astype(np.int32)
            for name in ("program_id", "scope_range_id"):
                v = xw.StatView(ev, name)
                cols[name + "?"] = v.present[sel]
                cols[name] = (v.int_or_uint_value() if name == "program_id" else v.int_value())[sel]
            self.kcols.append(**cols)
        elif self.tensor_core:
            sel = np.arange(ev.n)
            cols = {"line": ev.line, "ts": ts, "dur": ev.duration_ps, "mid": ev.metadata_id}
            for name in _TPU_STR_STATS:
                v = xw.StatView(ev, name)
                cols[name] = np.where(v.present, v.str_or_ref(self.strings, sel), -1).astype(np.int32)
            for name in ("_a", "step_num", "iter_num"):
                # GetGroupName's GetContextStat reads step_num/iter_num with GetStat (the first)
                v = xw.StatView(ev, name, last=name == "_a")
                cols[name + "?"] = v.present
                vals = v.int_or_uint_value().view(np.int64) if name == "_a" else v.int_value()
                cols[name] = vals
            self.cols.append(**cols)

    def hold(self, ev, keep: np.ndarray, ts, name_id, ev_start, ev_end, blob_base: int) -> np.ndarray:
        """``keep`` without the events of a TensorCore ``Steps`` line, which are handed
        over at the end (:meth:`Space.emit`), once their group (and so their name) is known."""
        if not self.step_lines or self.space.grouped:
            return keep
        on = np.isin(ev.line[keep], self.step_lines)
        if not on.any():
            return keep
        k = keep[on]
        self.held.append((self.line_track[ev.line[k]], ts[k], ev.duration_ps[k], name_id[k], ev_start[k] + blob_base,
                          (ev_end[k] - ev_start[k]).astype(np.int32)))
        return keep[~on]

    # -- at the end ------------------------------------------------------------------------

    def derive(self) -> tuple[list[DerivedLine], dict[int, int], dict | None]:
        """(derived lines, display ids of the plane's own lines by line index, new names of
        the held Steps events by position or None)."""
        if self.space.grouped:
            return [], {}, None
        if self.gpu:
            lines, display = self._derive_gpu()
            return lines, display, None
        if self.tensor_core:
            return self._derive_tpu(reference=not VECTORIZED)
        return [], {}, None

    def _set_display(self, name: str, display: str) -> None:
        if not self.display_by_name.get(name):  # set_display_name if it is empty
            self.display_by_name[name] = display

    def key_id(self, name: str) -> int:
        """The id of an event metadata name in :attr:`keys`."""
        i = self.key_index.get(name)
        if i is None:
            i = self.key_index[name] = len(self.keys)
            self.keys.append(name)
        return i

    def extra_id(self, stats: dict | None) -> int:
        """The id of a derived event's details in :attr:`extras` (-1: none)."""
        if not stats:
            return -1
        k = tuple(stats.items())
        i = self.extra_index.get(k)
        if i is None:
            i = self.extra_index[k] = len(self.extras)
            self.extras.append(stats)
        return i

    def _finish(self, b: _Builder, tid: int, name: str, stats_of=None) -> DerivedLine | None:
        if not b.key:
            return None
        begin = np.asarray(b.begin, np.int64)
        end = np.asarray(b.end, np.int64)
        key = np.asarray([self.key_id(k) for k in b.key], np.int64)
        extra = np.asarray([self.extra_id(stats_of(x)) if stats_of is not None else -1 for x in b.extra], np.int64)
        return DerivedLine(tid & 0xFFFFFFFF, name, begin, end - begin, key, extra)

    # GPU -------------------------------------------------------------------------------

    def _derive_gpu(self) -> tuple[list[DerivedLine], dict[int, int]]:
        """``DeriveEventsFromAnnotations`` for a GPU plane."""
        streams = [i for i, lid in enumerate(self.line_ids) if not is_derived_thread_id(lid)]
        if not streams:
            return [], {}
        not_compute = np.asarray([0 if "Compute" in self.line_names[i] else 1 for i in streams], np.int64)
        neg_count = -np.asarray([self.counts[i] for i in streams], np.int64)
        order = [streams[k] for k in std_sort_order(not_compute, neg_count).tolist()]
        c, kc = self.cols, self.kcols
        line = c.get("line", np.int32)
        ts, dur = c.get("ts", np.int64), c.get("dur", np.int64)
        kernel = c.get("kernel", bool)
        kpos = np.cumsum(kernel) - 1  # the kernel's row in kcols
        cols = {k: kc.get(k, np.int64) for k in ("hlo_op", "hlo_module", "tf_op", "program_id", "scope_range_id")}
        cols.update({k: kc.get(k, bool) for k in ("program_id?", "scope_range_id?")})
        out: list[DerivedLine] = []
        display: dict[int, int] = {}
        next_id = THREAD_ID_DEVICE_DERIVED_MIN
        position = 0
        by_line = np.argsort(line, kind="stable")
        bounds = np.searchsorted(line[by_line], np.arange(len(self.line_ids) + 1))
        for li in order:
            if next_id + LINES_PER_STREAM > THREAD_ID_DEVICE_DERIVED_MAX:
                break  # "Exceeding the range of derived line ids. Stopping."
            next_id += LINES_PER_STREAM
            display[li] = position + 1
            rows = by_line[bounds[li]:bounds[li + 1]]  # the stream's events in line order
            if rows.size:
                rows = rows[std_sort_order(ts[rows], dur[rows])]  # GetSortedEvents
                rows = rows[kernel[rows]]  # "only use kernel events"
            if rows.size:
                b = ts[rows]
                e = b + dur[rows]
                krows = kpos[rows]
                if cols["scope_range_id?"][krows].any() or not VECTORIZED:
                    built = self._derive_stream(krows, b, e, cols)
                else:
                    built = self._derive_stream_fast(krows, b, e, cols)
                suffix = f" - from #{self.line_ids[li]}"
                for k, d in enumerate(built):
                    if d is not None and len(d.key):
                        d.tid = (position + 2 + k) & 0xFFFFFFFF
                        d.name = GPU_DERIVED[k] + suffix
                        out.append(d)
            position += LINES_PER_STREAM
        return out, display

    def _signature(self, module: str, op: str | None, program_id, tf: str) -> tuple:
        """What one kind of kernel (its hlo_module, hlo_op, program_id, tf_op) derives:
        (module key, module stats, op keys, op stats, tf op key, its name scope keys,
        source key); keys -1 when the kernel adds nothing to that line."""
        table = self.sig_cache
        sig = table.get((module, op, program_id, tf))
        if sig is not None:
            return sig
        mod_key = mod_extra = -1
        if module:
            mod_key = self.key_id(f"{module}({program_id})" if program_id is not None else module)
            mod_extra = self.extra_id({"hlo_module": module,
                                       **({"program_id": program_id} if program_id is not None else {})})
        op_keys: list[int] = []
        op_extras: list[int] = []
        tf_name = src = ""
        if op is not None:
            ops = op.split("::")
            prefix = f"{program_id}/" if program_id is not None else f"{module}/"
            for o in ops:
                k = prefix + o
                self._set_display(k, o)  # the HLO name without the module
                op_keys.append(self.key_id(k))
                op_extras.append(self.extra_id({"hlo_op": o, "hlo_module": module,
                                                **({"program_id": program_id} if program_id is not None else {})}))
            tf_name, src = self.space.symbols(program_id, ops[-1])
        else:
            tf_name = tf
        tf_key = -1
        scopes: list[int] = []
        if tf_name:
            category, name, typ = parse_tf_op(tf_name)
            if category in (TENSORFLOW, JAX):
                scopes = [self.key_id(x) for x in name_scopes(name)]
            self._set_display(tf_name, tf_op_event_name(category, name, typ))
            tf_key = self.key_id(tf_name)
        src_key = self.key_id(src) if src else -1
        sig = table[(module, op, program_id, tf)] = (mod_key, mod_extra, op_keys, op_extras, tf_key, scopes, src_key)
        return sig

    def _kernel_kinds(self, rows, cols):
        """(signature per kernel, signatures): kernels grouped by their stats."""
        table = self.strings.table
        mod, op, tf = cols["hlo_module"][rows], cols["hlo_op"][rows], cols["tf_op"][rows]
        pid_f = cols["program_id?"][rows]
        pid = np.where(pid_f, cols["program_id"][rows].view(np.int64), 0)
        inv, first = _rank(mod, op, tf, pid_f, pid)
        sigs = []
        for m, o, t, pf, p in zip(mod[first].tolist(), op[first].tolist(), tf[first].tolist(), pid_f[first].tolist(),
                                  pid[first].tolist()):
            program_id = (p & (2**64 - 1)) if pf else None
            sigs.append(self._signature(table[m] if m > 0 else "", table[o] if o >= 0 else None, program_id,
                                        table[t] if t > 0 else ""))
        return inv, sigs

    def _derive_stream_fast(self, rows, b, e, cols) -> list:
        """``DeriveEventsFromAnnotationsForLines`` for one stream, a line at a time with
        numpy (:func:`_line_events`), without scope range ids: the lines in the order
        XProf fills them for a kernel (modules; XLA ops; name scopes, then framework
        ops; source), each reset where a line it depends on starts an event at level 0."""
        sig_of, sigs = self._kernel_kinds(rows, cols)
        n = len(rows)
        grank = np.zeros(n, np.int64)  # no groups (see collect)
        g_count = int(grank.max()) + 1 if n else 1
        mod_key = np.asarray([s[0] for s in sigs], np.int64)[sig_of]
        mod_extra = np.asarray([s[1] for s in sigs], np.int64)[sig_of]
        tf_key = np.asarray([s[4] for s in sigs], np.int64)[sig_of]
        src_key = np.asarray([s[6] for s in sigs], np.int64)[sig_of]

        def levels(k):  # (depth, keys, extras) matrices of signature field k
            depth = np.asarray([len(s[k]) for s in sigs], np.int64)
            width = max(1, int(depth.max()) if len(depth) else 1)
            keys = np.full((len(sigs), width), -1, np.int64)
            extras = np.full((len(sigs), width), -1, np.int64)
            for i, s in enumerate(sigs):
                keys[i, :len(s[k])] = s[k]
                if k == 2:
                    extras[i, :len(s[3])] = s[3]
            return depth[sig_of], keys[sig_of], extras[sig_of]

        def with_group(keys, calls):
            return np.where(keys >= 0, keys * g_count + grank[calls, None], -1)

        def ext_of(calls, resets):
            """ResetLastEvents(0) of a line this one depends on, since its last call."""
            cum = np.cumsum(resets)
            cnt = cum[calls]
            ext = np.zeros(len(calls), bool)
            ext[1:] = cnt[1:] > cnt[:-1]
            after = bool(len(calls)) and bool(cum[-1] > cnt[-1])
            return ext, after

        out = []
        none = np.zeros(n, bool)
        # XLA Modules
        calls = np.flatnonzero(mod_key >= 0)
        m_ev = _line_events(np.ones(len(calls), np.int64), with_group(mod_key[calls, None], calls),
                            np.zeros(len(calls), bool), False, b[calls], e[calls])
        m_reset = none.copy()
        m_reset[calls[m_ev.new0]] = True
        # XLA Ops
        depth, keys, extras = levels(2)
        calls = np.flatnonzero(depth > 0)
        ext, after = ext_of(calls, m_reset)
        o_ev = _line_events(depth[calls], with_group(keys[calls], calls), ext, after, b[calls], e[calls])
        # Framework Name Scope (only TF and JAX ops with scopes call it)
        depth_s, keys_s, _ = levels(5)
        calls = np.flatnonzero(depth_s > 0)
        ext, after = ext_of(calls, m_reset)
        s_ev = _line_events(depth_s[calls], with_group(keys_s[calls], calls), ext, after, b[calls], e[calls])
        s_reset = m_reset.copy()
        s_reset[calls[s_ev.new0]] = True
        # Framework Ops: reset with the name scopes' level 0
        calls = np.flatnonzero(tf_key >= 0)
        ext, after = ext_of(calls, s_reset)
        t_ev = _line_events(np.ones(len(calls), np.int64), with_group(tf_key[calls, None], calls), ext, after,
                            b[calls], e[calls])
        # Source code
        calls = np.flatnonzero(src_key >= 0)
        c_ev = _line_events(np.ones(len(calls), np.int64), with_group(src_key[calls, None], calls),
                            np.zeros(len(calls), bool), False, b[calls], e[calls])

        def line(ev, key_matrix, extra_matrix=None, calls=None):
            if ev is None or not len(ev.begin):
                return None
            c0 = calls[ev.c0]
            key = key_matrix[c0, ev.level] if key_matrix.ndim == 2 else key_matrix[c0]
            extra = (extra_matrix[c0, ev.level] if extra_matrix.ndim == 2 else extra_matrix[c0]) \
                if extra_matrix is not None else np.full(len(c0), -1, np.int64)
            return DerivedLine(0, "", ev.begin, ev.end - ev.begin, key, extra)

        out = [line(s_ev, keys_s, None, np.flatnonzero(depth_s > 0)),
               line(t_ev, tf_key, None, np.flatnonzero(tf_key >= 0)),
               line(m_ev, mod_key, mod_extra, np.flatnonzero(mod_key >= 0)),
               line(o_ev, keys, extras, np.flatnonzero(depth > 0)),
               line(c_ev, src_key, None, np.flatnonzero(src_key >= 0))]
        return out

    def _derive_stream(self, rows, b_all, e_all, cols) -> list:
        """``DeriveEventsFromAnnotationsForLines`` for one stream, event by event (the
        reference; used when kernels carry scope range ids)."""
        gpu = True
        tf_ops = _Builder(gpu)
        tf_name_scope = _Builder(gpu, [tf_ops])
        hlo_ops = _Builder(gpu)
        hlo_modules = _Builder(gpu, [tf_name_scope, hlo_ops])
        source = _Builder(gpu)
        tree = self.space.scope_tree
        table = self.strings.table
        sig_of, sigs = self._kernel_kinds(rows, cols)
        sid_c, sid_f = cols["scope_range_id"], cols["scope_range_id?"]
        group = None  # no groups (see collect)
        for k, r in enumerate(rows.tolist()):
            mod_key, mod_extra, op_keys, op_extras, tf_key, scopes, src_key = sigs[sig_of[k]]
            b = int(b_all[k])
            e = int(e_all[k])
            levels: list = []
            if (mod_key >= 0 or op_keys) and sid_f[r]:
                s = int(sid_c[r])
                levels.append(s)
                seen = set()
                nxt = tree.get(s)
                while nxt is not None:
                    if nxt in seen:  # "Cycle detected in scope_range_id_tree"
                        break
                    seen.add(nxt)
                    levels.append(nxt)
                    nxt = tree.get(nxt)
            if mod_key >= 0:
                hlo_modules.add(mod_key, b, e, group, levels[-1] if levels else None, extra=mod_extra)
            if op_keys:
                scoped = levels[::-1] if len(levels) == len(op_keys) else ()
                hlo_ops.add_levels(op_keys, b, e, group, scoped, extras=op_extras)
            if tf_key >= 0:
                tf_name_scope.add_levels(scopes, b, e, group)
                tf_ops.add(tf_key, b, e, group)
            if src_key >= 0:
                source.add(src_key, b, e, group)
        del table
        return [self._finish_ids(x) for x in (tf_name_scope, tf_ops, hlo_modules, hlo_ops, source)]

    def _finish_ids(self, b: _Builder) -> DerivedLine | None:
        if not b.key:
            return None
        begin = np.asarray(b.begin, np.int64)
        end = np.asarray(b.end, np.int64)
        extra = np.asarray([-1 if x is None else x for x in b.extra], np.int64)
        return DerivedLine(0, "", begin, end - begin, np.asarray(b.key, np.int64), extra)

    def _tf_op(self, full: str, b: int, e: int, group, tf_name_scope: _Builder, tf_ops: _Builder) -> None:
        """``ProcessTfOpEvent``."""
        category, name, typ = parse_tf_op(full)
        if category in (TENSORFLOW, JAX):
            tf_name_scope.add_levels(name_scopes(name), b, e, group)
        self._set_display(full, tf_op_event_name(category, name, typ))
        tf_ops.add(full, b, e, group)

    # TPU -------------------------------------------------------------------------------

    def _tpu_groups(self, line, ts, dur):
        """Group ids of a TensorCore plane's events (tsl ``GroupTpuEventsOSS`` when no
        host step reached the device): the grouping line's events get the next group ids
        after the host's (``CreateEventGroups``), every other event the group of the
        grouping event it overlaps (``GroupLine``). -1: none."""
        n = len(line)
        group = np.full(n, -1, np.int64)
        if self.space.loop_ops:  # CheckLoopOp: no grouping at all
            return group, None
        counts = self.counts
        steps = [i for i, nm in enumerate(self.line_names) if nm in (STEP_LINE, "Sparse Core Steps")]
        modules = [i for i, nm in enumerate(self.line_names) if nm in (XLA_MODULE_LINE, "Sparse Core Modules")]
        step_line = steps[-1] if steps else None
        module_line = modules[-1] if modules else None
        grouping = step_line if step_line is not None and counts[step_line] else (
            module_line if module_line is not None and counts[module_line] else None)
        if grouping is None:
            return group, None
        g_rows = np.flatnonzero(line == grouping)
        group[g_rows] = self.space.host_groups + np.arange(len(g_rows))
        g_begin, g_end = ts[g_rows], ts[g_rows] + dur[g_rows]
        g_ids = group[g_rows]
        for li in range(len(self.line_names)):
            if li in steps:  # GroupTpuXPlaneEvents regroups every line but the Steps lines
                continue
            rows = np.flatnonzero(line == li)
            if not rows.size:
                continue
            group[rows] = _overlapping_groups(g_begin, g_end, g_ids, ts[rows], ts[rows] + dur[rows])
        return group, (grouping if grouping == step_line else None, g_rows)

    def _derive_tpu(self, reference: bool = False):
        """``DeriveLinesFromStats`` for a TensorCore plane (after TPU grouping); with
        numpy a line at a time, or event by event (``reference``)."""
        c = self.cols
        line = c.get("line", np.int32)
        ts, dur, mid = c.get("ts", np.int64), c.get("dur", np.int64), c.get("mid", np.int64)
        tf_c, src_c = c.get("tf_op", np.int32), c.get("source", np.int32)
        a_f, a_c = c.get("_a?", bool), c.get("_a", np.int64)
        step_f, step_c = c.get("step_num?", bool), c.get("step_num", np.int64)
        iter_f, iter_c = c.get("iter_num?", bool), c.get("iter_num", np.int64)
        grouped, grouping = self._tpu_groups(line, ts, dur)
        step_names = None
        if grouping is not None and grouping[0] is not None:
            # AddGroupMetadataToStepEvents: a step is named after its group (GetGroupName
            # of an implicit root: the event's iter_num, else step_num, else the group id)
            rows = grouping[1]
            names = np.where(iter_f[rows], iter_c[rows], np.where(step_f[rows], step_c[rows], grouped[rows]))
            step_names = [str(int(x)) for x in names.tolist()]
        table = self.strings.table
        md_stats = self.md_stats
        # the metadata's stats, then the event's own: the last one wins
        mids = np.asarray(sorted(md_stats), np.int64)
        pos = np.clip(np.searchsorted(mids, mid), 0, max(len(mids) - 1, 0))
        has_md = (mids[pos] == mid) if len(mids) else np.zeros(len(mid), bool)

        def md_col(name, to_int):
            vals = np.asarray([to_int(md_stats[k].get(name)) for k in mids.tolist()] or [-1], np.int64)
            return np.where(has_md, vals[pos] if len(mids) else -1, -1)

        tf = np.where(tf_c >= 0, tf_c, md_col("tf_op", lambda v: -1 if v is None else self.strings.add(v)))
        src = np.where(src_c >= 0, src_c, md_col("source", lambda v: -1 if v is None else self.strings.add(v)))
        md_group = md_col("group_id", lambda v: -1 if v is None else int(v))
        group = np.where(grouped >= 0, grouped, md_group)  # GroupLine's stat is the last
        is_async = np.where(a_f, a_c, np.maximum(md_col("_a", lambda v: 0 if v is None else int(v)), 0)) != 0
        order = std_sort_order(ts, dur)  # GetSortedEvents(plane, include_derived_events=true)
        order = order[~is_async[order]]  # "Disregard asynchronous events."
        # HostOffloadEventProcessor::IsHostOffloadOpName: a keyword in the display name, S(5) in the name
        offload_mids = {m for m, disp in self.md_display.items()
                        if disp and HOST_MEMORY_LABEL in self.md_name.get(m, "")
                        and any(k in disp for k in HOST_OFFLOAD_KEYWORDS)}
        offload = _HostOffload()
        for r in order[np.isin(mid[order], list(offload_mids))].tolist() if offload_mids else ():
            m = int(mid[r])
            offload.event(self.md_display[m], int(ts[r]), int(ts[r] + dur[r]), m)
        out = []
        if reference:
            tf_ops = _Builder(False)
            tf_name_scope = _Builder(False, [tf_ops])
            source = _Builder(False)
            for r in order.tolist():
                g = int(group[r]) if group[r] >= 0 else None
                b = int(ts[r])
                e = b + int(dur[r])
                if tf[r] > 0:
                    self._tf_op(table[int(tf[r])], b, e, g, tf_name_scope, tf_ops)
                if src[r] > 0:
                    source.add(table[int(src[r])], b, e, g)
            tf_name_scope.reset(0)
            lines = (tf_name_scope, tf_ops, source)
            derived = [self._finish(x, 0, "") for x in lines]
        else:
            derived = self._tpu_lines(order, ts, dur, tf, src, group)
        for d, tid, name in zip(derived, (THREAD_ID_TF_NAME_SCOPE, THREAD_ID_TF_OP, THREAD_ID_SOURCE),
                                (NAME_SCOPE_LINE, TF_OP_LINE, SOURCE_LINE)):
            if d is not None and len(d.key):
                d.tid, d.name = tid & 0xFFFFFFFF, name
                out.append(d)
        for k, row in enumerate(offload.rows):
            if not row:
                continue
            begin = np.asarray([x[0] for x in row], np.int64)
            end = np.asarray([x[1] for x in row], np.int64)
            extra = []
            for _b, _e, _name, start_mid, done_mid in row:
                st = {}
                for v in md_stats.get(done_mid, {}).get("raw_bytes_accessed", []):
                    st["raw_bytes_accessed"] = v
                shape = md_stats.get(start_mid, {}).get("shape_with_layout")
                if shape is not None:
                    st["shape_with_layout"] = shape
                extra.append(self.extra_id(st))
            # CreateEventMetadata with only a display name: no name, so no long_name
            key = []
            for x in row:
                ident = "\x00" + x[2]  # a name of its own, shown by its display name
                self.display_by_name[ident] = x[2]
                key.append(self.key_id(ident))
            out.append(DerivedLine((THREAD_ID_HOST_OFFLOAD_START + k) & 0xFFFFFFFF, f"{HOST_OFFLOAD_LINE} row {k}",
                                   begin, end - begin, np.asarray(key, np.int64), np.asarray(extra, np.int64)))
        return out, {}, step_names

    def _tpu_lines(self, order, ts, dur, tf, src, group) -> list:
        """Framework Name Scope, Framework Ops and Source code of a TensorCore plane, a
        line at a time with numpy (:func:`_line_events`; events without a group follow
        the gap rule): the name scopes depend on nothing, the framework ops reset with the
        name scopes' level 0, and the name scopes are closed at the end
        (``tf_name_scope.ResetLastEvents(0)``)."""
        table = self.strings.table
        tf_o, src_o, g_o = tf[order], src[order], group[order]
        b = ts[order]
        e = b + dur[order]
        n = len(order)
        tf_ids, tf_inv = np.unique(tf_o, return_inverse=True)
        sigs = [self._signature("", None, None, table[int(t)]) if t > 0 else (-1, -1, [], [], -1, [], -1)
                for t in tf_ids.tolist()]
        tf_inv = tf_inv.reshape(-1)
        tf_key = np.asarray([x[4] for x in sigs] or [-1], np.int64)[tf_inv] if n else np.zeros(0, np.int64)
        depth = np.asarray([len(x[5]) for x in sigs] or [0], np.int64)
        width = max(1, int(depth.max()))
        scope_keys = np.full((max(len(sigs), 1), width), -1, np.int64)
        for i, x in enumerate(sigs):
            scope_keys[i, :len(x[5])] = x[5]
        depth, scope_keys = (depth[tf_inv], scope_keys[tf_inv]) if n else (np.zeros(0, np.int64), scope_keys[:0])
        src_ids, src_inv = np.unique(src_o, return_inverse=True)
        src_key = np.asarray([self.key_id(table[int(x)]) if x > 0 else -1 for x in src_ids.tolist()] or [-1],
                             np.int64)[src_inv.reshape(-1)] if n else np.zeros(0, np.int64)
        grank, _ = _rank(g_o) if n else (np.zeros(0, np.int64), None)
        g_count = int(grank.max(initial=0)) + 1
        nogroup = g_o < 0

        def keyed(keys, calls):
            return np.where(keys >= 0, keys * g_count + grank[calls, None], -1)

        calls_s = np.flatnonzero(depth > 0)
        s_ev = _line_events(depth[calls_s], keyed(scope_keys[calls_s], calls_s), np.zeros(len(calls_s), bool),
                            True, b[calls_s], e[calls_s], nogroup[calls_s])
        s_reset = np.zeros(n, bool)
        s_reset[calls_s[s_ev.new0]] = True
        calls_t = np.flatnonzero(tf_key >= 0)
        cum = np.cumsum(s_reset)
        cnt = cum[calls_t]
        ext = np.zeros(len(calls_t), bool)
        ext[1:] = cnt[1:] > cnt[:-1]
        t_ev = _line_events(np.ones(len(calls_t), np.int64), keyed(tf_key[calls_t, None], calls_t), ext, False,
                            b[calls_t], e[calls_t], nogroup[calls_t])
        calls_c = np.flatnonzero(src_key >= 0)
        c_ev = _line_events(np.ones(len(calls_c), np.int64), keyed(src_key[calls_c, None], calls_c),
                            np.zeros(len(calls_c), bool), False, b[calls_c], e[calls_c], nogroup[calls_c])

        def line(ev, keys, calls):
            if not len(ev.begin):
                return None
            c0 = calls[ev.c0]
            key = keys[c0, ev.level] if keys.ndim == 2 else keys[c0]
            return DerivedLine(0, "", ev.begin, ev.end - ev.begin, key, np.full(len(c0), -1, np.int64))

        return [line(s_ev, scope_keys, calls_s), line(t_ev, tf_key, calls_t), line(c_ev, src_key, calls_c)]


def _overlapping_groups(g_begin, g_end, g_ids, begin, end) -> np.ndarray:
    """``GroupLine`` with ``GroupQueue``/``XEventContextTracker::GetOverlappingEvent``:
    per event of a line (in line order), the group of the grouping-line event it
    overlaps (end points included), searched forward from the last one found."""
    out = np.full(len(begin), -1, np.int64)
    cur = -1  # current_index_
    have = False  # group_event_visitor_ set
    gid = -1
    n = len(g_begin)
    for k, (b, e) in enumerate(zip(begin.tolist(), end.tolist())):
        if have and g_begin[cur] <= e and b <= g_end[cur]:
            out[k] = gid
            continue
        found = -1
        if cur != -1 and g_begin[cur] <= e and b <= g_end[cur]:
            found = cur
        else:
            for i in range(cur + 1, n):
                if g_begin[i] > e:
                    break
                if g_end[i] < b:
                    continue
                cur = i
                if g_begin[i] <= e and b <= g_end[i]:
                    found = i
                break
        if found >= 0:
            have = True
            gid = int(g_ids[found])
            out[k] = gid
        else:
            have = False
            gid = -1
    return out


class _HostOffload:
    """``HostOffloadEventProcessor``: an event from each host-memory ``*-start`` to its
    ``*-done``, on the first row whose last event ended by its start."""

    def __init__(self):
        self.seen: dict[str, list] = {}
        self.rows: list[list] = []
        self.frontier: list[int] = []

    @staticmethod
    def instruction_name(op_name: str) -> str:
        """``GetOffloadInstructionName``: ``offload-<op>.<n>``."""
        parts = op_name.split(".")
        ident = parts[-1] if len(parts) >= 2 else "0"
        k = op_name.find("-start")
        if k < 0:
            k = op_name.find("-done")
        base = op_name[:k] if k >= 0 else op_name
        return f"offload-{base}.{ident}"

    def event(self, display: str, begin: int, end: int, mid: int) -> None:
        name = self.instruction_name(display)
        queue = self.seen.setdefault(name, [])
        if "-start" in display:
            queue.append((begin, mid))
            return
        if "-done" not in display or not queue:
            return  # no start traced for this done
        s_begin, s_mid = queue.pop(0)
        e = max(s_begin, end)  # Timespan::FromEndPoints
        row = -1
        frontier = s_begin
        for i, f in enumerate(self.frontier):
            if f <= frontier:
                row = i
                frontier = f
        if row == -1:
            if len(self.rows) < MAX_HOST_OFFLOAD_LINES:
                self.rows.append([])
                self.frontier.append(e)
            row = len(self.rows) - 1
        self.frontier[row] = max(self.frontier[row], e)
        self.rows[row].append((s_begin, e, name, s_mid, mid))


class HostPlane:
    """A host plane: only its step roots matter here (:meth:`Space.host_chunk`)."""

    def __init__(self, space: Space, meta, key: int):
        self.space = space
        self.key = key
        self.event_names = {k: v.name for k, v in meta.event_metadata.items()}

    def collect(self, ev, ts, data) -> None:
        self.space.host_chunk(self.key, ev, ts, self.event_names)

    def hold(self, ev, keep, *_args) -> np.ndarray:
        return keep


class Space:
    """What derivation needs of the whole XSpace: whether XProf would preprocess it, the
    compiled programs' HLO, the scope range tree, the host's step roots, and the device
    planes collected on the way."""

    def __init__(self, names: NameTable):
        self.names = names
        self.grouped = False
        self.loop_ops = False
        self.hlo: dict[int, bytes] = {}
        self._symbols: dict[int, dict] = {}
        self.scope_tree: dict[int, int] = {}
        self.roots: list[np.ndarray] = []  # per host plane chunk: (line key, begin, end, level)
        self.devices: list[DevicePlane] = []
        self.host_planes = 0

    # -- planes ----------------------------------------------------------------------------

    def note(self, meta, plane_name: str) -> None:
        """A plane's metadata (call for every plane of the XSpace, shown or not)."""
        self.grouped |= any(m.name == "group_id" for m in meta.stat_metadata.values())
        self.loop_ops |= any(m.name in LOOP_OPS for m in meta.event_metadata.values())
        if plane_name == METADATA_PLANE:
            self._hlo_protos(meta)
        elif plane_name == SCOPE_TREE_PLANE:
            for st in meta.stats:  # ScopeRangeIdTree: stat metadata id -> IntValue
                value = st.int64_value if st.WhichOneof("value") == "int64_value" else 0
                self.scope_tree.setdefault(st.metadata_id, value)

    def _hlo_protos(self, meta) -> None:
        """``ParseHloProtosFromXSpace`` after ``FixHloMetadataInXSpace``: program id = the
        ``program_id`` stat, else the ``(<n>)`` at the end of the name, else the id."""
        names = {k: v.name for k, v in meta.stat_metadata.items()}
        for k, md in meta.event_metadata.items():
            proto = None
            pid = None
            for st in md.stats:
                sname = names.get(st.metadata_id)
                if sname in ("Hlo Proto", "HLO Proto") and st.WhichOneof("value") == "bytes_value":
                    proto = st.bytes_value
                elif sname == "program_id" and st.WhichOneof("value") in ("int64_value", "uint64_value"):
                    pid = getattr(st, st.WhichOneof("value")) & (2**64 - 1)
            if proto is None:
                continue
            if pid is None:
                m = _PROGRAM_ID_IN_NAME.fullmatch(md.name)
                pid = int(m.group(1)) if m and int(m.group(1)) < (1 << 64) else k
            self.hlo.setdefault(pid, proto)

    def symbols(self, program_id, hlo_op: str) -> tuple[str, str]:
        """The symbol resolver of ``GenerateDerivedTimeLines``: (framework op name, source)
        of an HLO instruction (``HloInstructionWrapper::op_full_name``, ``source_info``)."""
        if program_id is None:
            return "", ""
        table = self._symbols.get(program_id)
        if table is None:
            table = self._symbols[program_id] = {}
            data = self.hlo.get(program_id)
            if data is not None:
                try:
                    proto = hlo_pb2.HloProto.FromString(data)
                except DecodeError:  # XProf skips a module it cannot read
                    proto = None
                if proto is not None:
                    for comp in proto.hlo_module.computations:
                        for ins in comp.instructions:
                            if ins.name in table:
                                continue
                            md = ins.metadata
                            src = f"{md.source_file.rsplit('/', 1)[-1]}:{md.source_line}" if md.source_file else ""
                            table[ins.name] = (f"{md.op_name}:{md.op_type}", src)  # tsl TraceMeOp
        return table.get(hlo_op, ("", ""))

    def plane(self, meta, plane_name: str, headers, counts) -> DevicePlane | HostPlane | None:
        """Start a shown plane: a :class:`DevicePlane` for GPU and TPU planes (set its
        ``pid``, ``plane_index`` and ``line_track`` once known), a :class:`HostPlane` for
        host planes; their ``collect(ev, ts, data)`` takes each decoded chunk."""
        self.note(meta, plane_name)
        if plane_name.startswith(GPU_PREFIX) or TENSOR_CORE_PLANE.fullmatch(plane_name):
            d = DevicePlane(self, meta, plane_name, headers, counts)
            self.devices.append(d)
            return d
        if plane_name.startswith(HOST_PREFIX):
            self.host_planes += 1
            return HostPlane(self, meta, self.host_planes)
        return None

    def host_chunk(self, plane_key: int, ev, ts, event_names: dict[int, str]) -> None:
        """Host step roots of one chunk of a host plane (``_r``; legacy ``TraceContext``;
        the roots XProf's XplaneRootEventMutator makes), for the group ids TPU steps get
        after them."""
        v = xw.StatView(ev, "_r")
        level = np.zeros(ev.n, np.int64)
        rv = v.int_value()
        level[v.present] = ((rv[v.present] + (1 << 31)) % (1 << 32)) - (1 << 31)
        special = {k: nm for k, nm in event_names.items() if nm == "TraceContext" or nm in xs.ROOT_MUTATED}
        for k, nm in special.items():
            m = ev.metadata_id == k
            if nm == "TraceContext":
                m &= ~v.present
                level[m] = 1
            else:
                level[m] = xs.ROOT_MUTATED[nm]
        sel = np.flatnonzero(level > 0)
        if sel.size:
            self.roots.append(np.stack([ev.line[sel].astype(np.int64) + (plane_key << 32), ts[sel],
                                        ts[sel] + ev.duration_ps[sel], level[sel]], axis=1))

    @property
    def host_groups(self) -> int:
        """How many groups the host's roots make (``CreateEventGroups`` with
        ``RootNeedsGrouping``): roots no other root of the same level encloses."""
        if not self.roots:
            return 0
        r = np.concatenate(self.roots)
        count = 0
        for key in np.unique(r[:, [0, 3]], axis=0).tolist():
            rows = r[(r[:, 0] == key[0]) & (r[:, 3] == key[1])]
            rows = rows[np.lexsort((-(rows[:, 2] - rows[:, 1]), rows[:, 1]))]
            end = None
            for b, e in rows[:, 1:3].tolist():
                if end is not None and e <= end:
                    continue
                count += 1
                end = e
        return count

    # -- the end ---------------------------------------------------------------------------

    def emit(self, parts, tracks: list[Track], planes: list[bytes], blob_base: int, steps: list) -> int:
        """Derive every device plane's lines: set the display ids of its own lines, add a
        track per derived line with its slices (sent to ``parts``, their args as XEvents
        in a blob of their own), send the held ``Steps`` events; returns the bytes of blob
        added."""
        blob = bytearray()
        for d in self.devices:
            if d.plane_index < 0:
                continue
            lines, display, step_names = d.derive()
            own = [ti for ti in range(len(tracks)) if tracks[ti].pid == d.pid and tracks[ti].kind == "slices"
                   and tracks[ti].plane == d.plane_index]
            # tid: XLineVisitor::DisplayId, the display id DeriveEventsFromAnnotations set
            for li, ti in enumerate(d.line_track.tolist()):
                if ti >= 0:
                    h = d.headers[li]
                    tracks[ti].tid = display.get(li, h.display_id or h.id) & 0xFFFFFFFF
            self._emit_held(d, parts, step_names, steps)
            if lines:
                meta = xplane_pb2.XPlane(name=d.plane_name)
                stat_ids: dict[str, int] = {}
                md_ids: dict[tuple, int] = {}
                plane_index = len(planes)
                for dl in lines:
                    ti = len(tracks)
                    tracks.append(Track(d.pid, dl.tid, dl.name, ti, "slices", plane_index))
                    own.append(ti)
                    # one XEvent per distinct (name, details): events share their bytes
                    inv, first = _rank(dl.key, dl.extra)
                    offs = np.zeros(len(first), np.int64)
                    lens = np.zeros(len(first), np.int32)
                    name_ids = np.zeros(len(first), np.int32)
                    for k, (key, extra) in enumerate(zip(dl.key[first].tolist(), dl.extra[first].tolist())):
                        name = d.keys[key]
                        disp = d.display_by_name.get(name) or ""
                        raw = _xevent(meta, md_ids, stat_ids, "" if name.startswith("\x00") else name, disp,
                                      d.extras[extra] if extra >= 0 else None)
                        offs[k] = blob_base + len(blob)
                        lens[k] = len(raw)
                        blob += raw
                        name_ids[k] = self.names(disp or name)  # the display name, else the name
                    parts.events(np.full(len(inv), ti, np.int32), dl.begin, np.maximum(dl.dur, 1), name_ids[inv],
                                 offs[inv], lens[inv])
                planes.append(meta.SerializeToString())
            # the trace viewer orders a process's threads by tid (thread_sort_index)
            base = min((tracks[ti].sort_index for ti in own), default=0)
            for rank, ti in enumerate(sorted(own, key=lambda t: (tracks[t].tid, t))):
                tracks[ti].sort_index = base + rank
        if blob:
            parts.blob(bytes(blob))
        return len(blob)

    def _emit_held(self, d: DevicePlane, parts, step_names, steps: list) -> None:
        """The held ``Steps`` events, named after their group when XProf renames them (and
        so the step bands of the page)."""
        if not d.held:
            return
        track, ts, dur, name_id, off, ln = (np.concatenate([h[k] for h in d.held]) for k in range(6))
        if step_names is not None and len(step_names) == len(ts):
            renamed = {(self.names.names[int(i)], int(t), int(du)): s
                       for i, t, du, s in zip(name_id.tolist(), ts.tolist(), dur.tolist(), step_names)}
            name_id = np.asarray([self.names(s) for s in step_names], np.int32)
            for k, (nm, t, du) in enumerate(steps):
                new = renamed.get((nm, t, du))
                if new is not None:
                    steps[k] = (new, t, du)
        parts.events(track, ts, np.maximum(dur, 1), name_id, off, ln)


def _xevent(meta, md_ids: dict, stat_ids: dict, key: str, display: str, stats) -> bytes:
    """A derived event as an ``XEvent`` of a plane metadata of its own (the trace viewer
    decodes args from the event's bytes and its track's plane: ``long_name`` when there
    is a display name, then these stats)."""
    mid = md_ids.get((key, display))
    if mid is None:
        mid = md_ids[(key, display)] = len(md_ids) + 1
        md = meta.event_metadata[mid]
        md.id = mid
        md.name = key
        md.display_name = display
    ev = xplane_pb2.XEvent(metadata_id=mid)
    for k, v in (stats or {}).items():
        sid = stat_ids.get(k)
        if sid is None:
            sid = stat_ids[k] = len(stat_ids) + 1
            meta.stat_metadata[sid].id = sid
            meta.stat_metadata[sid].name = k
        st = ev.stats.add(metadata_id=sid)
        if isinstance(v, str):
            st.str_value = v
        elif v >= (1 << 63):
            st.uint64_value = int(v)
        else:
            st.int64_value = int(v)
    return ev.SerializeToString()
