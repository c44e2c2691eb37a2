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

from typing import Annotated

from fastapi import Query
from pydantic import BeforeValidator

from profscope.app.queries import MemoryProfileQuery, MemoryViewerQuery, OomRiskQuery, Query as ToolQuery

MAX_INT = (1 << 63) - 1


def _blank_is_absent(value):
    if isinstance(value, str) and not value.strip():
        return None
    return value


_absent = BeforeValidator(_blank_is_absent)

Int = Annotated[int | None, _absent, Query(ge=-MAX_INT, le=MAX_INT)]
Count = Annotated[int | None, _absent, Query(ge=0, le=MAX_INT)]  # sizes, spaces, ids
Bytes = Annotated[int | None, _absent, Query(gt=0, le=MAX_INT)]  # a capacity
Ms = Annotated[float | None, _absent, Query(ge=-9.2e15, le=9.2e15, allow_inf_nan=False)]  # milliseconds
Share = Annotated[float | None, _absent, Query(gt=0, le=1.5, allow_inf_nan=False)]  # a fraction of capacity
Text = Annotated[str | None, _absent, Query(max_length=8192)]
Flag = Annotated[str | None, Query(max_length=8192)]  # XProf: any non-empty value is "on"


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
        msg = msg.replace("input should be", "must be")
        value = e.get("input")
        shown = f", not {str(value)[:40]!r}" + ("..." if len(str(value)) > 40 else "") if value is not None else ""
        parts.append(f"parameter {name!r} {msg}{shown}")
    return "; ".join(parts) or "invalid request"
