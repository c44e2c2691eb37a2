"""The trace viewer's views: the selected hosts of a run on one timeline
(:class:`TraceView`) and what the timeline page asks of it: a window at a resolution,
one event's details, search by name. XProf's own JSON is tools/trace_xprof.py, the
Chrome-trace export tools/trace_export.py; both read a :class:`TraceView`. The rows come
from each host's index (tools/trace_index.py).

Every parameter arrives typed (the server parses them: server/params.py): times in
milliseconds (floats) from the origin of the selected hosts, a resolution in pixels, an
event id, a search text and a limit. What needs the data is checked here: a window that
ends before it starts, an event id no selected host has.

Times in the payloads of profscope's API are milliseconds from the origin of the
selected hosts; XProf's own JSON keeps XProf's units (µs ``ts``/``dur``, ms
``fullTimespan``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import orjson

from profscope.errors import BadRequest, NotFound
from profscope.model import npy_files as npy
from profscope.tools import step_breakdown
from profscope.tools.trace_index import MODULE_ID, TraceIndex

MAX_FLOWS = 5000  # arrows per window
HOST_ID_SHIFT = 40  # event id = host position << 40 | row (< 2^53 with < 8192 hosts)
TRACK_ID_SHIFT = 20  # track id = host position << 20 | track
DEFAULT_RESOLUTION = 1000
DEFAULT_SEARCH_LIMIT = 50
PS_PER_MS = 10**9
# A child may end a hair after its parent: Chrome traces' µs floats near 5e12 µs (epoch
# clocks) are only exact to ~1 ns, so nested ends that were equal come out a ps or so apart.
NEST_SLACK_PS = 4000


# Kineto's "[memory]" instant events carry "Device Id": -1 for the host (CPU) allocator
# (torch/csrc/profiler: the CPU device has index -1); chrome_trace.py names their counters
# "memory allocated (device -1)", kept as is for XProf's API.
_HOST_DEVICE = " (device -1)"


def display_name(name: str, what: str, ident: int) -> str:
    """A process's or track's name as this page shows it: the CPU for Kineto's device -1,
    and for a name left empty by the trace (chrome_trace.py names a nameless one
    "process <pid>" / "thread <tid>", which reads "process " when the pid was the empty
    string, as Kineto's global "Record Window End" instant has) "pid <n>" / "tid <n>", or
    "no pid" / "no tid" when the trace gave none."""
    name = str(name or "")
    if name.endswith(_HOST_DEVICE):
        return name[: -len(_HOST_DEVICE)] + " (Host CPU)"
    bare = name.strip()
    if not bare:
        return f"{'pid' if what == 'process' else 'tid'} {ident}"
    if bare == what:  # "process " / "thread ": the id itself was empty
        return f"no {'pid' if what == 'process' else 'tid'}"
    return name


def kineto_device_pids(ix: TraceIndex) -> set[int]:
    """The processes of a torch.profiler (Kineto) trace that are a GPU: Kineto writes a
    device's kernels and copies as pid = the device index, tid = the stream, threads named
    "stream <n>", under the host program's process_name (so the CPU and every GPU all read
    "python"; its process_labels "GPU <n>" are not kept by the reader)."""
    by_pid: dict[int, list[str]] = {}
    for t in ix.tracks:
        if t["kind"] == "slices":
            by_pid.setdefault(t["pid"], []).append(str(t["name"]).removeprefix("thread ").strip())
    return {pid for pid, names in by_pid.items()
            if 0 <= pid < 64 and names and all(n.startswith("stream ") for n in names)}


def zero_counter_tracks(ix: TraceIndex) -> frozenset[int]:
    """The tracks of the memory counters whose every value is zero (Kineto's "memory
    reserved" of the host, which has no caching allocator): rows that would only draw a
    flat line. Only byte counters: a measurement that read 0 (a TPU unit's "% util" that
    was idle, often a single sample) is shown. Read once per index (the values are
    memory-mapped) and kept on it."""
    got = getattr(ix, "_zero_counter_tracks", None)
    if got is None:
        zero = set()
        for i, c in enumerate(ix.meta["counters"]):
            if c.get("unit") != "bytes":
                continue
            v = npy.load(ix.folder / f"counter_{i}_v.npy", mmap_mode="r")
            if not np.any(v):
                zero.add(c["track"])
        got = ix._zero_counter_tracks = frozenset(zero)
    return got


def name_codes(name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(name, return_inverse=True)`` for a window's name ids (an index's
    name table ids: small, dense integers): the ids present found by counting them, not
    by sorting the window's ~90,000 of them (a 1 % window of jax308 at 8000 px: 0.2 ms
    against 1.9). Ids spread over more than a few times the window's size (a table of
    millions of names) take the sort."""
    if not len(name) or int(name.min()) < 0 or int(name.max()) >= 4 * len(name) + (1 << 16):
        return np.unique(name, return_inverse=True)
    uniq = np.flatnonzero(np.bincount(name))
    code = np.empty(int(uniq[-1]) + 1, np.int64)
    code[uniq] = np.arange(len(uniq))
    return uniq, code[name]


_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # TraceIndex -> (start, end) arrays


def steps_in(ix: TraceIndex, s: int, e: int) -> list:
    """The index's steps (``meta["steps"]``: name, start, duration in ps) overlapping
    [s, e): ``start < e and end > s``, in their order. A CPU JAX profile can hold tens
    of thousands (jax308: 44,000, a Python test each cost ~2.5 ms per window); their
    starts and ends are made arrays once per index."""
    steps = ix.meta["steps"]
    got = _STEPS.get(ix)
    if got is None:
        st = np.asarray([x[1] for x in steps], np.int64)
        got = _STEPS[ix] = (st, st + np.asarray([x[2] for x in steps], np.int64))
    st, end = got
    return [steps[i] for i in np.flatnonzero((st < e) & (end > s)).tolist()]


# ---------------------------------------------------------------------------
# Several hosts on one timeline
# ---------------------------------------------------------------------------


@dataclass
class HostIndex:
    position: int  # the host's position among the run's hosts (stable ids)
    host: str
    index: TraceIndex
    pid_offset: int = 0  # xplane: 1000 * XProf's number of the host among those selected; Chrome: 0


_DEVICE_TRACKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # TraceIndex -> bool per track


def device_track_mask(ix: TraceIndex) -> np.ndarray:
    """Which tracks of an index are the device's (True) rather than the host's, once per
    index. An xplane's track belongs to its plane's process, named ``<host> /device:GPU:0``
    (or ``/device:TPU:N``...) for a device plane and ``<host> /host:CPU`` for the host;
    a Chrome trace's kernels sit on tracks whose rows have ``args.device`` and
    ``args.stream`` (kineto; tools/step_breakdown.py ``device_tracks``), which is the
    only sure sign: kineto names the B200 trace's stream track ``thread 7``."""
    mask = _DEVICE_TRACKS.get(ix)
    if mask is None:
        mask = np.zeros(len(ix.tracks), bool)
        mask[list(xplane_device_tracks(ix)) if ix.meta.get("planes") else step_breakdown.device_tracks(ix)] = True
        _DEVICE_TRACKS[ix] = mask
    return mask


DEVICE_PROCESS = "/device:"  # an xplane device plane's process name holds it ("host /device:GPU:4")


def xplane_device_tracks(ix: TraceIndex) -> dict[int, str]:
    """Each slice track of an xplane index's device planes: its device (``/device:GPU:4``)."""
    procs = {p["pid"]: p["name"] for p in ix.meta.get("processes", [])}
    out = {}
    for t, tr in enumerate(ix.tracks):
        name = procs.get(tr.get("pid"), "")
        if DEVICE_PROCESS in name and tr.get("kind", "slices") == "slices":
            out[t] = name[name.index(DEVICE_PROCESS):]
    return out


class TraceView:
    """The selected hosts of a run, merged on one timeline whose origin is the earliest
    of theirs."""

    def __init__(self, run_name: str, hosts: list[HostIndex]):
        self.run = run_name
        self.hosts = hosts
        self.origin_ps = min((h.index.origin_ps for h in hosts), default=0)
        self.shift = {h.position: h.index.origin_ps - self.origin_ps for h in hosts}
        self.end_ps = max((self.shift[h.position] + h.index.end_ps for h in hosts), default=0)

    # -- parameters -------------------------------------------------------------------------

    def span_ps(self, start_ms: float | None, end_ms: float | None) -> tuple[int, int]:
        """The window [start_ms, end_ms) in ps from the origin (absent: the trace's start,
        end); an empty one is 1 ps wide."""
        s = 0 if start_ms is None else clamp_ps(ms_to_ps(start_ms))
        e = self.end_ps if end_ms is None else clamp_ps(ms_to_ps(end_ms))
        if e < s:
            end = ms_text(end_ms) if end_ms is not None else f"the trace's end, {ms_text(e / PS_PER_MS)}"
            raise BadRequest(f"end_ms ({end}) is before start_ms ({ms_text(start_ms or 0)})")
        if e == s:
            e = s + 1
        return s, e

    def fit_ps(self, start_ms: float | None, end_ms: float | None) -> tuple[int, int]:
        """The window of :meth:`span_ps` clamped to the trace [0, end], as the page clamps
        a link's window (``pages/trace_viewer.js`` ``fitToTrace``): the part inside it, or
        the whole trace when none of it is (a window past the end showed nothing)."""
        s, e = self.span_ps(start_ms, end_ms)
        if e <= 0 or s >= self.end_ps:
            return self.span_ps(None, None)
        return max(s, 0), max(min(e, self.end_ps), max(s, 0) + 1)

    def _host(self, event_id: int) -> tuple[HostIndex, int]:
        pos, row = event_id >> HOST_ID_SHIFT, event_id & ((1 << HOST_ID_SHIFT) - 1)
        for h in self.hosts:
            if h.position == pos:
                h.index.check_row(row)
                return h, row
        raise NotFound(f"no event with id {event_id} in the selected hosts of run {self.run!r}")

    # -- payloads ---------------------------------------------------------------------------

    def tracks(self) -> tuple[list[dict], list[dict]]:
        """Processes and tracks named for this page (display_name); counter tracks whose
        every value is zero are left out (zero_counter_tracks). XProf's API
        (trace_xprof.py) keeps the index's own names."""
        processes, tracks = [], []
        for h in self.hosts:
            gpus = kineto_device_pids(h.index) if h.index.meta.get("source", "") != "xplane" else set()
            for p in h.index.meta["processes"]:
                name = display_name(p["name"], "process", p["pid"])
                if p["pid"] in gpus:
                    name = f"GPU {p['pid']} ({name})"
                processes.append({"pid": p["pid"] + h.pid_offset, "name": name,
                                  "host": h.host, "sortIndex": p["sortIndex"] + h.pid_offset})
            hidden = zero_counter_tracks(h.index)
            for i, t in enumerate(h.index.tracks):
                if i in hidden:
                    continue
                tracks.append({"id": (h.position << TRACK_ID_SHIFT) | i, "pid": t["pid"] + h.pid_offset,
                               "tid": t["tid"], "name": display_name(t["name"], "thread", t["tid"]), "sortIndex": t["sortIndex"],
                               "maxDepth": t["maxDepth"], "kind": t["kind"], "events": t.get("events", 1)})
        return processes, tracks

    def window(self, start_ms: float | None = None, end_ms: float | None = None, resolution: int | None = None) -> dict:
        """What to draw of [start_ms, end_ms) at ``resolution`` pixels (default
        DEFAULT_RESOLUTION; the server keeps it within 1..queries.TRACE_MAX_RESOLUTION),
        the window clamped to the trace (:meth:`fit_ps`; ``window`` says which it is)."""
        out = self._window(start_ms, end_ms, resolution)
        out["slices"] = {k: v.tolist() for k, v in out["slices"].items()}
        out["flows"] = {k: v.tolist() if k in FLOW_COLUMNS else v for k, v in out["flows"].items()}
        return out

    def window_json(self, start_ms: float | None = None, end_ms: float | None = None,
                    resolution: int | None = None) -> bytes:
        """:meth:`window` as JSON, the bytes of ``orjson.dumps(window(...))``: the slices'
        columns encoded by orjson from their arrays (``OPT_SERIALIZE_NUMPY``: an int64 or
        float64 element is written as the Python int or float ``tolist`` makes of it), not
        made into ~500,000 Python objects first (a 1 % window of jax308 at 8000 px holds
        90,000 slices: 4.5 ms of ``tolist`` and 1 ms more of encoding)."""
        return orjson.dumps(self._window(start_ms, end_ms, resolution), option=orjson.OPT_SERIALIZE_NUMPY)

    def window_columns(self, start_ms: float | None = None, end_ms: float | None = None,
                       resolution: int | None = None) -> bytes:
        """:meth:`window` as the page reads it (``/api/trace/window?format=columns``,
        :func:`columns_answer`): the slices' and the flows' columns as raw little-endian
        arrays after a JSON header, so that neither the server writes ~600,000 numbers as
        text nor the browser parses them back (a busy 1 % window of jax308: 3 MB of JSON)."""
        return columns_answer(self._window(start_ms, end_ms, resolution, wide=False))

    def _window(self, start_ms: float | None, end_ms: float | None, resolution: int | None, wide: bool = True) -> dict:
        """:meth:`window` with the slices' and the flows' columns as arrays (int64 / float64;
        ``wide=False``: tracks, depths and name codes as narrow as they come, no copy made
        to widen them: the same values, for :func:`columns_answer`)."""
        res = DEFAULT_RESOLUTION if resolution is None else resolution
        s, e = self.fit_ps(start_ms, end_ms)
        processes, tracks = self.tracks()
        names: list[str] = []
        name_ix: dict[str, int] = {}
        cols = {k: [] for k in SLICE_COLUMNS}
        counters, steps = [], []
        flows = {"name": [], "fromTrack": [], "from": [], "toTrack": [], "to": [], "truncated": 0}
        truncated = False
        total = 0
        for h in self.hosts:
            ix = h.index
            sh = self.shift[h.position]
            total += ix.n
            sl, trunc = ix.window_rows(s - sh, e - sh, res)
            truncated |= trunc
            if len(sl["rows"]):
                uniq, inv = name_codes(sl["name"])
                mapped = np.asarray([name_ix.setdefault(ix.names[u], len(name_ix)) for u in uniq.tolist()],
                                    dtype=np.int64 if wide else np.int32)
                names.extend(list(name_ix)[len(names):])
                # (the first host's ids and tracks are the index's own, its starts unshifted
                # when it holds the origin: no pass over the ~90,000 slices for those)
                # (narrow: int32 holds host << TRACK_ID_SHIFT for 2,048 hosts)
                track = sl["track"].astype(np.int64 if wide or h.position >= 1 << 11 else np.int32, copy=bool(h.position))
                if h.position:
                    track |= h.position << TRACK_ID_SHIFT
                cols["id"].append((h.position << HOST_ID_SHIFT) | sl["rows"] if h.position else sl["rows"])
                cols["track"].append(track)
                cols["start"].append(((sl["start"] + sh) if sh else sl["start"]) / PS_PER_MS)
                cols["dur"].append(sl["dur"] / PS_PER_MS)
                cols["depth"].append(sl["depth"].astype(np.int64) if wide else sl["depth"])
                cols["name"].append(mapped[inv.reshape(-1)])
            hidden = zero_counter_tracks(ix)
            for i, c in enumerate(ix.meta["counters"]):
                if c["track"] in hidden:
                    continue
                t, v = ix.counter(i, s - sh, e - sh, res)
                counters.append({"track": (h.position << TRACK_ID_SHIFT) | c["track"], "name": display_name(c["name"], "thread", 0),
                                 "unit": c["unit"], "t": ((t + sh) / PS_PER_MS).tolist(), "v": v.tolist()})
            for name, st, du in steps_in(ix, s - sh, e - sh):
                steps.append({"name": name, "start": (st + sh) / PS_PER_MS, "dur": du / PS_PER_MS})
            sel, hits = ix.flows_first(s - sh, e - sh, MAX_FLOWS)
            if hits:  # arrows with a point in the window or crossing it, the first few thousand
                flows["truncated"] += max(0, hits - MAX_FLOWS)
                for k, col in _flow_columns(h, sel, sh, name_ix).items():
                    flows[k].append(col)
                names.extend(list(name_ix)[len(names):])
        for k in FLOW_COLUMNS:
            flows[k] = _joined(flows[k], np.float64 if k in ("from", "to") else np.int64)
        slices = {k: _joined(parts, np.float64 if k in ("start", "dur") else np.int64) for k, parts in cols.items()}
        return {
            "run": self.run,
            "hosts": [h.host for h in self.hosts],
            "originNs": self.origin_ps // 1000,
            "fullTimespan": [0.0, self.end_ps / PS_PER_MS],
            "window": [s / PS_PER_MS, e / PS_PER_MS],
            "resolution": res,
            "processes": processes,
            "tracks": tracks,
            "names": names,
            "slices": slices,
            "counters": counters,
            "steps": steps,
            "flows": flows,
            "returnedEventsSize": len(slices["id"]),
            "totalEventsSize": total,
            "truncated": bool(truncated),
        }

    def event_slice(self, event_id: int) -> dict:
        """What the index's columns say of one event (an id from :meth:`window` or
        :meth:`search`): name, start, duration, depth and process › track. A build's
        preview answers this much (app/trace_preview.py); :meth:`event` adds the rest."""
        h, row = self._host(event_id)
        ix = h.index
        ti = int(ix.cols["track"][row])
        t = ix.tracks[ti]
        proc = next((p["name"] for p in ix.meta["processes"] if p["pid"] == t["pid"]), "")
        return {
            "id": event_id,
            "name": ix.names[int(ix.cols["name"][row])],
            "start": (int(ix.cols["start"][row]) + self.shift[h.position]) / PS_PER_MS,
            "dur": int(ix.cols["dur"][row]) / PS_PER_MS,
            "depth": int(ix.cols["depth"][row]),
            "track": {"id": (h.position << TRACK_ID_SHIFT) | ti, "name": t["name"], "pid": t["pid"] + h.pid_offset,
                      "process": proc, "host": h.host},
        }

    def event(self, event_id: int) -> dict:
        """One event's details: :meth:`event_slice`, its args and what they name (HLO op, module)."""
        h, row = self._host(event_id)
        ix = h.index
        t = ix.tracks[int(ix.cols["track"][row])]
        args = ix.args(row)
        hlo_op = args.get("hlo_op")
        hlo_module = args.get("hlo_module")
        program_id = args.get("program_id")
        module = None
        if hlo_module:
            module = f"{hlo_module}({program_id})" if program_id is not None and not str(hlo_module).endswith(f"({program_id})") else str(hlo_module)
        elif program_id is not None:
            # TPU ops carry only the program id: their module is the XLA Modules slice
            # named "<module>(<program id>)", as module_list names it
            module = ix.module_named(program_id)
        elif t["name"] == "XLA Modules":
            module = ix.module_named(MODULE_ID.search(ix.names[int(ix.cols["name"][row])]))
        return {
            **self.event_slice(event_id),
            "args": jsonable(args),
            "hloOp": hlo_op,
            "hloModule": hlo_module,
            "module": module,
        }

    def search(self, q: str | None, limit: int | None = None, offset: int | None = None) -> dict:
        """Events whose name holds ``q`` (case-insensitive; names starting with it first),
        by start: ``limit`` (default DEFAULT_SEARCH_LIMIT) of them from the ``offset``-th
        (default 0), and the ``total`` number of matches. The rows come from the index's
        per-name row lists; only the first offset+limit of each host's by start are
        sorted out and turned into JSON, whatever the total."""
        q = (q or "").strip()
        if not q:
            raise BadRequest("missing parameter 'q' (the text to search event names for)")
        lim = DEFAULT_SEARCH_LIMIT if limit is None else limit
        off = max(0, offset or 0)
        upto = off + lim  # the matches before the page are needed to know where it starts
        ql = q.lower()
        groups: list[list[tuple[int, HostIndex, np.ndarray]]] = [[], []]
        total = 0
        for h in self.hosts:
            lower = h.index.lower_names()
            prefix = [i for i, s in enumerate(lower) if s.startswith(ql)]
            inner = [i for i, s in enumerate(lower) if ql in s and not s.startswith(ql)]
            for g, ids in enumerate((prefix, inner)):
                rows = h.index.rows_named(ids)
                total += len(rows)
                groups[g].append((h, rows))
        matches = []
        seen = 0  # matches of the groups before this one (prefix matches come first)
        for g in groups:
            merged = []
            for h, rows in g:
                if not rows.size:
                    continue
                st = np.asarray(h.index.cols["start"][rows]) + self.shift[h.position]
                take = np.argsort(st, kind="stable")[: upto - seen] if upto > seen else []
                merged += [(int(st[i]), h, int(rows[i])) for i in list(take)]
            merged.sort(key=lambda x: x[0])
            group_size = sum(int(rows.size) for _, rows in g)
            skip = min(len(merged), max(0, off - seen))  # of this group, before the page
            seen += group_size
            for st, h, row in merged[skip:]:
                if len(matches) >= lim:
                    break
                ix = h.index
                matches.append({"id": (h.position << HOST_ID_SHIFT) | row, "name": ix.names[int(ix.cols["name"][row])],
                                "start": st / PS_PER_MS, "dur": int(ix.cols["dur"][row]) / PS_PER_MS,
                                "track": (h.position << TRACK_ID_SHIFT) | int(ix.cols["track"][row])})
        return {"query": q, "total": total, "offset": off, "matches": matches}

    def summary(self, start_ms: float | None = None, end_ms: float | None = None) -> dict:
        """Every slice name in [start_ms, end_ms) on every track of the selected hosts, as
        Catapult's and Perfetto's range selection tabulate it, one row per name on the
        devices' tracks and one per name on the host's (``device``): occurrences, wall time and
        self time (wall minus the children's on the same track, the slice one depth down
        that starts inside it and ends by its end), both clipped to the range, so a slice
        sticking out of the range counts only its part inside. Computed over the index's
        columns with numpy (no Python object per event)."""
        s, e = self.span_ps(start_ms, end_ms)
        acc: dict[tuple[str, bool], list[int]] = {}  # (name, on a device) -> [count, wall ps, self ps, max wall ps]
        for h in self.hosts:
            ix = h.index
            sh = self.shift[h.position]
            a, z = s - sh, e - sh
            rows = ix.overlapping(a, z)
            if not rows.size:
                continue
            st = np.asarray(ix.cols["start"][rows])
            du = np.asarray(ix.cols["dur"][rows])
            key = np.asarray(ix.cols["track"][rows]).astype(np.int64) * (1 << 16) + np.asarray(ix.cols["depth"][rows]).astype(np.int64)
            wall = np.minimum(st + du, z) - np.maximum(st, a)
            np.maximum(wall, 0, out=wall)
            own = wall.copy()
            # The parent of a slice: on its track, the deepest slice above it that encloses
            # it. The index stacks a slice that crosses another (not nested in it) one
            # depth further down, so a parent can be several depths up: try depth d-1,
            # d-2, ... in turn, each with one binary search over the (track, depth, start)
            # order for every slice still without a parent (at one depth the slices do not
            # overlap: only the last one starting at or before a slice can enclose it).
            uniq, rank = np.unique(st, return_inverse=True)
            rank = rank.reshape(-1).astype(np.int64)
            base = np.int64(len(uniq) + 1)
            comp = key * base + rank
            order = np.argsort(comp, kind="stable")
            sorted_comp = comp[order]
            depth = key & 0xFFFF
            end = st + du
            child = np.flatnonzero(depth > 0)
            gap = 1
            pairs_p, pairs_c = [], []
            while child.size:
                pos = np.searchsorted(sorted_comp, (key[child] - gap) * base + rank[child], side="right") - 1
                par = order[np.maximum(pos, 0)]
                ok = (pos >= 0) & (key[par] == key[child] - gap) & (end[par] + NEST_SLACK_PS >= end[child])
                pairs_p.append(par[ok])
                pairs_c.append(child[ok])
                child = child[~ok]
                gap += 1
                child = child[depth[child] >= gap]
            if pairs_p:
                _subtract_children(own, np.concatenate(pairs_p), np.concatenate(pairs_c), np.maximum(st, a), np.minimum(end, z))
            # one row per name and side: a kernel and a host frame never share a row, and
            # the page can show the device's rows alone (on the MI300 trace the host's
            # Python frames outrank every kernel by wall time)
            dev = device_track_mask(ix)[np.asarray(ix.cols["track"][rows])]
            names, inv = np.unique(np.asarray(ix.cols["name"][rows]).astype(np.int64) * 2 + dev, return_inverse=True)
            inv = inv.reshape(-1)
            count = np.bincount(inv, minlength=len(names))
            wall_sum = np.zeros(len(names), np.int64)
            np.add.at(wall_sum, inv, wall)
            self_sum = np.zeros(len(names), np.int64)
            np.add.at(self_sum, inv, own)
            wall_max = np.zeros(len(names), np.int64)
            np.maximum.at(wall_max, inv, wall)
            for n, c, w, o, m in zip(names.tolist(), count.tolist(), wall_sum.tolist(), self_sum.tolist(), wall_max.tolist()):
                row = acc.setdefault((ix.names[n >> 1], bool(n & 1)), [0, 0, 0, 0])
                row[0] += c
                row[1] += w
                row[2] += o
                row[3] = max(row[3], m)
        out = [{"name": n, "device": d, "count": c, "wallMs": w / PS_PER_MS, "selfMs": o / PS_PER_MS,
                "avgMs": w / c / PS_PER_MS, "maxMs": m / PS_PER_MS} for (n, d), (c, w, o, m) in acc.items()]
        out.sort(key=lambda r: (-r["wallMs"], r["name"], r["device"]))
        return {"run": self.run, "hosts": [h.host for h in self.hosts], "window": [s / PS_PER_MS, e / PS_PER_MS],
                "durationMs": (e - s) / PS_PER_MS, "slices": sum(r["count"] for r in out), "rows": out}

    # -- XProf's JSON -------------------------------------------------------------------------


def _subtract_children(own: np.ndarray, par: np.ndarray, child: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> None:
    """``own[p] -= `` the length of the union of p's children's (clipped) spans
    ``[cs, ce)``: a slice that crosses its sibling (stacked a depth further down) overlaps
    it, and their shared time is subtracted once. Per parent, children by start; each
    covers what lies past the furthest end before it, a running maximum kept per parent by
    ranking the ends (parent * ranks + rank fits in int64)."""
    if not par.size:
        return
    o = np.lexsort((cs[child], par))
    p, c0, c1 = par[o], cs[child][o], ce[child][o]
    _, gid = np.unique(p, return_inverse=True)
    gid = gid.reshape(-1).astype(np.int64)
    ends, rk = np.unique(c1, return_inverse=True)
    n = np.int64(len(ends) + 1)
    acc = np.maximum.accumulate(gid * n + rk.reshape(-1))
    prev = np.concatenate(([-1], acc[:-1]))
    same = (prev >= 0) & (prev // n == gid)
    prev_end = np.where(same, ends[np.where(same, prev % n, 0)], c0)
    covered = np.maximum(c1 - np.maximum(c0, prev_end), 0)
    np.subtract.at(own, p, covered)
    np.maximum(own, 0, out=own)


FLOW_COLUMNS = ("name", "fromTrack", "from", "toTrack", "to")  # a window's flows: a column each


def _flow_columns(h: HostIndex, sel: np.ndarray, sh: int, name_ix: dict[str, int]) -> dict[str, np.ndarray]:
    """A host's arrows ``sel`` (TraceIndex.flows_in's rows: name id, from track, from ps, to
    track, to ps) as the window's columns: names numbered in ``name_ix`` in the order they
    first appear (as a ``setdefault`` per arrow would: here one per distinct name id, of
    ~5,000 arrows), tracks as the page's ids, times in ms on the view's timeline."""
    ids, first, inv = np.unique(sel[:, 0], return_index=True, return_inverse=True)
    code = np.empty(len(ids), np.int64)
    for j in np.argsort(first, kind="stable").tolist():
        code[j] = name_ix.setdefault(h.index.names[int(ids[j])], len(name_ix))
    track = h.position << TRACK_ID_SHIFT
    return {"name": code[inv.reshape(-1)], "fromTrack": track | sel[:, 1], "from": (sel[:, 2] + sh) / PS_PER_MS,
            "toTrack": track | sel[:, 3], "to": (sel[:, 4] + sh) / PS_PER_MS}


SLICE_COLUMNS = ("id", "track", "start", "dur", "depth", "name")  # a window's slices: a column each
# The dtypes a column is sent as: those the page has a typed array for (JavaScript has no
# exact 64-bit integer view but BigInt64Array, whose BigInts the page's arithmetic refuses).
COLUMN_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float32", "float64")
COLUMN_ALIGN = 8  # every column starts at a multiple of 8 bytes: a Float64Array's view needs it


def columns_answer(window: dict) -> bytes:
    """A window (:meth:`TraceView._window`: columns as arrays) as the page's binary answer:
    a little-endian uint32 ``H``, ``H`` bytes of JSON (the window, each column replaced
    by ``{dtype, offset, length}``, padded with spaces so that ``4 + H`` is a multiple of
    8), then the columns' bytes, each at ``4 + H + offset`` (a multiple of 8, zeros
    between). int64 columns go as int32 where every value fits, else as float64: exact,
    as every id, track, name code and time in ps the page reads is below 2^53
    (HOST_ID_SHIFT). The layout: docs/trace_viewer.md."""
    head, chunks, offset = dict(window), [], 0
    for group, names in (("slices", SLICE_COLUMNS), ("flows", FLOW_COLUMNS)):
        head[group] = dict(window[group])
        for k in names:
            a = _sendable(np.asarray(head[group][k]))
            pad = -offset % COLUMN_ALIGN
            if pad:
                chunks.append(bytes(pad))
                offset += pad
            head[group][k] = {"dtype": a.dtype.name, "offset": offset, "length": len(a)}
            chunks.append(a.data)
            offset += a.nbytes
    text = orjson.dumps(head)
    text += b" " * (-(4 + len(text)) % COLUMN_ALIGN)
    return b"".join([len(text).to_bytes(4, "little"), text, *chunks])


def _sendable(a: np.ndarray) -> np.ndarray:
    """A column as one of COLUMN_DTYPES, little-endian and contiguous (a copy only where
    it must be: an int64 column narrowed or widened to float64, a big-endian machine's)."""
    if a.dtype.kind in "iu" and a.dtype.itemsize == 8:
        fits = not len(a) or (int(a.min()) >= -(1 << 31) and int(a.max()) < (1 << 31))
        a = a.astype(np.int32 if fits else np.float64)
    if a.dtype.name not in COLUMN_DTYPES:
        raise ValueError(f"a window column of dtype {a.dtype} has no typed array in the page")
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    """The hosts' pieces of a column, one after another (one host's: itself, not a copy)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def ms_to_ps(ms: float) -> int:
    """Milliseconds (the server keeps them within ±1e15) as integer picoseconds."""
    return round(ms * PS_PER_MS)


def clamp_ps(v: int) -> int:
    """Window bounds far outside any trace are clamped to ±2^61 ps (26 days), so that
    they and the level margins (durations are capped at 2^60 ps) stay within int64."""
    return max(-(1 << 61), min(1 << 61, v))


def ms_text(ms: float) -> str:
    """A time in an error message, as it was likely typed (``5``, not ``5.0``)."""
    return str(int(ms)) if float(ms).is_integer() else repr(float(ms))


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, int) and abs(value) >= 1 << 63:
        return str(value)
    return value
