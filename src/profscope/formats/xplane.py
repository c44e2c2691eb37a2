"""XSpace profiles (``<host>.xplane.pb[.gz]``), tsl/profiler/protobuf/xplane.proto.

Two ways in:

* :func:`scan` walks the top level of an XSpace on the wire — XSpace.planes (field 1),
  XSpace.hostnames (field 4) — and records where each plane starts, reading only each
  plane's ``name`` (XPlane field 2). Listing the planes of a 300 MB profile costs a few
  reads per plane.
* :func:`read_plane` parses one plane with the generated ``xplane_pb2`` when a tool needs
  its events.

:func:`hlo_modules` lists the compiled programs a profile carries: the ``/host:metadata``
plane holds one XEventMetadata per program, named after the HLO module, with stats
``Hlo Proto`` (a serialized ``xla.HloProto``) and ``program_id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

from google.protobuf.message import DecodeError

from profscope.errors import BadInput
from profscope.formats import protowire as wire
from profscope.formats.protos import xplane_pb2

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
PROGRAM_ID_STAT = "program_id"


@dataclass(slots=True)
class PlaneRef:
    name: str
    offset: int  # of the XPlane message payload in the (decompressed) stream
    length: int


@dataclass(slots=True)
class XSpaceIndex:
    planes: list[PlaneRef] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)

    def plane(self, name: str) -> PlaneRef | None:
        return next((p for p in self.planes if p.name == name), None)


@dataclass(frozen=True, slots=True)
class ModuleRef:
    """One compiled program in a profile."""

    name: str  # XEventMetadata.name: "jit_train_step(14)" from jax 0.10, else the bare module name
    program_id: int | None

    @property
    def display_name(self) -> str:
        # XProf names a module "<module name>(<program_id>)" (module_list, memory viewer).
        # Recent XLA already writes that as the metadata name; older ones the bare name.
        if self.program_id is None or self.name.endswith(f"({self.program_id})"):
            return self.name
        return f"{self.name}({self.program_id})"


def open_stream(raw: IO[bytes], path: str | None = None) -> tuple[IO[bytes], int | None]:
    """Wrap a raw file in a gzip reader when it is gzipped (by its magic, not its name).

    Returns the stream and its size when known (None for gzip: the decompressed size is
    only known at the end). A gzip stream is a :class:`protowire.GzipBudget`: it refuses
    to decompress more than a bounded multiple of the file's size (TooLarge naming
    ``path``) and reports a corrupt stream as BadInput.
    """
    path = path or str(getattr(raw, "name", "<stream>"))
    head = raw.read(2)
    raw.seek(0)
    try:
        size = raw.seek(0, 2)
        raw.seek(0)
    except (OSError, ValueError):
        size = None
    if head == b"\x1f\x8b":
        return wire.GzipBudget(raw, path, size), None
    return raw, size


def scan(raw: IO[bytes], path: str) -> XSpaceIndex:
    """Index the planes and host names of an XSpace without parsing its events."""
    f, size = open_stream(raw, path)
    index = XSpaceIndex()
    try:
        for number, wt, length, start in wire.iter_fields(f, size=size):
            if wt != wire.LEN:
                continue
            if number == 1:  # XSpace.planes
                index.planes.append(PlaneRef(_plane_name(f, start + length, size), start, length))
            elif number == 4:  # XSpace.hostnames
                index.hostnames.append(wire.read_exact(f, length).decode("utf-8", "replace"))
    except (wire.Truncated, ValueError, OSError, EOFError) as e:
        raise wire.wire_error(path, "XSpace profile", e) from e
    return index


def _plane_name(f: IO[bytes], end: int, size: int | None) -> str:
    for number, wt, length, _start in wire.iter_fields(f, end=end, size=size):
        if number == 2 and wt == wire.LEN:  # XPlane.name
            return wire.read_exact(f, length).decode("utf-8", "replace")
    return ""


def read_plane(raw: IO[bytes], ref: PlaneRef, path: str) -> xplane_pb2.XPlane:
    """Parse one plane found by :func:`scan`."""
    f, size = open_stream(raw, path)
    try:
        wire.skip_to(f, ref.offset, size)
        wire.check_len(f, ref.offset, ref.length, size)  # a ref made by hand, or for another file
        data = wire.read_exact(f, ref.length)
        return xplane_pb2.XPlane.FromString(data)
    except (wire.Truncated, OSError, EOFError) as e:
        raise wire.wire_error(path, "XSpace profile", e) from e
    except DecodeError as e:  # upb's parser: bad tags, lengths, nesting past its limit
        raise wire.wire_error(path, f"XPlane {ref.name!r}", e) from e


def stat_value(stat: xplane_pb2.XStat, stat_names: dict[int, str]):
    """The Python value of an XStat (oneof value: double/uint64/int64/str/bytes/ref).

    A ``ref_value`` names another XStatMetadata whose *name* is the value (that is how
    short repeated strings such as allocator names are stored).
    """
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind)


def modules_in_plane(plane: xplane_pb2.XPlane, path: str = "<xplane>") -> list[ModuleRef]:
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    modules = []
    for meta in plane.event_metadata.values():
        stats = {stat_names.get(s.metadata_id, ""): s for s in meta.stats}
        if HLO_PROTO_STAT not in stats:
            continue
        pid = stats.get(PROGRAM_ID_STAT)
        modules.append(ModuleRef(meta.name, None if pid is None else _program_id(stat_value(pid, stat_names), meta.name, path)))
    return modules


def _program_id(value, module: str, path: str) -> int:
    # XLA writes program_id as an int64/uint64 XStat (tsl xplane_schema kProgramId); a
    # string, bytes or a non-integral double is not one
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise BadInput(f"{path}: module {module!r} has a program_id that is not an integer: {value!r:.80}", file=path)


def hlo_proto_bytes(raw: IO[bytes], path: str, display_name: str) -> bytes | None:
    """The serialized ``xla.HloProto`` of one module (by XProf name), or None if absent."""
    index = scan(raw, path)
    ref = index.plane(METADATA_PLANE)
    if ref is None:
        return None
    raw.seek(0)
    plane = read_plane(raw, ref, path)
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    for module in modules_in_plane(plane, path):
        if module.display_name != display_name:
            continue
        meta = next(m for m in plane.event_metadata.values() if m.name == module.name)
        for stat in meta.stats:
            if stat_names.get(stat.metadata_id) == HLO_PROTO_STAT:
                return stat.bytes_value
    return None


def hlo_modules(raw: IO[bytes], path: str) -> list[ModuleRef]:
    """The compiled programs recorded in a profile's ``/host:metadata`` plane."""
    index = scan(raw, path)
    ref = index.plane(METADATA_PLANE)
    if ref is None:
        return []
    raw.seek(0)
    return modules_in_plane(read_plane(raw, ref, path), path)
