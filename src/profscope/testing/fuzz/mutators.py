"""Seeded mutators, one per input format. ``mutants(fmt, seeds, seed, n)`` is a pure
function of its arguments: the same seed gives byte-identical mutants, so every failure
in a campaign is reproduced by its (seed, index) alone.

A :class:`Mutant` is a run folder: file names (relative to the run's folder) and bytes.
"""

from __future__ import annotations

import gzip
import json
import pickle
import pickletools
import random
import re
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

from profscope.testing.fuzz import wire

FORMATS = ("xplane", "trace", "snapshot", "hlo", "dump_text", "memory_timeline")

# Values that broke readers before (issue 13) or sit on a boundary of an int type.
HUGE_INTS = [2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 5, 2**200, -(2**63) - 1, -(2**70), -1]
RAW_NUMBERS = ["1e308", "-1e308", "1" + "0" * 400, "1e400", "NaN", "Infinity", "-Infinity", "-0", "1.5e-320",
               str(2**64 + 5), str(2**63), str(-(2**70))]


@dataclass
class Mutant:
    fmt: str
    name: str  # "<seed name>#<op>" or "repro:<name>"
    files: dict[str, bytes]
    ops: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.files.values())


@dataclass
class Seed:
    fmt: str
    name: str
    files: dict[str, bytes]
    target: str  # the file of ``files`` that mutations change


# -- bytes ---------------------------------------------------------------------------

def flip_bytes(rng: random.Random, data: bytes, n: int | None = None) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    b = bytearray(data)
    for _ in range(n or rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] = rng.choice([b[i] ^ (1 << rng.randrange(8)), rng.randrange(256), 0xFF, 0x00, 0x80])
    return bytes(b)


def truncate(rng: random.Random, data: bytes) -> bytes:
    if len(data) < 2:
        return b""
    return data[: rng.randrange(len(data))]


def splice(rng: random.Random, data: bytes) -> bytes:
    """Copy a random chunk somewhere else (duplicated structure, shifted offsets)."""
    if len(data) < 4:
        return data * 2
    a = rng.randrange(len(data))
    b = min(len(data), a + rng.randint(1, 4096))
    at = rng.randrange(len(data))
    return data[:at] + data[a:b] + data[at:]


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


def corrupt_deflate(rng: random.Random, data: bytes) -> bytes:
    """A gzip member whose deflate stream is damaged (bad block type, bad distances)."""
    z = bytearray(gz(data))
    if len(z) > 18:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(10, len(z) - 8)
            z[i] ^= 0xFF
    else:
        z += b"\xff\xff"
    return bytes(z)


@lru_cache(maxsize=4)
def zeros_gz(n: int) -> bytes:
    """n zero bytes gzip-compressed (1000:1): the body of every gzip bomb, made once."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    parts = [co.compress(chunk) for _ in range(n >> 20)]
    parts.append(co.flush())
    return b"".join(parts)


def gzip_bomb(prefix: bytes, field_number: int, n: int, *, in_first_field: bool = False) -> bytes:
    """gzip of a message with an extra field ``field_number`` of n zero bytes; with
    ``in_first_field`` the zeros sit inside the message's first LEN field (an XSpace's
    first plane: a reader that loads one plane whole then holds them). One gzip member,
    compressed streaming so that n bytes are never held."""
    rest = b""
    hdr = wire.varint((field_number << 3) | wire.LEN) + wire.varint(n)
    if in_first_field:
        first = wire.parse(prefix, max_depth=0)[0]
        tail_at = len(wire.serialize([first]))
        rest = prefix[tail_at:]
        inner = first.value + hdr
        prefix = wire.varint((first.number << 3) | wire.LEN) + wire.varint(len(inner) + n) + inner
    else:
        prefix = prefix + hdr
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [co.compress(prefix)]
    chunk = bytes(1 << 20)
    for _ in range(n >> 20):
        out.append(co.compress(chunk))
    out.append(co.compress(bytes(n & ((1 << 20) - 1))))
    out.append(co.compress(rest))
    out.append(co.flush())
    return b"".join(out)


# -- protobuf ------------------------------------------------------------------------

def mutate_proto(rng: random.Random, data: bytes, ops: list[str], *, max_oversize: int = 4 << 20) -> bytes:
    """One wire-level mutation of a protobuf message (XSpace, HloProto): a random walk
    down nested messages (one level parsed at a time, so a mutant of a 300 KB XSpace
    costs milliseconds), a mutation there, then every enclosing length rewritten."""
    try:
        fields = wire.parse(data, max_depth=0)
    except ValueError:
        fields = []
    if not fields or rng.random() < 0.2:
        op = rng.choice(["flip", "truncate", "splice"])
        ops.append(f"bytes:{op}")
        return {"flip": flip_bytes, "truncate": truncate, "splice": splice}[op](rng, data)
    levels: list[tuple[list[wire.Field], int]] = []
    path: list[int] = []
    while True:
        i = rng.randrange(len(fields))
        f = fields[i]
        if f.wire == wire.LEN and len(f.value) >= 2 and rng.random() < 0.8 and not wire._looks_textual(f.value):
            try:
                sub = wire.parse(f.value, max_depth=0)
            except ValueError:
                sub = []
            if sub:
                levels.append((fields, i))
                path.append(f.number)
                fields = sub
                continue
        break
    _mutate_level(rng, fields, i, ops, "/".join(map(str, path + [f.number])), max_oversize)
    payload = wire.serialize(fields)
    for parent, j in reversed(levels):
        parent[j].value, parent[j].children = payload, None
        payload = wire.serialize(parent)
    if rng.random() < 0.15:
        ops.append("bytes:flip")
        payload = flip_bytes(rng, payload, 2)
    return payload


def _mutate_level(rng: random.Random, fields: list, i: int, ops: list[str], where: str, max_oversize: int) -> None:
    f = fields[i]
    op = rng.choice(["huge_len", "huge_len", "huge_varint", "dup", "dup_many", "delete", "oversize", "wiretype",
                     "bad_utf8", "truncate_inner", "unknown_field"])
    if op == "huge_len":
        # A LEN field claiming far more bytes than are there; its parents stay consistent.
        lens = [g for g in fields if g.wire == wire.LEN]
        if lens:
            g = rng.choice(lens)
            g.raw_len = rng.choice([2**31 - 1, 2**31, 2**32, 2**62, 2**63, 2**63 + 1, 2**64 - 1, len(g.value) + 1])
            ops.append(f"proto:huge_len({g.raw_len})@{where}")
            return
        op = "huge_varint"
    if op == "huge_varint":
        ints = [g for g in fields if g.wire == wire.VARINT]
        if ints:
            g = rng.choice(ints)
            g.value = rng.choice(HUGE_INTS + [2**70, 2**77])
            ops.append(f"proto:huge_varint({g.value})@{where}")
            return
        op = "dup"
    size = len(f.value) if f.wire == wire.LEN else 8
    if op == "dup":
        fields.insert(i, _copy(f))
        ops.append(f"proto:dup@{where}")
    elif op == "dup_many":
        k = max(2, min(rng.choice([16, 256, 2048]), max_oversize // max(1, size)))
        fields[i:i + 1] = [_copy(f) for _ in range(k)]
        ops.append(f"proto:dup_many({k})@{where}")
    elif op == "delete":
        del fields[i]
        ops.append(f"proto:delete@{where}")
    elif op == "oversize":
        if f.wire == wire.LEN:
            p = f.value or b"\0"
            k = max(1, rng.choice([1 << 16, 1 << 20, max_oversize]) // len(p))
            f.value = (p * k)[:max_oversize]
            ops.append(f"proto:oversize({len(f.value)})@{where}")
        else:
            fields.insert(i, wire.Field(f.number, wire.LEN, bytes(rng.choice([1 << 16, 1 << 20]))))
            ops.append(f"proto:oversize_as_len@{where}")
    elif op == "wiretype":
        new = rng.choice([w for w in (0, 1, 2, 5) if w != f.wire])
        if new == wire.LEN:
            fields[i] = wire.Field(f.number, wire.LEN, wire.varint(f.value) if isinstance(f.value, int) else f.value)
        else:
            fields[i] = wire.Field(f.number, new, rng.choice(HUGE_INTS[:6]) & ((1 << (64 if new != 5 else 32)) - 1))
        ops.append(f"proto:wiretype({f.wire}->{new})@{where}")
    elif op == "bad_utf8" and f.wire == wire.LEN:
        f.value = rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\xc0\x80", b"a\x00b"]) + f.value[:64]
        ops.append(f"proto:bad_utf8@{where}")
    elif op in ("truncate_inner", "bad_utf8") and f.wire == wire.LEN and f.value:
        f.value = f.value[: rng.randrange(len(f.value))]
        ops.append(f"proto:truncate_inner@{where}")
    else:
        number = rng.choice([99, 1000, 536870911])
        fields.insert(i, wire.Field(number, wire.LEN, bytes(rng.choice([1, 1 << 12, 1 << 20]))))
        ops.append(f"proto:unknown_field({number})@{where}")


def _copy(f: wire.Field) -> wire.Field:
    return wire.Field(f.number, f.wire, f.value, None if f.children is None else [_copy(c) for c in f.children], f.raw_len)


# -- JSON ----------------------------------------------------------------------------

class Raw:
    """A JSON token written as is (10^400, NaN, a 100,000-deep array)."""

    def __init__(self, text: str):
        self.text = text


def dumps_raw(value) -> str:
    """json.dumps, with :class:`Raw` tokens spliced in as written."""
    raws: list[str] = []

    def default(o):
        if isinstance(o, Raw):
            raws.append(o.text)
            return f"\u0000RAW{len(raws) - 1}\u0000"
        raise TypeError(type(o))

    text = json.dumps(value, default=default, allow_nan=True, ensure_ascii=True)
    return re.sub(r'"\\u0000RAW(\d+)\\u0000"', lambda m: raws[int(m.group(1))], text)


def hostile_json_value(rng: random.Random):
    kind = rng.randrange(12)
    if kind == 0:
        return rng.choice(HUGE_INTS)
    if kind == 1:
        return Raw(rng.choice(RAW_NUMBERS))
    if kind == 2:
        return rng.choice(["\ud800", "a\udfffb", "\ud800\ud800", "\x00", "\u202e", "x" * (1 << rng.choice([10, 16, 20]))])
    if kind == 3:
        return [rng.choice(HUGE_INTS), "x", None]
    if kind == 4:
        return {"a": {"b": [1, 2, {"c": Raw("NaN")}]}}
    if kind == 5:
        d = rng.choice([64, 1000, 10_000, 100_000])
        return Raw("[" * d + "]" * d) if rng.random() < 0.5 else Raw('{"a":' * d + "1" + "}" * d)
    if kind == 6:
        return None
    if kind == 7:
        return rng.choice([True, False])
    if kind == 8:
        return rng.choice([-1, 0, 1.5, -1e-300])
    if kind == 9:
        return []
    if kind == 10:
        return {}
    return Raw('"\\ud800"')


def _json_nodes(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for k, v in list(value.items())[:64]:
            yield from _json_nodes(v, path + (k,))
    elif isinstance(value, list):
        idx = range(len(value)) if len(value) <= 64 else sorted(random.Random(len(value)).sample(range(len(value)), 64))
        for i in idx:
            yield from _json_nodes(value[i], path + (i,))


def _set(root, path, value):
    if not path:
        return value
    cur = root
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return root


def mutate_json(rng: random.Random, text: bytes, ops: list[str], *, event_keys=()) -> bytes:
    """A structural mutation of a JSON document; for Chrome traces (``event_keys``) most
    mutations hit one field of a few random events."""
    if rng.random() < 0.12:
        op = rng.choice(["truncate", "flip", "bom", "garbage_tail"])
        ops.append(f"text:{op}")
        if op == "truncate":
            return truncate(rng, text)
        if op == "flip":
            return flip_bytes(rng, text)
        if op == "bom":
            return b"\xef\xbb\xbf" + text
        return text + b"\xff\xfe{,]"
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        ops.append("text:flip")
        return flip_bytes(rng, text)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if event_keys and isinstance(events, list) and events and rng.random() < 0.75:
        for _ in range(rng.randint(1, 3)):
            j = rng.randrange(len(events))
            ev = events[j]
            if not isinstance(ev, dict):
                continue
            key = rng.choice(list(event_keys) + list(ev.keys()))
            if key == "args" and isinstance(ev.get("args"), dict) and ev["args"] and rng.random() < 0.5:
                k2 = rng.choice(list(ev["args"]))
                ev["args"][k2] = hostile_json_value(rng)
                ops.append(f"event[{j}].args.{k2}")
            else:
                ev[key] = hostile_json_value(rng)
                ops.append(f"event[{j}].{key}")
        if rng.random() < 0.1:
            events.extend(events[: rng.randint(1, 50)] * rng.choice([10, 100]))
            ops.append("events:dup")
    else:
        nodes = list(_json_nodes(doc))
        path, _ = rng.choice(nodes)
        doc = _set(doc, path, hostile_json_value(rng))
        ops.append("json@" + "/".join(map(str, path))[:80])
    out = dumps_raw(doc).encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        ops.append("text:truncate")
        out = truncate(rng, out)
    return out


# -- pickle --------------------------------------------------------------------------

class _NoGlobals(pickle._Unpickler):  # the Python unpickler: its memo is a dict, never pre-sized
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name}")


def safe_loads(data: bytes):
    """A seed snapshot as Python objects (seed files are real snapshots: plain dicts and
    lists), or None when it needs a global or is not a pickle."""
    import io

    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except Exception:  # noqa: BLE001 - any refusal means: mutate its bytes instead
        return None


def dag(n: int = 21):
    """x = [x, x] n times: 2^n leaves as a tree, n lists as a DAG (a few bytes pickled)."""
    x: list = []
    for _ in range(n):
        x = [x, x]
    return x


def hostile_pickle_value(rng: random.Random):
    kind = rng.randrange(9)
    if kind == 0:
        return dag(rng.choice([16, 21, 24, 28]))
    if kind == 1:
        d: dict = {"a": 1}
        d["self"] = d
        return d
    if kind == 2:
        lst: list = [1]
        lst.append(lst)
        return lst
    if kind == 3:
        return rng.choice([float("nan"), float("inf"), -float("inf")])
    if kind == 4:
        return rng.choice(["\ud800", "a\udfffb", "x" * (1 << 16)])
    if kind == 5:
        return rng.choice(HUGE_INTS)
    if kind == 6:
        return rng.choice([None, [], {}, "", b"bytes", (1, 2)])
    if kind == 7:
        return {"device": rng.choice(HUGE_INTS), "address": -1, "total_size": float("nan"), "blocks": [{}]}
    return [rng.choice(HUGE_INTS)] * rng.choice([10, 1000, 100_000])


def deep_pickle(depth: int, kind: str = "list") -> bytes:
    """A protocol-4 pickle nesting ``depth`` lists or dicts (pickle.dumps itself would
    recurse too deep)."""
    if kind == "list":
        return b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b"."
    key = b"\x8c\x01a"  # SHORT_BINUNICODE 'a'
    return b"\x80\x04" + (b"}" + key) * depth + b"N" + b"s" * depth + b"."


def long_binput(index: int) -> bytes:
    """EMPTY_LIST, LONG_BINPUT index, STOP: the C unpickler sizes its memo to the index."""
    return b"\x80\x04]r" + struct.pack("<I", index) + b"."


def _pickle_nodes(value, path=(), depth=0):
    yield path, value
    if depth > 6:
        return
    if isinstance(value, dict):
        for k, v in list(value.items())[:32]:
            yield from _pickle_nodes(v, path + (k,), depth + 1)
    elif isinstance(value, list) and value:
        for i in sorted({0, len(value) - 1, len(value) // 2}):
            yield from _pickle_nodes(value[i], path + (i,), depth + 1)


def mutate_pickle(rng: random.Random, data: bytes, ops: list[str]) -> bytes:
    obj = safe_loads(data)
    r = rng.random()
    if obj is not None and r < 0.55:
        nodes = [(p, v) for p, v in _pickle_nodes(obj) if p]
        if nodes:
            path, _ = rng.choice(nodes)
            val = hostile_pickle_value(rng)
            _set(obj, path, val)
            ops.append("obj@" + "/".join(map(str, path))[:80] + f"={type(val).__name__}")
            try:
                return pickle.dumps(obj, protocol=rng.choice([2, 4, 5]))
            except (RecursionError, ValueError):
                pass
    if r < 0.8:
        return _mutate_opcodes(rng, data, ops)
    op = rng.choice(["flip", "truncate", "splice"])
    ops.append(f"bytes:{op}")
    return {"flip": flip_bytes, "truncate": truncate, "splice": splice}[op](rng, data)


def _mutate_opcodes(rng: random.Random, data: bytes, ops: list[str]) -> bytes:
    try:
        codes = [(op.name, arg, pos) for op, arg, pos in pickletools.genops(data)]
    except Exception:  # noqa: BLE001 - not a clean pickle: bytes it is
        ops.append("bytes:flip")
        return flip_bytes(rng, data)
    if len(codes) < 2:
        ops.append("bytes:flip")
        return flip_bytes(rng, data)
    bounds = [pos for _, _, pos in codes] + [len(data)]
    k = rng.randrange(len(codes) - 1)
    name = codes[k][0]
    start, end = bounds[k], bounds[k + 1]
    op = rng.choice(["delete", "dup", "long_binput", "huge_len", "insert", "swap"])
    if op == "delete":
        ops.append(f"op:delete {name}")
        return data[:start] + data[end:]
    if op == "dup":
        ops.append(f"op:dup {name}")
        return data[:end] + data[start:end] * rng.choice([1, 2, 100]) + data[end:]
    if op == "long_binput":
        idx = rng.choice([2**20, 2**26, 2**30, 2**32 - 1])
        ops.append(f"op:LONG_BINPUT({idx}) after {name}")
        return data[:end] + b"r" + struct.pack("<I", idx) + data[end:]
    if op == "huge_len":
        # BINUNICODE / BINBYTES / FRAME with a length far beyond the file
        n = rng.choice([2**31 - 1, 2**32 - 1, 2**40, 2**63, 2**64 - 1])
        ins = rng.choice([b"X" + struct.pack("<I", n & 0xFFFFFFFF), b"\x8d" + struct.pack("<Q", n & (2**64 - 1)),
                          b"\x95" + struct.pack("<Q", n & (2**64 - 1)), b"\x8e" + struct.pack("<Q", n & (2**64 - 1))])
        ops.append(f"op:huge_len({n}) opcode {ins[:1]!r}")
        return data[:end] + ins + b"abc" + data[end:]
    if op == "insert":
        ins = rng.choice([b"c__builtin__\neval\n", b"\x93", b"R", b"b", b"(", b"0", b"2", b"\x94", b"h\xff",
                          b"j\xff\xff\xff\x7f", b"\x8a\x7f" + b"\xff" * 127, b"I99999999999999999999999\n",
                          b"F1e400\n", b"Fnan\n"])
        ops.append(f"op:insert {ins[:12]!r}")
        return data[:end] + ins + data[end:]
    j = rng.randrange(len(codes) - 1)
    s2, e2 = bounds[j], bounds[j + 1]
    ops.append(f"op:swap {name}<->{codes[j][0]}")
    if s2 < start:
        s2, e2, start, end = start, end, s2, e2
    if e2 <= start or end <= s2:
        return data[:start] + data[s2:e2] + data[end:s2] + data[start:end] + data[e2:]
    return data


# -- text dumps ----------------------------------------------------------------------

_NUM = re.compile(rb"(?<![A-Za-z_])-?\d+(?:\.\d+)?")


def mutate_text(rng: random.Random, data: bytes, ops: list[str]) -> bytes:
    lines = data.split(b"\n")
    op = rng.choice(["numbers", "numbers", "numbers", "truncate", "dup_lines", "delete_lines", "bad_utf8", "long_line"])
    if op == "numbers":
        ms = list(_NUM.finditer(data))
        if ms:
            out = bytearray()
            last = 0
            pick = sorted(rng.sample(range(len(ms)), min(len(ms), rng.randint(1, 4))))
            for k in pick:
                m = ms[k]
                out += data[last:m.start()]
                rep = rng.choice(RAW_NUMBERS[:4] + [str(v) for v in HUGE_INTS] + ["nan", "inf", "-5", "99999999999999999999GiB"])
                out += rep.encode()
                last = m.end()
                ops.append(f"num@{m.start()}={rep[:24]}")
            out += data[last:]
            return bytes(out)
        op = "truncate"
    if op == "truncate":
        ops.append("truncate")
        return truncate(rng, data)
    if op == "dup_lines":
        i = rng.randrange(len(lines))
        j = min(len(lines), i + rng.randint(1, 50))
        ops.append(f"dup_lines {i}-{j}")
        return b"\n".join(lines[:j] + lines[i:j] * rng.choice([2, 100]) + lines[j:])
    if op == "delete_lines":
        i = rng.randrange(len(lines))
        j = min(len(lines), i + rng.randint(1, 20))
        ops.append(f"delete_lines {i}-{j}")
        return b"\n".join(lines[:i] + lines[j:])
    if op == "bad_utf8":
        ops.append("bad_utf8")
        i = rng.randrange(len(data) + 1)
        return data[:i] + rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\x00"]) + data[i:]
    ops.append("long_line")
    i = rng.randrange(len(lines))
    lines[i] = lines[i] + b"x" * (1 << rng.choice([16, 20, 22]))
    return b"\n".join(lines)


# -- per format ----------------------------------------------------------------------

TRACE_EVENT_KEYS = ("ts", "dur", "pid", "tid", "args", "name", "ph", "id", "cat", "s", "bp")


def mutate(fmt: str, seed: Seed, rng: random.Random) -> Mutant:
    data = seed.files[seed.target]
    ops: list[str] = []
    target = seed.target
    compressed = target.endswith(".gz")
    if compressed:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            compressed = False
    if fmt in ("xplane", "hlo"):
        r = rng.random()
        if fmt == "xplane" and r < 0.03:
            # Two gzip members (the seed and a field header, then the cached zeros): the
            # same stream a reader sees as one bomb, without compressing 256 MiB per mutant.
            n = rng.choice([64 << 20, 256 << 20])
            ops.append(f"gzip_bomb({n >> 20}MiB)")
            hdr = wire.varint((1000 << 3) | wire.LEN) + wire.varint(n)
            try:
                first = wire.parse(data, max_depth=0)[0]
            except (ValueError, IndexError):
                first = None
            if first is not None and first.wire == wire.LEN and rng.random() < 0.5:
                # inside the first plane, which a reader may load whole
                at = len(wire.serialize([first]))
                inner = first.value + hdr
                head = wire.varint((first.number << 3) | wire.LEN) + wire.varint(len(inner) + n) + inner
                new = gz(head) + zeros_gz(n) + gz(data[at:])
                ops.append("in_plane")
            else:
                new = gz(data + hdr) + zeros_gz(n)
            compressed = False
            target = _gz_name(target)
        elif r < 0.08:
            ops.append("corrupt_deflate")
            new, compressed = corrupt_deflate(rng, data), False
            target = _gz_name(target)
        else:
            new = data
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                new = mutate_proto(rng, new, ops)
            if not compressed and rng.random() < 0.15:
                compressed, target = True, _gz_name(target)
    elif fmt in ("trace", "memory_timeline"):
        new = mutate_json(rng, data, ops, event_keys=TRACE_EVENT_KEYS if fmt == "trace" else ())
        if fmt == "trace" and rng.random() < 0.05:
            ops.append("corrupt_deflate")
            new, compressed = corrupt_deflate(rng, new), False
            target = _gz_name(target)
    elif fmt == "snapshot":
        new = mutate_pickle(rng, data, ops)
    elif fmt == "dump_text":
        new = mutate_text(rng, data, ops)
    else:
        raise ValueError(fmt)
    if compressed:
        new = gz(new)
        if rng.random() < 0.05:
            ops.append("gz:truncate")
            new = truncate(rng, new)
    files = {k: v for k, v in seed.files.items() if k != seed.target}
    files[target] = new
    return Mutant(fmt, seed.name, files, ops)


def _gz_name(name: str) -> str:
    return name if name.endswith(".gz") else name + ".gz"


def mutants(fmt: str, seeds: list[Seed], seed: int, n: int, start: int = 0):
    """n mutants of fmt's seeds, deterministic from ``seed``: mutant i depends on
    (seed, fmt, i) only, so a run of 100 is the prefix of a run of 5000."""
    pool = [s for s in seeds if s.fmt == fmt]
    if not pool:
        return
    for i in range(start, n):
        rng = random.Random(f"{seed}:{fmt}:{i}")
        s = pool[rng.randrange(len(pool))]
        m = mutate(fmt, s, rng)
        m.name = f"{s.name}#{i}"
        yield m
