"""PyTorch (kineto) CUDA traces with kernels, for the step-time cases the public traces
lack: an input-bound run (the device idles while the host prepares each batch), a
launch-bound run (many tiny kernels, each waiting for its launch), a compute-bound and a
collective-bound run.

No GPU runs here, so the events are written the way kineto writes a CUDA trace (as in
``shared/fixtures/public_profiles/traces/tracelens_h100_bert_small.trace.json.gz``):

* host: ``ProfilerStep#N`` (``cat`` ``user_annotation``) around ``cpu_op`` slices, each
  launch a ``cuda_runtime`` ``cudaLaunchKernel`` with ``args.correlation``;
* device: ``kernel`` slices on ``pid`` 0 (the device), ``tid`` 7 (the stream) with
  ``args`` ``device``, ``stream``, ``correlation``, ``External id``; each step also as a
  ``gpu_user_annotation`` on the stream (no ``stream`` arg), as kineto writes it;
* launches: an ``ac2g`` flow, ``s`` at the runtime call's ``ts`` on the host thread and
  ``f`` (``"bp": "e"``) at the kernel's ``ts`` on the stream.

A kernel starts when both its launch has returned and the stream's previous kernel has
ended (one stream, in order), so the device's idle comes from the host's timing exactly
as on a real GPU.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PID, TID, DEVICE, STREAM = 4242, 4242, 0, 7


class KinetoTrace:
    def __init__(self):
        self.events: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": f"thread {TID} (python)"}},
            {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": DEVICE, "tid": STREAM, "args": {"name": f"stream {STREAM} "}},
        ]
        self.t = 1000.0  # host clock, µs
        self.free: dict[int, float] = {}  # per device: when its stream's last kernel ends, µs
        self.corr = 1
        self.step_kernels: list[tuple[float, float]] = []

    def host(self, name: str, dur: float) -> None:
        """Host work without launches (the input pipeline, Python)."""
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": TID, "ts": self.t,
                            "dur": dur, "args": {"External id": self.corr}})
        self.t += dur

    @property
    def gpu_free(self) -> float:
        """When the last kernel of any device ends, µs."""
        return max(self.free.values(), default=0.0)

    def kernel(self, name: str, dur: float, launch_us: float = 5.0, op: str = "aten::mm", device: int = DEVICE) -> None:
        """One op launching one kernel of ``dur`` µs on ``device`` (its stream 7: kineto's
        ``pid`` is the device); the launch call takes ``launch_us``."""
        c, t0 = self.corr, self.t
        self.corr += 1
        self.events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": PID, "tid": TID, "ts": t0, "dur": launch_us + 2,
             "args": {"External id": c}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": TID, "ts": t0 + 1,
             "dur": launch_us, "args": {"External id": c, "correlation": c}},
            {"ph": "s", "id": c, "pid": PID, "tid": TID, "ts": t0 + 1, "cat": "ac2g", "name": "ac2g"},
        ]
        start = max(t0 + 1 + launch_us, self.free.get(device, 0.0))
        self.free[device] = start + dur
        self.events += [
            {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": STREAM, "ts": start, "dur": dur,
             "args": {"External id": c, "device": device, "stream": STREAM, "correlation": c,
                      "grid": [1, 1, 1], "block": [128, 1, 1]}},
            {"ph": "f", "id": c, "pid": device, "tid": STREAM, "ts": start, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
        self.step_kernels.append((start, start + dur))
        self.t = t0 + launch_us + 2

    def step(self, n: int, body) -> None:
        """``ProfilerStep#n`` around ``body(self)``, then a synchronize (the host waits for
        the stream, as ``loss.item()`` does), and kineto's device copy of the step."""
        t0 = self.t
        self.step_kernels = []
        body(self)
        self.t = max(self.t, self.gpu_free) + 2
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": PID,
                            "tid": TID, "ts": t0, "dur": self.t - t0, "args": {"External id": 0}})
        if self.step_kernels:
            s, e = self.step_kernels[0][0], self.step_kernels[-1][1]
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": DEVICE,
                                "tid": STREAM, "ts": s, "dur": e - s, "args": {"External id": 0, "device": DEVICE}})

    def write(self, path: Path | str) -> Path:
        path = Path(path)
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
               "traceEvents": self.events, "traceName": path.name, "displayTimeUnit": "ms"}
        data = json.dumps(doc).encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
        return path


def input_bound(path, steps: int = 4) -> Path:
    """Each step: 8 ms of data loading on the host, then 20 kernels of 50 µs."""
    tr = KinetoTrace()

    def body(t: KinetoTrace) -> None:
        t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 8000)
        for _ in range(20):
            t.kernel("ampere_sgemm_128x64_tn", 50)
    for n in range(steps):
        tr.step(n, body)
    return tr.write(path)


def launch_bound(path, steps: int = 4) -> Path:
    """Each step: 2,000 kernels of 2 µs, each launch taking 10 µs of host time."""
    tr = KinetoTrace()

    def body(t: KinetoTrace) -> None:
        for _ in range(2000):
            t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >", 2,
                     launch_us=10, op="aten::add")
    for n in range(steps):
        tr.step(n, body)
    return tr.write(path)


def compute_bound(path, steps: int = 4) -> Path:
    """Each step: 40 kernels of 500 µs, launched in 5 µs each (the queue stays full)."""
    tr = KinetoTrace()

    def body(t: KinetoTrace) -> None:
        for _ in range(40):
            t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 500)
    for n in range(steps):
        tr.step(n, body)
    return tr.write(path)


def collective_bound(path, steps: int = 4) -> Path:
    """Each step: 10 kernels of 100 µs, then an all-reduce kernel of 5 ms."""
    tr = KinetoTrace()

    def body(t: KinetoTrace) -> None:
        for _ in range(10):
            t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 100)
        t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 5000,
                 op="nccl:all_reduce")
    for n in range(steps):
        tr.step(n, body)
    return tr.write(path)


def straggler(path, steps: int = 3, slow_device: int = 1) -> Path:
    """Two GPUs driven by one host thread: each step launches the same 10 kernels of 100 µs
    on device 0 and on device 1, except that ``slow_device``'s take 300 µs (a throttled
    or shared GPU)."""
    tr = KinetoTrace()

    def body(t: KinetoTrace) -> None:
        for _ in range(10):
            for dev in (0, 1):
                t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 300 if dev == slow_device else 100,
                         device=dev)
    for n in range(steps):
        tr.step(n, body)
    return tr.write(path)


SCENARIOS = {"input": input_bound, "launch": launch_bound, "compute": compute_bound,
             "communication": collective_bound}
