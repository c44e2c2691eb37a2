#!/usr/bin/env python3
"""Memory viewer on big modules: conversion time, page size, peak memory.

Two kinds of input:

* ``--jax-layers N``: a real program. A transformer training step with N layers
  *unrolled* (a Python loop, not ``lax.scan``: a scanned body is one while loop, and its
  heap-simulator trace does not grow with depth), compiled by JAX on the CPU in a
  subprocess with ``XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_proto``; the
  ``*after_optimizations.hlo.pb`` is the input. 200 layers give ~20k logical buffers and
  ~18k heap events; XLA's compile time grows faster than linearly (about 70 s for 200
  layers on 2 cores), so 100k buffers are out of reach this way.
* ``--synthetic-buffers B --synthetic-events E``: an HloProto built here with B logical
  buffers (one instruction each, array and tuple shapes, source locations), a few hundred
  parameter/output allocations and one temporary allocation, and a heap-simulator trace
  of E events (ALLOC / FREE / SHARE_WITH, buffers reused when E > 2B), for the sizes real
  programs cannot reach on this machine.

Each input is converted in a fresh worker process (``--worker FILE``) that reports the
times of parsing, :func:`convert` and :func:`page_view`, the JSON sizes of the full
result and of the page view, and its peak resident memory (``VmHWM`` in
``/proc/self/status``; the baseline after imports is printed too).

Usage::

    .venv/bin/python benchmarks/bench_memory_viewer.py                  # both, small
    .venv/bin/python benchmarks/bench_memory_viewer.py --jax-layers 200 \
        --synthetic-buffers 100000 --synthetic-events 1000000           # docs/performance.md
    .venv/bin/python benchmarks/bench_memory_viewer.py --jax-layers 50 --synthetic-buffers 0
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time


JAX_PROGRAM = r"""
import json, os, sys, time
out, layers = sys.argv[1], int(sys.argv[2])
os.environ["XLA_FLAGS"] = (f"--xla_dump_to={out} --xla_dump_hlo_as_proto "
                           "--xla_dump_hlo_module_re=jit_train_step")
import jax, jax.numpy as jnp


D, F, T, B, H = 64, 128, 32, 4, 4

def layer(p, x):
    h = x - x.mean(-1, keepdims=True)
    h = h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-5)
    q, k, v = h @ p["q"], h @ p["k"], h @ p["v"]
    q, k, v = (a.reshape(B, T, H, D // H) for a in (q, k, v))
    a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 4.0, axis=-1)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, D) @ p["o"]
    return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]

def loss(params, x):
    for p in params:          # unrolled on purpose
        x = layer(p, x)
    return (x ** 2).mean()

def train_step(params, x):
    l, g = jax.value_and_grad(loss)(params, x)
    return jax.tree.map(lambda a, b: a - 1e-3 * b, params, g), l

mk = lambda *s: jnp.full(s, 0.01, jnp.float32)
params = [dict(q=mk(D, D), k=mk(D, D), v=mk(D, D), o=mk(D, D), w1=mk(D, F), w2=mk(F, D))
          for _ in range(layers)]
t = time.time()
jax.jit(train_step, donate_argnums=0).lower(params, jnp.ones((B, T, D))).compile()
json.dump({"compile_s": time.time() - t}, open(os.path.join(out, "compile.json"), "w"))
"""


def build_jax(layers: int, workdir: pathlib.Path, python: str) -> tuple[pathlib.Path, float]:
    out = workdir / f"jax_{layers}"
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    subprocess.run([python, "-c", JAX_PROGRAM, str(out), str(layers)], check=True, env=env)
    [pb] = sorted(out.glob("*jit_train_step*after_optimizations.hlo.pb"))
    return pb, json.loads((out / "compile.json").read_text())["compile_s"]


def build_synthetic(buffers: int, events: int, seed: int = 1) -> bytes:
    """A big, plausible HloProto (see the module docstring)."""
    from profscope.model.protos import hlo_pb2

    rnd = random.Random(seed)
    h = hlo_pb2.HloProto()
    m = h.hlo_module
    m.name, m.entry_computation_name, m.id = "synthetic_big", "main.1", 1
    comp = m.computations.add(name="main.1", id=1)
    sfi = m.stack_frame_index
    sfi.file_names.extend([f"/src/model_{i}.py" for i in range(20)])
    sfi.function_names.extend([f"fn_{i}" for i in range(50)])
    for i in range(500):
        sfi.file_locations.add(file_name_id=1 + i % 20, function_name_id=1 + i % 50,
                               line=10 + i, column=4)
        sfi.stack_frames.add(file_location_id=i + 1, parent_frame_id=i if i % 5 else 0)
    ba = h.buffer_assignment
    F32 = hlo_pb2.PrimitiveType.Value("F32")
    TUPLE = hlo_pb2.PrimitiveType.Value("TUPLE")
    dims_choices = [(64,), (256,), (64, 64), (128, 256), (512, 512), (8, 128, 128), (3,)]
    sizes = []
    n_params = min(300, max(1, buffers // 20))
    temp_assigned = []
    offset = 0
    for i in range(buffers):
        ins = comp.instructions.add(id=i + 1, name=f"op.{i}",
                                    opcode="parameter" if i < n_params else "fusion")
        if i % 97 == 5:
            ins.shape.element_type = TUPLE
            for d in ((64,), (32, 32)):
                sub = ins.shape.tuple_shapes.add(element_type=F32, dimensions=d)
                sub.layout.minor_to_major.extend(range(len(d) - 1, -1, -1))
            size = 16
        else:
            dims = rnd.choice(dims_choices)
            ins.shape.element_type = F32
            ins.shape.dimensions.extend(dims)
            ins.shape.layout.minor_to_major.extend(range(len(dims) - 1, -1, -1))
            size = 4
            for d in dims:
                size *= d
        ins.metadata.op_name = f"jit(step)/layer_{i // 40}/op_{i % 40}"
        ins.metadata.stack_frame_id = 1 + i % 500
        lb = ba.logical_buffers.add(id=i, size=size)
        lb.defined_at.instruction_id = i + 1
        sizes.append(size)
        if i < n_params:
            a = ba.buffer_allocations.add(index=i, size=size, is_entry_computation_parameter=True,
                                          parameter_number=i, maybe_live_out=i % 3 == 0)
            a.assigned.add(logical_buffer_id=i, offset=0, size=size)
        else:
            temp_assigned.append((i, offset % (256 << 20), size))
            offset += size
    temp = ba.buffer_allocations.add(index=n_params, size=256 << 20)
    for lb_id, off, size in temp_assigned:
        temp.assigned.add(logical_buffer_id=lb_id, offset=off, size=size)
    trace = ba.heap_simulator_traces.add(whole_module_simulation=True,
                                         buffer_allocation_index=n_params)
    ALLOC, FREE, SHARE = 0, 1, 2
    temps = list(range(n_params, buffers))
    if not temps:
        return h.SerializeToString()
    live: list[int] = []
    sharers: set[int] = set()  # a sharer keeps its canonical buffer: never ALLOC it again
    freed: list[int] = []
    n = 0
    cycle = 0
    add = trace.events.add
    while n < events:
        for b in temps:
            if n >= events:
                break
            if b in sharers:
                continue
            if cycle == 0 and freed and rnd.random() < 0.1:
                c = freed.pop()
                add(kind=SHARE, buffer_id=b, share_with_canonical_id=c, instruction_name=f"op.{b}")
                sharers.add(b)
            else:
                add(kind=ALLOC, buffer_id=b, instruction_name=f"op.{b}")
            live.append(b)
            n += 1
            while live and (len(live) > 64 or rnd.random() < 0.45) and n < events:
                victim = live.pop(rnd.randrange(len(live)))
                add(kind=FREE, buffer_id=victim, instruction_name=f"op.{b}")
                n += 1
                if victim not in sharers:
                    freed.append(victim)
                    if len(freed) > 32:
                        freed.pop(0)
        for v in live:
            if n >= events:
                break
            add(kind=FREE, buffer_id=v, instruction_name="end")
            n += 1
        live.clear()
        freed.clear()
        cycle += 1
    return h.SerializeToString()


def vm_hwm_kib() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def worker(path: str) -> None:
    from profscope.formats import hlo_proto
    from profscope.tools import memory_viewer as mv

    try:
        import orjson

        def dumps(o) -> bytes:
            return orjson.dumps(o)
    except ImportError:  # pragma: no cover
        def dumps(o) -> bytes:
            return json.dumps(o).encode()

    base = vm_hwm_kib()
    data = pathlib.Path(path).read_bytes()
    t0 = time.perf_counter()
    hlo = hlo_proto.parse(data, "bench.hlo.pb")
    t1 = time.perf_counter()
    result = mv.from_hlo(hlo)
    t2 = time.perf_counter()
    page = mv.page_view(result)
    t3 = time.perf_counter()
    full_json = dumps(result)
    page_json = dumps(page)
    t4 = time.perf_counter()
    ba = hlo.buffer_assignment
    print(json.dumps({
        "input_bytes": len(data),
        "logical_buffers": len(ba.logical_buffers),
        "heap_events": result["profscope"]["heapEvents"],
        "instructions": sum(len(c.instructions) for c in hlo.hlo_module.computations),
        "parse_s": t1 - t0,
        "convert_s": t2 - t1,
        "page_view_s": t3 - t2,
        "json_encode_s": t4 - t3,
        "full_json_bytes": len(full_json),
        "page_json_bytes": len(page_json),
        "page_json_gzip_bytes": len(gzip.compress(page_json, 6)),
        "page_points": len(page.get("heapSizes", [])),
        "page_blocks": len(page.get("bufferBlocks", [])),
        "max_heap_objects": len(result.get("maxHeap", [])),
        "peak_mib": result.get("peakHeapMib", 0.0),
        "vm_hwm_baseline_mib": base / 1024,
        "vm_hwm_mib": vm_hwm_kib() / 1024,
    }))


def run_worker(path: pathlib.Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", str(path)], check=True,
                          capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(label: str, r: dict, extra: str = "") -> None:
    print(f"\n== {label} {extra}")
    print(f"  input {r['input_bytes'] / 1e6:.1f} MB, {r['instructions']:,} instructions, "
          f"{r['logical_buffers']:,} logical buffers, {r['heap_events']:,} heap events")
    print(f"  parse {r['parse_s']:.2f} s, convert {r['convert_s']:.2f} s, "
          f"page_view {r['page_view_s']:.2f} s, JSON encode (both) {r['json_encode_s']:.2f} s")
    print(f"  full result {r['full_json_bytes'] / 1e6:.1f} MB JSON; page view "
          f"{r['page_json_bytes'] / 1e6:.1f} MB JSON, {r['page_json_gzip_bytes'] / 1e6:.1f} MB "
          f"gzipped ({r['page_points']} points, "
          f"{r['page_blocks']:,} blocks, {r['max_heap_objects']:,} buffers at peak)")
    print(f"  peak RSS (VmHWM) {r['vm_hwm_mib']:.0f} MiB "
          f"(after imports {r['vm_hwm_baseline_mib']:.0f} MiB)")


SERVED = r"""
import json, resource, sys, time
from profscope.app.queries import MemoryViewerQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.cache.worker import WorkerPool
from profscope.storage import LogDir
logdir, cache, workers = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
ws = Workspace(LogDir(logdir), DiskCache(cache, workers=WorkerPool(enabled=workers)))
run = ws.runs()[0]
tool = ws.tool_named("memory_viewer")
first, module = ws.modules(run)

def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

out = {}
# the first module warms the server (its imports); the second is the one timed
ws.tool_data(run, tool, MemoryViewerQuery(module_name=first, view="page"))
for name, call in (("module_peaks", lambda: ws.module_peaks(run)),
                   ("page", lambda: ws.tool_data(run, tool, MemoryViewerQuery(module_name=module, view="page"))),
                   ("full", lambda: ws.tool_data(run, tool, MemoryViewerQuery(module_name=module)))):
    t, c = time.perf_counter(), cpu()
    call()
    out[name] = [time.perf_counter() - t, cpu() - c]
out["child_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
out["own_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def served(data: bytes, workdir: pathlib.Path, rounds: int) -> None:
    """What the page asks of a server (``/api/module_peaks``, then ``view=page``), then
    XProf's full payload of the same module, on a server that has converted another
    module before (its imports made) and a fresh cache folder each round,
    in forked workers and in-process (``PROFSCOPE_WORKERS=0``), alternated; wall and CPU
    seconds of the process and its workers."""
    logdir = workdir / "served"
    (logdir / "dump").mkdir(parents=True, exist_ok=True)
    for i in (1, 2):  # two modules: the first warms the server, the second is timed
        (logdir / "dump" / f"module_000{i}.synthetic.cpu_after_optimizations.hlo.pb").write_bytes(data)
    rows: dict[str, list[dict]] = {"workers": [], "in-process": []}
    for i in range(rounds):
        for mode in (("workers", "in-process") if i % 2 == 0 else ("in-process", "workers")):
            with tempfile.TemporaryDirectory(dir=workdir) as cache:
                proc = subprocess.run([sys.executable, "-c", SERVED, str(logdir), cache, "1" if mode == "workers" else "0"],
                                      check=True, capture_output=True, text=True)
            rows[mode].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"\n== served, {len(data) / 1e6:.2f} MB module, median of {rounds} rounds, a warm server, its second module (wall s / CPU s)")
    for mode, got in rows.items():
        med = {k: sorted(r[k] for r in got)[len(got) // 2] for k in got[0] if not k.endswith("_rss_mib")}
        cells = ", ".join(f"{k} {sorted(r[k][0] for r in got)[len(got) // 2]:.3f} / "
                          f"{sorted(r[k][1] for r in got)[len(got) // 2]:.3f}" for k in med)
        print(f"  {mode:>10}: {cells}; peak RSS: workers {max(r['child_peak_rss_mib'] for r in got):.0f} MiB, "
              f"the process {max(r['own_peak_rss_mib'] for r in got):.0f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jax-layers", type=int, default=4,
                    help="unrolled transformer layers (0: skip the real program)")
    ap.add_argument("--jax-python", default=sys.executable)
    ap.add_argument("--synthetic-buffers", type=int, default=5_000)
    ap.add_argument("--synthetic-events", type=int, default=50_000)
    ap.add_argument("--workdir", type=pathlib.Path, default=None)
    ap.add_argument("--served", type=int, default=0, metavar="ROUNDS",
                    help="also time the server's requests on the synthetic module (module_peaks, view=page, "
                         "the full payload), cold, in workers and in-process, ROUNDS rounds each")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_mv_") as tmp:
        workdir = args.workdir or pathlib.Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.jax_layers:
            t = time.perf_counter()
            pb, compile_s = build_jax(args.jax_layers, workdir, args.jax_python)
            built = time.perf_counter() - t
            report(f"JAX transformer, {args.jax_layers} unrolled layers", run_worker(pb),
                   f"(built in {built:.0f} s, XLA compile {compile_s:.0f} s)")
        if args.synthetic_buffers:
            t = time.perf_counter()
            data = build_synthetic(args.synthetic_buffers, args.synthetic_events)
            path = workdir / "synthetic.hlo.pb"
            path.write_bytes(data)
            built = time.perf_counter() - t
            report(f"synthetic, {args.synthetic_buffers:,} buffers / "
                   f"{args.synthetic_events:,} events", run_worker(path),
                   f"(built in {built:.0f} s)")
            if args.served:
                served(data, workdir, args.served)
    return 0


if __name__ == "__main__":
    sys.exit(main())
