"""Planted problems for the Summary's rules (issue 35; docs/analysis.md, "Planted problems").

Each :class:`Case` writes one run into a log directory (a PyTorch trace, a CPU xplane,
a PyTorch snapshot, or a copy of a real program's profile) with one problem planted, or
two (pairs), or none (a healthy case), and names the rule id and the priority the
Summary must give it. :func:`evaluate` serves the log directory with a fresh workspace
and asks every run's summary through the data API
(``/data/plugin/profile/data?run=R&tag=summary[&host=ALL_HOSTS]``), and :func:`score`
counts found / missed / wrong priority, the recall and the P0s on healthy runs.
``benchmarks/analysis_recall.py`` prints them; ``tests/test_analysis_planted.py`` holds
the bar (>= 90 % recall at the right priority, no P0 on a healthy run).

The priorities follow the contract's bands (docs/analysis.md, "Status and priorities"):
P0 loses >= 25 % of the step or will fail (over capacity, an OOM), P1 >= 10 % or the HIGH
memory tier or a leak, P2 >= 2 %. Each time case's numbers are chosen well inside its band
(the share each docstring computes), so a case tests the rule, not a rounding edge.

Where the builders come from: the PyTorch traces are ``kineto_trace.KinetoTrace`` (a
kernel starts when its launch returned and the stream is free, so idle comes from the
host's timing); the CPU xplanes are written with ``allocator_xplane.Space`` and ``Bfc``
(TF's allocator events); the snapshots with ``torch_snapshot``; the leaking trace with
``memory_trace``. Real programs: ``tests/data/oom_programs`` (scripts/make_oom_programs.py:
undonated, remat off, eval heavier than train), ``tests/data/planted_programs``
(scripts/make_planted_programs.py: input-bound loop, layout-changing transpose, convert
inside a reduction, a pad not fused into its matmul) and the demo's real PyTorch leak
(``torch/leak.pt.trace.json.gz``). No real snapshot with an OOM exists here (the demo's
``flexgen_oom.pickle`` holds no ``oom`` action; public_profiles/README.md says none was
found). Those need the repository's ``tests/data`` (``data_dir``); without it they are
left out.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from profscope.testing import kineto_trace as kt
from profscope.testing import memory_trace, torch_snapshot
from profscope.testing.allocator_xplane import MS, US, U64, Bfc, Space, Str, steady_leak

__all__ = ["RULE", "DEMO_HEALTHY", "REAL_HEALTHY", "Case", "CASES", "cases", "build_logdir", "client_for", "summary_response", "summary_bytes",
           "evaluate", "score"]

DEMO = Path(__file__).resolve().parents[1] / "demo" / "logdir"
ALL_HOSTS = "ALL_HOSTS"
# Real runs with no problem planted, where no P0 is allowed either (docs/analysis.md,
# "Planted problems"): the demo's healthy runs (run-name prefixes in the demo log
# directory), and the public fixtures whose profiles were read by hand and show none
# (prefixes in <fixtures>/public_profiles): the MI300 GEMM (device busy 90 %), the TPU
# inference run (99.8 % busy, 64 % of its HBM), two real training snapshots. The
# AlexNet and B200 traces are not among them: their device idles 87-99 % (HTA), which the
# Summary cannot rate without steps.
DEMO_HEALTHY = ("mlp/", "convnet/", "transformer/", "torch/mlp_train.pt.trace.json.gz",
                "torch/transformer_train.pt.trace.json.gz", "dumps/mlp")
REAL_HEALTHY = ("xplane/mi300_jax08_gemm/", "xplane/tpu_inference/", "snapshots/niu_fwd_bwd_200_mixed.pickle",
                "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle")
MB = 1 << 20

# The rule ids the cases expect, by the problem planted (the ids of RULES in
# tools/analysis.py, analysis_memory.py and analysis_hlo.py; one place to follow a rename).
RULE = {
    "input": "input_bound", "launch": "launch_bound", "collective": "collective_bound",
    "op": "op_dominates", "straggler": "straggler_device", "straggler_host": "straggler_host",
    "idle_between": "idle_between_steps",
    "oom": "memory_oom", "over_capacity": "memory_over_capacity", "high": "memory_high",
    "undonated": "undonated_arguments", "leak": "memory_leak", "fragmentation": "memory_fragmentation",
    "activations": "activations_dominate", "other_module": "other_module_peak", "buffers": "buffers_dominate",
    "rising_ops": "memory_rising_ops", "device_idle": "device_idle", "padding": "memory_padding",
    "layout_copy": "layout_mismatch_copy", "unfused_reshape": "unfused_reshape",
    "convert_reduce": "convert_in_reduction",
}


@dataclass(frozen=True)
class Case:
    """``build(logdir, data_dir)`` writes the run's files and returns the run's name;
    ``expect``: (problem, priority) pairs, the problem a key of :data:`RULE`;
    ``healthy``: no problem planted (no P0 allowed); ``real``: a real program's profile."""

    name: str
    family: str
    build: Callable[[Path, Path | None], str | None]
    expect: tuple[tuple[str, str], ...] = ()
    healthy: bool = False
    real: bool = False
    host: str | None = None
    note: str = ""
    rules: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "rules", tuple((RULE[p], prio) for p, prio in self.expect))


# ---------------------------------------------------------------------------
# PyTorch (kineto) CUDA traces: time problems
# ---------------------------------------------------------------------------

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >"


def _kineto(name: str, body, steps: int = 4):
    """A builder writing ``kineto/<name>.pt.trace.json.gz``: ``steps`` ProfilerSteps of
    ``body``."""
    def build(logdir: Path, _data: Path | None) -> str:
        tr = kt.KinetoTrace()
        for n in range(steps):
            tr.step(n, body)
        (logdir / "kineto").mkdir(parents=True, exist_ok=True)
        tr.write(logdir / "kineto" / f"{name}.pt.trace.json.gz")
        return f"kineto/{name}.pt.trace.json.gz"
    return build


def _kineto_no_steps(name: str, iterations: int = 4):
    """A trace recorded without a profiler schedule (no ``ProfilerStep#N``): each
    iteration 5 ms of host work (loading, Python) and then 10 GEMMs of 100 µs; the device
    idles ~83 % of its kernel span."""
    def build(logdir: Path, _data: Path | None) -> str:
        tr = kt.KinetoTrace()
        for _ in range(iterations):
            tr.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5000)
            for _ in range(10):
                tr.kernel(GEMM, 100)
            tr.t = max(tr.t, tr.gpu_free) + 2
        (logdir / "kineto").mkdir(parents=True, exist_ok=True)
        tr.write(logdir / "kineto" / f"{name}.pt.trace.json.gz")
        return f"kineto/{name}.pt.trace.json.gz"
    return build


def _kineto_no_steps_high_memory(logdir: Path, _data: Path | None) -> str:
    """:func:`_kineto_no_steps`' trace with the GPU's memory recorded as PyTorch writes it
    (``[memory]`` events with ``Total Allocated``, device type 1) and its capacity in
    ``deviceProperties`` (``totalGlobalMem``, 100 MiB): 88 MiB of weights live from the
    start and a 4 MiB activation per iteration take the peak to 92 MiB (HIGH)."""
    tr = kt.KinetoTrace()
    mem = memory_trace.TraceBuilder()
    mem.live_at_start(memory_trace.CUDA, 0, 88 * MB)
    for i in range(4):
        tr.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5000)
        mem.alloc(tr.t, 0x7F0000000000 + i * 8 * MB, 4 * MB, memory_trace.CUDA, 0)
        for _ in range(10):
            tr.kernel(GEMM, 100)
        tr.t = max(tr.t, tr.gpu_free) + 2
        mem.free(tr.t, 0x7F0000000000 + i * 8 * MB, memory_trace.CUDA, 0)
    doc = {"schemaVersion": 1, "displayTimeUnit": "ms", "traceName": "no_steps_high_memory",
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 100 * MB}],
           "traceEvents": tr.events + [e for e in mem.events if e.get("ph") != "M"]}
    (logdir / "kineto").mkdir(parents=True, exist_ok=True)
    (logdir / "kineto" / "no_steps_high_memory.pt.trace.json").write_text(json.dumps(doc))
    return "kineto/no_steps_high_memory.pt.trace.json"


def _then_host(body, host_us: float):
    """``body``, then a synchronize (``loss.item()``: the host waits for the stream) and
    ``host_us`` of host work before the step ends (logging, a checkpoint): PyTorch's
    ProfilerSteps are contiguous (each ends at the next ``prof.step()``), so work between
    two steps' device work lies at the end of a step, where the device idles."""
    def step(t: kt.KinetoTrace) -> None:
        body(t)
        t.t = max(t.t, t.gpu_free) + 2
        t.host("checkpoint_save", host_us)
    return step


def _load_then_gemms(load_us: float, n: int = 20, dur: float = 500):
    """Host data loading of ``load_us``, then ``n`` GEMMs of ``dur`` µs: the device idles
    ~``load_us`` of ``load_us + n*dur`` (input-bound share)."""
    def body(t: kt.KinetoTrace) -> None:
        if load_us:
            t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", load_us)
        for _ in range(n):
            t.kernel(GEMM, dur)
    return body


def _tiny_kernels(t: kt.KinetoTrace) -> None:
    """2,000 kernels of 2 µs, each launch 10 µs of host: the device busy ~1/6 of the step."""
    for _ in range(2000):
        t.kernel(ADD, 2, launch_us=10, op="aten::add")


def _gemms_allreduce(load_us: float = 0.0):
    """10 GEMMs of 100 µs and a 5 ms all-reduce (~83 % of the device time), after
    ``load_us`` of host loading."""
    def body(t: kt.KinetoTrace) -> None:
        if load_us:
            t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", load_us)
        for _ in range(10):
            t.kernel(GEMM, 100)
        t.kernel(ALLREDUCE, 5000, op="nccl:all_reduce")
    return body


def _softmax_dominates(t: kt.KinetoTrace) -> None:
    """10 GEMMs of 200 µs, 10 elementwise adds of 100 µs and one softmax of 7 ms: one
    kernel family is 70 % of the step's device time (the GEMMs 20 %)."""
    for _ in range(10):
        t.kernel(GEMM, 200)
        t.kernel(ADD, 100, op="aten::add")
    t.kernel(SOFTMAX, 7000, op="aten::_softmax")


def _load_then_softmax(t: kt.KinetoTrace) -> None:
    """4 ms of host loading, then :func:`_softmax_dominates`'s kernels (10 ms)."""
    t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 4000)
    _softmax_dominates(t)


def _two_gpus(slow: float = 300, fast: float = 100, load_us: float = 0.0):
    """10 kernels on GPU 0 and GPU 1, GPU 1's 3x slower: GPU 0 waits 2/3 of the step."""
    def body(t: kt.KinetoTrace) -> None:
        if load_us:
            t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", load_us)
        for _ in range(10):
            for dev in (0, 1):
                t.kernel(GEMM, slow if dev == 1 else fast, device=dev)
    return body


def _balanced(t: kt.KinetoTrace) -> None:
    """A healthy step: 40 GEMMs of 300 µs, 20 adds of 50 µs and a 400 µs all-reduce, each
    launched in 5 µs (the queue stays full): no family above 1/2 of the device time, the
    all-reduce 3 %, no idle to speak of."""
    for i in range(40):
        t.kernel(GEMM, 300)
        if i % 2:
            t.kernel(ADD, 50, op="aten::add")
    t.kernel(ALLREDUCE, 400, op="nccl:all_reduce")


TIME_CASES = (
    Case("kineto_input_bound_p0", "kineto", _kineto("input_bound_p0", _load_then_gemms(8000, 20, 50)),
         (("input", "P0"),), note="8 ms loading, 1 ms of kernels: the device idles ~89 % of the step"),
    Case("kineto_input_bound_p1", "kineto", _kineto("input_bound_p1", _load_then_gemms(1500)),
         (("input", "P1"),), note="1.5 ms loading, 10 ms of kernels: ~13 % idle before the first kernel"),
    Case("kineto_input_bound_p2", "kineto", _kineto("input_bound_p2", _load_then_gemms(500)),
         (("input", "P2"),), note="0.5 ms loading, 10 ms of kernels: ~4.8 % idle"),
    Case("kineto_launch_bound", "kineto", _kineto("launch_bound", _tiny_kernels), (("launch", "P0"),),
         note="2,000 kernels of 2 µs launched every 12 µs: ~83 % idle between kernels"),
    Case("kineto_collective_bound", "kineto", _kineto("collective_bound", _gemms_allreduce()),
         (("collective", "P0"),), note="a 5 ms all-reduce in a 6 ms step"),
    Case("kineto_op_dominates", "kineto", _kineto("op_dominates", _softmax_dominates), (("op", "P2"),),
         note="one softmax kernel is 70 % of the step (op_dominates is P2 by its rule: a dominant op is "
         "where to look, not time lost)"),
    Case("kineto_straggler_device", "kineto", _kineto("straggler", _two_gpus()), (("straggler", "P0"),),
         note="GPU 1 3x slower than GPU 0: GPU 0 waits ~2/3 of each step"),
    Case("kineto_idle_between_steps", "kineto",
         _kineto("idle_between", _then_host(_load_then_gemms(0, 10, 500), 4000)), (("idle_between", "P0"),),
         note="5 ms steps with 4 ms of host work between them: the device idles 44 % of the time"),
    Case("kineto_no_steps_idle", "kineto", _kineto_no_steps("no_steps_idle"), (("device_idle", "P0"),),
         note="no ProfilerStep: 5 ms of host work before every 1 ms of kernels, ~83 % idle over the kernel span"),
    # pairs
    Case("kineto_input_and_collective", "kineto", _kineto("input_collective", _gemms_allreduce(8000)),
         (("input", "P0"), ("collective", "P0")),
         note="8 ms loading then the all-reduce step: ~57 % idle, the all-reduce ~36 % of the step"),
    Case("kineto_launch_and_idle_between", "kineto",
         _kineto("launch_idle_between", _then_host(_tiny_kernels, 12000)), (("launch", "P0"), ("idle_between", "P0")),
         note="launch-bound steps of 24 ms with 12 ms of host work between them"),
    Case("kineto_straggler_and_input", "kineto", _kineto("straggler_input", _two_gpus(load_us=3000)),
         (("straggler", "P0"), ("input", "P0")),
         note="3 ms of loading, then GPU 1 3x slower: both idle > 25 %"),
    Case("kineto_no_steps_idle_and_high_memory", "kineto", _kineto_no_steps_high_memory,
         (("device_idle", "P0"), ("high", "P1")), note="no ProfilerStep, 83 % idle, GPU memory at 92 % of its capacity"),
    Case("kineto_op_and_input", "kineto", _kineto("op_input", _load_then_softmax), (("op", "P2"), ("input", "P0")),
         note="4 ms of loading before a 10 ms step of which one softmax kernel is 7 ms: ~29 % idle"),
    # healthy
    Case("kineto_healthy", "kineto", _kineto("healthy", _balanced), healthy=True,
         note="a full queue of GEMMs, small adds and a short all-reduce"),
    Case("kineto_compute_bound", "kineto", _kineto("compute_bound", _load_then_gemms(0, 40, 500)), healthy=True,
         note="kineto_trace.compute_bound: 40 GEMMs of 500 µs, the queue full"),
)


# ---------------------------------------------------------------------------
# CPU xplanes: hosts and TF allocator events
# ---------------------------------------------------------------------------

def _write_xplane(logdir: Path, run: str, host: str, data: bytes, session: str = "planted") -> str:
    folder = logdir / run / "plugins" / "profile" / session
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{host}.xplane.pb").write_bytes(data)
    return f"{run}/{session}"


def grouped_cpu(host: str, *, step_us: int = 4000, input_us: int = 0, steps: int = 5) -> bytes:
    """A CPU profile grouped at capture (as TF writes it; ``step_xplane.pregrouped_cpu``'s
    shape): ``steps`` steps of ``step_us``, each a ``matmul_op`` then ``input_us`` of
    ``IteratorGetNext`` (XProf's "waiting for input")."""
    sp = Space(host)
    plane = sp.plane("/host:CPU", 0)
    py, worker = plane.line("python3", 1), plane.line("worker", 2)
    for s in range(steps):
        t = 1 * MS + s * (step_us + 1000) * US
        py.event("TrainLoop", t, step_us * US, [("group_id", s), ("step_name", Str(f"step {s}"))])
        worker.event("matmul_op", t + 100 * US, (step_us - 200 - input_us) * US, [("group_id", s)])
        if input_us:
            worker.event("IteratorGetNext", t + (step_us - 100 - input_us) * US, input_us * US, [("group_id", s)])
    return sp.to_bytes()


def tpu_barrier(host: str, *, barrier_share: float, cores: int = 2, steps: int = 5) -> bytes:
    """TPU cores whose 4 ms steps (the ``Steps`` line, ``group_id``) end in a
    ``barrier-cores`` op taking ``barrier_share`` of the step: the cores wait for each
    other (or for another host) at the barrier. The ops carry ``group_id`` and a uint64
    ``device_duration_ps``: what XProf's event_time_fraction_analyzer reads for its
    smart_suggestion ``BarrierCoresRule`` (average barrier-cores share >= 10 %)."""
    sp = Space(host)
    sp.plane("/host:CPU", 0).line("python3", 1)
    for core in range(cores):
        tpu = sp.plane(f"/device:TPU:{core}", 10 + core)
        step_line, ops = tpu.line("Steps", 1, timestamp_ns=0), tpu.line("XLA Ops", 2, timestamp_ns=0)
        barrier_us = int(4000 * barrier_share)
        for s in range(steps):
            t = 1 * MS + s * 5 * MS
            step_line.event(f"{s}", t, 4000 * US, [("group_id", s)])
            work = 3900 - barrier_us
            ops.event("fusion.1", t + 10 * US, work * US, [("group_id", s), ("device_duration_ps", U64(work * US))])
            ops.event("barrier-cores", t + (3950 - barrier_us) * US, barrier_us * US,
                      [("group_id", s), ("device_duration_ps", U64(barrier_us * US))])
    return sp.to_bytes()


def _tpu_pod_straggler(logdir: Path, _data: Path | None) -> str:
    """Four TPU hosts in lockstep (every step 4 ms on all of them): host 3 computes 3.7 ms
    of each step, the others 2.3 ms and then wait 1.6 ms (40 %) in ``barrier-cores`` for
    it. Step times are equal, so only the barrier share names the straggler: XProf's
    BarrierCoresRule lists ``pod-host3`` (5.0 % against 40 %)."""
    run = None
    for i in range(4):
        host = f"pod-host{i}"
        run = _write_xplane(logdir, "tpu_pod_straggler", host, tpu_barrier(host, barrier_share=0.05 if i == 3 else 0.4))
    return run


def _straggler_hosts(logdir: Path, _data: Path | None) -> str:
    """Two hosts of one session, host1's steps twice as long (8 ms vs 4 ms): host0 waits
    half of every step at the next collective."""
    _write_xplane(logdir, "hosts_straggler", "host0", grouped_cpu("host0", step_us=4000))
    return _write_xplane(logdir, "hosts_straggler", "host1", grouped_cpu("host1", step_us=8000))


def _healthy_hosts(logdir: Path, _data: Path | None) -> str:
    _write_xplane(logdir, "hosts_healthy", "host0", grouped_cpu("host0", step_us=4000))
    return _write_xplane(logdir, "hosts_healthy", "host1", grouped_cpu("host1", step_us=4040))


def allocator_run(host: str, *, limit: int, steady: int, leak: int = 0, steps: int = 6,
                  big: tuple[int, ...] = (), growth: dict[int, int] | None = None) -> bytes:
    """A training loop whose BFC allocator (``limit`` bytes: the capacity) holds
    ``steady`` bytes of weights, allocates and frees a 4 MiB temporary each step and, with
    ``leak``, keeps ``leak`` bytes more every step (never freed). ``big``: buffers made in
    the last step, the peak's (XProf's memory profile lists an allocation made in an
    earlier step as memory in use from before: its op is not named at the peak); ``growth``: {step: bytes} an op
    (``metrics/cache``) keeps in those steps only (rising, not a steady line)."""
    sp = Space(host)
    plane = sp.plane("/host:CPU", 0)
    # The allocations nest in the step's root event on its own thread: XProf's step
    # grouping gives them that step (no producer/consumer stats needed).
    py = plane.line("python", 1)
    bfc = Bfc(plane, "GPU_0_bfc", limit, seed=5)
    bfc.prealloc(steady)
    for s in range(steps):
        t = 1 * MS + s * 10 * MS
        run_id = 1000 + s  # TF's allocator events carry the step's run id (``id``), not its number
        py.event("train", t, 9 * MS, [("_r", 1), ("step_num", s)])
        if s == steps - 1:
            for k, size in enumerate(big):
                bfc.alloc(py, t + (20 + k) * US, size, op=f"model/embedding_{k}", shape=f"[{size // 4}]", step=run_id,
                          region="persist")
        a = bfc.alloc(py, t + 100 * US, 4 * MB, op="dense/MatMul", shape="[1024,1024]", step=run_id, region="temp")
        if leak:
            bfc.alloc(py, t + 200 * US, leak, op="leaky/cache", shape=f"[{leak // 4}]", step=run_id, region="persist")
        if growth and growth.get(s):
            bfc.alloc(py, t + 300 * US, growth[s], op="metrics/cache", shape=f"[{growth[s] // 4}]", step=run_id,
                      region="persist")
        bfc.free(py, t + 5 * MS, a, step=run_id)
    return sp.to_bytes()


def _alloc_case(run: str, **kw):
    def build(logdir: Path, _data: Path | None) -> str:
        return _write_xplane(logdir, run, "host0", allocator_run("host0", **kw))
    return build


def _tf_leak(logdir: Path, _data: Path | None) -> str:
    """``allocator_xplane.steady_leak``: TF's executor threads, 1 MiB kept every step."""
    return _write_xplane(logdir, "tf_steady_leak", "host0", steady_leak())


XPLANE_CASES = (
    Case("xplane_cpu_input_bound", "xplane_cpu",
         lambda d, _x: _write_xplane(d, "cpu_input_bound", "host0", grouped_cpu("host0", input_us=3000)),
         (("input", "P0"),), note="75 % of each step in IteratorGetNext (XProf's overview: HIGHLY input-bound)"),
    Case("xplane_straggler_host", "xplane_cpu", _straggler_hosts, (("straggler_host", "P0"),), host=ALL_HOSTS,
         note="two hosts, one with 2x longer steps"),
    Case("tpu_barrier_cores", "xplane_tpu",
         lambda d, _x: _write_xplane(d, "tpu_barrier", "tpu-host", tpu_barrier("tpu-host", barrier_share=0.4)),
         (("collective", "P0"),), note="40 % of every TPU step in barrier-cores (XProf's BarrierCoresRule fires)"),
    Case("tpu_pod_straggler", "xplane_tpu", _tpu_pod_straggler, (("collective", "P0"), ("straggler_host", "P0")),
         host=ALL_HOSTS, note="three of four TPU hosts wait 40 % of each step at the barrier for the fourth"),
    Case("tpu_healthy", "xplane_tpu",
         lambda d, _x: _write_xplane(d, "tpu_healthy", "tpu-host", tpu_barrier("tpu-host", barrier_share=0.01)),
         healthy=True, note="1 % of each step at the barrier"),
    Case("xplane_healthy_hosts", "xplane_cpu", _healthy_hosts, healthy=True, host=ALL_HOSTS,
         note="two hosts within 1 % of each other"),
    Case("allocator_high_tier", "allocator", _alloc_case("alloc_high", limit=100 * MB, steady=88 * MB),
         (("high", "P1"),), note="peak 92 MiB of a 100 MiB allocator: the HIGH tier (>= 90 %)"),
    Case("allocator_over_capacity", "allocator", _alloc_case("alloc_over", limit=100 * MB, steady=98 * MB),
         (("over_capacity", "P0"),), note="98 MiB held and a 4 MiB temporary each step in a 100 MiB allocator: "
         "the peak (102 MiB) is over the capacity"),
    Case("allocator_leak", "allocator", _alloc_case("alloc_leak", limit=1024 * MB, steady=64 * MB, leak=2 * MB),
         (("leak", "P1"),), note="2 MiB kept every step, 6 steps, 7 % of the capacity at the end"),
    Case("allocator_tf_steady_leak", "allocator", _tf_leak, (("leak", "P1"),),
         note="allocator_xplane.steady_leak: 1 MiB a step over 8 steps"),
    Case("allocator_leak_and_high", "allocator",
         _alloc_case("alloc_leak_high", limit=100 * MB, steady=76 * MB, leak=2 * MB),
         (("leak", "P1"), ("high", "P1")), note="the leak takes the peak from 80 % to 92 % of the capacity"),
    Case("allocator_leak_over_capacity", "allocator",
         _alloc_case("alloc_leak_over", limit=100 * MB, steady=90 * MB, leak=2 * MB),
         (("leak", "P1"), ("over_capacity", "P0")), note="2 MiB kept a step takes the peak from 94 % to 104 % of the "
         "capacity: the leak that will fail"),
    Case("allocator_buffers_dominate", "allocator",
         _alloc_case("alloc_big", limit=100 * MB, steady=1 * MB, big=(25 * MB, 25 * MB, 25 * MB)),
         (("buffers", "P2"),), note="three 25 MiB buffers are 94 % of an 80 MiB peak, 80 % of the capacity (MEDIUM)"),
    Case("allocator_rising_op", "allocator",
         _alloc_case("alloc_rising", limit=1024 * MB, steady=64 * MB, steps=8,
                     growth={1: 8 * MB, 3: MB // 2, 5: MB // 2, 7: MB // 2}),
         (("rising_ops", "P2"),), note="metrics/cache keeps 8 MiB in step 1 and 0.5 MiB in steps 3, 5, 7: "
         "never freed, rising in half the steps, not a straight line (r2 0.49: no steady leak)"),
    Case("allocator_buffers_and_high", "allocator",
         _alloc_case("alloc_big_high", limit=100 * MB, steady=1 * MB, big=(30 * MB, 30 * MB, 30 * MB)),
         (("buffers", "P1"), ("high", "P1")), note="three 30 MiB buffers make a 95 MiB peak (HIGH); they are more "
         "than the 5 MiB the run must cut to leave HIGH, so buffers_dominate is P1"),
    Case("allocator_rising_and_high", "allocator",
         _alloc_case("alloc_rising_high", limit=100 * MB, steady=78 * MB, steps=8,
                     growth={1: 8 * MB, 3: MB // 2, 5: MB // 2, 7: MB // 2}),
         (("rising_ops", "P2"), ("high", "P1")), note="the rising op takes the peak to 91.5 % of the capacity"),
    Case("allocator_healthy", "allocator", _alloc_case("alloc_healthy", limit=1024 * MB, steady=64 * MB),
         healthy=True, note="68 MiB of 1 GiB, flat"),
)


# ---------------------------------------------------------------------------
# PyTorch snapshots and memory traces
# ---------------------------------------------------------------------------

def _snapshot(name: str, make: Callable[[], dict]):
    def build(logdir: Path, _data: Path | None) -> str:
        (logdir / "snapshots").mkdir(parents=True, exist_ok=True)
        (logdir / "snapshots" / f"{name}.pickle").write_bytes(torch_snapshot.to_pickle(make()))
        return f"snapshots/{name}.pickle"
    return build


def fragmented_snapshot() -> dict:
    """One device, a 64 MiB segment of 8 MiB blocks, every other one inactive (freed, not
    returned): 32 MiB of holes, external fragmentation 50 % of the reserved bytes."""
    base, blocks = 0x7F0000000000, []
    for i in range(8):
        state = "active_allocated" if i % 2 == 0 else "inactive"
        blocks.append(torch_snapshot.block(base + i * 8 * MB, 8 * MB, 8 * MB, state, fr=(torch_snapshot.PY_FRAME,)))
    return {"segments": [torch_snapshot.segment(0, base, blocks)], "device_traces": [[]]}


def oom_snapshot() -> dict:
    """One device: a 32 MiB segment fully allocated, then an ``oom`` trace entry (a 64 MiB
    request with 10 MiB free on the device): the out-of-memory alone, no holes."""
    snap = healthy_snapshot()
    t = 1_700_000_000_000_000
    snap["device_traces"] = [[torch_snapshot.entry("oom", 0, 64 * MB, t, fr=(torch_snapshot.PY_FRAME,),
                                                   device_free=10 * MB)]]
    return snap


def healthy_snapshot() -> dict:
    """One device, a 32 MiB segment fully allocated in four 8 MiB blocks."""
    base = 0x7F0000000000
    blocks = [torch_snapshot.block(base + i * 8 * MB, 8 * MB, 8 * MB, fr=(torch_snapshot.PY_FRAME,)) for i in range(4)]
    return {"segments": [torch_snapshot.segment(0, base, blocks)], "device_traces": [[]]}


def _torch_leak(logdir: Path, _data: Path | None) -> str:
    """``memory_trace.steady_leak``: a CPU trace keeping 64 KiB every step of 8."""
    (logdir / "torch_mem").mkdir(parents=True, exist_ok=True)
    tb = memory_trace.steady_leak(steps=8, leak_bytes=64 << 10, temp_bytes=256 << 10)
    (logdir / "torch_mem" / "leak.pt.trace.json").write_bytes(tb.to_bytes())
    return "torch_mem/leak.pt.trace.json"


MEMORY_CASES = (
    Case("snapshot_oom_fragmented", "snapshot", _snapshot("oom", torch_snapshot.expandable_oom_multidevice),
         (("oom", "P0"), ("fragmentation", "P2")),
         note="torch_snapshot.expandable_oom_multidevice: an oom action on device 0, whose segment holds "
         "2 MiB allocated and a 16 MiB inactive block (89 % of it free but reserved)"),
    Case("snapshot_oom", "snapshot", _snapshot("oom_only", oom_snapshot), (("oom", "P0"),),
         note="an oom trace entry on a device whose segment is fully used"),
    Case("snapshot_fragmented", "snapshot", _snapshot("fragmented", fragmented_snapshot),
         (("fragmentation", "P2"),), note="50 % of the reserved bytes are holes"),
    Case("snapshot_healthy", "snapshot", _snapshot("healthy", healthy_snapshot), healthy=True),
    Case("torch_trace_leak", "torch_trace", _torch_leak, (("leak", "P1"),),
         note="memory_trace.steady_leak: 64 KiB a step over 8 steps"),
)


# ---------------------------------------------------------------------------
# Real programs
# ---------------------------------------------------------------------------

def _copy_run(src_rel: str, dst: str):
    """Copy ``<data_dir>/<src_rel>`` (a profile run's folder) to ``<logdir>/<dst>``."""
    def build(logdir: Path, data: Path | None) -> str | None:
        if data is None or not (data / src_rel).is_dir():
            return None
        shutil.copytree(data / src_rel, logdir / dst)
        session = next((logdir / dst).glob("plugins/profile/*"))
        return f"{dst}/{session.name}"
    return build


def _demo_file(rel: str, dst: str):
    def build(logdir: Path, _data: Path | None) -> str:
        (logdir / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DEMO / rel, logdir / dst)
        return dst
    return build


def padded_module(data: bytes, num: int = 5, den: int = 4) -> bytes:
    """A compiled module's ``HloProto`` (with its buffer assignment) as a device that pads
    its layouts would assign it: every logical buffer, every allocation and every offset
    ``num/den`` times XLA's (on a TPU, (8, 128) tiles pad a minor dimension of 100 f32 to
    128: 1.28x). The shapes keep their sizes, so the memory viewer's padding (assigned
    size - the shape's size) is ``(num - den) / num`` of the peak: 20 %."""
    from profscope.model.protos import hlo_pb2

    proto = hlo_pb2.HloProto()
    proto.ParseFromString(data)
    ba = proto.buffer_assignment
    for lb in ba.logical_buffers:
        lb.size = lb.size * num // den
    for alloc in ba.buffer_allocations:
        alloc.size = alloc.size * num // den
        for a in alloc.assigned:
            a.offset, a.size = a.offset * num // den, a.size * num // den
    return proto.SerializeToString()


def _module_from_profile(xplane: Path, module: str) -> bytes:
    """The ``HloProto`` (with its buffer assignment) a profile's ``/host:metadata`` plane
    holds for ``module`` (an event metadata named ``<module>(<program id>)``, its
    ``Hlo Proto`` stat)."""
    from profscope.formats.protos import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(xplane.read_bytes())
    meta = next(p for p in space.planes if p.name == "/host:metadata")
    for em in meta.event_metadata.values():
        if em.name.split("(")[0] == module:
            return next(st.bytes_value for st in em.stats if st.bytes_value)
    raise KeyError(module)


def _padded_dump(program: str, run: str, num: int, den: int):
    """A real train step of tests/data/oom_programs as an XLA dump whose buffers are
    padded ``num/den`` (:func:`padded_module`)."""
    def build(logdir: Path, data: Path | None) -> str | None:
        if data is None or not (data / "oom_programs" / program).is_dir():
            return None
        xplane = next((data / "oom_programs" / program).glob("plugins/profile/*/*.xplane.pb"))
        (logdir / run).mkdir(parents=True, exist_ok=True)
        name = "module_0001.jit_train_step.cpu_after_optimizations.hlo.pb"
        (logdir / run / name).write_bytes(padded_module(_module_from_profile(xplane, "jit_train_step"), num, den))
        return run
    return build


REAL_CASES = (
    Case("jax_undonated", "jax", _copy_run("oom_programs/undonated", "jax_undonated"), (("undonated", "P2"),),
         real=True, note="Adam MLP train step without donate_argnums: the old state (18 MB) kept beside the new"),
    Case("jax_remat_off", "jax", _copy_run("oom_programs/remat_off", "jax_remat_off"), (("activations", "P2"),),
         real=True, note="wide residual blocks without jax.checkpoint: activations dominate the peak"),
    Case("jax_eval_heavy", "jax", _copy_run("oom_programs/eval_heavy", "jax_eval_heavy"),
         (("other_module", "P2"),), real=True, note="an eval step on a 4096 batch peaks above the train step"),
    Case("xla_dump_padded", "xla_dump", _padded_dump("remat_on", "dump_padded", 3, 2), (("padding", "P2"),),
         note="the real remat-on train step as an XLA dump, every buffer assigned 1.5x its shape: 23 % of the peak"),
    Case("xla_dump_padded_activations", "xla_dump", _padded_dump("remat_off", "dump_padded_remat_off", 5, 4),
         (("padding", "P2"), ("activations", "P2")),
         note="the real remat-off train step, every buffer 1.25x its shape: 19 % padding, activations 81 % of the peak"),
    Case("jax_donated", "jax", _copy_run("oom_programs/donated", "jax_donated"), healthy=True, real=True),
    Case("jax_remat_on", "jax", _copy_run("oom_programs/remat_on", "jax_remat_on"), healthy=True, real=True),
    Case("jax_input_bound", "jax", _copy_run("planted_programs/input_bound", "jax_input_bound"),
         (("input", "P0"),), real=True, note="20 ms of host sleep in every ~2 ms step"),
    Case("jax_bad_transpose", "jax", _copy_run("planted_programs/bad_transpose", "jax_bad_transpose"),
         (("layout_copy", "P2"),), real=True, note="a (64,512,256) transpose materialised by a layout-changing copy"),
    Case("jax_convert_reduce", "jax", _copy_run("planted_programs/convert_reduce", "jax_convert_reduce"),
         (("convert_reduce", "P2"),), real=True, note="sum of a bf16 array converted to f32 first"),
    Case("jax_unfused_pad", "jax", _copy_run("planted_programs/unfused_pad", "jax_unfused_pad"),
         (("unfused_reshape", "P2"),), real=True, note="a pad made by its own kernel before the dot that reads it"),
    Case("jax_undonated_remat", "jax", _copy_run("planted_programs/undonated_remat", "jax_undonated_remat"),
         (("undonated", "P2"), ("activations", "P2")), real=True,
         note="wide residual blocks without jax.checkpoint and without donate_argnums"),
    Case("jax_transpose_convert", "jax", _copy_run("planted_programs/transpose_convert", "jax_transpose_convert"),
         (("layout_copy", "P2"), ("convert_reduce", "P2")), real=True,
         note="a transposed output and a bf16 -> f32 -> sum -> bf16 in one module"),
    Case("jax_pad_convert", "jax", _copy_run("planted_programs/pad_convert", "jax_pad_convert"),
         (("unfused_reshape", "P2"), ("convert_reduce", "P2")), real=True,
         note="a pad made by its own kernel before a dot, and a bf16 -> f32 -> sum -> bf16, in one module"),
    Case("jax_eval_undonated", "jax", _copy_run("planted_programs/eval_undonated", "jax_eval_undonated"),
         (("other_module", "P2"), ("undonated", "P2")), real=True,
         note="an undonated train step and an eval step on a 4096 batch that peaks above it"),
    Case("torch_real_leak", "torch_trace", _demo_file("torch/leak.pt.trace.json.gz", "torch_real/leak.pt.trace.json.gz"),
         (("leak", "P1"),), real=True, note="the demo's real PyTorch program keeping 64 KiB a step"),
)

CASES: tuple[Case, ...] = TIME_CASES + XPLANE_CASES + MEMORY_CASES + REAL_CASES


def cases(names: list[str] | None = None) -> list[Case]:
    return [c for c in CASES if not names or c.name in names]


def build_logdir(logdir: Path, data_dir: Path | None, selected: list[Case] | None = None) -> dict[str, str]:
    """Write every case's run into ``logdir``; {case name: run name} (cases whose real
    program is not in ``data_dir`` are left out)."""
    runs = {}
    for case in selected or CASES:
        run = case.build(Path(logdir), data_dir)
        if run is not None:
            runs[case.name] = run
    return runs


def client_for(logdir: Path, cache_dir: Path):
    """A TestClient over a fresh workspace serving ``logdir`` (its cache in ``cache_dir``)."""
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server import create_app
    from profscope.storage import LogDir

    return TestClient(create_app(Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(cache_dir))))


def summary_response(client, run: str, host: str | None = None):
    """The data API's summary of ``run`` (``host``: a host name or ALL_HOSTS)."""
    return client.get("/data/plugin/profile/data", params={"run": run, "tag": "summary", **({"host": host} if host else {})})


def summary_bytes(client, run: str, host: str | None = None) -> bytes:
    """The summary as the goldens keep it (tests/golden/summary, scripts/record_summary_goldens.py):
    the JSON with sorted keys, one space of indent."""
    r = summary_response(client, run, host)
    r.raise_for_status()
    return (json.dumps(r.json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def evaluate(logdir: Path, cache_dir: Path, runs: dict[str, str], selected: list[Case] | None = None) -> list[dict]:
    """Each case's summary from a fresh workspace over ``logdir``, through the data API;
    one row per case: ``case``, ``run``, ``status`` (HTTP), ``findings`` [(id, priority,
    host)], ``verdict``, ``refused``, ``error``."""
    client = client_for(logdir, cache_dir)
    rows = []
    for case in selected or CASES:
        if case.name not in runs:
            continue
        r = summary_response(client, runs[case.name], case.host)
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        found = [(f.get("id"), f.get("priority"), f.get("host")) for f in body.get("findings") or []] \
            if r.status_code == 200 else []
        rows.append({"case": case.name, "run": runs[case.name], "status": r.status_code, "findings": found,
                     "verdict": body.get("status"), "refused": body.get("refused") or [],
                     "error": None if r.status_code == 200 else str(body.get("error") or r.text[:300])})
    return rows


def score(rows: list[dict], selected: list[Case] | None = None) -> dict:
    """Per case: each planted (rule, priority) found at that priority, found at another
    (``wrong``), or missed; healthy cases' P0s. Totals: ``planted``, ``found``, ``recall``
    (found / planted), ``false_p0`` (P0 findings on healthy runs)."""
    by_name = {c.name: c for c in selected or CASES}
    out, planted, found, false_p0 = [], 0, 0, 0
    for row in rows:
        case = by_name[row["case"]]
        got: dict[str, set] = {}
        for fid, prio, _host in row["findings"]:
            got.setdefault(fid, set()).add(prio)
        res = {"case": case.name, "family": case.family, "real": case.real, "healthy": case.healthy,
               "found": [], "wrong": [], "missed": [], "p0": [], "error": row["error"],
               "findings": sorted({(f, p) for f, p, _ in row["findings"]}, key=lambda x: (x[1], x[0]))}
        for rule, prio in case.rules:
            planted += 1
            if prio in got.get(rule, ()):
                found += 1
                res["found"].append((rule, prio))
            elif rule in got:
                res["wrong"].append((rule, prio, sorted(got[rule])))
            else:
                res["missed"].append((rule, prio))
        if case.healthy:
            res["p0"] = sorted({f for f, p, _ in row["findings"] if p == "P0"})
            false_p0 += sum(1 for _f, p, _ in row["findings"] if p == "P0")
        out.append(res)
    return {"cases": out, "planted": planted, "found": found,
            "recall": round(found / planted, 4) if planted else None, "false_p0": false_p0}
