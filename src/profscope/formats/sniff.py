"""Is this the start of a Chrome trace? Decided from a file's first bytes alone.

Users keep Chrome traces under names no suffix rule can know: ``trace.json`` (PyTorch's
recipe, ``prof.export_chrome_trace("trace.json")``), ``rank-0.json.gz``,
``eager_trace.json.gz``. Beside them sit JSON files that are no traces (``manifest.json``,
``config.json``, XProf's ``*.memory_profile.json.gz``), so the content decides:

* the Trace Event Format's object shape: a top-level ``traceEvents`` key, or kineto's
  leading ``"schemaVersion": 1`` together with one of the other top-level keys kineto
  writes before its events (``deviceProperties``, ``distributedInfo``, ``displayTimeUnit``,
  ``baseTimeNanoseconds``, ...): ``schemaVersion`` alone is also the first key of a
  Docker/OCI ``manifest.json``;
* the array shape ``[{...}, ...]``: its first element is an event object with a ``ph``
  (phase) key, which every Trace Event Format event has.

Only the first :data:`HEAD_BYTES` of the file are read; gzip is decompressed as far as
those go, up to :data:`MAX_TEXT` characters (TraceLens' exports put ~26 KB of
``metadata`` before ``traceEvents``). A trace whose first such key comes later is found
only by a ``*.trace.json[.gz]`` name. The keys are found with a small scanner that skips
strings and tracks nesting, so a key inside a nested value never counts, and a head cut
in the middle of a value simply ends the scan.
"""

from __future__ import annotations

import re
import zlib

HEAD_BYTES = 16 << 10  # read from the file
MAX_TEXT = 64 << 10  # decompressed from a gzipped head

#: Top-level keys kineto (torch.profiler) writes beside "schemaVersion" before "traceEvents".
KINETO_KEYS = frozenset({
    "deviceProperties", "distributedInfo", "displayTimeUnit", "baseTimeNanoseconds", "traceName",
    "record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules", "trace_id",
    "cupti_version", "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version",
    "roctracer_version",
})

# A string (group 1 set when a ":" follows: an object key) or a bracket. Commas, numbers
# and literals need no token: in JSON a string followed by ":" is always a key, so long
# arrays of numbers cost nothing.
_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:)?|[{}\[\]]')


def _text(head: bytes) -> str:
    if head[:2] == b"\x1f\x8b":
        try:  # a stream cut short decompresses as far as it goes
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, MAX_TEXT)
        except zlib.error:
            return ""
    head = head[:MAX_TEXT]
    if head[:3] == b"\xef\xbb\xbf":
        head = head[3:]
    return head.decode("utf-8", errors="ignore")


def _keys(text: str):
    """(depth, key, container stack) for each object key, depth 1 being the top level;
    (depth, None, stack) each time a container closes."""
    stack: list[str] = []
    for m in _TOKEN.finditer(text):
        if m.group(2) is not None:
            yield len(stack), m.group(1), stack
            continue
        c = m.group()
        if c == "{" or c == "[":
            stack.append(c)
        elif c == "}" or c == "]":
            if not stack:
                return
            stack.pop()
            yield len(stack), None, stack
            if not stack:
                return


def is_chrome_trace(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes, gzipped or not) starts a Chrome trace."""
    text = _text(head).lstrip()
    if text.startswith("{"):
        seen = set()
        for depth, key, _ in _keys(text):
            if depth != 1 or key is None:
                continue
            if key == "traceEvents":
                return True
            seen.add(key)
            if "schemaVersion" in seen and seen & KINETO_KEYS:
                return True
        return False
    if text.startswith("["):
        for depth, key, stack in _keys(text):
            if depth == 1 and key is None:
                return False  # the first element closed without a "ph"
            if depth == 2 and key == "ph" and stack[:2] == ["[", "{"]:
                return True
        return False
    return False
