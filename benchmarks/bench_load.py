"""Load: N users browsing a 16-host pod session while it converts (issue 18).

    .venv/bin/python benchmarks/bench_load.py [--users 20] [--seconds 60] [--hosts 16]
        [--dask-workers 2] [--demo-only] [--fixtures DIR] [--think 0]

Starts ``profscope serve`` as a subprocess on 127.0.0.1 with a fresh cache folder (the
first requests start the conversions), runs the users (src/profscope/testing/load.py),
stops the server by itself after --seconds, and prints a markdown table: requests,
errors (5xx, exceptions, timeouts), 4xx by route, p50/p90/p99/max latency overall and
per route, the server's peak RSS and its children's, conversions done by the end. The
session: copies of the demo's xplanes and, unless --demo-only, of the real public
GPU/TPU/ROCm xplanes in the shared fixtures folder (--fixtures, default
$PROFSCOPE_SHARED_FIXTURES or ../shared/fixtures beside the checkout;
src/profscope/testing/pod_session.py).
Exit status 1 when there was any error or 4xx.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from profscope.testing.load import markdown, run_load  # noqa: E402
from profscope.testing.pod_session import SESSION, build_pod_session  # noqa: E402
from profscope.testing.shared_fixtures import default_shared_fixtures  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--hosts", type=int, default=16)
    p.add_argument("--timeout", type=float, default=60, help="per request, seconds")
    p.add_argument("--dask-workers", type=int, default=0)
    p.add_argument("--think", type=float, default=0.0, help="mean pause between a user's requests, seconds")
    p.add_argument("--demo-only", action="store_true", help="only the demo's xplanes, not the public ones")
    p.add_argument("--fixtures", type=Path, default=default_shared_fixtures(),
                   help="the shared fixtures folder (default: $PROFSCOPE_SHARED_FIXTURES or ../shared/fixtures)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="profscope-bench-load-") as tmp:
        made = build_pod_session(Path(tmp) / "logs", args.hosts, public=not args.demo_only, fixtures=args.fixtures)
        total = sum(f.stat().st_size for f in made.values())
        kinds = sorted({f.parents[3].name for f in made.values()})
        print(f"session: {args.hosts} hosts, {total / 1e6:.1f} MB of xplane, copies of {', '.join(kinds)}; "
              f"{os.cpu_count()} cores; think {args.think:g} s\n")
        result = run_load(Path(tmp) / "logs", run=SESSION, hosts=list(made), users=args.users,
                          seconds=args.seconds, timeout=args.timeout, dask_workers=args.dask_workers,
                          seed=args.seed, think_s=args.think)
    print(markdown(result))
    return 1 if result.errors or result.client_errors else 0


if __name__ == "__main__":
    sys.exit(main())
