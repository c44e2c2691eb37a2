"""Runtime allocator events of an XSpace profile, as compact columns.

The BFC allocator (TensorFlow, JAX/PJRT on GPU, TF on CPU with
``TF_CPU_ALLOCATOR_USE_BFC=true``) records one instant TraceMe per allocation and
deallocation on the host threads plane ``/host:CPU``: events named ``MemoryAllocation``
and ``MemoryDeallocation`` with the stats ``allocator_name``, ``bytes_reserved`` (stack),
``bytes_allocated`` (heap), ``bytes_available`` (free), ``fragmentation``,
``peak_bytes_in_use``, ``requested_bytes``, ``allocation_bytes``, ``addr``, ``id`` (the
allocator's step id), ``tf_op``, ``region_type``, ``data_type`` (TF ``DataType`` enum) and
``shape``. :func:`read_allocator_events` turns them into
:class:`~profscope.model.allocator.AllocatorEvents` (the type the memory-profile tool
reads): numpy columns plus string tables, one row per event, so millions of events never
become millions of Python objects.

Everything is read the way XProf 2.24.2 reads it (``xprof/convert/xplane_to_memory_profile.cc``
after ``PreprocessSingleHostXSpace(step_grouping=true)``), because the memory profile's
numbers depend on it:

* Only the first plane named ``/host:CPU`` is read (XProf ignores allocator events on
  any other plane, device planes included). Lines in plane order, events in line order.
* Time is the event's ``offset_ps`` as stored, relative to its line's ``timestamp_ns``
  (XProf's ``XEventVisitor::OffsetPs``). TF and JAX write every host line with the same
  ``timestamp_ns``, so that is "ps since the profile start".
* Stats are typed by their metadata *name*. Integers are read with XProf's ``IntValue``:
  the ``int64_value`` of the stat, so a stat stored as ``uint64``/``double`` reads 0;
  ``fragmentation`` likewise reads ``double_value`` only. Strings are ``str_value`` or
  the name of the stat metadata a ``ref_value`` points to (``""`` otherwise). When a stat
  appears twice the last one wins. The allocator (XProf's memory id) is the last of
  ``allocator_name`` / ``index_on_host`` / ``device_ordinal`` (the latter two as decimal
  text); no such stat gives the memory id ``""``.
* The step of an event is its ``group_id``, which XProf computes by *grouping* the
  events ("step grouping", tsl ``GroupTfEvents``): root events (a ``_r`` stat, e.g.
  ``tf.profiler.experimental.Trace("train", step_num=i, _r=1)`` or JAX's
  ``StepTraceAnnotation``; legacy ``TraceContext``; ``ProcessBatch`` and
  ``BatchingSessionRun`` made roots by XProf's preprocessing) are numbered 0, 1, ... in
  time order (higher root levels first) and their group id flows to every event nested in
  them on the same line and to every consumer of their producer contexts (``_pt``/``_p``
  -> ``_ct``/``_c``, with XProf's rule that a context with >= 64 producers and >= 64
  consumers is not connected), ThreadpoolListener regions included; a TF while/for loop
  (``ExecutorState::Process`` with ``id``/``iter_num``) makes one group per iteration
  instead; a profile whose metadata names a TF loop op is not grouped; a profile where
  any plane already has a ``group_id`` stat keeps its stats and is not grouped again
  (checked on 2.24.2 with device, metadata and task-environment planes that have none).
  Within a line an event nests in the innermost open event that contains it (XProf's
  stack walk in line order). Events reached by no root have no group
  (``group_id == -1``); the memory profile then gives them the previous event's step + 1.
  The allocator's own ``id`` stat is kept as ``step_id_stat`` but XProf does not use it.
* XProf's preprocessing adds a ``ThreadpoolListener::Region`` event per
  ``StartRegion``/``StopRegion`` pair at the end of the line (2.24.2 does not re-sort the
  line: checked), so regions only add consumers to their context and nest nothing.
* ``hlo_modules``: the events of the ``XLA Modules`` line of every ``/device:TPU:*``
  plane (XProf's ``hloModules``), offsets as stored.

:attr:`~profscope.model.allocator.AllocatorEvents.steps` lists the groups (name as XProf
names them, e.g. ``"train 3"``, and the root event's span), the step bands of the page.

Speed: the host plane is split into events and stats on the wire with numpy
(:mod:`profscope.formats.xplane_wire`: a varint decoder that reads 8 bytes at once, the
events of a line found by chaining candidate headers and verifying the chain), chunk by
chunk; about 9 us per allocator event with its 14 stats on this machine, and about 5x the
file size in memory. The step grouping is :mod:`profscope.formats.xplane_steps`.

What this module does not model (documented limits): grouping edges that involve events
on planes other than ``/host:CPU`` (XProf builds its event forest over every plane; only
TPU/GPU device planes have events there, and they are children, never parents, of host
events), and the order absl's hash maps give to root events of different event types
that start at the same picosecond.

Corrupt or truncated input raises :class:`~profscope.errors.BadInput` naming the file.
"""

from __future__ import annotations

from typing import IO

import numpy as np

from profscope.formats import xplane
from profscope.formats import xplane_steps as xs
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2
from profscope.model.allocator import ALLOCATION, DEALLOCATION, AllocatorEvents, HloModuleSpan, StepGroup

__all__ = ["HOST_PLANE", "read_allocator_events"]

HOST_PLANE = "/host:CPU"
TPU_PLANE_PREFIX = "/device:TPU:"
XLA_MODULE_LINE = "XLA Modules"


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

# XProf's names (tsl xplane_schema.cc)
_ALLOCATOR_EVENTS = {"MemoryAllocation", "MemoryDeallocation"}
_LOOP_OPS = {"WhileOp-EvalCond", "WhileOp-StartBody", "ForOp", "ParallelForOp", "ForeverOp"}


def read_allocator_events(raw: IO[bytes], path: str, progress=None) -> AllocatorEvents:
    """The allocator events of the XSpace in ``raw`` (plain or gzipped ``*.xplane.pb``).

    Parses only what the memory profile needs: the ``/host:CPU`` plane (its events in
    bulk, vectorized), the metadata of the other planes (whether XProf would group the
    profile) and the ``XLA Modules`` lines of TPU planes. ``progress``, if given, gets
    ``progress.update(fraction=..., message=...)`` calls.
    """
    _report(progress, 0.0, "indexing the profile")
    index = xplane.scan(raw, path)
    hostname = index.hostnames[0] if index.hostnames else ""
    host_ref = index.plane(HOST_PLANE)
    pre_grouped = False
    loop_ops = False
    without_events = False
    hlo_modules: list[HloModuleSpan] = []
    with xw.xspace_errors(path):
        raw.seek(0)
        f, size = xplane.open_stream(raw, path)
        data = None
        # one forward pass over the planes, in file order
        for ref in sorted(index.planes, key=lambda r: r.offset):
            if ref is host_ref:
                # The plane's event metadata names every event kind it holds: without a
                # MemoryAllocation/MemoryDeallocation entry no event can be one, and the
                # lines (nearly the whole file) are neither read nor grouped.
                meta = xw.plane_metadata(f, size, ref)
                if not any(m.name in _ALLOCATOR_EVENTS for m in meta.event_metadata.values()):
                    host_ref = None
                    without_events = True
                    continue
                _report(progress, 0.05, f"reading {HOST_PLANE}")
                f.seek(ref.offset)  # back to the plane (a gzip stream rewinds)
                data, _ = xw.map_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
                continue
            if ref.name.startswith(TPU_PLANE_PREFIX):
                tpu, _ = xw.map_plane_bytes(f, size, ref, pad=xw.PAD + (-ref.length) % 8)
                meta_bytes, lines = xw.split_plane(tpu, ref.length)
                meta = xplane_pb2.XPlane.FromString(meta_bytes)
                hlo_modules += _xla_modules(tpu, lines, meta, ref.name)
                del tpu
            else:
                meta = xw.plane_metadata(f, size, ref)
            pre_grouped |= any(m.name == "group_id" for m in meta.stat_metadata.values())
            loop_ops |= any(m.name in _LOOP_OPS for m in meta.event_metadata.values())
        if without_events:
            return _empty(path, hostname, True, hlo_modules, grouping="no-allocator-events")
        if host_ref is None:
            return _empty(path, hostname, False, hlo_modules)
        meta_bytes, line_spans = xw.split_plane(data, host_ref.length)
        meta = xplane_pb2.XPlane.FromString(meta_bytes)
        pre_grouped |= any(m.name == "group_id" for m in meta.stat_metadata.values())
        loop_ops |= any(m.name in _LOOP_OPS for m in meta.event_metadata.values())
        b = np.frombuffer(data, dtype=np.uint8)
        headers, starts, ends, lines_of = xw.plane_events(data, b, line_spans)
        _report(progress, 0.15, "decoding events")
        stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        ev = xw.decode_events(b, starts, ends, lines_of, stat_names)
        del starts, ends, lines_of, b
        _report(progress, 0.5, "grouping steps")
        return _build(path, hostname, data, meta, headers, ev, pre_grouped, loop_ops, hlo_modules, progress)



def _report(progress, fraction, message):
    if progress is not None:
        progress.update(fraction=fraction, message=message)


def _empty(path, hostname, has_host, hlo_modules, line_names=(), grouping="none") -> AllocatorEvents:
    z = np.zeros(0, dtype=np.int64)
    z32 = np.zeros(0, dtype=np.int32)
    return AllocatorEvents(
        path=path, hostname=hostname, has_host_plane=has_host,
        time_ps=z, kind=np.zeros(0, np.int8), memory_id=z32, bytes_reserved=z,
        bytes_allocated=z, bytes_available=z, peak_bytes_in_use=z, requested_bytes=z,
        allocation_bytes=z, fragmentation=np.zeros(0, np.float64),
        address=np.zeros(0, np.uint64), tf_op=z32, region_type=z32, data_type=z, shape=z32,
        group_id=z, step_id_stat=z, line=z32, line_names=list(line_names),
        hlo_modules=hlo_modules, grouping=grouping)


def _xla_modules(data, lines, meta: xplane_pb2.XPlane, plane_name: str) -> list[HloModuleSpan]:
    out = []
    b = np.frombuffer(data, dtype=np.uint8)
    names = {k: v.name for k, v in meta.event_metadata.items()}
    short = plane_name.removeprefix("/device:")
    for a, z in lines:
        if xw.line_name(data, b, a, z) != XLA_MODULE_LINE:
            continue
        line = xplane_pb2.XLine.FromString(bytes(data[a:z]))
        for e in line.events:
            off = e.offset_ps if e.WhichOneof("data") == "offset_ps" else 0
            out.append(HloModuleSpan(names.get(e.metadata_id, ""), off, off + e.duration_ps, short))
    return out



def _build(path, hostname, data, meta, headers, ev: xw.Events, pre_grouped, loop_ops, hlo_modules, progress):
    stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
    event_names = {k: v.name for k, v in meta.event_metadata.items()}
    strings = xw.Strings(data, stat_names)
    line_names = [h.name for h in headers]

    ev_kind = np.zeros(ev.n, dtype=np.int8)
    ev_kind[xw.mid_mask(ev, event_names, {"MemoryAllocation"})] = ALLOCATION
    ev_kind[xw.mid_mask(ev, event_names, {"MemoryDeallocation"})] = DEALLOCATION

    # XProf's preprocessing: threadpool regions (consumers appended to their lines).
    line_ts_ns = np.array([h.timestamp_ns for h in headers], dtype=np.int64)
    order, regions = xs.threadpool_regions(ev, event_names, line_ts_ns)

    if pre_grouped:
        v = xw.StatView(ev, "group_id")
        group_id = np.where(v.present, v.int_value(), -1)
        steps: list[StepGroup] = []
        grouping = "pre-grouped"
    elif loop_ops:
        group_id = np.full(ev.n, -1, dtype=np.int64)
        steps = []
        grouping = "loop-ops"
    else:
        g = xs.Grouping(ev, ev_kind, event_names, stat_names, meta, headers, line_ts_ns, order, regions, strings)
        group_id, steps, grouping = g.run()
        del g
    ev.views.clear()  # the grouping's stat views are not needed any more
    _report(progress, 0.85, "collecting allocator events")

    # Allocator events in XProf's reading order.
    mem_order = np.arange(ev.n, dtype=np.int64) if order is None else order[order < ev.n]  # None: every event ascending
    mem_order = mem_order[ev_kind[mem_order] > 0]
    n = len(mem_order)
    if n == 0:
        out = _empty(path, hostname, True, hlo_modules, line_names, grouping)
        out.steps = steps
        return out

    def ints(name):
        return xw.StatView(ev, name).int_value()[mem_order]

    def strs(name):
        return xw.StatView(ev, name).str_or_ref(strings, mem_order)

    # The memory id: the last of allocator_name / index_on_host / device_ordinal.
    v_name = xw.StatView(ev, "allocator_name")
    v_index, v_ordinal = xw.StatView(ev, "index_on_host"), xw.StatView(ev, "device_ordinal")
    o_name = v_name.ordinal()[mem_order]
    o_index = v_index.ordinal()[mem_order]
    o_ordinal = v_ordinal.ordinal()[mem_order]
    use_num = np.maximum(o_index, o_ordinal) > o_name
    name_idx = v_name.str_or_ref(strings, mem_order).astype(np.int64)
    if use_num.any():
        num_vals = np.where(o_index > o_ordinal, v_index.int_value()[mem_order], v_ordinal.int_value()[mem_order])
        # codes: string indices >= 0, numbers as -1 - (rank among the numbers used)
        nums, num_rank = np.unique(num_vals[use_num], return_inverse=True)
        codes = name_idx.copy()
        codes[use_num] = -1 - num_rank.reshape(-1)
    else:
        nums = np.zeros(0, dtype=np.int64)
        codes = name_idx
    uniq, inverse = np.unique(codes, return_inverse=True)
    texts = [str(int(nums[-1 - c])) if c < 0 else strings.table[c] for c in uniq.tolist()]
    # memory ids sorted as std::string (bytewise), like XProf's memory_ids
    srt = sorted(range(len(texts)), key=lambda i: texts[i].encode("utf-8", "surrogateescape"))
    memory_ids: list[str] = []
    remap = np.zeros(len(texts), dtype=np.int32)
    for i in srt:
        if not memory_ids or memory_ids[-1] != texts[i]:
            memory_ids.append(texts[i])
        remap[i] = len(memory_ids) - 1
    memory_id = remap[np.asarray(inverse).reshape(-1)]

    v_id = xw.StatView(ev, "id")
    step_stat = np.where(v_id.present, v_id.int_value(), -1)[mem_order]

    return AllocatorEvents(
        path=path,
        hostname=hostname,
        has_host_plane=True,
        time_ps=ev.offset_ps[mem_order],
        kind=ev_kind[mem_order],
        memory_id=memory_id,
        bytes_reserved=ints("bytes_reserved"),
        bytes_allocated=ints("bytes_allocated"),
        bytes_available=ints("bytes_available"),
        peak_bytes_in_use=ints("peak_bytes_in_use"),
        requested_bytes=ints("requested_bytes"),
        allocation_bytes=ints("allocation_bytes"),
        fragmentation=xw.StatView(ev, "fragmentation").double_value()[mem_order],
        address=ints("addr").view(np.uint64),
        tf_op=strs("tf_op"),
        region_type=strs("region_type"),
        data_type=ints("data_type"),
        shape=strs("shape"),
        group_id=group_id[mem_order],
        step_id_stat=step_stat,
        line=ev.line[mem_order],
        strings=strings.table,
        memory_ids=memory_ids,
        line_names=line_names, line_timestamps_ns=line_ts_ns.tolist(),  # an event's clock: AllocatorEvents
        steps=steps,
        hlo_modules=hlo_modules,
        grouping=grouping,
    )
