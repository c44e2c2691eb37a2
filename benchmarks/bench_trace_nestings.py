#!/usr/bin/env python3
"""XProf's visibility filter on degenerate nestings (issue 32): CPU and wall seconds of
``trace_viewer@`` over traces from ``profscope.testing.nestings`` (identical nested
events, one deep chain, wide siblings, zero-duration piles).

For each shape and size, two measurements:

* ``levels``/``window``: the passes alone, in this process, on an index built here:
  every one of XProf's zoom levels (``trace_index.write_zoom_levels``, what a conversion
  worker runs; past ``XPROF_LEVELS_MAX`` events the server does without them, timed
  anyway) and the whole-trace window's pass at 8000 px (``TraceIndex.xprof_visible``,
  what the server runs per request).
* ``request``: ``GET /data/plugin/profile/data?tag=trace_viewer@`` through the real app
  and its worker pool, cold (the index and the zoom levels are built in workers) and
  again: the server's own CPU (this process) beside the workers' (reaped children).

Prints one line per measurement; never asserts. Usage::

    .venv/bin/python benchmarks/bench_trace_nestings.py                       # 520 k and 1 M events
    .venv/bin/python benchmarks/bench_trace_nestings.py --sizes 520000 1000000 5000000
    .venv/bin/python benchmarks/bench_trace_nestings.py --shapes identical --sizes 633000 --gz
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import tempfile
import time


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class Clock:
    """Wall seconds, this process's CPU seconds and its reaped children's."""

    def __enter__(self):
        self.t, self.me, self.kids = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.self_cpu = _cpu(resource.RUSAGE_SELF) - self.me
        self.workers_cpu = _cpu(resource.RUSAGE_CHILDREN) - self.kids

    def line(self) -> str:
        return f"wall {self.wall:7.2f} s  cpu: server {self.self_cpu:7.2f} s, workers {self.workers_cpu:7.2f} s"


def passes(path: pathlib.Path, work: pathlib.Path) -> None:
    from profscope.formats import chrome_trace
    from profscope.tools import trace_index as ti
    from profscope.tools import trace_visibility as tv

    folder = work / "index"
    folder.mkdir()
    with open(path, "rb") as f:
        ti.build_index(chrome_trace.trace_columns(f, str(path)), folder)
    ix = ti.TraceIndex(folder)
    out = work / "levels"
    out.mkdir()
    with Clock() as c:
        ti.write_zoom_levels(folder, out)
    note = "  (past XPROF_LEVELS_MAX: the server does without)" if ix.n > tv.XPROF_LEVELS_MAX else ""
    print(f"    levels (every one of 13)     {c.line()}{note}")
    if ix.n <= tv.XPROF_LEVELS_MAX:
        ix.use_zoom_levels(out)
    with Clock() as c:
        sl = ix.xprof_visible(0, ix.end_ps, 8000)
    print(f"    window pass, whole @8000 px  {c.line()}  -> {len(sl['rows']):,} events kept")


def request(path: pathlib.Path, work: pathlib.Path) -> None:
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server import create_app
    from profscope.storage import LogDir

    logdir = path.parent
    client = TestClient(create_app(Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(work / "cache"))))
    params = {"run": path.name, "tag": "trace_viewer@"}
    for label in ("cold", "again"):
        with Clock() as c:
            r = client.get("/data/plugin/profile/data", params=params)
        size = len(r.content)
        n = r.content.count(b'"ph":"X"')
        print(f"    request {label:<5} -> {r.status_code}     {c.line()}  -> {n:,} events, {size / 2**20:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=None)
    ap.add_argument("--sizes", nargs="+", type=int, default=[520_000, 1_000_000])
    ap.add_argument("--gz", action="store_true", help="gzip the traces (identical past 256 MiB is then a bomb)")
    ap.add_argument("--no-request", action="store_true", help="only the passes, not the server")
    args = ap.parse_args()
    from profscope.testing import nestings

    for shape in args.shapes or nestings.SHAPES:
        for n in args.sizes:
            with tempfile.TemporaryDirectory() as tmp:
                tmp = pathlib.Path(tmp)
                (tmp / "logs").mkdir()
                path = nestings.write(tmp / "logs" / f"{shape}.pt.trace.json{'.gz' if args.gz else ''}", shape, n)
                print(f"{shape} x {n:,} events ({path.stat().st_size / 2**20:.1f} MiB)")
                (tmp / "p").mkdir()
                passes(path, tmp / "p")
                if not args.no_request:
                    (tmp / "r").mkdir()
                    request(path, tmp / "r")


if __name__ == "__main__":
    main()
