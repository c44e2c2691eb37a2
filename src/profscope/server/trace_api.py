"""The trace viewer's own API (``/api/trace/...``): windows of the timeline, one event's
details, search by name, export as Chrome-trace JSON; and ``/api/trace_hosts``, every
host of a multi-host run side by side. Shapes: ``docs/trace_viewer.md``.

Every parameter is parsed (server/params.py) into a :class:`TraceQuery`, each route
taking the fields it reads; XProf's ``data?tag=trace_viewer@`` is server/xprof_api.py's."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from profscope.app import trace_preview
from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.errors import BadRequest
from profscope.server.params import Text, query_params
from profscope.server.responses import COLUMNS_TYPE, deflated_response, json_response

# What each route reads of a TraceQuery: the hosts, and its own fields.
HOSTS = ("host", "hosts")
RANGE = ("start_ms", "end_ms")
Window = query_params(TraceQuery, *HOSTS, *RANGE, "resolution", "format")
Preview = query_params(TraceQuery, *HOSTS, *RANGE, "resolution")
Event = query_params(TraceQuery, *HOSTS, "id")
Counter = query_params(TraceQuery, *HOSTS, *RANGE, "track", "t", "peak")
Search = query_params(TraceQuery, *HOSTS, "q", "limit", "offset")
Range = query_params(TraceQuery, *HOSTS, *RANGE)
StepsOps = query_params(TraceQuery, *HOSTS, "within_steps", "step")


def router(ws: Workspace) -> APIRouter:
    outer = APIRouter()

    @outer.get("/api/trace_hosts")
    def trace_hosts(run: Text = None) -> Response:
        """Every host's step times, device busy and idle time of a profile run, slowest
        first, and the roll-up across hosts (tools/trace_hosts.py); the trace viewer
        page's "All hosts" section."""
        return json_response(ws.trace_hosts(ws.run(run)))

    @outer.get("/api/steps_ops")
    def steps_ops(query: StepsOps, run: Text = None) -> Response:
        """A run's steps (time per category, idle and what bounds it, per device) and its
        ops ranked (``within_steps``, ``step``: which occurrences): app/traces.py,
        docs/steps_and_ops.md."""
        return json_response(ws.steps_ops(ws.run(run), query))

    r = APIRouter(prefix="/api/trace")

    @r.get("/window")
    def window(request: Request, query: Window, run: Text = None) -> Response:
        """What the timeline draws of a window: JSON, or with ``format=columns`` the same
        with its slices' and flows' columns as raw arrays (the page's; docs/trace_viewer.md)."""
        if query.format == "columns":
            return deflated_response(request, ws.trace_window_columns(ws.run(run), query), COLUMNS_TYPE)
        if query.format not in (None, "json"):
            raise BadRequest(f"unknown format {query.format!r} (json or columns)")
        return deflated_response(request, ws.trace_window_json(ws.run(run), query))

    @r.get("/preview")
    def preview(query: Preview, run: Text = None) -> Response:
        """The whole trace (or ``start_ms``..``end_ms`` of it), drawn from what the index
        build has published so far, or ``{"preview": false, "state"}`` when nothing is
        (yet): app/trace_preview.py."""
        return json_response(trace_preview.window(ws, ws.run(run), query))

    @r.get("/preview/event")
    def preview_event(query: Event, run: Text = None) -> Response:
        """One slice of the preview, as much as the preview holds of it (no args)."""
        return json_response(trace_preview.event(ws, ws.run(run), query))

    @r.get("/preview/search")
    def preview_search(query: Search, run: Text = None) -> Response:
        """The preview's slices whose name holds ``q`` (only what the preview holds)."""
        return json_response(trace_preview.search(ws, ws.run(run), query))

    @r.get("/event")
    def event(query: Event, run: Text = None) -> Response:
        if query.id is None:
            raise BadRequest("missing parameter 'id' (an event id from /api/trace/window or /api/trace/search)")
        # with the links to the other tools that exist for it (app/trace_viewer_links.py)
        return json_response(ws.trace_event_links(ws.run(run), query))

    @r.get("/counter")
    def counter(query: Counter, run: Text = None) -> Response:
        """One counter sample (``t``) or its peak (``peak=window|all``) and the memory
        profile at the same allocator event (app/trace_viewer_links.py)."""
        return json_response(ws.trace_counter(ws.run(run), query))

    @r.get("/search")
    def search(query: Search, run: Text = None) -> Response:
        if not query.q:
            raise BadRequest("missing parameter 'q' (the text to search event names for)")
        return json_response(ws.trace_search(ws.run(run), query))

    @r.get("/summary")
    def summary(query: Range, run: Text = None) -> Response:
        """Every slice name in the range [start_ms, end_ms): occurrences, wall and self time."""
        return json_response(ws.trace_summary(ws.run(run), query))

    @r.get("/export")
    def export(query: Range, run: Text = None) -> Response:
        the_run = ws.run(run)
        chunks = ws.trace_export(the_run, query)
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
