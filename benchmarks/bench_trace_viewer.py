#!/usr/bin/env python3
"""Trace viewer on a large real JAX profile: conversion, first window, later windows, RSS.

The input is a real profile made by ``scripts/make_big_jax_profile.py`` (a jitted
training loop run for many steps with the Python tracer and host tracer level 3), given
with ``--xplane`` or made into ``--workdir`` with ``--steps`` (default 300, a small one;
docs/performance.md's 32000 steps make ~236 MB).

Two fresh worker processes, so each peak RSS (``VmHWM``) is its own:

1. *convert*: the whole server path for a cold cache: open the index through
   ``Workspace.trace_view`` (xplane read on the wire + index build into a cache folder),
   then the first window (the whole trace at 1000 px). Prints the wall time of each and
   the peak RSS next to the file size.
2. *query*: a fresh process that opens the built index (memory-mapped) and times the
   first window, then later windows: zooming in step by step around the middle, panning
   at a fine zoom, a full-trace window at 4000 px, an event's details and a search.

Usage::

    .venv/bin/python benchmarks/bench_trace_viewer.py                 # 300 steps
    .venv/bin/python benchmarks/bench_trace_viewer.py --steps 32000
    .venv/bin/python benchmarks/bench_trace_viewer.py --xplane PROFILE/plugins/profile/*/bighost.xplane.pb
    .venv/bin/python benchmarks/bench_trace_viewer.py --chrome-memory-events 1000000   # a torch-like JSON
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent


def vm_hwm_mib() -> float:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return -1.0


def _workspace(logdir: str, cache: str):
    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.storage import LogDir

    return Workspace(LogDir(logdir, listing_ttl=0), DiskCache(cache))


def _run(ws):
    return next(r for r in ws.runs() if r.kind.value in ("profile", "chrome_trace"))


def convert(logdir: str, cache: str) -> dict:
    base = vm_hwm_mib()
    from profscope.app.queries import TraceQuery

    ws = _workspace(logdir, cache)
    run = _run(ws)
    t0 = time.perf_counter()
    view = ws.trace_view(run, TraceQuery())
    t1 = time.perf_counter()
    w = view.window(None, None, 1000)
    t2 = time.perf_counter()
    import resource

    # the conversion runs in a forked worker (cache/worker.py): its peak is a child's
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"baseline_rss_mib": base, "convert_s": t1 - t0, "first_window_s": t2 - t1,
            "peak_rss_mib": max(vm_hwm_mib(), child), "server_rss_mib": vm_hwm_mib(), "events": w["totalEventsSize"], "returned": w["returnedEventsSize"],
            "span_ms": w["fullTimespan"][1]}


def query(logdir: str, cache: str) -> dict:
    from profscope.app.queries import TraceQuery
    from profscope.tools import trace_xprof

    ws = _workspace(logdir, cache)
    run = _run(ws)
    t0 = time.perf_counter()
    view = ws.trace_view(run, TraceQuery())
    w = view.window(None, None, 1000)
    first = time.perf_counter() - t0
    span = w["fullTimespan"][1]
    times, sizes = [], []
    mid = span / 2
    width = span
    while width > 1e-4:  # zoom in around the middle, 2x per step, down to 100 ns
        s, e = mid - width / 2, mid + width / 2
        t = time.perf_counter()
        r = view.window(s, e, 1500)
        times.append(time.perf_counter() - t)
        sizes.append(r["returnedEventsSize"])
        width /= 2
    pans = []
    for k in range(20):  # pan a 2 ms window across the trace
        s = span * k / 20
        t = time.perf_counter()
        view.window(s, s + 2.0, 1500)
        pans.append(time.perf_counter() - t)
    t = time.perf_counter()
    full = view.window(None, None, 4000)
    full_4k = time.perf_counter() - t
    some = w["slices"]["id"][len(w["slices"]["id"]) // 2]
    t = time.perf_counter()
    view.event(some)
    details = time.perf_counter() - t
    t = time.perf_counter()
    found = view.search("dot", 50)
    search = time.perf_counter() - t
    t = time.perf_counter()
    xj = trace_xprof.xprof_json(view, None, None, 1000)
    xprof = time.perf_counter() - t
    return {"open_and_first_window_s": first, "zoom_windows_ms": [round(x * 1000, 2) for x in times],
            "zoom_returned": sizes, "zoom_max_ms": max(times) * 1000, "zoom_median_ms": statistics.median(times) * 1000,
            "pan_max_ms": max(pans) * 1000, "pan_median_ms": statistics.median(pans) * 1000,
            "full_4000px_ms": full_4k * 1000, "full_4000px_returned": full["returnedEventsSize"],
            "details_ms": details * 1000, "search_ms": search * 1000, "search_total": found["total"],
            "xprof_json_1000px_ms": xprof * 1000, "xprof_json_bytes": len(xj),
            "peak_rss_mib": vm_hwm_mib()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xplane", type=pathlib.Path)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--chrome-memory-events", type=int, default=0,
                    help="instead: a torch-like Chrome trace (src/profscope/testing/chrome_trace.write_huge_trace)")
    ap.add_argument("--workdir", type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()) / "profscope-bench-trace")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "LOGDIR", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        mode, logdir, cache = args.worker
        print(json.dumps((convert if mode == "convert" else query)(logdir, cache)))
        return
    if args.chrome_memory_events:
        from profscope.testing.memory_trace import write_huge_trace

        out = args.workdir / f"chrome{args.chrome_memory_events}"
        out.mkdir(parents=True, exist_ok=True)
        trace = out / "huge.pt.trace.json"
        if not trace.exists():
            write_huge_trace(trace, args.chrome_memory_events)
        logdir = out
        size = trace.stat().st_size
        print(f"trace: {trace} ({size / 2**20:.1f} MiB)")
    elif args.xplane is None:
        out = args.workdir / f"steps{args.steps}"
        found = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
        if not found:
            subprocess.run([sys.executable, str(REPO / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                            "--steps", str(args.steps)], check=True)
            found = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
        args.xplane = found[-1]
    if not args.chrome_memory_events:
        logdir = args.xplane.parents[3]
        size = args.xplane.stat().st_size
        print(f"profile: {args.xplane} ({size / 2**20:.1f} MiB)")
    with tempfile.TemporaryDirectory() as cache:
        results = {}
        for mode in ("convert", "query"):
            proc = subprocess.run([sys.executable, __file__, "--worker", mode, str(logdir), cache],
                                  capture_output=True, text=True, check=True)
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        index_bytes = sum(p.stat().st_size for p in pathlib.Path(cache).rglob("*") if p.is_file())
    c, q = results["convert"], results["query"]
    print(f"events: {c['events']:,}  span: {c['span_ms']:.0f} ms  index on disk: {index_bytes / 2**20:.0f} MiB")
    print(f"cold: convert {c['convert_s']:.1f} s, first window {c['first_window_s'] * 1000:.0f} ms "
          f"({c['returned']:,} slices); peak RSS {c['peak_rss_mib']:.0f} MiB = {c['peak_rss_mib'] * 2**20 / size:.2f}x the file "
          f"(the conversion worker's; the serving process {c['server_rss_mib']:.0f} MiB, {c['baseline_rss_mib']:.0f} MiB after imports)")
    print(f"warm (new process, index on disk): open + first window {q['open_and_first_window_s'] * 1000:.0f} ms")
    print(f"zoom windows (1500 px, whole trace down to 100 ns): median {q['zoom_median_ms']:.1f} ms, max {q['zoom_max_ms']:.1f} ms")
    print(f"  per step: {q['zoom_windows_ms']}")
    print(f"  returned: {q['zoom_returned']}")
    print(f"pan 2 ms windows: median {q['pan_median_ms']:.1f} ms, max {q['pan_max_ms']:.1f} ms")
    print(f"whole trace at 4000 px: {q['full_4000px_ms']:.0f} ms ({q['full_4000px_returned']:,} slices)")
    print(f"details {q['details_ms']:.1f} ms, search 'dot' {q['search_ms']:.0f} ms ({q['search_total']:,} matches), "
          f"XProf JSON at 1000 px {q['xprof_json_1000px_ms']:.0f} ms ({q['xprof_json_bytes'] / 2**20:.1f} MiB)")
    print(f"query process peak RSS {q['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
