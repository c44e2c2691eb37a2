"""Real pprof ``Profile`` files shaped like ``jax.profiler.save_device_memory_profile()``
on GPU and TPU hosts: several devices, buffers and executables, Python stacks. Written
with profscope's own wire-compatible proto (protos/pprof.proto) and gzipped as JAX does,
for tests that need device labels a CPU run here cannot make (``cuda:0``, ``TPU_1``).
The CPU files JAX made for real are in tests/data/jax_memory_profiles/."""

from __future__ import annotations

import gzip
from dataclasses import dataclass

from profscope.formats.protos import pprof_pb2


@dataclass(frozen=True)
class Buffer:
    bytes: int
    device: str | None  # None: an executable (JAX labels those with no device)
    stack: tuple[tuple[str, str, int], ...]  # (function, file, line), the outermost first
    kind: str = "buffer"


def profile_bytes(buffers: list[Buffer], *, time_nanos: int = 0, compress: bool = True) -> bytes:
    """A Profile as JAX writes it: sample_type [allocations/count, space/bytes], one
    sample per buffer, labels kind and device, locations leaf first."""
    p = pprof_pb2.Profile()
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings)
            p.string_table.append(text)
        return strings[text]

    s("")
    for t, u in (("allocations", "count"), ("space", "bytes")):
        p.sample_type.add(type=s(t), unit=s(u))
    functions: dict[tuple[str, str], int] = {}
    locations: dict[tuple[str, str, int], int] = {}
    for b in buffers:
        sample = p.sample.add(value=[1, b.bytes if b.kind == "buffer" else 0])
        for frame in reversed(b.stack):
            fn, file, line = frame
            if (fn, file) not in functions:
                functions[(fn, file)] = len(functions) + 1
                p.function.add(id=functions[(fn, file)], name=s(fn), system_name=s(fn), filename=s(file))
            if frame not in locations:
                locations[frame] = len(locations) + 1
                p.location.add(id=locations[frame]).line.add(function_id=functions[(fn, file)], line=line)
            sample.location_id.append(locations[frame])
        sample.label.add(key=s("kind"), str=s(b.kind))
        if b.device is not None:
            sample.label.add(key=s("device"), str=s(b.device))
    p.time_nanos = time_nanos
    raw = p.SerializeToString()
    return gzip.compress(raw) if compress else raw


TRAIN = ("<module>", "train.py", 40)
STEP = ("train_step", "train.py", 22)
INIT = ("init_params", "model.py", 12)
CACHE = ("build_kv_cache", "model.py", 57)
JAX_PUT = ("device_put", "/venv/site-packages/jax/_src/api.py", 2410)


def multi_device_buffers(platform: str = "gpu", devices: int = 4) -> list[Buffer]:
    """Buffers of a data-parallel step on ``devices`` GPUs (``cuda:N``) or TPU cores
    (``TPU_N``): parameters replicated, a KV cache on each, activations growing with the
    device index (so each device's total differs), and two executables."""
    label = (lambda i: f"cuda:{i}") if platform == "gpu" else (lambda i: f"TPU_{i}")
    out = []
    for i in range(devices):
        out.append(Buffer(64 << 20, label(i), (TRAIN, INIT, JAX_PUT)))
        out.append(Buffer(16 << 20, label(i), (TRAIN, INIT, JAX_PUT)))
        out.append(Buffer((8 << 20) * (i + 1), label(i), (TRAIN, STEP, CACHE, JAX_PUT)))
        out.append(Buffer(3 << 20, label(i), (TRAIN, STEP)))
    out.append(Buffer(0, None, (TRAIN, STEP), kind="executable"))
    out.append(Buffer(0, None, (TRAIN, INIT), kind="executable"))
    return out
