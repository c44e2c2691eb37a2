"""Another session's latency while hostile files are refused (issue 13).

Starts ``profscope serve`` on a log directory holding the bundled demo and the hostile
reproducers of ``profscope/testing/fuzz/reproducers.py`` (a pickle of shared references, a gzip
bomb, deep nesting, ...). One client ("the other session") asks, every 20 ms, for the
run list and for a demo tool answer already in the cache; another opens every hostile
run the way the page does. Each round touches the hostile files first, so that they are
new inputs (new cache keys) and cost their conversion again. Printed per mode (workers
on, and ``PROFSCOPE_WORKERS=0``: conversions in the server process): the other
session's latency idle and under attack (median, p99, max), the hostile requests'
statuses and slowest answer, and the peak RSS of the server and of its process tree.

    python benchmarks/bench_hostile_latency.py [--rounds 1] [--modes workers,inline]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from profscope.cli import demo_logdir
from profscope.testing.fuzz.driver import _rss_kb, tree_rss_mb
from profscope.testing.fuzz.reproducers import reproducers

DEMO = demo_logdir()


def tree_rss(pid: int) -> tuple[int, int]:
    """(RSS of pid, RSS of pid and all its descendants), in bytes."""
    return _rss_kb(pid) * 1024, int(tree_rss_mb(pid) * 2**20)


def build_logdir(root: Path) -> list[str]:
    shutil.copytree(DEMO, root, dirs_exist_ok=True)
    runs = []
    for i, m in enumerate(reproducers()):
        folder = root / "hostile" / f"{i:02d}_{m.name.split(':', 1)[1]}"
        for rel, data in m.files.items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        runs.append(folder)
    return [str(f.relative_to(root)) for f in runs]


def start(logdir: Path, cache: Path, env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "profscope", "serve", str(logdir), "--port", "0",
                             "--cache-dir", str(cache)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, **env})
    for line in proc.stdout:
        m = re.search(r"serving at (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1).rstrip("/")
    raise SystemExit("the server did not start")


def measure(mode: str, rounds: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    try:
        logdir = tmp / "logs"
        folders = build_logdir(logdir)
        env = {"PROFSCOPE_WORKERS": "1" if mode == "workers" else "0"}
        proc, base = start(logdir, tmp / "cache", env)
        client = httpx.Client(base_url=base, timeout=60)
        runs = client.get("/api/runs").json()["runs"]
        demo = next(r["name"] for r in runs if r["kind"] == "profile" and not r["folder"].startswith("hostile"))
        hostile = [r["name"] for r in runs if r["folder"].startswith("hostile")]
        warm = f"/data/plugin/profile/data?run={demo}&tag=memory_profile"
        client.get(warm).raise_for_status()

        lat: dict[str, list[float]] = {"idle": [], "attack": []}
        phase = ["idle"]
        stop = threading.Event()
        peak = [0, 0]

        def other_session():
            c = httpx.Client(base_url=base, timeout=60)
            while not stop.is_set():
                for url in ("/api/runs", warm):
                    t = time.perf_counter()
                    c.get(url)
                    lat[phase[0]].append(time.perf_counter() - t)
                time.sleep(0.02)

        def sampler():
            while not stop.is_set():
                own, total = tree_rss(proc.pid)
                peak[0], peak[1] = max(peak[0], own), max(peak[1], total)
                time.sleep(0.02)

        base_own, base_total = tree_rss(proc.pid)
        threads = [threading.Thread(target=other_session), threading.Thread(target=sampler)]
        for t in threads:
            t.start()
        time.sleep(2)
        phase[0] = "attack"
        statuses: dict[int, int] = {}
        failures: list[str] = []
        slowest = 0.0
        for r in range(rounds):
            now = time.time() + r + 1
            for folder in folders:  # new mtimes: new inputs, converted again
                for path in (logdir / folder).rglob("*"):
                    if path.is_file():
                        os.utime(path, (now, now))
            time.sleep(0.1)
            for name in hostile:
                c = httpx.Client(base_url=base, timeout=60)
                info = c.get("/api/run", params={"run": name})
                urls = [f"/data/plugin/profile/run_tools?run={name}"]
                if info.status_code == 200:
                    urls += [f"/data/plugin/profile/data?run={name}&tag={t['name']}" for t in info.json()["tools"]]
                for url in urls:
                    t = time.perf_counter()
                    try:
                        status = c.get(url).status_code
                    except httpx.HTTPError as e:
                        status = -1
                        failures.append(f"{url}: {type(e).__name__}")
                    if status >= 500:
                        failures.append(f"{url}: {status}")
                    slowest = max(slowest, time.perf_counter() - t)
                    statuses[status] = statuses.get(status, 0) + 1
        stop.set()
        for t in threads:
            t.join()
        proc.terminate()
        proc.wait(10)

        def stats(xs):
            xs = sorted(xs)
            return (1000 * statistics.median(xs), 1000 * xs[int(0.99 * (len(xs) - 1))], 1000 * xs[-1]) if xs else (0, 0, 0)

        return {"mode": mode, "idle": stats(lat["idle"]), "attack": stats(lat["attack"]), "statuses": statuses,
                "slowest": slowest, "rss": ((peak[0] - base_own) / 2**20, (peak[1] - base_total) / 2**20),
                "hostile": len(hostile), "failures": failures}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)  # docs/performance.md: --rounds 3
    ap.add_argument("--modes", default="workers,inline")
    args = ap.parse_args()
    rows = [measure(mode, args.rounds) for mode in args.modes.split(",")]
    print(f"{rows[0]['hostile']} hostile runs x {args.rounds} rounds; the other session polls /api/runs and a cached answer")
    print("| conversions | other session idle: median / p99 / max ms | under hostile files: median / p99 / max ms "
          "| hostile answers | slowest hostile answer | peak RSS over baseline: server / process tree |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        i, a = r["idle"], r["attack"]
        st = ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items()))
        print(f"| {r['mode']} | {i[0]:.1f} / {i[1]:.1f} / {i[2]:.1f} | {a[0]:.1f} / {a[1]:.1f} / {a[2]:.1f} | {st} "
              f"| {r['slowest']:.2f} s | {r['rss'][0]:.0f} MiB / {r['rss'][1]:.0f} MiB |")
    for r in rows:
        for f in r["failures"]:
            print(f"{r['mode']}: {f}")


if __name__ == "__main__":
    main()
