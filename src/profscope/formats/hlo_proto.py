"""Serialized ``xla.HloProto`` (xla/service/hlo.proto): HloProto{hlo_module = 1,
buffer_assignment = 3}. It comes embedded in a profile (the ``Hlo Proto`` stat of a
``/host:metadata`` event metadata) or as an XLA dump file, ``*.hlo.pb`` / ``*.hlo.pb.gz``
(``--xla_dump_hlo_as_proto``); the ``after_optimizations`` one carries the buffer
assignment and its heap-simulator traces."""

from __future__ import annotations

import gzip
import zlib

from google.protobuf.message import DecodeError

from profscope.errors import BadInput
from profscope.formats.protos import hlo_pb2


def parse(data: bytes, path: str) -> hlo_pb2.HloProto:
    """Parse HloProto bytes (gzipped or not); a BadInput naming ``path`` if they are not one."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise BadInput(f"{path}: truncated or corrupt gzip ({e})", file=path) from e
    if not data:
        raise BadInput(f"{path}: empty file, not an HloProto", file=path)
    try:
        proto = hlo_pb2.HloProto.FromString(data)
    except DecodeError as e:
        raise BadInput(f"{path}: not a valid HloProto (truncated or corrupt: {e})", file=path) from e
    if not proto.HasField("hlo_module") or not proto.hlo_module.name:
        raise BadInput(f"{path}: not an HloProto (no HLO module in it)", file=path)
    return proto
