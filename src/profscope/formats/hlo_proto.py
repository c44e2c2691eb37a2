"""Serialized ``xla.HloProto`` (xla/service/hlo.proto): HloProto{hlo_module = 1,
buffer_assignment = 3}. It comes embedded in a profile (the ``Hlo Proto`` stat of a
``/host:metadata`` event metadata) or as an XLA dump file, ``*.hlo.pb`` / ``*.hlo.pb.gz``
(``--xla_dump_hlo_as_proto``); the ``after_optimizations`` one carries the buffer
assignment and its heap-simulator traces."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from profscope.errors import BadInput
from profscope.formats import protowire
from profscope.model.protos import hlo_pb2


def parse(data: bytes, path: str) -> hlo_pb2.HloProto:
    """Parse HloProto bytes (gzipped or not); a BadInput naming ``path`` if they are not one."""
    return parse_wire(data, path)[0]


def parse_wire(data: bytes, path: str) -> tuple[hlo_pb2.HloProto, bytes]:
    """:func:`parse`, and the bytes it parsed (``data``, gunzipped): the memory viewer
    indexes a module's buffers from them (tools/_hlo_index.c)."""
    if data[:2] == b"\x1f\x8b":
        # bounded: a gzip bomb is refused (TooLarge) before it is decompressed in full
        data = protowire.gunzip(data, path)
    if not data:
        raise BadInput(f"{path}: empty file, not an HloProto", file=path)
    try:
        proto = hlo_pb2.HloProto.FromString(data)
    except DecodeError as e:
        raise BadInput(f"{path}: not a valid HloProto (truncated or corrupt: {e})", file=path) from e
    if not proto.HasField("hlo_module") or not proto.hlo_module.name:
        raise BadInput(f"{path}: not an HloProto (no HLO module in it)", file=path)
    _check_sizes(proto, path)
    return proto, data


_I64_MAX = (1 << 63) - 1


def _check_sizes(proto: hlo_pb2.HloProto, path: str) -> None:
    """Refuse byte sizes no compiler writes: BufferAllocationProto.size and
    LogicalBufferProto.size are int64 byte counts, never negative, and as every buffer of
    a module lives in device memory at once at most, their sums fit int64 too. The memory
    viewer adds them up into heap curves held in numpy int64 arrays; a corrupt size
    (2^62 twice, or -1) would overflow there."""
    ba = proto.buffer_assignment
    for what, items in (("buffer allocation", ba.buffer_allocations), ("logical buffer", ba.logical_buffers)):
        total = 0
        for item in items:
            if item.size < 0:
                key = item.index if what == "buffer allocation" else item.id
                raise BadInput(f"{path}: {what} {key} has a negative size ({item.size}): corrupt HloProto", file=path)
            total += item.size
        if total > _I64_MAX:
            raise BadInput(f"{path}: the {what}s add up to {total:,} bytes, beyond int64: corrupt HloProto",
                           file=path)
