"""Just enough of the protobuf wire format to walk a large message without parsing it.

An XSpace can be hundreds of MB; listing its planes, host names or compiled modules needs
only a few of its top-level fields. These helpers read field headers (tag, length) and
seek over the rest, so a scan costs a few reads per plane instead of a full parse.
Wire types (protobuf encoding spec): 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
"""

from __future__ import annotations

import gzip
import zlib
from typing import IO, Iterator

# upb's parse error, for the readers that parse with the generated classes (re-exported so
# that they need no protobuf import of their own)
from google.protobuf.message import DecodeError  # noqa: F401

from profscope.errors import BadInput, TooLarge

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5

# What a gzipped input may decompress to: GZIP_RATIO times its compressed size, and at
# least GZIP_FLOOR. Measured (gzip -6/-9) on every real profile at hand: the public XSpaces
# (TPU inference 2.5x and 6.5x, MI300 JAX 2.5x and 3.9x, TF GPU multi-worker 7.0x) and the
# demo's (3.2x-4.5x); XLA dumps' HloProtos 2.7x-5.2x. Deflate itself tops out near 1032x
# (a run of zeros), which is what a bomb uses: 64x leaves 9x headroom over the most
# compressible real profile yet holds a 0.25 MB file to 32 MiB instead of 256 MiB. The floor
# lets tiny, highly regular profiles through and costs at most 32 MiB.
GZIP_RATIO = 64
GZIP_FLOOR = 32 << 20
PROFILES_SEEN = "real profiles compress 2.5-7x"


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
            check_len(f, start, length, size)
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


def check_len(f: IO[bytes], start: int, length: int, size: int | None) -> None:
    """Refuse a length-delimited field (wire type 2) whose declared ``length`` cannot be
    there, before anything is allocated for it: past the end of a file of known ``size``
    (Truncated), or past what a gzip stream may decompress to (:class:`GzipBudget`:
    TooLarge). A varint length can claim up to 2^70 bytes; Python's read() reserves what
    it is asked for up front, and seek() overflows beyond 2^63."""
    end = start + length
    if size is not None and end > size:
        raise Truncated
    limit = getattr(f, "limit", None)
    if limit is not None and end > limit:
        f.refuse(end, f"a field at byte {start:,} declares {length:,} bytes")


class GzipBudget:
    """A gzip stream that decompresses at most ``limit`` bytes (GZIP_RATIO x the
    compressed size, at least GZIP_FLOOR) and reports a broken stream as BadInput.

    It reads like ``gzip.GzipFile`` (read, readinto, seek, tell). Asking for a byte past
    the limit — a read, a seek, or :func:`check_len` on a field's declared length —
    raises TooLarge naming the file and the limit before the bytes are decompressed or
    allocated. zlib.error (a corrupt deflate block), gzip.BadGzipFile/OSError (bad header,
    trailing garbage, CRC) and EOFError (the stream cut short) become BadInput: zlib.error
    is not an OSError and would otherwise escape every reader as a 500.
    """

    def __init__(self, raw: IO[bytes], path: str, compressed_size: int | None, *,
                 ratio: int = GZIP_RATIO, floor: int = GZIP_FLOOR, seen: str = PROFILES_SEEN):
        self._g = gzip.GzipFile(fileobj=raw, mode="rb")
        self.path = path
        self.compressed_size = compressed_size
        self.ratio, self.floor, self.seen = ratio, floor, seen
        self.limit = max(floor, ratio * (compressed_size or 0))
        self._pos = 0

    def refuse(self, end: int, what: str | None = None):
        raise too_large(self.path, what or f"it decompresses past byte {end:,}", self.limit, self.compressed_size,
                        self.ratio, self.floor, self.seen)

    def tell(self) -> int:
        return self._pos

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = self.limit - self._pos + 1  # one byte over: tells "more" from "exactly up to"
            data = self._call(self._g.read, n)
            if len(data) == n:
                self.refuse(self._pos + n)
        else:
            if self._pos + n > self.limit:
                self.refuse(self._pos + n)
            data = self._call(self._g.read, n)
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        n = len(b)
        if self._pos + n > self.limit:
            self.refuse(self._pos + n)
        k = self._call(self._g.readinto, b)
        self._pos += k
        return k

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._pos + offset if whence == 1 else None
        if target is None:  # from the end: the decompressed size is only known there
            raise ValueError("a gzip stream seeks from its start or its position only")
        if target > self.limit:
            self.refuse(target)
        self._pos = self._call(self._g.seek, target)
        return self._pos

    def _call(self, fn, arg):
        try:
            return fn(arg)
        except EOFError as e:
            raise BadInput(f"{self.path}: truncated gzip stream (it ends before its end-of-stream marker)",
                           file=self.path) from e
        except (zlib.error, OSError) as e:  # OSError: gzip.BadGzipFile and read errors
            raise BadInput(f"{self.path}: corrupt gzip stream ({e})", file=self.path) from e

    def close(self) -> None:
        self._g.close()


def too_large(path: str, what: str, limit: int, compressed_size: int | None, ratio: int = GZIP_RATIO,
              floor: int = GZIP_FLOOR, seen: str = PROFILES_SEEN) -> TooLarge:
    size = f"its {compressed_size:,} compressed bytes" if compressed_size else "its compressed size"
    return TooLarge(
        f"{path}: {what}, beyond the {limit:,} bytes profscope decompresses of this gzipped file "
        f"({ratio}x {size}, at least {floor >> 20} MiB; {seen}). "
        f"If the file is genuine, gunzip it: an uncompressed file has no such limit",
        file=path)


def gunzip(data: bytes, path: str, *, ratio: int = GZIP_RATIO, floor: int = GZIP_FLOOR,
           seen: str = PROFILES_SEEN) -> bytes:
    """``data`` decompressed within the same budget as :class:`GzipBudget` (for inputs
    read whole, such as ``*.hlo.pb.gz``)."""
    limit = max(floor, ratio * len(data))
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16+: the gzip wrapper (RFC 1952)
    out: list[bytes] = []
    got = 0
    buf = data
    try:
        while True:
            chunk = d.decompress(buf, min(1 << 24, limit + 1 - got))
            got += len(chunk)
            if got > limit:
                raise too_large(path, f"it decompresses past byte {limit:,}", limit, len(data), ratio, floor, seen)
            out.append(chunk)
            if d.eof:  # a further member (cat a.gz b.gz) continues, as gzip.decompress reads it
                buf = d.unused_data.lstrip(b"\0")  # gzip allows zero padding after a member
                if not buf:
                    break
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                continue
            buf = d.unconsumed_tail
            if not buf and not chunk:
                raise BadInput(f"{path}: truncated gzip stream (it ends before its end-of-stream marker)", file=path)
    except zlib.error as e:
        raise BadInput(f"{path}: corrupt gzip stream ({e})", file=path) from e
    return b"".join(out)


def wire_error(path: str, what: str, exc: Exception) -> BadInput:
    """A BadInput naming the file, for a stream that is not the message it claims to be."""
    if isinstance(exc, BadInput):  # already names the file (GzipBudget, check_len)
        return exc
    if isinstance(exc, (Truncated, EOFError)):  # EOFError: a gzip stream cut short
        return BadInput(f"{path}: truncated {what} (the file ends inside a message)", file=path)
    return BadInput(f"{path}: not a valid {what}: {exc}", file=path)
