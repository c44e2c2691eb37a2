"""The trace viewer's own API (``/api/trace/...``): windows of the timeline, one event's
details, search by name, export as Chrome-trace JSON. Shapes: ``docs/trace_viewer.md``."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from profscope.app.workspace import Workspace
from profscope.server.responses import json_response


def xprof_trace_query(request: Request):
    """The trace_viewer@ parameters of XProf's data route."""
    return request.query_params


def router(ws: Workspace) -> APIRouter:
    r = APIRouter(prefix="/api/trace")

    def view(request: Request):
        q = request.query_params
        return ws.trace_view(ws.run(q.get("run")), q)

    @r.get("/window")
    def window(request: Request) -> Response:
        q = request.query_params
        v = view(request)
        return json_response(v.window(q.get("start_ms"), q.get("end_ms"), q.get("resolution")))

    @r.get("/event")
    def event(request: Request) -> Response:
        return json_response(view(request).event(request.query_params.get("id")))

    @r.get("/search")
    def search(request: Request) -> Response:
        q = request.query_params
        return json_response(view(request).search(q.get("q"), q.get("limit")))

    @r.get("/export")
    def export(request: Request) -> Response:
        q = request.query_params
        v = view(request)
        chunks = v.export(q.get("start_ms"), q.get("end_ms"))
        first = next(chunks)  # parameters are checked before the response starts
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", v.run).strip("_") or "trace"
        name = f"{stem}.trace.json"

        def body():
            yield first
            yield from chunks

        return StreamingResponse(body(), media_type="application/json",
                                 headers={"Content-Disposition": f'attachment; filename="{name}"'})

    return r
