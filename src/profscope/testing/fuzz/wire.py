"""Protocol-buffer wire format, parsed just enough to mutate it field by field.

A message is a list of :class:`Field`; a length-delimited payload that parses cleanly as
a message is kept as its children too, so that a mutation deep inside a plane can be
written back with every enclosing length recomputed (the mutation then tests the reader,
not the first length check). ``raw_len`` lets a mutation lie about one length on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5


def varint(v: int) -> bytes:
    """Encode v (any size: values >= 2^64 make an over-long varint, which is the point)."""
    v &= (1 << 80) - 1 if v >= 0 else (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


@dataclass
class Field:
    number: int
    wire: int
    value: int | bytes  # int for VARINT / I32 / I64 (raw), bytes for LEN
    children: list[Field] | None = None  # LEN payload parsed as a message, when it is one
    raw_len: int | None = None  # a length to write instead of the true one (a lie)
    extra: dict = field(default_factory=dict)

    def payload(self) -> bytes:
        if self.children is not None:
            return serialize(self.children)
        return self.value  # type: ignore[return-value]


def parse(buf: bytes, depth: int = 0, max_depth: int = 12) -> list[Field]:
    """Fields of one message; raises ValueError when buf is not a clean message."""
    out: list[Field] = []
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field 0")
        if wire == VARINT:
            v, pos = read_varint(buf, pos)
            out.append(Field(number, wire, v))
        elif wire == I64:
            if pos + 8 > n:
                raise ValueError("short i64")
            out.append(Field(number, wire, int.from_bytes(buf[pos:pos + 8], "little")))
            pos += 8
        elif wire == I32:
            if pos + 4 > n:
                raise ValueError("short i32")
            out.append(Field(number, wire, int.from_bytes(buf[pos:pos + 4], "little")))
            pos += 4
        elif wire == LEN:
            ln, pos = read_varint(buf, pos)
            if pos + ln > n:
                raise ValueError("short len")
            data = bytes(buf[pos:pos + ln])
            pos += ln
            f = Field(number, wire, data)
            if depth < max_depth and ln >= 2:
                try:
                    f.children = parse(data, depth + 1, max_depth)
                except ValueError:
                    f.children = None
                # a short string can parse as a message by chance; keep the children
                # only when the payload does not look like text
                if f.children is not None and _looks_textual(data):
                    f.children = None
            out.append(f)
        else:
            raise ValueError("group wire type")
    return out


def _looks_textual(data: bytes) -> bool:
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\n\t" for c in s)


def serialize(fields: list[Field]) -> bytes:
    out = bytearray()
    for f in fields:
        out += varint((f.number << 3) | f.wire)
        if f.wire == VARINT:
            out += varint(f.value)  # type: ignore[arg-type]
        elif f.wire == I64:
            out += int(f.value).to_bytes(8, "little", signed=False)
        elif f.wire == I32:
            out += int(f.value).to_bytes(4, "little", signed=False)
        else:
            p = f.payload()
            out += varint(f.raw_len if f.raw_len is not None else len(p))
            out += p
    return bytes(out)


def walk(fields: list[Field], path: tuple = ()):
    """Every field with its parent list and index (depth first)."""
    for i, f in enumerate(fields):
        yield fields, i, f, path
        if f.children is not None:
            yield from walk(f.children, path + (f.number,))
