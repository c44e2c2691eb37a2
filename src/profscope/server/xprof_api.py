"""XProf's data API (``/data/plugin/profile/...``), same paths, parameters and response
shapes as XProf 2.24 (plugin/xprof/profile_plugin.py), so XProf clients work unchanged.

Deliberate differences, all on error paths: an unknown run, host or tool is a 404 with
a JSON error instead of XProf's empty 200 answer, and ``session_path`` / ``run_path``
must lie inside the log directory.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from profscope import __version__
from profscope.app import tool_table
from profscope.app.queries import compares
from profscope.app.tool_table import Answer
from profscope.app.workspace import Workspace
from profscope.errors import NotFound, ProfscopeError
from profscope.frontend import render
from profscope.model.catalog import RunKind
from profscope.server.params import parse_query
from profscope.server.responses import gzip_json_response, json_response, pieces_response

PREFIX = "/data/plugin/profile"
# The XProf release whose API this module reproduces; ``version`` reports it so clients
# that gate features on it behave as they would against that XProf.
XPROF_API_VERSION = "2.24.2"

# profile_plugin.py: the merged host of a run with two or more hosts, for the tools
# tool_table.XPROF_ALL_HOSTS_* name.
ALL_HOSTS = "ALL_HOSTS"

# What XProf's module_list says for a profile without any HLO module.
NO_MODULE = "NO_MODULE"


def hosts_for_tool(hosts: list[str], tool: str | None) -> list[str]:
    """XProf's ``hosts_from_xplane_filenames``: the ALL_HOSTS rules, then code-point order."""
    out = set(hosts)
    if len(out) > 1:
        if tool in tool_table.XPROF_ALL_HOSTS_ONLY:
            out = {ALL_HOSTS}
        elif tool in tool_table.XPROF_ALL_HOSTS_SUPPORTED:
            out.add(ALL_HOSTS)
    return sorted(out)


def router(ws: Workspace) -> APIRouter:
    r = APIRouter(prefix=PREFIX)

    def scoped_run(request: Request):
        q = request.query_params
        return ws.run(q.get("run"), session_path=q.get("session_path"), run_path=q.get("run_path"))

    def trace_hosts(run) -> list[str]:
        """A Chrome-trace run's hosts: XProf's page needs one to select before it asks for
        data; a trace is named by its file, as the trace viewer names it
        (Workspace.trace_sources)."""
        return [h for h, _ in ws.trace_sources(run)] if run.kind is RunKind.CHROME_TRACE else []

    @r.get("/runs")
    def runs(request: Request) -> Response:
        q = request.query_params
        return json_response([run.name for run in ws.runs_at(q.get("session_path"), q.get("run_path"))])

    @r.get("/run_tools")
    def run_tools(request: Request) -> Response:
        run = scoped_run(request)
        try:
            # XProf's list only: a tool XProf lacks is served under tag= like the others,
            # but an XProf frontend would not know the tag.
            tools = [t.name for t in ws.tools(run) if t.xprof]
            if tools and run.kind is RunKind.TORCH_SNAPSHOT:
                ws.hosts(run)  # reads the snapshot: a file that is none has no tool to offer
        except ProfscopeError:
            # XProf's run_tools answers 200 with no tool for a run it cannot read
            # (profile_plugin.py: tool names from an unreadable xspace are an empty list),
            # so a client that lists tools at start-up keeps working; data?... still
            # answers the 4xx that names the file and the problem.
            tools = []
        return json_response(tools)

    @r.get("/hosts")
    def hosts(request: Request) -> Response:
        run = scoped_run(request)
        hosts = hosts_for_tool(trace_hosts(run) or ws.hosts(run), request.query_params.get("tag"))
        return json_response([{"hostname": h} for h in hosts])

    @r.get("/module_list")
    def module_list(request: Request) -> Response:
        # XProf answers text/plain: the module names joined by ','.
        run = scoped_run(request)
        modules = ws.modules(run)
        if not modules and run.kind is RunKind.PROFILE and run.hosts:
            modules = [NO_MODULE]
        return PlainTextResponse(",".join(modules))

    @r.get("/data")
    def data(request: Request) -> Response:
        """Every tool's data: the parameters are those of the tool's query type
        (app/tool_table.py), checked before anything is read; the answer is as the tool's
        row says (a cached payload, pieces of an index, or a page)."""
        run = scoped_run(request)
        tool = ws.tool(request.query_params.get("tag"), run)
        query = parse_query(tool.query, request.query_params)
        host, known = getattr(query, "host", None), run.hosts or trace_hosts(run)
        # ALL_HOSTS is a host of the tools that answer every host at once (steps_ops, overview_page)
        if host and known and host not in known and not (host == ALL_HOSTS and tool.name in tool_table.ANSWERS_ALL_HOSTS):
            raise NotFound(f"run {run.name!r} has no host {host!r}; hosts: {', '.join(known)}")
        if tool.answer is Answer.STREAM:
            # Answered from an index per request (trace_viewer@: per window), not stored in the
            # cache; the pieces are read here, so a bad parameter is a 4xx before any is sent
            return pieces_response(request, ws.tool_stream(run, tool, query))
        if compares(query):
            # a base is given: the diff of two cached answers (app/compare.py, docs/compare.md)
            return json_response(ws.compare(run, tool, query))
        if tool.asks_page(query):
            return HTMLResponse(render.page(tool.page.template, **ws.tool_page(run, tool, query)))
        return gzip_json_response(request, ws.tool_data(run, tool, query))

    @r.get("/version")
    def version() -> Response:
        return PlainTextResponse(XPROF_API_VERSION, headers={"X-Profscope-Version": __version__})

    @r.get("/config")
    def config() -> Response:
        # XProf's frontend shows its "Capture profile" button unless this says to hide it;
        # the button's dialog calls capture_profile (server/capture_api.py).
        return json_response({"enableTabNameLabel": False, "hideCaptureProfileButton": ws.capture is None,
                              "srcPathPrefix": None})

    return r
