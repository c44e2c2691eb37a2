"""The XSpace protobuf wire format, decoded in bulk with numpy.

The readers of ``*.xplane.pb`` files (:mod:`profscope.formats.xplane_allocator`,
:mod:`profscope.formats.xplane_trace` and the modules it drives) never build protobuf
objects for events: a plane is read into one buffer, split into lines and event byte
ranges, and the fields of every event and stat are decoded side by side, chunk by chunk.
Only the small messages (a plane without its lines, a line header without its events,
the metadata maps) go through the generated ``xplane_pb2``.

The fields decoded here, with their numbers (``protos/xplane.proto``, the upstream
``tsl/profiler/protobuf/xplane.proto``):

* ``XSpace``: ``planes = 1`` (located by :func:`profscope.formats.xplane.scan`, read here
  plane by plane: :func:`read_plane_bytes`, :func:`plane_metadata`).
* ``XPlane``: ``lines = 3`` split off (:func:`split_plane`); every other field (``id = 1``,
  ``name = 2``, ``event_metadata = 4``, ``stat_metadata = 5``, ``stats = 6``) is kept as
  bytes and parsed as an ``XPlane`` without lines.
* ``XLine``: ``events = 4`` found in runs (:func:`line_events`, :func:`event_run`); the
  header fields (``id = 1``, ``name = 2``, ``timestamp_ns = 3``, ``duration_ps = 9``,
  ``display_id = 10``, ``display_name = 11``) are kept as bytes and parsed as an ``XLine``
  without events; :func:`line_name` reads just ``name = 2``.
* ``XEvent`` (:func:`decode_events`): ``metadata_id = 1``, ``offset_ps = 2`` and
  ``num_occurrences = 5`` (the oneof ``data``: the last one set wins, ``offset_ps`` reads 0
  when the other one is set), ``duration_ps = 3``, ``stats = 4``.
* ``XStat``: ``metadata_id = 1`` and the oneof ``value``: ``double_value = 2``,
  ``uint64_value = 3``, ``int64_value = 4``, ``str_value = 5``, ``bytes_value = 6``,
  ``ref_value = 7`` (the value case is the field number: :data:`DOUBLE` ... :data:`REF`).
  Stats are kept for the kinds this package reads (by their metadata *name*, as XProf
  types stats) and read per event through :class:`StatView` with XProf's
  ``XStatVisitor`` readers; strings through :class:`Strings` (``StrOrRefValue``).

Protobuf's rules are kept: fields in any order, unknown fields skipped, a repeated
scalar field's last occurrence wins. The usual layouts (an event as ``08 <metadata id>
10|28 ...``, a stat as ``08 <metadata id> <tag> <value>``) take a fast vectorised path;
any other layout falls back to the generic field walk (:func:`walk`), so the result is
the sequential parser's.

The primitives: :func:`windows` (the buffer as aligned uint64 words), :func:`varints` (a
varint at every position, 8 bytes at once), :func:`fixed64`, :func:`walk` (the top-level
fields of many messages side by side), :func:`next_field` (one field, in Python).

Speed: about 9 us per allocator event with its 14 stats
(``benchmarks/bench_memory_profile.py``), and about 5x the plane's size in memory.

Corrupt or truncated input raises :class:`~profscope.errors.BadInput` naming the file
(:func:`xspace_errors`).
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from profscope.forksafe import disposable
from profscope.formats import protowire as wire
from profscope.formats import xplane
from profscope.formats.protos import xplane_pb2

try:  # the native twin of the event decoders below (setup.py builds it where it can)
    from profscope.formats import _xplane_scan as _native
except ImportError:  # pragma: no cover - no C compiler at install time
    _native = None
else:
    _native.set_truncated(wire.Truncated)


def native_enabled() -> bool:
    """Whether the native decoder (``profscope.formats._xplane_scan``) is used:
    when it is built, unless ``PROFSCOPE_NATIVE=0`` (tests compare both paths)."""
    return _native is not None and os.environ.get("PROFSCOPE_NATIVE", "1") != "0"


__all__ = [
    "BYTES",
    "DOUBLE",
    "INT64",
    "PAD",
    "REF",
    "STR",
    "UINT64",
    "Events",
    "KindStats",
    "StatView",
    "Strings",
    "cat",
    "decode_events",
    "decode_plane",
    "event_run",
    "event_run_part",
    "fixed64",
    "line_events",
    "line_name",
    "map_plane_bytes",
    "mid_mask",
    "native_enabled",
    "next_field",
    "plane_metadata",
    "read_plane_bytes",
    "run_count",
    "split_plane",
    "varints",
    "walk",
    "windows",
    "xspace_errors",
]


# ---------------------------------------------------------------------------
# Vectorized protobuf wire decoding
# ---------------------------------------------------------------------------

PAD = 24  # zero bytes after a plane's bytes: reads past the end stay in the buffer
_M7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_M8 = np.uint64(0x8080808080808080)
_GROUPS = [(np.uint64(k), np.uint64(0x7F << (7 * k))) for k in range(1, 8)]
_ONE = np.uint64(1)


class _Malformed(Exception):
    pass


@contextlib.contextmanager
def xspace_errors(path: str):
    """Anything a corrupt or truncated XSpace makes the wire readers (or protobuf) raise
    becomes a :class:`BadInput` naming the file."""
    try:
        yield
    except (wire.Truncated, _Malformed, ValueError, IndexError, EOFError, OSError) as e:
        raise wire.wire_error(path, "XSpace profile", e) from e
    except wire.DecodeError as e:  # upb's parser (any other exception is a bug, and surfaces)
        raise wire.wire_error(path, "XSpace profile", e) from e


def windows(b: np.ndarray) -> np.ndarray:
    """``b`` as aligned little-endian uint64 words (``b`` padded to a multiple of 8)."""
    w = b[: len(b) // 8 * 8].view("<u8")
    return w if w.flags.aligned else w.copy()


_C1 = np.uint64(1)
_C63 = np.uint64(63)


def _read8(w: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The 8 bytes at each position as one little-endian uint64 (two aligned reads)."""
    q = pos >> 3
    r = ((pos & 7) << 3).astype(np.uint64)
    return (w[q] >> r) | ((w[q + 1] << _C1) << (_C63 - r))


def varints(b: np.ndarray, pos: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at every position: (values as uint64, next positions).

    One-byte varints (tags, lengths, small values) cost one byte read; the others are
    decoded branch-free from the 8 bytes at their position read as one uint64 (the first
    byte without the continuation bit ends the varint, the 7-bit groups are packed
    together); longer ones (negative int64s: 10 bytes) go through a byte loop.
    """
    first = b[pos]
    val = first.astype(np.uint64)
    nxt = pos + 1
    more = np.flatnonzero(first >= 0x80)
    if more.size:
        second = b[pos[more] + 1]
        two = second < 0x80
        m2 = more[two]
        val[m2] = (first[m2] & 0x7F).astype(np.uint64) | (second[two].astype(np.uint64) << np.uint64(7))
        nxt[m2] = pos[m2] + 2
        wide = more[~two]
        if wide.size:
            if w is None:
                w = windows(b)
            val[wide], nxt[wide] = _wide_varints(b, w, pos[wide])
    return val, nxt


def _wide_varints(b, w, pos):
    x = _read8(w, pos)
    term = ~x & _M8
    t = term & (~term + _ONE)  # the lowest terminating byte's high bit
    keep = (t << _ONE) - _ONE
    y = x & keep & _M7
    val = y & np.uint64(0x7F)
    for k, m in _GROUPS:
        val |= (y >> k) & m
    nxt = pos + (np.bitwise_count(keep).astype(np.int64) >> 3)
    long = np.flatnonzero(term == 0)
    if long.size:
        val[long], nxt[long] = _long_varints(b, pos[long])
    return val, nxt


def _long_varints(b: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    val = np.zeros(len(pos), dtype=np.uint64)
    nxt = pos.copy()
    sub = np.arange(len(pos))
    p = pos.copy()
    shift = 0
    while sub.size:
        if shift > 63:
            raise _Malformed("varint longer than 10 bytes")
        byte = b[p]
        val[sub] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        cont = byte >= 0x80
        done = sub[~cont]
        nxt[done] = p[~cont] + 1
        sub, p = sub[cont], p[cont] + 1
        shift += 7
    return val, nxt


def fixed64(w: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _read8(w, pos)


def walk(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, w: np.ndarray | None = None):
    """Decode the top-level fields of messages ``b[starts[i]:ends[i]]`` side by side.

    Yields one batch per field position (the first field of every message, then the
    second, ...): ``(msg, number, wiretype, value, end)`` where ``value`` is the varint,
    the fixed64 bits, or the payload start of a LEN field (``end`` its end). Batches come
    in field order, so scattering them in order lets the last field win, as protobuf does.
    """
    if w is None:
        w = windows(b)
    active = np.flatnonzero(starts < ends)
    cur = starts[active]
    stop = ends[active]
    while active.size:
        tag, p = varints(b, cur, w)
        number = (tag >> np.uint64(3)).astype(np.int64)
        wt = (tag & np.uint64(7)).astype(np.int8)
        if not number.all():
            raise _Malformed("field number 0")
        value = np.zeros(len(active), dtype=np.uint64)
        fend = np.zeros(len(active), dtype=np.int64)
        nxt = p + 4  # fixed32
        m = wt == 0
        if m.all():
            value, nxt = varints(b, p, w)
        else:
            if m.any():
                value[m], nxt[m] = varints(b, p[m], w)
            m = wt == 1
            if m.any():
                value[m] = fixed64(w, p[m])
                nxt[m] = p[m] + 8
            m = wt == 2
            if m.any():
                ln, q = varints(b, p[m], w)
                if (ln > np.uint64(1 << 40)).any():
                    raise _Malformed("length out of range")
                value[m] = q.astype(np.uint64)
                fend[m] = q + ln.astype(np.int64)
                nxt[m] = fend[m]
            bad = (wt > 2) & (wt != 5)
            if bad.any():
                raise _Malformed(f"unsupported wire type {int(wt[bad][0])}")
        if (nxt > stop).any():
            raise wire.Truncated
        yield active, number, wt, value, fend
        keep = nxt < stop
        active, cur, stop = active[keep], nxt[keep], stop[keep]


def _last_per_msg(n: int, msg: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    out = np.full(n, fill, dtype=dtype)
    out[msg] = values  # later entries overwrite earlier ones (last one wins)
    return out


def _first_per_msg(n: int, msg: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    out = np.full(n, fill, dtype=dtype)
    out[msg[::-1]] = values[::-1]
    return out


def cat(parts, dtype):
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


# ---------------------------------------------------------------------------
# Planes on the wire
# ---------------------------------------------------------------------------


def read_plane_bytes(f: IO[bytes], size: int | None, ref: xplane.PlaneRef, pad: int = 0) -> bytearray:
    """The bytes of one plane (plus ``pad`` zero bytes), read into one buffer.

    ``f`` is positioned at or before the plane (planes are read in file order, so a
    gzip stream only ever seeks forward)."""
    wire.skip_to(f, ref.offset, size)
    wire.check_len(f, ref.offset, ref.length, size)  # before the buffer is allocated
    buf = bytearray(ref.length + pad)
    view = memoryview(buf)
    got = 0
    readinto = getattr(f, "readinto", None)
    while got < ref.length:
        want = min(ref.length - got, 1 << 24)
        if readinto is not None:
            k = readinto(view[got:got + want])
        else:
            chunk = f.read(want)
            k = len(chunk)
            view[got:got + k] = chunk
        if not k:
            raise wire.Truncated
        got += k
    return buf


# How many planes_mapped() blocks are open: outside a conversion worker, map_plane_bytes
# maps only inside one.
_mapping = 0


@contextlib.contextmanager
def planes_mapped():
    """:func:`map_plane_bytes` maps planes in this block, in a process that a ``SIGBUS``
    may end: a file cut short while mapped faults instead of raising. A conversion worker
    maps without it (``forksafe.disposable()``: its death is one failed conversion, a
    422 naming the file, cache/worker.py); the server process reads, so a file rewritten
    under it is a ``Truncated`` error there. For a process that knows it may die so
    (a benchmark's driver, a test)."""
    global _mapping
    _mapping += 1
    try:
        yield
    finally:
        _mapping -= 1


def map_plane_bytes(f: IO[bytes], size: int | None, ref: xplane.PlaneRef, pad: int = 0):
    """:func:`read_plane_bytes`' bytes (the plane, then ``pad`` zero bytes) mapped from the
    file instead of read into fresh memory, and a ``drop()`` that lets the mapped pages go
    from the process (they come back from the page cache if read again): (buffer, drop).
    Where ``f`` is a plain file (``size`` known, a ``fileno``) that holds ``pad`` bytes past
    the plane, in a conversion worker or inside :func:`planes_mapped`; else the read buffer and a ``drop`` that does
    nothing.

    Read, jax308's 311 MiB host plane was that much fresh anonymous memory (~0.7 s of page
    faults and zeroing on this VM) held through its whole decode, the conversion worker's
    peak; mapped, the pages are the page cache's, and a reader that walks the plane once
    (the trace decode) calls ``drop`` now and then to keep few of them in its RSS. The map
    is private (copy on write): the pad is zeroed in place, which copies only its page,
    and ``drop`` never lets that page go (it would read the file's bytes again)."""
    try:
        if not (_mapping or disposable()):
            raise OSError("read, not mapped, outside a conversion worker or planes_mapped()")
        if size is None or ref.offset < 0 or ref.offset + ref.length + pad > size:
            raise OSError("not a plain file holding the plane and its pad")
        lo = ref.offset - ref.offset % mmap.ALLOCATIONGRANULARITY
        mm = mmap.mmap(f.fileno(), ref.offset + ref.length + pad - lo, access=mmap.ACCESS_COPY, offset=lo)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return read_plane_bytes(f, size, ref, pad), lambda: None
    at = ref.offset - lo
    end = at + ref.length
    mm[end:end + pad] = bytes(pad)
    kept_from = end // mmap.PAGESIZE * mmap.PAGESIZE  # the pad's first page, written: kept

    def drop() -> None:
        if kept_from:
            mm.madvise(mmap.MADV_DONTNEED, 0, kept_from)

    return memoryview(mm)[at:end + pad], drop


def next_field(data, pos: int, end: int) -> tuple[int, int, int, int]:
    """(number, wiretype, payload start, next position) of the field at ``pos``."""
    dv = wire.decode_varint
    tag, pos = dv(data, pos)
    number, wt = tag >> 3, tag & 7
    if number == 0:
        raise _Malformed("field number 0")
    if wt == 0:
        _, nxt = dv(data, pos)
    elif wt == 2:
        ln, pos = dv(data, pos)
        nxt = pos + ln
    elif wt == 1:
        nxt = pos + 8
    elif wt == 5:
        nxt = pos + 4
    else:
        raise _Malformed(f"unsupported wire type {wt}")
    if nxt > end:
        raise wire.Truncated
    return number, wt, pos, nxt


def split_plane(data, end: int) -> tuple[bytes, list[tuple[int, int]]]:
    """Split XPlane bytes ``data[:end]`` into (non-line fields, [(line start, end)])."""
    keep = bytearray()
    lines = []
    pos = 0
    while pos < end:
        number, wt, start, nxt = next_field(data, pos, end)
        if number == 3 and wt == 2:
            lines.append((start, nxt))
        else:
            keep += data[pos:nxt]
        pos = nxt
    return bytes(keep), lines


def line_events(data, b: np.ndarray, start: int, end: int, window: int | None = None) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Split one XLine into (header bytes without events, event starts, event ends);
    ``window``: see :func:`event_run`."""
    keep = bytearray()
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    pos = start
    while pos < end:
        if data[pos] == 0x22:  # field 4 (events), LEN: a run of events
            s, e, pos = event_run(data, b, pos, end, window)
            starts.append(s)
            ends.append(e)
            continue
        _, _, _, nxt = next_field(data, pos, end)
        keep += data[pos:nxt]
        pos = nxt
    return bytes(keep), cat(starts, np.int64), cat(ends, np.int64)


def plane_events(data, b: np.ndarray, line_spans) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """Every line of a plane (``split_plane``'s spans): its header (an ``XLine`` without
    events) and, for :func:`decode_events`, the byte ranges of all the plane's events with
    the index of the line each is on: ``(headers, starts, ends, lines)``."""
    if native_enabled() and hasattr(_native, "event_run_into"):
        return _plane_events_native(data, b, line_spans)
    headers, starts, ends, lines = [], [], [], []
    for li, (a, z) in enumerate(line_spans):
        head, s, e = line_events(data, b, a, z)
        headers.append(xplane_pb2.XLine.FromString(head))
        starts.append(s)
        ends.append(e)
        lines.append(np.full(len(s), li, dtype=np.int32))
    return headers, cat(starts, np.int64), cat(ends, np.int64), cat(lines, np.int32)


MAP_WINDOW = 32 << 20  # bytes of a mapped plane walked between two drops (_plane_runs)


def _plane_runs(data, b: np.ndarray, line_spans, drop=None) -> tuple[list, list]:
    """Every line's header (an ``XLine`` without events) and its runs of ``events``
    fields, counted by the native walk: ``(headers, [(pos, line end, line, count)])``.
    With ``drop`` (:func:`map_plane_bytes`'), a run is counted ``MAP_WINDOW`` bytes at a
    time (:func:`_run_pieces`), ``drop()`` between: the same events in the same order."""
    headers, runs = [], []
    for li, (a, z) in enumerate(line_spans):
        keep = bytearray()
        pos = a
        while pos < z:
            if data[pos] == 0x22 and drop is not None:
                pos = _run_pieces(data, b, pos, z, li, runs, drop)
                continue
            if data[pos] == 0x22:  # field 4 (events), LEN: a run of events
                count, after = _native.run_count(b, pos, z)
                runs.append((pos, z, li, count))
                pos = after
                continue
            _, _, _, nxt = next_field(data, pos, z)
            keep += data[pos:nxt]
            pos = nxt
        headers.append(xplane_pb2.XLine.FromString(bytes(keep)))
    return headers, runs


def _run_pieces(data, b: np.ndarray, pos: int, end: int, line: int, runs: list, drop) -> int:
    """The run of ``events`` fields at ``pos`` counted ``MAP_WINDOW`` bytes at a time (an
    entry longer than that on its own), each piece appended to ``runs`` as a run
    ``(pos, end, line, count)``, ``drop()`` after each (formats/xplane_trace.py
    ``_run_count``, which only counts); the position after the run."""
    while True:
        k, nxt = _native.run_count(b, pos, end, min(end, pos + MAP_WINDOW))
        if not k and nxt < end and data[nxt] == 0x22:  # an entry longer than the window
            k, nxt = _native.run_count(b, pos, end)
        if k:
            runs.append((pos, end, line, k))
        pos = nxt
        if not k or pos >= end or data[pos] != 0x22:
            return pos
        drop()


def _plane_events_native(data, b: np.ndarray, line_spans) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`plane_events` in two native walks: the runs of ``events`` fields counted
    (``run_count``), then written into arrays of that size (``event_run_into``). One array
    per run concatenated afterwards touched 3x the memory (914 MB of fresh pages for the
    13.5 M events of the 308 MB profile's host plane)."""
    headers, runs = _plane_runs(data, b, line_spans)
    total = sum(r[3] for r in runs)
    starts = np.empty(total, dtype=np.int64)
    ends = np.empty(total, dtype=np.int64)
    lines = np.empty(total, dtype=np.int32)
    at = 0
    for pos, z, li, count in runs:
        k, _after = _native.event_run_into(b, pos, z, starts, ends, at)
        lines[at:at + k] = li
        at += k
    return headers, starts, ends, lines


def decode_plane(data, b: np.ndarray, line_spans, stat_names: dict[int, str], drop=None) -> tuple[list, Events]:
    """:func:`plane_events` then :func:`decode_events`, the same headers and events; where
    the native decoder reads runs, in one pass over them: no byte range per event (216 MB
    of fresh pages and a walk of 13.5 M events on the 308 MB profile).

    ``drop``: :func:`map_plane_bytes`' for a mapped plane, called as the runs' count and
    then the decode (after each chunk of ``_CHUNK`` events) pass its pages, so the
    plane is never all in the RSS beside its decoded columns (jax308's 311 MiB of the
    step reader's 1,151 MiB peak, docs/performance.md). The same headers and events."""
    if not (native_enabled() and hasattr(_native, "event_run_into")):
        headers, starts, ends, lines = plane_events(data, b, line_spans)
        return headers, decode_events(b, starts, ends, lines, stat_names)
    headers, runs = _plane_runs(data, b, line_spans, drop)
    if drop is not None:
        drop()
    pos, end, line, count = (np.asarray([r[k] for r in runs], dtype=np.int64) for k in range(4))
    lines = np.repeat(line.astype(np.int32), count)
    kmids, kvals = _kind_lut(stat_names)
    try:  # an extension built before runs: it takes no seventh argument (before drops, no eighth)
        mid, off, dur, raw = _native.decode_events(b, pos, end, kmids, kvals, _CHUNK, count,
                                                   *(() if drop is None else (drop,)))
    except TypeError:
        starts, ends, lines = _plane_events_native(data, b, line_spans)[1:]
        return headers, _decode_events_native(b, starts, ends, lines, stat_names)
    kinds = {k: KindStats(ev_, ord_, case, value, str_end) for k, (ev_, ord_, case, value, str_end) in raw.items()}
    return headers, Events(len(mid), lines, mid, off, dur, kinds)


def event_run(data, b: np.ndarray, pos: int, end: int, window: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """The consecutive ``events`` fields of a line from ``pos``: (payload starts, ends,
    position after the run).

    ``window`` (bytes) bounds the scratch memory on huge lines: candidates are looked for
    ``window`` bytes at a time (the result is the same).

    Each entry's length gives the next one's position, a chain that is sequential by
    nature. So every byte 0x22 that looks like an event header (``22 <len> 08 <metadata
    id> 10|28``: an XEvent starts with its metadata id, then its offset or occurrences)
    is a candidate, the next position of each is computed at once, and every stretch of
    candidates that chain exactly, from a known event start, is taken whole. Wherever
    the chain leaves the candidates (an event at offset 0, a 0x22 byte inside a value),
    one entry is read field by field and the chain is picked up again. The result is
    exactly the sequential walk's.
    """
    if window is not None and end - pos > window:
        out_s: list[np.ndarray] = []
        out_e: list[np.ndarray] = []
        cur = pos
        while cur < end and data[cur] == 0x22:
            stop = min(end, cur + window)
            s, e, nxt_pos = event_run_part(data, b, cur, end, stop)
            if not len(s):  # an entry longer than the window: read it the slow way
                _, _, payload, nxt_pos = next_field(data, cur, end)
                s, e = np.asarray([payload], dtype=np.int64), np.asarray([nxt_pos], dtype=np.int64)
            out_s.append(s)
            out_e.append(e)
            cur = nxt_pos
        return cat(out_s, np.int64), cat(out_e, np.int64), cur
    return event_run_part(data, b, pos, end, end)


def event_run_part(data, b: np.ndarray, pos: int, end: int, stop: int) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`event_run` over the entries that end by ``stop`` (<= ``end``)."""
    if native_enabled():  # the sequential walk itself, in C
        return _native.event_run(b, pos, end, stop, 1 << 62)
    cand = np.flatnonzero(b[pos:stop] == 0x22) + pos
    # the entry's length: one or two bytes (longer ones are read the slow way)
    b1 = b[cand + 1]
    one = b1 < 0x80
    head = np.where(one, 2, 3)
    keep = one | (b[cand + 2] < 0x80)
    # the payload starts with field 1 (metadata_id, a varint of 1-3 bytes) ...
    p = cand + head
    keep &= b[p] == 0x08
    cand, head, p, b1 = cand[keep], head[keep], p[keep], b1[keep]
    mlen = np.where(b[p + 1] < 0x80, 1, np.where(b[p + 2] < 0x80, 2, np.where(b[p + 3] < 0x80, 3, 0)))
    # ... then field 2 (offset_ps) or 5 (num_occurrences)
    t = b[p + 1 + mlen]
    keep = (mlen > 0) & ((t == 0x10) | (t == 0x28))
    cand, head, p, b1 = cand[keep], head[keep], p[keep], b1[keep]
    length = np.where(head == 2, b1, (b1 & 0x7F) | (b[cand + 2].astype(np.int64) << 7)).astype(np.int64)
    nxt = p + length
    link = nxt[:-1] == cand[1:]
    breaks = np.flatnonzero(~link)  # chains end at these candidate indices
    out_s: list[np.ndarray] = []
    out_e: list[np.ndarray] = []
    cur = pos
    while cur < stop and data[cur] == 0x22:
        i = int(np.searchsorted(cand, cur))
        if i < len(cand) and cand[i] == cur:
            k = int(breaks[np.searchsorted(breaks, i)]) if len(breaks) and breaks[-1] >= i else len(cand) - 1
            if nxt[k] > stop:
                if stop == end:
                    raise wire.Truncated
                # the window cuts the chain: take what ends inside it, the caller goes on
                k = i + int(np.searchsorted(nxt[i:k + 1], stop, side="right")) - 1
                if k < i:
                    break
            out_s.append(p[i:k + 1])
            out_e.append(nxt[i:k + 1])
            cur = int(nxt[k])
            continue
        _, _, payload, after = next_field(data, cur, end)  # one entry, the slow way
        if after > stop and stop != end:
            break
        out_s.append(np.asarray([payload], dtype=np.int64))
        out_e.append(np.asarray([after], dtype=np.int64))
        cur = after
    return cat(out_s, np.int64), cat(out_e, np.int64), cur


def run_count(b: np.ndarray, pos: int, end: int, stop: int | None = None) -> tuple[int, int]:
    """(how many events the run of ``events`` fields at ``pos`` holds, the position after
    it), by the native walk (:func:`native_enabled` must be true); with ``stop``, only the
    run's events that end by ``stop`` (and where they end)."""
    return _native.run_count(b, pos, end) if stop is None else _native.run_count(b, pos, end, stop)


def line_name(data, b: np.ndarray, start: int, end: int) -> str:
    """An XLine's name (field 2), read without parsing its events."""
    pos = start
    name = ""
    while pos < end:
        if data[pos] == 0x22:  # events: skipped in bulk
            _, _, pos = event_run(data, b, pos, end)
            continue
        number, wt, payload, nxt = next_field(data, pos, end)
        if number == 2 and wt == 2:
            name = bytes(data[payload:nxt]).decode("utf-8", "replace")  # the last one wins
        pos = nxt
    return name



def plane_metadata(f: IO[bytes], size: int | None, ref: xplane.PlaneRef) -> xplane_pb2.XPlane:
    """A plane's name, metadata and stats, read forward from ``f``, its lines skipped."""
    wire.skip_to(f, ref.offset, size)
    keep = bytearray()
    end = ref.offset + ref.length
    while f.tell() < end:
        tag = wire.read_varint(f)
        number, wt = tag >> 3, tag & 7
        if number == 0:
            raise _Malformed("field number 0")
        if wt == wire.VARINT:
            keep += wire.encode_varint(tag) + wire.encode_varint(wire.read_varint(f))
        elif wt == wire.LEN:
            length = wire.read_varint(f)
            wire.check_len(f, f.tell(), length, size)  # a declared length past the file or the gzip budget
            if number == 3:  # XPlane.lines
                wire.skip_to(f, f.tell() + length, size)
            else:
                keep += wire.encode_varint(tag) + wire.encode_varint(length) + wire.read_exact(f, length)
        elif wt in (wire.FIXED64, wire.FIXED32):
            keep += wire.encode_varint(tag) + wire.read_exact(f, 8 if wt == wire.FIXED64 else 4)
        else:
            raise _Malformed(f"unsupported wire type {wt}")
    if f.tell() != end:
        raise wire.Truncated
    return xplane_pb2.XPlane.FromString(bytes(keep))


# ---------------------------------------------------------------------------
# Events and stats of a plane, decoded in bulk
# ---------------------------------------------------------------------------

# stat value cases (XStat field numbers)
DOUBLE, UINT64, INT64, STR, BYTES, REF = 2, 3, 4, 5, 6, 7

# The stats read here, by name (XProf types stats by their metadata name).
_STAT_KINDS = (
    "allocator_name", "index_on_host", "device_ordinal", "bytes_reserved",
    "bytes_allocated", "bytes_available", "fragmentation", "peak_bytes_in_use",
    "requested_bytes", "allocation_bytes", "addr", "tf_op", "region_type", "data_type",
    "shape", "id", "group_id", "_pt", "_p", "_ct", "_c", "_pid", "_r", "_a", "iter_num",
    "step_num", "graph_type", "request_id", "queue_addr", "queue_id", "run_id", "core_type",
    # a grouped profile's step roots (formats/xplane_step_events.py)
    "step_name",
    # the trace viewer's flows (formats/xplane_flows.py)
    "flow", "correlation_id",
    # XProf's derived device lines (formats/xplane_derived.py: GpuEventStats, DeriveLinesFromStats)
    "kernel_details", "cuda_graph_exec_id", "hlo_op", "hlo_module", "program_id", "scope_range_id", "source",
)
_KIND = {name: i + 1 for i, name in enumerate(_STAT_KINDS)}
_CHUNK = 1 << 18  # events decoded at once


@dataclass
class KindStats:
    """The stats of one kind; within an event, in field order."""

    event: np.ndarray  # int32
    ordinal: np.ndarray  # int16: position among the event's fields
    case: np.ndarray  # int8: 0 none, else the XStat value field number
    value: np.ndarray  # uint64 bits (varint value / double bits / ref id / str start)
    # int64: where each str/bytes value ends (aligned with ``value``); empty when the
    # kind has no such value. An array, not a dict: millions of string stats (tf_op,
    # shape, region_type of every allocator event) are millions of dict entries.
    str_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class Events:
    n: int
    line: np.ndarray  # int32
    metadata_id: np.ndarray  # int64
    offset_ps: np.ndarray  # int64
    duration_ps: np.ndarray  # int64
    kinds: dict  # kind -> KindStats
    views: dict = field(default_factory=dict)  # (name, last) -> StatView cache


def decode_events(b: np.ndarray, ev_start: np.ndarray, ev_end: np.ndarray, ev_line: np.ndarray,
                   stat_names: dict[int, str]) -> Events:
    """The events ``b[ev_start[i]:ev_end[i]]`` (of lines ``ev_line``) and the stats of the
    kinds read here, with the plane's stat names by metadata id. The stats of one kind
    are in (chunk of ``_CHUNK`` events, field position, event) order."""
    if native_enabled():
        return _decode_events_native(b, ev_start, ev_end, ev_line, stat_names)
    n = len(ev_start)
    metadata_id = np.zeros(n, dtype=np.int64)
    offset_ps = np.zeros(n, dtype=np.int64)
    duration_ps = np.zeros(n, dtype=np.int64)
    data_case = np.zeros(n, dtype=np.int8)
    kmids = np.fromiter((k for k, v in stat_names.items() if v in _KIND), dtype=np.int64)
    kvals = np.fromiter((_KIND[v] for v in stat_names.values() if v in _KIND), dtype=np.int16)
    o = np.argsort(kmids)
    kmids, kvals = kmids[o], kvals[o]
    parts: dict[int, list] = {}
    w = windows(b)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        sp_ev, sp_ord, sp_start, sp_end = [], [], [], []
        for ordinal, (msg, number, wt, value, fend) in enumerate(walk(b, ev_start[lo:hi], ev_end[lo:hi], w)):
            msg = msg + lo
            v = wt == 0
            for num, out in ((1, metadata_id), (2, offset_ps), (3, duration_ps)):
                m = v & (number == num)
                if m.any():
                    out[msg[m]] = value[m].view(np.int64)
            # oneof data {offset_ps = 2; num_occurrences = 5}: the last one set wins
            m = v & ((number == 2) | (number == 5))
            if m.any():
                data_case[msg[m]] = number[m]
            m = (wt == 2) & (number == 4)
            if m.any():
                sp_ev.append(msg[m].astype(np.int32))
                sp_ord.append(np.full(int(m.sum()), ordinal, dtype=np.int16))
                sp_start.append(value[m].astype(np.int64))
                sp_end.append(fend[m])
        if not sp_ev:
            continue
        # stats of this chunk, in (position, event) order: per event, field order
        st_ev = np.concatenate(sp_ev)
        st_ord = np.concatenate(sp_ord)
        st_start = np.concatenate(sp_start)
        st_stop = np.concatenate(sp_end)
        del sp_ev, sp_ord, sp_start, sp_end
        mid, case, val, send = _decode_stats(b, w, st_start, st_stop)
        if not len(kmids):
            continue
        pos = np.clip(np.searchsorted(kmids, mid), 0, len(kmids) - 1)
        kind = np.where(kmids[pos] == mid, kvals[pos], 0).astype(np.int16)
        # The stats are laid out field position by position: within one event a later
        # stat comes later, which is all "the last one wins" needs (no sort by event).
        korder = np.argsort(kind, kind="stable")
        ks = kind[korder]
        bounds = np.searchsorted(ks, np.arange(len(_STAT_KINDS) + 2))
        for k in range(1, len(_STAT_KINDS) + 1):
            a, z = bounds[k], bounds[k + 1]
            if z <= a:
                continue
            idx = korder[a:z]
            c = case[idx]
            parts.setdefault(k, []).append((st_ev[idx], st_ord[idx], c, val[idx],
                                            np.where((c == STR) | (c == BYTES), send[idx], 0)))
    kinds = {}
    for k, chunks in parts.items():
        ks = KindStats(*(np.concatenate([x[j] for x in chunks]) for j in range(5)))
        if not ks.str_end.any():
            ks.str_end = np.zeros(0, np.int64)
        kinds[k] = ks
    offset_ps[data_case != 2] = 0
    return Events(n, ev_line, metadata_id, offset_ps, duration_ps, kinds)


def _kind_lut(stat_names: dict[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """(stat metadata ids, their kinds), sorted by id, for the kinds read here."""
    kmids = np.fromiter((k for k, v in stat_names.items() if v in _KIND), dtype=np.int64)
    kvals = np.fromiter((_KIND[v] for v in stat_names.values() if v in _KIND), dtype=np.int16)
    o = np.argsort(kmids)
    return kmids[o], kvals[o]


def _decode_events_native(b, ev_start, ev_end, ev_line, stat_names) -> Events:
    """:func:`decode_events` in one pass of ``_xplane_scan.decode_events``: the same
    columns, in the same order (it sorts each chunk's stats as the numpy path lays them
    out)."""
    kmids, kvals = _kind_lut(stat_names)
    mid, off, dur, raw = _native.decode_events(b, ev_start, ev_end, kmids, kvals, _CHUNK)
    kinds = {k: KindStats(ev_, ord_, case, value, str_end) for k, (ev_, ord_, case, value, str_end) in raw.items()}
    return Events(len(mid), ev_line, mid, off, dur, kinds)


_VALUE_FIELDS = {(0, UINT64), (0, INT64), (0, REF), (1, DOUBLE), (2, STR), (2, BYTES)}


def _decode_stats(b, w, starts, stops):
    """(metadata_id, value case, value bits / payload start, payload end) of XStats.

    The usual layout, ``08 <metadata_id> <tag> <value>``, is decoded in one pass; any
    other (fields repeated or reordered, unknown fields, no value) by the generic walk.
    """
    ns = len(starts)
    mid = np.zeros(ns, dtype=np.int64)
    case = np.zeros(ns, dtype=np.int8)
    val = np.zeros(ns, dtype=np.uint64)
    send = np.zeros(ns, dtype=np.int64)
    if not ns:
        return mid, case, val, send
    idx = np.flatnonzero((b[starts] == 0x08) & (starts + 2 < stops))
    m_v, p = varints(b, starts[idx] + 1, w)
    tag = b[p]
    number = (tag >> 3).astype(np.int8)
    wt = tag & 7
    v = np.zeros(len(idx), dtype=np.uint64)
    e = np.zeros(len(idx), dtype=np.int64)
    nx = np.full(len(idx), -1, dtype=np.int64)
    m = (wt == 0) & ((number == UINT64) | (number == INT64) | (number == REF))
    if m.any():
        v[m], nx[m] = varints(b, p[m] + 1, w)
    m = (wt == 1) & (number == DOUBLE)
    if m.any():
        v[m] = fixed64(w, p[m] + 1)
        nx[m] = p[m] + 9
    m = (wt == 2) & ((number == STR) | (number == BYTES))
    if m.any():
        ln, q = varints(b, p[m] + 1, w)
        v[m] = q.astype(np.uint64)
        e[m] = q + ln.astype(np.int64)
        nx[m] = e[m]
    ok = (tag < 0x80) & (nx == stops[idx])
    good = idx[ok]
    mid[good] = m_v[ok].view(np.int64)
    case[good] = number[ok]
    val[good] = v[ok]
    send[good] = e[ok]
    rest = np.ones(ns, dtype=bool)
    rest[good] = False
    rest = np.flatnonzero(rest)
    if rest.size:
        for msg, num, wtype, value, fend in walk(b, starts[rest], stops[rest], w):
            g = rest[msg]
            vv = wtype == 0
            k = vv & (num == 1)
            if k.any():
                mid[g[k]] = value[k].view(np.int64)
            k = np.zeros(len(msg), dtype=bool)
            for wt_, num_ in _VALUE_FIELDS:
                k |= (wtype == wt_) & (num == num_)
            if k.any():
                case[g[k]] = num[k]
                val[g[k]] = value[k]
                send[g[k]] = fend[k]
    return mid, case, val, send


_EMPTY_KIND = KindStats(np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(0, np.int8),
                         np.zeros(0, np.uint64))


def kind_stats(ev: Events, name: str) -> KindStats:
    """The decoded stats named ``name`` (empty where no event has one)."""
    return ev.kinds.get(_KIND[name], _EMPTY_KIND)


def has_stat(ev: Events, name: str) -> bool:
    """Whether any event of ``ev`` has the stat (decoded) named ``name``."""
    return len(ev.kinds.get(_KIND[name], _EMPTY_KIND).event) > 0


def first_stats(ev: Events, name: str, events: np.ndarray) -> tuple[KindStats, np.ndarray]:
    """``StatView(ev, name, last=False).stat[events]`` for sorted, unique ``events`` (the
    kind's stats and, per event, its first such stat; -1: none) without the view's two
    arrays over every event: for a reader that asks about a few events."""
    ks = ev.kinds.get(_KIND[name], _EMPTY_KIND)
    out = np.full(len(events), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(events, ks.event), max(len(events) - 1, 0))
    sel = np.flatnonzero(events[at] == ks.event) if len(events) else np.zeros(0, np.int64)
    if sel.size:
        got, first = np.unique(ks.event[sel], return_index=True)  # the first in the kind's order
        out[np.searchsorted(events, got)] = sel[first]
    return ks, out


class StatView:
    """Per-event access to one stat (by name), with XProf's readers.

    ``last=True`` is ``ForEachStat`` with assignment (the last such stat of an event
    wins), ``last=False`` is ``GetStat`` (the first one). ``stat[i]`` indexes the kind's
    stats (-1: the event has none).
    """

    def __new__(cls, ev: Events, name: str, *, last: bool = True):
        key = (name, last)
        view = ev.views.get(key)
        if view is None:
            view = super().__new__(cls)
            view._init(ev, name, last)
            ev.views[key] = view
        return view

    def _init(self, ev: Events, name: str, last: bool):
        ks = ev.kinds.get(_KIND[name], _EMPTY_KIND)
        self.ks = ks
        dtype = np.int32 if len(ks.event) < (1 << 31) else np.int64
        idx = np.arange(len(ks.event), dtype=dtype)
        fill = _last_per_msg if last else _first_per_msg
        self.stat = fill(ev.n, ks.event, idx, -1, dtype)
        self.present = self.stat >= 0
        # no reference back to ``ev``: its ``views`` holds this view, and a cycle would keep
        # every decoded chunk alive until the cycle collector ran (+1x the file in RSS)

    def ordinal(self) -> np.ndarray:
        """Field position of the stat in its event (-1: none)."""
        out = np.full(len(self.stat), -1, dtype=np.int64)
        ok = self.present
        out[ok] = self.ks.ordinal[self.stat[ok]]
        return out

    def int_value(self) -> np.ndarray:
        """XStatVisitor::IntValue: the int64 value, 0 for any other value case."""
        out = np.zeros(len(self.stat), dtype=np.int64)
        ok = self.present
        si = self.stat[ok]
        out[ok] = np.where(self.ks.case[si] == INT64, self.ks.value[si].view(np.int64), 0)
        return out

    def int_at(self, i: int) -> int:
        """``int_value()[i]`` of one event, without the whole-profile array (the step
        grouping asks it once per step root: 44,000 roots of a 300 MB profile made the
        whole array a quadratic pass)."""
        k = int(self.stat[i])
        return int(self.ks.value[k : k + 1].view(np.int64)[0]) if k >= 0 and self.ks.case[k] == INT64 else 0

    def int_value_at(self, events: np.ndarray) -> np.ndarray:
        """``int_value()[events]`` without the whole-profile array (8 bytes an event)."""
        si = self.stat[events]
        ok = si >= 0
        out = np.zeros(len(si), dtype=np.int64)
        k = si[ok]
        out[ok] = np.where(self.ks.case[k] == INT64, self.ks.value[k].view(np.int64), 0)
        return out

    def int_or_uint_value_at(self, events: np.ndarray) -> np.ndarray:
        """``int_or_uint_value()[events]`` without the whole-profile array."""
        si = self.stat[events]
        ok = si >= 0
        out = np.zeros(len(si), dtype=np.uint64)
        k = si[ok]
        c = self.ks.case[k]
        out[ok] = np.where((c == INT64) | (c == UINT64), self.ks.value[k], np.uint64(0))
        return out

    def int_or_uint_value(self) -> np.ndarray:
        """XStatVisitor::IntOrUintValue as uint64 bits."""
        out = np.zeros(len(self.stat), dtype=np.uint64)
        ok = self.present
        si = self.stat[ok]
        c = self.ks.case[si]
        out[ok] = np.where((c == INT64) | (c == UINT64), self.ks.value[si], np.uint64(0))
        return out

    def double_value(self) -> np.ndarray:
        out = np.zeros(len(self.stat), dtype=np.float64)
        ok = self.present
        si = self.stat[ok]
        bits = np.where(self.ks.case[si] == DOUBLE, self.ks.value[si], np.uint64(0))
        out[ok] = bits.view(np.float64)
        return out

    def str_or_ref(self, strings: Strings, events: np.ndarray) -> np.ndarray:
        """Indices into ``strings`` of StrOrRefValue for ``events`` ("" without the stat)."""
        return strings.str_or_ref(self.ks, self.stat[events])


class Strings:
    """A string table (index 0 is "") with XProf's StrOrRefValue."""

    def __init__(self, data, stat_names: dict[int, str]):
        self.data = data
        self.stat_names = stat_names
        self.table: list[str] = [""]
        self.index: dict[str, int] = {"": 0}

    def add(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i

    def str_or_ref(self, ks: KindStats, stat: np.ndarray) -> np.ndarray:
        """Table indices of StrOrRefValue for stats ``stat`` of one kind (-1: "")."""
        out = np.zeros(len(stat), dtype=np.int32)
        ok = np.flatnonzero(stat >= 0)
        if not ok.size:
            return out
        si = stat[ok]
        case = ks.case[si]
        ref = case == REF
        if ref.any():
            ids, inv = np.unique(ks.value[si[ref]], return_inverse=True)
            mapped = np.array([self.add(self.stat_names.get(int(i), "")) if int(i) < (1 << 63) else 0
                               for i in ids.tolist()], dtype=np.int32)
            out[ok[ref]] = mapped[inv.reshape(-1)]
        sv = case == STR
        if sv.any():
            data = self.data
            cache: dict[bytes, int] = {}
            vals = []
            for a, z in zip(ks.value[si[sv]].tolist(), ks.str_end[si[sv]].tolist()):
                raw = bytes(data[a:z])
                k = cache.get(raw)
                if k is None:
                    k = cache[raw] = self.add(raw.decode("utf-8", "replace"))
                vals.append(k)
            out[ok[sv]] = vals
        return out


def mid_mask(ev: Events, event_names: dict[int, str], wanted) -> np.ndarray:
    ids = [k for k, v in event_names.items() if v in wanted]
    if not ids:
        return np.zeros(ev.n, dtype=bool)
    if len(ids) <= 8:  # a comparison per id: np.isin made an int64 temporary per event
        out = ev.metadata_id == ids[0]
        for k in ids[1:]:
            out |= ev.metadata_id == k
        return out
    return np.isin(ev.metadata_id, np.asarray(ids, dtype=np.int64))
