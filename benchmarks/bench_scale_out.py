"""Trace-index conversion of a many-host session: serial (in one process, as a server
converts today) vs a local Dask cluster of 2 workers (``serve --dask-workers 2``,
app/scale_out.py), on N copies of one real profile under different host names.

    .venv/bin/python benchmarks/bench_scale_out.py [--hosts 8 16] [--profile FILE.xplane.pb]

Reports wall time, CPU seconds (the serial process; the workers' own, summed) and peak
RSS (the serial process; each worker), as a markdown table with ratios, plus one run
with the ``MALLOC_TRIM_THRESHOLD_=65536`` that Dask's nanny sets by default (issue 18:
2.2x slower on the prototype), and the cluster's start-up and idle worker size.
Default profile: the public TF GPU fixture (3 MB) when /work/shared has it, else the
demo's xplane.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from profscope.app.scale_out import DaskConversions, local_cluster  # noqa: E402
from profscope.app.workspace import Workspace  # noqa: E402
from profscope.cache.store import DiskCache  # noqa: E402
from profscope.cache.worker import WorkerPool  # noqa: E402
from profscope.storage import LogDir  # noqa: E402

PUBLIC = Path("/work/shared/fixtures/public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb")
DEMO = next((ROOT / "src/profscope/demo/logdir/mlp/plugins/profile").glob("*/demo-host.xplane.pb"))


def session(base: Path, profile: Path, n: int) -> Path:
    logdir = base / f"logs-{n}"
    folder = logdir / "plugins/profile/s"
    folder.mkdir(parents=True)
    for i in range(n):
        shutil.copy(profile, folder / f"host{i:02d}.xplane.pb")
    return logdir


def _ws(logdir: Path, cache: Path) -> Workspace:
    return Workspace(LogDir(str(logdir)), DiskCache(cache, workers=WorkerPool(enabled=False)))


def _usage() -> dict:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "maxrss_mb": r.ru_maxrss / 1024}


def serial(logdir: Path, cache: Path) -> dict:
    """In a child process, so its peak RSS is its own."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_serial_child, args=(str(logdir), str(cache), q))
    p.start()
    out = q.get(timeout=3600)
    p.join()
    return out


def _serial_child(logdir: str, cache: str, q) -> None:
    ws = _ws(Path(logdir), Path(cache))
    (run,) = ws.runs()
    before = _usage()
    t0 = time.perf_counter()
    for host, info in ws.trace_sources(run):
        ws.trace_index(run, host, info)
    wall = time.perf_counter() - t0
    after = _usage()
    q.put({"wall": wall, "cpu": after["cpu"] - before["cpu"], "rss": [after["maxrss_mb"]]})


def on_dask(logdir: Path, cache: Path, workers: int, *, malloc_trim: bool = False) -> dict:
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    if malloc_trim:  # Dask's default environment (distributed.yaml pre-spawn-environ)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    else:
        cluster = local_cluster(workers)
    client = Client(cluster)
    start_s = time.perf_counter() - t0
    idle = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    cpu0 = client.run(lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))
    conv = DaskConversions(client=client)
    ws = _ws(logdir, cache)
    (run,) = ws.runs()
    t0 = time.perf_counter()
    conv.submit_run(ws, run, first_host=run.hosts[0])
    results = [conv.wait(key) for _, key in conv._host_keys(ws, run)]
    wall = time.perf_counter() - t0
    cpu1 = client.run(lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))
    rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    env = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert all(r["built"] for r in results)
    conv.close()
    client.close()
    cluster.close()
    return {"wall": wall, "cpu": sum(cpu1[w] - cpu0[w] for w in cpu1), "rss": sorted(rss.values()),
            "start_s": start_s, "idle_mb": sorted(idle.values()), "trim": set(env.values()),
            "task_s": sorted(r["seconds"] for r in results)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, nargs="+", default=[8, 16])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--profile", type=Path, default=PUBLIC if PUBLIC.exists() else DEMO)
    args = p.parse_args()
    size_mb = args.profile.stat().st_size / 1e6
    print(f"profile: {args.profile} ({size_mb:.1f} MB), {os.cpu_count()} cores\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for n in args.hosts:
            logdir = session(base, args.profile, n)
            s = serial(logdir, base / f"serial-{n}")
            d = on_dask(logdir, base / f"dask-{n}", args.workers)
            rows.append((n, s, d))
        trim = on_dask(session(base / "trim", args.profile, args.hosts[0]), base / "trim-cache", args.workers,
                       malloc_trim=True)
    w = args.workers
    print(f"| hosts × {size_mb:.1f} MB | serial wall s | {w} Dask workers wall s | speed-up | serial CPU s | "
          f"Dask CPU s (workers) | CPU ratio | serial peak RSS MB | peak RSS per worker MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, s, d in rows:
        print(f"| {n} | {s['wall']:.2f} | {d['wall']:.2f} | {s['wall'] / d['wall']:.2f}× | {s['cpu']:.2f} | "
              f"{d['cpu']:.2f} | {d['cpu'] / s['cpu']:.2f}× | {s['rss'][0]:.0f} | "
              f"{' / '.join(f'{r:.0f}' for r in d['rss'])} |")
    d = rows[0][2]
    print(f"\nwith Dask's default MALLOC_TRIM_THRESHOLD_=65536 ({args.hosts[0]} hosts): {trim['wall']:.2f} s wall, "
          f"{trim['cpu']:.2f} CPU s (without it: {d['wall']:.2f} s, {d['cpu']:.2f} CPU s: "
          f"{trim['wall'] / d['wall']:.2f}× the wall time); workers' env {trim['trim']} vs {d['trim']}")
    print(f"cluster start-up: {d['start_s']:.2f} s; an idle worker: {' / '.join(f'{r:.0f}' for r in d['idle_mb'])} MB peak RSS; "
          f"per-host task {d['task_s'][0]:.2f}–{d['task_s'][-1]:.2f} s")


if __name__ == "__main__":
    main()
