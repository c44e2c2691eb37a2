"""One host's steps and device activity, read from its xplane in one cheap pass
(:class:`~profscope.model.host_activity.HostActivity`), for the cross-host trace overview
(``/api/trace_hosts``, tools/trace_hosts.py).

The trace viewer's index (formats/xplane_trace.py, tools/trace_index.py) holds the same
events, but building it decodes every stat, makes XProf's derived lines and sorts every
slice: far more than an overview of 64-256 hosts needs. Here each plane is read as one
buffer and its events decoded in bulk (:mod:`profscope.formats.xplane_wire`) with only
the stats named below, and nothing else is kept than:

* the planes shown: the trace viewer's (``xplane_trace.selected_planes``: every
  ``/host:CPU*`` plane, then the ``/device:GPU:*`` planes, or when there are none the
  ``/device:TPU:<n>`` TensorCore planes); the host's span is the first event start to
  the last event end over their lines;
* steps, as the trace viewer's step bands have them: the events with a ``step_num`` stat
  (JAX ``StepTraceAnnotation``, TF ``Trace(..., step_num=)``), named
  ``"<event name> <step_num>"`` (XProf's ``step_name``); when there are none, the events
  of lines named ``Steps`` (XProf's derived ``Steps`` line of GPU planes, the runtime's
  of TPU planes: ``kStepLineName`` in tsl xplane_schema.cc), with their ``group_id`` stat
  (XProf's step id). Their names are the events' own: the trace viewer renames TPU steps
  after XProf's grouping, which this pass does not make;
* device ops: on a GPU plane, the events of every line that is not a derived line (the
  CUPTI/ROCm stream lines, kernels and memcpys; tsl ``IsDerivedThreadId`` tells XProf's
  derived lines, e.g. ``TensorFlow Ops`` / ``Steps`` in an XProf-touched file, apart);
  on a TPU plane the ``XLA Ops`` line (``kXlaOpLineName``; ``XLA Modules`` when it has
  none), which the other TPU lines (``XLA Modules``, ``Async XLA Ops``, ``XLA TraceMe``)
  overlap. A host with no device plane that has events (JAX/XLA on CPU) counts the
  events with an ``hlo_op`` stat (XLA's CPU thunk executor writes one per HLO op, with
  ``hlo_module``/``program_id``) as one device, ``/host:CPU (XLA ops)``.

Corrupt or truncated input raises :class:`~profscope.errors.BadInput` naming the file.
"""

from __future__ import annotations

from typing import IO

import numpy as np

from profscope.formats import xplane
from profscope.formats import xplane_derived
from profscope.formats import xplane_trace
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2
from profscope.model.host_activity import DeviceOps, HostActivity, StepMarker

__all__ = ["host_activity"]

STEP_LINE = "Steps"  # tsl kStepLineName
XLA_OPS_LINE = "XLA Ops"  # tsl kXlaOpLineName
XLA_MODULES_LINE = "XLA Modules"  # tsl kXlaModuleLineName
CPU_OPS_DEVICE = "/host:CPU (XLA ops)"
CHUNK_EVENTS = 1 << 20  # events decoded at once: bounds the decoder's scratch memory
_STATS = {"step_num", "hlo_op", "group_id"}  # the only stats decoded


def host_activity(raw: IO[bytes], path: str, hostname: str | None = None) -> HostActivity:
    """The steps, device op intervals and span of one XSpace (``<host>.xplane.pb[.gz]``)."""
    index = xplane.scan(raw, path)
    if hostname is None:
        hostname = index.hostnames[0] if index.hostnames else ""
    chosen = {id(ref) for ref, _ in xplane_trace.selected_planes(index)}
    # selected_planes takes every /device:TPU: plane; XProf's TensorCore planes are
    # those whose whole name is /device:TPU:<n> (tsl kTpuPlaneRegex)
    planes = [r for r in index.planes if id(r) in chosen and (not r.name.startswith(xplane_trace.TPU_PREFIX)
                                                              or xplane_derived.TENSOR_CORE_PLANE.fullmatch(r.name))]
    out = HostActivity(path, hostname, None, None)
    step_num_steps: list[StepMarker] = []
    line_steps: list[StepMarker] = []
    cpu_begin: list[np.ndarray] = []
    cpu_end: list[np.ndarray] = []
    lo, hi = None, None
    with xw.xspace_errors(path):
        raw.seek(0)
        f, size = xplane.open_stream(raw, path)
        for ref in sorted(planes, key=lambda r: r.offset):  # a gzip stream seeks forward only
            data, _ = xw.map_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
            p = _read_plane(data, ref)
            del data
            out.events += p.events
            if p.begin is not None:
                lo = p.begin if lo is None else min(lo, p.begin)
                hi = p.end if hi is None else max(hi, p.end)
            step_num_steps += p.step_num_steps
            line_steps += p.line_steps
            if ref.name.startswith(xplane_trace.HOST_PREFIX):
                cpu_begin += p.hlo_begin
                cpu_end += p.hlo_end
            elif p.op_begin:
                out.devices.append(DeviceOps(ref.name, p.op_lines, xw.cat(p.op_begin, np.int64), xw.cat(p.op_end, np.int64)))
            else:
                out.idle_devices.append(ref.name)
    out.begin_ps, out.end_ps = lo, hi
    if out.devices:
        out.device_source = "device planes"
    elif cpu_begin:
        out.device_source = "XLA CPU ops"
        out.devices.append(DeviceOps(CPU_OPS_DEVICE, ["events with an hlo_op stat"],
                                     xw.cat(cpu_begin, np.int64), xw.cat(cpu_end, np.int64)))
    if step_num_steps:
        out.steps, out.step_source = step_num_steps, "step_num events"
    elif line_steps:
        out.steps, out.step_source = line_steps, "Steps line"
    out.steps.sort(key=lambda s: (s.start_ps, s.name))
    return out


class _Plane:
    def __init__(self):
        self.events = 0
        self.begin: int | None = None
        self.end: int | None = None
        self.step_num_steps: list[StepMarker] = []
        self.line_steps: list[StepMarker] = []
        self.op_lines: list[str] = []
        self.op_begin: list[np.ndarray] = []
        self.op_end: list[np.ndarray] = []
        self.hlo_begin: list[np.ndarray] = []
        self.hlo_end: list[np.ndarray] = []


def _read_plane(data, ref: xplane.PlaneRef) -> _Plane:
    meta_bytes, line_spans = xw.split_plane(data, ref.length)
    meta = xplane_pb2.XPlane.FromString(meta_bytes)
    stat_names = {k: v.name for k, v in meta.stat_metadata.items() if v.name in _STATS}
    names = {k: m.display_name or m.name for k, m in meta.event_metadata.items()}  # as the trace viewer names events
    b = np.frombuffer(data, dtype=np.uint8)
    is_host = ref.name.startswith(xplane_trace.HOST_PREFIX)
    is_tpu = ref.name.startswith(xplane_trace.TPU_PREFIX)
    lines = []
    for a, z in line_spans:
        head, starts, ends = xw.line_events(data, b, a, z)
        if len(starts):
            lines.append((xplane_pb2.XLine.FromString(head), starts, ends))
    p = _Plane()
    line_names = {(h.display_name or h.name) for h, _, _ in lines}
    tpu_ops = XLA_OPS_LINE if XLA_OPS_LINE in line_names else XLA_MODULES_LINE
    for h, starts, ends in lines:
        lname = h.display_name or h.name
        if lname == xplane_trace.COUNTER_LINE:  # counters, not slices (xplane_trace)
            continue
        if is_host:
            is_ops = False
        elif is_tpu:
            is_ops = lname == tpu_ops
        else:  # GPU: the stream lines, not XProf's derived ones
            is_ops = not xplane_derived.is_derived_thread_id(h.id)
        if is_ops:
            p.op_lines.append(lname)
        for k in range(0, len(starts), CHUNK_EVENTS):
            ev = xw.decode_events(b, starts[k:k + CHUNK_EVENTS], ends[k:k + CHUNK_EVENTS],
                                  np.zeros(min(CHUNK_EVENTS, len(starts) - k), np.int32), stat_names)
            _line_chunk(p, ev, h, lname, names, ref.name, is_host, is_ops)
    return p


def _line_chunk(p: _Plane, ev, h, lname: str, names: dict, plane: str, is_host: bool, is_ops: bool) -> None:
    if not ev.n:
        return
    p.events += ev.n
    # XEventVisitor::TimestampPs: the line's timestamp_ns * 1000 + the event's offset_ps
    begin = h.timestamp_ns * 1000 + ev.offset_ps
    end = begin + ev.duration_ps
    b0, e0 = int(begin.min()), int(end.max())
    p.begin = b0 if p.begin is None else min(p.begin, b0)
    p.end = e0 if p.end is None else max(p.end, e0)
    if is_ops:
        p.op_begin.append(begin)
        p.op_end.append(end)
    where = f"{plane} / {lname}"
    # step_num read as the trace viewer reads it (xplane_trace._PlaneReader.name_ids: the
    # last such stat, its int64 or uint64 bits as int64)
    sv = xw.StatView(ev, "step_num")
    rows = np.flatnonzero(sv.present)
    if rows.size:
        nums = sv.int_or_uint_value()[rows].view(np.int64)
        for r, num in zip(rows.tolist(), nums.tolist()):
            nm = names.get(int(ev.metadata_id[r]), "")
            p.step_num_steps.append(StepMarker(f"{nm} {num}", int(num), int(begin[r]), int(ev.duration_ps[r]), where))
    if lname == STEP_LINE:
        gv = xw.StatView(ev, "group_id", last=False)
        gids = gv.int_or_uint_value().view(np.int64)
        for r in range(ev.n):
            p.line_steps.append(StepMarker(names.get(int(ev.metadata_id[r]), ""), int(gids[r]) if gv.present[r] else None,
                                           int(begin[r]), int(ev.duration_ps[r]), where))
    if is_host:
        hv = xw.StatView(ev, "hlo_op")
        sel = np.flatnonzero(hv.present)
        if sel.size:
            p.hlo_begin.append(begin[sel])
            p.hlo_end.append(end[sel])
