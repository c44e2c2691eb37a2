"""The memory viewer's index of a module's logical buffers in C (tools/_hlo_index.c,
``memory_viewer._buffers_native``) against its Python twin (``_buffers_py``): the same
buffers, shapes and payload on every module of the XProf goldens, of the real
GPU/TPU/ROCm profiles in ``shared/fixtures/public_profiles`` and of a big synthetic
module; where the twin refuses a module the C pass declines and the error is the twin's;
where protobuf would merge a message given twice the C pass declines too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from profscope.errors import ProfscopeError
from profscope.formats import hlo_proto, xplane
from profscope.formats.protowire import encode_varint
from profscope.model.protos import hlo_pb2
from profscope.tools import memory_viewer as mv
from tests.test_memory_viewer import CASES, _case_id, _input_bytes
from tests.test_memory_viewer_native import PUBLIC

pytestmark = pytest.mark.skipif(mv._hlo_index is None, reason="the native buffer index is not built")

REPO = Path(__file__).resolve().parent.parent


def _index(m: mv._Module) -> tuple:
    lbs = {k: (lb.size, lb.unpadded, lb.color, lb.alloc, lb.offset, lb.instr.id, lb.shape_index, lb.shape_key,
               m.shape_string(lb)) for k, lb in m.lbs.items()}
    shapes = {k: (e[0].SerializeToString(deterministic=True), e[1]) for k, e in m.shape_cache.items()}
    return lbs, shapes


def _outcome(fn):
    try:
        return "ok", fn()
    except ProfscopeError as e:
        return type(e).__name__, e.message


def _check(data: bytes, space: int, monkeypatch) -> str:
    """The twin's index and payload against the native pass's, on a module's bytes; the
    outcome's kind ("ok" or the twin's error class)."""
    hlo, wire = hlo_proto.parse_wire(data, "module.hlo.pb")
    twin = _outcome(lambda: _index(mv._Module(hlo)))
    if twin[0] == "ok":
        assert mv._buffers_native(wire, mv._Module(hlo).instrs) is not None, "the C pass declined a module the twin reads"
    assert _outcome(lambda: _index(mv._Module(hlo, wire=wire))) == twin
    if twin[0] == "ok":
        assert (_outcome(lambda: mv.view_and_summary(hlo, space, wire=wire))
                == _outcome(lambda: mv.view_and_summary(hlo, space)))
        assert _outcome(lambda: mv.summary(hlo, space, wire=wire)) == _outcome(lambda: mv.summary(hlo, space))
    monkeypatch.setenv("PROFSCOPE_NATIVE", "0")  # the switch turns this pass off too
    assert mv._index_native() is False
    return twin[0]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_goldens_native_index_equals_twin(case, monkeypatch):
    _check(_input_bytes(case), case["space"], monkeypatch)


@pytest.mark.parametrize("case", PUBLIC, ids=lambda c: f"{c['case']}/{c['module']}/{c['space']}")
def test_public_profiles_native_index_equals_twin(case, shared_fixtures, monkeypatch):
    path = str(shared_fixtures / case["input"])
    with open(path, "rb") as f:
        data = xplane.hlo_proto_bytes(f, path, case["module"])
    assert _check(data, case["space"], monkeypatch) == "ok"


def _synthetic(buffers: int, events: int, seed: int) -> bytes:
    spec = importlib.util.spec_from_file_location("bench_memory_viewer", REPO / "benchmarks" / "bench_memory_viewer.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bytes(bench.build_synthetic(buffers, events, seed=seed))


def test_big_synthetic_native_index_equals_twin(monkeypatch):
    """bench_memory_viewer.py's synthetic module (the compare_peers row's, smaller): tuple
    shapes and shape indexes, a few distinct shapes shared by thousands of buffers."""
    assert _check(_synthetic(3000, 20_000, 1), 0, monkeypatch) == "ok"


def _edited(edit) -> bytes:
    hlo = hlo_pb2.HloProto.FromString(_synthetic(200, 1000, 2))
    edit(hlo)
    return hlo.SerializeToString()


def test_modules_the_twin_refuses_are_declined_with_its_error():
    def unknown_instruction(h):
        h.buffer_assignment.logical_buffers[5].defined_at.instruction_id = 10**9

    def negative_index(h):
        h.buffer_assignment.logical_buffers[5].defined_at.shape_index.append(-1)

    for edit, words in ((unknown_instruction, "which the module does not have"), (negative_index, "negative tuple index")):
        hlo, wire = hlo_proto.parse_wire(_edited(edit), "m")
        assert mv._buffers_native(wire, {}) is None  # declined before it reads the instructions
        kind, message = _outcome(lambda: mv._Module(hlo, wire=wire))
        assert kind == "BadInput" and words in message, message
        assert (kind, message) == _outcome(lambda: mv._Module(hlo))


def _with_buffers(hlo, payloads: list[bytes], more_module: bytes = b"") -> bytes:
    """``hlo``'s bytes with its logical buffers written as ``payloads`` (raw
    LogicalBufferProto bytes each) and ``more_module`` added to its module's bytes."""
    rest = hlo_pb2.BufferAssignmentProto()
    rest.CopyFrom(hlo.buffer_assignment)
    del rest.logical_buffers[:]
    ba = b"".join(_field(1, p) for p in payloads) + rest.SerializeToString()
    return _field(1, hlo.hlo_module.SerializeToString() + more_module) + _field(3, ba)


def _same(wire: bytes, declined: bool) -> None:
    parsed = hlo_pb2.HloProto.FromString(wire)
    twin = mv._Module(parsed)
    assert (mv._buffers_native(wire, twin.instrs) is None) == declined
    assert _index(mv._Module(parsed, wire=wire)) == _index(twin)


def test_merged_and_repeated_fields_read_as_protobuf_reads_them():
    """A message protobuf would merge (a location, a shape, the buffer assignment given
    twice) is declined; an unpacked shape index, a scalar given twice and an instruction
    id given twice (the last instruction's) are read as protobuf and the twin read them."""
    hlo = hlo_pb2.HloProto.FromString(_synthetic(200, 1000, 3))
    buffers = [b.SerializeToString() for b in hlo.buffer_assignment.logical_buffers]
    assert hlo_pb2.HloProto.FromString(_with_buffers(hlo, buffers)) == hlo
    _same(_with_buffers(hlo, buffers), declined=False)

    lb = hlo.buffer_assignment.logical_buffers[7]
    merged = buffers[:7] + [buffers[7] + _field(3, _varint_field(4, lb.defined_at.instruction_id))] + buffers[8:]
    _same(_with_buffers(hlo, merged), declined=True)
    ins = next(i for c in hlo.hlo_module.computations for i in c.instructions if i.shape.tuple_shapes)
    shape = ins.shape.SerializeToString()
    two_shapes = _field(3, _field(2, _varint_field(35, 10**6) + _field(3, shape) + _field(3, shape)))
    _same(_with_buffers(hlo, buffers, two_shapes), declined=True)
    assert mv._buffers_native(_with_buffers(hlo, buffers) + _field(3, b""), {}) is None

    one = hlo.buffer_assignment.logical_buffers[9]
    loc = _varint_field(4, ins.id) + _varint_field(3, 0) + _varint_field(3, 1)  # unpacked
    unpacked = (_varint_field(1, one.id) + _varint_field(2, 1) + _field(3, loc) + _varint_field(4, one.color)
                + _varint_field(2, one.size))
    wire = _with_buffers(hlo, buffers[:9] + [unpacked] + buffers[10:])
    parsed = hlo_pb2.HloProto.FromString(wire).buffer_assignment.logical_buffers[9]
    assert list(parsed.defined_at.shape_index) == [0, 1] and parsed.size == one.size
    _same(wire, declined=False)

    # the instruction of buffer 9 again, later, with another shape: the last one wins
    other = hlo_pb2.HloInstructionProto()
    other.CopyFrom(ins)
    other.shape.CopyFrom(ins.shape.tuple_shapes[0])
    _same(_with_buffers(hlo, buffers[:9] + [unpacked] + buffers[10:], _field(3, _field(2, other.SerializeToString()))),
          declined=False)


def _varint_field(num: int, value: int) -> bytes:
    return encode_varint(num << 3) + encode_varint(value)


def _field(num: int, payload: bytes) -> bytes:
    return encode_varint(num << 3 | 2) + encode_varint(len(payload)) + payload


def test_mangled_bytes_are_declined_or_read_as_the_twin_reads_them():
    """Random bytes changed in a module (a few, or the tail cut): the pass never reads past
    its input, and where protobuf parses the result and the twin indexes it, the pass
    declines or gives the twin's index."""
    import random

    from google.protobuf.message import DecodeError

    wire = _synthetic(300, 2000, 5)
    rng = random.Random(40)
    compared = 0
    for _ in range(1000):
        w = bytearray(wire)
        for _ in range(rng.randint(1, 4)):
            w[rng.randrange(len(w))] = rng.randrange(256)
        if rng.random() < 0.3:
            w = w[:rng.randrange(len(w))]
        data = bytes(w)
        native = mv._hlo_index.index_buffers(data)  # must not crash, whatever the bytes
        try:
            hlo = hlo_pb2.HloProto.FromString(data)
            twin = _index(mv._Module(hlo))
        except (DecodeError, ProfscopeError, TypeError):
            continue
        if native is not None:
            assert _index(mv._Module(hlo, wire=data)) == twin
            compared += 1
    assert compared > 50, compared
