"""Every query parameter, parsed and checked once, here, into the typed values the
application takes (app/queries.py). A query type's fields carry their bounds as plain
metadata; :func:`query_parser` turns any query type into pydantic validators, and
:func:`query_params` into a FastAPI dependency for a route, so no route restates a bound.
A value no parameter can mean is a 400 naming the parameter (server/app.py maps
FastAPI's validation errors to the one error shape); pydantic's parsers refuse what got
through loose ones before (app/queries.py says which).

An empty value is an absent one (``?memory_space=``), as XProf's ``request.args.get``
with a default treats it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any

from fastapi import Depends, Query
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from profscope.app.queries import MAX_INT, MAX_TEXT, Query as ToolQuery


def _blank_is_absent(value):
    if isinstance(value, str) and not value.strip():
        return None
    return value


_absent = BeforeValidator(_blank_is_absent)


def _value(kind: type, *validators: Any, **bounds: Any) -> Any:
    """An optional parameter of type ``kind`` within ``bounds`` (pydantic ``Field``'s). The
    bounds sit on the inner type: a blank value becomes None before they would apply."""
    return Annotated[Annotated[kind, Field(**bounds), *validators] | None, _absent, Query()]


# The parameters routes take beside a query: a run's name, a memory space.
Text = _value(str, max_length=MAX_TEXT)
Count = _value(int, ge=0, le=MAX_INT)


def _annotation(kind: type, meta: dict) -> Any:
    """A query field's parameter type: its value type within its bounds (app/queries.py
    ``param``), or None when absent or blank."""
    if meta.get("whole"):  # an int that may come as a float (``12.0``)
        return _value(float, AfterValidator(int), **meta["bounds"])
    return _value(kind, **meta["bounds"])


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


@cache
def query_parser(query_type: type[ToolQuery]) -> QueryParser:
    """Checks a request's parameters against every field of ``query_type``."""
    return QueryParser(**{name: _annotation(kind, meta) for name, (kind, meta) in query_type.params().items()})


def parse_query(query_type: type[ToolQuery], params: Mapping[str, str]) -> ToolQuery:
    """A request's parameters as ``query_type`` (for a route that serves several query
    types: XProf's one data route serves every tool)."""
    return query_type(**query_parser(query_type).parse(params))


def query_params(query_type: type[ToolQuery], *names: str) -> Any:
    """The type of a route's parameter that is a ``query_type`` made of the request's
    parameters ``names`` (every field when none is named): ``Event = query_params(
    TraceQuery, "host", "id")``, then ``def event(query: Event)``. The route's declared
    parameters (OpenAPI included) are those fields, with their bounds."""
    fields = query_type.params()
    chosen = names or tuple(fields)

    def dependency(**values: Any) -> ToolQuery:
        return query_type(**values)

    dependency.__signature__ = inspect.Signature([
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_annotation(*fields[name]))
        for name in chosen
    ])
    return Annotated[query_type, Depends(dependency)]


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
