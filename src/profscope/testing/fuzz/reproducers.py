"""One tiny hand-written input per finding of issue 13 (and a few neighbours), written
as builder functions so that each is readable here rather than a binary blob. Each
returns a :class:`~profscope.testing.fuzz.mutators.Mutant`: a run folder. They are run first in
every campaign and also serve as seeds for the mutators.
"""

from __future__ import annotations

import gzip
import json
import pickle
from functools import lru_cache

from profscope.testing.fuzz import wire
from profscope.testing.fuzz.mutators import Mutant, Raw, dag, deep_pickle, dumps_raw, gzip_bomb, long_binput

XPLANE = "plugins/profile/s/host.xplane.pb"
DUMP = "module_0001.jit_f.cpu_after_optimizations"


def minimal_xspace() -> bytes:
    """An XSpace with one /host:CPU plane, one line, one event and a hostname, written
    on the wire by hand (XSpace.planes=1, hostnames=4; XPlane id=1 name=2 lines=3
    event_metadata=4; XLine id=1 name=2 timestamp_ns=3 events=4; XEvent metadata_id=1
    offset_ps=2 duration_ps=3)."""
    F = wire.Field
    ev = [F(1, 0, 1), F(2, 0, 1000), F(3, 0, 5000)]
    line = [F(1, 0, 1), F(2, 2, b"python"), F(3, 0, 1_000_000), F(4, 2, b"", children=ev)]
    meta = [F(1, 0, 1), F(2, 2, b"f")]
    meta_entry = [F(1, 0, 1), F(2, 2, b"", children=meta)]
    plane = [F(1, 0, 0), F(2, 2, b"/host:CPU"), F(3, 2, b"", children=line), F(4, 2, b"", children=meta_entry)]
    return wire.serialize([F(1, 2, b"", children=plane), F(4, 2, b"host")])


def _snap(**extra) -> dict:
    base = {"segments": [{"device": 0, "address": 4096, "total_size": 2048, "allocated_size": 1024,
                          "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
                          "blocks": [{"address": 4096, "size": 1024, "requested_size": 1000,
                                      "state": "active_allocated", "frames": []},
                                     {"address": 5120, "size": 1024, "state": "inactive", "frames": []}]}],
            "device_traces": [[{"action": "alloc", "addr": 4096, "size": 1024, "stream": 0, "time_us": 1,
                                "frames": [{"filename": "a.py", "line": 1, "name": "f"}]}]]}
    base.update(extra)
    return base


def _trace(ev_extra: dict | None = None, **top) -> bytes:
    ev = {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"k": 1}}
    ev.update(ev_extra or {})
    doc = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}}, ev,
                           {"ph": "X", "name": "op2", "pid": 1, "tid": 1, "ts": 20, "dur": 5}], **top}
    return dumps_raw(doc).encode("utf-8", "surrogatepass")


def _ba_text(size: str = "1024", offset: str = "0") -> bytes:
    return (f"BufferAssignment:\nallocation 0: size {size}, parameter 0, shape |f32[256]| at ShapeIndex {{}}:\n"
            f" value: <1 p0 @0> (size={size},offset={offset}): f32[256]{{0}}\n\n"
            "Total bytes used: 1024 (1.00KiB)\n").encode()


def _xplane_len_field(n: int) -> bytes:
    """XSpace whose first plane claims n bytes (n >= 2^63 broke the reader)."""
    return wire.varint((1 << 3) | 2) + wire.varint(n) + minimal_xspace()


@lru_cache(maxsize=1)
def _reproducers() -> tuple[Mutant, ...]:
    return tuple(_build())


def reproducers() -> list[Mutant]:
    """Every reproducer (built once per process: the gzip bomb takes a second)."""
    return [Mutant(m.fmt, m.name, dict(m.files), list(m.ops)) for m in _reproducers()]


def _build() -> list[Mutant]:
    out: list[Mutant] = []

    def add(fmt: str, name: str, files: dict[str, bytes]):
        out.append(Mutant(fmt, f"repro:{name}", files, [name]))

    # -- snapshots (pickle) -------------------------------------------------------------
    add("snapshot", "dag21_allocator_settings", {"s.pickle": pickle.dumps(_snap(allocator_settings=dag(21)), 4)})
    add("snapshot", "dag21_external_annotations", {"s.pickle": pickle.dumps(_snap(external_annotations=dag(21)), 4)})
    add("snapshot", "dag21_bare", {"s.pickle": pickle.dumps({"segments": [], "device_traces": [[]],
                                                             "allocator_settings": dag(21)}, 4)})
    add("snapshot", "long_binput_2^26", {"s.pickle": long_binput(2**26)})
    add("snapshot", "long_binput_2^30", {"s.pickle": long_binput(2**30)})
    d: dict = {"segments": [], "device_traces": [[]]}
    d["allocator_settings"] = d
    add("snapshot", "self_referencing_dict", {"s.pickle": pickle.dumps(d, 4)})
    seg: dict = {"device": 0, "address": 0, "total_size": 1, "blocks": []}
    seg["blocks"].append(seg)
    add("snapshot", "self_referencing_segment", {"s.pickle": pickle.dumps({"segments": [seg], "device_traces": [[]]}, 4)})
    add("snapshot", "deep_list_100k", {"s.pickle": deep_pickle(100_000, "list")})
    add("snapshot", "deep_dict_100k", {"s.pickle": deep_pickle(100_000, "dict")})
    add("snapshot", "nan_sizes", {"s.pickle": pickle.dumps(_snap(device_traces=[[
        {"action": "alloc", "addr": 4096, "size": float("nan"), "stream": 0, "time_us": float("inf")}]]), 4)})
    add("snapshot", "surrogate_frame", {"s.pickle": pickle.dumps(_snap(device_traces=[[
        {"action": "alloc", "addr": 4096, "size": 8, "stream": 0,
         "frames": [{"filename": "\ud800", "line": 1, "name": "a\udfffb"}]}]]), 4)})
    add("snapshot", "huge_int_size", {"s.pickle": pickle.dumps(_snap(device_traces=[[
        {"action": "alloc", "addr": 2**70, "size": 2**64 + 5, "stream": 0}]]), 4)})

    # -- xplane -------------------------------------------------------------------------
    # 256 MiB of zeros in an unknown field: a quarter MB on disk.
    add("xplane", "gzip_bomb_256MiB", {XPLANE + ".gz": gzip_bomb(minimal_xspace(), 1000, 256 << 20)})
    add("xplane", "gzip_bomb_256MiB_in_plane",
        {XPLANE + ".gz": gzip_bomb(minimal_xspace(), 1000, 256 << 20, in_first_field=True)})
    z = gzip.compress(minimal_xspace(), mtime=0)
    add("xplane", "corrupt_deflate", {XPLANE + ".gz": z[:10] + b"\xff" * 9 + z[-8:]})
    add("xplane", "truncated_gzip", {XPLANE + ".gz": z[: len(z) // 2]})
    add("xplane", "len_2^63", {XPLANE: _xplane_len_field(2**63)})
    add("xplane", "len_2^64-1", {XPLANE: _xplane_len_field(2**64 - 1)})
    add("xplane", "len_2^31", {XPLANE: _xplane_len_field(2**31)})
    add("xplane", "empty_file", {XPLANE: b""})

    # -- Chrome traces ------------------------------------------------------------------
    t = "t.trace.json"
    add("trace", "args_int_beyond_64_bits", {t: _trace({"args": {"k": 2**64 + 5}})})
    add("trace", "ts_1e308", {t: _trace({"ts": 1e308})})
    add("trace", "dur_1e308", {t: _trace({"dur": 1e308})})
    add("trace", "ts_10^400", {t: _trace({"ts": Raw("1" + "0" * 400)})})
    add("trace", "ts_NaN", {t: _trace({"ts": Raw("NaN")})})
    add("trace", "dur_Infinity", {t: _trace({"dur": Raw("Infinity")})})
    add("trace", "name_lone_surrogate", {t: _trace({"name": "\ud800"})})
    add("trace", "id_lone_surrogate", {t: _trace({"ph": "s", "id": "\ud800", "cat": "flow"})})
    add("trace", "pid_list", {t: _trace({"pid": [1, 2]})})
    add("trace", "args_list", {t: _trace({"args": [1, 2]})})
    add("trace", "args_deep_10k", {t: _trace({"args": Raw('{"a":' * 10_000 + "1" + "}" * 10_000)})})
    add("trace", "tid_2^63", {t: _trace({"tid": 2**63})})
    add("trace", "tid_2^64", {t: _trace({"tid": 2**64})})
    add("trace", "pid_negative_huge", {t: _trace({"pid": -(2**70)})})
    add("trace", "truncated", {t: _trace()[:57]})
    add("trace", "deep_array_100k", {t: ("[" * 100_000 + "]" * 100_000).encode()})
    add("trace", "memory_event_huge_bytes", {t: _trace({"ph": "i", "name": "[memory]", "s": "t",
                                                        "args": {"Addr": 2**64, "Bytes": 2**70, "Total Allocated": 1e308,
                                                                 "Device Type": 0, "Device Id": -1}})})
    zt = gzip.compress(_trace(), mtime=0)
    add("trace", "corrupt_deflate_gz", {t + ".gz": zt[:10] + b"\xff" * 9 + zt[-8:]})

    # -- XLA dumps ----------------------------------------------------------------------
    add("dump_text", "ba_size_10^400", {f"{DUMP}-buffer-assignment.txt": _ba_text("1" + "0" * 400)})
    add("dump_text", "ba_size_2^64", {f"{DUMP}-buffer-assignment.txt": _ba_text(str(2**64))})
    add("dump_text", "ba_offset_negative", {f"{DUMP}-buffer-assignment.txt": _ba_text("1024", "-99999999999999999999")})
    add("dump_text", "memory_usage_report_huge", {
        f"{DUMP}-buffer-assignment.txt": _ba_text(),
        f"{DUMP}-memory-usage-report.txt": (
            "Memory Space: default (color=0)\n"
            f"Total bytes: {2**70} (1e400GiB)\n"
            "  cumulative_size;       size;       offset; used_by_n_values; shapes_list\n"
            "  ------------------------------------------------------------\n"
            f"    1.00MiB( 66%);    99999999999999999999PiB;  {2**64};   {'9' * 400}; f32[512,512]\n").encode()})
    add("dump_text", "live_range_huge", {
        f"{DUMP}-buffer-assignment.txt": _ba_text(),
        f"{DUMP}-live-range.txt": (b"HloLiveRange (max 99999999999999999999999):\n  Live ranges at 1 (peak):\n"
                                   b"    x.1{}: " + str(2**64).encode() + b" bytes (cumulative: " + b"9" * 400 + b" bytes)\n")})
    add("hlo", "hlo_len_2^63", {f"{DUMP}.hlo.pb": wire.varint(10) + wire.varint(2**63) + b"abc"})
    add("hlo", "hlo_truncated", {f"{DUMP}.hlo.pb": b"\x0a\x80\x80\x80\x80\x10"})
    big = hlo_shape_dims(300, 2**62)
    if big is not None:
        add("hlo", "shape_300_dims_of_2^62", {f"{DUMP}.hlo.pb": big})

    # -- memory timeline (beside a trace) -------------------------------------------------
    mt = "x.memory_timeline.json"
    base_trace = {"x.pt.trace.json": _trace()}
    add("memory_timeline", "huge_numbers", {**base_trace, mt: dumps_raw(
        [[Raw("1" + "0" * 400), 2**64 + 5], [[0, 2**70, Raw("NaN")], [1, 1e308, -1]]]).encode()})
    add("memory_timeline", "nested_deep", {**base_trace, mt: ("[" * 50_000 + "]" * 50_000).encode()})
    add("memory_timeline", "wrong_shape", {**base_trace, mt: json.dumps({"a": [1, 2]}).encode()})
    return out


def hlo_shape_dims(n: int, d: int) -> bytes | None:
    """The demo's compiled MLP module with its first entry instruction's shape made
    n dimensions of d: the byte size has thousands of digits (found by the fuzzer, seed 3:
    the error message formatting it raised ValueError past Python's 4300-digit limit)."""
    from pathlib import Path

    from profscope.model.protos import hlo_pb2

    dump = Path(__file__).resolve().parents[2] / "demo" / "logdir" / "dumps" / "mlp"  # the bundled demo
    files = sorted(dump.glob("*cpu_after_optimizations.hlo.pb"))
    if not files:
        return None
    h = hlo_pb2.HloProto()
    h.ParseFromString(files[0].read_bytes())
    shape = h.hlo_module.computations[-1].instructions[0].shape
    del shape.dimensions[:]
    shape.dimensions.extend([d] * n)
    return h.SerializeToString()


def live_range_seed() -> bytes:
    """What jax 0.10.2 writes as *-live-range.txt for a two-instruction program."""
    return ("HloLiveRange (max 2):\n  InstructionSequence:\n    0:x.1\n    1:ynn_fusion\n  BufferLiveRange:\n"
            "    x.1{}:0-2\n    ynn_fusion{}:1-2\n  Live ranges at 1 (peak):\n"
            "    x.1{}: 16384 bytes (cumulative: 16384 bytes)\n    ynn_fusion{}: 4 bytes (cumulative: 16388 bytes)\n"
            "  Stack trace breakdown for peak usage: 16 388 bytes\n"
            "    main.2 (100.0%, total: 16 388 bytes, current: 0 bytes, remaining: 16 388 bytes)\n").encode()
