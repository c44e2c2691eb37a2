"""Hostile XLA dump files (issue 13): numbers no XLA writes in the text dumps
(``*-buffer-assignment.txt``, ``*-memory-usage-report.txt``, ``*-live-range.txt``) and
corrupt or absurd ``*.hlo.pb[.gz]`` files. Each is refused with a 4xx naming the file
(and, for text, the line) — through the reader and through the server — in well under
10 s and 200 MB. XLA prints these numbers from int64 (sizes, offsets, ids, indices,
colors: buffer_assignment.cc, hlo_live_range.cc).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from profscope.errors import BadInput, TooLarge
from profscope.formats import buffer_assignment_text as bat
from profscope.formats import hlo_proto, live_range_text
from profscope.formats import protowire as wire
from profscope.model.protos import hlo_pb2
from profscope.tools import memory_viewer

from tests.test_hostile_xplane import CORRUPT_DEFLATE, bounded, gzip_of

pytestmark = pytest.mark.slow  # the issue-13 reproducers of XLA dumps, beside the other hostile-input files

DATA = Path(__file__).parent / "data" / "buffer_assignment" / "jax-0.10.2"
STEM = "module_0012.jit_update.cpu_after_optimizations"
BA, REPORT = f"{STEM}-buffer-assignment.txt", f"{STEM}-memory-usage-report.txt"
MODULE = "jit_update(12)"
BIG = 10**30
I64 = 2**63


def ba_text() -> str:
    return (DATA / BA).read_text()


def report_text() -> str:
    return (DATA / REPORT).read_text()


@pytest.fixture
def serve_dump(tmp_path, make_client, monkeypatch):
    """``serve_dump({name: text or bytes})`` -> (client, run) of a dump folder."""
    monkeypatch.setenv("PROFSCOPE_WORKERS", "0")  # in-process: its memory is measured here

    def make(files: dict):
        folder = tmp_path / "logs" / "dump"
        folder.mkdir(parents=True)
        for name, content in files.items():
            (folder / name).write_bytes(content.encode() if isinstance(content, str) else content)
        client = make_client(tmp_path / "logs")
        return client, client.get("/data/plugin/profile/runs").json()[0]

    return make


def assert_viewer_refuses(client, run, module, name, status, *words):
    for params in ({}, {"view": "page"}):
        res = client.get("/data/plugin/profile/data",
                         params={"run": run, "tag": "memory_viewer", "module_name": module, **params})
        assert res.status_code == status, res.text[:300]
        body = res.json()
        assert body["file"].endswith(name) and name in body["error"], body
        for w in words:
            assert w in body["error"], (w, body["error"])


# -- buffer assignment text ----------------------------------------------------------------

BA_CASES = {
    "allocation size 10^30": (("allocation 0: size 1024,", f"allocation 0: size {BIG},"), 2, "beyond int64"),
    "negative allocation size": (("allocation 0: size 1024,", "allocation 0: size -1024,"), 2, "negative"),
    "allocation index 10^30": (("allocation 0: size", f"allocation {BIG}: size"), 2, "beyond int64"),
    "parameter number 10^30": (("parameter 1,", f"parameter {BIG},"), 2, "beyond int64"),
    "value offset 2^63": (("(size=1024,offset=0)", f"(size=1024,offset={I64})"), 3, "beyond int64"),
    "value size of 5000 digits": (("(size=1024,offset=0)", f"(size={'9' * 5000},offset=0)"), 3, "beyond int64"),
    "value id 10^30": (("value: <31 ", f"value: <{BIG} "), 3, "beyond int64"),
    "value color 10^30": (("@0>", f"@{BIG}>"), 3, "beyond int64"),
}


@pytest.mark.parametrize("case", list(BA_CASES))
def test_buffer_assignment_numbers_beyond_int64(case, serve_dump):
    (old, new), line, word = BA_CASES[case]
    text = ba_text().replace(old, new, 1)
    with bounded():
        with pytest.raises(BadInput) as e:
            bat.parse_buffer_assignment(text, BA)
    assert e.value.file == BA and f"{BA}: line {line}: " in e.value.message and word in e.value.message
    client, run = serve_dump({BA: text})
    with bounded():
        assert_viewer_refuses(client, run, MODULE, BA, 422, f"line {line}", word)


def test_allocations_adding_up_beyond_int64(serve_dump):
    # two allocations of 2^62 + 2^61 bytes each: both fit int64, their sum does not
    size = (1 << 62) + (1 << 61)
    text = ("BufferAssignment:\n"
            f"allocation 0: size {size}, maybe-live-out:\n value: <1 a @0> (size={size},offset=0): f32[]\n"
            f"allocation 1: size {size}, maybe-live-out:\n value: <2 b @0> (size={size},offset=0): f32[]\n")
    with pytest.raises(BadInput, match="beyond int64"):
        bat.parse_buffer_assignment(text, BA)
    client, run = serve_dump({BA: text})
    assert_viewer_refuses(client, run, MODULE, BA, 422, "beyond int64")


def test_human_sizes_beyond_int64_are_no_size():
    # tsl's HumanReadableNumBytes of an int64 never says more than 8 EiB; 10^400 KiB
    # would be a float inf (round() raised OverflowError)
    assert bat.human_bytes("9" * 400 + ".0KiB") is None
    assert bat.human_bytes("128.0KiB") == 128 << 10


# -- memory usage report -------------------------------------------------------------------

REPORT_CASES = {
    "total 10^30": (lambda t: t.replace("Total bytes: 5332", f"Total bytes: {BIG}", 1), 2),
    "offset 10^30": (lambda t: re.sub(r";            0;", f"; {BIG};", t, count=1), 5),
    "value count 10^30": (lambda t: re.sub(r";                2;", f"; {BIG};", t, count=1), 5),
    "color 10^30": (lambda t: t.replace("(color=0)", f"(color={BIG})", 1), 1),
    "negative offset": (lambda t: re.sub(r";            0;", "; -5;", t, count=1), 5),
}


@pytest.mark.parametrize("case", list(REPORT_CASES))
def test_memory_usage_report_numbers_beyond_int64(case, serve_dump):
    edit, line = REPORT_CASES[case]
    text = edit(report_text())
    with bounded():
        with pytest.raises(BadInput) as e:
            bat.parse_memory_usage_report(text, REPORT)
    assert e.value.file == REPORT and f"{REPORT}: line {line}: " in e.value.message
    client, run = serve_dump({BA: ba_text(), REPORT: text})
    with bounded():
        assert_viewer_refuses(client, run, MODULE, REPORT, 422, f"line {line}")


def test_memory_usage_report_as_protobuf_text_beyond_int64():
    text = ("memory_space_allocation_entries {\n  total_bytes: 5\n  allocation_entries {\n"
            f"    index: 0\n    size: {BIG}\n  }}\n}}\n")
    with pytest.raises(BadInput, match="line 5: a number beyond int64"):
        bat.parse_memory_usage_report(text, REPORT)


# -- live range ----------------------------------------------------------------------------

LIVE = ("HloLiveRange (max 2):\n  InstructionSequence:\n    0:x.1\n  BufferLiveRange:\n    x.1{}:0-2\n"
        "  Live ranges at 1 (peak):\n    x.1{}: BYTES bytes (cumulative: 16384 bytes)\n")


@pytest.mark.parametrize("value", [str(BIG), str(I64), "9" * 5000])
def test_live_range_numbers_beyond_int64(value):
    with bounded():
        with pytest.raises(BadInput) as e:
            live_range_text.parse_live_range(LIVE.replace("BYTES", value), "m-live-range.txt")
    assert e.value.file == "m-live-range.txt" and "line 7" in e.value.message and "int64" in e.value.message
    assert live_range_text.parse_live_range(LIVE.replace("BYTES", "16384"), "m")["peakBytes"] == 16384


# -- HloProto ------------------------------------------------------------------------------

HLO_NAME = "module_0014.jit_train_step.cpu_after_optimizations.hlo.pb"
HLO_MODULE = "jit_train_step(14)"


@pytest.fixture
def hlo_bytes(demo_logdir) -> bytes:
    return (demo_logdir / "dumps" / "mlp" / HLO_NAME).read_bytes()


def _edit(data: bytes, change) -> bytes:
    proto = hlo_pb2.HloProto.FromString(data)
    change(proto)
    return proto.SerializeToString()


def _huge_dimensions(p):
    # the shape of the first logical buffer's instruction: f32[2^62, 2^62] is 2^126 bytes
    lb = p.buffer_assignment.logical_buffers[0]
    ins = next(i for c in p.hlo_module.computations for i in c.instructions if i.id == lb.defined_at.instruction_id)
    shape = ins.shape
    while shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    shape.dimensions[:] = [1 << 62, 1 << 62]


def _huge_logical_buffers(p):
    for lb in p.buffer_assignment.logical_buffers[:3]:
        lb.size = 1 << 62


def _huge_allocations(p):
    for a in p.buffer_assignment.buffer_allocations[:3]:
        a.size = I64 - 1


def _negative_size(p):
    p.buffer_assignment.logical_buffers[0].size = -5


def _negative_shape_index(p):
    p.buffer_assignment.logical_buffers[0].defined_at.shape_index[:] = [-(1 << 63)]  # IndexError before


HLO_CASES = {
    "huge dimensions": (_huge_dimensions, "has no byte size"),
    "logical buffers beyond int64": (_huge_logical_buffers, "beyond int64"),
    "allocations beyond int64": (_huge_allocations, "beyond int64"),
    "negative size": (_negative_size, "negative size"),
    "negative shape index": (_negative_shape_index, "negative tuple index"),
}


@pytest.mark.parametrize("case", list(HLO_CASES))
def test_hlo_proto_with_absurd_sizes(case, hlo_bytes, serve_dump):
    change, word = HLO_CASES[case]
    data = _edit(hlo_bytes, change)
    with pytest.raises(BadInput, match=word):
        memory_viewer.from_hlo(hlo_proto.parse(data, HLO_NAME), 0)
    client, run = serve_dump({HLO_NAME: data})
    with bounded():
        assert_viewer_refuses(client, run, HLO_MODULE, HLO_NAME, 422, word)


@pytest.mark.parametrize("cut", ["half", "garbage"])
def test_hlo_proto_protobuf_cannot_parse(cut, hlo_bytes, serve_dump):
    data = hlo_bytes[: len(hlo_bytes) // 2] if cut == "half" else b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 10
    with pytest.raises(BadInput, match="not a valid HloProto"):
        hlo_proto.parse(data, HLO_NAME)
    client, run = serve_dump({HLO_NAME: data})
    assert_viewer_refuses(client, run, HLO_MODULE, HLO_NAME, 422, "not a valid HloProto")


def test_hlo_proto_gzip_bomb_is_413(serve_dump):
    data = gzip_of(b"", 256 << 20)
    name = HLO_NAME + ".gz"
    with bounded():
        with pytest.raises(TooLarge) as e:
            hlo_proto.parse(data, name)
    assert f"the {wire.GZIP_FLOOR:,} bytes" in e.value.message
    client, run = serve_dump({name: data})
    with bounded():
        assert_viewer_refuses(client, run, HLO_MODULE, name, 413, f"the {wire.GZIP_FLOOR:,} bytes")


@pytest.mark.parametrize("data", [CORRUPT_DEFLATE, None], ids=["corrupt", "truncated"])
def test_hlo_proto_broken_gzip_is_422(data, hlo_bytes, serve_dump):
    data = data or gzip.compress(hlo_bytes)[:-20]
    name = HLO_NAME + ".gz"
    with pytest.raises(BadInput, match="gzip stream"):
        hlo_proto.parse(data, name)
    client, run = serve_dump({name: data})
    assert_viewer_refuses(client, run, HLO_MODULE, name, 422, "gzip stream")


def test_live_range_beside_a_buffer_assignment_through_oom_risk(serve_dump):
    # the OOM risk of a text-only module reads the -live-range.txt next to its buffer assignment
    name = f"{STEM}-live-range.txt"
    client, run = serve_dump({BA: ba_text(), name: LIVE.replace("BYTES", str(BIG))})
    with bounded():
        res = client.get("/data/plugin/profile/data", params={"run": run, "tag": "oom_risk", "module_name": MODULE})
    assert res.status_code == 422, res.text[:300]
    body = res.json()
    assert body["file"].endswith(name) and "line 7" in body["error"] and "int64" in body["error"]
