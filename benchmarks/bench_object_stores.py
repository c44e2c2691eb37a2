"""s3:// and az:// log directories against the same files on a local disk: cold OOM
report, first memory-viewer view and first trace view, each with an empty cache.

    python benchmarks/bench_object_stores.py [--run transformer] [--repeat 3] [--store s3 azure]

Starts moto's S3 server (profscope.testing.s3_emulator, its own process) and Azurite
(profscope.testing.azurite_emulator: `make downloads` installs it; skipped with a note
when it is not there), uploads one run of the bundled demo (or --logdir) to each, and
times, each in a fresh cache folder and a fresh Workspace (conversions in-process, so the
time is the reading, not a worker's start), as benchmarks/bench_gcs.py does:
``profscope report`` (collect), the first ``memory_viewer`` payload of the run's first
module, and the first ``trace_viewer@`` payload. Prints wall and CPU seconds (this
process: the emulators run in their own) for the local and the remote pass, and the
ratio of the walls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("PROFSCOPE_TEST_CACHE", str(ROOT / ".cache"))
BUCKET = "bench"


def one_pass(url: str, storage_options: dict, run_name: str) -> dict:
    from profscope.app.queries import MemoryViewerQuery, OomRiskQuery, XprofTraceQuery
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.app import oom_reports as report
    from profscope.storage import LogDir

    times = {}
    for step in ("report", "memory_viewer", "trace_viewer"):
        with tempfile.TemporaryDirectory() as cache_dir:
            start, cpu = time.perf_counter(), time.process_time()
            logdir = LogDir(url, storage_options=storage_options)
            ws = Workspace(logdir, DiskCache(cache_dir, workers=WorkerPool(enabled=False)))
            run = next(r for r in ws.runs() if r.name.startswith(run_name))
            if step == "report":
                assert report.collect(ws, [run], OomRiskQuery()), "no report"
            elif step == "memory_viewer":
                ws.tool_data(run, ws.tool_named("memory_viewer"), MemoryViewerQuery(module_name=ws.modules(run)[0]))
            else:
                ws.tool_data(run, ws.tool_named("trace_viewer@"), XprofTraceQuery())
            times[step] = (time.perf_counter() - start, time.process_time() - cpu)
    return times


def _files(source: Path, run: str) -> dict[str, bytes]:
    return {p.relative_to(source).as_posix(): p.read_bytes() for p in source.rglob("*")
            if p.is_file() and p.relative_to(source).as_posix().startswith(run + "/")}


def _store(name: str):
    """(context manager, url, reader options, writer client) of one emulator."""
    if name == "s3":
        from profscope.testing.s3_emulator import S3Emulator

        s3 = S3Emulator(buckets=(BUCKET,), readable=(BUCKET,))
        return s3, f"s3://{BUCKET}/logs", lambda: s3.options("reader"), lambda: s3.filesystem("writer")
    from profscope.testing.azurite_emulator import Azurite

    az = Azurite(containers=(BUCKET,))
    return az, f"az://{BUCKET}/logs", az.options, az.filesystem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default=str(DEMO), help="a local log directory (default: the bundled demo)")
    parser.add_argument("--run", default="transformer", help="the run to open (default: transformer, 0.67 MB xplane)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", nargs="+", default=["s3", "azure"], choices=["s3", "azure"])
    args = parser.parse_args()
    from profscope.testing.azurite_emulator import AzuriteUnavailable

    files = _files(Path(args.logdir), args.run)
    local_dir = Path(tempfile.mkdtemp(prefix="bench_object_stores_"))
    for rel, data in files.items():
        (local_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (local_dir / rel).write_bytes(data)
    print(f"run {args.run!r}: {sum(map(len, files.values())) / 1e6:.2f} MB in {len(files)} files; "
          f"load {os.getloadavg()[0]:.2f}")
    for name in args.store:
        emulator, url, options, writer = _store(name)
        try:
            with emulator:
                writer().pipe({f"{BUCKET}/logs/{rel}": data for rel, data in files.items()})
                local, remote = [], []
                for _ in range(args.repeat):  # alternated, so a busy moment hits both
                    local.append(one_pass(str(local_dir), {}, args.run))
                    remote.append(one_pass(url, options(), args.run))
        except AzuriteUnavailable as e:
            print(f"{name}: skipped: {e}")
            continue
        scheme = url.split("://")[0] + "://"
        print(f"{name} (median of {args.repeat}; cold: a fresh cache folder and LogDir each step)")
        print(f"  {'step':<15}{'local s':>9}{'cpu s':>8}{scheme + ' s':>10}{'cpu s':>8}{'ratio':>8}")
        for step in local[0]:
            lw, lc = (statistics.median(t[step][i] for t in local) for i in (0, 1))
            rw, rc = (statistics.median(t[step][i] for t in remote) for i in (0, 1))
            print(f"  {step:<15}{lw:>9.3f}{lc:>8.3f}{rw:>10.3f}{rc:>8.3f}{rw / lw:>8.2f}")


if __name__ == "__main__":
    main()
