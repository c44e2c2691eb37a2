"""The native XPlane event decoder (formats/_xplane_scan.c) against the numpy path of
formats/xplane_wire.py: the same event runs, event columns and stats (every array, every
string end), plane by plane, on real GPU/TPU/ROCm/CPU profiles and on crafted events
that exercise protobuf's rules (repeated fields, the ``data`` oneof, unknown fields,
every stat value case); and the same errors on corrupt input."""

from __future__ import annotations

import io

import numpy as np
import pytest

from profscope.errors import BadInput
from profscope.formats import protowire as wire
from profscope.formats import xplane, xplane_allocator, xplane_trace
from profscope.formats import xplane_wire as xw
from profscope.formats.protos import xplane_pb2

pytestmark = pytest.mark.skipif(xw._native is None, reason="the _xplane_scan extension is not built")

REAL = [
    "public_profiles/xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "public_profiles/xplane/mi300_jax08_gemm/plugins/profile/jax08_gemm/tw003.xplane.pb",
    "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb",
]


def _planes(data: bytes):
    """(plane bytes padded as the readers pad them, its stat names) of every plane."""
    index = xplane.scan(io.BytesIO(data), "x")
    for ref in index.planes:
        buf = bytearray(data[ref.offset:ref.offset + ref.length]) + bytes(xw.PAD + (-ref.length) % 8)
        meta_bytes, lines = xw.split_plane(buf, ref.length)
        meta = xplane_pb2.XPlane.FromString(meta_bytes)
        yield buf, lines, {k: v.name for k, v in meta.stat_metadata.items()}


def _decode(buf, lines, stat_names, native: bool, monkeypatch):
    monkeypatch.setenv("PROFSCOPE_NATIVE", "1" if native else "0")
    b = np.frombuffer(buf, dtype=np.uint8)
    starts, ends, line_of = [], [], []
    for li, (a, z) in enumerate(lines):
        _, s, e = xw.line_events(buf, b, a, z, window=1 << 16)  # small windows: runs cut mid-chain
        starts.append(s)
        ends.append(e)
        line_of.append(np.full(len(s), li, dtype=np.int32))
    s, e = xw.cat(starts, np.int64), xw.cat(ends, np.int64)
    return s, e, xw.decode_events(b, s, e, xw.cat(line_of, np.int32), stat_names)


def _same(buf, lines, stat_names, monkeypatch) -> int:
    s1, e1, a = _decode(buf, lines, stat_names, True, monkeypatch)
    s2, e2, b = _decode(buf, lines, stat_names, False, monkeypatch)
    assert np.array_equal(s1, s2) and np.array_equal(e1, e2)
    assert a.n == b.n
    for col in ("line", "metadata_id", "offset_ps", "duration_ps"):
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype and np.array_equal(x, y), col
    assert sorted(a.kinds) == sorted(b.kinds)
    for k in a.kinds:
        ka, kb = a.kinds[k], b.kinds[k]
        for col in ("event", "ordinal", "case", "value"):
            x, y = getattr(ka, col), getattr(kb, col)
            assert x.dtype == y.dtype and np.array_equal(x, y), (k, col)
        assert ka.str_end.dtype == kb.str_end.dtype and np.array_equal(ka.str_end, kb.str_end), k
    return a.n


@pytest.mark.parametrize("rel", REAL)
def test_native_decode_equals_numpy_on_real_profiles(rel, shared_fixtures, monkeypatch):
    data = (shared_fixtures / rel).read_bytes()
    assert sum(_same(buf, lines, names, monkeypatch) for buf, lines, names in _planes(data)) > 1000


@pytest.mark.parametrize("rel", REAL[:2])
def test_trace_and_allocator_readers_agree(rel, shared_fixtures, monkeypatch):
    """End to end: the trace viewer's columns and the memory profile's events."""
    path = shared_fixtures / rel
    out = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("PROFSCOPE_NATIVE", flag)
        with open(path, "rb") as f:
            t = xplane_trace.read_trace(f, str(path), 0, "host")
        with open(path, "rb") as f:
            m = xplane_allocator.read_allocator_events(f, str(path))
        out[flag] = (t, m)
    (t1, m1), (t0, m0) = out["1"], out["0"]
    for col in ("track", "start_ps", "dur_ps", "name", "args_off", "args_len"):
        assert np.array_equal(getattr(t1, col), getattr(t0, col)), col
    assert t1.names == t0.names and t1.tracks == t0.tracks
    for col in ("time_ps", "kind", "bytes_allocated", "address", "group_id"):
        assert np.array_equal(getattr(m1, col), getattr(m0, col)), col


def _stat(mid: int, **value) -> xplane_pb2.XStat:
    return xplane_pb2.XStat(metadata_id=mid, **value)


def _crafted_plane() -> bytes:
    """One plane whose events use every rule the decoders must share: the last of a
    repeated scalar wins, ``num_occurrences`` after ``offset_ps`` clears the offset, a
    stat with two value fields keeps the last, unknown fields of each wire type are
    skipped, 0x22 bytes inside values, stats of kinds not read, long varints."""
    p = xplane_pb2.XPlane(id=1, name="/host:CPU")
    for i, name in enumerate(["tf_op", "bytes_allocated", "addr", "shape", "other", "group_id"], start=1):
        p.stat_metadata[i].id = i
        p.stat_metadata[i].name = name
    p.event_metadata[34].id = 34  # 0x22, the events tag byte, as a metadata id
    p.event_metadata[34].name = "x"
    line = xplane_pb2.XLine(id=7, name="l", timestamp_ns=5)
    rng = np.random.default_rng(0)
    raw_events = []
    for k in range(3000):
        e = xplane_pb2.XEvent(metadata_id=34 if k % 3 else k, offset_ps=int(rng.integers(0, 2**40)),
                              duration_ps=int(rng.integers(0, 2**62)))
        e.stats.append(_stat(1, str_value="a\x22b" * (k % 5)))
        e.stats.append(_stat(2, int64_value=-k))
        e.stats.append(_stat(3, uint64_value=2**64 - 1 - k))
        e.stats.append(_stat(4, ref_value=34))
        e.stats.append(_stat(5, double_value=0.5 * k))
        e.stats.append(_stat(6, bytes_value=b"\x22" * (k % 300)))
        body = e.SerializeToString()
        if k % 7 == 0:  # a second metadata_id and duration: the last wins
            body += xplane_pb2.XEvent(metadata_id=99, duration_ps=k).SerializeToString()
        if k % 11 == 0:  # num_occurrences after offset_ps: the oneof reads offset 0
            body += xplane_pb2.XEvent(num_occurrences=3).SerializeToString()
        if k % 13 == 0:  # a stat with two value fields, then unknown fields of each type
            two = _stat(1, str_value="first").SerializeToString() + _stat(1, int64_value=9).SerializeToString()
            body += xplane_pb2.XEvent(stats=[xplane_pb2.XStat.FromString(two)]).SerializeToString()
            body += bytes([0x98, 0x06, 0x05, 0xA1, 0x06]) + bytes(8) + bytes([0xAA, 0x06, 0x01, 0x22, 0xAD, 0x06]) + bytes(4)
        raw_events.append(body)
    out = line.SerializeToString()
    for body in raw_events:
        out += b"\x22" + wire.encode_varint(len(body)) + body
    plane = p.SerializeToString() + b"\x1a" + wire.encode_varint(len(out)) + out
    return b"\x0a" + wire.encode_varint(len(plane)) + plane


def test_native_decode_equals_numpy_on_crafted_events(monkeypatch):
    data = _crafted_plane()
    (buf, lines, names), = _planes(data)
    assert _same(buf, lines, names, monkeypatch) == 3000


@pytest.mark.parametrize("cut", [0.31, 0.5, 0.77])
def test_truncated_profiles_fail_alike(cut, shared_fixtures, monkeypatch, tmp_path):
    """A profile cut short is a BadInput naming the file on both paths."""
    data = (shared_fixtures / REAL[1]).read_bytes()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[:int(len(data) * cut)])
    for flag in ("1", "0"):
        monkeypatch.setenv("PROFSCOPE_NATIVE", flag)
        with open(path, "rb") as f, pytest.raises(BadInput, match="cut.xplane.pb"):
            xplane_trace.read_trace(f, str(path), 0, "host")


def test_corrupt_event_is_bad_input(monkeypatch):
    """A wire type the format never uses (3, start group) inside an event."""
    data = bytearray(_crafted_plane())
    (buf, lines, names), = _planes(bytes(data))
    b = np.frombuffer(buf, dtype=np.uint8)
    _, s, e = xw.line_events(buf, b, *lines[0])
    buf[int(s[5])] = 0x0B  # field 1, wire type 3
    for flag in ("1", "0"):
        monkeypatch.setenv("PROFSCOPE_NATIVE", flag)
        with pytest.raises(BadInput, match="bad.xplane.pb"), xw.xspace_errors("bad.xplane.pb"):
            xw.decode_events(np.frombuffer(buf, dtype=np.uint8), s, e, np.zeros(len(s), np.int32), names)


def test_native_rejects_ranges_outside_the_buffer():
    b = np.zeros(64, dtype=np.uint8)
    with pytest.raises(ValueError):
        xw._native.decode_events(b, np.array([0], np.int64), np.array([100], np.int64),
                                 np.zeros(0, np.int64), np.zeros(0, np.int16), 16)
    with pytest.raises(ValueError):
        xw._native.event_run(b, 10, 5, 5, 1)


def test_fallback_when_disabled(monkeypatch):
    monkeypatch.setenv("PROFSCOPE_NATIVE", "0")
    assert not xw.native_enabled()
    monkeypatch.setenv("PROFSCOPE_NATIVE", "1")
    assert xw.native_enabled()


@pytest.mark.parametrize("spread", [1, 1_000_003])
def test_event_names_the_same_whatever_the_metadata_ids(spread, shared_fixtures):
    """The trace reader names events through a table by metadata id where the ids are
    small (the profilers number them 1, 2, ...) and by binary search where they are not:
    the TPU fixture, its event metadata ids multiplied by ``spread`` (and one event's id
    left unknown), reads the same names."""
    path = shared_fixtures / REAL[0]
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    unknown = 0
    for plane in space.planes:
        old = dict(plane.event_metadata)
        new = {k: k * spread if 0 <= k < 2**40 else k for k in old}
        plane.event_metadata.clear()
        for k, md in old.items():
            plane.event_metadata[new[k]].CopyFrom(md)
            plane.event_metadata[new[k]].id = new[k]
        for line in plane.lines:
            for ev in line.events:
                ev.metadata_id = new.get(ev.metadata_id, ev.metadata_id)
        if not unknown and plane.lines and plane.lines[0].events:
            plane.lines[0].events[0].metadata_id = 2**40 + 1  # no such metadata: ""
            unknown = 1
    data = space.SerializeToString()
    base = xplane_trace.read_trace(io.BytesIO(path.read_bytes()), str(path), 0, "host")
    got = xplane_trace.read_trace(io.BytesIO(data), str(path), 0, "host")
    names = np.asarray(base.names, dtype=object)[base.name]
    moved = np.asarray(got.names, dtype=object)[got.name]
    differ = np.flatnonzero(names != moved)
    assert len(names) == len(moved) > 1000 and len(differ) == 1 and moved[differ[0]] == ""
