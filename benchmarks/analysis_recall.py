#!/usr/bin/env python3
"""The Summary's planted-problems suite (issue 35): recall at the right priority and P0s
on healthy runs, and the cold time of every public fixture's summary.

1. **Planted**: every case of ``profscope.testing.planted`` (builders, pairs, real JAX
   and PyTorch programs from ``tests/data`` and the demo) written into a temporary log
   directory and summarised by a fresh workspace through the data API; per case: found,
   missed, wrong priority (with the priority given), the healthy cases' P0s. Then the
   recall (planted problems found at their priority / planted) and the false-P0 count.
   The bar (issue 35): recall >= 90 %, no P0 on a healthy run.
2. **Healthy real runs**: the demo's healthy runs (its JAX/TF CPU profiles, PyTorch
   traces without a leak, the XLA dump) and the real fixtures that have no problem
   (``planted.REAL_HEALTHY``): their P0 findings, if any, count as false P0s too.
3. **Cold timing**: every run of the public fixtures (``public_profiles``: xplane
   sessions, ALL_HOSTS for multi-host sessions, PyTorch traces, snapshots, the corrupt and
   LFS-pointer files included), each on a fresh cache, timed around its summary request.
   The bar (issue 35): under 30 s all together. Printed, never asserted.

Usage: ``.venv/bin/python benchmarks/analysis_recall.py [--fixtures DIR] [--json FILE] [--no-timing]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from profscope.testing import planted

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"


def _client(logdir: Path, cache: Path):
    from profscope.testing.planted import client_for

    return client_for(logdir, cache)


def summary(client, run: str, host: str | None = None):
    from profscope.testing.planted import summary_response

    return summary_response(client, run, host)


def planted_report(tmp: Path) -> dict:
    from profscope.testing import planted

    runs = planted.build_logdir(tmp / "logdir", ROOT / "tests" / "data")
    rows = planted.evaluate(tmp / "logdir", tmp / "cache", runs)
    return planted.score(rows)


def healthy_runs(logdir: Path, prefixes: tuple[str, ...], cache: Path) -> list[dict]:
    """The P0 findings of every run of ``logdir`` whose name starts with one of ``prefixes``."""
    client = _client(logdir, cache)
    out = []
    for run in client.get("/data/plugin/profile/runs").json():
        if not run.startswith(prefixes):
            continue
        r = summary(client, run)
        body = r.json()
        p0 = sorted({f["id"] for f in body.get("findings") or [] if f.get("priority") == "P0"})
        out.append({"run": run, "status": r.status_code, "verdict": body.get("status"), "p0": p0})
    return out


def fixture_runs(fixtures: Path) -> tuple[Path, list[tuple[str, str | None]]]:
    """The public fixtures folder as one log directory and its (run, host) pairs: every
    run, and ALL_HOSTS for a session of several hosts."""
    logdir = fixtures / "public_profiles"
    with tempfile.TemporaryDirectory() as tmp:
        client = _client(logdir, Path(tmp))
        pairs = []
        for run in client.get("/data/plugin/profile/runs").json():
            pairs.append((run, None))
            hosts = client.get("/data/plugin/profile/hosts", params={"run": run, "tag": "summary"})
            if hosts.status_code == 200 and len(hosts.json()) > 1:
                pairs.append((run, "ALL_HOSTS"))
    return logdir, pairs


def cold_timing(fixtures: Path) -> list[dict]:
    logdir, pairs = fixture_runs(fixtures)
    out = []
    for run, host in pairs:
        with tempfile.TemporaryDirectory() as tmp:
            client = _client(logdir, Path(tmp))
            t = time.perf_counter()
            r = summary(client, run, host)
            wall = time.perf_counter() - t
        body = r.json()
        out.append({"run": run, "host": host, "status": r.status_code, "wall_s": round(wall, 3),
                    "verdict": body.get("status"), "findings": len(body.get("findings") or []),
                    "refused": len(body.get("refused") or [])})
    return out


def _print_planted(rep: dict) -> None:
    print(f"{'case':36} {'family':12} found / wrong / missed   (P0 on healthy)")
    for c in rep["cases"]:
        wrong = ", ".join(f"{r} {p} (got {'/'.join(g)})" for r, p, g in c["wrong"])
        missed = ", ".join(f"{r} {p}" for r, p in c["missed"])
        tag = "healthy" if c["healthy"] else ""
        print(f"{c['case']:36} {c['family']:12} {len(c['found'])} / {len(c['wrong'])} / {len(c['missed'])}"
              f"{'  wrong: ' + wrong if wrong else ''}{'  missed: ' + missed if missed else ''}"
              f"{'  ' + tag + ' P0: ' + ','.join(c['p0']) if c['p0'] else ''}{'  error: ' + c['error'] if c['error'] else ''}")
    print(f"planted problems: {rep['planted']}, found at the right priority: {rep['found']}, "
          f"recall {100 * (rep['recall'] or 0):.1f} % (bar >= 90 %), false P0 on planted healthy runs: {rep['false_p0']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", type=Path,
                    default=Path(os.environ.get("PROFSCOPE_SHARED_FIXTURES") or ROOT.parent / "shared" / "fixtures"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-timing", action="store_true")
    args = ap.parse_args(argv)
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        result["planted"] = planted_report(Path(tmp))
        _print_planted(result["planted"])
        result["demo_healthy"] = healthy_runs(DEMO, planted.DEMO_HEALTHY, Path(tmp) / "demo_cache")
        if (args.fixtures / "public_profiles").is_dir():
            result["real_healthy"] = healthy_runs(args.fixtures / "public_profiles", planted.REAL_HEALTHY, Path(tmp) / "pub_cache")
    healthy = result["demo_healthy"] + result.get("real_healthy", [])
    for h in healthy:
        print(f"healthy {h['run']:60} {h['status']} {h['verdict']} P0: {','.join(h['p0']) or '-'}")
    print(f"false P0 on the demo's healthy runs and the problem-free real fixtures: {sum(len(h['p0']) for h in healthy)}")
    if not args.no_timing and (args.fixtures / "public_profiles").is_dir():
        result["timing"] = cold_timing(args.fixtures)
        for t in result["timing"]:
            print(f"cold {t['run']:60} {t['host'] or '':9} {t['status']} {t['wall_s']:7.2f} s  {t['verdict']} "
                  f"{t['findings']} findings, {t['refused']} refused")
        print(f"all public fixtures' summaries, cold: {sum(t['wall_s'] for t in result['timing']):.1f} s (bar < 30 s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=list) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
