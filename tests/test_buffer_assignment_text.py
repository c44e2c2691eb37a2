"""Text-only XLA dumps: ``*-buffer-assignment.txt`` / ``*-memory-usage-report.txt``.

Real inputs: the bundled demo's MLP dump (jax 0.10.2) and ``tests/data/buffer_assignment``
(made by ``make_examples.py`` there: a scanned + rematerialised model, a conv net and a
donated-argument / tuple-output / constant module with jax 0.10.2, the last also with jax
0.5.3 and 0.4.30, whose text formats differ). Every text file sits beside the ``.hlo.pb``
XLA wrote for the same module, so text and proto are compared allocation by allocation.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest
from google.protobuf import text_format

from profscope.errors import BadInput
from profscope.formats.buffer_assignment_text import (
    decode_dump_text,
    human_bytes,
    parse_buffer_assignment,
    parse_memory_usage_report,
)
from profscope.model.protos import hlo_pb2
from profscope.tools.memory_viewer_text import category, from_dump_text

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "buffer_assignment"
DEMO_DUMP = HERE.parent / "src" / "profscope" / "demo" / "logdir" / "dumps" / "mlp"
BA_SUFFIX = "-buffer-assignment.txt"
REPORT_SUFFIX = "-memory-usage-report.txt"


def _examples() -> list[Path]:
    found = sorted(DATA.glob(f"*/*{BA_SUFFIX}")) + sorted(DEMO_DUMP.glob(f"*{BA_SUFFIX}"))
    assert len(found) >= 6, found
    return found


EXAMPLES = _examples()
IDS = [f"{p.parent.name}/{p.name.split('.')[1]}" for p in EXAMPLES]
CURRENT = [p for p in EXAMPLES if p.parent.name in ("jax-0.10.2", "mlp")]


def _stem(ba_path: Path) -> str:
    return str(ba_path)[: -len(BA_SUFFIX)]


def _read(path: Path | str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _load_ba(path: Path):
    return parse_buffer_assignment(_read(path), str(path))


def _load_report(ba_path: Path):
    rp = Path(_stem(ba_path) + REPORT_SUFFIX)
    return parse_memory_usage_report(_read(rp), str(rp)) if rp.exists() else None


def _load_proto(ba_path: Path) -> hlo_pb2.HloProto:
    stem = _stem(ba_path)
    for suffix in (".hlo.pb", ".hlo.pb.gz"):
        p = Path(stem + suffix)
        if p.exists():
            data = p.read_bytes()
            if suffix.endswith(".gz"):
                data = gzip.decompress(data)
            proto = hlo_pb2.HloProto()
            proto.ParseFromString(data)
            return proto
    raise AssertionError(f"no .hlo.pb beside {ba_path}")


def _index_str(index) -> str:
    return "{" + ",".join(str(i) for i in index) + "}"


def _proto_category(a) -> str:
    if a.is_entry_computation_parameter:
        return "Parameter"
    if a.maybe_live_out:
        return "Output"
    if a.is_thread_local:
        return "Thread-local"
    if a.is_constant:
        return "Constant"
    return "Temporary"


# -- the examples themselves --------------------------------------------------------------


def test_examples_are_small_and_cover_the_cases():
    for p in DATA.rglob("*"):
        if p.is_file():
            assert p.stat().st_size < 30_000, p
    texts = {p.parent.name + "/" + p.name: _read(p) for p in EXAMPLES}
    joined = "\n".join(texts.values())
    assert "(phi)" in joined  # lax.scan -> while loop
    assert "jit_conv_step" in "".join(texts)
    assert ", constant:" in joined and ", thread-local:" in joined
    assert "output shape is |(" in joined  # tuple output
    # donated arguments: an entry parameter that is also live out
    assert re.search(r"parameter \d+, shape \|[^|]*\| at ShapeIndex \{\}, maybe-live-out:", joined)


# -- text agrees with the proto ----------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_text_and_proto_agree_allocation_by_allocation(path):
    ba = _load_ba(path)
    proto = _load_proto(path)
    pallocs = list(proto.buffer_assignment.buffer_allocations)
    assert [a.index for a in ba.allocations] == [a.index for a in pallocs]

    names = {}
    for comp in proto.hlo_module.computations:
        for instr in comp.instructions:
            names[instr.id] = instr.name
    logical = {}
    for lb in proto.buffer_assignment.logical_buffers:
        loc = lb.defined_at
        name = names.get(loc.instruction_id, loc.instruction_name)
        logical[lb.id] = (name, _index_str(loc.shape_index))

    for t, p in zip(ba.allocations, pallocs, strict=True):
        where = f"allocation {t.index}"
        assert t.size == p.size, where
        assert t.is_entry_computation_parameter == p.is_entry_computation_parameter, where
        if p.is_entry_computation_parameter:
            assert t.parameter_number == p.parameter_number, where
            assert t.parameter_shape_index == _index_str(p.parameter_shape_index), where
        assert t.maybe_live_out == p.maybe_live_out, where
        assert t.is_thread_local == p.is_thread_local, where
        assert t.is_constant == p.is_constant, where
        assert t.color == p.color, where
        assert t.is_tuple == p.is_tuple, where
        assert category(t) == _proto_category(p), where
        text_values = sorted((v.id, v.offset, v.size) for v in t.values)
        proto_values = sorted((x.logical_buffer_id, x.offset, x.size) for x in p.assigned)
        assert text_values == proto_values, where
        for v in t.values:
            assert (v.name, v.shape_index) == logical[v.id], (where, v)


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_totals_are_the_sums_of_the_allocations(path):
    ba = _load_ba(path)
    report = _load_report(path)
    payload = from_dump_text(ba, report, "m")
    allocs = payload["allocations"]
    totals = payload["totals"]

    def total(pred):
        return sum(a["sizeBytes"] for a in allocs if pred(a))

    assert totals["totalBufferAllocationBytes"] == total(lambda a: True) == ba.allocation_bytes
    assert totals["parameterBytes"] == total(lambda a: a["parameterNumber"] is not None)
    assert totals["outputBytes"] == total(lambda a: "maybe-live-out" in a["attributes"])
    assert totals["constantBytes"] == total(lambda a: "constant" in a["attributes"])
    assert totals["threadLocalBytes"] == total(lambda a: "thread-local" in a["attributes"])
    assert totals["temporaryBytes"] == total(lambda a: a["category"] == "Temporary")
    assert totals["allocationCount"] == len(allocs) == len(ba.allocations)
    assert totals["valueCount"] == sum(len(a["values"]) for a in allocs)
    proto = _load_proto(path)
    assert totals["totalBufferAllocationBytes"] == sum(
        a.size for a in proto.buffer_assignment.buffer_allocations
    )
    if ba.total_bytes_used is not None:  # older XLA states it in the same file
        assert ba.total_bytes_used == totals["totalBufferAllocationBytes"]


@pytest.mark.parametrize("path", [p for p in EXAMPLES if _load_report(p) is not None],
                         ids=lambda p: f"{p.parent.name}/{p.name.split('.')[1]}")
def test_total_equals_the_memory_usage_report(path):
    ba = _load_ba(path)
    report = _load_report(path)
    assert report["totalBytes"] == ba.allocation_bytes
    for space in report["memorySpaces"]:
        assert space["totalBytes"] == sum(
            a.size for a in ba.allocations if space["color"] in (None, a.color)
        )
    payload = from_dump_text(ba, report, "m")
    by_index = {a.index: a for a in ba.allocations}
    for space in payload["memoryUsageReport"]["memorySpaces"]:
        for entry in space["allocations"]:
            alloc = by_index[entry["index"]]
            assert entry["sizeBytes"] == alloc.size
            # every offset group of the table is an offset of a value in that allocation
            offsets = {v.offset for v in alloc.values}
            assert {row["offset"] for row in entry["offsets"]} <= offsets
            if entry["offsets"] and entry["omittedOffsets"] is None:
                assert sum(r["valueCount"] for r in entry["offsets"]) == len(alloc.values)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.parent.name == "jax-0.10.2"],
                         ids=lambda p: p.name.split(".")[1])
def test_report_order_matches_xla_memory_usage_report_proto(path):
    """The text report does not print allocation indices; from_dump_text infers them from
    XLA's order. The ``-memory-usage-report.pb`` XLA wrote beside it does name them."""
    ba = _load_ba(path)
    payload = from_dump_text(ba, _load_report(path), "m")
    pb = hlo_pb2.MemoryUsageReportProto()
    pb.ParseFromString(gzip.decompress(Path(_stem(path) + "-memory-usage-report.pb.gz")
                                       .read_bytes()))
    from_pb = [[e.index for e in s.allocation_entries] for s in pb.memory_space_allocation_entries]
    inferred = [[e["index"] for e in s["allocations"]]
                for s in payload["memoryUsageReport"]["memorySpaces"]]
    assert inferred == from_pb


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.parent.name == "jax-0.10.2"],
                         ids=lambda p: p.name.split(".")[1])
def test_report_as_protobuf_text_parses_like_the_table_form(path):
    """For a while XLA wrote MemoryUsageReportProto.DebugString() as the .txt; rebuild that
    text from the real .pb XLA wrote and check it reads the same."""
    pb = hlo_pb2.MemoryUsageReportProto()
    pb.ParseFromString(gzip.decompress(Path(_stem(path) + "-memory-usage-report.pb.gz")
                                       .read_bytes()))
    as_text = text_format.MessageToString(pb)  # octal-escapes "×" like C++ DebugString
    proto_text = parse_memory_usage_report(as_text, "r.txt")
    table = _load_report(path)
    assert proto_text["format"] == "proto-text" and table["format"] == "memory-space"
    assert proto_text["totalBytes"] == table["totalBytes"]
    for ps, ts in zip(proto_text["memorySpaces"], table["memorySpaces"], strict=True):
        assert [e["offsets"] for e in ps["allocations"]] == [
            e["offsets"] for e in ts["allocations"]
        ]
        assert all(e["index"] is not None and e["sizeBytes"] is not None
                   for e in ps["allocations"])
    ba = _load_ba(path)
    a = from_dump_text(ba, proto_text, "m")["memoryUsageReport"]
    b = from_dump_text(ba, table, "m")["memoryUsageReport"]
    assert [[e["index"] for e in s["allocations"]] for s in a["memorySpaces"]] == [
        [e["index"] for e in s["allocations"]] for s in b["memorySpaces"]
    ]


# -- the payload --------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_payload_contract(path):
    ba = _load_ba(path)
    report = _load_report(path)
    payload = from_dump_text(ba, report, "jit_x(7)")
    json.dumps(payload)  # JSON-able as is
    assert payload["moduleName"] == "jit_x(7)"
    assert payload["textOnly"] is True
    assert "--xla_dump_hlo_as_proto" in payload["note"] and "peak" in payload["note"]
    assert set(payload["totals"]) == {
        "totalBufferAllocationBytes", "parameterBytes", "outputBytes", "temporaryBytes",
        "constantBytes", "threadLocalBytes", "allocationCount", "valueCount",
    }
    sizes = [a["sizeBytes"] for a in payload["allocations"]]
    assert sizes == sorted(sizes, reverse=True)
    for a in payload["allocations"]:
        assert {"index", "sizeBytes", "category", "attributes", "color", "parameterNumber",
                "values"} <= set(a)
        assert a["category"] in {"Parameter", "Output", "Thread-local", "Constant", "Temporary"}
        assert all(isinstance(x, str) for x in a["attributes"])
        for v in a["values"]:
            assert set(v) == {"id", "name", "shapeIndex", "shape", "offset", "sizeBytes"}
            assert isinstance(v["sizeBytes"], int) and v["offset"] + v["sizeBytes"] <= a[
                "sizeBytes"]
    assert payload["sources"] == {
        "bufferAssignment": path.name,
        "memoryUsageReport": (Path(_stem(path) + REPORT_SUFFIX).name if report else None),
    }
    assert (payload["memoryUsageReport"] is None) == (report is None)
    if report is not None:
        assert "path" not in payload["memoryUsageReport"]  # no local paths in the payload
        assert payload["memoryUsageReport"]["file"] == payload["sources"]["memoryUsageReport"]
        for space in payload["memoryUsageReport"]["memorySpaces"]:
            for entry in space["allocations"]:
                assert entry["category"] in {"Parameter", "Output", "Thread-local",
                                             "Constant", "Temporary"}


def test_categories_follow_xprof_precedence_on_real_modules():
    update = _load_ba(next(p for p in EXAMPLES if p.parent.name == "jax-0.10.2"
                           and ".jit_update." in p.name))
    payload = from_dump_text(update, None, "m")
    by_index = {a["index"]: a for a in payload["allocations"]}
    # donated state: parameters 0 and 1 are also live out; Parameter wins over Output
    donated = [a for a in payload["allocations"]
               if a["parameterNumber"] is not None and "maybe-live-out" in a["attributes"]]
    assert {a["parameterNumber"] for a in donated} == {0, 1}
    assert all(a["category"] == "Parameter" for a in donated)
    cats = {a["category"] for a in by_index.values()}
    assert cats == {"Parameter", "Output", "Thread-local", "Constant", "Temporary"}
    out = next(a for a in payload["allocations"] if "output" in a["attributes"])
    assert out["category"] == "Output" and "tuple" in out["attributes"]
    assert out["outputShape"].startswith("(") and out["values"][0]["shapeIndex"] == "{}"


def test_scan_values_carry_shape_index_and_phi():
    path = next(p for p in EXAMPLES if p.parent.name == "jax-0.10.2" and "loss_and_grad" in p.name)
    ba = _load_ba(path)
    values = [v for a in ba.allocations for v in a.values]
    phis = [v for v in values if v.phi]
    assert phis and all(re.fullmatch(r"\{(\d+(,\d+)*)?\}", v.shape_index) for v in phis)
    assert any(v.shape_index != "{}" for v in phis)
    assert any(v.name.startswith("while") for v in phis)


def test_demo_matches_the_report_and_names_the_files(demo_logdir):
    path = next((demo_logdir / "dumps" / "mlp").glob(f"*{BA_SUFFIX}"))
    payload = from_dump_text(_load_ba(path), _load_report(path), "jit_train_step(14)")
    assert payload["totals"]["totalBufferAllocationBytes"] == 5226152  # "Total bytes: 5226152"
    top = payload["allocations"][0]
    assert top["category"] == "Temporary" and "preallocated-temp" in top["attributes"]
    assert top["sizeBytes"] == 1596420
    assert payload["sources"]["memoryUsageReport"].endswith(REPORT_SUFFIX)


# -- older XLA ----------------------------------------------------------------------------


def test_jax_0_5_3_legacy_sections():
    path = next(DATA.glob(f"jax-0.5.3/*{BA_SUFFIX}"))
    ba = _load_ba(path)
    assert ba.total_bytes_used == ba.allocation_bytes == 5332
    assert ba.used_values is not None
    assert {u.id for u in ba.used_values} == {v.id for a in ba.allocations for v in a.values}
    assert all(u.instruction.startswith("%") for u in ba.used_values)
    assert any(u.op_name and u.source for u in ba.used_values)
    live = ba.live_range
    assert live is not None and live.peak_time is not None
    assert len(live.instruction_sequence) == live.max_time
    assert live.ranges and live.peak_values
    report = _load_report(path)
    assert report["format"] == "allocations-sorted-by-size"
    space = report["memorySpaces"][0]
    assert space["totalBytes"] == 5332
    assert len(space["allocations"]) == len(ba.allocations)
    assert [e["index"] for e in space["allocations"]] == [
        a.index for a in sorted(ba.allocations, key=lambda a: (-a.size, a.index))
    ]
    for e in space["allocations"]:
        assert e["approxBytes"] == next(a.size for a in ba.allocations if a.index == e["index"])
    payload = from_dump_text(ba, report, "m")
    assert payload["liveRange"]["xlaPeakTime"] == live.peak_time  # XLA's moment; peakTime is the heap's maximum
    assert payload["liveRange"]["heapSizes"][live.peak_time] == sum(b for _, b in live.peak_values)
    assert "live ranges" in payload["note"]


def test_jax_0_4_30_values_run_on_without_newline():
    path = next(DATA.glob(f"jax-0.4.30/*{BA_SUFFIX}"))
    text = _read(path)
    assert re.search(r"\}<\d+ \S+ @0>\n", text)  # the quirk is in the real file
    ba = parse_buffer_assignment(text, str(path))
    assert ba.unknown_lines == 0
    ids = [u.id for u in ba.used_values]
    assert ids == sorted({v.id for a in ba.allocations for v in a.values})
    assert all(u.instruction and "<" not in u.instruction.split("metadata")[0]
               for u in ba.used_values)
    assert ba.live_range is not None and ba.live_range.peak_time == 8


# -- format drift -------------------------------------------------------------------------


def test_unknown_lines_are_skipped():
    path = CURRENT[0]
    text = _read(path)
    lines = text.split("\n")
    drifted = []
    for i, line in enumerate(lines):
        drifted.append(line)
        if i % 7 == 3:
            drifted.append("  some future XLA line: 42")
    drifted.insert(0, "XLA build: something new")
    ba = parse_buffer_assignment("\n".join(drifted), "d.txt")
    ref = _load_ba(path)
    assert [(a.index, a.size, len(a.values)) for a in ba.allocations] == [
        (a.index, a.size, len(a.values)) for a in ref.allocations
    ]
    assert ba.unknown_lines > 10 and ba.warnings


def test_new_attributes_colors_and_cross_color_reuse():
    """Header pieces and lines a newer or TPU XLA prints (edited copy of a real header)."""
    text = (
        "BufferAssignment:\n"
        "allocation 0: size 4096, color 1, parameter 0, shape |(f32[8], s32[2])| at "
        "ShapeIndex {1}, maybe-live-out, page 3:\n"
        " value: <5 p.1{1} @1> (size=8,offset=0): s32[2]{0}\n"
        " value: <9 while.2{0} (phi) @1> (size=32,offset=64): f32[8]{0}\n"
        " reused by buffers of a different color:\n"
        "  value: <9 while.2{0} (phi) @1> (color=1)\n"
        "allocation 1: size 2.0KiB, preallocated-temp:\n"
        " value: <11 fusion @0> (size=1024,offset=1024): f32[256]{0}\n"
    )
    ba = parse_buffer_assignment(text, "t.txt")
    a0, a1 = ba.allocations
    assert (a0.color, a0.parameter_number, a0.parameter_shape_index) == (1, 0, "{1}")
    assert a0.parameter_shape == "(f32[8], s32[2])" and a0.maybe_live_out
    assert [(v.id, v.shape_index, v.phi, v.color) for v in a0.values] == [
        (5, "{1}", False, 1), (9, "{0}", True, 1)
    ]
    assert [(c.id, c.color) for c in a0.cross_color_values] == [(9, 1)]
    assert a1.size == 2048 and a1.is_preallocated_temp
    payload = from_dump_text(ba, None, "m")
    first = payload["allocations"][0]
    assert "color 1" in first["attributes"] and "page 3" in first["attributes"]
    assert "parameter shape index {1}" in first["attributes"]


def test_verbose_oom_string_is_read():
    text = (  # BufferAssignment::ToVerboseString, the shape XLA prints in an OOM error
        "BufferAssignment OOM Debugging.\n"
        "BufferAssignment stats:\n"
        "             parameter allocation:    1.00MiB\n"
        "              constant allocation:         4B\n"
        "        maybe_live_out allocation:    1.00MiB\n"
        "     preallocated temp allocation:    1.52MiB\n"
        "  preallocated temp fragmentation:   12.0KiB (0.77%)\n"
        "                 total allocation:    4.98MiB\n"
        "Peak buffers:\n"
        "\tBuffer 1:\n\t\tSize: 1.00MiB\n\t\tOperator: op_name=\"jit(f)/dot\"\n"
        "\t\tXLA Label: fusion\n\t\tShape: f32[512,512]\n\t\t==========================\n"
        "\n\tBuffer 2:\n\t\tSize: 128.0KiB\n\t\tEntry Parameter Subshape: f32[64,512]\n"
        "\t\t==========================\n"
    )
    ba = parse_buffer_assignment(text, "oom.txt")
    assert ba.allocations == []
    assert ba.stats["total allocation"]["approxBytes"] == human_bytes("4.98MiB")
    assert ba.stats["preallocated temp fragmentation"]["percent"] == pytest.approx(0.77)
    assert [(p.rank, p.approx_bytes, p.label, p.entry_parameter) for p in ba.peak_buffers] == [
        (1, 1 << 20, "fusion", False), (2, 128 << 10, None, True)
    ]


def test_human_bytes():
    assert human_bytes("512B") == 512
    assert human_bytes("128.0KiB") == 131072
    assert human_bytes("1.00MiB") == 1 << 20
    assert human_bytes("f32[2]") is None


# -- bad input ----------------------------------------------------------------------------


def _expect_bad(text: str, path: str) -> BadInput:
    with pytest.raises(BadInput) as info:
        parse_buffer_assignment(text, path)
    assert info.value.file == path and path in info.value.message
    return info.value


def test_empty_binary_and_unrelated_text_are_rejected(tmp_path, demo_logdir):
    _expect_bad("", "/d/empty-buffer-assignment.txt")
    _expect_bad("  \n\n", "/d/blank-buffer-assignment.txt")
    _expect_bad("BufferAssignment:\n", "/d/header-only-buffer-assignment.txt")
    garbage = random.Random(0).randbytes(4096)
    with pytest.raises(BadInput) as info:
        decode_dump_text(b"\x00\x01" + garbage, "/d/bin-buffer-assignment.txt")
    assert info.value.file == "/d/bin-buffer-assignment.txt"
    _expect_bad(garbage.decode("latin-1"), "/d/latin-buffer-assignment.txt")
    no_nul = bytes(b or 1 for b in garbage).decode("latin-1")
    _expect_bad(no_nul, "/d/latin2-buffer-assignment.txt")
    # real text files that are not buffer assignments
    hlo = next((demo_logdir / "dumps" / "mlp").glob("*.cpu_after_optimizations.txt"))
    _expect_bad(_read(hlo), str(hlo))
    readme = HERE.parent / "README.md"
    _expect_bad(_read(readme), str(readme))
    report = next(DATA.glob(f"jax-0.10.2/*{REPORT_SUFFIX}"))
    _expect_bad(_read(report), str(report))
    for bad in ("", "hello\n", _read(readme), _read(next(DATA.glob(f"jax-0.10.2/*{BA_SUFFIX}")))):
        with pytest.raises(BadInput) as info:
            parse_memory_usage_report(bad, "/d/r-memory-usage-report.txt")
        assert info.value.file == "/d/r-memory-usage-report.txt"


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_cut_inside_a_line_is_truncated(path):
    text = _read(path)
    for cut in range(17, len(text) - 1, 41):
        if text[cut - 1] == "\n":
            continue
        with pytest.raises(BadInput) as info:
            parse_buffer_assignment(text[:cut], "cut.txt")
        assert info.value.file == "cut.txt" and "cut.txt" in info.value.message


@pytest.mark.parametrize("path", [p for p in CURRENT], ids=lambda p: p.parent.name + "/"
                         + p.name.split(".")[1])
def test_cut_at_a_line_boundary_is_caught_with_the_report(path):
    """The current format has no trailer, so a file cut exactly after a line can look whole;
    the report beside it (total, values per allocation) catches every such cut."""
    text = _read(path)
    report = _load_report(path)
    ends = [m.end() for m in re.finditer("\n", text)][:-1]
    for cut in ends[1:]:
        with pytest.raises(BadInput) as info:
            from_dump_text(parse_buffer_assignment(text[:cut], "cut.txt"), report, "m")
        assert info.value.file == "cut.txt"


def test_truncated_allocation_header_and_value(tmp_path):
    path = CURRENT[0]
    lines = _read(path).split("\n")
    hdr = next(i for i, ln in enumerate(lines) if ln.startswith("allocation 3:"))
    e = _expect_bad("\n".join(lines[: hdr + 1]) + "\n", str(tmp_path / "a.txt"))
    assert "allocation 3" in e.message and "truncated" in e.message
    e = _expect_bad("\n".join(lines[: hdr + 1])[:-7], str(tmp_path / "b.txt"))
    assert "truncated" in e.message
    e = _expect_bad("\n".join(lines[: hdr + 2])[:-3], str(tmp_path / "c.txt"))
    assert "truncated" in e.message


def test_legacy_truncated_in_values_or_totals():
    path = next(DATA.glob(f"jax-0.5.3/*{BA_SUFFIX}"))
    text = _read(path)
    i = text.index("Used values:")
    j = text.index("\n<20 ", i)
    e = _expect_bad(text[: j + 1], "v.txt")
    assert "Used values" in e.message
    k = text.index("HloLiveRange")
    e = _expect_bad(text[: text.index("  BufferLiveRange:", k)], "l.txt")
    assert "truncated" in e.message
    tampered = text.replace("Total bytes used: 5332", "Total bytes used: 5336")
    e = _expect_bad(tampered, "t.txt")
    assert "5336" in e.message


def test_value_outside_its_allocation_is_corrupt():
    text = ("BufferAssignment:\nallocation 0: size 16, maybe-live-out:\n"
            " value: <1 x @0> (size=32,offset=0): f32[8]{0}\n")
    e = _expect_bad(text, "o.txt")
    assert "outside allocation 0" in e.message


def test_report_truncated_and_mismatched():
    path = next(DATA.glob(f"jax-0.10.2/*jit_conv_step*{REPORT_SUFFIX}"))
    text = _read(path)
    with pytest.raises(BadInput) as info:
        parse_memory_usage_report(text[: len(text) // 2], str(path))
    assert info.value.file == str(path)
    head = text.index("cumulative_size", text.index("cumulative_size") + 10)
    cut = text.index("\n", text.index("------", head)) + 1
    with pytest.raises(BadInput):
        parse_memory_usage_report(text[:cut], str(path))
    pb = next(DATA.glob("jax-0.10.2/*jit_conv_step*-memory-usage-report.pb.gz"))
    msg = hlo_pb2.MemoryUsageReportProto()
    msg.ParseFromString(gzip.decompress(pb.read_bytes()))
    as_text = text_format.MessageToString(msg)
    with pytest.raises(BadInput) as info:
        parse_memory_usage_report(as_text[: as_text.rindex("}")], "p.txt")
    assert "truncated" in info.value.message
    # a report from another module: the totals disagree
    other = _load_ba(next(DATA.glob(f"jax-0.10.2/*jit_update*{BA_SUFFIX}")))
    report = parse_memory_usage_report(text, str(path))
    with pytest.raises(BadInput) as info:
        from_dump_text(other, report, "m")
    assert info.value.file == other.path


def test_large_file_is_linear(tmp_path):
    """~10 MB of real allocation blocks (renumbered) parse in well under a few seconds."""
    import time

    src = _read(next(DEMO_DUMP.glob(f"*{BA_SUFFIX}")))
    blocks = [b for b in re.split(r"(?m)^(?=allocation )", src.split("\n", 1)[1]) if b]
    out = ["BufferAssignment:\n"]
    size = idx = 0
    vid = [0]

    def renumber(_m):
        vid[0] += 1
        return f"<{vid[0]} "

    while size < 10_000_000:
        for b in blocks:
            b = re.sub(r"^allocation \d+", f"allocation {idx}", b)
            b = re.sub(r"<\d+ ", renumber, b)
            out.append(b)
            size += len(b)
            idx += 1
    text = "".join(out)
    t0 = time.process_time()  # CPU seconds: linear, whatever else the machine runs
    ba = parse_buffer_assignment(text, "big.txt")
    elapsed = time.process_time() - t0
    assert len(ba.allocations) == idx and ba.value_count == vid[0]
    assert elapsed < 10, elapsed


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.parent.name.startswith("jax-0.")],
                         ids=lambda p: p.parent.name + "/" + p.name.split(".")[1])
def test_any_cut_is_an_error_or_leaves_every_allocation_whole(path):
    """Older files carry their own checks (Total bytes used, Used values, the live-range
    peak line); with the report beside them, no cut loses data silently."""
    text = _read(path)
    report = _load_report(path)
    full = [(a.index, a.size, [(v.id, v.offset, v.size) for v in a.values])
            for a in _load_ba(path).allocations]
    for m in re.finditer("\n", text[:-1]):
        cut = m.end()
        try:
            ba = parse_buffer_assignment(text[:cut], "cut.txt")
            if report is not None:
                from_dump_text(ba, report, "m")
        except BadInput as e:
            assert e.file == "cut.txt"
            continue
        got = [(a.index, a.size, [(v.id, v.offset, v.size) for v in a.values])
               for a in ba.allocations]
        if report is None and ba.total_bytes_used is None:
            # Nothing states the total: a cut at a line end reads as a shorter file (known
            # limit). Still a prefix: whole allocations, then the first values of the last.
            n = len(got)
            assert got[: n - 1] == full[: n - 1]
            index, size, values = got[-1]
            assert (index, size) == full[n - 1][:2] and values == full[n - 1][2][: len(values)]
        else:
            assert got == full, cut
