"""A streaming unpickler for plain data that refuses every global.

Python's C unpickler builds a file's whole object tree before anything can look at it;
for a PyTorch memory snapshot that tree is 4-5x the file (a trace entry is a
~150-byte run of opcodes and a ~600-byte dict of boxed ints). :func:`load` runs the
same stack machine (``Lib/pickle.py`` ``_Unpickler``, opcode semantics from
``Lib/pickletools.py``) in Python, reading the file in 4 MiB pieces, and hands every
batch appended to a list (``MARK items APPENDS``; the pickler writes batches of 1000,
and ``APPEND`` for a lone last item) to ``sink(target, items)`` first. A sink that
consumes the batch returns True: the items are then neither appended nor kept in the
memo, so a trace of millions of entries never exists as Python objects all at once.
A sink that is also a :class:`BatchReader` may read whole batches itself from the bytes
(the snapshot reader tokenizes trace entries with regular expressions built from
:data:`REF`, :data:`INT`, :data:`MEMO`, :data:`FRAME`: the opcode loop here is the slow
part).

Only what ``pickle.dumps`` writes for dict, list, tuple, set, str, bytes, int, float,
bool and None (protocols 0-5) is understood. Every opcode that reaches for a global or
calls something (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``OBJ``, ``REDUCE``,
``NEWOBJ``, ``BUILD``, extension codes, persistent ids, out-of-band buffers) is
refused before anything happens, with the same words as ``refusal``.

Budgets (:data:`MAX_DEPTH`, :data:`MAX_FIELD_BYTES`, ...): a file may not cost more than
what is set out below, whichever reader reads it; going over is :class:`TooLarge` (413)
naming the file and the limit. Python's C unpickler, which the snapshot reader prefers
for speed, sizes some allocations from numbers in the file before it reads anything
else (its memo table from a ``LONG_BINPUT`` index), so :class:`Prescan` checks those
numbers in the bytes as they are handed to it (see :class:`Checked`).
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from profscope.errors import BadInput, TooLarge

# -- budgets: what one pickle may cost ------------------------------------------------
# Measured on every real snapshot at hand (the fixtures under shared/fixtures and the
# demo's three, 2023-2025 torch): containers nest 6-9 deep (snapshot > segments >
# segment > blocks > block > frames > frame), the longest string is 1,110 bytes, the
# memo holds 2-55 thousand objects, allocator_settings holds ~25 values and
# external_annotations up to 12 entries of 4, and tuples are flat pairs of ints
# (segment_pool_id).

#: Nesting of containers (MARKs open at once in the streaming reader; levels walked in a
#: value kept verbatim): legit snapshots nest 9 deep at most, so 64 leaves 7x room while
#: stopping a hostile file (``[[[...]]]`` a million deep) before anything recurses.
MAX_DEPTH = 64
#: Bytes of one string, bytes object, protocol-0 line or integer: legit strings are a few
#: hundred bytes (a frame's filename, a compile context); 64 MiB is far above any of them
#: and still keeps a declared length from sizing a huge buffer.
MAX_FIELD_BYTES = 64 << 20
#: Values in a field kept verbatim (allocator_settings, external_annotations), counting a
#: shared reference each time it is reached (``x = [x, x]`` 21 times is 2^22 values in
#: 212 bytes): legit ones hold tens; 200,000 leaves room for a long annotation list.
MAX_VERBATIM_VALUES = 200_000
#: Characters of all strings of the verbatim fields together (shared ones each time):
#: legit settings are ~1 KB; 16 MiB bounds the JSON they become.
MAX_VERBATIM_CHARS = 16 << 20
#: Values inside a tuple or frozenset used as a dict key or set member (each use hashes
#: them all again, with shared references expanded): legit keys are strings and ints,
#: tuples are pairs of ints; 64 bounds the hashing per key.
MAX_KEY_VALUES = 64
#: Digits of a protocol-0 decimal number (INT/LONG/PUT/GET lines): CPython's own limit
#: for int(str) (``sys.int_info.default_max_str_digits``), beyond which conversion is
#: quadratic.
MAX_DIGITS = 4300

CHUNK = 1 << 22
_TAIL = 16  # bytes of padding after the end of the file (see load)


def refusal(path: str, what: str) -> BadInput:
    return BadInput(f"{path}: refused: the pickle {what} (a snapshot holds only plain data; "
                    "nothing was run)", file=path)


def _global_name(line_module: bytes, line_name: bytes) -> str:
    return f"{line_module.decode('utf-8', 'replace')}.{line_name.decode('utf-8', 'replace')}"


_CALLING = {
    ord("R"): "REDUCE", ord("b"): "BUILD", ord("o"): "OBJ", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX",
    0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}


# Two or more LONG_BINGETs in a row (opcode b"j", 4-byte little-endian memo index).
_LONG_BINGET_RUN = re.compile(rb"(?:j[\x00-\xff]{4}){2,}")


_RUN_DTYPE = np.dtype([("op", "u1"), ("index", "<u4")])


class _Consumed:
    """What the memo holds instead of an item a sink consumed."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<an item already consumed>"


#: Put in the memo in place of every item a sink consumed: if the pickle refers back to
#: one, this is what the reference yields (a sink can then say so).
CONSUMED = _Consumed()


class _Corrupt(Exception):
    pass


_KEY_TYPES = {str, int}


def _check_keys(keys: list, path: str) -> None:
    """Refuse a dict key or set member whose hashing would cost more than
    :data:`MAX_KEY_VALUES` values: a tuple's hash is not cached, it hashes every item
    again (shared ones as often as they are reached), and recursively (``tuplehash``
    in C, no depth check: a million nested tuples overflow the C stack)."""
    for k in keys:
        if type(k) in _KEY_TYPES:
            continue
        todo = [k]
        n = 0
        while todo:
            v = todo.pop()
            if type(v) is tuple or type(v) is frozenset:
                n += len(v)
                if n > MAX_KEY_VALUES:
                    raise TooLarge(f"{path}: refused: a dict key or set member holds more than {MAX_KEY_VALUES} "
                                   f"values (limit: {MAX_KEY_VALUES}; a snapshot's keys are strings)", file=path)
                todo.extend(v)


def _too_long(path: str, k: int, at: int, what: str = "a string, bytes or integer") -> TooLarge:
    return TooLarge(f"{path}: refused: the pickle declares {what} of {k:,} bytes at byte {at:,} "
                    f"(limit: {MAX_FIELD_BYTES:,} bytes per field)", file=path)


def _too_deep(path: str, at: int) -> TooLarge:
    return TooLarge(f"{path}: refused: containers nest more than {MAX_DEPTH} deep at byte {at:,} "
                    f"(limit: {MAX_DEPTH} levels; a snapshot nests about 9)", file=path)


# The opcodes of plain data, as regular expressions: each alternative starts with its own
# opcode byte and has a length fixed by it, so a match is an exact tokenization.
# (FRAME may sit between any two opcodes of protocol 4+: the pickler closes a frame at an
# opcode boundary once it holds 64 KiB.)
ANY = rb"[\x00-\xff]"
FRAME = rb"(?:\x95" + ANY + rb"{8})"
MEMO = rb"(?:q" + ANY + rb"|r" + ANY + rb"{4}|\x94)"
REF = rb"(?:h" + ANY + rb"|j" + ANY + rb"{4})"
INT = (rb"(?:K" + ANY + rb"|M" + ANY + rb"{2}|J" + ANY + rb"{4}|\x8a(?:\x00|"
       + b"|".join(bytes([k]) + ANY + b"{%d}" % k for k in range(1, 9)) + rb"))")


def int_token(t: bytes) -> int:
    """The value of an ``INT`` token."""
    op = t[0]
    if op == 0x4B:
        return t[1]
    if op == 0x4D:
        return t[1] | t[2] << 8
    return int.from_bytes(t[1:5] if op == 0x4A else t[2:], "little", signed=True)


def ref_index(t: bytes) -> int:
    """The memo index of a ``REF`` token."""
    return t[1] if t[0] == 0x68 else int.from_bytes(t[1:5], "little")


class BatchReader:
    """What a sink may add to read whole batches itself (see :func:`load`)."""

    lists: set[int]  # ids of the lists whose batches ``read`` understands

    def read(self, target: list, buf: bytes, pos: int, limit: int, memo: dict) -> tuple[int, bool]:
        raise NotImplementedError


FAST_AHEAD = 1 << 20  # bytes made available before a BatchReader is asked


def load(f: IO[bytes], path: str, sink: Callable[[list, list], bool] | None = None,
         progress: Callable[[int], None] | None = None) -> tuple[Any, bytes]:
    """Unpickle one object from ``f`` (positioned at its PROTO opcode or first opcode).

    Returns the object and the bytes read past its STOP opcode (the rest of ``f``
    follows them). ``progress(bytes_read)`` is called every few MiB. Raises
    :class:`BadInput` naming ``path`` for a refused opcode, a truncated stream or
    anything that is not a pickle.

    A sink that is also a :class:`BatchReader` is offered every ``MARK`` that opens a
    batch for one of its ``lists``: ``read(target, buf, pos, limit, memo)`` may consume
    items from ``buf[pos:limit]`` (after the MARK) itself, keeping the memo as the
    opcodes it read would have, and returns where it stopped and whether it also read
    the batch's closing ``APPENDS``. What it leaves is read here as usual.
    """
    batch_lists = getattr(sink, "lists", None)
    buf = b""
    pos = 0
    n = 0
    start = 0  # file offset of buf[0]
    eof = False
    end = -1  # offset in buf where the file's bytes stop, once eof

    def fill(k: int) -> None:
        """Make buf[pos:pos+k] available (or reach the end of the file)."""
        nonlocal buf, pos, n, start, eof, end
        if eof:
            return
        chunks = [buf[pos:]]
        have = len(chunks[0])
        start += pos
        while True:  # a stream may return fewer bytes than asked for
            more = f.read(max(CHUNK, k - have))
            if not more:
                eof = True
                break
            chunks.append(more)
            have += len(more)
            if have >= k:
                break
        buf = b"".join(chunks)
        pos = 0
        n = len(buf)
        if eof:
            # Padding, so the fixed-size opcodes need no bounds check of their own: one
            # that runs into it has pos > end afterwards and is reported as truncated.
            end = n
            buf += b"\0" * _TAIL
            n = len(buf)
        if progress is not None:
            progress(start)

    def take(k: int) -> bytes:
        nonlocal pos
        if pos + k > n:
            fill(k)
        if eof and pos + k > end:
            raise EOFError
        b = buf[pos:pos + k]
        pos += k
        return b

    def line() -> bytes:
        nonlocal pos
        while True:
            i = buf.find(b"\n", pos, end if eof else n)
            if i >= 0:
                b = buf[pos:i]
                pos = i + 1
                return b
            if eof:
                raise EOFError
            if n - pos > MAX_FIELD_BYTES:
                raise _too_long(path, n - pos, start + pos)
            fill(n - pos + CHUNK)

    stack: list = []
    metastack: list[list] = []
    memo: dict[int, Any] = {}
    # Memo slots of dicts, so a consumed batch's dicts can leave the memo: the pickler
    # memoizes every dict it writes, but nothing refers back to a trace entry.
    dict_slot: dict[int, int] = {}
    unpack_from = struct.unpack_from
    get_run = _LONG_BINGET_RUN.match
    from_bytes = int.from_bytes

    def memoize(idx: int) -> None:
        obj = stack[-1]
        memo[idx] = obj
        if type(obj) is dict:
            dict_slot[id(obj)] = idx

    def consumed(items: list) -> None:
        pop = dict_slot.pop
        for it in items:
            idx = pop(id(it), None)
            if idx is not None:
                memo[idx] = CONSUMED  # keeps len(memo), which MEMOIZE numbers by

    try:
        while True:
            if pos + 9 > n:  # every fixed-size opcode with its argument is <= 9 bytes
                fill(9)
                if eof and pos >= end:
                    raise EOFError
            op = buf[pos]
            pos += 1
            if op == 0x68:  # h BINGET
                stack.append(memo[buf[pos]])
                pos += 1
            elif op == 0x6A:  # j LONG_BINGET
                # A list of shared objects (a snapshot's frame lists) is a run of them:
                # decode the whole run at once.
                m = get_run(buf, pos - 1)
                if m is None:
                    stack.append(memo[from_bytes(buf[pos:pos + 4], "little")])
                    pos += 4
                else:
                    e = m.end()
                    stack.extend(map(memo.__getitem__, np.frombuffer(buf[pos - 1:e], _RUN_DTYPE)["index"].tolist()))
                    pos = e
            elif op == 0x72 or op == 0x94 or op == 0x71:  # LONG_BINPUT, MEMOIZE, BINPUT
                if op == 0x72:
                    i = from_bytes(buf[pos:pos + 4], "little")
                    pos += 4
                elif op == 0x94:
                    i = len(memo)
                else:
                    i = buf[pos]
                    pos += 1
                obj = stack[-1]
                memo[i] = obj
                if type(obj) is dict:
                    dict_slot[id(obj)] = i
            elif op == 0x28:  # ( MARK
                if batch_lists and stack and id(stack[-1]) in batch_lists:
                    if not eof and n - pos < FAST_AHEAD:
                        fill(FAST_AHEAD)
                    pos, closed = sink.read(stack[-1], buf, pos, end if eof else n, memo)
                    if closed:
                        continue
                if len(metastack) >= MAX_DEPTH:
                    raise _too_deep(path, start + pos)
                metastack.append(stack)
                stack = []
            elif op == 0x7D:  # } EMPTY_DICT
                stack.append({})
            elif op == 0x5D:  # ] EMPTY_LIST
                stack.append([])
            elif op == 0x4B:  # K BININT1
                stack.append(buf[pos])
                pos += 1
            elif op == 0x4D:  # M BININT2
                stack.append(buf[pos] | buf[pos + 1] << 8)
                pos += 2
            elif op == 0x4A:  # J BININT
                stack.append(from_bytes(buf[pos:pos + 4], "little", signed=True))
                pos += 4
            elif op == 0x8A:  # LONG1
                k = buf[pos]
                if pos + 1 + k <= n:
                    stack.append(from_bytes(buf[pos + 1:pos + 1 + k], "little", signed=True))
                    pos += 1 + k
                else:
                    pos += 1
                    stack.append(from_bytes(take(k), "little", signed=True))
            elif op == 0x75:  # u SETITEMS
                items = stack
                stack = metastack.pop()
                d = stack[-1]
                if not set(map(type, items[0::2])) <= _KEY_TYPES:
                    _check_keys(items[0::2], path)
                for i in range(0, len(items) - 1, 2):
                    d[items[i]] = items[i + 1]
                if len(items) % 2:
                    raise _Corrupt("SETITEMS with an odd number of items")
            elif op == 0x65:  # e APPENDS
                items = stack
                stack = metastack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise _Corrupt(f"APPENDS to a {type(target).__name__}")
                if sink is not None and items and sink(target, items):
                    consumed(items)
                else:
                    target.extend(items)
            elif op == 0x8C:  # SHORT_BINUNICODE
                k = buf[pos]
                pos += 1
                stack.append(take(k).decode("utf-8", "surrogatepass"))
            elif op == 0x58:  # X BINUNICODE
                k = from_bytes(buf[pos:pos + 4], "little")
                pos += 4
                if k > MAX_FIELD_BYTES:
                    raise _too_long(path, k, start + pos)
                stack.append(take(k).decode("utf-8", "surrogatepass"))
            elif op == 0x4E:  # N NONE
                stack.append(None)
            elif op == 0x88:  # NEWTRUE
                stack.append(True)
            elif op == 0x89:  # NEWFALSE
                stack.append(False)
            elif op == 0x47:  # G BINFLOAT
                stack.append(unpack_from(">d", buf, pos)[0])
                pos += 8
            elif op == 0x61:  # a APPEND
                v = stack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise _Corrupt(f"APPEND to a {type(target).__name__}")
                if sink is not None and sink(target, [v]):
                    consumed([v])
                else:
                    target.append(v)
            elif op == 0x73:  # s SETITEM
                v = stack.pop()
                k = stack.pop()
                if type(k) not in _KEY_TYPES:
                    _check_keys([k], path)
                stack[-1][k] = v
            elif op == 0x29:  # ) EMPTY_TUPLE
                stack.append(())
            elif op == 0x85:  # TUPLE1
                stack[-1] = (stack[-1],)
            elif op == 0x86:  # TUPLE2
                b = stack.pop()
                stack[-1] = (stack[-1], b)
            elif op == 0x87:  # TUPLE3
                c = stack.pop()
                b = stack.pop()
                stack[-1] = (stack[-1], b, c)
            elif op == 0x74:  # t TUPLE
                items = stack
                stack = metastack.pop()
                stack.append(tuple(items))
            elif op == 0x6C:  # l LIST
                items = stack
                stack = metastack.pop()
                stack.append(items)
            elif op == 0x64:  # d DICT
                items = stack
                stack = metastack.pop()
                if len(items) % 2:
                    raise _Corrupt("DICT with an odd number of items")
                _check_keys(items[0::2], path)
                stack.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})
            elif op == 0x95:  # FRAME: a length hint only (checked like the C unpickler's, which reads it at once)
                if from_bytes(buf[pos:pos + 8], "little") > MAX_FIELD_BYTES:
                    raise _too_long(path, from_bytes(buf[pos:pos + 8], "little"), start + pos + 8, "a frame")
                pos += 8
            elif op == 0x80:  # PROTO
                if buf[pos] > 5:
                    raise _Corrupt(f"unsupported pickle protocol {buf[pos]}")
                pos += 1
            elif op == 0x2E:  # . STOP
                if metastack:
                    raise _Corrupt("STOP inside an unfinished container")
                if eof and pos > end:
                    raise EOFError
                return stack.pop(), buf[pos:end if eof else n]
            elif op == 0x30:  # 0 POP
                if stack:
                    stack.pop()
                else:
                    stack = metastack.pop()
            elif op == 0x31:  # 1 POP_MARK
                stack = metastack.pop()
            elif op == 0x32:  # 2 DUP
                stack.append(stack[-1])
            elif op == 0x8B:  # LONG4
                k = from_bytes(take(4), "little", signed=True)
                if k < 0:
                    raise _Corrupt("negative LONG4 length")
                if k > MAX_FIELD_BYTES:
                    raise _too_long(path, k, start + pos)
                stack.append(from_bytes(take(k), "little", signed=True))
            elif op == 0x8D:  # BINUNICODE8
                k = from_bytes(take(8), "little")
                if k > MAX_FIELD_BYTES:
                    raise _too_long(path, k, start + pos)
                stack.append(take(k).decode("utf-8", "surrogatepass"))
            elif op == 0x43:  # C SHORT_BINBYTES
                k = buf[pos]
                pos += 1
                stack.append(take(k))
            elif op == 0x42:  # B BINBYTES
                k = from_bytes(buf[pos:pos + 4], "little")
                pos += 4
                if k > MAX_FIELD_BYTES:
                    raise _too_long(path, k, start + pos)
                stack.append(take(k))
            elif op in (0x8E, 0x96):  # BINBYTES8, BYTEARRAY8
                k = from_bytes(take(8), "little")
                if k > MAX_FIELD_BYTES:
                    raise _too_long(path, k, start + pos)
                b = take(k)
                stack.append(b if op == 0x8E else bytearray(b))
            elif op == 0x55:  # U SHORT_BINSTRING (Python 2 str, decoded as ASCII)
                k = buf[pos]
                pos += 1
                stack.append(take(k).decode("ascii"))
            elif op == 0x54:  # T BINSTRING
                k = from_bytes(buf[pos:pos + 4], "little", signed=True)
                pos += 4
                if k < 0:
                    raise _Corrupt("negative BINSTRING length")
                if k > MAX_FIELD_BYTES:
                    raise _too_long(path, k, start + pos)
                stack.append(take(k).decode("ascii"))
            elif op == 0x8F:  # EMPTY_SET
                stack.append(set())
            elif op == 0x90:  # ADDITEMS
                items = stack
                stack = metastack.pop()
                _check_keys(items, path)
                stack[-1].update(items)
            elif op == 0x91:  # FROZENSET
                items = stack
                stack = metastack.pop()
                _check_keys(items, path)
                stack.append(frozenset(items))
            elif op == 0x70:  # p PUT (protocol 0: decimal index on a line)
                memoize(int(line()))
            elif op == 0x67:  # g GET
                stack.append(memo[int(line())])
            elif op == 0x49:  # I INT (protocol 0; "00"/"01" are False/True)
                s = line()
                stack.append(False if s == b"00" else True if s == b"01" else int(s))
            elif op == 0x4C:  # L LONG
                stack.append(int(line().rstrip(b"L")))
            elif op == 0x46:  # F FLOAT
                stack.append(float(line()))
            elif op == 0x56:  # V UNICODE
                stack.append(line().decode("raw-unicode-escape"))
            elif op == 0x53:  # S STRING (repr of a Python 2 str)
                s = line().strip()
                if len(s) < 2 or s[:1] != s[-1:] or s[:1] not in b"'\"":
                    raise _Corrupt("bad STRING literal")
                stack.append(s[1:-1].decode("unicode-escape"))
            elif op in (0x63, 0x69):  # c GLOBAL, i INST
                module = line()
                name = line()
                raise refusal(path, f"asks for global {_global_name(module, name)}")
            elif op == 0x93:  # STACK_GLOBAL
                name = stack.pop() if stack else "?"
                module = stack.pop() if stack else "?"
                raise refusal(path, f"asks for global {module}.{name}")
            elif op in (0x50, 0x51):  # P PERSID, Q BINPERSID
                raise refusal(path, "uses a persistent id")
            elif op in _CALLING:
                raise refusal(path, f"calls code ({_CALLING[op]} opcode)")
            else:
                raise _Corrupt(f"unknown opcode 0x{op:02x} at byte {start + pos - 1}")
    except BadInput:
        raise
    except Exception as e:  # each kind is reported below; anything else propagates
        if isinstance(e, EOFError) or (eof and pos > end):  # an opcode ran into the padding
            raise BadInput(f"{path}: truncated: the pickle ends before its STOP opcode", file=path) from None
        if isinstance(e, (OSError, zlib.error)):  # from a gzip stream
            raise BadInput(f"{path}: not a snapshot: broken gzip stream ({e})", file=path) from None
        if not isinstance(e, (IndexError, KeyError, _Corrupt, ValueError, TypeError, AttributeError,
                              UnicodeDecodeError, OverflowError, MemoryError, RecursionError, struct.error)):
            raise
        if isinstance(e, IndexError):
            raise BadInput(f"{path}: not a snapshot: corrupt pickle (stack underflow near byte {start + pos})",
                           file=path) from None
        if isinstance(e, KeyError):
            raise BadInput(f"{path}: not a snapshot: corrupt pickle (memo slot {e} is empty)", file=path) from None
        if isinstance(e, _Corrupt):
            raise BadInput(f"{path}: not a snapshot: corrupt pickle ({e})", file=path) from None
        raise BadInput(f"{path}: not a snapshot: corrupt pickle ({type(e).__name__}: {e})", file=path) from None


# -- checking a pickle's numbers before Python's C unpickler reads it ------------------


class Reroute(Exception):
    """A pickle that :class:`Prescan` cannot vouch for cheaply (a tuple that is not a pair
    of ints, a set): read it with :func:`load` instead, which checks every key it
    hashes. Not an error of the file."""


_B = rb"[\x00-\xff]"
_INT_TOK = rb"(?:K" + _B + rb"|M" + _B + rb"{2}|J" + _B + rb"{4})"
# An int, or a pair of ints closed by TUPLE2 (``segment_pool_id``, the only tuple in a
# snapshot). The lookahead keeps an int from being taken alone while the bytes that
# would tell whether a TUPLE2 follows are not there yet (the end of a chunk).
_PAIR_TAIL = rb"(?:" + _INT_TOK + rb"\x86|(?=" + _B + rb"{6}))"
_SCAN_ALTS = [  # one alternative per opcode, each starting with its opcode byte (sre then
    # skips a non-matching alternative with one comparison), the frequent ones first
    rb"h" + _B, rb"j" + _B + rb"{4}", rb"K" + _B + _PAIR_TAIL, rb"J" + _B + rb"{4}" + _PAIR_TAIL,
    rb"\x8a(?:\x06" + _B + rb"{6}|\x05" + _B + rb"{5}|\x07" + _B + rb"{7}|\x08" + _B + rb"{8}|\x00|\x01"
    + _B + rb"|\x02" + _B + rb"{2}|\x03" + _B + rb"{3}|\x04" + _B + rb"{4})",
    rb"\}", rb"\x94", rb"\(", rb"u", rb"\]", rb"e", rb"a", rb"q" + _B, None, rb"N",
    # SHORT_BINUNICODE of up to 63 bytes (1-byte length, then the UTF-8): every string
    # of a trace's compile_context / user_metadata; longer ones go through feed()
    rb"\x8c(?:" + b"|".join(re.escape(bytes([k])) + _B + b"{%d}" % k for k in range(64)) + rb")",
    rb"M" + _B + rb"{2}" + _PAIR_TAIL, rb"s", rb"\x88", rb"\x89", rb"\)", rb"G" + _B + rb"{8}",
    rb"0", rb"1", rb"2", rb"d", rb"l", rb"R", rb"b", rb"o", rb"\x81", rb"\x92", rb"\x98",
]
_SCAN_RUNS: dict[int, re.Pattern] = {}


def _scan_run(bits: int) -> re.Pattern:
    """The opcodes :class:`Prescan` passes without a look, LONG_BINPUT only with an index
    below 2**bits (its 4-byte little-endian argument, Lib/pickletools.py ``uint4``)."""
    rx = _SCAN_RUNS.get(bits)
    if rx is None:
        if bits <= 24:
            put = rb"r" + _B + rb"{2}[\x00-" + re.escape(bytes([(1 << (bits - 16)) - 1])) + rb"]\x00"
        else:
            put = rb"r" + _B + rb"{3}[\x00-" + re.escape(bytes([(1 << (bits - 24)) - 1])) + rb"]"
        alts = [put if a is None else a for a in _SCAN_ALTS]
        rx = _SCAN_RUNS[bits] = re.compile(rb"(?:" + b"|".join(alts) + rb")*+")
    return rx


_COUNTED = {  # opcode: (bytes of its length, signed) -- Lib/pickletools.py argument types
    0x8C: (1, False), 0x43: (1, False), 0x55: (1, False), 0x8A: (1, False),  # SHORT_BINUNICODE/BYTES/STRING, LONG1
    0x58: (4, False), 0x42: (4, False), 0x54: (4, True), 0x8B: (4, True),  # BINUNICODE, BINBYTES, BINSTRING, LONG4
    0x8D: (8, False), 0x8E: (8, False), 0x96: (8, False),  # BINUNICODE8, BINBYTES8, BYTEARRAY8
}
_LINES = {0x70: 1, 0x67: 1, 0x49: 1, 0x4C: 1, 0x46: 1, 0x53: 1, 0x56: 1}  # PUT GET INT LONG FLOAT STRING UNICODE
_NUMERIC_LINES = (0x70, 0x67, 0x49, 0x4C, 0x46)
# Opcodes where the C unpickler stops for good: a global or persistent id (refused by
# find_class / persistent_load), an extension code or out-of-band buffer (nothing is
# registered or given), STOP, and any unknown byte ("invalid load key").
_FINAL = frozenset((0x63, 0x69, 0x93, 0x50, 0x51, 0x82, 0x83, 0x84, 0x97, 0x2E))
_REROUTE = {0x85: "TUPLE1", 0x86: "TUPLE2", 0x87: "TUPLE3", 0x74: "TUPLE", 0x8F: "EMPTY_SET",
            0x90: "ADDITEMS", 0x91: "FROZENSET"}
_MARGIN = 16  # bytes kept back at a chunk's end: more than any token the expression takes


class Prescan:
    """Checks a pickle's bytes, in order and in pieces, before Python's C unpickler gets
    them: every opcode is tokenized (sre runs the common ones in C), and

    * a memo index (``LONG_BINPUT``, ``PUT``) may not exceed half the bytes before it
      plus 64: a pickler numbers its memo slots 0, 1, 2, ... and each costs at least two
      bytes (the object's opcode and the put), while ``_Unpickler_MemoPut`` grows the
      table to twice the index and zeroes it: 16 bytes per slot, 1 GiB for 2**26;
    * a declared length (strings, bytes, ``LONG4``, ``FRAME``) may not exceed
      :data:`MAX_FIELD_BYTES`, nor the bytes left when the size is known: the C unpickler
      allocates the buffer before it reads;
    * a protocol-0 number may not have more than :data:`MAX_DIGITS` digits;
    * a tuple that is not a pair of ints, or a set, raises :class:`Reroute`: hashing a
      key made of shared tuples costs 2^depth, and a million nested tuples overflow the C
      stack (``tuplehash`` recurses), which only :func:`load` checks.

    Nothing a C unpickler could act on escapes: bytes are checked before they are
    returned to it, and it cannot run an opcode whose bytes it has not been given.
    """

    def __init__(self, path: str, size: int | None = None) -> None:
        self.path = path
        self.size = size  # bytes of the whole pickle, when known
        self.start = 0  # file offset of self.carry[0]
        self.carry = b""
        self.skip = 0  # payload bytes still to pass over
        self.done = False

    def feed(self, data: bytes, final: bool = False) -> None:
        if self.done:
            return
        if self.skip:
            k = min(self.skip, len(data))
            self.skip -= k
            self.start += k
            data = data[k:]
            if self.skip:
                return
        buf = self.carry + data if self.carry else data
        if final:  # padding: no token may wait for bytes that will never come
            buf += b"\x00" * _MARGIN
        end = len(buf) - (0 if final else _MARGIN)
        at = self.start
        bits = max(16, min(32, ((at >> 1) + 64).bit_length() - 1))
        match = _scan_run(bits).match
        i = 0
        while True:
            i = match(buf, i, end).end()
            if i > end - 12 and not final:
                break  # the rest may be cut mid-token: wait for more
            op = buf[i]
            pos = at + i
            if final and pos >= at + len(buf) - _MARGIN:
                self.done = True  # the pickle ended (truncated: the C unpickler says so)
                return
            if op in _COUNTED:
                w, signed = _COUNTED[op]
                k = int.from_bytes(buf[i + 1:i + 1 + w], "little", signed=signed)
                if k < 0:
                    self.done = True  # refused by the C unpickler ("negative byte count")
                    return
                self._length(op, k, pos + 1 + w)
                i += 1 + w + k
                if final and i > len(buf) - _MARGIN:
                    self.done = True  # truncated: the C unpickler says so
                    return
                if i > len(buf):
                    self.skip = i - len(buf)
                    self.start = at + len(buf)
                    self.carry = b""
                    return
            elif op == 0x72:  # LONG_BINPUT beyond what the expression lets through
                self._memo(int.from_bytes(buf[i + 1:i + 5], "little"), pos)
                i += 5
            elif op == 0x95:  # FRAME: an 8-byte length the C unpickler reads at once
                self._length(op, int.from_bytes(buf[i + 1:i + 9], "little"), pos + 9)
                i += 9
            elif op == 0x80:  # PROTO
                i += 2
            elif op in _LINES:
                nl = buf.find(b"\n", i + 1, end)
                limit = MAX_DIGITS if op in _NUMERIC_LINES else MAX_FIELD_BYTES
                if nl < 0:
                    if len(buf) - i > limit + 2:
                        self._line_too_long(op, limit)
                    if final:
                        self.done = True
                        return
                    break
                if nl - i - 1 > limit:
                    self._line_too_long(op, limit)
                if op == 0x70:
                    try:
                        self._memo(int(buf[i + 1:nl]), pos)
                    except ValueError:
                        self.done = True  # refused by the C unpickler
                        return
                i = nl + 1
            elif op in _REROUTE:
                raise Reroute(f"{_REROUTE[op]} at byte {pos}")
            else:  # _FINAL, or anything unknown: the C unpickler stops here
                self.done = True
                return
        self.start = at + i
        self.carry = buf[i:]

    def _memo(self, idx: int, pos: int) -> None:
        if idx > (pos >> 1) + 64:
            raise TooLarge(f"{self.path}: refused: the pickle puts memo slot {idx:,} at byte {pos:,}; a pickler "
                           "numbers its slots in order, at most one per 2 bytes, and Python's unpickler would "
                           f"reserve {16 * idx / 2**20:,.0f} MiB for it (limit: slot {(pos >> 1) + 64:,} there)",
                           file=self.path)

    def _length(self, op: int, k: int, pos: int) -> None:
        what = "a frame" if op == 0x95 else "a string, bytes or integer"
        if k > MAX_FIELD_BYTES:
            raise TooLarge(f"{self.path}: refused: the pickle declares {what} of {k:,} bytes at byte {pos:,} "
                           f"(limit: {MAX_FIELD_BYTES:,} bytes per field)", file=self.path)
        if self.size is not None and k > self.size - pos:
            raise BadInput(f"{self.path}: truncated: the pickle declares {what} of {k:,} bytes at byte {pos:,} "
                           f"and the file ends {max(self.size - pos, 0):,} bytes later", file=self.path)

    def _line_too_long(self, op: int, limit: int) -> None:
        raise TooLarge(f"{self.path}: refused: a protocol-0 {chr(op)} line longer than {limit:,} bytes "
                       f"(limit: {limit:,})", file=self.path)


class Checked(io.RawIOBase):
    """``raw``'s bytes, each passed through ``scan`` (a :class:`Prescan`) and returned
    only once checked: the last bytes of a piece may hold a token cut short, so they wait
    for the next piece. Put a BufferedReader over it for the C unpickler (which wants
    ``peek``)."""

    def __init__(self, raw: IO[bytes], scan: Prescan) -> None:
        self._raw = raw
        self._scan = scan
        self._pending = b""  # read and fed, not yet checked
        self._offset = 0  # file offset of _pending[0]
        self._eof = False

    def readable(self) -> bool:
        return True

    def _checked(self) -> int:
        """Bytes of _pending that may be handed out."""
        if self._scan.done or self._eof:
            return len(self._pending)
        return max(0, min(len(self._pending), self._scan.start - self._offset))

    def readinto(self, b) -> int:
        while not self._checked() and not self._eof:
            more = self._raw.read(max(len(b), 1 << 16))
            if not more:
                self._eof = True
                self._scan.feed(b"", final=True)
            else:
                self._scan.feed(more)
                self._pending += more
        n = min(len(b), self._checked())
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self._offset += n
        return n
