"""What a request asks of a tool, as typed values: the server parses and checks every
query parameter once (server/params.py) and hands one of these to the workspace, which
keys its cache on it. Field names are XProf's parameter names where XProf has one."""

from __future__ import annotations

from dataclasses import dataclass, fields



@dataclass(frozen=True, slots=True)
class Query:
    def cache_parts(self) -> list[list]:
        """The fields that are set, sorted by name: part of the payload's cache key."""
        return sorted([f.name, getattr(self, f.name)] for f in fields(self) if getattr(self, f.name) is not None)

    def fields(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def but(self, **changes) -> Query:
        return type(self)(**{**self.fields(), **changes})


@dataclass(frozen=True, slots=True)
class MemoryViewerQuery(Query):
    module_name: str | None = None
    memory_space: int | None = None  # XLA's memory space (color); None is 0, the device's HBM
    host: str | None = None
    view: str | None = None  # "page": the browser's decimated copy of a large result


@dataclass(frozen=True, slots=True)
class MemoryProfileQuery(Query):
    host: str | None = None


@dataclass(frozen=True, slots=True)
class OomRiskQuery(Query):
    host: str | None = None
    module_name: str | None = None
    capacity_bytes: int | None = None  # wins over device_memory
    device_memory: str | None = None  # a size ("80GiB") or a device name ("A100"), as typed
    device: str | None = None  # the device to assume when the profile names none
    threshold_medium: float | None = None
    threshold_high: float | None = None


@dataclass(frozen=True, slots=True)
class SnapshotQuery(Query):
    host: str | None = None  # cuda:N
    start: int | None = None
    end: int | None = None
    x: str | None = None  # "index" or "time"
    max_points: int | None = None
    top: int | None = None
    event: int | None = None
    stack: int | None = None
    filtered: bool | None = None
    other: str | None = None  # compare: the other snapshot run
    other_host: str | None = None
    q: str | None = None  # events: an address or a stack frame's text to search for


@dataclass(frozen=True, slots=True)
class TraceQuery(Query):
    """The trace viewer's own API (``/api/trace/window|event|search|export``)."""

    host: str | None = None  # one host (an xplane's host, a Chrome trace's file name)
    hosts: str | None = None  # several, comma-separated (wins over host); default: the first
    start_ms: float | None = None  # ms from the selected hosts' origin; None: the trace's start
    end_ms: float | None = None  # None: the trace's end
    resolution: int | None = None  # pixels, 1..TRACE_MAX_RESOLUTION; None: trace_viewer.DEFAULT_RESOLUTION
    id: int | None = None  # an event id, from a window or a search
    q: str | None = None  # the text to search event names for
    limit: int | None = None  # matches, 1..TRACE_MAX_SEARCH_LIMIT; None: trace_viewer.DEFAULT_SEARCH_LIMIT
    offset: int | None = None  # search: the first match answered (0-based, in the search's order); None: 0


@dataclass(frozen=True, slots=True)
class XprofTraceQuery(Query):
    """XProf's ``data?tag=trace_viewer@`` (profile_plugin.py, trace_view_options.cc)."""

    host: str | None = None
    hosts: str | None = None
    start_time_ms: float | None = None  # XProf's absolute ms; None or 0: the trace's start
    end_time_ms: float | None = None  # None or 0: the trace's end
    resolution: int | None = None  # pixels, 0 (no filter)..XPROF_TRACE_MAX_RESOLUTION; None: 8000
    event_name: str | None = None  # an event-details request: the event's name,
    duration_ms: float | None = None  # its duration
    unique_id: int | None = None  # and its args.uid


TOOL_QUERIES: dict[str, type[Query]] = {
    "memory_viewer": MemoryViewerQuery,
    "memory_profile": MemoryProfileQuery,
    "oom_risk": OomRiskQuery,
    "trace_viewer@": XprofTraceQuery,
}

# The bounds the server checks the trace viewer's numbers against (server/params.py):
# part of the queries' contract, so the server reads them without importing a tool.
TRACE_MAX_RESOLUTION = 100_000  # pixels of /api/trace/window
TRACE_MAX_SEARCH_LIMIT = 10_000  # matches of /api/trace/search
XPROF_TRACE_MAX_RESOLUTION = 10_000_000  # trace_viewer@'s resolution (XProf's own has no bound)
