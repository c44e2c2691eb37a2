"""Every tool profscope shows, declared once: one row per tool.

A row holds everything the rest of profscope derives from: the tool's name (its XProf
tag, ``tag=`` in ``/data/plugin/profile/data``), title and summary; the typed query it
takes (app/queries.py, whose fields carry their own bounds: the server validates the
data route's parameters from it); its producer for each run kind, or :data:`NOT_FOR`
where the tool has nothing to show for that kind; whether a run has the input it reads;
how it answers (a cached JSON payload, or JSON streamed from an index; an HTML page when
the query asks for one); the page modules that draw it in the dashboard; and whether
XProf has the tool (XProf's ``run_tools`` lists only those). The workspace, the XProf
data API, ``/api/run``, the dashboard's page list and the architecture test all read this
table: adding a tool is a tool module, one row here and one page module
(docs/architecture.md, "Where to change what").

Tools are listed (``run_tools``, the tool picker) in XProf's order,
:data:`XPROF_TOOL_ORDER`, profscope's own after them. The order of :data:`TOOLS` is the
dashboard's: its page modules declare their URL keys in that order, which is the order
of the keys in a link.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profscope.app import tool_pages
from profscope.app.summary import Analysis, complete_host
from profscope.app.compiled_memory import CompiledMemory, complete_query
from profscope.app.oom import OomAssessment
from profscope.app.op_stats import OpStats
from profscope.app.pprofs import Pprofs
from profscope.app.queries import (MemoryProfileQuery, MemoryViewerQuery, OomRiskQuery, OpProfileQuery, OpStatsQuery,
                                   Query, StepsOpsQuery, SummaryQuery, XprofTraceQuery)
from profscope.app.runtime_memory import RuntimeMemory
from profscope.app.snapshots import Snapshots
from profscope.app.traces import Traces
from profscope.app.profile_steps import ProfileSteps
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind

if TYPE_CHECKING:
    from profscope.app.workspace import Workspace

# A producer: ``(workspace, run, query, progress) -> payload``, a Workspace method.
Producer = Callable[["Workspace", Run, Any, Any], dict]
# The explicit "this tool has nothing for runs of this kind" of a row's producers.
NOT_FOR = None


class Answer(enum.Enum):
    JSON = "json"  # a payload made once per input and query, kept gzip-compressed in the cache
    STREAM = "stream"  # JSON made in pieces for each request from an index (never cached whole)


@dataclass(frozen=True, slots=True)
class Page:
    """An HTML answer of the data route instead of the JSON one, when the query's ``flag``
    field is set: ``data(workspace, run, query)`` builds the plain values that the frontend's
    ``template`` displays."""

    flag: str
    template: str
    data: Callable[["Workspace", Run, Any], dict]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str  # XProf's tag
    title: str
    summary: str
    query: type[Query]
    producers: Mapping[RunKind, Producer | None]  # every run kind: a producer or NOT_FOR
    # whether a run of a kind the tool is for holds what it reads (beyond its kind)
    has_input: Callable[["Workspace", Run], bool]
    pages: tuple[str, ...]  # the dashboard's page modules (static/pages/) that draw it
    answer: Answer = Answer.JSON
    stream: Callable[["Workspace", Run, Any], Iterator[bytes]] | None = None  # Answer.STREAM's pieces
    page: Page | None = None
    # Made before the payload, in the server process: parts that can be built at once (on
    # the cluster, or in several workers) rather than one by one inside its conversion.
    prepare: Callable[["Workspace", Run, Any], None] | None = None
    # What a request may leave out, filled in before the cache key is made, so that one
    # answer has one key (the same conversion is not made twice under two keys).
    complete: Callable[[Run, Any], Query] | None = None
    xprof: bool = True  # XProf has this tool: run_tools lists it (an XProf client knows the tag)
    # True for an input small enough to convert in the server process: a worker's fork and
    # the imports it makes anew cost more than the conversion (docs/performance.md, issue 40)
    in_process: Callable[["Workspace", Run, Any], bool] | None = None
    aliases: tuple[str, ...] = ()  # other names XProf's clients use for it
    # Its diff against a base (app/compare.py, docs/compare.md): ``"module:function"`` under
    # profscope.tools, ``function(base, current, *, base_ref, current_ref, link)``; None: the
    # tool has nothing to compare (its query takes no ``base``)
    compare: str | None = None
    version: int = 1  # bump when the payload changes: it is part of the cache key
    # The tools whose payloads its answer is made of (the Summary reads Steps & ops, OOM
    # risk...): their versions are part of its cache key too (:func:`cache_version`), so a
    # changed Steps & ops answer is not summarised from a stale cached Summary.
    reads: tuple[str, ...] = ()
    run_kinds: frozenset[RunKind] = field(init=False)

    def __post_init__(self):
        missing = set(RunKind) - set(self.producers)
        if missing:
            raise ValueError(f"tool {self.name!r}: say NOT_FOR or give a producer for {sorted(k.value for k in missing)}")
        if (self.answer is Answer.STREAM) != (self.stream is not None):
            raise ValueError(f"tool {self.name!r}: a streamed answer needs its stream, and only it")
        if self.compare is not None and "base" not in self.query.params():
            raise ValueError(f"tool {self.name!r}: a compare needs its query's base fields")
        if self.page is not None and self.page.flag not in self.query.params():
            raise ValueError(f"tool {self.name!r}: {self.query.__name__} has no field {self.page.flag!r}")
        object.__setattr__(self, "run_kinds", frozenset(k for k, p in self.producers.items() if p is not NOT_FOR))

    def listing(self) -> dict:
        """The tool as ``/api/run`` lists it: its name, title and summary."""
        return {"name": self.name, "title": self.title, "summary": self.summary}

    def applies_to(self, run: Run) -> bool:
        return run.kind in self.run_kinds

    def producer(self, run: Run) -> Producer:
        return self.producers[run.kind]

    def asks_page(self, query: Query) -> bool:
        return self.page is not None and bool(getattr(query, self.page.flag))


def _first_host(run: Run, query: Query) -> Query:
    """No host is the run's first (RuntimeMemory.xplane_memory_profile): the page and XProf
    ask with the host, OOM risk of a one-host run without; before issue 32 the two were
    two keys, and a cold memory profile converted the file twice. For every query with a
    ``host`` field (the memory profile's, the op statistics')."""
    if query.host is None and run.kind is RunKind.PROFILE and run.hosts:
        return query.but(host=run.hosts[0])
    return query


def _reads_xplanes(ws: Workspace, run: Run) -> bool:
    """XProf 2.24 reads a profile session's xplanes only: a session holding just
    ``*.trace.json.gz`` gets no tool there (run_tools), nor here."""
    return run.kind is not RunKind.PROFILE or bool(run.files_of(FileKind.XPLANE))


def _has_modules(ws: Workspace, run: Run) -> bool:
    """XProf: only when the profile carries HLO protos (or a dump its modules)."""
    return bool(ws.modules(run))


def _for(**producers: Producer | None) -> dict[RunKind, Producer | None]:
    """A row's producers by run kind's name (``profile=..., xla_dump=NOT_FOR``). Every kind
    is named, NOT_FOR included: a new run kind is then a decision for every tool (a row
    that leaves one out is refused when the table is built)."""
    return {RunKind(name): producer for name, producer in producers.items()}


TOOLS: tuple[Tool, ...] = (
    Tool(
        "summary",
        tool_pages.title("summary"),
        "What is wrong and what to do: status, key metrics, findings P0-P2 with evidence, impact and fix.",
        SummaryQuery,
        # profscope's own (XProf's managed summary.html, issue 35): docs/analysis.md. Listed
        # first, the page a run opens on (LISTED_FIRST).
        _for(profile=Analysis.analysis, xla_dump=Analysis.analysis, torch_snapshot=Analysis.analysis,
             chrome_trace=Analysis.analysis, pprof=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("summary"),
        reads=("steps_ops", "oom_risk", "memory_profile", "memory_viewer"),
        prepare=Analysis.summary_hosts_first,
        complete=complete_host,
        xprof=False,
        compare="compare_verdicts:diff_summary",
    ),
    Tool(
        "memory_viewer",
        tool_pages.title("memory_viewer"),
        "What the XLA compiler planned: heap over program order, buffers at peak, padding.",
        MemoryViewerQuery,
        _for(profile=CompiledMemory.memory_viewer, xla_dump=CompiledMemory.memory_viewer,
             torch_snapshot=NOT_FOR, chrome_trace=NOT_FOR, pprof=NOT_FOR),
        _has_modules,
        pages=tool_pages.pages("memory_viewer"),
        page=Page("view_memory_allocation_timeline", "memory_viewer_timeline.html",
                  CompiledMemory.memory_viewer_timeline),
        in_process=CompiledMemory.small_module,
        complete=complete_query,
        version=4,  # 2: profscope.heapEventKinds/heapEventBuffers/smallBuffersAtPeak, page view heapPoints;
        # 3: a text-only dump's liveRange from *-live-range.txt, with the heap over program order;
        # 4: profscope.peakBuffers (every buffer summed into the peak, exact bytes: the module compare)
        compare="compare_memory_viewer:diff",
    ),
    Tool(
        "memory_profile",
        tool_pages.title("memory_profile"),
        "What the allocator really did over time: peak, breakdown at peak, leaks.",
        MemoryProfileQuery,
        # XProf's schema for every run kind (XProf's page reads nothing else); the
        # dashboard reads the richer payloads of /api/memory_profile and /api/snapshot/...
        _for(profile=RuntimeMemory.xplane_memory_profile,
             chrome_trace=RuntimeMemory.torch_memory_profile_xprof,
             torch_snapshot=Snapshots.snapshot_memory_profile_xprof,
             # JAX device-memory profiles: profscope's own payload (XProf reads no pprof)
             pprof=Pprofs.pprof_memory_profile,
             xla_dump=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("memory_profile"),
        complete=_first_host,
        version=5,  # 2: XProf's schema for traces and snapshots too (tools/memory_profile_xprof.py); 3: profiles without allocator events are not grouped;
        # 4: a trace's devices highest peak first, reserved null when not recorded, XProf's timeline sampled from every event, capacity totalGlobalMem
        # 5: traces and snapshots carry profscope.allocators[id].summary.allocations / deallocations (every event, as an xplane's)
        compare="compare_memory_profile:diff",
    ),
    Tool(
        "trace_viewer@",
        tool_pages.title("trace_viewer@"),
        "What ran when: host threads, device streams, XLA ops, steps.",
        XprofTraceQuery,
        # XProf's trace_viewer@ JSON; the dashboard reads windows of the same index
        # through /api/trace/... (server/trace_api.py)
        _for(profile=Traces.trace_viewer_xprof, chrome_trace=Traces.trace_viewer_xprof,
             xla_dump=NOT_FOR, torch_snapshot=NOT_FOR, pprof=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("trace_viewer@"),
        answer=Answer.STREAM,
        stream=Traces.trace_xprof_stream,
        aliases=("trace_viewer",),  # XProf's frontend and older clients leave out the streaming '@'
    ),
    Tool(
        "overview_page",
        tool_pages.title("overview_page"),
        "XProf's overview page: the step-time graph of XProf's steps, with its input-bound statement.",
        OpStatsQuery,
        # XProf's 7 DataTables for XProf's own page, the step-time graph equal to XProf's
        # (tools/xprof_overview.py); profscope's dashboard shows its run overview instead
        # (XPROF_OVERVIEW_TAGS, page_tool)
        _for(profile=ProfileSteps.overview_page, xla_dump=NOT_FOR, torch_snapshot=NOT_FOR, chrome_trace=NOT_FOR, pprof=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("overview_page"),
        complete=_first_host,
        version=2,  # 2: ALL_HOSTS merged, task and host counts, a TPU profile's steps
    ),
    Tool(
        "op_profile",
        tool_pages.title("op_profile"),
        "The device ops as a tree (program, category, op) with their time, as XProf's HLO op profile.",
        OpProfileQuery,
        # XProf's op_profile JSON for XProf's own page; GPU/ROCm and TPU TensorCore device
        # planes (a TPU's SparseCore planes: a 404 saying so, formats/xplane_op_metrics.py)
        _for(profile=OpStats.op_profile, xla_dump=NOT_FOR, torch_snapshot=NOT_FOR, chrome_trace=NOT_FOR, pprof=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("op_profile"),
        complete=_first_host,
        version=2,  # 2: TPU profiles (were a 404), with each fusion's fused instructions
    ),
    Tool(
        "hlo_stats",
        tool_pages.title("hlo_stats"),
        "Every HLO op ranked by its device time, as XProf's HLO op stats.",
        OpStatsQuery,
        # XProf's DataTable JSON for XProf's own page; GPU/ROCm and TPU TensorCore device
        # planes (a TPU's SparseCore planes: a 404 saying so, formats/xplane_op_metrics.py)
        _for(profile=OpStats.hlo_stats, xla_dump=NOT_FOR, torch_snapshot=NOT_FOR, chrome_trace=NOT_FOR, pprof=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("hlo_stats"),
        complete=_first_host,
        version=3,  # 2: source_info (file:line, the stack in its title); 3: TPU TensorCore planes
    ),
    Tool(
        "steps_ops",
        tool_pages.title("steps_ops"),
        "Why is my step slow: step time by category and device idle, and every device op ranked by its time.",
        StepsOpsQuery,
        # profscope's own (XProf splits it over overview_page, hlo_stats, op_profile,
        # kernel_stats): the answer of /api/steps_ops, docs/steps_and_ops.md
        _for(profile=Traces.steps_ops_tool, chrome_trace=Traces.steps_ops_tool,
             xla_dump=NOT_FOR, torch_snapshot=NOT_FOR, pprof=NOT_FOR),
        _reads_xplanes,
        pages=tool_pages.pages("steps_ops"),
        complete=_first_host,
        xprof=False,
        version=7,  # 2: ops[] rows' devices, step_category, in_step; xplane steps and their step windows; 3: share_of, PyTorch shares of every GPU's time, steps[].devices[].name; 4: ALL_HOSTS with an unreadable host answers, its row an error;
        # 5: a PyTorch answer names its categories and step_source; 6: an xplane's step windows from trace_window_ps; 7: a TPU's barrier-cores is a collective
        compare="compare_steps_ops:diff",
    ),
    Tool(
        "oom_risk",
        tool_pages.title("oom_risk"),
        "Peak vs capacity, headroom, and what to cut.",
        OomRiskQuery,
        _for(profile=OomAssessment.oom_risk, xla_dump=OomAssessment.oom_risk,
             torch_snapshot=OomAssessment.oom_risk, chrome_trace=OomAssessment.oom_risk,
             pprof=OomAssessment.oom_risk),
        _reads_xplanes,
        pages=tool_pages.pages("oom_risk"),
        prepare=OomAssessment.assess_hosts_first,
        xprof=False,
        version=4,  # 2: a multi-host profile is rated by its worst host (hosts, finding.host);
        # 3: default module = the one that ran most (moduleChoice); 4: the worst step module,
        # overCapacity, contributorsNote/contributorsPeakBytes, a snapshot's peak reserved over the trace
        compare="compare_verdicts:diff_oom_risk",
    ),
)

# XProf's tool_sort_order (profile_plugin.py ``_get_active_tools``).
XPROF_TOOL_ORDER = (
    "overview_page", "trace_viewer", "trace_viewer@", "graph_viewer", "op_profile", "hlo_op_profile",
    "input_pipeline_analyzer", "input_pipeline", "kernel_stats", "memory_profile", "memory_viewer", "roofline_model",
    "perf_counters", "pod_viewer", "framework_op_stats", "tensorflow_stats", "hlo_op_stats", "hlo_stats",
    "inference_profile", "megascale_stats",
)

# XProf tags profscope answers with its run overview (the page with no tool).
XPROF_OVERVIEW_TAGS = frozenset({"overview_page"})
# profile_plugin.py: with two or more hosts, these XProf tools get the merged "ALL_HOSTS"
# instead of (ONLY) or beside (SUPPORTED) the single hosts, in the hosts list.
XPROF_ALL_HOSTS_ONLY = frozenset({"overview_page", "pod_viewer", "smart_suggestion"})
# The tools whose query takes host=ALL_HOSTS (steps_ops: every host side by side;
# overview_page: XProf's merge of the hosts): the data route lets it through for them.
ANSWERS_ALL_HOSTS = frozenset({"steps_ops", "overview_page", "summary"})
XPROF_ALL_HOSTS_SUPPORTED = frozenset(
    {"input_pipeline_analyzer", "framework_op_stats", "kernel_stats", "overview_page", "pod_viewer", "megascale_stats"}
)


def get(name: str) -> Tool | None:
    return next((t for t in TOOLS if name == t.name or name in t.aliases), None)


# profscope's tools listed before XProf's: the Summary is the page a run opens on (issue 35)
LISTED_FIRST = ("summary",)


def _listed(tool: Tool) -> tuple[int, int, int]:
    if tool.name in LISTED_FIRST:
        return 0, LISTED_FIRST.index(tool.name), 0
    order = XPROF_TOOL_ORDER.index(tool.name) if tool.name in XPROF_TOOL_ORDER else len(XPROF_TOOL_ORDER)
    return 1, order, TOOLS.index(tool)


def cache_version(tool: Tool, _seen: frozenset[str] = frozenset()) -> int | list:
    """The version part of a tool payload's cache key: its own version and, recursively,
    those of the tools it reads."""
    if tool.name in _seen:
        raise ValueError(f"tool {tool.name!r} reads itself (through {sorted(_seen)})")
    if not tool.reads:
        return tool.version  # (the key every tool had before ``reads``)
    return [tool.version, *([name, cache_version(get(name), _seen | {tool.name})] for name in tool.reads)]


def for_run(run: Run) -> list[Tool]:
    """Every tool for a run's kind (whether it has input or not), in XProf's order."""
    return sorted((t for t in TOOLS if t.applies_to(run)), key=_listed)


def page_rows() -> tool_pages.Rows:
    """Each tool's name, title and page modules: what the dashboard's page shows of it
    (the app's ``/``; the quick start's reads app/tool_pages.py, where the rows take them
    from, without importing this table)."""
    return tuple((t.name, t.title, t.pages) for t in TOOLS)


def page_modules() -> list[str]:
    """The dashboard's page modules, each once, in the table's order."""
    return tool_pages.page_modules(page_rows())


def page_tool(tag: str) -> str | None:
    """The dashboard page (its ``tool=`` value) for an XProf tool tag, "" for the run
    overview, None where profscope has none. XProf's links name tools as
    ``/data/plugin/profile/tools`` does, a trailing ``@`` or ``^`` marking how XProf
    converts it (``trace_viewer@`` streams)."""
    bare = tag.strip().rstrip("@^")
    if bare in XPROF_OVERVIEW_TAGS:
        return ""
    tool = get(tag.strip()) or get(bare) or get(f"{bare}@")
    return tool.name if tool is not None else None
