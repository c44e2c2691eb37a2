"""pprof ``Profile`` files: what ``jax.profiler.save_device_memory_profile()`` writes.

The file is a gzipped ``perftools.profiles.Profile`` (google/pprof proto/profile.proto;
our wire-compatible copy is protos/pprof.proto). JAX writes one sample per live buffer or
loaded executable: ``sample_type`` = ``[allocations/count, space/bytes]``, the sample's
``location_id`` its Python stack (leaf first), and the string labels ``kind``
(``buffer``/``executable``) and ``device`` (``cpu:0``, ``cuda:0``, ``TPU_0``; executables
carry none). Strings are indices into ``string_table`` (entry 0 is always "").

Only protobuf data is decoded: nothing in the file is executed. Every way a file can fail
to be a Profile (a truncated stream, a ``value`` written with a non-varint wire type, an
index past the string table, a location id no Location has) is a :class:`BadInput` naming
the file.
"""

from __future__ import annotations

from google.protobuf import unknown_fields

from profscope.errors import BadInput
from profscope.formats import protowire
from profscope.formats.pprof_head import is_pprof_head  # noqa: F401 - the sniffer, re-exported
from profscope.formats.protos import pprof_pb2
from profscope.model.pprof_profile import Frame, Profile, Sample

def _parse(data: bytes, path: str) -> pprof_pb2.Profile:
    # profile.proto: "On-disk, the serialized proto must be gzip-compressed"; pprof reads
    # an uncompressed one too
    raw = protowire.gunzip(data, path) if data[:2] == b"\x1f\x8b" else data
    msg = pprof_pb2.Profile()
    try:
        msg.ParseFromString(raw)
    except protowire.DecodeError as e:
        raise BadInput(f"{path}: not a pprof Profile, or a truncated one ({e})", file=path) from e
    return msg


def _check_values(msg: pprof_pb2.Profile, path: str) -> None:
    """Sample.value is ``repeated int64``: varints (wire type 0), packed or not. Written
    with another wire type, protobuf keeps it as an unknown field and the sample silently
    has fewer values; that is a broken file, said as such."""
    n = len(msg.sample_type)
    for i, s in enumerate(msg.sample):
        for u in unknown_fields.UnknownFieldSet(s):
            if u.field_number in (1, 2):
                what = "location_id" if u.field_number == 1 else "value"
                raise BadInput(f"{path}: sample {i}'s {what} is not an integer (wire type {u.wire_type}, "
                               f"profile.proto's repeated int64 is a varint)", file=path)
        if len(s.value) != n:
            raise BadInput(f"{path}: sample {i} has {len(s.value)} values, its sample_type names {n}", file=path)


def read_profile(data: bytes, path: str) -> Profile:
    """A pprof file's bytes (gzipped or not) as plain data; BadInput naming ``path`` for
    anything that is not a well-formed Profile."""
    msg = _parse(data, path)
    strings = list(msg.string_table)

    def s(i: int, what: str) -> str:
        if not 0 <= i < len(strings):
            raise BadInput(f"{path}: {what} names string {i}, past the string table's {len(strings)}", file=path)
        return strings[i]

    _check_values(msg, path)
    sample_types = [(s(t.type, "a sample_type"), s(t.unit, "a sample_type")) for t in msg.sample_type]
    functions = {f.id: f for f in msg.function}
    frames: list[Frame] = []
    frame_ids: dict[Frame, int] = {}
    # location id -> its frames, the caller last (profile.proto: line[0] is the innermost
    # inlined function, the last entry the caller it was inlined into)
    loc_frames: dict[int, list[int]] = {}
    for loc in msg.location:
        own = []
        for ln in loc.line:
            fn = functions.get(ln.function_id)
            if fn is None:
                raise BadInput(f"{path}: location {loc.id} names function {ln.function_id}, which the profile lacks",
                               file=path)
            frame = Frame(s(fn.name, "a function"), s(fn.filename, "a function"), int(ln.line))
            own.append(frame_ids.setdefault(frame, len(frame_ids)))
            if len(frame_ids) > len(frames):
                frames.append(frame)
        loc_frames[loc.id] = own
    samples = []
    for i, sm in enumerate(msg.sample):
        stack: list[int] = []
        for lid in sm.location_id:  # leaf first
            if lid not in loc_frames:
                raise BadInput(f"{path}: sample {i} names location {lid}, which the profile lacks", file=path)
            stack.extend(loc_frames[lid])
        labels = {s(lb.key, "a label"): (s(lb.str, "a label") if lb.str else int(lb.num)) for lb in sm.label}
        samples.append(Sample(tuple(int(v) for v in sm.value), tuple(reversed(stack)), labels))
    comments = [s(c, "a comment") for c in msg.comment]
    return Profile(path, int(msg.time_nanos), sample_types, frames, samples, comments)
