"""A gs:// log directory against the same files on a local disk: cold OOM report, first
memory-viewer view and first trace view, each with an empty cache.

    python benchmarks/bench_gcs.py [--run transformer] [--repeat 3]

Starts a GCS emulator (gcp-storage-emulator, in memory) on a free port, uploads one run of
the bundled demo (or --logdir), and times, each in a fresh cache folder and a fresh
Workspace (conversions in-process, so the time is the reading, not a worker's start):
``profscope report`` (collect), the first ``memory_viewer`` payload of the run's first
module, and the first ``trace_viewer@`` payload. Prints local and gs:// times, their
ratio, and how many HTTP requests gcsfs sent for the gs:// pass.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs is imported

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
sys.path.insert(0, str(ROOT / "src"))
BUCKET = "bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _requests():
    """Count gcsfs's HTTP requests (every listing, stat and ranged read is one)."""
    import gcsfs

    counter = {"n": 0}
    real = gcsfs.GCSFileSystem._call

    async def counted(self, *args, **kwargs):
        counter["n"] += 1
        return await real(self, *args, **kwargs)

    gcsfs.GCSFileSystem._call = counted
    return counter


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
            start = time.perf_counter()
            logdir = LogDir(url, storage_options=storage_options)
            ws = Workspace(logdir, DiskCache(cache_dir, workers=WorkerPool(enabled=False)))
            run = next(r for r in ws.runs() if r.name.startswith(run_name))
            if step == "report":
                out = report.collect(ws, [run], OomRiskQuery())
                assert out, "no report"
            elif step == "memory_viewer":
                module = ws.modules(run)[0]
                ws.tool_data(run, ws.tool_named("memory_viewer"), MemoryViewerQuery(module_name=module))
            else:
                ws.tool_data(run, ws.tool_named("trace_viewer@"), XprofTraceQuery())
            times[step] = time.perf_counter() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default=str(DEMO), help="a local log directory (default: the bundled demo)")
    parser.add_argument("--run", default="transformer", help="the run to open (default: transformer, 0.67 MB xplane)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import gcsfs
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        fs = gcsfs.GCSFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
        source = Path(args.logdir)
        # The local side holds exactly what the bucket holds.
        logdir = Path(tempfile.mkdtemp(prefix="bench_gcs_"))
        uploaded = 0
        for path in source.rglob("*"):
            rel = path.relative_to(source).as_posix()
            if path.is_file() and (rel.startswith(args.run + "/") or rel == args.run):
                fs.pipe(f"{BUCKET}/logs/{rel}", path.read_bytes())
                (logdir / rel).parent.mkdir(parents=True, exist_ok=True)
                (logdir / rel).write_bytes(path.read_bytes())
                uploaded += path.stat().st_size
        print(f"uploaded {uploaded / 1e6:.2f} MB of run {args.run!r}; load {os.getloadavg()[0]:.2f}")
        local, remote = [], []
        counter = _requests()
        requests = []
        for _ in range(args.repeat):
            local.append(one_pass(str(logdir), {}, args.run))
            before = counter["n"]
            remote.append(one_pass(f"gs://{BUCKET}/logs", {"endpoint_url": endpoint, "token": "anon"}, args.run))
            requests.append(counter["n"] - before)
        print(f"{'step':<15}{'local s':>10}{'gs:// s':>10}{'ratio':>8}")
        for step in local[0]:
            a = statistics.median(t[step] for t in local)
            b = statistics.median(t[step] for t in remote)
            print(f"{step:<15}{a:>10.3f}{b:>10.3f}{b / a:>8.2f}")
        print(f"gs:// HTTP requests per pass (3 steps, fresh caches): {requests}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
