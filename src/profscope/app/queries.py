"""What a request asks of a tool, as typed values: the server parses and checks every
query parameter once and hands one of these to the workspace, which keys its cache on
it. Field names are XProf's parameter names where XProf has one.

Each field says what values it takes as plain metadata (:func:`param`: the bounds of a
number, the length of a text), so that the server turns any query type into its
parameters' validation with one function (server/params.py ``query_parser``) and no
route restates a bound. Why bounds on every number: a fuzz of every route found values
that got through loose parsers and broke later (a 500): ``10^400`` (int() refuses over
4,300 digits; a 400-digit one passed and then could not be stored as JSON), ``1e309``
(infinity), ``²`` (``str.isdigit`` is true for it, ``int`` refuses it). Every count, id,
byte size and time here fits a signed 64-bit integer.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

MAX_INT = (1 << 63) - 1
MAX_TEXT = 8192  # characters of a run, host or module name, a search text, a flag

# The bounds the trace viewer's numbers are checked against: part of the queries'
# contract, so that the server checks them without importing a tool.
TRACE_MAX_RESOLUTION = 100_000  # pixels of /api/trace/window
TRACE_MAX_SEARCH_LIMIT = 10_000  # matches of /api/trace/search
XPROF_TRACE_MAX_RESOLUTION = 10_000_000  # trace_viewer@'s resolution (XProf's own has no bound)


def param(*, key: bool = True, whole: bool = False, **bounds: Any) -> Any:
    """A query field, None unless the request sets it. ``bounds`` are the limits a value
    keeps, in annotated-types' words (``ge``, ``gt``, ``le``, ``lt``, ``max_length``,
    ``allow_inf_nan``). ``whole``: an integer that may be written as a float (``12.0``).
    ``key=False``: the field chooses how the answer is shown, not what it holds, so it is
    left out of the payload's cache key."""
    return field(default=None, metadata={"bounds": bounds, "whole": whole, "key": key})


def text(**more: Any) -> Any:
    return param(max_length=MAX_TEXT, **more)


def integer() -> Any:
    return param(ge=-MAX_INT, le=MAX_INT)


def count(*, least: int = 0, most: int = MAX_INT) -> Any:
    """A count, an index, a size or an id: ``least``..``most``."""
    return param(ge=least, le=most)


def size() -> Any:
    """A byte size that must be positive (a capacity)."""
    return param(gt=0, le=MAX_INT)


def share() -> Any:
    """A fraction of a capacity (a threshold)."""
    return param(gt=0, le=1.5, allow_inf_nan=False)


def ms() -> Any:
    """A time in milliseconds."""
    return param(ge=-1e15, le=1e15, allow_inf_nan=False)


def flag() -> Any:
    return param()


# The compare fields (issue 36, docs/compare.md "The query"): set, the data route answers
# the diff of two single answers (app/compare.py) instead of one. They are the base's
# names only, each checked against the catalog (a run's name, never a path).
COMPARE_FIELDS = ("base", "base_host", "base_module")


def compares(query: Any) -> bool:
    """Whether a query asks for a diff: one of its compare fields is set."""
    return any(getattr(query, name, None) is not None for name in COMPARE_FIELDS)


@dataclass(frozen=True, slots=True)
class Query:
    def cache_parts(self) -> list[list]:
        """The fields that are set and say what the payload holds, sorted by name: part
        of the payload's cache key."""
        return sorted([f.name, getattr(self, f.name)] for f in fields(self)
                      if getattr(self, f.name) is not None and f.metadata.get("key", True))

    def fields(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def but(self, **changes) -> Query:
        return type(self)(**{**self.fields(), **changes})

    @classmethod
    def params(cls) -> dict[str, tuple[type, dict]]:
        """Each field's value type (``int``, ``float``, ``str``, ``bool``) and metadata, in
        declaration order: what the server validates a request's parameters against."""
        return _params(cls)


@cache
def _params(cls: type[Query]) -> dict[str, tuple[type, dict]]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        kinds = [t for t in typing.get_args(hints[f.name]) if t is not type(None)] or [hints[f.name]]
        out[f.name] = (kinds[0], dict(f.metadata))
    return out


@dataclass(frozen=True, slots=True)
class MemoryViewerQuery(Query):
    module_name: str | None = text()
    memory_space: int | None = count()  # XLA's memory space (color); None is 0, the device's HBM
    host: str | None = text()
    view: str | None = text()  # "page": the browser's decimated copy of a large result
    # XProf's link "view memory allocation timeline" asks the same data route for a page
    # (profile_plugin.py passes the flag on; raw_to_tool_data.py answers text/html): any
    # non-empty value counts, as request.args.get there.
    view_memory_allocation_timeline: str | None = text(key=False)
    base: str | None = text()  # compare: the base run (docs/compare.md); default the same run
    base_host: str | None = text()  # compare: the base host; default the same host
    base_module: str | None = text()  # compare: the base module's name; default the same name


@dataclass(frozen=True, slots=True)
class MemoryProfileQuery(Query):
    host: str | None = text()
    # a JAX device-memory profile run (pprof) of several files: the one shown (its file
    # name; default the last) and the one it is diffed against (by stack, pprof -diff_base)
    profile: str | None = text()
    base_profile: str | None = text()
    base: str | None = text()  # compare: the base run (docs/compare.md); default the same run
    base_host: str | None = text()  # compare: the base host; default the same host


@dataclass(frozen=True, slots=True)
class OpStatsQuery(Query):
    host: str | None = text()


@dataclass(frozen=True, slots=True)
class StepsOpsQuery(Query):
    """Steps & ops (profscope's ``steps_ops`` tool, ``/api/steps_ops``)."""

    host: str | None = text()  # a host, or XProf's ALL_HOSTS for every host's steps side by side
    within_steps: bool | None = flag()  # the ops table: only occurrences inside steps (None: when there are steps)
    step: str | None = text()  # the ops table: one step's occurrences only (the step's name, "12")
    base: str | None = text()  # compare: the base run (docs/compare.md); default the same run
    base_host: str | None = text()  # compare: the base host; default the same host


@dataclass(frozen=True, slots=True)
class SummaryQuery(Query):
    """The Summary (profscope's ``summary`` tool, docs/analysis.md)."""

    host: str | None = text()  # a host, or XProf's ALL_HOSTS for one summary of every host (a multi-host default)
    # the memory part's capacity, as OomRiskQuery's: a snapshot names no device
    capacity_bytes: int | None = size()  # wins over device_memory
    device_memory: str | None = text()  # a size ("80GiB") or a device name ("A100")
    base: str | None = text()  # compare: the base run (docs/compare.md); default the same run
    base_host: str | None = text()  # compare: the base host; default the same host


@dataclass(frozen=True, slots=True)
class OpProfileQuery(Query):
    host: str | None = text()
    group_by: str | None = text()  # XProf's: "program" (its default) or "category"


@dataclass(frozen=True, slots=True)
class OomRiskQuery(Query):
    host: str | None = text()
    module_name: str | None = text()
    capacity_bytes: int | None = size()  # wins over device_memory
    device_memory: str | None = text()  # a size ("80GiB") or a device name ("A100"), as typed
    device: str | None = text()  # the device to assume when the profile names none
    threshold_medium: float | None = share()
    threshold_high: float | None = share()
    # The planner (tools/oom_plan.py): the batch (or sequence) size to predict the peak
    # at, and how many devices the sharding change spreads the state over.
    batch: int | None = count(least=1)
    shards: int | None = count(least=2, most=1 << 20)
    fit_with: str | None = text()  # other runs (comma-separated) whose compilations the batch fit may use
    # The run was JAX on a GPU: its capacity is XLA_PYTHON_CLIENT_MEM_FRACTION (default
    # 0.75, or jax_mem_fraction) of the device's memory, a requested one included.
    jax_gpu: bool | None = flag()
    jax_mem_fraction: float | None = param(gt=0, le=1, allow_inf_nan=False)
    base: str | None = text()  # compare: the base run (docs/compare.md); default the same run
    base_host: str | None = text()  # compare: the base host; default the same host
    base_module: str | None = text()  # compare: the base module's name; default the same name


@dataclass(frozen=True, slots=True)
class SnapshotQuery(Query):
    host: str | None = text()  # cuda:N
    start: int | None = integer()
    end: int | None = integer()
    x: str | None = text()  # "index" or "time"
    max_points: int | None = integer()
    top: int | None = integer()
    event: int | None = integer()
    stack: int | None = integer()
    filtered: bool | None = flag()  # stack: "0" shows the allocator's own frames too
    other: str | None = text()  # compare: the other snapshot run
    other_host: str | None = text()
    q: str | None = text()  # events: an address or a stack frame's text to search for
    base: str | None = text()  # compare: the other snapshot run (docs/compare.md); ``other`` is its alias
    base_host: str | None = text()  # compare: the other snapshot's device; ``other_host`` is its alias


@dataclass(frozen=True, slots=True)
class TraceQuery(Query):
    """The trace viewer's own API (``/api/trace/window|event|search|export``)."""

    host: str | None = text()  # one host (an xplane's host, a Chrome trace's file name)
    hosts: str | None = text()  # several, comma-separated (wins over host); default: the first
    start_ms: float | None = ms()  # ms from the selected hosts' origin; None: the trace's start
    end_ms: float | None = ms()  # None: the trace's end
    # pixels; None: trace_viewer.DEFAULT_RESOLUTION
    resolution: int | None = count(least=1, most=TRACE_MAX_RESOLUTION)
    id: int | None = count()  # an event id, from a window or a search
    q: str | None = text()  # the text to search event names for
    # matches; None: trace_viewer.DEFAULT_SEARCH_LIMIT
    limit: int | None = count(least=1, most=TRACE_MAX_SEARCH_LIMIT)
    offset: int | None = count()  # search: the first match answered (0-based, in the search's order); None: 0
    within_steps: bool | None = flag()  # /api/steps_ops: StepsOpsQuery's
    step: str | None = text()  # /api/steps_ops: StepsOpsQuery's
    track: int | None = count()  # /api/trace/counter: a counter's track id, from a window
    t: float | None = ms()  # /api/trace/counter: the point's time (ms, the page's clock)
    peak: str | None = text()  # /api/trace/counter: "window" or "all": the counter's largest sample
    # /api/trace/window: "json" (None: the same) or "columns", the binary answer the page reads
    format: str | None = text(key=False)


@dataclass(frozen=True, slots=True)
class XprofTraceQuery(Query):
    """XProf's ``data?tag=trace_viewer@`` (profile_plugin.py, trace_view_options.cc)."""

    host: str | None = text()
    hosts: str | None = text()
    start_time_ms: float | None = ms()  # XProf's absolute ms; None or 0: the trace's start
    end_time_ms: float | None = ms()  # None or 0: the trace's end
    resolution: int | None = count(most=XPROF_TRACE_MAX_RESOLUTION)  # pixels, 0: no filter; None: 8000
    event_name: str | None = text()  # an event-details request: the event's name,
    duration_ms: float | None = ms()  # its duration
    # and its args.uid (XProf's UI may send it as a float: ``unique_id=12.0``)
    unique_id: int | None = param(whole=True, ge=0, lt=2**63, allow_inf_nan=False)
