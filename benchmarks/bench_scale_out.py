"""Trace-index conversion of a many-host session: serial (in one process, as a server
converts today) vs a local Dask cluster of 2 workers (``serve --dask-workers 2``,
app/scale_out.py), on N copies of one real profile under different host names.

    .venv/bin/python benchmarks/bench_scale_out.py [--hosts 8 16] [--profile FILE.xplane.pb]

Reports wall time, CPU seconds (the serial process; the workers' own, summed) and peak
RSS (the serial process; each worker), as a markdown table with ratios, plus one run
with the ``MALLOC_TRIM_THRESHOLD_=65536`` that Dask's nanny sets by default (issue 18:
2.2x slower on the prototype), and the cluster's start-up and idle worker size.
Default profile: the public TF GPU fixture (3 MB) when the shared fixtures folder has it
($PROFSCOPE_SHARED_FIXTURES or ../shared/fixtures beside the checkout), else the demo's
xplane.

Then the shared cache (``serve --shared-cache``, cache/shared.py) on a local GCS emulator
(testing/gcs_emulator.py): one replica converts every host and publishes it, a second
replica with its own cache folder copies them, and the costs per host (build, upload,
copy, index size) feed a table for a 256-host × 300 MB session on 8, 32 and 128 workers.
``--only-shared`` skips the Dask part.

Then the all-hosts views' per-host work (Workspace.fan_out): the memory roll-up
(``/api/memory_hosts``: every host's memory profile) and the run's OOM risk (every host
assessed, the worst one rated), cold, with the server's forked workers one host after
another (2 slots, the default here: one is kept free), 2 at once (3 slots) and on the
Dask cluster. ``--only-rollups`` runs only that.

``--one-host FILE [--rounds 3]`` (issue 40): one big host's index, interleaved per round:
in one process (as the server builds it), on the Dask cluster as one task (its plane not
cut: $PROFSCOPE_LINE_RANGE_MIN_BYTES above its size), and on the cluster with its plane
cut in line ranges decoded by every worker (formats/xplane_line_ranges.py). Wall, CPU
(user and system, the workers' summed) and the load average, per round.

``--trace-overview [--hosts 16 64]``: the All-hosts trace overview of a cold pod session,
in the server's forked workers vs a Dask task per host, interleaved per round.
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
from profscope.testing.shared_fixtures import default_shared_fixtures  # noqa: E402

PUBLIC = default_shared_fixtures() / "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
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
    return {"cpu": r.ru_utime + r.ru_stime, "user": r.ru_utime, "maxrss_mb": r.ru_maxrss / 1024}


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
    q.put({"wall": wall, "cpu": after["cpu"] - before["cpu"], "user": after["user"] - before["user"],
           "rss": [after["maxrss_mb"]]})


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
    cpu0 = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF)[:2])
    conv = DaskConversions(client=client)
    ws = _ws(logdir, cache)
    (run,) = ws.runs()
    t0 = time.perf_counter()
    conv.submit_run(ws, run, first_host=run.hosts[0])
    results = [conv.wait(key) for _, key in conv._host_keys(ws, run)]
    wall = time.perf_counter() - t0
    cpu1 = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF)[:2])
    rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    env = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert all(r["built"] for r in results)
    conv.close()
    client.close()
    cluster.close()
    return {"wall": wall, "cpu": sum(sum(cpu1[w]) - sum(cpu0[w]) for w in cpu1),
            "user": sum(cpu1[w][0] - cpu0[w][0] for w in cpu1), "rss": sorted(rss.values()),
            "start_s": start_s, "idle_mb": sorted(idle.values()), "trim": set(env.values()),
            "task_s": sorted(r["seconds"] for r in results), "ranges": [r.get("ranges", []) for r in results]}


def trace_overview(host_counts: list[int], workers: int, rounds: int) -> None:
    """The All-hosts trace overview (``/api/trace_hosts``) of a cold pod session
    (testing/pod_session.py: the demo's and the public fixtures' real xplanes in turn),
    in the server's forked workers (2 slots, the default here) and as a Dask task per host.
    A session per round and way (Dask's task keys are the cache keys, which name the log
    directory, not the cache folder). CPU: the server's, and its forked children's or the
    workers' (summed)."""
    from distributed import Client

    from profscope.testing.pod_session import build_pod_session

    def tree() -> tuple[float, float]:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime

    def workers_cpu() -> float:
        return sum(client.run(lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])).values())

    print("| hosts | round | forked workers: wall s, server + children CPU s | Dask tasks: wall s, server + workers CPU s "
          "| load avg |")
    print("|---|---|---|---|---|")
    cluster = local_cluster(workers)
    client = Client(cluster)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            for n in host_counts:
                for r in range(rounds):
                    cells = []
                    for how in ("forked", "dask"):
                        logdir = base / f"pod{n}-{r}-{how}"
                        build_pod_session(logdir, n, public=True)
                        ws = Workspace(LogDir(str(logdir)), DiskCache(base / f"c-{n}-{r}-{how}",
                                                                       workers=WorkerPool(concurrency=2)))
                        conv = DaskConversions(client=client) if how == "dask" else None
                        ws.scale_out = conv
                        (run,) = ws.runs()
                        (me0, kids0), w0, t0 = tree(), workers_cpu(), time.perf_counter()
                        out = ws.trace_hosts(run)
                        wall = time.perf_counter() - t0
                        (me1, kids1), w1 = tree(), workers_cpu()
                        others = (w1 - w0) if conv else (kids1 - kids0)
                        cells.append(f"{wall:.2f}, {me1 - me0:.2f} + {others:.2f}")
                        assert len(out["hosts"]) == n
                    print(f"| {n} | {r + 1} | {cells[0]} | {cells[1]} | {os.getloadavg()[0]:.2f} |", flush=True)
    finally:
        client.close()
        cluster.close()


def one_host(profile: Path, workers: int, rounds: int) -> None:
    """One big host, interleaved: one process, one Dask task, its plane cut in ranges."""
    print("| round | how | wall s | CPU s (user + sys) | user s | peak RSS MB | ranges (worker pids) | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        base = Path(tmp)
        folder = base / "logs/plugins/profile/s"
        folder.mkdir(parents=True)
        os.link(profile, folder / "host00.xplane.pb")  # no copy of a big file
        logdir = base / "logs"
        for r in range(rounds):
            for how in ("one process", "one Dask task", "Dask, line ranges"):
                cache = base / f"cache-{r}-{how.replace(' ', '_')}"
                if how == "one process":
                    m = serial(logdir, cache)
                else:
                    os.environ["PROFSCOPE_LINE_RANGE_MIN_BYTES"] = str(1 << 62) if how == "one Dask task" else ""
                    try:
                        m = on_dask(logdir, cache, workers)
                    finally:
                        os.environ.pop("PROFSCOPE_LINE_RANGE_MIN_BYTES", None)
                shutil.rmtree(cache, ignore_errors=True)
                ranges = m.get("ranges", [[]])[0]
                print(f"| {r + 1} | {how} | {m['wall']:.2f} | {m['cpu']:.2f} | {m['user']:.2f} | "
                      f"{' / '.join(f'{x:.0f}' for x in m['rss'])} | {len(ranges)} ({len(set(ranges))}) | "
                      f"{os.getloadavg()[0]:.2f} |", flush=True)


def shared_cache(logdir: Path, base: Path) -> dict:
    """A replica without the record builds every host (the baseline); replica A builds and
    publishes them; replica B (its own folder) copies them. The emulator runs in its own
    process: in this one its thread would take the GIL from the conversions measured."""
    import subprocess

    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from profscope.cache.shared import SharedRecord
    from profscope.storage.object_store import ObjectStore

    emulator = subprocess.Popen([sys.executable, "-m", "profscope.testing.gcs_emulator", "bench"],
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        url = emulator.stdout.readline().strip()

        def replica(name: str) -> Workspace:
            store = ObjectStore("gs://bench/cache", storage_options={"endpoint_url": url, "token": "anon"})
            record = SharedRecord(store, writer=name)
            publish = record.publish
            record.publish_s = 0.0

            def timed_publish(*a, **kw):
                t = time.perf_counter()
                try:
                    return publish(*a, **kw)
                finally:
                    record.publish_s += time.perf_counter() - t

            record.publish = timed_publish
            return Workspace(LogDir(str(logdir)), DiskCache(base / name, workers=WorkerPool(enabled=False), shared=record))

        base_ws = _ws(logdir, base / "baseline")
        (run,) = base_ws.runs()
        t0 = time.perf_counter()
        for host, info in base_ws.trace_sources(run):
            base_ws.trace_index(run, host, info)
        out = {"baseline": time.perf_counter() - t0}
        for name in ("a", "b"):
            ws = replica(name)
            (run,) = ws.runs()
            t0 = time.perf_counter()
            for host, info in ws.trace_sources(run):
                ws.trace_index(run, host, info)
            wall = time.perf_counter() - t0  # every host's answer (uploads run on their own threads)
            ws.cache.shared.flush()
            out[name] = {"wall": wall, "all_s": time.perf_counter() - t0, "publish_s": ws.cache.shared.publish_s,
                         **ws.cache.shared.snapshot()}
        index_bytes = sum(p.stat().st_size for p in (base / "b").rglob("*") if p.is_file() and ".d/" in str(p))
    finally:
        emulator.terminate()
        emulator.wait(20)
    assert out["b"]["fetched"] == len(run.hosts) and out["b"]["published"] == 0, out
    out["index_bytes"] = index_bytes
    out["hosts"] = len(run.hosts)
    return out


def simulate(per_host_build_s: float, size_mb: float, index_ratio: float, rates: dict[str, tuple[float, float]],
             hosts: int = 256, host_mb: float = 300.0) -> None:
    """A pod session from the per-host costs measured here, the build scaled linearly with
    the file size (the index build reads each event once); ``rates``: {label: (upload,
    copy MB/s)}, the emulator's measured ones and an assumed bucket's."""
    build_s = per_host_build_s / size_mb * host_mb
    index_mb = host_mb * index_ratio
    print(f"\n{hosts} hosts × {host_mb:.0f} MB from the costs above: a host converts in {build_s:.0f} s of one core, "
          f"{hosts * build_s / 3600:.1f} core-hours in all; its index is {index_mb:.0f} MB, "
          f"{hosts * index_mb / 1e3:.0f} GB in the record")
    print("\n| workers | bucket | all hosts indexed and uploaded | the viewed host first | "
          "a second replica copies one host | or builds it itself |")
    print("|---|---|---|---|---|---|")
    for w in (8, 32, 128):
        waves = -(-hosts // w)
        for label, (up, down) in rates.items():
            per_host = build_s + index_mb / up
            print(f"| {w} | {label} | {waves * per_host / 60:.1f} min | {per_host:.0f} s | {index_mb / down:.1f} s | "
                  f"{build_s:.0f} s |")


def rollups(logdir: Path, base: Path, workers: int) -> list[tuple[str, float, float, int]]:
    """(how, memory roll-up s, OOM risk of the run s, conversions forked by the server)."""
    import gzip

    import orjson

    from profscope.app.queries import OomRiskQuery
    from profscope.app import tool_table

    out = []
    for how, slots, dask in (("forked workers, one at a time (2 slots)", 2, False),
                             ("forked workers, 2 at once (3 slots)", 3, False),
                             (f"{workers} Dask workers", 2, True)):
        ws = Workspace(LogDir(str(logdir)), DiskCache(base / f"rollups-{slots}-{dask}", workers=WorkerPool(concurrency=slots)))
        if dask:
            ws.scale_out = DaskConversions(n_workers=workers)
        (run,) = ws.runs()
        t0 = time.perf_counter()
        rows = ws.memory_hosts(run)
        t1 = time.perf_counter()
        oom = orjson.loads(gzip.decompress(ws.tool_data(run, tool_table.get("oom_risk"), OomRiskQuery())))
        t2 = time.perf_counter()
        assert rows["rollup"]["hosts"] == len(run.hosts) and len(oom["hosts"]) == len(run.hosts)
        out.append((how, t1 - t0, t2 - t1, ws.cache.workers.stats["runs"]))
        if dask:
            ws.scale_out.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, nargs="+", default=[8, 16])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--profile", type=Path, default=PUBLIC if PUBLIC.exists() else DEMO)
    p.add_argument("--only-shared", action="store_true", help="only the shared cache and the 256-host table")
    p.add_argument("--only-rollups", action="store_true", help="only the all-hosts memory roll-up and OOM risk")
    p.add_argument("--bucket-mb-s", type=float, default=200.0,
                   help="a real bucket's upload and download rate for the 256-host table (an assumption: "
                        "the single-threaded emulator is no measure of GCS; default 200)")
    p.add_argument("--one-host", type=Path, help="one big host's xplane: one process vs its plane cut on Dask")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--trace-overview", action="store_true",
                   help="only the All-hosts trace overview of --hosts pod hosts: forked workers vs Dask tasks")
    args = p.parse_args()
    if args.trace_overview:
        trace_overview(args.hosts, args.workers, args.rounds)
        return
    if args.one_host:
        one_host(args.one_host, args.workers, args.rounds)
        return
    size_mb = args.profile.stat().st_size / 1e6
    print(f"profile: {args.profile} ({size_mb:.1f} MB), {os.cpu_count()} cores\n")
    with tempfile.TemporaryDirectory() as tmp:
        n = args.hosts[-1]
        rows = rollups(session(Path(tmp), args.profile, n), Path(tmp), args.workers)
    print(f"| {n} hosts × {size_mb:.1f} MB, cold | memory roll-up s | OOM risk of the run s | conversions forked by the server |")
    print("|---|---|---|---|")
    base = rows[0]
    for how, mem_s, oom_s, forks in rows:
        print(f"| {how} | {mem_s:.2f} ({base[1] / mem_s:.2f}×) | {oom_s:.2f} ({base[2] / oom_s:.2f}×) | {forks} |")
    print()
    if args.only_rollups:
        return
    with tempfile.TemporaryDirectory() as tmp:
        shared = shared_cache(session(Path(tmp), args.profile, args.hosts[0]), Path(tmp))
    a, b, n = shared["a"], shared["b"], shared["hosts"]
    index_mb = shared["index_bytes"] / 1e6
    build_s = shared["baseline"] / n
    print(f"| shared cache on the GCS emulator, {n} hosts | per host | all hosts |")
    print("|---|---|---|")
    print(f"| a replica without the shared cache converts | {build_s:.3f} s | {shared['baseline']:.2f} s |")
    print(f"| replica A converts: the answers | {a['wall'] / n:.3f} s | {a['wall']:.2f} s |")
    print(f"| replica A uploads each index and commits (upload threads) | {a['publish_s'] / n:.3f} s | "
          f"{a['publish_s']:.2f} s, all committed {a['all_s']:.2f} s after the first request |")
    print(f"| replica B copies it instead of converting | {b['wall'] / n:.3f} s | {b['wall']:.2f} s |")
    print(f"| index size | {index_mb / n:.2f} MB ({index_mb / n / size_mb:.2f}× the xplane) | {index_mb:.1f} MB |")
    up, down = index_mb / a["publish_s"], index_mb / b["wall"]
    simulate(build_s, size_mb, index_mb / n / size_mb,
             {f"emulator ({up:.1f} / {down:.1f} MB/s)": (up, down),
              f"assumed {args.bucket_mb_s:.0f} MB/s": (args.bucket_mb_s, args.bucket_mb_s)})
    if args.only_shared:
        return
    print()
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
