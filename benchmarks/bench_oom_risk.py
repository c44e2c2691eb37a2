"""Time the OOM risk (cold: a fresh cache) on every run of some log directories, and the
offline HTML report of each, in one process.

    python benchmarks/bench_oom_risk.py [LOGDIR ...]   (default: the demo and tests/data/oom_programs)
    python scripts/make_big_snapshot.py big/big.pickle --target-mb 50
    python benchmarks/bench_oom_risk.py big

Prints per run: the assessment time, the loading part of it for snapshots (the rest is the
OOM risk's own work: the allocator state at the peak, stacks grouped and resolved) and
the peak RSS so far; then per log directory the report's time and size.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_peak() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    from profscope.cache.store import DiskCache
    from profscope.app.queries import OomRiskQuery
    from profscope.app.workspace import Workspace
    from profscope.cli import demo_logdir
    from profscope.app import oom_reports as report
    from profscope.frontend import oom_report
    from profscope.model.catalog import RunKind
    from profscope.storage import LogDir
    from profscope.app import tool_table

    logdirs = sys.argv[1:] or [str(demo_logdir()), str(ROOT / "tests" / "data" / "oom_programs")]
    tool = tool_table.get("oom_risk")
    for url in logdirs:
        ws = Workspace(LogDir(url), DiskCache(tempfile.mkdtemp()))
        runs = [r for r in ws.runs() if report.assessable(ws, r)]
        print(f"{url}: {len(runs)} run(s)")
        for run in runs:
            load = 0.0
            if run.kind is RunKind.TORCH_SNAPSHOT:
                t = time.perf_counter()
                ws.snapshot(run)
                load = time.perf_counter() - t
            query = OomRiskQuery(device_memory="80GiB",
                                 host=ws.hosts(run)[0] if run.kind is RunKind.TORCH_SNAPSHOT else None)
            t = time.perf_counter()
            body = json.loads(gzip.decompress(ws.tool_data(run, tool, query)))
            took = time.perf_counter() - t
            print(f"  {run.name:<48} {body['risk']:<7} peak {body['peakBytes']:>14,}  "
                  f"assess {took * 1000:8.1f} ms  (load {load * 1000:8.1f} ms)  peak RSS {_rss_peak() / 2**20:7.1f} MiB")
        t = time.perf_counter()
        html = oom_report.render_html(report.document(report.collect(ws, runs, OomRiskQuery(device_memory="80GiB")), []), url)
        print(f"  report (cached assessments): {(time.perf_counter() - t) * 1000:.1f} ms, {len(html.encode()) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
