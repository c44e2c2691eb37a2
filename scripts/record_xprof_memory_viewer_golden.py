#!/usr/bin/env python3
"""Record XProf 2.24.2's memory-viewer answers as golden data for profscope's tests.

For every module of every demo profile (``src/profscope/demo/logdir/*/plugins/profile/
*/*.xplane.pb``) and every memory space the module has (plus space 1 for the train steps,
a space they do not have), and for a set of synthetic modules built here to reach the
corners of XProf's algorithm the demo programs never hit (SHARE_WITH chains, equal sizes
sorted by ``std::sort``, several memory spaces and traces, tuple and packed shapes,
legacy source locations, ids beyond int32, a double free), this script runs XProf's own
converter:

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_names([xplane])
    r.xspace_to_tool_data([xplane], "memory_viewer",
                          {"module_name": "<module>(<program_id>)", "memory_space": "<n>"})

in a scratch virtual environment (``--xprof-python``, default
``$XPROF_PYTHON``, with ``pip install xprof==2.24.2``; never a profscope
dependency), always on a *copy* of the profile in a temporary folder (XProf writes
``<module>.hlo_proto.pb`` files next to the profile it reads). Every synthetic module gets
its own profile and XProf process, so a crash in one cannot hide the others.

Writes into ``tests/golden/memory_viewer/`` (``--out``):

* ``<run>__<module>__<space>.json.gz``: XProf's exact response body, gzipped (mtime 0);
* ``synthetic__<module>.hlo.pb.gz``: the serialized ``xla.HloProto`` of each synthetic
  module (the tests read the demo modules from the demo profiles themselves);
* ``index.json``: one entry per case: ``run``, ``module``, ``space``, ``input``
  (``{"xplane": <demo path>}`` or ``{"hlo": <file>}``), ``input_sha256`` (of the
  HloProto bytes), and either ``golden`` (file name) or ``error`` (what XProf said
  instead of a body), plus ``_meta`` (XProf version, how it was called).

Usage: ``.venv/bin/python scripts/record_xprof_memory_viewer_golden.py``
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile

from profscope.formats import hlo_proto, xplane
from profscope.formats.protos import xplane_pb2
from profscope.model.protos import hlo_pb2
from profscope.tools import memory_viewer

REPO = pathlib.Path(__file__).resolve().parent.parent

DEFAULT_OUT = REPO / "tests" / "golden" / "memory_viewer"
# a venv with xprof==2.24.2 (never a profscope dependency): --xprof-python or $XPROF_PYTHON
DEFAULT_XPROF_PYTHON = os.environ.get("XPROF_PYTHON", "")
DEMO_GLOB = "src/profscope/demo/logdir/*/plugins/profile/*/*.xplane.pb"
SYNTHETIC_RUN = "synthetic"

# Runs inside the XProf venv. Reads {"xplane": path, "requests": [[module, space]...]}
# on stdin, answers one JSON line per request.
XPROF_RUNNER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r

job = json.load(sys.stdin)
x = job["xplane"]
r.xspace_to_tool_names([x])
for module, space in job["requests"]:
    try:
        data, content_type = r.xspace_to_tool_data(
            [x], "memory_viewer", {"module_name": module, "memory_space": space})
    except Exception as e:  # XProf raises for some bad inputs
        print(json.dumps({"module": module, "space": space, "error": repr(e)}), flush=True)
        continue
    if data is None:
        print(json.dumps({"module": module, "space": space, "error": "no data"}), flush=True)
        continue
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    print(json.dumps({"module": module, "space": space, "body": data,
                      "content_type": content_type}), flush=True)
"""


# ---------------------------------------------------------------------------
# Synthetic modules
# ---------------------------------------------------------------------------

ALLOC, FREE, SHARE = 0, 1, 2
PT = hlo_pb2.PrimitiveType


def shape(text_type: str, dims=(), layout=None, *, dynamic=(), tiles=(), bits=0, space=0,
          tail=0) -> hlo_pb2.ShapeProto:
    """An array shape; ``layout`` is minor_to_major (None: no layout at all)."""
    s = hlo_pb2.ShapeProto(element_type=PT.Value(text_type.upper()), dimensions=list(dims))
    if dynamic:
        s.is_dynamic_dimension.extend(dynamic)
    if layout is not None:
        s.layout.minor_to_major.extend(layout)
        for t in tiles:
            s.layout.tiles.add().dimensions.extend(t)
        s.layout.element_size_in_bits = bits
        s.layout.memory_space = space
        s.layout.tail_padding_alignment_in_elements = tail
    return s


def tup(*elements) -> hlo_pb2.ShapeProto:
    s = hlo_pb2.ShapeProto(element_type=PT.Value("TUPLE"))
    for e in elements:
        s.tuple_shapes.add().CopyFrom(e)
    return s


def f32(*dims):
    return shape("f32", dims, list(range(len(dims) - 1, -1, -1)))


class Builder:
    """A small HloProto: one computation, logical buffers, allocations, traces."""

    def __init__(self, name: str, entry: str = "main.1"):
        self.h = hlo_pb2.HloProto()
        m = self.h.hlo_module
        m.name = name
        m.entry_computation_name = entry
        m.id = 1
        self.comp = m.computations.add(name=entry, id=1)
        self.next_instr = 1
        self.files: dict[str, int] = {}

    def frame(self, file: str, line: int, col: int = 1, parent: int = 0,
              function: str = "f", file_id: int | None = None) -> int:
        sfi = self.h.hlo_module.stack_frame_index
        if file_id is None:
            if file not in self.files:
                sfi.file_names.append(file)
                self.files[file] = len(sfi.file_names)
            file_id = self.files[file]
        sfi.function_names.append(function)
        sfi.file_locations.add(file_name_id=file_id, function_name_id=len(sfi.function_names),
                               line=line, column=col)
        sfi.stack_frames.add(file_location_id=len(sfi.file_locations), parent_frame_id=parent)
        return len(sfi.stack_frames)

    def instr(self, name: str, opcode: str, shp, *, op_name: str = "", frame: int = 0,
              source: tuple[str, int] | None = None, iid: int | None = None,
              backend_config: str = "") -> int:
        ins = self.comp.instructions.add(name=name, opcode=opcode)
        ins.shape.CopyFrom(shp)
        ins.id = iid if iid is not None else self.next_instr
        self.next_instr = max(self.next_instr, ins.id) + 1
        if op_name:
            ins.metadata.op_name = op_name
        if frame:
            ins.metadata.stack_frame_id = frame
        if source:
            ins.metadata.source_file, ins.metadata.source_line = source
        if backend_config:
            ins.backend_config = backend_config.encode()
        return ins.id

    def lb(self, lb_id: int, instr_id: int, size: int, index=(), color: int = 0) -> int:
        lb = self.h.buffer_assignment.logical_buffers.add(id=lb_id, size=size, color=color)
        lb.defined_at.instruction_id = instr_id
        lb.defined_at.shape_index.extend(index)
        return lb_id

    def alloc(self, index: int, size: int, assigned, *, color: int = 0, **flags):
        a = self.h.buffer_assignment.buffer_allocations.add(index=index, size=size, color=color)
        for k, v in flags.items():
            setattr(a, k, v)
        for lb_id, offset, lb_size in assigned:
            a.assigned.add(logical_buffer_id=lb_id, offset=offset, size=lb_size)
        return a

    def trace(self, events, alloc_index: int = 0):
        t = self.h.buffer_assignment.heap_simulator_traces.add(
            whole_module_simulation=True, buffer_allocation_index=alloc_index)
        for ev in events:
            kind, buf = ev[0], ev[1]
            share = ev[2] if kind == SHARE else 0
            name = ev[-1] if isinstance(ev[-1], str) else f"op{buf}"
            t.events.add(kind=kind, buffer_id=buf, share_with_canonical_id=share,
                         computation_name="main.1", instruction_name=name)
        return t


def case_sharing() -> hlo_pb2.HloProto:
    """SHARE_WITH before and after FREE, chains, re-ALLOC of a sharer, the peak shown
    under a sharer's name (bigger than the canonical buffer), a later point equal to (not
    above) the peak, an event on an unknown buffer."""
    b = Builder("sharing")
    f = b.frame("model.py", 10)
    p = b.instr("p0", "parameter", f32(64, 64), op_name="params")
    out = b.instr("out", "fusion", f32(128, 128), op_name="jit(f)/out", frame=f)
    b.lb(1, p, 16384)
    b.lb(2, out, 65536)
    b.alloc(0, 16384, [(1, 0, 16384)], is_entry_computation_parameter=True)
    b.alloc(1, 65536, [(2, 0, 65536)], maybe_live_out=True)
    # Heap after each event (bytes): 65536, 65536, 131072, 131072, 65536, 131072,
    # 131072, (unknown id), 393216 = peak (buffer 10 live, shown as its sharer 13),
    # ..., then buffer 19 brings the heap back to exactly 393216.
    sizes = {10: 65536, 11: 65536, 12: 65536, 13: 131072, 14: 65536, 15: 262144,
             16: 1024, 17: 1024, 18: 32768, 19: 393216 - 1024}
    events = [
        (ALLOC, 10), (SHARE, 11, 10), (ALLOC, 12), (FREE, 10), (FREE, 11),
        (SHARE, 13, 10), (SHARE, 14, 13), (ALLOC, 999), (ALLOC, 15),
        (FREE, 13), (FREE, 15), (FREE, 14),
        (ALLOC, 16), (SHARE, 17, 16), (FREE, 16), (ALLOC, 17), (FREE, 17), (FREE, 17),
        (FREE, 12), (ALLOC, 18), (FREE, 18), (ALLOC, 19), (FREE, 19),
    ]
    offset = 0
    assigned = []
    for k, size in sizes.items():
        iid = b.instr(f"t{k}", "fusion", shape("u8", [size], [0]), op_name=f"jit(f)/t{k}",
                      frame=b.frame("model.py", 100 + k, 4, parent=f))
        b.lb(k, iid, size)
        assigned.append((k, offset, size))
        offset += size
    b.alloc(2, offset, assigned)
    b.trace(events, alloc_index=2)
    return b.h


def case_sort() -> hlo_pb2.HloProto:
    """Hundreds of buffers at peak, many of equal size: libstdc++ introsort order."""
    b = Builder("sort")
    rnd = random.Random(7)
    choices = [16384, 16384, 32768, 65536, 65536, 65536, 131072, 4096, 16383, 200000]
    assigned, events, offset = [], [], 0
    for k in range(300):
        size = rnd.choice(choices)
        iid = b.instr(f"b{k}", "fusion", shape("u8", [size], [0]), op_name=f"jit(f)/b{k}")
        b.lb(100 + k, iid, size)
        assigned.append((100 + k, offset, size))
        offset += size
        events.append((ALLOC, 100 + k))
    for k in range(0, 300, 3):
        events.append((FREE, 100 + k))
    for k in range(20):
        iid = b.instr(f"p{k}", "parameter", f32(64, 64))
        b.lb(k + 1, iid, 16384)
        b.alloc(k, 16384, [(k + 1, 0, 16384)], is_entry_computation_parameter=True,
                parameter_number=k)
    b.alloc(20, offset, assigned)
    b.trace(events, alloc_index=20)
    return b.h


def case_spaces() -> hlo_pb2.HloProto:
    """Colors 0, 1 and 5; per-color traces; a trace found only by counting events; an
    indefinite allocation outside color 0; scoped VMEM in backend configs."""
    b = Builder("spaces")
    cfg = json.dumps({"used_scoped_memory_configs": [
        {"memory_space": "1", "size": "40960"}, {"memory_space": 1, "size": 8192},
        {"memory_space": 0, "size": 999999}]})
    cfg2 = json.dumps({"used_scoped_memory_configs": [{"memory_space": 1, "size": 1 << 20}]})
    p = b.instr("p0", "parameter", f32(256, 64))
    x = b.instr("x", "fusion", f32(256, 64), op_name="jit(f)/x", backend_config=cfg)
    y = b.instr("y", "fusion", f32(256, 256), op_name="jit(f)/y", backend_config=cfg2)
    v1 = b.instr("v1", "copy-start", shape("f32", [256, 64], [1, 0], space=1))
    v2 = b.instr("v2", "copy-start", shape("f32", [128, 64], [1, 0], space=1))
    vo = b.instr("vout", "copy", shape("f32", [32], [0], space=1))
    h1 = b.instr("h1", "copy", shape("f32", [64, 64], [1, 0], space=5))
    h2 = b.instr("h2", "copy", shape("f32", [32, 64], [1, 0], space=5))
    b.lb(1, p, 65536)
    b.lb(2, x, 65536)
    b.lb(3, y, 262144)
    b.lb(4, v1, 65536, color=1)
    b.lb(5, v2, 32768, color=1)
    b.lb(6, vo, 128, color=1)
    b.lb(7, h1, 16384, color=5)
    b.lb(8, h2, 8192, color=5)
    b.alloc(0, 65536, [(1, 0, 65536)], is_entry_computation_parameter=True)
    b.alloc(1, 327680, [(2, 0, 65536), (3, 65536, 262144)])
    b.alloc(2, 98304, [(4, 0, 65536), (5, 65536, 32768)], color=1)
    b.alloc(3, 128, [(6, 0, 128)], color=1, maybe_live_out=True)
    b.alloc(4, 24576, [(7, 0, 16384), (8, 16384, 8192)], color=5, maybe_live_out=True)
    b.trace([(ALLOC, 2), (ALLOC, 3), (FREE, 2), (FREE, 3)], alloc_index=1)
    b.trace([(ALLOC, 4), (ALLOC, 5), (FREE, 4), (ALLOC, 4), (FREE, 5), (FREE, 4)], alloc_index=2)
    b.trace([(ALLOC, 7), (ALLOC, 8), (FREE, 8), (FREE, 7)], alloc_index=4)
    return b.h


def case_blocks() -> hlo_pb2.HloProto:
    """Several allocations of one color: a tuple allocation that is not live out (no
    trace), two temporary allocations with one trace each (the lower index wins), a
    thread-local one and constants; the block timeline lays them out."""
    b = Builder("blocks")
    t = b.instr("t", "tuple", tup(f32(4), f32(8)))
    c = b.instr("c", "constant", f32(4096), op_name="const")
    tl = b.instr("tl", "add", f32(1))
    b.lb(1, t, 16)
    b.lb(2, c, 16384)
    b.lb(3, tl, 4)
    b.alloc(0, 16, [(1, 0, 16)], is_tuple=True)
    temps1, temps2, ev1, ev2 = [], [], [], []
    for k in range(12):
        size = 4096 * (k + 1)
        iid = b.instr(f"a{k}", "fusion", shape("u8", [size], [0]), op_name=f"jit(f)/a{k}")
        b.lb(10 + k, iid, size)
        temps1.append((10 + k, 8192 * k, size))
        ev1.append((ALLOC, 10 + k))
        if k % 2:
            ev1.append((FREE, 10 + k - 1))
    for k in range(5):
        size = 300000 + k
        iid = b.instr(f"z{k}", "fusion", shape("u8", [size], [0]))
        b.lb(40 + k, iid, size)
        temps2.append((40 + k, 0, size))
        ev2 += [(ALLOC, 40 + k), (FREE, 40 + k)]
    b.alloc(1, 8192 * 12 + 49152, temps1)
    b.alloc(2, 300004, temps2)
    b.alloc(3, 4, [(3, 0, 4)], is_thread_local=True)
    b.alloc(4, 16384, [(2, 0, 16384)], is_constant=True)
    b.trace(ev1, alloc_index=1)
    b.trace(ev2 * 30, alloc_index=2)
    return b.h


def case_shapes() -> hlo_pb2.HloProto:
    """Shape strings and unpadded sizes: tuples (nested, >5 elements), shape indices,
    scalars with and without layout, packed s4, tiles, dynamic dimensions, memory space,
    tail padding, no layout at all, opaque and token, every element width."""
    b = Builder("shapes")
    big = tup(f32(2, 3), shape("s32", [], []), shape("pred", [7], [0]),
              shape("bf16", [4, 4], [0, 1]), tup(f32(1), shape("token")),
              shape("f32", [], []), f32(5), f32(6), f32(7), f32(8), f32(9))
    specs = [
        ("tuple", big, ()),
        ("tuple_elem", big, (3,)),
        ("tuple_deep", big, (4, 0)),
        ("tuple_past_end", tup(f32(3)), (5,)),
        ("s4_packed", shape("s4", [16, 16], [1, 0], bits=4), ()),
        ("s4_plain", shape("s4", [16, 16], [1, 0]), ()),
        ("tiled", shape("f32", [8, 128], [1, 0], tiles=[[8, 128]]), ()),
        ("tiled2", shape("bf16", [16, 256], [1, 0], tiles=[[16, 128], [2, 1]]), ()),
        ("dynamic", shape("f32", [10, 4], [1, 0], dynamic=[True, False]), ()),
        ("scalar_space", shape("f32", [], [], space=1), ()),
        ("vec_space", shape("f32", [4], [0], space=1), ()),
        ("tail", shape("u8", [3], [0], tail=4), ()),
        ("no_layout", shape("f32", [3, 5]), ()),
        ("col_major", shape("f64", [3, 5, 7], [0, 1, 2]), ()),
        ("opaque", shape("opaque_type"), ()),
        ("token", shape("token"), ()),
        ("c64", shape("c64", [3], [0]), ()),
        ("c128", shape("c128", [2, 2], [1, 0]), ()),
        ("f8", shape("f8e4m3fn", [64, 64], [1, 0]), ()),
        ("u4", shape("u4", [64], [0]), ()),
        ("zero", shape("f32", [0, 8], [1, 0]), ()),
        ("big_f32", f32(96, 96), ()),
    ]
    params, temps, events, offset = [], [], [], 0
    for k, (name, shp, index) in enumerate(specs):
        iid = b.instr(name, "fusion" if k % 2 else "parameter", shp, op_name=f"jit(f)/{name}")
        lb_id = 10 + k
        size = 20000 + 4 * k  # padded sizes are what XLA assigned, not the shape's
        b.lb(lb_id, iid, size, index=index)
        params.append((lb_id, 0, size))
        lb2 = 100 + k
        b.lb(lb2, iid, size, index=index)
        temps.append((lb2, offset, size))
        offset += size
        events.append((ALLOC, lb2))
        if k % 3 == 2:
            events.append((FREE, lb2 - 2))
    b.alloc(0, 20000 + 4 * len(specs), params, is_entry_computation_parameter=True)
    b.alloc(1, offset, temps)
    b.trace(events, alloc_index=1)
    return b.h


def case_source() -> hlo_pb2.HloProto:
    """Source locations: legacy source_file/line, stack frames without a file, a first
    frame whose 'line' is not a number, frame ids out of range, no op name."""
    b = Builder("source")
    outer = b.frame("/src/train.py", 300, 2)
    inner = b.frame("/src/model.py", 42, 8, parent=outer)
    nofile = b.frame("", 7, 3, parent=outer, file_id=0)
    windows = b.frame("C:\\work\\model.py", 5, 1)
    kinds = [
        ("frames", dict(frame=inner, op_name="jit(f)/dot")),
        ("legacy", dict(frame=inner, source=("legacy.py", 12), op_name="jit(f)/legacy")),
        ("legacy_line0", dict(source=("legacy0.py", 0))),
        ("no_file", dict(frame=nofile, op_name="jit(f)/nofile")),
        ("windows", dict(frame=windows)),
        ("out_of_range", dict(frame=99)),
        ("nothing", dict()),
    ]
    assigned, events, offset = [], [], 0
    for k, (name, kw) in enumerate(kinds):
        iid = b.instr(name, "fusion", f32(64, 64 + k), **kw)
        b.lb(10 + k, iid, 16384 + 256 * k)
        assigned.append((10 + k, offset, 16384 + 256 * k))
        offset += 16384 + 256 * k
        events.append((ALLOC, 10 + k))
    b.alloc(0, offset, assigned)
    b.trace(events + [(FREE, 10 + k) for k in range(len(kinds))])
    return b.h


def case_bigids() -> hlo_pb2.HloProto:
    """Logical buffer ids, instruction ids and allocation indices beyond int32."""
    b = Builder("bigids")
    big = (1 << 32) + 7
    i1 = b.instr("a", "fusion", f32(64, 64), iid=(1 << 33) + 1)
    i2 = b.instr("b", "fusion", f32(64, 128), iid=(1 << 33) + 2)
    i3 = b.instr("c", "parameter", f32(64, 64), iid=(1 << 33) + 3)
    b.lb(big, i1, 16384)
    b.lb((1 << 31) + 1, i2, 32768)
    b.lb(5, i3, 16384)
    b.alloc((1 << 40) + 3, 49152, [(big, 0, 16384), ((1 << 31) + 1, 16384, 32768)])
    b.alloc(1, 16384, [(5, 0, 16384)], is_entry_computation_parameter=True)
    b.trace([(ALLOC, big), (ALLOC, (1 << 31) + 1), (FREE, big), (FREE, (1 << 31) + 1)])
    return b.h


def case_double_free() -> hlo_pb2.HloProto:
    """A buffer freed twice: XProf refuses the module."""
    b = Builder("double_free")
    i1 = b.instr("a", "fusion", f32(64, 64))
    b.lb(1, i1, 16384)
    b.alloc(0, 16384, [(1, 0, 16384)])
    b.trace([(ALLOC, 1), (FREE, 1), (FREE, 1)])
    return b.h


def case_unsorted() -> hlo_pb2.HloProto:
    """Allocations out of index order in the proto; an indefinite allocation holding only
    zero-size buffers (left out of the heap offset); a constant allocation whose largest
    buffer comes last; ties between equal buffer sizes in one allocation."""
    b = Builder("unsorted")
    ins = {k: b.instr(f"i{k}", "parameter" if k < 3 else "fusion", f32(64, 64 + k))
           for k in range(10)}
    b.lb(1, ins[0], 16384)
    b.lb(2, ins[1], 20000)
    b.lb(3, ins[2], 0)
    b.lb(4, ins[3], 8)
    b.lb(5, ins[4], 30000)
    b.lb(6, ins[5], 30000)
    b.lb(7, ins[6], 40000)
    b.lb(8, ins[7], 40000)
    b.alloc(3, 30000, [(4, 0, 8), (5, 0, 30000), (6, 0, 30000)], is_constant=True)
    b.alloc(0, 16384, [(1, 0, 16384)], is_entry_computation_parameter=True)
    b.alloc(5, 80000, [(7, 0, 40000), (8, 40000, 40000)])
    b.alloc(2, 64, [(3, 0, 0)], maybe_live_out=True)
    b.alloc(1, 20000, [(2, 0, 20000)], is_entry_computation_parameter=True, maybe_live_out=True)
    b.trace([(ALLOC, 7), (ALLOC, 8), (FREE, 7), (FREE, 8)], alloc_index=5)
    return b.h


def case_two_allocations() -> hlo_pb2.HloProto:
    """One trace over buffers of two allocations: XProf refuses the module."""
    b = Builder("two_allocations")
    i1 = b.instr("a", "fusion", f32(64, 64))
    i2 = b.instr("b", "fusion", f32(64, 64))
    b.lb(1, i1, 16384)
    b.lb(2, i2, 16384)
    b.alloc(0, 16384, [(1, 0, 16384)])
    b.alloc(1, 16384, [(2, 0, 16384)])
    b.trace([(ALLOC, 1), (ALLOC, 2), (FREE, 1), (FREE, 2)])
    return b.h


SYNTHETIC = {
    # name -> (builder, program id, memory spaces to ask)
    "sharing": (case_sharing, 1, ["0"]),
    "sort": (case_sort, 2, ["0"]),
    "spaces": (case_spaces, 3, ["0", "1", "5"]),
    "blocks": (case_blocks, 4, ["0"]),
    "shapes": (case_shapes, 5, ["0"]),
    "source": (case_source, 6, ["0"]),
    "bigids": (case_bigids, 7, ["0"]),
    "double_free": (case_double_free, 8, ["0"]),
    "unsorted": (case_unsorted, 9, ["0"]),
    "two_allocations": (case_two_allocations, 10, ["0"]),
}


def xspace_with(modules: list[tuple[str, int, bytes]]) -> bytes:
    """An XSpace whose /host:metadata plane carries the given HloProtos, as JAX writes it."""
    space = xplane_pb2.XSpace(hostnames=["synthetic"])
    plane = space.planes.add(id=0, name="/host:metadata")
    plane.stat_metadata[1].CopyFrom(xplane_pb2.XStatMetadata(id=1, name="Hlo Proto"))
    plane.stat_metadata[2].CopyFrom(xplane_pb2.XStatMetadata(id=2, name="program_id"))
    for i, (name, program_id, data) in enumerate(modules, start=1):
        md = plane.event_metadata[i]
        md.id = i
        md.name = md.display_name = f"{name}({program_id})"
        md.stats.add(metadata_id=1, bytes_value=data)
        md.stats.add(metadata_id=2, uint64_value=program_id)
    return space.SerializeToString(deterministic=True)


# ---------------------------------------------------------------------------
# Running XProf
# ---------------------------------------------------------------------------


def run_xprof(xprof_python: str, xplane_bytes: bytes, requests: list[list[str]]) -> list[dict]:
    """XProf's answers for (module, space) requests on a private copy of a profile."""
    with tempfile.TemporaryDirectory(prefix="xprof_mv_") as tmp:
        session = pathlib.Path(tmp) / "plugins" / "profile" / "session"
        session.mkdir(parents=True)
        path = session / "host.xplane.pb"
        path.write_bytes(xplane_bytes)
        job = json.dumps({"xplane": str(path), "requests": requests})
        proc = subprocess.run([xprof_python, "-c", XPROF_RUNNER], input=job, text=True,
                              capture_output=True, timeout=600)
        answers = [json.loads(line) for line in proc.stdout.splitlines()
                   if line.startswith("{")]
        got = {(a["module"], a["space"]) for a in answers}
        for module, space in requests:
            if (module, space) not in got:
                tail = proc.stderr.strip().splitlines()[-3:]
                answers.append({"module": module, "space": space,
                                "error": f"XProf exited with {proc.returncode}: "
                                         + " | ".join(tail)})
        return answers


def write_gz(path: pathlib.Path, data: bytes) -> None:
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as g:
            g.write(data)


def safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "()_.-" else "_" for c in name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xprof-python", default=DEFAULT_XPROF_PYTHON)
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if not args.xprof_python:
        ap.error("give --xprof-python or set XPROF_PYTHON (a venv with xprof==2.24.2)")

    version = subprocess.run(
        [args.xprof_python, "-c", "import importlib.metadata as m; print(m.version('xprof'))"],
        capture_output=True, text=True, check=True).stdout.strip()
    if version != "2.24.2":
        print(f"warning: recording with xprof {version}, not 2.24.2", file=sys.stderr)

    out: pathlib.Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cases: list[dict] = []

    # Demo profiles.
    for path in sorted(glob.glob(str(REPO / DEMO_GLOB))):
        rel = os.path.relpath(path, REPO)
        run = pathlib.Path(path).relative_to(REPO / "src/profscope/demo/logdir").parts[0]
        with open(path, "rb") as f:
            refs = xplane.hlo_modules(f, path)
            modules = []
            for ref in refs:
                f.seek(0)
                modules.append((ref.display_name, xplane.hlo_proto_bytes(f, path,
                                                                          ref.display_name)))
        requests, digests = [], {}
        for name, data in modules:
            digests[name] = hashlib.sha256(data).hexdigest()
            spaces = [s["id"] for s in memory_viewer.memory_spaces(
                hlo_proto.parse(data, name))]
            if name.startswith("jit_train_step"):
                spaces.append(1)  # a memory space the module does not have
            requests += [[name, str(s)] for s in spaces]
        for a in run_xprof(args.xprof_python, pathlib.Path(path).read_bytes(), requests):
            entry = {"run": run, "module": a["module"], "space": int(a["space"]),
                     "input": {"xplane": rel}, "input_sha256": digests[a["module"]]}
            if "body" in a:
                fname = f"{run}__{safe(a['module'])}__{a['space']}.json.gz"
                write_gz(out / fname, a["body"].encode())
                entry["golden"] = fname
            else:
                entry["error"] = a["error"]
            cases.append(entry)
            print(run, a["module"], a["space"], entry.get("golden") or entry["error"])

    # Synthetic modules, one profile and one XProf process each.
    for name, (build, program_id, spaces) in SYNTHETIC.items():
        data = build().SerializeToString(deterministic=True)
        hlo_file = f"{SYNTHETIC_RUN}__{name}.hlo.pb.gz"
        write_gz(out / hlo_file, data)
        module = f"{name}({program_id})"
        answers = run_xprof(args.xprof_python, xspace_with([(name, program_id, data)]),
                            [[module, s] for s in spaces])
        for a in answers:
            entry = {"run": SYNTHETIC_RUN, "module": module, "space": int(a["space"]),
                     "input": {"hlo": hlo_file},
                     "input_sha256": hashlib.sha256(data).hexdigest()}
            if "body" in a:
                fname = f"{SYNTHETIC_RUN}__{safe(module)}__{a['space']}.json.gz"
                write_gz(out / fname, a["body"].encode())
                entry["golden"] = fname
            else:
                entry["error"] = a["error"]
            cases.append(entry)
            print(SYNTHETIC_RUN, module, a["space"], entry.get("golden") or entry["error"])

    index = {
        "_meta": {
            "xprof_version": version,
            "call": "xprof.convert.raw_to_tool_data.xspace_to_tool_data([xplane], "
                    "'memory_viewer', {'module_name': M, 'memory_space': S}) after "
                    "xspace_to_tool_names([xplane]), on a copy of the profile",
            "recorded_by": "scripts/record_xprof_memory_viewer_golden.py",
        },
        "cases": cases,
    }
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"{len(cases)} cases, {total:,} bytes in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
