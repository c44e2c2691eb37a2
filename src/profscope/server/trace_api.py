"""The trace viewer's own API (``/api/trace/...``): windows of the timeline, one event's
details, search by name, export as Chrome-trace JSON; and ``/api/trace_hosts``, every
host of a multi-host run side by side. Shapes: ``docs/trace_viewer.md``.

Every parameter is parsed here (server/params.py) into a :class:`TraceQuery`; XProf's
``data?tag=trace_viewer@`` parameters into an :class:`XprofTraceQuery`
(:func:`xprof_trace_query`, called by server/xprof_api.py)."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from profscope.app.queries import TraceQuery, XprofTraceQuery
from profscope.app.workspace import Workspace
from profscope.errors import BadRequest
from profscope.server.params import (
    EventId,
    QueryParser,
    Resolution,
    SearchLimit,
    SearchOffset,
    Text,
    TraceMs,
    UniqueId,
    XprofResolution,
)
from profscope.server.responses import json_response

_XPROF_TRACE = QueryParser(host=Text, hosts=Text, start_time_ms=TraceMs, end_time_ms=TraceMs,
                           resolution=XprofResolution, event_name=Text, duration_ms=TraceMs, unique_id=UniqueId)


def xprof_trace_query(request: Request) -> XprofTraceQuery:
    """The trace_viewer@ parameters of XProf's data route, typed (a bad one is a 400
    naming it)."""
    return XprofTraceQuery(**_XPROF_TRACE.parse(request.query_params))


def router(ws: Workspace) -> APIRouter:
    outer = APIRouter()

    @outer.get("/api/trace_hosts")
    def trace_hosts(run: Text = None) -> Response:
        """Every host's step times, device busy and idle time of a profile run, slowest
        first, and the roll-up across hosts (tools/trace_hosts.py); the trace viewer
        page's "All hosts" section."""
        return json_response(ws.trace_hosts(ws.run(run)))

    r = APIRouter(prefix="/api/trace")

    @r.get("/window")
    def window(run: Text = None, host: Text = None, hosts: Text = None, start_ms: TraceMs = None,
               end_ms: TraceMs = None, resolution: Resolution = None) -> Response:
        query = TraceQuery(host=host, hosts=hosts, start_ms=start_ms, end_ms=end_ms, resolution=resolution)
        return json_response(ws.trace_window(ws.run(run), query))

    @r.get("/preview")
    def preview(run: Text = None, host: Text = None, hosts: Text = None, resolution: Resolution = None) -> Response:
        """The whole trace, drawn from what the index build has published so far (404
        when nothing is: the index is ready, or not that far yet)."""
        query = TraceQuery(host=host, hosts=hosts, resolution=resolution)
        return json_response(ws.trace_preview(ws.run(run), query))

    @r.get("/event")
    def event(run: Text = None, host: Text = None, hosts: Text = None, id: EventId = None) -> Response:
        if id is None:
            raise BadRequest("missing parameter 'id' (an event id from /api/trace/window or /api/trace/search)")
        return json_response(ws.trace_event(ws.run(run), TraceQuery(host=host, hosts=hosts, id=id)))

    @r.get("/search")
    def search(run: Text = None, host: Text = None, hosts: Text = None, q: Text = None,
               limit: SearchLimit = None, offset: SearchOffset = None) -> Response:
        if not q:
            raise BadRequest("missing parameter 'q' (the text to search event names for)")
        return json_response(ws.trace_search(ws.run(run), TraceQuery(host=host, hosts=hosts, q=q, limit=limit, offset=offset)))

    @r.get("/summary")
    def summary(run: Text = None, host: Text = None, hosts: Text = None, start_ms: TraceMs = None,
                end_ms: TraceMs = None) -> Response:
        """Every slice name in the range [start_ms, end_ms): occurrences, wall and self time."""
        query = TraceQuery(host=host, hosts=hosts, start_ms=start_ms, end_ms=end_ms)
        return json_response(ws.trace_summary(ws.run(run), query))

    @r.get("/export")
    def export(run: Text = None, host: Text = None, hosts: Text = None, start_ms: TraceMs = None,
               end_ms: TraceMs = None) -> Response:
        the_run = ws.run(run)
        chunks = ws.trace_export(the_run, TraceQuery(host=host, hosts=hosts, start_ms=start_ms, end_ms=end_ms))
        first = next(chunks)  # the window is checked before the response starts
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", the_run.name).strip("_") or "trace"
        name = f"{stem}.trace.json"

        def body():
            yield first
            yield from chunks

        return StreamingResponse(body(), media_type="application/json",
                                 headers={"Content-Disposition": f'attachment; filename="{name}"'})

    outer.include_router(r)
    return outer
