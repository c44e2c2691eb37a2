#!/usr/bin/env python3
"""Capturing from running JAX jobs: profscope's capture against XProf's, same jobs, same
settings, interleaved.

Jobs: ``--hosts`` real JAX processes (``profscope.testing.profiler_job``: a jitted
training step in a loop after ``jax.profiler.start_server``). For each recording length in
``--durations`` and each tracer setting (default levels; ``--python`` adds the Python
tracer, which makes answers of tens of MB), each tool records every job at once:

* profscope: ``app.capture.Capturer.capture`` (what ``profscope capture`` and the page
  run): one ``Profile`` call per job with ``emit_xspace``, the XSpace written into the
  capture folder; run in this process, its peak RSS growth from ``ru_maxrss``.
* XProf 2.24.2: ``xprof.convert._pywrap_profiler_plugin.trace`` (what its capture
  dialog's route runs), in a child of the peers venv's python; the jobs write the files.

Reported per row: wall time, the time beyond the recording itself ("overhead"), bytes
saved, and profscope / XProf. The peers venv is the one of compare_peers.py
(``--peers-venv``, made with ``pip install xprof==2.24.2``); ``--skip-xprof`` without it.

Usage::

    .venv/bin/python benchmarks/bench_capture.py [--hosts 1,3] [--durations 1,3] [--python] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from profscope.app.capture import CaptureDir, Capturer, CaptureSettings, TargetPolicy
from profscope.testing.profiler_job import profiler_job

XPROF_CHILD = r"""
import json, os, sys, time
from xprof.convert import _pywrap_profiler_plugin as p
addr, logdir, duration, host, python = sys.argv[1:6]
t = time.perf_counter()
p.trace(addr, logdir, "", True, int(duration), 1, {"host_tracer_level": int(host), "device_tracer_level": 1,
        "python_tracer_level": int(python), "delay_ms": 0})
wall = time.perf_counter() - t
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logdir) for f in fs)
print(json.dumps({"wall": wall, "bytes": size}))
"""


def default_peers() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "profscope-bench" / "peers"


def profscope_once(targets: list[str], settings: CaptureSettings) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        capturer = Capturer(CaptureDir(tmp), TargetPolicy(["*"]))
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        job = capturer.capture(targets, settings)
        wall = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
        assert len(job.saved) == len(targets), job.summary()
        return {"wall": wall, "bytes": sum(h.bytes for h in job.saved), "rss_growth_kib": rss}


def xprof_once(python: Path, targets: list[str], settings: CaptureSettings) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([str(python), "-c", XPROF_CHILD, ",".join(targets), tmp, str(settings.duration_ms),
                              str(settings.host_tracer_level), str(settings.python_tracer_level)],
                             capture_output=True, text=True, timeout=600, cwd=tmp)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1,3", help="numbers of jobs recorded at once (default 1,3)")
    ap.add_argument("--durations", default="1,3", help="recording lengths in seconds (default 1,3)")
    ap.add_argument("--python", action="store_true", help="also rows with the Python tracer on (big answers)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and row; the median is reported")
    ap.add_argument("--peers-venv", type=Path, default=default_peers())
    ap.add_argument("--skip-xprof", action="store_true")
    args = ap.parse_args()

    xprof_python = args.peers_venv / "bin" / "python"
    if not args.skip_xprof and not xprof_python.exists():
        sys.exit(f"no peers venv at {args.peers_venv}: python3 -m venv DIR && DIR/bin/pip install xprof==2.24.2, "
                 "then --peers-venv DIR (or --skip-xprof)")
    host_counts = [int(x) for x in args.hosts.split(",")]
    durations = [float(x) for x in args.durations.split(",")]
    tracers = [(2, 0)] + ([(2, 1)] if args.python else [])
    print("| hosts | recording | tracers | profscope wall | overhead | bytes | RSS growth | XProf wall | overhead "
          "| bytes | profscope / XProf |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with contextlib.ExitStack() as stack:
        jobs = [stack.enter_context(profiler_job()) for _ in range(max(host_counts))]
        for n in host_counts:
            for seconds in durations:
                for host_level, python_level in tracers:
                    settings = CaptureSettings(duration_ms=int(seconds * 1000), host_tracer_level=host_level,
                                               python_tracer_level=python_level)
                    ours, theirs = [], []
                    for _ in range(args.repeat):  # interleaved: the machine's load hits both alike
                        ours.append(profscope_once(jobs[:n], settings))
                        if not args.skip_xprof:
                            theirs.append(xprof_once(xprof_python, jobs[:n], settings))
                    med = lambda rows, k: statistics.median(r[k] for r in rows)
                    pw = med(ours, "wall")
                    row = [str(n), f"{seconds:g} s", f"host {host_level}" + (", python" if python_level else ""),
                           f"{pw:.2f} s", f"{pw - seconds:.2f} s", f"{med(ours, 'bytes') / 1e6:.1f} MB",
                           f"{med(ours, 'rss_growth_kib') / 1024:.0f} MiB"]
                    if theirs:
                        xw = med(theirs, "wall")
                        row += [f"{xw:.2f} s", f"{xw - seconds:.2f} s", f"{med(theirs, 'bytes') / 1e6:.1f} MB",
                                f"{pw / xw:.2f}×"]
                    else:
                        row += ["–"] * 4
                    print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
