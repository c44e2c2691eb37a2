#!/usr/bin/env python3
"""Memory profile on millions of allocator events: extraction and conversion time, RSS.

The input is :func:`profscope.testing.allocator_xplane.bulk_xspace`: an XSpace whose
``/host:CPU`` plane carries ``--events`` ``MemoryAllocation``/``MemoryDeallocation``
events (default 100,000; docs/performance.md's 2,000,000 make ~286 MB) with exactly the stats the BFC allocator writes,
spread over ``--threads`` host lines and ``--allocators`` allocators, nested in op events
connected to ``--steps`` step roots (so XProf's step grouping runs), allocations freed
within 200 us except 0.1 % (a small leak). The file is built once and kept in
``--workdir`` (keyed by the parameters).

Each measurement runs in a fresh worker process (``--worker FILE``) that reports the
time of :func:`profscope.formats.xplane_allocator.read_allocator_events` (wall and CPU),
of :func:`profscope.tools.memory_profile_allocator.from_allocator_events`, of encoding the result with orjson,
the JSON size, and its peak resident memory (``VmHWM`` in ``/proc/self/status``; the
baseline after imports is printed too). ``--xprof-python PY`` (default ``$XPROF_PYTHON``;
a scratch venv's python with ``xprof==2.24.2``, never a dependency) also times XProf's
own converter on a copy of the same file, a reference point; unset, XProf is skipped.

Usage::

    .venv/bin/python benchmarks/bench_memory_profile.py                 # 100k events
    XPROF_PYTHON=<venv>/bin/python .venv/bin/python benchmarks/bench_memory_profile.py --events 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time



def vm_hwm_kib() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def worker(path: str) -> None:
    import orjson

    from profscope.formats import xplane_allocator as xm
    from profscope.tools import memory_profile_allocator as mp

    base = vm_hwm_kib()
    w0, c0 = time.perf_counter(), time.process_time()
    with open(path, "rb") as f:
        events = xm.read_allocator_events(f, path)
    w1, c1 = time.perf_counter(), time.process_time()
    hwm_read = vm_hwm_kib()
    result = mp.from_allocator_events(events)
    w2, c2 = time.perf_counter(), time.process_time()
    body = orjson.dumps(result)
    w3 = time.perf_counter()
    print(json.dumps({
        "events": len(events),
        "allocators": len(events.memory_ids),
        "steps": len(events.steps),
        "read_s": round(w1 - w0, 2), "read_cpu_s": round(c1 - c0, 2),
        "convert_s": round(w2 - w1, 2), "convert_cpu_s": round(c2 - c1, 2),
        "encode_s": round(w3 - w2, 3),
        "json_bytes": len(body),
        "baseline_rss_mib": round(base / 1024, 1),
        "peak_rss_after_read_mib": round(hwm_read / 1024, 1),
        "peak_rss_mib": round(vm_hwm_kib() / 1024, 1),
    }))


XPROF_RUNNER = r"""
import json, sys, time
from xprof.convert import raw_to_tool_data as r
t = time.perf_counter()
data, _ = r.xspace_to_tool_data([sys.argv[1]], "memory_profile", {})
s = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"xprof_s": round(s, 2), "xprof_peak_rss_mib": round(int(hwm) / 1024, 1),
                  "xprof_json_bytes": len(data or b"")}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--allocators", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--workdir", type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()) / "profscope-bench")
    ap.add_argument("--xprof-python", default=os.environ.get("XPROF_PYTHON"),
                    help="also time XProf 2.24.2: a scratch venv's python (default: $XPROF_PYTHON; unset: skipped)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    from profscope.testing import allocator_xplane as ax

    args.workdir.mkdir(parents=True, exist_ok=True)
    name = f"bulk_e{args.events}_s{args.steps}_a{args.allocators}_t{args.threads}.xplane.pb"
    path = args.workdir / name
    if not path.exists():
        t = time.perf_counter()
        data = ax.bulk_xspace(args.events, steps=args.steps, allocators=args.allocators, threads=args.threads)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        print(f"built {path} ({len(data) / 1e6:.1f} MB) in {time.perf_counter() - t:.1f} s", flush=True)
        del data
    print(f"input: {path} ({path.stat().st_size / 1e6:.1f} MB)", flush=True)
    out = subprocess.run([sys.executable, __file__, "--worker", str(path)], check=True,
                         capture_output=True, text=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(res, indent=1), flush=True)
    if not args.xprof_python:
        print("XProf: skipped (set XPROF_PYTHON or give --xprof-python: a venv's python with xprof==2.24.2)")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / "bulk-host.xplane.pb"
            shutil.copyfile(path, copy)
            out = subprocess.run([args.xprof_python, "-c", XPROF_RUNNER, str(copy)], capture_output=True,
                                 text=True, check=False)
            if out.returncode:
                print(f"XProf failed: {out.stderr[-1000:]}")
            else:
                print(json.dumps(json.loads(out.stdout.strip().splitlines()[-1]), indent=1))


if __name__ == "__main__":
    main()
