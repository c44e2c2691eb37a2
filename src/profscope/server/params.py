"""Every query parameter, parsed and checked once, here, into the typed values the
application takes (app/queries.py): routes declare them with FastAPI's ``Query`` and
these types, and a value no parameter can mean is a 400 naming the parameter
(server/app.py maps FastAPI's validation errors to the one error shape).

Why bounds on every number: a fuzz of every route found values that got through loose
parsers and broke later (a 500): ``10^400`` (int() refuses over 4,300 digits; a
400-digit one passed and then could not be stored as JSON), ``1e309`` (infinity),
``²`` (``str.isdigit`` is true for it, ``int`` refuses it). Pydantic's parsers refuse
those; every count, id, byte size and time here fits a signed 64-bit integer.

An empty value is an absent one (``?memory_space=``), as XProf's ``request.args.get``
with a default treats it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Query
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from profscope.app.queries import (
    TRACE_MAX_RESOLUTION,
    TRACE_MAX_SEARCH_LIMIT,
    XPROF_TRACE_MAX_RESOLUTION,
    MemoryProfileQuery,
    MemoryViewerQuery,
    OomRiskQuery,
    Query as ToolQuery,
)

MAX_INT = (1 << 63) - 1


def _blank_is_absent(value):
    if isinstance(value, str) and not value.strip():
        return None
    return value


_absent = BeforeValidator(_blank_is_absent)


def _value(kind: type, *validators: Any, **bounds: Any) -> Any:
    """An optional parameter of type ``kind`` within ``bounds`` (pydantic ``Field``'s). The
    bounds sit on the inner type: a blank value becomes None before they would apply."""
    return Annotated[Annotated[kind, Field(**bounds), *validators] | None, _absent, Query()]


Int = _value(int, ge=-MAX_INT, le=MAX_INT)
Count = _value(int, ge=0, le=MAX_INT)  # sizes, memory spaces
Bytes = _value(int, gt=0, le=MAX_INT)  # a capacity
Share = _value(float, gt=0, le=1.5, allow_inf_nan=False)  # a fraction of the capacity
Text = _value(str, max_length=8192)  # a run, a host, a module, a search text, a flag

# The trace viewer's (server/trace_api.py; the bounds are tools/trace_viewer.py's and
# trace_xprof.py's, through app/queries.py).
TraceMs = _value(float, ge=-1e15, le=1e15, allow_inf_nan=False)  # a time, ms
Resolution = _value(int, ge=1, le=TRACE_MAX_RESOLUTION)  # pixels of a window
XprofResolution = _value(int, ge=0, le=XPROF_TRACE_MAX_RESOLUTION)  # 0: no filter
EventId = _value(int, ge=0, le=MAX_INT)  # an event id of /api/trace/window or /search
SearchLimit = _value(int, ge=1, le=TRACE_MAX_SEARCH_LIMIT)
SearchOffset = _value(int, ge=0, le=MAX_INT)  # the first match /api/trace/search answers
# XProf's UI may send an event's args.uid as a float (``unique_id=12.0``)
UniqueId = _value(float, AfterValidator(int), ge=0, lt=2**63, allow_inf_nan=False)


class QueryParser:
    """For a route that reads a tool's parameters itself (XProf's one data route serves
    every tool): ``parse(request.query_params)`` checks the parameters named in ``types``
    as a route's declarations would, a bad one a ``RequestValidationError`` (the one 400
    shape, naming each bad parameter)."""

    def __init__(self, **types: Any):
        self._adapters = {name: TypeAdapter(t) for name, t in types.items()}

    def parse(self, params: Mapping[str, str]) -> dict[str, Any]:
        values, errors = {}, []
        for name, adapter in self._adapters.items():
            try:
                values[name] = adapter.validate_python(params.get(name))
            except ValidationError as exc:
                errors += [{**e, "loc": ("query", name)} for e in exc.errors(include_url=False)]
        if errors:
            raise RequestValidationError(errors)
        return values


def tool_query(tool: str, *, host: str | None, module_name: str | None, memory_space: int | None,
               view: str | None, capacity_bytes: int | None, device_memory: str | None, device: str | None,
               threshold_medium: float | None, threshold_high: float | None) -> ToolQuery:
    """The typed query of XProf's ``data?tag=<tool>`` for the tools cached per query."""
    if tool == "memory_viewer":
        return MemoryViewerQuery(module_name=module_name, memory_space=memory_space, host=host, view=view)
    if tool == "memory_profile":
        return MemoryProfileQuery(host=host)
    if tool == "oom_risk":
        return OomRiskQuery(host=host, module_name=module_name, capacity_bytes=capacity_bytes,
                            device_memory=device_memory, device=device,
                            threshold_medium=threshold_medium, threshold_high=threshold_high)
    raise ValueError(f"no typed query for tool {tool!r}")


def validation_message(err) -> str:
    """FastAPI's validation error as one sentence per parameter, naming it and the value:
    ``parameter 'memory_space' must be greater than or equal to 0, not '-1'``."""
    parts = []
    for e in err.errors():
        loc = [str(x) for x in e.get("loc", ()) if x not in ("query", "path")]
        name = ".".join(loc) or "request"
        msg = str(e.get("msg", "is invalid"))
        msg = msg[0].lower() + msg[1:] if msg else msg
        msg = msg.replace("input should be", "must be").replace(", unable to parse string as an integer", "")
        value = e.get("input")
        shown = f", not {str(value)[:40]!r}" + ("..." if len(str(value)) > 40 else "") if value is not None else ""
        parts.append(f"parameter {name!r} {msg}{shown}")
    return "; ".join(parts) or "invalid request"
