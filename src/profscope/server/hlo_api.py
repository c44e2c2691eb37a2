"""The HLO and source routes (issue 37, docs/links.md): a module's HLO text, one
instruction's panel (text, neighbourhood, trace slices, source) and a few lines of a
source file, read only inside the source roots (app/hlo_links.py)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from profscope.app.workspace import Workspace
from profscope.server.params import Count, Text
from profscope.server.responses import json_response


def router(ws: Workspace) -> APIRouter:
    r = APIRouter(prefix="/api")

    @r.get("/hlo")
    def hlo(run: Text = None, module_name: Text = None, host: Text = None,
            instr: Text = None) -> Response:
        """The module's whole HLO text (XLA's HloModule::ToString shape) and, with
        ``instr``, that instruction's line (``instruction``; ``missing`` when the module has
        no instruction of that name)."""
        return json_response(ws.hlo_view(ws.run(run), module_name, host, instr))

    @r.get("/hlo/instruction")
    def hlo_instruction(run: Text = None, module_name: Text = None, host: Text = None, instr: Text = None,
                        hops: Count = None) -> Response:
        """A buffer's instruction: its text, its operands and users ``hops`` edges out
        (1 by default, at most 4), its and its last use's slices in the trace, its source."""
        return json_response(ws.hlo_instruction(ws.run(run), module_name, host, instr, hops))

    @r.get("/source")
    def source(run: Text = None, file: Text = None, line: Count = None, context: Count = None) -> Response:
        """``{file, path, line, first_line, lines, root}``: the lines around ``line`` of a
        source file found under the log directory or a --source-root; 4xx outside them."""
        if run is not None:
            ws.run(run)  # an unknown run is its 404, as everywhere
        return json_response(ws.source_lines(file, line, context))

    return r
