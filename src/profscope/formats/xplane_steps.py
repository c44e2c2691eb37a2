"""XProf's step grouping of a host plane's events (the ``group_id`` of every event).

XProf 2.24.2 preprocesses a single-host XSpace (``PreprocessSingleHostXSpace`` with
``step_grouping=true``) before it builds the memory profile: tsl's
``PreprocessXPlane`` (``xla/tsl/profiler/utils/preprocess_xplane.cc``: threadpool
regions, root-event and connected-event mutators), then ``GroupTfEvents``
(``xla/tsl/profiler/utils/group_events.cc``: the ``EventForest`` of nested and connected
events, root events numbered in time order, group ids flowing from each root to what it
reaches, TF loops grouped per iteration, group names from ``EventNode::GetGroupName``).
This module is that computation over the events decoded by
:mod:`profscope.formats.xplane_wire`:

* :func:`threadpool_regions`: XProf's ``ThreadpoolLineMutator`` (the
  ``ThreadpoolListener::Region`` events it adds, and the order XProf's visitors see the
  events in).
* :class:`Grouping`: the event forest and the group ids, with the
  :class:`~profscope.model.allocator.StepGroup` of each root.
* :data:`ROOT_MUTATED` and :data:`QUEUE_CONSUMERS`: XProf's root-event and
  connected-event mutator tables, shared with the trace viewer's derived lines and flows.

What is read, and the documented limits, are in :mod:`profscope.formats.xplane_allocator`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profscope.formats import xplane_wire as xw
from profscope.model.allocator import StepGroup
from profscope.model.stdsort import std_sort_order

__all__ = ["GROUPING_STATS", "QUEUE_CONSUMERS", "ROOT_MUTATED", "Grouping", "Regions", "threadpool_regions"]

# Every event stat the grouping reads (GroupingEventStats, GetStat, the connected-event
# mutators' keys, the group names): a reader that only groups can decode just these.
GROUPING_STATS = frozenset({
    "_pt", "_p", "_ct", "_c", "_pid", "_r", "_a", "id", "iter_num", "graph_type", "step_num",
    "request_id", "queue_addr", "device_ordinal", "queue_id", "run_id", "core_type",
})


# ---------------------------------------------------------------------------
# XProf's preprocessing: ThreadpoolListener regions
# ---------------------------------------------------------------------------

_THREADPOOL_EVENT_CONTEXT = 15  # tsl ContextType::kThreadpoolEvent


@dataclass
class Regions:
    """``ThreadpoolListener::Region`` events XProf adds; their node ids follow ev.n."""

    line: np.ndarray
    ts_ps: np.ndarray  # absolute begin
    end_ps: np.ndarray  # absolute end
    region_id: np.ndarray  # uint64 consumer id


def threadpool_regions(ev: xw.Events, event_names, line_ts_ns):
    """XProf's ThreadpoolLineMutator: one ``ThreadpoolListener::Region`` per
    ``StopRegion`` after a ``StartRegion`` on a line (the start is not reset, so two stops
    make two regions), consumer of the start's ``_c`` context (type 15).

    XProf 2.24.2 appends them to the end of their line and does not re-sort the line
    (checked: allocator events keep their line order, and events inside a region are not
    grouped through it), so they nest nothing and only add consumers to their context.
    Returns (order, regions): ``order`` lists the event indices in the order XProf's
    visitors see them (lines in plane order, events in line order); None here: every
    event ascending, as the events were read, which :class:`Grouping` makes (``order``)
    only where it reads it.
    """
    n = ev.n
    order = None  # events were read line by line, in line order: every event ascending
    empty = Regions(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64),
                     np.zeros(0, np.uint64))
    start_ids = [k for k, v in event_names.items() if v == "ThreadpoolListener::StartRegion"]
    stop_ids = [k for k, v in event_names.items() if v == "ThreadpoolListener::StopRegion"]
    if not start_ids or not stop_ids or n == 0:
        return order, empty
    start_mid, stop_mid = start_ids[-1], stop_ids[-1]
    # the start and stop events only (``order`` is the events' own): times and consumer
    # ids at those, not over every event; the _c view is not kept in the events' cache
    at = np.flatnonzero((ev.metadata_id == start_mid) | (ev.metadata_id == stop_mid))
    ks, stat = xw.first_stats(ev, "_c", at)
    starts = (ev.metadata_id[at] == start_mid) & (stat >= 0)
    keep = starts | (ev.metadata_id[at] == stop_mid)  # a start without _c is neither
    at, stat, is_start = at[keep], stat[keep], starts[keep]
    cid = np.zeros(len(at), np.uint64)  # IntOrUintValue: 0 for any other value case
    has = np.flatnonzero(stat >= 0)
    case = ks.case[stat[has]]
    cid[has] = np.where((case == xw.INT64) | (case == xw.UINT64), ks.value[stat[has]], np.uint64(0))
    lines = ev.line[at]
    ts = line_ts_ns[lines] * 1000 + ev.offset_ps[at]
    # The mutator's walk, vectorised: at a stop, the line's (run's) latest start, if any
    # and if its time is not 0 (a start at 0 or a new line resets it), opens the region.
    k = np.arange(len(at))
    head = np.maximum.accumulate(np.where(np.r_[True, lines[1:] != lines[:-1]], k, 0)) if len(k) else k
    last = np.maximum.accumulate(np.where(is_start, k, -1)) if len(k) else k
    emit = np.flatnonzero(~is_start & (last >= head) & (ts[np.maximum(last, 0)] != 0))
    if not emit.size:
        return order, empty
    opened = last[emit]
    return order, Regions(lines[emit].astype(np.int32), ts[opened].astype(np.int64), ts[emit].astype(np.int64),
                          cid[opened])


# ---------------------------------------------------------------------------
# Step grouping (tsl GroupTfEvents, group_events.cc, over the host plane)
# ---------------------------------------------------------------------------

# tsl ContextType values
_CT_LEGACY, _CT_TPU_STREAM, _CT_TPU_LAUNCH = 1, 11, 12
_RUN_ID_MASK = (1 << 27) - 1

ROOT_MUTATED = {"ProcessBatch": 2, "OrbaxServing::ProcessBatch": 2, "BatchingSessionRun": 1}
_IMPLICIT_ROOTS = {"FunctionRun", "SessionRun", "RunGraph", "ExecutorState::Process"}
_TF_DATA_FUNCS = {
    "InstantiatedCapturedFunction::Run",
    "InstantiatedCapturedFunction::RunWithBorrowedArgs",
    "InstantiatedCapturedFunction::RunInstantiated",
    "InstantiatedCapturedFunction::RunAsync",
}
QUEUE_CONSUMERS = (
    "RunProgramRequest", "HostCallbackRequest", "TransferH2DRequest",
    "TransferPreprocessedH2DRequest", "TransferD2HRequest", "OnDeviceSendRequest",
    "OnDeviceRecvRequest", "OnDeviceSendRecvLocalRequest", "CustomWait",
    "OnDeviceSendRequestMulti", "OnDeviceRecvRequestMulti", "PjrtAsyncWait",
)

# The connected-event mutators' stats (Grouping._mutate_contexts) and the events whose
# stats they read: a mutator reads none of its stats where the plane lacks one of them or
# has no event of either name (XProf's mutator factories create no mutator then).
_MUTATOR_STATS = (
    (("device_ordinal", "queue_id", "run_id"), ("core_type",), ("DoEnqueueProgram", "CompleteCallbacks")),
    (("request_id", "queue_addr"), (), ("EnqueueRequestLocked", *QUEUE_CONSUMERS)),
)


def unread_stats(stat_names: set, event_names: set) -> set:
    """Of :data:`GROUPING_STATS`, those the grouping of a plane with these stat and event
    names never reads (the mutators' that make no mutator there): a reader need not decode
    them. jax308's device_ordinal and run_id, 1.28 M stats each (36 MiB decoded), are."""
    unread = set()
    for needed, optional, events in _MUTATOR_STATS:
        if not set(needed) <= stat_names or not set(events) & event_names:
            unread.update(needed, optional)
    return unread


def _int32(x: int) -> int:
    return ((int(x) + (1 << 31)) % (1 << 32)) - (1 << 31)


def _int32s(x: np.ndarray) -> np.ndarray:
    """:func:`_int32` of an int64 array (uint64 bits read as int64 first)."""
    return (x.view(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)


def _context_edges(prod_a, cons_a, prod: dict, cons: dict, v_pid, plane_pid, n: int):
    """ConnectContextGroups: every producer to every consumer of its context
    ``((type, id), pid)``, unless both sides have 64 or more, as arrays ``(parents,
    kids)``; a group's producers in node order, each its consumers in node order (the
    order XProf adds them: a node's parents are read in that order). ``prod_a``/``cons_a``:
    the plain contexts as arrays (node, type, id); ``prod``/``cons``: the mutated ones
    ``{node: (type, key)}``, which replace a node's plain one."""
    none_pid = 1 << 40  # plane_pid None (no process_id stat): a pid no int32 equals
    ppid = none_pid if plane_pid is None else plane_pid

    def plain(arrs, mutated):
        node, typ, ident = arrs
        keep = ~np.isin(node, np.fromiter(mutated, np.int64, len(mutated))) if mutated else slice(None)
        node, typ, ident = node[keep], typ[keep], ident[keep]
        pid = np.full(len(node), ppid, dtype=np.int64)
        own = node < n
        has = np.zeros(len(node), bool)
        has[own] = v_pid.present_at(node[own])
        pid[has] = _int32s(v_pid.int_value_at(node[has]))
        return node, typ, ident, pid

    pn, pt, pv, pp = plain(prod_a, prod)
    cn, ct, cv, cp = plain(cons_a, cons)
    # one code per distinct (type, id, pid): sorted by the three (a structured array's
    # np.unique compared them field by field in Python-level calls: 3 s on 2 M contexts)
    # (each sorted column made, compared and dropped in turn, into one reused mask: the
    # fresh pages of the temporaries, docs/performance.md)
    cols = [np.r_[pt, ct], np.r_[pv, cv], np.r_[pp, cp]]  # t, v, pid
    del pt, ct, pv, cv, pp, cp
    o = np.lexsort(cols[::-1])
    new = np.zeros(len(o), bool)
    new[:1] = True
    diff = np.empty(max(len(o) - 1, 0), bool)
    while cols:
        c = cols.pop()[o]
        np.not_equal(c[1:], c[:-1], out=diff)
        new[1:] |= diff
        del c
    del diff
    code = np.empty(len(o), dtype=np.int64)
    c = np.cumsum(new)
    c -= 1
    code[o] = c
    del c
    pk, ck = code[:len(pn)], code[len(pn):]
    # the mutated contexts (tuple keys: never equal to a plain one's int id)
    ncodes = int(new.sum())
    codes: dict[tuple, int] = {}
    extra = []
    for store, side in ((prod, 0), (cons, 1)):
        for i, ctx in store.items():
            pid = _int32(v_pid.int_at(i)) if i < n and v_pid.has(i) else plane_pid
            extra.append((i, side, codes.setdefault((ctx, pid), ncodes + len(codes))))
    ncodes += len(codes)
    if extra:
        e = np.asarray(extra, dtype=np.int64)
        pn, pk = np.r_[pn, e[e[:, 1] == 0, 0]], np.r_[pk, e[e[:, 1] == 0, 2]]
        cn, ck = np.r_[cn, e[e[:, 1] == 1, 0]], np.r_[ck, e[e[:, 1] == 1, 2]]
    o = np.argsort(pn, kind="stable")
    pn, pk = pn[o], pk[o]
    o = np.lexsort((cn, ck))  # consumers by context, each context's in node order
    cn, ck = cn[o], ck[o]
    n_p = np.bincount(pk, minlength=ncodes)
    n_c = np.bincount(ck, minlength=ncodes)
    ok = ~((n_p >= 64) & (n_c >= 64))
    c_first = np.zeros(ncodes + 1, dtype=np.int64)
    np.cumsum(n_c, out=c_first[1:])
    keep = ok[pk]
    pn, pk = pn[keep], pk[keep]
    reps = n_c[pk]
    total = int(reps.sum())
    parents = np.repeat(pn, reps)
    base = np.cumsum(reps)
    base -= reps
    np.subtract(c_first[pk], base, out=base)
    at = np.repeat(base, reps)
    del base
    at += np.arange(total, dtype=np.int64)
    return parents, cn[at]


def _nesting_edges(nest_parent: np.ndarray, leaf: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nesting edges (one parent per node) as arrays: each node's parent (-1: none),
    and every parent's children in node order (``kids[first[p]:first[p + 1]]``)."""
    parent_of = nest_parent  # in place: the caller's array, no second whole-profile copy
    if _native_walks() and hasattr(xw._native, "nest_children"):
        if leaf.any():
            parent_of[leaf] = -1
        first, kids = xw._native.nest_children(parent_of)  # two passes, no sort
        return parent_of, kids, first
    nested = (nest_parent >= 0) & ~leaf
    parent_of[~nested] = -1
    kids = np.flatnonzero(nested)
    kids = kids[np.argsort(parent_of[kids], kind="stable")]
    first = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(parent_of[kids], minlength=total), out=first[1:])
    return parent_of, kids, first


def _event_times(ev, line_ts_ns: np.ndarray, ts: np.ndarray, end: np.ndarray) -> None:
    """Each event's absolute begin and end (ps) into ``ts`` and ``end``: in C where built
    (numpy's ``line_ts_ns[line] * 1000 + offset`` made three temporaries as large)."""
    if _native_walks() and hasattr(xw._native, "event_times"):
        xw._native.event_times(np.ascontiguousarray(ev.line, np.int32), ev.offset_ps, ev.duration_ps,
                               line_ts_ns * 1000, ts, end)
        return
    ts[:] = line_ts_ns[ev.line] * 1000 + ev.offset_ps
    np.add(ts, ev.duration_ps, out=end)


def _csr(keys: np.ndarray, values: np.ndarray, total: int, narrow: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Edges ``keys[j] -> values[j]`` as ``(first, adj)``: key k's values, in the order
    they were added, are ``adj[first[k]:first[k + 1]]``. ``narrow``: ``first`` as int32
    where the C pass makes it (for ``range_roots``, which reads either): one offset per
    node, the walks' largest array (jax308's 13.6 M nodes: 104 MiB as int64 for 1.3 M
    edges, docs/performance.md)."""
    if _native_walks() and hasattr(xw._native, "edges_csr"):  # two passes, no sort
        args = (np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(values, np.int64), total)
        if narrow:
            try:
                return xw._native.edges_csr(*args, True)
            except TypeError:  # an extension built before narrow offsets
                pass
        return xw._native.edges_csr(*args)
    o = np.argsort(keys, kind="stable")
    first = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=total), out=first[1:])
    return first, np.ascontiguousarray(values[o], dtype=np.int64)


def _group_from(root: int, gid: int, group: list, kids: list, first: list, xkids: list, xfirst: list) -> None:
    """ProcessRootEvent's PropagateGroupId: every node reachable from the root through
    nodes no earlier root grouped gets ``gid`` (the walk's order does not change which).
    The pure-Python twin of ``_xplane_scan.group_from`` (PROFSCOPE_NATIVE=0)."""
    queue = [root]
    seen = {root}
    k = 0
    while k < len(queue):
        node = queue[k]
        k += 1
        if group[node] >= 0:
            continue
        group[node] = gid
        for c in kids[first[node]:first[node + 1]]:
            if c not in seen:
                seen.add(c)
                queue.append(c)
        for c in xkids[xfirst[node]:xfirst[node + 1]]:
            if c not in seen:
                seen.add(c)
                queue.append(c)


def _native_walks() -> bool:
    """The C walks are used where the extension is built and enabled, and is one that has
    them (an extension built before them has only the decoder)."""
    return xw.native_enabled() and hasattr(xw._native, "group_from")


class _GroupWalk:
    """The group ids of the forest's nodes, root by root (:func:`_group_from`): in C
    where the extension is built (a walk over every event; the nodes' ids in one array),
    else in Python over lists (PROFSCOPE_NATIVE=0). With ``lines`` (the arguments of
    ``_xplane_scan.range_roots`` after the group array: see Grouping._by_ranges) the
    nesting edges are not given (``kids``/``first`` None): each walk scans its lines."""

    def __init__(self, total: int, kids, first, xkids, xfirst, lines=None):
        self.native = _native_walks() and total < (1 << 31)
        self.lines = lines
        if self.native:
            # int32: the ids are below the node count; half the fresh pages of int64 over
            # every node (13 k on the 308 MB profile, docs/performance.md)
            self.group = np.full(total, -1, dtype=np.int32)
            self.edges = (first, kids, xfirst, xkids)
        else:
            self.group = [-1] * total  # a list: the walk reads and writes it per node
            self.edges = (kids.tolist(), first.tolist(), xkids.tolist(), xfirst.tolist())

    def walk_roots(self, roots: np.ndarray) -> list[int]:
        """Each root in turn that no earlier walk grouped gets the next group id (0, 1,
        ...) and its walk (in one C call where built); the roots walked."""
        if self.lines is not None:
            return xw._native.range_roots(np.ascontiguousarray(roots, np.int64), self.group, *self.lines,
                                          self.edges[2], self.edges[3]).tolist()
        if self.native and hasattr(xw._native, "group_roots"):  # (an extension built before it: one by one)
            return xw._native.group_roots(np.ascontiguousarray(roots, np.int64), self.group, *self.edges).tolist()
        walked = []
        for r in roots.tolist():
            if not self.grouped(r):
                self.walk(r, len(walked))
                walked.append(r)
        return walked

    def walk(self, root: int, gid: int) -> None:
        if self.lines is not None:  # (Grouping._by_ranges: never with TF loops, the only caller)
            raise AssertionError("one root's walk by scans: not made")
        if self.native:
            xw._native.group_from(root, gid, self.group, *self.edges)
        else:
            _group_from(root, gid, self.group, *self.edges)

    def grouped(self, node: int) -> bool:
        return self.group[node] >= 0

    def result(self) -> np.ndarray:
        """The group ids: the C walks' int32 array as it is (no int64 copy), the Python
        walk's list as int64."""
        return self.group if self.native else np.asarray(self.group, dtype=np.int64)


class _NodeCol:
    """A per-node column of the forest (``ts``: absolute begin in ps, ``end``, or
    ``line``) computed at the nodes asked, as the arrays over every node index it
    (the events', then the threadpool regions'): where the walks go by scans only the
    roots' are read, and three arrays over 13.5 M nodes are not made."""

    __slots__ = ("g", "what")

    def __init__(self, g: "Grouping", what: str):
        self.g = g
        self.what = what

    def __getitem__(self, nodes):
        a = np.asarray(nodes, dtype=np.int64)
        flat = np.atleast_1d(a)
        ev, reg, n = self.g.ev, self.g.regions, self.g.ev.n
        own = flat < n
        i, j = flat[own], flat[~own] - n
        if self.what == "line":
            out = np.empty(len(flat), np.int32)
            out[own] = ev.line[i]
            out[~own] = reg.line[j]
        else:  # as _event_times: line_ts_ns * 1000 + offset (+ duration)
            out = np.empty(len(flat), np.int64)
            out[own] = self.g.line_ts_ns[ev.line[i]] * 1000 + ev.offset_ps[i]
            if self.what == "end":
                out[own] += ev.duration_ps[i]
            out[~own] = (reg.end_ps if self.what == "end" else reg.ts_ps)[j]
        return out if a.ndim else out[0]


class _LazyNest:
    """The nesting parent of nodes (-1: none, as the ``parent_of`` array) where the walks
    went by scans: of an array of nodes (the roots), one stack walk of their lines
    (``_xplane_scan.nest_parents_at``, nothing written per event); of a single node (the
    ancestor walks of roots that have parents: RootNeedsGrouping, GetContextStat), the
    whole array, once (Grouping._full_nest). The last array's answer is kept: the roots
    are asked twice (RootNeedsGrouping, then the step names)."""

    __slots__ = ("g", "is_async", "full", "last")

    def __init__(self, g: "Grouping", is_async: np.ndarray):
        self.g = g
        self.is_async = is_async
        self.full = None
        self.last = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    def __getitem__(self, nodes):
        if self.full is None and np.ndim(nodes) == 0:
            self.full = self.g._full_nest(self.is_async)
        if self.full is not None:
            return self.full[nodes]
        a = np.asarray(nodes, dtype=np.int64)
        if np.array_equal(a, self.last[0]):
            return self.last[1].copy()
        out = np.full(len(a), -1, dtype=np.int64)
        own = a < self.g.ev.n  # threadpool regions are on no line's walk: no parent
        if own.any():
            u, inv = np.unique(a[own], return_inverse=True)
            out[own] = xw._native.nest_parents_at(u, *self.g._lines(self.is_async))[inv]
        self.last = (a.copy(), out.copy())
        return out


def _first_view(ev, name: str):
    """``StatView(ev, name, last=False)``, or where no event has the stat a stand-in of
    read-only constants (a JAX profile's ``id``: 67 MB of fresh memory saying "none")."""
    return xw.StatView(ev, name, last=False) if xw.has_stat(ev, name) else _NoStat(ev.n)


class _NoStat:
    """The view of a stat no event has: ``present`` False everywhere (a broadcast, no
    memory per event; never written), every value 0, as StatView answers then."""

    def __init__(self, n: int):
        self.present = np.broadcast_to(False, (n,))

    def int_at(self, i: int) -> int:
        return 0

    def int_value_at(self, events: np.ndarray) -> np.ndarray:
        return np.zeros(len(events), dtype=np.int64)

    def int_or_uint_value_at(self, events: np.ndarray) -> np.ndarray:
        return np.zeros(len(events), dtype=np.uint64)


class _Sparse:
    """``StatView(ev, name)`` (the last stat of its kind wins: ``ForEachStat``; with
    ``last=False`` the first: ``GetStat``) as the sorted events that have the stat and
    their stat indices: no array over every event (seven views of 67 MB each on the
    308 MB profile, each fresh memory). The kind's stats come in sorted runs (a chunk's
    stats by field position, then event), which a stable sort merges; the last (first)
    of an event's equal keys is its last (first) stat."""

    __slots__ = ("ks", "events", "stat")

    def __init__(self, ks: xw.KindStats, last: bool = True):
        self.ks = ks
        o = np.argsort(ks.event, kind="stable")
        e = ks.event[o]
        keep = np.ones(len(e), bool)
        if last:
            keep[:-1] = e[1:] != e[:-1]
        else:
            keep[1:] = e[1:] != e[:-1]
        self.events = e[keep].astype(np.int64)
        self.stat = o[keep]

    @property
    def present(self) -> "_Present":
        """``StatView.present`` read at nodes (``present[nodes]``, ``present[i]``)."""
        return _Present(self)

    def _at(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of ``nodes`` have the stat, their stat indices): by one merge in C where
        built (``_xplane_scan.sorted_find``), else numpy's search (PROFSCOPE_NATIVE=0)."""
        if not len(self.events):
            return np.zeros(len(nodes), bool), np.zeros(0, np.int64)
        if _native_walks() and hasattr(xw._native, "sorted_find"):
            pos = xw._native.sorted_find(self.events, np.ascontiguousarray(nodes, np.int64))
            ok = pos >= 0
            return ok, self.stat[pos[ok]]
        pos = np.minimum(np.searchsorted(self.events, nodes), len(self.events) - 1)
        ok = self.events[pos] == nodes
        return ok, self.stat[pos[ok]]

    def present_at(self, nodes: np.ndarray) -> np.ndarray:
        return self._at(nodes)[0]

    def has(self, i: int) -> bool:
        return bool(self._at(np.asarray([i], np.int64))[0][0])

    def int_value_at(self, nodes: np.ndarray) -> np.ndarray:
        """XStatVisitor::IntValue at ``nodes``: the int64 value, 0 for any other case or none."""
        ok, k = self._at(nodes)
        out = np.zeros(len(nodes), dtype=np.int64)
        v = self.ks.value[k].view(np.int64)  # (zeroed in place: no np.where temporary as large)
        v[self.ks.case[k] != xw.INT64] = 0
        out[ok] = v
        return out

    def int_or_uint_value_at(self, nodes: np.ndarray) -> np.ndarray:
        """XStatVisitor::IntOrUintValue at ``nodes`` as uint64 bits (0 without)."""
        ok, k = self._at(nodes)
        out = np.zeros(len(nodes), dtype=np.uint64)
        c = self.ks.case[k]
        v = self.ks.value[k]
        v[(c != xw.INT64) & (c != xw.UINT64)] = 0
        out[ok] = v
        return out

    def int_at(self, i: int) -> int:
        return int(self.int_value_at(np.asarray([i], np.int64))[0])


class _Present:
    """A :class:`_Sparse` view's ``present``, indexed as the array over every event it
    replaces: by an array of nodes or by one node."""

    __slots__ = ("view",)

    def __init__(self, view: _Sparse):
        self.view = view

    def __getitem__(self, nodes):
        if np.ndim(nodes) == 0:
            return self.view.has(int(nodes))
        return self.view.present_at(np.asarray(nodes, dtype=np.int64))


def _common(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The events two :class:`_Sparse` views share (both ascending, no repeats), ascending:
    one merge in C where built, else ``np.intersect1d`` (which sorts the two joined)."""
    if _native_walks() and hasattr(xw._native, "sorted_find"):
        return a[xw._native.sorted_find(b, a) >= 0]
    return np.intersect1d(a, b, assume_unique=True)


class _Parents:
    """A node's parents in the event forest, as the dict of lists it replaces answered
    them: its nesting parent first, then the other edges' parents in the order added."""

    __slots__ = ("nest", "kids", "adj")

    def __init__(self, nest: np.ndarray, kids: np.ndarray, parents: np.ndarray):
        self.nest = nest
        # the other edges (few: no array over every node), by kid, in the order added
        o = np.argsort(kids, kind="stable")
        self.kids, self.adj = kids[o], parents[o]

    def has_other(self, nodes: np.ndarray) -> np.ndarray:
        """Per node, whether it has a parent by another edge than nesting (a search in
        the sorted kids: np.isin hashed the 1.3 M kids, 0.8 s a call)."""
        at = np.minimum(self.kids.searchsorted(nodes), max(len(self.kids) - 1, 0))
        return (self.kids[at] == nodes) if len(self.kids) else np.zeros(len(nodes), bool)

    def get(self, node: int, default=()):
        p = int(self.nest[node])
        extra = []
        a = int(self.kids.searchsorted(node))
        if a < len(self.kids) and self.kids[a] == node:  # most nodes have none
            extra = self.adj[a:int(self.kids.searchsorted(node, "right"))].tolist()
        if p < 0:
            return extra if extra else default
        return [p, *extra]


class Grouping:
    """Group ids of the host plane's events, as tsl's EventForest (group_events.cc) computes them."""

    def __init__(self, ev, ev_kind, event_names, stat_names, meta, headers, line_ts_ns, order, regions,
                 strings):
        self.ev = ev
        self.ev_kind = ev_kind
        self.event_names = event_names
        self.stat_names = stat_names
        self.meta = meta
        self.headers = headers
        self.line_ts_ns = line_ts_ns
        self._order = order  # None: every event, ascending (no array: see :attr:`order`)
        self.regions = regions
        self.strings = strings
        # the stats read once (:meth:`_read_once`) taken out of ``ev`` as they are read,
        # so each is freed where run() is done with it (the step reader's own ``ev``:
        # jax308's four context stats, 68 MiB, held to the walks' end otherwise)
        self.let_go = False

    @property
    def order(self) -> np.ndarray:
        """The forest's order of the events (node ids); made only where read, for an
        order of ``None`` (:func:`threadpool_regions`: every event ascending): the host
        steps' grouping by scans reads none of it (108 MB of fresh pages on the 308 MB
        profile's 13.5 M events, docs/performance.md)."""
        if self._order is None:
            self._order = np.arange(self.ev.n, dtype=np.int64)
        return self._order

    def _mask(self, wanted) -> np.ndarray:
        return xw.mid_mask(self.ev, self.event_names, wanted)

    def run(self):
        ev, regions = self.ev, self.regions
        n = ev.n
        nr = len(regions.line)
        total = n + nr

        # GroupingEventStats (ForEachStat: the last stat of a kind wins), each as the
        # sorted events that have it (_Sparse); GetStat (the first one) of id/iter_num.
        v_pt, v_p, v_ct, v_c, v_pid, v_r, v_a = (self._read_once(s) for s in ("_pt", "_p", "_ct", "_c", "_pid", "_r", "_a"))
        g_step, g_iter = _first_view(ev, "id"), _first_view(ev, "iter_num")

        # Stat values are read at the events that carry the stat only: a whole-profile
        # array per stat (8 bytes an event each) was GBs on a 300 MB profile.
        at = v_r.events
        levels = _int32s(v_r.int_value_at(at))  # std::optional<int>
        # int8 where every level fits (the mutators' are 1 and 2): 4x fewer fresh pages
        # than int32 over every node (54 MB on the 308 MB profile, docs/performance.md)
        narrow = not len(levels) or (int(levels.min()) >= -128 and int(levels.max()) <= 127)
        root_level = np.zeros(total, dtype=np.int8 if narrow else np.int32)
        root_level[at] = levels
        del levels
        legacy = self._mask({"TraceContext"})
        legacy[v_r.events] = False
        root_level[:n][legacy] = 1
        for ename, level in ROOT_MUTATED.items():  # XplaneRootEventMutator
            root_level[:n][self._mask({ename})] = level
        is_async = np.zeros(total, dtype=bool)
        at = v_a.events
        is_async[at] = v_a.int_value_at(at) != 0
        del v_r, v_a

        # Producer / consumer contexts, after XProf's connected-event mutators (their
        # keys, tuples, in dicts: few events); the plain _pt/_p and _ct/_c ones (~10 % of a
        # JAX CPU profile's events) as arrays of node, context type and id.
        prod: dict[int, tuple] = {}
        cons: dict[int, tuple] = {}
        self._mutate_contexts(prod, cons)
        at = _common(v_pt.events, v_p.events)
        prod_a = (at, _int32s(v_pt.int_value_at(at)), v_p.int_or_uint_value_at(at))
        at = _common(v_ct.events, v_c.events)
        cons_a = (np.r_[at, np.arange(n, total)], np.r_[_int32s(v_ct.int_value_at(at)), np.full(nr, _THREADPOOL_EVENT_CONTEXT)],
                  np.r_[v_c.int_or_uint_value_at(at), regions.region_id.astype(np.uint64)])
        del at, v_pt, v_p, v_ct, v_c

        esp = self._mask({"ExecutorState::Process"})
        at = np.flatnonzero(esp & g_step.present & g_iter.present)
        loops_possible = bool((g_iter.int_value_at(at) != 0).any())
        if not (root_level > 0).any() and not loops_possible:
            return np.full(n, -1, dtype=np.int64), [], "no-roots"

        # By scans (_RANGES below) where the walks can: no per-node begin, end, line,
        # nesting parent or nesting CSR over every event; else those arrays.
        ranges = self._by_ranges(loops_possible)
        ts, end, line = self._node_columns(ranges)

        # The forest's edges: the nesting ones (one parent per node, most of the edges)
        # and the others (inter-thread, context groups, TF loops: collected as pairs, in
        # the order added) as arrays: a dict entry and a list per node took ~27x the file
        # in memory on a 300 MB profile.
        x_par: list[int] = []
        x_kid: list[int] = []

        def add_child(p, c):
            x_par.append(p)
            x_kid.append(c)

        # ConnectIntraThread: nesting on each line, in line order.
        parent_of, kids, first, leaf_at, leaf_parent = self._nesting(
            ranges, line, ts, end, is_async, root_level, (prod_a[0], cons_a[0], prod, cons))

        # ConnectInterThread: ExecutorState::Process -> IteratorGetNext(AsOptional)Op
        both = g_step.present & g_iter.present

        def step_iter(at):
            return zip(at.tolist(), g_step.int_or_uint_value_at(at).tolist(), g_iter.int_or_uint_value_at(at).tolist())

        parent_map = {}
        for i, st, it in step_iter(np.flatnonzero(esp & both)):
            parent_map[(st, it)] = i
        for cname in ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute"):
            for i, st, it in step_iter(np.flatnonzero(self._mask({cname}) & both)):
                p = parent_map.get((st, it))
                if p is not None:
                    add_child(p, i)

        # ConnectContextGroups
        ctx_par, ctx_kid = _context_edges(prod_a, cons_a, prod, cons, v_pid, self._plane_pid(), n)
        del prod_a, cons_a, prod, cons, v_pid

        # GroupEvents: tf.data steps, TF loops, then root events.
        at = np.flatnonzero(self._mask(_TF_DATA_FUNCS) & g_step.present)
        tf_data_steps = set(g_step.int_value_at(at).tolist())
        inter = (np.asarray(x_par, dtype=np.int64), np.asarray(x_kid, dtype=np.int64))
        x_par.clear()
        x_kid.clear()
        loop_roots = self._tf_loops(esp, g_step, g_iter, tf_data_steps, ts, add_child)
        # every edge in the order XProf adds it: inter-thread, context groups, TF loops
        xp = np.concatenate([inter[0], ctx_par, np.asarray(x_par, dtype=np.int64)])
        xk = np.concatenate([inter[1], ctx_kid, np.asarray(x_kid, dtype=np.int64)])
        x_par.clear()  # (not del: add_child closes over them, which ruff reads as F821)
        x_kid.clear()
        del inter, ctx_par, ctx_kid
        xfirst, xkids = _csr(xp, xk, total, narrow=ranges)  # (int32: read by the scans' walk alone)
        parents = _Parents(parent_of, xk, xp)
        del xp, xk
        steps: list[StepGroup] = []
        views = self._name_views()
        walk = _GroupWalk(total, kids, first, xkids, xfirst, self._lines(is_async) if ranges else None)

        def process_root(root, gid):
            walk.walk(root, gid)
            steps.append(self._step(root, gid, ts, end, line, parents, views))

        if loop_roots:
            for gid, root in enumerate(loop_roots):
                process_root(root, gid)
        else:
            roots = np.flatnonzero(root_level > 0)
            if tf_data_steps:
                roots = np.asarray([r for r in roots.tolist()
                                    if not (r < n and g_step.present[r] and g_step.int_at(r) in tf_data_steps)],
                                   dtype=np.int64)
            if len(roots):
                if not self._ascending():  # else roots, ascending, are in it
                    pos = np.empty(total, dtype=np.int64)
                    order = self.order
                    pos[order] = np.arange(len(order))
                    roots = roots[np.argsort(pos[roots], kind="stable")]  # the forest's order
                    del pos
                roots = roots[std_sort_order(-root_level[roots].astype(np.int64), ts[roots])]
            # (RootNeedsGrouping does not depend on the walks: asked first, of every root)
            walked = walk.walk_roots(self._without_root_ancestor(roots, root_level, parents))
            steps = self._steps(walked, ts, end, line, parents, views)

        group = walk.result()
        # Allocator events hung directly under their nesting parent take its group.
        if leaf_at.size:
            group[leaf_at] = group[leaf_parent]
        return group[:n], steps, "grouped"

    # -- pieces ----------------------------------------------------------------------

    def _by_ranges(self, loops_possible: bool) -> bool:
        """Whether the walks mark each nesting subtree by a scan of its line
        (``_xplane_scan.range_roots``): where the C walks are built, the lines are in
        line order (``order`` ascending), no allocator event hangs off the walk (the
        step reader's plane) and no TF loop makes its own roots (the only single-root
        walks). The same group ids as the nesting edges' walk by construction
        (tests/test_xplane_step_grouping_speed.py runs both)."""
        return (_native_walks() and hasattr(xw._native, "range_roots") and not loops_possible
                and not self.ev_kind.max(initial=0) > 0 and (self._order is None or len(self._order) == self.ev.n) and self._ascending())

    def _lines(self, is_async: np.ndarray) -> tuple:
        """The events' lines for the C scans: (line int32, line ps, offset, duration,
        is_async or None where no event is async)."""
        ev = self.ev
        return (np.ascontiguousarray(ev.line, np.int32), self.line_ts_ns * 1000, ev.offset_ps, ev.duration_ps,
                is_async if is_async[:ev.n].any() else None)

    def _node_columns(self, ranges: bool) -> tuple:
        """The forest's per-node begin, end (ps, absolute) and line: the events', then
        the threadpool regions'; as :class:`_NodeCol` (read at the nodes asked) by scans."""
        if ranges:
            return _NodeCol(self, "ts"), _NodeCol(self, "end"), _NodeCol(self, "line")
        ev, regions, n = self.ev, self.regions, self.ev.n
        total = n + len(regions.line)
        ts = np.empty(total, dtype=np.int64)
        end = np.empty(total, dtype=np.int64)  # an event's duration is end - ts (no third array)
        line = np.empty(total, dtype=np.int32)
        _event_times(ev, self.line_ts_ns, ts[:n], end[:n])
        line[:n] = ev.line
        if total > n:
            ts[n:] = regions.ts_ps
            end[n:] = regions.end_ps
            line[n:] = regions.line
        return ts, end, line

    def _nesting(self, ranges: bool, line, ts, end, is_async, root_level, contexts) -> tuple:
        """ConnectIntraThread: (each node's nesting parent, the nesting CSR's kids and
        first, allocator events hung directly under a parent and those parents). By
        scans: the parents lazily (:class:`_LazyNest`), no CSR."""
        if ranges:
            return _LazyNest(self, is_async), None, None, np.zeros(0, np.int64), np.zeros(0, np.int64)
        total = len(is_async)
        nest_parent = np.full(total, -1, dtype=np.int64)
        leaf = np.zeros(total, dtype=bool)  # allocator events hung under their parent only
        any_mem = self._nest_lines(line, ts, end, is_async, root_level, contexts, nest_parent, leaf)
        # allocator events hung directly under their nesting parent (taken by the end)
        leaf_at = np.flatnonzero(leaf & (nest_parent >= 0)) if any_mem else np.zeros(0, np.int64)
        leaf_parent = nest_parent[leaf_at]
        parent_of, kids, first = _nesting_edges(nest_parent, leaf, total)
        return parent_of, kids, first, leaf_at, leaf_parent

    def _full_nest(self, is_async: np.ndarray) -> np.ndarray:
        """Every node's nesting parent, as :meth:`_nesting` makes it on a plane without
        allocator events (the case of :meth:`_by_ranges`)."""
        ts, end, line = self._node_columns(False)
        nest_parent = np.full(len(ts), -1, dtype=np.int64)
        for seg in self._line_segments(line):
            if len(seg):
                self._nest_sequence(seg, ts, end, is_async, nest_parent, None)
        return nest_parent


    def _name_views(self) -> dict:
        """The views of the stats a group's name reads (``GetStat``: the first one); None
        for a stat no event has (a JAX profile's graph_type, iter_num: its context walks
        end at once, no view). The numbers as :class:`_Sparse` views: read at the roots
        and their ancestors only, where a ``StatView`` made an int32 array over every
        event (13 k fresh pages for ``step_num`` on the 308 MB profile,
        docs/performance.md); graph_type, whose strings only ``StatView`` reads, stays one."""
        ev = self.ev
        views = {"graph_type": xw.StatView(ev, "graph_type", last=False) if xw.has_stat(ev, "graph_type") else None}
        for s in ("iter_num", "step_num"):
            views[s] = _Sparse(xw.kind_stats(ev, s), last=False) if xw.has_stat(ev, s) else None
        return views

    def _ascending(self) -> bool:
        """Whether the forest's order is ascending node ids (as threadpool_regions gives it)."""
        if self._order is None:
            return True
        if not hasattr(self, "_asc"):
            o = self.order
            self._asc = bool((o[1:] > o[:-1]).all())
        return self._asc

    def _line_segments(self, line: np.ndarray) -> list:
        """The forest's order cut where the line changes: each line's nodes in order (the
        order being every event ascending, the lines' own array, no gathered copy)."""
        order, n = self.order, self.ev.n
        same = len(order) == n and (n == 0 or (order[0] == 0 and order[-1] == n - 1 and self._ascending()))
        lines = line[:n] if same else line[order]
        return np.split(order, np.flatnonzero(lines[1:] != lines[:-1]) + 1)

    def _read_once(self, name: str) -> "_Sparse":
        """A stat's ``ForEachStat`` value (the last one) at the events that have it."""
        view = _Sparse(xw.kind_stats(self.ev, name))
        if self.let_go:
            self.ev.kinds.pop(xw._KIND[name], None)
        return view

    def _plane_pid(self):
        """The plane's ``process_id`` stat (int32), the pid of events without ``_pid``; None without."""
        for s in self.meta.stats:
            if self.stat_names.get(s.metadata_id) == "process_id":
                return _int32(s.int64_value if s.WhichOneof("value") == "int64_value" else 0)
        return None

    def _mutate_contexts(self, prod, cons):
        """XProf's XplaneConnectedEventMutatorFactory instances (preprocess_xplane.cc)."""
        names = set(self.event_names.values())
        stat_names = set(self.stat_names.values())
        ev = self.ev

        def connect(producer, consumer, ctype, unique, stats, key_of=None):
            if not all(s in stat_names for s in stats):
                return
            views = [xw.StatView(ev, s, last=False) for s in stats]
            tag = () if unique else (producer, consumer)
            for ename, store in ((producer, prod), (consumer, cons)):
                if ename not in names:
                    continue
                mask = self._mask({ename})
                for v in views:
                    mask &= v.present
                vals = [v.int_or_uint_value() for v in views]
                for i in np.flatnonzero(mask).tolist():
                    key = tuple(int(x[i]) for x in vals)
                    if key_of is not None:
                        key = key_of(i, key)
                    store[i] = (ctype, (tag, key))

        connect("ExecutorState::Process", "TpuExecuteOp", _CT_LEGACY, False, ("id", "iter_num"))
        for c in QUEUE_CONSUMERS:
            connect("EnqueueRequestLocked", c, _CT_TPU_STREAM, True, ("request_id", "queue_addr"))
        # run_id is first masked to 27 bits (HostRunIdMutator); core_type defaults to 0
        # (their views made at the first launch event: a profile without one, as JAX's
        # CPU profiles, pays no whole-profile view for them)
        def launch_key(i, key):
            core = xw.StatView(ev, "core_type", last=False)
            run = xw.StatView(ev, "run_id", last=False)
            at = np.asarray([i])
            return (key[0], key[1], run.int_at(i) & _RUN_ID_MASK,
                    int(core.int_or_uint_value_at(at)[0]) if core.present[i] else 0)

        connect("DoEnqueueProgram", "CompleteCallbacks", _CT_TPU_LAUNCH, True,
                ("device_ordinal", "queue_id", "run_id"), launch_key)

    def _nest_lines(self, line, ts, end, is_async, root_level, contexts, nest_parent, leaf) -> bool:
        """ConnectIntraThread on every line (``contexts``: the producer and consumer nodes,
        plain and mutated); whether the plane has allocator events. Without them (the step
        reader: ev_kind all 0) a line is the stack walk alone, as _nest_line does then: no
        ``mem``/``special``/``below``, four whole-profile temporaries fewer (~90 MB, 13 k
        fresh pages on the 308 MB profile)."""
        if not self.ev_kind.max(initial=0) > 0:  # (as mem below: kinds > 0 are allocator events)
            for seg in self._line_segments(line):
                if len(seg):
                    self._nest_sequence(seg, ts, end, is_async, nest_parent, None)
            return False
        total = len(line)
        mem = np.zeros(total, dtype=bool)
        mem[:self.ev.n] = self.ev_kind > 0
        special = np.zeros(total, dtype=bool)
        for nodes in contexts:
            special[nodes if isinstance(nodes, np.ndarray) else list(nodes)] = True
        special |= root_level > 0
        below = np.full(total, -1, dtype=np.int64)  # to hang allocator events
        for seg in self._line_segments(line):
            if len(seg):
                self._nest_line(seg, ts, end, is_async, mem, special, nest_parent, below, leaf)
        return True

    def _nest_line(self, seg, ts, end, is_async, mem, special, nest_parent, below, leaf):
        """ConnectIntraThread for one line (``seg``: node ids in line order)."""
        seg_mem = mem[seg]
        mem_ids = seg[seg_mem]
        if not mem_ids.size:  # no allocator event (the step reader's case): the walk alone
            self._nest_sequence(seg, ts, end, is_async, nest_parent, below)
            return
        fast = (len(seg) < 2 or bool((np.diff(ts[seg]) >= 0).all())) and not special[mem_ids].any() \
            and not (end[mem_ids] != ts[mem_ids]).any()
        if not fast or not mem_ids.size:
            self._nest_sequence(seg, ts, end, is_async, nest_parent, below)
            return
        # Allocator events are instants on a time-ordered line: whatever they pop, a later
        # event would pop too, and whatever nests under one of them nests under its parent
        # (same group). So nest the other events, then hang each allocator event under the
        # innermost open event that contains it.
        self._nest_sequence(seg[~seg_mem], ts, end, is_async, nest_parent, below)
        mpos = np.flatnonzero(seg_mem)
        opener = np.where(~seg_mem & ~is_async[seg], np.arange(len(seg)), -1)
        opener = np.maximum.accumulate(opener)[mpos]
        cand = np.where(opener >= 0, seg[np.maximum(opener, 0)], -1)
        t = ts[seg[mpos]]
        active = np.flatnonzero(cand >= 0)
        while active.size:
            c = cand[active]
            ok = (ts[c] <= t[active]) & (end[c] >= t[active])
            done = active[ok]
            nest_parent[seg[mpos[done]]] = c[ok]
            rest = active[~ok]
            cand[rest] = below[cand[rest]]
            active = rest[cand[rest] >= 0]
        leaf[mem_ids] = True

    @staticmethod
    def _nest_sequence(seg, ts, end, is_async, nest_parent, below):
        """The exact stack walk of ConnectIntraThread; records the node under each (in C
        where the extension is built: this loop over every event was most of a CPU
        profile's grouping; the Python below is its twin for PROFSCOPE_NATIVE=0)."""
        if _native_walks():
            if below is None and not hasattr(xw._native, "nest_children"):  # built before below=None
                below = np.full(len(ts), -1, dtype=np.int64)
            xw._native.nest_sequence(np.ascontiguousarray(seg, dtype=np.int64), ts, end, is_async, nest_parent, below)
            return
        stack: list[int] = []
        ids = seg.tolist()
        ts_l = ts[seg].tolist()
        end_l = end[seg].tolist()
        asy = is_async[seg].tolist()
        sb: list[int] = []
        se: list[int] = []
        parent_out = []
        below_out = []
        for k, i in enumerate(ids):
            if asy[k]:
                continue
            b, e = ts_l[k], end_l[k]
            while stack:
                if sb[-1] <= b and e <= se[-1]:
                    parent_out.append((i, stack[-1]))
                    break
                stack.pop()
                sb.pop()
                se.pop()
            below_out.append((i, stack[-1] if stack else -1))
            stack.append(i)
            sb.append(b)
            se.append(e)
        if parent_out:
            a = np.asarray(parent_out, dtype=np.int64)
            nest_parent[a[:, 0]] = a[:, 1]
        if below_out and below is not None:
            a = np.asarray(below_out, dtype=np.int64)
            below[a[:, 0]] = a[:, 1]

    def _tf_loops(self, esp, g_step, g_iter, tf_data_steps, ts, add_child):
        """ProcessTensorFlowLoop: one root per iteration of a TF while loop."""
        both = esp & g_step.present & g_iter.present
        if not both.any():
            return []
        steps = g_step.int_value()
        iters = g_iter.int_value()
        loops: dict[int, dict[int, list[int]]] = {}
        for i in self.order[both[np.minimum(self.order, self.ev.n - 1)] & (self.order < self.ev.n)].tolist():
            s = int(steps[i])
            if s in tf_data_steps:
                continue
            loops.setdefault(s, {}).setdefault(int(iters[i]), []).append(i)
        iterations = []
        for loop in loops.values():
            if len(loop) == 1 and 0 in loop:
                continue
            for events in loop.values():
                first = events[0]
                for e in events:
                    if ts[e] < ts[first]:
                        first = e
                iterations.append((first, events))
        if not iterations:
            return []
        firsts = np.asarray([f for f, _ in iterations], dtype=np.int64)
        roots = []
        for k in std_sort_order(ts[firsts]).tolist():
            first, events = iterations[k]
            roots.append(first)
            for e in events:
                if e != first:
                    add_child(first, e)
        return roots

    @staticmethod
    def _without_root_ancestor(roots: np.ndarray, root_level, parents) -> np.ndarray:
        """The roots, in order, less those with a root ancestor of their level; a root
        without any parent (most: a step's outermost event) has none, unasked."""
        if not len(roots):
            return roots
        ask = (parents.nest[roots] >= 0) | parents.has_other(roots)
        drop = np.zeros(len(roots), bool)
        for k in np.flatnonzero(ask).tolist():
            drop[k] = Grouping._has_root_ancestor(int(roots[k]), root_level, parents)
        return roots[~drop]

    def _steps(self, walked: list[int], ts, end, line, parents, views) -> list[StepGroup]:
        """:meth:`_step` of each walked root (group id = position), as arrays where each
        name stat is the root's own or no view has it or the root has no parent (its
        context walk ends at the root): the 44,000 roots of a 300 MB profile."""
        ev, n = self.ev, self.ev.n
        r = np.asarray(walked, dtype=np.int64)
        if not len(r):
            return []
        own = r < n
        rn = np.where(own, r, 0)
        orphan = own & (parents.nest[r] < 0) & ~parents.has_other(r)
        here = {k: (v.present[rn] & own if v is not None else np.zeros(len(r), bool)) for k, v in views.items()}
        fast = own.copy()
        for k, v in views.items():
            if v is not None:
                fast &= here[k] | orphan
        gt, it, sn = views["graph_type"], views["iter_num"], views["step_num"]
        gt_name = np.zeros(len(r), np.int64)
        if gt is not None and here["graph_type"].any():
            at = np.flatnonzero(here["graph_type"] & fast)
            gt_name[at] = gt.str_or_ref(self.strings, r[at])
        step_num = np.arange(len(r), dtype=np.int64)  # the group id, without iter_num/step_num
        for key, v in (("step_num", sn), ("iter_num", it)):  # iter_num first: it wins
            if v is not None:
                at = np.flatnonzero(here[key] & fast)
                step_num[at] = v.int_value_at(r[at])
        li = line[r]
        off = ts[r] - self.line_ts_ns[li] * 1000
        span = end[r] - ts[r]
        table, names, heads = self.strings.table, self.event_names, self.headers
        out = []
        for k, (root, ok, g_ix, mid, num, lk, o, d) in enumerate(zip(
                r.tolist(), fast.tolist(), gt_name.tolist(), ev.metadata_id[rn].tolist(), step_num.tolist(),
                li.tolist(), off.tolist(), span.tolist())):
            if not ok:
                out.append(self._step(root, k, ts, end, line, parents, views))
                continue
            if gt is not None and here["graph_type"][k]:
                name = table[g_ix] + " "
            else:
                ename = names.get(mid, "")
                name = "" if ename in _IMPLICIT_ROOTS else ename + " "
            out.append(StepGroup(k, f"{name}{num}", o, o + d, heads[lk].name))
        return out

    @staticmethod
    def _has_root_ancestor(r, root_level, parents) -> bool:
        """Not RootNeedsGrouping: an ancestor is a root of the same level."""
        level = root_level[r]
        queue = list(parents.get(r, ()))
        seen = {r, *queue}
        k = 0
        while k < len(queue):
            node = queue[k]
            k += 1
            if root_level[node] > 0 and root_level[node] == level:
                return True
            for p in parents.get(node, ()):
                if p not in seen:
                    seen.add(p)
                    queue.append(p)
        return False

    def _context_stat(self, node, view, parents):
        """EventNode::GetContextStat: the node, or its nearest ancestor, with the stat."""
        n = self.ev.n
        if view is None:  # no event has the stat (a JAX profile's graph_type, iter_num)
            return None
        queue = [node]
        seen = {node}
        k = 0
        while k < len(queue):
            x = queue[k]
            k += 1
            if x < n and view.present[x]:
                return x
            for p in parents.get(x, ()):
                if p not in seen:
                    seen.add(p)
                    queue.append(p)
        return None

    def _step(self, root, gid, ts, end, line, parents, views) -> StepGroup:
        """The group's name as EventNode::GetGroupName makes it, and the root's span."""
        ev = self.ev
        n = ev.n
        name = ""
        gt = views["graph_type"]
        x = self._context_stat(root, gt, parents)
        if x is not None:
            name = self.strings.table[int(gt.str_or_ref(self.strings, np.asarray([x]))[0])] + " "
        else:
            ename = self.event_names.get(int(ev.metadata_id[root]), "") if root < n else "ThreadpoolListener::Region"
            if ename not in _IMPLICIT_ROOTS:
                name = ename + " "
        step_num = gid
        it = views["iter_num"]
        x = self._context_stat(root, it, parents)
        if x is not None:
            step_num = it.int_at(x)
        else:
            sn = views["step_num"]
            x = self._context_stat(root, sn, parents)
            if x is not None:
                step_num = sn.int_at(x)
        li = int(line[root])
        off = int(ts[root] - self.line_ts_ns[li] * 1000)
        return StepGroup(gid, f"{name}{step_num}", off, off + int(end[root] - ts[root]), self.headers[li].name)
