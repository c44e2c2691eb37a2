#!/usr/bin/env python3
"""XProf's ``trace_viewer@`` at XProf's UI resolution on a big real profile: profscope vs
XProf 2.24.2 in the same run, time and agreement.

The input is a real JAX profile made by ``scripts/make_big_jax_profile.py`` (``--steps``,
default 300, a small one; 6500 steps: ~47 MB, 2 M events, over XProf's 500,000-event
filtering threshold, as in docs/performance.md) or ``--xplane``. Three requests, as XProf's UI sends them: the whole trace at resolution
4040, then the middle tenth at 4040, then the whole trace again. profscope answers
through its real data route (cold cache: the index is built by the first request, and
XProf's zoom levels are computed as deep as each request needs); XProf converts with
``xspace_to_tool_data`` in its own process (``--xprof-python`` or ``$XPROF_PYTHON``; a
scratch venv with ``xprof==2.24.2``, never a profscope dependency; without either, XProf
is skipped with a message and only profscope is timed). Prints the seconds of each, the
ratio, and how many of XProf's events profscope returns (and the other way).

Usage::

    .venv/bin/python benchmarks/bench_trace_visibility.py                  # profscope only, small
    XPROF_PYTHON=<venv>/bin/python .venv/bin/python benchmarks/bench_trace_visibility.py --steps 6500
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

REPO = pathlib.Path(__file__).resolve().parent.parent

_XPROF = r"""
import json, sys, time
from xprof.convert import raw_to_tool_data as r
path, reqs = sys.argv[1], json.loads(sys.argv[2])
out = []
for o in reqs:
    t = time.perf_counter()
    d = json.loads(r.xspace_to_tool_data([path], "trace_viewer@", {"trace_viewer_options": o})[0])
    out.append({"s": time.perf_counter() - t, "fullTimespan": d["fullTimespan"],
                "x": [[e["name"], e["pid"], e["tid"], e["ts"], e["dur"]] for e in d["traceEvents"] if e["ph"] == "X"]})
print(json.dumps(out))
"""


def _key(name, pid, tid, ts, dur):
    return (name, pid, tid, round(ts * 1e6), round(dur * 1e6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xplane", type=pathlib.Path)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--xprof-python", default=os.environ.get("XPROF_PYTHON"),
                    help="python of a venv with xprof==2.24.2 (default: $XPROF_PYTHON; unset: XProf is skipped)")
    ap.add_argument("--workdir", type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()) / "profscope-bench-vis")
    args = ap.parse_args()
    if not args.xprof_python:
        print("XProf: skipped (set XPROF_PYTHON or give --xprof-python: a venv's python with xprof==2.24.2)")
    xplane = args.xplane
    if xplane is None:
        out = args.workdir / f"profile-{args.steps}"
        if not list(out.glob("plugins/profile/*/*.xplane.pb")):
            subprocess.run([sys.executable, str(REPO / "scripts" / "make_big_jax_profile.py"), "--out", str(out),
                            "--steps", str(args.steps)], check=True)
        xplane = next(out.glob("plugins/profile/*/*.xplane.pb"))
    print(f"input: {xplane} ({xplane.stat().st_size / 2**20:.1f} MiB)")

    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        session = tmp / "logdir" / "run" / "plugins" / "profile" / "s"
        session.mkdir(parents=True)
        shutil.copyfile(xplane, session / xplane.name)
        client = TestClient(create_app(Workspace(LogDir(str(tmp / "logdir"), listing_ttl=0), DiskCache(tmp / "cache"))))
        run = "run/s"

        def ours(**params):
            t = time.perf_counter()
            d = client.get("/data/plugin/profile/data", params={"run": run, "tag": "trace_viewer@", **params}).json()
            return time.perf_counter() - t, d

        t_whole, whole = ours(resolution=4040)
        lo, hi = whole["fullTimespan"]
        win = {"resolution": "4040", "start_time_ms": repr(lo + 0.45 * (hi - lo)), "end_time_ms": repr(lo + 0.55 * (hi - lo))}
        t_win, window = ours(**win)
        t_again, _ = ours(resolution=4040)

        copy = tmp / "xprof" / xplane.name  # XProf writes side files next to its input
        copy.parent.mkdir()
        shutil.copyfile(xplane, copy)
        reqs = [{"resolution": "4040"}, win, {"resolution": "4040"}]
        theirs = None
        if args.xprof_python:
            proc = subprocess.run([args.xprof_python, "-c", _XPROF, str(copy), json.dumps(reqs)], capture_output=True,
                                  text=True, check=True)
            theirs = json.loads(proc.stdout.strip().splitlines()[-1])

    answers = (("whole trace @4040, cold", t_whole, whole), ("middle tenth @4040", t_win, window),
               ("whole trace @4040, again", t_again, whole))
    if theirs is None:
        print(f"{'request':<34}{'profscope s':>12}{'events':>10}")
        for label, t, d in answers:
            print(f"{label:<34}{t:>12.2f}{sum(1 for e in d['traceEvents'] if e['ph'] == 'X'):>10,}")
        return
    print(f"{'request':<34}{'profscope s':>12}{'XProf s':>10}{'ratio':>8}{'XProf events':>14}{'same':>8}")
    for (label, t, d), x in zip(answers, theirs):
        mine = Counter(_key(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in d["traceEvents"] if e["ph"] == "X")
        want = Counter(_key(*e) for e in x["x"])
        same = sum((mine & want).values())
        print(f"{label:<34}{t:>12.2f}{x['s']:>10.2f}{t / x['s']:>8.2f}{sum(want.values()):>14,}"
              f"{same / max(1, sum(want.values())):>8.1%}  (ours {sum(mine.values()):,})")


if __name__ == "__main__":
    main()
