"""Runtime allocator events of an XSpace profile, as compact columns.

The BFC allocator (TensorFlow, JAX/PJRT on GPU, TF on CPU with
``TF_CPU_ALLOCATOR_USE_BFC=true``) records one instant TraceMe per allocation and
deallocation on the host threads plane ``/host:CPU``: events named ``MemoryAllocation``
and ``MemoryDeallocation`` with the stats ``allocator_name``, ``bytes_reserved`` (stack),
``bytes_allocated`` (heap), ``bytes_available`` (free), ``fragmentation``,
``peak_bytes_in_use``, ``requested_bytes``, ``allocation_bytes``, ``addr``, ``id`` (the
allocator's step id), ``tf_op``, ``region_type``, ``data_type`` (TF ``DataType`` enum) and
``shape``. :func:`read_allocator_events` turns them into :class:`AllocatorEvents`: numpy
columns plus string tables, one row per event, so millions of events never become
millions of Python objects.

Everything is read the way XProf 2.24.2 reads it (``xprof/convert/xplane_to_memory_profile.cc``
after ``PreprocessSingleHostXSpace(step_grouping=true)``), because the memory profile's
numbers depend on it:

* Only the first plane named ``/host:CPU`` is read (XProf ignores allocator events on
  any other plane, device planes included). Lines in plane order, events in line order.
* Time is the event's ``offset_ps`` as stored, relative to its line's ``timestamp_ns``
  (XProf's ``XEventVisitor::OffsetPs``). TF and JAX write every host line with the same
  ``timestamp_ns``, so that is "ps since the profile start".
* Stats are typed by their metadata *name*. Integers are read with XProf's ``IntValue``:
  the ``int64_value`` of the stat, so a stat stored as ``uint64``/``double`` reads 0;
  ``fragmentation`` likewise reads ``double_value`` only. Strings are ``str_value`` or
  the name of the stat metadata a ``ref_value`` points to (``""`` otherwise). When a stat
  appears twice the last one wins. The allocator (XProf's memory id) is the last of
  ``allocator_name`` / ``index_on_host`` / ``device_ordinal`` (the latter two as decimal
  text); no such stat gives the memory id ``""``.
* The step of an event is its ``group_id``, which XProf computes by *grouping* the
  events ("step grouping", tsl ``GroupTfEvents``): root events (a ``_r`` stat, e.g.
  ``tf.profiler.experimental.Trace("train", step_num=i, _r=1)`` or JAX's
  ``StepTraceAnnotation``; legacy ``TraceContext``; ``ProcessBatch`` and
  ``BatchingSessionRun`` made roots by XProf's preprocessing) are numbered 0, 1, ... in
  time order (higher root levels first) and their group id flows to every event nested in
  them on the same line and to every consumer of their producer contexts (``_pt``/``_p``
  -> ``_ct``/``_c``, with XProf's rule that a context with >= 64 producers and >= 64
  consumers is not connected), ThreadpoolListener regions included; a TF while/for loop
  (``ExecutorState::Process`` with ``id``/``iter_num``) makes one group per iteration
  instead; a profile whose metadata names a TF loop op is not grouped; a profile where
  any plane already has a ``group_id`` stat keeps its stats and is not grouped again
  (checked on 2.24.2 with device, metadata and task-environment planes that have none).
  Within a line an event nests in the innermost open event that contains it (XProf's
  stack walk in line order). Events reached by no root have no group
  (``group_id == -1``); the memory profile then gives them the previous event's step + 1.
  The allocator's own ``id`` stat is kept as ``step_id_stat`` but XProf does not use it.
* XProf's preprocessing adds a ``ThreadpoolListener::Region`` event per
  ``StartRegion``/``StopRegion`` pair at the end of the line (2.24.2 does not re-sort the
  line: checked), so regions only add consumers to their context and nest nothing.
* ``hlo_modules``: the events of the ``XLA Modules`` line of every ``/device:TPU:*``
  plane (XProf's ``hloModules``), offsets as stored.

:attr:`AllocatorEvents.steps` lists the groups (name as XProf names them, e.g.
``"train 3"``, and the root event's span), the step bands of the page.

Speed: the host plane is split into events and stats on the wire with numpy (a varint
decoder that reads 8 bytes at once, the events of a line found by chaining candidate
headers and verifying the chain), chunk by chunk; about 9 us per allocator event with its
14 stats on this machine, and about 5x the file size in memory.

What this module does not model (documented limits): grouping edges that involve events
on planes other than ``/host:CPU`` (XProf builds its event forest over every plane; only
TPU/GPU device planes have events there, and they are children, never parents, of host
events), and the order absl's hash maps give to root events of different event types
that start at the same picosecond.

Corrupt or truncated input raises :class:`~profscope.errors.BadInput` naming the file.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from profscope.formats import protowire as wire
from profscope.formats import xplane
from profscope.formats.protos import xplane_pb2
from profscope.model.stdsort import std_sort_order

__all__ = [
    "ALLOCATION",
    "DEALLOCATION",
    "HOST_PLANE",
    "AllocatorEvents",
    "HloModuleSpan",
    "StepGroup",
    "data_type_name",
    "read_allocator_events",
]

HOST_PLANE = "/host:CPU"
TPU_PLANE_PREFIX = "/device:TPU:"
XLA_MODULE_LINE = "XLA Modules"
ALLOCATION, DEALLOCATION = 1, 2

# TF's DataType enum (tensorflow/core/framework/types.proto), names as XProf's
# DataTypeString prints them.
_DATA_TYPE_NAMES = {
    0: "INVALID", 1: "float", 2: "double", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
    7: "string", 8: "complex64", 9: "int64", 10: "bool", 11: "qint8", 12: "quint8",
    13: "qint32", 14: "bfloat16", 15: "qint16", 16: "quint16", 17: "uint16",
    18: "complex128", 19: "half", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64",
    24: "float8_e5m2", 25: "float8_e4m3fn", 26: "float8_e4m3fnuz",
    27: "float8_e4m3b11fnuz", 28: "float8_e5m2fnuz", 29: "int4", 30: "uint4",
}


def data_type_name(value: int) -> str:
    """XProf's ``DataTypeString(static_cast<TensorflowDataType>(value))``.

    The value is truncated to a C ``int``; values above 100 are reference types
    (``float_ref``); unknown values print as ``unknown dtype enum (N)``.
    """
    v = ((int(value) + (1 << 31)) % (1 << 32)) - (1 << 31)
    suffix = ""
    if v > 100:
        v -= 100
        suffix = "_ref"
    name = _DATA_TYPE_NAMES.get(v)
    if name is None:
        name = f"unknown dtype enum ({v})"
    return name + suffix


@dataclass(frozen=True, slots=True)
class HloModuleSpan:
    """One event of a TPU plane's ``XLA Modules`` line (XProf's ``HloModule``)."""

    name: str
    start_ps: int
    end_ps: int
    plane_name: str  # without the "/device:" prefix


@dataclass(frozen=True, slots=True)
class StepGroup:
    """One group (step) found by step grouping: the root event that started it."""

    group_id: int
    name: str  # XProf's group name, e.g. "train 3"
    start_ps: int  # offset_ps of the root event (same base as the allocator events)
    end_ps: int
    line: str


@dataclass(slots=True)
class AllocatorEvents:
    """The allocator events of one host, one row per event, in XProf's reading order.

    Integer columns are numpy ``int64`` unless noted; string columns are ``int32``
    indices into :attr:`strings`; :attr:`memory_id` indexes :attr:`memory_ids`.
    """

    path: str
    hostname: str
    has_host_plane: bool
    time_ps: np.ndarray
    kind: np.ndarray  # int8: ALLOCATION or DEALLOCATION
    memory_id: np.ndarray  # int32 -> memory_ids
    bytes_reserved: np.ndarray
    bytes_allocated: np.ndarray
    bytes_available: np.ndarray
    peak_bytes_in_use: np.ndarray
    requested_bytes: np.ndarray
    allocation_bytes: np.ndarray
    fragmentation: np.ndarray  # float64
    address: np.ndarray  # uint64
    tf_op: np.ndarray  # int32 -> strings
    region_type: np.ndarray  # int32 -> strings
    data_type: np.ndarray  # raw int64 value of the data_type stat (0 when absent)
    shape: np.ndarray  # int32 -> strings
    group_id: np.ndarray  # step as XProf groups it; -1 = no group
    step_id_stat: np.ndarray  # the allocator's own ``id`` stat; -1 when absent
    line: np.ndarray  # int32 -> line_names
    strings: list[str] = field(default_factory=lambda: [""])
    memory_ids: list[str] = field(default_factory=list)
    line_names: list[str] = field(default_factory=list)
    steps: list[StepGroup] = field(default_factory=list)
    hlo_modules: list[HloModuleSpan] = field(default_factory=list)
    grouping: str = "none"  # "grouped", "pre-grouped", "loop-ops", "no-roots", "none"

    def __len__(self) -> int:
        return int(self.time_ps.shape[0])

    def string(self, index: int) -> str:
        return self.strings[int(index)]


# ---------------------------------------------------------------------------
# Vectorized protobuf wire decoding
# ---------------------------------------------------------------------------

_PAD = 24  # zero bytes after a plane's bytes: reads past the end stay in the buffer
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


def _windows(b: np.ndarray) -> np.ndarray:
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


def _varints(b: np.ndarray, pos: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
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
                w = _windows(b)
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


def _fixed64(w: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _read8(w, pos)


def _walk(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, w: np.ndarray | None = None):
    """Decode the top-level fields of messages ``b[starts[i]:ends[i]]`` side by side.

    Yields one batch per field position (the first field of every message, then the
    second, ...): ``(msg, number, wiretype, value, end)`` where ``value`` is the varint,
    the fixed64 bits, or the payload start of a LEN field (``end`` its end). Batches come
    in field order, so scattering them in order lets the last field win, as protobuf does.
    """
    if w is None:
        w = _windows(b)
    active = np.flatnonzero(starts < ends)
    cur = starts[active]
    stop = ends[active]
    while active.size:
        tag, p = _varints(b, cur, w)
        number = (tag >> np.uint64(3)).astype(np.int64)
        wt = (tag & np.uint64(7)).astype(np.int8)
        if not number.all():
            raise _Malformed("field number 0")
        value = np.zeros(len(active), dtype=np.uint64)
        fend = np.zeros(len(active), dtype=np.int64)
        nxt = p + 4  # fixed32
        m = wt == 0
        if m.all():
            value, nxt = _varints(b, p, w)
        else:
            if m.any():
                value[m], nxt[m] = _varints(b, p[m], w)
            m = wt == 1
            if m.any():
                value[m] = _fixed64(w, p[m])
                nxt[m] = p[m] + 8
            m = wt == 2
            if m.any():
                ln, q = _varints(b, p[m], w)
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


# ---------------------------------------------------------------------------
# Planes on the wire
# ---------------------------------------------------------------------------


def _read_plane_bytes(f: IO[bytes], size: int | None, ref: xplane.PlaneRef, pad: int = 0) -> bytearray:
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


def _next_field(data, pos: int, end: int) -> tuple[int, int, int, int]:
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


def _split_plane(data, end: int) -> tuple[bytes, list[tuple[int, int]]]:
    """Split XPlane bytes ``data[:end]`` into (non-line fields, [(line start, end)])."""
    keep = bytearray()
    lines = []
    pos = 0
    while pos < end:
        number, wt, start, nxt = _next_field(data, pos, end)
        if number == 3 and wt == 2:
            lines.append((start, nxt))
        else:
            keep += data[pos:nxt]
        pos = nxt
    return bytes(keep), lines


def _line_events(data, b: np.ndarray, start: int, end: int, window: int | None = None) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Split one XLine into (header bytes without events, event starts, event ends);
    ``window``: see :func:`_event_run`."""
    keep = bytearray()
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    pos = start
    while pos < end:
        if data[pos] == 0x22:  # field 4 (events), LEN: a run of events
            s, e, pos = _event_run(data, b, pos, end, window)
            starts.append(s)
            ends.append(e)
            continue
        _, _, _, nxt = _next_field(data, pos, end)
        keep += data[pos:nxt]
        pos = nxt
    return bytes(keep), _cat(starts, np.int64), _cat(ends, np.int64)


def _event_run(data, b: np.ndarray, pos: int, end: int, window: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
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
            s, e, nxt_pos = _event_run_part(data, b, cur, end, stop)
            if not len(s):  # an entry longer than the window: read it the slow way
                _, _, payload, nxt_pos = _next_field(data, cur, end)
                s, e = np.asarray([payload], dtype=np.int64), np.asarray([nxt_pos], dtype=np.int64)
            out_s.append(s)
            out_e.append(e)
            cur = nxt_pos
        return _cat(out_s, np.int64), _cat(out_e, np.int64), cur
    return _event_run_part(data, b, pos, end, end)


def _event_run_part(data, b: np.ndarray, pos: int, end: int, stop: int) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`_event_run` over the entries that end by ``stop`` (<= ``end``)."""
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
        _, _, payload, after = _next_field(data, cur, end)  # one entry, the slow way
        if after > stop and stop != end:
            break
        out_s.append(np.asarray([payload], dtype=np.int64))
        out_e.append(np.asarray([after], dtype=np.int64))
        cur = after
    return _cat(out_s, np.int64), _cat(out_e, np.int64), cur


def _plane_metadata(f: IO[bytes], size: int | None, ref: xplane.PlaneRef) -> xplane_pb2.XPlane:
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
# Events and stats of the host plane, decoded in bulk
# ---------------------------------------------------------------------------

# stat value cases (XStat field numbers)
_DOUBLE, _UINT64, _INT64, _STR, _BYTES, _REF = 2, 3, 4, 5, 6, 7

# The stats read here, by name (XProf types stats by their metadata name).
_STAT_KINDS = (
    "allocator_name", "index_on_host", "device_ordinal", "bytes_reserved",
    "bytes_allocated", "bytes_available", "fragmentation", "peak_bytes_in_use",
    "requested_bytes", "allocation_bytes", "addr", "tf_op", "region_type", "data_type",
    "shape", "id", "group_id", "_pt", "_p", "_ct", "_c", "_pid", "_r", "_a", "iter_num",
    "step_num", "graph_type", "request_id", "queue_addr", "queue_id", "run_id", "core_type",
    # the trace viewer's flows (formats/xplane_flows.py)
    "flow", "correlation_id",
    # XProf's derived device lines (formats/xplane_derived.py: GpuEventStats, DeriveLinesFromStats)
    "kernel_details", "cuda_graph_exec_id", "hlo_op", "hlo_module", "program_id", "scope_range_id", "source",
)
_KIND = {name: i + 1 for i, name in enumerate(_STAT_KINDS)}
_CHUNK = 1 << 18  # events decoded at once


@dataclass
class _KindStats:
    """The stats of one kind; within an event, in field order."""

    event: np.ndarray  # int32
    ordinal: np.ndarray  # int16: position among the event's fields
    case: np.ndarray  # int8: 0 none, else the XStat value field number
    value: np.ndarray  # uint64 bits (varint value / double bits / ref id / str start)
    str_end: dict = field(default_factory=dict)  # index -> end, for str/bytes values


@dataclass
class _Events:
    n: int
    line: np.ndarray  # int32
    metadata_id: np.ndarray  # int64
    offset_ps: np.ndarray  # int64
    duration_ps: np.ndarray  # int64
    kinds: dict  # kind -> _KindStats
    views: dict = field(default_factory=dict)  # (name, last) -> _StatView cache


def _decode_events(b: np.ndarray, ev_start: np.ndarray, ev_end: np.ndarray, ev_line: np.ndarray,
                   stat_names: dict[int, str]) -> _Events:
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
    w = _windows(b)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        sp_ev, sp_ord, sp_start, sp_end = [], [], [], []
        for ordinal, (msg, number, wt, value, fend) in enumerate(_walk(b, ev_start[lo:hi], ev_end[lo:hi], w)):
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
            strs = np.flatnonzero((c == _STR) | (c == _BYTES))
            parts.setdefault(k, []).append((st_ev[idx], st_ord[idx], c, val[idx],
                                            strs, send[idx[strs]]))
    kinds = {}
    for k, chunks in parts.items():
        ev_ = np.concatenate([x[0] for x in chunks])
        ks = _KindStats(ev_, np.concatenate([x[1] for x in chunks]), np.concatenate([x[2] for x in chunks]),
                        np.concatenate([x[3] for x in chunks]))
        base = 0
        for x in chunks:
            for i, e in zip(x[4].tolist(), x[5].tolist()):
                ks.str_end[base + i] = e
            base += len(x[0])
        kinds[k] = ks
    offset_ps[data_case != 2] = 0
    return _Events(n, ev_line, metadata_id, offset_ps, duration_ps, kinds)


_VALUE_FIELDS = {(0, _UINT64), (0, _INT64), (0, _REF), (1, _DOUBLE), (2, _STR), (2, _BYTES)}


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
    m_v, p = _varints(b, starts[idx] + 1, w)
    tag = b[p]
    number = (tag >> 3).astype(np.int8)
    wt = tag & 7
    v = np.zeros(len(idx), dtype=np.uint64)
    e = np.zeros(len(idx), dtype=np.int64)
    nx = np.full(len(idx), -1, dtype=np.int64)
    m = (wt == 0) & ((number == _UINT64) | (number == _INT64) | (number == _REF))
    if m.any():
        v[m], nx[m] = _varints(b, p[m] + 1, w)
    m = (wt == 1) & (number == _DOUBLE)
    if m.any():
        v[m] = _fixed64(w, p[m] + 1)
        nx[m] = p[m] + 9
    m = (wt == 2) & ((number == _STR) | (number == _BYTES))
    if m.any():
        ln, q = _varints(b, p[m] + 1, w)
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
        for msg, num, wtype, value, fend in _walk(b, starts[rest], stops[rest], w):
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


_EMPTY_KIND = _KindStats(np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(0, np.int8),
                         np.zeros(0, np.uint64))


class _StatView:
    """Per-event access to one stat (by name), with XProf's readers.

    ``last=True`` is ``ForEachStat`` with assignment (the last such stat of an event
    wins), ``last=False`` is ``GetStat`` (the first one). ``stat[i]`` indexes the kind's
    stats (-1: the event has none).
    """

    def __new__(cls, ev: _Events, name: str, *, last: bool = True):
        key = (name, last)
        view = ev.views.get(key)
        if view is None:
            view = super().__new__(cls)
            view._init(ev, name, last)
            ev.views[key] = view
        return view

    def _init(self, ev: _Events, name: str, last: bool):
        ks = ev.kinds.get(_KIND[name], _EMPTY_KIND)
        self.ks = ks
        dtype = np.int32 if len(ks.event) < (1 << 31) else np.int64
        idx = np.arange(len(ks.event), dtype=dtype)
        fill = _last_per_msg if last else _first_per_msg
        self.stat = fill(ev.n, ks.event, idx, -1, dtype)
        self.present = self.stat >= 0
        self.ev = ev

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
        out[ok] = np.where(self.ks.case[si] == _INT64, self.ks.value[si].view(np.int64), 0)
        return out

    def int_or_uint_value(self) -> np.ndarray:
        """XStatVisitor::IntOrUintValue as uint64 bits."""
        out = np.zeros(len(self.stat), dtype=np.uint64)
        ok = self.present
        si = self.stat[ok]
        c = self.ks.case[si]
        out[ok] = np.where((c == _INT64) | (c == _UINT64), self.ks.value[si], np.uint64(0))
        return out

    def double_value(self) -> np.ndarray:
        out = np.zeros(len(self.stat), dtype=np.float64)
        ok = self.present
        si = self.stat[ok]
        bits = np.where(self.ks.case[si] == _DOUBLE, self.ks.value[si], np.uint64(0))
        out[ok] = bits.view(np.float64)
        return out

    def str_or_ref(self, strings: _Strings, events: np.ndarray) -> np.ndarray:
        """Indices into ``strings`` of StrOrRefValue for ``events`` ("" without the stat)."""
        return strings.str_or_ref(self.ks, self.stat[events])


class _Strings:
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

    def str_or_ref(self, ks: _KindStats, stat: np.ndarray) -> np.ndarray:
        """Table indices of StrOrRefValue for stats ``stat`` of one kind (-1: "")."""
        out = np.zeros(len(stat), dtype=np.int32)
        ok = np.flatnonzero(stat >= 0)
        if not ok.size:
            return out
        si = stat[ok]
        case = ks.case[si]
        ref = case == _REF
        if ref.any():
            ids, inv = np.unique(ks.value[si[ref]], return_inverse=True)
            mapped = np.array([self.add(self.stat_names.get(int(i), "")) if int(i) < (1 << 63) else 0
                               for i in ids.tolist()], dtype=np.int32)
            out[ok[ref]] = mapped[inv.reshape(-1)]
        sv = case == _STR
        if sv.any():
            data = self.data
            cache: dict[bytes, int] = {}
            vals = []
            for i in si[sv].tolist():
                raw = bytes(data[int(ks.value[i]):ks.str_end[i]])
                k = cache.get(raw)
                if k is None:
                    k = cache[raw] = self.add(raw.decode("utf-8", "replace"))
                vals.append(k)
            out[ok[sv]] = vals
        return out


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

# XProf's names (tsl xplane_schema.cc)
_LOOP_OPS = {"WhileOp-EvalCond", "WhileOp-StartBody", "ForOp", "ParallelForOp", "ForeverOp"}


def read_allocator_events(raw: IO[bytes], path: str, progress=None) -> AllocatorEvents:
    """The allocator events of the XSpace in ``raw`` (plain or gzipped ``*.xplane.pb``).

    Parses only what the memory profile needs: the ``/host:CPU`` plane (its events in
    bulk, vectorized), the metadata of the other planes (whether XProf would group the
    profile) and the ``XLA Modules`` lines of TPU planes. ``progress``, if given, gets
    ``progress.update(fraction=..., message=...)`` calls.
    """
    _report(progress, 0.0, "indexing the profile")
    index = xplane.scan(raw, path)
    hostname = index.hostnames[0] if index.hostnames else ""
    host_ref = index.plane(HOST_PLANE)
    pre_grouped = False
    loop_ops = False
    hlo_modules: list[HloModuleSpan] = []
    with xspace_errors(path):
        raw.seek(0)
        f, size = xplane.open_stream(raw, path)
        data = None
        # one forward pass over the planes, in file order
        for ref in sorted(index.planes, key=lambda r: r.offset):
            if ref is host_ref:
                _report(progress, 0.05, f"reading {HOST_PLANE}")
                data = _read_plane_bytes(f, size, ref, pad=_PAD + (-ref.length) % 8)
                continue
            if ref.name.startswith(TPU_PLANE_PREFIX):
                tpu = _read_plane_bytes(f, size, ref, pad=_PAD + (-ref.length) % 8)
                meta_bytes, lines = _split_plane(tpu, ref.length)
                meta = xplane_pb2.XPlane.FromString(meta_bytes)
                hlo_modules += _xla_modules(tpu, lines, meta, ref.name)
                del tpu
            else:
                meta = _plane_metadata(f, size, ref)
            pre_grouped |= any(m.name == "group_id" for m in meta.stat_metadata.values())
            loop_ops |= any(m.name in _LOOP_OPS for m in meta.event_metadata.values())
        if host_ref is None:
            return _empty(path, hostname, False, hlo_modules)
        meta_bytes, line_spans = _split_plane(data, host_ref.length)
        meta = xplane_pb2.XPlane.FromString(meta_bytes)
        pre_grouped |= any(m.name == "group_id" for m in meta.stat_metadata.values())
        loop_ops |= any(m.name in _LOOP_OPS for m in meta.event_metadata.values())
        b = np.frombuffer(data, dtype=np.uint8)
        headers = []
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        lines_of: list[np.ndarray] = []
        for li, (a, z) in enumerate(line_spans):
            head, s, e = _line_events(data, b, a, z)
            headers.append(xplane_pb2.XLine.FromString(head))
            starts.append(s)
            ends.append(e)
            lines_of.append(np.full(len(s), li, dtype=np.int32))
        _report(progress, 0.15, "decoding events")
        stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
        ev = _decode_events(b, _cat(starts, np.int64), _cat(ends, np.int64), _cat(lines_of, np.int32),
                            stat_names)
        del starts, ends, lines_of, b
        _report(progress, 0.5, "grouping steps")
        return _build(path, hostname, data, meta, headers, ev, pre_grouped, loop_ops, hlo_modules, progress)


def _cat(parts, dtype):
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _report(progress, fraction, message):
    if progress is not None:
        progress.update(fraction=fraction, message=message)


def _empty(path, hostname, has_host, hlo_modules, line_names=(), grouping="none") -> AllocatorEvents:
    z = np.zeros(0, dtype=np.int64)
    z32 = np.zeros(0, dtype=np.int32)
    return AllocatorEvents(
        path=path, hostname=hostname, has_host_plane=has_host,
        time_ps=z, kind=np.zeros(0, np.int8), memory_id=z32, bytes_reserved=z,
        bytes_allocated=z, bytes_available=z, peak_bytes_in_use=z, requested_bytes=z,
        allocation_bytes=z, fragmentation=np.zeros(0, np.float64),
        address=np.zeros(0, np.uint64), tf_op=z32, region_type=z32, data_type=z, shape=z32,
        group_id=z, step_id_stat=z, line=z32, line_names=list(line_names),
        hlo_modules=hlo_modules, grouping=grouping)


def _xla_modules(data, lines, meta: xplane_pb2.XPlane, plane_name: str) -> list[HloModuleSpan]:
    out = []
    b = np.frombuffer(data, dtype=np.uint8)
    names = {k: v.name for k, v in meta.event_metadata.items()}
    short = plane_name.removeprefix("/device:")
    for a, z in lines:
        if _line_name(data, b, a, z) != XLA_MODULE_LINE:
            continue
        line = xplane_pb2.XLine.FromString(bytes(data[a:z]))
        for e in line.events:
            off = e.offset_ps if e.WhichOneof("data") == "offset_ps" else 0
            out.append(HloModuleSpan(names.get(e.metadata_id, ""), off, off + e.duration_ps, short))
    return out


def _line_name(data, b: np.ndarray, start: int, end: int) -> str:
    """An XLine's name (field 2), read without parsing its events."""
    pos = start
    name = ""
    while pos < end:
        if data[pos] == 0x22:  # events: skipped in bulk
            _, _, pos = _event_run(data, b, pos, end)
            continue
        number, wt, payload, nxt = _next_field(data, pos, end)
        if number == 2 and wt == 2:
            name = bytes(data[payload:nxt]).decode("utf-8", "replace")  # the last one wins
        pos = nxt
    return name


def _mid_mask(ev: _Events, event_names: dict[int, str], wanted) -> np.ndarray:
    ids = [k for k, v in event_names.items() if v in wanted]
    if not ids:
        return np.zeros(ev.n, dtype=bool)
    return np.isin(ev.metadata_id, np.asarray(ids, dtype=np.int64))


def _build(path, hostname, data, meta, headers, ev: _Events, pre_grouped, loop_ops, hlo_modules, progress):
    stat_names = {k: v.name for k, v in meta.stat_metadata.items()}
    event_names = {k: v.name for k, v in meta.event_metadata.items()}
    strings = _Strings(data, stat_names)
    line_names = [h.name for h in headers]

    ev_kind = np.zeros(ev.n, dtype=np.int8)
    ev_kind[_mid_mask(ev, event_names, {"MemoryAllocation"})] = ALLOCATION
    ev_kind[_mid_mask(ev, event_names, {"MemoryDeallocation"})] = DEALLOCATION

    # XProf's preprocessing: threadpool regions (consumers appended to their lines).
    line_ts_ns = np.array([h.timestamp_ns for h in headers], dtype=np.int64)
    order, regions = _threadpool_regions(ev, event_names, line_ts_ns)

    if pre_grouped:
        v = _StatView(ev, "group_id")
        group_id = np.where(v.present, v.int_value(), -1)
        steps: list[StepGroup] = []
        grouping = "pre-grouped"
    elif loop_ops:
        group_id = np.full(ev.n, -1, dtype=np.int64)
        steps = []
        grouping = "loop-ops"
    else:
        g = _Grouping(ev, ev_kind, event_names, stat_names, meta, headers, line_ts_ns, order, regions, strings)
        group_id, steps, grouping = g.run()
        del g
    ev.views.clear()  # the grouping's stat views are not needed any more
    _report(progress, 0.85, "collecting allocator events")

    # Allocator events in XProf's reading order.
    mem_order = order[order < ev.n]
    mem_order = mem_order[ev_kind[mem_order] > 0]
    n = len(mem_order)
    if n == 0:
        out = _empty(path, hostname, True, hlo_modules, line_names, grouping)
        out.steps = steps
        return out

    def ints(name):
        return _StatView(ev, name).int_value()[mem_order]

    def strs(name):
        return _StatView(ev, name).str_or_ref(strings, mem_order)

    # The memory id: the last of allocator_name / index_on_host / device_ordinal.
    v_name = _StatView(ev, "allocator_name")
    v_index, v_ordinal = _StatView(ev, "index_on_host"), _StatView(ev, "device_ordinal")
    o_name = v_name.ordinal()[mem_order]
    o_index = v_index.ordinal()[mem_order]
    o_ordinal = v_ordinal.ordinal()[mem_order]
    use_num = np.maximum(o_index, o_ordinal) > o_name
    name_idx = v_name.str_or_ref(strings, mem_order).astype(np.int64)
    if use_num.any():
        num_vals = np.where(o_index > o_ordinal, v_index.int_value()[mem_order], v_ordinal.int_value()[mem_order])
        # codes: string indices >= 0, numbers as -1 - (rank among the numbers used)
        nums, num_rank = np.unique(num_vals[use_num], return_inverse=True)
        codes = name_idx.copy()
        codes[use_num] = -1 - num_rank.reshape(-1)
    else:
        nums = np.zeros(0, dtype=np.int64)
        codes = name_idx
    uniq, inverse = np.unique(codes, return_inverse=True)
    texts = [str(int(nums[-1 - c])) if c < 0 else strings.table[c] for c in uniq.tolist()]
    # memory ids sorted as std::string (bytewise), like XProf's memory_ids
    srt = sorted(range(len(texts)), key=lambda i: texts[i].encode("utf-8", "surrogateescape"))
    memory_ids: list[str] = []
    remap = np.zeros(len(texts), dtype=np.int32)
    for i in srt:
        if not memory_ids or memory_ids[-1] != texts[i]:
            memory_ids.append(texts[i])
        remap[i] = len(memory_ids) - 1
    memory_id = remap[np.asarray(inverse).reshape(-1)]

    v_id = _StatView(ev, "id")
    step_stat = np.where(v_id.present, v_id.int_value(), -1)[mem_order]

    return AllocatorEvents(
        path=path,
        hostname=hostname,
        has_host_plane=True,
        time_ps=ev.offset_ps[mem_order],
        kind=ev_kind[mem_order],
        memory_id=memory_id,
        bytes_reserved=ints("bytes_reserved"),
        bytes_allocated=ints("bytes_allocated"),
        bytes_available=ints("bytes_available"),
        peak_bytes_in_use=ints("peak_bytes_in_use"),
        requested_bytes=ints("requested_bytes"),
        allocation_bytes=ints("allocation_bytes"),
        fragmentation=_StatView(ev, "fragmentation").double_value()[mem_order],
        address=ints("addr").view(np.uint64),
        tf_op=strs("tf_op"),
        region_type=strs("region_type"),
        data_type=ints("data_type"),
        shape=strs("shape"),
        group_id=group_id[mem_order],
        step_id_stat=step_stat,
        line=ev.line[mem_order],
        strings=strings.table,
        memory_ids=memory_ids,
        line_names=line_names,
        steps=steps,
        hlo_modules=hlo_modules,
        grouping=grouping,
    )


# ---------------------------------------------------------------------------
# XProf's preprocessing: ThreadpoolListener regions
# ---------------------------------------------------------------------------

_THREADPOOL_EVENT_CONTEXT = 15  # tsl ContextType::kThreadpoolEvent


@dataclass
class _Regions:
    """``ThreadpoolListener::Region`` events XProf adds; their node ids follow ev.n."""

    line: np.ndarray
    ts_ps: np.ndarray  # absolute begin
    end_ps: np.ndarray  # absolute end
    region_id: np.ndarray  # uint64 consumer id


def _threadpool_regions(ev: _Events, event_names, line_ts_ns):
    """XProf's ThreadpoolLineMutator: one ``ThreadpoolListener::Region`` per
    ``StopRegion`` after a ``StartRegion`` on a line (the start is not reset, so two stops
    make two regions), consumer of the start's ``_c`` context (type 15).

    XProf 2.24.2 appends them to the end of their line and does not re-sort the line
    (checked: allocator events keep their line order, and events inside a region are not
    grouped through it), so they nest nothing and only add consumers to their context.
    Returns (order, regions): ``order`` lists the event indices in the order XProf's
    visitors see them (lines in plane order, events in line order).
    """
    n = ev.n
    order = np.arange(n, dtype=np.int64)  # events were read line by line, in line order
    empty = _Regions(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64),
                     np.zeros(0, np.uint64))
    start_ids = [k for k, v in event_names.items() if v == "ThreadpoolListener::StartRegion"]
    stop_ids = [k for k, v in event_names.items() if v == "ThreadpoolListener::StopRegion"]
    if not start_ids or not stop_ids or n == 0:
        return order, empty
    start_mid, stop_mid = start_ids[-1], stop_ids[-1]
    consumer = _StatView(ev, "_c", last=False)
    ts = line_ts_ns[ev.line] * 1000 + ev.offset_ps
    is_start = (ev.metadata_id == start_mid) & consumer.present
    is_stop = ev.metadata_id == stop_mid
    cid = consumer.int_or_uint_value()
    reg_line, reg_ts, reg_end, reg_id = [], [], [], []
    cur_line, start_ts, region = -1, 0, 0
    for i in order[(is_start | is_stop)[order]].tolist():
        li = int(ev.line[i])
        if li != cur_line:
            cur_line, start_ts, region = li, 0, 0
        if is_start[i]:
            start_ts, region = int(ts[i]), int(cid[i])
        elif start_ts != 0:
            reg_line.append(li)
            reg_ts.append(start_ts)
            reg_end.append(int(ts[i]))
            reg_id.append(region)
    if not reg_line:
        return order, empty
    return order, _Regions(np.asarray(reg_line, np.int32), np.asarray(reg_ts, np.int64),
                           np.asarray(reg_end, np.int64), np.asarray(reg_id, np.uint64))


# ---------------------------------------------------------------------------
# Step grouping (tsl GroupTfEvents over the host plane)
# ---------------------------------------------------------------------------

# tsl ContextType values
_CT_LEGACY, _CT_TPU_STREAM, _CT_TPU_LAUNCH = 1, 11, 12
_RUN_ID_MASK = (1 << 27) - 1

_ROOT_MUTATED = {"ProcessBatch": 2, "OrbaxServing::ProcessBatch": 2, "BatchingSessionRun": 1}
_IMPLICIT_ROOTS = {"FunctionRun", "SessionRun", "RunGraph", "ExecutorState::Process"}
_TF_DATA_FUNCS = {
    "InstantiatedCapturedFunction::Run",
    "InstantiatedCapturedFunction::RunWithBorrowedArgs",
    "InstantiatedCapturedFunction::RunInstantiated",
    "InstantiatedCapturedFunction::RunAsync",
}
_QUEUE_CONSUMERS = (
    "RunProgramRequest", "HostCallbackRequest", "TransferH2DRequest",
    "TransferPreprocessedH2DRequest", "TransferD2HRequest", "OnDeviceSendRequest",
    "OnDeviceRecvRequest", "OnDeviceSendRecvLocalRequest", "CustomWait",
    "OnDeviceSendRequestMulti", "OnDeviceRecvRequestMulti", "PjrtAsyncWait",
)


def _int32(x: int) -> int:
    return ((int(x) + (1 << 31)) % (1 << 32)) - (1 << 31)


class _Grouping:
    """Group ids of the host plane's events, as tsl's EventForest computes them."""

    def __init__(self, ev, ev_kind, event_names, stat_names, meta, headers, line_ts_ns, order, regions,
                 strings):
        self.ev = ev
        self.ev_kind = ev_kind
        self.event_names = event_names
        self.stat_names = stat_names
        self.meta = meta
        self.headers = headers
        self.line_ts_ns = line_ts_ns
        self.order = order
        self.regions = regions
        self.strings = strings

    def _mask(self, wanted) -> np.ndarray:
        return _mid_mask(self.ev, self.event_names, wanted)

    def run(self):
        ev, regions = self.ev, self.regions
        n = ev.n
        nr = len(regions.line)
        total = n + nr

        # GroupingEventStats (ForEachStat: the last stat of a kind wins)
        v_pt, v_p = _StatView(ev, "_pt"), _StatView(ev, "_p")
        v_ct, v_c = _StatView(ev, "_ct"), _StatView(ev, "_c")
        v_pid, v_r, v_a = _StatView(ev, "_pid"), _StatView(ev, "_r"), _StatView(ev, "_a")
        # GetStat (the first one)
        g_step = _StatView(ev, "id", last=False)
        g_iter = _StatView(ev, "iter_num", last=False)

        root_level = np.zeros(total, dtype=np.int64)
        r_vals = v_r.int_value()
        rl = ((r_vals + (1 << 31)) % (1 << 32)) - (1 << 31)  # std::optional<int>
        root_level[:n] = np.where(v_r.present, rl, 0)
        legacy = self._mask({"TraceContext"}) & ~v_r.present
        root_level[:n][legacy] = 1
        for ename, level in _ROOT_MUTATED.items():  # XplaneRootEventMutator
            root_level[:n][self._mask({ename})] = level
        is_async = np.zeros(total, dtype=bool)
        is_async[:n] = v_a.present & (v_a.int_value() != 0)

        # Producer / consumer contexts, after XProf's connected-event mutators.
        prod: dict[int, tuple] = {}
        cons: dict[int, tuple] = {}
        pt_v, p_v = v_pt.int_value(), v_p.int_or_uint_value()
        ct_v, c_v = v_ct.int_value(), v_c.int_or_uint_value()
        for i in np.flatnonzero(v_pt.present & v_p.present).tolist():
            prod[i] = (_int32(pt_v[i]), int(p_v[i]))
        for i in np.flatnonzero(v_ct.present & v_c.present).tolist():
            cons[i] = (_int32(ct_v[i]), int(c_v[i]))
        self._mutate_contexts(prod, cons)
        for j in range(nr):
            cons[n + j] = (_THREADPOOL_EVENT_CONTEXT, int(regions.region_id[j]))

        esp = self._mask({"ExecutorState::Process"})
        loops_possible = (esp & g_step.present & g_iter.present & (g_iter.int_value() != 0)).any()
        if not (root_level > 0).any() and not loops_possible:
            return np.full(n, -1, dtype=np.int64), [], "no-roots"

        ts = np.empty(total, dtype=np.int64)
        dur = np.empty(total, dtype=np.int64)
        line = np.empty(total, dtype=np.int32)
        ts[:n] = self.line_ts_ns[ev.line] * 1000 + ev.offset_ps
        dur[:n] = ev.duration_ps
        line[:n] = ev.line
        if nr:
            ts[n:] = regions.ts_ps
            dur[n:] = regions.end_ps - regions.ts_ps
            line[n:] = regions.line
        end = ts + dur

        children: dict[int, list[int]] = {}
        parents: dict[int, list[int]] = {}

        def add_child(p, c):
            children.setdefault(p, []).append(c)
            parents.setdefault(c, []).append(p)

        # ConnectIntraThread: nesting on each line, in line order.
        mem = np.zeros(total, dtype=bool)
        mem[:n] = self.ev_kind > 0
        special = np.zeros(total, dtype=bool)
        special[list(prod)] = True
        special[list(cons)] = True
        special |= root_level > 0
        nest_parent = np.full(total, -1, dtype=np.int64)
        below = np.full(total, -1, dtype=np.int64)
        leaf = np.zeros(total, dtype=bool)  # allocator events hung under their parent only
        order = self.order
        bounds = np.flatnonzero(np.diff(line[order])) + 1
        for seg in np.split(order, bounds):
            if len(seg):
                self._nest_line(seg, ts, end, dur, is_async, mem, special, nest_parent, below, leaf)
        for c in np.flatnonzero((nest_parent >= 0) & ~leaf).tolist():
            add_child(int(nest_parent[c]), c)

        # ConnectInterThread: ExecutorState::Process -> IteratorGetNext(AsOptional)Op
        both = g_step.present & g_iter.present
        g_step_u, g_iter_u = g_step.int_or_uint_value(), g_iter.int_or_uint_value()
        parent_map = {}
        for i in np.flatnonzero(esp & both).tolist():
            parent_map[(int(g_step_u[i]), int(g_iter_u[i]))] = i
        for cname in ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute"):
            for i in np.flatnonzero(self._mask({cname}) & both).tolist():
                p = parent_map.get((int(g_step_u[i]), int(g_iter_u[i])))
                if p is not None:
                    add_child(p, i)

        # ConnectContextGroups
        plane_pid = None
        for s in self.meta.stats:
            if self.stat_names.get(s.metadata_id) == "process_id":
                plane_pid = _int32(s.int64_value if s.WhichOneof("value") == "int64_value" else 0)
                break
        pid_present, pid_vals = v_pid.present, v_pid.int_value()
        groups: dict[tuple, tuple[list, list]] = {}
        for i in sorted(set(prod) | set(cons)):
            pid = _int32(pid_vals[i]) if i < n and pid_present[i] else plane_pid
            if i in prod:
                groups.setdefault((prod[i], pid), ([], []))[0].append(i)
            if i in cons:
                groups.setdefault((cons[i], pid), ([], []))[1].append(i)
        for producers, consumers in groups.values():
            if len(producers) >= 64 and len(consumers) >= 64:
                continue
            for p in producers:
                for c in consumers:
                    add_child(p, c)

        # GroupEvents: tf.data steps, TF loops, then root events.
        g_step_i = g_step.int_value()
        tf_data_steps = {int(g_step_i[i]) for i in np.flatnonzero(self._mask(_TF_DATA_FUNCS) & g_step.present)}
        loop_roots = self._tf_loops(esp, g_step, g_iter, tf_data_steps, ts, add_child)

        group = np.full(total, -1, dtype=np.int64)
        steps: list[StepGroup] = []

        def process_root(root, gid):
            queue = [root]
            seen = {root}
            k = 0
            while k < len(queue):
                node = queue[k]
                k += 1
                if group[node] >= 0:
                    continue
                group[node] = gid
                for c in children.get(node, ()):
                    if c not in seen:
                        seen.add(c)
                        queue.append(c)
            steps.append(self._step(root, gid, ts, dur, line, parents))

        if loop_roots:
            for gid, root in enumerate(loop_roots):
                process_root(root, gid)
        else:
            roots = np.flatnonzero(root_level > 0)
            roots = np.asarray([r for r in roots.tolist()
                                if not (r < n and g_step.present[r] and int(g_step_i[r]) in tf_data_steps)],
                               dtype=np.int64)
            if len(roots):
                pos = np.empty(total, dtype=np.int64)
                pos[order] = np.arange(len(order))
                roots = roots[np.argsort(pos[roots], kind="stable")]  # the forest's order
                roots = roots[std_sort_order(-root_level[roots], ts[roots])]
            gid = 0
            for r in roots.tolist():
                if group[r] >= 0 or self._has_root_ancestor(r, root_level, parents):
                    continue
                process_root(r, gid)
                gid += 1

        # Allocator events hung directly under their nesting parent take its group.
        li = np.flatnonzero(leaf & (nest_parent >= 0))
        if li.size:
            group[li] = group[nest_parent[li]]
        return group[:n], steps, "grouped"

    # -- pieces ----------------------------------------------------------------------

    def _mutate_contexts(self, prod, cons):
        """XProf's XplaneConnectedEventMutatorFactory instances (preprocess_xplane.cc)."""
        names = set(self.event_names.values())
        stat_names = set(self.stat_names.values())
        ev = self.ev

        def connect(producer, consumer, ctype, unique, stats, key_of=None):
            if not all(s in stat_names for s in stats):
                return
            views = [_StatView(ev, s, last=False) for s in stats]
            tag = () if unique else (producer, consumer)
            for ename, store in ((producer, prod), (consumer, cons)):
                if ename not in names:
                    continue
                mask = self._mask({ename})
                for v in views:
                    mask &= v.present
                vals = [v.int_or_uint_value() for v in views]
                for i in np.flatnonzero(mask).tolist():
                    key = tuple(int(x[i]) for x in vals)
                    if key_of is not None:
                        key = key_of(i, key)
                    store[i] = (ctype, (tag, key))

        connect("ExecutorState::Process", "TpuExecuteOp", _CT_LEGACY, False, ("id", "iter_num"))
        for c in _QUEUE_CONSUMERS:
            connect("EnqueueRequestLocked", c, _CT_TPU_STREAM, True, ("request_id", "queue_addr"))
        # run_id is first masked to 27 bits (HostRunIdMutator); core_type defaults to 0
        core = _StatView(ev, "core_type", last=False)
        core_v = core.int_or_uint_value()
        run = _StatView(ev, "run_id", last=False).int_value()

        def launch_key(i, key):
            return (key[0], key[1], int(run[i]) & _RUN_ID_MASK, int(core_v[i]) if core.present[i] else 0)

        connect("DoEnqueueProgram", "CompleteCallbacks", _CT_TPU_LAUNCH, True,
                ("device_ordinal", "queue_id", "run_id"), launch_key)

    def _nest_line(self, seg, ts, end, dur, is_async, mem, special, nest_parent, below, leaf):
        """ConnectIntraThread for one line (``seg``: node ids in line order)."""
        seg_mem = mem[seg]
        mem_ids = seg[seg_mem]
        fast = (len(seg) < 2 or bool((np.diff(ts[seg]) >= 0).all())) and not special[mem_ids].any() \
            and not (dur[mem_ids] != 0).any()
        if not fast or not mem_ids.size:
            self._nest_sequence(seg, ts, end, is_async, nest_parent, below)
            return
        # Allocator events are instants on a time-ordered line: whatever they pop, a later
        # event would pop too, and whatever nests under one of them nests under its parent
        # (same group). So nest the other events, then hang each allocator event under the
        # innermost open event that contains it.
        self._nest_sequence(seg[~seg_mem], ts, end, is_async, nest_parent, below)
        mpos = np.flatnonzero(seg_mem)
        opener = np.where(~seg_mem & ~is_async[seg], np.arange(len(seg)), -1)
        opener = np.maximum.accumulate(opener)[mpos]
        cand = np.where(opener >= 0, seg[np.maximum(opener, 0)], -1)
        t = ts[seg[mpos]]
        active = np.flatnonzero(cand >= 0)
        while active.size:
            c = cand[active]
            ok = (ts[c] <= t[active]) & (end[c] >= t[active])
            done = active[ok]
            nest_parent[seg[mpos[done]]] = c[ok]
            rest = active[~ok]
            cand[rest] = below[cand[rest]]
            active = rest[cand[rest] >= 0]
        leaf[mem_ids] = True

    @staticmethod
    def _nest_sequence(seg, ts, end, is_async, nest_parent, below):
        """The exact stack walk of ConnectIntraThread; records the node under each."""
        stack: list[int] = []
        ids = seg.tolist()
        ts_l = ts[seg].tolist()
        end_l = end[seg].tolist()
        asy = is_async[seg].tolist()
        sb: list[int] = []
        se: list[int] = []
        parent_out = []
        below_out = []
        for k, i in enumerate(ids):
            if asy[k]:
                continue
            b, e = ts_l[k], end_l[k]
            while stack:
                if sb[-1] <= b and e <= se[-1]:
                    parent_out.append((i, stack[-1]))
                    break
                stack.pop()
                sb.pop()
                se.pop()
            below_out.append((i, stack[-1] if stack else -1))
            stack.append(i)
            sb.append(b)
            se.append(e)
        if parent_out:
            a = np.asarray(parent_out, dtype=np.int64)
            nest_parent[a[:, 0]] = a[:, 1]
        if below_out:
            a = np.asarray(below_out, dtype=np.int64)
            below[a[:, 0]] = a[:, 1]

    def _tf_loops(self, esp, g_step, g_iter, tf_data_steps, ts, add_child):
        """ProcessTensorFlowLoop: one root per iteration of a TF while loop."""
        both = esp & g_step.present & g_iter.present
        if not both.any():
            return []
        steps = g_step.int_value()
        iters = g_iter.int_value()
        loops: dict[int, dict[int, list[int]]] = {}
        for i in self.order[both[np.minimum(self.order, self.ev.n - 1)] & (self.order < self.ev.n)].tolist():
            s = int(steps[i])
            if s in tf_data_steps:
                continue
            loops.setdefault(s, {}).setdefault(int(iters[i]), []).append(i)
        iterations = []
        for loop in loops.values():
            if len(loop) == 1 and 0 in loop:
                continue
            for events in loop.values():
                first = events[0]
                for e in events:
                    if ts[e] < ts[first]:
                        first = e
                iterations.append((first, events))
        if not iterations:
            return []
        firsts = np.asarray([f for f, _ in iterations], dtype=np.int64)
        roots = []
        for k in std_sort_order(ts[firsts]).tolist():
            first, events = iterations[k]
            roots.append(first)
            for e in events:
                if e != first:
                    add_child(first, e)
        return roots

    @staticmethod
    def _has_root_ancestor(r, root_level, parents) -> bool:
        """Not RootNeedsGrouping: an ancestor is a root of the same level."""
        level = root_level[r]
        queue = list(parents.get(r, ()))
        seen = {r, *queue}
        k = 0
        while k < len(queue):
            node = queue[k]
            k += 1
            if root_level[node] > 0 and root_level[node] == level:
                return True
            for p in parents.get(node, ()):
                if p not in seen:
                    seen.add(p)
                    queue.append(p)
        return False

    def _context_stat(self, node, view, parents):
        """EventNode::GetContextStat: the node, or its nearest ancestor, with the stat."""
        n = self.ev.n
        queue = [node]
        seen = {node}
        k = 0
        while k < len(queue):
            x = queue[k]
            k += 1
            if x < n and view.present[x]:
                return x
            for p in parents.get(x, ()):
                if p not in seen:
                    seen.add(p)
                    queue.append(p)
        return None

    def _step(self, root, gid, ts, dur, line, parents) -> StepGroup:
        """The group's name as EventNode::GetGroupName makes it, and the root's span."""
        ev = self.ev
        n = ev.n
        name = ""
        gt = _StatView(ev, "graph_type", last=False)
        x = self._context_stat(root, gt, parents)
        if x is not None:
            name = self.strings.table[int(gt.str_or_ref(self.strings, np.asarray([x]))[0])] + " "
        else:
            ename = self.event_names.get(int(ev.metadata_id[root]), "") if root < n else "ThreadpoolListener::Region"
            if ename not in _IMPLICIT_ROOTS:
                name = ename + " "
        step_num = gid
        it = _StatView(ev, "iter_num", last=False)
        x = self._context_stat(root, it, parents)
        if x is not None:
            step_num = int(it.int_value()[x])
        else:
            sn = _StatView(ev, "step_num", last=False)
            x = self._context_stat(root, sn, parents)
            if x is not None:
                step_num = int(sn.int_value()[x])
        li = int(line[root])
        off = int(ts[root] - self.line_ts_ns[li] * 1000)
        return StepGroup(gid, f"{name}{step_num}", off, off + int(dur[root]), self.headers[li].name)
