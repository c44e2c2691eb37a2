#!/usr/bin/env python3
"""Decode-only timing of an XSpace for the trace viewer: ``xplane_trace.read_trace`` with
a sink that discards the event columns (no index build), once with the native scanner
(``profscope.formats._xplane_scan``) and once with the numpy path, in fresh processes so
each peak RSS (``VmHWM``) is its own.

Usage::

    .venv/bin/python benchmarks/bench_xplane_decode.py [FILE.xplane.pb] [--paths native numpy]

FILE defaults to the bundled demo's transformer profile (small: what ``make bench`` runs);
docs/performance.md's numbers are on ``scripts/make_big_jax_profile.py --steps 44000``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from bench_trace_viewer import vm_hwm_mib  # a sibling script: this folder is on sys.path

REPO = pathlib.Path(__file__).resolve().parent.parent


class _Discard:
    def __init__(self):
        self.n = 0

    def events(self, track, start, dur, name, args_off, args_len):
        self.n += len(track)

    def blob(self, buffer, source_offset=None):
        pass

    def flow_events(self, *columns):
        pass


def worker(path: str) -> dict:
    from profscope.formats import xplane_trace, xplane_wire

    sink = _Discard()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        xplane_trace.read_trace(f, path, sink=sink)
    return {"native": xplane_wire.native_enabled(), "seconds": round(time.perf_counter() - t0, 3),
            "events": sink.n, "peak_rss_mib": round(vm_hwm_mib(), 1),
            "file_mib": round(os.path.getsize(path) / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("xplane", nargs="?")
    ap.add_argument("--paths", nargs="+", default=["native", "numpy"], choices=["native", "numpy"])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.xplane is None:
        from profscope.cli import demo_logdir

        args.xplane = str(next((demo_logdir() / "transformer").rglob("*.xplane.pb")))
    if args.worker:
        print(json.dumps(worker(args.xplane)))
        return
    for p in args.paths:
        env = dict(os.environ, PROFSCOPE_NATIVE="1" if p == "native" else "0")
        out = subprocess.run([sys.executable, __file__, args.xplane, "--worker"], env=env, cwd=REPO,
                             capture_output=True, text=True, check=True)
        print(p, out.stdout.strip())


if __name__ == "__main__":
    main()
