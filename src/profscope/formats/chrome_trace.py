"""Chrome trace JSON (``*.trace.json[.gz]``, ``*.pt.trace.json[.gz]``), read as a stream.

The Trace Event Format comes in two shapes: an object ``{"traceEvents": [...], ...}``
(torch.profiler, jax, Perfetto exports) or a bare array ``[...]`` of events, whose
closing ``]`` may be missing (the format allows writers to stop mid-array). Files may be
gzipped; the gzip magic decides, not the name.

Nothing here holds the event list as Python objects. :func:`iter_events` reads the
(decompressed) text in 1 MiB chunks, walks the top-level object by hand and decodes one
event at a time with the standard library's C JSON scanner (``json.decoder``), so memory
stays bounded by the chunk size plus the largest single event, whatever the file size.
Top-level keys other than ``traceEvents`` (``deviceProperties``, ``displayTimeUnit``,
``baseTimeNanoseconds``, ``schemaVersion``, ...) are collected into a ``metadata`` dict.

Hostile input (issue 13) costs a 4xx, never a 500 or a value that fails later: what is
past a budget (``MAX_EVENT``, ``MAX_VALUE``, ``MAX_DEPTH``, ``MAX_TRACKS``, ``MAX_COUNTERS``,
``MAX_GZIP_RATIO``, ``MAX_TIMELINE_BYTES``) is refused with :class:`TooLarge` naming the
file and the limit; a corrupt file is :class:`BadInput`. Where a trace viewer reads past an
oddity, so does this reader, and keeps the rest of the trace: lone surrogates become
U+FFFD, an event without a usable ``ts`` (NaN, infinite, a string) or with a list as pid or
tid is skipped, integers beyond 64 bits in args are kept as their text, ids beyond 2^53 are
hashed like string ids, counter samples that are not finite doubles are dropped. Each
choice is explained where it is made.

:func:`memory_events` turns a trace into :class:`~profscope.model.memory_events.MemoryEvents`: the PyTorch profiler's
``[memory]`` instant events (``profile_memory=True``) as columnar numpy arrays, each
attributed to the innermost enclosing op, Python frame and ``nn.Module`` scope on its
thread. What torch 2.13 writes (see ``scripts/make_torch_traces.py``)::

    {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
     "pid": 11809, "tid": 11809, "ts": 5126975341058.166,
     "args": {"Total Reserved": 0, "Total Allocated": 16384, "Bytes": 16384,
              "Device Id": -1, "Device Type": 0, "Addr": 94180766376192,
              "finished": false, "Ev Idx": 682}}

``Bytes`` is positive for an allocation and negative for a free; ``Total Allocated`` /
``Total Reserved`` are the allocator's totals after the event (on CPU they count only
what was allocated while the profiler ran; ``Total Reserved`` is 0 there). ``Device Type``
is c10's ``DeviceType`` (0 CPU, 1 CUDA, ...); CPU events carry ``Device Id`` -1. Older
traces (PyTorch of 2021, e.g. kineto's samples) carry only ``Bytes``, ``Device Type`` and
``Device Id``: no ``Addr``, no totals. Their ``Total Allocated`` is rebuilt per device as
the running sum of ``Bytes``, :attr:`MemoryEvents.has_addr` says which events had no
address (their allocations cannot be paired with their frees) and
:attr:`MemoryEvents.has_reserved` which had no ``Total Reserved`` (unknown, not 0). Ops are
``X`` events (``cat`` ``cpu_op``, ``user_annotation``, ...) nested on the same pid/tid;
with ``with_stack=True`` Python frames are ``X`` events with ``cat`` ``python_function``
on the same thread, interleaved with the ops, and module calls appear among them as
``nn.Module: Linear_0`` (nested calls give module paths such as ``Net_0/Linear_1``).
``ProfilerStep#N`` annotations (a profiler ``schedule`` with ``prof.step()``) mark
training steps and are not ops; ``## name ##`` markers (torch.compile / FX graph regions)
count as scopes like modules. Attribution is computed after the pass: the X events of
each kind are kept as compact per-thread interval arrays (thread, start, end, name
index), and each memory event is matched to the innermost interval ``[ts, ts + dur)``
holding it with binary searches over nesting depth (numpy), not a Python loop.

:func:`parse_memory_timeline` reads ``prof.export_memory_timeline(path.json)``: the JSON
``[times, sizes]`` written by ``torch/profiler/_memory_profiler.py``
(``MemoryProfileTimeline._coalesce_timeline``): ``times`` in microseconds of the
profiler clock (trace ``ts`` + ``baseTimeNanoseconds`` / 1000), ``sizes`` one row per time
of 9 integers: a leading 0, then bytes per category in the order of ``CATEGORIES``.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import math
import re
import sys
import zlib
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import numpy as np

from profscope.errors import BadInput, TooLarge
from profscope.formats import streams
from profscope.model.memory_events import CATEGORIES, MemoryEvents, MemoryTimeline, Steps

if TYPE_CHECKING:
    from profscope.model.trace import FlowPoints

CHUNK = 1 << 20
# What one input may cost (issue 13's budget). Beyond any of these a trace is refused with
# TooLarge (413), naming the file and the limit: each bounds the memory or the time of a
# request that a hostile file of a few kilobytes could otherwise blow up.
#: Largest single top-level value (``deviceProperties``, ``stackFrames``, ...) accepted. Its
#: Python objects can take ~20x its text (``[[],[],...]``): 64 MiB stays near a gigabyte.
MAX_VALUE = 64 << 20
#: Largest single event accepted: real ones are well under a megabyte (kineto's longest
#: carry a Python stack), a hostile one is decoded whole before anything can look at it.
MAX_EVENT = 16 << 20
#: Deepest nesting of one event's args (the event object is level 1; ``args`` of torch and
#: jax nest 2 or 3 deep) that the trace viewer stores, and of a top-level value that the
#: memory profile keeps. Deeper input is refused rather than read: what writes it back
#: (orjson: 254 levels, the page's JSON.parse) would fail part-way, and no profiler writes
#: it. The memory profile reads no nested value of an event, so it does not refuse them
#: (it does refuse past Python's own decoder, whose recursion is the backstop for both).
MAX_DEPTH = 64
#: Distinct threads (pid, tid) and counter series of one trace: each is a track in the
#: index's meta.json, sent with every window (and a counter is two files); real traces
#: have hundreds, a hostile one could make one per event.
MAX_TRACKS = 50_000
MAX_COUNTERS = 10_000
#: A gzipped trace expanding past this many times its compressed size (and past 256 MiB)
#: is a decompression bomb: deflate reaches ~1000:1 on whitespace, which would cost minutes
#: of reading to no end (~15 s a GiB). Real traces compress 10-30x (kineto's ResNet-50
#: trace 30x, the demo's and HTA's 10-18x).
MAX_GZIP_RATIO = 100
_GZIP_FREE = 256 << 20
MEMORY_EVENT = "[memory]"
PYTHON_FUNCTION = "python_function"
MODULE_PREFIX = "nn.Module: "
STEP_PREFIX = "ProfilerStep#"
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"

_WS = re.compile(r"[ \t\n\r]*")
_SCAN = json.decoder.JSONDecoder().scan_once
_STRUCTURAL = re.compile(r'[\]\[{},:"]')
_QUERY_BLOCK = 1 << 18
_NEAR_END = 64  # a truncated number/literal fails at most this many characters before the end
#: json decodes a JSON escape of a lone UTF-16 surrogate (``\\ud800``) into a str that no
#: UTF-8 encoder (orjson, the index, the HTTP answer) accepts: see _clean.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_DEEP_MIN = 2 * MAX_DEPTH  # the shortest args text nesting MAX_DEPTH deep ("[[[...]]]"), too deep in an event


# -- the byte stream ----------------------------------------------------------------------


def _open(raw, path: str) -> IO[bytes]:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = io.BytesIO(bytes(raw))
    head = raw.read(2)
    if not isinstance(head, bytes):
        raise TypeError("chrome_trace needs a binary stream")
    stream = streams.buffered(head, raw)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=stream, mode="rb")
    return stream


# -- the tokenizer --------------------------------------------------------------------------


def _cut_short(buf: str, at: int) -> bool:
    """At the end of the stream, whether a scan that failed at ``at`` failed because the
    text stops (a partial number or literal, or nothing) rather than on a wrong character."""
    rest = buf[at:]
    return len(rest) <= _NEAR_END and _STRUCTURAL.search(rest) is None


class _Text:
    """Decompressed, decoded text in a sliding window: ``buf[pos:]`` is what is unread."""

    __slots__ = ("path", "_stream", "_decoder", "buf", "pos", "base", "eof", "start", "escapes",
                 "_gz_budget", "_read")

    def __init__(self, raw, path: str):
        self.path = path
        size = len(raw) if isinstance(raw, (bytes, bytearray, memoryview)) else _size(raw)
        self._stream = _open(raw, path)
        # Decompressed bytes allowed before the file counts as a gzip bomb (None: plain, or
        # a stream whose size is unknown, which a ratio cannot judge).
        self._gz_budget = (max(_GZIP_FREE, MAX_GZIP_RATIO * size)
                           if isinstance(self._stream, gzip.GzipFile) and size else None)
        self._read = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.base = 0  # characters dropped before buf[0]
        self.eof = False
        self.start = 0  # where the last value() began in buf
        self.escapes = False  # buf may hold a surrogate escape: see _clean
        self.fill()
        if self.buf.startswith("\ufeff"):
            self.pos = 1

    def bad(self, problem: str) -> BadInput:
        return BadInput(f"{self.path}: {problem}", file=self.path)

    def too_deep(self, what: str) -> TooLarge:
        return TooLarge(f"{self.path}: {what} nests deeper than {MAX_DEPTH} levels, the limit of this "
                        "reader (no profiler writes such input)", file=self.path)

    def fill(self, at_least: int = 0, limit: int = MAX_VALUE, what: str = "a single JSON value") -> bool:
        """Read more text onto the window; False at the end of the stream. ``limit``: the
        most the unread text may hold (the value being decoded) before more is read."""
        if self.eof:
            return False
        pending = len(self.buf) - self.pos
        if pending > limit:
            raise TooLarge(f"{self.path}: {what} is larger than {limit >> 20} MiB, the limit of this reader "
                           "for one value; not a trace it accepts", file=self.path)
        want = max(CHUNK, at_least)
        try:
            data = self._stream.read(want)
        except EOFError:
            raise self.bad("truncated gzip stream (the file ends before the gzip trailer)") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise self.bad(f"corrupt gzip data ({exc})") from None
        if self._gz_budget is not None:
            self._read += len(data)
            if self._read > self._gz_budget:
                raise TooLarge(f"{self.path}: the gzip stream expands to more than {MAX_GZIP_RATIO} times the "
                               f"file's size ({self._read >> 20} MiB read so far), the limit of this reader: a "
                               "decompression bomb, not a trace",
                               file=self.path)
        final = not data
        try:
            text = self._decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            raise self.bad(
                f"not a JSON text file (invalid UTF-8 near byte {exc.start}); expected a Chrome trace JSON"
            ) from None
        self.base += self.pos
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        # A per-window flag, so the per-event check for lone surrogates runs only where an
        # escape of one may be: a backslash is found at memchr speed (0.02 ms a MiB; the
        # regex takes 0.3, a 3-character substring search 0.8), most traces have none.
        self.escapes = "\\" in self.buf and _LONE_ESCAPE.search(self.buf) is not None
        if final:
            self.eof = True
        return True

    def peek(self) -> str:
        """Skip whitespace; the next character, or '' at the end of the stream."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def value(self, what: str, limit: int = MAX_VALUE):
        """Decode the JSON value starting at ``pos`` (after :meth:`peek`), fetching more text as needed."""
        while True:
            buf, pos = self.buf, self.pos
            try:
                obj, end = _SCAN(buf, pos)
            except StopIteration as stop:  # the C scanner reports where a nested value was missing
                at = stop.value if isinstance(stop.value, int) else pos
                if not self.eof and at >= len(buf) - _NEAR_END:
                    self.fill(2 * (len(buf) - pos), limit, what)
                    continue
                if self.eof and _cut_short(buf, at):
                    raise self.bad(f"truncated JSON: the file ends inside {what}") from None
                raise self.bad(f"invalid JSON at character {self.base + at}: expected a value in {what}") from None
            except json.JSONDecodeError as exc:
                if not self.eof and (exc.pos >= len(buf) - _NEAR_END or exc.msg.startswith("Unterminated string")):
                    self.fill(2 * (len(buf) - pos), limit, what)
                    continue
                if self.eof and (exc.msg.startswith("Unterminated string") or _cut_short(buf, exc.pos)):
                    raise self.bad(f"truncated JSON: the file ends inside {what}") from None
                raise self.bad(f"invalid JSON in {what} at character {self.base + exc.pos}: {exc.msg}") from None
            except RecursionError:  # the C scanner recurses per level: far past MAX_DEPTH
                raise self.too_deep(what) from None
            except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
                raise TooLarge(f"{self.path}: {what} holds a number too long to read ({exc})", file=self.path) from None
            if end >= len(buf) and not self.eof and not isinstance(obj, (dict, list, str)):
                self.fill()  # a number or literal may go on in the next chunk
                continue
            self.start = pos
            self.pos = end
            return obj


def _depth_over(obj, limit: int) -> bool:
    """Whether ``obj`` nests deeper than ``limit`` levels (``obj`` itself is level 1)."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return True
        if o.__class__ is dict:
            stack.extend((v, d + 1) for v in o.values() if v.__class__ is dict or v.__class__ is list)
        elif o.__class__ is list:
            stack.extend((v, d + 1) for v in o if v.__class__ is dict or v.__class__ is list)
    return False


def _clean(obj):
    """``obj`` with lone UTF-16 surrogates (JSON ``"\\ud800"`` escapes) in strings and keys
    replaced by U+FFFD. Lenient, as a browser is: Chrome's trace viewer keeps such a string
    (JS strings are UTF-16, ``JSON.parse`` takes the escape) and draws a replacement glyph;
    what profscope stores and answers is UTF-8, which cannot hold it. One odd name should
    not cost the whole trace."""
    if obj.__class__ is str:
        return _LONE_SURROGATE.sub("\ufffd", obj)
    if obj.__class__ is dict:
        return {_clean(k): _clean(v) for k, v in obj.items()}
    if obj.__class__ is list:
        return [_clean(v) for v in obj]
    return obj


#: ``\uD800``-``\uDFFF`` escapes (a valid pair, decoded into one character, is harmless but
#: also matches: then _clean finds nothing to replace).
_LONE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _array(t: _Text, bare: bool) -> Iterator[dict]:
    """The elements of the array whose '[' was just consumed."""
    n = 0
    scan, ws = _SCAN, _WS
    while True:
        # Fast path: the whole next event is in the window.
        buf, pos = t.buf, ws.match(t.buf, t.pos).end()
        if pos < len(buf) and buf[pos] == "{":
            try:
                obj, end = scan(buf, pos)
            except (StopIteration, ValueError, RecursionError):  # cut by the window, or bad: value() tells
                t.pos = pos
                obj = t.value(f"traceEvents[{n}]", MAX_EVENT)
                pos, end = t.start, t.pos
            else:
                t.pos = end
        else:
            t.pos = pos
            c = t.peek()
            if c == "]":
                t.pos += 1
                return
            if c == "":
                if bare:
                    return  # the JSON Array Format allows a missing ']'
                raise t.bad(f"truncated JSON: the file ends inside traceEvents (after {n} events)")
            obj = t.value(f"traceEvents[{n}]", MAX_EVENT)
            pos, end = t.start, t.pos
        if type(obj) is not dict:
            raise t.bad(f"traceEvents[{n}] is a {type(obj).__name__}, not an event object; not a Chrome trace")
        # Only a window with a \ud escape can hold a lone surrogate: a flag on the hot path,
        # a search of this event's text where it is set. (Depth is the consumers' check:
        # trace_columns stores and serves args, memory_events reads no nested value.)
        if t.escapes and _LONE_ESCAPE.search(t.buf, pos, end) is not None:
            obj = _clean(obj)
        yield obj
        n += 1
        buf, pos = t.buf, ws.match(t.buf, t.pos).end()
        if pos < len(buf) and buf[pos] == ",":
            t.pos = pos + 1
            continue
        t.pos = pos
        c = t.peek()
        if c == ",":
            t.pos += 1
            if t.peek() == "]":  # a trailing comma, which some writers leave
                t.pos += 1
                return
        elif c == "]":
            t.pos += 1
            return
        elif c == "" and bare:
            return
        elif c == "":
            raise t.bad(f"truncated JSON: the file ends inside traceEvents (after {n} events)")
        else:
            raise t.bad(f"invalid JSON at character {t.base + t.pos}: expected ',' or ']' after traceEvents[{n - 1}]")


def iter_events(raw, path: str, metadata: dict | None = None) -> Iterator[dict]:
    """Yield the trace's events one at a time, in file order.

    ``raw`` is a binary file object (plain or gzipped) or bytes; ``path`` names the file in
    errors. When ``metadata`` is given, the top-level keys other than ``traceEvents`` are
    stored into it (those after ``traceEvents`` only once the iteration has finished).
    Raises :class:`BadInput` for anything that is not a complete Chrome trace.
    """
    t = _Text(raw, path)
    c = t.peek()
    if c == "":
        raise t.bad("empty file; expected a Chrome trace JSON")
    if c == "[":
        t.pos += 1
        yield from _array(t, bare=True)
        if t.peek() != "":
            raise t.bad(f"unexpected data after the event array at character {t.base + t.pos}")
        return
    if c != "{":
        start = t.buf[t.pos: t.pos + 40].splitlines()[0] if t.buf else ""
        raise t.bad(f"not JSON (starts with {start!r}); expected a Chrome trace JSON object or array")
    t.pos += 1
    seen_events = False
    first = True
    while True:
        c = t.peek()
        if c == "}" and first:
            t.pos += 1
            break
        if not first:
            if c == "}":
                t.pos += 1
                break
            if c != ",":
                if c == "":
                    raise t.bad("truncated JSON: the file ends inside the top-level object")
                raise t.bad(f"invalid JSON at character {t.base + t.pos}: expected ',' or '}}' in the top-level object")
            t.pos += 1
            c = t.peek()
        first = False
        if c == "":
            raise t.bad("truncated JSON: the file ends inside the top-level object")
        if c != '"':
            raise t.bad(f"invalid JSON at character {t.base + t.pos}: expected a key in the top-level object")
        key = t.value("a top-level key")
        if t.peek() != ":":
            if t.eof and t.pos >= len(t.buf):
                raise t.bad("truncated JSON: the file ends inside the top-level object")
            raise t.bad(f"invalid JSON at character {t.base + t.pos}: expected ':' after key {key!r}")
        t.pos += 1
        c = t.peek()
        if key == "traceEvents":
            if c != "[":
                if c == "":
                    raise t.bad("truncated JSON: the file ends at traceEvents")
                raise t.bad("traceEvents is not an array; not a Chrome trace")
            t.pos += 1
            seen_events = True
            yield from _array(t, bare=False)
        else:
            what = f"the top-level value {key!r}"
            val = t.value(what)
            if metadata is not None:
                # Few values, read by the memory profile and OOM risk as numbers and cached
                # as JSON: made JSON-safe here, once (see _json_safe).
                metadata[_clean(key)] = _json_safe(t, val, what)
    if t.peek() != "":
        raise t.bad(f"unexpected data after the top-level object at character {t.base + t.pos}")
    if not seen_events:
        raise t.bad("not a Chrome trace: the JSON object has no 'traceEvents' array")


def _json_safe(t: _Text, val, what: str, depth: int = 1):
    """A top-level value as its consumers can use it: no deeper than MAX_DEPTH, lone
    surrogates replaced, and numbers no JSON writer takes (integers beyond 64 bits, NaN,
    infinities) as None. Those are metadata numbers (``baseTimeNanoseconds``,
    ``totalGlobalMem``): one beyond int64 is not a real value, and as a string it would
    be read as a number again downstream."""
    if depth > MAX_DEPTH:
        raise t.too_deep(what)
    c = val.__class__
    if c is str:
        return _LONE_SURROGATE.sub("\ufffd", val)
    if c is int:
        return val if -(1 << 63) <= val < (1 << 63) else None
    if c is float:
        return val if math.isfinite(val) else None
    if c is dict:
        return {_LONE_SURROGATE.sub("\ufffd", k): _json_safe(t, v, what, depth + 1) for k, v in val.items()}
    if c is list:
        return [_json_safe(t, v, what, depth + 1) for v in val]
    return val


# -- memory events ----------------------------------------------------------------------------


class _Intervals:
    """X events of one kind, collected compactly: thread, start, end, name index."""

    __slots__ = ("thread", "start", "end", "name")

    def __init__(self):
        import array

        self.thread = array.array("i")
        self.start = array.array("d")
        self.end = array.array("d")
        self.name = array.array("i")

    def add(self, thread: int, start: float, end: float, name: int) -> None:
        self.thread.append(thread)
        self.start.append(start)
        self.end.append(end)
        self.name.append(name)

    def clear(self) -> None:
        self.__init__()

    def arrays(self):
        thr = np.frombuffer(self.thread, dtype=np.int32) if len(self.thread) else np.zeros(0, np.int32)
        s = np.frombuffer(self.start, dtype=np.float64) if len(self.start) else np.zeros(0)
        e = np.frombuffer(self.end, dtype=np.float64) if len(self.end) else np.zeros(0)
        nm = np.frombuffer(self.name, dtype=np.int32) if len(self.name) else np.zeros(0, np.int32)
        keep = e > s  # an empty interval contains nothing
        thr, s, e, nm = thr[keep], s[keep], e[keep], nm[keep]
        order = np.lexsort((-e, s, thr))  # by thread, then start, longest first
        return thr[order], s[order], e[order], nm[order]


class _Table:
    __slots__ = ("index", "names")

    def __init__(self):
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def __call__(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.names)
            self.names.append(name)
        return i


def _innermost(thr, start, end, q_thr, q_ts) -> np.ndarray:
    """For each query (thread, ts): index of the innermost interval [start, end) on that
    thread that contains ts, or -1. Intervals are sorted by (thread, start, -end) and are
    expected to nest properly (a badly nested one is simply not reported)."""
    out = np.full(len(q_ts), -1, dtype=np.int64)
    if len(start) == 0 or len(q_ts) == 0:
        return out
    bounds = np.searchsorted(thr, np.arange(int(thr.max()) + 2 if len(thr) else 1))
    for t in np.unique(q_thr):
        if t < 0 or t + 1 >= len(bounds):
            continue
        a, b = int(bounds[t]), int(bounds[t + 1])
        if a == b:
            continue
        s, e = start[a:b], end[a:b]
        n = b - a
        e_sorted = np.sort(e)
        depth = np.arange(n, dtype=np.int64) - np.searchsorted(e_sorted, s, side="right")
        keys = np.sort(depth * n + np.arange(n, dtype=np.int64))
        on_thread = np.flatnonzero(q_thr == t)
        for lo in range(0, len(on_thread), _QUERY_BLOCK):  # bounded temporaries
            qi = on_thread[lo: lo + _QUERY_BLOCK]
            ts = q_ts[qi]
            k = np.searchsorted(s, ts, side="right")  # intervals started at or before ts
            d = k - np.searchsorted(e_sorted, ts, side="right")  # ... minus those ended by ts
            ok = d > 0
            pos = np.searchsorted(keys, (d - 1) * n + (k - 1), side="right") - 1
            cand = keys[np.clip(pos, 0, n - 1)]
            ok &= cand // n == d - 1
            idx = cand % n
            ok &= (s[idx] <= ts) & (ts < e[idx])
            out[qi[ok]] = idx[ok] + a
    return out


def _attribute(iv: _Intervals, q_thr, q_ts, relabel=None) -> np.ndarray:
    """Label (name index) of the innermost interval of ``iv`` holding each query, or -1;
    ``relabel(thread, start, end, name)`` may map the sorted intervals to other labels."""
    thr, start, end, name = iv.arrays()
    iv.clear()
    if relabel is not None:
        name = relabel(thr, start, end, name)
    i = _innermost(thr, start, end, q_thr, q_ts)
    out = np.full(len(q_ts), -1, dtype=np.int32)
    ok = i >= 0
    out[ok] = name[i[ok]]
    return out


def _module_paths(thr, start, end, name, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Full ``Outer/Inner`` path of each (sorted) module interval, interned."""
    table = _Table()
    path_of = np.empty(len(start), dtype=np.int32)
    stack: list[tuple[float, str]] = []  # (end, path)
    last_thr = None
    for i in range(len(start)):
        t = thr[i]
        if t != last_thr:
            stack.clear()
            last_thr = t
        s = start[i]
        while stack and stack[-1][0] <= s:
            stack.pop()
        label = names[name[i]]
        p = f"{stack[-1][1]}/{label}" if stack else label
        path_of[i] = table(p)
        stack.append((end[i], p))
    return path_of, table.names


def _size(raw) -> int | None:
    try:
        pos = raw.tell()
        size = raw.seek(0, 2)
        raw.seek(pos)
        return size or None
    except (AttributeError, OSError, ValueError):
        return None


def memory_events(raw, path: str, progress=None) -> MemoryEvents:
    """Read the ``[memory]`` events of a Chrome trace in one streaming pass.

    ``progress``, if given, gets ``progress.update(fraction=..., message=...)`` calls along
    the way (the fraction from the position in ``raw`` when it can seek).
    Raises :class:`BadInput` when the file is not a readable Chrome trace.
    """
    import array

    metadata: dict = {}
    threads: dict[tuple, int] = {}
    ops, frames, modules = _Intervals(), _Intervals(), _Intervals()
    op_table, frame_table, module_table = _Table(), _Table(), _Table()
    steps_num, steps_start, steps_end = array.array("q"), array.array("d"), array.array("d")
    opt_ends = array.array("d")
    m_ts, m_bytes = array.array("d"), array.array("q")
    m_addr = array.array("Q")
    m_missing = array.array("b")  # bit 1: the event had no "Addr", bit 2: no "Total Reserved"
    m_alloc, m_res = array.array("q"), array.array("q")
    m_dtype, m_did, m_thr = array.array("h"), array.array("h"), array.array("i")
    missing_total = missing_addr = False
    t_min, t_max = float("inf"), float("-inf")
    n = num_ops = 0
    size = _size(raw) if progress is not None else None
    # The loop below runs once per event of files with millions of them: names are bound
    # locally and type checks compare classes.
    _float, _int, _str, _dict = float, int, str, dict
    op_add, frame_add, module_add = ops.add, frames.add, modules.add
    op_id, frame_id, module_id = op_table, frame_table, module_table
    threads_get = threads.get
    ts_append, bytes_append, addr_append, thr_append = m_ts.append, m_bytes.append, m_addr.append, m_thr.append
    missing_append = m_missing.append
    alloc_append, res_append, dtype_append, did_append = m_alloc.append, m_res.append, m_dtype.append, m_did.append
    n_module_prefix = len(MODULE_PREFIX)
    events = iter_events(raw, path, metadata)
    ev: dict = {}
    while True:  # re-entered after an event that is skipped by an exception (see below)
        try:
            for ev in events:
                n += 1
                if not n % 200_000 and progress is not None:
                    progress.update(fraction=0.9 * raw.tell() / size if size else None, message=f"read {n:,} trace events")
                get = ev.get
                ts = get("ts")
                tcls = ts.__class__
                if tcls is not _float and tcls is not _int:
                    continue
                if not -_MAX_TS_US <= ts <= _MAX_TS_US:  # NaN fails it too
                    _far_ts(ts, n, path)  # raises, unless NaN or infinite: then the event has no time
                    continue
                if get("ph") == "X":
                    dur = get("dur")
                    if dur.__class__ is not _float and dur.__class__ is not _int:
                        dur = 0
                    elif not 0 <= dur <= _MAX_DUR_US:
                        dur = _dur_us(dur)
                    end = ts + dur
                    if ts < t_min:
                        t_min = ts
                    if end > t_max:
                        t_max = end
                    key = (get("pid"), get("tid"))
                    thr = threads_get(key)
                    if thr is None:
                        thr = threads[key] = len(threads)
                    name = get("name")
                    if name.__class__ is not _str:
                        name = "" if name is None else str(name)
                    if get("cat") == PYTHON_FUNCTION:
                        if name.startswith(MODULE_PREFIX):
                            module_add(thr, ts, end, module_id(name[n_module_prefix:]))
                        elif not name.startswith("<built-in"):  # source lines only: where in the user's code
                            frame_add(thr, ts, end, frame_id(name))
                    elif name.startswith(STEP_PREFIX):
                        try:
                            number = int(name[len(STEP_PREFIX):])
                        except ValueError:
                            number = -1
                        steps_num.append(number if -(1 << 63) <= number < (1 << 63) else -1)
                        steps_start.append(ts)
                        steps_end.append(end)
                    elif name.startswith("## ") and name.endswith(" ##"):
                        module_add(thr, ts, end, module_id(name[3:-3]))
                    else:
                        num_ops += 1
                        op_add(thr, ts, end, op_id(name))
                        if name.startswith(OPTIMIZER_STEP_PREFIX):
                            opt_ends.append(end)
                    continue
                if ts < t_min:
                    t_min = ts
                if ts > t_max:
                    t_max = ts
                if get("name") != MEMORY_EVENT:
                    continue
                args = get("args")
                if args.__class__ is not _dict:
                    raise BadInput(f"{path}: a [memory] event at ts {ts} has no args", file=path)
                aget = args.get
                b = aget("Bytes")
                addr = aget("Addr")
                addr_missing = addr is None
                if addr_missing:  # PyTorch of 2021 (kineto samples) wrote no "Addr": see MemoryEvents.has_addr
                    missing_addr = True
                    addr = 0
                total = aget("Total Allocated")
                res_missing = (res := aget("Total Reserved")) is None  # 2021: see MemoryEvents.has_reserved
                res = res or 0
                dt = aget("Device Type", 0)
                di = aget("Device Id", -1)
                if total is None:
                    missing_total = True
                    total = -(1 << 62)
                if not (b.__class__ is _int and addr.__class__ is _int and total.__class__ is _int
                        and res.__class__ is _int and dt.__class__ is _int and di.__class__ is _int):
                    try:  # floats, numeric strings: what int() takes
                        b, addr, total, res, dt, di = int(b), int(addr), int(total), int(res), int(dt), int(di)
                    except (TypeError, ValueError, OverflowError) as exc:
                        raise BadInput(f"{path}: a [memory] event at ts {ts} has bad args ({exc!r})", file=path) from None
                key = (get("pid"), get("tid"))  # before any column grows: an unhashable id skips the event
                thr = threads_get(key)
                if thr is None:
                    thr = threads[key] = len(threads)
                try:
                    alloc_append(total)
                    res_append(res)
                    dtype_append(dt)
                    did_append(di)
                    bytes_append(b)
                    addr_append(addr & 0xFFFFFFFFFFFFFFFF)
                except OverflowError as exc:
                    raise BadInput(f"{path}: a [memory] event at ts {ts} has bad args ({exc!r})", file=path) from None
                ts_append(ts)
                thr_append(thr)
                missing_append(addr_missing + 2 * res_missing)
            break
        except TypeError as exc:
            if _unhashable_ids(ev):
                continue  # as trace_columns does (see there): the event is skipped, the pass goes on
            raise BadInput(f"{path}: trace event {n - 1} is malformed ({exc})", file=path) from None
        except AttributeError as exc:  # an event whose fields have impossible types
            raise BadInput(f"{path}: trace event {n - 1} is malformed ({exc})", file=path) from None

    if progress is not None:
        progress.update(message=f"read {n:,} trace events; attributing {len(m_ts):,} memory events")

    def col(a, dtype):  # a view on the array.array; indexing with ``order`` copies it
        return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)

    # Each column is sorted into a new array and its array.array dropped right away.
    order = np.argsort(col(m_ts, np.float64), kind="stable")
    ts = col(m_ts, np.float64)[order]
    del m_ts, ts_append
    byts = col(m_bytes, np.int64)[order]
    del m_bytes, bytes_append
    addr = col(m_addr, np.uint64)[order]
    del m_addr, addr_append
    total_reserved = col(m_res, np.int64)[order]
    del m_res, res_append
    dtype_ = col(m_dtype, np.int16)[order]
    did = col(m_did, np.int16)[order]
    total_alloc = col(m_alloc, np.int64)[order]
    del m_alloc, alloc_append
    missing = col(m_missing, np.int8)[order]
    has_addr = (missing & 1) == 0 if missing_addr else None
    has_reserved = (missing & 2) == 0
    del m_missing, missing_append, missing
    if missing_total:
        # Older traces (PyTorch of 2021, e.g. kineto's samples) have no "Total
        # Allocated": rebuild it per device as the running sum of "Bytes" (+ alloc, - free).
        # Should that sum dip below 0, the frees prove at least that much was live before
        # the first event: the sum is lifted by it, the least the file allows.
        for dt, di in set(zip(dtype_.tolist(), did.tolist())):
            sel = (dtype_ == dt) & (did == di)
            running = np.cumsum(byts[sel])
            total_alloc[sel] = running + max(0, -int(running.min()))
    thr = col(m_thr, np.int32)[order]
    del order, m_thr, thr_append

    op_col = _attribute(ops, thr, ts)
    frame_col = _attribute(frames, thr, ts)
    module_names: list[str] = []

    def paths(m_thr_, m_s, m_e, m_n):
        nonlocal module_names
        path_of, module_names = _module_paths(m_thr_, m_s, m_e, m_n, module_table.names)
        return path_of

    module_col = _attribute(modules, thr, ts, paths)

    steps = None
    if len(steps_start):
        s_start = col(steps_start, np.float64)
        so = np.argsort(s_start, kind="stable")
        steps = Steps(number=col(steps_num, np.int64)[so], start=s_start[so], end=col(steps_end, np.float64)[so])

    return MemoryEvents(
        path=path,
        ts=ts,
        addr=addr,
        bytes=byts,
        total_allocated=total_alloc,
        total_reserved=total_reserved,
        device_type=dtype_,
        device_id=did,
        thread=thr,
        op=op_col,
        module=module_col,
        frame=frame_col,
        threads=list(threads),
        op_names=op_table.names,
        module_names=module_names,
        frame_names=frame_table.names,
        has_addr=has_addr,
        has_reserved=None if has_reserved.all() else has_reserved,
        steps=steps,
        optimizer_step_ends=np.sort(col(opt_ends, np.float64)),
        metadata=metadata,
        num_trace_events=n,
        num_ops=num_ops,
        start_us=None if t_min == float("inf") else float(t_min),
        end_us=None if t_max == float("-inf") else float(t_max),
    )


# -- export_memory_timeline JSON --------------------------------------------------------------


#: The largest memory-timeline JSON read (decompressed): it is parsed whole, and its Python
#: lists take ~5x the text. torch writes ~100 bytes a point, and a point per distinct time
#: with a memory event: 64 MiB is ~600,000 points, far more than a profiling window has.
MAX_TIMELINE_BYTES = 64 << 20
_INT64 = 2.0**63


def parse_memory_timeline(data: bytes, path: str) -> MemoryTimeline:
    """Parse ``prof.export_memory_timeline(path.json | path.json.gz)`` output.

    Raises :class:`BadInput` when ``data`` is not ``[times, sizes]`` with one row of
    category sizes per time, and :class:`TooLarge` past ``MAX_TIMELINE_BYTES``.
    """
    def bad(problem: str) -> BadInput:
        return BadInput(f"{path}: {problem}", file=path)

    def too_large() -> TooLarge:
        return TooLarge(f"{path}: a memory timeline larger than {MAX_TIMELINE_BYTES >> 20} MiB (decompressed), "
                        "the limit of this reader", file=path)

    if data[:2] == b"\x1f\x8b":
        # Bounded: a few kilobytes of gzip can expand to gigabytes.
        d = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(data, MAX_TIMELINE_BYTES + 1)
            if len(out) > MAX_TIMELINE_BYTES or d.unconsumed_tail:
                raise too_large()
            if not d.eof:
                raise bad("truncated gzip stream")
        except zlib.error as exc:
            raise bad(f"corrupt gzip data ({exc})") from None
        data = out
    if len(data) > MAX_TIMELINE_BYTES:
        raise too_large()
    if not data.strip():
        raise bad("empty file; expected a PyTorch memory timeline JSON ([times, sizes])")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"not JSON ({exc}); expected a PyTorch memory timeline ([times, sizes])") from None
    except RecursionError:  # [[[[...: the decoder recurses per level
        raise TooLarge(f"{path}: nested deeper than Python's JSON decoder reads; not a PyTorch memory timeline",
                       file=path) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise bad(f"not a PyTorch memory timeline: {exc}") from None
    if not (isinstance(doc, list) and len(doc) == 2 and isinstance(doc[0], list) and isinstance(doc[1], list)):
        raise bad("not a PyTorch memory timeline: expected a JSON array [times, sizes]")
    times, sizes = doc
    if len(times) != len(sizes):
        raise bad(f"not a PyTorch memory timeline: {len(times)} times but {len(sizes)} rows of sizes")
    k = len(CATEGORIES)
    width = len(sizes[0]) if sizes and isinstance(sizes[0], list) else k + 1
    if width not in (k, k + 1) or any(not isinstance(r, list) or len(r) != width for r in sizes):
        raise bad(f"not a PyTorch memory timeline: each row of sizes must hold {k + 1} numbers")
    try:
        t = np.asarray(times, dtype=np.float64)
        s = np.asarray(sizes, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past a double's range
        raise bad("not a PyTorch memory timeline: times and sizes must be numbers") from None
    # torch writes int64 microseconds and bytes: NaN, infinities and numbers past int64
    # (which astype would turn into garbage) are no timeline.
    if s.size and not (np.abs(s) < _INT64).all() or t.size and not (np.abs(t) < _INT64).all():
        raise bad("not a PyTorch memory timeline: times and sizes must be finite numbers within 64 bits")
    s = s.reshape(len(sizes), width)
    if width == k + 1:
        s = s[:, 1:]
    return MemoryTimeline(path=path, times_us=t.astype(np.int64), sizes=s.astype(np.int64))


# -- trace viewer columns -------------------------------------------------------------------


def trace_columns(raw, path: str, progress=None, sink=None):
    """Every event of a Chrome trace as trace-viewer columns
    (:class:`profscope.model.trace.TraceEvents`), in one streaming pass.

    * ``X`` complete events are slices; ``B``/``E`` pairs are matched per (pid, tid) as a
      stack (an ``E`` closes the innermost open ``B``; its args are merged in); ``B``
      left open at the end are closed at the last timestamp of the trace.
    * ``i``/``I``/``n`` instants are zero-length slices on their thread (process- or
      global-scoped ones too); torch's ``[memory]`` instants become counter tracks
      ("memory allocated/reserved", per device) instead.
    * ``C`` counters: one counter track per (pid, name, args key).
    * ``M`` metadata: process and thread names and sort indexes.
    * Flow events (``s`` start, ``t`` step, ``f`` end, joined by ``cat`` and ``id``) become
      arrows between the points they mark (torch's ``fwdbwd``: a forward op to its
      backward op); async (``b``/``e``/``n``) events are not drawn.
    * ``ProfilerStep#N`` slices are also the steps.

    Times: ``ts``/``dur`` are microseconds (floats); stored as integer picoseconds from the
    first event's whole microsecond. Args are kept as JSON bytes per event.

    ``sink`` (see :func:`profscope.formats.xplane_trace.read_trace`) receives the columns
    and the args bytes every million events, so nothing grows with the file; without one
    they are collected in memory.
    """
    import array

    import orjson

    from profscope.model.trace import MemorySink, NameTable, TraceEvents, Track

    names = NameTable()
    # threads and counters by their (pid, tid) as Chrome's viewer keys them (_id_key); the
    # aliases map each id pair as the file writes it to those
    tracks: dict[tuple, int] = {}
    track_alias: dict[tuple, int] = {}
    track_list: list[Track] = []
    proc_names: dict = {}
    proc_sort: dict = {}
    thread_names: dict = {}
    thread_sort: dict = {}
    col_track, col_start, col_dur, col_name = array.array("i"), array.array("q"), array.array("q"), array.array("i")
    col_off, col_len = array.array("q"), array.array("i")
    blob = bytearray()
    blob_base = 0
    out_sink = MemorySink() if sink is None else sink
    open_b: dict[tuple, list] = {}
    # (cat, id) -> [(ts_ps, phase order, name, track, binds to the enclosing slice)]: paired
    # at the end, in time order, since kineto writes each CPU->GPU flow's ``f`` before its ``s``
    flow_points: dict[tuple, list[tuple[int, int, int, int, bool]]] = {}
    counters: dict[tuple, tuple] = {}
    counter_alias: dict[tuple, tuple] = {}
    steps: list[tuple[str, int, int]] = []
    base_us: float | None = None
    last_ps = 0
    size = _size(raw)
    dumps = orjson.dumps

    def track_of(pid, tid) -> int:
        t = track_alias.get((pid, tid))
        if t is None:
            key = (_id_key(pid), _id_key(tid))
            t = tracks.get(key)
            if t is None:
                if len(track_list) >= MAX_TRACKS:
                    raise TooLarge(f"{path}: more than {MAX_TRACKS:,} threads (distinct pid, tid), the limit of this "
                                   "reader for one trace", file=path)
                t = tracks[key] = len(track_list)
                track_list.append(Track(_int_id(key[0]), _int_id(key[1]), "", len(track_list)))
            track_alias[(pid, tid)] = t
        return t

    def counter_of(series, unit):
        c = counter_alias.get(series)
        if c is None:
            key = (_id_key(series[0]), series[1])
            c = counters.get(key)
            if c is None:
                if len(counters) >= MAX_COUNTERS:
                    raise TooLarge(f"{path}: more than {MAX_COUNTERS:,} counter series, the limit of this reader "
                                   "for one trace", file=path)
                c = counters[key] = (array.array("q"), array.array("d"), unit)
            counter_alias[series] = c
        return c

    def add(t, ts_ps, dur_ps, name, args):
        if args:
            try:
                data = dumps(args)
            except TypeError:  # orjson: an integer beyond 64 bits, or nesting past its limit
                data = _dump_args(args, path)
            # The depth budget, on the args this index stores and serves back (an opener
            # count bounds the depth from above: the exact walk runs only for the rare args
            # with that many brackets; most are shorter than _DEEP_MIN bytes anyway).
            if len(data) >= _DEEP_MIN and data.count(b"{") + data.count(b"[") >= MAX_DEPTH \
                    and _depth_over(args, MAX_DEPTH - 1):
                raise TooLarge(f"{path}: an event's args nest deeper than {MAX_DEPTH} levels (the event "
                               "counted), the limit of this reader", file=path)
            # no column grows before the args are known to be storable
            col_off.append(blob_base + len(blob))
            col_len.append(len(data))
            blob.extend(data)
        else:
            col_off.append(0)
            col_len.append(0)
        col_track.append(t)
        col_start.append(ts_ps)
        col_dur.append(max(0, dur_ps))
        col_name.append(names(name))

    def flush():
        nonlocal blob, blob_base
        if len(col_start):
            out_sink.events(col(col_track, np.int32), col(col_start, np.int64), col(col_dur, np.int64),
                            col(col_name, np.int32), col(col_off, np.int64), col(col_len, np.int32))
            for a in (col_track, col_start, col_dur, col_name, col_off, col_len):
                del a[:]
        if blob:
            out_sink.blob(bytes(blob))
            blob_base += len(blob)
            blob = bytearray()

    def col(a, dtype):
        return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype)

    n = 0
    _float, _int, _dict = float, int, dict
    events = iter_events(raw, path)
    ev: dict = {}
    while True:  # re-entered after an event that is skipped by an exception (see below)
        try:
            for ev in events:
                n += 1
                if n % 1_000_000 == 0:
                    flush()
                if progress is not None and n % 200_000 == 0 and size:
                    try:
                        pos = raw.tell()
                    except (OSError, ValueError):
                        pos = 0
                    progress.update(fraction=min(0.95, pos / size), message=f"read {n:,} events")
                ph = ev.get("ph")
                if ph == "M":
                    name, args = ev.get("name"), ev.get("args")
                    if args.__class__ is not _dict:  # Chrome's viewer reads args.name of an object only
                        args = {}
                    pid, tid = _id_key(ev.get("pid")), _id_key(ev.get("tid"))
                    if name == "process_name":
                        proc_names[pid] = str(args.get("name", ""))
                    elif name == "process_sort_index":
                        proc_sort[pid] = _sort_index(args.get("sort_index"))
                    elif name == "thread_name":
                        thread_names[(pid, tid)] = str(args.get("name", ""))
                    elif name == "thread_sort_index":
                        thread_sort[(pid, tid)] = _sort_index(args.get("sort_index"))
                    continue
                ts = ev.get("ts")
                tcls = ts.__class__
                # One chained comparison on the hot path: NaN and infinities fail it as well as
                # times too far to be a trace's; _far_ts tells them apart.
                if (tcls is not _float and tcls is not _int) or not -_MAX_TS_US <= ts <= _MAX_TS_US:
                    if tcls is _float or tcls is _int:
                        _far_ts(ts, n, path)
                    continue  # no time (missing, a string, NaN, infinite): nothing to place, as in Chrome's viewer
                if base_us is None:
                    base_us = float(int(ts))
                d = (ts - base_us) * 1e6
                if not -_MAX_PS <= d <= _MAX_PS:
                    raise BadInput(f"{path}: event {n} has ts {ts!r} µs, {abs(ts - base_us):.3g} µs from the first "
                                   "event; not a trace this reader accepts", file=path)
                ts_ps = round(d)
                name = ev.get("name")
                name = "" if name is None else str(name)
                if ph == "X":
                    dur = ev.get("dur")
                    dcls = dur.__class__
                    if (dcls is _float or dcls is _int) and 0 <= dur <= _MAX_DUR_US:
                        dur_ps = round(dur * 1e6)
                    else:  # missing, not a number, NaN, negative or beyond 2^60 ps (13 days)
                        dur_ps = _dur_ps(dur)
                    t = track_of(ev.get("pid"), ev.get("tid"))
                    add(t, ts_ps, dur_ps, name, ev.get("args"))
                    last_ps = max(last_ps, ts_ps + dur_ps)
                    if name.startswith(STEP_PREFIX):
                        steps.append((name.removeprefix(STEP_PREFIX), ts_ps, max(0, dur_ps)))
                elif ph == "B":
                    open_b.setdefault((ev.get("pid"), ev.get("tid")), []).append((ts_ps, name, ev.get("args")))
                    last_ps = max(last_ps, ts_ps)
                elif ph == "E":
                    stack = open_b.get((ev.get("pid"), ev.get("tid")))
                    last_ps = max(last_ps, ts_ps)
                    if stack:
                        b_ts, b_name, b_args = stack.pop()
                        e_args = ev.get("args")
                        if e_args.__class__ is _dict and e_args:  # merged into the B's args, as Chrome's viewer does
                            args = dict(b_args) if b_args.__class__ is _dict else ({"args": b_args} if b_args else {})
                            args.update(e_args)
                        else:
                            args = b_args
                        add(track_of(ev.get("pid"), ev.get("tid")), b_ts, ts_ps - b_ts, b_name, args)
                elif ph in ("i", "I"):
                    last_ps = max(last_ps, ts_ps)
                    args = ev.get("args") or {}
                    if name == MEMORY_EVENT and args.__class__ is _dict:
                        dev = args.get("Device Id", -1)
                        pid = ev.get("pid")
                        for key, label in (("Total Allocated", "memory allocated"), ("Total Reserved", "memory reserved")):
                            v = args.get(key)
                            if (v.__class__ is _int or v.__class__ is _float) and -_MAX_COUNTER <= v <= _MAX_COUNTER:
                                c = counter_of((pid, f"{label} (device {dev})"), "bytes")
                                c[0].append(ts_ps)
                                c[1].append(float(v))
                        continue
                    add(track_of(ev.get("pid"), ev.get("tid")), ts_ps, 0, name, args)
                elif ph in ("s", "t", "f"):
                    fid = ev.get("id", ev.get("bind_id"))
                    if fid is None or isinstance(fid, (dict, list)):
                        continue
                    t = track_of(ev.get("pid"), ev.get("tid"))
                    # Catapult's binding: ``s`` and ``t`` to the enclosing slice, ``f`` too
                    # with ``"bp": "e"`` (kineto's), else to the next slice (FlowPoints)
                    flow_points.setdefault((str(ev.get("cat")), str(fid)), []).append(
                        (ts_ps, _FLOW_PHASES[ph], names(name), t, ph != "f" or ev.get("bp") == "e"))
                elif ph == "C":
                    last_ps = max(last_ps, ts_ps)
                    args = ev.get("args") or {}
                    if args.__class__ is not _dict:
                        continue
                    pid = ev.get("pid")
                    for key, v in args.items():
                        # Counter values a chart can draw: finite, within a double (a NaN or an
                        # integer of 400 digits is no sample: skipped, the rest kept).
                        if (v.__class__ is _int or v.__class__ is _float) and -_MAX_COUNTER <= v <= _MAX_COUNTER:
                            label = name if len(args) == 1 else f"{name} {key}"
                            c = counter_of((pid, label), "")
                            c[0].append(ts_ps)
                            c[1].append(float(v))
            break
        except TypeError:
            # A list or an object as pid or tid: no profiler writes one, and no thread can be
            # keyed by it (unhashable) without guessing what it means. The event is skipped,
            # the rest of the trace kept, as for an event without a time; nothing was stored
            # for it (each branch looks its keys up before it stores anything).
            if _unhashable_ids(ev):
                continue
            raise
    for (pid, tid), stack in open_b.items():
        for b_ts, b_name, b_args in stack:
            add(track_of(pid, tid), b_ts, last_ps - b_ts, b_name, b_args)
    processes, out_counters = _tables(tracks, track_list, (thread_names, thread_sort, proc_names, proc_sort), counters)
    flush()
    steps.sort(key=lambda s: s[1])
    flows, bound = _pair_flows(flow_points, names)
    out = TraceEvents.without_events(
        path, "", int(base_us or 0) * 10**6, "json", names=names.names, tracks=track_list,
        processes=processes, counters=out_counters, steps=steps, flows=flows, flow_points=bound)
    if sink is None:
        out_sink.fill(out)
    return out


def _tables(tracks: dict, track_list: list, named: tuple, counters: dict) -> tuple[list, list]:
    """Name and order what :func:`trace_columns` read: the threads (``tracks``, by pid and
    tid as _id_key keys them, into ``track_list``) get their names and sort indexes from
    the ``M`` events (``named``: thread names and sort indexes by (pid, tid), process
    names and sort indexes by pid); the processes of threads and counters, ordered by sort
    index (else pid); each counter series a track of its own, appended to ``track_list``,
    its samples in time order."""
    from profscope.model.trace import Counter, Process, Track

    thread_names, thread_sort, proc_names, proc_sort = named
    for (pid, tid), ti in tracks.items():
        t = track_list[ti]
        t.name = thread_names.get((pid, tid)) or f"thread {tid}"
        si = thread_sort.get((pid, tid))
        if si is not None:
            t.sort_index = si
    pids = {pid for pid, _ in tracks} | {pid for pid, _ in counters}
    processes = []
    for pid in sorted(pids, key=lambda p: _int_id(p) if proc_sort.get(p) is None else proc_sort[p]):
        si = proc_sort.get(pid)
        processes.append(Process(_int_id(pid), proc_names.get(pid) or f"process {pid}",
                                 _int_id(pid) if si is None else si))
    out_counters = []
    for (pid, label), (t, v, unit) in counters.items():
        ti = len(track_list)
        track_list.append(Track(_int_id(pid), 0, label, 10_000 + ti, "counter"))
        tt = np.frombuffer(t, dtype=np.int64)
        vv = np.frombuffer(v, dtype=np.float64)
        o = np.argsort(tt, kind="stable")
        out_counters.append(Counter(ti, label, unit, tt[o], vv[o]))
    return processes, out_counters


_MAX_PS = 1 << 60  # event times and durations beyond this (13 days) are not a real trace
_MAX_DUR_US = _MAX_PS / 1e6
#: Largest |ts| in µs: 2^53 (the last integer a double holds exactly; in Unix µs, the year
#: 2255). Past it the time origin no longer fits the answers' int64 nanoseconds (the
#: window's ``originNs``): a trace in nanoseconds written as µs, or a corrupt number.
_MAX_TS_US = float(1 << 53)
_MAX_COUNTER = sys.float_info.max
#: pid, tid and sort indexes travel as JSON numbers to the page (JS: exact up to 2^53) and
#: as int64 columns in the answers; an integer beyond that is treated as a name (hashed,
#: as string ids are), so the index never holds a number an answer cannot write.
_MAX_ID = 1 << 53
_FLOW_PHASES = {"s": 0, "t": 1, "f": 2}
#: A string that is an integer's own decimal form (no sign but "-", no leading zero), at
#: most 16 digits: the ids _id_key reads as that integer.
_DECIMAL_ID = re.compile(r"-?(?:0|[1-9][0-9]{0,15})")


def _id_key(value):
    """A pid or tid as Chrome's trace viewer keys it: JavaScript object keys are strings,
    so 25738 and "25738" name one thread (kineto's 2021 traces write a thread's slices with
    the tid "25738" and the flows that start on it with 25738; Catapult draws them on one
    thread). A string that is an integer's decimal form is that integer here; any other
    value is kept as it is."""
    if value.__class__ is str and _DECIMAL_ID.fullmatch(value):
        return int(value)
    return value


def _far_ts(ts, n: int, path: str) -> None:
    """For a ts outside ±_MAX_TS_US: return when it is NaN or infinite (the event has no
    time and is skipped, as one without ``ts``: Chrome's viewer cannot place it either),
    else refuse the trace (a time that far is a corrupt file or a unit error)."""
    if ts.__class__ is float and not math.isfinite(ts):
        return
    shown = f"{ts:.6g}" if ts.__class__ is float else (str(ts) if len(str(ts)) < 30 else f"a {len(str(ts))}-digit number")
    raise BadInput(f"{path}: event {n} has ts {shown} µs, beyond ±2^53 µs (285 years); not a trace this reader accepts",
                   file=path)


def _dur_ps(dur) -> int:
    """A ``dur`` outside the fast path's range, as picoseconds: 0 when missing, not a
    number or NaN; capped at ±2^60 ps (13 days: a longer slice is a corrupt number, and
    every later sum must stay in int64). Negative ones are kept (added as 0, as before)."""
    if (dur.__class__ is not float and dur.__class__ is not int) or dur != dur:
        return 0
    if dur >= _MAX_DUR_US:
        return _MAX_PS
    if dur <= -_MAX_DUR_US:
        return -_MAX_PS
    return round(dur * 1e6)


def _dur_us(dur: float | int) -> float | int:
    """memory_events' reading of a ``dur`` outside [0, 2^60 ps]: as :func:`_dur_ps`, in µs."""
    if dur != dur:
        return 0
    return max(-_MAX_DUR_US, min(_MAX_DUR_US, dur))


def _sort_index(value) -> int | None:
    """A ``sort_index`` as an int the index can hold, or None (not a finite number)."""
    if value.__class__ is int:
        return max(-_MAX_ID, min(_MAX_ID, value))
    if value.__class__ is float and math.isfinite(value):
        return int(max(-_MAX_ID, min(_MAX_ID, value)))
    return None


def _unhashable_ids(ev) -> bool:
    return isinstance(ev, dict) and any(isinstance(ev.get(k), (list, dict)) for k in ("pid", "tid"))


def _dump_args(args, path: str) -> bytes:
    """orjson refused ``args``: an integer beyond 64 bits (kept as its decimal string, as
    the event answer writes one past 2^63: exact, where a browser's ``JSON.parse`` would
    round it), or nesting past orjson's limit (refused: MAX_DEPTH)."""
    import orjson

    try:
        return orjson.dumps(_big_ints_as_text(args))
    except TypeError:
        raise TooLarge(f"{path}: an event's args nest deeper than {MAX_DEPTH} levels (the event counted), "
                       "the limit of this reader", file=path) from None


def _big_ints_as_text(v):
    if v.__class__ is int:
        return v if -(1 << 63) <= v < (1 << 64) else str(v)
    if v.__class__ is dict:
        return {k: _big_ints_as_text(x) for k, x in v.items()}
    if v.__class__ is list:
        return [_big_ints_as_text(x) for x in v]
    return v


def _pair_flows(points: dict[tuple, list[tuple]], names) -> tuple[list[tuple[int, int, int, int, int]], FlowPoints | None]:
    """The flow events of each (cat, id), whatever their order in the file, as arrows
    (name, from track, from ps, to track, to ps) and as :class:`FlowPoints` (the flows'
    points, numbered from 1, for the index to bind to slices; None without a flow). In time
    order (``s`` before ``t`` before ``f`` at one time), an ``s`` opens a flow, each later
    ``t`` or ``f`` is joined to the point before it, and an ``f`` closes it (an id may be
    reused afterwards). Points before any ``s`` of their id start nothing, as in the Trace
    Event Format; a flow's first point is its start (``flow_out``), its last its end
    (``flow_in``), any between a middle one (both)."""
    from profscope.model.trace import FLOW_END, FLOW_MID, FLOW_START, FlowPoints

    arrows = []
    cols: tuple[list, ...] = ([], [], [], [], [], [])  # flow, track, ts, kind, enclosing, category
    number = 0

    def close(flow: list, cat: int) -> None:
        nonlocal number
        if len(flow) < 2:
            return  # an ``s`` nothing joined: no arrow
        number += 1
        for k, (ts, track, enclosing) in enumerate(flow):
            kind = FLOW_START if k == 0 else FLOW_END if k == len(flow) - 1 else FLOW_MID
            for col, v in zip(cols, (number, track, ts, kind, enclosing, cat)):
                col.append(v)

    for (cat, _), pts in points.items():
        pts.sort()
        cat_id = names(cat) if cat != "None" else -1  # the key's str() of a missing cat
        prev, flow = None, []
        for ts, phase, name, track, enclosing in pts:
            if phase == 0:
                close(flow, cat_id)
                prev, flow = (name, track, ts), [(ts, track, enclosing)]
                continue
            if prev is not None:
                arrows.append((prev[0], prev[1], prev[2], track, ts))
                flow.append((ts, track, enclosing))
                prev = None if phase == 2 else (prev[0], track, ts)
                if phase == 2:
                    close(flow, cat_id)
                    flow = []
        close(flow, cat_id)
    if not number:
        return arrows, None
    return arrows, FlowPoints(np.asarray(cols[0], np.int64), np.asarray(cols[1], np.int32),
                              np.asarray(cols[2], np.int64), np.asarray(cols[3], np.int8),
                              np.asarray(cols[4], bool), np.asarray(cols[5], np.int32))


def _int_id(value) -> int:
    """A pid/tid as an int (Chrome traces allow strings: those get a stable hash, and so do
    numbers past ±2^53, see _MAX_ID)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and -_MAX_ID <= value <= _MAX_ID:
        return value
    if isinstance(value, float) and value.is_integer() and -_MAX_ID <= value <= _MAX_ID:
        return int(value)
    import zlib as _z

    return 1_000_000 + (_z.crc32(str(value).encode()) & 0x7FFFFFFF)
