#!/usr/bin/env python3
"""The PyTorch step breakdown (tools/step_breakdown.py, issue 34) against the trace index
build it reads from: wall seconds of ``trace_columns`` + ``build_index`` (what the first
timeline or steps request of a trace costs anyway) and of ``breakdown`` on the built
index, on the public PyTorch traces (``--fixtures``, default ``$PROFSCOPE_SHARED_FIXTURES``
or ``<repo>/../shared/fixtures``) and on launch-bound traces from
``profscope.testing.kineto_trace`` (2,000 kernels a step; ``--steps``).

Prints one line per trace (median of ``--repeat`` runs); never asserts. Usage::

    .venv/bin/python benchmarks/bench_step_breakdown.py
    .venv/bin/python benchmarks/bench_step_breakdown.py --steps 10 100 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from profscope.formats import chrome_trace
from profscope.testing import kineto_trace
from profscope.tools import step_breakdown, trace_index

ROOT = Path(__file__).resolve().parents[1]


def measure(path: Path, work: Path, repeat: int) -> tuple[float, float, int, int]:
    builds, answers = [], []
    for i in range(repeat):
        out = work / f"ix_{path.name}_{i}"
        out.mkdir()
        t = time.perf_counter()
        with open(path, "rb") as f:
            ev = chrome_trace.trace_columns(f, str(path))
        trace_index.build_index(ev, out)
        builds.append(time.perf_counter() - t)
        idx = trace_index.TraceIndex(out)
        t = time.perf_counter()
        result = step_breakdown.breakdown(idx)
        answers.append(time.perf_counter() - t)
    return statistics.median(builds), statistics.median(answers), idx.n, result["summary"]["kernels"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default=os.environ.get("PROFSCOPE_SHARED_FIXTURES",
                                                         str(ROOT.parent / "shared" / "fixtures")))
    ap.add_argument("--steps", type=int, nargs="*", default=[10, 100])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        traces = sorted((Path(args.fixtures) / "public_profiles" / "traces").glob("*.trace.json.gz"))
        traces += [kineto_trace.launch_bound(work / f"launch_{n}.pt.trace.json.gz", steps=n) for n in args.steps]
        for path in traces:
            build, answer, events, kernels = measure(path, work, args.repeat)
            print(f"{path.name:45s} {path.stat().st_size / 1e6:7.2f} MB {events:>9,} events {kernels:>8,} kernels  "
                  f"index build {build:6.3f} s  breakdown {answer:6.3f} s  ({answer / build:.0%} of the build)")


if __name__ == "__main__":
    main()
