"""Numbers in query parameters, checked once at the server before a tool parses them.

The tools parse their own parameters (and word their own errors for ``abc`` or ``-1``),
but a fuzz of every route found values that got through their parsers and broke later
(a 500): ``10^400`` (int() refuses over 4,300 digits; a 400-digit one passed and then
could not be stored as JSON), ``1e309`` (infinity to int), ``²`` (``str.isdigit`` is
true for it, ``int`` refuses it). A number no parameter can mean is answered here with
a 400 naming the parameter; everything else is left to the tool.
"""

from __future__ import annotations

import math
import re

from fastapi import Request

from profscope.errors import BadRequest

# The parameters that are numbers, over every route (profscope's own and XProf's).
NUMERIC_PARAMS = frozenset({
    # /api/module_peaks, /data memory_viewer
    "memory_space",
    # /api/trace/* (trace_api.py) and XProf's trace_viewer@
    "start_ms", "end_ms", "resolution", "id", "limit",
    "start_time_ms", "end_time_ms", "duration_ms", "unique_id",
    # /api/snapshot/* (workspace.snapshot_view)
    "start", "end", "max_points", "top", "event", "stack",
    # oom_risk
    "capacity_bytes", "threshold_medium", "threshold_high", "device_memory",
})
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_DIGITS = 40  # 2^63 has 19 digits; room for decimals
LIMIT = 2.0 ** 63  # every count, id, byte size and time here fits a signed 64-bit integer


def check_number(name: str, value: str) -> None:
    """BadRequest when ``value`` of numeric parameter ``name`` is no usable number:
    non-ASCII characters, or a number beyond ±2^63 (or infinite, or too long)."""
    text = value.strip()
    if not text:
        return
    if not text.isascii():
        raise BadRequest(f"parameter {name!r} must be a number written with ASCII digits, not {value[:40]!r}")
    if _NUMBER.fullmatch(text) is None:
        return  # not a number at all: the tool says what it expects
    if len(text) > MAX_DIGITS or not math.isfinite(number := float(text)) or abs(number) >= LIMIT:
        raise BadRequest(f"parameter {name!r} is out of range: {text[:40]!r}{'...' if len(text) > 40 else ''} "
                         "(at most 2^63 in magnitude)")


def checked_numbers(request: Request) -> None:
    """A router dependency: every numeric parameter of the request checked."""
    for name, value in request.query_params.multi_items():
        if name in NUMERIC_PARAMS:
            check_number(name, value)
