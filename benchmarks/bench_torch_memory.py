#!/usr/bin/env python3
"""PyTorch trace memory: streaming parse + convert time and peak RSS on a huge trace.

Generates a torch-like Chrome trace (``src/profscope/testing/chrome_trace.write_huge_trace``:
steps of 1,000 ``cpu_op`` events, each allocating two blocks and freeing two older ones,
``ProfilerStep#N`` and Python-frame events, a 512-byte leak per step) with about
``--events`` ``[memory]`` events (default 100,000; 2,000,000 make ~690 MB of JSON), then, in a fresh
worker process per input, times :func:`profscope.formats.chrome_trace.memory_events`
(the streaming read, op/frame attribution) and
:func:`profscope.tools.memory_profile_torch.from_memory_events`, and reports the worker's peak resident
memory (``VmHWM`` in ``/proc/self/status``; the baseline after imports is printed too).
``--gzip`` also measures the same trace gzipped.

Usage::

    .venv/bin/python benchmarks/bench_torch_memory.py                    # 100k events
    .venv/bin/python benchmarks/bench_torch_memory.py --events 2000000   # docs/performance.md
    .venv/bin/python benchmarks/bench_torch_memory.py --events 200000 --gzip
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time



def _vm(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(path: str) -> None:
    from profscope.formats import chrome_trace
    from profscope.tools import memory_profile_torch

    base = _vm("VmHWM")
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        mem = chrome_trace.memory_events(f, path)
    t1 = time.perf_counter()
    rss_parse = _vm("VmHWM")
    out = memory_profile_torch.from_memory_events(mem)
    t2 = time.perf_counter()
    payload = json.dumps(out)
    dev = out["devices"][0]
    growth = next((h["evidence"]["bytesPerStep"] for h in dev["leakHints"] if h["kind"] == "stepGrowth"), None)
    print(json.dumps({
        "traceEvents": mem.num_trace_events,
        "memoryEvents": len(mem),
        "ops": mem.num_ops,
        "parseSeconds": round(t1 - t0, 2),
        "convertSeconds": round(t2 - t1, 2),
        "baselineRss": base,
        "peakRssAfterParse": rss_parse,
        "peakRss": _vm("VmHWM"),
        "payloadBytes": len(payload),
        "peakAllocatedBytes": dev["summary"]["peakAllocatedBytes"],
        "leakBytesPerStep": growth,
    }))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="[memory] events in the trace")
    parser.add_argument("--gzip", action="store_true", help="also measure the gzipped trace")
    parser.add_argument("--keep", type=pathlib.Path, help="write the trace here instead of a temp folder")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    from profscope.testing.memory_trace import write_huge_trace

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or pathlib.Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        inputs = [(folder / "huge.pt.trace.json", False)]
        if args.gzip:
            inputs.append((folder / "huge.pt.trace.json.gz", True))
        for path, gz in inputs:
            t = time.perf_counter()
            facts = write_huge_trace(path, args.events, gz=gz)
            size = path.stat().st_size
            print(f"generated {path.name}: {size / 2**20:,.0f} MiB, {facts['memoryEvents']:,} memory events, "
                  f"{facts['ops']:,} ops, {facts['steps']} steps ({time.perf_counter() - t:.1f} s)", flush=True)
            proc = subprocess.run([sys.executable, __file__, "--worker", str(path)], check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr)
                return proc.returncode
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            ok = (r["memoryEvents"] == facts["memoryEvents"] and r["peakAllocatedBytes"] == facts["peakTotalAllocated"]
                  and r["leakBytesPerStep"] == facts["leakBytesPerStep"])
            raw = size if not gz else None
            print(f"  parse {r['parseSeconds']:.1f} s ({r['traceEvents'] / r['parseSeconds'] / 1e6:.2f} M events/s), "
                  f"convert {r['convertSeconds']:.1f} s, payload {r['payloadBytes'] / 1024:,.0f} KiB")
            print(f"  peak RSS {r['peakRss'] / 2**20:,.0f} MiB (after parse {r['peakRssAfterParse'] / 2**20:,.0f} MiB, "
                  f"baseline after imports {r['baselineRss'] / 2**20:,.0f} MiB)"
                  + (f"; file size x 2 = {2 * raw / 2**20:,.0f} MiB" if raw else ""))
            print(f"  results match the generator's facts: {ok}")
            if not ok:
                print(json.dumps({"got": r, "want": facts}))
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
