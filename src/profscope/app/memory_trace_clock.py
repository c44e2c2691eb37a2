"""The trace of the same process at a memory time (``GET /api/trace_clock``): where the
memory profile's and the snapshot's times fall on the trace viewer's clock, or why they
have no place there (tools/trace_clock.py holds the rules and the measurements). Plain functions of the
workspace, called by the route (server/api.py).

The pages draw a "trace viewer at this time" link only from this answer: a run whose
trace does not match gets the answer's ``why`` as a line instead, never a dead link."""

from __future__ import annotations

import gzip

import orjson

from profscope.app import lazy
from profscope.app.queries import MemoryProfileQuery, SnapshotQuery
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind

clock_rules = lazy.module("profscope.tools.trace_clock")
trace_viewer = lazy.module("profscope.tools.trace_viewer")

_CUDA = 1  # c10::DeviceType::CUDA, the deviceType of a PyTorch trace's [memory] events


PENDING_WHY = "the trace is not indexed yet"


def trace_clock(ws, run: Run, host: str | None = None, index: str | None = None) -> dict:
    """``{"run", "host", "source", "trace": {"run", "host"} | null, "clocks": {id:
    {"offsetMs"} | {"offsetMs": null, "why"}}, "why": str | null, "pending": bool}``:
    trace ms = the source's ms + offsetMs, per allocator (xplane), device (PyTorch trace)
    or ``cuda:N`` (snapshot; its ms counted from ``sinceUs``, the device's first event).
    A distributed job's rank ``host`` (else its first) answers as its own file's run.

    ``index="built"``: answer only from trace indexes already built. The pages ask so on
    load: building a host's index is seconds of CPU and hundreds of MiB on a large profile
    (and a Dask submission under ``--dask``), too much to open a memory page with. When
    one the answer needs is not built, ``pending`` is true, ``trace`` null, nothing built
    or submitted; the page's link then asks again without ``index`` when clicked."""
    if index not in (None, "built"):
        raise BadRequest(f"index={index!r}: the only value is 'built' (answer from a trace index already built)")
    built_only = index == "built"
    if run.ranks:
        run, host = run.rank_run(host) or next(iter(run.ranks.values())), None
    if run.kind is RunKind.PROFILE:
        return _xplane_clock(ws, run, host, built_only)
    if run.kind is RunKind.CHROME_TRACE:
        return _torch_trace_clock(ws, run, built_only)
    if run.kind is RunKind.TORCH_SNAPSHOT:
        return _snapshot_clock(ws, run, host, built_only)
    raise NotFound(f"run {run.name!r} is a {run.kind.value}: it has no memory times to place on a trace")


def _indexed(ws, host: str, info) -> bool:
    """Whether the trace index of ``info`` is built (app/traces.py trace_index's key):
    asking only looks at the cache, it never builds."""
    return ws.cache.is_built(ws._trace_index_key(host, info))


def _pending(run: Run, host: str, source: str) -> dict:
    return {"run": run.name, "host": host, "source": source, "trace": None, "clocks": {}, "why": PENDING_WHY,
            "pending": True}


def _xplane_clock(ws, run: Run, host: str | None, built_only: bool = False) -> dict:
    hosts = run.hosts
    if not hosts:
        raise NotFound(f"run {run.name!r} has no host")
    host = host or hosts[0]
    if host not in hosts:
        raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(hosts)}")
    if built_only and not _indexed(ws, host, run.xplane(host)):
        return _pending(run, host, "memory_profile")
    tool = ws.tool_named("memory_profile")
    profile = orjson.loads(gzip.decompress(ws.tool_data(run, tool, MemoryProfileQuery(host=host))))
    ix = ws.trace_index(run, host, run.xplane(host))
    # the allocator events' absolute times (app/trace_viewer_links.py, cached per file): the
    # clock the trace's counter -> memory profile links use too
    clocks = clock_rules.allocator_times(profile, ws.allocator_clock(run, host), ix.origin_ps)
    _counters(ws, run, host, ix, clocks, {mid: clock_rules.allocator_counter(mid) for mid in clocks})
    return _answer(run, host, "memory_profile", {"run": run.name, "host": host}, clocks)


def _torch_trace_clock(ws, run: Run, built_only: bool = False) -> dict:
    (host, info), = ws.trace_sources(run)[:1]
    if built_only and not _indexed(ws, host, info):
        return _pending(run, host, "memory_profile")
    payload = orjson.loads(gzip.decompress(ws.torch_memory_payload(run)))
    ix = ws.trace_index(run, host, info)
    one = clock_rules.torch_trace_offset(payload.get("timeOriginUs") or 0.0, ix.origin_ps)
    devices = payload.get("devices") or []
    clocks = {d["device"]: dict(one) for d in devices}
    _counters(ws, run, host, ix, clocks, {d["device"]: clock_rules.torch_counter(d) for d in devices})
    return _answer(run, host, "memory_profile", {"run": run.name, "host": host}, clocks)


def _counters(ws, run: Run, host: str, ix, clocks: dict, names: dict) -> None:
    """Each placed clock's ``counter``: the trace viewer's track id of the counter its events
    are samples of (the view's ids: the host's position << TRACK_ID_SHIFT | the index's
    track, tools/trace_viewer.py), so that the link opens with that sample selected
    (``ctr``/``ct``, the trace page's counter card). None when the trace has no such counter."""
    position = [h for h, _ in ws.trace_sources(run)].index(host)
    tracks = {c["name"]: (position << trace_viewer.TRACK_ID_SHIFT) | int(c["track"]) for c in ix.meta["counters"]}
    for key, c in clocks.items():
        if c.get("offsetMs") is not None or c.get("traceMs"):
            c["counter"] = tracks.get(names.get(key))


def _snapshot_clock(ws, run: Run, host: str | None, built_only: bool = False) -> dict:
    device = ws.snapshot_device(run, host)
    overview = orjson.loads(gzip.decompress(ws.snapshot_view(run, "overview", SnapshotQuery(host=f"cuda:{device}"))))
    s = overview.get("summary") or {}
    name = f"cuda:{device}"
    if not s.get("hasTime"):
        return _answer(run, name, "torch_snapshot", None, {}, "the snapshot's trace entries have no time_us")
    first, last = int(s["firstTimeUs"]), int(s["lastTimeUs"])
    traces = [r for r in ws.runs() if r.kind is RunKind.CHROME_TRACE and r.folder == run.folder]
    if not traces:
        return _answer(run, name, "torch_snapshot", None, {},
                       "no PyTorch trace sits beside this snapshot (a *.trace.json in its folder, recorded by the same run)")
    if built_only and not all(_indexed(ws, *ws.trace_sources(tr)[0]) for tr in traces if ws.trace_sources(tr)):
        return _pending(run, name, "torch_snapshot")
    whys = []
    for tr in traces:
        try:
            meta = _kineto_clock(ws, tr)
        except ProfscopeError as e:
            whys.append(f"{tr.name}: {e.message}")
            continue
        got = clock_rules.snapshot_offset(first, last, device, meta)
        if got["offsetMs"] is not None:
            got["sinceUs"] = first
            got["counter"] = meta["counters"].get(clock_rules.torch_counter({"device": f"CUDA:{device}", "deviceIndex": device}))
            return _answer(run, name, "torch_snapshot", {"run": tr.name, "host": meta["host"]}, {name: got})
        whys.append(got["why"])
    return _answer(run, name, "torch_snapshot", None, {}, "; ".join(whys))


def _kineto_clock(ws, run: Run) -> dict:
    """A Chrome trace's span in Unix µs, its origin and the CUDA devices it recorded."""
    payload = orjson.loads(gzip.decompress(ws.torch_memory_payload(run)))
    (host, info), = ws.trace_sources(run)[:1]
    ix = ws.trace_index(run, host, info)
    unix_ns = clock_rules.kineto_unix_ns((payload.get("source") or {}).get("baseTimeNanoseconds"))
    start_us = (ix.origin_ps + unix_ns * 1000) / 1e6
    end_us = (ix.origin_ps + int(ix.meta["end_ps"]) + unix_ns * 1000) / 1e6
    devices = {d["deviceIndex"] for d in payload.get("devices") or [] if d.get("deviceType") == _CUDA}
    return {"name": run.name, "host": host, "startUs": start_us, "endUs": end_us, "originPs": ix.origin_ps,
            "unixNs": unix_ns, "devices": devices,
            "counters": {c["name"]: int(c["track"]) for c in ix.meta["counters"]}}  # one file: host position 0


def _answer(run: Run, host: str, source: str, trace: dict | None, clocks: dict, why: str | None = None) -> dict:
    if trace is not None and not any(c.get("offsetMs") is not None or c.get("traceMs") for c in clocks.values()):
        why = "; ".join(sorted({c["why"] for c in clocks.values() if c.get("why")})) or "the memory profile has no allocator (or device) events to place on the trace"
        trace = None
    return {"run": run.name, "host": host, "source": source, "trace": trace, "clocks": clocks, "why": why,
            "pending": False}


