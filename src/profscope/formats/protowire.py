"""Just enough of the protobuf wire format to walk a large message without parsing it.

An XSpace can be hundreds of MB; listing its planes, host names or compiled modules needs
only a few of its top-level fields. These helpers read field headers (tag, length) and
seek over the rest, so a scan costs a few reads per plane instead of a full parse.
Wire types (protobuf encoding spec): 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
"""

from __future__ import annotations

from typing import IO, Iterator

from profscope.errors import BadInput

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class Truncated(Exception):
    """The stream ended inside a field."""


def read_varint(f: IO[bytes], *, at_start: bool = False) -> int | None:
    """Read one base-128 varint; None if the stream ends cleanly before it (at_start)."""
    result = shift = 0
    while True:
        b = f.read(1)
        if not b:
            if at_start and shift == 0:
                return None
            raise Truncated
        byte = b[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise Truncated
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def encode_varint(v: int) -> bytes:
    """``v`` as a varint (negative numbers as their 64-bit two's complement, as protobuf
    writes int64)."""
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def skip_to(f: IO[bytes], target: int, size: int | None) -> None:
    """Seek forward to ``target``; raise Truncated if the stream is shorter than that."""
    if size is not None and target > size:
        raise Truncated
    f.seek(target)
    if f.tell() != target:  # gzip streams stop at their end instead of overshooting
        raise Truncated


def iter_fields(f: IO[bytes], end: int | None = None, size: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Yield (field_number, wire_type, value_or_length, value_offset) for each field.

    For LEN fields the caller may read the payload (it starts at value_offset and is
    ``length`` bytes long); whatever it does, the next iteration seeks past it.
    """
    while end is None or f.tell() < end:
        tag = read_varint(f, at_start=True)
        if tag is None:
            if end is not None:
                raise Truncated
            return
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == VARINT:
            value = read_varint(f)
            yield field, wire, value, f.tell()
        elif wire == FIXED64:
            start = f.tell()
            skip_to(f, start + 8, size)
            yield field, wire, 8, start
        elif wire == FIXED32:
            start = f.tell()
            skip_to(f, start + 4, size)
            yield field, wire, 4, start
        elif wire == LEN:
            length = read_varint(f)
            start = f.tell()
            yield field, wire, length, start
            if f.tell() != start + length:
                skip_to(f, start + length, size)
        else:
            raise ValueError(f"unsupported wire type {wire}")


def read_exact(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise Truncated
    return data


def wire_error(path: str, what: str, exc: Exception) -> BadInput:
    """A BadInput naming the file, for a stream that is not the message it claims to be."""
    if isinstance(exc, (Truncated, EOFError)):  # EOFError: a gzip stream cut short
        return BadInput(f"{path}: truncated {what} (the file ends inside a message)", file=path)
    return BadInput(f"{path}: not a valid {what}: {exc}", file=path)
