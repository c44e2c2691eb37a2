#!/usr/bin/env python3
"""Compare (issue 36, docs/compare.md): a warm diff against the two warm single answers
it is made of, through the server's data route (a TestClient over the workspace, so the
JSON encoding is counted), conversions in this process (``WorkerPool(enabled=False)``).

Pairs:

- the public TF GPU session, host against host (``base_host``): Steps & ops, Memory
  profile, OOM risk, Summary; the public MI300 GEMM run, module against module
  (``base_module``): the memory viewer;
- two PyTorch snapshots, run against run (``base``): Memory profile, OOM risk, Summary.
  By default two made on the spot by ``scripts/make_big_snapshot.py`` (``--snapshot-mb``,
  seeds 0 and 1, under a temporary folder, never the repo); ``--snapshots A B`` takes two
  files (the issue's bar: two 1 GB snapshots' cached models, ``--snapshot-mb 1000``).

Per tool: the cold diff (both single answers converted: the cost of the first compare),
then the **warm diff** (median of ``--repeat``: what every later request costs; the bar
is under 1 s), the **warm singles** (the two single answers requested one after the
other, the same cached payloads the diff reads), their ratio, and the CPU seconds of the
warm diff. Prints one line per measurement and, with ``--json FILE``, all of them; never
asserts.

Usage::

    .venv/bin/python benchmarks/bench_compare.py [--snapshot-mb 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
TF_HOSTS = ("34.83.195.179_6003", "34.83.195.180_6003")
MI300 = "xplane/mi300_jax08_gemm/jax08_gemm"
MI300_MODULES = ("jit_dot(21)", "jit_dot(34)")


def _client(logdir: Path, cache: Path):
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.server import create_app
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(logdir), listing_ttl=60), DiskCache(cache, workers=WorkerPool(enabled=False)))
    return TestClient(create_app(ws))


def _timed(client, params: dict) -> tuple[float, float, int]:
    """Wall and CPU seconds of one data-route request, and the answer's size."""
    wall, cpu = time.perf_counter(), time.process_time()
    res = client.get("/data/plugin/profile/data", params=params)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if res.status_code != 200:
        raise SystemExit(f"{params}: HTTP {res.status_code} {res.text[:300]}")
    return wall, cpu, len(res.content)


def measure(client, label: str, tag: str, current: dict, base: dict, diff: dict, repeat: int) -> dict:
    cold = _timed(client, {"tag": tag, **diff})
    warm = [_timed(client, {"tag": tag, **diff}) for _ in range(repeat)]
    singles = [(_timed(client, {"tag": tag, **base}), _timed(client, {"tag": tag, **current})) for _ in range(repeat)]
    warm_s = statistics.median(w for w, _, _ in warm)
    warm_cpu = statistics.median(c for _, c, _ in warm)
    single_s = statistics.median(b[0] + c[0] for b, c in singles)
    row = {"pair": label, "tool": tag, "cold_diff_s": round(cold[0], 3), "warm_diff_s": round(warm_s, 3),
           "warm_diff_cpu_s": round(warm_cpu, 3), "warm_singles_s": round(single_s, 3),
           "ratio": round(warm_s / single_s, 2) if single_s else None, "diff_bytes": warm[0][2]}
    print(f"{label:28} {tag:15} cold {row['cold_diff_s']:7.3f} s  warm diff {row['warm_diff_s']:6.3f} s "
          f"({row['warm_diff_cpu_s']:.3f} CPU s)  warm singles {row['warm_singles_s']:6.3f} s  "
          f"ratio {row['ratio']}  {row['diff_bytes'] / 1024:.0f} KiB", flush=True)
    return row


def _snapshots(args, logdir: Path) -> None:
    """a.pickle and b.pickle in ``logdir``: hard links to the files given (a symlink out of
    a log directory is refused, a copy of 1 GB is slow), else two made there."""
    for seed, name in enumerate(("a.pickle", "b.pickle")):
        if args.snapshots:
            try:
                os.link(args.snapshots[seed], logdir / name)
            except OSError:
                shutil.copy(args.snapshots[seed], logdir / name)
        else:
            subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_snapshot.py"), str(logdir / name),
                            "--target-mb", str(args.snapshot_mb), "--seed", str(seed)], check=True,
                           stdout=subprocess.DEVNULL)


def main() -> None:
    from profscope.testing.shared_fixtures import shared_fixtures_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshots", nargs=2, metavar=("A", "B"), help="two snapshot files (default: two made here)")
    ap.add_argument("--snapshot-mb", type=int, default=50, help="size of the snapshots made here (default 50)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fixtures = shared_fixtures_dir()
        if fixtures is not None:
            client = _client(fixtures / "public_profiles", tmp / "cache-tf")
            for tag in ("steps_ops", "memory_profile", "oom_risk", "summary"):
                base, current = ({"run": TF_GPU, "host": h} for h in TF_HOSTS)
                rows.append(measure(client, "TF GPU host vs host", tag, current, base,
                                    {**current, "base_host": TF_HOSTS[0]}, args.repeat))
            # the memory viewer: two compilations of one program in the MI300 GEMM run
            # (view=page: the answer the page asks for)
            base, current = ({"run": MI300, "module_name": m, "view": "page"} for m in MI300_MODULES)
            rows.append(measure(client, "MI300 module vs module", "memory_viewer", current, base,
                                {**current, "base_module": MI300_MODULES[0]}, args.repeat))
        logdir = tmp / "snapshots"
        logdir.mkdir()
        _snapshots(args, logdir)
        mb = sum(p.stat().st_size for p in logdir.iterdir()) / 2**20
        client = _client(logdir, tmp / "cache-snap")
        for tag in ("memory_profile", "oom_risk", "summary"):
            rows.append(measure(client, f"snapshots ({mb:.0f} MB both)", tag, {"run": "b.pickle"}, {"run": "a.pickle"},
                                {"run": "b.pickle", "base": "a.pickle"}, args.repeat))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
