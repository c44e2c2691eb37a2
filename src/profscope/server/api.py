"""profscope's own JSON API (``/api/...``): what the dashboard needs beyond XProf's API."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from profscope.app import memory_trace_clock
from profscope.app.run_list import run_summary, runs_listing
from profscope.app.workspace import Workspace
from profscope.app.queries import SnapshotQuery
from profscope.server.params import Count, Text, query_params
from profscope.server.responses import gzip_json_response, json_response


SnapshotParams = query_params(SnapshotQuery)


def router(ws: Workspace) -> APIRouter:
    r = APIRouter(prefix="/api")

    @r.get("/runs")
    def runs() -> Response:
        return json_response(runs_listing(ws.logdir, ws.runs()))

    @r.get("/run")
    def run(run: Text = None) -> Response:
        run = ws.run(run)
        body = run_summary(run)
        body["hosts"] = ws.hosts(run)  # a snapshot's devices need a look inside it
        # Tools and modules need a look inside the run's files (cached): only per run,
        # never for the whole catalog, which may hold thousands of sessions.
        body["tools"] = [t.listing() for t in ws.tools(run)]
        body["files"] = [
            {"path": f.path, "size": f.size, "kind": run.kind_of(f).value, "mtime": f.mtime} for f in run.files
        ]
        body["modules"] = ws.modules(run)
        return json_response(body)

    @r.get("/module_peaks")
    def module_peaks(run: Text = None, memory_space: Count = None) -> Response:
        return json_response(ws.module_peaks(ws.run(run), memory_space or 0))

    @r.get("/memory_profile")
    def memory_profile(request: Request, run: Text = None, host: Text = None) -> Response:
        """profscope's memory payload of a PyTorch profiler trace (tools/memory_profile_torch.py):
        devices, breakdown by op and module, steps, leak hints, categories. XProf's data
        API answers the same run in XProf's schema, which has room for none of these.
        ``host``: a rank of a distributed job (else its first rank)."""
        return gzip_json_response(request, ws.torch_memory_payload(ws.run(run), host))

    @r.get("/memory_hosts")
    def memory_hosts(run: Text = None) -> Response:
        """Every host's memory peak of a profile run, worst first, and the roll-up across
        hosts (tools/memory_hosts.py); the memory profile page's "All hosts" section."""
        return json_response(ws.memory_hosts(ws.run(run)))

    @r.get("/trace_clock")
    def trace_clock(run: Text = None, host: Text = None, index: Text = None) -> Response:
        """Where the memory profile's (or a snapshot's) times fall on the trace viewer's clock,
        per allocator / device, or why they have no place there (app/memory_trace_clock.py):
        the pages' "trace viewer at this time" links. ``index=built``: only from a trace
        index already built (``pending`` when not), so that opening a page builds none."""
        return json_response(memory_trace_clock.trace_clock(ws, ws.run(run), host, index))

    @r.get("/snapshot/{view}")
    def snapshot_view(view: str, request: Request, query: SnapshotParams, run: Text = None) -> Response:
        """Views of a PyTorch memory snapshot run (see tools/memory_profile_snapshot.py)."""
        return gzip_json_response(request, ws.snapshot_view(ws.run(run), view, query))

    @r.get("/progress")
    def progress() -> Response:
        body = {"jobs": ws.cache.progress.snapshot()}
        if ws.cache.shared is not None:
            # what this replica took from and gave to the shared record (cache/shared.py)
            body["sharedCache"] = ws.cache.shared.snapshot()
        return json_response(body)

    return r
