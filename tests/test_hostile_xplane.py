"""Hostile XSpace profiles (issue 13): each reproducer is built here, byte by byte, and
must be refused cheaply — through the reader and through the server — with a 4xx whose
JSON names the file (and the limit, for a budget), in well under 10 s and 200 MB.

The files are protobuf wire bytes written by hand (tsl/profiler/protobuf/xplane.proto:
XSpace.planes = 1, XSpace.hostnames = 4; XPlane.name = 2, XPlane.lines = 3,
XPlane.event_metadata = 4), gzip bombs are deflated zeros streamed through zlib (never
held decompressed).
"""

from __future__ import annotations

import gzip
import io
import resource
import tracemalloc
import zlib
from contextlib import contextmanager

import pytest

from profscope.errors import BadInput, TooLarge
from profscope.formats import protowire as wire
from profscope.formats import xplane, xplane_allocator, xplane_devices, xplane_module_time, xplane_op_metrics, xplane_trace
from profscope.formats.protowire import encode_varint as V
from tests.fixtures.cpu import cpu_seconds

pytestmark = pytest.mark.slow  # the issue-13 reproducers (gzip bombs, huge lengths): 6.5 s on 2 cores

SECONDS = 10  # CPU seconds (tests/fixtures/cpu.py)
MEMORY = 200 << 20
LIMIT_TEXT = f"the {wire.GZIP_FLOOR:,} bytes"  # what a bomb's message names as the limit


def tag(number: int, wire_type: int) -> bytes:
    return V(number << 3 | wire_type)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return tag(number, wire.LEN) + V(len(payload)) + payload


def plane(name: str, *fields: bytes) -> bytes:
    return field(1, field(2, name.encode()) + b"".join(fields))  # XSpace.planes{XPlane.name}


def gzip_of(prefix: bytes, zeros: int, suffix: bytes = b"") -> bytes:
    """gzip of ``prefix``, ``zeros`` zero bytes and ``suffix``, compressed 1 MiB at a time."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [c.compress(prefix)]
    chunk = bytes(1 << 20)
    for _ in range(zeros >> 20):
        out.append(c.compress(chunk))
    out += [c.compress(bytes(zeros & ((1 << 20) - 1)) + suffix), c.flush()]
    return b"".join(out)


def bomb_in_a_plane(n: int = 256 << 20) -> bytes:
    """The issue's bomb: ~0.25 MB of gzip, a plane whose unknown field 99 holds 256 MiB."""
    head = field(2, b"/host:metadata") + tag(99, wire.LEN) + V(n)
    return gzip_of(tag(1, wire.LEN) + V(len(head) + n) + head, n)


def bomb_at_top_level(n: int = 256 << 20) -> bytes:
    """256 MiB in an unknown XSpace field (15) after a plane: scan seeks over it."""
    return gzip_of(plane("/host:CPU") + tag(15, wire.LEN) + V(n), n)


def bomb_of_many_fields(count: int = 48, each: int = 1 << 20) -> bytes:
    """Many 1 MiB unknown fields: each fits the per-field check, their sum does not."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [c.compress(plane("/host:CPU"))]
    for _ in range(count):
        out.append(c.compress(tag(15, wire.LEN) + V(each) + bytes(each)))
    return b"".join(out) + c.flush()


CORRUPT_DEFLATE = gzip.compress(b"", mtime=0)[:10] + b"\xff" * 17  # RFC 1952 header, then deflate block type 3 (reserved)


@contextmanager
def bounded():
    """CPU time and memory of the block: under SECONDS, tracemalloc peak and ru_maxrss
    growth under MEMORY (conversions run in this process: PROFSCOPE_WORKERS=0)."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    tracemalloc.start()
    t0 = cpu_seconds()
    try:
        yield
    finally:
        dt = cpu_seconds() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - rss0
    assert dt < SECONDS, f"took {dt:.1f} CPU s"
    assert peak < MEMORY, f"tracemalloc peak {peak >> 20} MiB"
    assert grew < MEMORY, f"ru_maxrss grew {grew >> 20} MiB"


@pytest.fixture
def serve(tmp_path, make_client, monkeypatch):
    """``serve(data, name)`` -> (client, run, display path of the file) for a log dir
    holding one session with that xplane."""
    monkeypatch.setenv("PROFSCOPE_WORKERS", "0")  # in-process: its memory is measured here

    def make(data: bytes, name: str = "host.xplane.pb.gz"):
        session = tmp_path / "logs" / "plugins" / "profile" / "sess"
        session.mkdir(parents=True)
        (session / name).write_bytes(data)
        client = make_client(tmp_path / "logs")
        return client, client.get("/data/plugin/profile/runs").json()[0], name

    return make


ENDPOINTS = [
    ("module_list", {}),
    ("data", {"tag": "trace_viewer@", "host": "host"}),
    ("data", {"tag": "memory_profile", "host": "host"}),
    ("data", {"tag": "memory_viewer", "host": "host", "module_name": "m(1)"}),
    ("data", {"tag": "hlo_stats", "host": "host"}),
    ("data", {"tag": "op_profile", "host": "host"}),
]


def assert_refused(client, run, name, status, *words):
    """Every endpoint that reads the file answers ``status`` with the one error shape,
    naming the file and ``words``; run_tools and hosts never 5xx."""
    for endpoint in ("run_tools", "hosts"):
        assert client.get(f"/data/plugin/profile/{endpoint}", params={"run": run}).status_code < 500
    for endpoint, params in ENDPOINTS:
        res = client.get(f"/data/plugin/profile/{endpoint}", params={"run": run, **params})
        assert res.status_code == status, (endpoint, params, res.text[:300])
        body = res.json()
        assert body["ok"] is False and body["status"] == status
        assert body["file"].endswith(name) and name in body["error"], body
        for w in words:
            assert w in body["error"], (w, body["error"])


READERS = [
    xplane.scan,
    xplane.hlo_modules,
    lambda f, p: xplane_trace.read_trace(f, p, 1, "host"),
    xplane_allocator.read_allocator_events,
    xplane_devices.device_capabilities,
    xplane_module_time.module_run_times,
    xplane_op_metrics.read_op_metrics,
]


def assert_readers_refuse(data: bytes, error: type, *words):
    for read in READERS:
        with pytest.raises(error) as e:
            read(io.BytesIO(data), "x.xplane.pb.gz")
        assert e.value.file == "x.xplane.pb.gz" and "x.xplane.pb.gz" in e.value.message
        for w in words:
            assert w in e.value.message, (w, e.value.message)


# -- gzip bombs ----------------------------------------------------------------------------


@pytest.mark.parametrize("build", [bomb_in_a_plane, bomb_at_top_level, bomb_of_many_fields])
def test_gzip_bomb_is_refused_with_the_limit(build, serve):
    data = build()
    assert len(data) < 300_000
    with bounded():
        assert_readers_refuse(data, TooLarge, LIMIT_TEXT, "gunzip")
    client, run, name = serve(data)
    with bounded():
        assert_refused(client, run, name, 413, LIMIT_TEXT, f"{wire.GZIP_RATIO}x its {len(data):,} compressed bytes")


def test_declared_length_beyond_the_budget_is_refused_before_decompressing():
    # a 2 GiB plane in a 40-byte file: refused at the length, nothing decompressed
    data = gzip.compress(tag(1, wire.LEN) + V(2 << 30) + field(2, b"/host:CPU"))
    with bounded():
        t = cpu_seconds()
        assert_readers_refuse(data, TooLarge, LIMIT_TEXT, f"{2 << 30:,}")
        assert cpu_seconds() - t < 1


def test_the_budget_grows_with_the_compressed_size():
    f = wire.GzipBudget(io.BytesIO(gzip.compress(b"x")), "a.gz", 10 << 20)
    assert f.limit == wire.GZIP_RATIO * (10 << 20)
    assert wire.GzipBudget(io.BytesIO(gzip.compress(b"x")), "a.gz", 1000).limit == wire.GZIP_FLOOR


def test_real_profiles_compress_far_below_the_ratio(demo_logdir, shared_fixtures_if_any):
    """The limit's headroom, measured: real XSpaces deflate 2.5-7x (protowire's comment)."""
    paths = sorted(demo_logdir.rglob("*.xplane.pb"))
    if shared_fixtures_if_any:  # optional: more real profiles
        paths += sorted((shared_fixtures_if_any / "public_profiles" / "xplane").rglob("*.xplane.pb"))
    assert paths
    for p in paths:
        data = p.read_bytes()
        ratio = len(data) / len(zlib.compress(data, 9))
        assert ratio < wire.GZIP_RATIO / 4, (p, ratio)


def test_gzipped_demo_profile_reads_as_before(demo_logdir):
    data = next(demo_logdir.glob("transformer/plugins/profile/*/demo-host.xplane.pb")).read_bytes()
    zipped = gzip.compress(data)
    assert xplane.hlo_modules(io.BytesIO(zipped), "a.gz") == xplane.hlo_modules(io.BytesIO(data), "a")
    events = xplane_trace.read_trace(io.BytesIO(zipped), "a.gz", 1, "h")
    assert len(events.tracks) == len(xplane_trace.read_trace(io.BytesIO(data), "a", 1, "h").tracks)


def test_gunzip_keeps_the_same_budget():
    assert wire.gunzip(gzip.compress(b"abc") + gzip.compress(b"de"), "f") == b"abcde"  # two members
    bomb = gzip_of(b"", 64 << 20)
    with bounded():
        with pytest.raises(TooLarge) as e:
            wire.gunzip(bomb, "m.hlo.pb.gz")
    assert "m.hlo.pb.gz" in e.value.message and LIMIT_TEXT in e.value.message


# -- broken gzip streams -------------------------------------------------------------------


# mtime=0 and named ids: a gzip header holds the time it was made, and pytest-xdist
# refuses a run whose two workers collected different ids (the bytes were the ids, and
# one CI run's workers collected them a second apart).
@pytest.mark.parametrize("data, words", [
    (CORRUPT_DEFLATE, ("corrupt gzip stream", "invalid block type")),  # zlib.error
    (gzip.compress(plane("/host:CPU") * 50, mtime=0)[:-12], ("truncated",)),  # EOFError
    (gzip.compress(plane("/host:CPU"), mtime=0) + b"trailing garbage", ("corrupt gzip stream",)),  # BadGzipFile
    (gzip.compress(b"", mtime=0)[:4] + b"\xff" * 12, ("gzip",)),  # a bad header
], ids=["corrupt-deflate", "truncated", "trailing-garbage", "bad-header"])
def test_broken_gzip_is_422_on_every_endpoint(data, words, serve):
    assert len(data) < 200
    assert_readers_refuse(data, BadInput, *words)
    client, run, name = serve(data)
    with bounded():
        assert_refused(client, run, name, 422, *words)


# -- lengths beyond any file ---------------------------------------------------------------


@pytest.mark.parametrize("data", [
    tag(1, wire.LEN) + V(1 << 63) + field(2, b"/host:CPU"),  # XSpace.planes of 2^63 bytes
    tag(4, wire.LEN) + V(1 << 63) + b"host",  # XSpace.hostnames of 2^63 bytes (read() overflowed)
    tag(4, wire.LEN) + b"\xff" * 9 + b"\x7f" + b"host",  # a 10-byte varint: beyond 2^64
    tag(1, wire.LEN) + V(1 << 40) + field(2, b"/host:CPU"),  # 1 TiB: read() would reserve it
], ids=["plane-2^63", "hostname-2^63", "varint-2^70", "plane-1TiB"])
@pytest.mark.parametrize("zipped", [False, True], ids=["plain", "gzip"])
def test_huge_lengths_are_refused(data, zipped, serve):
    if zipped:
        data = gzip.compress(data)
    with bounded():
        # plain: past the file's end (422, truncated); gzip: past the budget (413)
        assert_readers_refuse(data, TooLarge if zipped else BadInput, "truncated" if not zipped else LIMIT_TEXT)
    client, run, name = serve(data, "host.xplane.pb.gz" if zipped else "host.xplane.pb")
    with bounded():
        assert_refused(client, run, name, 413 if zipped else 422)


@pytest.mark.parametrize("zipped", [False, True], ids=["plain", "gzip"])
def test_huge_length_inside_a_plane_is_refused(zipped, serve):
    # XPlane.event_metadata (4) declaring 2^63 + 5 bytes inside a 30-byte plane: the
    # wire readers refuse the length, protobuf's parser (hlo_modules) its DecodeError
    bad = tag(4, wire.LEN) + V((1 << 63) + 5)
    data = plane("/host:metadata", bad) + plane("/device:GPU:0", bad)
    if zipped:
        data = gzip.compress(data)
    with bounded():
        for read in READERS[1:]:  # scan reads only the planes' names
            with pytest.raises(BadInput) as e:
                read(io.BytesIO(data), "x.xplane.pb.gz")
            assert e.value.file == "x.xplane.pb.gz"
    client, run, name = serve(data, "host.xplane.pb.gz" if zipped else "host.xplane.pb")
    for endpoint, params in ENDPOINTS:
        res = client.get(f"/data/plugin/profile/{endpoint}", params={"run": run, **params})
        assert res.status_code in (413, 422) and name in res.json()["error"], res.text


# -- protobuf's own errors -----------------------------------------------------------------


def test_a_plane_protobuf_cannot_parse_is_422(serve):
    # /host:metadata whose event_metadata (field 4) holds a field of wire type 7 (no such type)
    data = plane("/host:metadata", field(4, b"\x0f\x01"))
    # the readers of /host:metadata (scan reads only the names; devices and module times
    # skip this plane)
    for read in (xplane.hlo_modules, READERS[2], xplane_allocator.read_allocator_events):
        with pytest.raises(BadInput) as e:  # upb's DecodeError, or the wire readers' own check
            read(io.BytesIO(data), "x.xplane.pb")
        assert e.value.file == "x.xplane.pb" and "not a valid" in e.value.message
    client, run, name = serve(data, "host.xplane.pb")
    res = client.get("/data/plugin/profile/module_list", params={"run": run})
    assert res.status_code == 422 and name in res.json()["error"]


def test_a_program_id_that_is_not_an_integer_is_422(serve):
    # a module in /host:metadata whose program_id stat is a string (XStat.str_value)
    # instead of XLA's int64
    from profscope.formats.protos import xplane_pb2

    p = xplane_pb2.XPlane(name="/host:metadata")
    p.stat_metadata[1].name = "Hlo Proto"
    p.stat_metadata[2].name = "program_id"
    md = p.event_metadata[7]
    md.id, md.name = 7, "m"
    md.stats.add(metadata_id=1, bytes_value=b"\x0a\x00")
    md.stats.add(metadata_id=2, str_value="abc")
    data = field(1, p.SerializeToString())
    with pytest.raises(BadInput, match="program_id"):
        xplane.hlo_modules(io.BytesIO(data), "x.xplane.pb")
    client, run, name = serve(data, "host.xplane.pb")
    res = client.get("/data/plugin/profile/module_list", params={"run": run})
    assert res.status_code == 422 and "program_id" in res.json()["error"] and name in res.json()["error"]


def test_an_event_whose_stats_do_not_parse_shows_a_note():
    args = xplane_trace.event_args(b"\x0a\xff", {"stat_names": {}, "events": {}})
    assert list(args) == ["profscope_error"]
