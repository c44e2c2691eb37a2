"""``/api/convert``: a run's conversions on the Dask cluster (app/scale_out.py,
docs/scale_out.md). ``POST ?run=&host=`` submits every host of the run, ``host`` first;
``GET ?run=`` answers each host's state and progress (its workers' events, which every
replica receives). A host whose file this server cannot read with its own credentials is
not submitted: the POST answers 403 naming the file (docs/scale_out.md, Access). Without
``--dask``/``--dask-workers`` both are a 404 that says how to start one (the page's panel,
lib/conversions.js, hides on it)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from profscope.app.workspace import Workspace
from profscope.errors import NotFound
from profscope.server.params import Text
from profscope.server.responses import json_response

NO_DASK = "this server converts without Dask: start profscope with --dask-workers N or --dask ADDRESS"


def _scale_out(ws: Workspace):
    if ws.scale_out is None:
        raise NotFound(NO_DASK)
    return ws.scale_out


def _body(ws: Workspace, scale_out, run) -> dict:
    hosts = scale_out.status(ws, run)
    return {"run": run.name, "hosts": hosts, "done": sum(h["state"] == "done" for h in hosts), "total": len(hosts)}


def router(ws: Workspace) -> APIRouter:
    r = APIRouter(prefix="/api")

    @r.post("/convert")
    def convert(run: Text = None, host: Text = None) -> Response:
        scale_out = _scale_out(ws)
        the_run = ws.run(run)
        submitted = scale_out.submit_run(ws, the_run, first_host=host or None)
        body = _body(ws, scale_out, the_run)
        body["submitted"] = len(submitted)
        return json_response(body, status=202)

    @r.get("/convert")
    def convert_status(run: Text = None) -> Response:
        scale_out = _scale_out(ws)
        return json_response(_body(ws, scale_out, ws.run(run)))

    return r
