"""Flows between the events of an XSpace, as XProf 2.24.2's trace viewer binds them.

XProf's ``trace_viewer@`` answer gives an ``X`` event that belongs to a flow a
``bind_id``, a ``cat`` and ``flow_out`` (the flow's start) / ``flow_in`` (its end) / both
(a middle slice) (``xprof/convert/trace_viewer/trace_events_to_json.h``, "FlowV2"). Where
the flows come from:

1. ``PreprocessSingleHostXSpace`` (``xprof/convert/preprocess_single_host_xplane.cc``),
   only when the XSpace is not grouped yet (tsl ``IsXSpaceGrouped``: a plane with a
   ``group_id`` stat metadata, as the memory profile found for 2.24.2), runs per plane

   a. ``PreprocessXPlane`` (tsl ``preprocess_xplane.cc``), whose connected-event mutators
      give producer/consumer contexts (``_pt``/``_p``, ``_ct``/``_c``) to events that
      lack them: ``ExecutorState::Process`` -> ``TpuExecuteOp`` (legacy, by ``id`` and
      ``iter_num``), ``EnqueueRequestLocked`` -> ``RunProgramRequest`` and 11 other
      requests (``tpu_stream``, by ``request_id`` and ``queue_addr``),
      ``DoEnqueueProgram`` -> ``CompleteCallbacks`` (``tpu_launch``, by
      ``device_ordinal``, ``queue_id``, ``run_id`` masked to 27 bits
      (``HostRunIdMutator``), ``core_type`` or 0) and, on a TensorCore plane
      (``/device:TPU:<n>``), every event of its ``XLA Modules`` line with ``run_id`` and
      ``queue_id`` (consumer, ``tpu_launch``, same key with the plane's ordinal:
      ``TpuModuleLineMutator``). The key is a hash of those stats (``absl::HashOf``).
   b. ``AddFlowsToXplane(host_id, is_host_plane, connect_traceme=true)`` (tsl
      ``xplane_utils.cc``): per event, a ``correlation_id`` (read as
      ``XStat.uint64_value``, so one stored as int64 reads 0) makes a ``gpu_launch`` flow
      out of a host plane and into a device plane (``IsDevicePlane``); a producer
      context (``_pt``/``_p``, both present) a flow out, a consumer context a flow in,
      its category the context type (``GetSafeContextType``: unknown types are generic).
      Each one is a new ``flow`` stat appended to the event: the flow id is
      ``XFlow::GetFlowId(host_id, correlation_id)`` or ``GetFlowId(host_id, id,
      context_type)``.

2. ``ConvertXStatsToTraceEventArguments`` (``xprof/convert/xplane_to_trace_container.cc``)
   reads the metadata's stats, then the event's: the *last* ``flow`` stat wins
   (``XFlow::FromStatValue``: direction in bits 0-1 (1 in, 2 out, 3 both), id in bits
   2-57, category in bits 58-63), so a consumer context beats a producer context, which
   beats a correlation id, which beats a ``flow`` stat the profiler wrote. An event with
   a flow and an ``_a`` (``is_async``) stat becomes an async event, not an ``X`` event:
   XProf 2.24.2's ``trace_viewer@`` JSON leaves those out altogether (checked on the TPU
   profile's ``Async XLA Ops`` line), so they are no slices here either. ``cat`` is left
   out for the generic and legacy types (``GetContextTypeString`` is "").

Checked against XProf 2.24.2's output on every public profile and demo profile
(``tests/test_trace_golden_public.py``): the same slices in the same flows with the same
direction and category. The ``ThreadpoolListener::Region`` slices XProf adds get no flow
in its output, and none here.

Flow ids: XProf's ``GetFlowId`` is ``absl::HashOf(...) & (2^56 - 1)``, and absl's hash is
seeded per process (the same profile gets other ``bind_id`` numbers on every run of
XProf), so no reader can reproduce XProf's numbers; ids here are a fixed 64-bit mix of the
same keys, also masked to 56 bits, salted with the host name the trace viewer shows (the
file's host, not ``XSpace.hostnames[0]`` as XProf's ``Fingerprint32``: two hosts copied
from one XSpace would otherwise share flow ids), so they are stable for a file. A
``flow`` stat stored in the profile keeps its own id, as in XProf.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from profscope.formats import xplane_steps as xs
from profscope.formats import xplane_wire as xw
from profscope.model.trace import FLOW_END, FLOW_MID, FLOW_START, FlowEvents, NameTable

# tsl/profiler/lib/context_types.h: ContextType, GetContextTypeString ("" = no "cat").
# kJaxServingExecutor (16) is "jax_serving" in XProf 2.24.2's binary.
CONTEXT_NAMES = ("", "", "tf_exec", "tfrt_exec", "batch_sched", "PjRt", "as_batch_sched", "tfrt_rt",
                 "tpu_embed", "gpu_launch", "batcher", "tpu_stream", "tpu_launch", "pathways_exec",
                 "pjrt_library_call", "threadpool_event", "jax_serving")
CT_LEGACY, CT_GPU_LAUNCH, CT_TPU_STREAM, CT_TPU_LAUNCH = 1, 9, 11, 12
FLOW_MASK = (1 << 56) - 1  # XFlow::kFlowMask
RUN_ID_MASK = (1 << 27) - 1  # preprocess_xplane.h kRunIdMask
QUEUE_CONSUMERS = xs.QUEUE_CONSUMERS  # ADD_QUEUE_CONNECTION(kEnqueueRequestLocked, ...)
TENSOR_CORE_PLANE = re.compile(r"/device:TPU:([0-9]*)")  # tsl kTpuPlaneRegex (full match)
XLA_MODULE_LINE = "XLA Modules"  # tsl kXlaModuleLineName
# XFlow::FlowDirection -> TraceEvent::FlowEntryType (FlowEntryTypeFromDirection)
_KIND_OF_DIRECTION = np.array([0, FLOW_END, FLOW_START, FLOW_MID], dtype=np.int8)
# what a key is made of (the tuples absl::HashOf saw differ in arity and types)
_TAG_CORRELATION, _TAG_UNIQUE, _TAG_PAIR = 1 << 8, 2 << 8, 3 << 8

_U = np.uint64


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (wrapping uint64 arithmetic on arrays)."""
    x = x + _U(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U(27))) * _U(0x94D049BB133111EB)
    return x ^ (x >> _U(31))


def _hash(n: int, *parts) -> np.ndarray:
    """A 64-bit hash per row of the parts (ints or uint64 arrays of length n)."""
    h = np.full(n, 0x243F6A8885A308D3, dtype=np.uint64)
    for p in parts:
        v = np.asarray(p, dtype=np.uint64) if not isinstance(p, int) else np.full(n, p & (2**64 - 1), np.uint64)
        h = _mix(h ^ v)
    return h


def _hash_where(mask: np.ndarray, *parts) -> np.ndarray:
    """:func:`_hash` of the rows where ``mask`` is set (a row's hash is its own: hashing
    only those costs what they number, not what the chunk does)."""
    rows = np.flatnonzero(mask)
    return _hash(len(rows), *(p if np.ndim(p) == 0 else np.asarray(p)[rows] for p in parts))


def _name_key(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _as_u64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64).view(np.uint64) if x.dtype != np.uint64 else x


class Flows:
    """The flow-bound slices of one trace, collected plane by plane (:meth:`plane`) and
    handed to the sink at the end (:meth:`emit`), when it is known whether XProf would
    have preprocessed the XSpace at all."""

    def __init__(self, hostname: str, names: NameTable):
        self.salt = _name_key(hostname)
        self.names = names
        self.grouped = False  # some plane read so far has a group_id stat (IsXSpaceGrouped)
        self.rows: list[tuple[FlowEvents, np.ndarray]] = []  # (rows, made by preprocessing)
        self.cat_ids = [names(s) if s else -1 for s in CONTEXT_NAMES]

    def plane(self, meta, plane_name: str, line_names: list[str]) -> PlaneFlows:
        """Start a plane (``meta``: its XPlane without lines); call for every plane read,
        events or not."""
        stat_names = {v.name for v in meta.stat_metadata.values()}
        self.grouped |= "group_id" in stat_names
        return PlaneFlows(self, meta, plane_name, line_names)

    def emit(self, sink) -> None:
        """``sink.flow_events`` with every flow-bound slice; if the XSpace turned out to be
        grouped, XProf made no flows itself and only the profile's own ``flow`` stats count."""
        # handed over ~1 Mi rows at a time, each chunk's let go as it goes: one whole
        # concatenation beside the chunks was the peak of jax308's decode (2.4 M rows,
        # 2 x 50 MB; the sinks append what each call brings, so the rows are the same)
        rows, self.rows = self.rows, []
        parts, held = [], 0
        for i, (fe, made) in enumerate(rows):
            rows[i] = None
            if self.grouped:
                keep = ~made
                fe = FlowEvents(fe.seq[keep], fe.flow_id[keep], fe.kind[keep], fe.category[keep])
            if len(fe.seq):
                parts.append(fe)
                held += len(fe.seq)
            if parts and (held >= 1 << 20 or i == len(rows) - 1):
                fe = FlowEvents.concat(parts)
                parts, held = [], 0
                sink.flow_events(fe.seq, fe.flow_id, fe.kind, fe.category)


class PlaneFlows:
    """Flow rules for the events of one plane (XProf's per-plane preprocessing)."""

    def __init__(self, flows: Flows, meta, plane_name: str, line_names: list[str]):
        self.flows = flows
        self.stat_names = {v.name for v in meta.stat_metadata.values()}
        names_by_id = {k: v.name for k, v in meta.event_metadata.items()}
        self.ids_of: dict[str, np.ndarray] = {}
        for k, v in names_by_id.items():
            self.ids_of.setdefault(v, []).append(k)
        self.ids_of = {k: np.asarray(v, np.int64) for k, v in self.ids_of.items()}
        # tsl IsDevicePlane: a correlation id flows out of a host plane, into a device one
        self.is_device = plane_name.startswith("/device")
        m = TENSOR_CORE_PLANE.fullmatch(plane_name)
        self.tpu_ordinal = int(m.group(1) or 0) if m else None
        self.module_lines = np.asarray([i for i, n in enumerate(line_names) if n == XLA_MODULE_LINE], np.int32)
        # metadata stats come before the event's own (ConvertXStatsToTraceEventArguments)
        sid = {k: v.name for k, v in meta.stat_metadata.items()}
        meta_flow, meta_async = {}, set()
        for k, md in meta.event_metadata.items():
            for st in md.stats:
                name = sid.get(st.metadata_id)
                case = st.WhichOneof("value")
                if name == "flow" and case in ("int64_value", "uint64_value"):
                    meta_flow[k] = getattr(st, case) & (2**64 - 1)
                elif name == "_a":
                    meta_async.add(k)
        self.meta_flow_ids = np.asarray(sorted(meta_flow), np.int64)
        self.meta_flow_vals = np.asarray([meta_flow[k] for k in sorted(meta_flow)], np.uint64)
        self.meta_async_ids = np.asarray(sorted(meta_async), np.int64)

    def _is(self, ev, *names) -> np.ndarray:
        ids = [self.ids_of[n] for n in names if n in self.ids_of]
        if not ids:
            return np.zeros(ev.n, dtype=bool)
        return np.isin(ev.metadata_id, np.concatenate(ids))

    def candidates(self, ev) -> np.ndarray:
        """The events of the chunk ``ev`` that can get a flow (ascending positions): those
        with a stat :meth:`select` makes a flow of, or one that every context mutator
        needs, or whose metadata holds a ``flow``. The others get none whatever their
        other stats: a stored flow needs a ``flow`` stat; AddFlowsToXplane's a
        ``correlation_id``, or a producer/consumer context, which is ``_pt`` *and* ``_p``
        (``_ct`` and ``_c``) unless a mutator set it; and each mutator (``connect`` in
        :meth:`_preprocessed`) needs ``iter_num`` (legacy), ``queue_addr`` (tpu_stream) or
        ``queue_id`` (tpu_launch, the XLA Modules line) among its keys. On jax308 (13.5 M
        CPU events) these are its 2.4 M ``_p``/``_c`` events, and the rules cost what
        they number (they made ~20 arrays over every event of every chunk)."""
        names = ("flow",) if self.flows.grouped else _MAY_FLOW
        events = [e for e in (xw.kind_stats(ev, nm).event for nm in names) if len(e)]
        if not events and not len(self.meta_flow_ids):
            return np.zeros(0, np.int64)
        may = np.isin(ev.metadata_id, self.meta_flow_ids) if len(self.meta_flow_ids) else np.zeros(ev.n, bool)
        for e in events:
            may[e] = True
        return np.flatnonzero(may)

    def select(self, ev, keep: np.ndarray, seq0: int, at: np.ndarray | None = None) -> np.ndarray:
        """Record the flows of the slices ``keep`` (indices into the decoded chunk ``ev``,
        in the order they go to the sink, the first being slice ``seq0``); returns
        ``keep`` without the events XProf turns into async events. The rules run over
        :meth:`candidates` only (``at``: other ascending positions to run them over, a
        superset; the tests give every event, the rules' dense twin)."""
        at = self.candidates(ev) if at is None else at
        if not len(at):
            return keep
        ev_n = ev.n
        ev = _Picked(ev, at)
        n = ev.n
        kind = np.zeros(n, dtype=np.int8)
        fid = np.zeros(n, dtype=np.uint64)
        ctx = np.zeros(n, dtype=np.int64)
        made = np.zeros(n, dtype=bool)
        # a flow stat the profiler wrote: the metadata's, then the event's own (last wins)
        native = np.zeros(n, dtype=bool)
        nval = np.zeros(n, dtype=np.uint64)
        if len(self.meta_flow_ids):
            pos = np.clip(np.searchsorted(self.meta_flow_ids, ev.metadata_id), 0, len(self.meta_flow_ids) - 1)
            hit = self.meta_flow_ids[pos] == ev.metadata_id
            native |= hit
            nval[hit] = self.meta_flow_vals[pos[hit]]
        ks, s = ev.stat("flow")
        if (s >= 0).any():
            c = np.zeros(n, dtype=np.int8)
            c[s >= 0] = ks.case[s[s >= 0]]
            ok = (c == xw.INT64) | (c == xw.UINT64)
            nval[ok] = ks.value[s[ok]]
            native |= ok
        if native.any():
            kind[native] = _KIND_OF_DIRECTION[(nval[native] & _U(3)).astype(np.int64)]
            fid[native] = (nval[native] >> _U(2)) & _U(FLOW_MASK)
            cat = (nval[native] >> _U(58)).astype(np.int64)
            ctx[native] = np.where(cat < len(CONTEXT_NAMES), cat, 0)
        if not self.flows.grouped:
            self._preprocessed(ev, kind, fid, ctx, made)
        # an event with a flow and an is_async stat is an async event, not a slice
        is_async = ev.stat("_a")[1] >= 0
        if len(self.meta_async_ids):
            is_async = is_async | np.isin(ev.metadata_id, self.meta_async_ids)
        drop = is_async & (kind != 0)
        if drop.any():
            gone = np.zeros(ev_n, dtype=bool)
            gone[at[drop]] = True
            keep = keep[~gone[keep]]
        # FLOW_NONE (direction 0 in a stored flow stat) binds nothing to draw: left out
        if (kind != 0).any():
            w = ev.place[keep]  # each kept slice's place among ``at`` (-1: not there)
            bound = np.flatnonzero(w >= 0)
            bound = bound[kind[w[bound]] != 0]
            if bound.size:
                r = w[bound]
                cats = np.asarray(self.flows.cat_ids, np.int32)[ctx[r]]
                self.flows.rows.append((FlowEvents(seq0 + bound.astype(np.int64), fid[r], kind[r], cats), made[r]))
        return keep

    def _preprocessed(self, ev: _Picked, kind, fid, ctx, made) -> None:
        """The flows PreprocessXPlane's context mutators and AddFlowsToXplane add."""
        n = ev.n
        has = self.stat_names.__contains__

        def first(name):  # XEventBuilder::GetStat: the first stat of that name
            return ev.value(name, last=False)

        def last(name):  # the ForEachStat loops of AddFlowsToXplane: the last one
            return ev.value(name)

        p_has, p_type = last("_pt")
        p_idh, p_id = last("_p")
        p_has = p_has & p_idh
        c_has, c_type = last("_ct")
        c_idh, c_id = last("_c")
        c_has = c_has & c_idh  # (the values are fresh arrays, connect may write into them)

        def connect(producer, consumers, ctype, ok, *key):
            """XplaneConnectedEventMutator: SetOrAdd the context on both sides; the context
            id is the hash of ``key`` (ints, or per-event columns hashed only where set)."""
            for names, has_, typ, ids in (((producer,), p_has, p_type, p_id), (consumers, c_has, c_type, c_id)):
                m = self._is(ev, *names) & ok
                has_[m] = True
                typ[m] = ctype
                ids[m] = _hash_where(m, *key)

        if has("id") and has("iter_num"):  # legacy TPU executor: unique_stats=false
            (a, va), (b, vb) = first("id"), first("iter_num")
            connect("ExecutorState::Process", ("TpuExecuteOp",), CT_LEGACY, a & b,
                    _TAG_PAIR, _name_key("ExecutorState::Process"), _name_key("TpuExecuteOp"), va, vb)
        if has("request_id") and has("queue_addr"):
            (a, va), (b, vb) = first("request_id"), first("queue_addr")
            connect("EnqueueRequestLocked", QUEUE_CONSUMERS, CT_TPU_STREAM, a & b, _TAG_UNIQUE, 2, va, vb)
        if has("run_id") and has("queue_id"):
            run_h, run = first("run_id")
            q_h, q = first("queue_id")
            core_h, core = first("core_type")
            core = np.where(core_h, core, _U(0))  # XContextStatsAccessorWithDefault
            if has("device_ordinal"):
                d_h, d = first("device_ordinal")
                # HostRunIdMutator: run_id keeps its 27 low bits on these events first
                fixed = np.where(self._is(ev, "DoEnqueueProgram", "CompleteCallbacks", "DoEnqueueContinuationProgram"),
                                 _as_u64(run.view(np.int64) & RUN_ID_MASK), run)
                connect("DoEnqueueProgram", ("CompleteCallbacks",), CT_TPU_LAUNCH, d_h & q_h & run_h,
                        _TAG_UNIQUE, 4, d, q, fixed, core)
            if self.tpu_ordinal is not None and len(self.module_lines):
                m = np.isin(ev.line, self.module_lines) & run_h & q_h
                c_has[m] = True
                c_type[m] = CT_TPU_LAUNCH
                c_id[m] = _hash_where(m, _TAG_UNIQUE, 4, self.tpu_ordinal, q, run, core)
        # AddFlowsToXplane: correlation, then producer, then consumer; the last one wins
        salt = self.flows.salt
        if has("correlation_id"):
            ks, s = ev.stat("correlation_id")
            m = s >= 0
            if m.any():
                corr = np.zeros(n, dtype=np.uint64)
                corr[m] = np.where(ks.case[s[m]] == xw.UINT64, ks.value[s[m]], _U(0))
                kind[m] = FLOW_END if self.is_device else FLOW_START
                fid[m] = _hash_where(m, salt, _TAG_CORRELATION, corr) & _U(FLOW_MASK)
                ctx[m] = CT_GPU_LAUNCH
                made[m] = True
        for has_, typ, ids, k in ((p_has, p_type, p_id, FLOW_START), (c_has, c_type, c_id, FLOW_END)):
            if not has_.any():
                continue
            t = typ.astype(np.uint32).astype(np.int64)  # GetSafeContextType(uint32_t)
            t = np.where(t < len(CONTEXT_NAMES), t, 0)
            kind[has_] = k
            fid[has_] = _hash_where(has_, salt, t, ids) & _U(FLOW_MASK)
            ctx[has_] = t[has_]
            made[has_] = True


# the stats an event needs one of to get a flow (PlaneFlows.candidates says why)
_MAY_FLOW = ("flow", "correlation_id", "_p", "_c", "iter_num", "queue_addr", "queue_id")


class _Picked:
    """Some events of a decoded chunk (``at``: ascending positions): their metadata ids,
    lines and stats, read as :class:`xplane_wire.StatView` reads them, over these events
    only (a view makes two arrays over every event of the chunk)."""

    def __init__(self, ev, at: np.ndarray):
        self._ev, self.n = ev, len(at)
        self.metadata_id, self.line = ev.metadata_id[at], ev.line[at]
        # per event of the chunk, its place among these (-1: not one of them): one int32
        # array over the chunk, and a kind's stats found by a gather
        self.place = np.full(ev.n, -1, dtype=np.int32)
        self.place[at] = np.arange(self.n, dtype=np.int32)

    def stat(self, name: str, last: bool = True):
        """(the kind's stats, per event its last (``last``) or first stat of the kind, -1:
        none), as ``StatView(ev, name, last=last).stat[at]``: the kind's stats stay in
        their order, so the last one written wins as in ``xplane_wire._last_per_msg``."""
        ks = xw.kind_stats(self._ev, name)
        out = np.full(self.n, -1, dtype=np.int64)
        if len(ks.event):
            j = self.place[ks.event]
            sel = np.flatnonzero(j >= 0)
            if last:
                out[j[sel]] = sel
            else:
                out[j[sel][::-1]] = sel[::-1]
        return ks, out

    def value(self, name: str, last: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(whether each event has the stat, XStatVisitor::IntOrUintValue of its last or
        first one as uint64 bits): :meth:`stat`'s rule, written straight from the kind's
        stats (the last write wins; reversed for the first)."""
        ks = xw.kind_stats(self._ev, name)
        present = np.zeros(self.n, dtype=bool)
        out = np.zeros(self.n, dtype=np.uint64)
        if len(ks.event):
            j = self.place[ks.event]
            sel = np.flatnonzero(j >= 0)
            if not last:
                sel = sel[::-1]
            c = ks.case[sel]
            present[j[sel]] = True
            out[j[sel]] = np.where((c == xw.INT64) | (c == xw.UINT64), ks.value[sel], _U(0))
        return present, out


class CountingSink:
    """A sink wrapper that counts the slices handed to ``events`` (a flow names its slices
    by that position, :class:`~profscope.model.trace.FlowEvents`)."""

    def __init__(self, sink):
        self._sink = sink
        self.count = 0

    def events(self, track, start, dur, name, off, length) -> None:
        self.count += len(start)
        self._sink.events(track, start, dur, name, off, length)

    def events_files(self, files: dict[str, str], n: int) -> bool:
        """``n`` slices already written as column files, handed on when the sink takes
        them so (the index writer's ``events_files``); False when it does not."""
        take = getattr(self._sink, "events_files", None)
        if take is None:
            return False
        take(files, n)
        self.count += n
        return True

    def __getattr__(self, name):
        return getattr(self._sink, name)
