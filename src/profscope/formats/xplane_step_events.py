"""XProf's step database of one host's XSpace (``OpStats.step_db``), and the device
activities profscope's own step breakdown (tools/xplane_step_breakdown.py) splits by
category, read in one pass over the planes.

XProf 2.24's steps (xprof/convert/xplane_to_step_events.cc, step_events_to_steps_db.cc,
xprof/utils/event_span.cc; the GPU and CPU paths of ``ConvertXSpaceToOpStats``):

* **GPU/ROCm device planes** (``/device:GPU:N``): a plane's *step markers* are the events
  of its ``Steps`` line (line id tsl ``kThreadIdStepInfo``), one per ``group_id``
  (``ConvertDeviceStepInfoToStepMarkers``); its *step events* are the events of its other
  non-derived lines that carry both ``correlation_id >= 0`` and ``group_id >= 0``, typed by
  ``ClassifyGpuEvent``: tsl ``ParseTfOpFullname`` memcpy names (``MemcpyHToD``...; TF's
  ``MemcpyH2D`` is not one, so it counts as compute), ``nccl*`` as collectives, else
  device compute (16-bit when the ``tensor_shapes`` or the name say half). A plane keeps
  the groups that have both (``IntersectCombineStepEvents``), the planes are united.
  The ``group_id`` stats and the ``Steps`` line are XProf's step grouping
  (``GroupTfEvents`` + ``DeriveStepEventsFromGroups``); profscope reads them where the
  profile already holds them (``IsXSpaceGrouped``: a ``group_id`` stat exists, as in
  TensorFlow's GPU profiles). A GPU profile that is not grouped (JAX without
  ``StepTraceAnnotation``: XProf finds no root event there, hence no step) has no steps.
* **CPU-only profiles** (no device plane): the host plane's events get XProf's group ids
  (formats/xplane_steps.py ``Grouping``); each group's root event and every
  ``train``/``test``/``TraceContext`` event is a step marker, every other grouped event
  is a host event typed by ``ClassifyCpuEvent`` (``IsRealCpuCompute`` leaves out
  ``EagerExecute``/``FunctionRun`` events and markers). The input-pipeline stage rule
  (``is_input_pipeline_stage``) is not read: the tf.data stage events XProf calls
  ``HOST_WAIT_INPUT`` count as host compute here.
* Then per step (``ConvertStepEventsToStepDb``): the events made non-overlapping by
  priority (``ToNonOverlappedEvents``: where events overlap, the higher ``EventType``
  wins), the step's time the longest marker (``StepDetails::StepTime``: the longest
  device marker, or the longest host marker when no device marker exists), each type's
  time the overlap of its spans with the step, the rest ``UNKNOWN_TIME``; a step without
  device compute (host compute on CPU) or of zero length is dropped. Steps are in
  ``group_id`` order.
* TPU TensorCore planes: the ``Steps`` line's events are the step markers, those of one
  name (the runtime's step number) on every core one step, its time the longest of them;
  XProf's TPU grouping (``GroupTpuEventsOSS``) and per-core TPU breakdown are not
  ported, so these steps carry no XProf event types. A TPU profile without a ``Steps``
  line has no steps, as in XProf.

The device activities (every event of a device plane's non-derived lines; on TPU the
top-level events of the ``XLA Ops`` line) carry their HLO op, program and category
inputs; the categories themselves are profscope's (tools/xplane_step_breakdown.py).
All times are absolute picoseconds (the line's ``timestamp_ns`` * 1000 + offset).
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from profscope.formats import xplane, xplane_op_metrics
from profscope.formats import xplane_wire as xw
from profscope.formats.xplane_derived import THREAD_ID_STEP_INFO, is_derived_thread_id, parse_tf_op, MEMCPY
from profscope.formats.protos import xplane_pb2
from profscope.formats.xplane_op_metrics import device_span
from profscope.model.gc_pause import gc_paused

__all__ = ["EVENT_TYPES", "Activities", "StepEvents", "read_step_events"]

GPU_PREFIX, TPU_PREFIX, HOST_PLANE = "/device:GPU:", "/device:TPU:", "/host:CPU"
TPU_OP_LINE, STEP_LINE = "XLA Ops", "Steps"

# xprof/utils/event_span.h ``EventType``: the value is the priority (higher wins)
UNKNOWN_TIME, HOST_COMPUTE, HOST_COMPILE, HOST_TO_HOST, HOST_TO_DEVICE, HOST_PREPARE = 0, 10, 60, 70, 80, 90
DEVICE_COLLECTIVES, HOST_WAIT_INPUT, DEVICE_TO_DEVICE, DEVICE_TO_HOST = 100, 110, 120, 130
DEVICE_COMPUTE_32, DEVICE_COMPUTE_16, DEVICE_WAIT_DEVICE, DEVICE_WAIT_HOST = 140, 150, 160, 170
EVENT_TYPES = {
    "unknown_time": UNKNOWN_TIME, "host_compute": HOST_COMPUTE, "host_compile": HOST_COMPILE,
    "host_to_host": HOST_TO_HOST, "host_to_device": HOST_TO_DEVICE, "host_prepare": HOST_PREPARE,
    "device_collectives": DEVICE_COLLECTIVES, "host_wait_input": HOST_WAIT_INPUT,
    "device_to_device": DEVICE_TO_DEVICE, "device_to_host": DEVICE_TO_HOST,
    "device_compute_32": DEVICE_COMPUTE_32, "device_compute_16": DEVICE_COMPUTE_16,
    "device_wait_device": DEVICE_WAIT_DEVICE, "device_wait_host": DEVICE_WAIT_HOST,
}
_MEMCPY_TYPES = {"MemcpyHToD": HOST_TO_DEVICE, "MemcpyDToH": DEVICE_TO_HOST, "MemcpyDToD": DEVICE_TO_DEVICE}


@dataclass
class Activities:
    """One device's activities (events of its non-derived lines), one entry per event."""

    device: int  # the plane's id (the N of /device:GPU:N)
    plane: str
    start: list[int] = field(default_factory=list)  # absolute ps
    end: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)  # the event's name (kernel, memcpy, HLO op on TPU)
    hlo_op: list[str] = field(default_factory=list)  # the hlo_op stat's op ("" without)
    program_id: list[int] = field(default_factory=list)  # -1 without
    # the TPU op's hlo_category stat (else the opcode of its HLO text); on GPU, a kernel of
    # no XLA op: its TensorFlow op's type ("tf:MatMul"), from the ``annotation`` stat
    hlo_category: list[str] = field(default_factory=list)
    memcpy: list[str] = field(default_factory=list)  # the memcpy_details stat ("" without)
    opcode: list[str] = field(default_factory=list)  # the HLO opcode of the op in its module ("" unknown)
    first_ps: int | None = None  # the plane's earliest event, of any line (Steps, modules...)
    # (device clock ps, trace clock ps) of each event's begin and of its end, where the two
    # may differ (TPU: ``device_offset_ps`` runs on the device's clock, the trace viewer and
    # profscope's trace index place the event at its line's timestamp + offset; over a
    # the v6e profile their offset varies by 0.26 s): a step's window on the index
    clock_begins: list[tuple[int, int]] = field(default_factory=list)
    clock_ends: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class StepEvents:
    """What one XSpace says about steps: XProf's step database and the device activities."""

    hardware: str  # XProf's HardwareType name: GPU, TPU or CPU_ONLY
    device_type: str  # the run environment's device kind ("GPU", "AMD GPU", the TPU's "TPU v6 Lite", "CPU")
    devices: list[Activities]
    # {step_num, name, step_name (XProf's, "" when it has none), begin_ps, duration_ps,
    #  type_ps: {EventType value: ps}}
    steps: list[dict]
    # where the steps come from: "pre-grouped" (a GPU profile's group_id stats and Steps
    # lines), "steps-line" (TPU), "grouped" (a CPU profile's host step groups), "none"
    grouping: str
    first_ps: int | None = None  # the earliest event of the device planes (or of the host plane)
    # the host ran tf.data ops (``Iterator::...`` events): XProf's TfDataInUse, which
    # picks the overview page's next step
    tf_data: bool = False
    program_names: dict[int, str] = field(default_factory=dict)  # program id -> module name
    hostname: str = ""  # XSpace.hostnames[0]


def _stats(stats, names: dict[int, str]) -> dict:
    return {names.get(s.metadata_id, ""): xplane.stat_value(s, names) for s in stats}


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


def _int(v, default: int = -1) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _program(v) -> int:
    """A program id as an int64 (TPU ids above 2^63 wrap, as XProf's int64 keys do); -1 without."""
    v = _int(v)
    return v - (1 << 64) if v >= (1 << 63) else v


def classify_gpu_event(name: str, tensor_shapes: str) -> int:
    """xplane_to_step_events.cc ``ClassifyGpuEvent``."""
    category, _name, typ = parse_tf_op(name)
    if category == MEMCPY and typ in _MEMCPY_TYPES:
        return _MEMCPY_TYPES[typ]
    if name.lower().startswith("nccl"):
        return DEVICE_COLLECTIVES
    text = tensor_shapes if tensor_shapes else name
    half = "half" in text or (not tensor_shapes and "fp16" in name)
    return DEVICE_COMPUTE_16 if half else DEVICE_COMPUTE_32


def _explicit_marker(name: str) -> bool:
    """``IsExplicitHostStepMarker``."""
    return name.startswith(("train", "test", "TraceContext")) and "/" not in name


def _real_cpu_compute(name: str) -> bool:
    """``IsRealCpuCompute``."""
    return not (name.startswith(("EagerExecute", "EagerLocalExecute", "EagerKernelExecute", "FunctionRun"))
                or _explicit_marker(name))


def classify_cpu_event(name: str) -> int:
    """``ClassifyCpuEvent`` of a CPU-only profile (no device, so never HOST_PREPARE)."""
    category, _name, typ = parse_tf_op(name)
    if (category == MEMCPY and typ == "MemcpyHToD") or name.startswith("InfeedEnqueue"):
        return HOST_TO_DEVICE
    if category == MEMCPY and typ == "MemcpyHToH":
        return HOST_TO_HOST
    if name.lower().startswith("iteratorgetnext"):
        return HOST_WAIT_INPUT
    return HOST_COMPUTE


def _clock_point(dev: Activities, span: tuple[int, int], trace_begin: int, trace_dur: int, always=False) -> None:
    """An event's begin and end on both clocks, where its device span is not its line's
    (``always``: a TPU core's every event, as its lines mix the two clocks: the XLA Ops
    carry device_offset_ps, the XLA Modules do not)."""
    if always or span != (trace_begin, trace_begin + trace_dur):
        dev.clock_begins.append((span[0], trace_begin))
        dev.clock_ends.append((span[1], trace_begin + trace_dur))


def _tf_op_type(annotation: str) -> str:
    """The TensorFlow op type of a GPU kernel's ``annotation`` (TF's ScopedAnnotation,
    ``<scope>/<name>:<type>#shape=...#``, the innermost op last), as ``tf:<type>``; "" without."""
    if not annotation:
        return ""
    last = annotation.split("::")[-1].split("#", 1)[0]
    _category, _name, typ = parse_tf_op(last)
    return f"tf:{typ}" if typ else ""


def _read_gpu_plane(plane, dev: Activities, steps: dict) -> None:
    """One GPU plane: its activities, and its step markers and events intersected into ``steps``."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    meta_stats = {k: _stats(m.stats, names) for k, m in plane.event_metadata.items()}
    meta_names = {k: m.name for k, m in plane.event_metadata.items()}
    markers: dict[int, list] = {}
    events: dict[int, list] = {}
    for line in plane.lines:
        line_ps = line.timestamp_ns * 1000
        if line.events:
            b0 = line_ps + min(ev.offset_ps for ev in line.events)
            dev.first_ps = b0 if dev.first_ps is None else min(dev.first_ps, b0)
        if line.id == THREAD_ID_STEP_INFO:
            for ev in line.events:
                st = {**meta_stats.get(ev.metadata_id, {}), **_stats(ev.stats, names)}
                g = _int(st.get("group_id"), None)
                if g is not None:
                    span = device_span(ev, st, line_ps)
                    _clock_point(dev, span, line_ps + ev.offset_ps, ev.duration_ps)
                    markers.setdefault(g, []).append(("device", span))
            continue
        if is_derived_thread_id(line.id):
            continue
        for ev in line.events:
            st = {**meta_stats.get(ev.metadata_id, {}), **_stats(ev.stats, names)}
            name = meta_names.get(ev.metadata_id, "")
            b = line_ps + ev.offset_ps
            e = b + ev.duration_ps
            hlo = _text(st.get("hlo_op"))
            dev.start.append(b)
            dev.end.append(e)
            dev.name.append(name)
            dev.hlo_op.append(hlo.split("::")[-1] if hlo else "")
            dev.program_id.append(_program(st.get("program_id")))
            dev.hlo_category.append("" if hlo else _tf_op_type(_text(st.get("annotation") or st.get("tf_op"))))
            dev.memcpy.append(_text(st.get("memcpy_details")))
            if _int(st.get("correlation_id")) >= 0 and _int(st.get("group_id")) >= 0:
                kind = classify_gpu_event(name, _text(st.get("tensor_shapes")))
                events.setdefault(st["group_id"], []).append((kind, b, e))
    if not events:
        return
    # IntersectCombineStepEvents(step_markers, &step_events): the groups with both
    for g, evs in events.items():
        if g in markers:
            entry = steps.setdefault(g, {"markers": [], "events": []})
            entry["markers"] += markers[g]
            entry["events"] += evs


def _read_tpu_plane(plane, dev: Activities, steps: dict) -> None:
    """A TPU TensorCore plane: the top-level ``XLA Ops`` events as activities and the
    ``Steps`` line's events as markers (no per-core TPU breakdown)."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    meta_stats = {k: _stats(m.stats, names) for k, m in plane.event_metadata.items()}
    meta = plane.event_metadata
    for line in plane.lines:
        line_ps = line.timestamp_ns * 1000
        for ev in line.events:
            span = device_span(ev, {**meta_stats.get(ev.metadata_id, {}), **_stats(ev.stats, names)}, line_ps)
            _clock_point(dev, span, line_ps + ev.offset_ps, ev.duration_ps, always=True)
            dev.first_ps = span[0] if dev.first_ps is None else min(dev.first_ps, span[0])
        if line.name == STEP_LINE:
            # keyed by the step's name (the runtime's step number): XProf's TPU grouping
            # (GroupTpuEventsOSS), which numbers them, is not ported
            for ev in line.events:
                st = {**meta_stats.get(ev.metadata_id, {}), **_stats(ev.stats, names)}
                m = meta.get(ev.metadata_id)
                steps.setdefault(m.name if m is not None else "", []).append(device_span(ev, st, line_ps))
            continue
        if line.name != TPU_OP_LINE:
            continue
        reach = None
        for ev in line.events:
            st = {**meta_stats.get(ev.metadata_id, {}), **_stats(ev.stats, names)}
            b, e = device_span(ev, st, line_ps)
            if reach is not None and e <= reach:
                continue  # nested in the op before (an AncestorStack child): its time is its parent's
            reach = e
            m = meta.get(ev.metadata_id)
            dev.start.append(b)
            dev.end.append(e)
            dev.name.append(m.display_name or m.name if m is not None else "")
            dev.hlo_op.append(m.display_name or m.name if m is not None else "")
            dev.program_id.append(_program(st.get("program_id")))
            dev.hlo_category.append(_text(st.get("hlo_category")) or _tpu_opcode(m.name if m is not None else ""))
            dev.memcpy.append("")


_HLO_TEXT_OPCODE = re.compile(r"%\S+ = (?:.*?\s)?([a-z][\w-]*)\(")


def _tpu_opcode(hlo_text: str) -> str:
    """The opcode of a TPU op's HLO text (its metadata name, ``%fusion.1 = f32[8]{0}
    fusion(...)``), for an op without an ``hlo_category`` stat; "" when it is no HLO text."""
    m = _HLO_TEXT_OPCODE.match(hlo_text)
    return m.group(1) if m else ""


_PAGES_LOCK = threading.Lock()
_pages = {"depth": 0, "was": None}


@contextlib.contextmanager
def small_pages():
    """numpy's transparent huge pages off for the block (``NUMPY_MADVISE_HUGEPAGE=0``'s
    switch, numpy's ``_set_madvise_hugepage``), process-wide and nestable across threads.
    The step reader of a long CPU profile makes and drops a dozen arrays over every event:
    in this VM, their fresh huge pages cost 3.5 s of system time on the 308 MB profile
    against 1.2 s for 4 KiB pages (docs/performance.md); the arrays live a second or two,
    too short for huge pages' fewer TLB misses to pay."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover - a numpy without the switch
        yield
        return
    with _PAGES_LOCK:
        if _pages["depth"] == 0:
            _pages["was"] = _set_madvise_hugepage(False)
        _pages["depth"] += 1
    try:
        yield
    finally:
        with _PAGES_LOCK:
            _pages["depth"] -= 1
            if _pages["depth"] == 0:
                _set_madvise_hugepage(_pages["was"])


def _host_steps(f, size, ref, out: list) -> int | None:
    """A CPU-only profile's host steps into ``out`` (see the module docstring); the host's first event ps."""
    data, drop = xw.map_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
    # (a read plane, a bytearray, is the process's own memory: nothing to let go)
    return host_steps_of_plane(data, ref.length, out, drop=drop if isinstance(data, memoryview) else None)


def host_steps_of_plane(data, length: int, out: list, meta=None, key=int, decoded=None, drop=None) -> int | None:
    """:func:`_host_steps` of a host plane's bytes already in memory (``data``: as
    ``xw.read_plane_bytes`` pads them, ``length`` the plane's; ``meta``: its parsed
    metadata, if at hand): only the stats the steps read are decoded (one native pass,
    no byte range per event), then XProf's grouping and the host step database. The
    step reader calls it on the plane it reads; the trace index build on the plane it
    has just read and decoded for the timeline, with ``decoded``: ``(headers, events)``
    gathered from that decode (:class:`HostEventColumns`), so the plane is neither read
    nor decoded a second time. ``key``: of the steps' ``type_ps`` keys (``str`` for the
    index folder's JSON). ``drop``: ``xw.map_plane_bytes``' of mapped bytes, whose pages
    the decode lets go as it passes them (``xw.decode_plane``) and the grouping after it."""
    if decoded is not None:
        headers, ev = decoded
    else:
        meta_bytes, line_spans = xw.split_plane(data, length)
        if meta is None:
            meta = xplane_pb2.XPlane.FromString(meta_bytes)
        b = np.frombuffer(data, dtype=np.uint8)
        wanted = host_step_stats({k: v.name for k, v in meta.stat_metadata.items()},
                                 {m.name for m in meta.event_metadata.values()})
        headers, ev = xw.decode_plane(data, b, line_spans, wanted, drop)  # no byte range per event kept
        del b
    if ev.n == 0:
        return None
    if ev.metadata_id.dtype != np.int32 and _fits_int32(ev.metadata_id):
        # int32, as the build's gathered columns (HostEventColumns) and XProf's own ids:
        # 4 bytes an event less through the grouping (jax308: 51 MiB)
        ev.metadata_id = ev.metadata_id.astype(np.int32)
    grouped = group_host_events(ev, data, meta, headers)
    if drop is not None:
        drop()  # (the pages of the string stats the grouping read)
    del data  # (the caller's reference may keep the bytes; the step database does not read them)
    return _host_step_db(ev, *grouped, out, key)


def host_step_stats(stat_names: dict[int, str], event_names: set | None = None) -> dict[int, str]:
    """Of a host plane's stat names, the stats the steps read (a JAX CPU event's
    hlo_op/hlo_module/program_id... were most of the decoded columns): the grouping's,
    and a grouped profile's own; with the plane's ``event_names``, less the grouping's
    that it never reads there (``xs.unread_stats``)."""
    from profscope.formats import xplane_steps as xs

    unread = xs.unread_stats(set(stat_names.values()), event_names) if event_names is not None else set()
    return {k: v for k, v in stat_names.items()
            if (v in xs.GROUPING_STATS and v not in unread) or v in ("group_id", "step_name")}


def group_host_events(ev, data, meta, headers) -> tuple:
    """XProf's step grouping of a host plane's decoded events ``ev`` (``data``: the
    plane's bytes, which string stats point into): the arguments of :func:`_host_step_db`
    after ``ev`` (line timestamps, group id per event, roots, named roots, event names,
    line names). The per-event stat views it made are dropped from ``ev``."""
    from profscope.formats import xplane_steps as xs

    stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
    event_names = {k: v.name for k, v in meta.event_metadata.items()}
    line_ts_ns = np.array([h.timestamp_ns for h in headers], dtype=np.int64)
    if any(m.name == "group_id" for m in meta.stat_metadata.values()):
        v = xw.StatView(ev, "group_id")
        group_id = np.where(v.present, v.int_value(), -1)
        # a profile grouped when it was captured: its step roots carry the step_name stat
        # the grouping gave them (EventForest ProcessRootEvent's AddStepName)
        sn = xw.StatView(ev, "step_name")
        at = np.flatnonzero(sn.present)
        strings = xw.Strings(data, stat_names)
        named = dict(zip(at.tolist(), (strings.table[k] for k in sn.str_or_ref(strings, at).tolist())))
        roots = []
    else:
        order, regions = xs.threadpool_regions(ev, event_names, line_ts_ns)
        g = xs.Grouping(ev, np.zeros(ev.n, dtype=np.int8), event_names, stat_names, meta, headers, line_ts_ns,
                        order, regions, xw.Strings(data, stat_names))
        g.let_go = True  # ev is the steps' own: the stats read once leave it once read
        group_id, roots, _how = g.run()
        named = {}
        del g
    ev.views.clear()  # the stats' per-event views the grouping read, and the file's bytes
    return line_ts_ns, group_id, roots, named, event_names, [h.name for h in headers]


def cpu_only(index: xplane.XSpaceIndex) -> bool:
    """Whether :func:`read_step_events` takes a profile's steps from XProf's host step
    grouping (no GPU plane, no TPU core plane): the planes' names decide, before a read."""
    return not any(r.name.startswith(GPU_PREFIX) or (r.name.startswith(TPU_PREFIX) and r.name[len(TPU_PREFIX):].isdigit())
                   for r in index.planes)


class HostEventColumns:
    """The columns :func:`group_host_events` reads, gathered from a host plane that the
    trace index build decodes chunk by chunk for the timeline (``xw.decode_events`` of
    about ``CHUNK_EVENTS`` events at a time, formats/xplane_trace.py), instead of a
    second decode of the plane (``xw.decode_plane``: 0.25 s of user time and 142 k fresh
    pages on the 308 MB JAX profile's 13.5 M events, docs/performance.md): line,
    metadata id, offset and duration copied into arrays sized for the plane's ``n``
    events (the metadata ids as int32 while they fit, as XProf's own ids do: 24 bytes an
    event, not 28), and of the stats only the :func:`host_step_stats` kinds, their event
    numbers made plane-wide (:class:`_KindColumns`: copied as they come, no join at the
    end). A kind's stats then lie chunk after chunk (within a chunk by field
    position, then event), as ``decode_plane``'s do with its own chunk size: within an
    event in field order, all that "the last (first) one wins" reads."""

    def __init__(self, n: int, stat_names: dict[int, str]):
        self.wanted = {xw._KIND[v] for v in host_step_stats(stat_names).values() if v in xw._KIND}
        self.parts: dict[int, _KindColumns] = {}
        self.n = 0
        self.size = n
        self.line = self.metadata_id = self.offset_ps = self.duration_ps = None

    def add(self, ev) -> None:
        """One decoded chunk, the plane's next ``ev.n`` events. Out of memory (28 bytes an
        event, on top of the build's), the columns are given up, not the timeline's build:
        :meth:`events` then raises, and the steps are the step reader's, later (as for any
        failure of the grouping in the build, :func:`host_steps_in_build`)."""
        if self.size < 0:
            return
        try:
            self._add(ev)
        except MemoryError:
            self.parts, self.line, self.metadata_id, self.offset_ps, self.duration_ps = {}, None, None, None, None
            self.size = -1

    def _add(self, ev) -> None:
        if self.line is None:
            with small_pages():  # (as the grouping's arrays: see there)
                self.line = np.empty(self.size, np.int32)
                self.metadata_id = np.empty(self.size, np.int32)
                self.offset_ps = np.empty(self.size, np.int64)
                self.duration_ps = np.empty(self.size, np.int64)
        a, z = self.n, self.n + ev.n
        if ev.n and self.metadata_id.dtype == np.int32 and not _fits_int32(ev.metadata_id):
            wide = np.empty(self.size, np.int64)  # an id past int32 (none in XProf's own): all int64
            wide[:a] = self.metadata_id[:a]
            self.metadata_id = wide
        self.line[a:z] = ev.line
        self.metadata_id[a:z] = ev.metadata_id
        self.offset_ps[a:z] = ev.offset_ps
        self.duration_ps[a:z] = ev.duration_ps
        for k, ks in ev.kinds.items():
            if k in self.wanted and len(ks.event):
                if k not in self.parts:
                    with small_pages():  # (pages touched only where written: see _KindColumns)
                        self.parts[k] = _KindColumns(ks, self.size - a)
                self.parts[k].add(ks, a)
        self.n = z

    def events(self) -> xw.Events:
        """The gathered columns as one ``xw.Events`` (as ``xw.decode_plane`` gives them);
        this object lets go of them."""
        if self.size < 0:
            raise MemoryError("the host plane's columns were given up")
        kinds = {k: c.stats() for k, c in self.parts.items()}
        n = self.n
        out = xw.Events(n, self.line[:n], self.metadata_id[:n], self.offset_ps[:n], self.duration_ps[:n], kinds)
        self.parts, self.line, self.metadata_id, self.offset_ps, self.duration_ps = {}, None, None, None, None
        return out


class _KindColumns:
    """One stat kind's gathered stats (``xw.KindStats``' five columns), each chunk's
    copied in as it is decoded into arrays with room for one stat of the kind on every
    event of the plane left (a kind's count is not known before the decode ends, and a
    chunk's rate foretells it badly: the 308 MB profile's first chunk has 1 in 70 of its
    events with a context stat, the plane 1 in 11). ``np.empty``'s pages are touched only
    where written, so the room never used costs no memory, and no join of the chunks is
    made at the end (a second copy of the 8 kinds' 5.9 M stats there, 25 k fresh pages,
    docs/performance.md). A chunk past the room (an event with two stats of one kind)
    grows it by a copy."""

    __slots__ = ("cols", "str_end", "n")

    def __init__(self, ks: xw.KindStats, events_left: int):
        cap = max(len(ks.event), events_left) + 1024
        self.cols = [np.empty(cap, c.dtype) for c in (ks.event, ks.ordinal, ks.case, ks.value)]
        self.str_end = None  # made at the first chunk with str/bytes values of the kind
        self.n = 0

    def add(self, ks: xw.KindStats, base: int) -> None:
        """A chunk's stats of the kind, its event numbers made plane-wide (+ ``base``)."""
        a, z = self.n, self.n + len(ks.event)
        if z > len(self.cols[0]):
            with small_pages():
                self._grow(2 * z)
        np.add(ks.event, ks.event.dtype.type(base), out=self.cols[0][a:z])
        for col, part in zip(self.cols[1:], (ks.ordinal, ks.case, ks.value)):
            col[a:z] = part
        if len(ks.str_end):
            if self.str_end is None:  # the chunks before had none: 0, as xw.KindStats reads them
                self.str_end = np.zeros(len(self.cols[0]), np.int64)
            self.str_end[a:z] = ks.str_end
        elif self.str_end is not None:
            self.str_end[a:z] = 0
        self.n = z

    def _grow(self, cap: int) -> None:
        n = self.n
        for j, col in enumerate(self.cols):
            self.cols[j] = np.empty(cap, col.dtype)
            self.cols[j][:n] = col[:n]
        if self.str_end is not None:
            wide = np.zeros(cap, np.int64)
            wide[:n] = self.str_end[:n]
            self.str_end = wide

    def stats(self) -> xw.KindStats:
        n = self.n
        send = self.str_end[:n] if self.str_end is not None else np.zeros(0, np.int64)
        return xw.KindStats(*(c[:n] for c in self.cols), send)


def _fits_int32(x: np.ndarray) -> bool:
    return int(x.min()) >= -(1 << 31) and int(x.max()) < (1 << 31)


def host_steps_in_build(data, length: int, meta, headers=None, columns: HostEventColumns | None = None) -> dict | None:
    """:func:`read_step_events`' host steps of a CPU-only profile, from the host plane's
    bytes the trace index build read and (``headers``, ``columns``) what it gathered of
    its decode (:func:`host_steps_of_plane`, the step reader's own path, under
    :func:`small_pages` as there): the same steps and first event time, as plain data
    (``type_ps`` keys as strings) for the index folder (app/profile_steps.py
    ``HOST_STEPS_FILE``); None where the grouping fails."""
    out: list[dict] = []
    try:
        with small_pages(), gc_paused():
            decoded = None if columns is None else (headers, columns.events())
            first = host_steps_of_plane(data, length, out, meta, key=str, decoded=decoded)  # (type_ps keys made str)
    except Exception:  # noqa: BLE001 - the steps must not fail the timeline: None, and the
        return None  # step reader reads the file for Steps & ops and says what is wrong, as before
    return {"first_ps": first, "steps": out}


def _group_cover(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int,
                 ordered: bool = False) -> np.ndarray:
    """Per group (0..n_groups-1), the time the union of its intervals covers: intervals
    sorted by group then start (``ordered``: they are already), a new union piece where
    the group changes or the start passes the running end of the group's pieces so far."""
    out = np.zeros(n_groups, dtype=np.int64)
    if not len(start):
        return out
    if ordered:
        g, s, e = group, start, end
    else:
        o = np.lexsort((start, group))
        g, s, e = group[o], start[o], end[o]
    first = np.r_[True, g[1:] != g[:-1]]
    lo = int(s.min())
    span = int(e.max()) - lo + 1
    if n_groups * span < (1 << 62):
        # the running end restarts at each group: each group lifted above the last one's
        lift = g.astype(np.int64) * span
        reach = np.maximum.accumulate(e - lo + lift) - lift + lo
    else:
        reach = np.empty_like(e)
        heads = np.flatnonzero(first)
        for a, z in zip(heads.tolist(), np.r_[heads[1:], len(e)].tolist()):
            reach[a:z] = np.maximum.accumulate(e[a:z])
    new = first.copy()
    new[1:] |= s[1:] > reach[:-1]
    piece = np.cumsum(new) - 1
    p_end = np.zeros(int(piece[-1]) + 1, dtype=np.int64)
    np.maximum.at(p_end, piece, e)
    np.add.at(out, g[new], p_end - s[new])
    return out


def _small_unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` of non-negative ints (metadata ids, group
    ids: dense, below the events' count) by a table instead of a sort of every event."""
    if not len(x) or int(x.min()) < 0 or int(x.max()) > 4 * len(x) + 1024:
        return np.unique(x, return_inverse=True)
    seen = np.zeros(int(x.max()) + 1, dtype=bool)
    seen[x] = True
    values = np.flatnonzero(seen)
    table = np.cumsum(seen) - 1
    return values.astype(x.dtype), table[x]


def _host_step_db(ev, line_ts_ns, group_id, roots, named: dict, event_names: dict, line_names: list, out: list,
                  key=int) -> int:
    """XProf's host step events of a CPU-only profile, vectorised over the grouped events
    (millions on a long run): each group's markers (``IsExplicitHostStepMarker`` names and
    the group's root event, whose ``step_name`` the grouping sets), its longest marker the
    step's time, and its other events (``IsRealCpuCompute``) typed by ``ClassifyCpuEvent``;
    per step, each type's time is what the events of that type or higher cover in the step
    (``ToNonOverlappedEvents``' priorities), the rest unknown time. Per-event arrays are
    dropped as soon as they are used and kept narrow: this is the step reader's peak.
    In C where the extension is built (:func:`_host_step_db_native`); this numpy path is
    its twin under PROFSCOPE_NATIVE=0."""
    if xw.native_enabled() and hasattr(xw._native, "host_step_db") and ev.n:
        n = ev.n
        if int(group_id.min()) >= -1 and int(group_id.max()) <= 4 * n + 1024 and int(ev.metadata_id.min()) >= 0 \
                and int(ev.metadata_id.max()) <= 4 * n + (1 << 20):  # else too sparse for tables
            return _host_step_db_native(ev, line_ts_ns, group_id, roots, named, event_names, line_names, out, key)
    return _host_step_db_numpy(ev, line_ts_ns, group_id, roots, named, event_names, line_names, out, key)


def _host_step_db_numpy(ev, line_ts_ns, group_id, roots, named: dict, event_names: dict, line_names: list,
                        out: list, key=int) -> int:
    """The numpy twin of :func:`_host_step_db_native` (PROFSCOPE_NATIVE=0, or ids too
    sparse for its tables: a pre-grouped profile's own ``group_id`` values)."""
    grouped = np.flatnonzero(group_id >= 0)
    first = int((line_ts_ns[ev.line] * 1000 + ev.offset_ps).min())
    if not len(grouped):
        return first
    mids, inv = _small_unique(ev.metadata_id[grouped])
    names = [event_names.get(int(m), "") for m in mids.tolist()]
    explicit = np.array([_explicit_marker(n) for n in names], bool)[inv]
    compute = np.array([_real_cpu_compute(n) for n in names], bool)[inv]
    kind = np.array([classify_cpu_event(n) for n in names], np.int16)[inv]  # EventType: < 2^15
    del inv
    b0 = line_ts_ns[ev.line[grouped]] * 1000 + ev.offset_ps[grouped]
    e0 = b0 + ev.duration_ps[grouped]
    gid = group_id[grouped]
    # the roots: the events at each root's line and span (candidates by offset, checked exactly)
    is_root = np.zeros(len(grouped), bool)
    name_of: dict[int, str] = {}
    if roots:
        by_key = {(r.line, r.start_ps, r.end_ps): r for r in roots}
        off = ev.offset_ps[grouped]
        starts = np.sort(np.fromiter((r.start_ps for r in roots), np.int64, len(roots)))
        cand = np.flatnonzero(starts[np.minimum(np.searchsorted(starts, off), len(starts) - 1)] == off)
        for k in cand.tolist():
            i = int(grouped[k])
            r = by_key.get((line_names[int(ev.line[i])], int(ev.offset_ps[i]), int(ev.offset_ps[i] + ev.duration_ps[i])))
            if r is not None and r.group_id == int(gid[k]):
                is_root[k] = True
        name_of = {r.group_id: r.name for r in roots}
    if named:  # a pre-grouped profile: the events with a step_name are the roots
        pos = np.searchsorted(grouped, np.fromiter(named, np.int64, len(named)))
        for k, (i, name) in zip(pos.tolist(), named.items()):
            if k < len(grouped) and grouped[k] == i:
                is_root[k] = True
                name_of.setdefault(int(gid[k]), name)  # Combine keeps the first name found
    marker = explicit | is_root
    events = ~marker & compute
    del explicit, compute, is_root, grouped
    groups, g_inv = _small_unique(gid)
    del gid
    n = len(groups)
    # StepTime: the longest host marker, the first of equal ones
    mk = np.flatnonzero(marker)
    begin = np.zeros(n, np.int64)
    dur = np.zeros(n, np.int64)
    if len(mk):
        o = np.lexsort((mk, -(e0[mk] - b0[mk]), g_inv[mk]))
        mk = mk[o]
        head = np.r_[True, g_inv[mk][1:] != g_inv[mk][:-1]]
        best = mk[head]
        begin[g_inv[best]] = b0[best]
        dur[g_inv[best]] = e0[best] - b0[best]
    ev_i = np.flatnonzero(events)
    del marker, events
    gi = g_inv[ev_i]
    s = np.maximum(b0[ev_i], begin[gi])
    e = np.minimum(e0[ev_i], begin[gi] + dur[gi])
    del b0, e0
    ev_kind = kind[ev_i]
    del kind, ev_i, g_inv
    has_compute = np.zeros(n, bool)
    has_compute[gi[ev_kind == HOST_COMPUTE]] = True
    kinds = sorted(set(ev_kind.tolist()))  # a type's level is there even if clipped to nothing
    # the clipped events by group, then start: once for every type level (a subset of a
    # sorted sequence is sorted)
    keep = np.flatnonzero(e > s)
    o = keep[np.lexsort((s[keep], gi[keep]))]
    del keep
    gi, s, e, ev_kind = gi[o], s[o], e[o], ev_kind[o]
    del o
    covers = {}
    for k in kinds:
        sel = ev_kind >= k
        covers[k] = _group_cover(gi[sel], s[sel], e[sel], n, ordered=True)
    _emit_steps(groups, begin, dur, has_compute, covers, name_of, out, key)
    return first


def _host_step_db_native(ev, line_ts_ns, group_id, roots, named: dict, event_names: dict, line_names: list,
                         out: list, key=int) -> int:
    """:func:`_host_step_db` by ``_xplane_scan.host_step_db``: three passes over the
    events, whose only whole-profile array is an int32 index of the kept events (the numpy
    path's temporaries touched 3.4 GB of fresh pages on the 308 MB profile). The names'
    classes go in as tables by event metadata id, the roots as (line, start, end, group)
    keys, as the numpy path matches them."""
    # int32 (the C walks') or int64 group ids, read as they are (no copy over every event)
    group = group_id if group_id.dtype in (np.int32, np.int64) else group_id.astype(np.int64)
    group = np.ascontiguousarray(group)
    g_max = int(group.max())
    # per metadata id: 1 IsExplicitHostStepMarker, 2 IsRealCpuCompute; ClassifyCpuEvent
    n_mid = int(ev.metadata_id.max()) + 1
    flags = np.full(n_mid, (_explicit_marker("") * 1) | (_real_cpu_compute("") * 2), np.uint8)
    kinds = np.full(n_mid, classify_cpu_event(""), np.int16)
    for m, name in event_names.items():
        if 0 <= m < n_mid:
            flags[m] = _explicit_marker(name) * 1 | _real_cpu_compute(name) * 2
            kinds[m] = classify_cpu_event(name)
    key_of: dict[str, int] = {}
    line_key = np.array([key_of.setdefault(nm, len(key_of)) for nm in line_names], np.int32)
    # one root per (line name, start, end), the last one given, as the numpy path's dict
    by_key = {(r.line, r.start_ps, r.end_ps): r for r in roots}
    keep = [r for r in by_key.values() if r.line in key_of]
    r_key = np.array([key_of[r.line] for r in keep], np.int32)
    r_start = np.array([r.start_ps for r in keep], np.int64)
    r_end = np.array([r.end_ps for r in keep], np.int64)
    r_gid = np.array([r.group_id for r in keep], np.int64)
    name_of = {r.group_id: r.name for r in roots}
    r_idx = np.fromiter(named, np.int64, len(named))
    for i, name in named.items():  # a pre-grouped profile: the events with a step_name are the roots
        if group[i] >= 0:
            name_of.setdefault(int(group[i]), name)  # Combine keeps the first name found
    first, begin, dur, has_compute, present, levels, cov = xw._native.host_step_db(
        group, np.ascontiguousarray(ev.line, np.int32), ev.offset_ps, ev.duration_ps,
        ev.metadata_id if ev.metadata_id.dtype in (np.int32, np.int64) else ev.metadata_id.astype(np.int64),
        line_ts_ns * 1000, line_key, flags, kinds, r_key, r_start, r_end, r_gid, r_idx, g_max + 1)
    groups = np.flatnonzero(present)
    cov = cov.reshape(len(levels), g_max + 1)[:, groups]
    covers = {int(k): cov[x] for x, k in enumerate(levels.tolist())}
    _emit_steps(groups, begin[groups], dur[groups], has_compute[groups], covers, name_of, out, key)
    return int(first)


def _emit_steps(groups, begin, dur, has_compute, covers: dict, name_of: dict, out: list, key=int) -> None:
    """The step entries of the groups XProf keeps (``ConvertStepEventsToStepDb``): per
    group, each type's time is its cover less the cover of the types above it (as
    arrays, then one dict per step: 44,000 steps read numpy scalars one by one in 0.3 s).
    ``key`` makes the ``type_ps`` keys (EventType values; ``str`` for JSON)."""
    levels = sorted(covers)
    names, unknown_key = [key(k) for k in levels], key(UNKNOWN_TIME)
    dur = np.asarray(dur, dtype=np.int64)
    # no marker, or not well formed (no host compute): XProf drops the step
    keep = np.flatnonzero((dur > 0) & np.asarray(has_compute, dtype=bool))
    cov = [np.asarray(covers[k], dtype=np.int64)[keep] for k in levels]
    own = [(cov[x] - cov[x + 1] if x + 1 < len(levels) else cov[x]).tolist() for x in range(len(levels))]
    unknown = (dur[keep] - (cov[0] if levels else 0)).tolist()
    rows = zip(np.asarray(groups)[keep].tolist(), np.asarray(begin, dtype=np.int64)[keep].tolist(),
               dur[keep].tolist(), unknown, *own)
    for g, b, d, unk, *times in rows:
        type_ps = dict(zip(names, times))
        type_ps[unknown_key] = unk
        out.append({"step_num": g, "name": name_of.get(g) or str(g), "step_name": name_of.get(g, ""),
                    "begin_ps": b, "duration_ps": d, "type_ps": type_ps})


def _non_overlapped(events: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """event_span.cc ``ToNonOverlappedEvents``: boundaries in time order (at one time: ends
    before starts, then the higher type first), each gap between two boundaries typed by
    the highest type open over it (``PriorityTracker``)."""
    bounds = []
    for kind, b, e in events:
        bounds.append((b, 1, -kind))
        bounds.append((e, 0, -kind))
    bounds.sort()
    out = []
    count: dict[int, int] = {}
    top = UNKNOWN_TIME
    for i in range(len(bounds) - 1):
        t, start, neg = bounds[i]
        kind = -neg
        if start:
            count[kind] = count.get(kind, 0) + 1
            top = max(top, kind)
        else:
            count[kind] -= 1
            if kind == top and count[kind] == 0:
                top = max((k for k, c in count.items() if c > 0 and k < kind), default=UNKNOWN_TIME)
        out.append((top, t, bounds[i + 1][0]))
    return out


def _step_info(gid: int, entry: dict, has_device: bool) -> dict | None:
    """``ConvertStepDetailsToStepInfo`` of one non-overlapped step; None when XProf drops it."""
    longest: dict[str, tuple[int, int]] = {}
    for kind, (b, e) in entry["markers"]:
        if kind not in longest or e - b > longest[kind][1] - longest[kind][0]:
            longest[kind] = (b, e)
    host, device = longest.get("host"), longest.get("device")
    if device is None:
        span = host
    elif host is not None and host[0] <= device[0] and device[1] <= host[1]:
        span = host
    else:
        span = device
    if span is None or span[1] <= span[0]:
        return None
    b, e = span
    type_ps: dict[int, int] = {}
    total = 0
    for kind, s, t in _non_overlapped(entry["events"]):
        d = max(0, min(e, t) - max(b, s))
        type_ps[kind] = type_ps.get(kind, 0) + d
        total += d
    if total < e - b:
        type_ps[UNKNOWN_TIME] = type_ps.get(UNKNOWN_TIME, 0) + (e - b - total)
    well_formed = (DEVICE_COMPUTE_16 in type_ps or DEVICE_COMPUTE_32 in type_ps) if has_device else HOST_COMPUTE in type_ps
    if not well_formed:
        return None
    # XProf's step_name: set from host events only (ConvertHostThreadsXLineToStepEvents)
    return {"step_num": gid, "name": entry.get("name") or str(gid), "step_name": entry.get("name", ""),
            "begin_ps": b, "duration_ps": e - b,
            "type_ps": type_ps}


def _tpu_steps(markers: dict[str, list[tuple[int, int]]]) -> list[dict]:
    """A TPU profile's steps: the TensorCores' ``Steps`` events of one name are one step,
    its time the longest of them (``StepDetails::StepTime`` of device markers), in time
    order; no breakdown by XProf's event types (``type_ps`` empty)."""
    out = []
    for name, spans in markers.items():
        b, e = max(spans, key=lambda x: x[1] - x[0])
        if e > b:
            out.append({"step_num": len(out), "name": name, "step_name": name, "begin_ps": b, "duration_ps": e - b,
                        "type_ps": {}})
    out.sort(key=lambda x: x["begin_ps"])
    for k, st in enumerate(out):
        st["step_num"] = k
    return out


def _device_type(plane, names) -> str:
    """The device's kind for the run environment: "AMD GPU" for a ROCm plane
    (``device_vendor``), "GPU" otherwise."""
    return "AMD GPU" if _text(_stats(plane.stats, names).get("device_vendor")) == "AMD" else "GPU"


def read_step_events(raw: IO[bytes], path: str) -> StepEvents:
    """XProf's steps of one XSpace and its device activities (see the module docstring)."""
    index = xplane.scan(raw, path)
    gpu = sorted((r for r in index.planes if r.name.startswith(GPU_PREFIX)), key=lambda r: r.offset)
    tpu = sorted((r for r in index.planes if r.name.startswith(TPU_PREFIX) and r.name[len(TPU_PREFIX):].isdigit()),
                 key=lambda r: r.offset)
    steps: dict[int, dict] = {}
    devices: list[Activities] = []
    device_type = "CPU"
    tf_data = False
    host_steps: list[dict] = []
    with xw.xspace_errors(path):
        if tpu or gpu:
            refs, hardware = (tpu, "TPU") if tpu else (gpu, "GPU")
            for ref in refs:
                raw.seek(0)
                plane = xplane.read_plane(raw, ref, path)
                dev = Activities(int(plane.id), plane.name)
                if tpu:
                    _read_tpu_plane(plane, dev, steps)
                    device_type = _text(_stats(plane.stats, {k: v.name for k, v in plane.stat_metadata.items()})
                                        .get("device_type_string")) or "TPU"
                else:
                    _read_gpu_plane(plane, dev, steps)
                    device_type = _device_type(plane, {k: v.name for k, v in plane.stat_metadata.items()})
                devices.append(dev)
            # the devices' earliest event (any line): the origin of the steps' start_us
            first = min((d.first_ps for d in devices if d.first_ps is not None), default=None)
            grouping = ("steps-line" if tpu else "pre-grouped") if steps else "none"
            host = index.plane(HOST_PLANE)
            if host is not None:
                raw.seek(0)
                f, size = xplane.open_stream(raw, path)
                meta = xw.plane_metadata(f, size, host)
                tf_data = any(m.name.startswith("Iterator::") for m in meta.event_metadata.values())
        else:
            hardware = "CPU_ONLY"
            ref = index.plane(HOST_PLANE)
            first = None
            if ref is not None:
                raw.seek(0)
                f, size = xplane.open_stream(raw, path)
                with small_pages(), gc_paused():
                    first = _host_steps(f, size, ref, host_steps)
            grouping = "grouped" if host_steps else "none"
        # the opcode of each kernel's HLO op, from the modules of /host:metadata (the op
        # metrics' reader of them: XProf's ParseHloProtosFromXSpace)
        program_names: dict[int, str] = {}
        modules = xplane_op_metrics._modules(raw, index, path, program_names) if devices else {}
        for dev in devices:
            dev.opcode = [getattr(modules.get(p & 0xFFFF_FFFF_FFFF_FFFF, {}).get(op), "opcode", "") if op else ""
                          for p, op in zip(dev.program_id, dev.hlo_op)] if not tpu else [""] * len(dev.start)
        program_names = {(k - (1 << 64) if k >= (1 << 63) else k): v for k, v in program_names.items()}
    has_device = hardware != "CPU_ONLY"
    if hardware == "GPU":
        infos = [_step_info(g, steps[g], has_device) for g in sorted(steps)]
    elif hardware == "TPU":
        infos = _tpu_steps(steps)
    else:
        infos = host_steps
    return StepEvents(hardware, device_type, devices, [s for s in infos if s is not None], grouping, first, tf_data,
                      program_names, index.hostnames[0] if index.hostnames else "")
