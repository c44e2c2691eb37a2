"""PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``), safely, as columns.

Inputs accepted (optionally gzip-compressed):

* a pickle, protocols 2-5 — what ``torch.cuda.memory._dump_snapshot(path)`` writes
  (``pickle.dump(torch.cuda.memory._snapshot(), f)``);
* the same structure as JSON;
* the HTML page of ``torch/cuda/_memory_viz.py`` (``trace_plot`` / ``segment_plot``):
  ``_format_viz`` pickles the snapshot, pads it with NUL bytes to a multiple of 3,
  base64-encodes it and embeds ``const local_files = [{"name": "snapshot.pickle",
  "base64": "..."}]`` in a ``<script type="module">`` that imports ``MemoryViz.js``.

**Nothing in a file can run code.** Pickles are read by :class:`_NoGlobalsUnpickler`,
whose ``find_class`` refuses every global (so ``__reduce__`` payloads such as
``os.system``, ``builtins.eval`` or ``copyreg._reconstructor`` never resolve) and which
refuses persistent ids. Only dict, list, tuple, str, bytes, int, float, bool and None can
be built. The pickle is parsed completely before anything is looked at, and its bytes
are checked on their way to the unpickler (:class:`safe_pickle.Prescan`: memo indices and
declared lengths that would size a huge allocation are refused, and a pickle with
unusual tuples or sets is read by the streaming reader instead, which bounds what
hashing a key costs). What the reader keeps verbatim (``allocator_settings``,
``external_annotations``) is copied into a bounded, JSON-ready tree (``_verbatim``), and
every string kept has its lone surrogates escaped, so every view can serialize it.

The snapshot structure (``torch/cuda/memory.py`` ``_snapshot`` docstring; produced by
``torch/csrc/cuda/Module.cpp`` ``_cuda_memorySnapshot`` from
``c10/cuda/CUDACachingAllocator.{h,cpp}`` ``SegmentInfo``/``BlockInfo``/``TraceEntry``)::

    {"segments": [Segment], "device_traces": [[TraceEntry]] (one list per device index),
     "allocator_settings": {...} (2024+), "external_annotations": [...] (2025+)}
    Segment = {device, address, total_size, allocated_size, active_size, requested_size,
               stream, segment_type ("small"|"large"), segment_pool_id (tuple, 2024+),
               is_expandable (2024+), frames (2024+), blocks: [Block]}
    Block   = {size, requested_size, state, address (2024+), frames (2024+)}
              2023 legacy: no address, {history: [{addr, real_size, frames}]} instead of frames
    TraceEntry = {action, addr, size, stream, frames (2023+, when recorded with stacks),
                  time_us (2024+), device_free (oom only), compile_context (2025+),
                  user_metadata (2025+)}
    Frame = {filename, line, name} (+ fx_node_op / fx_node_name / fx_original_trace when
            augmented with FX traces; those extras are not kept)

Every key is optional: a missing key gets the documented "absent" value below, and
``Snapshot.era_keys`` records which optional keys the file had.

Block states (``BlockInfo``): ``active_allocated``, ``active_pending_free`` (2023; later
``active_awaiting_free``), ``inactive``. Trace actions (``TraceEntry::Action``): ``alloc``,
``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``,
``segment_map`` / ``segment_unmap`` (expandable segments), ``snapshot``, ``oom`` (``addr``
holds nothing useful; ``device_free`` is the free memory CUDA reported).

Readers: a pickle is read first by the native one-pass reader
(``formats/_pickle_scan.c``, :func:`_native_read`): it runs the pickle stack machine over
8 MiB pieces of the file, builds plain containers for everything but the trace entries,
and writes each entry as a row of numpy columns the moment its bytes are read (its dict,
its ints and a traceback already seen are never built); tracebacks are numbered by the
identities of their frame dicts, and :class:`_NativeSink` turns the numbers into the
stack and string tables the tree reader builds, in the same order, so the model is the
same column for column. It understands fewer opcodes than the no-globals unpickler
(no global, no call, no set, no tuple but pairs of ints) and leaves every pickle it does
not take as it is (a refused opcode, a truncated stream, an unknown action, an entry
referred to twice...) to the readers below, which decide and name what is wrong; with
``PROFSCOPE_NATIVE=0`` or without the extension only they run.

Memory (the readers below): the restricted C unpickler builds the whole object tree at
once (it cannot stream). Trace lists are then converted device by device into numpy
columns and each converted list is dropped at once, so the tree and the columns coexist
only for one device. Frame dicts and frame lists that the pickle shares (torch
symbolizes each distinct frame once) are recognised by identity, so deduplication is
cheap. The native reader peaks at about half the file (the columns, the memo and one
piece of the file).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import math
import os
import pickle
import re
import reprlib
import zlib
from dataclasses import fields
from itertools import repeat
from operator import itemgetter
from typing import IO, Any

import numpy as np

from profscope.errors import BadInput, TooLarge
from profscope.formats import protowire, safe_pickle, streams
from profscope.formats.safe_pickle import MAX_DEPTH, MAX_VERBATIM_CHARS, MAX_VERBATIM_VALUES
from profscope.model.gc_pause import gc_paused
from profscope.model.snapshot import (
    ACTIONS,
    NO_TIME,
    OVERFLOW_KEYS,
    STATES,
    Blocks,
    DeviceTrace,
    Segments,
    Snapshot,
)

try:  # the one-pass native reader of pickles (setup.py builds it where it can)
    from profscope.formats import _pickle_scan as _native
except ImportError:  # pragma: no cover - no C compiler at install time
    _native = None


#: Peak memory of Python's C unpickler and the conversion, per byte of pickle: a trace
#: entry is ~150 bytes of opcodes and ~600 bytes of dict and boxed ints (measured 4.4x
#: on a 250 MB snapshot, see docs/performance.md).
C_UNPICKLER_PEAK_PER_BYTE = 5


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Builds plain containers and scalars only; every global and persistent id is refused."""

    path = ""

    def find_class(self, module, name):
        raise BadInput(
            f"{self.path}: refused: the pickle asks for global {module}.{name} "
            "(a snapshot holds only plain data; nothing was run)",
            file=self.path,
        )

    def persistent_load(self, pid):
        raise BadInput(
            f"{self.path}: refused: the pickle uses a persistent id "
            "(a snapshot holds only plain data; nothing was run)",
            file=self.path,
        )


# -- decoding the container -----------------------------------------------------------

_HTML_B64 = re.compile(rb'"base64"\s*:\s*"([A-Za-z0-9+/=\\n\s]*)"')


def _read_all(raw: IO[bytes] | bytes, path: str) -> bytes:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return bytes(raw)
    try:
        return raw.read()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e}", file=path) from None


# What a gzipped snapshot may decompress to (protowire's gzip budget): pickles compress
# better than protobuf (measured at gzip -9: the public and demo snapshots 11-37x), so
# 256x its size, at least 64 MiB; a 0.25 MB bomb then stops at 64 MiB.
GZIP_BUDGET = {"ratio": 256, "floor": 64 << 20, "seen": "real snapshots compress 11-37x"}

# The first line of every git-LFS pointer file (https://git-lfs.com/spec/v1).
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def _decode_container(data: bytes, path: str) -> tuple[str, bytes]:
    """-> (kind, payload): kind "pickle" (payload = pickle bytes) or "json" (text bytes)."""
    if data[:2] == b"\x1f\x8b":
        data = protowire.gunzip(data, path, **GZIP_BUDGET)
    if not data:
        raise BadInput(f"{path}: not a snapshot: the file is empty", file=path)
    if data[:1] == b"\x80":
        return "pickle", data
    head = data[:4096].lstrip()
    if head[:1] in (b"{", b"["):
        return "json", data
    low = head[:4096].lower()
    if low.startswith((b"<!doctype", b"<html")) or b"<script" in low or b"<html" in low:
        m = _HTML_B64.search(data)
        if not m:
            raise BadInput(f"{path}: not a snapshot: an HTML file without an embedded "
                           "_memory_viz snapshot (no \"base64\" field)", file=path)
        blob = re.sub(rb"\\n|\s", b"", m.group(1))
        try:
            payload = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as e:
            raise BadInput(f"{path}: not a snapshot: the embedded base64 is broken ({e})",
                           file=path) from None
        if payload[:1] != b"\x80":
            raise BadInput(f"{path}: not a snapshot: the embedded data is not a pickle",
                           file=path)
        return "html", payload
    if head.startswith(LFS_POINTER):
        # A clone without `git lfs pull` leaves this text file (the LFS spec's first line)
        # where the snapshot should be: say so, the fix is to fetch the object.
        size = re.search(rb"^size (\d+)", head, re.M)
        real = f" of {int(size.group(1)):,} bytes" if size else ""
        raise BadInput(f"{path}: a git-LFS pointer, not a snapshot: the file stands for an object{real} "
                       "kept by git-LFS (run `git lfs pull` to fetch it)", file=path)
    raise BadInput(f"{path}: not a snapshot: neither a pickle, JSON nor a _memory_viz HTML "
                   "file (unrecognised first bytes)", file=path)


def _pickle_stream(raw: IO[bytes] | bytes, path: str) -> IO[bytes] | None:
    """A seekable file holding a (possibly gzipped) pickle -> a stream positioned at its
    start; anything else -> None (after rewinding), to be read whole."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return None
    try:
        if not raw.seekable():
            return None
        start = raw.tell()
        head = raw.read(2)
        raw.seek(start)
        if head[:1] == b"\x80":
            return raw
        if head == b"\x1f\x8b":
            g = gzip.GzipFile(fileobj=raw, mode="rb")
            try:
                inner = g.read(1)
            except (OSError, EOFError, zlib.error):
                inner = b""
            raw.seek(start)
            if inner == b"\x80":
                try:
                    size = raw.seek(0, 2) - start
                finally:
                    raw.seek(start)
                return protowire.GzipBudget(raw, path, size, **GZIP_BUDGET)
    except (OSError, ValueError, AttributeError):
        try:
            raw.seek(start)
        except Exception:  # noqa: BLE001 - fall back to reading it whole
            return None
    return None


def _unpickle_stream(stream: IO[bytes], path: str, size: int | None = None) -> tuple[Any, int | None]:
    """The C unpickler over ``stream``, its bytes checked by :class:`safe_pickle.Prescan`
    as they reach it (``size``: the pickle's bytes, when known)."""
    head = stream.read(2)
    protocol = head[1] if len(head) > 1 else None
    if protocol is not None and not 2 <= protocol <= 5:
        raise BadInput(f"{path}: not a snapshot: unsupported pickle protocol {protocol}", file=path)
    checked = safe_pickle.Checked(streams.Prefixed(head, stream), safe_pickle.Prescan(path, size))
    buffered = io.BufferedReader(checked, 1 << 20)
    obj = _load(buffered, path)
    while True:  # what follows STOP (read ahead into the buffer, then the rest)
        rest = buffered.read(1 << 20)
        if not rest:
            break
        if rest.strip(b"\x00"):
            raise BadInput(f"{path}: not a snapshot: data after the pickle's end", file=path)
    return obj, protocol


def _load(f, path: str) -> Any:
    u = _NoGlobalsUnpickler(f)
    u.path = path
    try:
        return u.load()
    except (BadInput, safe_pickle.Reroute):
        raise
    except EOFError:
        raise BadInput(f"{path}: truncated: the pickle ends before its STOP opcode", file=path) from None
    except RecursionError:
        raise BadInput(f"{path}: not a snapshot: the pickle nests too deeply", file=path) from None
    except MemoryError:
        raise BadInput(f"{path}: not a snapshot: the pickle declares impossible sizes", file=path) from None
    except (OSError, zlib.error) as e:
        raise BadInput(f"{path}: not a snapshot: broken gzip stream ({e})", file=path) from None
    except Exception as e:  # noqa: BLE001 - UnpicklingError, ValueError, TypeError, KeyError...
        reason = str(e) or type(e).__name__
        if "truncated" in reason or "ran out" in reason.lower():
            raise BadInput(f"{path}: truncated: {reason}", file=path) from None
        raise BadInput(f"{path}: not a snapshot: corrupt pickle ({reason})", file=path) from None


def _unpickle(payload: bytes, path: str) -> tuple[Any, int | None]:
    protocol = payload[1] if len(payload) > 1 else None
    if protocol is not None and not 2 <= protocol <= 5:
        raise BadInput(f"{path}: not a snapshot: unsupported pickle protocol {protocol}",
                       file=path)
    safe_pickle.Prescan(path, len(payload)).feed(payload, final=True)
    buf = io.BytesIO(payload)
    obj = _load(buf, path)
    rest = payload[buf.tell():]
    if rest.strip(b"\x00"):
        raise BadInput(f"{path}: not a snapshot: {len(rest)} bytes of data after the pickle's end",
                       file=path)
    return obj, protocol


# -- normalizing ----------------------------------------------------------------------


class _Tables:
    def __init__(self) -> None:
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self.frame_rows: list[tuple[int, int, int]] = []
        self._frame_ids: dict[tuple[int, int, int], int] = {}
        self._frame_by_obj: dict[int, int] = {}
        self.stacks: list[tuple[int, ...]] = [()]
        self._stack_ids: dict[tuple[int, ...], int] = {(): 0}
        self._stack_by_obj: dict[int, int] = {}
        self._stack_by_frame_objs: dict[tuple[int, ...], int] = {}
        self._keep: list = []  # objects whose id() is cached stay alive while cached

    def string(self, s: Any) -> int:
        if not isinstance(s, str):
            s = _text(s)
        i = self._string_ids.get(s)
        if i is None:
            i = self._string_ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def frame(self, f: Any, where: str) -> int:
        k = id(f)
        i = self._frame_by_obj.get(k)
        if i is not None:
            return i
        if not isinstance(f, dict):
            raise _Wrong(f"{where}: a frame is a {type(f).__name__}, not a dict")
        row = (self.string(f.get("filename", "")), _int(f.get("line", 0), where + ".line"),
               self.string(f.get("name", "")))
        i = self._frame_ids.get(row)
        if i is None:
            i = self._frame_ids[row] = len(self.frame_rows)
            self.frame_rows.append(row)
        self._frame_by_obj[k] = i
        self._keep.append(f)
        return i

    def stack(self, frames: Any, where: str) -> int:
        if not frames:
            return 0
        k = id(frames)
        i = self._stack_by_obj.get(k)
        if i is not None:
            return i
        if not isinstance(frames, (list, tuple)):
            raise _Wrong(f"{where}: frames is a {type(frames).__name__}, not a list")
        # Frame dicts are shared across the file, and a traceback's list is often new
        # while its frames are not: key on the frames' identities first.
        by_ids = tuple(map(id, frames))
        i = self._stack_by_frame_objs.get(by_ids)
        if i is not None:
            self._stack_by_obj[k] = i
            self._keep.append(frames)
            return i
        t = tuple(map(self._frame_by_obj.get, by_ids))
        if None in t:
            t = tuple([self.frame(f, where) for f in frames])
        i = self._stack_ids.get(t)
        if i is None:
            i = self._stack_ids[t] = len(self.stacks)
            self.stacks.append(t)
        self._stack_by_frame_objs[by_ids] = i
        self._stack_by_obj[k] = i
        self._keep.append(frames)
        return i

    def forget_objects(self) -> None:
        self._frame_by_obj.clear()
        self._stack_by_obj.clear()
        self._stack_by_frame_objs.clear()
        self._keep.clear()


class _Wrong(Exception):
    """Wrong structure; turned into BadInput with the path."""


# repr() of a value from the file, for messages: a few levels and items only (a full repr
# of a shared-reference DAG is exponential, of a deep one a RecursionError).
_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 3, 40, 40
_BRIEF.maxdict = _BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxset = _BRIEF.maxfrozenset = 4


def _brief(v: Any) -> str:
    try:
        return _BRIEF.repr(v)
    except ValueError:  # an int of more than 4,300 digits (sys.int_info.default_max_str_digits)
        return f"<a {v.bit_length()}-bit integer>" if isinstance(v, int) else f"<a {type(v).__name__}>"


def _text(v: Any) -> str:
    """A string from the file as kept (anything else as a bounded repr)."""
    if type(v) is str:
        return v
    return "" if v is None else _brief(v)


def _int(v: Any, where: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Wrong(f"{where} is {type(v).__name__} {_brief(v)}, not a number")
    if type(v) is float and not math.isfinite(v):
        raise _Wrong(f"{where} is {v}, not a finite number")
    return int(v)


def _code(names: list[str], value: Any) -> int:
    value = _text(value)
    try:
        return names.index(value)
    except ValueError:
        names.append(value)
        return len(names) - 1


_INT64_MAX = 2**63 - 1


def _wrap64(v: int) -> int:
    """The signed value of ``v``'s 64 low bits."""
    v &= 2**64 - 1
    return v - 2**64 if v > _INT64_MAX else v


def _col(values: list, dtype) -> np.ndarray:
    try:
        return np.array(values, dtype=dtype)
    except OverflowError:
        # CUDA addresses/streams fit int64; anything wider is wrapped to its 64 low bits.
        return np.array([[_wrap64(int(x)) for x in v] if isinstance(v, tuple) else _wrap64(int(v))
                         for v in values], dtype=dtype)


_INT = {int}
_INT_OR_NONE = {int, type(None)}
_STR_OR_NONE = {str, type(None)}


def _convert_trace(device: int, entries: Any, t: _Tables, action_names: list[str],
                   ooms: list[dict], offset: int = 0) -> DeviceTrace:
    """Entries ``offset``... of one device's trace -> columns (``device`` -1: not known yet).

    Column by column with comprehensions (each a C-level loop), which is 3-4x faster
    than entry by entry; a trace with anything unusual (a missing action, a float, a
    non-dict) goes through ``_convert_trace_checked``, which names what is wrong."""
    where = f"device_traces[{device if device >= 0 else '?'}]"
    if not isinstance(entries, (list, tuple)):
        raise _Wrong(f"{where} is a {type(entries).__name__}, not a list")
    slow = (where, entries, t, action_names, ooms, offset, device)
    if set(map(type, entries)) - {dict}:
        return _convert_trace_checked(*slow)
    codes = {name: i for i, name in enumerate(action_names)}

    def column(key: str, absent=None) -> list:
        try:  # every entry has the key (the usual case): one C-level pass
            return list(map(itemgetter(key), entries))
        except KeyError:
            return [e.get(key, absent) for e in entries]

    try:
        action = list(map(codes.get, column("action")))
    except TypeError:  # an unhashable action: named by the checked path
        return _convert_trace_checked(*slow)
    cols = {k: column(k, 0) for k in ("addr", "size", "stream")}
    time_us = column("time_us")
    cc = column("compile_context")
    um = column("user_metadata")
    if (None in action or any(set(map(type, c)) - _INT for c in cols.values())
            or set(map(type, time_us)) - _INT_OR_NONE or set(map(type, cc)) - _STR_OR_NONE
            or set(map(type, um)) - _STR_OR_NONE):
        return _convert_trace_checked(*slow)
    tstack = t.stack
    stack = [tstack(v, where) if v else 0 for v in column("frames")]
    known = t._string_ids.get
    string = t.string

    def strings(values: list) -> np.ndarray:
        ids = [-1 if v is None else known(v) for v in values]
        if None in ids:  # intern the new ones, then look all up again
            for v in {v for v, i in zip(values, ids) if i is None}:
                string(v)
            ids = [-1 if v is None else known(v) for v in values]
        return np.array(ids, np.int32)

    n = len(entries)
    out = DeviceTrace(
        device, np.array(action, np.uint8), _col(cols["addr"], np.int64), _col(cols["size"], np.int64),
        _col(cols["stream"], np.int64),
        _col(time_us if None not in time_us else [NO_TIME if v is None else v for v in time_us], np.int64),
        np.array(stack, np.int32), strings(cc), strings(um), np.full(n, -1, np.int64))
    oom = codes["oom"]
    for i in np.flatnonzero(out.action == oom).tolist():
        df = _wrap64(_int(entries[i].get("device_free", 0), f"{where}[{offset + i}].device_free"))
        out.device_free[i] = df
        ooms.append({"device": device, "index": offset + i, "size": int(out.size[i]), "device_free": df,
                     "stream": int(out.stream[i]), "time_us": int(out.time_us[i]), "stack": int(out.stack[i])})
    return out


def _convert_trace_checked(where: str, entries: Any, t: _Tables, action_names: list[str],
                           ooms: list[dict], offset: int, device: int) -> DeviceTrace:
    """``_convert_trace`` entry by entry: converts what can be (floats, unknown actions),
    names the entry and key of what cannot."""
    n = len(entries)
    # Columns are preallocated: a Python list per column would hold one int object per
    # entry next to the unpickled tree, which is the load's memory peak.
    action = np.empty(n, np.uint8)
    addr = np.zeros(n, np.int64)
    size = np.zeros(n, np.int64)
    stream = np.zeros(n, np.int64)
    time_us = np.full(n, NO_TIME, np.int64)
    stack = np.zeros(n, np.int32)
    cc = np.full(n, -1, np.int32)
    um = np.full(n, -1, np.int32)
    dfree = np.full(n, -1, np.int64)
    codes = {name: i for i, name in enumerate(action_names)}
    string = t.string
    tstack = t.stack
    oom = codes["oom"]
    for i, e in enumerate(entries):
        if type(e) is not dict:
            if e is safe_pickle.CONSUMED:
                raise _Wrong(f"{where}[{offset + i}] refers back to an entry of another trace list, "
                             "which the streaming reader does not keep")
            raise _Wrong(f"{where}[{offset + i}] is a {type(e).__name__}, not a dict")
        a = e.get("action")
        c = codes.get(a) if type(a) is str else None
        if c is None:
            if not isinstance(a, str):
                raise _Wrong(f"{where}[{offset + i}] has no action" if a is None else
                             f"{where}[{offset + i}].action is {type(a).__name__} {_brief(a)}, not a string")
            c = codes[a] = _code(action_names, a)
            if c > 255:
                raise _Wrong(f"{where}: more than 255 distinct actions")
        action[i] = c
        try:
            v = e.get("addr", 0)
            addr[i] = v if type(v) is int else _int(v, f"{where}[{offset + i}].addr")
            v = e.get("size", 0)
            size[i] = v if type(v) is int else _int(v, f"{where}[{offset + i}].size")
            v = e.get("stream", 0)
            stream[i] = v if type(v) is int else _int(v, f"{where}[{offset + i}].stream")
        except OverflowError:  # CUDA addresses/streams fit int64; wrap anything wider
            addr[i], size[i], stream[i] = (_wrap64(_int(e.get(k, 0), f"{where}[{offset + i}].{k}"))
                                           for k in ("addr", "size", "stream"))
        v = e.get("time_us")
        if v is not None:
            time_us[i] = _wrap64(v if type(v) is int else _int(v, f"{where}[{offset + i}].time_us"))
        v = e.get("frames")
        if v:
            stack[i] = tstack(v, f"{where}[{offset + i}].frames")
        v = e.get("compile_context")
        if v is not None:
            cc[i] = string(v)
        v = e.get("user_metadata")
        if v is not None:
            um[i] = string(v)
        if c == oom:
            df = _wrap64(_int(e.get("device_free", 0), f"{where}[{offset + i}].device_free"))
            dfree[i] = df
            ooms.append({"device": device, "index": offset + i, "size": int(size[i]), "device_free": df,
                         "stream": int(stream[i]), "time_us": int(time_us[i]), "stack": int(stack[i])})
    return DeviceTrace(device, action, addr, size, stream, time_us, stack, cc, um, dfree)


def _convert_segments(segs: Any, t: _Tables, state_names: list[str]) -> tuple[Segments, Blocks]:
    if not isinstance(segs, (list, tuple)):
        raise _Wrong(f"segments is a {type(segs).__name__}, not a list")
    sc: dict[str, list] = {k: [] for k in (
        "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
        "stream", "segment_type", "pool_id", "is_expandable", "stack", "block_start",
        "block_count")}
    bc: dict[str, list] = {k: [] for k in (
        "segment", "address", "size", "requested_size", "state", "stack", "address_computed")}
    for si, s in enumerate(segs):
        w = f"segments[{si}]"
        if not isinstance(s, dict):
            raise _Wrong(f"{w} is a {type(s).__name__}, not a dict")
        seg_addr = _int(s.get("address", 0), w + ".address")
        for k in ("device", "total_size", "allocated_size", "active_size", "requested_size", "stream"):
            sc[k].append(_int(s.get(k, 0), f"{w}.{k}"))
        sc["address"].append(seg_addr)
        sc["segment_type"].append(t.string(s.get("segment_type", "")))
        pool = s.get("segment_pool_id")
        if pool is None:
            sc["pool_id"].append((-1, -1))
        elif isinstance(pool, (list, tuple)) and len(pool) == 2:
            sc["pool_id"].append((_int(pool[0], w + ".segment_pool_id"), _int(pool[1], w + ".segment_pool_id")))
        else:
            sc["pool_id"].append((_int(pool, w + ".segment_pool_id"), 0))
        sc["is_expandable"].append(bool(s.get("is_expandable", False)))
        sc["stack"].append(t.stack(s.get("frames"), w + ".frames"))
        blocks = s.get("blocks", []) or []
        if not isinstance(blocks, (list, tuple)):
            raise _Wrong(f"{w}.blocks is a {type(blocks).__name__}, not a list")
        sc["block_start"].append(len(bc["address"]))
        sc["block_count"].append(len(blocks))
        offset = seg_addr
        for bi, b in enumerate(blocks):
            wb = f"{w}.blocks[{bi}]"
            if not isinstance(b, dict):
                raise _Wrong(f"{wb} is a {type(b).__name__}, not a dict")
            bsize = _int(b.get("size", 0), wb + ".size")
            hist = b.get("history")
            first = hist[0] if isinstance(hist, (list, tuple)) and hist and isinstance(hist[0], dict) else None
            if "address" in b:
                baddr = _int(b["address"], wb + ".address")
                bc["address_computed"].append(False)
            else:
                baddr = offset
                bc["address_computed"].append(True)
            offset += bsize
            if "requested_size" in b:
                req = _int(b["requested_size"], wb + ".requested_size")
            elif first is not None and "real_size" in first:
                req = _int(first["real_size"], wb + ".history[0].real_size")
            else:
                req = bsize
            frames = b.get("frames")
            if frames is None and first is not None:
                frames = first.get("frames")
            bc["segment"].append(si)
            bc["address"].append(baddr)
            bc["size"].append(bsize)
            bc["requested_size"].append(req)
            bc["state"].append(_code(state_names, b.get("state", "")))
            bc["stack"].append(t.stack(frames, wb + ".frames"))
    i64 = np.int64
    segments = Segments(
        device=_col(sc["device"], i64), address=_col(sc["address"], i64),
        total_size=_col(sc["total_size"], i64), allocated_size=_col(sc["allocated_size"], i64),
        active_size=_col(sc["active_size"], i64), requested_size=_col(sc["requested_size"], i64),
        stream=_col(sc["stream"], i64), segment_type=np.array(sc["segment_type"], np.int32),
        pool_id=_col(sc["pool_id"], i64).reshape(-1, 2),
        is_expandable=np.array(sc["is_expandable"], bool), stack=np.array(sc["stack"], np.int32),
        block_start=np.array(sc["block_start"], i64), block_count=np.array(sc["block_count"], i64))
    blocks = Blocks(
        segment=np.array(bc["segment"], i64), address=_col(bc["address"], i64),
        size=_col(bc["size"], i64), requested_size=_col(bc["requested_size"], i64),
        state=np.array(bc["state"], np.uint8), stack=np.array(bc["stack"], np.int32),
        address_computed=np.array(bc["address_computed"], bool))
    return segments, blocks


def _keys(items) -> list[str]:
    seen: dict[str, None] = {}
    for it in items:
        if isinstance(it, dict):
            for k in it:
                seen.setdefault(_text(k), None)
    return sorted(seen)


def _clean(s: str) -> str:
    """``s`` with lone surrogates (which the unpickler's "surrogatepass" and JSON's
    ``\\ud800`` escapes let through, and which no UTF-8 encoder takes) written as
    ``\\udXXX``."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _clean_all(strings: list[str]) -> list[str]:
    try:  # the usual case: one pass in C
        "".join(strings).encode("utf-8")
        return strings
    except UnicodeEncodeError:
        return [_clean(x) for x in strings]


_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1


def _verbatim(obj: Any, what: str, path: str) -> Any:
    """A field kept as the file has it (allocator settings, annotations), as a bounded,
    JSON-ready tree: dicts with string keys, lists, clean strings, ints that fit 64 bits,
    finite floats (others as strings). Refuses nesting beyond :data:`MAX_DEPTH`, a
    container inside itself, and more than :data:`MAX_VERBATIM_VALUES` values or
    :data:`MAX_VERBATIM_CHARS` characters, shared references counted each time they are
    reached (the tree the views serialize). Recursive: at most MAX_DEPTH frames."""
    budget = [MAX_VERBATIM_VALUES, MAX_VERBATIM_CHARS]
    on_path: set[int] = set()

    def over(limit: str) -> TooLarge:
        return TooLarge(f"{path}: refused: {what} holds more than {limit}, shared references counted each "
                        "time they are reached (a legit one holds tens)", file=path)

    def text(v: str) -> str:
        budget[1] -= len(v)
        if budget[1] < 0:
            raise over(f"{MAX_VERBATIM_CHARS:,} characters")
        return _clean(v)

    def copy(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise over(f"{MAX_VERBATIM_VALUES:,} values")
        t = type(v)
        if t is str:
            return text(v)
        if v is None or t is bool:
            return v
        if t is int:
            return v if _I64_MIN <= v <= _U64_MAX else text(_text(v) if v.bit_length() < 1000 else
                                                            f"<a {v.bit_length()}-bit integer>")
        if t is float:
            return v if math.isfinite(v) else str(v)
        if t in (dict, list, tuple):
            if depth >= MAX_DEPTH:
                raise TooLarge(f"{path}: refused: {what} nests deeper than {MAX_DEPTH} levels "
                               f"(limit: {MAX_DEPTH}; a snapshot nests about 9)", file=path)
            if id(v) in on_path:
                raise BadInput(f"{path}: not a snapshot: {what} contains itself", file=path)
            on_path.add(id(v))
            if t is dict:
                out = {text(k) if type(k) is str else text(_text(k)): copy(x, depth + 1) for k, x in v.items()}
            else:
                out = [copy(x, depth + 1) for x in v]
            on_path.discard(id(v))
            return out
        if t in (bytes, bytearray):
            return text(bytes(v[:MAX_VERBATIM_CHARS]).decode("utf-8", "replace"))
        return text(_brief(v))

    return copy(obj, 0)


# A trace entry as the pickler writes it: EMPTY_DICT MEMO MARK (key value)* SETITEMS,
# with a FRAME (protocol 4+) possibly after any complete object (C pickler
# ``_Pickler_OpcodeBoundary``), so before the entry too;
# every key a reference to a memoized string ("action", "addr", ... are written once per
# file), every value a reference, an int, None/True/False, or a new list of references
# (the frames of a new traceback: EMPTY_LIST MEMO [MARK refs APPENDS | ref APPEND]*).
# Entries with anything else (a new string, a new frame dict, a float) are left to the
# opcode-by-opcode reader.
_F = safe_pickle.FRAME + b"?"
_NEW_REFS = (rb"\]" + safe_pickle.MEMO + rb"(?:" + _F + rb"\((?:" + _F + safe_pickle.REF + rb")+" + _F + rb"e|"
             + _F + safe_pickle.REF + _F + rb"a)*")
_ENTRY = re.compile(
    _F + rb"\}(" + safe_pickle.MEMO + rb")" + _F + rb"\(((?:" + _F + safe_pickle.REF + _F
    + rb"(?:" + safe_pickle.REF + b"|" + safe_pickle.INT + rb"|N|\x88|\x89|" + _NEW_REFS + rb"))*)" + _F + rb"u")
# The tokens of an entry's (key value)* part; FRAME tokens match with every group empty.
_PAIR_TOKEN = re.compile(
    rb"(" + safe_pickle.REF + rb")|(" + safe_pickle.INT + rb")|(N|\x88|\x89)|(" + _NEW_REFS + rb")|" + safe_pickle.FRAME)
_BATCH_END = re.compile(_F + rb"e")
_REF_RUN = re.compile(safe_pickle.REF)
_CONSTANTS = {b"N": None, b"\x88": True, b"\x89": False}


_LIST_HEAD = re.compile(rb"\](" + safe_pickle.MEMO + rb")")
_LIST_TOKEN = re.compile(rb"(" + safe_pickle.REF + rb")|\(|e|a|" + safe_pickle.FRAME)
_J_RUN = re.compile(rb"\((?:j" + safe_pickle.ANY + rb"{4})+e")
_J_DTYPE = np.dtype([("op", "u1"), ("index", "<u4")])
_SEEN_LISTS = 200_000  # distinct tracebacks remembered by their bytes (a few tens of MB at most)


_VALUE = (rb"(" + safe_pickle.REF + b"|" + safe_pickle.INT + rb"|N|\x88|\x89|" + _NEW_REFS + rb")")
_MAX_LAYOUTS = 8
_BULK = 256  # entries decoded together (see _TraceSink._bulk)
_INT_OPS = frozenset(b"KMJ\x8a")


class _Unusual(Exception):
    """An entry the column-by-column decoder leaves to the entry-by-entry one."""


def _layout_regex(key_toks: list[bytes], framed: bool = True) -> re.Pattern:
    """An entry whose keys are exactly these references, in this order: one group for its
    MEMO token, then one per value. Pickles below protocol 4 have no FRAME opcodes: their
    expression leaves out the optional FRAMEs, which cost a quarter of the matching."""
    f = _F if framed else b""
    value = _VALUE if framed else _VALUE.replace(_F, b"")
    pairs = b"".join(f + re.escape(k) + f + value for k in key_toks)
    return re.compile(f + rb"\}(" + safe_pickle.MEMO + rb")" + f + rb"\(" + pairs + f + rb"u")


def _ref(tok: bytes) -> int:
    return tok[1] if len(tok) == 2 else int.from_bytes(tok[1:], "little")


def _value(tok: bytes, memo: dict, puts: list, seen: dict):
    """The value of one ``_VALUE`` token (new lists' memo puts queued in ``puts``)."""
    op = tok[0]
    if op == 0x68:  # h: a reference
        return memo[tok[1]]
    if op == 0x4B:  # K
        return tok[1]
    if op == 0x6A:  # j: a reference
        return memo[int.from_bytes(tok[1:], "little")]
    if op == 0x5D:  # ]: a new list of references
        memo_tok, out = _new_refs(tok, memo, seen)
        puts.append((memo_tok, out))
        return out
    if op == 0x8A:  # LONG1
        return int.from_bytes(tok[2:], "little", signed=True)
    if len(tok) == 1:
        return _CONSTANTS[tok]
    return safe_pickle.int_token(tok)


def _put_index(tok: bytes) -> int:
    """The memo index of a BINPUT / LONG_BINPUT token."""
    return tok[1] if tok[0] == 0x71 else int.from_bytes(tok[1:5], "little")


def _new_refs(b: bytes, memo: dict, seen: dict) -> tuple[bytes, list]:
    """The list a ``_NEW_REFS`` token builds, with the MEMO token that puts it.

    Every allocation writes its traceback as a new list, but the allocations of one
    call site write the same bytes (references to the same frame dicts): ``seen`` maps
    those bytes to the list already built. (A pickler never reuses a memo slot, so equal
    bytes are equal lists.)"""
    head = _LIST_HEAD.match(b)
    body = b[head.end():]
    out = seen.get(body)
    if out is None:
        if _J_RUN.fullmatch(body):  # one batch of LONG_BINGETs: decode them at once
            out = list(map(memo.__getitem__, np.frombuffer(body[1:-1], _J_DTYPE)["index"].tolist()))
        else:
            out = [memo[t[1] if len(t) == 2 else int.from_bytes(t[1:], "little")]
                   for t in _LIST_TOKEN.findall(body) if t]
        if len(seen) < _SEEN_LISTS:
            seen[body] = out
    return head.group(1), out


def _plain(entry: dict) -> bool:
    """Whether an entry has only the keys and types ``_convert_trace`` takes as they are."""
    for k, v in entry.items():
        t = type(v)
        if k in ("addr", "size", "stream", "time_us"):
            if t is not int and not (v is None and k == "time_us"):
                return False
        elif k == "frames":
            if t is not list and v is not None:
                return False
        elif k in ("compile_context", "user_metadata"):
            if t is not str and v is not None:
                return False
        elif k != "action":
            return False  # device_free and keys we do not know: the full path decides
    return True


class _TraceSink(safe_pickle.BatchReader):
    """Converts trace entries to columns batch by batch while :mod:`safe_pickle` reads
    them (its ``sink``), so the entries never exist all at once; ``normalize`` then
    finds each device's columns by the identity of its (empty) trace list.

    Once a list is known to be a trace (its first batch went through ``__call__``), its
    later batches are offered to ``read``, which tokenizes entries with ``_ENTRY`` and
    writes their columns directly, without building the dicts: the opcode-by-opcode
    reader is the slow part of streaming."""

    def __init__(self, path: str = "", framed: bool = True) -> None:
        self.path = path
        self.framed = framed  # protocol 4+: FRAME opcodes may sit between objects
        self.tables = _Tables()
        self.action_names = list(ACTIONS)
        self.ooms: list[dict] = []
        self.parts: dict[int, list[DeviceTrace]] = {}
        self.counts: dict[int, int] = {}
        self.entry_keys: dict[str, None] = {}
        self._lists: list = []  # the trace lists, alive so their ids stay theirs
        self._oom_lists: list[int] = []  # id of the trace list of each oom event
        self.lists: set[int] = set()  # BatchReader: the trace lists, by id
        self._codes = {name: i for i, name in enumerate(self.action_names)}
        self._seen_lists: dict[bytes, list] = {}
        self._layouts: list[tuple[re.Pattern, tuple[bytes, ...]]] = []

    def __call__(self, target: list, items: list) -> bool:
        first = items[0]
        if type(first) is not dict or "action" not in first:
            return False  # not a trace entry: an ordinary list
        key = id(target)
        parts = self.parts.get(key)
        if parts is None:
            parts = self.parts[key] = []
            self.counts[key] = 0
            self._lists.append(target)
            self.lists.add(key)
            for k in _keys(items):
                self.entry_keys.setdefault(k, None)
        n_ooms = len(self.ooms)
        try:
            parts.append(_convert_trace(-1, items, self.tables, self.action_names, self.ooms, self.counts[key]))
        except _Wrong as e:
            raise BadInput(f"{self.path}: not a snapshot: wrong structure: {e}", file=self.path) from None
        self._oom_lists += [key] * (len(self.ooms) - n_ooms)
        self.counts[key] += len(items)
        return True

    def read(self, target: list, buf: bytes, pos: int, limit: int, memo: dict) -> tuple[int, bool]:
        """Convert the entries of a batch that ``_ENTRY`` matches, up to the first one it
        does not, or that is unusual (an ``oom``, an action not seen yet, a value of
        another type): that one and the rest of the batch go to the opcode reader.

        An entry's keys come in one of a few orders (its *layout*); once seen, a layout
        gets its own expression with one group per value, so most entries cost one match."""
        if len(self._codes) != len(self.action_names):
            self._codes = {name: i for i, name in enumerate(self.action_names)}
        codes = self._codes
        tstack, string = self.tables.stack, self.tables.string
        oom = codes["oom"]
        layouts = self._layouts
        seen = self._seen_lists
        action, addr, size, stream, time_us, stack, cc, um = ([] for _ in range(8))
        closed = False
        try:
            while True:
                if layouts:  # a run of entries in the usual layout: decoded column by column
                    regex, names = layouts[0]
                    run, at = [], pos
                    while len(run) < _BULK:
                        m = regex.match(buf, at, limit)
                        if m is None:
                            break
                        run.append(m.groups())
                        at = m.end()
                    cols = self._bulk(run, names, memo) if len(run) > 1 else None
                    if cols is not None:
                        for out, col in zip((action, addr, size, stream, time_us, stack, cc, um), cols):
                            out.extend(col)
                        pos = at
                        continue
                puts = []  # memo puts wait until the entry is taken (see _value)
                entry = None
                for regex, names in layouts:
                    m = regex.match(buf, pos, limit)
                    if m is not None:
                        g = m.groups()
                        puts.append((g[0], safe_pickle.CONSUMED))  # the entry dict (see safe_pickle)
                        entry = dict(zip(names, [_value(v, memo, puts, seen) for v in g[1:]]))
                        break
                if entry is None:
                    m = _ENTRY.match(buf, pos, limit)
                    if m is None:
                        e = _BATCH_END.match(buf, pos, limit)
                        if e is not None:
                            pos, closed = e.end(), True
                        break
                    puts.append((m.group(1), safe_pickle.CONSUMED))
                    toks = [t for t in _PAIR_TOKEN.findall(m.group(2)) if t != ("", "", "", "")]
                    key_toks = [next(x for x in t if x) for t in toks[0::2]]
                    entry = {}
                    for k, t in zip(key_toks, toks[1::2]):
                        key = memo[_ref(k)]
                        if type(key) is not str:
                            raise TypeError  # the opcode reader checks what hashing it costs
                        entry[key] = _value(next(x for x in t if x), memo, puts, seen)
                    if len(layouts) < _MAX_LAYOUTS and all(len(k) <= 5 for k in key_toks):
                        # The key names are fixed with the layout: a pickler never reuses
                        # a memo slot, so the same reference always names the same key.
                        layouts.insert(0, (_layout_regex(key_toks, self.framed), tuple(entry)))
                c = codes.get(entry.get("action"))
                if c is None or c == oom or not _plain(entry):
                    break
                for tok, obj in puts:
                    memo[len(memo) if tok == b"\x94" else _put_index(tok)] = obj
                action.append(c)
                addr.append(entry.get("addr", 0))
                size.append(entry.get("size", 0))
                stream.append(entry.get("stream", 0))
                v = entry.get("time_us")
                time_us.append(NO_TIME if v is None else v)
                v = entry.get("frames")
                stack.append(tstack(v, "device_traces[?].frames") if v else 0)
                v = entry.get("compile_context")
                cc.append(-1 if v is None else string(v))
                v = entry.get("user_metadata")
                um.append(-1 if v is None else string(v))
                pos = m.end()
        except (KeyError, TypeError):
            pass  # a reference to a slot this entry puts, an unhashable key: the opcode reader decides
        except _Wrong as e:
            raise BadInput(f"{self.path}: not a snapshot: wrong structure: {e}", file=self.path) from None
        if action:
            key = id(target)
            n = len(action)
            self.parts[key].append(DeviceTrace(
                -1, np.array(action, np.uint8), _col(addr, np.int64), _col(size, np.int64),
                _col(stream, np.int64), _col(time_us, np.int64), np.array(stack, np.int32),
                np.array(cc, np.int32), np.array(um, np.int32), np.full(n, -1, np.int64)))
            self.counts[key] += n
        return pos, closed

    def _bulk(self, run: list[tuple], names: tuple, memo: dict) -> list[list] | None:
        """The columns of consecutive entries of one layout (``run``: their match groups),
        or None, with the memo as it was, when any of them is unusual (see ``read``).

        Values that repeat (actions, sizes, streams, strings) are decoded once per
        distinct token; only the tracebacks go entry by entry, since a new traceback's
        list is put in the memo where a later entry of the run may refer to it."""
        known = ("action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata")
        if "action" not in names or set(names) - set(known):
            return None
        cols = dict(zip(("memo", *names), zip(*run)))
        n = len(run)

        def decoded(key: str, kind: str, absent):
            toks = cols.get(key)
            if toks is None:
                return [absent] * n
            if kind == "int" and toks[0][0] == 0x8A and len(set(map(len, toks))) == 1 and 3 <= len(toks[0]) <= 10:
                # LONG1 of one length (addresses, timestamps): little-endian two's complement
                k = len(toks[0]) - 2
                raw = np.frombuffer(b"".join(toks), np.uint8).reshape(n, k + 2)
                if not (raw[:, 0] == 0x8A).all() or not (raw[:, 1] == k).all():
                    return None
                wide = np.zeros((n, 8), np.uint8)
                wide[:, :min(k, 8)] = raw[:, 2:2 + min(k, 8)]
                if k < 8:  # sign-extend
                    wide[raw[:, 1 + k] >= 0x80, k:] = 0xFF
                elif k > 8 and not ((raw[:, 10:] == 0) | (raw[:, 10:] == 0xFF)).all():
                    return None  # wider than int64: the entry path wraps it
                return wide.view("<i8").reshape(n).tolist()
            values = {}
            for t in set(toks):
                op = t[0]
                if kind == "int":
                    if op not in _INT_OPS:
                        return None
                    values[t] = safe_pickle.int_token(t)
                elif op == 0x68 or op == 0x6A:  # a reference to a string already read
                    v = memo.get(t[1] if op == 0x68 else int.from_bytes(t[1:], "little"))
                    if type(v) is not str:
                        return None
                    values[t] = v
                elif t == b"N" and absent is None:
                    values[t] = None
                else:
                    return None
            return list(map(values.__getitem__, toks))

        actions = decoded("action", "str", None)
        if actions is None:
            return None
        codes = self._codes
        action = list(map(codes.get, actions))
        if None in action or codes["oom"] in action:
            return None
        out = [action]
        for key in ("addr", "size", "stream"):
            out.append(decoded(key, "int", 0))
            if out[-1] is None:
                return None
        out.append(decoded("time_us", "int", NO_TIME))  # a None time: left to the entry path
        strs = [decoded(k, "str", None) for k in ("compile_context", "user_metadata")]
        if out[-1] is None or None in strs:
            return None
        # Tracebacks and the memo, entry by entry, undone if one is unusual.
        memo_toks = cols["memo"]
        sequential = memo_toks.count(b"\x94") == n  # protocol 4+: every put is MEMOIZE
        first_slot = len(memo)
        written: list[tuple[int, Any]] = []  # explicit slots: (slot, value before)
        missing = object()
        tstack, seen, by_obj = self.tables.stack, self._seen_lists, self.tables._stack_by_obj
        frames = cols.get("frames")
        stack = []
        consumed = safe_pickle.CONSUMED

        def put(tok: bytes, obj) -> None:  # an explicit slot (BINPUT / LONG_BINPUT)
            slot = tok[1] if tok[0] == 0x71 else int.from_bytes(tok[1:5], "little")
            written.append((slot, memo.get(slot, missing)))
            memo[slot] = obj

        try:
            if not sequential:  # the entry dicts' slots, all at once (nothing refers to them)
                slots = [t[1] if t[0] == 0x71 else int.from_bytes(t[1:5], "little") for t in memo_toks]
                written.extend(zip(slots, map(memo.get, slots, repeat(missing))))
                memo.update(zip(slots, repeat(consumed)))
            for i in range(n):
                if sequential:
                    memo[len(memo)] = consumed  # the entry dict: nothing refers back to one
                if frames is None:
                    stack.append(0)
                    continue
                t = frames[i]
                op = t[0]
                if op == 0x68:
                    v = memo[t[1]]
                elif op == 0x6A:
                    v = memo[int.from_bytes(t[1:], "little")]
                elif op == 0x5D:
                    tok, v = _new_refs(t, memo, seen)
                    if sequential:
                        memo[len(memo)] = v
                    else:
                        put(tok, v)
                elif t == b"N":
                    v = None
                else:
                    raise _Unusual
                if not v:
                    if v is not None and type(v) is not list:
                        raise _Unusual
                    stack.append(0)
                elif type(v) is not list:
                    raise _Unusual
                else:
                    k = by_obj.get(id(v))
                    stack.append(k if k is not None else tstack(v, "device_traces[?].frames"))
        except (_Unusual, KeyError):
            if sequential:
                for slot in range(len(memo) - 1, first_slot - 1, -1):
                    del memo[slot]
            for slot, old in reversed(written):
                if old is missing:
                    del memo[slot]
                else:
                    memo[slot] = old
            return None
        string = self.tables.string
        cc, um = (list(map({v: -1 if v is None else string(v) for v in set(col)}.__getitem__, col)) for col in strs)
        return [*out, stack, cc, um]

    def trace(self, device: int, entries: list) -> DeviceTrace | None:
        """The columns streamed for this device's trace list, or None if none were."""
        parts = self.parts.pop(id(entries), None)
        if parts is None:
            return None
        if entries:  # a later batch did not look like trace entries and was kept
            raise _Wrong(f"device_traces[{device}]: entry {self.counts[id(entries)]} has no action")
        for oom, owner in zip(self.ooms, self._oom_lists):
            if owner == id(entries):
                oom["device"] = device
        cols = [np.concatenate([getattr(p, f.name) for p in parts])
                for f in fields(DeviceTrace) if f.name != "device"]
        return DeviceTrace(device, *cols)


def normalize(obj: Any, path: str, *, fmt: str = "pickle", protocol: int | None = None,
              progress=None, streamed: _TraceSink | None = None) -> Snapshot:
    """Turn a loaded snapshot dict into a :class:`Snapshot`. ``obj`` is consumed: its
    ``device_traces`` lists are released as they are converted. ``streamed`` holds the
    traces already converted while the pickle was read."""
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: not a snapshot: the top level is a {type(obj).__name__}, "
                       "not a dict with 'segments' and 'device_traces'", file=path)
    if "segments" not in obj and "device_traces" not in obj:
        raise BadInput(f"{path}: not a snapshot: no 'segments' or 'device_traces' key "
                       f"(keys: {sorted(map(str, obj))[:8]})", file=path)
    sink = streamed or _TraceSink()
    t, action_names, ooms = sink.tables, sink.action_names, sink.ooms
    state_names = list(STATES)
    try:
        segs = obj.get("segments", []) or []
        era = {"top": sorted(map(_text, obj)), "segment": _keys(segs) if isinstance(segs, list) else []}
        if isinstance(segs, list):
            era["block"] = _keys(b for s in segs if isinstance(s, dict)
                                 for b in (s.get("blocks") or []))
        segments, blocks = _convert_segments(segs, t, state_names)
        traces_in = obj.get("device_traces", []) or []
        if not isinstance(traces_in, list):
            raise _Wrong(f"device_traces is a {type(traces_in).__name__}, not a list")
        entry_keys = sink.entry_keys
        total = sum(len(x) for x in traces_in if isinstance(x, (list, tuple))) or 1
        done = 0
        traces = []
        for dev in range(len(traces_in)):
            entries = traces_in[dev]
            streamed_trace = sink.trace(dev, entries) if isinstance(entries, list) else None
            if streamed_trace is not None:
                traces.append(streamed_trace)
                continue
            if isinstance(entries, list) and entries:
                for k in _keys(entries[:1000]):
                    entry_keys.setdefault(k, None)
            traces.append(_convert_trace(dev, entries, t, action_names, ooms))
            done += len(traces[-1])
            traces_in[dev] = None  # release the converted Python objects now
            del entries
            if progress is not None:
                progress.update(done / total, "converting the trace to columns")
        era["trace_entry"] = sorted(entry_keys)
    except _Wrong as e:
        raise BadInput(f"{path}: not a snapshot: wrong structure: {e}", file=path) from None
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        # Whatever the checks above did not foresee is still the file's fault, not a 500.
        raise BadInput(f"{path}: not a snapshot: wrong structure ({type(e).__name__}: {_brief(str(e))})",
                       file=path) from None
    t.forget_objects()
    settings = obj.get("allocator_settings")
    annotations = obj.get("external_annotations") or []
    if settings is not None and not isinstance(settings, dict):
        raise BadInput(f"{path}: not a snapshot: allocator_settings is not a dict", file=path)
    if not isinstance(annotations, list):
        raise BadInput(f"{path}: not a snapshot: external_annotations is not a list", file=path)
    settings = None if settings is None else _verbatim(settings, "allocator_settings", path)
    annotations = _verbatim(annotations, "external_annotations", path)
    era = {k: _clean_all(v) for k, v in era.items()}
    overflow = any(bool(obj.get(k)) for k in OVERFLOW_KEYS)
    devices = {int(d) for d in np.unique(segments.device)} if len(segments) else set()
    devices.update(tr.device for tr in traces if len(tr))
    frames = np.array(t.frame_rows, np.int64).reshape(-1, 3)
    return Snapshot(
        path=path, format=fmt, pickle_protocol=protocol, strings=_clean_all(t.strings),
        frame_filename=frames[:, 0].astype(np.int32), frame_line=frames[:, 1].copy(),
        frame_name=frames[:, 2].astype(np.int32), stacks=t.stacks, traces=traces,
        segments=segments, blocks=blocks, devices=sorted(devices),
        allocator_settings=settings, external_annotations=annotations, oom_events=ooms,
        trace_overflow=overflow, era_keys=era, action_names=_clean_all(action_names),
        state_names=_clean_all(state_names))


def load_snapshot(raw: IO[bytes] | bytes, path: str,
                  progress=None, streaming: bool | None = None) -> Snapshot:
    """Read a snapshot (pickle / JSON / ``_memory_viz`` HTML, optionally gzip) safely.

    ``path`` names the file in errors. ``progress.update(fraction, message)`` is called while the traces
    are converted. Raises :class:`BadInput` for anything that is not a readable snapshot,
    and for any pickle that asks for a global or a persistent id (nothing is run).

    A pickle goes to the native one-pass reader first (``_pickle_scan``: 1 GB in ~3 s,
    peak ~0.55x the file), unless ``streaming`` is given or ``PROFSCOPE_NATIVE=0``;
    what it does not take goes to one of two readers, both refusing every global:
    Python's C unpickler, fast, but it builds the whole object tree first (4-5x the
    file), and :mod:`safe_pickle`, which converts trace entries as it reads them and
    peaks at 1.5-1.7x the file, at about 70 % of the speed. The tree is built when it
    fits in half the memory available now; otherwise (or when the size is unknown) the
    file is streamed. ``streaming`` forces one of these two.
    """
    with gc_paused():
        return _load_snapshot(raw, path, progress, streaming)


def _load_snapshot(raw: IO[bytes] | bytes, path: str, progress, streaming: bool | None) -> Snapshot:
    stream = _pickle_stream(raw, path)
    if stream is not None:  # a pickle file: unpickle straight from it, no copy in memory
        size = _size(raw)
        compressed = stream is not raw  # a GzipFile: the pickle is several times the file
        if streaming is None and native_enabled():
            start = raw.tell()
            snap = _native_pickle(stream, path, progress, None if compressed else size, fmt="pickle")
            if snap is not None:
                return snap
            raw.seek(start)  # something unusual: the readers below decide
            stream = _pickle_stream(raw, path)
        if streaming is None:
            streaming = size is None or _too_big_for_tree(size * (8 if compressed else 1))
        if streaming:
            return _stream_pickle(stream, path, progress, size, fmt="pickle")
        start = raw.tell()
        try:
            obj, protocol = _unpickle_stream(stream, path, None if compressed else size)
        except safe_pickle.Reroute:  # unusual tuples or sets: the reader that checks keys
            raw.seek(start)
            return _stream_pickle(_pickle_stream(raw, path), path, progress, size, fmt="pickle")
        return normalize(obj, path, fmt="pickle", protocol=protocol, progress=progress)
    data = _read_all(raw, path)
    kind, payload = _decode_container(data, path)
    del data
    if kind == "json":
        try:
            obj = json.loads(payload)
        except RecursionError:
            raise TooLarge(f"{path}: refused: the JSON nests deeper than Python's parser goes "
                           f"(limit: {MAX_DEPTH} levels are kept; a snapshot nests about 9)", file=path) from None
        except (ValueError, UnicodeDecodeError) as e:
            reason = str(e)
            what = "truncated" if "Expecting" in reason and "char" in reason and payload.rstrip()[-1:] not in (b"}", b"]") else "not a snapshot"
            raise BadInput(f"{path}: {what}: invalid JSON ({reason})", file=path) from None
        protocol = None
    elif streaming is None and native_enabled() and (
            snap := _native_pickle(io.BytesIO(payload), path, progress, len(payload), fmt=kind)) is not None:
        return snap
    elif streaming or (streaming is None and _too_big_for_tree(len(payload))):
        return _stream_pickle(io.BytesIO(payload), path, progress, len(payload), fmt=kind)
    else:
        try:
            obj, protocol = _unpickle(payload, path)
        except safe_pickle.Reroute:
            return _stream_pickle(io.BytesIO(payload), path, progress, len(payload), fmt=kind)
    del payload
    return normalize(obj, path, fmt=kind, protocol=protocol, progress=progress)


def _too_big_for_tree(pickle_bytes: int) -> bool:
    """Whether the C unpickler's object tree would need more than half the memory this
    machine has available (``MemAvailable`` in /proc/meminfo)."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return pickle_bytes * C_UNPICKLER_PEAK_PER_BYTE > available // 2


def _size(raw) -> int | None:
    """The size of a (compressed or not) file, for progress and the reader's choice."""
    try:
        return os.fstat(raw.fileno()).st_size
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    size = getattr(raw, "size", None)  # fsspec files (gcsfs) know theirs
    if isinstance(size, int):
        return size
    try:
        at = raw.tell()
        size = raw.seek(0, io.SEEK_END)
        raw.seek(at)
        return size
    except (AttributeError, OSError, ValueError):
        return None


def _stream_pickle(stream: IO[bytes], path: str, progress, size: int | None, fmt: str) -> Snapshot:
    """Read a pickle with :mod:`safe_pickle`, converting trace entries as they come."""
    head = stream.read(2)
    protocol = head[1] if len(head) > 1 and head[:1] == b"\x80" else None
    if protocol is not None and not 2 <= protocol <= 5:
        raise BadInput(f"{path}: not a snapshot: unsupported pickle protocol {protocol}", file=path)
    sink = _TraceSink(path, framed=protocol is None or protocol >= 4)
    read = None
    if progress is not None:
        def read(done: int) -> None:  # the file is read, and its entries converted, at once
            progress.update(min(done / size, 1.0) * 0.97 if size else None, "reading the snapshot")
    obj, rest = safe_pickle.load(streams.Prefixed(head, stream), path, sink=sink, progress=read)
    while rest:  # what follows STOP: the NUL padding of _memory_viz HTML only
        if rest.strip(b"\x00"):
            raise BadInput(f"{path}: not a snapshot: data after the pickle's end", file=path)
        rest = stream.read(1 << 20)
    return normalize(obj, path, fmt=fmt, protocol=protocol, progress=progress, streamed=sink)


# -- the one-pass native reader -------------------------------------------------------


def native_enabled() -> bool:
    """Whether pickles are read by the native one-pass reader (``_pickle_scan``) first:
    when it is built, unless ``PROFSCOPE_NATIVE=0`` (tests compare both paths)."""
    return _native is not None and os.environ.get("PROFSCOPE_NATIVE", "1") != "0"


#: Bytes handed to the native reader at a time: the file is never in memory whole.
NATIVE_CHUNK = 8 << 20


class _Fallback(Exception):
    """The native reader's result would not be the tree reader's: read the file that way."""


class _NativeSink:
    """The trace columns ``_pickle_scan`` wrote, handed to :func:`normalize` device by
    device (its ``streamed``), with the tables built as the tree reader builds them.

    The scanner numbers tracebacks (by the identities of their frame dicts) and
    compile_context / user_metadata strings in order of first appearance, and the rows
    of the trace lists come in file order; so the ids first seen in a device's rows are
    exactly those above the highest one seen before it, in order. Keying each of those
    once with :class:`_Tables` (a few thousand tracebacks, not millions of entries) gives
    the tables and ids ``_convert_trace`` gives: stacks of a device first, then its
    compile_context strings, then its user_metadata strings, new strings interned in the
    order of the set the tree reader builds of them (a set built from the same values in
    the same order iterates the same way). A device with an action not known before it
    goes, in the tree reader, entry by entry (``_convert_trace_checked``): its new
    tracebacks and strings are then keyed in the order of the entries, each entry's
    traceback before its strings."""

    def __init__(self, cols: dict, tables: dict, action_names: list[str]) -> None:
        self.tables = _Tables()
        self.action_names = list(ACTIONS)
        self.all_action_names = action_names  # the scanner's codes, in order of first appearance
        self.known_actions = len(ACTIONS)
        self.ooms: list[dict] = []
        self.entry_keys: dict[str, None] = {}
        self.cols = cols
        self.reps = tables["reps"]
        self.key_names = tables["key_names"]
        self.layouts = tables["layouts"]
        self.lists = dict(tables["row_lists"])
        self.rows = len(cols["action"])
        self.next_row = 0
        self.stack_map = np.zeros(len(self.reps) + 1, np.int32)
        self.stacks_done = 0
        self.strs = {k: (tables[k], np.full(len(tables[k]) + 1, -1, np.int32), [-1])
                     for k in ("compile_context", "user_metadata")}

    def trace(self, device: int, entries: list) -> DeviceTrace | None:
        rec = self.lists.pop(id(entries), None)
        if rec is None:
            if entries:  # entries the scanner did not take: the tree reader's order is its own
                raise _Fallback(f"device_traces[{device}]: entries not read as rows")
            return None
        lst, start, end = rec
        if lst is not entries or entries or start != self.next_row:
            raise _Fallback(f"device_traces[{device}]: not one run of rows in file order")
        self.next_row = end
        c = self.cols
        sl = slice(start, end)
        n = end - start
        where = f"device_traces[{device}]"
        t = self.tables
        for m in {self.layouts[i] for i in np.unique(c["layout"][start:start + 1000]).tolist()}:
            for bit, name in enumerate(self.key_names):
                if m >> bit & 1:
                    self.entry_keys.setdefault(_text(name), None)
        action = c["action"][sl]
        codes = int(action.max()) + 1 if n else 0
        checked = codes > self.known_actions  # an action first seen here: entry by entry
        if codes > len(self.action_names):
            self.action_names[len(self.action_names):] = self.all_action_names[len(self.action_names):codes]
        self.known_actions = max(self.known_actions, codes)
        loc = c["frames"][sl]
        new_ids = {"frames": range(self.stacks_done + 1, (int(loc.max()) if n else 0) + 1)}
        self.stacks_done = max(self.stacks_done, new_ids["frames"].stop - 1)
        for key, (strs, mapping, done) in self.strs.items():
            new_ids[key] = range(done[0] + 1, (int(c[key][sl].max()) if n else -1) + 1)
            done[0] = max(done[0], new_ids[key].stop - 1)
        known = t._string_ids
        cc_strs, um_strs = self.strs["compile_context"][0], self.strs["user_metadata"][0]
        if not checked:  # _convert_trace: the stacks, then each column's new strings as a set
            for j in new_ids["frames"]:
                self.stack_map[j] = t.stack(self.reps[j - 1], where)
            for strs, ids in ((cc_strs, new_ids["compile_context"]), (um_strs, new_ids["user_metadata"])):
                for v in {strs[j] for j in ids if strs[j] not in known}:
                    t.string(v)
        else:  # _convert_trace_checked: entry by entry, traceback, compile_context, user_metadata
            events = []
            for kind, key in enumerate(("frames", "compile_context", "user_metadata")):
                if len(new_ids[key]):
                    ids, first = np.unique(c[key][sl], return_index=True)
                    keep = ids >= new_ids[key].start
                    events += zip(first[keep].tolist(), repeat(kind), ids[keep].tolist())
            for _, kind, j in sorted(events):
                if kind == 0:
                    self.stack_map[j] = t.stack(self.reps[j - 1], where)
                else:
                    t.string((cc_strs if kind == 1 else um_strs)[j])
        stack = self.stack_map[loc]
        out = {}
        for key in ("compile_context", "user_metadata"):
            strs, mapping, _ = self.strs[key]
            ids = new_ids[key]
            mapping[ids.start + 1:ids.stop + 1] = [known[strs[j]] for j in ids]
            out[key] = mapping[c[key][sl] + 1]
        tr = DeviceTrace(device, action, c["addr"][sl], c["size"][sl], c["stream"][sl],
                         c["time_us"][sl], stack, out["compile_context"], out["user_metadata"],
                         c["device_free"][sl])
        for i in np.flatnonzero(tr.action == ACTIONS.index("oom")).tolist():
            self.ooms.append({"device": device, "index": i, "size": int(tr.size[i]),
                              "device_free": int(tr.device_free[i]), "stream": int(tr.stream[i]),
                              "time_us": int(tr.time_us[i]), "stack": int(tr.stack[i])})
        return tr

    def check_all_taken(self) -> None:
        if self.lists or self.next_row != self.rows:
            raise _Fallback("trace entries outside device_traces")


def _native_read(stream: IO[bytes], path: str, progress, size: int | None, fmt: str) -> Snapshot:
    """Read a pickle in one pass with ``_pickle_scan`` (see its header): the tree
    reader's containers for everything but the trace entries, which become columns as
    they are read. Raises ``_pickle_scan.Unusual`` or :class:`_Fallback` where the tree
    reader's result could differ (its errors included): then that reader reads it."""
    codes = {name: i for i, name in enumerate(ACTIONS)}
    scanner = _native.Scanner(codes, size or 0)
    first = stream.read(2)
    if len(first) < 2 or first[0] != 0x80:
        raise _Fallback("no PROTO opcode")
    protocol = first[1]
    done = scanner.feed(first)
    direct = hasattr(stream, "readinto")  # files and BytesIO: read into the scanner's buffer
    while not done:
        if direct:
            got, done = scanner.fill(stream, NATIVE_CHUNK)
        else:
            chunk = stream.read(NATIVE_CHUNK)
            got = len(chunk)
            done = got and scanner.feed(chunk)
        if not got:
            raise _Fallback("truncated")
        if progress is not None:
            progress.update(min(scanner.offset / size, 1.0) * 0.97 if size else None, "reading the snapshot")
    rest = scanner.rest()
    while rest:  # what follows STOP: the NUL padding of _memory_viz HTML only
        if rest.strip(b"\x00"):
            raise _Fallback("data after STOP")
        rest = stream.read(1 << 20)
    obj, cols, tables = scanner.result()
    del scanner
    sink = _NativeSink(cols, tables, list(codes))
    del cols, tables
    snap = normalize(obj, path, fmt=fmt, protocol=protocol, progress=progress, streamed=sink)
    sink.check_all_taken()
    if progress is not None:
        progress.update(1.0, "read the snapshot")
    return snap


def _native_pickle(stream: IO[bytes], path: str, progress, size: int | None, fmt: str) -> Snapshot | None:
    """:func:`_native_read`, or None where the other readers must decide (anything
    unusual, every error included: they name it)."""
    try:
        return _native_read(stream, path, progress, size, fmt)
    except Exception:  # noqa: BLE001 - Unusual, _Fallback, BadInput...: the tree reader decides
        return None
