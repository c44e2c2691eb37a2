"""Chrome traces with PyTorch-style ``[memory]`` events, for the cases real files lack.

The real traces (``src/profscope/demo/logdir/torch``, made by
``scripts/make_torch_traces.py``) are CPU-only, hold a few hundred events and start with
nothing allocated. :class:`TraceBuilder` writes events exactly as torch 2.13's
``export_chrome_trace`` does (same keys, ``args`` names, ``ph``/``cat`` values) so that
tests can make:

* several devices (CPU plus ``CUDA:0``/``CUDA:1`` with ``Total Reserved``),
* frees of blocks allocated before the trace window (``live_at_start``),
* a steady leak (:func:`steady_leak`),
* bare-array traces and out-of-order events (``to_bytes(bare=True, shuffle=seed)``),
* nested ops, Python frames and ``nn.Module`` scopes,
* huge files, written on the fly without holding the events (:func:`write_huge_trace`).

Allocator totals (``Total Allocated`` / ``Total Reserved``) are kept per device the way
the caching allocator reports them: after the event.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

CPU, CUDA = 0, 1
PID = 4242
TID = 4242


class TraceBuilder:
    def __init__(self, *, pid=PID, tid=TID, metadata: dict | None = None):
        self.pid, self.tid = pid, tid
        self.events: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid} (python)"}},
        ]
        self.metadata = {
            "schemaVersion": 1,
            "deviceProperties": [],
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
            **(metadata or {}),
        }
        self.allocated: dict[tuple[int, int], int] = {}
        self.reserved: dict[tuple[int, int], int] = {}
        self.live: dict[tuple[int, int, int], int] = {}  # (type, id, addr) -> bytes
        self._ev_idx = 0

    # -- complete events ------------------------------------------------------------------

    def _x(self, cat: str, name: str, ts: float, dur: float, tid=None, **args) -> dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid if tid is None else tid,
              "ts": ts, "dur": dur, "args": {**args, "Ev Idx": self._ev_idx}}
        self._ev_idx += 1
        self.events.append(ev)
        return ev

    def op(self, name: str, ts: float, dur: float, tid=None) -> dict:
        return self._x("cpu_op", name, ts, dur, tid, **{"External id": self._ev_idx})

    def annotation(self, name: str, ts: float, dur: float, tid=None) -> dict:
        return self._x("user_annotation", name, ts, dur, tid)

    def step(self, n: int, ts: float, dur: float, tid=None) -> dict:
        return self.annotation(f"ProfilerStep#{n}", ts, dur, tid)

    def frame(self, name: str, ts: float, dur: float, tid=None) -> dict:
        return self._x("python_function", name, ts, dur, tid, **{"Python id": self._ev_idx})

    def module(self, name: str, ts: float, dur: float, tid=None) -> dict:
        return self.frame(f"nn.Module: {name}", ts, dur, tid)

    # -- memory -----------------------------------------------------------------------------

    def live_at_start(self, device_type: int, device_id: int, nbytes: int, reserved: int | None = None) -> None:
        """Memory allocated before the window: counts in the totals, has no event."""
        key = (device_type, device_id)
        self.allocated[key] = self.allocated.get(key, 0) + nbytes
        if reserved is not None:
            self.reserved[key] = reserved

    def memory(self, ts: float, addr: int, nbytes: int, device_type=CPU, device_id=-1, tid=None,
               reserved: int | None = None, with_totals: bool = True) -> dict:
        key = (device_type, device_id)
        self.allocated[key] = self.allocated.get(key, 0) + nbytes
        if reserved is not None:
            self.reserved[key] = reserved
        elif device_type != CPU:  # the caching allocator reserves in 2 MiB segments
            seg = 2 << 20
            need = -(-self.allocated[key] // seg) * seg
            self.reserved[key] = max(self.reserved.get(key, 0), need)
        args = {"Total Reserved": self.reserved.get(key, 0), "Total Allocated": self.allocated[key],
                "Bytes": nbytes, "Device Id": device_id, "Device Type": device_type, "Addr": addr,
                "finished": False, "Ev Idx": self._ev_idx}
        if not with_totals:
            del args["Total Reserved"], args["Total Allocated"]
        self._ev_idx += 1
        ev = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
              "tid": self.tid if tid is None else tid, "ts": ts, "args": args}
        self.events.append(ev)
        return ev

    def alloc(self, ts: float, addr: int, nbytes: int, device_type=CPU, device_id=-1, **kw) -> dict:
        assert nbytes > 0
        self.live[(device_type, device_id, addr)] = nbytes
        return self.memory(ts, addr, nbytes, device_type, device_id, **kw)

    def free(self, ts: float, addr: int, device_type=CPU, device_id=-1, nbytes: int | None = None, **kw) -> dict:
        size = self.live.pop((device_type, device_id, addr), None)
        if size is None:
            assert nbytes is not None, "a block allocated before the window needs its size"
            size = nbytes
        return self.memory(ts, addr, -size, device_type, device_id, **kw)

    # -- output -----------------------------------------------------------------------------

    def to_bytes(self, *, bare: bool = False, shuffle: int | None = None, indent=None, close_bare: bool = True) -> bytes:
        events = list(self.events)
        if shuffle is not None:
            random.Random(shuffle).shuffle(events)
        if bare:
            text = json.dumps(events, indent=indent)
            if not close_bare:
                text = text.rstrip().rstrip("]").rstrip()
            return text.encode()
        return json.dumps({**self.metadata, "traceEvents": events, "traceName": "built"}, indent=indent).encode()

    def write(self, path: Path, *, gz: bool | None = None, **kw) -> Path:
        data = self.to_bytes(**kw)
        if gz if gz is not None else str(path).endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        Path(path).write_bytes(data)
        return Path(path)


def steady_leak(steps: int = 8, leak_bytes: int = 4096, temp_bytes: int = 65536, device_type=CPU, device_id=-1,
                tb: TraceBuilder | None = None) -> TraceBuilder:
    """Training-like steps: each allocates and frees temporaries under ``aten::mm`` and keeps
    one ``leak_bytes`` block from ``aten::clone`` (in ``Model_0/Cache_0``, line
    ``train.py(42): step``) that is never freed."""
    tb = tb or TraceBuilder()
    t = 1000.0
    addr = 0x10000
    for n in range(1, steps + 1):
        tb.step(n, t, 900.0)
        tb.frame("train.py(42): step", t + 1, 898.0)
        tb.module("Model_0", t + 2, 500.0)
        tb.op("aten::mm", t + 10, 100.0)
        a, b = addr, addr + 0x100000
        addr += 0x200000
        tb.alloc(t + 20, a, temp_bytes, device_type, device_id)
        tb.alloc(t + 30, b, temp_bytes // 2, device_type, device_id)
        tb.module("Cache_0", t + 200, 100.0)
        tb.op("aten::clone", t + 210, 50.0)
        tb.alloc(t + 220, addr, leak_bytes, device_type, device_id)
        addr += 0x1000
        tb.op("aten::add_", t + 600, 50.0)
        tb.free(t + 610, a, device_type, device_id)
        tb.free(t + 620, b, device_type, device_id)
        t += 1000.0
    return tb


def multi_device() -> TraceBuilder:
    """CPU and two CUDA devices with different peaks; CUDA:1 starts with 1 MiB live."""
    tb = TraceBuilder()
    tb.live_at_start(CUDA, 1, 1 << 20, reserved=2 << 20)
    tb.op("aten::empty", 100.0, 1000.0)
    tb.alloc(110.0, 0x1000, 4096)  # CPU
    tb.alloc(120.0, 0x7F0000000000, 3 << 20, CUDA, 0)
    tb.alloc(130.0, 0x7F1000000000, 5 << 20, CUDA, 1)
    tb.alloc(140.0, 0x7F0000400000, 1 << 20, CUDA, 0)  # CUDA:0 peak: 4 MiB at 140
    tb.free(150.0, 0x7F0000000000, CUDA, 0)
    tb.alloc(160.0, 0x2000, 8192)  # CPU peak: 12 KiB at 160
    tb.free(170.0, 0x7F1000000000, CUDA, 1)
    tb.free(180.0, 0x1000)
    tb.free(190.0, 0x7F2000000000, CUDA, 1, nbytes=1 << 20)  # allocated before the window
    return tb


def write_huge_trace(path: Path, memory_events: int = 2_000_000, *, gz: bool = False, seed: int = 0) -> dict:
    """Write a torch-like trace with about ``memory_events`` ``[memory]`` events, streaming.

    Steps of 1,000 ops (``X``, inside ``ProfilerStep#N`` and a Python frame that are written
    after the step's ops); each op allocates two blocks and, once more than 64 are
    pending, frees the two oldest; the end of each step (outside any op) allocates a 512-byte
    block that is never freed. Block sizes repeat every step, so live bytes at step ends grow
    by exactly 512 per step. Returns facts to check against: event counts, peak Total
    Allocated, leak bytes per step.
    """
    rng = random.Random(seed)
    opener = gzip.open if gz else open
    allocated = 0
    peak = 0
    n_mem = n_alloc = n_free = n_ops = 0
    pending: list[tuple[int, int]] = []
    addr = 0x100000
    t = 0.0
    step = 0
    ops_per_step = 1000
    leak = 512
    pid = tid = 7
    with opener(path, "wt") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", '
                '"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [\n')
        f.write(f'{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "python"}}}}')
        while n_mem < memory_events:
            step += 1
            step_start = t
            lines = []
            for k in range(ops_per_step):
                dur = 10.0
                lines.append(f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op{k % 37}", "pid": {pid}, "tid": {tid}, '
                             f'"ts": {t + 0.5:.3f}, "dur": {dur:.3f}, "args": {{"External id": {n_ops}, '
                             f'"Input Dims": [[{rng.randrange(1, 512)}, 64]], "Ev Idx": {n_ops}}}}}')
                n_ops += 1
                for j in range(2):
                    size = 256 * (1 + (2 * k + j) % 63)  # the same pattern every step
                    allocated += size
                    peak = max(peak, allocated)
                    lines.append(_mem_line(pid, tid, t + 1 + j, addr, size, allocated))
                    pending.append((addr, size))
                    addr += 0x10000
                    n_mem += 1
                    n_alloc += 1
                if len(pending) > 64:
                    for _ in range(2):
                        a, size = pending.pop(0)
                        allocated -= size
                        lines.append(_mem_line(pid, tid, t + 5, a, -size, allocated))
                        n_mem += 1
                        n_free += 1
                t += 12.0
            allocated += leak
            peak = max(peak, allocated)
            lines.append(_mem_line(pid, tid, t - 1.0, addr, leak, allocated))
            addr += 0x10000
            n_mem += 1
            n_alloc += 1
            lines.append(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {pid}, '
                         f'"tid": {tid}, "ts": {step_start:.3f}, "dur": {t - step_start:.3f}, "args": {{}}}}')
            lines.append(f'{{"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": {pid}, '
                         f'"tid": {tid}, "ts": {step_start + 0.1:.3f}, "dur": {t - step_start - 0.2:.3f}, "args": {{}}}}')
            f.write(",\n" + ",\n".join(lines))
            t += 100.0
        f.write('\n], "traceName": "huge"}\n')
    return {"memoryEvents": n_mem, "allocations": n_alloc, "frees": n_free, "ops": n_ops, "steps": step,
            "peakTotalAllocated": peak, "leakBytesPerStep": leak}


def _mem_line(pid, tid, ts, addr, nbytes, total) -> str:
    return (f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, "tid": {tid}, '
            f'"ts": {ts:.3f}, "args": {{"Total Reserved": 0, "Total Allocated": {total}, "Bytes": {nbytes}, '
            f'"Device Id": -1, "Device Type": 0, "Addr": {addr}, "finished": false}}}}')
