"""A plane's bytes mapped from the file (xplane_wire.map_plane_bytes) and its line runs
counted a window at a time with the mapped pages let go between (xplane_trace._line_runs
with ``drop``): the same bytes and the same runs as the read buffer and the one walk."""

from __future__ import annotations

import io

import numpy as np
import pytest

from profscope.formats import xplane, xplane_trace
from profscope.formats import xplane_wire as xw


def _planes(shared_fixtures):
    found = sorted(p for p in shared_fixtures.glob("public_profiles/xplane/*/plugins/profile/*/*.xplane.pb")
                   if "corrupt" not in str(p))
    assert found
    for path in found[:4]:
        with open(path, "rb") as f:
            stream, size = xplane.open_stream(f, str(path))
            refs = xplane.scan(stream, str(path)).planes
        for ref in refs:
            yield path, size, ref


def _runs(data, length: int, drop=None):
    b = np.frombuffer(data, np.uint8)
    return [xplane_trace._line_runs(data, b, a, z, drop) for a, z in xw.split_plane(data, length)[1]]


@pytest.mark.skipif(not xw.native_enabled(), reason="the windowed count is the native walk's")
def test_mapped_planes_read_and_count_as_read_ones(shared_fixtures, monkeypatch):
    monkeypatch.setattr(xplane_trace, "MAP_WINDOW", 4096)  # many windows, entries across their edges
    mapped, drops = 0, []
    for path, size, ref in _planes(shared_fixtures):
        pad = xw.PAD + (-ref.length) % 8
        with open(path, "rb") as f, open(path, "rb") as g, xw.planes_mapped():
            read = xw.read_plane_bytes(*xplane.open_stream(f, str(path)), ref, pad)
            data, drop = xw.map_plane_bytes(*xplane.open_stream(g, str(path)), ref, pad)
        mapped += isinstance(data, memoryview)
        assert bytes(data) == bytes(read)
        got = _runs(data, ref.length, lambda drop=drop: (drops.append(1), drop()))
        assert got == _runs(read, ref.length)
        drop()
        assert bytes(data) == bytes(read)  # the pages let go come back from the file, the pad stays 0
    assert mapped and drops


def test_a_stream_without_a_file_is_read():
    raw = b"\x00" * 64
    ref = xplane.PlaneRef("p", 8, 16)
    with xw.planes_mapped():
        data, drop = xw.map_plane_bytes(io.BytesIO(raw), len(raw), ref, pad=8)
    drop()
    assert isinstance(data, bytearray) and len(data) == 24


def test_planes_are_read_outside_a_worker(shared_fixtures):
    """Outside planes_mapped() (the server process) a plane is read, never mapped: a file
    cut short under a map would end the process with SIGBUS instead of an error."""
    path, size, ref = next(_planes(shared_fixtures))
    with open(path, "rb") as f:
        data, _ = xw.map_plane_bytes(*xplane.open_stream(f, str(path)), ref, xw.PAD + (-ref.length) % 8)
    assert isinstance(data, bytearray)
    with open(path, "rb") as f, xw.planes_mapped():
        data, _ = xw.map_plane_bytes(*xplane.open_stream(f, str(path)), ref, xw.PAD + (-ref.length) % 8)
    assert isinstance(data, memoryview)
