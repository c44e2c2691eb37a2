"""Is this the start of a gzipped pprof Profile? Decided from a file's first bytes, for run
discovery (app/discovery.py), without protobuf: listing runs imports no reader."""

from __future__ import annotations

import zlib


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("the head ends inside a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


# Top-level Profile fields and their wire types (profile.proto): what the sniffer accepts.
# Packed repeated int64 ``comment`` (13) may also be written unpacked (varint).
_PROFILE_FIELDS = {1: {2}, 2: {2}, 3: {2}, 4: {2}, 5: {2}, 6: {2}, 7: {0}, 8: {0}, 9: {0}, 10: {0}, 11: {2},
                   12: {0}, 13: {0, 2}, 14: {0}, 15: {0}, 16: {2}}
SNIFF_TEXT = 16 << 10  # decompressed from the head: enough for the first fields


def is_pprof_head(head: bytes) -> bool:
    """Whether a file's first bytes are a gzipped pprof Profile: the gzip decompresses,
    and every top-level field of what it yields is one of the Profile's with its wire
    type, a ``sample_type`` or ``string_table`` among them (a head that stops inside a
    field is judged on the fields before it). Cheap: the head only, no full parse."""
    if head[:2] != b"\x1f\x8b":
        return False
    try:
        buf = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, SNIFF_TEXT)
    except zlib.error:
        return False
    pos, seen = 0, set()
    while pos < len(buf):
        try:
            tag, pos = _varint(buf, pos)
        except ValueError:  # the head ends inside a tag
            break
        number, wire = tag >> 3, tag & 7
        if wire not in _PROFILE_FIELDS.get(number, ()):
            return False
        seen.add(number)
        try:
            if wire == 0:
                _, pos = _varint(buf, pos)
            else:
                length, pos = _varint(buf, pos)
                pos += length
        except ValueError:  # the head ends inside a value
            break
    return bool(seen & {1, 6})
