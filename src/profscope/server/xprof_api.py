"""XProf's data API (``/data/plugin/profile/...``), same paths, parameters and response
shapes as XProf 2.24 (plugin/xprof/profile_plugin.py), so XProf clients work unchanged.

Deliberate differences, all on error paths: an unknown run, host or tool is a 404 with
a JSON error instead of XProf's empty 200 answer, and ``session_path`` / ``run_path``
must lie inside the log directory.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from profscope import __version__
from profscope.cache.workspace import Workspace
from profscope.errors import NotFound
from profscope.server.responses import json_response

PREFIX = "/data/plugin/profile"


def router(ws: Workspace) -> APIRouter:
    r = APIRouter(prefix=PREFIX)

    def scoped_run(request: Request):
        q = request.query_params
        return ws.run(q.get("run"), session_path=q.get("session_path"), run_path=q.get("run_path"))

    @r.get("/runs")
    def runs(request: Request) -> Response:
        q = request.query_params
        return json_response([run.name for run in ws.runs_at(q.get("session_path"), q.get("run_path"))])

    @r.get("/run_tools")
    def run_tools(request: Request) -> Response:
        run = scoped_run(request)
        return json_response([t.name for t in ws.tools(run) if t.implemented])

    @r.get("/hosts")
    def hosts(request: Request) -> Response:
        run = scoped_run(request)
        return json_response([{"hostname": h} for h in ws.hosts(run, request.query_params.get("tag"))])

    @r.get("/module_list")
    def module_list(request: Request) -> Response:
        # XProf answers text/plain: the module names joined by ','.
        return PlainTextResponse(",".join(ws.modules(scoped_run(request))))

    @r.get("/data")
    def data(request: Request) -> Response:
        run = scoped_run(request)
        tool = ws.tool(request.query_params.get("tag"), run)
        host = request.query_params.get("host")
        if host and run.hosts and host not in run.hosts:
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(run.hosts)}")
        raise NotFound(f"tool {tool.name!r} has no converter")  # tools plug in here

    @r.get("/version")
    def version() -> Response:
        return PlainTextResponse(__version__)

    @r.get("/config")
    def config() -> Response:
        # profscope never captures profiles, so the capture button stays hidden.
        return json_response({"enableTabNameLabel": False, "hideCaptureProfileButton": True, "srcPathPrefix": ""})

    return r
