"""The trace viewer's links to the other tools (issue 37, "From the trace";
docs/trace_viewer.md "Links"): a counter point or peak → the memory profile of its
allocator at the same event, an XLA op → its instruction in the module's HLO view and its
buffers in the memory viewer, a PyTorch kernel → the memory profile of its device at its
start. A link is in an answer only when its target exists in this run (the host's
allocator, the module with the instruction, the trace's memory profile), so the page
never draws a dead one; ``why`` says what is missing when there is none."""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict

import orjson

from profscope.app import lazy
from profscope.app.queries import TraceQuery
from profscope.errors import BadRequest, ProfscopeError
from profscope.model.catalog import Run, RunKind

trace_clock = lazy.module("profscope.tools.trace_clock")
trace_links = lazy.module("profscope.tools.trace_links")
xplane_allocator = lazy.module("profscope.formats.xplane_allocator")

_KEEP = 16  # allocator clocks / device lists kept in memory


def _remember(cache: OrderedDict, lock, key, make):
    with lock:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = make()
    with lock:
        cache[key] = value
        while len(cache) > _KEEP:
            cache.popitem(last=False)
    return value


class TraceViewerLinks:
    """Part of :class:`~profscope.app.workspace.Workspace`: where the trace viewer links to."""

    _links_lock = threading.Lock()

    def _links_cache(self) -> OrderedDict:
        cache = self.__dict__.get("_trace_links_cache")
        if cache is None:
            cache = self.__dict__["_trace_links_cache"] = OrderedDict()
        return cache

    # -- counters ------------------------------------------------------------------------

    def trace_counter(self, run: Run, query: TraceQuery) -> dict:
        """``GET /api/trace/counter``: the counter sample at ``t`` (or the ``peak`` of the
        window or of the whole trace) and ``memoryProfile``: ``{host, memory_id, t}`` of
        the memory profile page at the same allocator event, or None with ``why``."""
        if query.track is None:
            raise BadRequest("missing parameter 'track' (a counter's track id from /api/trace/window)")
        view = self.trace_view(run, query)
        p = trace_links.counter_point(view, query.track, query.t, query.peak, query.start_ms, query.end_ms)
        h = next(h for h in view.hosts if h.host == p.host)
        link, why = self._counter_link(run, p, h.index.origin_ps + p.index_ps, h.index.origin_ps)
        return {**p.payload(query.track), "memoryProfile": link, "why": why}

    def _counter_link(self, run: Run, p, absolute_ps: int, origin_ps: int) -> tuple[dict | None, str | None]:
        if run.kind is RunKind.PROFILE:
            memory_id = trace_links.xplane_allocator_of(p.name)
            if memory_id is None:
                return None, f"{p.name!r} is not an allocator's counter"
            clock = self.allocator_clock(run, p.host)
            ms = clock.profile_ms(memory_id, absolute_ps)
            if ms is None:
                ids = ", ".join(clock.memory_ids) or "none"
                return None, f"the memory profile of {p.host} has no allocator {memory_id!r} (its allocators: {ids})"
            return {"host": p.host, "memory_id": memory_id, "t": trace_links.time_param(ms)}, None
        device = trace_links.torch_device_of(p.name)
        if device is None:
            return None, f"{p.name!r} is not a [memory] counter"
        return self._torch_link(run, p.host, device, absolute_ps, origin_ps)

    def _torch_link(self, run: Run, host: str, device: int, absolute_ps: int, origin_ps: int) -> tuple[dict | None, str | None]:
        try:
            origin_us, devices = self._torch_memory_devices(run)
        except ProfscopeError as e:
            return None, f"no memory profile: {e.message}"
        memory_id = trace_links.torch_device(devices, device)
        if memory_id is None:
            have = ", ".join(d["device"] for d in devices) or "no [memory] events"
            return None, f"the trace's memory profile has no device {device} (it has {have})"
        # the payload's ms count from timeOriginUs: the one PyTorch clock of both
        # directions (tools/trace_clock.py, the memory profile's trace link)
        ms = (absolute_ps - origin_ps) / 1e9 - trace_clock.torch_trace_offset(origin_us, origin_ps)["offsetMs"]
        return {"host": host, "memory_id": memory_id, "t": trace_links.time_param(ms)}, None

    def allocator_clock(self, run: Run, host: str):
        """The allocator events' clock of ``host``'s xplane (tools/trace_links.py
        ``AllocatorClock``), read once per file: both directions of the trace <-> memory
        profile links map times through it."""
        info = self.host_xplane(run, host, "allocator events")

        def make():
            with self.logdir.open(info.path) as f:
                events = xplane_allocator.read_allocator_events(f, self.logdir.display_path(info.path))
            return trace_links.AllocatorClock.of(events)

        return _remember(self._links_cache(), self._links_lock, ("clock", info.identity()), make)

    def _torch_memory_devices(self, run: Run) -> tuple[float, list[dict]]:
        def make():
            payload = orjson.loads(gzip.decompress(self.torch_memory_payload(run)))
            devices = [{k: d.get(k) for k in ("device", "deviceType", "deviceIndex")} for d in payload.get("devices") or []]
            return float(payload.get("timeOriginUs") or 0.0), devices

        key = ("torch", tuple(f.identity() for f in run.files))
        return _remember(self._links_cache(), self._links_lock, key, make)

    def allocator_event_in_trace_ps(self, run: Run, host: str, memory_id: str, t_ms: float) -> int | None:
        """The other way (memory profile → trace): the absolute time (ps, the trace
        index's clock before its ``origin_ps`` is taken off) of ``memory_id``'s event
        nearest the memory profile's ``t_ms``, per event (the host lines may differ)."""
        return self.allocator_clock(run, host).trace_ps(memory_id, t_ms)

    # -- events --------------------------------------------------------------------------

    def trace_event_links(self, run: Run, query: TraceQuery) -> dict:
        """``GET /api/trace/event``'s answer (app/traces.py) with ``links``: ``hlo``
        ``{host, module_name, instr}``, ``memoryViewer`` ``{host, module_name, hlo_op}`` and
        ``memoryProfile`` ``{host, memory_id, t}``, each present only when its target is."""
        ev = self.trace_event(run, query)
        ev["links"] = self._event_links(run, query, ev)
        return ev

    def _event_links(self, run: Run, query: TraceQuery, ev: dict) -> dict:
        links: dict = {}
        track = ev.get("track") or {}
        host = track.get("host")
        module = ev.get("module")
        if module and run.kind is RunKind.PROFILE and module in self.modules(run):
            # the op is hlo_op's arg, or, on TPU op lines (only program_id in the args),
            # the slice's own name; a module's own slice has none
            op = ev.get("hloOp") or (ev["name"] if track.get("name") != "XLA Modules" and ev["name"] != module else "")
            has = bool(op) and self.has_instruction(run, module, host, op)  # app/hlo_links.py
            links["memoryViewer"] = {"host": host, "module_name": module, "hlo_op": op if has else ""}
            if has:
                links["hlo"] = {"host": host, "module_name": module, "instr": op}
        device = (ev.get("args") or {}).get("device")
        if run.kind is RunKind.CHROME_TRACE and isinstance(device, int) and not isinstance(device, bool):
            # a kernel or a copy on a GPU (Kineto's args.device): its device's memory at its start
            view = self.trace_view(run, query)
            h = next(h for h in view.hosts if h.host == host)
            absolute_ps = h.index.origin_ps + round(ev["start"] * 1e9) - view.shift[h.position]
            link, _why = self._torch_link(run, host, device, absolute_ps, h.index.origin_ps)
            if link is not None:
                links["memoryProfile"] = link
        return links
