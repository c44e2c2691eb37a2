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
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from profscope.errors import BadInput

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
                stack.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})
            elif op == 0x95:  # FRAME: a length hint only
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
                stack.append(from_bytes(take(k), "little", signed=True))
            elif op == 0x8D:  # BINUNICODE8
                k = from_bytes(take(8), "little")
                stack.append(take(k).decode("utf-8", "surrogatepass"))
            elif op == 0x43:  # C SHORT_BINBYTES
                k = buf[pos]
                pos += 1
                stack.append(take(k))
            elif op == 0x42:  # B BINBYTES
                k = from_bytes(buf[pos:pos + 4], "little")
                pos += 4
                stack.append(take(k))
            elif op in (0x8E, 0x96):  # BINBYTES8, BYTEARRAY8
                k = from_bytes(take(8), "little")
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
                stack.append(take(k).decode("ascii"))
            elif op == 0x8F:  # EMPTY_SET
                stack.append(set())
            elif op == 0x90:  # ADDITEMS
                items = stack
                stack = metastack.pop()
                stack[-1].update(items)
            elif op == 0x91:  # FROZENSET
                items = stack
                stack = metastack.pop()
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
