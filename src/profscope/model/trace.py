"""Trace events as columns: what the xplane and Chrome-trace readers hand to the trace viewer.

One row per slice (a complete event: start and duration, on one track), numpy columns, so
millions of events never become millions of Python objects. Names are indices into a
string table. The arguments of an event are not decoded here: each row points at its
bytes in :attr:`TraceEvents.blob` (buffers read one after the other) (``args_off``/``args_len``), which are either the raw
``XEvent`` message (``args_kind == "xevent"``, decoded only when one event's details are
asked for, with its plane's metadata) or the event's ``args`` object as JSON
(``args_kind == "json"``, Chrome traces).

Times are integer picoseconds relative to :attr:`TraceEvents.base_ps` (a Python int, so an
absolute epoch time in ps does not have to fit an int64).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Track:
    """One row group of the timeline: a thread / XLine (``slices``) or a counter series."""

    pid: int
    tid: int
    name: str
    sort_index: int
    kind: str = "slices"  # or "counter"
    plane: int = -1  # xplane: index into TraceEvents.planes (for decoding args)


@dataclass(slots=True)
class Process:
    pid: int
    name: str
    sort_index: int


@dataclass(slots=True)
class Counter:
    """One counter series (allocator bytes in use, a Chrome ``C`` event's key, an xplane
    ``_counters_`` line's series)."""

    track: int
    name: str
    unit: str
    t_ps: np.ndarray  # int64, relative to base_ps, sorted
    value: np.ndarray  # float64
    # an xplane ``_counters_`` series, which XProf's trace_viewer@ answers too: the name
    # of the stat holding its values (XProf's ``event_stats``) and whether that stat is an
    # integer (XProf then prints integers); "" for the series XProf does not show
    stat: str = ""
    integer: bool = False


@dataclass(slots=True)
class TraceEvents:
    path: str
    hostname: str
    base_ps: int
    track: np.ndarray  # int32 -> tracks
    start_ps: np.ndarray  # int64, relative to base_ps
    dur_ps: np.ndarray  # int64 >= 0
    name: np.ndarray  # int32 -> names
    args_off: np.ndarray  # int64 into blob
    args_len: np.ndarray  # int32
    blob: list  # byte buffers; args_off counts from the start of the first one
    args_kind: str  # "xevent" | "json"
    names: list[str] = field(default_factory=list)
    tracks: list[Track] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    counters: list[Counter] = field(default_factory=list)
    steps: list[tuple[str, int, int]] = field(default_factory=list)  # (name, start_ps, dur_ps)
    # xplane: per plane the serialized XPlane without its lines (metadata and stats)
    planes: list[bytes] = field(default_factory=list)
    # arrows: (name, from track, from ps, to track, to ps), Chrome-trace flow events
    flows: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    # events bound to a flow (xplane ``flow`` stats, XProf's FlowV2): see :class:`FlowEvents`
    flow_events: FlowEvents | None = None
    # Chrome-trace flow points, paired into flows, for the index to bind to slices: see
    # :class:`FlowPoints`
    flow_points: FlowPoints | None = None
    # xplane, CPU-only, read with ``steps=True`` (Steps & ops' index build): XProf's host
    # steps, grouped from the plane the build read (formats/xplane_trace.py;
    # ``{"hostname", "first_ps", "steps"}``, kept in the index folder)
    host_steps: dict | None = None

    def __len__(self) -> int:
        return int(self.start_ps.shape[0])

    @classmethod
    def without_events(cls, path: str, hostname: str, base_ps: int, args_kind: str, **tables) -> TraceEvents:
        """The tables of a trace whose event columns went to a sink (or are filled later)."""
        return cls(path=path, hostname=hostname, base_ps=base_ps, track=np.zeros(0, np.int32),
                   start_ps=np.zeros(0, np.int64), dur_ps=np.zeros(0, np.int64), name=np.zeros(0, np.int32),
                   args_off=np.zeros(0, np.int64), args_len=np.zeros(0, np.int32), blob=[],
                   args_kind=args_kind, **tables)


FLOW_START, FLOW_MID, FLOW_END = 1, 2, 3  # XProf's TraceEvent.FlowEntryType (FLOW_NONE is 0)


@dataclass(slots=True)
class FlowEvents:
    """Slices that belong to a flow, as XProf binds them (``bind_id`` with ``flow_out``
    on the first, ``flow_in`` on the last, both on a middle one): one row per such slice.

    ``seq`` is the slice's position in the order the reader handed slices to its sink
    (0 for the first slice of the first ``events`` chunk), so a reader can name a slice
    before the index has sorted anything.
    """

    seq: np.ndarray  # int64
    flow_id: np.ndarray  # uint64, XFlow id (the ``bind_id``)
    kind: np.ndarray  # int8: FLOW_START, FLOW_MID or FLOW_END
    category: np.ndarray  # int32 into the name table (XProf's ``cat``), -1 for none

    @classmethod
    def empty(cls) -> FlowEvents:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int8), np.zeros(0, np.int32))

    @classmethod
    def concat(cls, parts: list[FlowEvents]) -> FlowEvents:
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("seq", "flow_id", "kind", "category")))


@dataclass(slots=True)
class FlowPoints:
    """A Chrome trace's flow events (``s`` start, ``t`` step, ``f`` end), paired into flows
    by the reader but not yet bound to slices: the index binds each point to a slice of its
    track once every slice is known (a Chrome trace may write them in any order; kineto
    writes a CPU->GPU flow's ``f`` before its ``s``), as Catapult's importer does: ``s``
    and ``t`` to the slice that encloses them, ``f`` to the enclosing one with binding
    point ``"bp": "e"``, else to the next slice that starts at or after it. The bound
    slices are then :class:`FlowEvents`, XProf's FlowV2 form.
    """

    flow: np.ndarray  # int64: the flow's number, 1, 2, ... in the trace (XProf's ``bind_id``)
    track: np.ndarray  # int32 -> tracks
    ts_ps: np.ndarray  # int64, relative to base_ps
    kind: np.ndarray  # int8: FLOW_START (the flow's first point), FLOW_MID or FLOW_END (its last)
    enclosing: np.ndarray  # bool: bound to the enclosing slice, else to the next one
    category: np.ndarray  # int32 into the name table (the event's ``cat``), -1 for none

    def __len__(self) -> int:
        return int(self.flow.shape[0])


class NameTable:
    """A string table built while reading (index per distinct string)."""

    __slots__ = ("index", "names")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.names)
            self.names.append(s)
        return i


class MemorySink:
    """Collects event column chunks and argument buffers in memory (the readers' default
    sink; the trace viewer's index writer is the other, writing them to disk)."""

    def __init__(self) -> None:
        self.track: list[np.ndarray] = []
        self.start: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.name: list[np.ndarray] = []
        self.off: list[np.ndarray] = []
        self.len: list[np.ndarray] = []
        self.blobs: list = []
        self.flows: list[FlowEvents] = []

    def events(self, track, start, dur, name, off, length) -> None:
        self.track.append(np.asarray(track, np.int32))
        self.start.append(np.asarray(start, np.int64))
        self.dur.append(np.asarray(dur, np.int64))
        self.name.append(np.asarray(name, np.int32))
        self.off.append(np.asarray(off, np.int64))
        self.len.append(np.asarray(length, np.int32))

    def blob(self, buf, source_offset: int | None = None) -> None:
        self.blobs.append(buf)  # kept: an in-memory trace has no source file to read back

    def flow_events(self, seq, flow_id, kind, category) -> None:
        """Slices bound to flows (see :class:`FlowEvents`; ``seq`` counts the slices
        handed to :meth:`events` so far, from 0)."""
        self.flows.append(FlowEvents(np.asarray(seq, np.int64), np.asarray(flow_id, np.uint64),
                                     np.asarray(kind, np.int8), np.asarray(category, np.int32)))

    def fill(self, ev: TraceEvents) -> None:
        def cat(chunks, dtype):
            return np.concatenate(chunks) if chunks else np.zeros(0, dtype)

        ev.track, ev.start_ps, ev.dur_ps = cat(self.track, np.int32), cat(self.start, np.int64), cat(self.dur, np.int64)
        ev.name, ev.args_off, ev.args_len = cat(self.name, np.int32), cat(self.off, np.int64), cat(self.len, np.int32)
        ev.blob = self.blobs
        if self.flows:
            ev.flow_events = FlowEvents.concat(self.flows)
