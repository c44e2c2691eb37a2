"""One XSpace from several recordings of the same host taken back to back: what the
capture ring (app/capture_ring.py) saves as "the last N seconds".

Each recording is a whole XSpace of its own, so its ids are its own: the event and stat
metadata ids are interned per plane in the order the recording met them (tsl's
XPlaneBuilder), and a line's events are offsets (``offset_ps``) from that line's own
``timestamp_ns``. Merging therefore

- matches planes by name and lines by ``(id, name)`` (a host line's id is its thread id,
  the same in every recording of the job);
- re-keys metadata: a stat metadata is the same when its name and description are, an
  event metadata when its name, display name and ``metadata`` bytes are (XPlaneBuilder
  interns event metadata by name, so this is one per name as in a single recording); every
  ``metadata_id``, a stat's ``ref_value`` (an interned string: a stat metadata id) and an
  event metadata's ``child_id`` are rewritten to the merged plane's ids;
- re-bases times: a recording's line ``timestamp_ns`` is relative to its own session's
  start (tsl's PostProcessSingleHostXSpace normalises every plane to the Task Environment
  plane's ``profile_start_time``), so a line of recording i starts at ``start_i +
  timestamp_ns``; the merged file is normalised to the start of the window it holds, each
  merged line starting at the earliest of its lines and each event's offset moved by the
  difference, so every event keeps its wall-clock time;
- drops events that start before ``since_ns`` (as a recording started at ``since_ns``
  would not hold them);
- sets the 'Task Environment' plane's ``profile_start_time`` / ``profile_stop_time``
  (tsl's kEnvProfileStartTime/StopTime: the session's wall-clock bounds, which readers
  take as the profile's window) to the window held.

A plane that has no lines (``/host:metadata``: the modules' HLO protos as event metadata
stats) merges through its metadata alone: a module two recordings both hold is kept once.
"""

from __future__ import annotations

from dataclasses import dataclass

from profscope.formats.protos import xplane_pb2
from profscope.formats.protowire import decode_varint

__all__ = ["TASK_ENVIRONMENT", "Window", "merge_xspaces", "recording_window"]

TASK_ENVIRONMENT = "Task Environment"
_START, _STOP = "profile_start_time", "profile_stop_time"


@dataclass(frozen=True)
class Window:
    """A recording's wall-clock bounds, from its Task Environment plane (ns since the epoch)."""

    start_ns: int
    stop_ns: int


def _env_stats(plane: xplane_pb2.XPlane) -> dict[str, int]:
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    return {names.get(s.metadata_id, ""): s.uint64_value or s.int64_value for s in plane.stats
            if s.WhichOneof("value") in ("uint64_value", "int64_value")}


def recording_window(xspace: bytes | memoryview) -> Window | None:
    """The window one recording covers, or None when its Task Environment plane does not
    say (an older profiler server). Parses the small planes only: the recording's big ones
    are skipped over by their length prefix."""
    data = bytes(xspace)
    pos, end = 0, len(data)
    while pos < end:
        key, pos = decode_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire != 2:
            return None  # XSpace's fields are all length-delimited
        length, pos = decode_varint(data, pos)
        if number == 1 and length < (1 << 20) and TASK_ENVIRONMENT.encode() in data[pos:pos + length]:
            plane = xplane_pb2.XPlane.FromString(data[pos:pos + length])
            if plane.name == TASK_ENVIRONMENT:
                env = _env_stats(plane)
                if env.get(_START) and env.get(_STOP):
                    return Window(env[_START], env[_STOP])
        pos += length
    return None


class _PlaneMerger:
    """The merged plane and its metadata tables, keyed by content."""

    def __init__(self, first: xplane_pb2.XPlane, out: xplane_pb2.XPlane):
        self.out = out
        out.id, out.name = first.id, first.name
        self.stat_ids: dict[tuple[str, str], int] = {}
        self.event_ids: dict[tuple[str, str, bytes], int] = {}
        self.lines: dict[tuple[int, str], xplane_pb2.XLine] = {}
        self.stat_names: set[int] = set()

    def _stat_map(self, plane: xplane_pb2.XPlane) -> dict[int, int]:
        out = {}
        for old, m in plane.stat_metadata.items():
            key = (m.name, m.description)
            new = self.stat_ids.get(key)
            if new is None:
                new = self.stat_ids[key] = len(self.stat_ids) + 1
                self.out.stat_metadata[new].CopyFrom(m)
                self.out.stat_metadata[new].id = new
            out[old] = new
        return out

    @staticmethod
    def _restat(stats, smap: dict[int, int]) -> None:
        for st in stats:
            st.metadata_id = smap.get(st.metadata_id, st.metadata_id)
            if st.WhichOneof("value") == "ref_value":
                st.ref_value = smap.get(st.ref_value, st.ref_value)

    def _event_map(self, plane: xplane_pb2.XPlane, smap: dict[int, int]) -> dict[int, int]:
        out, added = {}, []
        for old, m in plane.event_metadata.items():
            key = (m.name, m.display_name, bytes(m.metadata))
            new = self.event_ids.get(key)
            if new is None:
                new = self.event_ids[key] = len(self.event_ids) + 1
                added.append((new, m))
            out[old] = new
        for new, m in added:  # child ids name other metadata of the same plane: mapped once all are known
            meta = self.out.event_metadata[new]
            meta.CopyFrom(m)
            meta.id = new
            self._restat(meta.stats, smap)
            meta.child_id[:] = [out.get(c, c) for c in m.child_id]
        return out

    def add(self, plane: xplane_pb2.XPlane, start_ns: int, base_ns: int, since_ns: int | None) -> None:
        """Add one recording's plane; its lines' times are relative to ``start_ns`` (its
        session's start), the merged plane's to ``base_ns``."""
        smap = self._stat_map(plane)
        emap = self._event_map(plane, smap)
        self._plane_stats(plane, smap)
        for line in plane.lines:
            self._add_line(line, smap, emap, start_ns + line.timestamp_ns - base_ns,
                           None if since_ns is None else since_ns - start_ns - line.timestamp_ns)

    def _plane_stats(self, plane: xplane_pb2.XPlane, smap: dict[int, int]) -> None:
        """A plane stat is kept from the first recording that has it (a device's
        properties are the same in each); the Task Environment's window is set at the end."""
        for st in plane.stats:
            new = smap.get(st.metadata_id, st.metadata_id)
            if new in self.stat_names:
                continue
            self.stat_names.add(new)
            copy = self.out.stats.add()
            copy.CopyFrom(st)
            self._restat([copy], smap)

    def _add_line(self, line: xplane_pb2.XLine, smap, emap, at_ns: int, cut_ns: int | None) -> None:
        """``at_ns``: where ``line`` starts from the merged plane's base; its events that
        start before ``cut_ns`` from its own start are dropped."""
        key = (line.id, line.name)
        merged = self.lines.get(key)
        begin = max(0, at_ns)  # no event kept starts before the base (base >= since, and >= every start)
        if merged is None:
            merged = self.lines[key] = self.out.lines.add()
            merged.id, merged.display_id, merged.name, merged.display_name = (line.id, line.display_id, line.name,
                                                                              line.display_name)
            merged.timestamp_ns = begin
        elif begin < merged.timestamp_ns:
            shift = (merged.timestamp_ns - begin) * 1000
            for ev in merged.events:
                if ev.WhichOneof("data") != "num_occurrences":
                    ev.offset_ps += shift
            merged.duration_ps += shift
            merged.timestamp_ns = begin
        delta = (at_ns - merged.timestamp_ns) * 1000
        cut = None if cut_ns is None else max(0, cut_ns, -at_ns) * 1000
        first = len(merged.events)
        merged.events.extend(ev for ev in line.events
                             if cut is None or ev.WhichOneof("data") == "num_occurrences" or ev.offset_ps >= cut)
        for ev in merged.events[first:]:
            ev.metadata_id = emap.get(ev.metadata_id, ev.metadata_id)
            if delta and ev.WhichOneof("data") != "num_occurrences":
                ev.offset_ps += delta
            if ev.stats:
                self._restat(ev.stats, smap)
        end = max((ev.offset_ps + ev.duration_ps for ev in merged.events[first:]), default=0)
        merged.duration_ps = max(merged.duration_ps, end)

    def set_window(self, window: Window) -> None:
        """The Task Environment's profile_start_time/stop_time become the window held."""
        for name, value in ((_START, window.start_ns), (_STOP, window.stop_ns)):
            sid = self.stat_ids.get((name, ""))
            if sid is None:
                sid = self.stat_ids[(name, "")] = len(self.stat_ids) + 1
                self.out.stat_metadata[sid].id, self.out.stat_metadata[sid].name = sid, name
            for st in self.out.stats:
                if st.metadata_id == sid:
                    st.uint64_value = value
                    break
            else:
                self.out.stats.add(metadata_id=sid, uint64_value=value)


def merge_xspaces(recordings: list[bytes | memoryview], *, since_ns: int | None = None) -> tuple[bytes, Window | None]:
    """One serialised XSpace holding ``recordings`` (oldest first, one host's), events that
    start before ``since_ns`` dropped, and the window it holds (None when the recordings'
    Task Environment planes do not say when they ran: then their times are kept as they are)."""
    spaces = [xplane_pb2.XSpace.FromString(bytes(r)) for r in recordings]
    windows = [_space_window(s) for s in spaces]
    window = None
    if windows and all(windows):
        window = Window(max(windows[0].start_ns, since_ns or 0), windows[-1].stop_ns)
    base = window.start_ns if window else 0
    out = xplane_pb2.XSpace()
    planes: dict[str, _PlaneMerger] = {}
    for space, w in zip(spaces, windows):
        for plane in space.planes:
            merger = planes.get(plane.name)
            if merger is None:
                merger = planes[plane.name] = _PlaneMerger(plane, out.planes.add())
            merger.add(plane, w.start_ns if window else 0, base, since_ns if window else None)
        for field in ("errors", "warnings", "hostnames"):
            have = getattr(out, field)
            have.extend(v for v in getattr(space, field) if v not in have)
    if window is not None and TASK_ENVIRONMENT in planes:
        planes[TASK_ENVIRONMENT].set_window(window)
    return out.SerializeToString(), window


def _space_window(space: xplane_pb2.XSpace) -> Window | None:
    for plane in space.planes:
        if plane.name == TASK_ENVIRONMENT:
            env = _env_stats(plane)
            if env.get(_START) and env.get(_STOP):
                return Window(env[_START], env[_STOP])
    return None
