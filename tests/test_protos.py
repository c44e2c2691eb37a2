"""Our own protos: generated code is fresh, field numbers are the upstream ones,
and real files parse and re-serialize unchanged.

Real inputs: the TensorFlow BFC-allocator profile in ``shared/fixtures/tf_bfc_cpu``
(see its README for the facts asserted here), the demo XLA dump under
``src/profscope/demo/logdir`` when present, and, when a Python with JAX is at hand
(``jax`` importable here, or ``PROFSCOPE_JAX_PYTHON`` naming an interpreter), a
fresh XLA dump of a small jitted train step.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import unknown_fields

from profscope.formats.protos import xplane_pb2
from profscope.model.protos import hlo_pb2
from profscope.storage.protos import profiler_service_pb2
from profscope.formats.protowire import decode_varint

REPO_ROOT = Path(__file__).resolve().parents[1]
SRC_DIR = REPO_ROOT / "src"
# Each generated module lives in the package that owns its messages: the HloProto is the
# memory viewer's model, the XSpace only the readers' wire format.
GENERATED = {
    "profscope/formats/protos/xplane_pb2.py",
    "profscope/formats/protos/xplane_pb2.pyi",
    "profscope/formats/protos/pprof_pb2.py",
    "profscope/formats/protos/pprof_pb2.pyi",
    "profscope/model/protos/hlo_pb2.py",
    "profscope/model/protos/hlo_pb2.pyi",
    "profscope/storage/protos/profiler_service_pb2.py",
    "profscope/storage/protos/profiler_service_pb2.pyi",
}
GENERATED_DIRS = [SRC_DIR / "profscope" / "formats" / "protos", SRC_DIR / "profscope" / "model" / "protos",
                  SRC_DIR / "profscope" / "storage" / "protos"]
DEMO_LOGDIR = REPO_ROOT / "src" / "profscope" / "demo" / "logdir"


def _load_gen_protos():
    spec = importlib.util.spec_from_file_location("gen_protos", REPO_ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_protos = _load_gen_protos()


# ---------------------------------------------------------------------------
# Generated code
# ---------------------------------------------------------------------------


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    version = gen_protos.installed_grpcio_tools_version()
    if version != gen_protos.GRPCIO_TOOLS_VERSION:
        pytest.skip(
            f"needs grpcio-tools=={gen_protos.GRPCIO_TOOLS_VERSION} (the test extra), found {version}"
        )
    fresh = {p.relative_to(tmp_path).as_posix(): p for p in gen_protos.generate(tmp_path)}
    assert set(fresh) == GENERATED
    stale = [
        rel
        for rel, p in sorted(fresh.items())
        if not (SRC_DIR / rel).is_file() or (SRC_DIR / rel).read_bytes() != p.read_bytes()
    ]
    assert not stale, (
        f"generated protobuf code is stale: {', '.join(stale)}; "
        "run `python scripts/gen_protos.py` and commit the result"
    )
    # No leftovers of a removed .proto.
    committed = {p.relative_to(SRC_DIR).as_posix() for d in GENERATED_DIRS for p in d.glob("*_pb2.py*")}
    assert committed == set(fresh), f"generated files without a .proto: {sorted(committed - set(fresh))}"
    assert gen_protos.orphan_files() == []
    assert [d.relative_to(SRC_DIR) for d in gen_protos.output_dirs()] == [d.relative_to(SRC_DIR) for d in GENERATED_DIRS]


def test_generation_is_deterministic(tmp_path: Path) -> None:
    if gen_protos.installed_grpcio_tools_version() is None:
        pytest.skip("grpcio-tools is not installed")
    a = gen_protos.generate(tmp_path / "a", strict_version=False)
    b = gen_protos.generate(tmp_path / "b", strict_version=False)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_generated_imports_are_package_relative() -> None:
    paths = [path for d in GENERATED_DIRS for path in d.glob("*_pb2.py*")]
    assert {p.relative_to(SRC_DIR).as_posix() for p in paths} == GENERATED
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^import \w+_pb2", text, re.MULTILINE), path.name


def _gencode_version() -> tuple[int, int, int]:
    text = (SRC_DIR / "profscope" / "formats" / "protos" / "xplane_pb2.py").read_text(encoding="utf-8")
    match = re.search(r"^# Protobuf Python Version: (\d+)\.(\d+)\.(\d+)$", text, re.MULTILINE)
    assert match, "no 'Protobuf Python Version' line in xplane_pb2.py"
    return tuple(int(x) for x in match.groups())  # type: ignore[return-value]


def test_pyproject_protobuf_floor_covers_the_generated_code() -> None:
    """The generated modules call ValidateProtobufRuntimeVersion(gencode version):
    any older protobuf runtime refuses to import them."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"protobuf>=([0-9.]+)', pyproject)
    assert match, "pyproject.toml declares no protobuf lower bound"
    floor = tuple(int(x) for x in match.group(1).split("."))
    floor = floor + (0,) * (3 - len(floor))
    gencode = _gencode_version()
    assert floor >= gencode, (
        f"pyproject allows protobuf {match.group(1)}, but the generated code needs >= "
        + ".".join(map(str, gencode))
    )


def test_package_and_file_names_do_not_clash_with_upstream() -> None:
    assert xplane_pb2.DESCRIPTOR.package == "profscope.xplane"
    assert hlo_pb2.DESCRIPTOR.package == "profscope.xla"
    assert xplane_pb2.DESCRIPTOR.name == "xplane.proto"
    assert hlo_pb2.DESCRIPTOR.name == "hlo.proto"


# Upstream field numbers (tsl/profiler/protobuf/xplane.proto, xla/xla_data.proto,
# xla/service/hlo.proto), checked against the descriptors compiled into jaxlib
# 0.10.2 and xprof 2.24. A wire-format fact: never edit a number here.
UPSTREAM_FIELD_NUMBERS = {
    xplane_pb2: {
        "XSpace": {"planes": 1, "errors": 2, "warnings": 3, "hostnames": 4},
        "XPlane": {"id": 1, "name": 2, "lines": 3, "event_metadata": 4, "stat_metadata": 5, "stats": 6},
        "XLine": {"id": 1, "display_id": 10, "name": 2, "display_name": 11, "timestamp_ns": 3,
                  "duration_ps": 9, "events": 4},
        "XEvent": {"metadata_id": 1, "offset_ps": 2, "num_occurrences": 5, "duration_ps": 3, "stats": 4},
        "XStat": {"metadata_id": 1, "double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5,
                  "bytes_value": 6, "ref_value": 7, "compressed_str_value": 8},
        "XEventMetadata": {"id": 1, "name": 2, "display_name": 4, "metadata": 3, "stats": 5, "child_id": 6},
        "XStatMetadata": {"id": 1, "name": 2, "description": 3},
    },
    hlo_pb2: {
        "TileProto": {"dimensions": 1},
        "LayoutProto": {"minor_to_major": 1, "tiles": 6, "tail_padding_alignment_in_elements": 16,
                        "element_size_in_bits": 7, "memory_space": 8, "dynamic_shape_metadata_prefix_bytes": 15},
        "ShapeProto": {"element_type": 2, "dimensions": 3, "is_dynamic_dimension": 6, "tuple_shapes": 4,
                       "layout": 5},
        "ProgramShapeProto": {"parameters": 1, "result": 2, "parameter_names": 3},
        "OpMetadata": {"op_type": 1, "op_name": 2, "source_file": 3, "source_line": 4, "source_end_line": 17,
                       "source_column": 18, "source_end_column": 19, "deduplicated_name": 12,
                       "stack_frame_id": 15, "scheduling_name": 16},
        "LiteralProto": {"shape": 1, "preds": 2, "s8s": 15, "u8s": 3, "s32s": 4, "s64s": 5, "u32s": 6,
                         "u64s": 7, "f32s": 8, "f64s": 9, "tuple_literals": 10, "f16s": 11, "bf16s": 13,
                         "u16s": 16, "s16s": 17},
        "DotDimensionNumbers": {"lhs_contracting_dimensions": 1, "rhs_contracting_dimensions": 2,
                                "lhs_batch_dimensions": 3, "rhs_batch_dimensions": 4},
        "PaddingConfig": {"dimensions": 1},
        "PaddingConfig.PaddingConfigDimension": {"edge_padding_low": 1, "edge_padding_high": 2,
                                                 "interior_padding": 3},
        "HloInstructionProto": {"name": 1, "opcode": 2, "shape": 3, "metadata": 7, "literal": 8,
                                "parameter_number": 9, "fusion_kind": 11, "tuple_index": 13, "dimensions": 14,
                                "slice_dimensions": 17, "padding_config": 21, "custom_call_target": 28,
                                "dot_dimension_numbers": 30, "is_stable": 60, "comparison_direction": 63,
                                "id": 35, "operand_ids": 36, "control_predecessor_ids": 37,
                                "called_computation_ids": 38, "backend_config": 43, "async_execution_thread": 79},
        "HloInstructionProto.SliceDimensions": {"start": 1, "limit": 2, "stride": 3},
        "HloComputationProto": {"name": 1, "instructions": 2, "program_shape": 4, "id": 5, "root_id": 6,
                                "is_fusion_computation": 7, "execution_thread": 8},
        "HloScheduleProto": {"sequences": 1},
        "HloScheduleProto.InstructionSequence": {"instruction_ids": 1},
        "HloInputOutputAliasProto": {"entries": 1},
        "HloInputOutputAliasProto.AliasEntryProto": {"output_shape_index": 1, "parameter_number": 2,
                                                     "parameter_shape_index": 3, "kind": 4},
        "StackFrameIndexProto": {"file_names": 1, "function_names": 2, "file_locations": 3, "stack_frames": 4},
        "StackFrameIndexProto.FileLocation": {"file_name_id": 1, "function_name_id": 2, "line": 3, "end_line": 5,
                                              "column": 4, "end_column": 6},
        "StackFrameIndexProto.StackFrame": {"file_location_id": 1, "parent_frame_id": 2},
        "HloModuleProto": {"name": 1, "entry_computation_name": 2, "entry_computation_id": 6, "computations": 3,
                           "host_program_shape": 4, "id": 5, "schedule": 7, "input_output_alias": 8,
                           "stack_frame_index": 17, "device_type": 21},
        "LogicalBufferProto": {"id": 1, "size": 2, "defined_at": 3, "color": 4},
        "LogicalBufferProto.Location": {"instruction_name": 2, "instruction_id": 4, "shape_index": 3},
        "BufferAllocationProto": {"index": 1, "size": 2, "is_thread_local": 3, "is_tuple": 11,
                                  "is_entry_computation_parameter": 5, "is_constant": 12, "parameter_number": 6,
                                  "parameter_shape_index": 10, "is_parameter_aliased_with_output": 13,
                                  "maybe_live_out": 7, "color": 8, "assigned": 9},
        "BufferAllocationProto.Assigned": {"logical_buffer_id": 1, "offset": 2, "size": 3, "element_type": 4},
        "HeapSimulatorTrace": {"events": 1, "whole_module_simulation": 2, "buffer_allocation_index": 3},
        "HeapSimulatorTrace.Event": {"kind": 1, "buffer_id": 2, "computation_name": 3, "instruction_name": 4,
                                     "share_with_canonical_id": 5},
        "MemoryUsageReportProto": {"memory_space_allocation_entries": 1},
        "MemoryUsageReportProto.AllocationEntry": {"index": 1, "size": 2, "cumulative_size": 3,
                                                   "cumulative_percentage": 4, "defining_positions": 5,
                                                   "hlo_text": 6},
        "MemoryUsageReportProto.AllocationEntryInMemorySpace": {"total_bytes": 1, "memory_space_color": 2,
                                                                "allocation_entries": 3},
        "BufferAssignmentProto": {"logical_buffers": 1, "buffer_aliases": 2, "buffer_allocations": 3,
                                  "heap_simulator_traces": 4, "peak_buffers": 5},
        "BufferAssignmentProto.BufferAlias": {"source_buffer_id": 1, "location": 2},
        "BufferAssignmentProto.PeakBuffers": {"index": 1, "logical_buffer_ids": 2},
        "HloProto": {"hlo_module": 1, "buffer_assignment": 3},
    },
}

# tsl/profiler/protobuf/profiler_options.proto and profiler_service.proto (package
# tensorflow), as jaxlib 0.10.2 ships them; test_profiler_service_matches_jaxlib reads
# jaxlib's own descriptors and compares.
UPSTREAM_FIELD_NUMBERS[profiler_service_pb2] = {
    "ProfileOptions": {"version": 5, "device_type": 6, "include_dataset_ops": 1, "host_tracer_level": 2,
                       "device_tracer_level": 3, "python_tracer_level": 4, "enable_hlo_proto": 7,
                       "start_timestamp_ns": 8, "duration_ms": 9, "repository_path": 10,
                       "raise_error_on_start_failure": 13, "session_id": 14},
    "ProfileRequest": {"duration_ms": 1, "max_events": 2, "tools": 3, "opts": 4, "repository_root": 5,
                       "session_id": 6, "host_name": 7, "emit_xspace": 9},
    "ProfileResponse": {"empty_trace": 7, "xspace": 8},
    "TerminateRequest": {"session_id": 1},
    "TerminateResponse": {},
    "GetSnapshotRequest": {"snapshot_session_id": 1},
    "ContinuousProfilingResponse": {},
    "StopContinuousProfilingRequest": {},
    "StopContinuousProfilingResponse": {},
}

UPSTREAM_PRIMITIVE_TYPES = {
    "PRIMITIVE_TYPE_INVALID": 0, "PRED": 1, "S1": 30, "S2": 26, "S4": 21, "S8": 2, "S16": 3, "S32": 4, "S64": 5,
    "U1": 31, "U2": 27, "U4": 22, "U8": 6, "U16": 7, "U32": 8, "U64": 9, "F16": 10, "F32": 11, "BF16": 16,
    "F64": 12, "F8E5M2": 19, "F8E4M3": 28, "F8E4M3FN": 20, "F8E4M3B11FNUZ": 23, "F8E3M4": 29,
    "F8E5M2FNUZ": 24, "F8E4M3FNUZ": 25, "F4E2M1FN": 32, "F8E8M0FNU": 33, "F6E3M2FN": 35, "F6E2M3FN": 36,
    "C64": 15, "C128": 18, "TUPLE": 13, "OPAQUE_TYPE": 14, "TOKEN": 17, "BUFFER": 34,
}


def _all_messages(file_descriptor):
    out = {}

    def visit(desc, prefix):
        if desc.GetOptions().map_entry:
            return
        out[prefix + desc.name] = desc
        for nested in desc.nested_types:
            visit(nested, prefix + desc.name + ".")

    for desc in file_descriptor.message_types_by_name.values():
        visit(desc, "")
    return out


@pytest.mark.parametrize("module", [xplane_pb2, hlo_pb2, profiler_service_pb2],
                         ids=["xplane", "hlo", "profiler_service"])
def test_field_numbers_are_upstream(module) -> None:
    expected = UPSTREAM_FIELD_NUMBERS[module]
    messages = _all_messages(module.DESCRIPTOR)
    assert sorted(messages) == sorted(expected)
    for name, fields in expected.items():
        actual = {f.name: f.number for f in messages[name].fields}
        assert actual == fields, name


def test_enums_are_upstream() -> None:
    assert {v.name: v.number for v in hlo_pb2.PrimitiveType.DESCRIPTOR.values} == UPSTREAM_PRIMITIVE_TYPES
    assert dict(hlo_pb2.HeapSimulatorTrace.Event.Kind.items()) == {"ALLOC": 0, "FREE": 1, "SHARE_WITH": 2}
    assert dict(hlo_pb2.Kind.items()) == {"UNDEFINED_ALIAS": 0, "MAY_ALIAS": 1, "MUST_ALIAS": 2}


def test_xplane_maps_and_oneofs() -> None:
    plane = xplane_pb2.XPlane()
    plane.event_metadata[7].name = "e"
    plane.stat_metadata[9].name = "s"
    assert plane.event_metadata[7].name == "e"
    event = xplane_pb2.XEvent(offset_ps=5)
    assert event.WhichOneof("data") == "offset_ps"
    event.num_occurrences = 2
    assert event.WhichOneof("data") == "num_occurrences"
    stat = xplane_pb2.XStat(ref_value=3)
    assert stat.WhichOneof("value") == "ref_value"


def test_hand_encoded_wire_bytes() -> None:
    """Field numbers, wire types and nesting, independent of any protoc."""
    # HloProto{hlo_module{name:"m"}, buffer_assignment{heap_simulator_traces{events{kind:FREE buffer_id:3}}}}
    wire = bytes([0x0A, 3, 0x0A, 1, ord("m"), 0x1A, 8, 0x22, 6, 0x0A, 4, 0x08, 1, 0x10, 3])
    proto = hlo_pb2.HloProto.FromString(wire)
    assert proto.hlo_module.name == "m"
    event = proto.buffer_assignment.heap_simulator_traces[0].events[0]
    assert event.kind == hlo_pb2.HeapSimulatorTrace.Event.FREE and event.buffer_id == 3
    assert proto.SerializeToString() == wire
    # XEvent{metadata_id:1 offset_ps:2 duration_ps:3}
    event = xplane_pb2.XEvent.FromString(bytes([0x08, 1, 0x10, 2, 0x18, 3]))
    assert (event.metadata_id, event.offset_ps, event.duration_ps) == (1, 2, 3)


# ---------------------------------------------------------------------------
# Wire helpers: exact byte comparison that ignores only the order of map entries
# ---------------------------------------------------------------------------




def _records(buf: bytes) -> list[tuple[int, bytes, bytes]]:
    """Split a message into (field number, whole record bytes, payload) records."""
    out = []
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = decode_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = decode_varint(buf, pos)
            payload = buf[start:pos]
        elif wire_type == 1:
            pos += 8
            payload = buf[pos - 8 : pos]
        elif wire_type == 2:
            length, pos = decode_varint(buf, pos)
            payload = buf[pos : pos + length]
            pos += length
        elif wire_type == 5:
            pos += 4
            payload = buf[pos - 4 : pos]
        else:  # groups are not used by these protos
            raise AssertionError(f"unexpected wire type {wire_type}")
        out.append((number, buf[start:pos], payload))
    assert pos == len(buf)
    return out


def _canonical_xspace(buf: bytes) -> list:
    """XSpace bytes -> records, with each XPlane's map entries (fields 4, 5) sorted."""
    out = []
    for number, record, payload in _records(buf):
        if number == 1:  # XSpace.planes
            plane = _records(payload)
            ordered = [r for n, r, _ in plane if n not in (4, 5)]
            maps = sorted(r for n, r, _ in plane if n in (4, 5))
            out.append((1, ordered, maps))
        else:
            out.append((number, record))
    return out


def _unknown_field_count(message) -> int:
    count = len(unknown_fields.UnknownFieldSet(message))
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                count += sum(_unknown_field_count(v) for v in value.values())
        elif field.is_repeated:
            count += sum(_unknown_field_count(v) for v in value)
        else:
            count += _unknown_field_count(value)
    return count


# ---------------------------------------------------------------------------
# Real XSpace: TensorFlow CPU profile with BFC allocator events
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf_xplane_path(shared_fixtures: Path) -> Path:
    paths = sorted((shared_fixtures / "tf_bfc_cpu" / "profile" / "plugins" / "profile").glob("*/vm.xplane.pb"))
    assert len(paths) == 1, paths
    return paths[0]


@pytest.fixture(scope="module")
def tf_xspace(tf_xplane_path: Path) -> xplane_pb2.XSpace:
    return xplane_pb2.XSpace.FromString(tf_xplane_path.read_bytes())


def _stat_value(plane: xplane_pb2.XPlane, stat: xplane_pb2.XStat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind) if kind else None


def test_tf_profile_structure(tf_xspace: xplane_pb2.XSpace, tf_xplane_path: Path) -> None:
    assert tf_xplane_path.stat().st_size == 174_696
    assert [p.name for p in tf_xspace.planes] == ["/host:CPU", "Task Environment"]
    assert list(tf_xspace.hostnames) == ["vm"]
    assert not tf_xspace.errors and not tf_xspace.warnings
    cpu, env = tf_xspace.planes
    assert (len(cpu.event_metadata), len(cpu.stat_metadata)) == (223, 99)
    assert all(key == meta.id for key, meta in cpu.event_metadata.items())
    assert all(key == meta.id for key, meta in cpu.stat_metadata.items())

    per_line = {}
    for line in cpu.lines:
        assert line.timestamp_ns == 10525
        names = collections.Counter(cpu.event_metadata[e.metadata_id].name for e in line.events)
        per_line[line.name] = (len(line.events), names["MemoryAllocation"], names["MemoryDeallocation"])
    assert per_line["python"] == (285, 10, 25)
    assert per_line["tf_Compute/-6723540654048643355"] == (1560, 169, 150)
    assert per_line["tf_Compute/8194891903584291876"] == (1188, 116, 120)
    eigen = sorted(v for k, v in per_line.items() if k.startswith("tf_numa_-1_Eigen/"))
    assert eigen == [(1119, 0, 0), (1141, 0, 0)]

    env_stats = {env.stat_metadata[s.metadata_id].name: s for s in env.stats}
    assert {"profile_start_time", "profile_stop_time", "profile_options"} <= set(env_stats)
    assert env_stats["profile_options"].WhichOneof("value") == "bytes_value"


def test_tf_profile_allocator_events(tf_xspace: xplane_pb2.XSpace) -> None:
    cpu = tf_xspace.planes[0]
    allocs, deallocs = [], []
    for line in cpu.lines:
        for event in line.events:
            name = cpu.event_metadata[event.metadata_id].name
            if name in ("MemoryAllocation", "MemoryDeallocation"):
                assert event.WhichOneof("data") == "offset_ps" and event.duration_ps == 0
                stats = {cpu.stat_metadata[s.metadata_id].name: _stat_value(cpu, s) for s in event.stats}
                (allocs if name == "MemoryAllocation" else deallocs).append(stats)
    assert (len(allocs), len(deallocs)) == (295, 295)
    events = allocs + deallocs
    assert {e["allocator_name"] for e in events} == {"bfc_cpu_allocator_for_gpu"}
    assert max(e["bytes_allocated"] for e in events) == 15_857_920
    assert max(e["peak_bytes_in_use"] for e in events) == 16_014_592
    assert min(e["bytes_available"] for e in events) == 1_057_883_904
    assert max(e["fragmentation"] for e in events) == pytest.approx(0.308697, abs=1e-6)
    assert {e["bytes_reserved"] for e in events} == {0}
    assert sum(e["requested_bytes"] for e in allocs) == 52_111_588
    assert sum(e["allocation_bytes"] for e in allocs) == 59_610_112
    assert collections.Counter(e["region_type"] for e in allocs if "region_type" in e) == {"output": 265, "temp": 15}
    assert sum("tf_op" in e for e in allocs) == 280


def test_tf_profile_reserializes_unchanged(tf_xspace: xplane_pb2.XSpace, tf_xplane_path: Path) -> None:
    original = tf_xplane_path.read_bytes()
    assert _unknown_field_count(tf_xspace) == 0, "the schema misses fields present in the file"
    again = tf_xspace.SerializeToString()
    assert len(again) == len(original)
    assert xplane_pb2.XSpace.FromString(again) == tf_xspace
    # Byte-identical up to the order of map entries, which the C++ writer takes
    # from its hash map and the upb runtime from its own.
    assert _canonical_xspace(again) == _canonical_xspace(original)


def test_tf_profile_reserializes_byte_identical_pure_python(tf_xplane_path: Path) -> None:
    """The pure-Python runtime keeps map entries in wire order: exact bytes back."""
    code = textwrap.dedent(
        """
        import sys
        from google.protobuf.internal import api_implementation
        assert api_implementation.Type() == "python", api_implementation.Type()
        from profscope.formats.protos import xplane_pb2
        data = open(sys.argv[1], "rb").read()
        assert xplane_pb2.XSpace.FromString(data).SerializeToString() == data
        print("identical")
        """
    )
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", code, str(tf_xplane_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "identical"


# ---------------------------------------------------------------------------
# Real HLO protos (XLA dumps, and HLO embedded in a JAX profile)
# ---------------------------------------------------------------------------


def check_hlo_proto(data: bytes) -> hlo_pb2.HloProto:
    """Parse an ``xla.HloProto`` and check what a memory viewer relies on."""
    proto = hlo_pb2.HloProto.FromString(data)
    module, assignment = proto.hlo_module, proto.buffer_assignment
    assert module.name and module.entry_computation_name
    computations = {c.id: c for c in module.computations}
    assert computations[module.entry_computation_id].name == module.entry_computation_name
    instructions = {i.id: i for c in module.computations for i in c.instructions}
    instruction_names = {i.name for i in instructions.values()}
    assert instructions and all(i.opcode and i.name for i in instructions.values())
    for computation in module.computations:
        assert computation.root_id in {i.id for i in computation.instructions}
    for instruction in instructions.values():
        assert set(instruction.operand_ids) <= set(instructions)
        assert set(instruction.called_computation_ids) <= set(computations)
        assert instruction.shape.element_type != hlo_pb2.PRIMITIVE_TYPE_INVALID
    frames = module.stack_frame_index
    for instruction in instructions.values():
        assert 0 <= instruction.metadata.stack_frame_id <= len(frames.stack_frames)

    buffers = {b.id: b for b in assignment.logical_buffers}
    assert buffers and assignment.buffer_allocations
    for buffer in buffers.values():
        assert buffer.defined_at.instruction_id in instructions
        assert buffer.size >= 0
    for allocation in assignment.buffer_allocations:
        for assigned in allocation.assigned:
            assert assigned.logical_buffer_id in buffers
            assert 0 <= assigned.offset and assigned.offset + assigned.size <= allocation.size
    assert {p.index for p in assignment.peak_buffers} <= {a.index for a in assignment.buffer_allocations}
    Event = hlo_pb2.HeapSimulatorTrace.Event
    for trace in assignment.heap_simulator_traces:
        kinds = collections.Counter()
        for event in trace.events:
            kinds[event.kind] += 1
            assert event.buffer_id in buffers
            assert event.instruction_name in instruction_names
            if event.kind == Event.SHARE_WITH:
                assert event.share_with_canonical_id in buffers
        assert kinds[Event.ALLOC] + kinds[Event.SHARE_WITH] == kinds[Event.FREE]

    # Every field we do not declare is kept verbatim: same length back, same content.
    again = proto.SerializeToString()
    assert len(again) == len(data)
    assert hlo_pb2.HloProto.FromString(again) == proto
    return proto


def _demo_expected() -> dict | None:
    path = DEMO_LOGDIR.parent / "expected.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _demo_hlo_files() -> list[Path]:
    return sorted(DEMO_LOGDIR.glob("**/*after_optimizations.hlo.pb")) if DEMO_LOGDIR.is_dir() else []


def _demo_programs() -> list[str]:
    expected = _demo_expected()
    return sorted(expected["programs"]) if expected else []


def _demo_id(path: Path | None) -> str:
    return str(path.relative_to(DEMO_LOGDIR)) if path else "none"


def _memory_sums(proto: hlo_pb2.HloProto) -> dict[str, int]:
    allocations = proto.buffer_assignment.buffer_allocations
    return {
        "parameters": sum(a.size for a in allocations if a.is_entry_computation_parameter),
        "outputs": sum(a.size for a in allocations if a.maybe_live_out),
        "aliased": sum(a.size for a in allocations if a.is_parameter_aliased_with_output),
        "temporaries": sum(
            a.size
            for a in allocations
            if not (a.is_entry_computation_parameter or a.maybe_live_out or a.is_thread_local or a.is_constant)
        ),
    }


@pytest.mark.parametrize("path", _demo_hlo_files() or [None], ids=_demo_id)
def test_demo_dump_hlo_protos(path: Path | None) -> None:
    if path is None:
        pytest.skip(f"no *after_optimizations.hlo.pb under {DEMO_LOGDIR}")
    proto = check_hlo_proto(path.read_bytes())
    expected = _demo_expected()
    dumps = [d for d in (expected or {}).get("dumps", {}).values() if path.name in d.get("files", ())]
    if not dumps:
        return
    dump = dumps[0]
    assert proto.hlo_module.name == dump["module_name"]
    analysis = dump["memory_analysis"]
    # Buffer assignment agrees with what JAX's compiled.memory_analysis() reported.
    assert _memory_sums(proto) == {
        "parameters": analysis["argument_size_in_bytes"],
        "outputs": analysis["output_size_in_bytes"],
        "aliased": analysis["alias_size_in_bytes"],
        "temporaries": analysis["temp_size_in_bytes"],
    }
    # The whole train state is donated: every aliased output has an alias entry.
    aliases = proto.hlo_module.input_output_alias.entries
    assert aliases and all(a.kind == hlo_pb2.MAY_ALIAS for a in aliases)
    aliased = [a for a in proto.buffer_assignment.buffer_allocations if a.is_parameter_aliased_with_output]
    assert {a.parameter_number for a in aliased} == {e.parameter_number for e in aliases}


@pytest.mark.parametrize("program", _demo_programs() or [None])
def test_demo_profile_embedded_hlo_protos(program: str | None) -> None:
    if program is None:
        pytest.skip(f"no demo expected.json beside {DEMO_LOGDIR}")
    info = _demo_expected()["programs"][program]
    data = (DEMO_LOGDIR.parent / info["xplane"]).read_bytes()
    space = xplane_pb2.XSpace.FromString(data)
    assert _unknown_field_count(space) == 0
    assert len(space.SerializeToString()) == len(data)
    assert _canonical_xspace(space.SerializeToString()) == _canonical_xspace(data)
    assert sorted(p.name for p in space.planes) == sorted(info["planes"])
    assert list(space.hostnames) == info["xspace_hostnames"]

    plane = next(p for p in space.planes if p.name == "/host:metadata")
    stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
    embedded = {}
    for event_metadata in plane.event_metadata.values():
        stats = {stat_names[s.metadata_id]: s for s in event_metadata.stats}
        embedded[event_metadata.name] = (stats["Hlo Proto"].bytes_value, stats["program_id"])
    assert sorted(embedded) == sorted(m["name"] for m in info["metadata_modules"])
    for module in info["metadata_modules"]:
        blob, _ = embedded[module["name"]]
        assert hashlib.sha256(blob).hexdigest() == module["hlo_proto_sha256"]
        proto = check_hlo_proto(blob)
        assert module["name"] == f"{proto.hlo_module.name}({module['program_id']})"

    train_step = check_hlo_proto(embedded[info["profile_module_name"]][0])
    assert train_step.hlo_module.name == info["module_name"]
    analysis = info["memory_analysis"]
    sums = _memory_sums(train_step)
    assert sums["parameters"] == analysis["argument_size_in_bytes"]
    assert sums["outputs"] == analysis["output_size_in_bytes"]
    assert sums["aliased"] == analysis["alias_size_in_bytes"]
    assert sums["temporaries"] == analysis["temp_size_in_bytes"]
    viewer = info.get("xprof_memory_viewer", {}).get(info["profile_module_name"])
    if viewer:
        assert train_step.hlo_module.entry_computation_name == viewer["entryComputationName"]
        assert sums["parameters"] == viewer["entryComputationParametersBytes"]
        assert sums["outputs"] == viewer["maybeLiveOutBytes"]
        # XProf's heap-size timeline: its starting point plus one point per event.
        events = max(len(t.events) for t in train_step.buffer_assignment.heap_simulator_traces)
        assert events + 1 == viewer["heapSizesLength"]


def _jax_python() -> str | None:
    configured = os.environ.get("PROFSCOPE_JAX_PYTHON")
    if configured:
        return configured
    if importlib.util.find_spec("jax") is not None:
        return sys.executable
    return None


JAX_PROGRAM = textwrap.dedent(
    """
    import jax, jax.numpy as jnp

    def loss(params, x, y):
        (w1, b1), (w2, b2) = params
        h = jax.nn.relu(x @ w1 + b1)
        logits = h @ w2 + b2
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    @jax.jit
    def train_step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

    params = ((jnp.ones((64, 128)), jnp.zeros(128)), (jnp.ones((128, 10)), jnp.zeros(10)))
    x, y = jnp.ones((32, 64)), jnp.ones((32, 10)) / 10
    train_step(params, x, y)[1].block_until_ready()
    """
)


def test_fresh_jax_dump(tmp_path: Path) -> None:
    python = _jax_python()
    if python is None:
        pytest.skip("JAX not importable; set PROFSCOPE_JAX_PYTHON to a Python with jax to run")
    dump = tmp_path / "dump"
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_proto", JAX_PLATFORMS="cpu")
    result = subprocess.run([python, "-c", JAX_PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    paths = sorted(dump.glob("*jit_train_step*after_optimizations.hlo.pb"))
    assert len(paths) == 1, sorted(p.name for p in dump.iterdir())
    proto = check_hlo_proto(paths[0].read_bytes())
    assert proto.hlo_module.name == "jit_train_step"
    assignment = proto.buffer_assignment
    assert assignment.heap_simulator_traces and assignment.heap_simulator_traces[0].events
    # Parameters: 4 params + x + y, each an entry-parameter allocation.
    params = [a for a in assignment.buffer_allocations if a.is_entry_computation_parameter]
    assert sorted(a.parameter_number for a in params) == list(range(6))
    sizes = {a.parameter_number: a.size for a in params}
    assert sizes[0] == 64 * 128 * 4 and sizes[4] == 32 * 64 * 4
    entry = next(c for c in proto.hlo_module.computations if c.id == proto.hlo_module.entry_computation_id)
    parameter_shapes = {
        i.parameter_number: (i.shape.element_type, list(i.shape.dimensions))
        for i in entry.instructions
        if i.opcode == "parameter"
    }
    assert parameter_shapes[0] == (hlo_pb2.F32, [64, 128])
    assert any(a.maybe_live_out for a in assignment.buffer_allocations)
    # jax >= 0.4.36 records source locations through the stack frame index.
    assert proto.hlo_module.stack_frame_index.file_names

    reports = sorted(dump.glob("*jit_train_step*memory-usage-report.pb"))
    if reports:
        report = hlo_pb2.MemoryUsageReportProto.FromString(reports[0].read_bytes())
        assert _unknown_field_count(report) == 0
        indices = {a.index for a in assignment.buffer_allocations}
        for space in report.memory_space_allocation_entries:
            assert {e.index for e in space.allocation_entries} <= indices
            assert space.total_bytes == sum(e.size for e in space.allocation_entries)


def _jaxlib_file_descriptor(name: str):
    """A FileDescriptorProto compiled into jaxlib's shared library: the serialised
    descriptor starts with field 1 (its file name) and runs as long as the bytes parse
    as FileDescriptorProto fields (numbers 1-15, varint or length-delimited)."""
    import jaxlib
    from google.protobuf import descriptor_pb2
    from google.protobuf.internal.decoder import _DecodeVarint

    data = (Path(jaxlib.__file__).parent / "libjax_common.so").read_bytes()
    key = bytes([0x0A, len(name)]) + name.encode()
    start = 0
    while (start := data.find(key, start)) >= 0:
        i = start
        while i < len(data):
            tag, j = _DecodeVarint(data, i)
            if not 1 <= tag >> 3 <= 15 or tag & 7 not in (0, 2):
                break
            value, j = _DecodeVarint(data, j)
            if tag & 7 == 2:
                j += value
            if j > len(data):
                break
            i = j
        fd = descriptor_pb2.FileDescriptorProto.FromString(data[start:i])
        if fd.message_type:
            return fd
        start += 1
    raise AssertionError(f"{name} is not in jaxlib")


def test_profiler_service_matches_jaxlib() -> None:
    """Every field we declare has jaxlib's number and wire type (``xspace``: ours is bytes,
    upstream an XSpace message, both length-delimited)."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    length_delimited = {F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_MESSAGE}
    upstream = {}
    for name in ("tsl/profiler/protobuf/profiler_options.proto", "tsl/profiler/protobuf/profiler_service.proto"):
        for m in _jaxlib_file_descriptor(name).message_type:
            upstream[m.name] = {f.name: f for f in m.field}
    ours = _all_messages(profiler_service_pb2.DESCRIPTOR)
    assert len(ours) == len(UPSTREAM_FIELD_NUMBERS[profiler_service_pb2])
    for message, desc in ours.items():
        assert message in upstream, message
        for field in desc.fields:
            theirs = upstream[message][field.name]
            assert theirs.number == field.number, (message, field.name)
            assert (theirs.label == F.LABEL_REPEATED) == field.is_repeated, (message, field.name)
            if theirs.type in length_delimited:
                assert field.type in length_delimited, (message, field.name)
            else:
                assert theirs.type == field.type, (message, field.name)
