"""``profscope mcp LOGDIR``: the log directory's answers as MCP tools, over stdio, for
coding agents (docs/analysis.md, "MCP").

A front end over the app layer, as the HTTP server is: each tool is one function of
app/agent_tools.py (which reads the tools' payloads through the workspace and its
cache), bound here to the MCP SDK's server (``mcp.server.MCPServer``, the optional extra
``mcp``). The SDK builds each tool's JSON schema from the signature below (names, types,
bounds, descriptions) and answers with the dict as structured content and as JSON text.

Errors: a problem with the input (an unknown run or host, a corrupt or unsafe file) is a
:class:`~profscope.errors.ProfscopeError`; it becomes the tool's error result
(``isError: true``) whose text is the HTTP server's error body, ``{"ok": false,
"status", "error", "file"}``, so an agent reads which file and why. Anything else is the
SDK's "Error executing tool" result, its traceback on stderr; the server goes on.

Only names come in, never a path: runs are looked up among those the workspace found
under its log directory, so nothing outside it is opened (the storage layer's
``safe_relpath`` and realpath check still guard every file the workspace reads).

stdout is the protocol's alone: the SDK's stdio transport points file descriptor 1 at
stderr while it serves, so a stray print (ours, a library's, a conversion worker's)
never corrupts a message; profscope's and the SDK's logs go to stderr.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Annotated, Any

from pydantic import Field

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from profscope import __version__
from profscope.app import agent_tools
from profscope.app.queries import MAX_TEXT
from profscope.app.workspace import Workspace
from profscope.errors import ProfscopeError

log = logging.getLogger("profscope.mcp")

INSTRUCTIONS = """\
profscope reads ML profiles (JAX/TensorFlow xplanes, XLA dumps, PyTorch traces and memory
snapshots) in one log directory. Start with list_runs; then run_summary says what is wrong
with a run (status, findings P0-P2 with evidence, impact and fix); steps_and_ops, \
memory_at_peak and oom_verdict answer the follow-up questions; get_hlo_text,
get_hlo_neighborhood and get_source follow a buffer to its HLO, its runs in the trace and
its source line. Runs and hosts are named as list_runs names them."""

Run = Annotated[str, Field(description="the run, as list_runs names it", min_length=1, max_length=MAX_TEXT)]
Host = Annotated[str | None, Field(description="a host (xplane), a trace file or a snapshot device (cuda:N); "
                                               "default: the run's first", max_length=MAX_TEXT)]
Top = Annotated[int, Field(description="rows to list, largest first", ge=1, le=agent_tools.MAX_TOP)]
Module = Annotated[str, Field(description="the compiled HLO module, as memory_at_peak names it (name(program id))",
                              min_length=1, max_length=MAX_TEXT)]


def _answers(fn):
    """A tool function whose ProfscopeError is the tool's error result, in the HTTP
    server's error shape (the message names the file, ``file`` says which)."""

    @functools.wraps(fn)
    def tool(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ProfscopeError as e:
            raise ToolError(json.dumps(e.to_json())) from e

    return tool


def build(ws: Workspace) -> MCPServer:
    """The MCP server over ``ws``: eight tools, each reading the workspace."""
    server = MCPServer("profscope", version=__version__, instructions=INSTRUCTIONS)

    @server.tool(title="Runs")
    @_answers
    def list_runs(
        prefix: Annotated[str | None, Field(description="only runs whose name starts with this",
                                            max_length=MAX_TEXT)] = None,
        limit: Annotated[int, Field(description="most runs to list", ge=1, le=agent_tools.MAX_RUNS)] = agent_tools.MAX_RUNS,
    ) -> dict[str, Any]:
        """The runs of the log directory: name, kind (profile, xla_dump, chrome_trace,
        torch_snapshot), hosts, files, bytes and the profscope tools that have input for
        each. A run whose files cannot be read has no tools and says why (error, file).
        unsupported: the files profscope recognises but does not read (file, kind, reason, run)."""
        return agent_tools.list_runs(ws, prefix, limit)

    @server.tool(title="Summary")
    @_answers
    def run_summary(
        run: Run,
        host: Annotated[str | None, Field(description="one host's summary, or ALL_HOSTS: the worst host and "
                                                      "every host's status (the default of a multi-host run)",
                                          max_length=MAX_TEXT)] = None,
    ) -> dict[str, Any]:
        """What is wrong with a run and what to do: status (OPTIMAL, NEEDS_ATTENTION, or
        NOT_ASSESSED when nothing could be read), a short summary, key metrics (step time, device busy/idle, categories, memory vs
        capacity) and findings P0-P2, each with what, evidence, impact and fix. The JSON
        of the Summary tool (docs/analysis.md)."""
        return agent_tools.summary(ws, run, host)

    @server.tool(title="Steps & ops")
    @_answers
    def steps_and_ops(
        run: Run,
        host: Annotated[str | None, Field(description="a host or trace file, or ALL_HOSTS for every host's "
                                                      "steps side by side; default: the first", max_length=MAX_TEXT)] = None,
        top: Top = agent_tools.DEFAULT_TOP,
    ) -> dict[str, Any]:
        """Why a step is slow: every step's time with device time by category and device
        idle, what bounds it, then the device ops (kernels of a PyTorch trace) ranked by
        time, the top N kept (ops_total, kernels_total: how many there are). The JSON of
        profscope steps (docs/steps_and_ops.md)."""
        return agent_tools.steps_ops(ws, run, host, top)

    @server.tool(title="Memory at peak")
    @_answers
    def memory_at_peak(
        run: Run,
        host: Host = None,
        source: Annotated[str | None, Field(description="compiled: the memory viewer's buffers at a compiled "
                                                        "module's peak; runtime: the allocator's live allocations at "
                                                        "its peak; default: compiled where the run has modules",
                                            pattern="^(compiled|runtime)$")] = None,
        module: Annotated[str | None, Field(description="compiled: the HLO module (default: the highest peak)",
                                            max_length=MAX_TEXT)] = None,
        memory_id: Annotated[str | None, Field(description="runtime: the allocator (default: the highest peak)",
                                               max_length=MAX_TEXT)] = None,
        top: Top = agent_tools.DEFAULT_TOP,
    ) -> dict[str, Any]:
        """What is live at the memory peak, largest first: a compiled module's buffers
        (name, bytes, shape, op, group) or the allocations live at the allocator's peak
        (op name, bytes, shape, data type, count) of an xplane, a PyTorch snapshot or a
        trace's [memory] events."""
        return agent_tools.memory_at_peak(ws, run, host, source, module, memory_id, top)

    @server.tool(title="OOM verdict")
    @_answers
    def oom_verdict(
        run: Run,
        host: Host = None,
        module: Annotated[str | None, Field(description="the HLO module to rate (default: the worst step module)",
                                            max_length=MAX_TEXT)] = None,
        device_memory: Annotated[str | None, Field(description="the capacity when the files name none: 80GiB, or "
                                                               "a device name (H100, A100-40GB, TPU v5e)",
                                                   max_length=MAX_TEXT)] = None,
        top: Top = 5,
    ) -> dict[str, Any]:
        """Will it fit: the OOM-risk tier (LOW, MEDIUM, HIGH, OOM, UNKNOWN) and why, peak
        against capacity, headroom, modules over capacity, the findings (what to cut among
        them), the largest contributors at the peak and the planner's headline
        (docs/oom_risk.md)."""
        return agent_tools.oom_verdict(ws, run, host, module, device_memory, top)

    _hlo_tools(server, ws)
    return server


def _hlo_tools(server: MCPServer, ws: Workspace) -> None:
    """From a buffer to its HLO, its runs in the trace and its source (app/hlo_links.py)."""

    @server.tool(title="HLO text")
    @_answers
    def get_hlo_text(
        run: Run,
        module: Module,
        host: Host = None,
        instruction: Annotated[str | None, Field(description="lines around this instruction's line",
                                                 max_length=MAX_TEXT)] = None,
        query: Annotated[str | None, Field(description="only the lines holding this text (case-insensitive)",
                                           max_length=MAX_TEXT)] = None,
        lines: Annotated[int, Field(description="most lines to return", ge=1,
                                    le=agent_tools.MAX_HLO_LINES)] = agent_tools.DEFAULT_HLO_LINES,
    ) -> dict[str, Any]:
        """A compiled module's HLO text, as XLA prints it (%name = shape opcode(operands),
        attributes, metadata): from the start, around an instruction, or the lines that hold
        a search text; total_lines says how long the module is."""
        return agent_tools.get_hlo_text(ws, run, module, host, instruction, query, lines)

    @server.tool(title="HLO neighbourhood")
    @_answers
    def get_hlo_neighborhood(
        run: Run,
        module: Module,
        instruction: Annotated[str, Field(description="the HLO instruction (a buffer's defining instruction, an "
                                                      "XLA op's name)", min_length=1, max_length=MAX_TEXT)],
        host: Host = None,
        hops: Annotated[int, Field(description="operand/user edges to walk", ge=0, le=4)] = 1,
    ) -> dict[str, Any]:
        """One HLO instruction and its graph: its line, operands and users (shapes,
        opcodes, lines) hops edges out, its buffer's last user, how many times each ran in
        the trace with the first slice's time and a trace-viewer link, and its source
        file:line (found under a source root or not)."""
        return agent_tools.get_hlo_neighborhood(ws, run, module, instruction, host, hops)

    @server.tool(title="Source lines")
    @_answers
    def get_source(
        run: Run,
        file: Annotated[str, Field(description="the source file as the profile names it (get_hlo_neighborhood's "
                                               "source.file)", min_length=1, max_length=MAX_TEXT)],
        line: Annotated[int | None, Field(description="the line to show, 1-based", ge=1)] = None,
        context: Annotated[int, Field(description="lines either side of it", ge=0, le=50)] = 5,
    ) -> dict[str, Any]:
        """A few lines of a program's source file, read only from inside the log
        directory or a --source-root (the longest suffix of the name that exists there):
        {file, path, line, first_line, lines, root}."""
        return agent_tools.get_source(ws, run, file, line, context)



def serve(ws: Workspace) -> None:
    """Speaks MCP on stdin/stdout until the client closes them."""
    server = build(ws)  # configures logging (the SDK's MCPServer: to stderr)
    log.info("profscope mcp: serving %s over stdio", ws.logdir.url)
    server.run("stdio")
