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

    def but(self, **changes) -> Query:
        return type(self)(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})


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


TOOL_QUERIES: dict[str, type[Query]] = {
    "memory_viewer": MemoryViewerQuery,
    "memory_profile": MemoryProfileQuery,
    "oom_risk": OomRiskQuery,
}
