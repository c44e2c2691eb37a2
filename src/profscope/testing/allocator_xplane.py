"""XSpace profiles with runtime allocator events, built to order (real wire format).

Every function returns the serialized bytes of a ``tensorflow.profiler.XSpace`` (built with
``profscope.formats.protos.xplane_pb2``, wire-compatible with TF/JAX/XProf) whose
``/host:CPU`` plane carries ``MemoryAllocation`` / ``MemoryDeallocation`` instant events
with exactly the stats the BFC allocator writes, in its order and with its value types
(see ``../shared/fixtures/tf_bfc_cpu/README.md``, "Schema"): ``allocator_name`` (ref),
``bytes_reserved``, ``bytes_allocated``, ``bytes_available`` (int64), ``fragmentation``
(double, 6 significant digits as TraceMe prints it), ``peak_bytes_in_use``,
``requested_bytes``, ``allocation_bytes``, ``addr`` (int64), ``tf_op`` (ref, on
allocations made inside an op), ``id`` (int64, the allocator's step id), ``region_type``
(ref), ``data_type`` (int64, TF ``DataType``), ``shape`` (ref). String stats are
``ref_value``s naming a stat metadata, as the TraceMe parser stores them.

:class:`Bfc` is a small model of a BFC allocator (bytes in use, peak, limit, addresses,
fragmentation) that writes those events; :class:`Space` / :class:`Plane` / :class:`Line`
assemble planes, lines and events. The scenario functions below (``SCENARIOS``) are what
``scripts/record_xprof_memory_profile_golden.py`` records XProf 2.24.2's answers for, so
their semantics are pinned by the real tool. Everything is deterministic (seeded), so the
same call always gives the same bytes.

:func:`bulk_xspace` writes millions of events fast (vectorized encoding) for the
benchmark.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from profscope.formats.protos import xplane_pb2

__all__ = [
    "HOSTS",
    "SCENARIOS",
    "Bfc",
    "Line",
    "Plane",
    "Space",
    "build",
    "bulk_xspace",
    "gpu_layout",
    "loop_ops",
    "merged_rows",
    "multi_allocator",
    "no_allocator_events",
    "no_host_plane",
    "out_of_order",
    "pre_grouped",
    "sampled_timeline",
    "steady_leak",
    "tf_training",
    "tf_while_loop",
    "threadpool_regions",
    "tpu_counters",
    "tpu_layout",
    "value_types",
]

MS = 1_000_000_000  # picoseconds per millisecond
US = 1_000_000


class Space:
    def __init__(self, hostname: str = "host0"):
        self.xspace = xplane_pb2.XSpace()
        if hostname is not None:
            self.xspace.hostnames.append(hostname)

    def plane(self, name: str, plane_id: int = 0) -> Plane:
        return Plane(self.xspace.planes.add(id=plane_id, name=name))

    def to_bytes(self) -> bytes:
        return self.xspace.SerializeToString(deterministic=True)


class Plane:
    def __init__(self, plane: xplane_pb2.XPlane):
        self.p = plane
        self._events: dict[str, int] = {}
        self._stats: dict[str, int] = {}

    def event_id(self, name: str) -> int:
        if name not in self._events:
            i = len(self._events) + len(self._stats) + 1  # ids unique across both maps
            self.p.event_metadata[i].id = i
            self.p.event_metadata[i].name = name
            self._events[name] = i
        return self._events[name]

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            i = 1000 + len(self._stats)
            self.p.stat_metadata[i].id = i
            self.p.stat_metadata[i].name = name
            self._stats[name] = i
        return self._stats[name]

    def line(self, name: str, line_id: int, timestamp_ns: int = 1000) -> Line:
        line = self.p.lines.add(id=line_id, display_id=0, name=name, timestamp_ns=timestamp_ns)
        return Line(self, line)

    def set_stat(self, stat: xplane_pb2.XStat, name: str, value) -> None:
        stat.metadata_id = self.stat_id(name)
        if isinstance(value, Ref):
            stat.ref_value = self.stat_id(value.text)
        elif isinstance(value, U64):
            stat.uint64_value = value.v
        elif isinstance(value, Str):
            stat.str_value = value.text
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        else:
            stat.int64_value = int(value)

    def plane_stat(self, name: str, value) -> None:
        self.set_stat(self.p.stats.add(), name, value)


@dataclass(frozen=True)
class Ref:
    """A string stat stored as ``ref_value`` (the usual way)."""
    text: str


@dataclass(frozen=True)
class Str:
    """A string stat stored inline as ``str_value``."""
    text: str


@dataclass(frozen=True)
class U64:
    """An integer stat stored as ``uint64_value`` (XProf's IntValue reads it as 0)."""
    v: int


class Line:
    def __init__(self, plane: Plane, line: xplane_pb2.XLine):
        self.plane = plane
        self.line = line

    def event(self, name: str, offset_ps: int, duration_ps: int = 0, stats=()) -> xplane_pb2.XEvent:
        e = self.line.events.add(metadata_id=self.plane.event_id(name), offset_ps=offset_ps,
                                 duration_ps=duration_ps)
        for k, v in stats:
            self.plane.set_stat(e.stats.add(), k, v)
        return e


def _frag(x: float) -> float:
    """A double printed with 6 significant digits and parsed back, as TraceMe stores it."""
    return float(f"{x:.6g}")


class Bfc:
    """A BFC allocator model that writes TF's allocator events.

    ``in_use`` starts at ``preallocated`` bytes (live before the window: their addresses
    are in :attr:`pre_window`, so frees of them have no allocation in the profile).
    """

    def __init__(self, plane: Plane, name: str, limit: int, *, preallocated: int = 0, peak: int = 0,
                 base_addr: int = 0x7F00_0000_0000, seed: int = 0, name_as: str = "ref"):
        self.plane = plane
        self.name = name
        self.limit = limit
        self.in_use = preallocated
        self.peak = max(peak, preallocated)
        self.reserved = 0
        self.rng = random.Random(seed)
        self.next_addr = base_addr
        self.live: dict[int, int] = {}
        self.pre_window: list[int] = []
        self.name_as = name_as
        if preallocated:
            a = self._addr(preallocated)
            self.live[a] = preallocated
            self.pre_window.append(a)

    def _addr(self, size: int) -> int:
        a = self.next_addr
        self.next_addr += (size + 255) // 256 * 256 + 256
        return a

    def prealloc(self, size: int) -> int:
        """An allocation made before the profile started (no event)."""
        a = self._addr(size)
        self.live[a] = size
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        self.pre_window.append(a)
        return a

    def _stats(self, requested, alloc, addr, op, step, region, dtype, shape, dealloc: bool):
        frag = _frag(self.rng.random() * 0.3)
        name_stat = Ref(self.name) if self.name_as == "ref" else Str(self.name)
        stats = [("allocator_name", name_stat), ("bytes_reserved", self.reserved),
                 ("bytes_allocated", self.in_use),
                 ("bytes_available", self.limit - self.in_use - self.reserved),
                 ("fragmentation", frag), ("peak_bytes_in_use", self.peak),
                 ("requested_bytes", requested), ("allocation_bytes", alloc), ("addr", addr)]
        if op is not None:
            stats.append(("tf_op", Ref(op)))
        stats.append(("id", step))
        if not dealloc and region is not None:
            stats.append(("region_type", Ref(region)))
        stats.append(("data_type", dtype))
        if not dealloc and shape is not None:
            stats.append(("shape", Ref(shape)))
        return stats

    def alloc(self, line: Line, t_ps: int, size: int, *, requested: int | None = None, op: str | None = None,
              shape: str | None = None, dtype: int = 1, region: str | None = "output", step: int = 0,
              addr: int | None = None) -> int:
        alloc = (size + 255) // 256 * 256
        a = self._addr(alloc) if addr is None else addr
        self.live[a] = alloc
        self.in_use += alloc
        self.peak = max(self.peak, self.in_use)
        line.event("MemoryAllocation", t_ps, 0, self._stats(
            size if requested is None else requested, alloc, a, op, step, region, dtype, shape, False))
        return a

    def free(self, line: Line, t_ps: int, addr: int, *, op: str | None = None, step: int = 0,
             dtype: int = 0) -> None:
        size = self.live.pop(addr)
        self.in_use -= size
        line.event("MemoryDeallocation", t_ps, 0, self._stats(size, size, addr, op, step, None, dtype,
                                                             None, True))


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


def tf_training(*, steps: int = 5, leak_bytes: int = 0, hostname: str = "host0", seed: int = 1,
                threads: int = 2, regions: bool = True) -> bytes:
    """A TF2 training loop as TF's profiler records it.

    Python thread: one ``train`` root per step (``_r``=1, ``step_num``), inside it a
    ``FunctionRun`` (producer ``_pt``=2 ``_p``=<run id>, also ``_r``=1) and host-side
    allocations of the inputs. ``threads`` compute threads: ``ExecutorState::Process``
    (consumer ``_ct``=2 ``_c``=<run id>, ``id``, ``iter_num``=0) holding op events that
    allocate outputs and temporaries and free the previous ones; ThreadpoolListener
    ``Record`` / ``StartRegion`` / ``StopRegion`` (context 15) when ``regions``. Weights
    are allocated before the window; the first step frees two buffers allocated before it.
    With ``leak_bytes`` every step also allocates that many bytes (op ``leaky/cache``,
    never freed): a steady leak.
    """
    rng = random.Random(seed)
    sp = Space(hostname)
    host = sp.plane("/host:CPU")
    py = host.line("python", 1)
    compute = [host.line(f"tf_Compute/{i}", 100 + i) for i in range(threads)]
    bfc = Bfc(host, "bfc_cpu_allocator_for_gpu", 1 << 30, seed=seed, preallocated=0)
    weights = [bfc.prealloc(s) for s in (1 << 20, 256 << 10, 4096)]
    old = [bfc.prealloc(8192), bfc.prealloc(512)]
    t = 1 * MS
    step_len = 10 * MS
    for s in range(steps):
        start = t
        run_id = 1000 + s
        py.event("train", start, step_len - 1 * MS, [("_r", 1), ("step_num", s)])
        py.event("FunctionRun", start + 1 * US, step_len - 2 * MS,
                 [("id", run_id), ("_r", 1), ("_pt", 2), ("_p", run_id)])
        inp = bfc.alloc(py, start + 2 * US, 128 * 784 * 4, op="_EagerConst", shape="[128,784]",
                        step=0, region="output")
        if regions:
            py.event("ThreadpoolListener::Record", start + 3 * US, 0, [("_pt", 15), ("_p", 5000 + s)])
        tt = start + 50 * US
        leftovers: list[tuple[Line, int]] = []
        for th, line in enumerate(compute):
            live: list[int] = []  # each thread frees its own buffers
            proc_start = tt + th * 7 * US
            line.event("ExecutorState::Process", proc_start, 7 * MS,
                       [("_ct", 2), ("_c", run_id), ("id", run_id), ("iter_num", 0)])
            if regions and th == 0:
                line.event("ThreadpoolListener::StartRegion", proc_start + 1 * US, 0,
                           [("_ct", 15), ("_c", 5000 + s)])
            ot = proc_start + 10 * US
            for k in range(6):
                op = ["dense/MatMul", "dense/Relu", "loss/Sum", "grad/MatMul", "adam/Mul", "adam/Sqrt"][k]
                line.event(f"{op}:{op.split('/')[-1]}", ot, 300 * US)
                size = rng.choice([4096, 65536, 131072, 512 * 256 * 4])
                a = bfc.alloc(line, ot + 5 * US, size, op=op, shape=f"[{size // 4}]", step=run_id,
                              region="output" if k % 3 else "temp")
                live.append(a)
                if k >= 2 and live:
                    victim = live.pop(0)
                    bfc.free(line, ot + 250 * US, victim, step=run_id)
                ot += 400 * US
            if regions and th == 0:
                line.event("ThreadpoolListener::StopRegion", ot, 0)
            if leak_bytes and th == 0:
                line.event("leaky/cache:Identity", ot + 10 * US, 100 * US)
                bfc.alloc(line, ot + 20 * US, leak_bytes, op="leaky/cache", shape=f"[{leak_bytes // 4}]",
                          step=run_id, region="persist")
            leftovers += [(line, a) for a in live]
        # the executor frees what is left after its Process event (these frees nest in
        # no step: XProf gives them the previous event's step + 1)
        for line, a in leftovers:
            bfc.free(line, start + 8 * MS, a, step=run_id)
        if s == 0:
            for a in old:
                bfc.free(py, start + 8 * MS + 10 * US, a, op="AssignVariableOp")
        bfc.free(py, start + 9 * MS - 1 * US, inp)
        t += step_len
    del weights
    return sp.to_bytes()


def steady_leak(*, steps: int = 8, leak_bytes: int = 1 << 20) -> bytes:
    """:func:`tf_training` with a steady leak of ``leak_bytes`` per step."""
    return tf_training(steps=steps, leak_bytes=leak_bytes, seed=7)


def multi_allocator(*, hostname: str = "host0", seed: int = 3) -> bytes:
    """Three allocators (two GPU BFCs and a pinned host one) on four threads, no steps."""
    rng = random.Random(seed)
    sp = Space(hostname)
    host = sp.plane("/host:CPU")
    lines = [host.line(f"pjrt_thread_{i}", 10 + i) for i in range(4)]
    gpus = [Bfc(host, f"GPU_{i}_bfc", 16 << 30, preallocated=(2 << 30) + i * 4096, seed=10 + i,
                base_addr=0x7F10_0000_0000 + (i << 36)) for i in range(2)]
    pinned = Bfc(host, "cuda_host_bfc", 64 << 30, seed=20, base_addr=0x7F40_0000_0000)
    live: dict[int, list] = {0: [], 1: [], 2: []}
    allocs = [gpus[0], gpus[1], pinned]
    t = 5 * MS
    for k in range(240):
        which = rng.randrange(3)
        bfc = allocs[which]
        line = lines[rng.randrange(4)]
        t += rng.randrange(1, 50) * US
        if live[which] and rng.random() < 0.45:
            a = live[which].pop(rng.randrange(len(live[which])))
            bfc.free(line, t, a)
        else:
            size = rng.choice([256, 1024, 1 << 20, 3 << 20, 48 << 20])
            op = rng.choice(["jit(train_step)/dot_general", "jit(train_step)/add", "jit(eval)/reduce",
                             None])
            live[which].append(bfc.alloc(line, t, size, op=op, shape=rng.choice(["[]", "[1024,1024]", None]),
                                         dtype=rng.choice([1, 14, 19, 3]), region=rng.choice(["output", "temp"])))
    return sp.to_bytes()


def out_of_order(*, hostname: str = "host0") -> bytes:
    """Events out of time order on their lines, events at the same picosecond (on one
    line and across lines), the peak reached twice (reading order decides which counts),
    frees of memory allocated before the window, and a free whose address is reused."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU")
    a = host.line("worker_a", 1)
    b = host.line("worker_b", 2)
    bfc = Bfc(host, "GPU_0_bfc", 8 << 30, seed=5)
    pre = [bfc.prealloc(1 << 20), bfc.prealloc(2 << 20), bfc.prealloc(4096)]
    # Build events in time, then write them to lines in a scrambled order.
    events = []

    class Rec:
        def __init__(self, line):
            self.line = line

        def event(self, name, t, d, stats):
            events.append((self.line, name, t, d, stats))

    ra, rb = Rec(a), Rec(b)
    t = 1 * MS
    x1 = bfc.alloc(ra, t, 3 << 20, op="fwd/conv", shape="[64,3,224,224]")
    x2 = bfc.alloc(rb, t, 1 << 20, op="fwd/bn", shape="[64,64]")  # same ps, other line
    bfc.free(ra, t + 5 * US, pre[0])  # allocated before the window
    x3 = bfc.alloc(ra, t + 5 * US, 2 << 20, op="fwd/relu", shape="[64,64,112,112]")  # tie on one line
    bfc.free(rb, t + 9 * US, x2)
    x4 = bfc.alloc(rb, t + 9 * US, 1 << 20, op="fwd/pool", shape="[64,64]", addr=x2)  # address reused
    bfc.free(ra, t + 20 * US, x1)
    x5 = bfc.alloc(ra, t + 21 * US, 3 << 20, op="bwd/conv", shape="[64,3,224,224]")  # peak again
    bfc.free(rb, t + 30 * US, pre[1])
    bfc.free(ra, t + 31 * US, x3)
    bfc.free(ra, t + 31 * US, x4)  # same ps
    x6 = bfc.alloc(rb, t + 40 * US, 512, op="bwd/bias", shape="[128]", dtype=14)
    bfc.free(rb, t + 50 * US, x5)
    bfc.free(ra, t + 60 * US, pre[2])
    del x6
    rng = random.Random(11)
    rng.shuffle(events)
    # line a keeps its shuffled order; line b is written newest first
    for line, name, t_, d, stats in sorted(events, key=lambda e: (e[0] is a, -e[2] if e[0] is b else 0)):
        line.event(name, t_, d, stats)
    return sp.to_bytes()


def gpu_layout(*, hostname: str = "gpu-host") -> bytes:
    """What JAX/TF on a GPU host writes: allocator events on ``/host:CPU`` threads (no
    step roots connected to them), a ``/device:GPU:0`` plane with kernels (and, to show
    XProf ignores them, allocator events too), a ``/host:CUPTI`` plane, and a
    ``StepTraceAnnotation``-style root on the python thread that nests some of the
    allocations."""
    rng = random.Random(21)
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python3", 1)
    pj = host.line("pjrt_gpu_0", 2)
    bfc = Bfc(host, "GPU_0_bfc", 30 << 30, preallocated=1 << 30, seed=22)
    t = 2 * MS
    for s in range(3):
        py.event("train_step", t, 3 * MS, [("_r", 1), ("step_num", s)])
        # allocations made on the python thread inside the step: grouped
        a = bfc.alloc(py, t + 10 * US, 4 << 20, op="jit(train_step)/transfer", shape="[1024,1024]")
        # allocations on a PJRT thread: no connection to the step, no group
        bs = [bfc.alloc(pj, t + (20 + k) * US, rng.choice([1 << 20, 2 << 20]), op="jit(train_step)/dot",
                        shape="[512,512]", region="temp") for k in range(5)]
        for k, b in enumerate(bs):
            bfc.free(pj, t + (2000 + k) * US, b)
        bfc.free(py, t + 2900 * US, a)
        t += 4 * MS
    gpu = sp.plane("/device:GPU:0", 1)
    gpu.plane_stat("device_vendor", Ref("Nvidia"))
    stream = gpu.line("stream:7", 7)
    other = Bfc(gpu, "GPU_0_bfc_device_side", 1 << 30, seed=23)
    for k in range(5):
        stream.event("dot_general", 2 * MS + k * MS, 500 * US, [("correlation_id", 100 + k)])
        other.alloc(stream, 2 * MS + k * MS + 1, 1 << 20, op="ignored")
    cupti = sp.plane("/host:CUPTI", 2)
    cl = cupti.line("cupti_thread", 3)
    for k in range(5):
        cl.event("cuLaunchKernel", 2 * MS + k * MS - 10 * US, 5 * US, [("correlation_id", 100 + k)])
    return sp.to_bytes()


def tpu_layout(*, hostname: str = "tpu-host") -> bytes:
    """A TPU host: ``/device:TPU:0`` with ``XLA Modules`` and ``Steps`` lines (XProf's
    ``hloModules``) next to a host plane with allocator events of a host BFC."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python3", 1)
    bfc = Bfc(host, "host_bfc", 4 << 30, seed=31)
    t = 1 * MS
    live = []
    for s in range(3):
        py.event("train_step", t, 2 * MS, [("_r", 1), ("step_num", s)])
        live.append(bfc.alloc(py, t + 5 * US, (s + 1) << 20, op="infeed", shape="[256,256]"))
        if len(live) > 1:
            bfc.free(py, t + 1500 * US, live.pop(0))
        t += 2 * MS + 100 * US
    for core in range(2):
        tpu = sp.plane(f"/device:TPU:{core}", 10 + core)
        steps = tpu.line("Steps", 1, timestamp_ns=1000)
        mods = tpu.line("XLA Modules", 2, timestamp_ns=1000)
        ops = tpu.line("XLA Ops", 3, timestamp_ns=1000)
        tt = 1 * MS + 50 * US
        for s in range(3):
            steps.event(f"{s}", tt, 1800 * US)
            mods.event(f"jit_train_step({7 + core})", tt + 10 * US, 1700 * US, [("run_id", 40 + s)])
            ops.event("fusion.1", tt + 20 * US, 100 * US)
            tt += 2 * MS + 100 * US
    sp.plane("/device:TPU:0 SparseCore 0", 20).line("XLA Modules", 1).event("sc_module", 5 * MS, 1 * MS)
    return sp.to_bytes()


# The utilisation counters of tpu_counters: (name, samples on TPU:0, value stat type). The
# names are this builder's; what XProf reads of them is the line and the stats.
TPU_COUNTERS = (("MXU % util", 200, float), ("Vector ALU % util", 200, float), ("Vector load % util", 200, float),
                ("Vector store % util", 200, float), ("Scalar unit % util", 200, int),
                ("HBM read % util", 1, float), ("HBM write % util", 1, U64), ("ICI % util", 1, float),
                ("DMA % util", 1, float))


def tpu_counters(*, hostname: str = "tpu-host") -> bytes:
    """A TPU kernel profile with hardware utilisation counters, laid out as XProf reads
    them (``xprof/convert/xplane_to_trace_container.cc``): on each ``/device:TPU:N`` plane
    a line named ``_counters_`` (tsl ``kCounterEventsLineName``) whose events are counter
    samples, zero-length, the event's name the series and its stat the value, next to the
    usual ``XLA Modules`` / ``XLA Ops`` lines. TPU:0 carries nine ``% util`` series: five
    sampled every 10 µs through a module run (one with int64 values), four with a single
    sample each (one before the first slice of the profile, one after its last, one of 0
    %, one a uint64); TPU:1 two of the same names, so series are told apart per device."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python3", 1)
    py.event("train", 1 * MS, 3 * MS, [("_r", 1), ("step_num", 0)])
    for core in range(2):
        tpu = sp.plane(f"/device:TPU:{core}", 10 + core)
        mods = tpu.line("XLA Modules", 2, timestamp_ns=0)
        ops = tpu.line("XLA Ops", 3, timestamp_ns=0)
        counters = tpu.line("_counters_", 4, timestamp_ns=0)
        t = 1 * MS + 100 * US
        mods.event(f"jit_train({20 + core})", t, 2 * MS, [("run_id", 1)])
        for k in range(8):
            ops.event("fusion.1" if k % 2 else "convolution.3", t + 10 * US + k * 240 * US, 200 * US)
        series = TPU_COUNTERS if core == 0 else TPU_COUNTERS[:1] + TPU_COUNTERS[5:6]
        for i, (name, n, kind) in enumerate(series):
            if n == 1:  # the single samples: before the profile's first slice, after its last, inside
                at = {5: 100 * US, 6: 5 * MS, 7: 2 * MS + 7 * US}.get(i, 1 * MS + 555 * US)
                value = {5: 12.5, 6: 3, 8: 0.0}.get(i, 41.25)
                counters.event(name, at, 0, [("value", U64(value) if kind is U64 else value)])
                continue
            for k in range(n):
                # a smooth ramp per series, sampled every 10 µs from the module's start
                pct = (37 * i + 7 * k) % 101
                counters.event(name, t + k * 10 * US + i, 0, [("value", int(pct) if kind is int else pct + 0.5)])
    return sp.to_bytes()


def no_host_plane(*, hostname: str = "host0") -> bytes:
    """Only a device plane (its allocator events are not read by XProf)."""
    sp = Space(hostname)
    gpu = sp.plane("/device:GPU:0", 1)
    bfc = Bfc(gpu, "GPU_0_bfc", 1 << 30, seed=41)
    line = gpu.line("stream:1", 1)
    bfc.alloc(line, 1 * MS, 4096, op="x")
    return sp.to_bytes()


def no_allocator_events(*, hostname: str = "host0") -> bytes:
    """A host plane with ordinary events only."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    line = host.line("python", 1)
    line.event("train", 1 * MS, 5 * MS, [("_r", 1), ("step_num", 0)])
    line.event("work", 2 * MS, 1 * MS)
    return sp.to_bytes()


def value_types(*, hostname: str = "host0") -> bytes:
    """Stats in unusual value types and memory ids: uint64 integers (XProf reads 0),
    ``str_value`` strings, an allocator named by ``index_on_host`` / ``device_ordinal``
    instead of a name, one without any name (memory id ""), both name and ordinal (the
    last one wins), reference dtypes (``float_ref``), unknown dtypes, a ``ref_value``
    pointing nowhere, a negative address, a non-double fragmentation."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    line = host.line("t", 1)
    t = 1 * MS

    def ev(name, stats):
        nonlocal t
        t += 10 * US
        line.event(name, t, 0, stats)

    base = [("bytes_reserved", 0), ("bytes_available", 1 << 30), ("fragmentation", 0.25),
            ("peak_bytes_in_use", 1 << 22)]
    ev("MemoryAllocation", [("allocator_name", Ref("named"))] + base + [
        ("bytes_allocated", 4096), ("requested_bytes", 4000), ("allocation_bytes", 4096), ("addr", 0x1000),
        ("tf_op", Str("inline/op")), ("id", 3), ("region_type", Str("output")), ("data_type", 101),
        ("shape", Str("[1000]"))])
    ev("MemoryAllocation", [("allocator_name", Ref("named"))] + base + [
        ("bytes_allocated", U64(8192)), ("requested_bytes", U64(4096)), ("allocation_bytes", 4096),
        ("addr", U64(0x2000)), ("tf_op", Ref("u64/op")), ("id", 3), ("region_type", Ref("temp")),
        ("data_type", 77), ("shape", Ref("[1024]"))])
    ev("MemoryAllocation", [("allocator_name", Ref("named")), ("bytes_reserved", 1 << 20),
                            ("bytes_available", 1 << 30), ("fragmentation", 3),
                            ("peak_bytes_in_use", 1 << 23), ("bytes_allocated", 12288), ("requested_bytes", 4096),
                            ("allocation_bytes", 4096), ("addr", -4096), ("tf_op", Ref("neg/addr")), ("id", 3),
                            ("region_type", Ref("output")), ("data_type", 150), ("shape", Ref("[2,2]"))])
    ev("MemoryDeallocation", [("allocator_name", Ref("named"))] + base + [
        ("bytes_allocated", 8192), ("requested_bytes", 4096), ("allocation_bytes", 4096), ("addr", 0x1000),
        ("id", 3), ("data_type", 0)])
    ev("MemoryAllocation", [("index_on_host", 2)] + base + [
        ("bytes_allocated", 100), ("requested_bytes", 100), ("allocation_bytes", 256), ("addr", 0x3000),
        ("tf_op", Ref("by/index")), ("id", 0), ("data_type", 9), ("shape", Ref("[]"))])
    ev("MemoryAllocation", [("device_ordinal", 1)] + base + [
        ("bytes_allocated", 300), ("requested_bytes", 300), ("allocation_bytes", 512), ("addr", 0x4000),
        ("tf_op", Ref("by/ordinal")), ("id", 0), ("data_type", -1)])
    ev("MemoryAllocation", base + [
        ("bytes_allocated", 77), ("requested_bytes", 77), ("allocation_bytes", 256), ("addr", 0x5000),
        ("id", 0), ("data_type", 1)])
    ev("MemoryAllocation", [("allocator_name", Ref("named")), ("device_ordinal", 5)] + base + [
        ("bytes_allocated", 999), ("requested_bytes", 999), ("allocation_bytes", 1024), ("addr", 0x6000),
        ("id", 0), ("data_type", 1)])
    ev("MemoryAllocation", [("device_ordinal", 6), ("allocator_name", Ref("named"))] + base + [
        ("bytes_allocated", 16384), ("requested_bytes", 999), ("allocation_bytes", 1024), ("addr", 0x7000),
        ("id", 0), ("data_type", 1)])
    # a ref_value that names no stat metadata
    e = line.event("MemoryAllocation", t + 10 * US, 0, [("allocator_name", Ref("named"))] + base + [
        ("bytes_allocated", 20480), ("requested_bytes", 4096), ("allocation_bytes", 4096), ("addr", 0x8000),
        ("id", 0), ("data_type", 1)])
    bad = e.stats.add()
    host.set_stat(bad, "tf_op", Ref("x"))
    bad.ref_value = 999_999
    return sp.to_bytes()


def sampled_timeline(*, n: int = 2345, hostname: str = "host0") -> bytes:
    """More than 1000 events: XProf keeps 1000 with a max box filter. Sawtooth usage,
    one sharp peak inside a window, equal totals inside windows (the first one is kept)."""
    rng = random.Random(51)
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    line = host.line("worker", 1)
    bfc = Bfc(host, "GPU_0_bfc", 32 << 30, preallocated=1 << 30, seed=52)
    live = []
    t = 1 * MS
    for k in range(n):
        t += rng.randrange(1, 20) * US
        if k == n // 2 + 3:
            live.append(bfc.alloc(line, t, 6 << 30, op="spike", shape="[big]"))
            continue
        if live and (rng.random() < 0.5 or len(live) > 40):
            bfc.free(line, t, live.pop(rng.randrange(len(live))))
        else:
            live.append(bfc.alloc(line, t, rng.choice([1 << 20, 1 << 20, 2 << 20]), op=f"op{k % 7}",
                                  shape="[256,1024]"))
    return sp.to_bytes()


def threadpool_regions(*, hostname: str = "host0") -> bytes:
    """Allocations on an Eigen pool thread reached only through a ThreadpoolListener
    region (``Record`` producer under a root -> ``StartRegion``/``StopRegion`` consumer),
    with events on that line at the same picosecond (the re-sort of the line uses
    ``std::sort``), a ``StopRegion`` without a ``StartRegion`` after it, and a region
    consumer id stored as ``uint64``."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python", 1)
    pool = host.line("tf_numa_-1_Eigen/1", 2)
    bfc = Bfc(host, "bfc_cpu_allocator_for_gpu", 1 << 30, seed=61)
    t = 1 * MS
    for s in range(3):
        py.event("train", t, 4 * MS, [("_r", 1), ("step_num", s)])
        py.event("ThreadpoolListener::Record", t + 10 * US, 0, [("_pt", 15), ("_p", U64(900 + s))])
        pool.event("ThreadpoolListener::StartRegion", t + 100 * US, 0, [("_ct", 15), ("_c", 900 + s)])
        a = bfc.alloc(pool, t + 100 * US, 1 << 20, op="pool/op", shape="[1]", region="temp")  # same ps
        b = bfc.alloc(pool, t + 100 * US, 2 << 20, op="pool/op2", shape="[2]", region="temp")  # same ps
        bfc.free(pool, t + 500 * US, a)
        pool.event("ThreadpoolListener::StopRegion", t + 600 * US, 0)
        bfc.free(pool, t + 600 * US, b)  # same ps as the stop
        pool.event("ThreadpoolListener::StopRegion", t + 700 * US, 0)  # no new start
        c = bfc.alloc(pool, t + 650 * US, 4096, op="after/stop", shape="[3]")
        bfc.free(pool, t + 800 * US, c)
        t += 5 * MS
    return sp.to_bytes()


def pre_grouped(*, hostname: str = "host0", other_plane: str | None = None) -> bytes:
    """A profile that already carries ``group_id`` stats (XProf then does not group).

    ``other_plane``: add a plane of that name without ``group_id`` stats (XProf 2.24.2
    counts the profile as grouped only if every host and device plane has them)."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    line = host.line("worker", 1)
    bfc = Bfc(host, "GPU_0_bfc", 1 << 30, seed=71)
    t = 1 * MS
    for k in range(12):
        t += 100 * US
        a = bfc.alloc(line, t, (k % 4 + 1) << 20, op=f"op{k % 3}", shape="[1]")
        if k % 3 != 1:
            line.line.events[-1].stats.add().CopyFrom(_stat(host, "group_id", 7 + k // 4))
        if k % 2:
            bfc.free(line, t + 50 * US, a)
    # a root that XProf would otherwise have grouped with
    line.event("train", 0, 100 * MS, [("_r", 1), ("step_num", 0)])
    if other_plane is not None:
        sp.plane(other_plane, 5).line("l", 1).event("kernel", 2 * MS, 1 * MS)
    return sp.to_bytes()


def _stat(plane: Plane, name: str, value) -> xplane_pb2.XStat:
    s = xplane_pb2.XStat()
    plane.set_stat(s, name, value)
    return s


def loop_ops(*, hostname: str = "host0") -> bytes:
    """A TF loop op in the metadata: XProf skips grouping; steps come from the fix-up."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    line = host.line("worker", 1)
    line.event("train", 0, 50 * MS, [("_r", 1), ("step_num", 0)])
    line.event("WhileOp-EvalCond", 1 * MS, 1 * MS)
    bfc = Bfc(host, "GPU_0_bfc", 1 << 30, seed=81)
    a = bfc.alloc(line, 2 * MS, 1 << 20, op="body")
    bfc.alloc(line, 3 * MS, 2 << 20, op="body")
    bfc.free(line, 4 * MS, a)
    return sp.to_bytes()


def tf_while_loop(*, hostname: str = "host0") -> bytes:
    """``ExecutorState::Process`` events of a TF while loop (``id`` + ``iter_num`` > 0):
    XProf makes one group per iteration (and ignores the ``_r`` roots)."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python", 1)
    ex = host.line("tf_Compute/1", 2)
    bfc = Bfc(host, "GPU_0_bfc", 1 << 30, seed=91)
    py.event("train", 0, 100 * MS, [("_r", 1), ("step_num", 0)])
    t = 1 * MS
    for it in range(4):
        ex.event("ExecutorState::Process", t, 2 * MS, [("id", 555), ("iter_num", it)])
        a = bfc.alloc(ex, t + 10 * US, (it + 1) << 20, op="while/body/matmul", shape="[4]")
        if it % 2 == 0:
            bfc.free(ex, t + 1 * MS, a)
        t += 3 * MS
    bfc.alloc(ex, t + 1 * MS, 4096, op="after/loop")
    return sp.to_bytes()


def merged_rows(*, hostname: str = "host0") -> bytes:
    """Identical live allocations at the peak (merged into one row with a count), a
    stack reservation (the synthetic ``stack`` row), and memory that the peak step did not
    allocate (the ``unused preallocated device memory`` row)."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python", 1)
    bfc = Bfc(host, "GPU_0_bfc", 8 << 30, preallocated=64 << 20, seed=101)
    bfc.reserved = 2 << 20
    t = 1 * MS
    for s in range(2):
        py.event("train", t, 5 * MS, [("_r", 1), ("step_num", s)])
        same = [bfc.alloc(py, t + (10 + k) * US, 1 << 20, op="layer/attention", shape="[512,512]",
                          region="temp") for k in range(4)]
        other = bfc.alloc(py, t + 20 * US, 1 << 20, op="layer/attention", shape="[512,512]", region="output")
        for a in same:
            bfc.free(py, t + 3 * MS, a)
        bfc.free(py, t + 3 * MS + 1, other)
        t += 6 * MS
    return sp.to_bytes()


def line_timestamps(*, hostname: str = "host0") -> bytes:
    """Two host lines with different ``timestamp_ns``: XProf orders allocator events by
    their raw ``offset_ps`` (relative to their own line), not by absolute time; step
    roots are ordered by absolute time."""
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    early = host.line("starts_early", 1, timestamp_ns=1_000)
    late = host.line("starts_late", 2, timestamp_ns=3_000_000)  # 3 ms later
    bfc = Bfc(host, "GPU_0_bfc", 1 << 30, seed=111)
    # absolute order: early@1ms, late@3.5ms(offset 0.5ms), early@4ms
    late.event("train", 0, 2 * MS, [("_r", 1), ("step_num", 1)])
    early.event("train", 0, 2 * MS, [("_r", 1), ("step_num", 0)])
    a = bfc.alloc(early, 1 * MS, 1 << 20, op="early/a")
    b = bfc.alloc(late, 500 * US, 2 << 20, op="late/b")
    bfc.free(early, 4 * MS, a)
    bfc.free(late, 1500 * US, b)
    return sp.to_bytes()


SCENARIOS = {
    "tf_training": tf_training,
    "steady_leak": steady_leak,
    "multi_allocator": multi_allocator,
    "multi_allocator_host1": lambda: multi_allocator(hostname="host1", seed=4),
    "out_of_order": out_of_order,
    "gpu_layout": gpu_layout,
    "tpu_layout": tpu_layout,
    "no_host_plane": no_host_plane,
    "no_allocator_events": no_allocator_events,
    "value_types": value_types,
    "sampled_timeline": sampled_timeline,
    "threadpool_regions": threadpool_regions,
    "pre_grouped": pre_grouped,
    "pre_grouped_device_plane": lambda: pre_grouped(other_plane="/device:GPU:0"),
    "pre_grouped_metadata_plane": lambda: pre_grouped(other_plane="/host:metadata"),
    "pre_grouped_task_env_plane": lambda: pre_grouped(other_plane="Task Environment"),
    "loop_ops": loop_ops,
    "tf_while_loop": tf_while_loop,
    "merged_rows": merged_rows,
    "line_timestamps": line_timestamps,
    "bulk_small": lambda: bulk_xspace(1600, steps=4, threads=2, hostname="bulk-host"),
}

#: The host name of each scenario's profile (``<host>.xplane.pb``).
HOSTS = {
    "multi_allocator_host1": "host1",
    "gpu_layout": "gpu-host",
    "tpu_layout": "tpu-host",
    "bulk_small": "bulk-host",
}


def build(name: str) -> bytes:
    return SCENARIOS[name]()


# ---------------------------------------------------------------------------
# Bulk: millions of events, encoded with numpy
# ---------------------------------------------------------------------------


def _varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n x 10 uint8 matrix of varint bytes, lengths) for int64/uint64 values."""
    v = np.asarray(values).astype(np.int64).view(np.uint64).copy()
    out = np.zeros((len(v), 10), dtype=np.uint8)
    length = np.ones(len(v), dtype=np.int64)
    for k in range(10):
        byte = (v & np.uint64(0x7F)).astype(np.uint8)
        v >>= np.uint64(7)
        more = v != 0
        out[:, k] = byte | (more.astype(np.uint8) << 7)
        if not more.any():
            break
        length += more
    return out, length


def _starts(lens: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)


def _copy_rows(dst, dst_starts, src, src_starts, lens) -> None:
    total = int(lens.sum())
    if not total:
        return
    rows = np.repeat(np.arange(len(lens)), lens)
    within = np.arange(total) - np.repeat(_starts(lens), lens)
    dst[dst_starts[rows] + within] = src[src_starts[rows] + within]


class _Rows:
    """``n`` messages built side by side, field by field; ``flat()`` gives the bytes."""

    def __init__(self, n: int):
        self.n = n
        self.parts: list[tuple[str, object, np.ndarray]] = []

    def const(self, data: bytes) -> _Rows:
        self.parts.append(("const", np.frombuffer(data, dtype=np.uint8), np.full(self.n, len(data))))
        return self

    def varint(self, values) -> _Rows:
        mat, lens = _varint_matrix(values)
        self.parts.append(("matrix", mat, lens))
        return self

    def fixed64(self, values) -> _Rows:
        mat = np.ascontiguousarray(np.asarray(values, dtype="<f8")).view(np.uint8).reshape(self.n, 8)
        self.parts.append(("matrix", mat, np.full(self.n, 8)))
        return self

    def rows(self, flat: np.ndarray, lens: np.ndarray) -> _Rows:
        self.parts.append(("rows", flat, lens))
        return self

    def field(self, number: int, rows: _Rows) -> _Rows:
        """A LEN field holding each row of ``rows`` (its parts are spliced in, not copied)."""
        self.const(_tag(number, 2)).varint(np.sum([p[2] for p in rows.parts], axis=0))
        self.parts.extend(rows.parts)
        return self

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        lens = np.sum([p[2] for p in self.parts], axis=0).astype(np.int64)
        out = np.zeros(int(lens.sum()), dtype=np.uint8)
        off = _starts(lens)
        for kind, data, ln in self.parts:
            if kind == "const":
                for k, byte in enumerate(data.tolist()):
                    out[off + k] = byte
            elif kind == "matrix":
                for k in range(data.shape[1]):
                    sel = ln > k
                    if not sel.any():
                        break
                    out[off[sel] + k] = data[sel, k]
            else:
                _copy_rows(out, off, data, _starts(ln), ln)
            off = off + ln
        return out, lens


def _tag(number: int, wt: int) -> bytes:
    return _varint_bytes((number << 3) | wt)


def _varint_bytes(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _stat_rows(n: int, mid: int, kind: str, values) -> _Rows:
    """XStat rows: metadata_id, then the value as int64, ref or double."""
    r = _Rows(n).const(_tag(1, 0) + _varint_bytes(mid))
    if kind == "int":
        return r.const(_tag(4, 0)).varint(values)
    if kind == "ref":
        return r.const(_tag(7, 0)).varint(values)
    return r.const(_tag(2, 1)).fixed64(values)


def bulk_xspace(n_events: int, *, steps: int = 100, allocators: int = 2, threads: int = 4, seed: int = 0,
                hostname: str = "bulk-host") -> bytes:
    """An XSpace with about ``n_events`` allocator events for the benchmark.

    ``threads`` host lines each run ``steps`` op events (consumers ``_ct``=2 ``_c`` of the
    step roots on the python line, ``_r``=1 ``step_num`` producers), the allocator events
    nest in them; allocations are freed within 200 us except 0.1 % (a small leak). Stats
    exactly as BFC writes them (int64, double, refs). Encoded with numpy: seconds for
    millions of events.
    """
    rng = np.random.default_rng(seed)
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    names = [f"GPU_{i}_bfc" for i in range(allocators)]
    ops = [f"model/layer_{i}/op" for i in range(64)]
    shapes = ["[1024,1024]", "[4096]", "[256,256,4]", "[]"]
    for s in ("allocator_name", "bytes_reserved", "bytes_allocated", "bytes_available", "fragmentation",
              "peak_bytes_in_use", "requested_bytes", "allocation_bytes", "addr", "tf_op", "id",
              "region_type", "data_type", "shape", *names, *ops, *shapes, "output", "temp"):
        host.stat_id(s)
    ev_alloc = host.event_id("MemoryAllocation")
    ev_free = host.event_id("MemoryDeallocation")
    step_ps = 10 * MS
    py = host.line("python", 1)
    for s in range(steps):
        py.event("train", s * step_ps, step_ps - 1000, [("_r", 1), ("step_num", s), ("_pt", 2), ("_p", 7000 + s)])
    plane = xplane_pb2.XPlane()
    plane.CopyFrom(host.p)
    del plane.lines[:]
    out = bytearray(plane.SerializeToString(deterministic=True))
    out += _tag(3, 2) + _varint_bytes(py.line.ByteSize()) + py.line.SerializeToString(deterministic=True)
    pairs = n_events // threads // 2
    counts = np.zeros(allocators, np.int64)
    for th in range(threads):
        line = xplane_pb2.XLine(id=10 + th, name=f"pjrt_{th}", timestamp_ns=1000)
        # op events (one per step), serialized one by one: few
        op_events = []
        for s in range(steps):
            e = xplane_pb2.XEvent(metadata_id=host.event_id("step_ops"), offset_ps=s * step_ps + 1000,
                                  duration_ps=step_ps - 3000)
            host.set_stat(e.stats.add(), "_ct", 2)
            host.set_stat(e.stats.add(), "_c", 7000 + s)
            op_events.append(e.SerializeToString(deterministic=True))
        ta = np.sort(rng.integers(2000, steps * step_ps - 4000, pairs))
        life = rng.integers(1000, 200 * US, pairs)
        leak = rng.random(pairs) < 0.001
        tf = np.minimum(ta + life, steps * step_ps - 2500)
        alloc_id = rng.integers(0, allocators, pairs)
        size = rng.choice(np.array([256, 4096, 65536, 1 << 20, 4 << 20]), pairs)
        t = np.concatenate([ta, tf[~leak]])
        kind = np.concatenate([np.ones(pairs, np.int8), np.full(int((~leak).sum()), 2, np.int8)])
        idx = np.concatenate([np.arange(pairs), np.flatnonzero(~leak)])
        o = np.argsort(t, kind="stable")
        t, kind, idx = t[o], kind[o], idx[o]
        a = alloc_id[idx]
        sz = size[idx]
        delta = np.where(kind == 1, sz, -sz)
        in_use = np.zeros(len(t), np.int64)
        peak = np.zeros(len(t), np.int64)
        for k in range(allocators):
            m = a == k
            in_use[m] = np.cumsum(delta[m]) + (1 << 30) + counts[k]
            peak[m] = np.maximum.accumulate(in_use[m])
            if m.any():
                counts[k] = in_use[m][-1] - (1 << 30)
        n = len(t)
        fields = [
            ("allocator_name", "ref", np.asarray([host.stat_id(x) for x in names])[a]),
            ("bytes_reserved", "int", np.zeros(n, np.int64)),
            ("bytes_allocated", "int", in_use),
            ("bytes_available", "int", (32 << 30) - in_use),
            ("fragmentation", "double", np.round(rng.random(n) * 0.3, 6)),
            ("peak_bytes_in_use", "int", peak),
            ("requested_bytes", "int", sz - 16),
            ("allocation_bytes", "int", sz),
            ("addr", "int", 0x7F00_0000_0000 + (idx.astype(np.int64) + th * pairs) * 8192),
            ("tf_op", "ref", np.asarray([host.stat_id(x) for x in ops])[idx % len(ops)]),
            ("id", "int", t // step_ps),
            ("region_type", "ref", np.where(idx % 3 == 0, host.stat_id("temp"), host.stat_id("output"))),
            ("data_type", "int", np.ones(n, np.int64)),
            ("shape", "ref", np.asarray([host.stat_id(x) for x in shapes])[idx % len(shapes)]),
        ]
        ev = _Rows(n).const(_tag(1, 0)).varint(np.where(kind == 1, ev_alloc, ev_free))
        ev.const(_tag(2, 0)).varint(t)
        for name, vkind, values in fields:
            ev.field(4, _stat_rows(n, host.stat_id(name), vkind, values))
        mflat, mlens = _Rows(n).field(4, ev).flat()  # XLine.events entries
        # merge the op events in by time (an op starts before the events inside it)
        ops_flat = np.frombuffer(b"".join(_tag(4, 2) + _varint_bytes(len(x)) + x for x in op_events), np.uint8)
        ops_lens = np.asarray([len(_tag(4, 2) + _varint_bytes(len(x)) + x) for x in op_events], np.int64)
        op_t = np.arange(steps, dtype=np.int64) * step_ps + 1000
        all_t = np.concatenate([op_t, t])
        all_flat = np.concatenate([ops_flat, mflat])
        all_lens = np.concatenate([ops_lens, mlens])
        src = np.concatenate([_starts(ops_lens), len(ops_flat) + _starts(mlens)])
        order = np.argsort(all_t, kind="stable")
        body = np.empty(int(all_lens.sum()), np.uint8)
        _copy_rows(body, _starts(all_lens[order]), all_flat, src[order], all_lens[order])
        head = line.SerializeToString(deterministic=True)
        lb = head + body.tobytes()
        out += _tag(3, 2) + _varint_bytes(len(lb)) + lb
    space = _tag(1, 2) + _varint_bytes(len(out)) + bytes(out)
    return space + xplane_pb2.XSpace(hostnames=[hostname]).SerializeToString()
